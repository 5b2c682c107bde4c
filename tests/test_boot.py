"""Boot inside a hook's limits: the order an agent acts in, cuts that keep what matters,
notices in the text itself, and the work waiting in a fresh clone."""

from __future__ import annotations

import json
import os
import re

import pytest
from conftest import IDENTITY, TODAY
from helpers import run_stm

import stm

STAMP = re.compile(r"generated \S+ · ~\d+ tokens")


def same_but_time(a: str, b: str) -> bool:
    return STAMP.sub("", a) == STAMP.sub("", b)


def long_memory(weeks: int = 20) -> str:
    """A memory after `weeks` of notes: many bullets in several sections, newest first."""
    lines = ["# Session Memory", "", "## Status", "", "Parser port in progress.", ""]
    for section in ("Observations", "Open Questions", "Next Steps"):
        lines += [f"## {section}", ""]
        lines += [
            f"- {section} note from week {w}: {'detail ' * 8}" for w in range(weeks * 3, 0, -1)
        ]
        lines.append("")
    lines += ["## Last Updated", "", TODAY, ""]
    return "\n".join(lines)


def test_max_chars_boundary_is_exact(store, run):
    full = run("boot").out
    at = run("boot", "--max-chars", str(len(full)))
    assert at.code == 0 and same_but_time(at.out, full) and at.err == ""
    under = run("boot", "--max-chars", str(len(full) - 1))
    assert under.code == 0
    assert len(under.out) <= len(full) - 1
    assert "to fit --max-chars" in under.err


