"""The README's examples run, in order, as a new user would type them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from conftest import IDENTITY, MEMORY, ROOT, STM_PY

README = (ROOT / "README.md").read_text(encoding="utf-8")
DOC_ID = "2026-11-22-3f9a0c1d"


def console_steps():
    steps = []
    for block in re.findall(r"```console\n(.*?)```", README, re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
    return steps


def normalise(text: str) -> str:
    text = re.sub(r"\d{4}-\d\d-\d\d-[0-9a-f]{8}", "ID", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TS", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return " ".join(text.split())


def test_readme_has_exactly_two_fresh_clone_commands_first():
    intro = README.split("## The layers", 1)[0]
    commands = re.findall(r"```sh\n(.*?)```", intro, re.S)
    assert [c.strip() for c in commands] == [
        "python3 stm.py init && python3 stm.py boot",
        "python3 -m pip install -e '.[dev]' && python3 -m pytest",
    ]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m pip install -e '.[dev]' && python3 -m pytest\n" in ci
    assert "ruff check ." in ci and "ruff format --check ." in ci


def test_readme_console_examples_run_in_order(tmp_path):
    shutil.copytree(ROOT / "spec", tmp_path / "spec")
    steps = console_steps()
    assert len(steps) >= 15
    session_id = None
    for command, expected in steps:
        if session_id:
            command = command.replace(DOC_ID, session_id).replace(
                " 3f9a ", f" {session_id[11:15]} "
            )
        shell = command.replace("/tmp/", f"{tmp_path}/")
        if shell.startswith("stm "):
            shell = f"{sys.executable} {STM_PY} {shell[4:]}"
        result = subprocess.run(
            shell, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, (command, result.stderr)
        if command == "stm init":  # the user fills in the two layers before going on
            (tmp_path / ".stacks" / "AGENT.md").write_text(IDENTITY)
            (tmp_path / ".stacks" / "MEMORY.md").write_text(MEMORY)
        if "--template >" in command:  # "fill it in, then:", as the README says
            entry = tmp_path / "entry.md"
            summary = "<!-- One or two lines: what this session did. -->"
            entry.write_text(entry.read_text().replace(summary, "Ported the lexer."))
        if command.startswith("stm session new"):
            session_id = result.stdout.strip()
        actual = {normalise(line) for line in result.stdout.splitlines()}
        for line in expected:
            if line.strip() and line.strip() != "...":
                assert normalise(line) in actual, (command, line, result.stdout)
