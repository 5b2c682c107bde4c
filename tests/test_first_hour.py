"""A newcomer's first hour (issue 30) and the small resume items of issue 24 (item 8):
each test runs stm as a new user would and fails if the rough edge comes back."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import sys

import pytest
from conftest import ROOT, all_command_paths, snapshot
from helpers import GIT_IDENTITY, git, isolated_git_env, run_process, run_sh, run_stm

import stm

GIT_ENV = {**GIT_IDENTITY, "GIT_CONFIG_NOSYSTEM": "1"}
git = functools.partial(git, env=GIT_ENV)


def session_dir(store, sid):
    """A session's folder, in a user namespace (sessions/user-NAME/) or not."""
    return next((store / ".state" / "sessions").glob(f"**/{sid}"))


def state_of(store, sid):
    return json.loads((session_dir(store, sid) / "state.json").read_text())


# ---- 1. --done: a step by its text, its number or a part; a phase is no step --------


@pytest.fixture
def steps(store, run):
    sid = run("session", "new", "--name", "count", "--phases", "plan,build").out.strip()
    pending = ["write count_chars", "write count_words", "test the counters"]
    args = [a for step in pending for a in ("--pending", step)]
    assert run("session", "checkpoint", *args).code == 0
    return sid


def test_done_takes_a_part_of_a_step_that_only_it_holds(store, run, steps):
    result = run("session", "checkpoint", "--done", "count_chars")
    assert result.code == 0 and result.err == ""
    checkpoint = state_of(store, steps)["checkpoint"]
    assert checkpoint["last_completed_step"] == "write count_chars"
    assert checkpoint["pending_steps"] == ["write count_words", "test the counters"]
    shown = run("session", "show").out
    assert "- Last completed step: write count_chars" in shown
    assert re.findall(r"^  \d+\. (.*)$", shown, re.M) == ["write count_words", "test the counters"]


def test_done_with_a_part_that_several_steps_hold_is_refused_listing_them(store, run, steps):
    before = snapshot(store)
    result = run("session", "checkpoint", "--done", "write")
    assert result.code == 2
    assert "1. write count_chars" in result.err and "2. write count_words" in result.err
    assert "nothing written" in result.err
    assert snapshot(store) == before


@pytest.fixture
def kelvin(store, run):
    sid = run("session", "new", "--name", "kelvin").out.strip()
    pending = ["wire init", "add tests for kelvin", "Update the README"]
    assert run("session", "checkpoint", *[a for p in pending for a in ("--pending", p)]).code == 0
    return sid


@pytest.mark.parametrize("part", ["o", "t", "el", "elvin", "ests", "nit", "   ki"])
def test_done_with_a_fragment_inside_a_word_or_too_short_matches_no_step(store, run, kelvin, part):
    result = run("session", "checkpoint", "--done", part)
    assert result.code == 0
    checkpoint = state_of(store, kelvin)["checkpoint"]
    assert checkpoint["pending_steps"] == ["wire init", "add tests for kelvin", "Update the README"]
    assert checkpoint["last_completed_step"].strip() == part.strip()  # in its own words
    # Said plainly: no pending step matched, it is recorded in its own words, and what is left.
    assert "matched no pending step: recorded as a completed step in its own words, today" in (
        result.err
    )
    assert "still pending: 1. wire init; 2. add tests for kelvin; 3. Update the README" in (
        result.err
    )


@pytest.mark.parametrize(
    "part,step",
    [
        ("kelvin", "add tests for kelvin"),
        ("KEL", "add tests for kelvin"),
        ("tests for", "add tests for kelvin"),
        ("wir", "wire init"),
        ("update the readme", "Update the README"),  # its whole text, in any case
        ("3", "Update the README"),  # its number
    ],
)
def test_done_by_a_part_that_starts_a_word(store, run, kelvin, part, step):
    result = run("session", "checkpoint", "--done", part)
    assert result.code == 0 and result.err == ""
    checkpoint = state_of(store, kelvin)["checkpoint"]
    assert checkpoint["last_completed_step"] == step and step not in checkpoint["pending_steps"]


def test_done_matching_nothing_says_when_nothing_is_left(store, run, kelvin):
    run("session", "checkpoint", "--clear-pending")
    result = run("session", "checkpoint", "--done", "shipped it")
    assert result.code == 0 and "matched no pending step" in result.err
    assert "nothing is pending" in result.err


def test_done_by_number_and_by_text_still_work(store, run, steps):
    assert run("session", "checkpoint", "--done", "2").code == 0
    assert state_of(store, steps)["checkpoint"]["last_completed_step"] == "write count_words"
    assert run("session", "checkpoint", "--done", "test the counters").code == 0
    assert state_of(store, steps)["checkpoint"]["pending_steps"] == ["write count_chars"]


