"""Edge cases a fresh-eyes review found in this round's features, each pinned down."""

from __future__ import annotations

import json

from conftest import MEMORY, snapshot

import stm


def test_a_four_backtick_fence_holding_a_three_backtick_line_hides_no_heading(store, run):
    """One fence rule everywhere (CommonMark's closing rule): note, check and boot agree
    with the merge driver."""
    memory = store / ".stacks" / "MEMORY.md"
    text = MEMORY.replace(
        "Parser port half done; the lexer passes its tests.",
        "Parser port half done.\n\n````\n```python\n````",
    )
    memory.write_text(text)
    assert run("note", "Next Steps", "do X").code == 0
    found = json.loads(run("check", "--json").out)["findings"]
    assert not [f for f in found if f["rule"] == "heading-missing"]
    assert run("check", "--fix").code == 0
    assert memory.read_text().count("## Last Updated") == 1


def test_a_fact_block_that_is_not_utf8_is_never_rewritten(store, run):
    facts = store / ".stacks" / "refs" / "facts.md"
    facts.write_bytes(b"# Facts \xe9\n")
    before = snapshot(store)
    result = run("fact", "set", "lang", "Rust")
    assert result.code == 1 and "not valid UTF-8" in result.err
    assert snapshot(store) == before


def test_note_ref_refuses_to_write_into_a_fact(store, run):
    assert run("fact", "set", "lang", "Go").code == 0
    before = snapshot(store)
    result = run("note", "--ref", "facts", "lang", "x")
    assert result.code == 2 and "stm fact set lang" in result.err
    assert snapshot(store) == before
    assert run("fact", "get", "lang").out == "Go\n"


def test_the_state_rebuild_leaves_a_history_with_a_bad_line_alone(store, run, monkeypatch):
    sid = run("session", "new").out.strip()
    history = store / ".state" / "sessions" / sid / "history.jsonl"
    history.write_text(history.read_text() + "not json\n")
    rebuilt = stm.rebuild_state(str(history.parent))
    assert rebuilt is None  # history-invalid is reported; nothing is dropped silently


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


def test_setup_git_refuses_an_empty_command(store, run):
    result = run("setup", "git", "--command", "")
    assert result.code == 2 and "--command" in result.err
