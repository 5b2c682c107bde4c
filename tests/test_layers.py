"""The four .stacks/ layers: init, boot, log, check, status (spec/memory-layers.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
from conftest import ROOT, STM_PY, TODAY, all_command_paths, snapshot
from helpers import run_stm

import stm

# ---- templates and packaging ------------------------------------------------


@pytest.mark.parametrize("name", sorted(stm.TEMPLATES))
def test_templates_folder_matches_embedded_text(name):
    assert (ROOT / "templates" / name).read_text(encoding="utf-8") == stm.TEMPLATES[name]


def test_templates_folder_has_no_other_files():
    assert sorted(p.name for p in (ROOT / "templates").iterdir()) == sorted(stm.TEMPLATES)


def test_version_flag(run):
    result = run("--version")
    assert result.code == 0
    assert result.out.strip() == f"stm {stm.__version__}"


@pytest.mark.parametrize("path", all_command_paths(), ids=" ".join)
def test_every_command_has_help_with_an_example(run, path):
    result = run(*path, "--help")
    assert result.code == 0
    assert "example" in result.out
    assert "stm " in result.out.split("example", 1)[1]


def test_no_command_prints_help_and_exits_2(run):
    result = run()
    assert result.code == 2
    assert "usage: stm" in result.err


def test_unknown_flag_is_a_usage_error(run, store):
    result = run("boot", "--bogus")
    assert result.code == 2
    assert "--bogus" in result.err


@pytest.mark.parametrize(
    "argv,prog,message",
    [
        (("boot", "--max-tokens", "abc"), "stm boot", "argument --max-tokens: invalid int"),
        (("session", "new", "--bogus"), "stm session new", "unrecognized arguments: --bogus"),
        (("session", "switch"), "stm session switch", "the following arguments are required"),
        (("frobnicate",), "stm", "argument COMMAND: invalid choice: 'frobnicate'"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_command_and_its_help(run, store, argv, prog, message):
    before = snapshot(store)
    result = run(*argv)
    assert result.code == 2
    assert result.err.startswith(f"stm: error: {message}")  # one prefix for every error
    assert result.err.count("\n") == 1
    assert result.err.endswith(f"; see `{prog} --help`\n")
    assert snapshot(store) == before


# ---- init -------------------------------------------------------------------


def test_init_creates_the_four_layers_and_git_files(project, run):
    result = run("init")
    assert result.code == 0
    stacks = project / ".stacks"
    assert (stacks / "AGENT.md").read_text() == stm.AGENT_TEMPLATE
    assert (stacks / "MEMORY.md").read_text() == stm.MEMORY_TEMPLATE
    assert (stacks / "refs" / ".gitkeep").exists()
    assert (stacks / "logs" / ".gitkeep").exists()
    assert "logs/*.md merge=union" in (stacks / ".gitattributes").read_text()
    ignore = (stacks / ".gitignore").read_text().split()
    assert ".stm.lock" in ignore and "*.tmp" in ignore
    state = project / ".state"
    assert "current-session.json" in (state / ".gitignore").read_text()
    assert "history.jsonl merge=union" in (state / ".gitattributes").read_text()
    assert "YYYY-MM-DD-xxxxxxxx" in (state / "README.md").read_text()
    assert (state / "sessions" / ".gitkeep").exists()
    assert "created  .stacks/AGENT.md" in result.out
    assert "Next:" in result.out and "stm boot" in result.out


def test_init_is_idempotent_and_leaves_files_untouched(project, run):
    run("init")
    (project / ".stacks" / "AGENT.md").write_text("# Me\n\nmine\n")
    before = snapshot(project)
    result = run("init")
    assert result.code == 0
    assert "kept     .stacks/AGENT.md  (exists; left untouched)" in result.out
    assert snapshot(project) == before


def test_init_that_fails_part_way_is_completed_by_running_it_again(project, run, monkeypatch):
    real_atomic_write = stm.atomic_write

    def disk_full_at_memory(path, data, *args, **kwargs):
        if path.endswith("MEMORY.md"):
            raise OSError(28, "No space left on device", path)
        return real_atomic_write(path, data, *args, **kwargs)

    monkeypatch.setattr(stm, "atomic_write", disk_full_at_memory)
    failed = run("init")
    assert failed.code == 1
    assert (
        failed.err == f"stm: error: {project / '.stacks' / 'MEMORY.md'}: No space left on device\n"
    )
    assert (project / ".stacks" / "AGENT.md").read_text() == stm.AGENT_TEMPLATE  # complete
    assert not (project / ".stacks" / "MEMORY.md").exists()
    assert [p.name for p in (project / ".stacks").iterdir() if p.name.endswith(".tmp")] == []

    monkeypatch.setattr(stm, "atomic_write", real_atomic_write)
    again = run("init")
    assert again.code == 0
    assert "kept     .stacks/AGENT.md" in again.out and "created  .stacks/MEMORY.md" in again.out
    assert (project / ".stacks" / "MEMORY.md").read_text() == stm.MEMORY_TEMPLATE
    assert (project / ".state" / "history" / ".gitkeep").exists()


def test_init_force_rewrites_templates_and_keeps_a_backup(project, run):
    run("init")
    (project / ".stacks" / "AGENT.md").write_text("# Me\n\nhand-written identity\n")
    result = run("init", "--force")
    assert result.code == 0
    assert (project / ".stacks" / "AGENT.md").read_text() == stm.AGENT_TEMPLATE
    backups = list((project / ".stacks").glob("AGENT.md.*.bak"))
    assert len(backups) == 1
    assert backups[0].read_text() == "# Me\n\nhand-written identity\n"
    assert "rewrote  .stacks/AGENT.md" in result.out
    # An unchanged template needs no backup.
    assert not list((project / ".stacks").glob("MEMORY.md.*.bak"))


def test_init_force_twice_never_overwrites_an_earlier_backup(project, run):
    run("init")
    for text in ("first\n", "second\n"):
        (project / ".stacks" / "AGENT.md").write_text(text)
        assert run("init", "--force").code == 0
    contents = sorted(p.read_text() for p in (project / ".stacks").glob("AGENT.md.*.bak"))
    assert contents == ["first\n", "second\n"]


def test_init_with_dir_creates_that_directory(project, run):
    assert run("init", "--dir", "mem/.stacks").code == 0
    assert (project / "mem" / ".stacks" / "AGENT.md").exists()
    assert (project / "mem" / ".state" / "README.md").exists()


def test_stm_py_copied_alone_into_an_empty_folder_works(tmp_path):
    shutil.copy(STM_PY, tmp_path / "stm.py")
    env = {"STM_FSYNC": "0"}
    init = run_stm("init", cwd=tmp_path, env=env)
    assert init.returncode == 0, init.stderr
    # The copy, not the checkout, must have done the work.
    run_stm("log", "first", script="stm.py", cwd=tmp_path, check=True)
    boot = run_stm("boot", script="stm.py", cwd=tmp_path)
    assert boot.returncode == 0
    assert boot.stdout.startswith("# stm memory boot")
    assert list((tmp_path / ".stacks" / "logs").glob("*.md"))


# ---- finding the store ------------------------------------------------------


def test_commands_find_stacks_from_a_subdirectory(store, run, monkeypatch):
    deep = store / "src" / "pkg"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    result = run("boot")
    assert result.code == 0
    assert "Maintainer of the parser project" in result.out
    assert run("log", "from below").code == 0
    assert list((store / ".stacks" / "logs").glob("*.md"))


def test_global_options_work_before_and_after_the_subcommand(store, run, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    os.chdir(elsewhere)
    before = run("--dir", str(store / ".stacks"), "boot")
    after = run("boot", "--dir", str(store / ".stacks"))
    assert before.code == after.code == 0
    assert "Maintainer of the parser project" in before.out
    assert before.out.splitlines()[1:] == after.out.splitlines()[1:]


def test_missing_stacks_is_a_clear_error(project, run):
    result = run("boot")
    assert result.code == 1
    assert "no .stacks/ directory" in result.err and "stm init" in result.err
    assert "Traceback" not in result.err


def test_dir_that_does_not_exist_is_a_clear_error(project, run):
    result = run("check", "--dir", "nope")
    assert result.code == 1
    assert "--dir nope" in result.err
    assert not (project / "nope").exists()


# ---- boot -------------------------------------------------------------------


def write_ref(store, name, text):
    path = store / ".stacks" / "refs" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_boot_prints_sections_in_order_with_a_header(store, run):
    write_ref(store, "deploy.md", "# Deploy\n\nHow releases ship.\n\nSECRET BODY TEXT\n")
    run("session", "new", "--name", "port parser")
    run("log", "LOGGED LINE")
    result = run("boot")
    assert result.code == 0
    first = result.out.splitlines()[0]
    assert re.match(
        r"^# stm memory boot · generated \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ · ~\d+ tokens"
        r"( · memory updated \d{4}-\d\d-\d\d, \d+ (minute|hour|day)s? ago; "
        r"\d+\+? log entr(y|ies) since)?$",
        first,
    )
    headings = [line for line in result.out.splitlines() if line.startswith("## ")]
    assert [h.split(" (")[0] for h in headings] == [  # what an agent must act on first
        "## Identity",
        "## Active workflow",
        "## Session memory",
        "## Reference index",
    ]
    assert "- refs/deploy.md — Deploy: How releases ship." in result.out
    assert "SECRET BODY TEXT" not in result.out  # refs are indexed, never loaded
    assert "LOGGED LINE" not in result.out  # logs are never loaded at boot


def test_boot_token_estimate_is_characters_over_four(store, run):
    out = run("boot").out
    claimed = int(re.search(r"~(\d+) tokens", out.splitlines()[0]).group(1))
    assert claimed == (len(out) + 3) // 4


def test_boot_drops_html_comments_and_demotes_layer_headings(project, run):
    run("init")
    (project / ".stacks" / "AGENT.md").write_text(
        "# Me\n<!-- guidance\nover lines -->\n## Role\nbuilder\n```\n# not a heading\n```\n"
    )
    out = run("boot").out
    assert "guidance" not in out and "<!--" not in out
    assert "### Me" in out and "#### Role" in out
    assert "\n# not a heading\n" in out  # code fences are left alone


def test_ref_summary_comes_from_front_matter_then_first_paragraph(store, run):
    write_ref(store, "a.md", "---\ndescription: From front matter\n---\n# Alpha\n\nParagraph.\n")
    write_ref(store, "b.md", "# Beta\n\n<!-- note -->\nFirst paragraph line.\nSecond.\n")
    write_ref(store, "sub/c.md", "# Gamma\n")
    out = run("boot").out
    assert "- refs/a.md — Alpha: From front matter" in out
    assert "- refs/b.md — Beta: First paragraph line." in out
    assert "- refs/sub/c.md — Gamma\n" in out


def test_boot_no_refs_leaves_the_index_out(store, run):
    write_ref(store, "deploy.md", "# Deploy\n")
    result = run("boot", "--no-refs")
    assert result.code == 0
    assert "Reference index" not in result.out
    assert "Identity" in result.out


def many_refs(store, count=60):
    for n in range(count):
        write_ref(store, f"r{n:02}.md", f"# Ref {n}\n\n{'A long summary sentence. ' * 5}\n")


def test_boot_over_default_budget_prints_everything_and_warns(store, run):
    many_refs(store, 120)
    result = run("boot")
    assert result.code == 0
    assert "over the 2000-token budget" in result.err
    assert "A long summary sentence." in result.out  # nothing was cut
    assert result.out.count("- refs/r") == 120


def test_max_tokens_first_shortens_refs_to_titles(store, run):
    many_refs(store, 60)
    full = run("boot").out
    titles_only = (len(full) + 3) // 4 - 200
    result = run("boot", "--max-tokens", str(titles_only))
    assert result.code == 0
    assert "- refs/r00.md — Ref 0\n" in result.out
    assert "A long summary sentence." not in result.out
    assert "shortened to titles" in result.err
    assert (len(result.out) + 3) // 4 <= titles_only


def test_max_tokens_then_drops_the_refs_index(store, run):
    many_refs(store, 60)
    result = run("boot", "--max-tokens", "250")
    assert result.code == 0
    assert "Reference index" not in result.out
    assert "refs index left out" in result.err
    assert "Maintainer of the parser project" in result.out


def test_max_tokens_bounds_the_output_even_below_identity(store, run):
    """--max-tokens is a bound (the resume-from-anywhere issue; before it, identity and
    session memory were never cut and the output could exceed the limit)."""
    for limit in (10, 60, 120):
        result = run("boot", "--max-tokens", str(limit))
        assert result.code == 0
        assert (len(result.out) + 3) // 4 <= limit
        assert "to fit --max-tokens" in result.err


@pytest.mark.parametrize("value", ["0", "-5"])
def test_max_tokens_must_be_positive(store, run, value):
    result = run("boot", "--max-tokens", value)
    assert result.code == 2
    assert "--max-tokens" in result.err


def test_boot_output_file_is_written_instead_of_stdout(store, run):
    result = run("boot", "-o", "boot.md")
    assert result.code == 0
    assert result.out == ""
    text = (store / "boot.md").read_text()
    assert text.startswith("# stm memory boot")
    assert "Maintainer of the parser project" in text
    assert not [p for p in os.listdir(store) if p.endswith(".tmp")]


def test_boot_output_to_a_directory_is_refused(store, run):
    (store / "adir").mkdir()
    before = snapshot(store)
    result = run("boot", "-o", "adir")
    assert result.code == 2
    assert "-o adir is a directory" in result.err
    assert snapshot(store) == before


def test_boot_output_into_a_missing_folder_is_refused(store, run):
    result = run("boot", "-o", "no/such/boot.md")
    assert result.code == 1
    assert "does not exist" in result.err


def test_boot_with_missing_identity_still_boots_and_warns(store, run):
    (store / ".stacks" / "AGENT.md").unlink()
    result = run("boot")
    assert result.code == 0
    assert "AGENT.md is missing" in result.err
    assert "Parser port half done" in result.out


def test_boot_json_has_sections_with_token_estimates(store, run):
    write_ref(store, "deploy.md", "# Deploy\n\nHow releases ship.\n")
    data = json.loads(run("boot", "--json").out)
    assert data["schema_version"] == 1
    assert data["tokens"] == (len(data["text"]) + 3) // 4
    assert data["sections"]["identity"]["tokens"] > 0
    assert data["sections"]["workflow"] is None
    assert data["sections"]["refs"] == [
        {"path": "refs/deploy.md", "title": "Deploy", "summary": "How releases ship."}
    ]


# ---- log --------------------------------------------------------------------

ENTRY_RE = re.compile(
    r"^## (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) · (.+) <!-- stm:entry ([0-9a-f]{8}) -->$", re.M
)


def today_log(store):
    logs = sorted((store / ".stacks" / "logs").glob("*.md"))
    assert len(logs) == 1
    return logs[0]


def test_log_appends_an_entry_with_utc_time_and_author(store, run, monkeypatch):
    monkeypatch.setenv("STM_USER", "Alice Smith")
    assert run("log", "fixed", "the", "parser").code == 0
    path = today_log(store)
    text = path.read_text()
    match = ENTRY_RE.search(text)
    assert match and match.group(2) == "Alice Smith"
    assert path.name == match.group(1)[:10] + ".md"
    assert "\n\nfixed the parser\n\n" in text
    assert text.endswith(f"<!-- stm:end {match.group(3)} -->\n")


def test_log_author_defaults_to_the_login_name(store, run):
    run("log", "x")
    assert ENTRY_RE.search(today_log(store).read_text()).group(2) == "tester"


def test_log_twice_appends_without_rewriting(store, run):
    run("log", "one")
    path = today_log(store)
    first = path.read_bytes()
    run("log", "two")
    assert path.read_bytes().startswith(first)
    assert len(ENTRY_RE.findall(path.read_text())) == 2


def test_log_reads_a_multi_line_entry_from_stdin(store, run):
    result = run("log", "-", stdin="### Summary\nline one\n\n### Next\nline two\n")
    assert result.code == 0
    assert "### Summary\nline one\n\n### Next\nline two\n" in today_log(store).read_text()


def test_log_template_prints_the_session_log_template(run):
    result = run("log", "--template")
    assert result.code == 0
    assert result.out == stm.SESSION_LOG_TEMPLATE


def test_log_of_an_unfilled_template_is_refused(store, run):
    before = snapshot(store)
    result = run("log", "-", stdin=stm.SESSION_LOG_TEMPLATE)
    assert result.code == 2 and "no text of its own" in result.err
    assert snapshot(store) == before


def test_log_drops_the_template_guidance_and_keeps_what_was_written(store, run):
    filled = stm.SESSION_LOG_TEMPLATE.replace(
        "<!-- One or two lines: what this session did. -->", "Ported the lexer."
    )
    assert run("log", "-", stdin=filled).code == 0
    text = today_log(store).read_text()
    assert "### Summary\nPorted the lexer.\n\n### Done\n" in text
    assert "<!-- What was finished" not in text  # guidance would match every search
    assert run("search", "commits", "--layer", "logs").code == 1


@pytest.mark.parametrize("args,stdin", [(("",), None), (("   ",), None), (("-",), "\n\n  \n")])
def test_empty_log_message_is_refused_and_writes_nothing(store, run, args, stdin):
    before = snapshot(store)
    result = run("log", *args, stdin=stdin)
    assert result.code == 2
    assert "empty" in result.err
    assert snapshot(store) == before


def test_log_without_message_is_a_usage_error(store, run):
    result = run("log")
    assert result.code == 2
    assert "MESSAGE" in result.err


SECRETS = {
    "GitHub token": "ghp_" + "a" * 36,
    "AWS access key id": "AKIA" + "ABCDEFGHIJKLMNOP",
    "OpenAI-style API key": "sk-" + "x1" * 12,
    "Slack token": "xoxb-" + "1234567890-abc",
    "private key block": "-----BEGIN RSA PRIVATE KEY-----",
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_log_refuses_text_that_looks_like_a_secret(store, run, kind):
    before = snapshot(store)
    result = run("log", f"token is {SECRETS[kind]}")
    assert result.code == 1
    assert kind in result.err and "--allow-secret" in result.err
    assert SECRETS[kind] not in result.err  # the secret itself is not echoed
    assert snapshot(store) == before


def test_log_allow_secret_writes_it(store, run):
    assert run("log", "--allow-secret", "key " + SECRETS["GitHub token"]).code == 0
    assert SECRETS["GitHub token"] in today_log(store).read_text()


def test_log_makes_control_characters_visible(store, run):
    assert run("log", "red \x1b[31mtext\x07").code == 0
    text = today_log(store).read_text()
    assert "\x1b" not in text and "\x07" not in text
    assert "red \\x1b[31mtext\\x07" in text


def test_log_stdin_that_is_not_utf8_is_refused(store, run):
    before = snapshot(store)
    result = run("log", "-", stdin=b"\xff\xfe bad")
    assert result.code == 2
    assert "not UTF-8" in result.err
    assert snapshot(store) == before


def test_log_repairs_a_torn_tail_left_by_a_killed_writer(store, run):
    run("log", "complete entry")
    path = today_log(store)
    good = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b"\n## 2026-11-22T10:00:00Z \xc2\xb7 x <!-- stm:entry 0123abcd -->\n\nhalf")
    result = run("log", "next entry")
    assert result.code == 0
    assert "torn record" in result.err
    text = path.read_text()
    assert text.startswith(good.decode())
    assert "half" not in text
    assert text.count("stm:end") == 2


FRAMING_LOOKALIKE = (
    "pasted from a log:\n"
    "## 2026-11-22T00:00:00Z · eve <!-- stm:entry deadbeef -->\n"
    "<!-- stm:end deadbeef -->\n"
    "and more"
)


def test_log_message_cannot_carry_framing_lines(store, run):
    assert run("log", FRAMING_LOOKALIKE).code == 0
    path = today_log(store)
    text = path.read_text()
    assert "&lt;!-- stm:entry deadbeef -->" in text and "&lt;!-- stm:end deadbeef -->" in text
    assert text.count("<!-- stm:") == 2  # the entry's own header and end line
    [(kind, entry)] = list(stm.parse_log(path.read_bytes()))
    assert kind == "entry" and entry.complete
    assert "## 2026-11-22T00:00:00Z · eve &lt;!-- stm:entry deadbeef -->" in entry.body

    # Torn right after the pasted end line: still a torn entry, cut by the next log.
    data = path.read_bytes()
    path.write_bytes(data[: data.index(b"&lt;!-- stm:end deadbeef -->\n") + 29])
    assert run("check", "--json").out.count('"log-torn"') == 1
    result = run("log", "after the tear")
    assert "torn record" in result.err
    entries = list(stm.parse_log(path.read_bytes()))
    assert [e.body for _, e in entries] == [["", "after the tear", ""]]
    assert run("check").code == 0


def test_a_torn_entry_before_later_entries_never_swallows_them(store, run):
    """A torn entry that is not the last (an old file with a pasted end line, a bad
    hand merge) stops at the next header: check reports it, and nothing is cut."""
    run("log", "first")
    path = today_log(store)
    later = stm.render_log_entry("later entry", "y", "2026-11-22T11:00:00Z", "4567cdef")
    with open(path, "ab") as f:
        f.write("\n## 2026-11-22T10:00:00Z · x <!-- stm:entry 0123abcd -->\n\nhalf\n".encode())
        f.write(("\n" + later).encode())
    entries = [e for _, e in stm.parse_log(path.read_bytes())]
    assert [e.complete for e in entries] == [True, False, True]
    assert "later entry" in entries[2].body
    _, data, found = check(run)
    torn = next(f for f in data["findings"] if f["rule"] == "log-entry")
    assert "0123abcd has no end line" in torn["message"] and torn["line"] == entries[1].line
    before = path.read_bytes()
    assert run("check", "--fix").code == 1  # a person's call: nothing is cut
    assert path.read_bytes() == before


def test_log_keeps_text_a_person_appended_by_hand(store, run):
    run("log", "complete entry")
    path = today_log(store)
    with open(path, "a") as f:
        f.write("a note typed by hand")
    assert run("log", "next").code == 0
    text = path.read_text()
    assert "a note typed by hand\n" in text
    assert text.count("stm:end") == 2


# ---- check ------------------------------------------------------------------


def check(run, *extra):
    result = run("check", "--json", *extra)
    data = json.loads(result.out)
    return result.code, data, {(f["rule"], f["path"]) for f in data["findings"]}


def test_check_passes_on_a_filled_store(store, run):
    result = run("check")
    assert result.code == 0
    assert "check ok: 0 errors, 0 warnings" in result.out


def test_a_fresh_template_store_warns_and_strict_fails(project, run):
    """Unfilled templates are warnings in check, as in status (the agent-UX issue): the
    README's `init` then `check` works; `--strict` still insists they are filled in."""
    run("init")
    code, data, found = check(run)
    assert code == 0
    assert ("identity-template", ".stacks/AGENT.md") in found
    assert ("session-template", ".stacks/MEMORY.md") in found
    assert data["counts"] == {"error": 0, "warning": 2, "notice": 0}
    assert run("check", "--strict").code == 1


