//! The circuit breaker's MCP side: what a tripped breaker does to a call.
//!
//! Two places. Before a `deny` rule's refusal is answered ([`Gate`], the `Approver` that
//! `shell_exec` asks through): once the session's breaker (`crate::breaker`) is tripped for
//! that rule, a person is asked instead, through the channels of `server.approvals` in order
//! (elicitation where the client declared it at `initialize`, else the operator's `cordon
//! approvals`), what to do: allow it once, allow it for this session, or keep refusing; only
//! where the policy lets it ask at all (`[breaker] ask`). And after every call ([`observe`]):
//! what the call refused is recorded, a refusal that trips the breaker is announced (log
//! message, stderr, audit record, `/metrics`), and a refusal that meets a tripped breaker is
//! answered with the breaker's message instead of the plain deny: the same refusal has
//! repeated N times, variants will not help, stop and ask the user; `error.kind` stays the
//! refusal's own (`denied`, or `path_escape` for a path outside the workspace),
//! `retriable: false`, and `breaker = {group, count, since}` in `structuredContent`
//! ([`declare_breaker`] puts that field in every output schema).
//!
//! A person's answer comes only from a person: the client's elicitation form or the operator's
//! socket. Nothing in a call's arguments, `_meta` or `requestState` is read here, so a model
//! can neither answer the question nor reset the breaker. The 2026-07-28 revision's
//! `input_required` round trip is not used for the breaker's question (its answer would come
//! back in the model's own retry); such a client is answered by the operator or not at all.
//!
//! It does not count (`crate::breaker`), decide rules (`policy`) or ask an `ask` rule's
//! question (`approval`, which [`Gate`] hands those to unchanged).

use super::approval;
use super::operator::Waited;
use crate::audit::{AnsweredBy, Decision, Outcome};
use crate::breaker::{Breaker, Cause, Choice, Group, Seen, Trip};
use crate::policy::ApprovalChannel;
use crate::policy::commands::Reason;
use crate::runtime::Session;
use crate::tools::shell_exec::{self, Overrule, ShellExecArgs};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, ProtocolVersion};
use rmcp::service::{ElicitationError, ElicitationMode};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;

/// The form a person fills in when the breaker asks.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub(super) struct BreakerAnswer {
    /// allow_once: run this command now; allow_session: run it and every later call this rule
    /// refuses in this session; keep_refusing: refuse it for the rest of the session.
    pub decision: BreakerDecision,
}
rmcp::elicit_safe!(BreakerAnswer);

/// The three answers, as the form offers them.
#[derive(Debug, Clone, Copy, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub(crate) enum BreakerDecision {
    AllowOnce,
    AllowSession,
    KeepRefusing,
}

impl From<BreakerDecision> for Choice {
    fn from(d: BreakerDecision) -> Self {
        match d {
            BreakerDecision::AllowOnce => Choice::AllowOnce,
            BreakerDecision::AllowSession => Choice::AllowSession,
            BreakerDecision::KeepRefusing => Choice::KeepRefusing,
        }
    }
}

/// How `shell_exec` asks, for one call: `ask` rules through `approval` as always; a `deny`
/// rule's refusal through the breaker.
pub(super) struct Gate<'a> {
    pub asker: approval::Asker<'a>,
    pub breaker: &'a Breaker,
    pub session: &'a Session,
}

impl shell_exec::Approver for Gate<'_> {
    type Pending = rmcp::model::InputRequiredResult;

    fn ask(
        self,
        args: &ShellExecArgs,
        reason: &Reason,
    ) -> impl std::future::Future<Output = approval::Approval> + Send {
        shell_exec::Approver::ask(self.asker, args, reason)
    }

    async fn overrule(self, args: &ShellExecArgs, reason: &Reason) -> Overrule {
        let group = Group::Rule(reason.rule.clone());
        if let Some(by) = self.breaker.allowed_for_session(&group) {
            return Overrule::Allow(by);
        }
        let Some(trip) = self.breaker.tripped(&group, Instant::now()) else {
            return Overrule::Refuse;
        };
        if matches!(trip.cause, Cause::KeptByPerson(_)) || !self.breaker.policy().ask {
            return Overrule::Refuse;
        }
        let Some((choice, by)) = self.ask_person(args, reason, &trip).await else {
            return Overrule::Refuse;
        };
        self.breaker.answered(&group, choice, by.clone());
        announce_answer(self.session, &group, choice, &by);
        match choice {
            Choice::KeepRefusing => Overrule::Refuse,
            Choice::AllowOnce | Choice::AllowSession => Overrule::Allow(by),
        }
    }
}

