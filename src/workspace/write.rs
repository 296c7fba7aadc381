//! Atomic writes into the workspace, decided and done through one directory handle.
//!
//! Owns: replacing a file's content so that readers see either the old or the new bytes, never a
//! mix (temporary file in the same directory, fsync, rename); the rules a write must pass
//! ([`WriteRules`]: protected entries, a read-only workspace's writable directories), decided on
//! the directory the write then goes through; keeping an existing file's permission bits minus
//! setuid/setgid, and its owner where the server may set it; creating parent directories on
//! request. Does not own: what the content is (edits, diffs) or lint.
//!
//! The target's directory is reached by `resolve::walk`, which opens one component at a time
//! with no symlink followed by the kernel and yields the directory handle together with the
//! names it really has. The rules are judged on (those names, the final name), and the
//! temporary file and the rename happen inside that handle; a rename or a symlink swap after
//! the check can make the call fail, never make it write somewhere the check did not see.
//!
//! A symlink as the final component is never written through, nor replaced: the write is
//! refused with the path the link leads to, so the caller writes that path by name (and it is
//! judged by name). `rename` itself replaces a link rather than following it, so a file
//! swapped for a link between the check and the rename is replaced, not written through.

use std::ffi::OsStr;
use std::io::{self, Write};

use cap_std::fs::{Dir, MetadataExt, Permissions, PermissionsExt};
use cap_tempfile::TempFile;
use serde::Serialize;

use super::protect::{self, IdentitySnapshot};
use super::resolve::{self, Resolved, Step};
use super::{PathError, RelPath, Workspace, describe_file_type};

/// readlink's "this is not a symlink" (stable Linux ABI value).
const EINVAL: i32 = 22;

/// The setuid and setgid bits: never carried over to a file the server (often root) wrote.
const SETID_BITS: u32 = 0o6000;

/// What a write must respect, beyond staying inside the workspace.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteRules<'a> {
    /// Protected patterns (see `protect`): nothing is written in or at them.
    pub protected: &'a [String],
    /// With a read-only workspace, the only directories a write may land in (patterns, each
    /// covering what lies beneath it). `None`: the whole workspace is writable.
    pub writable_only: Option<&'a [String]>,
}

/// What a successful [`Workspace::write_checked`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WriteReport {
    /// True when no file existed at the target before.
    pub created: bool,
    /// Number of bytes written.
    pub bytes: u64,
    /// The path as resolved on disk (directory symlinks on the way replaced by what they lead
    /// to), workspace-relative.
    pub resolved: RelPath,
    /// Permission bits of the old file that the new one does not get (`setuid`, `setgid`).
    pub dropped_bits: Vec<&'static str>,
}

impl Workspace {
    /// [`Workspace::write_checked`] with no rules beyond staying inside the workspace.
    pub fn write_atomic(
        &self,
        rel: &RelPath,
        bytes: &[u8],
        create_dirs: bool,
    ) -> Result<WriteReport, PathError> {
        self.write_checked(rel, bytes, create_dirs, &WriteRules::default())
    }

