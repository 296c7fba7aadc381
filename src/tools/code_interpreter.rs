//! `code_interpreter`: Python cells in a persistent, confined session, shown like a notebook.
//!
//! Owns the argument contract (session name, timeout bound), turning a cell's outcome into the
//! SPEC result (stdout/stderr/result shaped and spilled like `shell_exec`, figures as image
//! content) and the error mapping. Sessions, workers and the protocol are `interpreter`'s.
//!
//! One `error` object serves both of SPEC's uses of the name: when the call is an `isError`
//! result, `error` carries SPEC's `{kind, message, retriable}` *and* the exception's
//! `{type, message, traceback}`. For a Python exception `type` is the exception class
//! (`ZeroDivisionError`, `numpy.linalg.LinAlgError`) and `kind` is `exception`; for failures
//! that are not Python exceptions `type` names cordon's own category (`cordon.Timeout`,
//! `cordon.ResourceLimit`, `cordon.InterpreterExited`, `cordon.InvalidArgument`,
//! `cordon.Unavailable`) so it is never mistaken for a Python class. A cell whose timeout was
//! honoured by a KeyboardInterrupt reports `type` `KeyboardInterrupt` with kind `timeout`.

use super::{Done, SharedContext, Tool};
use crate::audit::Outcome;
use crate::confine::EnforcementLevel;
use crate::exec::LimitHit;
use crate::interpreter::{CellOutcome, CellRequest, InterpreterError};
use crate::policy::Request;
use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError, ToolOutcome, push_sections, shape_stream};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const MAX_SESSION_NAME: usize = 64;

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeInterpreterArgs {
    /// Python source of the cell. Its last statement, if an expression, is returned as
    /// `result` (its repr), like a notebook; end the cell with `;` to suppress that.
    pub code: String,
    /// Session name: cells of one session share variables, imports and functions.
    #[serde(default = "default_session")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    pub session: String,
    /// Start the session from a fresh interpreter before running `code`.
    #[serde(default)]
    pub reset: bool,
    /// Wall-clock limit of this cell in seconds; the cell is interrupted when it is reached.
    /// Default and maximum come from the policy.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_secs: Option<u64>,
}

fn default_session() -> String {
    "default".into()
}

/// The Python exception of the cell, which is also SPEC's `{kind, message, retriable}` error
/// when the call failed (see the module docs).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct CellError {
    /// Exception class, or `cordon.*` for failures that are not Python exceptions.
    #[serde(rename = "type")]
    pub type_name: String,
    pub message: String,
    /// Traceback trimmed to the cell's own frames; null when there is none.
    pub traceback: Option<String>,
    pub kind: ErrorKind,
    pub retriable: bool,
}

impl CellError {
    fn cordon(type_name: &str, error: ToolError) -> Self {
        Self {
            type_name: format!("cordon.{type_name}"),
            message: error.message,
            traceback: None,
            kind: error.kind,
            retriable: error.retriable,
        }
    }

    fn as_tool_error(&self) -> ToolError {
        ToolError {
            kind: self.kind,
            message: self.message.clone(),
            retriable: self.retriable,
        }
    }
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct CodeInterpreterOutput {
    /// The checkpoint that restores the workspace to before this call (`checkpoint` tool),
    /// or null when the call changed nothing.
    pub checkpoint: Option<String>,
    pub session: String,
    pub stdout: String,
    pub stderr: String,
    /// repr() of the cell's final expression, or null.
    pub result: Option<String>,
    pub error: Option<CellError>,
    /// Number of figures returned as image content.
    pub images: u32,
    pub timed_out: bool,
    /// True when stdout, stderr or result was cut to its head and tail.
    pub truncated: bool,
    pub duration_ms: u64,
    /// True when the session's variables, imports and functions were lost during this call
    /// (the interpreter was restarted); `notice` says why.
    pub state_lost: bool,
    /// Anything else the caller should know (a restart, a fresh interpreter after `reset`).
    pub notice: Option<String>,
    /// Workspace-relative path of the complete output when it was cut (or was not valid
    /// UTF-8: the file keeps the exact bytes), else null.
    pub full_output: Option<String>,
    /// The limit that stopped the cell, with the evidence, or null.
    pub limit: Option<LimitHit>,
    /// Processes the cell started and left running that were killed when it ended (0 when
    /// the policy's `interpreter.keep_background` keeps them).
    pub background_killed: u32,
    /// The idle session that was ended to give this one a slot (every slot was taken), or
    /// null; its next call starts afresh and says so.
    pub evicted_session: Option<String>,
    /// Enforcement in force.
    pub enforcement: EnforcementLevel,
    /// Under a proxy-mode policy: the connections the cell made through cordon's egress
    /// proxy, and each refusal in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::egress::NetworkReport>,
}

/// The tool as the shared skeleton sees it.
pub(crate) struct CodeInterpreter;

impl Tool for CodeInterpreter {
    const NAME: &'static str = "code_interpreter";
    type Args = CodeInterpreterArgs;
    type Output = CodeInterpreterOutput;

