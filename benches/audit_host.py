#!/usr/bin/env python3
"""Audit's host-wide cost (issue 34): what a syscall-heavy process that is not cordon's pays
in each audit state cordon may leave the host in, in one interleaved run.

    python3 benches/audit_host.py [ROUNDS]        (root; needs auditctl: apt install auditd)

The workload is `dd if=/dev/zero of=/dev/null bs=1 count=N` (2N syscalls, a read and a
write per byte), started afresh in each state, so the kernel decides its audit context at
its fork as it would for any new process on the host. The states, set with auditctl before
each run (the rules are deleted first):

* `on, no rule`: what `cordon serve` left before this change while it ran (audit on);
* `on, cordon's rule`: what it does now (`never,task -F auid!=1999999999`);
* `off, no rule`: what it left before at exit if someone turned audit off (the kernel keeps
  giving contexts once audit has ever been on);
* `off, cordon's rule`: what the last server out leaves now.

Printed: the median and p10 of ns per syscall of each state, and each state over the best.
Restores the audit state it found (enabled flag; rules are left as cordon's, see SECURITY.md).
"""

import shutil
import statistics
import subprocess
import sys
import time

COUNT = 1_000_000
RULE = ["-a", "never,task", "-F", "auid!=1999999999"]
STATES = [("on, no rule", 1, False), ("on, cordon's rule", 1, True),
          ("off, no rule", 0, False), ("off, cordon's rule", 0, True)]


def auditctl(*args):
    subprocess.run(["auditctl", *args], check=True, stdout=subprocess.DEVNULL)


def enabled():
    out = subprocess.run(["auditctl", "-s"], capture_output=True, text=True, check=True).stdout
    return int(out.split("enabled ")[1].split()[0])


def run_dd():
    t = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", "of=/dev/null", "bs=1", f"count={COUNT}"],
                   check=True, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - t) * 1e9 / (2 * COUNT)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    if not shutil.which("auditctl"):
        sys.exit("needs auditctl (apt install auditd)")
    was = enabled()
    samples = {name: [] for name, _, _ in STATES}
    load = open("/proc/loadavg").read().split()[0]
    try:
        for _ in range(rounds):
            for name, on, rule in STATES:
                auditctl("-D")
                if rule:
                    auditctl(*RULE)
                auditctl("-e", str(on))
                samples[name].append(run_dd())
    finally:
        auditctl("-D")
        auditctl(*RULE)
        auditctl("-e", str(min(was, 1)))
    best = min(statistics.median(v) for v in samples.values())
    print(f"{rounds} rounds, {2 * COUNT} syscalls each; load {load} -> "
          f"{open('/proc/loadavg').read().split()[0]}")
    print("| state | ns/syscall (median) | p10 | over the best |")
    print("|---|---:|---:|---:|")
    for name, _, _ in STATES:
        v = sorted(samples[name])
        med = statistics.median(v)
        print(f"| {name} | {med:.1f} | {v[len(v) // 10]:.1f} | {100 * (med / best - 1):+.1f}% |")


if __name__ == "__main__":
    main()
