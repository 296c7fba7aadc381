//! The handle of one running sandbox init ([`SandboxInit`]): where confined processes come
//! from when namespaces can be had.
//!
//! Owns the pool of ready slots for calls (each already inside its own fresh per-call cgroups,
//! so neither the fork nor the cgroup migration — an RCU grace period, ~11 ms when calls are
//! spaced — is on a call's critical path; none for a one-shot `cordon exec`), the plan the
//! init was started with (to start its successor when the view is stale), the view's
//! signature (`view_signature`), the confined runs of the git import (`crate::git`), and the
//! proxy listener it serves. It does
//! not run jobs (`exec::launch` does, through [`Slot::start`]) and knows nothing of policies
//! beyond what `Confinement::build` hands it.

use super::cgroup::{CallCgroup, CallLimits, Cgroups};
use super::landlock::TcpPorts;
use super::{ConfineError, LandlockInputs};
use crate::git::{ConfinedGit, GuardReport, Repositories};
use plan::GitShadowPlan;
use plan::{InitPlan, LandlockPlan};
use seccompiler::BpfProgram;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use wire::SlotLayer;

pub(crate) mod fdpass;
pub(crate) mod idmap;
pub(crate) mod init;
mod mount_attr;
pub(crate) mod plan;
mod process;
pub(crate) mod shims;
mod slot_mounts;
pub(crate) mod view;
pub(crate) mod wire;

pub(crate) use process::{
    InitProcess, Namespaces, SandboxChild, SandboxInitError, Slot, is_job_main,
};

/// Slots kept ready for calls: an agent's sequential calls plus a little overlap (a
/// back-to-back series ran dry with two); more would only hold memory and cgroup directories.
const WARM_SLOTS: usize = 3;

/// A ready slot with the cgroups it has joined and, for a call, its own directory (the
/// call's TMPDIR, granted to that slot alone; removed without recursion when dropped).
pub struct WarmSlot {
    pub slot: Slot,
    pub cgroup: Option<CallCgroup>,
    pub tmp: Option<super::scratch::RemovedOnDrop>,
}

pub struct SandboxInit {
    /// Declared first: ready slots (and their cgroups) go before the init and the parents.
    pool: Mutex<Vec<WarmSlot>>,
    /// How many slots the pool is topped up to: [`WARM_SLOTS`] for a server, none for a
    /// one-shot command (`cordon exec`), whose one call makes its slot when it runs.
    warm_target: usize,
    refilling: AtomicBool,
    /// The egress proxy's accept loop on this init's listener; stops when the init goes.
    proxy: Mutex<Option<crate::egress::proxy::ListenerGuard>>,
    sandbox: InitProcess,
    /// What the init was started with, to start a new one when the protected set changes.
    plan: InitPlan,
    program: PathBuf,
    /// The workspace root as a capability, for the next view's listing.
    workspace: cap_std::fs::Dir,
    /// The protected patterns (globs, workspace-relative), expanded anew for every view.
    patterns: Vec<String>,
    /// The shadow gitdirs of the workspace's repositories and their sync with the operator's
    /// (`git`), shared with the inits that replace this one. None: the workspace is
    /// read-only, or the root's shadow could not be made (then the operator's `.git` is
    /// bound read-only as a whole).
    git: Option<Arc<Repositories>>,
    /// What the view bound, to tell when it is out of date.
    signature: crate::git::bound::Signature,
    /// The generation of the shadows the view binds (`git::Repositories::generation`).
    git_generation: u64,
}

