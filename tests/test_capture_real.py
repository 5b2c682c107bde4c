"""Capture on real sessions (issue 36): long, compacted Claude Code and Codex sessions
read as a person would. One test per way real transcripts misled capture, then a corpus
of long sessions in real transcripts' shapes (tests/transcripts.py), each scored against
what a person reading it would write down: what they asked, the plan with its states,
the files, the failures still open with their errors, the last message."""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import clock
from helpers import log_text
from mcp_client import McpClient
from transcripts import CORPUS, Claude, Codex, exec_json, exec_text, write_jsonl

import stm

SID = "7d3f9a21-2222-4000-8000-000000000002"


@pytest.fixture
def cwd(tmp_path) -> str:
    return str(tmp_path / "project")


@pytest.fixture
def agent(store, tmp_path_factory):
    """A project (cwd) and a folder outside it where the client keeps transcripts."""
    return store, tmp_path_factory.mktemp("client-transcripts")


def payload(event: str, session: str, transcript, cwd, **extra) -> str:
    data = {"session_id": session, "transcript_path": str(transcript), "cwd": str(cwd)}
    return json.dumps({**data, "hook_event_name": event, **extra})


def read(tmp_path, entries, name="session.jsonl", **options) -> stm.Transcript:
    return stm.read_transcript(write_jsonl(tmp_path / name, entries), **options)


def captured_block(out: str) -> str:
    return out.split("## Last session (captured by stm)")[1].split("\n## ")[0]


def the_state(project) -> dict:
    [folder] = [p for p in (project / ".state" / "sessions").iterdir() if p.is_dir()]
    return json.loads((folder / "state.json").read_text())


# ---- 1. a background task's notification is no request -----------------------------------


def test_a_task_notification_is_never_the_request(tmp_path, cwd):
    c = Claude(cwd)
    entries = [
        c.user("Run the slow integration suite in the background and fix what fails"),
        c.call("b1", "Bash", command="mix test --only slow", run_in_background=True),
        c.result("b1", "Command running in background with ID: b7636e2"),
        c.say("Started; I will look at it when it ends."),
        c.notification("b7636e2", "completed", 'Background command "mix test" completed'),
        c.say("All slow tests pass."),
    ]
    result = read(tmp_path, entries)
    assert result.request == "Run the slow integration suite in the background and fix what fails"
    assert result.requests == [result.request]
    assert "Read the output file" not in json.dumps(result.as_dict())


def test_files_edited_before_the_window_come_from_the_file_history_snapshot(tmp_path, cwd):
    c = Claude(cwd)
    entries = [
        c.user("Refactor the exporter"),
        c.snapshot("lib/old.ex", "lib/exporter.ex"),
        c.call("e1", "Edit", file_path=f"{cwd}/lib/exporter.ex", old_string="a", new_string="b"),
        c.result("e1", "The file has been updated."),
    ]
    result = read(tmp_path, entries, root=cwd)
    assert result.files == ["lib/old.ex", "lib/exporter.ex"]  # the one seen edited is newest


# ---- 2. failures keep their error, the command cut on its own -----------------------------


def test_a_long_command_leaves_room_for_its_error(agent, run):
    project, folder = agent
    c = Claude(str(project), SID)
    commit = "git commit -m \"$(cat <<'EOF'\nfeat: spotter\n\n" + "details " * 60 + '\nEOF\n)"'
    error = "Pre-commit validation failed: 3 warnings [DIALYZER] lib/spotter.ex:12"
    entries = [
        c.user("Commit the spotter work"),
        c.call("b1", "Bash", command=commit),
        c.result("b1", f"Exit code 1\nRunning hooks...\n{error}\nmore output", is_error=True),
    ]
    transcript = write_jsonl(folder / f"{SID}.jsonl", entries)
    run("capture", "--client", "claude", stdin=payload("PreCompact", SID, transcript, project))
    [failure] = the_state(project)["captured"]["failures"]
    command, _, shown_error = failure.partition(" — ")
    assert command.startswith("git commit -m") and len(command) <= 80
    assert shown_error == error
    assert f"— {error}" in captured_block(run("boot").out)
    assert f"— {error}" in log_text(project)


