"""Reading stm's own files when they are not what stm wrote: JSON nested too deep or
with a field of the wrong type, a refs tree deeper than the limit, files that are not
UTF-8 (never silently rewritten)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import IDENTITY, MEMORY, snapshot
from helpers import (
    HANDOFF,
    assert_clean_refusal,
    handoff_json,
    new_store,
    run_stm,
    session_dir,
)


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


DEPTH = 100_000


def test_compose_handoff_refuses_json_nested_too_deep(store, call):
    text = json.dumps(handoff_json())[:-1] + f', "nested": {deep(DEPTH)}}}'
    (store / "h.json").write_text(text)
    before = snapshot(store)
    assert_clean_refusal(call("compose-handoff", "h.json"), 1, "h.json")
    assert snapshot(store) == before


def test_compose_handoff_never_stores_json_that_check_cannot_read(tmp_path):
    """At every depth, as a real process: composed and later checked without a
    traceback, or refused with exit 1."""
    new_store(tmp_path, handoff=False)
    env = {"STM_FSYNC": "0", "CI": "1"}
    jobs = []
    for depth in (100, 500, 900, 990, 2000, 20000):
        text = json.dumps(handoff_json(task_id=f"DEPTH-{depth}"))[:-1]
        path = tmp_path / f"h{depth}.json"
        path.write_text(text + f', "nested": {deep(depth)}}}')
        jobs.append((depth, path))
    problems = []
    for depth, path in jobs:
        done = run_stm("compose-handoff", str(path), "--no-switch", cwd=tmp_path, env=env)
        if "Traceback" in done.stderr or done.returncode not in (0, 1):
            problems.append(f"compose at depth {depth}: {done.returncode} {done.stderr[-200:]}")
    check = run_stm("check", cwd=tmp_path, env=env)
    if "Traceback" in check.stderr:
        problems.append(f"check after composing: {check.stderr[-300:]}")
    assert not problems, "\n".join(problems)


def test_deep_json_in_state_pointer_history_handoff_and_settings_is_a_clean_error(store, call):
    sid = call("compose-handoff", str(HANDOFF)).out.strip()
    folder = session_dir(store, sid)
    problems = []

    def attempt(what, argvs, expect=None):
        for argv in argvs:
            result = call(*argv)
            if result.code is None or "Traceback" in result.err:
                problems.append(f"{what}: {argv}: {result.err.strip()[-200:]}")
            elif expect is not None and result.code != expect:
                problems.append(f"{what}: {argv} exited {result.code}, not {expect}")

    readers = [["boot"], ["status"], ["session", "list"], ["session", "show"]]
    state = folder / "state.json"
    good_state = state.read_text()
    state.write_text(good_state[:-2] + f', "extra": {deep(DEPTH)}}}\n')
    attempt("state.json", readers)
    attempt("state.json", [["check"], ["session", "phase", "p2"]], expect=1)
    state.write_text(good_state)

    pointer = store / ".state" / "current-session.json"
    good_pointer = pointer.read_text()
    pointer.write_text(f'{{"active_session": null, "x": {deep(DEPTH)}}}')
    attempt("pointer", readers)
    attempt("pointer", [["check"], ["session", "phase", "p2"]], expect=1)
    pointer.write_text(good_pointer)

    history = folder / "history.jsonl"
    good_history = history.read_bytes()
    history.write_bytes(good_history + f'{{"event": "x", "timestamp": {deep(DEPTH)}}}\n'.encode())
    attempt("history.jsonl", readers + [["check"]])
    history.write_bytes(good_history)

    handoff = folder / "context" / "handoff.json"
    handoff.write_text(json.dumps(handoff_json())[:-1] + f', "nested": {deep(DEPTH)}}}')
    attempt("handoff.json", [["check"]], expect=1)

    settings = store / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(f'{{"hooks": {{"SessionStart": []}}, "x": {deep(DEPTH)}}}')
    before = settings.read_bytes()
    attempt("settings.json", [["setup", "claude", "--install"]], expect=1)
    if settings.read_bytes() != before:
        problems.append("settings.json was rewritten")
    assert not problems, "\n".join(problems)


# wrong field types in state.json: (field, value)
STATE_TYPES = [
    ("version", "1"), ("version", 1.5), ("version", True), ("version", None),
    ("session_id", 5), ("phase", 5), ("phase", None), ("phase", ["a"]),
    ("created_at", 5), ("updated_at", ["x"]), ("updated_at", None),
    ("name", 5), ("name", {"a": 1}),
    ("valid_phases", "plan"), ("valid_phases", [1, 2]),
    ("phase_history", 5), ("phase_history", "abc"), ("phase_history", {}),
    ("phase_history", [5]), ("phase_history", [{"phase": "init", "entered_at": 5}]),
    ("checkpoint", "x"), ("checkpoint", {"pending_steps": "abc"}),
    ("checkpoint", {"pending_steps": 5}), ("checkpoint", {"pending_steps": [1, None]}),
    ("checkpoint", {"last_completed_step": {"a": 1}}),
    ("checkpoint", {"resume_instruction": 5}), ("checkpoint", {"can_resume": "yes"}),
    ("recovery", []), ("recovery", {"interrupted_at": 5}), ("recovery", {"last_action": ["x"]}),
    ("recovery", {"recovery_notes": {}}), ("recovery", {"last_agent": 5}),
    ("context", []), ("context", {"a": 5}),
    ("user", 5), ("archived_at", 5), ("task_id", 5), ("from_agent", []), ("to_agent", 5),
    ("handoff_status", {}), ("handoff_created_at", 5),
]  # fmt: skip


UPDATES = [
    ["session", "phase", "p2"],
    ["session", "checkpoint", "--done", "a"],
    ["session", "checkpoint", "--pending", "b", "--resume", "r"],
    ["session", "archive"],
]


@pytest.mark.parametrize(
    "field,value", STATE_TYPES, ids=[f"{f}={json.dumps(v)}" for f, v in STATE_TYPES]
)
def test_a_wrong_field_type_in_state_json_is_reported_and_refused(store, call, field, value):
    sid = call("session", "new", "--name", "typed").out.strip()
    path = session_dir(store, sid) / "state.json"
    state = json.loads(path.read_text())
    state[field] = value
    bad = json.dumps(state)
    path.write_text(bad)
    problems = []
    result = call("check", "--json")
    if result.code is None or "Traceback" in result.err:
        problems.append(f"check: {result.err.strip()[-200:]}")
    else:
        rel = f".state/sessions/{sid}/state.json"
        if not any(
            f["path"] == rel and f["severity"] == "error" and f["rule"].startswith("state-")
            for f in json.loads(result.out)["findings"]
        ):
            problems.append("check does not report it")
    for argv in (["boot"], ["status"], ["session", "list"], ["session", "show"]):
        result = call(*argv)
        if result.code is None or "Traceback" in result.err:
            problems.append(f"{argv}: {result.err.strip()[-200:]}")
    for argv in UPDATES:
        path.write_text(bad)
        before = snapshot(store)
        result = call(*argv)
        if result.code is None or "Traceback" in result.err:
            problems.append(f"{argv}: {result.err.strip()[-200:]}")
        elif result.code != 1:
            problems.append(f"{argv} was not refused (exit {result.code})")
        elif snapshot(store) != before:
            problems.append(f"{argv} refused but changed files")
        if not session_dir(store, sid).exists():  # archived after all: put it back
            moved = store / ".state" / "history" / sid[:7] / sid
            moved.rename(session_dir(store, sid))
    assert not problems, "\n".join(problems)


def remove_deep(top: Path) -> None:
    """rmtree recurses once per level; remove a very deep tree from the bottom up."""
    bottom = top
    while (bottom / "d").is_dir():
        bottom = bottom / "d"
    while bottom != top.parent:
        for child in bottom.iterdir():
            if not child.is_dir():
                child.unlink()
        bottom.rmdir()
        bottom = bottom.parent


@pytest.fixture
def deep_refs(store):
    top = store / ".stacks" / "refs" / "d"
    here = os.getcwd()
    os.chdir(store / ".stacks" / "refs")
    try:
        for _ in range(1200):
            os.mkdir("d")
            os.chdir("d")
        Path("deep.md").write_text("# Deep\n\nat the bottom\n")
    finally:
        os.chdir(here)
    yield store
    remove_deep(top)


def test_a_refs_tree_deeper_than_the_limit_is_a_clean_error(deep_refs, call):
    problems = []
    for argv in (["boot"], ["status"], ["search", "bottom"], ["export", "-o", "m.zip"]):
        result = call(*argv)
        if result.code is None or "Traceback" in result.err:
            problems.append(f"{argv}: {result.err.strip()[-200:]}")
    result = call("check", "--json")
    if result.code is None or "Traceback" in result.err:
        problems.append(f"check: {result.err.strip()[-200:]}")
    elif not any(
        f["severity"] == "error" and f["path"].startswith(".stacks/refs")
        for f in json.loads(result.out)["findings"]
    ):
        problems.append("check does not report the too-deep refs tree")
    assert not problems, "\n".join(problems)


LATIN1 = b"caf\xe9 cr\xe8me"


def non_utf8_case(store: Path, name: str) -> tuple[Path, list[str]]:
    memory = store / ".stacks" / "MEMORY.md"
    if name == "note":
        memory.write_bytes(MEMORY.encode().replace(b"two precedence bugs.", LATIN1))
        return memory, ["note", "Status", "more"]
    if name == "note-identity":
        agent = store / ".stacks" / "AGENT.md"
        agent.write_bytes(IDENTITY.encode().replace(b"tests before features.", LATIN1))
        return agent, ["note", "Role", "more", "--identity"]
    if name == "fix-heading":
        text = MEMORY.encode().replace(b"## Open Questions\n\nNone yet.\n\n", b"")
        memory.write_bytes(text.replace(b"two precedence bugs.", LATIN1))
        return memory, ["check", "--fix"]
    if name == "fix-gitignore":
        path = store / ".stacks" / ".gitignore"
        path.write_bytes(b"# " + LATIN1 + b"\n")
        return path, ["check", "--fix"]
    path = store / "AGENTS.md"
    path.write_bytes(b"# Project\n\n" + LATIN1 + b"\n")
    return path, ["setup", "agents-md", "--install"]


@pytest.mark.parametrize(
    "name", ["note", "note-identity", "fix-heading", "fix-gitignore", "agents-md"]
)
def test_a_file_that_is_not_utf8_keeps_every_byte_or_is_refused(store, call, name):
    path, argv = non_utf8_case(store, name)
    before = path.read_bytes()
    result = call(*argv)
    assert "Traceback" not in result.err, result
    after = path.read_bytes()
    if after != before:
        assert LATIN1 in after, f"{argv} rewrote the file and lost bytes it did not mean to"


def test_a_fact_block_that_is_not_utf8_is_never_rewritten(store, run):
    facts = store / ".stacks" / "refs" / "facts.md"
    facts.write_bytes(b"# Facts \xe9\n")
    before = snapshot(store)
    result = run("fact", "set", "lang", "Rust")
    assert result.code == 1 and "not valid UTF-8" in result.err
    assert snapshot(store) == before
