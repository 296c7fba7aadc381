#!/usr/bin/env python3
"""Checkpoints (issue 35), measured against a server with `[checkpoints] enabled = false`
in one interleaved run, on two 100,000-file workspaces (1,000 directories of 100 small files).

    python3 benches/checkpoints.py BINARY          (a release build: target/release/cordon)

N (default 40) rounds of `shell_exec true` and of a one-file write_file, alternating between
the two servers; then 5 rounds of `sed -i` over 1,000 files: unconfined, confined without and
with checkpoints, and the restore of those 1,000 files. Files go to /tmp/ckbench.
"""
import json, os, subprocess, sys, time, shutil, statistics

CORDON = sys.argv[1]
BASE = "/tmp/ckbench"
N = int(os.environ.get("N", "40"))

def make_ws(path, nfiles=100_000, per_dir=100):
    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    for d in range(nfiles // per_dir):
        dp = os.path.join(path, f"d{d:04}")
        os.mkdir(dp)
        for f in range(per_dir):
            with open(os.path.join(dp, f"f{f:03}.txt"), "w") as fh:
                fh.write(f"line one of {d}/{f}\nline two\n")

class Server:
    def __init__(self, ws, policy, state):
        env = dict(os.environ, CORDON_STATE_DIR=state)
        self.p = subprocess.Popen([CORDON, "serve", "--workspace", ws, "--policy", policy],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.id = 0
        self.req("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode()); self.p.stdin.flush()
    def req(self, method, params):
        self.id += 1
        self.send({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise SystemExit("server ended")
            msg = json.loads(line)
            if msg.get("id") == self.id and "method" not in msg:
                return msg
    def call(self, tool, args):
        t = time.perf_counter()
        r = self.req("tools/call", {"name": tool, "arguments": args})
        return (time.perf_counter() - t) * 1000, r["result"]
    def close(self):
        self.p.stdin.close(); self.p.wait()

def med(xs):
    return statistics.median(xs)

def main():
    ws_off, ws_on = f"{BASE}/ws-off", f"{BASE}/ws-on"
    for ws in (ws_off, ws_on):
        make_ws(ws)
    pol_off, pol_on = f"{BASE}/off.toml", f"{BASE}/on.toml"
    open(pol_off, "w").write('extends = "default"\n[checkpoints]\nenabled = false\n')
    open(pol_on, "w").write('extends = "default"\n')
    state = f"{BASE}/state"
    shutil.rmtree(state, ignore_errors=True)
    off, on = Server(ws_off, pol_off, state), Server(ws_on, pol_on, state)
    ms, r = on.call("shell_exec", {"command": "true"})
    print(f"first call with checkpoints (baseline record of 100,000 files): {ms:.0f} ms")
    ms, r = on.call("checkpoint", {"action": "list"})
    print("recording:", r["structuredContent"]["recording"])
    off.call("shell_exec", {"command": "true"})
    a, b = [], []
    for i in range(N):
        a.append(off.call("shell_exec", {"command": "true"})[0])
        ms, r = on.call("shell_exec", {"command": "true"})
        assert r["structuredContent"]["checkpoint"] is None, r
        b.append(ms)
    print(f"shell_exec true, {N} interleaved rounds: off median {med(a):.2f} ms, on median {med(b):.2f} ms, added {med(b)-med(a):+.2f} ms")
    a, b = [], []
    for i in range(N):
        a.append(off.call("write_file", {"path": "d0000/w.txt", "content": f"v{i}\n"})[0])
        ms, r = on.call("write_file", {"path": "d0000/w.txt", "content": f"v{i}\n"})
        assert r["structuredContent"]["checkpoint"], r
        b.append(ms)
    print(f"write_file of one file, {N} rounds: off {med(a):.2f} ms, on {med(b):.2f} ms, added {med(b)-med(a):+.2f} ms (on a 100,000-file workspace, the change means one full stat walk)")
    # 1,000 files rewritten by sed -i
    cmd = "sed -i 's/line two/LINE TWO {}/' d000[0-9]/f*.txt"
    a, b, u, rs = [], [], [], []
    for i in range(5):
        a.append(off.call("shell_exec", {"command": cmd.format(i), "timeout_secs": 300})[0])
        ms, r = on.call("shell_exec", {"command": cmd.format(i), "timeout_secs": 300})
        cp = r["structuredContent"]["checkpoint"]; assert cp, r
        b.append(ms)
        t = time.perf_counter()
        subprocess.run(["sh", "-c", cmd.format(i)], cwd=ws_off, check=True)
        u.append((time.perf_counter() - t) * 1000)
        ms, r = on.call("checkpoint", {"action": "restore", "id": cp})
        assert len(r["structuredContent"]["files"]) == 1000, len(r["structuredContent"]["files"])
        rs.append(ms)
    print(f"sed -i over 1,000 files, 5 rounds: unconfined {med(u):.0f} ms, confined off {med(a):.0f} ms, on {med(b):.0f} ms (x{med(b)/med(u):.1f} of unconfined), restore of the 1,000 files {med(rs):.0f} ms")
    off.close(); on.close()

main()
