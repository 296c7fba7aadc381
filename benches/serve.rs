//! `cordon serve` as an MCP client sees it: the round trip of `shell_exec true`, the time from
//! starting the server to its first `tools/list` answer, and the idle memory of the server with
//! its whole sandbox init tree.
//!
//! The client is this bench: newline-delimited JSON-RPC over the server's stdin/stdout, the
//! same raw framing as `benches/write_lint.rs` (no SDK in the loop, so the figures are the
//! server's). Targets (issue 9): `shell_exec true` ≤ 1.5 ms median, back to back and with a
//! 50 ms pause before each call; start to first `tools/list` ≤ 20 ms; idle RSS of the server
//! plus its init tree ≤ 16 MiB.
//!
//! Round trips are interleaved in one run, one sample of each series per round, so the shared
//! machine's load hits them alike:
//!
//! * `ping`: an MCP `ping` to the sandboxed server, the protocol floor (framing, JSON, pipes).
//! * `shell_exec`: `shell_exec true` on the default policy with the sandbox init (warm slots).
//! * `shell_exec_per_child`: the same on a server started with
//!   `CORDON_SIMULATE_MISSING=namespaces` (one fork per call, cgroup join on the critical path).
//! * `bare_spawn`: `/bin/true` spawned by this bench (`std::process::Command`, posix_spawn,
//!   both pipes read to EOF), the floor of any process-running server.
//!
//! Run with `cargo bench --bench serve`. `BENCH_N` (default 300) and `BENCH_N_SPACED`
//! (default 100) set round-trip samples per series, `BENCH_GAP_MS` (default 50) the spaced
//! pause, `BENCH_BLOCK` (default 10) back-to-back samples of one series in a row,
//! `BENCH_STARTS` (default 20) the server starts timed, `BENCH_CORDON` another
//! `cordon` binary to measure. `BENCH_BASELINE=/path/to/an/older/cordon` adds that binary's
//! start times and a `baseline_shell_exec` series, interleaved with this build's, so a change
//! is compared with its base under the same load.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The server under test: the release build beside this bench, or `BENCH_CORDON`.
fn cordon() -> std::ffi::OsString {
    std::env::var_os("BENCH_CORDON").unwrap_or_else(|| env!("CARGO_BIN_EXE_cordon").into())
}

struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Server {
    /// Starts `cordon serve` and returns it with the time from spawn to the `tools/list`
    /// answer (initialize, initialized, tools/list: what every client does first).
    fn start(workspace: &Path, per_child: bool) -> (Server, Duration) {
        Self::start_binary(&cordon(), workspace, per_child)
    }

    fn start_binary(
        program: &std::ffi::OsStr,
        workspace: &Path,
        per_child: bool,
    ) -> (Server, Duration) {
        let mut cmd = Command::new(program);
        cmd.args(["serve", "--workspace"])
            .arg(workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if per_child {
            cmd.env("CORDON_SIMULATE_MISSING", "namespaces");
        }
        let started = Instant::now();
        let mut child = cmd.spawn().expect("spawn cordon serve");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut s = Server {
            child,
            stdin,
            stdout,
            next_id: 1,
        };
        let init = s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}),
        );
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let tools = s.request("tools/list", json!({}));
        let taken = started.elapsed();
        let names = tools["result"]["tools"].as_array().map_or(0, Vec::len);
        assert!(names >= 5, "tools/list answered {tools}");
        (s, taken)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).expect("encode");
        line.push(b'\n');
        self.stdin.write_all(&line).expect("write to server");
        self.stdin.flush().expect("flush");
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read from server");
            assert!(n > 0, "the server closed its stdout");
            let v: Value = serde_json::from_str(&line).expect("JSON line");
            if v["id"] == id {
                return v;
            }
        }
    }

    fn shell_true(&mut self) -> Duration {
        let t = Instant::now();
        let v = self.request(
            "tools/call",
            json!({"name": "shell_exec", "arguments": {"command": "true"}}),
        );
        let taken = t.elapsed();
        assert_eq!(v["result"]["isError"], false, "shell_exec true failed: {v}");
        assert_eq!(
            v["result"]["structuredContent"]["exit_code"], 0,
            "shell_exec true: {v}"
        );
        taken
    }

    fn ping(&mut self) -> Duration {
        let t = Instant::now();
        let v = self.request("ping", json!({}));
        let taken = t.elapsed();
        assert!(v.get("result").is_some(), "ping failed: {v}");
        taken
    }
}

