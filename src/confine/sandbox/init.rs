//! The sandbox init process, in three stages of one program (`cordon __sandbox-init`):
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
//! Owns these processes' code; the server side is `super` (mod.rs). Everything here runs
//! single-threaded, so forking is safe and the slot may allocate.

use super::plan::{CallIds, InitPlan, LandlockPlan};
use super::wire::{self, FromInit, FromSlot, Job, SlotLayer, ToInit, ToSlot};
use super::{fdpass, view};
use crate::confine::landlock::OpenedGrant;
use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// The hidden subcommand that runs this program.
pub const INIT_ARG: &str = "__sandbox-init";
/// The sandbox init's own small program (src/bin/cordon-init.rs), looked for beside `cordon`.
pub const INIT_PROGRAM: &str = "cordon-init";
/// Environment variable naming the server's pid, checked by the launcher after exec.
pub const PARENT_ENV: &str = "CORDON_INIT_PARENT";
/// Where the launcher finds the control socket.
pub const CONTROL_FD: RawFd = 3;
/// Where the server places the network namespace a rebuilt init joins (`plan.join_network`).
pub const NETNS_FD: RawFd = 4;
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

fn launcher(control: &OwnedFd) -> Result<i32, StageError> {
    // The death signal was armed before exec; if the server died in between, it never fires.
    let expected = std::env::var(PARENT_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok());
    let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    if expected.is_none() || parent != expected {
        return Err(("parent check", "the server is gone".into()));
    }
    let mut text = Vec::new();
    stage(
        "read plan",
        io::stdin().take(MAX_PLAN).read_to_end(&mut text),
    )?;
    let plan: InitPlan = stage("parse plan", serde_json::from_slice(&text))?;
    if plan.version != wire::PROTOCOL_VERSION {
        return Err((
            "plan",
            format!("version {} is not {}", plan.version, wire::PROTOCOL_VERSION),
        ));
    }
    let mut flags =
        libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    if plan.isolate_network && plan.join_network {
        // The first init's namespace, before anything else is unshared (entering it needs
        // CAP_SYS_ADMIN here, which the server only asks for when it runs as root).
        // SAFETY: setns and close take a descriptor the server placed and a flag.
        unsafe {
            if libc::setns(NETNS_FD, libc::CLONE_NEWNET) != 0 {
                return Err(("join network", io::Error::last_os_error().to_string()));
            }
            libc::close(NETNS_FD);
        }
    } else if plan.isolate_network {
        flags |= libc::CLONE_NEWNET;
    }
    if plan.user_namespace.is_some() {
        flags |= libc::CLONE_NEWUSER;
    }
    // SAFETY: unshare takes only flags.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(("unshare", io::Error::last_os_error().to_string()));
    }
    if let Some((uid, gid)) = plan.user_namespace {
        stage("setgroups", std::fs::write("/proc/self/setgroups", "deny"))?;
        stage(
            "uid_map",
            std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")),
        )?;
        stage(
            "gid_map",
            std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")),
        )?;
    }
    let (alive_read, alive_write) = stage(
        "pipe",
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC),
    )?;
    // SAFETY: this process is single-threaded (no runtime was started in this subcommand), so
    // the child may run arbitrary code.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(("fork", io::Error::last_os_error().to_string())),
        0 => {
            drop(alive_write);
            pid1(&plan, control, alive_read)
        }
        child => {
            drop(alive_read);
            // Keep `alive_write` open for as long as we live: PID 1 watches it.
            let _keep = alive_write;
            // Only PID 1 talks to the server; the socket must close when PID 1 ends.
            // SAFETY: closing our copy of the control descriptor; `control` is never used
            // again in this process (we only wait below).
            unsafe {
                libc::close(control.as_raw_fd());
            }
            let mut status = 0;
            loop {
                // SAFETY: waitpid writes the status into a live local.
                let r = unsafe { libc::waitpid(child, &mut status, 0) };
                if r == child
                    || (r == -1 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR))
                {
                    break;
                }
            }
            std::process::exit(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                1
            });
        }
    }
}

