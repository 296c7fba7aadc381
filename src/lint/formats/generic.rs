//! The data-driven adapter for linters without a built-in parser.
//!
//! Owns the reading through a [`JsonMapping`] (where in a JSON document the findings and their
//! fields are) or a [`RegexMapping`] (a per-line regex with named groups), and the check of a
//! regex's groups. The mappings themselves, and the shared knobs (severity mapping, column unit
//! and base), are part of the policy entry (`config`). It knows nothing about any particular
//! linter.

use super::config::{JsonMapping, LinterConfig, RegexMapping};
use super::context::{ParseContext, ParseError, diagnostic};
use crate::lint::diagnostic::{Diagnostic, Severity};
use regex::Regex;
use serde_json::Value;

const REGEX_GROUPS: [&str; 7] = [
    "line", "col", "end_line", "end_col", "severity", "code", "message",
];

#[derive(Debug, Clone)]
pub(super) struct CompiledRegex(Regex);

impl CompiledRegex {
    pub(super) fn new(linter: &str, mapping: &RegexMapping) -> Result<Self, ParseError> {
        let regex = Regex::new(&mapping.pattern).map_err(|source| ParseError::InvalidRegex {
            linter: linter.to_string(),
            source,
        })?;
        let names: Vec<&str> = regex.capture_names().flatten().collect();
        let invalid = |detail: String| ParseError::InvalidConfig {
            linter: linter.to_string(),
            detail,
        };
        // A misspelt group (`column` for `col`) would silently drop data, so refuse it.
        if let Some(unknown) = names.iter().find(|n| !REGEX_GROUPS.contains(n)) {
            return Err(invalid(format!(
                "regex group `{unknown}` is not one of {}",
                REGEX_GROUPS.join(", ")
            )));
        }
        for required in ["line", "message"] {
            if !names.contains(&required) {
                return Err(invalid(format!("regex needs a named group `{required}`")));
            }
        }
        Ok(CompiledRegex(regex))
    }
}

pub(super) fn parse_regex(
    stdout: &str,
    regex: &CompiledRegex,
    config: &LinterConfig,
    ctx: &ParseContext<'_>,
) -> Result<Vec<Diagnostic>, ParseError> {
    let mut out = Vec::new();
    for (idx, text) in stdout.lines().enumerate() {
        let Some(caps) = regex.0.captures(text) else {
            continue;
        };
        let group = |name: &str| {
            caps.name(name)
                .map(|m| m.as_str())
                .filter(|s| !s.is_empty())
        };
        let number = |name: &str| -> Result<Option<u64>, ParseError> {
            group(name)
                .map(|s| {
                    s.trim().parse::<u64>().map_err(|_| {
                        ctx.shape_error(format!(
                            "output line {}: group `{name}` is not a number: {s:?}",
                            idx + 1
                        ))
                    })
                })
                .transpose()
        };
        let raw = RawFinding {
            line: number("line")?,
            column: number("col")?,
            end_line: number("end_line")?,
            end_column: number("end_col")?,
            severity: group("severity").map(str::to_string),
            code: group("code").map(str::to_string),
            message: group("message").unwrap_or_default().trim().to_string(),
        };
        out.push(raw.into_diagnostic(config, ctx, || format!("output line {}", idx + 1))?);
    }
    Ok(out)
}

pub(super) fn parse_json(
    stdout: &str,
    mapping: &JsonMapping,
    config: &LinterConfig,
    ctx: &ParseContext<'_>,
) -> Result<Vec<Diagnostic>, ParseError> {
    if mapping.empty_output_is_clean && stdout.trim().is_empty() {
        return Ok(Vec::new());
    }
    let document: Value = ctx.json(stdout, "JSON")?;
    let results = lookup(&document, &mapping.results)
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ctx.shape_error(format!("no array at results pointer {:?}", mapping.results))
        })?;
    let mut findings = Vec::new();
    match &mapping.nested {
        None => findings.extend(results.iter()),
        Some(pointer) => {
            for (i, result) in results.iter().enumerate() {
                let inner = lookup(result, pointer)
                    .and_then(Value::as_array)
                    .ok_or_else(|| {
                        ctx.shape_error(format!("result {i}: no array at nested {pointer:?}"))
                    })?;
                findings.extend(inner.iter());
            }
        }
    }
    findings
        .into_iter()
        .enumerate()
        .map(|(i, finding)| {
            json_finding(finding, mapping, ctx, i)?
                .into_diagnostic(config, ctx, || format!("finding {i}"))
        })
        .collect()
}

