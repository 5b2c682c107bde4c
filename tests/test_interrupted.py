"""A command killed between its steps (compose-handoff, archive, note): check reports
what was left half done and `check --fix` or the next run completes it. Kills happen in
real processes."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT, Result
from helpers import (
    HANDOFF,
    findings,
    new_store,
    session_dir,
    source_store,
)

# The findings of a `check --json` Result, which must hold no traceback.
findings = functools.partial(findings, no_traceback=True)


KILLER = """
import os, sys
sys.path.insert(0, ROOT)
import stm
owner, name, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
target = stm if owner == "stm" else os
original = getattr(target, name)
calls = [0]
def kill_here(*args, **kwargs):
    calls[0] += 1
    if calls[0] >= nth:
        os._exit(137)  # SIGKILL-like: no cleanup, no undo
    return original(*args, **kwargs)
setattr(target, name, kill_here)
sys.exit(stm.main(sys.argv[4:]))
"""


def killed(tmp_path: Path, cwd: Path, owner: str, name: str, nth: int, *argv: str) -> None:
    """Run stm with `owner.name` replaced by an immediate process exit at its nth call."""
    script = tmp_path / "killer.py"
    script.write_text(KILLER.replace("ROOT", repr(str(ROOT))))
    done = subprocess.run(
        [sys.executable, str(script), owner, name, str(nth), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 137, (done.returncode, done.stderr)


def receipts(store: Path) -> int:
    text = "".join(p.read_text() for p in (store / ".stacks" / "logs").glob("*.md"))
    return text.count("handoff PARSER-42 received from planner-agent")


def rule_paths(result: Result, sid: str, errors_only: bool = False) -> set:
    return {
        (f["rule"], f["path"].replace(sid, "SID"))
        for f in findings(result)
        if f["severity"] == "error" or not errors_only
    }


@pytest.mark.parametrize("step", ["append_log_entry", "switch_pointer"])
def test_compose_handoff_killed_before_its_receipt_is_reported_and_completed(
    store, call, tmp_path, monkeypatch, step
):
    # What check says of a handoff composed without interruption, in a twin store.
    twin = tmp_path / "twin"
    new_store(twin, handoff=False)
    monkeypatch.chdir(twin)
    twin_sid = call("compose-handoff", str(HANDOFF)).out.strip()
    normal = rule_paths(call("check", "--json"), twin_sid)
    normal_errors = rule_paths(call("check", "--json"), twin_sid, errors_only=True)
    monkeypatch.chdir(store)
    killed(tmp_path, store, "stm", step, 1, "compose-handoff", str(HANDOFF))
    assert receipts(store) == 0
    sids = [p.name for p in (store / ".state" / "sessions").iterdir() if p.name[0].isdigit()]
    assert len(sids) == 1  # the session exists, its receipt does not
    found = rule_paths(call("check", "--json"), sids[0])
    assert found - normal, "check does not report a handoff session without its receipt"
    call("check", "--fix")
    again = call("compose-handoff", str(HANDOFF))
    assert again.code == 0, again
    assert receipts(store) == 1, "neither check --fix nor composing again logs the receipt"
    assert rule_paths(call("check", "--json"), sids[0], errors_only=True) <= normal_errors


def test_archive_killed_between_marking_and_moving_is_reported_and_completed(store, call, tmp_path):
    sid = call("session", "new").out.strip()
    killed(tmp_path, store, "os", "rename", 1, "session", "archive")
    state = json.loads((session_dir(store, sid) / "state.json").read_text())
    assert "archived_at" in state  # marked, not moved
    found = findings(call("check", "--json"))
    assert any(sid in f["path"] for f in found), (
        "check does not report a session marked archived but not moved",
        found,
    )
    call("check", "--fix")
    if session_dir(store, sid).exists():
        assert call("session", "archive", sid).code == 0
    assert (store / ".state" / "history" / sid[:7] / sid).is_dir()
    assert not [f for f in findings(call("check", "--json")) if f["severity"] == "error"]


def test_note_killed_before_its_rename_is_reported_and_repaired(store, call, tmp_path):
    killed(tmp_path, store, "os", "replace", 1, "note", "Status", "killed note")
    found = findings(call("check", "--json"))
    assert any(f["rule"] == "temp-file" for f in found), found
    assert call("check", "--fix").code == 0
    assert call("note", "Status", "killed note").code == 0
    assert call("check", "--strict").code == 0


def test_import_killed_between_files_completes_when_run_again(tmp_path, monkeypatch, call):
    src = source_store(tmp_path)
    (src / ".stacks" / "refs" / "more.md").write_text("# More\n\nsecond file\n")
    monkeypatch.chdir(src)
    assert call("export", "-o", str(tmp_path / "m.zip")).code == 0
    dst = tmp_path / "dst"
    dst.mkdir()
    killed(tmp_path, dst, "stm", "atomic_write", 2, "import", str(tmp_path / "m.zip"))
    monkeypatch.chdir(dst)
    result = call("import", str(tmp_path / "m.zip"))
    assert result.code == 0, result
    with zipfile.ZipFile(tmp_path / "m.zip") as zf:
        for name in zf.namelist():
            assert (dst / name).read_bytes() == zf.read(name), name
