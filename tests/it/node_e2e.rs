//! Runs the Node end-to-end suites (`tests/e2e/node`, `node --test`) against the `cordon`
//! binary this build produced: the official TypeScript SDK client (over stdio, and over
//! Streamable HTTP against `serve --http`) and the MCP Inspector CLI,
//! both of which check every result, errors included, against the tool's `outputSchema`.
//! They need `node` and the packages of `tests/e2e/node/package-lock.json`
//! (`npm ci --prefix tests/e2e/node`); without them CI fails and a local run prints `SKIPPED`
//! (see `suites`).

use crate::suites::{last_lines, missing_prerequisites};
use std::path::Path;
use std::process::Command;

const NODE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/node");

/// Why the Node suites cannot run, if they cannot.
fn missing() -> Option<String> {
    match Command::new("node").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        _ => return Some("`node` is not installed".into()),
    }
    for package in [
        "@modelcontextprotocol/sdk",
        "@modelcontextprotocol/inspector-cli",
        "ajv",
    ] {
        let manifest = Path::new(NODE_DIR)
            .join("node_modules")
            .join(package)
            .join("package.json");
        if !manifest.exists() {
            return Some(format!("the npm package {package} is not installed"));
        }
    }
    None
}

fn run_suite(name: &str, file: &str) {
    if let Some(why) = missing() {
        return missing_prerequisites(
            name,
            &why,
            "apt-get install nodejs npm && npm ci --prefix tests/e2e/node (as .ci/run does)",
        );
    }
    let out = Command::new("node")
        .args(["--test", "--test-reporter=spec", file])
        .current_dir(NODE_DIR)
        .env("CORDON_BIN", env!("CARGO_BIN_EXE_cordon"))
        .output()
        .expect("run node --test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let counts: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("ℹ pass") || l.starts_with("ℹ fail"))
        .collect();
    eprintln!("{name}: node --test {file}: {}", counts.join(", "));
    assert!(
        out.status.success(),
        "{file} failed:\n{}\n{}",
        last_lines(&stdout, 120),
        last_lines(&stderr, 20),
    );
    assert!(
        counts
            .iter()
            .any(|c| c.starts_with("ℹ pass") && c != &"ℹ pass 0"),
        "{file} ran no test:\n{stdout}"
    );
}

#[cordon_test::test]
fn typescript_sdk_end_to_end_suite() {
    run_suite("typescript_sdk_end_to_end_suite", "sdk.test.mjs");
}

#[cordon_test::test]
fn typescript_sdk_streamable_http_suite() {
    run_suite("typescript_sdk_streamable_http_suite", "http.test.mjs");
}

#[cordon_test::test]
fn inspector_cli_end_to_end_suite() {
    run_suite("inspector_cli_end_to_end_suite", "inspector.test.mjs");
}
