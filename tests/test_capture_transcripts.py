"""Formats: transcripts. Reading what an agent client's session did from its transcript
(Claude Code's project JSONL, Codex's rollout), finding a project's last transcript, and
the state of a git work tree. Fixtures are built from the clients' documented formats."""

from __future__ import annotations

import base64
import functools
import json
import os
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from helpers import fake_token, git_out, needs_git
from transcripts import Claude, Codex, exec_json, patch, write_jsonl

import stm

ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "/+"
URLSAFE = ALNUM + "-_"


@pytest.fixture
def cwd(tmp_path) -> str:
    return str(tmp_path / "project")


# ---- Claude Code ------------------------------------------------------------------------------


def test_claude_todowrite_plan_request_files_and_failures(tmp_path, cwd):
    c = Claude(cwd)
    todos = [
        {"content": "Port the lexer", "status": "completed", "activeForm": "Porting the lexer"},
        {"content": "Port the parser", "status": "in_progress", "activeForm": "Porting"},
        {"content": "Ship it", "status": "pending", "activeForm": "Shipping"},
    ]
    entries = [
        c.user("Port the parser to the new grammar"),
        c.call("t1", "TodoWrite", todos=[{**todos[0], "status": "pending"}]),
        c.result("t1", "Todos have been modified successfully."),
        c.call("w1", "Write", file_path=f"{cwd}/src/lexer.py", content="x = 1\n"),
        c.result("w1", "File created successfully"),
        c.call("e1", "Edit", file_path=f"{cwd}/src/parser.py", old_string="a", new_string="b"),
        c.result("e1", "The file has been updated."),
        c.call("n1", "NotebookEdit", notebook_path="/elsewhere/nb.ipynb", new_source="x"),
        c.result("n1", "Updated cell"),
        c.call("m1", "MultiEdit", file_path=f"{cwd}/src/lexer.py", edits=[]),
        c.result("m1", "Applied 0 edits"),
        c.call("b1", "Bash", command="pytest -q tests/test_parser.py", description="Run tests"),
        c.result(
            "b1", "Exit code 1\nFAILED tests/test_parser.py::test_expr\n1 failed", is_error=True
        ),
        c.call("b2", "Bash", command="ls"),
        c.result("b2", "src\ntests"),
        c.call("b3", "Bash", command="rm -rf build"),
        c.result("b3", "[Request interrupted by user for tool use]", is_error=True),
        c.call("t2", "TodoWrite", todos=todos),
        c.result("t2", "Todos have been modified successfully."),
        c.say("The parser is ported; one test still fails in test_expr."),
    ]
    path = write_jsonl(tmp_path / "session.jsonl", entries)
    result = stm.read_transcript(path)
    assert result.client == "claude"
    assert result.session_id == c.session
    assert result.cwd == cwd
    assert result.plan == [
        ("Port the lexer", "completed"),
        ("Port the parser", "in_progress"),
        ("Ship it", "pending"),
    ]
    assert result.request == "Port the parser to the new grammar"
    assert result.last_message == "The parser is ported; one test still fails in test_expr."
    # newest last, each once; inside cwd relative, outside as written
    assert result.files == ["src/parser.py", "/elsewhere/nb.ipynb", "src/lexer.py"]
    assert result.failures == [
        ("pytest -q tests/test_parser.py", "FAILED tests/test_parser.py::test_expr")
    ]
    last = entries[-1]
    assert result.ended_at == last["timestamp"][:19] + "Z"
    assert result.position == f"{os.path.getsize(path)}:{last['uuid']}"
    assert result.compacted is False


def test_claude_task_tools_take_ids_from_results_and_drop_deleted_tasks(tmp_path, cwd):
    c = Claude(cwd)
    entries = [
        c.user("Plan the release"),
        c.calls(
            ("c1", "TaskCreate", {"subject": "Write notes", "description": "d", "activeForm": "W"}),
            ("c2", "TaskCreate", {"subject": "Tag it", "description": "d"}),
            ("c3", "TaskCreate", {"subject": "Announce", "description": "d"}),
        ),
        # results arrive in any order; the number in each result is the task's id
        c.result("c2", "Task #2 created successfully: Tag it"),
        c.result("c1", "Task #1 created successfully: Write notes"),
        c.result("c3", [{"type": "text", "text": "Task #3 created successfully: Announce"}]),
        c.call("u1", "TaskUpdate", taskId="1", status="in_progress"),
        c.call("u2", "TaskUpdate", taskId="1", status="completed"),
        c.call("u3", "TaskUpdate", taskId="2", status="deleted"),
        c.call("u4", "TaskUpdate", taskId="3", subject="Announce on the list"),
        c.call("u5", "TaskUpdate", taskId="9", status="completed"),  # unknown: no text
        c.call("u6", "TaskList"),
        c.result("u6", "#1 [completed] Write notes"),
    ]
    result = stm.read_transcript(write_jsonl(tmp_path / "s.jsonl", entries))
    assert result.plan == [("Write notes", "completed"), ("Announce on the list", "pending")]


def test_claude_task_ids_count_up_when_results_do_not_say(tmp_path, cwd):
    c = Claude(cwd)
    entries = [
        c.call("c1", "TaskCreate", subject="first", description="d"),
        c.result("c1", "Task created"),
        c.call("c2", "TaskCreate", subject="second", description="d"),
        c.result("c2", "ok", detail={"task": {"id": "5", "subject": "second"}}),
        c.call("c3", "TaskCreate", subject="third", description="d"),  # no result yet
        c.call("c4", "TaskCreate", subject="refused", description="d"),
        c.result("c4", "Error: no", is_error=True),
        c.call("u1", "TaskUpdate", taskId=5, status="completed"),
        c.call("u2", "TaskUpdate", taskId="1", status="bogus"),
    ]
    result = stm.read_transcript(write_jsonl(tmp_path / "s.jsonl", entries))
    assert result.plan == [("first", "pending"), ("second", "completed"), ("third", "pending")]


def test_the_plan_tool_used_last_wins(tmp_path, cwd):
    c = Claude(cwd)
    todo = c.call("t1", "TodoWrite", todos=[{"content": "from todo", "status": "pending"}])
    tasks = [
        c.call("c1", "TaskCreate", subject="from tasks", description="d"),
        c.result("c1", "Task #1 created successfully: from tasks"),
    ]
    late_todo = write_jsonl(tmp_path / "a.jsonl", [*tasks, todo])
    assert stm.read_transcript(late_todo).plan == [("from todo", "pending")]
    late_tasks = write_jsonl(tmp_path / "b.jsonl", [todo, *tasks])
    assert stm.read_transcript(late_tasks).plan == [("from tasks", "pending")]


