"""Input that must never make stm slow or write what it cannot read back, in every
front end: the 1 MiB text limit, JSON as RFC 8259, bounded regex search, text that is not
UTF-8 through MCP."""

from __future__ import annotations

import json

import pytest
from conftest import snapshot

import stm

BIG = "x" * (3 * 1024 * 1024)


@pytest.fixture
def mcp(store):
    """start() -> an `stm mcp` process on the store (tests/mcp_client.py); all reaped."""
    from mcp_client import McpClient

    clients = []

    def start():
        clients.append(McpClient(stacks=store / ".stacks", cwd=store))
        return clients[-1]

    yield start
    for client in clients:
        client.kill()


@pytest.mark.parametrize(
    "tool, arguments, named",
    [
        ("log", {"text": BIG}, "text"),
        ("note", {"section": "Status", "text": BIG}, "text"),
        ("note", {"section": "S" * (3 * 1024 * 1024), "text": "x"}, "section"),
        ("session_new", {"name": BIG}, "name"),
        ("search", {"query": BIG}, "query"),
    ],
    ids=["log-text", "note-text", "note-section", "session-name", "search-query"],
)
def test_mcp_refuses_text_over_the_cli_limit_naming_the_argument(
    store, mcp, tool, arguments, named
):
    before = snapshot(store)
    client = mcp()
    result = client.tool_result(tool, arguments)
    assert result["isError"] is True
    message = result["content"][0]["text"]
    assert message.startswith("stm: error:") and repr(named) in message and "1 MiB" in message
    assert len(message) < 300
    assert snapshot(store) == before
    assert client.tool_result("status", {})["isError"] is False  # the server goes on
    assert client.close() == 0


@pytest.mark.parametrize(
    "operation",
    [
        lambda s: stm.append_log(s, BIG),
        lambda s: stm.add_memory_note(s, "Status", BIG),
        lambda s: stm.add_memory_note(s, "S" * 5000, "x"),
    ],
    ids=["append_log", "add_memory_note", "note-section-name"],
)
def test_the_operations_themselves_refuse_text_over_the_limit(store, operation):
    before = snapshot(store)
    s = stm.open_store(stacks=str(store / ".stacks"))
    with pytest.raises(stm.StmError) as refused:
        operation(s)
    assert refused.value.code == 2
    assert snapshot(store) == before


def strict_json(line: bytes):
    """Parse like a strict client: NaN, Infinity and numbers out of range are errors."""

    def refuse(token):
        raise ValueError(f"non-standard JSON: {token}")

    def finite(text):
        value = float(text)
        if value in (float("inf"), float("-inf")):
            raise ValueError(f"out of range: {text}")
        return value

    return json.loads(line, parse_constant=refuse, parse_float=finite)


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
@pytest.mark.parametrize("where", ["argument", "version", "id"])
def test_mcp_refuses_non_standard_numbers_and_never_writes_them(store, mcp, number, where):
    client = mcp()
    meta = json.dumps(MODERN_META)
    if where == "argument":
        params = f'{{"_meta": {meta}, "name": "boot", "arguments": {{"max_chars": {number}}}}}'
    elif where == "version":
        params = f'{{"_meta": {{"io.modelcontextprotocol/protocolVersion": {number}}}}}'
    else:
        params = f'{{"_meta": {meta}, "name": "status"}}'
    request_id = number if where == "id" else "7"
    line = f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", "params": {params}}}'
    client.send_raw(line.encode() + b"\n")
    answer = client.recv()
    assert answer["error"]["code"] == -32700 and answer["id"] is None, answer
    assert client.tool_result("status", {})["isError"] is False  # the server goes on
    assert client.close() == 0
    for line in client.lines:
        strict_json(line)  # every line the server wrote is standard JSON


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
@pytest.mark.parametrize(
    "argv, path",
    [
        (["setup", "claude", "--install"], ".claude/settings.json"),
        (["setup", "claude", "--remove"], ".claude/settings.json"),
        (["setup", "mcp", "--install"], ".mcp.json"),
    ],
    ids=["claude-install", "claude-remove", "mcp-install"],
)
def test_setup_refuses_a_settings_file_holding_a_non_standard_number(
    store, run, number, argv, path
):
    target = store / path
    target.parent.mkdir(exist_ok=True)
    target.write_text(f'{{"timeout": {number}, "hooks": {{"SessionStart": []}}}}\n')
    before = snapshot(store)
    result = run(*argv)
    assert result.code == 1, result
    assert result.err.count("\n") == 1 and path.split("/")[-1] in result.err
    assert snapshot(store) == before