@pytest.mark.parametrize("victim", ["AGENT.md", "MEMORY.md", "refs", "logs"])
def test_check_layer_missing(store, run, victim):
    path = store / ".stacks" / victim
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    code, data, found = check(run)
    assert code == 1
    assert ("layer-missing", f".stacks/{victim}") in found


def test_check_ref_rules(store, run):
    write_ref(store, "empty.md", "  \n")
    write_ref(store, "untitled.md", "no heading here\n")
    write_ref(store, "fine.md", "# Fine\n")
    code, _, found = check(run)
    assert code == 1
    assert ("ref-empty", ".stacks/refs/empty.md") in found
    assert ("ref-title", ".stacks/refs/untitled.md") in found
    assert not {f for f in found if f[1] == ".stacks/refs/fine.md"}


def test_check_log_name_rule(store, run):
    (store / ".stacks" / "logs" / "notes.md").write_text("x\n")
    (store / ".stacks" / "logs" / "2026-13-45.md").write_text("")
    code, _, found = check(run)
    assert code == 1
    assert ("log-name", ".stacks/logs/notes.md") in found
    assert ("log-name", ".stacks/logs/2026-13-45.md") in found


def test_check_log_entry_rule_reports_text_outside_entries(store, run):
    run("log", "good")
    path = today_log(store)
    with open(path, "a") as f:
        f.write("\nhand-typed line\n")
    result = run("check")
    assert result.code == 1
    assert re.search(r"error\s+log-entry\s+\.stacks/logs/\S+\.md:\d+: text outside", result.out)


