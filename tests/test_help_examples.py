"""Every command's --help example runs, as printed, in a prepared project."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess

import pytest
from conftest import ROOT, all_command_paths
from helpers import GIT_IDENTITY

import stm

pytestmark = pytest.mark.git  # git-heavy: `pytest -m 'not git'` leaves this file out

GIT_ENV = GIT_IDENTITY


def example_of(path):
    parser = stm.build_parser()
    for name in path:
        action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = action.choices[name]
    epilog = parser.epilog
    line = epilog.split("example:\n", 1)[1].splitlines()[0].strip()
    return re.sub(r"\s+\(.*\)$", "", line)  # drop a trailing "(explanation)"


def commands_with_handlers():
    return [p for p in all_command_paths() if p[0] not in ("session", "setup") or len(p) == 2]


@pytest.mark.parametrize("path", commands_with_handlers(), ids=" ".join)
def test_help_example_runs(store, run, monkeypatch, path):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    sid = run("session", "new").out.strip()
    run("log", "parser work begins")
    shutil.copy(ROOT / "spec" / "handoff-example.json", store / "handoff.json")
    assert run("export", "-o", "memory.zip").code == 0
    subprocess.run(["git", "init", "-q"], cwd=store, check=True)
    assert run("setup", "git", "--install").code == 0  # as each clone does once
    for key in ("primary_language", "old_key"):  # for the fact examples
        assert run("fact", "set", key, "Python").code == 0
    for name in ("base.md", "ours.md", "theirs.md"):  # for the merge-file example
        (store / name).write_text("# Notes\n\n## Next Steps\n\n- one\n")
    if path == ["sync"]:  # a first commit and a remote to sync with
        git = ["git", "-c", "init.defaultBranch=main"]
        subprocess.run([*git, "init", "-q", "--bare", "remote.git"], cwd=store, check=True)
        (store / ".git" / "info" / "exclude").write_text("remote.git/\n")
        for argv in (
            ["add", "-A"],
            ["commit", "-qm", "start"],
            ["remote", "add", "o", "remote.git"],
        ):
            subprocess.run([*git, *argv], cwd=store, check=True)
        subprocess.run([*git, "push", "-q", "-u", "o", "HEAD"], cwd=store, check=True)
    example = example_of(path).replace("2026-11-22-3f9a0c1d", sid)  # date-safe: pinned clock or id
    argv = shlex.split(example)
    assert argv[0] == "stm"
    result = run(*argv[1:], stdin="" if argv[1] == "mcp" else None)  # mcp: ends at EOF
    assert result.code == 0, (example, result)
    if "--json" in argv:
        assert json.loads(result.out)["schema_version"] == 1
