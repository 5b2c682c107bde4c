"""Transcript builders for tests, written from the agent clients' documented formats
(Claude Code's project JSONL, Codex's rollout), never from stm's reader, and in the shapes
real transcripts carry (Claude Code 2.0-2.1, Codex 0.58-0.135, as the public fixtures of
transcript parsers show them: queued messages, slash commands, task notifications,
progress and snapshot lines, pasted images). Every line here is our own."""

from __future__ import annotations

import itertools
import json
import time


class Clock:
    """Timestamps counting up from an hour ago: no calendar date that ages."""

    def __init__(self):
        self.start = time.time() - 3600
        self.ticks = itertools.count()

    def __call__(self) -> str:
        moment = self.start + next(self.ticks)
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment)) + ".250Z"


def write_jsonl(path, entries, tail: str = "") -> str:
    """Entries one per line; `tail` is written after the last newline as it is."""
    text = "".join(json.dumps(entry) + "\n" for entry in entries) + tail
    path.write_text(text, encoding="utf-8")
    return str(path)


class Claude:
    """Claude Code transcript lines: {type, uuid, parentUuid, sessionId, timestamp, cwd,
    version, gitBranch, message {role, content}}; tool calls are `tool_use` blocks of an
    assistant line, their results `tool_result` blocks of the next user line."""

    def __init__(self, cwd: str, session: str = "5b1e7c9a-0000-4000-8000-000000000001"):
        self.cwd, self.session, self.clock = cwd, session, Clock()
        self.count = itertools.count(1)
        self.parent = None

    def entry(self, kind: str, content, **extra) -> dict:
        uuid = f"uuid-{next(self.count):04d}"
        entry = {
            "type": kind,
            "uuid": uuid,
            "parentUuid": self.parent,
            "sessionId": self.session,
            "timestamp": self.clock(),
            "cwd": self.cwd,
            "version": "2.1.0",
            "gitBranch": "main",
            "isSidechain": False,
            "userType": "external",
            "message": {"role": kind, "content": content},
            **extra,
        }
        self.parent = uuid
        return entry

    def user(self, text, **extra) -> dict:
        return self.entry("user", text, **extra)

    def say(self, text: str) -> dict:
        return self.entry("assistant", [{"type": "text", "text": text}])

    def call(self, call_id: str, name: str, **args) -> dict:
        return self.calls((call_id, name, args))

    def calls(self, *calls) -> dict:
        blocks = [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
        return self.entry("assistant", blocks)

    def result(self, call_id: str, content, *, is_error: bool = False, detail=None) -> dict:
        block = {"type": "tool_result", "tool_use_id": call_id, "content": content}
        if is_error:
            block["is_error"] = True
        extra = {"toolUseResult": detail} if detail is not None else {}
        return self.entry("user", [block], **extra)

    def compact(self) -> dict:
        entry = self.entry("system", None, subtype="compact_boundary")
        del entry["message"]
        entry["content"] = "Conversation compacted"
        entry["compactMetadata"] = {"trigger": "auto", "preTokens": 155000}
        entry["logicalParentUuid"] = entry.pop("parentUuid")
        entry["parentUuid"] = None
        return entry

    def system(self, subtype: str, **fields) -> dict:
        """A system line that is no one's message: stop_hook_summary, turn_duration,
        local_command (a slash command's own record)."""
        entry = self.entry("system", None, subtype=subtype, level="info")
        del entry["message"]
        return {**entry, **fields}

    def compact_summary(self, text: str) -> dict:
        """The summary the client writes after compacting, as a user line."""
        return self.user(text, isCompactSummary=True, isVisibleInTranscriptOnly=True)

    def queued(self, text: str) -> dict:
        """A message the person typed while the agent worked (2.1): only here."""
        return {
            "type": "queue-operation",
            "operation": "enqueue",
            "timestamp": self.clock(),
            "sessionId": self.session,
            "content": text,
        }

    def folded(self, text: str, mode: str = "prompt", origin: str = "human") -> dict:
        """A queued message folded into the running turn (2.1): an attachment line."""
        item = {"type": "queued_command", "commandMode": mode, "origin": {"kind": origin}}
        entry = self.entry("attachment", None, attachment={**item, "prompt": text})
        del entry["message"]
        return entry

    def removed(self) -> dict:
        return {**self.dequeued(), "operation": "remove", "reason": "absorbed_mid_turn"}

    def dequeued(self) -> dict:
        return {
            "type": "queue-operation",
            "operation": "dequeue",
            "timestamp": self.clock(),
            "sessionId": self.session,
        }

    def slash(self, name: str, args: str = "") -> dict:
        """A slash command the person typed: its name and arguments in wrappers."""
        text = (
            f"<command-message>{name.lstrip('/')} is running…</command-message>\n"
            f"<command-name>{name}</command-name>\n"
            + (f"<command-args>{args}</command-args>" if args else "<command-args></command-args>")
        )
        return self.user(text)

    def expanded(self, text: str) -> dict:
        """The prompt a custom slash command expands to (a meta line: the client's)."""
        return self.user([{"type": "text", "text": text}], isMeta=True)

    def notification(self, task: str, status: str, summary: str) -> dict:
        """A background task ended: the client tells the agent in a user line."""
        output = f"/tmp/claude/tasks/{task}.output"
        text = (
            f"<task-notification>\n<task-id>{task}</task-id>\n<output-file>{output}"
            f"</output-file>\n<status>{status}</status>\n<summary>{summary}</summary>\n"
            f"</task-notification>\nRead the output file to retrieve the result: {output}"
        )
        return self.user(text)

    def interrupted(self, for_tool: bool = False) -> dict:
        note = "[Request interrupted by user" + (" for tool use]" if for_tool else "]")
        return self.user([{"type": "text", "text": note}])

    def progress(self, kind: str, **data) -> dict:
        """A progress line (hook_progress, bash_progress, agent_progress: a subagent's
        message nested under data.message)."""
        entry = self.entry("progress", None, data={"type": kind, **data}, toolUseID="toolu_p")
        del entry["message"]
        return entry

    def snapshot(self, *paths: str) -> dict:
        """A file-history-snapshot line: the files the session had touched so far."""
        backups = {p: {"backupFileName": None, "version": 1} for p in paths}
        message_id = f"snap-{next(self.count):04d}"
        return {
            "type": "file-history-snapshot",
            "messageId": message_id,
            "snapshot": {"messageId": message_id, "trackedFileBackups": backups},
            "isSnapshotUpdate": False,
        }

    def summary(self, text: str) -> dict:
        return {"type": "summary", "summary": text, "leafUuid": self.parent}

    def sidechain(self, entry: dict) -> dict:
        """The same line written by a subagent (Task): not the session's own."""
        return {**entry, "isSidechain": True, "agentId": "a1b2c3d"}

    def image_prompt(self, text: str, images: int, kb: int) -> dict:
        """A prompt with pasted screenshots: base64 blocks beside the person's text."""
        data = "iVBORw0KGgo" + "A" * (kb * 1024)
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png"}}
        blocks = [{**image, "source": {**image["source"], "data": data}} for _ in range(images)]
        return self.user([*blocks, {"type": "text", "text": text}])


class Codex:
    """Codex rollout lines: {timestamp, type, payload}; session_meta first, then
    response_item payloads (message, function_call, function_call_output,
    custom_tool_call, …), event_msg and turn_context."""

    def __init__(self, cwd: str, session: str = "0199a213-81c0-7800-8aa1-bbab2a035a53"):
        self.cwd, self.session, self.clock = cwd, session, Clock()

    def line(self, kind: str, payload: dict) -> dict:
        return {"timestamp": self.clock(), "type": kind, "payload": payload}

    def meta(self) -> dict:
        payload = {"id": self.session, "timestamp": self.clock(), "cwd": self.cwd}
        payload.update(originator="codex_cli_rs", cli_version="0.46.0", source="cli")
        return self.line("session_meta", {**payload, "instructions": None})

    def turn(self) -> dict:
        payload = {"cwd": self.cwd, "approval_policy": "on-request", "model": "gpt-5-codex"}
        return self.line("turn_context", payload)

    def message(self, role: str, text: str) -> dict:
        kind = "output_text" if role == "assistant" else "input_text"
        payload = {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}
        return self.line("response_item", payload)

    def event(self, kind: str, message: str) -> dict:
        return self.line("event_msg", {"type": kind, "message": message})

    def call(self, call_id: str, name: str, **args) -> dict:
        payload = {"type": "function_call", "name": name, "arguments": json.dumps(args)}
        return self.line("response_item", {**payload, "call_id": call_id})

    def custom_call(self, call_id: str, name: str, text: str) -> dict:
        payload = {"type": "custom_tool_call", "status": "completed", "name": name}
        return self.line("response_item", {**payload, "call_id": call_id, "input": text})

    def output(self, call_id: str, output, kind: str = "function_call_output") -> dict:
        return self.line("response_item", {"type": kind, "call_id": call_id, "output": output})

    def prompt(self, text: str) -> list:
        """A message the person typed, as Codex writes it: a user response_item and a
        user_message event, the same text twice."""
        return [self.message("user", text), self.event("user_message", text)]

    def developer(self, text: str) -> dict:
        payload = {"type": "message", "role": "developer"}
        payload["content"] = [{"type": "input_text", "text": text}]
        return self.line("response_item", payload)

    def task_complete(self, text: str) -> dict:
        payload = {"type": "task_complete", "turn_id": "t-1", "last_agent_message": text}
        return self.line("event_msg", payload)

    def aborted(self) -> dict:
        return self.line("event_msg", {"type": "turn_aborted", "reason": "interrupted"})

    def compacted(self, text: str) -> dict:
        return self.line("compacted", {"message": text, "replacement_history": []})


def exec_json(output: str, code: int) -> str:
    """A shell call's output in the structured form: JSON with metadata.exit_code."""
    return json.dumps({"output": output, "metadata": {"exit_code": code, "duration_seconds": 0.4}})


def exec_text(output: str, code: int) -> str:
    """A shell call's output in the text form newer versions write."""
    return f"Exit code: {code}\nWall time: 0.4 seconds\nOutput:\n{output}"


def patch(*headers: str) -> str:
    body = "".join(f"*** {header}\n+line\n" for header in headers)
    return f"*** Begin Patch\n{body}*** End Patch"


# ---- a corpus of long sessions in real transcripts' shapes ------------------------------------
#
# Each builder returns the transcript's lines and what a person reading it would write
# down: what they asked (oldest first), the plan with its states, the files, the failures
# still open at the end (command, error) and the ones fixed later, the last message, and
# text the client wrote for itself that must never show up as the person's.


def long_claude_tasks_session(cwd: str) -> tuple[list, dict]:
    """Claude Code 2.1: a task set first, a slash command with arguments, a message
    typed while the agent worked, task tools (one update refused), a background test run
    reported by a notification, a compaction, failures fixed later and one still open,
    and follow-ups to end on."""
    c = Claude(cwd, "5b1e7c9a-0000-4000-8000-0000000000a1")
    lines = [
        c.snapshot(),
        c.user("Implement spotter-gqc: the spot price fetcher with retries"),
        c.progress("hook_progress", hookEvent="UserPromptSubmit", hookName="bd prime"),
        c.call("c1", "TaskCreate", subject="Write the fetcher", description="d", activeForm="W"),
        c.result("c1", "Task #1 created successfully: Write the fetcher"),
        c.call("c2", "TaskCreate", subject="Add retries", description="d", activeForm="A"),
        c.result("c2", "Task #2 created successfully: Add retries"),
        c.call("c3", "TaskCreate", subject="Make mix test green", description="d", activeForm="M"),
        c.result("c3", "Task #3 created successfully: Make mix test green"),
        c.call("u1", "TaskUpdate", taskId="1", status="in_progress"),
        c.result("u1", "Updated task #1 status"),
        c.call("w1", "Write", file_path=f"{cwd}/lib/spotter/fetcher.ex", content="defmodule"),
        c.result("w1", "File created successfully"),
        c.snapshot("lib/spotter/fetcher.ex"),
        c.call("t1", "Task", description="Find retry helpers", prompt="look", subagent_type="x"),
        c.progress(
            "agent_progress",
            message={
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [{"type": "text", "text": "Find every retry helper"}],
                },
            },
        ),
        c.sidechain(c.user("Find every retry helper in lib/")),
        c.sidechain(
            c.call(
                "st",
                "TodoWrite",
                todos=[{"content": "subagent step", "status": "pending", "activeForm": "S"}],
            )
        ),
        c.result("t1", [{"type": "text", "text": "Found Retry.with_backoff/2"}]),
        c.queued("don't touch lib/spotter/core.ex"),
        c.call("b1", "Bash", command="mix test test/spotter", description="Run tests"),
        c.result(
            "b1",
            "Exit code 1\n  1) test fetch (FetcherTest)\n** (MatchError) no match of "
            "right hand side value: :error",
            is_error=True,
        ),
        c.folded("don't touch lib/spotter/core.ex"),
        c.removed(),
        c.say("A MatchError; fixing the fetcher."),
        c.system("stop_hook_summary", hookCount=1, hookInfos=[], preventedContinuation=False),
        c.system("turn_duration", durationMs=48000),
        c.slash("/x", "also add a credo check for the new module"),
        c.expanded("Run the project's x workflow: also add a credo check for the new module"),
        c.call(
            "e1", "Edit", file_path=f"{cwd}/lib/spotter/fetcher.ex", old_string="a", new_string="b"
        ),
        c.result("e1", "The file has been updated."),
        c.call("u2", "TaskUpdate", taskId="2", status="completed"),
        c.result(
            "u2", "<tool_use_error>Task 2 is blocked by task 1</tool_use_error>", is_error=True
        ),
        c.call("u3", "TaskUpdate", taskId="1", status="completed"),
        c.result("u3", "Updated task #1 status"),
        c.call("u4", "TaskUpdate", taskId="2", status="in_progress"),
        c.result("u4", "Updated task #2 status"),
        c.call("b2", "Bash", command="cd " + cwd + " && mix test test/spotter 2>&1 | tail -40"),
        c.result(
            "b2",
            "Exit code 1\n** (CompileError) lib/spotter/fetcher.ex:9: undefined function retry/1",
            is_error=True,
        ),
        c.slash("/compact", "and continue with the remaining tasks"),
        c.compact(),
        c.compact_summary(
            "This session is being continued from a previous conversation that "
            "ran out of context. Summary: implementing spotter-gqc ..."
        ),
        c.call("bg", "Bash", command="mix test", run_in_background=True),
        c.result(
            "bg",
            "Command running in background with ID: b7636e2. Output is being "
            "written to: /tmp/claude/tasks/b7636e2.output",
            detail={"backgroundTaskId": "b7636e2"},
        ),
        c.say("Running the whole suite in the background."),
        c.notification(
            "b7636e2", "failed", 'Background command "mix test" failed with exit code 1'
        ),
        c.call(
            "e2", "Edit", file_path=f"{cwd}/lib/spotter/retry.ex", old_string="a", new_string="b"
        ),
        c.result("e2", "The file has been updated."),
        c.call("b3", "Bash", command="mix test test/spotter"),
        c.result("b3", "Finished in 0.4 seconds\n12 tests, 0 failures"),
        c.call("b4", "Bash", command="mix test"),
        c.result("b4", "Finished in 3.1 seconds\n140 tests, 0 failures"),
        c.call("b5", "Bash", command="mix credo --strict lib/spotter"),
        c.result(
            "b5",
            "Exit code 8\nChecking 3 source files ...\n┃ [R] → Modules should have a "
            "@moduledoc tag.\n  lib/spotter/retry.ex:1:11",
            is_error=True,
        ),
        c.call("u5", "TaskUpdate", taskId="2", status="completed"),
        c.result("u5", "Updated task #2 status"),
        c.call("u6", "TaskUpdate", taskId="3", status="in_progress"),
        c.result("u6", "Updated task #3 status"),
        c.user("commit"),
        c.call(
            "g1",
            "Bash",
            command="git commit -am \"$(cat <<'EOF'\nfeat(spotter): fetcher "
            'with retries\n\nCloses spotter-gqc\nEOF\n)"',
        ),
        c.result("g1", "[main 3f2a1b0] feat(spotter): fetcher with retries"),
        c.user("did you push?"),
        c.call("g2", "Bash", command="git push"),
        c.result("g2", "To github.com:acme/spotter.git\n   1a2b3c4..3f2a1b0  main -> main"),
        c.say("Yes: pushed to main. Everything is pushed and clean except one credo warning."),
        c.system("turn_duration", durationMs=9000),
        c.summary("Spotter fetcher with retries"),
    ]
    person = {
        "asked": [
            "Implement spotter-gqc: the spot price fetcher with retries",
            "don't touch lib/spotter/core.ex",
            "/x also add a credo check for the new module",
            "/compact and continue with the remaining tasks",
            "commit",
            "did you push?",
        ],
        "plan": [
            ("Write the fetcher", "completed"),
            ("Add retries", "completed"),
            ("Make mix test green", "in_progress"),
        ],
        "files": ["lib/spotter/fetcher.ex", "lib/spotter/retry.ex"],
        "open": [("mix credo --strict lib/spotter", "Modules should have a @moduledoc tag")],
        "fixed": ["mix test"],
        "last": "Everything is pushed and clean except one credo warning.",
        "never": [
            "Read the output file",
            "Find every retry helper",
            "subagent step",
            "being continued",
            "Run the project's x workflow",
            "<command",
        ],
    }
    return lines, person


