//! Turning an external linter's output into [`Diagnostic`]s.
//!
//! Owns the `[[lint.linters]]` policy entry ([`LinterConfig`]), its validation into a
//! [`CompiledLinter`], the exit-status check, and the per-format parsers: built-in ones for
//! ruff, shellcheck, ESLint and oxlint, and a data-driven generic adapter (JSON mapping or
//! regex). It does not spawn the linter, choose which linters apply beyond the extension list,
//! or decide `introduced`.
//!
//! The rule everywhere: output we cannot fully understand is a [`ParseError`], never an empty
//! (and so falsely "clean") result.

mod eslint;
mod generic;
mod oxlint;
mod ruff;
mod shellcheck;

pub use generic::{JsonMapping, RegexMapping};

use crate::lint::diagnostic::{Diagnostic, Severity};
use crate::lint::position::{ColumnUnit, LineIndex};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Placeholder in `args` replaced by the workspace-relative path of the file being linted.
pub const PATH_PLACEHOLDER: &str = "{path}";

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

/// How the linter's stdout is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// `ruff check --output-format=json`
    Ruff,
    /// `shellcheck -f json1` (not `-f json`, which counts a tab as 8 columns)
    Shellcheck,
    /// `eslint -f json`
    Eslint,
    /// `oxlint --format json`
    Oxlint,
    /// Any JSON, read through [`LinterConfig::json`].
    Json,
    /// One finding per line, read through [`LinterConfig::regex`].
    Regex,
}

/// One `[[lint.linters]]` entry of the policy TOML.
///
/// ```toml
/// [[lint.linters]]
/// name = "mypy"
/// command = "mypy"
/// args = ["--no-error-summary", "--show-column-numbers", "{path}"]
/// extensions = ["py"]
/// format = "regex"
/// severity_map = { note = "info" }
/// [lint.linters.regex]
/// pattern = '^[^:]+:(?P<line>\d+):(?P<col>\d+): (?P<severity>\w+): (?P<message>.*?)(?:  \[(?P<code>[\w-]+)\])?$'
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinterConfig {
    /// Shown in `linters` and used as each diagnostic's `source`.
    pub name: String,
    pub command: String,
    /// Arguments; `{path}` is replaced by the file's workspace-relative path.
    #[serde(default)]
    pub args: Vec<String>,
    /// File extensions (without the dot) this linter applies to.
    pub extensions: Vec<String>,
    pub format: OutputFormat,
    /// Exit statuses meaning "ran fine" (findings or not). Default `[0, 1]`, which is what
    /// ruff, shellcheck, ESLint and oxlint use; anything else is a failure to lint.
    #[serde(default = "default_ok_exit_codes")]
    pub ok_exit_codes: Vec<i32>,
    /// Required when `format = "json"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<JsonMapping>,
    /// Required when `format = "regex"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<RegexMapping>,
    /// Generic formats: linter severity value (as text, e.g. `"2"`, `"E"`) → severity. Values
    /// not listed fall back to common words (`error`, `warn`, `note`, ...), then to
    /// `default_severity`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub severity_map: BTreeMap<String, Severity>,
    #[serde(default = "default_severity")]
    pub default_severity: Severity,
    /// Generic formats: what the linter's columns count.
    #[serde(default)]
    pub column_unit: ColumnUnit,
    /// Generic formats: 1 if the linter's columns start at 1 (most do), 0 if at 0.
    #[serde(default = "default_base")]
    pub column_base: u32,
    /// Generic formats: the same for lines.
    #[serde(default = "default_base")]
    pub line_base: u32,
    /// Give the linter the content on standard input (`{path}` still names the file, for
    /// config lookup). Lets cordon lint the previous content too, so `introduced` is exact.
    #[serde(default)]
    pub stdin: bool,
    /// Use the linter only when its command is found; otherwise a missing command makes the
    /// lint result `unavailable`.
    #[serde(default)]
    pub optional: bool,
    /// How to install the linter, shown in the lint result's `skipped` entry when its command
    /// is not found (`pip install ruff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_hint: Option<String>,
}

fn default_ok_exit_codes() -> Vec<i32> {
    vec![0, 1]
}

fn default_severity() -> Severity {
    Severity::Warning
}

fn default_base() -> u32 {
    1
}

impl LinterConfig {
    /// Whether this linter applies to a file with extension `ext` (no dot, case-insensitive).
    pub fn applies_to(&self, ext: &str) -> bool {
        self.extensions
            .iter()
            .any(|e| e.trim_start_matches('.').eq_ignore_ascii_case(ext))
    }

    /// `args` with every `{path}` replaced.
    pub fn command_args(&self, path: &str) -> Vec<String> {
        self.args
            .iter()
            .map(|a| a.replace(PATH_PLACEHOLDER, path))
            .collect()
    }

