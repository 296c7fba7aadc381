//! Confinement: turning a resolved [`ConfinePlan`] into what the kernel enforces on each child.
//!
//! Owns the Landlock ruleset, the seccomp programs, the rlimit plan and the cgroups, all
//! built once when the runtime is built ("build once, apply many", in the ordered steps of
//! [`Confinement::build`]), the sandbox init and its slots (`sandbox`, `sandbox_init`), the
//! scratch directories they use in the temp dir (`scratch`: removed after a killed server),
//! the reader of the kernel's Landlock audit records (`audit`), and all of cordon's `unsafe`
//! code, each block with a SAFETY note. It never sees a policy (`policy::resolve` hands it
//! the plan), opens nothing by ambient path and starts no network server (the runtime hands
//! it the workspace capability and the egress proxy: [`Handed`]), starts no confined process
//! of a call itself (`exec::launch` asks it for a slot or a `ChildSetup`), and knows nothing
//! of MCP.

pub(crate) mod audit;
pub(crate) mod call_ids;
pub(crate) mod cgroup;
pub(crate) mod child;
pub(crate) mod fanotify;
pub(crate) mod kernel;
pub(crate) mod landlock;
mod plan;
mod rlimits;
pub(crate) mod sandbox_init;
pub(crate) mod scratch;
pub(crate) mod seccomp;
pub(crate) mod selftest;
pub(crate) mod terminal;

pub(crate) use call_ids::CallIdsPolicy;
pub(crate) use cgroup::{CallCgroup, CallLimits, CgroupMode, LimitHits};
pub(crate) use child::ChildSetup;
pub(crate) use kernel::{KernelSupport, REQUIRED_LANDLOCK_ABI};
pub(crate) use plan::{ConfinePlan, RlimitPlan};
pub(crate) use sandbox_init::{SandboxChild, Slot};
pub(crate) use sandbox_init::{SandboxInit, WarmSlot};

use seccompiler::BpfProgram;
use serde::Serialize;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error(
        "refusing to run confined work: {feature} is not available on this kernel ({found}). \
         {fix} To run anyway with weaker confinement, pass --allow-degraded; every result then \
         states the enforcement level actually in force."
    )]
    Unenforceable {
        feature: &'static str,
        found: String,
        fix: &'static str,
    },
    #[error(transparent)]
    Landlock(#[from] landlock::LandlockError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error("cannot create the private temporary directory: {0}")]
    TempDir(std::io::Error),
    #[error("cannot prepare the call's cgroup: {0}")]
    Cgroup(#[from] cgroup::CgroupError),
    #[error(transparent)]
    SandboxInit(#[from] sandbox_init::SandboxInitError),
    #[error("the task preparing the sandbox did not finish: {0}")]
    Task(String),
    #[error("cannot start the egress proxy: {0}")]
    Egress(String),
    #[error(
        "refusing to start: the sandbox view cannot be built because of workspace content \
         ({detail}); rename or remove that path in the workspace (it is protected git \
         state), or pass --allow-degraded to run without namespaces (enforcement `reduced`)"
    )]
    WorkspaceView { detail: String },
}

/// Marks every descriptor above stderr close-on-exec, so nothing this process inherited can
/// reach a child. Call first thing in `main`, before any descriptor of our own is opened.
pub fn mark_inherited_descriptors_cloexec() -> std::io::Result<()> {
    child::cloexec_from(3)
}

/// What cgroup support this process would get, with the reasons for anything missing. Creates
/// and removes its probe directories.
pub(crate) fn probe_cgroups() -> (CgroupMode, Vec<String>) {
    let cgroups = cgroup::Cgroups::setup();
    (cgroups.mode(), cgroups.notes.clone())
}

/// Arranges for `setup` to be applied in the child between fork and exec.
pub fn confine_on_spawn(cmd: &mut tokio::process::Command, setup: ChildSetup) {
    // SAFETY: `child::enter` only issues async-signal-safe syscalls on data prepared in the
    // parent. The fds it names (cwd, cgroup.procs, Landlock ruleset) are owned by the caller,
    // the call cgroup and the Confinement, all of which outlive `spawn`.
    unsafe {
        cmd.pre_exec(move || child::enter(&setup));
    }
}

/// What the operator allows beyond the policy.
#[derive(Debug, Clone, Default)]
pub struct ConfineOptions {
    /// Run with what the kernel offers instead of refusing (`--allow-degraded`).
    pub allow_degraded: bool,
    /// Extra read+execute grants (e.g. the cordon binary itself for `doctor` probes).
    pub extra_read_exec: Vec<PathBuf>,
    /// The binary that runs the sandbox init (`… __sandbox-init`); default: `cordon-init`
    /// beside this executable, else this executable itself (see `default_init_program`).
    /// Tests that embed the library name the real binary here.
    pub init_program: Option<PathBuf>,
    /// One command and done (`cordon exec`): the sandbox init keeps no warm slots, so the
    /// call makes exactly the one slot it runs in (a server keeps three ready).
    pub one_shot: bool,
}

/// What the composition root (`Runtime::build`) opens and starts for the confinement, so
/// `confine` opens nothing by ambient path and serves no network itself.
pub struct Handed {
    /// The workspace root, as `workspace::Workspace` opened it.
    pub workspace: cap_std::fs::Dir,
    /// The egress proxy for a plan with `proxy` rules, started (not yet serving) by the
    /// runtime; attached to the sandbox init's listener here, or dropped where there is no
    /// network namespace to put it on. None when the plan has no proxy.
    pub proxy: Option<crate::egress::Proxy>,
}