def claude_plan_mode_session(cwd: str) -> tuple[list, dict]:
    """Claude Code 2.1 without a task tool: the plan is the approved ExitPlanMode plan; a
    prompt with pasted screenshots; an interrupt and a follow-up; a question left open."""
    c = Claude(cwd, "5b1e7c9a-0000-4000-8000-0000000000b2")
    plan = (
        "# Plan: fix the mobile layout\n\n## Context\nThe footer overlaps.\n\n## Steps\n"
        "1. **Make the footer static** below 640px\n   - in app.css\n"
        "2. Move the cookie banner above it\n3. Check it at 375px in the preview\n"
    )
    lines = [
        c.image_prompt("The footer overlaps the form on phones, see the screenshots", 3, 415),
        c.call("m0", "EnterPlanMode"),
        c.result("m0", "Entered plan mode."),
        c.call("r1", "Read", file_path=f"{cwd}/assets/app.css"),
        c.result("r1", "     1\tbody { margin: 0 }"),
        c.call("p1", "ExitPlanMode", plan=plan),
        c.result("p1", "User has approved your plan. You can now start coding."),
        c.call("e1", "Edit", file_path=f"{cwd}/assets/app.css", old_string="a", new_string="b"),
        c.result("e1", "The file has been updated."),
        c.call("b1", "Bash", command="npx playwright test mobile"),
        c.result("b1", "[Request interrupted by user for tool use]", is_error=True),
        c.interrupted(for_tool=True),
        c.user("use the existing preview server on :4000 instead"),
        c.call("f1", "WebFetch", url="http://localhost:4000", prompt="footer position"),
        c.result("f1", "The footer sits below the form."),
        c.call("e2", "Edit", file_path=f"{cwd}/assets/banner.css", old_string="a", new_string="b"),
        c.result("e2", "The file has been updated."),
        c.call(
            "q1",
            "AskUserQuestion",
            questions=[
                {
                    "question": "Keep the banner dismissible on phones?",
                    "header": "Banner",
                    "multiSelect": False,
                    "options": [
                        {"label": "Yes", "description": "x"},
                        {"label": "No", "description": "y"},
                    ],
                }
            ],
        ),
    ]
    person = {
        "asked": [
            "The footer overlaps the form on phones, see the screenshots",
            "use the existing preview server on :4000 instead",
        ],
        "plan": [
            ("Make the footer static below 640px", "pending"),
            ("Move the cookie banner above it", "pending"),
            ("Check it at 375px in the preview", "pending"),
        ],
        "files": ["assets/app.css", "assets/banner.css"],
        "open": [],
        "fixed": ["npx playwright test mobile"],  # stopped by the person: not a failure
        "question": "Keep the banner dismissible on phones? (Yes / No)",
        "last": None,
        "never": ["[Request interrupted", "iVBORw0KGgo"],
    }
    return lines, person


