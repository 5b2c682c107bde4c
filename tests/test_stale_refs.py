"""Stale references (spec/memory-layers.md, "Stale references"): memory naming code that
moved or is gone, checked against a real git history with renames (one and chained), a
folder move, deletions, removed functions and a removed Make target; prose, URLs, code
fences, library names and paths that never existed are never flagged."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from helpers import boot_section, check_findings, git, git_out, needs_git, ok, use_private_git
from mcp_client import McpClient

import stm

pytestmark = pytest.mark.git  # git-heavy: `pytest -m 'not git'` leaves this file out

pytestmark = needs_git

PARSER = "def parse(text):\n    return text\n\n\ndef run_migrations():\n    pass\n"
MAKEFILE = "build:\n\techo build\n\ndeploy: build\n\techo deploy\n"

# Each note names one thing the refactor changes, or something that must stay unflagged.
NOTES = {
    "chained": "The parser lives in `src/parser.py` (its entry is src/parser.py:42)",
    "single": "Tokens come from src/lexer.py",
    "folder": "Helpers are under lib/helpers/ now",
    "deleted": "Deploying is described in docs/deploy.md",
    "symbol": "Call `run_migrations()` before the tests",
    "target": "Ship with `make deploy` once CI is green",
    "root": "The entry point is b.py, at the root",
    "alive": "`parse()` returns its input; `make build` builds; README.md says how",
    "library": "Sort with `sorted()` and read with `json.loads()`; see README.md",
    "url": "Kept at https://example.com/src/parser.py and www.example.com/docs/deploy.md",
    "planned": "Next: write src/planner/graph.py and `plan_graph()`; and/or e.g. Node.js",
    "history": "Renamed src/lexer.py to src/lex.py; docs/deploy.md was removed",
}
EXPECTED = ["chained", "single", "folder", "deleted", "symbol", "target"]


def commit(repo, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git_out(repo, "log", "-1", "--format=%h", strip=True)


def memory_with(notes: dict) -> str:
    bullets = "\n".join(f"- {text}" for text in notes.values())
    return (
        "# Session Memory\n\n## Status\n\nRefactor in progress.\n\n## Observations\n\n"
        f"{bullets}\n\n## Open Questions\n\n## Next Steps\n\n- Finish it\n\n"
        "## Last Updated\n\n2026-01-01\n"
    )


def line_of(path, needle: str) -> int:
    lines = path.read_text().split("\n")
    return next(i for i, line in enumerate(lines, 1) if needle in line)


@pytest.fixture
def refactor(project, run, monkeypatch):
    """A project whose memory was written, then a refactor renamed, moved, deleted and
    removed what it names. Returns the commits by what they did."""
    use_private_git(monkeypatch, project.parent)
    git(project, "init", "-q")
    (project / "src").mkdir()
    (project / "src" / "parser.py").write_text(PARSER)
    (project / "src" / "lexer.py").write_text("TOKENS = []\n")
    (project / "lib" / "helpers").mkdir(parents=True)
    (project / "lib" / "helpers" / "text.py").write_text("def clean():\n    pass\n")
    (project / "lib" / "helpers" / "dates.py").write_text("def today():\n    pass\n")
    (project / "docs").mkdir()
    (project / "docs" / "deploy.md").write_text("# Deploy\n")
    (project / "Makefile").write_text(MAKEFILE)
    (project / "b.py").write_text("print('entry')\n")
    (project / "README.md").write_text("# Project\n")
    (project / "main.py").write_text("import json\nprint(sorted(json.loads('[]')))\n")
    commit(project, "the code")
    ok(run("init"))
    (project / ".stacks" / "AGENT.md").write_text(
        "# Agent Identity\n\n## Role\n\nMaintainer. Tests live in tests/, none yet.\n\n"
        "## Principles\n\n- Keep b.py small\n\n## Conventions\n\n- Format with ruff\n"
    )
    (project / ".stacks" / "MEMORY.md").write_text(memory_with(NOTES))
    commit(project, "memory")
    commits = {}
    git(project, "mv", "src/parser.py", "src/parse.py")
    commits["rename1"] = commit(project, "rename the parser")
    (project / "src" / "parse").mkdir()
    git(project, "mv", "src/parse.py", "src/parse/core.py")
    commits["rename2"] = commit(project, "move the parser into a package")
    git(project, "mv", "src/lexer.py", "src/lex.py")
    commits["lexer"] = commit(project, "rename the lexer")
    git(project, "mv", "lib/helpers", "pkg")
    commits["folder"] = commit(project, "helpers become pkg")
    git(project, "rm", "-q", "docs/deploy.md")
    commits["deleted"] = commit(project, "drop the deploy doc")
    (project / "src" / "parse" / "core.py").write_text("def parse(text):\n    return text\n")
    (project / "Makefile").write_text("build:\n\techo build\n")
    commits["removed"] = commit(project, "remove migrations and the deploy target")
    return commits


def stale(found: list[dict]) -> list[dict]:
    return [f for f in found if f["rule"] == "stale-reference"]


def test_check_lists_each_stale_reference_with_its_commit(refactor, project, run):
    code, found = check_findings(run)
    assert code == 0  # warnings leave the exit code alone
    memory = project / ".stacks" / "MEMORY.md"
    by_line = {}
    for f in stale(found):
        assert f["path"] == ".stacks/MEMORY.md" and f["severity"] == "warning"
        by_line.setdefault(f["line"], []).append(f["message"])
    assert sorted(by_line) == sorted(line_of(memory, NOTES[k]) for k in EXPECTED)
    day = stm.iso(int(git_out(project, "log", "-1", "--format=%ct", strip=True)))[:10]

    def said(key: str) -> str:
        return " | ".join(by_line[line_of(memory, NOTES[key])])

    assert said("chained") == (
        f"names `src/parser.py`, which moved: it is `src/parse/core.py` now "
        f"(renamed in {refactor['rename2']}, {day})"
    )
    assert said("single") == (
        f"names `src/lexer.py`, which moved: it is `src/lex.py` now "
        f"(renamed in {refactor['lexer']}, {day})"
    )
    assert "names `lib/helpers`, which moved: it is `pkg` now" in said("folder")
    assert said("deleted") == f"names `docs/deploy.md`, deleted in {refactor['deleted']} ({day})"
    assert (
        said("symbol")
        == "names `run_migrations()`, which is no longer defined anywhere in the code"
    )
    assert said("target") == "names `make deploy`, but the Makefile target `deploy` is gone"
    assert run("check", "--strict").code == 1  # --strict fails on a warning


def test_nothing_true_is_flagged(refactor, project, run):
    """Prose, URLs, library names, planned paths, what still exists, and AGENT.md's
    paths that exist (b.py) or never did (tests/): none is a finding."""
    _, found = check_findings(run)
    memory = project / ".stacks" / "MEMORY.md"
    flagged = {f["line"] for f in stale(found)}
    for key in set(NOTES) - set(EXPECTED):
        assert line_of(memory, NOTES[key]) not in flagged, key
    assert not [f for f in stale(found) if f["path"] != ".stacks/MEMORY.md"]


def test_check_fix_rewrites_the_moved_paths_and_nothing_else(refactor, project, run):
    memory = project / ".stacks" / "MEMORY.md"
    before = memory.read_text()
    dry = ok(run("check", "--fix", "--dry-run"))
    assert memory.read_text() == before
    assert "would fix stale-reference" in dry.out
    fixed = ok(run("check", "--fix"))
    # Logged like every fix: one line each, naming the file, the line and the change.
    line = line_of(memory, "The parser lives in")
    assert (
        f"fixed     stale-reference    .stacks/MEMORY.md:{line}: replaced `src/parser.py` "
        "with `src/parse/core.py`" in fixed.out
    )
    after = memory.read_text()
    changed = [(a, b) for a, b in zip(before.split("\n"), after.split("\n")) if a != b]
    assert len(before.split("\n")) == len(after.split("\n"))
    assert sorted(b for _, b in changed) == sorted(
        [
            "- The parser lives in `src/parse/core.py` (its entry is src/parse/core.py:42)",
            "- Tokens come from src/lex.py",
            "- Helpers are under pkg/ now",
        ]
    )
    assert "https://example.com/src/parser.py" in after  # a URL is never rewritten
    _, found = check_findings(run)
    assert sorted(f["message"].split(",")[0] for f in stale(found)) == sorted(
        ["names `docs/deploy.md`", "names `run_migrations()`", "names `make deploy`"]
    )


def test_boot_marks_each_misleading_line_in_place(refactor, project, run):
    text = ok(run("boot")).out
    memory = boot_section(text, "Session memory (.stacks/MEMORY.md)")
    lines = memory.split("\n")

    def shown(key: str) -> str:
        return next(line for line in lines if NOTES[key].split("`")[0][:20] in line)

    assert shown("chained").endswith("(moved: now src/parse/core.py)")
    assert shown("single").endswith("(moved: now src/lex.py)")
    assert shown("folder").endswith("(moved: now pkg)")
    assert re.search(
        r"\(stale: docs/deploy\.md deleted \d+ (minute|hour|day)s? ago\)$", shown("deleted")
    )
    assert shown("symbol").endswith("(stale: run_migrations() no longer defined)")
    assert shown("target").endswith("(stale: make deploy: target gone)")
    for key in set(NOTES) - set(EXPECTED):
        assert "(moved:" not in shown(key) and "(stale:" not in shown(key), key
    notices = boot_section(text, "Notices")
    assert notices.count("moved or is gone") == 1
    assert "- 6 lines of memory name code that moved or is gone" in notices
    assert "check` lists each with its commit" in notices


def test_boot_marks_fit_a_tight_budget(refactor, project, run):
    full = ok(run("boot")).out
    limit = len(full) - 200
    text = ok(run("boot", "--max-chars", str(limit))).out
    assert len(text) <= limit
    assert "(moved: now src/parse/core.py)" in text
    assert "moved or is gone" in boot_section(text, "Notices")
    tiny = ok(run("boot", "--max-chars", "700")).out
    assert len(tiny) <= 700


def test_mcp_boot_carries_the_same_marks(refactor, project):
    client = McpClient(stacks=project / ".stacks", cwd=project)
    try:
        result = client.tool_result("boot", {})
        text = "".join(part.get("text", "") for part in result["content"])
        assert "(moved: now src/parse/core.py)" in text
        assert "(stale: run_migrations() no longer defined)" in text
        assert "moved or is gone" in text
    finally:
        assert client.close() == 0


def test_refs_code_fences_and_sessions_are_checked_logs_never(refactor, project, run):
    ref = project / ".stacks" / "refs" / "deploying.md"
    ref.write_text(
        "# Deploying\n\nRead this first.\n\n```sh\npython3 src/lexer.py --check\n"
        "cat docs/never/there.txt\n```\n<!-- src/lexer.py in a comment is not a note -->\n"
    )
    ok(run("log", "edited docs/deploy.md and src/lexer.py"))  # history: never checked
    ok(run("session", "new", "--name", "port"))
    ok(
        run(
            "session", "checkpoint", "--pending", "update docs/deploy.md",
            "--pending", "keep README.md", "--resume", "run `make deploy`",
        )
    )  # fmt: skip
    _, found = check_findings(run)
    where = sorted((f["path"], f["line"] or 0, f["message"]) for f in stale(found))
    in_ref = [(n, m) for p, n, m in where if p == ".stacks/refs/deploying.md"]
    assert len(in_ref) == 1 and in_ref[0][0] == 6  # the fence's line; not the comment's
    assert in_ref[0][1].startswith("names `src/lexer.py`, which moved: it is `src/lex.py` now")
    assert not [p for p, _, _ in where if "/logs/" in p]
    state = [(p, n) for p, n, _ in where if p.endswith("state.json")]
    assert len(state) == 2 and {n for _, n in state} == {0}  # no line: a field of the state
    messages = [f["message"] for f in stale(found) if f["path"].endswith("state.json")]
    assert sorted(m.split(":")[0] for m in messages) == ["pending step 1", "the resume line"]
    # Boot marks the workflow's lines the same way.
    workflow = boot_section(ok(run("boot")).out, "Active workflow")
    assert re.search(r"  1\. update docs/deploy\.md \(stale: docs/deploy\.md deleted", workflow)
    assert "- Resume: run `make deploy` (stale: make deploy: target gone)" in workflow
    assert "keep README.md (" not in workflow
    # --fix rewrites the ref's moved path, and never a session's state.
    ok(run("check", "--fix"))
    assert "python3 src/lex.py --check" in ref.read_text()


def count_git(monkeypatch) -> list:
    calls = []
    real = subprocess.run

    def counting(argv, *args, **kwargs):
        calls.append(list(argv))
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting)
    return calls


def test_boot_runs_nothing_extra_without_git_or_references(project, run, monkeypatch):
    use_private_git(monkeypatch, project.parent)
    ok(run("init"))
    (project / ".stacks" / "MEMORY.md").write_text(memory_with(NOTES))
    (project / "src").mkdir()
    calls = count_git(monkeypatch)
    ok(run("boot"))
    assert calls == []  # no git work tree: no process at all
    git(project, "init", "-q")
    (project / ".stacks" / "MEMORY.md").write_text(memory_with({"x": "Nothing to look up."}))
    commit(project, "memory")
    calls.clear()
    ok(run("boot"))
    without = len(calls)
    assert not [c for c in calls if "grep" in c or "-M" in c or "-1" in c]
    # References that all exist now cost a stat each, no process.
    (project / "src" / "a.py").write_text("x = 1\n")
    (project / ".stacks" / "MEMORY.md").write_text(memory_with({"x": "See src/a.py and src/."}))
    calls.clear()
    ok(run("boot"))
    assert len(calls) == without
    # A symbol is looked up with one `git grep`, and the history only when it is missing.
    (project / ".stacks" / "MEMORY.md").write_text(memory_with({"x": "`missing_one()`"}))
    calls.clear()
    ok(run("boot"))
    assert stale_calls(calls) == ["grep", "memory's commit", "grep"]


def test_find_code_refs_reads_what_notes_name():
    refs = stm.find_code_refs(
        "see `src/x.py:42`, b.py and src/y/ (`parse()` in src/x.py); run `make test` and "
        "`npm run build`; https://h.io/a/b.py; `./tools/go.sh -v`."
    )
    assert refs == [
        ("path", "src/x.py", "src/x.py", ""),
        ("path", "b.py", "b.py", ""),
        ("path", "src/y", "src/y", ""),
        ("path", "tools/go.sh", "tools/go.sh", ""),
        ("symbol", "parse", "parse()", "src/x.py"),
        ("target", "test", "make test", "make"),
        ("target", "build", "npm run build", "npm"),
    ]
    assert stm.find_code_refs("/etc/hosts and ../up.py and ~/x.py") == []


FALSE_POSITIVE_CORPUS = """\
- Use `pytest -q` to run the tests; `ruff check .` lints; `git log --oneline` shows history
- The API returns JSON; parse it with `json.loads()` and sort with `sorted()`
- Python 3.9+ only; Node.js 20 for the docs site; e.g. v1.2.3 was the last release
- Read/write locks are fcntl-based; TCP/IP timeouts are 2 s
- Links: https://docs.python.org/3/library/os.path.html and www.example.org/a/b.md
- Config lives in pyproject.toml and setup.cfg (both at the root)
- Entry point: main.py; helpers in src/util/ (src/util/strings.py, src/util/dates.py)
- `main()` in main.py calls `load()` from src/util/strings.py
- Run `make build` then `make test`; `npm run lint` checks the site
- Plan: add src/cache/lru.py and `evict()` later; maybe docs/cache.md
- Email me at dev@example.com about the .env file and ~/.config/app.toml
- Windows paths like C:\\Users\\x\\app.py and /usr/local/bin/app are not ours
- Version numbers: 2.0.1, 10.4; ratios 3/4 and 1/2; dates 2026/01/02
- The `__init__()` methods stay small; `self.path` is a str, `os.path.join()` joins
```python
from src.util.strings import load
print(load("a.b"))
```
- Commit messages follow `type(scope): subject`; branch names feat/x-y are fine
- A fenced shell session: `python3 main.py --help`; logs go to logs/app.log (ignored)
- Refs: see refs/guide.md in memory; .stacks/MEMORY.md is this file
- CI runs .github/workflows/ci.yml; old.py was renamed, so imports say older
"""


def test_false_positives_on_ordinary_notes(project, run, monkeypatch):
    """A corpus of ordinary notes in a repository whose history renamed and deleted
    other files: nothing in it is flagged (the count spec/memory-layers.md reports)."""
    use_private_git(monkeypatch, project.parent)
    git(project, "init", "-q")
    (project / "src" / "util").mkdir(parents=True)
    (project / "src" / "util" / "strings.py").write_text("def load(x):\n    return x\n")
    (project / "src" / "util" / "dates.py").write_text("D = 1\n")
    (project / "main.py").write_text("def main():\n    pass\n")
    (project / "pyproject.toml").write_text("[project]\n")
    (project / "setup.cfg").write_text("")
    (project / "Makefile").write_text("build:\n\ttrue\ntest:\n\ttrue\n")
    (project / "package.json").write_text(json.dumps({"scripts": {"lint": "true"}}))
    (project / "old.py").write_text("def evict():\n    pass\n")
    (project / ".github" / "workflows").mkdir(parents=True)
    (project / ".github" / "workflows" / "ci.yml").write_text("on: push\n")
    commit(project, "code")
    ok(run("init"))
    (project / ".stacks" / "MEMORY.md").write_text(
        memory_with({"corpus": FALSE_POSITIVE_CORPUS.strip()[2:]})
    )
    commit(project, "memory")
    git(project, "mv", "old.py", "older.py")
    commit(project, "unrelated rename")
    _, found = check_findings(run)
    assert stale(found) == []
    assert "(stale:" not in ok(run("boot")).out and "(moved:" not in ok(run("boot")).out


def test_path_fate_follows_chains_to_where_they_end():
    events = [
        ("R", "a.py", "b.py", "c1", 1),
        ("R", "b.py", "c/d.py", "c2", 2),
        ("R", "x.py", "y.py", "c3", 3),
        ("D", "y.py", "", "c4", 4),
        ("R", "p.py", "q.py", "c5", 5),
        ("R", "q.py", "p.py", "c6", 6),
    ]
    exists = {"c/d.py"}.__contains__
    assert stm.path_fate("a.py", events, exists) == ("moved", "c/d.py", "c2", 2)
    assert stm.path_fate("x.py", events, exists) == ("deleted", "y.py", "c4", 4)
    assert stm.path_fate("never.py", events, exists) is None
    assert stm.path_fate("p.py", events, exists) is None  # a cycle ends, it never loops
    message = stm.code_fate_message(("path", "x.py", "x.py", ""), ("deleted", "y.py", "c4", 4))
    assert message == "names `x.py`, which became `y.py`, deleted in c4 (1970-01-01)"


def test_a_symbol_named_with_its_file_is_looked_up_in_that_file(project, run, monkeypatch):
    use_private_git(monkeypatch, project.parent)
    git(project, "init", "-q")
    (project / "a.py").write_text("def load():\n    pass\n")
    (project / "b.py").write_text("def other():\n    pass\n")
    commit(project, "code")
    ok(run("init"))
    notes = {"in_a": "`load()` in a.py reads it", "in_b": "`other()` in `b.py` too"}
    (project / ".stacks" / "MEMORY.md").write_text(memory_with(notes))
    commit(project, "memory")
    (project / "a.py").write_text("pass\n")  # load() moves to b.py: no longer in a.py
    (project / "b.py").write_text("def other():\n    pass\n\n\ndef load():\n    pass\n")
    commit(project, "move load")
    _, found = check_findings(run)
    assert [f["message"] for f in stale(found)] == [
        "names `load()`, which is no longer defined in a.py"
    ]
    assert "`load()` in a.py reads it (stale: load() no longer in a.py)" in ok(run("boot")).out


def test_no_commit_yet_or_no_history_boots_and_checks_quietly(project, run, monkeypatch):
    use_private_git(monkeypatch, project.parent)
    git(project, "init", "-q")
    ok(run("init"))
    (project / ".stacks" / "MEMORY.md").write_text(memory_with(NOTES))
    text = ok(run("boot")).out
    assert "(stale:" not in text and "(moved:" not in text
    code, found = check_findings(run)
    assert stale(found) == []


def stale_calls(calls: list) -> list[str]:
    """The git commands the stale-reference check runs, by kind."""
    kinds = []
    for argv in calls:
        if "grep" in argv:
            kinds.append("grep")
        elif "diff" in argv and "-M" in argv:
            kinds.append("work tree")
        elif "-M" in argv:
            kinds.append("rename scan")
        elif "-1" in argv and "--format=%H" in argv:
            kinds.append("memory's commit")
    return kinds


def test_git_runs_a_bounded_number_of_times_on_a_large_memory(project, run, monkeypatch):
    """10,000 notes naming 300 symbols, paths that exist, moved, deleted or never were,
    and targets: boot and check each run the same five git commands at most."""
    use_private_git(monkeypatch, project.parent)
    git(project, "init", "-q")
    (project / "src").mkdir()
    for n in range(20):
        (project / "src" / f"m{n}.py").write_text(f"def f{n}():\n    pass\n")
    (project / "Makefile").write_text("build:\n\ttrue\n")
    commit(project, "code")
    ok(run("init"))
    kinds = ("src/m{n}.py", "src/gone{n}.py", "`f{n}()`", "`sym{n}()`", "`make t{n}`", "x")
    notes = {-1: "The first module is src/m1.py"}
    notes.update({n: f"note {n} " + kinds[n % 6].format(n=n % 300) for n in range(10_000)})
    (project / ".stacks" / "MEMORY.md").write_text(memory_with(notes))
    commit(project, "memory")
    git(project, "mv", "src/m1.py", "src/n1.py")
    commit(project, "rename")
    calls = count_git(monkeypatch)
    text = ok(run("boot", "--max-chars", "9500")).out
    assert len(text) <= 9500 and "(moved: now src/n1.py)" in text
    assert sorted(stale_calls(calls)) == [
        "grep", "grep", "memory's commit", "rename scan", "work tree",
    ]  # fmt: skip
    calls.clear()
    _, found = check_findings(run)
    assert any("it is `src/n1.py` now" in f["message"] for f in stale(found))
    assert sorted(stale_calls(calls)) == [
        "grep", "grep", "memory's commit", "rename scan", "work tree",
    ]  # fmt: skip


def test_a_rename_or_deletion_not_committed_yet_is_said_so(refactor, project, run):
    git(project, "mv", "src/lex.py", "src/tokens.py")  # staged, not committed
    (project / "b.py").unlink()  # removed from the work tree only
    _, found = check_findings(run)
    said = {f["message"] for f in stale(found)}
    assert (
        "names `src/lexer.py`, which moved: it is `src/tokens.py` now (renamed in the "
        "work tree, not committed yet)" in said
    )
    assert "names `b.py`, deleted in the work tree (not committed yet)" in said
    text = ok(run("boot")).out
    assert "- Tokens come from src/lexer.py (moved: now src/tokens.py)" in text
    assert "(stale: b.py deleted, not committed yet)" in text


def test_fix_keeps_crlf_and_leaves_a_conflicted_file_alone(refactor, project, run):
    memory = project / ".stacks" / "MEMORY.md"
    memory.write_bytes(memory.read_bytes().replace(b"\n", b"\r\n"))
    result = run("check", "--fix", "--json")
    fixed = json.loads(result.out)["fixed"]
    assert {f["rule"] for f in fixed} == {"stale-reference"} and len(fixed) == 3
    assert all(f["applied"] and f["path"] == ".stacks/MEMORY.md" for f in fixed)
    data = memory.read_bytes()
    assert b"src/parse/core.py" in data and b"\n" not in data.replace(b"\r\n", b"")
    # Conflict markers: a person merges first; --fix writes nothing into the file.
    text = memory.read_text().replace("src/parse/core.py", "src/parser.py")
    text += "<<<<<<< ours\nsrc/lexer.py\n=======\nsrc/lex.py\n>>>>>>> theirs\n"
    memory.write_text(text)
    before = memory.read_bytes()
    run("check", "--fix")
    assert memory.read_bytes() == before
