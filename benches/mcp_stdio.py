"""One `cordon serve` over stdio (newline-delimited JSON-RPC), as the bench scripts drive it.

    from mcp_stdio import StdioServer      (the scripts run as `python3 benches/NAME.py`, so
                                            this directory is on sys.path)

`StdioServer(binary, ws, policy=None, env=None, name="bench")` starts the server, answers the
`initialize` handshake and sends `notifications/initialized`; `request` waits for the answer
of one request, `call` returns a tool result's `structuredContent` (raising on a protocol
error, and with `check=True` on `isError`), `timed` the same with the client's milliseconds.
"""

import json
import subprocess
import time


class StdioServer:
    def __init__(self, binary, ws, policy=None, env=None, name="bench",
                 protocol="2025-11-25"):
        argv = [binary, "serve", "--workspace", ws]
        if policy:
            argv += ["--policy", policy]
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": protocol, "capabilities": {},
                                    "clientInfo": {"name": name, "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, v):
        self.p.stdin.write((json.dumps(v) + "\n").encode())
        self.p.stdin.flush()

    def request(self, method, params):
        self.next_id += 1
        i = self.next_id
        self.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("cordon serve closed its stdout")
            v = json.loads(line)
            if v.get("id") == i:
                return v

    def result(self, tool, args):
        """The whole `tools/call` result (content, structuredContent, isError)."""
        r = self.request("tools/call", {"name": tool, "arguments": args})
        if "result" not in r:
            raise RuntimeError(f"{tool} {args}: {r}")
        return r["result"]

    def call(self, tool, args, check=False):
        result = self.result(tool, args)
        if check and result.get("isError"):
            raise RuntimeError(f"{tool} {args}: {result}")
        return result.get("structuredContent", {})

    def timed(self, tool, args, check=False):
        t = time.perf_counter()
        sc = self.call(tool, args, check)
        return (time.perf_counter() - t) * 1000, sc

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)
