//! Command analysis for `shell_exec`: which simple commands a command line runs (`parse`) and
//! what the policy's command rules decide about them (`rules`).
//!
//! Owns nothing outside that: asking the user is the server's, refusing is the tool's, and
//! confining what runs is `confine`'s. The rules are a courtesy layer in front of the kernel
//! confinement, never instead of it.

pub mod parse;
pub mod rules;

pub use rules::{
    CommandRules, DEFAULT_ON_ANALYSIS_FAILURE, Decision, ON_ANALYSIS_FAILURE, ON_UNKNOWN, RawRule,
    Reason, Verdict,
};