/// What the view is built from, gathered by `Confinement::build`.
pub(crate) struct ViewInputs<'a> {
    pub landlock: Option<&'a LandlockInputs>,
    pub workspace: &'a Path,
    pub read_only_workspace: bool,
    pub calls_tmp: &'a Path,
    pub private_root: &'a Path,
    /// Workspace-relative protected patterns (globs), expanded when the view is built.
    pub protected: &'a [String],
    pub isolate_network: bool,
    /// The egress proxy's port in the namespace (proxy-mode policies; needs
    /// `isolate_network`): PID 1 listens there (no Landlock port rules in that namespace).
    pub proxy_port: Option<u16>,
    /// The CA bundle the sandbox trusts, when the proxy intercepts hosts (see
    /// `egress::tls::sandbox_bundle`); the view binds it over the distribution's bundle.
    pub ca_bundle: Option<String>,
    pub seccomp: &'a [BpfProgram],
    pub read_exec: &'a [PathBuf],
    pub read_write: &'a [PathBuf],
    pub devices: &'a [PathBuf],
    pub is_root: bool,
    /// Where cordon is root: the host ids calls run as (`confine::call_ids`).
    pub calls_ids: Option<super::sandbox_init::plan::CallIds>,
    pub shm_bytes: u64,
    pub cgroup_mounts: Vec<super::sandbox_init::plan::CgroupMount>,
    pub writable_shims: &'a [PathBuf],
}

/// Directories as a list for a sentence.
fn shown(dirs: &std::collections::BTreeSet<PathBuf>) -> String {
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join("`, `")
}

/// Most seconds of CPU the confined export of one import may use.
const EXPORT_CPU_SECONDS: u64 = 120;
/// Wall-clock bound of the confined export.
const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

impl SandboxInit {
    /// Starts the init. `program` is the cordon binary (it runs `cordon __sandbox-init`).
    /// `one_shot`: keep no warm slots (one command, then the init goes).
    /// `workspace` is the workspace root as a capability (the view's listing reads through it).
    pub(crate) fn start(
        inputs: &ViewInputs<'_>,
        program: PathBuf,
        workspace: cap_std::fs::Dir,
        one_shot: bool,
    ) -> Result<Self, SandboxInitError> {
        let warm_target = if one_shot { 0 } else { WARM_SLOTS };
        let mut plan = plan(inputs);
        plan.shims_per_slot = one_shot;
        let patterns = inputs.protected.to_vec();
        let git = if inputs.read_only_workspace {
            None
        } else {
            let root = workspace.try_clone().map_err(SandboxInitError::Start)?;
            match Repositories::open(inputs.workspace, root, !one_shot) {
                Ok(g) => Some(Arc::new(g)),
                Err(e) => {
                    tracing::warn!(
                        "cannot make the workspace's shadow gitdir ({e}): the operator's .git \
                         is read-only to calls"
                    );
                    None
                }
            }
        };
        Self::start_plan(plan, program, workspace, patterns, git, None)
            .map(|f| f.with_warm_target(warm_target))
    }

    fn with_warm_target(mut self, warm_target: usize) -> Self {
        self.warm_target = warm_target;
        self
    }

    /// Whether the pool keeps slots ready (false for a one-shot command).
    pub fn keeps_warm_slots(&self) -> bool {
        self.warm_target > 0
    }