def test_two_dones_naming_the_same_step_record_it_once(store, run, steps):
    result = run("session", "checkpoint", "--done", "2", "--done", "count_words")
    assert result.code == 0 and result.err == ""
    state = state_of(store, steps)
    assert state["checkpoint"]["pending_steps"] == ["write count_chars", "test the counters"]
    events = (session_dir(store, steps) / "history.jsonl").read_text().splitlines()
    last = json.loads(events[-1])
    assert last["done"] == "write count_words" and "done_steps" not in last


def test_a_phase_given_to_done_is_recorded_with_a_warning_naming_session_phase(store, run, steps):
    result = run("session", "checkpoint", "--done", "plan")
    assert result.code == 0
    assert "'plan' is a phase" in result.err and "`stm session phase NAME`" in result.err
    state = state_of(store, steps)
    assert state["checkpoint"]["last_completed_step"] == "plan"
    assert len(state["checkpoint"]["pending_steps"]) == 3
    # a phase's name is the phase, even when a step's text holds it
    run("session", "checkpoint", "--pending", "plan the API", "--pending", "build it")
    assert "is a phase" in run("session", "checkpoint", "--done", "build").err
    assert state_of(store, steps)["checkpoint"]["pending_steps"] == ["plan the API", "build it"]


def test_repeated_done_records_every_step(store, run, steps):
    result = run("session", "checkpoint", "--done", "1", "--done", "2")
    assert result.code == 0 and result.err == ""
    state = state_of(store, steps)
    assert state["checkpoint"]["pending_steps"] == ["test the counters"]
    assert state["checkpoint"]["last_completed_step"] == "write count_words"
    assert "write count_chars" in state["recovery"]["last_action"]
    # a rebuild from history (what a merge from another clone runs) gives the same
    rebuilt, _, skipped = stm.rebuild_state(str(store / ".state" / "sessions" / steps))
    assert skipped == []
    assert rebuilt["checkpoint"]["pending_steps"] == ["test the counters"]


# ---- 3. note: no section from a typo, one argument explained, where the text went ----


def memory_text(store):
    return (store / ".stacks" / "MEMORY.md").read_text()


def test_note_to_a_missing_section_is_refused_showing_the_create_command(store, run):
    before = snapshot(store)
    result = run("note", "Nxt", "x")
    assert result.code == 2, result
    assert 'no section "Nxt" in .stacks/MEMORY.md' in result.err
    assert '"Next Steps"' in result.err  # the nearest existing sections
    assert "`stm note --create Nxt x`" in result.err
    assert snapshot(store) == before
    created = run("note", "--create", "Nxt", "x")
    assert created.code == 0
    assert created.out == "created ## Nxt in .stacks/MEMORY.md, with the note\n"
    again = run("note", "Nxt", "x")  # now it exists; the same bullet is not written twice
    assert again.out == "already under ## Nxt in .stacks/MEMORY.md; nothing changed\n"
    assert memory_text(store).count("- x\n") == 1


def test_note_with_only_one_argument_suggests_the_section(store, run):
    result = run("note", "just a thought")
    assert result.code == 2
    assert "note needs TEXT" not in result.err
    assert "`stm note Observations 'just a thought'`" in result.err
    named = run("note", "Status")  # a section alone: the text is what is missing
    assert named.code == 2 and "needs TEXT" in named.err


def test_note_says_where_the_text_went_from_where_the_user_stands(store, run, monkeypatch):
    result = run("note", "next", "port the grammar")
    assert result.out == "noted under ## Next Steps in .stacks/MEMORY.md\n"
    (store / "src").mkdir()
    monkeypatch.chdir(store / "src")
    result = run("note", "Status", "--replace", "green")
    assert (
        result.out
        == f"replaced the body of ## Status in {os.path.join('..', '.stacks', 'MEMORY.md')}\n"
    )
    assert run("note", "-q", "Observations", "quiet one").out == ""
    assert "- quiet one" in memory_text(store)


def mcp_call(name: str, arguments: dict) -> dict:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    }
    params = {"name": name, "arguments": arguments, "_meta": meta}
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return stm.McpServer().answer(json.dumps(request).encode())["result"]


def test_mcp_note_refuses_a_missing_section_unless_create(store):
    before = snapshot(store)
    refused = mcp_call("note", {"section": "Nxt Steps", "text": "x"})
    assert refused["isError"]
    text = refused["content"][0]["text"]
    assert 'did you mean "Next Steps"?' in text and "create: true" in text
    assert "--create" not in text  # a tool argument, not a CLI flag
    assert snapshot(store) == before
    done = mcp_call("note", {"section": "Nxt Steps", "text": "x", "create": True})
    assert not done["isError"] and done["structuredContent"]["created"] is True
    assert "## Nxt Steps\n\n- x\n" in memory_text(store)


# ---- 2. compose-handoff: no example placeholders; a handoff from the session ---------


