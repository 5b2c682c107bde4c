"""Hardening: hostile trees, forged text, bad input, interruption at any step, and size.

Each test states one guarantee of the hardening issue as behaviour (exit code, the bytes
on disk, what is printed), never as wording. Rule ids are asserted only where stm already
has the rule (RULES); elsewhere a finding must name the path. Anything that could hang
(FIFOs, devices) runs in a subprocess under a time limit, and a test that failed because
something hung says so.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import io
import json
import os
import re
import shutil
import socket
import stat
import string
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
from conftest import IDENTITY, MEMORY, ROOT, STM_PY, TODAY, Result, snapshot
from helpers import fake_token, findings, run_process, run_stm

import stm

HANDOFF = ROOT / "spec" / "handoff-example.json"
BAIT = "BAIT-7f3c91"  # text only a followed link could bring into stm's output
OLD_SID = "2026-11-01-0badf00d"  # a session id that only the victim folder holds
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


# ---- helpers ---------------------------------------------------------------------------


def quiet(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = stm.main(list(argv))
    return code, out.getvalue()


def new_store(root: Path, handoff: bool = True) -> str | None:
    """An initialised, filled-in store at root/.stacks (+ .state), with a handoff session
    (current) when asked; returns its id."""
    root.mkdir(parents=True, exist_ok=True)
    stacks = str(root / ".stacks")
    assert quiet("--dir", stacks, "init")[0] == 0
    (root / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (root / ".stacks" / "MEMORY.md").write_text(MEMORY)
    if not handoff:
        return None
    code, out = quiet("--dir", stacks, "compose-handoff", str(HANDOFF))
    assert code == 0
    return out.strip()


def session_dir(root: Path, sid: str) -> Path:
    return root / ".state" / "sessions" / sid


def today() -> str:
    return stm.iso(stm.utc_now())[:10]


def tree(root: Path) -> dict:
    """Every entry under root, lock files included, by type, content, inode and change
    time: 'byte-identical, and nothing created in it', even for a write that was later
    undone (a file replaced by rename has a new inode; a folder in which a temp file was
    created and removed has a new mtime). Never opens anything but regular files."""
    found = {".": os.lstat(root).st_mtime_ns}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = "link:" + os.readlink(path)
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", st.st_ino, st.st_mtime_ns)
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                found[rel] = (digest, st.st_ino, st.st_mtime_ns)
            else:
                found[rel] = f"special:{stat.S_IFMT(st.st_mode)}"
    return found


def tree_diff(before: dict, after: dict) -> str:
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    return (
        f"created {sorted(after.keys() - before.keys())}, "
        f"removed {sorted(before.keys() - after.keys())}, changed {changed}"
    )


FORGED_RE = re.compile(r"^\s{0,3}#{1,6}\s*(Injected|Forged)")


def forged(text: str) -> list[str]:
    """Lines (split the way Python, editors and models split them: \\n, \\r, U+2028,
    U+2029, NEL, ...) that would read as a heading an attacker wrote."""
    return [line for line in text.splitlines() if FORGED_RE.match(line)]


def assert_clean_refusal(result: Result, code: int, *names: str) -> None:
    """The documented exit code, one `error` line on stderr (naming one of `names`, when
    given), and no traceback."""
    assert result.code == code, result
    assert "Traceback" not in result.err, result.err
    errors = [line for line in result.err.splitlines() if "error" in line]
    assert len(errors) == 1, result.err
    if names:
        assert any(name in errors[0] for name in names), result.err


# The findings of a `check --json` Result, which must hold no traceback.
findings = functools.partial(findings, no_traceback=True)


def handoff_json(**changes) -> dict:
    data = json.loads(HANDOFF.read_text())
    data.update(changes)
    return data


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def git_file_rules() -> set:
    return {"git-attributes", "git-ignore"}


# ---- a driver for commands that may hang --------------------------------------------------
#
# One process per scenario runs a list of stm commands in-process, each under a SIGALRM
# limit: a command blocked on a FIFO is interrupted and recorded as "hung" instead of
# hanging the suite. Scenarios run in parallel, so the wait is paid once.

DRIVER = """
import contextlib, io, json, os, resource, signal, sys
sys.path.insert(0, ROOT)
import stm

class Hung(BaseException):
    pass

def on_alarm(signum, frame):
    raise Hung()

signal.signal(signal.SIGALRM, on_alarm)
with contextlib.suppress(ValueError, OSError):
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
os.chdir(sys.argv[1])
results = []
for argv in json.loads(sys.argv[2]):
    out, err = io.StringIO(), io.StringIO()
    outcome, code = "ok", None
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, SECONDS)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = stm.main(argv)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Hung:
        outcome = "hung"
    except BaseException as exc:
        outcome = "traceback: " + repr(exc)[:300]
    results.append({"argv": argv, "code": code, "outcome": outcome,
                    "out": out.getvalue()[-20000:], "err": err.getvalue()[-5000:]})
with open(sys.argv[3], "w") as f:
    json.dump(results, f)
"""


def run_drivers(folder: Path, jobs: dict, seconds: float = 1.5) -> dict:
    """{name: (cwd, [argv, ...])} -> {name: [result, ...]}, all jobs in parallel."""
    script = folder / "driver.py"
    script.write_text(DRIVER.replace("ROOT", repr(str(ROOT))).replace("SECONDS", str(seconds)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("STM_")}
    env.update(STM_FSYNC="0", USER="tester", CI="1")
    procs = {}
    for name, (cwd, argvs) in jobs.items():
        out = folder / f"{name}.json"
        procs[name] = (
            subprocess.Popen(
                [sys.executable, str(script), str(cwd), json.dumps(argvs), str(out)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            ),
            out,
        )
    results = {}
    for name, (proc, out) in procs.items():
        try:
            _, err = proc.communicate(timeout=seconds * len(jobs[name][1]) + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if out.exists():
            results[name] = json.loads(out.read_text())
        else:
            results[name] = [{"argv": [], "code": None, "outcome": f"driver died: {err!r}"}]
    return results


# =========================================================================================
# 1. Writes and reads stay inside, whatever the tree holds: symbolic links
# =========================================================================================


def build_victim(victim: Path) -> None:
    """A folder outside the project holding what each kind of link could lead stm to:
    files to read, a torn log and history for --fix to cut, temp files and a half-built
    session for --fix to delete, a user's AGENTS.md and Claude settings to overwrite."""
    token = fake_token("ghp_", 36)
    (victim / "notes.md").write_text(f"# {BAIT}\n\n{BAIT} summary {token}\n")
    (victim / "secret.txt").write_text(f"{BAIT} precious\n")
    (victim / "2026-01-01.md").write_text(
        f"## 2026-01-01T00:00:00Z · x <!-- stm:entry 0badf00d -->\n\n{BAIT} torn {token}\n"
    )
    (victim / ".stale.0badf00d.tmp").write_text(BAIT)
    building = victim / f".{OLD_SID}.0badf00d.building"
    building.mkdir()
    (building / "state.json").write_text(BAIT)
    (victim / "gitattributes").write_text(f"# {BAIT}\n")
    (victim / "gitignore").write_text(f"# {BAIT}\n")
    pointer = {"active_session": OLD_SID, "updated_at": "2026-11-01T00:00:00Z"}
    (victim / "pointer.json").write_text(json.dumps(pointer))
    (victim / "settings.json").write_text(json.dumps({"bait": BAIT}))
    (victim / "AGENTS.md").write_text(f"{BAIT}: the user's own instructions\n")
    for folder in (victim / OLD_SID, victim / "2026-11" / OLD_SID):
        bait_session(folder)


def bait_session(folder: Path) -> None:
    folder.mkdir(parents=True)
    stamp = "2026-11-01T00:00:00Z"
    state = {
        "session_id": OLD_SID,
        "created_at": stamp,
        "updated_at": stamp,
        "version": 2,
        "phase": "init",
        "phase_history": [{"phase": "init", "entered_at": stamp, "exited_at": None}],
        "name": BAIT,
        "context": {"spec": "context/spec.md"},
    }
    (folder / "state.json").write_text(json.dumps(state))
    event = {"event": "created", "timestamp": stamp, "version": 1, "note": BAIT}
    (folder / "history.jsonl").write_text(json.dumps(event) + '\n{"torn": "' + BAIT)
    (folder / "Session.md").write_text(f"# {BAIT}\n")
    (folder / "context").mkdir()
    (folder / "context" / "spec.md").write_text(f"{BAIT}\n")
    (folder / "context" / "handoff.json").write_text(f'{{"bait": "{BAIT}"')
    (folder / "artifacts").mkdir()
    (folder / ".state.json.0badf00d.tmp").write_text(BAIT)


