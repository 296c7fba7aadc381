//! `cordon serve --http` beside `cordon serve` (stdio), as a client sees them: the round trip
//! of `shell_exec true` and of `read_file` (a 20-line file), and 10 concurrent HTTP sessions
//! making 1,000 `shell_exec true` calls between them, with the server's CPU time and memory.
//!
//! The clients are this bench, with no SDK in the loop: newline-delimited JSON-RPC on the
//! stdio server's pipes, and HTTP/1.1 on one kept-alive connection per session (bearer token,
//! `Mcp-Session-Id`, the SSE answer read to its last chunk) for the HTTP server. Round trips
//! are interleaved in one run, one block of each series per round, so the shared machine's
//! load hits them alike:
//!
//! * `stdio shell_exec` / `http shell_exec`: `shell_exec true`, default policy, sandbox init.
//! * `stdio read_file` / `http read_file`: `read_file` of a 20-line file.
//! * `http ping`: an MCP `ping` over HTTP, the transport's floor (hyper, rmcp's session, SSE).
//!
//! Run with `cargo bench --bench http`. `BENCH_N` (default 300) samples per series,
//! `BENCH_BLOCK` (default 10) samples of one series in a row (the first of each dropped),
//! `BENCH_CLIENTS` (10) and `BENCH_CALLS` (1000) for the concurrent phase.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

fn cordon() -> std::ffi::OsString {
    std::env::var_os("BENCH_CORDON").unwrap_or_else(|| env!("CARGO_BIN_EXE_cordon").into())
}

struct StdioServer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl StdioServer {
    fn start(ws: &Path) -> Self {
        let mut child = Command::new(cordon())
            .args(["serve", "--workspace"])
            .arg(ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn cordon serve");
        let mut s = Self {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
            next_id: 1,
        };
        s.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}),
        );
        let mut line =
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .unwrap();
        line.push(b'\n');
        s.stdin.write_all(&line).unwrap();
        s
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).unwrap();
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "server closed stdout"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct HttpServer {
    child: Child,
    addr: SocketAddr,
    token: String,
}

impl HttpServer {
    fn start(ws: &Path, dir: &Path, policy: &Path) -> Self {
        // Loopback only and thrown away with the run; long enough not to be warned about.
        let token = format!("bench-token-{}-0123456789abcdef0123", std::process::id());
        let file = dir.join("token");
        std::fs::write(&file, &token).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut child = Command::new(cordon())
            .args(["serve", "--http", "127.0.0.1:0", "--workspace"])
            .arg(ws)
            .arg("--policy")
            .arg(policy)
            .arg("--http-token-file")
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cordon serve --http");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let addr = loop {
            line.clear();
            assert!(
                stderr.read_line(&mut line).unwrap() > 0,
                "serve --http exited"
            );
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest.split('/').next().unwrap().parse().unwrap();
            }
        };
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while stderr.read_line(&mut sink).unwrap_or(0) > 0 {
                sink.clear();
            }
        });
        Self { child, addr, token }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One MCP session over one kept-alive HTTP/1.1 connection.
struct Session {
    stream: BufReader<TcpStream>,
    token: String,
    session: Option<String>,
    next_id: u64,
}

impl Session {
    fn open(server: &HttpServer) -> Self {
        let stream = TcpStream::connect(server.addr).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut s = Self {
            stream: BufReader::new(stream),
            token: server.token.clone(),
            session: None,
            next_id: 1,
        };
        let (headers, _) = s.post(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "1"}}}));
        s.session = headers
            .lines()
            .find_map(|l| l.strip_prefix("mcp-session-id: "))
            .map(|v| v.trim().to_owned());
        assert!(s.session.is_some(), "no session id in {headers}");
        s.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    /// POSTs `body`; the response head (lower-cased) and body.
    fn post(&mut self, body: &Value) -> (String, String) {
        let body = serde_json::to_vec(body).unwrap();
        let mut req = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: \
             application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            self.token,
            body.len()
        );
        if let Some(id) = &self.session {
            req.push_str(&format!("Mcp-Session-Id: {id}\r\n"));
        }
        req.push_str("\r\n");
        let stream = self.stream.get_mut();
        stream.write_all(req.as_bytes()).unwrap();
        stream.write_all(&body).unwrap();
        let mut head = String::new();
        loop {
            let mut line = String::new();
            assert!(
                self.stream.read_line(&mut line).unwrap() > 0,
                "connection closed"
            );
            if line == "\r\n" {
                break;
            }
            head.push_str(&line.to_ascii_lowercase());
        }
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map(|v| v.trim().parse::<usize>().unwrap());
        let mut out = Vec::new();
        match length {
            Some(n) => {
                out.resize(n, 0);
                self.stream.read_exact(&mut out).unwrap();
            }
            None => loop {
                let mut size = String::new();
                self.stream.read_line(&mut size).unwrap();
                let n = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut chunk = vec![0; n + 2];
                self.stream.read_exact(&mut chunk).unwrap();
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&chunk[..n]);
            },
        }
        (head, String::from_utf8(out).unwrap())
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let (_, body) =
            self.post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        body.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("no answer to {id} in {body}"))
    }
}

fn shell_true(call: impl FnOnce(&str, Value) -> Value) -> Duration {
    let t = Instant::now();
    let v = call(
        "tools/call",
        json!({"name": "shell_exec", "arguments": {"command": "true"}}),
    );
    let taken = t.elapsed();
    assert_eq!(v["result"]["structuredContent"]["exit_code"], 0, "{v}");
    taken
}

