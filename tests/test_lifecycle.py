"""The memory lifecycle: facts, config.json, `stm compact`, `stm digest`, `note --ref`.

The contract is spec/memory-layers.md ("Facts", "Config", "Compaction", "Staleness and
digest" and the check rules `fact-current`, `config-invalid`, `memory-over-threshold`,
`compact-duplicate`), spec/json.md (the `fact`, `compact` and `digest` keys) and
spec/merge.md (fact blocks merge per key). Wherever output depends on the time, the clock
(`stm.utc_now`) is pinned.

Process-level tests (concurrent `fact set`, a compact killed between its steps, two git
clones that compact independently) run stm in real processes; the rest run in-process.
"""

from __future__ import annotations

import collections
import functools
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import IDENTITY, ROOT, STM_PY, TODAY, snapshot
from helpers import PROC_ENV, check_findings, isolated_git_env, ok, read, rules, write_config
from helpers import git as shared_git

import stm

SPEC_FACTS = (
    "# Facts\n"
    "\n"
    "## primary_language\n"
    "**Current:** Go\n"
    "\n"
    "**History:**\n"
    "- 2025-01-15T12:00:00Z: Go\n"
    "  - *Correction: User clarified they've switched primarily to Go*\n"
    "- 2025-01-03T00:46:00Z: Python\n"
)
WHY = "User clarified they've switched primarily to Go"
FAKE_TOKEN = "ghp_" + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"  # 36 letters: the GitHub pattern
MEMORY_PATH = ".stacks/MEMORY.md"
FACTS_PATH = ".stacks/refs/facts.md"


# ---- helpers ---------------------------------------------------------------------------


def pin(monkeypatch, stamp: str) -> float:
    """Stop the clock at `stamp` (YYYY-MM-DDTHH:MM:SSZ); returns its epoch seconds."""
    moment = stm.parse_iso(stamp)
    assert moment is not None, stamp
    monkeypatch.setattr(stm, "utc_now", lambda: moment)
    return moment


def memory_text(n_next: int, *, last_updated: str = "2026-11-22", extra: str = "") -> str:
    """A MEMORY.md whose Next Steps holds `n_next` bullets, `- step N` newest (highest) on
    top, as `stm note` writes them."""
    steps = "\n".join(f"- step {n}" for n in range(n_next, 0, -1))
    return (
        "# Session Memory\n\n"
        "## Status\n\nParser port half done.\n\n"
        "## Observations\n\nThe old grammar has two precedence bugs.\n\n"
        "## Open Questions\n\nNone yet.\n\n"
        f"{extra}"
        "## Next Steps\n\n"
        f"{steps}\n\n"
        "## Last Updated\n\n"
        f"{last_updated}\n"
    )


def write_memory(store: Path, text: str) -> None:
    (store / ".stacks" / "MEMORY.md").write_text(text)


def log_entries(store: Path) -> list:
    """Every log entry of every day file, in file order: (file name, LogEntry)."""
    entries = []
    for path in sorted((store / ".stacks" / "logs").glob("*.md")):
        for kind, *rest in stm.parse_log(path.read_bytes()):
            assert kind == "entry", (path, rest)
            entries.append((path.name, rest[0]))
    return entries


def entry_text(entry) -> str:
    return "\n".join(entry.body).strip("\n")


def fact_block(store: Path, block: str = "facts"):
    """The parsed block: [(key, Fact)], every section in the fact format."""
    text = read(store, f".stacks/refs/{block}.md")
    _, sections = stm.parse_fact_block(text)
    parsed = [(key, fact) for key, fact, _, _ in sections]
    assert all(fact is not None for _, fact in parsed), text
    return parsed


# Independent reading of bullets (not stm's): a top-level bullet is a `- `/`* ` line at
# column 0 plus the non-blank indented lines directly below it.


def split_sections(text: str) -> list[tuple[str, list[str]]]:
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in text.split("\n"):
        if line.startswith("## "):
            sections.append((line[3:].strip(), []))
        else:
            sections[-1][1].append(line)
    return sections


def items_of(lines: list[str]) -> list[tuple[str, ...]]:
    items: list[list[str]] = []
    open_item = False
    for line in lines:
        if line.startswith(("- ", "* ")):
            items.append([line])
            open_item = True
        elif open_item and line[:1] in (" ", "\t") and line.strip():
            items[-1].append(line)
        else:
            open_item = False
    return [tuple(item) for item in items]


def section_items(text: str) -> dict[str, list[tuple[str, ...]]]:
    return {name: items_of(body) for name, body in split_sections(text) if name}


def other_lines(text: str) -> list[str]:
    """The non-blank lines that belong to no bullet: headings, prose, comments."""
    kept, open_item = [], False
    for line in text.split("\n"):
        if line.startswith(("- ", "* ")):
            open_item = True
        elif open_item and line[:1] in (" ", "\t") and line.strip():
            pass
        else:
            open_item = False
            if line.strip():
                kept.append(line)
    return kept


COMPACT_MARKER = re.compile(r" <!-- stm:compact \S+ \S+ -->$")


def compact_blocks(text: str) -> list[tuple[str, str, list[tuple[str, ...]]]]:
    """The (path, section, items) blocks of a `stm compact` log entry's text (the visible
    header, without the marker at its end)."""
    blocks = []
    for line in text.split("\n"):
        header = COMPACT_MARKER.sub("", line)
        if header != line and header.startswith("moved from "):
            assert header.endswith(" by stm compact:"), line
            path, _, section = header[len("moved from ") : -len(" by stm compact:")].partition(
                " ## "
            )
            blocks.append((path, section, []))
        else:
            assert blocks, text
            blocks[-1][2].append(line)
    return [(path, section, items_of(lines)) for path, section, lines in blocks]


def all_items_memory_and_log(store: Path) -> collections.Counter:
    """The bullets of MEMORY.md plus the items of every `stm compact` log entry."""
    counter: collections.Counter = collections.Counter()
    for items in section_items(read(store, MEMORY_PATH)).values():
        counter.update(items)
    for _, entry in log_entries(store):
        for _, _, items in compact_blocks(entry_text(entry)):
            counter.update(items)
    return counter


# ---- facts: format -----------------------------------------------------------------------


def test_fact_block_format_is_the_spec_example_byte_for_byte(store, run, monkeypatch):
    pin(monkeypatch, "2025-01-03T00:46:00Z")
    ok(run("fact", "set", "primary_language", "Python"))
    assert read(store, FACTS_PATH) == (
        "# Facts\n\n## primary_language\n**Current:** Python\n\n**History:**\n"
        "- 2025-01-03T00:46:00Z: Python\n"
    )
    pin(monkeypatch, "2025-01-15T12:00:00Z")
    ok(run("fact", "set", "primary_language", "Go", "--why", WHY))
    assert read(store, FACTS_PATH) == SPEC_FACTS


def test_fact_set_json_and_a_first_set_with_why_is_a_note(store, run, monkeypatch):
    pin(monkeypatch, "2025-01-03T00:46:00Z")
    result = ok(run("fact", "set", "user_name", "Ann", "--why", "she said so", "--json"))
    data = json.loads(result.out)
    assert set(data) == {"schema_version", "path", "key", "value", "changed"}
    assert data == {
        "schema_version": 1,
        "path": FACTS_PATH,
        "key": "user_name",
        "value": "Ann",
        "changed": True,
    }
    assert read(store, FACTS_PATH) == (
        "# Facts\n\n## user_name\n**Current:** Ann\n\n**History:**\n"
        "- 2025-01-03T00:46:00Z: Ann\n  - *Note: she said so*\n"
    )


