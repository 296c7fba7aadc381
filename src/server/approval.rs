//! Asking before a command that a policy rule marks `ask`.
//!
//! Owns the choice of channel (`server.approvals`, in order: the first one this call can use
//! asks) and the two ways MCP has to ask: `elicitation/create` sent to the client in sessions
//! that began with `initialize`, and the input-required round trip (SEP-2322) in 2026-07-28
//! sessions, where the first `tools/call` answers `input_required` and the client calls again
//! with `inputResponses` and the `requestState` it was given. The third channel, the operator
//! on the host, is `operator`'s. The operator is asked in the call only while one watches
//! (`cordon approvals --watch` connected); the call then waits, reporting progress that names
//! who is asked. With nobody watching, nobody would answer before the client gives up, so the
//! call is refused at once, the question is left open on the channel for the approval
//! timeout, and the refusal names its id and the `cordon approve ID` that answers it: an
//! approval given then is kept, single-use, for this session's retry of the same arguments
//! under the same rule. It does not decide *whether* to ask (that is `policy::commands`) nor
//! what a refusal says (that is `tools::shell_exec`).
//!
//! `requestState` comes back from the client and is attacker-controlled, so it carries no
//! meaning: it is a random handle to an entry kept here, single-use, bound to the exact
//! arguments and rule it was issued for, and expiring. A handle that does not fit is ignored and
//! the user is asked afresh; an approval can never be forged or carried over to another command.

use super::operator::{OperatorChannel, Ticket, Verdict, Waited, random_handle};
use crate::audit::AnsweredBy;
use crate::policy::ApprovalChannel;
use crate::policy::commands::Reason;
use crate::tools::shell_exec::{self, Refusal, ShellExecArgs};
use rmcp::RoleServer;
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitationSchema, InputRequest, InputRequests,
    InputRequiredResult, ProtocolVersion,
};
use rmcp::service::{ElicitationError, ElicitationMode, RequestContext};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Key of our question in `inputRequests` / `inputResponses`.
const INPUT_KEY: &str = "approve_command";
/// Open questions kept at most; the oldest is forgotten first (its retry is simply asked again).
const MAX_PENDING: usize = 64;

/// The form the user fills in: one checkbox.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(super) struct ApproveCommand {
    /// true to run the command, false to refuse it.
    pub approve: bool,
}
rmcp::elicit_safe!(ApproveCommand);

/// The user's answer; `Pending` (2026-07-28) is returned to the client, whose retry carries
/// the answer.
pub(super) type Approval = shell_exec::Approval<InputRequiredResult>;

/// How `shell_exec` asks the user, for one call: through this session's open questions.
pub(super) struct Asker<'a> {
    pub approvals: &'a Approvals,
    pub rctx: &'a RequestContext<RoleServer>,
    pub state: Option<String>,
    pub responses: Option<rmcp::model::InputResponses>,
    /// The server's operator channel, if it runs.
    pub operator: Option<&'a OperatorChannel>,
    /// `server.approvals`: the channels to try, in order.
    pub channels: &'a [ApprovalChannel],
    /// Why the operator channel is not running, when it is not.
    pub operator_down: Option<&'a str>,
}

