"""Cost that does not grow with memory (spec/performance.md): structure, not seconds.

Search runs over blocks of lines, not line by line: here the block engine is held to
the per-line definition of a match on tricky text, and the work of each command is
counted (files opened, folders listed), small store against a bigger one.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from conftest import STM_PY
from helpers import (
    GIT,
    GIT_IDENTITY,
    git,
    log_text,
    needs_git,
    new_store,
    run_process,
    run_stm,
)
from test_performance import bench, listed, opened, probe

import stm

# ---- search: the block engine finds exactly what a line-by-line search finds -----------


def reference_lines(data: bytes):
    """Lines as search has always cut them: split at b"\\n", decoded leniently, one \\r
    taken off the end; a last line without its newline counts, an empty tail does not."""
    pieces = data.split(b"\n")
    tail = pieces.pop()
    if tail:
        pieces.append(tail)
    return [p.decode("utf-8", "replace").removesuffix("\r") for p in pieces]


def reference_matches(pattern: str, regex: bool):
    if regex:
        return re.compile(pattern, re.IGNORECASE).search
    needle = pattern.casefold()
    return lambda line: needle in line.casefold()


HEADER = re.compile(r"^## (\S+) · .* <!-- stm:entry [0-9a-f]{8} -->$")


def reference_search(data: bytes, pattern: str, regex: bool, log: bool):
    """(line number, text) of each match, a log's newest entry first."""
    matches = reference_matches(pattern, regex)
    hits, stamp = [], ""
    for number, line in enumerate(reference_lines(data), 1):
        header = HEADER.match(line) if line.startswith("## ") else None
        if header:
            stamp = header.group(1)
        if matches(line):
            hits.append((stamp, number, line))
    if log:
        hits.sort(key=lambda h: ("".join(chr(0x10FFFF - ord(c)) for c in h[0]), h[1]))
    return [(number, line) for _, number, line in hits]


PIECES = [
    "needle", "NEEDLE", "Needle", "nee", "dle", "x", " ", "  ", "ss", "SS", "ß", "ẞ", "ſ",
    "K", "k", "ﬂ", "fl", "ﬁ", "İ", "i", "é", "É", "·", "\r", "\r\r", "\t", "a", "b",
    "## ", "# ", "<!-- ", "flow", "straße", "STRASSE", "\u2028",
]  # fmt: skip
RAW = [b"\xe2\x82", b"\xff", b"\xc3", b"\xef\xac"]  # invalid or cut UTF-8


def random_log(rng: random.Random, lines: int) -> bytes:
    out = []
    for _ in range(lines):
        roll = rng.random()
        if roll < 0.15:
            stamp = f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T0{rng.randint(0, 9)}:00:00Z"
            out.append(f"## {stamp} · bob <!-- stm:entry {rng.getrandbits(32):08x} -->".encode())
        elif roll < 0.2:
            out.append(b"")
        else:
            parts = [rng.choice(PIECES).encode() for _ in range(rng.randint(1, 6))]
            if rng.random() < 0.1:
                parts.insert(rng.randrange(len(parts) + 1), rng.choice(RAW))
            out.append(b"".join(parts))
    text = b"\n".join(out)
    return text + rng.choice([b"", b"\n", b"\r\n", b"\r"])


LITERALS = ["needle", "NEEDLE", "ss", "s", "ß", "ẞ", "fl", "ﬂ", "k", "K", "i", "İ", "é",
            "x needle", "dle\r", "·", "\r", "a\nb", "straße", "## 2026"]  # fmt: skip
REGEXES = [
    r"^needle",
    r"needle$",
    r"ne+dle",
    r"x\s*n",
    r"[^a]x",
    r"(?s)x.n",
    r"^$",
    r"\bss\b",
    r"(?<=x)n",
    r"\Ax",
    r"n\Z",
    r"x(?!\s)",
    r"x(?=\r)",
    r".",
    r"\W$",
    r"a|$",
    r"é$",
    r"ß",
    r"[\r]",
    r"\s",
    r"(?m)^x",
]  # fmt: skip (backreferences are refused)


def search(store, pattern, regex, layer):
    return [
        (h["line"], h["text"]) for h in stm.search_memory(store, pattern, layer=layer, regex=regex)
    ]


@pytest.mark.parametrize("chunk", [1, 5, 64, 1 << 20])
def test_block_search_finds_what_a_line_by_line_search_finds(store, monkeypatch, chunk):
    monkeypatch.setattr(stm, "SEARCH_CHUNK", chunk)
    handle = stm.open_store(stacks=str(store / ".stacks"))
    rng = random.Random(chunk)
    ref = store / ".stacks" / "refs" / "fuzz.md"
    log = store / ".stacks" / "logs" / "2026-01-01.md"
    for logs in sorted(store.glob(".stacks/logs/*.md")):
        logs.unlink()
    for round_ in range(12 if chunk == 1 else 30):
        data = random_log(rng, rng.randint(0, 40))
        ref.write_bytes(b"# Fuzz\n" + data)
        log.write_bytes(data)
        for pattern, regex in [(p, False) for p in LITERALS] + [(p, True) for p in REGEXES]:
            want = reference_search(b"# Fuzz\n" + data, pattern, regex, log=False)
            assert search(handle, pattern, regex, "refs") == want, (round_, pattern, data)
            want = reference_search(data, pattern, regex, log=True)
            assert search(handle, pattern, regex, "logs") == want, (round_, pattern, data)


def test_folds_to_ascii_lists_every_character_that_folds_into_ascii():
    """A line holding one of these can match an ASCII pattern its lowered bytes do not
    show; the list is stm's, the Unicode data the running Python's."""
    found = {
        chr(code)
        for code in range(128, 0x110000)
        if any(ord(c) < 128 for c in chr(code).casefold())
    }
    assert found <= set(stm.FOLDS_TO_ASCII), sorted(found - set(stm.FOLDS_TO_ASCII))
    assert unicodedata.unidata_version  # the data the set above came from


