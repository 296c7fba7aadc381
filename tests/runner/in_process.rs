//! Running one test in this process: what a child does for its parent, and what the binary
//! does when exactly one test is selected (cargo-nextest's `--exact NAME --nocapture`, or a
//! person's `cargo test -- NAME`). Its output is not captured: it goes where this process's
//! goes.

use super::args::Options;
use super::report::{Finished, Outcome, Tally};
use super::{Selection, Test, skip};
use std::time::Instant;

/// Runs the test in a thread named after it, as libtest does (panic messages name the test);
/// a panic is its failure (the panic hook has printed the message). A test that aborts or is
/// killed takes this process with it, which whoever started it sees.
pub fn run(name: &str, test: &Test) -> Outcome {
    let thread = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(test.run);
    match thread.map(|t| t.join()) {
        Ok(Ok(())) => match skip::reason() {
            Some(why) => Outcome::Skipped(why),
            None => Outcome::Passed,
        },
        Ok(Err(_panic)) => Outcome::Failed("panicked".to_owned()),
        Err(e) => Outcome::Failed(format!("cannot start the test's thread: {e}")),
    }
}

/// Runs the only selected test here with libtest's lines around it. A skip exits 0 (nextest
/// has no skipped outcome; the test's own `SKIPPED` line on stderr says it) and is counted as
/// skipped in the summary.
pub fn run_reported(name: &str, test: &Test, selection: &Selection, options: &Options) -> i32 {
    let started = Instant::now();
    super::report::start(selection, options);
    let outcome = run(name, test);
    let mut tally = Tally::default();
    tally.record(
        Finished {
            name: name.to_owned(),
            outcome,
            output: String::new(),
        },
        options,
    );
    tally.finish(selection, started.elapsed(), options)
}
