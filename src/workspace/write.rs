//! Atomic writes into the workspace.
//!
//! Owns: replacing a file's content so that readers see either the old or the new bytes, never a
//! mix (temporary file in the same directory, fsync, rename), keeping an existing file's
//! permission bits, creating parent directories on request, and following a final symlink only
//! while it stays inside the workspace. Does not own: what the content is (edits, diffs) or lint.
//!
//! Confinement comes from opening the target's *directory* through the root `Dir`: once that
//! handle is open, the temporary file and the rename happen inside it, so swapping a directory
//! for an outward symlink mid-write can make the call fail but never makes it write outside.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, Permissions, PermissionsExt};
use cap_tempfile::TempFile;
use serde::Serialize;

use super::{PathError, RelPath, Workspace, describe_file_type};

/// readlink's "this is not a symlink" (stable Linux ABI value).
const EINVAL: i32 = 22;

/// How many symlinks a write follows before calling it a loop (Linux's own limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// What a successful [`Workspace::write_atomic`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WriteReport {
    /// True when no file existed at the target before.
    pub created: bool,
    /// Number of bytes written.
    pub bytes: u64,
    /// When the path was a symlink (inside the workspace), the file actually written; the link
    /// itself is left in place.
    pub via_symlink: Option<RelPath>,
}

impl Workspace {
    /// Atomically replaces (or creates) the file at `rel` with `bytes`.
    ///
    /// * Parent directories are created (through the root `Dir`) only if `create_dirs`;
    ///   otherwise a missing parent is [`PathError::ParentMissing`].
    /// * An existing file keeps its permission bits (including setuid/setgid/sticky).
    /// * A final symlink is followed while its target stays inside the workspace (the link
    ///   stays a link); one pointing outside, or with an absolute target, is
    ///   [`PathError::Escape`], exactly as for reads.
    /// * A directory (or FIFO, device, socket) at the target is refused.
    /// * On any failure the old file is untouched and no temporary file is left behind.
    pub fn write_atomic(
        &self,
        rel: &RelPath,
        bytes: &[u8],
        create_dirs: bool,
    ) -> Result<WriteReport, PathError> {
        if rel.as_str().ends_with('/') {
            return Err(PathError::invalid(
                rel.as_str(),
                "the path ends with `/`, which names a directory; remove the trailing slash to \
                 write a file",
            ));
        }
        let mut target = rel.as_path().to_path_buf();
        for _ in 0..MAX_SYMLINK_HOPS {
            let (parent, name) = split_target(rel, &target)?;
            let dir = self.open_parent(rel, parent, create_dirs)?;
            let existing = match dir.symlink_metadata(name) {
                Ok(meta) => Some(meta),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(PathError::at(rel, e)),
            };
            let mode = match &existing {
                Some(meta) if meta.file_type().is_symlink() => {
                    if let Some(next) = self.link_target(rel, &dir, parent, name)? {
                        target = next;
                    }
                    continue;
                }
                Some(meta) if meta.is_dir() => {
                    return Err(PathError::IsADirectory {
                        path: rel.to_string(),
                    });
                }
                Some(meta) if !meta.is_file() => {
                    return Err(PathError::NotAFile {
                        path: rel.to_string(),
                        found: describe_file_type(meta.file_type()),
                    });
                }
                // Mask to the permission bits: `mode()` also carries the file-type bits.
                Some(meta) => Some(meta.permissions().mode() & 0o7777),
                None => None,
            };
            replace_in(&dir, name, bytes, mode).map_err(|e| PathError::at(rel, e))?;
            let via_symlink = (target.as_path() != rel.as_path())
                .then(|| RelPath::from_trusted(target.to_string_lossy().into_owned()));
            return Ok(WriteReport {
                created: existing.is_none(),
                bytes: bytes.len() as u64,
                via_symlink,
            });
        }
        Err(PathError::SymlinkLoop {
            path: rel.to_string(),
        })
    }

