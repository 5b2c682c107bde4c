"""Agent and tool integration (spec/integration.md, spec/json.md)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT, snapshot
from helpers import GIT_IDENTITY, GIT_PRIVATE_CONFIG, git_out, run_process

import stm

WORKERS = ROOT / "tests" / "workers.py"


def memory(store):
    return (store / ".stacks" / "MEMORY.md").read_text()


def section(text, name):
    body = stm.section_body(text, name)
    assert body is not None, f"no section {name}"
    return body


# ---- note ---------------------------------------------------------------------------


def test_note_adds_bullets_newest_first_and_stamps_last_updated(store, run):
    assert run("note", "Next Steps", "first").code == 0
    assert run("note", "next steps", "second").code == 0  # case-insensitive
    body = section(memory(store), "Next Steps")
    assert body.index("- second") < body.index("- first")
    assert "Port the expression grammar." in body  # what was there stays
    stamp = section(memory(store), "Last Updated").strip()
    assert stm.is_iso_utc(stamp)


def test_note_on_a_template_section_goes_below_the_guidance(project, run):
    run("init")
    run("note", "Status", "lexer done")
    text = memory(project)
    assert (
        "## Status\n\n<!-- Where does the work stand right now? -->\n\n- lexer done\n\n## " in text
    )


def test_note_prefix_match_and_ambiguity(store, run):
    assert run("note", "obs", "seen").code == 0
    assert "- seen" in section(memory(store), "Observations")
    before = snapshot(store)
    result = run("note", "o", "x")  # Observations and Open Questions
    assert result.code == 2
    assert "ambiguous" in result.err and "Observations" in result.err
    assert snapshot(store) == before


def test_note_creates_a_missing_section_above_last_updated(store, run):
    assert run("note", "Decisions", "keep Pratt", "--create").code == 0
    text = memory(store)
    assert "## Decisions\n\n- keep Pratt\n" in text
    assert text.index("## Decisions") < text.index("## Last Updated")


def test_note_multi_line_from_stdin(store, run):
    assert run("note", "Observations", "-", stdin="line one\nline two\n").code == 0
    assert "- line one\n  line two" in section(memory(store), "Observations")


def test_note_replace_swaps_the_body(store, run):
    assert run("note", "Status", "--replace", stdin="All green.\nShipping Friday.\n").code == 0
    body = section(memory(store), "Status")
    assert body.strip() == "All green.\nShipping Friday."
    assert run("note", "Status", "--replace", "Blocked", "on", "review").code == 0
    assert section(memory(store), "Status").strip() == "Blocked on review"


@pytest.mark.parametrize(
    "args,stdin",
    [
        (("Status", "--replace", ""), None),  # `--replace "$UNSET"`
        (("Status", "--replace", "  ", "\t"), None),
        (("Status", "--replace"), ""),  # an empty standard input
        (("Status", "--replace", "-"), " \n\n"),
        (("--identity", "Role", "--replace", ""), None),
    ],
)
def test_note_replace_with_an_empty_body_is_refused(store, run, args, stdin):
    before = snapshot(store)
    result = run("note", *args, stdin=stdin)
    assert result.code == 2 and result.out == ""
    where = "--identity Role" if "--identity" in args else "Status"
    assert "note --replace with an empty TEXT would empty the section" in result.err
    assert f"`stm note {where} --clear`" in result.err, result.err
    assert snapshot(store) == before


def test_note_clear_empties_a_section_on_purpose(store, run):
    assert section(memory(store), "Status").strip()
    before = snapshot(store)
    refused = run("note", "Status", "--clear", "text")
    assert refused.code == 2 and "takes no TEXT" in refused.err
    assert run("note", "Status", "--clear", "--replace", "x").code == 2
    assert snapshot(store) == before
    assert run("note", "Status", "--clear").code == 0
    assert section(memory(store), "Status").strip() == ""
    assert "## Next Steps" in memory(store)  # the section itself stays, the others too


def test_note_keeps_a_crlf_file_crlf(store, run):
    path = store / ".stacks" / "MEMORY.md"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert run("note", "Observations", "-", stdin="line one\nline two\n").code == 0
    data = path.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n")  # one style of line end, as it was
    assert b"- line one\r\n  line two\r\n" in data
    broken = path.read_bytes().replace(b"## Next Steps\r\n", b"## Todo\r\n")
    path.write_bytes(broken)
    assert run("check", "--fix").code == 0
    fixed = path.read_bytes()
    assert b"## Next Steps\r\n" in fixed and fixed.count(b"\n") == fixed.count(b"\r\n")


def test_note_protects_identity(store, run):
    agent_before = (store / ".stacks" / "AGENT.md").read_text()
    assert run("note", "Role", "a note", "--create").code == 0
    assert (store / ".stacks" / "AGENT.md").read_text() == agent_before
    assert "- a note" in section(memory(store), "Role")  # MEMORY.md got a Role section
    memory_before = memory(store)
    assert run("note", "--identity", "Principles", "never force-push").code == 0
    assert "- never force-push" in (store / ".stacks" / "AGENT.md").read_text()
    assert memory(store) == memory_before


@pytest.mark.parametrize(
    "args,stdin,code,fragment",
    [
        (("Status", ""), None, 2, "empty"),
        (("Status",), None, 2, "needs TEXT"),
        (("#Status", "x"), None, 2, "SECTION"),
        (("Status", "key ghp_" + "a" * 36), None, 1, "GitHub token"),
        (("Status", "-"), b"\xff\xfe", 2, "not UTF-8"),
        (("Status", "--replace"), "Done.\n## Next Steps\nship\n", 2, "line 2 of the new body"),
        (("Brand new", "--replace"), "# Title\n", 2, "would end the section"),
    ],
)
def test_note_refusals_leave_the_tree_unchanged(store, run, args, stdin, code, fragment):
    before = snapshot(store)
    result = run("note", *args, stdin=stdin)
    assert result.code == code and fragment in result.err
    assert snapshot(store) == before


def test_note_on_a_duplicated_heading_is_refused(store, run):
    path = store / ".stacks" / "MEMORY.md"
    path.write_text(path.read_text() + "\n## Status\n\nagain\n")
    before = snapshot(store)
    result = run("note", "Status", "x")
    assert result.code == 1 and "appears 2 times" in result.err
    assert snapshot(store) == before


def test_note_replace_keeps_headings_inside_a_code_fence(store, run):
    body = "```\n## not a heading here\n```\n### a sub-heading is fine\n"
    assert run("note", "Status", "--replace", stdin=body).code == 0
    assert section(memory(store), "Status").strip() == body.strip()


def test_note_that_would_not_land_is_refused_before_writing(store, run, monkeypatch):
    before = snapshot(store)
    writes = []
    monkeypatch.setattr(stm, "note_landed", lambda *a: False)
    monkeypatch.setattr(stm, "atomic_write", lambda *a, **k: writes.append(a))
    result = run("note", "Status", "x")
    assert result.code == 1 and "would not land" in result.err
    assert writes == [] and snapshot(store) == before


def test_note_that_does_not_read_back_is_undone(store, run, monkeypatch):
    before = snapshot(store)
    checks = iter([True, False])  # fine in memory, wrong on disk (read back)
    monkeypatch.setattr(stm, "note_landed", lambda *a: next(checks))
    result = run("note", "Status", "x")
    assert result.code == 1 and "did not land" in result.err
    assert snapshot(store) == before


def test_8_processes_x_25_notes_into_one_section_lose_nothing(store):
    env = {**os.environ, "STM_FSYNC": "0"}
    procs = [
        subprocess.Popen([sys.executable, "-S", str(WORKERS), "note", str(store), w, "25"], env=env)
        for w in "abcdefgh"
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    body = section(memory(store), "Observations")
    for w in "abcdefgh":
        numbers = [int(n) for n in re.findall(rf"- writer {w} note (\d+)", body)]
        assert sorted(numbers) == list(range(25))
        assert numbers == sorted(numbers, reverse=True)  # newest first, per writer


def test_check_reports_a_renamed_heading_and_fix_restores_it(store, run):
    path = store / ".stacks" / "MEMORY.md"
    path.write_text(path.read_text().replace("## Open Questions", "## Questions"))
    data = json.loads(run("check", "--json").out)
    assert ("heading-missing", ".stacks/MEMORY.md") in {
        (f["rule"], f["path"]) for f in data["findings"]
    }
    assert run("check", "--fix").code == 0
    assert "## Open Questions" in path.read_text()
    assert run("check", "--strict").code == 0


# ---- search -------------------------------------------------------------------------


def logged(run, monkeypatch, stamp, message):
    with monkeypatch.context() as patch:
        patch.setattr(stm, "utc_now", lambda: stm.parse_iso(stamp))
        assert run("log", message).code == 0


def test_search_prints_path_line_text_newest_logs_first(store, run, monkeypatch):
    logged(run, monkeypatch, "2026-11-01T10:00:00Z", "Grammar work started")
    logged(run, monkeypatch, "2026-11-20T10:00:00Z", "grammar ported")
    result = run("search", "GRAMMAR")
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0].startswith(".stacks/MEMORY.md:")  # layers first
    log_lines = [line for line in lines if line.startswith(".stacks/logs/")]
    assert log_lines[0].startswith(".stacks/logs/2026-11-20.md:")  # date-safe: pinned clock
    assert "grammar ported" in log_lines[0]
    assert log_lines[1].startswith(".stacks/logs/2026-11-01.md:")  # date-safe: pinned clock or id
    assert re.match(r"^\.stacks/logs/2026-11-20\.md:\d+: grammar ported$", log_lines[0])


def test_search_layer_since_regex_and_json(store, run, monkeypatch):
    logged(run, monkeypatch, "2026-10-01T10:00:00Z", "old parser note")
    logged(run, monkeypatch, "2026-11-21T10:00:00Z", "new parser note")
    result = run("search", "parser", "--layer", "logs", "--since", "2026-11-01", "--json")
    data = json.loads(result.out)
    assert result.code == 0 and data["schema_version"] == 1
    assert [m["text"] for m in data["matches"]] == ["new parser note"]
    assert set(data["matches"][0]) == {"path", "line", "text", "layer"}
    assert data["matches"][0]["layer"] == "logs"
    regex = run("search", r"(new|old) PARSER", "--regex", "--layer", "logs")
    assert regex.code == 0 and len(regex.out.splitlines()) == 2


def test_search_sessions_layer(store, run):
    run("compose-handoff", str(ROOT / "spec" / "handoff-example.json"))
    result = run("search", "Pratt parser", "--layer", "sessions")
    assert result.code == 0
    assert "/Session.md:" in result.out


def test_search_numbers_lines_across_read_chunks(store, run, monkeypatch):
    ref = store / ".stacks" / "refs" / "long.md"
    long_line = "x" * 50 + " needle in a long line " + "y" * 50
    ref.write_text(f"# Long\n\nshort needle\n{long_line}\ncafé needle\nlast needle")
    expected = [
        ".stacks/refs/long.md:3: short needle",
        f".stacks/refs/long.md:4: {long_line}",
        ".stacks/refs/long.md:5: café needle",
        ".stacks/refs/long.md:6: last needle",  # no newline at the end of the file
    ]
    for chunk in (1, 7, 64, 1 << 20):  # lines split at every place, and one whole read
        monkeypatch.setattr(stm, "SEARCH_CHUNK", chunk)
        result = run("search", "needle", "--layer", "refs")
        assert result.out.splitlines() == expected, chunk


def test_search_streams_a_big_log_in_bounded_memory(store, run):
    import tracemalloc

    log = store / ".stacks" / "logs" / "2026-11-01.md"  # date-safe: pinned clock or id
    with open(log, "w") as f:
        for n in range(400_000):  # about 24 MB in one file
            f.write(f"line {n:07d} of a very large log file, padded out\n")
        f.write("the needle at the end\n")
    tracemalloc.start()
    try:
        result = run("search", "needle at the end", "--layer", "logs")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.out == ".stacks/logs/2026-11-01.md:400001: the needle at the end\n"
    assert peak < 8 * 2**20, peak  # a few 1 MiB chunks, never the 24 MB file


def test_search_nothing_found_exits_1(store, run):
    result = run("search", "zebra-unicorn")
    assert result.code == 1 and result.out == ""


@pytest.mark.parametrize(
    "args,fragment",
    [(("(", "--regex"), "not a valid regular expression"), (("x", "--since", "soon"), "--since"),
     (("",), "non-empty"), (("x", "--layer", "nope"), "invalid choice")],
)  # fmt: skip
def test_search_usage_errors(store, run, args, fragment):
    result = run("search", *args)
    assert result.code == 2 and fragment in result.err


# ---- every command's JSON, against spec/json.md --------------------------------------


def documented_keys():
    spec = (ROOT / "spec" / "json.md").read_text()
    found = {}
    for command, keys in re.findall(r"^### `stm (.+?) --json`\nKeys: (.+)$", spec, re.M):
        found[command] = set(re.findall(r"`(\w+)`", keys))
    return found


def test_json_spec_covers_every_command_that_reports():
    documented = set(documented_keys())
    parser = stm.build_parser()
    with_json = set()

    def walk(p, prefix):
        for action in p._actions:
            if action.__class__.__name__ == "_SubParsersAction":
                for name, sub in action.choices.items():
                    walk(sub, prefix + [name])
            elif "--json" in getattr(action, "option_strings", []):
                with_json.add(" ".join(prefix))

    walk(parser, [])
    # The main parser lists --json for its help only: json_after_command moves it onto the
    # command before anything parses.
    assert "" in with_json
    assert with_json - {""} == documented


def test_every_json_output_matches_its_documented_keys(project, run, tmp_path_factory):
    from conftest import IDENTITY, MEMORY

    keys = documented_keys()
    results = {"init": run("init", "--json")}
    (project / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (project / ".stacks" / "MEMORY.md").write_text(MEMORY)
    results["session new"] = run("session", "new", "--json", "--phases", "a,b")
    sid = json.loads(results["session new"].out)["session_id"]
    results["boot"] = run("boot", "--json")
    results["log"] = run("log", "--json", "an entry about parsers")
    results["check"] = run("check", "--json")
    results["status"] = run("status", "--json")
    results["session switch"] = run("session", "switch", sid, "--json")
    results["session list"] = run("session", "list", "--json")
    results["session show"] = run("session", "show", "--json")
    results["session phase"] = run("session", "phase", "b", "--json")
    results["session checkpoint"] = run("session", "checkpoint", "--done", "a", "--json")
    results["compose-handoff"] = run(
        "compose-handoff", str(ROOT / "spec" / "handoff-example.json"), "--json"
    )
    results["note"] = run("note", "Status", "ok", "--json")
    results["search"] = run("search", "parser", "--json")
    (project / ".stacks" / "refs" / "deploy.md").write_text("# Deploy\n\nHow it ships.\n")
    results["refs list"] = run("refs", "list", "--json")
    results["refs show"] = run("refs", "show", "deploy", "--json")
    zip_path = str(tmp_path_factory.mktemp("zip") / "m.zip")
    results["export"] = run("export", "-o", zip_path, "--json")
    results["import"] = run("import", zip_path, "--dry-run", "--json")
    results["session archive"] = run("session", "archive", sid, "--json")
    results["fact set"] = run("fact", "set", "primary_language", "Go", "--json")
    results["fact get"] = run("fact", "get", "primary_language", "--json")
    results["fact list"] = run("fact", "list", "--json")
    results["compact"] = run("compact", "--json")
    results["digest"] = run("digest", "--json")
    results["fact rm"] = run("fact", "rm", "primary_language", "--why", "test", "--json")
    assert set(results) | {"commit", "sync"} == set(keys)  # in their own tests, with git
    for command, result in results.items():
        assert result.code == 0, (command, result)
        data = json.loads(result.out)
        assert set(data) == keys[command], command
        assert data["schema_version"] == 1


# ---- setup claude -------------------------------------------------------------------

EXISTING_SETTINGS = """{
    "permissions": {"allow": ["Bash(npm test)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "lint"}]}],
        "SessionStart": [
            {"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}
        ]
    },
    "model": "opus"
}
"""


def settings_path(store):
    return store / ".claude" / "settings.json"


def test_setup_claude_print_is_the_default_and_writes_nothing(store, run):
    before = snapshot(store)
    result = run("setup", "claude", "--command", "stm boot")
    data = json.loads(result.out)
    assert list(data) == ["hooks"]  # the settings themselves: no report keys to paste
    entry = data["hooks"]["SessionStart"][0]
    assert list(entry) == ["matcher", "hooks"]
    assert entry["matcher"] == "startup|resume|clear|compact"
    assert entry["hooks"] == [{"type": "command", "command": "stm boot"}]
    assert snapshot(store) == before
    assert run("setup", "claude", "--install", "--command", "stm boot").code == 0
    assert settings_path(store).read_text() == result.out  # what --install writes, exactly


def test_setup_claude_install_merges_and_remove_restores_exactly(store, run, monkeypatch):
    # `stm` installed, as the hook command assumes (--check verifies that it resolves)
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: f"/usr/local/bin/{name}")
    path = settings_path(store)
    path.parent.mkdir()
    path.write_text(EXISTING_SETTINGS)
    assert run("setup", "claude", "--check", "--command", "stm boot").code == 1
    result = run("setup", "claude", "--install", "--command", "stm boot")
    assert result.code == 0 and "installed" in result.out
    data = json.loads(path.read_text())
    assert data["permissions"] == {"allow": ["Bash(npm test)"]} and data["model"] == "opus"
    assert data["hooks"]["PreToolUse"][0]["hooks"][0]["command"] == "lint"
    commands = [h["command"] for e in data["hooks"]["SessionStart"] for h in e["hooks"]]
    assert commands == ["echo hi", "stm boot"]
    assert list(data) == ["permissions", "hooks", "model"]  # the user's order kept
    backups = sorted(p.name for p in path.parent.iterdir() if p.name != "settings.json")
    assert backups == ["settings.json.stm-backup"]  # one backup, and the output says where
    assert (path.parent / backups[0]).read_text() == EXISTING_SETTINGS
    assert ".claude/settings.json.stm-backup" in result.out
    again = run("setup", "claude", "--install", "--command", "stm boot")
    assert again.code == 0 and "already installed" in again.out
    assert len(json.loads(path.read_text())["hooks"]["SessionStart"]) == 2
    assert run("setup", "claude", "--check", "--command", "stm boot").code == 0
    assert run("setup", "claude", "--remove", "--command", "stm boot").code == 0
    assert path.read_text() == EXISTING_SETTINGS
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.json"]  # no litter


def test_setup_claude_without_settings_creates_then_removes_the_file(store, run):
    assert run("setup", "claude", "--install", "--command", "stm boot").code == 0
    assert settings_path(store).exists()
    assert run("setup", "claude", "--remove", "--command", "stm boot").code == 0
    assert not settings_path(store).exists()


@pytest.mark.parametrize("content", ["{not json", '{"hooks": {"SessionStart": {}}}', "[]"])
def test_setup_claude_refuses_invalid_settings(store, run, content):
    path = settings_path(store)
    path.parent.mkdir()
    path.write_text(content)
    before = snapshot(store)
    result = run("setup", "claude", "--install")
    assert result.code == 1 and "nothing changed" in result.err
    assert snapshot(store) == before


def test_setup_claude_default_command_names_this_stm(store, run, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    data = json.loads(run("setup", "claude").out)
    command = data["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    # it captures the session that ended, then boots under the hook cut
    assert command.endswith(" capture --client claude --boot --max-chars 9500")
    words = shlex.split(command)  # every path is quoted for the shell (shell_command)
    assert words[:3] == ["python3", "-I", "-S"]  # isolated: no project module shadows stdlib
    path = words[words.index("capture") - 1]
    assert os.path.samefile(path, stm.__file__)  # it names this checkout's stm.py


def test_the_hook_command_leaves_no_pycache_in_the_project(store, run, monkeypatch, tmp_path):
    """`python3 -m stm` writes bytecode; the hook sends it to the user's cache folder."""
    import shutil as real_shutil

    copy = store / "tools" / "stm.py"
    copy.parent.mkdir()
    real_shutil.copy(stm.__file__, copy)
    monkeypatch.setattr(stm, "__file__", str(copy))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    data = json.loads(run("setup", "claude").out)
    command = data["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    env = {**os.environ, "CLAUDE_PROJECT_DIR": str(store), "HOME": str(tmp_path / "home")}
    env.pop("XDG_CACHE_HOME", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # write bytecode, as on a user's machine
    done = run_process(["bash", "-c", command], cwd=store, full_env=env)
    assert done.returncode == 0, done.stderr
    assert "## Identity" in done.stdout
    assert not list(store.rglob("__pycache__"))
    assert list((tmp_path / "home" / ".cache" / "stm").rglob("*.pyc"))  # cached there


# ---- setup agents-md ----------------------------------------------------------------


def test_setup_agents_md_block_is_short_and_marked(store, run, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/local/bin/{name}")
    block = run("setup", "agents-md").out
    lines = block.strip().splitlines()
    assert lines[0] == stm.AGENTS_BEGIN and lines[-1] == stm.AGENTS_END
    assert len(lines) - 2 <= 10
    assert "stm boot" in block and "stm log" in block and "stm note" in block


def test_setup_agents_md_install_and_remove_restore_the_file(store, run, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/local/bin/{name}")
    path = store / "CLAUDE.md"
    original = "# Project rules\n\nUse tabs.\n"
    path.write_text(original)
    assert run("setup", "agents-md", "--install", "--file", str(path)).code == 0
    text = path.read_text()
    assert text.startswith(original) and text.endswith(stm.AGENTS_BLOCK)
    assert run("setup", "agents-md", "--install", "--file", str(path)).out.startswith("already")
    assert path.read_text() == text
    assert run("setup", "agents-md", "--remove", "--file", str(path)).code == 0
    assert path.read_text() == original


def test_setup_agents_md_default_file_is_created_and_removed(store, run, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/local/bin/{name}")
    assert run("setup", "agents-md", "--install").code == 0
    assert (store / "AGENTS.md").read_text() == stm.AGENTS_BLOCK
    assert run("setup", "agents-md", "--remove").code == 0
    assert not (store / "AGENTS.md").exists()


def test_setup_agents_md_names_the_copied_stm_py_when_stm_is_not_installed(store, run, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(stm, "__file__", str(store / "tools" / "stm.py"))  # copied in
    result = run("setup", "agents-md")
    assert result.out == stm.agents_block("python3 tools/stm.py")
    assert "run `python3 tools/stm.py boot`" in result.out and result.err == ""


def test_setup_agents_md_warns_when_stm_cannot_be_named(store, run, monkeypatch, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # outside the project
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(stm, "__file__", str(elsewhere / "stm.py"))
    result = run("setup", "agents-md")
    assert result.out == stm.AGENTS_BLOCK
    assert "not installed" in result.err and "--command" in result.err


def test_setup_agents_md_command_updates_the_block_in_place(store, run):
    path = store / "AGENTS.md"
    path.write_text("# Rules\n")
    assert run("setup", "agents-md", "--install", "--command", "stm").code == 0
    with_stm = path.read_text()
    result = run("setup", "agents-md", "--install", "--command", "python3 bin/stm.py")
    assert result.code == 0
    assert path.read_text() == "# Rules\n\n" + stm.agents_block("python3 bin/stm.py")
    assert with_stm == "# Rules\n\n" + stm.AGENTS_BLOCK
    assert run("setup", "agents-md", "--remove").code == 0
    assert path.read_text() == "# Rules\n"


# ---- pre-commit ---------------------------------------------------------------------


def test_pre_commit_manifest_declares_stm_check():
    text = (ROOT / ".pre-commit-hooks.yaml").read_text()
    assert re.search(r"^- id: stm-check$", text, re.M)
    assert re.search(r"^  entry: stm check --staged$", text, re.M)  # CI runs the full check
    assert re.search(r"^  language: python$", text, re.M)
    assert re.search(r"^  pass_filenames: false$", text, re.M)
    readme = (ROOT / "README.md").read_text()
    assert "id: stm-check" in readme and "entry: python3 stm.py check --staged" in readme


# ---- export / import ----------------------------------------------------------------


def test_export_import_round_trip(store, run, tmp_path_factory):
    sid = run("session", "new", "--name", "travel").out.strip()
    run("log", "before the trip")
    archive = tmp_path_factory.mktemp("out") / "memory.zip"
    assert run("export", "-o", str(archive)).code == 0
    names = zipfile.ZipFile(archive).namelist()
    assert ".stacks/AGENT.md" in names and not any(n.startswith(".state/") for n in names)
    assert run("export", "-o", str(archive), "--include-state").code == 0
    names = zipfile.ZipFile(archive).namelist()
    assert f".state/sessions/{sid}/state.json" in names
    assert ".state/current-session.json" not in names and ".stacks/.stm.lock" not in names
    target = tmp_path_factory.mktemp("elsewhere")
    os.chdir(target)
    result = run("import", str(archive))
    assert result.code == 0 and "created" in result.out
    for name in names:
        assert (target / name).read_bytes() == (store / name).read_bytes()
    assert run("check").code == 0
    again = run("import", str(archive))
    assert again.code == 0  # nothing created the second time; the summary says so
    assert not any(line.startswith("created") for line in again.out.splitlines())
    assert again.out.splitlines()[-1].startswith("import: ") and " 0 new," in again.out


def test_import_never_overwrites_a_different_file_without_force(store, run, tmp_path):
    archive = tmp_path / "m.zip"
    run("export", "-o", str(archive))
    memory_path = store / ".stacks" / "MEMORY.md"
    memory_path.write_text("# Session Memory\n\nchanged locally\n")
    before = snapshot(store)
    dry = run("import", str(archive), "--dry-run")
    assert dry.code == 0 and "would replace .stacks/MEMORY.md" in dry.out
    assert snapshot(store) == before
    refused = run("import", str(archive))
    assert refused.code == 1 and ".stacks/MEMORY.md" in refused.err and "--force" in refused.err
    assert snapshot(store) == before
    forced = run("import", str(archive), "--force")
    assert forced.code == 0
    backups = list((store / ".stacks").glob(".MEMORY.md.*.bak"))  # hidden: never indexed
    assert [b.read_text() for b in backups] == ["# Session Memory\n\nchanged locally\n"]
    assert "Parser port half done" in memory_path.read_text()


def evil_zip(path, name, data=b"x", symlink=False, compress=True):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as zf:
        zf.writestr(".stacks/refs/fine.md", "# Fine\n")
        info = zipfile.ZipInfo(name)
        if symlink:
            info.external_attr = 0o120777 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, data)


@pytest.mark.parametrize(
    "name,symlink,code",
    [
        ("../escape.md", False, 2),
        (".stacks/../../escape.md", False, 2),
        ("/etc/escape.md", False, 2),
        ("C:/escape.md", False, 2),
        (".stacks\\..\\escape.md", False, 2),
        ("notes/escape.md", False, 2),
        (".git/config", False, 2),
        (".stacks/.git/config", False, 2),
        (".stacks/refs/link.md", True, 2),
    ],
)
def test_import_refuses_unsafe_entries_and_writes_nothing(
    store, run, tmp_path, name, symlink, code
):
    archive = tmp_path / "evil.zip"
    evil_zip(archive, name, symlink=symlink)
    before = snapshot(store)
    outside = snapshot(store.parent)
    result = run("import", str(archive))
    assert result.code == code, result
    assert "unsafe entry" in result.err
    assert snapshot(store) == before and snapshot(store.parent) == outside


def test_import_refuses_a_zip_bomb(store, run, tmp_path):
    archive = tmp_path / "bomb.zip"
    evil_zip(archive, ".stacks/refs/bomb.md", data=b"0" * (20 * 1024 * 1024))
    before = snapshot(store)
    result = run("import", str(archive))
    assert result.code == 1 and "zip bomb" in result.err
    assert snapshot(store) == before


def test_import_leaves_out_a_session_pointer(store, run, tmp_path):
    sid = run("session", "new").out.strip()
    pointer = store / ".state" / "current-session.json"
    mine = pointer.read_bytes()
    archive = tmp_path / "with-pointer.zip"
    foreign = b'{"active_session": "2026-01-01-deadbeef", "updated_at": "2026-01-01T00:00:00Z"}'
    evil_zip(archive, ".state/current-session.json", data=foreign)
    result = run("import", str(archive), "--json")
    assert result.code == 0
    data = json.loads(result.out)
    assert data["files"] == [{"action": "create", "path": ".stacks/refs/fine.md"}]
    assert data["skipped"] == [".state/current-session.json"]
    assert "left out .state/current-session.json" in result.err
    assert pointer.read_bytes() == mine and stm.read_pointer(stm.Store(".stacks", ".state")) == sid


def test_import_refuses_what_is_not_a_zip(store, run, tmp_path):
    (tmp_path / "x.zip").write_text("not a zip")
    result = run("import", str(tmp_path / "x.zip"))
    assert result.code == 1 and "not a zip" in result.err


# ---- commit -------------------------------------------------------------------------

GIT_ENV = {**GIT_IDENTITY, **GIT_PRIVATE_CONFIG}
git = git_out


@pytest.mark.git
def test_commit_takes_only_memory_and_leaves_other_changes_alone(store, run, monkeypatch):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    git(store, "init", "-q")
    (store / "app.py").write_text("print(1)\n")
    (store / "notes.txt").write_text("draft\n")
    git(store, "add", "app.py", "notes.txt")
    git(store, "commit", "-qm", "base")
    (store / "app.py").write_text("print(2)\n")
    git(store, "add", "app.py")  # an unrelated staged change
    (store / "notes.txt").write_text("edited, not staged\n")  # an unstaged change
    staged_before = git(store, "diff", "--cached", "--", "app.py")
    result = run("commit", "-m", "memory: first")
    assert result.code == 0, result
    files = git(store, "show", "--name-only", "--format=", "HEAD").split()
    assert files and all(f.startswith((".stacks/", ".state/")) for f in files)
    assert ".state/current-session.json" not in files
    assert git(store, "diff", "--cached", "--", "app.py") == staged_before
    assert git(store, "diff", "--", "notes.txt") != ""
    assert git(store, "log", "-1", "--format=%s") == "memory: first\n"
    again = run("commit")
    assert again.code == 0 and "nothing to commit" in again.out
    (store / ".stacks" / "refs" / "new.md").write_text("# New\n")
    data = json.loads(run("commit", "--json").out)
    assert set(data) == documented_keys()["commit"]
    assert data["committed"] is True and data["commit"] == git(store, "rev-parse", "HEAD").strip()


@pytest.mark.git
def test_commit_leaves_stm_s_own_backups_in_the_checkout(store, run, monkeypatch, tmp_path):
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    git(store, "init", "-q")
    assert run("init", "--force").code == 0  # keeps AGENT.md and MEMORY.md as .bak
    backups = sorted(p.name for p in (store / ".stacks").glob("*.bak"))
    assert len(backups) == 2, backups
    archive = tmp_path / "memory.zip"
    assert run("export", "-o", str(archive)).code == 0
    (store / ".stacks" / "MEMORY.md").write_text("# Memory\n\n## Status\n\nchanged\n")
    assert run("import", str(archive), "--force").code == 0  # one more hidden .bak
    assert run("commit", "-m", "memory").code == 0
    files = git(store, "show", "--name-only", "--format=", "HEAD").split()
    assert ".stacks/MEMORY.md" in files
    assert not [f for f in files if f.endswith(".bak")], files
    assert "git-ignore" not in run("check").out  # the ignore lines init writes are there


def test_commit_with_a_message_in_several_words_unquoted_is_a_usage_error(store, run):
    result = run("commit", "-m", "fixed", "the", "parser")
    assert result.code == 2 and "Traceback" not in result.err
    assert "unrecognized arguments: the parser" in result.err
    assert "quote" in result.err  # the fix: -m "fixed the parser"
    flagged = run("commit", "-m", "fixed", "--bogus")
    assert flagged.code == 2 and "unrecognized arguments: --bogus" in flagged.err
    assert "quote" not in flagged.err  # a mistyped flag, not a message in pieces


def test_commit_outside_a_git_repository(store, run):
    result = run("commit")
    assert result.code == 1 and "not inside a git repository" in result.err


def test_commit_without_git(store, run, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    result = run("commit")
    assert result.code == 1 and "git is not installed" in result.err


def test_note_replace_on_a_terminal_without_text_is_a_usage_error(store, run, monkeypatch):
    class Tty:
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdin", Tty())
    before = snapshot(store)
    result = run("note", "Status", "--replace")
    assert result.code == 2 and "--replace needs TEXT" in result.err
    assert snapshot(store) == before


def test_the_spec_shows_the_agents_block_as_stm_writes_it():
    spec = (ROOT / "spec" / "integration.md").read_text(encoding="utf-8")
    assert "```markdown\n" + stm.AGENTS_BLOCK + "```" in spec
