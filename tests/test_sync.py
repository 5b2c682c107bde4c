"""`stm sync` and checkpoints (spec/sync.md), with the real git: bare repositories on
disk and behind git's own smart-HTTP server (`git http-backend` under a small CGI server
on 127.0.0.1), clones with local work, many agents syncing at once.

Every git and stm process gets a private git configuration (GIT_CONFIG_GLOBAL, no system
file) and no merge driver installed: sync passes its own to git.

The many-agents proof runs 4 clones x 5 rounds here; `STM_TESTS_SCALE=full` runs the
20 x 25 the issue asks for (minutes on a small machine) and prints its figures.

Run as a script (`python3 tests/test_sync.py agent CLONE NAME ROUNDS`) this file is one
of those agents.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from conftest import ROOT, STM_PY, TODAY
from helpers import GIT, fake_token, git_out, limited, run_sh, run_stm

import stm

pytestmark = pytest.mark.git  # git-heavy: `pytest -m 'not git'` leaves this file out

FULL = os.environ.get("STM_TESTS_SCALE") == "full"
CLONES, ROUNDS = (20, 25) if FULL else (4, 5)
GIT_ENV_DROPPED = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_COMMON_DIR",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "STM_SESSION",
    "STM_SYNC_TIMEOUT",
)


def git_version() -> tuple[int, int]:
    found = re.search(
        r"(\d+)\.(\d+)", subprocess.run(["git", "version"], capture_output=True, text=True).stdout
    )
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


pytestmark = pytest.mark.skipif(
    GIT is None or git_version() < stm.SYNC_GIT_MIN, reason="stm sync needs git 2.38+"
)


@pytest.fixture(autouse=True)
def git_env(tmp_path_factory, monkeypatch):
    """A private git configuration and a fixed identity, for this process and every
    process it starts."""
    config = tmp_path_factory.mktemp("gitconfig") / "config"
    config.write_text("[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n")
    for name in GIT_ENV_DROPPED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "tester")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "tester@example.invalid")


# ---- helpers --------------------------------------------------------------------------


git = functools.partial(git_out, strip=True)  # its stdout, stripped; check=False: any exit code


def stm_at(cwd, *args: str) -> subprocess.CompletedProcess:
    """stm run in-process in `cwd` (git, and the merge driver git starts, are real
    processes all the same)."""
    import contextlib
    import io

    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = stm.main(list(args))
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["stm", *args], code, out.getvalue(), err.getvalue())


def stm_process(cwd, *args: str, **options) -> subprocess.CompletedProcess:
    """stm as a real process in `cwd` (options as for helpers.run_process)."""
    return run_stm(*args, cwd=cwd, **{"timeout": None, **options})


def ok(cwd, *args: str) -> str:
    done = stm_at(cwd, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def make_remote(tmp: Path) -> tuple[Path, Path]:
    """A bare repository holding one commit: an stm store and some code."""
    bare = tmp / "remote.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    seed = tmp / "seed"
    seed.mkdir()
    git(seed, "init", "-q")
    ok(seed, "init")
    (seed / ".stacks" / "MEMORY.md").write_text(
        "# Session Memory\n\n## Status\n\nStarted.\n\n## Observations\n\n## Next Steps\n\n"
        f"## Last Updated\n\n{TODAY}\n"
    )
    (seed / "code.py").write_text("def main():\n    return 1\n\n\ndef other():\n    return 2\n")
    (seed / "README.txt").write_text("a project\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "start")
    git(seed, "remote", "add", "origin", str(bare))
    git(seed, "push", "-q", "-u", "origin", "main")
    return bare, seed


def clone(source, dest: Path) -> Path:
    git(dest.parent, "clone", "-q", str(source), str(dest))
    return dest


def repo_state(path: Path) -> dict:
    """What a refusal must not change: every file's bytes (memory and the user's), the
    index, HEAD and every ref."""
    files = {}
    for folder, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            if name == ".stm.lock":
                continue
            full = os.path.join(folder, name)
            files[os.path.relpath(full, path)] = hashlib.sha256(Path(full).read_bytes()).hexdigest()
    return {
        "files": files,
        "index": git(path, "ls-files", "-s", "--debug"),
        "refs": git(path, "for-each-ref", "--format=%(refname) %(objectname)"),
        "head": git(path, "symbolic-ref", "-q", "HEAD", check=False),
    }


def user_view(path: Path) -> dict:
    """The user's work as git sees it: staged and unstaged diffs and untracked files,
    outside memory, and the bytes of every file outside memory."""
    outside = ["--", ".", ":(exclude).stacks", ":(exclude).state"]
    files = {
        name: (path / name).read_bytes()
        for name in git(path, "ls-files", "-co", "--exclude-standard", *outside).splitlines()
        if (path / name).is_file()
    }
    return {
        "staged": git(path, "diff", "--cached", *outside),
        "unstaged": git(path, "diff", *outside),
        "untracked": git(path, "ls-files", "-o", "--exclude-standard", *outside),
        "files": files,
    }


def log_texts(path: Path) -> list[str]:
    """The bodies of every log entry in a store, as text."""
    texts = []
    for log in sorted((path / ".stacks" / "logs").glob("*.md")):
        for kind, *rest in stm.parse_log(log.read_bytes()):
            if kind == "entry":
                assert rest[0].complete, log
                texts.append("\n".join(rest[0].body).strip())
    return texts


def head_tree(path) -> str:
    return git(path, "rev-parse", "HEAD^{tree}")


def no_markers(path: Path) -> None:
    for folder in (".stacks", ".state"):
        for file in (path / folder).rglob("*"):
            if file.is_file():
                text = file.read_text(errors="replace")
                assert "<<<<<<<" not in text and ">>>>>>>" not in text, file


# ---- what sync commits, and what it leaves alone ---------------------------------------


def test_sync_sends_memory_and_keeps_staged_unstaged_and_untracked_work(tmp_path):
    bare, seed = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    b = clone(bare, tmp_path / "b")
    ok(a, "log", "parser fixed in a")
    ok(a, "note", "Observations", "a noticed this")
    (a / "code.py").write_text("def main():\n    return 10\n\n\ndef other():\n    return 2\n")
    git(a, "commit", "-q", "-am", "a changes code")  # a code commit, pushed along
    assert "sent to origin/main" in ok(a, "sync")

    ok(b, "log", "b worked on docs")
    (b / "README.txt").write_text("a project\nstaged line\n")
    git(b, "add", "README.txt")
    with open(b / "README.txt", "a") as f:
        f.write("unstaged line\r\nno newline at the end")
    (b / "notes.tmp.txt").write_bytes(b"untracked \x00 bytes\n")
    (b / "README.txt").chmod(0o755)  # a mode change, unstaged
    before = user_view(b)
    result = json.loads(ok(b, "sync", "--json"))
    assert result["pushed"] and result["retries"] == 0
    assert result["sent"]["log_entries"] == 1 and result["received"]["log_entries"] == 1
    assert result["received"]["notes"] == 1
    after = user_view(b)
    # The user's work is byte for byte what it was, except code.py, which the upstream
    # changed: it arrived, since b had not changed it.
    assert after["staged"] == before["staged"]
    assert after["untracked"] == before["untracked"]
    assert after["unstaged"] == before["unstaged"]
    assert {k: v for k, v in after["files"].items() if k != "code.py"} == {
        k: v for k, v in before["files"].items() if k != "code.py"
    }
    assert (b / "code.py").read_text().startswith("def main():\n    return 10")
    assert os.access(b / "README.txt", os.X_OK)
    # Memory is committed and clean; the remote holds both sides' memory.
    assert git(b, "status", "--porcelain", "--", ".stacks", ".state") == ""
    assert git(b, "rev-parse", "HEAD") == git(bare, "rev-parse", "main")
    texts = log_texts(b)
    assert "parser fixed in a" in texts and "b worked on docs" in texts
    assert "README.txt" not in git(b, "show", "--name-only", "--format=", "HEAD^1")
    assert git(b, "diff", "--cached", "--name-only") == "README.txt"


def test_sync_never_sends_stm_s_backups_even_with_an_old_gitignore(tmp_path):
    bare, seed = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    ignore = a / ".stacks" / ".gitignore"
    ignore.write_text(ignore.read_text().replace("*.bak\n", ""))  # as init wrote it before
    git(a, "commit", "-q", "-am", "an older store's .gitignore")
    (a / ".stacks" / "MEMORY.md.20260101T000000Z.bak").write_text("the old memory\n")
    (a / ".stacks" / "refs" / ".deploy.md.bak").write_text("an import's backup\n")
    ok(a, "log", "worked")
    assert "sent to origin/main" in ok(a, "sync")
    sent = git(bare, "ls-tree", "-r", "--name-only", "main")
    assert ".stacks/logs/" in sent and ".bak" not in sent
    assert (a / ".stacks" / "MEMORY.md.20260101T000000Z.bak").exists()  # kept, not sent


def test_sync_in_a_clone_that_never_installed_the_merge_driver_merges_memory(tmp_path):
    bare, _ = make_remote(tmp_path)
    a, b = clone(bare, tmp_path / "a"), clone(bare, tmp_path / "b")
    assert git(a, "config", "--get", "merge.stm.driver", check=False) == ""
    for who, where in (("a", a), ("b", b)):
        ok(where, "note", "Next Steps", f"{who} next")
        ok(where, "fact", "set", "language", f"{who} language")
    ok(a, "note", "Status", "a rewrote the status", "--replace")
    ok(a, "sync")
    ok(b, "sync")
    ok(a, "sync")
    assert head_tree(a) == head_tree(b)
    memory = (a / ".stacks" / "MEMORY.md").read_text()
    assert "- a next" in memory and "- b next" in memory and "a rewrote the status" in memory
    facts = (a / ".stacks" / "refs" / "facts.md").read_text()
    assert ": a language" in facts and ": b language" in facts
    no_markers(a)
    # Both rewrite the same prose differently: never a refusal for memory (issue 35). The
    # newer version stands, the other is kept in the log (merge.md, "Memory disagreements").
    for who, where in (("a", a), ("b", b)):
        ok(where, "note", "Status", f"{who} says otherwise", "--replace")
    ok(a, "sync")
    ok(b, "sync")
    ok(a, "sync")
    assert head_tree(a) == head_tree(b)
    memory = (b / ".stacks" / "MEMORY.md").read_text()
    assert memory.count("says otherwise") == 1 and "<!-- stm:settled " in memory, memory
    logs = "".join(log_texts(b))
    assert "> a says otherwise" in logs or "> b says otherwise" in logs, logs
    no_markers(b)


def test_sync_merges_memory_exactly_as_git_with_the_stm_driver_would(tmp_path):
    bare, _ = make_remote(tmp_path)
    a, b = clone(bare, tmp_path / "a"), clone(bare, tmp_path / "b")
    for who, where in (("a", a), ("b", b)):
        for n in range(3):
            ok(where, "note", "Observations", f"{who} saw {n}")
            ok(where, "fact", "set", "tool", f"{who} tool {n}")
        ok(where, "log", f"{who} logged")
    ok(b, "note", "Status", "b rewrote the status", "--replace")
    ok(a, "sync")
    ok(b, "commit", "-m", "b's memory")
    git(b, "fetch", "-q")
    driver = f"{sys.executable} {STM_PY} merge-file %O %A %B --marker-size %L --path %P"
    expected = git(
        b, "-c", f"merge.stm.driver={driver}", "merge-tree", "--write-tree", "HEAD", "origin/main"
    )
    ok(b, "sync")
    assert head_tree(b) == expected


def test_sync_integrates_code_both_sides_changed_when_git_can(tmp_path):
    bare, seed = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    text = (seed / "code.py").read_text()
    (seed / "code.py").write_text(text.replace("return 2", "return 20"))
    git(seed, "commit", "-q", "-am", "upstream changes other()")
    git(seed, "push", "-q")
    (a / "code.py").write_text(text.replace("return 1", "return 10"))
    git(a, "commit", "-q", "-am", "a changes main()")
    ok(a, "log", "both changed code.py")
    ok(a, "sync")
    merged = (a / "code.py").read_text()
    assert "return 10" in merged and "return 20" in merged
    assert git(a, "rev-parse", "HEAD") == git(bare, "rev-parse", "main")
    assert git(a, "status", "--porcelain") == ""


def test_sync_refuses_when_both_sides_changed_the_same_code_and_changes_nothing(tmp_path):
    bare, seed = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    text = (seed / "code.py").read_text()
    (seed / "code.py").write_text(text.replace("return 1", "return 100"))
    git(seed, "commit", "-q", "-am", "upstream changes main()")
    git(seed, "push", "-q")
    (a / "code.py").write_text(text.replace("return 1", "return 10"))
    git(a, "commit", "-q", "-am", "a changes main() too")
    ok(a, "log", "a logs")
    remote_before = git(bare, "rev-parse", "main")
    before = repo_state(a)
    done = stm_at(a, "sync")
    assert done.returncode == 1
    assert "both changed code.py" in done.stderr and "nothing changed" in done.stderr
    assert "git pull --no-rebase" in done.stderr
    after = repo_state(a)
    tracking = "refs/remotes/origin/"  # the fetch moved them, as `git fetch` does
    assert {k: v for k, v in after.items() if k != "refs"} == {
        k: v for k, v in before.items() if k != "refs"
    }
    strip = lambda refs: [r for r in refs.splitlines() if not r.startswith(tracking)]  # noqa: E731
    assert strip(after["refs"]) == strip(before["refs"])
    assert git(bare, "rev-parse", "main") == remote_before


def test_sync_refuses_when_the_upstream_changed_a_file_with_uncommitted_work(tmp_path):
    bare, seed = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    (seed / "README.txt").write_text("a project, renamed\n")
    git(seed, "commit", "-q", "-am", "upstream edits the readme")
    git(seed, "push", "-q")
    ok(a, "log", "a logs")
    for case in ("unstaged", "staged"):
        (a / "README.txt").write_text(f"my {case} edit\n")
        if case == "staged":
            git(a, "add", "README.txt")
        before, remote_before = repo_state(a), git(bare, "rev-parse", "main")
        done = stm_at(a, "sync")
        assert done.returncode == 1, done
        assert "origin/main changed README.txt" in done.stderr
        assert "git stash" in done.stderr and "nothing changed" in done.stderr
        after = repo_state(a)
        assert after["files"] == before["files"] and after["index"] == before["index"]
        assert after["head"] == before["head"]
        assert git(bare, "rev-parse", "main") == remote_before
    # Once the work is committed, sync integrates it with the upstream's.
    git(a, "commit", "-q", "-am", "my readme")
    done = stm_at(a, "sync")
    assert done.returncode == 1 and "both changed README.txt" in done.stderr


@pytest.mark.parametrize("situation", ["detached", "merge", "rebase", "cherry-pick", "markers"])
def test_sync_refuses_and_changes_nothing(tmp_path, situation):
    bare, seed = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    ok(a, "log", "unsynced memory")
    if situation == "detached":
        git(a, "checkout", "-q", "--detach")
        expected = "HEAD is detached"
    elif situation in ("merge", "rebase", "cherry-pick"):
        git(a, "switch", "-q", "-c", "side")
        (a / "README.txt").write_text("side\n")
        git(a, "commit", "-q", "-am", "side")
        git(a, "switch", "-q", "main")
        (a / "README.txt").write_text("main\n")
        git(a, "commit", "-q", "-am", "main")
        command = {"merge": ["merge", "side"], "rebase": ["rebase", "side"]}.get(
            situation, ["cherry-pick", "side"]
        )
        git(a, *command, check=False)
        expected = {"merge": "a merge", "rebase": "a rebase", "cherry-pick": "a cherry-pick"}[
            situation
        ]
    else:
        memory = a / ".stacks" / "MEMORY.md"
        memory.write_text(memory.read_text() + "<<<<<<< ours\nx\n=======\ny\n>>>>>>> theirs\n")
        expected = "conflict markers: .stacks/MEMORY.md"
    before, remote_before = repo_state(a), git(bare, "rev-parse", "main")
    done = stm_at(a, "sync")
    assert done.returncode == 1, done
    assert expected in done.stderr and "nothing changed" in done.stderr, done.stderr
    assert repo_state(a) == before
    assert git(bare, "rev-parse", "main") == remote_before


def test_sync_without_an_upstream_names_remote_and_the_git_command(tmp_path):
    bare, seed = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    git(a, "switch", "-q", "-c", "feature")
    ok(a, "log", "on a new branch")
    before = repo_state(a)
    done = stm_at(a, "sync")
    assert done.returncode == 1
    assert "--remote NAME" in done.stderr
    assert "git branch --set-upstream-to=origin/feature" in done.stderr
    assert "git push -u origin feature" in done.stderr
    assert repo_state(a) == before
    unknown = stm_at(a, "sync", "--remote", "elsewhere")
    assert unknown.returncode == 1 and "no such remote (remotes here: origin)" in unknown.stderr
    # --remote names it: the first sync creates the branch there.
    report = json.loads(ok(a, "sync", "--remote", "origin", "--json"))
    assert report["upstream"] == "origin/feature" and report["pushed"]
    assert git(bare, "rev-parse", "feature") == git(a, "rev-parse", "HEAD")
    assert git(bare, "rev-parse", "main") == git(seed, "rev-parse", "main")


def test_sync_dry_run_says_what_would_move_and_changes_nothing(tmp_path):
    bare, seed = make_remote(tmp_path)
    a, b = clone(bare, tmp_path / "a"), clone(bare, tmp_path / "b")
    ok(b, "log", "from b")
    ok(b, "sync")
    ok(a, "log", "from a")
    ok(a, "note", "Observations", "seen in a")
    before, remote_before = repo_state(a), git(bare, "rev-parse", "main")
    report = json.loads(ok(a, "sync", "--dry-run", "--json"))
    assert report["dry_run"] and not report["pushed"] and report["commit"] is None
    assert report["sent"]["log_entries"] == 1 and report["sent"]["notes"] == 1
    assert report["received"]["log_entries"] == 1
    assert git(bare, "rev-parse", "main") == remote_before
    after = repo_state(a)
    assert after["files"] == before["files"] and after["index"] == before["index"]
    text = ok(a, "sync", "--dry-run")
    assert text.startswith("would send to origin/main: 2 files: 1 log entry, 1 note")


def test_sync_names_boot_as_it_was_run(tmp_path):
    """Run as `python3 stm.py sync`, the line that says what arrived names that command."""
    bare, _ = make_remote(tmp_path)
    a, b = clone(bare, tmp_path / "a"), clone(bare, tmp_path / "b")
    ok(b, "log", "b only")
    ok(b, "sync")
    done = stm_process(a, "sync")
    assert done.returncode == 0, done.stderr
    received = [n for n in done.stdout.splitlines() if n.startswith("received: ")]
    assert received and received[0].endswith("/stm.py boot` shows it"), done.stdout
    assert "`stm boot`" not in done.stdout


def test_sync_json_keys_are_the_documented_ones(tmp_path):
    bare, _ = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    ok(a, "log", "x")
    report = json.loads(ok(a, "sync", "--json", "-m", "memory: my message"))
    spec = (ROOT / "spec" / "json.md").read_text()
    keys = re.search(r"^### `stm sync --json`\nKeys: (.+)$", spec, re.M).group(1)
    assert set(report) == set(re.findall(r"`(\w+)`", keys))
    assert set(report["sent"]) == set(stm.SYNC_COUNTS) == set(report["received"])
    assert git(a, "log", "-1", "--format=%s", "HEAD") == "memory: my message"
    assert report["commits_sent"] == 1 and report["schema_version"] == 1


def test_nothing_to_send_fast_forwards_and_a_second_sync_is_quiet(tmp_path):
    bare, seed = make_remote(tmp_path)
    a, b = clone(bare, tmp_path / "a"), clone(bare, tmp_path / "b")
    ok(b, "log", "b only")
    ok(b, "sync")
    report = json.loads(ok(a, "sync", "--json"))
    assert not report["pushed"] and report["commits_sent"] == 0
    assert git(a, "rev-parse", "HEAD") == git(bare, "rev-parse", "main")
    assert ok(a, "sync") == "nothing to send to origin/main\nreceived: nothing new\n"


def test_a_push_rejected_for_another_reason_is_not_retried(tmp_path):
    bare, _ = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'policy: no pushes today' >&2\nexit 1\n")
    hook.chmod(0o755)
    ok(a, "log", "x")
    before = repo_state(a)
    done = stm_at(a, "sync")
    assert done.returncode == 1 and "pre-receive hook declined" in done.stderr
    assert "lost" not in done.stderr
    after = repo_state(a)
    assert after["files"] == before["files"] and after["index"] == before["index"]
    assert after["refs"] == before["refs"]


def test_a_push_that_finds_the_remote_ref_locked_is_retried(tmp_path):
    """`cannot lock ref` / `failed to update ref`: another push holds the ref."""
    bare, _ = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    ok(a, "log", "x")
    lock = bare / "refs" / "heads" / "main.lock"
    lock.write_text("")
    timer = threading.Timer(1.0, lock.unlink)
    timer.start()
    try:
        report = json.loads(ok(a, "sync", "--json"))
    finally:
        timer.join()
    assert report["pushed"] and report["retries"] >= 1
    assert git(bare, "rev-parse", "main") == git(a, "rev-parse", "HEAD")


# ---- boot after sync -------------------------------------------------------------------


def test_boot_after_sync_shows_the_handoffs_and_sessions_that_arrived(tmp_path):
    bare, _ = make_remote(tmp_path)
    a, b = clone(bare, tmp_path / "a"), clone(bare, tmp_path / "b")
    ok(b, "session", "new", "--name", "b's own work")  # b has a current session
    ok(b, "boot")
    handoff = json.loads((ROOT / "spec" / "handoff-example.json").read_text())
    (a / "handoff.json").write_text(json.dumps(handoff))
    sid = ok(a, "compose-handoff", "handoff.json", "--no-switch").strip()
    other = json.loads(ok(a, "session", "new", "--name", "a's session", "--json"))["session_id"]
    ok(a, "log", "a hands over")
    (a / "handoff.json").unlink()
    ok(a, "sync")
    report = json.loads(ok(b, "sync", "--json"))
    assert report["received"]["handoffs"] == 1 and report["received"]["sessions"] == 2
    boot = ok(b, "boot")
    block = boot.split("## Arrived with the last sync", 1)[1].split("\n## ", 1)[0]
    assert "2 log entries" in block and "1 handoff" in block  # a handoff logs a receipt
    assert f"`{sid}`" in block and f"stm session switch {sid}" in block and "HANDOFF" in block
    assert f"`{other}`" in block
    assert "## Active workflow" in boot  # b's own session is still current
    assert "## Arrived with the last sync" not in ok(b, "boot")  # shown until the next boot


# ---- smart HTTP ------------------------------------------------------------------------


class GitHttp:
    """git's smart-HTTP server: `git http-backend` run as a CGI program for each request
    by a small threaded HTTP server on 127.0.0.1, asking for a user and token (HTTP basic
    authentication) as a hosted service does."""

    def __init__(self, root: Path, user: str, token: str):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()
        backend_env = {
            **os.environ,
            "GIT_PROJECT_ROOT": str(root),
            "GIT_HTTP_EXPORT_ALL": "1",
        }

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.cgi()

            def do_POST(self):
                self.cgi()

            def body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def cgi(self):
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path, _, query = self.path.partition("?")
                data = self.body()
                env = {
                    **backend_env,
                    "REQUEST_METHOD": self.command,
                    "PATH_INFO": path,
                    "QUERY_STRING": query,
                    "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                    "CONTENT_LENGTH": str(len(data)),
                    "REMOTE_USER": user,
                    "REMOTE_ADDR": "127.0.0.1",
                    "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
                    "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                }
                done = subprocess.run(
                    ["git", "http-backend"], input=data, env=env, capture_output=True
                )
                head, _, payload = done.stdout.partition(b"\r\n\r\n")
                status, headers = 200, []
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.lower() == "status":
                        status = int(value.split()[0])
                    elif name:
                        headers.append((name, value.strip()))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_sync_through_git_smart_http_with_a_token(tmp_path):
    bare, _ = make_remote(tmp_path)
    git(bare, "config", "http.receivepack", "true")
    with GitHttp(tmp_path, "agent", "s3cret-t0ken") as server:
        url = f"http://agent:s3cret-t0ken@127.0.0.1:{server.port}/remote.git"
        a, b = clone(url, tmp_path / "a"), clone(url, tmp_path / "b")
        denied = subprocess.run(
            ["git", "ls-remote", f"http://127.0.0.1:{server.port}/remote.git"],
            capture_output=True,
            text=True,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
        assert denied.returncode != 0  # the token is what lets a clone in
        for who, where in (("a", a), ("b", b)):
            ok(where, "log", f"{who} over http")
            ok(where, "note", "Next Steps", f"{who} over http")
        first = json.loads(ok(a, "sync", "--json"))
        second = json.loads(ok(b, "sync", "--json"))
        assert first["pushed"] and second["pushed"]
        assert second["received"]["log_entries"] == 1
        ok(a, "sync")
        assert head_tree(a) == head_tree(b) == git(bare, "rev-parse", "main^{tree}")
        assert sorted(log_texts(a)) == ["a over http", "b over http"]


# ---- many agents at once -----------------------------------------------------------------


def agent(clone_dir: str, name: str, rounds: int) -> int:
    """One agent: `rounds` rounds of log, note, fact set, session checkpoint and sync, in
    process. Prints {"retries", "failures"} as JSON."""
    import contextlib
    import io

    os.chdir(clone_dir)

    def call(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = stm.main(list(argv))
        return code, out.getvalue(), err.getvalue()

    retries, failures = 0, []
    code, _, err = call("session", "new", "--name", f"agent {name}")
    if code:
        failures.append(err)
    for r in range(rounds):
        for argv in (
            ("log", f"agent {name} round {r} log"),
            ("note", "Observations", f"agent {name} round {r} note"),
            ("fact", "set", f"agent_{name}", f"round {r}"),
            ("fact", "set", "shared", f"agent {name} round {r}"),
            ("session", "checkpoint", "--done", f"round {r}", "--resume", f"round {r + 1}"),
            ("sync", "--json"),
        ):
            code, out, err = call(*argv)
            if code in (130, 143):  # interrupted, terminated: the run is over
                return code
            if code:
                failures.append(f"{argv[0]} in round {r}: {err.strip()}")
            elif argv[0] == "sync":
                retries += json.loads(out)["retries"]
    print(json.dumps({"retries": retries, "failures": failures}))
    return 0


def test_many_agents_sync_at_once_and_converge(tmp_path):
    bare, _ = make_remote(tmp_path)
    clones = [clone(bare, tmp_path / f"agent{i:02d}") for i in range(CLONES)]
    for i, where in enumerate(clones):  # each agent has uncommitted work of its own
        with open(where / "code.py", "a") as f:
            f.write(f"# local edit of agent {i}\n")
        (where / f"scratch-{i}.txt").write_text("untracked\n")
        git(where, "add", f"scratch-{i}.txt")
    views = [user_view(where) for where in clones]
    env = {**os.environ, "STM_SYNC_TIMEOUT": "900", "STM_FSYNC": "0"}
    started = time.monotonic()
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "agent",
                str(where),
                f"{i:02d}",
                str(ROUNDS),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i, where in enumerate(clones)
    ]
    results = []
    for process in agents:
        out, err = process.communicate(timeout=3600)
        assert process.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.monotonic() - started
    failures = [f for r in results for f in r["failures"]]
    assert failures == []
    for where in clones:  # one more sync each: every clone has it all
        ok(where, "sync")
    retries = sum(r["retries"] for r in results)
    print(
        f"\n{CLONES} agents x {ROUNDS} rounds: {wall:.1f} s, {CLONES * ROUNDS} syncs, "
        f"{retries} push retries, {git(bare, 'rev-list', '--count', 'main')} commits"
    )
    tree = git(bare, "rev-parse", "main^{tree}")
    for i, where in enumerate(clones):
        assert head_tree(where) == tree
        assert git(where, "status", "--porcelain", "--", ".stacks", ".state") == ""
        assert user_view(where) == views[i]  # no non-memory file changed
        no_markers(where)
    final = clones[0]
    names = [f"{i:02d}" for i in range(CLONES)]
    expected_logs = Counter(f"agent {n} round {r} log" for n in names for r in range(ROUNDS))
    assert Counter(t for t in log_texts(final) if t.startswith("agent ")) == expected_logs
    memory = (final / ".stacks" / "MEMORY.md").read_text()
    notes = Counter(re.findall(r"^- (agent \d+ round \d+ note)$", memory, re.M))
    assert notes == Counter(f"agent {n} round {r} note" for n in names for r in range(ROUNDS))
    block = stm.parse_fact_block((final / ".stacks" / "refs" / "facts.md").read_text())[1]
    facts = {key: fact for key, fact, _, _ in block}
    for n in names:
        values = Counter(value for _, value, _ in facts[f"agent_{n}"].history)
        assert values == Counter(f"round {r}" for r in range(ROUNDS))
    shared = Counter(value for _, value, _ in facts["shared"].history)
    assert shared == Counter(f"agent {n} round {r}" for n in names for r in range(ROUNDS))
    sessions = [p for p in (final / ".state" / "sessions").iterdir() if p.is_dir()]
    assert len(sessions) == CLONES
    for folder in sessions:
        lines = (folder / "history.jsonl").read_text().splitlines()
        assert len(lines) == len(set(lines)) == ROUNDS + 1
        events = [json.loads(line) for line in lines]
        assert sorted(e["version"] for e in events) == list(range(1, ROUNDS + 2))
    check = json.loads(ok(final, "check", "--json"))
    assert check["counts"]["error"] == 0, check["findings"]


# ---- checkpoints -------------------------------------------------------------------------


def configure(project: Path, **config) -> None:
    (project / ".stacks" / "config.json").write_text(json.dumps(config))


def checkpoints(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("stm-checkpoint-*.zip"))


def test_every_nth_write_leaves_a_checkpoint_and_the_newest_are_kept(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    ok(project, "init")
    out = tmp_path / "outputs"
    configure(project, checkpoint_every=3, checkpoint_dir=str(out), checkpoint_keep=2)
    for n in range(2):
        ok(project, "log", f"entry {n}")
    assert not out.exists() or checkpoints(out) == []
    ok(project, "log", "entry 2")  # the 3rd write
    assert len(checkpoints(out)) == 1
    for n in range(3, 5):  # writes 4 and 5
        ok(project, "log", f"entry {n}")
    ok(project, "note", "Next Steps", "a note is a write")  # the 6th
    first_two = checkpoints(out)
    assert len(first_two) == 2
    ok(project, "fact", "set", "k", "v")
    ok(project, "session", "new", "--name", "s")
    ok(project, "session", "checkpoint", "--resume", "go on")  # the 9th
    names = checkpoints(out)
    assert len(names) == 2 and names[0] == first_two[1] and names[1] > first_two[1]
    assert [p.name for p in out.iterdir() if p.name not in names] == []  # no temp files
    ok(project, "search", "entry")  # reads are not writes
    ok(project, "compact", "--dry-run")
    assert checkpoints(out) == names
    newest = zipfile.ZipFile(out / names[-1])
    assert newest.testzip() is None
    members = newest.namelist()
    assert ".stacks/MEMORY.md" in members and any(m.startswith(".state/sessions/") for m in members)
    assert ".state/.writes" not in members and ".state/current-session.json" not in members
    # A fresh container: `stm import` restores the newest checkpoint.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / ".stacks").mkdir()
    configure(fresh, checkpoint_every=3, checkpoint_dir=str(out))
    done = stm_process(fresh, "import", "--force")
    assert done.returncode == 0, done.stderr
    assert names[-1] in done.stderr
    assert sorted(log_texts(fresh)) == [f"entry {n}" for n in range(5)]
    assert "a note is a write" in (fresh / ".stacks" / "MEMORY.md").read_text()


def test_checkpoints_need_a_valid_config(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    ok(project, "init")
    configure(project, checkpoint_every=2)
    findings = json.loads(stm_at(project, "check", "--json").stdout)["findings"]
    assert any("checkpoint_every needs checkpoint_dir" in f["message"] for f in findings)
    ok(project, "log", "written all the same")
    ok(project, "log", "and again")
    configure(project, checkpoint_every=-1, checkpoint_dir="out", checkpoint_keep=0)
    findings = json.loads(stm_at(project, "check", "--json").stdout)["findings"]
    messages = " ".join(f["message"] for f in findings)
    assert "checkpoint_every must be" in messages and "checkpoint_keep must be" in messages
    assert "fix it first" in stm_at(project, "import").stderr  # a broken config is said
    (project / ".stacks" / "config.json").unlink()
    missing = stm_at(project, "import")
    assert missing.returncode == 2 and "import needs a FILE" in missing.stderr
    configure(project, checkpoint_every=1, checkpoint_dir="outputs")
    empty = stm_at(project, "import")
    assert empty.returncode == 1 and "no checkpoint in" in empty.stderr


def big_artifact(project: Path, megabytes: float) -> None:
    """Incompressible bytes in a session's artifacts: a checkpoint that takes room and
    time to write."""
    sid = json.loads(ok(project, "session", "new", "--name", "artifact", "--json"))["session_id"]
    folder = project / ".state" / "sessions" / sid / "artifacts"
    folder.mkdir(exist_ok=True)
    (folder / "blob.bin").write_bytes(os.urandom(int(megabytes * 1024 * 1024)))


def read_only_run(folder: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """stm with `folder` read-only: permissions for a user; for root (whom permissions do
    not stop), a read-only bind mount in a private mount namespace."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            return stm_at(cwd, *args)
        finally:
            folder.chmod(0o755)
    if shutil.which("unshare") is None:
        pytest.skip("root without unshare: no way to make a folder read-only")
    script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" && shift && exec "$@"'
    done = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            script,
            "sh",
            str(folder),
            sys.executable,
            str(STM_PY),
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    if "mount" in done.stderr and done.returncode != 0 and "stm" not in done.stderr:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")
    return done


