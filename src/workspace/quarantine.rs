//! The git guard: what confined processes left in the workspace that git would read as
//! configuration outside any sandbox, found and dealt with after every call and on a timer.
//!
//! Owns the view's signature (identity of every protected entry when the sandbox view was
//! built), the record of what the operator's repository held at that moment, the checks and
//! the quarantine. The rules (see SECURITY.md, "git"):
//! * **Allow, don't deny.** A control file that was not there when the view was built (a
//!   submodule's or worktree's `config`, `config.worktree`, `hooks`, `commondir`, `gitdir`, …)
//!   stays only if it is exactly what git writes for an ordinary operation (configs made only
//!   of keys on `gitconfig::ALLOWED`, hook directories of `*.sample` files, a worktree's
//!   `commondir`/`gitdir`); anything else, unreadable, oversized or not UTF-8 is quarantined.
//! * **Every check reads every gitlink** of the current index (cached by device, inode,
//!   ctime and size), recursively through the submodules' own indexes; an index that cannot be
//!   read is hostile and quarantined, a gitfile pointing outside the workspace or into the
//!   main `.git` is refused (the gitfile moves, never what it points at).
//! * **Never the operator's files.** An entry the view bound read-only can only change from
//!   the host, so it is never touched; a file reached through a gitlink that is unchanged since
//!   the view was built (same device, inode, ctime and size) is the operator's and is not
//!   vetted. Only paths walked without following any symlink are moved.
//! * **Short quarantine names** (counter, hash, readable tail ≤ 64 bytes); what cannot be
//!   moved is deleted, and the notice says which happened.
//!
//! Does not own: building the view (`confine`), or turning notices into a tool result.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt};

use super::gitconfig;
use super::gitlinks;
use super::protect::{EntryKind, ProtectedEntry, existing_protected};

/// Where quarantined entries go, workspace-relative.
pub const QUARANTINE_DIR: &str = ".cordon/quarantine";

/// Submodules nested deeper than this are refused (git recurses through them all).
const MAX_DEPTH: usize = 8;
/// Gitlinks looked at per check, over all indexes; more is refused, never skipped.
const MAX_TOTAL_GITLINKS: usize = 200_000;
/// Entries of a new `hooks` directory looked at; a larger one is refused.
const MAX_HOOK_ENTRIES: usize = 256;
/// Bytes of a quarantined entry's readable tail.
const TAIL_BYTES: usize = 64;
/// Largest index read (a monorepo's is a few hundred MiB); a larger one is hostile: a sparse
/// file claiming billions of entries would otherwise keep the server reading for hours.
const MAX_INDEX_BYTES: u64 = 1 << 30;
/// Findings of timer checks kept for the next call's result.
const MAX_PENDING: usize = 100;
/// The operator's repository configs git itself writes for ordinary work (`git config
/// user.email`, `remote add`, `push -u`, `branch --set-upstream-to`, `sparse-checkout set`):
/// writable in the view but vetted. A change whose added or changed keys are all on
/// `gitconfig::ALLOWED` becomes the accepted content; any other change is undone (the accepted
/// content written back) and the call refused.
const VETTED_CONFIGS: &[&str] = &[".git/config", ".git/config.worktree"];

/// (device, inode, is a symlink): what an entry is.
type Id = (u64, u64, bool);
/// (device, inode, ctime seconds, ctime nanoseconds, size): what a file is and whether it
/// changed since (ctime: a confined process can set mtime back, never ctime).
type Stamp = (u64, u64, i64, i64, u64);

/// Identity of every protected entry (and `.git`) when the view was built: the view binds
/// what existed then, so any difference means the view is out of date.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signature(BTreeMap<PathBuf, Id>);

impl Signature {
    /// The protected entries that exist now, and their signature: a few `lstat`/`readdir`
    /// calls beneath `root`, no symlink followed, every glob directory listed in full.
    pub fn take(
        root: &Dir,
        patterns: &[String],
        writable: &[PathBuf],
    ) -> (Vec<ProtectedEntry>, Self) {
        let mut entries = existing_protected(root, patterns);
        // Vetted configs are neither bound nor part of the signature (git replaces them with a
        // new inode at every write, which is not a reason to re-make the view).
        entries.retain(|e| !writable.contains(&e.path));
        let mut map = BTreeMap::new();
        let git = PathBuf::from(".git");
        for path in entries.iter().map(|e| &e.path).chain(std::iter::once(&git)) {
            if let Ok(m) = root.symlink_metadata(path) {
                map.insert(path.clone(), (m.dev(), m.ino(), m.file_type().is_symlink()));
            }
        }
        (entries, Signature(map))
    }

    /// Whether `path` is, or lies beneath, an entry the view bound read-only (existing then and
    /// not a symlink): only the host can change such a path.
    fn bound(&self, path: &Path) -> bool {
        path.ancestors()
            .any(|a| a != Path::new(".git") && self.0.get(a).is_some_and(|(_, _, link)| !*link))
    }
}

/// What one check found, for a call's result.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GuardReport {
    /// One sentence per finding, for the agent (what, why, what cordon did, what to do).
    pub notices: Vec<String>,
    /// Something was refused or quarantined: the call's result is a `denied` error.
    pub refused: bool,
}

impl GuardReport {
    fn info(&mut self, text: String) {
        self.notices.push(text);
    }
    fn refuse(&mut self, text: String) {
        self.notices.push(text);
        self.refused = true;
    }
    pub fn extend(&mut self, other: GuardReport) {
        self.notices.extend(other.notices);
        self.refused |= other.refused;
    }
    pub fn is_empty(&self) -> bool {
        self.notices.is_empty()
    }
}

/// Each finding as a server event for every session (they share the workspace): `warning`
/// when something was refused or quarantined, else `notice`. The notices are cordon's own
/// sentences about workspace paths, never file contents.
fn announce(report: &GuardReport) {
    let level = if report.refused {
        crate::events::Level::Warning
    } else {
        crate::events::Level::Notice
    };
    for notice in &report.notices {
        crate::events::emit(
            level,
            "quarantine",
            serde_json::json!({ "message": notice }),
        );
    }
}

