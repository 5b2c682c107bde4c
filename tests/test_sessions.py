"""Sessions in .state/ (spec/state-layout.md)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import snapshot

import stm

ID_RE = re.compile(r"^\d{4}-\d\d-\d\d-[0-9a-f]{8}$")


def new(run, *args):
    result = run("session", "new", *args)
    assert result.code == 0, result
    session_id = result.out.strip()
    assert ID_RE.match(session_id)
    return session_id


def folder(store, session_id):
    return store / ".state" / "sessions" / session_id


def state(store, session_id, base=None):
    return json.loads(((base or folder(store, session_id)) / "state.json").read_text())


def events(store, session_id, base=None):
    lines = ((base or folder(store, session_id)) / "history.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def pointer(store):
    return json.loads((store / ".state" / "current-session.json").read_text())


# ---- session new ------------------------------------------------------------


def test_session_new_creates_the_folder_and_makes_it_current(store, run):
    sid = new(run, "--name", "port parser")
    base = folder(store, sid)
    assert (base / "context").is_dir() and (base / "artifacts").is_dir()
    data = state(store, sid)
    assert data["session_id"] == sid
    assert data["name"] == "port parser"
    assert data["phase"] == "init"
    assert data["version"] == 1
    assert stm.is_iso_utc(data["created_at"]) and data["created_at"] == data["updated_at"]
    assert data["phase_history"] == [
        {"phase": "init", "entered_at": data["created_at"], "exited_at": None}
    ]
    assert [e["event"] for e in events(store, sid)] == ["created"]
    assert pointer(store)["active_session"] == sid
    assert sid.startswith(data["created_at"][:10])


def test_session_new_first_phase_from_phases_or_phase(store, run):
    sid = new(run, "--phases", "plan,build,ship")
    assert state(store, sid)["phase"] == "plan"
    assert state(store, sid)["valid_phases"] == ["plan", "build", "ship"]
    sid = new(run, "--phases", "plan,build", "--phase", "build")
    assert state(store, sid)["phase"] == "build"
    sid = new(run, "--phase", "triage")
    assert state(store, sid)["phase"] == "triage"


@pytest.mark.parametrize(
    "args,message",
    [
        (("--phases", "plan,build", "--phase", "ship"), "not one of --phases"),
        (("--phases", ","), "--phases needs"),
        (("--phases", "a,a"), "twice"),
        (("--phase", "../x"), "a phase is"),
        (("--name", "   "), "--name needs"),
        (("--name", "x" * 201), "longer than 200"),
    ],
)
def test_session_new_refuses_bad_options_and_writes_nothing(store, run, args, message):
    before = snapshot(store)
    result = run("session", "new", *args)
    assert result.code == 2
    assert message in result.err
    assert snapshot(store) == before


def test_session_new_no_switch_leaves_the_pointer(store, run):
    first = new(run)
    new(run, "--no-switch")
    assert pointer(store)["active_session"] == first


def test_session_new_json(store, run):
    data = json.loads(run("session", "new", "--json", "--name", "n").out)
    assert ID_RE.match(data["session_id"])
    assert data["path"] == f".state/sessions/{data['session_id']}"
    assert data["current"] is True and data["version"] == 1 and data["phase"] == "init"


def test_user_namespace_from_flag_and_environment(store, run, monkeypatch):
    sid = new(run, "--user", "Alice Smith")
    assert (store / ".state" / "sessions" / "user-alice-smith" / sid / "state.json").exists()
    monkeypatch.setenv("STM_USER", "Bob")
    sid2 = new(run)
    assert (store / ".state" / "sessions" / "user-bob" / sid2).is_dir()
    # Sessions of any namespace can be switched to and shown.
    monkeypatch.delenv("STM_USER")
    assert run("session", "switch", sid).code == 0
    assert run("session", "show", sid2).code == 0


def test_user_name_without_letters_is_refused(store, run):
    before = snapshot(store)
    result = run("session", "new", "--user", "../..")
    assert result.code == 2
    assert "no letter or digit" in result.err
    assert snapshot(store) == before


# ---- switch and id matching -------------------------------------------------


def test_switch_by_full_id_prefix_and_suffix(store, run):
    a = new(run)
    b = new(run)
    assert run("session", "switch", a).code == 0
    assert pointer(store)["active_session"] == a
    assert run("session", "switch", b[-8:]).code == 0
    assert pointer(store)["active_session"] == b
    # A prefix of the id: the date part is shared, so add the hex part.
    assert run("session", "switch", a[:14]).code == 0
    assert pointer(store)["active_session"] == a
    # The start of the hex part alone, like a short git hash.
    assert run("session", "switch", b[11:15]).code == 0
    assert pointer(store)["active_session"] == b


def test_a_short_hash_shared_by_two_sessions_is_ambiguous(store, run, monkeypatch):
    ids = iter(["2026-11-22-3f9a0c1d", "2026-11-22-3f9abbbb"])  # date-safe: pinned clock or id
    monkeypatch.setattr(stm, "new_session_id", lambda now: next(ids))
    a, b = new(run), new(run)
    result = run("session", "switch", "3f9a")
    assert result.code == 1 and a in result.err and b in result.err
    assert run("session", "switch", "3f9a0").code == 0
    assert pointer(store)["active_session"] == a


def test_switch_ambiguous_prefix_lists_candidates(store, run):
    a, b = new(run), new(run)
    before = snapshot(store)
    result = run("session", "switch", a[:10])
    assert result.code == 1
    assert "ambiguous" in result.err and a in result.err and b in result.err
    assert snapshot(store) == before


def test_switch_unknown_session(store, run):
    new(run)
    result = run("session", "switch", "2020-01-01-00000000")
    assert result.code == 1
    assert "no session 2020-01-01-00000000" in result.err
    result = run("session", "switch", "ffffffff")
    assert result.code == 1
    assert "no session matches" in result.err


@pytest.mark.parametrize("token", ["../etc", "abc", "/tmp/x", "2026-11-22-XYZ!", "a\x00bcd", ""])
def test_switch_refuses_what_is_not_an_id_before_touching_the_disk(store, run, token):
    before = snapshot(store)
    result = run("session", "switch", token)
    assert result.code == 2
    assert "not a session id" in result.err
    assert "\x00" not in result.err
    assert snapshot(store) == before


def test_switch_to_an_archived_session_is_refused(store, run):
    sid = new(run)
    run("session", "archive")
    result = run("session", "switch", sid)
    assert result.code == 1
    assert "archived" in result.err


# ---- archive ----------------------------------------------------------------


def test_archive_moves_the_folder_and_clears_the_pointer(store, run):
    sid = new(run)
    result = run("session", "archive")
    assert result.code == 0
    target = store / ".state" / "history" / sid[:7] / sid
    assert target.is_dir() and not folder(store, sid).exists()
    assert events(store, sid, target)[-1]["event"] == "archived"
    assert state(store, sid, target)["archived_at"]
    assert pointer(store)["active_session"] is None
    assert "archived to .state/history/" in result.err


def test_archive_other_session_keeps_the_pointer(store, run):
    a = new(run)
    b = new(run)
    assert run("session", "archive", a[-6:]).code == 0
    assert pointer(store)["active_session"] == b


def test_archive_twice_is_a_no_op(store, run):
    sid = new(run)
    run("session", "archive", sid)
    before = snapshot(store)
    result = run("session", "archive", sid)
    assert result.code == 0
    assert "already archived" in result.err
    assert snapshot(store) == before


def test_archive_user_namespaced_session(store, run):
    sid = new(run, "--user", "alice")
    assert run("session", "archive", sid).code == 0
    assert (store / ".state" / "history" / sid[:7] / sid / "state.json").exists()
    assert state(store, sid, store / ".state" / "history" / sid[:7] / sid)["user"] == "alice"


def test_archive_without_current_session_is_an_error(store, run):
    result = run("session", "archive")
    assert result.code == 1
    assert "no current session" in result.err


def test_archived_sessions_are_read_only(store, run):
    sid = new(run)
    run("session", "archive")
    before = snapshot(store)
    for args in (("phase", "x"), ("checkpoint", "--done", "a")):
        result = run("session", *args, "--session", sid)
        assert result.code == 1
        assert "archived and read-only" in result.err
    assert snapshot(store) == before


def test_archive_expect_version_conflict(store, run):
    sid = new(run)
    before = snapshot(store)
    result = run("session", "archive", sid, "--expect-version", "7")
    assert result.code == 3
    assert snapshot(store) == before


# ---- list / show ------------------------------------------------------------


def test_list_marks_the_current_session_and_all_includes_archived(store, run):
    a = new(run, "--name", "first")
    b = new(run, "--name", "second")
    run("session", "archive", a)
    out = run("session", "list").out
    assert f"* {b}" in out and a not in out
    out = run("session", "list", "--all").out
    assert a in out and "[archived]" in out
    data = json.loads(run("session", "list", "--all", "--json").out)
    assert data["current"] == b
    rows = {r["session_id"]: r for r in data["sessions"]}
    assert rows[a]["archived"] is True and rows[b]["current"] is True
    assert rows[b]["name"] == "second" and rows[b]["phase"] == "init"


def test_list_with_no_sessions_says_how_to_start(store, run):
    result = run("session", "list")
    assert result.code == 0 and result.out == ""
    assert "stm session new" in result.err


def test_show_prints_state_checkpoint_and_events(store, run):
    sid = new(run, "--name", "demo")
    run("session", "checkpoint", "--done", "plan", "--pending", "build")
    out = run("session", "show").out
    assert f"session {sid} (current)" in out
    assert "Last completed step: plan" in out
    assert "checkpoint" in out and "created" in out
    data = json.loads(run("session", "show", sid, "--json").out)
    assert data["state"]["checkpoint"]["pending_steps"] == ["build"]
    assert [e["event"] for e in data["events"]] == ["created", "checkpoint"]


# ---- phase ------------------------------------------------------------------


def test_phase_records_the_transition(store, run):
    sid = new(run, "--phases", "plan,build,ship")
    result = run("session", "phase", "build")
    assert result.code == 0
    data = state(store, sid)
    assert data["phase"] == "build" and data["version"] == 2
    history = data["phase_history"]
    assert [h["phase"] for h in history] == ["plan", "build"]
    assert history[0]["exited_at"] == history[1]["entered_at"]
    assert history[1]["exited_at"] is None
    last = events(store, sid)[-1]
    assert last["event"] == "phase_change" and last["from"] == "plan" and last["to"] == "build"
    assert last["version"] == 2


def test_phase_outside_valid_phases_is_refused(store, run):
    new(run, "--phases", "plan,build")
    before = snapshot(store)
    result = run("session", "phase", "deploy")
    assert result.code == 2
    assert "not one of this session's phases: plan, build" in result.err
    assert snapshot(store) == before


def test_phase_to_the_current_phase_is_a_no_op(store, run):
    sid = new(run)
    before = snapshot(store)
    result = run("session", "phase", "init")
    assert result.code == 0
    assert "nothing changed" in result.out
    assert snapshot(store) == before
    assert state(store, sid)["version"] == 1


def test_phase_without_current_session(store, run):
    result = run("session", "phase", "x")
    assert result.code == 1
    assert "no current session" in result.err and "--session" in result.err


def test_phase_with_session_flag_acts_on_that_session(store, run):
    a = new(run)
    b = new(run)
    assert run("session", "phase", "review", "--session", a).code == 0
    assert state(store, a)["phase"] == "review"
    assert state(store, b)["phase"] == "init"


def test_expect_version_conflict_exits_3_and_writes_nothing(store, run):
    sid = new(run)
    before = snapshot(store)
    result = run("session", "phase", "build", "--expect-version", "5")
    assert result.code == 3
    assert "conflict" in result.err and "version 1, not 5" in result.err
    assert snapshot(store) == before
    assert run("session", "phase", "build", "--expect-version", "1").code == 0
    assert state(store, sid)["version"] == 2


def test_phase_json_reports_change(store, run):
    new(run)
    data = json.loads(run("session", "phase", "build", "--json").out)
    assert data["changed"] is True and data["phase"] == "build" and data["version"] == 2


# ---- checkpoint -------------------------------------------------------------


def test_checkpoint_updates_checkpoint_and_recovery(store, run):
    sid = new(run)
    result = run(
        "session",
        "checkpoint",
        "--done",
        "lexer",
        "--pending",
        "parser",
        "--pending",
        "docs",
        "--resume",
        "run pytest -k parser",
        "--note",
        "grammar file is half ported",
    )
    assert result.code == 0
    data = state(store, sid)
    assert data["checkpoint"] == {
        "last_completed_step": "lexer",
        "pending_steps": ["parser", "docs"],
        "resume_instruction": "run pytest -k parser",
        "can_resume": True,
    }
    assert data["recovery"]["recovery_notes"] == "grammar file is half ported"
    assert data["recovery"]["last_agent"] == "tester"
    assert data["recovery"]["last_action"] == "checkpoint: done lexer"
    assert events(store, sid)[-1]["event"] == "checkpoint"


def test_checkpoint_done_removes_the_step_from_pending(store, run):
    sid = new(run)
    run("session", "checkpoint", "--pending", "a", "--pending", "b")
    run("session", "checkpoint", "--done", "a")
    assert state(store, sid)["checkpoint"]["pending_steps"] == ["b"]
    run("session", "checkpoint", "--clear-pending")
    assert state(store, sid)["checkpoint"]["pending_steps"] == []


def test_checkpoint_repeated_is_idempotent(store, run):
    sid = new(run)
    args = ("session", "checkpoint", "--done", "a", "--pending", "b", "--note", "n")
    run(*args)
    before = snapshot(store)
    result = run(*args)
    assert result.code == 0
    assert "nothing changed" in result.out
    assert snapshot(store) == before
    assert state(store, sid)["version"] == 2
    assert len(events(store, sid)) == 2


def test_checkpoint_interrupted_is_recorded_kept_and_cleared_by_progress(store, run, monkeypatch):
    sid = new(run)
    monkeypatch.setattr(stm, "utc_now", lambda: stm.parse_iso("2026-11-22T09:00:00Z"))
    assert run("session", "checkpoint", "--pending", "port grammar").code == 0
    result = run("session", "checkpoint", "--interrupted", "--note", "context lost")
    assert result.code == 0
    recovery = state(store, sid)["recovery"]
    assert recovery["interrupted_at"] == "2026-11-22T09:00:00Z"
    assert recovery["last_action"] == "checkpoint: interrupted"
    assert events(store, sid)[-1]["interrupted"] is True
    assert "- Interrupted at: 2026-11-22T09:00:00Z" in run("boot").out

    monkeypatch.setattr(stm, "utc_now", lambda: stm.parse_iso("2026-11-22T10:00:00Z"))
    before = snapshot(store)
    assert "nothing changed" in run("session", "checkpoint", "--interrupted").out  # a retry
    assert snapshot(store) == before  # the first cut-off time stands

    assert run("session", "checkpoint", "--done", "port grammar").code == 0
    assert "interrupted_at" not in state(store, sid)["recovery"]
    assert "Interrupted at" not in run("boot").out


@pytest.mark.parametrize(
    "args,message",
    [
        ((), "checkpoint needs"),
        (("--done", ""), "--done needs"),
        (("--pending", "a", "--clear-pending"), "do not go together"),
        (("--note", "x" * 2001), "longer than 2000"),
    ],
)
def test_checkpoint_refuses_bad_options(store, run, args, message):
    new(run)
    before = snapshot(store)
    result = run("session", "checkpoint", *args)
    assert result.code == 2
    assert message in result.err
    assert snapshot(store) == before


# ---- integration: boot, check, status ---------------------------------------


def test_boot_shows_the_active_workflow(store, run):
    sid = new(run, "--name", "port parser", "--phases", "plan,build")
    run("session", "phase", "build")
    run("session", "checkpoint", "--done", "plan", "--pending", "grammar", "--resume", "tests")
    out = run("boot").out
    section = out.split("## Active workflow", 1)[1].split("\n## ", 1)[0]
    assert f"- Session: `{sid}` — port parser" in section
    assert "- Phase: build (for 0m) — phases: plan → build" in section
    assert "- Last completed step: plan" in section
    assert "  1. grammar" in section
    assert "- Resume: tests" in section
    assert f".state/sessions/{sid}/state.json (version 3)" in section


def test_boot_without_a_current_session_has_no_workflow_section(store, run):
    new(run, "--no-switch")
    assert "Active workflow" not in run("boot").out


def test_boot_survives_a_corrupt_pointer(store, run):
    new(run)
    (store / ".state" / "current-session.json").write_text("{not json")
    result = run("boot")
    assert result.code == 0
    assert "Active workflow" not in result.out
    assert "current-session.json" in result.err
    # The pointer is git-ignored: the advice is stm's, never a git checkout of it.
    assert "`stm session switch ID` or delete the file" in result.err
    assert "git checkout" not in result.err


def test_resume_after_losing_the_terminal(store, run):
    """The README's promise: start, checkpoint, lose the terminal, resume from boot alone."""
    new(run, "--name", "migrate db", "--phases", "plan,migrate,verify")
    run("session", "phase", "migrate")
    run("session", "checkpoint", "--done", "schema v2", "--pending", "backfill",
        "--resume", "run scripts/backfill.py --from 2026-01")  # fmt: skip
    boot = run("boot").out  # a new agent, a new process, knows nothing else
    assert "migrate db" in boot
    assert "Phase: migrate" in boot
    assert "backfill" in boot
    assert "run scripts/backfill.py --from 2026-01" in boot