def test_check_log_torn_is_a_warning_and_strict_fails(store, run):
    run("log", "good")
    with open(today_log(store), "a") as f:
        f.write("\n## 2026-11-22T10:00:00Z · x <!-- stm:entry 0123abcd -->\n\nhalf\n")
    code, data, found = check(run)
    assert code == 0
    assert data["counts"] == {"error": 0, "warning": 1, "notice": 0}
    assert ("log-torn", f".stacks/logs/{today_log(store).name}") in found
    code, data, _ = check(run, "--strict")
    assert code == 1 and data["strict"] is True


def test_check_boot_budget_warning(store, run):
    (store / ".stacks" / "MEMORY.md").write_text(MEMORY_BIG)
    code, _, found = check(run)
    assert code == 0
    assert ("boot-budget", ".stacks") in found
    assert check(run, "--strict")[0] == 1


MEMORY_BIG = "# Session Memory\n\n## Status\n\n" + "A line of real status text.\n" * 400


def test_check_secret_rule_names_file_and_line(store, run):
    (store / ".stacks" / "MEMORY.md").write_text(
        "# Session Memory\n\n## Status\n\nkey: " + SECRETS["AWS access key id"] + "\n"
    )
    result = run("check")
    assert result.code == 1
    assert re.search(r"error\s+secret\s+\.stacks/MEMORY\.md:5: looks like an AWS", result.out)
    assert SECRETS["AWS access key id"] not in result.out


