//! One background job: its launch, its supervisor, its output and its end.
//!
//! The supervisor task owns the launched process ([`crate::exec::launch::Launched`]) for its
//! whole life and is the only place it ends: the main process exits, a limit is hit (the
//! cgroup's memory or pids, the disk budget), its lifetime or idle time runs out, a signal it
//! was sent ends it, or its session ends; in every case the whole tree is killed through its
//! cgroup and the git check runs, as after any call. Readers drain the pipes (or the
//! terminal's master) into a [`Ring`] per stream and into the job's log file, so a flood costs
//! the ring's size in memory and the spill bound on disk, and never blocks the job.
//!
//! Everything the job writes is hostile: it is counted and bounded before it is kept, and only
//! read from descriptors the server opened before the job ran.

use super::JobEvent;
use super::ring::{Chunk, Ring};
use crate::exec::launch::{LaunchSpec, Launched};
use crate::exec::process::Process;
use crate::exec::{Executor, LimitHit, Program};
use crate::policy::jobs::JobsPolicy;
use serde::Serialize;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;

/// How often the supervisor reads the job's CPU and memory and checks its idle time.
const TICK: Duration = Duration::from_millis(500);
/// After the tree is dead, how long the readers may take to reach the end of the output.
const DRAIN_BOUND: Duration = Duration::from_millis(500);
/// Largest input one `job` call may write.
pub(crate) const MAX_INPUT: usize = 64 * 1024;
/// How long a write to a job's input may wait for the job to read (a full terminal queue).
const INPUT_WAIT: Duration = Duration::from_secs(5);
/// How long a job's process group has after SIGTERM, at each of its two steps (the programs
/// its shell runs, then its main process), before the next step: SIGTERM to the main process,
/// then the kill of the whole tree.
pub(crate) const TERM_GRACE: Duration = Duration::from_secs(3);
/// How long a job's main process (a shell) has to end by itself once the programs it ran
/// ended by SIGTERM, before it is sent SIGTERM too: under load a shell takes a few
/// milliseconds to reap them and run what follows, and telling it at once would end a shell
/// that was about to exit cleanly.
const SHELL_SETTLE: Duration = Duration::from_millis(500);
/// How often a stopping job is looked at (has its group gone?).
const STOP_POLL: Duration = Duration::from_millis(50);
/// A read without `until` returns once the output has been quiet this long (`settle_ms`).
pub(crate) const DEFAULT_SETTLE: Duration = Duration::from_millis(200);

/// What to run as a job.
pub struct JobSpec {
    /// The command line as the caller gave it (for listings and events).
    pub command: String,
    pub program: Program,
    /// Written to the job's input first.
    pub stdin: Option<Vec<u8>>,
    /// The job's log file in the spill area: (workspace-relative path, file).
    pub log: Option<(String, std::fs::File)>,
    /// A shorter life than `[jobs] max_lifetime_secs` (the caller's `timeout_secs`).
    pub lifetime: Option<Duration>,
}

/// Where a job is in its life: `running`; `exited` (its main process exited on its own, any
/// status); `killed` (ended by a signal: one it was sent, or cordon's kill at its lifetime,
/// idle timeout or its session's end); `limit` (ended by one of its limits: memory, pids,
/// disk, CPU time, file size).
// The variants' words live in the enum's doc, not on each variant: a documented variant
// would make the output schema a `oneOf` of `const`s instead of one `enum`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Exited,
    Killed,
    Limit,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Exited => "exited",
            Self::Killed => "killed",
            Self::Limit => "limit",
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a job ended.
#[derive(Debug, Clone)]
pub struct JobEnd {
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub limit: Option<LimitHit>,
    /// In words, for results and events.
    pub reason: String,
    /// What the git check found when the tree was dead (also in the session's next result).
    pub notices: Vec<String>,
    pub git_refused: bool,
    pub network: Option<crate::egress::NetworkReport>,
}

/// A message to a job's supervisor.
#[derive(Debug, Clone)]
pub(crate) enum Control {
    /// A signal for the job's process group (SIGTERM: a graceful stop, see [`TERM_GRACE`]).
    Signal(rustix::process::Signal),
    /// End the job now, whole tree, for this reason (a restart).
    Stop(String),
}

/// What a read waits for (see [`Job::wait_for_news`]).
pub struct Wanted<'a> {
    /// New output that matches (the echo of the input just sent left out).
    pub until: Option<&'a regex::Regex>,
    /// Without `until`: output that has been quiet this long.
    pub settle: Duration,
    /// Input was written by this call: only what came after it counts as its answer.
    pub after_input: bool,
}

/// Where the terminal's echo of the latest input begins, and what it echoes.
struct Echo {
    out_from: u64,
    err_from: u64,
    input: Vec<u8>,
}

/// What a command line needs to run again (`job {restart: true}`).
pub struct Relaunch {
    pub program: Program,
    pub stdin: Option<Vec<u8>>,
    pub lifetime: Option<Duration>,
}