/// How much of the confinement is in force, named in every result: `full` (Landlock,
/// seccomp, cgroup limits and the sandbox init's namespaces), `reduced` (no cgroup limits or
/// no namespaces: rlimits and process-group kill only) or `degraded` (Landlock or seccomp
/// missing, as the operator allowed).
///
/// `Default` only lets results derive `Default` for their empty fields; every result sets the
/// level actually in force.
// The variants' words live in the enum's doc: a documented variant would make the output
// schema a `oneOf` of `const`s instead of one `enum`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EnforcementLevel {
    #[default]
    Full,
    Reduced,
    Degraded,
}

impl EnforcementLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            EnforcementLevel::Full => "full",
            EnforcementLevel::Reduced => "reduced",
            EnforcementLevel::Degraded => "degraded",
        }
    }

    pub fn is_full(self) -> bool {
        self == EnforcementLevel::Full
    }
}

impl std::fmt::Display for EnforcementLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What Landlock enforces, decided where the ruleset is made: every access right the policy
/// needs handled (`Full`), only those this kernel's ABI knows (`Partial`, under
/// `--allow-degraded`; as the landlock crate's `RulesetStatus::PartiallyEnforced`), or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum LandlockStatus {
    Full { abi: u32 },
    Partial { abi: u32 },
    None,
}

impl LandlockStatus {
    /// True when a ruleset is in force at all (fully or partially).
    pub fn is_enforced(self) -> bool {
        !matches!(self, LandlockStatus::None)
    }

    /// The ABI the ruleset was made for; 0 without one.
    pub fn abi(self) -> u32 {
        match self {
            LandlockStatus::Full { abi } | LandlockStatus::Partial { abi } => abi,
            LandlockStatus::None => 0,
        }
    }
}

impl std::fmt::Display for LandlockStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LandlockStatus::Full { abi } => write!(f, "Landlock ABI {abi}"),
            LandlockStatus::Partial { abi } => write!(
                f,
                "Landlock ABI {abi} (partial: rights newer than ABI {abi} unenforced)"
            ),
            LandlockStatus::None => f.write_str("NO Landlock"),
        }
    }
}

/// The enforcement actually in force, reported with every outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Enforcement {
    pub level: EnforcementLevel,
    pub landlock: LandlockStatus,
    pub seccomp: bool,
    pub cgroups: CgroupMode,
    /// Confined processes are born in the sandbox init's namespaces (mount, PID, IPC, UTS,
    /// network when the policy has none, user when not root). False: one fork per child, with
    /// seccomp standing in where it can (no Unix sockets, no SysV IPC) — a weaker level.
    pub namespaces: bool,
    pub network_namespace: bool,
    pub user_namespace: bool,
    /// The host uid confined processes run as (never 0 in the sandbox init where cordon is
    /// root, unless a note says why not).
    pub calls_uid: u32,
    pub capabilities_dropped: bool,
    pub notes: Vec<String>,
}

impl Enforcement {
    pub fn summary(&self) -> String {
        let mut parts = vec![self.landlock.to_string()];
        parts.push(
            if self.seccomp {
                "seccomp"
            } else {
                "NO seccomp"
            }
            .into(),
        );
        parts.push(
            if self.namespaces {
                "namespaces"
            } else {
                "NO namespaces"
            }
            .into(),
        );
        parts.push(format!(
            "cgroups: {}",
            serde_json::to_value(self.cgroups)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        ));
        format!("{} ({})", self.level, parts.join(", "))
    }
}

/// A policy made enforceable: everything a child needs, built once.
pub struct Confinement {
    landlock_fd: Option<OwnedFd>,
    seccomp: Arc<Vec<BpfProgram>>,
    rlimits: Arc<Vec<(rustix::process::Resource, u64)>>,
    drop_capabilities: bool,
    /// A call cgroup made ahead of time (mkdir and limit writes off the critical path), for
    /// the per-child path. Declared before `cgroups` so it is removed before its parents.
    spare: std::sync::Mutex<Option<CallCgroup>>,
    /// The sandbox init and its warm slots; None where namespaces cannot be had. Declared
    /// before `cgroups` so the slots' cgroups go before their parents.
    sandbox_init: std::sync::RwLock<Option<Arc<sandbox_init::SandboxInit>>>,
    cgroups: cgroup::Cgroups,
    call_limits: CallLimits,
    enforcement: Enforcement,
    tmp_root: scratch::ScratchDir,
    /// Long-lived workers' private directories live below this (see `private_root`).
    private_root: scratch::ScratchDir,
    workspace: PathBuf,
    /// The workspace root as a capability (handed in: see [`Handed`]).
    workspace_dir: cap_std::fs::Dir,
    /// Workspace-relative protected patterns (policy + its files inside the workspace).
    protected: Vec<String>,
    /// What the Landlock ruleset was built from, kept so a long-lived worker can get a ruleset
    /// whose only private directory is its own (`private_ruleset`); None without Landlock.
    landlock_inputs: Option<LandlockInputs>,
    /// The egress proxy of a proxy-mode policy, serving every sandbox init's listener; None
    /// without the proxy, or where there is no network namespace (then no network at all).
    egress: Option<Arc<crate::egress::Proxy>>,
}

