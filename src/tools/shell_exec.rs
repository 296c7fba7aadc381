//! `shell_exec`: one shell command, confined, with its output shaped for a model.
//!
//! Owns the argument contract, validation against the policy (timeout bound, cwd rooting,
//! env names, done once per call), the whole decision ([`call`]: the command rules' verdict
//! through `policy::decide`, the refusals it leads to, asking through an [`Approver`]),
//! progress ticks and the result. How the user is asked is the server's (it knows MCP);
//! running and killing the process is `exec`; truncation and spill are `shape`; what a
//! permission error means under the policy is `policy::explain`.

use super::{CallHooks, Done, SharedContext, Tool, finish};
use crate::audit::{Answer as Answer_, AnsweredBy, Decision, Outcome};
use crate::confine::EnforcementLevel;
use crate::exec::{ExecOutcome, ExecRequest, LimitHit, LiveStatus};
use crate::policy::commands::{
    Decision as RuleDecision, ON_ANALYSIS_FAILURE, ON_UNKNOWN, Reason, Verdict,
};
use crate::policy::explain;
use crate::policy::{Analysed, Request};
use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError, ToolOutcome, push_sections, shape_stream, shown_whole};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) mod background;

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellExecArgs {
    /// Command line, run as `/bin/sh -c COMMAND` inside the sandbox.
    #[schemars(length(min = 1))]
    pub command: String,
    /// Directory to run in, relative to the workspace root.
    #[serde(default = "dot")]
    pub cwd: String,
    /// Wall-clock limit in seconds; the whole process tree is killed when it is reached.
    /// Default and maximum come from the policy.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_secs: Option<u64>,
    /// Text written to the command's standard input (closed after it); default: no input.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Environment variables set for this command, over the sandbox's scrubbed environment.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Keep the command running after this call returns, as a job (dev servers, watchers,
    /// REPLs): the call answers after `wait_secs` with the output so far and `job`; read and
    /// drive it with the `job` tool. Confined and bounded like any call; it ends at the
    /// policy's `[jobs]` bounds or when this session ends.
    #[serde(default)]
    pub background: bool,
    /// Run under a terminal (for programs that need a tty: REPLs, prompts, `git add -p`).
    /// Its output is one stream (in `stdout`); colours are removed from the text and kept in
    /// the spill file.
    #[serde(default)]
    pub pty: bool,
    /// Terminal width with `pty` (default 120).
    #[serde(default)]
    #[schemars(range(min = 20, max = 1000))]
    pub cols: Option<u16>,
    /// Terminal height with `pty` (default 40).
    #[serde(default)]
    #[schemars(range(min = 5, max = 500))]
    pub rows: Option<u16>,
    /// With `background`: seconds to wait before answering (earlier if the job exits);
    /// default 1.
    #[serde(default)]
    #[schemars(range(min = 0, max = 30))]
    pub wait_secs: Option<u64>,
    /// With `background`: a regular expression; answer as soon as the output matches it
    /// (readiness, e.g. "Listening on|ready in"). Without it, the answer comes once the
    /// output has been quiet for a moment (~200 ms), or after `wait_secs`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 1000))]
    pub until: Option<String>,
}

/// Default terminal size of `pty`.
pub const DEFAULT_COLS: u16 = 120;
pub const DEFAULT_ROWS: u16 = 40;

