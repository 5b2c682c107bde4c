"""Hardening, second pass: text in memory is data, never an instruction to stm.

Issue 22, items 1, 2, 4, 8, 12, 13, 14 and 15: compaction's bookkeeping cannot be forged
by log text and names paths inside .stacks/ only; a compact or `fact rm` that fails
leaves the tree as it was; a merged history is validated before it is replayed, and the
replay can be interrupted at any write; an unreadable folder does not stop boot;
`note --ref` writes only refs the readers read. Each test states the guarantee as
behaviour (exit code, bytes on disk, what is printed); failures are injected by
patching stm's `os`, kills happen in real processes.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import IDENTITY, MEMORY, STM_PY, snapshot
from helpers import (
    PROC_ENV,
    FaultyOS,
    Unprivileged,
    check_findings,
    killed_stm,
    log_text,
    ok,
    read,
    rules,
)

import stm

AGENT = ".stacks/AGENT.md"
MEMORY_MD = ".stacks/MEMORY.md"


# ---- helpers ---------------------------------------------------------------------------


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


def restore(copy: Path, root: Path) -> None:
    """Put the project back as `copy` holds it, and stand in it again."""
    shutil.rmtree(root)
    shutil.copytree(copy, root)
    os.chdir(root)


# ---- 1, 2. compaction's bookkeeping cannot be forged ----------------------------------------

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


# ---- 12. an interrupted compact is found however its items look ------------------------------

LOOSE_MEMORY = (
    "# Session Memory\n\n## Status\n\nParser port half done.\n\n## Observations\n\n"
    "None.\n\n## Open Questions\n\nNone yet.\n\n## Next Steps\n\n"
    "- keep\n\n  kept continuation\n"
    "- loose one\n\n  its continuation after a blank line\n"
    "- tight two\n  continuation\n"
    "- loose three\n\n\n  two blank lines before this one\n\n"
    "## Last Updated\n\n2026-11-22\n"
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


# ---- 13. a compact or fact rm that fails leaves the tree as it was ------------------------


@pytest.fixture
def over_limits(store, call):
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
    over_limits, call, aux, monkeypatch, operation, error
):
    """Issue 22, 13: ENOSPC or EFBIG at any write step (the log append, each rewrite):
    exit 1, a message naming the file, the tree byte-identical (no log entry left)."""
    root = over_limits
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


# ---- 4, 15. a merged history is data: validated on replay, rebuilt safely ----------------


def diverged(root: Path, call, aux: Path, extra_events: list[dict] = ()) -> tuple[str, Path]:
    """One session checkpointed in two clones (simulated: the folder copied and each copy
    checkpointed), merged as git would: history.jsonl by union, state.json conflicted."""
    sid = ok(call("session", "new", "--name", "shared")).out.strip()
    ok(call("session", "checkpoint", "--pending", "step1", "--pending", "step2"))
    folder = root / ".state" / "sessions" / sid
    shutil.copytree(folder, aux / "base")
    ok(call("session", "checkpoint", "--done", "step1", "--note", "note from A"))
    ours_state = (folder / "state.json").read_text()
    ours_history = (folder / "history.jsonl").read_text()
    shutil.rmtree(folder)
    shutil.copytree(aux / "base", folder)
    ok(call("session", "checkpoint", "--pending", "p1", "--note", "note from B"))
    theirs_state = (folder / "state.json").read_text()
    theirs_history = (folder / "history.jsonl").read_text()
    base_history = (aux / "base" / "history.jsonl").read_text()
    merged = base_history + ours_history[len(base_history) :] + theirs_history[len(base_history) :]
    merged += "".join(json.dumps(e, sort_keys=True) + "\n" for e in extra_events)
    (folder / "history.jsonl").write_text(merged)
    (folder / "state.json").write_text(
        f"<<<<<<< ours\n{ours_state}=======\n{theirs_state}>>>>>>> theirs\n"
    )
    return sid, folder


def later_stamp(folder: Path, seconds: int) -> str:
    events = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
    newest = max(stm.parse_iso(e["timestamp"], need_zone=True) for e in events)
    return stm.iso(newest + seconds)


BAD_FIELDS = [
    ("checkpoint", {"done": 5}),
    ("checkpoint", {"done": 1.5}),
    ("checkpoint", {"done": True}),
    ("checkpoint", {"done": ["a"]}),
    ("checkpoint", {"done": {"a": 1}}),
    ("checkpoint", {"pending": [1, 2]}),
    ("checkpoint", {"pending": "not a list"}),
    ("checkpoint", {"resume": 7}),
    ("checkpoint", {"note": ["x"]}),
    ("checkpoint", {"interrupted": "yes"}),
    ("checkpoint", {"finish": 1}),
    ("phase_change", {"to": "../../etc"}),
    ("phase_change", {"to": 5}),
    ("phase_change", {"to": "x" * 65}),
    ("created", {"phase": "bad phase!", "name": 12}),
    ("created", {"valid_phases": "init,build"}),
    ("phase_change", {"to": "build", "timestamp": "yesterday"}),
    ("checkpoint", {"actor": ["x"], "done": "ok"}),
]


@pytest.mark.parametrize(("event", "fields"), BAD_FIELDS, ids=[str(f) for _, f in BAD_FIELDS])
def test_a_mistyped_merged_event_is_skipped_and_reported_never_replayed(
    store, call, aux, event, fields
):
    """Issue 22, 4: the rebuild validates each event as strictly as state.json's fields;
    a bad one is reported and left out of the state; the session stays usable."""
    sid, folder = diverged(store, call, aux)
    bad = {"event": event, "timestamp": later_stamp(folder, 1), "version": 4, **fields}
    with open(folder / "history.jsonl", "a") as f:
        f.write(json.dumps(bad) + "\n")
    before = snapshot(store)
    dry = call("check", "--fix", "--dry-run")
    assert dry.code in (0, 1) and "Traceback" not in dry.err, dry
    assert snapshot(store) == before
    assert "skipped 1 event" in dry.out, dry
    fixed = call("check", "--fix")
    assert fixed.code == 0 and "Traceback" not in fixed.err, fixed
    assert "skipped 1 event" in fixed.out and "history.jsonl" in fixed.out, fixed
    state = json.loads((folder / "state.json").read_text())
    assert stm.state_problems(state, sid) == []
    notes = state["recovery"]["recovery_notes"]
    assert "note from A" in notes and "note from B" in notes
    assert state["phase"] == "init"
    ok(call("session", "checkpoint", "--done", "p1"))
    assert [f for f in check_findings(call)[1] if f["severity"] == "error"] == []


def test_a_mistyped_static_field_in_either_side_is_not_copied(store, call, aux):
    sid, folder = diverged(store, call, aux)
    text = (folder / "state.json").read_text()
    (folder / "state.json").write_text(text.replace('"name": "shared"', '"name": 12', 1))
    ok(call("check", "--fix"))
    state = json.loads((folder / "state.json").read_text())
    assert stm.state_problems(state, sid) == []
    assert state["name"] == "shared"  # the valid side's


def test_a_rebuild_interrupted_at_any_write_keeps_every_clones_note(store, call, aux, monkeypatch):
    """Issue 22, 15: an error at each write step of the rebuild in turn, then check --fix
    again: both clones' recovery notes survive, versions run 1..n, check is clean."""
    sid, folder = diverged(store, call, aux)
    pristine = aux / "pristine"
    shutil.copytree(store, pristine)
    counter = FaultyOS(os, 0, errno.EIO)
    monkeypatch.setenv("STM_FSYNC", "1")
    monkeypatch.setattr(stm, "os", counter)
    ok(call("check", "--fix"))
    monkeypatch.setattr(stm, "os", os)
    steps = counter.calls
    assert steps >= 4
    for step in range(1, steps + 1):
        restore(pristine, store)
        monkeypatch.setattr(stm, "os", FaultyOS(os, step, errno.EIO))
        first = call("check", "--fix")
        monkeypatch.setattr(stm, "os", os)
        assert first.code is not None and "Traceback" not in first.err, (step, first)
        assert_rebuilt_with_both_notes(store, call, folder, step)