# ---- 3. a failure fixed later is not open ----------------------------------------------------


def test_a_failure_is_dropped_once_the_same_command_succeeds(tmp_path, cwd):
    c = Claude(cwd)
    fail = "Exit code 2\n** (CompileError) lib/spotter.ex:4: undefined function foo/0"
    entries = [c.user("Make the suite green")]
    for n in range(4):  # the same command fails four times, in several spellings
        command = ["mix test", f"cd {cwd} && mix test 2>&1 | tail -30", "mix  test"][n % 3]
        entries += [
            c.call(f"f{n}", "Bash", command=command),
            c.result(f"f{n}", fail, is_error=True),
        ]
    entries += [c.call("lint", "Bash", command="mix credo"), c.result("lint", "E1", is_error=True)]
    for n in range(3):
        entries += [
            c.call(f"p{n}", "Bash", command="mix test"),
            c.result(f"p{n}", "42 tests, 0 failures"),
        ]
    entries.append(c.say("Everything is pushed and clean."))
    result = read(tmp_path, entries)
    # mix test passes at the end: only credo's failure is still open
    assert result.failures == [("mix credo", "E1")]
    # without the later success, the newest failure of mix test stands, once
    result = read(tmp_path, entries[: 1 + 8 + 2])
    assert [command for command, _ in result.failures] == ["mix test", "mix credo"]
    assert result.failures[0][1] == "** (CompileError) lib/spotter.ex:4: undefined function foo/0"


def test_comparing_commands_reads_a_bounded_end_of_each(monkeypatch):
    """A command of ` | tail` a thousand times costs a few steps, not a regex backtracking
    over all of it (measured before the fix: 14 KB took 6 s)."""
    real, seen = stm.COMMAND_TAIL_RE, []

    class Recording:
        def search(self, text, pos=0):
            seen.append(len(text) - pos)
            return real.search(text, pos)

    monkeypatch.setattr(stm, "COMMAND_TAIL_RE", Recording())
    command = "make" + " | tail" * 50000
    assert stm.command_key(command) == "make" + " | tail" * (50000 - stm.COMMAND_TAIL_PARTS)
    assert len(seen) == stm.COMMAND_TAIL_PARTS and max(seen) <= 40
    assert stm.command_key("cd /w && mix test 2>&1 | tail -n 30") == "mix test"


def test_background_results_are_read_from_their_notifications(tmp_path, cwd):
    c = Claude(cwd)
    start = [
        c.user("Run the e2e suite"),
        c.call("b1", "Bash", command="npm run e2e", run_in_background=True),
        c.result(
            "b1", "Command running in background with ID: bg42", detail={"backgroundTaskId": "bg42"}
        ),
    ]
    failed = c.notification(
        "bg42", "failed", 'Background command "npm run e2e" failed with exit code 1'
    )
    result = read(tmp_path, [*start, failed])
    assert result.failures == [
        ("npm run e2e", 'Background command "npm run e2e" failed with exit code 1')
    ]
    again = [
        c.call("b2", "Bash", command="npm run e2e", run_in_background=True),
        c.result("b2", "Command running in background with ID: bg43"),
        c.notification("bg43", "completed", 'Background command "npm run e2e" completed'),
    ]
    assert read(tmp_path, [*start, failed, *again]).failures == []


