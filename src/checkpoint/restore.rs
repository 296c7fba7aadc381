//! Putting the workspace back as a recorded state had it, beneath the workspace handle.
//!
//! Owns: the target of a restore (every path the checkpoints since the chosen one changed,
//! as it was before them: [`target`]), the plan that turns the tree as it is into that target
//! ([`plan`]: removals deepest first, then creations and replacements shallowest first, then
//! directory modes deepest first), and carrying it out. Every operation is on one name
//! relative to a directory descriptor that was itself opened by one name with `O_NOFOLLOW`
//! from the workspace root, so a symlink anywhere on the way is never followed: a restore
//! cannot write outside the workspace, whatever confined code swapped in. Files, links and
//! FIFOs are made under a temporary name in their directory and renamed over the target, so
//! each is replaced atomically and a hard link to the old file is never written through.
//! Set-id bits are not put back (the server may be root), and new entries get the
//! workspace root's owner where the server may set it.
//!
//! Does not own: when a restore may run (jobs, locks: `super`), nor recording.

use super::entry::{Entry, Kind, Manifest};
use super::scan::open_dir_nofollow;
use super::store::{Record, Store};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// What the target state has at each path the restore touches (None: nothing).
pub(crate) type Target = BTreeMap<String, Option<Entry>>;

/// The target of restoring to before `records[0]`: `records` are the checkpoints from the
/// chosen one to the newest, oldest first. The oldest record naming a path says what it was.
pub(crate) fn target(records: &[Record]) -> Target {
    let mut target = Target::new();
    for record in records.iter().rev() {
        for change in &record.changes {
            target.insert(change.path.clone(), change.before.clone());
        }
    }
    target
}

/// One step of a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// Remove what is at the path (a directory with everything beneath it).
    Remove(String),
    /// Make the path hold this entry (a directory's mode is set by [`Op::DirMode`]).
    Put(String, Entry),
    /// Set a directory's permission bits, once everything beneath it is in place.
    DirMode(String, u32),
}

/// The steps from `head` (the tree as it is, just recorded) to `target`, and the paths the
/// restore cannot put back (not covered when recorded), with why.
pub(crate) fn plan(target: &Target, head: &Manifest) -> (Vec<Op>, Vec<(String, String)>) {
    let mut removals = Vec::new();
    let mut puts = Vec::new();
    let mut modes = Vec::new();
    let mut skipped = Vec::new();
    for (path, want) in target {
        let have = head.get(path).map(|c| &c.entry);
        match want {
            Some(Entry {
                kind: Kind::Uncovered { what, .. },
                ..
            }) => {
                if have != want.as_ref() {
                    skipped.push((path.clone(), format!("not recorded: {what}")));
                }
            }
            None => {
                if have.is_some() {
                    removals.push(Op::Remove(path.clone()));
                }
            }
            Some(want) => {
                if have == Some(want) {
                    continue;
                }
                // A directory and anything else cannot replace each other by a rename.
                if let Some(have) = have
                    && (have.is_dir() != want.is_dir() || have.is_uncovered())
                {
                    removals.push(Op::Remove(path.clone()));
                }
                if want.is_dir() {
                    modes.push(Op::DirMode(path.clone(), want.mode));
                }
                puts.push(Op::Put(path.clone(), want.clone()));
            }
        }
    }
    // Children before parents for removals and modes; parents before children for puts.
    removals.reverse();
    modes.reverse();
    let mut ops = removals;
    ops.extend(puts);
    ops.extend(modes);
    (ops, skipped)
}

/// Carries out `ops` beneath `root`; returns the paths it could not put back, with why.
pub(crate) fn apply(root: BorrowedFd<'_>, store: &Store, ops: &[Op]) -> Vec<(String, String)> {
    let owner = rustix::fs::fstat(root)
        .ok()
        .filter(|_| rustix::process::geteuid().is_root())
        .map(|st| (st.st_uid, st.st_gid));
    let mut failed = Vec::new();
    for op in ops {
        let (path, result) = match op {
            Op::Remove(path) => (path, remove(root, path)),
            Op::Put(path, entry) => (path, put(root, store, path, entry, owner)),
            Op::DirMode(path, mode) => (path, dir_mode(root, path, *mode)),
        };
        if let Err(e) = result {
            failed.push((path.clone(), e.to_string()));
        }
    }
    failed
}

