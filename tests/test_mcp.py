"""`stm mcp`: the stdio MCP server, driven by an independent client (tests/mcp_client.py).

Wire rules come from the MCP specification (2026-07-28 stateless revision, and the
initialize-based 2025-11-25 .. 2024-11-05 revisions); stm's own rules from its issue.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

import pytest
from conftest import IDENTITY, MEMORY, ROOT, STM_PY, clock
from mcp_client import (
    CLIENT_INFO,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LATEST_LEGACY,
    LEGACY_RESOURCE_NOT_FOUND,
    LEGACY_VERSIONS,
    METHOD_NOT_FOUND,
    MODERN,
    PARSE_ERROR,
    SERVER_INFO,
    UNSUPPORTED_PROTOCOL_VERSION,
    McpClient,
    modern_meta,
)

import stm

TOOL_ORDER = [
    "boot",
    "log",
    "note",
    "search",
    "status",
    "read_ref",
    "session_new",
    "session_phase",
    "session_checkpoint",
]
# tool -> (required arguments, optional arguments)
TOOL_ARGS = {
    "boot": (set(), {"max_tokens", "max_chars"}),
    "log": ({"text"}, set()),
    "note": ({"section", "text"}, {"replace", "create"}),
    "search": ({"query"}, {"layer", "since", "regex", "rank", "limit"}),
    "status": (set(), set()),
    "read_ref": ({"path"}, set()),
    "session_new": ({"name"}, {"phases"}),
    "session_phase": ({"phase"}, {"session"}),
    "session_checkpoint": (
        set(),
        {"done", "pending", "resume", "note", "interrupted", "finish", "session"},
    ),
}
TOOL_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
CACHEABLE = (
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
)
MODERN_ONLY = ("resultType", "ttlMs", "cacheScope")
SEARCH_LAYERS = {"identity", "session", "refs", "logs", "sessions"}
ERAS = ("modern", "legacy")

GUIDE = "# Guide\n\nHow the parser is laid out: lexer, grammar, printer.\n"
DEPLOY = "# Deploy\n\nHow releases ship.\n"
SECRET = "ghp_" + "a" * 36

HEADER = re.compile(
    r"^## (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) · (.*) <!-- stm:entry ([0-9a-f]{8}) -->$"
)
END = re.compile(r"^<!-- stm:end ([0-9a-f]{8}) -->$")


# ---- fixtures and helpers -------------------------------------------------------------


@pytest.fixture
def mcp_project(store):
    """An initialised project (cwd) with identity, memory and two refs."""
    refs = store / ".stacks" / "refs"
    (refs / "guide.md").write_text(GUIDE)
    (refs / "deploy.md").write_text(DEPLOY)
    return store


@pytest.fixture
def server(mcp_project):
    """start(stacks=..., cwd=..., env=...) -> McpClient; every process is reaped."""
    clients = []

    def start(stacks="default", cwd=None, env=None) -> McpClient:
        if stacks == "default":
            stacks = mcp_project / ".stacks"
        client = McpClient(stacks=stacks, cwd=cwd or mcp_project, env=env)
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.kill()  # a no-op for a client already closed: reaped, pipes released


def open_era(server, era: str, **kwargs) -> McpClient:
    client = server(**kwargs)
    if era == "legacy":
        client.legacy_handshake()
    return client


def rpc(client: McpClient, era: str, method: str, params: dict | None = None) -> dict:
    return client.modern(method, params) if era == "modern" else client.legacy(method, params)


def result_of(response: dict) -> dict:
    assert "result" in response, response
    return response["result"]


def error_of(response: dict, *codes: int) -> dict:
    assert "error" in response, response
    error = response["error"]
    assert isinstance(error.get("code"), int) and isinstance(error.get("message"), str), error
    assert error["code"] in codes, response
    return error


def text_of(result: dict) -> str:
    return "\n".join(b["text"] for b in result["content"] if b.get("type") == "text")


def assert_ok(result: dict) -> None:
    assert not result.get("isError"), result


def assert_tool_error(result: dict) -> str:
    assert result.get("isError") is True, result
    message = text_of(result)
    assert message.strip(), result
    return message


def log_entries(project) -> list[dict]:
    """Every entry of every log file: file, stamp, author, id, body, complete."""
    entries = []
    for path in sorted((project / ".stacks" / "logs").glob("*.md")):
        current = None
        for line in path.read_text().splitlines():
            header = HEADER.match(line)
            end = END.match(line)
            if header:
                current = {
                    "file": path.name,
                    "stamp": header.group(1),
                    "author": header.group(2),
                    "id": header.group(3),
                    "body": [],
                    "complete": False,
                }
                entries.append(current)
            elif end and current is not None and end.group(1) == current["id"]:
                current["complete"] = True
                current = None
            elif current is not None:
                current["body"].append(line)
    for entry in entries:
        entry["body"] = "\n".join(entry["body"]).strip()
    return entries


def entries_with(project, text: str) -> list[dict]:
    return [e for e in log_entries(project) if text in e["body"]]


def utc_today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(clock()))


def section(markdown: str, name: str) -> str:
    """The body of `## name` up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(name)}[ \t]*\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    assert match, f"no section {name!r} in:\n{markdown}"
    return match.group(1)


def sessions(project) -> dict[str, dict]:
    """session id -> state.json, for the sessions of the default namespace."""
    found = {}
    for state in (project / ".state" / "sessions").glob("*/state.json"):
        found[state.parent.name] = json.loads(state.read_text())
    return found


def tools_by_name(client: McpClient, era: str) -> dict[str, dict]:
    return {tool["name"]: tool for tool in result_of(rpc(client, era, "tools/list"))["tools"]}


def as_schema_list(tool: dict, prop: str, values: list[str]):
    """A list of strings in the form the tool's schema asks for: array or comma string."""
    schema = tool["inputSchema"]["properties"][prop]
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return values if "array" in kinds else ",".join(values)


def assert_modern_result(result: dict, method: str) -> None:
    assert result.get("resultType") == "complete", (method, result)
    info = result.get("_meta", {}).get(SERVER_INFO)
    assert isinstance(info, dict), (method, result)
    assert info.get("name") == "stm" and info.get("version") == stm.__version__, (method, result)
    if method in CACHEABLE:
        ttl = result.get("ttlMs")
        assert isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 0, (method, result)
        assert result.get("cacheScope") == "private", (method, result)
    if method in ("resources/list", "resources/read"):
        assert result["ttlMs"] == 0, (method, result)


