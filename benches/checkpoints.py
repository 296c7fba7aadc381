#!/usr/bin/env python3
"""Checkpoints (issue 35): what recording costs a call that changes nothing and one that
rewrites 1,000 files, and how long a restore of those files takes, in one interleaved run.

    python3 benches/checkpoints.py BINARY [ROUNDS]    (a release build: target/release/cordon;
                                                     ROUNDS defaults to 10)

Two workspaces of FILES files (100 directories of 1,000 files of 64 bytes each, no `.git`, so
every path is covered), each served by its own `cordon serve` over stdio: one under the
default policy (checkpoints recorded), one under the default policy with
`[checkpoints] enabled = false` (the baseline). Each server keeps its state in a directory of
its own (CORDON_STATE_DIR). Every round, in alternating order:

* nothing changed: `shell_exec {command: "true"}` CALLS times on each server, one call on one
  then one on the other; the added cost is the difference of the medians.
* 1,000 files rewritten: `sed -i s/X/Y/ d0/*` (and back the next round, so each round changes
  every file) through the recording server, against the same `sed -i` run unconfined on a
  third copy of those 1,000 files (the target: within 2x of it). Timed by the client from
  request to answer; the unconfined side from spawn to exit.
* restore: `checkpoint {action: "restore", id}` of the rewrite's checkpoint, which puts the
  1,000 files back (checked: 1,000 files in its answer).

A third server records without the kernel's help (CORDON_SIMULATE_MISSING=fanotify, the level
an unprivileged server has): its `shell_exec true` is timed in the same interleaving, and its
sed -i rewrite once per round, so the cost of walking the whole tree at each call's start and
end is on record beside the fast path.

Printed: median, p10 and p90 in ms for each row, the ratios, which level records (the `list`
answer's note: the fanotify fast path or the walk), the load average before and after, and
the commit (BENCH_COMMIT, else `git rev-parse HEAD` of the current directory).
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from mcp_stdio import StdioServer

DIRS, PER_DIR = 100, 1000
FILES = DIRS * PER_DIR
CALLS = 20


def server(binary, ws, policy, state, **env):
    return StdioServer(binary, ws, policy, env=dict(os.environ, CORDON_STATE_DIR=state, **env),
                       name="checkpoints-bench")


def make_workspace(path, dirs):
    for d in range(dirs):
        os.makedirs(os.path.join(path, f"d{d}"))
        for f in range(PER_DIR):
            with open(os.path.join(path, f"d{d}", f"f{f}.txt"), "w") as out:
                out.write(f"X file {d}/{f} of the checkpoint benchmark, 64 bytes long....\n")


def summary(xs):
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=10)
    return statistics.median(xs), q[0], q[-1]


def line(name, xs):
    m, lo, hi = summary(xs)
    return f"{name}: median {m:.2f} ms (p10 {lo:.2f}, p90 {hi:.2f})"


def commit():
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False,
                         capture_output=True, text=True)
    return out.stdout.strip() + " (of the checkout)"


def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    tmp = tempfile.mkdtemp(prefix="cordon-bench-checkpoints-")
    try:
        recorded, baseline, walked, host = (os.path.join(tmp, n)
                                            for n in ("on", "off", "walk", "host"))
        for ws in (recorded, baseline, walked):
            make_workspace(ws, DIRS)
        make_workspace(host, 1)
        off_policy = os.path.join(tmp, "off.toml")
        with open(off_policy, "w") as f:
            f.write('extends = "default"\n[checkpoints]\nenabled = false\n')
        load_before = os.getloadavg()
        on = server(binary, recorded, "default", os.path.join(tmp, "state-on"))
        off = server(binary, baseline, off_policy, os.path.join(tmp, "state-off"))
        walk = server(binary, walked, "default", os.path.join(tmp, "state-walk"),
                      CORDON_SIMULATE_MISSING="fanotify")
        for s in (on, off, walk):
            for _ in range(3):
                s.call("shell_exec", {"command": "true"}, check=True)
        true_on, true_off, true_walk, sed_on, sed_host, sed_walk, restore = (
            [], [], [], [], [], [], [])
        timed_true = {id(on): true_on, id(off): true_off, id(walk): true_walk}
        for r in range(rounds):
            trio = (on, off, walk) if r % 2 == 0 else (walk, off, on)
            for _ in range(CALLS):
                for s in trio:
                    dt, _ = s.timed("shell_exec", {"command": "true"}, check=True)
                    timed_true[id(s)].append(dt)
            a, b = ("X", "Y") if r % 2 == 0 else ("Y", "X")
            command = f"sed -i s/{a}/{b}/ d0/*"
            sides = ["cordon", "host", "walk"] if r % 2 == 0 else ["walk", "host", "cordon"]
            for side in sides:
                if side == "cordon":
                    dt, sc = on.timed("shell_exec", {"command": command}, check=True)
                    sed_on.append(dt)
                    checkpoint = sc.get("checkpoint")
                    if not checkpoint:
                        raise RuntimeError(f"the rewrite has no checkpoint: {sc}")
                elif side == "walk":
                    dt, _ = walk.timed("shell_exec", {"command": command}, check=True)
                    sed_walk.append(dt)
                else:
                    t = time.perf_counter()
                    subprocess.run(["sh", "-c", command], cwd=host, check=True)
                    sed_host.append((time.perf_counter() - t) * 1000)
            dt, sc = on.timed("checkpoint", {"action": "restore", "id": checkpoint}, check=True)
            if len(sc.get("files", [])) != PER_DIR:
                raise RuntimeError(f"the restore put back {len(sc.get('files', []))} files")
            restore.append(dt)
            # The restore undid the rewrite: redo it untimed so the next round's sed has
            # something to change back, on both sides alike.
            on.call("shell_exec", {"command": command}, check=True)
        listed = on.call("checkpoint", {"action": "list"}, check=True)
        listed_walk = walk.call("checkpoint", {"action": "list"}, check=True)
        load_after = os.getloadavg()
        on.close()
        off.close()
        walk.close()
        m_on, m_off = summary(true_on)[0], summary(true_off)[0]
        print(f"commit {commit()}; {FILES} files; {rounds} rounds; load "
              f"{load_before[0]:.2f} -> {load_after[0]:.2f}")
        print(f"recording level: {listed.get('recording', listed.get('note', '(not said)'))}")
        print(line("shell_exec true, checkpoints recorded", true_on))
        print(line("shell_exec true, checkpoints off     ", true_off))
        print(f"added cost of a call that changes nothing: {m_on - m_off:+.2f} ms "
              f"(target <= 0.5 ms)")
        print(line("sed -i over 1,000 files, through cordon (recorded)", sed_on))
        print(line("sed -i over 1,000 files, unconfined              ", sed_host))
        print(f"ratio: {summary(sed_on)[0] / summary(sed_host)[0]:.2f}x (target <= 2x)")
        print(line("restore of those 1,000 files", restore))
        print(f"without fanotify, recording level: "
              f"{listed_walk.get('recording', listed_walk.get('note', '(not said)'))}")
        print(line("shell_exec true, whole walks (no fanotify)", true_walk))
        print(f"added cost of a call that changes nothing, whole walks: "
              f"{summary(true_walk)[0] - m_off:+.2f} ms")
        print(line("sed -i over 1,000 files, whole walks (no fanotify)", sed_walk))
        print(f"ratio: {summary(sed_walk)[0] / summary(sed_host)[0]:.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
