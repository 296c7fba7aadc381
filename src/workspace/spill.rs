//! The spill area: `.cordon/outputs/` inside the workspace, where full outputs are saved when a
//! tool result has to be cut short.
//!
//! Owns: creating `.cordon/` (git-ignored through its own `.gitignore` holding `*`) and
//! `.cordon/outputs/`, handing out uniquely named files there, and keeping the area bounded
//! (at most [`KEEP_SPILL_FILES`] files, and a total size cap: the oldest files go first). Does
//! not own: what is written into them (`exec::capture` stops one file at
//! [`SPILL_LIMIT`] bytes) or truncation.
//!
//! `.cordon` and `outputs` are opened without following symlinks: if the agent replaced them by
//! links into the tree (say to `src/`), a `.gitignore` of `*` written there would silently hide
//! real source files from git.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt, OpenOptionsSyncExt};
use cap_std::fs::OpenOptionsExt;
use cap_std::fs::{Dir, File, OpenOptions};

use super::{PathError, RelPath, Workspace};
/// The most written to one spill file: a command printing forever must not fill the disk
/// (the child's RLIMIT_FSIZE does not apply to files the server writes).
pub const SPILL_LIMIT: u64 = 512 << 20;

pub(super) const CORDON_DIR: &str = ".cordon";
pub(super) const OUTPUTS_DIR: &str = "outputs";
const SPILL_REL: &str = ".cordon/outputs";
pub(super) const GITIGNORE: &str = ".gitignore";
pub(super) const GITIGNORE_CONTENT: &[u8] =
    b"# Written by cordon: keep its own files out of git.\n*\n";

/// Process-wide, so two calls in the same second still get different names.
static SPILL_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Spill files kept; the oldest beyond this are deleted when a new one is created, so the
/// area cannot grow without bound across a long session.
const KEEP_SPILL_FILES: usize = 100;

/// The total size cap when the policy sets none (`output.spill_total_mb` of the default policy).
pub(crate) const DEFAULT_SPILL_TOTAL: u64 = 2048 << 20;

/// How many names to try before giving up (only reached if another process floods the area).
const MAX_NAME_ATTEMPTS: usize = 1000;

impl Workspace {
    /// Ensures `.cordon/outputs/` exists (with `.cordon/.gitignore`) and returns its path.
    pub fn spill_dir(&self) -> Result<RelPath, PathError> {
        self.open_spill_dir()?;
        Ok(RelPath::from_trusted(SPILL_REL.to_owned()))
    }

