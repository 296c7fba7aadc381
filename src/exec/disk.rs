//! The per-call disk budget: how much a call may write to the filesystems it can write (the
//! workspace's, the one holding the calls' private TMPDIRs, and those of the policy's extra
//! `read_write` paths).
//!
//! Owns: measuring, while the call runs, what the call's writable paths grew by, and saying
//! when (and by how much) the budget was overrun. Does not own killing the call (the caller
//! selects on [`DiskWatch::overrun`] next to its other reasons to stop) or how the result is
//! shown.
//!
//! Two measures, a cheap one and an exact one. Every tick (a few times a second) the free
//! space of each watched filesystem is read (`fstatvfs`): it is filesystem-wide, so anything
//! else writing to the same filesystem (a host `apt-get`, another build) shrinks it too, and
//! it alone must never kill a call. It is an upper bound on what the call wrote, though, so
//! only when it fell by more than the budget does the watch look at the call itself: a
//! bounded walk of the call's writable roots adding up the allocated size of what changed
//! since the call started (`disk_scan`). The call is killed only when that sum is over the
//! budget. Otherwise the rest of the shrink is someone else's, and the next walk waits until
//! free space falls by what is left of the budget again, so a host writing gigabytes costs one
//! walk per budget's worth, not one per tick. A walk that cannot finish within its bounds
//! (millions of entries) falls back to the free-space figure: a call cannot hide its writes
//! by making them impossible to count. Project quotas would count exactly, but need a
//! filesystem mounted with them and a privileged server; the walk works everywhere.
//!
//! The walk cannot see files the call deleted but keeps open (or made with `O_TMPFILE`): their
//! blocks are still the call's, so the call's processes are asked too (`disk_held`), through
//! `/proc`, where the kernel keeps them; no workspace is walked for it.
//!
//! Space freed during the call is credited by the free-space measure only (the walk counts
//! what was written, not what was deleted). The server's own spill files (the call's output
//! saved in `.cordon/outputs/`) never count: they have their own bounds, and a command
//! printing a lot is not a command filling the disk. ext4 and XFS count delayed-allocation
//! writes as used at once (in free space and in `st_blocks`), so dirty page-cache data shows
//! up before it reaches the disk.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{Mode, OFlags};

use super::outcome::{LimitHit, LimitKind};

/// How often free space is re-read while a call runs: a few times a second bounds the
/// overshoot to what a call can write in this long, at the cost of one `fstatvfs` per
/// filesystem per tick.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Workspace-relative directory the walk leaves out: the server's spill files.
const SPILL_DIR: &str = ".cordon/outputs";

/// ctime has the kernel's timestamp granularity (a jiffy on most filesystems): a second of
/// slack keeps a file the call wrote at once from looking older than the call.
const CTIME_SLACK_SECS: i64 = 1;

/// One filesystem under watch: a handle on a path in it (so a rename of the path does not
/// change which filesystem is read) and its free bytes when the call started.
struct Watched {
    shown: PathBuf,
    fd: OwnedFd,
    /// The filesystem's device, so a second path on it is not watched twice.
    dev: u64,
    baseline_free: u64,
}

/// Free space of the filesystems a call can write, with their baselines, and the roots whose
/// growth is the call's.
pub struct DiskWatch {
    watched: Vec<Watched>,
    /// Every directory given (each filesystem may hold several): what the walk covers.
    roots: Vec<PathBuf>,
    /// The first root, whose spill directory the walk skips (the workspace).
    workspace: Option<PathBuf>,
    /// When the call started, in seconds since the epoch, minus the slack.
    since: i64,
    max_entries: u64,
    budget_bytes: u64,
    interval: Duration,
    /// [`super::capture::spilled_total`] when the watch started.
    spilled_at_start: u64,
    /// The call's processes, once launched: what they hold open of files deleted since
    /// counts too (`disk_held`).
    holders: std::sync::OnceLock<super::disk_held::Holders>,
}

/// A call wrote more than its budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskOverrun {
    /// A path on the filesystem whose free space fell past the budget (the workspace root,
    /// the TMPDIR root, or an extra writable path).
    pub filesystem: PathBuf,
    /// What the call wrote: the walk's sum, or (see `measured`) the free-space shrink.
    pub used_bytes: u64,
    pub budget_bytes: u64,
    /// None: `used_bytes` is what changed beneath the call's writable paths. Some(why): the
    /// walk could not finish, `used_bytes` is the filesystem's free-space shrink.
    pub unattributed: Option<String>,
}

