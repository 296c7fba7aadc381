"""Every tool's success and error paths over a real stdio MCP connection, per SPEC.md.

Guards "Tools" (shell_exec, write_file, edit_file, read_file: their output fields and isError
rules), "Paths" (workspace rooting, `..` / absolute / outward-symlink escapes refused as
`path_escape`, absolute-inside accepted and shown relative, including under a concurrent
directory-for-symlink swap), protected paths (`denied`), "Lint feedback" (the `lint` object) and
"Long output" (head/tail + marker + spill under a git-ignored `.cordon/outputs/`).
"""

from __future__ import annotations

import ctypes
import os
import stat
import threading
from pathlib import Path

import pytest

from conftest import error_kind, ok, pids_with_argv

SHELL_FIELDS = {"exit_code", "signal", "timed_out", "stdout", "stderr", "truncated",
                "full_output", "duration_ms"}


# --- shell_exec ---------------------------------------------------------------------------------

def test_shell_exec_success_fills_every_output_field(server):
    r = server.call("shell_exec", {"command": "echo out; echo err >&2"})
    sc = ok(r)
    assert SHELL_FIELDS <= set(sc)
    assert sc["exit_code"] == 0 and sc["signal"] is None and sc["timed_out"] is False
    assert sc["stdout"] == "out\n" and sc["stderr"] == "err\n"
    assert sc["truncated"] is False and sc["full_output"] is None
    assert isinstance(sc["duration_ms"], int) and sc["duration_ms"] >= 0
    assert "out" in r["content"][0]["text"]


def test_shell_exec_nonzero_exit_is_exit_status_error_with_fields_filled(server):
    r = server.call("shell_exec", {"command": "echo partial; echo bad >&2; exit 7"})
    assert error_kind(r) == "exit_status"
    sc = r["structuredContent"]
    assert sc["exit_code"] == 7 and sc["signal"] is None and sc["timed_out"] is False
    assert sc["stdout"] == "partial\n" and sc["stderr"] == "bad\n"


def test_shell_exec_killed_by_signal_reports_signal_name_and_null_exit_code(server):
    r = server.call("shell_exec", {"command": "kill -9 $$"})
    assert r["isError"] is True
    sc = r["structuredContent"]
    assert sc["exit_code"] is None and sc["signal"] == "SIGKILL"


def test_shell_exec_timeout_is_timeout_error_and_kills_the_command(server):
    r = server.call("shell_exec", {"command": "echo started; sleep 30.517", "timeout_secs": 1})
    assert error_kind(r) == "timeout"
    sc = r["structuredContent"]
    assert sc["timed_out"] is True and sc["exit_code"] is None
    assert sc["stdout"] == "started\n"
    assert 900 <= sc["duration_ms"] < 10_000
    assert pids_with_argv("sleep 30.517") == []


def test_shell_exec_long_output_is_cut_to_head_and_tail_with_full_spill(server, workspace):
    r = server.call("shell_exec", {"command": "seq 1 1000; seq 1 3 >&2"})
    sc = ok(r)
    assert sc["truncated"] is True
    lines = sc["stdout"].splitlines()
    assert lines[:50] == [str(i) for i in range(1, 51)]
    assert lines[-50:] == [str(i) for i in range(951, 1001)]
    marker = [line for line in lines[50:-50]]
    assert len(marker) == 1, marker
    full = sc["full_output"]
    assert full.startswith(".cordon/outputs/") and not os.path.isabs(full)
    assert "900" in marker[0] and full in marker[0]
    assert (workspace / full).read_text() == "".join(f"{i}\n" for i in range(1, 1001))
    assert sc["stderr"] == "1\n2\n3\n"  # the short stream is untouched
    gitignore = (workspace / ".cordon" / ".gitignore").read_text().splitlines()
    assert "*" in gitignore
    # the spilled file is readable back through read_file (the agent's way to get at it)
    back = ok(server.call("read_file", {"path": full, "offset": 500, "limit": 2}))
    assert back["content"] == "500\n501\n"


def test_shell_exec_long_single_line_output_is_cut_by_characters(server, workspace):
    r = server.call("shell_exec", {"command": "head -c 50000 /dev/zero | tr '\\0' a"})
    sc = ok(r)
    assert sc["truncated"] is True and len(sc["stdout"]) < 50000
    assert (workspace / sc["full_output"]).read_text() == "a" * 50000


