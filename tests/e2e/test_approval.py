"""End to end: command rules that `ask`, answered by the official Python SDK client.

Runs `cordon serve` over stdio with the default policy and calls shell_exec with a command the
default rules ask about (`rm -rf ./*` in the workspace root, rule `rm-recursive-workspace`), in
both protocol lifecycles: legacy sessions (`initialize`, the server sends `elicitation/create`)
and 2026-07-28 sessions (the call answers `input_required` and the SDK retries with the answer).
The client accepts or declines; the test checks what ran, the result's shape and the audit log.

Self-contained on purpose (no conftest): other files in tests/e2e/ have their own fixtures.
Needs the debug binary: CORDON_BIN, else $CARGO_TARGET_DIR/debug/cordon, else target/debug/cordon.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import ElicitResult

REPO = pathlib.Path(__file__).resolve().parents[2]
ASK_RULE = "rm-recursive-workspace"
ASK_COMMAND = "rm -rf ./*"


def approval_cordon_bin() -> str:
    if os.environ.get("CORDON_BIN"):
        return os.environ["CORDON_BIN"]
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return str(target / "debug" / "cordon")


class ApprovalServer:
    """A workspace with one file, an audit log, and how to reach cordon on them."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="cordon-approval-")
        root = pathlib.Path(self._tmp.name)
        self.workspace = root / "ws"
        self.workspace.mkdir()
        (self.workspace / "keep.txt").write_text("precious\n")
        self.audit = root / "audit.jsonl"
        self.policy = "default"

    def use_policy(self, toml_text: str) -> None:
        path = self.workspace.parent / "policy.toml"
        path.write_text(toml_text)
        self.policy = str(path)

    def params(self) -> StdioServerParameters:
        return StdioServerParameters(
            command=approval_cordon_bin(),
            args=[
                "serve",
                "--workspace",
                str(self.workspace),
                "--audit-log",
                str(self.audit),
                "--policy",
                self.policy,
            ],
        )

    def records(self) -> list[dict]:
        if not self.audit.exists():
            return []
        return [json.loads(line) for line in self.audit.read_text().splitlines()]

    def decisions(self) -> list[str]:
        return [record["decision"] for record in self.records()]

    def close(self) -> None:
        self._tmp.cleanup()


@pytest.fixture
def approval_server():
    if not pathlib.Path(approval_cordon_bin()).exists():
        pytest.skip(f"cordon binary not built at {approval_cordon_bin()}")
    server = ApprovalServer()
    yield server
    server.close()


def answering(action: str, approve: bool | None, seen: list[str]):
    async def callback(_context, params):
        seen.append(params.message)
        if action == "accept":
            return ElicitResult(action="accept", content={"approve": approve})
        return ElicitResult(action=action)

    return callback


async def call(server: ApprovalServer, mode: str, callback, command: str = ASK_COMMAND):
    kwargs = {"elicitation_callback": callback} if callback else {}
    async with Client(server.params(), mode=mode, read_timeout_seconds=60, **kwargs) as client:
        return await client.call_tool("shell_exec", {"command": command})


MODES = ["legacy", "2026-07-28"]


@pytest.mark.parametrize("mode", MODES)
def test_accepted_ask_runs_the_command(approval_server, mode):
    seen: list[str] = []
    result = anyio.run(call, approval_server, mode, answering("accept", True, seen))
    assert len(seen) == 1, seen
    assert ASK_COMMAND in seen[0] and ASK_RULE in seen[0]
    assert not result.is_error, result
    assert result.structured_content["exit_code"] == 0
    assert not (approval_server.workspace / "keep.txt").exists()
    decisions = approval_server.decisions()
    assert f"ask:{ASK_RULE}:approved" in decisions
    # The 2026-07-28 lifecycle asks by answering `input_required` first; legacy asks inline.
    assert (f"ask:{ASK_RULE}:pending" in decisions) == (mode != "legacy"), decisions


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action,approve", [("decline", None), ("cancel", None), ("accept", False)])
def test_declined_ask_runs_nothing(approval_server, mode, action, approve):
    seen: list[str] = []
    result = anyio.run(call, approval_server, mode, answering(action, approve, seen))
    assert len(seen) == 1, seen
    assert result.is_error
    error = result.structured_content["error"]
    assert error["kind"] == "denied", error
    # A dismissed question (cancel) is told apart from a "no" (decline, or accept unticked).
    said = "dismissed" if action == "cancel" else "declined"
    outcome = "cancelled" if action == "cancel" else "declined"
    assert ASK_RULE in error["message"] and said in error["message"], error
    assert result.structured_content["exit_code"] is None
    assert (approval_server.workspace / "keep.txt").read_text() == "precious\n"
    assert f"ask:{ASK_RULE}:{outcome}" in approval_server.decisions()


