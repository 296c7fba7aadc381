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