def assert_legacy_result(result: dict, method: str) -> None:
    for key in MODERN_ONLY:
        assert key not in result, (method, key, result)
    meta = result.get("_meta")
    assert meta is None or (isinstance(meta, dict) and SERVER_INFO not in meta), (method, result)


def every_method(client: McpClient, era: str) -> dict[str, dict]:
    """One successful call of every method the server serves in both eras."""
    calls = {
        "tools/list": None,
        "tools/call": {"name": "status", "arguments": {}},
        "resources/list": None,
        "resources/templates/list": None,
        "resources/read": {"uri": "stm://memory"},
        "prompts/list": None,
        "prompts/get": {"name": "boot"},
    }
    return {method: result_of(rpc(client, era, method, params)) for method, params in calls.items()}


# ---- modern era (2026-07-28): no handshake ----------------------------------------------


def test_discover_without_handshake(server):
    client = server()
    result = result_of(client.modern("server/discover"))
    assert_modern_result(result, "server/discover")
    assert result["supportedVersions"] == [MODERN]
    capabilities = result["capabilities"]
    for feature in ("tools", "resources", "prompts"):
        assert isinstance(capabilities.get(feature), dict), capabilities
    assert isinstance(result["instructions"], str) and result["instructions"].strip()
    assert client.close() == 0


def test_modern_tool_call_without_any_handshake(server, mcp_project):
    client = server()
    before = utc_today()
    result = client.tool_result("log", {"text": "first words, no handshake"})
    assert_ok(result)
    assert_modern_result(result, "tools/call")
    assert client.close() == 0
    [entry] = entries_with(mcp_project, "first words, no handshake")
    assert entry["complete"] and entry["file"] == entry["stamp"][:10] + ".md"
    assert entry["stamp"][:10] in (before, utc_today())


def test_every_modern_result_has_result_type_server_info_and_cache_hints(server):
    client = server()
    results = every_method(client, "modern")
    results["server/discover"] = result_of(client.modern("server/discover"))
    for method, result in results.items():
        assert_modern_result(result, method)
    assert client.close() == 0


def test_missing_client_capabilities_is_invalid_params(server):
    client = server()
    for method, params in (
        ("server/discover", None),
        ("tools/list", None),
        ("tools/call", {"name": "status", "arguments": {}}),
    ):
        response = client.modern(method, params, capabilities=None)
        error_of(response, INVALID_PARAMS)
    assert_modern_result(result_of(client.modern("tools/list")), "tools/list")  # still alive
    assert client.close() == 0


@pytest.mark.parametrize("version", ["1900-01-01", "2099-12-31"])
def test_unsupported_version_is_32022_with_supported_and_requested(server, version):
    client = server()
    for method in ("server/discover", "tools/list"):
        error = error_of(client.modern(method, version=version), UNSUPPORTED_PROTOCOL_VERSION)
        data = error.get("data")
        assert isinstance(data, dict), error
        assert isinstance(data.get("supported"), list) and MODERN in data["supported"], error
        assert data.get("requested") == version, error
    result_of(client.modern("server/discover"))  # the right version still works
    assert client.close() == 0


# ---- legacy era: initialize ---------------------------------------------------------------


def assert_initialize_result(result: dict, version: str) -> None:
    assert result["protocolVersion"] == version, result
    for feature in ("tools", "resources", "prompts"):
        assert isinstance(result["capabilities"].get(feature), dict), result
    assert result["serverInfo"]["name"] == "stm", result
    assert result["serverInfo"]["version"] == stm.__version__, result
    assert isinstance(result["instructions"], str) and result["instructions"].strip()
    assert_legacy_result(result, "initialize")


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_legacy_handshake_keeps_a_supported_version(server, version):
    client = server()
    assert_initialize_result(client.legacy_handshake(version), version)
    assert result_of(client.legacy("ping")) == {}
    assert client.close() == 0


@pytest.mark.parametrize("version", ["2099-01-01", "1.0.0", MODERN])
def test_legacy_handshake_answers_latest_legacy_for_other_versions(server, version):
    client = server()
    assert_initialize_result(client.legacy_handshake(version), LATEST_LEGACY)
    assert client.close() == 0


def test_legacy_results_carry_no_modern_fields(server):
    client = server()
    client.legacy_handshake()
    assert result_of(client.legacy("ping")) == {}
    for method, result in every_method(client, "legacy").items():
        assert_legacy_result(result, method)
    assert client.close() == 0


# ---- tools: the list ------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_tools_list_order_schemas_and_size(server, era):
    client = open_era(server, era)
    result = result_of(rpc(client, era, "tools/list"))
    tools = result["tools"]
    names = [tool["name"] for tool in tools]
    assert names[: len(TOOL_ORDER)] == TOOL_ORDER, names
    assert len(set(names)) == len(names), names
    for tool in tools:
        assert TOOL_NAME.match(tool["name"]), tool["name"]
        assert isinstance(tool.get("description"), str) and tool["description"].strip(), tool
        schema = tool["inputSchema"]
        assert schema.get("type") == "object", tool
        if tool["name"] not in TOOL_ARGS:
            continue  # a later addition (fact_set, ...): only the general rules
        required, optional = TOOL_ARGS[tool["name"]]
        assert set(schema.get("required", [])) == required, tool
        assert set(schema.get("properties", {})) == required | optional, tool
    search = tools[TOOL_ORDER.index("search")]
    assert search["outputSchema"].get("type") == "object", search
    assert "matches" in search["outputSchema"].get("properties", {}), search
    size = len(json.dumps(result, ensure_ascii=False, separators=(",", ":")))
    assert size < 6000, size
    assert client.close() == 0


def test_tools_list_identical_across_calls_and_eras(server):
    modern = server()
    first = result_of(modern.modern("tools/list"))["tools"]
    second = result_of(modern.modern("tools/list"))["tools"]
    legacy = server()
    legacy.legacy_handshake("2025-06-18")
    third = result_of(legacy.legacy("tools/list"))["tools"]
    fourth = result_of(legacy.legacy("tools/list"))["tools"]
    assert first == second == third == fourth
    assert json.dumps(first) == json.dumps(third)  # the same order of keys, too
    assert modern.close() == 0 and legacy.close() == 0


