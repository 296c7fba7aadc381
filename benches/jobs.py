#!/usr/bin/env python3
"""Background jobs, measured against their baselines in one interleaved run (issue 19).

    python3 benches/jobs.py BINARY [ROUNDS]          (a release build: target/release/cordon)

One `cordon serve` (default policy plus `[jobs] forward` of one free port, external linters
off). Each round does, one after the other, so machine noise hits them alike:

* start: `shell_exec {background: true, wait_secs: 0}` of `sleep 600` until the answer (the job
  running), against `shell_exec true` (a whole call, baseline); the job is then killed.
* read: `job {id}` of a running job with no new output, against `read_file` of a one-line file
  (a no-op tool call through the same server, baseline), and `job {}` (listing);
* echo: `job {id, input: "\\n", wait_secs: 5, until: ...}` of a job that answers each line with
  1 KiB (the round trip with 1 KiB of new output, the job's own reaction included);
* forward: an HTTP GET of a job's `python3 -m http.server` through the forwarded host port,
  against the same GET made inside the sandbox (a code_interpreter cell timing urllib; the
  cell's own time only, the MCP round trip excluded).

Then the memory of idle running jobs: PSS and RSS of the server and of the sandbox's process
tree with 0 and with 4 running `sleep` jobs. Printed as medians, p10 and p90 (ms), ratios to
the baselines, and the memory per job.
"""

import os
import socket
import statistics
import sys
import tempfile
import time
import urllib.request

from mcp_stdio import StdioServer


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server(StdioServer):
    def __init__(self, binary, ws, policy):
        super().__init__(binary, ws, policy, name="jobs-bench", protocol="2025-06-18")


def tree(pid):
    out = [pid]
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            kids = open(f"/proc/{pid}/task/{task}/children").read().split()
        except OSError:
            kids = []
        for kid in kids:
            out += tree(int(kid))
    return out


def memory(pids):
    """(RSS, PSS) in KiB summed over `pids`."""
    rss = pss = 0
    for pid in pids:
        try:
            for line in open(f"/proc/{pid}/smaps_rollup"):
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            pass
    return rss, pss


def summary(name, xs):
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=10)
    return f"{name:<46} median {statistics.median(xs):7.2f} ms  p10 {q[0]:7.2f}  p90 {q[-1]:7.2f}"


def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    root = tempfile.mkdtemp(prefix="cordon-jobs-bench-")
    ws = os.path.join(root, "ws")
    os.mkdir(ws)
    open(os.path.join(ws, "one.txt"), "w").write("one line\n")
    port = free_port()
    policy = os.path.join(root, "policy.toml")
    open(policy, "w").write(
        'extends = "default"\n[lint]\nlinters = []\n'
        f"[jobs]\nmax_per_session = 8\nforward = [{port}]\n")
    s = Server(binary, ws, policy)
    # Warm both paths once.
    s.call("shell_exec", {"command": "true"})
    idle = s.call("shell_exec", {"command": "sleep 600", "background": True, "wait_secs": 0})
    idle_id = idle["job"]["id"]
    echo = s.call("shell_exec", {
        "command": "while read l; do head -c 1024 /dev/zero | tr '\\0' x; echo; done",
        "background": True, "wait_secs": 0})
    echo_id = echo["job"]["id"]
    web = s.call("shell_exec", {"command": f"python3 -m http.server {port} --bind 127.0.0.1",
                                "background": True, "wait_secs": 0})
    s.call("job", {"id": web["job"]["id"], "wait_secs": 20, "until": "Serving"})
    url = f"http://127.0.0.1:{port}/one.txt"
    urllib.request.urlopen(url).read()

    t = {k: [] for k in ["start", "true", "read", "noop", "list", "echo", "fwd", "inside"]}
    inside_cell = (
        "import time, urllib.request\n"
        f"t = time.perf_counter(); urllib.request.urlopen('{url}').read(); "
        "(time.perf_counter() - t) * 1000")
    for _ in range(rounds):
        ms, sc = s.timed("shell_exec", {"command": "sleep 600", "background": True,
                                         "wait_secs": 0})
        t["start"].append(ms)
        s.call("job", {"id": sc["job"]["id"], "signal": "KILL", "wait_secs": 5})
        t["true"].append(s.timed("shell_exec", {"command": "true"})[0])
        t["read"].append(s.timed("job", {"id": idle_id})[0])
        t["noop"].append(s.timed("read_file", {"path": "one.txt"})[0])
        t["list"].append(s.timed("job", {})[0])
        ms, sc = s.timed("job", {"id": echo_id, "input": "\n", "wait_secs": 5,
                                 "until": "x{1024}"})
        assert "x" * 1024 in sc["output"], sc
        t["echo"].append(ms)
        start = time.perf_counter()
        urllib.request.urlopen(url).read()
        t["fwd"].append((time.perf_counter() - start) * 1000)
        t["inside"].append(float(s.call("code_interpreter", {"code": inside_cell})["result"]))

    print(f"cordon {binary}, {rounds} interleaved rounds, load {os.getloadavg()[0]:.2f}")
    print(summary("shell_exec background (job running)", t["start"]))
    print(summary("shell_exec true (baseline)", t["true"]))
    print(summary("job read, no new output", t["read"]))
    print(summary("read_file of one line (no-op baseline)", t["noop"]))
    print(summary("job list", t["list"]))
    print(summary("job input -> 1 KiB output", t["echo"]))
    print(summary("GET via forwarded host port", t["fwd"]))
    print(summary("GET inside the sandbox (urllib, cell time)", t["inside"]))
    med = statistics.median
    print(f"ratios: background start / shell_exec true = {med(t['start']) / med(t['true']):.2f}; "
          f"job read / no-op = {med(t['read']) / med(t['noop']):.2f}; "
          f"forwarded / inside = {med(t['fwd']) / med(t['inside']):.2f}")

    # Memory of idle running jobs (the three above are running: kill them first).
    for j in s.call("job", {})["jobs"]:
        if j["state"] == "running":
            s.call("job", {"id": j["id"], "signal": "KILL", "wait_secs": 5})
    time.sleep(1)
    server = s.p.pid

    def measure():
        time.sleep(1.5)
        return memory([server]), memory(tree(server)[1:])

    (srv0, tree0) = measure()
    for _ in range(4):
        s.call("shell_exec", {"command": "sleep 600", "background": True, "wait_secs": 0})
    (srv4, tree4) = measure()
    print(f"idle memory, server RSS/PSS KiB: {srv0[0]}/{srv0[1]} with 0 jobs, "
          f"{srv4[0]}/{srv4[1]} with 4: per job {(srv4[0] - srv0[0]) / 4:.0f}/"
          f"{(srv4[1] - srv0[1]) / 4:.0f} KiB")
    print(f"idle memory, sandbox tree RSS/PSS KiB: {tree0[0]}/{tree0[1]} with 0 jobs, "
          f"{tree4[0]}/{tree4[1]} with 4: per job {(tree4[0] - tree0[0]) / 4:.0f}/"
          f"{(tree4[1] - tree0[1]) / 4:.0f} KiB")
    s.p.stdin.close()
    s.p.wait(timeout=30)


if __name__ == "__main__":
    main()
