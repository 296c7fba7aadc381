//! PID 1 of the init's namespaces: dies with the launcher, builds the view once, then serves
//! the control socket (forks slots on request, reaps, reports how they end). It keeps its
//! capabilities and puts no Landlock or seccomp on itself: each slot confines itself.
//! Its setup steps, in order, as a failure names them (`FromInit::Failed { stage }`): `view`,
//! `hostname`, `loopback`, `proxy listener`, `network namespace`; forking a slot:
//! `user namespace maps`, `user namespace root` (`FromSlot::Failed`).

use super::*;

pub(super) fn pid1(plan: &InitPlan, control: &OwnedFd, alive: OwnedFd) -> ! {
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
pub(super) fn setup(plan: &InitPlan) -> Result<(Option<OwnedFd>, view::Built), StageError> {
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
pub(super) fn proxy_listener(port: u16) -> io::Result<OwnedFd> {
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
pub(super) fn policy_grants(plan: &LandlockPlan) -> Result<Vec<OpenedGrant>, String> {
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

/// `ip link set lo up` in the fresh network namespace, so loopback servers work.
pub(super) fn bring_up_loopback() -> io::Result<()> {
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
pub(super) fn child_signals() -> io::Result<OwnedFd> {
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
pub(super) fn serve(plan: &InitPlan, ids: Option<CallIds>, control: &OwnedFd) -> ! {
    let Ok(signals) = child_signals() else {
        std::process::exit(1)
    };
    // Expanded and opened at the first slot and reused by every later one (`policy_grants`).
    let mut grants: Option<Result<Vec<OpenedGrant>, String>> = None;
    let no_grants: Vec<OpenedGrant> = Vec::new();
    let mut slots: HashMap<i32, ForkedSlot> = HashMap::new();
    loop {
        let Some(ready) = wait_for_work(control, &signals, &slots) else {
            continue;
        };
        for pid in ready.reports {
            if let Some(slot) = slots.get_mut(&pid) {
                relay_report(control, slot);
            }
        }
        let (control_ready, child_ready) = (ready.control, ready.children);
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
pub(super) struct ForkedSlot {
    id: u64,
    status: OwnedFd,
    /// The reaper's report was relayed before the reaper itself was reaped.
    reported: bool,
}

/// What woke PID 1: the control socket, a child's end, and the slots whose reaper reported.
struct Ready {
    control: bool,
    children: bool,
    reports: Vec<i32>,
}

/// Waits until the server writes, a child ends or a slot's reaper reports (its status pipe
/// holds the report before the reaper exits, and it is relayed at once). None: interrupted.
fn wait_for_work(
    control: &OwnedFd,
    signals: &OwnedFd,
    slots: &HashMap<i32, ForkedSlot>,
) -> Option<Ready> {
    let waiting: Vec<i32> = slots
        .iter()
        .filter(|(_, s)| !s.reported)
        .map(|(pid, _)| *pid)
        .collect();
    let mut fds = vec![
        rustix::event::PollFd::new(control, rustix::event::PollFlags::IN),
        rustix::event::PollFd::new(signals, rustix::event::PollFlags::IN),
    ];
    for pid in &waiting {
        fds.push(rustix::event::PollFd::new(
            &slots[pid].status,
            rustix::event::PollFlags::IN,
        ));
    }
    match rustix::event::poll(&mut fds, None) {
        Ok(_) => {}
        Err(rustix::io::Errno::INTR) => return None,
        Err(_) => std::process::exit(1),
    }
    let reports = waiting
        .iter()
        .zip(&fds[2..])
        .filter(|(_, fd)| fd.revents().contains(rustix::event::PollFlags::IN))
        .map(|(pid, _)| *pid)
        .collect();
    Some(Ready {
        control: !fds[0].revents().is_empty(),
        children: !fds[1].revents().is_empty(),
        reports,
    })
}

pub(super) fn reap(control: &OwnedFd, slots: &mut HashMap<i32, ForkedSlot>) {
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
pub(super) struct SlotParent<'a> {
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
pub(super) const SLOT_NAMESPACES: libc::c_int =
    libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWNS;

pub(super) fn fork_slot(
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
                    && let Err(e) = super::super::idmap::become_mapped(ids)
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
                match super::super::idmap::write_maps(Path::new("/proc"), child, ids) {
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