# ---- tools: each one, in both eras ----------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_log_tool_appends_an_entry_to_todays_log(server, mcp_project, era):
    client = open_era(server, era)
    before = utc_today()
    text = f"fixed the lexer via mcp ({era})\nsecond line"
    assert_ok(client.tool_result("log", {"text": text}, era))
    assert client.close() == 0
    [entry] = entries_with(mcp_project, f"fixed the lexer via mcp ({era})")
    assert entry["complete"], entry
    assert entry["body"] == text
    assert entry["file"] in (before + ".md", utc_today() + ".md")
    assert entry["file"] == entry["stamp"][:10] + ".md"


@pytest.mark.parametrize("era", ERAS)
def test_note_tool_adds_a_bullet_and_replaces_a_section(server, mcp_project, era):
    memory = mcp_project / ".stacks" / "MEMORY.md"
    client = open_era(server, era)
    added = client.tool_result(
        "note", {"section": "Next Steps", "text": "port the binary operators"}, era
    )
    assert_ok(added)
    body = section(memory.read_text(), "Next Steps")
    assert "port the binary operators" in body and "Port the expression grammar." in body
    assert "Parser port half done" in section(memory.read_text(), "Status")
    replaced = client.tool_result(
        "note",
        {"section": "Status", "text": "Lexer done; grammar half ported.", "replace": True},
        era,
    )
    assert_ok(replaced)
    status = section(memory.read_text(), "Status")
    assert "Lexer done; grammar half ported." in status
    assert "Parser port half done" not in status
    assert "port the binary operators" in section(memory.read_text(), "Next Steps")
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_search_tool_returns_structured_matches(server, mcp_project, era):
    client = open_era(server, era)
    for n in range(3):
        assert_ok(client.tool_result("log", {"text": f"widget number {n} polished"}, era))

    def matches(arguments):
        result = client.tool_result("search", arguments, era)
        assert_ok(result)
        found = result["structuredContent"]["matches"]
        assert isinstance(found, list), result
        for match in found:
            assert set(match) >= {"path", "line", "text", "layer"}, match
            assert isinstance(match["line"], int) and match["line"] >= 1, match
            assert match["layer"] in SEARCH_LAYERS, match
        return found

    lexer = matches({"query": "lexer"})
    assert any(m["layer"] == "session" and m["path"].endswith("MEMORY.md") for m in lexer)
    line = next(m for m in lexer if m["layer"] == "session")
    assert "lexer" in line["text"].lower()
    memory_lines = (mcp_project / ".stacks" / "MEMORY.md").read_text().splitlines()
    assert memory_lines[line["line"] - 1] == line["text"]

    only_session = matches({"query": "lexer", "layer": "session"})
    assert only_session and {m["layer"] for m in only_session} == {"session"}

    widgets = matches({"query": "WIDGET", "layer": "logs"})  # case-insensitive
    assert len(widgets) == 3 and all(m["path"].endswith(utc_today() + ".md") for m in widgets)
    assert len(matches({"query": "widget", "limit": 2})) == 2
    assert matches({"query": "widget", "layer": "logs", "since": "2999-01-01"}) == []
    assert len(matches({"query": "widget", "layer": "logs", "since": "2000-01-01"})) == 3
    assert len(matches({"query": r"widget number \d", "regex": True})) == 3
    assert matches({"query": r"widget number \d"}) == []  # literal without regex
    assert matches({"query": "no-such-words-xyzzy"}) == []  # nothing found: not an error
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_status_tool_gives_verdict_and_warnings(server, era):
    client = open_era(server, era)
    result = client.tool_result("status", {}, era)
    assert_ok(result)
    structured = result["structuredContent"]
    assert isinstance(structured["verdict"], str) and structured["verdict"], structured
    assert isinstance(structured["warnings"], list), structured
    assert text_of(result).strip()
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_read_ref_reads_refs_only(server, era):
    client = open_era(server, era)
    for path in ("guide.md", "refs/guide.md"):
        result = client.tool_result("read_ref", {"path": path}, era)
        assert_ok(result)
        assert "How the parser is laid out" in text_of(result), result
    for path in ("../AGENT.md", "/etc/passwd", "refs/../AGENT.md", "../../etc/passwd"):
        result = client.tool_result("read_ref", {"path": path}, era)
        message = assert_tool_error(result)
        assert "Maintainer of the parser project" not in message and "root:" not in message
    assert_tool_error(client.tool_result("read_ref", {"path": "no-such-ref.md"}, era))
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_session_tools_create_move_and_checkpoint(server, mcp_project, era):
    client = open_era(server, era)
    tools = tools_by_name(client, era)
    phases = as_schema_list(tools["session_new"], "phases", ["plan", "build", "ship"])
    assert_ok(client.tool_result("session_new", {"name": "port parser", "phases": phases}, era))
    [(first, state)] = sessions(mcp_project).items()
    assert state["name"] == "port parser" and state["phase"] == "plan" and state["version"] == 1
    assert (mcp_project / ".state" / "sessions" / first / "state.json").is_file()

    assert_ok(client.tool_result("session_phase", {"phase": "build"}, era))
    state = sessions(mcp_project)[first]
    assert state["phase"] == "build" and state["version"] == 2

    pending = as_schema_list(tools["session_checkpoint"], "pending", ["port grammar"])
    checkpoint = {"done": "plan", "pending": pending, "resume": "run pytest -k grammar"}
    assert_ok(client.tool_result("session_checkpoint", checkpoint, era))
    state = sessions(mcp_project)[first]
    assert state["version"] == 3
    assert state["checkpoint"]["last_completed_step"] == "plan"
    assert state["checkpoint"]["pending_steps"] == ["port grammar"]
    assert state["checkpoint"]["resume_instruction"] == "run pytest -k grammar"
    assert not (state.get("recovery") or {}).get("interrupted_at")

    assert_ok(client.tool_result("session_checkpoint", {"interrupted": True}, era))
    state = sessions(mcp_project)[first]
    assert state["version"] == 4 and state["recovery"]["interrupted_at"]

    # a second session becomes current; `session` still reaches the first
    assert_ok(client.tool_result("session_new", {"name": "other work"}, era))
    [second] = set(sessions(mcp_project)) - {first}
    assert_ok(client.tool_result("session_phase", {"phase": "ship", "session": first}, era))
    both = sessions(mcp_project)
    assert both[first]["phase"] == "ship" and both[second]["version"] == 1
    assert_ok(client.tool_result("session_checkpoint", {"done": "build", "session": first}, era))
    both = sessions(mcp_project)
    assert both[first]["checkpoint"]["last_completed_step"] == "build"
    assert both[second]["version"] == 1
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_fact_tools_set_keep_history_and_read_back(server, mcp_project, run, era):
    client = open_era(server, era)
    first = client.tool_result("fact_set", {"key": "primary_language", "value": "Python"}, era)
    assert_ok(first)
    assert text_of(first) == "primary_language = Python: set"
    assert first["structuredContent"] == {
        "path": ".stacks/refs/facts.md",
        "key": "primary_language",
        "value": "Python",
        "changed": True,
    }
    again = client.tool_result("fact_set", {"key": "primary_language", "value": "Python"}, era)
    assert text_of(again) == "primary_language = Python: already set (nothing changed)"
    assert again["structuredContent"]["changed"] is False
    why = {"key": "primary_language", "value": "Go", "why": "the port moved to Go"}
    assert_ok(client.tool_result("fact_set", why, era))

    got = client.tool_result("fact_get", {"key": "primary_language"}, era)
    assert_ok(got)
    assert text_of(got) == "Go"
    fact = got["structuredContent"]
    assert fact["key"] == "primary_language" and fact["value"] == "Go"
    assert [h["value"] for h in fact["history"]] == ["Go", "Python"]
    assert fact["history"][0]["notes"] == []
    assert any("the port moved to Go" in note for note in fact["history"][1]["notes"])
    # The file is the CLI's: what the tool wrote, `stm fact get` reads.
    assert run("fact", "get", "primary_language").out == "Go\n"

    missing = assert_tool_error(client.tool_result("fact_get", {"key": "nope"}, era))
    assert missing.startswith("stm: error: no fact 'nope' in .stacks/refs/facts.md"), missing
    before = (mcp_project / ".stacks" / "refs" / "facts.md").read_bytes()
    secret = client.tool_result("fact_set", {"key": "token", "value": f"key {SECRET}"}, era)
    refused = assert_tool_error(secret)
    assert "--allow-secret" not in refused and "remove it" in refused, refused
    assert (mcp_project / ".stacks" / "refs" / "facts.md").read_bytes() == before
    assert client.close() == 0