    fn start_plan(
        mut plan: InitPlan,
        program: PathBuf,
        workspace: cap_std::fs::Dir,
        patterns: Vec<String>,
        git: Option<Arc<Repositories>>,
        join_network: Option<Arc<std::os::fd::OwnedFd>>,
    ) -> Result<Self, SandboxInitError> {
        let no_gitfiles = Default::default();
        let gitfiles = git.as_ref().map_or(&no_gitfiles, |g| g.read_only());
        let (entries, signature) =
            crate::git::bound::take(&workspace, &patterns, git.is_some(), gitfiles);
        plan.protected.clear();
        plan.pinned.clear();
        for path in &entries {
            let path = plan.workspace.join(path);
            // Every directory between the workspace root and the entry is pinned (a mount
            // point of itself): renaming one away and planting a replacement fails (EBUSY).
            let mut dir = path.parent();
            while let Some(d) =
                dir.filter(|d| d.starts_with(&plan.workspace) && *d != plan.workspace)
            {
                if !plan.pinned.iter().any(|p| p == d) {
                    plan.pinned.push(d.to_path_buf());
                }
                dir = d.parent();
            }
            if !plan.protected.contains(&path) {
                plan.protected.push(path);
            }
        }
        plan.pinned.sort_by_key(|p| p.components().count());
        let shadow_plan =
            |l: &mut Option<plan::LandlockPlan>, rel: PathBuf, paths: crate::git::ShadowPaths| {
                if let Some(l) = l.as_mut()
                    && paths.operator.is_some()
                    && !l.read_only.contains(&paths.operator_at)
                {
                    l.read_only.push(paths.operator_at.clone());
                }
                GitShadowPlan {
                    rel,
                    shadow: paths.shadow,
                    at: paths.at,
                    operator: paths.operator,
                    operator_at: paths.operator_at,
                }
            };
        let git_generation = git.as_ref().map_or(0, |g| g.generation());
        plan.git_shadow = git
            .as_ref()
            .map(|g| shadow_plan(&mut plan.landlock, PathBuf::new(), g.root_paths()));
        plan.nested_git.clear();
        for (rel, paths) in git.as_ref().map(|g| g.nested_paths()).unwrap_or_default() {
            // Each directory down to the repository's is pinned, as for a gitlink's `.git`.
            let mut dir = Some(plan.workspace.join(&rel));
            while let Some(d) =
                dir.filter(|d| d.starts_with(&plan.workspace) && *d != plan.workspace)
            {
                if !plan.pinned.contains(&d) {
                    plan.pinned.push(d.clone());
                }
                dir = d.parent().map(Path::to_path_buf);
            }
            let nested = shadow_plan(&mut plan.landlock, rel, paths);
            plan.nested_git.push(nested);
        }
        plan.pinned.sort_by_key(|p| p.components().count());
        let sandbox = InitProcess::start(plan.clone(), program.clone(), join_network)?;
        Ok(Self {
            pool: Mutex::new(Vec::new()),
            warm_target: WARM_SLOTS,
            refilling: AtomicBool::new(false),
            proxy: Mutex::new(None),
            sandbox,
            plan,
            program,
            workspace,
            patterns,
            git,
            signature,
            git_generation,
        })
    }

    /// Whether the view still matches the workspace: no protected entry, gitlinked
    /// repository or the operator's `.git` appeared, vanished or was replaced since it was
    /// built.
    pub fn is_current(&self) -> bool {
        let no_gitfiles = Default::default();
        let gitfiles = self.git.as_ref().map_or(&no_gitfiles, |g| g.read_only());
        crate::git::bound::take(
            &self.workspace,
            &self.patterns,
            self.git.is_some(),
            gitfiles,
        )
        .1 == self.signature
            && self
                .git
                .as_ref()
                .is_none_or(|g| g.nested_dirs() == self.nested_in_view())
    }

    /// Counts a process about to run in this view as running until the hold drops (see
    /// `git::Repositories::hold`).
    pub(crate) fn hold(&self) -> Option<crate::git::ViewHold> {
        self.git.as_ref().map(|g| g.hold(self.git_generation))
    }

    /// The nested repositories whose shadows this view binds.
    fn nested_in_view(&self) -> std::collections::BTreeSet<PathBuf> {
        self.plan.nested_git.iter().map(|g| g.rel.clone()).collect()
    }

    /// Before a call: what the operator moved in their repository on the host goes into the
    /// shadow (see `git::GitShadow::before_call`).
    pub fn before_call(&self) -> GuardReport {
        self.git
            .as_ref()
            .map(|g| g.before_call())
            .unwrap_or_default()
    }

    /// After a call or job: the shadows' new commits, branches, tags, `HEAD` and index are
    /// imported into the operator's repositories, verified; anything that cannot be is refused
    /// and the report says so (see `git::GitShadow::after_call`). Then the repositories the
    /// call made below the root become shadows of their own (`git::Repositories`), imported
    /// at once through a view that binds them; a job of this view still running is ended at
    /// its next import (its view does not bind them).
    pub fn after_call(&self) -> GuardReport {
        let Some(git) = &self.git else {
            return GuardReport::default();
        };
        let mut report = git.after_call(self, &self.nested_in_view());
        let started = std::time::Instant::now();
        let found = git.discover();
        // What `benches/git_import.py` reads (CORDON_LOG=debug): the search's own cost.
        tracing::debug!(
            micros = started.elapsed().as_micros() as u64,
            "git repositories looked for after a call"
        );
        if found.is_empty() {
            return report;
        }
        report.extend(git.adopt(&found));
        // A short-lived init whose view binds the new shadows: the export runs there.
        match self.started_again(0) {
            Ok(fresh) => report.extend(git.after_call(&fresh, &fresh.nested_in_view())),
            Err(e) => report.extend(GuardReport::refused(format!(
                "cordon could not start a view for the git repositories this call made ({e}); \
                 they stay in the sandbox's shadow and are imported after the next call"
            ))),
        }
        report
    }

