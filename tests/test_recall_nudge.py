"""Memory that meets the work (issue 40): boot's "Related" block, ranked by the work at
hand; `search --rank`; and `stm nudge`, the hook that tells an agent once, at the right
moment, to record where its work stands (spec/memory-layers.md, spec/integration.md)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest
from helpers import git
from mcp_client import McpClient
from transcripts import Claude, Codex, exec_json, patch

import stm

TOPICS = {
    "oauth": ("OAuth login", "How the OAuth login flow refreshes access tokens"),
    "deploy": ("Deploying", "Blue-green deploys to the cluster with rollbacks"),
    "styles": ("Styles", "Theme colours and the CSS grid layout"),
    "database": ("Database", "Postgres schema migrations and backups"),
    "billing": ("Billing", "Stripe invoices, refunds and dunning"),
    "search": ("Search engine", "Elasticsearch indexing of products"),
    "email": ("Mail", "Transactional mail templates and bounces"),
}


def write_refs(root):
    refs = root / ".stacks" / "refs"
    for name, (title, summary) in TOPICS.items():
        (refs / f"{name}.md").write_text(f"---\nsummary: {summary}\n---\n# {title}\n\nBody.\n")


def related_block(text: str) -> str | None:
    """The body of boot's Related section, or None when boot has none."""
    marker = "\n## Related to the work at hand"
    if marker not in text:
        return None
    return text.split(marker, 1)[1].split("\n## ", 1)[0]


def index_lines(text: str) -> list[str]:
    body = text.split("\n## Reference index", 1)[1].split("\n---\n", 1)[0]
    return [line for line in body.splitlines() if line.startswith("- ")]


@pytest.fixture
def topics(store, run):
    write_refs(store)
    assert run("fact", "set", "token_ttl", "OAuth access tokens live 15 minutes").code == 0
    assert run("fact", "set", "theme", "dark").code == 0
    return store


# ---- recall at boot ---------------------------------------------------------------------


def test_boot_brings_the_refs_and_facts_of_the_work_first(topics, run):
    run("session", "new", "--name", "OAuth login: tokens expire too early")
    run("session", "checkpoint", "--pending", "refresh the access token before expiry")
    boot = run("boot").out
    related = related_block(boot)
    assert related is not None
    items = [line for line in related.splitlines() if line.startswith("- ")]
    assert items[0].startswith("- refs/oauth.md — OAuth login")
    assert "- Fact `token_ttl` (refs/facts.md): OAuth access tokens live 15 minutes" in items
    for other in ("deploy", "styles", "database", "billing", "search", "email"):
        assert f"refs/{other}.md" not in related  # unrelated topics are absent
    assert "theme" not in related  # each fact is its own item: the unrelated one is not
    # The index follows the same score: the work's ref first, then the rest in path order.
    index = index_lines(boot)
    assert index[0].startswith("- refs/oauth.md")
    assert [line.split(" ")[1] for line in index[2:]] == sorted(
        line.split(" ")[1] for line in index[2:]
    )
    related_json = json.loads(run("boot", "--json").out)["sections"]["related"]
    assert related_json["items"][0].startswith("refs/oauth.md — OAuth login")
    assert related_json["log_entries"] == 0 and related_json["words"] == []
    # Related sits after session memory and before the refs index.
    assert (
        boot.index("## Session memory")
        < boot.index("## Related")
        < boot.index("## Reference index")
    )


def test_boot_shows_no_related_block_when_the_work_matches_nothing(topics, run):
    run("session", "new", "--name", "zebra enclosure inventory")
    boot = run("boot").out
    assert related_block(boot) is None
    assert json.loads(run("boot", "--json").out)["sections"]["related"] is None
    assert [line.split(" ")[1] for line in index_lines(boot)] == sorted(
        f"refs/{name}.md" for name in [*TOPICS, "facts"]
    )


def test_boot_without_work_at_hand_reads_nothing_for_recall(topics, run, monkeypatch):
    def must_not_run(*_):
        raise AssertionError("recall read candidates with no work at hand")

    monkeypatch.setattr(stm, "recall_candidates", must_not_run)
    monkeypatch.setattr(stm, "recall_log_entries", must_not_run)
    result = run("boot")
    assert result.code == 0 and related_block(result.out) is None