def current_session(project) -> str:
    pointer = json.loads((project / ".state" / "current-session.json").read_text())
    return pointer["active_session"]


@pytest.mark.parametrize("era", ERAS)
def test_session_switch_tool_adopts_a_waiting_session(server, mcp_project, run, era):
    mine = run("session", "new", "--name", "mine").out.strip()
    waiting = run("session", "new", "--name", "theirs", "--no-switch").out.strip()
    assert current_session(mcp_project) == mine
    client = open_era(server, era)
    switched = client.tool_result("session_switch", {"session": waiting[-8:]}, era)
    assert_ok(switched)
    assert text_of(switched) == f"{waiting} is now this checkout's session"
    row = switched["structuredContent"]
    assert row["session_id"] == waiting and row["name"] == "theirs" and row["current"] is True
    assert current_session(mcp_project) == waiting
    assert sessions(mcp_project)[mine]["version"] == 1  # the one left is untouched

    unknown = assert_tool_error(client.tool_result("session_switch", {"session": "no-such"}, era))
    assert unknown.startswith("stm: error: "), unknown
    assert current_session(mcp_project) == waiting
    assert client.close() == 0


def test_session_archive_tool_archives_one_or_every_stale_one(
    server, mcp_project, run, monkeypatch
):
    monkeypatch.setattr(stm, "utc_now", lambda: clock() - 30 * 86400)
    old = run("session", "new", "--name", "old", "--no-switch").out.strip()
    monkeypatch.setattr(stm, "utc_now", clock)
    client = server()
    assert_ok(client.tool_result("session_new", {"name": "port parser"}))
    [current] = set(sessions(mcp_project)) - {old}

    archived = client.tool_result("session_archive", {})
    assert_ok(archived)
    month = archived["structuredContent"]["path"].split("/")[2]
    assert text_of(archived) == f"{current}: archived to .state/history/{month}/{current}"
    assert archived["structuredContent"]["archived"] is True
    assert (mcp_project / ".state" / "history" / month / current / "state.json").is_file()
    assert not (mcp_project / ".state" / "sessions" / current).exists()
    again = client.tool_result("session_archive", {"session": current})
    assert text_of(again) == f"{current}: already archived; nothing to do"

    for arguments, said in (
        ({"dry_run": True}, "dry_run goes with stale"),
        ({"stale": True, "session": old}, "give no session"),
    ):
        assert said in assert_tool_error(client.tool_result("session_archive", arguments))
    dry = client.tool_result("session_archive", {"stale": True, "dry_run": True})
    assert text_of(dry) == f"would archive {old}"
    assert dry["structuredContent"]["dry_run"] is True
    assert (mcp_project / ".state" / "sessions" / old).is_dir()  # a dry run moves nothing
    done = client.tool_result("session_archive", {"stale": True})
    assert text_of(done) == f"archived {old}"
    assert [row["session_id"] for row in done["structuredContent"]["sessions"]] == [old]
    assert not (mcp_project / ".state" / "sessions" / old).exists()
    none = client.tool_result("session_archive", {"stale": True})
    assert text_of(none) == "no stale session"
    assert none["structuredContent"] == {"dry_run": False, "sessions": []}
    assert client.close() == 0


HANDOFF = {
    "task_id": "T-1",
    "from_agent": "planner",
    "task": "Port the printer",
    "status": "ready",
    "created_at": "2026-01-05T10:00:00Z",
    "next_steps": ["write the printer"],
}


