//! `eslint -f json`: an array of per-file results, each with `messages`.
//!
//! Owns only the ESLint format. Checked against ESLint 10.15.0 (fixtures in
//! `tests/fixtures/lint/eslint_*.json`). Columns are 1-based UTF-16 code units (JavaScript
//! string indices), converted here to characters. Parse failures come as `fatal: true` with
//! `ruleId: null` and no end position.

use super::context::{ParseContext, ParseError, diagnostic};
use crate::lint::diagnostic::{Diagnostic, Severity};
use crate::lint::position::ColumnUnit;
use serde::Deserialize;

#[derive(Deserialize)]
struct FileResult {
    messages: Vec<Message>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Message {
    rule_id: Option<String>,
    severity: u8,
    message: String,
    // ESLint omits positions for some config-level messages; those refer to the whole file.
    line: Option<u32>,
    column: Option<u32>,
    end_line: Option<u32>,
    end_column: Option<u32>,
}

pub(super) fn parse(stdout: &str, ctx: &ParseContext<'_>) -> Result<Vec<Diagnostic>, ParseError> {
    let files: Vec<FileResult> = ctx.json(stdout, "a JSON array of file results")?;
    let mut out = Vec::new();
    for m in files.into_iter().flat_map(|f| f.messages) {
        let severity = match m.severity {
            2 => Severity::Error,
            1 => Severity::Warning,
            _ => Severity::Info,
        };
        let line = m.line.unwrap_or(1);
        let start = (
            line,
            ctx.index
                .char_column(line, m.column.unwrap_or(1), ColumnUnit::Utf16),
        );
        let end = m
            .end_line
            .zip(m.end_column)
            .map(|(l, c)| (l, ctx.index.char_column(l, c, ColumnUnit::Utf16)));
        out.push(diagnostic(ctx, start, end, severity, m.rule_id, m.message));
    }
    Ok(out)
}
