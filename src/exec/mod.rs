//! Spawning one confined child and seeing it through: output capture, stdin, timeout,
//! cancellation, and killing the whole tree when the call ends.
//!
//! Owns the process lifecycle and the child's environment ([`ExecPlan`], resolved from the
//! policy by `policy::resolve`; this module never sees a policy), not the confinement itself
//! (`confine` builds it; [`launch`] asks it for a slot of the sandbox init, or hands its
//! prepared `ChildSetup` to `pre_exec` on the per-child path) and not how results are shown
//! (`shape`). Every confined process starts in [`launch`]: calls, background jobs (`jobs`)
//! and long-lived workers (`worker`).
//! The rule it guarantees: when `run` returns, no process the call started is alive. The
//! exceptions are deliberate and explicit: a job lives until its session, lifetime or limits
//! end it, and `spawn_worker` hands back a live, confined worker whose tree dies when it is
//! terminated or dropped.

pub(crate) mod capture;
pub(crate) mod disk;
pub(crate) mod disk_held;
mod disk_scan;
pub(crate) mod env;
pub(crate) mod launch;
pub(crate) mod outcome;
pub(crate) mod process;
pub(crate) mod program;
pub(crate) mod steps;
pub(crate) mod worker;

pub(crate) use capture::{CaptureSpec, Captured, LiveStatus};
pub(crate) use outcome::{
    ExecOutcome, LimitHit, LimitKind, classify_limit, kernel_limit, signal_name,
};
pub(crate) use program::Program;
pub(crate) use worker::{ConfinedWorker, WorkerSpec};

use crate::confine::{CallCgroup, ConfineError, Confinement, SandboxInit, WarmSlot};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

