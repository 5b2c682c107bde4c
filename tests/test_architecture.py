"""The architecture's promises: layers and check rules are tables, operations stand
apart from printing, and the in-process API is declared."""

from __future__ import annotations

import json
import re

import pytest
from conftest import MEMORY, ROOT, all_command_paths
from helpers import check_findings, rules

import stm

SPEC_RULE_ROW = re.compile(r"^\| `([a-z][a-z-]+)` \| (error|warning|notice) \|", re.MULTILINE)


def spec_rules() -> dict[str, str]:
    """Every `| `rule` | severity |` row of the spec's rule tables."""
    rules: dict[str, str] = {}
    for path in sorted((ROOT / "spec").glob("*.md")):
        for rule, severity in SPEC_RULE_ROW.findall(path.read_text()):
            assert rules.get(rule, severity) == severity, f"{rule}: two severities in spec"
            rules[rule] = severity
    return rules


def test_the_spec_rule_tables_match_the_rule_registry():
    registry = {rule.id: rule.severity for rule in stm.RULES.values()}
    assert spec_rules() == registry


def test_every_rule_has_fix_advice_and_fixers_are_callables():
    for rule in stm.RULES.values():
        assert rule.fix.strip(), rule.id
        assert rule.fixer is None or callable(rule.fixer)