def test_a_needle_with_no_folding_letters_skips_the_folding_scan():
    assert stm.folding_into("zzq") == ((), ())
    codes, leads = stm.folding_into("flows")
    assert "ﬂ".encode() in codes and "ß".encode() in codes  # f, l, s: ligatures and ß
    assert all(code[:1] in leads for code in codes)


# ---- the sessions layer: a miss skips the events without parsing them --------------------

WORDS = ["port", "lexer", "by", "none", "true", "null", "b", "y", "One", "ok", "x1b", "é"]


def random_value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth < 2 and roll < 0.15:
        return {rng.choice(WORDS): random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    if depth < 2 and roll < 0.3:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.4:
        return rng.choice([None, True, False, 0, 1.5, -2, 1e5, 1e-05, 12345678901234567890.0])
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 4)))
    return text + rng.choice(["", "", '"q"', "\\", "\n", "\t", "\x1b", "\x7f", "\u2028"])


def random_event(rng: random.Random) -> dict:
    heads = ["checkpoint", "created", "noted", None, {"kind": None}, ["x", 2], 7, 1e3]
    event = {"event": rng.choice(heads), "version": 3}
    event["timestamp"] = rng.choice(["2026-01-02T03:04:05Z", "2026-01-02T03:04:05Z", None])
    if rng.random() < 0.8:
        event["actor"] = rng.choice(["bob", "ann", "nobody", 1e3, {"by": None}])
    for key in rng.sample(WORDS, rng.randint(0, 4)):
        event[key] = random_value(rng)
    return event


def test_the_history_prefilter_never_skips_a_block_holding_a_match():
    """may_hold_event says no only when no event of the block can match as event_text
    renders it: random events, every piece of their rendered lines as the needle."""
    rng = random.Random(7)
    skipped = 0
    for _ in range(800):
        events = [random_event(rng) for _ in range(rng.randint(1, 3))]
        block = "".join(stm.dumps_json(e, None) + "\n" for e in events).encode()
        lines = [stm.event_text(e) for e in events]
        text = rng.choice(lines)
        start = rng.randrange(len(text))
        piece = text[start : start + rng.randint(1, 12)]
        needles = [piece, rng.choice(WORDS), "zq lexer", "e", "0e"]
        for needle in needles:
            matcher = stm.search_matcher(needle, False)
            if any(matcher.matches(line) for line in lines):
                assert matcher.may_hold_event(block), (needle, block)
            elif not matcher.may_hold_event(block):
                skipped += 1
    assert skipped > 50  # the prefilter does skip blocks: the point of it


@pytest.mark.parametrize(
    "line, needle",
    [
        ('{"event":"note","timestamp":"T","budget":1e5}', "100000"),
        ('{"event": "note", "budget": 1E2}', "100.0"),
        ('{"event":"note","big":12345678901234567890.0}', "4567e"),
        ('{"event":{"kind":null},"timestamp":"T"}', "kind"),
        ('{"event":"note","actor":1e3}', "by 1000"),
    ],
)
def test_the_history_prefilter_holds_for_hand_written_json(line, needle):
    """History edited by hand or written by another tool: numbers as JSON allows them and
    head fields that are not strings (found by a review; each was skipped before)."""
    block = (line + "\n").encode()
    event = json.loads(line)
    matcher = stm.search_matcher(needle, False)
    assert matcher.matches(stm.event_text(event)), stm.event_text(event)
    assert matcher.may_hold_event(block)


def test_only_a_word_a_float_can_render_sends_the_block_to_the_float_scan(monkeypatch):
    """A float is rendered with digits, `.`, `e` and a sign: a missing word of other
    letters cannot stand in one, so the block is skipped without the float scan (a third
    of a miss's time over the large store's histories); a missing word of digits is
    looked for in a float."""
    scanned, real = [], stm.JSON_FLOAT_RE

    class Recorder:
        def search(self, block):
            scanned.append(block)
            return real.search(block)

    monkeypatch.setattr(stm, "JSON_FLOAT_RE", Recorder())
    block = b'{"event":"note","timestamp":"T","budget":1.5e5}\n'
    for needle in (
        "zzqxj",
        "port lexer",
        "2026-11-25-9535d376",  # date-safe: literal
        "1e5 lexer",
    ):  # an id as data, never compared with the clock
        assert not stm.search_matcher(needle, False).may_hold_event(block), needle
    assert stm.search_matcher("note", False).may_hold_event(block)  # present: no scan
    assert scanned == []
    assert stm.search_matcher("150000", False).may_hold_event(block)
    assert stm.search_matcher("note 150000", False).may_hold_event(block)
    assert not stm.search_matcher("150000", False).may_hold_event(block.replace(b"1.5e5", b"2"))
    assert len(scanned) == 3


def test_a_search_of_the_sessions_layer_still_finds_a_key_and_its_value(store, run):
    sid = run("session", "new", "--name", "port the lexer").out.strip()
    assert run("session", "checkpoint", "--pending", "write the grammar").code == 0
    found = run("search", "pending write the gram", "--layer", "sessions")
    assert found.code == 0 and sid in found.out and "pending write the grammar" in found.out
    assert run("search", "zq-nowhere", "--layer", "sessions").code == 1


# ---- check: each file's work once; the staged check follows the commit ----------------


