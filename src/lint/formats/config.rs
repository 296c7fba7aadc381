//! The `[[lint.linters]]` entry of the policy, as written: which command lints which files,
//! and how its output reads ([`OutputFormat`], and for the generic formats a [`JsonMapping`]
//! or [`RegexMapping`] with the severity and position knobs).
//!
//! Owns the entry's shape (the policy schema reuses it) and the two questions a runner asks of
//! it (does it apply to this file, what are its arguments). Validating it is `compiled`'s,
//! reading output through it is the format modules'.

use crate::lint::diagnostic::Severity;
use crate::lint::position::ColumnUnit;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Placeholder in `args` replaced by the workspace-relative path of the file being linted.
pub(crate) const PATH_PLACEHOLDER: &str = "{path}";

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
}

/// Where the findings are in a linter's JSON output. Each field is either a JSON pointer
/// (`"/location/row"`) or a plain key of the finding object (`"line"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JsonMapping {
    /// Pointer to the array of findings; empty (the default) means the document itself.
    #[serde(default)]
    pub results: String,
    /// Pointer, inside each element of `results`, to a nested array of findings (ESLint-style
    /// per-file results: `"/messages"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested: Option<String>,
    pub line: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_column: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub message: String,
    /// Treat empty stdout as "no findings". Off by default: most JSON linters print `[]` when
    /// clean, so empty output usually means the linter did not run properly.
    #[serde(default)]
    pub empty_output_is_clean: bool,
}

/// A regex applied to each line of output; lines that do not match are ignored (summaries,
/// banners). Named groups: `line` and `message` (required), `col`, `end_line`, `end_col`,
/// `severity`, `code`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegexMapping {
    pub pattern: String,
}
