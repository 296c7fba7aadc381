//! The lint data model that goes on the wire, and its human-readable summary.
//!
//! Owns [`Diagnostic`], [`Severity`], [`LintStatus`] and [`LintReport`], whose field names are
//! fixed by SPEC.md ("Lint feedback"), plus [`LintReport::summary`], the short text block shown
//! next to `structuredContent`. It does not produce diagnostics (see `syntax` and `parsers`)
//! nor decide `introduced` (see `introduced`).

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// How bad a finding is. Serialized lowercase, as SPEC.md requires.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    // Declaration order is the sort order: errors first.
    Error,
    Warning,
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }

    /// Recognises the severity words linters commonly print (case-insensitive).
    pub fn from_common_name(word: &str) -> Option<Severity> {
        match word.trim().to_ascii_lowercase().as_str() {
            "error" | "err" | "e" | "fatal" | "critical" | "blocker" => Some(Severity::Error),
            "warning" | "warn" | "w" | "major" | "minor" => Some(Severity::Warning),
            "info" | "information" | "note" | "style" | "hint" | "advice" | "i" | "n" => {
                Some(Severity::Info)
            }
            _ => None,
        }
    }
}

/// One finding. Positions are 1-based; columns count characters (not bytes); the end is
/// exclusive, and equals the start for a zero-width finding such as a missing token.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Diagnostic {
    pub line: u32,
    pub column: u32,
    pub end_line: u32,
    pub end_column: u32,
    pub severity: Severity,
    /// The linter's rule id (`F401`, `SC2086`, `no-undef`); `null` when it has none.
    pub code: Option<String>,
    pub message: String,
    /// Who reported it: `syntax` for the embedded check, else the linter's name.
    pub source: String,
    /// True when this write or edit brought the finding in (see `introduced`).
    #[serde(default)]
    pub introduced: bool,
}

impl Diagnostic {
    /// A diagnostic at a single point, not yet marked introduced.
    pub fn at(
        line: u32,
        column: u32,
        severity: Severity,
        code: Option<String>,
        message: impl Into<String>,
        source: impl Into<String>,
    ) -> Self {
        Diagnostic {
            line,
            column,
            end_line: line,
            end_column: column,
            severity,
            code,
            message: message.into(),
            source: source.into(),
            introduced: false,
        }
    }

    /// Ordering used for display and for stable output: introduced first, then severity,
    /// then position.
    fn display_key(&self) -> (bool, Severity, u32, u32) {
        (!self.introduced, self.severity, self.line, self.column)
    }
}

/// Outcome of linting one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LintStatus {
    /// Every configured check ran and found nothing.
    Clean,
    /// At least one diagnostic.
    Issues,
    /// A check could not run or its output could not be understood; never reported as clean.
    Unavailable,
    /// Checking was deliberately not done (no linter for this file type, file too large,
    /// parse too slow).
    Skipped,
}

/// A configured check that did not run on this file, and why (not installed, with how to
/// install it; crashed; timed out; too slow).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SkippedCheck {
    /// The linter's name as configured (`ruff`), or `syntax` for the embedded check.
    pub name: String,
    pub reason: String,
}

