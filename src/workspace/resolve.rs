//! Resolving a workspace-relative directory path to an open directory *and* the path it really
//! has, one component at a time, with no symlink ever followed by the kernel.
//!
//! Owns: the walk (each component opened with `O_NOFOLLOW` relative to the directory before
//! it; a symlink met on the way is read and its target spliced into the rest of the path, `..`
//! steps back to the directory handle the walk came from), creating missing directories on
//! request, and calling a check on every directory before it is entered or created. Does not
//! own: what is decided about a path (`protect`, the caller's rules) or what is done in the
//! final directory (`write`).
//!
//! Why by hand: the decision "is this target protected?" must be about the directory the write
//! then goes through. The walk yields both at once — the handle, and the names by which each
//! directory on the way was reached — so no rename or symlink swap between the check and the
//! write can change which directory the check was about.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, MetadataExt};

use super::PathError;
use super::protect::FileId;

/// How many symlinks a walk follows before calling it a loop (Linux's own limit).
pub(crate) const MAX_SYMLINK_HOPS: usize = 40;

/// Counts one more retry or link followed while resolving `shown`; past
/// [`MAX_SYMLINK_HOPS`] the path is a loop (or is being swapped under us without end).
fn next_hop(hops: &mut usize, shown: &str) -> Result<(), PathError> {
    *hops += 1;
    if *hops > MAX_SYMLINK_HOPS {
        return Err(PathError::SymlinkLoop {
            path: shown.to_owned(),
        });
    }
    Ok(())
}

/// errno values the walk tells apart (stable Linux ABI).
const ENOTDIR: i32 = 20;
const ELOOP: i32 = 40;
const EINVAL: i32 = 22;

/// A directory reached by [`walk`].
#[derive(Debug)]
pub(crate) struct Resolved {
    /// The directory itself; everything done "in" the resolved path goes through this handle.
    pub dir: Dir,
    /// The names by which it was reached from the root, symlinks resolved (empty: the root).
    pub path: Vec<OsString>,
}

impl Resolved {
    /// `path` as text for pattern matching and messages (non-UTF-8 bytes shown as U+FFFD).
    pub(super) fn names(&self) -> Vec<String> {
        self.path
            .iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect()
    }

    /// `path` as a workspace-relative path (`.` for the root).
    pub(super) fn rel(&self) -> PathBuf {
        if self.path.is_empty() {
            PathBuf::from(".")
        } else {
            self.path.iter().collect()
        }
    }
}

/// What the walk asks its caller before entering or creating a directory.
pub(crate) enum Step<'a> {
    /// About to create the directory at this resolved path.
    Create(&'a [OsString]),
    /// Entered the directory at this resolved path, which has these identities on the way.
    Entered(&'a [OsString], &'a [FileId]),
}

