//! A confined process as the executor sees it, whichever way it was born: a slot of the
//! sandbox init, or a child forked by the server itself (the per-child path, where namespaces
//! cannot be had). Also the spawn through a slot: pipes, the job, the exec.
//!
//! Owns the uniform handle (pid, wait, signal, kill on drop) and the pipe ends; it does not
//! own timeouts, capture or tree kills (`super`).

use crate::confine::sandbox_init::wire::{self, Arg, Exec};
use crate::confine::{SandboxChild, Slot};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use tokio::net::unix::pipe;

pub enum Process {
    Forked(tokio::process::Child),
    Slot(SandboxChild),
}

/// The server's ends of a child's standard streams.
#[derive(Default)]
pub struct Pipes {
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
    /// The master side of the terminal the process runs under, if it runs under one (then
    /// stdout and stderr are the terminal's and `stdout`/`stderr` are None).
    pub pty: Option<OwnedFd>,
}

impl Process {
    /// Pid in the server's namespace (also the process group); None once reaped.
    pub fn id(&self) -> Option<u32> {
        match self {
            Self::Forked(c) => c.id(),
            Self::Slot(c) => c.id(),
        }
    }

    pub async fn wait(&mut self) -> Option<ExitStatus> {
        match self {
            Self::Forked(c) => c.wait().await.ok(),
            Self::Slot(c) => Some(c.wait().await),
        }
    }

    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        match self {
            Self::Forked(c) => c.try_wait().ok().flatten(),
            Self::Slot(c) => c.try_wait(),
        }
    }

    /// How many processes the main process left running when it ended (ended with it), where
    /// a slot's reaper counts them; None on the per-child path.
    pub async fn leftovers(&mut self, within: std::time::Duration) -> Option<u32> {
        match self {
            Self::Forked(_) => None,
            Self::Slot(c) => c.leftovers(within).await,
        }
    }

    /// Whether the slot's reaper reported every process of the call killed and reaped
    /// (`SandboxChild::emptied`); never on the per-child path.
    pub fn emptied(&self) -> bool {
        match self {
            Self::Forked(_) => false,
            Self::Slot(c) => c.emptied(),
        }
    }

    /// Sends `signal` to the main process only.
    pub fn signal(&self, signal: rustix::process::Signal) -> bool {
        match self {
            Self::Forked(c) => c
                .id()
                .and_then(|p| rustix::process::Pid::from_raw(p as i32))
                .is_some_and(|pid| rustix::process::kill_process(pid, signal).is_ok()),
            Self::Slot(c) => c.signal(signal),
        }
    }
}

impl Pipes {
    /// Takes the pipes of a forked child.
    pub fn of_child(child: &mut tokio::process::Child) -> Self {
        let to_receiver = |fd: std::io::Result<OwnedFd>| {
            fd.ok()
                .and_then(|fd| pipe::Receiver::from_owned_fd(fd).ok())
        };
        Self {
            stdin: child
                .stdin
                .take()
                .and_then(|s| s.into_owned_fd().ok())
                .and_then(|fd| pipe::Sender::from_owned_fd(fd).ok()),
            stdout: to_receiver(child.stdout.take().map_or_else(
                || Err(std::io::ErrorKind::NotFound.into()),
                |s| s.into_owned_fd(),
            )),
            stderr: to_receiver(child.stderr.take().map_or_else(
                || Err(std::io::ErrorKind::NotFound.into()),
                |s| s.into_owned_fd(),
            )),
            pty: None,
        }
    }
}

/// A pipe whose read end the server keeps (non-blocking) and whose write end goes to the child.
fn output_pipe() -> std::io::Result<(pipe::Receiver, OwnedFd)> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    rustix::fs::fcntl_setfl(&read, rustix::fs::OFlags::NONBLOCK)?;
    Ok((pipe::Receiver::from_owned_fd(read)?, write))
}