def grow(store, rng, logs: int, sessions: int) -> None:
    """More history, none of it shown by boot: old logs, sessions active and archived."""
    now = stm.utc_now()
    bench.build_logs(str(store / ".stacks"), rng, now - 40 * 86400, logs)
    for _ in range(sessions):
        when = now - rng.uniform(1, 30) * 86400
        sid = bench.new_id(rng, when)
        bench.build_session(str(store / ".state" / "sessions" / sid), sid, when)
        when = now - rng.uniform(40, 900) * 86400
        sid = bench.new_id(rng, when)
        bench.build_session(str(store / ".state" / "history" / sid[:7] / sid), sid, when)


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """A store and one with twice its history, each a git repository with all committed,
    then the same change staged in both: a log entry and a session's checkpoint."""
    if GIT is None:
        pytest.skip("git is not installed")
    now = stm.utc_now()
    made = []
    for name, scale in (("one", 1), ("two", 2)):
        root = tmp_path_factory.mktemp(name)
        ids = bench.build_store(str(root), False, now)
        grow(root, bench.random.Random(11), 60 * scale, 60 * scale)
        git(root, "init", "-q", env=GIT_IDENTITY)
        git(root, "add", "-A", env=GIT_IDENTITY)
        git(root, "commit", "-q", "-m", "history", env=GIT_IDENTITY)
        made.append((root, ids))
    for root, ids in made:
        for argv in (
            ["log", "staged work"],
            ["session", "phase", "ship", "--session", ids["other"]],
        ):
            assert probe(root, argv)["code"] == 0
        git(root, "add", "-A", env=GIT_IDENTITY)
    return made


def history_files(report):
    return sorted(p for p in opened(report) if "/logs/" in p or p.startswith(".state/"))


@needs_git
def test_full_check_opens_each_log_and_session_file_once(repos):
    (one, _), (two, _) = repos
    for root in (one, two):
        report = probe(root, ["check"])
        counts = {}
        for path in opened(report):
            counts[path] = counts.get(path, 0) + 1
        twice = {path for path, n in counts.items() if n > 1 and path in history_files(report)}
        # Compact moves and handoff receipts are gathered in the one reading of the logs;
        # only what boot shows (check renders it for the budget) is read again.
        assert twice <= set(opened(probe(root, ["boot"]))), twice
    a, b = len(history_files(probe(one, ["check"]))), len(history_files(probe(two, ["check"])))
    assert 1.5 < b / a <= 2.1  # twice the history: at most twice the files, not more


@needs_git
def test_staged_check_reads_the_same_files_whatever_the_history(repos):
    (one, ids), (two, _) = repos
    a, b = probe(one, ["check", "--staged"]), probe(two, ["check", "--staged"])
    assert a["code"] == b["code"] == 0, (a, b)
    assert history_files(a) == history_files(b)
    today = stm.iso(stm.utc_now())[:10]
    assert f".stacks/logs/{today}.md" in history_files(a)
    assert f".state/sessions/{ids['other']}/history.jsonl" in history_files(a)
    for report in (a, b):  # no listing of logs/, sessions/ or history/
        assert not [p for p in listed(report) if p.endswith(("logs", "sessions", "history"))]


@needs_git
def test_staged_check_reports_what_is_staged_and_only_that(store, run):
    git(store, "init", "-q", env=GIT_IDENTITY)
    run("session", "new", "--name", "first")
    git(store, "add", "-A", env=GIT_IDENTITY)
    git(store, "commit", "-q", "-m", "start", env=GIT_IDENTITY)
    [old] = (store / ".state" / "sessions").glob("*/state.json")
    old.write_text("{not json")  # broken, and not staged
    log = store / ".stacks" / "logs" / "2026-01-02.md"
    log.write_text("stray text before any entry\n")
    git(store, "add", str(log), env=GIT_IDENTITY)
    staged = run("check", "--staged", "--json")
    rules = {(f["rule"], f["path"]) for f in json.loads(staged.out)["findings"]}
    assert ("log-entry", ".stacks/logs/2026-01-02.md") in rules
    assert not [r for r in rules if r[0] == "state-invalid"]
    assert staged.code == 1
    full = json.loads(run("check", "--json").out)["findings"]
    assert {"log-entry", "state-invalid"} <= {f["rule"] for f in full}


def test_staged_check_outside_git_checks_everything_and_says_so(store, run, monkeypatch):
    monkeypatch.setattr(stm, "staged_store_paths", lambda store: None)
    result = run("check", "--staged")
    assert result.code == 0
    assert "checking everything" in result.err


# ---- nothing reads a whole log into memory ------------------------------------------------


def write_big_log(store, entries: int):
    """Well-formed entries from early today (about 320 bytes each), then a torn entry."""
    today = stm.iso(stm.utc_now())[:10]
    stamp = f"{today}T00:00:01Z"
    text = "x" * 200 + "\nparser work, padded out to size"
    path = store / ".stacks" / "logs" / f"{today}.md"
    with open(path, "w", encoding="utf-8") as out:
        for n in range(entries):
            out.write(stm.render_log_entry(text, "bob", stamp, f"{n:08x}") + "\n")
        out.write(f"## {stamp} · bob <!-- stm:entry ffffffff -->\n\ntorn, never ended\n")
    return path.stat().st_size


def peak_of(run, argv) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        result = run(*argv)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.code in (0, 1), result
    return peak


@pytest.mark.parametrize(
    "argv",
    [["log", "after the torn one"], ["digest", "--since", "last-boot"], ["check"]],
    ids=["log repairs the tail", "digest", "check"],
)
def test_a_big_log_is_read_a_block_at_a_time(store, run, argv):
    """Twice the log, the same memory: blocks of about 1 MiB (and the regex stack that
    checks one), never the file."""
    peaks = []
    for entries in (25_000, 50_000):  # about 8 and 16 MB
        size = write_big_log(store, entries)
        peaks.append(peak_of(run, argv))
    assert size > 15 * 2**20
    assert peaks[1] < 1.25 * peaks[0] and peaks[1] < 16 * 2**20, peaks


