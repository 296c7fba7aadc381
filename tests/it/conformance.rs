//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, npm) against
//! `cordon serve --http`. The suite drives servers over Streamable HTTP only; it needs Node
//! 22, which `.ci/run` installs from the registry's `node` package into
//! tests/e2e/conformance/node_modules (private to this suite). The run is compared with
//! tests/e2e/conformance/expected-failures.yaml by the suite itself: a scenario that passed
//! and now fails, or one listed as failing that now passes, fails this test.

use crate::common::CORDON;
use crate::suites::{last_lines, missing_prerequisites};
use std::path::Path;
use std::process::Command;

#[cordon_test::test]
fn official_conformance_suite_against_serve_http() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/conformance");
    let bin = dir.join("node_modules/.bin");
    let node = bin.join("node");
    let suite = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let version = Command::new(&node).arg("--version").output();
    let version = match version {
        Ok(out) if out.status.success() && suite.exists() => {
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        }
        _ => {
            return missing_prerequisites(
                "official_conformance_suite_against_serve_http",
                "the conformance suite or its Node 22 is not installed",
                "npm ci --prefix tests/e2e/conformance (as .ci/run does)",
            );
        }
    };
    assert!(
        version.starts_with("v22."),
        "the suite needs Node 22, got {version}"
    );
    let ws = tempfile::tempdir().unwrap();
    // The suite opens a session per scenario and never ends one (no DELETE): room for all.
    let server = crate::http_client::HttpServer::start(
        ws.path(),
        crate::http_client::Start {
            policy: Some("[server.http]\nmax_sessions = 128\n"),
            ..Default::default()
        },
    );
    let results = tempfile::tempdir().unwrap();
    let url = format!("http://{}/mcp", server.addr);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(&node)
        .arg(&suite)
        .args(["server", "--url", &url, "--expected-failures"])
        .arg(dir.join("expected-failures.yaml"))
        .arg("-o")
        .arg(results.path())
        .env("PATH", path)
        .current_dir(&dir)
        .output()
        .expect("run the conformance suite");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let summary = stdout
        .split("=== SUMMARY ===")
        .nth(1)
        .unwrap_or(&stdout)
        .to_owned();
    eprintln!("conformance ({CORDON} serve --http):{summary}");
    assert!(
        out.status.success(),
        "the conformance run differs from tests/e2e/conformance/expected-failures.yaml:\n{}\n{}\nserver stderr:\n{}",
        last_lines(&summary, 60),
        last_lines(&stderr, 20),
        last_lines(&server.stderr(), 20),
    );
    assert!(
        summary.contains("✓ server-initialize") && summary.contains("✓ tools-list"),
        "{summary}"
    );
}