def spec_fixer_rows() -> list[str]:
    """The rule ids of spec/reliability.md's fixer table (`check --fix` and `--dry-run`),
    in order: a row may name several (`git-attributes`, `git-ignore`)."""
    text = (ROOT / "spec" / "reliability.md").read_text()
    section = text.split("\n## `check --fix` and `--dry-run`\n", 1)[1].split("\n## ", 1)[0]
    table = section.split("| Rule | Repair |\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    ids = []
    for row in table.splitlines():
        assert row.startswith("| `"), row
        ids += re.findall(r"`([a-z][a-z-]+)`", row.split(" | ", 1)[0])
    return ids


def test_the_spec_fixer_table_matches_the_fixers():
    """Every rule `check --fix` repairs has its row in spec/reliability.md, and only
    those: a fixer registered (@fixes) without a row, or a row left behind, fails here."""
    rows = spec_fixer_rows()
    assert len(rows) == len(set(rows)), "a rule in two rows of the fixer table"
    fixed = {rule.id for rule in stm.RULES.values() if rule.fixer is not None}
    assert set(rows) == fixed


@pytest.mark.parametrize("staged", [True, False])
def test_a_new_check_rule_is_one_room(store, run, monkeypatch, staged):
    """What adding a rule costs (the recipe in stm's docstring): a Checker method that
    declares its row, and a fixer that says what it repairs. `run`, `--staged`, `--fix`
    and the finding's severity and advice follow from the registry alone."""
    monkeypatch.setattr(stm, "RULES", dict(stm.RULES))
    monkeypatch.setattr(stm, "CHECK_STEPS", list(stm.CHECK_STEPS))

    @stm.check_step(stm.Rule("shouting", "warning", "write it in lower case"), staged=staged)
    def check_shouting(self):
        text = (store / ".stacks" / "MEMORY.md").read_text()
        for number, line in enumerate(text.splitlines(), 1):
            if line.endswith("!!!"):
                self.report("shouting", self.store.memory_path, "a line shouts", line=number)

    @stm.fixes("shouting")
    def fix_shouting(memory, finding, dry_run):
        if not dry_run:
            text = (store / ".stacks" / "MEMORY.md").read_text().replace("!!!", ".")
            stm.atomic_write(finding.target, text.encode())
        return "calmed it"

    monkeypatch.setattr(stm.Checker, "check_shouting", check_shouting, raising=False)
    memory = store / ".stacks" / "MEMORY.md"
    memory.write_text(memory.read_text().replace("Port the expression grammar.", "Ship it!!!"))
    code, found = check_findings(run, "--strict")
    assert code == 1 and rules(found)[-1:] == ["shouting"]
    assert found[-1] == {
        "severity": "warning",
        "rule": "shouting",
        "path": ".stacks/MEMORY.md",
        "line": MEMORY.splitlines().index("Port the expression grammar.") + 1,
        "message": "a line shouts",
        "fix": "write it in lower case",
    }
    staged_run = stm.check_store(stm.open_store(), only=[])[0]
    assert ("shouting" in [f.rule for f in staged_run]) is staged
    fixed = run("check", "--fix")
    assert fixed.code == 0 and re.search(
        r"^fixed +shouting +\.stacks/MEMORY\.md:\d+: calmed it$", fixed.out, re.M
    )
    assert "Ship it." in memory.read_text()
    assert "shouting" not in rules(check_findings(run)[1])


def test_a_rule_registered_twice_or_a_fixer_without_a_rule_is_refused(monkeypatch):
    """Mistakes in the registry are found at import, not by a user running check."""
    monkeypatch.setattr(
        stm, "RULES", {k: stm.Rule(r.id, r.severity, r.fix, r.fixer) for k, r in stm.RULES.items()}
    )
    monkeypatch.setattr(stm, "CHECK_STEPS", list(stm.CHECK_STEPS))
    with pytest.raises(ValueError, match="'secret' is registered twice"):
        stm.reports(stm.Rule("secret", "error", "x"))(lambda self: None)
    with pytest.raises(ValueError, match="'temp-file' has two fixers"):
        stm.fixes("temp-file")(lambda store, finding, dry_run: None)
    with pytest.raises(KeyError):
        stm.fixes("no-such-rule")(lambda store, finding, dry_run: None)


def test_check_refuses_a_rule_that_is_not_registered(store):
    checker = stm.Checker(stm.open_store())
    with pytest.raises(KeyError):
        checker.report("no-such-rule", str(store / ".stacks"), "x")


@pytest.mark.parametrize("folder", ["refs", "logs"])
def test_status_reports_a_missing_layer_folder(store, run, folder):
    import shutil

    shutil.rmtree(store / ".stacks" / folder)
    result = run("status", "--json")
    import json

    status = json.loads(result.out)
    assert status["layers"][folder]["exists"] is False
    assert f"{folder} layer is missing; run `stm init`" in status["warnings"]
    other = "logs" if folder == "refs" else "refs"
    assert status["layers"][other]["exists"] is True


def test_a_new_layer_is_one_row(store, run, monkeypatch):
    """What adding a layer costs: one Layer row makes init create it, boot load it,
    status measure it, check require it and search find it."""
    row = stm.Layer(
        "facts",
        "FACTS.md",
        "file",
        "Facts",
        template="# Facts\n\n## Known\n",
        template_rule="identity-template",
        purpose="the facts",
        at_boot="full",
    )
    monkeypatch.setattr(stm, "LAYERS", (*stm.LAYERS, row))
    monkeypatch.setattr(stm, "LAYER_BY_NAME", {**stm.LAYER_BY_NAME, "facts": row})
    monkeypatch.setattr(stm, "TEMPLATE_LAYERS", (*stm.TEMPLATE_LAYERS, row))
    assert run("init").code == 0
    facts = store / ".stacks" / "FACTS.md"
    assert facts.read_text() == "# Facts\n\n## Known\n"
    facts.write_text("# Facts\n\n## Known\n\nThe sky is blue.\n")
    boot = run("boot").out
    assert "## Facts (.stacks/FACTS.md)" in boot and "The sky is blue." in boot
    import json

    status = json.loads(run("status", "--json").out)
    assert status["layers"]["facts"]["files"] == 1
    assert "sky is blue" in run("search", "sky").out
    facts.unlink()
    check = run("check", "--json")
    assert any(
        f["rule"] == "layer-missing" and f["path"] == ".stacks/FACTS.md"
        for f in json.loads(check.out)["findings"]
    )


def test_the_declared_api_exists_and_works_in_process(store):
    """The module docstring's API paragraph, run: operations take a Store, print
    nothing and return results."""
    assert all(hasattr(stm, name) for name in stm.__all__)
    memory = stm.open_store(stacks=str(store / ".stacks"))
    entry = stm.append_log(memory, "parser work, from the API")
    assert entry["path"].startswith(".stacks/logs/")
    note = stm.add_memory_note(memory, "Next Steps", "port the printer")
    assert note == {"path": ".stacks/MEMORY.md", "section": "Next Steps", "replaced": False}
    hits = list(stm.search_memory(memory, "from the API"))
    assert [hit["layer"] for hit in hits] == ["logs"]
    text, warnings = stm.boot_document(stm.BootParts(memory), max_chars=2000)
    assert stm.boot_memory(memory, max_chars=2000)[:2] == (text, warnings)
    assert "port the printer" in text and len(text) <= 2000 and warnings == []
    findings, fixed = stm.check_store(memory)
    assert [f.rule for f in findings if f.severity == "error"] == [] and fixed == []
    with pytest.raises(stm.StmError) as refused:
        stm.append_log(memory, "")
    assert refused.value.code == 2


def test_handlers_are_referenced_directly_in_the_command_table():
    for table in (stm.COMMANDS, *stm.VERBS.values()):
        for command in table:
            assert command.handler is None or callable(command.handler)


# ---- The layout: sections that only look up -----------------------------------------
#
# stm.py is read top to bottom: each `# ==== Title ====` section may use only what the
# sections above it define, so a reader meets every name before its first use. The
# analysis reads the source (ast for the definitions, symtable for the names each
# function or class uses at run time).

BANNER = re.compile(r"^# ==== (.+?) =+$")

# (user, used): why this one reference points down. Keep it short (today it is empty):
# each row is a place where the order could not follow the rule, and says why.
LOOKS_DOWN: dict[tuple[str, str], str] = {}


def layout(source: str) -> tuple[list[str], dict[str, int], dict[str, tuple[int, set]]]:
    """(section titles in order, {top-level name: its section's index}, {top-level
    function or class: (its section's index, the module names it uses)})."""
    import ast
    import symtable

    titles, starts = [], []
    for number, line in enumerate(source.split("\n"), 1):
        match = BANNER.match(line)
        if match:
            titles.append(match.group(1).strip())
            starts.append(number)

    def section(line: int) -> int:
        return max(i for i, start in enumerate(starts) if start <= line)

    defined: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        else:
            continue
        for name in names:
            defined.setdefault(name, section(node.lineno))

    def used_names(table, found: set) -> set:
        for symbol in table.get_symbols():
            free = symbol.is_global() or (table.get_type() == "class" and not symbol.is_assigned())
            if symbol.is_referenced() and free:
                found.add(symbol.get_name())
        for child in table.get_children():
            used_names(child, found)
        return found

    users = {}
    for child in symtable.symtable(source, "stm.py", "exec").get_children():
        users[child.get_name()] = (section(child.get_lineno()), used_names(child, set()))
    return titles, defined, users


def references_down(source: str) -> set[tuple[str, str]]:
    """(user, used) for every name used by a section above the one defining it."""
    _, defined, users = layout(source)
    return {
        (user, name)
        for user, (where, names) in users.items()
        for name in names
        if name in defined and defined[name] > where
    }


STM_SOURCE = (ROOT / "stm.py").read_text(encoding="utf-8")


def test_each_section_uses_only_the_sections_above_it():
    found = references_down(STM_SOURCE)
    assert found - set(LOOKS_DOWN) == set(), "move the name up, or the user down"
    assert set(LOOKS_DOWN) - found == set(), "an exception no longer needed: drop its row"


def test_the_layout_check_notices_a_function_moved_below_its_first_user():
    # `plural` sits in the text helpers; moved to the end of the file, every section
    # above that uses it now looks down, and the check must say so.
    start = STM_SOURCE.index("\ndef plural(")
    end = STM_SOURCE.index("\n\n\ndef ", start + 1)
    moved = STM_SOURCE[:start] + STM_SOURCE[end:] + STM_SOURCE[start:end] + "\n"
    assert ("cmd_status", "plural") not in references_down(STM_SOURCE)
    assert {user for user, used in references_down(moved) if used == "plural"} >= {
        "fix_compact_duplicate",
        "Checker",
    }


def test_operations_print_nothing_and_know_no_command_line():
    """An operation returns or raises: the front ends (CLI, MCP) do the wording, the
    printing and the flags. Operations live in the sections titled `Operations: …`."""
    import ast

    titles, _, _ = layout(STM_SOURCE)
    operations = [i for i, title in enumerate(titles) if title.startswith("Operations")]
    assert operations, "no Operations section"
    _, _, users = layout(STM_SOURCE)
    front = {"print", "out", "print_json", "argparse"}
    offenders = {
        name: sorted(names & front)
        for name, (where, names) in users.items()
        if where in operations and names & front
    }
    assert offenders == {}
    streams = {"stdout", "stderr", "argv"}  # output, and the command line
    for node in ast.parse(STM_SOURCE).body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            continue
        if users[node.name][0] not in operations:
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.arguments):
                assert "args" not in [a.arg for a in inner.args], node.name
            if isinstance(inner, ast.Attribute) and inner.attr in streams:
                assert getattr(inner.value, "id", None) != "sys", node.name