fn pid1(plan: &InitPlan, control: &OwnedFd, alive: OwnedFd) -> ! {
    if rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .is_err()
    {
        std::process::exit(1);
    }
    // The launcher may have died before the signal was armed: then its pipe end is closed.
    let mut fds = [rustix::event::PollFd::new(
        &alive,
        rustix::event::PollFlags::IN,
    )];
    if rustix::event::poll(
        &mut fds,
        Some(&rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        }),
    )
    .unwrap_or(0)
        > 0
        && fds[0]
            .revents()
            .intersects(rustix::event::PollFlags::HUP | rustix::event::PollFlags::IN)
    {
        std::process::exit(1);
    }
    let _alive = alive;
    let (listener, built) = match setup(plan) {
        Ok(ready) => ready,
        Err((stage, error)) => {
            eprintln!("cordon sandbox init: {stage}: {error}");
            send_msg(
                control,
                &FromInit::Failed {
                    stage: stage.into(),
                    error,
                },
                &[],
            );
            std::process::exit(1);
        }
    };
    // The namespace itself, for the server's job forwarding (it connects from the host into
    // this loopback); a descriptor of a namespace grants nothing to a process already in it.
    let netns = if plan.isolate_network {
        match rustix::fs::open(
            "/proc/self/ns/net",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ) {
            Ok(fd) => Some(fd),
            Err(e) => {
                send_msg(
                    control,
                    &FromInit::Failed {
                        stage: "network namespace".into(),
                        error: e.to_string(),
                    },
                    &[],
                );
                std::process::exit(1);
            }
        }
    } else {
        None
    };
    let passed: Vec<std::os::fd::BorrowedFd<'_>> = listener
        .iter()
        .chain(netns.iter())
        .map(|l| l.as_fd())
        .collect();
    send_msg(
        control,
        &FromInit::Ready {
            pid_namespace: true,
            network_namespace: plan.isolate_network,
            user_namespace: plan.user_namespace.is_some(),
            proxy_listener: listener.is_some(),
            calls_uid: built.calls_ids.map(|ids| ids.uid),
            calls_as_root: built.calls_as_root,
        },
        &passed,
    );
    // The server holds the listener now; no process of the sandbox keeps a copy (nor can
    // bind the port: the socket stays bound for as long as the server holds it).
    drop(passed);
    drop((listener, netns));
    serve(plan, built.calls_ids, control)
}

/// Everything PID 1 does once, in order: the view, the hostname, loopback, the proxy's
/// listener. PID 1 keeps its capabilities and puts no Landlock or seccomp on itself: each slot
/// it forks starts namespaces of its own (PID, IPC, mount, cgroup) and mounts into them, which a
/// confined process can no longer do, and then confines itself before it reports ready. PID 1
/// runs only this program; no confined process can see it (each lives in a PID namespace
/// nested below it), signal it, or reach its control socket.
fn setup(plan: &InitPlan) -> Result<(Option<OwnedFd>, view::Built), StageError> {
    // stdin was the plan pipe; nothing in the sandbox reads it.
    if let Ok(null) = std::fs::File::open("/dev/null") {
        // SAFETY: dup2 onto fd 0, which this process owns.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
        }
    }
    let built = stage("view", view::build(plan))?;
    stage(
        "hostname",
        rustix::system::sethostname(plan.hostname.as_bytes()),
    )?;
    if plan.isolate_network && !plan.join_network {
        stage("loopback", bring_up_loopback())?;
    }
    // Only inside a namespace of our own (on the host's loopback any local process could pose
    // as it).
    let listener = match plan.proxy_listener {
        Some(port) if plan.isolate_network => Some(stage("proxy listener", proxy_listener(port))?),
        Some(_) => return Err(("proxy listener", "no network namespace".into())),
        None => None,
    };
    Ok((listener, built))
}

/// A listening TCP socket on 127.0.0.1:`port` of this network namespace, close-on-exec.
fn proxy_listener(port: u16) -> io::Result<OwnedFd> {
    use rustix::net::{AddressFamily, SocketAddrV4, SocketFlags, SocketType, sockopt};
    let sock = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    sockopt::set_socket_reuseaddr(&sock, true)?;
    rustix::net::bind(&sock, &SocketAddrV4::new([127, 0, 0, 1].into(), port))?;
    rustix::net::listen(&sock, 512)?;
    Ok(sock)
}

/// The policy's grants expanded around its denied paths and opened, in the view. Expanding
/// reads whole directories (/etc) and opening them costs a syscall each, so PID 1 does both
/// once and every slot reuses the descriptors (a rule names an inode, whatever mount shows it);
/// only what a slot mounts anew (`/proc`) it opens again itself.
fn policy_grants(plan: &LandlockPlan) -> Result<Vec<OpenedGrant>, String> {
    let grants = crate::confine::landlock::expand_grants(&crate::confine::landlock::LandlockSpec {
        read_exec: &plan.read_exec,
        read_write: &plan.read_write,
        read_only: &plan.read_only,
        devices: &plan.devices,
        deny: &plan.deny,
        tcp_connect: &plan.tcp_connect,
        tcp_bind: &plan.tcp_bind,
    });
    crate::confine::landlock::open_grants(&grants).map_err(|e| e.to_string())
}

/// Grants below these paths name filesystems each slot mounts anew.
fn remounted_by_slots(path: &Path) -> bool {
    path.starts_with("/proc")
}

/// A slot's Landlock layer: the policy's grants minus the roots that hold every slot's
/// directory, plus this slot's own directory and what its mount namespace holds.
fn slot_ruleset(
    init: &InitPlan,
    plan: &LandlockPlan,
    grants: &[OpenedGrant],
    own: &[crate::confine::landlock::Grant],
) -> Result<OwnedFd, crate::confine::landlock::LandlockError> {
    let reopened: Vec<crate::confine::landlock::Grant> = grants
        .iter()
        .filter(|g| remounted_by_slots(&g.path))
        .map(|g| crate::confine::landlock::Grant {
            path: g.path.clone(),
            access: g.access,
        })
        .chain(own.iter().cloned())
        .collect();
    let reopened = crate::confine::landlock::open_grants(&reopened)?;
    let all: Vec<&OpenedGrant> = grants
        .iter()
        .filter(|g| {
            g.path != init.calls_tmp && g.path != init.private_root && !remounted_by_slots(&g.path)
        })
        .chain(&reopened)
        .collect();
    crate::confine::landlock::ruleset_of_opened(
        &all,
        &plan.tcp_connect,
        &plan.tcp_bind,
        plan.best_effort,
    )
}

