//! What a gitdir's refs say, read without git and without following a link: `HEAD`, the
//! branches and tags (`refs/heads/*`, `refs/tags/*`, loose files and `packed-refs`), the names
//! of any `refs/replace/*`, and a mark of the index (its size and checksum trailer).
//!
//! Owns only the reading. The shadow gitdir is written by confined processes, so every read
//! is bounded, opened no-follow beneath a directory handle, and strict: an entry that is not
//! exactly what git writes (a symlinked ref, a symbolic ref inside `refs/heads`, a name git
//! would refuse, an oversized file) is listed in [`RepoState::unreadable`], never guessed at.
//! The caller refuses to import from a state with unreadable entries.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use cap_fs_ext::DirExt;
use cap_std::fs::Dir;

/// Largest loose ref or `HEAD` read (git writes 41 or 65 bytes; a symref is a line).
const MAX_REF_FILE: u64 = 4096;
/// Largest `packed-refs` read (a monorepo's with 100,000 tags is ~10 MiB).
const MAX_PACKED_REFS: u64 = 64 << 20;
/// Most refs walked per side; more is listed as unreadable (never silently dropped).
const MAX_REFS: usize = 500_000;
/// Deepest directory nesting below `refs/` walked.
const MAX_DEPTH: usize = 16;
/// Bytes of the index's tail kept as its mark (its SHA-1 or SHA-256 checksum).
const TRAILER: usize = 32;

/// An object name: 40 (SHA-1) or 64 (SHA-256) lowercase hex digits.
pub(crate) type Oid = String;

/// Where `HEAD` points.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Head {
    /// No `HEAD`: not a repository (yet).
    #[default]
    Absent,
    /// `ref: refs/heads/NAME`.
    Branch(String),
    /// A commit, detached.
    Detached(Oid),
}

/// The index's size, its last bytes (the trailing checksum), its inode and its modification
/// and change times: what changes whenever git rewrites it (always as a new file renamed into
/// place), even where the checksum is left as zeros (`index.skipHash`), and whenever anything
/// writes it in place. Decides only whether to look further, never what is imported (the
/// entries come from a tree); on the operator's side, whether cordon's copy of the index it
/// wrote last is still that file (`known_index`).
pub(crate) type IndexMark = Option<(u64, Vec<u8>)>;

/// One side's refs at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RepoState {
    pub head: Head,
    /// Full names (`refs/heads/main`, `refs/tags/v1`) to their object names.
    pub refs: BTreeMap<String, Oid>,
    /// Names below `refs/replace/` (never imported: they change what `git show` displays).
    pub replace: BTreeSet<String>,
    pub index: IndexMark,
    /// Entries that are not what git writes, one phrase each (path and why).
    pub unreadable: Vec<String>,
}