@pytest.mark.parametrize("mode", MODES)
def test_an_unanswered_question_expires_after_the_policy_timeout(approval_server, mode):
    approval_server.use_policy('extends = "default"\n[server]\napproval_timeout_secs = 1\n')
    seen: list[str] = []

    async def slow(_context, params):
        seen.append(params.message)
        await anyio.sleep(2.5)
        return ElicitResult(action="accept", content={"approve": True})

    result = anyio.run(call, approval_server, mode, slow)
    assert result.is_error
    error = result.structured_content["error"]
    assert error["kind"] == "denied", error
    assert "within 1s" in error["message"] and "approval_timeout_secs" in error["message"], error
    assert (approval_server.workspace / "keep.txt").read_text() == "precious\n"
    assert f"ask:{ASK_RULE}:expired" in approval_server.decisions()


def test_audit_records_name_client_policy_and_enforcement(approval_server):
    seen: list[str] = []
    result = anyio.run(call, approval_server, "legacy", answering("decline", None, seen))
    assert result.is_error
    record = approval_server.records()[-1]
    assert record["client"]["name"], record
    assert record["policy"].startswith("default"), record
    assert record["enforcement"] in ("full", "reduced", "degraded"), record


@pytest.mark.parametrize("mode", MODES)
def test_a_client_that_cannot_be_asked_gets_a_denial_naming_the_rule(approval_server, mode):
    # With the operator channel listed (the default), such a call waits for the operator
    # (tests/it/operator_approvals.rs); with elicitation alone nobody can be asked.
    approval_server.use_policy('extends = "default"\n[server]\napprovals = ["elicitation"]\n')
    result = anyio.run(call, approval_server, mode, None)
    assert result.is_error
    error = result.structured_content["error"]
    assert error["kind"] == "denied"
    assert ASK_RULE in error["message"] and "commands.rules" in error["message"]
    assert (approval_server.workspace / "keep.txt").exists()
    assert f"ask:{ASK_RULE}:unavailable" in approval_server.decisions()


@pytest.mark.parametrize("mode", MODES)
def test_deny_rules_refuse_without_asking(approval_server, mode):
    seen: list[str] = []
    result = anyio.run(call, approval_server, mode, answering("accept", True, seen), "sudo rm -rf ~")
    assert seen == []
    assert result.is_error
    assert result.structured_content["error"]["kind"] == "denied"
    assert "rm-recursive-root-or-home" in result.structured_content["error"]["message"]
    assert "deny:rm-recursive-root-or-home" in approval_server.decisions()


def test_permission_errors_come_with_a_policy_explanation(approval_server):
    result = anyio.run(call, approval_server, "legacy", None, "ls /var")
    assert result.is_error
    error = result.structured_content["error"]
    assert error["kind"] == "exit_status"
    # From the kernel's own Landlock record where cordon reads it (root, Linux 6.15+), else from
    # the error message; the message says which, and so does each entry of `denials`.
    denial = result.structured_content["denials"][0]
    assert denial["path"] == "/var" and denial["policy_field"] == "not_granted", denial
    label = {
        "kernel": "from the kernel's Landlock audit record",
        "error_message": "explanation derived from the policy",
    }[denial["source"]]
    assert label in error["message"], error
    assert 'add "/var" to filesystem.read_exec' in error["message"], error


def test_forged_or_replayed_request_state_approves_nothing(approval_server):
    """requestState is attacker-controlled: a made-up handle, or a real one replayed for other
    arguments or a second time, must lead to a fresh question, never to a run."""
    accept = {"approve_command": {"action": "accept", "content": {"approve": True}}}

    async def scenario():
        async with Client(
            approval_server.params(), mode="2026-07-28", elicitation_callback=answering("accept", True, [])
        ) as client:
            session = client.session
            args = {"command": ASK_COMMAND}
            forged = await session.call_tool(
                "shell_exec", args, input_responses=accept, request_state="0" * 32, allow_input_required=True
            )
            assert getattr(forged, "result_type", None) == "input_required", forged
            handle = forged.request_state
            other = await session.call_tool(
                "shell_exec",
                {"command": "rm -rf ./* ; echo other"},
                input_responses=accept,
                request_state=handle,
                allow_input_required=True,
            )
            assert getattr(other, "result_type", None) == "input_required", other
            # The handle was spent by the mismatched retry: replaying it asks again too.
            replay = await session.call_tool(
                "shell_exec", args, input_responses=accept, request_state=handle, allow_input_required=True
            )
            assert getattr(replay, "result_type", None) == "input_required", replay

    anyio.run(scenario)
    assert (approval_server.workspace / "keep.txt").exists()
    assert not any(d.endswith(":approved") for d in approval_server.decisions())