def test_matching_log_entries_are_counted_not_loaded(topics, run):
    run("log", "Found the OAuth refresh race: two tabs refresh one token (see login.py)")
    run("log", "Traced the OAuth login redirect loop to a stale cookie")
    run("log", "Bumped the CSS grid gap")
    run("session", "new", "--name", "OAuth login refresh race")
    boot = run("boot").out
    related = related_block(boot)
    assert "2 log entries match this work in the last 14 days (not loaded)" in related
    assert '`stm search --rank "' in related
    assert "two tabs" not in boot and "stale cookie" not in boot  # the logs stay unloaded
    command = related.split("`stm ", 1)[1].split("`", 1)[0]
    hits = run(*shlex.split(command), "--layer", "logs").out.splitlines()
    assert len(hits) == 2 and "CSS" not in "".join(hits)


def test_a_git_branch_and_changed_files_are_work_at_hand(topics, run):
    git(topics, "init", "-q", "-b", "main")
    git(topics, "add", "-A")
    git(topics, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    git(topics, "checkout", "-q", "-b", "fix/stripe-refunds")
    (topics / "billing").mkdir()
    (topics / "billing" / "invoices.py").write_text("x = 1\n")
    related = related_block(run("boot").out)
    assert related is not None and related.splitlines()[2].startswith("- refs/billing.md")
    assert "refs/oauth.md" not in related


def test_related_goes_with_the_refs_index_under_a_budget(topics, run):
    run("session", "new", "--name", "OAuth login tokens")
    assert related_block(run("boot").out) is not None
    assert related_block(run("boot", "--no-refs").out) is None  # asked: no notice either
    parts = stm.BootParts(stm.open_store(stacks=str(topics / ".stacks")))
    parts.recall = stm.recall_for_boot(parts)
    cut = stm.BootCut()
    cut.refs, cut.limit = "titles", "--max-chars 900"
    ((title, text),) = stm.render_related(parts, cut)[0]
    assert "- refs/oauth.md — OAuth login\n" in text + "\n"  # its summary left out
    assert "refreshes access tokens" in stm.render_related(parts, stm.BootCut())[0][0][1]
    cut.refs = "none"
    assert stm.render_related(parts, cut) == (
        [],
        ["related notes left out to fit --max-chars 900: run `stm boot`"],
    )
    # Through boot itself: the cut that leaves the index out takes Related with it.
    fitted, cut = stm.fit_boot(parts, stm.BootCut(), lambda text: "## Related" not in text)
    assert cut.refs == "none" and "related notes left out" in fitted


def test_mcp_boot_brings_the_same_related_block_and_search_ranks(topics, run):
    run("session", "new", "--name", "OAuth login tokens")
    run("log", "OAuth token refresh fixed in login")
    client = McpClient(stacks=topics / ".stacks", cwd=topics)
    try:
        text = client.tool_result("boot")["content"][0]["text"]
        related = related_block(text)
        assert related is not None
        assert related.splitlines()[2].startswith("- refs/oauth.md")
        # The logs' hint in the reader's own terms: a tool call, not a shell command.
        assert 'the `search` tool with query: "' in related and ", rank: true" in related
        result = client.tool_result("search", {"query": "oauth login", "rank": True})
        matches = result["structuredContent"]["matches"]
        scores = [m["score"] for m in matches]
        assert scores == sorted(scores, reverse=True) and scores[0] > 0
        assert "oauth" in matches[0]["text"].lower() and "login" in matches[0]["text"].lower()
    finally:
        client.kill()


def archive(run, name, done, resume) -> str:
    """A session with a name, a completed step and a Resume line, archived; its id."""
    sid = run("session", "new", "--name", name, "--no-switch").out.split()[0]
    run("session", "checkpoint", "--session", sid, "--pending", done)
    run("session", "checkpoint", "--session", sid, "--done", done, "--resume", resume)
    assert run("session", "archive", sid).code == 0
    return sid


ARCHIVED = {
    "oauth": ("OAuth refresh race", "serialised token refresh", "check the refresh lock"),
    "styles": ("Dark theme", "CSS grid gap fixed", "finish the colour tokens"),
    "billing": ("Stripe dunning", "retry schedule written", "send the dunning mails"),
}


def test_boot_recalls_the_archived_session_about_the_work(topics, run):
    ids = {topic: archive(run, *fields) for topic, fields in ARCHIVED.items()}
    summary = json.loads((topics / ".state" / "archived.jsonl").read_text().splitlines()[0])
    assert summary["id"] == ids["oauth"] and summary["name"] == "OAuth refresh race"
    assert summary["done"] == "serialised token refresh"
    assert summary["resume"] == "check the refresh lock"
    run("session", "new", "--name", "OAuth token refresh fails after login")
    related = related_block(run("boot").out)
    assert related is not None
    sid = ids["oauth"]
    line = next(line for line in related.splitlines() if sid in line)
    assert line == (
        f"- Archived session {sid} — OAuth refresh race: done: serialised token refresh; "
        f"resume: check the refresh lock (`stm session show {sid}`)"
    )
    for other in ("styles", "billing"):
        assert ids[other] not in related  # archived sessions about other topics are absent
    # The command it names shows that session.
    assert "OAuth refresh race" in run("session", "show", sid).out
    items = json.loads(run("boot", "--json").out)["sections"]["related"]["items"]
    assert any(item.startswith(f"Archived session {sid} — OAuth") for item in items)
    # Cut to titles: the name and the command stay, the details go.
    parts = stm.BootParts(stm.open_store(stacks=str(topics / ".stacks")))
    parts.recall = stm.recall_for_boot(parts)
    cut = stm.BootCut()
    cut.refs, cut.limit = "titles", "--max-chars 900"
    text = stm.render_related(parts, cut)[0][0][1]
    assert f"- Archived session {sid} — OAuth refresh race (`stm session show {sid}`)" in text


def test_an_archived_sessions_captured_request_is_recalled(topics, run):
    sid = run("session", "new", "--name", "Sprint chores", "--no-switch").out.split()[0]
    state_path = topics / ".state" / "sessions" / sid / "state.json"
    state = json.loads(state_path.read_text())
    state["captured"] = {"request": "Why do the Postgres migrations time out on deploy?"}
    state_path.write_text(json.dumps(state))
    assert run("session", "archive", sid).code == 0
    run("session", "new", "--name", "slow postgres migrations")
    related = related_block(run("boot").out)
    assert f"- Archived session {sid} — Sprint chores: request: Why do the Postgres" in related


def test_summaries_archived_on_two_branches_merge_by_union(topics, run):
    who = ("-c", "user.name=t", "-c", "user.email=t@t")
    git(topics, "init", "-q", "-b", "main")
    git(topics, "add", "-A")
    git(topics, *who, "commit", "-qm", "start")
    git(topics, "checkout", "-q", "-b", "other")
    theirs = archive(run, *ARCHIVED["billing"])
    git(topics, "add", "-A")
    git(topics, *who, "commit", "-qm", "archived on a branch")
    git(topics, "checkout", "-q", "main")
    ours = archive(run, *ARCHIVED["oauth"])
    git(topics, "add", "-A")
    git(topics, *who, "commit", "-qm", "archived on main")
    git(topics, *who, "merge", "-q", "--no-edit", "other")  # no conflict: both lines kept
    lines = (topics / ".state" / "archived.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == sorted([ours, theirs])


def test_check_fix_finishing_a_killed_archive_writes_its_summary(topics, run):
    sid = run("session", "new", "--name", "OAuth refresh race", "--no-switch").out.split()[0]
    state_path = topics / ".state" / "sessions" / sid / "state.json"
    state = json.loads(state_path.read_text())
    state["archived_at"] = state["updated_at"]  # marked, then killed before the move
    state_path.write_text(json.dumps(state))
    found = json.loads(run("check", "--json").out)["findings"]
    assert "archive-incomplete" in [f["rule"] for f in found]
    run("check", "--fix")
    lines = (topics / ".state" / "archived.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [sid]
    run("session", "new", "--name", "OAuth token refresh fails after login")
    assert f"- Archived session {sid} — OAuth refresh race" in related_block(run("boot").out)


def test_boot_reads_only_the_tail_of_the_archived_summaries(topics, run, monkeypatch):
    old = archive(run, *ARCHIVED["oauth"])
    index = topics / ".state" / "archived.jsonl"
    # Thousands of sessions archived since: the OAuth one is beyond the newest
    # RECALL_ARCHIVED_MAX, so it is not weighed, and boot reads one bounded tail.
    filler = "".join(
        json.dumps({"id": f"2020-01-01-{n:08x}", "name": f"chore number {n}"}) + "\n"
        for n in range(5000)
    )
    with index.open("a") as handle:
        handle.write(filler)
    assert index.stat().st_size > 4 * stm.RECALL_ARCHIVED_BYTES
    run("session", "new", "--name", "OAuth token refresh fails after login")
    read = []
    real_pread = stm.pread
    monkeypatch.setattr(stm, "pread", lambda fd, n, at: read.append(n) or real_pread(fd, n, at))
    boot = run("boot").out
    assert old not in (related_block(boot) or "")
    assert sum(read) <= stm.RECALL_ARCHIVED_BYTES  # whatever the file's size
    candidates = stm.recall_archived(stm.open_store(stacks=str(topics / ".stacks")))
    assert len(candidates) == stm.RECALL_ARCHIVED_MAX
    # A torn line, a line that is not a summary, a duplicate: skipped, never an error.
    lines = [
        {"id": "not an id"},
        [1],
        {"id": old, "name": "older summary"},
        {"id": old, "name": "OAuth"},
    ]
    torn = json.dumps({"id": old, "name": "torn"})[:-5]
    index.write_text("".join(json.dumps(line) + "\n" for line in lines) + torn)
    candidates = stm.recall_archived(stm.open_store(stacks=str(topics / ".stacks")))
    assert [line for _, line, _, _ in candidates] == [
        f"- Archived session {old} — OAuth (`stm session show {old}`)"
    ]


def test_many_archived_sessions_leave_boots_reads_the_same(tmp_path, run, monkeypatch):
    from test_performance import listed, opened, probe

    stores = []
    for count in (2, 40):
        root = tmp_path / f"archived{count}"
        root.mkdir()
        monkeypatch.chdir(root)
        assert run("init").code == 0
        for n in range(count):
            archive(run, f"chore {n}", f"step {n}", "nothing left")
        archive(run, *ARCHIVED["oauth"])
        current = run("session", "new", "--name", "OAuth token refresh").out.split()[0]
        stores.append((root, current))
    (small, small_id), (big, big_id) = ((probe(root, ["boot"]), sid) for root, sid in stores)
    assert "Archived session" in small["out"] and "Archived session" in big["out"]
    # The same files, but for the current session's own id.
    assert sorted(opened(small)) == sorted(p.replace(big_id, small_id) for p in opened(big))
    assert opened(big).count(".state/archived.jsonl") == 1
    assert not [path for path in opened(big) if path.startswith(".state/history/")]
    for report in (small, big):
        assert listed(report) == [".stacks/refs"]  # never sessions/ or history/


def test_mcp_boot_recalls_the_archived_session_too(topics, run):
    sid = archive(run, *ARCHIVED["oauth"])
    archive(run, *ARCHIVED["styles"])
    run("session", "new", "--name", "OAuth token refresh fails after login")
    client = McpClient(stacks=topics / ".stacks", cwd=topics)
    try:
        related = related_block(client.tool_result("boot")["content"][0]["text"])
    finally:
        client.kill()
    line = next(line for line in related.splitlines() if sid in line)
    assert line.startswith(f"- Archived session {sid} — OAuth refresh race: done: ")
    assert "Dark theme" not in related


# ---- search --rank ----------------------------------------------------------------------


def test_search_rank_puts_the_best_match_first(topics, run):
    run("log", "login page copy tweaked")
    run("log", "OAuth login token refresh fixed: refresh before expiry")
    run("log", "catalogue loading spinner")  # holds "log" only inside a longer word
    out = run("search", "--rank", "oauth token refresh", "--layer", "logs").out.splitlines()
    assert "OAuth login token refresh fixed" in out[0]
    plain = run("search", "--rank", "login", "--layer", "logs", "--json").out
    matches = json.loads(plain)["matches"]
    assert {m["text"] for m in matches} == {
        "login page copy tweaked",
        "OAuth login token refresh fixed: refresh before expiry",
    }
    assert all(m["score"] > 0 for m in matches)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["search", "--rank", "--regex", "oauth"], "--rank takes words"),
        (["search", "--rank", "a ."], "give words to rank by"),
    ],
)
def test_search_rank_refuses_what_it_cannot_rank(topics, run, argv, said):
    result = run(*argv)
    assert result.code == 2 and said in result.err and result.out == ""


