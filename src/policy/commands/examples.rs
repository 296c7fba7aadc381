//! Checking a policy's command-rule examples in the parser worker: each rule must match every
//! line under its `examples.match` and none under `examples.not_match`, as the worker reads
//! them (the grammar never runs in the server, not even at startup).
//!
//! Owns the one batch sent to the worker and the error saying which went wrong: the worker, or
//! an example. What an example means is `rules`' ([`CommandRules::verify_examples`]); when to
//! check (server start, `cordon policy check`) is the caller's.

use super::rules::{CommandRules, RuleError};
use crate::parser::{ParserClient, ParserError};

/// Why the server (or `cordon policy check`) could not get a working parser worker, or the
/// policy's rule examples failed in it.
#[derive(Debug, thiserror::Error)]
pub enum ExampleCheckError {
    #[error("the parser worker (tree-sitter, confined) does not work here: {0}")]
    Worker(#[from] ParserError),
    #[error(transparent)]
    Examples(#[from] RuleError),
}

/// Runs every rule example through the worker and checks each behaves as listed.
pub(crate) async fn check_examples(
    client: &ParserClient,
    rules: &CommandRules,
) -> Result<(), ExampleCheckError> {
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
