//! Recording the workspace as it is: a walk beneath the workspace handle that never follows a
//! symlink, reusing what the previous record knew of every file whose `lstat` did not change.
//!
//! Owns: reading directories, link targets and file contents (into the store's blobs) from a
//! tree confined code may be changing at the same moment. Every directory is opened with
//! `O_NOFOLLOW | O_DIRECTORY` by one name relative to its parent's descriptor, so a symlink
//! swapped in anywhere is recorded as the link it is, never walked through; files are opened
//! `O_NOFOLLOW | O_NONBLOCK` (a FIFO never blocks the walk) and read only after `fstat` on the
//! open descriptor says the same regular file; a file over `max_file_bytes` (a huge sparse
//! one included) is recorded by its size alone. A file that changes while it is read is read
//! again, and if it never holds still its record is kept `racy` so the next scan reads it anew.
//!
//! Does not own: which paths are covered (`coverage`), nor the store's layout (`store`).

use super::CheckpointError;
use super::coverage::{Coverage, DirRules, never_recorded};
use super::entry::{Cached, Change, Entry, Kind, Manifest, StatKey};
use super::store::Store;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use sha2::Digest;
use std::ffi::CStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Entries whose change time is this close to the scan's start are not trusted by stat next
/// time: a file system's clock ticks coarsely (a jiffy), so a write just after the read may
/// leave every stat field as it was.
const RACY_MARGIN_NS: i128 = 100_000_000;

/// How often a file that changes under the reader is read again before it is recorded racy.
const READ_ATTEMPTS: usize = 3;

/// Most bytes of one `.gitignore` the scan reads (git's own rules are small; a huge one is a
/// file confined code wrote to slow the server down).
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;

/// What one scan needs besides the tree.
pub(crate) struct Scan<'a> {
    pub store: &'a Store,
    pub coverage: &'a Coverage,
    pub max_file_bytes: u64,
}

/// What a scan found: the tree, how many bytes of new blobs it stored, and how it differs
/// from the previous record.
pub(crate) struct Scanned {
    pub manifest: Manifest,
    pub new_bytes: u64,
    /// Every path whose entry differs from the previous record's, in path order.
    pub changes: Vec<Change>,
    /// A directory of the tree is on another file system than the root (a mount inside the
    /// workspace): a watch of the root's file system does not see changes there.
    pub other_file_system: bool,
    /// A file read again had more than one link: its other names may be in directories a
    /// walk of named directories did not read (a write through one name is an event in that
    /// name's directory only), so such a walk must be followed by a whole one.
    pub linked_file_changed: bool,
}

impl Scanned {
    /// This scan (of named directories) followed by `whole`, a whole walk that started from
    /// this scan's tree: the tree is the whole walk's, and each path's change runs from what
    /// it was before this scan to what the whole walk found.
    pub(crate) fn then(self, whole: Scanned) -> Scanned {
        let mut net: std::collections::BTreeMap<String, Change> = self
            .changes
            .into_iter()
            .map(|c| (c.path.clone(), c))
            .collect();
        for change in whole.changes {
            match net.get_mut(&change.path) {
                Some(first) => first.after = change.after,
                None => {
                    net.insert(change.path.clone(), change);
                }
            }
        }
        let changes: Vec<Change> = net.into_values().filter(|c| c.before != c.after).collect();
        Scanned {
            manifest: whole.manifest,
            new_bytes: self.new_bytes + whole.new_bytes,
            changes,
            other_file_system: self.other_file_system || whole.other_file_system,
            linked_file_changed: false,
        }
    }
}

fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

