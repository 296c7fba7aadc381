//! The real `git` binary run by the server on the operator's repository, hardened: no system
//! or global configuration, no hooks, no fsmonitor, no replace objects, no prompt, no
//! automatic gc, and an explicit gitdir (no discovery that could land elsewhere).
//!
//! Owns the command line and the bounded running of it. It only ever runs with the
//! operator's gitdir, whose content no confined process can write; data from the shadow
//! reaches it only on stdin (a pack stream, object names cordon validated), never as a
//! repository it opens.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one host git command may take before it is killed and the import refused.
pub(super) const HOST_GIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Most bytes of a command's stdout or stderr kept.
const MAX_OUTPUT: u64 = 16 << 20;

/// A host git command failed: which, and what it said.
#[derive(Debug, thiserror::Error)]
#[error("host `git {what}` failed: {detail}")]
pub(super) struct HostGitError {
    pub what: String,
    pub detail: String,
}

/// `git` for the operator's gitdir `gitdir` with work tree `worktree` (none when they are
/// the same: a bare repository), with the hardened environment and `-c` flags; the caller
/// adds the subcommand.
pub(super) fn command(gitdir: &Path, worktree: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.env_clear()
        .env(
            "PATH",
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
        )
        .env("HOME", "/nonexistent")
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_DIR", gitdir);
    if gitdir != worktree {
        cmd.env("GIT_WORK_TREE", worktree);
    }
    cmd.args([
        "-c",
        "core.hooksPath=/dev/null",
        "-c",
        "core.fsmonitor=false",
        "-c",
        "safe.directory=*",
        "-c",
        "gc.auto=0",
        "-c",
        "maintenance.auto=false",
        "-c",
        "core.commitGraph=false",
    ])
    .current_dir(worktree)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

/// Runs `cmd` with `input` on stdin (when given), within [`HOST_GIT_TIMEOUT`]; its stdout
/// when it exits 0, else an error with the start of its stderr.
pub(super) fn run(
    mut cmd: Command,
    what: &str,
    input: Option<&[u8]>,
) -> Result<Vec<u8>, HostGitError> {
    let fail = |detail: String| HostGitError {
        what: what.to_owned(),
        detail,
    };
    if input.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| fail(format!("cannot start git: {e}")))?;
    if let (Some(mut stdin), Some(bytes)) = (child.stdin.take(), input) {
        let bytes = bytes.to_vec();
        std::thread::spawn(move || stdin.write_all(&bytes));
    }
    wait(child, what)
}

/// Collects a started child's output and status within [`HOST_GIT_TIMEOUT`] (killed after).
pub(super) fn wait(mut child: std::process::Child, what: &str) -> Result<Vec<u8>, HostGitError> {
    let fail = |detail: String| HostGitError {
        what: what.to_owned(),
        detail,
    };
    let out = child.stdout.take();
    let err = child.stderr.take();
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(p) = pipe {
                let _ = p.take(MAX_OUTPUT).read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let out = reader(out.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = reader(err.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + HOST_GIT_TIMEOUT;
    // Woken when it exits (its pidfd turns readable), not by polling: most of these commands
    // end within a millisecond or two, and a sleep's granularity would be most of their cost.
    if let Ok(pidfd) = rustix::process::pidfd_open(
        rustix::process::Pid::from_child(&child),
        rustix::process::PidfdFlags::empty(),
    ) {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [rustix::event::PollFd::new(
            &pidfd,
            rustix::event::PollFlags::IN,
        )];
        while let Err(rustix::io::Errno::INTR) = rustix::event::poll(&mut fds, Some(&timeout)) {}
    }
    // Polled from 20 µs up to 5 ms where there is no pidfd (or it timed out: then killed).
    let mut pause = Duration::from_micros(20);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(5));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!("did not finish in {HOST_GIT_TIMEOUT:?}")));
            }
            Err(e) => return Err(fail(e.to_string())),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if status.success() {
        Ok(stdout)
    } else {
        let text = String::from_utf8_lossy(&stderr);
        Err(fail(
            text.chars().take(400).collect::<String>().trim().to_owned(),
        ))
    }
}
