//! `job`: reading and driving the background jobs that `shell_exec {background: true}`
//! started (the start itself is `shell_exec::background`'s).
//!
//! Owns the contract (arguments, output, errors) and how a job's output is shown: the output
//! since the previous read, cut by `max_bytes` and the policy's output thresholds, its control
//! characters removed, and the job's log file named as `full_output`. The jobs themselves (launch,
//! supervision, limits, endings) are `jobs`'; a job is only ever looked up in the calling
//! client's own table, so another client's ids do not exist here.

use super::job_answer::{self, DEFAULT_MAX_BYTES, JobInfo, compile_until, wait_secs};
use super::job_input::{self, Typing};
use super::shell_exec::{Answer, Approver};
use super::{Done, SharedContext, Tool, finish};
use crate::audit::{Decision, Outcome};
use crate::exec::LimitHit;
use crate::jobs::{Job, JobRead, JobState};
use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest `max_bytes` (the default is [`DEFAULT_MAX_BYTES`]).
pub(crate) const MAX_MAX_BYTES: usize = 1024 * 1024;

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct JobArgs {
    /// The job to read or drive (from `shell_exec`'s `job.id`); leave it out to list this
    /// session's jobs.
    #[serde(default)]
    pub id: Option<String>,
    /// Text written to the job's input first. Under a pty, "\u0003" is Ctrl-C and "\u0004"
    /// Ctrl-D; without one, "\u0004" alone closes the job's stdin.
    #[serde(default)]
    pub input: Option<String>,
    /// A signal for the job's process group (under a pty, the terminal's foreground group, as
    /// Ctrl-C), sent after `input`. TERM is a graceful stop: the group gets a few seconds
    /// before SIGTERM reaches the main process, and a few more before the whole tree is killed.
    #[serde(default)]
    pub signal: Option<JobSignal>,
    /// Seconds to wait for new output (or output matching `until`), or for the job to end.
    #[serde(default)]
    #[schemars(range(min = 0, max = 30))]
    pub wait_secs: Option<u64>,
    /// A regular expression: with `wait_secs`, return as soon as new output matches it (for
    /// readiness, e.g. "Listening on|Serving").
    #[serde(default)]
    #[schemars(length(min = 1, max = 1000))]
    pub until: Option<String>,
    /// The most output to return (and consume) in this call, in bytes; the rest waits for the
    /// next read. Default 32768.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1048576))]
    pub max_bytes: Option<u64>,
    /// Without `until`: return once the output has been quiet this many milliseconds (after
    /// the answer to `input` began, when input was sent). Default 200; 0 returns at the
    /// first new output.
    #[serde(default)]
    #[schemars(range(min = 0, max = 10000))]
    pub settle_ms: Option<u64>,
    /// End the job (whole tree) and start its command again, with the same id.
    #[serde(default)]
    pub restart: bool,
    /// Resize the job's terminal (with `rows`; a `pty` job only): its programs get SIGWINCH.
    #[serde(default)]
    #[schemars(range(min = 20, max = 1000))]
    pub cols: Option<u16>,
    /// Resize the job's terminal (with `cols`).
    #[serde(default)]
    #[schemars(range(min = 5, max = 500))]
    pub rows: Option<u16>,
    /// Not an argument: the command line the command rules judged `input` as (input to a
    /// shell, `job_input`), so the audit log records it as a command. A client cannot set it
    /// (an unknown field).
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    #[schemars(skip)]
    pub command: Option<String>,
}

/// Longest `settle_ms`.
const MAX_SETTLE_MS: u64 = 10_000;

#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub(crate) enum JobSignal {
    Int,
    Term,
    Hup,
    Kill,
}

impl std::fmt::Display for JobSignal {
    /// The name as the argument spells it (`INT`), which notices prefix with `SIG`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Int => "INT",
            Self::Term => "TERM",
            Self::Hup => "HUP",
            Self::Kill => "KILL",
        })
    }
}