/// The `lint` object of `write_file` / `edit_file` results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LintReport {
    pub status: LintStatus,
    /// Names of the checks that ran (`syntax`, `ruff`, ...).
    pub linters: Vec<String>,
    pub diagnostics: Vec<Diagnostic>,
    /// Configured checks for this file type that did not run, with the reason. Always
    /// present (required in the output schema), empty when everything configured ran.
    pub skipped: Vec<SkippedCheck>,
    /// Why the status is `unavailable` or `skipped`; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl LintReport {
    /// `clean` or `issues` depending on whether there are diagnostics. Diagnostics are sorted
    /// (introduced first, then severity, then position) so output is stable.
    pub fn from_diagnostics(linters: Vec<String>, mut diagnostics: Vec<Diagnostic>) -> Self {
        diagnostics.sort_by_key(Diagnostic::display_key);
        let status = if diagnostics.is_empty() {
            LintStatus::Clean
        } else {
            LintStatus::Issues
        };
        LintReport {
            status,
            linters,
            diagnostics,
            skipped: Vec::new(),
            reason: None,
        }
    }

    /// The same report, naming the configured checks that did not run.
    pub fn with_skipped(mut self, skipped: Vec<SkippedCheck>) -> Self {
        self.skipped = skipped;
        self
    }

    /// A check could not run. Diagnostics that other checks did produce are kept, so a working
    /// syntax check is not thrown away because an external linter is missing.
    pub fn unavailable(
        linters: Vec<String>,
        diagnostics: Vec<Diagnostic>,
        reason: impl Into<String>,
    ) -> Self {
        let mut report = LintReport::from_diagnostics(linters, diagnostics);
        report.status = LintStatus::Unavailable;
        report.reason = Some(reason.into());
        report
    }

    /// Checking was not done at all.
    pub fn skipped(reason: impl Into<String>) -> Self {
        LintReport {
            status: LintStatus::Skipped,
            linters: Vec::new(),
            diagnostics: Vec::new(),
            skipped: Vec::new(),
            reason: Some(reason.into()),
        }
    }

    /// Short text for the tool result's text block: introduced findings first (errors before
    /// warnings, at most `max_shown`, then "…and K more"), then one line summing up the
    /// pre-existing ones, which the agent usually should not chase.
    pub fn summary(&self, max_shown: usize) -> String {
        let ran = if self.linters.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.linters.join(", "))
        };
        let reason = self.reason.as_deref().unwrap_or("no reason given");
        // What did not run, so `clean` is never read as more than it is.
        let not_run = if self.skipped.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = self
                .skipped
                .iter()
                .map(|s| format!("{}: {}", s.name, s.reason))
                .collect();
            format!("; not run: {}", names.join("; "))
        };
        let mut out = match self.status {
            LintStatus::Clean if self.linters.iter().all(|l| l == "syntax") => {
                return format!("lint: clean (syntax check only; no linter ran){not_run}");
            }
            LintStatus::Clean => return format!("lint: clean{ran}{not_run}"),
            LintStatus::Skipped => return format!("lint: skipped: {reason}{not_run}"),
            LintStatus::Unavailable => format!("lint: unavailable{ran}: {reason}"),
            LintStatus::Issues => String::new(),
        };

        let mut introduced: Vec<&Diagnostic> =
            self.diagnostics.iter().filter(|d| d.introduced).collect();
        introduced.sort_by_key(|d| d.display_key());
        let existing: Vec<&Diagnostic> =
            self.diagnostics.iter().filter(|d| !d.introduced).collect();

        if self.status == LintStatus::Issues {
            if introduced.is_empty() {
                out.push_str(&format!("lint: no new issues{ran}"));
            } else {
                let n = introduced.len();
                let noun = if n == 1 { "issue" } else { "issues" };
                let counts = count_by_severity(&introduced);
                out.push_str(&format!("lint: {n} new {noun}: {counts}{ran}"));
            }
        }
        for d in introduced.iter().take(max_shown) {
            let code = d
                .code
                .as_deref()
                .map(|c| format!(" {c}"))
                .unwrap_or_default();
            // Writing to a String cannot fail.
            let _ = write!(
                out,
                "\n  {}:{} {}{} {} [{}]",
                d.line,
                d.column,
                d.severity.as_str(),
                code,
                d.message,
                d.source
            );
        }
        if introduced.len() > max_shown {
            let _ = write!(out, "\n  …and {} more", introduced.len() - max_shown);
        }
        if !existing.is_empty() {
            let _ = write!(
                out,
                "\n  pre-existing (not from this edit): {}",
                count_by_severity(&existing)
            );
        }
        if let Some(rest) = not_run.strip_prefix("; ")
            && self.status == LintStatus::Issues
        {
            let _ = write!(out, "\n  {rest}");
        }
        out
    }
}