def test_shell_exec_cwd_is_rooted_in_the_workspace(server, workspace):
    (workspace / "sub" / "deeper").mkdir(parents=True)
    sc = ok(server.call("shell_exec", {"command": "pwd", "cwd": "sub/deeper"}))
    assert os.path.realpath(sc["stdout"].strip()) == os.path.realpath(workspace / "sub" / "deeper")
    sc = ok(server.call("shell_exec", {"command": "pwd"}))
    assert os.path.realpath(sc["stdout"].strip()) == os.path.realpath(workspace)
    sc = ok(server.call("shell_exec", {"command": "pwd", "cwd": str(workspace / "sub")}))
    assert os.path.realpath(sc["stdout"].strip()) == os.path.realpath(workspace / "sub")


@pytest.mark.parametrize("cwd", ["..", "sub/../..", "/tmp", "/"])
def test_shell_exec_cwd_outside_is_path_escape(server, workspace, cwd):
    (workspace / "sub").mkdir()
    assert error_kind(server.call("shell_exec", {"command": "pwd", "cwd": cwd})) == "path_escape"


def test_shell_exec_cwd_missing_is_not_found(server):
    assert error_kind(server.call("shell_exec", {"command": "pwd", "cwd": "nope"})) == "not_found"


def test_shell_exec_env_is_merged_over_a_scrubbed_environment(start_server):
    s = start_server(env={"CORDON_E2E_SECRET": "leak-me"})
    sc = ok(s.call("shell_exec", {"command": "env", "env": {"FOO": "bar baz", "PATH": "/usr/bin:/bin"}}))
    env = dict(line.split("=", 1) for line in sc["stdout"].splitlines() if "=" in line)
    assert env["FOO"] == "bar baz"
    assert env["PATH"] == "/usr/bin:/bin"  # caller's value wins over the policy's
    assert "CORDON_E2E_SECRET" not in env  # the server's own environment is not passed through
    assert env.get("HOME") and env.get("TMPDIR")  # the policy's set variables are there


def test_shell_exec_stdin_is_fed_and_closed(server):
    sc = ok(server.call("shell_exec", {"command": "cat; echo done", "stdin": "line1\nline2\n"}))
    assert sc["stdout"] == "line1\nline2\ndone\n"
    # without stdin the command sees EOF at once instead of the MCP stream
    sc = ok(server.call("shell_exec", {"command": "cat; echo eof", "timeout_secs": 5}))
    assert sc["stdout"] == "eof\n"


def test_shell_exec_cannot_write_outside_the_workspace(server, tmp_path):
    outside = tmp_path / "outside.txt"
    r = server.call("shell_exec", {"command": f"echo x > {outside}"})
    assert r["isError"] is True
    assert not outside.exists()


# --- paths ----------------------------------------------------------------------------------------

