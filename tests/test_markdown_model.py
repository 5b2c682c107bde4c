"""One Markdown model (issue 21): the same tricky inputs go through every user of the
model (boot's cuts, note, compact, check, sync's counts, facts, the merge driver) and
each must give the same answer: which lines form which section, which lines which item.

Each input states its answer once (EXPECTED: per section, its bullets); the model must
give it, and every user must agree with the model."""

from __future__ import annotations

import json

import pytest
from conftest import MEMORY, TODAY

import stm

FENCE = (
    "# Memory\n\n## Observations\n\n- first\n```sh\n- not a bullet\n# not a heading\n"
    "## not a section\n```\n\n- second\n  ```\n  - inside the second bullet\n  ```\n\n"
    "## Next Steps\n\n- step\n"
)
LOOSE = (
    "# Memory\n\n## Ideas\n\n- loose one\n\n  its continuation after a blank line\n\n"
    "- tight\n  cont\n- three\n\n\n  two blank lines before this one\n\nprose after\n"
)
COMMENT = (
    "# Memory\n\n## Status\n\n<!--\n## not a section\n- not a bullet\n-->\n"
    "- real\n- two <!-- a note\n## still inside the comment\n-->\n\n## Next Steps\n\n- go\n"
)
LEVELS = (
    "# Title\n\n## Next Steps\n\n- a\n\n# Appendix\n\n- x\n- y\n\n## Last Updated\n\n2026-01-01\n"
)
LINE_ENDS = (
    "# Memory\r\n\r\n## A\r\n\r\n- one\u2028still one\r\n- two\u2029still two\x0cand more\r\n"
    "\r\n## B\r\n\r\n- b\r\n"
)
NO_NEWLINE = "# Memory\n\n## A\n\n- one\n\n## Z\n\n- last one\n  its end"
CONFLICT = (
    "# Memory\n\n## A\n\n<<<<<<< ours\n- mine\n=======\n- theirs\n>>>>>>> theirs\n- after\n\n"
    "## B\n\n- b\n"
)

EXPECTED = {
    "fence": (
        FENCE,
        {
            "Observations": [
                ("- first",),
                ("- second", "  ```", "  - inside the second bullet", "  ```"),
            ],
            "Next Steps": [("- step",)],
        },
    ),
    "loose": (
        LOOSE,
        {
            "Ideas": [
                ("- loose one", "", "  its continuation after a blank line"),
                ("- tight", "  cont"),
                ("- three", "", "", "  two blank lines before this one"),
            ]
        },
    ),
    "comment": (
        COMMENT,
        {
            "Status": [("- real",), ("- two <!-- a note", "## still inside the comment", "-->")],
            "Next Steps": [("- go",)],
        },
    ),
    "levels": (
        LEVELS,
        {"Next Steps": [("- a",)], "# Appendix": [("- x",), ("- y",)], "Last Updated": []},
    ),
    "line ends": (
        LINE_ENDS,
        {"A": [("- one\u2028still one",), ("- two\u2029still two\x0cand more",)], "B": [("- b",)]},
    ),
    "no newline": (NO_NEWLINE, {"A": [("- one",)], "Z": [("- last one", "  its end")]}),
    "conflict": (CONFLICT, {"A": [("- mine",), ("- theirs",), ("- after",)], "B": [("- b",)]}),
}
CASES = list(EXPECTED)


def model_answer(text: str) -> dict:
    doc = stm.MdDoc.of(text)
    return {part.name: doc.bullets(part) for part in doc.parts}


def sections_only(answer: dict) -> dict:
    """The `## ` sections of an answer (a `# ` part is named by its whole line)."""
    return {name: bullets for name, bullets in answer.items() if not name.startswith("#")}


@pytest.mark.parametrize("case", CASES)
def test_the_model_gives_the_stated_answer(case):
    text, expected = EXPECTED[case]
    assert model_answer(text) == expected


def test_one_line_splitting_rule():
    assert stm.md_lines("a\r\nb\u2028c\u2029d\x0ce\n") == ["a", "b\u2028c\u2029d\x0ce"]
    assert stm.md_lines("a\n\n") == ["a", ""]
    assert stm.md_lines("no end") == ["no end"]


def test_line_kinds_fence_and_comment_whichever_opens_first():
    lines = ["```", "<!--", "```", "<!--", "```", "-->", "text", "<!-- never closed", "## h"]
    kinds = stm.md_line_kinds(lines)
    assert kinds[:7] == [
        stm.MD_FENCE_OPEN,
        stm.MD_FENCE,
        stm.MD_FENCE,
        stm.MD_TEXT,
        stm.MD_COMMENT,
        stm.MD_COMMENT,
        stm.MD_TEXT,
    ]
    # a `<!--` that no `-->` follows opens nothing: the heading after it is a heading
    assert kinds[7:] == [stm.MD_TEXT, stm.MD_TEXT]


