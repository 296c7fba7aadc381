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

pub(crate) mod diagnostic;
pub(crate) mod formats;
pub(crate) mod introduced;
pub(crate) mod position;
mod runner;
pub(crate) mod syntax;

pub(crate) use diagnostic::{LintReport, LintStatus};
pub(crate) use formats::{CompiledLinter, LinterConfig};
pub(crate) use runner::{LintPlan, Linting};
