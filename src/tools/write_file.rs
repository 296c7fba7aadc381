//! `write_file`: create or replace a file atomically, then lint it.
//!
//! Owns the argument contract and the result. Atomicity and path rooting are `workspace`;
//! the checks after the write are `lint`. The write is never rolled back by lint findings:
//! the agent decides what to do with them.

use super::{SharedContext, error_text, path_error};
use crate::lint::LintReport;
use crate::shape::{ToolError, tool_result};
use rmcp::model::CallToolResult;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Instant;

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
pub struct WriteFileOutput {
    /// Workspace-relative path of the file written.
    pub path: String,
    /// Bytes written.
    pub bytes: u64,
    /// True when the file did not exist before.
    pub created: bool,
    pub lint: LintReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

pub async fn run(ctx: SharedContext, args: WriteFileArgs) -> CallToolResult {
    let started = Instant::now();
    let (output, text, is_error) = match write(&ctx, &args).await {
        Ok(output) => {
            let text = format!(
                "{} {} ({} bytes)\n{}",
                if output.created {
                    "created"
                } else {
                    "replaced"
                },
                output.path,
                output.bytes,
                output.lint.summary(10)
            );
            (output, text, false)
        }
        Err(error) => {
            let text = error_text(&error);
            (
                WriteFileOutput {
                    path: super::echo_arg(&args.path),
                    bytes: 0,
                    created: false,
                    lint: LintReport::skipped("nothing was written"),
                    error: Some(error),
                },
                text,
                true,
            )
        }
    };
    ctx.audit(
        "write_file",
        &args,
        "allow",
        serde_json::json!({
            "bytes": output.bytes,
            "created": output.created,
            "lint": output.lint.status,
            "error": output.error.as_ref().map(|e| e.kind),
        }),
        started,
    );
    tool_result(&output, text, is_error)
}

async fn write(ctx: &SharedContext, args: &WriteFileArgs) -> Result<WriteFileOutput, ToolError> {
    let rel = ctx
        .workspace
        .resolve_arg(&args.path)
        .map_err(|e| path_error(&e))?;
    ctx.refuse_protected(&rel)?;
    let _guard = ctx.file_lock.lock().await;
    // The previous content, when it is text, lets lint tell new findings from old ones.
    let before = ctx
        .workspace
        .read_bytes_limited(&rel, crate::workspace::MAX_READ_BYTES)
        .ok()
        .and_then(|b| String::from_utf8(b).ok());
    let report = ctx
        .workspace
        .write_atomic(&rel, args.content.as_bytes(), args.create_dirs)
        .map_err(|e| path_error(&e))?;
    let written = report.via_symlink.clone().unwrap_or(rel);
    let lint = ctx
        .lint
        .check(written.as_str(), before.as_deref(), &args.content)
        .await;
    Ok(WriteFileOutput {
        path: written.as_str().to_owned(),
        bytes: report.bytes,
        created: report.created,
        lint,
        error: None,
    })
}