def test_the_docstring_maps_the_sections_as_the_banners_name_them():
    titles, _, _ = layout(STM_SOURCE)
    after = stm.__doc__.split("Sections (grep -n '^# ====' stm.py)", 1)[1]
    block = after.split("\n\n")[1]  # the indented map after the heading's paragraph
    mapped = [re.split(r"\s{2,}", line.strip())[0] for line in block.split("\n")]
    assert mapped == titles


# ---- Commands: one room each ---------------------------------------------------------
#
# A command is its `cmd_<verb>`, its `options_<verb>` and its command(...) row, together
# (the docstring's recipe "A new command"); the Command line section only reads the rows.

# The furthest a row may sit below its handler's `def` (today's furthest, compose-handoff's,
# is 82 lines: its handler and its options).
ROW_REACH = 100


def command_rows_in_source() -> list[tuple[int, str, str | None]]:
    """(line, the row's name, its handler's name) for each command(...) row in stm.py."""
    import ast

    rows = []
    for node in ast.parse(STM_SOURCE).body:
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "command":
            handler = call.args[1].id if isinstance(call.args[1], ast.Name) else None
            rows.append((node.lineno, call.args[0].value, handler))
    return rows


def test_every_handler_has_one_row_and_every_row_is_registered():
    handlers = [row.handler.__name__ for row in stm.COMMAND_ROWS.values() if row.handler]
    defined = sorted(name for name in vars(stm) if name.startswith("cmd_"))
    assert sorted(handlers) == defined  # each cmd_ function registered, and only once
    declared = [name for _, name, _ in command_rows_in_source()]
    assert len(declared) == len(set(declared)) == len(stm.COMMAND_ROWS)
    registered = {" ".join(filter(None, key)) for key in stm.COMMAND_ROWS}
    assert set(declared) == registered
    # The tables the command line reads are the rows, every one of them.
    tables = [*stm.COMMANDS, *(verb for verbs in stm.VERBS.values() for verb in verbs)]
    assert sorted(tables, key=id) == sorted(stm.COMMAND_ROWS.values(), key=id)
    paths = {" ".join(path) for path in all_command_paths()}
    assert paths == registered