def check_rules(run):
    result = run("check", "--json")
    data = json.loads(result.out)
    return result.code, {(f["rule"], f["severity"]) for f in data["findings"]}, data


def test_check_passes_with_sessions(store, run):
    new(run, "--phases", "a,b")
    run("session", "checkpoint", "--done", "a")
    archived = new(run)
    run("session", "archive", archived)
    code, rules, _ = check_rules(run)
    assert code == 0, rules


def test_check_pointer_to_missing_or_archived_session(store, run):
    sid = new(run)
    (store / ".state" / "current-session.json").write_text(
        json.dumps({"active_session": "2020-01-01-00000000", "updated_at": "x"})
    )
    code, rules, _ = check_rules(run)
    assert code == 1 and ("pointer-invalid", "error") in rules
    run("session", "switch", sid)
    run("session", "archive", sid, "--expect-version", "1")
    (store / ".state" / "current-session.json").write_text(
        json.dumps({"active_session": sid, "updated_at": "x"})
    )
    # Archived (in another clone, say): a warning that --fix clears, never an error.
    code, rules, data = check_rules(run)
    assert code == 0 and ("pointer-archived", "warning") in rules, rules
    assert any("archived" in f["message"] for f in data["findings"])
    fixed = run("check", "--fix")
    assert "pointer-archived" in fixed.out and sid in fixed.out, fixed
    assert (
        json.loads((store / ".state" / "current-session.json").read_text())["active_session"]
        is None
    )
    assert check_rules(run)[0] == 0


