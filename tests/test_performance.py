"""Deterministic performance tests (spec/performance.md): structure, not seconds.

Timings belong to bench/bench.py; here we assert what makes them flat: which modules a
command imports, and which files and folders it opens or lists.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

import stm

sys.path.insert(0, str(ROOT / "bench"))
import bench  # noqa: E402

# Modules boot and log must not import: each costs start-up time for nothing.
FORBIDDEN = [
    "subprocess",
    "tempfile",
    "uuid",
    "zipfile",
    "datetime",
    "shutil",
    "threading",
    "random",
    "hashlib",
    "secrets",
    "bz2",
    "lzma",
    "zlib",
    "typing",
    "pathlib",
    "inspect",
    "dataclasses",
    "copy",
    "ast",
    "email",
    "urllib",
    "calendar",
    "pwd",
]

PROBE = r"""
import json, os, sys, time
shift = float(os.environ.get("STM_TESTS_CLOCK_DAYS") or 0) * 86400  # conftest: clock()
if shift:  # -S loads no sitecustomize: move the clock here
    real_time = time.time
    time.time = lambda: real_time() + shift
before = set(sys.modules)
events = []
root = os.path.realpath(sys.argv[1])

def hook(event, args):
    if event == "open" and isinstance(args[0], str):
        path = os.path.realpath(args[0])
        if path.startswith(root):
            events.append(["open", os.path.relpath(path, root)])
    elif event in ("os.listdir", "os.scandir"):
        path = os.path.realpath(args[0] if args[0] is not None else ".")
        if path.startswith(root):
            events.append(["list", os.path.relpath(path, root)])

sys.path.insert(0, sys.argv[2])
import io, contextlib
import stm
sys.addaudithook(hook)
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = stm.main(json.loads(sys.argv[3]))
new = sorted(set(sys.modules) - before)
print(json.dumps({"code": code, "modules": new, "events": events, "out": out.getvalue()}))
"""


def probe(store, argv):
    """Run argv in a fresh `python3 -S` (no site: nothing pre-imported) and report."""
    env = {**os.environ, "STM_FSYNC": "0", "USER": "tester"}
    result = subprocess.run(
        [sys.executable, "-S", "-c", PROBE, str(store), str(ROOT), json.dumps(argv)],
        cwd=store,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A small and a bigger store with the same boot-visible content (bench's builder)."""
    now = stm.utc_now()
    small = tmp_path_factory.mktemp("small")
    bigger = tmp_path_factory.mktemp("bigger")
    ids = bench.build_store(str(small), False, now)
    bench.build_store(str(bigger), False, now)
    # Grow the second store's history without touching what boot shows.
    bench.build_logs(str(bigger / ".stacks"), bench.random.Random(3), now - 40 * 86400, 200)
    rng = bench.random.Random(5)
    for _ in range(150):
        when = now - rng.uniform(1, 30) * 86400
        sid = bench.new_id(rng, when)
        bench.build_session(str(bigger / ".state" / "sessions" / sid), sid, when)
        when = now - rng.uniform(40, 900) * 86400
        sid = bench.new_id(rng, when)
        bench.build_session(str(bigger / ".state" / "history" / sid[:7] / sid), sid, when)
    return small, bigger, ids


def test_bench_stores_have_the_same_boot_content(stores):
    small, bigger, _ = stores
    a = probe(small, ["boot"])["out"].split("\n", 1)[1]
    b = probe(bigger, ["boot"])["out"].split("\n", 1)[1]
    assert a == b and "Active workflow" in a


@pytest.mark.parametrize("argv", [["boot"], ["log", "a new entry"]], ids=" ".join)
def test_boot_and_log_import_nothing_they_do_not_need(stores, argv):
    small, _, _ = stores
    report = probe(small, argv)
    assert report["code"] == 0
    leaked = sorted(set(report["modules"]) & set(FORBIDDEN))
    assert leaked == []


@pytest.mark.parametrize("argv", [["boot"], ["status"], ["check"]], ids=" ".join)
def test_a_command_given_alone_is_run_without_argparse(stores, argv):
    """`stm boot` alone (what a start runs) takes its options' defaults without importing
    argparse and gettext or building the parser; with `--opt=value`, argparse parses."""
    small, _, _ = stores
    report = probe(small, argv)
    assert report["code"] == 0
    assert {"argparse", "gettext"} & set(report["modules"]) == set()
    assert "argparse" in probe(small, [*argv, "--max-chars=900"])["modules"]


def opened(report):
    return [path for kind, path in report["events"] if kind == "open"]


def listed(report):
    return [path for kind, path in report["events"] if kind == "list"]