def test_tasks_created_before_the_window_are_known_only_by_what_updates_say(tmp_path, cwd):
    c = Claude(cwd)
    before = [
        c.call("c1", "TaskCreate", subject="Alpha", description="d"),
        c.result("c1", "Task #1 created successfully: Alpha"),
        c.call("c2", "TaskCreate", subject="Beta", description="d"),
        c.result("c2", "Task #2 created successfully: Beta"),
        c.say("x" * 20000),  # padding the window will not reach back over
    ]
    after = [
        c.call("c3", "TaskCreate", subject="Gamma", description="d"),
        c.result("c3", "Task #3 created successfully: Gamma"),
        c.call("u1", "TaskUpdate", taskId="1", status="completed"),
        c.call("u2", "TaskUpdate", taskId="2", status="in_progress", subject="Beta again"),
    ]
    path = write_jsonl(tmp_path / "s.jsonl", before + after)
    window = sum(len(json.dumps(entry)) + 1 for entry in after) + 100
    result = stm.read_transcript(path, max_bytes=window)
    assert result.plan == [("Beta again", "in_progress"), ("Gamma", "pending")]
    assert stm.read_transcript(path).plan == [
        ("Alpha", "completed"),
        ("Beta again", "in_progress"),
        ("Gamma", "pending"),
    ]


def test_claude_requests_skip_wrappers_meta_lines_and_tool_results(tmp_path, cwd):
    c = Claude(cwd)
    command = "<command-message>review</command-message>\n<command-name>/review</command-name>"
    entries = [
        c.user("Fix the flaky test in test_io.py"),
        c.user([{"type": "text", "text": "and keep the fix small"}]),
        c.user("Caveat: The messages below were generated by the user", isMeta=True),
        c.user(command),
        c.user("<local-command-stdout>done</local-command-stdout>"),
        c.user("<system-reminder>\nremember the todo list\n</system-reminder>"),
        c.user("expanded prompt of a command", isMeta=True),
        c.user("This session is being continued from a previous one", isCompactSummary=True),
        c.user([{"type": "text", "text": "[Request interrupted by user]"}]),
        c.user("subagent prompt", isSidechain=True),
        c.user([{"type": "image", "source": {"type": "base64", "data": "AAAA"}}]),
        c.result("x1", "tool output is no request"),
        c.compact(),
        c.say("Fixed: the test waited on a real clock."),
        c.entry("assistant", [{"type": "text", "text": "subagent says hi"}], isSidechain=True),
        c.entry("assistant", [{"type": "text", "text": "API Error: 500"}], isApiErrorMessage=True),
    ]
    result = stm.read_transcript(write_jsonl(tmp_path / "s.jsonl", entries))
    assert result.request == "and keep the fix small"
    assert result.last_message == "Fixed: the test waited on a real clock."
    assert result.compacted is True
    assert result.plan == [] and result.files == [] and result.failures == []


def test_requests_made_only_of_client_wrappers_are_no_requests(tmp_path, cwd):
    """A session whose last user turns are only client wrappers (`/clear`, a command's
    output, a `!` shell's output over text_of's usual 64 KiB, a self-closing element)
    asked what the last person-written turn asked; wrappers at either end of a message
    a person wrote are cut off it, markup inside or in a person's own words stays."""
    c = Claude(cwd)
    big = "<bash-stdout>" + "line of log\n" * 8000 + "</bash-stdout><bash-stderr></bash-stderr>"
    wrappers = [
        c.user("<command-name>/clear</command-name>\n  <command-message>clear</command-message>"),
        c.user("<local-command-stdout></local-command-stdout>"),
        c.user("<bash-input>cat big.log</bash-input>"),
        c.user(big),
        c.user("<command-name>/compact</command-name><command-args/>"),
        c.user([{"type": "text", "text": "<system-reminder>\nRead a file\n</system-reminder>"}]),
    ]
    asked = [c.user("Port the lexer"), *wrappers, c.say("ok")]
    result = stm.read_transcript(write_jsonl(tmp_path / "a.jsonl", asked))
    assert result.request == "Port the lexer"
    only = stm.read_transcript(write_jsonl(tmp_path / "b.jsonl", [*wrappers, c.say("ok")]))
    assert only.request == ""
    for message, request in (
        ("<command-name>/model</command-name> now fix the parser", "now fix the parser"),
        ("fix X\n<user-prompt-submit-hook>branch main</user-prompt-submit-hook>", "fix X"),
        ("why does <div>x</div> not render?", "why does <div>x</div> not render?"),
        ("<code>f()</code> crashes", "<code>f()</code> crashes"),
    ):
        path = write_jsonl(tmp_path / "c.jsonl", [c.user(message), c.say("ok")])
        assert stm.read_transcript(path).request == request
    x = Codex(cwd)
    codex = [x.meta(), x.message("user", "Write the docs"), x.message("user", big)]
    assert stm.read_transcript(write_jsonl(tmp_path / "d.jsonl", codex)).request == "Write the docs"


@pytest.mark.parametrize(
    "message",
    [
        "x " + "<a-b></a-b>" * 50_000,
        "<a-b></a-b> " * 50_000 + "x",
        "<a-b></a-b>" * 50_000,
        "x " + "<a-b>" * 50_000 + "</a-b>",
    ],
    ids=["wrappers after words", "words after wrappers", "only wrappers", "nested"],
)
def test_a_megabyte_of_wrappers_costs_a_bounded_number_of_steps(monkeypatch, message):
    """A hook stays fast on any input: the wrapper scans look at WRAPPERS_MAX elements at
    each end at most, and never copy the text once per element (that was quadratic)."""
    calls = []
    real = stm.element_end

    def counted(text, at):
        calls.append(at)
        return real(text, at)

    monkeypatch.setattr(stm, "element_end", counted)
    text = stm.request_text(message)
    assert len(calls) <= 2 * stm.WRAPPERS_MAX + 2
    assert text in ("", "x") or text.startswith("x <a-b>")


def test_without_a_plan_the_rest_is_still_found(tmp_path, cwd):
    c = Claude(cwd)
    entries = [
        c.user("Rename the config loader"),
        c.call("w1", "Write", file_path=f"{cwd}/config.py", content=""),
        c.result("w1", "ok"),
        c.call("b1", "Bash", command="python -m mypy ."),
        c.result("b1", [{"type": "text", "text": "config.py:3: error: bad"}], is_error=True),
        c.say("Renamed; mypy still reports one error."),
    ]
    result = stm.read_transcript(write_jsonl(tmp_path / "s.jsonl", entries))
    assert result.plan == []
    assert result.request == "Rename the config loader"
    assert result.last_message == "Renamed; mypy still reports one error."
    assert result.files == ["config.py"]
    assert result.failures == [("python -m mypy .", "config.py:3: error: bad")]


def test_files_and_failures_are_bounded_to_the_newest(tmp_path, cwd):
    c = Claude(cwd)
    entries = []
    for n in range(30):
        entries += [c.call(f"w{n}", "Write", file_path=f"{cwd}/f{n}.txt", content="")]
        entries += [c.call(f"b{n}", "Bash", command=f"false {n}")]
        entries += [c.result(f"b{n}", f"Exit code 1\nerror {n}", is_error=True)]
    result = stm.read_transcript(write_jsonl(tmp_path / "s.jsonl", entries))
    assert result.files == [f"f{n}.txt" for n in range(10, 30)]
    assert result.failures == [(f"false {n}", f"error {n}") for n in range(25, 30)]


# ---- Codex ----------------------------------------------------------------------------------


