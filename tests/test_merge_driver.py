"""The section-aware merge driver: `stm merge-file`, `stm setup git`, proven with the real git.

Every git command runs as a process with a private configuration (GIT_CONFIG_GLOBAL=/dev/null,
GIT_CONFIG_NOSYSTEM=1), and with a PATH on which no `stm` command is found: the driver that
`stm setup git --install` writes is then `python3 <this stm.py> merge-file ...`, so git runs
the code under test whether or not a (possibly different) stm is installed on this machine.
One test puts a `stm` wrapper on PATH to prove the `stm merge-file ...` form too.

Notes are written in-process with a fixed clock (stm.utc_now), so the two sides of a merge
restamp `## Last Updated` with different, known times.
"""

from __future__ import annotations

import calendar
import functools
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import IDENTITY, MEMORY, STM_PY, snapshot
from helpers import GIT, added_lines, git, isolated_git_env, marker_lines, run_stm

import stm
import stm as stm_module

pytestmark = pytest.mark.git  # git-heavy: `pytest -m 'not git'` leaves this file out

MEMORY_PATH = ".stacks/MEMORY.md"
DRIVER_ARGS = "merge-file %O %A %B --marker-size %L --path %P"
STACKS_MERGE_LINES = ["MEMORY.md merge=stm", "AGENT.md merge=stm", "refs/*.md merge=stm"]

# The environment every git and stm process of this file gets (filled by `_private_env`).
ENV: dict[str, str] = {}
# Variables of the calling environment that would change what git or stm do here.
DROPPED = (
    "CI",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "STM_SESSION",
    "STM_USER",
    "STM_LOCK_TIMEOUT",
)

T0 = "2026-11-20T09:00:00Z"  # base
T_A1, T_A2 = "2026-11-21T10:00:00Z", "2026-11-21T10:30:00Z"  # branch a (earlier)
T_B1, T_B2 = "2026-11-21T11:00:00Z", "2026-11-21T11:30:00Z"  # branch b (later)


@pytest.fixture(scope="module", autouse=True)
def _private_env(tmp_path_factory):
    """A PATH without any `stm` (python3 and git come from a private bin folder)."""
    base = {k: v for k, v in os.environ.items() if k not in DROPPED}
    ENV.clear()
    bin_dir, ceiling = tmp_path_factory.mktemp("bin"), tmp_path_factory.getbasetemp()
    ENV.update(isolated_git_env(bin_dir, base, ceiling))
    ENV.update({"STM_FSYNC": "0", "USER": "tester"})
    assert shutil.which("stm", path=ENV["PATH"]) is None
    yield
    ENV.clear()


# ---- helpers ---------------------------------------------------------------------------

git = functools.partial(git, full_env=ENV, timeout=60)  # ENV as it is at the call
# Indexes (from 0) of the conflict-marker lines of exactly `size` (default 7) characters.
marker_lines = functools.partial(marker_lines, start=0, bare=True)


def stm_proc(cwd, *args, env=None, script=STM_PY) -> subprocess.CompletedProcess:
    """stm as a real process, in this file's environment (plus `env`)."""
    return run_stm(*args, script=script, cwd=cwd, full_env={**ENV, **(env or {})})


def stm_ok(cwd, *args, env=None, script=STM_PY) -> str:
    result = stm_proc(cwd, *args, env=env, script=script)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def epoch(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))


@pytest.fixture
def note(run, monkeypatch, tmp_path):
    """note(repo, SECTION, TEXT..., at=STAMP): `stm note` with the clock at STAMP."""
    monkeypatch.chdir(tmp_path)

    def noter(repo: Path, *args: str, at: str) -> None:
        monkeypatch.setattr(stm_module, "utc_now", lambda: epoch(at))
        result = run("note", "--dir", str(repo / ".stacks"), *args)
        assert result.code == 0, result
        assert f"\n{at}\n" in memory(repo), "note did not restamp ## Last Updated"

    return noter


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return head(repo)


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def make_repo(path: Path, install: bool = True, script: Path = STM_PY) -> Path:
    """A git repository on `main` with an initialised, filled-in store, committed; with
    the merge driver (which init installs) or without it (`install=False`)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "-c", "init.defaultBranch=main", "init", "-q", "-b", "main")
    stm_ok(path, "init", script=script)
    (path / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (path / ".stacks" / "MEMORY.md").write_text(MEMORY)
    commit_all(path, "base")
    if install:
        stm_ok(path, "setup", "git", "--install", script=script)
    else:  # init installed it in this clone: take it out, as a fresh clone has none
        stm_ok(path, "setup", "git", "--remove", script=script)
    return path


def two_sides(repo: Path, note, side_a: list, side_b: list) -> tuple[str, str]:
    """Branches a and b from the current HEAD, each with its notes committed: their shas.
    A note is (SECTION, TEXT..., STAMP)."""
    start = head(repo)
    shas = []
    for name, notes in (("a", side_a), ("b", side_b)):
        git(repo, "checkout", "-q", "-B", name, start)
        for *args, at in notes:
            note(repo, *args, at=at)
        shas.append(commit_all(repo, f"notes on {name}"))
    return shas[0], shas[1]


def merge(repo: Path, ours: str, theirs: str) -> subprocess.CompletedProcess:
    git(repo, "checkout", "-q", "-B", "work", ours)
    return git(repo, "merge", "--no-edit", theirs, check=False)


def memory(repo: Path) -> str:
    return (repo / MEMORY_PATH).read_text()


def headings(text: str) -> list[str]:
    return [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]


def section_lines(text: str, name: str) -> list[str]:
    """The body lines of the one `## name` section (no blank lines)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("## ")]
    found = [i for i in starts if lines[i][3:].strip().casefold() == name.casefold()]
    assert len(found) == 1, (name, text)
    end = next((i for i in starts if i > found[0]), len(lines))
    return [line for line in lines[found[0] + 1 : end] if line.strip()]


def any_marker_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"^(<{7,}|={7,}$|>{7,}|\|{7,})", line)]


