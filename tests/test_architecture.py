"""The architecture's promises: layers and check rules are tables, operations stand
apart from printing, and the in-process API is declared."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

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
