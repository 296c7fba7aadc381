//! Persistent Python sessions for `code_interpreter`: one long-lived, confined worker per
//! session name, running an embedded driver script (`driver.py`, handed over by `boot`) that
//! speaks a framed protocol (`protocol`) on its own pipes, never on the MCP stdio.
//!
//! This module owns which sessions exist and which hold a slot: creating them on first use,
//! making room when every slot (`max_sessions`) is taken (sessions whose interpreter died
//! first, else the least recently used idle one), freeing the slot of a worker that died
//! between calls as soon as it dies, reaping idle sessions, remembering for a session's next
//! call why its state went, and killing every worker at shutdown. `session` owns one session's
//! worker and its cells, `output` the files a cell's output goes to. Confinement is `exec`'s
//! `spawn_worker` (the same Landlock, seccomp, cgroup and rlimit path as shell commands, with
//! a private directory per worker); presenting results is the tool's job
//! (`tools::code_interpreter`). A manager is built from an [`InterpreterPlan`] (the policy's
//! `[interpreter]` section, [`InterpreterPolicy`], which this module owns); it never sees the
//! rest of a policy.

mod boot;
mod output;
pub(crate) mod protocol;
pub(crate) mod session;

pub(crate) use session::{CellOutcome, CellRequest};

use crate::exec::{ExecError, Executor};
use session::{Session, Worker};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::mpsc;

/// How many ended sessions' reasons are remembered for their next call.
const ENDED_MEMORY: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum InterpreterError {
    #[error(
        "all {max} interpreter sessions are running a cell right now ({}); wait for one of them \
         to finish, or run this cell in one of them",
        live.join(", ")
    )]
    TooManySessions { max: usize, live: Vec<String> },
    #[error("cannot start the interpreter `{python}`: {source}")]
    Spawn { python: String, source: ExecError },
    #[error("{0}")]
    Start(String),
    #[error("the server is shutting down; the session was ended")]
    ShuttingDown,
    #[error("cannot prepare the session's private directory: {0}")]
    Io(std::io::Error),
    #[error("cannot prepare the cell's output files: {0}")]
    Output(std::io::Error),
}

impl InterpreterError {
    /// The Python executable itself is missing.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Spawn { source, .. } if source.is_not_found())
    }
}

/// The policy's `[interpreter]` section: which Python, and each session's own budget. A
/// session is one long-lived worker, so its limits are for its whole life, not per cell.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InterpreterPolicy {
    /// Python executable; a name without `/` is looked up on the sandbox PATH.
    pub python: String,
    pub memory_bytes: u64,
    pub pids: u64,
    pub cpu_percent: u64,
    /// RLIMIT_CPU of a worker: CPU seconds over the session's whole life.
    pub cpu_seconds: u64,
    #[serde(serialize_with = "secs")]
    pub timeout: Duration,
    #[serde(serialize_with = "secs")]
    pub max_timeout: Duration,
    /// After a timeout's interrupt, how long the cell has to stop before the worker is killed.
    #[serde(serialize_with = "secs")]
    pub interrupt_grace: Duration,
    /// How long a new worker may take to report ready.
    #[serde(serialize_with = "secs")]
    pub start_timeout: Duration,
    /// A session unused this long is ended and its state dropped.
    #[serde(serialize_with = "secs")]
    pub idle_timeout: Duration,
    pub max_sessions: usize,
    /// Leave processes a cell started running after the cell ends (default: they are killed).
    pub keep_background: bool,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

/// What a session manager is built from: the interpreter settings and the longest `repr` a
/// driver may send back (the policy's output memory cap). `policy::resolve` derives it.
#[derive(Debug, Clone)]
pub struct InterpreterPlan {
    pub policy: InterpreterPolicy,
    pub max_repr: usize,
}

/// A worker's main process ended without being asked to (reported by its session's watch).
pub(crate) struct Death {
    pub name: String,
    pub generation: u64,
}

/// What every session of a manager shares.
pub(crate) struct Shared {
    executor: Arc<Executor>,
    policy: InterpreterPolicy,
    /// Private directories of the workers live below this (outside the per-call temporary
    /// root, so shell commands cannot see them either); removed with the manager.
    root: crate::confine::scratch::RemovedOnDrop,
    /// Longest `repr` a driver sends back; the tool shapes it further.
    max_repr: usize,
    driver: boot::DriverImage,
    deaths: mpsc::UnboundedSender<Death>,
}

/// The sessions, and why recently ended ones lost their state.
#[derive(Default)]
struct Registry {
    sessions: HashMap<String, Arc<Session>>,
    ended: VecDeque<(String, String)>,
}

impl Registry {
    fn remember(&mut self, name: &str, why: String) {
        self.ended.retain(|(n, _)| n != name);
        if self.ended.len() >= ENDED_MEMORY {
            self.ended.pop_front();
        }
        self.ended.push_back((name.to_owned(), why));
    }

