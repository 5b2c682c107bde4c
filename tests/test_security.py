"""Hostile trees and bad input (spec/reliability.md guarantees 5 and 6)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import ROOT, snapshot

import stm

HANDOFF = str(ROOT / "spec" / "handoff-example.json")


@pytest.fixture
def victim(tmp_path_factory):
    """A file outside the project that an attack would like stm to read or overwrite."""
    folder = tmp_path_factory.mktemp("outside")
    path = folder / "secret.txt"
    path.write_text("PRECIOUS CONTENT\n")
    return path


def session(run):
    result = run("session", "new")
    assert result.code == 0
    return result.out.strip()


def assert_untouched(victim):
    assert victim.read_text() == "PRECIOUS CONTENT\n"
    assert sorted(os.listdir(victim.parent)) == ["secret.txt"]


# ---- symlink attacks ------------------------------------------------------------


def test_symlinked_session_folder_is_refused(store, run, victim):
    sid = "2026-11-22-0badf00d"  # date-safe: pinned clock or id
    outside = victim.parent / sid
    outside.mkdir()
    (outside / "state.json").write_text(json.dumps({"version": 1, "phase": "x"}))
    (store / ".state" / "sessions" / sid).symlink_to(outside)
    before = snapshot(victim.parent)
    for args in (
        ("session", "switch", sid),
        ("session", "phase", "evil", "--session", sid),
        ("session", "archive", sid),
    ):
        result = run(*args)
        assert result.code == 1, (args, result)
        assert "symbolic link" in result.err
    assert snapshot(victim.parent) == before
    findings = json.loads(run("check", "--json").out)["findings"]
    assert "session-symlink" in {f["rule"] for f in findings}


def test_symlinked_state_file_is_refused(store, run, victim):
    sid = session(run)
    state = store / ".state" / "sessions" / sid / "state.json"
    state.unlink()
    state.symlink_to(victim)
    result = run("session", "checkpoint", "--done", "x")
    assert result.code == 1 and "symbolic link" in result.err
    boot = run("boot")
    assert "PRECIOUS" not in boot.out
    assert_untouched(victim)


def test_symlinked_history_file_is_refused(store, run, victim):
    sid = session(run)
    history = store / ".state" / "sessions" / sid / "history.jsonl"
    history.unlink()
    history.symlink_to(victim)
    result = run("session", "phase", "next")
    assert result.code == 1 and "symbolic link" in result.err
    assert_untouched(victim)


def test_symlinked_log_file_is_refused(store, run, victim):
    today = stm.iso(stm.utc_now())[:10]
    (store / ".stacks" / "logs" / f"{today}.md").symlink_to(victim)
    result = run("log", "append me")
    assert result.code == 1 and "symbolic link" in result.err
    assert_untouched(victim)
    findings = json.loads(run("check", "--json").out)["findings"]
    assert "layer-symlink" in {f["rule"] for f in findings}


def test_symlinked_logs_folder_is_refused_and_never_read(store, run, victim):
    logs = store / ".stacks" / "logs"
    for child in logs.iterdir():
        child.unlink()
    logs.rmdir()
    logs.symlink_to(victim.parent)
    (victim.parent / "2026-01-01.md").write_text("ghp_" + "a" * 36 + "\n")
    result = run("log", "x")
    assert result.code == 1 and "symbolic link" in result.err
    data = json.loads(run("check", "--json").out)
    rules = {f["rule"] for f in data["findings"]}
    assert "layer-symlink" in rules and "secret" not in rules  # not read through the link
    assert (victim.parent / "2026-01-01.md").read_text().startswith("ghp_")


def test_symlinked_pointer_is_refused(store, run, victim):
    (store / ".state" / "current-session.json").symlink_to(victim)
    for args in (("session", "new"), ("session", "phase", "x")):
        result = run(*args)
        assert result.code == 1 and "symbolic link" in result.err
    assert_untouched(victim)
    assert not list((store / ".state" / "sessions").glob("20*"))


def test_symlinked_identity_is_not_read_at_boot(store, run, victim):
    agent = store / ".stacks" / "AGENT.md"
    agent.unlink()
    agent.symlink_to(victim)
    result = run("boot")
    assert result.code == 0
    assert "PRECIOUS" not in result.out
    assert "cannot read .stacks/AGENT.md" in result.err
    result = run("init", "--force")
    assert result.code == 1 and "symbolic link" in result.err
    assert_untouched(victim)


def test_symlinked_ref_is_listed_but_not_read(store, run, victim):
    (store / ".stacks" / "refs" / "x.md").symlink_to(victim)
    out = run("boot").out
    assert "PRECIOUS" not in out and "refs/x.md — (untitled)" in out
    findings = json.loads(run("check", "--json").out)["findings"]
    assert ("layer-symlink", ".stacks/refs/x.md") in {(f["rule"], f["path"]) for f in findings}


def test_symlinked_sessions_folder_cannot_lead_writes_outside(store, run, victim):
    sessions = store / ".state" / "sessions"
    (sessions / ".gitkeep").unlink()
    sessions.rmdir()
    sessions.symlink_to(victim.parent)
    result = run("session", "new")
    assert result.code == 1 and "symbolic link" in result.err
    assert_untouched(victim)


def test_symlinked_lock_file_is_refused(store, run, victim):
    lock = store / ".stacks" / ".stm.lock"
    if lock.exists():
        lock.unlink()
    lock.symlink_to(victim)
    result = run("log", "x")
    assert result.code == 1 and "lock file" in result.err
    assert_untouched(victim)


# ---- path and name validation -----------------------------------------------------


@pytest.mark.parametrize(
    "name,problem",
    [
        ("", "is empty"),
        ("a\x00b", "NUL"),
        ("a/b", "separator"),
        ("a\\b", "separator"),
        ("..", "'.' or '..'"),
        (".", "'.' or '..'"),
        (".GIT", ".git"),
        ("x" * 256, "longer than 255"),
        ("notes.tmp", "reserves"),
        ("held.lock", "reserves"),
    ],
)
def test_check_component_refuses_unsafe_names(name, problem):
    with pytest.raises(stm.StmError) as raised:
        stm.check_component(name, "name")
    assert problem in raised.value.message and raised.value.code == 2


def test_check_component_accepts_a_plain_name():
    assert stm.check_component("deploy-notes.md", "name") == "deploy-notes.md"


def test_require_inside_refuses_escape(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path)
    with pytest.raises(stm.StmError):
        stm.require_inside(str(tmp_path / "root" / "link"), str(tmp_path / "root"), "folder")
    assert stm.require_inside(str(tmp_path / "root"), str(tmp_path / "root"), "x")


HOSTILE_CONTEXT = {
    "key": "../../../home/user/.ssh/id_rsa",
    "abs": "/etc/shadow",
    "drive": "C:/secrets.txt",
    "dots": "context/../../x",
    "ctrl": "context/a\x1b[2Jb.md",
    "bad": 42,
}


def test_boot_never_hands_an_agent_a_context_path_outside_the_session(store, run):
    """Boot tells the agent which context files to read; a hostile repository must not
    be able to steer it to a file outside the session (a key, a password file)."""
    sid = run("session", "new").out.strip()
    path = store / ".state" / "sessions" / sid / "state.json"
    state = json.loads(path.read_text())
    state["context"] = {**HOSTILE_CONTEXT, "spec": "context/spec.md"}
    path.write_text(json.dumps(state))
    boot = run("boot").out
    context_line = next(line for line in boot.splitlines() if "Context files" in line)
    assert context_line == f"- Context files: .state/sessions/{sid}/context/spec.md"
    assert "ssh" not in boot and "shadow" not in boot and "secrets" not in boot
    result = run("check", "--json")
    messages = [f["message"] for f in json.loads(result.out)["findings"]]
    for name in HOSTILE_CONTEXT:
        assert any(m.startswith(f"context {name!r}:") for m in messages), name
    assert not any("'spec'" in m for m in messages)


@pytest.mark.parametrize("value", ["context/spec.md", "artifacts/out/report.json", "notes.md"])
def test_context_paths_inside_the_session_are_fine(value):
    assert stm.context_path_problem(value) is None


# ---- the bad-input table -----------------------------------------------------------


def corrupt(path_parts, content):
    def apply(store, sid):
        path = store.joinpath(*[p.replace("SID", sid) for p in path_parts])
        path.write_bytes(content if isinstance(content, bytes) else content.encode())

    return apply


def pointer_to(value):
    def apply(store, sid):
        data = {"active_session": value.replace("SID", sid), "updated_at": "x"}
        (store / ".state" / "current-session.json").write_text(json.dumps(data))

    return apply


def no_pointer(store, sid):
    assert stm.main(["session", "new", "--no-switch"]) == 0
    (store / ".state" / "current-session.json").write_text('{"active_session": null}')


def archive_current(store, sid):
    assert stm.main(["session", "archive", sid]) == 0


def set_phases(store, sid):
    assert stm.main(["session", "new", "--phases", "plan,build"]) == 0


def handoff_file(content):
    def apply(store, sid):
        (store / "h.json").write_bytes(content if isinstance(content, bytes) else content.encode())

    return apply


BIG = "x" * (1024 * 1024 + 10)
STATE = (".state", "sessions", "SID", "state.json")

BAD_INPUTS = [
    # log
    ("log empty", ["log", ""], None, None, 2, "empty"),
    ("log blank", ["log", "  \t "], None, None, 2, "empty"),
    ("log stdin empty", ["log", "-"], "", None, 2, "empty"),
    ("log stdin blank lines", ["log", "-"], "\n\n\n", None, 2, "empty"),
    ("log stdin not utf-8", ["log", "-"], b"\xff\xfe\xfa", None, 2, "not UTF-8"),
    ("log huge", ["log", "-"], BIG, None, 2, "larger than 1 MiB"),
    ("log no message", ["log"], None, None, 2, "MESSAGE"),
    ("log github token", ["log", "ghp_" + "b" * 36], None, None, 1, "GitHub token"),
    ("log aws key", ["log", "AKIAABCDEFGHIJKLMNOP"], None, None, 1, "AWS"),
    ("log openai key", ["log", "sk-" + "z" * 30], None, None, 1, "OpenAI"),
    ("log slack token", ["log", "xoxp-1234567890-x"], None, None, 1, "Slack"),
    ("log private key", ["log", "-"], "-----BEGIN PRIVATE KEY-----\n", None, 1, "private key"),
    ("log bad flag", ["log", "--nope", "x"], None, None, 2, "--nope"),
    # boot
    ("boot max-tokens zero", ["boot", "--max-tokens", "0"], None, None, 2, "--max-tokens"),
    ("boot max-tokens text", ["boot", "--max-tokens", "lots"], None, None, 2, "--max-tokens"),
    ("boot -o directory", ["boot", "-o", ".stacks"], None, None, 2, "is a directory"),
    ("boot -o missing folder", ["boot", "-o", "no/x.md"], None, None, 1, "does not exist"),
    ("boot --dir missing", ["boot", "--dir", "/nonexistent/x"], None, None, 1, "--dir"),
    ("boot --dir a file", ["boot", "--dir", ".stacks/AGENT.md"], None, None, 2,
     "--dir .stacks/AGENT.md is a file"),
    ("init --dir a file", ["init", "--dir", ".stacks/MEMORY.md"], None, None, 2, "is a file"),
    ("list --state-dir a file", ["session", "list", "--state-dir", ".stacks/AGENT.md"], None,
     None, 2, "--state-dir .stacks/AGENT.md is a file"),
    ("log template only", ["log", "-"], "### Summary\n<!-- x -->\n\n### Done\n", None, 2,
     "no text of its own"),
    # session new
    ("new phase dotdot", ["session", "new", "--phase", "../x"], None, None, 2, "a phase is"),
    ("new phase empty", ["session", "new", "--phase", ""], None, None, 2, "a phase is"),
    ("new phase NUL", ["session", "new", "--phase", "a\x00b"], None, None, 2, "a phase is"),
    ("new phase ANSI", ["session", "new", "--phase", "\x1b[2Jx"], None, None, 2, "a phase is"),
    ("new phases empty", ["session", "new", "--phases", ""], None, None, 2, "--phases needs"),
    ("new phases slash", ["session", "new", "--phases", "a,b/c"], None, None, 2, "a phase is"),
    ("new phases twice", ["session", "new", "--phases", "a,a"], None, None, 2, "twice"),
    ("new phase outside", ["session", "new", "--phases", "a", "--phase", "b"], None, None, 2,
     "not one of"),
    ("new name empty", ["session", "new", "--name", ""], None, None, 2, "--name needs"),
    ("new name long", ["session", "new", "--name", "n" * 201], None, None, 2, "longer than"),
    ("new user symbols", ["session", "new", "--user", "!!!"], None, None, 2, "no letter"),
    ("new user empty", ["session", "new", "--user", ""], None, None, 2, "no letter"),
    ("new user dotdot", ["session", "new", "--user", "../.."], None, None, 2, "no letter"),
    # switch
    ("switch dotdot", ["session", "switch", "../etc"], None, None, 2, "not a session id"),
    ("switch absolute", ["session", "switch", "/etc/passwd"], None, None, 2, "not a session id"),
    ("switch short", ["session", "switch", "abc"], None, None, 2, "not a session id"),
    ("switch empty", ["session", "switch", ""], None, None, 2, "not a session id"),
    ("switch NUL", ["session", "switch", "ab\x00cd"], None, None, 2, "not a session id"),
    ("switch uppercase", ["session", "switch", "2026-11-22-ABCDEF12"], None, None, 2,
     "not a session id"),
    ("switch long", ["session", "switch", "a" * 300], None, None, 2, "not a session id"),
    ("switch ANSI", ["session", "switch", "\x1b[31mabcd"], None, None, 2, "not a session id"),
    ("switch backslash", ["session", "switch", "ab\\cd"], None, None, 2, "not a session id"),
    ("switch unknown", ["session", "switch", "2020-01-01-00000000"], None, None, 1, "no session"),
    ("switch no match", ["session", "switch", "ffff0000"], None, None, 1, "no session matches"),
    ("switch archived", ["session", "switch", "SID"], None, archive_current, 1, "archived"),
    # archive
    ("archive dotdot", ["session", "archive", "../../x"], None, None, 2, "not a session id"),
    ("archive unknown", ["session", "archive", "2020-01-01-00000000"], None, None, 1,
     "no session"),
    ("archive conflict", ["session", "archive", "--expect-version", "9"], None, None, 3,
     "conflict"),
    ("archive no current", ["session", "archive"], None, no_pointer, 1, "no current session"),
    # phase
    ("phase dotdot", ["session", "phase", "../x"], None, None, 2, "a phase is"),
    ("phase space", ["session", "phase", "a b"], None, None, 2, "a phase is"),
    ("phase long", ["session", "phase", "p" * 65], None, None, 2, "a phase is"),
    ("phase outside valid", ["session", "phase", "ship"], None, set_phases, 2, "not one of"),
    ("phase conflict", ["session", "phase", "x", "--expect-version", "9"], None, None, 3,
     "conflict"),
    ("phase version text", ["session", "phase", "x", "--expect-version", "v1"], None, None, 2,
     "--expect-version"),
    ("phase session dotdot", ["session", "phase", "x", "--session", "../.."], None, None, 2,
     "not a session id"),
    # checkpoint
    ("checkpoint nothing", ["session", "checkpoint"], None, None, 2, "checkpoint needs"),
    ("checkpoint done empty", ["session", "checkpoint", "--done", ""], None, None, 2,
     "--done needs"),
    ("checkpoint clear+pending", ["session", "checkpoint", "--pending", "a", "--clear-pending"],
     None, None, 2, "do not go together"),
    ("checkpoint resume long", ["session", "checkpoint", "--resume", "r" * 1001], None, None, 2,
     "longer than 1000"),
    ("checkpoint conflict", ["session", "checkpoint", "--done", "a", "--expect-version", "0"],
     None, None, 3, "conflict"),
    # corrupt files
    ("state not json", ["session", "phase", "x"], None, corrupt(STATE, "{"), 1, "not valid JSON"),
    ("state truncated", ["session", "checkpoint", "--done", "a"], None,
     corrupt(STATE, '{"session_id": "'), 1, "not valid JSON"),
    ("state array", ["session", "phase", "x"], None, corrupt(STATE, "[]"), 1, "not a stm state"),
    ("state binary", ["session", "phase", "x"], None, corrupt(STATE, b"\x00\xff"), 1,
     "not valid JSON"),
    ("pointer not json", ["session", "phase", "x"], None,
     corrupt((".state", "current-session.json"), "{{"), 1, "not valid JSON"),
    ("pointer to missing", ["session", "phase", "x"], None, pointer_to("2020-01-01-00000000"), 1,
     "no longer exists"),
    ("pointer to archived", ["session", "phase", "x"], None, archive_current, 1,
     "no current session"),
    ("pointer traversal", ["session", "phase", "x"], None, pointer_to("../../etc"), 1, "corrupt"),
    # compose-handoff
    ("handoff invalid json", ["compose-handoff", "h.json"], None, handoff_file("{"), 1,
     "not valid JSON"),
    ("handoff array", ["compose-handoff", "h.json"], None, handoff_file("[]"), 1, "JSON object"),
    ("handoff binary", ["compose-handoff", "h.json"], None, handoff_file(b"\x89PNG\x00"), 1,
     "not UTF-8"),
    ("handoff huge", ["compose-handoff", "h.json"], None, handoff_file(BIG), 1, "1 MiB"),
    ("handoff empty object", ["compose-handoff", "h.json"], None, handoff_file("{}"), 1,
     "task_id is missing"),
    ("handoff placeholder", ["compose-handoff", "-"], json.dumps({
        "task_id": "T", "from_agent": "a", "task": "TBD", "status": "s",
        "created_at": "2026-11-22T00:00:00Z"}), None, 1, "placeholder"),
    ("handoff missing file", ["compose-handoff", "nope.json"], None, None, 1, "not found"),
    ("handoff directory", ["compose-handoff", ".stacks"], None, None, 1, "is a directory"),
    ("handoff bad flag", ["compose-handoff", "--nope"], None, None, 2, "--nope"),
    # global
    ("unknown command", ["frobnicate"], None, None, 2, "invalid choice"),
    ("lock timeout text", ["log", "x"], None, "STM_LOCK_TIMEOUT=soon", 2, "STM_LOCK_TIMEOUT"),
    ("lock timeout negative", ["log", "x"], None, "STM_LOCK_TIMEOUT=-1", 2, "STM_LOCK_TIMEOUT"),
]  # fmt: skip


def test_the_bad_input_table_is_big_enough():
    assert len(BAD_INPUTS) >= 60
    assert len({case[0] for case in BAD_INPUTS}) == len(BAD_INPUTS)


@pytest.mark.parametrize("name,argv,stdin,setup,code,fragment", BAD_INPUTS, ids=lambda v: None)
def test_bad_input(store, run, monkeypatch, name, argv, stdin, setup, code, fragment):
    sid = session(run)
    if isinstance(setup, str):
        key, value = setup.split("=", 1)
        monkeypatch.setenv(key, value)
    elif setup is not None:
        setup(store, sid)
    argv = [a.replace("SID", sid) for a in argv]
    before = snapshot(store)
    result = run(*argv, stdin=stdin)
    assert result.code == code, (name, result)
    assert fragment in result.err, (name, result.err)
    assert "Traceback" not in result.err
    assert "\x1b" not in result.err and "\x00" not in result.err
    errors = [line for line in result.err.splitlines() if "error:" in line]
    assert len(errors) == 1, (name, result.err)  # one clear message
    assert snapshot(store) == before, name
