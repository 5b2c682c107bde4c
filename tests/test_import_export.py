"""`stm export` and `stm import`: the archives zip tools make, corrupt or colliding
archives refused cleanly, `--force` leaving no backup behind."""

from __future__ import annotations

import functools
import io
import shutil
import subprocess
import warnings
import zipfile

import pytest
from conftest import snapshot
from helpers import (
    assert_clean_refusal,
    findings,
    new_store,
    source_store,
)

import stm

# The findings of a `check --json` Result, which must hold no traceback.
findings = functools.partial(findings, no_traceback=True)


ZIP_CONTENT = b"# Guide\n\nzip payload here\n"


def corrupt_zip(kind: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(".stacks/refs/guide.md", ZIP_CONTENT)
    data = bytearray(buffer.getvalue())
    central = data.find(b"PK\x01\x02")
    if kind == "bad-crc":
        at = data.find(ZIP_CONTENT)
        data[at + 2] ^= 0x01
    elif kind == "encrypted":
        data[6] |= 0x01
        data[central + 8] |= 0x01
    elif kind == "unknown-compression":
        data[8:10] = (99).to_bytes(2, "little")
        data[central + 10 : central + 12] = (99).to_bytes(2, "little")
    elif kind == "name-mismatch":
        at = data.find(b"guide.md")  # the local header's copy of the name
        data[at] = ord("x")
    return bytes(data)


@pytest.mark.parametrize("kind", ["bad-crc", "encrypted", "unknown-compression", "name-mismatch"])
def test_import_refuses_a_corrupt_zip_cleanly(project, call, kind):
    (project / "bad.zip").write_bytes(corrupt_zip(kind))
    before = snapshot(project)
    assert_clean_refusal(call("import", "bad.zip"), 1, "bad.zip", "guide.md")
    assert snapshot(project) == before


@pytest.mark.parametrize(
    "names",
    [
        [".stacks/refs/a.md", ".stacks/refs/a.md"],
        [".stacks/refs/Guide.md", ".stacks/refs/guide.md"],
        [".stacks/REFS/x.md", ".stacks/refs/x.md"],
    ],
    ids=["duplicate", "case-colliding", "case-colliding-folder"],
)
def test_import_refuses_duplicate_or_case_colliding_names(project, call, names):
    archive = project / "m.zip"
    with warnings.catch_warnings(), zipfile.ZipFile(archive, "w") as zf:
        warnings.simplefilter("ignore")
        for index, name in enumerate(names):
            zf.writestr(name, f"# T{index}\n\nbody {index}\n")
    before = snapshot(project)
    result = call("import", "m.zip")
    assert result.code in (1, 2), result
    assert "Traceback" not in result.err
    assert snapshot(project) == before


def test_import_force_leaves_no_backup_that_check_or_boot_trips_on(tmp_path, monkeypatch, call):
    monkeypatch.setenv("CI", "1")
    stamp = "2026-11-20T10:00:00Z"  # date-safe: literal
    src = source_store(tmp_path)
    dst = tmp_path / "dst"
    new_store(dst, handoff=False)
    (dst / ".stacks" / "refs" / "guide.md").write_text("# Guide\n\nthe local one\n")
    for root, word in ((src, "source"), (dst, "local")):
        entry = stm.render_log_entry(f"from the {word}", "x", stamp, "0badf00d")
        (root / ".stacks" / "logs" / "2026-11-20.md").write_text(entry)  # date-safe: literal
    monkeypatch.chdir(src)
    assert call("export", "-o", str(tmp_path / "m.zip")).code == 0
    monkeypatch.chdir(dst)
    assert call("check").code == 0
    result = call("import", str(tmp_path / "m.zip"), "--force")
    assert result.code == 0, result
    found = findings(call("check", "--json"))
    assert not [f for f in found if f["severity"] == "error"], found
    assert not [f for f in found if ".bak" in f["path"]], found
    assert ".bak" not in call("boot").out


@pytest.mark.parametrize("maker", ["zipfile", "zip-r"])
def test_import_accepts_the_archives_zip_r_makes(tmp_path, monkeypatch, call, maker):
    src = source_store(tmp_path)
    archive = tmp_path / "m.zip"
    names = [".stacks/", ".stacks/refs/", ".stacks/refs/guide.md", ".stacks/AGENT.md"]
    if maker == "zip-r":
        if shutil.which("zip") is None:
            pytest.skip("no zip command")
        subprocess.run(
            ["zip", "-r", "-q", str(archive), ".stacks", "-x", "*.stm.lock"],
            cwd=src,
            check=True,
        )
    else:
        with zipfile.ZipFile(archive, "w") as zf:
            for name in names:
                if name.endswith("/"):
                    info = zipfile.ZipInfo(name)
                    info.external_attr = (0o40755 << 16) | 0x10
                    zf.writestr(info, b"")
                else:
                    zf.writestr(name, (src / name).read_bytes())
    with zipfile.ZipFile(archive) as zf:
        assert any(n.endswith("/") for n in zf.namelist())  # directory entries
    target = tmp_path / "dst"
    target.mkdir()
    monkeypatch.chdir(target)
    result = call("import", str(archive))
    assert result.code == 0, result
    assert (target / ".stacks" / "refs" / "guide.md").read_text() == "# Guide\n\nfrom the source\n"