    /// While a job runs: the same import, and when it imports nothing because the shadow is
    /// still in a state whose import was refused (another job's or call's tick saw it first),
    /// that refusal again: every job running while a refused change stands ends, since which
    /// of them made it cannot be told (see `git::GitShadow::refusal_in_force`). A git
    /// repository made below the root while the job runs, or one another call made since this
    /// view was built, ends the job too: it could write what the operator's git reads there.
    pub fn import_for_job(&self) -> GuardReport {
        let Some(git) = &self.git else {
            return GuardReport::default();
        };
        let report = git.after_call(self, &self.nested_in_view());
        if report.refused {
            return report;
        }
        let found = git.discover();
        if !found.is_empty() {
            return GuardReport::refused(format!(
                "a git repository was made at `{}` while this job ran: cordon gives a \
                 repository made in the sandbox a shadow gitdir of its own only once nothing \
                 running can write it, so the job was ended (its end made the shadow). Make \
                 repositories with `shell_exec` (`git init`, `git clone`), then start the job",
                shown(&found)
            ));
        }
        let stale: std::collections::BTreeSet<PathBuf> = git
            .nested_dirs()
            .difference(&self.nested_in_view())
            .cloned()
            .collect();
        if !stale.is_empty() {
            return GuardReport::refused(format!(
                "the git repository at `{}` was given a shadow gitdir after this job started, \
                 and the job's view does not hold it (the job could write what the operator's \
                 git reads there): the job was ended; start it again",
                shown(&stale)
            ));
        }
        git.refusal_in_force().unwrap_or(report)
    }

    /// A newer view replaced this one (kept for the callers; the shadow is shared, nothing of
    /// this view's needs stopping).
    pub fn retire(&self) {}

    /// A new init with the same plan, whose view binds the protected entries as they are now.
    ///
    /// Where the server may (root, no user namespace), it joins this init's network namespace
    /// rather than making a new one: servers that background jobs started there stay
    /// reachable from the new init's calls, and the proxy's listener (handed over here) keeps
    /// serving both. Elsewhere entering the namespace needs a capability the server lacks, and
    /// the new init has a namespace of its own, as before.
    pub fn rebuilt(&self) -> Result<Self, SandboxInitError> {
        let fresh = self.started_again(self.warm_target)?;
        if fresh.plan.join_network
            && let (Ok(mut mine), Ok(mut theirs)) = (self.proxy.lock(), fresh.proxy.lock())
        {
            *theirs = mine.take();
        }
        Ok(fresh)
    }

    /// A new init with this one's plan and the view as it is now (see [`Self::rebuilt`]),
    /// keeping `warm_target` slots; the proxy's listener stays with this one.
    fn started_again(&self, warm_target: usize) -> Result<Self, SandboxInitError> {
        let mut plan = self.plan.clone();
        let join = self
            .sandbox
            .network_namespace()
            .filter(|_| plan.user_namespace.is_none() && rustix::process::geteuid().is_root());
        if join.is_some() {
            plan.join_network = true;
            plan.proxy_listener = None;
        }
        if let Some(git) = &self.git {
            // A repository the import made since: the shadow's alternate now points at it.
            if let Err(e) = git.refresh_alternates() {
                tracing::warn!("the shadow gitdir's alternate: {e}");
            }
        }
        let fresh = Self::start_plan(
            plan,
            self.program.clone(),
            self.workspace
                .try_clone()
                .map_err(SandboxInitError::Start)?,
            self.patterns.clone(),
            self.git.clone(),
            join,
        )?
        .with_warm_target(warm_target);
        Ok(fresh)
    }

