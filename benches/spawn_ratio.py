#!/usr/bin/env python3
"""`shell_exec true` through a raw stdio client for each cordon binary, interleaved call by call
with a bare posix_spawn of /bin/true from the same client; prints medians and the ratio to the
bare spawn. python3 benches/spawn_ratio.py N BINARY... (GAP=0.05 for 50 ms between calls)."""
import json, os, subprocess, sys, tempfile, time, statistics
class S:
    def __init__(s, b):
        ws=tempfile.mkdtemp()
        s.p=subprocess.Popen([b,"serve","--workspace",ws],stdin=subprocess.PIPE,stdout=subprocess.PIPE,stderr=subprocess.DEVNULL)
        s.i=0; s.req("initialize",{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"r","version":"1"}})
        s.p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'); s.p.stdin.flush()
    def req(s,m,params):
        s.i+=1; s.p.stdin.write((json.dumps({"jsonrpc":"2.0","id":s.i,"method":m,"params":params})+"\n").encode()); s.p.stdin.flush()
        while True:
            l=json.loads(s.p.stdout.readline())
            if l.get("id")==s.i: return l
    def call(s):
        t=time.perf_counter(); s.req("tools/call",{"name":"shell_exec","arguments":{"command":"true"}}); return time.perf_counter()-t
def bare():
    t=time.perf_counter(); pid=os.posix_spawn("/bin/true",["true"],{}); os.waitpid(pid,0); return time.perf_counter()-t
servers=[S(b) for b in sys.argv[2:]]
for s in servers:
    for _ in range(20): s.call()
n=int(sys.argv[1]); gap=float(os.environ.get("GAP","0"))
res={b:[] for b in sys.argv[2:]}; res["bare"]=[]
for i in range(n):
    for b,s in zip(sys.argv[2:],servers):
        if gap: time.sleep(gap)
        res[b].append(s.call())
    if gap: time.sleep(gap)
    res["bare"].append(bare())
bm=statistics.median(res["bare"])
for k,v in res.items():
    m=statistics.median(v); print(f"{k}: median {m*1000:.3f} ms, {m/bm:.2f}x bare")
