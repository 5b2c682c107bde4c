"""Helpers shared by the test files: git and clones, check's findings, reading a store.

Imported as `from helpers import ...` (pytest puts tests/ on sys.path, as it does for
conftest, mcp_client, transcripts and workers). Fixtures live in conftest.py. Where test
files used to carry slightly different copies of one helper, the difference is a
parameter here, so every test still asserts what it asserted.

Which file tests which feature: tests/README.md.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import shutil
import signal
import string
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from conftest import IDENTITY, MEMORY, ROOT, STM_PY, Result

import stm

# The handoff of spec/handoff-example.json.
EXAMPLE = json.loads((ROOT / "spec" / "handoff-example.json").read_text())

# ---- git ------------------------------------------------------------------------------

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")

# A fixed author and committer, so that a commit never depends on the runner's git config.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}
# Neither the runner's ~/.gitconfig nor the system's /etc/gitconfig.
GIT_PRIVATE_CONFIG = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
# A merge or pull never waits for an editor or a password.
GIT_NO_PROMPTS = {"GIT_EDITOR": ":", "GIT_MERGE_AUTOEDIT": "no", "GIT_TERMINAL_PROMPT": "0"}


def git(
    cwd,
    *args: str,
    env: Mapping[str, str] | None = None,
    full_env: Mapping[str, str] | None = None,
    config: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float | None = None,
) -> subprocess.CompletedProcess:
    """git in `cwd`, its output captured as text.

    env: variables set over this process's environment as it is at the call (so a
    monkeypatched variable counts); full_env: the whole environment instead. config:
    `-c key=value` options before `args`. check: the test fails, showing git's output,
    unless git exits 0."""
    assert env is None or full_env is None, "env adds to os.environ; full_env replaces it"
    if full_env is None:
        full_env = {**os.environ, **(env or {})}
    options = [arg for key, value in (config or {}).items() for arg in ("-c", f"{key}={value}")]
    result = subprocess.run(
        [GIT or "git", *options, *args],
        cwd=cwd,
        env=dict(full_env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def git_out(cwd, *args: str, strip: bool = False, **options) -> str:
    """git's standard output (stripped with strip=True); options as for `git`."""
    out = git(cwd, *args, **options).stdout
    return out.strip() if strip else out


def is_command(folder: str, name: str) -> bool:
    path = os.path.join(folder, name)
    return os.path.isfile(path) and os.access(path, os.X_OK)


def isolated_git_env(bin_dir: Path, base: Mapping[str, str], ceiling) -> dict[str, str]:
    """A whole environment for git and stm processes: `base` plus python3 and git from
    `bin_dir` (linked here) on a PATH without any `stm` command (so `stm setup git
    --install` writes this checkout's stm.py as the merge driver), a fixed identity, a
    private git config, no repository found above `ceiling`, no editor and no prompt."""
    assert GIT, "git is needed for these tests"
    (bin_dir / "python3").symlink_to(sys.executable)
    (bin_dir / "git").symlink_to(GIT)
    folders = [str(bin_dir)] + [
        folder
        for folder in os.environ.get("PATH", "").split(os.pathsep)
        if folder and not is_command(folder, "stm")
    ]
    return {
        **base,
        "PATH": os.pathsep.join(folders),
        **GIT_IDENTITY,
        **GIT_PRIVATE_CONFIG,
        "GIT_CEILING_DIRECTORIES": str(ceiling),
        **GIT_NO_PROMPTS,
    }


