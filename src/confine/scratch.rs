//! Scratch directories in the temp dir, and removing those of cordon processes that died.
//!
//! Owns the names and the lifetime of the directories a cordon process keeps in `$TMPDIR`:
//! the per-call temporary root, the workers' private root and the sandbox init's view root.
//! A process that ends normally removes them as they drop. One that is SIGKILLed (the OOM
//! killer, `kill -9`, a supervisor giving up) cannot, and on a long-running host those
//! directories pile up, so each is named after an *owner* whose liveness the kernel keeps:
//!
//! * `cordon-owner-<tag>` is a file the process holds an exclusive `flock` on for as long as
//!   one of its scratch directories exists. The kernel drops the lock when the process dies,
//!   however it dies, and it is the same lock in every pid namespace that shares the temp dir
//!   (a pid would not be: two containers sharing `/tmp` reuse each other's pids).
//! * Its directories are `cordon-<kind>-<tag>-<random>`.
//! * [`sweep_stale`] (run by each new process, in the background) takes every owner lock that
//!   is free, removes that owner's directories, then the lock file. A held lock is a live
//!   owner, whose directories are never touched.
//!
//! Only entries owned by this process's user are considered, only real directories (never a
//! symlink) are removed, and the removal follows no symlink inside them, so a name planted in
//! a shared `/tmp` cannot steer it elsewhere. Directories from before owner tags
//! (`cordon-tmp-<random>`) name no owner and are left alone.
//!
//! Everything confined processes could write into (these directories, a call's TMPDIR, an
//! interpreter session's private directory) is removed with [`remove_tree`], never with
//! `std::fs::remove_dir_all` (nor `tempfile::TempDir`, which uses it): that one recurses once
//! per level, and a command that makes a 30,000-deep directory chain in its TMPDIR overflowed
//! the removing thread's stack and aborted the server. [`remove_tree`] walks with a heap stack
//! and one open directory at a time, so depth costs memory proportional to the names, not
//! stack or descriptors.
//!
//! It does not decide what goes inside the directories (that is `confine` and `sandbox`).

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::{CStr, CString};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

/// The kinds of scratch directory, as they appear in names (`cordon-<kind>-<tag>-…`).
pub(crate) const KINDS: [&str; 3] = ["tmp", "private", "view"];

const OWNER_PREFIX: &str = "cordon-owner-";

/// A scratch directory of this process: removed when dropped, and by a later process's
/// [`sweep_stale`] if this one dies first.
#[derive(Debug)]
pub(crate) struct ScratchDir {
    // Field order is drop order: the directory goes before its owner's lock is let go.
    dir: RemovedOnDrop,
    _owner: Arc<Owner>,
}

impl ScratchDir {
    /// Makes `cordon-<kind>-<tag>-<random>` in the temp dir, owned by this process.
    pub(crate) fn new(kind: &'static str) -> io::Result<Self> {
        debug_assert!(KINDS.contains(&kind));
        let tmp = std::env::temp_dir();
        let owner = process_owner(&tmp)?;
        Self::with_owner(&tmp, kind, owner)
    }