    fn recall(&mut self, name: &str) -> Option<String> {
        let at = self.ended.iter().position(|(n, _)| n == name)?;
        self.ended.remove(at).map(|(_, why)| why)
    }

    /// Takes session `name` out when no call holds it (a call keeps its `Arc` for as long as
    /// it runs, and only takes one under this registry's lock) and records `why` for its next
    /// call if it had anything to lose. Returns its worker, to be ended outside the lock.
    fn retire(&mut self, name: &str, why: Option<String>) -> Option<Option<Worker>> {
        let session = self.sessions.get(name)?;
        if Arc::strong_count(session) != 1 {
            return None;
        }
        let (worker, pending) = session.try_idle()?.take();
        self.sessions.remove(name);
        let why = match (pending, why.filter(|_| worker.is_some())) {
            (Some(p), Some(w)) => Some(format!("{p}; {w}")),
            (p, w) => p.or(w),
        };
        if let Some(why) = why {
            self.remember(name, why);
        }
        Some(worker)
    }
}

/// The SPEC kind of a session that could not run a cell: every slot busy is a resource limit,
/// a missing Python is `not_found`, the rest (a worker that would not start, shutdown) ours.
impl From<&InterpreterError> for crate::error_kind::ErrorKind {
    fn from(e: &InterpreterError) -> Self {
        use crate::error_kind::ErrorKind;
        match e {
            InterpreterError::TooManySessions { .. } => ErrorKind::ResourceLimit,
            _ if e.is_not_found() => ErrorKind::NotFound,
            _ => ErrorKind::Internal,
        }
    }
}

/// All sessions of one server.
pub struct SessionManager {
    shared: Shared,
    registry: Mutex<Registry>,
    closed: AtomicBool,
}

