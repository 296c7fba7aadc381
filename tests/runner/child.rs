//! The protocol between the runner and the child it starts for one test. The parent sets
//! [`OUTCOME_ENV`] to a file path; the child runs its one test and writes how it ended there
//! (`passed`, or `skipped` and the reason on the next line) before exiting 0. A child that
//! exits 0 without writing the file did not finish its test (something called `exit`), and is
//! a failure; so is any other exit.

use super::Selection;
use super::in_process;
use super::report::Outcome;
use std::path::{Path, PathBuf};

/// Set by the parent on each child it starts: where the child reports its outcome.
pub const OUTCOME_ENV: &str = "CORDON_TEST_OUTCOME_FILE";

/// The outcome file, when this process is a child of the runner.
pub fn outcome_file() -> Option<PathBuf> {
    std::env::var_os(OUTCOME_ENV).map(PathBuf::from)
}

/// The child's side: run the one selected test and report it. Exits 101 on failure, as
/// libtest does.
pub fn run(selection: &Selection, outcome_file: &Path) -> i32 {
    let [(name, test)] = selection.run.as_slice() else {
        eprintln!(
            "{OUTCOME_ENV} is set but {} tests are selected (expected one)",
            selection.run.len()
        );
        return 101;
    };
    let written = match in_process::run(name, test) {
        Outcome::Passed => "passed\n".to_owned(),
        Outcome::Skipped(why) => format!("skipped\n{why}\n"),
        Outcome::Failed(_) => return 101,
    };
    if let Err(e) = std::fs::write(outcome_file, written) {
        eprintln!("cannot report the outcome of {name}: {e}");
        return 101;
    }
    0
}

/// The parent's side: how the child ended, from its exit and its file.
pub fn outcome(success: bool, how: &str, outcome_file: &Path) -> Outcome {
    let written = std::fs::read_to_string(outcome_file);
    let _ = std::fs::remove_file(outcome_file);
    if !success {
        return Outcome::Failed(how.to_owned());
    }
    match written.as_deref().map(|w| w.split_once('\n')) {
        Ok(Some(("passed", _))) => Outcome::Passed,
        Ok(Some(("skipped", why))) => Outcome::Skipped(why.trim_end().to_owned()),
        _ => Outcome::Failed(format!(
            "{how}, but the test never reported an outcome (did it call exit?)"
        )),
    }
}