fn json_finding(
    finding: &Value,
    mapping: &JsonMapping,
    ctx: &ParseContext<'_>,
    index: usize,
) -> Result<RawFinding, ParseError> {
    let field = |spec: &Option<String>| spec.as_deref().and_then(|s| lookup(finding, s));
    let number = |name: &str, spec: &Option<String>| -> Result<Option<u64>, ParseError> {
        match field(spec) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => as_number(v).map(Some).ok_or_else(|| {
                ctx.shape_error(format!("finding {index}: `{name}` is not a number: {v}"))
            }),
        }
    };
    let message = lookup(finding, &mapping.message)
        .and_then(Value::as_str)
        .ok_or_else(|| {
            ctx.shape_error(format!(
                "finding {index}: no string at message {:?}",
                mapping.message
            ))
        })?;
    Ok(RawFinding {
        line: number("line", &Some(mapping.line.clone()))?,
        column: number("column", &mapping.column)?,
        end_line: number("end_line", &mapping.end_line)?,
        end_column: number("end_column", &mapping.end_column)?,
        severity: field(&mapping.severity).and_then(as_text),
        code: field(&mapping.code).and_then(as_text),
        message: message.to_string(),
    })
}

/// `spec` as a JSON pointer if it starts with `/` (or is empty: the value itself), else as a
/// plain key.
fn lookup<'v>(value: &'v Value, spec: &str) -> Option<&'v Value> {
    if spec.is_empty() || spec.starts_with('/') {
        value.pointer(spec)
    } else {
        value.get(spec)
    }
}

fn as_number(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Severity and code values may be strings, numbers or booleans; null means absent.
fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// A finding as read, before unit conversion.
struct RawFinding {
    line: Option<u64>,
    column: Option<u64>,
    end_line: Option<u64>,
    end_column: Option<u64>,
    severity: Option<String>,
    code: Option<String>,
    message: String,
}

impl RawFinding {
    fn into_diagnostic(
        self,
        config: &LinterConfig,
        ctx: &ParseContext<'_>,
        whereabouts: impl Fn() -> String,
    ) -> Result<Diagnostic, ParseError> {
        let line_raw = self
            .line
            .ok_or_else(|| ctx.shape_error(format!("{}: no line number", whereabouts())))?;
        let line = rebase(line_raw, config.line_base);
        let column = self.column.map_or(1, |c| rebase(c, config.column_base));
        let start = (
            line,
            ctx.index.char_column(line, column, config.column_unit),
        );
        let end = match (self.end_line, self.end_column) {
            (None, None) => None,
            (end_line, end_column) => {
                let end_line = end_line.map_or(line, |l| rebase(l, config.line_base));
                let end_column = end_column.map_or(column, |c| rebase(c, config.column_base));
                Some((
                    end_line,
                    ctx.index
                        .char_column(end_line, end_column, config.column_unit),
                ))
            }
        };
        let severity = resolve_severity(config, self.severity.as_deref());
        Ok(diagnostic(
            ctx,
            start,
            end,
            severity,
            self.code,
            self.message,
        ))
    }
}

/// Converts a 0- or 1-based number to 1-based, saturating.
fn rebase(value: u64, base: u32) -> u32 {
    let one_based = value.saturating_add(u64::from(1 - base.min(1)));
    u32::try_from(one_based).unwrap_or(u32::MAX)
}

fn resolve_severity(config: &LinterConfig, raw: Option<&str>) -> Severity {
    let Some(raw) = raw else {
        return config.default_severity;
    };
    config
        .severity_map
        .get(raw)
        .copied()
        .or_else(|| {
            config
                .severity_map
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(raw))
                .map(|(_, v)| *v)
        })
        .or_else(|| Severity::from_common_name(raw))
        .unwrap_or(config.default_severity)
}
