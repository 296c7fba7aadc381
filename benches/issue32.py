#!/usr/bin/env python3
"""Jobs as agents drive them (issue 32): a REPL round trip under a pty and a dev server's
start-to-ready, each against the same command run unconfined, in one interleaved run.

    python3 benches/issue32.py BINARY [ROUNDS]       (a release build: target/release/cordon;
                                                    ROUNDS defaults to 30)

One `cordon serve --workspace TMPDIR` (default policy) driven over stdio (newline-delimited
JSON-RPC). Every round measures each row confined and unconfined one right after the other
(which of the two goes first alternates from round to round), so machine noise hits both alike.
The unconfined side runs the same command string with `/bin/sh -c`, in the environment the
sandbox gives its commands (PATH, TERM, HOME, ... read once with `shell_exec env`), so the same
`python3` is found by the same lookup on both sides.

Rows:

* REPL round trip, `until`: one job `shell_exec {command: "exec python3 -i -q",
  background: true, pty: true, until: ">>> "}` is started once; each round times
  `job {id, input: "print(6*7)\\n", wait_secs: 10, until: ANSWER}`, from the request written to
  the answer read, and checks that the output holds `42`. ANSWER is `42`, CR LF, then the next
  `>>> ` prompt (with the bracketed-paste switch GNU readline writes before a prompt allowed).
  Unconfined: the same command in a pty of our own (os.openpty, the same 120x40 size, the
  child a session leader with the pty as its controlling terminal), timed from writing
  "print(6*7)\\n" to the master until ANSWER has been read back after it.
* REPL round trip, settle: the same `job` call without `until` (confined only: it returns once
  the output has been quiet for the default settle time, ~200 ms, so it measures that wait; the
  ratio printed is against the unconfined `until` row and is bound by the settle time, not by
  cordon's work).
* dev server start to ready: `shell_exec {command: "exec python3 -u -m http.server PORT --bind
  127.0.0.1", background: true, wait_secs: 30, until: "Serving HTTP"}` timed until its answer
  (checked: the job is running and the output has "Serving HTTP"); the job is then ended with
  `job {id, signal: "KILL", wait_secs: 5}`, untimed. Unconfined: the same command with stdout
  piped, timed from the spawn until the "Serving HTTP" line is read; then killed, untimed. A
  free port each time.
* dev server, interpreter path: the same pair with `python3` replaced by the interpreter it
  resolves to (`sys.executable`, asked inside the sandbox), so that a shim in front of it
  (pyenv's is a bash script that execs `pyenv exec`, ~100+ ms here) is left out of both sides.
* job read of the REPL with no new output: `job {id}` of the REPL job, confined only, as the
  floor of a `job` call's MCP round trip in the same run.

Printed: median, p10 and p90 in ms for each row, the ratio of medians confined/unconfined, the
load average before and after, and the commit (BENCH_COMMIT, else `git rev-parse HEAD` of the
current directory, said to be of the checkout and not checked against the binary).
"""

import fcntl
import os
import re
import select
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time

from mcp_stdio import StdioServer

COLS, ROWS = 120, 40
# 42, the line's end (CR LF from the terminal), then the next prompt; GNU readline may put its
# bracketed-paste switch (ESC [ ? 2004 h) before the prompt.
ANSWER = r"42\r?\n(?:\x1b\[\?2004h)?>>> "
ANSWER_RE = re.compile(ANSWER.encode())
INPUT = "print(6*7)\n"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server(StdioServer):
    def __init__(self, binary, ws):
        super().__init__(binary, ws, name="issue32-bench", protocol="2025-11-25")


def sandbox_env(s):
    """The environment the sandbox gives a command (for running the same command outside)."""
    sc = s.call("shell_exec", {"command": "env -0 | base64 -w0"})
    import base64
    raw = base64.b64decode(sc["stdout"])
    env = {}
    for item in raw.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            env[k.decode()] = v.decode()
    return env