/// "2 errors, 1 warning" style counts, most severe first, zero counts left out.
fn count_by_severity(diags: &[&Diagnostic]) -> String {
    let mut parts = Vec::new();
    for (severity, one, many) in [
        (Severity::Error, "error", "errors"),
        (Severity::Warning, "warning", "warnings"),
        (Severity::Info, "info", "info"),
    ] {
        let n = diags.iter().filter(|d| d.severity == severity).count();
        if n > 0 {
            parts.push(format!("{n} {}", if n == 1 { one } else { many }));
        }
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn diag(line: u32, severity: Severity, introduced: bool) -> Diagnostic {
        let mut d = Diagnostic::at(line, 1, severity, Some("X1".into()), "msg", "ruff");
        d.introduced = introduced;
        d
    }

    #[test]
    fn serializes_with_spec_field_names() {
        let report = LintReport::from_diagnostics(
            vec!["syntax".into()],
            vec![Diagnostic::at(
                3,
                7,
                Severity::Error,
                None,
                "missing `)`",
                "syntax",
            )],
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(
            value,
            json!({"status": "issues", "linters": ["syntax"], "diagnostics": [{
                "line": 3, "column": 7, "end_line": 3, "end_column": 7, "severity": "error",
                "code": null, "message": "missing `)`", "source": "syntax", "introduced": false}],
                "skipped": []})
        );
        let back: LintReport = serde_json::from_value(value).unwrap();
        assert_eq!(back, report);
    }

    #[test]
    fn reason_is_serialized_only_when_set() {
        let clean = serde_json::to_value(LintReport::from_diagnostics(vec![], vec![])).unwrap();
        assert_eq!(clean["status"], "clean");
        assert!(clean.get("reason").is_none());
        let unavailable =
            serde_json::to_value(LintReport::unavailable(vec![], vec![], "ruff not found"))
                .unwrap();
        assert_eq!(unavailable["status"], "unavailable");
        assert_eq!(unavailable["reason"], "ruff not found");
    }

    #[test]
    fn summary_shows_introduced_errors_first_and_counts_the_rest() {
        let report = LintReport::from_diagnostics(
            vec!["syntax".into(), "ruff".into()],
            vec![
                diag(9, Severity::Warning, true),
                diag(4, Severity::Error, true),
                diag(2, Severity::Error, true),
                diag(1, Severity::Warning, false),
                diag(5, Severity::Error, false),
            ],
        );
        let text = report.summary(2);
        let expected = "lint: 3 new issues: 2 errors, 1 warning (syntax, ruff)\n  \
            2:1 error X1 msg [ruff]\n  \
            4:1 error X1 msg [ruff]\n  \
            …and 1 more\n  \
            pre-existing (not from this edit): 1 error, 1 warning";
        assert_eq!(text, expected);
    }

    #[test]
    fn summary_of_other_statuses() {
        assert_eq!(
            LintReport::from_diagnostics(vec!["syntax".into()], vec![]).summary(5),
            "lint: clean (syntax check only; no linter ran)"
        );
        let ruff_missing = SkippedCheck {
            name: "ruff".into(),
            reason: "not installed".into(),
        };
        assert_eq!(
            LintReport::from_diagnostics(vec!["syntax".into()], vec![])
                .with_skipped(vec![ruff_missing.clone()])
                .summary(5),
            "lint: clean (syntax check only; no linter ran); not run: ruff: not installed"
        );
        assert_eq!(
            LintReport::from_diagnostics(vec!["syntax".into(), "ruff".into()], vec![]).summary(5),
            "lint: clean (syntax, ruff)"
        );
        let issues = LintReport::from_diagnostics(
            vec!["syntax".into()],
            vec![diag(1, Severity::Error, true)],
        )
        .with_skipped(vec![ruff_missing]);
        assert!(
            issues
                .summary(5)
                .ends_with("\n  not run: ruff: not installed"),
            "{}",
            issues.summary(5)
        );
        assert_eq!(
            LintReport::skipped("no linter for .txt").summary(5),
            "lint: skipped: no linter for .txt"
        );
        let only_old =
            LintReport::from_diagnostics(vec!["ruff".into()], vec![diag(1, Severity::Info, false)]);
        assert_eq!(
            only_old.summary(5),
            "lint: no new issues (ruff)\n  pre-existing (not from this edit): 1 info"
        );
    }
}
