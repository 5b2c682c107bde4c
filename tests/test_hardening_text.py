"""Hardening, second pass: text in memory is data, never an instruction to stm.

Issue 22, items 1, 2, 4, 8, 12, 13, 14 and 15: compaction's bookkeeping cannot be forged
by log text and names paths inside .stacks/ only; a compact or `fact rm` that fails
leaves the tree as it was; a merged history is validated before it is replayed, and the
replay can be interrupted at any write; an unreadable folder does not stop boot;
`note --ref` writes only refs the readers read. Each test states the guarantee as
behaviour (exit code, bytes on disk, what is printed); failures are injected by
patching stm's `os`, kills happen in real processes.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import pytest
from conftest import IDENTITY, MEMORY, ROOT, Result, snapshot

import stm

PROC_ENV = {**os.environ, "STM_FSYNC": "0", "PYTHONDONTWRITEBYTECODE": "1", "USER": "tester"}
for _name in ("STM_USER", "STM_SESSION", "STM_LOCK_TIMEOUT"):
    PROC_ENV.pop(_name, None)

AGENT = ".stacks/AGENT.md"
MEMORY_MD = ".stacks/MEMORY.md"


# ---- helpers ---------------------------------------------------------------------------


@pytest.fixture
def call(capsys):
    """stm.main in-process; an exception escaping main (a traceback for a user) comes
    back as code None with the exception in `err`."""

    def runner(*argv: str, stdin: str | None = None) -> Result:
        old = sys.stdin
        if stdin is not None:
            sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
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


def ok(result: Result) -> Result:
    assert result.code == 0, result
    return result


def findings(call, *args) -> list[dict]:
    result = call("check", "--json", *args)
    assert result.code in (0, 1), result
    return json.loads(result.out)["findings"]


def rules(found: list[dict]) -> list[str]:
    return [f["rule"] for f in found]


def read(root: Path, rel: str) -> str:
    return (root / rel).read_text()


def log_text(root: Path) -> str:
    return "".join(p.read_text() for p in sorted((root / ".stacks" / "logs").glob("*.md")))


class FaultyOS:
    """Stands in for `os` inside stm: the Nth call to a write-path function fails."""

    WRAPPED = {"open", "write", "fsync", "replace", "rename", "ftruncate", "mkdir", "fchmod"}
    NAMED = {"open", "replace", "rename", "mkdir"}  # the calls that name their path

    def __init__(self, real, fail_at: int, error: int):
        self._real, self.fail_at, self.error, self.calls = real, fail_at, error, 0

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name not in self.WRAPPED:
            return attr

        def wrapper(*args, **kwargs):
            self.calls += 1
            if self.calls == self.fail_at:
                message = os.strerror(self.error) + " (injected)"
                if name in self.NAMED and isinstance(args[0], str):  # as the real call says
                    raise OSError(self.error, message, args[0])
                raise OSError(self.error, message)
            return attr(*args, **kwargs)

        return wrapper


class OpenGuard:
    """Stands in for `os` inside stm: opening (or listing) anything outside `root` fails
    the test at once, before a byte is read."""

    def __init__(self, real, root: Path):
        self._real, self.root, self.outside = real, os.path.realpath(root), []

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name not in ("open", "scandir", "listdir", "stat", "lstat"):
            return attr

        def wrapper(path=".", *args, **kwargs):
            if isinstance(path, (str, bytes, os.PathLike)):
                real = os.path.realpath(os.path.abspath(os.fsdecode(path)))
                if real != self.root and not real.startswith(self.root + os.sep):
                    self.outside.append(real)
                    raise PermissionError(errno.EACCES, "outside the project (test guard)", path)
            return attr(path, *args, **kwargs)

        return wrapper


KILL_AT_WRITE = """\
import os, sys
sys.path.insert(0, {root!r})
import stm
survive = int(sys.argv[1])  # die at atomic write number N, before it happens
calls = []
real = stm.atomic_write
def atomic_write(*args, **kwargs):
    calls.append(args[0])
    if len(calls) == survive:
        os._exit(137)
    return real(*args, **kwargs)