/// Why cordon ended a job.
enum Ending {
    /// The main process ended by itself (or by a signal it was sent).
    Exited(Option<std::process::ExitStatus>),
    /// The main process ended during a graceful stop (SIGTERM from the `job` call): the job
    /// was stopped, whatever status its shell chose (a shell whose program died of SIGTERM
    /// exits 143 itself).
    Stopped(Option<std::process::ExitStatus>),
    /// A limit cordon measures itself: the disk budget, the audit rate bound.
    Limit(crate::exec::LimitHit),
    Killed(String),
}

/// What a job's input goes to.
enum Input {
    Pipe(pipe::Sender),
    Pty(crate::confine::terminal::Terminal),
    Closed,
}

struct Inner {
    out: Ring,
    err: Ring,
    end: Option<JobEnd>,
    last_activity: Instant,
    cpu: Option<Duration>,
    peak_memory: Option<u64>,
    log: Option<std::fs::File>,
    log_written: u64,
    log_truncated: bool,
    /// When the job last wrote output (for settling reads).
    last_output: Instant,
    /// The latest input, for leaving its echo out of what a read waits for.
    echo: Option<Echo>,
    /// The main process has ended or cordon is ending the job: its end is on the way.
    ending: bool,
}

/// A job, shared by its table, its supervisor and its readers.
pub struct Job {
    pub id: String,
    pub command: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub pty: bool,
    /// The main process's pid as the job sees it (in its own PID namespace: 2; on the
    /// per-child path, the host pid).
    pub pid_in_sandbox: Option<u32>,
    /// The log file, workspace-relative, when one could be made.
    pub log_path: Option<String>,
    started: Instant,
    inner: Mutex<Inner>,
    changed: Notify,
    control: mpsc::Sender<Control>,
    input: tokio::sync::Mutex<Input>,
    /// Input written to the job that does not yet end a command line (see [`Job::typed`]).
    typed: tokio::sync::Mutex<String>,
    ended: watch::Receiver<bool>,
    /// Its terminal (under a pty), for resizing.
    terminal: Option<crate::confine::terminal::Terminal>,
    relaunch: Relaunch,
    /// Where its processes are found (whose sockets are its own).
    members: super::sockets::Members,
}

/// One read of a job's output since the previous read.
#[derive(Debug)]
pub struct JobRead {
    pub stdout: Chunk,
    pub stderr: Chunk,
    /// Bytes of output read so far, both streams (monotonic).
    pub cursor: u64,
    pub end: Option<JobEnd>,
    pub cpu: Option<Duration>,
    pub peak_memory: Option<u64>,
    /// The log stopped growing at the spill bound.
    pub log_truncated: bool,
}

/// The job's terminal (under a pty) and where its input goes: the terminal, its stdin pipe,
/// or nowhere.
fn terminal_and_input(
    pipes: &mut crate::exec::process::Pipes,
) -> Result<(Option<crate::confine::terminal::Terminal>, Input), super::StartError> {
    let terminal = match pipes.pty.take() {
        Some(master) => Some(crate::confine::terminal::Terminal::new(master).map_err(
            |source| {
                super::StartError::Exec(crate::exec::ExecError::Spawn {
                    program: "the job's terminal".into(),
                    source,
                })
            },
        )?),
        None => None,
    };
    let input = match (&terminal, pipes.stdin.take()) {
        (Some(master), _) => Input::Pty(master.clone()),
        (None, Some(stdin)) => Input::Pipe(stdin),
        (None, None) => Input::Closed,
    };
    Ok((terminal, input))
}

/// One task per output stream reading it into the job's rings: the terminal's master, or the
/// stdout and stderr pipes.
fn spawn_readers(
    job: &Arc<Job>,
    terminal: Option<crate::confine::terminal::Terminal>,
    pipes: crate::exec::process::Pipes,
) -> Vec<tokio::task::JoinHandle<()>> {
    match terminal {
        Some(master) => vec![tokio::spawn(read_output(
            Arc::clone(job),
            master,
            Stream::Out,
        ))],
        None => [(pipes.stdout, Stream::Out), (pipes.stderr, Stream::Err)]
            .into_iter()
            .filter_map(|(pipe, stream)| {
                pipe.map(|p| tokio::spawn(read_output(Arc::clone(job), p, stream)))
            })
            .collect(),
    }
}

