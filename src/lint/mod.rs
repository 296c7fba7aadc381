//! Lint feedback for `write_file` / `edit_file`: the pure-logic half.
//!
//! This module owns the diagnostic data model ([`diagnostic`]), the embedded tree-sitter syntax
//! check ([`syntax`]), the translation of external linters' output into diagnostics
//! ([`parsers`]), and the decision whether a diagnostic was introduced by an edit
//! ([`introduced`]). It does **not** spawn processes, read files or apply policy: the caller runs
//! external linters inside the confinement and hands their stdout and exit code to [`parsers`].

pub mod diagnostic;
pub mod introduced;
pub mod parsers;
pub mod position;
mod runner;
pub mod syntax;

pub use diagnostic::{Diagnostic, LintReport, LintStatus, Severity};
pub use introduced::mark_introduced;
pub use parsers::{CompiledLinter, LinterConfig, OutputFormat, ParseError, parse_builtin};
pub use position::ColumnUnit;
pub use runner::{LintPlan, Linting};
pub use syntax::{
    SyntaxCheckError, SyntaxLanguage, check_syntax, detect_language, language_for_path,
};
