//! The tools of SPEC.md, one file each: argument structs (their schema is the contract),
//! output structs, and the function that turns arguments into a request for the stages to
//! the right (workspace, exec, lint) and shapes the answer.
//!
//! Tools know nothing of the wire: `server` registers them with rmcp and passes a
//! [`ToolContext`]; tools return `CallToolResult`s built by `shape`.

pub mod code_interpreter;
pub mod edit_file;
pub mod read_file;
pub mod shell_exec;
pub mod write_file;

use crate::audit::{AuditLog, AuditRecord};
use crate::exec::{CaptureSpec, Executor};
use crate::policy::Policy;
use crate::shape::{ErrorKind, ToolError};
use crate::workspace::{PathError, Workspace, WriteRules};
use rmcp::model::CallToolResult;
use std::sync::Arc;
use std::time::Instant;

/// What every tool call may use. Shared by all calls and, over HTTP, by every MCP session
/// (`Arc`); what is one session's own (its interpreter sessions, approvals, cancellation) is
/// `server::scope`.
pub struct ToolContext {
    pub policy: Policy,
    pub workspace: Workspace,
    pub executor: Arc<Executor>,
    pub lint: crate::lint::Linting,
    /// The confined parser worker: command analysis for the rules (and, through `lint`, the
    /// syntax check). The server never runs a grammar itself.
    pub parser: Arc<crate::parser::ParserClient>,
    pub audit: Option<AuditLog>,
    /// Bounds how many shell commands and interpreter cells run at once; the rest wait their
    /// turn.
    pub slots: tokio::sync::Semaphore,
    /// Serialises read-modify-write of files, so two edits of one file cannot interleave.
    pub file_lock: tokio::sync::Mutex<()>,
    /// Workspace-relative patterns the file tools refuse to write: the policy's list plus
    /// every policy source file inside the workspace ([`protected_paths`]).
    pub protected: Vec<String>,
}

pub type SharedContext = Arc<ToolContext>;

impl ToolContext {
    /// The rules every file-tool write must pass, judged by the workspace on the path as it
    /// resolves on disk (see `workspace::write`).
    pub fn write_rules(&self) -> WriteRules<'_> {
        let fs = &self.policy.filesystem;
        WriteRules {
            protected: &self.protected,
            writable_only: (fs.workspace == crate::policy::WorkspaceAccess::ReadOnly)
                .then_some(fs.workspace_writable.as_slice()),
        }
    }

    /// A failed write as a tool error; protection refusals name the policy to change.
    pub fn write_error(&self, e: &PathError) -> ToolError {
        let fs = &self.policy.filesystem;
        match e {
            PathError::Protected { entry, .. } => ToolError::new(
                ErrorKind::Denied,
                format!(
                    "{e}, or to remove `{entry}` from `filesystem.protected` in the policy ({}).",
                    self.policy.origin
                ),
            ),
            PathError::NotWritable { .. } => ToolError::new(
                ErrorKind::Denied,
                format!(
                    "{e}: policy `{}` makes the workspace read-only except {}. Or ask the \
                     operator to add the directory to `filesystem.workspace_writable` ({}).",
                    self.policy.name,
                    if fs.workspace_writable.is_empty() {
                        "nothing".to_owned()
                    } else {
                        fs.workspace_writable.join(", ")
                    },
                    self.policy.origin
                ),
            ),
            other => path_error(other),
        }
    }

    /// The most bytes a write or edit may leave in a file: the policy's file-size limit
    /// (the same RLIMIT_FSIZE a command gets), refused before the content is built.
    pub fn max_file_bytes(&self) -> u64 {
        self.policy.limits.file_size_bytes
    }

    /// Records a finished call in the audit log, if there is one.
    pub fn audit(
        &self,
        tool: &str,
        arguments: &impl serde::Serialize,
        decision: &str,
        outcome: serde_json::Value,
        started: Instant,
    ) {
        let Some(log) = &self.audit else { return };
        let arguments = serde_json::to_value(arguments).unwrap_or_default();
        log.record(&AuditRecord {
            time: crate::audit::now_rfc3339(),
            tool,
            arguments: crate::audit::loggable(&arguments, log.keeps_values()),
            decision,
            outcome,
            duration_ms: started.elapsed().as_millis() as u64,
            enforcement: self.executor.confinement().enforcement().level,
        });
    }
}