def host_env(sbx):
    """The sandbox's PATH, TERM, locale and Python variables; HOME and TMPDIR only where they
    exist on the host (inside they may be paths of the sandbox's own view)."""
    env = {}
    for k, v in sbx.items():
        if k in ("HOME", "TMPDIR", "PWD", "OLDPWD") and not os.path.isdir(v):
            continue
        if k in ("PWD", "OLDPWD", "SHLVL", "_"):
            continue
        env[k] = v
    env.setdefault("HOME", os.environ.get("HOME", "/root"))
    return env


class Repl:
    """`python3 -i -q` in a pty of our own, unconfined."""

    def __init__(self, env, cwd):
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))

        def controlling_tty():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.p = subprocess.Popen(["/bin/sh", "-c", "exec python3 -i -q"], stdin=slave,
                                  stdout=slave, stderr=slave, start_new_session=True,
                                  preexec_fn=controlling_tty, env=env, cwd=cwd)
        os.close(slave)
        self.read_until(re.compile(rb">>> "), 30)

    def read_until(self, pattern, timeout):
        buf = b""
        deadline = time.monotonic() + timeout
        while not pattern.search(buf):
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"unconfined REPL: no {pattern.pattern!r} in {buf!r}")
            r, _, _ = select.select([self.master], [], [], left)
            if r:
                buf += os.read(self.master, 65536)
        return buf

    def round_trip(self):
        t = time.perf_counter()
        os.write(self.master, INPUT.encode())
        buf = self.read_until(ANSWER_RE, 10)
        ms = (time.perf_counter() - t) * 1000
        return ms, buf

    def close(self):
        os.killpg(self.p.pid, signal.SIGKILL)
        self.p.wait()
        os.close(self.master)


def server_command(port, python):
    return f"exec {python} -u -m http.server {port} --bind 127.0.0.1"


def unconfined_server(env, cwd, python="python3"):
    port = free_port()
    t = time.perf_counter()
    p = subprocess.Popen(["/bin/sh", "-c", server_command(port, python)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True)
    line = p.stdout.readline()
    ms = (time.perf_counter() - t) * 1000
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    p.stdout.close()
    if b"Serving HTTP" not in line:
        raise RuntimeError(f"unconfined server: {line!r}")
    return ms


def confined_server(s, python="python3"):
    port = free_port()
    ms, sc = s.timed("shell_exec", {"command": server_command(port, python), "background": True,
                                    "wait_secs": 30, "until": "Serving HTTP"})
    job = sc.get("job") or {}
    if job.get("state") != "running" or "Serving HTTP" not in sc.get("stdout", ""):
        raise RuntimeError(f"confined server not ready: {sc}")
    s.call("job", {"id": job["id"], "signal": "KILL", "wait_secs": 5})
    return ms


def confined_repl(s, jid, until):
    args = {"id": jid, "input": INPUT, "wait_secs": 10}
    if until:
        args["until"] = ANSWER
    ms, sc = s.timed("job", args)
    out = sc.get("output", "")
    if "42" not in out or (until and not re.search(r"42\r?\n", out)):
        raise RuntimeError(f"confined REPL: no answer in {sc}")
    return ms, out


def summary(name, xs):
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=10)
    return (f"{name:<44} median {statistics.median(xs):8.2f} ms  p10 {q[0]:8.2f}  "
            f"p90 {q[-1]:8.2f}")