/// The policy's file and network grants, minus the per-call temporary root: the plan's one
/// derivation of Landlock paths ([`ConfinePlan::landlock_paths`], which `policy explain`
/// reads too) plus the TCP ports.
pub(crate) struct LandlockInputs {
    paths: plan::LandlockPaths,
    tcp_connect: Vec<u16>,
    tcp_bind: Vec<u16>,
    best_effort: bool,
}

impl LandlockInputs {
    fn new(plan: &ConfinePlan, options: &ConfineOptions, best_effort: bool) -> Self {
        Self {
            paths: plan.landlock_paths(&options.extra_read_exec),
            tcp_connect: plan.tcp_connect.clone(),
            tcp_bind: plan.tcp_bind.clone(),
            best_effort,
        }
    }

    /// The ruleset with `private` as the one extra read-write directory.
    fn build(&self, private: &Path) -> Result<OwnedFd, ConfineError> {
        let mut paths = self.paths.clone();
        paths.read_write.push(private.to_path_buf());
        // This ruleset serves processes in the host's network namespace (the per-child path):
        // the policy's ports, always.
        let (connect, bind) = (
            landlock::TcpPorts::Only(self.tcp_connect.clone()),
            landlock::TcpPorts::Only(self.tcp_bind.clone()),
        );
        Ok(landlock::build_ruleset(
            &paths.spec(&connect, &bind),
            self.best_effort,
        )?)
    }
}

impl Confinement {
    /// Builds the confinement `plan` describes over its workspace, in the order the layers
    /// depend on each other (as nsjail's `containProc` or bubblewrap's setup ops): detect the
    /// kernel → Landlock grants → seccomp → cgroups → the sandbox init → egress → what is
    /// actually in force. Fails closed when the kernel cannot enforce the plan, unless
    /// degraded mode is allowed. `handed` is what the composition root opened and started
    /// for it: `confine` opens nothing by ambient path and starts no network server.
    pub fn build(
        plan: &ConfinePlan,
        options: &ConfineOptions,
        handed: Handed,
    ) -> Result<Self, ConfineError> {
        let kernel = KernelSupport::detect();
        let mut notes = Vec::new();
        // Scratch directories of cordon processes that were killed before they could remove
        // theirs: gone in the background while this one starts.
        scratch::sweep_stale_in_background();
        let tmp_root = scratch::ScratchDir::new("tmp").map_err(ConfineError::TempDir)?;
        // The calls' writable copy of the toolchains' shims, made once (`sandbox_init::shims`);
        // a one-shot command's slot makes its own, on a tmpfs.
        if !options.one_shot {
            sandbox_init::shims::prepare(tmp_root.path(), &plan.writable_shims);
        }
        let private_root = scratch::ScratchDir::new("private").map_err(ConfineError::TempDir)?;

        let landlock_inputs = landlock_step(plan, options, &kernel, &mut notes)?;
        let tracing = tracing_step(plan, landlock_inputs.is_some(), &mut notes);
        let seccomp = seccomp_step(plan, options, &kernel, tracing, &mut notes)?;
        let cgroups = cgroups_step(&kernel, &mut notes);
        if options.one_shot {
            cgroups.prime_migrations();
        }
        let sandbox_init_seccomp = private_netns_seccomp(plan, &seccomp, tracing)?;
        let sandbox_init = start_sandbox_init(
            SandboxInitInputs {
                plan,
                options,
                kernel: &kernel,
                landlock: landlock_inputs.as_ref(),
                seccomp: sandbox_init_seccomp.as_deref().unwrap_or(&seccomp),
                calls_tmp: tmp_root.path(),
                private_root: private_root.path(),
                cgroup_mounts: cgroups.view_mounts(),
                workspace: &handed.workspace,
            },
            &mut notes,
        )?;
        let (egress, landlock_inputs) = egress_step(
            plan,
            sandbox_init.as_ref(),
            handed.proxy,
            landlock_inputs,
            &mut notes,
        )?;
        let seccomp = per_child_seccomp(
            plan,
            &kernel,
            (sandbox_init.is_some(), tracing),
            seccomp,
            &mut notes,
        )?;
        // The parent-built ruleset serves only the per-child path; with the sandbox init, PID 1
        // builds its own inside the view (paths resolve there), so building it here too would
        // only cost start-up time.
        let landlock_fd = match &sandbox_init {
            Some(_) => None,
            None => landlock_inputs
                .as_ref()
                .map(|inputs| inputs.build(tmp_root.path()))
                .transpose()?,
        };
        let enforcement = in_force(
            &kernel,
            landlock_inputs.as_ref(),
            &seccomp,
            &cgroups,
            sandbox_init.as_ref(),
            notes,
        );
        Ok(Self {
            landlock_fd,
            seccomp: Arc::new(seccomp),
            rlimits: Arc::new(rlimits::plan(
                &plan.rlimits,
                !cgroups.has_limits(),
                kernel.is_root,
            )),
            drop_capabilities: kernel.is_root,
            call_limits: plan.call_limits,
            spare: std::sync::Mutex::new(None),
            sandbox_init: std::sync::RwLock::new(sandbox_init.map(Arc::new)),
            cgroups,
            enforcement,
            tmp_root,
            private_root,
            workspace: plan.workspace.clone(),
            workspace_dir: handed.workspace,
            protected: plan.protected.clone(),
            landlock_inputs,
            egress,
        })
    }

