"""Worker processes for the reliability tests: python3 -S tests/workers.py MODE DIR ...

Each worker imports stm from the checkout and calls it in-process in a loop, so that many
operations fit in one process start. Exit code 0 means every call succeeded.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import stm  # noqa: E402


def quiet_main(argv) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = stm.main(argv)
    return code, out.getvalue()


def log_entries(writer: str, count: int) -> int:
    """`count` multi-line `log` calls."""
    for n in range(count):
        message = f"writer {writer} entry {n}\nsecond line {writer}-{n}\nthird line {writer}-{n}"
        code, _ = quiet_main(["log", message])
        if code != 0:
            return code
    return 0


def append_direct(writer: str, count: int) -> int:
    """`count` entries through the library function, under the lock."""
    store = stm.Store(".stacks", ".state")
    for n in range(count):
        message = f"writer {writer} entry {n}\nsecond line {writer}-{n}\nthird line {writer}-{n}"
        with store.stacks_lock():
            stm.append_log_entry(store, message)
    return 0


def add_notes(writer: str, count: int) -> int:
    """`count` notes into one MEMORY.md section."""
    for n in range(count):
        code, _ = quiet_main(["note", "Observations", f"writer {writer} note {n}"])
        if code != 0:
            return code
    return 0


def update_state(session_id: str, writer: str, count: int) -> int:
    """`count` checkpoint updates, each of which changes the state."""
    for n in range(count):
        args = ["session", "checkpoint", "--session", session_id, "--done", f"{writer}-{n}"]
        code, _ = quiet_main(args)
        if code != 0:
            return code
    return 0


def read_loop(session_id: str, rounds: int) -> int:
    """boot, status and check over and over; print the number of failures seen."""
    failures = 0
    for n in range(rounds):
        command = (["boot"], ["status", "--json"], ["check"])[n % 3]
        code, out = quiet_main(command)
        if code != 0:
            failures += 1
        elif command == ["boot"] and f"`{session_id}`" not in out:
            failures += 1  # the workflow section was lost: a partial read of state.json
        elif command[0] == "status":
            json.loads(out)
        try:
            ref = stm.locate_session(stm.Store(".stacks", ".state"), session_id)
            stm.load_state(ref)
        except stm.StmError:
            failures += 1
    print(failures)
    return 0


def chaos(seed: int, commands_only: bool) -> int:
    """Random writes until killed: the parent kills this process at a random moment.

    With commands_only, every write goes through stm.main (which turns SIGTERM into a
    clean exit 143); otherwise raw appends through the library are mixed in.
    """
    import signal

    # CPython can lose the KeyboardInterrupt a handler raises (see stm.main); between
    # stm calls the loop must notice a Ctrl-C all the same, or it would run forever.
    interrupted = []

    def on_ctrl_c(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_ctrl_c)
    rng = random.Random(seed)
    store = stm.Store(".stacks", ".state")
    session_id = stm.read_pointer(store)
    print("ready", flush=True)
    n = 0
    while True:
        n += 1
        choice = rng.randrange(3 if commands_only else 4)
        code = 0
        if choice == 0:
            code, _ = quiet_main(["boot", "-o", "boot.md"])
        elif choice == 1:
            code, _ = quiet_main(["session", "checkpoint", "--done", f"step-{seed}-{n}"])
        elif choice == 2:
            filler = "filler line\n" * rng.randrange(1, 400)
            code, _ = quiet_main(["log", f"chaos {seed} {n}\n{filler}"])
        else:
            with store.state_lock():
                ref = stm.locate_session(store, session_id)
                stm.append_event(ref, {"event": "chaos", "timestamp": stm.iso_now(), "n": n})
        if code in (stm.EXIT_INTERRUPTED, stm.EXIT_TERMINATED):
            return code
        if interrupted:  # arrived between two stm calls, its exception lost
            return 1


def kill_before_event(session_id: str) -> int:
    """A checkpoint whose process dies by SIGKILL after state.json, before its event."""
    import signal

    def die(*args):
        os.kill(os.getpid(), signal.SIGKILL)

    stm.append_event = die
    return quiet_main(["session", "checkpoint", "--session", session_id, "--done", "x"])[0]


def main(argv) -> int:
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1)  # a hung worker can be asked where it is
    mode, directory, *rest = argv
    os.chdir(directory)
    if mode == "log":
        return log_entries(rest[0], int(rest[1]))
    if mode == "note":
        return add_notes(rest[0], int(rest[1]))
    if mode == "append":
        return append_direct(rest[0], int(rest[1]))
    if mode == "update":
        return update_state(rest[0], rest[1], int(rest[2]))
    if mode == "read":
        return read_loop(rest[0], int(rest[1]))
    if mode == "kill-before-event":
        return kill_before_event(rest[0])
    if mode == "chaos":
        return chaos(int(rest[0]), commands_only=False)
    if mode == "chaos-commands":
        return chaos(int(rest[0]), commands_only=True)
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
