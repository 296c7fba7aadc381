//! Server events for the people watching a client: what cordon did or noticed that no tool
//! result carries on its own (a git change cordon refused to import, a limit that stopped a
//! call, the sandbox view rebuilt, the parser worker restarted, enforcement below full).
//!
//! Owns the bus: [`emit`] (every connected session), [`emit_to`] (one session) and
//! [`emit_for_call`] (the session whose call this task serves) put an [`Event`] on the queue
//! of each subscribed session whose level lets it through. A session subscribes when its
//! client sends `logging/setLevel` ([`Events::subscribe`]); `server::logging` turns its queue
//! into MCP `notifications/message`. Nothing here knows MCP, so every stage can emit.
//!
//! Queues are bounded ([`QUEUE`] events a session): a client that does not read loses events,
//! never the server's memory, and is told how many it lost. Events are for clients, so their
//! data must never hold secrets: no argument values, no `env`, no `stdin`, no file contents,
//! no command lines (a command may carry a token); tool names, limit kinds, workspace-relative
//! paths and cordon's own sentences only.

use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Events queued per session before newer ones are dropped (and counted).
pub(crate) const QUEUE: usize = 64;
/// Sessions subscribed at once; a further `logging/setLevel` is refused.
pub(crate) const MAX_SUBSCRIBERS: usize = 1024;

/// The syslog severities MCP logging uses (RFC 5424), least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Level {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

/// One event: how severe, what kind (a stable name clients can filter on, e.g.
/// `git`), and its data (a JSON object; see the module note on secrets).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    pub level: Level,
    pub kind: &'static str,
    pub data: Value,
}

/// Names one client session for the bus (an MCP session, or the one stdio client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SessionKey(u64);

impl SessionKey {
    /// A key no other session of this process has.
    pub(crate) fn fresh() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The session whose call this task serves, if it serves one (see [`in_session`]).
    /// Work that outlives the call (a background job) captures it when it starts.
    pub(crate) fn current() -> Option<Self> {
        CURRENT.try_with(|k| *k).ok()
    }
}

tokio::task_local! {
    static CURRENT: SessionKey;
}

/// Runs `work` as a call of `session`: [`emit_for_call`] inside it reaches that session.
pub(crate) async fn in_session<F: std::future::Future>(session: SessionKey, work: F) -> F::Output {
    CURRENT.scope(session, work).await
}

/// Who an event is for.
#[derive(Debug, Clone, Copy)]
enum Audience {
    Everyone,
    Session(SessionKey),
}

struct Subscriber {
    key: SessionKey,
    min: Level,
    tx: tokio::sync::mpsc::Sender<Event>,
    dropped: Arc<AtomicU64>,
}

/// A session's queue: the events that passed its level, and how many were lost to a full
/// queue since the last look.
pub(crate) struct Subscription {
    pub events: tokio::sync::mpsc::Receiver<Event>,
    pub dropped: Arc<AtomicU64>,
}

/// Why a session could not subscribe.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{MAX_SUBSCRIBERS} sessions already receive log messages from this server; close one, or \
     leave the level unset"
)]
pub(crate) struct TooManySubscribers;

/// The bus. One per process ([`Events::global`]); tests make their own.
#[derive(Default)]
pub(crate) struct Events {
    subscribers: Mutex<Vec<Subscriber>>,
}