def test_check_secret_in_log_and_ref(store, run):
    # written by hand: `log --allow-secret` marks the line as no secret (test_secrets.py)
    run("log", "a first entry")
    with today_log(store).open("a") as log:
        log.write("oops " + SECRETS["Slack token"] + "\n")
    write_ref(store, "k.md", "# K\n\n" + SECRETS["private key block"] + "\n")
    _, _, found = check(run)
    assert ("secret", ".stacks/refs/k.md") in found
    assert ("secret", f".stacks/logs/{today_log(store).name}") in found


def test_check_git_files_rules_and_fix(store, run):
    stacks_attributes = store / ".stacks" / ".gitattributes"
    state_ignore = store / ".state" / ".gitignore"
    stacks_attributes.unlink()
    state_ignore.write_text("# mine\nscratch/\ncurrent-session.json\n")
    code, data, found = check(run)
    assert code == 0 and data["counts"] == {"error": 0, "warning": 2, "notice": 0}
    assert found == {
        ("git-attributes", ".stacks/.gitattributes"),
        ("git-ignore", ".state/.gitignore"),
    }
    messages = {f["rule"]: f["message"] for f in data["findings"]}
    assert "`logs/*.md merge=union eol=lf`" in messages["git-attributes"]
    assert "`.stm.lock`, `*.tmp`" in messages["git-ignore"]
    assert "current-session.json" not in messages["git-ignore"]  # present: not asked for
    assert check(run, "--strict")[0] == 1

    before = snapshot(store)
    assert "would fix git-ignore" in run("check", "--fix", "--dry-run").out
    assert snapshot(store) == before

    assert run("check", "--fix").code == 0
    assert stacks_attributes.read_text() == stm.STACKS_GITATTRIBUTES  # recreated whole
    assert state_ignore.read_text() == (
        "# mine\nscratch/\ncurrent-session.json\n"
        "# When this checkout last booted (its time is the file's): "
        "`stm digest --since last-boot`.\n.last-boot\n"
        "# Which agent-client session this checkout's hooks saw last, and when each hook "
        "ran.\n.hooks.json\n"
        "# What this checkout's last `stm sync` received, and its memory writes since a "
        "checkpoint.\n.last-sync.json\n.writes\n"
        "# An import under way: only a killed one leaves it (`stm check` says how to "
        "finish).\n.import.json\n"
        "# stm's lock and temp files are never committed.\n.stm.lock\n*.tmp\n"
        "# The backups `import --force` keeps stay in this checkout.\n*.bak\n"
    )
    assert run("check", "--strict").code == 0