def assert_clean_merge(result: subprocess.CompletedProcess, repo: Path) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CONFLICT" not in result.stdout + result.stderr
    assert git(repo, "ls-files", "-u").stdout == ""
    # Nothing left behind: no temp file of the driver, no stray change.
    assert git(repo, "status", "--porcelain", "--untracked-files=all").stdout == ""
    assert any_marker_lines(memory(repo)) == []


def assert_check_ok(repo: Path) -> None:
    check = stm_proc(repo, "check")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "merge-driver" not in check.stdout + check.stderr


def assert_one_of_each(text: str, lines: list[str]) -> None:
    for line in lines:
        assert text.splitlines().count(line) == 1, (line, text)


def assert_shape(text: str) -> None:
    """One heading per section, `## Last Updated` exactly once and last."""
    names = [name.casefold() for name in headings(text)]
    assert len(names) == len(set(names)), text
    assert names.count("last updated") == 1, text
    assert names[-1] == "last updated", text


def check_findings(cwd: Path, *args: str, env=None) -> tuple[int, list[dict]]:
    result = stm_proc(cwd, "check", "--json", *args, env=env)
    assert result.returncode in (0, 1), result
    return result.returncode, json.loads(result.stdout)["findings"]


def driver_config(repo: Path) -> list[str]:
    got = git(repo, "config", "--local", "--get-regexp", r"^merge\.stm\.", check=False)
    return got.stdout.splitlines()


# ---- 1. note + note, both restamp: a clean merge either way ------------------------------

NOTES_A = [("Next Steps", "alpha step one", T_A1), ("Next Steps", "alpha step two", T_A2)]
NOTES_B = [("Next Steps", "beta step", T_B1)]
BULLETS_AB = ["- alpha step one", "- alpha step two", "- beta step"]
# Notes into different sections: each section changes on one side only, but both sides
# restamp `## Last Updated`, so git's own text merge conflicts and only the driver merges.
NOTES_A_APART = [("Next Steps", "alpha step", T_A1)]
NOTES_B_APART = [("Observations", "beta observation", T_B1)]
BULLETS_APART = ["- alpha step", "- beta observation"]
BASE_PROSE = [
    "Parser port half done; the lexer passes its tests.",
    "The old grammar has two precedence bugs.",
    "None yet.",
    "Port the expression grammar.",
]


def test_note_on_both_branches_merges_cleanly_both_ways(tmp_path, note):
    repo = make_repo(tmp_path / "repo")
    sha_a, sha_b = two_sides(repo, note, NOTES_A, NOTES_B)
    texts = []
    for ours, theirs in ((sha_b, sha_a), (sha_a, sha_b)):
        result = merge(repo, ours, theirs)
        assert_clean_merge(result, repo)
        assert len(git(repo, "log", "-1", "--format=%P").stdout.split()) == 2
        assert_check_ok(repo)
        text = memory(repo)
        assert_one_of_each(text, BULLETS_AB + BASE_PROSE)
        assert_shape(text)
        assert headings(text) == headings(MEMORY)
        assert section_lines(text, "Last Updated") == [T_B1]  # the later stamp wins
        texts.append(text)
        # theirs' new bullets above ours' new ones; each side keeps its own order
        steps = section_lines(text, "Next Steps")
        if theirs == sha_a:
            assert steps[:3] == ["- alpha step two", "- alpha step one", "- beta step"]
        else:
            assert steps[:3] == ["- beta step", "- alpha step two", "- alpha step one"]
    assert sorted(texts[0].splitlines()) == sorted(texts[1].splitlines())


# ---- 2. rebase, cherry-pick, and pull between two clones ---------------------------------


def test_rebase_and_cherry_pick_use_the_driver(tmp_path, note):
    repo = make_repo(tmp_path / "repo")
    sha_a, sha_b = two_sides(repo, note, NOTES_A, NOTES_B)

    git(repo, "checkout", "-q", "-B", "work", sha_b)
    rebased = git(repo, "rebase", sha_a, check=False)
    assert_clean_merge(rebased, repo)
    assert git(repo, "rev-parse", "HEAD~1").stdout.strip() == sha_a
    assert_one_of_each(memory(repo), BULLETS_AB + BASE_PROSE)
    assert_shape(memory(repo))
    assert section_lines(memory(repo), "Last Updated") == [T_B1]
    assert_check_ok(repo)

    git(repo, "checkout", "-q", "-B", "work", sha_a)
    picked = git(repo, "cherry-pick", sha_b, check=False)
    assert_clean_merge(picked, repo)
    assert_one_of_each(memory(repo), BULLETS_AB + BASE_PROSE)
    assert_shape(memory(repo))
    assert section_lines(memory(repo), "Last Updated") == [T_B1]
    assert_check_ok(repo)


def test_pull_between_two_clones(tmp_path, note):
    seed = make_repo(tmp_path / "seed", install=False)
    origin = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(origin))
    alice, bob = tmp_path / "alice", tmp_path / "bob"
    for clone in (alice, bob):
        git(tmp_path, "clone", "-q", str(origin), str(clone))
        # The driver is per clone: a clone does not inherit it.
        assert stm_proc(clone, "setup", "git", "--check").returncode == 1
        stm_ok(clone, "setup", "git", "--install")

    note(alice, "Next Steps", "alice step", at=T_A1)
    commit_all(alice, "alice")
    note(bob, "Next Steps", "bob step", at=T_B1)
    note(bob, "Observations", "bob saw this", at=T_B2)
    commit_all(bob, "bob")

    git(alice, "push", "-q", "origin", "main")
    pulled = git(bob, "pull", "--no-rebase", "--no-edit", "origin", "main", check=False)
    assert_clean_merge(pulled, bob)
    git(bob, "push", "-q", "origin", "main")

    # Alice works on, then pulls with --rebase: her new commit is replayed on bob's merge.
    note(alice, "Next Steps", "alice later step", at=T_A2)
    commit_all(alice, "alice again")
    rebased = git(alice, "pull", "--rebase", "origin", "main", check=False)
    assert_clean_merge(rebased, alice)

    text = memory(alice)
    assert_one_of_each(
        text, ["- alice step", "- alice later step", "- bob step", "- bob saw this", *BASE_PROSE]
    )
    assert_shape(text)
    assert section_lines(text, "Last Updated") == [T_B2]
    assert_check_ok(alice)
    assert_check_ok(bob)


