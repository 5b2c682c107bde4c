"""A newcomer's first hour (issue 30) and the small resume items of issue 24 (item 8):
each test runs stm as a new user would and fails if the rough edge comes back."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from conftest import snapshot

import stm

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd, *args):
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )


def state_of(store, sid):
    return json.loads((store / ".state" / "sessions" / sid / "state.json").read_text())


# ---- 1. --done: a step by its text, its number or a part; a phase is no step --------


@pytest.fixture
def steps(store, run):
    sid = run("session", "new", "--name", "count", "--phases", "plan,build").out.strip()
    pending = ["write count_chars", "write count_words", "test the counters"]
    args = [a for step in pending for a in ("--pending", step)]
    assert run("session", "checkpoint", *args).code == 0
    return sid


def test_done_takes_a_part_of_a_step_that_only_it_holds(store, run, steps):
    result = run("session", "checkpoint", "--done", "count_chars")
    assert result.code == 0 and result.err == ""
    checkpoint = state_of(store, steps)["checkpoint"]
    assert checkpoint["last_completed_step"] == "write count_chars"
    assert checkpoint["pending_steps"] == ["write count_words", "test the counters"]
    shown = run("session", "show").out
    assert "- Last completed step: write count_chars" in shown
    assert re.findall(r"^  \d+\. (.*)$", shown, re.M) == ["write count_words", "test the counters"]


def test_done_with_a_part_that_several_steps_hold_is_refused_listing_them(store, run, steps):
    before = snapshot(store)
    result = run("session", "checkpoint", "--done", "write")
    assert result.code == 2
    assert "1. write count_chars" in result.err and "2. write count_words" in result.err
    assert "nothing written" in result.err
    assert snapshot(store) == before


def test_done_by_number_and_by_text_still_work(store, run, steps):
    assert run("session", "checkpoint", "--done", "2").code == 0
    assert state_of(store, steps)["checkpoint"]["last_completed_step"] == "write count_words"
    assert run("session", "checkpoint", "--done", "test the counters").code == 0
    assert state_of(store, steps)["checkpoint"]["pending_steps"] == ["write count_chars"]


def test_a_phase_given_to_done_is_recorded_with_a_warning_naming_session_phase(store, run, steps):
    result = run("session", "checkpoint", "--done", "plan")
    assert result.code == 0
    assert "'plan' is a phase" in result.err and "`stm session phase NAME`" in result.err
    state = state_of(store, steps)
    assert state["checkpoint"]["last_completed_step"] == "plan"
    assert len(state["checkpoint"]["pending_steps"]) == 3


def test_repeated_done_records_every_step(store, run, steps):
    result = run("session", "checkpoint", "--done", "1", "--done", "2")
    assert result.code == 0 and result.err == ""
    state = state_of(store, steps)
    assert state["checkpoint"]["pending_steps"] == ["test the counters"]
    assert state["checkpoint"]["last_completed_step"] == "write count_words"
    assert "write count_chars" in state["recovery"]["last_action"]
    # a rebuild from history (what a merge from another clone runs) gives the same
    rebuilt, _, skipped = stm.rebuild_state(str(store / ".state" / "sessions" / steps))
    assert skipped == []
    assert rebuilt["checkpoint"]["pending_steps"] == ["test the counters"]
