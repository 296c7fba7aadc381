//! `edit_file`: exact, ordered, all-or-nothing replacements in a text file, then lint.
//!
//! Owns the argument contract and the result. Matching and its error messages are
//! `files::edit`, the diff `files::diff`, the atomic write `workspace`, the checks `lint`.

use super::{SharedContext, error_text, kind_from_spec, path_error};
use crate::files::{self, Edit};
use crate::lint::LintReport;
use crate::shape::{ToolError, tool_result};
use rmcp::model::CallToolResult;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Instant;

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// File to edit, relative to the workspace root.
    pub path: String,
    /// Replacements, applied in order, each to the result of the previous ones.
    #[schemars(length(min = 1, max = 100))]
    pub edits: Vec<EditArg>,
    /// Only report what would change (diff, replacement count); write nothing.
    #[serde(default)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArg {
    /// Exact text to find (bytes, whitespace and line endings included; nothing is normalised).
    pub old_string: String,
    /// Text to put in its place.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    pub replace_all: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct EditFileOutput {
    /// Workspace-relative path of the file.
    pub path: String,
    /// Total number of replacements made (or that would be made, on a dry run).
    pub replacements: u64,
    /// Unified diff of the change.
    pub diff: String,
    /// True when the file was written; false on a dry run or an error.
    pub applied: bool,
    pub lint: LintReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

const MAX_EDITS: usize = 100;

pub async fn run(ctx: SharedContext, args: EditFileArgs) -> CallToolResult {
    let started = Instant::now();
    let (output, text, is_error) = match edit(&ctx, &args).await {
        Ok(output) => {
            let verb = if output.applied {
                "edited"
            } else {
                "dry run, nothing written:"
            };
            let text = format!(
                "{verb} {} ({} replacement{})\n{}{}",
                output.path,
                output.replacements,
                if output.replacements == 1 { "" } else { "s" },
                output.diff,
                output.lint.summary(10)
            );
            (output, text, false)
        }
        Err(error) => {
            let text = error_text(&error);
            (
                EditFileOutput {
                    path: super::echo_arg(&args.path),
                    replacements: 0,
                    diff: String::new(),
                    applied: false,
                    lint: LintReport::skipped("nothing was changed"),
                    error: Some(error),
                },
                text,
                true,
            )
        }
    };
    ctx.audit(
        "edit_file",
        &args,
        "allow",
        serde_json::json!({
            "replacements": output.replacements,
            "applied": output.applied,
            "lint": output.lint.status,
            "error": output.error.as_ref().map(|e| e.kind),
        }),
        started,
    );
    tool_result(&output, text, is_error)
}

async fn edit(ctx: &SharedContext, args: &EditFileArgs) -> Result<EditFileOutput, ToolError> {
    if args.edits.is_empty() || args.edits.len() > MAX_EDITS {
        return Err(ToolError::new(
            crate::shape::ErrorKind::InvalidArgument,
            format!(
                "`edits` has {} entries; pass between 1 and {MAX_EDITS}. Nothing was changed.",
                args.edits.len()
            ),
        ));
    }
    let rel = ctx
        .workspace
        .resolve_arg(&args.path)
        .map_err(|e| path_error(&e))?;
    if !args.dry_run {
        ctx.refuse_protected(&rel)?;
    }
    // Read, match and write under one lock, so two edits of the same file cannot interleave.
    let _guard = ctx.file_lock.lock().await;
    let original = ctx
        .workspace
        .read_bytes_limited(&rel, crate::workspace::MAX_READ_BYTES)
        .map_err(|e| path_error(&e))?;
    let edits: Vec<Edit> = args
        .edits
        .iter()
        .map(|e| Edit {
            old_string: e.old_string.clone(),
            new_string: e.new_string.clone(),
            replace_all: e.replace_all,
        })
        .collect();
    let outcome = files::apply_edits(&original, &edits)
        .map_err(|e| ToolError::new(kind_from_spec(e.kind_str()), e.to_string()))?;
    // apply_edits has already refused non-UTF-8 content.
    let before = String::from_utf8_lossy(&original).into_owned();
    let diff = files::unified_diff(rel.as_str(), &before, &outcome.new_content);
    if args.dry_run {
        return Ok(EditFileOutput {
            path: rel.as_str().to_owned(),
            replacements: outcome.replacements as u64,
            diff,
            applied: false,
            lint: LintReport::skipped("dry run: nothing was written"),
            error: None,
        });
    }
    let report = ctx
        .workspace
        .write_atomic(&rel, outcome.new_content.as_bytes(), false)
        .map_err(|e| path_error(&e))?;
    let written = report.via_symlink.unwrap_or(rel);
    let lint = ctx
        .lint
        .check(written.as_str(), Some(&before), &outcome.new_content)
        .await;
    Ok(EditFileOutput {
        path: written.as_str().to_owned(),
        replacements: outcome.replacements as u64,
        diff,
        applied: true,
        lint,
        error: None,
    })
}
