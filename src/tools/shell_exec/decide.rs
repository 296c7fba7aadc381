//! `shell_exec`'s decision, before anything runs: the command rules' verdict
//! ([`assess`], through `policy::decide`), the argument checks (`prepare`), and a person's
//! answer where a rule asks or a tripped breaker lets one overrule a `deny` ([`Approver`]).
//! A refusal is answered here ([`refusal_error`]); an admitted call is a [`Ready`] whose run
//! is `run`'s.

use super::prepare::{Prepared, prepare};
use super::{ShellExec, ShellExecArgs};
use crate::audit::{Answer as Answer_, AnsweredBy, Decision, Outcome};
use crate::policy::commands::{
    Decision as RuleDecision, ON_ANALYSIS_FAILURE, ON_UNKNOWN, Reason, Verdict,
};
use crate::policy::{Analysed, Request};
use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError, ToolOutcome};
use crate::tools::{CallHooks, SharedContext, finish};
use std::time::{Duration, Instant};

/// What the policy's command rules say about this call (see `policy::commands`). The command
/// line is analysed by the parser worker; when that fails (the worker crashed, hung or hit a
/// limit on this text) the policy's `commands.on_analysis_failure` decides.
pub(crate) async fn assess(ctx: &Session, args: &ShellExecArgs) -> Verdict {
    let policy = &ctx.runtime.policy;
    let decide = |analysis| {
        policy.decide(&Request::ShellExec {
            command: &args.command,
            analysis,
        })
    };
    if !policy.needs_analysis() {
        return decide(Analysed::NotNeeded);
    }
    let Some(parser) = &ctx.runtime.parser else {
        return decide(Analysed::Failed("this runtime has no parser worker"));
    };
    match parser.analyze(std::slice::from_ref(&args.command)).await {
        Ok(analyses) if analyses.len() == 1 => decide(Analysed::Done(&analyses[0])),
        Ok(_) => decide(Analysed::Failed("the analysis came back empty")),
        Err(e) => decide(Analysed::Failed(&e.to_string())),
    }
}

/// Asks the user whether a command an `ask` rule names may run. The server implements it:
/// it knows how to ask over MCP (elicitation, or `input_required` in the 2026-07-28
/// revision); this module only knows the answer.
pub(crate) trait Approver {
    /// What the server answers while the user's reply is outstanding; opaque here.
    type Pending;
    fn ask(
        self,
        args: &ShellExecArgs,
        reason: &Reason,
    ) -> impl std::future::Future<Output = Approval<Self::Pending>> + Send;

    /// A `deny` rule refused this call: whether a person overrules it (the circuit breaker,
    /// once it has tripped, asks one; see `server::breaker`). By default nobody does.
    fn overrule(
        self,
        _args: &ShellExecArgs,
        _reason: &Reason,
    ) -> impl std::future::Future<Output = Overrule> + Send
    where
        Self: Sized,
    {
        std::future::ready(Overrule::Refuse)
    }
}

/// Whether a person lifted a `deny` rule's refusal for this call.
pub(crate) enum Overrule {
    /// The refusal stands.
    Refuse,
    /// A person allowed it (once, or for the session); it runs, audited as approved by them.
    Allow(AnsweredBy),
}

/// The user's answer (or why there is none yet), with who gave it where someone did.
pub(crate) enum Approval<P> {
    Approved(AnsweredBy),
    Refused(Refusal, Option<AnsweredBy>),
    /// Asked; the reply comes with a later request.
    Pending(P),
}

/// How a `shell_exec` call ends: answered, or waiting for the user.
pub(crate) enum Answer<P> {
    Done(ToolOutcome),
    Pending(P),
}

/// What [`decide`] came to: an answer now (refused, invalid, waiting for the user), or a
/// checked and admitted call whose run the server may start now or as an MCP task.
pub(crate) enum Decided<P> {
    Answer(Answer<P>),
    Run(Box<Ready>),
}