/// Starts the job: launched like a call, then supervised until it ends.
pub(super) async fn start(
    executor: Arc<Executor>,
    id: String,
    spec: JobSpec,
    policy: &JobsPolicy,
    cancel: CancellationToken,
    hooks: Hooks,
) -> Result<Arc<Job>, super::StartError> {
    let relaunch = Relaunch {
        program: spec.program.try_clone(),
        stdin: spec.stdin.clone(),
        lifetime: spec.lifetime,
    };
    let mut launched = executor
        .launch(LaunchSpec {
            program: spec.program,
            piped_stdin: true,
            // RLIMIT_CPU bounds one process's CPU seconds: a dev server may use a core for a
            // while over its life, which its lifetime bounds anyway.
            cpu_seconds: Some(policy.max_lifetime.as_secs().max(1)),
            kind: crate::exec::launch::LaunchKind::Call,
        })
        .await?;
    let pid_in_sandbox = match &launched.child {
        Process::Slot(_) => Some(2),
        Process::Forked(child) => child.id(),
    };
    let mut pipes = std::mem::take(&mut launched.pipes);
    let members = super::sockets::Members {
        cgroup: launched
            .cgroup
            .as_ref()
            .and_then(|c| c.procs_dir())
            .map(Into::into),
        root: launched.pgid,
    };
    let (log_path, log) = match spec.log {
        Some((path, file)) => (Some(path), Some(file)),
        None => (None, None),
    };
    let (control, control_rx) = mpsc::channel(16);
    let (ended_tx, ended) = watch::channel(false);
    let (terminal, input) = terminal_and_input(&mut pipes)?;
    let ring = policy.ring_bytes;
    let job = Arc::new(Job {
        id,
        command: spec.command,
        started_at: crate::audit::now_rfc3339(),
        pty: terminal.is_some(),
        pid_in_sandbox,
        log_path,
        started: Instant::now(),
        inner: Mutex::new(Inner {
            out: Ring::new(ring),
            err: Ring::new(ring),
            end: None,
            last_activity: Instant::now(),
            cpu: None,
            peak_memory: None,
            log,
            log_written: 0,
            log_truncated: false,
            last_output: Instant::now(),
            echo: None,
            ending: false,
        }),
        changed: Notify::new(),
        control,
        input: tokio::sync::Mutex::new(input),
        typed: tokio::sync::Mutex::new(String::new()),
        ended,
        terminal: terminal.clone(),
        relaunch,
        members,
    });
    let readers = spawn_readers(&job, terminal, pipes);
    if let Some(data) = spec.stdin {
        // The caller's `stdin` goes first; its failure (the job exited at once) is no error.
        let _ = job.write_input(&data).await;
    }
    tokio::spawn(supervise(
        Arc::clone(&job),
        executor,
        launched,
        Supervision {
            lifetime: spec
                .lifetime
                .map_or(policy.max_lifetime, |l| l.min(policy.max_lifetime)),
            idle: policy.idle_kill,
            cancel,
            control: control_rx,
            readers,
            ended: ended_tx,
            on_end: hooks.on_end,
            on_idle: hooks.on_idle,
            served: hooks.served,
        },
    ));
    Ok(job)
}

/// Who hears of a job's life besides its readers.
pub(super) struct Hooks {
    /// Its end, once.
    pub on_end: Box<dyn FnOnce(JobEvent) + Send + Sync>,
    /// It is about to be ended as idle: the words to say so (its session's log).
    pub on_idle: Box<dyn Fn(String) + Send + Sync>,
    /// Connections relayed from the host to its servers (`[jobs] forward`).
    pub served: Option<super::Served>,
}

/// How long before the idle kill a job's session is told of it: 60 s, or a tenth of
/// `idle_kill_secs` where that is shorter (whichever moment is later).
fn idle_warning_at(idle: Duration) -> Duration {
    idle.saturating_sub(Duration::from_secs(60))
        .max(idle.mul_f64(0.9))
}

/// While a job is near its idle kill, how often its sockets are looked up for relayed
/// connections (a walk of its descriptors); before its warning and its kill they always are.
const SERVED_LOOK_EVERY: Duration = Duration::from_secs(5);

/// While a job runs, how often what its git wrote is imported into the operator's repository
/// (the same verified import as after every call, `crate::git`): the operator sees a long
/// job's commits within moments, and a change the import refuses ends the job then, not at
/// its end.
const GIT_IMPORT_EVERY: Duration = Duration::from_secs(2);

struct Supervision {
    lifetime: Duration,
    idle: Duration,
    cancel: CancellationToken,
    control: mpsc::Receiver<Control>,
    readers: Vec<tokio::task::JoinHandle<()>>,
    ended: watch::Sender<bool>,
    on_end: Box<dyn FnOnce(JobEvent) + Send + Sync>,
    on_idle: Box<dyn Fn(String) + Send + Sync>,
    served: Option<super::Served>,
}

