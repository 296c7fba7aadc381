//! The parser worker's own confinement, applied by the worker to itself before it reads the
//! first request, on top of the confinement every child gets from the executor.
//!
//! Owns two layers that only this worker can afford, because it needs nothing but its pipes:
//! a Landlock ruleset that handles every file access and grants none (no file can be opened,
//! created or executed), and a seccomp allowlist of the few system calls a single-threaded
//! parse loop makes (read, write, memory, time, exit). Everything else fails with `EPERM`
//! rather than killing the worker, so an unexpected call in a library shows up as an error
//! on stderr instead of a silent crash; what a subverted grammar could do is then limited to
//! its own pipes. Both layers are irreversible and use only safe crate APIs.

use landlock::{ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, Scope};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LockdownError {
    #[error("Landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("seccomp: {0}")]
    Seccomp(String),
}

/// The system calls the worker loop makes. Thread creation, process creation, `execve`,
/// `open*`, sockets and signals to other processes are all absent on purpose.
const ALLOWED: &[libc::c_long] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_writev,
    libc::SYS_close,
    libc::SYS_brk,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_futex,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigaction,
    libc::SYS_sigaltstack,
    libc::SYS_clock_gettime,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_getrandom,
    libc::SYS_sched_yield,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_exit,
    libc::SYS_exit_group,
];

/// Applies both layers to the calling process.
pub(crate) fn apply() -> Result<(), LockdownError> {
    // Best effort on older kernels (the crate's default): an access this kernel cannot
    // restrict was never available through the executor's ruleset either.
    Ruleset::default()
        .handle_access(AccessFs::from_all(ABI::V6))?
        .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)?
        .create()?
        .restrict_self()?;
    let program = allowlist()?;
    seccompiler::apply_filter(&program).map_err(|e| LockdownError::Seccomp(e.to_string()))
}

fn allowlist() -> Result<BpfProgram, LockdownError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| LockdownError::Seccomp(e.to_string()))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        ALLOWED.iter().map(|&nr| (nr, Vec::new())).collect();
    // `abort()` (a grammar's failed assertion) signals its own process; no other process may
    // be signalled, so the first argument must be our own pid.
    let own_pid = u64::from(std::process::id());
    let to_self = || -> Result<Vec<SeccompRule>, LockdownError> {
        let condition =
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, own_pid)
                .map_err(|e| LockdownError::Seccomp(e.to_string()))?;
        Ok(vec![
            SeccompRule::new(vec![condition]).map_err(|e| LockdownError::Seccomp(e.to_string()))?,
        ])
    };
    rules.insert(libc::SYS_tgkill, to_self()?);
    rules.insert(libc::SYS_kill, to_self()?);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Errno(libc::EPERM as u32),
        SeccompAction::Allow,
        arch,
    )
    .map_err(|e| LockdownError::Seccomp(e.to_string()))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| LockdownError::Seccomp(e.to_string()))
}
