//! What to run, the one value every spec holds ([`Program`]): program and arguments, the
//! environment overrides, the directory to start in, and a terminal.
//!
//! A call (`ExecRequest`), a launch (`launch::LaunchSpec`), a job (`jobs::JobSpec`), a worker
//! (`worker::WorkerSpec`) and what a warm slot is handed (`process::SlotSpawn`) each carry one
//! and add only what is theirs (capture, limits, descriptors). Its image on the wire to a slot
//! is `wire::Exec`, in the slot's terms (the whole environment, a path for the directory).

use crate::confine::sandbox_init::wire::PtySize;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;

/// A program to start, and how.
#[derive(Debug, Default)]
pub struct Program {
    /// Program and arguments; a program without `/` is looked up in the child's PATH.
    pub argv: Vec<OsString>,
    /// Overrides merged over the policy's scrubbed environment.
    pub env: BTreeMap<String, String>,
    /// Directory to start in, resolved beneath the workspace (an open directory, so it cannot
    /// be swapped for a symlink between resolution and use); None = the workspace root.
    pub cwd: Option<OwnedFd>,
    /// Run under a new terminal of this size instead of pipes: its output is one stream.
    pub pty: Option<PtySize>,
}

impl Program {
    /// `argv` in the workspace root, with the policy's environment and no terminal.
    pub fn new<A: Into<OsString>>(argv: impl IntoIterator<Item = A>) -> Self {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// `/bin/sh -c script`: how `shell_exec` and jobs run a command line.
    pub fn shell(script: impl Into<OsString>) -> Self {
        Self::new([OsString::from("/bin/sh"), "-c".into(), script.into()])
    }

    /// With these environment overrides.
    pub fn with_env(mut self, env: BTreeMap<String, String>) -> Self {
        self.env = env;
        self
    }

    /// Started in this directory (None: the workspace root).
    pub fn in_dir(mut self, cwd: Option<OwnedFd>) -> Self {
        self.cwd = cwd;
        self
    }

    /// Under a terminal of this size (None: pipes).
    pub fn with_pty(mut self, pty: Option<PtySize>) -> Self {
        self.pty = pty;
        self
    }

    /// The program's name as error messages give it (its first argument).
    pub fn name(&self) -> String {
        self.argv
            .first()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The same program again (`job {restart: true}`); the directory is a new descriptor of
    /// the same directory, or the root when it cannot be duplicated.
    pub fn try_clone(&self) -> Self {
        Self {
            argv: self.argv.clone(),
            env: self.env.clone(),
            cwd: self.cwd.as_ref().and_then(|fd| fd.try_clone().ok()),
            pty: self.pty,
        }
    }
}