def test_compose_handoff_refuses_the_unedited_example_naming_the_fields(store, run, tmp_path):
    example = tmp_path / "handoff.json"
    example.write_text(run("compose-handoff", "--example").out)
    before = snapshot(store)
    for extra in ((), ("--print",)):
        result = run("compose-handoff", str(example), *extra)
        assert result.code == 1, result
        assert "placeholder text in from_agent, to_agent, task, task_id," in result.err
        assert "`stm session handoff`" in result.err
    assert snapshot(store) == before
    filled = json.loads(example.read_text())
    filled.update(from_agent="ann", to_agent="bob", task="Port the grammar.")
    for key in ("summary", "context", "decisions", "next_steps", "notes"):
        del filled[key]
    example.write_text(json.dumps(filled))
    only_id = run("compose-handoff", str(example))  # the example's TASK-1 is no task id
    assert only_id.code == 1 and "placeholder text in task_id;" in only_id.err
    filled["task_id"] = "PARSER-7"
    example.write_text(json.dumps(filled))
    assert run("compose-handoff", str(example)).code == 0


def test_session_handoff_round_trips_through_compose_handoff(store, run, tmp_path, monkeypatch):
    monkeypatch.setenv("STM_USER", "ann")
    sid = run("session", "new", "--name", "port parser", "--phases", "plan,build").out.strip()
    run("session", "phase", "build")
    run("session", "checkpoint", "--pending", "port the lexer", "--pending", "port the grammar")
    run("session", "checkpoint", "--done", "lexer", "--resume", "pytest -k grammar")
    run("session", "checkpoint", "--note", "API frozen: do not touch parser/__init__.py")
    path = tmp_path / "handoff.json"
    written = run("session", "handoff", "--to", "bob", "--decision", "keep Pratt", "-o", str(path))
    assert written.code == 0, written
    assert "`stm compose-handoff " in written.out
    handoff = json.loads(path.read_text())
    assert handoff["from_agent"] == "ann" and handoff["to_agent"] == "bob"
    assert handoff["task"] == "port parser" and handoff["phase"] == "build"
    assert handoff["next_steps"] == ["port the grammar"]
    assert handoff["decisions"] == ["keep Pratt"]
    assert "pytest -k grammar" in handoff["notes"] and "API frozen" in handoff["notes"]
    # the sender composes it: a session for bob, and the sender's pointer stays
    composed = run("compose-handoff", str(path))
    assert composed.code == 0, composed
    new = composed.out.strip()
    assert "addressed to bob" in composed.err and f"`stm session switch {new}`" in composed.err
    pointer = json.loads((store / ".state" / "current-session.json").read_text())
    assert pointer["active_session"] == sid
    state = state_of(store, new)
    assert state["from_agent"] == "ann" and state["to_agent"] == "bob"
    assert state["checkpoint"]["pending_steps"] == ["port the grammar"]
    md = (session_dir(store, new) / "Session.md").read_text()
    assert "- keep Pratt" in md and "API frozen" in md and "pytest -k grammar" in md


def test_session_handoff_from_stdout_pipes_into_compose(store, run, monkeypatch):
    run("session", "new", "--name", "port parser")
    run("session", "checkpoint", "--pending", "port the grammar")
    text = run("session", "handoff", "--task", "Port the grammar, precedence unchanged.").out
    composed = run("compose-handoff", "-", stdin=text)
    assert composed.code == 0, composed
    state = state_of(store, composed.out.strip())
    assert state["name"] == "Port the grammar, precedence unchanged."
    assert state["checkpoint"]["pending_steps"] == ["port the grammar"]
    # no to_agent: it is for whoever composes it, who adopts it
    pointer = json.loads((store / ".state" / "current-session.json").read_text())
    assert pointer["active_session"] == composed.out.strip()


@pytest.mark.git
def test_composing_a_committed_handoff_again_in_a_fresh_clone_adopts_it(tmp_path):
    sender = tmp_path / "sender"
    sender.mkdir()
    git(sender, "init", "-q")
    env = {"STM_USER": "ann", "STM_FSYNC": "0"}
    assert run_stm("init", cwd=sender, env=env).returncode == 0
    assert run_stm("session", "new", "--name", "port parser", cwd=sender, env=env).returncode == 0
    run_stm("session", "checkpoint", "--pending", "port the grammar", cwd=sender, env=env)
    handoff = run_stm("session", "handoff", "--to", "bob", cwd=sender, env=env).stdout
    composed = run_stm("compose-handoff", "-", cwd=sender, env=env, input=handoff)
    assert composed.returncode == 0, composed.stderr
    sid = composed.stdout.strip()
    git(sender, "add", "-A")
    git(sender, "commit", "-qm", "handoff to bob")
    receiver = tmp_path / "receiver"
    git(tmp_path, "clone", "-q", str(sender), str(receiver))
    bob = {"STM_USER": "bob", "STM_FSYNC": "0"}
    saved = receiver / "handoff.json"
    saved.write_text(handoff)
    again = run_stm("compose-handoff", str(saved), cwd=receiver, env=bob)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == sid
    assert "it is now this clone's current session" in again.stderr
    step = run_stm("session", "checkpoint", "--done", "grammar", cwd=receiver, env=bob)
    assert step.returncode == 0, step.stderr  # no "no current session"
    assert sid in step.stdout


