//! `cordon doctor --bench`: what one confined command costs on this machine, measured the way
//! BENCHMARKS.md measures it, so a user can check those figures on their own hardware.
//!
//! Owns the measurement only: N rounds, each running, one after the other so the machine's
//! noise hits them alike, a bare spawn of `/bin/true`, the same program confined through the
//! sandbox init (`Executor::run`, the whole call path below MCP), and with `--mcp` a
//! `shell_exec true` round trip through an in-process MCP server over an in-memory stream.
//! Reports medians, p90 and ratios to the bare spawn, with the machine (kernel, cgroup mode,
//! cgroup v2 `favordynmods`, CPUs, load). It judges nothing: the numbers are the user's.

use super::DoctorError;
use crate::exec::{CaptureSpec, ExecRequest, Program};
use crate::policy::Policy;
use crate::runtime::{Runtime, RuntimeOptions, Session};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    /// Rounds (each series gets one sample per round).
    pub n: usize,
    /// Also the MCP `shell_exec` round trip.
    pub mcp: bool,
}

#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub machine: Machine,
    pub rounds: usize,
    /// One per thing measured, in the order measured within a round.
    pub series: Vec<Series>,
    /// Each series' median over the bare spawn's.
    pub ratio_to_bare_spawn: BTreeMap<String, f64>,
    /// The confined series' critical path, step by step (`crate::exec::steps`).
    pub steps: Vec<Step>,
}

/// One step of the confined call's path over the rounds.
#[derive(Debug, Serialize)]
pub struct Step {
    pub name: &'static str,
    pub median_ms: f64,
    pub p90_ms: f64,
    /// The step's median over the confined call's median, in percent.
    pub share_percent: f64,
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub kernel: String,
    pub cgroups: String,
    /// cgroup v2 mounted with `favordynmods` (cheaper cgroup migration), where v2 is mounted.
    pub favordynmods: Option<bool>,
    pub cpus: usize,
    /// 1, 5 and 15 minute load averages when the run started.
    pub load_average: String,
    /// The enforcement the confined series ran under.
    pub enforcement: String,
}

#[derive(Debug, Serialize)]
pub struct Series {
    pub name: &'static str,
    pub median_ms: f64,
    pub p90_ms: f64,
    pub min_ms: f64,
    pub samples: usize,
}

/// Runs the benchmark under `policy` in a throwaway workspace.
pub async fn run(policy: &Policy, options: BenchOptions) -> Result<BenchReport, DoctorError> {
    let n = options.n.max(1);
    let workspace = tempfile::Builder::new()
        .prefix("cordon-bench-ws-")
        .tempdir()?;
    let runtime = Arc::new(Runtime::build(
        policy.clone(),
        RuntimeOptions {
            workspace: workspace.path().canonicalize()?,
            parser_program: options
                .mcp
                .then(crate::parser::worker_program)
                .transpose()?,
            ..RuntimeOptions::default()
        },
    )?);
    let machine = machine(&runtime);
    let mut mcp = match options.mcp {
        true => Some(McpClient::start(Arc::clone(&runtime)).await?),
        false => None,
    };
    // One of each first: the warm pool and the page cache are then what a user's calls see.
    bare_spawn()?;
    confined_spawn(&runtime).await?;
    if let Some(client) = mcp.as_mut() {
        client.shell_true().await?;
    }
    let (mut bare, mut confined, mut round_trip) = (Vec::new(), Vec::new(), Vec::new());
    let mut per_step: Vec<Vec<Duration>> = vec![Vec::new(); crate::exec::steps::STEP_NAMES.len()];
    for _ in 0..n {
        bare.push(bare_spawn()?);
        let (took, steps) = confined_spawn(&runtime).await?;
        confined.push(took);
        for (samples, d) in per_step.iter_mut().zip(steps.as_array()) {
            samples.push(d);
        }
        if let Some(client) = mcp.as_mut() {
            round_trip.push(client.shell_true().await?);
        }
    }
    let mut series = vec![
        summarise("bare spawn of /bin/true", bare),
        summarise("confined /bin/true through the sandbox init", confined),
    ];
    if options.mcp {
        series.push(summarise(
            "MCP shell_exec true (in-process server)",
            round_trip,
        ));
    }
    let whole = series[1].median_ms.max(f64::MIN_POSITIVE);
    let steps = crate::exec::steps::STEP_NAMES
        .iter()
        .zip(per_step)
        .map(|(name, samples)| {
            let s = summarise(name, samples);
            Step {
                name,
                median_ms: s.median_ms,
                p90_ms: s.p90_ms,
                share_percent: 100.0 * s.median_ms / whole,
            }
        })
        .collect();
    let base = series[0].median_ms.max(f64::MIN_POSITIVE);
    let ratio_to_bare_spawn = series
        .iter()
        .skip(1)
        .map(|s| (s.name.to_owned(), s.median_ms / base))
        .collect();
    Ok(BenchReport {
        machine,
        rounds: n,
        series,
        ratio_to_bare_spawn,
        steps,
    })
}

fn machine(runtime: &Runtime) -> Machine {
    let uname = rustix::system::uname();
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let favordynmods = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some("cgroup2"))
        .map(|l| l.contains("favordynmods"));
    Machine {
        kernel: uname.release().to_string_lossy().into_owned(),
        cgroups: format!("{:?}", crate::confine::probe_cgroups().0),
        favordynmods,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        load_average: std::fs::read_to_string("/proc/loadavg")
            .ok()
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default(),
        enforcement: runtime.enforcement_level().as_str().to_owned(),
    }
}

