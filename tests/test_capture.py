"""Capture: what an interrupted agent session leaves behind, recorded from the clients'
hooks without the agent's help, and shown at the next boot (spec/capture.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from conftest import IDENTITY, MEMORY, clock, snapshot
from helpers import Clock, git, is_command, log_text, run_sh, run_stm
from transcripts import Claude, Codex, exec_json, patch, write_jsonl

import stm


@pytest.fixture
def agent(store, tmp_path_factory):
    """A project (cwd) and a folder outside it where the client keeps transcripts."""
    folder = tmp_path_factory.mktemp("client-transcripts")
    return store, folder


def todo_session(cwd: str, session: str = "2fc9b73b-1111-4000-8000-000000000001"):
    """An hour of work on a new request, with a todo list, a written file, an edited one
    and a failing test, the way Claude Code records it."""
    c = Claude(cwd, session)
    todos = [
        {"content": "write rankine.py", "status": "completed", "activeForm": "Writing"},
        {"content": "wire it into __init__", "status": "in_progress", "activeForm": "Wiring"},
        {"content": "make the tests pass", "status": "pending", "activeForm": "Testing"},
    ]
    return [
        c.user("Add a Rankine scale to tempconv and make the tests pass"),
        c.call("t1", "TodoWrite", todos=todos),
        c.result("t1", "Todos have been modified successfully."),
        c.call("w1", "Write", file_path=f"{cwd}/tempconv/rankine.py", content="K = 1.8\n"),
        c.result("w1", "File created successfully"),
        c.call(
            "e1", "Edit", file_path=f"{cwd}/tempconv/__init__.py", old_string="a", new_string="b"
        ),
        c.result("e1", "The file has been updated."),
        c.call("b1", "Bash", command="pytest -q tests/test_rankine.py"),
        c.result("b1", "Exit code 1\nFAILED tests/test_rankine.py::test_round", is_error=True),
        c.say("test_round fails on rounding; next I fix the constant."),
    ]


def payload(event: str, session: str, transcript, cwd, **extra) -> str:
    data = {
        "session_id": session,
        "transcript_path": str(transcript) if transcript is not None else None,
        "cwd": str(cwd),
        "hook_event_name": event,
        **extra,
    }
    return json.dumps(data)


NUDGE_EVENTS = stm.NUDGE_EVENTS  # installed with the capture hooks
SID = "2fc9b73b-1111-4000-8000-000000000001"


def sessions(project):
    base = project / ".state" / "sessions"
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.exists() else []


def state_of(folder) -> dict:
    return json.loads((folder / "state.json").read_text())


# ---- stm capture on one hook ------------------------------------------------------------------


def test_precompact_records_the_session_and_logs_what_it_did(agent, run):
    project, folder = agent
    transcript = write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    result = run(
        "capture", "--client", "claude", stdin=payload("PreCompact", SID, transcript, project)
    )
    assert result.code == 0 and result.out == "", result  # PreCompact's stdout is not context
    [folder_] = sessions(project)
    captured = state_of(folder_)["captured"]
    assert captured["client"] == "claude" and captured["client_session"] == SID
    assert captured["event"] == "PreCompact"
    assert captured["request"] == "Add a Rankine scale to tempconv and make the tests pass"
    assert captured["plan"] == [
        {"text": "write rankine.py", "status": "completed"},
        {"text": "wire it into __init__", "status": "in_progress"},
        {"text": "make the tests pass", "status": "pending"},
    ]
    assert captured["files"] == ["tempconv/rankine.py", "tempconv/__init__.py"]
    assert captured["failures"][0].startswith("pytest -q tests/test_rankine.py")
    log = log_text(project)
    assert "Captured by stm before a compaction from claude session 2fc9b73b" in log
    assert "- Plan, in progress: wire it into __init__" in log
    assert "- Touched: tempconv/rankine.py, tempconv/__init__.py" in log
    events = (folder_ / "history.jsonl").read_text().splitlines()
    assert json.loads(events[-1])["event"] == "captured"
    # the next boot shows it, right after identity
    out = run("boot").out
    block = out.split("## Last session (captured by stm)")[1].split("\n## ")[0]
    assert out.index("## Identity") < out.index("## Last session") < out.index("## Session memory")
    assert '- Asked: "Add a Rankine scale to tempconv' in block
    assert '- Plan, done: "write rankine.py"' in block
    assert '- Plan, in progress: "wire it into __init__"' in block
    assert '- Plan, pending: "make the tests pass"' in block
    assert "`tempconv/rankine.py`" in block and "pytest -q tests/test_rankine.py" in block
    assert "the agent did not write this itself" in block


def test_the_same_payload_twice_writes_nothing_new(agent, run):
    project, folder = agent
    transcript = write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    body = payload("SessionEnd", SID, transcript, project, reason="other")
    assert run("capture", "--client", "claude", stdin=body).code == 0
    before = snapshot(project / ".stacks"), snapshot(project / ".state" / "sessions")
    assert run("capture", "--client", "claude", stdin=body).code == 0
    assert (snapshot(project / ".stacks"), snapshot(project / ".state" / "sessions")) == before
    assert log_text(project).count("Captured by stm") == 1


def test_more_work_in_the_transcript_updates_the_same_session(agent, run):
    project, folder = agent
    entries = todo_session(str(project))
    transcript = write_jsonl(folder / f"{SID}.jsonl", entries)
    run("capture", "--client", "claude", stdin=payload("Stop", SID, transcript, project))
    c = Claude(str(project), SID)
    write_jsonl(folder / f"{SID}.jsonl", [*entries, c.user("now also add Delisle")])
    run("capture", "--client", "claude", stdin=payload("Stop", SID, transcript, project))
    [only] = sessions(project)
    assert state_of(only)["captured"]["request"] == "now also add Delisle"
    assert "Captured by stm" not in log_text(project)  # Stop never logs: once a turn is too often


def test_print_shows_what_would_be_recorded_and_touches_nothing(agent, run):
    project, folder = agent
    transcript = write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    before = snapshot(project)
    result = run("capture", "--print", stdin=payload("PreCompact", SID, transcript, project))
    assert result.code == 0
    assert "- Asked: Add a Rankine scale to tempconv" in result.out
    assert "- Plan, pending: make the tests pass" in result.out
    assert snapshot(project) == before


@pytest.mark.parametrize("event", ["Stop", "PreCompact", "SessionEnd"])
def test_no_stdout_for_events_whose_output_the_client_parses(agent, run, event):
    project, folder = agent
    transcript = write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    result = run("capture", "--boot", stdin=payload(event, SID, transcript, project))
    assert result.code == 0 and result.out == ""


BAD_PAYLOADS = [
    ("empty", b"", "no payload"),
    ("not json", b"{oops", "not JSON"),
    ("not an object", b"[1, 2]", "not a JSON object"),
    ("nan", b'{"hook_event_name": "Stop", "x": NaN}', "not JSON"),
    ("not utf-8", b'{"session_id": "\xff"}', "not JSON"),
]


@pytest.mark.parametrize(
    "raw,reason", [b[1:] for b in BAD_PAYLOADS], ids=[b[0] for b in BAD_PAYLOADS]
)
def test_a_bad_payload_exits_0_with_one_reason_and_changes_nothing(agent, run, raw, reason):
    project, _ = agent
    before = snapshot(project)
    result = run("capture", stdin=raw)
    assert result.code == 0 and result.out == ""
    assert result.err.count("\n") == 1 and reason in result.err and "Traceback" not in result.err
    assert snapshot(project) == before


def test_a_missing_unreadable_or_special_transcript_exits_0(agent, run):
    project, folder = agent
    before = snapshot(project / ".stacks")
    fifo = folder / "fifo.jsonl"
    os.mkfifo(fifo)
    for transcript in (folder / "missing.jsonl", fifo, folder, None):
        result = run("capture", stdin=payload("PreCompact", SID, transcript, project))
        assert result.code == 0 and result.out == "", result
    assert snapshot(project / ".stacks") == before
    assert sessions(project) == []


def test_no_store_exits_0_and_writes_nothing(tmp_path, run, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("capture", stdin=payload("SessionEnd", SID, tmp_path / "t.jsonl", tmp_path))
    assert result.code == 0 and "nothing captured" in result.err
    assert list(tmp_path.iterdir()) == []


def test_a_held_lock_makes_the_hook_skip_within_a_second(agent):
    """A real process holds the state lock; the hook gives up after HOOK_LOCK_TIMEOUT_S and
    still exits 0 (STM_LOCK_TIMEOUT's 10 s would stall the agent's start)."""
    project, folder = agent
    transcript = write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(project / ".state" / ".stm.lock")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        result = subprocess.run(
            [sys.executable, str(stm.__file__), "capture"],
            input=payload("PreCompact", SID, transcript, project),
            cwd=project,
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "STM_LOCK_TIMEOUT": "60"},
        )
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert result.returncode == 0 and result.stdout == ""
    assert "nothing captured" in result.stderr and "lock" in result.stderr


HOLD_LOCK = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def test_secrets_are_redacted_and_private_text_never_captured(agent, run):
    project, folder = agent
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    c = Claude(str(project), SID)
    entries = [
        c.user(f"deploy with {token} <private>my home address</private> please"),
        c.say("done"),
    ]
    transcript = write_jsonl(folder / f"{SID}.jsonl", entries)
    assert run("capture", stdin=payload("PreCompact", SID, transcript, project)).code == 0
    stored = log_text(project) + "".join(
        (s / n).read_text() for s in sessions(project) for n in ("state.json", "history.jsonl")
    )
    assert token not in stored and "home address" not in stored
    assert "[redacted: GitHub token]" in stored


# ---- the agent's own checkpoint and the capture, side by side -------------------------------


def test_the_agents_checkpoint_is_never_overwritten_and_the_newer_shows_first(
    agent, run, monkeypatch
):
    project, folder = agent
    clock = [stm.utc_now() - 7200]
    monkeypatch.setattr(stm, "utc_now", lambda: clock[0])
    run("session", "new", "--name", "old task")
    run("session", "checkpoint", "--pending", "old step", "--resume", "run the old tests")
    clock[0] += 3600  # an hour later the agent works on a new request and is cut off
    transcript = write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    run("capture", "--client", "claude", stdin=payload("PreCompact", SID, transcript, project))
    [only] = sessions(project)
    state = state_of(only)
    assert state["checkpoint"]["pending_steps"] == ["old step"]  # kept as the agent wrote it
    assert state["checkpoint"]["resume_instruction"] == "run the old tests"
    out = run("boot").out
    assert out.index("## Last session (captured by stm)") < out.index("## Active workflow")
    workflow = out.split("## Active workflow")[1].split("\n## ")[0]
    first = workflow.strip().splitlines()[0]
    assert first.startswith("- Written before the work shown above")
    assert first.index("the agent last wrote") < first.index("stm captured newer work")
    assert workflow.index("Written before") < workflow.index("- Resume: run the old tests")
    # then the agent checkpoints again: its workflow is newest, the capture says it is older
    clock[0] += 600
    run("session", "checkpoint", "--resume", "fix the rounding in rankine.py")
    out = run("boot").out
    assert out.index("## Active workflow") < out.index("## Last session (captured by stm)")
    block = out.split("## Last session (captured by stm)")[1].split("\n## ")[0]
    assert block.strip().startswith("- Written before the workflow above")
    # and a later capture of the same transcript keeps the agent's time, not its own
    run("capture", "--client", "claude", stdin=payload("SessionEnd", SID, transcript, project))
    out = run("boot").out
    assert out.index("## Active workflow") < out.index("## Last session (captured by stm)")


# ---- start-time recovery: the next SessionStart captures the session that ended -----------


def test_the_next_start_recovers_a_session_that_was_killed(agent, run):
    project, folder = agent
    transcript = folder / f"{SID}.jsonl"
    start = payload("SessionStart", SID, transcript, project, source="startup")
    first = run("capture", "--client", "claude", "--boot", stdin=start)
    assert first.code == 0 and "## Identity" in first.out and "Last session" not in first.out
    write_jsonl(transcript, todo_session(str(project)))  # the work; then a kill: no hook
    later = "7a7a7a7a-2222-4000-8000-000000000002"
    start = payload("SessionStart", later, folder / f"{later}.jsonl", project, source="startup")
    result = run("capture", "--client", "claude", "--boot", "--max-chars", "9500", stdin=start)
    assert result.code == 0 and len(result.out) <= 9500
    block = result.out.split("## Last session (captured by stm)")[1].split("\n## ")[0]
    assert "at the next start" in block and "2fc9b73b" in block
    assert '- Plan, in progress: "wire it into __init__"' in block
    assert "Captured by stm at the next start" in log_text(project)
    record = json.loads((project / ".state" / ".hooks.json").read_text())
    assert [e["id"] for e in record["sessions"]["claude"]] == [later, SID]  # newest first
    assert ".hooks.json" in (project / ".state" / ".gitignore").read_text()


def test_a_start_after_compaction_captures_the_live_transcript_first(agent, run):
    project, folder = agent
    transcript = folder / f"{SID}.jsonl"
    start = payload("SessionStart", SID, transcript, project, source="startup")
    run("capture", "--client", "claude", "--boot", stdin=start)
    write_jsonl(transcript, todo_session(str(project)))  # no PreCompact hook ran
    again = payload("SessionStart", SID, transcript, project, source="compact")
    result = run("capture", "--client", "claude", "--boot", stdin=again)
    assert '- Plan, in progress: "wire it into __init__"' in result.out


def test_without_a_recorded_start_the_newest_transcript_naming_the_project_is_used(agent, run):
    """stm installed mid-session: no SessionStart was recorded for the session that ended;
    its transcript is found beside the new one, by the folder it names."""
    project, folder = agent
    elsewhere = Claude("/some/other/project", "0000aaaa-3333-4000-8000-000000000003")
    write_jsonl(folder / "0000aaaa.jsonl", [elsewhere.user("other project's work")])
    write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    later = "7a7a7a7a-2222-4000-8000-000000000002"
    start = payload("SessionStart", later, folder / f"{later}.jsonl", project, source="startup")
    out = run("capture", "--client", "claude", "--boot", stdin=start).out
    assert '- Asked: "Add a Rankine scale to tempconv' in out
    assert "other project's work" not in out


# ---- every client shape ---------------------------------------------------------------------


def test_task_tools_and_codex_update_plan_become_the_plan(agent, run):
    project, folder = agent
    c = Claude(str(project), SID)
    tasks = [
        c.user("split the converter"),
        c.call("c1", "TaskCreate", subject="move kelvin", description="", activeForm="Moving"),
        c.result("c1", "Task #1 created successfully: move kelvin"),
        c.call("c2", "TaskCreate", subject="drop dead code", description="", activeForm="x"),
        c.result("c2", "Task #2 created successfully: drop dead code"),
        c.call("u1", "TaskUpdate", taskId="1", status="completed"),
        c.result("u1", "Updated task #1 status"),
        c.call("u2", "TaskUpdate", taskId="2", status="deleted"),
        c.result("u2", "Updated task #2 deleted"),
    ]
    transcript = write_jsonl(folder / "tasks.jsonl", tasks)
    run("capture", "--client", "claude", stdin=payload("PreCompact", SID, transcript, project))
    [only] = sessions(project)
    assert state_of(only)["captured"]["plan"] == [{"text": "move kelvin", "status": "completed"}]

    x = Codex(str(project))
    plan = [
        {"step": "read the spec", "status": "completed"},
        {"step": "patch", "status": "pending"},
    ]
    rollout = [
        x.meta(),
        x.message("user", "port the Codex side"),
        x.call("p1", "update_plan", plan=plan),
        x.output("p1", "Plan updated"),
        x.custom_call("a1", "apply_patch", patch("Add File: tempconv/delisle.py")),
        x.output("a1", "Success", kind="custom_tool_call_output"),
        x.call("s1", "shell", command=["pytest", "-q"]),
        x.output("s1", exec_json("1 failed", 1)),
    ]
    path = write_jsonl(folder / "rollout-2.jsonl", rollout)
    run("capture", "--client", "codex", stdin=payload("Stop", x.session, path, project))
    captured = state_of(only)["captured"]
    assert captured["client"] == "codex" and captured["request"] == "port the Codex side"
    assert [p["status"] for p in captured["plan"]] == ["completed", "pending"]
    assert captured["files"] == ["tempconv/delisle.py"]
    assert captured["failures"][0].startswith("pytest -q")


def test_a_transcript_with_no_plan_still_gives_request_files_and_failures(agent, run):
    project, folder = agent
    entries = [e for e in todo_session(str(project)) if "TodoWrite" not in json.dumps(e)]
    transcript = write_jsonl(folder / f"{SID}.jsonl", entries)
    run("capture", stdin=payload("SessionEnd", SID, transcript, project))
    out = run("boot").out
    assert '- Asked: "Add a Rankine scale' in out and "Plan," not in out
    assert "`tempconv/rankine.py`" in out and "test_rankine" in out


def test_a_long_failing_command_keeps_its_whole_error_in_state_and_boot(agent, run):
    """spec/capture.md: the command cut at 80 characters and the error at 170 on their
    own, so a long command (a heredoc commit) never leaves its error out of the stored
    failure, nor of boot's line."""
    project, folder = agent
    c = Claude(str(project), SID)
    command = "git commit -m " + "'a long message about the kelvin port " * 6 + "'"
    error = "error: pathspec 'kelvin.py' did not match any file(s) known to git, " + "x" * 200
    entries = [
        c.user("commit the kelvin port"),
        c.call("b1", "Bash", command=command),
        c.result("b1", error, is_error=True),
    ]
    transcript = write_jsonl(folder / f"{SID}.jsonl", entries)
    run("capture", stdin=payload("SessionEnd", SID, transcript, project))
    [only] = sessions(project)
    [failure] = state_of(only)["captured"]["failures"]
    shown_command, _, shown_error = failure.partition(" — ")
    assert len(shown_command) <= stm.FAILURE_COMMAND_CHARS and shown_command.endswith("...")
    assert shown_error.startswith("error: pathspec 'kelvin.py' did not match")
    assert len(shown_error) == stm.FAILURE_ERROR_CHARS and shown_error.endswith("...")
    assert failure in run("boot").out