def claude_todo_session(cwd: str) -> tuple[list, dict]:
    """Claude Code 2.0: TodoWrite, a subagent whose own todo list is not the session's,
    local command output, a caveat, and the person interrupting the last turn."""
    c = Claude(cwd, "5b1e7c9a-0000-4000-8000-0000000000c3")
    todos = [
        {"content": "Parse the CSV export", "status": "completed", "activeForm": "Parsing"},
        {"content": "Validate the rows", "status": "in_progress", "activeForm": "Validating"},
        {"content": "Write the importer tests", "status": "pending", "activeForm": "Writing"},
    ]
    lines = [
        c.user(
            "Caveat: The messages below were generated by the user while running local "
            "commands. DO NOT respond to these messages.",
            isMeta=True,
        ),
        c.user(
            "<command-name>/model</command-name>\n<command-message>model</command-message>"
            "\n<command-args></command-args>"
        ),
        c.user("<local-command-stdout>Set model to opus</local-command-stdout>"),
        c.user("Build the CSV importer for the billing export"),
        c.call("t1", "TodoWrite", todos=[{**t, "status": "pending"} for t in todos]),
        c.result("t1", "Todos have been modified successfully."),
        c.call("w1", "Write", file_path=f"{cwd}/billing/importer.py", content="x"),
        c.result("w1", "File created successfully"),
        c.call("s1", "Task", description="Survey", prompt="find fixtures", subagent_type="x"),
        c.sidechain(
            c.call(
                "s2",
                "TodoWrite",
                todos=[{"content": "look in tests/", "status": "in_progress", "activeForm": "L"}],
            )
        ),
        c.result("s1", "Fixtures are in tests/data/"),
        c.call("b1", "Bash", command="python -m pytest tests/test_importer.py -q"),
        c.result(
            "b1",
            "Exit code 1\nE   KeyError: 'amount'\nFAILED tests/test_importer.py::"
            "test_rows - KeyError: 'amount'\n1 failed",
            is_error=True,
        ),
        c.call("g1", "Bash", command="grep -rn 'amount_cents' billing/"),
        c.result("g1", "Exit code 1", is_error=True),
        c.call("t2", "TodoWrite", todos=todos),
        c.result("t2", "Todos have been modified successfully."),
        c.say("The amount column is named amount_cents in the export; renaming."),
        c.call(
            "e1", "Edit", file_path=f"{cwd}/billing/importer.py", old_string="a", new_string="b"
        ),
        c.result("e1", "[Request interrupted by user for tool use]", is_error=True),
        c.interrupted(for_tool=True),
    ]
    person = {
        "asked": ["Build the CSV importer for the billing export"],
        "plan": [(t["content"], t["status"]) for t in todos],
        "files": ["billing/importer.py"],
        "open": [("python -m pytest tests/test_importer.py -q", "KeyError: 'amount'")],
        "fixed": ["grep -rn"],
        "last": "The amount column is named amount_cents in the export; renaming.",
        "interrupted": True,
        "never": ["look in tests/", "Set model to opus", "Caveat", "/model"],
    }
    return lines, person