fn summarise(name: &'static str, mut samples: Vec<Duration>) -> Series {
    samples.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| ms(samples[((samples.len() - 1) as f64 * q).round() as usize]);
    Series {
        name,
        median_ms: at(0.5),
        p90_ms: at(0.9),
        min_ms: ms(samples[0]),
        samples: samples.len(),
    }
}

/// `posix_spawn` (std's spawn on Linux) and wait, unconfined.
fn bare_spawn() -> Result<Duration, DoctorError> {
    let started = Instant::now();
    let status = std::process::Command::new("/bin/true")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    if !status.success() {
        return Err(bench_failed("the bare /bin/true failed"));
    }
    Ok(started.elapsed())
}

/// One confined `/bin/true` through the executor: how long it took, and its steps.
async fn confined_spawn(
    runtime: &Runtime,
) -> Result<(Duration, crate::exec::steps::CallSteps), DoctorError> {
    let spec = || CaptureSpec::in_memory(4096);
    let started = Instant::now();
    let request = ExecRequest::new(
        Program::new(["/bin/true"]),
        Duration::from_secs(30),
        spec(),
        spec(),
    );
    let outcome = runtime
        .executor
        .run(request)
        .await
        .map_err(|e| bench_failed(&format!("the confined /bin/true did not start: {e}")))?;
    let took = started.elapsed();
    if !outcome.success() {
        return Err(bench_failed(&format!(
            "the confined /bin/true failed: {:?}",
            outcome.reason()
        )));
    }
    Ok((took, outcome.steps))
}

fn bench_failed(message: &str) -> DoctorError {
    DoctorError::Bench(message.to_owned())
}

/// A raw JSON-RPC client of an in-process `CordonServer`, over in-memory streams.
struct McpClient {
    to_server: tokio::io::DuplexStream,
    from_server: BufReader<tokio::io::DuplexStream>,
    next_id: u64,
}

impl McpClient {
    async fn start(runtime: Arc<Runtime>) -> Result<Self, DoctorError> {
        runtime.start_parser().await?;
        let session = Session::new(runtime)?;
        let server = crate::server::CordonServer::new(session);
        let (to_server, server_reads) = tokio::io::duplex(1 << 20);
        let (server_writes, from_server) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            use rmcp::ServiceExt;
            if let Ok(service) = server.serve((server_reads, server_writes)).await {
                let _ = service.waiting().await;
            }
        });
        let mut client = Self {
            to_server,
            from_server: BufReader::new(from_server),
            next_id: 0,
        };
        client
            .request(
                "initialize",
                serde_json::json!({"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "cordon-doctor-bench", "version": "1"}}),
            )
            .await?;
        client
            .send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(client)
    }

    async fn send(&mut self, message: &serde_json::Value) -> Result<(), DoctorError> {
        let mut line = serde_json::to_vec(message).map_err(|e| bench_failed(&e.to_string()))?;
        line.push(b'\n');
        self.to_server.write_all(&line).await?;
        Ok(())
    }

    async fn request(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, DoctorError> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(
            &serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method,
                                      "params": params}),
        )
        .await?;
        let mut line = String::new();
        loop {
            line.clear();
            if self.from_server.read_line(&mut line).await? == 0 {
                return Err(bench_failed("the in-process server closed its stream"));
            }
            let message: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| bench_failed(&e.to_string()))?;
            if message["id"] == id {
                return Ok(message);
            }
        }
    }

    async fn shell_true(&mut self) -> Result<Duration, DoctorError> {
        let started = Instant::now();
        let answer = self
            .request(
                "tools/call",
                serde_json::json!({"name": "shell_exec", "arguments": {"command": "true"}}),
            )
            .await?;
        let took = started.elapsed();
        if answer["result"]["isError"] != serde_json::Value::Bool(false) {
            return Err(bench_failed(&format!("shell_exec true failed: {answer}")));
        }
        Ok(took)
    }
}

impl BenchReport {
    pub fn render(&self) -> String {
        let m = &self.machine;
        let mut out = format!(
            "cordon doctor --bench: {} rounds, interleaved\nmachine: Linux {}, {} CPUs, cgroups \
             {}, favordynmods {}, load {}, enforcement {}\n",
            self.rounds,
            m.kernel,
            m.cpus,
            m.cgroups,
            m.favordynmods
                .map_or("n/a (no cgroup v2)".to_owned(), |f| f.to_string()),
            m.load_average,
            m.enforcement
        );
        for s in &self.series {
            out.push_str(&format!(
                "  {:<46} median {:7.3} ms  p90 {:7.3} ms  min {:7.3} ms",
                s.name, s.median_ms, s.p90_ms, s.min_ms
            ));
            if let Some(r) = self.ratio_to_bare_spawn.get(s.name) {
                out.push_str(&format!("  {r:5.2}x bare"));
            }
            out.push('\n');
        }
        out.push_str("The confined call's path, step by step (medians; they need not add up):\n");
        for step in &self.steps {
            out.push_str(&format!(
                "  {:<54} median {:7.3} ms  p90 {:7.3} ms  {:5.1}%\n",
                step.name, step.median_ms, step.p90_ms, step.share_percent
            ));
        }
        out.push_str(
            "Compare with BENCHMARKS.md (medians on a noisy machine vary; ratios in one run do \
             not mislead).\n",
        );
        out
    }
}
