"""Trust, third pass (issue 34): one capture logged once, captures quoted with their
provenance, memory roots that are what they seem, and the small kill points."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import pytest
from conftest import STM_PY
from helpers import PROC_ENV, log_text
from transcripts import Claude, write_jsonl

import stm


@pytest.fixture
def agent(store, tmp_path_factory):
    """A project (cwd) and a folder outside it where the client keeps transcripts."""
    return store, tmp_path_factory.mktemp("client-transcripts")


def payload(event: str, session: str, transcript, cwd, **extra) -> str:
    data = {
        "session_id": session,
        "transcript_path": str(transcript),
        "cwd": str(cwd),
        "hook_event_name": event,
        **extra,
    }
    return json.dumps(data)


def work(project, folder, sid: str, name: str, **say) -> str:
    """A short session of `sid` that wrote `name`, and its transcript's path."""
    c = Claude(str(project), sid)
    lines = [
        c.user(say.get("request", f"write {name}")),
        c.call("w1", "Write", file_path=f"{project}/{name}"),
        c.result("w1", "ok"),
        c.say(say.get("last", f"{name} half done")),
    ]
    return write_jsonl(folder / f"{sid}.jsonl", lines)


def sid(n: int) -> str:
    return f"{n:08x}-1111-4000-8000-{n:012x}"


def start(run, project, folder, session: str):
    body = payload("SessionStart", session, folder / f"{session}.jsonl", project, source="startup")
    return run("capture", "--client", "claude", "--boot", stdin=body)


def state_files(project):
    return sorted((project / ".state" / "sessions").glob("*/state.json"))


# ---- one capture, logged once ----------------------------------------------------------------


def test_two_starts_at_once_after_a_kill_log_the_killed_session_once(agent, run):
    """Two SessionStart hooks, real processes started together, both recover the same
    killed session: the position is checked again under the lock, so one entry, in each
    of 10 rounds."""
    project, folder = agent
    for round_ in range(10):
        killed = sid(100 + round_)
        assert start(run, project, folder, killed).code == 0
        work(project, folder, killed, f"round{round_}.py")  # then a kill: no hook
        procs = []
        for n in (1, 2):
            new = sid(1000 + 10 * round_ + n)
            body = payload("SessionStart", new, folder / f"{new}.jsonl", project, source="startup")
            proc = subprocess.Popen(
                [sys.executable, str(STM_PY), "capture", "--client", "claude"],
                cwd=project,
                env=PROC_ENV,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            procs.append((proc, body.encode()))
        for proc, body in procs:
            proc.stdin.write(body)
            proc.stdin.close()
        for proc, _ in procs:
            assert proc.wait(timeout=60) == 0
            proc.stdout.close()
            proc.stderr.close()
        assert log_text(project).count(f"round{round_}.py half done") == 1, round_


def test_a_capture_whose_state_write_fails_is_not_logged_again(agent, run, monkeypatch):
    """Disk full at the state write: the log entry is in, its position recorded, and the
    hook says so (not "nothing captured"); the next hook does not log it again."""
    project, folder = agent
    assert run("session", "new", "--name", "work").code == 0
    transcript = work(project, folder, sid(1), "lexer.py")
    real = stm.save_state

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(stm, "save_state", full)
    result = run("capture", stdin=payload("PreCompact", sid(1), transcript, project))
    assert result.code == 0
    assert "nothing captured" not in result.err
    assert "logged, but not recorded in a session's state: No space left" in result.err
    assert log_text(project).count("lexer.py half done") == 1
    monkeypatch.setattr(stm, "save_state", real)
    for _ in range(2):
        assert run("capture", stdin=payload("PreCompact", sid(1), transcript, project)).code == 0
    assert log_text(project).count("lexer.py half done") == 1
    [state] = [json.loads(p.read_text()) for p in state_files(project)]
    assert state["captured"]["logged"] == state["captured"]["position"]


def test_an_invalid_capture_in_the_current_session_never_blocks_new_ones(agent, run):
    """A hand-edited `captured` with an invalid plan status in the current session: the
    next captures go to a new session, each position logged once."""
    project, folder = agent
    first = work(project, folder, sid(1), "lexer.py")
    assert run("capture", stdin=payload("PreCompact", sid(1), first, project)).code == 0
    [path] = state_files(project)
    state = json.loads(path.read_text())
    state["captured"]["plan"] = [{"text": "x", "status": "someday"}]
    path.write_text(json.dumps(state, indent=2))
    second = work(project, folder, sid(2), "parser.py")
    for _ in range(3):
        result = run("capture", stdin=payload("PreCompact", sid(2), second, project))
        assert result.code == 0 and "nothing captured" not in result.err, result.err
    assert log_text(project).count("parser.py half done") == 1
    held = [json.loads(p.read_text()) for p in state_files(project) if p != path]
    assert [s["captured"]["client_session"] for s in held] == [sid(2)]
    for _ in range(2):  # and at each start: never logged again
        assert start(run, project, folder, sid(3)).code == 0
    assert log_text(project).count("parser.py half done") == 1
    assert log_text(project).count("lexer.py half done") == 1