def long_codex_session(cwd: str) -> tuple[list, dict]:
    """Codex 0.1xx: instructions and environment context in user messages, each prompt
    written twice, update_plan, apply_patch as a freeform tool, a search finding nothing,
    a test failing then passing, a compaction, and task_complete's last message."""
    x = Codex(cwd, "0199a213-81c0-7800-8aa1-0000000000d4")
    plan1 = [
        {"step": "Add the --dry-run flag", "status": "in_progress"},
        {"step": "Thread it through sync", "status": "pending"},
        {"step": "Document it", "status": "pending"},
    ]
    plan2 = [
        {**plan1[0], "status": "completed"},
        {**plan1[1], "status": "completed"},
        {**plan1[2], "status": "in_progress"},
    ]
    lines = [
        x.meta(),
        x.developer("<permissions instructions>Filesystem sandboxing: workspace-write"),
        x.message(
            "user",
            "# AGENTS.md instructions for " + cwd + "\n\n<INSTRUCTIONS>Use "
            "cargo fmt.</INSTRUCTIONS>",
        ),
        x.message("user", f"<environment_context>\n  <cwd>{cwd}</cwd>\n</environment_context>"),
        x.turn(),
        *x.prompt("Add a --dry-run flag to `sync` that prints what it would copy"),
        x.line("event_msg", {"type": "token_count", "info": None}),
        x.call("p1", "update_plan", plan=plan1),
        x.output("p1", "Plan updated"),
        x.call("s1", "exec_command", cmd="rg -n dry_run src"),
        x.output("s1", exec_text("", 1)),
        x.custom_call(
            "a1", "apply_patch", patch("Update File: src/cli.rs", "Add File: src/sync/plan.rs")
        ),
        x.output(
            "a1",
            "Success. Updated the following files:\nM src/cli.rs",
            kind="custom_tool_call_output",
        ),
        x.call("t1", "shell_command", command="cargo test sync"),
        x.output(
            "t1",
            exec_text(
                "error[E0061]: this function takes 2 arguments but 1 "
                "argument was supplied\n --> src/sync/mod.rs:40:5",
                101,
            ),
        ),
        x.message("assistant", "sync() needs the flag passed through; fixing."),
        x.compacted("Summary of the work so far"),
        x.turn(),
        *x.prompt("also make it the default in CI"),
        x.custom_call(
            "a2",
            "apply_patch",
            patch("Update File: src/sync/mod.rs", "Update File: .github/workflows/ci.yml"),
        ),
        x.output("a2", "Success.", kind="custom_tool_call_output"),
        x.call("t2", "shell_command", command="cargo test sync"),
        x.output("t2", exec_text("test result: ok. 9 passed; 0 failed", 0)),
        x.call("c1", "shell_command", command="cargo clippy -- -D warnings"),
        x.output(
            "c1",
            exec_text(
                "warning: unused variable: `plan`\n --> src/sync/plan.rs:3:9\n"
                "error: could not compile `sync` due to 1 previous error",
                101,
            ),
        ),
        x.call("p2", "update_plan", plan=plan2),
        x.output("p2", "Plan updated"),
        *x.prompt("continue"),
        x.task_complete("Dry-run works and CI uses it; clippy still flags an unused variable."),
    ]
    person = {
        "asked": [
            "Add a --dry-run flag to `sync` that prints what it would copy",
            "also make it the default in CI",
            "continue",
        ],
        "plan": [(p["step"], p["status"]) for p in plan2],
        "files": ["src/cli.rs", "src/sync/plan.rs", "src/sync/mod.rs", ".github/workflows/ci.yml"],
        "open": [("cargo clippy -- -D warnings", "error: could not compile `sync`")],
        "fixed": ["cargo test sync", "rg -n dry_run"],
        "last": "Dry-run works and CI uses it; clippy still flags an unused variable.",
        "never": ["AGENTS.md", "environment_context", "permissions instructions"],
    }
    return lines, person


