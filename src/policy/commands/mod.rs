//! Command analysis for `shell_exec`: what the policy's command rules decide about the simple
//! commands a command line runs (`rules`), and the check of the rules' examples at startup
//! (`examples`). Reading the command line is the parser's (`crate::parser::bash`, in the
//! confined worker); these modules judge its [`Analysis`](crate::parser::bash::Analysis).
//!
//! Owns nothing outside that: asking the user is the server's, refusing is the tool's, and
//! confining what runs is `confine`'s. The rules are a courtesy layer in front of the kernel
//! confinement, never instead of it.

pub(crate) mod examples;
pub(crate) mod rules;

pub(crate) use examples::{ExampleCheckError, check_examples};
pub(crate) use rules::{
    CommandRules, DEFAULT_ON_ANALYSIS_FAILURE, Decision, ON_ANALYSIS_FAILURE, ON_UNKNOWN, RawRule,
    Reason, Verdict,
};
