//! The tools of SPEC.md, one file each: argument structs (their schema is the contract),
//! output structs, and the function that turns arguments into requests for the stages to the
//! right (policy, workspace, exec, interpreter, lint).
//!
//! Every tool ends through one skeleton, [`finish`]: a call that failed before it produced an
//! output gets the tool's default output carrying the error ([`Tool::failed`]), the call is
//! audited ([`Tool::audit`]), the answer is shaped ([`ToolOutcome`]) and bounded
//! ([`MAX_RESULT_BYTES`], [`Tool::oversized`]). A new tool is a file with its arguments, its
//! output, its work and a `Tool` impl.
//!
//! Tools know nothing of the wire: `server` registers them with rmcp and passes the client's
//! [`Session`] (and through it the shared `Runtime`); the answer is `shape`'s
//! [`ToolOutcome`], which only `server` unwraps.

pub(crate) mod checkpoint;
pub(crate) mod code_interpreter;
pub(crate) mod edit_file;
pub(crate) mod job;
pub(crate) mod job_answer;
pub(crate) mod job_input;
pub(crate) mod read_file;
pub(crate) mod shell_exec;
pub(crate) mod write_file;

use crate::audit::{Decision, Outcome};
use crate::exec::CaptureSpec;
use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError, ToolOutcome};
use crate::workspace::{RelPath, WriteReport};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What a tool call may use: the client's session and, through it, the shared runtime.
pub type SharedContext = Arc<Session>;

/// What the server hands a call besides its arguments.
pub(crate) struct CallHooks {
    /// Cancelled when the client cancels the call, disconnects, or the server shuts down.
    pub cancel: CancellationToken,
    /// Called about once a second while a command runs: (elapsed, latest output line).
    pub progress: Option<Box<dyn Fn(Duration, String) + Send + Sync>>,
}

impl CallHooks {}

/// One tool, as the shared skeleton [`finish`] sees it.
pub(crate) trait Tool {
    /// The tool's name, as registered and audited.
    const NAME: &'static str;
    type Args: Serialize;
    type Output: Serialize;

    /// The output of a call that failed before it produced one: the defaults with `error`.
    fn failed(ctx: &Session, args: &Self::Args, error: ToolError) -> Self::Output;

    /// What the audit log keeps of a call's output.
    fn audit(output: &Self::Output, is_error: bool) -> Outcome;

    /// The answer that replaces one of `size` bytes, more than [`MAX_RESULT_BYTES`]. None
    /// keeps it: the tool bounds every part itself.
    fn oversized(_args: &Self::Args, _output: Self::Output, _size: usize) -> Option<Done<Self>> {
        None
    }

    /// What a finished call's output says was refused beyond its decision and error kind
    /// (kernel-reported denials), for the circuit breaker (`crate::breaker`).
    fn refusals(_output: &Self::Output) -> Vec<crate::breaker::Group> {
        Vec::new()
    }

    /// For a tool whose calls may change the workspace: what the checkpoint list says the
    /// call was (a command, a path), recorded around the call by [`run`]. None: the tool
    /// changes nothing (or records by itself).
    fn changes(_args: &Self::Args) -> Option<String> {
        None
    }

    /// Puts the checkpoint that undoes the call into its output.
    fn set_checkpoint(_output: &mut Self::Output, _id: Option<String>) {}
}

/// What a call produced: its output, the text block for the model, whether it failed, and any
/// figures (base64 PNG).
pub(crate) struct Done<T: Tool + ?Sized> {
    pub output: T::Output,
    pub text: String,
    pub is_error: bool,
    pub images: Vec<String>,
}

impl<T: Tool + ?Sized> Done<T> {
    pub(crate) fn ok(output: T::Output, text: String) -> Self {
        Self {
            output,
            text,
            is_error: false,
            images: Vec::new(),
        }
    }

    /// A failed call's output, with the error's own text block.
    pub(crate) fn error(output: T::Output, error: &ToolError) -> Self {
        Self {
            output,
            text: error.text(),
            is_error: true,
            images: Vec::new(),
        }
    }
}

