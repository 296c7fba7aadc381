//! Background jobs: confined process trees that outlive their `tools/call`, owned by one
//! client session and bounded like a call.
//!
//! A job is launched exactly like a call (`exec::launch`: a warm slot of the sandbox init, its
//! own cgroups with the per-call memory, pids and CPU limits, the disk budget, Landlock and
//! seccomp), but its supervisor ([`job`]) keeps it running after the call answers: its output
//! goes to a bounded ring per stream and to a log file in the spill area, and it ends (whole
//! tree, through its cgroup) at its limits, its lifetime, its idle timeout, an explicit signal,
//! or when its session ends. Every ending becomes a [`JobEvent`] that the session's next result
//! carries. Host ports reach jobs' servers only through [`forward`], where the operator opted
//! in.
//!
//! Owns the per-session table (how many, which ids, what ended), not the MCP contract
//! (`tools::job`, `tools::shell_exec`) nor the launch (`exec`).

pub(crate) mod forward;
pub(crate) mod job;
pub(crate) mod readers;
pub(crate) mod ring;
pub(crate) mod serving;
pub(crate) mod signal;
pub(crate) mod sockets;

pub(crate) use job::{Job, JobEnd, JobRead, JobSpec, JobState, Wanted};

use crate::exec::Executor;
use crate::policy::jobs::JobsPolicy;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Ended jobs a table keeps for reading after their end; the oldest go first.
const KEEP_ENDED: usize = 16;
/// Endings kept for the next result; past that the oldest are folded into a count.
const MAX_EVENTS: usize = 64;

/// How a job ended, as every later result of its session says once.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq, Eq)]
pub struct JobEvent {
    pub id: String,
    pub state: EventState,
    /// Why, in words: "exited with status 0", "killed: ran past jobs.max_lifetime_secs (3600s)".
    pub reason: String,
    pub command: String,
    /// The git changes cordon refused to import after the job (see `crate::git`), for the
    /// audit record; results say them in the job's notices.
    #[serde(skip)]
    pub git_refused: Vec<String>,
}

/// The state a `job_events` line names: the job's state at its end (`exited`, `killed`,
/// `limit`), or `ended` for the line that stands for endings not kept.
#[derive(Debug, Clone, Copy, Serialize, schemars::JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EventState {
    Exited,
    Killed,
    Limit,
    Ended,
}

impl EventState {
    /// Every value, in the order the output schema lists them.
    pub const ALL: [EventState; 4] = [Self::Exited, Self::Killed, Self::Limit, Self::Ended];

    /// The state an ended job is in. A job's end is never `Running`; were it, the event
    /// would say only that it ended.
    pub fn at_end(state: JobState) -> Self {
        match state {
            JobState::Exited => Self::Exited,
            JobState::Killed => Self::Killed,
            JobState::Limit => Self::Limit,
            JobState::Running => Self::Ended,
        }
    }
}

/// Why a job could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(
        "background jobs are disabled by the policy (`[jobs] max_per_session = 0` in {origin}); \
         run the command without `background`, or ask the operator to enable jobs"
    )]
    Disabled { origin: String },
    #[error(
        "this session already has {running} running jobs, the most `[jobs] max_per_session` \
         allows ({origin}); end one with the `job` tool (`signal: \"TERM\"`) or wait for one \
         to finish"
    )]
    Full { running: usize, origin: String },
    #[error("the session is ending; no job can start")]
    Closing,
    #[error(transparent)]
    Exec(#[from] crate::exec::ExecError),
    #[error("cannot create the job's log file: {0}")]
    Log(std::io::Error),
}

impl StartError {
    pub fn kind(&self) -> crate::error_kind::ErrorKind {
        use crate::error_kind::ErrorKind;
        match self {
            Self::Disabled { .. } => ErrorKind::Denied,
            Self::Full { .. } | Self::Closing => ErrorKind::ResourceLimit,
            Self::Exec(e) => ErrorKind::from(e),
            Self::Log(_) => ErrorKind::Io,
        }
    }
}