def test_codex_rollout_plan_patches_and_failing_shell_calls(tmp_path, cwd):
    x = Codex(cwd)
    heredoc = f"apply_patch <<'EOF'\n{patch('Update File: docs/readme.md')}\nEOF\n"
    plan = [
        {"step": "Read the parser", "status": "completed"},
        {"step": "Fix precedence", "status": "in_progress"},
        {"step": "Add tests", "status": "pending"},
    ]
    entries = [
        x.meta(),
        x.message("developer", "<permissions instructions>sandboxed</permissions instructions>"),
        x.message(
            "user", "# AGENTS.md instructions for /p\n\n<INSTRUCTIONS>be nice</INSTRUCTIONS>"
        ),
        x.message("user", "<environment_context>\n  <cwd>/p</cwd>\n</environment_context>"),
        x.message("user", "Fix operator precedence in the parser"),
        x.event("user_message", "Fix operator precedence in the parser"),
        x.turn(),
        x.line("response_item", {"type": "reasoning", "summary": [], "encrypted_content": "gA"}),
        x.call("p1", "update_plan", plan=[{"step": "Read the parser", "status": "pending"}]),
        x.output("p1", "Plan updated"),
        x.custom_call(
            "a1", "apply_patch", patch("Add File: src/new.py", f"Update File: {cwd}/src/old.py")
        ),
        x.output(
            "a1", exec_json("Success. Updated the following files:", 0), "custom_tool_call_output"
        ),
        x.call(
            "a2", "apply_patch", input=patch("Delete File: gone.txt", "Update File: src/new.py")
        ),
        x.output("a2", "Success."),
        x.call("s1", "shell", command=["bash", "-lc", "pytest -q"], workdir=cwd),
        x.output("s1", exec_json("E   AssertionError: boom\n1 failed", 1)),
        x.call("s2", "shell_command", command="make lint"),
        x.output("s2", "Exit code: 2\nWall time: 0.4 seconds\nOutput:\nlint.py:1: E999 bad\n"),
        x.call("s3", "exec_command", cmd="ls", yield_time_ms=250),
        x.output(
            "s3", "Chunk ID: 1a\nWall time: 0.1 seconds\nProcess exited with code 0\nOutput:\nsrc\n"
        ),
        x.call("s4", "exec_command", cmd="cargo build"),
        x.output(
            "s4", "Wall time: 2.0 seconds\nProcess exited with code 101\nOutput:\nerror[E0425]: x\n"
        ),
        x.call("s5", "shell", command=["bash", "-lc", heredoc]),
        x.output("s5", {"content": "Exit code: 0\nOutput:\nSuccess.", "success": True}),
        x.call("s6", "shell", command=["git", "push"]),
        x.output(
            "s6", [{"type": "input_text", "text": "Exit code: 128\nOutput:\nfatal: no remote"}]
        ),
        x.call("w1", "web_search", query="precedence climbing"),  # an unknown tool: skipped
        x.output("w1", "results"),
        x.call("p2", "update_plan", explanation="progress", plan=plan),
        x.output("p2", "Plan updated"),
        x.message("assistant", "Precedence fixed; pytest still fails on one case."),
        x.event("token_count", "ignored"),
    ]
    path = write_jsonl(tmp_path / "rollout.jsonl", entries)
    result = stm.read_transcript(path)
    assert result.client == "codex"
    assert result.session_id == x.session and result.cwd == cwd
    assert result.plan == [
        ("Read the parser", "completed"),
        ("Fix precedence", "in_progress"),
        ("Add tests", "pending"),
    ]
    assert result.request == "Fix operator precedence in the parser"
    assert result.last_message == "Precedence fixed; pytest still fails on one case."
    assert result.files == ["src/old.py", "gone.txt", "src/new.py", "docs/readme.md"]
    assert result.failures == [
        ("pytest -q", "E AssertionError: boom"),
        ("make lint", "lint.py:1: E999 bad"),
        ("cargo build", "error[E0425]: x"),
        ("git push", "fatal: no remote"),
    ]
    assert result.ended_at == entries[-1]["timestamp"][:19] + "Z"
    assert result.position == f"{os.path.getsize(path)}:{entries[-1]['timestamp']}"


def test_codex_compaction_and_a_request_from_the_event_alone(tmp_path, cwd):
    x = Codex(cwd)
    entries = [
        x.meta(),
        x.line("compacted", {"message": "summary", "replacement_history": []}),
        x.event("user_message", "Now update the changelog"),
        x.event("agent_message", "Changelog updated."),
    ]
    result = stm.read_transcript(write_jsonl(tmp_path / "r.jsonl", entries))
    assert result.compacted is True
    assert result.request == "Now update the changelog"
    assert result.last_message == "Changelog updated."


# ---- damaged and hostile input --------------------------------------------------------------