fn key(st: &rustix::fs::Stat) -> StatKey {
    StatKey {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime_ns: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
        ctime_ns: st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128,
        mode: st.st_mode,
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

pub(super) use crate::confine::scratch::{open_dir_nofollow, open_file_nofollow};

impl Scan<'_> {
    /// Records the tree beneath `root`, given the previous record (`previous`, taken: its
    /// entries move into the new tree where nothing changed, so nothing is copied, and what is
    /// left of it at the end was deleted).
    pub(crate) fn run(
        &self,
        root: BorrowedFd<'_>,
        previous: Manifest,
    ) -> Result<Scanned, CheckpointError> {
        let started = now_ns();
        let mut walk = Walk {
            scan: self,
            started,
            manifest: Manifest::new(),
            new_bytes: 0,
            previous,
            changes: Vec::new(),
            root_dev: None,
            other_file_system: false,
            linked_file_changed: false,
            base: None,
        };
        let root = reopen_root(root)?;
        walk.root_dev = rustix::fs::fstat(&root).ok().map(|st| st.st_dev);
        let mut stack = Vec::new();
        walk.dir(root.as_fd(), "", &mut stack, false)?;
        Ok(walk.scanned(Manifest::new()))
    }
}

/// A readable descriptor of the workspace's root (the handle kept may be `O_PATH`).
fn reopen_root(root: BorrowedFd<'_>) -> Result<OwnedFd, CheckpointError> {
    rustix::fs::openat(
        root,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| CheckpointError::Workspace(e.into()))
}

/// The part of the previous record a walk of named directories has not looked at, and
/// the directories it walked whole.
impl Scan<'_> {
    /// Records the tree beneath `root` reading only the directories `dirs` (workspace-
    /// relative, `""` the root), where the kernel reported every change since `previous` was
    /// recorded: each one's entries are read again, a directory found there that is new (or
    /// another directory under an old name) is walked whole, and what the previous record
    /// held beneath a name that is gone is deleted. The rest of `previous` is kept as it is.
    pub(crate) fn run_dirs(
        &self,
        root: BorrowedFd<'_>,
        previous: Manifest,
        dirs: &super::Dirs,
    ) -> Result<Scanned, CheckpointError> {
        let root = reopen_root(root)?;
        let mut walk = Walk {
            scan: self,
            started: now_ns(),
            manifest: Manifest::new(),
            new_bytes: 0,
            previous: Manifest::new(),
            changes: Vec::new(),
            root_dev: rustix::fs::fstat(&root).ok().map(|st| st.st_dev),
            other_file_system: false,
            linked_file_changed: false,
            base: Some(Base {
                rest: previous,
                walked: Vec::new(),
            }),
        };
        // In path order, a directory comes before what is beneath it, so a directory walked
        // whole is known before its subdirectories come up.
        for (dir, names) in dirs {
            let covered_already = walk
                .base
                .as_ref()
                .is_some_and(|b| b.walked.iter().any(|w| within(dir, w)));
            if !covered_already {
                walk.named_dir(root.as_fd(), dir, names)?;
            }
        }
        // A directory that was there and is gone takes what was beneath it along.
        let gone: Vec<String> = walk
            .previous
            .iter()
            .filter(|(_, old)| old.entry.is_dir())
            .map(|(path, _)| path.clone())
            .collect();
        for dir in gone {
            walk.take_subtree(&dir);
        }
        let base = walk.base.take().map(|b| b.rest).unwrap_or_default();
        Ok(walk.scanned(base))
    }
}

struct Base {
    rest: Manifest,
    walked: Vec<String>,
}

/// Whether `path` is `dir` or beneath it.
fn within(path: &str, dir: &str) -> bool {
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The paths of `manifest` strictly beneath `dir` (`""`: every path).
fn beneath<'m>(manifest: &'m Manifest, dir: &str) -> impl Iterator<Item = &'m String> + 'm {
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    manifest
        .range::<String, _>(prefix.clone()..)
        .map(|(path, _)| path)
        .take_while(move |path| path.starts_with(&prefix))
}

struct Walk<'a, 'b> {
    scan: &'a Scan<'b>,
    started: i128,
    manifest: Manifest,
    new_bytes: u64,
    /// What is left of the previous record: the paths not seen (yet). In a walk of named
    /// directories, only the part of it those directories hold (moved in from `base`).
    previous: Manifest,
    /// A walk of named directories: the rest of the previous record, kept as it is unless a
    /// directory read shows that part of it moved into `previous` must be looked at.
    base: Option<Base>,
    changes: Vec<Change>,
    root_dev: Option<u64>,
    other_file_system: bool,
    linked_file_changed: bool,
}

impl Walk<'_, '_> {
    /// What the walk found, its tree added to `kept` (what a walk of named directories did
    /// not look at): what is left of the previous record was deleted.
    fn scanned(self, mut kept: Manifest) -> Scanned {
        let mut changes = self.changes;
        changes.extend(self.previous.into_iter().map(|(path, old)| Change {
            path,
            before: Some(old.entry),
            after: None,
        }));
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        let manifest = if kept.is_empty() {
            self.manifest
        } else {
            kept.extend(self.manifest);
            kept
        };
        Scanned {
            manifest,
            new_bytes: self.new_bytes,
            changes,
            other_file_system: self.other_file_system,
            linked_file_changed: self.linked_file_changed,
        }
    }

    /// Moves what the previous record held beneath `dir` from the untouched rest into what
    /// this walk compares against (a walk of named directories only).
    fn take_subtree(&mut self, dir: &str) {
        let Some(base) = self.base.as_mut() else {
            return;
        };
        let paths: Vec<String> = beneath(&base.rest, dir).cloned().collect();
        for path in paths {
            if let Some(old) = base.rest.remove(&path) {
                self.previous.insert(path, old);
            }
        }
        base.walked.push(dir.to_owned());
    }