/// The policy's answer to a file or interpreter call (`policy::decide`), as the audit log's
/// decision, or the `denied` error. These tools cannot ask the user, so a rule that asks
/// refuses here.
pub(crate) fn admitted(
    ctx: &Session,
    request: &crate::policy::Request<'_>,
) -> Result<Decision, (Decision, ToolError)> {
    use crate::policy::commands::Decision as Rule;
    let verdict = ctx.runtime.policy.decide(request);
    match (verdict.decision, verdict.reason) {
        (Rule::Allow, _) | (_, None) => Ok(Decision::Allow),
        (_, Some(reason)) => Err((
            Decision::Deny {
                rule: reason.rule.clone(),
            },
            ToolError::new(
                ErrorKind::Denied,
                format!(
                    "refused by the policy's rule `{}` ({}); ask the operator to change \
                     policy {}",
                    reason.rule, reason.justification, ctx.runtime.policy.origin
                ),
            ),
        )),
    }
}

/// A file or interpreter call from start to end: the policy's answer to `request` first
/// ([`admitted`]), then `work` (not started when the policy refuses), then [`finish`].
pub(crate) async fn run<T: Tool>(
    ctx: &Session,
    args: &T::Args,
    request: crate::policy::Request<'_>,
    work: impl std::future::Future<Output = Result<Done<T>, ToolError>>,
) -> ToolOutcome {
    let started = Instant::now();
    let (decision, result, checkpoint) = match admitted(ctx, &request) {
        Ok(decision) => match T::changes(args) {
            Some(summary) => {
                let watch = Watch::begin(ctx).await;
                let result = work.await;
                let checkpoint = watch.end(T::NAME, summary).await;
                (decision, result, checkpoint)
            }
            None => (decision, work.await, None),
        },
        Err((decision, error)) => (decision, Err(error), None),
    };
    finish_with::<T>(ctx, args, &decision, started, result, checkpoint)
}

/// A `job` read of job `id`: records what changed since the previous record (what the job
/// did, unless someone else did too) and returns the checkpoint that restores the workspace
/// to before it. A listing without an id records nothing.
pub(crate) async fn record_job(ctx: &Session, id: Option<&str>) -> Option<String> {
    let (checkpoints, id) = (ctx.runtime.checkpoints.clone()?, id?);
    let info = crate::checkpoint::CallInfo {
        call: Some(call_label()),
        tool: "job".to_owned(),
        summary: format!("job {}", echo_arg(id)),
    };
    match tokio::task::spawn_blocking(move || checkpoints.record(&info)).await {
        Ok(Ok(id)) => id,
        Ok(Err(e)) => recording_failed("what a job changed", e),
        Err(e) => recording_failed("what a job changed", e),
    }
}

/// A failed recording: in the server's log, and said to the calling session (a `checkpoint`
/// event), since its result's null `checkpoint` would otherwise read as "nothing changed".
fn recording_failed<T>(what: &str, error: impl std::fmt::Display) -> Option<T> {
    tracing::warn!("recording {what} failed: {error}");
    crate::events::emit_for_call(
        crate::events::Level::Warning,
        "checkpoint",
        serde_json::json!({
            "message": format!(
                "cordon could not record {what} ({error}): this call's result names no \
                 checkpoint, and what it changed cannot be undone with the checkpoint tool"
            )
        }),
    );
    None
}

/// A label for one changing call in the checkpoint list: this server's process id and the
/// call's number among the changing calls it served (the audit record of the call names the
/// checkpoint, which ties the two together).
pub(crate) fn call_label() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(1);
    format!(
        "{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    )
}

/// One changing call, watched for the checkpoint that undoes it (`crate::checkpoint`): what
/// changed before it is recorded as someone else's when it starts, and what changed during it
/// as its own when it ends. Recording failures are logged; the call's result then names no
/// checkpoint.
pub(crate) struct Watch(Option<(Arc<crate::checkpoint::Checkpoints>, u64)>);

