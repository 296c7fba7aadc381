//! `shellcheck -f json1`: `{"comments": [...]}`.
//!
//! Owns only the shellcheck format. Checked against ShellCheck 0.9.0 (fixtures in
//! `tests/fixtures/lint/shellcheck_*.json`): json1 counts columns in characters with a tab as
//! one column. The older `-f json` (a bare array) counts a tab as 8 columns, so it is refused
//! with a message saying to use json1 rather than silently misplacing findings.

use super::context::{ParseContext, ParseError, diagnostic};
use crate::lint::diagnostic::{Diagnostic, Severity};
use serde::Deserialize;

#[derive(Deserialize)]
struct Report {
    comments: Vec<Comment>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Comment {
    line: u32,
    end_line: Option<u32>,
    column: u32,
    end_column: Option<u32>,
    level: String,
    code: u32,
    message: String,
}

pub(super) fn parse(stdout: &str, ctx: &ParseContext<'_>) -> Result<Vec<Diagnostic>, ParseError> {
    let value: serde_json::Value = ctx.json(stdout, "a json1 object `{\"comments\": [...]}`")?;
    if value.is_array() {
        return Err(ctx.shape_error(
            "got a bare array (`-f json`); run shellcheck with `-f json1` so tabs count as one column",
        ));
    }
    let report: Report =
        serde_json::from_value(value).map_err(|e| ctx.shape_error(e.to_string()))?;
    Ok(report
        .comments
        .into_iter()
        .map(|c| {
            // shellcheck levels: error, warning, info, style.
            let severity = Severity::from_common_name(&c.level).unwrap_or(Severity::Warning);
            let end = c.end_line.zip(c.end_column);
            diagnostic(
                ctx,
                (c.line, c.column),
                end,
                severity,
                Some(format!("SC{}", c.code)),
                c.message,
            )
        })
        .collect())
}