def test_each_reason_stays_under_the_value_it_explains(store, run, monkeypatch):
    for stamp, value, why in (
        ("2025-01-01T00:00:00Z", "Python", None),
        ("2025-01-02T00:00:00Z", "Go", "switched"),
        ("2025-01-03T00:00:00Z", "Rust", "switched again"),
        ("2025-01-04T00:00:00Z", "Go", None),
    ):
        pin(monkeypatch, stamp)
        ok(run("fact", "set", "primary_language", value, *(["--why", why] if why else [])))
    assert read(store, FACTS_PATH) == (
        "# Facts\n\n## primary_language\n**Current:** Go\n\n**History:**\n"
        "- 2025-01-04T00:00:00Z: Go\n"
        "- 2025-01-03T00:00:00Z: Rust\n"
        "  - *Correction: switched again*\n"
        "- 2025-01-02T00:00:00Z: Go\n"
        "  - *Correction: switched*\n"
        "- 2025-01-01T00:00:00Z: Python\n"
    )
    assert check_findings(run)[0] == 0


def test_setting_the_current_value_again_changes_nothing(store, run, monkeypatch):
    pin(monkeypatch, "2025-01-03T00:46:00Z")
    ok(run("fact", "set", "primary_language", "Python"))
    pin(monkeypatch, "2025-01-15T12:00:00Z")
    ok(run("fact", "set", "primary_language", "Go", "--why", WHY))
    before = snapshot(store)
    pin(monkeypatch, "2025-02-01T00:00:00Z")
    result = ok(run("fact", "set", "primary_language", "Go"))
    assert "nothing changed" in result.out
    assert snapshot(store) == before
    result = ok(run("fact", "set", "primary_language", "Go", "--why", "again", "--json"))
    assert json.loads(result.out)["changed"] is False
    assert snapshot(store) == before
    assert read(store, FACTS_PATH) == SPEC_FACTS


# ---- facts: get, list, rm, --block ---------------------------------------------------------


@pytest.fixture
def aux(tmp_path_factory):
    """A folder outside the project, for scripts and reference copies."""
    return tmp_path_factory.mktemp("aux")


@pytest.fixture
def two_facts(store, run, monkeypatch):
    pin(monkeypatch, "2025-01-03T00:46:00Z")
    ok(run("fact", "set", "primary_language", "Python"))
    pin(monkeypatch, "2025-01-15T12:00:00Z")
    ok(run("fact", "set", "primary_language", "Go", "--why", WHY))
    pin(monkeypatch, "2025-01-16T08:00:00Z")
    ok(run("fact", "set", "user_name", "Ann"))
    return store


def test_fact_get_value_history_and_json(two_facts, run):
    assert ok(run("fact", "get", "primary_language")).out == "Go\n"
    history = ok(run("fact", "get", "primary_language", "--history")).out
    lines = history.splitlines()
    assert lines[0] == "Go"
    assert "2025-01-15T12:00:00Z" in lines[1] and lines[1].endswith("Go")
    assert WHY in lines[2]  # the reason for Go, under Go
    assert "2025-01-03T00:46:00Z" in lines[3] and lines[3].endswith("Python")
    data = json.loads(ok(run("fact", "get", "primary_language", "--json")).out)
    assert data == {
        "schema_version": 1,
        "key": "primary_language",
        "value": "Go",
        "updated": "2025-01-15T12:00:00Z",
    }
    data = json.loads(ok(run("fact", "get", "primary_language", "--history", "--json")).out)
    assert set(data) == {"schema_version", "key", "value", "updated", "history"}
    assert [(h["timestamp"], h["value"]) for h in data["history"]] == [
        ("2025-01-15T12:00:00Z", "Go"),
        ("2025-01-03T00:46:00Z", "Python"),
    ]
    assert data["history"][1]["notes"] == []
    assert len(data["history"][0]["notes"]) == 1 and WHY in data["history"][0]["notes"][0]
    missing = run("fact", "get", "nope")
    assert missing.code == 1 and missing.out == "" and "nope" in missing.err


def test_fact_list_text_and_json(two_facts, run):
    assert ok(run("fact", "list")).out == "primary_language: Go\nuser_name: Ann\n"
    data = json.loads(ok(run("fact", "list", "--json")).out)
    assert set(data) == {"schema_version", "block", "facts"}
    assert data["block"] == "facts"
    assert data["facts"] == [
        {"key": "primary_language", "value": "Go", "updated": "2025-01-15T12:00:00Z"},
        {"key": "user_name", "value": "Ann", "updated": "2025-01-16T08:00:00Z"},
    ]


def test_fact_rm_moves_the_history_into_todays_log_with_the_reason(two_facts, run, monkeypatch):
    pin(monkeypatch, "2025-01-20T09:30:00Z")
    result = ok(run("fact", "rm", "primary_language", "--why", "no longer tracked", "--json"))
    data = json.loads(result.out)
    assert set(data) == {"schema_version", "path", "key", "removed"}
    assert data["path"] == FACTS_PATH and data["key"] == "primary_language" and data["removed"]
    block = read(two_facts, FACTS_PATH)
    assert "primary_language" not in block and "Python" not in block
    assert [key for key, _ in fact_block(two_facts)] == ["user_name"]
    entries = log_entries(two_facts)
    assert [name for name, _ in entries] == ["2025-01-20.md"]
    text = entry_text(entries[0][1])
    assert entries[0][1].stamp == "2025-01-20T09:30:00Z" and entries[0][1].complete
    assert "no longer tracked" in text
    for line in (
        "**Current:** Go",
        "- 2025-01-15T12:00:00Z: Go",
        "- 2025-01-03T00:46:00Z: Python",
        f"  - *Correction: {WHY}*",
    ):
        assert line in text.split("\n"), (line, text)
    assert ok(run("fact", "list")).out == "user_name: Ann\n"
    assert check_findings(run)[0] == 0  # the entry (which quotes the section) is a valid log entry
    # An unknown key, or no reason, is refused and changes nothing.
    before = snapshot(two_facts)
    assert run("fact", "rm", "primary_language", "--why", "again").code == 1
    assert run("fact", "rm", "user_name").code == 2
    assert snapshot(two_facts) == before


def test_block_option_names_another_ref(store, run, monkeypatch):
    pin(monkeypatch, "2025-01-03T00:46:00Z")
    ok(run("fact", "set", "--block", "people", "owner", "Ann"))
    assert not (store / FACTS_PATH).exists()
    text = read(store, ".stacks/refs/people.md")
    assert text.startswith("# ") and text.splitlines()[0].lower() == "# people"
    assert "## owner\n**Current:** Ann\n\n**History:**\n- 2025-01-03T00:46:00Z: Ann\n" in text
    assert ok(run("fact", "get", "--block", "people", "owner")).out == "Ann\n"
    assert ok(run("fact", "list", "--block", "people")).out == "owner: Ann\n"
    assert json.loads(ok(run("fact", "list", "--block", "people", "--json")).out)["block"] == (
        "people"
    )
    assert run("fact", "get", "owner").code == 1  # not in the default block
    before = snapshot(store)
    for bad in ("../x", "a/b", "", ".hidden"):
        assert run("fact", "set", "--block", bad, "k", "v").code == 2, bad
    assert snapshot(store) == before


# ---- facts: refusals ------------------------------------------------------------------------


@pytest.mark.parametrize("with_block", [False, True], ids=["no-block", "block-exists"])
@pytest.mark.parametrize(
    "key, value, code",
    [
        ("Bad Key", "v", 2),
        ("../x", "v", 2),
        ("", "v", 2),
        ("k" * 65, "v", 2),
        ("Primary_language", "v", 2),
        ("_leading", "v", 2),
        ("primary_language", "two\nlines", 2),
        ("primary_language", "two\u2028lines", 2),
        ("primary_language", "two\u2029lines", 2),
        ("primary_language", "", 2),
        ("primary_language", "   ", 2),
        ("primary_language", "x" * 501, 2),
        ("primary_language", FAKE_TOKEN, 1),
    ],
    ids=[
        "space",
        "traversal",
        "empty-key",
        "65-chars",
        "uppercase",
        "underscore-first",
        "newline",
        "u2028",
        "u2029",
        "empty-value",
        "blank-value",
        "501-chars",
        "secret",
    ],
)
def test_bad_keys_and_values_are_refused_and_change_nothing(
    store, run, monkeypatch, key, value, code, with_block
):
    pin(monkeypatch, "2025-01-03T00:46:00Z")
    if with_block:
        ok(run("fact", "set", "primary_language", "Python"))
    before = snapshot(store)
    result = run("fact", "set", key, value)
    assert result.code == code, result
    assert result.err.startswith("stm") and result.err.count("\n") == 1, result
    if code == 1:
        assert FAKE_TOKEN not in result.err  # at most a prefix of the secret is shown
    assert snapshot(store) == before