    /// The egress proxy, when the policy routes the network through it and it could be set up
    /// (a network namespace of our own).
    pub fn egress(&self) -> Option<&Arc<crate::egress::Proxy>> {
        self.egress.as_ref()
    }

    /// Root of long-lived workers' private directories (`WorkerSpec::private_dir` must lie
    /// below it): in the sandbox's view, but granted to each worker's own directory only.
    pub fn private_root(&self) -> &Path {
        self.private_root.path()
    }

    /// The sandbox init if it is alive and its view up to date; None otherwise (then
    /// [`Self::sandbox_init`] rebuilds it). A few `lstat` calls.
    pub fn current_sandbox_init(&self) -> Option<Arc<sandbox_init::SandboxInit>> {
        self.sandbox_init
            .read()
            .ok()?
            .as_ref()
            .filter(|f| f.is_alive() && f.is_current())
            .cloned()
    }

    /// The sandbox init in force, without checking that its view is up to date (no file-system
    /// call): for what does not depend on the view, such as its network namespace.
    pub fn installed_sandbox_init(&self) -> Option<Arc<sandbox_init::SandboxInit>> {
        self.sandbox_init.read().ok()?.as_ref().cloned()
    }

    /// The sandbox init children come from, if there is one; None: one fork per child. The
    /// caller keeps the `Arc` for as long as its process lives (a replaced init stays up
    /// until its last process is done).
    ///
    /// When a protected path appeared, vanished or was replaced since the init's view was
    /// built (`git init` in the workspace, a new `.git/hooks`), a new init is started first,
    /// so its view binds the paths as they are now. That is blocking (tens of ms, once).
    pub fn sandbox_init(&self) -> Option<Result<Arc<sandbox_init::SandboxInit>, ConfineError>> {
        let current = self.sandbox_init.read().ok()?.as_ref().cloned()?;
        if current.is_alive() && current.is_current() {
            return Some(Ok(current));
        }
        let Ok(mut slot) = self.sandbox_init.write() else {
            return Some(Ok(current));
        };
        if let Some(f) = slot.as_ref().filter(|f| f.is_current() && f.is_alive()) {
            return Some(Ok(Arc::clone(f)));
        }
        let why = if current.is_alive() {
            "protected paths changed since the sandbox view was built"
        } else {
            "the sandbox init ended"
        };
        Some(match current.rebuilt() {
            Ok(fresh) => {
                tracing::info!("{why}: started a new sandbox init");
                if let Some(proxy) = &self.egress
                    && !fresh.has_proxy()
                    && let Err(e) = fresh.attach_proxy(proxy)
                {
                    // Calls in the new init would find no proxy: keep the old one.
                    tracing::warn!("the new sandbox init's proxy listener: {e}");
                    return Some(Ok(current));
                }
                let fresh = Arc::new(fresh);
                crate::metrics::view_rebuilt();
                current.retire();
                *slot = Some(Arc::clone(&fresh));
                crate::events::emit(
                    crate::events::Level::Info,
                    "view_rebuilt",
                    serde_json::json!({
                        "reason": why,
                        "message": format!("{why}: the sandbox view was rebuilt for the next calls"),
                    }),
                );
                Ok(fresh)
            }
            // A dead init is never replaced by the weaker per-child path: the call fails.
            Err(e) if !current.is_alive() => Err(e.into()),
            Err(e) => {
                // Keep serving with the view we have, and say so: a protected path that
                // appeared since is then writable by commands until the next attempt.
                tracing::warn!("{why}, but the view cannot be rebuilt: {e}");
                crate::events::emit(
                    crate::events::Level::Warning,
                    "view_rebuild_failed",
                    serde_json::json!({
                        "reason": why,
                        "message": format!(
                            "{why}, but the sandbox view cannot be rebuilt; calls keep the old \
                             view until the next attempt"
                        ),
                    }),
                );
                Ok(current)
            }
        })
    }

    /// Whether children come from a sandbox init (namespaces could be had at start). Stays
    /// true if the init later dies: it is then restarted, never silently replaced by the
    /// per-child path.
    pub fn uses_sandbox_init(&self) -> bool {
        self.sandbox_init.read().ok().is_some_and(|f| f.is_some())
    }

    /// Tops up the warm slots of `sandbox_init`. Blocking: run it off the async threads.
    pub fn refill_call_slots(&self, sandbox_init: &sandbox_init::SandboxInit) {
        sandbox_init.refill(&self.cgroups, &self.call_limits);
    }

    /// A slot for one call made now (no warm one was left). Blocking.
    pub fn make_call_slot(
        &self,
        sandbox_init: &sandbox_init::SandboxInit,
    ) -> Result<WarmSlot, ConfineError> {
        sandbox_init.make_call_slot(&self.cgroups, &self.call_limits)
    }

    /// A slot for a long-lived worker with its own limits and private directory. Blocking.
    pub fn make_worker_slot(
        &self,
        sandbox_init: &sandbox_init::SandboxInit,
        limits: &CallLimits,
        private_dir: &Path,
    ) -> Result<WarmSlot, ConfineError> {
        sandbox_init.make_worker_slot(&self.cgroups, limits, private_dir)
    }