impl shell_exec::Approver for Asker<'_> {
    type Pending = InputRequiredResult;

    /// Asks through the first channel of `server.approvals` this call can use. `state` and
    /// `responses` are the MRTR retry fields of this call (None on a first call and in
    /// legacy sessions).
    async fn ask(self, args: &ShellExecArgs, reason: &Reason) -> Approval {
        let modern = self
            .rctx
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let elicitation_allowed = self.channels.contains(&ApprovalChannel::Elicitation);
        // A retry carrying the answer to our `input_required` question belongs to it.
        if modern && elicitation_allowed && self.state.is_some() {
            return self
                .approvals
                .round_trip(self.rctx, args, reason, self.state, self.responses);
        }
        let mut why_not = Vec::new();
        for channel in self.channels {
            match channel {
                ApprovalChannel::Elicitation => {
                    let can = if modern {
                        self.rctx
                            .client_capabilities()
                            .is_some_and(|c| c.elicitation.is_some())
                    } else {
                        self.rctx
                            .peer
                            .supported_elicitation_modes()
                            .contains(&ElicitationMode::Form)
                    };
                    if !can {
                        why_not.push("the client did not declare elicitation support".to_owned());
                        continue;
                    }
                    return if modern {
                        self.approvals.round_trip(
                            self.rctx,
                            args,
                            reason,
                            self.state,
                            self.responses,
                        )
                    } else {
                        elicit(self.rctx, args, reason, self.approvals.timeout).await
                    };
                }
                ApprovalChannel::Operator => match self.operator {
                    Some(operator) => {
                        return ask_operator(operator, self.rctx, args, reason, self.approvals)
                            .await;
                    }
                    None => why_not.push(format!(
                        "the operator channel is not running ({})",
                        self.operator_down.unwrap_or("see the server's log")
                    )),
                },
            }
        }
        let listed: Vec<&str> = self.channels.iter().map(|c| c.as_str()).collect();
        Approval::Refused(
            Refusal::Unavailable(format!(
                "no approval channel of `server.approvals` ({}) can ask: {}",
                listed.join(", "),
                why_not.join("; ")
            )),
            None,
        )
    }
}

/// Says to the calling session that question `id` waits for the operator (`watching`: someone
/// runs `cordon approvals --watch`).
fn operator_waiting(id: &str, reason: &Reason, watching: bool, message: String) {
    crate::events::emit_for_call(
        crate::events::Level::Notice,
        "approval_waiting",
        serde_json::json!({
            "id": id,
            "rule": reason.rule,
            "channel": "operator",
            "watching": watching,
            "message": message,
        }),
    );
}

/// Nobody watches the operator channel: the question is parked for the call's retry (it
/// stays open until its deadline, under the same id) and this call is refused, saying how the
/// operator answers it.
fn park_for_retry(
    ticket: Ticket,
    arguments: String,
    reason: &Reason,
    approvals: &Approvals,
) -> Approval {
    let id = ticket.id().to_owned();
    let left = ticket.deadline_in().as_secs().max(1);
    ticket.park();
    approvals.park(arguments, reason.rule.clone(), ticket);
    operator_waiting(
        &id,
        reason,
        false,
        format!(
            "no operator watches the approval channel: question {id} waits {left}s for \
             `cordon approve {id}` on the host, then the same call runs"
        ),
    );
    Approval::Refused(
        Refusal::Unavailable(format!(
            "no operator is watching the approval channel on the host now (nobody runs \
             `cordon approvals --watch`), so nobody could answer within this call. The \
             question stays open for {left}s as {id}: the operator approves it with \
             `cordon approve {id}` on the host, and this same call (the same arguments), \
             made again after that, runs"
        )),
        None,
    )
}

