//! One interpreter session: its confined worker, its private directory, and running cells on
//! it one at a time, including what happens when a cell overruns, crashes the interpreter or
//! hits a limit.
//!
//! Owns the worker's lifecycle within a session (start, interrupt, kill, restart) and reading
//! each cell's captured output. Does not own which sessions exist or when idle ones end (the
//! manager, `super`), nor how results are shown (the tool).

use super::protocol::{self, PyException, Ready, Reply, Request};
use super::{InterpreterError, Shared};
use crate::confine::{CallLimits, LimitHits};
use crate::exec::{
    CaptureSpec, Captured, ConfinedWorker, LimitHit, LimitKind, WorkerSpec, capture, signal_name,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::net::unix::pipe::{Receiver as ChildStdout, Sender as ChildStdin};
use tokio_util::sync::CancellationToken;

/// The driver script, compiled in so the binary works from any directory.
const DRIVER: &str = include_str!("driver.py");
/// How long a worker whose protocol pipe closed gets to report its exit status.
const DEATH_WAIT: Duration = Duration::from_millis(500);
/// How much of a failed start's stderr is kept for the error message.
const DIAG_BYTES: usize = 8 * 1024;

/// One cell to run.
pub struct CellRequest {
    pub code: String,
    /// Start from a fresh interpreter (and a fresh private directory) before running.
    pub reset: bool,
    pub timeout: Duration,
    /// The client gave up on the call: interrupt the cell like a timeout.
    pub cancel: CancellationToken,
    pub stdout: CaptureSpec,
    pub stderr: CaptureSpec,
}

/// What a cell came to.
#[derive(Debug, Default)]
pub struct CellOutcome {
    /// repr() of the final expression, when there was one and its value is not None.
    pub result: Option<String>,
    /// The Python exception the cell ended with (KeyboardInterrupt after a timeout included).
    pub exception: Option<PyException>,
    /// Figures as base64 PNG.
    pub images: Vec<String>,
    pub stdout: Captured,
    pub stderr: Captured,
    pub timed_out: bool,
    pub cancelled: bool,
    /// Why the session's variables are gone, when they are (the interpreter was restarted).
    pub state_lost: Option<String>,
    /// The limit that stopped the cell, with the evidence.
    pub limit: Option<LimitHit>,
    /// The interpreter process ended during the cell: how.
    pub worker_died: Option<String>,
    /// This call ran on an interpreter it started itself (first call, reset or restart).
    pub fresh_start: bool,
    pub duration: Duration,
}

/// A session: one worker at a time, one cell at a time.
pub struct Session {
    pub name: String,
    state: tokio::sync::Mutex<State>,
    last_used: std::sync::Mutex<Instant>,
    /// Cancelled at shutdown: whatever runs is killed at once.
    kill: CancellationToken,
}

#[derive(Default)]
struct State {
    worker: Option<Worker>,
    /// A request was sent whose reply was never read because the call that sent it was
    /// dropped; the interpreter may still be running that cell.
    in_flight: bool,
    generation: u64,
}

struct Worker {
    proc: ConfinedWorker,
    requests: ChildStdin,
    replies: ChildStdout,
    dir: PathBuf,
    next_id: u64,
}

/// How the wait for a reply ended.
enum Waited {
    Reply(Reply),
    Broken(protocol::ProtocolError),
    /// The interrupt was not honoured within the grace period.
    Unresponsive,
    Shutdown,
}

impl Session {
    pub fn new(name: String) -> Self {
        Self {
            name,
            state: Default::default(),
            last_used: std::sync::Mutex::new(Instant::now()),
            kill: CancellationToken::new(),
        }
    }

    pub fn touch(&self) {
        if let Ok(mut t) = self.last_used.lock() {
            *t = Instant::now();
        }
    }

    pub fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }

    /// Runs one cell. Calls on one session queue here, one at a time.
    pub async fn run(
        &self,
        shared: &Shared,
        req: CellRequest,
    ) -> Result<CellOutcome, InterpreterError> {
        let mut guard = self.state.lock().await;
        // Through the guard's fields directly, so the worker and the flags borrow apart.
        let state = &mut *guard;
        let started = Instant::now();
        let mut out = CellOutcome::default();
        if state.in_flight {
            state.in_flight = false;
            if let Some(w) = state.worker.take() {
                end_worker(w).await;
            }
            out.state_lost = Some(
                "the previous call on this session was abandoned while its cell was running, so \
                 the interpreter was restarted"
                    .into(),
            );
        }
        if req.reset
            && let Some(w) = state.worker.take()
        {
            end_worker(w).await;
        }
        if state.worker.is_none() {
            state.generation += 1;
            let worker = start_worker(shared, &self.name, state.generation).await?;
            state.worker = Some(worker);
            out.fresh_start = true;
        }
        let worker = state.worker.as_mut().expect("started above");
        worker.next_id += 1;
        let id = worker.next_id;
        let request = Request {
            op: "run",
            id,
            code: &req.code,
        };
        let sent = protocol::write_frame(&mut worker.requests, &request).await;
        state.in_flight = sent.is_ok();
        let waited = match sent {
            Err(e) => Waited::Broken(e),
            Ok(()) => {
                let (timeout, cancel) = (req.timeout, &req.cancel);
                self.wait_reply(shared, worker, timeout, cancel, &mut out)
                    .await
            }
        };
        state.in_flight = false;

        let dir = worker.dir.clone();
        let (stdout, stderr) = (
            read_capture(&dir.join("io/stdout"), req.stdout).await,
            read_capture(&dir.join("io/stderr"), req.stderr).await,
        );
        out.stdout = stdout;
        out.stderr = stderr;

        match waited {
            Waited::Reply(reply) => {
                // A reply that is not an interrupt means the cell ended on its own just as the
                // deadline passed; it did not time out.
                if (out.timed_out || out.cancelled) && !reply.interrupted {
                    out.timed_out = false;
                    out.cancelled = false;
                }
                if reply.id != Some(id) {
                    let w = state.worker.take().expect("present");
                    end_worker(w).await;
                    out.state_lost = Some(format!(
                        "the interpreter answered request {:?} instead of {id}; it was restarted",
                        reply.id
                    ));
                } else {
                    out.result = reply.result;
                    out.exception = reply.error;
                    out.images = reply.images;
                    let hits = worker.proc.limit_hits();
                    if hits.pids {
                        // Processes left forking at the limit would starve every later cell.
                        let w = state.worker.take().expect("present");
                        end_worker(w).await;
                        out.limit = Some(LimitHit {
                            kind: LimitKind::Pids,
                            evidence: format!(
                                "the session's cgroup refused a fork (pids.max = {})",
                                shared.policy.pids
                            ),
                        });
                        out.state_lost = Some(
                            "the cell reached the session's process limit, so everything it \
                             started was killed and the interpreter restarted"
                                .into(),
                        );
                    }
                }
            }
            Waited::Shutdown => {
                if let Some(w) = state.worker.take() {
                    end_worker(w).await;
                }
                return Err(InterpreterError::ShuttingDown);
            }
            Waited::Unresponsive => {
                let w = state.worker.take().expect("present");
                end_worker(w).await;
                let why = if out.cancelled {
                    "the call was cancelled"
                } else {
                    "the cell ran past its timeout"
                };
                out.state_lost = Some(format!(
                    "{why} and did not stop within {}s of a KeyboardInterrupt, so the interpreter \
                     and everything it started were killed; variables, imports and functions of \
                     this session are gone",
                    shared.policy.interrupt_grace.as_secs()
                ));
            }
            Waited::Broken(problem) => {
                let mut w = state.worker.take().expect("present");
                let status = match w.proc.try_status() {
                    Some(s) => Some(s),
                    None => w.proc.wait_for_exit(DEATH_WAIT).await,
                };
                let hits = w.proc.limit_hits();
                end_worker(w).await;
                let (limit, how) = classify_death(hits, status, &problem, &shared.policy);
                out.limit = limit;
                out.state_lost = Some(format!(
                    "the interpreter {how}; variables, imports and functions of this session are \
                     gone"
                ));
                out.worker_died = Some(how);
            }
        }
        if state.worker.is_none() && out.state_lost.is_some() {
            // Start the replacement now, so the next cell does not pay for it; a failure here
            // is reported by that next call.
            state.generation += 1;
            if let Ok(w) = start_worker(shared, &self.name, state.generation).await {
                state.worker = Some(w);
            }
        }
        drop(guard);
        self.touch();
        out.duration = started.elapsed();
        Ok(out)
    }

    async fn wait_reply(
        &self,
        shared: &Shared,
        worker: &mut Worker,
        timeout: Duration,
        cancel: &CancellationToken,
        out: &mut CellOutcome,
    ) -> Waited {
        let Worker { proc, replies, .. } = worker;
        // One read for the whole wait: a frame read is not cancel-safe.
        let read = protocol::read_frame::<Reply>(replies);
        tokio::pin!(read);
        let first = tokio::select! {
            r = &mut read => Some(r),
            _ = tokio::time::sleep(timeout) => { out.timed_out = true; None }
            _ = cancel.cancelled() => { out.cancelled = true; None }
            _ = self.kill.cancelled() => return Waited::Shutdown,
        };
        let reply = match first {
            Some(r) => r,
            None => {
                proc.interrupt();
                tokio::select! {
                    r = &mut read => r,
                    _ = tokio::time::sleep(shared.policy.interrupt_grace) => return Waited::Unresponsive,
                    _ = self.kill.cancelled() => return Waited::Shutdown,
                }
            }
        };
        match reply {
            Ok(r) => Waited::Reply(r),
            Err(e) => Waited::Broken(e),
        }
    }

    /// Ends the worker if the session is not busy; false when a call holds it.
    pub async fn end_if_idle(&self) -> bool {
        let Ok(mut state) = self.state.try_lock() else {
            return false;
        };
        if let Some(w) = state.worker.take() {
            end_worker(w).await;
        }
        true
    }

    /// Makes a running cell end at once, killing its worker (shutdown).
    pub fn abort(&self) {
        self.kill.cancel();
    }

    /// Kills whatever runs now (shutdown), then ends the worker.
    pub async fn end(&self) {
        self.kill.cancel();
        let mut state = self.state.lock().await;
        if let Some(w) = state.worker.take() {
            end_worker(w).await;
        }
    }
}

