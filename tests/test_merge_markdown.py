"""The three-way Markdown merge behind `stm merge-file` (spec/merge.md), rule by rule,
plus random property runs."""

from __future__ import annotations

import random

import pytest

from stm import MdDoc, md_has_conflict_markers, merge_markdown


def doc(*sections: tuple[str, str], title: str = "# Session Memory") -> str:
    """A MEMORY.md-style file: title, then `## name` + blank + body for each section."""
    parts = [title] + [f"## {name}\n\n{body}".rstrip("\n") for name, body in sections]
    return "\n\n".join(parts) + "\n"


def split_md_sections(text: str):
    """(preamble, [(name, heading line, body)]): the Markdown model's sections."""
    preamble, sections = MdDoc.of(text).split()
    return preamble, [(part.name, heading, body) for part, heading, body in sections]


def section(text: str, name: str) -> str | None:
    """The stripped body of the first section called `name` (case-insensitive)."""
    for found, _, body in split_md_sections(text)[1]:
        if found.lower() == name.lower():
            return "\n".join(body).strip("\n")
    return None


def names(text: str) -> list[str]:
    return [name for name, _, _ in split_md_sections(text)[1]]


def merge(base: str, ours: str, theirs: str) -> tuple[str, bool]:
    merged, clean = merge_markdown(base, ours, theirs)
    assert merged.endswith("\n") and not merged.endswith("\n\n")
    return merged, clean


T0, T1, T2 = "2026-11-20", "2026-11-22T10:00:00Z", "2026-11-22T11:30:00Z"


# ---- main scenario -------------------------------------------------------------


def test_two_notes_merge_cleanly_newest_stamp_wins():
    base = doc(("Next Steps", "- old step"), ("Last Updated", T0))
    ours = doc(("Next Steps", "- A\n- old step"), ("Last Updated", T1))
    theirs = doc(("Next Steps", "- B\n- old step"), ("Last Updated", T2))
    merged, clean = merge(base, ours, theirs)
    assert clean
    assert merged == doc(("Next Steps", "- B\n- A\n- old step"), ("Last Updated", T2))
    swapped, clean = merge(base, theirs, ours)
    assert clean
    assert swapped == doc(("Next Steps", "- A\n- B\n- old step"), ("Last Updated", T2))


def test_two_notes_on_template_look_like_stm_note():
    comment = "<!-- What should the next session do first? -->"
    base = doc(("Next Steps", comment), ("Last Updated", "<!-- Date of the last rewrite -->"))
    ours = doc(("Next Steps", f"{comment}\n\n- A"), ("Last Updated", T1))
    theirs = doc(("Next Steps", f"{comment}\n\n- B"), ("Last Updated", T2))
    merged, clean = merge(base, ours, theirs)
    assert clean
    assert merged == doc(("Next Steps", f"{comment}\n\n- B\n- A"), ("Last Updated", T2))


# ---- prose ---------------------------------------------------------------------


def test_same_prose_line_rewritten_differently_conflicts_in_that_section_only():
    base = doc(("Status", "Parser port half done.\nDocs pending."), ("Next Steps", "- x"))
    ours = doc(("Status", "Parser port done.\nDocs pending."), ("Next Steps", "- o\n- x"))
    theirs = doc(("Status", "Parser port blocked.\nDocs pending."), ("Next Steps", "- t\n- x"))
    merged, clean = merge(base, ours, theirs)
    assert not clean
    status = section(merged, "Status")
    assert status == "\n".join(
        [
            "<<<<<<< ours",
            "Parser port done.",
            "=======",
            "Parser port blocked.",
            ">>>>>>> theirs",
            "Docs pending.",
        ]
    )
    assert section(merged, "Next Steps") == "- t\n- o\n- x"
    lines = merged.split("\n")
    assert [lines[n - 1] for n in md_has_conflict_markers(merged)] == [
        "<<<<<<< ours",
        "=======",
        ">>>>>>> theirs",
    ]