def commit():
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return f"{head}{' (dirty)' if dirty else ''} (checkout in {os.getcwd()}, not checked " \
               f"against the binary)"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    binary = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    load_before = os.getloadavg()
    root = tempfile.mkdtemp(prefix="cordon-issue32-bench-")
    ws = os.path.join(root, "ws")
    os.mkdir(ws)
    s = Server(binary, ws)
    env = host_env(sandbox_env(s))
    which = s.call("shell_exec", {"command": "command -v python3"})["stdout"].strip()
    print(f"python3 inside: {which}; outside with the same PATH: "
          f"{subprocess.run(['sh', '-c', 'command -v python3'], env=env, capture_output=True, text=True).stdout.strip()}; "
          f"TERM inside: {env.get('TERM')!r}")
    # The interpreter `python3` resolves to (past a shim such as pyenv's), for the second
    # dev-server pair.
    exe = s.call("shell_exec", {"command": "python3 -c 'import sys; print(sys.executable)'"})
    exe = exe["stdout"].strip()
    print(f"interpreter: {exe}")

    sc = s.call("shell_exec", {"command": "exec python3 -i -q", "background": True, "pty": True,
                               "wait_secs": 5, "until": ">>> "})
    jid = sc["job"]["id"]
    if sc["job"]["state"] != "running" or ">>> " not in sc["stdout"]:
        raise RuntimeError(f"confined REPL did not start: {sc}")
    repl = Repl(env, ws)

    # Warm both sides once (and show what a round trip reads back).
    _, out = confined_repl(s, jid, True)
    _, buf = repl.round_trip()
    print(f"confined answer read: {out!r}")
    print(f"unconfined bytes read: {buf!r}")
    confined_repl(s, jid, False)
    confined_server(s)
    unconfined_server(env, ws)
    confined_server(s, exe)
    unconfined_server(env, ws, exe)

    t = {k: [] for k in ["repl", "repl_settle", "repl_bare", "read", "srv", "srv_bare",
                         "srv_exe", "srv_exe_bare"]}
    for r in range(rounds):
        first = r % 2 == 0
        for confined in (first, not first):
            if confined:
                t["repl"].append(confined_repl(s, jid, True)[0])
                t["read"].append(s.timed("job", {"id": jid})[0])
                t["repl_settle"].append(confined_repl(s, jid, False)[0])
            else:
                t["repl_bare"].append(repl.round_trip()[0])
        for confined in (first, not first):
            if confined:
                t["srv"].append(confined_server(s))
            else:
                t["srv_bare"].append(unconfined_server(env, ws))
        for confined in (first, not first):
            if confined:
                t["srv_exe"].append(confined_server(s, exe))
            else:
                t["srv_exe_bare"].append(unconfined_server(env, ws, exe))
    load_after = os.getloadavg()

    med = statistics.median
    print(f"cordon {binary}, commit {commit()}")
    print(f"{rounds} interleaved rounds; load average before {load_before[0]:.2f} "
          f"{load_before[1]:.2f} {load_before[2]:.2f}, after {load_after[0]:.2f} "
          f"{load_after[1]:.2f} {load_after[2]:.2f}")
    print(summary("REPL round trip, confined (job, until)", t["repl"]))
    print(summary("REPL round trip, confined (job, settle)", t["repl_settle"]))
    print(summary("REPL round trip, unconfined pty", t["repl_bare"]))
    print(summary("job read of the REPL, no new output", t["read"]))
    print(summary("dev server start to ready, confined", t["srv"]))
    print(summary("dev server start to ready, unconfined", t["srv_bare"]))
    print(summary("dev server, interpreter path, confined", t["srv_exe"]))
    print(summary("dev server, interpreter path, unconfined", t["srv_exe_bare"]))
    print(f"ratios of medians, confined/unconfined: REPL (until) "
          f"{med(t['repl']) / med(t['repl_bare']):.2f}; REPL (settle-bound) "
          f"{med(t['repl_settle']) / med(t['repl_bare']):.2f}; dev server "
          f"{med(t['srv']) / med(t['srv_bare']):.2f}; dev server, interpreter path "
          f"{med(t['srv_exe']) / med(t['srv_exe_bare']):.2f}")
    print(f"differences of medians: REPL (until) +{med(t['repl']) - med(t['repl_bare']):.2f} ms; "
          f"dev server +{med(t['srv']) - med(t['srv_bare']):.2f} ms; dev server, interpreter "
          f"path +{med(t['srv_exe']) - med(t['srv_exe_bare']):.2f} ms")

    repl.close()
    s.call("job", {"id": jid, "signal": "KILL", "wait_secs": 5})
    s.p.stdin.close()
    s.p.wait(timeout=30)


if __name__ == "__main__":
    main()
