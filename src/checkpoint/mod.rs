//! Workspace checkpoints: what every changing call did to the workspace can be taken back
//! exactly (issue 35; the `checkpoint` tool of SPEC.md and `cordon checkpoints`).
//!
//! Owns: recording the workspace around calls and restoring it. The record of a workspace is
//! a chain of states: state N is the tree as a scan saw it, and checkpoint `cp-N` holds the
//! changes from state N to state N+1, each path's entry before and after, so that the tree of
//! any kept state is the newest tree with the `before` entries of every later checkpoint put
//! back. A call records at its start what changed since the previous record (the operator, a
//! job, another client: a checkpoint of its own, tool `outside`), and at its end what changed
//! during it; its result's `checkpoint` is the state it started from, or null when the
//! workspace did not change during it. A restore records first, puts the tree back, and
//! records again, so it is itself a checkpoint and can be undone.
//!
//! The store is cordon's, in its state directory (`store`); it is locked across processes,
//! so the server and the operator's CLI may record and restore the same workspace. Coverage
//! follows git (`coverage`): ignored paths are not recorded unless `[checkpoints] include`
//! names them, and `.git` never is (git's history is git's; cordon's git import owns it).
//!
//! Does not own: when a call records (the tools), nor which jobs must stop before a restore
//! (the `checkpoint` tool asks the session).

pub(crate) mod coverage;
pub(crate) mod entry;
pub(crate) mod restore;
pub(crate) mod scan;
pub(crate) mod store;

use entry::{Change, Kind, Manifest};
use serde::Serialize;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use store::{Bounds, Budget, Locked, Record, State, Store};

/// What can go wrong recording or restoring.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("the checkpoint store at {0} failed: {1}")]
    Store(PathBuf, #[source] std::io::Error),
    #[error(
        "the checkpoint store file {0} is damaged ({1}); remove the store directory to start afresh"
    )]
    Corrupt(PathBuf, String),
    #[error("reading the workspace for a checkpoint failed: {0}")]
    Workspace(#[source] std::io::Error),
    #[error("`{0}` is not a checkpoint id: ids look like `cp-12`; list them with action `list`")]
    BadId(String),
    #[error("there is no checkpoint `{0}` (kept: {1}); list them with action `list`")]
    Unknown(String, String),
    #[error("checkpoint `{from}` is newer than `{to}`; give the older one as `id`")]
    Reversed { from: String, to: String },
}

impl CheckpointError {
    /// Whether the caller gave something wrong (an id), rather than the store failing.
    pub fn is_invalid_argument(&self) -> bool {
        matches!(
            self,
            Self::BadId(_) | Self::Unknown(..) | Self::Reversed { .. }
        )
    }
}

/// The `[checkpoints]` settings a store works with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub bounds: Bounds,
    pub max_file_bytes: u64,
    pub include: Vec<String>,
}

/// What a recording is about: the call that made the changes.
#[derive(Debug, Clone)]
pub struct CallInfo {
    pub call: Option<String>,
    pub tool: String,
    pub summary: String,
}

impl CallInfo {
    /// Changes found at a call's start: made since the previous record by someone else.
    fn outside() -> Self {
        Self {
            call: None,
            tool: "outside".into(),
            summary: "changes made between calls (the operator, a job, another client)".into(),
        }
    }
}

/// The id of the checkpoint that restores state `seq`.
pub(crate) fn id_of(seq: u64) -> String {
    format!("cp-{seq}")
}

/// The state an id names.
pub(crate) fn parse_id(id: &str) -> Result<u64, CheckpointError> {
    id.strip_prefix("cp-")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| CheckpointError::BadId(crate::text::shortened(id, 60).into_owned()))
}

/// One path a checkpoint or a restore changed, as results show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct FileChange {
    pub path: String,
    /// `created`, `modified`, `deleted`, `mode` or `symlink`.
    pub change: String,
    /// Why the path is not (or was not) covered, when it is not: a socket, a file over
    /// `max_file_bytes`, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_covered: Option<String>,
}

impl FileChange {
    fn of(change: &Change) -> Self {
        let not_covered = [&change.after, &change.before]
            .into_iter()
            .flatten()
            .find_map(|e| match &e.kind {
                Kind::Uncovered { what, .. } => Some(what.clone()),
                _ => None,
            });
        Self {
            path: change.path.clone(),
            change: change.label().to_owned(),
            not_covered,
        }
    }
}

/// One checkpoint as `list` shows it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Listed {
    pub id: String,
    pub call: Option<String>,
    pub tool: String,
    pub summary: String,
    pub files_changed: u64,
    pub created_at: String,
    pub bytes: u64,
    /// Paths it changed that it could not record (FIFOs are recorded; sockets, devices and
    /// files over `max_file_bytes` are not), with why.
    pub not_covered: Vec<FileChange>,
}

/// A paths-and-changes view of a checkpoint or range, with the text diff.
pub struct Diffed {
    pub files: Vec<FileChange>,
    pub text: String,
}

/// A finished restore.
pub struct Restored {
    /// What the restore changed.
    pub files: Vec<FileChange>,
    /// The checkpoint that undoes this restore (null when the workspace already was as asked).
    pub checkpoint: Option<String>,
    /// Paths it could not put back, with why.
    pub skipped: Vec<(String, String)>,
}