def test_check_git_files_accept_equivalent_lines(store, run):
    merge_lines = "MEMORY.md merge=stm\nAGENT.md merge=stm\n/refs/*.md merge=stm\n"
    merge_lines += "refs/**/*.md   merge=stm\n"
    (store / ".stacks" / ".gitattributes").write_text(
        "/logs/*.md  -diff eol=lf merge=union\n" + merge_lines
    )
    (store / ".stacks" / ".gitignore").write_text("/.stm.lock\n*.tmp\n/*.bak\n")
    assert run("check", "--strict").code == 0
    for lacking in ("logs/*.md -diff eol=lf\n", "logs/*.md merge=union\n"):  # no union; CRLF
        (store / ".stacks" / ".gitattributes").write_text(lacking)
        _, _, found = check(run)
        assert found == {("git-attributes", ".stacks/.gitattributes")}


def test_check_git_file_that_is_a_symlink_is_reported_not_followed(store, run, tmp_path):
    outside = tmp_path / "outside-attributes"
    outside.write_text("something else\n")
    attributes = store / ".stacks" / ".gitattributes"
    attributes.unlink()
    attributes.symlink_to(outside)
    _, data, found = check(run)
    assert found == {("git-attributes", ".stacks/.gitattributes")}
    assert "symbolic link" in data["findings"][0]["message"]
    fixed = run("check", "--fix")
    assert fixed.code == 0 and "git-attributes" in fixed.out  # still reported
    assert outside.read_text() == "something else\n" and attributes.is_symlink()


