#!/usr/bin/env python3
"""Idle memory of each cordon binary's tree after start: processes, VmRSS summed and PSS summed
(server included), three starts each. python3 benches/idle_memory.py BINARY..."""
import subprocess, sys, time, os, json, tempfile
def tree(pid):
    out=[pid]
    for t in os.listdir(f"/proc/{pid}/task"):
        try: kids=open(f"/proc/{pid}/task/{t}/children").read().split()
        except OSError: kids=[]
        for k in kids: out+=tree(int(k))
    return out
def field(pid, name, f):
    for l in open(f"/proc/{pid}/{f}"):
        if l.startswith(name): return int(l.split()[1])
    return 0
for b in sys.argv[1:]:
    res=[]
    for rep in range(3):
        ws=tempfile.mkdtemp()
        p=subprocess.Popen([b,"serve","--workspace",ws],stdin=subprocess.PIPE,stdout=subprocess.PIPE,stderr=subprocess.DEVNULL)
        p.stdin.write((json.dumps({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"m","version":"1"}}})+"\n").encode()); p.stdin.flush(); p.stdout.readline()
        time.sleep(3)
        pids=tree(p.pid)
        rss=sum(field(x,"VmRSS:","status") for x in pids); pss=sum(field(x,"Pss:","smaps_rollup") for x in pids)
        res.append((len(pids), rss/1024, pss/1024))
        p.terminate(); p.wait()
    print(b, ["%d procs, RSS %.1f MiB, PSS %.1f MiB"%r for r in res])