fn read_file(call: impl FnOnce(&str, Value) -> Value) -> Duration {
    let t = Instant::now();
    let v = call(
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "lines.txt"}}),
    );
    let taken = t.elapsed();
    assert_eq!(v["result"]["structuredContent"]["total_lines"], 20, "{v}");
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
    let block = env("BENCH_BLOCK", 10).max(2) as usize;
    let clients = env("BENCH_CLIENTS", 10) as usize;
    let calls = env("BENCH_CALLS", 1000) as usize;

    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
    std::fs::write(ws.join("lines.txt"), text).unwrap();
    // Room for the concurrent phase: 10 sessions, each with its calls running at once.
    let policy = dir.path().join("bench.toml");
    std::fs::write(
        &policy,
        "extends = \"default\"\n[server]\nmax_concurrent_calls = 4\n[server.http]\nmax_sessions = 64\n",
    )
    .unwrap();

    let mut stdio = StdioServer::start(&ws);
    let http = HttpServer::start(&ws, dir.path(), &policy);
    let mut session = Session::open(&http);
    for _ in 0..20 {
        shell_true(|m, p| stdio.request(m, p));
        shell_true(|m, p| session.request(m, p));
    }

    let names = [
        "stdio shell_exec",
        "http shell_exec",
        "stdio read_file",
        "http read_file",
        "http ping",
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    while samples.iter().any(|s| s.len() < n) {
        for (i, sample) in samples.iter_mut().enumerate() {
            for k in 0..block {
                let t = match i {
                    0 => shell_true(|m, p| stdio.request(m, p)),
                    1 => shell_true(|m, p| session.request(m, p)),
                    2 => read_file(|m, p| stdio.request(m, p)),
                    3 => read_file(|m, p| session.request(m, p)),
                    _ => {
                        let t = Instant::now();
                        let v = session.request("ping", json!({}));
                        assert!(v.get("result").is_some(), "{v}");
                        t.elapsed()
                    }
                };
                if k > 0 && sample.len() < n {
                    sample.push(t);
                }
            }
        }
    }
    println!(
        "## round trips: {n} samples per series, interleaved in blocks of {block} (first of each \
         block dropped)\n"
    );
    println!("| series | min | median | p90 | p99 | max |");
    println!("|---|---:|---:|---:|---:|---:|");
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
    }
    drop(session);

    concurrent(&http, clients, calls);
}

/// `clients` sessions on their own threads, `calls` `shell_exec true` in all.
fn concurrent(http: &HttpServer, clients: usize, calls: usize) {
    let per_client = calls / clients;
    let pid = http.pid();
    let mut sessions: Vec<Session> = (0..clients).map(|_| Session::open(http)).collect();
    // One warm-up call each, so the sessions exist before the clock starts.
    for s in &mut sessions {
        shell_true(|m, p| s.request(m, p));
    }
    let cpu_before = tree_cpu(pid);
    let started = Instant::now();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let peak = std::sync::Arc::clone(&peak);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = std::sync::Arc::clone(&done);
        let handle = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let (rss, _) = tree_rss(pid);
                peak.fetch_max(rss, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        (done, handle)
    };
    let threads: Vec<_> = sessions
        .into_iter()
        .map(|mut s| {
            std::thread::spawn(move || {
                (0..per_client)
                    .map(|_| shell_true(|m, p| s.request(m, p)))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let wall = started.elapsed();
    sampler.0.store(true, std::sync::atomic::Ordering::Relaxed);
    sampler.1.join().unwrap();
    let cpu = tree_cpu(pid) - cpu_before;
    let server_hwm = status_kib(pid, "VmHWM:").unwrap_or(0);
    let st = Stats::of(&mut all);
    println!(
        "\n## concurrent: {clients} HTTP sessions, {} `shell_exec true` calls in all (server's \
         `max_concurrent_calls` = 4)\n",
        all.len()
    );
    println!(
        "| wall | calls/s | latency median | p90 | p99 | max | CPU, server + init tree (user+sys) | CPU per call | server VmHWM | peak RSS, server + init tree |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {:.2} s | {:.0} | {} | {} | {} | {} | {:.2} s | {:.2} ms | {:.1} MiB | {:.1} MiB |",
        wall.as_secs_f64(),
        all.len() as f64 / wall.as_secs_f64(),
        ms(st.median),
        ms(st.p90),
        ms(st.p99),
        ms(st.max),
        cpu,
        cpu * 1e3 / all.len() as f64,
        server_hwm as f64 / 1024.0,
        peak.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1024.0,
    );
}

/// CPU seconds (user + system) of `pid` and its live descendants, plus what they reaped.
fn tree_cpu(pid: u32) -> f64 {
    let ticks = 100.0; // USER_HZ on Linux
    tree(pid)
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .map(|stat| {
            // Fields after the `(comm)`: utime is the 14th, stime 15th, cutime 16th, cstime 17th.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let f: Vec<f64> = rest
                .split_whitespace()
                .map(|v| v.parse().unwrap_or(0.0))
                .collect();
            (f[11] + f[12] + f[13] + f[14]) / ticks
        })
        .sum()
}

/// (VmRSS KiB summed over the tree, processes).
fn tree_rss(pid: u32) -> (u64, usize) {
    let pids = tree(pid);
    (
        pids.iter().filter_map(|p| status_kib(*p, "VmRSS:")).sum(),
        pids.len(),
    )
}

fn status_kib(pid: u32, key: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `pid` and every descendant.
fn tree(pid: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = std::fs::read_to_string(format!("/proc/{p}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("PPid:"))
                    .and_then(|v| v.trim().parse().ok())
            })
        {
            parents.push((p, ppid));
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    out
}

struct Stats {
    min: Duration,
    median: Duration,
    p90: Duration,
    p99: Duration,
    max: Duration,
}

impl Stats {
    fn of(s: &mut [Duration]) -> Self {
        s.sort();
        let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
        Self {
            min: s[0],
            median: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: s[s.len() - 1],
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}