def test_prose_non_overlapping_changes_merge_and_identical_changes_once():
    base = doc(("Status", "one\ntwo\nthree\nfour\nfive"))
    ours = doc(("Status", "ONE\ntwo\nthree\nfour\nFIVE"))
    theirs = doc(("Status", "one\ntwo\nTHREE\nfour\nFIVE"))
    merged, clean = merge(base, ours, theirs)
    assert clean
    assert section(merged, "Status") == "ONE\ntwo\nTHREE\nfour\nFIVE"


def test_prose_change_next_to_an_append_is_clean():
    base = doc(("Status", "Parser port half done."))
    ours = doc(("Status", "Parser port done."))
    theirs = doc(("Status", "Parser port half done.\nDocs started."))
    merged, clean = merge(base, ours, theirs)
    assert clean and section(merged, "Status") == "Parser port done.\nDocs started."


def test_prose_insertions_at_same_place_conflict_and_keep_both():
    base = doc(("Status", "one\ntwo"))
    merged, clean = merge(
        base, doc(("Status", "one\nmine\ntwo")), doc(("Status", "one\nyours\ntwo"))
    )
    assert not clean
    assert "mine" in merged and "yours" in merged
    assert section(merged, "Status").startswith("one\n<<<<<<< ours\nmine\n=======\nyours\n")


def test_prose_conflict_inside_code_fence_wraps_whole_body_outside_fences():
    body = "Run:\n```\n## not a heading\nmake {}\n```"
    base = doc(("Status", body.format("all")))
    ours = doc(("Status", body.format("test")))
    theirs = doc(("Status", body.format("lint")))
    merged, clean = merge(base, ours, theirs)
    assert not clean
    assert names(merged) == ["Status"]
    assert len(md_has_conflict_markers(merged)) == 3
    assert "make test" in merged and "make lint" in merged


def test_preamble_merges_as_prose():
    base = doc(("Status", "s"), title="# Memory\n\nintro\nmore")
    ours = doc(("Status", "s"), title="# Memory\n\nINTRO\nmore")
    theirs = doc(("Status", "s"), title="# Memory\n\nintro\nmore\nadded")
    merged, clean = merge(base, ours, theirs)
    assert clean
    assert merged.startswith("# Memory\n\nINTRO\nmore\nadded\n\n## Status\n")


def test_marker_size_and_labels():
    base = doc(("Status", "a"))
    merged, clean = merge_markdown(
        base, doc(("Status", "b")), doc(("Status", "c")), 9, ("HEAD", "base", "other")
    )
    assert not clean
    assert "<<<<<<<<< HEAD\nb\n=========\nc\n>>>>>>>>> other\n" in merged
    assert len(md_has_conflict_markers(merged, 9)) == 3


# ---- sections ------------------------------------------------------------------


def test_headings_match_case_insensitively():
    base = doc(("Next Steps", "- x"))
    ours = doc(("next steps", "- o\n- x"))
    theirs = doc(("Next Steps", "- t\n- x"))
    merged, clean = merge(base, ours, theirs)
    assert clean and names(merged) == ["next steps"]
    assert section(merged, "Next Steps") == "- t\n- o\n- x"


def test_theirs_section_goes_after_its_neighbour_and_above_last_updated():
    base = doc(("Status", "s"), ("Next Steps", "- x"), ("Last Updated", T0))
    ours = doc(("Status", "s"), ("Next Steps", "- x"), ("Mine", "m"), ("Last Updated", T1))
    theirs = doc(
        ("Status", "s"),
        ("Decisions", "- d"),
        ("Next Steps", "- x"),
        ("Last Updated", T2),
    )
    merged, clean = merge(base, ours, theirs)
    assert clean
    assert names(merged) == ["Status", "Decisions", "Next Steps", "Mine", "Last Updated"]
    # OURS' order wins over base's and THEIRS'.
    reordered = doc(("Next Steps", "- x"), ("Status", "s"), ("Last Updated", T1))
    merged, clean = merge(base, reordered, theirs)
    assert clean and names(merged) == ["Next Steps", "Status", "Decisions", "Last Updated"]
    # A section THEIRS put below Last Updated still lands above it.
    theirs = doc(("Status", "s"), ("Next Steps", "- x"), ("Last Updated", T2), ("Late", "l"))
    merged, clean = merge(base, ours, theirs)
    assert clean and names(merged)[-2:] == ["Late", "Last Updated"]