impl Events {
    /// The process's bus, which [`emit`], [`emit_to`] and [`emit_for_call`] use.
    pub(crate) fn global() -> &'static Events {
        static GLOBAL: OnceLock<Events> = OnceLock::new();
        GLOBAL.get_or_init(Events::default)
    }

    /// Sets `session`'s level: from now on it gets events at `level` or above. The first
    /// call returns the session's queue (the caller forwards it to the client, and drops it
    /// when the session ends, which unsubscribes it); later calls only change the level.
    pub(crate) fn subscribe(
        &self,
        session: SessionKey,
        level: Level,
    ) -> Result<Option<Subscription>, TooManySubscribers> {
        let Ok(mut subs) = self.subscribers.lock() else {
            return Ok(None);
        };
        subs.retain(|s| !s.tx.is_closed());
        if let Some(existing) = subs.iter_mut().find(|s| s.key == session) {
            existing.min = level;
            return Ok(None);
        }
        if subs.len() >= MAX_SUBSCRIBERS {
            return Err(TooManySubscribers);
        }
        let (tx, events) = tokio::sync::mpsc::channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        subs.push(Subscriber {
            key: session,
            min: level,
            tx,
            dropped: Arc::clone(&dropped),
        });
        Ok(Some(Subscription { events, dropped }))
    }

    /// Ends `session`'s subscription (its queue closes).
    pub(crate) fn unsubscribe(&self, session: SessionKey) {
        if let Ok(mut subs) = self.subscribers.lock() {
            subs.retain(|s| s.key != session);
        }
    }

    fn send(&self, audience: Audience, event: Event) {
        let Ok(mut subs) = self.subscribers.lock() else {
            return;
        };
        subs.retain(|s| !s.tx.is_closed());
        for sub in subs.iter() {
            let addressed = match audience {
                Audience::Everyone => true,
                Audience::Session(key) => key == sub.key,
            };
            if !addressed || event.level < sub.min {
                continue;
            }
            if sub.tx.try_send(event.clone()).is_err() {
                sub.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// An event for every subscribed session (server-wide news: the view, the parser worker,
    /// the shared workspace).
    pub(crate) fn emit(&self, level: Level, kind: &'static str, data: Value) {
        self.send(Audience::Everyone, Event { level, kind, data });
    }

    /// An event for one session only (its call, its job).
    pub(crate) fn emit_to(
        &self,
        session: SessionKey,
        level: Level,
        kind: &'static str,
        data: Value,
    ) {
        self.send(Audience::Session(session), Event { level, kind, data });
    }
}

/// [`Events::emit`] on the process's bus.
pub(crate) fn emit(level: Level, kind: &'static str, data: Value) {
    Events::global().emit(level, kind, data);
}

/// [`Events::emit_to`] on the process's bus.
pub(crate) fn emit_to(session: SessionKey, level: Level, kind: &'static str, data: Value) {
    Events::global().emit_to(session, level, kind, data);
}

/// An event for the session whose call this task serves; outside a call (`cordon exec`, a
/// timer) there is nobody it concerns, and it goes nowhere.
pub(crate) fn emit_for_call(level: Level, kind: &'static str, data: Value) {
    if let Some(session) = SessionKey::current() {
        emit_to(session, level, kind, data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn levels_filter_and_sessions_are_addressed_alone() {
        let bus = Events::default();
        let (a, b) = (SessionKey::fresh(), SessionKey::fresh());
        let mut qa = bus.subscribe(a, Level::Warning).unwrap().unwrap();
        let mut qb = bus.subscribe(b, Level::Debug).unwrap().unwrap();
        bus.emit(Level::Info, "view_rebuilt", json!({}));
        bus.emit_to(b, Level::Error, "limit", json!({"limit": "memory"}));
        bus.emit(Level::Warning, "quarantine", json!({"path": ".git/hooks"}));
        assert_eq!(qa.events.try_recv().unwrap().kind, "quarantine");
        assert!(
            qa.events.try_recv().is_err(),
            "info is below a's level; b's limit is b's"
        );
        let kinds: Vec<_> = std::iter::from_fn(|| qb.events.try_recv().ok())
            .map(|e| e.kind)
            .collect();
        assert_eq!(kinds, ["view_rebuilt", "limit", "quarantine"]);
        // A second setLevel changes the level and keeps the queue.
        assert!(bus.subscribe(a, Level::Debug).unwrap().is_none());
        bus.emit(Level::Debug, "x", json!({}));
        assert_eq!(qa.events.try_recv().unwrap().kind, "x");
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_a_closed_one_unsubscribes() {
        let bus = Events::default();
        let key = SessionKey::fresh();
        let queue = bus.subscribe(key, Level::Debug).unwrap().unwrap();
        for _ in 0..QUEUE + 5 {
            bus.emit(Level::Info, "x", json!({}));
        }
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 5);
        drop(queue);
        bus.emit(Level::Info, "x", json!({}));
        assert!(bus.subscribers.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn call_events_reach_the_calling_session_only() {
        let key = SessionKey::fresh();
        assert_eq!(SessionKey::current(), None);
        let seen = in_session(key, async { SessionKey::current() }).await;
        assert_eq!(seen, Some(key));
    }
}