/// Whether `text` is an object name as git writes it.
pub(crate) fn is_oid(text: &str) -> bool {
    (text.len() == 40 || text.len() == 64)
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `name` is a branch or tag name git itself would write (`git check-ref-format`'s
/// rules, narrowed to printable ASCII): the import passes it to `git update-ref` as an
/// argument and never as a path.
pub(crate) fn is_importable_ref(name: &str) -> bool {
    let Some(rest) = name
        .strip_prefix("refs/heads/")
        .or_else(|| name.strip_prefix("refs/tags/"))
    else {
        return false;
    };
    !rest.is_empty()
        && !name.contains("..")
        && !name.contains("@{")
        && !name.ends_with('.')
        && name.bytes().all(|b| {
            b.is_ascii_graphic() && !matches!(b, b'~' | b'^' | b':' | b'?' | b'*' | b'[' | b'\\')
        })
        && rest
            .split('/')
            .all(|c| !c.is_empty() && !c.starts_with('.') && !c.ends_with(".lock"))
}

/// Reads `HEAD`, the refs and the index mark of the gitdir `dir`.
pub(crate) fn read_state(dir: &Dir) -> RepoState {
    let mut state = RepoState::default();
    match read_small(dir, "HEAD", MAX_REF_FILE) {
        Ok(Some(text)) => state.head = parse_head(&text, &mut state.unreadable),
        Ok(None) => {}
        Err(why) => state.unreadable.push(format!("HEAD: {why}")),
    }
    match read_small(dir, "packed-refs", MAX_PACKED_REFS) {
        Ok(Some(text)) => parse_packed(&text, &mut state),
        Ok(None) => {}
        Err(why) => state.unreadable.push(format!("packed-refs: {why}")),
    }
    for top in ["refs/heads", "refs/tags", "refs/replace"] {
        walk(dir, top, 0, &mut state);
    }
    state.index = index_mark(dir);
    state
}

/// The value of one branch or tag `name` in the gitdir `dir`, read as [`read_state`] reads
/// it (its loose file, which wins, else its line in `packed-refs`); None: no such ref.
pub(crate) fn ref_value(dir: &Dir, name: &str) -> Result<Option<Oid>, String> {
    let mut state = RepoState::default();
    match read_small(dir, name, MAX_REF_FILE)? {
        Some(text) => record(
            &mut state,
            name,
            text.strip_suffix('\n').unwrap_or(&text),
            name,
        ),
        None => {
            if let Some(text) = read_small(dir, "packed-refs", MAX_PACKED_REFS)? {
                parse_packed(&text, &mut state);
            }
        }
    }
    match (state.refs.remove(name), state.unreadable.first()) {
        (Some(oid), _) => Ok(Some(oid)),
        (None, Some(why)) if why.contains(name) => Err(why.clone()),
        (None, _) => Ok(None),
    }
}

fn parse_head(text: &str, unreadable: &mut Vec<String>) -> Head {
    let line = text.strip_suffix('\n').unwrap_or(text);
    if let Some(target) = line.strip_prefix("ref: ") {
        if target.starts_with("refs/heads/") && is_importable_ref(target) {
            return Head::Branch(target.to_owned());
        }
        unreadable.push(format!("HEAD: points at `{target}`, not a branch"));
        return Head::Absent;
    }
    if is_oid(line) {
        return Head::Detached(line.to_owned());
    }
    unreadable.push("HEAD: neither a branch nor a commit".into());
    Head::Absent
}

fn parse_packed(text: &str, state: &mut RepoState) {
    for line in text.lines() {
        if line.starts_with('#') || line.starts_with('^') || line.is_empty() {
            continue;
        }
        let Some((oid, name)) = line.split_once(' ') else {
            state
                .unreadable
                .push("packed-refs: a line git does not write".into());
            continue;
        };
        record(state, name, oid, "packed-refs");
    }
}

/// Records one ref read at `from`; loose refs are read after `packed-refs` and win, as in git.
fn record(state: &mut RepoState, name: &str, oid: &str, from: &str) {
    if let Some(rest) = name.strip_prefix("refs/replace/") {
        state.replace.insert(rest.to_owned());
    } else if name.starts_with("refs/heads/") || name.starts_with("refs/tags/") {
        if !is_oid(oid) || !is_importable_ref(name) {
            state
                .unreadable
                .push(format!("{from}: `{name}` is not a ref git writes"));
        } else if state.refs.len() >= MAX_REFS {
            state
                .unreadable
                .push(format!("more than {MAX_REFS} refs: `{name}` not read"));
        } else {
            state.refs.insert(name.to_owned(), oid.to_owned());
        }
    }
}

fn walk(dir: &Dir, path: &str, depth: usize, state: &mut RepoState) {
    let sub = match dir.open_dir_nofollow(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            state.unreadable.push(format!("{path}: {e}"));
            return;
        }
    };
    if depth > MAX_DEPTH {
        state.unreadable.push(format!("{path}: nested too deep"));
        return;
    }
    let Ok(entries) = sub.entries() else {
        state.unreadable.push(format!("{path}: cannot be listed"));
        return;
    };
    for entry in entries {
        let Ok(entry) = entry else {
            state.unreadable.push(format!("{path}: cannot be listed"));
            return;
        };
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            state
                .unreadable
                .push(format!("{path}: a name that is not UTF-8"));
            continue;
        };
        let child = format!("{path}/{name}");
        let Ok(kind) = entry.file_type() else {
            state.unreadable.push(format!("{child}: cannot be read"));
            continue;
        };
        if kind.is_dir() {
            walk(dir, &child, depth + 1, state);
        } else if kind.is_file() {
            if name.ends_with(".lock") {
                continue; // a git at work: its ref file is the one read
            }
            match read_small(dir, &child, MAX_REF_FILE) {
                Ok(Some(text)) => {
                    let oid = text.strip_suffix('\n').unwrap_or(&text);
                    record(state, &child, oid, &child);
                }
                Ok(None) => {}
                Err(why) => state.unreadable.push(format!("{child}: {why}")),
            }
        } else {
            state
                .unreadable
                .push(format!("{child}: a symbolic link or special file"));
        }
    }
}