def test_section_added_on_one_side_is_added():
    base = doc(("Status", "s"))
    merged, clean = merge(base, base, doc(("Status", "s"), ("Ideas", "- i")))
    assert clean and section(merged, "Ideas") == "- i"


def test_section_added_on_both_sides_unions_bullets():
    base = doc(("Status", "s"))
    ours = doc(("Status", "s"), ("Ideas", "- shared\n- mine"))
    theirs = doc(("Status", "s"), ("Ideas", "- yours\n- shared"))
    merged, clean = merge(base, ours, theirs)
    assert clean
    assert section(merged, "Ideas") == "- yours\n- shared\n- mine"


def test_prose_section_added_on_both_sides_conflicts_only_where_different():
    base = doc(("Status", "s"))
    ours = doc(("Status", "s"), ("Plan", "same start\nmine\nsame end"))
    theirs = doc(("Status", "s"), ("Plan", "same start\nyours\nsame end"))
    merged, clean = merge(base, ours, theirs)
    assert not clean
    assert section(merged, "Plan") == "\n".join(
        ["same start", "<<<<<<< ours", "mine", "=======", "yours", ">>>>>>> theirs", "same end"]
    )


def test_removed_section_unchanged_elsewhere_is_removed():
    base = doc(("Status", "s"), ("Ideas", "- i"))
    ours = doc(("Status", "s"))
    assert names(merge(base, ours, base)[0]) == ["Status"]
    assert names(merge(base, base, ours)[0]) == ["Status"]


def test_removed_section_changed_elsewhere_is_kept():
    base = doc(("Status", "s"), ("Ideas", "- i"))
    changed = doc(("Status", "s"), ("Ideas", "- new\n- i"))
    removed = doc(("Status", "s"))
    for ours, theirs in ((removed, changed), (changed, removed)):
        merged, clean = merge(base, ours, theirs)
        assert section(merged, "Ideas") == "- new\n- i"


def test_identical_change_on_both_sides_taken_once():
    base = doc(("Status", "old"), ("Next Steps", "- x"))
    both = doc(("Status", "new"), ("Next Steps", "- y\n- x"))
    merged, clean = merge(base, both, both)
    assert clean and merged == both


def test_duplicate_headings_match_by_occurrence_and_lose_nothing():
    base = doc(("Notes", "- a"), ("Notes", "- b"))
    ours = doc(("Notes", "- a1\n- a"), ("Notes", "- b"))
    theirs = doc(("Notes", "- a"), ("Notes", "- b2\n- b"))
    merged, clean = merge(base, ours, theirs)
    assert clean
    assert merged == doc(("Notes", "- a1\n- a"), ("Notes", "- b2\n- b"))
    # THEIRS has one more copy of the heading than OURS: it is kept, not folded in.
    merged, clean = merge(base, base, doc(("Notes", "- a"), ("Notes", "- b"), ("Notes", "- c")))
    assert clean and names(merged) == ["Notes", "Notes", "Notes"]


def test_split_is_fence_aware_and_lossless():
    text = "# T\n\nintro\n\n## A\n\n```\n## inside\n```\n\n~~~~\n```\n## also\n~~~~\n## B\nb\n"
    preamble, sections = split_md_sections(text)
    assert preamble == ["# T", "", "intro", ""]
    assert [name for name, _, _ in sections] == ["A", "B"]
    rebuilt = preamble + [line for _, heading, body in sections for line in [heading, *body]]
    assert "\n".join(rebuilt) + "\n" == text


def test_conflict_markers_found_outside_fences_only():
    text = "a\n<<<<<<< ours\nb\n=======\nc\n>>>>>>> theirs\n```\n=======\n```\n========\n"
    assert md_has_conflict_markers(text) == [2, 4, 6]
    assert md_has_conflict_markers(text.replace("\n", "\r\n")) == [2, 4, 6]


# ---- bullets -------------------------------------------------------------------


def test_bullet_removed_on_one_side_is_removed():
    base = doc(("Next Steps", "- a\n- b\n- c"))
    ours = doc(("Next Steps", "- a\n- c"))
    theirs = doc(("Next Steps", "- new\n- a\n- b\n- c"))
    merged, clean = merge(base, ours, theirs)
    assert clean and section(merged, "Next Steps") == "- new\n- a\n- c"