fn cstring(name: &str) -> std::io::Result<CString> {
    CString::new(name).map_err(|_| std::io::Error::other("a name with a NUL byte"))
}

/// The directory that holds `path`, reached one name at a time without following a link;
/// missing directories on the way are made (a path included from an ignored tree has no
/// recorded parents).
fn parent(root: BorrowedFd<'_>, path: &str) -> std::io::Result<(OwnedFd, CString)> {
    let mut parts: Vec<&str> = path.split('/').collect();
    let name = parts.pop().unwrap_or_default();
    let mut dir = rustix::fs::openat(
        root,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for part in parts {
        let c = cstring(part)?;
        dir = match open_dir_nofollow(dir.as_fd(), &c) {
            Ok(next) => next,
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOENT.raw_os_error()) => {
                rustix::fs::mkdirat(&dir, &c, Mode::from_raw_mode(0o755))?;
                open_dir_nofollow(dir.as_fd(), &c)?
            }
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!(
                        "`{part}` on the way is not a directory (a symlink is never followed): {e}"
                    ),
                ));
            }
        };
    }
    Ok((dir, cstring(name)?))
}

fn remove(root: BorrowedFd<'_>, path: &str) -> std::io::Result<()> {
    let (dir, name) = parent(root, path)?;
    remove_at(dir.as_fd(), &name)
}