impl Gate<'_> {
    /// Asks through the first channel of `server.approvals` this call can use; None when
    /// none can, or nobody answered.
    async fn ask_person(
        &self,
        args: &ShellExecArgs,
        reason: &Reason,
        trip: &Trip,
    ) -> Option<(Choice, AnsweredBy)> {
        let rctx = self.asker.rctx;
        let timeout = self.session.runtime.policy.server.approval_timeout;
        let modern = rctx
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let count = trip.count.saturating_add(1);
        for channel in self.asker.channels {
            match channel {
                ApprovalChannel::Elicitation => {
                    if modern
                        || !rctx
                            .peer
                            .supported_elicitation_modes()
                            .contains(&ElicitationMode::Form)
                    {
                        continue;
                    }
                    let message = question(args, reason, count, &trip.group);
                    let asked = rctx.peer.elicit::<BreakerAnswer>(message);
                    let answer = tokio::select! {
                        answer = asked => answer,
                        _ = rctx.ct.cancelled() => return None,
                        _ = tokio::time::sleep(timeout) => return None,
                    };
                    let by = client_user(rctx);
                    return match answer {
                        Ok(Some(BreakerAnswer { decision })) => Some((decision.into(), by)),
                        // A person said no: that is keeping the refusal.
                        Err(ElicitationError::UserDeclined) => Some((Choice::KeepRefusing, by)),
                        Ok(None) | Err(_) => None,
                    };
                }
                ApprovalChannel::Operator => {
                    let Some(operator) = self.asker.operator else {
                        continue;
                    };
                    let why = format!(
                        "circuit breaker: refused {count} times in this session ({}): {}. \
                         `cordon approve` allows it once, `cordon deny` keeps refusing it for \
                         the session",
                        trip.group.describe(),
                        reason.justification
                    );
                    let rule = format!("breaker:{}", reason.rule);
                    let opened = |id: &str| {
                        crate::events::emit_for_call(
                            crate::events::Level::Notice,
                            "approval_waiting",
                            json!({
                                "id": id,
                                "rule": rule,
                                "channel": "operator",
                                "message": format!(
                                    "the circuit breaker waits for the operator: `cordon approve {id}` \
                                     allows the refused command once, `cordon deny {id}` keeps refusing"
                                ),
                            }),
                        );
                    };
                    let waited = operator
                        .ask(&args.command, &rule, &why, timeout, &rctx.ct, opened)
                        .await;
                    return match waited {
                        Waited::Answered(verdict) => {
                            let by = AnsweredBy {
                                channel: "operator",
                                by: verdict.by,
                            };
                            let choice = if verdict.approve {
                                Choice::AllowOnce
                            } else {
                                Choice::KeepRefusing
                            };
                            Some((choice, by))
                        }
                        Waited::Expired | Waited::Cancelled | Waited::Full => None,
                    };
                }
            }
        }
        None
    }
}