#[derive(Default)]
struct State {
    /// Gitlinks of an index, by the index's stamp.
    indexes: HashMap<PathBuf, (Stamp, Vec<PathBuf>)>,
    /// New entries and files vetted and found to be what git writes, by stamp: not read again
    /// until they change.
    accepted: HashMap<PathBuf, Stamp>,
    /// What timer checks found since the last call's check took them.
    pending: GuardReport,
    /// A timer check runs while confined processes may still be writing: it acts on a
    /// finding only when the previous timer check found the same path in the same state
    /// (stamp), so a file caught half-written (an index rewritten in place) is not moved.
    background: bool,
    suspects: HashMap<PathBuf, Stamp>,
    suspects_next: HashMap<PathBuf, Stamp>,
    /// The accepted content of each vetted config (None: absent), with its stamp then.
    configs: HashMap<PathBuf, Option<(Stamp, Vec<u8>)>>,
}

/// The guard of one sandbox view: its signature and what the operator's repository held
/// when the view was built.
pub struct GitGuard {
    root: Dir,
    /// Absolute workspace root: an absolute `gitdir:` counts only beneath it.
    workspace: PathBuf,
    patterns: Vec<String>,
    signature: Signature,
    /// Whether the workspace had a `.git` when the view was built (the operator's repository).
    repo_existed: bool,
    /// Files reached through gitlinks when the view was built (configs, gitfiles, indexes):
    /// the operator's while unchanged.
    at_start: HashMap<PathBuf, Stamp>,
    counter: AtomicU64,
    /// Vetted configs (see [`VETTED_CONFIGS`]): not bound by the view.
    writable: Vec<PathBuf>,
    /// Protected entries this view binds that its predecessor never vetted (they appeared
    /// between its last check and this view's listing): vetted like new ones although bound.
    unvetted: std::collections::HashSet<PathBuf>,
    /// A newer view replaced this one: its timer stops (the new view's guard takes over).
    retired: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
}

/// A gitlink's files, resolved: where its gitdir is, and the gitfile that named it.
struct Resolved {
    gitdir: PathBuf,
}