@pytest.mark.parametrize("trouble", ["read-only", "full"])
def test_a_checkpoint_folder_that_is_read_only_or_full_warns_and_loses_no_write(tmp_path, trouble):
    project = tmp_path / "p"
    project.mkdir()
    ok(project, "init")
    out = tmp_path / "outputs"
    out.mkdir()
    configure(project, checkpoint_every=1, checkpoint_dir=str(out))
    big_artifact(project, 0.5)  # that write's checkpoint goes through
    assert len(checkpoints(out)) == 1
    if trouble == "read-only":
        done = read_only_run(out, project, "log", "written while the folder is read-only")
    else:
        done = subprocess.run(
            [sys.executable, str(STM_PY), "log", "written while the disk is full"],
            cwd=project,
            capture_output=True,
            text=True,
            preexec_fn=limited(256 * 1024),
        )
    assert done.returncode == 0, done.stderr
    assert "stm: warning: checkpoint not written" in done.stderr
    assert "the memory write itself is saved" in done.stderr
    assert len(log_texts(project)) == 1  # the write is there
    assert len(checkpoints(out)) == 1  # no new or partial export
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []
    assert zipfile.ZipFile(out / checkpoints(out)[0]).testzip() is None
    ok(project, "log", "the folder works again")  # still due: written now
    names = checkpoints(out)
    assert len(names) == 2
    with zipfile.ZipFile(out / names[-1]) as newest:
        logs = [m for m in newest.namelist() if m.startswith(".stacks/logs/")]
        text = b"".join(newest.read(m) for m in logs).decode()
    assert "written while" in text and "the folder works again" in text