async fn start_worker(
    shared: &Shared,
    name: &str,
    generation: u64,
) -> Result<Worker, InterpreterError> {
    let dir = shared.root.path().join(format!("{name}-{generation}"));
    let io_dir = dir.join("io");
    std::fs::create_dir_all(&io_dir).map_err(InterpreterError::Io)?;
    let policy = &shared.policy;
    let env = BTreeMap::from([
        // matplotlib picks this up at import: no display, figures rendered off-screen.
        ("MPLBACKEND".to_owned(), "Agg".to_owned()),
    ]);
    let spec = WorkerSpec {
        argv: vec![
            policy.python.clone().into(),
            "-c".into(),
            DRIVER.into(),
            io_dir.clone().into(),
            shared.max_repr.to_string().into(),
        ],
        env,
        private_dir: dir.clone(),
        limits: CallLimits {
            memory_bytes: policy.memory_bytes,
            pids: policy.pids,
            cpu_percent: policy.cpu_percent,
        },
        cpu_seconds: Some(policy.cpu_seconds),
    };
    let mut proc = match shared.executor.spawn_worker(spec) {
        Ok(p) => p,
        Err(e) => {
            remove_dir(dir).await;
            return Err(InterpreterError::Spawn {
                python: policy.python.clone(),
                source: e,
            });
        }
    };
    let (Some(requests), Some(mut replies), Some(mut stderr)) =
        (proc.stdin.take(), proc.stdout.take(), proc.stderr.take())
    else {
        proc.terminate().await;
        remove_dir(dir).await;
        return Err(InterpreterError::Start("the worker has no pipes".into()));
    };
    // Until the driver moves fd 2 to the capture file, stderr is where Python reports a failed
    // start; after that this pipe reaches EOF.
    let diag = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut kept = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            let room = DIAG_BYTES.saturating_sub(kept.len());
            kept.extend_from_slice(&buf[..n.min(room)]);
        }
        kept
    });
    let ready = tokio::time::timeout(
        policy.start_timeout,
        protocol::read_frame::<Ready>(&mut replies),
    )
    .await;
    let problem = match ready {
        Ok(Ok(Ready { ready: true, .. })) => None,
        Ok(Ok(_)) => Some("the driver did not report ready".to_owned()),
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!(
            "it did not report ready within {}s",
            policy.start_timeout.as_secs()
        )),
    };
    if let Some(problem) = problem {
        let end = proc.terminate().await;
        let stderr = tokio::time::timeout(DEATH_WAIT, diag)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        remove_dir(dir).await;
        let status = end
            .status
            .map(describe_status)
            .map(|s| format!(" (it {s})"))
            .unwrap_or_default();
        let stderr = String::from_utf8_lossy(&stderr).trim().to_owned();
        return Err(InterpreterError::Start(format!(
            "`{}` did not start as an interpreter session: {problem}{status}{}",
            policy.python,
            if stderr.is_empty() {
                String::new()
            } else {
                format!("; its stderr: {stderr}")
            }
        )));
    }
    Ok(Worker {
        proc,
        requests,
        replies,
        dir,
        next_id: 0,
    })
}