    /// The rlimits a job sets before exec, as (resource number, value).
    pub fn job_rlimits(&self) -> Vec<(i32, u64)> {
        self.rlimits.iter().map(|&(r, v)| (r as i32, v)).collect()
    }

    pub fn enforcement(&self) -> &Enforcement {
        &self.enforcement
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Root of the per-call private temporary directories (granted read-write).
    pub fn tmp_root(&self) -> &Path {
        self.tmp_root.path()
    }

    /// The call's cgroup (when the host has them): the spare made after the previous call,
    /// or a new one.
    pub fn create_call_cgroup(&self) -> Result<Option<CallCgroup>, ConfineError> {
        if let Some(spare) = self.spare.lock().ok().and_then(|mut s| s.take()) {
            return Ok(Some(spare));
        }
        Ok(self.cgroups.create_call_if_any(&self.call_limits)?)
    }

    /// Makes the next call's cgroup now, while nothing waits for it. Best effort: on failure
    /// the next call simply creates its own (and reports that error if it persists).
    pub fn prepare_spare_cgroup(&self) {
        let Ok(mut spare) = self.spare.lock() else {
            return;
        };
        if spare.is_none() {
            *spare = self
                .cgroups
                .create_call_if_any(&self.call_limits)
                .ok()
                .flatten();
        }
    }

    /// Creates a cgroup with limits other than the policy's per-call ones (an interpreter
    /// session has its own memory, pids and CPU budget).
    pub fn create_cgroup_with(
        &self,
        limits: &CallLimits,
    ) -> Result<Option<CallCgroup>, ConfineError> {
        Ok(self.cgroups.create_call_if_any(limits)?)
    }

    /// A Landlock ruleset like the policy's, except that the one private read-write directory
    /// is `private` instead of the shared per-call temporary root. Long-lived workers use it so
    /// that they cannot see each other's (or concurrent commands') temporary files. None when
    /// Landlock is not in force.
    pub fn private_ruleset(&self, private: &Path) -> Result<Option<OwnedFd>, ConfineError> {
        self.landlock_inputs
            .as_ref()
            .map(|inputs| inputs.build(private))
            .transpose()
    }

    /// The data the child applies; the fds it names must outlive the spawn.
    pub fn child_setup(&self, cwd_fd: Option<RawFd>, cgroup: Option<&CallCgroup>) -> ChildSetup {
        ChildSetup {
            cwd_fd,
            cgroup_procs_fds: cgroup
                .map(|c| c.procs_fds().iter().map(AsRawFd::as_raw_fd).collect())
                .unwrap_or_default(),
            rlimits: Arc::clone(&self.rlimits),
            drop_capabilities: self.drop_capabilities,
            landlock_ruleset_fd: self.landlock_fd.as_ref().map(AsRawFd::as_raw_fd),
            seccomp_programs: Arc::clone(&self.seccomp),
            readonly_binds: self.protected_binds(),
            pass_fds: Vec::new(),
            controlling_tty: false,
        }
    }

    /// Whether protected paths are read-only for confined commands on this host: in the
    /// sandbox init's view (root or not), or through per-child binds (root without it).
    pub fn protects_paths(&self) -> bool {
        (self.uses_sandbox_init() || self.drop_capabilities) && !self.protected.is_empty()
    }

    /// The protected paths that exist right now, as paths for the child's bind mounts.
    fn protected_binds(&self) -> Vec<std::ffi::CString> {
        if !self.drop_capabilities {
            return Vec::new();
        }
        crate::workspace::existing_protected(&self.workspace_dir, &self.protected)
            .into_iter()
            .filter(|e| e.kind != crate::workspace::EntryKind::Symlink)
            .filter_map(|e| {
                let path = self.workspace.join(e.path);
                std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()
            })
            .collect()
    }
}

/// The seccomp programs for the sandbox init when it gets its own network namespace and the
/// policy names a built-in profile: `private_netns`, which adds IPv4/IPv6 (TCP and UDP) and
/// NETLINK_ROUTE sockets to the kernel-surface rules every profile shares. In that namespace
/// only `lo` exists (and, under the proxy, the proxy's listener), so those sockets reach
/// nothing the call did not start itself. A profile file of the operator's own is used as
/// written; so is every profile where the host's namespace is shared (the per-child path).
fn private_netns_seccomp(
    plan: &ConfinePlan,
    policy_programs: &[BpfProgram],
    tracing: seccomp::Tracing,
) -> Result<Option<Vec<BpfProgram>>, ConfineError> {
    let builtin = seccomp::embedded_profile_names().contains(&plan.seccomp_profile.as_str());
    if !plan.isolate_network || !builtin || policy_programs.is_empty() {
        return Ok(None);
    }
    Ok(Some(seccomp::compile_profile(
        seccomp::PRIVATE_NETNS,
        tracing,
    )?))
}

/// The egress proxy of a proxy-mode policy, attached to the sandbox init's listener. Without
/// an init (no namespaces) there is no private loopback to put the proxy on: Landlock's TCP
/// rules name ports, not addresses, so "connect only to the proxy's port" would also allow
/// any remote host on that port. That path therefore gets no TCP at all, and says so.
fn egress_step(
    plan: &ConfinePlan,
    sandbox_init: Option<&sandbox_init::SandboxInit>,
    proxy: Option<crate::egress::Proxy>,
    mut landlock: Option<LandlockInputs>,
    notes: &mut Vec<String>,
) -> Result<(Option<Arc<crate::egress::Proxy>>, Option<LandlockInputs>), ConfineError> {
    let Some(rules) = &plan.proxy else {
        return Ok((None, landlock));
    };
    for c in &rules.credentials {
        if let crate::egress::secrets::SecretSource::File(path) = &c.source {
            let real = path.canonicalize().unwrap_or_else(|_| path.clone());
            if real.starts_with(&plan.workspace) {
                return Err(ConfineError::Egress(format!(
                    "credential `{}`: from_file {} is inside the workspace, which the sandbox \
                     reads; keep the secret outside it",
                    c.name,
                    path.display()
                )));
            }
        }
    }
    match sandbox_init {
        Some(sandbox_init) => {
            let proxy = proxy.ok_or_else(|| {
                ConfineError::Egress("the plan routes the network through the egress proxy, but none was started for it".into())
            })?;
            sandbox_init
                .attach_proxy(&proxy)
                .map_err(|e| ConfineError::Egress(e.to_string()))?;
            Ok((Some(Arc::new(proxy)), landlock))
        }
        None => {
            if let Some(inputs) = landlock.as_mut() {
                inputs.tcp_connect.clear();
            }
            notes.push(
                "network: the egress proxy needs the sandbox's own network namespace, which \
                 cannot be had here, so confined processes get no network at all (Landlock \
                 refuses every TCP connect: its rules name ports, not addresses, so a rule for \
                 the proxy's port would also let them reach any host on that port)"
                    .into(),
            );
            if !rules.credentials.is_empty() {
                notes.push(
                    "network: [[network.credentials]] are unused here (no proxy runs, so no \
                     request can carry them); their placeholders are not set either"
                        .into(),
                );
            }
            Ok((None, landlock))
        }
    }
}

/// What [`start_sandbox_init`] builds the sandbox init's view from.
struct SandboxInitInputs<'a> {
    plan: &'a ConfinePlan,
    options: &'a ConfineOptions,
    kernel: &'a KernelSupport,
    landlock: Option<&'a LandlockInputs>,
    seccomp: &'a [BpfProgram],
    calls_tmp: &'a Path,
    private_root: &'a Path,
    cgroup_mounts: Vec<sandbox_init::plan::CgroupMount>,
    workspace: &'a cap_std::fs::Dir,
}

