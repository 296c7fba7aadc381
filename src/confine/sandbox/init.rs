//! The sandbox init process, in three stages of one program (`cordon __sandbox-init`):
//!
//! * the **launcher**, exec'd by the server: reads the [`InitPlan`] from stdin, unshares the
//!   namespaces (mount, PID, IPC, UTS, network when the policy has none, user when not root)
//!   and forks PID 1 of the new PID namespace; then only waits. It dies with the server
//!   (`PR_SET_PDEATHSIG`, set before exec and checked against the server's pid).
//! * **PID 1**: dies with the launcher (the same, checked through a pipe), builds the view
//!   (`view`), drops every capability, sets `no_new_privs`, applies Landlock and seccomp once,
//!   then serves the control socket: forks slots on request and reports how they end. When PID
//!   1 exits — the server closed the socket, or died — the kernel kills every process of the
//!   namespace: nothing a call started outlives the server.
//! * a **slot**: forked by PID 1, joins the call's cgroups (the slow migration, paid here, off
//!   the call's critical path), adds its own Landlock layer, reports ready with a pidfd of
//!   itself, and waits. A job is then only `setsid`, `fchdir`, `dup2`, `setrlimit`, `execve`.
//!
//! Owns these processes' code; the server side is `super` (mod.rs). Everything here runs
//! single-threaded, so forking is safe and the slot may allocate.

