//! `read_file`: a window of lines of a text file in the workspace.
//!
//! Owns the argument contract and the result; line paging and binary refusal are
//! `files::read`, path rooting is `workspace`.

use super::{Done, SharedContext, Tool};
use crate::audit::Outcome;
use crate::files::{self, ReadLimits};
use crate::policy::Request;
use crate::runtime::Runtime;
use crate::runtime::Session;
use crate::shape::{ToolError, ToolOutcome};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// File to read, relative to the workspace root (e.g. "src/main.rs").
    pub path: String,
    /// 1-based line to start at.
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    pub offset: u64,
    /// Maximum number of lines to return.
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 100000))]
    pub limit: u64,
}

fn one() -> u64 {
    1
}

fn default_limit() -> u64 {
    files::read::DEFAULT_LIMIT as u64
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct ReadFileOutput {
    /// Workspace-relative path of the file.
    pub path: String,
    /// The lines, byte for byte (line endings included); usable as edit_file old_string.
    pub content: String,
    pub start_line: u64,
    pub end_line: u64,
    pub total_lines: u64,
    /// True when lines remain after end_line or an over-long line was cut.
    pub truncated: bool,
    /// The `offset` that continues where this window stopped (lines remain after end_line);
    /// null when the window reaches the end of the file.
    pub next_offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

pub(crate) struct ReadFile;

impl Tool for ReadFile {
    const NAME: &'static str = "read_file";
    type Args = ReadFileArgs;
    type Output = ReadFileOutput;

    fn failed(_ctx: &Session, args: &ReadFileArgs, error: ToolError) -> ReadFileOutput {
        ReadFileOutput {
            path: super::echo_arg(&args.path),
            error: Some(error),
            ..Default::default()
        }
    }

    fn audit(output: &ReadFileOutput, is_error: bool) -> Outcome {
        Outcome::Read {
            error: output.error.as_ref().map(|e| e.kind),
            ok: !is_error,
        }
    }

    fn oversized(args: &ReadFileArgs, _output: ReadFileOutput, size: usize) -> Option<Done<Self>> {
        let error =
            super::oversized_error(size, "nothing was read; ask for fewer lines with `limit`");
        let output = ReadFileOutput {
            path: super::echo_arg(&args.path),
            error: Some(error.clone()),
            ..Default::default()
        };
        Some(Done::error(output, &error))
    }
}

pub(crate) async fn run(ctx: SharedContext, args: ReadFileArgs) -> ToolOutcome {
    let (path, offset, limit) = (args.path.clone(), args.offset, args.limit);
    // Opening and reading the file is blocking work: it goes to the blocking pool.
    let work = async {
        let (output, note) = ctx
            .runtime
            .blocking(move |rt| read(rt, &path, offset, limit))
            .await?;
        {
            let mut text = format!(
                "{} lines {}-{} of {}{}\n",
                output.path,
                output.start_line,
                output.end_line,
                output.total_lines,
                match output.next_offset {
                    Some(next) => format!(" (more available: continue with offset={next})"),
                    None if output.truncated => " (long lines cut)".to_owned(),
                    None => String::new(),
                }
            );
            if let Some(note) = note {
                text.push_str(&format!("note: {note}\n"));
            }
            text.push_str(&output.content);
            Ok(Done::ok(output, text))
        }
    };
    super::run::<ReadFile>(&ctx, &args, Request::ReadFile, work).await
}

fn read(
    rt: &Runtime,
    path: &str,
    offset: u64,
    limit: u64,
) -> Result<(ReadFileOutput, Option<String>), ToolError> {
    let rel = rt
        .workspace
        .resolve_arg(path)
        .map_err(|e| ToolError::from(&e))?;
    let bytes = rt
        .workspace
        .read_bytes_limited(&rel, crate::workspace::MAX_READ_BYTES)
        .map_err(|e| ToolError::from(&e))?;
    let limits = ReadLimits {
        max_content_bytes: rt.policy.files.read_budget_bytes,
        ..ReadLimits::default()
    };
    let window = files::read_lines_with(
        &bytes,
        usize::try_from(offset).unwrap_or(usize::MAX),
        usize::try_from(limit).unwrap_or(usize::MAX),
        &limits,
    )
    .map_err(|e| ToolError::from(&e))?;
    Ok((
        ReadFileOutput {
            path: rel.as_str().to_owned(),
            content: window.content,
            start_line: window.start_line as u64,
            end_line: window.end_line as u64,
            total_lines: window.total_lines as u64,
            truncated: window.truncated,
            next_offset: (window.end_line < window.total_lines)
                .then_some(window.end_line as u64 + 1),
            error: None,
        },
        window.note,
    ))
}