def test_a_kill_during_a_checkpoint_leaves_no_partial_export(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    ok(project, "init")
    out = tmp_path / "outputs"
    out.mkdir()
    big_artifact(project, 24)
    configure(project, checkpoint_every=1, checkpoint_dir=str(out))
    for attempt in range(5):
        process = subprocess.Popen(
            [sys.executable, str(STM_PY), "log", f"entry {attempt}"],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        caught = False
        while process.poll() is None:
            if any(p.name.endswith(".tmp") for p in out.iterdir()):
                process.send_signal(signal.SIGKILL)
                caught = True
                break
            time.sleep(0.001)
        process.communicate()
        if caught:
            break
    else:
        pytest.skip("the checkpoint finished before it could be killed, five times")
    assert checkpoints(out) == []  # only complete exports carry the name
    assert [p.name for p in out.iterdir()][0].startswith(".stm-checkpoint-")
    assert log_texts(project)[-1] == f"entry {attempt}"  # the write came first
    ok(project, "log", "after the kill")
    names = checkpoints(out)
    assert len(names) == 1 and zipfile.ZipFile(out / names[0]).testzip() is None
    assert [p.name for p in out.iterdir()] == names  # the killed one's temp file is gone


# ---- sync at session end -----------------------------------------------------------------


def test_capture_at_session_end_syncs_when_configured_and_never_fails_the_hook(tmp_path):
    bare, _ = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    payload = json.dumps({"hook_event_name": "SessionEnd", "session_id": "s1", "cwd": str(a)})
    ok(a, "log", "work of the session")
    before = git(bare, "rev-parse", "main")
    done = subprocess.run(
        [sys.executable, str(STM_PY), "capture", "--client", "claude"],
        cwd=a, input=payload, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0
    assert git(bare, "rev-parse", "main") == before  # off by default
    configure(a, sync_on_session_end=True)
    done = subprocess.run(
        [sys.executable, str(STM_PY), "capture", "--client", "claude"],
        cwd=a, input=payload, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0 and "stm capture: sync: sent to origin/main" in done.stderr
    assert git(bare, "rev-parse", "main") == git(a, "rev-parse", "HEAD") != before
    git(a, "checkout", "-q", "--detach")  # a sync that cannot run: the hook still ends well
    done = subprocess.run(
        [sys.executable, str(STM_PY), "capture", "--client", "claude"],
        cwd=a, input=payload, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0 and "sync not done" in done.stderr and "detached" in done.stderr


# ---- a hook never brings code --------------------------------------------------------------


def hook_command(project: Path, event: str) -> str:
    """The command `stm setup claude --install` wrote for a hook event."""
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    return settings["hooks"][event][0]["hooks"][0]["command"]


def run_hook(project: Path, event: str, home: Path, **env) -> subprocess.CompletedProcess:
    """A hook as Claude Code runs it: its command by sh, the payload on stdin."""
    payload = {"hook_event_name": event, "session_id": "s-end", "cwd": str(project)}
    env = {"CLAUDE_PROJECT_DIR": str(project), "HOME": str(home), **env}
    env["PYTHONDONTWRITEBYTECODE"] = None
    return run_sh(
        hook_command(project, event), cwd=project, env=env, input=json.dumps(payload), timeout=300
    )


def committed_stm_remote(tmp: Path) -> tuple[Path, Path]:
    """The README's set-up: stm.py committed beside the code, the Claude hooks installed
    and committed, sync at session end on."""
    bare = tmp / "remote.git"
    git(tmp, "init", "-q", "--bare", str(bare))
    seed = tmp / "seed"
    seed.mkdir()
    git(seed, "init", "-q")
    shutil.copy(STM_PY, seed / "stm.py")
    assert stm_process(seed, "init").returncode == 0
    assert stm_process(seed, "setup", "claude", "--install").returncode == 0
    configure(seed, sync_on_session_end=True)
    (seed / "code.py").write_text("print('ours')\n")
    git(seed, "add", "-A")
    git(seed, "commit", "-q", "-m", "start")
    git(seed, "remote", "add", "origin", str(bare))
    git(seed, "push", "-q", "-u", "origin", "main")
    return bare, seed


def test_a_hook_s_sync_takes_memory_and_leaves_a_teammate_s_code_for_git_pull(tmp_path):
    bare, _ = committed_stm_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    b = clone(bare, tmp_path / "b")
    home = tmp_path / "home"
    # A teammate (or whoever controls the remote) changes stm.py and the hook settings.
    with open(b / "stm.py", "a") as stream:
        stream.write("\nopen('PWNED', 'w').close()\n")
    settings = json.loads((b / ".claude" / "settings.json").read_text())
    settings["hooks"]["SessionStart"][0]["hooks"][0]["command"] = "touch PWNED"
    (b / ".claude" / "settings.json").write_text(json.dumps(settings))
    assert stm_process(b, "log", "b's work, to share").returncode == 0
    git(b, "add", "-A")
    git(b, "commit", "-q", "-m", "teammate")
    git(b, "push", "-q")
    code_before = {name: (a / name).read_bytes() for name in ("stm.py", ".claude/settings.json")}
    assert stm_process(a, "log", "a's work at the end of the session").returncode == 0

    done = run_hook(a, "SessionEnd", home)

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    for name, data in code_before.items():
        assert (a / name).read_bytes() == data, name  # the code here is as it was
    assert git(a, "status", "--porcelain", "--", ".", ":(exclude).state") == ""
    assert "b's work, to share" in "\n".join(log_texts(a))  # memory arrived
    assert git(bare, "rev-parse", "main") != git(a, "rev-parse", "HEAD")
    sent = git(bare, "show", "main:.stacks/logs/" + sorted(os.listdir(a / ".stacks/logs"))[-1])
    assert "a's work at the end of the session" in sent  # memory left
    pull = "git pull --no-rebase origin main"
    assert f"`{pull}`" in done.stderr and "stm.py" in done.stderr
    # The next start runs the boot of this clone's stm.py and says what waits.
    started = run_hook(a, "SessionStart", home)
    assert started.returncode == 0 and pull in started.stdout and "stm.py" in started.stdout
    assert not (a / "PWNED").exists()
    # The command it names works as pasted, and brings exactly the remote's tree.
    pulled = subprocess.run(["sh", "-c", pull], cwd=a, capture_output=True, text=True)
    assert pulled.returncode == 0, pulled.stderr
    assert (a / "stm.py").read_bytes() == (b / "stm.py").read_bytes()
    assert git(a, "rev-parse", "HEAD^{tree}") == git(bare, "rev-parse", "main^{tree}")
    # Later syncs send and take each log entry once.
    assert stm_process(a, "log", "after the pull").returncode == 0
    assert stm_at(a, "sync").returncode == 0 and stm_at(b, "sync").returncode == 0
    for side in (a, b):
        assert sorted(log_texts(side)) == sorted(set(log_texts(side))), side
        assert len(log_texts(side)) == 3, log_texts(side)
    no_markers(a)


def test_a_hook_s_sync_with_only_memory_arriving_fast_forwards(tmp_path):
    bare, _ = committed_stm_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    b = clone(bare, tmp_path / "b")
    assert stm_process(b, "log", "memory only").returncode == 0
    assert stm_at(b, "sync").returncode == 0
    done = run_hook(a, "SessionEnd", tmp_path / "home")
    assert done.returncode == 0 and "git pull" not in done.stderr, done.stderr
    assert git(a, "rev-parse", "HEAD") == git(bare, "rev-parse", "main")
    assert "memory only" in "\n".join(log_texts(a))


def test_a_manual_sync_names_the_code_it_brought_in(tmp_path):
    bare, _ = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    b = clone(bare, tmp_path / "b")
    (b / "code.py").write_text("changed by b\n")
    git(b, "commit", "-q", "-am", "b's code")
    git(b, "push", "-q")
    ok(a, "log", "a's work")
    dry = json.loads(ok(a, "sync", "--dry-run", "--json"))
    assert dry["code_received"] == ["code.py"] and dry["code_waiting"] == []
    out = ok(a, "sync")
    assert "brought in code origin/main changed: code.py" in out
    assert (a / "code.py").read_text() == "changed by b\n"  # the documented merge
    assert "brought in" not in ok(a, "sync")  # nothing new: nothing named


# ---- what arrives by sync never stops sync ---------------------------------------------------


def test_memory_no_reader_can_parse_arriving_by_sync_never_stops_it(tmp_path):
    import tracemalloc

    bare, _ = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    b = clone(bare, tmp_path / "b")
    sid = json.loads(ok(b, "session", "new", "--name", "deep", "--json"))["session_id"]
    folder = next((b / ".state" / "sessions").glob(sid))
    (folder / "state.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "history.jsonl").write_bytes(b'{"a": "\xff\xfe"}\n' + b"[" * 50_000 + b"\n")
    (b / ".stacks" / "refs" / "latin1.md").write_bytes(b"# Caf\xe9\n\n\xff\xfe not UTF-8\n")
    big = b / ".stacks" / "refs" / "big.md"
    with open(big, "wb") as stream:  # one byte over the bound, made of short lines
        line = b"x" * 99 + b"\n"
        stream.write(b"# Big\n" + line * ((stm.MEMORY_READ_MAX_BYTES - 6) // 100 + 1))
    git(b, "add", "-A")
    git(b, "commit", "-q", "-m", "what no reader can parse")
    git(b, "push", "-q")
    ok(a, "log", "a's work")
    remote_before = int(git(bare, "rev-list", "--count", "main"))
    # The merge driver is compiled once per clone (stm.py's own size, not the file's).
    stm.driver_program(types.SimpleNamespace(git_dir=str(a / ".git")))
    tracemalloc.start()
    try:
        done = stm_at(a, "sync")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert peak < stm.MEMORY_READ_MAX_BYTES  # the big file was counted, never read
    assert git(a, "rev-parse", "HEAD") == git(bare, "rev-parse", "main")  # the branch moved
    assert int(git(bare, "rev-list", "--count", "main")) == remote_before + 2
    assert big.read_bytes() == (a / ".stacks/refs/big.md").read_bytes()
    again = stm_at(a, "sync")  # the next sync: nothing to send, no commit
    assert again.returncode == 0 and "nothing to send" in again.stdout, again.stderr
    assert int(git(bare, "rev-list", "--count", "main")) == remote_before + 2
    checked = stm_at(a, "check", "--json")
    assert "Traceback" not in checked.stderr
    found = {(f["rule"], f["path"]) for f in json.loads(checked.stdout)["findings"]}
    assert ("file-too-large", ".stacks/refs/big.md") in found
    assert ("state-invalid", f".state/sessions/{sid}/state.json") in found


def test_sync_does_not_send_a_memory_file_too_big_to_scan(tmp_path):
    bare, _ = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    with open(a / ".stacks" / "refs" / "dump.md", "wb") as stream:
        stream.write(b"# Dump\n" + (b"d" * 99 + b"\n") * (stm.MEMORY_READ_MAX_BYTES // 100 + 1))
    remote_before = git(bare, "rev-parse", "main")
    done = stm_at(a, "sync")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert ".stacks/refs/dump.md is over 16 MiB" in done.stderr
    assert "nothing was sent" in done.stderr
    assert git(bare, "rev-parse", "main") == remote_before


def test_check_reads_each_memory_file_within_the_bound(tmp_path):
    import tracemalloc

    project = tmp_path / "p"
    project.mkdir()
    ok(project, "init")
    sid = json.loads(ok(project, "session", "new", "--json"))["session_id"]
    size = 3 * stm.MEMORY_READ_MAX_BYTES
    big = [
        project / ".stacks" / "refs" / "big.md",
        project / ".state" / "sessions" / sid / "history.jsonl",
        project / ".stacks" / "logs" / f"{TODAY}.md",
    ]
    for path in big:
        with open(path, "ab") as stream:
            stream.write(b"# Big\n" + (b"y" * 99 + b"\n") * (size // 100))
    tracemalloc.start()
    try:
        checked = stm_at(project, "check", "--json")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "Traceback" not in checked.stderr
    assert peak < stm.MEMORY_READ_MAX_BYTES  # not the file's size: it is never read whole
    found = [(f["rule"], f["path"], f["severity"]) for f in json.loads(checked.stdout)["findings"]]
    for path in big:
        rel = str(path.relative_to(project))
        assert ("file-too-large", rel, "error") in found


def test_an_upstream_that_shares_no_history_is_named_with_the_fix(tmp_path):
    bare, _ = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    (other / "x.txt").write_text("another project\n")
    git(other, "add", "-A")
    git(other, "commit", "-q", "-m", "unrelated")
    git(other, "push", "-q", "--force", str(bare), "main")
    ok(a, "log", "a's work")
    before = repo_state(a)
    done = stm_at(a, "sync")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "no message" not in done.stderr
    assert "share no history" in done.stderr
    assert "`git pull --no-rebase --allow-unrelated-histories origin main`" in done.stderr
    after = repo_state(a)
    assert {k: v for k, v in after.items() if k != "refs"} == {
        k: v for k, v in before.items() if k != "refs"
    }


# ---- hooks keep their time -------------------------------------------------------------------


FAKE_SSH = """#!/bin/sh
# ssh HOST COMMAND, as git runs it: a slow link for the fetch, a hang for the push.
echo $$ >> "{log}"
case "$*" in
  *git-upload-pack*) sleep {slow}; exec sh -c "$2" ;;
  *) exec sleep 600 ;;
esac
"""


def alive(pid: int) -> bool:
    """A process that still runs (a zombie waiting to be reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc to see processes")
def test_a_hook_s_sync_has_one_deadline_and_leaves_no_git_child_running(tmp_path):
    bare, _ = make_remote(tmp_path)
    a = clone(bare, tmp_path / "a")
    log = tmp_path / "ssh-pids"
    ssh = tmp_path / "fake-ssh"
    ssh.write_text(FAKE_SSH.format(log=log, slow=2))
    ssh.chmod(0o755)
    git(a, "remote", "set-url", "origin", f"ssh://example.invalid{bare}")
    configure(a, sync_on_session_end=True)
    ok(a, "log", "a's work")
    remote_before = git(bare, "rev-parse", "main")
    payload = json.dumps({"hook_event_name": "SessionEnd", "session_id": "s1", "cwd": str(a)})
    env = {**os.environ, "GIT_SSH_COMMAND": str(ssh), "GIT_SSH_VARIANT": "simple"}
    env["STM_SYNC_TIMEOUT"] = "8"
    done = subprocess.run(
        [sys.executable, str(STM_PY), "capture", "--client", "claude"],
        cwd=a, input=payload, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # The fetch took 2 of the 8 s: the push had only the rest, not 8 s of its own.
    assert "sync not done" in done.stderr and "did not finish within its 8 s" in done.stderr
    assert "`git push`" in done.stderr, done.stderr
    pids = [int(line) for line in log.read_text().split()]
    assert len(pids) == 2  # one connection for the fetch, one for the push
    assert not [pid for pid in pids if alive(pid)]  # git's ssh child ended with it
    assert git(bare, "rev-parse", "main") == remote_before


def test_each_git_command_is_given_only_what_is_left_of_the_deadline(tmp_path, monkeypatch):
    given = []

    def fake_run_bounded(argv, *, timeout, **options):
        given.append(timeout)
        return 0, b"", b""

    monkeypatch.setattr(stm, "run_bounded", fake_run_bounded)
    runner = stm.SyncGit(str(tmp_path), 100.0)
    runner.run("status")
    runner.deadline -= 60  # 60 s spent meanwhile
    runner.run("fetch")
    assert given[0] <= 100 and 39 < given[1] <= 40
    runner.deadline -= 50  # past it: no git is started at all
    with pytest.raises(stm.StmError, match=r"did not finish within its 100 s \(`git push`"):
        runner.run("push")
    assert len(given) == 2


if __name__ == "__main__":
    if sys.argv[1:2] == ["agent"]:
        sys.exit(agent(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    sys.exit(f"usage: {sys.argv[0]} agent CLONE NAME ROUNDS")


# ---- secrets never leave the machine ---------------------------------------------------


def test_sync_refuses_to_send_a_memory_file_holding_a_secret_and_changes_nothing(tmp_path):
    bare, _ = make_remote(tmp_path)
    work = clone(bare, tmp_path / "work")
    token = fake_token("glpat-", 24)
    ref = work / ".stacks" / "refs" / "deploy.md"
    ref.write_text(f"# Deploy\n\nSteps:\n\nexport GITLAB_TOKEN={token}\n")
    before, remote = repo_state(work), git(bare, "rev-parse", "main")
    done = stm_at(work, "sync")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done
    assert ".stacks/refs/deploy.md line 5" in done.stderr and token not in done.stderr
    assert "nothing was sent" in done.stderr and "stm:allow-secret" in done.stderr
    assert repo_state(work) == before and git(bare, "rev-parse", "main") == remote
    # the advice works as written: `stm check` names it, a marked line is sent
    report = stm_at(work, "check")
    assert "deploy.md:5" in report.stdout + report.stderr and token not in report.stdout
    ref.write_text(f"# Deploy\n\nSteps:\n\nexport GITLAB_TOKEN={token}  # stm:allow-secret\n")
    assert stm_at(work, "sync").returncode == 0
    assert token in git(bare, "show", "main:.stacks/refs/deploy.md")


def test_sync_sends_a_capture_of_credentials_only_redacted(tmp_path):
    """A transcript full of pasted credentials, captured by the hook as a process and
    synced: neither the clone's memory, its boot, nor the remote holds any of them."""
    from test_secrets import CASES
    from transcripts import Claude, write_jsonl

    bare, _ = make_remote(tmp_path)
    work = clone(bare, tmp_path / "work")
    cores = [core for _, _, found in CASES for core in found]
    c = Claude(str(work), "2fc9b73b-1111-4000-8000-0000000000aa")
    lines = [line for _, line, _ in CASES]
    entries = [c.user("deploy it:\n" + "\n".join(lines))]
    for n, line in enumerate(lines):
        entries += [
            c.call(f"b{n}", "Bash", command=line),
            c.result(f"b{n}", f"Exit code 1\nerror: denied for {line}", is_error=True),
        ]
    entries.append(c.say("It failed with " + lines[0]))
    transcript = write_jsonl(tmp_path / "t.jsonl", entries)
    payload = json.dumps(
        {
            "session_id": "2fc9b73b-1111-4000-8000-0000000000aa",
            "transcript_path": str(transcript),
            "cwd": str(work),
            "hook_event_name": "SessionEnd",
            "reason": "other",
        }
    )
    done = stm_process(work, "capture", "--client", "claude", input=payload)
    assert done.returncode == 0, done
    assert any("Captured by stm" in text for text in log_texts(work))
    shown = stm_process(work, "boot").stdout
    sent = stm_at(work, "sync")
    assert sent.returncode == 0, sent
    memory = b"".join(
        p.read_bytes() for d in (".stacks", ".state") for p in (work / d).rglob("*") if p.is_file()
    )
    remote = git(bare, "log", "-p", "--all")
    assert "Captured by stm" in remote and "[redacted: credential]" in remote
    for core in cores:
        assert core.encode() not in memory, core
        assert core not in shown and core not in remote, core
