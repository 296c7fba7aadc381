//! Runs the Python SDK end-to-end suite (`tests/e2e`, pytest + the official `mcp` SDK) against
//! the `cordon` binary this build produced, so one command (`cargo test`) runs every
//! test. When `pytest` or `mcp==2.3.0` is not importable the suite cannot run: CI fails, a
//! local run prints `SKIPPED` with what to install (see `suites`).

use crate::suites::{last_lines, missing_prerequisites};
use std::process::Command;

fn python() -> String {
    std::env::var("CORDON_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The installed `mcp` version, or why the suite cannot run.
fn probe(python: &str) -> Result<String, String> {
    let out = Command::new(python)
        .args([
            "-c",
            "import pytest, mcp, importlib.metadata as m; print(m.version('mcp'))",
        ])
        .output()
        .map_err(|e| format!("`{python}` cannot be run ({e})"))?;
    if !out.status.success() {
        return Err(format!(
            "`{python}` cannot import pytest and mcp ({})",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cordon_test::test]
fn python_sdk_end_to_end_suite() {
    let python = python();
    let version = match probe(&python) {
        Ok(v) => v,
        Err(why) => {
            return missing_prerequisites(
                "python_sdk_end_to_end_suite",
                &why,
                "python3 -m pip install mcp==2.3.0 pytest (as .ci/run does)",
            );
        }
    };
    assert_eq!(version, "2.3.0", "the suite is written against mcp==2.3.0");
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(&python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/e2e"])
        .current_dir(root)
        .env("CORDON_BIN", env!("CARGO_BIN_EXE_cordon"))
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The summary line, so the runner's log shows the Python counts.
    if let Some(summary) = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" passed") || l.contains(" failed"))
    {
        eprintln!("pytest: {summary}");
    }
    assert!(
        out.status.success(),
        "the Python SDK suite failed:\n{}\n{}",
        last_lines(&stdout, 80),
        last_lines(&stderr, 20),
    );
}