impl DiskOverrun {
    /// The overrun as the limit the call hit, with the figures as evidence.
    pub fn limit_hit(&self) -> LimitHit {
        LimitHit {
            kind: LimitKind::Disk,
            evidence: match &self.unattributed {
                None => format!(
                    "the call's writable paths grew by {} MiB (files it created or changed), \
                     above the budget of {} MiB (limits.disk_mb); the files it wrote are still \
                     there",
                    self.used_bytes >> 20,
                    self.budget_bytes >> 20
                ),
                Some(why) => format!(
                    "free space on the filesystem of {} fell by {} MiB during the call, above \
                     the budget of {} MiB (limits.disk_mb), and what the call wrote could not \
                     be counted ({why}); the files it wrote are still there",
                    self.filesystem.display(),
                    self.used_bytes >> 20,
                    self.budget_bytes >> 20
                ),
            },
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
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let mut watch = Self {
            watched: Vec::new(),
            roots: Vec::new(),
            workspace: dirs.first().map(|d| d.to_path_buf()),
            since: now - CTIME_SLACK_SECS,
            max_entries: super::disk_scan::MAX_ENTRIES,
            budget_bytes,
            interval,
            spilled_at_start: super::capture::spilled_total(),
            holders: std::sync::OnceLock::new(),
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

    /// Names the call's processes once they exist, so that space they hold in deleted files
    /// counts towards the budget (set once; later calls are ignored).
    pub fn held_by(&self, holders: super::disk_held::Holders) {
        let _ = self.holders.set(holders);
    }

    fn add(&mut self, path: &Path) -> std::io::Result<()> {
        // O_PATH: never blocks (a FIFO in place of the path is harmless) and reads nothing.
        let fd = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())?;
        let dev = rustix::fs::fstat(&fd)?.st_dev;
        if !self.roots.iter().any(|r| path.starts_with(r)) {
            self.roots.push(path.to_path_buf());
        }
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

    /// The cheap measure, once: the first filesystem whose free space fell by more than
    /// `allowance` since the call started (net of the server's spill files), with the fall.
    /// A filesystem that cannot be measured right now is skipped for this tick.
    fn shrink_over(&self, allowance: u64) -> Option<(PathBuf, u64)> {
        // Spilled by the server for any call meanwhile: crediting a concurrent call's spill
        // too errs towards not killing.
        let spilled = super::capture::spilled_total().saturating_sub(self.spilled_at_start);
        self.watched.iter().find_map(|w| {
            let shrink = w.baseline_free.saturating_sub(free_bytes(&w.fd).ok()?);
            let used = shrink.saturating_sub(spilled);
            (used > allowance).then(|| (w.shown.clone(), used))
        })
    }

    /// The exact measure: what changed beneath the call's writable roots since it started.
    /// Blocking (a walk): run it off the async threads.
    fn call_bytes(&self) -> Result<u64, super::disk_scan::Incomplete> {
        let skip = [PathBuf::from(SPILL_DIR)];
        let mut total = 0u64;
        for root in &self.roots {
            let skip: &[PathBuf] = if Some(root) == self.workspace.as_ref() {
                &skip
            } else {
                &[]
            };
            total = total.saturating_add(super::disk_scan::changed_bytes(
                std::slice::from_ref(root),
                self.since,
                skip,
                self.max_entries,
            )?);
        }
        if let Some(holders) = self.holders.get() {
            let devs: Vec<u64> = self.watched.iter().map(|w| w.dev).collect();
            total = total.saturating_add(super::disk_held::held_bytes(
                holders,
                &devs,
                super::disk_held::MAX_HANDLES,
            )?);
        }
        Ok(total)
    }

    /// Resolves when the call wrote more than its budget, checking every interval; never
    /// resolves while it stays within it (whatever else fills the filesystem). Meant as one
    /// arm of the `select!` that waits for the call.
    pub async fn overrun(self: &std::sync::Arc<Self>) -> DiskOverrun {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // How far free space may fall before the next walk: the budget at first; after a walk
        // that found `w` bytes of the call's when free space had fallen by `s`, `s + budget -
        // w` (if all the fall since were the call's, that is where it would cross).
        let mut allowance = self.budget_bytes;
        loop {
            tick.tick().await;
            let Some((filesystem, shrink)) = self.shrink_over(allowance) else {
                continue;
            };
            let watch = std::sync::Arc::clone(self);
            let walked = tokio::task::spawn_blocking(move || watch.call_bytes())
                .await
                .unwrap_or_else(|e| Err(super::disk_scan::Incomplete(e.to_string())));
            match walked {
                Ok(bytes) if bytes <= self.budget_bytes => {
                    allowance = shrink.saturating_add(self.budget_bytes - bytes);
                }
                Ok(bytes) => {
                    return DiskOverrun {
                        filesystem,
                        used_bytes: bytes,
                        budget_bytes: self.budget_bytes,
                        unattributed: None,
                    };
                }
                Err(super::disk_scan::Incomplete(why)) => {
                    return DiskOverrun {
                        filesystem,
                        used_bytes: shrink,
                        budget_bytes: self.budget_bytes,
                        unattributed: Some(why),
                    };
                }
            }
        }
    }
}

/// [`DiskWatch::overrun`] of an optional watch: pends for ever without one, so a `select!`
/// arm can take it unconditionally.
pub(crate) async fn overrun(watch: Option<&std::sync::Arc<DiskWatch>>) -> DiskOverrun {
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
    use std::io::Write;
    use std::sync::Arc;

    #[test]
    fn a_watch_over_one_filesystem_measures_it_once() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir_in(a.path()).unwrap();
        let w = DiskWatch::start(&[a.path(), b.path()], 1 << 40).unwrap();
        assert_eq!(w.watched.len(), 1, "same filesystem twice");
        assert_eq!(w.roots.len(), 1, "a root beneath another is walked with it");
        assert_eq!(w.shrink_over(w.budget_bytes), None);
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

    fn fill(path: &Path, bytes: usize) {
        let mut f = std::fs::File::create(path).unwrap();
        // Real data (not a sparse hole) and synced, so every filesystem has counted it.
        f.write_all(&vec![1u8; bytes]).unwrap();
        f.sync_all().unwrap();
    }

    #[tokio::test]
    async fn writing_past_the_budget_is_reported_with_the_figures() {
        let parent = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir_in(parent.path()).unwrap();
        let w = Arc::new(
            DiskWatch::with_interval(&[dir.path()], 4 << 20, Duration::from_millis(10)).unwrap(),
        );
        fill(&dir.path().join("big"), 32 << 20);
        let hit = tokio::time::timeout(Duration::from_secs(10), w.overrun())
            .await
            .expect("a 32 MiB write overruns a 4 MiB budget");
        assert!(hit.used_bytes >= 32 << 20, "{hit:?}");
        assert_eq!(hit.unattributed, None, "{hit:?}");
        assert_eq!(hit.limit_hit().kind, LimitKind::Disk);
        assert!(hit.limit_hit().evidence.contains("limits.disk_mb"));
    }

    #[tokio::test]
    async fn what_others_write_to_the_same_filesystem_is_not_the_calls() {
        // Both directories on one filesystem: free space falls by 32 MiB, but the call's
        // root holds only 1 MiB of it.
        let parent = tempfile::tempdir().unwrap();
        let call = tempfile::tempdir_in(parent.path()).unwrap();
        let other = tempfile::tempdir_in(parent.path()).unwrap();
        let w = Arc::new(
            DiskWatch::with_interval(&[call.path()], 4 << 20, Duration::from_millis(10)).unwrap(),
        );
        fill(&other.path().join("host"), 32 << 20);
        fill(&call.path().join("mine"), 1 << 20);
        let quiet = tokio::time::timeout(Duration::from_millis(500), w.overrun()).await;
        assert!(quiet.is_err(), "the host's write was charged: {quiet:?}");
        // The call's own write past the budget still is.
        fill(&call.path().join("more"), 8 << 20);
        let hit = tokio::time::timeout(Duration::from_secs(10), w.overrun())
            .await
            .expect("the call's own 9 MiB overrun its 4 MiB budget");
        assert!(hit.used_bytes >= 9 << 20, "{hit:?}");
    }

    #[tokio::test]
    async fn a_walk_that_cannot_finish_falls_back_to_free_space() {
        let parent = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir_in(parent.path()).unwrap();
        let mut w =
            DiskWatch::with_interval(&[dir.path()], 4 << 20, Duration::from_millis(10)).unwrap();
        w.max_entries = 5;
        let w = Arc::new(w);
        for i in 0..10 {
            std::fs::write(dir.path().join(format!("small{i}")), "x").unwrap();
        }
        fill(&parent.path().join("elsewhere"), 32 << 20);
        let hit = tokio::time::timeout(Duration::from_secs(10), w.overrun())
            .await
            .expect("an uncountable call is judged by free space");
        let why = hit.unattributed.clone().expect("unattributed");
        assert!(why.contains("more than 5 entries"), "{why}");
        assert!(hit.limit_hit().evidence.contains("could not be counted"));
    }
}
