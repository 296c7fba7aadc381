//! The code that runs in a child the server forks itself (the per-child path, where the
//! sandbox init cannot be had) between `fork` and `exec`, applying its confinement. With the
//! sandbox init, PID 1 and its slots apply theirs (`sandbox_init::init`); both take their layers
//! from the same plan.
//!
//! Everything here must be async-signal-safe: no allocation, no locks, raw syscalls on data
//! prepared by the parent (`ChildSetup`). The order matters and is the same on every call:
//! new session → cwd → cgroups → rlimits → parent-death signal → drop capabilities →
//! no_new_privs → Landlock → passed descriptors → seccomp (last, so our own setup syscalls are
//! not filtered).

use rustix::process::{Resource, Rlimit};
use seccompiler::BpfProgram;
use std::io;
use std::os::fd::RawFd;

/// Everything the child needs, prepared by the parent. Borrowed fds stay open in the parent
/// for as long as the setup lives (see `exec`), and are `O_CLOEXEC`, so they vanish at exec.
pub struct ChildSetup {
    pub cwd_fd: Option<RawFd>,
    pub cgroup_procs_fds: Vec<RawFd>,
    pub rlimits: std::sync::Arc<Vec<(Resource, u64)>>,
    pub drop_capabilities: bool,
    /// Paths made read-only in a private mount namespace (protected paths in the workspace);
    /// empty = no mount namespace. Needs CAP_SYS_ADMIN, so only prepared when running as root.
    pub readonly_binds: Vec<std::ffi::CString>,
    pub landlock_ruleset_fd: Option<RawFd>,
    pub seccomp_programs: std::sync::Arc<Vec<BpfProgram>>,
    /// `(number in the child, source fd in the parent)`: descriptors the program starts with
    /// besides stdio. When not empty, every other descriptor ≥ 3 is closed at exec. The parent
    /// guarantees each source number is above every target number (see `exec::worker`).
    pub pass_fds: Vec<(RawFd, RawFd)>,
    /// Make the terminal on fd 0 the new session's controlling terminal (a job run under a
    /// pty on the per-child path: Ctrl-C written to the master then reaches its foreground).
    pub controlling_tty: bool,
}

