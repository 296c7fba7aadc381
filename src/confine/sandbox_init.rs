//! The handle of one running sandbox init ([`SandboxInit`]): where confined processes come
//! from when namespaces can be had.
//!
//! Owns the pool of ready slots for calls (each already inside its own fresh per-call cgroups,
//! so neither the fork nor the cgroup migration — an RCU grace period, ~11 ms when calls are
//! spaced — is on a call's critical path; none for a one-shot `cordon exec`), the plan the
//! init was started with (to start its successor when the view is stale), the view's
//! signature and git checks (`workspace::GitGuard`), and the proxy listener it serves. It does
//! not run jobs (`exec::launch` does, through [`Slot::start`]) and knows nothing of policies
//! beyond what `Confinement::build` hands it.

use super::cgroup::{CallCgroup, CallLimits, Cgroups};
use super::landlock::TcpPorts;
use super::sandbox::plan::{InitPlan, LandlockPlan};
use super::sandbox::wire::SlotLayer;
use super::sandbox::{Namespaces, Sandbox, SandboxError, Slot};
use super::{ConfineError, LandlockInputs};
use crate::workspace::{GitGuard, GuardReport};
use seccompiler::BpfProgram;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

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
    sandbox: Sandbox,
    /// What the init was started with, to start a new one when the protected set changes.
    plan: InitPlan,
    program: PathBuf,
    /// The workspace root as a capability, for the next view's git checks.
    workspace: cap_std::fs::Dir,
    /// The protected patterns (globs, workspace-relative), expanded anew for every view.
    patterns: Vec<String>,
    /// The view's signature and the git checks after calls and on a timer (`workspace`).
    guard: Arc<GitGuard>,
}

/// How often the git checks run between calls, so that a long-lived process (an interpreter
/// session, a background job) planting something is seen within this much, not only when a
/// call ends.
const GUARD_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);

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
    pub calls_ids: Option<super::sandbox::plan::CallIds>,
    pub shm_bytes: u64,
    pub cgroup_mounts: Vec<super::sandbox::plan::CgroupMount>,
}

impl SandboxInit {
    /// Starts the init. `program` is the cordon binary (it runs `cordon __sandbox-init`).
    /// `one_shot`: keep no warm slots (one command, then the init goes).
    /// `workspace` is the workspace root as a capability (the git checks read through it).
    pub(crate) fn start(
        inputs: &ViewInputs<'_>,
        program: PathBuf,
        workspace: cap_std::fs::Dir,
        one_shot: bool,
    ) -> Result<Self, SandboxError> {
        let warm_target = if one_shot { 0 } else { WARM_SLOTS };
        let plan = plan(inputs);
        let patterns = inputs.protected.to_vec();
        Self::start_plan(plan, program, workspace, patterns, None, None)
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
        predecessor: Option<&GitGuard>,
        join_network: Option<Arc<std::os::fd::OwnedFd>>,
    ) -> Result<Self, SandboxError> {
        let root = workspace.try_clone().map_err(SandboxError::Start)?;
        let (guard, entries) = match predecessor {
            Some(before) => before.successor(root),
            None => GitGuard::new(root, &plan.workspace, &patterns),
        };
        plan.protected.clear();
        plan.pinned = vec![plan.workspace.join(".git")];
        for entry in &entries {
            let path = plan.workspace.join(&entry.path);
            // A bind follows a symbolic link, so a link is never bound itself: its target is,
            // when that lies in the workspace (`.git/hooks -> ../shared-hooks` makes the
            // shared hooks what git runs). A link to outside points at nothing in the view.
            let target = if entry.kind == crate::workspace::EntryKind::Symlink {
                match path.canonicalize() {
                    Ok(t) if t.starts_with(&plan.workspace) && t != plan.workspace => t,
                    _ => continue,
                }
            } else {
                path
            };
            // Every directory between the workspace root and the entry is pinned (a mount
            // point of itself): renaming one away and planting a replacement fails (EBUSY).
            let mut dir = target.parent();
            while let Some(d) =
                dir.filter(|d| d.starts_with(&plan.workspace) && *d != plan.workspace)
            {
                if !plan.pinned.iter().any(|p| p == d) {
                    plan.pinned.push(d.to_path_buf());
                }
                dir = d.parent();
            }
            if !plan.protected.contains(&target) {
                plan.protected.push(target);
            }
        }
        plan.pinned.sort_by_key(|p| p.components().count());
        let sandbox = Sandbox::start(plan.clone(), program.clone(), join_network)?;
        let guard = Arc::new(guard);
        watch_in_background(&guard, &plan.workspace);
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
            guard,
        })
    }

    /// Whether the view still matches the workspace: no protected entry (or `.git`)
    /// appeared, vanished or was replaced since it was built.
    pub fn is_current(&self) -> bool {
        self.guard.is_current()
    }

    /// What a call (or a long-lived process since the last call) may have left that git would
    /// run outside any sandbox: protected control files that were not there when the view was
    /// built, and every submodule of the current index whose configuration is not made of keys
    /// that run nothing. Moved to quarantine; the report says what and whether the call is to
    /// be refused. Runs at every call, whatever the call changed, plus on a timer.
    pub fn after_call(&self) -> GuardReport {
        self.guard.check()
    }

    /// Stops this view's timer checks: a newer view (with its own signature) replaced it.
    pub fn retire(&self) {
        self.guard.retire();
    }

    /// A new init with the same plan, whose view binds the protected entries as they are now.
    ///
    /// Where the server may (root, no user namespace), it joins this init's network namespace
    /// rather than making a new one: servers that background jobs started there stay
    /// reachable from the new init's calls, and the proxy's listener (handed over here) keeps
    /// serving both. Elsewhere entering the namespace needs a capability the server lacks, and
    /// the new init has a namespace of its own, as before.
    pub fn rebuilt(&self) -> Result<Self, SandboxError> {
        let mut plan = self.plan.clone();
        let join = self
            .sandbox
            .network_namespace()
            .filter(|_| plan.user_namespace.is_none() && rustix::process::geteuid().is_root());
        if join.is_some() {
            plan.join_network = true;
            plan.proxy_listener = None;
        }
        let fresh = Self::start_plan(
            plan,
            self.program.clone(),
            self.workspace.try_clone().map_err(SandboxError::Start)?,
            self.patterns.clone(),
            Some(&self.guard),
            join,
        )?
        .with_warm_target(self.warm_target);
        if fresh.plan.join_network
            && let (Ok(mut mine), Ok(mut theirs)) = (self.proxy.lock(), fresh.proxy.lock())
        {
            *theirs = mine.take();
        }
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
    let git = inputs.workspace.join(".git");
    InitPlan {
        version: 0,
        new_root: PathBuf::new(),
        read_only,
        read_write,
        workspace: inputs.workspace.to_path_buf(),
        pinned: vec![git],
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
    }
}