def test_bullet_edit_is_removal_plus_addition_and_same_addition_once():
    base = doc(("Next Steps", "- a\n- b"))
    ours = doc(("Next Steps", "- same\n- a\n- b edited"))
    theirs = doc(("Next Steps", "- same\n- a\n- b"))
    merged, clean = merge(base, ours, theirs)
    assert clean and section(merged, "Next Steps") == "- same\n- a\n- b edited"


def test_bullets_keep_continuation_lines_and_comments():
    base = doc(("Observations", "<!-- guidance -->\n\n- old\n  more old"))
    ours = doc(("Observations", "<!-- guidance -->\n\n- o\n  o cont\n- old\n  more old"))
    theirs = doc(("Observations", "<!-- guidance -->\n\n* t\n  t cont\n- old\n  more old"))
    merged, clean = merge(base, ours, theirs)
    assert clean
    assert section(merged, "Observations") == (
        "<!-- guidance -->\n\n* t\n  t cont\n- o\n  o cont\n- old\n  more old"
    )
    # Removing a bullet removes its continuation lines with it.
    theirs = doc(("Observations", "<!-- guidance -->"))
    merged, clean = merge(base, ours, theirs)
    assert section(merged, "Observations") == "<!-- guidance -->\n\n- o\n  o cont"


def test_bullets_appended_at_bottom_by_both():
    base = doc(("Ideas", "- a"))
    merged, clean = merge(base, doc(("Ideas", "- a\n- o")), doc(("Ideas", "- a\n- t")))
    assert clean and section(merged, "Ideas") == "- a\n- t\n- o"


# ---- Last Updated --------------------------------------------------------------


@pytest.mark.parametrize(
    ("mine", "yours", "later"),
    [
        (T1, T2, T2),
        (T2, T1, T2),
        ("2026-11-23", T2, "2026-11-23"),  # date-safe: pinned clock or id
        ("2026-11-22T12:00:00+02:00", "2026-11-22T10:30:00Z", "2026-11-22T10:30:00Z"),
        ("2026-11-22T10:00:00.5Z", "2026-11-22T10:00:00Z", "2026-11-22T10:00:00.5Z"),
    ],
)
def test_last_updated_takes_later_stamp(mine, yours, later):
    base = doc(("Status", "s"), ("Last Updated", T0))
    merged, clean = merge(
        base,
        doc(("Status", "s"), ("Last Updated", mine)),
        doc(("Status", "s"), ("Last Updated", yours)),
    )
    assert clean and section(merged, "Last Updated") == later


def test_last_updated_unparsable_falls_back_to_prose():
    base = doc(("Last Updated", T0))
    merged, clean = merge(base, doc(("Last Updated", "yesterday")), doc(("Last Updated", T2)))
    assert not clean and "yesterday" in merged and T2 in merged


# ---- facts ---------------------------------------------------------------------

FACT_BASE = """\
# Facts

## primary_language
**Current:** Python

**History:**
- 2025-01-03T00:46:00Z: Python

## editor
**Current:** vim

**History:**
- 2025-01-01T00:00:00Z: vim
"""


def test_fact_histories_union_newest_first():
    ours = FACT_BASE.replace(
        "**Current:** Python\n\n**History:**\n",
        "**Current:** Go\n\n**History:**\n- 2025-01-15T12:00:00Z: Go\n",
    ).replace(
        "- 2025-01-03T00:46:00Z: Python\n",
        "- 2025-01-03T00:46:00Z: Python\n  - *Correction: User clarified they've switched*\n",
    )
    theirs = (
        FACT_BASE.replace(
            "**Current:** Python\n\n**History:**\n",
            "**Current:** Rust\n\n**History:**\n- 2025-01-10T08:00:00Z: Rust\n",
        )
        .replace("**Current:** vim", "**Current:** emacs")
        .replace(
            "- 2025-01-01T00:00:00Z: vim",
            "- 2025-02-01T00:00:00Z: emacs\n- 2025-01-01T00:00:00Z: vim",
        )
    )
    merged, clean = merge(FACT_BASE, ours, theirs)
    assert clean
    assert merged == FACT_BASE.replace(
        "**Current:** Python\n\n**History:**\n- 2025-01-03T00:46:00Z: Python\n",
        "**Current:** Go\n\n**History:**\n- 2025-01-15T12:00:00Z: Go\n"
        "- 2025-01-10T08:00:00Z: Rust\n- 2025-01-03T00:46:00Z: Python\n"
        "  - *Correction: User clarified they've switched*\n",
    ).replace(
        "**Current:** vim\n\n**History:**\n",
        "**Current:** emacs\n\n**History:**\n- 2025-02-01T00:00:00Z: emacs\n",
    )