@pytest.mark.parametrize("case", CASES)
def test_compact_moves_what_the_model_calls_bullets(case):
    text, expected = EXPECTED[case]
    config = {**stm.CONFIG_DEFAULTS, "default_section_limit": 0}
    rest, moved = stm.compact_memory_text(text, config)
    wanted = {
        name: [line for bullet in bullets for line in bullet]
        for name, bullets in sections_only(expected).items()
        if bullets and name != "Last Updated"
    }
    assert dict(moved) == wanted
    after = model_answer(rest)
    assert all(after[name] == [] for name in wanted)
    assert {k: v for k, v in after.items() if k not in wanted} == {
        k: v for k, v in expected.items() if k not in wanted
    }


@pytest.mark.parametrize("case", CASES)
def test_compact_bookkeeping_and_sync_count_the_same_items(case):
    text, expected = EXPECTED[case]
    for name, bullets in expected.items():
        if name != "Last Updated":
            assert stm.compactable_items(text, name) == bullets  # check's duplicate finder
    assert stm.memory_notes(text) == [
        (name.lower(), bullet) for name, bullets in expected.items() for bullet in bullets
    ]
    assert stm.MdDoc.of(text).bullet_count() == sum(map(len, expected.values()))
    # the log holds what compact moved; read back, each item is the one that left
    moved = [line for bullets in expected.values() for bullet in bullets for line in bullet]
    header = "moved from x ## A by stm compact: <!-- stm:compact MEMORY.md A -->"
    logged = stm.compact_moves([header, "", *moved])
    assert logged == [("MEMORY.md", "A", [b for bs in expected.values() for b in bs])]


@pytest.mark.parametrize("case", CASES)
def test_boot_cuts_the_bullets_of_the_model(case, store):
    text, expected = EXPECTED[case]
    (store / ".stacks" / "MEMORY.md").write_bytes(text.encode())
    layer = stm.BootParts(stm.open_store()).parsed("session")
    counted = {layer.title(index): count for index, count in enumerate(layer.counts)}
    assert counted == {name.lstrip("# "): len(bullets) for name, bullets in expected.items()}


@pytest.mark.parametrize("case", CASES)
def test_check_counts_the_bullets_of_the_model(case, store, run):
    text, expected = EXPECTED[case]
    (store / ".stacks" / "MEMORY.md").write_bytes(text.encode())
    limits = {name: 0 for name in expected}
    (store / ".stacks" / "config.json").write_text(json.dumps({"section_limits": limits}))
    result = run("check", "--json")
    findings = json.loads(result.out)["findings"]
    reported = {
        f["message"].split('"')[1]: int(f["message"].split(" holds ")[1].split()[0])
        for f in findings
        if f["rule"] == "section-over-limit"
    }
    wanted = sections_only(expected)
    assert reported == {n: len(b) for n, b in wanted.items() if b and n != "Last Updated"}
    lines = [f["line"] for f in findings if f["rule"] == "section-over-limit"]
    doc = stm.MdDoc.of(text)
    assert lines == [
        p.start + 1 for p in doc.headed() if len(doc.bullets(p)) and p.name in reported
    ]


@pytest.mark.parametrize("case", CASES)
def test_note_adds_above_the_model_bullets_and_finds_them(case):
    text, expected = EXPECTED[case]
    for name, bullets in sections_only(expected).items():
        if name == "Last Updated":
            continue
        after = model_answer(stm.add_note(text, name, "new note", False, None))
        assert after == {**expected, name: [("- new note",), *bullets]}
        if bullets and len(bullets[0]) == 1:
            assert stm.bullet_present(text, name, bullets[0][0][2:])
        assert stm.section_body(text, name) is not None


@pytest.mark.parametrize("case", [c for c in CASES if c != "conflict"])
def test_the_merge_driver_merges_the_model_sections(case):
    text, expected = EXPECTED[case]
    names = [name for name in sections_only(expected) if name != "Last Updated"]
    base = text.replace("\r\n", "\n")
    ours = stm.add_note(base, names[0], "ours", False, None)
    theirs = stm.add_note(base, names[-1], "theirs", False, None)
    merged, clean = stm.merge_markdown(base, ours, theirs)
    assert clean, merged
    wanted = dict(expected)
    wanted[names[-1]] = [("- theirs",), *wanted[names[-1]]]
    wanted[names[0]] = [*([("- ours",)] if names[0] != names[-1] else []), *wanted[names[0]]]
    if names[0] == names[-1]:  # two notes in one section: theirs, then ours, newest first
        wanted[names[0]] = [("- theirs",), ("- ours",), *expected[names[0]]]
    assert model_answer(merged) == wanted