/// The background checks of one view, on a thread of their own that ends when the view is
/// retired or dropped: woken by an inotify watch of the git control directories (so a change
/// to `.git/config` is judged within milliseconds) and at least every [`GUARD_INTERVAL`]
/// (what inotify does not see: files deeper in `.git/modules`, a nested repository's config).
fn watch_in_background(guard: &Arc<GitGuard>, workspace: &Path) {
    let weak = Arc::downgrade(guard);
    let watch = git_watch(workspace);
    let spawned = std::thread::Builder::new()
        .name("cordon-git-guard".into())
        .spawn(move || {
            let mut pause = GUARD_INTERVAL;
            let mut last_cost = std::time::Duration::ZERO;
            loop {
                let woken = wait_for_git(watch.as_ref(), pause);
                // Never more than a fifth of the time checking, however busy `.git` is (a
                // workspace with tens of thousands of module directories makes a check long).
                std::thread::sleep(last_cost * 4);
                let Some(guard) = weak.upgrade() else { return };
                if guard.is_retired() {
                    return;
                }
                let started = std::time::Instant::now();
                guard.check_in_background();
                last_cost = started.elapsed();
                // After a change, look again soon: a finding is acted on when two checks
                // saw it unchanged.
                pause = if woken {
                    std::time::Duration::from_millis(50)
                } else {
                    GUARD_INTERVAL
                };
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the git guard's timer (checks run at every call only): {e}");
    }
}

/// An inotify instance watching `.git`, `.git/modules` and `.git/worktrees` (each without
/// following a symlink); None where inotify is unavailable (the timer still runs).
fn git_watch(workspace: &Path) -> Option<OwnedFd> {
    use rustix::fs::inotify;
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
    let flags = inotify::WatchFlags::CLOSE_WRITE
        | inotify::WatchFlags::MOVED_TO
        | inotify::WatchFlags::MOVED_FROM
        | inotify::WatchFlags::CREATE
        | inotify::WatchFlags::DELETE
        | inotify::WatchFlags::ATTRIB
        | inotify::WatchFlags::DONT_FOLLOW
        | inotify::WatchFlags::ONLYDIR;
    let mut watching = false;
    for dir in [".git", ".git/modules", ".git/worktrees"] {
        watching |= inotify::add_watch(&fd, workspace.join(dir), flags).is_ok();
    }
    watching.then_some(fd)
}

/// Waits for a change under the watch, or `timeout`; drains the events. True: woken by one.
fn wait_for_git(watch: Option<&OwnedFd>, timeout: std::time::Duration) -> bool {
    let Some(fd) = watch else {
        std::thread::sleep(timeout);
        return false;
    };
    let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
    let wait = rustix::time::Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    let ready = rustix::event::poll(&mut fds, Some(&wait)).unwrap_or(0) > 0;
    if ready {
        let mut buf = [0u8; 4096];
        while rustix::io::read(fd, &mut buf).is_ok_and(|n| n > 0) {}
    }
    ready
}