    /// Validates the entry (the mapping its format needs, the regex) once, at policy load.
    pub fn compile(&self) -> Result<CompiledLinter, ParseError> {
        let invalid = |detail: &str| ParseError::InvalidConfig {
            linter: self.name.clone(),
            detail: detail.to_string(),
        };
        if self.name.trim().is_empty() {
            return Err(invalid("`name` is empty"));
        }
        if self.column_base > 1 || self.line_base > 1 {
            return Err(invalid("`column_base` and `line_base` must be 0 or 1"));
        }
        let reader = match self.format {
            OutputFormat::Ruff => Reader::Ruff,
            OutputFormat::Shellcheck => Reader::Shellcheck,
            OutputFormat::Eslint => Reader::Eslint,
            OutputFormat::Oxlint => Reader::Oxlint,
            OutputFormat::Json => Reader::Json(
                self.json
                    .clone()
                    .ok_or_else(|| invalid("format = \"json\" needs a [json] mapping"))?,
            ),
            OutputFormat::Regex => {
                let mapping = self
                    .regex
                    .as_ref()
                    .ok_or_else(|| invalid("format = \"regex\" needs a [regex] mapping"))?;
                Reader::Regex(generic::CompiledRegex::new(&self.name, mapping)?)
            }
        };
        Ok(CompiledLinter {
            config: self.clone(),
            reader,
        })
    }
}

/// A validated [`LinterConfig`], ready to parse runs. It is shown (`cordon policy show`) as
/// the entry it was compiled from.
#[derive(Debug, Clone)]
pub struct CompiledLinter {
    config: LinterConfig,
    reader: Reader,
}

impl serde::Serialize for CompiledLinter {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.config.serialize(serializer)
    }
}

#[derive(Debug, Clone)]
enum Reader {
    Ruff,
    Shellcheck,
    Eslint,
    Oxlint,
    Json(JsonMapping),
    Regex(generic::CompiledRegex),
}

/// What a parser needs besides the output: the linter's name (the diagnostics' `source`) and
/// the linted text, to convert byte or UTF-16 columns into characters.
pub(crate) struct ParseContext<'a> {
    pub name: &'a str,
    pub index: LineIndex<'a>,
}

impl ParseContext<'_> {
    pub fn shape_error(&self, detail: impl Into<String>) -> ParseError {
        ParseError::UnexpectedShape {
            linter: self.name.to_string(),
            detail: detail.into(),
        }
    }

    pub fn json<T: serde::de::DeserializeOwned>(
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

impl CompiledLinter {
    pub fn config(&self) -> &LinterConfig {
        &self.config
    }

    /// Parses one run. `exit_code` is `None` when the linter was killed by a signal.
    /// `linted_text` is the file content the linter saw (for column conversion).
    pub fn parse(
        &self,
        stdout: &str,
        exit_code: Option<i32>,
        linted_text: &str,
    ) -> Result<Vec<Diagnostic>, ParseError> {
        let ok_exit = exit_code.is_some_and(|c| self.config.ok_exit_codes.contains(&c));
        if !ok_exit {
            return Err(ParseError::UnexpectedExit {
                linter: self.config.name.clone(),
                code: exit_code,
            });
        }
        let ctx = ParseContext {
            name: &self.config.name,
            index: LineIndex::new(linted_text),
        };
        match &self.reader {
            Reader::Ruff => ruff::parse(stdout, &ctx),
            Reader::Shellcheck => shellcheck::parse(stdout, &ctx),
            Reader::Eslint => eslint::parse(stdout, &ctx),
            Reader::Oxlint => oxlint::parse(stdout, &ctx),
            Reader::Json(mapping) => generic::parse_json(stdout, mapping, &self.config, &ctx),
            Reader::Regex(regex) => generic::parse_regex(stdout, regex, &self.config, &ctx),
        }
    }
}

/// Convenience for the built-in formats without a policy entry: parse `stdout` of `format`
/// (not `json`/`regex`, which need a mapping) with `name` as the diagnostics' source.
pub fn parse_builtin(
    format: OutputFormat,
    name: &str,
    stdout: &str,
    linted_text: &str,
) -> Result<Vec<Diagnostic>, ParseError> {
    let ctx = ParseContext {
        name,
        index: LineIndex::new(linted_text),
    };
    match format {
        OutputFormat::Ruff => ruff::parse(stdout, &ctx),
        OutputFormat::Shellcheck => shellcheck::parse(stdout, &ctx),
        OutputFormat::Eslint => eslint::parse(stdout, &ctx),
        OutputFormat::Oxlint => oxlint::parse(stdout, &ctx),
        OutputFormat::Json | OutputFormat::Regex => Err(ParseError::InvalidConfig {
            linter: name.to_string(),
            detail: "json and regex formats need a LinterConfig mapping".into(),
        }),
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