/// After the main process exits, how long readers may take to hit EOF. Only a process that
/// escaped both the cgroup and the process group could hold a pipe open past the kill.
const DRAIN_BOUND: Duration = Duration::from_millis(500);
/// How long to wait for a killed tree to disappear from its cgroup.
const KILL_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Confine(#[from] ConfineError),
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("cannot create the call's temporary directory: {0}")]
    TempDir(std::io::Error),
    #[error("cannot pass descriptors to the worker: {0}")]
    PassFds(std::io::Error),
    #[error(
        "cannot open the workspace root {} to start the command in: {source}",
        path.display()
    )]
    WorkspaceRoot {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// The workspace root, opened for a child to start in. Never optional: a child that could not
/// get it would start in the server's own working directory.
fn open_workspace_root(root: &std::path::Path) -> Result<OwnedFd, ExecError> {
    std::fs::File::open(root)
        .map(OwnedFd::from)
        .map_err(|source| ExecError::WorkspaceRoot {
            path: root.to_path_buf(),
            source,
        })
}

/// A failed start as SPEC names it: a missing program is `not_found`, arguments or
/// environment over the kernel's limits are the caller's to fix, anything else is ours.
impl From<&ExecError> for crate::error_kind::ErrorKind {
    fn from(e: &ExecError) -> Self {
        use crate::error_kind::ErrorKind;
        if e.is_not_found() {
            ErrorKind::NotFound
        } else if e.is_too_big() {
            ErrorKind::InvalidArgument
        } else {
            ErrorKind::Internal
        }
    }
}

impl ExecError {
    /// A spawn that failed because the program does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// A spawn that failed because the arguments or environment exceed the kernel's limits.
    pub fn is_too_big(&self) -> bool {
        matches!(self, Self::Spawn { source, .. } if source.raw_os_error() == Some(libc::E2BIG))
    }
}

/// One command to run: the [`Program`], its input, its bound and how its output is kept.
pub struct ExecRequest {
    /// Under a terminal (`program.pty`), the output is one stream (stdout) and `stdin` is
    /// typed into it.
    pub program: Program,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
    pub stdout: CaptureSpec,
    pub stderr: CaptureSpec,
    pub cancel: Option<CancellationToken>,
    pub live: Option<Arc<LiveStatus>>,
}

impl ExecRequest {
    /// `program` for at most `timeout`, its streams kept as `stdout` and `stderr` say, with no
    /// input, no cancellation but the timeout's, and no live status.
    pub fn new(
        program: Program,
        timeout: Duration,
        stdout: CaptureSpec,
        stderr: CaptureSpec,
    ) -> Self {
        Self {
            program,
            stdin: None,
            timeout,
            stdout,
            stderr,
            cancel: None,
            live: None,
        }
    }

    /// With these bytes written to its input (then closed); None: no input.
    pub fn with_stdin(mut self, stdin: Option<Vec<u8>>) -> Self {
        self.stdin = stdin;
        self
    }
}

/// What an executor needs besides the confinement, resolved from the policy.
#[derive(Debug, Clone, Default)]
pub struct ExecPlan {
    pub env: env::EnvTemplate,
    /// `limits.disk_mb` in bytes: how far one call may shrink free space (see `disk`).
    pub disk_budget: u64,
    /// The policy's extra `read_write` paths, whose filesystems the budget also covers.
    pub disk_extra: Vec<std::path::PathBuf>,
}

/// Runs confined commands for one workspace. Cheap to share (`Arc`).
pub struct Executor {
    confinement: Arc<Confinement>,
    plan: ExecPlan,
}

impl Executor {
    pub fn new(confinement: Arc<Confinement>, plan: ExecPlan) -> Self {
        // The first call finds warm slots too: fill the pool now, off every async thread.
        if confinement.uses_sandbox_init() {
            let warm = Arc::clone(&confinement);
            let _ = std::thread::Builder::new()
                .name("cordon-warm-slots".into())
                .spawn(move || {
                    if let Some(sandbox_init) = warm.current_sandbox_init()
                        && sandbox_init.keeps_warm_slots()
                    {
                        warm.refill_call_slots(&sandbox_init);
                    }
                });
        }
        Self { confinement, plan }
    }

    /// Starts measuring the policy's per-call disk budget over the workspace's filesystem, the
    /// one holding the calls' TMPDIRs and those of extra `read_write` paths. `run` uses it for
    /// every command; a long-lived worker's owner (interpreter cells) starts one per cell and
    /// selects on [`disk::DiskWatch::overrun`]. None (with a warning) when a filesystem cannot
    /// be measured; the call then runs without the budget rather than not at all.
    pub fn watch_disk(&self) -> Option<std::sync::Arc<disk::DiskWatch>> {
        let conf = &self.confinement;
        disk::DiskWatch::start(&[conf.workspace(), conf.tmp_root()], self.plan.disk_budget)
            .inspect_err(|e| tracing::warn!("disk budget not enforced for this call: {e}"))
            .ok()
            .map(|w| self.plan.disk_extra.iter().fold(w, |w, p| w.also_watch(p)))
            .map(std::sync::Arc::new)
    }

    pub fn confinement(&self) -> &Confinement {
        &self.confinement
    }

    /// Runs one call: launch → attach its input and output → wait (exit, timeout, cancel or
    /// disk budget) → bury the tree → the outcome.
    pub async fn run(&self, req: ExecRequest) -> Result<ExecOutcome, ExecError> {
        let mut launched = self
            .launch(launch::LaunchSpec {
                piped_stdin: req.stdin.is_some(),
                program: req.program,
                cpu_seconds: None,
                kind: launch::LaunchKind::Call,
            })
            .await?;
        let started = launched.started;
        let disk = launched.disk.clone();
        // The process that made the call's Landlock domain: the slot, or the forked child.
        let denials_watch = launched.pgid.and_then(crate::confine::audit::watch);
        let io = CallIo::attach(&mut launched, req.stdin, req.stdout, req.stderr, req.live)?;
        let cancel = req.cancel.unwrap_or_default();
        let flood = denials_watch
            .as_ref()
            .map(crate::confine::audit::CallWatch::flood);
        let ended = wait_for_end(
            &mut launched,
            req.timeout,
            &cancel,
            disk.as_ref(),
            flood.as_deref(),
        )
        .await;
        let exited = Instant::now();
        let marks = launched.marks;
        // Whatever happened, the tree dies now: background jobs, double forks, setsid daemons.
        let finished = launched.finish(self, ended.status).await;
        let tree_ended = Instant::now();
        let (stdout, stderr, output_cut_short) =
            collect_output(&io.stop_reading, io.stdout, io.stderr).await;
        use std::os::unix::process::ExitStatusExt;
        let (exit_code, signal) = match finished.status {
            Some(s) => (s.code(), s.signal()),
            None => (None, None),
        };
        let limit = match &ended.disk_overrun {
            Some(hit) => Some(hit.limit_hit()),
            None if ended.audit_flood => Some(audit_limit_hit()),
            None => outcome::classify_limit(
                ended.timed_out,
                finished.hits,
                exit_code,
                signal,
                &[stderr.head.as_slice(), stderr.tail.as_slice()].concat(),
                req.timeout,
            ),
        };
        // Killed by us (timeout, cancel, disk budget): the exit status is our SIGKILL.
        let killed =
            ended.timed_out || ended.cancelled || ended.disk_overrun.is_some() || ended.audit_flood;
        let kernel_denials = kernel_denials(denials_watch, killed || exit_code != Some(0)).await;
        if !killed && signal == Some(libc::SIGSYS) {
            crate::metrics::denials(crate::metrics::Layer::Seccomp, 1);
        }
        let steps = marks.steps(exited, tree_ended, Instant::now());
        Ok(ExecOutcome {
            steps,
            exit_code: if killed { None } else { exit_code },
            signal: if killed { Some(libc::SIGKILL) } else { signal },
            timed_out: ended.timed_out,
            cancelled: ended.cancelled,
            limit,
            stdout,
            stderr,
            duration: started.elapsed(),
            output_cut_short,
            enforcement: self.confinement.enforcement().clone(),
            notices: finished.guard.notices,
            git_refused: finished.guard.refused,
            network: finished.network,
            kernel_denials,
            leftovers_ended: finished.leftovers.unwrap_or(0),
        })
    }
}

/// A call's output readers (pipes or its terminal) and what stops them.
struct CallIo {
    stop_reading: CancellationToken,
    stdout: Option<tokio::task::JoinHandle<Captured>>,
    stderr: Option<tokio::task::JoinHandle<Captured>>,
}

impl CallIo {
    /// Starts draining the call's stdout and stderr (or its terminal) into their captures,
    /// and writes `input` to its stdin (or terminal).
    fn attach(
        launched: &mut launch::Launched,
        input: Option<Vec<u8>>,
        stdout_spec: CaptureSpec,
        stderr_spec: CaptureSpec,
        live: Option<Arc<LiveStatus>>,
    ) -> Result<Self, ExecError> {
        let process::Pipes {
            stdin: stdin_pipe,
            stdout: stdout_pipe,
            stderr: stderr_pipe,
            pty,
        } = std::mem::take(&mut launched.pipes);
        let terminal = match pty {
            Some(master) => Some(crate::confine::terminal::Terminal::new(master).map_err(
                |source| ExecError::Spawn {
                    program: "the command's terminal".into(),
                    source,
                },
            )?),
            None => None,
        };
        let stop_reading = CancellationToken::new();
        let stdout = match &terminal {
            Some(terminal) => Some(tokio::spawn(capture::drain(
                terminal.clone(),
                stdout_spec,
                live.clone(),
                stop_reading.clone(),
            ))),
            None => stdout_pipe.map(|p| {
                tokio::spawn(capture::drain(
                    p,
                    stdout_spec,
                    live.clone(),
                    stop_reading.clone(),
                ))
            }),
        };
        let stderr = stderr_pipe.map(|p| {
            tokio::spawn(capture::drain(
                p,
                stderr_spec,
                live.clone(),
                stop_reading.clone(),
            ))
        });
        match (stdin_pipe, &terminal, input) {
            (Some(mut pipe), _, Some(input)) => {
                tokio::spawn(async move {
                    // A child that exits without reading its input is not an error.
                    let _ = pipe.write_all(&input).await;
                });
            }
            (None, Some(terminal), Some(input)) => {
                let terminal = terminal.clone();
                tokio::spawn(async move {
                    let _ = terminal.write_all(&input).await;
                });
            }
            _ => {}
        }
        Ok(Self {
            stop_reading,
            stdout,
            stderr,
        })
    }
}

/// How a call's wait ended.
struct Ended {
    status: Option<std::process::ExitStatus>,
    timed_out: bool,
    cancelled: bool,
    disk_overrun: Option<disk::DiskOverrun>,
    /// The call's denials came faster than the audit rate bound.
    audit_flood: bool,
}

/// Waits for the call's main process to exit, its timeout, its cancellation or its disk
/// budget, whichever comes first.
async fn wait_for_end(
    launched: &mut launch::Launched,
    timeout: Duration,
    cancel: &CancellationToken,
    disk: Option<&Arc<disk::DiskWatch>>,
    flood: Option<&crate::confine::audit::Flood>,
) -> Ended {
    let mut ended = Ended {
        status: None,
        timed_out: false,
        cancelled: false,
        disk_overrun: None,
        audit_flood: false,
    };
    tokio::select! {
        status = launched.child.wait() => ended.status = status,
        _ = tokio::time::sleep(timeout) => ended.timed_out = true,
        _ = cancel.cancelled() => ended.cancelled = true,
        hit = disk::overrun(disk) => ended.disk_overrun = Some(hit),
        () = audit_flood(flood) => ended.audit_flood = true,
    }
    ended
}

/// Resolves when the call floods the kernel's audit log; pends for ever without a watch.
pub(crate) async fn audit_flood(flood: Option<&crate::confine::audit::Flood>) {
    match flood {
        Some(f) => f.tripped().await,
        None => std::future::pending().await,
    }
}

/// The limit an audit flood is reported as.
pub(crate) fn audit_limit_hit() -> LimitHit {
    LimitHit {
        kind: LimitKind::Audit,
        evidence: format!(
            "the call made the kernel log more than {} denials within {} s (a loop over \
             refused operations), so it was ended before the kernel's audit backlog \
             overflowed and dropped other calls' records; the refusals are in `denials`",
            crate::confine::audit::MAX_RECORDS_PER_WINDOW,
            crate::confine::audit::FLOOD_WINDOW.as_secs()
        ),
    }
}

/// The kernel's Landlock denials of a call. A failed call (`sync`) waits until the kernel's
/// audit queue has passed its records (a barrier: a millisecond or so); a successful one
/// reports what has arrived.
async fn kernel_denials(
    watch: Option<crate::confine::audit::CallWatch>,
    sync: bool,
) -> Option<crate::confine::audit::KernelDenials> {
    let watch = watch?;
    // Without the barrier `finish` only takes what arrived (a lock and a removal): no thread
    // hop for the common, successful call.
    let found = if sync {
        tokio::task::spawn_blocking(move || watch.finish(true))
            .await
            .ok()?
    } else {
        watch.finish(false)
    };
    let n = found.denials.iter().map(|d| d.count).sum::<u64>() + found.not_kept;
    crate::metrics::denials(crate::metrics::Layer::Landlock, n);
    Some(found)
}

impl Executor {
    /// The sandbox init to use, rebuilt off the async threads when its view is out of date.
    /// None when there is no sandbox init (the per-child path).
    pub(crate) async fn sandbox_init(&self) -> Option<Result<Arc<SandboxInit>, ConfineError>> {
        if !self.confinement.uses_sandbox_init() {
            return None;
        }
        if let Some(current) = self.confinement.current_sandbox_init() {
            return Some(Ok(current));
        }
        let confinement = Arc::clone(&self.confinement);
        match tokio::task::spawn_blocking(move || confinement.sandbox_init()).await {
            Ok(found) => found,
            Err(e) => Some(Err(ConfineError::Task(e.to_string()))),
        }
    }

    /// A slot for this call: a warm one, else one made now off the async threads.
    async fn call_slot(&self, sandbox_init: &Arc<SandboxInit>) -> Result<WarmSlot, ConfineError> {
        if let Some(warm) = sandbox_init.pop_warm() {
            // Top the pool up while this call runs: the next one finds a warm slot.
            let (confinement, sandbox_init) =
                (Arc::clone(&self.confinement), Arc::clone(sandbox_init));
            tokio::task::spawn_blocking(move || confinement.refill_call_slots(&sandbox_init));
            return Ok(warm);
        }
        crate::metrics::warm_slot_miss();
        let (confinement, sandbox_init) = (Arc::clone(&self.confinement), Arc::clone(sandbox_init));
        tokio::task::spawn_blocking(move || confinement.make_call_slot(&sandbox_init))
            .await
            .map_err(|e| ConfineError::Task(e.to_string()))?
    }
}

/// The job's working directory relative to the workspace, from the directory the server
/// resolved beneath it (the slot resolves it again, beneath the workspace of its own view).
fn relative_cwd(
    cwd: Option<&OwnedFd>,
    workspace: &std::path::Path,
    argv: &[OsString],
) -> Result<std::path::PathBuf, ExecError> {
    let Some(fd) = cwd else {
        return Ok(".".into());
    };
    let spawn_err = |source| ExecError::Spawn {
        program: argv
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default(),
        source,
    };
    let path =
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).map_err(spawn_err)?;
    path.strip_prefix(workspace)
        .map(|p| {
            if p.as_os_str().is_empty() {
                ".".into()
            } else {
                p.to_path_buf()
            }
        })
        .map_err(|_| {
            spawn_err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the working directory is no longer inside the workspace",
            ))
        })
}

