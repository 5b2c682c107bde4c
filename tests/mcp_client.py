"""A tiny stdio MCP client for the tests, written from the MCP specification.

The server is `python3 stm.py mcp`: newline-delimited JSON-RPC 2.0 on stdin/stdout.
Modern requests (protocol revision 2026-07-28) carry their protocol version and client
capabilities in `params._meta`; legacy ones (2025-11-25 and earlier) follow an
`initialize` request and the `notifications/initialized` notification.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import STM_PY

MODERN = "2026-07-28"
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
LATEST_LEGACY = "2025-11-25"

PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
LEGACY_RESOURCE_NOT_FOUND = -32002
UNSUPPORTED_PROTOCOL_VERSION = -32022

DEFAULT_CLIENT_INFO = {"name": "test-client", "version": "1.0.0"}
_UNSET = object()


class ServerClosed(AssertionError):
    """The server closed its stdout while a message was expected."""


def modern_meta(
    version: str = MODERN,
    client_info: dict | None | object = _UNSET,
    capabilities: dict | None | object = _UNSET,
) -> dict:
    """The per-request `_meta` of a modern request; None leaves a key out."""
    meta = {PROTOCOL_VERSION: version}
    caps = {} if capabilities is _UNSET else capabilities
    if caps is not None:
        meta[CLIENT_CAPABILITIES] = caps
    info = DEFAULT_CLIENT_INFO if client_info is _UNSET else client_info
    if info is not None:
        meta[CLIENT_INFO] = info
    return meta


class McpClient:
    """One `stm mcp` process with pipes; use as a context manager or call close()."""

    def __init__(
        self,
        stacks: str | Path | None = None,
        cwd: str | Path | None = None,
        env: dict | None = None,
    ):
        argv = [sys.executable, str(STM_PY), "mcp"]
        if stacks is not None:
            argv += ["--dir", str(stacks)]
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[bytes] = []  # every line the server wrote to stdout, in order
        self._stderr: list[bytes] = []
        self._queue: queue.Queue = queue.Queue()
        self._next_id = 1
        self._out = threading.Thread(target=self._read_stdout, daemon=True)
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._out.start()
        self._err.start()
        self.returncode: int | None = None

    # -- plumbing ------------------------------------------------------------------------

    def _read_stdout(self) -> None:
        for line in iter(self.proc.stdout.readline, b""):
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)  # end of file

    def _read_stderr(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read(4096), b""):
            self._stderr.append(chunk)

    @property
    def stderr(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (the caller adds the newline)."""
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message) -> None:
        """One JSON value as one line."""
        self.send_raw(json.dumps(message, ensure_ascii=False).encode() + b"\n")

    def recv_raw(self, timeout: float = 10.0) -> bytes:
        try:
            line = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"no message from the server within {timeout} s; stderr: {self.stderr[-2000:]}"
            ) from None
        if line is None:
            self._queue.put(None)  # stay at end of file for later calls
            raise ServerClosed(f"the server closed stdout; stderr: {self.stderr[-2000:]}")
        return line

    def recv(self, timeout: float = 10.0) -> dict:
        """The next message; it must be one JSON-RPC 2.0 object on one line."""
        line = self.recv_raw(timeout)
        assert line.endswith(b"\n"), f"message without its newline: {line!r}"
        message = json.loads(line)
        assert isinstance(message, dict), line
        assert message.get("jsonrpc") == "2.0", line
        return message

    def expect_silence(self, seconds: float = 0.3) -> None:
        """Nothing arrives on stdout for `seconds`."""
        try:
            line = self._queue.get(timeout=seconds)
        except queue.Empty:
            return
        if line is None:
            self._queue.put(None)
            return
        raise AssertionError(f"unexpected message from the server: {line!r}")

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    # -- requests ------------------------------------------------------------------------

    def request(self, method: str, params=_UNSET, *, id=_UNSET, timeout: float = 10.0) -> dict:
        """Send a request and return the full response, which must be the very next
        message and carry the same id."""
        rid = self.new_id() if id is _UNSET else id
        message = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not _UNSET:
            message["params"] = params
        self.send(message)
        response = self.recv(timeout)
        assert response.get("id") == rid and type(response.get("id")) is type(rid), (
            f"expected the answer to id {rid!r}, got {response!r}"
        )
        assert ("result" in response) != ("error" in response), response
        return response

    def notify(self, method: str, params=_UNSET) -> None:
        message = {"jsonrpc": "2.0", "method": method}
        if params is not _UNSET:
            message["params"] = params
        self.send(message)

    def modern(self, method: str, params: dict | None = None, **meta_options) -> dict:
        """A 2026-07-28 request: `params._meta` carries the protocol fields.
        meta_options: version, client_info, capabilities (see modern_meta)."""
        body = dict(params or {})
        body["_meta"] = {**modern_meta(**meta_options), **body.get("_meta", {})}
        return self.request(method, body)

    def legacy(self, method: str, params: dict | None = None) -> dict:
        """A request as a legacy (initialize-based) client sends it: no protocol `_meta`."""
        if params is None:
            return self.request(method)
        return self.request(method, params)

    def legacy_handshake(
        self, version: str = LATEST_LEGACY, client_info: dict | None = None
    ) -> dict:
        """initialize + notifications/initialized; returns the initialize result."""
        response = self.request(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": client_info or DEFAULT_CLIENT_INFO,
            },
        )
        assert "result" in response, response
        self.notify("notifications/initialized")
        return response["result"]

    def call_tool(self, name: str, arguments: dict | None = None, era: str = "modern") -> dict:
        """tools/call in either era; returns the full response."""
        params = {"name": name, "arguments": arguments or {}}
        return (
            self.modern("tools/call", params)
            if era == "modern"
            else self.legacy("tools/call", params)
        )

    def tool_result(self, name: str, arguments: dict | None = None, era: str = "modern") -> dict:
        """tools/call that must succeed at the protocol level; returns the result."""
        response = self.call_tool(name, arguments, era)
        assert "result" in response, response
        result = response["result"]
        assert isinstance(result.get("content"), list), result
        return result

    def timed_request(self, method: str, params=_UNSET) -> tuple[dict, float]:
        """(response, seconds from the write to the answer's arrival)."""
        rid = self.new_id()
        message = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not _UNSET:
            message["params"] = params
        data = json.dumps(message).encode() + b"\n"
        start = time.perf_counter()
        self.send_raw(data)
        line = self.recv_raw()
        elapsed = time.perf_counter() - start
        response = json.loads(line)
        assert response.get("id") == rid, response
        return response, elapsed

    # -- shutdown ------------------------------------------------------------------------

    def close_stdin(self) -> None:
        if not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):  # the server died: nothing to flush
                self.proc.stdin.close()

    def wait(self, timeout: float = 10.0) -> int:
        """Wait for the exit (killing the process if it overstays), then release every
        pipe and thread. Returns the exit code seen before any kill."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._release()
            raise AssertionError(f"the server did not exit within {timeout} s") from None
        self._release()
        self.returncode = code
        return code

    def close(self, timeout: float = 10.0) -> int:
        """The spec's graceful shutdown: close stdin, wait for the exit."""
        self.close_stdin()
        return self.wait(timeout)

    def kill(self) -> None:
        """For teardown after a failed test: never leave a process or a pipe behind."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._release()

    def _release(self) -> None:
        self.close_stdin()
        self._out.join(10)
        self._err.join(10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if not pipe.closed:
                pipe.close()

    def __enter__(self) -> McpClient:
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None and exc[0] is None:
            self.close()
        else:
            self.kill()