# ---- stm nudge --------------------------------------------------------------------------


class Agent:
    """A Claude Code (or Codex) session in `root` whose transcript grows as it works, and
    its hooks: each call runs `stm nudge` with the payload the client passes, in-process
    (test_the_installed_nudge_hook_runs runs the installed command for real)."""

    def __init__(self, root, run, client="claude"):
        self.root, self.run, self.client = root, run, client
        self.transcript = root / f"{client}-transcript.jsonl"
        self.lines = Claude(str(root)) if client == "claude" else Codex(str(root))
        self.calls = 0
        self.append(
            self.lines.user("make the login flow refresh tokens")
            if client == "claude"
            else self.lines.meta()
        )

    def append(self, *entries) -> None:
        with open(self.transcript, "a", encoding="utf-8") as f:
            for entry in entries:
                f.write(json.dumps(entry) + "\n")

    def hook(self, event="PostToolUse", **extra) -> str:
        payload = {
            "session_id": self.lines.session,
            "transcript_path": str(self.transcript),
            "cwd": str(self.root),
            "hook_event_name": event,
            **extra,
        }
        result = self.run("nudge", "--client", self.client, stdin=json.dumps(payload))
        assert result.code == 0 and result.err == "", result
        return result.out

    def edit(self, name="auth.py") -> str:
        self.calls += 1
        call = f"toolu_{self.calls:04d}"
        path = str(self.root / name)
        self.append(self.lines.call(call, "Edit", file_path=path, old_string="a", new_string="b"))
        self.append(self.lines.result(call, "The file has been updated."))
        return self.hook()

    def bash(self, command: str, *, fails=False) -> str:
        self.calls += 1
        call = f"toolu_{self.calls:04d}"
        self.append(self.lines.call(call, "Bash", command=command))
        output = "Error: exit status 1\nAssertionError" if fails else "ok"
        self.append(self.lines.result(call, output, is_error=fails))
        return self.hook()


