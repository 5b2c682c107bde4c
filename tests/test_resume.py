"""Resume from anywhere, finished (issue 24): sessions that never conflict in git, the
merge driver there where it is needed, and the repairs that name only what git accepts.

Every merge here is the real git: clones of a bare origin, a private git configuration,
with or without the stm merge driver in each clone. stm runs in-process with `--dir
CLONE` and a clock that starts now and moves one minute before every command, so every
event has a known, increasing time; git runs the driver as the process it is configured
to run (`python3 <this stm.py> merge-file ...`: no `stm` command is on PATH here).
"""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import MEMORY, STM_PY, clock, snapshot
from helpers import (
    MARKER_RE,
    FaultyOS,
    World,
    boot_section,
    check_findings,
    findings,
    killed_stm,
    ok,
    read_jsonl,
    read_state,
    restore,
    rules,
    run_stm,
    session_dir,
    state_path,
)

import stm

pytestmark = pytest.mark.git  # git-heavy: `pytest -m 'not git'` leaves this file out

# ---- helpers ------------------------------------------------------------------------------


def read_events(repo: Path, sid: str) -> list[dict]:
    return read_jsonl(state_path(repo, sid).parent / "history.jsonl")


@pytest.fixture
def run_stm_as(store):
    """stm.py as a real process in the store, run as `python3 PATH/stm.py` (hints then
    name that form)."""

    return functools.partial(run_stm, cwd=store, env={"STM_FSYNC": "0"})


