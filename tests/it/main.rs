//! cordon's integration tests, in one binary (one link of the crate, one place to look).
//!
//! Confinement scenarios spawn the `cordon` binary per test, so every confined process is its
//! own process whatever runner is used; `cargo nextest` additionally runs each test in its
//! own process.

mod call_isolation;
mod common;
mod confinement;
mod conformance;
mod credentials;
mod disk;
mod doctor;
mod egress;
mod exec_cli;
mod fail_closed;
mod file_attacks;
mod git_protection;
mod home;
mod http_client;
mod http_server;
mod interpreter;
mod jobs;
mod kernel_denials;
mod kubernetes;
mod lint_confined;
mod lint_introduced;
mod lint_parsers;
mod lint_syntax;
mod mcp_logging;
mod mcp_rmcp_client;
mod mcp_tasks;
mod metrics;
mod namespaces;
mod node_e2e;
mod operator_approvals;
mod parser_worker;
mod policy_replay;
mod protected_paths;
mod protected_view;
mod python_e2e;
mod readme;
mod schemas;
mod server_lifetime;
mod startup;
mod stdio_server;
mod suites;
mod workspace;