def codex_shell_session(cwd: str) -> tuple[list, dict]:
    """Codex 0.58: the `shell` tool with a command list and JSON output, apply_patch
    through the shell, and a turn the person aborted at the end."""
    x = Codex(cwd, "0199a213-81c0-7800-8aa1-0000000000e5")
    heredoc = "apply_patch <<'EOF'\n" + patch("Update File: web/app.ts") + "\nEOF"
    lines = [
        x.meta(),
        x.turn(),
        *x.prompt("Why does the login page flash white? Fix it"),
        x.call("l1", "shell", command=["bash", "-lc", "grep -rn 'background' web/login.css"]),
        x.output("l1", exec_json("", 1)),
        x.call("l2", "shell", command=["bash", "-lc", heredoc]),
        x.output("l2", exec_json("Done!", 0)),
        x.call("l3", "shell", command=["npm", "run", "build"]),
        x.output("l3", exec_json("ERROR in web/app.ts:12:3\nTS2304: Cannot find name 'theme'.", 2)),
        x.message("assistant", "The build fails on an undefined theme; adding the import."),
        *x.prompt("stop, use the design tokens package instead"),
        x.aborted(),
    ]
    person = {
        "asked": [
            "Why does the login page flash white? Fix it",
            "stop, use the design tokens package instead",
        ],
        "plan": [],
        "files": ["web/app.ts"],
        "open": [("npm run build", "ERROR in web/app.ts:12:3")],
        "fixed": ["grep -rn"],
        "last": "The build fails on an undefined theme; adding the import.",
        "interrupted": True,
        "never": [],
    }
    return lines, person