@pytest.mark.git
def test_check_fix_restores_the_union_merge_git_sees(store, run):
    git = shutil.which("git")
    assert git, "the merge tests need git"
    subprocess.run([git, "init", "-q", str(store)], check=True)
    (store / ".stacks" / ".gitattributes").write_text("")
    log = ".stacks/logs/2026-11-22.md"  # date-safe: pinned clock or id

    def attribute(name):
        out = subprocess.run(
            [git, "check-attr", name, "--", log], cwd=store, capture_output=True, text=True
        ).stdout
        return out.strip().rsplit(": ", 1)[-1]

    assert (attribute("merge"), attribute("eol")) == ("unspecified", "unspecified")
    assert run("check", "--fix").code == 0
    assert (attribute("merge"), attribute("eol")) == ("union", "lf")


def test_files_saved_with_crlf_read_as_their_text(store, run):
    """A Windows editor, or a checkout with core.autocrlf, gives CRLF line ends."""
    agent = store / ".stacks" / "AGENT.md"
    agent.write_bytes(agent.read_bytes().replace(b"\n", b"\r\n"))
    run("log", "first entry")
    log = today_log(store)
    log.write_bytes(log.read_bytes().replace(b"\n", b"\r\n"))
    boot = run("boot")
    assert "\\x0d" not in boot.out and "\r" not in boot.out
    assert run("check", "--strict").code == 0  # the entries are intact
    found = run("search", "first entry", "--layer", "logs")
    assert found.out.endswith(": first entry\n")