    /// Only argument errors end a call before it has an output.
    fn failed(
        ctx: &Session,
        args: &CodeInterpreterArgs,
        error: ToolError,
    ) -> CodeInterpreterOutput {
        CodeInterpreterOutput {
            checkpoint: None,
            session: args.session.clone(),
            enforcement: ctx.runtime.enforcement_level(),
            error: Some(CellError::cordon("InvalidArgument", error)),
            ..Default::default()
        }
    }

    fn changes(args: &CodeInterpreterArgs) -> Option<String> {
        Some(format!(
            "python ({}): {}",
            args.session,
            crate::text::shortened(args.code.lines().next().unwrap_or_default(), 120)
        ))
    }

    fn set_checkpoint(output: &mut CodeInterpreterOutput, id: Option<String>) {
        output.checkpoint = id;
    }

    fn audit(output: &CodeInterpreterOutput, _is_error: bool) -> Outcome {
        Outcome::Interpreter {
            background_killed: output.background_killed,
            error: output.error.as_ref().map(|e| e.kind),
            evicted_session: output.evicted_session.clone(),
            exception: output.error.as_ref().map(|e| e.type_name.clone()),
            images: output.images,
            limit: output.limit.as_ref().map(|l| l.kind),
            session: output.session.clone(),
            state_lost: output.state_lost,
            timed_out: output.timed_out,
            network: output.network.clone(),
        }
    }
}

pub async fn run(
    ctx: SharedContext,
    args: CodeInterpreterArgs,
    cancel: CancellationToken,
) -> ToolOutcome {
    let started = Instant::now();
    let work = async {
        let timeout = prepare(&ctx, &args)?;
        Ok(run_cell(&ctx, &args, timeout, cancel, started).await)
    };
    super::run::<CodeInterpreter>(&ctx, &args, Request::CodeInterpreter, work).await
}

/// Runs the checked cell in its session, in one of the concurrency slots.
async fn run_cell(
    ctx: &SharedContext,
    args: &CodeInterpreterArgs,
    timeout: Duration,
    cancel: CancellationToken,
    started: Instant,
) -> Done<CodeInterpreter> {
    let _slot = ctx.runtime.slots.acquire().await;
    let request = CellRequest {
        code: args.code.clone(),
        reset: args.reset,
        timeout,
        cancel,
        stdout: super::capture_spec(ctx, "interp", "stdout"),
        stderr: super::capture_spec(ctx, "interp", "stderr"),
    };
    let enforcement = ctx.runtime.enforcement_level();
    match ctx.interpreter.run(&args.session, request).await {
        Ok(outcome) => {
            let done = shape_outcome(ctx, &args.session, outcome, enforcement);
            with_git_check(ctx, done).await
        }
        Err(e) => {
            let kind = ErrorKind::from(&e);
            let type_name = if kind == ErrorKind::ResourceLimit {
                "ResourceLimit"
            } else {
                "Unavailable"
            };
            let mut message = e.to_string();
            if e.is_not_found() {
                message.push_str(
                    "; install Python 3 where the sandbox can see it, or set \
                     `interpreter.python` in the policy",
                );
            }
            let mut error = ToolError::new(kind, message);
            // Every session was running a cell: the same call works once one is done.
            error.retriable |= matches!(e, InterpreterError::TooManySessions { .. });
            let text = error.text();
            let output = CodeInterpreterOutput {
                checkpoint: None,
                session: args.session.clone(),
                enforcement,
                duration_ms: started.elapsed().as_millis() as u64,
                error: Some(CellError::cordon(type_name, error)),
                ..Default::default()
            };
            Done {
                output,
                text,
                is_error: true,
                images: Vec::new(),
            }
        }
    }
}

/// The git check a shell call gets when it ends, after a cell: a cell can plant what git runs
/// outside the sandbox as well as a command can, and its result says so the same way (`denied`,
/// with what cordon undid or moved). The session's interpreter keeps running, so the timer of
/// the workspace's git guard also watches it between cells.
async fn with_git_check(ctx: &Session, mut done: Done<CodeInterpreter>) -> Done<CodeInterpreter> {
    let Some(Ok(sandbox_init)) = ctx.runtime.executor.sandbox_init().await else {
        return done;
    };
    let report = match tokio::task::spawn_blocking(move || sandbox_init.after_call()).await {
        Ok(report) => report,
        Err(_) => return done,
    };
    if report.notices.is_empty() {
        return done;
    }
    let said = report.notices.join("\n");
    done.text.push_str(&format!("[{said}]\n"));
    done.output.notice = Some(match done.output.notice.take() {
        Some(before) => format!("{before}; {said}"),
        None => said.clone(),
    });
    if report.refused {
        done.is_error = true;
        if done.output.error.is_none() {
            let error = ToolError::new(ErrorKind::Denied, said);
            done.output.error = Some(CellError::cordon("GitChangeRefused", error));
        }
    }
    done
}

/// Validates the arguments; returns the cell's timeout.
fn prepare(ctx: &SharedContext, args: &CodeInterpreterArgs) -> Result<Duration, ToolError> {
    let invalid = |m: String| ToolError::new(ErrorKind::InvalidArgument, m);
    let name = &args.session;
    if name.is_empty()
        || name.len() > MAX_SESSION_NAME
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(invalid(format!(
            "`session` {:?} is not a valid session name: use 1 to {MAX_SESSION_NAME} letters, \
             digits, `_` or `-` (for example \"default\" or \"data-1\")",
            crate::text::at_most_chars(name, 80)
        )));
    }
    let policy = ctx.interpreter.policy();
    crate::policy::timeout_within(args.timeout_secs, policy.timeout, policy.max_timeout)
        .map_err(|e| invalid(e.for_argument("timeout_secs", "split the work into smaller cells")))
}