def check_hook_output(text: str, event: str) -> str:
    """The hook's stdout against the clients' documented output schema, written from
    their docs: one JSON object whose keys are among continue, suppressOutput,
    stopReason, decision ("block"), reason, systemMessage and hookSpecificOutput (Codex
    refuses any other: additionalProperties false); hookSpecificOutput holds the
    required hookEventName, equal to the event that ran, and additionalContext, a
    string (the part the model reads; systemMessage would reach only the user). Returns
    additionalContext."""
    data = json.loads(text)
    assert isinstance(data, dict)
    allowed = {
        "continue",
        "suppressOutput",
        "stopReason",
        "decision",
        "reason",
        "systemMessage",
        "hookSpecificOutput",
    }
    assert set(data) <= allowed
    assert "decision" not in data and "systemMessage" not in data  # never block, never the user
    specific = data["hookSpecificOutput"]
    assert isinstance(specific, dict)
    extra = {"PostToolUse": {"updatedMCPToolOutput"}, "UserPromptSubmit": set()}[event]
    assert set(specific) <= {"hookEventName", "additionalContext"} | extra
    assert specific["hookEventName"] == event
    assert isinstance(specific["additionalContext"], str)
    assert text.count("\n") == 1 and text.endswith("\n")
    return specific["additionalContext"]


