//! Which client state a call runs in: the MCP session's [`Session`] (its interpreter sessions
//! and cancellation), its approval questions, its MCP tasks, and how many calls it may have
//! running.
//!
//! On stdio there is one client, so one scope for the server's life. Over HTTP every
//! `initialize` begins an MCP session whose service the factory makes; its scope is made on
//! its first tool call (rmcp also asks the factory for throwaway services, to read tool
//! schemas, and those must cost nothing), so one client can neither see another's interpreter
//! variables nor answer another's approval question, and ending a session (DELETE, idle
//! expiry, shutdown) ends exactly its calls and interpreters ([`SessionRegistry`]). Requests
//! of the stateless 2026-07-28 revision have no session: they share a scope per authenticated
//! subject ([`StatelessScopes`]), since that revision's interpreter sessions and approval
//! round trips must outlive one request. What every session shares stays in the `Runtime`;
//! this module does not own it.

use super::approval::Approvals;
use super::http::auth::Subject;
use crate::runtime::{Runtime, RuntimeError, Session};
use crate::tools::SharedContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long ending a session waits for its interpreters to stop.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// One client's state, cheap to clone (everything in it is shared).
#[derive(Clone)]
pub(crate) struct Scope {
    pub session: SharedContext,
    pub approvals: Arc<Approvals>,
    /// Its circuit breaker: refusals are counted per client, like its questions.
    pub breaker: Arc<crate::breaker::Breaker>,
    /// Its MCP tasks (`tasks`): another client never sees them.
    pub tasks: Arc<super::tasks::Tasks>,
    /// `None` on stdio (the runtime's slots are the only bound there).
    calls: Option<Arc<Semaphore>>,
    max_calls: usize,
}

impl Scope {
    pub(crate) fn new(
        session: SharedContext,
        approvals: Arc<Approvals>,
        max_calls: Option<usize>,
    ) -> Self {
        let breaker = Arc::new(crate::breaker::Breaker::new(
            session.runtime.policy.breaker.clone(),
        ));
        Self {
            session,
            approvals,
            breaker,
            tasks: Arc::default(),
            calls: max_calls.map(|n| Arc::new(Semaphore::new(n))),
            max_calls: max_calls.unwrap_or(0),
        }
    }

    /// A fresh scope over `runtime`: a new session (its own interpreters and cancellation)
    /// and no open questions.
    pub(crate) fn fresh(
        runtime: &Arc<Runtime>,
        max_calls: Option<usize>,
    ) -> Result<Self, RuntimeError> {
        let session = Arc::new(Session::new(Arc::clone(runtime))?);
        let approvals = Arc::new(Approvals::new(runtime.policy.server.approval_timeout));
        Ok(Self::new(session, approvals, max_calls))
    }

    /// A place for one more running call, or `Err(limit)` when the session has as many as
    /// `server.http.max_calls_per_session` allows. Unbounded on stdio.
    pub(crate) fn begin_call(&self) -> Result<Option<OwnedSemaphorePermit>, usize> {
        match &self.calls {
            None => Ok(None),
            Some(calls) => Arc::clone(calls)
                .try_acquire_owned()
                .map(Some)
                .map_err(|_| self.max_calls),
        }
    }

    /// Whether no call of this scope is running (an idle stateless scope may be dropped).
    fn is_idle(&self) -> bool {
        self.calls
            .as_ref()
            .is_none_or(|c| c.available_permits() == self.max_calls)
            && self.session.jobs.running() == 0
    }
}

/// The sessions of open HTTP MCP sessions by `Mcp-Session-Id`, so that ending an MCP session
/// (DELETE, idle expiry) ends its session at once: rmcp drops a session's service only when
/// the last of its request tasks lets go of it.
#[derive(Default)]
pub(crate) struct SessionRegistry {
    sessions: Mutex<HashMap<String, Weak<Session>>>,
}

impl SessionRegistry {
    /// Notes that `session` serves MCP session `id` (idempotent).
    pub(crate) fn register(&self, id: &str, session: &SharedContext) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if !sessions.contains_key(id) {
            sessions.retain(|_, weak| weak.strong_count() > 0);
            sessions.insert(id.to_owned(), Arc::downgrade(session));
        }
    }

    /// Ends the session of MCP session `id`, if it made one: its calls are cancelled (their
    /// trees killed) and its interpreters stopped.
    pub(crate) async fn end(&self, id: &str) {
        let session = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            sessions.remove(id).and_then(|weak| weak.upgrade())
        };
        if let Some(session) = session {
            session.close(CLOSE_GRACE).await;
        }
    }
}

/// The scopes of stateless (2026-07-28) requests over HTTP, one per authenticated subject,
/// at most `max` of them: past that, the one unused longest with no call running is ended.
pub(crate) struct StatelessScopes {
    scopes: Mutex<HashMap<Subject, (Scope, Instant)>>,
    max: usize,
    max_calls: usize,
}

/// Why no stateless scope could be had.
pub(crate) enum NoScope {
    /// Every one of the `max` scopes has a call running.
    Full(usize),
    Failed(RuntimeError),
}

impl StatelessScopes {
    pub(crate) fn new(max: usize, max_calls: usize) -> Self {
        Self {
            scopes: Mutex::new(HashMap::new()),
            max,
            max_calls,
        }
    }

    /// The scope of `subject`, made on its first stateless request.
    pub(crate) fn for_subject(
        &self,
        subject: &Subject,
        runtime: &Arc<Runtime>,
    ) -> Result<Scope, NoScope> {
        let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((scope, used)) = scopes.get_mut(subject) {
            *used = Instant::now();
            return Ok(scope.clone());
        }
        if scopes.len() >= self.max {
            let oldest_idle = scopes
                .iter()
                .filter(|(_, (scope, _))| scope.is_idle())
                .min_by_key(|(_, (_, used))| *used)
                .map(|(name, _)| name.clone())
                .ok_or(NoScope::Full(self.max))?;
            if let Some((evicted, _)) = scopes.remove(&oldest_idle) {
                tokio::spawn(async move { evicted.session.close(CLOSE_GRACE).await });
            }
        }
        let scope = Scope::fresh(runtime, Some(self.max_calls)).map_err(NoScope::Failed)?;
        scopes.insert(subject.clone(), (scope.clone(), Instant::now()));
        Ok(scope)
    }

    /// Ends every scope (shutdown): their calls are cancelled and interpreters killed.
    pub(crate) async fn close_all(&self) {
        let all: Vec<Scope> = {
            let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
            scopes.drain().map(|(_, (scope, _))| scope).collect()
        };
        for scope in &all {
            scope.session.close(CLOSE_GRACE).await;
        }
    }
}