def test_a_search_that_found_nothing_is_not_a_failure(tmp_path, cwd):
    x = Codex(cwd)
    entries = [x.meta(), *x.prompt("Find where the cache is flushed")]
    entries += [x.call("s1", "shell", command=["bash", "-lc", "rg -n flush_cache src"])]
    entries += [x.output("s1", exec_json("", 1))]
    entries += [x.call("s2", "exec_command", cmd="cd src && grep -rn flushCache .")]
    entries += [x.output("s2", exec_text("", 1))]
    entries += [x.call("s3", "exec_command", cmd="rg -n '(' src")]  # rg's own error: exit 2
    entries += [x.output("s3", exec_text("rg: regex parse error: unclosed group", 2))]
    entries += [x.call("s4", "exec_command", cmd="grep -c TODO notes.txt")]  # exit 1 with output
    entries += [x.output("s4", exec_text("grep: notes.txt: No such file or directory", 1))]
    c = Claude(cwd)
    claude = [
        c.user("look"),
        c.call("g", "Bash", command="grep -rn foo ."),
        c.result("g", "Exit code 1", is_error=True),
    ]
    assert [f[0] for f in read(tmp_path, entries).failures] == [
        "rg -n '(' src",
        "grep -c TODO notes.txt",
    ]
    assert read(tmp_path, claude, name="c.jsonl").failures == []


# ---- 4. queued messages are the person's ----------------------------------------------------


def test_messages_typed_while_the_agent_works_are_kept_once(tmp_path, cwd):
    c = Claude(cwd)
    entries = [
        c.user("Implement spotter-gqc"),
        c.call("b1", "Bash", command="bd show spotter-gqc"),
        c.queued("new beads for the epic were added. tackle them"),
        c.result("b1", "spotter-gqc: epic"),
        c.dequeued(),
        c.user("new beads for the epic were added. tackle them"),  # delivered: the same message
        c.say("On it."),
    ]
    result = read(tmp_path, entries)
    assert result.requests == [
        "Implement spotter-gqc",
        "new beads for the epic were added. tackle them",
    ]
    assert result.request == "new beads for the epic were added. tackle them"
    # folded into the running turn (2.1): an attachment, after the enqueue or alone
    notification = "<task-notification><status>completed</status></task-notification>"
    folded = [
        c.user("Implement spotter-gqc"),
        c.queued("also close spotter-abc"),
        c.folded("also close spotter-abc"),
        c.removed(),
        c.folded("run the linter too"),  # its enqueue is before the window
        c.folded("peer session says hi", origin="peer"),
        c.folded(notification, "task-notification"),
        c.say("On it."),
    ]
    assert read(tmp_path, folded, name="f.jsonl").requests == [
        "Implement spotter-gqc",
        "also close spotter-abc",
        "run the linter too",
    ]


# ---- 5. slash-command arguments are what the person typed -----------------------------------


def test_slash_command_arguments_are_the_persons_words(tmp_path, cwd):
    c = Claude(cwd)
    entries = [
        c.slash("/x", "set up credo for the umbrella app"),
        c.expanded("You are a helpful setup assistant. Set up credo for the umbrella app."),
        c.say("Credo is set up."),
        c.slash("/clear"),  # no arguments: nothing the person asked
        c.system("local_command", content="<command-name>/model</command-name>"),
        c.slash("/compact", "and continue with the remaining tasks"),
        c.compact(),
        c.compact_summary("This session is being continued from a previous conversation..."),
    ]
    result = read(tmp_path, entries)
    assert result.requests == [
        "/x set up credo for the umbrella app",
        "/compact and continue with the remaining tasks",
    ]


# ---- 6. every message, oldest first, within a budget ---------------------------------------