def test_compose_handoff_tool_makes_a_session_from_the_object(server, mcp_project):
    client = server()
    composed = client.tool_result("compose_handoff", {"handoff": HANDOFF})
    assert_ok(composed)
    row = composed["structuredContent"]
    sid = row["session_id"]
    assert text_of(composed) == f"{sid}: handoff session created"
    assert row["created"] is True and row["current"] is True and row["warnings"] == []
    assert row["name"] == "Port the printer" and row["handoff"]["task_id"] == "T-1"
    assert row["session_md"] == f".state/sessions/{sid}/Session.md"
    assert "write the printer" in (mcp_project / row["session_md"]).read_text()
    stored = mcp_project / ".state" / "sessions" / sid / "context" / "handoff.json"
    assert json.loads(stored.read_text()) == HANDOFF
    assert current_session(mcp_project) == sid

    again = client.tool_result("compose_handoff", {"handoff": HANDOFF})
    warning = f"this handoff was already composed into session {sid}; nothing created"
    assert text_of(again) == f"{sid}: handoff session not created\nwarning: {warning}"
    assert again["structuredContent"]["created"] is False
    assert again["structuredContent"]["warnings"] == [warning]
    assert set(sessions(mcp_project)) == {sid}

    bad = client.tool_result("compose_handoff", {"handoff": {"task_id": "T-2"}})
    assert "from_agent is missing" in assert_tool_error(bad)
    assert set(sessions(mcp_project)) == {sid}

    later = dict(HANDOFF, task_id="T-3")
    kept = client.tool_result("compose_handoff", {"handoff": later, "no_switch": True})
    assert_ok(kept)
    assert kept["structuredContent"]["current"] is False
    assert current_session(mcp_project) == sid
    assert len(sessions(mcp_project)) == 2
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_boot_tool_returns_identity_and_memory(server, era):
    client = open_era(server, era)
    full = client.tool_result("boot", {}, era)
    assert_ok(full)
    text = text_of(full)
    assert "Maintainer of the parser project" in text and "Parser port half done" in text
    assert "refs/guide.md" in text
    # Cut exactly as the CLI cuts (spec: boot budget): a bound on the output, identity
    # cut last, so a budget that holds identity keeps it whole.
    small = client.tool_result("boot", {"max_tokens": 200}, era)
    assert_ok(small)
    assert (len(text_of(small)) + 3) // 4 <= 200
    assert "Maintainer of the parser project" in text_of(small)
    # Its hints name tools, never a shell command holding the checkout's path (a long
    # path would crowd the identity out of the budget, and the client may have no shell).
    assert "stm.py" not in text_of(small) and "the `boot` tool" in text_of(small)
    capped = client.tool_result("boot", {"max_chars": 400}, era)
    assert_ok(capped)
    assert 0 < len(text_of(capped)) <= 400
    assert client.close() == 0


# ---- tool failures and unknown tools --------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_tool_failures_are_results_with_is_error(server, mcp_project, era):
    client = open_era(server, era)
    logs_before = {p.name: p.read_bytes() for p in (mcp_project / ".stacks" / "logs").glob("*")}
    refused = client.tool_result("log", {"text": f"key {SECRET}"}, era)
    message = assert_tool_error(refused)
    assert SECRET not in message
    if era == "modern":
        assert_modern_result(refused, "tools/call")
    else:
        assert_legacy_result(refused, "tools/call")
    after = {p.name: p.read_bytes() for p in (mcp_project / ".stacks" / "logs").glob("*")}
    assert after == logs_before  # a refused command leaves every file byte-identical
    assert_tool_error(client.tool_result("log", {"text": "   "}, era))

    phases = as_schema_list(tools_by_name(client, era)["session_new"], "phases", ["a", "b"])
    assert_ok(client.tool_result("session_new", {"name": "strict", "phases": phases}, era))
    before = sessions(mcp_project)
    assert_tool_error(client.tool_result("session_phase", {"phase": "not-a-phase"}, era))
    assert sessions(mcp_project) == before

    # a missing required argument: a tool error or invalid params, never a dead server
    response = client.call_tool("log", {}, era)
    if "result" in response:
        assert_tool_error(response["result"])
    else:
        error_of(response, INVALID_PARAMS)
    assert_ok(client.tool_result("status", {}, era))
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_unknown_tool_is_invalid_params(server, era):
    client = open_era(server, era)
    error_of(client.call_tool("no_such_tool", {}, era), INVALID_PARAMS)
    error_of(client.call_tool("fact_set_typo", {"x": 1}, era), INVALID_PARAMS)
    assert_ok(client.tool_result("status", {}, era))
    assert client.close() == 0


# ---- resources and prompts ------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_resources_list_and_read(server, mcp_project, era):
    client = open_era(server, era)
    resources = result_of(rpc(client, era, "resources/list"))["resources"]
    uris = [r["uri"] for r in resources]
    assert len(set(uris)) == len(uris), uris
    wanted = {"stm://boot", "stm://identity", "stm://memory"}
    wanted |= {"stm://refs/guide.md", "stm://refs/deploy.md"}
    assert wanted <= set(uris), uris
    for resource in resources:
        assert isinstance(resource.get("name"), str) and resource["name"], resource
    templates = result_of(rpc(client, era, "resources/templates/list"))
    assert isinstance(templates["resourceTemplates"], list), templates

    def read(uri):
        result = result_of(rpc(client, era, "resources/read", {"uri": uri}))
        [content] = result["contents"]
        assert content["uri"] == uri, content
        return content["text"]

    assert read("stm://identity") == IDENTITY
    assert read("stm://memory") == MEMORY
    assert read("stm://refs/guide.md") == GUIDE
    assert read("stm://refs/deploy.md") == DEPLOY
    boot = read("stm://boot")
    assert "Maintainer of the parser project" in boot and "Parser port half done" in boot
    for uri in uris:  # everything listed can be read
        assert isinstance(read(uri), str)
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_unknown_resource_is_rejected(server, era):
    # 2026-07-28: -32602 (MUST). Legacy revisions used -32002 for "resource not found";
    # the issue asks for -32602, so a legacy answer may be either.
    codes = (INVALID_PARAMS,) if era == "modern" else (INVALID_PARAMS, LEGACY_RESOURCE_NOT_FOUND)
    client = open_era(server, era)
    for uri in (
        "stm://refs/../AGENT.md",
        "stm://refs/../../etc/passwd",
        "stm://refs/no-such.md",
        "stm://nothing",
        "file:///etc/passwd",
    ):
        error = error_of(rpc(client, era, "resources/read", {"uri": uri}), *codes)
        assert "Maintainer of the parser project" not in json.dumps(error)
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_boot_prompt(server, era):
    client = open_era(server, era)
    prompts = result_of(rpc(client, era, "prompts/list"))["prompts"]
    assert "boot" in [p["name"] for p in prompts]
    result = result_of(rpc(client, era, "prompts/get", {"name": "boot"}))
    [message] = result["messages"]
    assert message["role"] == "user" and message["content"]["type"] == "text"
    text = message["content"]["text"]
    assert "Maintainer of the parser project" in text and "Parser port half done" in text
    error_of(rpc(client, era, "prompts/get", {"name": "no-such-prompt"}), INVALID_PARAMS)
    assert client.close() == 0