fn restrict_self(ruleset: &OwnedFd, flags: u32) -> io::Result<()> {
    // SAFETY: landlock_restrict_self(ruleset_fd, flags) reads no memory of ours.
    let ret =
        unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), flags) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `ip link set lo up` in the fresh network namespace, so loopback servers work.
fn bring_up_loopback() -> io::Result<()> {
    let sock = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    )?;
    // SAFETY: `ifreq` is plain data; both ioctls read/write only that struct, whose name field
    // holds the NUL-terminated "lo".
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) != 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A signalfd for SIGCHLD (blocked, so it is only ever read, never delivered).
fn child_signals() -> io::Result<OwnedFd> {
    // SAFETY: plain sigset manipulation on a local, then signalfd/sigprocmask on it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// PID 1's loop: fork slots on request, reap every child and report the slots' ends. Exits
/// when the server closes the control socket.
fn serve(plan: &InitPlan, ids: Option<CallIds>, control: &OwnedFd) -> ! {
    let Ok(signals) = child_signals() else {
        std::process::exit(1)
    };
    // Expanded and opened at the first slot and reused by every later one (`policy_grants`).
    let mut grants: Option<Result<Vec<OpenedGrant>, String>> = None;
    let no_grants: Vec<OpenedGrant> = Vec::new();
    let mut slots: HashMap<i32, ForkedSlot> = HashMap::new();
    loop {
        let (control_ready, child_ready, reports) = {
            // The status pipes of slots whose reaper has not reported yet: a report comes
            // before the reaper's exit, and is relayed at once.
            let waiting: Vec<i32> = slots
                .iter()
                .filter(|(_, s)| !s.reported)
                .map(|(pid, _)| *pid)
                .collect();
            let mut fds = vec![
                rustix::event::PollFd::new(control, rustix::event::PollFlags::IN),
                rustix::event::PollFd::new(&signals, rustix::event::PollFlags::IN),
            ];
            for pid in &waiting {
                fds.push(rustix::event::PollFd::new(
                    &slots[pid].status,
                    rustix::event::PollFlags::IN,
                ));
            }
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => std::process::exit(1),
            }
            let reports: Vec<i32> = waiting
                .iter()
                .zip(&fds[2..])
                .filter(|(_, fd)| fd.revents().contains(rustix::event::PollFlags::IN))
                .map(|(pid, _)| *pid)
                .collect();
            (
                !fds[0].revents().is_empty(),
                !fds[1].revents().is_empty(),
                reports,
            )
        };
        for pid in reports {
            if let Some(slot) = slots.get_mut(&pid) {
                relay_report(control, slot);
            }
        }
        if child_ready {
            let mut buf = [0u8; 128 * 4];
            while rustix::io::read(&signals, &mut buf).is_ok_and(|n| n > 0) {}
            reap(control, &mut slots);
        }
        if control_ready {
            let received = match fdpass::recv(control.as_fd()) {
                Ok(r) if !r.eof => r,
                // The server is gone or closed us: PID 1 exits and the kernel ends the rest.
                _ => std::process::exit(0),
            };
            match wire::decode::<ToInit>(&received.data, wire::MAX_MESSAGE) {
                Ok(ToInit::Slot { id, layer }) => {
                    let grants = match (&grants, &plan.landlock) {
                        (Some(g), _) => g.as_ref(),
                        (None, Some(landlock)) => grants.insert(policy_grants(landlock)).as_ref(),
                        (None, None) => Ok(&no_grants),
                    };
                    let grants = match grants {
                        Ok(g) => g.as_slice(),
                        Err(e) => {
                            eprintln!("cordon sandbox init: the policy's Landlock grants: {e}");
                            send_msg(
                                control,
                                &FromInit::SlotFailed {
                                    id,
                                    error: format!("the policy's Landlock grants: {e}"),
                                },
                                &[],
                            );
                            continue;
                        }
                    };
                    let parent = SlotParent {
                        plan,
                        control,
                        signals: &signals,
                        grants,
                        ids,
                    };
                    fork_slot(&parent, id, layer, received.fds, &mut slots)
                }
                Err(e) => eprintln!("cordon sandbox init: ignoring a malformed request: {e}"),
            }
        }
    }
}

/// A slot PID 1 forked: its id, and the pipe on which the slot's reaper leaves the wait status
/// of the job's main process before it exits (a PID 1 cannot die of its own signal, so the
/// reaper's own status cannot carry a job killed by one).
struct ForkedSlot {
    id: u64,
    status: OwnedFd,
    /// The reaper's report was relayed before the reaper itself was reaped.
    reported: bool,
}

