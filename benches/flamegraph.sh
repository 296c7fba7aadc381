#!/usr/bin/env bash
# Flame graph of a back-to-back `shell_exec true` series (issue 34): every CPU sampled with
# perf for 5 s while one `cordon serve` answers calls as fast as a raw stdio client sends
# them; the stacks of the server's threads, the sandbox init's processes and the calls' `sh`
# are kept, the rest of the machine's dropped.
#
#   benches/flamegraph.sh BINARY OUT.svg        (root; needs perf and inferno:
#                                               cargo install inferno)
# Folding the dwarf stacks takes minutes on 2 cores.
set -euo pipefail
binary=$1 out=$2
tmp=$(mktemp -d)
ready=$tmp/ready
python3 - "$binary" "$ready" <<'PY' &
import sys, tempfile, time
sys.path.insert(0, "benches")  # run from the repository's root
from mcp_stdio import StdioServer
s = StdioServer(sys.argv[1], tempfile.mkdtemp(), None, name="flame", protocol="2025-06-18")
call = lambda: s.request("tools/call", {"name": "shell_exec", "arguments": {"command": "true"}})
for _ in range(50):
    call()
open(sys.argv[2], "w").write("go")
end = time.time() + 9
while time.time() < end:
    call()
PY
while [ ! -f "$ready" ]; do sleep 0.2; done
sleep 1
perf record -a -F 999 --call-graph dwarf,16384 -o "$tmp/perf.data" -- sleep 5 >/dev/null 2>&1
wait
perf script -i "$tmp/perf.data" 2>/dev/null | inferno-collapse-perf --all > "$tmp/folded"
grep -E '^(cordon-init|tokio-rt-worker|sh|cordon-sandbox|cordon|cordon-audit|kworker[^;]*cgr[^;]*|rcu_exp_gp_kthr|ksoftirqd[^;]*);' \
  "$tmp/folded" > "$tmp/cordon.folded"
inferno-flamegraph --minwidth 0.3 --title "cordon shell_exec true, back to back" \
  "$tmp/cordon.folded" > "$out"
echo "wrote $out (folded stacks in $tmp/cordon.folded)"
