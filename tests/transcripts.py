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