/// Spawns `argv` with exactly `env`, piped stdout/stderr, confined by `setup` between fork
/// and exec. Children never inherit the server's stdin or stdout (they carry the protocol).
fn spawn_confined(
    argv: &[OsString],
    env: &BTreeMap<String, String>,
    [stdin, stdout, stderr]: [Stdio; 3],
    setup: crate::confine::ChildSetup,
) -> Result<tokio::process::Child, ExecError> {
    let program = argv.first().cloned().unwrap_or_default();
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(argv.get(1..).unwrap_or_default())
        .env_clear()
        .envs(env)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true);
    crate::confine::confine_on_spawn(&mut cmd, setup);
    // Forked where audit records its denials (see `on_a_cordon_thread`), inside the runtime
    // that reaps it.
    let runtime = tokio::runtime::Handle::try_current().ok();
    let spawned = crate::confine::audit::on_a_cordon_thread(move || {
        let _entered = runtime.as_ref().map(|r| r.enter());
        cmd.spawn()
    })
    .unwrap_or_else(|| {
        Err(std::io::Error::other(
            "the thread that forks confined processes is gone",
        ))
    });
    spawned.map_err(|source| ExecError::Spawn {
        program: program.to_string_lossy().into_owned(),
        source,
    })
}

/// Ends what is left of a call's tree: its process group at once, then (waiting, bounded)
/// until its cgroups are empty. `emptied`: the slot's reaper already killed and reaped every
/// process of the call and only the reaper itself may still be exiting (tearing the call's
/// namespaces down), so nothing is waited for; its cgroups are emptied and removed after the
/// answer, when they are dropped.
async fn kill_tree(
    cgroup: Option<CallCgroup>,
    pgid: Option<u32>,
    emptied: bool,
) -> Option<CallCgroup> {
    if emptied {
        if let Some(pgid) = pgid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
        return cgroup;
    }
    if let Some(pgid) = pgid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
        // The process group first: it is immediate and covers the no-cgroup case.
        let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        if cgroup.is_none() {
            // Without a cgroup to watch, wait until the group is gone (reaped), so the
            // next call does not count this one's dying processes against RLIMIT_NPROC.
            let deadline = tokio::time::Instant::now() + KILL_WAIT;
            while rustix::process::test_kill_process_group(pgid).is_ok()
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
    match cgroup {
        Some(cg) => tokio::task::spawn_blocking(move || {
            cg.kill_all(KILL_WAIT);
            cg
        })
        .await
        .ok(),
        None => None,
    }
}

/// Waits for both readers to reach EOF, for at most [`DRAIN_BOUND`]; then tells them to stop
/// with what they have. The flag is true when they had to be stopped: some process outside our
/// reach (no cgroup, left the process group) still holds a pipe.
async fn collect_output(
    stop: &CancellationToken,
    stdout: Option<tokio::task::JoinHandle<Captured>>,
    stderr: Option<tokio::task::JoinHandle<Captured>>,
) -> (Captured, Captured, bool) {
    let both = async { (join_reader(stdout).await, join_reader(stderr).await) };
    tokio::pin!(both);
    tokio::select! {
        (out, err) = &mut both => (out, err, false),
        _ = tokio::time::sleep(DRAIN_BOUND) => {
            stop.cancel();
            let (out, err) = both.await;
            (out, err, true)
        }
    }
}

async fn join_reader(reader: Option<tokio::task::JoinHandle<Captured>>) -> Captured {
    match reader {
        Some(handle) => handle.await.unwrap_or_default(),
        None => Captured::default(),
    }
}
