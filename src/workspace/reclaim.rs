//! cordon's own directories in the workspace (`.cordon/`, `.cordon/outputs/`, the calls' home
//! `.cordon-home/`), taken back at start when what sits in their place is not cordon's.
//!
//! Calls can write the workspace, so a call can leave a symlink, a file, a FIFO or a
//! directory nobody can enter where cordon keeps its own directories. Refusing to start on
//! that would let one call stop every later `cordon serve` on the workspace; following or
//! reusing it would let a call steer the server's writes. Instead each entry is judged on its
//! own `lstat` (never through a link, never opened, so a FIFO cannot block the start) and,
//! unless it is a directory of the server's (or the workspace owner's) uid that its owner can
//! use and nobody else can write, it is renamed, as it is, to
//! `<name>.moved-aside-<UTC time>-<random>` in the same directory: one `renameat2` with
//! `RENAME_NOREPLACE` beneath the workspace capability, which moves the entry itself (a link
//! stays a link) and never replaces anything, so a name the sandbox guessed and pre-created
//! makes the rename fail and another random name is tried. The caller then creates the
//! directory afresh and says what it moved ([`MovedAside`]: the server's log and each
//! session's first log message).
//!
//! Does not own creating the directories or what goes in them (`spill`, `home`).

use std::io::{self, Read};
use std::os::fd::AsFd;

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, FileType, RenameFlags};

use super::spill::{CORDON_DIR, OUTPUTS_DIR};
use super::{PathError, Workspace};

/// Random names tried before giving up (each clash means the name was taken).
const MOVE_ATTEMPTS: usize = 8;
/// Times one directory is taken back in a row: a process racing the start by planting the
/// entry again each time it is moved ends the start with an error instead of a loop.
const RECLAIM_ATTEMPTS: usize = 3;

/// One entry the start found where cordon keeps a directory of its own, and where it went.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MovedAside {
    /// Workspace-relative path cordon keeps its directory at (`.cordon-home`).
    pub path: String,
    /// What was there instead, in words ("a symbolic link to /etc", "a FIFO", "a directory
    /// of uid 65534").
    pub found: String,
    /// Workspace-relative path it was moved to.
    pub moved_to: String,
}

impl MovedAside {
    /// One sentence for the server's log and the sessions' log message.
    pub fn message(&self) -> String {
        format!(
            "{} was {}, not cordon's own directory: it was moved aside to {} (as it was, \
             nothing followed or deleted) and a new one was made; delete the moved entry once \
             you have looked at it",
            self.path, self.found, self.moved_to
        )
    }
}

/// Whose directory cordon accepts as its own: the server's uid, or the workspace root's
/// owner (the uid the calls' files belong to on disk).
#[derive(Debug, Clone, Copy)]
pub(super) struct Owners {
    server: u32,
    workspace: u32,
}

impl Workspace {
    /// Takes back cordon's directories before the start creates them: `.cordon/` and
    /// `.cordon/outputs/` when `spill_area`, and the calls' home `home` when given. Returns
    /// what was moved aside (nothing, almost always). Call it before [`Workspace::spill_dir`]
    /// and [`Workspace::ensure_home`].
    pub fn reclaim_own_dirs(
        &self,
        spill_area: bool,
        home: Option<&str>,
    ) -> Result<Vec<MovedAside>, PathError> {
        let owners = Owners {
            server: rustix::process::geteuid().as_raw(),
            workspace: rustix::fs::fstat(self.dir.as_fd())
                .map_err(|e| PathError::from_io(".", e.into()))?
                .st_uid,
        };
        let mut moved = Vec::new();
        if spill_area {
            moved.extend(reclaim(&self.dir, CORDON_DIR, "", owners)?);
            // `outputs` is judged inside the `.cordon` just taken back (or found right).
            let cordon =
                super::spill::open_or_create_dir_nofollow(&self.dir, CORDON_DIR, CORDON_DIR)?;
            moved.extend(reclaim(&cordon, OUTPUTS_DIR, CORDON_DIR, owners)?);
        }
        if let Some(home) = home {
            moved.extend(reclaim(&self.dir, home, "", owners)?);
        }
        for m in &moved {
            tracing::warn!("{}", m.message());
        }
        Ok(moved)
    }
}

