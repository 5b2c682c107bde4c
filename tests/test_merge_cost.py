"""The cost of a merge (issue 22, item 6): `stm merge-file` and the merges behind it are
n log n in sections, bullets and lines, and a big input without anchors becomes a
conflict, never a loss.

Complexity is proved by counting operations (calls of an inner function, comparisons of
keys) on an input and on one twice as big, never by wall time; the linear merges are
checked against the old reference implementations they replaced.
"""

from __future__ import annotations

import sys

import pytest
from helpers import added_lines

import stm

# ---- 6: the merge driver is n log n in sections, bullets and lines --------------------------


def traced_steps(function, *args) -> int:
    """Python lines executed by `function(*args)` (stm's and difflib's alike): a count of
    operations that does not depend on the machine."""
    steps = 0

    def tracer(frame, event, arg):
        nonlocal steps
        if event == "line":
            steps += 1
        return tracer

    sys.settrace(tracer)
    try:
        function(*args)
    finally:
        sys.settrace(None)
    return steps


def fact_section(key: str, value: int) -> str:
    return f"## {key}\n**Current:** {value}\n\n**History:**\n- 2026-01-01T00:00:00Z: {value}\n"


def facts_with_new_sections(count: int) -> tuple[str, str, str]:
    """The issue's shape: 20 base facts, and `count` new facts at the end of each side."""
    base = [fact_section(f"base{i}", i) for i in range(20)]
    ours = base + [fact_section(f"ours{i}", i) for i in range(count)]
    theirs = base + [fact_section(f"theirs{i}", i) for i in range(count)]
    return tuple("# Facts\n\n" + "\n".join(sections) for sections in (base, ours, theirs))


def bullets_added_on_both_sides(count: int) -> tuple[str, str, str]:
    """`count` base bullets; each side adds one after every other base bullet (many runs)."""
    base = [f"- base {i}" for i in range(count)]
    ours, theirs = [], []
    for i, line in enumerate(base):
        ours += [line, f"- ours {i}"] if i % 2 else [line]
        theirs += [line, f"- theirs {i}"] if i % 2 == 0 else [line]
    return tuple("# M\n\n## Notes\n\n" + "\n".join(b) + "\n" for b in (base, ours, theirs))


class Counted(str):
    """A line or name whose comparisons and hashes are counted: list.index, `in` on a
    list and dict lookups all go through them, C code included."""

    calls = 0

    def __eq__(self, other):
        Counted.calls += 1
        return str.__eq__(self, other)

    def __hash__(self):
        Counted.calls += 1
        return str.__hash__(self)


def counted_comparisons(function, *args) -> int:
    Counted.calls = 0
    function(*args)
    return Counted.calls


def bullet_units(count: int):
    base = [((Counted(f"- base {i}"),), False) for i in range(count)]
    ours, theirs = [], []
    for i, unit in enumerate(base):
        ours += [unit, ((Counted(f"- ours {i}"),), False)] if i % 2 else [unit]
        theirs += [unit, ((Counted(f"- theirs {i}"),), False)] if i % 2 == 0 else [unit]
    return base, ours, theirs


def section_keys(count: int):
    base = [(Counted(f"base{i}"), 0) for i in range(20)]
    ours = base + [(Counted(f"ours{i}"), 0) for i in range(count)]
    theirs = base + [(Counted(f"theirs{i}"), 0) for i in range(count)]
    return ours, theirs, set(ours + theirs)


@pytest.mark.parametrize(
    "function, build, size",
    [
        (stm.merge_md_bullets, bullet_units, 400),
        (stm.merge_md_section_order, section_keys, 400),
    ],
    ids=["bullets", "section-order"],
)
def test_the_merges_compare_each_key_a_bounded_number_of_times(function, build, size):
    small, big = (counted_comparisons(function, *build(n)) for n in (size, 2 * size))
    assert big <= 2.2 * small, (small, big)