# ---- 3. different sections, and sections new on one side or on both ----------------


def test_different_sections_and_a_new_section(tmp_path, note):
    repo = make_repo(tmp_path / "repo")
    sha_a, sha_b = two_sides(
        repo,
        note,
        [
            *NOTES_A_APART,
            ("--create", "Risks", "alpha risk", T_A2),
            ("--create", "Decisions", "keep the lexer", T_A2),
        ],
        [*NOTES_B_APART, ("--create", "Decisions", "use a Pratt parser", T_B2)],
    )
    for ours, theirs in ((sha_a, sha_b), (sha_b, sha_a)):
        result = merge(repo, ours, theirs)
        assert_clean_merge(result, repo)
        text = memory(repo)
        assert_shape(text)
        names = headings(text)
        assert names[: len(headings(MEMORY)) - 1] == headings(MEMORY)[:-1]
        assert sorted(names[-3:-1]) == ["Decisions", "Risks"]  # both new, above Last Updated
        # Decisions is new on both sides: one section holding both bullets, theirs first.
        decisions = ["- use a Pratt parser", "- keep the lexer"]
        assert section_lines(text, "Decisions") == decisions[:: 1 if theirs == sha_b else -1]
        assert section_lines(text, "Risks") == ["- alpha risk"]
        assert section_lines(text, "Observations")[0] == "- beta observation"
        assert section_lines(text, "Next Steps")[0] == "- alpha step"
        assert_one_of_each(text, BASE_PROSE)
        assert section_lines(text, "Last Updated") == [T_B2]
        assert_check_ok(repo)


# ---- 4. prose both sides rewrote: settled in its section, never a conflict ----------------


def test_prose_rewritten_on_both_sides_is_settled_only_in_that_section(tmp_path, note):
    """Issue 35 (memory disagreements never block) replaces the earlier rule that left
    markers here: git's driver settles the section (merge.md, "Through plain git")."""
    repo = make_repo(tmp_path / "repo")
    sha_a, sha_b = two_sides(
        repo,
        note,
        [("Status", "--replace", "alpha status: lexer done", T_A1), ("Next Steps", "alpha", T_A2)],
        [("Status", "--replace", "beta status: parser done", T_B1), ("Next Steps", "beta", T_B2)],
    )
    for ours, theirs, first in ((sha_a, sha_b, "- beta"), (sha_b, sha_a, "- alpha")):
        result = merge(repo, ours, theirs)
        assert result.returncode == 0, result
        assert "CONFLICT" not in result.stdout + result.stderr
        assert "MEMORY.md ## Status: both sides rewrote it" in result.stderr, result
        assert git(repo, "status", "--porcelain").stdout == ""
        text = memory(repo)
        assert marker_lines(text) == [], text
        status = section_lines(text, "Status")
        # b's notes are the later (## Last Updated): its text stands, a's is kept below.
        assert status[:2] == ["beta status: parser done", status[1]], status
        assert re.fullmatch(r"<!-- stm:settled [0-9a-f]{8} \d{4}-\d\d-\d\d -->", status[1])
        assert "> alpha status: lexer done" in status, status
        assert status[-1] == "-->" and status[2].startswith("<!-- stm:kept "), status
        assert "alpha status" not in stm_module.strip_comments(text)
        # Outside the settled region, everything merged as usual.
        assert_one_of_each(text, ["- alpha", "- beta", *BASE_PROSE[1:]])
        # (theirs' new bullets above ours', as always)
        assert section_lines(text, "Next Steps")[:2] == [
            first,
            ({"- alpha", "- beta"} - {first}).pop(),
        ]
        assert headings(text) == headings(MEMORY)
        assert section_lines(text, "Last Updated") == [T_B2]
        assert_check_ok(repo)

    # The same three versions, given to stm merge-file by a person (no --path): markers
    # for them to choose, exit 1.
    stages = tmp_path / "stages"
    stages.mkdir()
    base = git(repo, "merge-base", sha_a, sha_b).stdout.strip()
    for sha, name in ((base, "base"), (sha_a, "ours"), (sha_b, "theirs")):
        shown = git(repo, "show", f"{sha}:{MEMORY_PATH}")
        (stages / f"{name}.md").write_text(shown.stdout)
    direct = stm_proc(stages, "merge-file", "base.md", "ours.md", "theirs.md")
    assert direct.returncode == 1, direct
    merged = (stages / "ours.md").read_text()
    assert len(marker_lines(merged)) == 3
    assert "alpha status: lexer done" in merged and "beta status: parser done" in merged


def test_merge_file_as_git_s_driver_keeps_hostile_older_text_inside_one_comment(tmp_path, run):
    """The older side's text, kept in the file by the driver (--path given), can neither
    end its comment early nor open a fence, a heading or a mark of its own."""
    hostile = (
        "alpha --> shown?\n```\n## Fake heading\n```\n<!-- stm:settled 12345678 2026-01-01 -->"
    )
    base, status = BASE_MD, "Parser port half done; the lexer passes its tests."
    ours = base.replace(status, hostile)
    theirs = base.replace(status, "beta status")
    code, text = merge_file(run, base, ours, theirs, tmp_path, "--path", ".stacks/MEMORY.md")
    assert code == 0, text
    assert marker_lines(text) == [], text
    assert headings(text) == headings(base), text
    shown = stm_module.strip_comments(text)
    assert "beta status" in shown and "alpha" not in shown and "Fake" not in shown, shown
    assert len(stm_module.SETTLED_RE.findall(text)) == 1, text
    assert "> alpha -- > shown?" in text and "> <! -- stm:settled 12345678" in text, text


# ---- 5. a clone without the driver: git's own conflict, and a check warning ----------------