def test_check_json_findings_have_all_fields(project, run):
    run("init")
    code, data, _ = check(run)
    assert set(data) == {"schema_version", "ok", "strict", "counts", "findings", "fixed"}
    assert data["ok"] is True and data["findings"]  # the template warnings
    for finding in data["findings"]:
        assert set(finding) == {"severity", "rule", "path", "line", "message", "fix"}
        assert finding["severity"] in ("error", "warning")
        assert finding["fix"]


def test_check_passes_on_a_fresh_clone_without_empty_folders(store, run, tmp_path):
    # git drops empty folders; the .gitkeep files keep refs/ and logs/ alive.
    assert (store / ".stacks" / "refs" / ".gitkeep").exists()
    assert run("check").code == 0


# ---- status -----------------------------------------------------------------


def test_status_reports_layers_budget_and_verdict(store, run, monkeypatch):
    at(monkeypatch, "2026-11-22T12:00:00Z")  # the day MEMORY.md says it was updated
    run("log", "one")
    result = run("status")
    assert result.code == 0
    assert re.search(r"identity\s+1\s+\d+\s+\d+", result.out)
    assert "boot: ~" in result.out and "of 2000 tokens" in result.out
    assert "logs: 1 day," in result.out
    assert result.out.rstrip().endswith("verdict: ok")