# ---- boot without any capture: git says when memory is behind the work ---------------------


@pytest.fixture
def repo(store, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(store.parent))
    git(store, "init", "-q", "-b", "main")
    git(store, "config", "user.email", "t@example.com")
    git(store, "config", "user.name", "t")
    git(store, "add", "-A")
    git(store, "commit", "-qm", "memory")
    return store


@pytest.mark.file_times  # git stamps commits by the real clock
def test_boot_says_when_memory_is_behind_the_work_from_git(repo, run):
    (repo / "rankine.py").write_text("K = 1.8\n")
    git(repo, "add", "rankine.py")
    git(repo, "commit", "-qm", "add rankine")
    (repo / "delisle.py").write_text("x\n")
    (repo / ".stacks" / "logs" / "scratch.md").write_text("memory, not work\n")
    out = run("boot").out
    notices = out.split("## Identity")[0]
    assert "memory may be behind the work: 1 file changed and not committed" in notices
    assert "1 commit since MEMORY.md was last updated" in notices
    block = out.split("## Work not yet in memory")[1].split("\n## ")[0]
    assert "- Uncommitted now: 1 file: `delisle.py` (branch main)" in block
    assert "add rankine" in block and ".stacks" not in block


def test_boot_outside_git_says_nothing_of_git(store, run):
    out = run("boot").out
    assert "Work not yet in memory" not in out and "behind the work" not in out