impl JobSignal {
    fn signal(self) -> rustix::process::Signal {
        use rustix::process::Signal;
        match self {
            Self::Int => Signal::INT,
            Self::Term => Signal::TERM,
            Self::Hup => Signal::HUP,
            Self::Kill => Signal::KILL,
        }
    }
}

/// One line of the job list.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct JobListing {
    pub id: String,
    pub state: JobState,
    pub command: String,
    pub started_at: String,
    /// The last line of output, nothing consumed.
    pub last_line: String,
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct JobOutput {
    /// The checkpoint that restores the workspace to before what this read reports the
    /// job changed since the previous record (`checkpoint` tool), or null when it changed nothing.
    pub checkpoint: Option<String>,
    /// The job read (null when listing).
    pub job: Option<JobInfo>,
    /// Output since the previous read: stdout, or under a pty everything the terminal showed.
    pub output: String,
    /// stderr since the previous read (empty under a pty).
    pub stderr: String,
    /// Bytes of output read so far, both streams.
    pub cursor: u64,
    /// Output that fell out of the job's memory buffer before it was read (it is in
    /// `full_output`).
    pub dropped_bytes: u64,
    /// True when this answer does not show all new output: more is waiting (read again), or
    /// it was cut to its head and tail (see `full_output`).
    pub truncated: bool,
    /// Workspace-relative path of the job's whole log.
    pub full_output: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub limit: Option<LimitHit>,
    /// CPU time of the job's whole tree so far.
    pub cpu_ms: Option<u64>,
    pub peak_memory_bytes: Option<u64>,
    /// Terminal escape sequences and control characters removed from `output` and `stderr`
    /// (the log file keeps the exact bytes); 0 when the policy keeps them.
    pub control_chars_removed: u64,
    /// Without `id`: this session's jobs.
    pub jobs: Vec<JobListing>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

pub(crate) struct JobTool;

impl Tool for JobTool {
    const NAME: &'static str = "job";
    type Args = JobArgs;
    type Output = JobOutput;

    fn failed(_ctx: &Session, _args: &JobArgs, error: ToolError) -> JobOutput {
        JobOutput {
            checkpoint: None,
            error: Some(error),
            ..Default::default()
        }
    }

    fn set_checkpoint(output: &mut JobOutput, id: Option<String>) {
        output.checkpoint = id;
    }

    fn audit(output: &JobOutput, _is_error: bool) -> Outcome {
        Outcome::Other(serde_json::json!({
            "error": output.error.as_ref().map(|e| e.kind),
            "job": output.job.as_ref().map(|j| &j.id),
            "state": output.job.as_ref().map(|j| &j.state),
            "exit_code": output.exit_code,
            "signal": output.signal,
        }))
    }
}

fn invalid(message: String) -> ToolError {
    ToolError::new(ErrorKind::InvalidArgument, message)
}

/// The `job` tool: list, or read and drive one job. Input to a job's shell is judged by the
/// command rules first (`job_input`), asking through `approver` where a rule asks.
pub(crate) async fn run<A: Approver>(
    ctx: SharedContext,
    mut args: JobArgs,
    approver: A,
) -> Answer<A::Pending> {
    let started = Instant::now();
    let job = args.id.as_deref().and_then(|id| ctx.jobs.get(id));
    let (Some(job), Some(input)) = (job.filter(|j| j.is_running()), args.input.clone()) else {
        let result = act(&ctx, &args, None).await;
        let checkpoint = super::record_job(&ctx, args.id.as_deref()).await;
        return Answer::Done(super::finish_with::<JobTool>(
            &ctx,
            &args,
            &Decision::Allow,
            started,
            result,
            checkpoint,
        ));
    };
    let typed = job.typed().await;
    match job_input::judge(&ctx, &job, &typed, &input, approver).await {
        Typing::Admitted {
            decision,
            command,
            typed_after,
        } => {
            args.command = command;
            let write = TypedWrite {
                typed,
                after: typed_after,
            };
            let result = act(&ctx, &args, Some(write)).await;
            let checkpoint = super::record_job(&ctx, args.id.as_deref()).await;
            Answer::Done(super::finish_with::<JobTool>(
                &ctx, &args, &decision, started, result, checkpoint,
            ))
        }
        Typing::Refused {
            error,
            decision,
            command,
        } => {
            args.command = command;
            Answer::Done(finish::<JobTool>(
                &ctx,
                &args,
                &decision,
                started,
                Err(error),
            ))
        }
        Typing::Pending {
            pending,
            rule,
            command,
        } => {
            args.command = Some(command);
            let asked = Decision::Ask {
                rule,
                answer: crate::audit::Answer::Pending,
                by: None,
            };
            let waiting = Outcome::InputRequired {
                input_required: true,
            };
            ctx.runtime
                .audit(JobTool::NAME, &args, &asked, waiting, started);
            Answer::Pending(pending)
        }
    }
}

/// Input admitted for a job's shell, and what its `typed` becomes once the input is written.
/// The job's `typed` stays locked until the input is written, so another call's input
/// cannot come between its judging and its writing; not while the call then waits.
struct TypedWrite<'g> {
    typed: tokio::sync::MutexGuard<'g, String>,
    after: Option<String>,
}