    /// Creates a new, empty file in the spill area named `<prefix>-<UTC time>-<counter>.txt`
    /// and returns its workspace-relative path and a read/write handle.
    pub fn create_spill_file(&self, prefix: &str) -> Result<(RelPath, File), PathError> {
        let outputs = self.open_spill_dir()?;
        let prefix = sanitize_prefix(prefix);
        let stamp = utc_stamp(SystemTime::now());
        let mut options = OpenOptions::new();
        // create_new (O_EXCL) already refuses any existing name, link or FIFO included; no
        // follow and non-blocking say so explicitly, for the day someone drops create_new.
        options
            .read(true)
            .write(true)
            .create_new(true)
            .follow(FollowSymlinks::No)
            .nonblock(true);
        for _ in 0..MAX_NAME_ATTEMPTS {
            let n = SPILL_COUNTER.fetch_add(1, Ordering::Relaxed);
            let name = format!("{prefix}-{stamp}-{n:04}.txt");
            let rel = RelPath::from_trusted(format!("{SPILL_REL}/{name}"));
            match outputs.open_with(&name, &options) {
                Ok(file) => {
                    // Room for the new file to reach its own limit without the area passing
                    // the total; a cap below one full file still keeps the new one.
                    let others_budget = self.spill_total.saturating_sub(SPILL_LIMIT);
                    prune_oldest(&outputs, &name, KEEP_SPILL_FILES, others_budget);
                    return Ok((rel, file));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(PathError::at(&rel, e)),
            }
        }
        Err(PathError::Io {
            path: SPILL_REL.to_owned(),
            source: io::Error::other("could not find a free file name in the spill area"),
        })
    }

    /// [`Self::create_spill_file`] as the (display path, std file) pair the output capture and
    /// shaping want, with the error as `io::Error`.
    pub fn create_spill_std(&self, prefix: &str) -> io::Result<(String, std::fs::File)> {
        self.create_spill_file(prefix)
            .map(|(path, file)| (path.as_str().to_owned(), file.into_std()))
            .map_err(|e| io::Error::other(e.to_string()))
    }

    /// The spill files, newest first: (name, size in bytes). Best effort: an unreadable area
    /// lists nothing.
    pub fn list_spill_files(&self) -> Vec<(String, u64)> {
        let Ok(outputs) = self.open_spill_dir() else {
            return Vec::new();
        };
        let mut files = spill_entries(&outputs);
        files.sort_by_key(|f| std::cmp::Reverse(f.modified));
        files.into_iter().map(|f| (f.name, f.len)).collect()
    }

    /// The size of spill file `name` (a plain name, as [`Workspace::read_spill_file`] takes),
    /// when it is a regular file: one `lstat` in the spill area, not a listing of it.
    pub fn spill_file_size(&self, name: &str) -> Option<u64> {
        if !is_plain_spill_name(name) {
            return None;
        }
        let meta = self.open_spill_dir().ok()?.symlink_metadata(name).ok()?;
        meta.is_file().then(|| meta.len())
    }

    /// Reads the spill file `name` (one plain file name, no directories) through the
    /// workspace capability: opened without following a symlink, never blocking on a FIFO,
    /// refused unless it is a regular file of at most `limit` bytes.
    pub fn read_spill_file(&self, name: &str, limit: u64) -> Result<Vec<u8>, PathError> {
        let rel = RelPath::from_trusted(format!("{SPILL_REL}/{name}"));
        if !is_plain_spill_name(name) {
            return Err(PathError::invalid(
                rel.as_str(),
                "not a spill file name: spill files are plain names in .cordon/outputs/ (as \
                 a result's full_output gives them)",
            ));
        }
        let outputs = self.open_spill_dir()?;
        let mut options = OpenOptions::new();
        options.read(true);
        options.follow(FollowSymlinks::No);
        options.custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
        let file = outputs
            .open_with(name, &options)
            .map_err(|e| PathError::at(&rel, e))?;
        let meta = file.metadata().map_err(|e| PathError::at(&rel, e))?;
        if !meta.is_file() {
            return Err(PathError::invalid(rel.as_str(), "not a regular file"));
        }
        if meta.len() > limit {
            return Err(PathError::TooLarge {
                path: rel.to_string(),
                size: meta.len(),
                limit,
            });
        }
        super::read_capped(&rel, file, meta.len(), limit)
    }

    fn open_spill_dir(&self) -> Result<Dir, PathError> {
        let cordon = open_or_create_dir_nofollow(&self.dir, CORDON_DIR, CORDON_DIR)?;
        ensure_gitignore(&cordon)?;
        open_or_create_dir_nofollow(&cordon, OUTPUTS_DIR, SPILL_REL)
    }
}

/// A name cordon gives spill files: no directories, no dot files, nothing to escape with.
fn is_plain_spill_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Deletes the oldest regular files in `dir` other than `new` (just created) until at most
/// `keep` files remain in all and the others total at most `others_budget` bytes. Best
/// effort: a file that vanished or cannot be removed is skipped. Sizes are the space the
/// files take on disk (a sparse file planted here counts for what it uses, not its length).
fn prune_oldest(dir: &Dir, new: &str, keep: usize, others_budget: u64) {
    let mut files: Vec<(SystemTime, String, u64)> = spill_entries(dir)
        .into_iter()
        .filter(|f| f.name != new)
        .map(|f| (f.modified, f.name, f.on_disk))
        .collect();
    // Oldest first; the name breaks ties (its counter grows within one second).
    files.sort();
    let mut count = files.len() + 1;
    let mut total: u64 = files.iter().map(|f| f.2).sum();
    for (_, name, size) in files {
        if count <= keep && total <= others_budget {
            break;
        }
        if dir.remove_file(&name).is_ok() {
            count -= 1;
            total = total.saturating_sub(size);
        }
    }
}

/// One regular file of the spill area.
struct SpillEntry {
    modified: SystemTime,
    name: String,
    /// Length in bytes.
    len: u64,
    /// Space it takes on disk (a sparse file counts for what it uses).
    on_disk: u64,
}

/// The regular files of the spill area with UTF-8 names (symlinks and others are not
/// listed: the metadata is the entry's own, never a link's target). Best effort.
/// The most directory entries one listing of the spill area reads. cordon keeps 100 files
/// there; where commands can write into it (no namespaces and not root, or a policy that does
/// not protect `.cordon`) one could fill it with millions, and a listing (every spilled result,
/// `resources/list`) would hold them all in memory.
const MAX_LISTED_ENTRIES: usize = 10_000;

fn spill_entries(dir: &Dir) -> Vec<SpillEntry> {
    use cap_std::fs::MetadataExt;
    let Ok(entries) = dir.entries() else {
        return Vec::new();
    };
    entries
        .take(MAX_LISTED_ENTRIES)
        .flatten()
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            if !meta.is_file() {
                return None;
            }
            Some(SpillEntry {
                modified: meta.modified().ok()?.into_std(),
                name: e.file_name().to_str()?.to_owned(),
                len: meta.len(),
                on_disk: meta.blocks().saturating_mul(512),
            })
        })
        .collect()
}