/// Walks `rel` (a directory path) from `root`; see the module comment. `shown` is the tool
/// argument, used in errors. With `create`, missing directories are created (after `check`
/// agreed); without, a missing one is [`PathError::ParentMissing`] / [`PathError::NotFound`].
pub(crate) fn walk(
    root: &Dir,
    rel: &Path,
    shown: &str,
    create: bool,
    check: &mut dyn FnMut(Step<'_>) -> Result<(), PathError>,
) -> Result<Resolved, PathError> {
    let mut queue: VecDeque<OsString> = VecDeque::new();
    push_front(&mut queue, rel, shown)?;
    // (handle, name, identity) of each directory below the root.
    let mut stack: Vec<(Dir, OsString, FileId)> = Vec::new();
    let mut hops = 0usize;
    while let Some(name) = queue.pop_front() {
        if name == ".." {
            if stack.pop().is_none() {
                return Err(PathError::Escape {
                    path: shown.to_owned(),
                });
            }
            continue;
        }
        let current = stack.last().map_or(root, |(d, _, _)| d);
        match current.open_dir_nofollow(&name) {
            Ok(dir) => {
                let meta = dir
                    .dir_metadata()
                    .map_err(|e| PathError::from_io(shown, e))?;
                stack.push((dir, name, (meta.dev(), meta.ino())));
                let (names, ids) = names_and_ids(&stack);
                check(Step::Entered(&names, &ids))?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if !create {
                    let (names, _) = names_and_ids(&stack);
                    let mut missing: PathBuf = names.iter().collect();
                    missing.push(&name);
                    return Err(PathError::ParentMissing {
                        path: shown.to_owned(),
                        parent: missing.display().to_string(),
                    });
                }
                let (mut names, _) = names_and_ids(&stack);
                names.push(name.clone());
                check(Step::Create(&names))?;
                match current.create_dir(&name) {
                    Ok(()) => {}
                    // Someone else made it (or a symlink) meanwhile: look again.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(PathError::from_io(shown, e)),
                }
                hops += 1;
                if hops > MAX_SYMLINK_HOPS + 64 {
                    return Err(PathError::from_io(
                        shown,
                        io::Error::other("a directory kept vanishing while it was created"),
                    ));
                }
                queue.push_front(name);
            }
            Err(e) if matches!(e.raw_os_error(), Some(ELOOP | ENOTDIR)) => {
                let meta = match current.symlink_metadata(&name) {
                    Ok(meta) => meta,
                    // Changed under us; try the same name again (bounded by `hops`).
                    Err(_) => {
                        next_hop(&mut hops, shown)?;
                        queue.push_front(name);
                        continue;
                    }
                };
                if meta.is_dir() {
                    // It was swapped back to a directory meanwhile: open it again.
                    next_hop(&mut hops, shown)?;
                    queue.push_front(name);
                    continue;
                }
                if !meta.file_type().is_symlink() {
                    return Err(PathError::NotADirectory {
                        path: shown.to_owned(),
                    });
                }
                next_hop(&mut hops, shown)?;
                let target = match current.read_link(&name) {
                    Ok(target) => target,
                    // Removed, or no longer a link (EINVAL): look at the name again.
                    Err(e)
                        if e.kind() == io::ErrorKind::NotFound
                            || e.raw_os_error() == Some(EINVAL) =>
                    {
                        queue.push_front(name);
                        continue;
                    }
                    Err(e) => return Err(PathError::from_io(shown, e)),
                };
                push_front(&mut queue, &target, shown)?;
            }
            Err(e) => return Err(PathError::from_io(shown, e)),
        }
    }
    let (path, _) = names_and_ids(&stack);
    let dir = match stack.pop() {
        Some((dir, _, _)) => dir,
        None => root.try_clone().map_err(|e| PathError::from_io(shown, e))?,
    };
    Ok(Resolved { dir, path })
}

/// Resolves a file path: its directory by [`walk`], then a final symlink (and the ones it
/// leads to) by the same rules, by hand. Returns the directory and a final name that is not a
/// symlink (it may not exist). For reads: nothing the kernel follows, nothing outside.
pub(crate) fn resolve_file(
    root: &Dir,
    rel: &Path,
    shown: &str,
) -> Result<(Resolved, OsString), PathError> {
    let (parent, name) = split_final(rel, shown)?;
    let mut resolved = walk(root, parent, shown, false, &mut |_| Ok(()))?;
    let mut name = name.to_os_string();
    for _ in 0..MAX_SYMLINK_HOPS {
        let is_link = resolved
            .dir
            .symlink_metadata(&name)
            .is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            return Ok((resolved, name));
        }
        let link = match resolved.dir.read_link(&name) {
            Ok(link) => link,
            // It stopped being a link meanwhile: look at it again.
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(EINVAL) => {
                continue;
            }
            Err(e) => return Err(PathError::from_io(shown, e)),
        };
        if link.is_absolute() {
            return Err(PathError::Escape {
                path: shown.to_owned(),
            });
        }
        let joined = if resolved.path.is_empty() {
            link
        } else {
            resolved.rel().join(link)
        };
        let (parent, last) = split_final(&joined, shown)?;
        let last = last.to_os_string();
        resolved = walk(root, parent, shown, false, &mut |_| Ok(()))?;
        name = last;
    }
    Err(PathError::SymlinkLoop {
        path: shown.to_owned(),
    })
}

fn names_and_ids(stack: &[(Dir, OsString, FileId)]) -> (Vec<OsString>, Vec<FileId>) {
    stack
        .iter()
        .map(|(_, name, id)| (name.clone(), *id))
        .unzip()
}

/// Puts the components of `path` at the front of the queue, in order. An absolute path (a
/// symlink target such as `/etc`) is an escape, as the kernel's RESOLVE_BENEATH rules it for
/// every other open, even when it happens to point inside.
fn push_front(queue: &mut VecDeque<OsString>, path: &Path, shown: &str) -> Result<(), PathError> {
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => parts.push(n.to_os_string()),
            Component::ParentDir => parts.push(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(PathError::Escape {
                    path: shown.to_owned(),
                });
            }
        }
    }
    for part in parts.into_iter().rev() {
        queue.push_front(part);
    }
    Ok(())
}

