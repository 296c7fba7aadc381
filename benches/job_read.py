#!/usr/bin/env python3
"""`job` read of a running job with no new output against `read_file` of a one-line file (the
no-op baseline), interleaved call by call in one plain `cordon serve` (default policy, no
forwarding). python3 benches/job_read.py BINARY CALLS"""
import subprocess, sys, time, os, json, tempfile
b=sys.argv[1]; n=int(sys.argv[2])
ws=tempfile.mkdtemp(); open(ws+"/f.txt","w").write("hello\n")
p=subprocess.Popen([b,"serve","--workspace",ws],stdin=subprocess.PIPE,stdout=subprocess.PIPE,stderr=subprocess.DEVNULL)
i=[0]
def rpc(method,params):
    i[0]+=1
    p.stdin.write((json.dumps({"jsonrpc":"2.0","id":i[0],"method":method,"params":params})+"\n").encode()); p.stdin.flush()
    while True:
        m=json.loads(p.stdout.readline())
        if m.get("id")==i[0]: return m
rpc("initialize",{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"m","version":"1"}})
p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'); p.stdin.flush()
r=rpc("tools/call",{"name":"shell_exec","arguments":{"command":"sleep 600","background":True,"wait_secs":0}})
jid=r["result"]["structuredContent"]["job"]["id"]
print("server pid",p.pid,"job",jid,flush=True)
time.sleep(float(os.environ.get("WAIT","0")))
ta=[];tb=[]
for k in range(n):
    t=time.perf_counter(); rpc("tools/call",{"name":"job","arguments":{"id":jid}}); ta.append(time.perf_counter()-t)
    if not os.environ.get("ONLYJOB"): t=time.perf_counter(); rpc("tools/call",{"name":"read_file","arguments":{"path":"f.txt"}}); tb.append(time.perf_counter()-t)
    else: tb.append(0)
ta.sort(); tb.sort()
print("job read %.3f ms, read_file %.3f ms, ratio %.2f (load %s)"%(ta[n//2]*1000,tb[n//2]*1000,ta[n//2]/max(tb[n//2],1e-9),os.getloadavg()))
p.stdin.close(); p.wait()