def test_check_corrupt_pointer(store, run):
    (store / ".state" / "current-session.json").write_text("[]")
    code, rules, _ = check_rules(run)
    assert code == 1 and ("pointer-invalid", "error") in rules


def test_check_session_folder_name_must_be_an_id(store, run):
    (store / ".state" / "sessions" / "my-session").mkdir()
    code, rules, _ = check_rules(run)
    assert code == 1 and ("session-id", "error") in rules


def mutate_state(store, sid, change):
    path = folder(store, sid) / "state.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "change,rule",
    [
        (lambda d: d.pop("phase"), "state-field"),
        (lambda d: d.update(version="1"), "state-field"),
        (lambda d: d.update(session_id="2026-01-01-00000000"), "state-field"),
        (lambda d: d.update(updated_at="yesterday"), "state-timestamp"),
        (lambda d: d["phase_history"][0].update(entered_at="now"), "state-timestamp"),
        (lambda d: d.update(valid_phases=["a"], phase="b"), "state-phase"),
        (lambda d: d.update(checkpoint=[]), "state-field"),
    ],
)
def test_check_state_rules(store, run, change, rule):
    sid = new(run)
    assert check_rules(run)[0] == 0
    mutate_state(store, sid, change)
    code, rules, _ = check_rules(run)
    assert code == 1 and (rule, "error") in rules


