//! The sandbox init process, in stages of one program (`cordon __sandbox-init`): three processes
//! (launcher, PID 1, slot) and the start of the program a slot runs (exec):
//!
//! * the **launcher**, exec'd by the server: reads the [`InitPlan`] from stdin, unshares the
//!   namespaces (mount, PID, IPC, UTS, network when the policy has none, user when not root)
//!   and forks PID 1 of the new PID namespace; then only waits. It dies with the server
//!   (`PR_SET_PDEATHSIG`, set before exec and checked against the server's pid).
//! * **PID 1**: dies with the launcher (the same, checked through a pipe), builds the view
//!   (`view`), then serves the control socket: forks slots on request and reports how they
//!   end. It keeps its capabilities (each slot must mount before it confines itself) and is
//!   reachable by nothing confined. When PID 1 exits — the server closed the socket, or died —
//!   the kernel kills every process of the namespace: nothing a call started outlives the server.
//! * a **slot**: cloned by PID 1 into PID, IPC and mount namespaces of its own, whose PID 1 it
//!   is. It joins the call's cgroups (the slow migration, paid here, off the call's critical
//!   path), unshares a cgroup namespace, mounts its own `/proc`, `/tmp`, `/dev/shm`, devpts and
//!   cgroups (`slot_mounts`), confines itself (capabilities, `no_new_privs`, its Landlock layer,
//!   seccomp), forks the job's main process, reports ready with a pidfd of itself, and from then
//!   on only reaps and passes on the server's signals. The main process takes a scope-only
//!   Landlock layer and waits; a job is then only `fchdir`, `dup2`, `setrlimit`, `execve`.
//!   When it ends, the slot hands its wait status to PID 1 and exits, ending the namespace.
//!
//! Owns these processes' code, one file per stage, each entry a list of named steps whose
//! names are those a failure reports (`FromInit::Failed` / `FromSlot::Failed { stage }`) and
//! SECURITY.md lists: [`launcher`], [`pid1`], [`slot`], [`exec`]; the server side is
//! `super::process`. Everything here runs single-threaded, so forking is safe and the slot may
//! allocate.

mod exec;
mod launcher;
mod pid1;
mod slot;

use exec::*;
use launcher::*;
use pid1::*;
use slot::*;

use super::plan::{CallIds, InitPlan, LandlockPlan};
use super::wire::{self, Exec, FromInit, FromSlot, SlotLayer, ToInit, ToSlot};
use super::{fdpass, view};
use crate::confine::landlock::OpenedGrant;
use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// The hidden subcommand that runs this program.
pub const INIT_ARG: &str = "__sandbox-init";
/// The sandbox init's own small program (src/bin/cordon-init.rs), looked for beside `cordon`.
pub(crate) const INIT_PROGRAM: &str = "cordon-init";
/// Environment variable naming the server's pid, checked by the launcher after exec.
pub(crate) const PARENT_ENV: &str = "CORDON_INIT_PARENT";
/// Where the launcher finds the control socket.
pub(crate) const CONTROL_FD: RawFd = 3;
/// Where the server places the network namespace a rebuilt init joins (`plan.join_network`).
pub(crate) const NETNS_FD: RawFd = 4;
/// Job descriptors are placed below this; received ones are first moved above it.
const FD_TARGET_LIMIT: RawFd = 64;
/// Largest plan the launcher reads.
const MAX_PLAN: u64 = 16 * 1024 * 1024;

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn send_msg<T: serde::Serialize>(sock: impl AsFd, msg: &T, fds: &[std::os::fd::BorrowedFd<'_>]) {
    if let Ok(bytes) = wire::encode(msg) {
        let _ = fdpass::send(sock.as_fd(), &bytes, fds);
    }
}

/// Entry point of `cordon __sandbox-init`. Never returns.
pub fn main() -> ! {
    // SAFETY: the server placed the control socket at CONTROL_FD before exec and nothing else
    // in this fresh process owns that descriptor.
    let control = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
    let code = match launcher(&control) {
        Ok(code) => code,
        Err((stage, error)) => {
            eprintln!("cordon sandbox init: {stage}: {error}");
            send_msg(
                &control,
                &FromInit::Failed {
                    stage: stage.into(),
                    error,
                },
                &[],
            );
            1
        }
    };
    std::process::exit(code)
}

type StageError = (&'static str, String);

fn stage<T, E: std::fmt::Display>(name: &'static str, r: Result<T, E>) -> Result<T, StageError> {
    r.map_err(|e| (name, e.to_string()))
}
