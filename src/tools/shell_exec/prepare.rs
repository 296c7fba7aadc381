//! `shell_exec`'s arguments checked against the policy, once per call and before anyone is
//! asked: the command line (empty, NUL, longer than the kernel takes), the terminal and job
//! options, the timeout bound, the environment's names, and `cwd` rooted in the workspace
//! (opened here). The result is the [`ExecRequest`] to run.

use super::{DEFAULT_COLS, DEFAULT_ROWS, ShellExecArgs};
use crate::exec::{ExecRequest, LiveStatus, Program};
use crate::shape::{ErrorKind, ToolError};
use crate::tools::SharedContext;
use std::sync::Arc;

/// Linux's MAX_ARG_STRLEN (32 pages): execve refuses any single argument or environment
/// string this long (terminating NUL included) with E2BIG.
const MAX_ARG_STRLEN: usize = 32 * 4096;

/// A validated request, ready to run.
pub(super) struct Prepared {
    pub(super) request: ExecRequest,
    pub(super) live: Arc<LiveStatus>,
    /// Absolute working directory, to read relative paths in error messages.
    pub(super) cwd: std::path::PathBuf,
}

pub(super) async fn prepare(
    ctx: &SharedContext,
    args: &ShellExecArgs,
) -> Result<Prepared, ToolError> {
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
        crate::tools::job_answer::compile_until(pattern)?;
    }
    if !args.background && args.wait_secs.is_some() {
        return Err(invalid(
            "`wait_secs` applies to a background job (`background: true`); a call without it \
             waits for the command to end, up to `timeout_secs`"
                .into(),
        ));
    }
    crate::tools::job_answer::wait_secs(args.wait_secs, 0)?;
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
            live: Some(Arc::clone(&live)),
            ..ExecRequest::new(
                Program::shell(&args.command)
                    .with_env(env)
                    .in_dir(Some(std::os::fd::OwnedFd::from(dir.into_std_file())))
                    .with_pty(
                        args.pty
                            .then(|| crate::confine::sandbox_init::wire::PtySize {
                                cols: args.cols.unwrap_or(DEFAULT_COLS),
                                rows: args.rows.unwrap_or(DEFAULT_ROWS),
                            }),
                    ),
                timeout,
                crate::tools::capture_spec(ctx, "shell", "stdout"),
                crate::tools::capture_spec(ctx, "shell", "stderr"),
            )
            .with_stdin(args.stdin.clone().map(String::into_bytes))
        },
        live,
        cwd: cwd_path,
    })
}