def prose_edited_on_both_sides(count: int) -> tuple[str, str, str]:
    """Paragraphs of three lines and a blank line (many equal lines); each side edits
    and inserts at its own places, far apart."""
    lines = []
    for i in range(count):
        lines.append(f"line {i} of a paragraph about the parser")
        if i % 3 == 2:
            lines.append("")
    ours, theirs = list(lines), list(lines)
    ours[5], theirs[-5] = "ours edited this line", "theirs edited this line"
    ours.insert(len(lines) // 2, "ours inserted this")
    theirs.insert(len(lines) // 4, "theirs inserted this")
    return tuple("# Notes\n\n## Prose\n\n" + "\n".join(v) + "\n" for v in (lines, ours, theirs))


@pytest.mark.parametrize(
    "build, size",
    [
        (facts_with_new_sections, 150),
        (bullets_added_on_both_sides, 300),
        (prose_edited_on_both_sides, 1500),
    ],
    ids=["sections", "bullets", "prose"],
)
def test_the_merge_driver_does_n_log_n_work(build, size):
    counts = []
    for n in (size, 2 * size):
        base, ours, theirs = build(n)
        merged, clean = stm.merge_markdown(base, ours, theirs)
        assert clean, merged  # the edits do not overlap
        for line in added_lines(base, ours) + added_lines(base, theirs):
            assert line in merged
        counts.append(traced_steps(stm.merge_markdown, base, ours, theirs))
    assert counts[1] <= 2.2 * counts[0], counts


def test_a_merge_of_a_big_prose_file_uses_memory_linear_in_its_size():
    import tracemalloc

    peaks = []
    for n in (4_000, 8_000):
        base, ours, theirs = prose_edited_on_both_sides(n)
        tracemalloc.start()
        try:
            merged, clean = stm.merge_markdown(base, ours, theirs)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert clean and "ours edited this line" in merged and "theirs edited this line" in merged
    assert peaks[1] <= 2.2 * peaks[0], peaks


def test_a_big_region_without_anchors_becomes_a_conflict_never_a_loss(monkeypatch):
    """Lines all alike leave the patience diff nothing to cut at: above the size limit
    the region counts as changed, so edits on both sides conflict, and none is lost."""
    monkeypatch.setattr(stm, "MERGE_DIFF_DIRECT", 100)
    same = ["- same"] * 50
    ours, theirs = list(same), list(same)
    ours[3], theirs[40] = "ours", "theirs"
    texts = ["# M\n\n" + "\n".join(v) + "\n" for v in (same, ours, theirs)]
    merged, clean = stm.merge_markdown(*texts)
    assert "ours" in merged and "theirs" in merged
    assert clean or "<<<<<<<" in merged


def reference_merge_md_bullets(base, ours, theirs):
    """merge_md_bullets before issue 22 (quadratic), to prove the output unchanged."""
    base_keys, ours_keys, theirs_keys = (stm.md_unit_keys(u) for u in (base, ours, theirs))
    blank_after = {}
    for keys, units in ((base_keys, base), (theirs_keys, theirs), (ours_keys, ours)):
        blank_after.update((key, units[i][1]) for i, key in enumerate(keys))
    in_base, in_theirs = set(base_keys), set(theirs_keys)
    order = [key for key in ours_keys if key in in_theirs or key not in in_base]
    ours_new = {key for key in order if key not in in_base and key not in in_theirs}
    placed = set(order)
    start = 0
    while start < len(theirs_keys):
        end = start
        while end < len(theirs_keys) and not (
            theirs_keys[end] in placed or theirs_keys[end] in in_base
        ):
            end += 1
        if end == start:
            start += 1
            continue
        run = theirs_keys[start:end]
        after = next((key for key in theirs_keys[end:] if key in placed), None)
        if after is not None:
            at = order.index(after)
            while at > 0 and order[at - 1] in ours_new:
                at -= 1
        else:
            before = next((key for key in reversed(theirs_keys[:start]) if key in placed), None)
            at = order.index(before) + 1 if before is not None else 0
        order[at:at] = run
        placed.update(run)
        start = end
    lines = []
    for key in order:
        lines += [*key[0], ""] if blank_after[key] else key[0]
    return stm.md_strip_blank(lines)


def reference_section_order(ours_keys, theirs_keys, kept):
    """merge_md_section_order before issue 22 (cubic)."""
    order = [key for key in ours_keys if key in kept]
    for index, key in enumerate(theirs_keys):
        if key not in kept or key in order:
            continue
        before = next((k for k in reversed(theirs_keys[:index]) if k in order), None)
        after = next((k for k in theirs_keys[index + 1 :] if k in order), None)
        if before is not None:
            order.insert(order.index(before) + 1, key)
        else:
            order.insert(order.index(after) if after is not None else len(order), key)
    last = (stm.MD_LAST_UPDATED, 0)
    if last in order and last in ours_keys[-1:] + theirs_keys[-1:]:
        order.remove(last)
        order.append(last)
    return order


def test_the_linear_merges_give_what_the_old_ones_gave():
    import random

    rng = random.Random(6)
    pool = [("a",), ("b",), ("c",), ("d",), ("e",), ("f",), ("g",), ("h",)]

    def units(k):
        return [(rng.choice(pool), rng.random() < 0.3) for _ in range(k)]

    for _ in range(4000):
        base, ours, theirs = units(rng.randint(0, 6)), units(rng.randint(0, 8)), units(8)
        theirs = theirs[: rng.randint(0, 8)]
        assert stm.merge_md_bullets(base, ours, theirs) == reference_merge_md_bullets(
            base, ours, theirs
        ), (base, ours, theirs)
    names = [(name, 0) for name in "abcdefghij"] + [(stm.MD_LAST_UPDATED, 0)]
    for _ in range(4000):
        ours = rng.sample(names, rng.randint(0, len(names)))
        theirs = rng.sample(names, rng.randint(0, len(names)))
        kept = {key for key in ours + theirs if rng.random() < 0.8}
        assert stm.merge_md_section_order(ours, theirs, kept) == reference_section_order(
            ours, theirs, kept
        ), (ours, theirs, kept)


def test_the_diff_gives_what_difflib_gives_on_small_inputs_and_valid_blocks_on_big_ones():
    import difflib
    import random

    rng = random.Random(7)
    for _ in range(500):
        a = [rng.choice("abcde ") for _ in range(rng.randint(0, 40))]
        b = [rng.choice("abcde ") for _ in range(rng.randint(0, 40))]
        expected = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
        assert [tuple(m) for m in stm.md_matching_blocks(a, b)] == [tuple(m) for m in expected]
    for _ in range(50):  # above the limit: every block is a real match, in order
        a = [rng.choice("abcdefgh") + str(rng.randint(0, 300)) for _ in range(800)]
        b = list(a)
        for _ in range(30):
            b.insert(rng.randint(0, len(b)), "new")
            del b[rng.randint(0, len(b) - 1)]
        blocks = stm.md_matching_blocks(a, b)
        assert blocks[-1] == (len(a), len(b), 0)
        i = j = 0
        for ai, bj, size in blocks:
            assert ai >= i and bj >= j and a[ai : ai + size] == b[bj : bj + size]
            i, j = ai + size, bj + size
        assert sum(size for _, _, size in blocks) >= 700  # most lines still match