    /// Whether this init's calls are served by the egress proxy already (a rebuilt init
    /// that joined its predecessor's network namespace took over its listener).
    pub fn has_proxy(&self) -> bool {
        self.proxy.lock().is_ok_and(|p| p.is_some())
    }

    pub fn namespaces(&self) -> Namespaces {
        self.sandbox.namespaces()
    }

    /// Hands the init's proxy listener to `proxy`, which serves it for as long as this init
    /// lives. An error when the init made none (its plan had no proxy port).
    pub fn attach_proxy(&self, proxy: &crate::egress::Proxy) -> std::io::Result<()> {
        let listener = self.sandbox.take_proxy_listener().ok_or_else(|| {
            std::io::Error::other("the sandbox init has no proxy listener to serve")
        })?;
        let guard = proxy.serve(listener)?;
        if let Ok(mut slot) = self.proxy.lock() {
            *slot = Some(guard);
        }
        Ok(())
    }

    pub fn is_alive(&self) -> bool {
        self.sandbox.is_alive()
    }

    /// The sandbox's private network namespace, when it has one (job forwarding).
    pub fn network_namespace(&self) -> Option<std::sync::Arc<std::os::fd::OwnedFd>> {
        self.sandbox.network_namespace()
    }

    /// A warm slot, if one is ready. Never blocks.
    pub fn pop_warm(&self) -> Option<WarmSlot> {
        self.pool.lock().ok().and_then(|mut p| p.pop())
    }

    /// A slot for a call made now (the pool was empty: a burst of concurrent calls). Blocking.
    pub fn make_call_slot(
        &self,
        cgroups: &Cgroups,
        limits: &CallLimits,
    ) -> Result<WarmSlot, ConfineError> {
        let tmp = self.call_tmp()?;
        let layer = SlotLayer::Calls(tmp.path().to_path_buf());
        let warm = self.make(cgroups, limits, layer)?;
        Ok(WarmSlot {
            tmp: Some(tmp),
            ..warm
        })
    }

    /// A new directory for one call slot, beneath the calls' temporary root.
    fn call_tmp(&self) -> Result<super::scratch::RemovedOnDrop, ConfineError> {
        tempfile::Builder::new()
            .prefix("call-")
            .tempdir_in(&self.plan.calls_tmp)
            .map(super::scratch::RemovedOnDrop::take)
            .map_err(ConfineError::TempDir)
    }

    /// A slot for a long-lived worker: its own cgroups and its private directory as the one
    /// extra Landlock grant. Blocking.
    pub fn make_worker_slot(
        &self,
        cgroups: &Cgroups,
        limits: &CallLimits,
        private_dir: &Path,
    ) -> Result<WarmSlot, ConfineError> {
        self.make(
            cgroups,
            limits,
            SlotLayer::Private(private_dir.to_path_buf()),
        )
    }

    fn make(
        &self,
        cgroups: &Cgroups,
        limits: &CallLimits,
        layer: SlotLayer,
    ) -> Result<WarmSlot, ConfineError> {
        let cgroup = cgroups.create_call_if_any(limits)?;
        let fds: &[OwnedFd] = cgroup.as_ref().map(CallCgroup::procs_fds).unwrap_or(&[]);
        let slot = self.sandbox.make_slot(layer, fds)?;
        Ok(WarmSlot {
            slot,
            cgroup,
            tmp: None,
        })
    }