fn input_pipe() -> std::io::Result<(pipe::Sender, OwnedFd)> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    rustix::fs::fcntl_setfl(&write, rustix::fs::OFlags::NONBLOCK)?;
    Ok((pipe::Sender::from_owned_fd(write)?, read))
}

/// What a slot runs: everything `exec` decided, in the slot's terms. The program's argv and
/// terminal are its own; its environment and directory as the slot takes them are here.
pub struct SlotSpawn<'a> {
    pub program: &'a super::Program,
    /// The whole environment: the policy's template with the program's overrides (and the
    /// call's own TMPDIR, HOME and proxy URL) merged in.
    pub env: &'a BTreeMap<String, String>,
    /// The program's directory, relative to the workspace root.
    pub cwd: PathBuf,
    pub piped_stdin: bool,
    pub rlimits: Vec<(i32, u64)>,
    /// Extra descriptors placed at the given numbers (3 and up).
    pub extra_fds: Vec<(i32, OwnedFd)>,
}

/// Starts `spec` in `slot`, returning the running process and the server's pipe ends.
pub fn spawn_in_slot(
    slot: Slot,
    mut spec: SlotSpawn<'_>,
) -> Result<(Process, Pipes), super::ExecError> {
    let program = spec.program.name();
    let spawn_err = |source: std::io::Error| super::ExecError::Spawn {
        program: program.clone(),
        source,
    };
    if spec.program.pty.is_some() {
        return spawn_under_terminal(slot, spec).map_err(spawn_err);
    }
    let (stdout, stdout_w) = output_pipe().map_err(spawn_err)?;
    let (stderr, stderr_w) = output_pipe().map_err(spawn_err)?;
    let (stdin, stdin_r) = if spec.piped_stdin {
        let (sender, read) = input_pipe().map_err(spawn_err)?;
        (Some(sender), read)
    } else {
        (
            None,
            OwnedFd::from(std::fs::File::open("/dev/null").map_err(spawn_err)?),
        )
    };
    let mut fds = vec![stdin_r, stdout_w, stderr_w];
    let mut targets = vec![0, 1, 2];
    for (target, fd) in std::mem::take(&mut spec.extra_fds) {
        targets.push(target);
        fds.push(fd);
    }
    let job = job_of(&spec, targets);
    let child = slot.start(job, fds).map_err(|e| spawn_err(e.source))?;
    Ok((
        Process::Slot(child),
        Pipes {
            stdin,
            stdout: Some(stdout),
            stderr: Some(stderr),
            pty: None,
        },
    ))
}

fn job_of(spec: &SlotSpawn<'_>, fds: Vec<i32>) -> Exec {
    Exec {
        program: wire::Program {
            argv: spec
                .program
                .argv
                .iter()
                .map(|a| Arg::from_bytes(a.as_bytes()))
                .collect(),
            env: spec
                .env
                .iter()
                .map(|(k, v)| Arg::Text(format!("{k}={v}")))
                .collect(),
            cwd: spec.cwd.clone(),
            pty: spec.program.pty,
        },
        fds,
        rlimits: spec.rlimits.clone(),
    }
}

/// Starts `spec` in `slot` under a terminal the slot opens in its own devpts: the process's
/// standard streams are the terminal, the server gets its master.
fn spawn_under_terminal(slot: Slot, mut spec: SlotSpawn<'_>) -> std::io::Result<(Process, Pipes)> {
    // Placeholders for 0, 1 and 2 until the slot puts the terminal there.
    let null = || std::fs::File::open("/dev/null").map(OwnedFd::from);
    let mut fds = vec![null()?, null()?, null()?];
    let mut targets = vec![0, 1, 2];
    for (target, fd) in std::mem::take(&mut spec.extra_fds) {
        targets.push(target);
        fds.push(fd);
    }
    let job = job_of(&spec, targets);
    let mut child = slot.start(job, fds).map_err(|e| e.source)?;
    let pty = child.take_pty();
    Ok((
        Process::Slot(child),
        Pipes {
            pty,
            ..Pipes::default()
        },
    ))
}