def test_malformed_lines_unknown_types_and_a_truncated_last_line_are_skipped(tmp_path, cwd):
    c = Claude(cwd)
    good = [
        c.user("the real request"),
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}},
        {"type": "summary", "summary": "Earlier work", "leafUuid": "uuid-0001"},
        c.entry("queue-operation", "later"),
        c.call("m1", "mcp__github__create_issue", title="x"),
        c.result("m1", "created", is_error=True),
        c.call("k1", "Bash", command=None),
        c.entry("assistant", "not a list of blocks"),
        c.entry("assistant", [{"type": "tool_use", "id": "z", "name": "Write", "input": "nope"}]),
        c.say("the real answer"),
    ]
    lines = [json.dumps(entry) for entry in good]
    lines[1:1] = ["not json at all", "[1, 2, 3]", "42", '"a string"', "{broken", "", "   "]
    lines.append('{"a":' * 100000 + "1" + "}" * 100000)  # deeper than recursion allows
    lines.append(json.dumps(c.user("x" * (stm.TRANSCRIPT_LINE_MAX_BYTES + 10))))
    late = json.dumps(c.user("a request still being written"))
    data = "\n".join(lines).encode() + b"\n"
    data += b'\xff\xfe{"type": "user", "message": {"content": "\xff"}}\n'  # not UTF-8
    path = tmp_path / "s.jsonl"
    path.write_bytes(data + late[: len(late) // 2].encode())  # its writer is still at it
    result = stm.read_transcript(str(path))
    assert result.client == "claude"
    assert result.request == "the real request"
    assert result.last_message == "the real answer"
    assert result.files == [] and result.failures == []


def test_a_window_that_starts_on_a_line_boundary_keeps_that_line(tmp_path, cwd):
    c = Claude(cwd)
    first, last = c.user("older request"), c.user("newest request")
    path = write_jsonl(tmp_path / "s.jsonl", [first, last])
    whole = len(json.dumps(last)) + 1
    assert stm.read_transcript(path, max_bytes=whole).request == "newest request"
    assert stm.read_transcript(path, max_bytes=whole - 1).request == ""


def test_a_100_mb_transcript_is_read_from_its_tail_only(tmp_path, cwd, monkeypatch):
    c = Claude(cwd)
    head = [
        c.user("an old request"),
        c.call("t0", "TodoWrite", todos=[{"content": "old plan", "status": "pending"}]),
    ]
    padding = (json.dumps(c.say("p" * 4000)) + "\n") * 2500  # about 10 MB of valid lines
    tail = [
        c.user("the newest request"),
        c.call("t1", "TodoWrite", todos=[{"content": "new plan", "status": "in_progress"}]),
        c.say("working on it"),
    ]
    path = tmp_path / "big.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(json.dumps(entry) + "\n" for entry in head)
        for _ in range(10):
            out.write(padding)
        out.writelines(json.dumps(entry) + "\n" for entry in tail)
    size = path.stat().st_size
    assert size > 100_000_000
    read = []
    real_pread = stm.pread
    monkeypatch.setattr(
        stm, "pread", lambda fd, n, at: read.append(real_pread(fd, n, at)) or read[-1]
    )
    try:
        result = stm.read_transcript(str(path))
    finally:
        path.unlink()  # pytest keeps the last runs' folders: do not keep 100 MB
    assert sum(map(len, read)) <= stm.TRANSCRIPT_TAIL_BYTES + 1
    assert result.request == "the newest request"
    assert result.plan == [("new plan", "in_progress")]
    assert result.last_message == "working on it"
    assert result.position.startswith(f"{size}:")


def test_a_fifo_or_a_link_in_place_of_the_transcript_gives_an_empty_result(tmp_path, cwd):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    empty = stm.read_transcript(str(fifo))  # would block forever if it waited on a writer
    assert empty.client == "" and empty.position == "" and empty.plan == []
    real = write_jsonl(tmp_path / "real.jsonl", [Claude(cwd).user("hello")])
    (tmp_path / "link.jsonl").symlink_to(real)
    assert stm.read_transcript(str(tmp_path / "link.jsonl")).client == ""
    assert stm.read_transcript(str(tmp_path / "missing.jsonl")).position == ""
    assert stm.read_transcript(str(tmp_path)).client == ""  # a folder
    assert stm.read_transcript("nul\0byte").client == ""


def test_control_characters_go_and_every_string_is_one_bounded_line(tmp_path, cwd):
    c = Claude(cwd)
    noisy = "\x1b[2J\x1b]0;title\x07 line one\r\nline\ttwo\u202e\u2066 \u2028end\x7f\x9b"
    entries = [
        c.user(noisy + " " + "r" * 5000),
        c.call("t1", "TodoWrite", todos=[{"content": noisy + "t" * 900, "status": "pending"}]),
        c.call("w1", "Write", file_path=f"{cwd}/{'d' * 400}/x\nfile.py", content=""),
        c.call("b1", "Bash", command=noisy + "c" * 900),
        c.result("b1", noisy + "e" * 900, is_error=True),
        c.say(noisy + "m" * 5000),
    ]
    result = stm.read_transcript(write_jsonl(tmp_path / "s.jsonl", entries))
    assert result.request.startswith("[2J ]0;title line one line two end")
    strings = [result.request, result.last_message, *result.files]
    strings += [text for text, _ in result.plan]
    strings += [part for failure in result.failures for part in failure]
    for text in strings:
        assert text and not any(ord(ch) < 32 or 0x7F <= ord(ch) <= 0x9F for ch in text)
        assert not set(text) & set("\u202e\u2066\u2028")
    limit = stm.CAPTURE_LIMITS  # each text cut once, at its capture field's limit
    assert len(result.request) <= limit["request"]
    assert len(result.last_message) <= limit["last_message"]
    assert result.request.endswith("...") and result.last_message.endswith("...")
    assert all(len(text) <= limit["plan"] for text, _ in result.plan)
    assert all(len(path) <= limit["files"] for path in result.files)
    assert all(len(command) <= stm.FAILURE_COMMAND_CHARS for command, _ in result.failures)
    assert all(len(error) <= stm.FAILURE_ERROR_CHARS for _, error in result.failures)


def every_shape_of(entry):
    """Copies of `entry` with one value (anywhere in it) replaced by a value of another
    JSON type: shapes no client writes, which the reader must survive."""
    others = [None, 7, True, "s", [], {}, [{"a": []}], {"task": []}]

    def places(value, path=()):
        yield path
        if isinstance(value, (dict, list)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, child in items:
                yield from places(child, (*path, key))

    for path in places(entry):
        for other in others:
            if path:
                copy = json.loads(json.dumps(entry))
                holder = copy
                for key in path[:-1]:
                    holder = holder[key]
                holder[path[-1]] = other
                yield copy


def test_entries_of_unexpected_shapes_never_raise(cwd):
    c, x = Claude(cwd), Codex(cwd)
    entries = [
        c.user("request"),
        c.call("t1", "TodoWrite", todos=[{"content": "a", "status": "pending"}]),
        c.call("c1", "TaskCreate", subject="s", description="d"),
        c.result("c1", "Task #1 created", detail={"task": {"id": "1"}}),
        c.call("u1", "TaskUpdate", taskId="1", status="completed", subject="x"),
        c.calls(("w1", "Write", {"file_path": f"{cwd}/a"}), ("b1", "Bash", {"command": "ls"})),
        c.result("b1", [{"type": "text", "text": "Exit code 1\nerr"}], is_error=True),
        c.say("hi"),
        x.meta(),
        x.message("user", "u"),
        x.event("agent_message", "m"),
        x.call("p", "update_plan", plan=[{"step": "s", "status": "pending"}]),
        x.custom_call("a", "apply_patch", patch("Add File: f")),
        x.call("s", "shell", command=["bash", "-lc", "ls"]),
        x.output("s", {"content": "Exit code: 3\nOutput:\nx"}),
        x.line("response_item", {"type": "local_shell_call", "call_id": "l", "action": {}}),
        # the shapes of real transcripts (issue 36)
        c.queued("typed while it worked"),
        c.folded("folded in"),
        c.slash("/x", "args"),
        c.call("bg", "Bash", command="make", run_in_background=True),
        c.result(
            "bg", "Command running in background with ID: b1", detail={"backgroundTaskId": "b1"}
        ),
        c.notification("b1", "failed", "Background command failed"),
        c.call("pm", "ExitPlanMode", plan="1. one\n## two"),
        c.result("pm", "approved"),
        c.call("q", "AskUserQuestion", questions=[{"question": "?", "options": [{"label": "a"}]}]),
        c.snapshot("a.py"),
        c.interrupted(),
        x.task_complete("done"),
        x.aborted(),
    ]
    for entry in entries:
        for odd in every_shape_of(entry):
            reader = stm.TranscriptReader()
            for before in entries:
                reader.feed(before)
            reader.feed(odd)
            assert isinstance(reader.finish(1), stm.Transcript)


# ---- redaction ------------------------------------------------------------------------------

JWT = ".".join(
    [
        base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode(),
        base64.urlsafe_b64encode(b'{"sub":"1234567890","name":"Test"}').rstrip(b"=").decode(),
        fake_token("", 43, URLSAFE),
    ]
)
KEY_BODY = fake_token("", 64, B64)
# One sample per kind in stm's scanner table (a new kind fails the test until it has one).
SECRET_SAMPLES = {
    "GitHub token": fake_token("ghp_", 36),
    "AWS access key id": fake_token("AKIA", 16, string.ascii_uppercase + string.digits),
    "AWS secret access key": "aws_secret_access_key = " + fake_token("", 40, B64),
    "OpenAI-style API key": fake_token("sk-proj-", 32, URLSAFE),
    "Slack token": fake_token("xoxb-", 24),
    "Slack webhook": "https://hooks.slack.com/services/"
    + fake_token("T", 8, string.ascii_uppercase)
    + "/"
    + fake_token("B", 8, string.ascii_uppercase)
    + "/"
    + fake_token("", 24),
    "GitLab token": fake_token("glpat-", 20, URLSAFE),
    "Google API key": fake_token("AIza", 35, URLSAFE),
    "Stripe key": fake_token("sk_live_", 24),
    "npm token": fake_token("npm_", 36),
    "PyPI token": "pypi-AgEIcHlwaS5vcmc" + fake_token("", 60, URLSAFE),
    "Hugging Face token": fake_token("hf_", 34, string.ascii_letters),
    "JSON Web Token": JWT,
    "URL with a password": "https://deploy:" + fake_token("", 14) + "@git.example.com/x.git",
    "private key block": "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    + KEY_BODY
    + "\n-----END OPENSSH PRIVATE KEY-----",
    "Discord webhook": "https://discord.com/api/webhooks/1234567890/" + fake_token("", 40, URLSAFE),
    "Google OAuth token": fake_token("ya29.", 40, URLSAFE),
    "SendGrid API key": fake_token("SG.", 22, URLSAFE) + fake_token(".", 43, URLSAFE),
    "Docker access token": fake_token("dckr_pat_", 27, URLSAFE),
    "PuTTY private key": "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\n"
    + "Private-Lines: 1\n"
    + KEY_BODY
    + "\nPrivate-MAC: "
    + fake_token("", 64, "0123456789abcdef"),
    "authorization header": "Bearer " + fake_token("", 24) + "9",
    "password argument": "mysql -p" + fake_token("", 16) + "9",
    "user and password argument": "-u deploy:" + fake_token("", 16),
    "credential": "PGPASSWORD=" + fake_token("", 16),
}


def test_every_scanner_kind_has_a_sample_the_scanner_finds():
    assert set(SECRET_SAMPLES) == {kind for kind, _, _ in stm.SECRET_PATTERNS}
    for kind, sample in SECRET_SAMPLES.items():
        assert kind in {found for found, _, _ in stm.find_secrets(sample)}, kind


@pytest.mark.parametrize("kind", sorted(SECRET_SAMPLES))
def test_each_secret_kind_is_redacted_in_every_field(tmp_path, cwd, kind):
    secret = SECRET_SAMPLES[kind]
    c, x = Claude(cwd), Codex(cwd)
    asked = [{"question": f"Use {secret}?", "options": [{"label": secret}]}]
    claude = [
        # what the person said in other shapes, and a question left open (issue 36)
        c.slash("/x", f"use {secret}"),
        c.queued(f"also rotate {secret}"),
        c.call("q1", "AskUserQuestion", questions=asked),
        c.user(f"deploy with {secret} please"),
        c.call("t1", "TodoWrite", todos=[{"content": f"rotate {secret}", "status": "pending"}]),
        c.call("w1", "Write", file_path=f"{cwd}/{secret}", content=""),
        c.call("b1", "Bash", command=f"curl -H 'token: {secret}' https://example.com"),
        c.result("b1", f"Exit code 22\ndenied for {secret}", is_error=True),
        c.say(f"I used {secret} for that"),
    ]
    codex = [
        x.meta(),
        x.message("user", f"deploy with {secret} please"),
        x.call("p1", "update_plan", plan=[{"step": f"rotate {secret}", "status": "pending"}]),
        x.call("s1", "shell_command", command=f"login {secret}"),
        x.output("s1", f"Exit code: 1\nOutput:\nbad {secret}"),
        x.message("assistant", f"I used {secret} for that"),
    ]
    marker = f"[redacted: {kind}]"
    for name, entries in (("claude", claude), ("codex", codex)):
        result = stm.read_transcript(write_jsonl(tmp_path / f"{name}.jsonl", entries))
        shown = json.dumps(result.as_dict())
        assert result.client == name
        for part in {secret, *secret.split()} - {"=", "aws_secret_access_key"}:
            if len(part) >= 8:
                assert part not in shown, (name, part)
        assert KEY_BODY not in shown
        assert marker in result.request and marker in result.last_message
        assert marker in result.plan[0][0] and marker in result.failures[0][0]
        assert marker in result.failures[0][1]
        if name == "claude":
            assert len(result.requests) == 3 and all(marker in r for r in result.requests)
            assert marker in result.question


def test_private_blocks_never_appear(tmp_path, cwd):
    c = Claude(cwd)
    entries = [
        c.user("deploy <private>the password is hunter2</private> to staging"),
        c.call(
            "t1",
            "TodoWrite",
            todos=[{"content": "a <PRIVATE>\nhunter2\n</Private>b", "status": "pending"}],
        ),
        c.call("b1", "Bash", command="echo ok <private>hunter2"),
        c.result("b1", "Exit code 1\n<private>hunter2</private>failed", is_error=True),
        c.say(
            "Done. <private>\nhunter2 is the\npassword\n</private> Next: tests. <private>hunter2"
        ),
    ]
    result = stm.read_transcript(write_jsonl(tmp_path / "s.jsonl", entries))
    assert "hunter2" not in json.dumps(result.as_dict())
    assert result.request == "deploy to staging"
    assert result.plan == [("a b", "pending")]
    assert result.failures == [("echo ok", "failed")]
    assert result.last_message == "Done. Next: tests."


def test_a_secret_cut_by_the_redaction_window_leaves_nothing_of_itself():
    token = fake_token("ghp_", 36)
    text = " " * (5 + stm.REDACT_MARGIN) + token + " tail"
    for cut in range(5, 40):
        shown = stm.safe_line(text[cut:], 10)
        assert "ghp_" not in shown
    assert stm.safe_line("x " * 10 + "last", 100).endswith(" last")  # not cut: kept


# ---- find_project_transcript ----------------------------------------------------------------


def aged(path: str, seconds: float) -> str:
    moment = time.time() - seconds
    os.utime(path, (moment, moment))
    return path


def test_find_project_transcript_picks_the_newest_that_names_the_folder(tmp_path, cwd):
    folder = tmp_path / "projects"
    folder.mkdir()
    mine, other = Claude(cwd), Claude(str(tmp_path / "other-project"))
    old = aged(write_jsonl(folder / "old.jsonl", [mine.user("a")]), 300)
    codex = aged(write_jsonl(folder / "codex.jsonl", [Codex(cwd).meta()]), 200)
    aged(write_jsonl(folder / "others.jsonl", [other.user("b")]), 10)
    current = aged(write_jsonl(folder / "current.jsonl", [mine.user("c")]), 0)
    aged(write_jsonl(folder / "notes.txt", [mine.user("d")]), 0)
    os.symlink(old, folder / "link.jsonl")
    if hasattr(os, "mkfifo"):
        os.mkfifo(folder / "fifo.jsonl")
    find = stm.find_project_transcript
    assert find(str(folder), cwd, exclude=[current]) == codex
    assert find(str(folder), cwd + "/", exclude=[current, codex]) == old
    assert find(str(folder), cwd) == current
    assert find(str(folder), cwd, exclude=[current], limit=1) is None  # only others.jsonl probed
    assert find(str(folder), str(tmp_path / "nowhere")) is None
    assert find(str(tmp_path / "missing"), cwd) is None


def test_find_project_transcript_looks_at_both_ends_of_a_long_file(tmp_path, cwd):
    folder = tmp_path / "sessions"
    folder.mkdir()
    x = Codex(cwd)
    meta = x.meta()
    meta["payload"]["cwd"] = "/somewhere/else"
    meta["payload"]["instructions"] = "i" * (2 * stm.TRANSCRIPT_PROBE_BYTES)
    filler = [x.message("assistant", "f" * 1000) for _ in range(200)]
    path = write_jsonl(folder / "rollout.jsonl", [meta, *filler, x.turn()])
    assert stm.find_project_transcript(str(folder), cwd) == path
    write_jsonl(folder / "rollout.jsonl", [meta, x.turn(), *filler])  # cwd in the middle
    assert stm.find_project_transcript(str(folder), cwd) is None


# ---- git_state --------------------------------------------------------------------------------

# git with an identity and no signing of its own, whatever the runner's git config says: stdout.
git = functools.partial(
    git_out,
    config={"user.name": "Tester", "user.email": "t@example.com", "commit.gpgsign": "false"},
)


@pytest.fixture
def no_parent_repo(tmp_path, monkeypatch):
    """git must not find a repository above tmp_path (a checkout holding the temp folder)."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)


@needs_git
def test_git_state_in_a_repository(tmp_path, no_parent_repo):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "symbolic-ref", "HEAD", "refs/heads/trunk")
    fresh = stm.git_state(str(repo), since=time.time() - 60)
    assert fresh == stm.GitState(branch="trunk", head="", changed=[], changed_total=0, commits=[])
    (repo / "a.txt").write_text("one\n")
    (repo / "b.txt").write_text("one\n")
    git(repo, "add", "a.txt", "b.txt")
    git(repo, "commit", "-q", "-m", "first commit")
    git(repo, "mv", "b.txt", "c.txt")
    (repo / "a.txt").write_text("two\n")
    (repo / "new file.txt").write_text("x\n")
    state = stm.git_state(str(repo), since=time.time() - 3600)
    head = git(repo, "rev-parse", "HEAD").strip()
    assert state.branch == "trunk" and state.head == head[:7]
    assert state.changed == ["a.txt", "c.txt", "new file.txt"] and state.changed_total == 3
    assert state.commits == [f"{head[:7]} first commit"]
    assert stm.git_state(str(repo), since=time.time() + 3600).commits == []
    assert stm.git_state(str(repo)).commits == []
    bounded = stm.git_state(str(repo), max_files=1)
    assert bounded.changed == ["a.txt"] and bounded.changed_total == 3
    git(repo, "checkout", "-q", "--detach")
    assert stm.git_state(str(repo), since=float("nan")).branch == ""


@needs_git
def test_git_state_outside_a_repository_or_without_git(tmp_path, no_parent_repo, monkeypatch):
    plain = tmp_path / "plain"
    plain.mkdir()
    assert stm.git_state(str(plain)) is None
    assert stm.git_state(str(tmp_path / "missing")) is None
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    assert stm.git_state(str(repo)) is not None
    monkeypatch.setenv("PATH", str(plain))  # no git on the PATH
    assert stm.git_state(str(repo)) is None


# ---- a capture that continues from the last one -----------------------------------------------
#
# spec/capture.md, "A capture continues from the last one": the lines written since the
# last read, fed to the reader that read kept, give what one read of the whole gives.

WHOLE = (stm.TRANSCRIPT_TAIL_BYTES, 0)


def line_ends(data: bytes) -> list[int]:
    return [at + 1 for at, byte in enumerate(data) if byte == 0x0A]


class Resumes:
    """Counts what continuing reads did: how many continued (resumed_reader gave a
    reader) and how many lines the readers were fed."""

    def __init__(self, monkeypatch):
        self.continued = self.fell_back = self.fed = 0
        real_resumed, real_feed = stm.resumed_reader, stm.TranscriptReader.feed

        def resumed(*args):
            found = real_resumed(*args)
            self.continued += found is not None
            self.fell_back += found is None
            return found

        def feed(reader, entry):
            self.fed += 1
            return real_feed(reader, entry)

        monkeypatch.setattr(stm, "resumed_reader", resumed)
        monkeypatch.setattr(stm.TranscriptReader, "feed", feed)


def read_on(path, since, window=WHOLE, root=None):
    most, head = window
    return stm.read_transcript_from(str(path), since, max_bytes=most, head_bytes=head, root=root)


def property_transcripts(tmp_path) -> list[tuple[bytes, list[int]]]:
    """The corpus, cut at every line's end, and 300 seeded random sessions of both clients,
    each at five of its lines' ends: (the transcript's bytes, the cuts)."""
    from transcripts import CORPUS, random_transcript

    cases = []
    for _, build in CORPUS.values():
        entries, _ = build(str(tmp_path))
        data = "".join(json.dumps(entry) + "\n" for entry in entries).encode()
        cases.append((data, line_ends(data)))
    rng = __import__("random").Random(3709)
    for _ in range(300):
        data = random_transcript(rng, str(tmp_path), rng.randint(1, 60))
        ends = line_ends(data)
        cases.append((data, sorted(rng.sample(ends, min(5, len(ends))))))
    return cases


def secret_heavy_session(cwd: str):
    """A session whose texts hold what redaction drops: tokens, a `<private>` span over a
    plan's steps, a last message whose private span runs past what a read shows, task
    subjects and todo texts with tokens (and a token as an object's key)."""
    from transcripts import Claude

    token = "ghp_" + "Ab3" * 12
    c = Claude(cwd, "5ec2e7aa-2222-4000-8000-000000000002")
    plan = "- step one <private>my notes\n- step two hidden\n- secret-step</private> three"
    long_private = "short text <private>" + "y" * 4370 + "</private> after the private part"
    return token, [
        c.user(f"ship it with {token}"),
        c.call("pm", "ExitPlanMode", plan=plan),
        c.result("pm", "approved"),
        c.call("t1", "TodoWrite", todos=[{"content": f"rotate {token}", "status": "pending"}]),
        c.result("t1", "ok"),
        c.call("k1", "TaskCreate", subject=f"revoke {token}", extra={token: 1}),
        c.say(long_private),
        c.call("t2", "TodoWrite", todos=[{"content": f"audit {token}", "status": "pending"}]),
    ]


def test_what_redaction_drops_never_reaches_the_plan_or_the_kept_state(tmp_path):
    """A `<private>` span over an approved plan's steps is dropped whole; the state kept
    between reads holds no token (keys included, and none cut in half at the end of a
    long message); and a read continued from it says what one read of the whole says."""
    token, entries = secret_heavy_session(str(tmp_path))
    path = tmp_path / "t.jsonl"
    data = "".join(json.dumps(e) + "\n" for e in entries).encode()
    path.write_bytes(data)
    whole, whole_state = read_on(path, None)
    texts = [text for text, _ in whole.plan]
    assert not any("hidden" in t or "secret-step" in t or "notes" in t for t in texts), texts
    assert token not in repr(whole) and token[:12] not in whole_state, whole_state
    assert "my notes" not in whole_state and "y" * 50 not in whole_state
    cuts = [n + 1 for n in range(len(data)) if data[n : n + 1] == b"\n"][:-1]
    for cut in cuts:
        path.write_bytes(data[:cut])
        state = read_on(path, None)[1]
        assert state is None or (token[:12] not in state and "my notes" not in state), cut
        path.write_bytes(data)
        if state is not None:
            continued, next_state = read_on(path, state)
            assert continued == whole, cut
            assert next_state == whole_state, cut


def test_a_kept_state_beyond_a_read_s_bounds_is_not_continued(tmp_path):
    """A hand-made state holding more than any read keeps (hundreds of messages, a count
    of 300 digits) is not continued from: the window is read."""
    from transcripts import Claude

    c = Claude(str(tmp_path))
    path = tmp_path / "t.jsonl"
    lines = [c.user("first"), c.say("done")]
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    state = json.loads(read_on(path, None)[1])
    for key, value in (("requests", ["x"] * 600), ("requests_omitted", 10**300)):
        forged = json.loads(json.dumps(state))
        forged["reader"][key] = value
        with path.open("a") as f:
            f.write(json.dumps(c.user("second")) + "\n")
        continued, _ = read_on(path, json.dumps(forged))
        assert continued == read_on(path, None)[0], key
        assert len(continued.requests) <= stm.REQUESTS_FIRST + stm.REQUESTS_LAST


def test_redaction_of_a_near_miss_token_ends(tmp_path):
    """A run of lowercase letters then a digit after a secret's name (`API_TOKEN=abc…1`)
    once split its letters millions of ways in SECRET_WORDS_RE: a hook hung on it. In a
    process of its own, with a bound that only a hang reaches."""
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import stm\n"
        "for n in (22, 40, 400):\n"
        "    stm.redact('export API_TOKEN=' + 'a' * n + '1')\n"
        "    stm.redact('Authorization: Bearer ' + 'abcdefghijklmnopqrstuvwxyz' * 4 + '0123')\n"
        "print('done')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(ROOT)], capture_output=True, text=True, timeout=120
    )
    assert done.stdout == "done\n", done.stderr


def test_a_continued_read_gives_exactly_what_one_read_of_the_whole_gives(tmp_path, monkeypatch):
    """The property: a transcript that fits in the window, read up to any line's end and
    then continued over the rest, reads as one read of it all — the Transcript (so the
    captured record) and the state a next read would continue from — and the continued
    read is fed only the lines after the cut."""
    path = tmp_path / "t.jsonl"
    resumes = Resumes(monkeypatch)
    kept = tried = 0
    for data, cuts in property_transcripts(tmp_path):
        path.write_bytes(data)
        whole, whole_state = read_on(path, None)
        for cut in cuts:
            tried += 1
            path.write_bytes(data[:cut])
            state = read_on(path, None)[1]
            if state is None:
                continue  # no entry marked the prefix's end: nothing to continue from
            kept += 1
            before, resumes.fed = resumes.continued, 0
            path.write_bytes(data)
            continued, next_state = read_on(path, state)
            assert resumes.continued == before + 1, (data[:cut][-300:], state)
            assert resumes.fed <= data[cut:].count(b"\n")  # only what was written since
            assert continued == whole, (cut, data[:cut][-200:])
            assert next_state == whole_state
            # and on again with nothing new: the same
            assert read_on(path, next_state)[0] == whole
    assert kept > 0.8 * tried and resumes.fell_back == 0


def within_limits(transcript) -> None:
    """A captured record of `transcript` holds what CAPTURE_FIELDS allows, no more."""
    captured = stm.captured_record(transcript, None, client="claude", session="s", event="x")
    for field in stm.CAPTURE_FIELDS:
        value = captured.get(field.name)
        items = value if isinstance(value, list) else [value]
        if field.count:
            assert len(items) <= field.count, field.name
        texts = [i["text"] if isinstance(i, dict) else i for i in items]
        if field.limit:
            assert all(len(text) <= field.limit for text in texts if text), field.name
    assert len(transcript.requests) <= stm.REQUESTS_FIRST + stm.REQUESTS_LAST
    assert captured["requests_omitted"] >= -1 if "requests_omitted" in captured else True
    assert len(transcript.files) <= stm.FILES_MAX and len(transcript.failures) <= stm.FAILURES_MAX


def test_a_read_continued_past_the_window_stays_within_the_fields_limits(tmp_path, monkeypatch):
    """Past the window a continued read remembers what a read of the window would have
    dropped (the lines before it): its capture is held to the same limits and counts,
    and its state to READER_STATE_MAX, step after step."""
    from transcripts import random_transcript

    path, window = tmp_path / "t.jsonl", (2048, 512)
    resumes = Resumes(monkeypatch)
    rng = __import__("random").Random(3710)
    for _ in range(60):
        data = random_transcript(rng, str(tmp_path), rng.randint(40, 120))
        state, at = None, 0
        for end in line_ends(data):
            if end - at < 1500 and end != len(data):
                continue  # grow by a few lines at a time, each step within the window
            path.write_bytes(data[:end])
            transcript, state = read_on(path, state, window)
            within_limits(transcript)
            assert state is None or len(state) <= stm.READER_STATE_MAX
            at = end
    assert resumes.continued > 500


def test_a_continued_read_counts_the_messages_a_window_would_not(tmp_path):
    """What differs past the window, as spec/capture.md says: a read continued from the
    transcript's start knows the person's first messages and how many came between; a
    read of the window alone reads the first ones from the head, and -1 (not counted)."""
    c = Claude(str(tmp_path))
    first = [c.user(f"task {n}") for n in range(3)]
    path = tmp_path / "t.jsonl"
    write_jsonl(path, first)
    _, state = read_on(path, None, (4096, 1024))
    later = [c.user(f"then {n} " + "x" * 200) for n in range(40)]
    step = []
    for entry in later:
        step.append(entry)
        write_jsonl(path, first + step)
        if len(step) % 8 == 0:  # 8 messages of ~800 bytes: within the window each time
            continued, state = read_on(path, state, (4096, 1024))
    windowed, _ = read_on(path, None, (4096, 1024))
    assert continued.requests[:2] == windowed.requests[:2] == ["task 0", "task 1"]
    assert continued.requests[2:] == windowed.requests[2:]
    assert continued.requests_omitted == 43 - 7 and windowed.requests_omitted == -1


# Each way the state a read kept no longer holds for the file: the window is read.


def fallback_case(tmp_path, change, window=WHOLE):
    """A corpus session read to its 30th line's end, the file then changed by
    `change(data, cut) -> bytes`, read on with the state kept: (the read, a read of the
    window alone)."""
    from transcripts import long_claude_tasks_session

    entries, _ = long_claude_tasks_session(str(tmp_path))
    data = "".join(json.dumps(entry) + "\n" for entry in entries).encode()
    cut = line_ends(data)[30]
    path = tmp_path / "t.jsonl"
    path.write_bytes(data[:cut])
    _, state = read_on(path, None, window)
    assert state is not None
    path.write_bytes(change(data, cut))
    return read_on(path, state, window)[0], read_on(path, None, window)[0]


def other_uuid(data: bytes, cut: int) -> bytes:
    """The bytes with the uuid of the entry that ends the first `cut` changed in place."""
    start = data.rindex(b'"uuid": "', 0, cut) + len(b'"uuid": "')
    return data[:start] + b"X" + data[start + 1 :]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda data, cut: data[: cut - 40], id="truncated below the size read"),
        pytest.param(lambda data, cut: data.replace(b"uuid-", b"uuid-9"), id="rewritten"),
        pytest.param(
            lambda data, cut: data.replace(b"uuid-00", b"uuid-99"), id="rewritten, same size"
        ),
        pytest.param(lambda data, cut: b" " + data, id="rewritten: the size ends no line"),
        pytest.param(other_uuid, id="another entry id at the mark"),
        pytest.param(lambda data, cut: data[: cut - 1] + b" " + data[cut:], id="a cut line"),
    ],
)
def test_a_file_that_no_longer_holds_what_was_read_is_read_whole(tmp_path, monkeypatch, change):
    resumes = Resumes(monkeypatch)
    found, window = fallback_case(tmp_path, change)
    assert found == window and resumes.continued == 0 and resumes.fell_back == 1


