//! Repositories inside the workspace besides its root's: finding them, and moving one a call
//! created out of the workspace so that it becomes a shadow of its own (`adopt`).
//!
//! A `.git` anywhere below the root (a directory, or a gitfile naming one), or a directory
//! that is itself a gitdir (a bare repository: `HEAD`, `objects`, `refs`), is a repository
//! the operator's git reads as configuration when run there (`cd sub && git status`). Those
//! the operator has when the server starts are found by one walk of names; those a call or
//! job makes are found at its end: where fanotify is allowed, only the directories the kernel
//! reported are looked at (one of those names made, moved or written there, or a directory
//! made or moved there, walked whole); elsewhere the whole tree is walked again. cordon's own directories at the root
//! (`.cordon`, the calls' home) are never searched, and nothing inside a `.git` is.
//!
//! Owns the walk (names only, a heap stack, no link followed, bounded), the event filter and
//! the move of a gitdir beneath a handle on its directory. Does not own what becomes of a
//! repository found (`git::Repositories`).

use std::collections::BTreeSet;
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::confine::fanotify::DirWatch;

/// Most directories one walk reads; a larger tree is walked no further (and said so in the
/// server's log): a repository beyond it is found when a change there is reported.
const MAX_DIRS: usize = 2_000_000;

/// Whether a name at the workspace root is cordon's own directory (never searched).
fn own_at_root(name: &str) -> bool {
    matches!(name, ".cordon" | crate::policy::toolchains::WORKSPACE_HOME)
}

use crate::confine::scratch::open_dir_nofollow;

/// Opens `rel` beneath `root`, a directory at every step, no link followed.
pub(crate) fn open_beneath(root: BorrowedFd<'_>, rel: &Path) -> std::io::Result<OwnedFd> {
    let mut cur = rustix::fs::openat(
        root,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return Err(std::io::Error::other(format!(
                "`{}` is not a plain path",
                rel.display()
            )));
        };
        let name = std::ffi::CString::new(name.as_encoded_bytes())
            .map_err(|_| std::io::Error::other("a name with a NUL byte"))?;
        cur = open_dir_nofollow(cur.as_fd(), &name)?;
    }
    Ok(cur)
}

/// The names that make a directory a repository for git: `.git` in it, or `HEAD`, `objects`
/// and `refs` (a bare repository). An event naming one of them is looked at.
const GIT_NAMES: [&[u8]; 4] = [b".git", b"HEAD", b"objects", b"refs"];

/// The directories beneath `start` (workspace-relative `start_rel`) that hold a `.git` or
/// are a bare repository, added to `found`. `at_root`: `start` is the workspace root (its
/// own `.git` and cordon's directories are skipped). Neither a `.git` nor a bare repository
/// is entered. False when the walk stopped at [`MAX_DIRS`].
fn walk(start: OwnedFd, start_rel: PathBuf, at_root: bool, found: &mut BTreeSet<PathBuf>) -> bool {
    use std::os::unix::ffi::OsStrExt;
    // What is still to be read: its parent's handle (shared by its siblings) and its name.
    // A directory is opened only when its turn comes, so the walk holds a handle only for
    // each directory on the way down that still has siblings waiting, never one per
    // directory listed (a directory of 100,000 subdirectories would exhaust the server's
    // descriptors).
    let mut stack: Vec<(std::rc::Rc<OwnedFd>, std::ffi::CString, PathBuf)> = Vec::new();
    let mut next = Some((start, start_rel));
    let mut dirs = 0usize;
    loop {
        let (fd, rel) = match next.take() {
            Some(here) => here,
            None => {
                let Some((parent, name, rel)) = stack.pop() else {
                    return true;
                };
                match open_dir_nofollow(parent.as_fd(), &name) {
                    Ok(fd) => (fd, rel),
                    Err(_) => continue,
                }
            }
        };
        dirs += 1;
        if dirs > MAX_DIRS {
            tracing::warn!(
                "the workspace holds more than {MAX_DIRS} directories: cordon's search for git \
                 repositories in it stopped there"
            );
            return false;
        }
        let Ok(reader) = rustix::fs::Dir::read_from(&fd) else {
            continue;
        };
        let top = at_root && rel.as_os_str().is_empty();
        let mut subdirs = Vec::new();
        let mut bare_names = 0;
        for entry in reader.flatten() {
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let bytes = name.to_bytes();
            if bytes == b".git" {
                if !top {
                    found.insert(rel.clone());
                }
                continue;
            }
            if GIT_NAMES.contains(&bytes) {
                bare_names += 1;
            }
            if top && own_at_root(&String::from_utf8_lossy(bytes)) {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory),
                _ => false,
            };
            if is_dir {
                subdirs.push(name.to_owned());
            }
        }
        if bare_names == 3 && !top {
            found.insert(rel);
            continue;
        }
        let here = std::rc::Rc::new(fd);
        for name in subdirs {
            let child = rel.join(std::ffi::OsStr::from_bytes(name.to_bytes()));
            stack.push((std::rc::Rc::clone(&here), name, child));
        }
    }
}

