//! The tools of SPEC.md, one file each: argument structs (their schema is the contract),
//! output structs, and the function that turns arguments into a request for the stages to
//! the right (workspace, exec, lint) and shapes the answer.
//!
//! Tools know nothing of the wire: `server` registers them with rmcp and passes the client's
//! [`Session`] (and through it the shared `Runtime`); tools return `CallToolResult`s built by
//! `shape`.

pub mod code_interpreter;
pub mod edit_file;
pub mod read_file;
pub mod shell_exec;
pub mod write_file;

use crate::exec::CaptureSpec;
use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError};
use rmcp::model::CallToolResult;
use std::sync::Arc;

/// What a tool call may use: the client's session and, through it, the shared runtime.
pub type SharedContext = Arc<Session>;

/// How a tool captures one output stream: the policy's memory cap, then a spill file named
/// `<prefix>-<stream>` in `.cordon/outputs/`.
pub fn capture_spec(
    ctx: &SharedContext,
    prefix: &'static str,
    stream: &'static str,
) -> CaptureSpec {
    let runtime = Arc::clone(&ctx.runtime);
    CaptureSpec {
        memory_cap: runtime.policy.output.memory_cap_bytes,
        spill: Some(Box::new(move || {
            runtime
                .workspace
                .create_spill_std(&format!("{prefix}-{stream}"))
        })),
        tee: None,
    }
}

/// An argument repeated back in an error result, cut so a huge bad argument is not sent back
/// to the model whole.
pub fn echo_arg(arg: &str) -> String {
    crate::text::shortened(arg, 200).into_owned()
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
        if let std::borrow::Cow::Owned(cut) =
            crate::text::ellipsized(&d.message, MAX_DIAGNOSTIC_CHARS)
        {
            d.message = cut;
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
}
