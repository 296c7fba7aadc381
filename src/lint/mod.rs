//! Lint feedback for `write_file` / `edit_file`.
//!
//! This module owns the diagnostic data model ([`diagnostic`]), the syntax check as lint
//! reports it ([`syntax`]: the parser's syntax errors as diagnostics; the grammars themselves
//! run in `crate::parser`'s confined worker), the reading of external linters' output into
//! diagnostics ([`formats`]), the decision whether a diagnostic was introduced by an edit
//! ([`introduced`]), and the pipeline that runs them for one file ([`Linting`], built from a
//! [`LintPlan`]): external linters run through the confined `exec::Executor`, each in a
//! concurrency slot. It reads no files (the caller hands it the content) and never sees a
//! policy: `policy::resolve` hands it the plan, and the policy embeds the linter entries
//! ([`LinterConfig`]) defined here.

pub mod diagnostic;
pub mod formats;
pub mod introduced;
pub mod position;
mod runner;
pub mod syntax;

pub use diagnostic::{Diagnostic, LintReport, LintStatus, Severity};
pub use formats::{CompiledLinter, LinterConfig, OutputFormat, ParseError, parse_builtin};
pub use introduced::mark_introduced;
pub use position::ColumnUnit;
pub use runner::{LintPlan, Linting};
