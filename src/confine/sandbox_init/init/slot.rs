//! A slot: PID 1 of its own PID, IPC and mount namespaces, forked by the init's PID 1. It
//! joins its cgroups, mounts what its namespace holds of its own, **confines itself**, reports
//! ready and waits for what to run; then forks the program's main process and reaps until that
//! ends. Its steps, in order, as `FromSlot::Failed { stage }` names them: `signalfd`,
//! `join cgroup`, the mounts (`slot_mounts`: `make mounts private`, `mount /proc`,
//! `mount /dev/shm`, `devpts`, `cgroup`, the `/tmp` binds), `user namespace limits`, `setsid`,
//! the confinement ([`confine_self`]: `capabilities`, `no_new_privs`, `landlock layer`,
//! `seccomp`), `landlock scope`, `dumpable`, `pidfd`, `fork`; the main process then waits:
//! `landlock scope`, `job`, and the exec's steps (`exec`).
use super::*;

/// Grants below these paths name filesystems each slot mounts anew.
pub(super) fn remounted_by_slots(path: &Path) -> bool {
    path.starts_with("/proc")
}

/// A slot's Landlock layer: the policy's grants minus the roots that hold every slot's
/// directory, plus this slot's own directory and what its mount namespace holds.
pub(super) fn slot_ruleset(
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

pub(super) fn restrict_self(ruleset: &OwnedFd, flags: u32) -> io::Result<()> {
    // SAFETY: landlock_restrict_self(ruleset_fd, flags) reads no memory of ours.
    let ret =
        unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), flags) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(super) fn slot_fail(sock: &OwnedFd, stage: &str, errno: i32) -> ! {
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
pub(super) struct SlotOwn {
    pub(super) layer: SlotLayer,
    pub(super) sock: OwnedFd,
    /// Where the reaper writes the job's wait status (see [`ForkedSlot`]).
    pub(super) status: OwnedFd,
    pub(super) cgroup_procs: Vec<OwnedFd>,
}

/// Signals the reaper passes on to the job's main process when they come from outside its
/// namespace (the server: interrupts of interpreter cells, stops of jobs). A PID 1 only ever
/// receives signals it handles, so these are blocked and read from a signalfd.
pub(super) const FORWARDED: &[libc::c_int] = &[
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
pub(super) fn slot(plan: &InitPlan, grants: &[OpenedGrant], own: SlotOwn, ids_mapped: bool) -> ! {
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
    let own_grants = match super::super::slot_mounts::build(plan, layer.dir(), joined_cgroups) {
        Ok(g) => g,
        Err(e) => slot_fail(&sock, e.step, errno_of(&e.source)),
    };
    if ids_mapped && let Err(e) = super::super::idmap::limit_namespace() {
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
pub(super) fn await_job(plan: &InitPlan, sock: OwnedFd, job_scope: Option<&OwnedFd>) -> ! {
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
pub(super) fn reaper_signals() -> io::Result<OwnedFd> {
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
pub(super) fn confine_self(
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
pub(super) fn reap_until(
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
pub(super) const STATUS_REPORT: usize = 9;

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
pub(super) fn leftovers(proc_dir: Option<&OwnedFd>) -> u32 {
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
