"""The command line and its environment: arguments and STM_USER that are not UTF-8,
user names in any script, a bad STM_LOCK_TIMEOUT, init's folders: usage errors, one
line, the tree unchanged."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import STM_PY, Result, snapshot
from helpers import assert_clean_refusal

import stm


@pytest.mark.parametrize("argv", [["log", "hello"], ["session", "new"]], ids=["log", "new"])
def test_stm_user_that_is_not_utf8_is_a_usage_error(store, argv):
    before = snapshot(store)
    env = {k.encode(): v.encode() for k, v in os.environ.items()}
    env[b"STM_USER"] = b"caf\xe9"
    done = subprocess.run(
        [sys.executable, str(STM_PY), *argv], cwd=store, env=env, capture_output=True, timeout=60
    )
    result = Result(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode())
    assert_clean_refusal(result, 2, "STM_USER")
    assert snapshot(store) == before


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999", "-1", "-0.5", "soon"])
def test_a_bad_lock_timeout_is_a_usage_error(store, call, monkeypatch, value):
    monkeypatch.setenv("STM_LOCK_TIMEOUT", value)
    before = snapshot(store)
    assert_clean_refusal(call("log", "x"), 2, "STM_LOCK_TIMEOUT")
    assert snapshot(store) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["--dir", ".stacks", "--state-dir", ".stacks"],
        ["--dir", ".stacks", "--state-dir", "./.stacks/"],
        ["--dir", ".stacks", "--state-dir", ".stacks/state"],
        ["--state-dir", ".stacks/state"],
        ["--dir", "mem/.stacks", "--state-dir", "mem/.stacks/x/y"],
    ],
    ids=["equal", "equal-spelled-otherwise", "inside", "inside-default-dir", "deep-inside"],
)
def test_init_refuses_a_state_dir_equal_to_or_inside_the_stacks_dir(project, call, argv):
    (project / "mem").mkdir()
    before = snapshot(project)
    assert_clean_refusal(call("init", *argv), 2, "--state-dir")
    assert snapshot(project) == before


NON_ASCII_USERS = ["Юрий", "李", "🦊", "Ünal Çelik"]


@pytest.mark.parametrize("user", NON_ASCII_USERS)
def test_a_user_name_without_ascii_letters_works_everywhere(store, run, monkeypatch, user):
    monkeypatch.setenv("STM_USER", user)
    assert run("boot").code == 0
    assert run("log", "worked on the lexer").code == 0
    created = run("session", "new", "--name", "port").out.strip()
    for argv in (["status"], ["check"], ["session", "list"], ["boot"]):
        result = run(*argv)
        assert result.code == 0, (argv, result)
    assert created in run("session", "list").out
    log = next((store / ".stacks" / "logs").glob("*.md")).read_text()  # not .gitkeep
    assert f"· {user} <!--" in log  # the author is kept verbatim
    folders = [p.name for p in (store / ".state" / "sessions").iterdir() if p.is_dir()]
    assert folders == [f"user-{stm.user_slug(user)}"]
    slug = stm.user_slug(user)
    assert slug == stm.user_slug(user.upper() if user.isalpha() else user)  # case-blind
    assert slug.isascii() and stm.check_component(f"user-{slug}", "user folder")


def test_user_slugs_are_stable_distinct_and_keep_ascii_names_as_they_were():
    assert stm.user_slug("Alice Smith") == "alice-smith"  # unchanged for existing users
    assert stm.user_slug("José") == "jos-"
    slugs = {stm.user_slug(name) for name in NON_ASCII_USERS[:3] + ["Иван", "王"]}
    assert len(slugs) == 5
    assert stm.user_slug("Юрий") == stm.user_slug("ЮРИЙ") == stm.user_slug(" Юрий ")
    # NFC and NFD spellings (a macOS file name, a Linux shell) are one user
    assert stm.user_slug("Ünal") == stm.user_slug("U\u0308nal")


@pytest.mark.parametrize("user", ["   ", "---", "..."])
def test_a_user_name_with_nothing_to_name_is_still_refused(store, run, monkeypatch, user):
    monkeypatch.setenv("STM_USER", user)
    result = run("session", "list")
    assert result.code == 2 and "STM_USER" in result.err


@pytest.mark.parametrize(
    "argv",
    [
        [b"log", b"caf\xe9 \xff"],
        [b"note", b"Status", b"caf\xe9"],
        [b"session", b"new", b"--name", b"caf\xe9"],
        [b"session", b"checkpoint", b"--done", b"\xff\xfe"],
        [b"search", b"caf\xe9"],
    ],
    ids=["log", "note", "session-name", "checkpoint", "search"],
)
def test_an_argument_that_is_not_utf8_is_a_usage_error(store, call, argv):
    call("session", "new")
    before = snapshot(store)
    done = subprocess.run(
        [sys.executable, str(STM_PY), *argv], cwd=store, capture_output=True, timeout=60
    )
    result = Result(done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode())
    assert_clean_refusal(result, 2)
    assert snapshot(store) == before
