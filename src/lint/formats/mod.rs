//! Turning an external linter's output into [`Diagnostic`](crate::lint::Diagnostic)s.
//!
//! * [`config`]: the `[[lint.linters]]` policy entry ([`LinterConfig`]);
//! * [`compiled`]: its validation into a [`CompiledLinter`] and the exit-status check;
//! * `context`: what every reader shares (the [`ParseError`], positions into diagnostics);
//! * the readers: built-in ones for ruff, shellcheck, ESLint and oxlint, and a data-driven
//!   generic adapter (JSON mapping or regex).
//!
//! It does not spawn the linter, choose which linters apply beyond the extension list, or
//! decide `introduced`. The rule everywhere: output we cannot fully understand is a
//! [`ParseError`], never an empty (and so falsely "clean") result.

pub(crate) mod compiled;
pub(crate) mod config;
pub(crate) mod context;
mod eslint;
mod generic;
mod oxlint;
mod ruff;
mod shellcheck;

pub(crate) use compiled::CompiledLinter;
pub(crate) use config::LinterConfig;