/// Creates `name` in `parent` if missing and opens it, refusing a symlink in its place.
pub(super) fn open_or_create_dir_nofollow(
    parent: &Dir,
    name: &str,
    shown: &str,
) -> Result<Dir, PathError> {
    match make_dir(parent, name) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(PathError::from_io(shown, e)),
    }
    parent
        .open_dir_nofollow(name)
        .map_err(|e| match e.raw_os_error() {
            // ENOTDIR/ELOOP: a file or symlink sits where cordon's directory should be.
            Some(20 | 40) => PathError::invalid(
                shown,
                "cordon keeps its own files here, but this is a file or symbolic link, not a \
             directory; remove or rename it so cordon can recreate the directory",
            ),
            _ => PathError::from_io(shown, e),
        })
}

/// Creates directory `name` in `parent` with mode 0755 whatever the umask lets through
/// beyond it (never writable by others: the start moves such a directory aside, see
/// `reclaim`).
pub(super) fn make_dir(parent: &Dir, name: &str) -> io::Result<()> {
    use std::os::fd::AsFd;
    rustix::fs::mkdirat(parent.as_fd(), name, rustix::fs::Mode::from_raw_mode(0o755))
        .map_err(io::Error::from)
}

/// Writes `.cordon/.gitignore` unless it exists; an existing one is the user's to keep.
fn ensure_gitignore(cordon: &Dir) -> Result<(), PathError> {
    let shown = format!("{CORDON_DIR}/{GITIGNORE}");
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    match cordon.open_with(GITIGNORE, &options) {
        Ok(mut file) => file
            .write_all(GITIGNORE_CONTENT)
            .map_err(|e| PathError::from_io(&shown, e)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(PathError::from_io(&shown, e)),
    }
}

/// Keeps file names boring: ASCII letters, digits, `-` and `_`, at most 40 of them.
fn sanitize_prefix(prefix: &str) -> String {
    let clean: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    if clean.is_empty() {
        "output".to_owned()
    } else {
        clean
    }
}

/// `YYYYMMDD-HHMMSS` in UTC, readable by a human listing the directory.
fn utc_stamp(now: SystemTime) -> String {
    crate::clock::Utc::of(now).compact()
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_newest_spill_files_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let ws = crate::workspace::Workspace::open(dir.path()).unwrap();
        for _ in 0..(super::KEEP_SPILL_FILES + 7) {
            ws.create_spill_file("t").unwrap();
        }
        let n = std::fs::read_dir(dir.path().join(".cordon/outputs"))
            .unwrap()
            .count();
        assert_eq!(n, super::KEEP_SPILL_FILES);
    }

    use super::*;
    use std::time::Duration;

    /// Files planted in the spill area by a command (where it may write there) cost a listing
    /// at most `MAX_LISTED_ENTRIES` entries, however many there are.
    #[test]
    fn a_spill_files_size_is_one_stat_and_only_of_a_plain_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let ws = crate::workspace::Workspace::open(dir.path()).unwrap();
        let (rel, mut file) = ws.create_spill_file("t").unwrap();
        file.write_all(b"hello").unwrap();
        let name = rel.as_str().rsplit('/').next().unwrap().to_owned();
        assert_eq!(ws.spill_file_size(&name), Some(5));
        let outputs = dir.path().join(".cordon/outputs");
        std::os::unix::fs::symlink("/etc/passwd", outputs.join("link")).unwrap();
        std::fs::create_dir(outputs.join("sub")).unwrap();
        for name in ["link", "sub", "missing", "../.gitignore", ".hidden", ""] {
            assert_eq!(ws.spill_file_size(name), None, "{name}");
        }
    }

    #[test]
    fn a_flooded_spill_area_is_listed_within_a_bound() {
        let dir = tempfile::tempdir().unwrap();
        let ws = crate::workspace::Workspace::open(dir.path()).unwrap();
        ws.create_spill_file("t").unwrap();
        let outputs = dir.path().join(".cordon/outputs");
        for i in 0..MAX_LISTED_ENTRIES + 500 {
            std::fs::write(outputs.join(format!("planted-{i}")), "").unwrap();
        }
        let listed = ws.list_spill_files().len();
        assert!(
            listed <= MAX_LISTED_ENTRIES && listed > KEEP_SPILL_FILES,
            "{listed} entries listed"
        );
    }

    #[test]
    fn spill_files_are_read_without_following_links_or_leaving_the_area() {
        let dir = tempfile::tempdir().unwrap();
        let ws = crate::workspace::Workspace::open(dir.path()).unwrap();
        let (rel, mut file) = ws.create_spill_file("t").unwrap();
        file.write_all(b"hello").unwrap();
        let name = rel.as_str().rsplit('/').next().unwrap().to_owned();
        assert_eq!(ws.read_spill_file(&name, 100).unwrap(), b"hello");
        assert!(matches!(
            ws.read_spill_file(&name, 2),
            Err(PathError::TooLarge { .. })
        ));
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("secret"),
            dir.path().join(".cordon/outputs/link.txt"),
        )
        .unwrap();
        assert!(ws.read_spill_file("link.txt", 100).is_err());
        assert!(ws.read_spill_file("../.gitignore", 100).is_err());
        assert!(ws.read_spill_file(".hidden", 100).is_err());
        let listed: Vec<String> = ws.list_spill_files().into_iter().map(|f| f.0).collect();
        assert_eq!(listed, vec![name], "links are not listed");
    }

    #[test]
    fn spill_total_cap_drops_the_oldest_files() {
        let dir = tempfile::tempdir().unwrap();
        // Room for the new file's 512 MiB plus 3 MiB of older output.
        let ws = crate::workspace::Workspace::open(dir.path())
            .unwrap()
            .with_spill_total(SPILL_LIMIT + (3 << 20));
        let mut made = Vec::new();
        for i in 0..6u8 {
            let (rel, mut file) = ws.create_spill_file("t").unwrap();
            // Real blocks (the cap counts disk usage), 1 MiB each.
            file.write_all(&vec![i + 1; 1 << 20]).unwrap();
            file.sync_all().unwrap();
            made.push(rel.as_str().to_owned());
            // Distinct modification times even on coarse-timestamp filesystems.
            std::thread::sleep(Duration::from_millis(20));
        }
        let exists = |rel: &str| dir.path().join(rel).exists();
        // Each new file leaves at most 3 MiB (three files) of older ones: the oldest went.
        assert!(!exists(&made[0]) && !exists(&made[1]), "oldest kept");
        assert!(made[2..].iter().all(|r| exists(r)), "newer ones deleted");
    }

    #[test]
    fn stamps_are_utc_calendar_dates() {
        use std::time::UNIX_EPOCH;
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101-000000");
        // 2026-11-30 23:29:41 UTC
        let t = UNIX_EPOCH + Duration::from_secs(1_796_081_381);
        assert_eq!(utc_stamp(t), "20261130-232941");
        // Leap day.
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(utc_stamp(t), "20000229-000000");
    }

    #[test]
    fn prefixes_are_sanitized() {
        assert_eq!(sanitize_prefix("shell_exec-stdout"), "shell_exec-stdout");
        assert_eq!(sanitize_prefix("../../etc/x"), "______etc_x");
        assert_eq!(sanitize_prefix(""), "output");
        assert_eq!(sanitize_prefix(&"a".repeat(100)).len(), 40);
    }
}
