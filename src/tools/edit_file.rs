//! `edit_file`: exact, ordered, all-or-nothing replacements in a text file, then lint.
//!
//! Owns the argument contract and the result, and bounding it: the edited content may not
//! outgrow the file-size limit (checked before it is built, in `files::edit`), and the diff is
//! rendered into a sink that keeps only its ends in memory, spills the whole, and is cut like
//! long command output. Matching and its error messages are `files::edit`, the diff
//! `files::diff`, the atomic write and the protected-path decision `workspace`, the checks
//! `lint`.

use super::{Done, SharedContext, Tool};
use crate::audit::Outcome;
use crate::exec::Captured;
use crate::files::{self, Edit};
use crate::lint::LintReport;
use crate::policy::Request;
use crate::runtime::Runtime;
use crate::runtime::Session;
use crate::shape::{ShapedStream, ToolError, ToolOutcome, shape_stream};
use crate::workspace::{RelPath, WriteReport};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
pub(crate) struct EditFileOutput {
    /// The checkpoint that restores the workspace to before this call (`checkpoint` tool),
    /// or null when the call changed nothing.
    pub checkpoint: Option<String>,
    /// Workspace-relative path of the file.
    pub path: String,
    /// Total number of replacements made (or that would be made, on a dry run).
    pub replacements: u64,
    /// Unified diff of the change; a long one is cut like long command output (first and last
    /// lines, with a marker saying what was left out and where the whole diff is).
    pub diff: String,
    /// Workspace-relative path of the complete diff when `diff` was cut, else null.
    pub full_diff: Option<String>,
    /// Permission bits of the old file that the edited one does not keep (`setuid`,
    /// `setgid`): the server may run as root, so it never writes a set-id file.
    pub dropped_permissions: Vec<String>,
    /// Lint diagnostics left out of `lint.diagnostics` to keep the result small.
    pub lint_omitted: u64,
    /// True when the file was written; false on a dry run or an error.
    pub applied: bool,
    pub lint: LintReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

const MAX_EDITS: usize = 100;

pub(crate) struct EditFile;

impl Tool for EditFile {
    const NAME: &'static str = "edit_file";
    type Args = EditFileArgs;
    type Output = EditFileOutput;

    fn failed(_ctx: &Session, args: &EditFileArgs, error: ToolError) -> EditFileOutput {
        EditFileOutput {
            checkpoint: None,
            path: super::echo_arg(&args.path),
            replacements: 0,
            diff: String::new(),
            full_diff: None,
            dropped_permissions: Vec::new(),
            lint_omitted: 0,
            applied: false,
            lint: LintReport::skipped("nothing was changed"),
            error: Some(error),
        }
    }

    fn changes(args: &EditFileArgs) -> Option<String> {
        (!args.dry_run).then(|| format!("edit {}", super::echo_arg(&args.path)))
    }

    fn set_checkpoint(output: &mut EditFileOutput, id: Option<String>) {
        output.checkpoint = id;
    }

    fn audit(output: &EditFileOutput, _is_error: bool) -> Outcome {
        Outcome::Edit {
            applied: output.applied,
            error: output.error.as_ref().map(|e| e.kind),
            lint: output.lint.status,
            replacements: output.replacements,
        }
    }

