"""compose-handoff (spec/handoff.md)."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
from conftest import MEMORY, ROOT, TODAY, snapshot
from helpers import assert_clean_refusal, findings, handoff_json, log_text, session_dir

import stm

EXAMPLE = ROOT / "spec" / "handoff-example.json"


def example(**changes):
    data = json.loads(EXAMPLE.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def write(project, data, name="h.json"):
    path = project / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


def session_dirs(store):
    base = store / ".state" / "sessions"
    return sorted(p for p in base.iterdir() if p.is_dir())


# ---- the example, end to end ------------------------------------------------


def test_example_handoff_end_to_end(store, run):
    result = run("compose-handoff", str(EXAMPLE))
    assert result.code == 0, result
    sid = result.out.strip()
    base = store / ".state" / "sessions" / sid
    assert (base / "context" / "handoff.json").read_bytes() == EXAMPLE.read_bytes()
    state = json.loads((base / "state.json").read_text())
    assert state["task_id"] == "PARSER-42"
    assert state["from_agent"] == "planner-agent"
    assert state["to_agent"] == "builder-agent"
    assert state["handoff_status"] == "in-progress"
    assert state["phase"] == "build"
    assert state["checkpoint"]["pending_steps"][0] == "Port binary operators"
    assert state["context"]["handoff"] == "context/handoff.json"
    events = [json.loads(line) for line in (base / "history.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["created", "handoff"]
    md = (base / "Session.md").read_text()
    assert md.startswith("# Handoff: PARSER-42\n")
    for line in (
        "- **From:** planner-agent",
        "- **To:** builder-agent",
        "- **Status:** in-progress",
        "- **Created:** 2026-11-22T09:30:00Z",  # date-safe: literal
        f"- **Session:** {sid}",
    ):
        assert line in md
    assert "- **Received:** " in md
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Task",
        "## Summary",
        "## Context",
        "## Decisions",
        "## Next steps",
        "## Artifacts",
        "## Notes",
        "## Other fields",
    ]  # Blockers is empty, so it is left out
    assert "### ticket_url\n\nhttps://tracker.example/PARSER-42" in md
    assert '    {"confidence":"medium","hours":6}' in md
    assert (
        json.loads((store / ".state" / "current-session.json").read_text())["active_session"] == sid
    )
    assert "handoff PARSER-42 received from planner-agent to builder-agent" in log_text(store)
    assert run("check").code == 0


def test_boot_shows_the_handoff(store, run):
    sid = run("compose-handoff", str(EXAMPLE)).out.strip()
    out = run("boot").out
    section = out.split("## Active workflow", 1)[1].split("\n## ", 1)[0]
    assert "Port the expression grammar" in section
    assert "task PARSER-42 from planner-agent to builder-agent, status in-progress" in section
    assert f".state/sessions/{sid}/Session.md" in section
    assert "1. Port binary operators" in section


def test_phase_defaults_to_handoff(store, run, project):
    sid = run("compose-handoff", write(project, example(phase=None))).out.strip()
    state = json.loads((store / ".state" / "sessions" / sid / "state.json").read_text())
    assert state["phase"] == "handoff"


# ---- input ------------------------------------------------------------------


def test_stdin_with_dash_and_with_a_pipe(store, run):
    text = EXAMPLE.read_text()
    assert run("compose-handoff", "-", stdin=text).code == 0
    other = json.dumps(example(task_id="PARSER-43"))
    assert run("compose-handoff", stdin=other).code == 0
    assert len(session_dirs(store)) == 2


def test_no_input_on_a_terminal_is_a_usage_error(store, run, monkeypatch):
    class Tty:
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdin", Tty())
    result = stm.main(["compose-handoff"])
    assert result == 2


def assert_refused(store, run, args, stdin=None, code=1, *fragments):
    before = snapshot(store)
    result = run("compose-handoff", *args, stdin=stdin)
    assert result.code == code, result
    for fragment in fragments:
        assert fragment in result.err
    assert "Traceback" not in result.err
    assert snapshot(store) == before
    return result


def test_every_missing_required_field_is_listed_at_once(store, run, project):
    data = {"summary": "only this"}
    path = write(project, data)
    result = assert_refused(store, run, [path], None, 1)
    for key in stm.HANDOFF_REQUIRED:
        assert f"{key} is missing" in result.err
    assert result.err.count("\n") == 1  # one message


@pytest.mark.parametrize("key", stm.HANDOFF_REQUIRED)
def test_each_required_field_missing(store, run, project, key):
    assert_refused(store, run, [write(project, example(**{key: None}))], None, 1,
                   f"{key} is missing")  # fmt: skip


@pytest.mark.parametrize("key", stm.HANDOFF_REQUIRED)
@pytest.mark.parametrize("bad", [42, "", "   ", ["x"], None])
def test_each_required_field_wrong_type_or_empty(store, run, project, key, bad):
    data = example()
    data[key] = bad
    assert_refused(store, run, [write(project, data)], None, 1, f"{key} must be a non-empty string")


def test_wrong_types_are_listed_together(store, run, project):
    data = example(task_id=1, from_agent=[], status={})
    result = assert_refused(store, run, [write(project, data)], None, 1)
    for key in ("task_id", "from_agent", "status"):
        assert f"{key} must be a non-empty string" in result.err


def test_task_id_length_and_created_at_zone(store, run, project):
    data = example(task_id="x" * 201, created_at="2026-11-22T09:30:00")  # date-safe: literal
    result = assert_refused(store, run, [write(project, data)], None, 1)
    assert "task_id is longer than 200" in result.err
    assert "created_at must be an ISO-8601 timestamp with a time zone" in result.err


@pytest.mark.parametrize("placeholder", ["TBD", "todo", "N/A", "See Chat", "...", " tbd "])
def test_placeholder_task_is_refused(store, run, project, placeholder):
    assert_refused(store, run, [write(project, example(task=placeholder))], None, 1,
                   "placeholder")  # fmt: skip


def test_oversize_handoff(store, run, project):
    data = example(notes="x" * (1024 * 1024))
    assert_refused(store, run, [write(project, data)], None, 1, "larger than 1 MiB")


def test_binary_handoff(store, run, project):
    path = project / "bin.json"
    path.write_bytes(b"\xff\xfe\x00{}")
    assert_refused(store, run, [str(path)], None, 1, "not UTF-8")


def test_empty_input_says_so(store, run):
    assert_refused(store, run, ["-"], " \n", 1, "handoff <stdin> is empty")


def test_invalid_json(store, run, project):
    assert_refused(store, run, [write(project, '{"task_id": ')], None, 1, "not valid JSON")


@pytest.mark.parametrize(
    "tail,message",
    [
        (', "task_id": "other"}', "key 'task_id' appears twice"),
        (', "extra": {"a": 1, "a": 2}}', "key 'a' appears twice"),
        (', "estimate": NaN}', "NaN is not a JSON value"),
        (', "estimate": -Infinity}', "-Infinity is not a JSON value"),
    ],
)
def test_ambiguous_or_non_standard_json_is_refused(store, run, project, tail, message):
    text = json.dumps(example())[:-1] + tail  # the object, one more member
    assert_refused(store, run, [write(project, text)], None, 1, message)


def test_a_byte_order_mark_is_accepted_and_the_bytes_kept(store, run, project):
    raw = "\ufeff".encode() + json.dumps(example()).encode()
    path = project / "bom.json"
    path.write_bytes(raw)
    result = run("compose-handoff", str(path))
    assert result.code == 0, result.err
    sid = result.out.strip()
    stored = project / ".state" / "sessions" / sid / "context" / "handoff.json"
    assert stored.read_bytes() == raw  # byte for byte, mark included


def test_json_array(store, run, project):
    assert_refused(store, run, [write(project, "[1, 2]")], None, 1,
                   "must be a JSON object, not a JSON array")  # fmt: skip


def test_missing_file(store, run):
    assert_refused(store, run, ["nope.json"], None, 1, "nope.json not found")


def test_optional_field_types(store, run, project):
    data = example(to_agent=5, phase="bad phase!")
    result = assert_refused(store, run, [write(project, data)], None, 1)
    assert "to_agent must be a string" in result.err
    assert "phase must be" in result.err


# ---- idempotency ------------------------------------------------------------


def test_same_handoff_twice_creates_nothing_new(store, run):
    first = run("compose-handoff", str(EXAMPLE)).out.strip()
    before = snapshot(store)
    result = run("compose-handoff", str(EXAMPLE), "--json")
    assert result.code == 0
    data = json.loads(result.out)
    assert data["session_id"] == first and data["created"] is False
    assert "already composed" in result.err
    assert snapshot(store) == before


def test_same_handoff_after_archiving_is_still_recognised(store, run):
    first = run("compose-handoff", str(EXAMPLE)).out.strip()
    run("session", "archive", first)
    before = snapshot(store)
    result = run("compose-handoff", str(EXAMPLE))
    assert result.out.strip() == first
    assert f"already composed into session {first} (archived" in result.err
    assert snapshot(store) == before


def test_different_handoff_for_the_same_task_is_a_new_session(store, run, project):
    first = run("compose-handoff", str(EXAMPLE)).out.strip()
    later = example(created_at="2026-11-23T08:00:00Z", status="blocked")  # date-safe: literal
    result = run("compose-handoff", write(project, later), "--json")
    data = json.loads(result.out)
    assert data["created"] is True and data["session_id"] != first
    assert any(first in w for w in data["warnings"])
    assert "an earlier handoff for task PARSER-42 exists" in result.err


# ---- --print, -o, --no-switch -----------------------------------------------


def test_print_renders_and_touches_nothing(store, run):
    before = snapshot(store)
    result = run("compose-handoff", str(EXAMPLE), "--print")
    assert result.code == 0
    assert result.out.startswith("# Handoff: PARSER-42")
    assert "## Next steps" in result.out
    assert snapshot(store) == before


def test_print_works_without_any_store(project, run):
    result = run("compose-handoff", str(EXAMPLE), "--print")
    assert result.code == 0
    assert os.listdir(project) == []


def test_output_file_also_gets_session_md(store, run):
    sid = run("compose-handoff", str(EXAMPLE), "-o", "handoff.md").out.strip()
    md = (store / ".state" / "sessions" / sid / "Session.md").read_text()
    assert (store / "handoff.md").read_text() == md


def test_no_switch_keeps_the_pointer(store, run):
    current = run("session", "new").out.strip()
    run("compose-handoff", str(EXAMPLE), "--no-switch")
    pointer = json.loads((store / ".state" / "current-session.json").read_text())
    assert pointer["active_session"] == current


# ---- Markdown injection -----------------------------------------------------


def test_markdown_in_values_cannot_break_headings(store, run, project):
    data = example(
        summary="# Injected heading\nText\n===\n## Another\n   ### indented",
        decisions=["ok", "# not a heading\n## nor this"],
        notes="setext\n---",
    )
    sid = run("compose-handoff", write(project, data)).out.strip()
    md = (store / ".state" / "sessions" / sid / "Session.md").read_text()
    headings = [line for line in md.splitlines() if line.lstrip(" ").startswith("#")]
    assert all(not h.startswith(("# Injected", "## Another", "# not", "## nor")) for h in headings)
    assert "\\# Injected heading" in md
    assert "\\===" in md and "\\---" in md
    assert "   \\### indented" in md
    assert "- \\# not a heading\n  \\## nor this" in md


def test_control_characters_in_values_are_made_visible(store, run, project):
    data = example(summary="bell\x07 and \x1b[2J clear")
    sid = run("compose-handoff", write(project, data)).out.strip()
    md = (store / ".state" / "sessions" / sid / "Session.md").read_text()
    assert "\x1b" not in md and "\\x1b[2J" in md


# ---- all or nothing ---------------------------------------------------------


def test_failure_midway_leaves_nothing_behind(store, run, monkeypatch):
    current = run("session", "new").out.strip()
    before = snapshot(store)

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device", "logs/today.md")

    monkeypatch.setattr(stm, "append_log_entry", broken)
    result = run("compose-handoff", str(EXAMPLE))
    assert result.code == 1
    assert "No space left on device" in result.err
    assert snapshot(store) == before
    assert (
        json.loads((store / ".state" / "current-session.json").read_text())["active_session"]
        == current
    )


def test_unwritable_log_location_leaves_nothing_behind(store, run):
    # Root ignores permissions, so block the log file with a folder of the same name.
    today = stm.iso(stm.utc_now())[:10]
    (store / ".stacks" / "logs" / f"{today}.md").mkdir()
    before = snapshot(store)
    result = run("compose-handoff", str(EXAMPLE))
    assert result.code == 1
    assert "Traceback" not in result.err
    assert snapshot(store) == before
    assert not (store / ".state" / "current-session.json").exists()


def test_check_reports_a_handoff_session_without_session_md(store, run):
    sid = run("compose-handoff", str(EXAMPLE)).out.strip()
    (store / ".state" / "sessions" / sid / "Session.md").unlink()
    data = json.loads(run("check", "--json").out)
    assert ("handoff-session-md", "error") in {(f["rule"], f["severity"]) for f in data["findings"]}


def test_check_reports_a_handoff_json_that_no_longer_validates(store, run):
    sid = run("compose-handoff", str(EXAMPLE)).out.strip()
    path = store / ".state" / "sessions" / sid / "context" / "handoff.json"
    path.write_text(json.dumps(example(task="TBD")))
    result = run("check", "--json")
    assert result.code == 1
    findings = json.loads(result.out)["findings"]
    assert [f["rule"] for f in findings] == ["handoff-invalid"]
    assert "placeholder" in findings[0]["message"]


def test_an_unreadable_earlier_session_stops_compose_instead_of_duplicating(store, run):
    first = run("compose-handoff", str(EXAMPLE)).out.strip()
    state = store / ".state" / "sessions" / first / "state.json"
    moved = store / "moved-state.json"
    state.rename(moved)
    state.symlink_to(moved)  # O_NOFOLLOW makes it unreadable to stm
    before = snapshot(store)
    result = run("compose-handoff", str(EXAMPLE))
    assert result.code == 1 and "Traceback" not in result.err
    assert snapshot(store) == before


# The findings of a `check --json` Result, which must hold no traceback.
findings = functools.partial(findings, no_traceback=True)


BAD_ZONES = ["+24:00", "-24:00", "+23:60", "+99:99", "+2400"]


@pytest.mark.parametrize("zone", BAD_ZONES)
def test_compose_handoff_refuses_a_zone_offset_of_24_hours_or_more(store, call, zone):
    (store / "h.json").write_text(json.dumps(handoff_json(created_at=f"2026-11-22T09:30:00{zone}")))
    before = snapshot(store)
    assert_clean_refusal(call("compose-handoff", "h.json"), 1, "h.json")
    assert snapshot(store) == before


def set_state(store: Path, sid: str, **fields) -> Path:
    path = session_dir(store, sid) / "state.json"
    state = json.loads(path.read_text())
    state.update(fields)
    path.write_text(json.dumps(state))
    return path


@pytest.mark.parametrize(
    "where", ["state-created", "state-updated", "phase-history", "log-entry", "last-updated"]
)
def test_no_traceback_from_a_zone_offset_of_24_hours_anywhere(store, call, where):
    sid = call("session", "new").out.strip()
    bad = "2026-11-22T10:00:00+24:00"  # date-safe: literal
    if where == "state-created":
        set_state(store, sid, created_at=bad)
    elif where == "state-updated":
        set_state(store, sid, updated_at=bad)
    elif where == "phase-history":
        set_state(store, sid, phase_history=[{"phase": "init", "entered_at": bad}])
    elif where == "log-entry":
        (store / ".stacks" / "logs" / "2026-11-20.md").write_text(  # date-safe: pinned clock or id
            f"## {bad} · x <!-- stm:entry 0badf00d -->\n\nhi\n\n<!-- stm:end 0badf00d -->\n"
        )
    else:
        text = MEMORY.replace(TODAY + "\n", bad + "\n")
        (store / ".stacks" / "MEMORY.md").write_text(text)
    for argv in (["boot"], ["status"], ["session", "list"], ["session", "show"], ["search", "x"]):
        result = call(*argv)
        assert result.code is not None and "Traceback" not in result.err, (argv, result)
    result = call("check", "--json")
    assert "Traceback" not in result.err, result
    if where != "last-updated":
        assert result.code == 1
        rules = {f["rule"] for f in findings(result) if f["severity"] == "error"}
        assert rules & {"state-timestamp", "log-entry"}, rules
    result = call("search", "x", "--since", "2026-11-22T00:00:00+24:00")  # date-safe: literal
    assert_clean_refusal(result, 2, "--since")
