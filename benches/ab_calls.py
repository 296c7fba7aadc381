#!/usr/bin/env python3
"""Per-call interleaved A/B of two (or more) cordon binaries: round trip, CPU, context switches.

    python3 benches/ab_calls.py {edit|shell} CALLS BINARY...      (e.g. an older build, then this one)

Every binary runs its own `cordon serve` on one workspace (default policy, external linters
off, so edit_file measures cordon and its syntax check). The calls alternate one by one between
the servers, so machine noise hits them alike: `edit` is a one-line edit_file of a 1,000-line
Python file (the write_lint bench's file), `shell` is `shell_exec true`. Printed per binary:
the client-side round trip (median, p10), the server process's CPU per call, its threads'
context switches per call, and the CPU per call of its whole process tree (server, sandbox init,
slots and workers, reaped children included). CPU and switches count what a call costs whether
or not the machine is busy, which the medians alone do not show on a noisy 2-core guest.
"""

import os
import sys
import tempfile
import time

from mcp_stdio import StdioServer

TICK = os.sysconf("SC_CLK_TCK")


def python_file(variant):
    s = "import os\nimport sys\n\n"
    for i in range((1000 - 3) // 4):
        s += f"def func_{i}(a, b):\n    total = a + b * {variant}\n    return total - {i}\n\n"
    while s.count("\n") < 1000:
        s += "# pad\n"
    return s


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


def stat_fields(pid):
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()


class Server(StdioServer):
    def __init__(self, binary, ws, policy):
        self.binary = binary
        super().__init__(binary, ws, policy, name="ab", protocol="2025-06-18")

    def call(self, tool, args):
        t = time.perf_counter()
        v = self.request("tools/call", {"name": tool, "arguments": args})
        taken = time.perf_counter() - t
        assert not v["result"]["isError"], v
        return taken

    def server_cpu(self):
        f = stat_fields(self.p.pid)
        return (int(f[11]) + int(f[12])) / TICK

    def tree_cpu(self):
        total = 0
        for pid in tree(self.p.pid):
            try:
                f = stat_fields(pid)
            except FileNotFoundError:
                continue
            total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
        return total / TICK

    def switches(self):
        total = 0
        for task in os.listdir(f"/proc/{self.p.pid}/task"):
            for line in open(f"/proc/{self.p.pid}/task/{task}/status"):
                if "ctxt_switches" in line:
                    total += int(line.split()[1])
        return total

    def counters(self):
        return (self.server_cpu(), self.tree_cpu(), self.switches())

    def stop(self):
        self.p.terminate()
        self.p.wait()


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("edit", "shell") or not sys.argv[2].isdigit():
        sys.exit(__doc__)
    mode, calls, binaries = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    with tempfile.TemporaryDirectory() as d:
        ws = os.path.join(d, "ws")
        os.mkdir(ws)
        policy = os.path.join(d, "policy.toml")
        with open(policy, "w") as f:
            f.write('extends = "default"\n[lint]\nlinters = []\n')
        servers = [Server(b, ws, policy) for b in binaries]
        for k, s in enumerate(servers):
            s.call("write_file", {"path": f"e{k}.py", "content": python_file(0)})
            s.call("shell_exec", {"command": "true"})
        times = [[] for _ in servers]
        before = [s.counters() for s in servers]
        for r in range(calls):
            old, new = ("return total - 123\n", "return total - 123  # edited\n")
            if r % 2:
                old, new = new, old
            for k, s in enumerate(servers):
                if mode == "edit":
                    t = s.call("edit_file", {"path": f"e{k}.py",
                                             "edits": [{"old_string": old, "new_string": new}]})
                else:
                    t = s.call("shell_exec", {"command": "true"})
                times[k].append(t)
        print(f"{mode}: {calls} calls per binary, interleaved call by call; load {os.getloadavg()[0]:.2f}")
        print("| binary | median ms | p10 ms | server CPU ms/call | tree CPU ms/call | switches/call |")
        print("|---|---:|---:|---:|---:|---:|")
        for k, s in enumerate(servers):
            after = s.counters()
            t = sorted(times[k])
            cpu, tree_cpu, sw = (a - b for a, b in zip(after, before[k]))
            print(f"| {s.binary} | {t[len(t) // 2] * 1e3:.3f} | {t[len(t) // 10] * 1e3:.3f} | "
                  f"{cpu / calls * 1e3:.3f} | {tree_cpu / calls * 1e3:.3f} | {sw / calls:.1f} |")
            s.stop()


if __name__ == "__main__":
    main()