CORPUS = {
    "claude 2.1, long, compacted, task tools": ("claude", long_claude_tasks_session),
    "claude 2.1, plan mode, screenshots, open question": ("claude", claude_plan_mode_session),
    "claude 2.0, todo list, subagent, interrupted": ("claude", claude_todo_session),
    "codex 0.1xx, long, compacted": ("codex", long_codex_session),
    "codex 0.58, shell tool, aborted": ("codex", codex_shell_session),
}


# ---- random sessions ---------------------------------------------------------------------
#
# Seeded random transcripts of either client, mixing every shape above (calls whose
# results come later or never, plans and tasks, questions, background runs, snapshots,
# compactions, lines cut or not JSON): for properties that must hold on any transcript.

WORDS = [
    "fix",
    "the",
    "parser",
    "continue",
    "tests",
    "lexer",
    "ok",
    "é",
    "ß",
    "<private>k</private>",
]
COMMANDS = ["pytest", "cd /w && pytest 2>&1 | tail -5", "make", "rg TODO", "git push"]


def random_text(rng, most: int = 8) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, most)))


def random_claude_lines(rng, claude: Claude, count: int) -> list:
    """`count` steps of a Claude Code session: the lines they write, in order."""
    lines, calls = [], []
    for _ in range(count):
        step = rng.randrange(17)
        call = f"toolu_{rng.randrange(30)}"
        if step == 0:
            lines.append(claude.user(random_text(rng)))
        elif step == 1:
            lines.append(claude.say(random_text(rng)))
        elif step == 2:
            command = rng.choice(COMMANDS)
            lines.append(claude.call(call, "Bash", command=command))
            calls.append(call)
        elif step == 3 and calls:
            failed = rng.random() < 0.5
            text = rng.choice(["Exit code 1\nFAILED t.py::x", "ok", "[Request interrupted"])
            lines.append(claude.result(calls.pop(rng.randrange(len(calls))), text, is_error=failed))
        elif step == 4:
            name = rng.choice(["Edit", "Write", "MultiEdit"])
            lines.append(claude.call(call, name, file_path=f"/w/{rng.choice(WORDS)}.py"))
        elif step == 5:
            todos = [
                {"content": random_text(rng, 3), "status": rng.choice(["pending", "completed"])}
                for _ in range(rng.randint(0, 4))
            ]
            lines.append(claude.call(call, "TodoWrite", todos=todos))
            calls.append(call)
        elif step == 6:
            lines.append(claude.call(call, "TaskCreate", subject=random_text(rng, 3)))
            calls.append(call)
        elif step == 7:
            status = rng.choice(["in_progress", "completed", "deleted", "odd"])
            lines.append(
                claude.call(call, "TaskUpdate", taskId=str(rng.randint(1, 5)), status=status)
            )
            calls.append(call)
        elif step == 8 and calls:
            text = rng.choice([f"Task #{rng.randint(1, 6)} created successfully", "Updated"])
            lines.append(claude.result(calls.pop(), text, is_error=rng.random() < 0.2))
        elif step == 9:
            plan = rng.choice(["# Plan\n- step one\n- [x] step two", "## A\n## B", "just do it"])
            lines.append(claude.call(call, "ExitPlanMode", plan=plan))
            calls.append(call)
        elif step == 10:
            question = {"question": random_text(rng), "options": [{"label": "yes"}]}
            lines.append(claude.call(call, "AskUserQuestion", questions=[question]))
            calls.append(call)
        elif step == 11:
            lines.append(claude.call(call, "Bash", command="npm test", run_in_background=True))
            lines.append(claude.result(call, f"Command running in background with ID: bg{call}"))
            status = rng.choice(["completed", "failed"])
            lines.append(claude.notification(f"bg{call}", status, "exit code 1"))
        elif step == 12:
            lines.append(
                rng.choice([claude.queued(random_text(rng)), claude.folded(random_text(rng))])
            )
        elif step == 13:
            lines.append(claude.snapshot(*(f"/w/{w}.txt" for w in rng.sample(WORDS, 3))))
        elif step == 14:
            lines.append(rng.choice([claude.compact(), claude.summary("s"), claude.interrupted()]))
        elif step == 15:
            lines.append(claude.sidechain(claude.call(call, "TodoWrite", todos=[])))
        else:
            lines.append(rng.choice(["not json", '{"type": "user"', "[1]", '{"timestamp": "x"}']))
    return lines