def use_private_git(monkeypatch, ceiling) -> None:
    """For this test and every process it starts: a fixed identity, a private git config,
    no editor and no prompt, no repository found above `ceiling`, and none of the
    runner's GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE or STM_SESSION."""
    for key, value in {**GIT_IDENTITY, **GIT_PRIVATE_CONFIG, **GIT_NO_PROMPTS}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(ceiling))
    for key in ("STM_SESSION", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(key, raising=False)


MARKER_RE = re.compile(r"^(<{7} |={7}$|>{7} )")


def marker_lines(text: str, size: int = 7, *, start: int = 1, bare: bool = False) -> list[int]:
    """Numbers (counted from `start`) of the conflict-marker lines of `size` characters
    that git leaves in a conflicted file: `<<<<<<< label`, `=======`, `>>>>>>> label`
    (bare: `<<<<<<<` and `>>>>>>>` without a label count too)."""
    label = "( |$)" if bare else " "
    pattern = re.compile(rf"^(<{{{size}}}{label}|={{{size}}}$|>{{{size}}}{label})")
    return [n for n, line in enumerate(text.splitlines(), start) if pattern.match(line)]


def added_lines(base: str, side: str) -> list[str]:
    """The lines of `side` that `base` does not have (what that side wrote, which a merge
    must keep)."""
    had = set(base.splitlines())
    return [line for line in side.splitlines() if line.strip() and line not in had]


class Clock:
    """stm's clock in a test (monkeypatched over stm.utc_now): stands at `start` until
    `tick` moves it."""

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: int = 60) -> None:
        self.now += seconds


class World:
    """A bare origin seeded with a filled-in store, and clones of it. stm runs in-process
    (conftest's `run`), the clock one minute later for every command; git runs in this
    process's environment (see `use_private_git`)."""

    def __init__(self, tmp_path: Path, run, monkeypatch, clock: Clock, push_ref="main") -> None:
        self.tmp, self.run, self.monkeypatch, self.clock = tmp_path, run, monkeypatch, clock
        self.origin = tmp_path / "origin.git"
        self.push_ref = push_ref  # what `push` sends to origin's main

    # git -----------------------------------------------------------------------------
    def git(self, repo: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        return git(repo, *args, check=ok, timeout=60)

    def commit(self, repo: Path, message: str) -> None:
        self.git(repo, "add", "-A")
        self.git(repo, "commit", "-q", "-m", message)

    def push(self, repo: Path) -> subprocess.CompletedProcess:
        return self.git(repo, "push", "-q", "origin", self.push_ref)

    def pull(self, repo: Path, *how: str, ok: bool = True) -> subprocess.CompletedProcess:
        how = how or ("--no-rebase",)
        return self.git(repo, "pull", *how, "--no-edit", "-q", "origin", "main", ok=ok)

    def seed(self, *setup) -> None:
        """The origin: a store filled in with conftest's IDENTITY and MEMORY, then each
        `setup(seed_folder)`, committed on main."""
        from conftest import IDENTITY, MEMORY

        seed = self.tmp / "seed"
        seed.mkdir()
        self.git(seed, "-c", "init.defaultBranch=main", "init", "-q", "-b", "main")
        self.stm(seed, "init")
        (seed / ".stacks" / "AGENT.md").write_text(IDENTITY)
        (seed / ".stacks" / "MEMORY.md").write_text(MEMORY)
        for step in setup:
            step(seed)
        self.commit(seed, "base")
        self.git(self.tmp, "clone", "-q", "--bare", str(seed), str(self.origin))

    def clone(self, name: str, driver: bool = False) -> Path:
        """A clone of the origin, with stm's merge driver installed when `driver`."""
        path = self.tmp / name
        self.git(self.tmp, "clone", "-q", str(self.origin), str(path))
        if driver:
            self.stm(path, "setup", "git", "--install")
        return path

    # stm -----------------------------------------------------------------------------
    def stm(self, repo: Path, *args: str, user: str | None = None, code=0, stdin=None):
        self.clock.tick()
        if user is None:
            self.monkeypatch.delenv("STM_USER", raising=False)
        else:
            self.monkeypatch.setenv("STM_USER", user)
        result = self.run("--dir", str(repo / ".stacks"), *args, stdin=stdin)
        if code is not None:
            assert result.code == code, (args, result)
        return result

    def checkpoint(self, repo: Path, sid: str, *args: str, user: str) -> None:
        self.stm(repo, "session", "checkpoint", "--session", sid, *args, user=user)


def driver_world(tmp_path: Path, run, monkeypatch) -> World:
    """A World whose clones run the merge driver by this Python, with no `stm` on PATH
    (the driver must work from the command setup writes), stm's clock moving one minute
    per command from the run's now (whole seconds). conftest's `world` fixture."""
    from conftest import clock

    import stm

    assert GIT, "git is needed for these tests"
    use_private_git(monkeypatch, tmp_path)
    path = [p for p in os.environ["PATH"].split(os.pathsep) if not is_command(p, "stm")]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)  # the driver runs this Python
    monkeypatch.setenv("PATH", os.pathsep.join([str(bin_dir), *path]))
    ticking = Clock(float(int(clock())))  # the run's now, in whole seconds
    monkeypatch.setattr(stm, "utc_now", ticking)
    return World(tmp_path, run, monkeypatch, ticking, push_ref="HEAD:main")