/// The job's life after its start: waits for its end, whichever comes first, then buries it.
async fn supervise(
    job: Arc<Job>,
    executor: Arc<Executor>,
    mut launched: Launched,
    mut s: Supervision,
) {
    // `cordon_jobs_active` counts this job for as long as this task supervises it.
    let _counted = crate::metrics::job_started();
    let disk = launched.disk.clone();
    // The job's kernel denials are only counted (a job's result has no `denials`): a job
    // that floods the audit log is ended like a call.
    let denials = launched.pgid.and_then(crate::confine::audit::watch);
    let flood = denials
        .as_ref()
        .map(crate::confine::audit::CallWatch::flood);
    let lifetime = tokio::time::sleep(s.lifetime);
    tokio::pin!(lifetime);
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut git_imported = Instant::now();
    // The periodic git import under way, if any (it runs beside the loop, never inside it).
    let mut git_import: Option<tokio::task::JoinHandle<crate::git::GuardReport>> = None;
    // A graceful stop under way (SIGTERM): its step and the step's deadline.
    let mut stopping: Option<(Stop, tokio::time::Instant)> = None;
    let mut stop_poll = tokio::time::interval(STOP_POLL);
    let terminal = job.terminal.clone();
    let mut idle = IdleWatch::new(s.idle);
    let ending = loop {
        tokio::select! {
            status = launched.child.wait() => break match stopping {
                Some(_) => Ending::Stopped(status),
                None => Ending::Exited(status),
            },
            hit = crate::exec::disk::overrun(disk.as_ref()) => break Ending::Limit(hit.limit_hit()),
            () = crate::exec::audit_flood(flood.as_deref()) => {
                break Ending::Limit(crate::exec::audit_limit_hit())
            }
            _ = s.cancel.cancelled() => break Ending::Killed("its session ended".into()),
            _ = &mut lifetime => break Ending::Killed(format!(
                "it ran past `[jobs] max_lifetime_secs` ({}s)", s.lifetime.as_secs()
            )),
            Some(message) = s.control.recv() => match message {
                Control::Signal(rustix::process::Signal::TERM) if stopping.is_none() => {
                    stopping = Some(begin_stop(&launched, terminal.as_ref()));
                }
                Control::Signal(rustix::process::Signal::TERM) => {}
                Control::Signal(signal) => {
                    super::signal::send(
                        &launched, terminal.as_ref(), signal, super::signal::Whom::Group,
                    );
                }
                Control::Stop(why) => break Ending::Killed(why),
            },
            _ = stop_poll.tick(), if stopping.is_some() => {
                let Some((step, deadline)) = stopping else { continue };
                let now = tokio::time::Instant::now();
                match step {
                    // The programs are gone: the shell usually ends by itself within
                    // moments (it reaps them, runs what follows); only then is it told.
                    Stop::Others if now < deadline && !super::signal::others_remain(&launched) => {
                        stopping = Some((Stop::OthersGone, now + SHELL_SETTLE));
                    }
                    Stop::Others | Stop::OthersGone if now >= deadline => {
                        super::signal::send(
                            &launched, None, rustix::process::Signal::TERM, super::signal::Whom::Main,
                        );
                        stopping = Some((Stop::Main, now + TERM_GRACE));
                    }
                    Stop::Main if now >= deadline => break Ending::Killed(format!(
                        "its main process outlived SIGTERM by {}s", TERM_GRACE.as_secs()
                    )),
                    _ => {}
                }
            }
            imported = async { git_import.as_mut().expect("guarded").await },
                if git_import.is_some() =>
            {
                git_import = None;
                if let Ok(report) = imported
                    && report.refused
                {
                    break Ending::Killed(format!(
                        "cordon refused to import the repository's git changes into the \
                         operator's repository while it ran (they stay in the sandbox's): {}",
                        report.notices.join(" ")
                    ));
                }
            }
            _ = tick.tick() => {
                job.note_usage(&launched);
                if git_import.is_none() && git_imported.elapsed() >= GIT_IMPORT_EVERY {
                    git_imported = Instant::now();
                    git_import = launched.start_git_import();
                }
                if let Some(ending) = idle.on_tick(&job, &s).await {
                    break ending;
                }
            }
        }
    };
    bury(&job, &executor, launched, s, ending).await;
}

/// The idle kill's state: whether this idle stretch was warned of, when the job's sockets
/// were last looked up for forwarded connections, and the look at connections made to its
/// servers from inside the sandbox (`serving`; the namespace's count is cumulative, so
/// nothing is missed between looks).
struct IdleWatch {
    warn_at: Duration,
    warned: bool,
    looked: Option<Instant>,
    serving: super::serving::ServingLook,
    serving_looked: Instant,
}

impl IdleWatch {
    fn new(idle: Duration) -> Self {
        Self {
            warn_at: idle_warning_at(idle),
            warned: false,
            looked: None,
            serving: super::serving::ServingLook::default(),
            serving_looked: Instant::now(),
        }
    }

    /// At a tick: notes use (connections served from inside or forwarded), warns once the job
    /// nears its idle kill, and ends it at the kill (never unwarned).
    async fn on_tick(&mut self, job: &Job, s: &Supervision) -> Option<Ending> {
        // Often enough that a short `idle_kill_secs` sees a server in use too.
        if self.serving_looked.elapsed() >= SERVED_LOOK_EVERY.min(s.idle / 4) {
            self.serving_looked = Instant::now();
            let members = job.members();
            let mut look = std::mem::take(&mut self.serving);
            let served = tokio::task::spawn_blocking(move || {
                let served = look.served_since(&members);
                (look, served)
            })
            .await;
            if let Ok((look, served)) = served {
                self.serving = look;
                if served {
                    job.touch();
                }
            }
        }
        let idle = job.idle_for();
        if idle >= self.warn_at
            && let Some(served) = &s.served
            && (idle >= s.idle
                || !self.warned
                || self
                    .looked
                    .is_none_or(|at| at.elapsed() >= SERVED_LOOK_EVERY))
        {
            // A server answering forwarded connections is in use, output or not.
            self.looked = Some(Instant::now());
            let members = job.members();
            let inodes = tokio::task::spawn_blocking(move || members.socket_inodes())
                .await
                .unwrap_or_default();
            if let Some(at) = served(&inodes) {
                job.touch_since(at);
            }
        }
        let idle = job.idle_for();
        // Never killed unwarned: a tick that skipped the warning's window (a short
        // `idle_kill_secs`) warns now and kills at the next.
        if idle >= s.idle && self.warned {
            return Some(Ending::Killed(format!(
                "nobody read its output, sent it input or connected to its servers \
                     (forwarded ports or from inside the sandbox), and it wrote no output, \
                     for `[jobs] idle_kill_secs` ({}s)",
                s.idle.as_secs()
            )));
        }
        if idle < self.warn_at {
            self.warned = false;
        } else if !self.warned {
            self.warned = true;
            (s.on_idle)(format!(
                "job {} has been idle for {}s: it will be killed with its whole tree in \
                     about {}s (`[jobs] idle_kill_secs` = {}) unless its output is read, it is \
                     sent input, it writes output or a server of it is connected to",
                job.id,
                idle.as_secs(),
                s.idle.saturating_sub(idle).as_secs().max(1),
                s.idle.as_secs()
            ));
        }
        None
    }
}