/// Step 1: what the kernel's Landlock can enforce of the plan's grants; refuses below the
/// required ABI unless degraded mode is allowed (then a partial ruleset, said in `notes`).
fn landlock_step(
    plan: &ConfinePlan,
    options: &ConfineOptions,
    kernel: &KernelSupport,
    notes: &mut Vec<String>,
) -> Result<Option<LandlockInputs>, ConfineError> {
    if kernel.landlock_abi >= REQUIRED_LANDLOCK_ABI {
        return Ok(Some(LandlockInputs::new(plan, options, false)));
    }
    if !options.allow_degraded {
        return Err(ConfineError::Unenforceable {
            feature: "Landlock ABI 6 or newer",
            found: if kernel.landlock_abi == 0 {
                "Landlock is not enabled".into()
            } else {
                format!("ABI {}", kernel.landlock_abi)
            },
            fix: "Use Linux 6.12 or newer with `landlock` in the boot parameter `lsm=` \
                  (check /sys/kernel/security/lsm).",
        });
    }
    notes.push(format!(
        "Landlock ABI {} < {REQUIRED_LANDLOCK_ABI}: file/TCP rules only as far as this kernel supports",
        kernel.landlock_abi
    ));
    Ok((kernel.landlock_abi > 0).then(|| LandlockInputs::new(plan, options, true)))
}

/// Step 1b: whether a call's processes may trace each other. Only where Landlock is in force:
/// it is what keeps tracing inside the call's own domain (never its reaper, another call, the
/// sandbox init or the server); without it the seccomp profile keeps refusing `ptrace`.
fn tracing_step(
    plan: &ConfinePlan,
    landlock_in_force: bool,
    notes: &mut Vec<String>,
) -> seccomp::Tracing {
    match (plan.trace_own_call, landlock_in_force) {
        (true, true) => seccomp::Tracing::OwnCall,
        (true, false) => {
            notes.push(
                "ptrace refused in every call: without Landlock nothing would keep tracing \
                 inside the call's own processes (`[sandbox] ptrace = \"call\"` needs it)"
                    .into(),
            );
            seccomp::Tracing::Refused
        }
        (false, _) => seccomp::Tracing::Refused,
    }
}

/// Step 2: the plan's seccomp profile compiled to BPF; refuses without seccomp filtering
/// unless degraded mode is allowed (then none, said in `notes`).
fn seccomp_step(
    plan: &ConfinePlan,
    options: &ConfineOptions,
    kernel: &KernelSupport,
    tracing: seccomp::Tracing,
    notes: &mut Vec<String>,
) -> Result<Vec<BpfProgram>, ConfineError> {
    if kernel.seccomp_filter {
        return Ok(seccomp::compile_profile(&plan.seccomp_profile, tracing)?);
    }
    if !options.allow_degraded {
        return Err(ConfineError::Unenforceable {
            feature: "seccomp filtering",
            found: "CONFIG_SECCOMP_FILTER missing".into(),
            fix: "Use a kernel built with CONFIG_SECCOMP_FILTER=y.",
        });
    }
    notes.push("seccomp filters unavailable: no syscall filtering".into());
    Ok(Vec::new())
}

