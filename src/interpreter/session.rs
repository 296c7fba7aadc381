//! One interpreter session: its confined worker, its private directory, and running cells on
//! it one at a time, including what happens when a cell overruns, crashes the interpreter,
//! hits a limit or leaves processes running, and when the interpreter dies between calls.
//!
//! Owns the worker's lifecycle within a session (start, watch for its death, interrupt, kill,
//! restart) and reading each cell's output from the server's own output files (`output`).
//! Does not own which sessions exist or when idle ones end (the manager, `super`), nor how
//! results are shown (the tool).

use super::InterpreterPolicy;
use super::output::CellFiles;
use super::protocol::{self, PyException, Ready, Reply, Request};
use super::{Death, InterpreterError, Shared, boot};
use crate::confine::{CallLimits, LimitHits};
use crate::exec::{
    CaptureSpec, Captured, ConfinedWorker, LimitHit, LimitKind, Program, WorkerSpec, kernel_limit,
    signal_name,
};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::net::unix::pipe::{Receiver as ChildStdout, Sender as ChildStdin};
use tokio_util::sync::{CancellationToken, DropGuard};

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
    /// Why the session's variables are gone, when they are (the interpreter was restarted,
    /// before this cell or during it).
    pub state_lost: Option<String>,
    /// The limit that stopped the cell, with the evidence.
    pub limit: Option<LimitHit>,
    /// The interpreter process ended during the cell: how.
    pub worker_died: Option<String>,
    /// This call ran on an interpreter it started itself (first call, reset or restart).
    pub fresh_start: bool,
    /// Processes the cell left running that were killed when it ended.
    pub background_killed: usize,
    /// The session that was ended to give this one a slot.
    pub evicted: Option<String>,
    pub duration: Duration,
    /// What the interpreter's connections through the egress proxy did during the cell.
    pub network: Option<crate::egress::NetworkReport>,
}

/// A session: one worker at a time, one cell at a time.
pub(crate) struct Session {
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
    /// Why an earlier session of this name lost its state between calls; told to the first
    /// call of this one.
    pending_lost: Option<String>,
}

pub(super) struct Worker {
    proc: ConfinedWorker,
    requests: ChildStdin,
    replies: ChildStdout,
    output: CellFiles,
    dir: PathBuf,
    next_id: u64,
    /// Stops the death watch when the worker is ended on purpose.
    _watch: Option<DropGuard>,
}

/// How the wait for a reply ended.
enum Waited {
    Reply(Reply),
    Broken(protocol::ProtocolError),
    /// The interrupt was not honoured within the grace period.
    Unresponsive,
    /// The cell's writes shrank the workspace filesystem past `limits.disk_mb`.
    DiskBudget(LimitHit),
    Shutdown,
}

/// A session no call holds, locked so that none can start on it while this lives.
pub(super) struct Idle<'a>(tokio::sync::MutexGuard<'a, State>);

impl Idle<'_> {
    pub(super) fn generation(&self) -> u64 {
        self.0.generation
    }

    pub(super) fn has_worker(&self) -> bool {
        self.0.worker.is_some()
    }

    /// How the worker ended, when its main process has exited by itself.
    pub(super) fn exited(&mut self, policy: &InterpreterPolicy) -> Option<String> {
        let worker = self.0.worker.as_mut()?;
        let status = worker.proc.try_status()?;
        Some(describe_death(
            worker.proc.limit_hits(),
            Some(status),
            policy,
        ))
    }

    /// Takes out the worker (to be ended with [`end_worker`]) and what the session still had
    /// to tell its next call.
    pub(super) fn take(mut self) -> (Option<Worker>, Option<String>) {
        (self.0.worker.take(), self.0.pending_lost.take())
    }
}

impl Session {
    pub(crate) fn new(name: String, pending_lost: Option<String>) -> Self {
        Self {
            name,
            state: tokio::sync::Mutex::new(State {
                pending_lost,
                ..Default::default()
            }),
            last_used: std::sync::Mutex::new(Instant::now()),
            kill: CancellationToken::new(),
        }
    }

    pub(crate) fn touch(&self) {
        if let Ok(mut t) = self.last_used.lock() {
            *t = Instant::now();
        }
    }

