//! What a checkpoint knows of one path, and how one path changed between two recorded trees.
//!
//! Owns: [`Entry`] (a path's kind, permission bits and content reference as recorded), the
//! stat key that lets a later scan trust an unchanged file without reading it ([`Cached`]),
//! the manifest of a whole recorded tree ([`Manifest`]) and one path's [`Change`] with its
//! name in results. Pure data: no file-system call here (the scan finds the changes).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a recorded path was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Kind {
    /// A regular file whose bytes are the blob `sha256` (hex) of the store.
    File { sha256: String, size: u64 },
    /// A symbolic link and the target it held (never followed).
    Symlink { target: String },
    /// A directory; empty ones are recorded like any other.
    Dir,
    /// A named pipe: no content, recreated by a restore.
    Fifo,
    /// Something the record cannot hold: a socket, a device, a file over
    /// `[checkpoints] max_file_bytes` (a huge sparse file is never read), a name that is not
    /// UTF-8. Listed and diffed as not covered; a restore leaves such a path as it finds it.
    Uncovered { what: String, size: u64 },
}

/// A path as recorded: its kind and permission bits (`mode & 0o7777`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    #[serde(flatten)]
    pub kind: Kind,
    pub mode: u32,
}

impl Entry {
    /// The blob this entry needs kept, if any.
    pub(crate) fn blob(&self) -> Option<&str> {
        match &self.kind {
            Kind::File { sha256, .. } => Some(sha256),
            _ => None,
        }
    }

    pub(crate) fn is_dir(&self) -> bool {
        matches!(self.kind, Kind::Dir)
    }

    pub(crate) fn is_uncovered(&self) -> bool {
        matches!(self.kind, Kind::Uncovered { .. })
    }
}

/// What `lstat` said of a path when it was recorded: when a later `lstat` says exactly the
/// same (same inode, size, modification and change times), the entry is reused without
/// reading the file. The change time cannot be set by confined code (any write, chmod or
/// `utimes` moves it to now), so an unchanged key means unchanged bytes, unless the file was
/// still being written while it was read: that entry is kept `racy` and read again next time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StatKey {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub mode: u32,
}

/// One path of the newest recorded tree, with what lets the next scan skip it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Cached {
    pub entry: Entry,
    pub stat: StatKey,
    /// Changed too recently to trust `stat` next time (see [`StatKey`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub racy: bool,
}

impl Cached {
    /// An entry known from a record but not from a scan: no stat key matches it, so the next
    /// scan reads the path again.
    pub(crate) fn unknown_stat(entry: Entry) -> Self {
        Self {
            entry,
            stat: StatKey {
                dev: 0,
                ino: 0,
                size: 0,
                mtime_ns: 0,
                ctime_ns: 0,
                mode: 0,
            },
            racy: true,
        }
    }
}

/// A whole recorded tree: workspace-relative path (`/`-separated, no leading `/`) → entry.
pub(crate) type Manifest = BTreeMap<String, Cached>;

/// One path that differs between two recorded trees. `None` is "absent".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Change {
    pub path: String,
    pub before: Option<Entry>,
    pub after: Option<Entry>,
}

impl Change {
    /// The SPEC's name for what happened to the path: created, modified, deleted, mode (only
    /// the permission bits) or symlink (a link's target, or a link replaced or replacing).
    pub(crate) fn label(&self) -> &'static str {
        match (&self.before, &self.after) {
            (None, _) => "created",
            (_, None) => "deleted",
            (Some(b), Some(a)) => match (&b.kind, &a.kind) {
                (Kind::Symlink { .. }, _) | (_, Kind::Symlink { .. }) => "symlink",
                (x, y) if x == y => "mode",
                _ => "modified",
            },
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn file(sha: &str, mode: u32) -> Entry {
        Entry {
            kind: Kind::File {
                sha256: sha.into(),
                size: 1,
            },
            mode,
        }
    }

    #[test]
    fn changes_are_named_created_deleted_modified_mode_and_symlink() {
        let link = Entry {
            kind: Kind::Symlink {
                target: "/etc".into(),
            },
            mode: 0o777,
        };
        let change = |before: Option<Entry>, after: Option<Entry>| {
            Change {
                path: "p".into(),
                before,
                after,
            }
            .label()
        };
        assert_eq!(change(None, Some(file("1", 0o644))), "created");
        assert_eq!(change(Some(file("1", 0o644)), None), "deleted");
        assert_eq!(
            change(Some(file("1", 0o644)), Some(file("2", 0o644))),
            "modified"
        );
        assert_eq!(
            change(Some(file("1", 0o644)), Some(file("1", 0o755))),
            "mode"
        );
        assert_eq!(change(Some(file("1", 0o644)), Some(link)), "symlink");
    }
}