def test_the_task_a_later_constraint_and_the_last_follow_up_all_reach_boot(agent, run):
    project, folder = agent
    c = Claude(str(project), SID)
    said = ["Implement spotter-gqc", "don't touch core.py"]
    said += [f"continue ({n})" for n in range(6)] + ["commit", "did you push?"]
    entries = []
    for n, text in enumerate(said):
        entries += [c.user(text), c.call(f"b{n}", "Bash", command="true"), c.result(f"b{n}", "")]
        entries += [c.say(f"step {n} done")]
    transcript = write_jsonl(folder / f"{SID}.jsonl", entries)
    run("capture", "--client", "claude", stdin=payload("PreCompact", SID, transcript, project))
    captured = the_state(project)["captured"]
    kept = stm.REQUESTS_FIRST + stm.REQUESTS_LAST
    assert captured["request"] == "did you push?"
    assert captured["requests"] == said[:2] + said[-(kept - 2) : -1]
    assert captured["requests_omitted"] == len(said) - kept
    block = captured_block(run("boot").out)
    lines = [
        line for line in block.splitlines() if line.startswith("- Asked") or line.startswith("- (")
    ]
    assert lines[:3] == [
        '- Asked: "Implement spotter-gqc"',
        '- Asked: "don\'t touch core.py"',
        f"- ({len(said) - kept} more messages left out here)",
    ]
    assert lines[-1] == '- Asked last: "did you push?"'
    assert "- Asked last: did you push?" in log_text(project)  # the log: as it was said
    # one message alone is said as before
    single = [c.user("Just this"), c.say("done")]
    assert stm.read_transcript(write_jsonl(folder / "one.jsonl", single)).requests == ["Just this"]


def test_the_task_set_before_the_tail_is_read_from_the_start(agent, run, monkeypatch):
    project, folder = agent
    c = Claude(str(project), SID)
    entries = [c.user("Implement spotter-gqc"), c.user("and keep the API stable")]
    entries += [c.say(f"working, step {n} " + "x" * 1000) for n in range(300)]
    entries += [c.user("continue"), c.say("Done.")]
    path = write_jsonl(folder / f"{SID}.jsonl", entries)
    result = stm.read_transcript(path, max_bytes=56 * 1024, head_bytes=8192)
    assert result.requests == ["Implement spotter-gqc", "and keep the API stable", "continue"]
    assert result.request == "continue" and result.requests_omitted == -1
    # the tail alone holds no message: the last one read from the start is the last
    quiet = write_jsonl(folder / "quiet.jsonl", entries[:-2])
    assert (
        stm.read_transcript(quiet, max_bytes=56 * 1024, head_bytes=8192).request
        == "and keep the API stable"
    )
    # boot says some were left out, without a count it does not have
    stm_session = stm.read_transcript(path, max_bytes=56 * 1024, head_bytes=8192)
    record = stm.captured_record(stm_session, None, client="claude", session=SID, event="Stop")
    assert stm.capture_request_lines(record) == [
        '- Asked: "Implement spotter-gqc"',
        '- Asked: "and keep the API stable"',
        "- (more messages left out here)",
        '- Asked last: "continue"',
    ]
    # the hook reads the start within its window's bytes
    monkeypatch.setattr(stm, "TRANSCRIPT_TAIL_BYTES", 64 * 1024)
    run("capture", "--client", "claude", stdin=payload("PreCompact", SID, path, project))
    captured = the_state(project)["captured"]
    assert captured["requests"] == ["Implement spotter-gqc", "and keep the API stable"]
    assert captured["request"] == "continue" and captured["requests_omitted"] == -1
    # a state holding it is valid: check passes, the agent and the next capture write it
    assert run("check").code == 0
    assert run("session", "checkpoint", "--resume", "push the branch").code == 0
    assert the_state(project)["checkpoint"]["resume_instruction"] == "push the branch"


def test_codex_writes_each_message_twice_and_it_is_kept_once(tmp_path, cwd):
    x = Codex(cwd)
    entries = [
        x.meta(),
        x.developer("<permissions instructions>sandboxed</permissions instructions>"),
    ]
    entries += [*x.prompt("Port the tokenizer"), x.message("assistant", "Ported.")]
    entries += [*x.prompt("continue"), x.message("assistant", "Continued.")]
    entries += [*x.prompt("continue"), x.task_complete("Done with the port.")]
    result = read(tmp_path, entries)
    assert result.requests == ["Port the tokenizer", "continue", "continue"]
    assert result.last_message == "Done with the port."


# ---- 7. the plan from every shape; the open question ---------------------------------------