def test_bad_why_is_refused_and_limits_are_inclusive(store, run, monkeypatch):
    pin(monkeypatch, "2025-01-03T00:46:00Z")
    ok(run("fact", "set", "primary_language", "Python"))
    before = snapshot(store)
    assert run("fact", "set", "primary_language", "Go", "--why", "a\nb").code == 2
    assert run("fact", "set", "primary_language", "Go", "--why", FAKE_TOKEN).code == 1
    assert snapshot(store) == before
    # The boundaries themselves are accepted: a 64-character key, a 500-character value.
    ok(run("fact", "set", "k" * 64, "x" * 500))
    ok(run("fact", "set", "0.a-b_c", "v"))
    assert ok(run("fact", "get", "k" * 64)).out == "x" * 500 + "\n"
    # --allow-secret lets a look-alike through.
    ok(run("fact", "set", "token_example", FAKE_TOKEN, "--allow-secret"))


# ---- facts: boot, search, check, merge -------------------------------------------------------


def test_boot_indexes_a_block_by_its_keys(two_facts, run):
    out = ok(run("boot")).out
    assert "- refs/facts.md — Facts: primary_language, user_name" in out.splitlines()
    refs = json.loads(ok(run("boot", "--json")).out)["sections"]["refs"]
    assert [(r["title"], r["summary"]) for r in refs] == [("Facts", "primary_language, user_name")]


def test_search_finds_a_fact_value(two_facts, run):
    result = ok(run("search", "Ann"))
    assert ".stacks/refs/facts.md" in result.out and "Ann" in result.out
    matches = json.loads(ok(run("search", "Python", "--json")).out)["matches"]
    in_facts = [m for m in matches if m["path"] == FACTS_PATH]
    assert in_facts and all(m["layer"] == "refs" for m in in_facts)
    assert any("2025-01-03T00:46:00Z: Python" in m["text"] for m in in_facts)


def test_check_reports_a_hand_edited_current_value(two_facts, run):
    code, found = check_findings(run)
    assert code == 0 and "fact-current" not in rules(found)
    path = two_facts / FACTS_PATH
    path.write_text(path.read_text().replace("**Current:** Go", "**Current:** Rust"))
    code, found = check_findings(run)
    assert code == 1
    hits = [f for f in found if f["rule"] == "fact-current"]
    assert len(hits) == 1, found
    assert hits[0]["severity"] == "error" and hits[0]["path"] == FACTS_PATH
    assert "primary_language" in hits[0]["message"]
    # `fact set` brings them back together.
    ok(run("fact", "set", "primary_language", "Zig"))
    assert "fact-current" not in rules(check_findings(run)[1])


def test_merge_file_merges_fact_blocks_per_key(store, run, aux):
    base = SPEC_FACTS
    ours = base.replace("**Current:** Go", "**Current:** Rust").replace(
        "**History:**\n", "**History:**\n- 2025-02-01T00:00:00Z: Rust\n"
    )
    theirs = (
        base.replace("**Current:** Go", "**Current:** Zig").replace(
            "**History:**\n", "**History:**\n- 2025-03-01T00:00:00Z: Zig\n"
        )
        + "\n## user_name\n**Current:** Ann\n\n**History:**\n- 2025-01-16T08:00:00Z: Ann\n"
    )
    paths = []
    for name, text in (("base", base), ("ours", ours), ("theirs", theirs)):
        path = aux / f"{name}.md"
        path.write_text(text)
        paths.append(str(path))
    ok(run("merge-file", *paths))
    merged = Path(paths[1]).read_text()
    _, sections = stm.parse_fact_block(merged)
    facts = {key: fact for key, fact, _, _ in sections}
    assert set(facts) == {"primary_language", "user_name"}
    lang = facts["primary_language"]
    assert lang.current == "Zig"  # the newest entry's value
    assert [(s, v) for s, v, _ in lang.history] == [
        ("2025-03-01T00:00:00Z", "Zig"),
        ("2025-02-01T00:00:00Z", "Rust"),
        ("2025-01-15T12:00:00Z", "Go"),
        ("2025-01-03T00:46:00Z", "Python"),
    ]
    assert lang.history[2][2] == [f"  - *Correction: {WHY}*"]  # under Go, as set
    assert facts["user_name"].current == "Ann"


# ---- facts: concurrency ---------------------------------------------------------------------

FACT_WORKER = """\
import contextlib, io, os, sys
sys.path.insert(0, {root!r})
import stm
writer, count = sys.argv[1], int(sys.argv[2])
for n in range(count):
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = stm.main(["fact", "set", "shared", "w%s-n%d" % (writer, n)])
    if code != 0:
        sys.stderr.write(err.getvalue())
        sys.exit(code)
"""