    /// Reads one directory the kernel named: opened one component at a time from the root
    /// without following a link, with the ignore rules of every directory above it; its own
    /// entry and its entries are recorded again. Gone or no longer a directory: left to its
    /// parent's read (its removal was an event there).
    fn named_dir(
        &mut self,
        root: BorrowedFd<'_>,
        dir: &str,
        names: &std::collections::BTreeSet<String>,
    ) -> Result<(), CheckpointError> {
        let coverage = self.scan.coverage;
        let mut stack = vec![self.rules(root, "")];
        let mut fd: Option<OwnedFd> = None;
        let mut rel = String::new();
        let mut ignored = false;
        let mut covered = true;
        let mut own_stat = None;
        for name in dir.split('/').filter(|c| !c.is_empty()) {
            let parent_rel = rel.clone();
            rel = join(&parent_rel, name);
            if never_recorded(parent_rel.is_empty(), name) {
                return Ok(());
            }
            ignored = ignored || Coverage::ignored(&stack, &rel, true);
            covered = !ignored || coverage.included(&rel, true);
            if !covered && !coverage.may_include_beneath(&rel) {
                return Ok(());
            }
            let Ok(cname) = std::ffi::CString::new(name) else {
                return Ok(());
            };
            let parent = fd.as_ref().map_or(root, |f| f.as_fd());
            let Ok(sub) = open_dir_nofollow(parent, &cname) else {
                return Ok(());
            };
            own_stat = rustix::fs::fstat(&sub).ok();
            let rules = if ignored {
                None
            } else {
                self.rules(sub.as_fd(), &rel)
            };
            stack.push(rules);
            fd = Some(sub);
        }
        let here = fd.as_ref().map_or(root, |f| f.as_fd());
        if let Some(st) = own_stat {
            if self.root_dev != Some(st.st_dev) {
                self.other_file_system = true;
            }
            // Its own entry (a mode change is reported in the directory itself), unless its
            // parent's read already recorded it.
            if covered && !self.manifest.contains_key(&rel) {
                if let Some(old) = self.base.as_mut().and_then(|b| b.rest.remove(&rel)) {
                    self.previous.insert(rel.clone(), old);
                }
                self.put(rel.clone(), Kind::Dir, &st, false);
            }
        }
        // Its entries, against what the previous record held directly in it.
        if let Some(base) = self.base.as_mut() {
            let children: Vec<String> = beneath(&base.rest, &rel)
                .filter(|p| !p[rel.len()..].trim_start_matches('/').contains('/'))
                .cloned()
                .collect();
            for path in children {
                if let Some(old) = base.rest.remove(&path) {
                    self.previous.insert(path, old);
                }
            }
        }
        // The root's rules are the first on the stack; `entries` expects those of `dir`
        // last, which they are.
        self.entries(here, &rel, &mut stack, ignored, Some(names))
    }

    /// Adds `path` to the new tree, noting how it differs from the previous record.
    fn keep(&mut self, path: String, cached: Cached) {
        match self.previous.remove(&path) {
            Some(old) => {
                if old.entry.is_dir() && !cached.entry.is_dir() {
                    // A directory replaced by something else: what was beneath it is gone.
                    self.take_subtree(&path);
                }
                if old.entry != cached.entry {
                    self.changes.push(Change {
                        path: path.clone(),
                        before: Some(old.entry),
                        after: Some(cached.entry.clone()),
                    });
                }
            }
            None => self.changes.push(Change {
                path: path.clone(),
                before: None,
                after: Some(cached.entry.clone()),
            }),
        }
        self.manifest.insert(path, cached);
    }

    /// Records the entries of the directory `fd` (at `rel`). `ignored`: the directory itself
    /// is ignored by git, so only `include` brings anything in it back.
    fn dir(
        &mut self,
        fd: BorrowedFd<'_>,
        rel: &str,
        stack: &mut Vec<Option<DirRules>>,
        ignored: bool,
    ) -> Result<(), CheckpointError> {
        let rules = if ignored { None } else { self.rules(fd, rel) };
        stack.push(rules);
        let result = self.entries(fd, rel, stack, ignored, None);
        stack.pop();
        result
    }

