"""Guarantees of spec/reliability.md: concurrency, crashes, signals, faults, full disks.

Process-level tests use real processes (tests/workers.py loops over stm.main in-process,
so many operations fit in one process start).
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from conftest import IDENTITY, MEMORY, ROOT, STM_PY, snapshot
from helpers import FaultyOS, Unprivileged, limited

import stm

WORKERS = ROOT / "tests" / "workers.py"
ENV = {**os.environ, "STM_FSYNC": "0", "PYTHONDONTWRITEBYTECODE": "1"}


def worker(*args, stdout=subprocess.PIPE):
    return subprocess.Popen(
        [sys.executable, "-S", str(WORKERS), *map(str, args)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=ENV,
    )


def finish(procs, timeout=120):
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        results.append((proc.returncode, out.decode() if out else "", err.decode()))
    return results


def all_entries(store):
    """Every log entry of every file, in file order: (file, LogEntry)."""
    entries = []
    for path in sorted((store / ".stacks" / "logs").glob("*.md")):
        with open(path, "rb") as f:
            for kind, *rest in stm.parse_log(f.read()):
                assert kind == "entry", (path, rest)
                entries.append((path.name, rest[0]))
    return entries


def new_session(run):
    result = run("session", "new", "--name", "shared")
    assert result.code == 0
    return result.out.strip()


def session_path(store, sid):
    return store / ".state" / "sessions" / sid


def no_temp_files(root):
    leftovers = []
    for _dirpath, dirnames, filenames in os.walk(root):
        leftovers += [n for n in filenames if n.endswith(".tmp")]
        leftovers += [n for n in dirnames if n.endswith(".building")]
    return leftovers


# ---- 2. appends: none lost, duplicated, torn or interleaved ---------------------


def check_writers(store, writers, count):
    entries = all_entries(store)
    assert len(entries) == writers * count
    seen = {}
    for _, entry in entries:
        assert entry.complete
        first = entry.body[1]
        _, w, _, n = first.split()
        assert entry.body == [
            "",
            f"writer {w} entry {n}",
            f"second line {w}-{n}",
            f"third line {w}-{n}",
            "",
        ]  # contiguous: no other writer's bytes inside
        seen.setdefault(w, []).append(int(n))
    for w in range(writers):
        assert seen[str(w)] == list(range(count))  # each exactly once, in order


def test_8_processes_x_200_log_calls_lose_nothing(store):
    procs = [worker("log", store, w, 200) for w in range(8)]
    for code, _, err in finish(procs):
        assert code == 0, err
    check_writers(store, 8, 200)


def test_8_processes_x_500_direct_appends_lose_nothing(store):
    procs = [worker("append", store, w, 500) for w in range(8)]
    for code, _, err in finish(procs):
        assert code == 0, err
    check_writers(store, 8, 500)


# ---- 3. read-modify-write loses no update ---------------------------------------


def test_8_processes_x_50_state_updates_lose_nothing(store, run):
    sid = new_session(run)
    procs = [worker("update", store, sid, w, 50) for w in range(8)]
    for code, _, err in finish(procs):
        assert code == 0, err
    state = json.loads((session_path(store, sid) / "state.json").read_text())
    assert state["version"] == 1 + 400
    events = [
        json.loads(line)
        for line in (session_path(store, sid) / "history.jsonl").read_text().splitlines()
    ]
    assert len(events) == 401
    assert sorted(e["version"] for e in events) == list(range(1, 402))
    assert run("check").code == 0


# ---- readers during writes --------------------------------------------------------


def test_readers_never_see_a_partial_write(store, run):
    sid = new_session(run)
    writers = [worker("update", store, sid, "w", 150), worker("log", store, "x", 150)]
    readers = [worker("read", store, sid, 45) for _ in range(4)]
    for code, out, err in finish(readers + writers):
        assert code == 0, err
        if out.strip():
            assert out.strip() == "0", "a reader saw a failure or a partial read"


# ---- 200 random SIGKILLs ---------------------------------------------------------


def assert_everything_parses(store):
    boot = store / "boot.md"
    if boot.exists():
        text = boot.read_text()
        assert text.startswith("# stm memory boot") and text.endswith("`stm log`.\n")
    for state_file in (store / ".state").rglob("state.json"):
        assert isinstance(json.loads(state_file.read_text())["version"], int)
    json.loads((store / ".state" / "current-session.json").read_text())
    for history in (store / ".state").rglob("history.jsonl"):
        lines = history.read_bytes().split(b"\n")
        for line in lines[:-1]:
            json.loads(line)  # only the unterminated tail may be torn
    for path in (store / ".stacks" / "logs").glob("*.md"):
        with open(path, "rb") as f:
            items = list(stm.parse_log(f.read()))
        assert all(kind == "entry" for kind, *_ in items)
        assert all(rest[0].complete for _, *rest in items[:-1])


def test_200_random_sigkills_leave_only_old_or_new_content(store, run):
    new_session(run)
    rng = random.Random(20261122)
    for n in range(200):
        proc = worker("chaos", store, n)
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0, 0.04))
        proc.kill()
        proc.communicate()
        assert_everything_parses(store)
    result = run("check", "--json")
    data = json.loads(result.out)
    assert result.code == 0, data
    leftovers = {"temp-file", "log-torn", "history-torn", "history-behind"}
    assert {f["rule"] for f in data["findings"]} <= leftovers
    fixed = run("check", "--fix")
    assert fixed.code == 0
    strict = run("check", "--strict")
    assert strict.code == 0, strict.out


def test_a_writer_killed_between_state_and_event_is_found_and_recorded(store, run):
    sid = new_session(run)
    proc = worker("kill-before-event", store, sid)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    state = json.loads((session_path(store, sid) / "state.json").read_text())
    assert state["version"] == 2 and state["checkpoint"]["last_completed_step"] == "x"
    result = run("check", "--json")
    assert result.code == 0
    assert [f["rule"] for f in json.loads(result.out)["findings"]] == ["history-behind"]
    assert run("check", "--fix").code == 0
    history = (session_path(store, sid) / "history.jsonl").read_text().splitlines()
    last = json.loads(history[-1])
    assert (last["event"], last["version"], last["from_version"]) == ("recovered", 2, 1)
    assert run("check", "--strict").code == 0


# ---- 8. SIGTERM and Ctrl-C during writes ------------------------------------------


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signals_during_writes_leave_no_temp_file_and_no_torn_record(store, run, signum, code):
    new_session(run)
    rng = random.Random(signum)
    codes = set()
    for n in range(25):
        proc = worker("chaos-commands", store, n)
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.005, 0.04))
        proc.send_signal(signum)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            proc.kill()
            raise AssertionError(proc.communicate()[1].decode()) from None
        assert "Traceback" not in err.decode() or proc.returncode != code
        codes.add(proc.returncode)
        assert no_temp_files(store) == []
        assert_everything_parses(store)
    assert code in codes  # most signals land inside a command
    strict = run("check", "--strict")
    assert strict.code == 0, strict.out


# A SIGTERM that lands after an append has written its record (as os.close returns, or as
# the append returns) but before the command's last step: the whole command is undone, the
# record included. Before, the record stayed while state.json went back: two events at one
# version, and check failed.
SIGNALLED_AFTER_APPEND = {
    "checkpoint": ["session", "checkpoint", "--done", "a", "--pending", "b"],
    "phase": ["session", "phase", "build"],
    "archive": ["session", "archive"],
    "fact rm": ["fact", "rm", "editor", "--why", "moved on"],
    "compact": ["compact"],
    "compose-handoff": ["compose-handoff", str(ROOT / "spec" / "handoff-example.json")],
}


@pytest.mark.parametrize("operation", sorted(SIGNALLED_AFTER_APPEND))
def test_a_signal_right_after_an_append_undoes_the_whole_command(
    tmp_path, monkeypatch, capsys, operation
):
    def prepared(name: str):
        root = prepared_store(tmp_path, name)
        assert stm.main(["fact", "set", "editor", "vim"]) == 0
        memory = root / ".stacks" / "MEMORY.md"
        steps = "".join(f"- step {n}\n" for n in range(13, 0, -1))  # over the limit of 10
        memory.write_text(memory.read_text().replace("Port the expression grammar.\n", steps))
        capsys.readouterr()
        return root

    original = stm.append_record
    appended = []

    def append_then_terminated(*args, **kwargs):
        original(*args, **kwargs)
        appended.append(args[0])
        if len(appended) == signal_at:
            raise stm.Terminated()

    def command() -> int:
        appended.clear()
        monkeypatch.setattr(stm, "append_record", append_then_terminated)
        try:
            return stm.main(SIGNALLED_AFTER_APPEND[operation])
        finally:
            monkeypatch.setattr(stm, "append_record", original)

    signal_at = 0  # first, how many appends the command makes
    prepared("count")
    assert command() == 0
    count = len(appended)
    assert count, "the command appended nothing: the test reached no append"
    for signal_at in range(1, count + 1):  # then a signal after each of them in turn
        root = prepared(f"after-append-{signal_at}")
        before = snapshot(root)
        code = command()
        assert code == 143, (signal_at, capsys.readouterr().err)
        assert snapshot(root) == before, f"append {signal_at} of {count} was left behind"
        assert stm.main(["check"]) == 0, capsys.readouterr().out  # no error (compact: a warning)


# ---- 1, 5. injected faults at every step of the write protocol ---------------------


HANDOFF = str(ROOT / "spec" / "handoff-example.json")
OPERATIONS = {
    "log": ["log", "an entry"],
    "session new": ["session", "new", "--name", "x", "--user", "ann"],
    "checkpoint": ["session", "checkpoint", "--done", "a", "--pending", "b"],
    "phase": ["session", "phase", "build"],
    "archive": ["session", "archive"],
    "compose-handoff": ["compose-handoff", HANDOFF],
}


def prepared_store(tmp_path, name):
    root = tmp_path / name
    root.mkdir()
    os.chdir(root)
    assert stm.main(["init"]) == 0
    (root / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (root / ".stacks" / "MEMORY.md").write_text(MEMORY)
    assert stm.main(["session", "new"]) == 0
    return root


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_fault_at_any_step_leaves_the_tree_as_it_was(
    tmp_path, monkeypatch, capsys, operation, error
):
    monkeypatch.setenv("STM_FSYNC", "1")  # fsync steps are part of the protocol
    argv = OPERATIONS[operation]
    prepared_store(tmp_path, "count")
    counter = FaultyOS(os, 0, error)
    monkeypatch.setattr(stm, "os", counter)
    assert stm.main(argv) == 0
    monkeypatch.setattr(stm, "os", os)
    steps = counter.calls
    assert steps >= 5
    capsys.readouterr()
    for step in range(1, steps + 1):
        root = prepared_store(tmp_path, f"step{step}")
        capsys.readouterr()
        before = snapshot(root)
        monkeypatch.setattr(stm, "os", FaultyOS(os, step, error))
        code = stm.main(argv)
        monkeypatch.setattr(stm, "os", os)
        err = capsys.readouterr().err
        assert code == 1, (step, err)
        assert "(injected)" in err and "Traceback" not in err
        assert snapshot(root) == before, f"step {step} of {steps} changed the tree"
        assert no_temp_files(root) == []


def test_atomic_write_gives_old_or_new_at_every_failing_step(tmp_path, monkeypatch):
    monkeypatch.setenv("STM_FSYNC", "1")
    target = tmp_path / "file.md"
    for step in range(1, 9):
        target.write_bytes(b"old content\n")
        monkeypatch.setattr(stm, "os", FaultyOS(os, step, errno.EIO))
        try:
            stm.atomic_write(str(target), b"new content\n")
            failed = False
        except OSError:
            failed = True
        monkeypatch.setattr(stm, "os", os)
        assert target.read_bytes() in (b"old content\n", b"new content\n")
        if failed and step <= 4:  # before the rename: the old content survives
            assert target.read_bytes() == b"old content\n"
        assert sorted(os.listdir(tmp_path)) == ["file.md"]


# ---- file too big (RLIMIT_FSIZE) --------------------------------------------------


def test_file_too_big_on_append_is_a_clear_error_and_changes_nothing(store, run):
    run("log", "small first entry")
    before = snapshot(store)
    message = "x" * 200_000
    result = subprocess.run(
        [sys.executable, str(STM_PY), "log", "-"],
        cwd=store,
        input=message.encode(),
        capture_output=True,
        env=ENV,
        preexec_fn=limited(64 * 1024),
    )
    err = result.stderr.decode()
    assert result.returncode == 1
    assert "File too large" in err and "Traceback" not in err
    assert snapshot(store) == before


def test_file_too_big_on_atomic_write_keeps_the_target(store, run):
    for n in range(300):
        (store / ".stacks" / "refs" / f"r{n}.md").write_text(f"# Ref {n}\n\n{'word ' * 60}\n")
    (store / "boot.md").write_text("old boot\n")
    before = snapshot(store)
    result = subprocess.run(
        [sys.executable, str(STM_PY), "boot", "-o", "boot.md"],
        cwd=store,
        capture_output=True,
        env=ENV,
        preexec_fn=limited(32 * 1024),
    )
    assert result.returncode == 1
    assert "File too large" in result.stderr.decode()
    assert snapshot(store) == before
    assert no_temp_files(store) == []


# ---- permissions --------------------------------------------------------------------


@pytest.fixture
def shared_store(run, monkeypatch):
    """A store in a folder 'nobody' can reach (pytest's own tmp is private to root)."""
    import shutil
    import tempfile

    root = tempfile.mkdtemp(prefix="stm-perm-", dir="/tmp")
    os.chmod(root, 0o755)
    monkeypatch.chdir(root)
    assert run("init").code == 0
    from pathlib import Path

    root = Path(root)
    (root / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (root / ".stacks" / "MEMORY.md").write_text(MEMORY)
    assert run("session", "new").code == 0
    yield root
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chmod(os.path.join(dirpath, name), 0o755, follow_symlinks=False)
    shutil.rmtree(root)


def read_only(root):
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o444)
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o555)


