"""A newcomer's first hour (issue 30) and the small resume items of issue 24 (item 8):
each test runs stm as a new user would and fails if the rough edge comes back."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from conftest import snapshot

import stm

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd, *args):
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )


def state_of(store, sid):
    return json.loads((store / ".state" / "sessions" / sid / "state.json").read_text())


# ---- 1. --done: a step by its text, its number or a part; a phase is no step --------


@pytest.fixture
def steps(store, run):
    sid = run("session", "new", "--name", "count", "--phases", "plan,build").out.strip()
    pending = ["write count_chars", "write count_words", "test the counters"]
    args = [a for step in pending for a in ("--pending", step)]
    assert run("session", "checkpoint", *args).code == 0
    return sid


def test_done_takes_a_part_of_a_step_that_only_it_holds(store, run, steps):
    result = run("session", "checkpoint", "--done", "count_chars")
    assert result.code == 0 and result.err == ""
    checkpoint = state_of(store, steps)["checkpoint"]
    assert checkpoint["last_completed_step"] == "write count_chars"
    assert checkpoint["pending_steps"] == ["write count_words", "test the counters"]
    shown = run("session", "show").out
    assert "- Last completed step: write count_chars" in shown
    assert re.findall(r"^  \d+\. (.*)$", shown, re.M) == ["write count_words", "test the counters"]


def test_done_with_a_part_that_several_steps_hold_is_refused_listing_them(store, run, steps):
    before = snapshot(store)
    result = run("session", "checkpoint", "--done", "write")
    assert result.code == 2
    assert "1. write count_chars" in result.err and "2. write count_words" in result.err
    assert "nothing written" in result.err
    assert snapshot(store) == before


def test_done_by_number_and_by_text_still_work(store, run, steps):
    assert run("session", "checkpoint", "--done", "2").code == 0
    assert state_of(store, steps)["checkpoint"]["last_completed_step"] == "write count_words"
    assert run("session", "checkpoint", "--done", "test the counters").code == 0
    assert state_of(store, steps)["checkpoint"]["pending_steps"] == ["write count_chars"]


def test_a_phase_given_to_done_is_recorded_with_a_warning_naming_session_phase(store, run, steps):
    result = run("session", "checkpoint", "--done", "plan")
    assert result.code == 0
    assert "'plan' is a phase" in result.err and "`stm session phase NAME`" in result.err
    state = state_of(store, steps)
    assert state["checkpoint"]["last_completed_step"] == "plan"
    assert len(state["checkpoint"]["pending_steps"]) == 3


def test_repeated_done_records_every_step(store, run, steps):
    result = run("session", "checkpoint", "--done", "1", "--done", "2")
    assert result.code == 0 and result.err == ""
    state = state_of(store, steps)
    assert state["checkpoint"]["pending_steps"] == ["test the counters"]
    assert state["checkpoint"]["last_completed_step"] == "write count_words"
    assert "write count_chars" in state["recovery"]["last_action"]
    # a rebuild from history (what a merge from another clone runs) gives the same
    rebuilt, _, skipped = stm.rebuild_state(str(store / ".state" / "sessions" / steps))
    assert skipped == []
    assert rebuilt["checkpoint"]["pending_steps"] == ["test the counters"]


# ---- 3. note: no section from a typo, one argument explained, where the text went ----


def memory_text(store):
    return (store / ".stacks" / "MEMORY.md").read_text()


def test_note_to_a_missing_section_is_refused_showing_the_create_command(store, run):
    before = snapshot(store)
    result = run("note", "Nxt", "x")
    assert result.code == 2, result
    assert 'no section "Nxt" in .stacks/MEMORY.md' in result.err
    assert '"Next Steps"' in result.err  # the nearest existing sections
    assert "`stm note --create Nxt x`" in result.err
    assert snapshot(store) == before
    created = run("note", "--create", "Nxt", "x")
    assert created.code == 0
    assert created.out == "created ## Nxt in .stacks/MEMORY.md, with the note\n"
    again = run("note", "Nxt", "x")  # now it exists; the same bullet is not written twice
    assert again.out == "already under ## Nxt in .stacks/MEMORY.md; nothing changed\n"
    assert memory_text(store).count("- x\n") == 1


def test_note_with_only_one_argument_suggests_the_section(store, run):
    result = run("note", "just a thought")
    assert result.code == 2
    assert "note needs TEXT" not in result.err
    assert "`stm note Observations 'just a thought'`" in result.err
    named = run("note", "Status")  # a section alone: the text is what is missing
    assert named.code == 2 and "needs TEXT" in named.err


def test_note_says_where_the_text_went_from_where_the_user_stands(store, run, monkeypatch):
    result = run("note", "next", "port the grammar")
    assert result.out == "noted under ## Next Steps in .stacks/MEMORY.md\n"
    (store / "src").mkdir()
    monkeypatch.chdir(store / "src")
    result = run("note", "Status", "--replace", "green")
    assert (
        result.out
        == f"replaced the body of ## Status in {os.path.join('..', '.stacks', 'MEMORY.md')}\n"
    )
    assert run("note", "-q", "Observations", "quiet one").out == ""
    assert "- quiet one" in memory_text(store)


def mcp_call(name: str, arguments: dict) -> dict:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    }
    params = {"name": name, "arguments": arguments, "_meta": meta}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return stm.McpServer().answer(json.dumps(request).encode())["result"]


def test_mcp_note_refuses_a_missing_section_unless_create(store):
    before = snapshot(store)
    refused = mcp_call("note", {"section": "Nxt Steps", "text": "x"})
    assert refused["isError"]
    text = refused["content"][0]["text"]
    assert 'did you mean "Next Steps"?' in text and "create: true" in text
    assert "--create" not in text  # a tool argument, not a CLI flag
    assert snapshot(store) == before
    done = mcp_call("note", {"section": "Nxt Steps", "text": "x", "create": True})
    assert not done["isError"] and done["structuredContent"]["created"] is True
    assert "## Nxt Steps\n\n- x\n" in memory_text(store)
