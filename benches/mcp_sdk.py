"""MCP round trip of `shell_exec true` as the official Python SDK client sees it.

The method of the table in issue 9 (mcp 2.3.0 `Client`, legacy handshake, stdio): the time
around `await client.call_tool("shell_exec", {"command": "true"})`, SDK validation of the
result included. Interleaved in one run, one sample of each series per round:

* `ping`: `send_ping()` to the sandboxed server, the SDK + protocol floor;
* `shell_exec`: the default server, with the sandbox init and its warm slots;
* `shell_exec_per_child`: a server started with CORDON_SIMULATE_MISSING=namespaces;
* `bare_spawn`: `/bin/true` via `posix_spawn` from this process, both pipes read to EOF
  (the floor of any process-running server).

Back to back, then with a pause before every call. Usage:
    python3 benches/mcp_sdk.py target/release/cordon [N] [N_SPACED] [GAP_MS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

import anyio
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters


def bare_spawn() -> float:
    t = time.perf_counter()
    subprocess.run(["/bin/true"], stdin=subprocess.DEVNULL, capture_output=True, check=True, env={})
    return time.perf_counter() - t


def pct(sorted_s: list[float], q: float) -> float:
    rank = max(1, int(-(-q * len(sorted_s) // 1)))
    return sorted_s[rank - 1]


def table(title: str, names: list[str], samples: list[list[float]]) -> None:
    print(f"\n## {title}\n")
    print("| series | min | median | p90 | max |")
    print("|---|---:|---:|---:|---:|")
    for name, s in zip(names, samples):
        s = sorted(s)
        print(f"| `{name}` | {s[0]*1e3:.2f} ms | {statistics.median(s)*1e3:.2f} ms "
              f"| {pct(s, 0.9)*1e3:.2f} ms | {s[-1]*1e3:.2f} ms |")


async def main(cordon: str, n: int, n_spaced: int, gap: float) -> None:
    ws = tempfile.mkdtemp(prefix="cordon-sdk-bench-")
    base_env = {k: v for k, v in os.environ.items() if k != "CORDON_SIMULATE_MISSING"}
    sandboxed = StdioServerParameters(command=cordon, args=["serve", "--workspace", ws],
                                      env=base_env)
    per_child = StdioServerParameters(command=cordon, args=["serve", "--workspace", ws],
                                      env={**base_env, "CORDON_SIMULATE_MISSING": "namespaces"})
    async with Client(sandboxed, mode="legacy", read_timeout_seconds=60) as a, \
            Client(per_child, mode="legacy", read_timeout_seconds=60) as b:

        async def call(c) -> float:
            t = time.perf_counter()
            r = await c.call_tool("shell_exec", {"command": "true"})
            taken = time.perf_counter() - t
            assert r.is_error is False and r.structured_content["exit_code"] == 0, r
            return taken

        async def ping() -> float:
            t = time.perf_counter()
            await a.send_ping()
            return time.perf_counter() - t

        series = [ping, lambda: call(a), lambda: call(b)]
        names = ["ping", "shell_exec", "shell_exec_per_child", "bare_spawn"]
        for spaced, count, warm in ((False, n, 20), (True, n_spaced, 5)):
            samples: list[list[float]] = [[] for _ in names]
            for round_ in range(warm + count):
                for i in range(len(names)):
                    if spaced:
                        time.sleep(gap)  # blocking on purpose: nothing else runs meanwhile
                    t = await series[i]() if i < 3 else bare_spawn()
                    if round_ >= warm:
                        samples[i].append(t)
            title = (f"spaced: {count} samples per series, {gap*1e3:.0f} ms idle before each"
                     if spaced else f"back-to-back: {count} samples per series")
            table(title + " (Python SDK client)", names, samples)


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    anyio.run(main, args[0], int(args[1]) if len(args) > 1 else 300,
              int(args[2]) if len(args) > 2 else 100,
              (int(args[3]) if len(args) > 3 else 50) / 1e3)