fn shape_outcome(
    ctx: &Session,
    session: &str,
    outcome: CellOutcome,
    enforcement: EnforcementLevel,
) -> Done<CodeInterpreter> {
    let open = |stream: &str| {
        ctx.runtime
            .workspace
            .create_spill_std(&format!("interp-{stream}"))
    };
    let policy = &ctx.runtime.policy.output;
    let stdout = shape_stream(&outcome.stdout, policy, "stdout", Some(&open));
    let stderr = shape_stream(&outcome.stderr, policy, "stderr", Some(&open));
    let result = outcome
        .result
        .as_ref()
        .map(|r| crate::shape::shape_bytes(r.as_bytes(), policy, "result", Some(&open)));
    let error = cell_error(&outcome);
    let mut notice = outcome.state_lost.clone();
    if notice.is_none() && outcome.fresh_start {
        notice = Some("a fresh interpreter was started for this call".into());
    }

    let mut text = status_lines(ctx, session, &outcome, error.as_ref());
    push_sections(
        &mut text,
        &[("stdout", &stdout.text), ("stderr", &stderr.text)],
    );
    text.extend(crate::shape::controls_note(
        stdout.controls_removed + stderr.controls_removed,
    ));
    if let Some(r) = &result {
        text.push_str(&format!("--- result ---\n{}\n", r.text));
    }
    if let Some(tb) = error.as_ref().and_then(|e| e.traceback.as_ref())
        && !tb.is_empty()
    {
        text.push_str(&format!("--- traceback ---\n{tb}"));
        if !tb.ends_with('\n') {
            text.push('\n');
        }
    }
    let images = figures_within_budget(outcome.images, &mut text);
    if !ctx.runtime.enforcement_level().is_full() {
        text.push_str(&format!(
            "[enforcement: {}]\n",
            ctx.runtime.executor.confinement().enforcement().summary()
        ));
    }
    let truncated =
        stdout.truncated || stderr.truncated || result.as_ref().is_some_and(|r| r.truncated);
    let full_output = stdout
        .full_output
        .clone()
        .or(stderr.full_output.clone())
        .or(result.as_ref().and_then(|r| r.full_output.clone()));
    let output = CodeInterpreterOutput {
        checkpoint: None,
        session: session.to_owned(),
        stdout: stdout.text,
        stderr: stderr.text,
        result: result.map(|r| r.text),
        error,
        images: images.len() as u32,
        timed_out: outcome.timed_out,
        truncated,
        duration_ms: outcome.duration.as_millis() as u64,
        state_lost: outcome.state_lost.is_some(),
        notice,
        full_output,
        limit: outcome.limit.clone(),
        background_killed: u32::try_from(outcome.background_killed).unwrap_or(u32::MAX),
        evicted_session: outcome.evicted.clone(),
        enforcement,
        network: outcome.network.clone(),
    };
    Done {
        is_error: output.error.is_some(),
        output,
        text,
        images,
    }
}

