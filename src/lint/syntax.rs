//! The syntax check as lint reports it: the parser's [`SyntaxError`]s (found by tree-sitter in
//! the confined parser worker, `crate::parser::syntax`) become [`Diagnostic`]s with
//! `source = "syntax"`, severity `error` and a code naming the kind of error.
//!
//! Owns only that conversion. Which grammar applies and where the errors are is the parser's;
//! asking the worker and folding the result into a report is `runner`'s.

use crate::lint::diagnostic::{Diagnostic, Severity};
use crate::parser::syntax::{ErrorKind, SyntaxError};

/// `source` of every diagnostic of the syntax check.
pub(crate) const SYNTAX_SOURCE: &str = "syntax";

/// The diagnostic `code` of a kind of syntax error.
pub(crate) fn code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Unexpected => "syntax-error",
        ErrorKind::Missing => "missing-token",
    }
}

/// One syntax error as a diagnostic (not `introduced`: `mark_introduced` decides that).
pub(crate) fn diagnostic(error: SyntaxError) -> Diagnostic {
    Diagnostic {
        line: error.line,
        column: error.column,
        end_line: error.end_line,
        end_column: error.end_column,
        severity: Severity::Error,
        code: Some(code(error.kind).to_owned()),
        message: error.message,
        source: SYNTAX_SOURCE.to_owned(),
        introduced: false,
    }
}

/// Every error of one check, in order.
pub fn diagnostics(errors: Vec<SyntaxError>) -> Vec<Diagnostic> {
    errors.into_iter().map(diagnostic).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_become_error_diagnostics_of_the_syntax_source() {
        let missing = SyntaxError {
            line: 2,
            column: 14,
            end_line: 2,
            end_column: 14,
            kind: ErrorKind::Missing,
            message: "missing `fi`".into(),
        };
        let d = diagnostic(missing);
        assert_eq!((d.line, d.column, d.end_line, d.end_column), (2, 14, 2, 14));
        assert_eq!(d.severity, Severity::Error);
        assert_eq!(d.code.as_deref(), Some("missing-token"));
        assert_eq!((d.source.as_str(), d.introduced), ("syntax", false));
        assert_eq!(code(ErrorKind::Unexpected), "syntax-error");
    }
}