@pytest.mark.file_times  # a template has no Last Updated: its age is the file's
def test_status_warns_about_layers_that_hold_only_their_templates(project, run):
    run("init")
    data = json.loads(run("status", "--json").out)
    assert data["warnings"] == [
        ".stacks/AGENT.md holds only its template; write who the agent is into it",
        ".stacks/MEMORY.md holds only its template; write where work stands into it",
    ]
    assert data["verdict"] == "2 warnings"
    (project / ".stacks" / "AGENT.md").write_text("# Agent Identity\n\n## Role\n\nParser porter.\n")
    assert len(json.loads(run("status", "--json").out)["warnings"]) == 1


def test_status_json_schema(store, run):
    data = json.loads(run("status", "--json").out)
    assert data["schema_version"] == 1
    assert set(data["layers"]) == {"identity", "session", "refs", "logs"}
    for facts in data["layers"].values():
        assert {"files", "bytes", "tokens"} <= set(facts)
    assert data["boot"]["budget"] == 2000
    assert data["memory"] == {"updated": f"{TODAY}T00:00:00Z", "source": "Last Updated"}
    assert data["verdict"] == "ok"


def at(monkeypatch, text):
    monkeypatch.setattr(stm, "utc_now", lambda: stm.parse_iso(text, need_zone=True))


def days_after_memory(days: float) -> str:
    """A moment `days` after the test memory's Last Updated (TODAY, 00:00 UTC)."""
    return stm.iso(stm.parse_iso(TODAY, date_only_ok=True) + days * 86400)


def test_status_warns_when_memory_is_older_than_seven_days(store, run, monkeypatch):
    at(monkeypatch, days_after_memory(13))
    data = json.loads(run("status", "--json").out)
    assert any("not updated for 13 days" in w for w in data["warnings"])
    assert data["verdict"] == "1 warning"


def test_status_warns_when_the_log_is_newer_than_memory(store, run, monkeypatch):
    at(monkeypatch, days_after_memory(3.5))
    run("log", "later work")
    data = json.loads(run("status", "--json").out)
    assert any("older than the newest log entry" in w for w in data["warnings"])


def test_status_falls_back_to_file_time_without_a_stamp(store, run, monkeypatch):
    path = store / ".stacks" / "MEMORY.md"
    path.write_text("# Session Memory\n\n## Status\n\nBusy.\n")
    old = stm.parse_iso("2026-01-01T00:00:00Z", need_zone=True)
    os.utime(path, (old, old))
    data = json.loads(run("status", "--json").out)
    assert data["memory"]["source"] == "file time"
    assert any("not updated for" in w for w in data["warnings"])


def test_docstring_examples_hold():
    import doctest

    results = doctest.testmod(stm)
    assert results.attempted >= 3
    assert results.failed == 0
