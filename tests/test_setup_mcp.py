"""`stm setup mcp`: the server wired into each client's config, merged, never forced."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import snapshot
from helpers import run_process

import stm

FILES = {"claude": ".mcp.json", "cursor": ".cursor/mcp.json", "vscode": ".vscode/mcp.json"}
KEYS = {"claude": "mcpServers", "cursor": "mcpServers", "vscode": "servers"}


@pytest.fixture
def no_stm_command(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "stm" else "/usr/bin/x")


@pytest.mark.parametrize("client", sorted(FILES))
def test_install_merges_check_and_remove_restore(store, run, client, no_stm_command):
    path = store / FILES[client]
    path.parent.mkdir(exist_ok=True)
    other = {"command": "other-server", "args": []}
    path.write_text(json.dumps({KEYS[client]: {"other": other}, "keep": 1}, indent=4))
    assert run("setup", "mcp", "--check", "--client", client).code == 1
    result = run("setup", "mcp", "--install", "--client", client)
    assert result.code == 0 and "installed" in result.out
    data = json.loads(path.read_text())
    assert data["keep"] == 1 and data[KEYS[client]]["other"] == other
    entry = data[KEYS[client]]["stm"]
    assert entry["command"] == "python3" and entry["args"][-1] == "mcp"
    assert ("type" in entry) == (client != "cursor")
    assert run("setup", "mcp", "--check", "--client", client).code == 0
    assert "already installed" in run("setup", "mcp", "--install", "--client", client).out
    assert run("setup", "mcp", "--remove", "--client", client).code == 0
    assert json.loads(path.read_text()) == {KEYS[client]: {"other": other}, "keep": 1}


def test_install_into_no_file_creates_it_and_remove_deletes_it(store, run):
    assert run("setup", "mcp", "--install").code == 0
    assert (store / ".mcp.json").exists()
    assert run("setup", "mcp", "--remove").code == 0
    assert not (store / ".mcp.json").exists()


def test_stm_user_is_passed_in_env(store, run, monkeypatch):
    monkeypatch.setenv("STM_USER", "alice")
    data = json.loads(run("setup", "mcp").out)
    assert data["mcpServers"]["stm"]["env"] == {"STM_USER": "alice"}


def test_codex_is_printed_as_toml_and_never_written(store, run, monkeypatch):
    monkeypatch.setenv("STM_USER", "alice")
    result = run("setup", "mcp", "--client", "codex")
    assert result.code == 0
    assert result.out.startswith("[mcp_servers.stm]\ncommand = ")
    assert 'env = { STM_USER = "alice" }' in result.out
    tomllib = pytest.importorskip("tomllib", reason="TOML parsing needs Python 3.11+")
    parsed = tomllib.loads(result.out)["mcp_servers"]["stm"]
    assert parsed["args"][-1] == "mcp" and parsed["env"] == {"STM_USER": "alice"}
    before = snapshot(store)
    refused = run("setup", "mcp", "--install", "--client", "codex")
    assert refused.code == 2 and "~/.codex/config.toml" in refused.err
    assert snapshot(store) == before


@pytest.mark.parametrize("content", ["{not json", "[]", '{"mcpServers": []}'])
def test_invalid_config_is_refused_unchanged(store, run, content):
    (store / ".mcp.json").write_text(content)
    before = snapshot(store)
    result = run("setup", "mcp", "--install")
    assert result.code == 1 and "nothing changed" in result.err
    assert snapshot(store) == before


def test_a_symlinked_client_folder_is_refused(store, run, tmp_path):
    victim = tmp_path.parent / (tmp_path.name + "-victim")
    victim.mkdir()
    (store / ".cursor").symlink_to(victim)
    before = snapshot(store)
    result = run("setup", "mcp", "--install", "--client", "cursor")
    assert result.code == 1 and "symbolic link" in result.err
    assert list(victim.iterdir()) == [] and snapshot(store) == before


def test_the_installed_config_starts_a_server_that_answers(store, run, no_stm_command):
    """Run exactly what the config says, from the project root, as a client would."""
    copy = store / "stm.py"
    shutil.copy(stm.__file__, copy)
    stm_file = stm.__file__
    try:
        stm.__file__ = str(copy)
        assert run("setup", "mcp", "--install").code == 0
    finally:
        stm.__file__ = stm_file
    entry = json.loads((store / ".mcp.json").read_text())["mcpServers"]["stm"]
    assert entry["args"] == ["stm.py", "mcp"]  # relative: the config is shared in git
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}},
    }
    done = run_process(
        [entry["command"], *entry["args"]],
        cwd=store,
        input=json.dumps(request) + "\n",
        env=entry.get("env", {}),
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["result"]["serverInfo"]["name"] == "stm"