# (id, link path, its target inside the victim, check must report it, text that may
# stand for the link in a finding at state.json (a context entry), paths boot must not
# hand an agent). SID is the project's own handoff session.
LINKS = [
    ("refs-subfolder", ".stacks/refs/sub", ".", True, None, ()),
    ("ref-file", ".stacks/refs/x.md", "notes.md", True, None, ()),
    ("ref-file-deep", ".stacks/refs/a/b/c.md", "notes.md", True, None, ()),
    ("logs-folder", ".stacks/logs", ".", True, None, ()),
    ("log-file", ".stacks/logs/2026-01-01.md", "2026-01-01.md", True, None, ()),
    ("identity", ".stacks/AGENT.md", "notes.md", True, None, ()),
    ("memory", ".stacks/MEMORY.md", "notes.md", True, None, ()),
    ("stacks-gitattributes", ".stacks/.gitattributes", "gitattributes", True, None, ()),
    ("stacks-lock", ".stacks/.stm.lock", "secret.txt", True, None, ()),
    ("state-gitignore", ".state/.gitignore", "gitignore", True, None, ()),
    ("pointer", ".state/current-session.json", "pointer.json", True, None, ()),
    ("sessions-folder", ".state/sessions", ".", True, None, ()),
    ("user-namespace", ".state/sessions/user-bob", ".", True, None, ()),
    ("session-folder", ".state/sessions/SID", OLD_SID, True, None, ()),
    ("state-file", ".state/sessions/SID/state.json", OLD_SID + "/state.json", True, None, ()),
    ("history-file", ".state/sessions/SID/history.jsonl", OLD_SID + "/history.jsonl", True,
     None, ()),
    ("session-md", ".state/sessions/SID/Session.md", OLD_SID + "/Session.md", True,
     "Session.md", ("SID/Session.md",)),
    ("context-folder", ".state/sessions/SID/context", OLD_SID + "/context", True,
     "context/spec.md", ("SID/context/spec.md", "SID/context/handoff.json")),
    ("context-file", ".state/sessions/SID/context/spec.md", "notes.md", True,
     "context/spec.md", ("SID/context/spec.md",)),
    ("handoff-json", ".state/sessions/SID/context/handoff.json",
     OLD_SID + "/context/handoff.json", True, "context/handoff.json",
     ("SID/context/handoff.json",)),
    ("artifacts-folder", ".state/sessions/SID/artifacts", ".", True, None, ()),
    ("history-folder", ".state/history", ".", True, None, ()),
    ("history-month", ".state/history/2026-11", "2026-11", True, None, ()),
    ("archived-session", f".state/history/2026-11/{OLD_SID}", OLD_SID, True, None, ()),
    ("claude-folder", ".claude", ".", False, None, ()),
    ("claude-settings", ".claude/settings.json", "settings.json", False, None, ()),
    ("agents-md", "AGENTS.md", "AGENTS.md", False, None, ()),
    ("claude-md", "CLAUDE.md", "AGENTS.md", False, None, ()),
    ("docs-folder", "docs", ".", False, None, ()),
]  # fmt: skip

BATTERY = [
    ["boot"],
    ["boot", "--json"],
    ["status"],
    ["status", "--json"],
    ["session", "list", "--all"],
    ["session", "show"],
    ["search", BAIT],
    ["search", BAIT, "--layer", "sessions"],
    ["export", "-o", "out/memory.zip", "--include-state"],
    ["check", "--json"],
    ["check", "--fix", "--json"],
    ["log", "battery entry"],
    ["note", "Status", "battery note"],
    ["note", "Role", "battery role", "--identity"],
    ["session", "new", "--no-switch"],
    ["session", "phase", "p2"],
    ["session", "checkpoint", "--done", "step"],
    ["session", "switch", "SID"],
    ["compose-handoff", "h2.json", "--no-switch"],
    ["setup", "claude", "--install"],
    ["setup", "claude", "--remove"],
    ["setup", "agents-md", "--install"],
    ["setup", "agents-md", "--remove"],
    ["setup", "agents-md", "--install", "--file", "CLAUDE.md"],
    ["setup", "agents-md", "--remove", "--file", "CLAUDE.md"],
    ["setup", "agents-md", "--install", "--file", "docs/AGENTS.md"],
    ["setup", "agents-md", "--remove", "--file", "docs/AGENTS.md"],
    ["init"],
    ["init", "--force"],
    ["session", "archive"],
    ["check", "--fix"],
    ["check", "--json"],
]


def plant(project: Path, victim: Path, rel: str, target: str) -> None:
    path = project / rel
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(victim / target if target != "." else victim)


@pytest.mark.parametrize(
    "kind,rel,target,report,alias,hidden", LINKS, ids=[row[0] for row in LINKS]
)
def test_no_command_follows_a_link_and_check_reports_it(
    project, call, monkeypatch, tmp_path_factory, kind, rel, target, report, alias, hidden
):
    """Plant one link (to a folder outside the project full of bait), run every command,
    check --fix included: the victim stays byte-identical, nothing of it is printed or
    exported, check reports the link by its path (and does not walk through it), and
    boot never hands an agent a path that passes through it."""
    monkeypatch.setenv("CI", "1")  # no git calls: speed
    victim = tmp_path_factory.mktemp("victim")
    build_victim(victim)
    sid = new_store(project)
    state_path = session_dir(project, sid) / "state.json"
    state = json.loads(state_path.read_text())
    state["context"]["spec"] = "context/spec.md"
    state_path.write_text(json.dumps(state))
    (session_dir(project, sid) / "context" / "spec.md").write_text("# Spec\n")
    (project / "h2.json").write_text(json.dumps(handoff_json(task_id="HARDEN-2")))
    (project / "out").mkdir()
    rel = rel.replace("SID", sid)
    plant(project, victim, rel, target)
    before = tree(victim)

    results = []
    for argv in BATTERY:
        argv = [word.replace("SID", sid) for word in argv]
        results.append((argv, call(*argv)))

    problems = []
    for argv, result in results:
        if result.code is None or "Traceback" in result.err:
            problems.append(f"{argv}: {result.err.strip()[-300:]}")
        if BAIT in result.out:
            problems.append(f"{argv} printed what it read through the link")
    after = tree(victim)
    if after != before:
        problems.append("the victim changed: " + tree_diff(before, after))
    archive = project / "out" / "memory.zip"
    if archive.exists():
        with zipfile.ZipFile(archive) as zf:
            leaked = [n for n in zf.namelist() if BAIT.encode() in zf.read(n)]
        if leaked:
            problems.append(f"export carried what it read through the link: {leaked}")
    checks = [r for argv, r in results if argv == ["check", "--json"] and r.code is not None]
    for index, result in enumerate(checks):
        try:
            found = json.loads(result.out)["findings"]
        except ValueError:
            problems.append(f"check --json did not run: {result.err.strip()[-300:]}")
            continue
        inside = [f["path"] for f in found if f["path"].startswith(rel + "/")]
        if inside:
            problems.append(f"check walked through the link: findings at {inside}")
        if report and index == 0:  # the last check runs after the session was archived
            named = [
                f
                for f in found
                if f["path"].rstrip("/") == rel
                or (alias and alias in f["message"] and f["path"].endswith("state.json"))
            ]
            serious = [
                f for f in named if f["severity"] == "error" or f["rule"] in git_file_rules()
            ]
            if not serious:
                problems.append(f"check did not report the link {rel} as an error")
    for argv, result in results:
        if argv[0] == "boot" and hidden and result.code is not None:
            for path in hidden:
                if path.replace("SID", sid) in result.out:
                    problems.append(f"{argv} hands the agent {path} through a link")
    assert not problems, "\n".join(dict.fromkeys(problems))


def test_a_context_path_through_a_link_inside_the_session_is_hidden_and_reported(store, call):
    """The check is on the resolved path: context/spec.md is a link to a file of the
    same session. Boot does not list it, and check reports it."""
    sid = call("session", "new").out.strip()
    folder = session_dir(store, sid)
    (folder / "artifacts" / "real.md").write_text("# real\n")
    (folder / "context" / "spec.md").symlink_to(folder / "artifacts" / "real.md")
    state = json.loads((folder / "state.json").read_text())
    state["context"] = {"spec": "context/spec.md"}
    (folder / "state.json").write_text(json.dumps(state))
    assert "context/spec.md" not in call("boot").out
    found = findings(call("check", "--json"))
    assert any(
        f["severity"] == "error"
        and (
            f["path"].endswith("context/spec.md")
            or ("context/spec.md" in f["message"] and f["path"].endswith("state.json"))
        )
        for f in found
    ), found


def test_a_symlinked_store_root_is_refused_and_the_folder_it_names_is_untouched(
    tmp_path, monkeypatch, call
):
    """A .stacks/.state that is a link (a clone's, or one kept elsewhere): every write is
    refused (exit 1, naming the link), boot shows a notice instead of the memory behind
    it, check reports it, and nothing behind it changes (test_capture_trust.py runs every
    writing command against a sibling project)."""
    monkeypatch.setenv("CI", "1")
    elsewhere = tmp_path / "elsewhere"
    new_store(elsewhere)
    (elsewhere / "keep.txt").write_text("not stm's\n")
    (elsewhere / ".stacks" / "user-notes.txt").write_text("mine\n")
    (elsewhere / ".stacks" / "refs" / "guide.md").write_text("# Guide\n\nHow.\n")
    (elsewhere / ".stacks" / ".gitignore").write_text("# mine\n")  # --fix would append here
    project = tmp_path / "project"
    project.mkdir()
    (project / ".stacks").symlink_to(elsewhere / ".stacks")
    (project / ".state").symlink_to(elsewhere / ".state")
    monkeypatch.chdir(project)
    before = tree(elsewhere)
    for argv in (
        ["check", "--fix"],
        ["log", "through the root link"],
        ["note", "Status", "fine"],
        ["session", "new"],
        ["session", "phase", "p2"],
    ):
        result = call(*argv)
        assert result.code == 1 and "is a symbolic link (to " in result.err, (argv, result)
    boot = call("boot")
    assert boot.code == 0 and "is a symbolic link (to " in boot.out and "Guide" not in boot.out
    assert call("check").code == 1
    assert tree(elsewhere) == before


