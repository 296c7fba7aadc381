//! The per-call disk budget: how much a call may shrink the free space of the filesystems it
//! can write (the workspace's, the one holding the calls' private TMPDIRs, and those of the
//! policy's extra `read_write` paths, each filesystem once).
//!
//! Owns: taking a baseline of free space before the call starts, re-reading it a few times a
//! second while the call runs, and saying when (and by how much) the budget was overrun. Does
//! not own killing the call (the caller selects on [`DiskWatch::overrun`] next to its other
//! reasons to stop) or how the result is shown.
//!
//! Why free space and not bytes written: RLIMIT_FSIZE bounds one file, not how many files a
//! call writes, and the kernel has no per-cgroup disk quota for ordinary filesystems. Free
//! space is what runs out. It is a filesystem-wide figure, so writes by anything else on the
//! same filesystem during the call (a concurrent call, another program) count too; the budget
//! is meant to be generous enough that only a runaway call reaches it. Space freed during the
//! call (a deleted build directory) is credited back: the budget is on the net shrink. So are
//! the server's own spill files (the call's output saved in `.cordon/outputs/`): they have
//! their own bounds, and a command printing a lot is not a command filling the disk.
//! ext4 and XFS count delayed-allocation writes as used at once, so dirty page-cache data
//! shows up before it reaches the disk.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{Mode, OFlags};

use super::outcome::{LimitHit, LimitKind};

/// How often free space is re-read while a call runs: a few times a second bounds the
/// overshoot to what a call can write in this long, at the cost of one `fstatvfs` per
/// filesystem per tick.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// One filesystem under watch: a handle on a path in it (so a rename of the path does not
/// change which filesystem is read) and its free bytes when the call started.
struct Watched {
    shown: PathBuf,
    fd: OwnedFd,
    /// The filesystem's device, so a second path on it is not watched twice.
    dev: u64,
    baseline_free: u64,
}

/// Free space of the filesystems a call can write, with their baselines.
pub struct DiskWatch {
    watched: Vec<Watched>,
    budget_bytes: u64,
    interval: Duration,
    /// [`super::capture::spilled_total`] when the watch started.
    spilled_at_start: u64,
}

/// A call shrank a filesystem's free space by more than its budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskOverrun {
    /// A path on the filesystem that shrank (the workspace root, the TMPDIR root, or an
    /// extra writable path).
    pub filesystem: PathBuf,
    /// How much free space fell since the call started.
    pub used_bytes: u64,
    pub budget_bytes: u64,
}

impl DiskOverrun {
    /// The overrun as the limit the call hit, with the figures as evidence.
    pub fn limit_hit(&self) -> LimitHit {
        LimitHit {
            kind: LimitKind::Disk,
            evidence: format!(
                "free space on the filesystem of {} fell by {} MiB during the call, above the \
                 budget of {} MiB (limits.disk_mb); the files it wrote are still there",
                self.filesystem.display(),
                self.used_bytes >> 20,
                self.budget_bytes >> 20
            ),
        }
    }
}

impl DiskWatch {
    /// Takes the baseline of every distinct filesystem holding one of `dirs`. A directory that
    /// cannot be opened or measured is an error: a budget that silently watches nothing would
    /// be a limit that is not there.
    pub fn start(dirs: &[&Path], budget_bytes: u64) -> std::io::Result<Self> {
        Self::with_interval(dirs, budget_bytes, POLL_INTERVAL)
    }

    /// [`Self::start`] with another polling interval (tests use a short one).
    pub fn with_interval(
        dirs: &[&Path],
        budget_bytes: u64,
        interval: Duration,
    ) -> std::io::Result<Self> {
        let mut watch = Self {
            watched: Vec::new(),
            budget_bytes,
            interval,
            spilled_at_start: super::capture::spilled_total(),
        };
        for dir in dirs {
            watch.add(dir)?;
        }
        Ok(watch)
    }

    /// Also watches the filesystem of `path`, if it can be measured now (an extra writable
    /// path of the policy may not exist yet; then there is nothing on it to protect).
    pub fn also_watch(mut self, path: &Path) -> Self {
        let _ = self.add(path);
        self
    }