impl Watch {
    /// Records what changed since the previous record and notes the state the call starts at.
    pub(crate) async fn begin(ctx: &Session) -> Self {
        let Some(checkpoints) = ctx.runtime.checkpoints.clone() else {
            return Self(None);
        };
        let store = Arc::clone(&checkpoints);
        match tokio::task::spawn_blocking(move || store.begin()).await {
            Ok(Ok(start)) => Self(Some((checkpoints, start))),
            Ok(Err(e)) => Self(recording_failed("a checkpoint before this call", e)),
            Err(e) => Self(recording_failed("a checkpoint before this call", e)),
        }
    }

    /// Records what the call changed; the checkpoint that restores the workspace to before
    /// it, or None when nothing changed.
    pub(crate) async fn end(self, tool: &str, summary: String) -> Option<String> {
        let (checkpoints, start) = self.0?;
        let info = crate::checkpoint::CallInfo {
            call: Some(call_label()),
            tool: tool.to_owned(),
            summary,
        };
        match tokio::task::spawn_blocking(move || checkpoints.end(start, &info)).await {
            Ok(Ok(id)) => id,
            Ok(Err(e)) => recording_failed("the checkpoint of this call", e),
            Err(e) => recording_failed("the checkpoint of this call", e),
        }
    }
}

/// Turns a file argument into a workspace-relative path (a lexical check, no file-system
/// call) and waits for that file's lock, held by the caller until it has written and linted.
pub(crate) async fn resolve_and_lock(
    ctx: &Session,
    path: &str,
) -> Result<(RelPath, tokio::sync::OwnedMutexGuard<()>), ToolError> {
    let rel = ctx
        .runtime
        .workspace
        .resolve_arg(path)
        .map_err(|e| ToolError::from(&e))?;
    let guard = ctx.runtime.file_locks.lock(rel.as_str()).await;
    Ok((rel, guard))
}

/// The set-id bits of the old file a write did not keep, by name.
pub(crate) fn dropped_bits(report: &WriteReport) -> Vec<String> {
    report
        .dropped_bits
        .iter()
        .map(|b| (*b).to_owned())
        .collect()
}

/// The lint part of an answer that was too large: the report left out, and how many
/// diagnostics that leaves unsaid.
pub(crate) fn lint_left_out(
    lint: &crate::lint::LintReport,
    omitted: u64,
) -> (crate::lint::LintReport, u64) {
    (
        crate::lint::LintReport::skipped("left out: the result was too large"),
        lint.diagnostics.len() as u64 + omitted,
    )
}

/// The answer to a call refused before its tool could start (the server could not set up the
/// client's session): the tool's default output with `error`, audited like any call.
pub(crate) fn failed<T: Tool>(ctx: &Session, args: &T::Args, error: ToolError) -> ToolOutcome {
    finish::<T>(ctx, args, &Decision::Allow, Instant::now(), Err(error))
}

/// The end every call goes through: the default output for an early failure, the audit
/// record, the shaped answer, and its bound.
pub(crate) fn finish<T: Tool>(
    ctx: &Session,
    args: &T::Args,
    decision: &Decision,
    started: Instant,
    result: Result<Done<T>, ToolError>,
) -> ToolOutcome {
    finish_with::<T>(ctx, args, decision, started, result, None)
}

