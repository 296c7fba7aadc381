//! A job as results show it, the one answer both `shell_exec {background: true}` (its first
//! output) and the `job` tool (every later read) give: the job's [`JobInfo`], its new output
//! shaped like any stream, its end (exit status, signal, limit, the git change refused), and
//! the text block around them. Also the bounds both take (`wait_secs`, `until`).
//!
//! The first lines of the text (started, or read) are each caller's; everything after them is
//! built here, once.

use crate::exec::LimitHit;
use crate::jobs::{Job, JobEnd, JobRead, JobState};
use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError, push_sections, shape_bytes};
use schemars::JsonSchema;
use serde::Serialize;

/// Default `max_bytes` of one read.
pub(crate) const DEFAULT_MAX_BYTES: usize = 32 * 1024;
/// Longest `until` pattern, and the most memory its compiled form may take.
const MAX_UNTIL: usize = 1000;
const UNTIL_SIZE_LIMIT: usize = 1 << 20;
/// The longest one call waits for a job.
const MAX_WAIT_SECS: u64 = 30;

/// A job as results show it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct JobInfo {
    pub id: String,
    pub state: JobState,
    pub command: String,
    /// The main process's pid inside the sandbox (its own PID namespace).
    pub pid_in_sandbox: Option<u32>,
    /// RFC 3339, UTC.
    pub started_at: String,
    /// Whether it runs under a terminal.
    pub pty: bool,
    /// Host URLs (`[jobs] forward`) on which something in the sandbox listens now.
    pub forwarded: Vec<String>,
}

/// The job as a result's `job` field.
pub(crate) async fn info(ctx: &Session, job: &Job) -> JobInfo {
    let forwarded = match ctx.runtime.forwarder.get() {
        Some(f) if job.is_running() && !f.listening.is_empty() => f.serving(job.members()).await,
        _ => Vec::new(),
    };
    JobInfo {
        id: job.id.clone(),
        state: job.state(),
        command: super::echo_arg(&job.command),
        pid_in_sandbox: job.pid_in_sandbox,
        started_at: job.started_at.clone(),
        pty: job.pty,
        forwarded,
    }
}

/// What a read of a job answers, whichever tool reads it.
pub(super) struct JobAnswer {
    pub info: JobInfo,
    /// stdout, or under a pty everything the terminal showed.
    pub stdout: String,
    pub stderr: String,
    /// Not all new output is shown: more is waiting, or it was cut to its head and tail.
    pub truncated: bool,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub limit: Option<LimitHit>,
    pub controls_removed: u64,
    pub error: Option<ToolError>,
    /// The text block: the caller's first lines, the streams, the notices, the error first.
    pub text: String,
}

/// The answer to `read` of `job`. `first_lines` are the caller's opening lines (given the
/// job's info); `notices` are said after the output, with what the job's end found; `failed`
/// names an end that is the call's error besides a refused git change.
pub(super) async fn answer(
    ctx: &Session,
    job: &Job,
    read: &JobRead,
    first_lines: impl FnOnce(&JobInfo) -> String,
    mut notices: Vec<String>,
    failed: impl FnOnce(&JobEnd) -> Option<ToolError>,
) -> JobAnswer {
    let policy = &ctx.runtime.policy.output;
    let out = shape_bytes(&read.stdout.bytes, policy, "stdout", None);
    let err = shape_bytes(&read.stderr.bytes, policy, "stderr", None);
    let controls = out.controls_removed + err.controls_removed;
    let info = info(ctx, job).await;
    let end = read.end.as_ref();
    if let Some(end) = end {
        notices.extend(end.notices.iter().cloned());
    }
    let error = end.and_then(|e| git_refused(job, e).or_else(|| failed(e)));
    let mut text = first_lines(&info);
    push_sections(
        &mut text,
        &[
            (if job.pty { "terminal" } else { "stdout" }, &out.text),
            ("stderr", &err.text),
        ],
    );
    for notice in &notices {
        text.push_str(&format!("[cordon] {notice}\n"));
    }
    text.extend(crate::shape::controls_note(controls));
    if let Some(e) = &error {
        text = format!("{}\n{text}", e.text());
    }
    JobAnswer {
        info,
        truncated: out.truncated || err.truncated || read.stdout.more || read.stderr.more,
        stdout: out.text,
        stderr: err.text,
        exit_code: end.and_then(|e| e.exit_code),
        signal: end.and_then(|e| e.signal).map(crate::exec::signal_name),
        limit: end.and_then(|e| e.limit.clone()),
        controls_removed: controls as u64,
        error,
        text,
    }
}

/// A job that ended with a git change cordon refused: the read's error (also the background
/// start's, when the job ends before that call returns).
pub(crate) fn git_refused(job: &Job, end: &crate::jobs::JobEnd) -> Option<ToolError> {
    end.git_refused.then(|| {
        ToolError::new(
            ErrorKind::Denied,
            format!(
                "job {} ended ({}), and cordon refused a git change it left: {}. Do not \
                 retry it in another form; ask the operator to make the change on the host",
                job.id,
                end.reason,
                end.notices
                    .first()
                    .map(String::as_str)
                    .unwrap_or("see stderr")
            ),
        )
    })
}

/// `wait_secs` within 0..=30, or the error that says so.
pub(crate) fn wait_secs(given: Option<u64>, default: u64) -> Result<u64, ToolError> {
    match given {
        None => Ok(default),
        Some(w) if w <= MAX_WAIT_SECS => Ok(w),
        Some(w) => Err(invalid(format!(
            "`wait_secs` is {w}; pass 0 to {MAX_WAIT_SECS} and call `job` again to wait longer \
             (the job keeps running between calls)"
        ))),
    }
}

pub(crate) fn compile_until(pattern: &str) -> Result<regex::Regex, ToolError> {
    if pattern.len() > MAX_UNTIL {
        return Err(invalid(format!(
            "`until` is {} characters; keep it under {MAX_UNTIL}",
            pattern.len()
        )));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(UNTIL_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            invalid(format!(
                "`until` is not a valid regular expression (Rust regex syntax): {e}"
            ))
        })
}

fn invalid(message: String) -> ToolError {
    ToolError::new(ErrorKind::InvalidArgument, message)
}
