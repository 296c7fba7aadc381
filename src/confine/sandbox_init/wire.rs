//! The messages between the server, the sandbox init and its warm slots, and their encoding.
//!
//! Owns only the shapes and the bounded (de)coding: one message is one datagram of a
//! `SOCK_SEQPACKET` socket, JSON with a version tag, descriptors travel beside it as
//! `SCM_RIGHTS` (see `fdpass`). Decoding never panics and refuses anything over
//! [`MAX_MESSAGE`]; an exec message too large for one datagram travels in a memfd instead (unsealed: the
//! server writes it once and hands it only to the slot, which reads it once). Nothing here
//! touches the kernel; it is what `fuzz/fuzz_targets/init_protocol.rs` exercises.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Bumped whenever a message changes shape; the init refuses a plan of another version, so a
/// server and an init from different builds never misread each other.
pub(crate) const PROTOCOL_VERSION: u32 = 7;

/// Largest datagram either side sends or accepts. Jobs above it go through a memfd
/// ([`ToSlot::ExecInMemfd`]), bounded by [`MAX_EXEC`].
pub const MAX_MESSAGE: usize = 48 * 1024;

/// Largest encoded exec message (argv + env). Well above what exec accepts (a quarter of the stack
/// limit), so an oversized command still reaches execve and fails there with E2BIG.
pub(crate) const MAX_EXEC: usize = 64 * 1024 * 1024;

/// Most descriptors one message carries (stdio, cwd-less jobs, a few extra fds).
pub const MAX_FDS: usize = 16;

/// An argument or variable: text when it is UTF-8 (compact JSON), bytes otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Arg {
    Text(String),
    Bytes(Vec<u8>),
}

impl Arg {
    pub fn from_bytes(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::Text(text.to_owned()),
            Err(_) => Self::Bytes(bytes.to_vec()),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Text(t) => t.as_bytes(),
            Self::Bytes(b) => b,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("message of {0} bytes exceeds the limit of {1} bytes")]
    TooLarge(usize, usize),
    #[error("malformed message: {0}")]
    Malformed(String),
}

/// The one writable directory of its own a slot gets besides the policy's grants: its Landlock
/// layer grants it, and the slot's mount namespace shows it at `/tmp` and `/var/tmp` too.
/// Another slot's directory is neither granted nor listed (the root holding them is not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SlotLayer {
    /// A call's slot: this directory is the call's TMPDIR.
    Calls(PathBuf),
    /// A long-lived worker's slot: its private directory.
    Private(PathBuf),
}

impl SlotLayer {
    /// The slot's own directory (host path, the same inside the view).
    pub fn dir(&self) -> &std::path::Path {
        match self {
            Self::Calls(dir) | Self::Private(dir) => dir,
        }
    }
}

/// Server → init, on the control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToInit {
    /// Fork a slot. Descriptors: the `cgroup.procs` files it joins (possibly none).
    Slot { id: u64, layer: SlotLayer },
}

/// Init → server, on the control socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromInit {
    /// The view is built and the confinement applied; the init now takes requests.
    /// Descriptors: when `proxy_listener`, the listening socket of the plan's proxy port;
    /// then, when `network_namespace`, the init's network namespace (`/proc/self/ns/net`), in
    /// which the server makes the sockets that forward host ports to jobs.
    Ready {
        pid_namespace: bool,
        network_namespace: bool,
        user_namespace: bool,
        proxy_listener: bool,
        /// The host uid confined processes run as, when it is not the init's own (cordon is
        /// root and each slot maps its root to it; `idmap`).
        #[serde(default)]
        calls_uid: Option<u32>,
        /// Why calls stay host root although the plan asked otherwise (the workspace's
        /// filesystem cannot be idmapped, say).
        #[serde(default)]
        calls_as_root: Option<String>,
    },
    /// Setting up failed; the server falls back to spawning each child itself.
    Failed { stage: String, error: String },
    /// A slot was forked. Descriptor: the server's end of the slot's socket.
    Slot { id: u64 },
    /// A slot could not be forked.
    SlotFailed { id: u64, error: String },
    /// The slot's process (by then the call's main process) ended with this wait status;
    /// `leftovers` processes it had started were still running then (ended with the slot).
    Exited {
        id: u64,
        status: i32,
        #[serde(default)]
        leftovers: u32,
        /// The slot's reaper killed and reaped every process of the call before reporting:
        /// nothing of the call runs, though the reaper itself may still be exiting.
        #[serde(default)]
        emptied: bool,
    },
}

/// Server → slot, on the slot's own socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToSlot {
    /// Descriptors: one per entry of `exec.fds`, in order.
    Exec(Exec),
    /// The exec message is in the attached memfd (first descriptor, `len` bytes), then its
    /// own descriptors follow.
    ExecInMemfd { len: usize },
}

/// Slot → server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromSlot {
    /// Joined its cgroups and applied its layer. Descriptor: a pidfd of itself.
    Ready,
    /// The job could not start; the slot exits 127. `errno` as the kernel gave it.
    Failed { stage: String, errno: i32 },
    /// The job runs under a terminal of the slot's own devpts. Descriptor: the master side,
    /// for the server to read and write; the exec's EOF follows.
    Pty,
}

