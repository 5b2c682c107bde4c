#!/usr/bin/env python3
"""stm benchmark: what each command costs, and whether it grows with memory.

    python3 bench/bench.py [--quick] [--out DIR]

Builds two stores in a temporary folder, deterministically (seeded):

- small: a realistic fresh project: filled AGENT.md (~1,500 chars) and MEMORY.md
  (~3,000 chars), 10 refs, 30 days of logs, 5 active sessions;
- large: the same boot-visible content, plus 10 years of daily logs (3,650 files,
  100,000 entries) and 10,000 sessions (2,000 active, 8,000 archived), 20 events each;
- medium (for search): the small store with half a year of logs (5,000 entries).

Each command runs as a whole process (`python3 -m stm ...`: cached bytecode, as the
installed `stm` and the hooks run it; one row shows `python3 stm.py`, which compiles the
whole file on every start), alternating with the baseline `python3 -c pass` (same
interpreter, same environment) and small with large, so that ratios are taken pair by
pair and machine noise cancels. Reports medians, min-max, ratios, peak memory (ru_maxrss
of each child) and `-X importtime` totals for boot, times search in process (per MB
searched) and against grep, and `check --staged` in two git work trees, checks the
targets of spec/performance.md, and writes bench/results/latest.json and latest.md.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STM_PY = os.path.join(ROOT, "stm.py")
HANDOFF = os.path.join(ROOT, "spec", "handoff-example.json")
sys.path.insert(0, ROOT)

import stm  # noqa: E402  (the format helpers, so the stores are exactly stm's format)

DAY = 86400
LARGE_DAYS, LARGE_ENTRIES = 3650, 100_000
SMALL_DAYS = 30
EVENTS_PER_SESSION = 20

# ---- building the stores --------------------------------------------------------------

WORDS = [
    *("parser", "lexer", "grammar", "deploy", "release", "cache", "index", "token", "budget"),
    *("session", "review", "test", "migration", "schema", "backfill", "refactor", "rollout"),
    *("latency", "memory", "agent", "handoff", "checkpoint"),
]


def prose(rng: random.Random, chars: int) -> str:
    words, length = [], 0
    while length < chars:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


_made: set = set()


def write(path: str, text: str) -> None:
    folder = os.path.dirname(path)
    if folder not in _made:  # one makedirs per folder: the build is mostly syscalls
        os.makedirs(folder, exist_ok=True)
        _made.add(folder)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def build_layers(stacks: str, rng: random.Random, now: float) -> None:
    write(
        os.path.join(stacks, "AGENT.md"),
        "# Agent Identity\n\n## Role\n\n"
        + prose(rng, 500)
        + "\n\n## Principles\n\n"
        + prose(rng, 500)
        + "\n\n## Conventions\n\n"
        + prose(rng, 400)
        + "\n",
    )
    write(
        os.path.join(stacks, "MEMORY.md"),
        "# Session Memory\n\n"
        + "".join(
            f"## {h}\n\n{prose(rng, 700)}\n\n"
            for h in ("Status", "Observations", "Open Questions", "Next Steps")
        )
        + f"## Last Updated\n\n{stm.iso(now)}\n",
    )
    for n in range(10):
        write(
            os.path.join(stacks, "refs", f"topic-{n:02}.md"),
            f"---\nsummary: {prose(rng, 80)}\n---\n# Topic {n}\n\n{prose(rng, 2000)}\n",
        )
    for name, text in ((".gitattributes", stm.STACKS_GITATTRIBUTES), (".gitignore", "")):
        write(os.path.join(stacks, name), text or stm.STACKS_GITIGNORE)


def build_logs(stacks: str, rng: random.Random, now: float, days: int) -> int:
    """~27 entries a day (100,000 over 10 years), the last day being today."""
    per_day = LARGE_ENTRIES / LARGE_DAYS
    total = 0
    for index in range(days):
        day_start = (int(now) // DAY - (days - 1 - index)) * DAY
        count = int(per_day * (index + 1)) - int(per_day * index)
        parts = []
        for k in range(count):
            stamp = stm.iso(day_start + k * 60)
            message = f"{prose(rng, 60)}\n{prose(rng, 40)}"
            parts.append(
                stm.render_log_entry(message, "bench", stamp, f"{rng.getrandbits(32):08x}")
            )
        write(os.path.join(stacks, "logs", stm.iso(day_start)[:10] + ".md"), "\n".join(parts))
        total += count
    return total


def session_files(session_id: str, created: float, phase: str) -> tuple[str, str]:
    state = stm.new_state(
        session_id, stm.iso(created), f"task {session_id[-4:]}", phase, None, None
    )
    events = []
    for n in range(EVENTS_PER_SESSION):
        state["version"] = n + 1
        state["updated_at"] = stm.iso(created + n * 60)
        events.append(
            stm.dumps_json(
                {
                    "event": "checkpoint" if n else "created",
                    "timestamp": state["updated_at"],
                    "version": n + 1,
                    "actor": "bench",
                    "done": f"step {n}",
                },
                indent=None,
            )
        )
    return stm.dumps_json(state), "\n".join(events) + "\n"


def build_session(folder: str, session_id: str, created: float, phase: str = "build") -> None:
    """state.json and history.jsonl; the empty context/ and artifacts/ folders are left
    out (no command reads them, and 20,000 mkdirs would dominate the build)."""
    state, history = session_files(session_id, created, phase)
    write(os.path.join(folder, "state.json"), state)
    write(os.path.join(folder, "history.jsonl"), history)


def new_id(rng: random.Random, when: float) -> str:
    return stm.iso(when)[:10] + f"-{rng.getrandbits(32):08x}"


def build_store(root: str, large: bool, now: float, days: int | None = None) -> dict:
    """One store (`days` of logs instead of the small or large store's); returns the ids
    the commands use."""
    rng = random.Random(20261122)  # same seed: the same boot-visible content in both
    stacks, state = os.path.join(root, ".stacks"), os.path.join(root, ".state")
    build_layers(stacks, rng, now)
    write(os.path.join(state, ".gitignore"), stm.STATE_GITIGNORE)
    os.makedirs(os.path.join(state, "history"), exist_ok=True)
    current, other = new_id(rng, now), new_id(rng, now)
    for session_id in (current, other):
        build_session(os.path.join(state, "sessions", session_id), session_id, now - 3600)
    extra = random.Random(7)  # history that only the large store has
    entries = build_logs(stacks, extra, now, days or (LARGE_DAYS if large else SMALL_DAYS))
    active, archived = (2000, 8000) if large else (5, 0)
    for _ in range(active - 2):
        when = now - extra.uniform(0, 30) * DAY
        session_id = new_id(extra, when)
        build_session(os.path.join(state, "sessions", session_id), session_id, when)
    for _ in range(archived):
        when = now - extra.uniform(31, LARGE_DAYS) * DAY
        session_id = new_id(extra, when)
        folder = os.path.join(state, "history", session_id[:7], session_id)
        build_session(folder, session_id, when, "done")
    pointer = {"active_session": current, "updated_at": stm.iso(now)}
    write(os.path.join(state, "current-session.json"), stm.dumps_json(pointer))
    return {
        "current": current,
        "other": other,
        "log_entries": entries,
        "active": active,
        "archived": archived,
    }


# ---- measuring ---------------------------------------------------------------------------


# Commands are started by a small helper process, not by the bench itself. Linux gives
# a child started by vfork or fork the peak RSS of the process it was copied from (the
# bench holds tens of MB after building the stores), so every child of the bench would
# report at least that much. The helper (python3 -S, about 10 MB) is the floor instead.
SPAWNER = r"""
import json, os, subprocess, sys, time
for line in sys.stdin:
    job = json.loads(line)
    start = time.perf_counter()
    proc = subprocess.Popen(job["argv"], cwd=job["cwd"], env=job["env"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    sys.stdout.write(json.dumps([elapsed, usage.ru_maxrss, code]) + "\n")
    sys.stdout.flush()
"""
_spawner: list = []


def run_once(argv: list[str], cwd: str, env: dict) -> tuple[float, int, int]:
    """(seconds, peak RSS in KiB, exit code) of one whole process (see SPAWNER)."""
    if not _spawner or _spawner[0].poll() is not None:
        _spawner[:] = [
            subprocess.Popen(
                [sys.executable, "-S", "-c", SPAWNER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        ]
    helper = _spawner[0]
    helper.stdin.write(json.dumps({"argv": argv, "cwd": cwd, "env": env}) + "\n")
    helper.stdin.flush()
    elapsed, peak, code = json.loads(helper.stdout.readline())
    return elapsed, peak, code


# How a command is started. `python3 stm.py` compiles the whole file on every run (Python
# caches bytecode only for imported modules); `python3 -m stm` and the installed `stm`
# command import it, so they use the cached bytecode in __pycache__.
SCRIPT = [sys.executable, STM_PY]
MODULE = [sys.executable, "-m", "stm"]
# -S: no site module, so nothing the environment installed (site-packages .pth files,
# editable-install finders) is imported: what stm itself costs over a clean interpreter.
# The hooks `setup claude` and `setup codex` write run stm this way.
NO_SITE = [sys.executable, "-S", "-m", "stm"]
BASELINE = [sys.executable, "-c", "pass"]
BASELINE_NO_SITE = [sys.executable, "-S", "-c", "pass"]
# How each row starts stm, and against which bare start it is compared (else MODULE and
# BASELINE).
LAUNCHERS = {
    "boot (python3 stm.py)": (SCRIPT, BASELINE),
    "boot (python3 -S -m stm)": (NO_SITE, BASELINE_NO_SITE),
    "boot (hook: python3 -S -m stm)": (NO_SITE, BASELINE),
}


def commands(ids: dict) -> list[tuple[str, object]]:
    """(label, argv or a function of the run number returning argv)."""
    return [
        ("boot", ["boot"]),
        ("boot (python3 stm.py)", ["boot"]),
        ("boot (python3 -S -m stm)", ["boot"]),
        ("boot (hook: python3 -S -m stm)", ["boot"]),
        ("boot --no-refs", ["boot", "--no-refs"]),
        ("log", lambda n: ["log", f"bench entry {n}: measured one more time"]),
        ("session new", lambda n: ["session", "new", "--no-switch", "--name", f"bench {n}"]),
        ("session switch <id>", ["session", "switch", ids["current"]]),
        (
            "session phase",
            lambda n: ["session", "phase", f"phase-{n % 2}", "--session", ids["other"]],
        ),
        ("status", ["status"]),
        ("check", ["check"]),
        ("session list --all", ["session", "list", "--all"]),
        ("digest", ["digest"]),
        ("compact --dry-run", ["compact", "--dry-run"]),
        ("compose-handoff --print", ["compose-handoff", "--print", HANDOFF]),
    ]


def summary(values: list[float]) -> dict:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


def measure(label, argv, small, large, env, runs, warmups) -> dict:
    launcher, base_argv = LAUNCHERS.get(label, (MODULE, BASELINE))
    base, small_t, large_t, peaks, failures = [], [], [], [], 0
    for n in range(warmups + runs):
        args = argv(n) if callable(argv) else argv
        b = run_once(base_argv, small, env)
        s = run_once([*launcher, *args], small, env)
        la = run_once([*launcher, *args], large, env)
        failures += (s[2] != 0) + (la[2] != 0)
        if n >= warmups:
            base.append(b[0])
            small_t.append(s[0])
            large_t.append(la[0])
            peaks.append(la[1])
    return {
        "command": label,
        "baseline_s": summary(base),
        "small_s": summary(small_t),
        "large_s": summary(large_t),
        "small_over_baseline": statistics.median(s / b for s, b in zip(small_t, base)),
        "large_over_small": statistics.median(la / s for la, s in zip(large_t, small_t)),
        "peak_rss_mib_large": max(peaks) / 1024,
        "failures": failures,
    }


def importtime(argv: list[str], cwd: str, env: dict) -> dict:
    """Total and top modules from -X importtime (microseconds, top-level entries)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    modules = {}
    for line in result.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        _, cumulative, name = line[len("import time:") :].split("|")
        if cumulative.strip().isdigit() and not name.startswith("  "):  # top level only
            modules[name.strip()] = int(cumulative)
    return {"total_us": sum(modules.values()), "modules": modules}


MCP_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}


def mcp_calls() -> list[tuple[str, object]]:
    """(label, tools/call params or a function of the call number returning them)."""
    return [
        ("boot", {"name": "boot", "arguments": {}}),
        ("search", {"name": "search", "arguments": {"query": "rollout", "limit": 20}}),
        ("log", lambda n: {"name": "log", "arguments": {"text": f"mcp bench entry {n}"}}),
    ]


def mcp_roundtrips(store: str, env: dict, runs: int, warmups: int) -> dict:
    """Median round-trip of each tool call through one running `python3 -m stm mcp`
    (stateless 2026-07-28 requests over stdio), in seconds."""
    proc = subprocess.Popen(
        [*MODULE, "mcp"],
        cwd=store,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    timings = {}
    try:
        for label, params in mcp_calls():
            times = []
            for n in range(warmups + runs):
                request = params(n) if callable(params) else params
                message = {"jsonrpc": "2.0", "id": n, "method": "tools/call"}
                message["params"] = {**request, "_meta": MCP_META}
                start = time.perf_counter()
                proc.stdin.write(json.dumps(message).encode() + b"\n")
                proc.stdin.flush()
                answer = json.loads(proc.stdout.readline())
                elapsed = time.perf_counter() - start
                if answer.get("result", {}).get("isError") is not False:
                    raise RuntimeError(f"mcp {label} failed: {answer}")
                if n >= warmups:
                    times.append(elapsed)
            timings[label] = summary(times)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()
    return timings


def mcp_results(small: str, large: str, env: dict, runs: int, warmups: int) -> dict:
    base = [run_once([sys.executable, "-c", "pass"], small, env)[0] for _ in range(runs)]
    rows = {"baseline_s": summary(base)}
    for name, store in (("small", small), ("large", large)):
        rows[name] = mcp_roundtrips(store, env, runs * 3, warmups)
    return rows


# ---- capture: the hooks on a 100 MB transcript ---------------------------------------------

TRANSCRIPT_MB = 100
HOOK_SESSION = "2fc9b73b-1111-4000-8000-000000000001"


def claude_line(kind: str, content, n: int, cwd: str) -> str:
    """One Claude Code transcript line (the documented shape: type, uuid, sessionId,
    timestamp, cwd, message {role, content})."""
    entry = {
        "type": kind,
        "uuid": f"uuid-{n}",
        "sessionId": HOOK_SESSION,
        "timestamp": stm.iso(time.time() - 3600 + n % 3000),
        "cwd": cwd,
        "message": {"role": kind, "content": content},
    }
    return json.dumps(entry) + "\n"


def build_transcript(path: str, cwd: str, megabytes: int) -> None:
    """An hour of an agent's work, padded to `megabytes` with tool calls and results."""
    todos = [
        {"content": f"step {i}", "status": ("completed", "in_progress", "pending")[i % 3]}
        for i in range(6)
    ]
    with open(path, "w", encoding="utf-8") as out:
        out.write(claude_line("user", "port the parser to the new grammar", 0, cwd))
        n, size = 1, 0
        while size < megabytes * 1024 * 1024:
            call = {"type": "tool_use", "id": f"t{n}", "name": "Edit"}
            call["input"] = {"file_path": f"{cwd}/src/mod{n % 40}.py", "old_string": "x" * 2000}
            line = claude_line("assistant", [call], n, cwd)
            result = [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok " * 300}]
            line += claude_line("user", result, n + 1, cwd)
            out.write(line)
            size += len(line)
            n += 2
        plan = {"type": "tool_use", "id": "plan", "name": "TodoWrite", "input": {"todos": todos}}
        out.write(claude_line("assistant", [plan], n, cwd))
        out.write(claude_line("assistant", [{"type": "text", "text": "tests next"}], n + 1, cwd))


def hook_payload(event: str, transcript: str, cwd: str, session=HOOK_SESSION, **extra) -> bytes:
    data = {"session_id": session, "transcript_path": transcript, "cwd": cwd}
    return json.dumps({**data, "hook_event_name": event, **extra}).encode()


def run_hook(argv: list[str], cwd: str, env: dict, payload: bytes) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, input=payload, capture_output=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"hook failed: {done.stderr.decode(errors='replace')}")
    return elapsed


def capture_results(work: str, small: str, env: dict, runs: int) -> dict:
    """Whole-process times of the hooks `setup claude` installs, on a 100 MB transcript:
    a capture (what PreCompact, SessionEnd or a Stop hook costs: it reads the tail), the
    SessionStart hook recovering the session that ended (capture, then boot), and boot
    with and without the capture block."""
    transcript = os.path.join(work, f"{HOOK_SESSION}.jsonl")
    build_transcript(transcript, small, TRANSCRIPT_MB)
    capture = [*MODULE, "capture", "--client", "claude"]
    start_hook = [*capture, "--boot", "--max-chars", str(stm.HOOK_MAX_CHARS)]
    rows = {"transcript_mb": os.path.getsize(transcript) / 1024 / 1024}
    boot_plain = [run_once([*MODULE, "boot"], small, env)[0] for _ in range(runs)]
    rows["boot_without_capture_s"] = summary(boot_plain)
    times = []
    for n in range(runs):  # a new position each time: every run reads and records
        with open(transcript, "a", encoding="utf-8") as out:
            out.write(claude_line("assistant", [{"type": "text", "text": f"turn {n}"}], n, small))
        times.append(run_hook(capture, small, env, hook_payload("PreCompact", transcript, small)))
    rows["capture_s"] = summary(times)
    times, none = [], []
    for n in range(runs):  # each start is for a new session: the previous one is recovered
        with open(transcript, "a", encoding="utf-8") as out:
            out.write(claude_line("assistant", [{"type": "text", "text": f"more {n}"}], n, small))
        session = f"{n:08x}-2222-4000-8000-000000000002"
        # The new session's own transcript, beside the killed one's (not yet written): it
        # recovers the one killed session, which sessions sharing its transcript would not.
        own = os.path.join(work, f"{session}.jsonl")
        body = hook_payload("SessionStart", own, small, session=session, source="startup")
        first = hook_payload("SessionStart", transcript, small, source="startup")
        run_hook(start_hook, small, env, first)  # records the worked-in session
        times.append(run_hook(start_hook, small, env, body))
        # The same start again: the session is logged at its size, nothing to recover.
        none.append(run_hook(start_hook, small, env, body))
    rows["session_start_hook_s"] = summary(times)
    rows["session_start_none_s"] = summary(none)
    rows["session_start_ratio"] = statistics.median(r / b for r, b in zip(times, none))
    boot_captured = [run_once([*MODULE, "boot"], small, env)[0] for _ in range(runs)]
    rows["boot_with_capture_s"] = summary(boot_captured)
    rows.update(nudge_results(transcript, small, env, runs * 3))
    return rows


def nudge_results(transcript: str, small: str, env: dict, runs: int) -> dict:
    """The nudge hook as `setup claude` installs it (the loader, cached bytecode), with
    nothing to say, on the 100 MB transcript: every prompt and tool call pays this. Each
    run appends one line (a new position to read and record), alternating with the bare
    interpreter start it is measured against (spec/integration.md: at most 1.2x)."""
    nudge = [sys.executable, "-I", "-S", "-c", stm.HOOK_LOADER, STM_PY, "nudge"]
    nudge += ["--client", "claude"]
    payload = hook_payload("PostToolUse", transcript, small)
    run_hook(nudge, small, env, payload)  # the first look: the position is recorded
    times, bare = [], []
    for n in range(runs):
        with open(transcript, "a", encoding="utf-8") as out:
            out.write(claude_line("assistant", [{"type": "text", "text": f"look {n}"}], n, small))
        times.append(run_hook(nudge, small, env, payload))
        bare.append(run_once([sys.executable, "-c", "pass"], small, env)[0])
    ratio = summary(times)["median"] / summary(bare)["median"]
    return {"nudge_s": summary(times), "nudge_baseline_s": summary(bare), "nudge_ratio": ratio}


# ---- hostile sizes -----------------------------------------------------------------------
#
# Inputs a crafted repository or branch can hold (issue 22): each must cost n or n log n,
# not more. Whole processes, as for the commands; the counted-steps proofs are in
# tests/test_cost.py, these are the seconds they buy.

BULLETS = 10_000


def memory_bullets(count: int, now: float) -> str:
    """A MEMORY.md of `count` bullets in four sections (what boot cuts from the bottom)."""
    rng = random.Random(count)
    sections = []
    for heading in ("Status", "Observations", "Open Questions", "Next Steps"):
        bullets = "".join(f"- {prose(rng, 60)}\n" for _ in range(count // 4))
        sections.append(f"## {heading}\n\n{bullets}\n")
    return "# Session Memory\n\n" + "".join(sections) + f"## Last Updated\n\n{stm.iso(now)}\n"


def build_bullets(folder: str, now: float) -> list[str]:
    """The small store with BULLETS bullets in MEMORY.md; boot cut to the hook's size."""
    build_store(folder, False, now)
    write(os.path.join(folder, ".stacks", "MEMORY.md"), memory_bullets(BULLETS, now))
    return ["boot", "--max-chars", str(stm.HOOK_MAX_CHARS)]


def merge_files(folder: str, base: str, ours: str, theirs: str) -> list[str]:
    """The three versions as files; the argv git would run for the driver."""
    for name, text in (("base", base), ("ours", ours), ("theirs", theirs)):
        write(os.path.join(folder, f"{name}.md"), text)
    return ["merge-file", "base.md", "ours.md", "theirs.md"]


def fact_text(key: str, value: str, now: float) -> str:
    return f"## {key}\n**Current:** {value}\n\n**History:**\n- {stm.iso(now)}: {value}\n"


def build_merge_sections(folder: str, now: float) -> list[str]:
    """refs/facts.md: 100 facts in base, 2,000 new ones on each side (it was cubic)."""
    base = [fact_text(f"base_{i}", f"value {i}", now) for i in range(100)]
    ours = base + [fact_text(f"ours_{i}", f"value {i}", now) for i in range(2000)]
    theirs = base + [fact_text(f"theirs_{i}", f"value {i}", now) for i in range(2000)]
    texts = ("# Facts\n\n" + "\n".join(sections) for sections in (base, ours, theirs))
    return merge_files(folder, *texts)


def build_merge_prose(folder: str, now: float) -> list[str]:
    """A 20 MB prose file, paragraphs and blank lines, edited at both ends on each side
    (difflib was quadratic in its blank lines)."""
    rng, lines, size = random.Random(20), [], 0
    while size < 20_000_000:
        lines += [prose(rng, 75) for _ in range(3)] + [""]
        size += sum(len(line) + 1 for line in lines[-4:])
    ours, theirs = list(lines), list(lines)
    ours[3], ours[-3] = "ours rewrote this line", "and this one"
    theirs[7], theirs[-7] = "theirs rewrote this line", "and this one too"
    texts = ("# Notes\n\n## Prose\n\n" + "\n".join(v) + "\n" for v in (lines, ours, theirs))
    return merge_files(folder, *texts)


def hostile_cases() -> list[tuple[str, object]]:
    """(label, builder(folder, now) -> argv run in that folder)."""
    return [
        (f"boot --max-chars 9500, {BULLETS:,} MEMORY.md bullets", build_bullets),
        ("merge-file, 100 facts + 2,000 new on each side", build_merge_sections),
        ("merge-file, 20 MB of prose edited on both sides", build_merge_prose),
    ]


def hostile_results(work: str, env: dict, runs: int, now: float) -> list[dict]:
    rows = []
    for index, (label, build) in enumerate(hostile_cases()):
        folder = os.path.join(work, f"hostile-{index}")
        os.makedirs(folder)
        argv = build(folder, now)
        files = [os.path.join(folder, n) for n in os.listdir(folder)]
        saved = {path: stm.read_text(path) for path in files if os.path.isfile(path)}
        times, peaks, failures = [], [], 0
        for _ in range(runs):
            for path, text in saved.items():  # merge-file rewrites ours: the same each run
                write(path, text)
            elapsed, peak, code = run_once([*MODULE, *argv], folder, env)
            times.append(elapsed)
            peaks.append(peak)
            failures += code not in (0, 1)  # merge-file: 1 is a conflict, a result
        rows.append(
            {
                "case": label,
                "s": summary(times),
                "peak_mib": max(peaks) / 1024,
                "failures": failures,
            }
        )
    return rows


HOSTILE_LIMITS = {
    f"boot --max-chars 9500, {BULLETS:,} MEMORY.md bullets": 1.0,
    "merge-file, 100 facts + 2,000 new on each side": 1.0,
    "merge-file, 20 MB of prose edited on both sides": 10.0,
}
# ---- sync: stm sync against git push of the same commit --------------------------------


def sync_results(work: str, small: str, env: dict, runs: int) -> dict:
    """Whole-process times, on a clone of the small store with a bare remote on disk: `stm
    sync` after one `log` (commit, fetch, push, fast-forward), the same after another clone
    pushed (a merge too), and `git push` of the same change committed by `stm commit`."""
    env = {**env, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for role in ("AUTHOR", "COMMITTER"):
        env.update({f"GIT_{role}_NAME": "bench", f"GIT_{role}_EMAIL": "bench@example.invalid"})

    def run(cwd, *argv):
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr}")

    def timed(cwd, *argv) -> float:
        start = time.perf_counter()
        run(cwd, *argv)
        return time.perf_counter() - start

    folder = os.path.join(work, "sync")
    bare, seed = os.path.join(folder, "remote.git"), os.path.join(folder, "seed")
    shutil.copytree(small, seed, ignore=shutil.ignore_patterns(".stm.lock"))
    run(folder, "git", "init", "-q", "--bare", "-b", "main", bare)
    run(seed, "git", "init", "-q", "-b", "main")
    run(seed, "git", "add", "-A")
    run(seed, "git", "commit", "-q", "-m", "start")
    run(seed, "git", "push", "-q", bare, "main")
    for name in ("a", "b"):
        run(folder, "git", "clone", "-q", bare, name)
    a, b = os.path.join(folder, "a"), os.path.join(folder, "b")
    rows = {"sync_s": [], "sync_merge_s": [], "git_push_s": []}
    for n in range(runs):
        run(a, *MODULE, "log", f"bench sync {n}")
        rows["sync_s"].append(timed(a, *MODULE, "sync"))
        run(b, *MODULE, "log", f"bench other clone {n}")
        run(b, *MODULE, "sync")
        run(a, *MODULE, "log", f"bench sync after b {n}")
        rows["sync_merge_s"].append(timed(a, *MODULE, "sync"))
        run(a, *MODULE, "log", f"bench push {n}")
        run(a, *MODULE, "commit", "-m", "bench: memory")
        rows["git_push_s"].append(timed(a, "git", "push", "-q"))
        run(b, *MODULE, "sync")
    return {key: summary(values) for key, values in rows.items()}


MANY_CLONES, MANY_ROUNDS = 6, 5  # issue 35: "six clones on one remote"


def many_clones_results(work: str, small: str, env: dict, clones: int, rounds: int) -> dict:
    """N clones of one bare remote, each an agent in its own thread doing M rounds of
    mixed memory operations (a log entry, a note, a fact both set, a checkpoint of one
    shared session, a `--replace` of one section every other round) and `stm sync`, all
    at once; then one more sync each. Reports what a team would: refusals (memory
    conflicts that reached a person: 0 expected), entries lost (written in a clone and
    absent from the remote at the end: 0 expected), push retries, and the wall time."""
    import threading

    env = {**env, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for role in ("AUTHOR", "COMMITTER"):
        env.update({f"GIT_{role}_NAME": "bench", f"GIT_{role}_EMAIL": "bench@example.invalid"})

    def run(cwd, *argv, ok=True):
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
        if ok and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr}")
        return done

    folder = os.path.join(work, "many")
    bare, seed = os.path.join(folder, "remote.git"), os.path.join(folder, "seed")
    shutil.copytree(small, seed, ignore=shutil.ignore_patterns(".stm.lock"))
    # The state tree's git files, as `stm init` writes them (history by union, state.json
    # by the stm driver): the bench store is built without them.
    write(os.path.join(seed, ".state", ".gitattributes"), stm.STATE_GITATTRIBUTES)
    write(os.path.join(seed, ".state", ".gitignore"), stm.STATE_GITIGNORE)
    run(folder, "git", "init", "-q", "--bare", "-b", "main", bare)
    run(seed, "git", "init", "-q", "-b", "main")
    shared = run(seed, *MODULE, "session", "new", "--name", "shared", "--no-switch").stdout
    run(seed, "git", "add", "-A")
    run(seed, "git", "commit", "-q", "-m", "start")
    run(seed, "git", "push", "-q", bare, "main")
    paths = [os.path.join(folder, f"clone{n}") for n in range(clones)]
    for path in paths:
        run(folder, "git", "clone", "-q", bare, path)
    tally = {"refusals": [], "retries": 0, "syncs": 0}
    lock = threading.Lock()

    def sync(path: str) -> None:
        done = run(path, *MODULE, "sync", "--json", ok=False)
        with lock:
            tally["syncs"] += 1
            if done.returncode != 0:
                tally["refusals"].append(done.stderr.strip()[:200])
            else:
                tally["retries"] += json.loads(done.stdout).get("retries", 0)

    def agent(n: int, path: str) -> None:
        for r in range(rounds):
            token = f"agent{n}-round{r}"
            run(path, *MODULE, "log", f"{token} log")
            run(path, *MODULE, "note", "Next Steps", f"{token} note")
            run(path, *MODULE, "fact", "set", "owner", f"{token} fact")
            run(path, *MODULE, "session", "checkpoint", "--session", shared.strip(),
                "--pending", f"{token} step")  # fmt: skip
            if r % 2:
                run(path, *MODULE, "note", "Status", f"{token} status", "--replace")
            sync(path)

    started = time.perf_counter()
    threads = [threading.Thread(target=agent, args=(n, p)) for n, p in enumerate(paths)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for path in paths:
        sync(path)
    wall = time.perf_counter() - started
    run(paths[0], "git", "fetch", "-q")
    names = run(paths[0], "git", "ls-tree", "-r", "--name-only", "origin/main").stdout.split()
    remote = "".join(
        run(paths[0], "git", "show", f"origin/main:{name}").stdout
        for name in names
        if name.startswith((".stacks/", ".state/"))
    )
    lost = [
        f"agent{n}-round{r} {kind}"
        for n in range(clones)
        for r in range(rounds)
        for kind in ("log", "note", "fact", "step")
        if f"agent{n}-round{r} {kind}" not in remote
    ]
    return {
        "clones": clones,
        "rounds": rounds,
        "wall_s": wall,
        "syncs": tally["syncs"],
        "refusals": len(tally["refusals"]),
        "refusal_samples": tally["refusals"][:3],
        "lost": len(lost),
        "lost_samples": lost[:5],
        "retries": tally["retries"],
        "conflict_markers": remote.count("\n<<<<<<< "),
    }


# ---- cost: search per MB, search against grep, the staged check --------------------------

MEDIUM_DAYS = 183  # about 5,000 entries: the store of the comparison in spec/performance.md
MISS = "zzqxj"  # in no text the bench writes
DENSE = "rollout"  # one of the prose words: every few lines
# @modelcontextprotocol/server-memory's search_nodes over the same 5,000 memories, median
# round-trip in ms, measured once by hand on the reference machine (it is not a dependency
# of stm, its tests or this bench; spec/performance.md says how). It has no limit: a hit
# returns every matching memory, here 1,503.
REFERENCE_SEARCH_MS = {"miss": 15.1, "hit": 37.0}


def searched_mb(store) -> float:
    """The megabytes search reads: every file search_files names that exists."""
    paths = (p for _, p in stm.search_files(store, stm.search_layers(), None))
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p)) / 1e6


def search_in_process(root: str, queries: dict, runs: int) -> dict:
    """Median time of a whole search_memory in this process (every match read), per query,
    and per MB of text searched."""
    store = stm.open_store(stacks=os.path.join(root, ".stacks"), state=os.path.join(root, ".state"))
    mb = searched_mb(store)
    rows = {"mb": mb}
    for label, query in queries.items():
        times, found = [], 0
        for n in range(runs + 1):
            start = time.perf_counter()
            found = sum(1 for _ in stm.search_memory(store, query))
            if n:  # the first run warms the page cache
                times.append(time.perf_counter() - start)
        row = summary(times)
        row.update(matches=found, ms_per_mb=row["median"] * 1000 / mb, query=query)
        rows[label] = row
    return rows


def mcp_search(store: str, env: dict, queries: dict, runs: int) -> dict:
    """Median round-trip of the `search` tool (default limit) through one `stm mcp`."""
    proc = subprocess.Popen(
        [*MODULE, "mcp"], cwd=store, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    rows = {}
    try:
        for label, query in queries.items():
            times = []
            for n in range(runs + 3):
                message = {"jsonrpc": "2.0", "id": n, "method": "tools/call"}
                arguments = {"query": query}
                message["params"] = {"name": "search", "arguments": arguments, "_meta": MCP_META}
                start = time.perf_counter()
                proc.stdin.write(json.dumps(message).encode() + b"\n")
                proc.stdin.flush()
                answer = json.loads(proc.stdout.readline())
                if n >= 3:
                    times.append(time.perf_counter() - start)
                if answer.get("result", {}).get("isError") is not False:
                    raise RuntimeError(f"mcp search failed: {answer}")
            rows[label] = summary(times)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()
    return rows


def pairs(argv_a: list, argv_b: list, cwd: str, env: dict, runs: int) -> dict:
    """Whole-process times of two commands in turn, and the median of a/b pair by pair."""
    a_t, b_t = [], []
    for n in range(runs + 1):
        a, b = run_once(argv_a, cwd, env)[0], run_once(argv_b, cwd, env)[0]
        if n:
            a_t.append(a)
            b_t.append(b)
    ratio = statistics.median(x / y for x, y in zip(a_t, b_t))
    return {"a_s": summary(a_t), "b_s": summary(b_t), "ratio": ratio}


def git_env(env: dict, work: str, root: str) -> dict:
    """A git repository for `root` kept outside it (GIT_DIR): only `check --staged` sees
    it; boot and the other commands find no .git and run no git."""
    return dict(
        env,
        GIT_DIR=os.path.join(work, os.path.basename(root) + ".git"),
        GIT_WORK_TREE=root,
        GIT_AUTHOR_NAME="bench",
        GIT_AUTHOR_EMAIL="bench@example.com",
        GIT_COMMITTER_NAME="bench",
        GIT_COMMITTER_EMAIL="bench@example.com",
    )


def staged_results(work: str, small: str, large: str, ids: dict, env: dict, runs: int) -> dict:
    """`check --staged` on both stores, each committed whole to git, then the same change
    staged in both (a log entry, a session's phase)."""
    envs = {}
    for root in (small, large):
        envs[root] = git_env(env, work, root)
        quiet = {"cwd": root, "check": True, "capture_output": True}
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "history"]):
            subprocess.run(["git", *args], env=envs[root], **quiet)
        phase = ["session", "phase", "ship", "--session", ids["other"]]
        for args in (["log", "staged work"], phase):
            subprocess.run([*MODULE, *args], env=env, **quiet)
        subprocess.run(["git", "add", "-A"], env=envs[root], **quiet)
    small_t, large_t = [], []
    for n in range(runs + 1):
        s = run_once([*MODULE, "check", "--staged"], small, envs[small])
        la = run_once([*MODULE, "check", "--staged"], large, envs[large])
        if s[2] or la[2]:
            raise RuntimeError("check --staged failed")
        if n:
            small_t.append(s[0])
            large_t.append(la[0])
    return {
        "small_s": summary(small_t),
        "large_s": summary(large_t),
        "large_over_small": statistics.median(la / s for la, s in zip(large_t, small_t)),
    }


def search_queries(root: str) -> dict:
    """A word found nowhere, one found once (the id of the newest log's last entry, on its
    header line) and one on every few lines."""
    logs = os.path.join(root, ".stacks", "logs")
    with open(os.path.join(logs, max(os.listdir(logs))), encoding="utf-8") as f:
        newest = f.read()
    hit = newest[newest.rindex("<!-- stm:entry ") :].split()[2]
    return {"miss": MISS, "hit": hit, "dense": DENSE}


def cost_results(work: str, small: str, large: str, ids: dict, env: dict, runs: int) -> dict:
    medium = os.path.join(work, "medium")
    built = build_store(medium, False, time.time(), days=MEDIUM_DAYS)
    grep = ["grep", "-r", "-i", "-F", "-q", MISS]
    return {
        "medium_entries": built["log_entries"],
        "search": {
            "medium": search_in_process(medium, search_queries(medium), runs),
            "large": search_in_process(large, search_queries(large), max(3, runs // 3)),
        },
        "mcp_medium": mcp_search(medium, env, {"miss": MISS, "hit": DENSE}, runs * 3),
        "search_cli_vs_grep": {
            "logs": pairs(
                [*MODULE, "search", MISS, "--layer", "logs"],
                [*grep, ".stacks/logs"],
                large,
                env,
                runs,
            ),
            "all": pairs([*MODULE, "search", MISS], [*grep, ".stacks", ".state"], large, env, runs),
        },
        "check_staged": staged_results(work, small, large, ids, env, runs),
    }


# ---- stale references: boot with the check against boot without it ----------------------

STALE_NOTES, STALE_REFS, STALE_FILES = 1000, 100, 300


def stale_ref_text(n: int) -> str:
    """The n-th of the references the memory holds: mostly paths that exist (a stat
    each), then moved and deleted paths (the rename scan), symbols (git grep) and Make
    targets, some of them gone."""
    kind = n % 10
    if kind < 6:
        k = 20 + n * 7 % (STALE_FILES - 20)  # none the refactor touches
        return f"src/pkg{k % 10}/mod{k}.py"
    if kind == 6:
        return f"see `src/pkg{n % 10}/mod{n % 10}.py:42`"  # renamed in the refactor
    if kind == 7:
        return f"docs/old{n % 10}.md"  # deleted in the refactor
    if kind == 8:
        return f"`func_{n % 20}()`"  # defined, or removed (n % 20 < 5)
    return f"`make t{n % 10}`"  # a target, or one gone (n % 10 >= 5)


def build_code_repo(root: str, env: dict, references: bool) -> None:
    """A git work tree of 300 Python files whose memory (1,000 notes, 100 of them naming
    code; without `references` the same notes with plain words instead) was written
    before a refactor that renamed, deleted and removed; then 50 ordinary commits."""
    rng = random.Random(7)
    genv = dict(
        env,
        GIT_AUTHOR_NAME="bench",
        GIT_AUTHOR_EMAIL="bench@example.com",
        GIT_COMMITTER_NAME="bench",
        GIT_COMMITTER_EMAIL="bench@example.com",
    )

    def git(*args):
        subprocess.run(["git", *args], cwd=root, env=genv, check=True, capture_output=True)

    for i in range(STALE_FILES):
        write(
            os.path.join(root, "src", f"pkg{i % 10}", f"mod{i}.py"), f"def func_{i}():\n    pass\n"
        )
    for i in range(10):
        write(os.path.join(root, "docs", f"old{i}.md"), f"# Old {i}\n")
    write(os.path.join(root, "Makefile"), "".join(f"t{i}:\n\ttrue\n" for i in range(10)))
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "code")
    subprocess.run([*MODULE, "init"], cwd=root, env=env, check=True, capture_output=True)
    bullets = []
    for n in range(STALE_NOTES):
        words = prose(rng, 60)
        if n % (STALE_NOTES // STALE_REFS) == 0:
            ref = stale_ref_text(n // (STALE_NOTES // STALE_REFS))
            words += " " + (ref if references else "x" * len(ref))
        bullets.append(f"- {words}")
    sections = ("Status", "Observations", "Open Questions", "Next Steps")
    quarter = STALE_NOTES // len(sections)
    write(
        os.path.join(root, ".stacks", "MEMORY.md"),
        "# Session Memory\n\n"
        + "".join(
            f"## {h}\n\n" + "\n".join(bullets[k * quarter : (k + 1) * quarter]) + "\n\n"
            for k, h in enumerate(sections)
        )
        + f"## Last Updated\n\n{stm.iso(time.time())}\n",
    )
    git("add", "-A")
    git("commit", "-q", "-m", "memory")
    for i in range(10):
        git("mv", f"src/pkg{i}/mod{i}.py", f"src/pkg{i}/renamed{i}.py")
        git("rm", "-q", f"docs/old{i}.md")
    for i in range(5):
        write(os.path.join(root, "src", f"pkg{i % 10}", f"mod{i + 10}.py"), "pass\n")
    for i in range(5):
        path = os.path.join(root, "src", f"pkg{i}", f"renamed{i}.py")
        write(path, "pass\n")
    write(os.path.join(root, "Makefile"), "".join(f"t{i}:\n\ttrue\n" for i in range(5)))
    git("add", "-A")
    git("commit", "-q", "-m", "refactor")
    for n in range(50):
        write(os.path.join(root, "src", "pkg9", f"mod{99 + 10 * (n % 20)}.py"), f"X = {n}\n")
        git("commit", "-q", "-am", f"work {n}")


def stale_results(work: str, env: dict, runs: int) -> dict:
    """`boot` with the stale-reference check (100 references among 1,000 notes) against
    `boot` of the same memory with plain words in their place, pair by pair."""
    with_refs, without = os.path.join(work, "refs-with"), os.path.join(work, "refs-without")
    build_code_repo(with_refs, env, True)
    build_code_repo(without, env, False)
    a_t, b_t = [], []
    for n in range(runs + 1):
        a, b = (
            run_once([*MODULE, "boot"], with_refs, env),
            run_once([*MODULE, "boot"], without, env),
        )
        if a[2] or b[2]:
            raise RuntimeError("boot failed in the stale-reference bench")
        if n:
            a_t.append(a[0])
            b_t.append(b[0])
    ratio = statistics.median(x / y for x, y in zip(a_t, b_t))
    return {"with_s": summary(a_t), "without_s": summary(b_t), "ratio": ratio}


# ---- floors: what the same reading costs a program with no rules ---------------------------

# Where a target is missed, the report says why by measuring the floor: a bare program,
# started the same way (`python3 -c`, same interpreter and environment), that reads the
# same files and does the least any reader must (decode the JSON; lower-case and find in
# the text), with no rule, no output and no error handling. The command's time over its
# floor is what stm's own work costs; the floor is what no implementation avoids.
FLOOR = r"""
import json, os, sys

decode = json.JSONDecoder().decode


def read(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, os.fstat(fd).st_size + 1)
    finally:
        os.close(fd)


def sessions(archived):
    found = []
    for entry in os.scandir(".state/sessions"):
        if entry.name.startswith("user-"):  # a user's namespace (the bench's STM_USER)
            found += [os.path.join(entry.path, n) for n in os.listdir(entry.path)]
        elif entry.is_dir():
            found.append(entry.path)
    for month in os.listdir(".state/history") if archived else ():
        month = os.path.join(".state/history", month)
        found += [os.path.join(month, n) for n in os.listdir(month)]
    return found


what, needle = sys.argv[1], sys.argv[2].encode()
if what == "check":  # every session's state and history, and every log
    for folder in sessions(True):
        os.listdir(folder)
        decode(read(folder + "/state.json").decode())
        lines = read(folder + "/history.jsonl").decode().rstrip("\n")
        decode("[" + lines.replace("\n", ",") + "]")
    for name in os.listdir(".stacks/logs"):
        read(os.path.join(".stacks/logs", name)).lower().find(b"password")
elif what == "status":  # the active sessions' state, the archived counted, each log's size
    for folder in sessions(False):
        decode(read(folder + "/state.json").decode())
    for month in os.listdir(".state/history"):
        len(os.listdir(os.path.join(".state/history", month)))
    for entry in os.scandir(".stacks/logs"):
        entry.stat(follow_symlinks=False)
elif what == "list":  # every session's state
    for folder in sessions(True):
        decode(read(folder + "/state.json").decode())
elif what == "search":  # every log, for a word found nowhere
    for name in os.listdir(".stacks/logs"):
        read(os.path.join(".stacks/logs", name)).lower().find(needle)
"""
FLOOR_COMMANDS = {
    "check": ["check"],
    "status": ["status"],
    "list": ["session", "list", "--all"],
    "search": ["search", MISS, "--layer", "logs"],
}


def floor_argv(what: str) -> list[str]:
    return [sys.executable, "-c", FLOOR, what, MISS]


def search_floor(root: str, runs: int) -> dict:
    """search_in_process's floor: open, read, lower-case and find in every file search
    reads, in this process (per MB)."""
    store = stm.open_store(stacks=os.path.join(root, ".stacks"), state=os.path.join(root, ".state"))
    paths = [p for _, p in stm.search_files(store, stm.search_layers(), None)]
    paths = [p for p in paths if os.path.isfile(p)]
    needle = MISS.encode()
    times = []
    for n in range(runs + 1):
        start = time.perf_counter()
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.read(fd, os.fstat(fd).st_size + 1).lower().find(needle)
            finally:
                os.close(fd)
        if n:
            times.append(time.perf_counter() - start)
    row = summary(times)
    row.update(files=len(paths), ms_per_mb=row["median"] * 1000 / searched_mb(store))
    return row


def floor_results(work: str, env: dict, runs: int) -> dict:
    """Each missed target beside its floor (see FLOOR); after cost_results (the medium
    store)."""
    large = os.path.join(work, "large")
    for what in FLOOR_COMMANDS:  # a floor that failed would read as a fast one
        if run_once(floor_argv(what), large, env)[2] != 0:
            raise RuntimeError(f"the {what} floor failed: run bench.FLOOR by hand to see why")
    found = {
        what: pairs([*MODULE, *argv], floor_argv(what), large, env, runs)
        for what, argv in FLOOR_COMMANDS.items()
    }
    # Boot's start: importing stm (unmarshalling its bytecode) with nothing run.
    found["import"] = pairs([sys.executable, "-c", "import stm"], BASELINE, large, env, runs)
    # CLI search against grep: the interpreter's start, and the search floor, against grep.
    grep = ["grep", "-r", "-i", "-F", "-q", MISS, ".stacks/logs"]
    found["start_vs_grep"] = pairs(BASELINE, grep, large, env, runs)
    found["floor_vs_grep"] = pairs(floor_argv("search"), grep, large, env, runs)
    # `python3 stm.py`'s peak memory: CPython compiling the file, nothing of stm run.
    compile_only = f"compile(open({STM_PY!r}, 'rb').read(), 'stm.py', 'exec')"
    peaks = [run_once([sys.executable, "-c", compile_only], large, env)[1] for _ in range(3)]
    found["compile_peak_mib"] = max(peaks) / 1024
    found["in_process"] = {
        "medium": search_floor(os.path.join(work, "medium"), runs),
        "large": search_floor(large, runs),
    }
    return found


# ---- reporting ---------------------------------------------------------------------------

FLAT = {"boot", "log", "session new", "session switch <id>", "session phase"}


def targets(results: dict) -> list[dict]:
    rows = {r["command"]: r for r in results["commands"]}
    found = []

    def target(name, value, limit, unit=""):
        found.append(
            {"target": name, "value": value, "limit": limit, "unit": unit, "met": value <= limit}
        )

    boot = rows["boot"]["small_over_baseline"]
    target("boot (python3 -m stm) small / python3 -c pass", boot, 1.3, "x")
    clean = rows["boot (python3 -S -m stm)"]["small_over_baseline"]
    target("boot (python3 -S -m stm) small / python3 -S -c pass", clean, 1.3, "x")
    hook = rows["boot (hook: python3 -S -m stm)"]["small_over_baseline"]
    target("boot as the hook runs it (python3 -S -m stm) / python3 -c pass", hook, 1.0, "x")
    for label in sorted(FLAT):
        target(f"{label}: large / small", rows[label]["large_over_small"], 1.10, "x")
    for label, limit in (
        ("status", 0.2),
        ("check", 1.0),
        ("session list --all", 0.5),
        ("digest", 0.5),
        ("compact --dry-run", 0.5),
    ):
        target(f"{label} on large", rows[label]["large_s"]["median"], limit, "s")
    peak = max(r["peak_rss_mib_large"] for r in results["commands"])
    target("peak memory, any command, large", peak, 50.0, "MiB")
    compiled = "boot (python3 stm.py)"  # compiles stm.py: the compiler's peak, not stm's
    cached = max(r["peak_rss_mib_large"] for r in results["commands"] if r["command"] != compiled)
    target("peak memory, any command from cached bytecode, large", cached, 50.0, "MiB")
    mcp = results.get("mcp")
    if mcp:
        boot = mcp["small"]["boot"]["median"] / mcp["baseline_s"]["median"]
        target("mcp boot call (small) / python3 -c pass", boot, 0.2, "x")
    capture = results.get("capture")
    if capture:  # Claude Code shares 1.5 s among SessionEnd hooks; Codex gives 1 s
        target("capture, 100 MB transcript", capture["capture_s"]["median"], 0.5, "s")
        hook = capture["session_start_hook_s"]["median"]
        target("SessionStart hook (capture + boot), 100 MB transcript", hook, 1.0, "s")
        if "session_start_ratio" in capture:
            label = "SessionStart recovering 100 MB transcript / SessionStart with none"
            target(label, capture["session_start_ratio"], 1.3, "x")
        if "nudge_ratio" in capture:
            label = "nudge hook, nothing to say, 100 MB transcript / python3 -c pass"
            target(label, capture["nudge_ratio"], 1.2, "x")
    for row in results.get("hostile", []):
        target(row["case"], row["s"]["median"], HOSTILE_LIMITS[row["case"]], "s")
    cost = results.get("cost")
    if cost:
        for store in ("medium", "large"):
            for query in ("miss", "hit"):
                row = cost["search"][store][query]
                target(f"search in process, {store}, {query}: per MB", row["ms_per_mb"], 3.0, "ms")
        grep = cost["search_cli_vs_grep"]["logs"]["ratio"]
        target("CLI search miss / grep -r, logs of the large store", grep, 2.0, "x")
        for query in ("miss", "hit"):
            mine = cost["mcp_medium"][query]["median"] * 1000
            target(f"MCP search (5,000 entries), {query}", mine, REFERENCE_SEARCH_MS[query], "ms")
        staged = cost["check_staged"]["large_over_small"]
        target("check --staged: large / small", staged, 1.2, "x")
    stale = results.get("stale_refs")
    if stale:
        target(
            "boot with the stale-reference check / without (1,000 notes, 100 references)",
            stale["ratio"],
            1.15,
            "x",
        )
    return found


def markdown(results: dict) -> str:
    m = results["machine"]
    lines = [
        f"stm {results['stm_version']} · {m['python']} · {m['platform']} · {m['cpus']} CPUs · "
        f"{results['runs']} runs · {results['date']}",
        "",
        "| command | baseline | small | large | small/baseline | large/small | peak MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["commands"]:
        lines.append(
            f"| `{r['command']}` | {r['baseline_s']['median'] * 1000:.0f} ms "
            f"| {r['small_s']['median'] * 1000:.0f} ms "
            f"({r['small_s']['min'] * 1000:.0f}-{r['small_s']['max'] * 1000:.0f}) "
            f"| {r['large_s']['median'] * 1000:.0f} ms "
            f"({r['large_s']['min'] * 1000:.0f}-{r['large_s']['max'] * 1000:.0f}) "
            f"| {r['small_over_baseline']:.2f}x | {r['large_over_small']:.2f}x "
            f"| {r['peak_rss_mib_large']:.1f} |"
        )
    lines += ["", "| target | measured | limit | met |", "|---|---:|---:|---|"]
    for t in results["targets"]:
        lines.append(
            f"| {t['target']} | {t['value']:.2f}{t['unit']} | {t['limit']:g}{t['unit']} "
            f"| {'yes' if t['met'] else '**no**'} |"
        )
    mcp = results.get("mcp")
    if mcp:
        lines += [
            "",
            "Through one running `stm mcp` (median round-trip of a tools/call; baseline "
            f"`python3 -c pass` {mcp['baseline_s']['median'] * 1000:.1f} ms):",
            "",
            "| tool | small | large |",
            "|---|---:|---:|",
        ]
        for label, _ in mcp_calls():
            lines.append(
                f"| `{label}` | {mcp['small'][label]['median'] * 1000:.1f} ms "
                f"| {mcp['large'][label]['median'] * 1000:.1f} ms |"
            )
    capture = results.get("capture")
    if capture:
        lines += [
            "",
            f"Hooks on a {capture['transcript_mb']:.0f} MB Claude Code transcript (median, "
            "whole process, `python3 -m stm`):",
            "",
            "| what | median |",
            "|---|---:|",
        ]
        for key, label in (
            ("capture_s", "`capture` (PreCompact, SessionEnd; a Stop hook's cost per turn)"),
            ("session_start_hook_s", "SessionStart hook: recover the last session, then boot"),
            ("session_start_none_s", "SessionStart hook with nothing to recover, then boot"),
            ("boot_without_capture_s", "`boot` (small store, no capture)"),
            ("boot_with_capture_s", "`boot` (small store, with the Last session block)"),
            ("nudge_s", "`nudge` hook (PostToolUse) with nothing to say, as installed"),
            ("nudge_baseline_s", "`python3 -c pass`, alternating with it"),
        ):
            lines.append(f"| {label} | {capture[key]['median'] * 1000:.0f} ms |")
    if results.get("hostile"):
        lines += ["", "| hostile input (issue 22) | median | peak MiB |", "|---|---:|---:|"]
        for row in results["hostile"]:
            lines.append(
                f"| {row['case']} | {row['s']['median'] * 1000:.0f} ms "
                f"({row['s']['min'] * 1000:.0f}-{row['s']['max'] * 1000:.0f}) "
                f"| {row['peak_mib']:.1f} |"
            )
    many = results.get("many_clones")
    if many:
        lines += [
            "",
            f"Many clones, one remote (issue 35): {many['clones']} clones x {many['rounds']} "
            "rounds of log, note, fact set, checkpoint of one shared session, every other "
            "round a `--replace` of one section, and `stm sync`, all at once:",
            "",
            "| clones x rounds | wall | syncs | refusals | lost | conflict markers | retries |",
            "|---|---:|---:|---:|---:|---:|---:|",
            f"| {many['clones']} x {many['rounds']} | {many['wall_s']:.0f} s | {many['syncs']} "
            f"| {many['refusals']} | {many['lost']} | {many['conflict_markers']} "
            f"| {many['retries']} |",
        ]
    sync = results.get("sync")
    if sync:
        push = sync["git_push_s"]["median"]
        lines += [
            "",
            "`stm sync` on a clone of the small store, bare remote on disk (median, whole "
            "process, `python3 -m stm`), against `git push` of the same change:",
            "",
            "| what | median | / git push |",
            "|---|---:|---:|",
        ]
        for key, label in (
            ("sync_s", "`sync` after a `log` (commit, fetch, push, fast-forward)"),
            ("sync_merge_s", "`sync` after another clone pushed (and a merge)"),
            ("git_push_s", "`git push` of the same change (after `stm commit`)"),
        ):
            median = sync[key]["median"]
            lines.append(f"| {label} | {median * 1000:.0f} ms | {median / push:.1f}x |")
    cost = results.get("cost")
    if cost:
        lines += cost_markdown(cost)
    if results.get("floors"):
        lines += floors_markdown(results)
    imp = results["importtime"]
    lines += [
        "",
        f"`-X importtime`, top-level totals: boot {imp['boot']['total_us'] / 1000:.1f} ms, "
        f"baseline {imp['baseline']['total_us'] / 1000:.1f} ms.",
    ]
    return "\n".join(lines) + "\n"


def cost_markdown(cost: dict) -> list[str]:
    lines = [
        "",
        "Search in process (`search_memory`, every match read; median), per MB of text "
        f"searched (medium: {cost['medium_entries']} log entries):",
        "",
        "| store | MB | miss | hit (an entry id) | dense (every few lines) |",
        "|---|---:|---:|---:|---:|",
    ]
    for store in ("medium", "large"):
        row = cost["search"][store]
        cells = " | ".join(
            f"{row[q]['median'] * 1000:.1f} ms ({row[q]['ms_per_mb']:.2f} ms/MB, "
            f"{row[q]['matches']} matches)"
            for q in ("miss", "hit", "dense")
        )
        lines.append(f"| {store} | {row['mb']:.1f} | {cells} |")
    mcp = cost["mcp_medium"]
    lines += [
        "",
        f"`search` through one `stm mcp` on the medium store (default limit 50): miss "
        f"{mcp['miss']['median'] * 1000:.2f} ms, hit `{DENSE}` {mcp['hit']['median'] * 1000:.2f} "
        f"ms; server-memory's search_nodes, measured by hand: {REFERENCE_SEARCH_MS['miss']} ms.",
    ]
    for key, what in (("logs", "logs/ only"), ("all", "every layer")):
        row = cost["search_cli_vs_grep"][key]
        lines.append(
            f"CLI `search` of a word found nowhere, {what}, large store: "
            f"{row['a_s']['median'] * 1000:.0f} ms against `grep -r -i -F` "
            f"{row['b_s']['median'] * 1000:.0f} ms ({row['ratio']:.2f}x pair by pair)."
        )
    staged = cost["check_staged"]
    lines.append(
        f"`check --staged` (the same change staged in both stores): small "
        f"{staged['small_s']['median'] * 1000:.0f} ms, large "
        f"{staged['large_s']['median'] * 1000:.0f} ms ({staged['large_over_small']:.2f}x)."
    )
    return lines


def floors_markdown(results: dict) -> list[str]:
    floors, cost = results["floors"], results["cost"]
    rows = {r["command"]: r for r in results["commands"]}
    lines = [
        "",
        "Floors: a bare program started the same way that reads the same files and does the "
        "least any reader must (bench.py's FLOOR), on the large store, pair by pair:",
        "",
        "| what | stm | floor | stm / floor |",
        "|---|---:|---:|---:|",
    ]
    for what, label in (
        ("check", "`check`"),
        ("status", "`status`"),
        ("list", "`session list --all`"),
        ("search", "CLI `search` of a word found nowhere, logs/"),
    ):
        row = floors[what]
        lines.append(
            f"| {label} | {row['a_s']['median'] * 1000:.0f} ms | {row['b_s']['median'] * 1000:.0f}"
            f" ms | {row['ratio']:.2f}x |"
        )
    for store in ("medium", "large"):
        mine = cost["search"][store]["miss"]["ms_per_mb"]
        floor = floors["in_process"][store]
        lines.append(
            f"| search in process, {store} ({floor['files']} files), a miss | {mine:.1f} ms/MB "
            f"| {floor['ms_per_mb']:.1f} ms/MB | {mine / floor['ms_per_mb']:.2f}x |"
        )
    for key, label in (
        ("start_vs_grep", "`python3 -c pass` alone"),
        ("floor_vs_grep", "the search floor (start, read, lower, find)"),
    ):
        row = floors[key]
        lines.append(
            f"| {label} against `grep -r -i -F` on logs/ | {row['a_s']['median'] * 1000:.0f} ms "
            f"| {row['b_s']['median'] * 1000:.0f} ms (grep) | {row['ratio']:.2f}x |"
        )
    imported = floors["import"]
    lines.append(
        f"| boot's start: `python3 -c 'import stm'` against `python3 -c pass` | "
        f"{imported['a_s']['median'] * 1000:.0f} ms | {imported['b_s']['median'] * 1000:.0f} ms "
        f"| {imported['ratio']:.2f}x (boot: {rows['boot']['small_over_baseline']:.2f}x) |"
    )
    script = rows["boot (python3 stm.py)"]["peak_rss_mib_large"]
    lines.append(
        f"| peak memory of `python3 stm.py boot` against compiling stm.py alone | "
        f"{script:.1f} MiB | {floors['compile_peak_mib']:.1f} MiB | "
        f"{script / floors['compile_peak_mib']:.2f}x |"
    )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs (under a minute)")
    parser.add_argument(
        "--out",
        default=os.path.join(ROOT, "bench", "results"),
        help="where latest.json and latest.md go (default: %(default)s)",
    )
    parser.add_argument("--runs", type=int, help="counted runs per command (default 15; quick 5)")
    args = parser.parse_args(argv)
    runs = args.runs or (3 if args.quick else 15)
    warmups = 1 if args.quick else 3
    env = dict(os.environ, STM_USER="bench", PYTHONPATH=ROOT)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the same for baseline and commands
    now = time.time()
    work = tempfile.mkdtemp(prefix="stm-bench-")
    try:
        small, large = os.path.join(work, "small"), os.path.join(work, "large")
        started = time.perf_counter()
        ids = build_store(small, False, now)
        large_ids = build_store(large, True, now)
        assert ids["current"] == large_ids["current"] and ids["other"] == large_ids["other"]
        print(
            f"built stores in {time.perf_counter() - started:.1f} s "
            f"({large_ids['log_entries']} log entries, {large_ids['active']} active and "
            f"{large_ids['archived']} archived sessions)",
            file=sys.stderr,
        )
        results = {
            "stm_version": stm.__version__,
            "date": stm.iso(now),
            "runs": runs,
            "machine": {
                "python": platform.python_implementation() + " " + platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
            },
            "commands": [],
        }
        for label, cmd in commands(ids):
            row = measure(label, cmd, small, large, env, runs, warmups)
            results["commands"].append(row)
            print(
                f"  {label:26} small {row['small_s']['median'] * 1000:7.1f} ms  large "
                f"{row['large_s']['median'] * 1000:7.1f} ms",
                file=sys.stderr,
            )
        results["mcp"] = mcp_results(small, large, env, runs, warmups)
        for name in ("small", "large"):
            times = ", ".join(
                f"{label} {row['median'] * 1000:.1f} ms"
                for label, row in results["mcp"][name].items()
            )
            print(f"  mcp ({name}): {times}", file=sys.stderr)
        results["capture"] = capture_results(work, small, env, max(3, runs // 3))
        results["cost"] = cost_results(work, small, large, ids, env, max(3, runs // 3))
        cost = results["cost"]
        print(
            f"  cost: search miss medium {cost['search']['medium']['miss']['median'] * 1000:.1f}"
            f" ms, large {cost['search']['large']['miss']['median'] * 1000:.0f} ms; check "
            f"--staged {cost['check_staged']['large_over_small']:.2f}x large/small",
            file=sys.stderr,
        )
        print(
            "  capture: "
            + ", ".join(
                f"{k} {v['median'] * 1000:.0f} ms"
                for k, v in results["capture"].items()
                if isinstance(v, dict) and "median" in v
            ),
            file=sys.stderr,
        )
        results["stale_refs"] = stale_results(work, env, max(3, runs // 3))
        stale = results["stale_refs"]
        print(
            f"  stale references: boot {stale['with_s']['median'] * 1000:.0f} ms with the "
            f"check, {stale['without_s']['median'] * 1000:.0f} ms without "
            f"({stale['ratio']:.2f}x pair by pair)",
            file=sys.stderr,
        )
        results["floors"] = floor_results(work, env, max(3, runs // 3))
        print(
            "  floors: "
            + ", ".join(
                f"{k} {results['floors'][k]['ratio']:.2f}x"
                for k in (*FLOOR_COMMANDS, "import", "start_vs_grep", "floor_vs_grep")
            ),
            file=sys.stderr,
        )
        results["hostile"] = hostile_results(work, env, max(3, runs // 3), now)
        for row in results["hostile"]:
            print(f"  {row['case']}: {row['s']['median'] * 1000:.0f} ms", file=sys.stderr)
        results["sync"] = sync_results(work, small, env, max(3, runs // 3))
        print(
            "  sync: "
            + ", ".join(f"{k} {v['median'] * 1000:.0f} ms" for k, v in results["sync"].items()),
            file=sys.stderr,
        )
        clones, rounds = (3, 2) if args.quick else (MANY_CLONES, MANY_ROUNDS)
        results["many_clones"] = many_clones_results(work, small, env, clones, rounds)
        many = results["many_clones"]
        print(
            f"  many clones: {many['clones']} x {many['rounds']} in {many['wall_s']:.0f} s, "
            f"{many['refusals']} refusals, {many['lost']} lost, {many['retries']} retries",
            file=sys.stderr,
        )
        results["importtime"] = {
            "boot": importtime(["-m", "stm", "boot"], small, env),
            "baseline": importtime(["-c", "pass"], small, env),
        }
        results["targets"] = targets(results)
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "latest.json"), "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2, sort_keys=True)
        table = markdown(results)
        with open(os.path.join(args.out, "latest.md"), "w", encoding="utf-8") as f:
            f.write(table)
        print(table)
        failed = [r["command"] for r in results["commands"] if r["failures"]]
        failed += [r["case"] for r in results["hostile"] if r["failures"]]
        if failed:
            print(f"commands that failed during the run: {', '.join(failed)}", file=sys.stderr)
            return 1
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
