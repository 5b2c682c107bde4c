"""What `stm setup` writes for other programs: every command it writes for a shell runs
as written whatever the folder names (run for real with `sh -c`), the AGENTS.md/CLAUDE.md
markers it keeps."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess

import pytest
from conftest import STM_PY
from helpers import run_sh, run_stm

import stm

# Folder names a hostile or careless checkout may have: each would run `touch PWNED`, or
# break the command, if pasted into a shell command unquoted (or inside double quotes).
HOSTILE_NAMES = [
    "sub dir$(touch PWNED)",
    'quote"d',
    "back`touch PWNED`tick",
    "dollar$HOME 'single'",
]


def sh(command: str, cwd, **env) -> subprocess.CompletedProcess:
    """`command` run by POSIX sh, as Claude Code, git and agents run what stm writes."""
    return run_sh(command, cwd=cwd, env={**env, "PYTHONDONTWRITEBYTECODE": None})


def no_pwned(*roots) -> bool:
    return not any(path.name == "PWNED" for root in roots for path in root.rglob("*"))


@pytest.fixture
def hostile_project(tmp_path, monkeypatch, run):
    """A project whose folder, and the folder of its copy of stm.py, have hostile names;
    no `stm` command on PATH, so stm names this stm.py by its path."""

    def make(name: str, inside: bool):
        project = tmp_path / name / "proj"
        project.mkdir(parents=True)
        tools = project / name if inside else tmp_path / f"tools {name}"
        tools.mkdir()
        shutil.copy(STM_PY, tools / "stm.py")
        monkeypatch.chdir(project)
        monkeypatch.setattr(stm, "__file__", str(tools / "stm.py"))
        monkeypatch.setattr(shutil, "which", lambda cmd, *a, **k: None)
        assert run("init").code == 0
        return project

    return make


@pytest.mark.parametrize("inside", [True, False], ids=["stm-in-project", "stm-outside"])
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_the_claude_hook_runs_boot_and_nothing_else_whatever_the_folder_names(
    hostile_project, run, tmp_path, name, inside
):
    project = hostile_project(name, inside)
    assert run("setup", "claude", "--install").code == 0
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    command = settings["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    done = sh(command, project, CLAUDE_PROJECT_DIR=str(project), HOME=str(tmp_path / "home"))
    assert done.returncode == 0, done.stderr
    assert "## Identity" in done.stdout
    assert no_pwned(tmp_path)
    assert run("setup", "claude", "--check").code == 0  # still recognised as stm's hook


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_the_agents_md_block_names_a_command_that_runs_as_written(
    hostile_project, run, tmp_path, name
):
    project = hostile_project(name, True)
    assert run("setup", "agents-md", "--install").code == 0
    block = (project / "AGENTS.md").read_text()
    span = re.search(r"run (`+) ?(.*?) ?\1 and read", block)  # a Markdown code span
    command = span.group(2)
    assert command.endswith(" boot")
    done = sh(command, project, HOME=str(tmp_path / "home"))
    assert done.returncode == 0, done.stderr
    assert "## Identity" in done.stdout
    assert no_pwned(tmp_path)


@pytest.mark.git
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_the_merge_driver_command_runs_stm_and_nothing_else(hostile_project, run, tmp_path, name):
    project = hostile_project(name, True)
    driver = stm.git_driver_command()
    files = {}
    for side, text in (("O", "# M\n\n## A\n\n- a\n"), ("A", "# M\n\n## A\n\n- a\n- ours\n")):
        files[side] = project / f"{side} {name}.md"
        files[side].write_text(text)
    files["B"] = project / f"B {name}.md"
    files["B"].write_text("# M\n\n## A\n\n- theirs\n- a\n")
    # What git does: each %-placeholder becomes the file name, quoted for the shell.
    for letter in "OAB":
        driver = driver.replace(f"%{letter}", shlex.quote(str(files[letter])))
    driver = driver.replace("%L", "7").replace("%P", shlex.quote(f".stacks/{name}.md"))
    done = sh(driver, project)
    assert done.returncode == 0, done.stderr
    assert files["A"].read_text() == "# M\n\n## A\n\n- theirs\n- a\n- ours\n"
    assert no_pwned(tmp_path)
    printed = run("setup", "git").out.splitlines()[-1]  # the `git config` line to paste
    assert shlex.split(printed)[-1] == stm.git_driver_command()


def test_a_hint_names_a_hostile_stm_path_quoted(tmp_path):
    folder = tmp_path / "sub dir$(touch PWNED)"
    folder.mkdir()
    shutil.copy(STM_PY, folder / "stm.py")
    done = run_stm("boot", script=folder / "stm.py", cwd=tmp_path)
    assert done.returncode == 1  # no store here: the error hint names the command
    words = shlex.split(done.stderr.split("`")[1])  # the hint: `python3 PATH init`
    assert words[0] == "python3" and (tmp_path / words[1]).resolve() == folder / "stm.py"


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
