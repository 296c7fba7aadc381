//! A `[[lint.linters]]` entry validated once, when the policy loads, into a [`CompiledLinter`]
//! that reads runs: the exit-status check, then the format's reader.
//!
//! Owns the validation (the mapping a format needs, a compiled regex) and the dispatch to the
//! format modules, plus [`parse_builtin`] for the built-in formats without a policy entry.

use super::config::{JsonMapping, LinterConfig, OutputFormat};
use super::context::{ParseContext, ParseError};
use super::{eslint, generic, oxlint, ruff, shellcheck};
use crate::lint::diagnostic::Diagnostic;
use crate::lint::position::LineIndex;

impl LinterConfig {
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
