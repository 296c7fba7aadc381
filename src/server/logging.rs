//! MCP logging: `logging/setLevel` and the server's events as `notifications/message`.
//!
//! Owns one session's side of the event bus (`crate::events`): its key, its level, and the
//! task that forwards its queue to the client. A session gets nothing until its client sets a
//! level (the MCP rule: no level, no messages); the first `setLevel` subscribes it and, when
//! enforcement is below full, tells it so at once (the start-up warning otherwise only goes
//! to stderr). Messages are `{"level", "logger": "cordon", "data": {"event": KIND, ...}}`.
//! What goes into `data` is the emitter's business, and the bus's rule holds: never secrets.
//!
//! rmcp answers `logging/setLevel` with -32601 unless the handler implements it, and filters
//! nothing by level itself; both are done here.

// Logging is deprecated by SEP-2577 in rmcp's model, but it is what clients implement today.
#![allow(deprecated)]

use crate::events::{self, Level, SessionKey};
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::Peer;
use rmcp::{ErrorData as McpError, RoleServer};
use std::sync::Mutex;
use std::sync::atomic::Ordering;

/// One client session's logging.
pub(super) struct Logging {
    key: SessionKey,
    forwarder: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Default for Logging {
    fn default() -> Self {
        Self {
            key: SessionKey::fresh(),
            forwarder: Mutex::new(None),
        }
    }
}

impl Logging {
    /// This session's name on the bus: calls run inside `events::in_session(key, …)`.
    pub(super) fn key(&self) -> SessionKey {
        self.key
    }

    /// `logging/setLevel`: from now on the session gets events at `level` and above. The
    /// first one starts forwarding to `peer`, sends `start_notices` (what the start had to
    /// repair, first) and reports enforcement below full; `notes` are the enforcement's own
    /// sentences (cordon's words, no secrets).
    pub(super) fn set_level(
        &self,
        level: LoggingLevel,
        peer: Peer<RoleServer>,
        enforcement: Option<(&str, &[String])>,
        start_notices: &[events::Event],
    ) -> Result<(), McpError> {
        let subscribed = events::Events::global()
            .subscribe(self.key, from_mcp(level))
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let Some(mut queue) = subscribed else {
            return Ok(());
        };
        let task = tokio::spawn(async move {
            while let Some(event) = queue.events.recv().await {
                let lost = queue.dropped.swap(0, Ordering::Relaxed);
                if lost > 0 {
                    let note = LoggingMessageNotificationParam::new(
                        LoggingLevel::Warning,
                        serde_json::json!({
                            "event": "events_dropped",
                            "count": lost,
                            "message": format!(
                                "{lost} log messages were dropped: this client read them more \
                                 slowly than the server produced them"
                            ),
                        }),
                    )
                    .with_logger("cordon");
                    if peer.notify_logging_message(note).await.is_err() {
                        break;
                    }
                }
                if peer.notify_logging_message(message(event)).await.is_err() {
                    break;
                }
            }
        });
        if let Ok(mut slot) = self.forwarder.lock()
            && let Some(old) = slot.replace(task)
        {
            old.abort();
        }
        for notice in start_notices {
            events::emit_to(self.key, notice.level, notice.kind, notice.data.clone());
        }
        if let Some((level, notes)) = enforcement {
            events::emit_to(
                self.key,
                Level::Warning,
                "enforcement",
                serde_json::json!({
                    "level": level,
                    "notes": notes,
                    "message": format!(
                        "enforcement is {level}, not full: some of the policy's confinement is \
                         not in force on this machine (run `cordon doctor` on the host)"
                    ),
                }),
            );
        }
        Ok(())
    }
}

/// The log level a 2026-07-28 request carries in its `_meta` (that revision has no
/// `logging/setLevel` and no session): the events of its own call, and the server-wide ones
/// emitted meanwhile, go to the request's peer while it runs. Run the call under
/// [`Self::key`], then [`Self::finish`] it so the last events go out before the answer.
pub(super) struct RequestLogging {
    key: SessionKey,
    forwarder: tokio::task::JoinHandle<()>,
}

impl RequestLogging {
    /// For a 2026-07-28 request that names a level in `_meta`; None for any other.
    pub(super) fn for_request(context: &rmcp::service::RequestContext<RoleServer>) -> Option<Self> {
        let modern = context
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        if !modern {
            return None;
        }
        Self::start(context.meta.log_level(), context.peer.clone())
    }

    /// Starts forwarding for one request whose `_meta` names `level`.
    pub(super) fn start(level: Option<LoggingLevel>, peer: Peer<RoleServer>) -> Option<Self> {
        let key = SessionKey::fresh();
        let mut queue = events::Events::global()
            .subscribe(key, from_mcp(level?))
            .ok()??;
        let forwarder = tokio::spawn(async move {
            while let Some(event) = queue.events.recv().await {
                if peer.notify_logging_message(message(event)).await.is_err() {
                    break;
                }
            }
        });
        Some(Self { key, forwarder })
    }

    pub(super) fn key(&self) -> SessionKey {
        self.key
    }

    /// Ends the subscription and waits (briefly) until what was queued has been sent.
    pub(super) async fn finish(self) {
        events::Events::global().unsubscribe(self.key);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), self.forwarder).await;
    }
}

impl Drop for Logging {
    fn drop(&mut self) {
        events::Events::global().unsubscribe(self.key);
        if let Ok(mut slot) = self.forwarder.lock()
            && let Some(task) = slot.take()
        {
            task.abort();
        }
    }
}

/// The notification for `event`: its data with the event's kind in front.
fn message(event: events::Event) -> LoggingMessageNotificationParam {
    let mut data = serde_json::Map::new();
    data.insert("event".into(), event.kind.into());
    match event.data {
        serde_json::Value::Object(fields) => data.extend(fields),
        serde_json::Value::Null => {}
        other => {
            data.insert("data".into(), other);
        }
    }
    LoggingMessageNotificationParam::new(to_mcp(event.level), serde_json::Value::Object(data))
        .with_logger("cordon")
}

fn from_mcp(level: LoggingLevel) -> Level {
    match level {
        LoggingLevel::Debug => Level::Debug,
        LoggingLevel::Info => Level::Info,
        LoggingLevel::Notice => Level::Notice,
        LoggingLevel::Warning => Level::Warning,
        LoggingLevel::Error => Level::Error,
        LoggingLevel::Critical => Level::Critical,
        LoggingLevel::Alert => Level::Alert,
        LoggingLevel::Emergency => Level::Emergency,
    }
}

fn to_mcp(level: Level) -> LoggingLevel {
    match level {
        Level::Debug => LoggingLevel::Debug,
        Level::Info => LoggingLevel::Info,
        Level::Notice => LoggingLevel::Notice,
        Level::Warning => LoggingLevel::Warning,
        Level::Error => LoggingLevel::Error,
        Level::Critical => LoggingLevel::Critical,
        Level::Alert => LoggingLevel::Alert,
        Level::Emergency => LoggingLevel::Emergency,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_names_its_event_and_keeps_its_fields() {
        let m = message(events::Event {
            level: Level::Warning,
            kind: "limit",
            data: serde_json::json!({"tool": "shell_exec", "limit": "memory"}),
        });
        assert_eq!(m.level, LoggingLevel::Warning);
        assert_eq!(m.logger.as_deref(), Some("cordon"));
        assert_eq!(
            m.data,
            serde_json::json!({"event": "limit", "tool": "shell_exec", "limit": "memory"})
        );
        for level in [Level::Debug, Level::Notice, Level::Emergency] {
            assert_eq!(from_mcp(to_mcp(level)), level);
        }
    }
}