impl SessionManager {
    /// Creates the manager; inside a Tokio runtime it also starts the task that frees the
    /// slots of dead workers and reaps idle sessions, which ends with the manager.
    pub fn new(
        executor: Arc<Executor>,
        plan: impl Into<InterpreterPlan>,
    ) -> Result<Arc<Self>, InterpreterError> {
        let InterpreterPlan { policy, max_repr } = plan.into();
        // Below the confinement's private root: the one place the sandbox's view holds for
        // workers, each granted only its own directory.
        let root = crate::confine::scratch::RemovedOnDrop::take(
            tempfile::Builder::new()
                .prefix("cordon-sessions-")
                .tempdir_in(executor.confinement().private_root())
                .map_err(InterpreterError::Io)?,
        );
        let driver = boot::DriverImage::new().map_err(InterpreterError::Output)?;
        let (deaths, death_rx) = mpsc::unbounded_channel();
        let manager = Arc::new(Self {
            shared: Shared {
                executor,
                policy: policy.clone(),
                root,
                max_repr,
                driver,
                deaths,
            },
            registry: Mutex::new(Registry::default()),
            closed: AtomicBool::new(false),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            let period = (policy.idle_timeout / 4)
                .clamp(Duration::from_millis(100), Duration::from_secs(30));
            tokio::spawn(upkeep(Arc::downgrade(&manager), period, death_rx));
        }
        Ok(manager)
    }

    pub fn policy(&self) -> &InterpreterPolicy {
        &self.shared.policy
    }

    /// Names of the live sessions, sorted.
    pub fn sessions(&self) -> Vec<String> {
        let mut names: Vec<String> = self.lock().sessions.keys().cloned().collect();
        names.sort();
        names
    }

    /// Runs one cell in session `name`, creating the session on first use.
    pub async fn run(&self, name: &str, req: CellRequest) -> Result<CellOutcome, InterpreterError> {
        let (session, freed) = self.get_or_create(name)?;
        // The ended workers' memory and processes go before the new one starts.
        for worker in freed.workers {
            session::end_worker(worker).await;
        }
        let mut outcome = session.run(&self.shared, req).await?;
        outcome.evicted = freed.evicted;
        Ok(outcome)
    }

    fn get_or_create(&self, name: &str) -> Result<(Arc<Session>, Freed), InterpreterError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(InterpreterError::ShuttingDown);
        }
        let mut reg = self.lock();
        if let Some(s) = reg.sessions.get(name) {
            // Under the registry lock, so nothing can end a session a call just picked.
            s.touch();
            return Ok((Arc::clone(s), Freed::default()));
        }
        let mut freed = Freed::default();
        if reg.sessions.len() >= self.shared.policy.max_sessions {
            self.free_slot(&mut reg, name, &mut freed)?;
        }
        let lost = reg.recall(name);
        let session = Arc::new(Session::new(name.to_owned(), lost));
        reg.sessions.insert(name.to_owned(), Arc::clone(&session));
        Ok((session, freed))
    }

    /// Makes room for session `wanted`. Sessions without a live interpreter go first (their
    /// slot holds nothing); else the least recently used idle session is ended. A session a
    /// call holds is never ended; when every one is held, the call is refused.
    fn free_slot(
        &self,
        reg: &mut Registry,
        wanted: &str,
        freed: &mut Freed,
    ) -> Result<(), InterpreterError> {
        let policy = &self.shared.policy;
        let mut empty: Vec<(String, Option<String>)> = Vec::new();
        let mut lru: Option<(String, Duration)> = None;
        for (name, session) in &reg.sessions {
            if Arc::strong_count(session) != 1 {
                continue;
            }
            let Some(mut idle) = session.try_idle() else {
                continue;
            };
            if !idle.has_worker() {
                empty.push((name.clone(), None));
            } else if let Some(how) = idle.exited(policy) {
                empty.push((
                    name.clone(),
                    Some(format!("the session's interpreter {how} between calls")),
                ));
            } else {
                let unused = session.idle_for();
                if lru.as_ref().is_none_or(|(_, d)| unused > *d) {
                    lru = Some((name.clone(), unused));
                }
            }
        }
        if empty.is_empty() {
            let Some((victim, _)) = lru else {
                let mut live: Vec<String> = reg.sessions.keys().cloned().collect();
                live.sort();
                return Err(InterpreterError::TooManySessions {
                    max: policy.max_sessions,
                    live,
                });
            };
            let why = format!(
                "the session was ended to make room for session \"{wanted}\" (all {} session \
                 slots were taken and it was the least recently used idle one)",
                policy.max_sessions
            );
            empty.push((victim.clone(), Some(why)));
            freed.evicted = Some(victim);
        }
        for (name, why) in empty {
            if let Some(worker) = reg.retire(&name, why) {
                freed.workers.extend(worker);
            }
        }
        Ok(())
    }

    /// Ends the sessions unused for longer than the idle timeout (never one in a call).
    pub async fn reap_idle(&self) -> Vec<String> {
        let idle = self.shared.policy.idle_timeout;
        let mut reaped = Vec::new();
        let mut workers = Vec::new();
        {
            let mut reg = self.lock();
            let due: Vec<String> = reg
                .sessions
                .iter()
                .filter(|(_, s)| s.idle_for() >= idle)
                .map(|(n, _)| n.clone())
                .collect();
            for name in due {
                let why = format!("the session was ended after {}s unused", idle.as_secs());
                if let Some(worker) = reg.retire(&name, Some(why)) {
                    workers.extend(worker);
                    reaped.push(name);
                }
            }
        }
        for worker in workers {
            session::end_worker(worker).await;
        }
        reaped
    }

    /// Frees the slot of a session whose worker died between calls. A call on the session
    /// deals with its own worker's death instead.
    async fn bury(&self, death: Death) {
        let worker = {
            let mut reg = self.lock();
            let Some(session) = reg.sessions.get(&death.name) else {
                return;
            };
            if Arc::strong_count(session) != 1 {
                return;
            }
            let how = match session.try_idle() {
                Some(mut idle) if idle.generation() == death.generation => {
                    idle.exited(&self.shared.policy)
                }
                _ => None,
            };
            let Some(how) = how else { return };
            let why = format!("the session's interpreter {how} between calls");
            reg.retire(&death.name, Some(why)).flatten()
        };
        if let Some(worker) = worker {
            session::end_worker(worker).await;
        }
    }

    /// Kills every worker; new calls are refused from now on.
    pub async fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let all: Vec<Arc<Session>> = self.lock().sessions.drain().map(|(_, s)| s).collect();
        // Abort every running cell first, so no session waits behind another's grace period.
        for session in &all {
            session.abort();
        }
        for session in &all {
            session.end().await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A panic while holding the registry lock leaves a usable registry; keep serving.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What making room for a new session took away.
#[derive(Default)]
struct Freed {
    workers: Vec<Worker>,
    /// The live session that was ended for it, if one was.
    evicted: Option<String>,
}

/// Frees dead workers' slots as their deaths are reported, and reaps idle sessions.
async fn upkeep(
    manager: Weak<SessionManager>,
    period: Duration,
    mut deaths: mpsc::UnboundedReceiver<Death>,
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let death = tokio::select! {
            _ = tick.tick() => None,
            d = deaths.recv() => match d {
                Some(d) => Some(d),
                // Every sender is gone: so is the manager.
                None => return,
            },
        };
        let Some(m) = manager.upgrade() else { return };
        if m.closed.load(Ordering::SeqCst) {
            return;
        }
        match death {
            Some(death) => m.bury(death).await,
            None => drop(m.reap_idle().await),
        }
    }
}
