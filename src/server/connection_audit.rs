//! Connections through the egress proxy in the audit log: one record (tool `egress`) per
//! connection, in the name of the call (and over HTTP the session and subject) it belonged to.
//! The proxy knows nothing of calls or audit records; this sink is the server's side of
//! `egress::proxy::ConnectionAudit`.

use std::sync::Arc;
use std::time::Duration;

/// Every connection through the egress proxy gets its own audit record (tool `egress`) as it
/// ends, with the proxy's id of the call it belonged to (the `network.call` of that call's
/// result) or none: connections without valid credentials are in no call's result, and those
/// of lint runs in no tool's. Calls list their connections in their own records as well. Over
/// HTTP the record names the session and subject of the call, as the call's own record does.
pub(crate) fn audit_connections(runtime: &Arc<crate::runtime::Runtime>) {
    if let Some(proxy) = runtime.confinement.egress() {
        proxy.set_audit(Arc::new(ConnectionAuditor {
            runtime: Arc::downgrade(runtime),
        }));
    }
}

/// The egress proxy's audit sink: the runtime's audit log, and the call's origin captured as
/// the call registers with the proxy.
struct ConnectionAuditor {
    runtime: std::sync::Weak<crate::runtime::Runtime>,
}

impl crate::egress::proxy::ConnectionAudit for ConnectionAuditor {
    fn call_context(&self) -> Option<crate::egress::proxy::CallContext> {
        crate::audit::CALL_ORIGIN
            .try_with(|origin| Arc::new(origin.clone()) as crate::egress::proxy::CallContext)
            .ok()
    }

    fn record(
        &self,
        call: Option<u64>,
        context: Option<&crate::egress::proxy::CallContext>,
        record: &crate::egress::ConnectionRecord,
    ) {
        let Some(runtime) = self.runtime.upgrade() else {
            return;
        };
        let started = std::time::Instant::now()
            .checked_sub(Duration::from_millis(record.duration_ms))
            .unwrap_or_else(std::time::Instant::now);
        let decision = match (call, record.allowed) {
            (_, true) => crate::audit::Decision::Allow,
            // A credential's placeholder sent where it is not bound (issue 20).
            (_, false) if record.exfiltration.is_some() => crate::audit::Decision::Deny {
                rule: "egress-exfiltration".into(),
            },
            (Some(_), false) => crate::audit::Decision::Deny {
                rule: "egress".into(),
            },
            (None, false) => crate::audit::Decision::Deny {
                rule: "egress-unattributed".into(),
            },
        };
        let write = || {
            runtime.audit(
                "egress",
                &serde_json::json!({
                    "call": call,
                    "method": record.method,
                    "host": record.host,
                    "port": record.port,
                }),
                &decision,
                crate::audit::Outcome::Other(serde_json::to_value(record).unwrap_or_default()),
                started,
            )
        };
        match context.and_then(|c| c.downcast_ref::<crate::audit::CallOrigin>()) {
            Some(origin) => crate::audit::CALL_ORIGIN.sync_scope(origin.clone(), write),
            None => write(),
        }
    }
}