impl Drop for Server {
    /// SIGTERM, as a client closing down sends: the server ends through its normal exit, so
    /// its sandbox tree is gone and its scratch directories removed before the next start is
    /// timed (SIGKILL left both to the kernel and the temp dir, in the middle of the next
    /// measurement).
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let _ = self.child.wait();
    }
}

fn bare_spawn() -> Duration {
    let t = Instant::now();
    let out = Command::new("/bin/true")
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .expect("spawn /bin/true");
    let taken = t.elapsed();
    assert!(out.status.success());
    taken
}

fn main() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let n = env("BENCH_N", 300) as usize;
    let n_spaced = env("BENCH_N_SPACED", 100) as usize;
    let gap = Duration::from_millis(env("BENCH_GAP_MS", 50));
    let starts = env("BENCH_STARTS", 20) as usize;
    let block = env("BENCH_BLOCK", 10).max(1) as usize;

    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).expect("workspace");
    let ws = ws.canonicalize().expect("canonical workspace");

    let baseline = std::env::var_os("BENCH_BASELINE");
    start_times(&ws, starts, baseline.as_deref());

    let mut base = baseline
        .as_deref()
        .map(|program| Server::start_binary(program, &ws, false).0);
    let (mut sandboxed, _) = Server::start(&ws, false);
    let (mut per_child, _) = Server::start(&ws, true);
    println!("\n## idle memory right after start (no call yet)\n");
    memory(sandboxed.pid());
    for _ in 0..20 {
        sandboxed.shell_true();
        per_child.shell_true();
        if let Some(base) = &mut base {
            base.shell_true();
        }
    }
    // Let the refill after the last call finish.
    std::thread::sleep(Duration::from_millis(500));
    println!("\n## idle memory after 20 calls (warm slots ready)\n");
    memory(sandboxed.pid());
    println!("\nper-child server, for comparison:\n");
    memory(per_child.pid());

    // With `block` > 1, each series runs `block` times in a row and the first of each block is
    // dropped: it overlaps the previous series' background work (a call's refill and cleanup
    // run after its answer).
    let mut phase = |title: &str, n: usize, warmup: usize, gap: Option<Duration>, block: usize| {
        println!("\n## {title}\n");
        let mut names = vec!["ping", "shell_exec", "shell_exec_per_child", "bare_spawn"];
        if base.is_some() {
            names.push("baseline_shell_exec");
        }
        let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); names.len()];
        let skip = usize::from(block > 1);
        let mut round = 0;
        while samples.iter().any(|s| s.len() < n) {
            for (i, sample) in samples.iter_mut().enumerate() {
                for k in 0..block {
                    if let Some(gap) = gap {
                        std::thread::sleep(gap);
                    }
                    let t = match (i, &mut base) {
                        (0, _) => sandboxed.ping(),
                        (1, _) => sandboxed.shell_true(),
                        (2, _) => per_child.shell_true(),
                        (4, Some(base)) => base.shell_true(),
                        _ => bare_spawn(),
                    };
                    if round >= warmup && k >= skip && sample.len() < n {
                        sample.push(t);
                    }
                }
            }
            round += 1;
        }
        println!("| series | min | median | p90 | p99 | max |");
        println!("|---|---:|---:|---:|---:|---:|");
        let mut medians = HashMap::new();
        for (name, s) in names.iter().zip(samples.iter_mut()) {
            let st = Stats::of(s);
            println!(
                "| `{name}` | {} | {} | {} | {} | {} |",
                ms(st.min),
                ms(st.median),
                ms(st.p90),
                ms(st.p99),
                ms(st.max)
            );
            medians.insert(*name, st.median);
        }
        let m = medians["shell_exec"].as_secs_f64() * 1e3;
        println!(
            "\nshell_exec true median {m:.2} ms (target ≤ 1.50 ms: {}); above ping {:.2} ms, \
             above bare spawn {:.2} ms",
            if m <= 1.5 { "met" } else { "MISSED" },
            m - medians["ping"].as_secs_f64() * 1e3,
            m - medians["bare_spawn"].as_secs_f64() * 1e3,
        );
    };
    phase(
        &format!(
            "back-to-back: {n} samples per series after 2 warm-up rounds, interleaved in blocks \
             of {block} (first of each block dropped)"
        ),
        n,
        2,
        None,
        block,
    );
    phase(
        &format!(
            "spaced: {n_spaced} samples per series, {} ms idle before each, interleaved",
            gap.as_millis()
        ),
        n_spaced,
        5,
        Some(gap),
        1,
    );
}

