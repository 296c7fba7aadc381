#!/usr/bin/env python3
"""The git import's per-call cost (issue 29), on a repository of many tracked files.

    python3 benches/git_import.py [FILES=100000] [ROUNDS=30] [BINARY=target/release/cordon]

Two `cordon serve`s run side by side: one over a repository of FILES tracked files (the
shadow gitdir, the import after every call), one over a copy of the same files without git
(no import).
`shell_exec true` alternates between them one call at a time (interleaved, so machine noise
hits both alike): the difference of the medians is what the import adds to a call where nothing
changed. Then ROUNDS calls that each commit one changed file (`git commit -qam`) in the
repository, and ROUNDS more after `git config index.skipHash true` on the host (git's own
setting for large repositories: the index is written without its trailing hash). For both, the import's own time as the server logs it (`CORDON_LOG=debug`,
"git import after a call", in µs) is reported too: the commit's own git time is the agent's,
not the import's.

The search for repositories below the root that a call made ("git repositories looked for
after a call") is reported the same way, for the fanotify path (root) and, on a third server
over a copy of the repository with `CORDON_SIMULATE_MISSING=fanotify`, for the walk an
unprivileged server does at every call's end; and the one walk at the server's start.
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

FILES = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
BINARY = sys.argv[3] if len(sys.argv) > 3 else "target/release/cordon"
MICROS = re.compile(r"git import after a call micros=(\d+)")
SEARCH = re.compile(r"git repositories looked for after a call micros=(\d+)")
START = re.compile(r"repositories found at start micros=(\d+)")
STEPS = re.compile(r"git import steps steps=([^\n]*)")
CONFINED = re.compile(r"git import by git run confined")


class Server:
    def __init__(self, ws, state, extra_env=None):
        env = dict(os.environ, CORDON_LOG="cordon=debug", CORDON_STATE_DIR=state,
                   **(extra_env or {}))
        self.p = subprocess.Popen(
            [BINARY, "serve", "--workspace", ws], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.imports = []
        self.searches = []
        self.start_search = []
        self.steps = []
        self.confined = 0
        threading.Thread(target=self._log, daemon=True).start()
        self.n = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _log(self):
        for line in self.p.stderr:
            text = line.decode(errors="replace")
            for pattern, into in ((MICROS, self.imports), (SEARCH, self.searches),
                                  (START, self.start_search)):
                m = pattern.search(text)
                if m:
                    into.append(int(m.group(1)))
            if CONFINED.search(text):
                self.confined += 1
            m = STEPS.search(text)
            if m:
                self.steps.append(dict(
                    (k, int(v.rstrip("µs"))) for k, v in
                    (part.split("=") for part in m.group(1).split())))

    def send(self, v):
        self.p.stdin.write((json.dumps(v) + "\n").encode())
        self.p.stdin.flush()

    def request(self, method, params):
        self.n += 1
        self.send({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        while True:
            v = json.loads(self.p.stdout.readline())
            if v.get("id") == self.n:
                return v

    def call(self, command):
        t = time.perf_counter()
        v = self.request("tools/call", {"name": "shell_exec", "arguments": {"command": command}})
        taken = time.perf_counter() - t
        assert not v["result"]["isError"], v
        return taken * 1000

    def stop(self):
        self.p.terminate()
        self.p.wait()


def git(ws, *args):
    subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "-c", "gc.auto=0", *args], cwd=ws,
                   check=True, stdout=subprocess.DEVNULL)


def main():
    top = tempfile.mkdtemp(prefix="cordon-git-bench-")
    repo, plain = os.path.join(top, "repo"), os.path.join(top, "plain")
    for i in range(FILES):
        d = os.path.join(repo, f"d{i // 1000}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}"), "w") as f:
            f.write(f"{i}\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    walked = os.path.join(top, "walked")
    subprocess.run(["cp", "-a", repo, walked], check=True)
    subprocess.run(["cp", "-a", repo, plain], check=True)
    subprocess.run(["rm", "-rf", os.path.join(plain, ".git")], check=True)
    a = Server(repo, os.path.join(top, "state-a"))
    b = Server(plain, os.path.join(top, "state-b"))
    c = Server(walked, os.path.join(top, "state-c"), {"CORDON_SIMULATE_MISSING": "fanotify"})
    a.call("true"), b.call("true"), c.call("true")  # warm: the first call makes the shadow's index
    a.imports.clear(), a.searches.clear(), a.steps.clear(), c.searches.clear()
    with_git, without = [], []
    # Three times as many quiet rounds, each pair in the other order than the last, so that
    # neither server always runs right after the other's answer.
    for r in range(3 * ROUNDS):
        if r % 2:
            without.append(b.call("true"))
            with_git.append(a.call("true"))
        else:
            with_git.append(a.call("true"))
            without.append(b.call("true"))
    # The walking server on its own: its calls walk the tree (checkpoints too, without
    # fanotify), and the work after each answer would land on whichever call came next.
    for _ in range(ROUNDS):
        c.call("true")
    time.sleep(0.2)
    unchanged = list(a.imports)
    searched_quiet, walked_quiet = list(a.searches), list(c.searches)
    a.imports.clear(), a.searches.clear(), a.steps.clear()
    commits = [a.call(f"echo {r} >> d0/f0 && git -c user.name=b -c user.email=b@b commit -qam c{r}")
               for r in range(ROUNDS)]
    time.sleep(0.2)
    committed = list(a.imports)
    steps = list(a.steps)
    searched_commit = list(a.searches)
    confined = a.confined
    # The same with the repository set as git advises for large ones (`index.skipHash`,
    # which `feature.manyFiles` implies): the index is written without its trailing hash.
    git(repo, "config", "index.skipHash", "true")
    a.imports.clear(), a.steps.clear()
    skip_commits = [a.call(f"echo {r} >> d0/f0 && git -c user.name=b -c user.email=b@b commit -qam s{r}")
                    for r in range(ROUNDS)]
    time.sleep(0.2)
    skip_committed = list(a.imports)
    skip_steps = list(a.steps)
    confined += a.confined
    started_search = a.start_search + c.start_search
    a.stop(), b.stop(), c.stop()
    med = statistics.median
    print(f"{FILES} tracked files, {3 * ROUNDS} quiet rounds (alternating order), {ROUNDS} commits, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"shell_exec true, repository:      median {med(with_git):.2f} ms")
    print(f"shell_exec true, no repository:   median {med(without):.2f} ms")
    print(f"difference of the medians:        {med(with_git) - med(without):+.2f} ms")
    print(f"import, nothing changed (logged): median {med(unchanged):.0f} µs, max {max(unchanged)} µs")
    print(f"one-file commit call (round trip): median {med(commits):.1f} ms")
    print(f"import after a one-file commit (logged): median {med(committed) / 1000:.2f} ms, "
          f"max {max(committed) / 1000:.2f} ms")
    def show_steps(taken):
        if taken:
            names = list(taken[0].keys())
            print("  its steps (median): " + ", ".join(
                f"{n} {med([s.get(n, 0) for s in taken]) / 1000:.2f} ms" for n in names))
    show_steps(steps)
    print(f"one-file commit call, index.skipHash (round trip): median {med(skip_commits):.1f} ms")
    print(f"import after a one-file commit, index.skipHash (logged): median "
          f"{med(skip_committed) / 1000:.2f} ms, max {max(skip_committed) / 1000:.2f} ms")
    show_steps(skip_steps)
    print(f"imports left to git run confined: {confined} of {2 * ROUNDS}")
    print(f"search for new repositories, fanotify, nothing changed: median {med(searched_quiet):.0f} µs, "
          f"max {max(searched_quiet)} µs")
    print(f"search for new repositories, fanotify, one-file commit: median {med(searched_commit):.0f} µs, "
          f"max {max(searched_commit)} µs")
    print(f"search for new repositories, whole walk (no fanotify): median {med(walked_quiet) / 1000:.1f} ms, "
          f"max {max(walked_quiet) / 1000:.1f} ms")
    print(f"the walk at the server's start: {', '.join(f'{m / 1000:.1f} ms' for m in started_search)}")


if __name__ == "__main__":
    main()