    /// Atomically replaces (or creates) the file at `rel` with `bytes`, if `rules` allow it.
    ///
    /// * Parent directories are created only if `create_dirs`, and never inside a protected
    ///   entry; otherwise a missing parent is [`PathError::ParentMissing`].
    /// * Symlinked directories on the way are followed while they stay inside the workspace
    ///   (by the walk, not the kernel); absolute link targets are [`PathError::Escape`], as
    ///   for reads.
    /// * A final symlink is refused ([`PathError::FinalSymlink`], or [`PathError::Escape`]
    ///   when it leads outside) and left as it is.
    /// * A protected target is [`PathError::Protected`]; one outside `writable_only` is
    ///   [`PathError::NotWritable`].
    /// * An existing file keeps its permission bits except setuid/setgid (reported in
    ///   [`WriteReport::dropped_bits`]), and its owner when the server runs as root.
    /// * A directory (or FIFO, device, socket) at the target is refused.
    /// * On any failure the old file is untouched and no temporary file is left behind.
    pub fn write_checked(
        &self,
        rel: &RelPath,
        bytes: &[u8],
        create_dirs: bool,
        rules: &WriteRules<'_>,
    ) -> Result<WriteReport, PathError> {
        let shown = rel.as_str();
        if shown.ends_with('/') {
            return Err(PathError::invalid(
                shown,
                "the path ends with `/`, which names a directory; remove the trailing slash to \
                 write a file",
            ));
        }
        let (parent, name) = resolve::split_final(rel.as_path(), shown)?;
        let snapshot = IdentitySnapshot::take(&self.dir, rules.protected);
        let resolved = resolve::walk(&self.dir, parent, shown, create_dirs, &mut |step| {
            rules.check_step(shown, step, &snapshot)
        })?;
        let existing = match resolved.dir.symlink_metadata(name) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(PathError::at(rel, e)),
        };
        let mut target = resolved.names();
        target.push(name.to_string_lossy().into_owned());
        let target_rel = RelPath::from_trusted(target.join("/"));
        let mode = match &existing {
            Some(meta) if meta.file_type().is_symlink() => {
                return Err(self.final_symlink(rel, &resolved, name));
            }
            Some(meta) if meta.is_dir() => {
                return Err(PathError::IsADirectory {
                    path: shown.to_owned(),
                });
            }
            Some(meta) if !meta.is_file() => {
                return Err(PathError::NotAFile {
                    path: shown.to_owned(),
                    found: describe_file_type(meta.file_type()),
                });
            }
            // Mask to the permission bits: `mode()` also carries the file-type bits.
            Some(meta) => Some(meta.permissions().mode() & 0o7777),
            None => None,
        };
        let existing_id = existing.as_ref().map(|m| (m.dev(), m.ino()));
        rules.check_target(shown, &target, existing_id, &snapshot)?;
        let owner = existing
            .as_ref()
            .filter(|_| rustix::process::geteuid().is_root())
            .map(|m| (m.uid(), m.gid()));
        let dropped = mode.map_or(0, |m| m & SETID_BITS);
        replace_in(
            &resolved.dir,
            name,
            bytes,
            mode.map(|m| m & !SETID_BITS),
            owner,
        )
        .map_err(|e| PathError::at(rel, e))?;
        Ok(WriteReport {
            created: existing.is_none(),
            bytes: bytes.len() as u64,
            resolved: target_rel,
            dropped_bits: describe_setid(dropped),
        })
    }

    /// The refusal for a final symlink: where it leads (resolved the same way, without the
    /// kernel following anything), or an escape or loop when that is what it is.
    fn final_symlink(&self, rel: &RelPath, resolved: &Resolved, name: &OsStr) -> PathError {
        let shown = rel.as_str();
        match resolved.dir.read_link(name) {
            Ok(link) if link.is_absolute() => {
                return PathError::Escape {
                    path: shown.to_owned(),
                };
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(EINVAL) => {
                // It stopped being a link meanwhile; say what it was.
                return PathError::FinalSymlink {
                    path: shown.to_owned(),
                    target: None,
                };
            }
            Err(e) => return PathError::from_io(shown, e),
        }
        match resolve::resolve_file(&self.dir, rel.as_path(), shown) {
            Ok((dir, last)) => {
                let mut target = dir.names();
                target.push(last.to_string_lossy().into_owned());
                PathError::FinalSymlink {
                    path: shown.to_owned(),
                    target: Some(target.join("/")),
                }
            }
            Err(e @ (PathError::Escape { .. } | PathError::SymlinkLoop { .. })) => e,
            Err(_) => PathError::FinalSymlink {
                path: shown.to_owned(),
                target: None,
            },
        }
    }
}

