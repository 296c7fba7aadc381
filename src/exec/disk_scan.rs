//! What a call wrote, for the disk budget: the allocated size of every file and directory
//! beneath the call's writable roots whose status changed (ctime) since the call started.
//!
//! Owns one bounded, symlink-free walk. `disk` runs it only when the filesystem's free space
//! says the call *may* be over its budget, so a host program writing to the same filesystem
//! (an `apt-get`, another build) is not charged to the call. ctime cannot be set back by a
//! confined process (utimes and friends set it to now; the clock cannot be changed), so a
//! file the call created or changed is always counted. A file changed by someone else during
//! the call beneath the call's own writable roots is counted too: an over-estimate, never an
//! under-estimate. Every entry is read with `statx` relative to its directory's descriptor;
//! directories are opened with `openat2` beneath the root, never through a symbolic link and
//! never onto another filesystem, so a command swapping a directory for a link to `/` while
//! the walk runs only ends that branch. When the walk cannot finish within its bounds (too
//! many entries, a path too deep), it says so and the caller falls back to the free-space
//! figure, so a call cannot hide its writes behind millions of tiny files.

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, StatxFlags};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Most entries one walk reads (over all roots). A `node_modules` of a large project holds a
/// few hundred thousand; statx costs a microsecond or two each, so a full walk stays around a
/// second of one core, and it runs only when free space fell by more than the budget.
pub(super) const MAX_ENTRIES: u64 = 1_000_000;

/// The walk could not see everything: the caller must not trust its sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Incomplete(pub String);

/// Bytes allocated to entries beneath `roots` whose ctime is at or after `since` (seconds since
/// the epoch), each inode once. `skip` names root-relative directories not walked (the
/// server's own output spill, which has its own bound).
pub(super) fn changed_bytes(
    roots: &[PathBuf],
    since: i64,
    skip: &[PathBuf],
    max_entries: u64,
) -> Result<u64, Incomplete> {
    let mut total = 0u64;
    let mut entries = 0u64;
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    for root in roots {
        let Ok(root_fd) = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            // A root that is gone holds nothing the call still occupies.
            continue;
        };
        let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let dir = match open_beneath(&root_fd, &rel) {
                Ok(fd) => fd,
                // Another filesystem mounted here is not one the budget watches; an entry
                // that vanished or became a link since it was listed has nothing to count.
                Err(rustix::io::Errno::XDEV | rustix::io::Errno::NOENT)
                | Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => continue,
                Err(rustix::io::Errno::NAMETOOLONG) => {
                    return Err(Incomplete(format!(
                        "a directory beneath {} is nested too deep to measure",
                        root.display()
                    )));
                }
                Err(_) => continue,
            };
            let listing = match rustix::fs::Dir::read_from(&dir) {
                Ok(l) => l,
                Err(_) => continue,
            };
            for entry in listing {
                let Ok(entry) = entry else { break };
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                entries += 1;
                if entries > max_entries {
                    return Err(Incomplete(format!(
                        "more than {max_entries} entries beneath the call's writable paths"
                    )));
                }
                let Ok(st) = rustix::fs::statx(
                    &dir,
                    entry.file_name(),
                    AtFlags::SYMLINK_NOFOLLOW | AtFlags::STATX_DONT_SYNC,
                    StatxFlags::TYPE
                        | StatxFlags::CTIME
                        | StatxFlags::BLOCKS
                        | StatxFlags::NLINK
                        | StatxFlags::INO,
                ) else {
                    continue;
                };
                let is_dir = u32::from(st.stx_mode) & libc::S_IFMT == libc::S_IFDIR;
                if st.stx_ctime.tv_sec >= since {
                    let fresh = st.stx_nlink <= 1
                        || is_dir
                        || linked.insert((
                            (u64::from(st.stx_dev_major) << 32) | u64::from(st.stx_dev_minor),
                            st.stx_ino,
                        ));
                    if fresh {
                        total = total.saturating_add(st.stx_blocks.saturating_mul(512));
                    }
                }
                if is_dir {
                    let child = rel.join(OsStr::from_bytes(name));
                    if !skip.contains(&child) {
                        stack.push(child);
                    }
                }
            }
        }
    }
    Ok(total)
}

fn open_beneath(root: &OwnedFd, rel: &Path) -> rustix::io::Result<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    rustix::fs::openat2(
        root,
        rel,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH
            | ResolveFlags::NO_SYMLINKS
            | ResolveFlags::NO_MAGICLINKS
            | ResolveFlags::NO_XDEV,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    fn write(path: &Path, bytes: usize) {
        let mut f = std::fs::File::create(path).unwrap();
        f.write_all(&vec![7u8; bytes]).unwrap();
        f.sync_all().unwrap();
    }

    #[test]
    fn counts_what_changed_since_and_nothing_older() {
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("old"), 4 << 20);
        let since = now() + 2; // "later": the old file's ctime is before it
        let got = changed_bytes(&[dir.path().to_path_buf()], since, &[], MAX_ENTRIES).unwrap();
        assert_eq!(got, 0);
        let since = now() - 1;
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        write(&dir.path().join("a/b/new"), 4 << 20);
        let got = changed_bytes(&[dir.path().to_path_buf()], since, &[], MAX_ENTRIES).unwrap();
        assert!(got >= 8 << 20, "{got}"); // both files changed since
        // A skipped directory is not walked.
        let got = changed_bytes(
            &[dir.path().to_path_buf()],
            since,
            &[PathBuf::from("a")],
            MAX_ENTRIES,
        )
        .unwrap();
        assert!((4 << 20..8 << 20).contains(&got), "{got}");
    }

    #[test]
    fn hard_links_count_once_and_symlinks_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        write(&outside.path().join("big"), 8 << 20);
        let since = now() - 1;
        write(&dir.path().join("f"), 2 << 20);
        std::fs::hard_link(dir.path().join("f"), dir.path().join("g")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        let got = changed_bytes(&[dir.path().to_path_buf()], since, &[], MAX_ENTRIES).unwrap();
        assert!((2 << 20..4 << 20).contains(&got), "{got}");
    }

    #[test]
    fn too_many_entries_is_incomplete_not_a_small_sum() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..20 {
            std::fs::write(dir.path().join(i.to_string()), "x").unwrap();
        }
        let err = changed_bytes(&[dir.path().to_path_buf()], 0, &[], 10).unwrap_err();
        assert!(err.0.contains("more than 10 entries"), "{err:?}");
    }
}