def test_without_the_driver_git_falls_back_to_its_text_merge(tmp_path, note):
    repo = make_repo(tmp_path / "repo", install=False)
    attributes = (repo / ".stacks" / ".gitattributes").read_text()
    assert "MEMORY.md merge=stm" in " ".join(attributes.split())
    assert driver_config(repo) == []

    # The check warns in this clone, unless CI is set to something.
    for env, warned in (({}, True), ({"CI": ""}, True), ({"CI": "1"}, False)):
        code, findings = check_findings(repo, env=env)
        rules = [(f["rule"], f["severity"]) for f in findings]
        assert (("merge-driver", "warning") in rules) == warned, (env, findings)
        assert code == 0, findings  # a warning, not an error
    strict = stm_proc(repo, "check", "--strict")
    assert strict.returncode == 1 and "merge-driver" in strict.stdout + strict.stderr

    sha_a, sha_b = two_sides(repo, note, NOTES_A, NOTES_B)
    result = merge(repo, sha_b, sha_a)
    assert result.returncode != 0
    assert "CONFLICT" in result.stdout + result.stderr
    assert "UU .stacks/MEMORY.md" in git(repo, "status", "--porcelain").stdout.splitlines()
    text = memory(repo)
    lines = text.splitlines()
    openers = [line for line in lines if line.startswith("<<<<<<< ")]
    assert openers, text
    assert (
        len(openers)
        == lines.count("=======")
        == len([line for line in lines if line.startswith(">>>>>>> ")])
    )
    # Nothing lost, nothing mangled: every line of both sides is there.
    for sha in (sha_a, sha_b):
        side = git(repo, "show", f"{sha}:{MEMORY_PATH}").stdout
        for line in side.splitlines():
            assert line in lines, (line, text)
    assert lines[0] == "# Session Memory"
    git(repo, "merge", "--abort")

    # Once the driver is installed in this clone, the warning goes.
    stm_ok(repo, "setup", "git", "--install")
    assert "merge-driver" not in json.dumps(check_findings(repo)[1])


# ---- 6. stm merge-file, directly ----------------------------------------------------------

BASE_MD = """\
# Session Memory

## Status

Parser port half done; the lexer passes its tests.

## Observations

- the old grammar has two precedence bugs

## Next Steps

- port the expression grammar
- write the docs

## Last Updated

2026-11-20T10:00:00Z
"""


def edit(text: str, *pairs: tuple[str, str]) -> str:
    for old, new in pairs:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


OURS_MD = edit(
    BASE_MD,
    ("## Observations\n\n", "## Observations\n\n- ours obs\n"),
    ("10:00:00Z", "11:00:00Z"),
)
THEIRS_MD = edit(
    BASE_MD,
    ("## Next Steps\n\n", "## Next Steps\n\n- theirs step\n"),
    ("10:00:00Z", "12:00:00Z"),
)
CLEAN_MD = edit(
    BASE_MD,
    ("## Observations\n\n", "## Observations\n\n- ours obs\n"),
    ("## Next Steps\n\n", "## Next Steps\n\n- theirs step\n"),
    ("10:00:00Z", "12:00:00Z"),
)
STATUS_LINE = "Parser port half done; the lexer passes its tests."


def write3(folder: Path, base: str, ours: str, theirs: str, newline: str = "\n") -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for name, text in (("base.md", base), ("ours.md", ours), ("theirs.md", theirs)):
        with open(folder / name, "w", newline=newline) as stream:
            stream.write(text)
        names.append(str(folder / name))
    return names


def merge_file(run, base: str, ours: str, theirs: str, folder: Path, *options: str):
    """(exit code, merged text) of `stm merge-file` in-process."""
    paths = write3(folder, base, ours, theirs)
    result = run("merge-file", *paths, *options)
    return result.code, Path(paths[1]).read_text()


def test_merge_file_clean_exit_0_atomic_and_inputs_untouched(tmp_path):
    folder = tmp_path / "m"
    base, ours, theirs = write3(folder, BASE_MD, OURS_MD, THEIRS_MD)
    inode = os.stat(ours).st_ino
    result = stm_proc(folder, "merge-file", base, ours, theirs)
    assert result.returncode == 0, result
    assert Path(ours).read_text() == CLEAN_MD
    assert Path(base).read_text() == BASE_MD
    assert Path(theirs).read_text() == THEIRS_MD
    assert sorted(os.listdir(folder)) == ["base.md", "ours.md", "theirs.md"]  # no .tmp left
    assert os.stat(ours).st_ino != inode  # replaced by a rename, not rewritten in place


def test_merge_file_conflict_exit_1_and_marker_size(tmp_path):
    ours_md = edit(BASE_MD, (STATUS_LINE, "ours status"), ("10:00:00Z", "11:00:00Z"))
    theirs_md = edit(
        BASE_MD,
        (STATUS_LINE, "theirs status"),
        ("## Next Steps\n\n", "## Next Steps\n\n- theirs step\n"),
    )
    folder = tmp_path / "m"
    paths = write3(folder, BASE_MD, ours_md, theirs_md)
    result = stm_proc(folder, "merge-file", *paths)
    assert result.returncode == 1, result
    text = Path(paths[1]).read_text()
    lines = text.splitlines()
    marks = marker_lines(text)
    assert [lines[i][:8] for i in marks] == ["<<<<<<< ", "=======", ">>>>>>> "], text
    assert lines[marks[0] + 1 : marks[2]] == ["ours status", "=======", "theirs status"]
    assert all(lines.index("## Status") < i < lines.index("## Observations") for i in marks)
    assert section_lines(text, "Next Steps") == [
        "- theirs step",
        "- port the expression grammar",
        "- write the docs",
    ]
    assert section_lines(text, "Last Updated") == ["2026-11-20T11:00:00Z"]
    assert sorted(os.listdir(folder)) == ["base.md", "ours.md", "theirs.md"]

    # --marker-size 10: ten-character markers, and no seven-character ones.
    paths = write3(tmp_path / "m10", BASE_MD, ours_md, theirs_md)
    result = stm_proc(folder, "merge-file", *paths, "--marker-size", "10")
    assert result.returncode == 1, result
    text = Path(paths[1]).read_text()
    lines = text.splitlines()
    marks = marker_lines(text, 10)
    assert [lines[i][:11] for i in marks] == ["<" * 10 + " ", "=" * 10, ">" * 10 + " "], text
    assert marker_lines(text, 7) == []
    assert lines[marks[0] + 1 : marks[2]] == ["ours status", "=" * 10, "theirs status"]