use super::plan::{InitPlan, LandlockPlan};
use super::wire::{self, FromInit, FromSlot, Job, SlotLayer, ToInit, ToSlot};
use super::{fdpass, view};
use std::collections::HashMap;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// The hidden subcommand that runs this program.
pub const INIT_ARG: &str = "__sandbox-init";
/// Environment variable naming the server's pid, checked by the launcher after exec.
pub const PARENT_ENV: &str = "CORDON_INIT_PARENT";
/// Where the launcher finds the control socket.
pub const CONTROL_FD: RawFd = 3;
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
    if plan.isolate_network {
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
    let listener = match setup(plan) {
        Ok(listener) => listener,
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
    let passed: Vec<std::os::fd::BorrowedFd<'_>> = listener.iter().map(|l| l.as_fd()).collect();
    send_msg(
        control,
        &FromInit::Ready {
            pid_namespace: true,
            network_namespace: plan.isolate_network,
            user_namespace: plan.user_namespace.is_some(),
            proxy_listener: listener.is_some(),
        },
        &passed,
    );
    // The server holds the listener now; no process of the sandbox keeps a copy (nor can
    // bind the port: the socket stays bound for as long as the server holds it).
    drop(passed);
    drop(listener);
    serve(plan, control)
}

/// Everything PID 1 does once, in order; the last step (seccomp) also binds PID 1 itself.
/// Returns the proxy's listening socket when the plan asks for one.
fn setup(plan: &InitPlan) -> Result<Option<OwnedFd>, StageError> {
    // stdin was the plan pipe; nothing in the sandbox reads it.
    if let Ok(null) = std::fs::File::open("/dev/null") {
        // SAFETY: dup2 onto fd 0, which this process owns.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
        }
    }
    stage("view", view::build(plan))?;
    stage(
        "hostname",
        rustix::system::sethostname(plan.hostname.as_bytes()),
    )?;
    if plan.isolate_network {
        stage("loopback", bring_up_loopback())?;
    }
    // Made before Landlock (whose TCP bind rule would refuse the port) and only inside a
    // namespace of our own (on the host's loopback any local process could pose as it).
    let listener = match plan.proxy_listener {
        Some(port) if plan.isolate_network => Some(stage("proxy listener", proxy_listener(port))?),
        Some(_) => return Err(("proxy listener", "no network namespace".into())),
        None => None,
    };
    stage(
        "capabilities",
        crate::confine::child::drop_all_capabilities(),
    )?;
    stage("no_new_privs", rustix::thread::set_no_new_privs(true))?;
    if let Some(landlock) = &plan.landlock {
        let fd = stage(
            "landlock",
            ruleset(
                landlock,
                &[landlock.calls_tmp.clone(), landlock.private_root.clone()],
            ),
        )?;
        stage("landlock", restrict_self(&fd))?;
    }
    for program in &plan.seccomp {
        let program: Vec<seccompiler::sock_filter> = program
            .iter()
            .map(|&(code, jt, jf, k)| seccompiler::sock_filter { code, jt, jf, k })
            .collect();
        stage("seccomp", seccompiler::apply_filter(&program))?;
    }
    Ok(listener)
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

fn ruleset(
    plan: &LandlockPlan,
    extra_read_write: &[PathBuf],
) -> Result<OwnedFd, crate::confine::landlock::LandlockError> {
    let mut read_write = plan.read_write.clone();
    read_write.extend(extra_read_write.iter().cloned());
    let spec = crate::confine::landlock::LandlockSpec {
        read_exec: &plan.read_exec,
        read_write: &read_write,
        read_only: &plan.read_only,
        devices: &plan.devices,
        deny: &plan.deny,
        tcp_connect: &plan.tcp_connect,
        tcp_bind: &plan.tcp_bind,
    };
    crate::confine::landlock::build_ruleset(&spec, plan.best_effort)
}

fn restrict_self(ruleset: &OwnedFd) -> io::Result<()> {
    // SAFETY: landlock_restrict_self(ruleset_fd, flags=0) reads no memory of ours.
    let ret = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
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

/// PID 1's loop: fork slots on request, reap every child (orphans of calls included) and
/// report the slots' ends. Exits when the server closes the control socket.
fn serve(plan: &InitPlan, control: &OwnedFd) -> ! {
    let Ok(signals) = child_signals() else {
        std::process::exit(1)
    };
    // The Landlock ruleset of the call slots' own layer, built at the first call slot and
    // reused: expanding the policy's grants around its denied paths reads whole directories
    // (/etc), which every slot would otherwise repeat. A ruleset may restrict any number of
    // processes. Reusing it grants no more than building it per slot: PID 1's own layer, built
    // earlier from the same plan, bounds every slot anyway. Ruleset descriptors are always
    // close-on-exec, so no job inherits it. If building fails, each slot builds its own.
    let mut calls_layer: Option<OwnedFd> = None;
    let mut slots: HashMap<i32, u64> = HashMap::new();
    loop {
        let (control_ready, child_ready) = {
            let mut fds = [
                rustix::event::PollFd::new(control, rustix::event::PollFlags::IN),
                rustix::event::PollFd::new(&signals, rustix::event::PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => std::process::exit(1),
            }
            (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
        };
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
                    if let (SlotLayer::Calls, None, Some(landlock)) =
                        (&layer, &calls_layer, &plan.landlock)
                    {
                        calls_layer =
                            ruleset(landlock, std::slice::from_ref(&landlock.calls_tmp)).ok();
                    }
                    let parent = SlotParent {
                        plan,
                        control,
                        signals: &signals,
                        calls_layer: calls_layer.as_ref(),
                    };
                    fork_slot(&parent, id, layer, received.fds, &mut slots)
                }
                Err(e) => eprintln!("cordon sandbox init: ignoring a malformed request: {e}"),
            }
        }
    }
}

fn reap(control: &OwnedFd, slots: &mut HashMap<i32, u64>) {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a live local.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if let Some(id) = slots.remove(&pid) {
            send_msg(control, &FromInit::Exited { id, status }, &[]);
        }
    }
}

/// What PID 1 hands down to the slots it forks.
struct SlotParent<'a> {
    plan: &'a InitPlan,
    control: &'a OwnedFd,
    signals: &'a OwnedFd,
    /// The shared Landlock ruleset of [`SlotLayer::Calls`] (see `serve`), if built.
    calls_layer: Option<&'a OwnedFd>,
}

