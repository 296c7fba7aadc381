//! `checkpoint`: list, diff and restore the workspace's checkpoints (SPEC.md "checkpoint").
//!
//! Owns the argument contract (which action needs which argument), the result, and the rule
//! that a restore does not run under a job of this client that may be writing the workspace
//! unless the caller asks for those jobs to be stopped first. Recording, diffing and putting
//! back are `crate::checkpoint`'s; the diff is cut like any long output (`shape`), its whole
//! text spilled to `.cordon/outputs/`.

use super::{Done, SharedContext, Tool};
use crate::audit::{Decision, Outcome};
use crate::checkpoint::store::Budget;
use crate::checkpoint::{CallInfo, CheckpointError, Checkpoints, FileChange, Listed};
use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError, ToolOutcome};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
// No doc comments on the variants: they would turn the schema's plain `enum` into a `oneOf`
// of `const`s, which some hosts' schema converters reject (tests/it/schemas.rs).
pub(crate) enum Action {
    List,
    Diff,
    Restore,
}

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckpointArgs {
    /// `list`: the kept checkpoints, newest first, and the storage budget. `diff`: what changed
    /// since checkpoint `id` (or from `id` to `to`), as a unified diff. `restore`: put the
    /// workspace back as it was before checkpoint `id`'s call.
    pub action: Action,
    /// A checkpoint id (`cp-12`, from a call's `checkpoint` or from `list`): the workspace as
    /// it was before that call. Required for `diff` and `restore`.
    #[serde(default)]
    pub id: Option<String>,
    /// For `diff`: a later checkpoint id, to see only what changed from `id` to it.
    #[serde(default)]
    pub to: Option<String>,
    /// For `restore`: stop this session's running jobs first (a restore refuses while one
    /// runs, since it may be writing the workspace).
    #[serde(default)]
    pub stop_jobs: bool,
    /// For `diff`: most characters of diff in the result (the whole is saved to
    /// `full_diff`).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1048576))]
    pub max_bytes: Option<u64>,
}

/// A path a restore could not put back, and why.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct NotRestored {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct CheckpointOutput {
    /// `list`: the kept checkpoints, newest first.
    pub checkpoints: Vec<Listed>,
    /// `list`: storage used and bounds.
    pub budget: Option<Budget>,
    /// `list`: how this server finds what calls changed (fanotify, or a walk of the tree at
    /// every call's start and end: the weaker, slower level).
    pub recording: Option<String>,
    /// `diff`: unified diff, cut like long command output.
    pub diff: String,
    /// `diff`: workspace-relative path of the whole diff when it was cut, else null.
    pub full_diff: Option<String>,
    /// `diff` and `restore`: every path changed, and how.
    pub files: Vec<FileChange>,
    /// `restore`: the checkpoint that undoes this restore (null when nothing changed).
    pub checkpoint: Option<String>,
    /// `restore`: paths it could not put back (not recorded: a socket, a file over
    /// `max_file_bytes`; or the file system refused), with why.
    pub not_restored: Vec<NotRestored>,
    /// `restore` with `stop_jobs`: the jobs stopped first.
    pub stopped_jobs: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

pub(crate) struct CheckpointTool;

impl Tool for CheckpointTool {
    const NAME: &'static str = "checkpoint";
    type Args = CheckpointArgs;
    type Output = CheckpointOutput;

    fn failed(_ctx: &Session, _args: &CheckpointArgs, error: ToolError) -> CheckpointOutput {
        CheckpointOutput {
            error: Some(error),
            ..Default::default()
        }
    }

    fn audit(output: &CheckpointOutput, _is_error: bool) -> Outcome {
        Outcome::Other(serde_json::json!({
            "files": output.files.len(),
            "checkpoint": output.checkpoint,
            "not_restored": output.not_restored.len(),
            "error": output.error.as_ref().map(|e| e.kind),
        }))
    }
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorKind::InvalidArgument, message)
}

fn store_error(e: CheckpointError) -> ToolError {
    if e.is_invalid_argument() {
        invalid(e.to_string())
    } else {
        ToolError::new(ErrorKind::Io, e.to_string())
    }
}

pub(crate) async fn run(ctx: SharedContext, args: CheckpointArgs) -> ToolOutcome {
    let started = Instant::now();
    let result = act(&ctx, &args).await;
    let checkpoint = result
        .as_ref()
        .ok()
        .and_then(|d| d.output.checkpoint.clone());
    super::finish_with::<CheckpointTool>(&ctx, &args, &Decision::Allow, started, result, checkpoint)
}

async fn act(
    ctx: &SharedContext,
    args: &CheckpointArgs,
) -> Result<Done<CheckpointTool>, ToolError> {
    let Some(checkpoints) = ctx.runtime.checkpoints.clone() else {
        return Err(ToolError::new(
            ErrorKind::Denied,
            "this server records no checkpoints (`[checkpoints] enabled = false` in the policy, \
             or its store could not be opened: see the server's log)",
        ));
    };
    if args.action == Action::List && (args.id.is_some() || args.to.is_some()) {
        return Err(invalid(
            "`list` takes no `id` or `to`; use action `diff` to see one checkpoint",
        ));
    }
    if args.action != Action::Diff && (args.to.is_some() || args.max_bytes.is_some()) {
        return Err(invalid("`to` and `max_bytes` are for action `diff` only"));
    }
    if args.action != Action::Restore && args.stop_jobs {
        return Err(invalid("`stop_jobs` is for action `restore` only"));
    }
    let id = match (args.action, &args.id) {
        (Action::List, _) => String::new(),
        (_, Some(id)) => id.clone(),
        (_, None) => {
            return Err(invalid(
                "`id` is required for `diff` and `restore`: a checkpoint id such as `cp-12` (a \
                 call's `checkpoint`, or one from action `list`)",
            ));
        }
    };
    match args.action {
        Action::List => list(checkpoints).await,
        Action::Diff => diff(ctx, args, checkpoints, id).await,
        Action::Restore => restore(ctx, args, checkpoints, id).await,
    }
}