impl TypedWrite<'_> {
    /// The input was written: the job's `typed` is what it left unfinished, and unlocked.
    fn written(mut self) {
        if let Some(after) = self.after.take() {
            *self.typed = after;
        }
    }
}

async fn act(
    ctx: &SharedContext,
    args: &JobArgs,
    typed: Option<TypedWrite<'_>>,
) -> Result<Done<JobTool>, ToolError> {
    let Some(id) = &args.id else {
        if args.input.is_some()
            || args.signal.is_some()
            || args.until.is_some()
            || args.restart
            || args.cols.is_some()
            || args.rows.is_some()
        {
            return Err(invalid(
                "`input`, `signal`, `until`, `restart`, `cols` and `rows` need the `id` of a \
                 job; call `job` without arguments to list this session's jobs"
                    .into(),
            ));
        }
        return Ok(list(ctx));
    };
    let Some(job) = ctx.jobs.get(id) else {
        let known: Vec<String> = ctx.jobs.list().iter().map(|j| j.id.clone()).collect();
        return Err(invalid(format!(
            "no job {} in this session ({}); jobs are started with shell_exec \
             {{\"background\": true}} and belong to the session that started them",
            super::echo_arg(id),
            if known.is_empty() {
                "it has none".to_owned()
            } else {
                format!("its jobs: {}", known.join(", "))
            }
        )));
    };
    let ReadBounds {
        wait,
        max_bytes,
        until,
        settle,
        size,
    } = ReadBounds::of(args)?;
    let mut notices = Vec::new();
    let job = if args.restart {
        let spec = crate::tools::shell_exec::background::respec(ctx, &job).await;
        let restarted = ctx
            .jobs
            .restart(id, spec)
            .await
            .map_err(|e| ToolError::new(e.kind(), format!("job {id} did not restart: {e}")))?;
        notices.push(format!(
            "job {id} was ended (whole tree) and its command started again"
        ));
        restarted
    } else {
        job
    };
    job.touch();
    if let Some((cols, rows)) = size {
        job.resize(cols, rows)
            .map_err(|e| invalid(format!("job {id}'s terminal was not resized: {e}")))?;
        notices.push(format!("the terminal is now {cols}x{rows}"));
    }
    if let Some(input) = &args.input {
        if !job.is_running() {
            return Err(invalid(format!(
                "job {id} has ended ({}); it reads no more input",
                job.end().map(|e| e.reason).unwrap_or_default()
            )));
        }
        job.write_input(input.as_bytes()).await.map_err(|e| {
            ToolError::new(
                ErrorKind::Io,
                format!("input for job {id} not written: {e}"),
            )
        })?;
        if let Some(write) = typed {
            write.written();
        }
    }
    match args.signal {
        Some(signal) => notices.extend(signal_and_wait(&job, signal, wait).await),
        None => {
            let wanted = crate::jobs::Wanted {
                until: until.as_ref(),
                settle,
                after_input: args.input.is_some(),
            };
            job.wait_for_news(wait, &wanted).await;
        }
    }
    job.touch();
    let read = job.read(max_bytes);
    Ok(shown_read(ctx, &job, read, notices).await)
}