def command_in(line: str) -> str:
    return line.split("`", 1)[1].rsplit("`", 1)[0]


@pytest.fixture
def working(store, run):
    run("session", "new", "--name", "login tokens")
    return store


def test_a_session_that_never_writes_is_nudged_once_at_the_threshold(working, run):
    agent = Agent(working, run)
    assert agent.hook("UserPromptSubmit") == ""
    outputs = [agent.edit(f"file{n}.py") for n in range(11)]
    assert outputs == [""] * 11  # 11 edits: under the threshold of 12
    line = check_hook_output(agent.edit("file11.py"), "PostToolUse")
    assert len(line) <= 300
    assert "12 edits since memory was last written" in line
    command = command_in(line)
    assert " session checkpoint --done " in command and " --resume " in command
    assert "make the login flow refresh tokens" in command  # prefilled from the transcript
    # The command runs as printed, in the agent's shell, and records the work.
    result = subprocess.run(command, shell=True, cwd=working, capture_output=True, text=True)
    assert result.returncode == 0, result
    show = run("session", "show", "--json").out
    assert "make the login flow refresh tokens" in show
    # Then silent: the next call, and the next few edits, say nothing.
    assert agent.hook() == ""
    assert [agent.edit() for _ in range(5)] == [""] * 5


def test_a_session_that_writes_regularly_is_never_nudged(working, run):
    agent = Agent(working, run)
    agent.hook("UserPromptSubmit")
    said = []
    for round_ in range(5):
        said += [agent.edit(f"f{round_}{n}.py") for n in range(8)]
        said.append(agent.bash(f'python3 stm.py log "round {round_} done"'))
        said.append(agent.bash('stm session checkpoint --done "x" --resume "y"'))
    assert said == [""] * len(said)


