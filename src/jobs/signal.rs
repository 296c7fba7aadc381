//! Signals for a job as a terminal would send them: to its process group, not only its main
//! process.
//!
//! A job's command runs under `sh -c`, so its main process is usually a shell that waits for
//! the program the agent meant (`python3 app.py`, `npm run dev`): a signal for the main
//! process alone never reaches it. Under a pty the signal goes to the terminal's foreground
//! process group (`TIOCSIG`, exactly what Ctrl-C does); without one, to every member of the
//! job's process group, found through the job's cgroup (each opened as a pidfd before its
//! group is read, so a recycled pid cannot be signalled). The slot's reaper (PID 1 of the
//! job's namespace, which shares the group) is left out: it would pass the signal on to the
//! main process a second time.
//!
//! Owns only who gets a signal; when and what for is the supervisor's (`job`).

use crate::exec::launch::Launched;
use crate::exec::process::Process;
use rustix::process::{Pid, PidfdFlags, Signal};
use std::os::fd::OwnedFd;

/// Who a signal is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whom {
    /// The whole process group (the foreground group under a pty).
    Group,
    /// The group without its main process (a graceful stop's first step: the programs the
    /// shell runs end before the shell does).
    GroupButMain,
    /// The main process only.
    Main,
}

/// One member of the job's process group, held by a pidfd.
struct Member {
    pidfd: OwnedFd,
    main: bool,
}

/// Sends `signal` to `whom`; the number of processes it reached (at least one when the main
/// process alone was meant and it is alive).
pub(crate) fn send(
    launched: &Launched,
    terminal: Option<&crate::confine::terminal::Terminal>,
    signal: Signal,
    whom: Whom,
) -> usize {
    if let Some(terminal) = terminal
        && whom == Whom::Group
        && signal != Signal::KILL
        && terminal.signal_foreground(signal).is_ok()
    {
        return 1;
    }
    if whom == Whom::Main {
        return usize::from(launched.child.signal(signal));
    }
    let Some(members) = group_members(launched) else {
        // No cgroup to find the members by: the main process, whose own group on the
        // per-child path is the job's (it made a session of its own).
        return match (&launched.child, launched.pgid, whom) {
            (Process::Forked(_), Some(pgid), Whom::Group) => Pid::from_raw(pgid as i32)
                .is_some_and(|p| rustix::process::kill_process_group(p, signal).is_ok())
                as usize,
            (_, _, Whom::Group) => usize::from(launched.child.signal(signal)),
            _ => 0,
        };
    };
    members
        .iter()
        .filter(|m| whom == Whom::Group || !m.main)
        .filter(|m| rustix::process::pidfd_send_signal(&m.pidfd, signal).is_ok())
        .count()
}

/// Whether the group still has members other than its main process.
pub(crate) fn others_remain(launched: &Launched) -> bool {
    group_members(launched).is_some_and(|m| m.iter().any(|m| !m.main))
}

/// The job's process group, from its cgroup; None without a cgroup or a known group.
fn group_members(launched: &Launched) -> Option<Vec<Member>> {
    let pgid = launched.pgid? as i32;
    let pids = launched.cgroup.as_ref()?.member_pids()?;
    let slot = matches!(launched.child, Process::Slot(_));
    let main_pid = match &launched.child {
        Process::Forked(c) => c.id().map(|p| p as i32),
        Process::Slot(_) => None,
    };
    let mut members = Vec::new();
    for pid in pids {
        // The reaper: its group's leader in a slot.
        if slot && pid == pgid {
            continue;
        }
        let Some(p) = Pid::from_raw(pid) else {
            continue;
        };
        // Opened first: what is read below is then about this very process.
        let Ok(pidfd) = rustix::process::pidfd_open(p, PidfdFlags::empty()) else {
            continue;
        };
        let Some((group, ns_pid)) = group_and_ns_pid(pid) else {
            continue;
        };
        if group != pgid {
            continue;
        }
        // In a slot the main process is pid 2 of the job's namespace.
        let main = main_pid.map_or(ns_pid == Some(2), |m| m == pid);
        members.push(Member { pidfd, main });
    }
    Some(members)
}

/// A process's group (in the server's namespace) and its pid in its innermost namespace.
fn group_and_ns_pid(pid: i32) -> Option<(i32, Option<i32>)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold anything, ')' included: the fields start after the last one.
    let rest = &stat[stat.rfind(')')? + 1..];
    let group: i32 = rest.split_whitespace().nth(2)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ns_pid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|p| p.parse().ok());
    Some((group, ns_pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_group_and_a_pid() {
        let me = std::process::id() as i32;
        let (group, ns_pid) = group_and_ns_pid(me).unwrap();
        assert_eq!(group, rustix::process::getpgrp().as_raw_nonzero().get());
        assert!(ns_pid.is_some());
    }
}