/// The job's end, once its loop has decided it: the tree buried, the readers drained, the
/// end recorded and said (event, log).
async fn bury(
    job: &Job,
    executor: &Executor,
    launched: Launched,
    mut s: Supervision,
    ending: Ending,
) {
    // Reads waiting for an answer now wait for the end instead, which follows within moments.
    job.lock().ending = true;
    job.changed.notify_waiters();
    // The job's last CPU and memory figures, read while its cgroup is still there (a call's
    // result needs neither, so `finish` reads no usage).
    job.note_usage(&launched);
    let status = match &ending {
        Ending::Exited(status) | Ending::Stopped(status) => *status,
        _ => None,
    };
    let finished = launched.finish(executor, status).await;
    // The tree is dead: the readers reach the end of what it wrote, within a bound (only a
    // process outside the cgroup could still hold a pipe).
    let drain = async {
        for reader in &mut s.readers {
            let _ = reader.await;
        }
    };
    if tokio::time::timeout(DRAIN_BOUND, drain).await.is_err() {
        for reader in &s.readers {
            reader.abort();
        }
    }
    let end = judge(ending, &finished, job);
    {
        let mut inner = job.lock();
        inner.log = None;
        inner.end = Some(end.clone());
    }
    *job.input.lock().await = Input::Closed;
    let _ = s.ended.send(true);
    job.changed.notify_waiters();
    tracing::info!("job {} ({}) ended: {}", job.id, job.command, end.reason);
    (s.on_end)(JobEvent {
        id: job.id.clone(),
        state: super::EventState::at_end(end.state),
        reason: end.reason.clone(),
        command: job.command.clone(),
        git_refused: if end.git_refused {
            end.notices.clone()
        } else {
            Vec::new()
        },
    });
}

/// The steps of a graceful stop.
#[derive(Clone, Copy)]
enum Stop {
    /// SIGTERM went to the group but its main process: waiting for them to go.
    Others,
    /// They are gone: the main process (a shell) has [`SHELL_SETTLE`] to end by itself.
    OthersGone,
    /// SIGTERM went to the main process: waiting for it to end.
    Main,
}

/// SIGTERM's first step: the group's other members (under a pty, the terminal's foreground
/// group) are told first, so a shell's program cleans up before the shell ends, which would
/// end the tree. Without others, the main process is told at once.
fn begin_stop(
    launched: &Launched,
    terminal: Option<&crate::confine::terminal::Terminal>,
) -> (Stop, tokio::time::Instant) {
    use super::signal::{Whom, send};
    let signal = rustix::process::Signal::TERM;
    let now = tokio::time::Instant::now();
    if let Some(terminal) = terminal {
        send(launched, Some(terminal), signal, Whom::Group);
        return (Stop::Main, now + TERM_GRACE);
    }
    if send(launched, None, signal, Whom::GroupButMain) > 0 {
        (Stop::Others, now + TERM_GRACE)
    } else {
        send(launched, None, signal, Whom::Main);
        (Stop::Main, now + TERM_GRACE)
    }
}

/// What the job ended as, and why, in words.
fn judge(ending: Ending, finished: &crate::exec::launch::Finished, job: &Job) -> JobEnd {
    use std::os::unix::process::ExitStatusExt;
    let (mut exit_code, mut signal) = match finished.status {
        Some(s) => (s.code(), s.signal()),
        None => (None, None),
    };
    let stderr_tail = job.lock().err.peek_unread(4096);
    let (state, limit, reason) = match ending {
        Ending::Limit(hit) => {
            let reason = format!("stopped by its {}: {}", hit.kind.describe(), hit.evidence);
            (JobState::Limit, Some(hit), reason)
        }
        Ending::Killed(why) => {
            (exit_code, signal) = (None, Some(libc::SIGKILL));
            (
                JobState::Killed,
                None,
                format!("killed with its whole tree: {why}"),
            )
        }
        // A shell whose program died of the SIGTERM the `job` call sent reports it as status
        // 143 (128 + 15): the job was stopped, as when the program is the main process. A
        // shell that carries on after its program cleaned up ends as it chooses (exited).
        Ending::Stopped(_) if signal.is_none() && exit_code == Some(128 + libc::SIGTERM) => (
            JobState::Killed,
            None,
            "stopped by the SIGTERM it was sent: its shell exited with status 143 (its program \
             ended by SIGTERM)"
                .into(),
        ),
        Ending::Exited(_) | Ending::Stopped(_) => {
            let limit = crate::exec::classify_limit(
                false,
                finished.hits,
                exit_code,
                signal,
                &stderr_tail,
                Duration::ZERO,
            );
            match (limit, exit_code, signal) {
                (Some(hit), _, _) => {
                    let reason =
                        format!("stopped by its {}: {}", hit.kind.describe(), hit.evidence);
                    (JobState::Limit, Some(hit), reason)
                }
                (None, Some(code), _) => {
                    (JobState::Exited, None, format!("exited with status {code}"))
                }
                (None, None, Some(sig)) => (
                    JobState::Killed,
                    None,
                    format!("ended by {}", crate::exec::signal_name(sig)),
                ),
                (None, None, None) => (JobState::Killed, None, "ended".into()),
            }
        }
    };
    JobEnd {
        state,
        exit_code,
        signal,
        limit,
        reason,
        notices: finished.guard.notices.clone(),
        git_refused: finished.guard.refused,
        network: finished.network.clone(),
    }
}