@pytest.mark.parametrize(
    "args",
    [
        ["base.md", "ours.md"],  # THEIRS missing
        ["base.md", "ours.md", "theirs.md", "--marker-size", "abc"],
        ["base.md", "ours.md", "theirs.md", "--marker-size", "0"],
        ["base.md", "ours.md", "theirs.md", "--marker-size", "-1"],
    ],
    ids=["missing-theirs", "size-abc", "size-0", "size-negative"],
)
def test_merge_file_usage_errors_exit_2_and_write_nothing(tmp_path, args):
    folder = tmp_path / "m"
    write3(folder, BASE_MD, OURS_MD, THEIRS_MD)
    result = stm_proc(folder, "merge-file", *args)
    assert result.returncode == 2, result
    assert (folder / "ours.md").read_text() == OURS_MD
    assert sorted(os.listdir(folder)) == ["base.md", "ours.md", "theirs.md"]


def test_merge_file_missing_input_file_fails_without_writing(tmp_path):
    folder = tmp_path / "m"
    write3(folder, BASE_MD, OURS_MD, THEIRS_MD)
    result = stm_proc(folder, "merge-file", "nowhere.md", "ours.md", "theirs.md")
    assert result.returncode != 0, result
    assert (folder / "ours.md").read_text() == OURS_MD
    assert sorted(os.listdir(folder)) == ["base.md", "ours.md", "theirs.md"]


def test_merge_file_keeps_crlf_ours_in_crlf(tmp_path):
    folder = tmp_path / "m"
    write3(folder, BASE_MD, OURS_MD, THEIRS_MD)
    with open(folder / "ours.md", "w", newline="\r\n") as stream:
        stream.write(OURS_MD)
    result = stm_proc(folder, "merge-file", "base.md", "ours.md", "theirs.md")
    assert result.returncode == 0, result
    data = (folder / "ours.md").read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n") > 0
    assert data.decode().replace("\r\n", "\n") == CLEAN_MD


def test_merge_file_section_and_bullet_rules(tmp_path, run):
    # Both add a bullet at the same place: theirs' above ours'; the same new bullet once.
    ours = edit(BASE_MD, ("## Next Steps\n\n", "## Next Steps\n\n- ours new\n- both new\n"))
    theirs = edit(BASE_MD, ("## Next Steps\n\n", "## Next Steps\n\n- theirs new\n- both new\n"))
    code, text = merge_file(run, BASE_MD, ours, theirs, tmp_path / "same-place")
    assert code == 0, text
    steps = section_lines(text, "Next Steps")
    assert steps.count("- both new") == 1
    assert [s for s in steps if s != "- both new"] == [
        "- theirs new",
        "- ours new",
        "- port the expression grammar",
        "- write the docs",
    ]

    # A bullet removed on one side, untouched on the other: removed.
    ours = edit(BASE_MD, ("- write the docs\n", ""))
    theirs = edit(BASE_MD, ("## Observations\n\n", "## Observations\n\n- theirs obs\n"))
    code, text = merge_file(run, BASE_MD, ours, theirs, tmp_path / "bullet-removed")
    assert code == 0, text
    assert section_lines(text, "Next Steps") == ["- port the expression grammar"]
    assert section_lines(text, "Observations")[0] == "- theirs obs"

    # A section removed on one side, unchanged on the other: removed.
    removed = edit(
        BASE_MD, ("## Observations\n\n- the old grammar has two precedence bugs\n\n", "")
    )
    code, text = merge_file(run, BASE_MD, THEIRS_MD, removed, tmp_path / "section-removed")
    assert code == 0, text
    assert headings(text) == ["Status", "Next Steps", "Last Updated"]
    assert "- theirs step" in text.splitlines()

    # Removed on one side but changed on the other: the change is never dropped.
    code, text = merge_file(run, BASE_MD, OURS_MD, removed, tmp_path / "removed-vs-changed")
    assert "- ours obs" in text.splitlines(), text

    # A section added after `## Last Updated` still lands above it; Last Updated stays last.
    theirs = BASE_MD + "\n## Decisions\n\n- use a Pratt parser\n"
    code, text = merge_file(run, BASE_MD, OURS_MD, theirs, tmp_path / "added-at-end")
    assert code == 0, text
    assert headings(text) == ["Status", "Observations", "Next Steps", "Decisions", "Last Updated"]
    assert section_lines(text, "Decisions") == ["- use a Pratt parser"]
    assert section_lines(text, "Last Updated") == ["2026-11-20T11:00:00Z"]

    # Headings match whatever their case: one section, both bullets.
    theirs = edit(THEIRS_MD, ("## Next Steps", "## next steps"))
    ours = edit(BASE_MD, ("- write the docs\n", "- write the docs\n- ours last step\n"))
    code, text = merge_file(run, BASE_MD, ours, theirs, tmp_path / "case")
    assert code == 0, text
    assert [h.casefold() for h in headings(text)].count("next steps") == 1
    assert section_lines(text, "next steps") == [
        "- theirs step",
        "- port the expression grammar",
        "- write the docs",
        "- ours last step",
    ]


def test_merge_file_bullets_noted_above_prose_on_both_sides(tmp_path, run):
    """What `stm note` does to a section holding prose: the bullet goes on top. Both sides
    doing it is the everyday case, and must merge like a bullet list, prose kept once."""
    base = edit(BASE_MD, ("- port the expression grammar\n- write the docs", "Port it all."))
    ours = edit(base, ("## Next Steps\n\n", "## Next Steps\n\n- ours step\n\n"))
    theirs = edit(base, ("## Next Steps\n\n", "## Next Steps\n\n- theirs step\n\n"))
    code, text = merge_file(run, base, ours, theirs, tmp_path)
    assert any_marker_lines(text) == [], text
    assert code == 0, text
    assert section_lines(text, "Next Steps") == ["- theirs step", "- ours step", "Port it all."]


def test_merge_file_prose_changed_on_different_lines(tmp_path, run):
    base = edit(BASE_MD, (STATUS_LINE, "line one\nline two\nline three"))
    ours = edit(base, ("line one", "ours one"))
    theirs = edit(base, ("line three", "theirs three"))
    code, text = merge_file(run, base, ours, theirs, tmp_path)
    assert code == 0, text
    assert section_lines(text, "Status") == ["ours one", "line two", "theirs three"]