/// A terminal's size, for a job that runs under one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    pub cols: u16,
    pub rows: u16,
}

/// What a slot runs ([`ToSlot::Exec`]): the program, and where its descriptors and limits go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exec {
    pub program: Program,
    /// Where each received descriptor goes in the new program (0, 1, 2, then extra ones).
    pub fds: Vec<i32>,
    /// `(resource, value)`: soft and hard limit alike.
    pub rlimits: Vec<(i32, u64)>,
}

/// `exec::Program` in the slot's terms: bytes for the arguments, the whole environment, and a
/// path for the directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Program {
    /// Program and arguments (not necessarily UTF-8).
    pub argv: Vec<Arg>,
    /// `NAME=value` entries, the whole environment.
    pub env: Vec<Arg>,
    /// Working directory relative to the workspace root, resolved inside the view beneath it.
    pub cwd: PathBuf,
    /// Run under a new terminal of the slot's devpts (its controlling terminal, on 0, 1 and
    /// 2, whatever `fds` places there); the master goes back to the server ([`FromSlot::Pty`]).
    #[serde(default)]
    pub pty: Option<PtySize>,
}

pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, WireError> {
    let bytes = serde_json::to_vec(&Versioned {
        v: PROTOCOL_VERSION,
        m: message,
    })
    .map_err(|e| WireError::Malformed(e.to_string()))?;
    Ok(bytes)
}

pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8], limit: usize) -> Result<T, WireError> {
    if bytes.len() > limit {
        return Err(WireError::TooLarge(bytes.len(), limit));
    }
    let v: Versioned<T> =
        serde_json::from_slice(bytes).map_err(|e| WireError::Malformed(e.to_string()))?;
    if v.v != PROTOCOL_VERSION {
        return Err(WireError::Malformed(format!(
            "protocol version {} (this build speaks {PROTOCOL_VERSION})",
            v.v
        )));
    }
    Ok(v.m)
}

#[derive(Serialize, Deserialize)]
struct Versioned<T> {
    v: u32,
    m: T,
}

impl Exec {
    /// The checks a slot makes before it acts on a job: something to run, no NUL inside an
    /// argument (exec would cut it silently), descriptors in range and not duplicated.
    pub fn validate(&self, received_fds: usize) -> Result<(), WireError> {
        if self
            .program
            .argv
            .first()
            .is_none_or(|a| a.as_bytes().is_empty())
        {
            return Err(WireError::Malformed("empty argv".into()));
        }
        if self
            .program
            .argv
            .iter()
            .chain(&self.program.env)
            .any(|a| a.as_bytes().contains(&0))
        {
            return Err(WireError::Malformed(
                "NUL byte in an argument or variable".into(),
            ));
        }
        if self.fds.len() != received_fds || self.fds.len() > MAX_FDS {
            return Err(WireError::Malformed(format!(
                "job names {} descriptors, {} arrived",
                self.fds.len(),
                received_fds
            )));
        }
        let mut seen = std::collections::BTreeSet::new();
        if self
            .fds
            .iter()
            .any(|&fd| !(0..1024).contains(&fd) || !seen.insert(fd))
        {
            return Err(WireError::Malformed(
                "descriptor targets out of range or repeated".into(),
            ));
        }
        if self.program.cwd.is_absolute()
            || self
                .program
                .cwd
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(WireError::Malformed(
                "cwd must be relative and stay beneath".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Exec {
        Exec {
            program: Program {
                argv: vec![Arg::from_bytes(b"/bin/true"), Arg::from_bytes(b"\xff")],
                env: vec![Arg::from_bytes(b"PATH=/bin")],
                cwd: PathBuf::from("."),
                pty: Some(PtySize { cols: 80, rows: 24 }),
            },
            fds: vec![0, 1, 2],
            rlimits: vec![(1, 10)],
        }
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let msg = ToSlot::Exec(job());
        let bytes = encode(&msg).unwrap();
        assert_eq!(decode::<ToSlot>(&bytes, MAX_MESSAGE).unwrap(), msg);
    }

    #[test]
    fn other_versions_and_oversize_are_refused() {
        let bytes = br#"{"v":99,"m":{"Slot":{"id":1,"layer":{"Calls":"/t"}}}}"#;
        assert!(matches!(
            decode::<ToInit>(bytes, MAX_MESSAGE),
            Err(WireError::Malformed(_))
        ));
        let big = vec![b' '; MAX_MESSAGE + 1];
        assert!(matches!(
            decode::<ToInit>(&big, MAX_MESSAGE),
            Err(WireError::TooLarge(..))
        ));
    }

    #[test]
    fn job_validation_refuses_escapes_and_fd_mismatch() {
        let mut j = job();
        assert!(j.validate(3).is_ok());
        assert!(j.validate(2).is_err());
        j.program.cwd = PathBuf::from("../x");
        assert!(j.validate(3).is_err());
        j.program.cwd = PathBuf::from("/abs");
        assert!(j.validate(3).is_err());
        let mut j = job();
        j.fds = vec![0, 0, 2];
        assert!(j.validate(3).is_err());
        let mut j = job();
        j.program.argv = vec![Arg::from_bytes(b"a\0b")];
        assert!(j.validate(3).is_err());
    }
}