impl WriteRules<'_> {
    /// Judges a directory the walk enters or is about to create.
    fn check_step(
        &self,
        shown: &str,
        step: Step<'_>,
        snapshot: &IdentitySnapshot,
    ) -> Result<(), PathError> {
        let (names, id) = match step {
            Step::Entered(names, ids) => (names, ids.last().copied()),
            Step::Create(names) => (names, None),
        };
        let names: Vec<String> = names
            .iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        if let Some(entry) = protect::inside_protected(self.protected, &names)
            .or_else(|| id.and_then(|id| snapshot.entry_for(id)))
        {
            return Err(PathError::Protected {
                path: shown.to_owned(),
                resolved: names.join("/"),
                entry: entry.to_owned(),
            });
        }
        if let (Some(writable), true) = (self.writable_only, id.is_none()) {
            // Creating a directory in a read-only workspace: only inside a writable one, or
            // on the way to one.
            let inside = protect::inside_protected(writable, &names).is_some();
            let on_the_way = writable.iter().any(|w| {
                let segs: Vec<&str> = w
                    .split('/')
                    .filter(|c| !c.is_empty() && *c != ".")
                    .collect();
                names.len() < segs.len()
                    && segs
                        .iter()
                        .zip(&names)
                        .all(|(s, n)| protect::segment_matches(s, n))
            });
            if !inside && !on_the_way {
                return Err(PathError::NotWritable {
                    path: shown.to_owned(),
                    resolved: names.join("/"),
                });
            }
        }
        Ok(())
    }

    /// Judges the final target: (its resolved path, what is there now).
    fn check_target(
        &self,
        shown: &str,
        target: &[String],
        existing: Option<protect::FileId>,
        snapshot: &IdentitySnapshot,
    ) -> Result<(), PathError> {
        if let Some(entry) = protect::protected_entry(self.protected, target)
            .or_else(|| existing.and_then(|id| snapshot.entry_for(id)))
        {
            return Err(PathError::Protected {
                path: shown.to_owned(),
                resolved: target.join("/"),
                entry: entry.to_owned(),
            });
        }
        if let Some(writable) = self.writable_only
            && protect::inside_protected(writable, target).is_none()
        {
            return Err(PathError::NotWritable {
                path: shown.to_owned(),
                resolved: target.join("/"),
            });
        }
        Ok(())
    }
}

fn describe_setid(bits: u32) -> Vec<&'static str> {
    let mut out = Vec::new();
    if bits & 0o4000 != 0 {
        out.push("setuid");
    }
    if bits & 0o2000 != 0 {
        out.push("setgid");
    }
    out
}

/// Writes `bytes` to a temporary file in `dir` and renames it over `name`.
///
/// `TempFile` removes its temporary name on drop, so every early return here leaves nothing
/// behind; with O_TMPFILE there is no name at all until `replace`. The owner is set before the
/// mode, because `chown` clears setuid/setgid bits anyway and the mode must be the last word.
fn replace_in(
    dir: &Dir,
    name: &OsStr,
    bytes: &[u8],
    mode: Option<u32>,
    owner: Option<(u32, u32)>,
) -> io::Result<()> {
    let mut temp = TempFile::new(dir)?;
    temp.write_all(bytes)?;
    if let Some((uid, gid)) = owner {
        // Best effort: giving the file back to its owner is a courtesy, not a requirement
        // (a root-squashed network file system refuses it).
        let _ = std::os::unix::fs::fchown(temp.as_file(), Some(uid), Some(gid));
    }
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
        let err = replace_in(&dir, OsStr::new("target"), b"data", Some(0o600), None).unwrap_err();
        assert!(err.raw_os_error().is_some(), "{err:?}");
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("target")]);
    }

    #[test]
    fn setid_bits_are_named() {
        assert_eq!(describe_setid(0o6000), ["setuid", "setgid"]);
        assert_eq!(describe_setid(0o2000), ["setgid"]);
        assert!(describe_setid(0o1000).is_empty());
    }
}
