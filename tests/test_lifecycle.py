"""The memory lifecycle: facts, config.json, `stm digest`, `note --ref`.

The contract is spec/memory-layers.md ("Facts", "Config", "Staleness and digest" and the
check rules `fact-current`, `config-invalid`, `memory-over-threshold`), spec/json.md (the
`fact` and `digest` keys) and spec/merge.md (fact blocks merge per key). Wherever output
depends on the time, the clock (`stm.utc_now`) is pinned. `stm compact` and its
`compact-duplicate` rule: test_compact.py.

Process-level tests (concurrent `fact set`) run stm in real processes; the rest run
in-process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, snapshot
from helpers import (
    PROC_ENV,
    check_findings,
    entry_text,
    fact_block,
    log_entries,
    memory_text,
    ok,
    pin,
    read,
    rules,
    run_stm,
    write_config,
    write_memory,
)

import stm

SPEC_FACTS = (
    "# Facts\n"
    "\n"
    "## primary_language\n"
    "**Current:** Go\n"
    "\n"
    "**History:**\n"
    "- 2025-01-15T12:00:00Z: Go\n"
    "- 2025-01-03T00:46:00Z: Python\n"
    "  - *Correction: User clarified they've switched primarily to Go*\n"
)
WHY = "User clarified they've switched primarily to Go"
FAKE_TOKEN = "ghp_" + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"  # 36 letters: the GitHub pattern
MEMORY_PATH = ".stacks/MEMORY.md"
FACTS_PATH = ".stacks/refs/facts.md"


# ---- helpers ---------------------------------------------------------------------------


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


def test_each_correction_sits_under_the_value_it_replaced(store, run, monkeypatch):
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
        "- 2025-01-02T00:00:00Z: Go\n"
        "  - *Correction: switched again*\n"
        "- 2025-01-01T00:00:00Z: Python\n"
        "  - *Correction: switched*\n"
    )
    assert check_findings(run)[0] == 0


def test_a_block_with_corrections_under_the_new_value_is_still_read(store, run, monkeypatch):
    """The form earlier versions wrote (the Correction under the value it explains) is
    read as it is, and a new set files its correction the seed's way beside it."""
    old_form = (
        "# Facts\n\n## primary_language\n**Current:** Go\n\n**History:**\n"
        "- 2025-01-15T12:00:00Z: Go\n"
        f"  - *Correction: {WHY}*\n"
        "- 2025-01-03T00:46:00Z: Python\n"
    )
    (store / FACTS_PATH).parent.mkdir(exist_ok=True)
    (store / FACTS_PATH).write_text(old_form)
    assert check_findings(run)[0] == 0
    data = json.loads(ok(run("fact", "get", "primary_language", "--history", "--json")).out)
    assert [h["notes"] for h in data["history"]] == [[f"*Correction: {WHY}*"], []]
    pin(monkeypatch, "2025-02-01T00:00:00Z")
    ok(run("fact", "set", "primary_language", "Rust", "--why", "rewrote it"))
    assert read(store, FACTS_PATH) == old_form.replace(
        "**Current:** Go", "**Current:** Rust"
    ).replace(
        "**History:**\n- 2025-01-15T12:00:00Z: Go\n",
        "**History:**\n- 2025-02-01T00:00:00Z: Rust\n- 2025-01-15T12:00:00Z: Go\n",
    ).replace(
        f"  - *Correction: {WHY}*\n",
        f"  - *Correction: {WHY}*\n  - *Correction: rewrote it*\n",
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
    assert "2025-01-03T00:46:00Z" in lines[2] and lines[2].endswith("Python")
    assert WHY in lines[3]  # the correction, under the value it replaced
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
    assert data["history"][0]["notes"] == []
    assert len(data["history"][1]["notes"]) == 1 and WHY in data["history"][1]["notes"][0]
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
    assert lang.history[3][2] == [f"  - *Correction: {WHY}*"]  # under Python, as written
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
    result = run_stm("check", cwd=store, full_env=PROC_ENV)
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


def ref_folders(n: int) -> str:
    return "/".join(f"d{i}" for i in range(n))


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        (ref_folders(stm.REFS_DEPTH_MAX + 1) + "/x", "deep"),
        (ref_folders(20) + "/x", "deep"),
        (".hidden", "hidden"),
        ("sub/.hidden", "hidden"),
        (".sub/visible", "hidden"),
        ("refs/.hidden.md", "hidden"),
    ],
)
def test_note_ref_refuses_a_path_the_readers_would_not_read(store, call, name, reason):
    before = snapshot(store)
    result = call("note", "--ref", name, "Sec", "hello", "--create")
    assert result.code == 2, result
    assert "--ref" in result.err and reason in result.err, result
    assert len(result.err.strip().splitlines()) == 1, result
    assert snapshot(store) == before


def test_note_ref_at_the_depth_limit_is_read_by_every_reader(store, call):
    name = ref_folders(stm.REFS_DEPTH_MAX) + "/bottom"
    ok(call("note", "--ref", name, "Sec", "quokka at the bottom", "--create"))
    assert "quokka at the bottom" in ok(call("search", "quokka")).out
    assert f"refs/{name}.md" in ok(call("boot")).out
    assert [f for f in check_findings(call)[1] if f["severity"] == "error"] == []


def test_readers_skip_a_too_deep_refs_folder_with_the_reason(store, call):
    """The readers and the writer share one rule; a tree made deeper by hand is reported
    by check as too deep (not as a link), and boot and digest do not call it a FIFO."""
    deep = store / ".stacks" / "refs" / ref_folders(20)
    deep.mkdir(parents=True)
    (deep / "x.md").write_text("# X\n\nquokka\n")
    boot = ok(call("boot"))
    assert "FIFO" not in boot.err and "not a regular file" not in boot.err, boot
    digest = call("digest")
    assert digest.code == 0, digest
    found = [f for f in check_findings(call)[1] if f["path"].startswith(".stacks/refs/d0")]
    assert found and all(f["rule"] != "layer-symlink" for f in found), found
    assert all("deep" in f["message"] for f in found), found


def test_note_ref_refuses_to_write_into_a_fact(store, run):
    assert run("fact", "set", "lang", "Go").code == 0
    before = snapshot(store)
    result = run("note", "--ref", "facts", "lang", "x")
    assert result.code == 2 and "stm fact set lang" in result.err
    assert snapshot(store) == before
    assert run("fact", "get", "lang").out == "Go\n"