def test_check_state_not_json(store, run):
    sid = new(run)
    (folder(store, sid) / "state.json").write_text("{")
    code, rules, _ = check_rules(run)
    assert code == 1 and ("state-invalid", "error") in rules


def test_check_state_size_warning(store, run):
    sid = new(run)
    mutate_state(store, sid, lambda d: d.update(notes="x" * 11000))
    code, rules, _ = check_rules(run)
    assert code == 0 and ("state-size", "warning") in rules


def test_check_history_rules(store, run):
    sid = new(run)
    history = folder(store, sid) / "history.jsonl"
    with open(history, "a") as f:
        f.write('{"event": "x", "timesta')
    code, rules, data = check_rules(run)
    assert code == 0 and ("history-torn", "warning") in rules
    assert any("stm check --fix" in f["fix"] for f in data["findings"])
    history.write_text('{"event": "x"}\nnot json\n')
    code, rules, _ = check_rules(run)
    assert code == 1 and ("history-invalid", "error") in rules


def test_check_history_behind_rule_and_fix(store, run):
    sid = new(run)
    run("session", "checkpoint", "--done", "plan")
    code, rules, _ = check_rules(run)
    assert ("history-behind", "warning") not in rules  # in step: version 2, event 2
    # As a writer killed after writing state.json and before appending its event:
    mutate_state(store, sid, lambda d: d.update(version=3, phase="build"))
    code, rules, data = check_rules(run)
    assert code == 0 and ("history-behind", "warning") in rules
    finding = next(f for f in data["findings"] if f["rule"] == "history-behind")
    assert "version 3" in finding["message"] and "version 2" in finding["message"]
    assert "stm check --fix" in finding["fix"]
    assert run("check", "--strict").code == 1

    before = snapshot(store)
    preview = run("check", "--fix", "--dry-run")
    assert "would fix history-behind" in preview.out
    assert snapshot(store) == before

    fixed = run("check", "--fix", "--json")
    assert fixed.code == 0
    assert [f["rule"] for f in json.loads(fixed.out)["fixed"]] == ["history-behind"]
    last = events(store, sid)[-1]
    assert last["event"] == "recovered"
    assert last["version"] == 3 and last["from_version"] == 2
    assert run("check", "--strict").code == 0
    again = run("check", "--fix", "--json")  # nothing left to record: no second event
    assert json.loads(again.out)["fixed"] == []
    assert events(store, sid)[-1] == last