/// Starts the server `starts` times each way (and the baseline's, if any), interleaved, and
/// prints spawn → tools/list.
fn start_times(ws: &Path, starts: usize, baseline: Option<&std::ffi::OsStr>) {
    let (mut with_init, mut without, mut base) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..starts {
        // Each round starts a different series first, so none always follows the same one.
        let mut order = vec![0, 1];
        if baseline.is_some() {
            order.push(2);
        }
        let first = round % order.len();
        order.rotate_left(first);
        for series in order {
            let (s, t) = match (series, baseline) {
                (0, _) => Server::start(ws, false),
                (1, _) => Server::start(ws, true),
                (_, Some(program)) => Server::start_binary(program, ws, false),
                (_, None) => unreachable!("series 2 only with a baseline"),
            };
            drop(s);
            [&mut with_init, &mut without, &mut base][series].push(t);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    println!("## server start to first tools/list answered: {starts} starts each, interleaved\n");
    println!("| server | min | median | p90 | max |");
    println!("|---|---:|---:|---:|---:|");
    let mut median = Duration::ZERO;
    for (name, s) in [
        ("with the sandbox init", &mut with_init),
        (
            "per-child (CORDON_SIMULATE_MISSING=namespaces)",
            &mut without,
        ),
        ("baseline, with the sandbox init", &mut base),
    ] {
        if s.is_empty() {
            continue;
        }
        let st = Stats::of(s);
        if median.is_zero() {
            median = st.median;
        }
        println!(
            "| {name} | {} | {} | {} | {} |",
            ms(st.min),
            ms(st.median),
            ms(st.p90),
            ms(st.max)
        );
    }
    let m = median.as_secs_f64() * 1e3;
    println!(
        "\nstart to tools/list with the init: median {m:.1} ms (target ≤ 20 ms: {})",
        if m <= 20.0 { "met" } else { "MISSED" }
    );
}

/// One process of the server's tree, as /proc says.
struct Proc {
    pid: u32,
    ppid: u32,
    name: String,
    rss_kib: u64,
    pss_kib: u64,
}

fn status_field(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn read_proc(pid: u32) -> Option<Proc> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    Some(Proc {
        pid,
        ppid: status_field(&status, "PPid:")? as u32,
        name: status
            .lines()
            .find_map(|l| l.strip_prefix("Name:"))
            .map(|n| n.trim().to_owned())
            .unwrap_or_default(),
        rss_kib: status_field(&status, "VmRSS:").unwrap_or(0),
        pss_kib: status_field(&rollup, "Pss:").unwrap_or(0),
    })
}

/// Prints the server and every descendant with VmRSS and PSS, and the sums.
fn memory(root: u32) {
    let all: Vec<Proc> = std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(read_proc)
        .collect();
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(all.iter().filter(|p| p.ppid == parent).map(|p| p.pid));
        i += 1;
    }
    println!("| pid | parent | name | VmRSS | PSS |");
    println!("|---:|---:|---|---:|---:|");
    let (mut rss, mut pss) = (0, 0);
    for pid in &tree {
        if let Some(p) = all.iter().find(|p| p.pid == *pid) {
            println!(
                "| {} | {} | {} | {} KiB | {} KiB |",
                p.pid, p.ppid, p.name, p.rss_kib, p.pss_kib
            );
            rss += p.rss_kib;
            pss += p.pss_kib;
        }
    }
    println!(
        "| | | **{} processes** | **{:.1} MiB** | **{:.1} MiB** |",
        tree.len(),
        rss as f64 / 1024.0,
        pss as f64 / 1024.0
    );
    println!(
        "\nidle RSS of the tree {:.1} MiB (target ≤ 16 MiB: {}), PSS {:.1} MiB",
        rss as f64 / 1024.0,
        if rss <= 16 * 1024 { "met" } else { "MISSED" },
        pss as f64 / 1024.0
    );
}

struct Stats {
    min: Duration,
    median: Duration,
    p90: Duration,
    p99: Duration,
    max: Duration,
}

impl Stats {
    fn of(samples: &mut [Duration]) -> Self {
        samples.sort_unstable();
        // Nearest-rank percentile: the smallest sample with at least q of the samples ≤ it.
        let pct = |q: f64| {
            let rank = ((q * samples.len() as f64).ceil() as usize).max(1);
            samples[rank - 1]
        };
        Self {
            min: samples[0],
            median: pct(0.5),
            p90: pct(0.9),
            p99: pct(0.99),
            max: samples[samples.len() - 1],
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}
