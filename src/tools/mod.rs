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
use crate::workspace::{PathError, Workspace};
use std::sync::Arc;
use std::time::Instant;

/// What every tool call may use. Shared by all calls (`Arc`).
pub struct ToolContext {
    pub policy: Policy,
    pub workspace: Workspace,
    pub executor: Arc<Executor>,
    /// The `code_interpreter` sessions.
    pub interpreter: Arc<crate::interpreter::SessionManager>,
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
    /// Workspace-relative paths the file tools refuse to write (policy + the policy file
    /// itself when it lies in the workspace).
    pub protected: Vec<String>,
}

pub type SharedContext = Arc<ToolContext>;

impl ToolContext {
    /// Refuses a write into a protected path, naming the rule and how to change it.
    pub fn refuse_protected(&self, rel: &crate::workspace::RelPath) -> Result<(), ToolError> {
        let fs = &self.policy.filesystem;
        if fs.workspace == crate::policy::WorkspaceAccess::ReadOnly
            && self
                .workspace
                .protected_match(rel, &fs.workspace_writable)
                .is_none()
        {
            return Err(ToolError::new(
                ErrorKind::Denied,
                format!(
                    "`{rel}` is not writable: policy `{}` makes the workspace read-only except \
                     {}. Write inside one of those, or ask the operator to add the directory \
                     to `filesystem.workspace_writable` ({}).",
                    self.policy.name,
                    if fs.workspace_writable.is_empty() {
                        "nothing".to_owned()
                    } else {
                        fs.workspace_writable.join(", ")
                    },
                    self.policy.origin
                ),
            ));
        }
        match self.workspace.protected_match(rel, &self.protected) {
            None => Ok(()),
            Some(entry) => Err(ToolError::new(
                ErrorKind::Denied,
                format!(
                    "`{rel}` is inside the protected path `{entry}`: files there run or are \
                     trusted outside the sandbox (git hooks, git config, cordon's own state, \
                     policy files), so the file tools never write them. Ask the operator to \
                     make the change, or to remove `{entry}` from `filesystem.protected` in \
                     the policy ({}).",
                    self.policy.origin
                ),
            )),
        }
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
            arguments: crate::audit::shorten(&arguments),
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
