//! Running many tests: each in a child process (this binary again, `--exact NAME`), at most
//! [`Options::parallelism`] at a time. Worker threads take the next test from a shared
//! counter, so one slow test holds up only its own worker; lines are printed as tests finish.
//! A child's stdout and stderr go into one pipe, so its output reads in the order it was
//! written, and it is shown when the test fails (or with `--show-output`).

use super::Selection;
use super::args::Options;
use super::child::{self, OUTCOME_ENV};
use super::report::{self, Finished, Outcome, Tally};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Instant;

pub fn run(selection: &Selection, options: &Options) -> i32 {
    let started = Instant::now();
    report::start(selection, options);
    let next = AtomicUsize::new(0);
    let (done, finished) = mpsc::channel::<Finished>();
    let mut tally = Tally::default();
    std::thread::scope(|scope| {
        for _ in 0..options.parallelism().min(selection.run.len()) {
            let done = done.clone();
            let next = &next;
            scope.spawn(move || {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some((name, _)) = selection.run.get(index) else {
                        return;
                    };
                    if done.send(run_child(index, name, options)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done);
        for one in finished {
            tally.record(one, options);
        }
    });
    tally.finish(selection, started.elapsed(), options)
}

/// Runs one test in a child process and says how it ended.
fn run_child(index: usize, name: &str, options: &Options) -> Finished {
    let outcome_file = std::env::temp_dir().join(format!(
        "cordon-test-{}-{index}.outcome",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&outcome_file);
    let failed = |why: String| Finished {
        name: name.to_owned(),
        outcome: Outcome::Failed(why),
        output: String::new(),
    };
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return failed(format!("cannot find this test binary: {e}")),
    };
    let mut cmd = Command::new(exe);
    // `--include-ignored` so that an ignored test asked for by `--ignored` is found.
    cmd.args(["--exact", name, "--include-ignored", "--nocapture"])
        .env(OUTCOME_ENV, &outcome_file)
        .stdin(Stdio::null());
    let mut output = String::new();
    let status = if options.nocapture {
        cmd.status()
    } else {
        captured(cmd, &mut output)
    };
    let outcome = match status {
        Ok(status) => child::outcome(status.success(), &describe(status), &outcome_file),
        Err(e) => Outcome::Failed(format!("cannot start the test's process: {e}")),
    };
    Finished {
        name: name.to_owned(),
        outcome,
        output,
    }
}

/// Runs `cmd` with stdout and stderr into one pipe, read into `output`.
fn captured(mut cmd: Command, output: &mut String) -> std::io::Result<ExitStatus> {
    let (mut reader, writer) = std::io::pipe()?;
    cmd.stdout(writer.try_clone()?).stderr(writer);
    let mut child = cmd.spawn()?;
    // The command holds the pipe's write ends; until they are closed here the read below
    // would never see the end of the child's output.
    drop(cmd);
    let mut bytes = Vec::new();
    let read = reader.read_to_end(&mut bytes);
    let status = child.wait()?;
    read?;
    *output = String::from_utf8_lossy(&bytes).into_owned();
    Ok(status)
}

/// `exit status: 101`, or the signal that killed the process.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status: {code}"),
        (None, Some(signal)) => format!(
            "killed by signal {signal}{}",
            if status.core_dumped() {
                " (core dumped)"
            } else {
                ""
            }
        ),
        (None, None) => format!("{status}"),
    }
}