@pytest.mark.parametrize(
    "method, params",
    [
        ("resources/read", {"uri": "stm://boot"}),
        ("prompts/get", {"name": "boot"}),
        ("tools/call", {"name": "boot", "arguments": {}}),
    ],
)
def test_every_way_to_boot_records_the_boot_mark_digest_counts_from(
    server, mcp_project, method, params
):
    mark = mcp_project / ".state" / ".last-boot"
    assert not mark.exists()
    client = open_era(server, "modern")
    result_of(rpc(client, "modern", method, params))
    assert mark.is_file(), f"{method} booted without recording the boot"
    os.utime(mark, (1, 1))  # a second read of the same kind moves the mark again
    result_of(rpc(client, "modern", method, params))
    assert mark.stat().st_mtime > 1
    assert client.close() == 0


def test_a_resource_other_than_boot_records_no_boot(server, mcp_project):
    client = open_era(server, "modern")
    result_of(rpc(client, "modern", "resources/read", {"uri": "stm://memory"}))
    assert not (mcp_project / ".state" / ".last-boot").exists()
    assert client.close() == 0


# ---- JSON-RPC errors ------------------------------------------------------------------------


def test_parse_error_has_null_id_and_the_server_goes_on(server):
    client = server()
    for junk in (b'{"jsonrpc": "2.0", "id": 1, "method": \n', b"not json at all\n", b"\xff\xfe{\n"):
        client.send_raw(junk)
        response = client.recv()
        assert "id" in response and response["id"] is None, response
        error_of(response, PARSE_ERROR)
    result_of(client.modern("server/discover"))
    assert client.close() == 0


def test_invalid_requests(server):
    client = server()
    for message, sent_id in (
        ({"jsonrpc": "2.0", "id": 1}, 1),
        ({"jsonrpc": "2.0", "id": 2, "method": 5}, 2),
        ({"jsonrpc": "2.0", "id": 3, "method": None}, 3),
        (
            {"jsonrpc": "1.0", "id": 4, "method": "tools/list", "params": {"_meta": modern_meta()}},
            4,
        ),
        ({"id": 5, "method": "tools/list", "params": {"_meta": modern_meta()}}, 5),
        (42, None),
        ("a string", None),
    ):
        client.send(message)
        response = client.recv()
        error_of(response, INVALID_REQUEST)
        assert "id" in response and response["id"] in (sent_id, None), response
    result_of(client.modern("tools/list"))
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_bad_params_are_invalid_params(server, era):
    client = open_era(server, era)
    for method, params in (
        ("tools/call", {}),
        ("tools/call", {"name": 5}),
        ("tools/call", {"name": "status", "arguments": "not an object"}),
        ("resources/read", {}),
        ("resources/read", {"uri": 7}),
        ("prompts/get", {}),
    ):
        error_of(rpc(client, era, method, params), INVALID_PARAMS)
    assert_ok(client.tool_result("status", {}, era))
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_unknown_method_is_answered_at_once(server, era):
    client = open_era(server, era)
    result_of(rpc(client, era, "tools/list"))  # warm: the server is up and serving
    error_of(rpc(client, era, "no/such/method"), METHOD_NOT_FOUND)
    params = {"_meta": modern_meta()} if era == "modern" else {}
    times = []
    for _ in range(7):
        response, elapsed = client.timed_request("bogus/method", params)
        error_of(response, METHOD_NOT_FOUND)
        times.append(elapsed)
    assert statistics.median(times) < 0.1, times
    assert client.close() == 0


# ---- notifications, ids ---------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_notifications_never_get_a_reply(server, era):
    client = open_era(server, era)
    meta = {"_meta": modern_meta()} if era == "modern" else {}
    client.notify("notifications/initialized")
    client.notify("notifications/cancelled", {"requestId": 12345, "reason": "test"})
    client.notify("notifications/cancelled")  # malformed, still a notification
    client.notify("notifications/no-such-thing", {})
    client.notify("tools/list", meta)  # a known method without an id is a notification too
    client.notify("no/such/method")
    client.send({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "nope", **meta}})
    # the next line is the answer to this request, and nothing follows it
    if era == "modern":
        result_of(client.modern("server/discover"))
    else:
        assert result_of(client.legacy("ping")) == {}
    client.expect_silence(0.3)
    assert client.close() == 0


@pytest.mark.parametrize("era", ERAS)
def test_id_zero_and_string_ids_are_answered(server, era):
    client = open_era(server, era)
    params = {"_meta": modern_meta()} if era == "modern" else {}
    for rid in (0, "0", "req-7", -1):
        result_of(client.request("tools/list", params, id=rid))
    error_of(client.request("no/such/method", params, id=0), METHOD_NOT_FOUND)
    assert client.close() == 0


# ---- the stream itself ----------------------------------------------------------------------


def test_stdout_carries_only_json_rpc_messages(server):
    client = server()
    answered = 0
    for call in (
        lambda: client.modern("server/discover"),
        lambda: client.modern("tools/list"),
        lambda: client.call_tool("boot", {}),
        lambda: client.call_tool("status", {}),
        lambda: client.call_tool("search", {"query": "lexer"}),
        lambda: client.call_tool("log", {"text": f"key {SECRET}"}),  # a tool error
        lambda: client.call_tool("read_ref", {"path": "../AGENT.md"}),  # another
        lambda: client.call_tool("log", {"text": "a normal entry"}),
        lambda: client.call_tool("no_such_tool", {}),
        lambda: client.modern("resources/read", {"uri": "stm://nothing"}),
        lambda: client.modern("bogus/method"),
        lambda: client.modern("resources/read", {"uri": "stm://boot"}),
    ):
        call()
        answered += 1
    client.send_raw(b"{broken\n")
    client.recv()
    answered += 1
    assert client.close() == 0
    assert len(client.lines) == answered, client.lines
    for line in client.lines:
        assert line.endswith(b"\n") and b"\n" not in line[:-1], line
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0" and "id" in message, line
        assert ("result" in message) != ("error" in message), line


def test_eof_exits_zero_promptly(server):
    idle = server()
    start = time.monotonic()
    assert idle.close(timeout=5) == 0
    busy = server()
    result_of(busy.modern("tools/list"))
    assert_ok(busy.tool_result("log", {"text": "just before the end"}))
    assert busy.close(timeout=5) == 0
    assert time.monotonic() - start < 8