# ---- stm as a process -----------------------------------------------------------------

# The environment of an stm process a test starts itself: no fsync, a fixed author, none
# of the runner's STM_* variables.
PROC_ENV = {**os.environ, "STM_FSYNC": "0", "PYTHONDONTWRITEBYTECODE": "1", "USER": "tester"}
for _name in ("STM_USER", "STM_SESSION", "STM_LOCK_TIMEOUT"):
    PROC_ENV.pop(_name, None)


def run_process(
    argv,
    *,
    cwd=None,
    env: Mapping[str, str | None] | None = None,
    full_env: Mapping[str, str | None] | None = None,
    input: str | bytes | None = None,
    timeout: float | None = 60,
    check: bool = False,
    preexec_fn=None,
) -> subprocess.CompletedProcess:
    """The one runner of a real process the tests start and wait for: `argv` in `cwd`,
    stdout and stderr captured (as text, unless `input` is bytes), killed after
    `timeout` seconds (None: never).

    env: variables set over this process's environment as it is at the call (so a
    monkeypatched variable counts); full_env: the whole environment instead; in either,
    a value None removes the variable. check: raise CalledProcessError unless it exits 0.
    preexec_fn: run in the child before it starts (see `limited`)."""
    assert env is None or full_env is None, "env adds to os.environ; full_env replaces it"
    if full_env is None:
        full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        env={key: value for key, value in full_env.items() if value is not None},
        input=input,
        capture_output=True,
        text=not isinstance(input, bytes),
        timeout=timeout,
        check=check,
        preexec_fn=preexec_fn,
    )


def run_stm(*args: str, script=STM_PY, **options) -> subprocess.CompletedProcess:
    """stm as a real process: `python3 SCRIPT ARGS` (script: this checkout's stm.py, or a
    copy, or a script of a test's own); options as for `run_process`."""
    return run_process([sys.executable, script, *args], **options)


def run_sh(command: str, **options) -> subprocess.CompletedProcess:
    """`command` run by POSIX sh (`sh -c`), as Claude Code, Codex, git and agents run the
    commands stm writes; options as for `run_process`."""
    return run_process(["sh", "-c", command], **options)


# A real stm process that dies as a kill leaves it (os._exit: no cleanup, no finally) at
# a chosen point. `mode`: "write-N" dies at its Nth atomic write, before it happens;
# "before-log" dies where it would append a log entry.
KILL_SCRIPT = """\
import os, sys
sys.path.insert(0, {root!r})
import stm
mode = sys.argv[1]
def die(*args, **kwargs):
    os._exit(137)
if mode == "before-log":
    stm.append_log_entry = die
else:
    survive = int(mode.split("-")[-1])
    calls = []
    real = stm.atomic_write
    def atomic_write(*args, **kwargs):
        calls.append(args[0])
        if len(calls) == survive:
            os._exit(137)
        return real(*args, **kwargs)
    stm.atomic_write = atomic_write
sys.exit(stm.main(sys.argv[2:]))
"""


def killed_stm(cwd: Path, aux: Path, mode: str, *argv: str) -> subprocess.CompletedProcess:
    """Run `stm argv` in a real process in `cwd` that dies at `mode` (see KILL_SCRIPT);
    the script is written to `aux`."""
    script = aux / "kill_stm.py"
    script.write_text(KILL_SCRIPT.format(root=str(ROOT)))
    return run_stm(mode, *argv, script=script, cwd=cwd, full_env=PROC_ENV)