/// Applies the confinement to the calling (freshly forked) process.
///
/// # Safety
/// Call only in a forked child before exec (e.g. from `Command::pre_exec`), with every fd in
/// `setup` open.
pub(crate) unsafe fn enter(setup: &ChildSetup) -> io::Result<()> {
    // Own session and process group, so a process-group kill reaches the whole tree even
    // without cgroups, and the child has no controlling terminal to inject input into.
    rustix::process::setsid()?;
    if setup.controlling_tty {
        // SAFETY: TIOCSCTTY takes an integer argument; fd 0 is the terminal the parent placed.
        if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if let Some(fd) = setup.cwd_fd {
        // SAFETY: fd is a directory fd owned by the parent's ChildSetup owner and open here.
        if unsafe { libc::fchdir(fd) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    for &fd in &setup.cgroup_procs_fds {
        // SAFETY: writing 1 byte from a static buffer to an fd we own; "0" means "this process".
        if unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    for &(resource, value) in setup.rlimits.iter() {
        rustix::process::setrlimit(
            resource,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )?;
    }
    if !setup.readonly_binds.is_empty() {
        make_readonly(&setup.readonly_binds)?;
    }
    // The tree must not outlive the server if the server dies without cleaning up.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    if setup.drop_capabilities {
        drop_all_capabilities()?;
    }
    rustix::thread::set_no_new_privs(true)?;
    if let Some(fd) = setup.landlock_ruleset_fd {
        // An atomic load: async-signal-safe, so fine between fork and exec.
        let flags = crate::confine::audit::restrict_flags();
        // SAFETY: landlock_restrict_self(ruleset_fd, flags) reads no memory of ours.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if !setup.pass_fds.is_empty() {
        place_fds(&setup.pass_fds)?;
    }
    for program in setup.seccomp_programs.iter() {
        seccompiler::apply_filter(program).map_err(|_| io::Error::last_os_error())?;
    }
    Ok(())
}

/// Puts each passed descriptor at its number and marks every other descriptor ≥ 3
/// close-on-exec, so the program starts with stdio and exactly these. Sources are all above
/// all targets, so no `dup2` overwrites a source still to be placed; `dup2` onto a different
/// number leaves the copy without close-on-exec.
fn place_fds(fds: &[(RawFd, RawFd)]) -> io::Result<()> {
    if cloexec_from(3).is_err() {
        // Kernels before 5.11: mark them one by one up to the descriptor limit.
        let limit = rustix::process::getrlimit(Resource::Nofile)
            .current
            .unwrap_or(1 << 16)
            .min(1 << 20) as RawFd;
        for fd in 3..limit {
            // SAFETY: F_SETFD on a descriptor number; EBADF for unused numbers is ignored.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
    }
    for &(target, source) in fds {
        // SAFETY: both are descriptor numbers; `source` is open (owned by the parent's spec).
        if unsafe { libc::dup2(source, target) } != target {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A private mount namespace in which each path is a read-only bind of itself, so a confined
/// command cannot write a git hook that would later run outside the sandbox. Must run while
/// the child still has CAP_SYS_ADMIN, i.e. before capabilities are dropped.
fn make_readonly(paths: &[std::ffi::CString]) -> io::Result<()> {
    let check = |ret: libc::c_int| {
        if ret == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // SAFETY: unshare takes only flags.
    check(unsafe { libc::unshare(libc::CLONE_NEWNS) })?;
    // Stop our binds from propagating back into the server's (the host's) namespace.
    // SAFETY: valid NUL-terminated path, null fs type/data are allowed for MS_PRIVATE.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })?;
    for path in paths {
        // SAFETY: `path` is a NUL-terminated string prepared by the parent.
        let bound = unsafe {
            libc::mount(
                path.as_ptr(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            )
        };
        if bound != 0 {
            let err = io::Error::last_os_error();
            // Removed since the parent looked: nothing left to protect.
            if err.raw_os_error() == Some(libc::ENOENT) {
                continue;
            }
            return Err(err);
        }
        // SAFETY: as above; remounting the bind we just made read-only.
        check(unsafe {
            libc::mount(
                std::ptr::null(),
                path.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                std::ptr::null(),
            )
        })?;
    }
    Ok(())
}

/// Root children keep uid 0 but lose every capability, for good: bounding set emptied, ambient
/// set cleared, and the securebits that make exec of any program re-grant capabilities to
/// uid 0 are turned off and locked.
pub(crate) fn drop_all_capabilities() -> io::Result<()> {
    use rustix::thread::{
        CapabilitiesSecureBits as Bits, CapabilitySet, CapabilitySets,
        remove_capability_from_bounding_set, set_capabilities, set_capabilities_secure_bits,
    };
    for cap in 0..64u32 {
        match remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(1 << cap)) {
            Ok(()) => {}
            // Past the kernel's last capability.
            Err(rustix::io::Errno::INVAL) => break,
            Err(e) => return Err(e.into()),
        }
    }
    rustix::thread::clear_ambient_capability_set()?;
    set_capabilities_secure_bits(
        Bits::NO_ROOT
            | Bits::NO_ROOT_LOCKED
            | Bits::NO_SETUID_FIXUP
            | Bits::NO_SETUID_FIXUP_LOCKED
            | Bits::KEEP_CAPS_LOCKED
            | Bits::NO_CAP_AMBIENT_RAISE
            | Bits::NO_CAP_AMBIENT_RAISE_LOCKED,
    )?;
    set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )?;
    Ok(())
}

/// Marks every descriptor from `first` up close-on-exec with one `close_range` (Linux 5.11+):
/// the one copy of that call for the server's start, the per-child path and the sandbox
/// init's slots. Async-signal-safe (one raw syscall, no allocation), so `pre_exec` and a
/// forked slot may call it.
pub(crate) fn cloexec_from(first: RawFd) -> io::Result<()> {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on descriptors; it reads
    // no memory of ours.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