# ---- 4. every line that names a handoff reads "from A to B" ---------------------------


def test_status_list_and_workflow_name_a_handoff_from_a_to_b(store, run, tmp_path):
    handoff = {
        "task_id": "GRAM-2",
        "from_agent": "dana",
        "to_agent": "bob",
        "task": "Port the grammar.",
        "status": "in-progress",
        "created_at": "2026-01-02T03:04:05Z",
    }
    sid = run("compose-handoff", "-", "--switch", stdin=json.dumps(handoff)).out.strip()
    status = run("status").out
    assert f"handoff: GRAM-2 from dana to bob ({sid})" in status.splitlines()
    assert "[handoff GRAM-2 from dana to bob]" in run("session", "list").out
    assert "- Handoff: task GRAM-2 from dana to bob, status in-progress" in run("boot").out


# ---- 5. a store below the repository's root ------------------------------------------


@pytest.mark.git
def test_init_below_the_repository_root_says_where_the_root_is(project, run, monkeypatch):
    git(project, "init", "-q")
    (project / "src" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(project / "src")
    result = run("init")
    assert result.code == 0
    assert (project / "src" / ".stacks" / "AGENT.md").exists()  # created where asked
    assert f"below the root of its git repository, {project}" in result.err
    assert f"run `stm init` in {project}" in result.err
    monkeypatch.chdir(project)
    at_root = run("init")  # at the root, no notice: that is where it belongs
    assert at_root.code == 0 and "below the root" not in at_root.err


@pytest.mark.git
def test_commands_that_find_no_store_name_one_in_a_subfolder(project, run, monkeypatch):
    git(project, "init", "-q")
    (project / "src").mkdir()
    (project / "docs").mkdir()
    monkeypatch.chdir(project / "src")
    assert run("init").code == 0
    for where in (project, project / "docs"):
        monkeypatch.chdir(where)
        for argv in (("boot",), ("log", "x"), ("status",)):
            before = snapshot(project)
            result = run(*argv)
            assert result.code == 1, result
            shown = os.path.relpath(project / "src" / ".stacks")
            assert f"but there is one at {shown}" in result.err, result.err
            assert f"--dir {shown}" in result.err
            assert snapshot(project) == before


def test_the_look_for_a_store_below_is_shallow(project, run):
    deep = project / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / ".stacks").mkdir()
    result = run("boot")
    assert result.code == 1 and "there is one" not in result.err
    assert "run `stm init` first" in result.err


# ---- 8. what is stored: log --tail, refs show, search from where you stand, import ---


def test_log_tail_prints_the_newest_entries_oldest_first(store, run):
    for n in range(1, 13):
        assert run("log", f"entry number {n}").code == 0
    result = run("log", "--tail", "3")
    assert result.code == 0
    bodies = [line for line in result.out.splitlines() if line.startswith("entry number")]
    assert bodies == ["entry number 10", "entry number 11", "entry number 12"]
    assert re.search(r"^## \S+Z · tester \(\.stacks/logs/\S+\.md:\d+\)$", result.out, re.M)
    default = run("log", "--tail")
    assert default.out.count("entry number") == 10
    data = json.loads(run("log", "--tail", "2", "--json").out)
    assert [e["text"] for e in data["entries"]] == ["entry number 11", "entry number 12"]
    assert set(data["entries"][0]) == {"timestamp", "author", "path", "line", "text"}
    before = snapshot(store)
    assert run("log", "--tail", "2", "more text").code == 2  # reading, never writing
    assert snapshot(store) == before


def test_refs_list_and_show_print_what_is_stored(store, run):
    refs = store / ".stacks" / "refs"
    (refs / "ops").mkdir()
    (refs / "ops" / "deploy.md").write_text("# Deploy\n\nHow releases ship.\n\n- tag, push\n")
    listed = run("refs", "list")
    assert listed.out == "- refs/ops/deploy.md — Deploy: How releases ship.\n"
    for name in ("ops/deploy", "ops/deploy.md", "refs/ops/deploy.md"):
        shown = run("refs", "show", name)
        assert shown.code == 0 and shown.out == "# Deploy\n\nHow releases ship.\n\n- tag, push\n"
    missing = run("refs", "show", "nope")
    assert missing.code == 1 and "`stm refs list`" in missing.err
    assert run("refs", "show", "../MEMORY.md").code == 2  # never outside refs/