def test_sigterm_during_a_stream_of_logs(server, mcp_project):
    client = server()
    result_of(client.modern("tools/list"))
    total = 300
    for n in range(total):
        params = {"name": "log", "arguments": {"text": f"stream entry {n}\n" + "filler\n" * 20}}
        params["_meta"] = modern_meta()
        client.send({"jsonrpc": "2.0", "id": 1000 + n, "method": "tools/call", "params": params})
    for _ in range(10):  # the stream is under way
        response = client.recv()
        assert "result" in response and not response["result"].get("isError"), response
    client.proc.send_signal(signal.SIGTERM)
    code = client.wait(timeout=10)
    assert code == 143, (code, client.stderr)
    answers = [json.loads(line) for line in client.lines[1:]]  # each line a whole message
    acknowledged = sum(1 for m in answers if "result" in m and not m["result"].get("isError"))
    assert acknowledged >= 10
    leftovers = [p for top in (".stacks", ".state") for p in (mcp_project / top).rglob("*.tmp")]
    assert leftovers == []
    entries = [e for e in log_entries(mcp_project) if e["body"].startswith("stream entry")]
    assert all(e["complete"] for e in entries), [e for e in entries if not e["complete"]]
    assert acknowledged <= len(entries) <= total, (acknowledged, len(entries))
    text = "\n".join(p.read_text() for p in (mcp_project / ".stacks" / "logs").glob("*.md"))
    starts = re.findall(r"<!-- stm:entry ([0-9a-f]{8}) -->", text)
    ends = re.findall(r"<!-- stm:end ([0-9a-f]{8}) -->", text)
    assert sorted(starts) == sorted(ends)