def test_same_fact_entry_added_on_both_sides_once():
    added = FACT_BASE.replace(
        "**History:**\n- 2025-01-03", "**History:**\n- 2025-01-15T12:00:00Z: Go\n- 2025-01-03"
    ).replace("**Current:** Python", "**Current:** Go")
    ours = added.replace("**Current:** vim", "**Current:** nano").replace(
        "- 2025-01-01T00:00:00Z: vim", "- 2025-03-01T00:00:00Z: nano\n- 2025-01-01T00:00:00Z: vim"
    )
    merged, clean = merge(FACT_BASE, ours, added)
    assert clean and merged == ours


# ---- encodings -----------------------------------------------------------------


def test_crlf_ours_gives_crlf_and_bom_follows_ours():
    base = doc(("Next Steps", "- x"), ("Last Updated", T0))
    ours = doc(("Next Steps", "- A\n- x"), ("Last Updated", T1))
    theirs = doc(("Next Steps", "- B\n- x"), ("Last Updated", T2))
    expected = doc(("Next Steps", "- B\n- A\n- x"), ("Last Updated", T2))
    merged, clean = merge_markdown(base, "\ufeff" + ours.replace("\n", "\r\n"), theirs)
    assert clean and merged == "\ufeff" + expected.replace("\n", "\r\n")
    merged, clean = merge_markdown("\ufeff" + base, ours, "\ufeff" + theirs.replace("\n", "\r\n"))
    assert clean and merged == expected


def test_output_ends_with_one_newline():
    base = doc(("Status", "s"))
    merged, clean = merge_markdown(base, base + "\n\n\n", doc(("Status", "t")) + "\n \n")
    assert clean and merged == doc(("Status", "t"))


def test_empty_inputs():
    assert merge_markdown("", "", "") == ("", True)
    text = doc(("Status", "s"))
    assert merge_markdown("", text, "") == (text, True)
    assert merge_markdown("", text, text) == (text, True)


# ---- property test -------------------------------------------------------------

POOL = ["Status", "Observations", "Open Questions", "Next Steps", "Decisions", "Blockers"]
EXTRA = ["Ideas", "Risks", "Links"]


def bullets_of(body: list[str]) -> list[str]:
    """Bullet units of a body (first line plus indented continuation lines)."""
    units: list[str] = []
    for line in body:
        if line.startswith(("- ", "* ")):
            units.append(line)
        elif line.startswith(" ") and units:
            units[-1] += "\n" + line
    return units


def sections_of(text: str) -> dict[str, list[str]]:
    return {name.lower(): bullets_of(body) for name, _, body in split_md_sections(text)[1]}


def random_bullet(rng: random.Random, tag: str) -> str:
    text = f"- {tag}-{rng.randrange(10**9)}"
    return text + f"\n  detail {rng.randrange(100)}" if rng.random() < 0.2 else text


def render(sections: list[tuple[str, list[str]]], stamp: str) -> str:
    return doc(*[(name, "\n".join(items)) for name, items in sections], ("Last Updated", stamp))


def derive(rng: random.Random, base: list, tag: str, shared: list[str]) -> list:
    side = []
    for name, items in base:
        if rng.random() < 0.1:
            continue  # delete the whole section
        kept = [item for item in items if rng.random() > 0.25]
        fresh = [random_bullet(rng, tag) for _ in range(rng.randrange(3))]
        if rng.random() < 0.3:
            fresh.append(shared[0])
        side.append((name, fresh + kept))
    for name in EXTRA:
        if rng.random() < 0.2:
            side.insert(rng.randrange(len(side) + 1), (name, [shared[1], random_bullet(rng, tag)]))
    return side


