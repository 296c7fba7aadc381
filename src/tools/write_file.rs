//! `write_file`: create or replace a file atomically, then lint it.
//!
//! Owns the argument contract and the result (content over the policy's file-size limit is
//! refused before anything is touched). Atomicity, path rooting, protected paths and set-id
//! bits are `workspace`;
//! the checks after the write are `lint`. The write is never rolled back by lint findings:
//! the agent decides what to do with them.

use super::{Done, SharedContext, Tool};
use crate::audit::Outcome;
use crate::lint::LintReport;
use crate::policy::Request;
use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError, ToolOutcome};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// File to write, relative to the workspace root.
    pub path: String,
    /// The complete new content of the file.
    pub content: String,
    /// Create missing parent directories.
    #[serde(default = "yes")]
    pub create_dirs: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct WriteFileOutput {
    /// The checkpoint that restores the workspace to before this call (`checkpoint` tool),
    /// or null when the call changed nothing.
    pub checkpoint: Option<String>,
    /// Workspace-relative path of the file written.
    pub path: String,
    /// Bytes written.
    pub bytes: u64,
    /// True when the file did not exist before.
    pub created: bool,
    /// Permission bits of the replaced file that the new one does not keep (`setuid`,
    /// `setgid`): the server may run as root, so it never writes a set-id file.
    pub dropped_permissions: Vec<String>,
    /// Lint diagnostics left out of `lint.diagnostics` to keep the result small.
    pub lint_omitted: u64,
    pub lint: LintReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

pub(crate) struct WriteFile;

impl Tool for WriteFile {
    const NAME: &'static str = "write_file";
    type Args = WriteFileArgs;
    type Output = WriteFileOutput;

    fn failed(_ctx: &Session, args: &WriteFileArgs, error: ToolError) -> WriteFileOutput {
        WriteFileOutput {
            checkpoint: None,
            path: super::echo_arg(&args.path),
            bytes: 0,
            created: false,
            dropped_permissions: Vec::new(),
            lint_omitted: 0,
            lint: LintReport::skipped("nothing was written"),
            error: Some(error),
        }
    }

    fn changes(args: &WriteFileArgs) -> Option<String> {
        Some(format!("write {}", super::echo_arg(&args.path)))
    }

    fn set_checkpoint(output: &mut WriteFileOutput, id: Option<String>) {
        output.checkpoint = id;
    }

    fn audit(output: &WriteFileOutput, _is_error: bool) -> Outcome {
        Outcome::Write {
            bytes: output.bytes,
            created: output.created,
            error: output.error.as_ref().map(|e| e.kind),
            lint: output.lint.status,
        }
    }

    fn oversized(args: &WriteFileArgs, output: WriteFileOutput, size: usize) -> Option<Done<Self>> {
        let what = if output.error.is_none() {
            "the file was written; check it with read_file"
        } else {
            "nothing was written"
        };
        let error = super::oversized_error(size, what);
        let (lint, lint_omitted) = super::lint_left_out(&output.lint, output.lint_omitted);
        let smaller = WriteFileOutput {
            checkpoint: None,
            path: super::echo_arg(&args.path),
            bytes: output.bytes,
            created: output.created,
            dropped_permissions: output.dropped_permissions,
            lint_omitted,
            lint,
            error: Some(error.clone()),
        };
        Some(Done::error(smaller, &error))
    }
}

pub(crate) async fn run(ctx: SharedContext, args: WriteFileArgs) -> ToolOutcome {
    let work = async {
        let output = write(&ctx, &args).await?;
        let text = format!(
            "{} {} ({} bytes){}\n{}{}",
            if output.created {
                "created"
            } else {
                "replaced"
            },
            output.path,
            output.bytes,
            dropped_note(&output.dropped_permissions),
            output.lint.summary(10),
            omitted_note(output.lint_omitted),
        );
        Ok(Done::ok(output, text))
    };
    super::run::<WriteFile>(&ctx, &args, Request::WriteFile, work).await
}

/// The text-block note for dropped set-id bits.
pub(super) fn dropped_note(dropped: &[String]) -> String {
    if dropped.is_empty() {
        String::new()
    } else {
        format!(
            "; the {} bit{} of the old file {} not kept",
            dropped.join(" and "),
            if dropped.len() == 1 { "" } else { "s" },
            if dropped.len() == 1 { "was" } else { "were" }
        )
    }
}

/// The text-block note for diagnostics left out of the result.
pub(super) fn omitted_note(omitted: u64) -> String {
    if omitted == 0 {
        String::new()
    } else {
        format!(
            "\n  ({omitted} more diagnostics left out to keep the result small; run the linter \
             with shell_exec to see them all)"
        )
    }
}

async fn write(ctx: &SharedContext, args: &WriteFileArgs) -> Result<WriteFileOutput, ToolError> {
    let rt = &ctx.runtime;
    let size = args.content.len() as u64;
    if size > rt.max_file_bytes() {
        return Err(ToolError::new(
            ErrorKind::ResourceLimit,
            format!(
                "`content` is {size} bytes, more than the policy's file-size limit of {} bytes \
                 (limits.file_size_mb); nothing was written. Write a smaller file, or produce \
                 it with shell_exec",
                rt.max_file_bytes()
            ),
        ));
    }
    // The lock is held until lint has read the file back: another write of it waits, writes
    // of other files do not.
    let (rel, _guard) = super::resolve_and_lock(ctx, &args.path).await?;
    let content: std::sync::Arc<str> = args.content.as_str().into();
    let (create_dirs, written) = (args.create_dirs, std::sync::Arc::clone(&content));
    let (rel, before, report) = rt
        .blocking(move |rt| {
            // The previous content, when it is text, lets lint tell new findings from old ones.
            let before = rt
                .workspace
                .read_bytes_limited(&rel, crate::workspace::MAX_READ_BYTES)
                .ok()
                .and_then(|b| String::from_utf8(b).ok());
            let report = rt
                .workspace
                .write_checked(&rel, written.as_bytes(), create_dirs, &rt.write_rules())
                .map_err(|e| rt.write_error(&e));
            (rel, before, report)
        })
        .await;
    let report = report?;
    let mut lint = rt
        .lint
        .check(rel.as_str(), before.as_deref(), &content)
        .await;
    let lint_omitted = super::fit_lint(&mut lint) as u64;
    Ok(WriteFileOutput {
        checkpoint: None,
        path: rel.as_str().to_owned(),
        bytes: report.bytes,
        created: report.created,
        dropped_permissions: super::dropped_bits(&report),
        lint_omitted,
        lint,
        error: None,
    })
}