def test_concurrent_cli_writers_lose_no_entry(server, mcp_project):
    client = server()
    result_of(client.modern("tools/list"))
    env = dict(os.environ)
    loop = subprocess.Popen(
        [
            sys.executable,
            "-S",
            str(ROOT / "tests" / "workers.py"),
            "log",
            str(mcp_project),
            "W",
            "25",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    clis = [
        subprocess.Popen(
            [sys.executable, str(STM_PY), "log", f"cli writer {n} was here"],
            cwd=mcp_project,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for n in range(3)
    ]
    server_count = 60
    for n in range(server_count):
        params = {"name": "log", "arguments": {"text": f"server entry {n}"}, "_meta": modern_meta()}
        client.send({"jsonrpc": "2.0", "id": 500 + n, "method": "tools/call", "params": params})
    for _ in range(server_count):
        response = client.recv(timeout=30)
        assert "result" in response and not response["result"].get("isError"), response
    for proc in [loop, *clis]:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    assert client.close() == 0
    entries = log_entries(mcp_project)
    assert all(e["complete"] for e in entries)
    bodies = [e["body"] for e in entries]
    for n in range(server_count):
        assert bodies.count(f"server entry {n}") == 1, n
    for n in range(3):
        assert bodies.count(f"cli writer {n} was here") == 1, n
    for n in range(25):
        assert sum(b.startswith(f"writer W entry {n}\n") for b in bodies) == 1, n
    assert len(entries) == server_count + 3 + 25


@pytest.mark.parametrize("era", ERAS)
def test_no_caching_a_shell_log_is_found_by_the_next_search(server, mcp_project, era):
    client = open_era(server, era)
    word = f"zebracrossing{era}"
    first = client.tool_result("search", {"query": word}, era)
    assert_ok(first)
    assert first["structuredContent"]["matches"] == []
    shell = subprocess.run(
        [sys.executable, str(STM_PY), "log", f"{word} seen from a shell"],
        cwd=mcp_project,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 0, shell.stderr
    found = client.tool_result("search", {"query": word}, era)["structuredContent"]["matches"]
    assert len(found) == 1 and found[0]["layer"] == "logs", found
    # resources are read afresh too
    memory = mcp_project / ".stacks" / "MEMORY.md"
    memory.write_text(MEMORY.replace("None yet.", "Is the printer needed?"))
    text = result_of(rpc(client, era, "resources/read", {"uri": "stm://memory"}))["contents"][0]
    assert "Is the printer needed?" in text["text"]
    assert client.close() == 0


# ---- log author ---------------------------------------------------------------------------


def test_modern_author_is_the_requests_client_info(server, mcp_project):
    client = server()
    named = {"name": "modern-agent", "version": "2.0"}
    client.modern(
        "tools/call", {"name": "log", "arguments": {"text": "by modern"}}, client_info=named
    )
    # stateless: the next request, without clientInfo, is not by modern-agent
    client.modern(
        "tools/call", {"name": "log", "arguments": {"text": "by nobody"}}, client_info=None
    )
    assert client.close() == 0
    [by_modern] = entries_with(mcp_project, "by modern")
    [by_nobody] = entries_with(mcp_project, "by nobody")
    assert by_modern["author"] == "modern-agent"
    assert by_nobody["author"] == "tester"  # the OS user ($USER, set by conftest)


def test_legacy_author_is_the_initialize_client_info(server, mcp_project):
    client = server()
    client.legacy_handshake("2025-03-26", client_info={"name": "legacy-agent", "version": "1"})
    assert_ok(client.tool_result("log", {"text": "by legacy"}, "legacy"))
    assert client.close() == 0
    [entry] = entries_with(mcp_project, "by legacy")
    assert entry["author"] == "legacy-agent"


@pytest.mark.parametrize("era", ERAS)
def test_stm_user_wins_over_client_info(server, mcp_project, monkeypatch, era):
    monkeypatch.setenv("STM_USER", "carol")
    client = server()
    info = {"name": "some-agent", "version": "1"}
    if era == "legacy":
        client.legacy_handshake(client_info=info)
        assert_ok(client.tool_result("log", {"text": f"carol writes ({era})"}, era))
    else:
        response = client.modern(
            "tools/call",
            {"name": "log", "arguments": {"text": f"carol writes ({era})"}},
            client_info=info,
        )
        assert_ok(result_of(response))
    assert client.close() == 0
    [entry] = entries_with(mcp_project, f"carol writes ({era})")
    assert entry["author"] == "carol"


# ---- where the memory is --------------------------------------------------------------------


def test_dir_names_the_stacks_from_anywhere(server, mcp_project, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    client = server(stacks=mcp_project / ".stacks", cwd=elsewhere)
    assert_ok(client.tool_result("log", {"text": "logged through --dir"}))
    text = result_of(client.modern("resources/read", {"uri": "stm://identity"}))["contents"]
    assert text[0]["text"] == IDENTITY
    assert client.close() == 0
    assert entries_with(mcp_project, "logged through --dir")
    assert not (elsewhere / ".stacks").exists()


def test_without_dir_the_stacks_are_found_upward(server, mcp_project):
    deep = mcp_project / "src" / "parser"
    deep.mkdir(parents=True)
    client = server(stacks=None, cwd=deep)
    assert_ok(client.tool_result("log", {"text": "logged from a subfolder"}))
    assert client.close() == 0
    assert entries_with(mcp_project, "logged from a subfolder")
    assert not (deep / ".stacks").exists()


def test_client_info_key_is_the_spec_one():
    # a guard on the client itself: the per-request keys are the 2026-07-28 names
    meta = modern_meta()
    assert set(meta) == {
        "io.modelcontextprotocol/protocolVersion",
        "io.modelcontextprotocol/clientCapabilities",
        CLIENT_INFO,
    }
    assert meta["io.modelcontextprotocol/protocolVersion"] == MODERN


# ---- the registry: one row per tool, the spec's table, a test for each ----------------------

SPEC_TOOL_ROW = re.compile(r"^\| `([a-z_]+)` \| (.*?) \| (.*?) \| (.*) \|$", re.MULTILINE)
SPEC_ARGUMENT = re.compile(r"(\*\*)?`([a-z_]+)`")


def spec_tools() -> list[tuple]:
    """Every row of spec/mcp.md's table of tools, in order: (name, [(argument, required)],
    description, whether it has an outputSchema). An argument's notes in parentheses are
    not arguments (`layer` (one of the layers or `sessions`))."""
    text = (ROOT / "spec" / "mcp.md").read_text()
    table = text.split("\n## Tools\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for name, arguments, description, does in SPEC_TOOL_ROW.findall(table):
        arguments = re.sub(r"\([^()]*\)", "", arguments)
        listed = [(arg, bool(bold)) for bold, arg in SPEC_ARGUMENT.findall(arguments)]
        rows.append((name, listed, description, "`outputSchema`" in does))
    return rows


def registry_tools() -> list[tuple]:
    return [
        (
            tool.name,
            [(arg, True) for arg in tool.required] + [(arg, False) for arg in tool.optional],
            tool.description,
            tool.output is not None,
        )
        for tool in stm.MCP_TOOLS
    ]


def test_the_spec_tool_table_matches_the_registry():
    assert [row[0] for row in spec_tools()] == [tool.name for tool in stm.MCP_TOOLS]
    assert spec_tools() == registry_tools()


def test_every_registered_tool_is_called_by_a_server_test():
    """Each tool is run through a real `stm mcp` by some test in this file."""
    source = (ROOT / "tests" / "test_mcp.py").read_text()
    called = set(re.findall(r"(?:call_tool|tool_result)\(\s*\"([a-z_]+)\"", source))
    assert {tool.name for tool in stm.MCP_TOOLS} - called == set()


def test_each_handler_is_named_after_its_tool_and_the_instructions_name_real_tools():
    for tool in stm.MCP_TOOLS:
        assert tool.handler.__name__ == f"mcp_tool_{tool.name}", tool.name
    named = set(re.findall(r"`([a-z_]+)`", stm.MCP_INSTRUCTIONS))
    assert named and named <= set(stm.MCP_TOOL_BY_NAME), named


@pytest.mark.parametrize(
    ("hint", "reads"),
    [
        ("`stm session switch abc`", "the `session_switch` tool with session: abc"),
        ("`stm fact set lang Go`", "the `fact_set` tool with key: lang, value: Go"),
        (
            "`stm session archive --stale --dry-run`",
            "the `session_archive` tool with stale: true, dry_run: true",
        ),
        ("`stm boot --max-tokens 3`", "the `boot` tool with max_tokens: 3"),
        ("`stm boot --no-limit`", "the `boot` tool without max_tokens or max_chars"),
        ("`stm compose-handoff f.json`", "`stm compose-handoff f.json`"),
        ("`stm session checkpoint --clear-pending`", "`stm session checkpoint --clear-pending`"),
        ("`stm compact`", "`stm compact`"),
    ],
)
def test_hints_name_tools_by_the_naming_rule(hint, reads):
    """spec/mcp.md's naming rule, case by case: a command's words joined by `_` name
    its tool, a flag's dashes become `_`, positional words fill the required arguments."""
    with stm.with_hint_voice(command="stm", tools=stm.MCP_TOOL_ARGUMENTS):
        assert stm.as_invoked(hint) == reads


def test_a_new_tool_is_one_row_on_its_handler(store, monkeypatch):
    """What adding a tool costs: the decorated handler is listed last, its arguments are
    checked, and hints from it name its arguments, its declared flag words included."""
    monkeypatch.setattr(stm, "MCP_TOOLS", list(stm.MCP_TOOLS))
    monkeypatch.setattr(stm, "MCP_TOOL_BY_NAME", dict(stm.MCP_TOOL_BY_NAME))
    monkeypatch.setattr(stm, "MCP_TOOL_ARGUMENTS", dict(stm.MCP_TOOL_ARGUMENTS))

    @stm.mcp_tool(
        "log_tail",
        "The newest log entries.",
        optional={"count": {"type": "integer", "minimum": 1}, "all": {"type": "boolean"}},
        flags={"everything": "`all: true`"},
    )
    def mcp_tool_log_tail(memory, args):
        if "count" not in args:
            raise stm.usage_error("give --count or --everything, as in `stm log tail --count 3`")
        return f"{args['count']} entries", {"count": args["count"]}

    server = stm.McpServer(stacks=str(store / ".stacks"))

    def answer(method: str, params: dict | None = None) -> dict:
        message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
        return server.answer(json.dumps(message).encode())["result"]

    listed = answer("tools/list")["tools"]
    assert [tool["name"] for tool in listed] == [*(t.name for t in stm.MCP_TOOLS)]
    assert listed[-1] == {
        "name": "log_tail",
        "description": "The newest log entries.",
        "inputSchema": {
            "type": "object",
            "properties": {"count": {"type": "integer", "minimum": 1}, "all": {"type": "boolean"}},
        },
    }
    hinted = answer("tools/call", {"name": "log_tail", "arguments": {}})
    assert hinted["isError"] is True
    assert hinted["content"][0]["text"] == (
        "stm: error: give `count` or `all: true`, as in the `log_tail` tool with count: 3"
    )
    wrong = answer("tools/call", {"name": "log_tail", "arguments": {"count": 0}})
    assert wrong["content"][0]["text"] == (
        "stm: error: log_tail: argument 'count' must be a positive integer"
    )
    done = answer("tools/call", {"name": "log_tail", "arguments": {"count": 2}})
    assert done["structuredContent"] == {"count": 2} and done["isError"] is False
    with pytest.raises(ValueError, match="'log_tail' is registered twice"):
        stm.mcp_tool("log_tail", "again")(mcp_tool_log_tail)
