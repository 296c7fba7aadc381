//! The parser: every tree-sitter grammar cordon uses, and the confined, restartable worker
//! process they run in. Grammars are C code fed hostile text, so they never run in the server.
//!
//! * [`syntax`]: the syntax check of a file (which grammar, the time-boxed and incremental
//!   parse, the reduction of error nodes to [`syntax::SyntaxError`]s);
//! * [`bash`]: the reading of a command line into the simple commands it runs
//!   ([`bash::Analysis`]);
//! * [`protocol`]: the bounded, versioned frames between server and worker;
//! * [`worker`]: the worker's loop (`cordon __parse-worker`) and its remembered trees;
//! * [`lockdown`]: what the worker does to confine itself further;
//! * [`client`]: the server's side: spawn, deadline, restart, and why a request failed.
//!
//! A leaf: it returns its own types and imports nothing from the stages that use it. `lint`
//! turns syntax errors into diagnostics, `policy::commands` judges analyses (and checks the
//! policy's rule examples through the [`ParserClient`]). It does not decide what a failure
//! means for a call: lint reports `unavailable`, the command rules apply
//! `commands.on_analysis_failure`.

pub(crate) mod bash;
pub(crate) mod client;
pub(crate) mod lockdown;
pub(crate) mod protocol;
pub(crate) mod syntax;
pub(crate) mod worker;

pub(crate) use client::{ParserClient, ParserConfig, ParserError};

/// The program a worker runs: this very binary, under [`WORKER_SUBCOMMAND`]. The confinement
/// must let children read and execute it (`RuntimeOptions::parser_program` grants it).
pub fn worker_program() -> std::io::Result<std::path::PathBuf> {
    std::env::current_exe()
}
