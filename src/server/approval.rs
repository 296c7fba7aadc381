//! Asking the user before a command that a policy rule marks `ask`.
//!
//! Owns the two ways MCP has to ask: `elicitation/create` sent to the client in sessions that
//! began with `initialize`, and the input-required round trip (SEP-2322) in 2026-07-28
//! sessions, where the first `tools/call` answers `input_required` and the client calls again
//! with `inputResponses` and the `requestState` it was given. It does not decide *whether* to
//! ask (that is `policy::commands`) nor what a refusal says (that is `tools::shell_exec`).
//!
//! `requestState` comes back from the client and is attacker-controlled, so it carries no
//! meaning: it is a random handle to an entry kept here, single-use, bound to the exact
//! arguments and rule it was issued for, and expiring. A handle that does not fit is ignored and
//! the user is asked afresh; an approval can never be forged or carried over to another command.

use crate::policy::commands::Reason;
use crate::tools::shell_exec::{self, Refusal, ShellExecArgs};
use rmcp::RoleServer;
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitationSchema, InputRequest, InputRequests,
    InputRequiredResult, ProtocolVersion,
};
use rmcp::service::{ElicitationError, ElicitationMode, RequestContext};
use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Key of our question in `inputRequests` / `inputResponses`.
const INPUT_KEY: &str = "approve_command";
/// Open questions kept at most; the oldest is forgotten first (its retry is simply asked again).
const MAX_PENDING: usize = 64;

/// The form the user fills in: one checkbox.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ApproveCommand {
    /// true to run the command, false to refuse it.
    pub approve: bool,
}
rmcp::elicit_safe!(ApproveCommand);

/// The user's answer; `Pending` (2026-07-28) is returned to the client, whose retry carries
/// the answer.
pub type Approval = shell_exec::Approval<InputRequiredResult>;

/// How `shell_exec` asks the user, for one call: through this session's open questions.
pub struct Asker<'a> {
    pub approvals: &'a Approvals,
    pub rctx: &'a RequestContext<RoleServer>,
    pub state: Option<String>,
    pub responses: Option<rmcp::model::InputResponses>,
}

impl shell_exec::Approver for Asker<'_> {
    type Pending = InputRequiredResult;

    /// Asks the user through `rctx`'s client. `state` and `responses` are the MRTR retry
    /// fields of this call (None on a first call and in legacy sessions).
    async fn ask(self, args: &ShellExecArgs, reason: &Reason) -> Approval {
        let modern = self
            .rctx
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        if modern {
            self.approvals
                .round_trip(self.rctx, args, reason, self.state, self.responses)
        } else {
            elicit(self.rctx, args, reason, self.approvals.timeout).await
        }
    }
}

struct Pending {
    arguments: String,
    rule: String,
    issued: Instant,
}

/// The open questions, and how long any question waits for its answer (the policy's
/// `server.approval_timeout_secs`, in both protocol generations).
pub struct Approvals {
    pending: Mutex<HashMap<String, Pending>>,
    timeout: Duration,
}

/// The question shown to the user.
fn question(args: &ShellExecArgs, reason: &Reason) -> String {
    format!(
        "cordon: allow this shell command to run?\n\n    {}\n\nThe policy rule `{}` asks first: {}\n(It would run inside the sandbox.)",
        args.command, reason.rule, reason.justification
    )
}

impl Approvals {
    pub fn new(timeout: Duration) -> Self {
        Self {
            pending: Mutex::default(),
            timeout,
        }
    }