def test_check_temp_file_warning(store, run):
    sid = new(run)
    (folder(store, sid) / ".state.json.abcd1234.tmp").write_text("{")
    (store / ".stacks" / ".MEMORY.md.abcd1234.tmp").write_text("x")
    code, rules, data = check_rules(run)
    assert code == 0 and ("temp-file", "warning") in rules
    assert len([f for f in data["findings"] if f["rule"] == "temp-file"]) == 2


def test_check_archive_month(store, run):
    sid = new(run)
    run("session", "archive", sid)
    month = store / ".state" / "history" / sid[:7]
    month.rename(store / ".state" / "history" / "1999-01")
    code, rules, _ = check_rules(run)
    assert code == 1 and ("archive-month", "error") in rules


def test_status_shows_sessions_and_idle_warning(store, run, monkeypatch):
    sid = new(run, "--phases", "plan,build")
    out = run("status").out
    assert f"sessions: 1 active, 0 archived; current {sid} in phase plan" in out
    later = stm.utc_now() + 20 * 86400
    monkeypatch.setattr(stm, "utc_now", lambda: later)
    data = json.loads(run("status", "--json").out)
    assert data["sessions"]["idle"] == [sid]
    assert any(f"stm session archive {sid}" in w for w in data["warnings"])
    assert data["sessions"]["current"]["phase"] == "plan"


