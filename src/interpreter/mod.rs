//! Persistent Python sessions for `code_interpreter`: one long-lived, confined worker per
//! session name, running an embedded driver script (`driver.py`) that speaks a framed protocol
//! (`protocol`) on its own pipes, never on the MCP stdio.
//!
//! This module owns which sessions exist: creating them on first use (up to the policy's
//! `max_sessions`), reaping the idle ones in the background, and killing every worker at
//! shutdown. `session` owns one session's worker and its cells. Confinement is `exec`'s
//! `spawn_worker` (the same Landlock, seccomp, cgroup and rlimit path as shell commands, with
//! a private directory per worker); presenting results is the tool's job
//! (`tools::code_interpreter`).

pub mod protocol;
mod session;

pub use session::{CellOutcome, CellRequest};

use crate::exec::{ExecError, Executor};
use crate::policy::{InterpreterPolicy, Policy};
use session::Session;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum InterpreterError {
    #[error(
        "{max} interpreter sessions are already live ({}); reuse one of them, or wait until \
         an idle one is ended (after {idle}s unused)",
        live.join(", ")
    )]
    TooManySessions {
        max: usize,
        live: Vec<String>,
        idle: u64,
    },
    #[error("cannot start the interpreter `{python}`: {source}")]
    Spawn { python: String, source: ExecError },
    #[error("{0}")]
    Start(String),
    #[error("the server is shutting down; the session was ended")]
    ShuttingDown,
    #[error("cannot prepare the session's private directory: {0}")]
    Io(std::io::Error),
}

impl InterpreterError {
    /// The Python executable itself is missing.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Spawn { source, .. } if source.is_not_found())
    }
}

/// What every session of a manager shares.
pub(crate) struct Shared {
    executor: Arc<Executor>,
    policy: InterpreterPolicy,
    /// Private directories of the workers live below this (outside the per-call temporary
    /// root, so shell commands cannot see them either); removed with the manager.
    root: tempfile::TempDir,
    /// Longest `repr` a driver sends back; the tool shapes it further.
    max_repr: usize,
}

/// All sessions of one server.
pub struct SessionManager {
    shared: Shared,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    closed: AtomicBool,
}

impl SessionManager {
    /// Creates the manager; inside a Tokio runtime it also starts the idle reaper, which ends
    /// with the manager.
    pub fn new(executor: Arc<Executor>, policy: &Policy) -> Result<Arc<Self>, InterpreterError> {
        // Below the confinement's private root: the one place the sandbox's view holds for
        // workers, each granted only its own directory.
        let root = tempfile::Builder::new()
            .prefix("cordon-sessions-")
            .tempdir_in(executor.confinement().private_root())
            .map_err(InterpreterError::Io)?;
        let manager = Arc::new(Self {
            shared: Shared {
                executor,
                policy: policy.interpreter.clone(),
                root,
                max_repr: policy.output.memory_cap_bytes,
            },
            sessions: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            let period = (policy.interpreter.idle_timeout / 4)
                .clamp(Duration::from_millis(100), Duration::from_secs(30));
            tokio::spawn(reap_loop(Arc::downgrade(&manager), period));
        }
        Ok(manager)
    }

    pub fn policy(&self) -> &InterpreterPolicy {
        &self.shared.policy
    }

    /// Names of the live sessions, sorted.
    pub fn sessions(&self) -> Vec<String> {
        let mut names: Vec<String> = self.lock().keys().cloned().collect();
        names.sort();
        names
    }

    /// Runs one cell in session `name`, creating the session on first use.
    pub async fn run(&self, name: &str, req: CellRequest) -> Result<CellOutcome, InterpreterError> {
        let session = self.get_or_create(name)?;
        session.run(&self.shared, req).await
    }

    fn get_or_create(&self, name: &str) -> Result<Arc<Session>, InterpreterError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(InterpreterError::ShuttingDown);
        }
        let mut sessions = self.lock();
        if let Some(s) = sessions.get(name) {
            // Under the map lock, so the reaper cannot take a session a call just picked.
            s.touch();
            return Ok(Arc::clone(s));
        }
        let max = self.shared.policy.max_sessions;
        if sessions.len() >= max {
            let mut live: Vec<String> = sessions.keys().cloned().collect();
            live.sort();
            return Err(InterpreterError::TooManySessions {
                max,
                live,
                idle: self.shared.policy.idle_timeout.as_secs(),
            });
        }
        let session = Arc::new(Session::new(name.to_owned()));
        sessions.insert(name.to_owned(), Arc::clone(&session));
        Ok(session)
    }

    /// Ends the sessions unused for longer than the idle timeout (never one in a call).
    pub async fn reap_idle(&self) -> Vec<String> {
        let idle = self.shared.policy.idle_timeout;
        let candidates: Vec<Arc<Session>> = self
            .lock()
            .values()
            .filter(|s| s.idle_for() >= idle)
            .cloned()
            .collect();
        let mut reaped = Vec::new();
        for session in candidates {
            {
                let mut sessions = self.lock();
                // Re-checked under the map lock: a call may have picked it meanwhile.
                if session.idle_for() < idle || Arc::strong_count(&session) > 2 {
                    continue;
                }
                sessions.remove(&session.name);
            }
            if session.end_if_idle().await {
                reaped.push(session.name.clone());
            }
        }
        reaped
    }

    /// Kills every worker; new calls are refused from now on.
    pub async fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let all: Vec<Arc<Session>> = self.lock().drain().map(|(_, s)| s).collect();
        // Abort every running cell first, so no session waits behind another's grace period.
        for session in &all {
            session.abort();
        }
        for session in &all {
            session.end().await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        // A panic while holding the map lock leaves a usable map; keep serving.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn reap_loop(manager: Weak<SessionManager>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(m) = manager.upgrade() else { return };
        if m.closed.load(Ordering::SeqCst) {
            return;
        }
        m.reap_idle().await;
    }
}
