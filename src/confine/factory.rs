//! Where confined processes come from when namespaces can be had: the sandbox init and its
//! warm slots.
//!
//! Owns the pool of ready slots for calls (each already inside its own fresh per-call cgroups,
//! so neither the fork nor the cgroup migration — an RCU grace period, ~11 ms when calls are
//! spaced — is on a call's critical path) and the plan the init is started with. It does not
//! run jobs (`exec` does, through [`Slot::start`]) and knows nothing of policies beyond what
//! `Confinement::build` hands it.

use super::cgroup::{CallCgroup, CallLimits, Cgroups};
use super::landlock::TcpPorts;
use super::sandbox::plan::{InitPlan, LandlockPlan};
use super::sandbox::wire::SlotLayer;
use super::sandbox::{Namespaces, Sandbox, SandboxError, Slot};
use super::{ConfineError, LandlockInputs};
use seccompiler::BpfProgram;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

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

pub struct Factory {
    /// Declared first: ready slots (and their cgroups) go before the init and the parents.
    pool: Mutex<Vec<WarmSlot>>,
    refilling: AtomicBool,
    /// The egress proxy's accept loop on this init's listener; stops when the init goes.
    proxy: Mutex<Option<crate::egress::proxy::ListenerGuard>>,
    sandbox: Sandbox,
    /// What the init was started with, to start a new one when the protected set changes.
    plan: InitPlan,
    program: PathBuf,
    /// The protected patterns (globs, workspace-relative), expanded anew for every view.
    patterns: Vec<String>,
    /// Identity of every pinned and protected entry when the view was built.
    signature: Signature,
}

/// (workspace-relative path, device, inode, is a symlink) of every existing pinned or
/// protected entry: the view binds what existed when it was built, so any change (an entry
/// appeared, vanished or was replaced) means the view is out of date.
type Signature = Vec<(PathBuf, u64, u64, bool)>;

/// The protected entries that exist now, and their signature. Walks the workspace beneath
/// its root without following symlinks (a few `lstat`/`readdir` calls).
fn protected_now(
    workspace: &Path,
    patterns: &[String],
) -> (Vec<crate::workspace::ProtectedEntry>, Signature) {
    use std::os::unix::fs::MetadataExt;
    let Ok(root) = cap_std::fs::Dir::open_ambient_dir(workspace, cap_std::ambient_authority())
    else {
        return (Vec::new(), Vec::new());
    };
    let entries = crate::workspace::existing_protected(&root, patterns);
    let mut signature: Signature = entries
        .iter()
        .chain(std::iter::once(&crate::workspace::ProtectedEntry {
            path: PathBuf::from(".git"),
            kind: crate::workspace::EntryKind::Directory,
            pattern: String::new(),
        }))
        .filter_map(|e| {
            let m = workspace.join(&e.path).symlink_metadata().ok()?;
            Some((e.path.clone(), m.dev(), m.ino(), m.file_type().is_symlink()))
        })
        .collect();
    signature.sort();
    signature.dedup();
    (entries, signature)
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
    pub seccomp: &'a [BpfProgram],
    pub read_exec: &'a [PathBuf],
    pub read_write: &'a [PathBuf],
    pub devices: &'a [PathBuf],
    pub is_root: bool,
    pub shm_bytes: u64,
    pub cgroup_mounts: Vec<super::sandbox::plan::CgroupMount>,
}

impl Factory {
    /// Starts the init. `program` is the cordon binary (it runs `cordon __sandbox-init`).
    pub(crate) fn start(inputs: &ViewInputs<'_>, program: PathBuf) -> Result<Self, SandboxError> {
        Self::start_plan(plan(inputs), program, inputs.protected.to_vec())
    }

    fn start_plan(
        mut plan: InitPlan,
        program: PathBuf,
        patterns: Vec<String>,
    ) -> Result<Self, SandboxError> {
        let (entries, signature) = protected_now(&plan.workspace, &patterns);
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
        let sandbox = Sandbox::start(plan.clone(), program.clone())?;
        Ok(Self {
            pool: Mutex::new(Vec::new()),
            refilling: AtomicBool::new(false),
            proxy: Mutex::new(None),
            sandbox,
            plan,
            program,
            patterns,
            signature,
        })
    }

    /// Whether the view still matches the workspace: no protected entry (or `.git`)
    /// appeared, vanished or was replaced since it was built.
    pub fn is_current(&self) -> bool {
        protected_now(&self.plan.workspace, &self.patterns).1 == self.signature
    }