def test_the_second_call_in_a_row_is_silent(working, run):
    agent = Agent(working, run)
    agent.hook("UserPromptSubmit")
    for n in range(11):
        agent.edit(f"f{n}.py")
    assert agent.edit() != ""
    assert agent.hook() == ""
    assert agent.hook("UserPromptSubmit", prompt="go on") == ""


def test_a_completed_plan_item_nudges_with_it_and_the_next(working, run):
    agent = Agent(working, run)
    agent.hook("UserPromptSubmit")
    todos = [
        {"content": "Write the refresh test", "status": "completed", "activeForm": "Writing"},
        {"content": "Refresh before expiry", "status": "in_progress", "activeForm": "Doing"},
        {"content": "Update the docs", "status": "pending", "activeForm": "Updating"},
    ]
    agent.append(agent.lines.call("toolu_plan", "TodoWrite", todos=todos))
    agent.append(agent.lines.result("toolu_plan", "Todos have been modified successfully"))
    line = check_hook_output(agent.hook(), "PostToolUse")
    assert "1 plan item completed" in line
    words = shlex.split(command_in(line))
    assert words[words.index("--done") + 1] == "Write the refresh test"
    assert words[words.index("--resume") + 1] == "Refresh before expiry"
    assert agent.hook() == ""  # the same list again is no new completion
    agent.append(agent.lines.call("toolu_plan2", "TodoWrite", todos=todos))
    assert agent.hook() == ""


def test_six_failing_commands_nudge(working, run):
    agent = Agent(working, run)
    agent.hook("UserPromptSubmit")
    said = [agent.bash("pytest -q", fails=True) for _ in range(6)]
    assert said[:5] == [""] * 5
    assert "6 failing commands" in check_hook_output(said[5], "PostToolUse")


def test_thresholds_come_from_config(working, run):
    (working / ".stacks" / "config.json").write_text(json.dumps({"nudge_edits": 3}))
    agent = Agent(working, run)
    agent.hook("UserPromptSubmit")
    assert [agent.edit(f"{n}.py") for n in range(2)] == ["", ""]
    assert "3 edits" in check_hook_output(agent.edit(), "PostToolUse")