def test_more_written_since_than_the_window_holds_reads_the_window(tmp_path, monkeypatch):
    resumes = Resumes(monkeypatch)
    found, window = fallback_case(tmp_path, lambda data, cut: data, window=(2048, 0))
    assert found == window and resumes.continued == 0 and resumes.fell_back == 1
    state = json.loads(read_on(tmp_path / "t.jsonl", None, (2048, 0))[1])
    assert state["size"] > 2048 + json.loads(window_state_of_cut(tmp_path))["size"]


def window_state_of_cut(tmp_path) -> str:
    """The state fallback_case's first read kept (its transcript cut at its 30th line)."""
    from transcripts import long_claude_tasks_session

    entries, _ = long_claude_tasks_session(str(tmp_path))
    data = "".join(json.dumps(entry) + "\n" for entry in entries).encode()
    path = tmp_path / "cut.jsonl"
    path.write_bytes(data[: line_ends(data)[30]])
    return read_on(path, None, (2048, 0))[1]


def test_with_no_state_kept_the_window_is_read(tmp_path, monkeypatch):
    resumes = Resumes(monkeypatch)
    c = Claude(str(tmp_path))
    path = write_jsonl(tmp_path / "t.jsonl", [c.user("fix it"), c.say("done")])
    found, state = read_on(path, None)
    assert resumes.continued == resumes.fell_back == 0 and resumes.fed == 2  # every line
    assert found == stm.read_transcript(path) and state is not None