enum News {
    Ready,
    /// Not yet; look again at this instant (or when something changes).
    Pending(Option<tokio::time::Instant>),
}

/// Bytes a read's wait looks at in each stream: unread output, and after an input only what
/// came after it, the terminal's echo of the input left out.
fn unread_answer(inner: &Inner, echo: Option<&Echo>) -> (Vec<u8>, Vec<u8>) {
    const LOOK: usize = 64 * 1024;
    let Some(echo) = echo else {
        return (inner.out.peek_unread(LOOK), inner.err.peek_unread(LOOK));
    };
    let out = inner.out.peek_since(echo.out_from, LOOK);
    let skip = echo_len(&out, &echo.input);
    (
        out[skip..].to_vec(),
        inner.err.peek_since(echo.err_from, LOOK),
    )
}

/// How many leading bytes of `output` are the terminal's echo of `input`: the same bytes,
/// with the carriage returns the terminal adds (a newline echoes as CR LF, a CR as CR LF).
fn echo_len(output: &[u8], input: &[u8]) -> usize {
    let (mut o, mut i) = (0, 0);
    while o < output.len() && i < input.len() {
        if output[o] == input[i] || (input[i] == b'\r' && output[o] == b'\n') {
            o += 1;
            i += 1;
        } else if output[o] == b'\r' {
            o += 1;
        } else if input[i] < 0x20 && input[i] != b'\n' && input[i] != b'\t' {
            // A control character echoes as ^X, or not at all.
            if output[o] == b'^' && output.get(o + 1) == Some(&(input[i] ^ 0x40)) {
                o += 2;
            }
            i += 1;
        } else {
            break;
        }
    }
    // A line's end echoes as CR LF: its CR may trail.
    while i == input.len() && input.last() == Some(&b'\n') && o < output.len() && output[o] == b'\r'
    {
        o += 1;
    }
    o
}

/// Whether `bytes` shows anything once escape sequences and whitespace are gone.
fn visible(bytes: &[u8]) -> bool {
    if bytes.is_empty() {
        return false;
    }
    let (text, _) = crate::shape::hygiene::strip_controls(&String::from_utf8_lossy(bytes));
    !text.trim().is_empty()
}

#[derive(Clone, Copy)]
enum Stream {
    Out,
    Err,
}

async fn read_output(job: Arc<Job>, mut from: impl tokio::io::AsyncRead + Unpin, stream: Stream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) => return,
            Ok(n) => job.append(stream, &buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
    }
}

impl Job {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_running(&self) -> bool {
        !*self.ended.borrow()
    }

