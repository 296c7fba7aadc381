//! The program's start in its slot: the `wire::Exec` read (from the datagram or its memfd),
//! then `fchdir`, `dup2`, `setrlimit`, `execve` (with a PATH search), under a new terminal when
//! asked. Its steps, in order, as `FromSlot::Failed { stage }` names them: `open workspace`,
//! `cwd`, `fchdir`, `dup`, `dup2`, (under a terminal: `open /dev/ptmx`, `unlockpt`,
//! `pty size`, `open pty peer`, `setsid`, `controlling terminal`, `dup2 pty`), `setrlimit`,
//! `exec`.

use super::*;

pub(super) fn read_job(received: fdpass::Received) -> io::Result<(Exec, Vec<OwnedFd>)> {
    let bad = |e: wire::WireError| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    let mut fds = received.fds;
    let job = match wire::decode::<ToSlot>(&received.data, wire::MAX_MESSAGE).map_err(bad)? {
        ToSlot::Exec(job) => job,
        ToSlot::ExecInMemfd { len } => {
            if fds.is_empty() || len > wire::MAX_EXEC {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            let memfd = fds.remove(0);
            let mut bytes = Vec::with_capacity(len);
            std::fs::File::from(memfd)
                .take(len as u64)
                .read_to_end(&mut bytes)?;
            match wire::decode::<ToSlot>(&bytes, wire::MAX_EXEC).map_err(bad)? {
                ToSlot::Exec(job) => job,
                ToSlot::ExecInMemfd { .. } => {
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
pub(super) fn run_job(
    plan: &InitPlan,
    sock: &OwnedFd,
    job: &Exec,
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
        if job.program.cwd.as_os_str().is_empty() {
            Path::new(".")
        } else {
            job.program.cwd.as_path()
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
    if let Some(size) = job.program.pty {
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
    Err(("exec", exec(&job.program)))
}

/// Puts this process under a new terminal of the slot's own devpts: opens a master, sends it
/// to the server, and makes the terminal's other side this process's controlling terminal and
/// its standard streams. Opened here, inside the slot's mount namespace, so the terminal is
/// one no other call can open (each slot mounts its own devpts instance).
pub(super) fn under_terminal(
    sock: &OwnedFd,
    size: wire::PtySize,
) -> Result<(), (&'static str, io::Error)> {
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
pub(super) fn default_dispositions() {
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
pub(super) fn unblock_signals() {
    // SAFETY: sigprocmask with an empty local set.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// execve with a PATH search for a bare program name, like execvpe.
pub(super) fn exec(program: &wire::Program) -> io::Error {
    use std::ffi::CString;
    let argv: Vec<CString> = program
        .argv
        .iter()
        .filter_map(|a| CString::new(a.as_bytes()).ok())
        .collect();
    let envp: Vec<CString> = program
        .env
        .iter()
        .filter_map(|a| CString::new(a.as_bytes()).ok())
        .collect();
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    let name = program.argv[0].as_bytes();
    let candidates: Vec<CString> = if name.contains(&b'/') {
        vec![argv[0].clone()]
    } else {
        let path = program
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
                full.extend_from_slice(name);
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