def forged_states(state: str, path: str, size: int) -> list:
    """States a hand or a hostile clone could write into the local record."""
    real = json.loads(state)
    forged = ["", "null", "[]", "{", '"text"', "[" * 100 + "]" * 100, "1e999", state[:-1]]
    changes = [
        {"transcript": "/etc/passwd"},
        {"transcript": path + "x"},
        {"size": size + 1},
        {"size": -1},
        {"size": True},
        {"size": 10**30},
        {"size": str(real["size"])},
        {"mark": real["size"]},
        {"mark": -5},
        {"mark": 0},
        {"mark": 1.5},
        {"head": "x"},
        {"head": {"client": 1, "requests": []}},
        {"reader": None},
        {"reader": []},
    ]
    for key, value in real["reader"].items():
        for wrong in (None, 7, "x", [1], {"a": 1}, [[None]]):
            if wrong != value:
                changes.append({"reader": {**real["reader"], key: wrong}})
    changes.append({"reader": {**real["reader"], "requests_omitted": -2}})
    changes.append({"reader": {k: v for k, v in real["reader"].items() if k != "files"}})
    return forged + [json.dumps({**real, **change}) for change in changes]


def test_a_forged_state_never_makes_a_read_go_elsewhere_or_fail(tmp_path, monkeypatch):
    """The state comes from a local file, which a hand or a hostile clone can write: data,
    checked against the file before any of it is used. A state that does not hold reads
    the window, whatever its offsets or types; one that holds only changes what is said,
    never where stm reads (the read never leaves [its mark, the file's end])."""
    from transcripts import long_claude_tasks_session

    entries, _ = long_claude_tasks_session(str(tmp_path))
    data = "".join(json.dumps(entry) + "\n" for entry in entries).encode()
    path = tmp_path / "t.jsonl"
    cut = line_ends(data)[30]
    path.write_bytes(data[:cut])
    _, state = read_on(path, None)
    path.write_bytes(data)
    whole = read_on(path, None)[0]
    spans = []
    real_span = stm.read_span
    monkeypatch.setattr(
        stm, "read_span", lambda fd, at, n: spans.append((at, n)) or real_span(fd, at, n)
    )
    for forged in forged_states(state, str(path), len(data)):
        spans.clear()
        found, _ = read_on(path, forged)
        assert all(at >= 0 and at + n <= len(data) for at, n in spans)
        # One that held (its texts, or its client, changed) is read on from its mark:
        # what it says may differ, never the size read to nor where.
        assert found.position.partition(":")[0] == str(len(data))
        assert found == whole or len(spans) == 1


