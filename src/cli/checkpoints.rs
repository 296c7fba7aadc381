//! `cordon checkpoints list|diff|restore`: the operator's side of the `checkpoint` tool, on a
//! workspace whether or not a server serves it at the same time (the store's lock orders
//! them: a restore here is recorded before the server's next call starts, which then sees it
//! as the newest state, not as a change of its own).
//!
//! Owns the terminal rendering (a table, or `--json`, the tool's own shapes); the work is
//! `crate::checkpoint`'s.

use crate::checkpoint::{CallInfo, CheckpointError, Checkpoints};
use crate::policy::Policy;
use std::fmt::Write;
use std::path::Path;

/// Why a `cordon checkpoints` command failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointsCliError {
    #[error(transparent)]
    Workspace(#[from] crate::workspace::OpenWorkspaceError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(
        "policy {0} turns checkpoints off (`[checkpoints] enabled = false`); pass the policy the \
         server uses with --policy"
    )]
    Disabled(String),
}

/// What to do.
pub enum Action<'a> {
    List,
    Diff { id: &'a str, to: Option<&'a str> },
    Restore { id: &'a str },
}

/// Runs `action` on the checkpoints of `workspace` (as `policy` bounds them); returns what to
/// print.
pub fn run(
    workspace: &Path,
    policy: &Policy,
    action: Action<'_>,
    json: bool,
) -> Result<String, CheckpointsCliError> {
    if !policy.checkpoints.enabled {
        return Err(CheckpointsCliError::Disabled(policy.origin.clone()));
    }
    let ws = crate::workspace::Workspace::open(workspace)?;
    let checkpoints = Checkpoints::open(ws.root(), ws.dir(), policy.checkpoints.settings())?;
    let mut out = String::new();
    match action {
        Action::List => {
            let (listed, budget) = checkpoints.list()?;
            if json {
                let value = serde_json::json!({"checkpoints": listed, "budget": budget});
                out = serde_json::to_string_pretty(&value).unwrap_or_default();
                out.push('\n');
            } else {
                let _ = writeln!(
                    out,
                    "{} checkpoints of {} ({} of {} bytes used by old versions, {} bytes for the \
                     current tree, {} dropped so far)",
                    budget.count,
                    ws.root().display(),
                    budget.bytes_used,
                    budget.bytes_max,
                    budget.current_bytes,
                    budget.dropped
                );
                for l in &listed {
                    let _ = writeln!(
                        out,
                        "{:<8} {}  {:<16} {:>5} files  {}",
                        l.id, l.created_at, l.tool, l.files_changed, l.summary
                    );
                    for n in &l.not_covered {
                        let _ = writeln!(
                            out,
                            "         not covered: {} ({})",
                            n.path,
                            n.not_covered.as_deref().unwrap_or_default()
                        );
                    }
                }
            }
        }
        Action::Diff { id, to } => {
            let diffed = checkpoints.diff(id, to)?;
            if json {
                let value = serde_json::json!({"files": diffed.files, "diff": diffed.text});
                out = serde_json::to_string_pretty(&value).unwrap_or_default();
                out.push('\n');
            } else {
                out = diffed.text;
            }
        }
        Action::Restore { id } => {
            let info = CallInfo {
                call: None,
                tool: "cordon checkpoints".into(),
                summary: format!("restore to {id} by the operator"),
            };
            let restored = checkpoints.restore(id, &info)?;
            if json {
                let skipped: Vec<_> = restored
                    .skipped
                    .iter()
                    .map(|(path, reason)| serde_json::json!({"path": path, "reason": reason}))
                    .collect();
                let value = serde_json::json!({
                    "files": restored.files,
                    "checkpoint": restored.checkpoint,
                    "not_restored": skipped,
                });
                out = serde_json::to_string_pretty(&value).unwrap_or_default();
                out.push('\n');
            } else {
                for f in &restored.files {
                    let _ = writeln!(out, "{:<9} {}", f.change, f.path);
                }
                for (path, reason) in &restored.skipped {
                    let _ = writeln!(out, "not restored: {path} ({reason})");
                }
                let _ = match &restored.checkpoint {
                    Some(undo) => writeln!(
                        out,
                        "restored to before {id}; undo with `cordon checkpoints restore {undo}`"
                    ),
                    None => writeln!(out, "the workspace already was as before {id}"),
                };
            }
        }
    }
    Ok(out)
}