/// A call the command rules (and the user) admitted and whose arguments are checked: only
/// the run is left.
pub(crate) struct Ready {
    ctx: SharedContext,
    args: ShellExecArgs,
    prepared: Prepared,
    decision: Decision,
}

impl Ready {
    /// Runs the command (waiting for a slot first) and answers.
    pub(crate) async fn run(self: Box<Self>, hooks: CallHooks) -> ToolOutcome {
        let Ready {
            ctx,
            args,
            prepared,
            decision,
        } = *self;
        super::run::run_prepared(ctx, args, prepared, hooks, &decision).await
    }
}

/// The decision before the run: the command rules' verdict, the argument checks (once,
/// before anyone is asked: nobody should approve a call that would fail anyway), the user's
/// approval where a rule asks. Nothing runs here.
pub(crate) async fn decide<A: Approver>(
    ctx: SharedContext,
    args: ShellExecArgs,
    approver: A,
) -> Decided<A::Pending> {
    let verdict = assess(&ctx, &args).await;
    let (decision, reason) = match (verdict.decision, verdict.reason) {
        (RuleDecision::Allow, _) | (_, None) => (Decision::Allow, None),
        (RuleDecision::Deny, Some(reason)) => match approver.overrule(&args, &reason).await {
            Overrule::Refuse => {
                let refused = refuse(&ctx, &args, &reason, &Refusal::Denied, None);
                return Decided::Answer(Answer::Done(refused));
            }
            Overrule::Allow(by) => {
                let decision = ask(&reason.rule, Answer_::Approved, Some(by));
                return match prepare(&ctx, &args).await {
                    Ok(prepared) => Decided::Run(Box::new(Ready {
                        ctx,
                        args,
                        prepared,
                        decision,
                    })),
                    Err(error) => Decided::Answer(Answer::Done(finish::<ShellExec>(
                        &ctx,
                        &args,
                        &decision,
                        Instant::now(),
                        Err(error),
                    ))),
                };
            }
        },
        (RuleDecision::Ask, Some(reason)) => (Decision::Allow, Some(reason)),
    };
    let prepared = prepare(&ctx, &args).await;
    let checked = prepared.is_ok();
    let decision = match reason {
        None => decision,
        Some(reason) if !checked => ask(&reason.rule, Answer_::NotAsked, None),
        Some(reason) => match approver.ask(&args, &reason).await {
            Approval::Approved(by) => ask(&reason.rule, Answer_::Approved, Some(by)),
            Approval::Refused(refusal, by) => {
                let refused = refuse(&ctx, &args, &reason, &refusal, by);
                return Decided::Answer(Answer::Done(refused));
            }
            Approval::Pending(pending) => {
                ctx.runtime.audit(
                    "shell_exec",
                    &args,
                    &ask(&reason.rule, Answer_::Pending, None),
                    Outcome::InputRequired {
                        input_required: true,
                    },
                    Instant::now(),
                );
                return Decided::Answer(Answer::Pending(pending));
            }
        },
    };
    match prepared {
        Ok(prepared) => Decided::Run(Box::new(Ready {
            ctx,
            args,
            prepared,
            decision,
        })),
        Err(error) => {
            let answer = finish::<ShellExec>(&ctx, &args, &decision, Instant::now(), Err(error));
            Decided::Answer(Answer::Done(answer))
        }
    }
}

fn ask(rule: &str, answer: Answer_, by: Option<AnsweredBy>) -> Decision {
    Decision::Ask {
        rule: rule.to_owned(),
        answer,
        by,
    }
}

/// Why a command the rules stopped did not run.
#[derive(Debug, Clone)]
pub(crate) enum Refusal {
    /// A `deny` rule (or `on_unknown = "deny"`).
    Denied,
    /// The user said no.
    Declined,
    /// The user dismissed the question without answering (or the call was cancelled while
    /// it was open).
    Cancelled,
    /// Nobody answered within the policy's `server.approval_timeout_secs`.
    Expired(Duration),
    /// The rule asks, but the client cannot be asked; says why.
    Unavailable(String),
}