def test_merge_file_last_updated_takes_the_later_stamp(tmp_path, run):
    early = edit(BASE_MD, ("10:00:00Z", "11:00:00Z"))
    late = edit(BASE_MD, ("10:00:00Z", "12:00:00Z"))
    for ours, theirs, name in ((early, late, "a"), (late, early, "b")):
        code, text = merge_file(run, BASE_MD, ours, theirs, tmp_path / name)
        assert code == 0, text
        assert text == late


FACTS_BASE = """\
# Facts

## api-version
**Current:** v2

**History:**
- 2026-11-20T10:00:00Z: v2
- 2026-11-01T10:00:00Z: v1
"""


def test_merge_file_fact_history_union_newest_first(tmp_path, run):
    ours = edit(
        FACTS_BASE,
        ("**Current:** v2", "**Current:** v4"),
        ("**History:**\n", "**History:**\n- 2026-11-22T10:00:00Z: v4\n"),
    )
    theirs = edit(
        FACTS_BASE,
        ("**Current:** v2", "**Current:** v3"),
        ("**History:**\n", "**History:**\n- 2026-11-21T10:00:00Z: v3\n"),
    )
    folder = tmp_path / "refs"
    for first, second in ((ours, theirs), (theirs, ours)):
        code, text = merge_file(run, FACTS_BASE, first, second, folder, "--path", "refs/facts.md")
        assert code == 0, text
        body = section_lines(text, "api-version")
        assert body == [
            "**Current:** v4",
            "**History:**",
            "- 2026-11-22T10:00:00Z: v4",
            "- 2026-11-21T10:00:00Z: v3",
            "- 2026-11-20T10:00:00Z: v2",
            "- 2026-11-01T10:00:00Z: v1",
        ]


# ---- 7. stm setup git ----------------------------------------------------------------------


def test_setup_git_print_install_check_remove(tmp_path):
    repo = make_repo(tmp_path / "repo", install=False)
    config = repo / ".git" / "config"
    before = config.read_bytes()
    assert stm_proc(repo, "setup", "git", "--check").returncode == 1

    printed = stm_proc(repo, "setup", "git", "--print")
    assert printed.returncode == 0, printed
    assert "merge.stm.driver" in printed.stdout and DRIVER_ARGS in printed.stdout
    assert config.read_bytes() == before
    assert stm_proc(repo, "setup", "git", "--check").returncode == 1

    stm_ok(repo, "setup", "git", "--install")
    assert stm_proc(repo, "setup", "git", "--check").returncode == 0
    name = git(repo, "config", "--local", "--get", "merge.stm.name").stdout.strip()
    assert name
    drivers = git(repo, "config", "--local", "--get-all", "merge.stm.driver").stdout.splitlines()
    assert len(drivers) == 1
    words = shlex.split(drivers[0])
    # No `stm` on this PATH: the driver runs this very stm.py with python3.
    assert os.path.basename(words[0]).startswith("python"), drivers
    assert os.path.realpath(words[1]) == os.path.realpath(STM_PY), drivers
    assert " ".join(words[2:]) == DRIVER_ARGS, drivers
    origins = git(repo, "config", "--show-origin", "--get-all", "merge.stm.driver").stdout
    assert origins.startswith("file:.git/config\t"), origins

    installed = config.read_bytes()
    stm_ok(repo, "setup", "git", "--install")  # idempotent
    assert config.read_bytes() == installed
    assert stm_proc(repo, "setup", "git", "--check").returncode == 0

    stm_ok(repo, "setup", "git", "--remove")
    assert driver_config(repo) == []
    assert stm_proc(repo, "setup", "git", "--check").returncode == 1

    # --dir works from anywhere, as for every command.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    stm_ok(elsewhere, "setup", "git", "--install", "--dir", str(repo / ".stacks"))
    assert stm_proc(repo, "setup", "git", "--check").returncode == 0


def test_setup_git_outside_a_work_tree_fails(tmp_path):
    folder = tmp_path / "plain"
    folder.mkdir()
    stm_ok(folder, "init")
    result = stm_proc(folder, "setup", "git", "--install")
    assert result.returncode != 0, result
    assert not (folder / ".git").exists()


def test_setup_git_in_a_worktree(tmp_path, note):
    repo = make_repo(tmp_path / "repo")
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "wt", str(worktree))
    assert stm_proc(worktree, "setup", "git", "--check").returncode == 0
    sha_a, sha_b = two_sides(worktree, note, NOTES_A_APART, NOTES_B_APART)
    assert_clean_merge(merge(worktree, sha_b, sha_a), worktree)
    assert_one_of_each(memory(worktree), BULLETS_APART + BASE_PROSE)
    assert_check_ok(worktree)  # no merge-driver warning in the worktree either
    assert_shape(memory(worktree))


def test_setup_git_in_a_submodule(tmp_path, note):
    source = make_repo(tmp_path / "source", install=False)
    top = tmp_path / "top"
    top.mkdir()
    git(top, "init", "-q", "-b", "main")
    git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(source), "sub")
    sub = top / "sub"
    assert stm_proc(sub, "setup", "git", "--check").returncode == 1
    assert "merge-driver" in [f["rule"] for f in check_findings(sub)[1]]
    stm_ok(sub, "setup", "git", "--install")
    assert stm_proc(sub, "setup", "git", "--check").returncode == 0
    assert git(sub, "config", "--local", "--get", "merge.stm.driver").stdout.strip()
    assert driver_config(top) == []  # the superproject's config is not the submodule's
    sha_a, sha_b = two_sides(sub, note, NOTES_A_APART, NOTES_B_APART)
    assert_clean_merge(merge(sub, sha_a, sha_b), sub)
    assert_one_of_each(memory(sub), BULLETS_APART + BASE_PROSE)
    assert_check_ok(sub)


