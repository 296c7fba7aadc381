#!/usr/bin/env python3
"""A team on one server (issue 36): one subject's flood of calls against another subject's
`shell_exec true`, and the cold start of a subject's workspace, in one interleaved run.

    python3 benches/subjects.py BINARY [ROUNDS]     (a release build: target/release/cordon;
                                                   ROUNDS defaults to 10)

One `cordon serve --http 127.0.0.1:0 --workspaces TMPDIR` (default policy) with a token file of
holders: `flood`, `quiet`, and `cold0`..`coldN`. Each round runs two blocks, in alternating
order from round to round:

* quiet: `quiet` calls `shell_exec {command: "true"}` CALLS times back to back, nothing else
  running;
* flood: the same, while `flood` keeps FLOODERS calls running at once, each a CPU-bound shell
  loop (~0.3 s of one core), from FLOODERS threads in FLOODERS sessions of its own; the block
  starts once every flooder has a call running.

Every call is timed by the client, from the request written to the answer read, over one HTTP
connection per call (as the SDKs do). Printed: median, p10 and p90 in ms for `quiet`'s calls in
each block, the ratio of the medians (target: within 2x), how many flood calls ran, and the
cold start: the first call of a subject that never called (its runtime, sandbox init, proxy and
parser started on that call) against `quiet`'s warm median, one new subject per round, taken in
the quiet block. Load average before and after, and the commit (BENCH_COMMIT, else
`git rev-parse HEAD` of the current directory).
"""

import hashlib
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CALLS = 20
FLOODERS = 4
FLOOD_COMMAND = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"


class Client:
    """One MCP session of one holder over Streamable HTTP."""

    def __init__(self, addr, token):
        self.host, self.port = addr.rsplit(":", 1)
        self.token = token
        self.session = None
        self.next_id = 1
        _reply, headers = self.post(
            {"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "1"}}})
        self.session = headers.get("mcp-session-id")
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, body):
        conn = http.client.HTTPConnection(self.host, int(self.port), timeout=120)
        headers = {"Authorization": f"Bearer {self.token}",
                   "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        conn.request("POST", "/mcp", json.dumps(body), headers)
        resp = conn.getresponse()
        try:
            data = resp.read().decode()
        except http.client.IncompleteRead as e:
            raise RuntimeError(f"cut short after {e.partial!r}; status {resp.status}; body {body}")
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        conn.close()
        if resp.status >= 400:
            raise RuntimeError(f"HTTP {resp.status}: {data}")
        if "id" not in body:
            return None, hdrs
        if hdrs.get("content-type", "").startswith("text/event-stream"):
            for line in data.splitlines():
                if line.startswith("data:") and line[5:].strip():
                    msg = json.loads(line[5:])
                    if msg.get("id") == body["id"]:
                        return msg, hdrs
            raise RuntimeError(f"no answer in {data!r}")
        return json.loads(data), hdrs

    def call(self, tool, args):
        rid = self.next_id
        self.next_id += 1
        msg, _ = self.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                            "params": {"name": tool, "arguments": args}})
        return msg["result"]

    def timed_true(self):
        t = time.perf_counter()
        result = self.call("shell_exec", {"command": "true"})
        dt = (time.perf_counter() - t) * 1000
        if result.get("isError"):
            raise RuntimeError(f"shell_exec true failed: {result}")
        return dt