/// Every directory of the workspace below its root that holds a `.git` or is a bare
/// repository.
pub(crate) fn find_all(root: BorrowedFd<'_>) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    if let Ok(start) = open_beneath(root, Path::new("")) {
        walk(start, PathBuf::new(), true, &mut found);
    }
    found
}

/// Finds the repositories a call or job may have made since the last look.
pub(crate) struct Finder {
    workspace: PathBuf,
    watch: Option<Mutex<DirWatch>>,
}

impl Finder {
    /// A finder for the workspace `root` (canonical path `workspace`): fanotify where the
    /// kernel allows it (as for checkpoints) and `watch` asks for it, else a walk at every
    /// look. One command (`cordon exec`) looks once: a watch would cost it more than the walk,
    /// since closing a fanotify group waits for an SRCU grace period (5-25 ms here).
    pub(crate) fn new(root: BorrowedFd<'_>, workspace: &Path, watch: bool) -> Self {
        let watch = if !watch || crate::confine::kernel::simulated_missing("fanotify") {
            None
        } else {
            // Entries made, moved in, or written and closed (a gitfile rewritten in place).
            DirWatch::with_mask(
                root,
                libc::FAN_CREATE | libc::FAN_MOVED_TO | libc::FAN_CLOSE_WRITE | libc::FAN_ONDIR,
            )
            .ok()
            .map(Mutex::new)
        };
        Self {
            workspace: workspace.to_path_buf(),
            watch,
        }
    }

    /// The directories below the root holding a `.git` among those changed since the last
    /// look (every one when that cannot be told).
    pub(crate) fn changed(&self, root: BorrowedFd<'_>) -> BTreeSet<PathBuf> {
        let Some(watch) = &self.watch else {
            return find_all(root);
        };
        let Ok(watch) = watch.lock() else {
            return find_all(root);
        };
        let drained = match watch.drain() {
            Ok(d) if !d.overflow && !d.unreadable => d,
            _ => return find_all(root),
        };
        let by_dir = drained.by_dir();
        let mut found = BTreeSet::new();
        let (events, dirs) = (drained.dirs.len(), by_dir.len());
        let mut walked = 0usize;
        for ((kind, handle), names) in by_dir {
            let Some(rel) = self.resolve(&watch, kind, handle) else {
                continue;
            };
            let Ok(rel) = rel else {
                return find_all(root);
            };
            let at_root = rel.as_os_str().is_empty();
            if !at_root && names.iter().any(|n| GIT_NAMES.contains(n)) {
                found.insert(rel.clone());
            }
            let Ok(dir) = open_beneath(root, &rel) else {
                continue;
            };
            for name in names {
                if name.is_empty() || GIT_NAMES.contains(&name) {
                    continue;
                }
                if at_root && own_at_root(&String::from_utf8_lossy(name)) {
                    continue;
                }
                // A directory made or moved here may hold repositories: walked whole.
                let Ok(cname) = std::ffi::CString::new(name) else {
                    continue;
                };
                if let Ok(sub) = open_dir_nofollow(dir.as_fd(), &cname) {
                    use std::os::unix::ffi::OsStrExt;
                    walked += 1;
                    let sub_rel = rel.join(std::ffi::OsStr::from_bytes(name));
                    if !walk(sub, sub_rel, false, &mut found) {
                        return find_all(root);
                    }
                }
            }
        }
        tracing::trace!(
            events,
            dirs,
            walked,
            "git repositories: the kernel's reports read"
        );
        found
    }

