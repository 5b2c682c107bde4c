"""Shared fixtures: a temporary project, an in-process runner, tree snapshots."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import stm  # noqa: E402

STM_PY = ROOT / "stm.py"

# The run's clock. `STM_TESTS_CLOCK_DAYS=365 python3 -m pytest -m 'not file_times'` moves
# it a year ahead for stm in this process (stm reads time through stm.utc_now alone) and
# in every Python process the tests start (a sitecustomize shim on PYTHONPATH), so a test
# that only passes near the day it was written shows up today. File modification times
# come from the kernel and do not move: tests that need them to agree with the clock are
# marked `file_times`.
CLOCK_SHIFT_S = float(os.environ.get("STM_TESTS_CLOCK_DAYS") or 0) * 86400


def clock() -> float:
    return time.time() + CLOCK_SHIFT_S


# Today by that clock: fixed dates in test data age, and boot announces a memory more
# than a week old at the top of its output.
TODAY = time.strftime("%Y-%m-%d", time.gmtime(clock()))

IDENTITY = """\
# Agent Identity

## Role

Maintainer of the parser project: keeps the build green and the docs honest.

## Principles

Small commits; tests before features.

## Conventions

Python 3.9+, pytest, ruff.
"""

MEMORY = f"""\
# Session Memory

## Status

Parser port half done; the lexer passes its tests.

## Observations

The old grammar has two precedence bugs.

## Open Questions

None yet.

## Next Steps

Port the expression grammar.

## Last Updated

{TODAY}
"""


class Result:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def __repr__(self) -> str:  # shown by pytest when an assertion fails
        return f"Result(code={self.code}, out={self.out!r}, err={self.err!r})"


@pytest.fixture(autouse=True, scope="session")
def moved_clock(tmp_path_factory):
    """With STM_TESTS_CLOCK_DAYS set: every Python process the tests start reads the
    moved clock too (time.time, which stm.utc_now calls)."""
    if not CLOCK_SHIFT_S:
        yield
        return
    shim = tmp_path_factory.mktemp("clock-shim")
    (shim / "sitecustomize.py").write_text(
        "import time\n_real_time = time.time\n"
        f"time.time = lambda: _real_time() + {CLOCK_SHIFT_S!r}\n"
    )
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), saved) if p)
    real_utc_now, stm.utc_now = stm.utc_now, clock  # for module-scoped fixtures too
    yield
    stm.utc_now = real_utc_now
    if saved is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved


@pytest.fixture(autouse=True)
def quiet_env(monkeypatch):
    """No fsync (speed), a fixed author, and no user namespace unless a test asks. The
    runner's own environment never leaks in: CI sets `CI`, which silences the notices
    that only make sense where an agent starts, and a developer may have STM_* set."""
    monkeypatch.setenv("STM_FSYNC", "0")
    monkeypatch.setenv("USER", "tester")
    for name in ("CI", "STM_USER", "STM_LOCK_TIMEOUT", "STM_SESSION", "STM_SYNC_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty project folder that is the current directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def run(capsys):
    """Run stm in-process: run("boot", "--no-refs") -> Result(code, out, err)."""

    def runner(*argv: str, stdin: str | bytes | None = None, monkeypatch=None) -> Result:
        if stdin is not None:
            import io

            data = stdin.encode() if isinstance(stdin, str) else stdin
            fake = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
            old = sys.stdin
            sys.stdin = fake
            try:
                code = stm.main(list(argv))
            finally:
                sys.stdin = old
        else:
            code = stm.main(list(argv))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return runner


@pytest.fixture
def call(capsys):
    """stm.main in-process, like `run`, but an exception escaping main (a traceback for a
    user) is returned as code None with the exception in `err`, so a test can report
    every command that failed, not just the first."""

    def runner(*argv: str, stdin: str | bytes | None = None) -> Result:
        import io
        import traceback

        old = sys.stdin
        if stdin is not None:
            data = stdin.encode() if isinstance(stdin, str) else stdin
            sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
        crash = ""
        try:
            code = stm.main(list(argv))
        except BaseException as exc:
            code = None
            crash = "Traceback (in-process): " + "".join(
                traceback.format_exception_only(type(exc), exc)
            )
        finally:
            sys.stdin = old
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err + crash)

    return runner


@pytest.fixture
def aux(tmp_path_factory):
    """A folder outside the project, for scripts and reference copies."""
    return tmp_path_factory.mktemp("aux")


@pytest.fixture
def store(project, run):
    """An initialised project whose identity and session layers are filled in."""
    assert run("init").code == 0
    (project / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (project / ".stacks" / "MEMORY.md").write_text(MEMORY)
    return project


@pytest.fixture
def world(tmp_path, run, monkeypatch):
    """A bare origin and its clones (helpers.World, built by helpers.driver_world): the
    real git with a private configuration, stm in-process with a clock that starts at
    the run's now and moves one minute per command, the merge driver run by this Python
    in the clones that install it, and no `stm` on PATH."""
    from helpers import driver_world

    return driver_world(tmp_path, run, monkeypatch)


def snapshot(root: Path) -> dict:
    """Every file and folder under root with its content hash: for 'tree unchanged'."""
    tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            tree[os.path.relpath(os.path.join(dirpath, name), root) + "/"] = "dir"
        for name in filenames:
            path = os.path.join(dirpath, name)
            if name == ".stm.lock":
                continue  # the lock file holds the last holder's pid; not memory
            if os.path.islink(path):
                tree[os.path.relpath(path, root)] = "link:" + os.readlink(path)
                continue
            if not os.path.isfile(path):  # a FIFO or socket another test left: never open it
                tree[os.path.relpath(path, root)] = f"special:{os.lstat(path).st_mode:o}"
                continue
            with open(path, "rb") as f:
                tree[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return tree


def all_command_paths():
    parser = stm.build_parser()
    paths = []

    def walk(p, prefix):
        for action in p._actions:
            if action.__class__.__name__ == "_SubParsersAction":
                for name, sub in action.choices.items():
                    paths.append(prefix + [name])
                    walk(sub, prefix + [name])

    walk(parser, [])
    return paths