    fn round_trip(
        &self,
        rctx: &RequestContext<RoleServer>,
        args: &ShellExecArgs,
        reason: &Reason,
        state: Option<String>,
        responses: Option<rmcp::model::InputResponses>,
    ) -> Approval {
        let can_elicit = rctx
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some());
        if !can_elicit {
            return Approval::Refused(Refusal::Unavailable(
                "the client did not declare elicitation support in clientCapabilities".into(),
            ));
        }
        let arguments = serde_json::to_string(args).unwrap_or_default();
        if let Some(handle) = state
            && let Some(p) = self.take(&handle)
            && p.arguments == arguments
            && p.rule == reason.rule
        {
            if p.issued.elapsed() >= self.timeout {
                return Approval::Refused(Refusal::Expired(self.timeout));
            }
            let answer = responses.as_ref().and_then(|r| r.get(INPUT_KEY));
            return match answer.map(|a| (&a["action"], &a["content"]["approve"])) {
                Some((action, serde_json::Value::Bool(true))) if action == "accept" => {
                    Approval::Approved
                }
                Some((action, _)) if action == "cancel" => Approval::Refused(Refusal::Cancelled),
                // `decline`, an accepted "no", or no answer at all.
                _ => Approval::Refused(Refusal::Declined),
            };
        }
        let schema = match ElicitationSchema::builder()
            .required_bool(INPUT_KEY_FIELD)
            .build()
        {
            Ok(s) => s,
            Err(e) => {
                return Approval::Refused(Refusal::Unavailable(format!(
                    "the approval form could not be built ({e})"
                )));
            }
        };
        let request = InputRequest::Elicitation(ElicitRequest::new(
            ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: question(args, reason),
                requested_schema: schema,
            },
        ));
        let mut requests = InputRequests::new();
        requests.insert(INPUT_KEY.into(), request);
        let handle = self.issue(Pending {
            arguments,
            rule: reason.rule.clone(),
            issued: Instant::now(),
        });
        Approval::Pending(InputRequiredResult::new(Some(requests), Some(handle)))
    }

    fn take(&self, handle: &str) -> Option<Pending> {
        self.pending.lock().ok()?.remove(handle)
    }

    fn issue(&self, pending: Pending) -> String {
        let handle = random_handle();
        if let Ok(mut map) = self.pending.lock() {
            // Kept a little past the timeout, so a late answer is told it expired rather
            // than asked again.
            let keep = self.timeout.saturating_mul(2);
            map.retain(|_, p| p.issued.elapsed() < keep);
            while map.len() >= MAX_PENDING {
                let Some(oldest) = map
                    .iter()
                    .min_by_key(|(_, p)| p.issued)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                map.remove(&oldest);
            }
            map.insert(handle.clone(), pending);
        }
        handle
    }
}

/// The checkbox's field name in the form (same as [`ApproveCommand`]).
const INPUT_KEY_FIELD: &str = "approve";

/// Legacy sessions: an `elicitation/create` request to the client, awaited in this call.
async fn elicit(
    rctx: &RequestContext<RoleServer>,
    args: &ShellExecArgs,
    reason: &Reason,
    timeout: Duration,
) -> Approval {
    if !rctx
        .peer
        .supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
    {
        return Approval::Refused(Refusal::Unavailable(
            "the client did not declare elicitation (form) support when it initialized".into(),
        ));
    }
    let asked = rctx.peer.elicit::<ApproveCommand>(question(args, reason));
    let answer = tokio::select! {
        answer = asked => answer,
        // The call was cancelled while the user looked at the question: nothing runs.
        _ = rctx.ct.cancelled() => return Approval::Refused(Refusal::Cancelled),
        _ = tokio::time::sleep(timeout) => return Approval::Refused(Refusal::Expired(timeout)),
    };
    match answer {
        Ok(Some(ApproveCommand { approve: true })) => Approval::Approved,
        Ok(_) | Err(ElicitationError::UserDeclined) => Approval::Refused(Refusal::Declined),
        Err(ElicitationError::UserCancelled) => Approval::Refused(Refusal::Cancelled),
        Err(ElicitationError::CapabilityNotSupported) => Approval::Refused(Refusal::Unavailable(
            "the client does not support elicitation".into(),
        )),
        Err(e) => Approval::Refused(Refusal::Unavailable(format!(
            "asking the client failed ({e})"
        ))),
    }
}

/// 128 random bits, hex: an unguessable handle (the value itself means nothing).
fn random_handle() -> String {
    let mut bytes = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if filled.is_err() {
        // Without randomness a handle could be guessed, but a guessed handle only lets the
        // client re-answer its own question for the same arguments; still, mix in the clock.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes.copy_from_slice(&nanos.to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_unique_and_single_use() {
        let a = Approvals::new(Duration::from_secs(300));
        let pending = || Pending {
            arguments: "{}".into(),
            rule: "r".into(),
            issued: Instant::now(),
        };
        let h1 = a.issue(pending());
        let h2 = a.issue(pending());
        assert_ne!(h1, h2);
        assert_eq!(h1.len(), 32);
        assert!(a.take(&h1).is_some());
        assert!(a.take(&h1).is_none(), "a handle answers once");
        assert!(a.take("forged").is_none());
    }

    #[test]
    fn pending_questions_are_bounded() {
        let a = Approvals::new(Duration::from_secs(300));
        let first = a.issue(Pending {
            arguments: "{}".into(),
            rule: "r".into(),
            issued: Instant::now() - Duration::from_secs(1),
        });
        for _ in 0..MAX_PENDING {
            a.issue(Pending {
                arguments: "{}".into(),
                rule: "r".into(),
                issued: Instant::now(),
            });
        }
        assert!(a.pending.lock().unwrap().len() <= MAX_PENDING);
        assert!(a.take(&first).is_none(), "the oldest is forgotten first");
    }
}