stm.atomic_write = atomic_write
sys.exit(stm.main(sys.argv[2:]))
"""


def killed_at_write(root: Path, aux: Path, n: int, *argv: str) -> subprocess.CompletedProcess:
    """Run stm in a real process that dies (SIGKILL-like, no cleanup) at its Nth
    atomic write."""
    script = aux / "kill_at_write.py"
    script.write_text(KILL_AT_WRITE.format(root=str(ROOT)))
    return subprocess.run(
        [sys.executable, str(script), str(n), *argv],
        cwd=root,
        env=PROC_ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def aux(tmp_path_factory):
    """A folder outside the project, for scripts and reference copies."""
    return tmp_path_factory.mktemp("aux")


# ---- 8. an unreadable folder does not stop boot -----------------------------------------


class Unprivileged:
    """Drop to nobody when root (root ignores file modes), restore afterwards."""

    def __enter__(self):
        self.was_root = os.geteuid() == 0
        if self.was_root:
            os.setegid(65534)
            os.seteuid(65534)
        return self

    def __exit__(self, *exc):
        if self.was_root:
            os.seteuid(0)
            os.setegid(0)
        return False


@pytest.fixture
def shared_store(run, monkeypatch):
    """A store in a folder 'nobody' can reach (pytest's own tmp is private to root), with
    a current session and two refs, one in a sub-folder."""
    root = Path(tempfile.mkdtemp(prefix="stm-perm-", dir="/tmp"))
    os.chmod(root, 0o755)
    monkeypatch.chdir(root)
    assert run("init").code == 0
    (root / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (root / ".stacks" / "MEMORY.md").write_text(MEMORY)
    (root / ".stacks" / "refs" / "guide.md").write_text("# Guide\n\nHow it works.\n")
    (root / ".stacks" / "refs" / "sub").mkdir()
    (root / ".stacks" / "refs" / "sub" / "deep.md").write_text("# Deep\n\nBelow.\n")
    (root / ".stacks" / "refs" / "zz.md").write_text("# Last\n\nAfter sub.\n")
    assert run("session", "new", "--name", "perm work").code == 0
    yield root
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chmod(os.path.join(dirpath, name), 0o755, follow_symlinks=False)
    shutil.rmtree(root)


@pytest.mark.parametrize(
    ("folder", "pointer"),
    [
        (".stacks/refs", True),
        (".stacks/refs/sub", True),
        (".state/sessions", True),
        (".state/sessions", False),
        (".state/sessions/2*", True),
    ],
)
def test_boot_prints_the_rest_when_a_folder_is_unreadable(shared_store, call, folder, pointer):
    """Issue 22, 8: chmod 000 on refs/, a refs sub-folder, sessions/ (with a current
    session or without) or the current session's folder: boot exits 0 with identity and
    memory, a placeholder where the folder's part would be, and a warning naming it."""
    root = shared_store
    if not pointer:
        (root / ".state" / "current-session.json").unlink()
    [target] = root.glob(folder)
    os.chmod(target, 0)
    with Unprivileged():
        boot = call("boot")
    os.chmod(target, 0o755)
    assert boot.code == 0, boot
    assert "Traceback" not in boot.err
    assert "Maintainer of the parser project" in boot.out  # identity
    assert "Parser port half done" in boot.out  # session memory
    shown = os.path.relpath(target, root)
    assert "Permission denied" in boot.err and shown in boot.err, boot
    if folder != ".state/sessions/2*":  # a session's own folder: warned, as a bad state is
        assert "unreadable" in boot.out and shown.split("/", 1)[1] in boot.out, boot
    if folder == ".stacks/refs/sub":
        assert "refs/guide.md" in boot.out and "refs/zz.md" in boot.out  # the rest is listed


# ---- 14. note --ref writes only what the readers read ---------------------------------------


def ref_folders(n: int) -> str:
    return "/".join(f"d{i}" for i in range(n))


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        (ref_folders(stm.REFS_DEPTH_MAX + 1) + "/x", "deep"),
        (ref_folders(20) + "/x", "deep"),
        (".hidden", "hidden"),
        ("sub/.hidden", "hidden"),
        (".sub/visible", "hidden"),
        ("refs/.hidden.md", "hidden"),
    ],
)
def test_note_ref_refuses_a_path_the_readers_would_not_read(store, call, name, reason):
    before = snapshot(store)
    result = call("note", "--ref", name, "Sec", "hello", "--create")
    assert result.code == 2, result
    assert "--ref" in result.err and reason in result.err, result
    assert len(result.err.strip().splitlines()) == 1, result
    assert snapshot(store) == before


def test_note_ref_at_the_depth_limit_is_read_by_every_reader(store, call):
    name = ref_folders(stm.REFS_DEPTH_MAX) + "/bottom"
    ok(call("note", "--ref", name, "Sec", "quokka at the bottom", "--create"))
    assert "quokka at the bottom" in ok(call("search", "quokka")).out
    assert f"refs/{name}.md" in ok(call("boot")).out
    assert [f for f in findings(call) if f["severity"] == "error"] == []


def test_readers_skip_a_too_deep_refs_folder_with_the_reason(store, call):
    """The readers and the writer share one rule; a tree made deeper by hand is reported
    by check as too deep (not as a link), and boot and digest do not call it a FIFO."""
    deep = store / ".stacks" / "refs" / ref_folders(20)
    deep.mkdir(parents=True)
    (deep / "x.md").write_text("# X\n\nquokka\n")
    boot = ok(call("boot"))
    assert "FIFO" not in boot.err and "not a regular file" not in boot.err, boot
    digest = call("digest")
    assert digest.code == 0, digest
    found = [f for f in findings(call) if f["path"].startswith(".stacks/refs/d0")]
    assert found and all(f["rule"] != "layer-symlink" for f in found), found
    assert all("deep" in f["message"] for f in found), found