fn reap(control: &OwnedFd, slots: &mut HashMap<i32, ForkedSlot>) {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a live local.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if let Some(mut slot) = slots.remove(&pid)
            && !slot.reported
            && !relay_report(control, &mut slot)
        {
            // No report: the reaper was killed before or during the job (SIGKILL from the
            // server, the OOM killer), and its own status is the job's.
            send_msg(
                control,
                &FromInit::Exited {
                    id: slot.id,
                    status,
                    leftovers: 0,
                    emptied: false,
                },
                &[],
            );
        }
    }
}

/// Relays a reaper's report (the job's status when the reaper saw it end, what it left, and
/// whether the reaper reaped all of it) from its status pipe, if the report is there.
/// Relayed before the reaper's own exit: by then nothing of the call runs, and the server
/// answers while the kernel tears the call's namespaces down.
fn relay_report(control: &OwnedFd, slot: &mut ForkedSlot) -> bool {
    let mut raw = [0u8; STATUS_REPORT];
    if !rustix::io::read(&slot.status, &mut raw).is_ok_and(|n| n == STATUS_REPORT) {
        return false;
    }
    slot.reported = true;
    let word = |at: usize| [raw[at], raw[at + 1], raw[at + 2], raw[at + 3]];
    send_msg(
        control,
        &FromInit::Exited {
            id: slot.id,
            status: i32::from_ne_bytes(word(0)),
            leftovers: u32::from_ne_bytes(word(4)),
            emptied: raw[8] == 1,
        },
        &[],
    );
    true
}

/// What PID 1 hands down to the slots it forks.
struct SlotParent<'a> {
    plan: &'a InitPlan,
    control: &'a OwnedFd,
    signals: &'a OwnedFd,
    /// The policy's grants, expanded and opened once (see `policy_grants`).
    grants: &'a [OpenedGrant],
    /// The host ids each slot's own user namespace maps its root to (cordon is root).
    ids: Option<CallIds>,
}

/// Namespaces every slot gets of its own: a slot is the PID 1 (reaper) of a PID namespace
/// holding only its job's processes, with System V IPC and mounts no other slot shares.
const SLOT_NAMESPACES: libc::c_int = libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWNS;

fn fork_slot(
    parent: &SlotParent<'_>,
    id: u64,
    layer: SlotLayer,
    cgroup_procs: Vec<OwnedFd>,
    slots: &mut HashMap<i32, ForkedSlot>,
) {
    let control = parent.control;
    let failed = |error: String| {
        send_msg(control, &FromInit::SlotFailed { id, error }, &[]);
    };
    let (ours, theirs) = match fdpass::seqpacket_pair() {
        Ok(pair) => pair,
        Err(e) => return failed(e.to_string()),
    };
    let (status_read, status_write) = match rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    ) {
        Ok(pair) => pair,
        Err(e) => return failed(e.to_string()),
    };
    // The slot waits on this until PID 1 has written its user namespace's maps.
    let (mapped_read, mapped_write) =
        match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
            Ok(pair) => pair,
            Err(e) => return failed(e.to_string()),
        };
    // With CLONE_NEWUSER in the same call the user namespace is made first and owns the
    // others, so the slot may mount in its mount namespace and its `/proc`.
    let flags = SLOT_NAMESPACES
        | if parent.ids.is_some() {
            libc::CLONE_NEWUSER
        } else {
            0
        };
    // SAFETY: clone without CLONE_VM and with a null stack is fork(2) with namespace flags: the
    // child continues on a copy of this single-threaded process's memory and runs `slot`,
    // which never returns. No atfork handlers are needed (no threads, no locks held).
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    } as i32;
    match pid {
        -1 => failed(io::Error::last_os_error().to_string()),
        0 => {
            // SAFETY: closing this process's copies of PID 1's own descriptors; the slot
            // never uses them (it talks only on its own socket).
            unsafe {
                libc::close(control.as_raw_fd());
                libc::close(parent.signals.as_raw_fd());
                libc::close(ours.as_raw_fd());
                libc::close(status_read.as_raw_fd());
                libc::close(mapped_write.as_raw_fd());
            }
            if parent.ids.is_some() {
                // One byte once the maps are written; EOF if PID 1 could not write them.
                let mut byte = [0u8; 1];
                if !rustix::io::read(&mapped_read, &mut byte).is_ok_and(|n| n == 1) {
                    slot_fail(&theirs, "user namespace maps", libc::EPERM);
                }
                if let Some(ids) = &parent.ids
                    && let Err(e) = super::idmap::become_mapped(ids)
                {
                    slot_fail(&theirs, "user namespace root", errno_of(&e));
                }
            }
            drop(mapped_read);
            let own = SlotOwn {
                layer,
                sock: theirs,
                status: status_write,
                cgroup_procs,
            };
            slot(parent.plan, parent.grants, own, parent.ids.is_some())
        }
        child => {
            drop(mapped_read);
            if let Some(ids) = &parent.ids {
                match super::idmap::write_maps(Path::new("/proc"), child, ids) {
                    Ok(()) => {
                        let _ = rustix::io::write(&mapped_write, b"1");
                    }
                    // The slot reads EOF and reports its failure on its own socket, which
                    // the server receives as the slot's answer.
                    Err(e) => eprintln!("cordon sandbox init: a slot's user namespace: {e}"),
                }
            }
            drop(mapped_write);
            slots.insert(
                child,
                ForkedSlot {
                    id,
                    status: status_read,
                    reported: false,
                },
            );
            drop((theirs, cgroup_procs, status_write));
            send_msg(control, &FromInit::Slot { id }, &[ours.as_fd()]);
        }
    }
}