    /// Moves protected entries that did not exist when the view was built, in a repository
    /// that did (the operator's), and that changed since `since` (the call's start), to
    /// `.cordon/quarantine/`: a confined command could create them — the view cannot bind
    /// a path that does not exist — and git would read them outside any sandbox. Returns
    /// what it did, in words for the call's result. In a repository the call created itself
    /// nothing is moved (it is the agent's own), but the result says so.
    /// What a call may have left that git would run outside any sandbox, dealt with after
    /// the call's tree is dead: protected control files it created or replaced, and a
    /// submodule it planted through the index. A few `lstat` calls when nothing changed.
    pub fn after_call(&self, since: std::time::SystemTime) -> Vec<String> {
        let index_changed = changed_since(&self.plan.workspace.join(".git/index"), since);
        if !index_changed && self.is_current() {
            return Vec::new();
        }
        self.quarantine_created_since(since)
    }

    pub fn quarantine_created_since(&self, since: std::time::SystemTime) -> Vec<String> {
        use std::os::unix::fs::MetadataExt;
        let (entries, _) = protected_now(&self.plan.workspace, &self.patterns);
        let known: std::collections::HashMap<&Path, (u64, u64, bool)> = self
            .signature
            .iter()
            .map(|(p, dev, ino, link)| (p.as_path(), (*dev, *ino, *link)))
            .collect();
        let repo_existed = known.contains_key(Path::new(".git"));
        let Ok(root) =
            cap_std::fs::Dir::open_ambient_dir(&self.plan.workspace, cap_std::ambient_authority())
        else {
            return Vec::new();
        };
        let mut notices = Vec::new();
        // New entries, and entries replaced by something else (a symlinked `.git/hooks`
        // removed and made a directory): what the view could not hold read-only.
        let replaced_or_new = |e: &&crate::workspace::ProtectedEntry| {
            let now = self
                .plan
                .workspace
                .join(&e.path)
                .symlink_metadata()
                .ok()
                .map(|m| (m.dev(), m.ino(), m.file_type().is_symlink()));
            known.get(e.path.as_path()).copied() != now
        };
        for entry in entries.iter().filter(replaced_or_new) {
            let changed = changed_since(&self.plan.workspace.join(&entry.path), since);
            // `.cordon` is the server's own; the policy's files are the operator's to edit.
            if !changed || !entry.path.starts_with(".git") || entry.path == Path::new(".git") {
                continue;
            }
            if !repo_existed {
                notices.push(format!(
                    "this call created {} in a new git repository: it was written by a confined \
                     process, so inspect it before running git there outside cordon",
                    entry.path.display()
                ));
                continue;
            }
            notices.push(match quarantine(&root, &entry.path) {
                Ok(dest) => format!(
                    "the command created {}, a protected git control file (git reads it as \
                     configuration outside any sandbox); cordon moved it to {}",
                    entry.path.display(),
                    dest.display()
                ),
                Err(e) => format!(
                    "the command created {}, a protected git control file, and cordon could \
                     not move it away ({e}): remove it before running git here",
                    entry.path.display()
                ),
            });
        }
        if repo_existed {
            notices.extend(quarantine_planted_submodules(
                &root,
                &self.plan.workspace,
                since,
            ));
        }
        notices
    }

    /// A new init with the same plan, whose view binds the protected entries as they are now.
    pub fn rebuilt(&self) -> Result<Self, SandboxError> {
        Self::start_plan(
            self.plan.clone(),
            self.program.clone(),
            self.patterns.clone(),
        )
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
        let cgroup = if matches!(cgroups.mode(), super::CgroupMode::None) {
            None
        } else {
            Some(cgroups.create_call(limits)?)
        };
        let fds: &[OwnedFd] = cgroup.as_ref().map(CallCgroup::procs_fds).unwrap_or(&[]);
        let slot = self.sandbox.make_slot(layer, fds)?;
        Ok(WarmSlot {
            slot,
            cgroup,
            tmp: None,
        })
    }