def test_boot_gives_memory_age_in_hours_and_counts_agree(store, run, monkeypatch):
    memory = store / ".stacks" / "MEMORY.md"
    stamp = stm.iso(stm.utc_now() - 5 * 3600)
    memory.write_text(MEMORY.replace(MEMORY.split("## Last Updated\n\n")[1], stamp + "\n"))
    run("log", "one entry")
    first = run("boot").out.splitlines()[0]
    assert first.endswith(f"memory updated {stamp[:10]}, 5 hours ago; 1 log entry since"), first


def test_identity_stays_first_in_a_hook_sized_boot(agent, run):
    project, folder = agent
    (project / ".stacks" / "AGENT.md").write_text(IDENTITY)
    transcript = write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    run("capture", stdin=payload("PreCompact", SID, transcript, project))
    out = run("boot", "--max-chars", "1200").out
    assert len(out) <= 1200 and "Maintainer of the parser project" in out


def test_stm_own_files_are_not_work_memory_is_behind_on(repo, run):
    """The hooks, MCP client files and backups setup writes, and a `boot -o` output in
    the project, are stm's, not work: no "memory may be behind the work" for them."""
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.json").write_text('{"model": "opus"}\n')  # a user's file
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the user's settings")
    for command in (
        ("setup", "claude", "--install"),  # changes a tracked file, leaves a backup
        ("setup", "codex", "--install"),
        ("setup", "mcp", "--install", "--client", "claude"),
        ("setup", "mcp", "--install", "--client", "cursor"),
        ("setup", "mcp", "--install", "--client", "vscode"),
        ("boot", "-o", "boot.md"),
        ("boot", "-o", "docs/agent-boot.md"),
    ):
        (repo / "docs").mkdir(exist_ok=True)
        assert run(*command).code == 0, command
    (repo / ".gitattributes").write_text("*.md merge=stm\n")
    out = run("boot").out
    assert "memory may be behind" not in out and "Work not yet in memory" not in out, out
    (repo / "delisle.py").write_text("x\n")  # work, beside them
    (repo / "notes.md").write_text("# stm memory boot, my notes on it\n")
    out = run("boot").out
    assert "memory may be behind the work: 2 files changed and not committed" in out, out
    block = out.split("## Work not yet in memory")[1].split("\n## ")[0]
    assert "`delisle.py`" in block and "`notes.md`" in block and "boot.md" not in block


def test_stm_project_files_are_the_files_setup_writes():
    written = {c.file.replace(os.sep, "/") for c in stm.HOOK_CLIENTS_TABLE}
    written |= {f.replace(os.sep, "/") for f, _, _ in stm.MCP_CLIENT_FILES.values() if f}
    assert written | {".gitattributes"} == set(stm.STM_PROJECT_FILES)


# ---- the hooks exactly as `setup` writes them, run as the clients run them ----------------


@pytest.fixture
def copied(tmp_path, monkeypatch, run):
    """A project holding a copy of stm.py (as a user who copies it in), `stm` not on
    PATH, a transcript folder outside it, and a HOME of its own."""
    import shutil as real_shutil

    project = tmp_path / "tempconv-project"
    project.mkdir()
    real_shutil.copy(stm.__file__, project / "stm.py")
    monkeypatch.chdir(project)
    monkeypatch.setattr(stm, "__file__", str(project / "stm.py"))
    monkeypatch.setattr(real_shutil, "which", lambda name, *a, **k: None)
    assert run("init").code == 0
    (project / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (project / ".stacks" / "MEMORY.md").write_text(MEMORY)
    (tmp_path / "transcripts").mkdir()
    (tmp_path / "home").mkdir()
    return project


def installed(project, client: str) -> dict:
    """{event: command} of the hooks in the client's file."""
    path = project / (".claude/settings.json" if client == "claude" else ".codex/hooks.json")
    data = json.loads(path.read_text())
    return {event: entries[0]["hooks"][0]["command"] for event, entries in data["hooks"].items()}


def hook(command: str, project, body: str, cwd=None, path=None) -> subprocess.CompletedProcess:
    """One hook as the client runs it: sh -c, the payload on stdin, the project as cwd
    (`path`: the PATH it runs with, else this process's)."""
    env = {
        "PATH": path or os.environ["PATH"],
        "HOME": str(project.parent / "home"),
        "CLAUDE_PROJECT_DIR": str(project),
        "STM_FSYNC": "0",
        "USER": "agent",
    }
    return run_sh(command, input=body, cwd=cwd or project, full_env=env)


@pytest.mark.parametrize("client", ["claude", "codex"])
def test_hooks_the_installed_command_writes_fall_back_to_the_projects_stm_py(
    copied, run, monkeypatch, tmp_path, client
):
    """`setup --install` run from the installed `stm` (its stm.py outside the project):
    a teammate's clone without `stm` on PATH runs the project's committed stm.py."""
    import shutil

    project = copied
    monkeypatch.setattr(stm, "__file__", str(tmp_path / "site-packages" / "stm.py"))
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: f"/usr/local/bin/{name}")
    assert run("setup", client, "--install").code == 0
    hooks = installed(project, client)
    assert all(c.startswith("if command -v stm ") for c in hooks.values()), hooks
    bin_dir = tmp_path / "bin"  # python3 and sh, and no `stm`
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    folders = [f for f in os.environ["PATH"].split(os.pathsep) if f and not is_command(f, "stm")]
    path = os.pathsep.join([str(bin_dir), *folders])
    start = payload("SessionStart", SID, tmp_path / "none.jsonl", project, source="startup")
    (project / "src").mkdir()
    cwd = project / "src" if client == "codex" else project  # Codex: found from a subfolder
    booted = hook(hooks["SessionStart"], project, start, cwd=cwd, path=path)
    assert booted.returncode == 0 and "## Identity" in booted.stdout, booted.stderr
    assert "not installed" not in booted.stdout + booted.stderr
    # No stm.py in the project either: the one line saying how to get it, exit 0.
    (project / "stm.py").rename(tmp_path / "stm.py.moved")
    missing = hook(hooks["SessionStart"], project, start, cwd=cwd, path=path)
    assert missing.returncode == 0 and missing.stdout.startswith("stm memory: the stm command")
    assert f"`python3 stm.py setup {client} --install`" in missing.stdout
    compact = hook(hooks["PreCompact"], project, start, cwd=cwd, path=path)
    assert compact.returncode == 0 and compact.stdout == ""
    assert compact.stderr.startswith("stm memory: the stm command is not installed")
    # With the command on PATH, the command runs.
    (bin_dir / "stm").write_text('#!/bin/sh\necho "installed stm: $*"\n')
    (bin_dir / "stm").chmod(0o755)
    ran = hook(hooks["SessionStart"], project, start, cwd=cwd, path=path)
    assert ran.stdout.startswith(f"installed stm: capture --client {client} --boot"), ran


