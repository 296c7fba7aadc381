//! `shell_exec {background: true}`: the job started, its first output waited for, and the
//! answer `shell_exec` gives, with the `job` the `job` tool reads and drives from then on.
//!
//! The job itself (launch, supervision, limits, endings) is `jobs`'; the answer about it is
//! `job_answer`'s, the same the `job` tool gives.

use super::{ShellExec, ShellExecArgs, ShellExecOutput};
use crate::exec::ExecRequest;
use crate::jobs::{Job, JobEnd, JobSpec, JobState};
use crate::shape::{ErrorKind, ToolError};
use crate::tools::job_answer::{self, DEFAULT_MAX_BYTES, JobInfo, compile_until, wait_secs};
use crate::tools::{Done, SharedContext};
use std::sync::Arc;
use std::time::Duration;

/// Default `wait_secs` of `shell_exec {background: true}`.
const DEFAULT_BACKGROUND_WAIT: u64 = 1;

/// Starts the job, waits `wait_secs` (or for its end), and answers with the output so far
/// and `job`.
pub(super) async fn start_background(
    ctx: &SharedContext,
    args: &ShellExecArgs,
    request: ExecRequest,
) -> Result<Done<ShellExec>, ToolError> {
    let enforcement = ctx.runtime.enforcement_level();
    let job = match start(ctx, args, request).await {
        Ok(job) => job,
        Err(error) => {
            return Ok(Done::error(
                ShellExecOutput {
                    checkpoint: None,
                    enforcement,
                    error: Some(error.clone()),
                    ..Default::default()
                },
                &error,
            ));
        }
    };
    let wait = Duration::from_secs(wait_secs(args.wait_secs, DEFAULT_BACKGROUND_WAIT)?);
    let until = args.until.as_deref().map(compile_until).transpose()?;
    // Output so far: until `until` matches, the output settles, the job ends, or `wait_secs`.
    let wanted = crate::jobs::Wanted {
        until: until.as_ref(),
        settle: crate::jobs::job::DEFAULT_SETTLE,
        after_input: false,
    };
    job.wait_for_news(wait, &wanted).await;
    job.touch();
    let read = job.read(DEFAULT_MAX_BYTES);
    let first_lines = |info: &JobInfo| started_lines(ctx, &job, info, read.end.as_ref());
    let answer =
        job_answer::answer(ctx, &job, &read, first_lines, Vec::new(), ended_too_soon).await;
    let end = read.end.as_ref();
    let output = ShellExecOutput {
        checkpoint: None,
        exit_code: answer.exit_code,
        signal: answer.signal,
        timed_out: false,
        stdout: answer.stdout,
        stderr: answer.stderr,
        truncated: answer.truncated,
        full_output: job.log_path.clone(),
        duration_ms: job.elapsed().as_millis() as u64,
        limit: answer.limit,
        enforcement,
        network: end.and_then(|e| e.network.clone()),
        job: Some(answer.info),
        denials: Vec::new(),
        error: answer.error,
        control_chars_removed: answer.controls_removed,
        // A job that ended within its start: its refusals are in its ending's audit record.
        git_refusals: Vec::new(),
    };
    let is_error = output.error.is_some();
    Ok(Done {
        output,
        text: answer.text,
        is_error,
        images: Vec::new(),
    })
}

/// The job launched, with its log (the whole of its output, in the spill area, bounded like
/// spill files) and unbuffered Python; `Err` says why it did not start.
async fn start(
    ctx: &SharedContext,
    args: &ShellExecArgs,
    request: ExecRequest,
) -> Result<Arc<Job>, ToolError> {
    let refused = |e: crate::jobs::StartError| {
        let kind = e.kind();
        ToolError::new(kind, format!("the background job did not start: {e}"))
    };
    // Refused before its log is made: a refused start leaves no file behind (nor prunes an
    // older output to make room for one).
    ctx.jobs.check_room().map_err(refused)?;
    let log = new_log(ctx).await;
    let lifetime = args.timeout_secs.map(|_| request.timeout);
    let mut program = request.program;
    // A job's output is read while it runs: Python's block buffering on a pipe would hold
    // back a server's "Serving on …" until 8 KiB had accumulated.
    program
        .env
        .entry("PYTHONUNBUFFERED".into())
        .or_insert_with(|| "1".into());
    let spec = JobSpec {
        command: args.command.clone(),
        program,
        stdin: request.stdin,
        log,
        lifetime,
    };
    ctx.jobs.start(spec).await.map_err(refused)
}

/// A job's log file in the spill area, when one can be made (the job runs without one).
async fn new_log(ctx: &SharedContext) -> Option<(String, std::fs::File)> {
    ctx.runtime
        .blocking(|rt| rt.workspace.create_spill_std("job"))
        .await
        .map_err(|e| tracing::warn!("a job's log file could not be made: {e}"))
        .ok()
}

/// `job`'s command again, as it was started (same argv, directory, environment, terminal
/// size and lifetime), with a new log: for `job {restart: true}`.
pub(crate) async fn respec(ctx: &SharedContext, job: &Job) -> JobSpec {
    let again = job.relaunch();
    JobSpec {
        command: job.command.clone(),
        program: again.program,
        stdin: again.stdin,
        log: new_log(ctx).await,
        lifetime: again.lifetime,
    }
}

/// The answer's first lines: started (or already ended), where the host forwards its ports,
/// and what the sandbox's network means for a server it starts.
fn started_lines(ctx: &SharedContext, job: &Job, info: &JobInfo, end: Option<&JobEnd>) -> String {
    let mut text = match end {
        None => format!(
            "started job {} [running]; read and drive it with the `job` tool (id \"{}\")\n",
            job.id, job.id
        ),
        Some(end) => format!("job {} [{}] already: {}\n", job.id, info.state, end.reason),
    };
    for url in &info.forwarded {
        text.push_str(&format!("[forwarded from the host: {url}]\n"));
    }
    if !ctx.runtime.private_loopback() {
        text.push_str(
            "[cordon] this sandbox has no private network namespace: a server the job starts \
             on 127.0.0.1 listens on the host's loopback\n",
        );
    }
    if let Some(f) = ctx.runtime.forwarder.get() {
        for problem in &f.problems {
            text.push_str(&format!("[cordon] {problem}\n"));
        }
    }
    text
}

/// A job that ended before the call returned, other than with exit 0, is the call's error.
fn ended_too_soon(end: &JobEnd) -> Option<ToolError> {
    match end.state {
        JobState::Exited if end.exit_code == Some(0) => None,
        JobState::Running => None,
        _ => Some(ToolError::new(
            if end.limit.is_some() {
                ErrorKind::ResourceLimit
            } else {
                ErrorKind::ExitStatus
            },
            format!(
                "the background job ended before the call returned: {}",
                end.reason
            ),
        )),
    }
}