    fn oversized(args: &EditFileArgs, output: EditFileOutput, size: usize) -> Option<Done<Self>> {
        let what = if output.applied {
            "the edit was applied; check the file with read_file"
        } else {
            "nothing was changed"
        };
        let error = super::oversized_error(size, what);
        let (lint, lint_omitted) = super::lint_left_out(&output.lint, output.lint_omitted);
        let smaller = EditFileOutput {
            checkpoint: None,
            path: super::echo_arg(&args.path),
            replacements: output.replacements,
            diff: String::new(),
            full_diff: output.full_diff,
            dropped_permissions: output.dropped_permissions,
            lint_omitted,
            applied: output.applied,
            lint,
            error: Some(error.clone()),
        };
        Some(Done::error(smaller, &error))
    }
}

pub(crate) async fn run(ctx: SharedContext, args: EditFileArgs) -> ToolOutcome {
    let work = async {
        let output = edit(&ctx, &args).await?;
        let verb = if output.applied {
            "edited"
        } else {
            "dry run, nothing written:"
        };
        let text = format!(
            "{verb} {} ({} replacement{}){}\n{}{}{}",
            output.path,
            output.replacements,
            if output.replacements == 1 { "" } else { "s" },
            super::write_file::dropped_note(&output.dropped_permissions),
            output.diff,
            output.lint.summary(10),
            super::write_file::omitted_note(output.lint_omitted),
        );
        Ok(Done::ok(output, text))
    };
    super::run::<EditFile>(&ctx, &args, Request::EditFile, work).await
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
    let rt = &ctx.runtime;
    // Read, match, write and lint under the file's lock, so two edits of the same file cannot
    // interleave (and lint reads back this edit's content).
    let (rel, _guard) = super::resolve_and_lock(ctx, &args.path).await?;
    let edits: Vec<Edit> = args
        .edits
        .iter()
        .map(|e| Edit {
            old_string: e.old_string.clone(),
            new_string: e.new_string.clone(),
            replace_all: e.replace_all,
        })
        .collect();
    let dry_run = args.dry_run;
    // Reading, matching, diffing (it may spill) and writing are all blocking work.
    let applied = rt
        .blocking(move |rt| apply_and_write(rt, rel, &edits, dry_run))
        .await?;
    let Applied {
        rel,
        before,
        after,
        replacements,
        diff,
        report,
    } = applied;
    let Some(report) = report else {
        return Ok(EditFileOutput {
            checkpoint: None,
            path: rel.as_str().to_owned(),
            replacements,
            diff: diff.text,
            full_diff: diff.full_output,
            dropped_permissions: Vec::new(),
            lint_omitted: 0,
            applied: false,
            lint: LintReport::skipped("dry run: nothing was written"),
            error: None,
        });
    };
    let mut lint = rt.lint.check(rel.as_str(), Some(&before), &after).await;
    let lint_omitted = super::fit_lint(&mut lint) as u64;
    Ok(EditFileOutput {
        checkpoint: None,
        path: rel.as_str().to_owned(),
        replacements,
        diff: diff.text,
        full_diff: diff.full_output,
        dropped_permissions: super::dropped_bits(&report),
        lint_omitted,
        applied: true,
        lint,
        error: None,
    })
}

/// What the blocking half of an edit produced.
struct Applied {
    rel: RelPath,
    before: String,
    after: String,
    replacements: u64,
    diff: ShapedStream,
    /// None on a dry run (nothing was written).
    report: Option<WriteReport>,
}

/// Reads the file, applies the edits, renders the diff and (unless `dry_run`) writes the
/// result: the part of an edit that touches the disk.
fn apply_and_write(
    rt: &Runtime,
    rel: RelPath,
    edits: &[Edit],
    dry_run: bool,
) -> Result<Applied, ToolError> {
    let original = rt
        .workspace
        .read_bytes_limited(&rel, crate::workspace::MAX_READ_BYTES)
        .map_err(|e| ToolError::from(&e))?;
    // The result must stay writable (policy file-size limit) and editable again (read limit);
    // growth is checked before each edit's result is built.
    let max_bytes = rt.max_file_bytes().min(crate::workspace::MAX_READ_BYTES);
    let outcome = files::apply_edits_within(
        &original,
        edits,
        usize::try_from(max_bytes).unwrap_or(usize::MAX),
    )
    .map_err(|e| ToolError::from(&e))?;
    // apply_edits has already refused non-UTF-8 content.
    let before = String::from_utf8_lossy(&original).into_owned();
    drop(original);
    let diff = shaped_diff(rt, rel.as_str(), &before, &outcome.new_content);
    let report = if dry_run {
        None
    } else {
        Some(
            rt.workspace
                .write_checked(
                    &rel,
                    outcome.new_content.as_bytes(),
                    false,
                    &rt.write_rules(),
                )
                .map_err(|e| rt.write_error(&e))?,
        )
    };
    Ok(Applied {
        rel,
        before,
        after: outcome.new_content,
        replacements: outcome.replacements as u64,
        diff,
        report,
    })
}

/// The diff as the result shows it: rendered into a sink that keeps only the first and last
/// part in memory (the output memory cap) and streams the whole to a spill file once it is
/// larger, then cut by the same rule as long command output.
fn shaped_diff(rt: &Runtime, path: &str, old: &str, new: &str) -> ShapedStream {
    let open = || rt.workspace.create_spill_std("edit_file-diff");
    let mut sink = DiffSink::new(rt.policy.output.memory_cap_bytes, &open);
    files::write_unified_diff(&mut sink, path, old, new);
    let captured = sink.finish();
    let spill = |_: &str| rt.workspace.create_spill_std("edit_file-diff");
    shape_stream(&captured, &rt.policy.output, "diff", Some(&spill))
}

/// A `fmt::Write` that keeps a head and a tail of what it is given, up to `memory_cap` bytes
/// in all, counts bytes and lines, and once the text outgrows the cap writes all of it to a
/// spill file opened on demand.
struct DiffSink<'a> {
    memory_cap: usize,
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    total_bytes: u64,
    total_lines: u64,
    open: &'a dyn Fn() -> std::io::Result<(String, std::fs::File)>,
    spill: Option<(String, std::fs::File)>,
    spill_error: Option<String>,
}