def test_claude_hooks_recover_a_killed_session_at_the_next_start(copied, run):
    project = copied
    folder = project.parent / "transcripts"
    assert run("setup", "claude", "--install").code == 0
    hooks = installed(project, "claude")
    # and the nudge on every prompt and tool call (test_recall_nudge.py)
    assert set(hooks) == {"SessionStart", "PreCompact", "SessionEnd", *NUDGE_EVENTS}
    transcript = folder / f"{SID}.jsonl"
    start = payload("SessionStart", SID, transcript, project, source="startup")
    first = hook(hooks["SessionStart"], project, start)
    assert first.returncode == 0 and "## Identity" in first.stdout, first.stderr
    write_jsonl(transcript, todo_session(str(project)))  # an hour of work, then a kill
    later = "7a7a7a7a-2222-4000-8000-000000000002"
    body = payload("SessionStart", later, folder / f"{later}.jsonl", project, source="startup")
    second = hook(hooks["SessionStart"], project, body)
    assert second.returncode == 0, second.stderr
    out = second.stdout
    assert '- Asked: "Add a Rankine scale to tempconv and make the tests pass"' in out
    assert '- Plan, in progress: "wire it into __init__"' in out
    assert '- Plan, pending: "make the tests pass"' in out
    assert "`tempconv/rankine.py`" in out and "test_rankine" in out
    # every stm command the output names runs from the agent's shell, root or subfolder
    commands = [c for c in re.findall(r"`([^`]+)`", out) if c.startswith(("python3 ", "stm "))]
    assert commands and all("-m stm" not in c for c in commands)
    (project / "tempconv").mkdir(exist_ok=True)
    for where in (project, project / "tempconv"):
        for command in sorted(set(commands)):
            done = subprocess.run(
                command.replace("TEXT", "rankine") + " --help",
                shell=True,
                cwd=where,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, (command, where, done.stderr)


def test_claude_compaction_without_a_precompact_hook_still_shows_the_work(copied, run):
    project = copied
    folder = project.parent / "transcripts"
    run("setup", "claude", "--install")
    hooks = installed(project, "claude")
    transcript = folder / f"{SID}.jsonl"
    hook(hooks["SessionStart"], project, payload("SessionStart", SID, transcript, project))
    write_jsonl(transcript, todo_session(str(project)))
    body = payload("SessionStart", SID, transcript, project, source="compact")
    out = hook(hooks["SessionStart"], project, body).stdout
    assert '- Plan, in progress: "wire it into __init__"' in out


def test_claude_precompact_and_session_end_hooks_print_nothing(copied, run):
    project = copied
    folder = project.parent / "transcripts"
    run("setup", "claude", "--install")
    hooks = installed(project, "claude")
    transcript = write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    for event in ("PreCompact", "SessionEnd"):
        done = hook(hooks[event], project, payload(event, SID, transcript, project))
        assert done.returncode == 0 and done.stdout == "", done.stderr
    assert "Captured by stm before a compaction" in log_text(project)


@pytest.mark.file_times  # the hook runs isolated (-I): no moved clock
def test_codex_hooks_capture_update_plan_and_check_notices_a_hook_that_never_ran(copied, run):
    project = copied
    folder = project.parent / "transcripts"
    result = run("setup", "codex", "--install")
    assert result.code == 0 and "/hooks" in result.out  # the trust step is named
    hooks = installed(project, "codex")
    assert set(hooks) == {"SessionStart", "PreCompact", "Stop", *NUDGE_EVENTS}
    found = json.loads(run("check", "--json").out)
    notices = [f for f in found["findings"] if f["rule"] == "hook-not-run"]
    assert notices and all(f["severity"] == "notice" for f in notices)
    assert "trust it in `/hooks`" in notices[0]["message"]
    assert found["ok"] and run("check", "--strict").code == 0  # a notice never fails
    x = Codex(str(project))
    plan = [{"step": "port", "status": "in_progress"}, {"step": "ship", "status": "pending"}]
    rollout = [
        x.meta(),
        x.message("user", "port the converter"),
        x.call("p", "update_plan", plan=plan),
    ]
    path = write_jsonl(folder / "rollout-1.jsonl", rollout)
    done = hook(hooks["Stop"], project, payload("Stop", x.session, path, project))
    assert done.returncode == 0 and done.stdout == "", done.stderr
    start = payload("SessionStart", x.session, path, project, source="resume")
    out = hook(hooks["SessionStart"], project, start).stdout
    assert '- Plan, in progress: "port' in out and '- Asked: "port the converter' in out
    assert len(out) <= stm.CODEX_HOOK_MAX_TOKENS * 4
    found = json.loads(run("check", "--json").out)
    ran = {
        f["message"].split(" hook ")[0] for f in found["findings"] if f["rule"] == "hook-not-run"
    }
    assert "the Codex Stop" not in ran and "the Codex SessionStart" not in ran
    assert "the Codex PreCompact" in ran  # not run yet: still a notice


def test_a_hook_that_cannot_run_in_this_clone_is_reported(copied, run):
    project = copied
    run("setup", "claude", "--install")
    (project / "stm.py").rename(project / "stm-elsewhere.py")  # a clone without stm.py
    result = run("setup", "claude", "--check")
    assert result.code == 1 and "does not have" in result.out
    found = json.loads(run("check", "--json").out)["findings"]
    assert any(f["rule"] == "hook-command" and "SessionStart" in f["message"] for f in found)


def test_a_committed_stm_boot_hook_is_upgraded_by_install(copied, run):
    project = copied
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    old = {"hooks": {"SessionStart": [stm.hook_entry("stm boot --max-chars 9500")]}}
    settings.write_text(json.dumps(old))
    assert run("setup", "claude", "--check").code == 1
    result = run("setup", "claude", "--install")
    assert result.code == 0 and "already installed" not in result.out
    hooks = installed(project, "claude")
    assert "stm.py capture --client claude --boot" in hooks["SessionStart"]
    # one stm hook per event: the upgraded SessionStart, and the others added once
    assert [len(v) for v in json.loads(settings.read_text())["hooks"].values()] == [1] * 5
    assert run("setup", "claude", "--check").code == 0
    assert run("setup", "claude", "--remove").code == 0


def test_status_notices_a_hook_that_never_ran_without_changing_the_verdict(copied, run):
    run("setup", "claude", "--install")
    data = json.loads(run("status", "--json").out)
    assert any("SessionStart hook has never run" in n for n in data["notices"])
    assert data["verdict"] == "ok"
    assert "notice: the Claude Code SessionStart hook has never run" in run("status").out


def test_a_capture_committed_in_one_clone_is_shown_by_a_fresh_clone(copied, run, tmp_path):
    """The pointer is local: a fresh clone has no current session, and boot shows the
    newest capture among the sessions waiting."""
    project = copied
    folder = project.parent / "transcripts"
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)}
    for args in (
        ("init", "-q", "-b", "main"),
        ("config", "user.email", "t@x"),
        ("config", "user.name", "t"),
    ):
        subprocess.run(["git", *args], cwd=project, check=True, env=env)
    transcript = write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    assert (
        run(
            "capture", "--client", "claude", stdin=payload("SessionEnd", SID, transcript, project)
        ).code
        == 0
    )
    subprocess.run(["git", "add", "-A"], cwd=project, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "work and memory"], cwd=project, check=True, env=env)
    clone = tmp_path / "fresh-clone"
    subprocess.run(["git", "clone", "-q", str(project), str(clone)], check=True, env=env)
    done = subprocess.run(
        [sys.executable, str(clone / "stm.py"), "boot"],
        cwd=clone,
        capture_output=True,
        text=True,
        env={**env, "STM_FSYNC": "0"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "## Sessions waiting" in done.stdout
    block = done.stdout.split("## Last session (captured by stm)")[1].split("\n## ")[0]
    assert '- Plan, in progress: "wire it into __init__"' in block
    assert '- Asked: "Add a Rankine scale to tempconv' in block


def test_a_planted_hook_record_never_makes_stm_read_another_file(agent, run, tmp_path_factory):
    """.state/.hooks.json is git-ignored, but a hostile clone can commit one: the
    transcript it names is read only when its entries name this project."""
    project, folder = agent
    elsewhere = tmp_path_factory.mktemp("another-project")
    other = Claude(str(elsewhere), "0bad0bad-4444-4000-8000-000000000004")
    victim = write_jsonl(elsewhere / "secret.jsonl", [other.user("the other team's plans")])
    for planted in (victim, "/etc/passwd", str(elsewhere)):
        record = {"sessions": {"claude": {"id": "0bad0bad", "transcript": planted}}, "runs": {}}
        (project / ".state" / ".hooks.json").write_text(json.dumps(record))
        start = payload("SessionStart", SID, folder / f"{SID}.jsonl", project, source="startup")
        result = run("capture", "--client", "claude", "--boot", stdin=start)
        assert result.code == 0 and "the other team's plans" not in result.out
    assert sessions(project) == []
    assert "other team" not in log_text(project)


# ---- what an attack on the first version found -----------------------------------------------


def test_a_message_of_many_elements_is_read_in_linear_time(agent, run):
    """`<li>…</li>` * n made a back-referencing regex take 2^n steps: the hook hung."""
    project, folder = agent
    c = Claude(str(project), SID)
    message = "<li>Home</li>" * 30 + " make this nav responsive"  # 2^30 steps before
    transcript = write_jsonl(folder / f"{SID}.jsonl", [c.user(message), c.say("ok")])
    assert run("capture", stdin=payload("PreCompact", SID, transcript, project)).code == 0
    [only] = sessions(project)
    assert state_of(only)["captured"]["request"].endswith("make this nav responsive")
    assert stm.only_wrappers("<a></a>" * 10_000) and not stm.only_wrappers("<a></a>" * 99 + "x")


def test_the_hook_runs_in_a_project_whose_modules_shadow_stms(copied, run):
    """A json.py or an stm/ package in the project must not stand in for the standard
    library or for stm: the hook's interpreter is isolated."""
    project = copied
    (project / "json.py").write_text("raise SystemExit('the project json.py was imported')\n")
    (project / "stm").mkdir()
    (project / "stm" / "__init__.py").write_text("raise SystemExit('the stm package')\n")
    run("setup", "claude", "--install")
    hooks = installed(project, "claude")
    start = payload("SessionStart", SID, project.parent / "t.jsonl", project, source="startup")
    for cwd in (project, project / "stm"):
        done = hook(hooks["SessionStart"], project, start, cwd=cwd)
        assert done.returncode == 0 and "## Identity" in done.stdout, done.stderr


def test_setup_keeps_the_users_own_hooks_that_mention_stm(copied, run):
    project = copied
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {
        "SessionStart": [stm.hook_entry("notify-send 'stm boot reminder'", "startup")],
        "SessionEnd": [
            stm.hook_entry('~/bin/backup.sh; echo "stm capture skipped" >> /tmp/l', None)
        ],
    }
    settings.write_text(json.dumps({"hooks": mine}))
    assert run("setup", "claude", "--install").code == 0
    data = json.loads(settings.read_text())
    commands = [
        h["command"] for entries in data["hooks"].values() for e in entries for h in e["hooks"]
    ]
    assert "notify-send 'stm boot reminder'" in commands
    assert '~/bin/backup.sh; echo "stm capture skipped" >> /tmp/l' in commands
    assert run("setup", "claude", "--remove").code == 0
    assert json.loads(settings.read_text()) == {"hooks": mine}


def test_a_secret_in_a_file_path_or_a_session_id_is_never_stored(agent, run):
    project, folder = agent
    token = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
    url = "postgres://admin:hunter2hunter2@db.example.com/prod"
    c = Claude(str(project), token)
    entries = [
        c.user("set up the database"),
        c.call("w", "Write", file_path=f"{project}/cfg/url-{url}.txt", content="x"),
        c.result("w", "ok"),
    ]
    transcript = write_jsonl(folder / "t.jsonl", entries)
    assert (
        run("capture", stdin=payload("PreCompact", token + "\n## x", transcript, project)).code == 0
    )
    stored = log_text(project) + (project / ".state" / ".hooks.json").read_text()
    stored += "".join(
        (s / n).read_text() for s in sessions(project) for n in ("state.json", "history.jsonl")
    )
    assert token not in stored and "hunter2" not in stored and "\n## x" not in stored


def test_a_big_plan_leaves_memory_in_a_hook_sized_boot_and_check_strict_ok(agent, run):
    project, folder = agent
    c = Claude(str(project), SID)
    todos = [
        {"content": f"step {n}: " + "describe the work in detail " * 5, "status": s}
        for n, s in enumerate(["completed"] * 20 + ["in_progress"] + ["pending"] * 19)
    ]
    entries = [c.user("a big job"), c.call("t", "TodoWrite", todos=todos)]
    for n in range(25):
        entries.append(c.call(f"e{n}", "Edit", file_path=f"{project}/src/m{n}.py", old_string="a"))
    transcript = write_jsonl(folder / f"{SID}.jsonl", entries)
    run("capture", stdin=payload("PreCompact", SID, transcript, project))
    out = run("boot", "--max-chars", str(stm.HOOK_MAX_CHARS)).out
    assert "Parser port half done" in out  # session memory survives the capture
    assert '- Plan, in progress: "step 20' in out
    [only] = sessions(project)
    assert len((only / "state.json").read_bytes()) < 8000
    assert run("check", "--strict").code == 0


def test_the_start_is_recorded_even_when_its_capture_fails(agent, run, monkeypatch):
    project, folder = agent
    transcript = folder / f"{SID}.jsonl"

    def broken(*args, **kwargs):
        raise stm.StmError("the lock could not be taken in 1 s")

    monkeypatch.setattr(stm, "capture_hook", broken)
    start = payload("SessionStart", SID, transcript, project, source="startup")
    result = run("capture", "--client", "claude", "--boot", stdin=start)
    assert result.code == 0 and "## Identity" in result.out and "nothing captured" in result.err
    record = json.loads((project / ".state" / ".hooks.json").read_text())
    assert record["sessions"]["claude"][0]["id"] == SID


def test_stop_writes_only_when_the_work_changed(agent, run):
    project, folder = agent
    entries = todo_session(str(project))
    transcript = write_jsonl(folder / f"{SID}.jsonl", entries)
    run("capture", stdin=payload("Stop", SID, transcript, project))
    [only] = sessions(project)
    events = (only / "history.jsonl").read_text().count("\n")
    c = Claude(str(project), SID)
    for n in range(3):  # turns that only talk
        entries.append(c.say(f"thinking, turn {n}"))
        write_jsonl(folder / f"{SID}.jsonl", entries)
        run("capture", stdin=payload("Stop", SID, transcript, project))
    assert (only / "history.jsonl").read_text().count("\n") == events
    entries.append(c.call("w9", "Write", file_path=f"{project}/new.py", content="x"))
    write_jsonl(folder / f"{SID}.jsonl", entries)
    run("capture", stdin=payload("Stop", SID, transcript, project))
    assert (only / "history.jsonl").read_text().count("\n") == events + 1


def test_two_sessions_alternating_log_each_position_once(agent, run):
    project, folder = agent
    other = "7a7a7a7a-2222-4000-8000-000000000002"
    a = write_jsonl(folder / "a.jsonl", todo_session(str(project)))
    b = write_jsonl(folder / "b.jsonl", todo_session(str(project), other))
    for session, transcript in ((SID, a), (other, b), (SID, a), (other, b), (SID, a)):
        assert run("capture", stdin=payload("PreCompact", session, transcript, project)).code == 0
    assert log_text(project).count("Captured by stm") == 2


def test_uuidv7_sessions_started_together_get_labels_that_tell_them_apart(agent, run):
    """Codex's session ids are UUIDv7: their first 8 hex digits are the start time, shared
    by two sessions started within a minute. Every label stm derives (the log entry, the
    session's name, boot's line) must still tell the two apart."""
    project, folder = agent
    first, second = "019ab4c1-7e10-7a3c-9f1e-5c2d8e4a1b01", "019ab4c1-9f42-7d08-b3a6-0e7f91c2d4e9"
    for sid, ask in ((first, "port the lexer"), (second, "write the docs")):
        x = Codex(str(project), sid)
        lines = [x.meta(), x.message("user", ask), x.message("assistant", "on it")]
        transcript = write_jsonl(folder / f"rollout-2026-01-02T10-00-00-{sid}.jsonl", lines)
        assert run("capture", stdin=payload("PreCompact", sid, transcript, project)).code == 0
    log = log_text(project)
    assert "from codex session 8e4a1b01 " in log and "from codex session 91c2d4e9 " in log
    held = {
        state_of(folder).get("name"): state_of(folder)["captured"]["client_session"]
        for folder in sessions(project)
    }
    # The second took the first's session over (the first sent no hook since): the
    # session is named after the one whose work it holds (issue 35, item 6), by a label
    # that tells the two apart.
    assert held == {"codex 91c2d4e9": second}, held
    assert "- From codex session 91c2d4e9," in run("boot").out
    # Claude Code's ids are UUIDv4: their first 8 digits stay the label users know.
    assert stm.session_label(SID) == SID[:8]
    assert stm.session_label("session-1") == "session-1"  # short: whole


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_device_or_folder_as_transcript_is_never_opened_nor_claimed_read(
    agent, run, monkeypatch
):
    """As a real hook runs: a FIFO with no writer (which a blocking open would wait on
    forever), a device and a folder named as the transcript. The hook exits 0 at once,
    says the transcript was not read (never "nothing to capture", which claims it was),
    records no capture, and never even opens the special file."""
    project, folder = agent
    fifo = folder / f"{SID}.jsonl"
    os.mkfifo(fifo)
    (folder / "dir.jsonl").mkdir()
    for transcript in (fifo, os.devnull, folder / "dir.jsonl"):
        for event in ("PreCompact", "SessionStart"):
            done = run_stm(
                "capture", "--client", "claude", "--boot", cwd=project, timeout=30,
                input=payload(event, SID, transcript, project, source="startup"),
            )  # fmt: skip
            assert done.returncode == 0 and "Traceback" not in done.stderr, done
            if event == "PreCompact":
                assert f"skipped transcript {transcript}: not read (" in done.stderr, done
            assert "nothing to capture" not in done.stderr
    assert sessions(project) == [] and "Captured by stm" not in log_text(project)
    opened = []
    real_open = os.open
    monkeypatch.setattr(
        os, "open", lambda path, *a, **k: opened.append(path) or real_open(path, *a, **k)
    )
    for special in (str(fifo), os.devnull, str(folder / "dir.jsonl")):
        assert stm.read_transcript(special).position == ""
    assert opened == []


def test_codex_null_transcript_path_exits_0_fast_and_keeps_what_is_known(agent, run):
    """Codex's payloads may carry `"transcript_path": null`. As real hook processes: exit
    0, no traceback, boot still printed at the start, the run and the session recorded;
    a later null for the same session keeps the transcript an earlier hook named, so the
    next start can still recover that session."""
    project, folder = agent
    sid = "0199a213-81c0-7800-8aa1-bbab2a035a53"
    x = Codex(str(project), sid)
    rollout = write_jsonl(folder / f"rollout-x-{sid}.jsonl", [x.meta(), x.message("user", "Tidy")])
    for event, transcript in (("SessionStart", None), ("Stop", rollout), ("SessionStart", None)):
        started = time.monotonic()
        done = run_stm(
            "capture", "--client", "codex", "--boot", "--max-tokens", "2400", cwd=project,
            input=payload(event, sid, transcript, project, source="resume", model="gpt-5"),
        )  # fmt: skip
        assert time.monotonic() - started < 20
        assert done.returncode == 0 and "Traceback" not in done.stderr, done
        assert ("# Agent Identity" in done.stdout) == (event == "SessionStart")
    record = json.loads((project / ".state" / ".hooks.json").read_text())
    assert record["sessions"]["codex"][0] == {
        **record["sessions"]["codex"][0],
        "id": sid,
        "transcript": rollout,
    }
    assert {"codex SessionStart", "codex Stop"} <= set(record["runs"])
    other = "0199a2ff-0000-7000-8000-00000000beef"
    boot = run(
        "capture",
        "--client",
        "codex",
        "--boot",
        stdin=payload("SessionStart", other, None, project),
    )
    assert '- Asked: "Tidy' in boot.out


def test_two_claude_sessions_in_one_checkout_are_both_recovered(agent, run):
    """Two Claude Code sessions (different session_id) run side by side in one checkout
    and are both killed: the next start must recover both, neither hiding the other."""
    project, folder = agent
    first, second = SID, "7a7a7a7a-2222-4000-8000-000000000002"
    paths = {sid: folder / f"{sid}.jsonl" for sid in (first, second)}
    for sid in (first, second):
        start = payload("SessionStart", sid, paths[sid], project, source="startup")
        assert run("capture", "--client", "claude", "--boot", stdin=start).code == 0
    for sid, name in ((first, "lexer.py"), (second, "docs.md")):
        small_work(project, folder, sid, name)  # then both are killed
    third = "3c3c3c3c-3333-4000-8000-000000000003"
    start = payload("SessionStart", third, folder / f"{third}.jsonl", project, source="startup")
    boot = run("capture", "--client", "claude", "--boot", stdin=start).out
    log = log_text(project)
    assert "lexer.py half done" in log and "docs.md half done" in log
    block = boot.split("## Last session (captured by stm)")[1].split("\n## ")[0]
    assert "- From claude session 7a7a7a7a," in block  # the newest, in the current session
    [also] = [line for line in block.splitlines() if line.startswith("- Also captured:")]
    assert also.startswith("- Also captured: claude session 2fc9b73b, last active ")
    [held] = [
        s.name for s in sessions(project) if state_of(s)["captured"]["client_session"] == first
    ]
    assert f"session show {held}" in also


# ---- two sessions of one client in one checkout ------------------------------------------


def small_work(project, folder, sid: str, name: str) -> str:
    """A short session of `sid` that wrote `name`, and its transcript's path."""
    c = Claude(str(project), sid)
    c.clock.start = clock() - 3600  # an hour ago by stm's clock, moved or not
    work = [c.user(f"write {name}"), c.call("w1", "Write", file_path=f"{project}/{name}")]
    lines = [*work, c.result("w1", "ok"), c.say(f"{name} half done")]
    return write_jsonl(folder / f"{sid}.jsonl", lines)


def hook_record(project) -> dict:
    return json.loads((project / ".state" / ".hooks.json").read_text())


def test_the_record_of_an_older_stm_one_session_per_client_is_still_read(agent, run):
    project, folder = agent
    transcript = small_work(project, folder, SID, "lexer.py")
    old = {"sessions": {"claude": {"id": SID, "transcript": transcript, "seen_at": "x"}}}
    (project / ".state" / ".hooks.json").write_text(json.dumps({**old, "runs": {}}))
    later = "7a7a7a7a-2222-4000-8000-000000000002"
    # In another folder, so only the record can lead to the first transcript (the fallback
    # looks beside the new one).
    (folder / "new").mkdir()
    start = payload("SessionStart", later, folder / "new" / f"{later}.jsonl", project)
    out = run("capture", "--client", "claude", "--boot", stdin=start).out
    assert '- Last message: "lexer.py half done' in out
    entries = hook_record(project)["sessions"]["claude"]
    assert [e["id"] for e in entries] == [later, SID] and entries[1]["transcript"] == transcript


def test_a_start_opens_at_most_four_transcripts_and_the_next_start_gets_the_rest(
    agent, run, monkeypatch
):
    """Six sessions cut off with work: a start opens the newest four (it must stay
    fast); the already logged cost a stat at the next start, which recovers the other two."""
    project, folder = agent
    ids = [f"{n}{n}{n}{n}aaaa-3333-4000-8000-00000000000{n}" for n in range(1, 7)]
    entries = [
        {"id": sid, "transcript": small_work(project, folder, sid, f"f{n}.py")}
        for n, sid in enumerate(ids, 1)
    ]
    record = {"sessions": {"claude": entries[::-1]}, "runs": {}}  # newest first
    (project / ".state" / ".hooks.json").write_text(json.dumps(record))
    opened = []
    real = stm.read_transcript_from
    monkeypatch.setattr(
        stm, "read_transcript_from", lambda p, *a, **k: opened.append(p) or real(p, *a, **k)
    )
    for n, new in enumerate(("7a7a7a7a-0000-4000-8000-00000000000a", "7b7b7b7b-0000")):
        start = payload("SessionStart", new, folder / f"{new}.jsonl", project, source="startup")
        assert run("capture", "--client", "claude", stdin=start).code == 0
        assert len(opened) == 4 if n == 0 else 6
    log = log_text(project)
    assert [f"f{n}.py half done" in log for n in range(1, 7)] == [True] * 6
    assert log.count("Captured by stm") == 6
    assert [e["id"] for e in hook_record(project)["sessions"]["claude"]][:2] == [
        "7b7b7b7b-0000",
        "7a7a7a7a-0000-4000-8000-00000000000a",
    ]
    # Nothing new: a third start opens nothing and logs nothing.
    start = payload("SessionStart", "7c7c7c7c", folder / "7c7c7c7c.jsonl", project, source="clear")
    run("capture", "--client", "claude", stdin=start)
    assert len(opened) == 6 and log_text(project).count("Captured by stm") == 6


def test_a_start_shares_one_full_tail_among_the_sessions_it_recovers(agent, run, monkeypatch):
    """The sessions a start recovers share one transcript tail's bytes, each read from its
    own tail: a big transcript is never left behind small ones (it would wait at every
    start and fall out of the record unread, found by a review)."""
    project, folder = agent
    reads = []
    real = stm.read_transcript_from

    def recorded(path, since, *, max_bytes=stm.TRANSCRIPT_TAIL_BYTES, root=None, head_bytes=0):
        reads.append(max_bytes + head_bytes)  # the bytes of its window: tail and start
        return real(path, since, max_bytes=max_bytes, root=root, head_bytes=head_bytes)

    monkeypatch.setattr(stm, "read_transcript_from", recorded)
    ids = ["1111aaaa-3333-4000-8000-000000000001", "2222aaaa-3333-4000-8000-000000000002"]
    entries = [{"id": sid, "transcript": small_work(project, folder, sid, "f.py")} for sid in ids]
    (project / ".state" / ".hooks.json").write_text(json.dumps({"sessions": {"claude": entries}}))
    start = payload(
        "SessionStart", "7a7a7a7a", folder / "7a7a7a7a.jsonl", project, source="startup"
    )
    run("capture", "--client", "claude", stdin=start)
    assert log_text(project).count("Captured by stm") == 2  # both, at the first start
    assert reads == [stm.HOOK_RECOVER_BYTES // 2] * 2


def transcript_fields(captured: dict) -> dict:
    """What a capture took from the transcript (CAPTURE_FIELDS' transcript rows)."""
    names = [f.name for f in stm.CAPTURE_FIELDS if f.source == "transcript"]
    return {name: captured.get(name) for name in names}


def whole_read(project, path) -> dict:
    """The capture one read of the whole transcript gives (spec/capture.md's window)."""
    transcript = stm.read_transcript(str(path), root=str(project))
    record = stm.captured_record(transcript, None, client="claude", session=SID, event="x")
    return transcript_fields(record)


def more_work(project) -> list:
    c = Claude(str(project), SID)
    c.count = iter(range(100, 200))  # uuids after todo_session's
    return [
        c.call(
            "e2", "Edit", file_path=f"{project}/tempconv/rankine.py", old_string="1", new_string="2"
        ),
        c.result("e2", "The file has been updated."),
        c.call("b2", "Bash", command="pytest -q tests/test_rankine.py"),
        c.result("b2", "1 passed"),
        c.say("Rankine works; next the docs."),
    ]


def append_lines(path, entries) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.writelines(json.dumps(entry) + "\n" for entry in entries)


def test_a_recovering_start_continues_from_the_last_capture(agent, run, monkeypatch):
    """The session's PreCompact kept its reader's state in the local record; the next
    start recovers the work done since by reading only that (spec/capture.md, "A capture
    continues from the last one"), and records what one read of the whole would."""
    project, folder = agent
    path = write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    assert (
        run("capture", "--client", "claude", stdin=payload("PreCompact", SID, path, project)).code
        == 0
    )
    kept = hook_record(project)["readers"][SID]
    state = json.loads(kept)
    assert state["transcript"] == path and state["size"] == os.path.getsize(path)
    append_lines(path, more_work(project))
    since = []
    real = stm.read_transcript_from
    monkeypatch.setattr(
        stm, "read_transcript_from", lambda p, s, **k: since.append(s) or real(p, s, **k)
    )
    later = "7a7a7a7a-2222-4000-8000-000000000002"
    start = payload("SessionStart", later, folder / f"{later}.jsonl", project, source="startup")
    assert run("capture", "--client", "claude", stdin=start).code == 0
    assert since == [kept]  # read on from the state the PreCompact kept
    [folder_] = sessions(project)
    captured = state_of(folder_)["captured"]
    assert transcript_fields(captured) == whole_read(project, path)
    assert (
        captured["failures"] == [] and captured["last_message"] == "Rankine works; next the docs."
    )
    assert log_text(project).count("Captured by stm") == 2
    # The state kept now is at the new size, as one read of the whole would keep it.
    _, whole_state = stm.read_transcript_from(
        path,
        None,
        root=str(project),
        max_bytes=stm.TRANSCRIPT_TAIL_BYTES - stm.TRANSCRIPT_HEAD_BYTES,
        head_bytes=stm.TRANSCRIPT_HEAD_BYTES,
    )
    assert hook_record(project)["readers"][SID] == whole_state


FORGED_POSITIONS = ["99999999999:x", "-5:uuid-0010", "abc", "0:", "3:uuid-0001", 7]


@pytest.mark.parametrize("position", FORGED_POSITIONS)
def test_a_forged_position_or_kept_state_never_misleads_a_start(agent, run, position):
    """A previous position is data, never an instruction: one forged in state.json, in the
    local record's logged positions or in a kept reader's state (pointing at another
    file, past the end, at a line that is not the entry) makes stm read no other file and
    no other bytes; the start exits 0 and records what one read of the whole gives."""
    project, folder = agent
    path = write_jsonl(folder / f"{SID}.jsonl", todo_session(str(project)))
    assert (
        run("capture", "--client", "claude", stdin=payload("PreCompact", SID, path, project)).code
        == 0
    )
    [folder_] = sessions(project)
    state = state_of(folder_)
    state["captured"]["position"] = position
    (folder_ / "state.json").write_text(json.dumps(state))
    record = hook_record(project)
    kept = json.loads(record["readers"][SID])
    size = kept["size"]
    record["logged"][SID] = position
    record["readers"][SID] = json.dumps(
        {
            **kept,
            "size": position_number(position, size),
            "mark": size * 3,
            "transcript": "/etc/passwd",
        }
    )
    (project / ".state" / ".hooks.json").write_text(json.dumps(record))
    append_lines(path, more_work(project))
    later = "7a7a7a7a-2222-4000-8000-000000000002"
    start = payload("SessionStart", later, folder / f"{later}.jsonl", project, source="startup")
    result = run("capture", "--client", "claude", stdin=start)
    assert result.code == 0 and "Traceback" not in result.err
    # Where the recovery went (a state.json made invalid by the forgery is passed over).
    [entry] = [e for e in hook_record(project)["sessions"]["claude"] if e["id"] == SID]
    captured = state_of(project / ".state" / "sessions" / entry["to"])["captured"]
    assert transcript_fields(captured) == whole_read(project, path)
    assert "passwd" not in json.dumps(captured)


def position_number(position, size: int):
    head = str(position).partition(":")[0]
    return int(head) if head.lstrip("-").isdigit() else size


def test_the_local_record_keeps_a_reader_state_for_each_session_it_lists(agent, run, monkeypatch):
    """One state for each client session the record lists (the 8 newest of a client:
    the ones a start may recover); a state over READER_STATE_MAX is not kept; a record
    that would outgrow HOOK_RECORD_MAX drops the states of the sessions whose hooks ran
    longest ago first, and stays readable."""
    project, folder = agent
    ids = [f"{n}{n}{n}{n}aaaa-3333-4000-8000-00000000000{n}" for n in range(1, 10)]
    for n, sid in enumerate(ids, 1):
        path = small_work(project, folder, sid, f"f{n}.py")
        body = payload("PreCompact", sid, path, project)
        assert run("capture", "--client", "claude", stdin=body).code == 0
    readers = hook_record(project)["readers"]
    listed = [e["id"] for e in hook_record(project)["sessions"]["claude"]]
    assert sorted(readers) == sorted(listed) and listed == ids[::-1][: stm.HOOK_SESSIONS_MAX]
    for sid, state in readers.items():
        assert json.loads(state)["transcript"] == str(folder / f"{sid}.jsonl")
    # A session whose reader would keep more than READER_STATE_MAX keeps none.
    big = "7a7a7a7a-2222-4000-8000-000000000002"
    c = Claude(str(project), big)
    asked = [{"question": "x" * 1000}]
    lines = [c.call(f"q{n}", "AskUserQuestion", questions=asked) for n in range(40)]
    path = write_jsonl(folder / f"{big}.jsonl", [c.user("ask"), *lines])
    assert (
        run("capture", "--client", "claude", stdin=payload("PreCompact", big, path, project)).code
        == 0
    )
    readers = hook_record(project)["readers"]
    assert big not in readers and sorted(readers) == sorted(ids[::-1][: stm.HOOK_SESSIONS_MAX - 1])
    # Too big a record: the oldest sessions' states go first.
    size = len((project / ".state" / ".hooks.json").read_bytes())
    monkeypatch.setattr(stm, "HOOK_RECORD_MAX", size - 1000)
    body = payload("PreCompact", ids[-1], folder / f"{ids[-1]}.jsonl", project)
    assert run("capture", "--client", "claude", stdin=body).code == 0
    assert len((project / ".state" / ".hooks.json").read_bytes()) <= size - 1000
    kept = list(hook_record(project)["readers"])
    newest = [e["id"] for e in hook_record(project)["sessions"]["claude"] if e["id"] != big]
    assert 0 < len(kept) < stm.HOOK_SESSIONS_MAX - 1 and sorted(kept) == sorted(newest[: len(kept)])


def test_the_kept_reader_state_holds_no_secret_the_capture_drops(agent, run):
    """The local record's reader state is stored as a capture is (spec/capture.md,
    "Redaction"): a token in the person's message, a failing command and its error, an
    edited file's path, the agent's last message and a command still running are all
    redacted there, and the capture continued from that state says what one read says."""
    project, folder = agent
    token = "ghp_" + "Ab3" * 12  # date-safe: no date
    sid = "5ec2e7aa-1111-4000-8000-000000000001"
    c = Claude(str(project), sid)
    lines = [
        c.user(f"deploy with {token} please"),
        c.call("b1", "Bash", command=f"curl -H 'Authorization: token {token}' api"),
        c.result("b1", f"401 for {token}", is_error=True),
        c.call(
            "e1", "Edit", file_path=f"{project}/notes-{token}.md", old_string="a", new_string="b"
        ),
        c.result("e1", "ok"),
        c.say(f"I used {token} <private>and a private note</private> here"),
        c.call("b2", "Bash", command=f"GITHUB_TOKEN={token} ./release.sh"),  # still running
    ]
    path = write_jsonl(folder / f"{sid}.jsonl", lines)
    assert (
        run("capture", "--client", "claude", stdin=payload("PreCompact", sid, path, project)).code
        == 0
    )
    record = (project / ".state" / ".hooks.json").read_text()
    assert sid in json.loads(record)["readers"]
    assert token not in record and "private note" not in record, record
    assert "[redacted: GitHub token]" in record
    # Continued from that state, a capture says what one read of the whole says.
    lines.append(c.result("b2", "released"))
    write_jsonl(folder / f"{sid}.jsonl", lines)
    state = json.loads(record)["readers"][sid]
    continued, _ = stm.read_transcript_from(str(path), state)
    whole, _ = stm.read_transcript_from(str(path), None)
    assert continued == whole and token not in repr(whole)


def test_a_session_started_in_a_folder_of_the_project_is_recovered(agent, run):
    """A transcript whose working folder is inside the project is the project's (an agent
    started in `pkg/`): recovered at the next start like one started at the top."""
    project, folder = agent
    inner = project / "pkg"
    inner.mkdir()
    sid = "3333aaaa-3333-4000-8000-000000000003"
    path = small_work(inner, folder, sid, "mod.py")
    (project / ".state" / ".hooks.json").write_text(
        json.dumps({"sessions": {"claude": [{"id": sid, "transcript": str(path)}]}})
    )
    start = payload(
        "SessionStart", "7a7a7a7a", folder / "7a7a7a7a.jsonl", project, source="startup"
    )
    run("capture", "--client", "claude", stdin=start)
    assert "Captured by stm at the next start from claude session 3333aaaa" in log_text(project)


def start_side_by_side(project, folder, run, monkeypatch, ids) -> tuple[dict, Clock]:
    """Start each client session in turn, a tick of stm's clock apart (as two terminals
    would); returns each one's transcript path, and the clock."""
    tick = Clock(clock())
    monkeypatch.setattr(stm, "utc_now", tick)
    paths = {sid: folder / f"{sid}.jsonl" for sid in ids}
    for sid in ids:
        run(
            "capture", "--client", "claude", stdin=payload("SessionStart", sid, paths[sid], project)
        )
        tick.tick()
    return paths, tick


def test_a_capture_never_replaces_one_of_a_session_live_beside_it(agent, run, monkeypatch):
    """A and B started side by side; A's PreCompact ran after B started: B's capture goes
    to a session of its own, the pointer stays, and A's capture stays where it was."""
    project, folder = agent
    other = "7a7a7a7a-2222-4000-8000-000000000002"
    paths, tick = start_side_by_side(project, folder, run, monkeypatch, (SID, other))
    small_work(project, folder, SID, "lexer.py")
    run("capture", "--client", "claude", stdin=payload("PreCompact", SID, paths[SID], project))
    [first] = sessions(project)
    pointer = (project / ".state" / "current-session.json").read_text()
    tick.tick()
    small_work(project, folder, other, "docs.md")
    run("capture", "--client", "claude", stdin=payload("PreCompact", other, paths[other], project))
    assert len(sessions(project)) == 2
    assert state_of(first)["captured"]["client_session"] == SID
    [second] = [s for s in sessions(project) if s != first]
    assert state_of(second)["captured"]["client_session"] == other
    assert (project / ".state" / "current-session.json").read_text() == pointer
    # B's next capture finds its own session again; A's finds A's.
    for sid, name in ((other, "docs2.md"), (SID, "lexer2.py")):
        small_work(project, folder, sid, name)
        run("capture", "--client", "claude", stdin=payload("PreCompact", sid, paths[sid], project))
    assert len(sessions(project)) == 2
    assert state_of(first)["captured"]["files"] == ["lexer2.py"]
    assert state_of(second)["captured"]["files"] == ["docs2.md"]
    assert {e["id"]: e["to"] for e in hook_record(project)["sessions"]["claude"]} == {
        SID: first.name,
        other: second.name,
    }


def test_a_session_that_stopped_before_the_next_started_is_replaced_as_before(
    agent, run, monkeypatch
):
    project, folder = agent
    tick = Clock(clock())
    monkeypatch.setattr(stm, "utc_now", tick)
    other = "7a7a7a7a-2222-4000-8000-000000000002"
    first = payload("SessionStart", SID, folder / f"{SID}.jsonl", project, source="startup")
    run("capture", "--client", "claude", stdin=first)
    small_work(project, folder, SID, "lexer.py")  # then killed
    tick.tick()
    later = payload("SessionStart", other, folder / f"{other}.jsonl", project, source="startup")
    run("capture", "--client", "claude", stdin=later)  # recovers the first
    tick.tick()
    transcript = small_work(project, folder, other, "docs.md")
    run("capture", "--client", "claude", stdin=payload("PreCompact", other, transcript, project))
    [only] = sessions(project)
    assert state_of(only)["captured"]["client_session"] == other


def test_a_resumed_session_is_the_last_session_again(agent, run, monkeypatch):
    """A, B and C ran one after another, each killed; A is resumed. A's start counts as
    now, so B and C, stopped before it, are not live beside it: A's capture takes the
    current session, and C (recovered at the same start) is named below it (a review
    found A pushed into a second session and dead C shown as the last session)."""
    project, folder = agent
    tick = Clock(clock())
    monkeypatch.setattr(stm, "utc_now", tick)
    ids = [SID, "7a7a7a7a-2222-4000-8000-000000000002", "7b7b7b7b-2222-4000-8000-000000000003"]
    for n, sid in enumerate(ids):
        start = payload("SessionStart", sid, folder / f"{sid}.jsonl", project, source="startup")
        run("capture", "--client", "claude", stdin=start)
        tick.tick()
        small_work(project, folder, sid, f"f{n}.py")  # then killed
        tick.tick()
    resume = payload("SessionStart", SID, folder / f"{SID}.jsonl", project, source="resume")
    out = run("capture", "--client", "claude", "--boot", stdin=resume).out
    block = out.split("## Last session (captured by stm)")[1].split("\n## ")[0]
    first, *rest = [line for line in block.splitlines() if line.startswith("- ")]
    assert "claude session 2fc9b73b" in first, block
    assert any("Also captured: claude session 7b7b7b7b" in line for line in rest), block


def test_a_hook_with_a_null_transcript_path_captures_the_recorded_transcript(agent, run):
    """Codex may send `transcript_path: null` after its start named one: the hook captures
    the transcript the local record holds for that session (found by a review: it was
    skipped as naming no transcript)."""
    project, folder = agent
    start = payload("SessionStart", SID, folder / f"{SID}.jsonl", project, source="startup")
    run("capture", "--client", "claude", stdin=start)
    small_work(project, folder, SID, "lexer.py")
    result = run("capture", "--client", "claude", stdin=payload("PreCompact", SID, None, project))
    assert result.code == 0, result.err
    assert "before a compaction from claude session 2fc9b73b" in log_text(project)


def test_a_transcript_grown_by_no_work_is_not_logged_twice(agent, run):
    """A session logged at its end whose transcript then gains a line that is not work (a
    client's summary) is not logged again at the next start (found by a review); more
    work after a capture that was not logged (a Stop's) is still logged."""
    project, folder = agent
    path = small_work(project, folder, SID, "lexer.py")
    start = payload("SessionStart", SID, path, project, source="startup")
    run("capture", "--client", "claude", stdin=start)
    run("capture", "--client", "claude", stdin=payload("SessionEnd", SID, path, project))
    assert log_text(project).count("Captured by stm") == 1
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"type": "summary", "summary": "Lexer", "leafUuid": "x"}) + "\n")
    other = "7a7a7a7a-2222-4000-8000-000000000002"
    later = payload("SessionStart", other, folder / f"{other}.jsonl", project, source="startup")
    run("capture", "--client", "claude", stdin=later)
    assert log_text(project).count("Captured by stm") == 1
    # New work in a third session: captured by its Stop (not logged), then cut off.
    third = "7b7b7b7b-2222-4000-8000-000000000003"
    path = small_work(project, folder, third, "docs.md")
    start = payload("SessionStart", third, path, project, source="startup")
    run("capture", "--client", "claude", stdin=start)
    run("capture", "--client", "claude", stdin=payload("Stop", third, path, project))
    last = "7c7c7c7c-2222-4000-8000-000000000004"
    start = payload("SessionStart", last, folder / f"{last}.jsonl", project, source="startup")
    run("capture", "--client", "claude", stdin=start)
    assert log_text(project).count("docs.md half done") == 1