/// Step 3: the cgroups this host lets us use, with what their absence means in `notes`.
fn cgroups_step(kernel: &KernelSupport, notes: &mut Vec<String>) -> cgroup::Cgroups {
    let cgroups = cgroup::Cgroups::setup();
    if !cgroups.has_limits() && kernel.is_root {
        notes.push(
            "running as root without cgroup limits: there is no process limit at all (the \
             kernel ignores RLIMIT_NPROC for root); delegate a cgroup or run as a \
             dedicated user"
                .into(),
        );
    }
    if !cgroups.has_limits() {
        notes.push(
            "no cgroup limits: memory and pids are bounded by rlimits only, and a process \
             that leaves the process group (setsid) is only killed when the server ends"
                .into(),
        );
    }
    notes.extend(cgroups.notes.iter().cloned());
    cgroups
}

/// Step 6: the seccomp programs of the per-child path, where there is no sandbox init: no
/// network at all under a proxy plan, and host sockets and IPC refused (no namespaces to
/// hide them). With the init, `seccomp` as it is.
fn per_child_seccomp(
    plan: &ConfinePlan,
    kernel: &KernelSupport,
    (has_init, tracing): (bool, seccomp::Tracing),
    mut seccomp: Vec<BpfProgram>,
    notes: &mut Vec<String>,
) -> Result<Vec<BpfProgram>, ConfineError> {
    if has_init || seccomp.is_empty() {
        return Ok(seccomp);
    }
    if plan.proxy.is_some() {
        // No network at all on this path (see `egress_step`): no inet sockets, UDP included.
        seccomp = seccomp::compile_profile("default", tracing)?;
    }
    seccomp.extend(seccomp::fallback_programs(plan.fallback_unix_sockets)?);
    if !kernel.is_root && plan.names_protected_paths {
        notes.push(
            "protected paths are refused by the file tools only: without namespaces, \
             shell commands can still write them"
                .into(),
        );
    }
    Ok(seccomp)
}

/// Step 7: what is actually in force, from what each step above produced.
fn in_force(
    kernel: &KernelSupport,
    landlock_inputs: Option<&LandlockInputs>,
    seccomp: &[BpfProgram],
    cgroups: &cgroup::Cgroups,
    sandbox_init: Option<&sandbox_init::SandboxInit>,
    mut notes: Vec<String>,
) -> Enforcement {
    let landlock = match landlock_inputs {
        None => LandlockStatus::None,
        Some(inputs) if inputs.best_effort => LandlockStatus::Partial {
            abi: kernel.landlock_abi,
        },
        Some(_) => LandlockStatus::Full {
            abi: kernel.landlock_abi,
        },
    };
    let calls_uid = calls_uid(kernel, sandbox_init, &mut notes);
    let level = match (
        matches!(landlock, LandlockStatus::Full { .. }) && !seccomp.is_empty(),
        cgroups.has_limits() && sandbox_init.is_some(),
    ) {
        (true, true) => EnforcementLevel::Full,
        (true, false) => EnforcementLevel::Reduced,
        (false, _) => EnforcementLevel::Degraded,
    };
    Enforcement {
        level,
        landlock,
        seccomp: !seccomp.is_empty(),
        cgroups: cgroups.mode(),
        namespaces: sandbox_init.is_some(),
        network_namespace: sandbox_init.is_some_and(|f| f.namespaces().network),
        user_namespace: sandbox_init.is_some_and(|f| f.namespaces().user),
        calls_uid,
        capabilities_dropped: kernel.is_root || sandbox_init.is_some(),
        notes,
    }
}

/// The host uid confined processes run as, with a note where that is root although cordon
/// is (the per-child path, or a workspace filesystem that cannot be idmapped).
fn calls_uid(
    kernel: &KernelSupport,
    sandbox_init: Option<&sandbox_init::SandboxInit>,
    notes: &mut Vec<String>,
) -> u32 {
    if !kernel.is_root {
        return rustix::process::getuid().as_raw();
    }
    let namespaces = sandbox_init.map(sandbox_init::SandboxInit::namespaces);
    match namespaces.as_ref().and_then(|n| n.calls_uid) {
        Some(uid) => uid,
        None => {
            let why = namespaces
                .and_then(|n| n.calls_as_root)
                .unwrap_or_else(|| "there is no sandbox init to map them".into());
            notes.push(format!(
                "confined processes run as host uid 0 (without capabilities): {why}; they \
                 share root's per-user kernel limits"
            ));
            0
        }
    }
}

/// The program that runs the sandbox init: `cordon-init` beside this executable when it is
/// there and as trustworthy as this executable (a regular file with the same owner, writable
/// by nobody else), since everything that waits in the sandbox then maps only that small
/// binary; otherwise this executable itself (`cordon __sandbox-init`, the same code).
fn default_init_program() -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let me = std::env::current_exe().ok()?;
    let sibling = me.with_file_name(sandbox_init::init::INIT_PROGRAM);
    let trusted = match (std::fs::metadata(&me), std::fs::symlink_metadata(&sibling)) {
        (Ok(mine), Ok(theirs)) => {
            theirs.file_type().is_file()
                && theirs.uid() == mine.uid()
                && theirs.mode() & 0o022 == 0
                && theirs.mode() & 0o111 != 0
        }
        _ => false,
    };
    Some(if trusted { sibling } else { me })
}