fn dot() -> String {
    ".".into()
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub struct ShellExecOutput {
    /// The checkpoint that restores the workspace to before this call (`checkpoint` tool),
    /// or null when the call changed nothing.
    pub checkpoint: Option<String>,
    /// Exit status; null when the command was killed by a signal.
    pub exit_code: Option<i32>,
    /// Name of the signal that killed the command (e.g. "SIGKILL"), or null.
    pub signal: Option<String>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    /// True when stdout or stderr was cut to its head and tail.
    pub truncated: bool,
    /// Workspace-relative path of the complete output when it was cut (or was not valid
    /// UTF-8: the file keeps the exact bytes), else null.
    pub full_output: Option<String>,
    pub duration_ms: u64,
    /// The limit that stopped the command, with the evidence, or null.
    pub limit: Option<LimitHit>,
    /// Enforcement in force for this call.
    pub enforcement: EnforcementLevel,
    /// Under a proxy-mode policy: every connection the command made through cordon's egress
    /// proxy (host, port, allowed, bytes each way, duration), and each refusal in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::egress::NetworkReport>,
    /// With `background`: the job the command keeps running as (read it with the `job`
    /// tool), or null.
    pub job: Option<super::job::JobInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// A failed call's denials, each with the policy field that governs it and where its
    /// explanation comes from (`source`: "kernel" = the kernel's Landlock audit record for
    /// this call, "error_message" = derived from stderr); the ones the output names first.
    /// Left out when there are none, and for a successful call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub denials: Vec<explain::Denial>,
    /// Terminal escape sequences and control characters removed from `stdout` and `stderr`
    /// (the spill file and a job's log keep the exact bytes); 0 when the policy keeps them.
    pub control_chars_removed: u64,
    /// The git changes cordon refused to import (its own sentences about refs and paths),
    /// for the audit record; the result says them in `error` and stderr.
    #[serde(skip)]
    pub git_refusals: Vec<String>,
}

/// What the policy's command rules say about this call (see `policy::commands`). The command
/// line is analysed by the parser worker; when that fails (the worker crashed, hung or hit a
/// limit on this text) the policy's `commands.on_analysis_failure` decides.
pub async fn assess(ctx: &Session, args: &ShellExecArgs) -> Verdict {
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
pub trait Approver {
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
pub enum Overrule {
    /// The refusal stands.
    Refuse,
    /// A person allowed it (once, or for the session); it runs, audited as approved by them.
    Allow(AnsweredBy),
}

/// The user's answer (or why there is none yet), with who gave it where someone did.
pub enum Approval<P> {
    Approved(AnsweredBy),
    Refused(Refusal, Option<AnsweredBy>),
    /// Asked; the reply comes with a later request.
    Pending(P),
}

/// How a `shell_exec` call ends: answered, or waiting for the user.
pub enum Answer<P> {
    Done(ToolOutcome),
    Pending(P),
}

/// The whole `shell_exec` decision and run, in one place: [`decide`], then the run.
pub async fn call<A: Approver>(
    ctx: SharedContext,
    args: ShellExecArgs,
    approver: A,
    hooks: CallHooks,
) -> Answer<A::Pending> {
    match decide(ctx, args, approver).await {
        Decided::Answer(answer) => answer,
        Decided::Run(ready) => Answer::Done(ready.run(hooks).await),
    }
}

/// What [`decide`] came to: an answer now (refused, invalid, waiting for the user), or a
/// checked and admitted call whose run the server may start now or as an MCP task.
pub enum Decided<P> {
    Answer(Answer<P>),
    Run(Box<Ready>),
}

/// A call the command rules (and the user) admitted and whose arguments are checked: only
/// the run is left.
pub struct Ready {
    ctx: SharedContext,
    args: ShellExecArgs,
    prepared: Prepared,
    decision: Decision,
}

impl Ready {
    /// Runs the command (waiting for a slot first) and answers.
    pub async fn run(self: Box<Self>, hooks: CallHooks) -> ToolOutcome {
        let Ready {
            ctx,
            args,
            prepared,
            decision,
        } = *self;
        run_prepared(ctx, args, prepared, hooks, &decision).await
    }
}

/// The decision before the run: the command rules' verdict, the argument checks (once,
/// before anyone is asked: nobody should approve a call that would fail anyway), the user's
/// approval where a rule asks. Nothing runs here.
pub async fn decide<A: Approver>(
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

/// The output of a call that ran nothing: the error in an otherwise default output.
fn nothing_ran(ctx: &Session, error: ToolError) -> ShellExecOutput {
    ShellExecOutput {
        checkpoint: None,
        enforcement: ctx.runtime.enforcement_level(),
        error: Some(error),
        ..Default::default()
    }
}

fn ask(rule: &str, answer: Answer_, by: Option<AnsweredBy>) -> Decision {
    Decision::Ask {
        rule: rule.to_owned(),
        answer,
        by,
    }
}

/// The tool as the shared skeleton sees it.
pub struct ShellExec;

impl Tool for ShellExec {
    const NAME: &'static str = "shell_exec";
    type Args = ShellExecArgs;
    type Output = ShellExecOutput;

    fn failed(ctx: &Session, _args: &ShellExecArgs, error: ToolError) -> ShellExecOutput {
        nothing_ran(ctx, error)
    }

    /// The denials the kernel reported for this call: each is a refusal of its path or port.
    fn refusals(output: &ShellExecOutput) -> Vec<crate::breaker::Group> {
        output
            .denials
            .iter()
            .filter(|d| d.source == explain::DenialSource::Kernel)
            .map(|d| crate::breaker::Group::Kernel {
                field: d.policy_field.clone(),
                target: d
                    .path
                    .clone()
                    .or_else(|| d.port.map(|p| format!("port {p}")))
                    .unwrap_or_default(),
            })
            .collect()
    }

    fn set_checkpoint(output: &mut ShellExecOutput, id: Option<String>) {
        output.checkpoint = id;
    }

    fn audit(output: &ShellExecOutput, _is_error: bool) -> Outcome {
        Outcome::Shell {
            error: output.error.as_ref().map(|e| e.kind),
            exit_code: output.exit_code,
            limit: output.limit.as_ref().map(|l| l.kind),
            signal: output.signal.clone(),
            timed_out: output.timed_out,
            network: output.network.clone(),
            git_refused: output.git_refusals.clone(),
        }
    }
}

/// Why a command the rules stopped did not run.
#[derive(Debug, Clone)]
pub enum Refusal {
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
    pub fn audit_decision(&self, rule: &str, by: Option<AnsweredBy>) -> Decision {
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
pub fn refusal_error(
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

/// Runs the checked command. `decision` is what the command rules (and the user) decided, for
/// the audit log: `allow` or `ask:<rule>:approved`.
async fn run_prepared(
    ctx: SharedContext,
    args: ShellExecArgs,
    prepared: Prepared,
    hooks: CallHooks,
    decision: &Decision,
) -> ToolOutcome {
    let started = Instant::now();
    // A call cancelled while it waits for a slot (its client cancelled it, its MCP task was
    // cancelled, its session ended) never starts its command.
    let cancel = hooks.cancel.clone();
    let _slot = tokio::select! {
        biased;
        () = cancel.cancelled() => {
            let error = ToolError::new(
                ErrorKind::Internal,
                "the call was cancelled while it waited for a free slot \
                 (`server.max_concurrent_calls`); nothing ran",
            );
            return finish::<ShellExec>(&ctx, &args, decision, started, Err(error));
        }
        slot = ctx.runtime.slots.acquire() => slot,
    };
    let watch = super::Watch::begin(&ctx).await;
    // The slot bounds starting a background job; a running job is bounded by `[jobs]`.
    let result = if args.background {
        background::start_background(&ctx, &args, prepared.request).await
    } else {
        Ok(execute(&ctx, prepared, hooks).await)
    };
    let summary = crate::text::shortened(&args.command, 120).into_owned();
    let checkpoint = watch.end(ShellExec::NAME, summary).await;
    super::finish_with::<ShellExec>(&ctx, &args, decision, started, result, checkpoint)
}

/// Linux's MAX_ARG_STRLEN (32 pages): execve refuses any single argument or environment
/// string this long (terminating NUL included) with E2BIG.
const MAX_ARG_STRLEN: usize = 32 * 4096;

/// A validated request, ready to run.
struct Prepared {
    request: ExecRequest,
    live: Arc<LiveStatus>,
    /// Absolute working directory, to read relative paths in error messages.
    cwd: std::path::PathBuf,
}

async fn prepare(ctx: &SharedContext, args: &ShellExecArgs) -> Result<Prepared, ToolError> {
    let invalid = |m: String| ToolError::new(ErrorKind::InvalidArgument, m);
    if args.command.trim().is_empty() {
        return Err(invalid(
            "`command` is empty; pass the shell command line to run".into(),
        ));
    }
    if args.command.contains('\0') {
        return Err(invalid(
            "`command` contains a NUL byte, which no shell can receive; remove it".into(),
        ));
    }
    if args.command.len() >= MAX_ARG_STRLEN {
        return Err(invalid(format!(
            "`command` is {} bytes; the kernel refuses a single argument of {MAX_ARG_STRLEN} \
             bytes or more. Write the script to a file with write_file and run that file, or \
             pass the data through `stdin`",
            args.command.len()
        )));
    }
    if !args.pty && (args.cols.is_some() || args.rows.is_some()) {
        return Err(invalid(
            "`cols` and `rows` size a terminal: pass them with `pty: true`, or leave them out"
                .into(),
        ));
    }
    if !args.background && args.until.is_some() {
        return Err(invalid(
            "`until` applies to a background job (`background: true`); a call without it \
             answers when the command ends"
                .into(),
        ));
    }
    if let Some(pattern) = &args.until {
        super::job::compile_until(pattern)?;
    }
    if !args.background && args.wait_secs.is_some() {
        return Err(invalid(
            "`wait_secs` applies to a background job (`background: true`); a call without it \
             waits for the command to end, up to `timeout_secs`"
                .into(),
        ));
    }
    super::job::wait_secs(args.wait_secs, 0)?;
    for (name, value, range) in [("cols", args.cols, 20..=1000), ("rows", args.rows, 5..=500)] {
        if let Some(v) = value
            && !range.contains(&v)
        {
            return Err(invalid(format!(
                "`{name}` is {v}; pass {} to {}",
                range.start(),
                range.end()
            )));
        }
    }
    let limits = &ctx.runtime.policy.limits;
    let timeout =
        crate::policy::timeout_within(args.timeout_secs, limits.timeout, limits.max_timeout)
            .map_err(|e| invalid(e.for_argument("timeout_secs", "split the work")))?;
    let env = args.env.clone().unwrap_or_default();
    for (name, value) in &env {
        crate::exec::env::validate_override(name, value).map_err(invalid)?;
    }
    // Opening a directory the agent chose is a blocking call (path walk on a possibly slow
    // disk); the root itself, the usual cwd, is a descriptor duplicate and needs no hop off
    // the async thread.
    let workspace = &ctx.runtime.workspace;
    let cwd = workspace
        .resolve_arg(&args.cwd)
        .map_err(|e| ToolError::from(&e))?;
    let cwd_path = workspace.host_path(&cwd);
    let dir = if cwd.is_root() {
        workspace.root_dir()
    } else {
        ctx.runtime
            .blocking(move |rt| rt.workspace.open_dir(&cwd))
            .await
    }
    .map_err(|e| ToolError::from(&e))?;
    let live = Arc::new(LiveStatus::default());
    Ok(Prepared {
        request: ExecRequest {
            argv: vec!["/bin/sh".into(), "-c".into(), args.command.clone().into()],
            cwd: Some(std::os::fd::OwnedFd::from(dir.into_std_file())),
            env,
            stdin: args.stdin.clone().map(String::into_bytes),
            timeout,
            stdout: super::capture_spec(ctx, "shell", "stdout"),
            stderr: super::capture_spec(ctx, "shell", "stderr"),
            cancel: None,
            live: Some(Arc::clone(&live)),
            pty: args.pty.then(|| crate::confine::sandbox::wire::PtySize {
                cols: args.cols.unwrap_or(DEFAULT_COLS),
                rows: args.rows.unwrap_or(DEFAULT_ROWS),
            }),
        },
        live,
        cwd: cwd_path,
    })
}

async fn execute(ctx: &SharedContext, prepared: Prepared, hooks: CallHooks) -> Done<ShellExec> {
    let Prepared {
        mut request,
        live,
        cwd,
    } = prepared;
    request.cancel = Some(hooks.cancel.clone());
    let started = Instant::now();
    let ticker = hooks.progress.map(|report| {
        let live = Arc::clone(&live);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                report(started.elapsed(), live.last_line());
            }
        })
    });
    let outcome = ctx.runtime.executor.run(request).await;
    if let Some(t) = ticker {
        t.abort();
    }
    match outcome {
        Err(e) => {
            let error = ToolError::new(
                ErrorKind::from(&e),
                format!("could not start the command: {e}"),
            );
            Done::error(nothing_ran(ctx, error.clone()), &error)
        }
        Ok(outcome) => {
            let output = &ctx.runtime.policy.output;
            if shown_whole(&outcome.stdout, output) && shown_whole(&outcome.stderr, output) {
                return shape_outcome(ctx, outcome, &cwd);
            }
            // Shaping will write spill files: blocking work.
            let session = Arc::clone(ctx);
            ctx.runtime
                .blocking(move |_| shape_outcome(&session, outcome, &cwd))
                .await
        }
    }
}

fn shape_outcome(ctx: &Session, outcome: ExecOutcome, cwd: &std::path::Path) -> Done<ShellExec> {
    let enforcement = outcome.enforcement.level;
    let open = |stream: &str| {
        ctx.runtime
            .workspace
            .create_spill_std(&format!("shell-{stream}"))
    };
    let stdout = shape_stream(
        &outcome.stdout,
        &ctx.runtime.policy.output,
        "stdout",
        Some(&open),
    );
    let mut stderr = shape_stream(
        &outcome.stderr,
        &ctx.runtime.policy.output,
        "stderr",
        Some(&open),
    );
    let refused = outcome.network.iter().flat_map(|n| &n.refused);
    let leftovers = outcome.leftovers_notice();
    for notice in outcome.notices.iter().chain(refused).chain(&leftovers) {
        if !stderr.text.is_empty() && !stderr.text.ends_with('\n') {
            stderr.text.push('\n');
        }
        stderr.text.push_str(&format!("[cordon] {notice}\n"));
    }
    let scene = explain::Scene {
        policy: &ctx.runtime.policy,
        workspace: ctx.runtime.workspace.root(),
        cwd,
        protected_for_commands: ctx.runtime.executor.confinement().protects_paths(),
    };
    let denials = call_denials(&outcome, &scene);
    let error = outcome_error(&outcome, &scene, &denials);
    let mut text = String::new();
    if let Some(e) = &error {
        text.push_str(&e.text());
        text.push('\n');
    } else {
        text.push_str(&format!("exit 0 in {} ms\n", outcome.duration.as_millis()));
    }
    push_sections(
        &mut text,
        &[("stdout", &stdout.text), ("stderr", &stderr.text)],
    );
    if outcome.output_cut_short {
        text.push_str(
            "[a background process that left the process group still holds the output; \
             reading stopped, so later output is missing (no cgroup here to kill it)]\n",
        );
    }
    if !outcome.enforcement.level.is_full() {
        text.push_str(&format!(
            "[enforcement: {}]\n",
            outcome.enforcement.summary()
        ));
    }
    let controls = stdout.controls_removed + stderr.controls_removed;
    text.extend(crate::shape::controls_note(controls));
    let output = ShellExecOutput {
        checkpoint: None,
        exit_code: outcome.exit_code,
        signal: outcome.signal_name(),
        timed_out: outcome.timed_out,
        truncated: stdout.truncated || stderr.truncated,
        full_output: stdout.full_output.clone().or(stderr.full_output.clone()),
        stdout: stdout.text,
        stderr: stderr.text,
        duration_ms: outcome.duration.as_millis() as u64,
        limit: outcome.limit.clone(),
        enforcement,
        network: outcome.network.clone(),
        job: None,
        error,
        denials,
        control_chars_removed: controls as u64,
        git_refusals: if outcome.git_refused {
            outcome.notices.clone()
        } else {
            Vec::new()
        },
    };
    let is_error = output.error.is_some();
    Done {
        output,
        text,
        is_error,
        images: Vec::new(),
    }
}

/// A failed call's denials: the kernel's record of them where the server reads it, else what
/// its stderr suggests. A successful call lists none: programs probe paths they can do without
/// (every `bash` tries `/dev/tty`), and the call did what it was asked.
fn call_denials(o: &ExecOutcome, scene: &explain::Scene<'_>) -> Vec<explain::Denial> {
    if o.success() {
        return Vec::new();
    }
    if let Some(kernel) = &o.kernel_denials
        && !kernel.denials.is_empty()
    {
        // What the output names first: the likely cause leads (the sort is stable).
        let output = call_output(o);
        let mut ordered = kernel.denials.clone();
        ordered.sort_by_key(|d| !mentioned(d.path.as_deref(), d.port, &output));
        return explain::explain_kernel(scene, &ordered);
    }
    let mut denials = explain::message_denials(scene, &stderr_text(o));
    denials.truncate(explain::MAX_DENIALS_SHOWN);
    denials
}

/// Both streams as far as they were kept (head and tail), for finding what they name.
fn call_output(o: &ExecOutcome) -> String {
    let mut text = stderr_text(o);
    for part in [&o.stdout.head, &o.stdout.tail] {
        text.push('\n');
        text.push_str(&String::from_utf8_lossy(part));
    }
    text
}

/// Whether `output` names the path (or a file in the directory) or the port of a denial.
fn mentioned(path: Option<&str>, port: Option<u16>, output: &str) -> bool {
    if let Some(path) = path
        && path.len() > 1
        && output.contains(path)
    {
        return true;
    }
    port.is_some_and(|p| output.contains(&format!(":{p}")) || output.contains(&format!("port {p}")))
}

fn stderr_text(o: &ExecOutcome) -> String {
    let mut stderr = String::from_utf8_lossy(&o.stderr.head).into_owned();
    stderr.push('\n');
    stderr.push_str(&String::from_utf8_lossy(&o.stderr.tail));
    stderr
}

fn outcome_error(
    o: &ExecOutcome,
    scene: &explain::Scene<'_>,
    denials: &[explain::Denial],
) -> Option<ToolError> {
    if let Some(error) = stopped_by_cordon(o) {
        return Some(error);
    }
    if o.success() {
        return None;
    }
    let mut message = o.reason().unwrap_or_else(|| "the command failed".into());
    // A refused connection is the likeliest cause of a network client's failure: say it
    // first, in the proxy's words (they name the policy line to change).
    if let Some(refused) = o.network.as_ref().and_then(|n| n.refused.first()) {
        message.push_str(&format!(
            "; the egress proxy refused a connection: {refused}"
        ));
        return Some(ToolError {
            kind: ErrorKind::ExitStatus,
            message,
            retriable: false,
        });
    }
    let stderr = stderr_text(o);
    let kernel: Vec<&explain::Denial> = denials
        .iter()
        .filter(|d| d.source == explain::DenialSource::Kernel)
        .collect();
    if kernel.is_empty() {
        explain_without_kernel_denials(&mut message, o, scene, &stderr);
    } else {
        let shown = explain_kernel_denials(&mut message, o, scene, &kernel, &stderr);
        if let Some(k) = &o.kernel_denials {
            note_unlisted_denials(&mut message, k, shown);
        }
    }
    if let Some(tracing) = explain::explain_tracing(scene.policy, &stderr) {
        message.push_str("; ");
        message.push_str(&tracing);
    }
    Some(ToolError {
        kind: ErrorKind::ExitStatus,
        message,
        retriable: false,
    })
}

/// The command did not end on its own terms: cordon stopped it (timeout, a limit, the
/// call's cancellation) or refused the git change it left.
fn stopped_by_cordon(o: &ExecOutcome) -> Option<ToolError> {
    if o.timed_out {
        return Some(ToolError::new(
            ErrorKind::Timeout,
            format!(
                "the command ran longer than its timeout and was killed with everything it started \
                 ({:.1}s); pass a larger timeout_secs, or run long jobs in smaller steps",
                o.duration.as_secs_f64()
            ),
        ));
    }
    if let Some(hit) = &o.limit {
        return Some(ToolError {
            kind: ErrorKind::ResourceLimit,
            message: format!(
                "the command was stopped by the sandbox's {} ({}); reduce what it uses, or ask \
                 the operator to raise the policy's limit",
                hit.kind.describe(),
                hit.evidence
            ),
            retriable: false,
        });
    }
    if o.cancelled {
        return Some(ToolError::new(
            ErrorKind::Internal,
            "the call was cancelled; the command and everything it started were killed",
        ));
    }
    if o.git_refused {
        // What git would have read outside the sandbox was moved away: the command's own
        // exit status says nothing about whether its git change took effect.
        crate::breaker::report(ShellExec::NAME, crate::breaker::Group::Git);
        let status = match o.reason() {
            Some(reason) => format!("the command {reason}"),
            None => "the command exited 0".to_owned(),
        };
        return Some(ToolError::new(
            ErrorKind::Denied,
            format!(
                "{status}, but cordon refused a git change it left: {} (details in stderr, \
                 marked [cordon]). Do not retry it in another form; if the change is needed, \
                 ask the operator to make it on the host, outside cordon",
                o.notices
                    .first()
                    .map(String::as_str)
                    .unwrap_or("see stderr")
            ),
        ));
    }
    None
}

/// Adds the kernel's Landlock denials of this call to a failure's message: those the output
/// names (the likely cause), else the stderr's explanation, else the first few. Returns how
/// many denials the message shows.
fn explain_kernel_denials(
    message: &mut String,
    o: &ExecOutcome,
    scene: &explain::Scene<'_>,
    kernel: &[&explain::Denial],
    stderr: &str,
) -> usize {
    // A denial the output names is the likely cause; others (a program probing
    // `/dev/tty` or a config file it can do without) may have nothing to do with it.
    let output = call_output(o);
    let named: Vec<&str> = kernel
        .iter()
        .filter(|d| mentioned(d.path.as_deref(), d.port, &output))
        .map(|d| d.explanation.as_str())
        .take(3)
        .collect();
    if !named.is_empty() {
        message.push_str(&format!(
            "; [from the kernel's Landlock audit record for this call] {}",
            named.join(" ")
        ));
        named.len()
    } else if let Some(explanation) = explain::explain_stderr(scene, stderr) {
        message.push_str("; ");
        message.push_str(&explanation);
        message.push_str(
            " (The kernel's audit records of this call show other Landlock denials, which \
             the output does not mention: see `denials`.)",
        );
        0
    } else {
        let first: Vec<&str> = kernel
            .iter()
            .map(|d| d.explanation.as_str())
            .take(3)
            .collect();
        message.push_str(&format!(
            "; [from the kernel's Landlock audit record for this call; the output names none \
             of these, so they may not be why it failed] {}",
            first.join(" ")
        ));
        if stderr.contains("Permission denied") || stderr.contains("Operation not permitted") {
            message.push_str(
                " stderr's permission error may also be seccomp refusing a syscall or \
                 socket.",
            );
        }
        first.len()
    }
}

/// How many of the call's kernel denials the message does not show: in `denials`, or not
/// listed at all, and whether the kernel's records may be incomplete.
fn note_unlisted_denials(
    message: &mut String,
    k: &crate::confine::audit::KernelDenials,
    shown: usize,
) {
    let listed = k.denials.len().min(explain::MAX_DENIALS_SHOWN);
    let in_field = listed.saturating_sub(shown);
    let not_listed = (k.denials.len() - listed) as u64 + k.not_kept;
    if in_field > 0 {
        message.push_str(&format!(" ({in_field} more in the result's `denials`)"));
    }
    if not_listed > 0 {
        message.push_str(&format!(
            " ({not_listed} more denied accesses of this call are not listed)"
        ));
    }
    if !k.complete {
        message.push_str(" (the kernel's records of this call may be incomplete)");
    }
}

/// Explains a failure the kernel recorded no Landlock denial for: the stderr's explanation,
/// or whose the permission error it reports may be.
fn explain_without_kernel_denials(
    message: &mut String,
    o: &ExecOutcome,
    scene: &explain::Scene<'_>,
    stderr: &str,
) {
    let kernel_saw_none = o.kernel_denials.as_ref().is_some_and(|k| k.complete);
    if let Some(explanation) = explain::explain_stderr(scene, stderr) {
        message.push_str("; ");
        message.push_str(&explanation);
        if kernel_saw_none {
            message.push_str(
                " (The kernel's audit log has no denial by the sandbox's Landlock rules for this \
                 call, so the error did not come from its file or port rules.)",
            );
        }
    } else if kernel_saw_none
        && (stderr.contains("Permission denied") || stderr.contains("Operation not permitted"))
    {
        message.push_str(
            "; stderr reports a permission error, and the kernel's audit log has no denial by \
             the sandbox's Landlock rules for this call: it came from elsewhere (seccomp \
             refusing a syscall or socket, a read-only mount, or the file's own permissions)",
        );
    } else if stderr.contains("Permission denied") || stderr.contains("Operation not permitted") {
        message.push_str(
            "; stderr reports a permission error, which may be the sandbox refusing a path, \
             socket or syscall outside the policy",
        );
    }
}
