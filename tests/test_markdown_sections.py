"""One section rule for every reader of MEMORY.md: a `## ` section ends at the next `#`
or `##` heading outside a code fence (spec/integration.md), in note, check, compact,
boot's cuts and the merge driver alike (issue: one owner per format, bug 3)."""

from __future__ import annotations

from conftest import TODAY

import stm

APPENDIX = [f"- appendix item {n}" for n in range(1, 16)]  # over the default limit of 10

MEMORY = (
    "# Session Memory\n\n"
    "## Status\n\nWorking.\n\n"
    "## Next Steps\n\n- step one\n- step two\n\n"
    "# Appendix\n\n" + "\n".join(APPENDIX) + "\n\n"
    f"## Last Updated\n\n{TODAY}\n"
)


def sections_of(text: str) -> dict:
    return {part.name: body for part, _, body in stm.MdDoc.of(text).split()[1]}


def test_every_reader_ends_next_steps_at_the_level_one_heading():
    lines = MEMORY.split("\n")
    start = next(i for i, line in enumerate(lines) if line == "## Next Steps")
    end = stm.find_section(stm.MdDoc(lines), "Next Steps").end  # note's and check's rule
    assert stm.MdDoc(lines).parts[1].start == start
    assert lines[end] == "# Appendix"
    assert stm.section_body(MEMORY, "Next Steps").strip() == "- step one\n- step two"
    merged_view = sections_of(MEMORY)  # the merge driver's and compact's
    assert [line for line in merged_view["Next Steps"] if line.strip()] == [
        "- step one",
        "- step two",
    ]
    assert [line for line in merged_view["# Appendix"] if line.strip()] == APPENDIX
    booted = stm.demote_headings(MEMORY, 2)  # boot's cuts
    layer = stm.BootLayer(booted)
    units = {layer.lines[part.start]: layer.bullets[i] for i, part in enumerate(layer.parts)}
    assert len(units["#### Next Steps"]) == 2 and len(units["### Appendix"]) == 15


def test_compact_leaves_a_level_one_part_alone(store, run):
    memory = store / ".stacks" / "MEMORY.md"
    memory.write_text(MEMORY)
    result = run("compact")
    assert result.code == 0, result
    assert memory.read_text() == MEMORY  # Next Steps is within its limit: nothing moved
    logs = "".join(p.read_text() for p in (store / ".stacks" / "logs").glob("*.md"))
    assert "appendix item" not in logs


def test_the_merge_driver_keeps_the_part_apart_from_the_section_above():
    ours = MEMORY.replace("- step two\n", "- step two\n- ours added\n")
    theirs = MEMORY.replace("- appendix item 15\n", "- appendix item 15\n- theirs added\n")
    merged, clean = stm.merge_markdown(MEMORY, ours, theirs)
    assert clean, merged
    view = sections_of(merged)
    assert "- ours added" in view["Next Steps"] and "- theirs added" not in view["Next Steps"]
    assert "- theirs added" in view["# Appendix"]
    assert merged.count("- appendix item 1\n") == 1


def test_boot_cuts_count_appendix_bullets_as_their_own(store, run):
    (store / ".stacks" / "MEMORY.md").write_text(MEMORY)
    full = run("boot").out
    cut = run("boot", "--max-chars", str(len(full) - 200)).out
    # taken round the sections, each under its own name: Next Steps holds 2, never 17
    assert "older bullets of Appendix" in cut, cut
    assert not any(f"{n} older bullets of Next Steps" in cut for n in range(3, 18)), cut


FENCED = (
    "# Session Memory\n\n"
    "## Status\n\nWorking on the pipeline.\n\n"
    "## Observations\n\n"
    "- the pipeline file is long and this observation takes some room in the budget\n"
    "- the stages are:\n\n"
    "```yaml\n- build\n- ship\n```\n\n"
    "- a third observation after the fence\n\n"
    "## Next Steps\n\n- write the deploy stage\n\n"
    f"## Last Updated\n\n{TODAY}\n"
)


def test_no_boot_budget_cuts_a_fenced_line_as_a_bullet(store, run):
    """Bug 1: at every budget, a fence in memory comes out whole or not at all, so
    nothing after it renders inside a code block."""
    (store / ".stacks" / "MEMORY.md").write_text(FENCED)
    full = run("boot").out
    for limit in range(300, len(full) + 1, 7):
        out = run("boot", "--max-chars", str(limit)).out
        memory = out.split("## Session memory")[-1].split("\n## ")[0] if "## Session" in out else ""
        fences = [line for line in memory.split("\n") if line.startswith("```")]
        assert len(fences) % 2 == 0, (limit, out)
        assert ("- build" in memory) == ("- ship" in memory) == bool(fences), (limit, out)