/// [`finish`] of a call that changed the workspace: its output and audit record name
/// `checkpoint`, the id that undoes it.
pub(crate) fn finish_with<T: Tool>(
    ctx: &Session,
    args: &T::Args,
    decision: &Decision,
    started: Instant,
    result: Result<Done<T>, ToolError>,
    checkpoint: Option<String>,
) -> ToolOutcome {
    let mut done = result.unwrap_or_else(|error| {
        let text = error.text();
        Done {
            output: T::failed(ctx, args, error),
            text,
            is_error: true,
            images: Vec::new(),
        }
    });
    T::set_checkpoint(&mut done.output, checkpoint.clone());
    let audited = T::audit(&done.output, done.is_error);
    report_refusals::<T>(decision, &done, &audited);
    announce_limit(T::NAME, &audited);
    ctx.runtime.audit_call(
        T::NAME,
        args,
        decision,
        audited,
        started,
        checkpoint.clone(),
    );
    let refused = matches!(
        decision,
        Decision::Deny { .. }
            | Decision::Ask {
                answer: crate::audit::Answer::Declined,
                ..
            }
    );
    if refused {
        crate::metrics::denials(crate::metrics::Layer::Rule, 1);
    }
    crate::metrics::call_finished(
        T::NAME,
        match (refused, done.is_error) {
            (true, _) => crate::metrics::CallOutcome::Denied,
            (false, true) => crate::metrics::CallOutcome::Error,
            (false, false) => crate::metrics::CallOutcome::Ok,
        },
        started.elapsed(),
    );
    let outcome = done.images.into_iter().fold(
        ToolOutcome::new(&done.output, done.text, done.is_error),
        |o, png| o.with_png(png),
    );
    let size = outcome.wire_size();
    if size <= MAX_RESULT_BYTES {
        return outcome;
    }
    match T::oversized(args, done.output, size) {
        Some(mut smaller) => {
            T::set_checkpoint(&mut smaller.output, checkpoint);
            ToolOutcome::new(&smaller.output, smaller.text, smaller.is_error)
        }
        None => outcome,
    }
}

/// What this call refused, by group, for the session's circuit breaker (`crate::breaker`):
/// the command rule that denied it (or asked nobody could answer), refused connections, the
/// kernel's denials, and for an error nothing more specific explained, a path escape or a
/// plain `denied` of this tool. A call that refused nothing and did not fail succeeded.
fn report_refusals<T: Tool>(decision: &Decision, done: &Done<T>, outcome: &Outcome) {
    use crate::audit::Answer;
    use crate::breaker::{Group, report};
    crate::breaker::claim(T::NAME);
    match decision {
        Decision::Deny { rule }
        | Decision::Ask {
            rule,
            answer: Answer::Unavailable | Answer::Expired,
            ..
        } => report(T::NAME, Group::Rule(rule.clone())),
        _ => {}
    }
    let network = match outcome {
        Outcome::Shell { network, .. } | Outcome::Interpreter { network, .. } => network.as_ref(),
        _ => None,
    };
    for connection in network.map_or(&[][..], |n| &n.connections[..]) {
        if !connection.allowed {
            report(T::NAME, Group::Host(connection.host.clone()));
        }
    }
    for group in T::refusals(&done.output) {
        report(T::NAME, group);
    }
    if !done.is_error {
        if !crate::breaker::reported() {
            crate::breaker::succeeded(T::NAME);
        }
        return;
    }
    if crate::breaker::reported() {
        return;
    }
    match outcome_error(outcome) {
        Some(ErrorKind::PathEscape) => report(T::NAME, Group::PathEscape),
        Some(ErrorKind::Denied) => report(T::NAME, Group::Denied(T::NAME)),
        _ => {}
    }
}

/// The error kind an audited outcome carries.
fn outcome_error(outcome: &Outcome) -> Option<ErrorKind> {
    match outcome {
        Outcome::Shell { error, .. }
        | Outcome::Write { error, .. }
        | Outcome::Edit { error, .. }
        | Outcome::Read { error, .. }
        | Outcome::Interpreter { error, .. } => *error,
        Outcome::InputRequired { .. } | Outcome::Other(_) => None,
    }
}

/// A limit that stopped the call, as a `warning` event for the calling session: the tool and
/// the limit's kind only (the command and its output stay in the result).
fn announce_limit(tool: &'static str, outcome: &crate::audit::Outcome) {
    let limit = match outcome {
        crate::audit::Outcome::Shell { limit, .. }
        | crate::audit::Outcome::Interpreter { limit, .. } => *limit,
        _ => None,
    };
    if let Some(limit) = limit {
        let kind = serde_json::to_value(limit).unwrap_or_default();
        crate::events::emit_for_call(
            crate::events::Level::Warning,
            "limit",
            serde_json::json!({
                "tool": tool,
                "limit": kind,
                "message": format!("a {tool} call was stopped by its {} limit", kind.as_str().unwrap_or("?")),
            }),
        );
    }
}