/// A read's bounds, checked: how long to wait, how much to return, what to wait for, and a
/// new terminal size.
struct ReadBounds {
    wait: Duration,
    max_bytes: usize,
    until: Option<regex::Regex>,
    settle: Duration,
    size: Option<(u16, u16)>,
}

impl ReadBounds {
    fn of(args: &JobArgs) -> Result<Self, ToolError> {
        let wait = Duration::from_secs(wait_secs(args.wait_secs, 0)?);
        let max_bytes = match args.max_bytes {
            None => DEFAULT_MAX_BYTES,
            Some(m) if (1..=MAX_MAX_BYTES as u64).contains(&m) => m as usize,
            Some(m) => {
                return Err(invalid(format!(
                    "`max_bytes` is {m}; pass 1 to {MAX_MAX_BYTES} (the rest of the output waits for \
                     the next read, and all of it is in `full_output`)"
                )));
            }
        };
        let until = match &args.until {
            None => None,
            Some(pattern) => Some(compile_until(pattern)?),
        };
        let settle = settle(args.settle_ms)?;
        let size = match (args.cols, args.rows) {
            (None, None) => None,
            (Some(c), Some(r)) => Some((c, r)),
            _ => {
                return Err(invalid(
                    "pass `cols` and `rows` together to resize the job's terminal".into(),
                ));
            }
        };
        if args.restart && (args.input.is_some() || args.signal.is_some()) {
            return Err(invalid(
                "`restart` starts the job's command afresh: send `input` or `signal` in a later call"
                    .into(),
            ));
        }
        Ok(Self {
            wait,
            max_bytes,
            until,
            settle,
            size,
        })
    }
}

/// Sends `signal` to the job's process group (the terminal's foreground group under a pty),
/// then waits for what a signal is usually for: the job's end. Returns the notices.
async fn signal_and_wait(job: &Job, signal: JobSignal, wait: Duration) -> Vec<String> {
    let mut notices = Vec::new();
    let whom = if job.pty {
        "the terminal's foreground process group"
    } else {
        "the job's process group"
    };
    if job.signal(signal.signal()) {
        notices.push(format!("sent SIG{signal} to {whom}"));
    } else {
        notices.push(format!("SIG{signal} not sent: the job has already ended"));
    }
    // The output read after this is what it printed on the way; wait at least a moment for
    // an immediate end to be recorded, or for the answer to settle (a REPL's Ctrl-C).
    let ended = tokio::time::timeout(wait.max(Duration::from_millis(200)), job.ended());
    let _ = ended.await;
    if job.is_running() {
        notices.push(match signal {
            JobSignal::Term => format!(
                "the job's main process outlived SIGTERM so far; it is killed with its whole \
                 tree if it is still running {}s after SIGTERM reaches it",
                crate::jobs::job::TERM_GRACE.as_secs()
            ),
            _ => format!(
                "the job's main process outlived SIG{signal} and is still running; send TERM or \
                 KILL to end it"
            ),
        });
    }
    notices
}

/// `settle_ms` within bounds (default [`crate::jobs::job::DEFAULT_SETTLE`]).
pub(crate) fn settle(given: Option<u64>) -> Result<Duration, ToolError> {
    match given {
        None => Ok(crate::jobs::job::DEFAULT_SETTLE),
        Some(ms) if ms <= MAX_SETTLE_MS => Ok(Duration::from_millis(ms)),
        Some(ms) => Err(invalid(format!(
            "`settle_ms` is {ms}; pass 0 to {MAX_SETTLE_MS} (use `until` to wait for a \
             particular line)"
        ))),
    }
}