def test_a_limit_the_whole_boot_fits_in_gives_the_unlimited_output(store, run):
    """Over the budget (its notice in the text) or not, a limit of exactly the whole
    boot's length changes nothing: the same notices, sections and closing lines."""
    (store / ".stacks" / "MEMORY.md").write_text(long_memory())
    full = run("boot")
    assert "over the 2000-token budget" in full.out and full.out.rstrip().endswith("`stm log`.")
    for limit in (len(full.out), len(full.out) + 1):
        at = run("boot", "--max-chars", str(limit))
        assert same_but_time(at.out, full.out) and at.err == full.err
    tokens = -(-len(full.out) // 4)
    assert same_but_time(run("boot", "--max-tokens", str(tokens)).out, full.out)


TIGHT_IDENTITY = (
    "# Agent\n\n## Role\n\nMaintainer of tempconv, which converts between Celsius, "
    "Fahrenheit, Kelvin and Rankine, with a small CLI and a test suite that stays green "
    "on every commit; the public API stays stable.\n\n## Working style\n\nSmall commits, "
    "each with a test; pytest before every commit; ask before changing the public API. "
    "Explain decisions in the log, so the next session knows why.\n\n## Conventions\n\n"
    "- Python 3.9+, type hints everywhere, ruff clean.\n"
    "- Functions take floats and return floats; rounding is the caller's business.\n"
    "- Tests live in tests/, one file per scale, named test_<scale>.py.\n"
    "- Every public function has a docstring with an example that a test runs.\n"
    "- The CLI prints results on stdout and errors on stderr, and exits 2 on bad input.\n"
    "- A change to a conversion constant cites its source in the commit message.\n"
    "- The README's examples are run by a test, so they never drift from the code.\n"
)


def tight_store(store, run):
    (store / ".stacks" / "AGENT.md").write_text(TIGHT_IDENTITY)
    memory = long_memory(3).replace(TODAY, "2020-01-01")  # stale: a notice of its own
    (store / ".stacks" / "MEMORY.md").write_text(memory)
    (store / ".stacks" / "refs" / "api.md").write_text("# Api\n\nc_to_f and f_to_c.\n")
    run("session", "new", "--name", "rankine")
    run("session", "checkpoint", "--pending", "wire it in", "--pending", "add tests")


def test_a_tight_limit_keeps_the_whole_identity_with_one_line_of_cuts(store):
    """The issue's case, run as a file (every hint names the full path of stm.py): at
    --max-chars 1800, identity (over 900 characters) stays whole, and what the cut left
    out is one line with one command."""
    (store / ".stacks" / "AGENT.md").write_text(TIGHT_IDENTITY)
    assert len(TIGHT_IDENTITY) > 900
    (store / ".stacks" / "MEMORY.md").write_text(long_memory(3))
    assert run_stm("session", "new", "--name", "rankine", cwd=store).returncode == 0
    out = run_stm("boot", "--max-chars", "1800", cwd=store).stdout
    assert len(out) <= 1800
    for line in TIGHT_IDENTITY.splitlines()[2:]:
        assert line.lstrip("#") in out, line  # every line of it, Conventions included
    notices = out.split("\n## Notices\n\n")[1].split("\n\n")[0].splitlines()
    assert len(notices) == 1 and notices[0].startswith("- left out to fit --max-chars 1800: ")
    # Its commands: all of it, and the way to make memory smaller.
    assert notices[0].count("stm.py ") == 2 and "stm.py boot --no-limit`" in notices[0]
    assert "stm.py compact`" in notices[0]


def test_identity_is_cut_only_when_it_no_longer_fits_with_the_header_and_the_cut_line(store, run):
    tight_store(store, run)
    boot_store = stm.open_store(stacks=str(store / ".stacks"), state=str(store / ".state"))
    full = run("boot", "--no-limit").out
    for limit in range(len(full) - 1, 400, -41):
        out = run("boot", "--max-chars", str(limit)).out
        assert len(out) <= limit
        # The hard cut, the last resort, may cut the line too; it marks where it cut.
        hard = "\n(boot cut here to fit" in out
        cut_lines = [n for n in out.splitlines() if "to fit --max-chars" in n and n[:1] != "("]
        assert len(cut_lines) == 1 or hard, out
        assert all(n.startswith("- left out to fit") for n in cut_lines), out
        # The smallest boot that keeps identity whole: the header, the cut's line and it.
        least = stm.BootCut()
        least.refs, least.memory_sections, least.workflow = "none", -1, "none"
        least.footer, least.notices, least.limit = "none", "none", f"--max-chars {limit}"
        smallest = stm.render_boot(stm.BootParts(boot_store), cut=least)
        whole = all(line.lstrip("#") in out for line in TIGHT_IDENTITY.splitlines()[2:])
        assert whole == (len(smallest) <= limit), (limit, len(smallest), out)
        assert hard or ("from identity" in cut_lines[0]) == (not whole)


@pytest.mark.parametrize("limit", [9500, 4000, 1500, 300, 40, 1])
def test_max_chars_is_never_exceeded(store, run, limit):
    (store / ".stacks" / "MEMORY.md").write_text(long_memory())
    run("session", "new", "--name", "port parser")
    result = run("boot", "--max-chars", str(limit))
    assert result.code == 0
    assert len(result.out) <= limit


def test_a_twenty_week_memory_keeps_identity_and_the_whole_workflow(store, run):
    (store / ".stacks" / "MEMORY.md").write_text(long_memory(20))
    run("session", "new", "--name", "port parser", "--phases", "plan,build,ship")
    run(
        "session",
        "checkpoint",
        "--done",
        "plan",
        "--pending",
        "port lexer",
        "--pending",
        "port grammar",
        "--resume",
        "run pytest -k parser",
    )
    full = run("boot", "--no-limit").out
    assert len(full) > 15000
    result = run("boot", "--max-chars", "9500")
    out = result.out
    assert len(out) <= 9500
    assert "Maintainer of the parser project" in out  # identity whole
    for line in ("port lexer", "port grammar", "run pytest -k parser", "Phase: plan"):
        assert line in out
    assert out.index("## Active workflow") < out.index("## Session memory")
    # the newest bullets stay, the oldest go, and the cut says so and how to read it all
    assert "Next Steps note from week 60:" in out
    assert "Next Steps note from week 1:" not in out
    [line] = [n for n in out.splitlines() if n.startswith("- left out to fit")]
    assert line.startswith("- left out to fit --max-chars 9500: from session memory (")
    assert re.search(r"\d+ older bullets of Next Steps", line)  # dozens are left out
    assert "`stm boot --no-limit`" in line or "stm.py boot --no-limit`" in line


def test_oldest_bullets_go_first_in_every_section(store, run):
    (store / ".stacks" / "MEMORY.md").write_text(long_memory(5))
    full = run("boot", "--no-limit").out
    out = run("boot", "--max-chars", str(len(full) - 400)).out
    for section in ("Observations", "Open Questions", "Next Steps"):
        assert f"{section} note from week 15:" in out  # the newest of each stays
    assert "Status" in out and "Parser port in progress." in out  # prose untouched


def test_no_limit_overrides_the_caps(store, run):
    (store / ".stacks" / "MEMORY.md").write_text(long_memory())
    full = run("boot").out
    result = run("boot", "--max-chars", "500", "--no-limit")
    assert same_but_time(result.out, full)


def test_max_chars_must_be_positive(store, run):
    result = run("boot", "--max-chars", "0")
    assert result.code == 2
    assert "--max-chars must be a positive number" in result.err


def test_conflict_markers_are_announced_at_the_top(store, run):
    memory = store / ".stacks" / "MEMORY.md"
    text = memory.read_text().replace(
        "Port the expression grammar.",
        "<<<<<<< HEAD\nPort the expression grammar.\n=======\nPort the lexer.\n>>>>>>> other",
    )
    memory.write_text(text)
    out = run("boot").out
    notices = out.split("## Identity")[0]
    assert "## Notices" in notices
    assert ".stacks/MEMORY.md has unresolved merge conflict markers (lines" in notices
    assert "stm check" in notices
    assert "<<<<<<<" not in out and ">>>>>>>" not in out  # never a raw marker in the prompt
    assert "[unresolved merge conflict: one side]\nPort the expression grammar." in out


def test_a_stale_memory_is_announced_in_the_text(store, run):
    memory = store / ".stacks" / "MEMORY.md"
    memory.write_text(memory.read_text().replace(TODAY, "2020-01-01"))
    out = run("boot").out
    assert "session memory was last updated 2020-01-01" in out.split("## Identity")[0]


def test_a_fresh_clone_sees_the_sessions_waiting_with_their_adopt_command(store, run, monkeypatch):
    plain = run("session", "new", "--name", "plain work", "--no-switch").out.strip()
    handoff = {
        "task_id": "T-9",
        "from_agent": "planner",
        "to_agent": "alice",
        "task": "Port the grammar",
        "status": "ready",
        "created_at": "2026-11-22T10:00:00Z",
    }
    handed = run("compose-handoff", "-", "--no-switch", "--json", stdin=json.dumps(handoff))
    handed_id = json.loads(handed.out)["session_id"]
    assert (
        not (store / ".state" / "current-session.json").exists()
        or json.loads((store / ".state" / "current-session.json").read_text())["active_session"]
        is None
    )
    monkeypatch.setenv("STM_USER", "alice")
    out = run("boot").out
    assert "## Sessions waiting" in out and "## Active workflow" not in out
    waiting = out.split("## Sessions waiting")[1].split("\n## ")[0]
    # Addressed to this user: first, and whole (issue 24, 2); the others one line each.
    full, _, others = waiting.partition("Also waiting:")
    assert f"adopt it with `stm session switch {handed_id}`" in full
    assert "- Handoff: task T-9 from planner to alice, status ready" in full
    assert "- Task: Port the grammar" in full
    lines = [line for line in others.splitlines() if line.startswith("- ")]
    assert plain in lines[0] and "plain work" in lines[0]
    assert f"adopt: `stm session switch {plain}`" in lines[0]


def test_the_workflow_says_when_it_was_last_touched(store, run):
    run("session", "new", "--name", "x")
    run("session", "checkpoint", "--done", "a step")
    out = run("boot").out
    assert re.search(r"- Last activity: \d+m ago", out)
    assert "- Last action: checkpoint: done a step" in out


def test_hints_name_the_command_as_it_was_run(store):
    result = run_stm("boot", cwd=store)
    assert result.returncode == 0
    assert "stm.py search TEXT`" in result.stdout  # run as a file: python3 path/stm.py
    assert "`stm search" not in result.stdout


def test_check_warns_when_boot_is_over_the_hook_cap(store, run):
    (store / ".stacks" / "MEMORY.md").write_text(long_memory())
    found = json.loads(run("check", "--json").out)["findings"]
    assert any(f["rule"] == "boot-budget" and "9500" in f["message"] for f in found), found


def test_identity_is_cut_last_and_says_so(store, run):
    (store / ".stacks" / "AGENT.md").write_text(IDENTITY + "\n## Extra\n\n" + "long " * 400)
    result = run("boot", "--max-chars", "800")
    assert len(result.out) <= 800
    [line] = [n for n in result.out.splitlines() if n.startswith("- left out to fit")]
    assert line.startswith("- left out to fit --max-chars 800: from identity (.stacks/AGENT.md)")


def test_digest_since_last_boot_starts_at_the_last_boot(store, run, monkeypatch):
    refused = run("digest", "--since", "last-boot")
    assert refused.code == 1 and "has not booted yet" in refused.err
    import stm

    monkeypatch.setattr(stm, "utc_now", lambda: stm.parse_iso("2026-11-20T10:00:00Z"))
    run("log", "before the boot")
    assert run("boot").code == 0
    mark = store / ".state" / ".last-boot"
    assert mark.exists() and mark.read_bytes() == b""
    os.utime(mark, (stm.parse_iso("2026-11-20T11:00:00Z"),) * 2)
    monkeypatch.setattr(stm, "utc_now", lambda: stm.parse_iso("2026-11-20T12:00:00Z"))
    run("log", "after the boot")
    data = json.loads(run("digest", "--since", "last-boot", "--json").out)
    assert [e["text"] for e in data["entries"]] == ["after the boot"]
    assert ".last-boot" in (store / ".state" / ".gitignore").read_text()


def test_every_cut_of_the_refs_index_leaves_a_line_in_the_text(store, run):
    refs = store / ".stacks" / "refs"
    for n in range(8):
        (refs / f"topic-{n}.md").write_text(f"# Topic {n}\n\nWhat topic {n} is about, in a line.\n")
    full = run("boot", "--no-limit").out
    seen = set()
    for limit in range(len(full), 300, -15):
        result = run("boot", "--max-chars", str(limit))
        assert result.code == 0 and len(result.out) <= limit
        said = re.search(r"refs index (shortened to titles|left out)", result.err)
        if said and "boot was cut at" not in result.err:
            what = "titles only" if "titles" in said.group(1) else "left out"
            seen.add(what)
            [line] = [n for n in result.out.splitlines() if n.startswith("- left out to fit")]
            said = "the refs summaries" if what == "titles only" else "the refs index"
            assert f"; {said};" in line or f": {said};" in line, result.out
    assert seen == {"titles only", "left out"}
    asked = run("boot", "--no-refs", "--max-chars", str(len(full)))
    assert "refs index" not in asked.out  # the reader asked: no notice tells them so