class Unprivileged:
    """Drop to nobody when root (root ignores file modes), restore afterwards."""

    def __enter__(self):
        self.was_root = os.geteuid() == 0
        if self.was_root:
            os.setegid(65534)
            os.seteuid(65534)
        return self

    def __exit__(self, *exc):
        if self.was_root:
            os.seteuid(0)
            os.setegid(0)
        return False


class FaultyOS:
    """Stands in for `os` inside stm (monkeypatched over stm.os): the `fail_at`th call
    to a write-path function fails with OSError(`error`), "(injected)" in its message
    and, for the calls that name a path, that path, as the real call reports it;
    `calls` counts the write-path calls (fail_at=0 never fails: count the steps)."""

    WRAPPED = {"open", "write", "fsync", "replace", "rename", "ftruncate", "mkdir", "fchmod"}
    NAMED = {"open", "replace", "rename", "mkdir"}  # the calls that name their path

    def __init__(self, real, fail_at: int, error: int):
        self._real, self.fail_at, self.error, self.calls = real, fail_at, error, 0

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name not in self.WRAPPED:
            return attr

        def wrapper(*args, **kwargs):
            self.calls += 1
            if self.calls == self.fail_at:
                message = os.strerror(self.error) + " (injected)"
                if name in self.NAMED and isinstance(args[0], str):  # as the real call says
                    raise OSError(self.error, message, args[0])
                raise OSError(self.error, message)
            return attr(*args, **kwargs)

        return wrapper


def limited(nbytes: int):
    """A preexec_fn: a child process whose files may not grow past `nbytes` bytes (a
    full disk for it)."""

    def apply():
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return apply


# ---- results and check's findings -----------------------------------------------------


def ok(result):
    """A Result that must have exit code 0 (returned, for chaining)."""
    assert result.code == 0, result
    return result


def findings(result, *, no_traceback: bool = False) -> list[dict]:
    """The findings of a `check --json` Result (no_traceback: and stderr holds none)."""
    if no_traceback:
        assert "Traceback" not in result.err, result.err
    return json.loads(result.out)["findings"]


def check_findings(run, *args: str) -> tuple[int, list[dict]]:
    """Run `check --json ARGS` (exit 0 or 1, nothing else): its code and findings."""
    result = run("check", "--json", *args)
    assert result.code in (0, 1), result
    return result.code, findings(result)


def rules(found: list[dict]) -> list[str]:
    """The rule of each finding, in order."""
    return [f["rule"] for f in found]


def boot_section(text: str, title: str) -> str:
    """The body of boot's `## title` section (up to the next `## ` or the closing rule)."""
    assert f"## {title}" in text, (title, text)
    body = text.split(f"## {title}", 1)[1]
    return re.split(r"\n## |\n---\n", body, maxsplit=1)[0]


# ---- test data ----------------------------------------------------------------------

ALNUM = string.ascii_letters + string.digits


def fake_token(prefix: str, length: int, alphabet: str = ALNUM) -> str:
    """A realistic-looking but random (never real) credential, the same on every run."""
    rng = random.Random(prefix + str(length))
    return prefix + "".join(rng.choice(alphabet) for _ in range(length))


# ---- reading and writing a store ------------------------------------------------------


def read(root: Path, rel: str) -> str:
    return (root / rel).read_text()


def log_text(root: Path) -> str:
    """Every log file of the store at root/.stacks, concatenated in name (date) order."""
    return "".join(p.read_text() for p in sorted((root / ".stacks" / "logs").glob("*.md")))


def write_config(store: Path, config=None, /, **fields) -> None:
    """.stacks/config.json: `config` as JSON (or as text, when a str), else `fields`."""
    if config is None:
        config = fields
    text = config if isinstance(config, str) else json.dumps(config)
    (store / ".stacks" / "config.json").write_text(text)


def state_path(repo: Path, sid: str) -> Path:
    """The state.json of session `sid`, in a user namespace or not (exactly one)."""
    found = [p for p in (repo / ".state" / "sessions").rglob("state.json") if p.parent.name == sid]
    assert len(found) == 1, (sid, found)
    return found[0]