def test_driver_runs_from_a_path_with_spaces(tmp_path, note):
    folder = tmp_path / "my project"
    folder.mkdir()
    copy = folder / "stm.py"
    shutil.copyfile(STM_PY, copy)
    repo = make_repo(folder / "memory repo", script=copy)
    driver = git(repo, "config", "--local", "--get", "merge.stm.driver").stdout.strip()
    words = shlex.split(driver)
    assert os.path.realpath(words[1]) == os.path.realpath(copy), driver
    sha_a, sha_b = two_sides(repo, note, NOTES_A_APART, NOTES_B_APART)
    assert_clean_merge(merge(repo, sha_b, sha_a), repo)
    assert_one_of_each(memory(repo), BULLETS_APART + BASE_PROSE)


def test_driver_uses_the_stm_command_when_installed(tmp_path, note):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    wrapper = bin_dir / "stm"
    wrapper.write_text(
        f'#!/bin/sh\necho "$*" >> {shlex.quote(str(calls))}\n'
        f'exec {shlex.quote(sys.executable)} {shlex.quote(str(STM_PY))} "$@"\n'
    )
    wrapper.chmod(0o755)
    env = {"PATH": str(bin_dir) + os.pathsep + ENV["PATH"]}
    repo = make_repo(tmp_path / "repo", install=False)
    printed = stm_proc(repo, "setup", "git", "--print", env=env)
    assert printed.returncode == 0, printed
    assert "stm " + DRIVER_ARGS in printed.stdout
    stm_ok(repo, "setup", "git", "--install", env=env)
    driver = git(repo, "config", "--local", "--get", "merge.stm.driver").stdout.strip()
    assert driver == "stm " + DRIVER_ARGS
    sha_a, sha_b = two_sides(repo, note, NOTES_A_APART, NOTES_B_APART)
    git(repo, "checkout", "-q", "-B", "work", sha_b)
    calls.write_text("")
    merged = subprocess.run(
        [GIT, "merge", "--no-edit", sha_a],
        cwd=repo,
        env={**ENV, **env},
        capture_output=True,
        text=True,
    )
    assert_clean_merge(merged, repo)
    assert "merge-file" in calls.read_text()  # git ran the `stm` command
    assert_one_of_each(memory(repo), BULLETS_APART + BASE_PROSE)


# ---- 8. init writes the attributes; check --fix adds them to older trees ------------------


def attribute_rules(path: Path) -> list[str]:
    return [
        " ".join(line.split())
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def test_init_writes_merge_attributes_and_check_fix_adds_them(project, run, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(project.parent))
    assert run("init").code == 0
    attributes = project / ".stacks" / ".gitattributes"
    rules = attribute_rules(attributes)
    for line in [*STACKS_MERGE_LINES, "logs/*.md merge=union eol=lf"]:
        assert line in rules, rules
    (project / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (project / ".stacks" / "MEMORY.md").write_text(MEMORY)
    clean = run("check", "--json")
    assert clean.code == 0, clean
    # Not a git clone: no driver to install, so no merge-driver warning.
    assert json.loads(clean.out)["findings"] == []

    # An older tree: only the logs rule.
    old = (
        "# Logs are append-only: two branches that both logged merge by keeping both sides.\n"
        "logs/*.md merge=union eol=lf\n"
    )
    attributes.write_text(old)
    found = run("check", "--json")
    assert found.code == 0, found  # warnings only
    findings = json.loads(found.out)["findings"]
    assert [(f["rule"], f["severity"]) for f in findings] == [("git-attributes", "warning")]
    for line in STACKS_MERGE_LINES:
        assert line in findings[0]["message"], findings

    fixed = run("check", "--fix")
    assert fixed.code == 0, fixed
    text = attributes.read_text()
    assert text.startswith(old)  # the user's lines stay
    rules = attribute_rules(attributes)
    for line in STACKS_MERGE_LINES:
        assert rules.count(line) == 1, text
    again = run("check", "--json")
    assert json.loads(again.out)["findings"] == [], again


# ---- 9. property: random bullet additions on both sides are never lost or doubled --------

POOL = ["Status", "Observations", "Open Questions", "Next Steps", "Decisions", "Risks"]


def render(order: list[str], sections: dict[str, list[str]], stamp: str) -> str:
    parts = ["# Session Memory\n"]
    for name in order:
        body = "".join(line + "\n" for line in sections[name])
        parts.append(f"## {name}\n\n{body}")
    parts.append(f"## Last Updated\n\n{stamp}\n")
    return "\n".join(parts)


def random_versions(seed: int):
    rng = random.Random(seed)
    names = rng.sample(POOL, rng.randint(1, len(POOL)))
    base = {
        name: [f"- base {seed} {n} {j}" for j in range(rng.randint(0, 4))]
        for n, name in enumerate(names)
    }
    shared = rng.random() < 0.4
    shared_section = rng.choice(names)
    sides = {}
    for side in ("ours", "theirs"):
        order, sections = list(names), {name: list(body) for name, body in base.items()}
        if shared:
            sections[shared_section].insert(0, f"- shared {seed}")
        for k in range(rng.randint(1, 6)):
            target = rng.choice(order)
            at = rng.randint(0, len(sections[target]))
            sections[target].insert(at, f"- {side} {seed} {k}")
        if rng.random() < 0.3:
            new = f"{side.title()} Extra {seed}"
            order.append(new)
            sections[new] = [f"- {side} extra {seed} {j}" for j in range(rng.randint(1, 3))]
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch(T0) + rng.randint(1, 10**6)))
        sides[side] = (order, sections, stamp)
    return names, base, sides


def is_subsequence(small: list[str], big: list[str]) -> bool:
    items = iter(big)
    return all(any(x == y for y in items) for x in small)