/// One session's jobs.
pub struct JobTable {
    policy: JobsPolicy,
    origin: String,
    executor: Arc<Executor>,
    jobs: Mutex<BTreeMap<u64, Arc<Job>>>,
    /// Starts under way (counted against the limit before their launch finishes).
    starting: Mutex<usize>,
    events: Arc<Mutex<Events>>,
    next_id: AtomicU64,
    /// Cancelled when the session ends: every job's tree dies with it.
    cancel: CancellationToken,
    /// Told of every ending as it happens (the audit log, the client's log messages).
    observer: Option<Observer>,
    /// When a forwarded connection last reached a job's servers (`[jobs] forward`).
    served: Option<Served>,
}

/// When a connection relayed from the host last reached one of these listening sockets (by
/// inode): serving them is activity, as output and reads are.
pub(crate) type Served =
    Arc<dyn Fn(&std::collections::HashSet<u64>) -> Option<std::time::Instant> + Send + Sync>;

/// Who hears of a job's end as it happens, besides the session's next result.
pub(crate) type Observer = Arc<dyn Fn(&JobEvent) + Send + Sync>;

#[derive(Default)]
struct Events {
    queue: VecDeque<JobEvent>,
    folded: usize,
}

impl JobTable {
    pub fn new(
        policy: JobsPolicy,
        origin: String,
        executor: Arc<Executor>,
        cancel: CancellationToken,
        observer: Option<Observer>,
    ) -> Self {
        Self {
            policy,
            origin,
            executor,
            jobs: Mutex::default(),
            starting: Mutex::new(0),
            events: Arc::default(),
            next_id: AtomicU64::new(1),
            cancel,
            observer,
            served: None,
        }
    }

    /// Relayed connections to a job's servers keep it from being ended as idle.
    pub fn with_served(mut self, served: Served) -> Self {
        self.served = Some(served);
        self
    }

    pub fn policy(&self) -> &JobsPolicy {
        &self.policy
    }

