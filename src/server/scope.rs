//! What belongs to one MCP session rather than to the server: its `code_interpreter`
//! sessions, its open approval questions, the cancellation that ends its calls, and how many
//! calls it may have running.
//!
//! On stdio there is one client, so one scope for the server's life. Over HTTP every
//! `initialize` begins a session with a scope of its own (the service factory makes it), so
//! one client can neither see another's interpreter variables nor answer another's approval
//! question, and ending a session (DELETE, idle expiry, shutdown) ends exactly its calls and
//! interpreters. Requests of the stateless 2026-07-28 revision have no session: they share a
//! scope per authenticated subject ([`StatelessScopes`]), since that revision's interpreter
//! sessions and approval round trips must outlive one request. What every session shares
//! (workspace, executor, linters, parser, audit log, policy, call slots) stays in
//! `tools::ToolContext`; this module does not own it.

use super::approval::Approvals;
use crate::interpreter::{InterpreterError, SessionManager};
use crate::tools::ToolContext;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

pub struct SessionScope {
    /// Made on the first `code_interpreter` call: most sessions never run one, and the
    /// factory makes throwaway scopes too (rmcp asks it for a service to read tool schemas).
    interpreter: tokio::sync::OnceCell<Arc<SessionManager>>,
    pub approvals: Approvals,
    /// Cancelled when the session ends or the server shuts down: every call of the session
    /// ends (its tree killed) and is answered.
    pub shutdown: CancellationToken,
    /// `None` on stdio (the server-wide call slots are the only bound there).
    calls: Option<Arc<Semaphore>>,
    max_calls: usize,
}

impl SessionScope {
    /// A scope whose calls end when `server_shutdown` is cancelled.
    pub fn new(
        ctx: &ToolContext,
        server_shutdown: &CancellationToken,
        max_calls: Option<usize>,
    ) -> Self {
        Self {
            interpreter: tokio::sync::OnceCell::new(),
            approvals: Approvals::new(ctx.policy.server.approval_timeout),
            shutdown: server_shutdown.child_token(),
            calls: max_calls.map(|n| Arc::new(Semaphore::new(n))),
            max_calls: max_calls.unwrap_or(0),
        }
    }

    /// This session's interpreter sessions, made on first use.
    pub async fn interpreter(
        &self,
        ctx: &ToolContext,
    ) -> Result<&Arc<SessionManager>, InterpreterError> {
        self.interpreter
            .get_or_try_init(|| async {
                SessionManager::new(Arc::clone(&ctx.executor), &ctx.policy)
            })
            .await
    }

    /// Makes the interpreter sessions now (stdio: a failure there is a start failure).
    pub async fn open_interpreter(&self, ctx: &ToolContext) -> Result<(), InterpreterError> {
        self.interpreter(ctx).await.map(|_| ())
    }

    /// Kills every interpreter worker of this session (a no-op if none was made).
    pub async fn close_interpreter(&self) {
        if let Some(interpreter) = self.interpreter.get() {
            interpreter.shutdown().await;
        }
    }

    /// A place for one more running call, or `Err(limit)` when the session has as many as
    /// `server.http.max_calls_per_session` allows. Unbounded on stdio.
    pub fn begin_call(&self) -> Result<Option<OwnedSemaphorePermit>, usize> {
        match &self.calls {
            None => Ok(None),
            Some(calls) => Arc::clone(calls)
                .try_acquire_owned()
                .map(Some)
                .map_err(|_| self.max_calls),
        }
    }

    /// Ends the session now: its calls are cancelled and its interpreter workers killed,
    /// whoever still holds the scope.
    pub async fn end(&self) {
        self.shutdown.cancel();
        self.close_interpreter().await;
    }

    /// Whether a call of this session is running (an idle scope may be dropped).
    fn is_idle(&self) -> bool {
        self.calls
            .as_ref()
            .is_none_or(|c| c.available_permits() == self.max_calls)
    }
}

impl Drop for SessionScope {
    /// The session is over: its running calls are cancelled (their trees killed by the
    /// executor) and its interpreter workers killed, also when nobody awaited a clean close.
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(interpreter) = self.interpreter.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { interpreter.shutdown().await });
        }
    }
}

/// The scopes of open HTTP sessions by `Mcp-Session-Id`, so that ending a session (DELETE,
/// idle expiry) ends its scope at once: rmcp drops a session's service only when the last
/// of its request tasks lets go of it.
#[derive(Default)]
pub struct SessionRegistry {
    scopes: Mutex<HashMap<String, std::sync::Weak<SessionScope>>>,
}

impl SessionRegistry {
    /// Notes that `scope` serves session `id` (idempotent).
    pub fn register(&self, id: &str, scope: &Arc<SessionScope>) {
        let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
        if !scopes.contains_key(id) {
            scopes.retain(|_, weak| weak.strong_count() > 0);
            scopes.insert(id.to_owned(), Arc::downgrade(scope));
        }
    }

    /// The scope of session `id`, taken out (the session is over).
    pub fn take(&self, id: &str) -> Option<Arc<SessionScope>> {
        let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
        scopes.remove(id)?.upgrade()
    }
}

/// The scopes of stateless (2026-07-28) requests over HTTP, one per authenticated subject,
/// at most `max` of them: past that, the one unused longest with no call running is dropped.
pub struct StatelessScopes {
    scopes: Mutex<HashMap<String, (Arc<SessionScope>, Instant)>>,
    max: usize,
    max_calls: usize,
}

impl StatelessScopes {
    pub fn new(max: usize, max_calls: usize) -> Self {
        Self {
            scopes: Mutex::new(HashMap::new()),
            max,
            max_calls,
        }
    }

    /// The scope of `subject`, made on its first stateless request. `None` when `max`
    /// subjects all have calls running (the caller refuses the call).
    pub fn for_subject(
        &self,
        subject: &str,
        ctx: &ToolContext,
        server_shutdown: &CancellationToken,
    ) -> Option<Arc<SessionScope>> {
        let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((scope, used)) = scopes.get_mut(subject) {
            *used = Instant::now();
            return Some(Arc::clone(scope));
        }
        if scopes.len() >= self.max {
            let oldest_idle = scopes
                .iter()
                .filter(|(_, (scope, _))| scope.is_idle())
                .min_by_key(|(_, (_, used))| *used)
                .map(|(name, _)| name.clone())?;
            scopes.remove(&oldest_idle);
        }
        let scope = Arc::new(SessionScope::new(
            ctx,
            server_shutdown,
            Some(self.max_calls),
        ));
        scopes.insert(subject.to_owned(), (Arc::clone(&scope), Instant::now()));
        Some(scope)
    }

    /// Drops every scope (shutdown): their calls are cancelled and interpreters killed.
    pub async fn close_all(&self) {
        let all: Vec<Arc<SessionScope>> = {
            let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
            scopes.drain().map(|(_, (scope, _))| scope).collect()
        };
        for scope in &all {
            scope.shutdown.cancel();
            scope.close_interpreter().await;
        }
    }
}
