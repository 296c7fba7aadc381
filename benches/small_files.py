#!/usr/bin/env python3
"""Many small files, confined against unconfined, interleaved in one run (issue 33, item 9).

    python3 benches/small_files.py BINARY [ROUNDS]     (BINARY: target/release/cordon)

Each round runs every workload twice, unconfined and under `cordon exec` (default policy), in a
fresh directory of one workspace, the two sides alternating so machine noise hits them alike.
Before each side the page cache is written back and dropped (`sync`, `drop_caches`: root only)
so that one side never pays for the other's dirty pages, and the directory is removed after.
The time is taken inside the workload (the `cordon exec` start is the `exec` benchmark's). The
workloads are the issue's:

* files-with-content: 100,000 files of 4 KiB in 100 directories, written by one Python process;
* empty-files: 10,000 empty files (`touch`-like, one Python process);
* spawn-per-file: 3,000 iterations of a shell loop writing a file with `printf` and reading it
  with `cat` (a process per file, as a build script does).

Prints each workload's median, p10 and p90 in seconds and the ratio of medians
(confined/unconfined); the target is 1.2 at most.
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile

WORKLOADS = {
    "files-with-content": """
import os, time
t = time.perf_counter()
for i in range(100000):
    d = str(i // 1000)
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    with open(f"{d}/f{i}.txt", "w") as f:
        f.write("x" * 4096)
print(time.perf_counter() - t)
""",
    "empty-files": """
import os, time
t = time.perf_counter()
for i in range(10000):
    open(f"e{i}", "w").close()
print(time.perf_counter() - t)
""",
    "spawn-per-file": None,
}

SPAWN_LOOP = (
    "s=$(date +%s%N); i=0; while [ $i -lt 3000 ]; do printf 'content %s\\n' $i > f$i; "
    "cat f$i > /dev/null; i=$((i+1)); done; e=$(date +%s%N); "
    "echo $(( (e - s) / 1000000 ))"
)


def settle():
    subprocess.run(["sync"], check=True)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass  # not root: the write-back above still keeps the sides apart


def run(binary, ws, name, confined):
    work = os.path.join(ws, f"{name}-{'c' if confined else 'u'}")
    os.mkdir(work)
    if WORKLOADS[name] is None:
        argv = ["sh", "-c", SPAWN_LOOP]
        scale = 1000.0
    else:
        argv = ["python3", "-c", WORKLOADS[name]]
        scale = 1.0
    if confined:
        argv = [binary, "exec", "--workspace", ws, "--"] + argv
    settle()
    out = subprocess.run(argv, cwd=work, capture_output=True, text=True, check=True)
    subprocess.run(["rm", "-rf", work], check=True)
    return float(out.stdout.strip().splitlines()[-1]) / scale


def main():
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    ws = tempfile.mkdtemp(prefix="cordon-small-files-", dir=os.getcwd())
    times = {(n, c): [] for n in WORKLOADS for c in (False, True)}
    for r in range(rounds):
        for name in WORKLOADS:
            order = (False, True) if r % 2 == 0 else (True, False)
            for confined in order:
                times[(name, confined)].append(run(binary, ws, name, confined))
    shutil.rmtree(ws)
    print(f"rounds {rounds}, load {os.getloadavg()}")
    print(f"{'workload':20} {'unconfined s (p10-p90)':>26} {'confined s (p10-p90)':>26} ratio")
    for name in WORKLOADS:
        cells = []
        for confined in (False, True):
            t = sorted(times[(name, confined)])
            q = statistics.quantiles(t, n=10) if len(t) > 1 else [t[0]] * 9
            cells.append((statistics.median(t), q[0], q[-1]))
        (u, ul, uh), (c, cl, ch) = cells
        print(f"{name:20} {u:8.3f} ({ul:.3f}-{uh:.3f})       {c:8.3f} ({cl:.3f}-{ch:.3f})       {c / u:.2f}")


if __name__ == "__main__":
    main()