/// The whole of a small regular file (None: absent), opened without following a link.
fn read_small(dir: &Dir, path: &str, limit: u64) -> Result<Option<String>, String> {
    let file = match super::open::open_regular(dir, path) {
        Ok(f) => f,
        Err(super::open::Opened::Absent) => return Ok(None),
        Err(super::open::Opened::Not(why)) => return Err(why),
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if meta.len() > limit {
        return Err(format!("larger than {limit} bytes"));
    }
    let mut text = String::new();
    file.take(limit)
        .read_to_string(&mut text)
        .map_err(|_| "not UTF-8".to_string())?;
    Ok(Some(text))
}

/// The index's [`IndexMark`], or None when there is no regular index.
pub(crate) fn index_mark(dir: &Dir) -> IndexMark {
    let file = super::open::open_regular(dir, "index").ok()?;
    mark_of(&file)
}

/// The [`IndexMark`] of an open index file (read where it is, the file's offset untouched).
pub(crate) fn mark_of(file: &std::fs::File) -> IndexMark {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let meta = file.metadata().ok()?;
    let size = meta.len();
    let tail = size.min(TRAILER as u64);
    let mut bytes = vec![0; tail as usize];
    file.read_exact_at(&mut bytes, size - tail).ok()?;
    bytes.extend_from_slice(&meta.ino().to_le_bytes());
    bytes.extend_from_slice(&meta.mtime().to_le_bytes());
    bytes.extend_from_slice(&meta.mtime_nsec().to_le_bytes());
    // The change time too: no call can set it, and every write or rename of the inode moves
    // it (a copy of the index kept in memory is trusted while the mark holds).
    bytes.extend_from_slice(&meta.ctime().to_le_bytes());
    bytes.extend_from_slice(&meta.ctime_nsec().to_le_bytes());
    Some((size, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO where git keeps a file (the shadow is the calls' to write) is reported, never
    /// opened for reading: that open would wait for a writer, and the import with it.
    #[test]
    fn fifos_in_place_of_heads_packed_refs_or_the_index_never_block_the_reader() {
        let tmp = tempfile::tempdir().unwrap();
        let g = tmp.path().to_path_buf();
        for name in ["HEAD", "packed-refs", "index"] {
            rustix::fs::mkfifoat(
                rustix::fs::CWD,
                g.join(name),
                rustix::fs::Mode::from_raw_mode(0o600),
            )
            .unwrap();
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let dir = Dir::open_ambient_dir(&g, cap_std::ambient_authority()).unwrap();
            let _ = tx.send(read_state(&dir));
        });
        let state = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("read_state returned (a FIFO was not opened for reading)");
        assert_eq!(state.index, None);
        assert_eq!(state.unreadable.len(), 2, "{:?}", state.unreadable);
    }

    #[test]
    fn ref_names_git_would_refuse_are_not_importable() {
        for ok in ["refs/heads/main", "refs/heads/agent/x-1", "refs/tags/v1.0"] {
            assert!(is_importable_ref(ok), "{ok}");
        }
        for bad in [
            "refs/replace/abc",
            "refs/heads/",
            "refs/heads/a..b",
            "refs/heads/.hidden",
            "refs/heads/x.lock",
            "refs/heads/a b",
            "refs/heads/a~1",
            "refs/notes/commits",
            "HEAD",
            "refs/heads/a@{1}",
        ] {
            assert!(!is_importable_ref(bad), "{bad}");
        }
    }

    #[test]
    fn a_symlinked_ref_is_unreadable_and_replace_refs_are_listed() {
        let tmp = tempfile::tempdir().unwrap();
        let g = tmp.path();
        std::fs::create_dir_all(g.join("refs/heads")).unwrap();
        std::fs::create_dir_all(g.join("refs/replace")).unwrap();
        let oid = "a".repeat(40);
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(g.join("refs/heads/main"), format!("{oid}\n")).unwrap();
        std::fs::write(g.join("refs/replace").join(&oid), format!("{oid}\n")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", g.join("refs/heads/evil")).unwrap();
        std::fs::write(
            g.join("packed-refs"),
            format!("# pack-refs with: peeled\n{oid} refs/tags/v1\n^{oid}\n"),
        )
        .unwrap();
        let dir = Dir::open_ambient_dir(g, cap_std::ambient_authority()).unwrap();
        let state = read_state(&dir);
        assert_eq!(state.head, Head::Branch("refs/heads/main".into()));
        assert_eq!(state.refs.get("refs/heads/main"), Some(&oid));
        assert_eq!(state.refs.get("refs/tags/v1"), Some(&oid));
        assert!(state.replace.contains(&oid));
        assert_eq!(state.unreadable.len(), 1, "{:?}", state.unreadable);
        assert!(state.unreadable[0].contains("evil"));
    }
}