# ---- status and session list: one listing, and only the files they show ----------------


@needs_git
def test_status_lists_logs_once_and_reads_no_old_log(repos):
    (one, _), (two, _) = repos
    reports = [probe(root, ["status", "--json"]) for root in (one, two)]
    for report in reports:
        assert report["code"] == 0
        assert listed(report).count(".stacks/logs") == 1  # sizes and names from one listing
    logs = [sorted({p for p in opened(r) if "/logs/" in p}) for r in reports]
    assert logs[0] == logs[1] and len(logs[0]) <= 2  # the newest (and today's), not history


@needs_git
def test_session_list_reads_each_state_once(repos):
    (one, _), (two, _) = repos
    counts = []
    for root in (one, two):
        report = probe(root, ["session", "list", "--all", "--json"])
        states = [p for p in opened(report) if p.endswith("state.json")]
        assert len(states) == len(set(states))
        counts.append(len(states))
    assert 1.5 < counts[1] / counts[0] <= 2.1  # twice the sessions, twice the reads


@needs_git
def test_search_since_opens_no_older_file(repos):
    (one, _), _ = repos
    since = stm.iso(stm.utc_now() - 10 * 86400)[:10]
    report = probe(one, ["search", "zzqxj", "--since", since])
    assert report["code"] == 1  # nothing found
    logs = [p for p in opened(report) if "/logs/" in p]
    assert logs and all(p.rsplit("/", 1)[1][:10] >= since for p in logs)
    sessions = [p for p in opened(report) if p.startswith(".state/")]
    assert all(p.split("/")[-2][:10] >= since for p in sessions)
    listed_months = [p for p in listed(report) if p.startswith(".state/history/")]
    assert all(p.rsplit("/", 1)[1] >= since[:7] for p in listed_months)


# ---- capture: what a read of a transcript's window costs -------------------------------


