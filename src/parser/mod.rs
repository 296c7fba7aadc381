//! The parser worker: every tree-sitter grammar (the lint syntax check and the bash analysis
//! behind the command rules) runs in a confined, restartable child process, never in the
//! server, because grammars are C code fed hostile text.
//!
//! * [`protocol`]: the bounded, versioned frames between server and worker;
//! * [`worker`]: the worker's loop (`cordon __parse-worker`) and its remembered trees;
//! * [`lockdown`]: what the worker does to confine itself further;
//! * [`client`]: the server's side: spawn, deadline, restart, and why a request failed.
//!
//! It does not decide what a failure means for a call: lint reports `unavailable`, the command
//! rules apply `commands.on_analysis_failure`.

pub mod client;
pub mod lockdown;
pub mod protocol;
pub mod worker;

pub use client::{ParserClient, ParserConfig, ParserError, WORKER_SUBCOMMAND};

/// The program a worker runs: this very binary, under [`WORKER_SUBCOMMAND`]. The confinement
/// must let children read and execute it (`ConfineOptions::extra_read_exec`).
pub fn worker_program() -> std::io::Result<std::path::PathBuf> {
    std::env::current_exe()
}

/// Why the server (or `cordon policy check`) could not get a working parser worker, or the
/// policy's rule examples failed in it.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("the parser worker (tree-sitter, confined) does not work here: {0}")]
    Worker(#[from] ParserError),
    #[error(transparent)]
    Examples(#[from] crate::policy::commands::rules::RuleError),
}

/// Runs every rule example through the worker and checks each behaves as listed.
pub async fn check_examples(
    client: &ParserClient,
    rules: &crate::policy::commands::CommandRules,
) -> Result<(), StartupError> {
    let lines = rules.example_lines();
    if lines.is_empty() {
        return Ok(());
    }
    let analyses = client.analyze(&lines).await?;
    let by_line: std::collections::HashMap<&str, _> =
        lines.iter().map(String::as_str).zip(analyses).collect();
    rules.verify_examples(&|l| by_line.get(l).cloned())?;
    Ok(())
}