def test_boot_io_does_not_grow_with_history(stores):
    small, bigger, ids = stores
    a, b = probe(small, ["boot"]), probe(bigger, ["boot"])
    assert len(opened(a)) == len(opened(b))
    assert sorted(opened(a)) == sorted(opened(b))
    assert f".state/sessions/{ids['current']}/state.json" in opened(a)
    for report in (a, b):
        assert listed(report) == [".stacks/refs"]  # never logs/, sessions/ or history/


def test_log_opens_only_todays_log_and_the_lock(stores):
    small, bigger, _ = stores
    today = stm.iso(stm.utc_now())[:10]
    for store in (small, bigger):
        report = probe(store, ["log", "one more entry"])
        assert report["code"] == 0
        assert sorted(set(opened(report))) == [".stacks/.stm.lock", f".stacks/logs/{today}.md"]
        assert listed(report) == []


def test_session_new_does_not_list_the_sessions_folder(stores):
    small, bigger, _ = stores
    for store in (small, bigger):
        report = probe(store, ["session", "new", "--no-switch"])
        assert report["code"] == 0
        assert listed(report) == []


@pytest.mark.parametrize(
    "argv",
    [["session", "phase", "bench-x", "--session", "OTHER"], ["session", "switch", "CURRENT"]],
    ids=["phase", "switch"],
)
def test_session_updates_do_not_list_folders(stores, argv):
    small, bigger, ids = stores
    argv = [ids["other"] if a == "OTHER" else ids["current"] if a == "CURRENT" else a for a in argv]
    for store in (small, bigger):
        report = probe(store, argv)
        assert report["code"] == 0, report
        assert listed(report) == []


def test_only_the_named_command_parser_is_built():
    assert stm.command_of(["boot"]) == ("boot", None)
    assert stm.command_of(["--dir", "x", "session", "phase", "b"]) == ("session", "phase")
    assert stm.command_of(["--dir=x", "log", "m"]) == ("log", None)
    assert stm.command_of(["--help"]) == (None, None)
    assert stm.command_of(["session"]) == (None, None)
    assert stm.command_of(["sesion", "list"]) == (None, None)
    parser = stm.build_parser("boot")
    choices = next(a for a in parser._actions if a.dest == "command").choices
    assert list(choices) == ["boot"]


def test_bench_quick_mode_is_a_documented_option():
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench.py"), "--help"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0
    assert "--quick" in result.stdout and "--out" in result.stdout


def test_session_alone_prints_its_verbs_and_exits_2(run):
    result = run("session")
    assert result.code == 2
    assert "checkpoint" in result.err and result.out == ""


def test_bench_store_builder_writes_valid_stm_stores(stores, run, monkeypatch):
    small, _, _ = stores
    monkeypatch.chdir(small)
    result = run("check", "--json")
    assert result.code == 0, result.out


# The bench's floors (bench.FLOOR) say why a target is missed: a bare program reading the
# same files. A floor that read fewer files than its command would excuse stm's own cost.
FLOOR_PROBE = (
    PROBE.split("sys.path.insert")[0]
    + r"""
floor = sys.argv[2]
sys.argv = ["-c", *sys.argv[3:]]
sys.addaudithook(hook)
exec(floor)
print(json.dumps(events))
"""
)


def floor_opened(store, what):
    result = subprocess.run(
        [sys.executable, "-S", "-c", FLOOR_PROBE, str(store), bench.FLOOR, what, bench.MISS],
        cwd=store,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return sorted(path for kind, path in json.loads(result.stdout) if kind == "open")


def session_and_log_files(paths):
    """state.json, history.jsonl and logs: what the floors read."""
    kept = ("/state.json", "/history.jsonl")
    return sorted(p for p in set(paths) if p.endswith(kept) or p.startswith(".stacks/logs/"))


@pytest.fixture(scope="module")
def with_a_user(stores, tmp_path_factory):
    """The bigger store and a session in a user's namespace (the bench runs as a user)."""
    copy = tmp_path_factory.mktemp("users") / "store"
    shutil.copytree(stores[1], copy)
    stm.main(["--dir", str(copy / ".stacks"), "--user", "bench", "session", "new", "--no-switch"])
    assert len(os.listdir(copy / ".state" / "sessions" / "user-bench")) == 1
    return copy


@pytest.mark.parametrize("what", sorted(bench.FLOOR_COMMANDS))
def test_each_bench_floor_reads_what_its_command_reads(with_a_user, what):
    bigger = with_a_user
    report = probe(bigger, bench.FLOOR_COMMANDS[what])
    assert report["code"] == (1 if what == "search" else 0)  # search: 1, nothing found
    mine, floor = session_and_log_files(opened(report)), floor_opened(bigger, what)
    if what == "status":  # status reads the newest log's tail; the floor only sizes each
        mine = [p for p in mine if not p.startswith(".stacks/logs/")]
    assert floor == mine
    assert len(floor) > 150  # the bigger store's 150 extra active sessions are in both