def test_boot_does_not_point_at_a_symlinked_session_md_and_check_reports_it(store, call):
    sid = call("compose-handoff", str(HANDOFF)).out.strip()
    md = session_dir(store, sid) / "Session.md"
    outside = store.parent / f"{store.name}-outside.md"
    outside.write_text("# elsewhere\n")
    md.unlink()
    md.symlink_to(outside)
    boot = call("boot")
    assert boot.code == 0, boot
    assert "Session.md" not in boot.out
    rel = f".state/sessions/{sid}/Session.md"
    found = findings(call("check", "--json"))
    assert any(f["path"] == rel and f["severity"] == "error" for f in found), found


@pytest.mark.parametrize("link", [".state/history", ".state/history/MONTH"])
def test_archive_makes_no_month_folder_through_a_link(store, run, tmp_path_factory, link):
    """The month folder a session is archived into does not exist yet (always so for the
    first archive of a month): mkdir must not create it where a link points."""
    victim = tmp_path_factory.mktemp("victim")
    sid = run("session", "new", "--name", "x").out.strip()
    path = store / link.replace("MONTH", sid[:7])
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        shutil.rmtree(path)  # init makes history/ (with a .gitkeep)
    path.symlink_to(victim)
    before = tree(victim)
    result = run("session", "archive")
    assert result.code == 1 and "symbolic link" in result.err, result
    assert tree(victim) == before  # nothing created there, not even for a moment
    assert (store / ".state" / "sessions" / sid / "state.json").exists()


# ---- -o targets -----------------------------------------------------------------------------


def test_output_to_a_regular_file_or_a_new_path_works(store, call):
    assert call("boot", "-o", "new.md").code == 0
    assert call("boot", "-o", "new.md").code == 0  # an existing regular file
    assert call("export", "-o", "new.zip").code == 0
    assert call("compose-handoff", str(HANDOFF), "--print", "-o", "print.md").code == 0


# =========================================================================================
# FIFOs, sockets, devices where stm expects a regular file; -o onto non-regular targets
# =========================================================================================

READERS = [
    ["boot"],
    ["status"],
    ["check", "--json"],
    ["search", "zzzz"],
    ["session", "list", "--all"],
    ["session", "show"],
    ["export", "-o", "../OUT.zip", "--include-state"],
]

# (id, path, kind, commands that would write it and must refuse, check must report it)
SPECIALS = [
    ("identity-fifo", ".stacks/AGENT.md", "fifo", [["note", "Role", "x", "--identity"]], True),
    ("memory-fifo", ".stacks/MEMORY.md", "fifo", [["note", "Status", "x"]], True),
    ("memory-socket", ".stacks/MEMORY.md", "socket", [["note", "Status", "x"]], True),
    ("memory-device", ".stacks/MEMORY.md", "device", [["note", "Status", "x"]], True),
    ("ref-fifo", ".stacks/refs/pipe.md", "fifo", [], True),
    ("old-log-fifo", ".stacks/logs/2026-01-01.md", "fifo", [], True),
    ("today-log-fifo", ".stacks/logs/TODAY.md", "fifo", [["log", "x"]], True),
    ("gitattributes-fifo", ".stacks/.gitattributes", "fifo", [], True),
    ("stacks-lock-fifo", ".stacks/.stm.lock", "fifo", [], True),
    ("pointer-fifo", ".state/current-session.json", "fifo", [["session", "new"]], True),
    ("state-fifo", ".state/sessions/SID/state.json", "fifo", [["session", "phase", "p2"]], True),
    ("history-fifo", ".state/sessions/SID/history.jsonl", "fifo", [["session", "phase", "p2"]],
     True),
    ("session-md-fifo", ".state/sessions/SID/Session.md", "fifo", [], True),
    ("handoff-json-fifo", ".state/sessions/SID/context/handoff.json", "fifo", [], True),
    ("claude-settings-fifo", ".claude/settings.json", "fifo",
     [["setup", "claude", "--install"]], False),
    ("agents-md-fifo", "AGENTS.md", "fifo", [["setup", "agents-md", "--install"]], False),
]  # fmt: skip

# -o onto something that is not a regular file: (id, command, target kind)
OUTPUTS = [
    (f"{cmd}-{kind}", cmd, kind)
    for cmd in ("boot", "print", "export")
    for kind in ("link", "dangling", "fifo", "device")
]


def make_special(path: Path, kind: str) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        here = os.getcwd()
        os.chdir(path.parent)  # AF_UNIX paths are limited to ~108 bytes
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(path.name)
        finally:
            os.chdir(here)
    else:  # a character device that never ends, like /dev/zero
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
        except (PermissionError, AttributeError):
            return False
    return True


def output_command(cmd: str, target: str) -> list[str]:
    if cmd == "boot":
        return ["boot", "-o", target]
    if cmd == "print":
        return ["compose-handoff", str(HANDOFF), "--print", "-o", target]
    return ["export", "-o", target]