impl<'a> DiffSink<'a> {
    fn new(
        memory_cap: usize,
        open: &'a dyn Fn() -> std::io::Result<(String, std::fs::File)>,
    ) -> Self {
        DiffSink {
            memory_cap: memory_cap.max(2),
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            total_bytes: 0,
            total_lines: 0,
            open,
            spill: None,
            spill_error: None,
        }
    }

    fn finish(self) -> Captured {
        Captured {
            head: self.head,
            tail: self.tail.into(),
            total_bytes: self.total_bytes,
            total_lines: self.total_lines,
            spill_path: self.spill.map(|(path, _)| path),
            spill_error: self.spill_error,
        }
    }
}

impl std::fmt::Write for DiffSink<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        use std::io::Write as _;
        let bytes = s.as_bytes();
        self.total_bytes += bytes.len() as u64;
        self.total_lines += bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        let held = self.head.len() + self.tail.len();
        // The moment the whole no longer fits, everything so far goes to the spill file
        // (nothing has been dropped yet), and from then on every piece does.
        if self.spill.is_none()
            && self.spill_error.is_none()
            && held + bytes.len() > self.memory_cap
        {
            match (self.open)() {
                Ok((path, mut file)) => {
                    let (a, b) = self.tail.as_slices();
                    let written = file
                        .write_all(&self.head)
                        .and_then(|()| file.write_all(a))
                        .and_then(|()| file.write_all(b));
                    match written {
                        Ok(()) => self.spill = Some((path, file)),
                        Err(e) => {
                            self.spill_error = Some(format!("could not save the full diff: {e}"))
                        }
                    }
                }
                Err(e) => self.spill_error = Some(format!("could not save the full diff: {e}")),
            }
        }
        if let Some((_, file)) = &mut self.spill
            && let Err(e) = file.write_all(bytes)
        {
            self.spill_error = Some(format!("the saved diff is incomplete: {e}"));
            self.spill = None;
        }
        let half = self.memory_cap / 2;
        let room = half.saturating_sub(self.head.len());
        let (to_head, to_tail) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        self.tail.extend(to_tail);
        if self.tail.len() > half {
            let excess = self.tail.len() - half;
            self.tail.drain(..excess);
        }
        Ok(())
    }
}
