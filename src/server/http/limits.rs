//! The bounds a remote client meets over HTTP: how many MCP sessions may be open, how big a
//! request body may be and how long it may take to arrive, and what happens to a call whose
//! client went away.
//!
//! Owns the session cap ([`BoundedSessions`], a wrapper of rmcp's session manager that refuses
//! the session past `server.http.max_sessions`), the body read ([`read_body`]) and the
//! cancel-on-disconnect response body ([`CancelOnDrop`]). It does not own the per-session call
//! bound (that is `server::scope`) nor idle expiry (rmcp's session `keep_alive`, set by the
//! caller).

use super::auth::Subject;
use crate::server::scope::SessionRegistry;
use bytes::Bytes;
use futures_core::Stream;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

/// How long a request body may take to arrive in full: a client that drips its body cannot
/// hold a connection (and its buffer) for longer.
pub(crate) const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// rmcp's session manager with a ceiling on live sessions, and the subject each one belongs
/// to.
pub(crate) struct BoundedSessions<M> {
    inner: M,
    /// Live sessions, each with the subject that began it (set once its `initialize` is
    /// answered): a session id is a bearer secret of its own, so it only works for its owner.
    live: Mutex<HashMap<SessionId, Option<Subject>>>,
    max: usize,
    /// The sessions' scopes, ended with their sessions.
    scopes: Arc<SessionRegistry>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum BoundedError<E: std::error::Error + 'static> {
    #[error("{0} MCP sessions are open, the most `server.http.max_sessions` allows")]
    Full(usize),
    #[error(transparent)]
    Inner(#[from] E),
}

impl<M> BoundedSessions<M> {
    pub(crate) fn new(inner: M, max: usize, scopes: Arc<SessionRegistry>) -> Self {
        Self {
            inner,
            live: Mutex::new(HashMap::new()),
            max,
            scopes,
        }
    }

    /// Sessions open now.
    pub(crate) fn live(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn is_full(&self) -> bool {
        self.live() >= self.max
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// How many open sessions `subject` began.
    pub(crate) fn owned_by(&self, subject: &Subject) -> usize {
        self.lock()
            .values()
            .filter(|owner| owner.as_ref() == Some(subject))
            .count()
    }

    /// Records `subject` as the owner of the session `id` began, unless it has one.
    pub(crate) fn claim(&self, id: &str, subject: &Subject) {
        if let Some(owner) = self.lock().get_mut(id)
            && owner.is_none()
        {
            *owner = Some(subject.clone());
        }
    }

    /// Whether `subject` may use the session `id`: an unknown session is for rmcp to refuse
    /// (404), a session owned by another subject is refused here as if unknown.
    pub(crate) fn may_use(&self, id: &str, subject: &Subject) -> bool {
        match self.lock().get(id) {
            Some(Some(owner)) => owner == subject,
            _ => true,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Option<Subject>>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<M: SessionManager> SessionManager for BoundedSessions<M> {
    type Error = BoundedError<M::Error>;
    type Transport = M::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // Checked again here (the front door checks first, for a helpful 503): two
        // `initialize` requests racing for the last place cannot both get it.
        if self.is_full() {
            return Err(BoundedError::Full(self.max));
        }
        let (id, transport) = self.inner.create_session().await?;
        let admitted = {
            let mut live = self.lock();
            let admitted = live.len() < self.max && live.insert(id.clone(), None).is_none();
            crate::metrics::set_sessions(live.len());
            admitted
        };
        if !admitted {
            let _ = self.inner.close_session(&id).await;
            return Err(BoundedError::Full(self.max));
        }
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        {
            let mut live = self.lock();
            live.remove(id);
            crate::metrics::set_sessions(live.len());
        }
        // DELETE, idle expiry or shutdown: the session's calls and interpreters end now.
        self.scopes.end(id).await;
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(
        &self,
        _id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        // No session store is configured: a session lives in this process only.
        Ok(RestoreOutcome::NotSupported)
    }
}

/// Why a body was not read.
#[derive(Debug)]
pub(crate) enum BodyRefusal {
    TooLarge { limit: usize },
    TooSlow,
    Broken(String),
}

/// The whole request body, at most `limit` bytes, within [`BODY_READ_TIMEOUT`]. Counted as it
/// streams, whatever `Content-Length` claims (a lying header or chunked encoding changes
/// nothing); a declared length over the limit is refused before anything is read.
pub(crate) async fn read_body<B>(
    body: B,
    declared: Option<u64>,
    limit: usize,
) -> Result<Bytes, BodyRefusal>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(BodyRefusal::TooLarge { limit });
    }
    let limited = http_body_util::Limited::new(body, limit);
    match tokio::time::timeout(BODY_READ_TIMEOUT, limited.collect()).await {
        Err(_) => Err(BodyRefusal::TooSlow),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(BodyRefusal::TooLarge { limit })
        }
        Ok(Err(e)) => Err(BodyRefusal::Broken(e.to_string())),
    }
}

/// A response body that runs `on_abandon` if it is dropped before its end was sent: the
/// client closed the connection while the answer (an SSE stream of a running call) was still
/// coming. rmcp keeps a session's request running after its stream drops (so a client could
/// resume it); cordon instead cancels the call, so its process tree dies as on stdio.
pub(crate) struct CancelOnDrop<B> {
    inner: B,
    on_abandon: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl<B> CancelOnDrop<B> {
    pub(crate) fn new(inner: B, on_abandon: Box<dyn FnOnce() + Send + Sync>) -> Self {
        Self {
            inner,
            on_abandon: Some(on_abandon),
        }
    }
}

impl<B: Body<Data = Bytes, Error = Infallible> + Unpin> Body for CancelOnDrop<B> {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            // The whole answer went out: nothing to cancel.
            self.on_abandon = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for CancelOnDrop<B> {
    fn drop(&mut self) {
        if let Some(on_abandon) = self.on_abandon.take() {
            on_abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

    #[test]
    fn a_session_is_usable_only_by_the_subject_that_began_it() {
        let sessions = BoundedSessions::new(
            LocalSessionManager::default(),
            4,
            Arc::new(SessionRegistry::default()),
        );
        let jwt = |issuer: &str, sub: &str| Subject::Jwt {
            issuer: issuer.into(),
            sub: sub.into(),
        };
        let owners = [
            Subject::StaticToken,
            jwt("https://a.example", "bearer"),
            jwt("https://a.example", "jwt:bearer"),
            jwt("https://b.example", "bearer"),
        ];
        for (i, owner) in owners.iter().enumerate() {
            let id: SessionId = format!("s{i}").into();
            sessions.lock().insert(id, None);
            sessions.claim(&format!("s{i}"), owner);
        }
        for (i, owner) in owners.iter().enumerate() {
            for (j, other) in owners.iter().enumerate() {
                assert_eq!(
                    sessions.may_use(&format!("s{i}"), other),
                    i == j,
                    "{other} using {owner}'s session"
                );
            }
        }
        // A claim is made once: the owner cannot be replaced.
        sessions.claim("s0", &owners[1]);
        assert!(sessions.may_use("s0", &Subject::StaticToken));
        assert!(!sessions.may_use("s0", &owners[1]));
    }
}