fn slot_fail(sock: &OwnedFd, stage: &str, errno: i32) -> ! {
    send_msg(
        sock,
        &FromSlot::Failed {
            stage: stage.into(),
            errno,
        },
        &[],
    );
    // SAFETY: _exit ends this forked process without running PID 1's atexit state.
    unsafe { libc::_exit(127) }
}

/// What one slot owns when it starts.
struct SlotOwn {
    layer: SlotLayer,
    sock: OwnedFd,
    /// Where the reaper writes the job's wait status (see [`ForkedSlot`]).
    status: OwnedFd,
    cgroup_procs: Vec<OwnedFd>,
}

/// Signals the reaper passes on to the job's main process when they come from outside its
/// namespace (the server: interrupts of interpreter cells, stops of jobs). A PID 1 only ever
/// receives signals it handles, so these are blocked and read from a signalfd.
const FORWARDED: &[libc::c_int] = &[
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGWINCH,
    libc::SIGCONT,
    libc::SIGALRM,
];

/// A slot: PID 1 of its own PID namespace. Joins its cgroups, mounts what its namespace holds
/// of its own, confines itself, reports ready and waits for a job; then forks the job's main
/// process and reaps until that ends.
fn slot(plan: &InitPlan, grants: &[OpenedGrant], own: SlotOwn, ids_mapped: bool) -> ! {
    let SlotOwn {
        layer,
        sock,
        status,
        cgroup_procs,
    } = own;
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    default_dispositions();
    let signals = match reaper_signals() {
        Ok(fd) => fd,
        Err(e) => slot_fail(&sock, "signalfd", errno_of(&e)),
    };
    for fd in &cgroup_procs {
        // "0" is "the writing process", in v1 and v2; the descriptor was opened by the server,
        // whose credentials the kernel checks.
        if let Err(e) = rustix::io::write(fd, b"0") {
            slot_fail(&sock, "join cgroup", e.raw_os_error());
        }
    }
    let joined_cgroups = !cgroup_procs.is_empty();
    drop(cgroup_procs);
    let own_grants = match super::slot_mounts::build(plan, layer.dir(), joined_cgroups) {
        Ok(g) => g,
        Err(e) => slot_fail(&sock, e.step, errno_of(&e.source)),
    };
    if ids_mapped && let Err(e) = super::idmap::limit_namespace() {
        slot_fail(&sock, "user namespace limits", errno_of(&e));
    }
    // Its own session and process group: the server's group kill reaches the reaper and the
    // job's processes (which stay in it unless they call setsid; the cgroup covers those, and
    // the reaper's death ends the whole namespace anyway).
    if let Err(e) = rustix::process::setsid() {
        slot_fail(&sock, "setsid", e.raw_os_error());
    }
    // This namespace's /proc, opened before the slot's Landlock layer (a policy need not grant
    // /proc): what the call left running is counted from it at the end (`leftovers`).
    let proc_dir = rustix::fs::open(
        "/proc",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok();
    if let Err((stage, e)) = confine_self(plan, grants, &own_grants) {
        slot_fail(&sock, stage, errno_of(&e));
    }
    let job_scope = match plan
        .landlock
        .as_ref()
        .map(|l| crate::confine::landlock::scope_only_ruleset(l.best_effort))
    {
        Some(Ok(fd)) => Some(fd),
        Some(Err(_)) => slot_fail(&sock, "landlock scope", libc::EINVAL),
        None => None,
    };
    // Nothing of this process may be read through /proc by the job (its environment names the
    // server's pid): a non-dumpable process's files there need CAP_SYS_PTRACE.
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        slot_fail(&sock, "dumpable", errno_of(&io::Error::last_os_error()));
    }
    // This process is PID 1 of its namespace, and a pidfd of it is what the server waits on
    // and signals.
    let pidfd = match rustix::process::pidfd_open(
        rustix::process::getpid(),
        rustix::process::PidfdFlags::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => slot_fail(&sock, "pidfd", e.raw_os_error()),
    };
    // The job's main process is forked now, while the slot waits in the pool: a call then
    // costs only the exec, as without a reaper. It waits for the job itself.
    // SAFETY: this process is single-threaded; the child runs `await_job`, which never returns.
    let main = unsafe { libc::fork() };
    match main {
        -1 => slot_fail(&sock, "fork", errno_of(&io::Error::last_os_error())),
        0 => {
            drop((signals, status, pidfd, proc_dir));
            await_job(plan, sock, job_scope.as_ref())
        }
        _ => {
            // The server waits on the reaper (whose end is the call's end) and watches the
            // main process itself too: a worker killed from outside is seen dead at once,
            // before its reaper has torn the namespaces down.
            let main_pidfd = rustix::process::Pid::from_raw(main).and_then(|pid| {
                rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
            });
            match &main_pidfd {
                Some(m) => send_msg(&sock, &FromSlot::Ready, &[pidfd.as_fd(), m.as_fd()]),
                None => send_msg(&sock, &FromSlot::Ready, &[pidfd.as_fd()]),
            }
            drop((pidfd, main_pidfd, job_scope));
            // The main process's copy of the socket closes at its exec: that EOF is the
            // server's sign that the program runs.
            drop(sock);
            reap_until(main, &signals, &status, proc_dir.as_ref())
        }
    }
}