/// Kills the worker's tree and removes its private directory.
async fn end_worker(worker: Worker) {
    let Worker {
        proc,
        requests,
        replies,
        dir,
        ..
    } = worker;
    drop((requests, replies));
    proc.terminate().await;
    remove_dir(dir).await;
}

async fn remove_dir(dir: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
}

async fn read_capture(path: &Path, spec: CaptureSpec) -> Captured {
    match tokio::fs::File::open(path).await {
        Ok(file) => capture::drain(file, spec, None, CancellationToken::new()).await,
        Err(_) => Captured::default(),
    }
}

fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by {}", signal_name(sig)),
        (None, None) => "ended without a status".into(),
    }
}

/// Why a worker died during a cell: a limit when the kernel says so, else its exit status.
fn classify_death(
    hits: LimitHits,
    status: Option<std::process::ExitStatus>,
    problem: &protocol::ProtocolError,
    policy: &crate::policy::InterpreterPolicy,
) -> (Option<LimitHit>, String) {
    use std::os::unix::process::ExitStatusExt;
    let how = match status {
        Some(s) => describe_status(s),
        None => format!("stopped answering ({problem})"),
    };
    let limit = if hits.memory {
        Some(LimitHit {
            kind: LimitKind::Memory,
            evidence: format!(
                "the session's cgroup OOM killer fired (memory limit {} MiB)",
                policy.memory_bytes >> 20
            ),
        })
    } else if hits.pids {
        Some(LimitHit {
            kind: LimitKind::Pids,
            evidence: format!(
                "the session's cgroup refused a fork (pids.max = {})",
                policy.pids
            ),
        })
    } else if status.and_then(|s| s.signal()) == Some(libc::SIGXCPU) {
        Some(LimitHit {
            kind: LimitKind::Cpu,
            evidence: format!(
                "SIGXCPU: the session used its {} CPU seconds",
                policy.cpu_seconds
            ),
        })
    } else {
        None
    };
    (limit, how)
}