    /// Tops the pool up to its target ([`WARM_SLOTS`], or none one-shot). Blocking; one refill at a time (a second caller
    /// returns at once). Every missing slot is asked for before any is waited for, so their
    /// forks and cgroup migrations overlap. Failures are logged: the next call then makes its
    /// own slot and reports the error if it persists.
    pub fn refill(&self, cgroups: &Cgroups, limits: &CallLimits) {
        if self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let target = self.warm_target;
        let missing = target.saturating_sub(self.pool.lock().map(|p| p.len()).unwrap_or(target));
        let mut asked = Vec::with_capacity(missing);
        for _ in 0..missing {
            let cgroup = match cgroups.create_call_if_any(limits) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("cannot prepare a warm slot's cgroup: {e}");
                    break;
                }
            };
            let tmp = match self.call_tmp() {
                Ok(t) => t,
                Err(e) => {
                    tracing::warn!("cannot prepare a warm slot's directory: {e}");
                    break;
                }
            };
            let fds: &[OwnedFd] = cgroup.as_ref().map(CallCgroup::procs_fds).unwrap_or(&[]);
            let layer = SlotLayer::Calls(tmp.path().to_path_buf());
            match self.sandbox.request_slot(layer, fds) {
                Ok(pending) => asked.push((pending, cgroup, tmp)),
                Err(e) => {
                    tracing::warn!("cannot ask for a warm slot: {e}");
                    break;
                }
            }
        }
        for (pending, cgroup, tmp) in asked {
            match pending.wait() {
                Ok(slot) => {
                    if let Ok(mut pool) = self.pool.lock() {
                        pool.push(WarmSlot {
                            slot,
                            cgroup,
                            tmp: Some(tmp),
                        });
                    }
                }
                Err(e) => tracing::warn!("cannot prepare a warm slot: {e}"),
            }
        }
        self.refilling.store(false, Ordering::Release);
    }
}

fn plan(inputs: &ViewInputs<'_>) -> InitPlan {
    let mut read_only: Vec<PathBuf> = inputs.read_exec.to_vec();
    let mut read_write: Vec<PathBuf> = inputs.read_write.to_vec();
    read_write.push(inputs.calls_tmp.to_path_buf());
    read_write.push(inputs.private_root.to_path_buf());
    if inputs.read_only_workspace {
        read_only.push(inputs.workspace.to_path_buf());
    } else {
        read_write.push(inputs.workspace.to_path_buf());
    }
    InitPlan {
        version: 0,
        new_root: PathBuf::new(),
        read_only,
        read_write,
        workspace: inputs.workspace.to_path_buf(),
        pinned: Vec::new(),
        protected: Vec::new(),
        devices: inputs.devices.to_vec(),
        isolate_network: inputs.isolate_network,
        proxy_listener: inputs.proxy_port,
        join_network: false,
        ca_bundle: inputs.ca_bundle.clone(),
        user_namespace: (!inputs.is_root).then(|| {
            (
                rustix::process::getuid().as_raw(),
                rustix::process::getgid().as_raw(),
            )
        }),
        calls_ids: inputs.calls_ids,
        hostname: "cordon".into(),
        loginuid: crate::confine::audit::confined_loginuid(),
        landlock: inputs.landlock.map(|l| LandlockPlan {
            read_exec: l.paths.read_exec.clone(),
            read_write: l.paths.read_write.clone(),
            read_only: l.paths.read_only.clone(),
            devices: l.paths.devices.clone(),
            deny: l.paths.deny.clone(),
            // In a namespace of its own only `lo` is there (and, under the proxy, the proxy's
            // listener): every port reaches only what the calls started, so no port rules.
            // Where the host's namespace is shared, the policy's ports.
            tcp_connect: if inputs.isolate_network {
                TcpPorts::Any
            } else {
                TcpPorts::Only(l.tcp_connect.clone())
            },
            tcp_bind: if inputs.isolate_network {
                TcpPorts::Any
            } else {
                TcpPorts::Only(l.tcp_bind.clone())
            },
            best_effort: l.best_effort,
            restrict_flags: crate::confine::audit::restrict_flags(),
        }),
        seccomp: inputs
            .seccomp
            .iter()
            .map(|p| p.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect())
            .collect(),
        drop_capabilities: true,
        shm_bytes: inputs.shm_bytes,
        cgroup_mounts: inputs.cgroup_mounts.clone(),
        calls_tmp: inputs.calls_tmp.to_path_buf(),
        private_root: inputs.private_root.to_path_buf(),
        writable_shims: inputs.writable_shims.to_vec(),
        shims_per_slot: false,
        git_shadow: None,
        nested_git: Vec::new(),
    }
}