    /// Waits until the job's tree is dead and its end recorded.
    pub async fn ended(&self) {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|e| *e).await;
    }

    pub fn state(&self) -> JobState {
        self.lock()
            .end
            .as_ref()
            .map_or(JobState::Running, |e| e.state)
    }

    pub fn end(&self) -> Option<JobEnd> {
        self.lock().end.clone()
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Where its processes are found, for telling which sockets are its own.
    pub fn members(&self) -> super::sockets::Members {
        self.members.clone()
    }

    fn idle_for(&self) -> Duration {
        self.lock().last_activity.elapsed()
    }

    /// The idle clock counts from `at` if that is later than what it counts from now.
    fn touch_since(&self, at: Instant) {
        let mut inner = self.lock();
        inner.last_activity = inner.last_activity.max(at);
    }

    /// Someone read or wrote: the idle clock starts again.
    pub fn touch(&self) {
        self.lock().last_activity = Instant::now();
    }

    fn note_usage(&self, launched: &Launched) {
        let Some(cgroup) = launched.cgroup.as_ref() else {
            return;
        };
        let (cpu, peak) = (cgroup.cpu_usage(), cgroup.memory_peak());
        let mut inner = self.lock();
        inner.cpu = cpu.or(inner.cpu);
        inner.peak_memory = peak.or(inner.peak_memory);
    }

    fn append(&self, stream: Stream, data: &[u8]) {
        {
            let mut inner = self.lock();
            match stream {
                Stream::Out => inner.out.push(data),
                Stream::Err => inner.err.push(data),
            }
            // A job that writes output is not idle (a dev server logging the requests it
            // serves); a read's settle time counts from here.
            inner.last_output = Instant::now();
            inner.last_activity = inner.last_output;
            // The whole output in the log, up to the spill bound; the server's writes are not
            // the job's, so the disk budget is credited with them.
            let room = crate::exec::capture::SPILL_LIMIT.saturating_sub(inner.log_written);
            let n = (data.len() as u64).min(room) as usize;
            if n < data.len() {
                inner.log_truncated = true;
            }
            if n > 0
                && let Some(log) = inner.log.as_mut()
            {
                if log.write_all(&data[..n]).is_ok() {
                    crate::exec::capture::count_spilled(n);
                    inner.log_written += n as u64;
                } else {
                    inner.log = None;
                    inner.log_truncated = true;
                }
            }
        }
        self.changed.notify_waiters();
    }

    /// Sends `signal` to the job's process group (through its supervisor; SIGTERM starts a
    /// graceful stop). False once ended.
    pub fn signal(&self, signal: rustix::process::Signal) -> bool {
        self.is_running() && self.control.try_send(Control::Signal(signal)).is_ok()
    }

    /// Ends the job now (whole tree) and waits for its end to be recorded.
    pub async fn stop(&self, why: String) {
        if self.is_running() {
            let _ = self.control.send(Control::Stop(why)).await;
        }
        self.ended().await;
    }

    /// What was typed into the job's shell that is not yet a whole command line: the start
    /// a later input completes. `tools::job_input` keeps it (and holds this lock while it
    /// judges and writes input, so two calls' input cannot interleave between the two).
    pub async fn typed(&self) -> tokio::sync::MutexGuard<'_, String> {
        self.typed.lock().await
    }

    /// Under a pty, the programs that read what is typed now (the terminal's foreground
    /// group, see `readers`); None without a terminal, or when it has no foreground group.
    pub fn foreground_programs(&self) -> Option<Vec<String>> {
        let group = self.terminal.as_ref()?.foreground_group()?;
        Some(super::readers::readers(&self.members, group))
    }

    /// Whether one of the job's processes is a shell reading commands from its input now;
    /// None when its processes could not be read (see `readers`).
    pub fn a_shell_reads_input(&self) -> Option<bool> {
        super::readers::a_shell_reads_input(&self.members)
    }

    /// Resizes the job's terminal (SIGWINCH to its foreground group).
    pub fn resize(&self, cols: u16, rows: u16) -> Result<(), String> {
        match &self.terminal {
            None => Err("the job has no terminal to resize (it was started without `pty`)".into()),
            Some(_) if !self.is_running() => Err("the job has ended".into()),
            Some(t) => t
                .resize(cols, rows)
                .map_err(|e| format!("the terminal was not resized: {e}")),
        }
    }

    /// What the job's command needs to start again.
    pub fn relaunch(&self) -> Relaunch {
        let r = &self.relaunch;
        Relaunch {
            program: r.program.try_clone(),
            stdin: r.stdin.clone(),
            lifetime: r.lifetime,
        }
    }

    /// Writes `data` to the job's input: its terminal, or its stdin pipe. For a pipe, the
    /// single character Ctrl-D (`\u{4}`) closes stdin, as a terminal would read it.
    pub async fn write_input(&self, data: &[u8]) -> Result<(), String> {
        if data.len() > MAX_INPUT {
            return Err(format!(
                "`input` is {} bytes; write at most {MAX_INPUT} bytes per call",
                data.len()
            ));
        }
        let mut input = self.input.lock().await;
        // Marked before the write: the answer (and a terminal's echo) comes after this.
        self.note_input(data);
        match &mut *input {
            Input::Closed => Err(if self.is_running() {
                "the job's input is closed (it was sent Ctrl-D)".into()
            } else {
                "the job has ended; it reads no more input".into()
            }),
            Input::Pipe(_) if data == b"\x04" => {
                *input = Input::Closed;
                Ok(())
            }
            Input::Pipe(pipe) => match tokio::time::timeout(INPUT_WAIT, pipe.write_all(data)).await
            {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(format!("the job did not take the input: {e}")),
                Err(_) => Err(format!(
                    "the job did not read its input within {}s; part of it may be unwritten",
                    INPUT_WAIT.as_secs()
                )),
            },
            Input::Pty(master) => {
                let master = master.clone();
                drop(input);
                match tokio::time::timeout(INPUT_WAIT, master.write_all(data)).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(format!("the job's terminal took no input: {e}")),
                    Err(_) => Err(format!(
                        "the job's terminal took no input for {}s (its input queue is full)",
                        INPUT_WAIT.as_secs()
                    )),
                }
            }
        }
    }

    /// Marks where this input's answer (and, under a pty, its echo) begins.
    fn note_input(&self, data: &[u8]) {
        let mut inner = self.lock();
        let echo = Echo {
            out_from: inner.out.total(),
            err_from: inner.err.total(),
            input: if self.pty { data.to_vec() } else { Vec::new() },
        };
        inner.echo = Some(echo);
    }

    /// Waits up to `wait` for something worth answering with: the job's end; with `until`,
    /// new output that matches it (never the terminal's echo of the input just sent);
    /// without, output (after the input's echo, when input was sent) that has then been
    /// quiet for the settle time. A job whose main process has ended is waited for to its
    /// recorded end, so the answer says it ended.
    pub async fn wait_for_news(&self, wait: Duration, wanted: &Wanted<'_>) {
        if wait.is_zero() {
            // Not even a timer: one that expires at once still waits for the next tick.
            return;
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let recheck = match self.news(wanted) {
                News::Ready => return,
                News::Pending(at) => at.map_or(deadline, |at| at.min(deadline)),
            };
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep_until(recheck) => {
                    if recheck >= deadline {
                        return;
                    }
                }
            }
        }
    }

    fn news(&self, wanted: &Wanted<'_>) -> News {
        let inner = self.lock();
        if inner.end.is_some() {
            return News::Ready;
        }
        let echo = inner.echo.as_ref().filter(|_| wanted.after_input);
        let (out, err) = unread_answer(&inner, echo);
        if let Some(re) = wanted.until {
            let matched = [&out, &err].iter().any(|b| until_matches(re, b));
            return if matched {
                News::Ready
            } else {
                News::Pending(None)
            };
        }
        if inner.ending {
            return News::Pending(None);
        }
        if !visible(&out) && !visible(&err) {
            return News::Pending(None);
        }
        let quiet_at = tokio::time::Instant::from_std(inner.last_output + wanted.settle);
        if tokio::time::Instant::now() >= quiet_at {
            News::Ready
        } else {
            News::Pending(Some(quiet_at))
        }
    }

    /// Consumes up to `max_bytes` of unread output (split between the streams, stdout first).
    pub fn read(&self, max_bytes: usize) -> JobRead {
        let mut inner = self.lock();
        let stdout = inner.out.take_unread(max_bytes);
        let stderr = inner
            .err
            .take_unread(max_bytes.saturating_sub(stdout.bytes.len()));
        JobRead {
            cursor: inner.out.cursor() + inner.err.cursor(),
            stdout,
            stderr,
            end: inner.end.clone(),
            cpu: inner.cpu,
            peak_memory: inner.peak_memory,
            log_truncated: inner.log_truncated,
        }
    }

    /// The last line of output, for listings (nothing is consumed).
    pub fn last_line(&self) -> String {
        let inner = self.lock();
        let l = inner.out.last_line();
        if l.is_empty() {
            inner.err.last_line()
        } else {
            l
        }
    }
}