    pub(crate) fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }

    /// The session, locked, when no call is on it.
    pub(super) fn try_idle(&self) -> Option<Idle<'_>> {
        self.state.try_lock().ok().map(Idle)
    }

    /// Runs one cell. Calls on one session queue here, one at a time.
    pub(crate) async fn run(
        &self,
        shared: &Shared,
        req: CellRequest,
    ) -> Result<CellOutcome, InterpreterError> {
        let mut guard = self.state.lock().await;
        if self.kill.is_cancelled() {
            return Err(InterpreterError::ShuttingDown);
        }
        // Through the guard's fields directly, so the worker and the flags borrow apart.
        let state = &mut *guard;
        let policy = &shared.policy;
        let started = Instant::now();
        let mut out = CellOutcome::default();
        // Why the state was gone before this cell ran, and why it went during the cell.
        let lost_before = self
            .ready_worker(shared, state, req.reset, &mut out)
            .await?;
        let worker = state.worker.as_mut().expect("started above");
        worker.output.clear().map_err(InterpreterError::Output)?;
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

        // At the process limit the whole tree is killed below (one cgroup.kill), not chased
        // process by process while it forks.
        let hits = worker.proc.limit_hits();
        if matches!(waited, Waited::Reply(_)) && !policy.keep_background && !hits.pids {
            // Before reading the output, so nothing the cell left behind writes after it.
            out.background_killed = worker.proc.kill_background().await;
        }
        let (stdout, stderr) = worker.output.read(req.stdout, req.stderr).await;
        out.stdout = stdout;
        out.stderr = stderr;
        out.network = worker.proc.network().await;

        let lost_during = settle(state, policy, waited, id, hits, &mut out).await?;
        out.state_lost = lost_text(&lost_before, lost_during);
        if state.worker.is_none() {
            // Ended during this call: start the replacement now, so the next cell does not pay
            // for it; a failure here is reported by that next call.
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

    /// A live worker for the next cell: the one there, or a fresh one where the previous
    /// call abandoned its cell, the worker died since, or the call asks for a reset. Returns
    /// why the session's state was gone before this cell (to be told in its result).
    async fn ready_worker(
        &self,
        shared: &Shared,
        state: &mut State,
        reset: bool,
        out: &mut CellOutcome,
    ) -> Result<Vec<String>, InterpreterError> {
        let mut lost_before: Vec<String> = state.pending_lost.take().into_iter().collect();
        if state.in_flight {
            state.in_flight = false;
            if let Some(w) = state.worker.take() {
                end_worker(w).await;
            }
            lost_before.push(
                "the previous call on this session was abandoned while its cell was running, so \
                 the interpreter was restarted"
                    .into(),
            );
        }
        if let Some(w) = state.worker.as_mut()
            && let Some(status) = w.proc.try_status()
        {
            // Died since the last call and not yet noticed: run the cell on a fresh one.
            let how = describe_death(w.proc.limit_hits(), Some(status), &shared.policy);
            end_worker(state.worker.take().expect("present")).await;
            lost_before.push(format!(
                "the session's interpreter {how} after the previous call"
            ));
        }
        if reset && let Some(w) = state.worker.take() {
            end_worker(w).await;
        }
        if state.worker.is_none() {
            state.generation += 1;
            match start_worker(shared, &self.name, state.generation).await {
                Ok(worker) => state.worker = Some(worker),
                Err(e) => {
                    // Still to be told, by the call that gets an interpreter again.
                    state.pending_lost = (!lost_before.is_empty()).then(|| lost_before.join("; "));
                    return Err(e);
                }
            }
            out.fresh_start = true;
        }
        Ok(lost_before)
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
        // The same per-call disk budget as a shell command, per cell.
        let disk = shared.executor.watch_disk();
        if let Some(watch) = &disk {
            watch.held_by(proc.holders());
        }
        let first = tokio::select! {
            r = &mut read => Some(r),
            hit = crate::exec::disk::overrun(disk.as_ref()) => return Waited::DiskBudget(hit.limit_hit()),
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

    /// Makes a running cell end at once, killing its worker (shutdown).
    pub(crate) fn abort(&self) {
        self.kill.cancel();
    }

    /// Kills whatever runs now (shutdown), then ends the worker.
    pub(crate) async fn end(&self) {
        self.kill.cancel();
        let mut state = self.state.lock().await;
        if let Some(w) = state.worker.take() {
            end_worker(w).await;
        }
    }
}

/// What the wait for cell `id` ended in, made the cell's outcome: its reply, or the limit or
/// death that ended it, the worker ended where the session's state cannot be trusted any
/// more. Returns why the state went during the cell, if it did.
async fn settle(
    state: &mut State,
    policy: &InterpreterPolicy,
    waited: Waited,
    id: u64,
    hits: LimitHits,
    out: &mut CellOutcome,
) -> Result<Option<String>, InterpreterError> {
    let mut lost_during = None;
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
                lost_during = Some(format!(
                    "the interpreter answered request {:?} instead of {id}; it was restarted",
                    reply.id
                ));
            } else {
                out.result = reply.result;
                out.exception = reply.error;
                out.images = reply.images;
                if hits.pids {
                    // Processes left forking at the limit would starve every later cell.
                    let w = state.worker.take().expect("present");
                    end_worker(w).await;
                    out.limit = Some(LimitHit {
                        kind: LimitKind::Pids,
                        evidence: format!(
                            "the session's cgroup refused a fork (pids.max = {})",
                            policy.pids
                        ),
                    });
                    lost_during = Some(
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
        Waited::DiskBudget(hit) => {
            // Writing goes on while the worker lives: it is killed, not interrupted.
            let w = state.worker.take().expect("present");
            end_worker(w).await;
            out.limit = Some(hit);
            lost_during = Some(
                "the cell wrote past the per-call disk budget (limits.disk_mb), so the \
                 interpreter and everything it started were killed; variables, imports and \
                 functions of this session are gone (the files it wrote are still there)"
                    .into(),
            );
        }
        Waited::Unresponsive => {
            let w = state.worker.take().expect("present");
            end_worker(w).await;
            let why = if out.cancelled {
                "the call was cancelled"
            } else {
                "the cell ran past its timeout"
            };
            lost_during = Some(format!(
                "{why} and did not stop within {}s of a KeyboardInterrupt, so the interpreter \
                 and everything it started were killed; variables, imports and functions of \
                 this session are gone",
                policy.interrupt_grace.as_secs()
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
            let (limit, how) = classify_death(hits, status, Some(&problem), policy);
            out.limit = limit;
            lost_during = Some(format!(
                "the interpreter {how}; variables, imports and functions of this session are \
                 gone"
            ));
            out.worker_died = Some(how);
        }
    }
    Ok(lost_during)
}

/// A fresh worker for session `name`: its private directory, the interpreter started
/// confined with the driver and its output files, and its ready frame awaited.
async fn start_worker(
    shared: &Shared,
    name: &str,
    generation: u64,
) -> Result<Worker, InterpreterError> {
    let dir = shared.root.path().join(format!("{name}-{generation}"));
    std::fs::create_dir_all(&dir).map_err(InterpreterError::Io)?;
    let policy = &shared.policy;
    let (spec, output) = worker_spec(shared, &dir)?;
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
    let (Some(requests), Some(mut replies), Some(stderr)) =
        (proc.stdin.take(), proc.stdout.take(), proc.stderr.take())
    else {
        proc.terminate().await;
        remove_dir(dir).await;
        return Err(InterpreterError::Start("the worker has no pipes".into()));
    };
    let diag = keep_diagnostics(stderr);
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
        return Err(not_started(policy, &problem, end.status, &stderr));
    }
    let watch = watch_for_death(&proc, shared, name, generation);
    Ok(Worker {
        proc,
        requests,
        replies,
        output,
        dir,
        next_id: 0,
        _watch: watch,
    })
}

/// How a worker is launched: the bootstrap under the policy's python, off-screen figures,
/// the session's limits, its output files and the driver passed as descriptors.
fn worker_spec(
    shared: &Shared,
    dir: &std::path::Path,
) -> Result<(WorkerSpec, CellFiles), InterpreterError> {
    let policy = &shared.policy;
    let env = BTreeMap::from([
        // matplotlib picks this up at import: no display, figures rendered off-screen.
        ("MPLBACKEND".to_owned(), "Agg".to_owned()),
    ]);
    let output = CellFiles::new().map_err(InterpreterError::Output)?;
    let mut pass_fds = output.for_worker().map_err(InterpreterError::Output)?;
    pass_fds.push((
        boot::DRIVER_FD,
        shared
            .driver
            .for_worker()
            .map_err(InterpreterError::Output)?,
    ));
    let spec = WorkerSpec {
        program: Program::new([
            policy.python.clone().into(),
            std::ffi::OsString::from("-c"),
            boot::bootstrap().into(),
            shared.max_repr.to_string().into(),
        ])
        .with_env(env),
        private_dir: dir.to_path_buf(),
        limits: CallLimits {
            memory_bytes: policy.memory_bytes,
            pids: policy.pids,
            cpu_percent: policy.cpu_percent,
        },
        cpu_seconds: Some(policy.cpu_seconds),
        pass_fds,
        runs_agent_code: true,
    };
    Ok((spec, output))
}

/// Until the driver moves fd 2 to its output file, stderr is where Python reports a failed
/// start; after that this pipe reaches EOF. Keeps its first [`DIAG_BYTES`].
fn keep_diagnostics(
    mut stderr: tokio::net::unix::pipe::Receiver,
) -> tokio::task::JoinHandle<Vec<u8>> {
    tokio::spawn(async move {
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
    })
}

/// Why a worker did not start: what went wrong, how it ended and what it said on stderr.
fn not_started(
    policy: &InterpreterPolicy,
    problem: &str,
    status: Option<std::process::ExitStatus>,
    stderr: &[u8],
) -> InterpreterError {
    let status = status
        .map(describe_status)
        .map(|s| format!(" (it {s})"))
        .unwrap_or_default();
    let stderr = String::from_utf8_lossy(stderr).trim().to_owned();
    InterpreterError::Start(format!(
        "`{}` did not start as an interpreter session: {problem}{status}{}",
        policy.python,
        if stderr.is_empty() {
            String::new()
        } else {
            format!("; its stderr: {stderr}")
        }
    ))
}

/// Tells the manager as soon as the worker's main process exits while nobody asked it to
/// (killed from outside, the OOM killer): a pidfd turns readable when its process ends. The
/// guard stops the watch when the worker is ended on purpose. None where pidfds are not
/// available; the manager then finds dead workers when it needs their slot, and a call finds
/// its own before it sends the cell.
fn watch_for_death(
    proc: &ConfinedWorker,
    shared: &Shared,
    name: &str,
    generation: u64,
) -> Option<DropGuard> {
    let pid = rustix::process::Pid::from_raw(proc.pid()? as i32)?;
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()?;
    // Deprecated because a borrowed raw fd could be closed while registered; an `OwnedFd`
    // moved into the `AsyncFd` lives exactly as long as the registration.
    #[allow(deprecated)]
    let pidfd =
        tokio::io::unix::AsyncFd::with_interest(pidfd, tokio::io::Interest::READABLE).ok()?;
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let deaths = shared.deaths.clone();
    let death = Death {
        name: name.to_owned(),
        generation,
    };
    tokio::spawn(async move {
        tokio::select! {
            biased;
            _ = stopped.cancelled() => {}
            ready = pidfd.readable() => {
                if ready.is_ok() {
                    let _ = deaths.send(death);
                }
            }
        }
    });
    Some(stop.drop_guard())
}

/// Kills the worker's tree and removes its private directory.
pub(super) async fn end_worker(worker: Worker) {
    let Worker {
        proc,
        requests,
        replies,
        dir,
        _watch,
        ..
    } = worker;
    drop((_watch, requests, replies));
    proc.terminate().await;
    remove_dir(dir).await;
}

/// The session's private directory, which its cells wrote into: removed without recursion
/// (see `confine::scratch::remove_tree`), off the async threads.
async fn remove_dir(dir: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || crate::confine::scratch::remove_tree(&dir)).await;
}

/// The one `state_lost` text of a call: what was gone before the cell ran (it then ran in a
/// fresh interpreter), then what went during it.
fn lost_text(before: &[String], during: Option<String>) -> Option<String> {
    let mut parts = Vec::new();
    if !before.is_empty() {
        parts.push(format!(
            "{}; this cell ran in a fresh interpreter, so variables, imports and functions of \
             earlier cells are gone",
            before.join("; ")
        ));
    }
    parts.extend(during);
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by {}", signal_name(sig)),
        (None, None) => "ended without a status".into(),
    }
}

/// How a worker that ended by itself died, in one clause ("was killed by SIGKILL (the
/// session's cgroup OOM killer fired ...)").
fn describe_death(
    hits: LimitHits,
    status: Option<std::process::ExitStatus>,
    policy: &InterpreterPolicy,
) -> String {
    match classify_death(hits, status, None, policy) {
        (Some(limit), how) => format!("{how} ({})", limit.evidence),
        (None, how) => how,
    }
}

/// Why a worker died: a limit when the kernel says so, else its exit status.
fn classify_death(
    hits: LimitHits,
    status: Option<std::process::ExitStatus>,
    problem: Option<&protocol::ProtocolError>,
    policy: &InterpreterPolicy,
) -> (Option<LimitHit>, String) {
    use std::os::unix::process::ExitStatusExt;
    let how = match (status, problem) {
        (Some(s), _) => describe_status(s),
        (None, Some(problem)) => format!("stopped answering ({problem})"),
        (None, None) => "ended".to_owned(),
    };
    let signal = status.and_then(|s| s.signal());
    let limit = kernel_limit(Some(&hits), |sig| signal == Some(sig)).map(|kind| LimitHit {
        kind,
        evidence: match kind {
            LimitKind::Memory => format!(
                "the session's cgroup OOM killer fired (memory limit {} MiB)",
                policy.memory_bytes >> 20
            ),
            LimitKind::Pids => format!(
                "the session's cgroup refused a fork (pids.max = {})",
                policy.pids
            ),
            LimitKind::Cpu => format!(
                "SIGXCPU: the session used its {} CPU seconds",
                policy.cpu_seconds
            ),
            _ => "SIGXFSZ: a file the session wrote reached RLIMIT_FSIZE".into(),
        },
    });
    (limit, how)
}
