"""cordon under the official MCP Python SDK (mcp 2.3.0) client, in both protocol generations.

Guards that a stock client works end to end: `mode="legacy"` (initialize handshake, negotiated
2025-11-25), `mode="2026-07-28"` (stateless, no handshake) and `mode="auto"` (discover probe,
which must pick 2026-07-28). The SDK validates every successful result's structuredContent
against the tool's outputSchema, so these tests also guard that the schemas match the output.
"""

from __future__ import annotations

import anyio
import pytest
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

MODES = {"legacy": "2025-11-25", "2026-07-28": "2026-07-28", "auto": "2026-07-28"}
ANNOTATIONS = {  # readOnly, destructive, idempotent, openWorld (default policy: no network)
    "read_file": (True, False, True, False),
    "write_file": (False, True, True, False),
    "edit_file": (False, True, False, False),
    "shell_exec": (False, True, False, False),
    "code_interpreter": (False, True, False, False),
    "job": (False, True, False, False),  # it can kill
    "checkpoint": (False, True, False, False),  # a restore rewrites the workspace
}


def run_client(cordon_bin, workspace, mode, body):
    params = StdioServerParameters(command=str(cordon_bin),
                                   args=["serve", "--workspace", str(workspace)])

    async def main():
        async with Client(params, mode=mode, read_timeout_seconds=60) as client:
            return await body(client)

    return anyio.run(main)


def err(result):
    assert result.is_error is True
    e = result.structured_content["error"]
    assert e["message"] and isinstance(e["retriable"], bool)
    return e["kind"]