def read_state(repo: Path, sid: str) -> dict:
    return json.loads(state_path(repo, sid).read_text())


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file (a session's history.jsonl), blank lines skipped."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---- the lifecycle: facts, compaction, digest (a pinned clock, MEMORY.md, the log) ----


def pin(monkeypatch, stamp: str) -> float:
    """Stop the clock at `stamp` (YYYY-MM-DDTHH:MM:SSZ); returns its epoch seconds."""
    moment = stm.parse_iso(stamp)
    assert moment is not None, stamp
    monkeypatch.setattr(stm, "utc_now", lambda: moment)
    return moment


def memory_text(
    n_next: int,
    *,
    last_updated: str = "2026-11-22",  # date-safe: tests that compare it pin the clock
    extra: str = "",
) -> str:
    """A MEMORY.md whose Next Steps holds `n_next` bullets, `- step N` newest (highest) on
    top, as `stm note` writes them."""
    steps = "\n".join(f"- step {n}" for n in range(n_next, 0, -1))
    return (
        "# Session Memory\n\n"
        "## Status\n\nParser port half done.\n\n"
        "## Observations\n\nThe old grammar has two precedence bugs.\n\n"
        "## Open Questions\n\nNone yet.\n\n"
        f"{extra}"
        "## Next Steps\n\n"
        f"{steps}\n\n"
        "## Last Updated\n\n"
        f"{last_updated}\n"
    )


def write_memory(store: Path, text: str) -> None:
    (store / ".stacks" / "MEMORY.md").write_text(text)


def log_entries(store: Path) -> list:
    """Every log entry of every day file, in file order: (file name, LogEntry)."""
    entries = []
    for path in sorted((store / ".stacks" / "logs").glob("*.md")):
        for kind, *rest in stm.parse_log(path.read_bytes()):
            assert kind == "entry", (path, rest)
            entries.append((path.name, rest[0]))
    return entries


def entry_text(entry) -> str:
    return "\n".join(entry.body).strip("\n")


def fact_block(store: Path, block: str = "facts"):
    """The parsed block: [(key, Fact)], every section in the fact format."""
    text = read(store, f".stacks/refs/{block}.md")
    _, sections = stm.parse_fact_block(text)
    parsed = [(key, fact) for key, fact, _, _ in sections]
    assert all(fact is not None for _, fact in parsed), text
    return parsed


# ---- stores and inputs for the tests of hostile trees and input ------------------


HANDOFF = ROOT / "spec" / "handoff-example.json"


def quiet(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = stm.main(list(argv))
    return code, out.getvalue()


def new_store(root: Path, handoff: bool = True) -> str | None:
    """An initialised, filled-in store at root/.stacks (+ .state), with a handoff session
    (current) when asked; returns its id."""
    root.mkdir(parents=True, exist_ok=True)
    stacks = str(root / ".stacks")
    assert quiet("--dir", stacks, "init")[0] == 0
    (root / ".stacks" / "AGENT.md").write_text(IDENTITY)
    (root / ".stacks" / "MEMORY.md").write_text(MEMORY)
    if not handoff:
        return None
    code, out = quiet("--dir", stacks, "compose-handoff", str(HANDOFF))
    assert code == 0
    return out.strip()


def session_dir(root: Path, sid: str) -> Path:
    return root / ".state" / "sessions" / sid


def today() -> str:
    return stm.iso(stm.utc_now())[:10]


def assert_clean_refusal(result: Result, code: int, *names: str) -> None:
    """The documented exit code, one `error` line on stderr (naming one of `names`, when
    given), and no traceback."""
    assert result.code == code, result
    assert "Traceback" not in result.err, result.err
    errors = [line for line in result.err.splitlines() if "error" in line]
    assert len(errors) == 1, result.err
    if names:
        assert any(name in errors[0] for name in names), result.err


def handoff_json(**changes) -> dict:
    data = json.loads(HANDOFF.read_text())
    data.update(changes)
    return data


def source_store(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    new_store(src, handoff=False)
    (src / ".stacks" / "refs" / "guide.md").write_text("# Guide\n\nfrom the source\n")
    return src


def restore(copy: Path, root: Path) -> None:
    """Put the project back as `copy` holds it, and stand in it again."""
    shutil.rmtree(root)
    shutil.copytree(copy, root)
    os.chdir(root)