fn fork_slot(
    parent: &SlotParent<'_>,
    id: u64,
    layer: SlotLayer,
    cgroup_procs: Vec<OwnedFd>,
    slots: &mut HashMap<i32, u64>,
) {
    let control = parent.control;
    let (ours, theirs) = match fdpass::seqpacket_pair() {
        Ok(pair) => pair,
        Err(e) => {
            send_msg(
                control,
                &FromInit::SlotFailed {
                    id,
                    error: e.to_string(),
                },
                &[],
            );
            return;
        }
    };
    // SAFETY: PID 1 is single-threaded; the child runs `slot`, which never returns.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => send_msg(
            control,
            &FromInit::SlotFailed {
                id,
                error: io::Error::last_os_error().to_string(),
            },
            &[],
        ),
        0 => {
            // SAFETY: closing this process's copies of PID 1's own descriptors; the slot
            // never uses them (it talks only on its own socket).
            unsafe {
                libc::close(control.as_raw_fd());
                libc::close(parent.signals.as_raw_fd());
                libc::close(ours.as_raw_fd());
            }
            slot(parent.plan, layer, parent.calls_layer, theirs, cgroup_procs)
        }
        child => {
            slots.insert(child, id);
            drop((theirs, cgroup_procs));
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

fn slot(
    plan: &InitPlan,
    layer: SlotLayer,
    calls_layer: Option<&OwnedFd>,
    sock: OwnedFd,
    cgroup_procs: Vec<OwnedFd>,
) -> ! {
    // The signal mask survives exec: a blocked SIGCHLD would break every shell's job control.
    // SAFETY: sigprocmask with an empty local set.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    for fd in &cgroup_procs {
        // "0" is "the writing process", in v1 and v2; the descriptor was opened by the server,
        // whose credentials the kernel checks.
        if let Err(e) = rustix::io::write(fd, b"0") {
            slot_fail(&sock, "join cgroup", e.raw_os_error());
        }
    }
    drop(cgroup_procs);
    if let Some(landlock) = &plan.landlock {
        let built;
        let fd = match (&layer, calls_layer) {
            (SlotLayer::Calls, Some(shared)) => shared,
            _ => {
                let extra = match &layer {
                    SlotLayer::Calls => landlock.calls_tmp.clone(),
                    SlotLayer::Private(dir) => dir.clone(),
                };
                match ruleset(landlock, &[extra]) {
                    Ok(fd) => {
                        built = fd;
                        &built
                    }
                    Err(_) => slot_fail(&sock, "landlock layer", libc::EINVAL),
                }
            }
        };
        if let Err(e) = restrict_self(fd) {
            slot_fail(&sock, "landlock layer", errno_of(&e));
        }
    }
    let pidfd = match rustix::process::pidfd_open(
        rustix::process::getpid(),
        rustix::process::PidfdFlags::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => slot_fail(&sock, "pidfd", e.raw_os_error()),
    };
    send_msg(&sock, &FromSlot::Ready, &[pidfd.as_fd()]);
    drop(pidfd);
    let received = match fdpass::recv(sock.as_fd()) {
        Ok(r) if !r.eof => r,
        // The server let this slot go (shutdown, or a pool shrinking).
        _ => std::process::exit(0),
    };
    let (job, fds) = match read_job(received) {
        Ok(j) => j,
        Err(e) => slot_fail(&sock, "job", errno_of(&e)),
    };
    if let Err((stage, e)) = run_job(plan, &job, fds) {
        slot_fail(&sock, stage, errno_of(&e));
    }
    unreachable!("run_job only returns on failure")
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
fn run_job(plan: &InitPlan, job: &Job, fds: Vec<OwnedFd>) -> Result<(), (&'static str, io::Error)> {
    let e = |stage: &'static str| move |err: rustix::io::Errno| (stage, io::Error::from(err));
    // Own session and process group: the server can kill the tree by group without cgroups.
    rustix::process::setsid().map_err(e("setsid"))?;
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
    // Everything else this process holds (its socket included) closes at exec.
    // SAFETY: close_range with the CLOEXEC flag only marks descriptors.
    unsafe {
        let max_target = job.fds.iter().copied().max().unwrap_or(2);
        for fd in 3..=max_target {
            if !job.fds.contains(&fd) {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        libc::syscall(
            libc::SYS_close_range,
            (max_target + 1) as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
    }
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