    /// Opens the directory that will hold the file, creating it first if asked to.
    fn open_parent(
        &self,
        rel: &RelPath,
        parent: &Path,
        create_dirs: bool,
    ) -> Result<Dir, PathError> {
        match self.dir.open_dir(parent) {
            Ok(dir) => Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound && create_dirs => self
                .dir
                .create_dir_all(parent)
                .and_then(|()| self.dir.open_dir(parent))
                .map_err(|e| PathError::at(rel, e)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(PathError::ParentMissing {
                path: rel.to_string(),
                parent: parent.display().to_string(),
            }),
            Err(e) => Err(PathError::at(rel, e)),
        }
    }

    /// The workspace-relative path a symlink in `parent` points to, or `None` if the link
    /// vanished or stopped being a link meanwhile (the caller then looks again).
    ///
    /// Relative targets are joined to `parent` without lexical clean-up, so `..` keeps the
    /// kernel's meaning when the path is opened again beneath the root. Absolute targets are
    /// refused as escapes even when they point inside: that is what the kernel does on every
    /// other open (RESOLVE_BENEATH), and writes must not be laxer than reads.
    fn link_target(
        &self,
        rel: &RelPath,
        dir: &Dir,
        parent: &Path,
        name: &OsStr,
    ) -> Result<Option<PathBuf>, PathError> {
        let contents = match dir.read_link(name) {
            Ok(contents) => contents,
            // NotFound: the link was removed; EINVAL: it was replaced by a non-link.
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(EINVAL) => {
                return Ok(None);
            }
            Err(e) => return Err(PathError::at(rel, e)),
        };
        if parent == Path::new(".") {
            Ok(Some(contents))
        } else {
            Ok(Some(parent.join(contents)))
        }
    }
}

/// Splits a target into (directory, file name), refusing paths that name no file.
fn split_target<'a>(rel: &RelPath, target: &'a Path) -> Result<(&'a Path, &'a OsStr), PathError> {
    let Some(name) = target.file_name() else {
        // `.`, `..` or `a/..`: always a directory.
        return Err(PathError::IsADirectory {
            path: rel.to_string(),
        });
    };
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((parent, name))
}

/// Writes `bytes` to a temporary file in `dir` and renames it over `name`.
///
/// `TempFile` removes its temporary name on drop, so every early return here leaves nothing
/// behind; with O_TMPFILE there is no name at all until `replace`.
fn replace_in(dir: &Dir, name: &OsStr, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
    let mut temp = TempFile::new(dir)?;
    temp.write_all(bytes)?;
    if let Some(mode) = mode {
        temp.as_file()
            .set_permissions(Permissions::from_mode(mode))?;
    }
    // Data (and mode) must be on disk before the rename makes them visible under the real name,
    // or a crash could leave an empty file where the old content was.
    temp.as_file().sync_all()?;
    temp.replace(name)?;
    // Best effort: persist the rename itself. The new content is already in place and visible,
    // so a failure here must not turn a completed write into a reported error.
    if let Ok(handle) = dir.open(".") {
        let _ = handle.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    /// A rename that fails after the temporary file was written (here: the target became a
    /// non-empty directory behind our back) must leave no temporary file behind.
    #[test]
    fn failed_replace_leaves_no_temp_file() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("target/child")).unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
        let err = replace_in(&dir, OsStr::new("target"), b"data", Some(0o600)).unwrap_err();
        assert!(err.raw_os_error().is_some(), "{err:?}");
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("target")]);
    }

    #[test]
    fn split_target_names_parent_and_file() {
        let rel = RelPath::from_trusted("a/b.txt".into());
        let (parent, name) = split_target(&rel, Path::new("a/b.txt")).unwrap();
        assert_eq!((parent, name), (Path::new("a"), OsStr::new("b.txt")));
        let (parent, _) = split_target(&rel, Path::new("b.txt")).unwrap();
        assert_eq!(parent, Path::new("."));
        assert!(split_target(&rel, Path::new("a/..")).is_err());
    }
}
