"""Hardening, second pass (issue 22): input that must never steer stm or make it slow.

Each test reproduces one reported failure first, then states the guarantee as behaviour:
commands stm writes for a shell are run for real with `sh -c`; complexity is proved by
counting operations (calls of an inner function) on an input and on one twice as big,
never by wall time; every refusal is one line, a documented exit code, the tree unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
from conftest import STM_PY, snapshot
from helpers import added_lines, run_sh, run_stm

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


# ---- 3: every command stm writes for a shell is quoted ------------------------------------


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


# ---- 7: a user name in any script ------------------------------------------------------------

NON_ASCII_USERS = ["Юрий", "李", "🦊", "Ünal Çelik"]


@pytest.mark.parametrize("user", NON_ASCII_USERS)
def test_a_user_name_without_ascii_letters_works_everywhere(store, run, monkeypatch, user):
    monkeypatch.setenv("STM_USER", user)
    assert run("boot").code == 0
    assert run("log", "worked on the lexer").code == 0
    created = run("session", "new", "--name", "port").out.strip()
    for argv in (["status"], ["check"], ["session", "list"], ["boot"]):
        result = run(*argv)
        assert result.code == 0, (argv, result)
    assert created in run("session", "list").out
    log = next((store / ".stacks" / "logs").glob("*.md")).read_text()  # not .gitkeep
    assert f"· {user} <!--" in log  # the author is kept verbatim
    folders = [p.name for p in (store / ".state" / "sessions").iterdir() if p.is_dir()]
    assert folders == [f"user-{stm.user_slug(user)}"]
    slug = stm.user_slug(user)
    assert slug == stm.user_slug(user.upper() if user.isalpha() else user)  # case-blind
    assert slug.isascii() and stm.check_component(f"user-{slug}", "user folder")


def test_user_slugs_are_stable_distinct_and_keep_ascii_names_as_they_were():
    assert stm.user_slug("Alice Smith") == "alice-smith"  # unchanged for existing users
    assert stm.user_slug("José") == "jos-"
    slugs = {stm.user_slug(name) for name in NON_ASCII_USERS[:3] + ["Иван", "王"]}
    assert len(slugs) == 5
    assert stm.user_slug("Юрий") == stm.user_slug("ЮРИЙ") == stm.user_slug(" Юрий ")
    # NFC and NFD spellings (a macOS file name, a Linux shell) are one user
    assert stm.user_slug("Ünal") == stm.user_slug("U\u0308nal")


@pytest.mark.parametrize("user", ["   ", "---", "..."])
def test_a_user_name_with_nothing_to_name_is_still_refused(store, run, monkeypatch, user):
    monkeypatch.setenv("STM_USER", user)
    result = run("session", "list")
    assert result.code == 2 and "STM_USER" in result.err


# ---- 10: the 1 MiB text limit holds in every front end ----------------------------------------

BIG = "x" * (3 * 1024 * 1024)


@pytest.fixture
def mcp(store):
    """start() -> an `stm mcp` process on the store (tests/mcp_client.py); all reaped."""
    from mcp_client import McpClient

    clients = []

    def start():
        clients.append(McpClient(stacks=store / ".stacks", cwd=store))
        return clients[-1]

    yield start
    for client in clients:
        client.kill()


@pytest.mark.parametrize(
    "tool, arguments, named",
    [
        ("log", {"text": BIG}, "text"),
        ("note", {"section": "Status", "text": BIG}, "text"),
        ("note", {"section": "S" * (3 * 1024 * 1024), "text": "x"}, "section"),
        ("session_new", {"name": BIG}, "name"),
        ("search", {"query": BIG}, "query"),
    ],
    ids=["log-text", "note-text", "note-section", "session-name", "search-query"],
)
def test_mcp_refuses_text_over_the_cli_limit_naming_the_argument(
    store, mcp, tool, arguments, named
):
    before = snapshot(store)
    client = mcp()
    result = client.tool_result(tool, arguments)
    assert result["isError"] is True
    message = result["content"][0]["text"]
    assert message.startswith("stm: error:") and repr(named) in message and "1 MiB" in message
    assert len(message) < 300
    assert snapshot(store) == before
    assert client.tool_result("status", {})["isError"] is False  # the server goes on
    assert client.close() == 0


@pytest.mark.parametrize(
    "operation",
    [
        lambda s: stm.append_log(s, BIG),
        lambda s: stm.add_memory_note(s, "Status", BIG),
        lambda s: stm.add_memory_note(s, "S" * 5000, "x"),
    ],
    ids=["append_log", "add_memory_note", "note-section-name"],
)
def test_the_operations_themselves_refuse_text_over_the_limit(store, operation):
    before = snapshot(store)
    s = stm.open_store(stacks=str(store / ".stacks"))
    with pytest.raises(stm.StmError) as refused:
        operation(s)
    assert refused.value.code == 2
    assert snapshot(store) == before


# ---- 11: JSON is RFC 8259 JSON, in and out ---------------------------------------------------


def strict_json(line: bytes):
    """Parse like a strict client: NaN, Infinity and numbers out of range are errors."""

    def refuse(token):
        raise ValueError(f"non-standard JSON: {token}")

    def finite(text):
        value = float(text)
        if value in (float("inf"), float("-inf")):
            raise ValueError(f"out of range: {text}")
        return value

    return json.loads(line, parse_constant=refuse, parse_float=finite)


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
@pytest.mark.parametrize("where", ["argument", "version", "id"])
def test_mcp_refuses_non_standard_numbers_and_never_writes_them(store, mcp, number, where):
    client = mcp()
    meta = json.dumps(MODERN_META)
    if where == "argument":
        params = f'{{"_meta": {meta}, "name": "boot", "arguments": {{"max_chars": {number}}}}}'
    elif where == "version":
        params = f'{{"_meta": {{"io.modelcontextprotocol/protocolVersion": {number}}}}}'
    else:
        params = f'{{"_meta": {meta}, "name": "status"}}'
    request_id = number if where == "id" else "7"
    line = f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", "params": {params}}}'
    client.send_raw(line.encode() + b"\n")
    answer = client.recv()
    assert answer["error"]["code"] == -32700 and answer["id"] is None, answer
    assert client.tool_result("status", {})["isError"] is False  # the server goes on
    assert client.close() == 0
    for line in client.lines:
        strict_json(line)  # every line the server wrote is standard JSON


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
@pytest.mark.parametrize(
    "argv, path",
    [
        (["setup", "claude", "--install"], ".claude/settings.json"),
        (["setup", "claude", "--remove"], ".claude/settings.json"),
        (["setup", "mcp", "--install"], ".mcp.json"),
    ],
    ids=["claude-install", "claude-remove", "mcp-install"],
)
def test_setup_refuses_a_settings_file_holding_a_non_standard_number(
    store, run, number, argv, path
):
    target = store / path
    target.parent.mkdir(exist_ok=True)
    target.write_text(f'{{"timeout": {number}, "hooks": {{"SessionStart": []}}}}\n')
    before = snapshot(store)
    result = run(*argv)
    assert result.code == 1, result
    assert result.err.count("\n") == 1 and path.split("/")[-1] in result.err
    assert snapshot(store) == before


@pytest.mark.parametrize("number", ["NaN", "1e999"])
def test_a_state_file_holding_a_non_standard_number_is_reported_not_used(store, run, number):
    sid = run("session", "new", "--name", "x").out.strip()
    state = next((store / ".state" / "sessions").glob(f"*/{sid}/state.json"), None) or next(
        (store / ".state" / "sessions").glob(f"{sid}/state.json")
    )
    data = state.read_text()
    state.write_text(data.replace('"version": 1', f'"version": 1, "x": {number}'))
    before = snapshot(store)
    assert run("session", "checkpoint", "--done", "a").code == 1
    assert snapshot(store) == before
    found = json.loads(run("check", "--json").out)
    assert any(f["path"].endswith("state.json") for f in found["findings"])


# ---- 9: a regex search is bounded --------------------------------------------------------------

# Each of these backtracks exponentially (or worse) on a line of ~40 characters.
CATASTROPHIC = [
    "(a+)+$",
    "(a*)*b",
    "(?:a|aa)+$",
    "(a?a?)+$",
    "(\\w+\\s?)*$",
    "(x+x+)+y",
    "(a){2,}(a+)+$",
    "^(a|a?)+$",
    "(.*a){20}",
    "(a+){30}$",
    "(?=(a+)+$)",
    "(a)\\1*$",
]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_catastrophic_regex_is_refused_before_any_line_is_read(store, run, pattern):
    (store / ".stacks" / "MEMORY.md").write_text("# M\n\n## S\n\n" + "a" * 41 + "!\n")
    result = run("search", "--regex", pattern)
    assert result.code == 2 and result.out == ""
    assert result.err.count("\n") == 1 and "regex" in result.err


@pytest.mark.parametrize(
    "pattern",
    ["parser|lexer", "^## ", "grammar.*bugs", "\\bport(ed)?\\b", "[0-9]{4}-[0-9]{2}", "(ab)+c"],
)
def test_ordinary_regexes_still_search(store, run, pattern):
    assert run("search", "--regex", pattern).code in (0, 1)  # found or not; never refused


def test_the_mcp_search_tool_refuses_a_catastrophic_regex_and_goes_on(store, mcp):
    (store / ".stacks" / "MEMORY.md").write_text("# M\n\n## S\n\n" + "a" * 41 + "!\n")
    client = mcp()
    refused = client.tool_result("search", {"query": "(a+)+$", "regex": True})
    assert refused["isError"] is True and "regex" in refused["content"][0]["text"]
    found = client.tool_result("search", {"query": "a+!", "regex": True})
    assert found["isError"] is False and found["structuredContent"]["matches"]
    assert client.close() == 0


def test_a_regex_that_is_only_polynomial_is_stopped_by_the_time_budget(store, run, monkeypatch):
    """`a.*b` passes the static rule but is quadratic on a long line of a's: the search
    stops when its matching has used the budget (made tiny here), exit 2, one line."""
    (store / ".stacks" / "MEMORY.md").write_text("# M\n\n## S\n\n" + "a" * 400_000 + "\n")
    monkeypatch.setattr(stm, "REGEX_BUDGET_S", 0.2)
    result = run("search", "--regex", "a.*b")
    assert result.code == 2 and result.err.count("\n") == 1 and "regex" in result.err
    import signal

    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)  # handler put back
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # timer put back
    assert run("search", "--regex", "a{3}$").code == 0  # the next search is not affected


# ---- 16: the merge driver never drops a line ----------------------------------------------------


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


# ---- 5: boot under a limit is n log n in MEMORY.md bullets --------------------------------------


def memory_with_bullets(count: int) -> str:
    lines = ["# Session Memory", ""]
    for section in range(4):
        lines += [f"## Section {section}", ""]
        lines += [f"- bullet {section}-{i}: some words of a note" for i in range(count // 4)]
        lines.append("")
    return "\n".join([*lines, "## Last Updated", "", "2026-01-01", ""])


def counted(monkeypatch, *names) -> dict:
    """Count the calls of stm functions (looked up by name at call time)."""
    calls = dict.fromkeys(names, 0)
    for name in names:
        real = getattr(stm, name)

        def wrapper(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(stm, name, wrapper)
    return calls


def test_boot_under_a_limit_does_n_log_n_work_in_memory_bullets(store, run, monkeypatch):
    steps = []
    for count in (1000, 2000):
        (store / ".stacks" / "MEMORY.md").write_text(memory_with_bullets(count))
        with monkeypatch.context() as patch:
            calls = counted(patch, "md_bullet_goes_on", "render_boot")
            result = run("boot", "--max-chars", "9500")
        assert result.code == 0 and len(result.out) <= 9500
        assert "older bullets of Section" in result.out
        steps.append(calls)
    small, big = steps
    assert small["md_bullet_goes_on"] >= 1000, steps  # the memory was read item by item
    assert big["md_bullet_goes_on"] <= 2.2 * small["md_bullet_goes_on"], steps  # linear per line
    assert big["render_boot"] <= small["render_boot"] + 3, steps  # a binary search: log n


def md_blocks(text: str) -> tuple[list[str], list[list]]:
    """A boot-rendered text as (preamble, [[heading, [units]]]), units as the Markdown
    model reads them: each item (a bullet with its continuation, a fence, ...) and each
    line outside an item."""
    doc = stm.MdDoc(stm.md_lines(text), depth=2)
    blocks = []
    for part in doc.parts:
        starts = {item.start: item for item in doc.items(part)}
        units, index = [], part.start + 1
        while index < part.end:
            end = starts[index].end if index in starts else index + 1
            units.append(doc.lines[index:end])
            index = end
        blocks.append([doc.lines[part.start], units])
    return doc.preamble, blocks


def is_bullet_unit(unit: list[str]) -> bool:
    return unit[0].startswith(("- ", "* "))


def reference_cut_memory(text: str, bullets: int, sections: int):
    """cut_memory as it was before issue 22 (quadratic), to prove the output unchanged."""
    preamble, blocks = md_blocks(text)
    left_out = []
    removed: dict[int, int] = {}
    for _ in range(bullets):
        counts = [sum(is_bullet_unit(u) for u in units) for _, units in blocks]
        index = max(range(len(blocks)), key=lambda i: (counts[i], i), default=None)
        if index is None or counts[index] == 0:
            break
        units = blocks[index][1]
        last = max(i for i, unit in enumerate(units) if is_bullet_unit(unit))
        del units[last]
        removed[index] = removed.get(index, 0) + 1
    for index in sorted(removed):
        left_out.append(
            f"{stm.plural(removed[index], 'older bullet')} of {blocks[index][0][5:].strip()}"
        )
    if sections:
        keep = len(blocks) - sections if sections > 0 else 0
        names = [heading[5:].strip() for heading, _ in blocks[keep:]]
        blocks = blocks[:keep]
        if names:
            left_out.append(
                ("the section " if len(names) == 1 else "the sections ") + ", ".join(names)
            )
    lines = list(preamble)
    for heading, units in blocks:
        lines.append(heading)
        for unit in units:
            lines += unit
    return "\n".join(lines).strip("\n"), left_out


def random_boot_memory(rng) -> str:
    pieces = ["intro line"] if rng.random() < 0.5 else []
    for section in range(rng.randint(0, 6)):
        pieces.append(f"#### S{section}")
        for _ in range(rng.randint(0, 9)):
            kind = rng.random()
            if kind < 0.5:
                pieces.append(f"- b{rng.randint(0, 99)}")
                pieces += ["  more"] * rng.randint(0, 2)
            elif kind < 0.6:
                pieces += ["```", "#### not a heading", "- not a bullet", "```"]
            elif kind < 0.7:
                pieces.append("* star bullet")
            else:
                pieces.append(rng.choice(["prose", "", "  indented prose"]))
    return "\n".join(pieces)


def test_cut_memory_gives_what_it_always_gave():
    import random

    rng = random.Random(22)
    for _ in range(3000):
        text = random_boot_memory(rng)
        bullets, sections = rng.randint(0, 30), rng.choice([0, 0, 1, 2, -1])
        assert stm.cut_memory(text, bullets, sections) == reference_cut_memory(
            text, bullets, sections
        ), (text, bullets, sections)