    fn lock_jobs(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Job>>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Jobs of this session still running.
    pub fn running(&self) -> usize {
        self.lock_jobs().values().filter(|j| j.is_running()).count()
    }

    /// Starts `spec` as a job of this session, or says why not.
    /// Whether a job could start now (the policy allows jobs, the session is not closing, a
    /// place is free), checked before anything is made for it (its log); `start` checks again
    /// as it takes the place.
    pub fn check_room(&self) -> Result<(), StartError> {
        let starting = *self.starting.lock().unwrap_or_else(|e| e.into_inner());
        self.refusal(starting).map_or(Ok(()), Err)
    }

    fn refusal(&self, starting: usize) -> Option<StartError> {
        if !self.policy.enabled() {
            return Some(StartError::Disabled {
                origin: self.origin.clone(),
            });
        }
        if self.cancel.is_cancelled() {
            return Some(StartError::Closing);
        }
        let running = self.running() + starting;
        (running >= self.policy.max_per_session).then(|| StartError::Full {
            running,
            origin: self.origin.clone(),
        })
    }

    pub async fn start(&self, spec: JobSpec) -> Result<Arc<Job>, StartError> {
        let number = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.start_as(number, spec).await
    }

    /// Ends job `id` (whole tree) and starts `spec` (its command again) under the same id.
    pub async fn restart(&self, id: &str, spec: JobSpec) -> Result<Arc<Job>, StartError> {
        let number: u64 = id
            .strip_prefix("job-")
            .and_then(|n| n.parse().ok())
            .ok_or(StartError::Closing)?;
        if let Some(old) = self.get(id) {
            old.stop("it was restarted (`job {\"restart\": true}`)".into())
                .await;
        }
        self.start_as(number, spec).await
    }

    async fn start_as(&self, number: u64, spec: JobSpec) -> Result<Arc<Job>, StartError> {
        {
            let mut starting = self.starting.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(refused) = self.refusal(*starting) {
                return Err(refused);
            }
            *starting += 1;
        }
        let id = format!("job-{number}");
        let events = Arc::clone(&self.events);
        let observer = self.observer.clone();
        // The client's log messages: captured now, inside the call (the supervisor runs
        // outside any call).
        let session = crate::events::SessionKey::current();
        let on_end = Box::new(move |event: JobEvent| {
            if let Some(observe) = &observer {
                observe(&event);
            }
            if let Some(session) = session {
                let level = match event.state {
                    EventState::Exited => crate::events::Level::Info,
                    _ => crate::events::Level::Warning,
                };
                // cordon's own words only: the reason names bounds and signals, never the
                // command line or its output.
                crate::events::emit_to(
                    session,
                    level,
                    "job_ended",
                    serde_json::json!({
                        "job": event.id,
                        "state": event.state,
                        "message": format!("job {} ended: {}", event.id, event.reason),
                    }),
                );
            }
            let mut e = events.lock().unwrap_or_else(|e| e.into_inner());
            if e.queue.len() >= MAX_EVENTS {
                e.queue.pop_front();
                e.folded += 1;
            }
            e.queue.push_back(event);
        });
        let warned_id = id.clone();
        let on_idle: Box<dyn Fn(String) + Send + Sync> = Box::new(move |message: String| {
            if let Some(session) = session {
                crate::events::emit_to(
                    session,
                    crate::events::Level::Warning,
                    "job_idle",
                    serde_json::json!({"job": warned_id, "message": message}),
                );
            }
        });
        let started = job::start(
            Arc::clone(&self.executor),
            id,
            spec,
            &self.policy,
            self.cancel.child_token(),
            job::Hooks {
                on_end,
                on_idle,
                served: self.served.clone(),
            },
        )
        .await;
        *self.starting.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        let job = started?;
        let mut jobs = self.lock_jobs();
        jobs.insert(number, Arc::clone(&job));
        // Forget the oldest ended jobs beyond what is kept for reading.
        let ended: Vec<u64> = jobs
            .iter()
            .filter(|(_, j)| !j.is_running())
            .map(|(n, _)| *n)
            .collect();
        for n in ended.iter().take(ended.len().saturating_sub(KEEP_ENDED)) {
            jobs.remove(n);
        }
        Ok(job)
    }

    /// The job called `id` in this session (another session's ids are unknown here).
    pub fn get(&self, id: &str) -> Option<Arc<Job>> {
        let number: u64 = id.strip_prefix("job-")?.parse().ok()?;
        self.lock_jobs().get(&number).cloned()
    }

    /// Every job of this session, oldest first.
    pub fn list(&self) -> Vec<Arc<Job>> {
        self.lock_jobs().values().cloned().collect()
    }

    /// The endings not yet reported, oldest first (each is reported once), with a line for
    /// those that did not fit.
    pub fn take_events(&self) -> Vec<JobEvent> {
        let mut e = self.events.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<JobEvent> = e.queue.drain(..).collect();
        if e.folded > 0 {
            out.insert(
                0,
                JobEvent {
                    id: String::new(),
                    state: EventState::Ended,
                    reason: format!("{} earlier job endings were not kept", e.folded),
                    command: String::new(),
                    git_refused: Vec::new(),
                },
            );
            e.folded = 0;
        }
        out
    }

    /// Kills every job of the session (its end) and waits, bounded, for their trees to go.
    pub async fn shutdown(&self, grace: std::time::Duration) {
        self.cancel.cancel();
        let jobs = self.list();
        let _ = tokio::time::timeout(grace, async {
            for job in jobs {
                job.ended().await;
            }
        })
        .await;
    }
}

impl Drop for JobTable {
    fn drop(&mut self) {
        // A table dropped without `shutdown` (a session dropped): its jobs die all the same.
        self.cancel.cancel();
    }
}