/// Judges `name` in `parent` (shown beneath `prefix`) and moves it aside unless it is
/// cordon's, then makes sure a fresh directory can take its place.
fn reclaim(
    parent: &Dir,
    name: &str,
    prefix: &str,
    owners: Owners,
) -> Result<Option<MovedAside>, PathError> {
    let shown = if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    };
    let mut moved = None;
    for _ in 0..RECLAIM_ATTEMPTS {
        let Some(found) = not_ours(parent, name, &shown, owners)? else {
            return Ok(moved);
        };
        let to = move_aside(parent, name, &shown)?;
        let moved_to = if prefix.is_empty() {
            to
        } else {
            format!("{prefix}/{to}")
        };
        moved = Some(MovedAside {
            path: shown.clone(),
            found,
            moved_to,
        });
        // Made here, at once, so the name is cordon's before anything can plant it again.
        match super::spill::make_dir(parent, name) {
            Ok(()) => return Ok(moved),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(PathError::from_io(&shown, e)),
        }
    }
    Err(PathError::invalid(
        &shown,
        "something keeps replacing cordon's directory here while the server starts (it was \
         moved aside three times); stop the process that writes it and start again",
    ))
}

/// What `name` is when it is not cordon's directory, in words; None when it is cordon's or
/// absent. One `lstat`: the entry is never opened or followed.
fn not_ours(
    parent: &Dir,
    name: &str,
    shown: &str,
    owners: Owners,
) -> Result<Option<String>, PathError> {
    let stat = match rustix::fs::statat(parent.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(PathError::from_io(shown, e.into())),
    };
    let kind = FileType::from_raw_mode(stat.st_mode);
    let found = match kind {
        FileType::Directory => {
            let mode = stat.st_mode & 0o7777;
            if stat.st_uid != owners.server && stat.st_uid != owners.workspace {
                format!("a directory of uid {} (mode {mode:o})", stat.st_uid)
            } else if mode & 0o700 != 0o700 {
                format!("a directory its owner cannot use (mode {mode:o})")
            } else if mode & 0o002 != 0 {
                format!("a directory anyone may write (mode {mode:o})")
            } else {
                return Ok(None);
            }
        }
        FileType::Symlink => match rustix::fs::readlinkat(parent.as_fd(), name, Vec::new()) {
            Ok(target) => format!(
                "a symbolic link to {}",
                crate::text::shortened(&printable(&target.to_string_lossy()), 200)
            ),
            Err(_) => "a symbolic link".to_owned(),
        },
        FileType::RegularFile => "a file".to_owned(),
        FileType::Fifo => "a FIFO".to_owned(),
        FileType::Socket => "a socket".to_owned(),
        FileType::CharacterDevice | FileType::BlockDevice => "a device node".to_owned(),
        FileType::Unknown => "something that is not a directory".to_owned(),
    };
    Ok(Some(found))
}

/// A link target as text that cannot paint over a terminal or a log line.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Renames `name` to a fresh `<name>.moved-aside-<time>-<random>` in the same directory,
/// never replacing anything there. Returns the new name.
fn move_aside(parent: &Dir, name: &str, shown: &str) -> Result<String, PathError> {
    let stamp = crate::clock::Utc::of(std::time::SystemTime::now()).compact();
    let mut last = None;
    for _ in 0..MOVE_ATTEMPTS {
        let to = format!("{name}.moved-aside-{stamp}-{}", random_suffix());
        match rustix::fs::renameat_with(
            parent.as_fd(),
            name,
            parent.as_fd(),
            to.as_str(),
            RenameFlags::NOREPLACE,
        ) {
            Ok(()) => return Ok(to),
            // The name was taken (guessed, or planted): another one.
            Err(rustix::io::Errno::EXIST) => last = Some(rustix::io::Errno::EXIST),
            Err(e) => {
                return Err(PathError::invalid(
                    shown,
                    format!(
                        "it is not cordon's directory and could not be moved aside ({}); \
                         move or remove it by hand and start again",
                        io::Error::from(e)
                    ),
                ));
            }
        }
    }
    Err(PathError::from_io(
        shown,
        io::Error::from(last.unwrap_or(rustix::io::Errno::EXIST)),
    ))
}