    /// Tops the pool up to [`WARM_SLOTS`]. Blocking; one refill at a time (a second caller
    /// returns at once). Every missing slot is asked for before any is waited for, so their
    /// forks and cgroup migrations overlap. Failures are logged: the next call then makes its
    /// own slot and reports the error if it persists.
    pub fn refill(&self, cgroups: &Cgroups, limits: &CallLimits) {
        if self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let missing =
            WARM_SLOTS.saturating_sub(self.pool.lock().map(|p| p.len()).unwrap_or(WARM_SLOTS));
        let mut asked = Vec::with_capacity(missing);
        for _ in 0..missing {
            let cgroup = if matches!(cgroups.mode(), super::CgroupMode::None) {
                None
            } else {
                match cgroups.create_call(limits) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::warn!("cannot prepare a warm slot's cgroup: {e}");
                        break;
                    }
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
        user_namespace: (!inputs.is_root).then(|| {
            (
                rustix::process::getuid().as_raw(),
                rustix::process::getgid().as_raw(),
            )
        }),
        hostname: "cordon".into(),
        landlock: inputs.landlock.map(|l| LandlockPlan {
            read_exec: l.read_exec.clone(),
            read_write: l.read_write.clone(),
            read_only: l.read_only.clone(),
            devices: l.devices.clone(),
            deny: l.deny.clone(),
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
            calls_tmp: inputs.calls_tmp.to_path_buf(),
            private_root: inputs.private_root.to_path_buf(),
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

/// Reads a file a confined process may have written: beneath `root`, no symlink followed,
/// non-blocking, a regular file by `fstat`, at most `limit` bytes.
fn read_hostile(root: &cap_std::fs::Dir, path: &Path, limit: usize) -> Option<Vec<u8>> {
    use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
    use cap_std::fs::OpenOptionsExt;
    use std::io::Read;
    let mut options = cap_std::fs::OpenOptions::new();
    options
        .read(true)
        .follow(FollowSymlinks::No)
        .custom_flags(libc::O_NONBLOCK);
    let file = root.open_with(path, &options).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() as usize > limit {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(limit as u64).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// After a call that changed the operator's index: a gitlink whose nested repository's
/// config names a command (`core.fsmonitor`, hooks elsewhere, …) would make the operator's
/// `git status` run it. That config goes to quarantine.
fn quarantine_planted_submodules(
    root: &cap_std::fs::Dir,
    workspace: &Path,
    since: std::time::SystemTime,
) -> Vec<String> {
    if !changed_since(&workspace.join(".git/index"), since) {
        return Vec::new();
    }
    let Some(index) = read_hostile(
        root,
        Path::new(".git/index"),
        crate::workspace::gitlinks::MAX_INDEX_BYTES,
    ) else {
        return Vec::new();
    };
    let mut notices = Vec::new();
    for link in crate::workspace::gitlinks::gitlinks(&index).unwrap_or_default() {
        let Some(config) = submodule_config(root, workspace, &link) else {
            continue;
        };
        let Some(text) = read_hostile(root, &config, 1 << 20) else {
            continue;
        };
        if !crate::workspace::gitlinks::runs_commands(&String::from_utf8_lossy(&text)) {
            continue;
        }
        notices.push(match quarantine(root, &config) {
            Ok(dest) => format!(
                "the index now records {} as a submodule whose config names a command git \
                 would run (e.g. core.fsmonitor) on the operator's next `git status`; cordon \
                 moved {} to {}",
                link.display(),
                config.display(),
                dest.display()
            ),
            Err(e) => format!(
                "the index records {} as a submodule whose config names a command git would \
                 run, and cordon could not move {} away ({e}): remove it before running git here",
                link.display(),
                config.display()
            ),
        });
    }
    notices
}

/// Moves `path` (workspace-relative) into `.cordon/quarantine/`, beneath the workspace
/// capability (a swapped directory on the way cannot send it elsewhere), and returns where.
fn quarantine(root: &cap_std::fs::Dir, path: &Path) -> std::io::Result<PathBuf> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let flat = path.to_string_lossy().replace('/', "_");
    let dest = PathBuf::from(".cordon/quarantine").join(format!("{stamp}-{flat}"));
    root.create_dir_all(".cordon/quarantine")?;
    root.rename(path, root, &dest)?;
    Ok(dest)
}

/// Whether the inode at `path` changed at or after `since` (less a second of clock slack).
/// By ctime, not mtime: a confined process can set a file's mtime back (`touch -d`) to look
/// old, but never its ctime.
fn changed_since(path: &Path, since: std::time::SystemTime) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = path.symlink_metadata() else {
        return false;
    };
    let ctime = std::time::UNIX_EPOCH
        + std::time::Duration::new(
            meta.ctime().max(0) as u64,
            meta.ctime_nsec().clamp(0, 999_999_999) as u32,
        );
    ctime >= since - std::time::Duration::from_secs(1)
}

/// The config git reads for the submodule at `link` (workspace-relative): `link/.git/config`,
/// or, when `link/.git` is a gitfile (`gitdir: …`), the config of the directory it names,
/// inside the workspace. None when there is none to check there.
fn submodule_config(root: &cap_std::fs::Dir, workspace: &Path, link: &Path) -> Option<PathBuf> {
    let dot_git = link.join(".git");
    if root.symlink_metadata(&dot_git).ok()?.is_dir() {
        return Some(dot_git.join("config"));
    }
    let text = read_hostile(root, &dot_git, 4096)?;
    let target = String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix("gitdir:"))
        .map(|t| PathBuf::from(t.trim()))?;
    // A relative gitdir is relative to the submodule; an absolute one counts only inside the
    // workspace (the capability refuses anything that climbs out either way).
    let gitdir = if target.is_absolute() {
        target.strip_prefix(workspace).ok()?.to_path_buf()
    } else {
        link.join(target)
    };
    Some(gitdir.join("config"))
}