/// How a tool captures one output stream: the policy's memory cap, then a spill file named
/// `<prefix>-<stream>` in `.cordon/outputs/`.
pub(crate) fn capture_spec(
    ctx: &SharedContext,
    prefix: &'static str,
    stream: &'static str,
) -> CaptureSpec {
    let runtime = Arc::clone(&ctx.runtime);
    CaptureSpec {
        memory_cap: runtime.policy.output.memory_cap_bytes,
        spill: Some(Box::new(move || {
            runtime
                .workspace
                .create_spill_std(&format!("{prefix}-{stream}"))
        })),
        tee: None,
    }
}

/// An argument repeated back in an error result, cut so a huge bad argument is not sent back
/// to the model whole.
pub(crate) fn echo_arg(arg: &str) -> String {
    crate::text::shortened(arg, 200).into_owned()
}

/// No tool result may take more than this on the wire (JSON-RPC framing included), whatever
/// the file or the linters produced: hosts cut or reject far smaller answers, and building a
/// bigger one costs the server memory on behalf of a call.
pub(crate) const MAX_RESULT_BYTES: usize = 1024 * 1024;

/// How much of a result's budget the lint diagnostics may take; the rest is for the diff or
/// content, the text block and the framing.
const LINT_BUDGET_BYTES: usize = 256 * 1024;

/// One diagnostic message is cut to this many characters in a result.
const MAX_DIAGNOSTIC_CHARS: usize = 1000;

/// Keeps a lint report within [`LINT_BUDGET_BYTES`] when serialized: long messages are cut and
/// diagnostics past the budget dropped (they are sorted most relevant first). Returns how many
/// were dropped, for the caller to say.
pub(crate) fn fit_lint(lint: &mut crate::lint::LintReport) -> usize {
    let mut used = 0usize;
    let mut kept = 0usize;
    for d in &mut lint.diagnostics {
        if let std::borrow::Cow::Owned(cut) =
            crate::text::ellipsized(&d.message, MAX_DIAGNOSTIC_CHARS)
        {
            d.message = cut;
        }
        let size = serde_json::to_vec(&*d).map_or(usize::MAX, |v| v.len());
        if used.saturating_add(size) > LINT_BUDGET_BYTES {
            break;
        }
        used += size;
        kept += 1;
    }
    let dropped = lint.diagnostics.len() - kept;
    lint.diagnostics.truncate(kept);
    dropped
}

/// The error for a result that would still exceed [`MAX_RESULT_BYTES`]; `what_happened` says
/// what the call did (a write may already have landed).
pub(crate) fn oversized_error(size: usize, what_happened: &str) -> ToolError {
    ToolError::new(
        ErrorKind::ResourceLimit,
        format!(
            "the result of this call would be {size} bytes, more than the {MAX_RESULT_BYTES} a \
             result may take; {what_happened}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::LintReport;
    use crate::lint::diagnostic::{Diagnostic, Severity};

    #[test]
    fn lint_reports_are_cut_to_their_budget() {
        let diags: Vec<Diagnostic> = (0..20_000)
            .map(|i| Diagnostic::at(i, 1, Severity::Warning, None, "m".repeat(5000), "x"))
            .collect();
        let mut lint = LintReport::from_diagnostics(vec!["x".into()], diags);
        let dropped = fit_lint(&mut lint);
        let size = serde_json::to_vec(&lint).unwrap().len();
        assert!(size <= LINT_BUDGET_BYTES + 1024, "{size}");
        assert_eq!(dropped + lint.diagnostics.len(), 20_000);
        assert!(dropped > 0);
        assert!(
            lint.diagnostics
                .iter()
                .all(|d| d.message.chars().count() <= MAX_DIAGNOSTIC_CHARS + 1)
        );
        // A small report is left alone.
        let mut small = LintReport::from_diagnostics(
            vec!["x".into()],
            vec![Diagnostic::at(1, 1, Severity::Error, None, "short", "x")],
        );
        assert_eq!(fit_lint(&mut small), 0);
        assert_eq!(small.diagnostics[0].message, "short");
    }
}