@pytest.mark.parametrize("write", [1, 2])
def test_a_rebuild_killed_between_its_writes_keeps_every_clones_note(store, call, aux, write):
    """Issue 22, 15: SIGKILL-like death before the first or the second whole-file write of
    the rebuild, then check --fix again."""
    sid, folder = diverged(store, call, aux)
    killed = killed_stm(store, aux, f"write-{write}", "check", "--fix")
    assert killed.returncode == 137, killed.stderr
    assert_rebuilt_with_both_notes(store, call, folder, write)


def assert_rebuilt_with_both_notes(store: Path, call, folder: Path, step) -> None:
    again = call("check", "--fix")
    assert again.code == 0 and "Traceback" not in again.err, (step, again)
    state = json.loads((folder / "state.json").read_text())
    notes = state["recovery"].get("recovery_notes", "")
    assert "note from A" in notes and "note from B" in notes, (step, notes)
    events = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
    assert [e["version"] for e in events] == list(range(1, len(events) + 1)), step
    assert state["version"] == len(events), step
    assert [f for f in check_findings(call)[1] if f["severity"] == "error"] == [], step


# ---- 8. an unreadable folder does not stop boot -----------------------------------------


@pytest.fixture
def shared_store(run, monkeypatch):
    """A store in a folder 'nobody' can reach (pytest's own tmp is private to root), with
    a current session and two refs, one in a sub-folder."""
    root = Path(tempfile.mkdtemp(prefix="stm-perm-", dir="/tmp"))
    os.chmod(root, 0o755)
    monkeypatch.chdir(root)
    assert run("init").code == 0
    (root / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (root / ".stacks" / "MEMORY.md").write_text(MEMORY)
    (root / ".stacks" / "refs" / "guide.md").write_text("# Guide\n\nHow it works.\n")
    (root / ".stacks" / "refs" / "sub").mkdir()
    (root / ".stacks" / "refs" / "sub" / "deep.md").write_text("# Deep\n\nBelow.\n")
    (root / ".stacks" / "refs" / "zz.md").write_text("# Last\n\nAfter sub.\n")
    assert run("session", "new", "--name", "perm work").code == 0
    yield root
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chmod(os.path.join(dirpath, name), 0o755, follow_symlinks=False)
    shutil.rmtree(root)


@pytest.mark.parametrize(
    ("folder", "pointer"),
    [
        (".stacks/refs", True),
        (".stacks/refs/sub", True),
        (".state/sessions", True),
        (".state/sessions", False),
        (".state/sessions/2*", True),
    ],
)
def test_boot_prints_the_rest_when_a_folder_is_unreadable(shared_store, call, folder, pointer):
    """Issue 22, 8: chmod 000 on refs/, a refs sub-folder, sessions/ (with a current
    session or without) or the current session's folder: boot exits 0 with identity and
    memory, a placeholder where the folder's part would be, and a warning naming it."""
    root = shared_store
    if not pointer:
        (root / ".state" / "current-session.json").unlink()
    [target] = root.glob(folder)
    os.chmod(target, 0)
    with Unprivileged():
        boot = call("boot")
    os.chmod(target, 0o755)
    assert boot.code == 0, boot
    assert "Traceback" not in boot.err
    assert "Maintainer of the parser project" in boot.out  # identity
    assert "Parser port half done" in boot.out  # session memory
    shown = os.path.relpath(target, root)
    assert "Permission denied" in boot.err and shown in boot.err, boot
    if folder != ".state/sessions/2*":  # a session's own folder: warned, as a bad state is
        assert "unreadable" in boot.out and shown.split("/", 1)[1] in boot.out, boot
    if folder == ".stacks/refs/sub":
        assert "refs/guide.md" in boot.out and "refs/zz.md" in boot.out  # the rest is listed


# ---- 14. note --ref writes only what the readers read ---------------------------------------


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