/// The result's first lines: how the cell ended, then what happened to the session and
/// around the cell (state lost, a session evicted, processes killed, connections refused).
fn status_lines(
    ctx: &Session,
    session: &str,
    outcome: &CellOutcome,
    error: Option<&CellError>,
) -> String {
    let mut text = String::new();
    match error {
        Some(e) if e.kind == ErrorKind::Exception => {
            text.push_str(&format!(
                "error [exception]: {}: {}\n",
                e.type_name, e.message
            ));
        }
        Some(e) => {
            text.push_str(&e.as_tool_error().text());
            text.push('\n');
        }
        None => text.push_str(&format!(
            "ok in {} ms (session \"{session}\")\n",
            outcome.duration.as_millis()
        )),
    }
    if let Some(n) = &outcome.state_lost {
        text.push_str(&format!("[session state lost: {n}]\n"));
    }
    if let Some(victim) = &outcome.evicted {
        text.push_str(&format!(
            "[session \"{victim}\" was ended to free a slot: all {} were taken and it was the \
             least recently used idle one]\n",
            ctx.interpreter.policy().max_sessions
        ));
    }
    if outcome.background_killed > 0 {
        text.push_str(&format!(
            "[killed {} process(es) the cell left running; the policy's \
             interpreter.keep_background keeps them]\n",
            outcome.background_killed
        ));
    }
    for refused in outcome.network.iter().flat_map(|n| &n.refused) {
        text.push_str(&format!("[cordon] {refused}\n"));
    }
    text
}

/// Figures share the result's 1 MiB wire budget with everything else: kept in order while
/// they fit, and the text says how many are attached and how many did not fit.
fn figures_within_budget(mut images: Vec<String>, text: &mut String) -> Vec<String> {
    let mut used = 0usize;
    let kept = images
        .iter()
        .take_while(|png| {
            used += png.len();
            used <= IMAGE_BUDGET_BYTES
        })
        .count();
    let omitted = images.len() - kept;
    images.truncate(kept);
    if !images.is_empty() {
        text.push_str(&format!(
            "[{} figure(s) attached as PNG images]\n",
            images.len()
        ));
    }
    if omitted > 0 {
        text.push_str(&format!(
            "[{omitted} more figure(s) not attached: together they exceed the {} KiB a result \
             may carry in images; save them with savefig and read them from the workspace]\n",
            IMAGE_BUDGET_BYTES / 1024
        ));
    }
    images
}

/// Base64 bytes of figures one result may carry: most of the 1 MiB a result may take on the
/// wire (`tools::MAX_RESULT_BYTES`), leaving room for the text and structured content.
const IMAGE_BUDGET_BYTES: usize = 768 * 1024;

/// The call's error, if it failed: limits and timeouts first (they explain an exception such
/// as KeyboardInterrupt), then a dead interpreter, then the cell's own exception.
fn cell_error(o: &CellOutcome) -> Option<CellError> {
    let py = o.exception.as_ref();
    let lost = o.state_lost.as_deref();
    if let Some(hit) = &o.limit {
        let mut message = format!(
            "the cell was stopped by the session's {} ({})",
            hit.kind.describe(),
            hit.evidence
        );
        if let Some(lost) = lost {
            message.push_str(&format!("; {lost}"));
        }
        message.push_str(
            "; use less (smaller data, fewer processes), or ask the operator to raise the \
             policy's [interpreter] limits",
        );
        return Some(CellError::cordon(
            "ResourceLimit",
            ToolError {
                kind: ErrorKind::ResourceLimit,
                message,
                retriable: false,
            },
        ));
    }
    if o.timed_out || o.cancelled {
        let why = if o.cancelled {
            "the call was cancelled"
        } else {
            "the cell ran past its timeout"
        };
        let kind = if o.cancelled {
            ErrorKind::Internal
        } else {
            ErrorKind::Timeout
        };
        return Some(match (py, lost) {
            (_, Some(lost)) => CellError::cordon(
                "Timeout",
                ToolError::new(
                    kind,
                    format!(
                        "{lost}. Re-run the setup cells, and pass a larger timeout_secs or do \
                         the work in smaller steps"
                    ),
                ),
            ),
            (Some(e), None) => CellError {
                type_name: e.type_name.clone(),
                message: format!(
                    "{why} and was interrupted with KeyboardInterrupt ({:.1}s); the session's \
                     state is kept. Pass a larger timeout_secs or do the work in smaller steps",
                    o.duration.as_secs_f64()
                ),
                traceback: Some(e.traceback.clone()),
                kind,
                retriable: true,
            },
            (None, None) => CellError::cordon(
                "Timeout",
                ToolError::new(kind, format!("{why}; the session's state is kept")),
            ),
        });
    }
    if let Some(how) = &o.worker_died {
        return Some(CellError::cordon(
            "InterpreterExited",
            ToolError {
                kind: ErrorKind::ExitStatus,
                message: format!(
                    "the interpreter {how} while running the cell; {}",
                    lost.unwrap_or("the session's state was lost")
                ),
                retriable: false,
            },
        ));
    }
    py.map(|e| CellError {
        type_name: e.type_name.clone(),
        message: e.message.clone(),
        traceback: Some(e.traceback.clone()),
        kind: ErrorKind::Exception,
        retriable: false,
    })
}
