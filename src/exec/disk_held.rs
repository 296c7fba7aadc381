//! What a call holds on disk that no directory shows: files it deleted (or made with
//! `O_TMPFILE`) and still has open or mapped. Their blocks stay allocated until the last
//! descriptor closes, so a walk of the writable roots (`disk_scan`) never sees them, while
//! the filesystem's free space does: without this, 400 MiB held open past a 64 MiB budget
//! looked like someone else's writes.
//!
//! Owns one bounded look at the call's processes, where the kernel keeps the count: for each
//! process of the call's cgroups (or the call's main process where there are none), every
//! entry of `/proc/PID/fd` and `/proc/PID/map_files` is `stat`ed through the magic link (which
//! reads the inode without opening it: a FIFO cannot block it), and a regular file with no
//! name left (`st_nlink == 0`) on a watched filesystem counts with its allocated size, each
//! inode once. Memory-backed files (memfd, `/dev/shm`) are on no watched filesystem: the
//! memory cgroup counts those. No workspace is walked.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::disk_scan::Incomplete;

/// Most descriptors and mappings one look stats, over all processes: a call's `open_files`
/// and `pids` limits bound it far below this; past it the caller falls back to free space.
pub(crate) const MAX_HANDLES: u64 = 200_000;

/// Whose open files count: the call's cgroups (every process in them), or, without cgroups,
/// its main process.
#[derive(Debug, Clone)]
pub enum Holders {
    /// `cgroup.procs` files of the call's groups (one per hierarchy; the same pids).
    Cgroups(Vec<PathBuf>),
    Process(u32),
}

impl Holders {
    /// A launched tree's: its cgroups when it has them, else its main process.
    pub fn of(cgroup: Option<&crate::confine::CallCgroup>, pid: Option<u32>) -> Self {
        match (cgroup, pid) {
            (Some(cgroup), _) => Holders::Cgroups(cgroup.procs_files()),
            (None, Some(pid)) => Holders::Process(pid),
            (None, None) => Holders::Cgroups(Vec::new()),
        }
    }

    fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = match self {
            Holders::Process(pid) => vec![*pid],
            Holders::Cgroups(files) => files
                .iter()
                .filter_map(|f| read_bounded(f))
                .flat_map(|text| {
                    text.lines()
                        .filter_map(|l| l.trim().parse::<u32>().ok())
                        .collect::<Vec<_>>()
                })
                .collect(),
        };
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

/// A `cgroup.procs` (written by the kernel, not by the call) read with a bound.
fn read_bounded(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(8 << 20)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// Bytes allocated to unnamed regular files on the filesystems `devs` that the call's
/// processes hold open or mapped.
pub(crate) fn held_bytes(
    holders: &Holders,
    devs: &[u64],
    max_handles: u64,
) -> Result<u64, Incomplete> {
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut handles = 0u64;
    let mut total = 0u64;
    for pid in holders.pids() {
        for table in ["fd", "map_files"] {
            let dir = PathBuf::from(format!("/proc/{pid}/{table}"));
            // A process that ended meanwhile holds nothing any more.
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                handles += 1;
                if handles > max_handles {
                    return Err(Incomplete(format!(
                        "the call's processes hold more than {max_handles} open files and \
                         mappings"
                    )));
                }
                // stat (not lstat): through the magic link to the file itself.
                let Ok(st) = rustix::fs::stat(entry.path()) else {
                    continue;
                };
                let regular = rustix::fs::FileType::from_raw_mode(st.st_mode).is_file();
                if regular
                    && st.st_nlink == 0
                    && devs.contains(&st.st_dev)
                    && seen.insert((st.st_dev, st.st_ino))
                {
                    total = total.saturating_add((st.st_blocks as u64).saturating_mul(512));
                }
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_deleted_file_still_open_counts_once_and_a_named_one_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let dev = rustix::fs::stat(dir.path()).unwrap().st_dev;
        let path = dir.path().join("big");
        let mut held = std::fs::File::create(&path).unwrap();
        held.write_all(&vec![7u8; 1 << 20]).unwrap();
        held.sync_all().unwrap();
        let _again = std::fs::File::open(&path).unwrap();
        let named = dir.path().join("named");
        std::fs::write(&named, vec![1u8; 1 << 20]).unwrap();
        let _named_open = std::fs::File::open(&named).unwrap();
        let me = Holders::Process(std::process::id());
        let before = held_bytes(&me, &[dev], MAX_HANDLES).unwrap();
        std::fs::remove_file(&path).unwrap();
        let after = held_bytes(&me, &[dev], MAX_HANDLES).unwrap();
        // Two descriptors of one unnamed inode: counted once, at its allocated size.
        assert!(
            after - before >= 1 << 20 && after - before < 2 << 20,
            "{before} → {after}"
        );
        // Another filesystem's unnamed files are not this budget's.
        assert_eq!(held_bytes(&me, &[u64::MAX], MAX_HANDLES).unwrap(), 0);
    }

    #[test]
    fn too_many_handles_is_incomplete_not_a_small_sum() {
        let me = Holders::Process(std::process::id());
        assert!(held_bytes(&me, &[0], 1).is_err());
    }
}