/// How a tool captures one output stream: the policy's memory cap, then a spill file named
/// `<prefix>-<stream>` in `.cordon/outputs/`.
pub fn capture_spec(
    ctx: &SharedContext,
    prefix: &'static str,
    stream: &'static str,
) -> CaptureSpec {
    let ctx = Arc::clone(ctx);
    CaptureSpec {
        memory_cap: ctx.policy.output.memory_cap_bytes,
        spill: Some(Box::new(move || {
            ctx.workspace
                .create_spill_std(&format!("{prefix}-{stream}"))
        })),
        tee: None,
    }
}

/// The SPEC kind for a path problem.
pub fn path_error(e: &PathError) -> ToolError {
    ToolError::new(kind_from_spec(e.kind_str()), e.to_string())
}

/// Maps a SPEC kind name (as the lower layers report it) to the typed kind.
pub fn kind_from_spec(kind: &str) -> ErrorKind {
    match kind {
        "invalid_argument" => ErrorKind::InvalidArgument,
        "path_escape" => ErrorKind::PathEscape,
        "not_found" => ErrorKind::NotFound,
        "denied" => ErrorKind::Denied,
        "timeout" => ErrorKind::Timeout,
        "resource_limit" => ErrorKind::ResourceLimit,
        "exit_status" => ErrorKind::ExitStatus,
        "exception" => ErrorKind::Exception,
        "io" => ErrorKind::Io,
        _ => ErrorKind::Internal,
    }
}