@pytest.mark.parametrize("seed", range(30))
def test_random_bullet_additions_merge_without_loss(tmp_path, run, seed):
    names, base, sides = random_versions(seed)
    base_text = render(names, base, T0)
    texts = [render(*sides[side]) for side in ("ours", "theirs")]
    code, text = merge_file(run, base_text, texts[0], texts[1], tmp_path)
    assert code == 0, text
    assert any_marker_lines(text) == []
    assert_shape(text)
    assert text.splitlines()[0] == "# Session Memory"

    expected_sections = list(names) + [
        name for side in ("ours", "theirs") for name in sides[side][0] if name not in names
    ]
    assert sorted(headings(text)[:-1]) == sorted(expected_sections), text
    assert headings(text)[: len(names)] == names
    for name in expected_sections:
        merged = section_lines(text, name)
        want = set(base.get(name, []))
        for side in ("ours", "theirs"):
            want |= set(sides[side][1].get(name, []))
        assert sorted(merged) == sorted(want), (name, text)  # each bullet once, nothing lost
        for side in ("ours", "theirs"):
            own = sides[side][1].get(name, [])
            assert is_subsequence(own, merged), (side, name, own, merged)
    later = max((sides[side][2] for side in ("ours", "theirs")), key=epoch)
    assert section_lines(text, "Last Updated") == [later]


@pytest.fixture
def facts_base(store, run):
    assert run("fact", "set", "language", "Go 1.22", "--why", "the port").code == 0
    assert run("fact", "set", "ci", "GitHub Actions").code == 0
    return (store / ".stacks" / "refs" / "facts.md").read_text()


def theirs_note(base: str) -> str:
    """A hand-added note under the newest History entry of `language`."""
    lines = base.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("- ") and "Go 1.22" in line)
    return "\n".join([*lines[: at + 1], "  - *Note: pinned in go.mod*", *lines[at + 1 :]]) + "\n"


@pytest.mark.parametrize(
    "ours_edit, theirs_edit",
    [
        ("current", "note"),
        ("current", "set"),
        ("current", "other"),
        ("history", "note"),
        ("current-and-history", "note"),
    ],
)
def test_the_merge_driver_never_drops_a_hand_edited_fact(
    store, run, facts_base, monkeypatch, ours_edit, theirs_edit
):
    base = facts_base
    ours = base
    if "current" in ours_edit:
        ours = ours.replace("**Current:** Go 1.22", "**Current:** Go 1.23 (hand-edited)")
    if "history" in ours_edit:
        ours = ours.replace(": Go 1.22\n", ": Go 1.22 (corrected)\n", 1)
    if theirs_edit == "note":
        theirs = theirs_note(base)
    else:
        facts = store / ".stacks" / "refs" / "facts.md"
        key, value = ("language", "Rust") if theirs_edit == "set" else ("db", "Postgres")
        monkeypatch.setattr(stm, "utc_now", lambda: stm.time.time() + 3600)
        assert run("fact", "set", key, value).code == 0
        theirs = facts.read_text()
    paths = {}
    for name, text in (("base", base), ("ours", ours), ("theirs", theirs)):
        paths[name] = store / f"{name}.md"
        paths[name].write_text(text)
    result = run("merge-file", *(str(paths[n]) for n in ("base", "ours", "theirs")))
    merged = paths["ours"].read_text()
    assert result.code in (0, 1), result
    for line in added_lines(base, ours) + added_lines(base, theirs):
        assert line in merged, (line, merged)  # kept, merged or between conflict markers
    assert (result.code == 1) == ("<<<<<<<" in merged)


def test_merge_file_on_a_symlinked_ours_is_a_usage_error(store, run, tmp_path):
    target = tmp_path / "elsewhere.md"
    target.write_text("# M\n")
    for name in ("base", "theirs"):
        (store / f"{name}.md").write_text("# M\n\n## A\n")
    (store / "ours.md").symlink_to(target)
    result = run("merge-file", "base.md", "ours.md", "theirs.md")
    assert result.code == 2 and result.err.count("\n") == 1 and "ours.md" in result.err
    assert target.read_text() == "# M\n" and (store / "ours.md").is_symlink()


@pytest.mark.parametrize(
    "argv",
    [
        ["claude"],
        ["mcp", "--client", "claude"],
        ["mcp", "--client", "cursor"],
        ["mcp", "--client", "vscode"],
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("existing", [False, True], ids=["new", "existing"])
@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_setup_on_a_full_disk_leaves_the_tree_as_it_was(
    store, run, monkeypatch, argv, existing, fail_at
):
    if existing:  # a settings file the user already has: kept byte for byte, no backup left
        for folder, name in ((".claude", "settings.json"), (".cursor", "mcp.json")):
            (store / folder).mkdir()
            (store / folder / name).write_text('{"user": "kept"}\n')
        (store / ".mcp.json").write_text('{"user": "kept"}\n')
    before = snapshot(store)
    real_write, calls = os.write, []

    def full(fd, data):  # the disk fills up at the fail_at-th write (SQLite's method)
        calls.append(fd)
        if len(calls) >= fail_at:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(stm.os, "write", full)
    result = run("setup", *argv, "--install")
    monkeypatch.setattr(stm.os, "write", real_write)
    if len(calls) < fail_at:
        assert result.code == 0  # fewer writes than that: it succeeded
        return
    assert result.code == 1 and "No space left on device" in result.err
    assert result.err.count("\n") == 1
    assert snapshot(store) == before


def test_setup_git_refuses_an_empty_command(store, run):
    result = run("setup", "git", "--command", "")
    assert result.code == 2 and "--command" in result.err


@pytest.mark.parametrize(
    ("path", "where"),
    [(".stacks/refs/design.md", "`stm search` finds it"), (".stacks/MEMORY.md", "`stm boot`")],
)
def test_the_driver_s_line_names_each_section_and_where_to_read_the_other(
    tmp_path, run, monkeypatch, path, where
):
    """Boot reads identity and MEMORY.md only: for a ref the driver's line points to
    search, not to a boot notice that never comes; two sections are "them"."""
    monkeypatch.chdir(tmp_path)  # outside git: the versions' authors are unknown
    sides = {}
    for side in ("base", "ours", "theirs"):
        sides[side] = tmp_path / side
        sides[side].write_text(f"# Design\n\n## Choice\n\n{side} choice\n\n## Why\n\n{side} why\n")
    result = run("merge-file", *map(str, sides.values()), "--path", path)
    assert result.code == 0, result
    assert f"{path} ## Choice, ## Why: both sides rewrote them;" in result.err, result.err
    assert where in result.err and ("`stm boot`" in result.err) == (where == "`stm boot`")
    merged = sides["ours"].read_text()
    assert "<!-- stm:settled " in merged and marker_lines(merged) == [], merged