/// The checkpoints of one workspace.
pub struct Checkpoints {
    store: Store,
    /// The workspace root, opened by the caller (the only ambient-authority open is theirs).
    root: OwnedFd,
    settings: Settings,
    coverage: coverage::Coverage,
    /// The newest tree as this process last read or wrote it, with its state number: read
    /// from disk again only when another process recorded since.
    cache: Mutex<Option<(u64, Manifest)>>,
    /// Where the kernel says what changed (fanotify): a recording with nothing new under the
    /// workspace since the previous one skips the walk. None: every recording walks.
    watch: Option<Watch>,
    /// Walks of the tree so far (what the fast path saves is visible in tests).
    walks: std::sync::atomic::AtomicU64,
    /// Of those, the walks of only the directories the kernel named.
    partial_walks: std::sync::atomic::AtomicU64,
    /// A walk found a file system mounted inside the workspace, which the watch of the root's
    /// file system cannot see: every recording walks from then on.
    watch_blind: std::sync::atomic::AtomicBool,
}

/// The fast path: a fanotify group on the workspace's file system, and the workspace's
/// canonical path to tell its directories from the rest of the file system's.
struct Watch {
    events: crate::confine::fanotify::DirWatch,
    root: PathBuf,
    /// What drains found that no walk has covered yet: kept across drains, since the events
    /// themselves are gone once read.
    pending: Mutex<Pending>,
}

/// What the kernel reported under the workspace since the last walk began.
#[derive(Debug, Default)]
struct Pending {
    /// Anything may have changed (events lost or unreadable, a directory that cannot be told,
    /// an ignore file changed, which moves coverage beneath it): the next recording walks the
    /// whole tree.
    everything: bool,
    /// The workspace-relative directories (`""`: the root) in which an entry was created,
    /// deleted, renamed, written or changed its attributes, each with the names of those
    /// entries (a subdirectory named there may be another directory than before, even under
    /// the same inode number, which the file system reuses).
    dirs: Dirs,
}

/// Directories that changed, with the names of the entries that changed in them.
pub(crate) type Dirs = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;

impl Pending {
    fn is_empty(&self) -> bool {
        !self.everything && self.dirs.is_empty()
    }
}

/// How the next recording reads the tree.
enum Plan {
    /// Nothing changed since the record this process holds: no walk.
    Quiet,
    /// Only these directories changed (see [`Pending::dirs`]): read them, and walk whole
    /// only the directories that are new there.
    Dirs(Dirs),
    /// Walk the whole tree.
    Everything,
}

/// The first component of a workspace-relative path.
fn first_component(rel: &str) -> &str {
    rel.split('/').next().unwrap_or_default()
}

impl Watch {
    /// Drains the queue into [`Watch::pending`]; whether anything under the workspace may
    /// have changed since the last walk began.
    fn poll(&self) -> bool {
        let Ok(mut pending) = self.pending.lock() else {
            return true;
        };
        self.drain_into(&mut pending);
        !pending.is_empty()
    }

    /// Takes what is pending (a walk follows and covers it; what happens during the walk is
    /// drained next time).
    fn take(&self) -> Pending {
        match self.pending.lock() {
            Ok(mut pending) => {
                self.drain_into(&mut pending);
                std::mem::take(&mut *pending)
            }
            Err(_) => Pending {
                everything: true,
                dirs: Default::default(),
            },
        }
    }

    /// Adds what the queue holds to `pending`: each event's directory, when it lies in the
    /// workspace (cordon's own `.cordon`, `.cordon-home` and `.git` aside), or `everything`
    /// for a lost or unreadable event and a directory that cannot be told.
    fn drain_into(&self, pending: &mut Pending) {
        let drained = match self.events.drain() {
            Ok(d) => d,
            Err(_) => {
                pending.everything = true;
                return;
            }
        };
        if drained.overflow || drained.unreadable {
            pending.everything = true;
        }
        let by_dir = drained.by_dir();
        for ((kind, handle), names) in by_dir {
            if pending.everything {
                return;
            }
            self.classify(kind, handle, &names, pending);
        }
    }

    /// Adds one directory's events to `pending`.
    fn classify(&self, kind: i32, handle: &[u8], names: &[&[u8]], pending: &mut Pending) {
        let fd = match self.events.open(kind, handle) {
            Ok(fd) => fd,
            // The directory is gone. If it was in the workspace, its removal (or its move
            // out) is itself an event in a directory that still exists there, up to the
            // root: that event decides. Every call's own scratch directories end this way.
            Err(e) if e.raw_os_error() == Some(libc::ESTALE) => return,
            Err(_) => {
                pending.everything = true;
                return;
            }
        };
        let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            fd.as_raw_fd()
        })) else {
            pending.everything = true;
            return;
        };
        let Ok(rel) = path.strip_prefix(&self.root) else {
            // Outside the workspace: another directory of the same file system (cordon's
            // own store among them). A deleted directory reads `… (deleted)`, never the
            // workspace's prefix unless it was in it, and then it changed.
            return;
        };
        let Some(rel) = rel.to_str() else {
            // A directory whose name cannot be recorded by path: let a whole walk list it.
            pending.everything = true;
            return;
        };
        let names: Vec<&str> = names
            .iter()
            .map(|n| std::str::from_utf8(n).unwrap_or("\u{fffd}"))
            .filter(|n| !n.is_empty() && *n != ".")
            .collect();
        // At the root the entry's name says whose it is: `.cordon` made at the root is
        // cordon's; deeper, the directory's first component does.
        let own =
            |first: &str| matches!(first, ".cordon" | crate::policy::toolchains::WORKSPACE_HOME);
        if rel.is_empty() {
            if names.contains(&".gitignore") {
                pending.everything = true;
            } else if names.is_empty() || names.iter().any(|n| !own(n) && *n != ".git") {
                pending
                    .dirs
                    .entry(String::new())
                    .or_default()
                    .extend(names.iter().map(|n| (*n).to_owned()));
            }
            return;
        }
        if rel.split('/').any(|c| c == ".git") {
            // A `.git` is never recorded (the operator's is bound read-only for calls); the
            // root's `info/exclude` decides coverage like a `.gitignore`.
            if rel == ".git/info"
                || rel.starts_with(".git/info/")
                || (rel == ".git" && names.contains(&"info"))
            {
                pending.everything = true;
            }
            return;
        }
        if own(first_component(rel)) {
            // cordon's own directories are never recorded, but a hard link there to a
            // workspace file writes that file: a file with more than one link seen there
            // makes the next recording walk everything.
            for name in &names {
                let Ok(name) = std::ffi::CString::new(name.as_bytes()) else {
                    continue;
                };
                if let Ok(st) =
                    rustix::fs::statat(&fd, name.as_c_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    && rustix::fs::FileType::from_raw_mode(st.st_mode)
                        != rustix::fs::FileType::Directory
                    && st.st_nlink > 1
                {
                    pending.everything = true;
                }
            }
            return;
        }
        if names.contains(&".gitignore") {
            pending.everything = true;
            return;
        }
        pending
            .dirs
            .entry(rel.to_owned())
            .or_default()
            .extend(names.iter().map(|n| (*n).to_owned()));
    }
}