@pytest.fixture
def outward_link(workspace: Path, tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (workspace / "a").mkdir()  # so `a/../..` climbs out rather than failing on a missing `a`
    (workspace / "link").symlink_to("../outside")
    (workspace / "abslink").symlink_to(outside)
    return outside


@pytest.mark.parametrize("path", ["../outside/secret.txt", "a/../../outside/secret.txt",
                                  "link/secret.txt", "abslink/secret.txt", "/etc/passwd",
                                  "OUTSIDE_ABS"])
def test_read_file_escapes_are_path_escape(server, outward_link, path):
    if path == "OUTSIDE_ABS":
        path = str(outward_link / "secret.txt")
    r = server.call("read_file", {"path": path})
    assert error_kind(r) == "path_escape"
    assert "secret" not in r["structuredContent"].get("content", "")


@pytest.mark.parametrize("path", ["../outside/new.txt", "link/new.txt", "abslink/new.txt",
                                  "OUTSIDE_ABS"])
def test_write_file_escapes_are_path_escape_and_write_nothing(server, outward_link, path):
    if path == "OUTSIDE_ABS":
        path = str(outward_link / "new.txt")
    r = server.call("write_file", {"path": path, "content": "pwned"})
    assert error_kind(r) == "path_escape"
    assert sorted(p.name for p in outward_link.iterdir()) == ["secret.txt"]


def test_write_file_through_final_outward_symlink_is_path_escape(server, workspace, outward_link):
    (workspace / "victim.txt").symlink_to("../outside/secret.txt")
    r = server.call("write_file", {"path": "victim.txt", "content": "pwned"})
    assert error_kind(r) == "path_escape"
    assert (outward_link / "secret.txt").read_text() == "secret\n"


def test_edit_file_through_outward_symlink_is_path_escape(server, outward_link):
    r = server.call("edit_file", {"path": "link/secret.txt",
                                  "edits": [{"old_string": "secret", "new_string": "pwned"}]})
    assert error_kind(r) == "path_escape"
    assert (outward_link / "secret.txt").read_text() == "secret\n"


def test_absolute_path_inside_workspace_is_accepted_and_shown_relative(server, workspace):
    sc = ok(server.call("write_file", {"path": str(workspace / "d" / "a.txt"), "content": "hi\n"}))
    assert sc["path"] == "d/a.txt"
    sc = ok(server.call("read_file", {"path": str(workspace / "d" / "a.txt")}))
    assert sc["path"] == "d/a.txt" and sc["content"] == "hi\n"
    sc = ok(server.call("edit_file", {"path": str(workspace / "d" / "a.txt"),
                                      "edits": [{"old_string": "hi", "new_string": "ho"}]}))
    assert sc["path"] == "d/a.txt"


def test_inward_symlink_is_followed(server, workspace):
    (workspace / "real").mkdir()
    (workspace / "real" / "f.txt").write_text("inside\n")
    (workspace / "alias").symlink_to("real")
    assert ok(server.call("read_file", {"path": "alias/f.txt"}))["content"] == "inside\n"


@pytest.mark.parametrize("tool,args", [
    ("read_file", {"path": "missing.txt"}),
    ("edit_file", {"path": "missing.txt", "edits": [{"old_string": "a", "new_string": "b"}]}),
    ("write_file", {"path": "no/dir/f.txt", "content": "x", "create_dirs": False}),
])
def test_missing_paths_are_not_found(server, tool, args):
    assert error_kind(server.call(tool, args)) == "not_found"


_libc = ctypes.CDLL(None, use_errno=True)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> None:
    if _libc.renameat2(_AT_FDCWD, bytes(a), _AT_FDCWD, bytes(b), _RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def test_directory_swapped_for_outward_symlink_during_writes_never_writes_outside(
        server, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "d").mkdir()
    (workspace / "swap").symlink_to("../outside")
    stop = threading.Event()
    swaps = 0

    def swapper():
        nonlocal swaps
        while not stop.is_set():
            _exchange(workspace / "d", workspace / "swap")  # atomic: `d` always exists
            swaps += 1

    t = threading.Thread(target=swapper, daemon=True)
    t.start()
    outcomes: dict[str, int] = {}
    written = []
    try:
        for i in range(300):
            r = server.call("write_file", {"path": f"d/f{i}.txt", "content": f"{i}\n"})
            if r.get("isError"):
                kind = r["structuredContent"]["error"]["kind"]
            else:
                kind = "ok"
                written.append(i)
            outcomes[kind] = outcomes.get(kind, 0) + 1
            assert list(outside.iterdir()) == [], f"write landed outside after {outcomes}"
            if i >= 100 and outcomes.get("ok") and outcomes.get("path_escape"):
                break
    finally:
        stop.set()
        t.join(5)
    assert list(outside.iterdir()) == []
    assert swaps > 0
    assert set(outcomes) <= {"ok", "path_escape", "not_found", "io"}, outcomes
    # the race was really exercised: some writes hit the directory, some hit the symlink
    assert outcomes.get("ok") and outcomes.get("path_escape"), outcomes
    real = workspace / "d" if (workspace / "d").is_dir() and not (workspace / "d").is_symlink() \
        else workspace / "swap"
    for i in written:
        assert (real / f"f{i}.txt").read_text() == f"{i}\n"


# --- write_file -------------------------------------------------------------------------------

def test_write_file_creates_then_replaces_and_keeps_permission_bits(server, workspace):
    sc = ok(server.call("write_file", {"path": "new/dir/run.sh", "content": "echo héllo\n"}))
    assert sc == {**sc, "path": "new/dir/run.sh", "created": True, "bytes": len("echo héllo\n".encode())}
    f = workspace / "new" / "dir" / "run.sh"
    f.chmod(0o751)
    sc = ok(server.call("write_file", {"path": "new/dir/run.sh", "content": "echo bye\n"}))
    assert sc["created"] is False and sc["bytes"] == 9
    assert f.read_bytes() == b"echo bye\n"
    assert stat.S_IMODE(f.stat().st_mode) == 0o751


def test_write_file_to_protected_git_hooks_is_denied(server, workspace):
    (workspace / ".git" / "hooks").mkdir(parents=True)
    r = server.call("write_file", {"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\nevil\n"})
    assert error_kind(r) == "denied"
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    r = server.call("write_file", {"path": ".git/config", "content": "[core]\n"})
    assert error_kind(r) == "denied"


def test_edit_file_of_protected_path_is_denied(server, workspace):
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("[core]\n\tbare = false\n")
    r = server.call("edit_file", {"path": ".git/config",
                                  "edits": [{"old_string": "false", "new_string": "true"}]})
    assert error_kind(r) == "denied"
    assert (workspace / ".git" / "config").read_text() == "[core]\n\tbare = false\n"


def test_write_file_onto_a_directory_is_an_error(server, workspace):
    (workspace / "adir").mkdir()
    r = server.call("write_file", {"path": "adir", "content": "x"})
    assert r["isError"] is True
    assert (workspace / "adir").is_dir()


# --- edit_file ---------------------------------------------------------------------------------

FIDELITY = ("line one\r\n"
            "\tsaid \u201cquoted\u201d and \u2018single\u2019\r\n"
            "emoji \U0001F600 e\u0301 tail  \r\n"
            "last without newline")


def test_edit_file_preserves_crlf_curly_quotes_tabs_and_emoji_byte_for_byte(server, workspace):
    f = workspace / "fid.txt"
    f.write_bytes(FIDELITY.encode())
    sc = ok(server.call("edit_file", {"path": "fid.txt", "edits": [
        {"old_string": "\u201cquoted\u201d", "new_string": "\u201crequoted\u201d\t!"},
        {"old_string": "\U0001F600 e\u0301", "new_string": "\U0001F680 \u00e9"},
    ]}))
    assert sc["applied"] is True and sc["replacements"] == 2
    expected = FIDELITY.replace("\u201cquoted\u201d", "\u201crequoted\u201d\t!") \
                       .replace("\U0001F600 e\u0301", "\U0001F680 \u00e9")
    assert f.read_bytes() == expected.encode()
    assert f.read_bytes().count(b"\r\n") == 3


def test_edit_file_does_not_normalise_line_endings_or_quotes_when_matching(server, workspace):
    f = workspace / "fid.txt"
    f.write_bytes(FIDELITY.encode())
    for old in ["line one\n\tsaid", '"quoted"', "said  \u201cquoted", "\U0001F600 \u00e9"]:
        r = server.call("edit_file", {"path": "fid.txt",
                                      "edits": [{"old_string": old, "new_string": "X"}]})
        assert r["isError"] is True, old
    assert f.read_bytes() == FIDELITY.encode()


def test_edit_file_miss_shows_nearest_lines_and_says_nothing_changed(server, workspace):
    f = workspace / "app.py"
    f.write_text("def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b + 0\n")
    before = f.read_bytes()
    r = server.call("edit_file", {"path": "app.py", "edits": [
        {"old_string": "def add(a, b):", "new_string": "def add(x, y):"},   # would match
        {"old_string": "    return a -- b\n", "new_string": "    return a + b\n"},  # misses
    ]})
    kind = error_kind(r)
    assert kind == "invalid_argument"
    msg = r["structuredContent"]["error"]["message"]
    assert "nothing was changed" in msg
    assert "line 2" in msg and "return a - b" in msg
    assert f.read_bytes() == before  # all or nothing
    assert r["structuredContent"]["applied"] is False


def test_edit_file_ambiguous_match_is_an_error_and_replace_all_replaces_every_one(server, workspace):
    f = workspace / "dup.txt"
    f.write_text("x = 1\ny = 2\nx = 1\n")
    r = server.call("edit_file", {"path": "dup.txt",
                                  "edits": [{"old_string": "x = 1", "new_string": "x = 3"}]})
    assert r["isError"] is True
    assert "2" in r["structuredContent"]["error"]["message"]
    assert f.read_text() == "x = 1\ny = 2\nx = 1\n"
    sc = ok(server.call("edit_file", {"path": "dup.txt", "edits": [
        {"old_string": "x = 1", "new_string": "x = 3", "replace_all": True}]}))
    assert sc["replacements"] == 2 and sc["applied"] is True
    assert f.read_text() == "x = 3\ny = 2\nx = 3\n"


def test_edit_file_edits_apply_in_order_each_to_the_previous_result(server, workspace):
    f = workspace / "seq.txt"
    f.write_text("alpha\n")
    sc = ok(server.call("edit_file", {"path": "seq.txt", "edits": [
        {"old_string": "alpha", "new_string": "beta"},
        {"old_string": "beta", "new_string": "gamma"}]}))
    assert sc["replacements"] == 2
    assert f.read_text() == "gamma\n"


def test_edit_file_dry_run_returns_diff_and_leaves_file_unchanged(server, workspace):
    f = workspace / "dry.txt"
    f.write_text("keep\nold line\nkeep\n")
    mtime = f.stat().st_mtime_ns
    sc = ok(server.call("edit_file", {"path": "dry.txt", "dry_run": True, "edits": [
        {"old_string": "old line", "new_string": "new line"}]}))
    assert sc["applied"] is False and sc["replacements"] == 1
    assert "-old line" in sc["diff"] and "+new line" in sc["diff"]
    assert f.read_text() == "keep\nold line\nkeep\n" and f.stat().st_mtime_ns == mtime
    sc = ok(server.call("edit_file", {"path": "dry.txt", "edits": [
        {"old_string": "old line", "new_string": "new line"}]}))
    assert sc["applied"] is True and "-old line" in sc["diff"] and "+new line" in sc["diff"]
    assert f.read_text() == "keep\nnew line\nkeep\n"


# --- read_file ---------------------------------------------------------------------------------

def test_read_file_pages_with_offset_and_limit(server, workspace):
    (workspace / "ten.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    sc = ok(server.call("read_file", {"path": "ten.txt", "offset": 3, "limit": 4}))
    assert sc["content"] == "line 3\nline 4\nline 5\nline 6\n"
    assert (sc["start_line"], sc["end_line"], sc["total_lines"]) == (3, 6, 10)
    assert sc["truncated"] is True
    sc = ok(server.call("read_file", {"path": "ten.txt", "offset": 9}))
    assert sc["content"] == "line 9\nline 10\n"
    assert (sc["start_line"], sc["end_line"], sc["total_lines"], sc["truncated"]) == (9, 10, 10, False)
    sc = ok(server.call("read_file", {"path": "ten.txt"}))
    assert sc["content"] == (workspace / "ten.txt").read_text() and sc["truncated"] is False


def test_read_file_returns_crlf_and_unicode_byte_for_byte(server, workspace):
    (workspace / "fid.txt").write_bytes(FIDELITY.encode())
    sc = ok(server.call("read_file", {"path": "fid.txt"}))
    assert sc["content"].encode() == FIDELITY.encode()
    assert sc["total_lines"] == 4


def test_read_file_refuses_binary_files(server, workspace):
    (workspace / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02\xff\xfe")
    r = server.call("read_file", {"path": "blob.bin"})
    assert r["isError"] is True
    assert "binary" in r["structuredContent"]["error"]["message"]


def test_read_file_of_a_directory_is_an_error(server, workspace):
    (workspace / "adir").mkdir()
    assert server.call("read_file", {"path": "adir"})["isError"] is True


# --- lint --------------------------------------------------------------------------------------

def _check_lint_shape(lint: dict) -> None:
    assert lint["status"] in ("clean", "issues", "unavailable", "skipped")
    assert isinstance(lint["linters"], list) and all(isinstance(n, str) for n in lint["linters"])
    for d in lint["diagnostics"]:
        assert {"line", "column", "end_line", "end_column", "severity", "code", "message",
                "source", "introduced"} <= set(d)
        assert d["severity"] in ("error", "warning", "info")
        assert d["line"] >= 1 and d["column"] >= 1
        assert isinstance(d["introduced"], bool)


def test_write_file_lint_reports_introduced_syntax_errors(server):
    sc = ok(server.call("write_file", {"path": "bad.py", "content": "def f(:\n    pass\n"}))
    lint = sc["lint"]
    _check_lint_shape(lint)
    assert lint["status"] == "issues" and "syntax" in lint["linters"]
    syntax = [d for d in lint["diagnostics"] if d["source"] == "syntax"]
    assert syntax and syntax[0]["line"] == 1 and syntax[0]["severity"] == "error"
    assert all(d["introduced"] for d in lint["diagnostics"])


def test_edit_file_lint_marks_preexisting_diagnostics_not_introduced(server, workspace):
    (workspace / "m.py").write_text("def f(:\n    pass\n\nx = 1\n")
    sc = ok(server.call("edit_file", {"path": "m.py",
                                      "edits": [{"old_string": "x = 1", "new_string": "x = 2"}]}))
    lint = sc["lint"]
    _check_lint_shape(lint)
    assert lint["status"] == "issues"
    assert lint["diagnostics"] and not any(d["introduced"] for d in lint["diagnostics"])
    sc = ok(server.call("edit_file", {"path": "m.py",
                                      "edits": [{"old_string": "x = 2", "new_string": "x = (2"}]}))
    assert any(d["introduced"] and d["line"] >= 4 for d in sc["lint"]["diagnostics"])


def test_clean_file_lints_clean_and_unknown_type_is_skipped(server):
    sc = ok(server.call("write_file", {"path": "good.py", "content": "def f(a):\n    return a\n"}))
    _check_lint_shape(sc["lint"])
    assert sc["lint"]["status"] == "clean" and sc["lint"]["diagnostics"] == []
    sc = ok(server.call("write_file", {"path": "notes.unknownext", "content": "whatever ((\n"}))
    assert sc["lint"]["status"] == "skipped"
