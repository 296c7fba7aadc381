//! Runs the Python SDK end-to-end suite (`tests/e2e`, pytest + the official `mcp` SDK) against
//! the `cordon` binary this build produced, so one command (`cargo nextest run`) runs every
//! test. When `pytest` or `mcp==2.3.0` is not importable it skips with a message saying what
//! to install (`.ci/run` installs both, so CI never skips it).

use std::process::Command;

#[test]
fn python_sdk_end_to_end_suite() {
    let python = std::env::var("CORDON_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args([
            "-c",
            "import pytest, mcp, importlib.metadata as m; print(m.version('mcp'))",
        ])
        .output();
    let version = match probe {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        _ => {
            eprintln!(
                "SKIP python_sdk_end_to_end_suite: `{python}` cannot import pytest and mcp; \
                 run `python3 -m pip install mcp==2.3.0 pytest` (as .ci/run does)"
            );
            return;
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
        stdout
            .lines()
            .rev()
            .take(80)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n"),
        stderr
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n"),
    );
}