/// Text block for a failed call: the kind and what to do, first, where a model looks.
pub fn error_text(e: &ToolError) -> String {
    format!(
        "error [{}]: {}",
        serde_json::to_value(e.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        e.message
    )
}

/// An argument repeated back in an error result, cut so a huge bad argument is not sent back
/// to the model whole.
pub fn echo_arg(arg: &str) -> String {
    const MAX: usize = 200;
    if arg.chars().count() <= MAX {
        return arg.to_owned();
    }
    let kept: String = arg.chars().take(MAX).collect();
    format!("{kept}…({} chars)", arg.chars().count())
}

/// The protected set the server enforces: `filesystem.protected`, plus each file the policy
/// was read from (itself and its whole `extends` chain) that lies inside the workspace, so no
/// call can rewrite the rules it runs under. `*` in a file name is a pattern character, so a
/// policy file whose name holds one protects a little more, never less.
pub fn protected_paths(policy: &Policy, workspace_root: &std::path::Path) -> Vec<String> {
    policy.protected_patterns(workspace_root)
}

/// No tool result may take more than this on the wire (JSON-RPC framing included), whatever
/// the file or the linters produced: hosts cut or reject far smaller answers, and building a
/// bigger one costs the server memory on behalf of a call.
pub const MAX_RESULT_BYTES: usize = 1024 * 1024;

/// How much of a result's budget the lint diagnostics may take; the rest is for the diff or
/// content, the text block and the framing.
const LINT_BUDGET_BYTES: usize = 256 * 1024;

/// One diagnostic message is cut to this many characters in a result.
const MAX_DIAGNOSTIC_CHARS: usize = 1000;

/// Keeps a lint report within [`LINT_BUDGET_BYTES`] when serialized: long messages are cut and
/// diagnostics past the budget dropped (they are sorted most relevant first). Returns how many
/// were dropped, for the caller to say.
pub fn fit_lint(lint: &mut crate::lint::LintReport) -> usize {
    let mut used = 0usize;
    let mut kept = 0usize;
    for d in &mut lint.diagnostics {
        if let Some((cut, _)) = d.message.char_indices().nth(MAX_DIAGNOSTIC_CHARS) {
            d.message.truncate(cut);
            d.message.push('…');
        }
        let size = serde_json::to_vec(&*d).map_or(usize::MAX, |v| v.len());
        if used.saturating_add(size) > LINT_BUDGET_BYTES {
            break;
        }
        used += size;
        kept += 1;
    }
    let dropped = lint.diagnostics.len() - kept;
    lint.diagnostics.truncate(kept);
    dropped
}

/// The size of a result on the wire (its JSON), for the last check against
/// [`MAX_RESULT_BYTES`]. Tools bound their parts so that check does not fire.
pub fn wire_size(result: &CallToolResult) -> usize {
    serde_json::to_vec(result).map_or(usize::MAX, |v| v.len())
}

/// The error for a result that would still exceed [`MAX_RESULT_BYTES`]; `what_happened` says
/// what the call did (a write may already have landed).
pub fn oversized_error(size: usize, what_happened: &str) -> ToolError {
    ToolError::new(
        ErrorKind::ResourceLimit,
        format!(
            "the result of this call would be {size} bytes, more than the {MAX_RESULT_BYTES} a \
             result may take; {what_happened}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::{Diagnostic, LintReport, Severity};

    #[test]
    fn lint_reports_are_cut_to_their_budget() {
        let diags: Vec<Diagnostic> = (0..20_000)
            .map(|i| Diagnostic::at(i, 1, Severity::Warning, None, "m".repeat(5000), "x"))
            .collect();
        let mut lint = LintReport::from_diagnostics(vec!["x".into()], diags);
        let dropped = fit_lint(&mut lint);
        let size = serde_json::to_vec(&lint).unwrap().len();
        assert!(size <= LINT_BUDGET_BYTES + 1024, "{size}");
        assert_eq!(dropped + lint.diagnostics.len(), 20_000);
        assert!(dropped > 0);
        assert!(
            lint.diagnostics
                .iter()
                .all(|d| d.message.chars().count() <= MAX_DIAGNOSTIC_CHARS + 1)
        );
        // A small report is left alone.
        let mut small = LintReport::from_diagnostics(
            vec!["x".into()],
            vec![Diagnostic::at(1, 1, Severity::Error, None, "short", "x")],
        );
        assert_eq!(fit_lint(&mut small), 0);
        assert_eq!(small.diagnostics[0].message, "short");
    }

    #[test]
    fn the_policy_file_and_its_extends_chain_join_the_protected_set() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(root.join("conf")).unwrap();
        let outside = t.path().canonicalize().unwrap().join("grand.toml");
        std::fs::write(&outside, "extends = \"default\"\n").unwrap();
        std::fs::write(
            root.join("conf/base.toml"),
            format!("extends = {:?}\n", outside.display().to_string()),
        )
        .unwrap();
        std::fs::write(root.join("conf/child.toml"), "extends = \"base.toml\"\n").unwrap();
        let policy = Policy::load(root.join("conf/child.toml").to_str().unwrap()).unwrap();
        assert_eq!(policy.sources.len(), 3, "{:?}", policy.sources);
        let protected = protected_paths(&policy, &root);
        assert!(
            protected.contains(&"conf/child.toml".to_owned()),
            "{protected:?}"
        );
        assert!(
            protected.contains(&"conf/base.toml".to_owned()),
            "{protected:?}"
        );
        // The one outside the workspace is not a workspace path at all.
        assert!(
            !protected.iter().any(|p| p.contains("grand")),
            "{protected:?}"
        );
        assert!(protected.contains(&".git/hooks".to_owned()));
        // Built-in policies are no files.
        assert!(Policy::builtin_default().sources.is_empty());
    }
}
