"""Raw JSON-RPC checks of cordon's MCP surface that an SDK would hide.

Guards SPEC.md "The server": both protocol generations (initialize handshake and stateless
2026-07-28 with `server/discover`, per-request `_meta`, -32022 with the supported list,
`resultType: "complete"`), JSON-RPC errors for malformed requests / unknown methods / unknown
tools, `isError` + `structuredContent.error.kind == "invalid_argument"` for bad arguments, and
that the server keeps serving after each of these and never writes anything but JSON-RPC on
stdout (checked for every line by the `start_server` fixture's teardown).
"""

from __future__ import annotations

import time

import pytest

from conftest import CAPS_KEY, LEGACY, MODERN, PV_KEY, error_kind, ok

ALL_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
TOOLS = {"shell_exec", "write_file", "edit_file", "read_file"}


def assert_still_serving(server) -> None:
    r = server.request("tools/list")
    assert {t["name"] for t in r["tools"]} >= TOOLS


def test_server_discover_lists_all_supported_versions_and_tools_capability(start_server):
    s = start_server(mode=None)
    r = s.request("server/discover", {}, meta={PV_KEY: MODERN, CAPS_KEY: {}})
    assert r["resultType"] == "complete"
    assert r["supportedVersions"] == ALL_VERSIONS
    assert "tools" in r["capabilities"]
    assert r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "cordon"
    assert "sandbox" in r["instructions"]


def test_unsupported_protocol_version_in_meta_is_error_32022_with_supported_list(start_server):
    s = start_server(mode=None)
    msg = s.request_raw("tools/list", {}, meta={PV_KEY: "2099-01-01", CAPS_KEY: {}})
    err = msg["error"]
    assert err["code"] == -32022
    assert err["data"]["requested"] == "2099-01-01"
    assert err["data"]["supported"] == ALL_VERSIONS
    # a correct request on the same stream still works
    s.mode = "modern"
    assert_still_serving(s)


def test_modern_results_carry_result_type_complete(server):
    listed = server.request("tools/list")
    assert listed["resultType"] == "complete"
    called = server.call("shell_exec", {"command": "true"})
    assert called["resultType"] == "complete"
    failed = server.call("shell_exec", {"command": "exit 4"})
    assert failed["resultType"] == "complete" and failed["isError"] is True


def test_legacy_initialize_negotiates_and_omits_result_type(start_server):
    s = start_server(mode="legacy")
    listed = s.request("tools/list")
    assert "resultType" not in listed
    called = s.call("shell_exec", {"command": "echo legacy"})
    assert "resultType" not in called
    assert ok(called)["stdout"] == "legacy\n"


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_initialize_accepts_every_handshake_revision(start_server, version):
    s = start_server(mode=None)
    r = s.request("initialize", {"protocolVersion": version, "capabilities": {},
                                 "clientInfo": {"name": "e2e", "version": "0"}})
    assert r["protocolVersion"] == version
    assert r["serverInfo"]["name"] == "cordon"
    s.notify("notifications/initialized")
    assert_still_serving(s)


def test_initialize_naming_2026_is_negotiated_down_to_latest_handshake_revision(start_server):
    s = start_server(mode=None)
    r = s.request("initialize", {"protocolVersion": MODERN, "capabilities": {},
                                 "clientInfo": {"name": "e2e", "version": "0"}})
    assert r["protocolVersion"] == LEGACY


def test_modern_request_missing_required_meta_is_invalid_params(start_server):
    s = start_server(mode=None)
    msg = s.request_raw("tools/list", {}, meta={PV_KEY: MODERN})  # no clientCapabilities
    assert msg["error"]["code"] == -32602


def test_malformed_json_line_is_answered_with_parse_error(server):
    # rmcp itself ignores unparsable lines (rust-sdk#938); cordon's framing layer answers them.
    server.send_raw(b'{"jsonrpc":"2.0","id":77,"method":"tools/list",\n')
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        with server.cond:
            errs = [r for r in server.orphan_errors if r.get("error", {}).get("code") == -32700]
        if errs:
            assert "id" in errs[0] and errs[0]["id"] is None, errs
            return
        time.sleep(0.05)
    pytest.fail("no -32700 parse error for a malformed JSON line")


def test_server_keeps_serving_after_malformed_json_line(server):
    server.send_raw(b'{"jsonrpc":"2.0","id":77,"method":\n')
    server.send_raw(b"this is not json at all\n")
    assert_still_serving(server)
    assert server.alive()


def test_json_that_is_not_a_jsonrpc_message_is_invalid_request(server):
    server.send_raw(b'{"hello": "world"}\n')
    server.send_raw(b'[1, 2]\n')
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with server.cond:
            errors = list(server.orphan_errors)
        if len(errors) >= 2:
            break
        time.sleep(0.05)
    assert len(errors) == 2, f"expected two Invalid Request errors, got {errors!r}"
    assert all(e["error"]["code"] == -32600 for e in errors), errors
    assert all("id" in e and e["id"] is None for e in errors), errors
    assert_still_serving(server)


@pytest.mark.parametrize("mode", ["legacy", "modern"])
def test_unknown_method_is_method_not_found(start_server, mode):
    s = start_server(mode=mode)
    msg = s.request_raw("tools/frobnicate", {})
    assert msg["error"]["code"] == -32601
    assert_still_serving(s)