def test_the_approved_exit_plan_mode_plan_is_the_plan(tmp_path, cwd):
    c = Claude(cwd)
    plan = (
        "# Plan: rate limiter\n\n1. **Add the token bucket** in lib/limiter.ex\n"
        "   - with a refill timer\n2. Wire it into the router\n3. Write the property tests\n"
    )
    refused = "# Plan: rewrite everything\n\n1. Delete lib/\n"
    entries = [
        c.user("Add rate limiting to the API"),
        c.call("p0", "ExitPlanMode", plan=refused),
        c.result("p0", "The user doesn't want to proceed with this tool use.", is_error=True),
        c.call("p1", "ExitPlanMode", plan=plan),
        c.result("p1", "User has approved your plan. You can now start coding."),
        c.say("Starting with the bucket."),
    ]
    assert read(tmp_path, entries).plan == [
        ("Add the token bucket in lib/limiter.ex", "pending"),
        ("Wire it into the router", "pending"),
        ("Write the property tests", "pending"),
    ]
    # a todo list, when there is one, is the plan with its states
    todos = [{"content": "Add the bucket", "status": "in_progress", "activeForm": "Adding"}]
    later = [c.call("t1", "TodoWrite", todos=todos), c.result("t1", "Todos have been modified")]
    assert read(tmp_path, entries + later).plan == [("Add the bucket", "in_progress")]
    # only headings: they are the steps
    steps = "# Plan\n\n## Move the cache\nbody\n## Drop the old flag\n"
    headed = [c.call("p2", "ExitPlanMode", plan=steps), c.result("p2", "User has approved")]
    assert read(tmp_path, headed, name="h.jsonl").plan == [
        ("Move the cache", "pending"),
        ("Drop the old flag", "pending"),
    ]


def test_a_rejected_plan_call_changes_nothing(tmp_path, cwd):
    c = Claude(cwd)
    entries = [
        c.user("Do the three steps"),
        c.call("c1", "TaskCreate", subject="step one", description="d"),
        c.result("c1", "Task #1 created successfully: step one"),
        c.call("u1", "TaskUpdate", taskId="1", status="completed"),
        c.result("u1", "<tool_use_error>Task 1 is blocked</tool_use_error>", is_error=True),
        c.call("u2", "TaskUpdate", taskId="1", status="deleted"),
        c.result("u2", "The user doesn't want to proceed with this tool use.", is_error=True),
    ]
    assert read(tmp_path, entries).plan == [("step one", "pending")]
    todos = [{"content": "a", "status": "pending", "activeForm": "A"}]
    rejected = [{"content": "b", "status": "completed", "activeForm": "B"}]
    lists = [
        c.call("t1", "TodoWrite", todos=todos),
        c.result("t1", "Todos have been modified successfully."),
        c.call("t2", "TodoWrite", todos=rejected),
        c.result("t2", "InputValidationError: todos[0].id is required", is_error=True),
    ]
    assert read(tmp_path, lists, name="l.jsonl").plan == [("a", "pending")]


def test_a_question_waiting_for_the_person_is_the_open_question(agent, run):
    project, folder = agent
    c = Claude(str(project), SID)
    question = {
        "question": "Which store should the cache use?",
        "header": "Store",
        "multiSelect": False,
        "options": [
            {"label": "SQLite", "description": "one file"},
            {"label": "Redis", "description": "a server"},
        ],
    }
    answered = [
        c.user("Add a cache"),
        c.call("q0", "AskUserQuestion", questions=[{**question, "question": "Cache reads too?"}]),
        c.result("q0", 'User has answered your questions: "Cache reads too?"="Yes"'),
        c.call("q1", "AskUserQuestion", questions=[question]),
    ]
    transcript = write_jsonl(folder / f"{SID}.jsonl", answered)
    run("capture", "--client", "claude", stdin=payload("SessionEnd", SID, transcript, project))
    assert (
        the_state(project)["captured"]["question"]
        == "Which store should the cache use? (SQLite / Redis)"
    )
    block = captured_block(run("boot").out)
    assert (
        '- Waiting for the person\'s answer: "Which store should the cache use? (SQLite / Redis)"'
        in block
    )
    assert "Cache reads too?" not in block
    assert run("check").code == 0
    done = stm.read_transcript(
        write_jsonl(folder / "done.jsonl", answered + [c.result("q1", "Redis")])
    )
    assert done.question == ""


