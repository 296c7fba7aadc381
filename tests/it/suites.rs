//! What a suite driven from here does when its prerequisites are missing: fail under CI
//! (`CI=true`, which `.ci/run` gets, so a missing install step can never pass unnoticed), and
//! locally say loudly which suite was skipped and why. `cargo test` counts such a test as
//! skipped, with the reason on its line; `.config/nextest.toml` shows the output of these
//! tests in nextest's final summary, so the skip is seen there too.

/// Whether this run is CI's (where every suite must run).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Reports a suite that cannot run: panics under CI, prints `SKIPPED` locally (and the harness
/// counts the test as skipped). Returns so the caller can `return`.
pub fn missing_prerequisites(suite: &str, missing: &str, fix: &str) {
    let line = format!("SKIPPED {suite}: {missing}; to run it: {fix}");
    if in_ci() {
        panic!("{line} (CI=true: a suite whose prerequisites are missing fails the run)");
    }
    eprintln!("{line}");
    crate::runner::mark_skipped(&format!("{missing}; to run it: {fix}"));
}

/// The last `n` lines of `text`, for failure messages.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