/// Whether `until` matches `bytes` as the agent is shown them (escape sequences and control
/// characters removed: a terminal's `\r\n` is `\n` in `output`, a coloured word is the word)
/// or as they are: a pattern written from a read's text matches the same output live.
fn until_matches(re: &regex::Regex, bytes: &[u8]) -> bool {
    if bytes.is_empty() {
        return false;
    }
    let raw = String::from_utf8_lossy(bytes);
    if re.is_match(&raw) {
        return true;
    }
    let (shown, removed) = crate::shape::hygiene::strip_controls(&raw);
    removed > 0 && re.is_match(&shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_matches_the_output_as_shown_and_as_written() {
        let answer = b"print(6*7)\r\n42\r\n>>> ";
        let shown = regex::Regex::new("42\n>>> $").unwrap();
        assert!(
            until_matches(&shown, answer),
            "the pattern read off `output`"
        );
        let raw = regex::Regex::new("42\r\n>>> $").unwrap();
        assert!(until_matches(&raw, answer), "the terminal's own bytes");
        let coloured = regex::Regex::new("ready on 3000").unwrap();
        assert!(until_matches(&coloured, b"\x1b[32mready\x1b[0m on 3000\n"));
        assert!(!until_matches(&shown, b""));
    }

    #[test]
    fn the_idle_warning_comes_a_minute_or_a_tenth_before_the_kill() {
        let at = |secs| idle_warning_at(Duration::from_secs(secs));
        assert_eq!(at(900), Duration::from_secs(840));
        assert_eq!(at(3), Duration::from_millis(2700));
        assert_eq!(at(600), Duration::from_secs(540));
    }

    #[test]
    fn the_echo_of_an_input_is_recognised_with_the_terminals_carriage_returns() {
        let out = b"print(1+1)\r\n2\r\n>>> ";
        assert_eq!(echo_len(out, b"print(1+1)\n"), 12);
        assert_eq!(&out[echo_len(out, b"print(1+1)\n")..], b"2\r\n>>> ");
        // Half an echo so far: that half.
        assert_eq!(echo_len(b"prin", b"print(1+1)\n"), 4);
        // Not an echo at all (echo off): nothing is skipped.
        assert_eq!(echo_len(b"2\r\n", b"print(1+1)\n"), 0);
        assert_eq!(echo_len(b"^C\r\n>>> ", b"\x03"), 2);
    }

    #[test]
    fn only_text_is_visible() {
        assert!(!visible(b"\x1b[?2004l\r\n"));
        assert!(visible(b"\x1b[1m2\x1b[0m"));
    }
}
