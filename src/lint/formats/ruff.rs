//! `ruff check --output-format=json`: a JSON array of findings.
//!
//! Owns only the ruff format. Checked against ruff 0.17.6 (fixtures in
//! `tests/fixtures/lint/ruff_*.json`): `location`/`end_location` are `{row, column}` with
//! 1-based *character* columns; `code` is a rule id, `"invalid-syntax"` for parse errors, or
//! `null` in older releases (which also had no `severity` field).

use super::context::{ParseContext, ParseError, diagnostic};
use crate::lint::diagnostic::{Diagnostic, Severity};
use crate::lint::position::ColumnUnit;
use serde::Deserialize;

#[derive(Deserialize)]
struct Finding {
    code: Option<String>,
    message: String,
    location: Location,
    end_location: Option<Location>,
    severity: Option<String>,
}

#[derive(Deserialize)]
struct Location {
    row: u32,
    column: u32,
}

pub(super) fn parse(stdout: &str, ctx: &ParseContext<'_>) -> Result<Vec<Diagnostic>, ParseError> {
    let findings: Vec<Finding> = ctx.json(stdout, "a JSON array (`[]` when clean)")?;
    Ok(findings
        .into_iter()
        .map(|f| {
            let is_syntax = f.code.as_deref().is_none_or(|c| c == "invalid-syntax");
            // Ruff states a severity since 0.12-ish; before that, syntax errors were the only
            // findings that stop the code from running.
            let severity = f
                .severity
                .as_deref()
                .and_then(Severity::from_common_name)
                .unwrap_or(if is_syntax {
                    Severity::Error
                } else {
                    Severity::Warning
                });
            let start = position(ctx, &f.location);
            let end = f.end_location.as_ref().map(|l| position(ctx, l));
            diagnostic(ctx, start, end, severity, f.code, f.message)
        })
        .collect())
}

fn position(ctx: &ParseContext<'_>, location: &Location) -> (u32, u32) {
    let column = ctx
        .index
        .char_column(location.row, location.column, ColumnUnit::Char);
    (location.row, column)
}