def test_a_transcript_read_checks_the_newest_valid_entry_time_not_every_one(tmp_path, monkeypatch):
    """The window's entries carry a time each; only the newest valid one is kept
    (`ended_at`), so a read parses that one (and any invalid ones after it), not all."""
    from transcripts import Claude, write_jsonl

    claude = Claude(str(tmp_path))
    entries = [claude.say(f"step {n}") for n in range(400)]
    *older, valid, bad, worse = entries[-4:]  # the last two carry times that are not times
    bad["timestamp"], worse["timestamp"] = "2026-02-30T00:00:00Z", "yesterday"
    path = write_jsonl(tmp_path / "t.jsonl", entries)
    calls = []
    real = stm.parse_iso
    monkeypatch.setattr(stm, "parse_iso", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    transcript = stm.read_transcript(path)
    assert calls == ["yesterday", "2026-02-30T00:00:00Z", valid["timestamp"]]
    assert transcript.ended_at == stm.iso(real(valid["timestamp"]))
    assert transcript.last_message == "step 399"


# ---- boot's start: argparse's translations ---------------------------------------------


def write_catalog(path, translations: dict) -> None:
    """A GNU gettext catalog (.mo) holding `translations`, in its documented layout."""
    import struct

    keys = sorted(translations)
    ids = b"".join(k.encode() + b"\0" for k in keys)
    strs = b"".join(translations[k].encode() + b"\0" for k in keys)
    start = 7 * 4 + 16 * len(keys)
    table, offset = [], start
    for k in keys:
        table += [len(k.encode()), offset]
        offset += len(k.encode()) + 1
    values, offset = [], start + len(ids)
    for k in keys:
        values += [len(translations[k].encode()), offset]
        offset += len(translations[k].encode()) + 1
    header = struct.pack("Iiiiiii", 0x950412DE, 0, len(keys), 28, 28 + 8 * len(keys), 0, 0)
    path.parent.mkdir(parents=True)
    path.write_bytes(
        header
        + struct.pack(f"{len(table)}i", *table)
        + struct.pack(f"{len(values)}i", *values)
        + ids
        + strs
    )


def test_boot_asks_gettext_nothing_where_no_catalog_can_exist(store, run, monkeypatch, tmp_path):
    """Where gettext's catalog folder is absent, argparse's labels are its own text: boot
    never asks gettext (whose first question imports `locale`), and argparse is given
    gettext back afterwards."""
    import argparse
    import gettext

    monkeypatch.setattr(gettext, "_default_localedir", str(tmp_path / "no-locale"))
    asked = []
    real = gettext.find
    monkeypatch.setattr(gettext, "find", lambda *a, **k: asked.append(a) or real(*a, **k))
    assert run("boot").code == 0
    assert asked == []
    assert argparse._ is gettext.gettext and argparse.ngettext is gettext.ngettext
    assert run("boot", "--bogus").code == 2  # an error path is as before
    assert "unrecognized arguments: --bogus" in run("boot", "--bogus").err


def parsed_by_argparse(argv: list[str]):
    """argparse's Namespace for argv, or None where it refuses it or leaves words over."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            parsed, extra = stm.build_parser(*stm.command_of(argv)).parse_known_args(argv)
    except SystemExit:
        return None
    return None if extra else parsed


def test_a_command_given_alone_gets_what_argparse_would_give_it():
    """plain_command_args (no argparse) against argparse, for every command word: the same
    names, values and order, or None where argparse must parse."""
    taken = set()
    for row in stm.COMMANDS:
        fast = stm.plain_command_args([row.name])
        if fast is None:
            continue
        taken.add(row.name)
        parsed = parsed_by_argparse([row.name])
        assert list(vars(fast).items()) == list(vars(parsed).items()), row.name
    assert {"boot", "check", "status", "mcp", "capture", "nudge"} <= taken
    # A verb, words, an unknown command: argparse parses.
    assert stm.plain_command_args(["session"]) is None
    assert stm.plain_command_args(["log"]) is None  # a positional MESSAGE
    assert stm.plain_command_args(["no-such-command"]) is None
    # What every hook runs is taken without argparse.
    for hook in (
        ["capture", "--client", "claude", "--boot", "--max-chars", "9500"],
        ["capture", "--client", "codex"],
        ["nudge", "--client", "claude"],
    ):
        assert stm.plain_command_args(hook) is not None, hook


def test_command_lines_taken_without_argparse_are_what_argparse_makes_of_them():
    """Random command lines of each command's own options (right and wrong values, an
    option twice, two of one group, `--opt=value`, stray words): where plain_command_args
    answers, argparse accepts the line and gives the same names, values and order."""
    rng = random.Random(3709)
    words = ["9500", "0", "007", "-5", "x", "", "claude", "codex", "--", "-", "=", "1e3", "٣"]
    answered = 0
    for row in stm.COMMANDS:
        if row.handler is None:
            continue
        parser = stm.build_parser(row.name)
        actions = parser._subparsers._group_actions[0].choices[row.name]._actions
        flags = [flag for action in actions for flag in action.option_strings if flag != "-h"]
        flags = [flag for flag in flags if flag != "--help"]
        for _ in range(300):
            argv = [row.name]
            for _ in range(rng.randrange(5)):
                pick = rng.random()
                if pick < 0.6 and flags:
                    argv.append(rng.choice(flags))
                elif pick < 0.7 and flags:
                    argv.append(f"{rng.choice(flags)}={rng.choice(words)}")
                if rng.random() < 0.5:
                    argv.append(rng.choice(words))
            fast = stm.plain_command_args(argv)
            if fast is None:
                continue
            answered += 1
            parsed = parsed_by_argparse(argv)
            assert parsed is not None, argv
            assert list(vars(fast).items()) == list(vars(parsed).items()), argv
    assert answered > 200, answered  # the lines this test is about were made


def test_argparse_is_translated_where_a_catalog_exists(store, run, monkeypatch, tmp_path):
    """With a catalog folder, argparse asks gettext as it always did: its labels come
    translated (a catalog of our own, in a language of our own)."""
    import gettext

    catalog = tmp_path / "locale" / "xx" / "LC_MESSAGES" / "messages.mo"
    write_catalog(catalog, {"show this help message and exit": "zeige diese Hilfe"})
    monkeypatch.setattr(gettext, "_default_localedir", str(tmp_path / "locale"))
    monkeypatch.setenv("LANGUAGE", "xx")
    result = run("boot", "--help")
    assert result.code == 0
    assert "zeige diese Hilfe" in result.out


# ---- boot's recall: words of ASCII text by a plain range --------------------------------


def test_recall_words_of_ascii_text_are_the_unicode_definitions_words():
    """An ASCII text (after lowering: the Kelvin sign lowers to `k`) is tokenised with a
    plain [a-z0-9] range, anything else with the Unicode class; both give exactly the
    words `[^\\W_]{2,}` finds in the lowered text, stopwords left out."""
    rng = random.Random(37)
    alphabet = "abcXYZ019_- .,/\\n\\tß\u212aéİſ"
    texts = [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60))) for _ in range(2000)
    ]
    texts += [
        "Fix THE OAuth login (src/auth_login.py)",
        "\u212aelvin and the X1 cache",
        "a_b c9 9c",
    ]
    general = re.compile(r"[^\W_]{2,}")
    for text in texts:
        expected = [w for w in general.findall(text.lower()) if w not in stm.RECALL_STOPWORDS]
        assert stm.recall_words(text) == expected, text
    assert stm.RECALL_ASCII_WORD_RE.findall("\u212aelvin".lower()) == ["kelvin"]


# ---- boot's recall: only the entries that hold the work's words are tokenised -----------


def shuffled_log(rng: random.Random, texts: list[str]) -> bytes:
    """A log of `texts` as stm writes it, then hand-edited: some entries torn, interleaved,
    given a foreign end line or a CRLF, stray text between them."""
    pieces = []
    for text in texts:
        entry_id = f"{rng.getrandbits(32):08x}"
        entry = stm.render_log_entry(text, "al", "2026-01-02T03:04:05Z", entry_id)
        roll = rng.random()
        if roll < 0.1:
            entry = entry.rsplit("<!-- stm:end", 1)[0]  # torn
        elif roll < 0.15:
            entry = entry.replace(f"end {entry_id}", f"end {rng.getrandbits(32):08x}")
        elif roll < 0.2:
            entry = entry.replace("\n", "\r\n")
        elif roll < 0.25:
            entry += f"<!-- stm:end {entry_id} -->\nstray text\n"
        pieces.append(entry)
    lines = "".join(pieces).encode().split(b"\n")
    for _ in range(rng.randrange(3)):  # a union merge's interleaving, a lost line
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    if rng.random() < 0.3:
        del lines[rng.randrange(len(lines))]
    return b"\n".join(lines) + rng.choice([b"", b"\xff", b"## 2026 \xc2\xb7 x"])


RECALL_PIECES = [
    *("OAuth", "login", "LOGIN,", "tokens", "the", "a", "x", "99", "0", "x1", "a_b", "auth_login"),
    *(
        "deploy",
        "ß",
        "stra\u00dfe",
        "\u212aelvin",
        "caf\u00e9",
        "\u0130stanbul",
        "\u017ft",
        "\ufb01le",
    ),
    *(
        "\u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2",
        "\t",
        "\r",
        "\x00",
        "(src/auth.py)",
        "<!-- stm:",
    ),
]


def random_texts(rng: random.Random, count: int, ascii_only: bool) -> list[str]:
    pieces = [p for p in RECALL_PIECES if p.isascii()] if ascii_only else RECALL_PIECES
    return [
        " ".join(rng.choice(pieces) for _ in range(rng.randrange(12))) + rng.choice(["", "\nmore"])
        for _ in range(count)
    ]


def test_log_entry_bodies_are_the_bodies_parse_log_yields():
    rng = random.Random(3701)
    for _ in range(1500):
        data = shuffled_log(rng, random_texts(rng, rng.randrange(8), rng.random() < 0.5))
        expected = [
            b"".join(item[0].raw_body) for kind, *item in stm.parse_log(data) if kind == "entry"
        ]
        assert stm.log_entry_bodies(data) == expected, data


def test_recall_counts_the_log_as_tokenising_every_entry_would(store):
    """recall_log_entries keeps the words of the entries that hold a word of the work and
    counts the others; BM25 over that gives the scores tokenising every entry gives."""
    rng = random.Random(3702)
    logs = store / ".stacks" / "logs"
    today = int(stm.utc_now() // 86400)
    opened_store = stm.open_store(stacks=str(store / ".stacks"))
    for trial in range(40):
        for day in range(stm.RECALL_LOG_DAYS + 2):  # two days too old to count
            name = stm.iso((today - day) * 86400)[:10] + ".md"
            texts = random_texts(rng, rng.randrange(6), ascii_only=day % 3 != 1)
            (logs / name).write_bytes(shuffled_log(rng, texts))
        query = stm.recall_words(" ".join(rng.sample(RECALL_PIECES, 4)))
        every = []
        for day in range(today - stm.RECALL_LOG_DAYS + 1, today + 1):
            path = str(logs / (stm.iso(day * 86400)[:10] + ".md"))
            for data, line, _ in stm.iter_log_blocks(path):  # as boot has always read
                data = data.replace(b"\r\n", b"\n")  # (a CRLF checkout's, as check reads)
                for kind, *item in stm.parse_log(data, line):
                    if kind == "entry":
                        body = b"".join(item[0].raw_body).decode("utf-8", "replace")
                        every.append(stm.recall_words(body))
        found, unseen, unseen_words = stm.recall_log_entries(opened_store, query)
        assert found == [words for words in every if set(words) & set(query)], trial
        assert unseen == len(every) - len(found)
        assert unseen_words == sum(map(len, every)) - sum(map(len, found))
        refs = [stm.recall_words("OAuth login tokens"), stm.recall_words("deploy caf\u00e9")]
        scores = stm.bm25_scores(query, refs + found, unseen=(unseen, unseen_words))
        expected = stm.bm25_scores(query, refs + every)
        kept = [i for i, words in enumerate(refs + every) if i < 2 or set(words) & set(query)]
        assert scores == [expected[i] for i in kept]
        assert all(expected[i] == 0.0 for i in range(len(expected)) if i not in kept)


def test_recall_reads_a_log_checked_out_with_crlf_line_ends(store, run):
    """core.autocrlf turns a day log's line ends into CRLF; its entries are intact, and
    boot's recall finds the work's words in them as check reads them."""
    run("log", "the OAuth login refresh is fixed in auth.py")
    for path in (store / ".stacks" / "logs").glob("*.md"):
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    run("session", "new", "--name", "OAuth login refresh")
    opened = stm.open_store(stacks=str(store / ".stacks"))
    found, unseen, _ = stm.recall_log_entries(opened, stm.recall_words("OAuth login refresh"))
    assert unseen == 0 and len(found) == 1 and {"oauth", "login", "refresh"} <= set(found[0])


def test_boot_tokenises_only_the_log_entries_holding_the_works_words(store, run, monkeypatch):
    """60 entries today, 3 of them about the work: boot tokenises those 3 (the others are
    counted in bulk) and parses no log entry by entry."""
    for n in range(60):
        topic = "OAuth login refresh" if n % 20 == 0 else "the CSS grid gap"
        assert run("log", f"filler{n}: {topic}").code == 0
    run("session", "new", "--name", "OAuth login tokens")
    tokenised, parsed = [], []
    recall_words, parse_log = stm.recall_words, stm.parse_log

    def counted_words(text):
        tokenised.extend(["log"] if "filler" in text else [])
        return recall_words(text)

    def counted_parse(*args):
        parsed.append(args)
        return parse_log(*args)

    monkeypatch.setattr(stm, "recall_words", counted_words)
    monkeypatch.setattr(stm, "parse_log", counted_parse)
    boot = run("boot").out
    assert "3 log entries match this work in the last 14 days" in boot
    assert len(tokenised) == 3 and parsed == []


LOREM = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "


def write_log(path: Path, entries: int | None = None, size: int | None = None, torn=False):
    body = "\n".join((LOREM * 2)[:110] for _ in range(50)) if size else "a short entry"
    written, n = 0, 0
    with open(path, "w") as f:
        while (entries is not None and n < entries) or (size is not None and written < size):
            eid = f"{n:08x}"
            stamp = f"2026-11-20T{(n // 3600) % 24:02d}:{(n // 60) % 60:02d}:{n % 60:02d}Z"
            entry = (
                f"## {stamp} · tester <!-- stm:entry {eid} -->\n\nentry {n}\n{body}\n\n"
                f"<!-- stm:end {eid} -->\n"
            )
            text = ("\n" if n else "") + entry
            f.write(text)
            written += len(text)
            n += 1
        if torn:
            torn_head = "## 2026-11-20T23:59:59Z · tester <!-- stm:entry ffffffff -->"  # date-safe
            f.write(f"\n{torn_head}\n\ntorn\n")


def test_check_is_linear_on_a_log_with_a_torn_last_entry(store):
    log = store / ".stacks" / "logs" / "2026-11-20.md"  # date-safe: any past day
    write_log(log, entries=16_000, torn=True)
    try:
        done = run_stm("check", "--json", cwd=store, timeout=20, env={"CI": "1"})
    except subprocess.TimeoutExpired:
        pytest.fail("check did not finish in 20 s on 16,000 entries and a torn tail (quadratic)")
    rules = [f["rule"] for f in json.loads(done.stdout)["findings"]]
    assert rules == ["log-torn"], rules


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("big")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STM_FSYNC", "0")
        new_store(root, handoff=False)
    log = root / ".stacks" / "logs" / "2026-11-20.md"  # date-safe: any past day
    write_log(log, size=60 * 1024 * 1024)
    return root


MEASURE = (
    "import resource, subprocess, sys; "
    "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, done.returncode, "
    "repr(done.stderr[-300:]))"
)


@pytest.mark.parametrize(
    "argv",
    [["status"], ["check"], ["search", "zzzz-not-there"], ["export", "-o", "OUT"]],
    ids=["status", "check", "search", "export"],
)
def test_big_files_are_streamed_in_bounded_memory(big_store, tmp_path, argv):
    argv = [a.replace("OUT", str(tmp_path / "m.zip")) for a in argv]
    done = run_process(
        [sys.executable, "-c", MEASURE, sys.executable, STM_PY, *argv],
        cwd=big_store,
        timeout=120,
        env={"CI": "1", "STM_FSYNC": "0"},
    )
    peak_kib, code, err = done.stdout.split(" ", 2)
    assert "Traceback" not in err and code in ("0", "1"), (code, err)
    assert int(peak_kib) < 100 * 1024, f"{argv}: peak {int(peak_kib) // 1024} MiB on a 60 MB log"


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


# ---- the transcript window: decoded line by line without load_json's wrapper -----------


def reference_entry(line: bytes):
    """parse_entry as it was: load_json on the stripped, decoded line."""
    line = line.strip()
    if len(line) > stm.TRANSCRIPT_LINE_MAX_BYTES and line.startswith(b"{"):
        line = stm.BASE64_DATA_RE.sub(b'"data": ""', line)
    if not line.startswith(b"{") or len(line) > stm.TRANSCRIPT_LINE_MAX_BYTES:
        return None
    try:
        entry = stm.load_json(line.decode("utf-8", "replace"), bounded=False)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def reference_span(fd: int, offset: int, count: int) -> bytes:
    """read_span as it was: a megabyte at a time."""
    chunks = []
    while count > 0:
        chunk = stm.pread(fd, min(count, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        count -= len(chunk)
    return b"".join(chunks)


# Lines a decoder may take one way and load_json another: what follows the object,
# whitespace JSON has or has not, constants, non-objects, a BOM, bad UTF-8, depth.
ODD_LINES = [
    b"",
    b"   ",
    b"{}",
    b'{"type": "user"} ',
    b'{"type": "user"}\t\r',
    b'{"type": "user"}\x0b',
    b'{"type": "user"}\x0c\x0b ',
    b'{"type": "user"} x',
    b'{"type": "user"}{}',
    b'{"type": "user"} \xc2\xa0',
    b'{"a": NaN}',
    b'{"a": Infinity}',
    b'{"a": 1e999}',
    b'{"a": -0.0, "b": 1.5e3}',
    b"[1, 2]",
    b'"text"',
    b"\xef\xbb\xbf{}",
    b'{"a": "\xff\xfe \xe2\x82"}',
    b'{"a": "\\ud800"}',
    b'{"a": "\\u0000", "b": "tab\tinside"}',
    b'{"a": ' + b"[" * 50000 + b"]" * 50000 + b"}",
    b'{"a": 1,}',
    b'{"a" 1}',
    b"{" + b'"k": "' + b"x" * (stm.TRANSCRIPT_LINE_MAX_BYTES + 10) + b'"}',
    b'{"type": "user", "data": "' + b"A" * (stm.TRANSCRIPT_LINE_MAX_BYTES + 10) + b'"}',
]


def random_entry_line(rng: random.Random, cwd: str, n: int) -> bytes:
    """One transcript line: a Claude Code entry of a random kind, sometimes spoiled."""
    call = f"t{rng.randint(0, 40)}"
    kind = rng.choice(["user", "assistant", "assistant", "system", "summary", "progress"])
    blocks = rng.choice(
        [
            [{"type": "text", "text": rng.choice(["fix the parser", "continue", "done"])}],
            [{"type": "tool_use", "id": call, "name": "Bash", "input": {"command": "pytest"}}],
            [{"type": "tool_use", "id": call, "name": "Edit", "input": {"file_path": "a.py"}}],
            [{"type": "tool_result", "tool_use_id": call, "content": "ok " * rng.randint(0, 400)}],
            [
                {
                    "type": "tool_result",
                    "tool_use_id": call,
                    "is_error": True,
                    "content": rng.choice(["Exit code 1\nFAILED t.py", "[Request interrupted"]),
                }
            ],
        ]
    )
    entry = {"type": kind, "uuid": f"u{n}", "sessionId": "s1", "cwd": cwd}
    entry["timestamp"] = rng.choice(["2020-01-01T00:00:00Z", "garbage", 5])
    entry["message"] = {"role": kind, "content": blocks}
    line = json.dumps(entry, ensure_ascii=rng.random() < 0.5).encode()
    spoil = rng.random()
    if spoil < 0.05:
        line = line[: rng.randint(0, len(line))]
    elif spoil < 0.15:
        line += rng.choice([b" ", b"\x0b", b" x", b"}", b"\t\r", b"\xc2\xa0"])
    elif spoil < 0.2:
        line = rng.choice(ODD_LINES)
    return line


def test_a_transcript_line_decodes_as_load_json_decodes_it():
    rng = random.Random(37)
    lines = list(ODD_LINES)
    lines += [random_entry_line(rng, "/w", n) for n in range(2000)]
    for line in lines:
        assert repr(stm.parse_entry(line)) == repr(reference_entry(line)), line[:200]


def test_a_transcript_reads_the_same_as_with_load_json(tmp_path, monkeypatch):
    """Every corpus transcript and a few hundred random ones, whole and through a small
    window, read as the reader read them before it decoded lines itself."""
    from transcripts import CORPUS, write_jsonl

    paths = []
    for _, build in CORPUS.values():
        entries, _ = build(str(tmp_path))
        paths.append(write_jsonl(tmp_path / f"{len(paths)}.jsonl", entries))
    rng = random.Random(38)
    for n in range(300):
        path = tmp_path / f"random-{n}.jsonl"
        lines = [random_entry_line(rng, str(tmp_path), i) for i in range(rng.randint(0, 40))]
        path.write_bytes(b"\n".join(lines) + rng.choice([b"", b"\n"]))
        paths.append(str(path))
    windows = [(stm.TRANSCRIPT_TAIL_BYTES, 0), (4096, 1024), (700, 300)]

    def read_all():
        return [
            repr(stm.read_transcript(path, max_bytes=most, head_bytes=head, root=str(tmp_path)))
            for path in paths
            for most, head in windows
        ]

    now = read_all()
    monkeypatch.setattr(stm, "parse_entry", reference_entry)
    monkeypatch.setattr(stm, "read_span", reference_span)
    assert now == read_all()


def test_the_window_is_read_in_one_go_and_decoded_without_load_json(tmp_path, monkeypatch):
    """The recovering start's cost (spec/performance.md): a window of tool calls and
    results is read with one pread and decoded line by line by the shared decoder, not
    through load_json (whose wrapper cost a third of the decoding)."""
    from transcripts import Claude, write_jsonl

    claude, entries = Claude(str(tmp_path)), []
    for n in range(300):
        call = {"type": "tool_use", "id": f"t{n}", "name": "Edit", "input": {"file_path": "a.py"}}
        entries.append(claude.entry("assistant", [call]))
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok " * 1000}
        entries.append(claude.entry("user", [result]))
    path = write_jsonl(tmp_path / "t.jsonl", entries)
    calls = {"load_json": 0, "pread": 0}

    def counted(name, real):
        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return call

    for name in calls:
        monkeypatch.setattr(stm, name, counted(name, getattr(stm, name)))
    found = stm.read_transcript(path)
    assert found.files == ["a.py"] and found.position.startswith(str(Path(path).stat().st_size))
    assert calls == {"load_json": 0, "pread": 1}


# ---- the recovering start reads what is new (issue 37 item 9) ---------------------------


def test_a_recovering_start_decodes_only_the_lines_written_since_the_last_capture(
    store, run, tmp_path_factory, monkeypatch
):
    """spec/performance.md: a start that recovers a session captured before reads and
    decodes only what its transcript gained since (one line here), not the window's
    thousands of lines; the capture that kept the reader's state decoded them all."""
    from transcripts import Claude, write_jsonl

    folder = tmp_path_factory.mktemp("client")
    sid, new = "2fc9b73b-1111-4000-8000-000000000001", "7a7a7a7a-2222-4000-8000-000000000002"
    c = Claude(str(store), sid)
    entries = [c.user("port the parser")]
    for n in range(1000):
        entries.append(c.call(f"t{n}", "Edit", file_path=f"{store}/m{n % 30}.py"))
        entries.append(c.result(f"t{n}", "ok " * 200))
    path = write_jsonl(folder / f"{sid}.jsonl", entries)
    counts = {"feed": 0, "parse_entry": 0, "bytes": 0}
    real_feed, real_parse, real_span = stm.TranscriptReader.feed, stm.parse_entry, stm.read_span

    def feed(reader, entry):
        counts["feed"] += 1
        return real_feed(reader, entry)

    def parse(line):
        counts["parse_entry"] += 1
        return real_parse(line)

    def span(fd, at, count):
        data = real_span(fd, at, count)
        counts["bytes"] += len(data)
        return data

    monkeypatch.setattr(stm.TranscriptReader, "feed", feed)
    monkeypatch.setattr(stm, "parse_entry", parse)
    monkeypatch.setattr(stm, "read_span", span)

    def hook(event, session, **extra):
        body = {"session_id": session, "transcript_path": str(folder / f"{session}.jsonl")}
        body.update(cwd=str(store), hook_event_name=event, **extra)
        for key in counts:
            counts[key] = 0
        assert run("capture", "--client", "claude", stdin=json.dumps(body)).code == 0
        return dict(counts)

    first = hook("PreCompact", sid)
    assert first["feed"] == 2001 and first["parse_entry"] >= 2001
    line = c.say("the parser is ported")
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
    start = hook("SessionStart", new, source="startup")
    assert "- Last message: the parser is ported" in log_text(store)  # recovered
    assert start["feed"] == 1  # the one line written since
    # That line, the last entry's line checked, the state's mark found: a few decodes, and
    # (besides the probe that the transcript is this project's, 64 KiB at each end) only
    # the bytes from the last entry's line on.
    assert start["parse_entry"] <= 6
    assert start["bytes"] <= 2 * stm.TRANSCRIPT_PROBE_BYTES + 2 * len(json.dumps(line)) + 8192