def random_codex_lines(rng, codex: Codex, count: int) -> list:
    """`count` steps of a Codex session: the lines they write, in order."""
    lines, calls = [codex.meta()], []
    for _ in range(count):
        step = rng.randrange(10)
        call = f"call_{rng.randrange(30)}"
        if step == 0:
            lines += codex.prompt(random_text(rng))
        elif step == 1:
            lines.append(rng.choice([codex.message("assistant", random_text(rng)), codex.turn()]))
        elif step == 2:
            lines.append(codex.call(call, "shell", command=["bash", "-lc", rng.choice(COMMANDS)]))
            calls.append(call)
        elif step == 3 and calls:
            code = rng.choice([0, 1, 2])
            output = rng.choice([exec_json, exec_text])("error: boom" if code else "ok", code)
            lines.append(codex.output(calls.pop(rng.randrange(len(calls))), output))
        elif step == 4:
            plan = [{"step": random_text(rng, 3), "status": "pending"} for _ in range(3)]
            lines.append(codex.call(call, "update_plan", plan=plan))
        elif step == 5:
            lines.append(codex.custom_call(call, "apply_patch", patch(f"Add File: {call}.py")))
        elif step == 6:
            lines.append(rng.choice([codex.aborted(), codex.task_complete(random_text(rng))]))
        elif step == 7:
            lines.append(codex.compacted("summary"))
        elif step == 8:
            lines.append(codex.event("agent_message", random_text(rng)))
        else:
            lines.append(rng.choice(["{", "null", '{"type": "event_msg", "payload": 1}']))
    return lines


def random_transcript(rng, cwd: str, count: int) -> bytes:
    """A random session of either client as a transcript's bytes, one line per entry
    (a string entry is a line as it stands: cut or not JSON)."""
    if rng.random() < 0.6:
        lines = random_claude_lines(rng, Claude(cwd), count)
    else:
        lines = random_codex_lines(rng, Codex(cwd), count)
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    return text.encode("utf-8")