# ---- 8. recovery, huge lines, labels, interrupts --------------------------------------------


def test_recovery_never_takes_a_subagent_transcript_for_the_session(agent, run):
    project, folder = agent
    c = Claude(str(project), SID)
    session = write_jsonl(folder / f"{SID}.jsonl", [c.user("Build the exporter"), c.say("Built.")])
    os.utime(session, (time.time() - 600, time.time() - 600))
    helper = Claude(str(project), SID)
    side = [
        helper.sidechain(helper.user("Search for exporters")),
        helper.sidechain(helper.say("Found 2")),
    ]
    write_jsonl(folder / "agent-a1b2c3d.jsonl", side)  # newer, beside it
    new = "0c0c0c0c-3333-4000-8000-000000000003"
    start = payload("SessionStart", new, folder / f"{new}.jsonl", project, source="startup")
    assert run("capture", "--client", "claude", stdin=start).code == 0
    assert the_state(project)["captured"]["request"] == "Build the exporter"
    # a subagent transcript under any name is not the session either: its lines are sidechain
    os.rename(folder / "agent-a1b2c3d.jsonl", folder / "b2b2b2b2-4444-4000-8000-000000000004.jsonl")
    assert stm.find_project_transcript(str(folder), str(project), exclude=(session,)) is None


def test_codex_recovery_searches_the_days_before(agent, run):
    project, home = agent
    sessions = home / "sessions"
    today = time.gmtime(clock())
    yesterday = time.gmtime(clock() - 86400)
    old_folder = sessions / time.strftime("%Y/%m/%d", yesterday)
    new_folder = sessions / time.strftime("%Y/%m/%d", today)
    old_folder.mkdir(parents=True)
    new_folder.mkdir(parents=True)
    x = Codex(str(project))
    killed = [
        x.meta(),
        x.turn(),
        *x.prompt("Migrate the config loader"),
        x.message("assistant", "Half done."),
    ]
    write_jsonl(
        old_folder / f"rollout-{time.strftime('%Y-%m-%dT%H-%M-%S', yesterday)}-{x.session}.jsonl",
        killed,
    )
    new = "0199a213-81c0-7800-8aa1-000000000009"
    rollout = new_folder / f"rollout-{time.strftime('%Y-%m-%dT%H-%M-%S', today)}-{new}.jsonl"
    write_jsonl(rollout, [Codex(str(project), new).meta()])
    start = payload("SessionStart", new, rollout, project, source="startup")
    assert run("capture", "--client", "codex", stdin=start).code == 0
    assert the_state(project)["captured"]["request"] == "Migrate the config loader"
    # bounded: a week back at most
    folders = stm.transcript_folders(str(rollout))
    assert folders == [str(new_folder), str(old_folder)]
    alone = sessions / time.strftime("%Y/%m/%d", time.gmtime(clock() - 30 * 86400))
    assert stm.transcript_folders(str(alone / "rollout-x.jsonl")) == [str(alone)]
    assert stm.transcript_folders("/x/2026/02/30/rollout-x.jsonl") == ["/x/2026/02/30"]


def test_a_prompt_with_megabytes_of_screenshots_is_read_for_its_text(tmp_path, cwd):
    c = Claude(cwd)
    entries = [
        c.user("Fix the header"),
        c.say("Fixed."),
        c.image_prompt("The footer overlaps on mobile, see these", images=3, kb=415),
    ]
    path = write_jsonl(tmp_path / "big.jsonl", entries)
    assert os.path.getsize(path) > stm.TRANSCRIPT_LINE_MAX_BYTES
    result = stm.read_transcript(path)
    assert result.request == "The footer overlaps on mobile, see these"


