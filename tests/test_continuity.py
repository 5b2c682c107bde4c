"""Resume from anywhere: work waiting in a fresh clone, a pointer to a session archived
elsewhere, conflict markers that never reach the prompt, one session checkpointed in two
clones, logs merged out of order, and editing without traps.

Sections 1-5 use the real git (clones of a bare origin, a private git configuration, no
merge driver installed unless a test says so); stm runs in-process with `--dir CLONE` and
a clock that moves one minute per command, so every event has a known, increasing time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import all_command_paths
from helpers import (
    EXAMPLE,
    boot_section,
    findings,
    marker_lines,
    read_jsonl,
    read_state,
    state_path,
)

import stm

pytestmark = pytest.mark.git  # git-heavy: `pytest -m 'not git'` leaves this file out

WAITING = "## Sessions waiting (no session is current in this clone)"
# ---- helpers ------------------------------------------------------------------------------


def bullets(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("- ")]


def names_lines(message: str, numbers: list[int]) -> bool:
    return all(re.search(rf"\b{n}\b", message) for n in numbers)


def handoff(task_id: str, to_agent: str) -> str:
    return json.dumps(dict(EXAMPLE, task_id=task_id, from_agent="planner-agent", to_agent=to_agent))


# ---- 1. a fresh clone sees the work waiting ------------------------------------------------


def test_fresh_clone_lists_waiting_sessions_and_adopts_one(world):
    world.seed()
    alice = world.clone("alice")
    for_bob = world.stm(
        alice,
        "compose-handoff",
        "-",
        "--no-switch",
        "--json",
        user="alice",
        stdin=handoff("PARSER-42", "bob"),
    )
    for_bob = json.loads(for_bob.out)["session_id"]
    for_carol = world.stm(
        alice,
        "compose-handoff",
        "-",
        "--no-switch",
        "--json",
        user="alice",
        stdin=handoff("PARSER-43", "carol"),
    )
    for_carol = json.loads(for_carol.out)["session_id"]
    plain = world.stm(
        alice, "session", "new", "--name", "port grammar", "--phases", "plan,build", user="alice"
    ).out.strip()
    world.stm(
        alice,
        "session",
        "checkpoint",
        "--done",
        "plan",
        "--pending",
        "port binary operators",
        "--pending",
        "port unary operators",
        "--resume",
        "run pytest -k grammar",
        user="alice",
    )
    world.stm(alice, "session", "phase", "build", user="alice")
    world.commit(alice, "alice's sessions")
    world.push(alice)

    bob = world.clone("bob")
    pointer = bob / ".state" / "current-session.json"
    assert not pointer.exists()  # the pointer is local: it never travels

    boot = world.stm(bob, "boot", user="bob")
    assert WAITING in boot.out, boot.out
    assert "## Active workflow" not in boot.out
    # The one addressed to this user (STM_USER=bob) comes first, whole (issue 24, 2); the
    # others one line each.
    full, _, others = boot_section(boot.out, WAITING[3:]).partition("Also waiting:")
    assert f"adopt it with `stm session switch {for_bob}`" in full, full
    assert "- Handoff: task PARSER-42 from planner-agent" in full
    assert f"- Phase: {EXAMPLE['phase']}" in full  # the handoff's own phase
    assert f"  1. {EXAMPLE['next_steps'][0]}" in full
    lines = bullets(others)
    assert len(lines) == 2, lines
    by_id = {}
    for sid in (for_carol, plain):
        [line] = [line for line in lines if f"`{sid}`" in line or sid in line]
        by_id[sid] = line
        assert line.endswith(f"adopt: `stm session switch {sid}`"), line
        assert re.search(r"\bphase \S+", line), line
        assert re.search(r"last activity \S+ ago", line), line
    assert "HANDOFF task PARSER-43 from planner-agent to carol" in by_id[for_carol]
    assert "port grammar" in by_id[plain] and "phase build" in by_id[plain]
    assert "HANDOFF" not in by_id[plain]

    listed = world.stm(bob, "session", "list", user="bob").out.splitlines()
    [row] = [line for line in listed if for_bob in line]
    assert "[handoff PARSER-42 from planner-agent to bob]" in row, listed
    [row] = [line for line in listed if plain in line]
    assert "[handoff" not in row
    rows = json.loads(world.stm(bob, "session", "list", "--json", user="bob").out)["sessions"]
    handoffs = {r["session_id"]: r["handoff"] for r in rows}
    assert handoffs == {
        for_bob: {"task_id": "PARSER-42", "from_agent": "planner-agent", "to_agent": "bob"},
        for_carol: {"task_id": "PARSER-43", "from_agent": "planner-agent", "to_agent": "carol"},
        plain: None,
    }

    world.stm(bob, "session", "switch", plain, user="bob")
    boot = world.stm(bob, "boot", user="bob").out
    assert WAITING not in boot
    workflow = boot_section(boot, "Active workflow")
    assert plain in workflow
    assert "  1. port binary operators" in workflow
    assert "  2. port unary operators" in workflow
    assert "- Resume: run pytest -k grammar" in workflow


# ---- 2. a pointer to a session archived in another clone -----------------------------------


def test_pointer_to_a_session_archived_in_another_clone(world):
    world.seed()
    alice = world.clone("alice")
    gone = world.stm(alice, "session", "new", "--name", "to be archived").out.strip()
    still = world.stm(alice, "session", "new", "--name", "still open", "--no-switch").out.strip()
    world.commit(alice, "two sessions")
    world.push(alice)

    bob = world.clone("bob")
    world.stm(bob, "session", "switch", gone)

    world.stm(alice, "session", "archive", gone)
    world.commit(alice, "archived")
    world.push(alice)
    world.pull(bob)
    assert not (bob / ".state" / "sessions" / gone).exists()
    assert list((bob / ".state" / "history").rglob(f"{gone}/state.json"))

    boot = world.stm(bob, "boot")
    assert "## Active workflow" not in boot.out, boot.out
    waiting = boot_section(boot.out, WAITING[3:])
    assert still in waiting and gone not in waiting
    assert gone in boot.err and "archived" in boot.err, boot.err

    # Boot cleared the pointer, naming the session and where to read it (issue 35: a
    # session archived in another clone is never a check error).
    notices = boot_section(boot.out, "Notices")
    assert gone in notices and f"stm session show {gone}" in notices, notices
    assert stm.load_json((bob / ".state" / "current-session.json").read_text()) == {
        "active_session": None,
        "updated_at": stm.load_json((bob / ".state" / "current-session.json").read_text())[
            "updated_at"
        ],
    }
    status = world.stm(bob, "status")
    assert gone not in status.out + status.err, status
    check = world.stm(bob, "check", "--json")
    assert not [f for f in findings(check) if f["rule"].startswith("pointer-")], findings(check)


# ---- 3. conflict markers never reach the prompt ----------------------------------------


def drop_open_questions(repo: Path) -> None:
    memory = repo / ".stacks" / "MEMORY.md"
    text = memory.read_text()
    assert "## Open Questions\n\nNone yet.\n\n" in text
    memory.write_text(text.replace("## Open Questions\n\nNone yet.\n\n", ""))


@pytest.fixture
def conflicted(world):
    """Bob's clone after pulling a `note Status --replace` that conflicts with his own (no
    merge driver): MEMORY.md holds git's markers. Alice also removed `## Open Questions`,
    which merges cleanly, so `check --fix` has a heading it would like to restore."""
    world.seed()
    alice, bob = world.clone("alice"), world.clone("bob")
    drop_open_questions(alice)
    world.stm(alice, "note", "Status", "--replace", "alpha status: lexer done")
    world.commit(alice, "alice's status")
    world.push(alice)
    world.stm(bob, "note", "Status", "--replace", "beta status: parser done")
    world.commit(bob, "bob's status")
    pulled = world.pull(bob, ok=False)
    assert pulled.returncode != 0 and "CONFLICT" in pulled.stdout + pulled.stderr, pulled
    memory = bob / ".stacks" / "MEMORY.md"
    marks = marker_lines(memory.read_text())
    assert len(marks) >= 3, memory.read_text()
    assert "## Open Questions" not in memory.read_text()
    return world, bob, memory, marks


def test_check_reports_conflict_markers_left_by_git(conflicted):
    world, bob, memory, marks = conflicted
    check = world.stm(bob, "check", "--json", code=1)
    found = [f for f in findings(check) if f["rule"] == "conflict-markers"]
    assert len(found) == 1, findings(check)
    assert found[0]["severity"] == "error"
    assert found[0]["path"] == ".stacks/MEMORY.md"
    assert found[0]["line"] == marks[0]
    text = world.stm(bob, "check", code=1).out
    assert re.search(
        rf"^error\s+conflict-markers\s+\.stacks/MEMORY\.md:{marks[0]}\b", text, re.M
    ), text


def test_boot_announces_conflict_markers_before_identity(conflicted):
    world, bob, memory, marks = conflicted
    boot = world.stm(bob, "boot")
    head = boot.out.split("## Identity", 1)[0]
    assert "## Notices" in head, boot.out
    [notice] = [line for line in head.splitlines() if "unresolved merge conflict markers" in line]
    shown = ", ".join(str(n) for n in marks[:2])
    assert f".stacks/MEMORY.md has unresolved merge conflict markers (lines {shown}" in notice
    assert "`stm " in notice  # the command to run


@pytest.mark.parametrize(
    "args",
    [
        ("note", "Next Steps", "one more step"),
        ("note", "Status", "--replace", "a third status"),
    ],
    ids=["note", "note-replace"],
)
def test_edits_refuse_a_file_with_conflict_markers(conflicted, args):
    world, bob, memory, marks = conflicted
    before = memory.read_bytes()
    result = world.stm(bob, *args, code=1)
    assert memory.read_bytes() == before
    assert "MEMORY.md" in result.err, result
    assert names_lines(result.err, marks[:3]), (marks, result.err)
    assert memory.read_bytes() == before


def test_compact_refuses_a_file_with_conflict_markers(conflicted):
    if ["compact"] not in all_command_paths():
        pytest.skip("no `stm compact` command")
    world, bob, memory, marks = conflicted
    before = memory.read_bytes()
    result = world.stm(bob, "compact", code=1)
    assert "MEMORY.md" in result.err and names_lines(result.err, marks[:3]), result
    assert memory.read_bytes() == before


CONFLICT = "<<<<<<< ours\nsaid one thing\n=======\nsaid another\n>>>>>>> theirs\n"


def plant_markers(store: Path, run, where: str) -> tuple[Path, str]:
    """Markers written into one file by hand; returns the file and its path for stm."""
    if where == "AGENT.md":
        path = store / ".stacks" / "AGENT.md"
        path.write_text(
            path.read_text().replace("Small commits; tests before features.\n", CONFLICT)
        )
    elif where == "ref":
        path = store / ".stacks" / "refs" / "topic.md"
        path.write_text("# Topic\n\nWhat the topic is.\n\n" + CONFLICT)
    else:
        result = run("compose-handoff", "-", "--json", stdin=handoff("PARSER-42", "bob"))
        assert result.code == 0, result
        path = store / json.loads(result.out)["session_md"]
        path.write_text(path.read_text() + "\n" + CONFLICT)
    return path, path.relative_to(store).as_posix()


@pytest.mark.parametrize("where", ["AGENT.md", "ref", "Session.md"])
def test_markers_in_other_files_are_found_and_announced(store, run, where):
    path, rel = plant_markers(store, run, where)
    marks = marker_lines(path.read_text())
    assert len(marks) == 3
    check = run("check", "--json")
    assert check.code == 1, check
    found = [f for f in findings(check) if f["rule"] == "conflict-markers"]
    assert [(f["severity"], f["path"], f["line"]) for f in found] == [("error", rel, marks[0])]
    boot = run("boot")
    assert boot.code == 0, boot
    head = boot.out.split("## Identity", 1)[0]
    assert "## Notices" in head, boot.out
    assert f"{rel} has unresolved merge conflict markers (lines {marks[0]}, {marks[1]}" in head


def test_note_identity_refuses_an_agent_md_with_markers(store, run):
    path, _ = plant_markers(store, run, "AGENT.md")
    before = path.read_bytes()
    result = run("note", "--identity", "Role", "one more duty")
    assert result.code == 1, result
    assert "AGENT.md" in result.err and names_lines(result.err, marker_lines(path.read_text()))
    assert path.read_bytes() == before


def test_markers_inside_a_code_fence_are_text(store, run):
    memory = store / ".stacks" / "MEMORY.md"
    fenced = "How git shows a conflict:\n\n```\n" + CONFLICT + "```\n"
    memory.write_text(
        memory.read_text().replace("The old grammar has two precedence bugs.\n", fenced)
    )
    check = run("check", "--json")
    assert check.code == 0, check
    assert [f for f in findings(check) if f["rule"] == "conflict-markers"] == []
    boot = run("boot")
    assert "conflict markers" not in boot.out and "## Notices" not in boot.out, boot.out
    assert run("note", "Next Steps", "still editable").code == 0


# ---- 4. one session checkpointed in two clones -------------------------------------------


def without_version(event: dict) -> str:
    return json.dumps({k: v for k, v in event.items() if k != "version"}, sort_keys=True)


@pytest.fixture(params=["theirs", "ours", "unresolved"])
def diverged(request, world):
    """Session S checkpointed in alice's clone, then (a minute later) in bob's; bob pulls:
    history.jsonl merges by union, state.json conflicts and is resolved as `params` says."""
    world.seed()
    alice = world.clone("alice")
    sid = world.stm(alice, "session", "new", "--name", "shared work").out.strip()
    world.stm(alice, "session", "checkpoint", "--pending", "step1", "--pending", "step2")
    world.commit(alice, "session")
    world.push(alice)
    bob = world.clone("bob")

    world.stm(
        alice,
        "session",
        "checkpoint",
        "--session",
        sid,
        "--done",
        "step1",
        "--note",
        "note from A",
        user="alice",
    )
    world.commit(alice, "alice's checkpoint")
    world.push(alice)
    world.stm(
        bob,
        "session",
        "checkpoint",
        "--session",
        sid,
        "--pending",
        "p1",
        "--pending",
        "p2",
        "--note",
        "note from B",
        user="bob",
    )
    world.commit(bob, "bob's checkpoint")

    history = state_path(bob, sid).parent / "history.jsonl"
    originals = {
        without_version(e)
        for clone in (alice, bob)
        for e in read_jsonl(state_path(clone, sid).parent / "history.jsonl")
    }
    pulled = world.pull(bob, ok=False)
    assert pulled.returncode != 0, pulled
    rel = state_path(bob, sid).relative_to(bob).as_posix()
    unmerged = world.git(bob, "ls-files", "-u").stdout
    assert rel in unmerged and "history.jsonl" not in unmerged, unmerged
    if request.param != "unresolved":
        world.git(bob, "checkout", f"--{request.param}", "--", rel)
        world.git(bob, "add", rel)
        world.git(bob, "commit", "-q", "--no-edit")
    else:
        assert marker_lines(state_path(bob, sid).read_text())
    return world, bob, sid, rel, history, originals


def test_check_finds_and_fix_rebuilds_a_state_changed_in_two_clones(diverged):
    world, bob, sid, rel, history, originals = diverged
    before = world.stm(bob, "check", "--json", code=1)
    conflict = [f for f in findings(before) if f["rule"] == "state-conflict"]
    assert [(f["severity"], f["path"]) for f in conflict] == [("error", rel)], findings(before)

    fixed = world.stm(bob, "check", "--fix", code=0)
    assert "state-conflict" in fixed.out, fixed

    events = read_jsonl(history)
    kept = [without_version(e) for e in events]
    assert originals <= set(kept), (originals - set(kept), events)
    assert len(kept) == len(set(kept)), events  # nothing doubled
    stamps = [stm.parse_iso(e["timestamp"], need_zone=True) for e in events]
    assert stamps == sorted(stamps), events
    assert [e["version"] for e in events] == list(range(1, len(events) + 1)), events

    state = read_state(bob, sid)
    assert state["version"] == events[-1]["version"], (state, events)
    assert state["checkpoint"]["last_completed_step"] == "step1"
    assert state["checkpoint"]["pending_steps"] == ["p1", "p2"]  # bob's, the later checkpoint
    notes = state["recovery"]["recovery_notes"]
    assert "note from A" in notes and "note from B" in notes, notes

    after = world.stm(bob, "check", "--json", code=0)
    assert [f for f in findings(after) if f["severity"] == "error"] == [], findings(after)
    world.stm(bob, "session", "switch", sid)
    workflow = boot_section(world.stm(bob, "boot").out, "Active workflow")
    assert "- Last completed step: step1" in workflow
    assert "  1. p1" in workflow and "  2. p2" in workflow
    assert "note from A" in workflow and "note from B" in workflow


# ---- 5. logs merged by union, out of time order ---------------------------------------------


def test_logs_merged_out_of_order_check_clean_and_search_newest_first(world):
    world.seed(lambda seed: world.stm(seed, "log", "seed entry"))
    alice, bob = world.clone("alice"), world.clone("bob")
    world.stm(alice, "log", "quokka alpha one", user="alice")
    world.stm(bob, "log", "quokka beta one", user="bob")
    world.stm(alice, "log", "quokka alpha two", user="alice")
    world.stm(bob, "log", "quokka beta two", user="bob")
    world.commit(alice, "alice's log")
    world.push(alice)
    world.commit(bob, "bob's log")
    pulled = world.pull(bob)
    assert "CONFLICT" not in pulled.stdout + pulled.stderr

    [log] = list((bob / ".stacks" / "logs").glob("*.md"))
    text = log.read_text()
    order = re.findall(r"^quokka (\w+ \w+)$", text, re.M)
    assert sorted(order) == ["alpha one", "alpha two", "beta one", "beta two"]
    assert order != ["alpha one", "beta one", "alpha two", "beta two"], text  # not time order
    assert re.search(r"<!-- stm:end [0-9a-f]{8} -->\n## ", text), text  # no blank line between

    check = world.stm(bob, "check", "--json", code=0)
    assert [f for f in findings(check) if f["rule"] == "log-entry"] == [], findings(check)

    found = json.loads(world.stm(bob, "search", "quokka", "--layer", "logs", "--json").out)
    assert [m["text"] for m in found["matches"]] == [
        "quokka beta two",
        "quokka alpha two",
        "quokka beta one",
        "quokka alpha one",
    ]
    lines = world.stm(bob, "search", "quokka", "--layer", "logs").out.splitlines()
    assert [line.rsplit(": ", 1)[1] for line in lines] == [
        "quokka beta two",
        "quokka alpha two",
        "quokka beta one",
        "quokka alpha one",
    ]


# ---- 6. editing without traps ----------------------------------------------------------------


def memory_of(store: Path) -> Path:
    return store / ".stacks" / "MEMORY.md"


def body_of(text: str, name: str) -> list[str]:
    lines = text.splitlines()
    [start] = [i for i, line in enumerate(lines) if line == f"## {name}"]
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return [line for line in lines[start + 1 : end] if line.strip()]


def test_note_to_a_near_miss_section_asks_did_you_mean(store, run):
    before = memory_of(store).read_bytes()
    result = run("note", "Nxt Steps", "x")
    assert result.code == 2, result
    assert 'did you mean "Next Steps"' in result.err or "did you mean 'Next Steps'" in result.err
    assert memory_of(store).read_bytes() == before

    created = run("note", "Nxt Steps", "x", "--create")
    assert created.code == 0, created
    text = memory_of(store).read_text()
    assert body_of(text, "Nxt Steps") == ["- x"]
    assert body_of(text, "Next Steps") == ["Port the expression grammar."]

    new = run("note", "Decisions", "use a Pratt parser", "--create")
    assert new.code == 0, new
    assert body_of(memory_of(store).read_text(), "Decisions") == ["- use a Pratt parser"]


def test_note_text_that_begins_with_a_dash(store, run):
    replaced = run("note", "Next Steps", "--replace", "- item one")
    assert replaced.code == 0, replaced
    assert body_of(memory_of(store).read_text(), "Next Steps") == ["- item one"]

    piped = run("note", "Next Steps", "-", stdin="-from stdin\n")
    assert piped.code == 0, piped
    assert body_of(memory_of(store).read_text(), "Next Steps")[0] == "- -from stdin"

    dashed = run("note", "Next Steps", "--", "-after a double dash")
    assert dashed.code == 0, dashed
    assert body_of(memory_of(store).read_text(), "Next Steps")[0] == "- -after a double dash"


def test_log_text_that_begins_with_a_dash(store, run):
    assert run("log", "-", stdin="-piped entry\n").code == 0
    dashed = run("log", "--", "-starts with a dash")
    assert dashed.code == 0, dashed
    logs = "".join(p.read_text() for p in (store / ".stacks" / "logs").glob("*.md"))
    assert "\n-piped entry\n" in logs
    assert "\n-starts with a dash\n" in logs


def new_session(run, *pending: str) -> str:
    sid = run("session", "new", "--name", "steps").out.strip()
    args = [arg for step in pending for arg in ("--pending", step)]
    assert run("session", "checkpoint", *args).code == 0
    return sid


def test_checkpoint_done_by_number_or_text_and_a_warning_for_no_match(store, run):
    sid = new_session(run, "a", "b", "c")
    assert "  2. b" in boot_section(run("boot").out, "Active workflow")
    result = run("session", "checkpoint", "--done", "2")
    assert result.code == 0, result
    checkpoint = read_state(store, sid)["checkpoint"]
    assert checkpoint["last_completed_step"] == "b"
    assert checkpoint["pending_steps"] == ["a", "c"]

    result = run("session", "checkpoint", "--done", "c")
    assert result.code == 0, result
    checkpoint = read_state(store, sid)["checkpoint"]
    assert (checkpoint["last_completed_step"], checkpoint["pending_steps"]) == ("c", ["a"])

    result = run("session", "checkpoint", "--done", "zzz")
    assert result.code == 0, result
    assert "zzz" in result.err and "pending" in result.err, result
    checkpoint = read_state(store, sid)["checkpoint"]
    assert (checkpoint["last_completed_step"], checkpoint["pending_steps"]) == ("zzz", ["a"])


def test_checkpoint_empty_note_clears_the_recovery_notes(store, run):
    sid = new_session(run, "a")
    assert run("session", "checkpoint", "--note", "watch the lexer").code == 0
    assert read_state(store, sid)["recovery"]["recovery_notes"] == "watch the lexer"
    result = run("session", "checkpoint", "--note", "")
    assert result.code == 0, result
    assert not read_state(store, sid)["recovery"].get("recovery_notes")
    assert "Recovery notes" not in run("boot").out


def test_checkpoint_finish_marks_the_session_finished_without_archiving(store, run):
    sid = new_session(run, "a", "b")
    assert run("session", "checkpoint", "--resume", "run the tests").code == 0
    result = run("session", "checkpoint", "--finish")
    assert result.code == 0, result
    state = read_state(store, sid)
    assert stm.is_iso_utc(state.get("finished_at")), state
    assert not state["checkpoint"].get("pending_steps"), state
    assert "archived_at" not in state
    assert (store / ".state" / "sessions" / sid / "state.json").is_file()
    assert not list((store / ".state" / "history").rglob(sid))
    workflow = boot_section(run("boot").out, "Active workflow")
    assert "Finished at" in workflow, workflow
    assert "- Resume:" not in workflow


def test_agents_md_block_mentions_session_checkpoint(store, run):
    result = run("setup", "agents-md")
    assert result.code == 0, result
    assert "session checkpoint" in result.out, result.out