@pytest.mark.parametrize("case", CASES)
def test_merge_list_units_are_the_model_items(case):
    text, expected = EXPECTED[case]
    doc = stm.MdDoc.of(text)
    for part in doc.parts:
        units = stm.md_list_units(stm.md_strip_blank(doc.body(part)))
        if units is not None:  # a list body: its bullets are the model's
            assert [u for u, _ in units if stm.MD_BULLET_RE.match(u[0])] == expected[part.name]


@pytest.mark.parametrize("case", CASES)
def test_facts_read_the_model_sections(case):
    text, expected = EXPECTED[case]
    _, sections = stm.parse_fact_block(text)
    assert [key for key, _, _, _ in sections] == list(expected)


def test_conflict_markers_are_found_outside_fences_only():
    assert stm.md_has_conflict_markers(CONFLICT) == [5, 7, 9]
    fenced = CONFLICT.replace("<<<<<<< ours", "```\n<<<<<<< ours").replace(
        ">>>>>>> theirs\n", ">>>>>>> theirs\n```\n"
    )
    assert stm.md_has_conflict_markers(fenced) == []


def test_a_fact_block_is_read_and_written_by_one_pair():
    body = ["**Current:** Go", "", "**History:**", "- 2025-01-15T12:00:00Z: Go"]
    fact = stm.read_fact("lang", body)
    assert stm.render_fact_body(fact) == body
    older = stm.read_fact("lang", ["**Current:** Py", "**History:**", "- 2025-01-01T00:00:00Z: Py"])
    merged = stm.merge_md_facts(fact, older)
    assert merged == stm.render_fact_body(stm.read_fact("lang", merged))
    assert merged[0] == "**Current:** Go" and merged[-1] == "- 2025-01-01T00:00:00Z: Py"


ADJACENT_FENCE = (
    "# Session Memory\n\n## Observations\n\n"
    + "".join(f"- observation {n} that takes some room in the budget of boot\n" for n in range(6))
    + "- the stages are:\n```yaml\n- build\n- ship\n```\n- the last observation\n\n"
    f"## Last Updated\n\n{TODAY}\n"
)


def test_a_fence_right_after_a_bullet_is_its_own_item_in_boot_and_compact(store, run):
    """CommonMark: an unindented fence is no part of the bullet above it. Boot's cuts and
    compact agree: the bullet may go, the fence stays whole, never half of it."""
    doc = stm.MdDoc.of(ADJACENT_FENCE)
    kinds = [item.kind for item in doc.items(doc.parts[0])]
    assert kinds == ["bullet"] * 7 + ["fence", "bullet"]
    (store / ".stacks" / "MEMORY.md").write_text(ADJACENT_FENCE)
    full, cut = run("boot").out, 0
    for limit in range(800, len(full) + 1, 11):
        out = run("boot", "--max-chars", str(limit)).out
        memory = out.split("## Session memory")[-1]
        fences = [line for line in memory.split("\n") if line.startswith("```")]
        assert len(fences) in (0, 2) and ("- ship" in memory) == bool(fences), limit
        # (what the cut left out is said in the notices, above the memory)
        cut += "older bullets of Observations" in out and "- the stages are:" not in memory
    assert cut  # some budget left the bullet out and kept its neighbour, the fence, whole
    rest, moved = stm.compact_memory_text(ADJACENT_FENCE, {**stm.CONFIG_DEFAULTS, **LIMIT_2})
    assert "```yaml\n- build\n- ship\n```" in rest and "- ship" not in str(moved)


LIMIT_2 = {"default_section_limit": 2}


def test_a_heading_in_a_fence_or_comment_is_no_title_and_no_section():
    assert stm.parse_ref_head("```\n# code\n```\n# Real title\n\nSummary.\n") == (
        "Real title",
        "Summary.",
    )
    text = "# M\n\n## Status\n\n<!--\n## Hidden\n-->\n- s\n\n## Last Updated\n\nx\n"
    assert [part.name for part in stm.MdDoc.of(text).parts] == ["Status", "Last Updated"]
    assert stm.nearest_sections(text, "Hidden") is not None  # note: no such section
    assert stm.strip_comments("```\n<!-- code -->\n```\n<!-- gone -->") == "```\n<!-- code -->\n```"


def test_a_four_backtick_fence_holding_a_three_backtick_line_hides_no_heading(store, run):
    """One fence rule everywhere (CommonMark's closing rule): note, check and boot agree
    with the merge driver."""
    memory = store / ".stacks" / "MEMORY.md"
    text = MEMORY.replace(
        "Parser port half done; the lexer passes its tests.",
        "Parser port half done.\n\n````\n```python\n````",
    )
    memory.write_text(text)
    assert run("note", "Next Steps", "do X").code == 0
    found = json.loads(run("check", "--json").out)["findings"]
    assert not [f for f in found if f["rule"] == "heading-missing"]
    assert run("check", "--fix").code == 0
    assert memory.read_text().count("## Last Updated") == 1