/// Removes `name` of `dir`, a directory with everything beneath it, never following a link.
fn remove_at(dir: BorrowedFd<'_>, name: &CString) -> std::io::Result<()> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        };
    }
    let sub = open_dir_nofollow(dir, name)?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&sub)? {
        let entry = entry?;
        let n = entry.file_name();
        if n != c"." && n != c".." {
            names.push(n.to_owned());
        }
    }
    for child in names {
        remove_at(sub.as_fd(), &child)?;
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A name for a new entry beside the target, unlikely to meet anything.
fn temp_name() -> std::io::Result<CString> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    cstring(&format!(
        ".cordon-restore-{}-{}-{nanos:x}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Permission bits a restore puts back: set-id bits never (the server may be root).
fn safe_mode(mode: u32) -> Mode {
    Mode::from_raw_mode(mode & 0o1777)
}

fn put(
    root: BorrowedFd<'_>,
    store: &Store,
    path: &str,
    entry: &Entry,
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    let (dir, name) = parent(root, path)?;
    let chown = |fd: BorrowedFd<'_>| -> std::io::Result<()> {
        if let Some((uid, gid)) = owner {
            rustix::fs::fchown(
                fd,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            )?;
        }
        Ok(())
    };
    match &entry.kind {
        Kind::Dir => {
            match rustix::fs::mkdirat(&dir, &name, Mode::from_raw_mode(0o700)) {
                Ok(()) => {
                    let sub = open_dir_nofollow(dir.as_fd(), &name)?;
                    chown(sub.as_fd())?;
                }
                Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            Ok(())
        }
        Kind::File { sha256, .. } => {
            let tmp = temp_name()?;
            let fd = rustix::fs::openat(
                &dir,
                &tmp,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?;
            let written = (|| {
                let mut out = std::fs::File::from(fd);
                let mut blob = store
                    .open_blob(sha256)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                std::io::copy(&mut blob, &mut out)?;
                out.flush()?;
                chown(out.as_fd())?;
                rustix::fs::fchmod(&out, safe_mode(entry.mode))?;
                rustix::fs::renameat(&dir, &tmp, &dir, &name)?;
                Ok(())
            })();
            if written.is_err() {
                let _ = rustix::fs::unlinkat(&dir, &tmp, AtFlags::empty());
            }
            written
        }
        Kind::Symlink { target } => {
            let tmp = temp_name()?;
            rustix::fs::symlinkat(target.as_str(), &dir, &tmp)?;
            if let Err(e) = rustix::fs::renameat(&dir, &tmp, &dir, &name) {
                let _ = rustix::fs::unlinkat(&dir, &tmp, AtFlags::empty());
                return Err(e.into());
            }
            Ok(())
        }
        Kind::Fifo => {
            let tmp = temp_name()?;
            rustix::fs::mknodat(&dir, &tmp, FileType::Fifo, safe_mode(entry.mode), 0)?;
            if let Err(e) = rustix::fs::renameat(&dir, &tmp, &dir, &name) {
                let _ = rustix::fs::unlinkat(&dir, &tmp, AtFlags::empty());
                return Err(e.into());
            }
            Ok(())
        }
        Kind::Uncovered { what, .. } => Err(std::io::Error::other(format!("not recorded: {what}"))),
    }
}

fn dir_mode(root: BorrowedFd<'_>, path: &str, mode: u32) -> std::io::Result<()> {
    let (dir, name) = parent(root, path)?;
    let sub = open_dir_nofollow(dir.as_fd(), &name)?;
    rustix::fs::fchmod(&sub, safe_mode(mode))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::entry::tests::file;
    use super::super::entry::{Cached, Change};
    use super::*;

    fn record(seq: u64, changes: Vec<(&str, Option<Entry>, Option<Entry>)>) -> Record {
        Record {
            seq,
            call: None,
            tool: "t".into(),
            summary: String::new(),
            created_at: String::new(),
            created_unix: 0,
            bytes: 0,
            changes: changes
                .into_iter()
                .map(|(p, before, after)| Change {
                    path: p.into(),
                    before,
                    after,
                })
                .collect(),
        }
    }

    fn head(entries: Vec<(&str, Entry)>) -> Manifest {
        entries
            .into_iter()
            .map(|(p, entry)| (p.to_owned(), Cached::unknown_stat(entry)))
            .collect()
    }

    fn dir(mode: u32) -> Entry {
        Entry {
            kind: Kind::Dir,
            mode,
        }
    }

    #[test]
    fn the_oldest_record_naming_a_path_says_what_it_was() {
        let records = [
            record(
                3,
                vec![("a", Some(file("1", 0o644)), Some(file("2", 0o644)))],
            ),
            record(
                4,
                vec![
                    ("a", Some(file("2", 0o644)), None),
                    ("b", None, Some(file("9", 0o600))),
                ],
            ),
        ];
        let t = target(&records);
        assert_eq!(t["a"], Some(file("1", 0o644)));
        assert_eq!(t["b"], None);
        // From the later record only: what it was before that one.
        let t = target(&records[1..]);
        assert_eq!(t["a"], Some(file("2", 0o644)));
    }

    #[test]
    fn plan_removes_children_first_and_creates_parents_first() {
        let t: Target = [
            ("d".to_owned(), None),
            ("d/x".to_owned(), None),
            ("e".to_owned(), Some(dir(0o555))),
            ("e/f".to_owned(), Some(file("1", 0o644))),
            ("same".to_owned(), Some(file("2", 0o644))),
            ("link".to_owned(), Some(file("3", 0o644))),
        ]
        .into();
        let h = head(vec![
            ("d", dir(0o755)),
            ("d/x", file("4", 0o644)),
            ("same", file("2", 0o644)),
            (
                "link",
                Entry {
                    kind: Kind::Symlink {
                        target: "/etc/passwd".into(),
                    },
                    mode: 0o777,
                },
            ),
        ]);
        let (ops, skipped) = plan(&t, &h);
        assert!(skipped.is_empty());
        assert_eq!(
            ops,
            vec![
                Op::Remove("d/x".into()),
                Op::Remove("d".into()),
                Op::Put("e".into(), dir(0o555)),
                Op::Put("e/f".into(), file("1", 0o644)),
                Op::Put("link".into(), file("3", 0o644)),
                Op::DirMode("e".into(), 0o555),
            ]
        );
    }

    #[test]
    fn what_was_not_recorded_is_reported_not_touched() {
        let big = Entry {
            kind: Kind::Uncovered {
                what: "a file of 10 bytes".into(),
                size: 10,
            },
            mode: 0o644,
        };
        let t: Target = [("big".to_owned(), Some(big))].into();
        let h = head(vec![("big", file("1", 0o644))]);
        let (ops, skipped) = plan(&t, &h);
        assert!(ops.is_empty());
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].1.contains("not recorded"));
    }
}