/// `list`: the checkpoints kept, newest last, with the budget and the recording level.
async fn list(checkpoints: Arc<Checkpoints>) -> Result<Done<CheckpointTool>, ToolError> {
    let recording = checkpoints.recording().to_owned();
    let (listed, budget) = blocking(move || checkpoints.list()).await?;
    let mut text = format!(
        "{} checkpoints kept ({} bytes of {} used, {} dropped so far)\n",
        budget.count, budget.bytes_used, budget.bytes_max, budget.dropped
    );
    for l in listed.iter().take(50) {
        text.push_str(&format!(
            "{} {} {}: {} ({} files)\n",
            l.id, l.created_at, l.tool, l.summary, l.files_changed
        ));
    }
    text.push_str(&format!("recording: {recording}\n"));
    let output = CheckpointOutput {
        checkpoints: listed,
        budget: Some(budget),
        recording: Some(recording),
        ..Default::default()
    };
    Ok(Done::ok(output, text))
}

/// `diff`: the unified diff of one checkpoint or a range, shaped like any long output.
async fn diff(
    ctx: &SharedContext,
    args: &CheckpointArgs,
    checkpoints: Arc<Checkpoints>,
    id: String,
) -> Result<Done<CheckpointTool>, ToolError> {
    let to = args.to.clone();
    let diffed = blocking(move || checkpoints.diff(&id, to.as_deref())).await?;
    let mut policy = ctx.runtime.policy.output.clone();
    if let Some(max) = args.max_bytes {
        policy.max_chars = policy.max_chars.min(max as usize);
    }
    let spill = |_: &str| ctx.runtime.workspace.create_spill_std("checkpoint-diff");
    let shaped = crate::shape::shape_bytes(diffed.text.as_bytes(), &policy, "diff", Some(&spill));
    let text = format!("{} paths changed\n{}", diffed.files.len(), shaped.text);
    let output = CheckpointOutput {
        diff: shaped.text,
        full_diff: shaped.full_output,
        files: diffed.files,
        ..Default::default()
    };
    Ok(Done::ok(output, text))
}

/// `restore`: the workspace as it was before the checkpoint's call, refused while this
/// session's jobs run unless asked to stop them; itself a checkpoint that undoes it.
async fn restore(
    ctx: &SharedContext,
    args: &CheckpointArgs,
    checkpoints: Arc<Checkpoints>,
    id: String,
) -> Result<Done<CheckpointTool>, ToolError> {
    let stopped_jobs = stop_running_jobs(ctx, args.stop_jobs).await?;
    let info = CallInfo {
        call: Some(super::call_label()),
        tool: "checkpoint".into(),
        summary: format!("restore to {}", super::echo_arg(&id)),
    };
    let shown = id.clone();
    let restored = blocking(move || checkpoints.restore(&id, &info)).await?;
    let not_restored: Vec<NotRestored> = restored
        .skipped
        .into_iter()
        .map(|(path, reason)| NotRestored { path, reason })
        .collect();
    let mut text = format!(
        "restored the workspace to before {}: {} paths changed{}",
        super::echo_arg(&shown),
        restored.files.len(),
        match &restored.checkpoint {
            Some(undo) => format!("; undo this restore with checkpoint {undo}"),
            None => "; it already was so".into(),
        }
    );
    for n in not_restored.iter().take(20) {
        text.push_str(&format!("\nnot restored: {} ({})", n.path, n.reason));
    }
    let output = CheckpointOutput {
        files: restored.files,
        checkpoint: restored.checkpoint,
        not_restored,
        stopped_jobs,
        ..Default::default()
    };
    Ok(Done::ok(output, text))
}

/// This session's running jobs may be writing the workspace: a restore is refused while they
/// run, unless `stop` (then they are stopped first and their ids returned).
async fn stop_running_jobs(ctx: &SharedContext, stop: bool) -> Result<Vec<String>, ToolError> {
    let running: Vec<_> = ctx
        .jobs
        .list()
        .into_iter()
        .filter(|j| j.is_running())
        .collect();
    let ids: Vec<String> = running.iter().map(|j| j.id.clone()).collect();
    if running.is_empty() {
        return Ok(ids);
    }
    if !stop {
        return Err(ToolError::new(
            ErrorKind::Denied,
            format!(
                "nothing was restored: job(s) {} of this session are running and may be \
                 writing the workspace; stop them (job tool, signal TERM) or call again with \
                 `stop_jobs: true`",
                ids.join(", ")
            ),
        ));
    }
    for job in &running {
        job.stop("stopped for a checkpoint restore".into()).await;
    }
    Ok(ids)
}

/// Runs store work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, CheckpointError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::new(ErrorKind::Internal, format!("checkpoint work failed: {e}")))?
        .map_err(store_error)
}
