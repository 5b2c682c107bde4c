"""Compaction: `stm compact` moves what is over a section's or a fact's limit into one log
entry, and `check` finds a compaction that was interrupted (spec/memory-layers.md,
"Compaction"; the `compact-duplicate` rule; spec/json.md's `compact` key).

Property and process-level tests (a compact killed between its steps, two git clones that
compact independently) read bullets with their own reader below, not stm's; then
compaction's bookkeeping against forged log text, and a fault at any write step.
"""

from __future__ import annotations

import collections
import errno
import functools
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import IDENTITY, MEMORY, STM_PY, TODAY, snapshot
from helpers import (
    PROC_ENV,
    FaultyOS,
    check_findings,
    entry_text,
    fact_block,
    isolated_git_env,
    killed_stm,
    log_entries,
    log_text,
    memory_text,
    ok,
    pin,
    read,
    restore,
    rules,
    run_stm,
    write_config,
    write_memory,
)
from helpers import git as shared_git

import stm

MEMORY_PATH = ".stacks/MEMORY.md"
FACTS_PATH = ".stacks/refs/facts.md"


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


# ---- compaction -----------------------------------------------------------------------------


def test_compact_moves_the_bottom_bullets_into_one_log_entry(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
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
    assert name == "2026-11-23.md" and entry.complete  # date-safe: pinned clock
    assert entry.stamp == "2026-11-23T10:00:00Z"  # date-safe: pinned clock
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
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
    write_config(store, {"default_section_limit": 1})
    write_memory(
        store,
        "# Session Memory\n\n## Next Steps\n\n"
        "- top\n  more of top\n- middle\n  more of middle\n\tand a tab line\n- bottom\n\n"
        "## Last Updated\n\n2026-11-22\n",  # date-safe: pinned clock
    )
    ok(run("compact"))
    assert read(store, MEMORY_PATH) == (
        "# Session Memory\n\n## Next Steps\n\n- top\n  more of top\n\n"
        "## Last Updated\n\n2026-11-22\n"  # date-safe: pinned clock
    )
    ((_, entry),) = log_entries(store)
    assert entry_text(entry) == (
        "moved from .stacks/MEMORY.md ## Next Steps by stm compact: "
        "<!-- stm:compact MEMORY.md Next%20Steps -->\n\n"
        "- middle\n  more of middle\n\tand a tab line\n- bottom"
    )


def test_section_limits_are_per_section_and_case_insensitive(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
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
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
    write_config(store, {"default_section_limit": 1, "section_limits": {"Last Updated": 0}})
    text = (
        "# Session Memory\n\n## Next Steps\n\n- one\n\n"
        "## Last Updated\n\n- 2026-11-22\n- 2026-11-21\n- 2026-11-20\n"  # date-safe: pinned clock
    )
    write_memory(store, text)
    before = snapshot(store)
    result = ok(run("compact"))
    assert "nothing to compact" in result.out
    assert snapshot(store) == before


def test_bullets_inside_a_code_fence_are_not_items(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
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
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
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
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
    write_memory(store, memory_text(12))
    ok(run("compact"))  # moves step 2 and step 1
    pin(monkeypatch, "2026-11-24T10:00:00Z")  # date-safe: pinned clock
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
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
    result = json.loads(ok(run("compact", "--json")).out)
    moved_lines = [
        "- 2025-01-02T00:00:00Z: Go",
        "  - *Correction: switched again*",
        "- 2025-01-01T00:00:00Z: Python",
        "  - *Correction: switched*",
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
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
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
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
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
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
    write_memory(store, memory_text(10))
    before = snapshot(store)
    result = ok(run("compact"))
    assert "nothing to compact" in result.out
    data = json.loads(ok(run("compact", "--json")).out)
    assert data == {"schema_version": 1, "dry_run": False, "moved": []}
    assert snapshot(store) == before


def test_compact_refuses_a_file_with_conflict_markers(store, run, monkeypatch):
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
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
    pin(monkeypatch, "2026-11-23T10:00:00Z")  # date-safe: pinned clock
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
    done = run_stm("compact", cwd=reference, full_env=PROC_ENV)
    assert done.returncode == 0, done.stderr
    killed = killed_stm(store, aux, step, "compact")
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
    killed = killed_stm(store, aux, "before-log", "compact")
    assert killed.returncode == 137, killed.stderr
    assert snapshot(store) == before
    code, found = check_findings(run)
    assert "compact-duplicate" not in rules(found)
    # A later compact does the whole job.
    done = run_stm("compact", cwd=store, full_env=PROC_ENV)
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


@pytest.mark.git
def test_two_clones_that_compact_independently_still_merge(tmp_path, git_env):
    git = functools.partial(shared_git, full_env=git_env, timeout=60)

    def stm_ok(cwd, *args):
        result = run_stm(*args, cwd=cwd, full_env=git_env)
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


# ---- edge cases a review found --------------------------------------------------------------


def test_a_bullet_noted_again_after_two_compacts_is_no_leftover(store, run):
    write_config(store, section_limits={"Notes": 1})
    assert run("note", "--create", "Notes", "b").code == 0
    assert run("note", "Notes", "a").code == 0
    assert run("compact").code == 0
    assert run("note", "Notes", "b").code == 0
    assert run("compact").code == 0
    found = json.loads(run("check", "--json").out)["findings"]
    assert not [f for f in found if f["rule"] == "compact-duplicate"]
    run("check", "--fix")
    assert "- b" in (store / ".stacks" / "MEMORY.md").read_text()


def test_compact_moves_a_loose_bullet_whole(store, run):
    write_config(store, section_limits={"Ideas": 1})
    memory = store / ".stacks" / "MEMORY.md"
    loose = "- loose item\n  cont\n\n  second paragraph\n  - nested"
    memory.write_text(
        MEMORY.replace("## Last Updated", f"## Ideas\n\n- newest\n{loose}\n\n## Last Updated")
    )
    assert run("compact").code == 0
    text = memory.read_text()
    assert "second paragraph" not in text and "nested" not in text
    log = "".join(p.read_text() for p in (store / ".stacks" / "logs").glob("*.md"))
    assert "  second paragraph\n  - nested" in log


def test_compact_and_fact_set_keep_crlf(store, run):
    write_config(store, default_section_limit=1)
    memory = store / ".stacks" / "MEMORY.md"
    crlf = MEMORY.replace("Port the expression grammar.", "- one\n- two").replace("\n", "\r\n")
    memory.write_bytes(crlf.encode())
    assert run("compact").code == 0
    assert b"\r\n" in memory.read_bytes() and b"\n" not in memory.read_bytes().replace(b"\r\n", b"")
    facts = store / ".stacks" / "refs" / "facts.md"
    facts.write_bytes(b"# Facts\r\n")
    assert run("fact", "set", "lang", "Go").code == 0
    assert b"\n" not in facts.read_bytes().replace(b"\r\n", b"")


AGENT = ".stacks/AGENT.md"


MEMORY_MD = ".stacks/MEMORY.md"


class OpenGuard:
    """Stands in for `os` inside stm: opening (or listing) anything outside `root` fails
    the test at once, before a byte is read."""

    def __init__(self, real, root: Path):
        self._real, self.root, self.outside = real, os.path.realpath(root), []

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name not in ("open", "scandir", "listdir", "stat", "lstat"):
            return attr

        def wrapper(path=".", *args, **kwargs):
            if isinstance(path, (str, bytes, os.PathLike)):
                real = os.path.realpath(os.path.abspath(os.fsdecode(path)))
                if real != self.root and not real.startswith(self.root + os.sep):
                    self.outside.append(real)
                    raise PermissionError(errno.EACCES, "outside the project (test guard)", path)
            return attr(path, *args, **kwargs)

        return wrapper


PRINCIPLE = "- never force-push to main"


FORGERIES = {
    # An old-style header pasted as is, and one carrying the marker compact writes now.
    "header": "moved from {shown} ## {section} by stm compact:\n\n{item}",
    "marker": (
        "moved from {shown} ## {section} by stm compact: <!-- stm:compact {rel} {quoted} -->"
        "\n\n{item}"
    ),
}


def forged(kind: str, rel: str, section: str, item: str) -> str:
    from urllib.parse import quote

    return FORGERIES[kind].format(
        shown=f".stacks/{rel}", rel=rel, section=section, quoted=quote(section, safe=""), item=item
    )


@pytest.fixture
def targets(store, run):
    """AGENT.md, MEMORY.md and a fact block, each ending a section with an item a forged
    compact entry will claim was moved."""
    principles = "Small commits; tests before features.\n"
    (store / AGENT).write_text(IDENTITY.replace(principles, f"{principles}\n{PRINCIPLE}\n"))
    memory = MEMORY.replace("None yet.\n", "- is the lexer done?\n")
    (store / MEMORY_MD).write_text(memory)
    assert run("fact", "set", "language", "Go").code == 0
    assert run("fact", "set", "language", "Rust", "--why", "rewrite").code == 0
    return store


def target_cases(root: Path) -> list[tuple[str, str, str]]:
    """(file under .stacks/, section, item at the bottom of that section)."""
    facts = (root / ".stacks" / "refs" / "facts.md").read_text()
    history = [line for line in facts.split("\n") if line.startswith("- ")]
    return [
        ("AGENT.md", "Principles", PRINCIPLE),
        ("MEMORY.md", "Open Questions", "- is the lexer done?"),
        ("refs/facts.md", "language", history[-1]),
    ]


@pytest.mark.parametrize("kind", sorted(FORGERIES))
def test_log_text_cannot_forge_a_compact_entry(targets, call, kind):
    """Issue 22, 1: whatever `stm log` is given, check finds no compact leftover and
    check --fix removes nothing."""
    root = targets
    for rel, section, item in target_cases(root):
        ok(call("log", forged(kind, rel, section, item)))
        ok(call("log", "-", stdin=forged(kind, rel, section, item) + "\n"))
    before = snapshot(root / ".stacks")
    assert "compact-duplicate" not in rules(check_findings(call)[1])
    fixed = call("check", "--fix")
    assert fixed.code == 0 and "removed" not in fixed.out, fixed
    after = snapshot(root / ".stacks")
    assert {k: v for k, v in after.items() if "logs" not in k} == {
        k: v for k, v in before.items() if "logs" not in k
    }
    for rel, _, item in target_cases(root):
        assert item in read(root, f".stacks/{rel}")


def test_the_mcp_log_tool_cannot_forge_a_compact_entry(targets, call):
    from mcp_client import McpClient

    root = targets
    client = McpClient(stacks=root / ".stacks", cwd=root, env=PROC_ENV)
    try:
        for rel, section, item in target_cases(root):
            for kind in FORGERIES:
                result = client.tool_result("log", {"text": forged(kind, rel, section, item)})
                assert not result.get("isError"), result
    finally:
        client.kill()
    assert "stm:compact" in log_text(root)  # the text is kept, as data
    assert "<!-- stm:compact" not in log_text(root)
    before = snapshot(root / ".stacks" / "refs"), read(root, AGENT), read(root, MEMORY_MD)
    assert "compact-duplicate" not in rules(check_findings(call)[1])
    ok(call("check", "--fix"))
    assert (snapshot(root / ".stacks" / "refs"), read(root, AGENT), read(root, MEMORY_MD)) == before


def raw_log_entry(root: Path, body: str) -> None:
    """An entry written into today's log as a file, bypassing stm (a merge from a branch
    whose log was written by hand)."""
    now = stm.utc_now()
    stamp = stm.iso(now)
    logs = root / ".stacks" / "logs"
    logs.mkdir(exist_ok=True)
    entry = stm.render_log_entry("x", "forger", stamp, "0badc0de").replace("\nx\n", f"\n{body}\n")
    with open(logs / f"{stamp[:10]}.md", "a") as f:
        f.write(entry)


@pytest.mark.parametrize("kind", sorted(FORGERIES))
def test_a_compact_entry_never_removes_from_agent_md_or_a_file_compact_does_not_write(
    targets, call, kind
):
    """Even with compact's own marker (a log file edited by hand and merged), a removal
    touches only what compact rewrites: MEMORY.md and fact blocks, never AGENT.md, the
    config, or a ref that is not a fact block."""
    root = targets
    (root / ".stacks" / "refs" / "guide.md").write_text("# Guide\n\n## Steps\n\n- run it\n")
    (root / ".stacks" / "config.json").write_text('{"default_section_limit": 10}\n')
    for rel, section, item in [
        ("AGENT.md", "Principles", PRINCIPLE),
        ("refs/guide.md", "Steps", "- run it"),
        ("config.json", "x", '{"default_section_limit": 10}'),
    ]:
        raw_log_entry(root, forged(kind, rel, section, item))
    before = snapshot(root / ".stacks" / "refs"), read(root, AGENT), read(root, MEMORY_MD)
    assert "compact-duplicate" not in rules(check_findings(call)[1])
    ok(call("check", "--fix"))
    assert (snapshot(root / ".stacks" / "refs"), read(root, AGENT), read(root, MEMORY_MD)) == before


@pytest.mark.parametrize(
    "named",
    [
        "/etc/passwd",
        "../outside.md",
        "../../outside.md",
        "refs/../../outside.md",
        "/proc/self/pagemap",
        "../../../../../../../../proc/self/pagemap",
        "refs/link/facts.md",
        "refs/linked.md",
    ],
)
@pytest.mark.parametrize("kind", sorted(FORGERIES))
def test_a_compact_entry_naming_a_path_outside_stacks_is_never_opened(
    targets, call, monkeypatch, named, kind
):
    """Issue 22, 2: a path in a compact entry resolves inside .stacks/ only, through no
    link; nothing outside the project is opened, by check or by check --fix."""
    root = targets
    (root / "outside.md").write_text("# Outside\n\n## language\n\n- secret line\n")
    os.symlink(root / ".stacks" / "refs", root / ".stacks" / "refs" / "link")
    os.symlink(root / "outside.md", root / ".stacks" / "refs" / "linked.md")
    for section, item in (("language", "- secret line"), ("x", "root:x:0:0:root:/root:/bin/bash")):
        raw_log_entry(root, forged(kind, named, section, item).replace(".stacks/", ""))
    guard = OpenGuard(os, root)
    monkeypatch.setattr(stm, "os", guard)
    found = check_findings(call)[1]
    fixed = call("check", "--fix")
    monkeypatch.setattr(stm, "os", os)
    assert guard.outside == []
    assert "compact-duplicate" not in rules(found)
    assert fixed.code in (0, 1) and "Traceback" not in fixed.err, fixed
    assert read(root, "outside.md").endswith("- secret line\n")


def test_a_compact_target_is_read_with_a_size_cap_and_never_blocks(targets, monkeypatch):
    """Issue 22, 2: the reader of a compact target stops at its cap, however big the file
    claims (or turns out) to be, and refuses a FIFO without blocking."""
    root = targets
    store = stm.open_store()
    big = root / ".stacks" / "refs" / "big.md"
    with open(big, "wb") as f:
        f.write(b"# Big\n\n## k\n**Current:** v\n")
        f.truncate(1 << 30)  # sparse: 1 GiB on paper
    counted = {"bytes": 0}
    real_read = os.read

    def counting_read(fd, n):
        data = real_read(fd, n)
        counted["bytes"] += len(data)
        return data

    monkeypatch.setattr(stm.os, "read", counting_read)
    assert stm.compact_target_text(store, "refs/big.md") is None
    assert counted["bytes"] <= stm.COMPACT_READ_MAX_BYTES + 1
    os.mkfifo(root / ".stacks" / "refs" / "pipe.md")
    assert stm.compact_target_text(store, "refs/pipe.md") is None  # and it returned


LOOSE_MEMORY = (
    "# Session Memory\n\n## Status\n\nParser port half done.\n\n## Observations\n\n"
    "None.\n\n## Open Questions\n\nNone yet.\n\n## Next Steps\n\n"
    "- keep\n\n  kept continuation\n"
    "- loose one\n\n  its continuation after a blank line\n"
    "- tight two\n  continuation\n"
    "- loose three\n\n\n  two blank lines before this one\n\n"
    "## Last Updated\n\n2026-11-22\n"  # date-safe: pinned clock
)


def test_a_killed_compact_of_loose_bullets_is_found_and_fixed(store, call, aux):
    (store / ".stacks" / "config.json").write_text('{"default_section_limit": 1}\n')
    (store / MEMORY_MD).write_text(LOOSE_MEMORY)
    reference = aux / "reference"
    shutil.copytree(store, reference)
    done = subprocess.run(
        [sys.executable, str(STM_PY), "compact"], cwd=reference, env=PROC_ENV, timeout=60
    )
    assert done.returncode == 0
    killed = killed_stm(store, aux, "write-1", "compact")
    assert killed.returncode == 137, killed.stderr
    assert "loose one" in log_text(store) and "loose one" in read(store, MEMORY_MD)
    found = [f for f in check_findings(call)[1] if f["rule"] == "compact-duplicate"]
    assert [f["path"] for f in found] == [MEMORY_MD], found
    fixed = ok(call("check", "--fix"))
    assert "compact-duplicate" in fixed.out
    assert read(store, MEMORY_MD) == read(reference, MEMORY_MD)
    assert "compact-duplicate" not in rules(check_findings(call)[1])


def test_a_killed_compact_of_a_fact_block_with_a_space_in_its_name_is_found(
    store, call, aux, monkeypatch
):
    (store / ".stacks" / "config.json").write_text('{"fact_history_limit": 1}\n')
    for value in ("a", "b", "c"):
        ok(call("fact", "set", "letter", value, "--block", "team", "--why", f"now {value}"))
    team = store / ".stacks" / "refs" / "team.md"
    spaced = store / ".stacks" / "refs" / "team facts.md"
    team.rename(spaced)
    reference = aux / "reference"
    shutil.copytree(store, reference)
    done = subprocess.run(
        [sys.executable, str(STM_PY), "compact"], cwd=reference, env=PROC_ENV, timeout=60
    )
    assert done.returncode == 0
    killed = killed_stm(store, aux, "write-1", "compact")
    assert killed.returncode == 137, killed.stderr
    found = [f for f in check_findings(call)[1] if f["rule"] == "compact-duplicate"]
    assert [f["path"] for f in found] == [".stacks/refs/team facts.md"], found
    ok(call("check", "--fix"))
    assert spaced.read_text() == (reference / ".stacks" / "refs" / "team facts.md").read_text()
    assert "compact-duplicate" not in rules(check_findings(call)[1])


@pytest.fixture
def over_limits_loose(store, call):
    """MEMORY.md and a fact block over their limits, so compact appends to the log and
    then rewrites two files."""
    (store / ".stacks" / "config.json").write_text(
        '{"fact_history_limit": 1, "default_section_limit": 1}\n'
    )
    for value in ("a", "b", "c"):
        ok(call("fact", "set", "letter", value, "--why", f"now {value}"))
    (store / MEMORY_MD).write_text(LOOSE_MEMORY)
    return store


OPERATIONS = {
    "compact": ["compact"],
    "fact rm": ["fact", "rm", "letter", "--why", "not needed"],
}


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EFBIG])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_fault_at_any_step_of_compact_or_fact_rm_leaves_the_tree_as_it_was(
    over_limits_loose, call, aux, monkeypatch, operation, error
):
    """Issue 22, 13: ENOSPC or EFBIG at any write step (the log append, each rewrite):
    exit 1, a message naming the file, the tree byte-identical (no log entry left)."""
    root = over_limits_loose
    argv = OPERATIONS[operation]
    pristine = aux / "pristine"
    shutil.copytree(root, pristine)
    entries = log_text(root).count("<!-- stm:entry ")
    monkeypatch.setenv("STM_FSYNC", "1")
    counter = FaultyOS(os, 0, error)
    monkeypatch.setattr(stm, "os", counter)
    ok(call(*argv))
    monkeypatch.setattr(stm, "os", os)
    steps = counter.calls
    assert steps >= 6
    for step in range(1, steps + 1):
        restore(pristine, root)
        before = snapshot(root)
        monkeypatch.setattr(stm, "os", FaultyOS(os, step, error))
        result = call(*argv)
        monkeypatch.setattr(stm, "os", os)
        assert result.code == 1, (step, result)
        assert "(injected)" in result.err and "Traceback" not in result.err, (step, result)
        assert ".stacks/" in result.err, (step, result.err)  # it names the file
        assert snapshot(root) == before, f"step {step} of {steps} changed the tree"
    # And the next run does the whole job once: one entry, nothing logged twice.
    restore(pristine, root)
    ok(call(*argv))
    assert log_text(root).count("<!-- stm:entry ") == entries + 1