def test_each_row_sits_right_below_its_handler_and_options():
    """A row follows its handler (and its options, when they follow the handler), with
    no other command's handler or row between them; a command of verbs opens its verbs'."""
    import ast

    defs = {
        node.name: node.lineno
        for node in ast.parse(STM_SOURCE).body
        if isinstance(node, ast.FunctionDef)
    }
    rows = command_rows_in_source()
    assert len(rows) == len(stm.COMMAND_ROWS) > 0
    starts = sorted([line for line, _, _ in rows] + [defs[n] for n in defs if n[:4] == "cmd_"])
    for line, name, handler in rows:
        group, _, verb = name.rpartition(" ")
        row = stm.COMMAND_ROWS[group or None, verb]
        if handler is None:  # a command of verbs: its row sits above its first verb's
            first = min(defs[r.handler.__name__] for r in stm.VERBS[name])
            assert 0 < first - line < ROW_REACH, name
            continue
        at = defs[handler]
        assert 0 < line - at <= ROW_REACH, (name, handler, line - at)
        between = [start for start in starts if at < start < line]
        assert between == [], (name, "another command's handler or row is in between")
        if row.options is not None and row.options.__name__ == f"options_{handler[4:]}":
            assert at < defs[row.options.__name__] < line, (name, "its options sit elsewhere")