/// Step 4: the sandbox init (namespaces, view, warm slots), or None with the reason in
/// `notes` where namespaces cannot be had.
fn start_sandbox_init(
    inputs: SandboxInitInputs<'_>,
    notes: &mut Vec<String>,
) -> Result<Option<sandbox_init::SandboxInit>, ConfineError> {
    let SandboxInitInputs {
        plan,
        options,
        kernel,
        landlock,
        seccomp,
        calls_tmp,
        private_root,
        cgroup_mounts,
        workspace: workspace_dir,
    } = inputs;
    let protected = plan.protected.as_slice();
    const WEAKER: &str = "confined processes then share the host's mount, PID and IPC \
        namespaces: seccomp refuses Unix sockets and System V IPC instead, /proc shows host \
        processes, and a process that leaves its process group outlives the call where there \
        are no cgroups";
    if kernel::simulated_missing("namespaces") {
        notes.push(format!("namespaces unavailable (simulated); {WEAKER}"));
        return Ok(None);
    }
    if !kernel.is_root && !kernel.user_namespaces {
        notes.push(format!(
            "namespaces unavailable: unprivileged user namespaces are disabled \
             (kernel.unprivileged_userns_clone, user.max_user_namespaces, or an AppArmor \
             restriction); {WEAKER}"
        ));
        return Ok(None);
    }
    let Some(program) = options.init_program.clone().or_else(default_init_program) else {
        notes.push(format!(
            "namespaces unavailable: cannot find the cordon binary; {WEAKER}"
        ));
        return Ok(None);
    };
    let workspace = plan.workspace.as_path();
    let mut read_exec = plan.read_exec.clone();
    read_exec.extend(options.extra_read_exec.iter().cloned());
    let view = sandbox_init::ViewInputs {
        landlock,
        workspace,
        read_only_workspace: plan.read_only_workspace,
        calls_tmp,
        private_root,
        protected,
        isolate_network: plan.isolate_network,
        proxy_port: plan.proxy.is_some().then_some(crate::egress::PROXY_PORT),
        ca_bundle: plan
            .proxy
            .as_ref()
            .filter(|rules| rules.intercepts_any())
            .map(|_| crate::egress::tls::sandbox_bundle()),
        seccomp,
        read_exec: &read_exec,
        read_write: &plan.read_write,
        devices: &plan.devices,
        is_root: kernel.is_root,
        calls_ids: call_ids::decide(kernel.is_root, plan.call_ids, workspace_dir),
        shm_bytes: plan.shm_bytes,
        cgroup_mounts,
        writable_shims: &plan.writable_shims,
    };
    for entry in crate::workspace::existing_protected(workspace_dir, protected) {
        if entry.kind == crate::workspace::EntryKind::Symlink {
            notes.push(format!(
                "protected path {} is a symbolic link: it cannot be made read-only for \
                 commands (the file tools still refuse it); replace it with the real file or \
                 directory",
                entry.path.display()
            ));
        }
    }
    let root = workspace_dir.try_clone().map_err(ConfineError::TempDir)?;
    match sandbox_init::SandboxInit::start(&view, program, root, options.one_shot) {
        Ok(f) => Ok(Some(f)),
        // The kernel could give namespaces but the workspace's content keeps the view from
        // being built (a protected path the mounts cannot take): that is the workspace's to
        // fix, never a silent drop to the weaker per-child path.
        Err(e) if !options.allow_degraded && workspace_view_failure(&e, workspace).is_some() => {
            Err(ConfineError::WorkspaceView {
                detail: workspace_view_failure(&e, workspace).unwrap_or_default(),
            })
        }
        Err(e) => {
            notes.push(format!("namespaces unavailable: {e}; {WEAKER}"));
            Ok(None)
        }
    }
}

/// The init's own words when it could not build the view because of a path in the workspace
/// (its `view` stage names the path it failed on); None for any other failure.
fn workspace_view_failure(e: &sandbox_init::SandboxInitError, workspace: &Path) -> Option<String> {
    match e {
        sandbox_init::SandboxInitError::Init { stage, error }
            if stage == "view"
                && error.contains(workspace.as_os_str().to_string_lossy().as_ref()) =>
        {
            Some(error.clone())
        }
        _ => None,
    }
}

#[cfg(test)]
mod workspace_view_tests {
    use super::*;

    #[test]
    fn only_a_view_failure_on_a_workspace_path_is_the_workspaces_to_fix() {
        let ws = Path::new("/w/project");
        let on = |stage: &str, error: &str| sandbox_init::SandboxInitError::Init {
            stage: stage.into(),
            error: error.into(),
        };
        let hooks = on(
            "view",
            "protect /w/project/.git/modules/x/hooks: File name too long (os error 36)",
        );
        assert!(
            workspace_view_failure(&hooks, ws).is_some_and(|d| d.contains(".git/modules/x/hooks"))
        );
        assert!(workspace_view_failure(&on("view", "mount /proc: EPERM"), ws).is_none());
        assert!(workspace_view_failure(&on("unshare", "/w/project: EPERM"), ws).is_none());
        let gone = sandbox_init::SandboxInitError::Gone;
        assert!(workspace_view_failure(&gone, ws).is_none());
    }
}