    fn add(&mut self, path: &Path) -> std::io::Result<()> {
        // O_PATH: never blocks (a FIFO in place of the path is harmless) and reads nothing.
        let fd = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
        let dev = rustix::fs::fstat(&fd)?.st_dev;
        if self.watched.iter().any(|w| w.dev == dev) {
            return Ok(());
        }
        let baseline_free = free_bytes(&fd)?;
        self.watched.push(Watched {
            shown: path.to_path_buf(),
            fd,
            dev,
            baseline_free,
        });
        Ok(())
    }

    /// Measures once: the first filesystem whose free space fell by more than the budget.
    /// A filesystem that cannot be measured right now is skipped for this tick.
    pub fn check(&self) -> Option<DiskOverrun> {
        // Spilled by the server for any call meanwhile: crediting a concurrent call's spill
        // too errs towards not killing.
        let spilled = super::capture::spilled_total().saturating_sub(self.spilled_at_start);
        self.watched.iter().find_map(|w| {
            let shrink = w.baseline_free.saturating_sub(free_bytes(&w.fd).ok()?);
            let used = shrink.saturating_sub(spilled);
            (used > self.budget_bytes).then(|| DiskOverrun {
                filesystem: w.shown.clone(),
                used_bytes: used,
                budget_bytes: self.budget_bytes,
            })
        })
    }

    /// Resolves when the budget is overrun, checking every interval; never resolves while the
    /// call stays within it. Meant as one arm of the `select!` that waits for the call.
    pub async fn overrun(&self) -> DiskOverrun {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Some(hit) = self.check() {
                return hit;
            }
        }
    }
}

/// [`DiskWatch::overrun`] of an optional watch: pends for ever without one, so a `select!`
/// arm can take it unconditionally.
pub async fn overrun(watch: Option<&DiskWatch>) -> DiskOverrun {
    match watch {
        Some(w) => w.overrun().await,
        None => std::future::pending().await,
    }
}

/// Free bytes including the blocks reserved for root: the server is often root, and so may
/// be what a call writes as, so reserved blocks run out too.
fn free_bytes(fd: &OwnedFd) -> std::io::Result<u64> {
    let s = rustix::fs::fstatvfs(fd)?;
    Ok(s.f_bfree.saturating_mul(s.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_over_one_filesystem_measures_it_once() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir_in(a.path()).unwrap();
        let w = DiskWatch::start(&[a.path(), b.path()], 1 << 40).unwrap();
        assert_eq!(w.watched.len(), 1, "same filesystem twice");
        assert_eq!(w.check(), None);
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_silent_no_op() {
        let a = tempfile::tempdir().unwrap();
        assert!(DiskWatch::start(&[&a.path().join("gone")], 1 << 20).is_err());
        // An optional extra path that is missing is skipped, the rest still watched.
        let w = DiskWatch::start(&[a.path()], 1 << 20)
            .unwrap()
            .also_watch(&a.path().join("gone"));
        assert_eq!(w.watched.len(), 1);
        let w = DiskWatch::start(&[], 1 << 20)
            .unwrap()
            .also_watch(&a.path().join("gone"));
        assert!(w.watched.is_empty());
    }

    #[tokio::test]
    async fn writing_past_the_budget_is_reported_with_the_figures() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let w =
            DiskWatch::with_interval(&[dir.path()], 4 << 20, Duration::from_millis(10)).unwrap();
        let mut f = std::fs::File::create(dir.path().join("big")).unwrap();
        // Real data (not a sparse hole) and synced, so every filesystem has counted it.
        f.write_all(&vec![1u8; 32 << 20]).unwrap();
        f.sync_all().unwrap();
        let hit = tokio::time::timeout(Duration::from_secs(10), w.overrun())
            .await
            .expect("a 32 MiB write overruns a 4 MiB budget");
        assert!(hit.used_bytes >= 4 << 20, "{hit:?}");
        assert_eq!(hit.limit_hit().kind, LimitKind::Disk);
        assert!(hit.limit_hit().evidence.contains("limits.disk_mb"));
    }
}