def test_list_shows_an_unreadable_session_instead_of_failing(store, run):
    sid = new(run, "--name", "fine")
    broken = new(run)
    (folder(store, broken) / "state.json").write_text("{")
    result = run("session", "list")
    assert result.code == 0
    assert sid in result.out and "unreadable state.json" in result.out


# ---- STM_SESSION: one agent's session, whatever the pointer says ---------------------


def test_stm_session_pins_an_environment_to_its_session(store, run, monkeypatch):
    """Two agents share a checkout: B starting a session must not redirect A's updates."""
    a = new(run, "--name", "agent A's task")
    monkeypatch.setenv("STM_SESSION", a[11:15])  # agent A's environment
    with monkeypatch.context() as other:  # agent B, without the variable
        other.delenv("STM_SESSION")
        b = new(run, "--name", "agent B's task")
    assert pointer(store)["active_session"] == b
    assert run("session", "checkpoint", "--done", "step 1").code == 0
    assert state(store, a)["checkpoint"]["last_completed_step"] == "step 1"
    assert "checkpoint" not in state(store, b)
    assert f"Session: `{a}` — agent A's task" in run("boot").out
    listed = [line for line in run("session", "list").out.splitlines() if line.startswith("*")]
    assert len(listed) == 1 and a in listed[0]
    assert f"current {a}" in run("status").out