impl GitGuard {
    /// Takes the signature and the record of the operator's repository now (when the view
    /// is built from the same listing). `root` is the workspace handle's directory.
    pub fn new(root: Dir, workspace: &Path, patterns: &[String]) -> (Self, Vec<ProtectedEntry>) {
        let (writable, configs) = vetted_configs(&root, patterns);
        let (entries, signature) = Signature::take(&root, patterns, &writable);
        let repo_existed = signature.0.contains_key(Path::new(".git"));
        let guard = GitGuard {
            root,
            workspace: workspace.to_path_buf(),
            patterns: patterns.to_vec(),
            signature,
            repo_existed,
            at_start: HashMap::new(),
            counter: AtomicU64::new(0),
            writable,
            unvetted: Default::default(),
            retired: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State {
                configs,
                ..State::default()
            }),
        };
        let mut at_start = HashMap::new();
        if repo_existed {
            let mut state = State::default();
            let mut report = GuardReport::default();
            guard.walk_gitlinks(&mut state, &mut report, true, &mut |path, stamp| {
                at_start.insert(path.to_path_buf(), stamp);
            });
        }
        (GitGuard { at_start, ..guard }, entries)
    }

    /// The guard of the view that replaces this one: this guard checks once more now (so
    /// nothing planted since its last check is taken for the operator's by the new view), and
    /// the successor inherits what this one knew to be the operator's or accepted, instead of
    /// taking whatever is there now as the operator's. The check's findings wait for the next
    /// call's result.
    pub fn successor(&self, root: Dir) -> (Self, Vec<ProtectedEntry>) {
        let report = self.check();
        let (entries, signature) = Signature::take(&root, &self.patterns, &self.writable);
        let state = self.state.lock().ok();
        let accepted = state
            .as_ref()
            .map(|s| s.accepted.clone())
            .unwrap_or_default();
        let configs = state
            .as_ref()
            .map(|s| s.configs.clone())
            .unwrap_or_default();
        let mut at_start = self.at_start.clone();
        at_start.extend(accepted.iter().map(|(p, s)| (p.clone(), *s)));
        let unvetted = signature
            .0
            .iter()
            .filter(|(path, id)| {
                let before = self.signature.0.get(*path);
                let vetted = accepted
                    .get(*path)
                    .is_some_and(|s| (s.0, s.1) == (id.0, id.1));
                // Bound before (only the host changed it) or vetted by this guard.
                !(before.is_some_and(|(_, _, link)| !*link) || before == Some(*id) || vetted)
                    && path.starts_with(".git")
                    && path.as_path() != Path::new(".git")
            })
            .map(|(path, _)| path.clone())
            .collect();
        drop(state);
        let guard = GitGuard {
            root,
            workspace: self.workspace.clone(),
            patterns: self.patterns.clone(),
            signature,
            repo_existed: self.repo_existed,
            at_start,
            counter: AtomicU64::new(self.counter.load(Ordering::Relaxed)),
            writable: self.writable.clone(),
            unvetted,
            retired: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State {
                accepted,
                pending: report,
                configs,
                ..State::default()
            }),
        };
        (guard, entries)
    }

    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Whether the view still matches the workspace: no protected entry (or `.git`)
    /// appeared, vanished or was replaced since it was built.
    pub fn is_current(&self) -> bool {
        Signature::take(&self.root, &self.patterns, &self.writable).1 == self.signature
    }

    /// Runs every check now; returns what it found plus what timer checks found since the
    /// last call took them.
    pub fn check(&self) -> GuardReport {
        let Ok(mut state) = self.state.lock() else {
            return GuardReport::default();
        };
        let mut report = std::mem::take(&mut state.pending);
        let fresh = self.check_locked(&mut state);
        announce(&fresh);
        report.extend(fresh);
        report
    }

    /// A check from the timer: what it finds waits for the next call's result (and the log).
    pub fn check_in_background(&self) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        state.background = true;
        let found = self.check_locked(&mut state);
        state.background = false;
        state.suspects = std::mem::take(&mut state.suspects_next);
        let mut new = GuardReport::default();
        for notice in found.notices {
            // The same finding (a file that can be neither moved nor deleted) recurs at every
            // check: kept once, and never more than a bounded number.
            if state.pending.notices.contains(&notice) || state.pending.notices.len() >= MAX_PENDING
            {
                continue;
            }
            tracing::warn!("git guard: {notice}");
            state.pending.notices.push(notice.clone());
            new.notices.push(notice);
        }
        new.refused = found.refused;
        announce(&new);
        state.pending.refused |= found.refused;
    }

    fn check_locked(&self, state: &mut State) -> GuardReport {
        let mut report = GuardReport::default();
        self.check_configs(state, &mut report);
        self.check_entries(state, &mut report);
        if self.repo_existed {
            self.walk_gitlinks(state, &mut report, false, &mut |_, _| {});
        }
        report
    }

    /// The vetted configs: an accepted change becomes the new accepted content; any other
    /// change is undone by writing the accepted content back (a new file renamed into place).
    fn check_configs(&self, state: &mut State, report: &mut GuardReport) {
        for path in &self.writable {
            let Some(accepted) = state.configs.get(path).cloned() else {
                continue;
            };
            let meta = match self.lstat_beneath(path) {
                Ok(Some(m)) => Some(m),
                Ok(None) if accepted.is_none() => continue,
                // Renamed away or deleted: the operator's remotes and settings would go with
                // it (removing single keys, `git config --unset`, is fine and stays).
                Ok(None) => None,
                Err(_) => continue, // `.git` itself is pinned: cannot happen in the view
            };
            let now = meta.as_ref().map(stamp);
            if accepted.as_ref().map(|(s, _)| *s) == now && now.is_some() {
                continue;
            }
            let before = accepted
                .as_ref()
                .map(|(_, b)| b.as_slice())
                .unwrap_or_default();
            let verdict = if let Some(meta) = meta.as_ref().filter(|m| !m.file_type().is_file()) {
                Err(match meta.file_type().is_symlink() {
                    true => "it was replaced by a symbolic link".to_owned(),
                    false => "it was replaced by something other than a file".to_owned(),
                })
            } else if meta.is_none() {
                Err("it was removed or renamed away".to_owned())
            } else if meta.as_ref().is_some_and(|m| m.file_type().is_symlink()) {
                Err("it was replaced by a symbolic link".to_owned())
            } else {
                self.read(path, gitconfig::MAX_CONFIG_BYTES)
                    .and_then(|bytes| vet_change(before, &bytes).map(|()| bytes))
            };
            match verdict {
                Ok(bytes) => {
                    if let Some(now) = now {
                        state.configs.insert(path.clone(), Some((now, bytes)));
                    }
                }
                Err(why) => {
                    let what = format!(
                        "{} was changed so that {why}; git reads it outside any sandbox",
                        path.display()
                    );
                    match self.restore(path, accepted.as_ref().map(|(_, b)| b.as_slice())) {
                        Ok(restored) => {
                            state
                                .configs
                                .insert(path.clone(), restored.map(|s| (s, before.to_vec())));
                            report.refuse(format!(
                                "{what}. cordon put back the content it had accepted, so the \
                                 change is undone; if it is wanted, the operator makes it on \
                                 the host (git config keys that run nothing, e.g. user.email or \
                                 remote.<name>.url, work in calls)"
                            ));
                        }
                        Err(e) => report.refuse(format!(
                            "{what}, and cordon could not put back its accepted content ({e}): \
                             check it on the host before running git here"
                        )),
                    }
                }
            }
        }
    }

    /// Writes `content` back at `path` (a new file renamed over whatever is there, so a
    /// symlink or hard link planted there is replaced, not written through); None: removes
    /// it. Returns the stamp of what is there now.
    fn restore(&self, path: &Path, content: Option<&[u8]>) -> std::io::Result<Option<Stamp>> {
        use std::io::Write;
        let (dir, name) = self.open_parent_beneath(path)?;
        let Some(content) = content else {
            dir.remove_file(&name)?;
            return Ok(None);
        };
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let temp = PathBuf::from(format!(".cordon-restore-{n}-{}", std::process::id()));
        let mut options = OpenOptions::new();
        options
            .write(true)
            .create_new(true)
            .follow(FollowSymlinks::No);
        let mut file = dir.open_with(&temp, &options)?;
        let written = file.write_all(content).and_then(|()| file.sync_all());
        if let Err(e) = written.and_then(|()| dir.rename(&temp, &dir, &name)) {
            let _ = dir.remove_file(&temp);
            return Err(e);
        }
        Ok(dir.symlink_metadata(&name).ok().map(|m| stamp(&m)))
    }

    /// Protected entries that were not there when the view was built (or were symlinks the
    /// view could not bind, and are something else now).
    fn check_entries(&self, state: &mut State, report: &mut GuardReport) {
        let (entries, _) = Signature::take(&self.root, &self.patterns, &self.writable);
        for entry in entries {
            // `.cordon` is the server's own; the policy's files are the operator's to edit.
            if !entry.path.starts_with(".git") || entry.path == Path::new(".git") {
                continue;
            }
            let Ok(meta) = self.root.symlink_metadata(&entry.path) else {
                continue;
            };
            let id = (meta.dev(), meta.ino(), meta.file_type().is_symlink());
            let unvetted = self.unvetted.contains(&entry.path);
            match self.signature.0.get(&entry.path) {
                // Bound read-only: a change can only be the operator's, on the host.
                Some((_, _, false)) if !unvetted => continue,
                Some(known) if *known == id && !unvetted => continue,
                _ => {}
            }
            if self.signature.bound(&entry.path) && !unvetted {
                continue;
            }
            let stamp = stamp(&meta);
            if state.accepted.get(&entry.path) == Some(&stamp) {
                continue;
            }
            if !self.repo_existed {
                if state.accepted.insert(entry.path.clone(), stamp).is_none() {
                    report.info(format!(
                        "this call created {} in a new git repository: it was written by a \
                         confined process, so inspect it before running git there outside cordon",
                        entry.path.display()
                    ));
                }
                continue;
            }
            match self.vet_entry(&entry) {
                Ok(()) => {
                    state.accepted.insert(entry.path.clone(), stamp);
                }
                Err(why) => {
                    let what = format!(
                        "{} appeared in the operator's repository ({why}; git reads it outside \
                         any sandbox)",
                        entry.path.display()
                    );
                    self.quarantine(&entry.path, &what, state, report);
                }
            }
        }
    }

    /// Whether a new protected entry is exactly what git writes for an ordinary operation.
    fn vet_entry(&self, entry: &ProtectedEntry) -> Result<(), String> {
        let parts: Vec<&[u8]> = entry
            .path
            .components()
            .map(|c| c.as_os_str().as_bytes())
            .collect();
        let name = parts.last().copied().unwrap_or_default();
        if entry.kind == EntryKind::Symlink {
            return Err("it is a symbolic link, which git never writes there".into());
        }
        let in_worktree = parts.len() == 4 && parts[1] == b"worktrees";
        match name {
            b"config" | b"config.worktree" => {
                let bytes = self.read(&entry.path, gitconfig::MAX_CONFIG_BYTES)?;
                gitconfig::vet(&bytes).map_err(|e| format!("a git config that {e}"))
            }
            b"hooks" => self.vet_hooks(&entry.path),
            b"commondir" if in_worktree => {
                let bytes = self.read(&entry.path, 64)?;
                (bytes == b"../..\n")
                    .then_some(())
                    .ok_or_else(|| "a commondir that is not the `../..` git writes".into())
            }
            b"gitdir" if in_worktree => {
                let bytes = self.read(&entry.path, 4096)?;
                let line = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
                let path = Path::new(OsStr::from_bytes(line));
                let inside = path.is_absolute()
                    && path.starts_with(&self.workspace)
                    && path.file_name() == Some(OsStr::new(".git"))
                    && !line.contains(&b'\n')
                    && path
                        .components()
                        .all(|c| matches!(c, Component::Normal(_) | Component::RootDir));
                inside.then_some(()).ok_or_else(|| {
                    "a worktree gitdir that is not the path of a `.git` in the workspace".into()
                })
            }
            _ => Err("git writes no such file for an ordinary operation".into()),
        }
    }

    /// A new hook directory stays only while it holds nothing but git's `*.sample` files
    /// (which git never runs).
    fn vet_hooks(&self, path: &Path) -> Result<(), String> {
        let dir = self
            .open_dir_beneath(path)
            .map_err(|e| format!("it cannot be read ({e})"))?;
        let entries = dir
            .entries()
            .map_err(|e| format!("it cannot be listed ({e})"))?;
        for (n, entry) in entries.enumerate() {
            let entry = entry.map_err(|e| format!("it cannot be listed ({e})"))?;
            if n >= MAX_HOOK_ENTRIES {
                return Err(format!("it holds more than {MAX_HOOK_ENTRIES} entries"));
            }
            let name = entry.file_name();
            let regular = dir
                .symlink_metadata(&name)
                .is_ok_and(|m| m.file_type().is_file());
            if !regular || !name.as_bytes().ends_with(b".sample") {
                return Err(format!(
                    "a hook directory holding {}, which git would run",
                    Path::new(&name).display()
                ));
            }
        }
        Ok(())
    }

    /// Every gitlink of the operator's index, recursively through each submodule's own index.
    /// `seen` is told each file it relied on; with `record` (when the view is built) nothing
    /// is vetted or moved: what is there then is the operator's.
    fn walk_gitlinks(
        &self,
        state: &mut State,
        report: &mut GuardReport,
        record: bool,
        seen: &mut dyn FnMut(&Path, Stamp),
    ) {
        // (worktree of the repository, its gitdir, depth)
        // A `.git` that is a symlink or a gitfile keeps its index elsewhere (SECURITY.md: not
        // covered); the view binds that `.git` entry as it is.
        if !self
            .root
            .symlink_metadata(".git")
            .is_ok_and(|m| m.file_type().is_dir())
        {
            return;
        }
        let mut stack: Vec<(PathBuf, PathBuf, usize)> =
            vec![(PathBuf::new(), PathBuf::from(".git"), 0)];
        let mut total = 0usize;
        while let Some((worktree, gitdir, depth)) = stack.pop() {
            let index = gitdir.join("index");
            let links = match self.gitlinks_of(state, &index, seen) {
                Ok(links) => links,
                Err(_) if record => continue,
                Err(why) => {
                    let what = format!(
                        "the git index {} cannot be read by cordon ({why}), so the submodules \
                         it records cannot be checked",
                        index.display()
                    );
                    self.refuse_unless_operators(&index, &what, state, report);
                    continue;
                }
            };
            total += links.len();
            if (total > MAX_TOTAL_GITLINKS || (depth >= MAX_DEPTH && !links.is_empty())) && record {
                continue;
            }
            if total > MAX_TOTAL_GITLINKS || (depth >= MAX_DEPTH && !links.is_empty()) {
                let what = format!(
                    "the git index {} records submodules nested deeper than {MAX_DEPTH} levels \
                     or more than {MAX_TOTAL_GITLINKS} in all",
                    index.display()
                );
                self.refuse_unless_operators(&index, &what, state, report);
                continue;
            }
            for link in links {
                let link = worktree.join(&link);
                if let Some(resolved) = self.check_gitlink(&link, state, report, record, seen) {
                    stack.push((link, resolved.gitdir, depth + 1));
                }
            }
        }
    }

    /// The gitlinks of the index at `index`, from the cache when its stamp is unchanged.
    fn gitlinks_of(
        &self,
        state: &mut State,
        index: &Path,
        seen: &mut dyn FnMut(&Path, Stamp),
    ) -> Result<Vec<PathBuf>, String> {
        let file = match self.open_file_beneath(index) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e.to_string()),
        };
        let meta = file.metadata().map_err(|e| e.to_string())?;
        if !meta.is_file() {
            return Err("it is not a regular file".into());
        }
        let stamp = stamp(&meta);
        seen(index, stamp);
        if meta.len() > MAX_INDEX_BYTES {
            return Err(format!("it is larger than {MAX_INDEX_BYTES} bytes"));
        }
        if let Some((cached, links)) = state.indexes.get(index)
            && *cached == stamp
        {
            return Ok(links.clone());
        }
        let links = gitlinks::read_gitlinks(std::io::BufReader::new(file.into_std()))
            .map_err(|e| e.to_string())?;
        state
            .indexes
            .insert(index.to_path_buf(), (stamp, links.clone()));
        Ok(links)
    }

    /// A submodule's file lies behind the symbolic link `at`: while the operator's entries are
    /// recorded, the link is remembered as theirs; afterwards it is refused unless it is theirs.
    fn symlink_on_the_way(
        &self,
        at: &Path,
        what: &str,
        record: bool,
        state: &mut State,
        report: &mut GuardReport,
        seen: &mut dyn FnMut(&Path, Stamp),
    ) {
        if record {
            if let Ok(m) = self.root.symlink_metadata(at) {
                seen(at, stamp(&m));
            }
        } else {
            self.refuse_unless_operators(at, what, state, report);
        }
    }

    /// Checks one gitlink: its `.git`, and the config, hooks and commondir git would read in
    /// its gitdir. Returns the gitdir to recurse into when there is one to trust.
    fn check_gitlink(
        &self,
        link: &Path,
        state: &mut State,
        report: &mut GuardReport,
        record: bool,
        seen: &mut dyn FnMut(&Path, Stamp),
    ) -> Option<Resolved> {
        if link.as_os_str().is_empty() || !is_plain(link) {
            if record {
                return None;
            }
            report.refuse(format!(
                "the index records a submodule at `{}`, which is not a plain relative path; \
                 check the index with `git ls-files -s` on the host",
                link.display()
            ));
            return None;
        }
        let gitdir = self.gitlink_gitdir(link, state, report, record, seen)?;
        self.vet_gitdir_files(link, &gitdir, state, report, record, seen)
            .then_some(Resolved { gitdir })
    }

    /// The gitdir of the gitlink at `link` (its `.git` directory, or what its gitfile names);
    /// None where git would not enter it or it cannot be trusted (then said in `report`).
    fn gitlink_gitdir(
        &self,
        link: &Path,
        state: &mut State,
        report: &mut GuardReport,
        record: bool,
        seen: &mut dyn FnMut(&Path, Stamp),
    ) -> Option<PathBuf> {
        let dot_git = link.join(".git");
        let meta = match self.lstat_beneath(&dot_git) {
            Ok(Some(m)) => m,
            Ok(None) => return None, // not checked out: git does not enter it
            Err(at) => {
                let what = format!(
                    "the submodule {} is reached through the symbolic link {}",
                    link.display(),
                    at.display()
                );
                self.symlink_on_the_way(&at, &what, record, state, report, seen);
                return None;
            }
        };
        if meta.is_dir() {
            Some(dot_git)
        } else if meta.is_file() {
            seen(&dot_git, stamp(&meta));
            match self.gitfile_target(link, &dot_git) {
                Ok(gitdir) => Some(gitdir),
                Err(_) if record => None,
                Err(why) => {
                    let what = format!(
                        "the submodule {}'s gitfile {} {why}",
                        link.display(),
                        dot_git.display()
                    );
                    self.refuse_unless_operators(&dot_git, &what, state, report);
                    None
                }
            }
        } else if record {
            seen(&dot_git, stamp(&meta));
            None
        } else {
            let what = format!(
                "the submodule {}'s {} is neither a directory nor a gitfile",
                link.display(),
                dot_git.display()
            );
            self.refuse_unless_operators(&dot_git, &what, state, report);
            None
        }
    }

    /// Vets the files of `gitdir` the operator's git would read (config, config.worktree,
    /// commondir, hooks): what changed since start and is not made of keys that run nothing
    /// goes to quarantine. False when the gitdir is not to be recursed into.
    fn vet_gitdir_files(
        &self,
        link: &Path,
        gitdir: &Path,
        state: &mut State,
        report: &mut GuardReport,
        record: bool,
        seen: &mut dyn FnMut(&Path, Stamp),
    ) -> bool {
        // The repository's own files, as the operator's git would read them.
        for name in ["config", "config.worktree", "commondir", "hooks"] {
            let path = gitdir.join(name);
            let meta = match self.lstat_beneath(&path) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(at) => {
                    let what = format!(
                        "the submodule {}'s {} is reached through the symbolic link {}",
                        link.display(),
                        path.display(),
                        at.display()
                    );
                    self.symlink_on_the_way(&at, &what, record, state, report, seen);
                    return false;
                }
            };
            let stamp = stamp(&meta);
            seen(&path, stamp);
            if record {
                continue;
            }
            if self.signature.bound(&path)
                || self.at_start.get(&path) == Some(&stamp)
                || state.accepted.get(&path) == Some(&stamp)
            {
                continue;
            }
            let verdict = if meta.file_type().is_symlink() {
                Err("it is a symbolic link".to_owned())
            } else {
                match name {
                    "hooks" => self.vet_hooks(&path),
                    "commondir" => {
                        Err("a commondir makes git read another repository's config".to_owned())
                    }
                    _ => self
                        .read(&path, gitconfig::MAX_CONFIG_BYTES)
                        .and_then(|b| gitconfig::vet(&b).map_err(|e| format!("it {e}"))),
                }
            };
            match verdict {
                Ok(()) => {
                    state.accepted.insert(path, stamp);
                }
                Err(why) => {
                    let what = format!(
                        "the index records {} as a submodule, and git would read its {} on the \
                         operator's next `git status` ({why})",
                        link.display(),
                        path.display()
                    );
                    self.quarantine(&path, &what, state, report);
                    if name != "hooks" {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// The gitdir a gitfile names, workspace-relative: inside the workspace, not the main
    /// `.git` nor anything of it outside `.git/modules` and `.git/worktrees`.
    fn gitfile_target(&self, link: &Path, dot_git: &Path) -> Result<PathBuf, String> {
        let bytes = self.read(dot_git, 4096)?;
        let text = std::str::from_utf8(&bytes).map_err(|_| "is not valid UTF-8".to_owned())?;
        let target = text
            .strip_prefix("gitdir:")
            .map(|t| t.trim_end_matches(['\n', '\r']).trim())
            .filter(|t| !t.is_empty() && !t.contains('\n'))
            .ok_or_else(|| "is not a `gitdir: <path>` line".to_owned())?;
        let target = Path::new(target);
        let joined = if target.is_absolute() {
            target
                .strip_prefix(&self.workspace)
                .map_err(|_| format!("points outside the workspace ({})", target.display()))?
                .to_path_buf()
        } else {
            link.join(target)
        };
        let gitdir = normalize(&joined)
            .ok_or_else(|| format!("points outside the workspace ({})", target.display()))?;
        let into_main = gitdir.starts_with(".git")
            && !(gitdir.starts_with(".git/modules") || gitdir.starts_with(".git/worktrees"))
            || gitdir == Path::new(".git/modules")
            || gitdir == Path::new(".git/worktrees");
        if into_main {
            return Err(format!(
                "points into the repository's own `.git` ({}), which would make the operator's \
                 repository the submodule's",
                gitdir.display()
            ));
        }
        Ok(gitdir)
    }

    /// Quarantines `path` unless the operator owns it (bound, or unchanged since the view was
    /// built); either way the call is refused and told.
    fn refuse_unless_operators(
        &self,
        path: &Path,
        what: &str,
        state: &mut State,
        report: &mut GuardReport,
    ) {
        let now = self.root.symlink_metadata(path).ok().map(|m| stamp(&m));
        let operators = self.signature.bound(path)
            || path == Path::new(".git")
            || now.is_some_and(|s| self.at_start.get(path) == Some(&s));
        if operators {
            // Reported once per state of the file, not at every check.
            if let Some(s) = now
                && state.accepted.insert(path.to_path_buf(), s) != Some(s)
            {
                report.info(format!(
                    "{what}; it was there when cordon started, so cordon leaves it to the \
                     operator: check it on the host"
                ));
            }
            return;
        }
        self.quarantine(path, what, state, report);
    }

    /// Moves `path` (workspace-relative, walked without following symlinks) into the
    /// quarantine directory, or deletes it when it cannot be moved, and says which.
    fn quarantine(&self, path: &Path, what: &str, state: &mut State, report: &mut GuardReport) {
        if (self.signature.bound(path) && !self.unvetted.contains(path))
            || path == Path::new(".git")
        {
            report.info(format!("{what}; it is the operator's, so cordon left it"));
            return;
        }
        if state.background {
            let Ok(meta) = self.root.symlink_metadata(path) else {
                return;
            };
            let now = stamp(&meta);
            state.suspects_next.insert(path.to_path_buf(), now);
            if state.suspects.get(path) != Some(&now) {
                return; // not settled yet: the next check decides
            }
        }
        let dest = self.quarantine_name(path);
        let moved = self.open_parent_beneath(path).and_then(|(dir, name)| {
            let into = self.quarantine_dir()?;
            dir.rename(&name, &into, dest.file_name().unwrap_or_default())
        });
        match moved {
            Ok(()) => report.refuse(format!(
                "{what}; cordon moved it to {}. Inspect it there; if it is what you meant, \
                 make that change on the host, outside cordon",
                dest.display()
            )),
            Err(move_error) => {
                // Never a recursive removal of a tree a confined process built (its depth is
                // the writer's choice): a file, a symlink or an empty directory.
                let deleted = self.open_parent_beneath(path).and_then(|(dir, name)| {
                    match dir.symlink_metadata(&name)?.is_dir() {
                        true => dir.remove_dir(&name),
                        false => dir.remove_file(&name),
                    }
                });
                report.refuse(match deleted {
                    Ok(()) => format!(
                        "{what}; cordon could not move it to quarantine ({move_error}) and \
                         deleted it"
                    ),
                    Err(e) => format!(
                        "{what}; cordon could neither move it to quarantine ({move_error}) nor \
                         delete it ({e}): remove it before running git here"
                    ),
                });
            }
        }
    }

    /// `.cordon/quarantine`, made and opened one component at a time without following a
    /// symlink (a command may have made `.cordon` a link elsewhere in the workspace).
    fn quarantine_dir(&self) -> std::io::Result<Dir> {
        let mut dir = self.root.try_clone()?;
        for part in Path::new(QUARANTINE_DIR).components() {
            match dir.create_dir(part.as_os_str()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            dir = dir.open_dir_nofollow(part.as_os_str())?;
        }
        Ok(dir)
    }

    /// `.cordon/quarantine/<counter>-<hash>-<tail>`: short whatever the path (a name embedding
    /// a 240-byte component cannot be made), unique within the server's life and after it.
    fn quarantine_name(&self, path: &Path) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        let bytes = path.as_os_str().as_bytes();
        let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let readable: String = String::from_utf8_lossy(bytes)
            .chars()
            .map(|c| match c {
                '/' => '_',
                c if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' => c,
                _ => '~',
            })
            .collect();
        let mut tail = readable.as_str();
        while tail.len() > TAIL_BYTES {
            let mut cut = tail.len() - TAIL_BYTES;
            while !tail.is_char_boundary(cut) {
                cut += 1;
            }
            tail = &tail[cut..];
        }
        PathBuf::from(QUARANTINE_DIR).join(format!("{stamp}-{n}-{hash:016x}-{tail}"))
    }

    /// Reads a file a confined process may have written: beneath the root, no symlink
    /// followed anywhere on the way, non-blocking, a regular file by `fstat`, at most `limit`.
    fn read(&self, path: &Path, limit: usize) -> Result<Vec<u8>, String> {
        let file = self
            .open_file_beneath(path)
            .map_err(|e| format!("it cannot be read ({e})"))?;
        let meta = file
            .metadata()
            .map_err(|e| format!("it cannot be read ({e})"))?;
        if !meta.is_file() {
            return Err("it is not a regular file".into());
        }
        if meta.len() > limit as u64 {
            return Err(format!("it is larger than {limit} bytes"));
        }
        let mut bytes = Vec::new();
        file.take(limit as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("it cannot be read ({e})"))?;
        if bytes.len() > limit {
            return Err(format!("it is larger than {limit} bytes"));
        }
        Ok(bytes)
    }

    fn open_file_beneath(&self, path: &Path) -> std::io::Result<cap_std::fs::File> {
        let (dir, name) = self.open_parent_beneath(path)?;
        let mut options = OpenOptions::new();
        options
            .read(true)
            .follow(FollowSymlinks::No)
            .custom_flags(libc::O_NONBLOCK);
        dir.open_with(&name, &options)
    }

    fn open_dir_beneath(&self, path: &Path) -> std::io::Result<Dir> {
        let (dir, name) = self.open_parent_beneath(path)?;
        dir.open_dir_nofollow(&name)
    }

    /// The directory holding `path`'s last component, opened one component at a time with
    /// no symlink followed, and that name.
    fn open_parent_beneath(&self, path: &Path) -> std::io::Result<(Dir, PathBuf)> {
        let invalid = || std::io::Error::from_raw_os_error(libc::EINVAL);
        if !is_plain(path) {
            return Err(invalid());
        }
        let name = PathBuf::from(path.file_name().ok_or_else(invalid)?);
        let mut dir = self.root.try_clone()?;
        if let Some(parent) = path.parent() {
            for c in parent.components() {
                dir = dir.open_dir_nofollow(c.as_os_str())?;
            }
        }
        Ok((dir, name))
    }

    /// `lstat` of `path`, its parents walked without following symlinks. Ok(None): it does
    /// not exist; Err(p): `p`, a parent on the way, is a symbolic link.
    fn lstat_beneath(&self, path: &Path) -> Result<Option<cap_std::fs::Metadata>, PathBuf> {
        let mut so_far = PathBuf::new();
        let mut dir = self.root.try_clone().map_err(|_| PathBuf::new())?;
        let parts: Vec<_> = path.components().collect();
        for (i, c) in parts.iter().enumerate() {
            so_far.push(c.as_os_str());
            let meta = match dir.symlink_metadata(c.as_os_str()) {
                Ok(m) => m,
                Err(_) => return Ok(None),
            };
            if i + 1 == parts.len() {
                return Ok(Some(meta));
            }
            if meta.file_type().is_symlink() {
                return Err(so_far);
            }
            if !meta.is_dir() {
                return Ok(None);
            }
            dir = match dir.open_dir_nofollow(c.as_os_str()) {
                Ok(d) => d,
                Err(_) => return Ok(None),
            };
        }
        Ok(None)
    }
}

/// Which of [`VETTED_CONFIGS`] the policy protects and cordon can vet (absent, or a regular
/// file it can read and parse), with their content now; one it cannot read stays bound
/// read-only, as every other protected entry.
type Baselines = HashMap<PathBuf, Option<(Stamp, Vec<u8>)>>;

fn vetted_configs(root: &Dir, patterns: &[String]) -> (Vec<PathBuf>, Baselines) {
    let mut writable = Vec::new();
    let mut configs = HashMap::new();
    if !root
        .symlink_metadata(".git")
        .is_ok_and(|m| m.file_type().is_dir())
    {
        return (writable, configs);
    }
    for path in VETTED_CONFIGS {
        let parts: Vec<&str> = path.split('/').collect();
        if super::protect::protected_entry(patterns, &parts) != Some(*path) {
            continue;
        }
        let path = PathBuf::from(path);
        let baseline = match root.symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(_) => continue,
            Ok(meta) if !meta.is_file() => continue,
            Ok(meta) => {
                let mut options = OpenOptions::new();
                options
                    .read(true)
                    .follow(FollowSymlinks::No)
                    .custom_flags(libc::O_NONBLOCK);
                let Ok(file) = root.open_with(&path, &options) else {
                    continue;
                };
                let mut bytes = Vec::new();
                let limit = gitconfig::MAX_CONFIG_BYTES as u64;
                if file.take(limit + 1).read_to_end(&mut bytes).is_err()
                    || bytes.len() as u64 > limit
                    || std::str::from_utf8(&bytes)
                        .ok()
                        .and_then(|t| gitconfig::parse(t).ok())
                        .is_none()
                {
                    continue;
                }
                Some((stamp(&meta), bytes))
            }
        };
        writable.push(path.clone());
        configs.insert(path, baseline);
    }
    (writable, configs)
}

/// Whether the change from `before` to `after` only adds or changes keys that run nothing
/// (removals are always fine). Keys are compared as (key, value) pairs, so a changed value of
/// a key off the list (`core.hooksPath` pointed elsewhere) counts as added.
fn vet_change(before: &[u8], after: &[u8]) -> Result<(), String> {
    if after.len() > gitconfig::MAX_CONFIG_BYTES {
        return Err(format!(
            "it is larger than {} bytes",
            gitconfig::MAX_CONFIG_BYTES
        ));
    }
    let text = std::str::from_utf8(after).map_err(|_| "it is not valid UTF-8".to_owned())?;
    let after = gitconfig::parse(text)
        .map_err(|line| format!("it is not valid git config syntax (line {line})"))?;
    let before = std::str::from_utf8(before)
        .ok()
        .and_then(|t| gitconfig::parse(t).ok())
        .unwrap_or_default();
    let mut old: HashMap<(String, Option<String>), usize> = HashMap::new();
    for e in &before {
        *old.entry((e.key(), e.value.clone())).or_default() += 1;
    }
    for e in &after {
        let slot = old.entry((e.key(), e.value.clone())).or_default();
        if *slot > 0 {
            *slot -= 1;
            continue;
        }
        if !e.is_allowed() {
            return Err(format!(
                "it sets `{}`, which is not on cordon's list of git keys that run nothing",
                e.key()
            ));
        }
    }
    Ok(())
}

fn stamp(meta: &cap_std::fs::Metadata) -> Stamp {
    (
        meta.dev(),
        meta.ino(),
        meta.ctime(),
        meta.ctime_nsec(),
        meta.len(),
    )
}

/// Only normal components (no `..`, `.`, root): what the index and the protected listing
/// give, and the only form this module walks.
fn is_plain(path: &Path) -> bool {
    path.components().all(|c| matches!(c, Component::Normal(_)))
}

/// `path` with `.` and `..` resolved lexically; None when it climbs above the root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(ws: &Path) -> GitGuard {
        let root = Dir::open_ambient_dir(ws, cap_std::ambient_authority()).unwrap();
        let patterns: Vec<String> = super::super::GIT_CONTROL_PATHS
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        GitGuard::new(root, ws, &patterns).0
    }

    /// A submodule `sub` recorded in `.git/index` (a v2 index git wrote), with a config that
    /// names a command.
    fn plant(ws: &Path) {
        std::fs::write(
            ws.join(".git/index"),
            include_bytes!("../../fuzz/seeds/git_index/index-v2-gitlink"),
        )
        .unwrap();
        std::fs::create_dir_all(ws.join("sub/.git")).unwrap();
        std::fs::write(ws.join("sub/.git/config"), "[core]\n\tfsmonitor = x\n").unwrap();
    }

    #[test]
    fn what_is_there_at_start_is_the_operators_but_a_new_view_launders_nothing() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join(".git")).unwrap();
        let before = guard(t.path());
        plant(t.path());
        // A server started now: the submodule is the operator's, left alone.
        let fresh = guard(t.path());
        let report = fresh.check();
        assert!(!report.refused, "{report:?}");
        assert!(t.path().join("sub/.git/config").exists());
        // A view rebuilt while the server runs: the plant came after the first view, so the
        // successor does not take it for the operator's.
        let root = Dir::open_ambient_dir(t.path(), cap_std::ambient_authority()).unwrap();
        let (next, _) = before.successor(root);
        let report = next.check();
        assert!(report.refused, "{report:?}");
        assert!(!t.path().join("sub/.git/config").exists());
        let moved = std::fs::read_dir(t.path().join(QUARANTINE_DIR))
            .unwrap()
            .count();
        assert_eq!(moved, 1);
    }

    #[test]
    fn config_changes_are_vetted_by_what_they_add() {
        let base = b"[core]\n\tbare = false\n\thooksPath = .husky\n";
        let email = b"[core]\n\tbare = false\n\thooksPath = .husky\n[user]\n\temail = a@b\n";
        assert_eq!(vet_change(base, email), Ok(()));
        let remote = b"[core]\n\tbare = false\n\thooksPath = .husky\n[remote \"o\"]\n\t\
            url = x\n\tfetch = y\n[branch \"m\"]\n\tremote = o\n\tmerge = refs/heads/m\n";
        assert_eq!(vet_change(base, remote), Ok(()));
        // Removing a key runs nothing; re-pointing one off the list may.
        assert_eq!(vet_change(base, b"[core]\n\tbare = false\n"), Ok(()));
        assert!(vet_change(base, b"[core]\n\tbare = false\n\thooksPath = /x\n").is_err());
        let fsmonitor = b"[core]\n\tbare = false\n\thooksPath = .husky\n\tfsmonitor = x\n";
        assert!(vet_change(base, fsmonitor).is_err());
        assert!(vet_change(base, b"\xff").is_err());
    }

    #[test]
    fn quarantine_names_are_short_whatever_the_path() {
        let t = tempfile::tempdir().unwrap();
        let g = guard(t.path());
        let mut long = b".git/modules/\xff".to_vec();
        long.extend(std::iter::repeat_n(b'a', 240));
        long.extend(b"/hooks");
        let name = g.quarantine_name(Path::new(OsStr::from_bytes(&long)));
        let file = name.file_name().unwrap().as_bytes();
        assert!(file.len() <= 200, "{}", file.len());
        assert!(file.ends_with(b"aaaa_hooks"), "{name:?}");
    }

    #[test]
    fn gitfiles_into_the_main_git_dir_or_outside_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join(".git/modules/lib")).unwrap();
        std::fs::create_dir_all(ws.join("s")).unwrap();
        let g = guard(&ws);
        for (content, ok) in [
            ("gitdir: ../.git\n", false),
            ("gitdir: ../.git/\n", false),
            ("gitdir: ./../.git/modules/..\n", false),
            ("gitdir: ../../elsewhere\n", false),
            ("gitdir: /tmp/evil.git\n", false),
            ("gitdir: ../.git/modules/lib\n", true),
            ("gitdir: ../other-repo\n", true),
        ] {
            std::fs::write(ws.join("s/.git"), content).unwrap();
            let got = g.gitfile_target(Path::new("s"), Path::new("s/.git"));
            assert_eq!(got.is_ok(), ok, "{content:?}: {got:?}");
        }
        let abs = format!("gitdir: {}/.git/modules/lib\n", ws.display());
        std::fs::write(ws.join("s/.git"), abs).unwrap();
        assert_eq!(
            g.gitfile_target(Path::new("s"), Path::new("s/.git"))
                .unwrap(),
            Path::new(".git/modules/lib")
        );
    }
}