/// Most bytes of one file's versions a diff reads (each side).
const DIFF_FILE_BYTES: u64 = 1024 * 1024;
/// Most bytes a whole diff text is built to (the result shows a bounded part of it).
const DIFF_TOTAL_BYTES: usize = 16 * 1024 * 1024;

impl Checkpoints {
    /// The checkpoints of the workspace `canonical` (its canonical path names the store),
    /// whose root is `root`, in cordon's state directory.
    pub fn open(
        canonical: &Path,
        root: &cap_std::fs::Dir,
        settings: Settings,
    ) -> Result<Self, CheckpointError> {
        Self::open_in(&crate::git::state_dir(), canonical, root, settings)
    }

    /// [`Checkpoints::open`] with the state directory given (tests).
    pub fn open_in(
        state: &Path,
        canonical: &Path,
        root: &cap_std::fs::Dir,
        settings: Settings,
    ) -> Result<Self, CheckpointError> {
        let store = Store::open(state, canonical)?;
        let root = root
            .as_fd()
            .try_clone_to_owned()
            .map_err(CheckpointError::Workspace)?;
        Ok(Self {
            store,
            root,
            coverage: coverage::Coverage::new(&settings.include),
            settings,
            cache: Mutex::new(None),
            watch: None,
            walks: std::sync::atomic::AtomicU64::new(0),
            partial_walks: std::sync::atomic::AtomicU64::new(0),
            watch_blind: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Turns on the fast path (see [`Watch`]) where the kernel allows it (CAP_SYS_ADMIN and
    /// CAP_DAC_READ_SEARCH); returns why not otherwise, and every recording walks the tree.
    pub fn watch_changes(&mut self, canonical: &Path) -> Result<(), String> {
        if crate::confine::kernel::simulated_missing("fanotify") {
            return Err("fanotify simulated missing (CORDON_SIMULATE_MISSING)".into());
        }
        let events = crate::confine::fanotify::DirWatch::new(self.root.as_fd())
            .map_err(|e| format!("fanotify on the workspace's file system: {e}"))?;
        self.watch = Some(Watch {
            events,
            root: canonical.to_path_buf(),
            pending: Mutex::new(Pending {
                everything: true,
                dirs: Default::default(),
            }),
        });
        Ok(())
    }

    /// How changes are found, as `list` reports it.
    pub fn recording(&self) -> &'static str {
        if self.watch().is_some() {
            "fanotify: the tree is walked only after the kernel reported a change under the \
             workspace"
        } else {
            "full walk: every call's start and end walks the tree (no fanotify here: cordon \
             lacks CAP_SYS_ADMIN, the file system does not report, or another file system is \
             mounted inside the workspace)"
        }
    }

    pub fn store_path(&self) -> &Path {
        self.store.path()
    }

    /// The newest tree and the store's state, from the cache when nobody recorded since.
    fn current(&self, lock: &Locked) -> Result<(State, Manifest), CheckpointError> {
        let mut state = self.store.state(lock)?;
        if !state.has_head {
            return Ok((state, Manifest::new()));
        }
        // Taken, not cloned (a large tree is costly to copy): [`Checkpoints::remember`] puts
        // the newest back, and after an error it is read from disk again.
        let cached = self.cache.lock().ok().and_then(|mut c| {
            c.take()
                .filter(|(seq, _)| *seq == state.head_seq)
                .map(|(_, m)| m)
        });
        let head = match cached {
            Some(head) => head,
            None => match self.store.head(lock, &state) {
                Ok(head) => head,
                // An unreadable head (cut short by a crash: it is not synced) is recorded
                // afresh; the checkpoints kept still restore what they changed.
                Err(CheckpointError::Corrupt(path, why)) => {
                    tracing::warn!(
                        "the checkpoint store's {} is unreadable ({why}); recording the \
                         workspace afresh",
                        path.display()
                    );
                    state.has_head = false;
                    Manifest::new()
                }
                Err(e) => return Err(e),
            },
        };
        Ok((state, head))
    }

    /// How the next recording reads the tree: not at all when the kernel reported nothing
    /// under the workspace since the previous walk and this process holds the newest record;
    /// only the directories it reported when that record is this process's; otherwise all
    /// of it. Takes what was pending, so a walk that follows starts from a queue emptied
    /// before it (what happens during the walk is drained next time); if the walk fails, the
    /// cache is gone and the next recording walks everything.
    fn plan(&self, lock: &Locked) -> Result<Plan, CheckpointError> {
        let Some(watch) = self.watch() else {
            return Ok(Plan::Everything);
        };
        let changed = watch.poll();
        let state = self.store.state(lock)?;
        let fresh = state.has_head
            && self
                .cache
                .lock()
                .ok()
                .is_some_and(|c| c.as_ref().is_some_and(|(seq, _)| *seq == state.head_seq));
        if fresh && !changed {
            return Ok(Plan::Quiet);
        }
        let pending = watch.take();
        Ok(if fresh && !pending.everything {
            Plan::Dirs(pending.dirs)
        } else {
            Plan::Everything
        })
    }

    /// The fast path's answer without the store: the newest state's number when the kernel
    /// reported nothing under the workspace since this process's last walk, which then still
    /// describes the tree. (Another process records only changes, and a change is an event
    /// here, so the state this process holds is still the newest.) None: ask the store.
    fn quick(&self) -> Option<u64> {
        let watch = self.watch()?;
        if watch.poll() {
            return None;
        }
        self.cache.lock().ok()?.as_ref().map(|(seq, _)| *seq)
    }

    /// The fast path, unless a mount inside the workspace made it blind.
    fn watch(&self) -> Option<&Watch> {
        self.watch
            .as_ref()
            .filter(|_| !self.watch_blind.load(std::sync::atomic::Ordering::SeqCst))
    }

    fn remember(&self, seq: u64, head: Manifest) {
        if let Ok(mut cache) = self.cache.lock() {
            *cache = Some((seq, head));
        }
    }

    /// Scans the workspace and records what changed since the newest state, as done by
    /// `info`. Returns the new checkpoint, if anything changed.
    fn record_locked(
        &self,
        lock: &Locked,
        info: &CallInfo,
    ) -> Result<Option<Record>, CheckpointError> {
        let dirs = match self.plan(lock)? {
            Plan::Quiet => return Ok(None),
            Plan::Dirs(dirs) => Some(dirs),
            Plan::Everything => None,
        };
        let (mut state, head) = self.current(lock)?;
        self.walks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let scan = scan::Scan {
            store: &self.store,
            coverage: &self.coverage,
            max_file_bytes: self.settings.max_file_bytes,
        };
        let scanned = match dirs {
            Some(dirs) if state.has_head => {
                self.partial_walks
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let partial = scan.run_dirs(self.root.as_fd(), head, &dirs)?;
                if partial.linked_file_changed {
                    // A file with other names changed: those names may be anywhere.
                    let manifest = partial.manifest.clone();
                    partial.then(scan.run(self.root.as_fd(), manifest)?)
                } else {
                    partial
                }
            }
            _ => scan.run(self.root.as_fd(), head)?,
        };
        if scanned.other_file_system
            && self.watch.is_some()
            && !self
                .watch_blind
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            tracing::info!(
                "a file system is mounted inside the workspace: checkpoints walk the tree at \
                 every call"
            );
        }
        if !state.has_head {
            // The first record of this workspace: the tree every later change starts from.
            state.has_head = true;
            self.store
                .save_head(lock, &mut state, &scanned.manifest, true)?;
            self.store.set_state(lock, &state)?;
            self.remember(state.head_seq, scanned.manifest);
            return Ok(None);
        }
        let changes = scanned.changes;
        if changes.is_empty() {
            // Same tree. A changed stat cache stays in this process's memory: on disk the
            // older one only makes another process read those files again.
            self.remember(state.head_seq, scanned.manifest);
            return Ok(None);
        }
        let record = Record {
            seq: state.head_seq,
            call: info.call.clone(),
            tool: info.tool.clone(),
            summary: info.summary.clone(),
            created_at: crate::audit::now_rfc3339(),
            created_unix: store::now_unix(),
            bytes: scanned.new_bytes,
            changes,
        };
        self.store.add_record(lock, &record)?;
        state.head_seq += 1;
        self.store
            .save_head(lock, &mut state, &scanned.manifest, false)?;
        self.store.set_state(lock, &state)?;
        self.store
            .evict_if_over(lock, &scanned.manifest, self.settings.bounds)?;
        self.remember(state.head_seq, scanned.manifest);
        Ok(Some(record))
    }

    /// Before a call: records what changed since the previous record (made by someone else)
    /// and returns the state the call starts from.
    pub fn begin(&self) -> Result<u64, CheckpointError> {
        if let Some(seq) = self.quick() {
            return Ok(seq);
        }
        let lock = self.store.lock()?;
        self.record_locked(&lock, &CallInfo::outside())?;
        Ok(self.store.state(&lock)?.head_seq)
    }

    /// After a call that began at state `start`: records what changed during it and returns
    /// the checkpoint that restores the workspace to before it, or None when nothing changed.
    pub fn end(&self, start: u64, info: &CallInfo) -> Result<Option<String>, CheckpointError> {
        if self.quick().is_some_and(|seq| seq <= start) {
            return Ok(None);
        }
        let lock = self.store.lock()?;
        self.record_locked(&lock, info)?;
        let state = self.store.state(&lock)?;
        // Kept only if the bounds did not drop it at once.
        Ok(
            (state.head_seq > start && self.store.record(&lock, start)?.is_some())
                .then(|| id_of(start)),
        )
    }

    /// Records what changed since the previous record, as done by `info` (a job read: what
    /// the job changed since); returns the new checkpoint's id.
    pub fn record(&self, info: &CallInfo) -> Result<Option<String>, CheckpointError> {
        let lock = self.store.lock()?;
        Ok(self.record_locked(&lock, info)?.map(|r| id_of(r.seq)))
    }

    /// The kept checkpoints, newest first, and the budget.
    pub fn list(&self) -> Result<(Vec<Listed>, Budget), CheckpointError> {
        let lock = self.store.lock()?;
        let (state, head) = self.current(&lock)?;
        let budget = self.store.evict(&lock, &head, self.settings.bounds)?;
        self.remember(state.head_seq, head);
        let mut out = Vec::new();
        for seq in self.store.record_seqs(&lock)?.into_iter().rev() {
            let Some(record) = self.store.record(&lock, seq)? else {
                continue;
            };
            out.push(Listed {
                id: id_of(record.seq),
                call: record.call.clone(),
                tool: record.tool.clone(),
                summary: record.summary.clone(),
                files_changed: record.changes.len() as u64,
                created_at: record.created_at.clone(),
                bytes: record.bytes,
                not_covered: record
                    .changes
                    .iter()
                    .map(FileChange::of)
                    .filter(|f| f.not_covered.is_some())
                    .collect(),
            });
        }
        Ok((out, budget))
    }

    /// The records from `id` up to (not including) `to`, or to the newest; checked to exist.
    fn range(
        &self,
        lock: &Locked,
        id: &str,
        to: Option<&str>,
    ) -> Result<Vec<Record>, CheckpointError> {
        let from = parse_id(id)?;
        let seqs = self.store.record_seqs(lock)?;
        let kept = || match (seqs.first(), seqs.last()) {
            (Some(a), Some(b)) => format!("{} to {}", id_of(*a), id_of(*b)),
            _ => "none".to_owned(),
        };
        if !seqs.contains(&from) {
            return Err(CheckpointError::Unknown(id.to_owned(), kept()));
        }
        let until = match to {
            Some(to) => {
                let n = parse_id(to)?;
                if !seqs.contains(&n) {
                    return Err(CheckpointError::Unknown(to.to_owned(), kept()));
                }
                if n < from {
                    return Err(CheckpointError::Reversed {
                        from: id.to_owned(),
                        to: to.to_owned(),
                    });
                }
                n
            }
            None => u64::MAX,
        };
        let mut records = Vec::new();
        for seq in seqs.into_iter().filter(|s| *s >= from && *s < until) {
            if let Some(r) = self.store.record(lock, seq)? {
                records.push(r);
            }
        }
        Ok(records)
    }

    /// What changed from state `id` to state `to` (default: the newest), file by file, with
    /// a unified diff of text files.
    pub fn diff(&self, id: &str, to: Option<&str>) -> Result<Diffed, CheckpointError> {
        let lock = self.store.lock()?;
        self.record_locked(&lock, &CallInfo::outside())?;
        let records = self.range(&lock, id, to)?;
        let mut net: std::collections::BTreeMap<String, Change> = Default::default();
        for record in &records {
            for change in &record.changes {
                net.entry(change.path.clone())
                    .and_modify(|c| c.after = change.after.clone())
                    .or_insert_with(|| change.clone());
            }
        }
        let mut files = Vec::new();
        let mut text = String::new();
        for change in net.values().filter(|c| c.before != c.after) {
            files.push(FileChange::of(change));
            if text.len() < DIFF_TOTAL_BYTES {
                self.render(&mut text, change);
            }
        }
        Ok(Diffed { files, text })
    }

    /// Appends one path's part of a diff.
    fn render(&self, out: &mut String, change: &Change) {
        let side = |e: &Option<entry::Entry>| -> Result<Option<String>, String> {
            match e.as_ref().map(|e| &e.kind) {
                None | Some(Kind::Dir) => Ok(Some(String::new())),
                Some(Kind::File { sha256, size }) => {
                    if *size > DIFF_FILE_BYTES {
                        return Err(format!("a file of {size} bytes"));
                    }
                    let bytes = self
                        .store
                        .read_blob(sha256, DIFF_FILE_BYTES)
                        .map_err(|e| e.to_string())?;
                    Ok(String::from_utf8(bytes).ok())
                }
                Some(Kind::Symlink { target }) => Ok(Some(format!("-> {target}\n"))),
                Some(Kind::Fifo) => Ok(Some("(a named pipe)\n".into())),
                Some(Kind::Uncovered { what, .. }) => Err(format!("not covered: {what}")),
            }
        };
        let label = change.label();
        let mode = |e: &Option<entry::Entry>| e.as_ref().map(|e| format!("{:o}", e.mode));
        match (side(&change.before), side(&change.after)) {
            (Ok(Some(old)), Ok(Some(new))) if old != new => {
                let before_dir = change.before.as_ref().is_some_and(entry::Entry::is_dir);
                let after_dir = change.after.as_ref().is_some_and(entry::Entry::is_dir);
                if before_dir || after_dir {
                    out.push_str(&format!("{label} directory {}\n", change.path));
                }
                out.push_str(&crate::files::unified_diff(&change.path, &old, &new));
            }
            (Ok(Some(_)), Ok(Some(_))) if label == "mode" => out.push_str(&format!(
                "mode {}: {} -> {}\n",
                change.path,
                mode(&change.before).unwrap_or_default(),
                mode(&change.after).unwrap_or_default()
            )),
            (Ok(Some(_)), Ok(Some(_))) => out.push_str(&format!("{label} {}\n", change.path)),
            (Err(why), _) | (_, Err(why)) => {
                out.push_str(&format!("{label} {} ({why}; no text diff)\n", change.path))
            }
            _ => out.push_str(&format!("Binary file {} {label}\n", change.path)),
        }
    }

    /// Puts the workspace back as it was at state `id` (before that checkpoint's call):
    /// records first (so what is there now can be restored in turn), restores, records the
    /// restore as a checkpoint of its own.
    pub fn restore(&self, id: &str, info: &CallInfo) -> Result<Restored, CheckpointError> {
        let lock = self.store.lock()?;
        self.record_locked(&lock, &CallInfo::outside())?;
        let records = self.range(&lock, id, None)?;
        let (state, head) = self.current(&lock)?;
        let target = restore::target(&records);
        let (ops, mut skipped) = restore::plan(&target, &head);
        self.remember(state.head_seq, head);
        skipped.extend(restore::apply(self.root.as_fd(), &self.store, &ops));
        let record = self.record_locked(&lock, info)?;
        Ok(Restored {
            files: record
                .as_ref()
                .map(|r| r.changes.iter().map(FileChange::of).collect())
                .unwrap_or_default(),
            checkpoint: record.map(|r| id_of(r.seq)),
            skipped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    pub(super) fn settings(max_count: u64) -> Settings {
        Settings {
            bounds: Bounds {
                max_bytes: 1 << 30,
                max_count,
                max_age_secs: 3600,
            },
            max_file_bytes: 1 << 20,
            include: vec!["keep/".into()],
        }
    }

    pub(super) fn open(ws: &Path, state: &Path, max_count: u64) -> Checkpoints {
        let dir = cap_std::fs::Dir::open_ambient_dir(ws, cap_std::ambient_authority()).unwrap();
        Checkpoints::open_in(state, ws, &dir, settings(max_count)).unwrap()
    }

    pub(super) fn call(tool: &str) -> CallInfo {
        CallInfo {
            call: None,
            tool: tool.into(),
            summary: String::new(),
        }
    }

    /// The tree as (path, mode, content or link target) — the test's own walk.
    fn tree(root: &Path) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir).unwrap() {
                let e = e.unwrap();
                let p = e.path();
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                let meta = fs::symlink_metadata(&p).unwrap();
                let mode = meta.permissions().mode();
                if meta.file_type().is_symlink() {
                    out.push((
                        rel,
                        0,
                        fs::read_link(&p)
                            .unwrap()
                            .into_os_string()
                            .into_encoded_bytes(),
                    ));
                } else if meta.is_dir() {
                    out.push((rel, mode, Vec::new()));
                    stack.push(p);
                } else {
                    out.push((rel, mode, fs::read(&p).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_call_is_undone_and_the_undo_is_undone() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = ws.path();
        fs::write(root.join("a.txt"), "one\n").unwrap();
        fs::create_dir(root.join("empty")).unwrap();
        fs::write(root.join(".gitignore"), "target/\n").unwrap();
        fs::create_dir_all(root.join("target")).unwrap();
        fs::write(root.join("target/big.o"), "ignored").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("out")).unwrap();
        let cps = open(root, state.path(), 100);
        let before = tree(root);
        let start = cps.begin().unwrap();
        // Nothing changed: no checkpoint.
        assert_eq!(cps.end(start, &call("noop")).unwrap(), None);
        let start = cps.begin().unwrap();
        fs::write(root.join("a.txt"), "two\n").unwrap();
        fs::set_permissions(root.join("a.txt"), fs::Permissions::from_mode(0o600)).unwrap();
        fs::remove_dir(root.join("empty")).unwrap();
        fs::write(root.join("new.txt"), "new").unwrap();
        fs::remove_file(root.join("out")).unwrap();
        std::os::unix::fs::symlink("elsewhere", root.join("out")).unwrap();
        fs::write(root.join("target/big.o"), "changed, not recorded").unwrap();
        let id = cps
            .end(start, &call("shell_exec"))
            .unwrap()
            .expect("a checkpoint");
        let after = tree(root);
        let restored = cps.restore(&id, &call("checkpoint")).unwrap();
        let mut now = tree(root);
        // The ignored file is not covered: it stays as the call left it.
        let big = |t: &mut Vec<(String, u32, Vec<u8>)>| t.retain(|(p, ..)| p != "target/big.o");
        let (mut b, mut n) = (before.clone(), now.clone());
        big(&mut b);
        big(&mut n);
        assert_eq!(n, b);
        assert_eq!(
            fs::read(root.join("target/big.o")).unwrap(),
            b"changed, not recorded"
        );
        // /etc/passwd was never followed nor written.
        assert_eq!(
            fs::read_link(root.join("out")).unwrap(),
            Path::new("/etc/passwd")
        );
        let undo = restored.checkpoint.expect("the restore is a checkpoint");
        assert!(
            restored
                .files
                .iter()
                .any(|f| f.path == "new.txt" && f.change == "deleted")
        );
        cps.restore(&undo, &call("checkpoint")).unwrap();
        now = tree(root);
        assert_eq!(now, after);
        let (listed, budget) = cps.list().unwrap();
        assert_eq!(listed.len(), 3);
        assert_eq!(budget.count, 3);
        assert_eq!(listed[2].id, id);
    }

    #[test]
    fn the_oldest_go_first_and_a_dropped_id_is_unknown() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let cps = open(ws.path(), state.path(), 2);
        let mut ids = Vec::new();
        for i in 0..4 {
            let start = cps.begin().unwrap();
            fs::write(ws.path().join("f"), format!("{i}")).unwrap();
            ids.push(cps.end(start, &call("write_file")).unwrap());
        }
        let (listed, budget) = cps.list().unwrap();
        assert_eq!(budget.count, 2);
        assert_eq!(budget.dropped, 2);
        let kept: Vec<_> = listed.iter().map(|l| Some(l.id.clone())).collect();
        assert_eq!(kept, vec![ids[3].clone(), ids[2].clone()]);
        let err = cps
            .restore(ids[0].as_deref().unwrap(), &call("checkpoint"))
            .err()
            .unwrap();
        assert!(err.is_invalid_argument(), "{err}");
        assert!(matches!(parse_id("12"), Err(CheckpointError::BadId(_))));
        // The head on disk lagged behind the records the bound dropped: it was written whole
        // before they went, so another process still reads the newest tree.
        let other = open(ws.path(), state.path(), 2);
        let lock = other.store.lock().unwrap();
        let (state_now, head) = other.current(&lock).unwrap();
        assert_eq!(state_now.head_seq, 4);
        let f = head.get("f").expect("f is recorded");
        let want: String = <sha2::Sha256 as sha2::Digest>::digest(b"3")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(
            matches!(&f.entry.kind, Kind::File { sha256, .. } if *sha256 == want),
            "{f:?}"
        );
    }

    #[test]
    fn a_fifo_and_an_oversized_file_are_recorded_without_reading() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let cps = open(ws.path(), state.path(), 10);
        let start = cps.begin().unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            ws.path().join("pipe"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let big = fs::File::create(ws.path().join("sparse")).unwrap();
        big.set_len(1 << 40).unwrap();
        let id = cps.end(start, &call("shell_exec")).unwrap().unwrap();
        let diffed = cps.diff(&id, None).unwrap();
        let sparse = diffed.files.iter().find(|f| f.path == "sparse").unwrap();
        assert!(
            sparse
                .not_covered
                .as_deref()
                .unwrap()
                .contains("max_file_bytes")
        );
        cps.restore(&id, &call("checkpoint")).unwrap();
        assert!(!ws.path().join("pipe").exists());
        assert!(!ws.path().join("sparse").exists());
    }
}

#[cfg(test)]
mod watch_tests {
    use super::tests::{call, open, settings};
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn with_fanotify_a_quiet_workspace_is_not_walked_and_a_change_is_still_seen() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let canonical = fs::canonicalize(ws.path()).unwrap();
        let dir =
            cap_std::fs::Dir::open_ambient_dir(&canonical, cap_std::ambient_authority()).unwrap();
        let settings = Settings {
            bounds: Bounds {
                max_bytes: 1 << 30,
                max_count: 100,
                max_age_secs: 3600,
            },
            max_file_bytes: 1 << 20,
            include: Vec::new(),
        };
        let mut cps = Checkpoints::open_in(state.path(), &canonical, &dir, settings).unwrap();
        if cps.watch_changes(&canonical).is_err() {
            // No CAP_SYS_ADMIN here: the walk is the only path, tested elsewhere.
            return;
        }
        fs::write(canonical.join("a"), "1").unwrap();
        let call = CallInfo {
            call: None,
            tool: "t".into(),
            summary: String::new(),
        };
        let walks = || cps.walks.load(std::sync::atomic::Ordering::Relaxed);
        let start = cps.begin().unwrap();
        let after_first = walks();
        assert_eq!(after_first, 1, "the first record walks");
        // A quiet workspace is not walked.
        assert_eq!(cps.end(start, &call).unwrap(), None);
        let start = cps.begin().unwrap();
        assert_eq!(cps.end(start, &call).unwrap(), None);
        assert_eq!(walks(), after_first);
        // cordon's own directories are not changes, nor is the file system outside.
        fs::create_dir_all(canonical.join(".cordon/outputs")).unwrap();
        fs::write(canonical.join(".cordon/outputs/x"), "spilled").unwrap();
        fs::write(state.path().join("elsewhere"), "outside").unwrap();
        let start = cps.begin().unwrap();
        assert_eq!(cps.end(start, &call).unwrap(), None);
        assert_eq!(walks(), after_first);
        // A directory made and removed outside (a call's scratch directory) is not walked for,
        // though its handle no longer opens.
        let scratch = state.path().join("scratch");
        fs::create_dir(&scratch).unwrap();
        fs::write(scratch.join("x"), "scratch").unwrap();
        fs::remove_dir_all(&scratch).unwrap();
        let start = cps.begin().unwrap();
        assert_eq!(cps.end(start, &call).unwrap(), None);
        assert_eq!(walks(), after_first);
        // The same inside the workspace: its removal is an event in the root, which is walked.
        fs::create_dir(canonical.join("gone")).unwrap();
        fs::write(canonical.join("gone/x"), "gone").unwrap();
        fs::remove_dir_all(canonical.join("gone")).unwrap();
        let start = cps.begin().unwrap();
        assert_eq!(cps.end(start, &call).unwrap(), None);
        let after_gone = walks();
        assert!(after_gone > after_first);
        // A change deep in the tree is reported by the kernel and recorded.
        fs::create_dir_all(canonical.join("d/e")).unwrap();
        let start = cps.begin().unwrap();
        fs::write(canonical.join("d/e/f"), "new").unwrap();
        let id = cps.end(start, &call).unwrap().expect("the change is seen");
        assert!(walks() > after_gone);
        let diffed = cps.diff(&id, None).unwrap();
        assert_eq!(diffed.files.len(), 1, "{:?}", diffed.files);
        assert_eq!(diffed.files[0].path, "d/e/f");
        assert!(cps.recording().starts_with("fanotify"));
    }

    /// The entries of the tree a `Checkpoints` holds as newest.
    fn held(cps: &Checkpoints) -> std::collections::BTreeMap<String, entry::Entry> {
        let cache = cps.cache.lock().unwrap();
        let (_, manifest) = cache.as_ref().expect("a record is held");
        manifest
            .iter()
            .map(|(path, cached)| (path.clone(), cached.entry.clone()))
            .collect()
    }

    /// What a whole walk of `ws` records, from a store of its own.
    fn walked_afresh(ws: &Path) -> std::collections::BTreeMap<String, entry::Entry> {
        let state = tempfile::tempdir().unwrap();
        let cps = open(ws, state.path(), 100);
        cps.begin().unwrap();
        held(&cps)
    }

    #[test]
    fn a_walk_of_the_directories_the_kernel_named_records_what_a_whole_walk_would() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let canonical = fs::canonicalize(ws.path()).unwrap();
        let dir =
            cap_std::fs::Dir::open_ambient_dir(&canonical, cap_std::ambient_authority()).unwrap();
        let mut cps = Checkpoints::open_in(state.path(), &canonical, &dir, settings(100)).unwrap();
        if let Err(why) = cps.watch_changes(&canonical) {
            // CI runs as root, where fanotify must work: a missing fast path is a failure
            // there, and a skip only on a developer's unprivileged machine.
            assert!(std::env::var_os("CI").is_none(), "no fanotify in CI: {why}");
            eprintln!("skipped: no fanotify here ({why})");
            return;
        }
        let w = |rel: &str| canonical.join(rel);
        for d in ["a/b/c", "a/keep", "gone/deep/er", "moved/x", "swap", "mode"] {
            fs::create_dir_all(w(d)).unwrap();
        }
        for f in [
            "top",
            "a/b/c/f",
            "a/keep/k",
            "gone/deep/er/g",
            "moved/x/m",
            "swap/s",
            "mode/m",
        ] {
            fs::write(w(f), f).unwrap();
        }
        fs::create_dir_all(w(".cordon-home")).unwrap();
        cps.begin().unwrap();
        let partial = || cps.partial_walks.load(std::sync::atomic::Ordering::Relaxed);
        type Step<'a> = (&'a str, Box<dyn Fn() + 'a>);
        let steps: Vec<Step> = vec![
            (
                "a file written deep",
                Box::new(|| fs::write(w("a/b/c/f"), "changed").unwrap()),
            ),
            (
                "a tree removed",
                Box::new(|| fs::remove_dir_all(w("gone")).unwrap()),
            ),
            (
                "a directory removed and made again, empty, under its old name",
                Box::new(|| {
                    fs::remove_dir_all(w("a/b")).unwrap();
                    fs::create_dir(w("a/b")).unwrap();
                }),
            ),
            (
                "a directory renamed",
                Box::new(|| fs::rename(w("moved"), w("renamed")).unwrap()),
            ),
            (
                "a directory replaced by a file, and a file by a directory",
                Box::new(|| {
                    fs::remove_dir_all(w("swap")).unwrap();
                    fs::write(w("swap"), "now a file").unwrap();
                    fs::remove_file(w("top")).unwrap();
                    fs::create_dir_all(w("top/inner")).unwrap();
                    fs::write(w("top/inner/t"), "t").unwrap();
                }),
            ),
            (
                "a directory's mode",
                Box::new(|| {
                    fs::set_permissions(w("mode"), fs::Permissions::from_mode(0o700)).unwrap()
                }),
            ),
            (
                "a directory replaced by a symlink out of the workspace",
                Box::new(|| {
                    fs::remove_dir_all(w("a/keep")).unwrap();
                    std::os::unix::fs::symlink("/etc", w("a/keep")).unwrap();
                }),
            ),
        ];
        for (what, step) in &steps {
            let before = partial();
            step();
            cps.record(&call(what)).unwrap();
            assert_eq!(partial(), before + 1, "{what}: recorded by a partial walk");
            assert_eq!(held(&cps), walked_afresh(&canonical), "{what}");
        }
        // A file with two names in two directories, written through one: the other name's
        // directory had no event, so the partial walk is followed by a whole one.
        fs::write(w("mode/one"), "one").unwrap();
        fs::hard_link(w("mode/one"), w("renamed/two")).unwrap();
        cps.record(&call("two names")).unwrap();
        fs::write(w("renamed/two"), "written through the second name").unwrap();
        cps.record(&call("through the second name")).unwrap();
        assert_eq!(held(&cps), walked_afresh(&canonical), "both names");
        // A file written through a hard link in cordon's own home directory (never recorded
        // itself) is still seen: that drain asks for a whole walk.
        fs::hard_link(w("mode/m"), w(".cordon-home/m")).unwrap();
        cps.record(&call("link")).unwrap();
        let before = partial();
        let walks = cps.walks.load(std::sync::atomic::Ordering::Relaxed);
        fs::write(w(".cordon-home/m"), "through the link").unwrap();
        cps.record(&call("through a link")).unwrap();
        assert_eq!(partial(), before, "a hard link makes the walk whole");
        assert!(cps.walks.load(std::sync::atomic::Ordering::Relaxed) > walks);
        assert_eq!(held(&cps), walked_afresh(&canonical));
        // A new ignore file changes coverage beneath it: a whole walk.
        fs::write(w("a/.gitignore"), "b/\n").unwrap();
        cps.record(&call("ignore")).unwrap();
        assert_eq!(partial(), before);
        assert_eq!(held(&cps), walked_afresh(&canonical));
        assert!(!held(&cps).contains_key("a/b"), "ignored now");
        // And the head kept on disk, rolled forward by the records, is the same tree.
        let again = Checkpoints::open_in(state.path(), &canonical, &dir, settings(100)).unwrap();
        let lock = again.store.lock().unwrap();
        let (_, head) = again.current(&lock).unwrap();
        let head: std::collections::BTreeMap<_, _> =
            head.into_iter().map(|(p, c)| (p, c.entry)).collect();
        assert_eq!(head, held(&cps));
    }
}
