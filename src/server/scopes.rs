//! Least privilege per tool over HTTP: which tools a request's credentials may see and call.
//!
//! `[server.http.scopes]` names the scope each tool needs (by default `read_file` →
//! `cordon:read`; `write_file`, `edit_file` → `cordon:write`; `shell_exec`, `job`,
//! `code_interpreter` → `cordon:exec`). What a request may do follows from its authenticated
//! credentials (`http::auth::Granted`, put in the request by the front door), never from an
//! argument the model writes: a JWT's `scope` claim grants the tools whose scope it names, the
//! static token's holder every tool. `tools/list` shows only those tools; a call of another is
//! a tool error naming the scope it needs. A token granting none is refused at the door (403
//! `insufficient_scope`, `http`). stdio has every tool.
//!
//! Owns the decision per tool; the authentication is `http::auth`'s.

use crate::shape::{ErrorKind, ToolError};
use rmcp::RoleServer;
use rmcp::model::Tool;
use rmcp::service::RequestContext;

/// The scope `tool` needs, if the policy gives it one.
fn scope_of<'p>(policy: &'p crate::policy::Policy, tool: &str) -> Option<&'p str> {
    policy.server.http.scopes.get(tool).map(String::as_str)
}

/// Whether the request's credentials allow `tool` (always on stdio and for a tool with no
/// scope).
pub(super) fn allows(
    rctx: &RequestContext<RoleServer>,
    policy: &crate::policy::Policy,
    tool: &str,
) -> bool {
    match (super::http::granted_of(rctx), scope_of(policy, tool)) {
        (Some(granted), Some(scope)) => granted.allows(scope),
        _ => true,
    }
}

/// The refusal of a call of `tool` the credentials do not allow, with the scope it needs, or
/// None.
pub(super) fn refusal(
    rctx: &RequestContext<RoleServer>,
    policy: &crate::policy::Policy,
    tool: &str,
) -> Option<(ToolError, String)> {
    if allows(rctx, policy, tool) {
        return None;
    }
    let granted = super::http::granted_of(rctx)?;
    let scope = scope_of(policy, tool)?;
    let mut error = ToolError::new(
        ErrorKind::Denied,
        format!(
            "`{tool}` needs the scope `{scope}`, which this session's token does not grant (it \
             grants {}; [server.http.scopes] of policy {}). Do not retry: ask the user for a \
             token with `{scope}`, or use the tools this session lists",
            granted.describe(),
            policy.origin
        ),
    );
    error.retriable = false;
    Some((error, scope.to_owned()))
}

/// Puts a refused call on record (tool `scope`, like the breaker's own records: what
/// happened, which `policy replay` does not judge), with the subject of the call's origin.
pub(super) fn audit_refusal(runtime: &crate::runtime::Runtime, tool: &str, scope: &str) {
    runtime.audit(
        "scope",
        &serde_json::json!({"tool": tool, "needs": scope}),
        &crate::audit::Decision::Deny {
            rule: format!("scope:{scope}"),
        },
        crate::audit::Outcome::Other(serde_json::json!({"error": "denied"})),
        std::time::Instant::now(),
    );
}

/// The scope that allows this request's call of `tool`, for the audit log: None where the
/// credentials grant every tool.
pub(super) fn used(
    rctx: &RequestContext<RoleServer>,
    policy: &crate::policy::Policy,
    tool: &str,
) -> Option<String> {
    match super::http::granted_of(rctx)? {
        crate::server::http::auth::Granted::Everything => None,
        crate::server::http::auth::Granted::Scopes(_) => scope_of(policy, tool).map(str::to_owned),
    }
}

/// Whether the list of tools differs by who asks (then it must not be cached for others).
pub(super) fn list_is_personal(rctx: &RequestContext<RoleServer>) -> bool {
    matches!(
        super::http::granted_of(rctx),
        Some(crate::server::http::auth::Granted::Scopes(_))
    )
}

/// The tools of `all` the request's credentials allow.
pub(super) fn visible(
    rctx: &RequestContext<RoleServer>,
    policy: &crate::policy::Policy,
    all: Vec<Tool>,
) -> Vec<Tool> {
    all.into_iter()
        .filter(|t| allows(rctx, policy, &t.name))
        .collect()
}