def test_8_processes_setting_one_fact_lose_no_history_entry(store, aux):
    script = aux / "fact_worker.py"
    script.write_text(FACT_WORKER.format(root=str(ROOT)))
    writers, count = 8, 20
    procs = [
        subprocess.Popen(
            [sys.executable, "-S", str(script), str(w), str(count)],
            cwd=store,
            env=PROC_ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for w in range(writers)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    facts = fact_block(store)
    assert [key for key, _ in facts] == ["shared"]
    fact = facts[0][1]
    values = [value for _, value, _ in fact.history]
    expected = {f"w{w}-n{n}" for w in range(writers) for n in range(count)}
    assert len(values) == writers * count  # every change has its entry
    assert set(values) == expected  # none lost, none duplicated
    assert fact.current == values[0]
    for w in range(writers):  # each writer's entries newest first, in its own order
        mine = [int(v.split("-n")[1]) for v in values if v.startswith(f"w{w}-")]
        assert mine == list(range(count - 1, -1, -1))
    stamps = [stamp for stamp, _, _ in fact.history]
    assert stamps == sorted(stamps, reverse=True)
    assert all(stm.is_iso_utc(stamp) for stamp in stamps)
    result = subprocess.run(
        [sys.executable, str(STM_PY), "check"], cwd=store, env=PROC_ENV, capture_output=True
    )
    assert result.returncode == 0, result.stdout


# ---- config ---------------------------------------------------------------------------------


def test_no_config_file_means_the_defaults(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    assert not (store / ".stacks" / "config.json").exists()
    assert json.loads(ok(run("status", "--json")).out)["boot"]["budget"] == 2000
    assert json.loads(ok(run("boot", "--json")).out)["budget"] == 2000
    # default_section_limit 10: 11 bullets lose one.
    write_memory(store, memory_text(11))
    moved = json.loads(ok(run("compact", "--json")).out)["moved"]
    assert moved == [{"path": MEMORY_PATH, "section": "Next Steps", "lines": ["- step 1"]}]
    # consolidation_threshold 50: 50 bullets are fine, 51 are over.
    write_memory(store, memory_text(50))
    assert "memory-over-threshold" not in rules(check_findings(run)[1])
    write_memory(store, memory_text(51))
    assert "memory-over-threshold" in rules(check_findings(run)[1])
    # fact_history_limit 10: an 11th entry is the first one compact moves.
    for n in range(11):
        pin(monkeypatch, f"2025-01-{n + 1:02d}T00:00:00Z")
        ok(run("fact", "set", "counter", str(n)))
    write_memory(store, memory_text(3))
    moved = json.loads(ok(run("compact", "--json")).out)["moved"]
    assert moved == [
        {"path": FACTS_PATH, "section": "counter", "lines": ["- 2025-01-01T00:00:00Z: 0"]}
    ]


BAD_CONFIGS = {
    "not-json": "{",
    "not-an-object": "[1, 2]",
    "unknown-key": {"consolidation_treshold": 50},
    "zero-limit": {"default_section_limit": 0},
    "negative-limit": {"fact_history_limit": -1},
    "string-limit": {"consolidation_threshold": "50"},
    "float-limit": {"default_section_limit": 2.5},
    "bool-limit": {"default_section_limit": True},
    "zero-budget": {"boot_budget_tokens": 0},
    "negative-section-limit": {"section_limits": {"Next Steps": -1}},
    "string-section-limit": {"section_limits": {"Next Steps": "3"}},
    "section-limits-list": {"section_limits": [3]},
    "over-64-KiB": " " * 70000 + "{}",
}


@pytest.mark.parametrize("config", list(BAD_CONFIGS.values()), ids=list(BAD_CONFIGS))
def test_an_invalid_config_is_reported_and_compact_refuses(store, run, monkeypatch, config):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    write_memory(store, memory_text(30))
    write_config(store, config)
    code, found = check_findings(run)
    assert code == 1
    hits = [f for f in found if f["rule"] == "config-invalid"]
    assert hits, found
    assert all(f["severity"] == "error" and f["path"] == ".stacks/config.json" for f in hits)
    before = snapshot(store)
    for args in (("compact",), ("compact", "--dry-run"), ("compact", "--json")):
        result = run(*args)
        assert result.code == 1, result
        assert "config.json" in result.err
    assert snapshot(store) == before
    # Readers fall back to the defaults meanwhile.
    assert json.loads(ok(run("status", "--json")).out)["boot"]["budget"] == 2000
    assert ok(run("boot")).out.startswith("# stm memory boot")


def test_a_valid_config_is_not_reported(store, run):
    write_config(
        store,
        {
            "consolidation_threshold": 60,
            "default_section_limit": 5,
            "section_limits": {"Next Steps": 0},
            "fact_history_limit": 3,
            "boot_budget_tokens": 3000,
        },
    )
    code, found = check_findings(run)
    assert code == 0 and "config-invalid" not in rules(found)
    write_config(store, {})
    assert "config-invalid" not in rules(check_findings(run)[1])


def test_consolidation_threshold_warns_in_check_and_status(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    write_config(store, {"consolidation_threshold": 4})
    write_memory(store, memory_text(4))
    assert "memory-over-threshold" not in rules(check_findings(run)[1])
    status = json.loads(ok(run("status", "--json")).out)
    assert not any("stm compact" in w for w in status["warnings"])
    write_memory(store, memory_text(5))
    code, found = check_findings(run)
    hits = [f for f in found if f["rule"] == "memory-over-threshold"]
    assert code == 0 and len(hits) == 1  # a warning: check still passes
    assert hits[0]["severity"] == "warning" and hits[0]["path"] == MEMORY_PATH
    assert run("check", "--strict").code == 1
    status = json.loads(ok(run("status", "--json")).out)
    assert any("stm compact" in w and "5" in w for w in status["warnings"]), status["warnings"]
    text = ok(run("status")).out
    assert "stm compact" in text


def test_boot_budget_tokens_sets_the_budget(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    write_config(store, {"boot_budget_tokens": 1234})
    status = json.loads(ok(run("status", "--json")).out)
    assert status["boot"]["budget"] == 1234
    assert json.loads(ok(run("boot", "--json")).out)["budget"] == 1234
    assert not any("budget" in w for w in status["warnings"])
    write_config(store, {"boot_budget_tokens": 20})
    status = json.loads(ok(run("status", "--json")).out)
    assert status["boot"]["budget"] == 20
    assert status["boot"]["tokens"] > 20
    assert any("budget" in w for w in status["warnings"]), status["warnings"]
    assert "boot-budget" in rules(check_findings(run)[1])


# ---- compaction -----------------------------------------------------------------------------


def test_compact_moves_the_bottom_bullets_into_one_log_entry(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    before = memory_text(13, extra="## Decisions\n\n- keep ruff\n- keep pytest\n\n")
    write_memory(store, before)
    result = ok(run("compact"))
    assert "3 items" in result.out and "Next Steps" in result.out
    after = read(store, MEMORY_PATH)
    assert after == before.replace("- step 3\n- step 2\n- step 1\n", "")
    assert section_items(after)["Next Steps"] == [(f"- step {n}",) for n in range(13, 3, -1)]
    assert after.endswith("## Last Updated\n\n2026-11-22\n")  # untouched, not restamped
    entries = log_entries(store)
    assert len(entries) == 1
    name, entry = entries[0]
    assert name == "2026-11-23.md" and entry.complete and entry.stamp == "2026-11-23T10:00:00Z"
    assert entry_text(entry) == (
        "moved from .stacks/MEMORY.md ## Next Steps by stm compact: "
        "<!-- stm:compact MEMORY.md Next%20Steps -->\n\n- step 3\n- step 2\n- step 1"
    )
    # Within its limits now: a second run has nothing to do.
    state = snapshot(store)
    result = ok(run("compact"))
    assert "nothing to compact" in result.out
    assert snapshot(store) == state
    assert check_findings(run)[0] == 0


def test_compact_moves_continuation_lines_with_their_bullet(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    write_config(store, {"default_section_limit": 1})
    write_memory(
        store,
        "# Session Memory\n\n## Next Steps\n\n"
        "- top\n  more of top\n- middle\n  more of middle\n\tand a tab line\n- bottom\n\n"
        "## Last Updated\n\n2026-11-22\n",
    )
    ok(run("compact"))
    assert read(store, MEMORY_PATH) == (
        "# Session Memory\n\n## Next Steps\n\n- top\n  more of top\n\n"
        "## Last Updated\n\n2026-11-22\n"
    )
    ((_, entry),) = log_entries(store)
    assert entry_text(entry) == (
        "moved from .stacks/MEMORY.md ## Next Steps by stm compact: "
        "<!-- stm:compact MEMORY.md Next%20Steps -->\n\n"
        "- middle\n  more of middle\n\tand a tab line\n- bottom"
    )


def test_section_limits_are_per_section_and_case_insensitive(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    write_config(
        store,
        {"default_section_limit": 3, "section_limits": {"next STEPS": 5, "Decisions": 0}},
    )
    obs = "".join(f"- obs {n}\n" for n in range(6, 0, -1))
    decisions = "".join(f"- decision {n}\n" for n in range(2, 0, -1))
    write_memory(
        store,
        memory_text(8, extra=f"## Decisions\n\n{decisions}\n## Risks\n\n{obs}\n"),
    )
    result = json.loads(ok(run("compact", "--json")).out)
    assert set(result) == {"schema_version", "dry_run", "moved"}
    assert result["dry_run"] is False
    assert result["moved"] == [
        {
            "path": MEMORY_PATH,
            "section": "Decisions",
            "lines": ["- decision 2", "- decision 1"],
        },
        {"path": MEMORY_PATH, "section": "Risks", "lines": ["- obs 3", "- obs 2", "- obs 1"]},
        {
            "path": MEMORY_PATH,
            "section": "Next Steps",
            "lines": ["- step 3", "- step 2", "- step 1"],
        },
    ]
    items = section_items(read(store, MEMORY_PATH))
    assert items["Decisions"] == []
    assert items["Risks"] == [(f"- obs {n}",) for n in (6, 5, 4)]
    assert items["Next Steps"] == [(f"- step {n}",) for n in (8, 7, 6, 5, 4)]
    ((_, entry),) = log_entries(store)
    blocks = compact_blocks(entry_text(entry))
    assert [(p, s) for p, s, _ in blocks] == [
        (MEMORY_PATH, "Decisions"),
        (MEMORY_PATH, "Risks"),
        (MEMORY_PATH, "Next Steps"),
    ]


def test_last_updated_is_never_compacted(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    write_config(store, {"default_section_limit": 1, "section_limits": {"Last Updated": 0}})
    text = (
        "# Session Memory\n\n## Next Steps\n\n- one\n\n"
        "## Last Updated\n\n- 2026-11-22\n- 2026-11-21\n- 2026-11-20\n"
    )
    write_memory(store, text)
    before = snapshot(store)
    result = ok(run("compact"))
    assert "nothing to compact" in result.out
    assert snapshot(store) == before


def test_bullets_inside_a_code_fence_are_not_items(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    write_config(store, {"default_section_limit": 1})
    fence = "```\n- fenced a\n- fenced b\n```\n"
    write_memory(
        store,
        memory_text(3).replace("- step 1\n", f"- step 1\n\n{fence}"),
    )
    moved = json.loads(ok(run("compact", "--json")).out)["moved"]
    assert moved == [
        {"path": MEMORY_PATH, "section": "Next Steps", "lines": ["- step 2", "- step 1"]}
    ]
    after = read(store, MEMORY_PATH)
    assert fence in after and "- step 3\n" in after


def test_a_completed_compact_is_not_a_compact_duplicate_with_a_repeated_bullet(
    store, run, monkeypatch
):
    """The same bullet text at the top (kept) and at the bottom (moved) of a section: the
    compact finished, so check has nothing to report and --fix nothing to remove."""
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    write_config(store, {"default_section_limit": 3})
    write_memory(store, memory_text(3).replace("- step 1\n", "- step 1\n- step 3\n"))
    original = all_items_memory_and_log(store)
    ok(run("compact"))
    assert section_items(read(store, MEMORY_PATH))["Next Steps"] == [
        ("- step 3",),
        ("- step 2",),
        ("- step 1",),
    ]
    assert all_items_memory_and_log(store) == original
    assert "compact-duplicate" not in rules(check_findings(run)[1])
    before = read(store, MEMORY_PATH)
    run("check", "--fix")
    assert read(store, MEMORY_PATH) == before
    assert all_items_memory_and_log(store) == original


def test_a_bullet_noted_again_after_a_compact_is_not_a_compact_duplicate(store, run, monkeypatch):
    """A recurring step, moved to the log by an earlier compact and noted afresh later, is
    a new note, not a leftover of an interrupted compact: --fix must not delete it."""
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    write_memory(store, memory_text(12))
    ok(run("compact"))  # moves step 2 and step 1
    pin(monkeypatch, "2026-11-24T10:00:00Z")
    ok(run("note", "Next Steps", "step 1"))
    assert "compact-duplicate" not in rules(check_findings(run)[1])
    before = read(store, MEMORY_PATH)
    run("check", "--fix")
    assert read(store, MEMORY_PATH) == before
    assert section_items(before)["Next Steps"][0] == ("- step 1",)


def test_compact_keeps_the_newest_fact_history(store, run, monkeypatch):
    write_config(store, {"fact_history_limit": 2})
    for day, value, why in (
        (1, "Python", None),
        (2, "Go", "switched"),
        (3, "Rust", "switched again"),
        (4, "Zig", None),
    ):
        pin(monkeypatch, f"2025-01-0{day}T00:00:00Z")
        ok(run("fact", "set", "primary_language", value, *(["--why", why] if why else [])))
    pin(monkeypatch, "2025-01-05T00:00:00Z")
    ok(run("fact", "set", "user_name", "Ann"))
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    result = json.loads(ok(run("compact", "--json")).out)
    moved_lines = [
        "- 2025-01-02T00:00:00Z: Go",
        "  - *Correction: switched*",
        "- 2025-01-01T00:00:00Z: Python",
    ]
    assert result["moved"] == [
        {"path": FACTS_PATH, "section": "primary_language", "lines": moved_lines}
    ]
    facts = dict(fact_block(store))
    lang = facts["primary_language"]
    assert lang.current == "Zig"
    assert [(s, v) for s, v, _ in lang.history] == [
        ("2025-01-04T00:00:00Z", "Zig"),
        ("2025-01-03T00:00:00Z", "Rust"),
    ]
    assert facts["user_name"].current == "Ann"
    ((name, entry),) = log_entries(store)
    assert name == "2026-11-23.md"  # date-safe: pinned clock or id
    assert entry_text(entry) == (
        "moved from .stacks/refs/facts.md ## primary_language by stm compact: "
        "<!-- stm:compact refs/facts.md primary_language -->\n\n" + "\n".join(moved_lines)
    )
    assert check_findings(run)[0] == 0


def test_memory_and_facts_compact_into_one_entry(store, run, monkeypatch):
    write_config(store, {"fact_history_limit": 1})
    for day in (1, 2):
        pin(monkeypatch, f"2025-01-0{day}T00:00:00Z")
        ok(run("fact", "set", "counter", str(day)))
    write_memory(store, memory_text(12))
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    ok(run("compact"))
    ((_, entry),) = log_entries(store)
    blocks = compact_blocks(entry_text(entry))
    assert [(p, s) for p, s, _ in blocks] == [
        (MEMORY_PATH, "Next Steps"),
        (FACTS_PATH, "counter"),
    ]
    assert blocks[0][2] == [("- step 2",), ("- step 1",)]
    assert blocks[1][2] == [("- 2025-01-01T00:00:00Z: 1",)]


def test_dry_run_reports_and_changes_nothing(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    write_memory(store, memory_text(12))
    before = snapshot(store)
    result = ok(run("compact", "--dry-run"))
    assert "would move 2 items" in result.out and "Next Steps" in result.out
    assert snapshot(store) == before
    data = json.loads(ok(run("compact", "--dry-run", "--json")).out)
    assert data == {
        "schema_version": 1,
        "dry_run": True,
        "moved": [
            {"path": MEMORY_PATH, "section": "Next Steps", "lines": ["- step 2", "- step 1"]}
        ],
    }
    assert snapshot(store) == before


def test_nothing_to_compact(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    write_memory(store, memory_text(10))
    before = snapshot(store)
    result = ok(run("compact"))
    assert "nothing to compact" in result.out
    data = json.loads(ok(run("compact", "--json")).out)
    assert data == {"schema_version": 1, "dry_run": False, "moved": []}
    assert snapshot(store) == before


def test_compact_refuses_a_file_with_conflict_markers(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    text = memory_text(20).replace(
        "## Status\n\nParser port half done.\n",
        "## Status\n\n<<<<<<< ours\nParser port half done.\n=======\nParser done.\n"
        ">>>>>>> theirs\n",
    )
    write_memory(store, text)
    before = snapshot(store)
    result = run("compact")
    assert result.code == 1 and "conflict" in result.err, result
    assert run("compact", "--dry-run").code == 1
    assert snapshot(store) == before


def test_compact_refuses_a_fact_block_with_conflict_markers(store, run, monkeypatch):
    write_config(store, {"fact_history_limit": 1})
    for day in (1, 2):
        pin(monkeypatch, f"2025-01-0{day}T00:00:00Z")
        ok(run("fact", "set", "counter", str(day)))
    path = store / FACTS_PATH
    path.write_text(
        path.read_text().replace(
            "**Current:** 2\n", "<<<<<<< ours\n**Current:** 2\n=======\n**Current:** 3\n>>>>>>> x\n"
        )
    )
    write_memory(store, memory_text(12))
    assert "conflict-markers" in rules(check_findings(run)[1])
    before = snapshot(store)
    result = run("compact")
    assert result.code == 1 and "conflict" in result.err, result
    assert snapshot(store) == before


# ---- compaction: property test --------------------------------------------------------------

SECTION_POOL = ["Status", "Observations", "Open Questions", "Next Steps", "Decisions", "Risks"]


def random_memory(rng: random.Random) -> tuple[str, dict]:
    names = [n for n in SECTION_POOL if rng.random() < 0.8] or ["Next Steps"]
    words = ["parser", "lexer", "grammar", "ci", "docs", "release", "cache", "bug"]
    lines = ["# Session Memory", ""]
    serial = 0
    for name in names:
        lines += [f"## {name}", ""]
        if rng.random() < 0.3:
            lines += [f"Some prose about {rng.choice(words)}.", ""]
        if rng.random() < 0.15:
            lines += ["<!-- a comment -->"]
        for _ in range(rng.randint(0, 30)):
            serial += 1
            marker = rng.choice(["- ", "- ", "* "])
            if rng.random() < 0.05 and serial > 1:
                text = f"duplicate {rng.choice(words)}"  # same text more than once
            else:
                text = f"item {serial} {rng.choice(words)}"
            lines.append(marker + text)
            for extra in range(rng.choice([0, 0, 0, 1, 2])):
                indent = rng.choice(["  ", "    ", "\t"])
                lines.append(f"{indent}continued {serial}.{extra}")
            if rng.random() < 0.1:
                lines.append("")  # a loose list
        lines.append("")
    lines += ["## Last Updated", "", TODAY, ""]
    config: dict = {"default_section_limit": rng.randint(1, 32)}
    limits = {}
    for name in names:
        if rng.random() < 0.4:
            shown = rng.choice([name, name.lower(), name.upper()])
            limits[shown] = rng.randint(0, 15)
    if limits:
        config["section_limits"] = limits
    return "\n".join(lines), config


def expected_limit(config: dict, name: str) -> int:
    limits = {k.lower(): v for k, v in config.get("section_limits", {}).items()}
    return limits.get(name.lower(), config["default_section_limit"])


def test_compact_property_nothing_lost_nothing_duplicated(tmp_path, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")
    for seed in range(40):
        rng = random.Random(seed)
        root = tmp_path / f"seed{seed}"
        root.mkdir()
        monkeypatch.chdir(root)
        ok(run("init"))
        (root / ".stacks" / "AGENT.md").write_text(IDENTITY)
        before, config = random_memory(rng)
        write_memory(root, before)
        write_config(root, config)
        ok(run("compact"))
        after = read(root, MEMORY_PATH)
        entries = log_entries(root)
        before_items = section_items(before)
        after_items = section_items(after)
        over = {
            name
            for name, items in before_items.items()
            if name != "Last Updated" and len(items) > expected_limit(config, name)
        }
        assert len(entries) == (1 if over else 0), (seed, len(entries))
        logged: dict[str, list] = {}
        if entries:
            blocks = compact_blocks(entry_text(entries[0][1]))
            for path, section, items in blocks:
                assert path == MEMORY_PATH, seed
                assert section not in logged, (seed, section)  # one block per section
                logged[section] = items
        assert set(logged) == over, seed
        # Nothing lost, nothing duplicated: file + log after == file before (multisets).
        total_after = collections.Counter(
            [item for items in after_items.values() for item in items]
            + [item for items in logged.values() for item in items]
        )
        total_before = collections.Counter(
            item for items in before_items.values() for item in items
        )
        assert total_after == total_before, seed
        # Each section within its limit, keeping its top bullets in their order; the
        # bottom ones, in their order, are what the log holds.
        assert list(after_items) == list(before_items), seed
        for name, items in before_items.items():
            limit = len(items) if name == "Last Updated" else expected_limit(config, name)
            assert after_items[name] == items[:limit], (seed, name)
            assert logged.get(name, []) == items[limit:], (seed, name)
        # Headings, prose and comments are all still there, in order.
        assert other_lines(after) == other_lines(before), seed
        code, found = check_findings(run)
        assert "compact-duplicate" not in rules(found), (seed, found)


# ---- compaction: killed between its steps ---------------------------------------------------

KILL_WRAPPER = """\
import os, sys
sys.path.insert(0, {root!r})
import stm
mode = sys.argv[1]
calls = []
def die(*args, **kwargs):
    os._exit(137)
if mode == "before-log":
    stm.append_log_entry = die
else:
    survive = int(mode.split("-")[-1])  # after-write-N: die at atomic write number N
    real = stm.atomic_write
    def atomic_write(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == survive:
            os._exit(137)
        return real(*args, **kwargs)
    stm.atomic_write = atomic_write
sys.exit(stm.main(sys.argv[2:]))
"""


def stm_process(cwd, *args, script=STM_PY) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=PROC_ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def over_limits(store, run, monkeypatch):
    """MEMORY.md with 14 Next Steps and 4 Observations over limits of 10 and 2, and a fact
    with 4 History entries over a limit of 2."""
    write_config(store, {"fact_history_limit": 2, "section_limits": {"Observations": 2}})
    for day, value in enumerate(["a", "b", "c", "d"], start=1):
        pin(monkeypatch, f"2025-01-0{day}T00:00:00Z")
        ok(run("fact", "set", "letter", value, *(["--why", f"now {value}"] if day > 1 else [])))
    text = memory_text(14).replace(
        "The old grammar has two precedence bugs.\n",
        "- obs 4\n  with detail\n- obs 3\n- obs 2\n- obs 1\n  detail of one\n",
    )
    write_memory(store, text)
    return store


def all_items(store: Path) -> collections.Counter:
    """Every bullet (with its continuation lines) of MEMORY.md and the fact History
    entries (with their notes), in the files and in every log entry."""
    counter: collections.Counter = collections.Counter()
    for items in section_items(read(store, MEMORY_PATH)).values():
        counter.update(items)
    for _, fact in fact_block(store):
        counter.update((f"- {s}: {v}", *notes) for s, v, notes in fact.history)
    for _, entry in log_entries(store):
        for _, _, items in compact_blocks(entry_text(entry)):
            counter.update(items)
    return counter


@pytest.mark.parametrize("step", ["after-write-1", "after-write-2"])
def test_a_compact_killed_after_its_log_append_is_found_and_fixed(over_limits, run, aux, step):
    store = over_limits
    original = all_items(store)
    assert sum(original.values()) == 14 + 4 + 4
    # What an uninterrupted compact leaves, on a copy, to compare with.
    reference = aux / "reference"
    shutil.copytree(store, reference)
    done = stm_process(reference, "compact")
    assert done.returncode == 0, done.stderr
    script = aux / "kill_wrapper.py"
    script.write_text(KILL_WRAPPER.format(root=str(ROOT)))
    killed = subprocess.run(
        [sys.executable, str(script), step, "compact"],
        cwd=store,
        env=PROC_ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == 137, killed.stderr
    entries = log_entries(store)
    assert len(entries) == 1 and entries[0][1].complete  # the log came first
    # Items are now in both places, never in neither.
    doubled = all_items(store)
    assert set(doubled) == set(original)
    assert all(doubled[item] >= 1 for item in original)
    code, found = check_findings(run)
    hits = [f for f in found if f["rule"] == "compact-duplicate"]
    assert hits and all(f["severity"] == "warning" for f in hits), found
    expected_paths = {MEMORY_PATH, FACTS_PATH} if step == "after-write-1" else {FACTS_PATH}
    assert {f["path"] for f in hits} == expected_paths
    assert code == 0  # a warning
    # --dry-run says so and changes nothing.
    state = snapshot(store)
    dry = json.loads(ok(run("check", "--fix", "--dry-run", "--json")).out)
    assert any(f["rule"] == "compact-duplicate" and not f["applied"] for f in dry["fixed"]), dry
    assert snapshot(store) == state
    fixed = json.loads(run("check", "--fix", "--json").out)
    assert any(f["rule"] == "compact-duplicate" and f["applied"] for f in fixed["fixed"]), fixed
    assert "compact-duplicate" not in rules(check_findings(run)[1])
    assert all_items(store) == original  # each item exactly once, in a file or in the log
    assert read(store, MEMORY_PATH) == read(reference, MEMORY_PATH)
    assert fact_block(store)[0][1].history == fact_block(reference)[0][1].history
    assert ok(run("compact")).out.startswith("nothing to compact")
    assert check_findings(run)[0] == 0


def test_a_compact_killed_before_its_log_append_changed_nothing(over_limits, run, aux):
    store = over_limits
    before = snapshot(store)
    script = aux / "kill_wrapper.py"
    script.write_text(KILL_WRAPPER.format(root=str(ROOT)))
    killed = subprocess.run(
        [sys.executable, str(script), "before-log", "compact"],
        cwd=store,
        env=PROC_ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert killed.returncode == 137, killed.stderr
    assert snapshot(store) == before
    code, found = check_findings(run)
    assert "compact-duplicate" not in rules(found)
    # A later compact does the whole job.
    done = stm_process(store, "compact")
    assert done.returncode == 0, done.stderr
    assert len(log_entries(store)) == 1
    assert "compact-duplicate" not in rules(check_findings(run)[1])


# ---- compaction: two clones ----------------------------------------------------------------


@pytest.fixture
def git_env(tmp_path_factory):
    """git and python3 on a PATH without any `stm` command, so that `stm setup git
    --install` writes this checkout's stm.py as the driver; a private git config."""
    base = {k: v for k, v in PROC_ENV.items() if not k.startswith("GIT_") and k != "CI"}
    bin_dir, ceiling = tmp_path_factory.mktemp("bin"), tmp_path_factory.getbasetemp()
    return isolated_git_env(bin_dir, base, ceiling)


def test_two_clones_that_compact_independently_still_merge(tmp_path, git_env):
    git = functools.partial(shared_git, full_env=git_env, timeout=60)

    def stm_ok(cwd, *args):
        result = subprocess.run(
            [sys.executable, str(STM_PY), *args],
            cwd=cwd,
            env=git_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(origin), str(seed))
    git(seed, "checkout", "-q", "-b", "main")
    stm_ok(seed, "init")
    (seed / ".stacks" / "AGENT.md").write_text(IDENTITY)
    write_memory(seed, memory_text(9))
    git(seed, "add", "-A")
    git(seed, "commit", "-qm", "base")
    git(seed, "push", "-q", "origin", "main")
    clones = {}
    for name in ("a", "b"):
        clone = tmp_path / name
        git(tmp_path, "clone", "-q", str(origin), str(clone))
        stm_ok(clone, "setup", "git", "--install")
        stm_ok(clone, "setup", "git", "--check")
        driver = git(clone, "config", "--local", "merge.stm.driver").stdout
        assert str(STM_PY) in driver and "merge-file" in driver, driver
        clones[name] = clone
    added = {"a": [f"alpha {n}" for n in range(3)], "b": [f"beta {n}" for n in range(4)]}
    for name, clone in clones.items():
        for text in added[name]:
            stm_ok(clone, "note", "Next Steps", text)
        assert "moved" in stm_ok(clone, "compact")
        git(clone, "add", "-A")
        git(clone, "commit", "-qm", f"{name} compacts")
    git(clones["a"], "push", "-q", "origin", "main")
    b = clones["b"]
    merged = git(b, "pull", "--no-rebase", "--no-edit", "-q", "origin", "main", check=False)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "CONFLICT" not in merged.stdout + merged.stderr
    assert git(b, "ls-files", "-u").stdout == ""
    memory = read(b, MEMORY_PATH)
    assert not any(line.startswith(("<<<<<<<", ">>>>>>>")) for line in memory.splitlines())
    in_memory = collections.Counter(section_items(memory)["Next Steps"])
    logged: collections.Counter = collections.Counter()
    compact_entries = 0
    for _, entry in log_entries(b):
        blocks = compact_blocks(entry_text(entry))
        compact_entries += bool(blocks)
        for _, _, items in blocks:
            logged.update(items)
    assert compact_entries == 2  # both clones' entries survive the union merge
    everything = [f"- step {n}" for n in range(1, 10)] + [
        f"- {text}" for texts in added.values() for text in texts
    ]
    for bullet in everything:
        assert in_memory[(bullet,)] + logged[(bullet,)] >= 1, (bullet, memory)
        assert in_memory[(bullet,)] <= 1, (bullet, memory)
    for texts in added.values():  # what both sides added is in the file
        for text in texts:
            assert in_memory[(f"- {text}",)] == 1
    check = subprocess.run(
        [sys.executable, str(STM_PY), "check", "--json"],
        cwd=b,
        env=git_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(check.stdout)
    assert check.returncode == 0 and report["counts"]["error"] == 0, report["findings"]
    assert "compact-duplicate" not in rules(report["findings"])


# ---- digest ---------------------------------------------------------------------------------


@pytest.fixture
def history(store, run, monkeypatch):
    """Log entries and fact changes around MEMORY.md's Last Updated (2026-11-22)."""
    write_memory(store, memory_text(2))
    for stamp, message in (
        ("2026-11-21T10:00:00Z", "before the memory was written"),
        ("2026-11-22T09:00:00Z", "first since"),
        ("2026-11-23T08:00:00Z", "second since\nwith a second line"),
        ("2026-11-24T07:00:00Z", "third since"),
    ):
        pin(monkeypatch, stamp)
        ok(run("log", message))
    pin(monkeypatch, "2026-11-20T00:00:00Z")
    ok(run("fact", "set", "primary_language", "Python"))
    pin(monkeypatch, "2026-11-23T12:00:00Z")
    ok(run("fact", "set", "primary_language", "Go", "--why", "switched"))
    pin(monkeypatch, "2026-11-24T12:00:00Z")
    return store


def test_digest_lists_what_happened_since_last_updated_newest_first(history, run):
    before = snapshot(history)
    result = ok(run("digest"))
    out = result.out
    assert out.splitlines()[0].startswith("since 2026-11-22T00:00:00Z: 3 log entries, 1 fact")
    assert "before the memory was written" not in out
    assert "Python" not in out  # the fact change from before Last Updated
    positions = [out.index(text) for text in ("third since", "second since", "first since")]
    assert positions == sorted(positions)
    assert "with a second line" in out
    assert "primary_language" in out and "Go" in out
    assert snapshot(history) == before  # a reader


def test_digest_json_keys_and_content(history, run):
    data = json.loads(ok(run("digest", "--json")).out)
    assert set(data) == {"schema_version", "since", "entries", "facts", "tokens"}
    assert data["since"] == "2026-11-22T00:00:00Z"
    assert [e["timestamp"] for e in data["entries"]] == [
        "2026-11-24T07:00:00Z",
        "2026-11-23T08:00:00Z",
        "2026-11-22T09:00:00Z",
    ]
    for entry in data["entries"]:
        assert set(entry) == {"timestamp", "author", "path", "tokens", "text"}
        assert entry["author"] == "tester"
        assert entry["path"] == f".stacks/logs/{entry['timestamp'][:10]}.md"
        assert entry["tokens"] == stm.estimate_tokens(entry["text"])
    assert data["entries"][1]["text"] == "second since\nwith a second line"
    assert data["facts"] == [
        {
            "path": FACTS_PATH,
            "key": "primary_language",
            "timestamp": "2026-11-23T12:00:00Z",
            "value": "Go",
        }
    ]
    assert data["tokens"] >= sum(e["tokens"] for e in data["entries"])


def test_digest_since(history, run):
    data = json.loads(ok(run("digest", "--since", "2026-11-23", "--json")).out)
    assert data["since"] == "2026-11-23T00:00:00Z"
    assert [e["text"] for e in data["entries"]] == [
        "third since",
        "second since\nwith a second line",
    ]
    assert [f["value"] for f in data["facts"]] == ["Go"]
    data = json.loads(ok(run("digest", "--since", "2026-11-23T09:00:00Z", "--json")).out)
    assert [e["text"] for e in data["entries"]] == ["third since"]
    assert [f["value"] for f in data["facts"]] == ["Go"]
    data = json.loads(ok(run("digest", "--since", "2026-11-01", "--json")).out)
    assert len(data["entries"]) == 4
    assert [f["value"] for f in data["facts"]] == ["Go", "Python"]
    data = json.loads(ok(run("digest", "--since", "2026-11-25", "--json")).out)
    assert data["entries"] == [] and data["facts"] == [] and data["tokens"] == 0


@pytest.mark.parametrize("since", ["yesterday", "2026-13-01", "2026-02-30", "22/11/2026", ""])
def test_digest_refuses_a_bad_since(history, run, since):
    before = snapshot(history)
    result = run("digest", "--since", since)
    assert result.code == 2 and result.out == "", result
    assert snapshot(history) == before


def test_digest_orders_by_the_entries_own_timestamps(store, run, monkeypatch):
    write_memory(store, memory_text(2))
    # A union merge can leave a day's entries out of time order in the file.
    for stamp, message in (
        ("2026-11-23T15:00:00Z", "afternoon"),
        ("2026-11-23T09:00:00Z", "morning"),
        ("2026-11-23T12:00:00Z", "noon"),
    ):
        pin(monkeypatch, stamp)
        ok(run("log", message))
    pin(monkeypatch, "2026-11-24T00:00:00Z")
    data = json.loads(ok(run("digest", "--json")).out)
    assert [e["text"] for e in data["entries"]] == ["afternoon", "noon", "morning"]


def test_digest_without_last_updated_starts_a_week_ago(store, run, monkeypatch):
    write_memory(store, "# Session Memory\n\n## Next Steps\n\n- one\n")
    for stamp, message in (("2026-11-10T10:00:00Z", "old"), ("2026-11-20T10:00:00Z", "recent")):
        pin(monkeypatch, stamp)
        ok(run("log", message))
    pin(monkeypatch, "2026-11-24T12:00:00Z")
    data = json.loads(ok(run("digest", "--json")).out)
    assert data["since"] == "2026-11-17T12:00:00Z"
    assert [e["text"] for e in data["entries"]] == ["recent"]


def test_boot_first_line_says_how_old_memory_is(store, run, monkeypatch):
    write_memory(store, memory_text(2))  # Last Updated 2026-11-22
    for stamp in ("2026-11-21T23:00:00Z", "2026-11-22T08:00:00Z", "2026-11-24T08:00:00Z"):
        pin(monkeypatch, stamp)
        ok(run("log", f"entry at {stamp}"))
    pin(monkeypatch, "2026-11-25T12:00:00Z")
    ok(run("log", "entry today"))
    first = ok(run("boot")).out.splitlines()[0]
    assert first.startswith("# stm memory boot · generated 2026-11-25T12:00:00Z")
    assert first.endswith("· memory updated 2026-11-22, 3 days ago; 3 log entries since"), first
    notices = ok(run("boot")).out
    head = notices.split("## Identity")[0].split("\n", 1)[1]  # below the first line
    assert "days ago" not in head  # 3 days: no staleness notice


def test_boot_counts_entries_after_an_iso_last_updated(store, run, monkeypatch):
    write_memory(store, memory_text(2, last_updated="2026-11-22T12:00:00Z"))
    for stamp in ("2026-11-22T11:00:00Z", "2026-11-22T13:00:00Z", "2026-11-23T09:00:00Z"):
        pin(monkeypatch, stamp)
        ok(run("log", f"entry at {stamp}"))
    pin(monkeypatch, "2026-11-25T12:00:00Z")
    first = ok(run("boot")).out.splitlines()[0]
    assert first.endswith("· memory updated 2026-11-22, 3 days ago; 2 log entries since"), first
    data = json.loads(ok(run("digest", "--json")).out)
    assert data["since"] == "2026-11-22T12:00:00Z"
    assert [e["timestamp"] for e in data["entries"]] == [
        "2026-11-23T09:00:00Z",
        "2026-11-22T13:00:00Z",
    ]


def test_boot_counts_at_most_62_days_back_as_a_lower_bound(store, run, monkeypatch):
    write_memory(store, memory_text(2, last_updated="2026-08-01"))
    for stamp in ("2026-08-10T10:00:00Z", "2026-11-20T10:00:00Z", "2026-11-21T10:00:00Z"):
        pin(monkeypatch, stamp)
        ok(run("log", f"entry at {stamp}"))
    pin(monkeypatch, "2026-11-25T12:00:00Z")
    first = ok(run("boot")).out.splitlines()[0]
    assert first.endswith("· memory updated 2026-08-01, 116 days ago; 2+ log entries since")


def test_boot_notices_memory_older_than_a_week(store, run, monkeypatch):
    write_memory(store, memory_text(2))
    pin(monkeypatch, "2026-12-01T12:00:00Z")
    out = ok(run("boot")).out
    first = out.splitlines()[0]
    assert first.endswith("· memory updated 2026-11-22, 9 days ago; 0 log entries since"), first
    head = out.split("## Identity")[0]
    assert "2026-11-22" in head.split("\n", 1)[1] and "9 days ago" in head, head


# ---- note --ref --------------------------------------------------------------------------------


def test_note_ref_creates_a_titled_ref_and_leaves_memory_alone(store, run, monkeypatch):
    pin(monkeypatch, "2026-12-01T12:00:00Z")  # a restamp of Last Updated would show
    memory_before = read(store, MEMORY_PATH)
    agent_before = read(store, ".stacks/AGENT.md")
    result = ok(run("note", "--ref", "deploy", "Gotchas", "text", "--json"))
    data = json.loads(result.out)
    assert data["path"] == ".stacks/refs/deploy.md" and data["section"] == "Gotchas"
    text = read(store, ".stacks/refs/deploy.md")
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines == ["# Deploy", "## Gotchas", "- text"], text
    ok(run("note", "--ref", "deploy", "Gotchas", "newer"))
    lines = [line for line in read(store, ".stacks/refs/deploy.md").splitlines() if line.strip()]
    assert lines == ["# Deploy", "## Gotchas", "- newer", "- text"]
    ok(run("note", "--ref", "deploy", "Rollback", "--create", "revert the tag"))
    text = read(store, ".stacks/refs/deploy.md")
    assert "## Rollback" in text and "- revert the tag" in text
    assert "Last Updated" not in text and "2026-12-01" not in text  # no stamp in a ref
    assert read(store, MEMORY_PATH) == memory_before
    assert read(store, ".stacks/AGENT.md") == agent_before
    boot = ok(run("boot")).out
    assert any(line.startswith("- refs/deploy.md — Deploy") for line in boot.splitlines())
    assert check_findings(run)[0] == 0


def test_note_ref_into_a_sub_folder_and_an_existing_ref(store, run, monkeypatch):
    pin(monkeypatch, "2026-12-01T12:00:00Z")
    ok(run("note", "--ref", "ops/release-notes", "Steps", "tag it"))
    text = read(store, ".stacks/refs/ops/release-notes.md")
    assert text.splitlines()[0].startswith("# ") and "- tag it" in text
    existing = store / ".stacks" / "refs" / "parser.md"
    existing.write_text("# Parser\n\nThe parser's design.\n\n## Gotchas\n\n- old one\n")
    ok(run("note", "--ref", "parser.md", "Gotchas", "new one"))
    assert existing.read_text() == (
        "# Parser\n\nThe parser's design.\n\n## Gotchas\n\n- new one\n- old one\n"
    )


@pytest.mark.parametrize("name", ["../x", "sub/../../x", "../../etc/x", "/tmp/x", ".."])
def test_note_ref_outside_refs_is_refused(store, run, name):
    before = snapshot(store)
    result = run("note", "--ref", name, "Gotchas", "text")
    assert result.code == 2, result
    assert snapshot(store) == before
    assert not (store / ".stacks" / "x.md").exists()


def test_note_ref_refuses_a_secret_and_a_conflicted_ref(store, run):
    before = snapshot(store)
    assert run("note", "--ref", "deploy", "Gotchas", FAKE_TOKEN).code == 1
    assert snapshot(store) == before
    ref = store / ".stacks" / "refs" / "deploy.md"
    ref.write_text("# Deploy\n\n## Gotchas\n\n<<<<<<< ours\n- a\n=======\n- b\n>>>>>>> theirs\n")
    before = snapshot(store)
    assert run("note", "--ref", "deploy", "Gotchas", "more").code == 1
    assert snapshot(store) == before