/// The job's main process (pid 2 of the slot's namespace): takes the scope layer, waits for
/// the job and becomes its program. Exits 0 when the server lets the slot go unused.
fn await_job(plan: &InitPlan, sock: OwnedFd, job_scope: Option<&OwnedFd>) -> ! {
    if let Some(scope) = job_scope
        && let Err(e) = restrict_self(
            scope,
            plan.landlock.as_ref().map_or(0, |l| l.restrict_flags),
        )
    {
        slot_fail(&sock, "landlock scope", errno_of(&e));
    }
    let received = match fdpass::recv(sock.as_fd()) {
        Ok(r) if !r.eof => r,
        // The server let this slot go (shutdown, or a pool shrinking).
        // SAFETY: _exit ends this forked process without running PID 1's atexit state.
        _ => unsafe { libc::_exit(0) },
    };
    let (job, fds) = match read_job(received) {
        Ok(j) => j,
        Err(e) => slot_fail(&sock, "job", errno_of(&e)),
    };
    if let Err((stage, e)) = run_job(plan, &sock, &job, fds) {
        slot_fail(&sock, stage, errno_of(&e));
    }
    unreachable!("run_job only returns on failure")
}

/// Blocks SIGCHLD and the forwarded signals and returns a signalfd that reads them.
fn reaper_signals() -> io::Result<OwnedFd> {
    // SAFETY: plain sigset manipulation on a local, then sigprocmask/signalfd on it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        for &sig in FORWARDED {
            libc::sigaddset(&mut set, sig);
        }
        if libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Drops every capability, sets `no_new_privs`, then puts the slot's Landlock layer and the
/// policy's seccomp programs on this process, in that order (the mounts are done: Landlock
/// forbids changing them afterwards, seccomp refuses the calls).
fn confine_self(
    plan: &InitPlan,
    grants: &[OpenedGrant],
    own: &[crate::confine::landlock::Grant],
) -> Result<(), (&'static str, io::Error)> {
    if plan.drop_capabilities {
        crate::confine::child::drop_all_capabilities().map_err(|e| ("capabilities", e))?;
    }
    rustix::thread::set_no_new_privs(true).map_err(|e| ("no_new_privs", e.into()))?;
    if let Some(landlock) = &plan.landlock {
        let fd = slot_ruleset(plan, landlock, grants, own).map_err(|e| {
            // The errno alone says little here (which grant failed): the init's stderr is
            // the server's.
            eprintln!("cordon sandbox init: a slot's Landlock layer: {e}");
            ("landlock layer", io::Error::other(e.to_string()))
        })?;
        restrict_self(&fd, landlock.restrict_flags).map_err(|e| ("landlock layer", e))?;
    }
    for program in &plan.seccomp {
        let program: Vec<seccompiler::sock_filter> = program
            .iter()
            .map(|&(code, jt, jf, k)| seccompiler::sock_filter { code, jt, jf, k })
            .collect();
        seccompiler::apply_filter(&program).map_err(|e| ("seccomp", io::Error::other(e)))?;
    }
    Ok(())
}

/// The reaper's loop after the job started: reaps every process of the namespace (orphans are
/// re-parented here), passes signals from outside on to the job's main process, and when that
/// ends leaves its status for PID 1 and exits, which ends every process left in the namespace.
fn reap_until(
    main: i32,
    signals: &OwnedFd,
    status_pipe: &OwnedFd,
    proc_dir: Option<&OwnedFd>,
) -> ! {
    loop {
        loop {
            let mut status = 0;
            // SAFETY: waitpid writes the status into a live local.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid == main {
                let left = leftovers(proc_dir);
                // The call's end: every process it left is killed and reaped here, before the
                // report, so the report means "nothing of the call runs any more" and the
                // server answers without waiting for this process's own exit (the teardown of
                // the call's mount and PID namespaces, which follows the report).
                if left > 0 {
                    end_namespace();
                }
                let mut report = [0u8; STATUS_REPORT];
                report[..4].copy_from_slice(&status.to_ne_bytes());
                report[4..8].copy_from_slice(&left.to_ne_bytes());
                report[8] = 1;
                let _ = rustix::io::write(status_pipe, &report);
                // SAFETY: _exit ends this forked process without running PID 1's atexit state.
                unsafe { libc::_exit(0) }
            }
            if pid <= 0 {
                break;
            }
        }
        // SAFETY: signalfd_siginfo is plain data, read whole or not at all.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reads at most `size` bytes into the live local above.
        let n = unsafe {
            libc::read(
                signals.as_raw_fd(),
                (&mut info as *mut libc::signalfd_siginfo).cast(),
                size,
            )
        };
        if n != size as isize {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // SAFETY: as above.
            unsafe { libc::_exit(1) }
        }
        let signal = info.ssi_signo as libc::c_int;
        // A sender outside this namespace has no pid here (0): that is the server. A process
        // of the job signalling its own group reaches its members itself.
        if signal != libc::SIGCHLD && info.ssi_pid == 0 {
            // SAFETY: kill takes plain integers; `main` is our child, not yet reaped, so its
            // pid cannot have been reused.
            unsafe {
                libc::kill(main, signal);
            }
        }
    }
}