def test_stm_session_switching_the_pointer_says_the_variable_still_decides(store, run, monkeypatch):
    a = new(run)
    monkeypatch.setenv("STM_SESSION", a)
    result = run("session", "new", "--json")
    assert json.loads(result.out)["current"] is False
    assert f"STM_SESSION={a} still decides" in result.err


@pytest.mark.parametrize(
    "value,code,fragment",
    [
        ("zz", 2, "STM_SESSION=zz: 'zz' is not a session id"),
        ("2020-01-01-00000000", 1, "no session"),
    ],
)
def test_stm_session_that_names_nothing_is_a_clear_error(
    store, run, monkeypatch, value, code, fragment
):
    new(run)
    monkeypatch.setenv("STM_SESSION", value)
    before = snapshot(store)
    result = run("session", "checkpoint", "--done", "x")
    assert result.code == code and fragment in result.err
    assert snapshot(store) == before
    boot = run("boot")  # boot still boots, and says why there is no workflow
    assert boot.code == 0 and "STM_SESSION" in boot.err and "Active workflow" not in boot.out


def test_stm_session_naming_an_archived_session_is_refused(store, run, monkeypatch):
    a = new(run)
    run("session", "archive", a)
    monkeypatch.setenv("STM_SESSION", a)
    result = run("session", "phase", "build")
    assert result.code == 1 and "archived" in result.err and "STM_SESSION" in result.err