@pytest.mark.parametrize("mode", list(MODES))
def test_sdk_negotiates_expected_protocol_version(cordon_bin, workspace, mode):
    async def body(c):
        return c.session.protocol_version

    assert run_client(cordon_bin, workspace, mode, body) == MODES[mode]


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_sdk_lists_tools_with_strict_schemas_and_truthful_annotations(cordon_bin, workspace, mode):
    async def body(c):
        return (await c.list_tools()).tools

    tools = {t.name: t for t in run_client(cordon_bin, workspace, mode, body)}
    assert set(tools) == set(ANNOTATIONS)
    for name, tool in tools.items():
        a = tool.annotations
        assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint) \
            == ANNOTATIONS[name], name
        assert tool.input_schema["type"] == "object"
        assert tool.input_schema["additionalProperties"] is False, name
        # `job` lists this session's jobs when called with no argument at all.
        assert tool.input_schema.get("required") or name == "job", name
        assert tool.output_schema and tool.output_schema.get("properties"), name
        assert tool.description
    assert tools["shell_exec"].input_schema["properties"]["timeout_secs"]["maximum"] == 600
    assert set(tools["shell_exec"].input_schema["required"]) == {"command"}
    assert set(tools["edit_file"].input_schema["required"]) == {"path", "edits"}
    assert set(tools["shell_exec"].output_schema["required"]) >= {
        "exit_code", "signal", "timed_out", "stdout", "stderr", "truncated", "full_output",
        "duration_ms"}


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_sdk_calls_every_tool_successfully_and_with_an_error(cordon_bin, workspace, mode):
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
        out["args_bad"] = await c.call_tool("shell_exec", {"command": "true", "nope": 1})
        return out

    r = run_client(cordon_bin, workspace, mode, body)
    assert not r["write"].is_error and r["write"].structured_content["created"] is True
    assert r["write"].structured_content["lint"]["status"] in ("clean", "issues", "unavailable",
                                                              "skipped")
    assert err(r["write_bad"]) == "path_escape"
    assert not r["edit"].is_error and r["edit"].structured_content["replacements"] == 1
    assert err(r["edit_bad"]) == "invalid_argument"
    assert "nothing was changed" in r["edit_bad"].structured_content["error"]["message"]
    assert r["read"].structured_content["content"] == "x = 2\n"
    assert err(r["read_bad"]) == "not_found"
    assert r["shell"].structured_content["stdout"] == "x = 2\n"
    assert err(r["shell_bad"]) == "exit_status"
    assert r["shell_bad"].structured_content["exit_code"] == 3
    assert err(r["args_bad"]) == "invalid_argument"
    for res in r.values():  # every result also has a human-readable text block
        assert res.content and res.content[0].type == "text" and res.content[0].text.strip()
    assert (workspace / "src" / "a.py").read_text() == "x = 2\n"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_sdk_runs_a_dev_server_job_tests_it_and_drives_a_repl(cordon_bin, workspace, mode):
    async def body(c):
        out = {}
        out["start"] = await c.call_tool("shell_exec", {
            "command": "python3 -m http.server 8000 --bind 127.0.0.1", "background": True,
            "wait_secs": 0})
        jid = out["start"].structured_content["job"]["id"]
        out["ready"] = await c.call_tool("job", {"id": jid, "wait_secs": 20, "until": "Serving"})
        out["curl"] = await c.call_tool("shell_exec", {
            "command": "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/"})
        out["stop"] = await c.call_tool("job", {"id": jid, "signal": "TERM", "wait_secs": 10})
        out["repl"] = await c.call_tool("shell_exec", {
            "command": "exec python3 -i -q", "background": True, "pty": True, "wait_secs": 2})
        rid = out["repl"].structured_content["job"]["id"]
        await c.call_tool("job", {"id": rid, "input": "v = 'kept'\n", "wait_secs": 5, "until": ">>> "})
        out["value"] = await c.call_tool("job", {"id": rid, "input": "print(v)\n", "wait_secs": 5,
                                                 "until": "kept"})
        out["unknown"] = await c.call_tool("job", {"id": "job-77"})
        return out

    r = run_client(cordon_bin, workspace, mode, body)
    assert r["start"].structured_content["job"]["state"] == "running"
    ready = r["ready"].structured_content["output"] + r["start"].structured_content["stdout"]
    assert "Serving HTTP" in ready
    assert r["curl"].structured_content["stdout"] == "200"
    assert r["stop"].structured_content["job"]["state"] == "killed", repr(r["stop"].structured_content)
    assert "kept" in r["value"].structured_content["output"]
    assert err(r["unknown"]) == "invalid_argument"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_sdk_unknown_tool_raises_protocol_error(cordon_bin, workspace, mode):
    async def body(c):
        with pytest.raises(MCPError) as info:
            await c.call_tool("no_such_tool", {})
        # and the session is still usable
        ok = await c.call_tool("shell_exec", {"command": "echo alive"})
        return info.value, ok

    e, ok = run_client(cordon_bin, workspace, mode, body)
    assert "not found" in str(e)
    assert ok.structured_content["stdout"] == "alive\n"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_sdk_progress_callback_receives_progress(cordon_bin, workspace, mode):
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    async def body(c):
        return await c.call_tool("shell_exec", {"command": "sleep 3; echo done"},
                                 progress_callback=on_progress)

    r = run_client(cordon_bin, workspace, mode, body)
    assert r.structured_content["stdout"] == "done\n"
    assert len(seen) >= 2, seen


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_sdk_long_output_spill_is_readable_back(cordon_bin, workspace, mode):
    async def body(c):
        r = await c.call_tool("shell_exec", {"command": "seq 1 5000"})
        back = await c.call_tool("read_file", {"path": r.structured_content["full_output"],
                                               "offset": 4999})
        return r, back

    r, back = run_client(cordon_bin, workspace, mode, body)
    assert r.structured_content["truncated"] is True
    assert back.structured_content["content"] == "4999\n5000\n"
    assert back.structured_content["total_lines"] == 5000


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_sdk_exit_closes_server_and_leaves_no_process(cordon_bin, workspace, mode):
    from conftest import pids_with_argv, wait_until
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

    assert run_client(cordon_bin, workspace, mode, body) is True
    assert wait_until(lambda: pids_with_argv(marker) == [], timeout=5), pids_with_argv(marker)