/// Bytes of a reaper's report on its status pipe: the main process's wait status, the count
/// of processes it left, and 1 when every process of the namespace is reaped.
const STATUS_REPORT: usize = 9;

/// Kills every other process of this PID namespace (this process is its init: `kill(-1)`
/// reaches all of them, and a fork racing it fails on the pending SIGKILL) and reaps them,
/// orphans reparented to it included, until it has no child left.
fn end_namespace() {
    loop {
        // SAFETY: kill takes plain integers; -1 is every process this one may signal, which
        // for a namespace's init is every other process of the namespace.
        unsafe {
            libc::kill(-1, libc::SIGKILL);
        }
        let mut status = 0;
        // SAFETY: waitpid writes the status into a live local.
        match unsafe { libc::waitpid(-1, &mut status, 0) } {
            n if n > 0 => continue,
            _ if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => continue,
            _ => return,
        }
    }
}

/// How many processes of the namespace still run once the main process has ended: what the
/// call left behind (`cmd &`, a daemon), which the reaper's exit ends. Zombies already gone
/// are reaped first; read from this namespace's own `/proc` (one directory listing, no more
/// when nothing is left), through the descriptor opened before the slot confined itself.
fn leftovers(proc_dir: Option<&OwnedFd>) -> u32 {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a live local.
        if unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } <= 0 {
            break;
        }
    }
    let Some(Ok(mut entries)) = proc_dir.map(rustix::fs::Dir::read_from) else {
        return 0;
    };
    let mut others: u32 = 0;
    while let Some(Ok(entry)) = entries.read() {
        let pid = entry
            .file_name()
            .to_str()
            .ok()
            .and_then(|n| n.parse::<u32>().ok());
        if pid.is_some_and(|pid| pid != 1) {
            others = others.saturating_add(1);
        }
    }
    others
}