fn list(ctx: &Session) -> Done<JobTool> {
    let jobs: Vec<JobListing> = ctx
        .jobs
        .list()
        .iter()
        .map(|j| JobListing {
            id: j.id.clone(),
            state: j.state(),
            command: super::echo_arg(&j.command),
            started_at: j.started_at.clone(),
            last_line: crate::text::shortened(&j.last_line(), 200).into_owned(),
        })
        .collect();
    let mut text = if jobs.is_empty() {
        "no jobs in this session; start one with shell_exec {\"background\": true}\n".to_owned()
    } else {
        format!("{} jobs in this session:\n", jobs.len())
    };
    for j in &jobs {
        text.push_str(&format!(
            "{} [{}] {} (since {}){}\n",
            j.id,
            j.state,
            j.command,
            j.started_at,
            if j.last_line.is_empty() {
                String::new()
            } else {
                format!(": {}", j.last_line)
            }
        ));
    }
    let (cleaned, _) = crate::shape::hygiene::strip_controls(&text);
    Done::ok(
        JobOutput {
            checkpoint: None,
            jobs,
            ..Default::default()
        },
        cleaned,
    )
}

async fn shown_read(
    ctx: &Session,
    job: &Arc<Job>,
    read: JobRead,
    mut notices: Vec<String>,
) -> Done<JobTool> {
    let dropped = read.stdout.dropped + read.stderr.dropped;
    let more = read.stdout.more || read.stderr.more;
    note_what_is_not_shown(&mut notices, job, read.log_truncated, more, dropped);
    let first_lines = |info: &JobInfo| {
        let state = info.state;
        let mut text = match &read.end {
            None => format!(
                "job {} [{state}] {} (running for {}s)\n",
                job.id,
                info.command,
                job.elapsed().as_secs()
            ),
            Some(end) => format!(
                "job {} [{state}] {}: {}\n",
                job.id, info.command, end.reason
            ),
        };
        for url in &info.forwarded {
            text.push_str(&format!("[forwarded from the host: {url}]\n"));
        }
        text
    };
    let answer = job_answer::answer(ctx, job, &read, first_lines, notices, |_| None).await;
    let output = JobOutput {
        checkpoint: None,
        job: Some(answer.info),
        output: answer.stdout,
        stderr: answer.stderr,
        cursor: read.cursor,
        dropped_bytes: dropped,
        truncated: answer.truncated,
        full_output: job.log_path.clone(),
        exit_code: answer.exit_code,
        signal: answer.signal,
        limit: answer.limit,
        cpu_ms: read.cpu.map(|d| d.as_millis() as u64),
        peak_memory_bytes: read.peak_memory,
        control_chars_removed: answer.controls_removed,
        jobs: Vec::new(),
        error: answer.error,
    };
    let is_error = output.error.is_some();
    Done {
        output,
        text: answer.text,
        is_error,
        images: Vec::new(),
    }
}

/// Notices of output this read does not show: waiting for the next read, gone from the
/// buffer (it is in the log), or past the log's bound.
fn note_what_is_not_shown(
    notices: &mut Vec<String>,
    job: &Job,
    log_truncated: bool,
    more: bool,
    dropped: u64,
) {
    if more {
        notices.push("more output is waiting: call job again to read on".into());
    }
    if dropped > 0 {
        notices.push(format!(
            "{dropped} bytes of output left the job's buffer before they were read; they are in \
             {}",
            job.log_path
                .as_deref()
                .unwrap_or("the job's log (not kept)")
        ));
    }
    if log_truncated {
        notices.push(
            "the job's log stopped growing at the spill file bound (512 MiB); later output is \
             only in memory"
                .into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_cannot_set_the_judged_command_line() {
        // `command` is what the server judged input as, for the audit log: a client sending it
        // is sending an unknown field.
        let args = serde_json::json!({"id": "job-1", "input": "ls\n", "command": "echo fake"});
        assert!(serde_json::from_value::<JobArgs>(args).is_err());
        let args = serde_json::json!({"id": "job-1", "input": "ls\n"});
        assert!(
            serde_json::from_value::<JobArgs>(args)
                .unwrap()
                .command
                .is_none()
        );
    }
}