@pytest.fixture(scope="module")
def hostile_runs(tmp_path_factory):
    """Every special-file scenario and every -o scenario, run at once in drivers."""
    base = tmp_path_factory.mktemp("special")
    victim = tmp_path_factory.mktemp("special-victim")
    (victim / "secret.txt").write_text("PRECIOUS\n")
    jobs, made = {}, {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STM_FSYNC", "0")
        mp.setenv("USER", "tester")
        mp.delenv("STM_USER", raising=False)
        for name, rel, kind, writers, _ in SPECIALS:
            root = base / name
            sid = new_store(root)
            path = root / rel.replace("SID", sid).replace("TODAY", today())
            made[name] = (path, make_special(path, kind))
            argvs = list(READERS) + writers + [["check", "--fix"], ["check", "--json"]]
            argvs = [[w.replace("OUT", name) for w in argv] for argv in argvs]
            jobs[name] = (root, argvs)
        root = base / "outputs"
        new_store(root)
        argvs = []
        for name, cmd, kind in OUTPUTS:
            target = root / f"o-{name}"
            if kind == "link":
                target.symlink_to(victim / "secret.txt")
            elif kind == "dangling":
                target.symlink_to(victim / f"missing-{name}")
            elif kind == "fifo":
                os.mkfifo(target)
            else:  # a null device, as /dev/null is: stm must never replace one
                try:
                    os.mknod(target, stat.S_IFCHR | 0o600, os.makedev(1, 3))
                except (PermissionError, AttributeError):
                    continue
            argvs.append(output_command(cmd, target.name))
        jobs["outputs"] = (root, argvs)
    victim_before = tree(victim)
    results = run_drivers(base, jobs)
    return {"results": results, "made": made, "victim": (victim, victim_before), "base": base}


@pytest.mark.parametrize("name,rel,kind,writers,report", SPECIALS, ids=[row[0] for row in SPECIALS])
def test_a_special_file_is_reported_and_never_blocks(
    hostile_runs, name, rel, kind, writers, report
):
    path, made = hostile_runs["made"][name]
    if not made:
        pytest.skip("cannot create a device node here")
    results = hostile_runs["results"][name]
    problems = [f"{r['argv']}: {r['outcome']}" for r in results if r["outcome"] != "ok"]
    for r in results:
        if r["argv"] in writers and r["code"] in (0, None):
            problems.append(f"{r['argv']} did not refuse to write a {kind} (exit {r['code']})")
    check = next((r for r in results if r["argv"] == ["check", "--json"]), None)
    if report and check is not None and check["outcome"] == "ok":
        root = hostile_runs["base"] / name
        want = os.path.relpath(path, root)
        found = json.loads(check["out"])["findings"]
        if not any(f["path"] == want and f["severity"] == "error" for f in found):
            problems.append(f"check did not report the {kind} {want} as an error")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = 0
    if stat.S_ISREG(mode) or mode == 0:
        problems.append(f"the {kind} at {rel} was replaced or removed")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name,cmd,kind", OUTPUTS, ids=[row[0] for row in OUTPUTS])
def test_output_onto_anything_but_a_regular_file_is_refused(hostile_runs, name, cmd, kind):
    results = hostile_runs["results"]["outputs"]
    result = next((r for r in results if r["argv"][-1] == f"o-{name}"), None)
    if result is None:
        pytest.skip("cannot create a device node here")
    assert result["outcome"] == "ok", result
    assert result["code"] not in (0, None), result
    assert "Traceback" not in result["err"]
    target = hostile_runs["base"] / "outputs" / f"o-{name}"
    mode = os.lstat(target).st_mode
    kept = {"fifo": stat.S_ISFIFO, "device": stat.S_ISCHR}.get(kind, stat.S_ISLNK)
    assert kept(mode), f"-o replaced the {kind} with a regular file"
    victim, before = hostile_runs["victim"]
    assert tree(victim) == before


# =========================================================================================
# Hard links: writes replace files by rename; the lock is never truncated
# =========================================================================================


def hard_link_victim(tmp_path_factory, target: Path, content: bytes | None = None) -> Path:
    victim = tmp_path_factory.mktemp("hardlink") / "victim"
    victim.write_bytes(content if content is not None else target.read_bytes())
    if target.exists() or target.is_symlink():
        target.unlink()
    os.link(victim, target)
    return victim


@pytest.mark.parametrize(
    "tree_name,argv", [(".stacks", ["log", "x"]), (".state", ["session", "new"])]
)
def test_the_lock_file_is_never_truncated_through_a_hard_link(
    store, call, tmp_path_factory, tree_name, argv
):
    victim = hard_link_victim(tmp_path_factory, store / tree_name / ".stm.lock", b"PRECIOUS\n")
    result = call(*argv)
    assert "Traceback" not in result.err
    assert victim.read_bytes() == b"PRECIOUS\n"


def torn_log(store: Path) -> Path:
    path = store / ".stacks" / "logs" / "2026-01-01.md"
    path.write_text("## 2026-01-01T00:00:00Z · x <!-- stm:entry 0badf00d -->\n\ntorn\n")
    return path


HARD_LINKED = [
    # (id, the file, the command that writes it)
    ("memory-note", ".stacks/MEMORY.md", ["note", "Status", "x"]),
    ("identity-note", ".stacks/AGENT.md", ["note", "Role", "x", "--identity"]),
    ("state-phase", "STATE", ["session", "phase", "p2"]),
    ("pointer-new", ".state/current-session.json", ["session", "new"]),
    ("gitignore-fix", ".stacks/.gitignore", ["check", "--fix"]),
    ("agents-md", "AGENTS.md", ["setup", "agents-md", "--install"]),
    ("log-append", "TODAY_LOG", ["log", "x"]),
    ("history-append", "HISTORY", ["session", "phase", "p2"]),
    ("torn-log-fix", "TORN_LOG", ["check", "--fix"]),
]


@pytest.mark.parametrize("name,rel,argv", HARD_LINKED, ids=[row[0] for row in HARD_LINKED])
def test_no_write_goes_through_a_hard_link(store, call, tmp_path_factory, name, rel, argv):
    sid = call("session", "new").out.strip()
    call("log", "first entry")
    paths = {
        "STATE": session_dir(store, sid) / "state.json",
        "HISTORY": session_dir(store, sid) / "history.jsonl",
        "TODAY_LOG": store / ".stacks" / "logs" / f"{today()}.md",
    }
    if rel == "TORN_LOG":
        rel = os.path.relpath(torn_log(store), store)
    target = paths.get(rel) or store / rel
    if name == "gitignore-fix":
        target.write_text("# mine\n")
    if name == "agents-md":
        target.write_text("# Project\n")
    content = target.read_bytes()
    victim = hard_link_victim(tmp_path_factory, target, content)
    result = call(*argv)
    assert "Traceback" not in result.err, result
    assert victim.read_bytes() == content, f"{argv} wrote through the hard link"


# =========================================================================================
# Store discovery stops at the repository boundary; a store owned by another user
# =========================================================================================


@pytest.mark.parametrize("git_kind", ["folder", "file"])
def test_a_store_above_the_repository_is_refused(tmp_path, monkeypatch, call, git_kind):
    outer = tmp_path / "home"
    new_store(outer)
    repo = outer / "repo"
    repo.mkdir()
    if git_kind == "folder":
        (repo / ".git").mkdir()
    else:  # a worktree or submodule
        (repo / ".git").write_text("gitdir: ../.git-elsewhere\n")
    (repo / "sub").mkdir()
    monkeypatch.chdir(repo / "sub")
    before = tree(outer / ".stacks"), tree(outer / ".state")
    for argv in (
        ["boot"],
        ["status"],
        ["check"],
        ["search", "parser"],
        ["log", "x"],
        ["note", "Status", "x"],
        ["session", "new"],
    ):
        result = call(*argv)
        assert_clean_refusal(result, 1)
    assert (tree(outer / ".stacks"), tree(outer / ".state")) == before
    result = call("boot", "--dir", str(outer / ".stacks"))  # named: accepted
    assert result.code == 0, result


def test_init_inside_a_repository_below_a_store_creates_its_own(tmp_path, monkeypatch, call):
    outer = tmp_path / "home"
    new_store(outer, handoff=False)
    repo = outer / "repo"
    (repo / ".git").mkdir(parents=True)
    monkeypatch.chdir(repo)
    before = tree(outer / ".stacks")
    assert call("init").code == 0
    assert (repo / ".stacks" / "AGENT.md").is_file()
    assert tree(outer / ".stacks") == before


@pytest.mark.skipif(not IS_ROOT, reason="needs root to give the store to another user")
def test_a_store_owned_by_another_user_is_refused_unless_named(store, call):
    for folder, _, files in os.walk(store / ".stacks"):
        os.chown(folder, 65534, 65534)
        for name in files:
            os.chown(os.path.join(folder, name), 65534, 65534, follow_symlinks=False)
    before = snapshot(store)
    for argv in (["boot"], ["log", "x"], ["check"]):
        assert_clean_refusal(call(*argv), 1)
    assert snapshot(store) == before
    assert call("boot", "--dir", ".stacks").code == 0


# =========================================================================================
# 2. Untrusted text cannot forge memory
# =========================================================================================

INJECT = "ok\n## Injected\x1b[2J\u2028## Forged\u2029# Forged2\x85## Forged3 end"

REF_NAMES = {
    "newline": "evil\n## Injected.md",
    "ansi": "\x1b[2J\x1b[31mred.md",
    "u2028": "line\u2028## Forged.md",
    "u2029": "para\u2029# Forged.md",
    "nel": "nel\x85## Forged.md",
    "comment": "<!-- hide.md",
}


@pytest.mark.parametrize("name", REF_NAMES.values(), ids=REF_NAMES.keys())
def test_a_ref_file_name_cannot_forge_a_section_or_drive_the_terminal(store, call, name):
    (store / ".stacks" / "refs" / name).write_text("no title here\n")  # untitled: check names it
    for argv in (["boot"], ["check"], ["search", "no title here"], ["status"]):
        result = call(*argv)
        assert "Traceback" not in result.err, (argv, result)
        assert not forged(result.out), (argv, forged(result.out))
        assert "\x1b" not in result.out, argv
    assert "<!--" not in call("boot").out


def test_state_fields_cannot_forge_boot_status_or_list_output(store, call):
    sid = call("session", "new", "--name", "plain").out.strip()
    path = session_dir(store, sid) / "state.json"
    state = json.loads(path.read_text())
    state.update(
        name=INJECT,
        phase=INJECT,
        created_at=INJECT,
        updated_at=INJECT,
        valid_phases=[INJECT],
        task_id=INJECT,
        from_agent=INJECT,
        to_agent=INJECT,
        handoff_status=INJECT,
        user=INJECT,
        checkpoint={
            "last_completed_step": INJECT,
            "pending_steps": [INJECT],
            "resume_instruction": INJECT,
        },
        recovery={
            "recovery_notes": INJECT,
            "last_agent": INJECT,
            "last_action": INJECT,
            "interrupted_at": INJECT,
        },
    )
    state["phase_history"][-1]["entered_at"] = INJECT
    path.write_text(json.dumps(state))
    outputs = {}
    for argv in (
        ["boot"],
        ["status"],
        ["session", "list"],
        ["session", "list", "--all"],
        ["session", "show"],
        ["check"],
    ):
        outputs[" ".join(argv)] = call(*argv)
    pointer = store / ".state" / "current-session.json"
    pointer.write_text('{"active_session": null}')
    outputs["boot (waiting sessions)"] = call("boot")
    problems = []
    for what, result in outputs.items():
        if "Traceback" in result.err:
            problems.append(f"{what}: {result.err[-200:]}")
        if forged(result.out):
            problems.append(f"{what} prints forged lines {forged(result.out)}")
        if "\x1b" in result.out:
            problems.append(f"{what} prints a raw escape")
    assert not problems, "\n".join(problems)


def test_handoff_fields_cannot_forge_session_md_or_boot(store, call):
    handoff = handoff_json(
        task_id="T-1" + INJECT,
        from_agent=INJECT,
        to_agent=INJECT,
        status=INJECT,
        priority=INJECT,
        task="Do it" + INJECT,
        summary=INJECT,
        context=[INJECT, "plain"],
        decisions=INJECT,
        next_steps=[INJECT],
        notes=INJECT,
        **{"x\n## Injected key": INJECT},
    )
    (store / "h.json").write_text(json.dumps(handoff))
    printed = call("compose-handoff", "h.json", "--print")
    result = call("compose-handoff", "h.json")
    assert result.code == 0, result
    sid = result.out.strip()
    md = (session_dir(store, sid) / "Session.md").read_text()
    boot = call("boot")
    for what, text in (("Session.md", md), ("--print", printed.out), ("boot", boot.out)):
        assert not forged(text), (what, forged(text))
        assert "\x1b" not in text, what


def fenced_lines(text: str) -> set[int]:
    """Indexes of the lines a CommonMark reader takes as code (inside ``` or ~~~)."""
    inside, fence, out = False, "", set()
    for index, line in enumerate(text.split("\n")):
        match = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if inside:
            out.add(index)
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                inside = False
        elif match:
            inside, fence = True, match.group(1)
            out.add(index)
    return out


def visible_after_comments(text: str) -> str:
    """What a Markdown/HTML reader shows: closed comments gone, an unclosed one hides the
    rest of the document."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return text.split("<!--")[0]


@pytest.mark.parametrize(
    "summary", ["```python\nunclosed code", "~~~\nunclosed", "<!-- hidden from here"]
)
def test_a_handoff_value_cannot_swallow_the_sections_after_it(store, call, summary):
    handoff = handoff_json(summary=summary, notes="visible after", next_steps=["step one"])
    (store / "h.json").write_text(json.dumps(handoff))
    sid = call("compose-handoff", "h.json").out.strip()
    md = (session_dir(store, sid) / "Session.md").read_text()
    lines = md.split("\n")
    code = fenced_lines(md)
    for heading in ("## Next steps", "## Notes", "## Other fields"):
        assert heading in lines, (heading, md)
        assert lines.index(heading) not in code, f"{heading} is inside a code fence:\n{md}"
        assert heading in visible_after_comments(md), f"{heading} is hidden by a comment:\n{md}"


MEMORY_WITH_GUIDANCE = stm.MEMORY_TEMPLATE.replace(
    "## Observations\n\n<!-- What did you learn that the next session must know? -->\n",
    "## Observations\n\n<!-- What did you learn that the next session must know? -->\n\n"
    "- keep-me-observation\n",
)


@pytest.mark.parametrize("memory", [MEMORY, MEMORY_WITH_GUIDANCE], ids=["plain", "guidance"])
def test_a_note_with_a_comment_opener_cannot_hide_later_sections_from_boot(store, call, memory):
    (store / ".stacks" / "MEMORY.md").write_text(memory)
    result = call("note", "Status", "see <!-- this")
    assert result.code in (0, 1, 2), result
    boot = call("boot").out
    assert "#### Observations" in boot and "#### Next Steps" in boot, boot
    assert "<!--" not in boot, boot
    if memory is MEMORY_WITH_GUIDANCE:
        assert "keep-me-observation" in boot


def test_a_note_with_a_fence_cannot_swallow_later_sections(store, call):
    result = call("note", "Status", "-", stdin="done\n```")
    assert "Traceback" not in result.err, result
    text = (store / ".stacks" / "MEMORY.md").read_text()
    assert text.count("## Last Updated") == 1, text
    found = findings(call("check", "--json"))
    assert not [f for f in found if f["rule"] == "heading-missing"], found
    boot = call("boot").out
    assert "#### Observations" in boot and "\n## Observations" not in boot, boot


def test_a_note_with_a_line_separator_cannot_forge_a_boot_section(store, call):
    result = call("note", "Status", "ok\u2028## Forged section\u2029# Forged2")
    assert "Traceback" not in result.err, result
    boot = call("boot").out
    assert not forged(boot), forged(boot)


def test_a_log_author_is_one_line_whatever_stm_user_holds(store, call, monkeypatch):
    monkeypatch.setenv("STM_USER", "alice\n## Injected\u2028## Forged\x1b[2J")
    assert call("log", "hello").code == 0
    text = (store / ".stacks" / "logs" / f"{today()}.md").read_text()
    assert not forged(text) and "\x1b" not in text, text
    assert len(text.splitlines()) == 5, text  # header, blank, message, blank, end line
    result = call("search", "hello")
    assert not forged(result.out)


# ---- secrets ---------------------------------------------------------------------------------

JWT = (
    base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode()
    + "."
    + base64.urlsafe_b64encode(b'{"sub":"1234567890","name":"Test"}').rstrip(b"=").decode()
    + "."
    + fake_token("", 43, string.ascii_letters + string.digits + "-_")
)
B64 = string.ascii_letters + string.digits + "/+"
URLSAFE = string.ascii_letters + string.digits + "-_"

# (kind, looks like a secret, a near miss that does not)
SECRETS = [
    ("pgp-private-key", "-----BEGIN PGP PRIVATE KEY BLOCK-----",
     "-----BEGIN PGP PUBLIC KEY BLOCK-----"),
    ("openssh-private-key", "-----BEGIN OPENSSH PRIVATE KEY-----",
     "ssh-ed25519 " + fake_token("AAAAC3NzaC1lZDI1NTE5AAAAI", 43, B64) + " me@host"),
    ("pkcs8-private-key", "-----BEGIN ENCRYPTED PRIVATE KEY-----",
     "-----BEGIN CERTIFICATE-----"),
    ("aws-secret-key", "aws_secret_access_key = " + fake_token("", 40, B64),
     "aws_secret_access_key = ${AWS_SECRET_ACCESS_KEY}"),
    ("github-token-glued", "tokenghp_" + fake_token("", 36), "tokenghp_" + fake_token("", 12)),
    ("gitlab-token", fake_token("glpat-", 20, URLSAFE), "glpat-short"),
    ("google-api-key", fake_token("AIza", 35, URLSAFE), "AIzaShort"),
    ("stripe-live-key", fake_token("sk_live_", 24), "sk_live_" + fake_token("", 5)),
    ("stripe-restricted-key", fake_token("rk_live_", 24), "rk_live_" + fake_token("", 5)),
    ("npm-token", fake_token("npm_", 36), "npm_config_cache"),
    ("pypi-token", "pypi-AgEIcHlwaS5vcmc" + fake_token("", 60, URLSAFE), "pypi-project-name"),
    ("huggingface-token", fake_token("hf_", 34, string.ascii_letters), "hf_hub_download"),
    ("slack-webhook",
     "https://hooks.slack.com/services/" + fake_token("T", 8, string.ascii_uppercase)
     + "/" + fake_token("B", 8, string.ascii_uppercase) + "/" + fake_token("", 24),
     "see https://hooks.slack.com/services/ for the setup"),
    ("jwt", JWT, "eyJhbGciOiJIUzI1NiJ9 is only a header"),
    ("url-with-password", "https://deploy:" + fake_token("", 14) + "@git.example.com/x.git",
     "https://deploy@git.example.com/x.git and postgres://localhost:5432/db"),
]  # fmt: skip


@pytest.mark.parametrize("kind,secret,near_miss", SECRETS, ids=[row[0] for row in SECRETS])
def test_secret_formats_are_refused_by_log_and_reported_by_check(
    store, call, kind, secret, near_miss
):
    before = snapshot(store)
    result = call("log", f"deploy note: {secret}")
    assert_clean_refusal(result, 1)
    assert snapshot(store) == before
    ref = store / ".stacks" / "refs" / "creds.md"
    ref.write_text(f"# Creds\n\nThe key: {secret}\n")
    found = findings(call("check", "--json"))
    assert any(f["rule"] == "secret" and f["path"] == ".stacks/refs/creds.md" for f in found)
    assert secret not in call("check").out  # never printed whole
    # the near miss is ordinary text
    result = call("log", f"deploy note: {near_miss}")
    assert result.code == 0, result
    ref.write_text(f"# Creds\n\nThe key: {near_miss}\n")
    assert not [f for f in findings(call("check", "--json")) if f["rule"] == "secret"]


def documented_secret_patterns() -> list[str]:
    text = (ROOT / "spec" / "memory-layers.md").read_text()
    section = text.split("### Secrets", 1)[1].split("\n#", 1)[0]
    patterns = []
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)]
        if len(cells) >= 3 and cells[2].startswith("`") and cells[2].endswith("`"):
            patterns.append(cells[2].strip("`").replace("\\|", "|"))
    return patterns


def test_the_secret_formats_are_documented():
    """spec/memory-layers.md's table lists a pattern for every format, and none of the
    documented patterns flags a near miss."""
    patterns = [re.compile(p) for p in documented_secret_patterns()]
    assert patterns
    undocumented = [k for k, s, _ in SECRETS if not any(p.search(s) for p in patterns)]
    assert not undocumented, f"no documented pattern finds {undocumented}"
    flagged = [k for k, _, n in SECRETS if any(p.search(n) for p in patterns)]
    assert not flagged, f"documented patterns flag the near misses of {flagged}"


TOKEN = fake_token("ghp_", 36)


def secret_paths():
    return [
        ("handoff-notes", ["compose-handoff", "h.json"], {"notes": f"use {TOKEN}"}),
        ("handoff-task-id-in-receipt", ["compose-handoff", "h.json"], {"task_id": TOKEN}),
        ("handoff-other-field", ["compose-handoff", "h.json"], {"credentials": TOKEN}),
        ("note", ["note", "Status", f"use {TOKEN}"], None),
        ("checkpoint-note", ["session", "checkpoint", "--note", f"use {TOKEN}"], None),
        ("session-name", ["session", "new", "--name", f"use {TOKEN}"], None),
    ]


@pytest.mark.parametrize(
    "name,argv,handoff", secret_paths(), ids=[row[0] for row in secret_paths()]
)
def test_every_path_into_memory_refuses_a_secret(store, call, name, argv, handoff):
    call("session", "new")
    if handoff is not None:
        (store / "h.json").write_text(json.dumps(handoff_json(**handoff)))
    before = snapshot(store)
    result = call(*argv)
    assert_clean_refusal(result, 1)
    assert snapshot(store) == before


def memory_bytes(root: Path) -> bytes:
    data = b""
    for folder in (".stacks", ".state"):
        for path in sorted((root / folder).rglob("*")):
            if path.is_file() and not path.is_symlink():
                data += path.read_bytes()
    return data


def test_a_secret_in_stm_user_never_reaches_a_log_header(store, call, monkeypatch):
    monkeypatch.setenv("STM_USER", TOKEN)
    result = call("log", "hello")
    assert "Traceback" not in result.err
    assert TOKEN.encode() not in memory_bytes(store)
    if result.code == 0:
        assert call("check").code == 0


def test_import_refuses_an_archive_holding_a_secret(store, call):
    archive = store / "in.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(".stacks/refs/creds.md", f"# Creds\n\n{TOKEN}\n")
    before = snapshot(store)
    assert_clean_refusal(call("import", "in.zip"), 1)
    assert snapshot(store) == before


# =========================================================================================
# 3. Bad input: a clear error, the documented exit code, nothing lost
# =========================================================================================

BAD_ZONES = ["+24:00", "-24:00", "+23:60", "+99:99", "+2400"]


@pytest.mark.parametrize("zone", BAD_ZONES)
def test_compose_handoff_refuses_a_zone_offset_of_24_hours_or_more(store, call, zone):
    (store / "h.json").write_text(json.dumps(handoff_json(created_at=f"2026-11-22T09:30:00{zone}")))
    before = snapshot(store)
    assert_clean_refusal(call("compose-handoff", "h.json"), 1, "h.json")
    assert snapshot(store) == before


def set_state(store: Path, sid: str, **fields) -> Path:
    path = session_dir(store, sid) / "state.json"
    state = json.loads(path.read_text())
    state.update(fields)
    path.write_text(json.dumps(state))
    return path


@pytest.mark.parametrize(
    "where", ["state-created", "state-updated", "phase-history", "log-entry", "last-updated"]
)
def test_no_traceback_from_a_zone_offset_of_24_hours_anywhere(store, call, where):
    sid = call("session", "new").out.strip()
    bad = "2026-11-22T10:00:00+24:00"
    if where == "state-created":
        set_state(store, sid, created_at=bad)
    elif where == "state-updated":
        set_state(store, sid, updated_at=bad)
    elif where == "phase-history":
        set_state(store, sid, phase_history=[{"phase": "init", "entered_at": bad}])
    elif where == "log-entry":
        (store / ".stacks" / "logs" / "2026-11-20.md").write_text(  # date-safe: pinned clock or id
            f"## {bad} · x <!-- stm:entry 0badf00d -->\n\nhi\n\n<!-- stm:end 0badf00d -->\n"
        )
    else:
        text = MEMORY.replace(TODAY + "\n", bad + "\n")
        (store / ".stacks" / "MEMORY.md").write_text(text)
    for argv in (["boot"], ["status"], ["session", "list"], ["session", "show"], ["search", "x"]):
        result = call(*argv)
        assert result.code is not None and "Traceback" not in result.err, (argv, result)
    result = call("check", "--json")
    assert "Traceback" not in result.err, result
    if where != "last-updated":
        assert result.code == 1
        rules = {f["rule"] for f in findings(result) if f["severity"] == "error"}
        assert rules & {"state-timestamp", "log-entry"}, rules
    result = call("search", "x", "--since", "2026-11-22T00:00:00+24:00")
    assert_clean_refusal(result, 2, "--since")


DEPTH = 100_000


def test_compose_handoff_refuses_json_nested_too_deep(store, call):
    text = json.dumps(handoff_json())[:-1] + f', "nested": {deep(DEPTH)}}}'
    (store / "h.json").write_text(text)
    before = snapshot(store)
    assert_clean_refusal(call("compose-handoff", "h.json"), 1, "h.json")
    assert snapshot(store) == before


def test_compose_handoff_never_stores_json_that_check_cannot_read(tmp_path):
    """At every depth, as a real process: composed and later checked without a
    traceback, or refused with exit 1."""
    new_store(tmp_path, handoff=False)
    env = {"STM_FSYNC": "0", "CI": "1"}
    jobs = []
    for depth in (100, 500, 900, 990, 2000, 20000):
        text = json.dumps(handoff_json(task_id=f"DEPTH-{depth}"))[:-1]
        path = tmp_path / f"h{depth}.json"
        path.write_text(text + f', "nested": {deep(depth)}}}')
        jobs.append((depth, path))
    problems = []
    for depth, path in jobs:
        done = run_stm("compose-handoff", str(path), "--no-switch", cwd=tmp_path, env=env)
        if "Traceback" in done.stderr or done.returncode not in (0, 1):
            problems.append(f"compose at depth {depth}: {done.returncode} {done.stderr[-200:]}")
    check = run_stm("check", cwd=tmp_path, env=env)
    if "Traceback" in check.stderr:
        problems.append(f"check after composing: {check.stderr[-300:]}")
    assert not problems, "\n".join(problems)


def test_deep_json_in_state_pointer_history_handoff_and_settings_is_a_clean_error(store, call):
    sid = call("compose-handoff", str(HANDOFF)).out.strip()
    folder = session_dir(store, sid)
    problems = []

    def attempt(what, argvs, expect=None):
        for argv in argvs:
            result = call(*argv)
            if result.code is None or "Traceback" in result.err:
                problems.append(f"{what}: {argv}: {result.err.strip()[-200:]}")
            elif expect is not None and result.code != expect:
                problems.append(f"{what}: {argv} exited {result.code}, not {expect}")

    readers = [["boot"], ["status"], ["session", "list"], ["session", "show"]]
    state = folder / "state.json"
    good_state = state.read_text()
    state.write_text(good_state[:-2] + f', "extra": {deep(DEPTH)}}}\n')
    attempt("state.json", readers)
    attempt("state.json", [["check"], ["session", "phase", "p2"]], expect=1)
    state.write_text(good_state)

    pointer = store / ".state" / "current-session.json"
    good_pointer = pointer.read_text()
    pointer.write_text(f'{{"active_session": null, "x": {deep(DEPTH)}}}')
    attempt("pointer", readers)
    attempt("pointer", [["check"], ["session", "phase", "p2"]], expect=1)
    pointer.write_text(good_pointer)

    history = folder / "history.jsonl"
    good_history = history.read_bytes()
    history.write_bytes(good_history + f'{{"event": "x", "timestamp": {deep(DEPTH)}}}\n'.encode())
    attempt("history.jsonl", readers + [["check"]])
    history.write_bytes(good_history)

    handoff = folder / "context" / "handoff.json"
    handoff.write_text(json.dumps(handoff_json())[:-1] + f', "nested": {deep(DEPTH)}}}')
    attempt("handoff.json", [["check"]], expect=1)

    settings = store / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(f'{{"hooks": {{"SessionStart": []}}, "x": {deep(DEPTH)}}}')
    before = settings.read_bytes()
    attempt("settings.json", [["setup", "claude", "--install"]], expect=1)
    if settings.read_bytes() != before:
        problems.append("settings.json was rewritten")
    assert not problems, "\n".join(problems)


# wrong field types in state.json: (field, value)
STATE_TYPES = [
    ("version", "1"), ("version", 1.5), ("version", True), ("version", None),
    ("session_id", 5), ("phase", 5), ("phase", None), ("phase", ["a"]),
    ("created_at", 5), ("updated_at", ["x"]), ("updated_at", None),
    ("name", 5), ("name", {"a": 1}),
    ("valid_phases", "plan"), ("valid_phases", [1, 2]),
    ("phase_history", 5), ("phase_history", "abc"), ("phase_history", {}),
    ("phase_history", [5]), ("phase_history", [{"phase": "init", "entered_at": 5}]),
    ("checkpoint", "x"), ("checkpoint", {"pending_steps": "abc"}),
    ("checkpoint", {"pending_steps": 5}), ("checkpoint", {"pending_steps": [1, None]}),
    ("checkpoint", {"last_completed_step": {"a": 1}}),
    ("checkpoint", {"resume_instruction": 5}), ("checkpoint", {"can_resume": "yes"}),
    ("recovery", []), ("recovery", {"interrupted_at": 5}), ("recovery", {"last_action": ["x"]}),
    ("recovery", {"recovery_notes": {}}), ("recovery", {"last_agent": 5}),
    ("context", []), ("context", {"a": 5}),
    ("user", 5), ("archived_at", 5), ("task_id", 5), ("from_agent", []), ("to_agent", 5),
    ("handoff_status", {}), ("handoff_created_at", 5),
]  # fmt: skip

UPDATES = [
    ["session", "phase", "p2"],
    ["session", "checkpoint", "--done", "a"],
    ["session", "checkpoint", "--pending", "b", "--resume", "r"],
    ["session", "archive"],
]


@pytest.mark.parametrize(
    "field,value", STATE_TYPES, ids=[f"{f}={json.dumps(v)}" for f, v in STATE_TYPES]
)
def test_a_wrong_field_type_in_state_json_is_reported_and_refused(store, call, field, value):
    sid = call("session", "new", "--name", "typed").out.strip()
    path = session_dir(store, sid) / "state.json"
    state = json.loads(path.read_text())
    state[field] = value
    bad = json.dumps(state)
    path.write_text(bad)
    problems = []
    result = call("check", "--json")
    if result.code is None or "Traceback" in result.err:
        problems.append(f"check: {result.err.strip()[-200:]}")
    else:
        rel = f".state/sessions/{sid}/state.json"
        if not any(
            f["path"] == rel and f["severity"] == "error" and f["rule"].startswith("state-")
            for f in json.loads(result.out)["findings"]
        ):
            problems.append("check does not report it")
    for argv in (["boot"], ["status"], ["session", "list"], ["session", "show"]):
        result = call(*argv)
        if result.code is None or "Traceback" in result.err:
            problems.append(f"{argv}: {result.err.strip()[-200:]}")
    for argv in UPDATES:
        path.write_text(bad)
        before = snapshot(store)
        result = call(*argv)
        if result.code is None or "Traceback" in result.err:
            problems.append(f"{argv}: {result.err.strip()[-200:]}")
        elif result.code != 1:
            problems.append(f"{argv} was not refused (exit {result.code})")
        elif snapshot(store) != before:
            problems.append(f"{argv} refused but changed files")
        if not session_dir(store, sid).exists():  # archived after all: put it back
            moved = store / ".state" / "history" / sid[:7] / sid
            moved.rename(session_dir(store, sid))
    assert not problems, "\n".join(problems)


def remove_deep(top: Path) -> None:
    """rmtree recurses once per level; remove a very deep tree from the bottom up."""
    bottom = top
    while (bottom / "d").is_dir():
        bottom = bottom / "d"
    while bottom != top.parent:
        for child in bottom.iterdir():
            if not child.is_dir():
                child.unlink()
        bottom.rmdir()
        bottom = bottom.parent


@pytest.fixture
def deep_refs(store):
    top = store / ".stacks" / "refs" / "d"
    here = os.getcwd()
    os.chdir(store / ".stacks" / "refs")
    try:
        for _ in range(1200):
            os.mkdir("d")
            os.chdir("d")
        Path("deep.md").write_text("# Deep\n\nat the bottom\n")
    finally:
        os.chdir(here)
    yield store
    remove_deep(top)


def test_a_refs_tree_deeper_than_the_limit_is_a_clean_error(deep_refs, call):
    problems = []
    for argv in (["boot"], ["status"], ["search", "bottom"], ["export", "-o", "m.zip"]):
        result = call(*argv)
        if result.code is None or "Traceback" in result.err:
            problems.append(f"{argv}: {result.err.strip()[-200:]}")
    result = call("check", "--json")
    if result.code is None or "Traceback" in result.err:
        problems.append(f"check: {result.err.strip()[-200:]}")
    elif not any(
        f["severity"] == "error" and f["path"].startswith(".stacks/refs")
        for f in json.loads(result.out)["findings"]
    ):
        problems.append("check does not report the too-deep refs tree")
    assert not problems, "\n".join(problems)


# ---- corrupt zips --------------------------------------------------------------------------

ZIP_CONTENT = b"# Guide\n\nzip payload here\n"


def corrupt_zip(kind: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(".stacks/refs/guide.md", ZIP_CONTENT)
    data = bytearray(buffer.getvalue())
    central = data.find(b"PK\x01\x02")
    if kind == "bad-crc":
        at = data.find(ZIP_CONTENT)
        data[at + 2] ^= 0x01
    elif kind == "encrypted":
        data[6] |= 0x01
        data[central + 8] |= 0x01
    elif kind == "unknown-compression":
        data[8:10] = (99).to_bytes(2, "little")
        data[central + 10 : central + 12] = (99).to_bytes(2, "little")
    elif kind == "name-mismatch":
        at = data.find(b"guide.md")  # the local header's copy of the name
        data[at] = ord("x")
    return bytes(data)


@pytest.mark.parametrize("kind", ["bad-crc", "encrypted", "unknown-compression", "name-mismatch"])
def test_import_refuses_a_corrupt_zip_cleanly(project, call, kind):
    (project / "bad.zip").write_bytes(corrupt_zip(kind))
    before = snapshot(project)
    assert_clean_refusal(call("import", "bad.zip"), 1, "bad.zip", "guide.md")
    assert snapshot(project) == before


# ---- invalid UTF-8 in arguments and STM_USER ----------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        [b"log", b"caf\xe9 \xff"],
        [b"note", b"Status", b"caf\xe9"],
        [b"session", b"new", b"--name", b"caf\xe9"],
        [b"session", b"checkpoint", b"--done", b"\xff\xfe"],
        [b"search", b"caf\xe9"],
    ],
    ids=["log", "note", "session-name", "checkpoint", "search"],
)
def test_an_argument_that_is_not_utf8_is_a_usage_error(store, call, argv):
    call("session", "new")
    before = snapshot(store)
    done = subprocess.run(
        [sys.executable, str(STM_PY), *argv], cwd=store, capture_output=True, timeout=60
    )
    result = Result(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode())
    assert_clean_refusal(result, 2)
    assert snapshot(store) == before


@pytest.mark.parametrize("argv", [["log", "hello"], ["session", "new"]], ids=["log", "new"])
def test_stm_user_that_is_not_utf8_is_a_usage_error(store, argv):
    before = snapshot(store)
    env = {k.encode(): v.encode() for k, v in os.environ.items()}
    env[b"STM_USER"] = b"caf\xe9"
    done = subprocess.run(
        [sys.executable, str(STM_PY), *argv], cwd=store, env=env, capture_output=True, timeout=60
    )
    result = Result(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode())
    assert_clean_refusal(result, 2, "STM_USER")
    assert snapshot(store) == before


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999", "-1", "-0.5", "soon"])
def test_a_bad_lock_timeout_is_a_usage_error(store, call, monkeypatch, value):
    monkeypatch.setenv("STM_LOCK_TIMEOUT", value)
    before = snapshot(store)
    assert_clean_refusal(call("log", "x"), 2, "STM_LOCK_TIMEOUT")
    assert snapshot(store) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["--dir", ".stacks", "--state-dir", ".stacks"],
        ["--dir", ".stacks", "--state-dir", "./.stacks/"],
        ["--dir", ".stacks", "--state-dir", ".stacks/state"],
        ["--state-dir", ".stacks/state"],
        ["--dir", "mem/.stacks", "--state-dir", "mem/.stacks/x/y"],
    ],
    ids=["equal", "equal-spelled-otherwise", "inside", "inside-default-dir", "deep-inside"],
)
def test_init_refuses_a_state_dir_equal_to_or_inside_the_stacks_dir(project, call, argv):
    (project / "mem").mkdir()
    before = snapshot(project)
    assert_clean_refusal(call("init", *argv), 2, "--state-dir")
    assert snapshot(project) == before


# ---- files that are not UTF-8 are never silently rewritten ------------------------------------

LATIN1 = b"caf\xe9 cr\xe8me"


def non_utf8_case(store: Path, name: str) -> tuple[Path, list[str]]:
    memory = store / ".stacks" / "MEMORY.md"
    if name == "note":
        memory.write_bytes(MEMORY.encode().replace(b"two precedence bugs.", LATIN1))
        return memory, ["note", "Status", "more"]
    if name == "note-identity":
        agent = store / ".stacks" / "AGENT.md"
        agent.write_bytes(IDENTITY.encode().replace(b"tests before features.", LATIN1))
        return agent, ["note", "Role", "more", "--identity"]
    if name == "fix-heading":
        text = MEMORY.encode().replace(b"## Open Questions\n\nNone yet.\n\n", b"")
        memory.write_bytes(text.replace(b"two precedence bugs.", LATIN1))
        return memory, ["check", "--fix"]
    if name == "fix-gitignore":
        path = store / ".stacks" / ".gitignore"
        path.write_bytes(b"# " + LATIN1 + b"\n")
        return path, ["check", "--fix"]
    path = store / "AGENTS.md"
    path.write_bytes(b"# Project\n\n" + LATIN1 + b"\n")
    return path, ["setup", "agents-md", "--install"]


@pytest.mark.parametrize(
    "name", ["note", "note-identity", "fix-heading", "fix-gitignore", "agents-md"]
)
def test_a_file_that_is_not_utf8_keeps_every_byte_or_is_refused(store, call, name):
    path, argv = non_utf8_case(store, name)
    before = path.read_bytes()
    result = call(*argv)
    assert "Traceback" not in result.err, result
    after = path.read_bytes()
    if after != before:
        assert LATIN1 in after, f"{argv} rewrote the file and lost bytes it did not mean to"


# ---- AGENTS.md markers ---------------------------------------------------------------------------

BEGIN, END = stm.AGENTS_BEGIN, stm.AGENTS_END


@pytest.mark.parametrize(
    "text,line",
    [
        (f"# Project\n\n{BEGIN}\n## Memory (stm)\n- my own notes\n", 3),
        (f"# Project\n{END}\nmine\n", 2),
        (f"# P\n\n{BEGIN}\nx\n{END}\n{BEGIN}\nmine\n", 3),
    ],
    ids=["begin-only", "end-only", "two-begins"],
)
@pytest.mark.parametrize("action", ["--install", "--remove"])
@pytest.mark.parametrize("file", ["AGENTS.md", "CLAUDE.md"])
def test_unbalanced_agents_markers_refuse_with_the_line(store, call, text, line, action, file):
    path = store / file
    path.write_text(text)
    argv = ["setup", "agents-md", action] + (["--file", file] if file != "AGENTS.md" else [])
    result = call(*argv)
    assert result.code not in (0, None), result
    assert "Traceback" not in result.err
    assert re.search(rf"(:|line ){line}\b", result.err), result.err
    assert path.read_text() == text


# ---- import ----------------------------------------------------------------------------------


def source_store(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    new_store(src, handoff=False)
    (src / ".stacks" / "refs" / "guide.md").write_text("# Guide\n\nfrom the source\n")
    return src


@pytest.mark.parametrize("maker", ["zipfile", "zip-r"])
def test_import_accepts_the_archives_zip_r_makes(tmp_path, monkeypatch, call, maker):
    src = source_store(tmp_path)
    archive = tmp_path / "m.zip"
    names = [".stacks/", ".stacks/refs/", ".stacks/refs/guide.md", ".stacks/AGENT.md"]
    if maker == "zip-r":
        if shutil.which("zip") is None:
            pytest.skip("no zip command")
        subprocess.run(
            ["zip", "-r", "-q", str(archive), ".stacks", "-x", "*.stm.lock"],
            cwd=src,
            check=True,
        )
    else:
        with zipfile.ZipFile(archive, "w") as zf:
            for name in names:
                if name.endswith("/"):
                    info = zipfile.ZipInfo(name)
                    info.external_attr = (0o40755 << 16) | 0x10
                    zf.writestr(info, b"")
                else:
                    zf.writestr(name, (src / name).read_bytes())
    with zipfile.ZipFile(archive) as zf:
        assert any(n.endswith("/") for n in zf.namelist())  # directory entries
    target = tmp_path / "dst"
    target.mkdir()
    monkeypatch.chdir(target)
    result = call("import", str(archive))
    assert result.code == 0, result
    assert (target / ".stacks" / "refs" / "guide.md").read_text() == "# Guide\n\nfrom the source\n"


@pytest.mark.parametrize(
    "names",
    [
        [".stacks/refs/a.md", ".stacks/refs/a.md"],
        [".stacks/refs/Guide.md", ".stacks/refs/guide.md"],
        [".stacks/REFS/x.md", ".stacks/refs/x.md"],
    ],
    ids=["duplicate", "case-colliding", "case-colliding-folder"],
)
def test_import_refuses_duplicate_or_case_colliding_names(project, call, names):
    archive = project / "m.zip"
    with warnings.catch_warnings(), zipfile.ZipFile(archive, "w") as zf:
        warnings.simplefilter("ignore")
        for index, name in enumerate(names):
            zf.writestr(name, f"# T{index}\n\nbody {index}\n")
    before = snapshot(project)
    result = call("import", "m.zip")
    assert result.code in (1, 2), result
    assert "Traceback" not in result.err
    assert snapshot(project) == before


def test_import_force_leaves_no_backup_that_check_or_boot_trips_on(tmp_path, monkeypatch, call):
    monkeypatch.setenv("CI", "1")
    stamp = "2026-11-20T10:00:00Z"
    src = source_store(tmp_path)
    dst = tmp_path / "dst"
    new_store(dst, handoff=False)
    (dst / ".stacks" / "refs" / "guide.md").write_text("# Guide\n\nthe local one\n")
    for root, word in ((src, "source"), (dst, "local")):
        entry = stm.render_log_entry(f"from the {word}", "x", stamp, "0badf00d")
        (root / ".stacks" / "logs" / "2026-11-20.md").write_text(entry)
    monkeypatch.chdir(src)
    assert call("export", "-o", str(tmp_path / "m.zip")).code == 0
    monkeypatch.chdir(dst)
    assert call("check").code == 0
    result = call("import", str(tmp_path / "m.zip"), "--force")
    assert result.code == 0, result
    found = findings(call("check", "--json"))
    assert not [f for f in found if f["severity"] == "error"], found
    assert not [f for f in found if ".bak" in f["path"]], found
    assert ".bak" not in call("boot").out


# =========================================================================================
# 4. Interrupted at any point, the next command repairs or reports
# =========================================================================================

KILLER = """
import os, sys
sys.path.insert(0, ROOT)
import stm
owner, name, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
target = stm if owner == "stm" else os
original = getattr(target, name)
calls = [0]
def kill_here(*args, **kwargs):
    calls[0] += 1
    if calls[0] >= nth:
        os._exit(137)  # SIGKILL-like: no cleanup, no undo
    return original(*args, **kwargs)
setattr(target, name, kill_here)
sys.exit(stm.main(sys.argv[4:]))
"""


def killed(tmp_path: Path, cwd: Path, owner: str, name: str, nth: int, *argv: str) -> None:
    """Run stm with `owner.name` replaced by an immediate process exit at its nth call."""
    script = tmp_path / "killer.py"
    script.write_text(KILLER.replace("ROOT", repr(str(ROOT))))
    done = subprocess.run(
        [sys.executable, str(script), owner, name, str(nth), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 137, (done.returncode, done.stderr)


def receipts(store: Path) -> int:
    text = "".join(p.read_text() for p in (store / ".stacks" / "logs").glob("*.md"))
    return text.count("handoff PARSER-42 received from planner-agent")


def rule_paths(result: Result, sid: str, errors_only: bool = False) -> set:
    return {
        (f["rule"], f["path"].replace(sid, "SID"))
        for f in findings(result)
        if f["severity"] == "error" or not errors_only
    }


@pytest.mark.parametrize("step", ["append_log_entry", "switch_pointer"])
def test_compose_handoff_killed_before_its_receipt_is_reported_and_completed(
    store, call, tmp_path, monkeypatch, step
):
    # What check says of a handoff composed without interruption, in a twin store.
    twin = tmp_path / "twin"
    new_store(twin, handoff=False)
    monkeypatch.chdir(twin)
    twin_sid = call("compose-handoff", str(HANDOFF)).out.strip()
    normal = rule_paths(call("check", "--json"), twin_sid)
    normal_errors = rule_paths(call("check", "--json"), twin_sid, errors_only=True)
    monkeypatch.chdir(store)
    killed(tmp_path, store, "stm", step, 1, "compose-handoff", str(HANDOFF))
    assert receipts(store) == 0
    sids = [p.name for p in (store / ".state" / "sessions").iterdir() if p.name[0].isdigit()]
    assert len(sids) == 1  # the session exists, its receipt does not
    found = rule_paths(call("check", "--json"), sids[0])
    assert found - normal, "check does not report a handoff session without its receipt"
    call("check", "--fix")
    again = call("compose-handoff", str(HANDOFF))
    assert again.code == 0, again
    assert receipts(store) == 1, "neither check --fix nor composing again logs the receipt"
    assert rule_paths(call("check", "--json"), sids[0], errors_only=True) <= normal_errors


def test_archive_killed_between_marking_and_moving_is_reported_and_completed(store, call, tmp_path):
    sid = call("session", "new").out.strip()
    killed(tmp_path, store, "os", "rename", 1, "session", "archive")
    state = json.loads((session_dir(store, sid) / "state.json").read_text())
    assert "archived_at" in state  # marked, not moved
    found = findings(call("check", "--json"))
    assert any(sid in f["path"] for f in found), (
        "check does not report a session marked archived but not moved",
        found,
    )
    call("check", "--fix")
    if session_dir(store, sid).exists():
        assert call("session", "archive", sid).code == 0
    assert (store / ".state" / "history" / sid[:7] / sid).is_dir()
    assert not [f for f in findings(call("check", "--json")) if f["severity"] == "error"]


def test_note_killed_before_its_rename_is_reported_and_repaired(store, call, tmp_path):
    killed(tmp_path, store, "os", "replace", 1, "note", "Status", "killed note")
    found = findings(call("check", "--json"))
    assert any(f["rule"] == "temp-file" for f in found), found
    assert call("check", "--fix").code == 0
    assert call("note", "Status", "killed note").code == 0
    assert call("check", "--strict").code == 0


def test_import_killed_between_files_completes_when_run_again(tmp_path, monkeypatch, call):
    src = source_store(tmp_path)
    (src / ".stacks" / "refs" / "more.md").write_text("# More\n\nsecond file\n")
    monkeypatch.chdir(src)
    assert call("export", "-o", str(tmp_path / "m.zip")).code == 0
    dst = tmp_path / "dst"
    dst.mkdir()
    killed(tmp_path, dst, "stm", "atomic_write", 2, "import", str(tmp_path / "m.zip"))
    monkeypatch.chdir(dst)
    result = call("import", str(tmp_path / "m.zip"))
    assert result.code == 0, result
    with zipfile.ZipFile(tmp_path / "m.zip") as zf:
        for name in zf.namelist():
            assert (dst / name).read_bytes() == zf.read(name), name


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


# =========================================================================================
# 5. Size: linear time, bounded memory
# =========================================================================================

LOREM = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "


def write_log(path: Path, entries: int | None = None, size: int | None = None, torn=False):
    body = "\n".join((LOREM * 2)[:110] for _ in range(50)) if size else "a short entry"
    written, n = 0, 0
    with open(path, "w") as f:
        while (entries is not None and n < entries) or (size is not None and written < size):
            eid = f"{n:08x}"
            stamp = f"2026-11-20T{(n // 3600) % 24:02d}:{(n // 60) % 60:02d}:{n % 60:02d}Z"
            entry = (
                f"## {stamp} · tester <!-- stm:entry {eid} -->\n\nentry {n}\n{body}\n\n"
                f"<!-- stm:end {eid} -->\n"
            )
            text = ("\n" if n else "") + entry
            f.write(text)
            written += len(text)
            n += 1
        if torn:
            f.write("\n## 2026-11-20T23:59:59Z · tester <!-- stm:entry ffffffff -->\n\ntorn\n")


def test_check_is_linear_on_a_log_with_a_torn_last_entry(store):
    write_log(store / ".stacks" / "logs" / "2026-11-20.md", entries=16_000, torn=True)
    try:
        done = run_stm("check", "--json", cwd=store, timeout=20, env={"CI": "1"})
    except subprocess.TimeoutExpired:
        pytest.fail("check did not finish in 20 s on 16,000 entries and a torn tail (quadratic)")
    rules = [f["rule"] for f in json.loads(done.stdout)["findings"]]
    assert rules == ["log-torn"], rules


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("big")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STM_FSYNC", "0")
        new_store(root, handoff=False)
    write_log(root / ".stacks" / "logs" / "2026-11-20.md", size=60 * 1024 * 1024)
    return root


MEASURE = (
    "import resource, subprocess, sys; "
    "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode, "
    "repr(done.stderr[-300:]))"
)


@pytest.mark.parametrize(
    "argv",
    [["status"], ["check"], ["search", "zzzz-not-there"], ["export", "-o", "OUT"]],
    ids=["status", "check", "search", "export"],
)
def test_big_files_are_streamed_in_bounded_memory(big_store, tmp_path, argv):
    argv = [a.replace("OUT", str(tmp_path / "m.zip")) for a in argv]
    done = run_process(
        [sys.executable, "-c", MEASURE, sys.executable, STM_PY, *argv],
        cwd=big_store,
        timeout=120,
        env={"CI": "1", "STM_FSYNC": "0"},
    )
    peak_kib, code, err = done.stdout.split(" ", 2)
    assert "Traceback" not in err and code in ("0", "1"), (code, err)
    assert int(peak_kib) < 100 * 1024, f"{argv}: peak {int(peak_kib) // 1024} MiB on a 60 MB log"