    /// The workspace-relative path of an event's directory: None when it is not in the
    /// workspace, inside a `.git`, in cordon's own directories, or gone;
    /// `Some(Err)` when it cannot be told (then everything is looked at).
    fn resolve(&self, watch: &DirWatch, kind: i32, handle: &[u8]) -> Option<Result<PathBuf, ()>> {
        let fd = match watch.open(kind, handle) {
            Ok(fd) => fd,
            // Gone: its removal or move was itself an event in a directory still there.
            Err(e) if e.raw_os_error() == Some(libc::ESTALE) => return None,
            Err(_) => return Some(Err(())),
        };
        let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        tracing::trace!(path = %path.display(), "git repositories: a reported directory");
        let rel = path.strip_prefix(&self.workspace).ok()?.to_path_buf();
        let mut components = rel.components();
        if let Some(Component::Normal(first)) = components.clone().next()
            && own_at_root(&first.to_string_lossy())
        {
            return None;
        }
        if components.any(|c| c.as_os_str() == ".git") {
            return None;
        }
        Some(Ok(rel))
    }
}

/// What a directory is to a git run in it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DotGit {
    /// `<dir>/.git` is a directory.
    Directory,
    /// `<dir>/.git` is a gitfile: the gitdir it names (as written), and its link count (a
    /// second name would let it be rewritten unseen).
    File(String, u64),
    /// `<dir>` itself is a gitdir: `HEAD`, `objects` and `refs` (a bare repository).
    Bare,
    /// None of these (gone, a link, something else): nothing a host git reads there.
    Other,
}

/// Largest gitfile read.
const MAX_GITFILE: u64 = 4096;

/// What `dir` is to a git run in it.
pub(crate) fn dot_git(dir: BorrowedFd<'_>) -> DotGit {
    let Ok(st) = rustix::fs::statat(dir, c".git", AtFlags::SYMLINK_NOFOLLOW) else {
        let present = |name: &CStr| rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW);
        let not_dir =
            |st: rustix::fs::Stat| FileType::from_raw_mode(st.st_mode) != FileType::Directory;
        let bare = present(c"HEAD").is_ok_and(not_dir)
            && present(c"objects").is_ok()
            && present(c"refs").is_ok();
        return if bare { DotGit::Bare } else { DotGit::Other };
    };
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => DotGit::Directory,
        FileType::RegularFile => {
            use std::io::Read;
            // Not blocking on a FIFO swapped in since the stat, and still a regular file.
            let Ok(fd) = crate::confine::scratch::open_file_nofollow(dir, c".git") else {
                return DotGit::Other;
            };
            if !rustix::fs::fstat(&fd)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
            {
                return DotGit::Other;
            }
            let mut text = String::new();
            let _ = std::fs::File::from(fd)
                .take(MAX_GITFILE)
                .read_to_string(&mut text);
            let target = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("gitdir:"))
                .map(|t| t.trim().to_owned())
                .unwrap_or_default();
            DotGit::File(target, st.st_nlink)
        }
        _ => DotGit::Other,
    }
}

/// Whether a gitfile at `rel` naming `target` leads into the root's `.git` (the shadow in
/// the sandbox; on the host, the operator's own gitdir, where cordon imports only data): a
/// worktree's or submodule's gitfile. Anything else (another directory of the workspace, a
/// path outside it) is a gitdir cordon cannot vouch for.
pub(crate) fn gitfile_into_root_gitdir(workspace: &Path, rel: &Path, target: &str) -> bool {
    let target = Path::new(target);
    let joined = if target.is_absolute() {
        match target.strip_prefix(workspace) {
            Ok(r) => r.to_path_buf(),
            Err(_) => return false,
        }
    } else {
        rel.join(target)
    };
    let mut out: Vec<&std::ffi::OsStr> = Vec::new();
    for c in joined.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                if out.pop().is_none() {
                    return false;
                }
            }
            _ => return false,
        }
    }
    out.len() >= 2 && out[0] == ".git"
}

/// Moves the directory `name` beneath `dir` to `to` beneath `to_parent`: a rename where
/// both are on one file system, else a copy (directories, regular files and links; nothing
/// followed) and the removal of the original beneath the handle on `dir`.
pub(crate) fn move_dir(
    dir: BorrowedFd<'_>,
    name: &CStr,
    to_parent: BorrowedFd<'_>,
    to: &CStr,
) -> std::io::Result<()> {
    match rustix::fs::renameat(dir, name, to_parent, to) {
        Ok(()) => return Ok(()),
        Err(rustix::io::Errno::XDEV) => {}
        Err(e) => return Err(e.into()),
    }
    let from = open_dir_nofollow(dir, name)?;
    rustix::fs::mkdirat(to_parent, to, Mode::from_raw_mode(0o700))?;
    let dest = open_dir_nofollow(to_parent, to)?;
    copy_tree(from, dest)?;
    crate::confine::scratch::remove_beneath(dir, name)
}