    /// The gitignore rules of the directory `fd`: its `.gitignore`, and at the root the
    /// operator's `.git/info/exclude` (read through `.git` only when that is a real
    /// directory).
    fn rules(&self, fd: BorrowedFd<'_>, rel: &str) -> Option<DirRules> {
        let own = read_small(fd, c".gitignore");
        let exclude = if rel.is_empty() {
            open_dir_nofollow(fd, c".git")
                .and_then(|git| open_dir_nofollow(git.as_fd(), c"info"))
                .ok()
                .and_then(|info| read_small(info.as_fd(), c"exclude"))
        } else {
            None
        };
        let texts: Vec<&str> = exclude
            .iter()
            .chain(own.iter())
            .map(String::as_str)
            .collect();
        if texts.is_empty() {
            return None;
        }
        DirRules::new(rel, &texts)
    }

    /// Records the entries of the directory `fd` (at `rel`, whose rules are on `stack`), and
    /// walks its subdirectories whole, unless `shallow` (the names of the entries events
    /// named there): then a subdirectory no event named, and that is the same directory as
    /// before (same device and inode), is recorded by its own entry only.
    fn entries(
        &mut self,
        fd: BorrowedFd<'_>,
        rel: &str,
        stack: &mut Vec<Option<DirRules>>,
        ignored: bool,
        shallow: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<(), CheckpointError> {
        let coverage = self.scan.coverage;
        let mut names = Vec::new();
        let reader =
            rustix::fs::Dir::read_from(fd).map_err(|e| CheckpointError::Workspace(e.into()))?;
        for entry in reader {
            let entry = entry.map_err(|e| CheckpointError::Workspace(e.into()))?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            names.push(name.to_owned());
        }
        for cname in names {
            let Ok(name) = cname.to_str() else {
                // A name that is not UTF-8 cannot be put back by path; it is listed as not
                // covered (lossily spelled) so nobody believes it is.
                let path = join(rel, &cname.to_string_lossy());
                self.uncovered(path, "a name that is not UTF-8", 0);
                continue;
            };
            if never_recorded(rel.is_empty(), name) {
                continue;
            }
            let path = join(rel, name);
            let st = match rustix::fs::statat(fd, cname.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Deleted since the directory was read: it is not there.
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(CheckpointError::Workspace(e.into())),
            };
            let file_type = FileType::from_raw_mode(st.st_mode);
            let is_dir = file_type == FileType::Directory;
            let now_ignored = ignored || Coverage::ignored(stack, &path, is_dir);
            let covered = !now_ignored || coverage.included(&path, is_dir);
            if is_dir {
                if !covered && !coverage.may_include_beneath(&path) {
                    continue;
                }
                let sub = match open_dir_nofollow(fd, &cname) {
                    Ok(sub) => sub,
                    // Replaced by something else since the stat: recorded next time.
                    Err(_) => continue,
                };
                let st =
                    rustix::fs::fstat(&sub).map_err(|e| CheckpointError::Workspace(e.into()))?;
                if self.root_dev != Some(st.st_dev) {
                    self.other_file_system = true;
                }
                if let Some(named) = shallow {
                    // Named by an event (made, removed, renamed: perhaps another directory
                    // under a reused inode number), or not the inode it was: walked whole.
                    let same = !named.contains(name)
                        && self.previous.get(&path).is_some_and(|old| {
                            old.entry.is_dir()
                                && old.stat.dev == st.st_dev
                                && old.stat.ino == st.st_ino
                        });
                    if same && covered {
                        self.put(path, Kind::Dir, &st, false);
                        continue;
                    }
                    // New here, or another directory under the old name: walked whole,
                    // against what the previous record held beneath that name.
                    self.take_subtree(&path);
                }
                if covered {
                    self.put(path.clone(), Kind::Dir, &st, false);
                }
                // Inside a covered directory of an ignored tree (brought back by `include`),
                // everything is covered: `included` matches any parent.
                self.dir(sub.as_fd(), &path, stack, now_ignored)?;
                continue;
            }
            if !covered {
                continue;
            }
            if let Some(old) = self.previous.get(&path)
                && !old.racy
                && old.stat == key(&st)
                && let Some(old) = self.previous.remove(&path)
            {
                // Unchanged: moved, not copied.
                self.manifest.insert(path, old);
                continue;
            }
            match file_type {
                FileType::RegularFile => {
                    if st.st_nlink > 1 {
                        self.linked_file_changed = true;
                    }
                    self.file(fd, &cname, path, &st)?
                }
                FileType::Symlink => {
                    match rustix::fs::readlinkat(fd, cname.as_c_str(), Vec::new()) {
                        Ok(target) => match target.into_string() {
                            Ok(target) => self.put(path, Kind::Symlink { target }, &st, false),
                            Err(_) => {
                                self.uncovered(path, "a symlink whose target is not UTF-8", 0)
                            }
                        },
                        Err(rustix::io::Errno::NOENT) => {}
                        // Swapped for something else since the stat: recorded next time.
                        Err(_) => {}
                    }
                }
                FileType::Fifo => self.put(path, Kind::Fifo, &st, false),
                FileType::Socket => self.uncovered(path, "a socket", 0),
                _ => self.uncovered(path, "a device node", 0),
            }
        }
        Ok(())
    }

    fn put(&mut self, path: String, kind: Kind, st: &rustix::fs::Stat, racy: bool) {
        let stat = key(st);
        let racy = racy || stat.ctime_ns + RACY_MARGIN_NS >= self.started;
        let mode = if matches!(kind, Kind::Symlink { .. }) {
            0o777
        } else {
            st.st_mode & 0o7777
        };
        self.keep(
            path,
            Cached {
                entry: Entry { kind, mode },
                stat,
                racy,
            },
        );
    }

    fn uncovered(&mut self, path: String, what: &str, size: u64) {
        self.keep(
            path,
            Cached {
                entry: Entry {
                    kind: Kind::Uncovered {
                        what: what.to_owned(),
                        size,
                    },
                    mode: 0,
                },
                stat: StatKey {
                    dev: 0,
                    ino: 0,
                    size,
                    mtime_ns: 0,
                    ctime_ns: 0,
                    mode: 0,
                },
                racy: true,
            },
        );
    }

    /// Records the regular file `name` (lstat'ed as `st`), reading it into a blob unless it is
    /// over the size bound.
    fn file(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        path: String,
        st: &rustix::fs::Stat,
    ) -> Result<(), CheckpointError> {
        let max = self.scan.max_file_bytes;
        if st.st_size as u64 > max {
            let mut over = Cached {
                entry: Entry {
                    kind: Kind::Uncovered {
                        what: format!(
                            "a file of {} bytes, over [checkpoints] max_file_bytes ({max})",
                            st.st_size
                        ),
                        size: st.st_size as u64,
                    },
                    mode: st.st_mode & 0o7777,
                },
                stat: key(st),
                racy: false,
            };
            over.racy = over.stat.ctime_ns + RACY_MARGIN_NS >= self.started;
            self.keep(path, over);
            return Ok(());
        }
        for attempt in 1..=READ_ATTEMPTS {
            let file = match open_file_nofollow(dir, name) {
                Ok(f) => f,
                // Gone, or swapped for a link or a directory since the stat: what is there
                // now is recorded by the next scan; this one leaves it out.
                Err(_) => return Ok(()),
            };
            let before =
                rustix::fs::fstat(&file).map_err(|e| CheckpointError::Workspace(e.into()))?;
            if FileType::from_raw_mode(before.st_mode) != FileType::RegularFile
                || before.st_ino != st.st_ino
                || before.st_size as u64 > max
            {
                return Ok(());
            }
            let (sha, size, new) = self.copy(
                std::fs::File::from(file.try_clone().map_err(CheckpointError::Workspace)?),
                max,
            )?;
            let after =
                rustix::fs::fstat(&file).map_err(|e| CheckpointError::Workspace(e.into()))?;
            let still = key(&before) == key(&after) && size == before.st_size as u64;
            if still || attempt == READ_ATTEMPTS {
                if new {
                    self.new_bytes += size;
                }
                self.put(path, Kind::File { sha256: sha, size }, &after, !still);
                return Ok(());
            }
        }
        Ok(())
    }

    /// Copies at most `max` bytes of `file` into a new blob; returns its hash, its size and
    /// whether the store did not hold it yet.
    fn copy(&self, file: std::fs::File, max: u64) -> Result<(String, u64, bool), CheckpointError> {
        let store = self.scan.store;
        let (tmp, mut out) = store.blob_writer()?;
        let io = |e| CheckpointError::Store(store.path().to_path_buf(), e);
        let mut hasher = sha2::Sha256::new();
        let mut reader = file.take(max);
        let mut buf = vec![0u8; 64 * 1024];
        let mut size = 0u64;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(CheckpointError::Workspace(e)),
            };
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(io)?;
            size += n as u64;
        }
        drop(out);
        let sha: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let new = store.adopt_blob(&tmp, &sha)?;
        Ok((sha, size, new))
    }
}

/// The text of a small file `name` of `dir` (an ignore file), never through a symlink (git
/// itself refuses a symlinked `.gitignore`), or None.
fn read_small(dir: BorrowedFd<'_>, name: &CStr) -> Option<String> {
    let fd = open_file_nofollow(dir, name).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return None;
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(MAX_IGNORE_FILE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}