/// 64 random bits, hex, from the kernel; the clock and a counter where `/dev/urandom` cannot
/// be read (the rename never replaces, so a guessed name only costs another attempt).
fn random_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        bytes = (nanos ^ COUNTER.fetch_add(1, Ordering::Relaxed).rotate_left(48)).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn moved_names(dir: &std::path::Path, name: &str) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&format!("{name}.moved-aside-")))
            .collect()
    }

    #[test]
    fn a_link_file_or_fifo_in_place_of_the_home_is_moved_aside_and_the_home_made() {
        let outside = tempfile::tempdir().unwrap();
        type Maker = fn(&std::path::Path, &std::path::Path);
        let makers: [(&str, Maker); 4] = [
            ("a symbolic link to", |p, outside| {
                std::os::unix::fs::symlink(outside, p).unwrap()
            }),
            ("a file", |p, _| std::fs::write(p, "x").unwrap()),
            ("a FIFO", |p, _| {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    p,
                    FileType::Fifo,
                    rustix::fs::Mode::from_raw_mode(0o600),
                    0,
                )
                .unwrap()
            }),
            ("anyone may write", |p, _| {
                std::fs::create_dir(p).unwrap();
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
            }),
        ];
        for (what, make) in makers {
            let dir = tempfile::tempdir().unwrap();
            make(&dir.path().join(".cordon-home"), outside.path());
            let ws = Workspace::open(dir.path()).unwrap();
            let moved = ws.reclaim_own_dirs(false, Some(".cordon-home")).unwrap();
            assert_eq!(moved.len(), 1, "{what}");
            assert!(moved[0].found.contains(what), "{what}: {moved:?}");
            ws.ensure_home(".cordon-home").unwrap();
            let meta = std::fs::symlink_metadata(dir.path().join(".cordon-home")).unwrap();
            assert!(meta.is_dir(), "{what}");
            assert_eq!(
                moved_names(dir.path(), ".cordon-home"),
                [moved[0].moved_to.clone()]
            );
            // Found right the second time: nothing more is moved.
            assert!(
                ws.reclaim_own_dirs(false, Some(".cordon-home"))
                    .unwrap()
                    .is_empty()
            );
        }
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            0,
            "wrote through"
        );
    }

    #[test]
    fn the_spill_area_and_its_outputs_are_taken_back() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join(".cordon")).unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let moved = ws.reclaim_own_dirs(true, None).unwrap();
        assert_eq!(moved.len(), 1, "{moved:?}");
        ws.spill_dir().unwrap();

        std::fs::remove_dir(dir.path().join(".cordon/outputs")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join(".cordon/outputs")).unwrap();
        let moved = ws.reclaim_own_dirs(true, None).unwrap();
        assert_eq!(moved.len(), 1, "{moved:?}");
        assert_eq!(moved[0].path, ".cordon/outputs");
        assert!(
            moved[0]
                .moved_to
                .starts_with(".cordon/outputs.moved-aside-")
        );
        ws.spill_dir().unwrap();
        assert_eq!(
            std::fs::read_dir(outside.path()).unwrap().count(),
            0,
            "wrote through"
        );
    }

    #[test]
    fn cordons_own_directory_stays_where_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        ws.ensure_home(".cordon-home").unwrap();
        std::fs::write(dir.path().join(".cordon-home/kept"), "x").unwrap();
        ws.spill_dir().unwrap();
        assert!(
            ws.reclaim_own_dirs(true, Some(".cordon-home"))
                .unwrap()
                .is_empty()
        );
        assert!(dir.path().join(".cordon-home/kept").exists());
    }
}
