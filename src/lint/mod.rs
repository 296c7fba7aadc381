//! Lint feedback for `write_file` / `edit_file`.
//!
//! This module owns the diagnostic data model ([`diagnostic`]), the syntax check's logic
//! ([`syntax`]; the grammars themselves run in `crate::parser`'s confined worker), the
//! translation of external linters' output into diagnostics ([`parsers`]), the decision
//! whether a diagnostic was introduced by an edit ([`introduced`]), and the pipeline that runs
//! them for one file ([`Linting`], built from a [`LintPlan`]): external linters run through
//! the confined `exec::Executor`, each in a concurrency slot. It reads no files (the caller
//! hands it the content) and never sees a policy: `policy::resolve` hands it the plan.

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