@pytest.mark.parametrize("seed", range(300))
def test_random_bullet_merges(seed):
    rng = random.Random(seed)
    base = [
        (name, [random_bullet(rng, "b") for _ in range(rng.randrange(4))])
        for name in POOL
        if rng.random() < 0.7
    ]
    shared = [random_bullet(rng, "both"), random_bullet(rng, "both-new")]
    ours, theirs = derive(rng, base, "o", shared), derive(rng, base, "t", shared)
    stamps = [f"2026-11-{day:02d}T{rng.randrange(24):02d}:00:00Z" for day in (20, 21, 22)]
    texts = [render(base, stamps[0]), render(ours, stamps[1]), render(theirs, stamps[2])]
    merged, clean = merge(*texts)
    assert clean and not md_has_conflict_markers(merged)
    out = sections_of(merged)
    assert len(out) == len(split_md_sections(merged)[1])  # no duplicate headings
    assert names(merged)[-1] == "Last Updated" and section(merged, "Last Updated") == stamps[2]
    old, mine, yours = (dict((n.lower(), items) for n, items in s) for s in (base, ours, theirs))
    for side, other in ((mine, yours), (yours, mine)):
        for name, items in side.items():
            if name not in other and items == old.get(name):
                assert name not in out  # deleted on one side, untouched on the other
                continue
            assert name in out
            if name not in other:
                assert out[name] == items  # deleted on one side, changed on the other
            for item in items:
                if item not in old.get(name, []):
                    assert out[name].count(item) == 1  # added: present exactly once
    for name in set(mine) & set(yours):
        for item in old.get(name, []):
            assert (item in out[name]) == (item in mine[name] and item in yours[name])
    swapped, clean = merge(texts[0], texts[2], texts[1])
    assert clean
    assert {k: sorted(v) for k, v in sections_of(swapped).items()} == {
        k: sorted(v) for k, v in out.items()
    }


def edit_lines(rng: random.Random, lines: list[str], tag: str) -> list[str]:
    """`lines` with random deletions, replacements and insertions of unique new lines."""
    out = []
    for line in lines:
        roll = rng.random()
        if roll < 0.3:
            out.append(f"{tag}{rng.randrange(10**9)}")  # insert before, or replace
        if roll < 0.15 or roll > 0.9:
            continue
        out.append(line)
    return out + [f"{tag}-end"] * (rng.random() < 0.2)


@pytest.mark.parametrize("seed", range(300))
def test_random_prose_merges_keep_every_new_line(seed):
    rng = random.Random(seed)
    base = [f"line {n}" for n in range(rng.randrange(10))]
    ours, theirs = edit_lines(rng, base, "o"), edit_lines(rng, base, "t")
    texts = [
        doc(("Status", "\n".join(lines)), ("Next Steps", "- x")) for lines in (base, ours, theirs)
    ]
    merged, clean = merge(*texts)
    swapped, swapped_clean = merge(texts[0], texts[2], texts[1])
    assert clean == swapped_clean
    assert clean == (not md_has_conflict_markers(merged))
    assert names(merged) == ["Status", "Next Steps"]
    body = section(merged, "Status").split("\n")
    for line in set(ours + theirs) - set(base):
        assert body.count(line) == 1
    if clean:
        assert sorted(body) == sorted(section(swapped, "Status").split("\n"))
        # A clean result keeps each side's own lines in that side's order.
        for side in (ours, theirs):
            kept = [line for line in body if line in side]
            assert kept == [line for line in side if line in body]


def test_unclosed_fence_that_would_swallow_headings_gives_whole_file_conflict():
    base = doc(("Status", "s"), ("Last Updated", T0))
    ours = doc(("Status", "s"), ("Last Updated", T1))
    theirs = doc(("Status", "s"), ("Last Updated", T2)) + "\n## Code\n\n```\nunclosed\n"
    merged, clean = merge(base, ours, theirs)
    assert not clean and md_has_conflict_markers(merged)[0] == 1
    assert merged == f"<<<<<<< ours\n{ours}=======\n{theirs}>>>>>>> theirs\n"