def start_server(binary, root, token_file):
    p = subprocess.Popen(
        [binary, "serve", "--http", "127.0.0.1:0", "--workspaces", root,
         "--http-token-file", token_file],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if "listening on http://" in line:
            addr = line.split("listening on http://")[1].split("/")[0]
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, addr
    raise RuntimeError("the server did not say where it listens")


class Flood:
    """FLOODERS threads of subject `flood`, each keeping one CPU-bound call running while
    `on` is set."""

    def __init__(self, addr, token):
        self.on = threading.Event()
        self.stop = False
        self.running = 0
        self.done = 0
        self.lock = threading.Lock()
        self.clients = [Client(addr, token) for _ in range(FLOODERS)]
        self.threads = [threading.Thread(target=self.loop, args=(c,), daemon=True)
                        for c in self.clients]
        for t in self.threads:
            t.start()

    def loop(self, client):
        while not self.stop:
            if not self.on.wait(0.05):
                continue
            with self.lock:
                self.running += 1
            try:
                client.call("shell_exec", {"command": FLOOD_COMMAND, "timeout_secs": 60})
            except Exception as e:  # noqa: BLE001 - a failed flood call is reported, not fatal
                print(f"flood call failed: {e}", file=sys.stderr)
            finally:
                with self.lock:
                    self.running -= 1
                    self.done += 1

    def start(self):
        self.on.set()
        while True:
            with self.lock:
                if self.running == FLOODERS:
                    return
            time.sleep(0.01)

    def pause(self):
        self.on.clear()
        while True:
            with self.lock:
                if self.running == 0:
                    return
            time.sleep(0.01)


def summary(xs):
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=10)
    return statistics.median(xs), q[0], q[-1]


def commit():
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False,
                              capture_output=True,
                              text=True).stdout.strip() + " (of the checkout)"
    except OSError:
        return "unknown"


def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    tmp = tempfile.mkdtemp(prefix="cordon-bench-subjects-")
    root = os.path.join(tmp, "workspaces")
    names = ["flood", "quiet"] + [f"cold{i}" for i in range(rounds)]
    tokens = {n: hashlib.sha256(os.urandom(32)).hexdigest() for n in names}
    token_file = os.path.join(tmp, "holders")
    with open(token_file, "w") as f:
        for n in names:
            digest = hashlib.sha256(tokens[n].encode()).hexdigest()
            f.write(f"sha256:{digest} {n} *\n")
    os.chmod(token_file, 0o600)
    load_before = os.getloadavg()
    server, addr = start_server(binary, root, token_file)
    try:
        quiet = Client(addr, tokens["quiet"])
        for _ in range(5):
            quiet.timed_true()
        flood = Flood(addr, tokens["flood"])
        flood.start()
        flood.pause()
        quiet_ms, flood_ms, cold_ms = [], [], []
        for r in range(rounds):
            blocks = ["quiet", "flood"] if r % 2 == 0 else ["flood", "quiet"]
            for block in blocks:
                if block == "flood":
                    flood.start()
                    flood_ms += [quiet.timed_true() for _ in range(CALLS)]
                    flood.pause()
                else:
                    quiet_ms += [quiet.timed_true() for _ in range(CALLS)]
                    cold = Client(addr, tokens[f"cold{r}"])
                    cold_ms.append(cold.timed_true())
        flood.stop = True
        for t in flood.threads:
            t.join(timeout=60)
        load_after = os.getloadavg()
        q, f = summary(quiet_ms), summary(flood_ms)
        print(f"commit {commit()}; {rounds} rounds x {CALLS} calls per block; "
              f"{FLOODERS} flooders; load {load_before[0]:.2f} -> {load_after[0]:.2f}")
        print(f"quiet subject, nothing else running : median {q[0]:.2f} ms "
              f"(p10 {q[1]:.2f}, p90 {q[2]:.2f})")
        print(f"quiet subject, other subject flooding: median {f[0]:.2f} ms "
              f"(p10 {f[1]:.2f}, p90 {f[2]:.2f})")
        print(f"ratio of medians: {f[0] / q[0]:.2f}x (target <= 2x); flood calls run: "
              f"{flood.done}")
        c = summary(cold_ms) if len(cold_ms) >= 2 else (cold_ms[0],) * 3
        print(f"cold start (a subject's first call): median {c[0]:.1f} ms "
              f"(p10 {c[1]:.1f}, p90 {c[2]:.1f}), {len(cold_ms)} subjects; warm call "
              f"{q[0]:.2f} ms")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
