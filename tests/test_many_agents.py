"""Many agents, one memory (issue 35): two clones, worktrees and side-by-side agents
never leave a memory conflict to a person and never lose a line. Real git everywhere:
sessions that move (archived in one clone, written in the other), prose both sides
rewrote, repair messages run as pasted, the conflict matrix.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clock
from helpers import (
    GIT,
    Clock,
    World,
    boot_section,
    findings,
    is_command,
    log_text,
    marker_lines,
    read_jsonl,
    use_private_git,
)

import stm


@pytest.fixture
def world(tmp_path, run, monkeypatch) -> World:
    assert GIT, "git is needed for these tests"
    use_private_git(monkeypatch, tmp_path)
    path = [p for p in os.environ["PATH"].split(os.pathsep) if not is_command(p, "stm")]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)  # the driver runs this Python
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), *path]))
    ticking = Clock(float(int(clock())))  # the run's now, in whole seconds
    monkeypatch.setattr(stm, "utc_now", ticking)
    return World(tmp_path, run, monkeypatch, ticking, push_ref="HEAD:main")


# ---- sessions that move: archived in one clone, written in the other ---------------------


def session_copies(repo: Path, sid: str) -> list[Path]:
    """Every folder of session `sid` in the clone, active or archived."""
    return sorted(p.parent for p in (repo / ".state").rglob("state.json") if p.parent.name == sid)


def archived_elsewhere(world: World) -> tuple[Path, Path, str]:
    """alice and bob share a session; alice works on it at length (so the archived files
    differ from the common version too much for git's rename detection to pair them),
    archives it and pushes; bob, before pulling, checkpoints it."""
    world.seed()
    alice = world.clone("alice", driver=True)
    sid = world.stm(alice, "session", "new", "--name", "shared", user="alice").out.strip()
    world.commit(alice, "session")
    world.push(alice)
    bob = world.clone("bob", driver=True)
    world.stm(bob, "session", "switch", sid)
    steps = [
        f"--pending=step {chr(97 + n)}: " + "a long description of the work " * 3 for n in range(12)
    ]
    world.checkpoint(alice, sid, *steps, "--note", "alice's long note " * 20, user="alice")
    for n in range(8):
        world.checkpoint(alice, sid, "--done", f"step {chr(97 + n)}:", user="alice")
    world.stm(alice, "session", "archive", sid, user="alice")
    world.commit(alice, "archive")
    world.push(alice)
    world.checkpoint(bob, sid, "--pending", "bob's step", "--note", "bob's note", user="bob")
    return alice, bob, sid


def assert_one_archived_session_with_every_event(repo: Path, sid: str) -> None:
    copies = session_copies(repo, sid)
    assert len(copies) == 1 and copies[0].parent.parent.name == "history", copies
    events = read_jsonl(copies[0] / "history.jsonl")
    kinds = [e["event"] for e in events]
    assert kinds.count("archived") == 1, kinds
    notes = [e.get("note") for e in events]
    assert "bob's note" in notes and any(n and n.startswith("alice's") for n in notes), events
    assert sum(1 for e in events if e.get("done")) == 8, events
    state = stm.load_json((copies[0] / "state.json").read_text())
    assert state["archived_at"], state
    assert "bob's note" in state["recovery"]["recovery_notes"], state


def pasted(world: World, repo: Path, fix: str) -> None:
    """Run a fix as a person pastes it: the command between `run \\`` and the last \\`."""
    assert fix.startswith("run `") and fix.endswith("`"), fix
    done = subprocess.run(
        fix[len("run `") : -1], shell=True, cwd=repo, capture_output=True, text=True
    )
    assert done.returncode == 0, (fix, done.stdout, done.stderr)


def test_sync_joins_a_session_archived_in_one_clone_and_checkpointed_in_the_other(world):
    alice, bob, sid = archived_elsewhere(world)
    synced = world.stm(bob, "sync")
    assert "nothing changed" not in synced.err
    assert_one_archived_session_with_every_event(bob, sid)
    # bob's pointer named the session: cleared, with a notice naming it.
    assert sid in synced.err and "archived" in synced.err, synced
    assert (
        stm.load_json((bob / ".state" / "current-session.json").read_text())["active_session"]
        is None
    )
    assert world.git(bob, "status", "--porcelain").stdout == ""
    assert findings(world.stm(bob, "check", "--strict", "--json")) == []
    # alice receives the same joined session, and nothing is left to merge.
    world.stm(alice, "sync")
    assert_one_archived_session_with_every_event(alice, sid)
    assert findings(world.stm(alice, "check", "--strict", "--json")) == []
    listed = world.stm(bob, "session", "list", "--all").out
    assert listed.count(sid) == 1 and "[archived]" in listed, listed


@pytest.mark.parametrize("how", ["merge", "rebase"])
def test_a_plain_git_pull_of_a_moved_session_is_joined_by_check_fix(world, how):
    alice, bob, sid = archived_elsewhere(world)
    world.commit(bob, "bob's checkpoint")
    pulled = world.pull(bob, "--no-rebase" if how == "merge" else "--rebase", ok=False)
    assert "CONFLICT (modify/delete)" in pulled.stdout + pulled.stderr, pulled
    world.monkeypatch.chdir(bob)
    found = findings(world.stm(bob, "check", "--json", code=1))
    assert "session-moved" in [f["rule"] for f in found], found
    assert not [f for f in found if "phase" in f["message"]], found
    fixed = world.stm(bob, "check", "--fix")
    assert "session-moved" in fixed.out, fixed
    assert_one_archived_session_with_every_event(bob, sid)
    # What is left is git's: the exact command, which runs as pasted.
    left = findings(world.stm(bob, "check", "--json"))
    assert {f["rule"] for f in left} == {"git-unmerged"}, left
    pasted(world, bob, left[0]["fix"])
    assert world.git(bob, "status", "--porcelain").stdout == ""
    assert findings(world.stm(bob, "check", "--strict", "--json")) == []
    assert_one_archived_session_with_every_event(bob, sid)
    # The archive event is history, never a phase: the session reads as archived.
    shown = world.stm(bob, "session", "show", sid, "--json").out
    assert stm.load_json(shown)["archived"] is True
    world.stm(bob, "session", "archive", sid)  # already archived: nothing to do


def test_a_pointer_to_a_session_archived_elsewhere_is_cleared_by_boot(world):
    world.seed()
    alice = world.clone("alice", driver=True)
    sid = world.stm(alice, "session", "new", "--name", "to be archived").out.strip()
    world.commit(alice, "session")
    world.push(alice)
    bob = world.clone("bob", driver=True)
    world.stm(bob, "session", "switch", sid)
    world.stm(alice, "session", "archive", sid)
    world.commit(alice, "archived")
    world.push(alice)
    world.pull(bob)
    boot = world.stm(bob, "boot")
    notices = boot_section(boot.out, "Notices")
    assert sid in notices and "to be archived" in notices, notices
    assert f"stm session show {sid}" in notices
    assert findings(world.stm(bob, "check", "--strict", "--json")) == []


def test_the_archive_event_is_never_read_as_a_phase():
    event = {
        "event": "archived",
        "timestamp": "2026-01-02T03:04:05Z",
        "actor": "alice",
        "to": ".state/history/2026-01/2026-01-01-0123abcd",
        "version": 3,
    }
    assert stm.replay_problem(event, ["plan", "build"]) is None
    state = {"phase": "plan", "valid_phases": ["plan", "build"]}
    stm.replay_event(state, event)
    assert state["phase"] == "plan" and state["archived_at"] == event["timestamp"]


# ---- memory disagreements never block ---------------------------------------------------


def test_two_clones_replacing_one_section_sync_without_a_refusal(world):
    world.seed()
    alice, bob = world.clone("alice", driver=True), world.clone("bob", driver=True)
    world.stm(alice, "note", "Status", "alice: the lexer is done", "--replace", user="alice")
    world.stm(alice, "sync", user="alice")
    world.stm(bob, "note", "Status", "bob: the parser is done", "--replace", user="bob")
    world.stm(bob, "log", "bob's entry", user="bob")
    synced = world.stm(bob, "sync", user="bob")  # never a refusal for memory
    assert "nothing changed" not in synced.err, synced
    world.stm(alice, "sync", user="alice")
    for repo in (alice, bob):
        memory = (repo / ".stacks" / "MEMORY.md").read_text()
        status = memory.split("## Status", 1)[1].split("\n## ", 1)[0]
        # bob's note is the newer: it stands; alice's is in the log, found by search.
        assert "bob: the parser is done" in status and "alice: the lexer" not in status, memory
        assert "<!-- stm:settled " in status
        assert not marker_lines(memory)
        logs = log_text(repo)
        assert "> alice: the lexer is done" in logs and "bob's entry" in logs, logs
        found = world.stm(repo, "search", "lexer").out
        assert "alice: the lexer is done" in found, found
        notices = boot_section(world.stm(repo, "boot").out, "Notices")
        assert "MEMORY.md ## Status: two clones rewrote it" in notices, notices
        assert findings(world.stm(repo, "check", "--json")) == []
    assert (
        world.git(alice, "rev-parse", "HEAD").stdout == world.git(bob, "rev-parse", "HEAD").stdout
    )
    # The next rewrite of the section drops the mark, and the notice with it.
    world.stm(bob, "note", "Status", "bob: all done", "--replace", user="bob")
    assert "two clones rewrote" not in world.stm(bob, "boot").out


# ---- every repair message works when pasted ---------------------------------------------


def run_advice(world: World, repo: Path, message: str, user: str) -> list[str]:
    """Run every `command` of a message, in order, as a person pastes them: stm in-process,
    anything else in a shell in the clone. Returns the commands run."""
    commands = re.findall(r"`([^`]+)`", message)
    assert commands, message
    for command in commands:
        if command.startswith("stm "):
            world.stm(repo, *shlex.split(command)[1:], user=user)
        else:
            done = subprocess.run(command, shell=True, cwd=repo, capture_output=True, text=True)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
    return commands


def test_sync_s_advice_about_the_user_s_own_files_never_stashes_memory(world):
    code = "def f():\n    return 1\n\n\n" + "# filler\n" * 20 + "def g():\n    return 2\n"

    def with_code(seed: Path) -> None:
        (seed / "app.py").write_text(code)

    world.seed(with_code)
    alice, bob = world.clone("alice", driver=True), world.clone("bob", driver=True)
    (alice / "app.py").write_text(code.replace("return 1", "return 10"))
    world.commit(alice, "alice's code")
    world.push(alice)
    (bob / "app.py").write_text(code.replace("return 2", "return 20"))  # not committed
    world.stm(bob, "log", "bob's uncommitted entry", user="bob")
    refused = world.stm(bob, "sync", user="bob", code=1)
    message = refused.err.strip()
    assert "app.py" in message and "git stash push" in message, message
    commands = run_advice(world, bob, message.split("nothing changed.", 1)[1], user="bob")
    assert commands[0].startswith("git stash push") and "-- app.py" in commands[0], commands
    assert commands[-1] == "git stash pop", commands
    # Nothing lost: bob's entry went out, his code is back, alice's came in.
    assert "bob's uncommitted entry" in world.git(alice, "fetch", "-q").stdout + "".join(
        world.git(alice, "show", "origin/main:" + p).stdout
        for p in world.git(
            alice, "ls-tree", "-r", "--name-only", "origin/main", ".stacks/logs"
        ).stdout.split()
    )
    assert (bob / "app.py").read_text() == code.replace("return 1", "return 10").replace(
        "return 2", "return 20"
    )
    assert findings(world.stm(bob, "check", "--strict", "--json")) == []