impl ConfinedGit for SandboxInit {
    /// A slot of this init (no cgroups: the export is bounded by its CPU rlimit and a wall
    /// clock), running `/bin/sh -c script` in the workspace root with git's configuration
    /// search kept to the shadow's own (the process is confined like any call: whatever the
    /// shadow's config makes git run stays in the sandbox).
    fn run_confined(
        &self,
        cwd: &Path,
        script: &str,
        input: &[u8],
        stdout: OwnedFd,
        side: OwnedFd,
    ) -> Result<i32, String> {
        use super::sandbox_init::wire::{Arg, Exec, Program};
        use std::io::{Seek, Write};
        let tmp = self.call_tmp().map_err(|e| e.to_string())?;
        let slot = self
            .sandbox
            .make_slot(SlotLayer::Calls(tmp.path().to_path_buf()), &[])
            .map_err(|e| e.to_string())?;
        let mut stdin = tempfile::tempfile().map_err(|e| e.to_string())?;
        stdin.write_all(input).map_err(|e| e.to_string())?;
        stdin.rewind().map_err(|e| e.to_string())?;
        let stderr = tempfile::tempfile().map_err(|e| e.to_string())?;
        let err_copy = stderr.try_clone().map_err(|e| e.to_string())?;
        let text = |s: &str| Arg::Text(s.to_owned());
        // The directory goes as a variable of bytes, not as the slot's working directory (a
        // path on the wire is text): a repository may be in a directory whose name is not
        // UTF-8.
        let mut dir = b"CORDON_EXPORT_DIR=".to_vec();
        {
            use std::os::unix::ffi::OsStrExt;
            dir.extend_from_slice(cwd.as_os_str().as_bytes());
        }
        let script = format!("cd \"./$CORDON_EXPORT_DIR\" || exit 4; {script}");
        let job = Exec {
            program: Program {
                argv: vec![text("/bin/sh"), text("-c"), text(&script)],
                env: vec![
                    text("PATH=/usr/local/bin:/usr/bin:/bin"),
                    text("HOME=/nonexistent"),
                    text("LC_ALL=C"),
                    text("GIT_CONFIG_NOSYSTEM=1"),
                    text("GIT_CONFIG_GLOBAL=/dev/null"),
                    text("GIT_TERMINAL_PROMPT=0"),
                    Arg::from_bytes(&dir),
                ],
                cwd: PathBuf::new(),
                pty: None,
            },
            fds: vec![0, 1, 2, 3],
            rlimits: vec![(libc::RLIMIT_CPU as i32, EXPORT_CPU_SECONDS)],
        };
        let fds = vec![OwnedFd::from(stdin), stdout, OwnedFd::from(stderr), side];
        let mut child = slot.start(job, fds).map_err(|e| e.to_string())?;
        let status = match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle
                .block_on(tokio::time::timeout(EXPORT_TIMEOUT, child.wait()))
                .ok(),
            Err(_) => {
                let deadline = std::time::Instant::now() + EXPORT_TIMEOUT;
                loop {
                    if let Some(s) = child.try_wait() {
                        break Some(s);
                    }
                    if std::time::Instant::now() > deadline {
                        break None;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        };
        // Dropping the child kills whatever is left of it (a timeout).
        drop(child);
        drop(tmp);
        let Some(status) = status else {
            return Err(format!("it did not finish in {EXPORT_TIMEOUT:?}"));
        };
        use std::os::unix::process::ExitStatusExt;
        match status.code() {
            Some(0) => Ok(0),
            Some(code) => {
                let mut said = String::new();
                let mut err = err_copy;
                let _ = err.rewind();
                let _ = std::io::Read::read_to_string(
                    &mut std::io::Read::take(&mut err, 400),
                    &mut said,
                );
                tracing::info!("the confined git export exited {code}: {}", said.trim());
                Ok(code)
            }
            None => Err(format!(
                "it was killed by signal {}",
                status.signal().unwrap_or(0)
            )),
        }
    }
}