def test_boot_names_a_recent_capture_kept_in_another_session(agent, run, monkeypatch):
    project, folder = agent
    other = "7a7a7a7a-2222-4000-8000-000000000002"
    paths, tick = start_side_by_side(project, folder, run, monkeypatch, (SID, other))
    for sid, name in ((SID, "lexer.py"), (other, "docs.md")):  # side by side: two sessions
        small_work(project, folder, sid, name)
        run("capture", "--client", "claude", stdin=payload("PreCompact", sid, paths[sid], project))
    [held] = [
        s.name for s in sessions(project) if state_of(s)["captured"]["client_session"] == other
    ]
    block = run("boot").out.split("## Last session (captured by stm)")[1].split("\n## ")[0]
    assert "- From claude session 2fc9b73b," in block
    [also] = [line for line in block.splitlines() if line.startswith("- Also captured:")]
    assert also.startswith("- Also captured: claude session 7a7a7a7a, last active ")
    assert also.endswith(f" ago, kept in session {held} (`stm session show {held}`)")
    # A planted or stale record names nothing outside the store's sessions.
    record = hook_record(project)
    record["sessions"]["codex"] = [{"id": "x", "to": "../../../etc", "seen_at": "9"}]
    (project / ".state" / ".hooks.json").write_text(json.dumps(record))
    assert "- Also captured: claude session 7a7a7a7a" in run("boot").out
    tick.tick(8 * 86400)  # a week later, the other capture no longer matters
    assert "Also captured" not in run("boot").out