impl Refusal {
    /// The audit log's `decision` for this refusal under `rule`.
    pub(crate) fn audit_decision(&self, rule: &str, by: Option<AnsweredBy>) -> Decision {
        let ask = |answer| Decision::Ask {
            rule: rule.to_owned(),
            answer,
            by,
        };
        match self {
            Refusal::Denied => Decision::Deny {
                rule: rule.to_owned(),
            },
            Refusal::Declined => ask(Answer_::Declined),
            Refusal::Cancelled => ask(Answer_::Cancelled),
            Refusal::Expired(_) => ask(Answer_::Expired),
            Refusal::Unavailable(_) => ask(Answer_::Unavailable),
        }
    }
}

/// The `denied` error for a refused command: which rule, why, and how to change the policy.
pub(crate) fn refusal_error(
    ctx: &Session,
    reason: &Reason,
    refusal: &Refusal,
    by: Option<&AnsweredBy>,
) -> ToolError {
    // The operator answers on the host; everything else is the client's user.
    let who = match by {
        Some(by) if by.channel == "operator" => "the operator",
        _ => "the user",
    };
    let origin = &ctx.runtime.policy.origin;
    let (rule_ref, change) = if reason.rule == ON_UNKNOWN {
        (
            "the policy's `commands.on_unknown` setting".to_owned(),
            format!("set `commands.on_unknown = \"allow\"` in policy {origin}"),
        )
    } else if reason.rule == ON_ANALYSIS_FAILURE {
        (
            "the policy's `commands.on_analysis_failure` setting".to_owned(),
            format!(
                "set `commands.on_analysis_failure = \"allow\"` in policy {origin}, or simplify \
                 the command so it can be analysed"
            ),
        )
    } else {
        (
            format!("the policy's command rule `{}`", reason.rule),
            format!(
                "change the decision of the `[[commands.rules]]` entry named \"{}\" in policy \
                 {origin}, or remove it",
                reason.rule
            ),
        )
    };
    let message = match refusal {
        Refusal::Denied => format!(
            "not run: refused by {rule_ref} (matched `{}`): {} This check is a courtesy layer in \
             front of the sandbox, not a bug; do not retry the same action in another form. If \
             it is really needed, ask the operator to {change}.",
            reason.command, reason.justification
        ),
        Refusal::Declined => format!(
            "not run: {who} declined it when asked ({rule_ref} asks before `{}`: {}). Do not \
             retry it; ask the user how to proceed.",
            reason.command, reason.justification
        ),
        Refusal::Cancelled => format!(
            "not run: the user dismissed the approval question without answering ({rule_ref} \
             asks before `{}`: {}). Nothing ran; ask the user whether they want it before \
             trying again.",
            reason.command, reason.justification
        ),
        Refusal::Expired(after) => format!(
            "not run: nobody answered the approval question within {}s ({rule_ref} asks before \
             `{}`: {}), so it was refused. Ask the user to watch for the question and retry, or \
             ask the operator to raise `server.approval_timeout_secs` in policy {origin}.",
            after.as_secs(),
            reason.command,
            reason.justification
        ),
        Refusal::Unavailable(why) => format!(
            "not run: {rule_ref} needs the user's approval for `{}` ({}), but {why}. To run such \
             commands without asking, {change}; or use an MCP client that supports elicitation, or \
             have the operator answer on the host (`cordon approvals`, with \"operator\" in \
             `server.approvals`).",
            reason.command, reason.justification
        ),
    };
    ToolError::new(ErrorKind::Denied, message)
}

/// The result of a call the command rules stopped: `denied`, nothing run, audited.
fn refuse(
    ctx: &SharedContext,
    args: &ShellExecArgs,
    reason: &Reason,
    refusal: &Refusal,
    by: Option<AnsweredBy>,
) -> ToolOutcome {
    let error = refusal_error(ctx, reason, refusal, by.as_ref());
    let decision = refusal.audit_decision(&reason.rule, by);
    finish::<ShellExec>(ctx, args, &decision, Instant::now(), Err(error))
}