fn read_job(received: fdpass::Received) -> io::Result<(Job, Vec<OwnedFd>)> {
    let bad = |e: wire::WireError| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    let mut fds = received.fds;
    let job = match wire::decode::<ToSlot>(&received.data, wire::MAX_MESSAGE).map_err(bad)? {
        ToSlot::Job(job) => job,
        ToSlot::JobInMemfd { len } => {
            if fds.is_empty() || len > wire::MAX_JOB {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            let memfd = fds.remove(0);
            let mut bytes = Vec::with_capacity(len);
            std::fs::File::from(memfd)
                .take(len as u64)
                .read_to_end(&mut bytes)?;
            match wire::decode::<ToSlot>(&bytes, wire::MAX_JOB).map_err(bad)? {
                ToSlot::Job(job) => job,
                ToSlot::JobInMemfd { .. } => {
                    return Err(io::Error::from_raw_os_error(libc::EINVAL));
                }
            }
        }
    };
    job.validate(fds.len()).map_err(bad)?;
    if job.fds.iter().any(|&t| t >= FD_TARGET_LIMIT) {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    Ok((job, fds))
}

/// Turns this slot into the job's program. Returns only on failure, with the failing step.
fn run_job(
    plan: &InitPlan,
    sock: &OwnedFd,
    job: &Job,
    fds: Vec<OwnedFd>,
) -> Result<(), (&'static str, io::Error)> {
    let e = |stage: &'static str| move |err: rustix::io::Errno| (stage, io::Error::from(err));
    // The job starts as an ordinary program would: no signal blocked (the reaper blocks its
    // own) or ignored (`default_dispositions`, done by the slot while it waited).
    unblock_signals();
    let root = rustix::fs::open(
        &plan.workspace,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(e("open workspace"))?;
    let cwd = rustix::fs::openat2(
        &root,
        if job.cwd.as_os_str().is_empty() {
            Path::new(".")
        } else {
            job.cwd.as_path()
        },
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
        rustix::fs::ResolveFlags::BENEATH | rustix::fs::ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(e("cwd"))?;
    rustix::process::fchdir(&cwd).map_err(e("fchdir"))?;
    drop((cwd, root));

    // Move what arrived out of the way of the targets, then place each one.
    let mut moved = Vec::with_capacity(fds.len());
    for fd in &fds {
        moved.push(rustix::io::fcntl_dupfd_cloexec(fd, FD_TARGET_LIMIT).map_err(e("dup"))?);
    }
    drop(fds);
    for (fd, &target) in moved.iter().zip(&job.fds) {
        // SAFETY: dup2 onto a small target number this process does not otherwise use (the
        // received descriptors now live at FD_TARGET_LIMIT and above).
        if unsafe { libc::dup2(fd.as_raw_fd(), target) } < 0 {
            return Err(("dup2", io::Error::last_os_error()));
        }
    }
    drop(moved);
    if let Some(size) = job.pty {
        under_terminal(sock, size)?;
    }
    // Everything else this process holds (its socket included) closes at exec.
    let max_target = job.fds.iter().copied().max().unwrap_or(2);
    for fd in 3..=max_target {
        if !job.fds.contains(&fd) {
            // SAFETY: F_SETFD on a descriptor number only sets its flag (EBADF if unused).
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
    }
    let _ = crate::confine::child::cloexec_from(max_target + 1);
    for &(resource, value) in &job.rlimits {
        let limit = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: setrlimit reads a live local struct.
        if unsafe { libc::setrlimit(resource as _, &limit) } != 0 {
            return Err(("setrlimit", io::Error::last_os_error()));
        }
    }
    Err(("exec", exec(job)))
}

/// Puts this process under a new terminal of the slot's own devpts: opens a master, sends it
/// to the server, and makes the terminal's other side this process's controlling terminal and
/// its standard streams. Opened here, inside the slot's mount namespace, so the terminal is
/// one no other call can open (each slot mounts its own devpts instance).
fn under_terminal(sock: &OwnedFd, size: wire::PtySize) -> Result<(), (&'static str, io::Error)> {
    let e = |stage: &'static str| move |err: rustix::io::Errno| (stage, io::Error::from(err));
    let master = rustix::fs::open(
        "/dev/ptmx",
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NOCTTY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(e("open /dev/ptmx"))?;
    rustix::pty::unlockpt(&master).map_err(e("unlockpt"))?;
    let winsize = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a live local winsize.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &winsize) } != 0 {
        return Err(("pty size", io::Error::last_os_error()));
    }
    // The other side through the master itself (no path lookup that a rename could redirect).
    let terminal = rustix::pty::ioctl_tiocgptpeer(
        &master,
        rustix::pty::OpenptFlags::RDWR | rustix::pty::OpenptFlags::NOCTTY,
    )
    .map_err(e("open pty peer"))?;
    send_msg(sock, &FromSlot::Pty, &[master.as_fd()]);
    drop(master);
    // A session of its own is what may own a controlling terminal; the cgroup and the slot's
    // PID namespace still hold the whole tree.
    rustix::process::setsid().map_err(e("setsid"))?;
    rustix::process::ioctl_tiocsctty(&terminal).map_err(e("controlling terminal"))?;
    for target in 0..=2 {
        // SAFETY: dup2 onto the standard descriptors, which this process is about to replace.
        if unsafe { libc::dup2(terminal.as_raw_fd(), target) } < 0 {
            return Err(("dup2 pty", io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Every signal back to its default action. An ignored signal stays ignored across exec: this
/// program's runtime ignores SIGPIPE (`yes | head -1` would print "Broken pipe" instead of
/// ending quietly), and a server started under `nohup` passes SIGHUP ignored. Done by the slot
/// while it waits in the pool (its main process inherits the dispositions), so a call does not
/// pay the ~64 syscalls.
fn default_dispositions() {
    // SAFETY: sigaction with SIG_DFL reads only a live local. Numbers the kernel refuses
    // (SIGKILL, SIGSTOP, libc's reserved ones) fail harmlessly.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut action.sa_mask);
        for sig in 1..=libc::SIGRTMAX() {
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// No signal blocked: the signal mask survives exec.
fn unblock_signals() {
    // SAFETY: sigprocmask with an empty local set.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// execve with a PATH search for a bare program name, like execvpe.
fn exec(job: &Job) -> io::Error {
    use std::ffi::CString;
    let argv: Vec<CString> = job
        .argv
        .iter()
        .filter_map(|a| CString::new(a.as_bytes()).ok())
        .collect();
    let envp: Vec<CString> = job
        .env
        .iter()
        .filter_map(|a| CString::new(a.as_bytes()).ok())
        .collect();
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    let program = job.argv[0].as_bytes();
    let candidates: Vec<CString> = if program.contains(&b'/') {
        vec![argv[0].clone()]
    } else {
        let path = job
            .env
            .iter()
            .find_map(|v| v.as_bytes().strip_prefix(b"PATH="))
            .unwrap_or(b"/usr/bin:/bin");
        path.split(|&b| b == b':')
            .map(|dir| {
                let mut full = if dir.is_empty() {
                    b".".to_vec()
                } else {
                    dir.to_vec()
                };
                full.push(b'/');
                full.extend_from_slice(program);
                full
            })
            .filter_map(|p| CString::new(p).ok())
            .collect()
    };
    let mut error = io::Error::from_raw_os_error(libc::ENOENT);
    for candidate in candidates {
        // SAFETY: every pointer array is NUL-terminated and points into CStrings alive here.
        unsafe {
            libc::execve(candidate.as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr());
        }
        let err = io::Error::last_os_error();
        // As execvp: remember a permission problem, keep looking past a missing file.
        if err.raw_os_error() != Some(libc::ENOENT) && err.raw_os_error() != Some(libc::ENOTDIR) {
            error = err;
        }
    }
    error
}
