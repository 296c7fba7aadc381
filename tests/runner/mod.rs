//! The integration binaries' own test harness (`harness = false` in Cargo.toml), so that plain
//! `cargo test` needs nothing beyond Rust and still runs every test in a process of its own:
//! confinement is irreversible, and a test that confined its own process must not share it.
//!
//! Each test is declared with `#[cordon_test::test]` (tests/cordon-test), which registers it in
//! [`TESTS`]. Run with several tests selected, the binary re-executes itself once per test
//! (`--exact NAME`, with [`child::OUTCOME_ENV`] naming the file where the child reports its
//! outcome), a bounded number at a time, and prints libtest's lines and summary, with skipped
//! tests counted as skipped. Run with exactly one test selected, which is how cargo-nextest
//! runs each test (`--exact NAME --nocapture`), it runs that test in this process. It speaks
//! the libtest arguments that cargo and nextest use (see [`args`]).
//!
//! A test skips by calling [`skip::mark_skipped`] (the skip helpers in tests/it and
//! tests/compat do) and returning: the outcome is never guessed from its output.

pub mod args;
pub mod child;
pub mod in_process;
pub mod parallel;
pub mod registered;
pub mod report;
pub mod skip;

use args::{Ignored, Options};

pub use skip::mark_skipped;

/// One registered test.
#[derive(Debug)]
pub struct Test {
    /// `module_path!()` where it was declared (starts with the binary's crate name).
    pub module: &'static str,
    pub name: &'static str,
    pub run: fn(),
    /// `#[ignore]`d, with its reason ("" when none is given).
    pub ignored: Option<&'static str>,
}

impl Test {
    /// The name libtest would give it: the module path below the crate root, then the function.
    pub fn path(&self) -> String {
        match self.module.split_once("::") {
            Some((_crate, module)) => format!("{module}::{}", self.name),
            None => self.name.to_owned(),
        }
    }
}

/// Every test of this binary, filled in by `#[cordon_test::test]`.
#[linkme::distributed_slice]
pub static TESTS: [Test];

/// The tests an invocation is about: those its filters select, in name order.
pub struct Selection {
    /// To run, with their names.
    pub run: Vec<(String, &'static Test)>,
    /// Selected by the filters but `#[ignore]`d (reported as ignored, not run).
    pub ignored: Vec<String>,
    /// How many the filters left out.
    pub filtered_out: usize,
}

pub fn select(options: &Options) -> Selection {
    let mut all: Vec<(String, &'static Test)> = TESTS.iter().map(|t| (t.path(), t)).collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let total = all.len();
    let mut selection = Selection {
        run: Vec::new(),
        ignored: Vec::new(),
        filtered_out: 0,
    };
    for (name, test) in all {
        if !options.selects(&name) {
            continue;
        }
        match (options.ignored, test.ignored.is_some()) {
            (Ignored::Only, false) => {}
            (Ignored::Exclude, true) => selection.ignored.push(name),
            _ => selection.run.push((name, test)),
        }
    }
    selection.filtered_out = total - selection.run.len() - selection.ignored.len();
    selection
}

/// The binary's `main`: parse libtest's arguments, then list, run one test here, or run each
/// selected test in a child process.
pub fn main() {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(101);
        }
    };
    let selection = select(&options);
    let code = if options.list {
        report::list(&selection, &options);
        0
    } else if let Some(outcome_file) = child::outcome_file() {
        child::run(&selection, &outcome_file)
    } else if let [(name, test)] = selection.run.as_slice() {
        in_process::run_reported(name, test, &selection, &options)
    } else {
        parallel::run(&selection, &options)
    };
    std::process::exit(code);
}
