//! code_interpreter latency: warm `1+1` round trip and cold session start, with a breakdown of
//! where a cold start goes. `cargo bench --bench interpreter` (needs python3 on the sandbox PATH
//! and a kernel that enforces the default policy). Prints a Markdown table for BENCHMARKS.md.

use cordon::testing::confine::CallLimits;
use cordon::testing::exec::CaptureSpec;
use cordon::testing::interpreter::{CellRequest, SessionManager};
use cordon::testing::policy::Policy;
use cordon::testing::runtime::{Runtime, RuntimeOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn cell(code: &str) -> CellRequest {
    let spec = || CaptureSpec {
        memory_cap: 1 << 20,
        spill: None,
        tee: None,
    };
    CellRequest {
        code: code.to_owned(),
        reset: false,
        timeout: Duration::from_secs(30),
        cancel: CancellationToken::new(),
        stdout: spec(),
        stderr: spec(),
    }
}

struct Stats {
    median: Duration,
    p95: Duration,
    min: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    Stats {
        median: v[v.len() / 2],
        p95: v[(v.len() * 95 / 100).min(v.len() - 1)],
        min: v[0],
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn row(name: &str, s: &Stats, n: usize, budget: &str) {
    println!(
        "| {name} | {} | {} | {} | {n} | {budget} |",
        ms(s.median),
        ms(s.p95),
        ms(s.min)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut policy = Policy::builtin_default();
    policy.interpreter.max_sessions = 1_000;
    let workspace = tempfile::tempdir().unwrap();
    let root = workspace.path().canonicalize().unwrap();
    let runtime = Runtime::build(
        policy.clone(),
        RuntimeOptions {
            workspace: root.clone(),
            ..RuntimeOptions::default()
        },
    )
    .expect("a kernel that enforces the default policy");
    let (confinement, executor) = (&runtime.confinement, &runtime.executor);
    let manager = SessionManager::new(Arc::clone(executor), &policy).unwrap();
    eprintln!("enforcement: {}", confinement.enforcement().summary());

    // Warm: one session, `1+1` again and again.
    manager.run("warm", cell("1+1")).await.unwrap();
    for _ in 0..50 {
        manager.run("warm", cell("1+1")).await.unwrap();
    }
    let warm: Vec<Duration> = {
        let mut v = Vec::new();
        for _ in 0..1_000 {
            let t = Instant::now();
            let o = manager.run("warm", cell("1+1")).await.unwrap();
            v.push(t.elapsed());
            assert_eq!(o.result.as_deref(), Some("2"));
        }
        v
    };

    // Cold: a new session each time (spawn, confinement, Python start, driver ready, `1+1`).
    let mut cold = Vec::new();
    for i in 0..40 {
        let name = format!("cold-{i}");
        let t = Instant::now();
        let o = manager.run(&name, cell("1+1")).await.unwrap();
        cold.push(t.elapsed());
        assert!(o.fresh_start && o.result.as_deref() == Some("2"));
    }
    manager.shutdown().await;

    // Breakdown of a cold start.
    let dir = tempfile::tempdir().unwrap();
    let mut ruleset = Vec::new();
    let mut cgroup = Vec::new();
    for _ in 0..40 {
        let t = Instant::now();
        let fd = confinement.private_ruleset(dir.path()).unwrap();
        ruleset.push(t.elapsed());
        drop(fd);
        let limits = CallLimits {
            memory_bytes: policy.interpreter.memory_bytes,
            pids: policy.interpreter.pids,
            cpu_percent: policy.interpreter.cpu_percent,
        };
        let t = Instant::now();
        let cg = confinement.create_cgroup_with(&limits).unwrap();
        cgroup.push(t.elapsed());
        tokio::task::spawn_blocking(move || drop(cg)).await.unwrap();
    }
    let mut bare_python = Vec::new();
    for _ in 0..40 {
        let t = Instant::now();
        let s = tokio::process::Command::new("/usr/bin/python3")
            .args(["-c", "pass"])
            .status()
            .await
            .unwrap();
        bare_python.push(t.elapsed());
        assert!(s.success());
    }
    let mut driver_unconfined = Vec::new();
    // The driver expects its output files as fds 3 and 4 (the server passes memfds); here a
    // two-line prefix opens /dev/null there, so the driver can run unconfined from argv.
    let driver = format!(
        "import os\nfor n in (3, 4): os.dup2(os.open(os.devnull, os.O_WRONLY), n)\n{}",
        include_str!("../src/interpreter/driver.py")
    );
    for _ in 0..20 {
        // The driver's own start-up (imports, fd moves) up to its ready frame, unconfined.
        let t = Instant::now();
        let mut child = tokio::process::Command::new("/usr/bin/python3")
            .args(["-c", &driver])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let _ready: cordon::testing::interpreter::protocol::Ready =
            cordon::testing::interpreter::protocol::read_frame(&mut out)
                .await
                .unwrap();
        driver_unconfined.push(t.elapsed());
        drop(child.stdin.take());
        let _ = child.wait().await;
    }

    let (n_warm, n_cold) = (warm.len(), cold.len());
    println!("| measurement | median ms | p95 ms | min ms | runs | budget |");
    println!("|---|---|---|---|---|---|");
    row("warm cell `1+1` round trip", &stats(warm), n_warm, "≤ 3 ms");
    row(
        "cold session start + `1+1`",
        &stats(cold),
        n_cold,
        "≤ 150 ms",
    );
    row(
        "  of which: private Landlock ruleset",
        &stats(ruleset),
        40,
        "",
    );
    row("  of which: session cgroup create", &stats(cgroup), 40, "");
    row(
        "  reference: bare `/usr/bin/python3 -c pass`, unconfined",
        &stats(bare_python),
        40,
        "",
    );
    row(
        "  reference: driver start to ready frame, unconfined",
        &stats(driver_unconfined),
        20,
        "",
    );
}
