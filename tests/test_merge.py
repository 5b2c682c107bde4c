"""Guarantee 7: two clones that work independently merge with zero git conflicts."""

from __future__ import annotations

import functools
import json
import re

import pytest
from conftest import IDENTITY, MEMORY
from helpers import EXAMPLE, GIT, GIT_IDENTITY, GIT_PRIVATE_CONFIG, git, run_stm

pytestmark = pytest.mark.git  # git-heavy: `pytest -m 'not git'` leaves this file out

GIT_ENV = {**GIT_IDENTITY, **GIT_PRIVATE_CONFIG, "STM_FSYNC": "0"}
git = functools.partial(git, env=GIT_ENV, check=False)  # each test asserts git's exit code


def stm(cwd, user, *args, input=None):
    result = run_stm(*args, cwd=cwd, env={**GIT_ENV, "STM_USER": user}, input=input)
    assert result.returncode == 0, (args, result.stderr)
    return result.stdout.strip()


def work(clone, user):
    """A day of independent work: sessions, checkpoints, archive, logs, a handoff."""
    first = stm(clone, user, "session", "new", "--name", f"{user} task", "--phases", "a,b")
    stm(clone, user, "session", "checkpoint", "--done", "a", "--pending", "b")
    stm(clone, user, "session", "phase", "b")
    done = stm(clone, user, "session", "new", "--name", f"{user} finished")
    stm(clone, user, "session", "archive", done)
    for n in range(3):
        stm(clone, user, "log", f"{user} entry {n}\nwith a second line")
    handoff = dict(EXAMPLE, task_id=f"{user.upper()}-1", from_agent=f"{user}-planner")
    handed = stm(clone, user, "compose-handoff", "-", input=json.dumps(handoff))
    stm(clone, user, "session", "switch", first)
    assert git(clone, "add", "-A").returncode == 0
    assert git(clone, "commit", "-qm", f"{user}'s work").returncode == 0
    return {first, done, handed}


@pytest.fixture
def clones(tmp_path):
    assert GIT, "git is needed for the merge tests"
    origin = tmp_path / "origin"
    origin.mkdir()
    assert git(origin, "init", "-q", "-b", "main").returncode == 0
    stm(origin, "setup", "init")
    (origin / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (origin / ".stacks" / "MEMORY.md").write_text(MEMORY)
    stm(origin, "setup", "log", "base entry")
    git(origin, "add", "-A")
    assert git(origin, "commit", "-qm", "base").returncode == 0
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    for clone in (alice, bob):
        assert git(tmp_path, "clone", "-q", str(origin), str(clone)).returncode == 0
    return alice, bob, work(alice, "alice"), work(bob, "bob")


def all_session_ids(clone):
    ids = set()
    for path in (clone / ".state").rglob("state.json"):
        ids.add(json.loads(path.read_text())["session_id"])
    return ids


@pytest.mark.parametrize("direction", ["bob-into-alice", "alice-into-bob"])
def test_independent_clones_merge_without_conflicts(clones, direction):
    alice, bob, alice_ids, bob_ids = clones
    ours, theirs = (alice, bob) if direction == "bob-into-alice" else (bob, alice)
    merged = git(ours, "pull", "--no-rebase", "--no-edit", "-q", str(theirs), "main")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "CONFLICT" not in merged.stdout + merged.stderr
    assert git(ours, "ls-files", "-u").stdout == ""
    check = run_stm("check", cwd=ours, env=GIT_ENV)
    assert check.returncode == 0, check.stdout
    assert all_session_ids(ours) == alice_ids | bob_ids
    logs = "".join(p.read_text() for p in (ours / ".stacks" / "logs").glob("*.md"))
    for user in ("alice", "bob"):
        for n in range(3):
            assert logs.count(f"{user} entry {n}\nwith a second line") == 1
        assert f"handoff {user.upper()}-1 received from {user}-planner" in logs
    assert logs.count("base entry") == 1
    # Every entry is framed and complete: as many end lines as headers.
    assert len(re.findall(r"<!-- stm:entry [0-9a-f]{8} -->", logs)) == len(
        re.findall(r"<!-- stm:end [0-9a-f]{8} -->", logs)
    )
    # The local pointer never travels: each side keeps its own.
    assert "current-session.json" not in git(ours, "ls-files").stdout
