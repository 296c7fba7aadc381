//! What `Confinement::build` is given: the policy's file, network, syscall and resource rules,
//! resolved against one workspace (paths joined, `~` expanded, the protected set derived).
//!
//! Owns the shape of that input, and the one derivation of the paths Landlock grants from it
//! ([`LandlockPaths`]). `policy::resolve` fills it in; `confine` never sees a
//! policy file or a `Policy`, so nothing here can reach back to what the policy's TOML said.

use super::CallLimits;
use std::path::PathBuf;

/// Everything the kernel is to enforce on the confined processes of one workspace.
#[derive(Debug, Clone)]
pub struct ConfinePlan {
    /// The workspace root: absolute and canonical.
    pub workspace: PathBuf,
    /// The workspace is read-only for confined processes (its `writable` directories
    /// excepted, which are in `read_write`).
    pub read_only_workspace: bool,
    /// Read and execute, nothing else.
    pub read_exec: Vec<PathBuf>,
    /// Read-write besides the workspace itself: the policy's `read_write`, and with a
    /// read-only workspace its writable directories.
    pub read_write: Vec<PathBuf>,
    /// Device files that may be opened.
    pub devices: Vec<PathBuf>,
    /// Never reachable, even below a granted directory.
    pub deny: Vec<PathBuf>,
    pub tcp_connect: Vec<u16>,
    pub tcp_bind: Vec<u16>,
    /// The sandbox init gets its own network namespace: empty, or (with `proxy`) whose only
    /// route out is the egress proxy's listener.
    pub isolate_network: bool,
    /// A proxy-mode policy's host rules: every connection out goes through the egress proxy.
    pub proxy: Option<crate::egress::EgressRules>,
    /// The seccomp profile's name (built-in) or file.
    pub seccomp_profile: String,
    /// Without namespaces, allow `socket(AF_UNIX, …)` anyway.
    pub fallback_unix_sockets: bool,
    /// Granted toolchains' shim directories (`~/.pyenv/shims`): each call writes a copy of its
    /// own there (see `sandbox_init::shims`).
    pub writable_shims: Vec<PathBuf>,
    /// Processes of one call may trace each other (`[sandbox] ptrace = "call"`): the built-in
    /// seccomp profiles then leave `ptrace` and `process_vm_*` to Landlock's scoping, where
    /// Landlock is in force.
    pub trace_own_call: bool,
    /// `[sandbox] uid`/`uid_count`: the host ids calls run as where cordon is root.
    pub call_ids: super::call_ids::CallIdsPolicy,
    /// Workspace-relative patterns nothing confined may write (bound read-only in the view).
    pub protected: Vec<String>,
    /// The policy itself names protected paths (not only its own files): worth a note when
    /// commands cannot be kept from them.
    pub names_protected_paths: bool,
    pub rlimits: RlimitPlan,
    /// Size of each slot's private `/dev/shm` (`limits.shm_mb`).
    pub shm_bytes: u64,
    /// Each call's cgroup quotas.
    pub call_limits: CallLimits,
}

/// The per-process limits every child gets (see `rlimits`).
#[derive(Debug, Clone, Copy)]
pub struct RlimitPlan {
    pub file_size_bytes: u64,
    pub open_files: u64,
    pub cpu_seconds: u64,
    pub address_space_bytes: u64,
    /// Stand-ins where there are no cgroups: the memory limit (as RLIMIT_AS) and pids (as
    /// RLIMIT_NPROC).
    pub memory_bytes: u64,
    pub pids: u64,
}

/// The paths Landlock is given under a plan, by kind, before denied paths are carved out of
/// granted directories ([`super::landlock::expand_grants`]): the one derivation of what the
/// workspace, the policy's lists and cordon's own programs become in a ruleset, so what
/// `cordon policy explain` shows is what confinement enforces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LandlockPaths {
    pub read_exec: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    /// Readable only: the workspace, when the plan makes it read-only.
    pub read_only: Vec<PathBuf>,
    pub devices: Vec<PathBuf>,
    pub deny: Vec<PathBuf>,
}

impl ConfinePlan {
    /// What Landlock grants under this plan. `extra_read_exec` are cordon's own programs the
    /// confined processes run (the parser worker, doctor's probes); each call's private
    /// directories are added where the call is set up.
    pub fn landlock_paths(&self, extra_read_exec: &[PathBuf]) -> LandlockPaths {
        let mut read_exec = self.read_exec.clone();
        read_exec.extend(extra_read_exec.iter().cloned());
        let mut read_write = self.read_write.clone();
        let mut read_only = Vec::new();
        if self.read_only_workspace {
            read_only.push(self.workspace.clone());
        } else {
            read_write.push(self.workspace.clone());
        }
        LandlockPaths {
            read_exec,
            read_write,
            read_only,
            devices: self.devices.clone(),
            deny: self.deny.clone(),
        }
    }
}

impl LandlockPaths {
    /// The ruleset's input, with the TCP ports of one network setting.
    pub fn spec<'a>(
        &'a self,
        tcp_connect: &'a super::landlock::TcpPorts,
        tcp_bind: &'a super::landlock::TcpPorts,
    ) -> super::landlock::LandlockSpec<'a> {
        super::landlock::LandlockSpec {
            read_exec: &self.read_exec,
            read_write: &self.read_write,
            read_only: &self.read_only,
            devices: &self.devices,
            deny: &self.deny,
            tcp_connect,
            tcp_bind,
        }
    }

    /// The file grants as written into the ruleset, denied paths carved out (paths missing
    /// on this machine are skipped, as the ruleset skips them).
    pub fn expand(&self) -> Vec<super::landlock::Grant> {
        use super::landlock::TcpPorts;
        super::landlock::expand_grants(&self.spec(&TcpPorts::NONE, &TcpPorts::NONE))
    }
}