fn copy_tree(from: OwnedFd, to: OwnedFd) -> std::io::Result<()> {
    let mut stack = vec![(from, to)];
    while let Some((src, dst)) = stack.pop() {
        let reader = rustix::fs::Dir::read_from(&src)?;
        for entry in reader {
            let entry = entry?;
            let name = entry.file_name().to_owned();
            if name.as_c_str() == c"." || name.as_c_str() == c".." {
                continue;
            }
            let st = rustix::fs::statat(&src, &name, AtFlags::SYMLINK_NOFOLLOW)?;
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    rustix::fs::mkdirat(&dst, &name, Mode::from_raw_mode(0o700))?;
                    stack.push((
                        open_dir_nofollow(src.as_fd(), &name)?,
                        open_dir_nofollow(dst.as_fd(), &name)?,
                    ));
                }
                FileType::RegularFile => {
                    let input = crate::confine::scratch::open_file_nofollow(src.as_fd(), &name)?;
                    if FileType::from_raw_mode(rustix::fs::fstat(&input)?.st_mode)
                        != FileType::RegularFile
                    {
                        continue; // swapped for something else since the stat
                    }
                    let output = rustix::fs::openat(
                        &dst,
                        &name,
                        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                        Mode::from_raw_mode(st.st_mode & 0o755),
                    )?;
                    std::io::copy(
                        &mut std::fs::File::from(input),
                        &mut std::fs::File::from(output),
                    )?;
                }
                FileType::Symlink => {
                    let target = rustix::fs::readlinkat(&src, &name, Vec::new())?;
                    rustix::fs::symlinkat(&target, &dst, &name)?;
                }
                // A FIFO, socket or device in a gitdir is no part of a repository.
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gitfile_may_lead_only_into_the_roots_gitdir() {
        let ws = Path::new("/w");
        let sub = Path::new("a/b");
        assert!(gitfile_into_root_gitdir(ws, sub, "../../.git/modules/b"));
        assert!(gitfile_into_root_gitdir(ws, sub, "/w/.git/worktrees/b"));
        assert!(!gitfile_into_root_gitdir(ws, sub, "../evil"));
        assert!(!gitfile_into_root_gitdir(ws, sub, "../../.git"));
        assert!(!gitfile_into_root_gitdir(
            ws,
            sub,
            "../../../x/.git/modules/b"
        ));
        assert!(!gitfile_into_root_gitdir(
            ws,
            sub,
            "/elsewhere/.git/modules/b"
        ));
        assert!(!gitfile_into_root_gitdir(ws, sub, "/w/x.git"));
    }

    #[test]
    fn the_walk_finds_nested_gitdirs_gitfiles_and_bare_repositories_but_not_the_roots_or_cordons() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for d in [
            ".git/x",
            "a/.git",
            "a/inner/.git",
            "b/c/d",
            ".cordon-home/dep/.git",
            "e/.git/deeper/.git",
        ] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        std::fs::write(p.join("b/c/.git"), "gitdir: ../../.git/modules/c\n").unwrap();
        for d in [
            "bare.git/objects",
            "bare.git/refs/heads",
            "bare.git/refs/x/.git",
        ] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        std::fs::write(p.join("bare.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::os::unix::fs::symlink("/", p.join("b/link")).unwrap();
        let root = rustix::fs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let found: Vec<String> = find_all(root.as_fd())
            .into_iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(found, ["a", "a/inner", "b/c", "bare.git", "e"]);
        let c = open_beneath(root.as_fd(), Path::new("b/c")).unwrap();
        assert_eq!(
            dot_git(c.as_fd()),
            DotGit::File("../../.git/modules/c".into(), 1)
        );
        assert!(open_beneath(root.as_fd(), Path::new("b/link")).is_err());
        let bare = open_beneath(root.as_fd(), Path::new("bare.git")).unwrap();
        assert_eq!(dot_git(bare.as_fd()), DotGit::Bare);
    }
}