def test_claude_hooks_recover_two_sessions_killed_side_by_side(copied, run):
    """As the client runs them: two sessions start, work and are killed together, and the
    next start logs both and names both in its boot."""
    project = copied
    folder = project.parent / "transcripts"
    assert run("setup", "claude", "--install").code == 0
    start_hook = installed(project, "claude")["SessionStart"]
    first, second = SID, "7a7a7a7a-2222-4000-8000-000000000002"
    for sid in (first, second):
        body = payload("SessionStart", sid, folder / f"{sid}.jsonl", project, source="startup")
        assert hook(start_hook, project, body).returncode == 0
    small_work(project, folder, first, "lexer.py")
    small_work(project, folder, second, "docs.md")
    third = "3c3c3c3c-3333-4000-8000-000000000003"
    body = payload("SessionStart", third, folder / f"{third}.jsonl", project, source="startup")
    done = hook(start_hook, project, body)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    block = done.stdout.split("## Last session (captured by stm)")[1].split("\n## ")[0]
    assert "- From claude session 7a7a7a7a," in block and '- Last message: "docs.md' in block
    assert "- Also captured: claude session 2fc9b73b," in block
    log = log_text(project)
    assert "lexer.py half done" in log and "docs.md half done" in log
    # The next start has nothing new to log.
    fourth = "4d4d4d4d-4444-4000-8000-000000000004"
    body = payload("SessionStart", fourth, folder / f"{fourth}.jsonl", project, source="startup")
    assert hook(start_hook, project, body).returncode == 0
    assert log_text(project).count("Captured by stm") == 2