/// Splits a tool path into (directory part, final name), refusing paths that name no file
/// (`.`, `..`, `a/..`, a trailing `/`).
pub(crate) fn split_final<'a>(
    rel: &'a Path,
    shown: &str,
) -> Result<(&'a Path, &'a OsStr), PathError> {
    // By the raw text: `Path` quietly drops a trailing `.`, so `a/.` would look like `a`.
    let last = rel
        .as_os_str()
        .as_encoded_bytes()
        .rsplit(|&b| b == b'/')
        .next();
    let is_dir_spelling = matches!(last, None | Some(b"" | b"." | b".."));
    let name = match (rel.file_name(), is_dir_spelling) {
        (Some(name), false) => name,
        _ => {
            return Err(PathError::IsADirectory {
                path: shown.to_owned(),
            });
        }
    };
    let parent = match rel.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((parent, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Dir) {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::create_dir_all(t.path().join(".git/hooks")).unwrap();
        symlink("a/b", t.path().join("ab")).unwrap();
        symlink("../.git", t.path().join("a/g")).unwrap();
        symlink("/etc", t.path().join("abs")).unwrap();
        let dir = Dir::open_ambient_dir(t.path(), ambient_authority()).unwrap();
        (t, dir)
    }

    fn resolved(root: &Dir, p: &str) -> Result<Vec<String>, PathError> {
        walk(root, Path::new(p), p, false, &mut |_| Ok(())).map(|r| r.names())
    }

    #[test]
    fn symlinks_on_the_way_are_resolved_to_the_real_names() {
        let (_t, root) = setup();
        assert_eq!(resolved(&root, "ab").unwrap(), ["a", "b"]);
        assert_eq!(resolved(&root, "a/g/hooks").unwrap(), [".git", "hooks"]);
        assert_eq!(resolved(&root, "a/b/../g").unwrap(), [".git"]);
        assert_eq!(resolved(&root, ".").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn escapes_and_absolute_links_are_refused() {
        let (_t, root) = setup();
        for p in ["..", "a/../..", "abs", "abs/x"] {
            assert!(
                matches!(resolved(&root, p), Err(PathError::Escape { .. })),
                "{p}"
            );
        }
    }

    #[test]
    fn loops_missing_and_files_are_reported() {
        let (t, root) = setup();
        symlink("l2", t.path().join("l1")).unwrap();
        symlink("l1", t.path().join("l2")).unwrap();
        std::fs::write(t.path().join("f"), "x").unwrap();
        assert!(matches!(
            resolved(&root, "l1"),
            Err(PathError::SymlinkLoop { .. })
        ));
        assert!(matches!(
            resolved(&root, "nope/x"),
            Err(PathError::ParentMissing { .. })
        ));
        assert!(matches!(
            resolved(&root, "f/x"),
            Err(PathError::NotADirectory { .. })
        ));
    }

    #[test]
    fn the_check_sees_every_directory_before_it_is_created() {
        let (t, root) = setup();
        let mut seen = Vec::new();
        let r = walk(
            root.try_clone().as_ref().unwrap(),
            Path::new("ab/new/deeper"),
            "x",
            true,
            &mut |s| {
                if let Step::Create(p) = s {
                    seen.push(
                        p.iter()
                            .map(|n| n.to_string_lossy().into_owned())
                            .collect::<Vec<_>>()
                            .join("/"),
                    );
                }
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(seen, ["a/b/new", "a/b/new/deeper"]);
        assert_eq!(r.rel(), PathBuf::from("a/b/new/deeper"));
        assert!(t.path().join("a/b/new/deeper").is_dir());
        // A refusal stops the walk before anything is created.
        let err = walk(&root, Path::new("x/y"), "x/y", true, &mut |_| {
            Err(PathError::invalid("x/y", "no"))
        })
        .unwrap_err();
        assert!(matches!(err, PathError::Invalid { .. }));
        assert!(!t.path().join("x").exists());
    }

    #[test]
    fn final_names_must_name_a_file() {
        for p in [".", "..", "a/..", "a/."] {
            assert!(split_final(Path::new(p), p).is_err(), "{p}");
        }
        let (dir, name) = split_final(Path::new("a/b.txt"), "a/b.txt").unwrap();
        assert_eq!((dir, name), (Path::new("a"), OsStr::new("b.txt")));
        let (dir, _) = split_final(Path::new("b.txt"), "b.txt").unwrap();
        assert_eq!(dir, Path::new("."));
    }
}