/// The operator on the host. With an operator watching, the question is listed on the
/// approvals socket and the call waits until someone answers, the timeout passes or the call
/// is cancelled; the client hears, as progress (when it asked for progress) and as a log
/// message, whom the call waits for. With nobody watching, the call is refused at once and
/// the question stays open for its retry (see the module note).
async fn ask_operator(
    operator: &OperatorChannel,
    rctx: &RequestContext<RoleServer>,
    args: &ShellExecArgs,
    reason: &Reason,
    approvals: &Approvals,
) -> Approval {
    let arguments = serde_json::to_string(args).unwrap_or_default();
    // A question this session left open for the same command under the same rule: its
    // answer, if given, is this call's; otherwise it is asked again under the same id.
    let mut ticket = match approvals.take_parked(&arguments, &reason.rule) {
        Some(mut ticket) => match ticket.answered() {
            Some(verdict) => return from_verdict(verdict),
            None if ticket.expired() => None,
            None => Some(ticket),
        },
        None => None,
    };
    if ticket.is_none() {
        ticket = operator.open(
            &args.command,
            &reason.rule,
            &reason.justification,
            approvals.timeout,
        );
    }
    let Some(mut ticket) = ticket else {
        return Approval::Refused(
            Refusal::Unavailable(format!(
                "{} questions already wait for the operator; answer or deny some with \
                 `cordon approvals` first",
                super::operator::MAX_PENDING
            )),
            None,
        );
    };
    let id = ticket.id().to_owned();
    let watchers = operator.watchers();
    if watchers.is_empty() {
        return park_for_retry(ticket, arguments, reason, approvals);
    }
    let asked_of = format!(
        "asked of the operator watching on the host: {}",
        watchers.join("; ")
    );
    let waiting = format!(
        "waiting for the operator's approval ({asked_of}): run `cordon approvals` on the host"
    );
    let progress = rctx.meta.get_progress_token();
    let peer = rctx.peer.clone();
    // Progress must only grow, and the command's own ticks start at 1 (seconds run): the
    // wait reports 1/2, 2/3, 3/4, … which stay below it however long the wait.
    let sent = std::sync::atomic::AtomicU32::new(0);
    let notify = |message: String| {
        if let Some(token) = &progress {
            let n = f64::from(sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
            let param = rmcp::model::ProgressNotificationParam::new(token.clone(), n / (n + 1.0))
                .with_message(message);
            let peer = peer.clone();
            tokio::spawn(async move {
                let _ = peer.notify_progress(param).await;
            });
        }
    };
    notify(format!("{waiting} (question {id}, rule `{}`)", reason.rule));
    operator_waiting(
        &id,
        reason,
        true,
        format!("{waiting}, then `cordon approve {id}` or `cordon deny {id}`"),
    );
    let cancel = rctx.ct.clone();
    let asked = ticket.wait(&cancel);
    tokio::pin!(asked);
    // Repeated while the question waits, so clients that time out quiet calls keep it open.
    // An operator who stops watching meanwhile may come back: the wait goes on.
    let started = Instant::now();
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    let waited = loop {
        tokio::select! {
            waited = &mut asked => break waited,
            _ = tick.tick() => {
                notify(format!(
                    "{waiting} (question {id}, {}s so far, at most {}s)",
                    started.elapsed().as_secs(),
                    approvals.timeout.as_secs()
                ));
            }
        }
    };
    match waited {
        Waited::Answered(verdict) => from_verdict(verdict),
        Waited::Expired => Approval::Refused(Refusal::Expired(approvals.timeout), None),
        Waited::Cancelled => Approval::Refused(Refusal::Cancelled, None),
        Waited::Full => Approval::Refused(
            Refusal::Unavailable(format!(
                "{} questions already wait for the operator; answer or deny some with \
                 `cordon approvals` first",
                super::operator::MAX_PENDING
            )),
            None,
        ),
    }
}

/// The operator's answer as this call's approval.
fn from_verdict(verdict: Verdict) -> Approval {
    let by = AnsweredBy {
        channel: "operator",
        by: verdict.by,
    };
    if verdict.approve {
        Approval::Approved(by)
    } else {
        Approval::Refused(Refusal::Declined, Some(by))
    }
}

/// How often a call waiting for the operator says so again.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Who answers through the client: its `clientInfo` name, or "the client" if it gave none.
fn client_user(rctx: &RequestContext<RoleServer>, channel: &'static str) -> AnsweredBy {
    let by = rctx
        .client_info()
        .map(|info| format!("the user of {} {}", info.name, info.version))
        .unwrap_or_else(|| "the client's user".to_owned());
    AnsweredBy { channel, by }
}

struct Pending {
    arguments: String,
    rule: String,
    issued: Instant,
}

/// A question left open on the operator channel for a call that was refused because nobody
/// watched: its answer goes to this session's retry of the same arguments under the rule.
struct Parked {
    arguments: String,
    rule: String,
    ticket: Ticket,
}

/// The open questions, and how long any question waits for its answer (the policy's
/// `server.approval_timeout_secs`, in both protocol generations).
pub(crate) struct Approvals {
    pending: Mutex<HashMap<String, Pending>>,
    /// Operator questions awaiting their call's retry, oldest first; at most [`MAX_PENDING`].
    parked: Mutex<Vec<Parked>>,
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
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            pending: Mutex::default(),
            parked: Mutex::default(),
            timeout,
        }
    }

    /// Keeps `ticket` for the retry of `arguments` under `rule`. An answered ticket is kept
    /// until twice the timeout from now at most; the oldest goes first past the bound.
    fn park(&self, arguments: String, rule: String, ticket: Ticket) {
        let Ok(mut parked) = self.parked.lock() else {
            return;
        };
        let keep = self.timeout.saturating_mul(2);
        parked.retain(|p| p.ticket.since().elapsed() < keep);
        while parked.len() >= MAX_PENDING {
            parked.remove(0);
        }
        parked.push(Parked {
            arguments,
            rule,
            ticket,
        });
    }

    /// The ticket parked for `arguments` under `rule`, taken (a verdict answers one call).
    fn take_parked(&self, arguments: &str, rule: &str) -> Option<Ticket> {
        let mut parked = self.parked.lock().ok()?;
        let keep = self.timeout.saturating_mul(2);
        parked.retain(|p| p.ticket.since().elapsed() < keep);
        let at = parked
            .iter()
            .position(|p| p.arguments == arguments && p.rule == rule)?;
        Some(parked.remove(at).ticket)
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
            return Approval::Refused(
                Refusal::Unavailable(
                    "the client did not declare elicitation support in clientCapabilities".into(),
                ),
                None,
            );
        }
        let by = || Some(client_user(rctx, "input_required"));
        let arguments = serde_json::to_string(args).unwrap_or_default();
        if let Some(handle) = state
            && let Some(p) = self.take(&handle)
            && p.arguments == arguments
            && p.rule == reason.rule
        {
            if p.issued.elapsed() >= self.timeout {
                return Approval::Refused(Refusal::Expired(self.timeout), None);
            }
            let answer = responses.as_ref().and_then(|r| r.get(INPUT_KEY));
            return match answer.map(|a| (&a["action"], &a["content"]["approve"])) {
                Some((action, serde_json::Value::Bool(true))) if action == "accept" => {
                    Approval::Approved(client_user(rctx, "input_required"))
                }
                Some((action, _)) if action == "cancel" => {
                    Approval::Refused(Refusal::Cancelled, by())
                }
                // `decline`, an accepted "no", or no answer at all.
                _ => Approval::Refused(Refusal::Declined, by()),
            };
        }
        let schema = match ElicitationSchema::builder()
            .required_bool(INPUT_KEY_FIELD)
            .build()
        {
            Ok(s) => s,
            Err(e) => {
                return Approval::Refused(
                    Refusal::Unavailable(format!("the approval form could not be built ({e})")),
                    None,
                );
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
        return Approval::Refused(
            Refusal::Unavailable(
                "the client did not declare elicitation (form) support when it initialized".into(),
            ),
            None,
        );
    }
    let asked = rctx.peer.elicit::<ApproveCommand>(question(args, reason));
    let answer = tokio::select! {
        answer = asked => answer,
        // The call was cancelled while the user looked at the question: nothing runs.
        _ = rctx.ct.cancelled() => return Approval::Refused(Refusal::Cancelled, None),
        _ = tokio::time::sleep(timeout) => {
            return Approval::Refused(Refusal::Expired(timeout), None);
        }
    };
    let by = || Some(client_user(rctx, "elicitation"));
    match answer {
        Ok(Some(ApproveCommand { approve: true })) => {
            Approval::Approved(client_user(rctx, "elicitation"))
        }
        Ok(_) | Err(ElicitationError::UserDeclined) => Approval::Refused(Refusal::Declined, by()),
        Err(ElicitationError::UserCancelled) => Approval::Refused(Refusal::Cancelled, by()),
        Err(ElicitationError::CapabilityNotSupported) => Approval::Refused(
            Refusal::Unavailable("the client does not support elicitation".into()),
            None,
        ),
        Err(e) => Approval::Refused(
            Refusal::Unavailable(format!("asking the client failed ({e})")),
            None,
        ),
    }
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
