"""Shared fixtures for cordon's end-to-end MCP tests.

Finds the cordon binary (env `CORDON_BIN`, else `$CARGO_TARGET_DIR/debug/cordon`, else
`target/debug/cordon` in the repository), gives every test a fresh temporary workspace, and
provides `RawServer`: a line-level JSON-RPC client that starts `cordon serve`, reads *every*
stdout line and fails the test if one of them is not a JSON-RPC message.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
PV_KEY = "io.modelcontextprotocol/protocolVersion"
CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"


def find_cordon() -> Path:
    candidates = []
    if os.environ.get("CORDON_BIN"):
        candidates.append(Path(os.environ["CORDON_BIN"]))
    if os.environ.get("CARGO_TARGET_DIR"):
        candidates.append(Path(os.environ["CARGO_TARGET_DIR"]) / "debug" / "cordon")
    candidates.append(REPO / "target" / "debug" / "cordon")
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    pytest.fail(
        "cordon binary not found; build it (`cargo build`) or set CORDON_BIN. Tried: "
        + ", ".join(str(c) for c in candidates)
    )


@pytest.fixture(scope="session")
def cordon_bin() -> Path:
    return find_cordon()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


class RpcError(Exception):
    def __init__(self, error: dict[str, Any]):
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.error = error
        self.code = error.get("code")


class RawServer:
    """`cordon serve` driven by hand-written JSON-RPC lines.

    mode "legacy" performs the initialize handshake; mode "modern" sends the 2026-07-28
    `_meta` keys on every request (no handshake); mode None does nothing up front.
    """

    def __init__(self, binary: Path, workspace: Path, *, mode: str | None = "modern",
                 extra_args: list[str] | None = None, stderr_path: Path | None = None,
                 env: dict[str, str] | None = None):
        self.workspace = workspace
        self.mode = mode
        self.ids = itertools.count(1)
        self.responses: dict[Any, dict] = {}
        self.notifications: list[dict] = []
        self.orphan_errors: list[dict] = []
        self.bad_lines: list[bytes] = []
        self.cond = threading.Condition()
        self.stderr_path = stderr_path or (workspace.parent / f"cordon-stderr-{id(self)}.log")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [str(binary), "serve", "--workspace", str(workspace), *(extra_args or [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env={**os.environ, **(env or {})},
        )
        self.eof = False
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self._write_lock = threading.Lock()
        if mode == "legacy":
            r = self.request("initialize", {
                "protocolVersion": LEGACY, "capabilities": {},
                "clientInfo": {"name": "cordon-e2e", "version": "0"},
            })
            assert r["protocolVersion"] == LEGACY, r
            self.notify("notifications/initialized")

    # -- wire -------------------------------------------------------------------------------
    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
                ok = isinstance(msg, dict) and msg.get("jsonrpc") == "2.0"
            except ValueError:
                ok = False
            with self.cond:
                if not ok:
                    self.bad_lines.append(line)
                elif msg.get("id") is not None and ("result" in msg or "error" in msg):
                    self.responses[msg["id"]] = msg
                elif "error" in msg and "method" not in msg:
                    # an error answering a message whose id could not be read ("id": null)
                    self.orphan_errors.append(msg)
                else:
                    self.notifications.append(msg)
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        with self._write_lock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def send(self, msg: dict) -> None:
        self.send_raw(json.dumps(msg).encode() + b"\n")

    def meta(self, extra: dict | None = None) -> dict:
        m: dict[str, Any] = {}
        if self.mode == "modern":
            m = {PV_KEY: MODERN, CAPS_KEY: {}}
        m.update(extra or {})
        return m

    def start(self, method: str, params: dict | None = None, *, meta: dict | None = None,
              id: Any = None) -> Any:
        """Sends a request without waiting; returns its id."""
        rid = next(self.ids) if id is None else id
        params = dict(params or {})
        m = self.meta(meta)
        if m:
            params["_meta"] = {**m, **params.get("_meta", {})}
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def wait(self, rid: Any, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        with self.cond:
            while rid not in self.responses:
                left = deadline - time.monotonic()
                if left <= 0 or self.eof:
                    raise TimeoutError(f"no response to id {rid!r} (eof={self.eof})")
                self.cond.wait(left)
            return self.responses.pop(rid)

    def request_raw(self, method: str, params: dict | None = None, *, meta: dict | None = None,
                    timeout: float = 60) -> dict:
        return self.wait(self.start(method, params, meta=meta), timeout)

    def request(self, method: str, params: dict | None = None, **kw) -> dict:
        msg = self.request_raw(method, params, **kw)
        if "error" in msg:
            raise RpcError(msg["error"])
        return msg["result"]

    def notify(self, method: str, params: dict | None = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def call(self, tool: str, arguments: dict, *, meta: dict | None = None,
             timeout: float = 120) -> dict:
        return self.request("tools/call", {"name": tool, "arguments": arguments},
                            meta=meta, timeout=timeout)

    def progress_for(self, token: Any) -> list[dict]:
        with self.cond:
            return [n["params"] for n in self.notifications
                    if n.get("method") == "notifications/progress"
                    and n.get("params", {}).get("progressToken") == token]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 15) -> int:
        """Closes stdin (client disconnect) and waits for the server to exit."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            return self.proc.wait(timeout)
        finally:
            self.reader.join(5)

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stderr_text(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def assert_stdout_clean(self) -> None:
        assert not self.bad_lines, f"non-JSON-RPC lines on stdout: {self.bad_lines[:3]!r}"


@pytest.fixture
def start_server(cordon_bin: Path, workspace: Path):
    """Factory: start_server(mode=..., extra_args=...) -> RawServer; all are torn down and
    their stdout checked for non-JSON-RPC lines at the end of the test."""
    started: list[RawServer] = []

    def factory(mode: str | None = "modern", extra_args: list[str] | None = None,
                ws: Path | None = None, env: dict[str, str] | None = None) -> RawServer:
        s = RawServer(cordon_bin, ws or workspace, mode=mode, extra_args=extra_args, env=env)
        started.append(s)
        return s

    yield factory
    for s in started:
        if s.alive():
            try:
                s.close(10)
            except subprocess.TimeoutExpired:
                s.kill()
        s.reader.join(5)
        s.assert_stdout_clean()


@pytest.fixture
def server(start_server) -> RawServer:
    """A cordon server in the stateless 2026-07-28 mode over a fresh workspace."""
    return start_server("modern")


def structured(result: dict) -> dict:
    sc = result.get("structuredContent")
    assert isinstance(sc, dict), f"no structuredContent in {result!r}"
    return sc


def error_kind(result: dict) -> str | None:
    """The SPEC error kind of an isError result (asserting the full error object shape)."""
    assert result.get("isError") is True, f"expected isError result, got {result!r}"
    err = structured(result).get("error")
    assert isinstance(err, dict), f"isError result without structuredContent.error: {result!r}"
    assert set(err) >= {"kind", "message", "retriable"}, err
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["retriable"], bool), err
    text = [c for c in result.get("content", []) if c.get("type") == "text"]
    assert text and text[0]["text"].strip(), f"no human-readable text block: {result!r}"
    return err["kind"]


def pids_with_argv(needle: str) -> list[int]:
    """PIDs whose command line contains `needle` (reads /proc directly)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in argv:
            found.append(int(entry))
    return found


def wait_until(pred, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())


def ok(result: dict) -> dict:
    """Asserts a successful tool result and returns its structuredContent."""
    assert result.get("isError") in (None, False), f"unexpected error result: {result!r}"
    sc = structured(result)
    assert "error" not in sc or sc["error"] is None, sc
    return sc