@pytest.mark.parametrize("number", ["NaN", "1e999"])
def test_a_state_file_holding_a_non_standard_number_is_reported_not_used(store, run, number):
    sid = run("session", "new", "--name", "x").out.strip()
    state = next((store / ".state" / "sessions").glob(f"*/{sid}/state.json"), None) or next(
        (store / ".state" / "sessions").glob(f"{sid}/state.json")
    )
    data = state.read_text()
    state.write_text(data.replace('"version": 1', f'"version": 1, "x": {number}'))
    before = snapshot(store)
    assert run("session", "checkpoint", "--done", "a").code == 1
    assert snapshot(store) == before
    found = json.loads(run("check", "--json").out)
    assert any(f["path"].endswith("state.json") for f in found["findings"])


# Each of these backtracks exponentially (or worse) on a line of ~40 characters.
CATASTROPHIC = [
    "(a+)+$",
    "(a*)*b",
    "(?:a|aa)+$",
    "(a?a?)+$",
    "(\\w+\\s?)*$",
    "(x+x+)+y",
    "(a){2,}(a+)+$",
    "^(a|a?)+$",
    "(.*a){20}",
    "(a+){30}$",
    "(?=(a+)+$)",
    "(a)\\1*$",
]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_catastrophic_regex_is_refused_before_any_line_is_read(store, run, pattern):
    (store / ".stacks" / "MEMORY.md").write_text("# M\n\n## S\n\n" + "a" * 41 + "!\n")
    result = run("search", "--regex", pattern)
    assert result.code == 2 and result.out == ""
    assert result.err.count("\n") == 1 and "regex" in result.err


@pytest.mark.parametrize(
    "pattern",
    ["parser|lexer", "^## ", "grammar.*bugs", "\\bport(ed)?\\b", "[0-9]{4}-[0-9]{2}", "(ab)+c"],
)
def test_ordinary_regexes_still_search(store, run, pattern):
    assert run("search", "--regex", pattern).code in (0, 1)  # found or not; never refused


def test_the_mcp_search_tool_refuses_a_catastrophic_regex_and_goes_on(store, mcp):
    (store / ".stacks" / "MEMORY.md").write_text("# M\n\n## S\n\n" + "a" * 41 + "!\n")
    client = mcp()
    refused = client.tool_result("search", {"query": "(a+)+$", "regex": True})
    assert refused["isError"] is True and "regex" in refused["content"][0]["text"]
    found = client.tool_result("search", {"query": "a+!", "regex": True})
    assert found["isError"] is False and found["structuredContent"]["matches"]
    assert client.close() == 0


def test_a_regex_that_is_only_polynomial_is_stopped_by_the_time_budget(store, run, monkeypatch):
    """`a.*b` passes the static rule but is quadratic on a long line of a's: the search
    stops when its matching has used the budget (made tiny here), exit 2, one line."""
    (store / ".stacks" / "MEMORY.md").write_text("# M\n\n## S\n\n" + "a" * 400_000 + "\n")
    monkeypatch.setattr(stm, "REGEX_BUDGET_S", 0.2)
    result = run("search", "--regex", "a.*b")
    assert result.code == 2 and result.err.count("\n") == 1 and "regex" in result.err
    import signal

    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)  # handler put back
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # timer put back
    assert run("search", "--regex", "a{3}$").code == 0  # the next search is not affected


def test_mcp_text_that_is_not_utf8_is_a_tool_error(store):
    server = stm.McpServer(stacks=str(store / ".stacks"))
    line = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "log", "arguments": {"text": "\ud800 lone"}},
        }
    ).encode()
    answer = server.answer(line)
    assert answer["result"]["isError"] is True
    assert "not valid UTF-8" in answer["result"]["content"][0]["text"]