def test_session_end_at_the_compactions_position_is_labelled_as_the_end(agent, run):
    project, folder = agent
    c = Claude(str(project), SID)
    transcript = write_jsonl(folder / f"{SID}.jsonl", [c.user("Tidy the docs"), c.say("Tidied.")])
    run("capture", "--client", "claude", stdin=payload("PreCompact", SID, transcript, project))
    assert "captured before a compaction" in captured_block(run("boot").out)
    entries_before = log_text(project).count("Captured by stm")
    run("capture", "--client", "claude", stdin=payload("SessionEnd", SID, transcript, project))
    block = captured_block(run("boot").out)
    assert "captured at session end" in block and "compaction" not in block
    assert log_text(project).count("Captured by stm") == entries_before  # logged once


def test_a_start_after_a_compaction_says_so_and_a_recovery_says_next_start(agent, run):
    project, folder = agent
    c = Claude(str(project), SID)
    transcript = write_jsonl(folder / f"{SID}.jsonl", [c.user("Tidy the docs"), c.say("Tidied.")])
    start = payload("SessionStart", SID, transcript, project, source="compact")
    assert run("capture", "--client", "claude", "--boot", stdin=start).code == 0
    assert the_state(project)["captured"]["event"] == "SessionStart compact"
    assert "captured after a compaction" in captured_block(run("boot").out)
    resumed = payload("SessionStart", SID, transcript, project, source="resume")
    write_jsonl(
        folder / f"{SID}.jsonl", [c.user("Tidy the docs"), c.say("Tidied."), c.say("More.")]
    )
    run("capture", "--client", "claude", stdin=resumed)
    assert "captured when the session resumed" in captured_block(run("boot").out)


def test_an_interrupted_last_turn_is_said(agent, run, tmp_path):
    project, folder = agent
    c = Claude(str(project), SID)
    entries = [
        c.user("Rename the module"),
        c.call("b1", "Bash", command="git mv a.py b.py"),
        c.result("b1", "[Request interrupted by user for tool use]", is_error=True),
        c.interrupted(for_tool=True),
    ]
    transcript = write_jsonl(folder / f"{SID}.jsonl", entries)
    run("capture", "--client", "claude", stdin=payload("PreCompact", SID, transcript, project))
    assert the_state(project)["captured"]["interrupted"] is True
    assert run("check").code == 0  # the new fields are valid state
    assert f"- {stm.CAPTURE_INTERRUPTED}" in captured_block(run("boot").out)
    # a new message after the interrupt: the last turn was not interrupted
    # the note after an exit-code header: still the person's stop, not a failure
    killed = [c.call("b2", "Bash", command="sleep 100")]
    killed += [
        c.result("b2", "Exit code 137\n[Request interrupted by user for tool use]", is_error=True)
    ]
    assert read(tmp_path, entries + killed, name="k.jsonl").failures == []
    more = [c.user("ok, go on"), c.say("Renamed.")]
    assert read(tmp_path, entries + more).interrupted is False
    x = Codex(str(project))
    codex = [
        x.meta(),
        *x.prompt("Rename the module"),
        x.message("assistant", "Renaming"),
        x.aborted(),
    ]
    assert read(tmp_path, codex, name="x.jsonl").interrupted is True


# ---- MCP --------------------------------------------------------------------------------------


def test_mcp_boot_shows_the_persons_messages_and_the_open_failures(agent, run):
    project, folder = agent
    x = Codex(str(project), "0199a213-81c0-7800-8aa1-0000000000aa")
    entries = [x.meta(), *x.prompt("Implement spotter-gqc"), *x.prompt("don't touch core.py")]
    entries += [x.call("s1", "shell", command=["bash", "-lc", "cargo test"])]
    entries += [x.output("s1", exec_json("error[E0308]: mismatched types\n --> src/lib.rs:3", 101))]
    entries += [*x.prompt("did you push?"), x.message("assistant", "Not yet.")]
    rollout = write_jsonl(folder / f"rollout-2026-01-01T00-00-00-{x.session}.jsonl", entries)
    stop = payload("Stop", x.session, rollout, project)
    assert run("capture", "--client", "codex", stdin=stop).code == 0
    with McpClient(cwd=project) as client:
        client.legacy_handshake()
        text = client.tool_result("boot", {}, era="legacy")["content"][0]["text"]
    assert '- Asked: "Implement spotter-gqc"' in text
    assert '- Asked: "don\'t touch core.py"' in text
    assert '- Asked last: "did you push?"' in text
    assert "cargo test — error[E0308]: mismatched types" in text