def test_nudge_switched_off_says_nothing_and_writes_nothing(working, run):
    (working / ".stacks" / "config.json").write_text(json.dumps({"nudge": False}))
    agent = Agent(working, run)
    agent.hook("UserPromptSubmit")
    assert [agent.edit(f"{n}.py") for n in range(14)] == [""] * 14
    assert not (working / ".state" / ".hooks.json").exists()


def test_a_capture_counts_as_a_write(working, run):
    agent = Agent(working, run)
    agent.hook("UserPromptSubmit")
    for n in range(10):
        agent.edit(f"{n}.py")
    payload = {
        "session_id": agent.lines.session,
        "transcript_path": str(agent.transcript),
        "cwd": str(working),
        "hook_event_name": "PreCompact",
    }
    # A second later than the last look: stamps are to the second.
    stm_now = stm.utc_now
    try:
        stm.utc_now = lambda: stm_now() + 2
        assert run("capture", "--client", "claude", stdin=json.dumps(payload)).code == 0
    finally:
        stm.utc_now = stm_now
    assert [agent.edit(f"x{n}.py") for n in range(11)] == [""] * 11


def test_codex_edits_and_failures_nudge_in_its_own_form(working, run):
    agent = Agent(working, run, client="codex")
    agent.hook("UserPromptSubmit", prompt="port the parser")
    said = []
    for n in range(6):
        agent.append(
            agent.lines.custom_call(f"p{n}", "apply_patch", patch(f"Update File: m{n}.py"))
        )
        agent.append(agent.lines.output(f"p{n}", "Success", kind="custom_tool_call_output"))
        agent.append(agent.lines.call(f"c{n}", "shell", command=["bash", "-lc", "cargo test"]))
        agent.append(agent.lines.output(f"c{n}", exec_json("error[E0308]: mismatched", 101)))
        said.append(agent.hook())
    assert said[:5] == [""] * 5
    line = check_hook_output(said[5], "PostToolUse")
    assert "6 failing commands" in line and "port the parser" in line


def test_a_nudge_without_a_current_session_names_a_log_entry(store, run):
    agent = Agent(store, run)
    agent.hook("UserPromptSubmit")
    for n in range(11):
        agent.edit(f"{n}.py")
    line = check_hook_output(agent.edit(), "PostToolUse")
    command = command_in(line)
    assert " log " in command
    result = subprocess.run(command, shell=True, cwd=store, capture_output=True, text=True)
    assert result.returncode == 0, result
    assert "make the login flow refresh tokens" in run("log", "--tail", "1").out


GARBAGE = [
    b"",
    b"not json",
    b"[1, 2]",
    b'{"hook_event_name": NaN}',
    b'{"hook_event_name": "PostToolUse"}',
    b'{"hook_event_name": "PostToolUse", "session_id": "s", "transcript_path": "/nonexistent"}',
    b'{"hook_event_name": "PostToolUse", "session_id": "s", "transcript_path": "."}',
    b'{"hook_event_name": "PostToolUse", "session_id": ["s"], "transcript_path": 3}',
    b"\xff\xfe",
    b"{" * 100_000,
]