def test_the_dispatcher_adds_every_json_from_the_rows():
    assert STM_SOURCE.count('add_argument("--json"') == 1  # in add_json_option, nowhere else
    assert STM_SOURCE.count("add_json_option(") == 4  # its def, the rows, the fast path, main
    parser = stm.build_parser()

    def flags(path):
        sub = parser
        for word in path:
            action = next(a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction")
            sub = action.choices[word]
        return {flag for action in sub._actions for flag in action.option_strings}

    for (group, name), row in stm.COMMAND_ROWS.items():
        if row.handler is not None:
            path = [group, name] if group else [name]
            assert ("--json" in flags(path)) == (row.json is not None), path


def test_a_new_command_is_one_row(store, run, monkeypatch):
    """What adding a command costs: one handler and its row. The dispatcher lists it,
    gives it --json (before or after the command) and opens the store for it."""
    monkeypatch.setattr(stm, "COMMAND_ROWS", dict(stm.COMMAND_ROWS))
    seen = []

    def cmd_hello(args, store):
        seen.append(store)
        if args.json:
            stm.print_json({"stacks": store.rel(store.stacks)})
        else:
            stm.out("hello from " + store.rel(store.stacks))
        return stm.EXIT_OK

    stm.command("hello", cmd_hello, None, "say hello", "stm hello --json", json=True, store="open")
    monkeypatch.setattr(stm, "COMMANDS", stm.command_tables()[0])
    assert run("hello").out == "hello from .stacks\n"
    import json

    for argv in (("hello", "--json"), ("--json", "hello")):
        result = run(*argv)
        assert result.code == 0 and json.loads(result.out)["stacks"] == ".stacks", argv
    assert len(seen) == 3 and all(isinstance(s, stm.Store) for s in seen)
    shown = run("hello", "--help").out
    assert "--json      print JSON" in shown and "example:\n  stm hello --json" in shown
    listing = run("--help").out
    assert listing.index("    sync ") < listing.index("    hello ")  # not in HELP_ORDER: last
    with pytest.raises(ValueError, match="declared twice"):
        stm.command("hello", cmd_hello, None, "again", "stm hello")


def test_a_command_that_needs_the_store_refuses_a_missing_one_before_its_handler(
    project, run, monkeypatch
):
    ran = []
    monkeypatch.setattr(stm, "COMMAND_ROWS", dict(stm.COMMAND_ROWS))
    stm.command(
        "hello", lambda args, store: ran.append(store), None, "hi", "stm hello", store="open"
    )
    monkeypatch.setattr(stm, "COMMANDS", stm.command_tables()[0])
    result = run("hello")
    assert result.code == 1 and result.err.startswith("stm: error: ") and ran == []


# A rule joining two arguments, as the operation raises it, as `stm` says it, and as the
# MCP tool says it (the same rule: the tool's arguments named in place of the flags).
JOINED_RULES = [
    (
        lambda memory: stm.search_memory(memory, "parser", rank=True, regex=True),
        ("search", "--rank", "--regex", "parser"),
        ("search", {"query": "parser", "rank": True, "regex": True}),
        "--rank takes words, not a regular expression: drop --regex",
        "`rank: true` takes words, not a regular expression: drop `regex: true`",
    ),
    (
        lambda memory: stm.archive_session(memory, dry_run=True),
        ("session", "archive", "--dry-run"),
        ("session_archive", {"dry_run": True}),
        "--dry-run goes with --stale",
        "dry_run goes with stale",
    ),
    (
        lambda memory: stm.archive_stale(memory, token="2026-01-01-abcdef12"),
        ("session", "archive", "--stale", "2026-01-01-abcdef12"),
        ("session_archive", {"stale": True, "session": "2026-01-01-abcdef12"}),
        "--stale archives every stale session: give no session ID or --expect-version",
        "stale archives every stale session: give no session ID or --expect-version",
    ),
    (
        lambda memory: stm.archive_stale(memory, expect_version=1),
        ("session", "archive", "--stale", "--expect-version", "1"),
        None,  # the tool has no expect_version
        "--stale archives every stale session: give no session ID or --expect-version",
        None,
    ),
]


@pytest.mark.parametrize("case", range(len(JOINED_RULES)))
def test_a_rule_joining_two_arguments_is_the_operations_so_both_front_ends_share_it(
    store, run, case
):
    from conftest import snapshot

    operation, argv, tool, said, told = JOINED_RULES[case]
    before = snapshot(store)
    with pytest.raises(stm.StmError) as refused:
        operation(stm.open_store())
    assert (refused.value.code, refused.value.message) == (stm.EXIT_USAGE, said)
    result = run(*argv)
    assert result.code == 2 and result.err.startswith(f"stm: error: {said}; see `"), result
    if tool is not None:
        name, arguments = tool
        request = {"name": name, "arguments": arguments}
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": request}
        answer = stm.McpServer().answer(json.dumps(message).encode())["result"]
        assert answer["isError"] is True
        assert answer["content"][0]["text"] == f"stm: error: {told}"
    assert snapshot(store) == before


def test_every_command_and_verb_is_named_in_the_spec():
    """The recipe's check that a new command was written into spec/ (its --json keys:
    test_json_spec_covers_every_command_that_reports)."""
    spec = "\n".join(
        path.read_text(encoding="utf-8")
        for path in sorted((ROOT / "spec").glob("*.md"))
        if path.name != "json.md"  # the JSON keys say nothing of what a command does
    )
    missing = []
    for group, name in stm.COMMAND_ROWS:
        words = f"{group} {name}" if group else name
        if not re.search(r"`(?:stm )?" + re.escape(words) + r"[ `\]]", spec):
            missing.append(words)
    assert missing == [], "describe each in its spec/ file, as `stm WORDS …` or `WORDS …`"


# ---- Capture fields: one table --------------------------------------------------------
#
# What `stm capture` keeps is declared once, in CAPTURE_FIELDS: a new field is one row
# there (and, read from a transcript, the line of TranscriptReader.finish that reads
# it), as the opening docstring's recipe says.

MOOD_ROW = '    capture_field("mood", "str", "transcript", 12, 0, "quoted", "Mood", work=True),\n'
MOOD_READ = '            mood=safe_line(self.message, CAPTURE_LIMITS["mood"]),\n'


def stm_with(source: str, name: str):
    """stm built from `source`, as a module of its own (stm itself is left as it is)."""
    import sys
    import types

    module = types.ModuleType(name)
    module.__file__ = str(ROOT / "stm.py")
    sys.modules[name] = module  # for the classes' module while the source runs
    try:
        exec(compile(source, str(ROOT / "stm.py"), "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module


def test_a_new_capture_field_is_one_row(tmp_path):
    """One row of CAPTURE_FIELDS and the reader's line give a field its Transcript slot,
    its cut, its key in the stored record, its kind in state.json's validation, its say
    in emptiness, and its line in boot and in the log, in the table's order."""
    from transcripts import Claude, write_jsonl

    interrupted = STM_SOURCE.index('    capture_field("interrupted", ')
    finish = STM_SOURCE.index("            compacted=self.compacted,\n")
    assert interrupted < finish
    source = (
        STM_SOURCE[:interrupted]
        + MOOD_ROW
        + STM_SOURCE[interrupted:finish]
        + MOOD_READ
        + STM_SOURCE[finish:]
    )
    mood = stm_with(source, "stm_with_mood")
    assert "mood" not in stm.Transcript.__slots__ and "mood" in mood.Transcript.__slots__
    c = Claude(str(tmp_path))
    said = "All calm here, the parser is green"
    entries = [c.user("fix the parser"), c.say(said)]
    transcript = mood.read_transcript(write_jsonl(tmp_path / "s.jsonl", entries))
    assert transcript.mood == "All calm..." == mood.safe_line(said, 12)

    record = mood.captured_record(transcript, None, client="claude", session="s1", event="Stop")
    assert record["mood"] == "All calm..."
    assert mood.CAPTURED_FIELDS["mood"] == "str"
    assert mood.field_problem({**record, "mood": 5}, mood.CAPTURED_FIELDS) is not None
    assert mood.field_problem(record, mood.CAPTURED_FIELDS) is None

    nothing = {k: [] if isinstance(v, list) else v for k, v in transcript.as_dict().items()}
    nothing.update(request="", question="", last_message="", mood="")
    assert mood.capture_is_empty(mood.Transcript(**nothing))
    assert not mood.capture_is_empty(mood.Transcript(**{**nothing, "mood": "calm"}))

    record["interrupted"] = True
    boot = mood.render_capture(record, stm.utc_now())
    log = mood.capture_log_text(record).split("\n")
    for lines, shown in ((boot, '- Mood: "All calm..."'), (log, "- Mood: All calm...")):
        at = lines.index(shown)
        assert lines[at - 1].startswith("- Last message: ")
        assert lines[at + 1] == f"- {stm.CAPTURE_INTERRUPTED}"
    assert stm.capture_log_text(record) == "\n".join(line for line in log if "Mood" not in line)


def test_boot_and_the_log_render_a_capture_with_one_renderer(monkeypatch):
    """render_capture and capture_log_text both take their lines from one function."""
    record = {
        "at": stm.iso_now(),
        "client": "claude",
        "client_session": "s1",
        "event": "Stop",
        "plan": [],
        "files": ["a.py"],
        "failures": [],
        "position": "1:x",
    }
    seen = []
    real = stm.capture_body_lines

    def body(captured, **style):
        seen.append(style)
        return real(captured, **style)

    monkeypatch.setattr(stm, "capture_body_lines", body)
    assert stm.render_capture(record, stm.utc_now())[-1] == "- Touched: `a.py`"
    assert stm.capture_log_text(record).split("\n")[-1] == "- Touched: a.py"
    assert seen == [{}, {"log": True}]


CAPTURED_ROW = re.compile(r"^\| `captured` \| object \|(.*)$", re.MULTILINE)
BACKTICKED = re.compile(r"`([a-z_]+)`")


def test_the_spec_names_the_capture_fields_of_the_table():
    """spec/state-layout.md's `captured` row and spec/capture.md's list of what a capture
    keeps name exactly the fields of CAPTURE_FIELDS."""
    fields = {field.name for field in stm.CAPTURE_FIELDS}
    assert set(stm.CAPTURED_FIELDS) == fields
    [row] = CAPTURED_ROW.findall((ROOT / "spec" / "state-layout.md").read_text())
    statuses = set(stm.PLAN_STATUSES)
    assert set(BACKTICKED.findall(row)) - statuses - {"captured"} == fields
    capture = (ROOT / "spec" / "capture.md").read_text()
    listed = capture.split("the `captured` object (state-layout.md):", 1)[1]
    listed = listed.split("The agent's own fields", 1)[0]
    assert set(BACKTICKED.findall(listed)) == fields


def test_each_captured_text_is_cut_once_when_read(tmp_path):
    """The read cuts each text at its field's limit; the stored record keeps it as read
    (no second cut), and boot shows it as stored."""
    from transcripts import Claude, write_jsonl

    c = Claude(str(tmp_path))
    long = "word " * 200
    entries = [
        c.user("first " + long),
        c.user("second " + long),
        c.call("t1", "TodoWrite", todos=[{"content": long, "status": "pending"}]),
        c.result("t1", "ok"),
        c.call("b1", "Bash", command="make " + long),
        c.result("b1", "Exit code 1\nerror: " + long, is_error=True),
        c.say(long),
    ]
    read = stm.read_transcript(write_jsonl(tmp_path / "s.jsonl", entries))
    limit = stm.CAPTURE_LIMITS
    cut = {
        "plan": read.plan[0][0],
        "request": read.request,
        "requests": read.requests[0],
        "last_message": read.last_message,
    }
    for name, text in cut.items():
        assert text.endswith("...") and limit[name] - 1 <= len(text) <= limit[name], name
    record = stm.captured_record(read, None, client="claude", session="s1", event="Stop")
    assert record["plan"] == [{"text": read.plan[0][0], "status": "pending"}]
    assert record["requests"] == read.requests[:1] and record["request"] == read.request
    assert record["last_message"] == read.last_message
    # A failure is its command and its error, each cut once when read, joined whole.
    command, error = read.failures[0]
    assert record["failures"] == [f"{command} — {error}"]
    assert len(command) == stm.FAILURE_COMMAND_CHARS and len(error) == stm.FAILURE_ERROR_CHARS
    assert len(record["failures"][0]) <= limit["failures"]
    boot = stm.render_capture(record, stm.utc_now())
    assert f"- Plan, pending: {stm.quoted(read.plan[0][0], 10**6)}" in boot
    assert f"- Last message: {stm.quoted(read.last_message, 10**6)}" in boot
