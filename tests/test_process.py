"""Process-level behaviour: the script, the installed command, pipes, signals, locks."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time

import pytest
from conftest import STM_PY, snapshot
from helpers import run_stm

import stm


def init_filled(path):
    assert run_stm("init", cwd=path, env={"STM_FSYNC": "0"}).returncode == 0
    (path / ".stacks" / "AGENT.md").write_text("# Me\n\nA builder.\n")
    (path / ".stacks" / "MEMORY.md").write_text("# Memory\n\n## Status\n\nBusy.\n")


def test_script_version_and_boot(tmp_path):
    result = run_stm("--version")
    assert result.returncode == 0 and result.stdout == f"stm {stm.__version__}\n"
    init_filled(tmp_path)
    boot = run_stm("boot", cwd=tmp_path)
    assert boot.returncode == 0 and "A builder." in boot.stdout and boot.stderr == ""


def test_installed_stm_command_runs_this_file(tmp_path):
    # The console script pip installed for this interpreter (PATH may not list it yet).
    exe = os.path.join(sysconfig.get_path("scripts"), "stm")
    exe = exe if os.path.exists(exe) else shutil.which("stm")
    if not exe:
        pytest.skip("the `stm` command is not installed (`python3 -m pip install -e '.[dev]'`)")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert version.stdout == f"stm {stm.__version__}\n"
    init = subprocess.run([exe, "init"], cwd=tmp_path, capture_output=True, text=True)
    assert init.returncode == 0, init.stderr
    log = subprocess.run([exe, "log", "via the command"], cwd=tmp_path)
    assert log.returncode == 0
    check = subprocess.run([exe, "check", "--strict"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 1  # the templates are not filled in yet: a warning
    assert "identity-template" in check.stdout
    hint = subprocess.run(
        [exe, "session", "switch", "zzzz"], cwd=tmp_path, capture_output=True, text=True
    )
    assert "see `stm session switch --help`" in hint.stderr  # hints name the command as run


def test_closed_stdout_ends_quietly(tmp_path):
    init_filled(tmp_path)
    for n in range(400):  # far more than a pipe buffer of boot output
        (tmp_path / ".stacks" / "refs" / f"r{n:03}.md").write_text(f"# Ref {n}\n\n{'x ' * 150}\n")
    proc = subprocess.Popen(
        [sys.executable, str(STM_PY), "boot"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.wait(timeout=30)
    assert first.startswith(b"# stm memory boot")
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert proc.returncode == 0


def hold_lock(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()} testhost 2026-11-22T00:00:00Z\n".encode())
    return fd


def test_lock_timeout_exits_75_naming_the_holder(tmp_path):
    init_filled(tmp_path)
    fd = hold_lock(tmp_path / ".stacks" / ".stm.lock")
    try:
        before = snapshot(tmp_path)
        result = run_stm("log", "blocked", cwd=tmp_path, env={"STM_LOCK_TIMEOUT": "0.3"})
    finally:
        os.close(fd)
    assert result.returncode == 75
    assert f"pid {os.getpid()} on host testhost" in result.stderr
    assert "STM_LOCK_TIMEOUT" in result.stderr
    assert snapshot(tmp_path) == before


def test_lock_of_a_killed_holder_is_free_at_once(tmp_path):
    init_filled(tmp_path)
    lock = tmp_path / ".stacks" / ".stm.lock"
    code = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert holder.stdout.readline() == b"locked\n"
    holder.kill()
    holder.wait()
    holder.stdout.close()
    result = run_stm("log", "after the kill", cwd=tmp_path, env={"STM_LOCK_TIMEOUT": "1"})
    assert result.returncode == 0, result.stderr


def wait_until_open(proc, path, timeout=30):
    """Until `proc` has `path` open (it is then inside the lock wait, its handlers in).

    A fixed sleep is not enough on a loaded CI machine: a signal that arrives while the
    interpreter is still starting finds Python's own handlers."""
    fds = f"/proc/{proc.pid}/fd"
    if not os.path.isdir(fds):  # no /proc: give it time instead
        time.sleep(2)
        return
    target = os.path.realpath(path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in os.listdir(fds):
            try:
                if os.readlink(os.path.join(fds, name)) == target:
                    time.sleep(0.05)  # from open to the first flock attempt
                    return
            except OSError:
                pass  # closed meanwhile
        time.sleep(0.01)
    raise AssertionError(f"{proc.args} never opened {path}")


def signal_while_waiting(tmp_path, signum):
    init_filled(tmp_path)
    fd = hold_lock(tmp_path / ".stacks" / ".stm.lock")
    try:
        before = snapshot(tmp_path)
        proc = subprocess.Popen(
            [sys.executable, str(STM_PY), "log", "never written"],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            env={**os.environ, "STM_LOCK_TIMEOUT": "30"},
        )
        wait_until_open(proc, tmp_path / ".stacks" / ".stm.lock")
        proc.send_signal(signum)
        err = proc.communicate(timeout=30)[1].decode()
    finally:
        os.close(fd)
    assert snapshot(tmp_path) == before
    return proc.returncode, err


def test_sigterm_exits_143_and_leaves_nothing(tmp_path):
    code, err = signal_while_waiting(tmp_path, signal.SIGTERM)
    assert code == 143
    assert "terminated" in err and "Traceback" not in err


def test_ctrl_c_exits_130_and_leaves_nothing(tmp_path):
    code, err = signal_while_waiting(tmp_path, signal.SIGINT)
    assert code == 130
    assert "interrupted" in err and "Traceback" not in err


def test_a_signal_whose_exception_was_swallowed_still_sets_the_exit_code(store, run, monkeypatch):
    """A handler's exception raised inside a finaliser is swallowed by Python; the
    recorded signal still makes main exit 143 (found by the signals-during-writes test:
    a worker kept running after SIGTERM)."""

    real_store_from_args = stm.store_from_args

    def swallowing_store_from_args(args, **kwargs):  # the first thing boot does
        with contextlib.suppress(BaseException):
            stm._on_signal(signal.SIGTERM, None)  # as if SIGTERM arrived in a __del__
        return real_store_from_args(args, **kwargs)

    monkeypatch.setattr(stm, "store_from_args", swallowing_store_from_args)
    result = run("boot")
    assert result.code == 143
    assert "terminated" in result.err


def test_a_ctrl_c_lost_while_the_command_line_is_parsed_still_exits_130(store, run, monkeypatch):
    """CPython can drop the exception a handler raises when a C call fails right after
    it (seen: `int("")` inside argparse's formatter). Before the handlers were installed
    first thing, such a Ctrl-C went to Python's own handler and was lost: the command
    ran on, and a test worker looped forever."""
    real_build_parser = stm.build_parser

    def losing_build_parser(*args):
        with contextlib.suppress(KeyboardInterrupt):  # the lost exception
            signal.raise_signal(signal.SIGINT)
        return real_build_parser(*args)

    monkeypatch.setattr(stm, "build_parser", losing_build_parser)
    before = snapshot(store)
    result = run("log", "never written")
    assert result.code == 130
    assert result.err == "stm: interrupted; nothing half-written was left behind\n"
    assert snapshot(store) == before


def test_an_error_after_a_lost_signal_reports_the_signal_only(store, run, monkeypatch):
    def failing_store_from_args(args, **kwargs):  # the first thing boot does
        with contextlib.suppress(BaseException):
            signal.raise_signal(signal.SIGTERM)
        raise stm.StmError("a lock wait that the signal cut short")

    monkeypatch.setattr(stm, "store_from_args", failing_store_from_args)
    result = run("boot")
    assert result.code == 143
    assert result.err == "stm: terminated; nothing half-written was left behind\n"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers put back


def test_restoring_a_handler_set_outside_python_is_skipped(monkeypatch):
    """signal.signal() returns None for a handler a host program installed in C; putting
    None back would raise TypeError out of main's cleanup."""
    monkeypatch.setitem(stm._signals, "previous", {signal.SIGUSR2: None})
    before = signal.getsignal(signal.SIGUSR2)
    stm.restore_signal_handlers()
    assert stm._signals["previous"] == {}
    assert signal.getsignal(signal.SIGUSR2) == before