/// The question shown to the client's user.
fn question(args: &ShellExecArgs, reason: &Reason, count: u32, group: &Group) -> String {
    format!(
        "cordon: the agent keeps trying something the policy refuses.\n\n    {}\n\n\
         {} has refused this session's calls {count} times (this one included): {}\n\n\
         allow_once runs this command now (inside the sandbox); allow_session also runs every \
         later command this rule refuses in this session; keep_refusing refuses it for the rest \
         of the session.",
        crate::text::shortened(&args.command, 2000),
        capitalised(&group.describe()),
        reason.justification
    )
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Who answers through the client: its `clientInfo` name.
fn client_user(rctx: &rmcp::service::RequestContext<rmcp::RoleServer>) -> AnsweredBy {
    let by = rctx
        .client_info()
        .map(|info| format!("the user of {} {}", info.name, info.version))
        .unwrap_or_else(|| "the client's user".to_owned());
    AnsweredBy {
        channel: "elicitation",
        by,
    }
}

/// After a call: records what it refused (or that it succeeded) in the session's breaker,
/// announces a trip, and answers a refusal that met a tripped breaker with its message.
pub(super) fn observe(
    breaker: &Breaker,
    session: &Session,
    seen: Seen,
    response: &mut Result<CallToolResponse, rmcp::ErrorData>,
) {
    if seen.refused.is_empty() {
        if let Some(tool) = seen.succeeded {
            breaker.succeeded(tool);
        }
        return;
    }
    let now = Instant::now();
    let mut met = None;
    for refused in &seen.refused {
        let recorded = breaker.record(refused.tool, &refused.group, now);
        if let Some(trip) = &recorded.newly {
            announce_trip(session, trip);
        }
        if met.is_none() {
            met = recorded.tripped;
        }
    }
    if let (Some(trip), Ok(CallToolResponse::Complete(result))) = (met, response)
        && result.is_error == Some(true)
    {
        crate::metrics::breaker_refusal();
        rewrite(result, &trip, &session.runtime.policy.origin);
    }
}

/// The breaker's message for a refusal that met it.
fn message(trip: &Trip, origin: &str) -> String {
    let what = trip.group.describe();
    let since = crate::clock::Utc::of(trip.since).rfc3339_millis();
    let stop = "Retrying variants of it will not help: cordon judges what a call does, not how \
                it is spelled. Stop and ask your user how to proceed";
    match &trip.cause {
        Cause::KeptByPerson(by) => format!(
            "refused again: {what} has been refused {} times in this session since {since}, \
             and a person ({}, through {}) was asked and chose to keep refusing it for the rest \
             of the session. Do not retry it in any form; ask your user how to proceed.",
            trip.count.max(1),
            by.by,
            by.channel
        ),
        Cause::Consecutive => format!(
            "refused again: the same refusal ({what}) has repeated {} times in this session \
             since {since}, and nobody could be asked to lift it here. {stop}; only they can \
             answer it (or the operator, by changing policy {origin}).",
            trip.count
        ),
        Cause::Window => format!(
            "refused again: {} calls of this session were refused since {since} (the latest: \
             {what}), and nobody could be asked to lift them here. {stop}; only they can answer \
             it (or the operator, by changing policy {origin}).",
            trip.count
        ),
    }
}

/// `breaker = {group, count, since}` as the result carries it.
fn field(trip: &Trip) -> Value {
    json!({
        "group": trip.group.key(),
        "count": trip.count,
        "since": crate::clock::Utc::of(trip.since).rfc3339_millis(),
    })
}

/// Puts the breaker's message first in a refused result: `error` (kind `denied`, not
/// retriable, the message followed by the refusal's own), `breaker`, and the text block.
fn rewrite(result: &mut CallToolResult, trip: &Trip, origin: &str) {
    let said = message(trip, origin);
    let mut kind = "denied".to_owned();
    if let Some(Value::Object(content)) = &mut result.structured_content {
        let error = content
            .entry("error")
            .or_insert_with(|| json!({"kind": "denied", "message": "", "retriable": false}));
        if !error.is_object() {
            *error = json!({});
        }
        let original = error["message"].as_str().unwrap_or("").to_owned();
        // A refusal keeps its own kind (`path_escape` stays one: a kind says what was
        // refused, not how often); one without a kind is `denied`.
        kind = error["kind"].as_str().unwrap_or("denied").to_owned();
        error["kind"] = kind.clone().into();
        error["retriable"] = false.into();
        error["message"] = if original.is_empty() {
            said.clone().into()
        } else {
            format!("{said} The refusal: {original}").into()
        };
        content.insert("breaker".into(), field(trip));
    }
    let head = format!("error [{kind}]: {said}\n");
    match result.content.first_mut() {
        Some(ContentBlock::Text(text)) => text.text = format!("{head}\n{}", text.text),
        _ => result.content.insert(0, ContentBlock::text(head)),
    }
}

/// A trip, for the people watching: a log message to the session, a line on stderr, an audit
/// record and the metric.
fn announce_trip(session: &Session, trip: &Trip) {
    let cause = match &trip.cause {
        Cause::Consecutive => "consecutive",
        Cause::Window => "window",
        Cause::KeptByPerson(_) => "kept",
    };
    let since = crate::clock::Utc::of(trip.since).rfc3339_millis();
    let message = format!(
        "circuit breaker tripped: {} refused {} times ({cause}) since {since}; the next such \
         refusal goes to a person, or tells the agent to stop",
        trip.group.public_key(),
        trip.count
    );
    tracing::warn!("{message}");
    crate::events::emit_for_call(
        crate::events::Level::Warning,
        "breaker_tripped",
        json!({
            "group": trip.group.public_key(),
            "count": trip.count,
            "since": since,
            "cause": cause,
            "message": message,
        }),
    );
    crate::metrics::breaker_tripped(cause);
    session.runtime.audit(
        "breaker",
        &json!({"group": trip.group.key(), "count": trip.count, "since": since}),
        &Decision::Allow,
        Outcome::Other(json!({"breaker": "tripped", "cause": cause})),
        Instant::now(),
    );
}

/// A person's answer to the breaker: stderr, the audit record, the metric.
fn announce_answer(session: &Session, group: &Group, choice: Choice, by: &AnsweredBy) {
    tracing::info!(
        "circuit breaker: {} answered {} for {}",
        by.by,
        choice.as_str(),
        group.public_key()
    );
    crate::metrics::breaker_answered(choice.as_str());
    session.runtime.audit(
        "breaker",
        &json!({"group": group.key()}),
        &Decision::Allow,
        Outcome::Other(json!({
            "breaker": "answered",
            "answer": choice.as_str(),
            "approval": {"channel": by.channel, "by": by.by},
        })),
        Instant::now(),
    );
}

/// `breaker` in every tool's output schema: any refused result may carry it.
pub(super) fn declare_breaker<S>(router: &mut ToolRouter<S>) {
    let property = json!({
        "type": "object",
        "description": "The circuit breaker answered this refusal: the same kind of call was \
                        refused `count` times in this session since `since`. Stop retrying \
                        variants and ask the user.",
        "properties": {
            "group": {"type": "string", "description": "What refused it: rule:NAME, \
                      path_escape, protected:ENTRY, host:NAME, kernel:FIELD:PATH, git, …"},
            "count": {"type": "integer", "minimum": 0},
            "since": {"type": "string"}
        },
        "required": ["group", "count", "since"]
    });
    for route in router.map.values_mut() {
        if let Some(output) = &route.attr.output_schema {
            let mut schema = (**output).clone();
            if let Some(Value::Object(properties)) = schema.get_mut("properties") {
                properties.insert("breaker".into(), property.clone());
            }
            route.attr.output_schema = Some(Arc::new(schema));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    #[test]
    fn the_form_is_a_valid_elicitation_schema_with_three_choices() {
        let schema = rmcp::model::ElicitationSchema::from_type::<BreakerAnswer>()
            .expect("an elicitation schema");
        let text = serde_json::to_string(&schema).unwrap();
        for choice in ["allow_once", "allow_session", "keep_refusing"] {
            assert!(text.contains(choice), "{text}");
        }
    }

    #[test]
    fn a_rewritten_refusal_says_stop_and_carries_the_breaker() {
        let mut result = CallToolResult::structured_error(json!({
            "error": {"kind": "denied", "message": "refused by rule x", "retriable": false},
            "stdout": ""
        }));
        result.content = vec![ContentBlock::text("error [denied]: refused by rule x")];
        let trip = Trip {
            group: Group::Rule("x".into()),
            count: 4,
            since: SystemTime::UNIX_EPOCH,
            cause: Cause::Consecutive,
        };
        rewrite(&mut result, &trip, "builtin:default");
        let content = result.structured_content.unwrap();
        assert_eq!(content["error"]["kind"], "denied");
        assert_eq!(content["error"]["retriable"], false);
        let said = content["error"]["message"].as_str().unwrap();
        assert!(
            said.contains("repeated 4 times") && said.contains("refused by rule x"),
            "{said}"
        );
        assert!(said.contains("Stop and ask your user"), "{said}");
        assert_eq!(
            content["breaker"],
            json!({"group": "rule:x", "count": 4, "since": "1970-01-01T00:00:00.000Z"})
        );
        let text = result.content[0].as_text().unwrap().text.clone();
        assert!(text.starts_with("error [denied]: refused again"), "{text}");
    }
}
