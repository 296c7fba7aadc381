#!/usr/bin/env python3
"""Issue 22's targets, each as a ratio to its baseline measured in the same interleaved run.

    python3 benches/issue22.py ROUNDS BINARY...      (e.g. the base build, then this one)

Per round, one after the other so machine noise hits them alike:
  * a bare posix_spawn of /bin/true, and each binary's MCP `shell_exec true` over a raw stdio
    client, back to back and after a 50 ms pause (one long-lived `cordon serve` per binary);
  * `cordon exec -- true` as a whole process, default policy, and
    `bwrap --ro-bind / / --unshare-all --die-with-parent true`;
  * `cordon serve` start to its first `tools/list` answer, and a bare spawn of
    `cordon --version`;
Then the idle tree of each binary (server, sandbox init, warm slots, parser worker) 3 s after
`initialize`: VmRSS and PSS summed. Medians; the load average is printed with the results.
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

ROUNDS = int(sys.argv[1])
BINARIES = sys.argv[2:]
WS = tempfile.mkdtemp()
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}


class Server:
    def __init__(self, binary):
        self.p = subprocess.Popen([binary, "serve", "--workspace", WS], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.i = 0
        self.req("initialize", INIT)
        self.note("notifications/initialized")

    def note(self, method):
        self.p.stdin.write((json.dumps({"jsonrpc": "2.0", "method": method}) + "\n").encode())
        self.p.stdin.flush()

    def req(self, method, params):
        self.i += 1
        self.p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": self.i, "method": method,
                                        "params": params}) + "\n").encode())
        self.p.stdin.flush()
        while True:
            msg = json.loads(self.p.stdout.readline())
            if msg.get("id") == self.i:
                return msg

    def shell_true(self):
        t = time.perf_counter()
        r = self.req("tools/call", {"name": "shell_exec", "arguments": {"command": "true"}})
        dt = time.perf_counter() - t
        assert not r["result"].get("isError"), r
        return dt

    def close(self):
        self.p.stdin.close()
        self.p.wait()


DEVNULL = os.open(os.devnull, os.O_WRONLY)


def bare_spawn(argv):
    t = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, DEVNULL, 1)])
    os.waitpid(pid, 0)
    return time.perf_counter() - t


def whole(argv):
    t = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    dt = time.perf_counter() - t
    assert r.returncode == 0, argv
    return dt


def start_to_tools_list(binary):
    t = time.perf_counter()
    p = subprocess.Popen([binary, "serve", "--workspace", WS], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    p.stdin.write("".join(json.dumps(m) + "\n" for m in msgs).encode())
    p.stdin.flush()
    p.stdout.readline()
    p.stdout.readline()
    dt = time.perf_counter() - t
    p.stdin.close()
    p.wait()
    return dt


def tree(pid):
    out = [pid]
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            kids = open(f"/proc/{pid}/task/{t}/children").read().split()
        except OSError:
            kids = []
        for k in kids:
            out += tree(int(k))
    return out


def field(pid, name, f):
    for line in open(f"/proc/{pid}/{f}"):
        if line.startswith(name):
            return int(line.split()[1])
    return 0


def idle_tree(binary):
    s = Server(binary)
    time.sleep(3)
    pids = tree(s.p.pid)
    rss = sum(field(x, "VmRSS:", "status") for x in pids) / 1024
    pss = sum(field(x, "Pss:", "smaps_rollup") for x in pids) / 1024
    server_rss = field(s.p.pid, "VmRSS:", "status") / 1024
    s.close()
    return len(pids), rss, pss, server_rss


series = {}
def add(name, value):
    series.setdefault(name, []).append(value * 1000)

servers = {b: Server(b) for b in BINARIES}
bwrap = shutil.which("bwrap")
for _ in range(ROUNDS):
    add("bare posix_spawn /bin/true", bare_spawn(["/bin/true"]))
    for b in BINARIES:
        add(f"{b}: shell_exec true, back to back", servers[b].shell_true())
    add("bare posix_spawn /bin/true (before a pause)", bare_spawn(["/bin/true"]))
    for b in BINARIES:
        time.sleep(0.05)
        add(f"{b}: shell_exec true, 50 ms apart", servers[b].shell_true())
for s in servers.values():
    s.close()
for _ in range(max(ROUNDS // 10, 5)):
    if bwrap:
        add("bwrap --ro-bind / / --unshare-all --die-with-parent true",
            whole([bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"]))
    for b in BINARIES:
        add(f"{b}: cordon exec -- true", whole([b, "exec", "--workspace", WS, "--", "true"]))
    add(f"{BINARIES[-1]} --version", bare_spawn([BINARIES[-1], "--version"]))
    for b in BINARIES:
        add(f"{b}: start to first tools/list", start_to_tools_list(b))

print(f"load average {os.getloadavg()}, {ROUNDS} rounds")
for name, values in series.items():
    values.sort()
    print(f"{statistics.median(values):8.2f} ms  p10 {values[len(values)//10]:7.2f}  "
          f"p90 {values[len(values)*9//10]:7.2f}  {name}")
for b in BINARIES:
    n, rss, pss, srv = idle_tree(b)
    print(f"{b}: idle tree {n} processes, RSS {rss:.1f} MiB, PSS {pss:.1f} MiB "
          f"(server RSS {srv:.1f} MiB)")