    fn with_owner(tmp: &Path, kind: &str, owner: Arc<Owner>) -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("cordon-{kind}-{}-", owner.tag))
            .tempdir_in(tmp)?;
        Ok(Self {
            dir: RemovedOnDrop::take(dir),
            _owner: owner,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A directory removed with [`remove_tree`] when dropped: `tempfile::TempDir` for trees
/// confined processes write into.
#[derive(Debug)]
pub struct RemovedOnDrop(PathBuf);

impl RemovedOnDrop {
    /// Takes over a `TempDir` (which would otherwise remove itself recursively).
    pub fn take(dir: tempfile::TempDir) -> Self {
        Self(dir.keep())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        if let Err(e) = remove_tree(&self.0) {
            tracing::warn!("could not remove {}: {e}", self.0.display());
        }
    }
}

/// How often a directory may be found non-empty again after it was emptied (something is
/// still writing into it) before the removal gives up.
const MAX_REFILLS: usize = 10_000;

/// One directory on the way down: its name in its parent, its identity, and the
/// subdirectories still to remove.
struct Level {
    name: Option<CString>,
    id: (u64, u64),
    pending: Vec<CString>,
}

/// Removes the directory `path` and everything below it, following no symlink (a symlink
/// is removed as itself), iteratively: the walk keeps one directory open and a heap stack of
/// names, so no depth exhausts the stack or the descriptor table. Going back up is by `..`
/// from the directory just emptied, checked against the device and inode seen on the way
/// down, so a directory moved meanwhile stops the removal instead of steering it outside
/// `path`. A missing `path` is not an error; a `path` that is not a directory is.
pub(crate) fn remove_tree(path: &Path) -> io::Result<()> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut cur = match rustix::fs::open(path, dir_flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut levels = vec![Level {
        name: None,
        id: identity(&cur)?,
        pending: empty_out(&cur)?,
    }];
    let mut refills = 0;
    loop {
        let top = levels
            .last_mut()
            .expect("the root level stays until the end");
        if let Some(name) = top.pending.pop() {
            // Every directory is entered and emptied before its `rmdir`, never tried full
            // first: a failed `rmdir` still prunes the dentry cache of the whole subtree
            // beneath it, which made a deep chain's removal quadratic (measured: 0.6 ms a
            // level at 40,000 levels, over 30 s in all).
            match rustix::fs::openat(&cur, &name, dir_flags, Mode::empty()) {
                Ok(child) => {
                    let level = Level {
                        id: identity(&child)?,
                        pending: empty_out(&child)?,
                        name: Some(name),
                    };
                    levels.push(level);
                    cur = child;
                }
                Err(Errno::NOENT) => {}
                // Replaced by a file or a symlink since it was listed: remove that.
                Err(Errno::NOTDIR | Errno::LOOP) => {
                    match rustix::fs::unlinkat(&cur, &name, AtFlags::empty()) {
                        Ok(()) | Err(Errno::NOENT) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            }
            continue;
        }
        let done = levels.pop().expect("just looked at it");
        let Some(name) = done.name else {
            drop(cur);
            return match fs::remove_dir(path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            };
        };
        let parent = rustix::fs::openat(&cur, c"..", dir_flags, Mode::empty())?;
        let expected = levels.last().expect("a named level has a parent").id;
        if identity(&parent)? != expected {
            return Err(io::Error::other(
                "a directory was moved while its tree was being removed; the rest is left",
            ));
        }
        cur = parent;
        match rustix::fs::unlinkat(&cur, &name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(Errno::NOTEMPTY | Errno::EXIST) if refills < MAX_REFILLS => {
                // Something wrote into it after it was emptied: empty it again.
                refills += 1;
                levels.last_mut().expect("parent level").pending.push(name);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Opens the directory `name` of `parent` for reading, never through a symlink (the walks over
/// trees a confined process wrote: checkpoints, the search for git repositories).
pub(crate) fn open_dir_nofollow(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &CStr,
) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Opens the file `name` of `parent` for reading: never through a symlink, never blocking on
/// a FIFO put there since it was looked at, never becoming a controlling terminal.
pub(crate) fn open_file_nofollow(
    parent: std::os::fd::BorrowedFd<'_>,
    name: &CStr,
) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )?)
}

/// Removes the entry `name` of `dir` and everything beneath it ([`remove_tree`]), through
/// the handle on `dir` (a magic link to it): a directory renamed meanwhile cannot steer the
/// removal elsewhere.
pub(crate) fn remove_beneath(dir: std::os::fd::BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let mut path = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
    path.extend_from_slice(name.to_bytes());
    remove_tree(Path::new(std::ffi::OsStr::from_bytes(&path)))
}

/// Empties the directory `dir`, which stays.
pub(crate) fn empty_dir(dir: &OwnedFd) -> io::Result<()> {
    for name in empty_out(dir)? {
        remove_beneath(dir.as_fd(), &name)?;
    }
    Ok(())
}

/// Device and inode of an open directory.
fn identity(fd: &OwnedFd) -> io::Result<(u64, u64)> {
    let st = rustix::fs::fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

/// Unlinks every entry of `dir` that is not a directory and returns the names of those that
/// are (to be removed on the way down).
fn empty_out(dir: &OwnedFd) -> io::Result<Vec<CString>> {
    let mut subdirs = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir.as_fd())? {
        let entry = entry?;
        let name: &CStr = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            rustix::fs::FileType::Directory => true,
            rustix::fs::FileType::Unknown => {
                rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
                    rustix::fs::FileType::from_raw_mode(st.st_mode)
                        == rustix::fs::FileType::Directory
                })
            }
            _ => false,
        };
        if is_dir {
            subdirs.push(name.to_owned());
            continue;
        }
        match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            // Became a directory since it was listed.
            Err(Errno::ISDIR | Errno::PERM) => subdirs.push(name.to_owned()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(subdirs)
}

/// The lock that says "this process is alive" to other cordon processes.
#[derive(Debug)]
struct Owner {
    tag: String,
    path: PathBuf,
    // Closing it (after `drop` removed the file) releases the lock.
    _lock: File,
}

impl Owner {
    /// Creates and locks a fresh `cordon-owner-<tag>` in `tmp`.
    fn create(tmp: &Path) -> io::Result<Self> {
        for _ in 0..8 {
            let (file, path) = tempfile::Builder::new()
                .prefix(OWNER_PREFIX)
                .rand_bytes(10)
                .tempfile_in(tmp)?
                .keep()
                .map_err(|e| e.error)?;
            rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
            // A sweep may have taken the lock in the instant between creating and locking
            // (it looked free) and removed the file: then the lock guards nothing. Keep it
            // only if the name still is this file.
            let ours = fs::symlink_metadata(&path).is_ok_and(|named| {
                file.metadata()
                    .is_ok_and(|held| (named.dev(), named.ino()) == (held.dev(), held.ino()))
            });
            if !ours {
                continue;
            }
            let tag = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(OWNER_PREFIX))
                .map(str::to_owned)
                .ok_or_else(|| io::Error::other("the owner lock got an unexpected name"))?;
            return Ok(Self {
                tag,
                path,
                _lock: file,
            });
        }
        Err(io::Error::other(
            "could not create an owner lock in the temp dir (removed as it was made, 8 times)",
        ))
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// One owner per process (and temp dir), shared by all its scratch directories, made again
/// when the last of them went.
fn process_owner(tmp: &Path) -> io::Result<Arc<Owner>> {
    static OWNER: Mutex<Option<(PathBuf, Weak<Owner>)>> = Mutex::new(None);
    let mut slot = OWNER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((dir, weak)) = slot.as_ref()
        && dir == tmp
        && let Some(owner) = weak.upgrade()
    {
        return Ok(owner);
    }
    let owner = Arc::new(Owner::create(tmp)?);
    *slot = Some((tmp.to_path_buf(), Arc::downgrade(&owner)));
    Ok(owner)
}

/// What a sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Dead owners whose directories were removed.
    pub owners: usize,
    /// Directories removed.
    pub dirs: usize,
}

/// Removes the scratch directories of dead cordon processes from the temp dir.
pub(crate) fn sweep_stale() -> Swept {
    sweep_stale_in(&std::env::temp_dir())
}

/// [`sweep_stale`] on a thread of its own, so a start-up is not slowed by a large leftover
/// tree; says what it removed at `info`.
pub(crate) fn sweep_stale_in_background() {
    let spawned = std::thread::Builder::new()
        .name("cordon-sweep".into())
        .spawn(|| {
            let swept = sweep_stale();
            if swept.owners > 0 {
                tracing::info!(
                    "removed {} scratch directories of {} cordon processes that died without \
                     cleaning up",
                    swept.dirs,
                    swept.owners
                );
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("could not start the sweep of stale scratch directories: {e}");
    }
}

/// [`sweep_stale`] in `tmp`.
pub(crate) fn sweep_stale_in(tmp: &Path) -> Swept {
    let mut swept = Swept::default();
    let Ok(entries) = fs::read_dir(tmp) else {
        return swept;
    };
    let uid = rustix::process::geteuid().as_raw();
    let names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("cordon-"))
        .collect();
    for tag in names.iter().filter_map(|n| n.strip_prefix(OWNER_PREFIX)) {
        let lock_path = tmp.join(format!("{OWNER_PREFIX}{tag}"));
        let Some(lock) = take_dead_owner(&lock_path, uid) else {
            continue;
        };
        swept.owners += 1;
        let mut complete = true;
        for name in names.iter().filter(|n| names_owner(n, tag)) {
            let dir = tmp.join(name);
            let is_ours = fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir() && m.uid() == uid);
            if !is_ours {
                continue;
            }
            match remove_tree(&dir) {
                Ok(()) => swept.dirs += 1,
                Err(e) => {
                    tracing::warn!("could not remove {}: {e}", dir.display());
                    complete = false;
                }
            }
        }
        // Still holding the lock: no new owner can have this name (tags are never reused
        // while the file exists). Kept when something was left, so a later sweep retries.
        if complete {
            let _ = fs::remove_file(&lock_path);
        }
        drop(lock);
    }
    swept
}

/// Opens and locks the owner file at `path` when it is a regular file of `uid` whose lock is
/// free (its process is dead); None for a live owner or anything else.
fn take_dead_owner(path: &Path, uid: u32) -> Option<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != uid {
        return None;
    }
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).ok()?;
    Some(file)
}

/// Whether `name` is `cordon-<kind>-<tag>-<random>` for one of [`KINDS`].
fn names_owner(name: &str, tag: &str) -> bool {
    KINDS.iter().any(|kind| {
        name.strip_prefix("cordon-")
            .and_then(|rest| rest.strip_prefix(kind))
            .and_then(|rest| rest.strip_prefix('-'))
            .and_then(|rest| rest.strip_prefix(tag))
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|random| !random.is_empty() && !random.contains('/'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tmp: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(tmp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_live_owners_directories_are_kept_and_a_dead_ones_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let live = Arc::new(Owner::create(tmp.path()).unwrap());
        let kept: Vec<ScratchDir> = KINDS
            .iter()
            .map(|kind| ScratchDir::with_owner(tmp.path(), kind, Arc::clone(&live)).unwrap())
            .collect();
        fs::write(kept[0].path().join("f"), "x").unwrap();
        // What a SIGKILLed owner leaves: its lock file, which nobody holds any more (the
        // kernel closed its descriptors), and its directories, with whatever calls left.
        let dead_lock = tmp.path().join("cordon-owner-deadbeef");
        fs::write(&dead_lock, "").unwrap();
        let mut left = Vec::new();
        for kind in KINDS {
            let dir = tmp.path().join(format!("cordon-{kind}-deadbeef-r{kind}"));
            fs::create_dir_all(dir.join("deep/er")).unwrap();
            std::os::unix::fs::symlink("/etc", dir.join("deep/etc")).unwrap();
            left.push(dir);
        }

        let swept = sweep_stale_in(tmp.path());
        assert_eq!(
            swept,
            Swept { owners: 1, dirs: 3 },
            "{:?}",
            names(tmp.path())
        );
        for dir in &left {
            assert!(!dir.exists(), "{} was not removed", dir.display());
        }
        assert!(!dead_lock.exists());
        assert!(
            Path::new("/etc/passwd").exists(),
            "the sweep followed a symlink"
        );
        assert!(
            kept[0].path().join("f").exists(),
            "a live owner's directory was removed"
        );
        assert!(kept.iter().all(|d| d.path().is_dir()));
        assert!(live.path.exists(), "a live owner's lock file was removed");

        // The last directory gone, the owner goes too: nothing is left in the temp dir.
        drop(kept);
        drop(live);
        assert_eq!(names(tmp.path()), Vec::<String>::new());
    }

    #[test]
    fn planted_names_are_not_followed_or_matched() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("keep"), "x").unwrap();
        // An owner file that is a symlink, and a tagged name that is a symlink.
        std::os::unix::fs::symlink(
            outside.path().join("keep"),
            tmp.path().join("cordon-owner-evil"),
        )
        .unwrap();
        fs::write(tmp.path().join("cordon-owner-free"), "").unwrap();
        std::os::unix::fs::symlink(outside.path(), tmp.path().join("cordon-tmp-free-xyz")).unwrap();
        fs::create_dir(tmp.path().join("cordon-tmp-freeX-xyz")).unwrap();
        fs::create_dir(tmp.path().join("cordon-tmp-old123")).unwrap();
        let swept = sweep_stale_in(tmp.path());
        assert_eq!(swept, Swept { owners: 1, dirs: 0 });
        assert!(outside.path().join("keep").exists());
        assert!(tmp.path().join("cordon-owner-evil").exists());
        assert!(tmp.path().join("cordon-tmp-freeX-xyz").exists());
        assert!(tmp.path().join("cordon-tmp-old123").exists());
        assert!(!tmp.path().join("cordon-owner-free").exists());
    }

    /// Deeper than `remove_dir_all`'s recursion survives on a 2 MiB stack (it overflowed near
    /// 15,000 levels), removed on a thread with a quarter of that.
    #[test]
    fn a_deep_chain_is_removed_on_a_small_stack() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("deep");
        fs::create_dir(&top).unwrap();
        // Built by renaming, as a confined process can: each step works two levels down.
        let (a, b) = (top.join("a"), top.join("b"));
        fs::create_dir(&a).unwrap();
        for _ in 0..20_000 {
            fs::create_dir(&b).unwrap();
            fs::rename(&a, b.join("a")).unwrap();
            fs::rename(&b, &a).unwrap();
        }
        let removed = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || remove_tree(&top).map(|()| top.exists()))
            .unwrap()
            .join()
            .expect("no stack overflow");
        assert!(!removed.unwrap(), "the tree is still there");
    }

    #[test]
    fn symlinks_inside_are_removed_as_themselves_and_a_symlinked_top_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("keep"), "x").unwrap();
        fs::create_dir(outside.path().join("sub")).unwrap();
        fs::write(outside.path().join("sub/keep"), "x").unwrap();
        let top = tmp.path().join("t");
        fs::create_dir_all(top.join("x/y")).unwrap();
        for i in 0..50 {
            fs::write(top.join(format!("x/f{i}")), "x").unwrap();
            fs::create_dir(top.join(format!("x/y/d{i}"))).unwrap();
        }
        std::os::unix::fs::symlink(outside.path(), top.join("x/dirlink")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("keep"), top.join("x/y/filelink")).unwrap();
        std::os::unix::fs::symlink("/nonexistent", top.join("dangling")).unwrap();
        remove_tree(&top).unwrap();
        assert!(!top.exists());
        assert!(outside.path().join("keep").exists());
        assert!(outside.path().join("sub/keep").exists());

        let link = tmp.path().join("link-to-outside");
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();
        assert!(
            remove_tree(&link).is_err(),
            "a symlinked top must not be followed"
        );
        assert!(outside.path().join("sub/keep").exists());
        assert!(remove_tree(&tmp.path().join("missing")).is_ok());
        let file = tmp.path().join("file");
        fs::write(&file, "x").unwrap();
        assert!(remove_tree(&file).is_err(), "a file is not a tree");
    }

    #[test]
    fn owner_names_match_exactly() {
        assert!(names_owner("cordon-view-ab12-XyZ", "ab12"));
        assert!(names_owner("cordon-private-ab12-q", "ab12"));
        assert!(!names_owner("cordon-view-ab123-XyZ", "ab12"));
        assert!(!names_owner("cordon-view-ab12-", "ab12"));
        assert!(!names_owner("cordon-sessions-ab12-x", "ab12"));
        assert!(!names_owner("cordon-owner-ab12", "ab12"));
    }
}
