//! cordon's integration tests, in one binary (one link of the crate, one place to look).
//!
//! The binary is its own harness (tests/runner): `cargo test` and `cargo nextest run` both run
//! each test in a process of its own, so a test that confines its process, or leaves a
//! server behind, shares it with no other. Tests are declared with `#[cordon_test::test]`.

#[path = "../runner/mod.rs"]
mod runner;

mod breaker;
mod call_isolation;
mod cgroup_reuse;
mod checkpoints;
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
mod forward_policy;
mod git_direct_import;
mod git_protection;
mod home;
mod host_uid;
mod http_client;
mod http_server;
mod http_workspaces;
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
mod spec;
mod startup;
mod stdio_server;
mod structure;
mod suites;
mod test_harness;
mod workspace;

fn main() {
    runner::main()
}

/// A test declared with the built-in `#[test]` here would silently never run.
#[cordon_test::test]
fn every_test_is_declared_with_the_harness_attribute() {
    runner::registered::assert_all_registered(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it"),
    );
}