def test_read_only_store_refuses_writes_clearly_and_still_boots(shared_store, run):
    read_only(shared_store)
    before = snapshot(shared_store)
    with Unprivileged():
        log = run("log", "x")
        new = run("session", "new")
        check = run("session", "checkpoint", "--done", "a")
        boot = run("boot")
        status = run("status")
    for result in (log, new, check):
        assert result.code == 1, result
        assert "Permission denied" in result.err and "Traceback" not in result.err
        assert ".stm.lock" in result.err  # names the file it could not open
    assert boot.code == 0 and "Maintainer of the parser project" in boot.out
    assert status.code == 0
    assert snapshot(shared_store) == before


def test_unreadable_layer_is_a_warning_in_boot_and_an_error_in_check(shared_store, run):
    os.chmod(shared_store / ".stacks" / "AGENT.md", 0o000)
    with Unprivileged():
        boot = run("boot")
        check = run("check")
    assert boot.code == 0
    assert "cannot read .stacks/AGENT.md: Permission denied" in boot.err
    assert check.code == 1
    assert "Permission denied" in check.err and "Traceback" not in check.err


# ---- check --fix ---------------------------------------------------------------------


def test_check_fix_repairs_torn_tails_temp_files_and_headings(store, run):
    sid = new_session(run)
    run("log", "good entry")
    log = next((store / ".stacks" / "logs").glob("*.md"))
    good_log = log.read_bytes()
    with open(log, "ab") as f:
        f.write(b"\n## 2026-11-22T10:00:00Z \xc2\xb7 x <!-- stm:entry 0123abcd -->\n\nhal")
    history = store / ".state" / "sessions" / sid / "history.jsonl"
    good_history = history.read_bytes()
    with open(history, "ab") as f:
        f.write(b'{"event": "torn", "time')
    temp = store / ".state" / "sessions" / sid / ".state.json.0a1b2c3d.tmp"
    temp.write_text("{")
    building = store / ".state" / "sessions" / ".2026-11-22-00000000.0a1b2c3d.building"
    building.mkdir()
    memory = store / ".stacks" / "MEMORY.md"
    memory.write_text(memory.read_text().replace("## Next Steps", "## Todo"))

    preview = run("check", "--fix", "--dry-run")
    assert preview.code == 0
    assert "would fix temp-file" in preview.out and "would fix log-torn" in preview.out
    assert temp.exists() and building.exists()  # a dry run changes nothing

    fixed = run("check", "--fix", "--json")
    data = json.loads(fixed.out)
    assert fixed.code == 0
    assert {f["rule"] for f in data["fixed"]} == {
        "temp-file",
        "log-torn",
        "history-torn",
        "heading-missing",
    }
    assert data["findings"] == []
    assert log.read_bytes().rstrip(b"\n") == good_log.rstrip(b"\n")
    assert history.read_bytes() == good_history
    assert not temp.exists() and not building.exists()
    text = memory.read_text()
    assert "## Next Steps\n" in text
    assert text.index("## Next Steps") < text.index("## Last Updated")
    assert run("check", "--strict").code == 0


def test_check_fix_keeps_text_a_person_added_to_a_log(store, run):
    run("log", "entry")
    log = next((store / ".stacks" / "logs").glob("*.md"))
    with open(log, "a") as f:
        f.write("\na line typed by hand\n")
    result = run("check", "--fix")
    assert result.code == 1  # log-entry is an error a person must resolve
    assert "a line typed by hand" in log.read_text()
    assert "log-entry" in result.out


def test_next_update_repairs_a_torn_history_line(store, run):
    sid = new_session(run)
    history = store / ".state" / "sessions" / sid / "history.jsonl"
    with open(history, "ab") as f:
        f.write(b'{"event": "to')
    result = run("session", "phase", "next")
    assert result.code == 0
    assert "torn record" in result.err
    lines = history.read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["created", "phase_change"]