def test_search_prints_paths_from_where_the_user_stands(store, run, monkeypatch):
    run("log", "the lexer is ported")
    (store / "src" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(store / "src" / "pkg")
    result = run("search", "lexer", "--layer", "logs")
    assert result.code == 0
    path = result.out.split(":", 1)[0]
    assert path.startswith(os.path.join("..", "..", ".stacks", "logs"))
    assert os.path.isfile(path)  # openable from here, as printed
    data = json.loads(run("search", "lexer", "--layer", "logs", "--json").out)
    assert data["matches"][0]["path"].startswith(".stacks/logs/")  # JSON: from the root


def test_search_reads_sessions_as_one_line_per_event(store, run):
    run("session", "new", "--name", "grammar work")
    run("session", "checkpoint", "--pending", "port the grammar", "--resume", "pytest -k gram")
    run("session", "checkpoint", "--done", "grammar")
    result = run("search", "grammar", "--layer", "sessions")
    lines = result.out.splitlines()
    assert all("history.jsonl" in line for line in lines), lines  # no state.json copies
    assert not any('{"' in line or '":' in line for line in lines), lines  # no raw JSON
    assert len(lines) == 3, lines  # created, the two checkpoints: one line each
    assert any(
        re.search(r"checkpoint by tester: pending port the grammar; resume pytest -k gram$", x)
        for x in lines
    ), lines


def test_import_ends_with_a_one_line_summary(store, run, tmp_path):
    archive = str(tmp_path / "m.zip")
    assert run("export", "-o", archive).code == 0
    dry = run("import", archive, "--dry-run").out.splitlines()
    assert re.fullmatch(
        r"import: \d+ files: 0 would be new, 0 would be replaced, \d+ already the same; "
        r"nothing written \(--dry-run\)",
        dry[-1],
    )
    (store / ".stacks" / "refs" / "gone.md").write_text("# Gone\n\nx\n")
    assert run("export", "-o", archive).code == 0
    (store / ".stacks" / "refs" / "gone.md").unlink()
    last = run("import", archive).out.splitlines()[-1]
    assert re.fullmatch(r"import: \d+ files: 1 new, 0 replaced, \d+ already the same", last)


def test_import_lists_the_changes_and_counts_the_rest(store, run, tmp_path):
    archive = str(tmp_path / "m.zip")
    (store / ".stacks" / "refs" / "gone.md").write_text("# Gone\n\nx\n")
    assert run("export", "-o", archive).code == 0
    (store / ".stacks" / "refs" / "gone.md").unlink()
    lines = run("import", archive).out.splitlines()
    assert lines[:-1] == ["created       .stacks/refs/gone.md"], lines  # the change alone
    assert re.fullmatch(r"import: (\d+) files: 1 new, 0 replaced, \d+ already the same", lines[-1])
    again = run("import", archive).out.splitlines()
    assert len(again) == 1 and again[0].startswith("import: ")  # nothing changed: one line
    verbose = run("import", archive, "--verbose").out.splitlines()
    total = int(re.match(r"import: (\d+) files", verbose[-1]).group(1))
    assert len(verbose) == total + 1 and all(n.startswith("same ") for n in verbose[:-1])


# ---- 9. check warns about a section over its compact limit ---------------------------


def test_check_warns_when_a_section_is_over_its_limit_naming_compact(store):
    for n in range(15):
        assert run_stm("note", "-q", "Next Steps", f"step {n}", cwd=store).returncode == 0
    check = run_stm("check", cwd=store)
    lines = [line for line in check.stdout.splitlines() if "section-over-limit" in line]
    assert len(lines) == 1, check.stdout
    assert 'section "Next Steps" holds 15 bullets, over its limit of 10' in lines[0]
    assert "`python3 " in lines[0] and " compact`" in lines[0]  # as invoked: python3 stm.py
    assert "check ok: 0 errors, 1 warning" in check.stdout
    assert run_stm("compact", cwd=store).returncode == 0
    assert "section-over-limit" not in run_stm("check", cwd=store).stdout


# ---- 10. the smaller items ----------------------------------------------------------


def test_counts_agree_with_their_nouns(store, run):
    run("log", "one entry")
    assert re.search(r"^logs: 1 day, ", run("status").out, re.M)
    assert re.search(r"\(\d+ (minute|hour|day)s? ago\)", run("status").out)
    digest = run("digest").out.splitlines()[0]  # since Last Updated: today
    assert ": 1 log entry, 0 fact changes, " in digest
    boot = run("boot").out.splitlines()[0]
    assert boot.endswith("; 1 log entry since")


def test_a_secret_kind_takes_its_article(store, run):
    result = run("log", "key AKIA" + "ABCDEFGHIJKLMNOP")
    assert result.code == 1 and "looks like an AWS access key id" in result.err
    npm = run("log", "token npm_" + "a" * 36)
    assert "looks like an npm token" in npm.err
    github = run("log", "token ghp_" + "a" * 36)
    assert "looks like a GitHub token" in github.err


@pytest.mark.parametrize(
    "argv",
    [("note", "just a thought"), ("session", "switch", "zzzz"), ("boot", "--bogus"), ("log", "")],
)
def test_every_error_has_one_prefix(store, run, argv):
    result = run(*argv)
    assert result.code in (1, 2)
    assert result.err.startswith("stm: error: "), result.err


def test_a_mistyped_command_gets_a_suggestion(store, run):
    result = run("sesion", "list")
    assert result.code == 2
    assert "did you mean `stm session`?" in result.err
    assert "choose from" not in result.err  # not argparse's list of every command
    verb = run("session", "swtich", "x")
    assert "did you mean `stm session switch`?" in verb.err


@pytest.mark.parametrize("path", [("note",), ("session", "checkpoint"), ("refs", "show")])
def test_subcommand_help_shows_its_own_options_and_points_to_stm_help(run, path):
    result = run(*path, "--help")
    assert result.code == 0
    assert "--dir PATH" not in result.out and "global options:" not in result.out
    assert "exit codes: 0 ok" not in result.out
    assert "the exit codes: `stm --help`" in result.out
    assert result.out.index("options:") < result.out.index("example:")
    main = run("--help")
    assert "--dir PATH" in main.out and "exit codes: 0 ok" in main.out


def test_global_options_still_work_after_the_subcommand(store, run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("note", "Status", "--replace", "green", "--dir", str(store / ".stacks"))
    assert result.code == 0 and "green" in (store / ".stacks" / "MEMORY.md").read_text()


def test_the_codex_snippet_names_stm_py_by_its_absolute_path(project):
    (project / "stm.py").write_bytes((ROOT / "stm.py").read_bytes())
    empty = project / "no-stm-here"
    empty.mkdir()
    result = run_stm(
        "setup", "mcp", "--client", "codex", script="stm.py", cwd=project, env={"PATH": str(empty)}
    )
    assert result.returncode == 0, result.stderr
    assert f'args = ["{project / "stm.py"}", "mcp"]' in result.stdout
    # a project's own file still names it from the project root
    local = run_stm("setup", "mcp", script="stm.py", cwd=project, env={"PATH": str(empty)})
    assert json.loads(local.stdout)["mcpServers"]["stm"]["args"] == ["stm.py", "mcp"]


# ---- 6, 7. the README's first screen, its quick start, and its Changes ---------------

README = (ROOT / "README.md").read_text(encoding="utf-8")


def first_screen() -> str:
    return README.split("## The layers", 1)[0]


def test_the_first_screen_has_prerequisites_two_commands_and_the_install_route():
    intro = first_screen()
    assert "**Prerequisites:** Python 3.9 or newer and `git`" in intro
    commands = re.findall(r"```sh\n(.*?)```", intro, re.S)
    assert len(commands) == 2
    assert "/tmp/stm-scratch" in commands[0] and "pytest" in commands[1]
    assert "**Install**" in intro and "recommended route" in intro
    assert "python3 -m pip install --user pipx" in intro and "pipx ensurepath" in intro


def test_the_quick_start_runs_in_a_scratch_project_never_in_the_clone(tmp_path):
    quick_start = re.findall(r"```sh\n(.*?)```", first_screen(), re.S)[0].strip()
    clone = tmp_path / "stm-clone"  # a copy of stm's clone: nothing may land in it
    clone.mkdir()
    (clone / "stm.py").write_bytes((ROOT / "stm.py").read_bytes())
    before = sorted(os.listdir(clone))
    command = quick_start.replace("/tmp/", f"{tmp_path}/")
    env = {**os.environ, **GIT_ENV}
    result = run_process(["bash", "-c", command], cwd=clone, full_env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(clone)) == before  # the script run writes nothing beside it
    scratch = tmp_path / "stm-scratch"
    assert (scratch / ".git").is_dir() and (scratch / ".stacks" / "AGENT.md").is_file()
    assert result.stdout.startswith("created  .stacks/\n")
    boot = result.stdout.split("# stm memory boot", 1)[1]
    notices = boot.split("## Notices", 1)[1].split("## Identity", 1)[0]
    assert notices.count("\n- ") == 1  # one notice, with the commands that fill it in
    assert "nothing is filled in yet" in notices and 'note --identity Role "…"`' in notices


def test_no_readme_command_writes_into_the_checkout():
    """Every command the README shows runs in a scratch project or a temporary folder:
    none names stm's own clone as its place (`cd` into it, or `init` right after clone)."""
    blocks = re.findall(r"```(?:sh|console)\n(.*?)```", README, re.S)
    commands = [line.lstrip("$ ").strip() for block in blocks for line in block.splitlines()]
    assert "python3 stm.py init && python3 stm.py boot" not in README
    init_lines = [c for c in commands if re.search(r"\bstm(\.py)? init\b", c)]
    assert init_lines and all(c == "stm init" or "stm-scratch" in c for c in init_lines), init_lines


def test_boot_over_unfilled_templates_says_so_once(project, run):
    run("init")
    notices = run("boot").out.split("## Notices", 1)[1].split("## Identity", 1)[0]
    assert notices.count("\n- ") == 1
    assert ".stacks/AGENT.md and .stacks/MEMORY.md hold only their templates" in notices
    run("note", "--identity", "Role", "keeps the parser green")
    run("note", "Status", "--replace", "lexer ported")
    assert "nothing is filled in yet" not in run("boot").out


def test_the_version_is_one_in_readme_changes_version_flag_and_pyproject(run):
    changes = README.split("\n## Changes\n", 1)[1]
    first = re.search(r"^### (\S+)", changes, re.M).group(1)
    assert first == stm.__version__
    assert run("--version").out == f"stm {stm.__version__}\n"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]$', pyproject, re.M)
    assert re.search(r'^version = \{ attr = "stm.__version__" \}$', pyproject, re.M)
    assert not re.search(r"^version = \"", pyproject, re.M)  # never a second, static copy
    assert README.rstrip().rsplit("\n## ", 1)[1].startswith("Changes")  # the last section


def test_init_asks_to_describe_the_agent_only_while_the_templates_are_unfilled(project, run):
    first = run("init")
    assert first.code == 0 and "Next: describe the agent" in first.out
    assert run("note", "--identity", "Role", "Maintainer of the parser").code == 0
    assert run("note", "Status", "--replace", "Porting the lexer").code == 0
    again = run("init")
    assert again.code == 0 and "Next:" not in again.out
    assert "left untouched" in again.out


def test_import_of_one_differing_file_says_it_not_them(store, run, tmp_path):
    archive = tmp_path / "memory.zip"
    assert run("export", "-o", str(archive)).code == 0
    (store / ".stacks" / "MEMORY.md").write_text("# Memory\n\n## Status\n\nchanged\n")
    result = run("import", str(archive))
    assert result.code == 1
    assert "1 file differs from the archive" in result.err
    assert "Pass --force to replace it (the old file is kept as a .bak)" in result.err


def test_session_show_prints_events_as_lines_not_json(store, run, steps):
    assert run("session", "checkpoint", "--done", "count_chars").code == 0
    shown = run("session", "show").out
    events = shown.split("recent events:\n", 1)[1].splitlines()
    assert events and not any("{" in line for line in events), events
    assert any(" checkpoint by tester: done write count_chars" in line for line in events)


# ---- every hint runs as typed, from `python3 stm.py` with no `stm` on PATH ------------------

HINT_RE = re.compile(r"`((?:stm|python3 -m stm|python3 \S*stm\.py) [^`]*)`")
# Words a hint uses for what the reader fills in: such a hint is checked, not run.
PLACEHOLDER_RE = re.compile(r"\b[A-Z]{2,}\b|…|\.\.\.|\bN\b")


@pytest.mark.git
def test_every_hint_names_the_command_as_invoked_and_runs(tmp_path, run, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = isolated_git_env(bin_dir, {**os.environ, "STM_FSYNC": "0"}, tmp_path)
    env["HOME"] = str(tmp_path / "home")
    assert shutil.which("stm", path=env["PATH"]) is None
    project = tmp_path / "p"
    project.mkdir()

    def stm_run(*args, stdin=None):
        return run_stm(*args, cwd=project, full_env=env, input=stdin)

    said = []
    scenario = [
        ("init",),
        ("boot",),
        ("boot", "--max-chars", "600"),
        ("status",),
        ("check",),
        ("note", "Status", "--replace", ""),
        ("note", "Nxt", "x"),
        ("note", "just a thought"),
        ("log", ""),
        ("search", "x", "--layer", "log"),
        ("sesion", "list"),
        ("session", "new", "--name", "port", "--phases", "plan,build"),
        ("session", "checkpoint", "--pending", "wire init", "--pending", "add tests"),
        ("session", "checkpoint", "--done", "o"),
        ("session", "checkpoint", "--done", "plan"),
        (
            "session",
            "show",
        ),
        ("session", "switch", "zzzz"),
        ("session", "done"),
        ("session", "checkpoint", "--finish"),
        ("session", "show"),
        ("fact", "get", "nope"),
        ("refs", "show", "nope"),
        ("setup", "claude", "--check"),
        ("compose-handoff", "-"),
    ]
    for args in scenario:
        result = stm_run(*args, stdin="")
        assert "Traceback" not in result.stderr, (args, result.stderr)
        said.append((args, result.stdout + result.stderr))
    sid = json.loads(stm_run("session", "list", "--json").stdout)["current"]
    archived = stm_run("session", "archive", sid)
    said.append((("session", "archive"), archived.stdout + archived.stderr))
    shown = stm_run("session", "show", sid)
    said.append((("session", "show", sid), shown.stdout + shown.stderr))
    assert "archive it with" not in shown.stdout  # archived already: no hint to archive
    # Every --help, rendered as `python3 stm.py --help` renders it (in-process: quicker).
    invoked = shlex.join([sys.executable, str(ROOT / "stm.py")])
    monkeypatch.setattr(stm, "command_name", lambda: invoked)
    for path in [[]] + all_command_paths():
        result = run(*path, "--help")
        said.append(((*path, "--help"), result.out))
        examples = [n for n in result.out.splitlines() if n.lstrip().startswith("stm ")]
        assert not examples, (path, examples)
    hints = {}
    for args, text in said:
        for hint in HINT_RE.findall(text):
            hints.setdefault(hint, args)
    assert not [h for h in hints if h.startswith("stm ")], hints
    assert "--layer logs" in dict(said)[("search", "x", "--layer", "log")]
    assert "search logs" not in dict(said)[("search", "x", "--layer", "log")]
    runnable = [h for h in hints if not PLACEHOLDER_RE.search(h)]
    assert len(runnable) >= 10, hints
    # A command's bare name (`stm log`, `stm session checkpoint`) names the command; every
    # other hint is a command line, and runs as typed in the shell the user has.
    names = {" ".join([invoked, *path]) for path in all_command_paths()}
    names = {name.replace(sys.executable, "python3") for name in names}
    for hint in runnable:
        result = run_sh(hint, cwd=project, full_env=env)
        usage = result.returncode == 2 and hint not in names
        assert not usage and "Traceback" not in result.stderr, (
            hint,
            hints[hint],
            result.stderr,
        )


# ---- smaller frictions of the first week ----------------------------------------------------


def test_json_before_the_command_is_taken_as_dir_is(store, run):
    after = json.loads(run("status", "--json").out)
    before = run("--json", "status")
    assert before.code == 0 and json.loads(before.out).keys() == after.keys()
    listed = run("--dir", ".stacks", "--json", "session", "list")
    assert listed.code == 0 and "sessions" in json.loads(listed.out)
    refused = run("--json", "merge-file", "a", "b", "c")  # a command without --json
    assert refused.code == 2 and "--json" in refused.err
    # Between a command and its verb too, and the help says where it may go.
    verb = run("session", "--json", "list")
    assert verb.code == 0 and json.loads(verb.out).keys() == json.loads(listed.out).keys()
    assert "--json" in run("--help").out.split("global options")[0]
    # Moved only before a verb: a global option there is argparse's to place.
    mixed = run("session", "--json", "--dir", ".stacks", "list")
    assert mixed.code == 2 and "expected one argument" not in mixed.err, mixed.err


def test_an_int_option_of_thousands_of_digits_is_a_usage_error(store, run):
    result = run("boot", "--max-chars", "9" * 5000)
    assert result.code == 2 and "Traceback" not in result.err, result.err


@pytest.mark.parametrize(
    "argv", [["setup", "git", "--bogus"], ["setup", "git", "--json"], ["session", "list", "-z"]]
)
def test_an_unknown_option_of_a_verb_points_to_that_verb_s_help(store, run, argv):
    # `setup git` has a --command option of its own: the pointer still names the verb.
    result = run(*argv)
    assert result.code == 2
    assert result.err.count("\n") == 1, result.err  # one line
    assert result.err.rstrip().endswith(f" {argv[0]} {argv[1]} --help`"), result.err


@pytest.mark.parametrize("verb", ["done", "finish"])
def test_session_done_points_to_checkpoint_finish(store, run, verb):
    result = run("session", verb)
    assert result.code == 2
    assert "(did you mean `stm session checkpoint --finish`?)" in result.err


def test_setup_help_names_every_client(run):
    summary = " ".join(run("--help").out.split()).replace("- ", "-")  # however it wraps
    line = summary.split(" setup ", 1)[1][:120]
    assert "claude, codex, agents-md, mcp, git" in line, line


def test_status_warns_about_what_check_warns_about(store, run):
    bullets = "".join(f"- step {n}\n" for n in range(12, 0, -1))
    path = store / ".stacks" / "MEMORY.md"
    path.write_text(path.read_text().replace("## Next Steps\n", "## Next Steps\n\n" + bullets, 1))
    found = json.loads(run("check", "--json").out)["findings"]
    assert any(f["rule"] == "section-over-limit" for f in found), found
    status = run("status")
    assert "verdict: ok" not in status.out
    assert 'section "Next Steps" holds 12 bullets, over its limit of 10' in status.out