@pytest.mark.parametrize("mode", ["legacy", "modern"])
def test_unknown_tool_is_jsonrpc_error_not_result(start_server, mode):
    s = start_server(mode=mode)
    msg = s.request_raw("tools/call", {"name": "rm_rf", "arguments": {}})
    assert "result" not in msg
    assert msg["error"]["code"] in (-32602, -32601)
    assert "not found" in msg["error"]["message"]
    assert_still_serving(s)


BAD_ARGUMENTS = [
    pytest.param("read_file", {"path": "a.txt", "offset": "three"}, id="wrong-type"),
    pytest.param("read_file", {"path": "exists.txt", "offset": 0}, id="below-minimum"),
    pytest.param("shell_exec", {"command": "true", "shell": "bash"}, id="unknown-field"),
    pytest.param("write_file", {"content": "x"}, id="missing-required"),
    pytest.param("edit_file", {"path": "a.txt", "edits": []}, id="empty-edits"),
    pytest.param("edit_file", {"path": "a.txt",
                               "edits": [{"old_string": "a", "new_string": "b", "x": 1}]},
                 id="unknown-nested-field"),
    pytest.param("shell_exec", {"command": "true", "timeout_secs": 100000}, id="timeout-above-max"),
    pytest.param("shell_exec", {"command": "true", "timeout_secs": -1}, id="negative-timeout"),
    pytest.param("shell_exec", {"command": "true", "env": {"A": 1}}, id="env-non-string"),
    pytest.param("write_file", {"path": "a\u0000b", "content": "x"}, id="nul-in-path"),
    pytest.param("shell_exec", {"command": "echo a\u0000b"}, id="nul-in-command"),
    pytest.param("read_file", {"path": "a\u0000"}, id="nul-in-read-path"),
    pytest.param("shell_exec", {"command": "x" * (5 << 20)}, id="5MB-command"),
    pytest.param("shell_exec", {"command": "true", "env": {"BIG": "v" * (5 << 20)}},
                 id="5MB-env-value"),
    pytest.param("write_file", {"path": "p" * (5 << 20), "content": "x"}, id="5MB-path"),
    pytest.param("read_file", {"path": "d/" + "n" * 300}, id="overlong-name"),
    pytest.param("shell_exec", {"command": "true", "zz": "z" * (5 << 20)}, id="5MB-unknown-field"),
]


@pytest.mark.parametrize("tool,arguments", BAD_ARGUMENTS)
def test_bad_arguments_are_invalid_argument_results_and_server_keeps_serving(server, workspace,
                                                                             tool, arguments):
    (workspace / "exists.txt").write_text("one\ntwo\n")
    r = server.call(tool, arguments)
    assert error_kind(r) == "invalid_argument", str(r["structuredContent"])[:2000]
    # the message and text block are meant for a model: short, even for a 5 MB argument
    assert len(r["structuredContent"]["error"]["message"]) < 2000
    assert len(r["content"][0]["text"]) < 2000
    assert_still_serving(server)


def test_nul_bytes_in_file_content_are_written_not_refused(server, workspace):
    r = server.call("write_file", {"path": "nul.bin", "content": "a\u0000b"})
    assert ok(r)["bytes"] == 3
    assert (workspace / "nul.bin").read_bytes() == b"a\x00b"


def test_5mb_content_and_stdin_arguments_are_accepted(server, workspace):
    big = "0123456789abcdef" * (5 << 16)  # 5 MiB
    r = server.call("write_file", {"path": "big.txt", "content": big})
    assert ok(r)["bytes"] == len(big)
    assert (workspace / "big.txt").read_text() == big
    r = server.call("shell_exec", {"command": "wc -c", "stdin": big})
    assert ok(r)["stdout"].strip() == str(len(big))


def test_line_over_16_mib_is_answered_and_server_keeps_serving(server):
    rid = server.start("tools/call", {"name": "write_file",
                                      "arguments": {"path": "huge.txt", "content": "h" * (17 << 20)}})
    assert_still_serving(server)
    # Not processed, but answered with the request's own id so the client is not left waiting.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with server.cond:
            answered = server.responses.get(rid)
        if answered is not None:
            break
        time.sleep(0.05)
    assert answered is not None, "the oversized request got no answer"
    assert answered["error"]["code"] == -32600
    assert "longer than" in answered["error"]["message"]
    assert not (server.workspace / "huge.txt").exists()


def test_stdout_carries_only_jsonrpc_even_when_commands_print(server):
    # A command writing to the server's own stdout would corrupt the stream; the command's
    # output must come back inside the result instead.
    r = server.call("shell_exec", {"command": "echo to-stdout; echo to-stderr >&2; "
                                              "(echo to-tty > /dev/tty) 2>/dev/null; true"})
    sc = ok(r)
    assert sc["stdout"] == "to-stdout\n" and sc["stderr"] == "to-stderr\n"
    server.call("write_file", {"path": "x.py", "content": "print('hi')\n"})
    server.close()
    server.assert_stdout_clean()
    with server.cond:
        assert server.eof  # every line up to the server's exit was read and parsed
