"""Process lifecycle of cordon serve under a real client: crashes, cancellation, disconnects,
progress and concurrency.

Guards SPEC.md's atomic-write promise under SIGKILL of the server mid-write, "no process it
started is left running" for cancelled calls and for a client that disconnects (the server
then exits 0), progress notifications for a request with a progressToken, that requests are
served while a command runs, and that calls beyond `server.max_concurrent_calls` wait their
turn and all complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path

import pytest

from conftest import ok, pids_with_argv, wait_until


def unique_sleep(seconds: int = 30) -> str:
    """A sleep whose argv is unique to this test run, so /proc can find exactly its process."""
    frac = str(uuid.uuid4().int % 10**6).rjust(6, "0")
    return f"sleep {seconds}.{frac}"


# --- SIGKILL mid-write --------------------------------------------------------------------------

def _tempfile_fd_open(pid: int, workspace: Path) -> bool:
    """True while the server holds an fd on a not-yet-renamed file in the workspace (an
    O_TMPFILE shows as `<dir>/#<ino> (deleted)`, a named temporary file by its name)."""
    root = os.path.realpath(workspace)
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(root + "/") and not target.endswith("/big.txt") \
                    and "/.cordon" not in target:
                return True
    except OSError:
        pass
    return False


def test_sigkill_mid_write_leaves_old_or_new_content_never_partial(start_server, workspace):
    old = b"old content line\n" * 60_000                  # ~1 MB
    new = "N" * (15 << 20)                                # 15 MiB: under rmcp's 16 MiB line cap
    new_digest = hashlib.sha256(new.encode()).hexdigest()
    old_digest = hashlib.sha256(old).hexdigest()
    target = workspace / "big.txt"
    report = []
    caught_in_flight = 0
    for attempt in range(10):
        target.write_bytes(old)
        s = start_server("modern")
        s.call("shell_exec", {"command": "true"})  # server fully up
        line = (json.dumps({"jsonrpc": "2.0", "id": "w", "method": "tools/call",
                            "params": {"name": "write_file",
                                       "arguments": {"path": "big.txt", "content": new},
                                       "_meta": s.meta()}}) + "\n").encode()
        s.send_raw(line)
        if attempt < 6:
            # kill the moment the temporary file is open (the write is in flight)
            seen = wait_until(lambda: _tempfile_fd_open(s.proc.pid, workspace) or not s.alive()
                              or "w" in s.responses, timeout=10, interval=0.001)
            in_flight = seen and _tempfile_fd_open(s.proc.pid, workspace)
            if attempt % 2:
                time.sleep(0.01 * attempt)  # and a bit later, into the write / fsync / rename
        else:
            time.sleep(0.03 * (attempt - 5))
            in_flight = _tempfile_fd_open(s.proc.pid, workspace)
        s.kill()
        caught_in_flight += bool(in_flight)
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        assert digest in (old_digest, new_digest), (
            f"attempt {attempt}: big.txt is neither old nor new ({target.stat().st_size} bytes)")
        # .cordon (outputs) and .cordon-home (the calls' persistent HOME) are the server's own;
        # an empty .git is the git shadow's mount point in a workspace without a repository
        # (git ignores an empty .git), and must stay empty.
        git = workspace / ".git"
        assert not git.exists() or (git.is_dir() and not git.is_symlink()
                                    and list(git.iterdir()) == []), list(git.iterdir())
        leftovers = sorted(p.name for p in workspace.iterdir()
                           if p.name not in ("big.txt", ".cordon", ".cordon-home", ".git"))
        report.append((attempt, in_flight, "new" if digest == new_digest else "old", leftovers))
        assert leftovers == [], f"temporary files left behind after SIGKILL: {report}"
    print("sigkill attempts (attempt, killed with temp file open, content, leftovers):", report)
    assert caught_in_flight >= 1, f"never killed the server while the write was in flight: {report}"


# --- cancellation and disconnect ----------------------------------------------------------------

@pytest.mark.parametrize("mode", ["legacy", "modern"])
def test_cancelled_shell_exec_kills_its_process_tree(start_server, mode):
    s = start_server(mode)
    sleeper = unique_sleep()
    # a background job and a setsid daemon too: all of the call's processes must go
    rid = s.start("tools/call", {"name": "shell_exec", "arguments": {
        "command": f"({sleeper} &) ; setsid {sleeper} & {sleeper}", "timeout_secs": 120}})
    assert wait_until(lambda: len(pids_with_argv(sleeper)) >= 3, timeout=10), \
        pids_with_argv(sleeper)
    s.notify("notifications/cancelled", {"requestId": rid, "reason": "user pressed stop"})
    assert wait_until(lambda: pids_with_argv(sleeper) == [], timeout=3), \
        f"still running 3 s after cancel: {pids_with_argv(sleeper)}"
    # the server keeps serving after a cancellation
    assert ok(s.call("shell_exec", {"command": "echo after"}))["stdout"] == "after\n"
    assert s.alive()


@pytest.mark.parametrize("mode", ["legacy", "modern"])
def test_client_disconnect_mid_command_exits_cleanly_and_kills_the_tree(start_server, mode):
    s = start_server(mode)
    sleeper = unique_sleep()
    s.start("tools/call", {"name": "shell_exec", "arguments": {
        "command": f"setsid {sleeper} & {sleeper}", "timeout_secs": 120}})
    assert wait_until(lambda: len(pids_with_argv(sleeper)) >= 2, timeout=10)
    started = time.monotonic()
    rc = s.close(timeout=15)
    assert rc == 0, s.stderr_text()[-2000:]
    assert time.monotonic() - started < 10
    assert wait_until(lambda: pids_with_argv(sleeper) == [], timeout=3), pids_with_argv(sleeper)


def test_timeout_kills_background_and_setsid_children(server):
    sleeper = unique_sleep()
    r = server.call("shell_exec", {"command": f"setsid {sleeper} & ({sleeper} &); {sleeper}",
                                   "timeout_secs": 1})
    assert r["structuredContent"]["timed_out"] is True
    assert pids_with_argv(sleeper) == []


def test_finished_call_leaves_no_background_process(server):
    sleeper = unique_sleep()
    sc = ok(server.call("shell_exec", {"command": f"setsid {sleeper} > /dev/null 2>&1 & echo started"}))
    assert sc["stdout"] == "started\n"
    assert wait_until(lambda: pids_with_argv(sleeper) == [], timeout=3), pids_with_argv(sleeper)


# --- progress and concurrency -------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["legacy", "modern"])
def test_progress_token_streams_progress_during_a_3s_command(start_server, mode):
    s = start_server(mode)
    token = f"tok-{mode}"
    r = s.call("shell_exec", {"command": "echo one; sleep 1.5; echo two; sleep 1.5; echo three"},
               meta={"progressToken": token})
    assert ok(r)["stdout"] == "one\ntwo\nthree\n"
    progress = s.progress_for(token)
    assert len(progress) >= 2, progress
    values = [p["progress"] for p in progress]
    assert values == sorted(values) and values[-1] > values[0]
    assert all(isinstance(p.get("message"), str) for p in progress)
    # no progress for a request without a token
    assert all(n["params"].get("progressToken") == token for n in s.notifications
               if n.get("method") == "notifications/progress")


def test_requests_are_answered_while_a_command_runs(server):
    sleeper = unique_sleep()
    rid = server.start("tools/call", {"name": "shell_exec",
                                      "arguments": {"command": sleeper, "timeout_secs": 120}})
    assert wait_until(lambda: pids_with_argv(sleeper) != [], timeout=10)
    t = time.monotonic()
    listed = server.request("tools/list", timeout=15)
    assert {tool["name"] for tool in listed["tools"]} >= {"shell_exec", "read_file"}
    (server.workspace / "r.txt").write_text("r\n")
    assert ok(server.call("read_file", {"path": "r.txt"}, timeout=15))["content"] == "r\n"
    assert time.monotonic() - t < 15
    with server.cond:
        assert rid not in server.responses  # the sleep is still running
    server.notify("notifications/cancelled", {"requestId": rid})
    assert wait_until(lambda: pids_with_argv(sleeper) == [], timeout=5)


def test_calls_beyond_max_concurrent_calls_wait_their_turn_and_all_complete(start_server,
                                                                           workspace, tmp_path):
    policy = tmp_path / "two-at-once.toml"
    policy.write_text('name = "two-at-once"\n[server]\nmax_concurrent_calls = 2\n')
    s = start_server("modern", extra_args=["--policy", str(policy)])
    n = 6
    ids = [s.start("tools/call", {"name": "shell_exec", "arguments": {
        "command": f"date +%s%N > t{i}.start; sleep 1; date +%s%N > t{i}.end; echo call {i}"}})
        for i in range(n)]
    results = [s.wait(rid, timeout=60)["result"] for rid in ids]
    for i, r in enumerate(results):
        assert ok(r)["stdout"] == f"call {i}\n"
    spans = [(int((workspace / f"t{i}.start").read_text()), int((workspace / f"t{i}.end").read_text()))
             for i in range(n)]
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak == 2, f"expected exactly 2 commands at once at the peak, saw {peak}: {spans}"