def no_conflict(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CONFLICT" not in result.stdout + result.stderr


def assert_clean_tree(world: World, repo: Path) -> None:
    assert world.git(repo, "ls-files", "-u").stdout == ""
    assert world.git(repo, "status", "--porcelain").stdout == ""


def shared_session(world: World, driver: bool = True) -> tuple[Path, Path, str]:
    """alice starts a session with two pending steps and pushes; bob clones. Each clone
    has the driver or not, as `driver` says."""
    world.seed()
    alice = world.clone("alice", driver)
    sid = world.stm(alice, "session", "new", "--name", "shared work", user="alice").out.strip()
    world.checkpoint(alice, sid, "--pending", "step1", "--pending", "step2", user="alice")
    world.commit(alice, "session")
    world.push(alice)
    bob = world.clone("bob", driver)
    return alice, bob, sid


def both_checkpoint(world: World, alice: Path, bob: Path, sid: str) -> None:
    """alice finishes step1 with a note and a resume line; a minute later bob adds a step
    with his own note and resume line. alice pushes first."""
    world.checkpoint(
        alice, sid, "--done", "step1", "--note", "note from A", "--resume", "resume A",
        user="alice",
    )  # fmt: skip
    world.commit(alice, "alice's checkpoint")
    world.push(alice)
    world.checkpoint(
        bob, sid, "--pending", "step1", "--pending", "step2", "--pending", "step3",
        "--note", "note from B", "--resume", "resume B", user="bob",
    )  # fmt: skip
    world.commit(bob, "bob's checkpoint")


def assert_both_kept(state: dict) -> None:
    """What replaying both clones' checkpoints gives: alice's done step gone, bob's new
    step kept, both notes and both resume lines."""
    checkpoint, recovery = state["checkpoint"], state["recovery"]
    assert checkpoint["pending_steps"] == ["step2", "step3"], state
    assert checkpoint["last_completed_step"] == "step1", state
    assert checkpoint["can_resume"] is True
    assert recovery["recovery_notes"] == "note from A | note from B", state
    assert checkpoint["resume_instruction"] == "resume A | resume B", state
    assert recovery["last_agent"] == "bob"  # the newer checkpoint's


# ---- a. one session checkpointed in two clones merges with no conflict ---------------------


def test_two_clones_checkpointing_one_session_merge_cleanly_with_the_driver(world):
    alice, bob, sid = shared_session(world)
    both_checkpoint(world, alice, bob, sid)
    versions = (read_state(alice, sid)["version"], read_state(bob, sid)["version"])

    no_conflict(world.pull(bob))
    assert_clean_tree(world, bob)
    state = read_state(bob, sid)
    assert_both_kept(state)
    assert state["version"] > max(versions) and state["merged_version"] == state["version"]
    assert stm.state_problems(state, sid) == []
    check = world.stm(bob, "check", "--strict", "--json")
    assert findings(check) == [], check
    workflow = boot_section(world.stm(bob, "session", "switch", sid) and world.stm(bob, "boot").out,
                       "Active workflow")  # fmt: skip
    assert "  1. step2" in workflow and "  2. step3" in workflow
    assert "note from A | note from B" in workflow

    # A stale --expect-version from either clone is refused; a new checkpoint goes on.
    for seen in versions:
        world.stm(bob, "session", "checkpoint", "--done", "step2", "--expect-version",
                  str(seen), code=3)  # fmt: skip
    world.checkpoint(bob, sid, "--done", "step2", user="bob")
    assert findings(world.stm(bob, "check", "--strict", "--json")) == []
    world.commit(bob, "bob goes on")
    world.push(bob)
    no_conflict(world.pull(alice))
    assert read_state(alice, sid) == read_state(bob, sid)


def test_the_merge_is_the_same_whichever_clone_merges(world):
    """alice merges bob's commit and bob merges alice's: the same state.json, so the two
    merge commits merge again with nothing to do."""
    alice, bob, sid = shared_session(world)
    both_checkpoint(world, alice, bob, sid)
    world.git(bob, "push", "-q", "origin", "HEAD:refs/heads/bob")
    world.git(alice, "fetch", "-q", "origin", "bob")
    world.git(bob, "fetch", "-q", "origin", "main")
    no_conflict(world.git(alice, "merge", "--no-edit", "-q", "FETCH_HEAD"))
    no_conflict(world.git(bob, "merge", "--no-edit", "-q", "FETCH_HEAD"))
    assert state_path(alice, sid).read_bytes() == state_path(bob, sid).read_bytes()
    assert_both_kept(read_state(alice, sid))
    world.git(bob, "push", "-q", "origin", "HEAD:refs/heads/bob-merged")
    world.git(alice, "fetch", "-q", "origin", "bob-merged")
    no_conflict(world.git(alice, "merge", "--no-edit", "-q", "FETCH_HEAD"))
    assert findings(world.stm(alice, "check", "--strict", "--json")) == []


def test_pull_rebase_and_cherry_pick_use_the_state_merge(world):
    alice, bob, sid = shared_session(world)
    both_checkpoint(world, alice, bob, sid)
    bob_commit = world.git(bob, "rev-parse", "HEAD").stdout.strip()
    # A second local commit on bob's side, so the rebase replays two.
    world.stm(bob, "session", "phase", "review", "--session", sid, user="bob")
    world.commit(bob, "bob's phase")

    no_conflict(world.pull(bob, "--rebase"))
    assert_clean_tree(world, bob)
    state = read_state(bob, sid)
    assert_both_kept(state)
    assert state["phase"] == "review"
    assert findings(world.stm(bob, "check", "--strict", "--json")) == []

    # alice cherry-picks bob's first checkpoint onto her own work.
    world.git(alice, "fetch", "-q", str(bob), f"{bob_commit}")
    no_conflict(world.git(alice, "cherry-pick", bob_commit))
    assert_clean_tree(world, alice)
    assert_both_kept(read_state(alice, sid))
    assert findings(world.stm(alice, "check", "--strict", "--json")) == []


def test_three_clones_checkpointing_one_session(world):
    alice, bob, sid = shared_session(world)
    carol = world.clone("carol", driver=True)
    for index, (clone, user) in enumerate(((alice, "alice"), (bob, "bob"), (carol, "carol"))):
        world.checkpoint(
            clone, sid, "--note", f"note from {user}", "--pending", f"{user} step",
            "--pending", "step2", user=user,
        )  # fmt: skip
        if index == 0:
            world.checkpoint(clone, sid, "--done", "step2", user=user)
        world.commit(clone, f"{user}'s checkpoint")
    for clone in (alice, bob, carol):  # each pulls what is there, then pushes
        no_conflict(world.pull(clone))
        world.push(clone)
    for clone in (alice, bob):
        no_conflict(world.pull(clone))
    states = [read_state(clone, sid) for clone in (alice, bob, carol)]
    assert states[0] == states[1] == states[2]
    state = states[0]
    notes = state["recovery"]["recovery_notes"].split(" | ")
    assert sorted(notes) == ["note from alice", "note from bob", "note from carol"], state
    # alice finished step2 (which the others had listed, unchanged); every own step stays.
    assert sorted(state["checkpoint"]["pending_steps"]) == ["alice step", "bob step", "carol step"]
    for clone in (alice, bob, carol):
        assert findings(world.stm(clone, "check", "--strict", "--json")) == []


def test_merge_states_is_symmetric_and_keeps_both_sides():
    base = {
        "session_id": "s",
        "version": 3,
        "updated_at": "2030-01-01T00:00:00Z",
        "phase": "init",
        "phase_history": [
            {"phase": "init", "entered_at": "2030-01-01T00:00:00Z", "exited_at": None}
        ],
        "checkpoint": {"pending_steps": ["a", "b"], "can_resume": True},
        "recovery": {"recovery_notes": "old"},
    }
    ours = json.loads(json.dumps(base))
    ours.update(version=5, updated_at="2030-01-01T02:00:00Z", phase="build")
    ours["phase_history"][0]["exited_at"] = "2030-01-01T01:00:00Z"
    ours["phase_history"].append(
        {"phase": "build", "entered_at": "2030-01-01T01:00:00Z", "exited_at": None}
    )
    ours["checkpoint"] = {"pending_steps": ["b"], "last_completed_step": "a", "can_resume": True}
    ours["captured"] = {"at": "2030-01-01T02:00:00Z", "client": "claude"}
    theirs = json.loads(json.dumps(base))
    theirs.update(version=4, updated_at="2030-01-01T03:00:00Z")
    theirs["checkpoint"] = {"pending_steps": ["a", "b", "c"], "can_resume": True}
    theirs["recovery"] = {"recovery_notes": "new", "last_agent": "bob"}
    theirs["captured"] = {"at": "2030-01-01T01:30:00Z", "client": "codex"}
    merged = stm.merge_states(base, ours, theirs)
    assert merged == stm.merge_states(base, theirs, ours)
    assert merged["version"] == 6 == merged["merged_version"]
    assert merged["updated_at"] == "2030-01-01T03:00:00Z"
    assert merged["phase"] == "build" and len(merged["phase_history"]) == 2
    assert merged["checkpoint"]["pending_steps"] == ["b", "c"]
    assert merged["checkpoint"]["last_completed_step"] == "a"
    assert merged["recovery"]["recovery_notes"] == "new"  # only theirs changed it
    assert merged["captured"]["client"] == "claude"  # the newest capture, whole
    # Unchanged on one side: the other side, as it is (no version bump).
    assert stm.merge_states(base, base, theirs) == theirs
    # Both wrote a note: both kept, and a note that already holds the other stays as is.
    ours["recovery"] = {"recovery_notes": "from ours"}
    assert stm.merge_states(base, ours, theirs)["recovery"]["recovery_notes"] == "from ours | new"
    ours["recovery"] = {"recovery_notes": "from ours | new"}
    assert stm.merge_states(base, ours, theirs)["recovery"]["recovery_notes"] == "from ours | new"


def test_merge_file_merges_a_state_json_as_state(tmp_path, run):
    def state(version, stamp, steps, note):
        return {
            "session_id": "2030-01-01-0123abcd",
            "created_at": "2030-01-01T00:00:00Z",
            "updated_at": stamp,
            "phase": "init",
            "version": version,
            "checkpoint": {"pending_steps": steps, "can_resume": bool(steps)},
            "recovery": {"recovery_notes": note},
        }

    files = []
    for name, value in (
        ("base", state(1, "2030-01-01T00:00:00Z", ["a"], "n0")),
        ("ours", state(2, "2030-01-01T00:01:00Z", ["a", "b"], "n1")),
        ("theirs", state(2, "2030-01-01T00:02:00Z", [], "n2")),
    ):
        path = tmp_path / name
        path.write_text(stm.dumps_json(value))
        files.append(str(path))
    result = run("merge-file", *files, "--path", ".state/sessions/x/state.json")
    assert result.code == 0, result
    merged = json.loads(Path(files[1]).read_text())
    assert merged["checkpoint"] == {"pending_steps": ["b"], "can_resume": True}
    assert merged["recovery"]["recovery_notes"] == "n1 | n2"
    assert merged["version"] == 3
    assert Path(files[1]).read_text() == stm.dumps_json(merged)  # stm's own format


# ---- a, b. without the driver: the repair, and the exact git command --------------------


def test_without_the_driver_boot_keeps_the_workflow_and_check_fix_finishes(world):
    alice, bob, sid = shared_session(world, driver=False)
    both_checkpoint(world, alice, bob, sid)
    pulled = world.pull(bob, ok=False)
    assert pulled.returncode != 0 and "CONFLICT" in pulled.stdout + pulled.stderr
    rel = state_path(bob, sid).relative_to(bob).as_posix()
    assert rel in world.git(bob, "ls-files", "-u").stdout
    world.monkeypatch.chdir(bob)  # the person finishing the merge works in the clone

    # Boot still shows the whole workflow, merged, and says what to run.
    world.stm(bob, "session", "switch", sid)
    boot = world.stm(bob, "boot")
    workflow = boot_section(boot.out, "Active workflow")
    assert "  1. step2" in workflow and "  2. step3" in workflow, boot.out
    assert "note from A | note from B" in workflow
    notices = boot_section(boot.out, "Notices")
    assert "stm check --fix" in notices and "no stm merge driver" in notices, notices
    assert "git checkout --" not in boot.out + boot.err

    # Commands that need the state name the fix git accepts; so does `stm commit`.
    refused = world.stm(bob, "session", "checkpoint", "--done", "step2", code=1)
    assert "stm check --fix" in refused.err and "git checkout" not in refused.err, refused
    committed = world.stm(bob, "commit", code=1)
    assert "stm check --fix" in committed.err and "git commit --no-edit" in committed.err

    fixed = world.stm(bob, "check", "--fix")
    assert "state-conflict" in fixed.out and "merge-driver" in fixed.out, fixed
    assert_both_kept(read_state(bob, sid))
    assert world.git(bob, "config", "--get", "merge.stm.driver").stdout.strip()
    # Nothing staged behind the user's back: git still lists the file, and check says so
    # with the exact command that finishes the merge.
    assert rel in world.git(bob, "ls-files", "-u").stdout
    after = world.stm(bob, "check", "--json")
    unmerged = [f for f in findings(after) if f["rule"] == "git-unmerged"]
    assert [f["path"] for f in unmerged] == [rel], findings(after)
    history = rel.replace("state.json", "history.jsonl")
    command = f"git add -- {rel} {history} && git commit --no-edit"
    assert unmerged[0]["fix"] == f"run `{command}`", unmerged
    finish = subprocess.run(command, shell=True, cwd=bob, capture_output=True, text=True)
    assert finish.returncode == 0, finish.stderr
    assert_clean_tree(world, bob)
    assert findings(world.stm(bob, "check", "--strict", "--json")) == []
    assert_both_kept(read_state(bob, sid))


def test_without_the_driver_a_rebase_is_finished_by_the_named_command(world):
    alice, bob, sid = shared_session(world, driver=False)
    both_checkpoint(world, alice, bob, sid)
    pulled = world.pull(bob, "--rebase", ok=False)
    assert pulled.returncode != 0
    world.monkeypatch.chdir(bob / ".stacks")  # a command from a sub-folder names paths from there
    world.stm(bob, "check", "--fix")
    hint = [f for f in findings(world.stm(bob, "check", "--json")) if f["rule"] == "git-unmerged"]
    assert hint and hint[0]["fix"].endswith("&& git rebase --continue`"), hint
    command = hint[0]["fix"][len("run `") : -1]
    assert command.startswith("git add -- ../.state/"), command
    here = bob / ".stacks"
    finish = subprocess.run(command, shell=True, cwd=here, capture_output=True, text=True)
    assert finish.returncode == 0, finish.stdout + finish.stderr
    assert_clean_tree(world, bob)
    assert_both_kept(read_state(bob, sid))
    assert findings(world.stm(bob, "check", "--strict", "--json")) == []


def test_a_second_rebuild_keeps_what_only_state_json_held(world):
    """Issue 24, 4: one check --fix joins both clones' notes; one more checkpoint and a
    merge without the driver, and a second check --fix: nothing of the first is lost."""
    alice, bob, sid = shared_session(world, driver=False)
    both_checkpoint(world, alice, bob, sid)
    world.pull(bob, ok=False)
    world.stm(bob, "check", "--fix")
    world.git(bob, "add", "-A")
    world.git(bob, "commit", "-q", "--no-edit")
    world.push(bob)
    no_conflict(world.pull(alice))
    world.stm(bob, "setup", "git", "--remove")  # check --fix installed it: take it out again
    # Both go on, neither with a note; alice adds a step, bob finishes one.
    world.checkpoint(alice, sid, "--pending", "step2", "--pending", "step3", "--pending",
                     "alice step", user="alice")  # fmt: skip
    world.commit(alice, "alice again")
    world.push(alice)
    world.checkpoint(bob, sid, "--done", "step3", user="bob")
    world.commit(bob, "bob again")
    assert world.pull(bob, ok=False).returncode != 0
    world.stm(bob, "check", "--fix")
    state = read_state(bob, sid)
    assert state["recovery"]["recovery_notes"] == "note from A | note from B", state
    assert state["checkpoint"]["resume_instruction"] == "resume A | resume B", state
    assert state["checkpoint"]["pending_steps"] == ["step2", "alice step"], state


def test_without_the_driver_check_fix_remerges_memory_files_with_git(world):
    """Issue 24, 5: conflicted MEMORY.md and refs/facts.md in a clone with no driver:
    check --fix installs it and re-merges them with `git checkout -m`; nothing staged."""
    world.seed()
    alice, bob = world.clone("alice", False), world.clone("bob", False)
    world.stm(alice, "note", "Next Steps", "alpha step", user="alice")
    world.stm(alice, "fact", "set", "lang", "Go", user="alice")
    world.commit(alice, "alice notes")
    world.push(alice)
    world.stm(bob, "note", "Next Steps", "beta step", user="bob")
    world.stm(bob, "fact", "set", "lang", "Rust", user="bob")
    world.commit(bob, "bob notes")
    assert world.pull(bob, ok=False).returncode != 0
    unmerged = world.git(bob, "ls-files", "-u").stdout
    assert ".stacks/MEMORY.md" in unmerged and ".stacks/refs/facts.md" in unmerged

    world.monkeypatch.chdir(bob)
    dry = world.stm(bob, "check", "--fix", "--dry-run", code=1)
    assert "would re-merge" in dry.out and "git checkout -m" in dry.out, dry
    fixed = world.stm(bob, "check", "--fix")
    assert fixed.out.count("re-merged with the stm merge driver") == 2, fixed
    memory = (bob / ".stacks" / "MEMORY.md").read_text()
    assert "- alpha step" in memory and "- beta step" in memory
    assert not [line for line in memory.splitlines() if MARKER_RE.match(line)]
    assert "**Current:** Rust" in (bob / ".stacks" / "refs" / "facts.md").read_text()
    assert world.git(bob, "ls-files", "-u").stdout == unmerged  # nothing staged
    hint = [f for f in findings(world.stm(bob, "check", "--json")) if f["rule"] == "git-unmerged"]
    assert len(hint) == 2, hint
    command = hint[0]["fix"][len("run `") : -1]
    assert command == "git add -- .stacks/MEMORY.md .stacks/refs/facts.md && git commit --no-edit"
    assert subprocess.run(command, shell=True, cwd=bob).returncode == 0
    assert_clean_tree(world, bob)
    assert findings(world.stm(bob, "check", "--strict", "--json")) == []


# ---- b. the driver is there where it is needed --------------------------------------------


def test_init_installs_the_driver_and_setup_git_writes_the_state_attribute(world):
    world.seed()
    seed = world.tmp / "seed"
    assert world.git(seed, "config", "--get", "merge.stm.driver").stdout.strip()
    assert findings(world.stm(seed, "check", "--strict", "--json")) == []
    attributes = (seed / ".state" / ".gitattributes").read_text()
    assert "state.json merge=stm" in attributes

    # An older tree: setup git --install adds the line, and check --fix would too.
    clone = world.clone("old", driver=False)
    state_attributes = clone / ".state" / ".gitattributes"
    state_attributes.write_text("history.jsonl merge=union eol=lf\n")
    found = world.stm(clone, "check", "--json")
    assert sorted(rules(findings(found))) == ["git-attributes", "merge-driver"], findings(found)
    boot = world.stm(clone, "boot")
    assert "no stm merge driver" in boot_section(boot.out, "Notices")
    installed = world.stm(clone, "setup", "git", "--install")
    assert "installed: merge.stm.driver" in installed.out
    assert ".state/.gitattributes: added `state.json merge=stm`" in installed.out, installed
    assert findings(world.stm(clone, "check", "--strict", "--json")) == []
    assert "no stm merge driver" not in world.stm(clone, "boot").out


def test_check_fix_installs_a_missing_driver(world):
    world.seed()
    clone = world.clone("fresh", driver=False)
    dry = world.stm(clone, "check", "--fix", "--dry-run")
    assert "merge-driver" in dry.out
    assert world.git(clone, "config", "--get", "merge.stm.driver", ok=False).returncode == 1
    world.stm(clone, "check", "--fix")
    driver = world.git(clone, "config", "--get", "merge.stm.driver").stdout.strip()
    assert shlex.split(driver)[2:4] == ["merge-file", "%O"], driver
    assert findings(world.stm(clone, "check", "--strict", "--json")) == []


def test_check_fix_settles_a_prose_conflict_as_the_driver_does(world):
    """Both clones rewrote `## Status` in clones without the driver: check --fix installs
    it and re-merges, and the driver settles the section (issue 35: memory disagreements
    never block; merge.md, "Through plain git"): the newer text stands, the other is kept
    under the mark, the rest merges as usual, and what is left is git's own command, which
    runs as pasted and leaves check clean."""
    world.seed()
    alice, bob = world.clone("alice", False), world.clone("bob", False)
    world.stm(alice, "note", "Status", "--replace", "alpha status: lexer done")
    world.stm(alice, "note", "Next Steps", "alpha step")
    world.commit(alice, "alice's status")
    world.push(alice)
    world.stm(bob, "note", "Status", "--replace", "beta status: parser done")
    world.commit(bob, "bob's status")
    assert world.pull(bob, ok=False).returncode != 0
    memory = bob / ".stacks" / "MEMORY.md"
    fixed = world.stm(bob, "check", "--fix", code=None)
    assert "re-merged with the stm merge driver" in fixed.out, fixed
    assert "conflict marker" not in fixed.out, fixed
    text = memory.read_text()
    assert not [line for line in text.splitlines() if MARKER_RE.match(line)], text
    status = text.split("## Status", 1)[1].split("\n## ", 1)[0]
    assert "beta status: parser done\n<!-- stm:settled " in status, status
    assert "\n> alpha status: lexer done\n" in status, status
    assert "- alpha step" in text  # merged as usual outside the settled region
    left = json.loads(world.stm(bob, "check", "--json").out)["findings"]
    assert [f["rule"] for f in left] == ["git-unmerged"], left
    command = left[0]["fix"].removeprefix("run `").removesuffix("`")
    done = subprocess.run(command, shell=True, cwd=bob, capture_output=True, text=True)
    assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert world.git(bob, "status", "--porcelain").stdout == ""
    assert json.loads(world.stm(bob, "check", "--json").out)["findings"] == []


# ---- c. a fresh clone's boot shows the waiting work itself ---------------------------------

WAITING = "Sessions waiting (no session is current in this clone)"


def test_a_fresh_clone_boots_with_the_waiting_workflow_whole(world):
    """Issue 24, 2: a session checkpointed and interrupted in one clone; in a fresh clone
    boot shows its pending steps, resume line, recovery note and interruption, with the
    command that adopts it; an older session stays one line."""
    world.seed()
    alice = world.clone("alice", True)
    older = world.stm(alice, "session", "new", "--name", "older work", "--no-switch").out.strip()
    sid = world.stm(alice, "session", "new", "--name", "port the grammar").out.strip()
    world.checkpoint(
        alice, sid, "--done", "lexer", "--pending", "binary operators", "--pending",
        "unary operators", "--resume", "run pytest -k grammar", "--note",
        "precedence table is in docs/precedence.md", "--interrupted", user="alice",
    )  # fmt: skip
    world.commit(alice, "work")
    world.push(alice)
    bob = world.clone("bob", True)

    boot = world.stm(bob, "boot").out
    assert "## Active workflow" not in boot
    full, _, others = boot_section(boot, WAITING).partition("Also waiting:")
    assert f"Most relevant: adopt it with `stm session switch {sid}`" in full
    for line in (
        f"- Session: `{sid}` — port the grammar",
        "- Last completed step: lexer",
        "  1. binary operators",
        "  2. unary operators",
        "- Resume: run pytest -k grammar",
        "- Recovery notes: precedence table is in docs/precedence.md",
        "- Last action: checkpoint: done lexer (by alice)",
        f"- State: {state_path(bob, sid).relative_to(bob)} (version 2)",
    ):
        assert line in full.splitlines(), (line, full)
    assert "- Interrupted at: " in full
    [line] = [line for line in others.splitlines() if line.startswith("- ")]
    assert older in line and line.endswith(f"adopt: `stm session switch {older}`")

    # Cut to fit: the steps shorten with the workflow's, the adopt command stays.
    limit = len(boot) - 150  # some memory has to go, and it goes before the work does
    cut = world.stm(bob, "boot", "--max-chars", str(limit)).out
    assert len(cut) <= limit
    assert "left out to fit" in cut, cut
    assert f"adopt it with `stm session switch {sid}`" in boot_section(cut, WAITING), cut
    assert "- Resume: run pytest -k grammar" in cut
    smaller = world.stm(bob, "boot", "--max-chars", "900").out
    assert len(smaller) <= 900 and "2 waiting sessions;" in smaller, smaller
    assert "`stm boot --no-limit`" in boot_section(smaller, "Notices"), smaller

    # Adopted, it is the active workflow, the same lines.
    world.stm(bob, "session", "switch", sid)
    workflow = boot_section(world.stm(bob, "boot").out, "Active workflow")
    assert "- Resume: run pytest -k grammar" in workflow and WAITING not in workflow


def test_a_handoff_waiting_in_a_fresh_clone_shows_its_steps_and_constraints(world):
    world.seed()
    alice = world.clone("alice", True)
    handoff = {
        "task_id": "TEMP-7",
        "from_agent": "planner",
        "to_agent": "bob",
        "task": "Add Kelvin conversions to tempconv.\nKeep the public API as it is.",
        "status": "ready",
        "created_at": "2026-01-05T10:00:00Z",
        "next_steps": ["Add c_to_k and k_to_c", "Test round trips"],
        "decisions": ["Floats, not Decimal."],
        "notes": "Ask before adding dependencies.",
        "constraints": "API frozen: do not touch tempconv/__init__.py",
    }
    sent = world.stm(alice, "compose-handoff", "-", "--no-switch", "--json",
                     user="alice", stdin=json.dumps(handoff))  # fmt: skip
    sid = json.loads(sent.out)["session_id"]
    world.stm(alice, "session", "new", "--name", "alice's own", user="alice")
    world.commit(alice, "handoff")
    world.push(alice)
    bob = world.clone("bob", True)

    boot = world.stm(bob, "boot", user="bob").out
    full, _, others = boot_section(boot, WAITING).partition("Also waiting:")
    assert f"adopt it with `stm session switch {sid}`" in full, boot
    lines = full.splitlines()
    handoff_line = [line for line in lines if line.startswith("- Handoff: task TEMP-7")]
    assert handoff_line and handoff_line[0].endswith(f"/{sid}/Session.md"), lines
    for line in (
        "- Task: Add Kelvin conversions to tempconv. Keep the public API as it is.",
        "- Decisions: Floats, not Decimal.",
        "- Notes: Ask before adding dependencies.",
        "- constraints: API frozen: do not touch tempconv/__init__.py",
        "  1. Add c_to_k and k_to_c",
        "  2. Test round trips",
    ):
        assert line in lines, (line, full)
    assert "alice's own" in others


def test_a_waiting_session_with_a_conflicted_state_shows_both_sides(world):
    alice, bob, sid = shared_session(world, driver=False)
    both_checkpoint(world, alice, bob, sid)
    assert world.pull(bob, ok=False).returncode != 0
    carol = world.tmp / "carol"  # bob's conflicted tree, seen as a fresh clone would
    shutil.copytree(bob, carol)
    (carol / ".state" / "current-session.json").unlink(missing_ok=True)
    boot = world.stm(carol, "boot")
    full = boot_section(boot.out, WAITING)
    assert "  1. step2" in full and "  2. step3" in full, boot.out
    assert "note from A | note from B" in full


# ---- d. boot says what to do about size and staleness --------------------------------------


def memory_with_bullets(count: int) -> str:
    bullets = "".join(f"- step {n}\n" for n in range(count, 0, -1))
    return MEMORY.replace("Port the expression grammar.\n", bullets)


def pinned(monkeypatch, seconds: float) -> None:
    monkeypatch.setattr(stm, "utc_now", lambda: seconds)


def test_boot_names_compact_over_the_threshold_and_when_a_cut_left_memory_out(store, run_stm_as):
    (store / ".stacks" / "config.json").write_text('{"consolidation_threshold": 5}\n')
    (store / ".stacks" / "MEMORY.md").write_text(memory_with_bullets(8))
    boot = run_stm_as("boot")
    notices = boot_section(boot.stdout, "Notices")
    assert ".stacks/MEMORY.md holds 8 top-level bullets, over its threshold of 5" in notices
    # As invoked: a hint names the command the way stm was run.
    assert "stm.py compact`" in notices and "`stm compact`" not in notices, notices
    (store / ".stacks" / "config.json").unlink()
    # A limit just under the whole boot: memory is cut, whatever the length of the hints
    # (they name this checkout's stm.py, and the checkout may sit at any depth).
    limit = len(run_stm_as("boot", "--no-refs", "--no-limit").stdout) - 20
    cut = run_stm_as("boot", "--no-refs", "--max-chars", str(limit)).stdout
    assert f"left out to fit --max-chars {limit}" in cut
    assert "stm.py compact`" in cut and "`stm compact`" not in cut, cut


def test_boot_over_its_budget_says_so_in_stdout_too(store, run):
    (store / ".stacks" / "config.json").write_text('{"boot_budget_tokens": 50}\n')
    boot = run("boot")
    assert "over the 50-token budget" in boot.err
    assert "over the 50-token budget: run `stm compact`" in boot_section(boot.out, "Notices")
    # A limit the whole boot fits in changes nothing: the same text, the notice with it.
    fits = run("boot", "--max-tokens", "5000")
    stamp = r"generated \S+ · ~\d+ tokens"
    assert re.sub(stamp, "", fits.out) == re.sub(stamp, "", boot.out)
    assert "over the 50-token budget: run `stm compact`" in fits.out


def test_stale_sessions_are_named_once_and_archived_with_one_command(store, run, monkeypatch):
    now = clock()
    pinned(monkeypatch, now - 40 * 86400)
    old = [run("session", "new", "--name", f"old {n}", "--no-switch").out.strip() for n in range(3)]
    kept_current = run("session", "new", "--name", "old but current").out.strip()
    pinned(monkeypatch, now - 86400)
    fresh = run("session", "new", "--name", "recent", "--no-switch").out.strip()
    pinned(monkeypatch, now)
    (store / ".state" / "current-session.json").unlink()  # as a fresh clone

    boot = run("boot").out
    notices = boot_section(boot, "Notices")
    assert "4 sessions untouched for over 14 days, not listed as waiting" in notices, notices
    assert "`stm session archive --stale`" in notices
    waiting = boot_section(boot, WAITING)
    assert fresh in waiting and not any(sid in waiting for sid in [*old, kept_current])

    run("session", "switch", kept_current)
    before = snapshot(store)
    dry = run("session", "archive", "--stale", "--dry-run")
    assert dry.code == 0 and snapshot(store) == before
    assert sorted(line.split()[2] for line in dry.out.splitlines()) == sorted(old), dry.out
    assert "(untouched for 40 days)" in dry.out
    done = run("session", "archive", "--stale")
    assert done.code == 0 and sorted(done.out.split()) == sorted(old), done
    listed = json.loads(run("session", "list", "--json").out)["sessions"]
    assert sorted(row["session_id"] for row in listed) == sorted([kept_current, fresh])
    again = run("session", "archive", "--stale")
    assert again.code == 0 and again.out == "" and "nothing to archive" in again.err
    for bad in (("--stale", fresh), ("--dry-run",), ("--stale", "--expect-version", "1")):
        assert run("session", "archive", *bad).code == 2, bad


def test_digest_leaves_compactions_own_entries_out(store, run, monkeypatch):
    (store / ".stacks" / "config.json").write_text('{"default_section_limit": 2}\n')
    (store / ".stacks" / "MEMORY.md").write_text(memory_with_bullets(5))
    assert run("log", "real work on the lexer").code == 0
    assert run("compact").code == 0
    digest = json.loads(run("digest", "--since", "2000-01-01", "--json").out)
    texts = [entry["text"] for entry in digest["entries"]]
    assert texts == ["real work on the lexer"], texts


# ---- e. MCP alone can resume: adopt, checkpoint, note, hand off, archive -------------------


@pytest.fixture
def mcp(store):
    from mcp_client import McpClient

    clients = []

    def start() -> McpClient:
        client = McpClient(stacks=store / ".stacks", cwd=store)
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.kill()


def tool_text(result: dict) -> str:
    return "".join(part["text"] for part in result["content"] if part["type"] == "text")


def test_mcp_lists_the_resume_tools(mcp):
    client = mcp()
    tools = {tool["name"]: tool for tool in client.modern("tools/list")["result"]["tools"]}
    expected = {
        "session_switch": ({"session"}, set()),
        "session_archive": (set(), {"session", "stale", "dry_run"}),
        "compose_handoff": ({"handoff"}, {"no_switch"}),
        "session_checkpoint": (
            set(),
            {"done", "pending", "resume", "note", "interrupted", "finish", "session"},
        ),
        "note": ({"section", "text"}, {"replace", "create"}),
        "fact_set": ({"key", "value"}, {"why"}),
        "fact_get": ({"key"}, set()),
    }
    for name, (required, optional) in expected.items():
        schema = tools[name]["inputSchema"]
        assert set(schema.get("required", [])) == required, name
        assert set(schema["properties"]) == required | optional, name
    assert tools["compose_handoff"]["inputSchema"]["properties"]["handoff"]["type"] == "object"
    assert client.close() == 0


def test_mcp_alone_adopts_a_waiting_session_and_carries_it_on(store, run, mcp):
    sid = run("session", "new", "--name", "port the grammar", "--no-switch").out.strip()
    run("session", "checkpoint", "--session", sid, "--pending", "binary", "--pending", "unary")
    client = mcp()

    boot = tool_text(client.tool_result("boot"))
    assert f"the `session_switch` tool with session: {sid}" in boot, boot
    assert "`stm session switch" not in boot and "stm.py" not in boot
    switched = client.tool_result("session_switch", {"session": sid[-8:]})
    assert switched["isError"] is False and switched["structuredContent"]["current"] is True
    active = tool_text(client.tool_result("boot"))
    assert "## Active workflow" in active and "  1. binary" in active

    noted = client.tool_result(
        "session_checkpoint", {"done": "binary", "note": "unary needs the Pratt table"}
    )
    assert noted["isError"] is False, noted
    state = json.loads(state_path(store, sid).read_text())
    assert state["recovery"]["recovery_notes"] == "unary needs the Pratt table"
    assert state["checkpoint"]["pending_steps"] == ["unary"]
    cleared = client.tool_result("session_checkpoint", {"pending": []})
    assert cleared["isError"] is False
    assert json.loads(state_path(store, sid).read_text())["checkpoint"]["pending_steps"] == []
    finished = client.tool_result("session_checkpoint", {"finish": True})
    assert finished["isError"] is False
    assert json.loads(state_path(store, sid).read_text())["finished_at"]

    archived = client.tool_result("session_archive", {})
    assert archived["isError"] is False and "archived to .state/history/" in tool_text(archived)
    assert client.close() == 0


def test_mcp_hints_name_tool_arguments_never_flags(store, run, mcp):
    client = mcp()
    nothing = client.tool_result("session_new", {"name": "x"})
    assert nothing["isError"] is False
    empty = client.tool_result("session_checkpoint", {})
    text = tool_text(empty)
    assert empty["isError"] is True
    assert "`done`" in text and "`finish: true`" in text and "`pending: []`" in text, text
    assert "--" not in text, text
    near = client.tool_result("note", {"section": "Nxt Steps", "text": "port the printer"})
    assert near["isError"] is True and "`create: true`" in tool_text(near), near
    assert "--create" not in tool_text(near)
    created = client.tool_result(
        "note", {"section": "Nxt Steps", "text": "port the printer", "create": True}
    )
    assert created["isError"] is False, created
    assert "## Nxt Steps\n" in (store / ".stacks" / "MEMORY.md").read_text()
    secret = client.tool_result("log", {"text": "token ghp_" + "a" * 36})
    assert secret["isError"] is True and "--allow-secret" not in tool_text(secret), secret
    unmatched = client.tool_result("session_checkpoint", {"done": "never listed"})
    assert "`done`" in tool_text(unmatched) and "--done" not in tool_text(unmatched)
    assert client.close() == 0


def test_mcp_composes_a_handoff_and_archives_stale_sessions(store, run, mcp, monkeypatch):
    now = clock()
    monkeypatch.setattr(stm, "utc_now", lambda: now - 30 * 86400)
    old = run("session", "new", "--name", "old", "--no-switch").out.strip()
    monkeypatch.setattr(stm, "utc_now", clock)
    client = mcp()
    handoff = {
        "task_id": "T-1",
        "from_agent": "planner",
        "task": "Port the printer",
        "status": "ready",
        "created_at": "2026-01-05T10:00:00Z",
        "next_steps": ["write the printer"],
    }
    composed = client.tool_result("compose_handoff", {"handoff": handoff})
    assert composed["isError"] is False, composed
    row = composed["structuredContent"]
    assert row["created"] is True and row["current"] is True, row
    assert row["session_md"].endswith("/Session.md")
    again = client.tool_result("compose_handoff", {"handoff": handoff})
    assert again["structuredContent"]["created"] is False
    bad = client.tool_result("compose_handoff", {"handoff": {"task_id": "T-2"}})
    assert bad["isError"] is True and "from_agent is missing" in tool_text(bad)

    # No session current (as in a fresh clone): boot names the stale one once.
    assert client.tool_result("session_archive", {"session": row["session_id"]})["isError"] is False
    later = dict(handoff, task_id="T-3")
    kept = client.tool_result("compose_handoff", {"handoff": later, "no_switch": True})
    assert kept["structuredContent"]["current"] is False
    boot = tool_text(client.tool_result("boot"))
    assert "the `session_archive` tool with stale: true" in boot, boot
    dry = client.tool_result("session_archive", {"stale": True, "dry_run": True})
    assert tool_text(dry) == f"would archive {old}"
    done = client.tool_result("session_archive", {"stale": True})
    assert tool_text(done) == f"archived {old}"
    assert [r["session_id"] for r in done["structuredContent"]["sessions"]] == [old]
    assert client.close() == 0


# ---- f, 8. smaller: as-invoked hints, summaries, facts, Settings, AGENTS.md ----------------


def test_check_and_status_hints_name_stm_as_it_was_run(store, run_stm_as):
    (store / ".stacks" / "config.json").write_text('{"consolidation_threshold": 1}\n')
    (store / ".stacks" / "MEMORY.md").write_text(memory_with_bullets(3))
    for command in (("check",), ("status",)):
        result = run_stm_as(*command)
        assert "stm.py compact`" in result.stdout, (command, result.stdout)
        assert "`stm compact`" not in result.stdout, (command, result.stdout)


def test_a_ref_summary_that_starts_with_a_list_item_shows_no_marker(store, run):
    (store / ".stacks" / "refs" / "api.md").write_text(
        "# Api\n\n- c_to_f(c): Celsius to Fahrenheit\n- f_to_c(f): back\n"
    )
    (store / ".stacks" / "refs" / "steps.md").write_text("# Steps\n\n1. build\n2. ship\n")
    boot = run("boot").out
    assert "- refs/api.md — Api: c_to_f(c): Celsius to Fahrenheit" in boot
    assert "- refs/steps.md — Steps: build" in boot


def test_fact_why_is_filed_under_the_value_it_replaced(store, run):
    assert run("fact", "set", "lang", "Python").code == 0
    assert run("fact", "set", "lang", "Go", "--why", "switched this quarter").code == 0
    history = run("fact", "get", "lang", "--history").out.splitlines()
    assert history[1].endswith("Go") and history[2].endswith("Python"), history
    assert "switched this quarter" in history[3], history


def test_check_names_the_conflict_marker_lines_of_a_state_json(store, run):
    sid = run("session", "new", "--name", "x").out.strip()
    path = store / ".state" / "sessions" / sid / "state.json"
    text = path.read_text()
    other = text.replace('"version": 1', '"version": 2')
    path.write_text(f"<<<<<<< ours\n{text}=======\n{other}>>>>>>> theirs\n")
    found = [f for f in json.loads(run("check", "--json").out)["findings"]]
    [conflict] = [f for f in found if f["rule"] == "state-conflict"]
    lines = len(text.splitlines())
    assert conflict["line"] == 1, conflict
    assert f"(lines 1, {lines + 2}, {2 * lines + 3})" in conflict["message"], conflict


def test_settings_is_the_one_reader_of_stms_environment():
    source = STM_PY.read_text()
    start, end = source.index("\nclass Settings:"), source.index("\nclass Store:")
    outside = source[:start] + source[end:]
    for name in ("STM_USER", "STM_LOCK_TIMEOUT", "STM_FSYNC", "STM_SESSION", '"CI"'):
        reads = re.findall(rf"environ(?:\.get)?[\[(]\s*\"?{name.strip(chr(34))}", outside)
        assert reads == [], name
    assert "getenv(" not in source


def test_stm_fsync_and_the_lock_timeout_are_still_honoured(store, run, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(stm.os, "fsync", lambda fd: calls.append(fd) or real(fd))
    monkeypatch.setenv("STM_FSYNC", "1")
    assert run("log", "durable").code == 0 and calls
    calls.clear()
    monkeypatch.setenv("STM_FSYNC", "0")
    assert run("log", "not durable").code == 0 and not calls
    monkeypatch.setenv("STM_LOCK_TIMEOUT", "soon")
    refused = run("log", "x")
    assert refused.code == 2 and "STM_LOCK_TIMEOUT" in refused.err
    monkeypatch.setenv("STM_LOCK_TIMEOUT", "2.5")
    assert stm.FileLock(str(store / "x.lock")).timeout == 2.5  # read through Settings


def test_the_agents_md_block_works_in_every_clone(store, run, monkeypatch, tmp_path_factory):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/local/bin/{name}")
    monkeypatch.setattr(stm, "__file__", str(store / "tools" / "stm.py"))  # in the project
    block = run("setup", "agents-md").out
    assert block == stm.agents_block("python3 tools/stm.py")  # even with `stm` installed
    assert "No `stm` command here?" not in block
    monkeypatch.setattr(stm, "__file__", str(tmp_path_factory.mktemp("elsewhere") / "stm.py"))
    block = run("setup", "agents-md").out
    assert "run `stm boot`" in block
    assert "No `stm` command here? Copy stm.py (one file) into the project" in block
    assert "pip install" not in block  # no package of that name is published
    lines = block.strip().splitlines()
    assert len(lines) - 2 <= 10


def test_init_keeps_a_driver_already_configured(world):
    world.seed()
    seed = world.tmp / "seed"
    custom = "my-merge %O %A %B"
    world.git(seed, "config", "--local", "merge.stm.driver", custom)
    world.stm(seed, "init")
    assert world.git(seed, "config", "--get", "merge.stm.driver").stdout.strip() == custom


def test_a_rebuild_after_a_driver_merge_forks_where_the_clones_last_split(world):
    """The driver merged once (versions shared below merged_version); the clones go on
    without it and conflict: the rebuild starts from the merged state, not the first
    fork, so nothing the first merge settled comes back."""
    alice, bob, sid = shared_session(world)
    both_checkpoint(world, alice, bob, sid)
    no_conflict(world.pull(bob))
    world.push(bob)
    no_conflict(world.pull(alice))
    for clone in (alice, bob):
        world.stm(clone, "setup", "git", "--remove")
    world.checkpoint(alice, sid, "--done", "step2", user="alice")
    world.commit(alice, "alice goes on")
    world.push(alice)
    world.checkpoint(
        bob, sid, "--pending", "step2", "--pending", "step3", "--pending", "bob extra",
        user="bob",
    )  # fmt: skip
    world.commit(bob, "bob goes on")
    assert world.pull(bob, ok=False).returncode != 0
    world.stm(bob, "check", "--fix")
    state = read_state(bob, sid)
    assert state["checkpoint"]["pending_steps"] == ["step3", "bob extra"], state
    assert state["recovery"]["recovery_notes"] == "note from A | note from B", state
    assert state["checkpoint"]["resume_instruction"] == "resume A | resume B", state
    assert state["checkpoint"]["last_completed_step"] == "step2", state


def diverged(root: Path, call, aux: Path, extra_events: list[dict] = ()) -> tuple[str, Path]:
    """One session checkpointed in two clones (simulated: the folder copied and each copy
    checkpointed), merged as git would: history.jsonl by union, state.json conflicted."""
    sid = ok(call("session", "new", "--name", "shared")).out.strip()
    ok(call("session", "checkpoint", "--pending", "step1", "--pending", "step2"))
    folder = root / ".state" / "sessions" / sid
    shutil.copytree(folder, aux / "base")
    ok(call("session", "checkpoint", "--done", "step1", "--note", "note from A"))
    ours_state = (folder / "state.json").read_text()
    ours_history = (folder / "history.jsonl").read_text()
    shutil.rmtree(folder)
    shutil.copytree(aux / "base", folder)
    ok(call("session", "checkpoint", "--pending", "p1", "--note", "note from B"))
    theirs_state = (folder / "state.json").read_text()
    theirs_history = (folder / "history.jsonl").read_text()
    base_history = (aux / "base" / "history.jsonl").read_text()
    merged = base_history + ours_history[len(base_history) :] + theirs_history[len(base_history) :]
    merged += "".join(json.dumps(e, sort_keys=True) + "\n" for e in extra_events)
    (folder / "history.jsonl").write_text(merged)
    (folder / "state.json").write_text(
        f"<<<<<<< ours\n{ours_state}=======\n{theirs_state}>>>>>>> theirs\n"
    )
    return sid, folder


def later_stamp(folder: Path, seconds: int) -> str:
    events = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
    newest = max(stm.parse_iso(e["timestamp"], need_zone=True) for e in events)
    return stm.iso(newest + seconds)


BAD_FIELDS = [
    ("checkpoint", {"done": 5}),
    ("checkpoint", {"done": 1.5}),
    ("checkpoint", {"done": True}),
    ("checkpoint", {"done": ["a"]}),
    ("checkpoint", {"done": {"a": 1}}),
    ("checkpoint", {"pending": [1, 2]}),
    ("checkpoint", {"pending": "not a list"}),
    ("checkpoint", {"resume": 7}),
    ("checkpoint", {"note": ["x"]}),
    ("checkpoint", {"interrupted": "yes"}),
    ("checkpoint", {"finish": 1}),
    ("phase_change", {"to": "../../etc"}),
    ("phase_change", {"to": 5}),
    ("phase_change", {"to": "x" * 65}),
    ("created", {"phase": "bad phase!", "name": 12}),
    ("created", {"valid_phases": "init,build"}),
    ("phase_change", {"to": "build", "timestamp": "yesterday"}),
    ("checkpoint", {"actor": ["x"], "done": "ok"}),
]


@pytest.mark.parametrize(("event", "fields"), BAD_FIELDS, ids=[str(f) for _, f in BAD_FIELDS])
def test_a_mistyped_merged_event_is_skipped_and_reported_never_replayed(
    store, call, aux, event, fields
):
    """Issue 22, 4: the rebuild validates each event as strictly as state.json's fields;
    a bad one is reported and left out of the state; the session stays usable."""
    sid, folder = diverged(store, call, aux)
    bad = {"event": event, "timestamp": later_stamp(folder, 1), "version": 4, **fields}
    with open(folder / "history.jsonl", "a") as f:
        f.write(json.dumps(bad) + "\n")
    before = snapshot(store)
    dry = call("check", "--fix", "--dry-run")
    assert dry.code in (0, 1) and "Traceback" not in dry.err, dry
    assert snapshot(store) == before
    assert "skipped 1 event" in dry.out, dry
    fixed = call("check", "--fix")
    assert fixed.code == 0 and "Traceback" not in fixed.err, fixed
    assert "skipped 1 event" in fixed.out and "history.jsonl" in fixed.out, fixed
    state = json.loads((folder / "state.json").read_text())
    assert stm.state_problems(state, sid) == []
    notes = state["recovery"]["recovery_notes"]
    assert "note from A" in notes and "note from B" in notes
    assert state["phase"] == "init"
    ok(call("session", "checkpoint", "--done", "p1"))
    assert [f for f in check_findings(call)[1] if f["severity"] == "error"] == []


def test_a_mistyped_static_field_in_either_side_is_not_copied(store, call, aux):
    sid, folder = diverged(store, call, aux)
    text = (folder / "state.json").read_text()
    (folder / "state.json").write_text(text.replace('"name": "shared"', '"name": 12', 1))
    ok(call("check", "--fix"))
    state = json.loads((folder / "state.json").read_text())
    assert stm.state_problems(state, sid) == []
    assert state["name"] == "shared"  # the valid side's


def test_a_rebuild_interrupted_at_any_write_keeps_every_clones_note(store, call, aux, monkeypatch):
    """Issue 22, 15: an error at each write step of the rebuild in turn, then check --fix
    again: both clones' recovery notes survive, versions run 1..n, check is clean."""
    sid, folder = diverged(store, call, aux)
    pristine = aux / "pristine"
    shutil.copytree(store, pristine)
    counter = FaultyOS(os, 0, errno.EIO)
    monkeypatch.setenv("STM_FSYNC", "1")
    monkeypatch.setattr(stm, "os", counter)
    ok(call("check", "--fix"))
    monkeypatch.setattr(stm, "os", os)
    steps = counter.calls
    assert steps >= 4
    for step in range(1, steps + 1):
        restore(pristine, store)
        monkeypatch.setattr(stm, "os", FaultyOS(os, step, errno.EIO))
        first = call("check", "--fix")
        monkeypatch.setattr(stm, "os", os)
        assert first.code is not None and "Traceback" not in first.err, (step, first)
        assert_rebuilt_with_both_notes(store, call, folder, step)


@pytest.mark.parametrize("write", [1, 2])
def test_a_rebuild_killed_between_its_writes_keeps_every_clones_note(store, call, aux, write):
    """Issue 22, 15: SIGKILL-like death before the first or the second whole-file write of
    the rebuild, then check --fix again."""
    sid, folder = diverged(store, call, aux)
    killed = killed_stm(store, aux, f"write-{write}", "check", "--fix")
    assert killed.returncode == 137, killed.stderr
    assert_rebuilt_with_both_notes(store, call, folder, write)


def assert_rebuilt_with_both_notes(store: Path, call, folder: Path, step) -> None:
    again = call("check", "--fix")
    assert again.code == 0 and "Traceback" not in again.err, (step, again)
    state = json.loads((folder / "state.json").read_text())
    notes = state["recovery"].get("recovery_notes", "")
    assert "note from A" in notes and "note from B" in notes, (step, notes)
    events = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
    assert [e["version"] for e in events] == list(range(1, len(events) + 1)), step
    assert state["version"] == len(events), step
    assert [f for f in check_findings(call)[1] if f["severity"] == "error"] == [], step


def test_the_state_rebuild_leaves_a_history_with_a_bad_line_alone(store, run, monkeypatch):
    sid = run("session", "new").out.strip()
    history = store / ".state" / "sessions" / sid / "history.jsonl"
    history.write_text(history.read_text() + "not json\n")
    rebuilt = stm.rebuild_state(str(history.parent))
    assert rebuilt is None  # history-invalid is reported; nothing is dropped silently


def test_a_pointer_to_a_session_archived_in_another_clone_is_reported(store, call):
    sid = call("session", "new", "--name", "moved away").out.strip()
    # Another clone archived it, and a pull brought the move; this clone's pointer stays.
    folder = session_dir(store, sid)
    state = json.loads((folder / "state.json").read_text())
    state.update(version=state["version"] + 1, archived_at=state["updated_at"])
    (folder / "state.json").write_text(json.dumps(state))
    month = store / ".state" / "history" / sid[:7]
    month.mkdir(parents=True, exist_ok=True)
    folder.rename(month / sid)
    status = call("status", "--json")
    data = json.loads(status.out)
    assert data["sessions"]["current"] is None, data["sessions"]
    assert any(sid in w and "archived" in w for w in data["warnings"]), data["warnings"]
    text = call("status").out
    assert f"current {sid}" not in text, text
    boot = call("boot")
    assert boot.code == 0 and "Active workflow" not in boot.out, boot
    assert sid in boot.out + boot.err and "archived" in boot.out + boot.err, boot
    # Boot cleared the pointer, naming the session (issue 35): status has nothing to warn.
    assert (
        json.loads((store / ".state" / "current-session.json").read_text())["active_session"]
        is None
    )
    assert not any(sid in w for w in json.loads(call("status", "--json").out)["warnings"])