@pytest.mark.parametrize("payload", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_input_exits_0_and_says_nothing(working, run, payload):
    result = run("nudge", stdin=payload)
    assert (result.code, result.out, result.err) == (0, "", "")


def test_a_transcript_of_garbage_lines_says_nothing(working, run):
    agent = Agent(working, run)
    agent.hook("UserPromptSubmit")
    with open(agent.transcript, "ab") as f:
        f.write(b'\x00\xff garbage\n{"type": "assistant", "message": 3}\n[]\n' * 50)
    assert agent.hook() == ""


def test_nudge_outside_a_store_says_nothing(project, run):
    payload = {"hook_event_name": "PostToolUse", "session_id": "s", "transcript_path": "t"}
    result = run("nudge", stdin=json.dumps(payload))
    assert (result.code, result.out, result.err) == (0, "", "")


def test_each_look_reads_only_the_new_bytes(working, run, monkeypatch):
    """Structure, not time: a big transcript costs a look only what was appended."""
    agent = Agent(working, run)
    with open(agent.transcript, "ab") as f:  # ~8 MB of earlier work
        line = json.dumps(agent.lines.say("x" * 8000)) + "\n"
        f.write(line.encode() * 1000)
    read = []
    real = stm.read_span
    monkeypatch.setattr(stm, "read_span", lambda fd, at, n: read.append(n) or real(fd, at, n))
    assert agent.hook() == ""
    assert sum(read) <= stm.NUDGE_FIRST_BYTES  # a first look: the tail only
    read.clear()
    assert agent.hook() == ""
    assert sum(read) == 0  # nothing new: nothing read
    edit = json.dumps(agent.lines.call("toolu_x", "Edit", file_path="a", old_string="1"))
    with open(agent.transcript, "a") as f:
        f.write(edit + "\n")
    assert agent.hook() == ""
    assert sum(read) == len(edit) + 1


# ---- setup installs the nudge hooks -----------------------------------------------------


@pytest.mark.parametrize("client", ["claude", "codex"])
def test_setup_installs_and_removes_the_nudge_hooks(store, run, client):
    assert run("setup", client, "--install").code == 0
    path = store / (".claude/settings.json" if client == "claude" else ".codex/hooks.json")
    hooks = json.loads(path.read_text())["hooks"]
    for event in ("UserPromptSubmit", "PostToolUse"):
        (entry,) = hooks[event]
        assert "matcher" not in entry  # every tool
        (hook,) = entry["hooks"]
        assert f" nudge --client {client}" in hook["command"]
        assert stm.is_stm_hook(hook, "")
    assert run("setup", client, "--install").out.startswith("already installed")
    assert run("setup", client, "--check").code == 0
    assert run("setup", client, "--remove").code == 0
    assert not path.exists()


def test_the_installed_nudge_hook_runs(store, run):
    """The command setup writes, run by a shell as Claude Code runs it."""
    run("session", "new", "--name", "login")
    assert run("setup", "claude", "--install").code == 0
    settings = json.loads((store / ".claude" / "settings.json").read_text())
    command = settings["hooks"]["PostToolUse"][0]["hooks"][0]["command"]
    agent = Agent(store, run)
    agent.hook("UserPromptSubmit")
    for n in range(11):
        agent.edit(f"{n}.py")
    agent.calls += 1
    agent.append(agent.lines.call("toolu_last", "Write", file_path=str(store / "z.py"), content=""))
    payload = {
        "session_id": agent.lines.session,
        "transcript_path": str(agent.transcript),
        "cwd": str(store),
        "hook_event_name": "PostToolUse",
    }
    result = subprocess.run(
        ["sh", "-c", command],
        cwd=store,
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env={**os.environ, "CLAUDE_PROJECT_DIR": str(store), "STM_FSYNC": "0"},
    )
    assert result.returncode == 0
    assert "12 edits" in check_hook_output(result.stdout, "PostToolUse")


def test_check_names_a_nudge_hook_that_never_ran_unless_nudge_is_off(store, run):
    assert run("setup", "claude", "--install").code == 0

    def never_ran():
        found = json.loads(run("check", "--json").out)["findings"]
        return {f["message"].split(" hook ")[0] for f in found if f["rule"] == "hook-not-run"}

    assert "the Claude Code PostToolUse" in never_ran()
    (store / ".stacks" / "config.json").write_text(json.dumps({"nudge": False}))
    assert not {"the Claude Code PostToolUse", "the Claude Code UserPromptSubmit"} & never_ran()
    assert "the Claude Code PreCompact" in never_ran()


def test_work_before_the_first_look_is_not_counted(working, run):
    """A session resumed with hours of edits behind it: the first look reads the tail for
    the request, and counts from there."""
    agent = Agent(working, run)
    for n in range(30):
        agent.append(agent.lines.call(f"old{n}", "Write", file_path=f"{working}/o{n}.py"))
    assert agent.hook("UserPromptSubmit") == ""
    assert [agent.edit(f"{n}.py") for n in range(11)] == [""] * 11
    assert "12 edits" in check_hook_output(agent.edit(), "PostToolUse")
