//! The guard against a test that would never run: in these binaries (no libtest) a function
//! declared with the built-in `#[test]` or with `#[tokio::test]` compiles to nothing, without
//! a warning. Each binary has a test that fails when any of its sources declares one.

use std::path::Path;

/// `file:line: text` of every line under `dir` (recursively) that declares a test with an
/// attribute this harness does not see.
pub fn unregistered_tests(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                for (n, line) in text.lines().enumerate() {
                    let line = line.trim_start();
                    if line.starts_with("#[test") || line.starts_with("#[tokio::test") {
                        found.push(format!("{}:{}: {line}", path.display(), n + 1));
                    }
                }
            }
        }
    }
    found.sort();
    found
}

/// Fails, naming them, when `dir` declares tests this harness would not run.
pub fn assert_all_registered(dir: &Path) {
    let found = unregistered_tests(dir);
    assert!(
        found.is_empty(),
        "declare these with #[cordon_test::test] (tests/runner runs only those):\n{}",
        found.join("\n")
    );
}