def test_spec_capture_states_the_kept_states_bounds():
    """The bounds spec/capture.md's "A capture continues from the last one" names."""
    text = " ".join((Path(stm.__file__).parent / "spec" / "capture.md").read_text().split())
    assert stm.READER_TEXT_KEPT == 4597 and "kept to 4,597 characters" in text
    assert stm.READER_STATE_MAX == 32 * 1024 and "at most 32 KiB" in text
    assert (
        stm.HOOK_READERS_MAX == 2 * stm.HOOK_SESSIONS_MAX == 16 and "(the 8 newest of each" in text
    )
    assert stm.HOOK_RECORD_MAX == 256 * 1024 and "outgrow its 256 KiB" in text


def test_a_read_of_the_window_is_continued_with_the_first_messages_of_its_head(
    tmp_path, monkeypatch
):
    """A transcript longer than the window: its read keeps the first messages it read at
    the file's start with the state, and a read continued from it puts them first, as a
    read of the window does (how many came between is not known: -1)."""
    c = Claude(str(tmp_path))
    entries = [c.user("set up the task"), c.user("and the docs")]
    entries += [c.say("working " + "x" * 300) for _ in range(30)]
    path = write_jsonl(tmp_path / "t.jsonl", entries)
    window = (4096, 1024)
    _, state = read_on(path, None, window)
    assert json.loads(state)["head"]["requests"] == ["set up the task", "and the docs"]
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(c.user("now ship it")) + "\n")
    resumes = Resumes(monkeypatch)
    continued, _ = read_on(path, state, window)
    assert resumes.continued == 1 and resumes.fed == 1
    windowed, _ = read_on(path, None, window)
    assert (
        continued.requests
        == windowed.requests
        == ["set up the task", "and the docs", "now ship it"]
    )
    assert continued.requests_omitted == windowed.requests_omitted == -1
    assert continued.request == "now ship it" and continued.position == windowed.position
