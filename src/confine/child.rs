//! The code that runs in the forked child between `fork` and `exec`: the only place where
//! confinement is actually applied.
//!
//! Everything here must be async-signal-safe: no allocation, no locks, raw syscalls on data
//! prepared by the parent (`ChildSetup`). The order matters and is the same on every call:
//! new session → cwd → cgroups → rlimits → parent-death signal → drop capabilities →
//! no_new_privs → Landlock → seccomp (last, so our own setup syscalls are not filtered).

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
    pub landlock_ruleset_fd: Option<RawFd>,
    pub seccomp_programs: std::sync::Arc<Vec<BpfProgram>>,
}

/// Applies the confinement to the calling (freshly forked) process.
///
/// # Safety
/// Call only in a forked child before exec (e.g. from `Command::pre_exec`), with every fd in
/// `setup` open.
pub unsafe fn enter(setup: &ChildSetup) -> io::Result<()> {
    // Own session and process group, so a process-group kill reaches the whole tree even
    // without cgroups, and the child has no controlling terminal to inject input into.
    rustix::process::setsid()?;
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
    // The tree must not outlive the server if the server dies without cleaning up.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    if setup.drop_capabilities {
        drop_all_capabilities()?;
    }
    rustix::thread::set_no_new_privs(true)?;
    if let Some(fd) = setup.landlock_ruleset_fd {
        // SAFETY: landlock_restrict_self(ruleset_fd, flags=0) reads no memory of ours.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    for program in setup.seccomp_programs.iter() {
        seccompiler::apply_filter(program).map_err(|_| io::Error::last_os_error())?;
    }
    Ok(())
}

/// Root children keep uid 0 but lose every capability, for good: bounding set emptied, ambient
/// set cleared, and the securebits that make exec of any program re-grant capabilities to
/// uid 0 are turned off and locked.
fn drop_all_capabilities() -> io::Result<()> {
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
