//! What every format reader shares: the [`ParseError`] a run that cannot be understood becomes,
//! the [`ParseContext`] a reader gets (the linter's name and the linted text), and the one way
//! a finding becomes a [`Diagnostic`].
//!
//! Owns no format: each format module reads its own output and calls in here.

use crate::lint::diagnostic::{Diagnostic, Severity};
use crate::lint::position::LineIndex;

/// Why a linter's run could not be turned into diagnostics.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("{linter}: output is not valid JSON: {source}")]
    InvalidJson {
        linter: String,
        source: serde_json::Error,
    },
    #[error("{linter}: unexpected output shape: {detail}")]
    UnexpectedShape { linter: String, detail: String },
    #[error("{linter}: produced no output (expected {expected})")]
    EmptyOutput {
        linter: String,
        expected: &'static str,
    },
    #[error("{linter}: exited with {}, which means it failed rather than reported findings", describe_exit(*.code))]
    UnexpectedExit { linter: String, code: Option<i32> },
    #[error("linter `{linter}` is misconfigured: {detail}")]
    InvalidConfig { linter: String, detail: String },
    #[error("linter `{linter}` has an invalid regex: {source}")]
    InvalidRegex {
        linter: String,
        source: regex::Error,
    },
}

fn describe_exit(code: Option<i32>) -> String {
    code.map_or_else(|| "a signal".to_string(), |c| format!("status {c}"))
}

/// What a parser needs besides the output: the linter's name (the diagnostics' `source`) and
/// the linted text, to convert byte or UTF-16 columns into characters.
pub(crate) struct ParseContext<'a> {
    pub name: &'a str,
    pub index: LineIndex<'a>,
}

impl ParseContext<'_> {
    pub(crate) fn shape_error(&self, detail: impl Into<String>) -> ParseError {
        ParseError::UnexpectedShape {
            linter: self.name.to_string(),
            detail: detail.into(),
        }
    }

    pub(crate) fn json<T: serde::de::DeserializeOwned>(
        &self,
        stdout: &str,
        expected: &'static str,
    ) -> Result<T, ParseError> {
        if stdout.trim().is_empty() {
            return Err(ParseError::EmptyOutput {
                linter: self.name.to_string(),
                expected,
            });
        }
        serde_json::from_str(stdout).map_err(|source| ParseError::InvalidJson {
            linter: self.name.to_string(),
            source,
        })
    }
}

/// Builds a diagnostic from 1-based line/character-column pairs, filling a missing end with the
/// start and never letting the end precede the start.
pub(crate) fn diagnostic(
    ctx: &ParseContext<'_>,
    start: (u32, u32),
    end: Option<(u32, u32)>,
    severity: Severity,
    code: Option<String>,
    message: String,
) -> Diagnostic {
    let (line, column) = (start.0.max(1), start.1.max(1));
    let (end_line, end_column) = end.map_or((line, column), |(l, c)| (l.max(1), c.max(1)));
    let (end_line, end_column) = if (end_line, end_column) < (line, column) {
        (line, column)
    } else {
        (end_line, end_column)
    };
    Diagnostic {
        line,
        column,
        end_line,
        end_column,
        severity,
        code,
        message,
        source: ctx.name.to_string(),
        introduced: false,
    }
}
