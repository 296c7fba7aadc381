"""cordon over Streamable HTTP under the official MCP Python SDK's client (mcp 2.3.0).

`cordon serve --http 127.0.0.1:0` with a bearer token, driven by `streamable_http_client` in
both protocol generations: `legacy` (initialize, `Mcp-Session-Id`) and `2026-07-28` (stateless
requests). Guards that every tool works and fails as on stdio (the SDK validates every result
against the tool's outputSchema), that progress arrives, that the token is required, that two
sessions do not share interpreter state, that `ask` rules reach the client in both
generations, and that a client leaving mid-call leaves no process.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time

import anyio
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp_types import ElicitResult

from conftest import pids_with_argv, wait_until

MODES = ["legacy", "2026-07-28"]


class HttpServer:
    def __init__(self, binary, workspace, tmp_path, env=None):
        self.token = secrets.token_hex(24)
        token_file = tmp_path / "token"
        token_file.write_text(self.token + "\n")
        os.chmod(token_file, 0o600)
        self.stderr_path = tmp_path / "http-stderr.log"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [str(binary), "serve", "--workspace", str(workspace), "--http", "127.0.0.1:0",
             "--http-token-file", str(token_file)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
            env={**os.environ, **(env or {})})
        deadline = time.monotonic() + 60
        self.url = None
        while time.monotonic() < deadline and self.url is None:
            m = re.search(r"listening on (http://\S+/mcp)", self.stderr_path.read_text())
            if m:
                self.url = m.group(1)
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
        assert self.url, f"cordon serve --http did not start: {self.stderr_path.read_text()}"

    def transport(self, token: str | None = "own"):
        token = self.token if token == "own" else token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        client = create_mcp_http_client(headers=headers,
                                        timeout=httpx2.Timeout(60, read=120))
        return streamable_http_client(self.url, http_client=client)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._stderr.close()


@pytest.fixture
def http_server(cordon_bin, workspace, tmp_path):
    s = HttpServer(cordon_bin, workspace, tmp_path)
    yield s
    s.close()
    assert s.token not in s.stderr_path.read_text(), "the token reached the server's log"


def run(server, mode, body, token="own"):
    async def main():
        async with Client(server.transport(token), mode=mode, read_timeout_seconds=60) as c:
            return await body(c)

    return anyio.run(main)


def err(result):
    assert result.is_error is True
    e = result.structured_content["error"]
    assert e["message"] and isinstance(e["retriable"], bool)
    return e["kind"]


@pytest.mark.parametrize("mode", MODES)
def test_http_sdk_negotiates_and_lists_every_tool(http_server, mode):
    async def body(c):
        return c.protocol_version, (await c.list_tools()).tools

    version, tools = run(http_server, mode, body)
    assert version == {"legacy": "2025-11-25", "2026-07-28": "2026-07-28"}[mode]
    assert {t.name for t in tools} == {"shell_exec", "write_file", "edit_file", "read_file",
                                       "code_interpreter", "job", "checkpoint"}


@pytest.mark.parametrize("mode", MODES)
def test_http_sdk_calls_every_tool_successfully_and_with_an_error(http_server, workspace, mode):
    async def body(c):
        out = {}
        out["write"] = await c.call_tool("write_file", {"path": "src/a.py", "content": "x = 1\n"})
        out["write_bad"] = await c.call_tool("write_file", {"path": "../a.py", "content": "x"})
        out["edit"] = await c.call_tool("edit_file", {"path": "src/a.py", "edits": [
            {"old_string": "x = 1", "new_string": "x = 2"}]})
        out["edit_bad"] = await c.call_tool("edit_file", {"path": "src/a.py", "edits": [
            {"old_string": "y = 9", "new_string": "x = 3"}]})
        out["read"] = await c.call_tool("read_file", {"path": "src/a.py"})
        out["read_bad"] = await c.call_tool("read_file", {"path": "src/none.py"})
        out["shell"] = await c.call_tool("shell_exec", {"command": "cat src/a.py"})
        out["shell_bad"] = await c.call_tool("shell_exec", {"command": "exit 3"})
        out["py"] = await c.call_tool("code_interpreter", {"code": "y = 20\ny + 22"})
        out["py_state"] = await c.call_tool("code_interpreter", {"code": "y * 2"})
        out["py_bad"] = await c.call_tool("code_interpreter", {"code": "1 / 0"})
        return out

    r = run(http_server, mode, body)
    assert not r["write"].is_error and r["write"].structured_content["created"] is True
    assert err(r["write_bad"]) == "path_escape"
    assert r["edit"].structured_content["replacements"] == 1
    assert err(r["edit_bad"]) == "invalid_argument"
    assert r["read"].structured_content["content"] == "x = 2\n"
    assert err(r["read_bad"]) == "not_found"
    assert r["shell"].structured_content["stdout"] == "x = 2\n"
    assert err(r["shell_bad"]) == "exit_status"
    assert r["py"].structured_content["result"] == "42"
    assert r["py_state"].structured_content["result"] == "40"
    assert r["py_bad"].is_error is True
    assert r["py_bad"].structured_content["error"]["type"] == "ZeroDivisionError"
    for res in r.values():
        assert res.content and res.content[0].type == "text" and res.content[0].text.strip()
    assert (workspace / "src" / "a.py").read_text() == "x = 2\n"


@pytest.mark.parametrize("mode", MODES)
def test_http_sdk_progress_callback_receives_progress(http_server, mode):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    async def body(c):
        return await c.call_tool("shell_exec", {"command": "sleep 3; echo done"},
                                 progress_callback=on_progress)

    r = run(http_server, mode, body)
    assert r.structured_content["stdout"] == "done\n"
    assert len(seen) >= 2, seen


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_http_sdk_without_the_right_token_cannot_call(http_server, workspace, mode, token):
    async def body(c):
        return await c.call_tool("shell_exec", {"command": "touch ran"})

    # The SDK reports the 401 as an error response (-32603); nothing may have run.
    with pytest.raises(BaseException) as info:
        run(http_server, mode, body, token=token)
    assert "error" in repr(info.value).lower(), repr(info.value)
    assert not (workspace / "ran").exists()


def test_http_sdk_sessions_do_not_share_interpreter_state(http_server):
    async def main():
        async with Client(http_server.transport(), mode="legacy") as a, \
                Client(http_server.transport(), mode="legacy") as b:
            await a.call_tool("code_interpreter", {"code": "only_in_a = 1"})
            seen_a = await a.call_tool("code_interpreter", {"code": "only_in_a"})
            seen_b = await b.call_tool("code_interpreter", {"code": "only_in_a"})
            return seen_a, seen_b

    seen_a, seen_b = anyio.run(main)
    assert seen_a.structured_content["result"] == "1"
    assert seen_b.structured_content["error"]["type"] == "NameError"


@pytest.mark.parametrize("mode", MODES)
def test_http_sdk_client_leaving_mid_call_leaves_no_process(http_server, workspace, mode):
    marker = f"sleep 30.{abs(hash((mode, str(workspace)))) % 10**6:06d}"

    async def body(c):
        async with anyio.create_task_group() as tg:
            async def runner():
                try:
                    await c.call_tool("shell_exec", {"command": marker})
                except Exception:
                    pass
            tg.start_soon(runner)
            for _ in range(200):
                if pids_with_argv(marker):
                    break
                await anyio.sleep(0.05)
            running = bool(pids_with_argv(marker))
            tg.cancel_scope.cancel()
        return running

    assert run(http_server, mode, body) is True
    assert wait_until(lambda: pids_with_argv(marker) == [], timeout=10), pids_with_argv(marker)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("approve", [True, False])
def test_http_sdk_ask_rules_are_answered_by_the_client(http_server, workspace, mode, approve):
    # `rm -rf ./*` in the workspace root is an `ask` rule of the default policy. Legacy
    # sessions are asked with elicitation/create on the call's SSE stream; 2026-07-28 requests
    # get `input_required` and retry with the answer (the approval lives in the subject's
    # scope across the two requests).
    (workspace / "keep.txt").write_text("precious\n")
    seen = []

    async def on_elicit(_context, params):
        seen.append(params.message)
        return ElicitResult(action="accept", content={"approve": approve})

    async def main():
        async with Client(http_server.transport(), mode=mode, read_timeout_seconds=60,
                          elicitation_callback=on_elicit) as c:
            return await c.call_tool("shell_exec", {"command": "rm -rf ./*"})

    result = anyio.run(main)
    assert len(seen) == 1 and "rm-recursive-workspace" in seen[0], seen
    assert (workspace / "keep.txt").exists() != approve
    if approve:
        assert not result.is_error and result.structured_content["exit_code"] == 0, result
    else:
        assert err(result) == "denied"


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
def test_http_sdk_log_messages_follow_the_level_and_stay_in_their_session(http_server):
    # Legacy sessions: `logging/setLevel`, then a call stopped by its wall-clock limit. Its
    # `limit` event is a warning for the calling session only; a session whose level is
    # `error` gets nothing, and no message carries the command's secrets.
    got = {"a": [], "b": [], "quiet": []}

    def collector(name):
        async def on_log(params):
            got[name].append(params)
        return on_log

    async def main():
        async with Client(http_server.transport(), mode="legacy", logging_callback=collector("a")) as a, \
                Client(http_server.transport(), mode="legacy", logging_callback=collector("b")) as b, \
                Client(http_server.transport(), mode="legacy", logging_callback=collector("quiet")) as quiet:
            assert (await a.set_logging_level("info")) is not None
            await b.set_logging_level("debug")
            await quiet.set_logging_level("error")
            r = await a.call_tool("shell_exec", {"command": "sleep 30 # sk-http-secret",
                                                 "timeout_secs": 1})
            assert r.structured_content["limit"]["kind"] == "wall_time", r
            await quiet.call_tool("shell_exec", {"command": "sleep 30", "timeout_secs": 1})
            for _ in range(100):
                if any(m.data.get("event") == "limit" for m in got["a"]):
                    break
                await anyio.sleep(0.1)

    anyio.run(main)
    limits = [m for m in got["a"] if m.data.get("event") == "limit"]
    assert len(limits) == 1, got
    assert limits[0].level == "warning" and limits[0].logger == "cordon"
    assert limits[0].data["tool"] == "shell_exec" and limits[0].data["limit"] == "wall_time"
    assert not [m for m in got["b"] if m.data.get("event") == "limit"], got["b"]
    assert got["quiet"] == [], got["quiet"]
    assert "sk-http-secret" not in repr(got)


def test_http_sdk_client_without_elicitation_waits_for_the_operator(cordon_bin, workspace, tmp_path):
    # A legacy HTTP session whose client declared no elicitation: the `ask` rule's question
    # waits on the operator's socket, the call reports progress saying so, and
    # `cordon approve ID` lets it run.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    approvals_dir = str(run_dir / "cordon")
    # As root the channel is /run/cordon whatever XDG_RUNTIME_DIR says: name the test's own.
    server = HttpServer(cordon_bin, workspace, tmp_path,
                        env={"XDG_RUNTIME_DIR": str(run_dir), "CORDON_APPROVALS_DIR": approvals_dir})
    (workspace / "keep.txt").write_text("precious\n")
    progress = []

    def cli(*args):
        out = subprocess.run([str(cordon_bin), *args, "--dir", approvals_dir],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out
        return out.stdout

    # An operator is there: `cordon approvals --watch` attached to this server (without one,
    # the question is left open and the call refused at once, for its retry).
    watcher = subprocess.Popen([str(cordon_bin), "approvals", "--watch", "--json",
                                "--dir", approvals_dir], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    for line in watcher.stdout:
        if any(s["pid"] == server.proc.pid for s in json.loads(line)["servers"]):
            break
        assert time.monotonic() < deadline, "the watcher never attached"
    else:
        raise AssertionError("the watcher ended before it attached")

    async def on_progress(_progress, _total, message):
        progress.append(message)

    async def main():
        async with Client(server.transport(), mode="legacy", read_timeout_seconds=60) as c:
            result = {}

            async def call():
                result["r"] = await c.call_tool("shell_exec", {"command": "rm -rf ./*"},
                                                progress_callback=on_progress)

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                for _ in range(300):
                    listing = json.loads(cli("approvals", "--json"))
                    pending = [p for s in listing["servers"] for p in s["pending"]]
                    if pending:
                        break
                    await anyio.sleep(0.1)
                assert len(pending) == 1 and pending[0]["rule"] == "rm-recursive-workspace", pending
                cli("approve", pending[0]["id"])
            return result["r"]

    try:
        r = anyio.run(main)
    finally:
        watcher.kill()
        watcher.wait()
        server.close()
    assert not r.is_error and r.structured_content["exit_code"] == 0, r
    assert not (workspace / "keep.txt").exists()
    assert any("waiting for the operator's approval (asked of the operator watching on the host"
               in (m or "") and "run `cordon approvals`" in m for m in progress), progress


@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_2026_requests_name_their_log_level_in_meta(http_server, cordon_bin, workspace, transport):
    # 2026-07-28 has no logging/setLevel and no session: the SDK sends `log_level` in each
    # request's `_meta`, and that request's events come with its answer.
    from mcp import StdioServerParameters

    got = []

    async def on_log(params):
        got.append(params)

    server = http_server.transport() if transport == "http" else StdioServerParameters(
        command=str(cordon_bin), args=["serve", "--workspace", str(workspace)])

    async def main():
        async with Client(server, mode="2026-07-28", logging_callback=on_log,
                          log_level="warning") as c:
            r = await c.call_tool("shell_exec", {"command": "sleep 30 # sk-meta-secret",
                                                 "timeout_secs": 1})
            assert r.structured_content["limit"]["kind"] == "wall_time", r
            quiet = await c.call_tool("shell_exec", {"command": "echo quiet"})
            assert quiet.structured_content["exit_code"] == 0
            await anyio.sleep(0.3)

    anyio.run(main)
    limits = [m for m in got if m.data.get("event") == "limit"]
    assert len(limits) == 1 and limits[0].level == "warning", got
    assert "sk-meta-secret" not in repr(got)