# ---- the corpus: each long session scored against what a person would write down ---------


def person_checks(block: str, person: dict) -> list[tuple[str, bool]]:
    """(what a person would write down, whether boot's block says it) for one session."""
    lines = block.splitlines()
    asked = [quoted_texts(line)[0] for line in lines if line.startswith("- Asked")]
    checks = [(f"asked, in order: {asked}", asked == person["asked"])]
    if person["asked"]:
        checks.append(
            (
                "the last message is marked",
                lines_with(lines, "- Asked")[-1].startswith(
                    "- Asked last: " if len(person["asked"]) > 1 else "- Asked: "
                ),
            )
        )
    for text, status in person["plan"]:
        word = stm.PLAN_MARKS[status]
        line = next((x for x in lines if x.startswith(f"- Plan, {word}: ")), "")
        checks.append((f"plan {status}: {text}", text in quoted_texts(line)))
    if not person["plan"]:
        checks.append(("no plan invented", not lines_with(lines, "- Plan")))
    touched = " ".join(lines_with(lines, "- Touched: "))
    checks += [(f"touched {f}", f"`{f}`" in touched) for f in person["files"]]
    failed = " ".join(lines_with(lines, "- Failed: "))
    for command, error in person["open"]:
        checks.append((f"open failure {command}", command in failed and error in failed))
    checks += [(f"no stale failure {c}", f"`{c}" not in failed) for c in person["fixed"]]
    if not person["open"]:
        checks.append(("no failures", not failed))
    last = " ".join(lines_with(lines, "- Last message: "))
    checks.append(("last message", person["last"] in last if person["last"] else not last))
    question = " ".join(lines_with(lines, "- Waiting for the person's answer: "))
    checks.append(("open question", person.get("question", "") in question))
    interrupted = f"- {stm.CAPTURE_INTERRUPTED}" in lines
    checks.append(("interrupted", interrupted == bool(person.get("interrupted"))))
    checks += [(f"never {text!r}", text not in block) for text in person["never"]]
    return checks


def quoted_texts(line: str) -> list[str]:
    """The captured texts a boot line quotes: `- Plan, done: "a"; "b"` gives a and b."""
    decoder, texts = json.JSONDecoder(), []
    at = line.find(": ") + 2 if ": " in line else len(line)
    while at < len(line):
        value, at = decoder.raw_decode(line, at)
        texts.append(value)
        at += len("; ")
    return texts


def lines_with(lines: list, start: str) -> list:
    return [line for line in lines if line.startswith(start)]


@pytest.mark.parametrize("name", list(CORPUS))
def test_the_corpus_reads_as_a_person_would(agent, run, name):
    project, folder = agent
    client, build = CORPUS[name]
    entries, person = build(str(project))
    first = entries[0].get("payload") or next(e for e in entries if "sessionId" in e)
    session = first.get("id") or first["sessionId"]
    stem = f"rollout-2026-01-01T00-00-00-{session}" if client == "codex" else session
    transcript = write_jsonl(folder / f"{stem}.jsonl", entries)
    hook = payload("PreCompact", session, transcript, project)
    assert run("capture", "--client", client, stdin=hook).code == 0
    block = captured_block(run("boot").out)
    checks = person_checks(block, person)
    missed = [what for what, ok in checks if not ok]
    score = 10 * (len(checks) - len(missed)) / len(checks)
    assert not missed, f"{name}: {score:.1f}/10, missed {missed}\n{block}"
    # the log entry says the same as boot
    log = log_text(project)
    for text in person["asked"]:
        assert text in log
