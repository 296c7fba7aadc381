//! `oxlint --format json`: `{"diagnostics": [...], "number_of_files": ...}`.
//!
//! Owns only the oxlint format. Checked against oxlint 1.94.0 (fixtures in
//! `tests/fixtures/lint/oxlint_*.json`): each diagnostic has `message`, optional `code`
//! (`eslint(no-unused-vars)`), `severity` (`error`/`warning`/`advice`) and `labels` whose
//! `span` has a *byte* `offset` and `length` plus a 1-based `line` and a *byte* `column`. The
//! first label is the primary location. A bare top-level array of the same diagnostics is also
//! accepted.

use super::context::{ParseContext, ParseError, diagnostic};
use crate::lint::diagnostic::{Diagnostic, Severity};
use crate::lint::position::ColumnUnit;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(untagged)]
enum Output {
    Report { diagnostics: Vec<Finding> },
    Bare(Vec<Finding>),
}

#[derive(Deserialize)]
struct Finding {
    message: String,
    code: Option<String>,
    severity: Option<String>,
    #[serde(default)]
    labels: Vec<Label>,
}

#[derive(Deserialize)]
struct Label {
    span: Span,
}

#[derive(Deserialize)]
struct Span {
    offset: Option<usize>,
    length: Option<usize>,
    line: Option<u32>,
    column: Option<u32>,
}

pub(super) fn parse(stdout: &str, ctx: &ParseContext<'_>) -> Result<Vec<Diagnostic>, ParseError> {
    let output: Output = ctx.json(stdout, "a JSON object with `diagnostics`")?;
    let findings = match output {
        Output::Report { diagnostics } | Output::Bare(diagnostics) => diagnostics,
    };
    Ok(findings
        .into_iter()
        .map(|f| {
            let severity = f
                .severity
                .as_deref()
                .and_then(Severity::from_common_name)
                .unwrap_or(Severity::Warning);
            let (start, end) = f
                .labels
                .first()
                .map_or(((1, 1), None), |l| span_position(ctx, &l.span));
            diagnostic(ctx, start, end, severity, f.code, f.message)
        })
        .collect())
}

/// The byte offset is exact; `line`/`column` are the fallback when it is absent.
fn span_position(ctx: &ParseContext<'_>, span: &Span) -> ((u32, u32), Option<(u32, u32)>) {
    if let Some(offset) = span.offset {
        let start = ctx.index.position_of_byte_offset(offset);
        let end = span.length.map(|len| {
            ctx.index
                .position_of_byte_offset(offset.saturating_add(len))
        });
        return (start, end);
    }
    let line = span.line.unwrap_or(1);
    let column = ctx
        .index
        .char_column(line, span.column.unwrap_or(1), ColumnUnit::Byte);
    ((line, column), None)
}
