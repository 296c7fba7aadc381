//! What the runner prints, in libtest's shape so that cargo's users and tools read it as
//! usual: `running N tests`, one `test NAME ... ok` line per test (`... skipped (why)` for a
//! skipped one), the failures with their output, and the summary line, which counts skipped
//! tests apart from passed ones (`test result: ok. 420 passed; 0 failed; 7 skipped; …`).

use super::Selection;
use super::args::Options;
use std::io::Write;
use std::time::Duration;

/// How one test ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// The test marked itself skipped (prerequisite missing), with why.
    Skipped(String),
    /// It panicked, exited non-zero, was killed, or never said how it ended.
    Failed(String),
}

/// A finished test, with what it printed (empty when its output was not captured).
pub struct Finished {
    pub name: String,
    pub outcome: Outcome,
    pub output: String,
}

/// The counts of a run, and what to show at its end.
#[derive(Default)]
pub struct Tally {
    passed: usize,
    skipped: usize,
    failures: Vec<Finished>,
    successes: Vec<Finished>,
}

impl Tally {
    /// Prints the test's line and counts it.
    pub fn record(&mut self, finished: Finished, options: &Options) {
        let mark = match &finished.outcome {
            Outcome::Passed => {
                self.passed += 1;
                Mark::Ok
            }
            Outcome::Skipped(why) => {
                self.skipped += 1;
                Mark::Skipped(why.clone())
            }
            Outcome::Failed(_) => Mark::Failed,
        };
        test_line(&finished.name, &mark, options);
        match finished.outcome {
            Outcome::Failed(_) => self.failures.push(finished),
            _ if options.show_output && !finished.output.is_empty() => {
                self.successes.push(finished)
            }
            _ => {}
        }
    }

    /// The output sections and the summary line; the run's exit code.
    pub fn finish(self, selection: &Selection, elapsed: Duration, options: &Options) -> i32 {
        if options.terse {
            println!();
        }
        if !self.successes.is_empty() {
            println!("\nsuccesses:\n");
            for s in &self.successes {
                println!("---- {} output ----\n{}", s.name, s.output);
            }
        }
        if !self.failures.is_empty() {
            println!("\nfailures:\n");
            for f in &self.failures {
                let Outcome::Failed(how) = &f.outcome else {
                    unreachable!("only failures are kept here")
                };
                println!("---- {} output ----\n{}({how})\n", f.name, f.output);
            }
            println!("\nfailures:");
            for f in &self.failures {
                println!("    {}", f.name);
            }
        }
        let ok = self.failures.is_empty();
        println!(
            "\ntest result: {}. {} passed; {} failed; {} skipped; {} ignored; 0 measured; \
             {} filtered out; finished in {:.2}s\n",
            if ok { "ok" } else { "FAILED" },
            self.passed,
            self.failures.len(),
            self.skipped,
            selection.ignored.len(),
            selection.filtered_out,
            elapsed.as_secs_f64(),
        );
        let _ = std::io::stdout().flush();
        if ok { 0 } else { 101 }
    }
}

pub enum Mark {
    Ok,
    Skipped(String),
    Failed,
    Ignored(&'static str),
}

/// `test NAME ... ok` (or one character of it with `-q`).
pub fn test_line(name: &str, mark: &Mark, options: &Options) {
    let mut out = std::io::stdout().lock();
    if options.terse {
        let c = match mark {
            Mark::Ok => '.',
            Mark::Skipped(_) => 's',
            Mark::Failed => 'F',
            Mark::Ignored(_) => 'i',
        };
        let _ = write!(out, "{c}");
    } else {
        let what = match mark {
            Mark::Ok => "ok".to_owned(),
            // One line whatever the reason says, so the line stays greppable.
            Mark::Skipped(why) => format!("skipped ({})", why.replace('\n', " ")),
            Mark::Failed => "FAILED".to_owned(),
            Mark::Ignored("") => "ignored".to_owned(),
            Mark::Ignored(why) => format!("ignored, {why}"),
        };
        let _ = writeln!(out, "test {name} ... {what}");
    }
    let _ = out.flush();
}

/// `running N tests`, and the ignored ones, which are not run.
pub fn start(selection: &Selection, options: &Options) {
    let n = selection.run.len() + selection.ignored.len();
    println!("\nrunning {n} test{}", if n == 1 { "" } else { "s" });
    for name in &selection.ignored {
        let why = super::TESTS
            .iter()
            .find(|t| t.path() == *name)
            .and_then(|t| t.ignored)
            .unwrap_or("");
        test_line(name, &Mark::Ignored(why), options);
    }
}

/// `--list`: `NAME: test` per test, as cargo-nextest reads it (`--format terse`), with
/// libtest's count line after it otherwise.
pub fn list(selection: &Selection, options: &Options) {
    // libtest lists ignored tests too; `--ignored` lists only them (they are then in `run`).
    let mut names: Vec<&String> = selection.run.iter().map(|(name, _)| name).collect();
    names.extend(&selection.ignored);
    names.sort();
    let mut out = std::io::stdout().lock();
    for name in &names {
        let _ = writeln!(out, "{name}: test");
    }
    if !options.terse {
        let n = names.len();
        let _ = writeln!(
            out,
            "\n{n} test{}, 0 benchmarks",
            if n == 1 { "" } else { "s" }
        );
    }
    let _ = out.flush();
}
