"""The paths stm opens and writes: it never follows a link out of the store, never
writes through a hard link, never blocks on a special file, refuses `-o` onto anything but
a regular file, refuses a store above the repository or owned by someone else, and boots
past an unreadable folder.

Anything that could hang (FIFOs, devices) runs in a subprocess under a time limit, and a
test that failed because something hung says so.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from conftest import IDENTITY, MEMORY, ROOT, snapshot
from helpers import (
    HANDOFF,
    Unprivileged,
    assert_clean_refusal,
    fake_token,
    findings,
    handoff_json,
    new_store,
    session_dir,
    today,
)

# The findings of a `check --json` Result, which must hold no traceback.
findings = functools.partial(findings, no_traceback=True)


BAIT = "BAIT-7f3c91"  # text only a followed link could bring into stm's output


OLD_SID = "2026-11-01-0badf00d"  # a session id that only the victim folder holds


IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


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


def git_file_rules() -> set:
    return {"git-attributes", "git-ignore"}


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
    stamp = "2026-11-01T00:00:00Z"  # date-safe: literal
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


def test_output_to_a_regular_file_or_a_new_path_works(store, call):
    assert call("boot", "-o", "new.md").code == 0
    assert call("boot", "-o", "new.md").code == 0  # an existing regular file
    assert call("export", "-o", "new.zip").code == 0
    assert call("compose-handoff", str(HANDOFF), "--print", "-o", "print.md").code == 0


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
