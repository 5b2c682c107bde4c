"""The README's examples run, in order, as a new user would type them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
DOC_ID = "2026-11-22-3f9a0c1d"  # date-safe: pinned clock or id
QUICK_START = (  # in a new scratch project, never in stm's own clone
    'S="$PWD/stm.py" && mkdir -p /tmp/stm-scratch && cd /tmp/stm-scratch && git init -q && '
    'python3 "$S" init && python3 "$S" boot'
)
TEST_COMMAND = (
    "python3 -m venv .venv && . .venv/bin/activate && "
    "python3 -m pip install -e '.[dev]' && python3 -m pytest"
)


def console_steps():
    steps = []
    for block in re.findall(r"```console\n(.*?)```", README, re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
    return steps


def ids_only(text: str) -> str:
    """Session ids, timestamps and ages made neutral; counts kept."""
    text = re.sub(r"\d{4}-\d\d-\d\d-[0-9a-f]{8}", "ID", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TS", text)
    return re.sub(r"for \d+[mhd]$", "for AGE", text.strip())


def normalise(text: str) -> str:
    text = re.sub(r"\d{4}-\d\d-\d\d-[0-9a-f]{8}", "ID", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TS", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    text = re.sub(r"\b(minute|hour|day)s\b", r"\1", text)  # "1 minute", "2 minutes" ago
    return " ".join(text.split())


def test_readme_has_exactly_two_fresh_clone_commands_first():
    intro = README.split("## The layers", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", intro, re.S)
    assert [c.strip() for c in commands] == [QUICK_START, TEST_COMMAND]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert TEST_COMMAND + "\n" in ci
    assert "ruff check ." in ci and "ruff format --check ." in ci


def stm_command(folder) -> dict:
    """An environment whose PATH has an `stm` command running this checkout's stm.py, as
    the installed command would (so hints say `stm`, as the README shows)."""
    shim = folder / "bin" / "stm"
    shim.parent.mkdir(parents=True)
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import stm; sys.exit(stm.main())"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "{code}" "$@"\n')
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.git
@pytest.mark.file_times  # status prints file ages
def test_readme_console_examples_run_in_order(tmp_path):
    """In a git repository, as most users have one: init installs the merge driver there,
    and `check` then says ok with no merge-driver warning (issue 24, 9)."""
    shutil.copytree(ROOT / "spec", tmp_path / "spec")
    env = stm_command(tmp_path / "tools")
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    env["GIT_CEILING_DIRECTORIES"] = str(tmp_path)
    env.pop("CI", None)
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, env=env, check=True)
    steps = console_steps()
    assert len(steps) >= 15
    session_id = None
    for command, expected in steps:
        if session_id:
            command = command.replace(DOC_ID, session_id).replace(
                " 3f9a ", f" {session_id[11:15]} "
            )
        shell = command.replace("/tmp/", f"{tmp_path}/")
        result = subprocess.run(
            shell, shell=True, cwd=project, capture_output=True, text=True, timeout=60, env=env
        )
        assert result.returncode == 0, (command, result.stderr)
        if "--template >" in command:  # "fill it in, then:", as the README says
            entry = tmp_path / "entry.md"
            summary = "<!-- One or two lines: what this session did. -->"
            entry.write_text(entry.read_text().replace(summary, "Ported the lexer."))
        if command.startswith("stm session new"):
            session_id = result.stdout.strip()
        actual = {normalise(line) for line in result.stdout.splitlines()}
        exact = {ids_only(line) for line in result.stdout.splitlines()}
        for line in expected:
            line = line.replace("/tmp/", f"{tmp_path}/")  # as in the command
            if line.strip() and line.strip() != "...":
                assert normalise(line) in actual, (command, line, result.stdout)
            if line.startswith(("sessions:", "verdict:", "check ")):  # counts must be true
                assert ids_only(line) in exact, (command, line, result.stdout)


def test_the_size_of_stm_py_the_docs_state_is_todays():
    """spec/performance.md and the README give stm.py's length (what `python3 stm.py`
    compiles on every start) as the file's line count rounded to the nearest thousand:
    one rule, so the figure changes only when the file crosses a half-thousand and a
    test names the number to write."""
    lines = len((ROOT / "stm.py").read_text(encoding="utf-8").splitlines())
    rounded = round(lines, -3)
    stated = []
    for path in (ROOT / "README.md", ROOT / "spec" / "performance.md"):
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(
            r"stm\.py[^.|]{0,60}?\babout ([0-9]{1,3}(?:,[0-9]{3})+)\s+lines", text
        ):
            stated.append((path.name, int(match.group(1).replace(",", ""))))
    assert {name for name, _ in stated} == {"README.md", "performance.md"}, stated
    for name, count in stated:
        assert count == rounded, (
            f"{name} says about {count:,} lines; write about {rounded:,} ({lines:,} today)"
        )


def test_the_readme_hook_json_is_what_setup_claude_writes(tmp_path):
    """The README's Claude Code hooks, `'…loader…'` standing for the loader's code, are
    exactly what `stm setup claude` prints in a project with stm.py copied in."""
    import json

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = re.search(r'```json\n(\{\n  "hooks": \{.*?\n\})\n```', readme, re.S)
    assert shown, "the README's hook JSON"
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "stm.py", project / "stm.py")
    printed = subprocess.run(
        [sys.executable, "stm.py", "setup", "claude"],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    loader = re.compile(r"-c '[^']*'")
    written = json.loads(loader.sub("-c '…loader…'", printed))
    assert json.loads(shown.group(1)) == written
