//! cordon's own write of the operator's index (`.git/index`) after an import: the lock, the
//! edit, the exchange into place, and the copy of what it wrote kept for the next import.
//!
//! The write is git's protocol: `index.lock` created exclusively (a git at work on the host
//! holds it, and then nothing is written), the index checked under it to be the one the
//! import planned with, the new content written into the lock file, which then takes the
//! index's place in one rename. Only the changed entries are written anew
//! (`index_file::edit_pieces_at`); the checksum is hashed on a second thread meanwhile, or
//! left as zeros where the repository asks git to (`index.skipHash`, `feature.manyFiles`).
//!
//! **The copy kept** ([`KnownIndex`]): at 100,000 files the index is 7.9 MB, which an edit
//! would read whole and walk entry by entry to find where the changed paths go. What cordon
//! wrote last is kept in memory, with where each entry starts: while the file on disk still
//! has the mark cordon's own write left (inode, size, modification and change time, trailer;
//! `refs::mark_of`, taken from the written file itself, not from the name), the next edit
//! reads nothing and finds its places by binary search. git never writes the index in place
//! (always a new file renamed over it), and any write in place moves the change time, which
//! nothing but the kernel sets: a copy that is no longer the file is never edited from. The
//! operator's index is not writable by any call (`.git` is read-only in the view), so only
//! the operator's own tools can change it at all.

use std::os::fd::AsFd;

use cap_std::fs::Dir;

use super::index_file::{self, Change, EntryTable, Piece};
use super::refs::{IndexMark, index_mark, mark_of};

/// Why cordon's own edit of the operator's index did not happen (nothing was written).
#[derive(Debug)]
pub(super) enum EditError {
    /// `git update-index` is to do it (why).
    ToGit(String),
    /// The index cannot be written now: a git on the host holds its lock (the error).
    Locked(std::io::Error),
}

/// The operator's index as cordon last wrote it, and buffers kept across imports (one
/// repository's; behind the repository's lock).
#[derive(Default)]
pub(super) struct KnownIndex {
    /// What cordon wrote last, while it may still be the file.
    last: Option<Written>,
    /// The same, while the thread that copies it after an edit is at work: the copy and the
    /// buffer the edit started from, or nothing if the copy could not be made.
    copying: Option<std::sync::mpsc::Receiver<(Option<Written>, Vec<u8>)>>,
    /// A buffer for the next index (its allocation kept: 7.9 MB at 100,000 files).
    spare: Vec<u8>,
}

/// An index file cordon wrote: its mark once in place, its bytes, and where its entries start
/// (None for a version 4 index).
struct Written {
    mark: (u64, Vec<u8>),
    bytes: Vec<u8>,
    table: Option<EntryTable>,
    /// A file with no name in the gitdir holding the same bytes, for the next edit to take
    /// as its `index.lock` and change in place ([`take_lock`]).
    ready: Option<std::fs::File>,
}

/// The index an edit starts from: the copy kept (with its table) or the file as read.
struct Base {
    bytes: Vec<u8>,
    table: Option<EntryTable>,
    /// It is the copy kept (nothing was read).
    kept: bool,
}

impl KnownIndex {
    /// The operator's index with the mark `mark` (checked under the lock): the copy kept
    /// when it is still that file, else the file read into a kept buffer.
    fn base(&mut self, operator: &Dir, mark: &IndexMark) -> std::io::Result<Base> {
        self.settle();
        match self.last.take() {
            Some(last) if Some(&last.mark) == mark.as_ref() => {
                return Ok(Base {
                    bytes: last.bytes,
                    table: last.table,
                    kept: true,
                });
            }
            Some(stale) => self.spare_for_later(stale.bytes),
            None => {}
        }
        let mut bytes = std::mem::take(&mut self.spare);
        bytes.clear();
        let mut file = operator.open("index")?;
        std::io::Read::read_to_end(&mut file, &mut bytes)?;
        Ok(Base {
            bytes,
            table: None,
            kept: false,
        })
    }

    /// Takes what the last edit's copying thread made (waiting for it: it started before that
    /// import answered, so it has mostly ended by the next one).
    pub(super) fn settle(&mut self) {
        if let Some((written, buffer)) = self.copying.take().and_then(|rx| rx.recv().ok()) {
            self.last = written;
            self.spare_for_later(buffer);
        }
    }

    /// Keeps `buffer`'s allocation for a later index (the larger of two).
    fn spare_for_later(&mut self, buffer: Vec<u8>) {
        if buffer.capacity() > self.spare.capacity() {
            self.spare = buffer;
        }
    }
}

/// An edit of the operator's index: `changes`, object ids of `oid_len` bytes, to the index
/// that had `mark` when the import planned (an index that no longer has it is left to git),
/// hashed or not (`skip_hash`: the repository asks git not to).
pub(super) struct IndexEdit<'a> {
    pub changes: &'a [Change],
    pub oid_len: usize,
    pub mark: &'a IndexMark,
    pub skip_hash: bool,
}

/// Makes `request` to the operator's index (`operator` is its gitdir) as git would: see the
/// module. Returns the written index's mark.
pub(super) fn edit(
    operator: &Dir,
    request: &IndexEdit<'_>,
    known: &mut KnownIndex,
) -> Result<IndexMark, EditError> {
    known.settle();
    let ready = known.last.as_mut().and_then(|w| w.ready.take());
    let (lock, prefilled) = take_lock(operator, ready)?;
    let result = edit_locked(operator, (lock, prefilled), request, known);
    if result.is_err() {
        let _ = operator.remove_file("index.lock");
    }
    result
}

/// Takes git's lock on the index: creates `index.lock`, exclusively, as git does. With a
/// `ready` file (the index cordon wrote last, in a file with no name), that file is linked
/// there (a link fails on an existing name as an exclusive create does) and returned with
/// `true`: the edit then writes only what changed. A link that fails otherwise than on a held
/// lock (no `/proc`, say) falls back to a new file.
fn take_lock(
    operator: &Dir,
    ready: Option<std::fs::File>,
) -> Result<(std::fs::File, bool), EditError> {
    use std::os::fd::AsRawFd;
    if let Some(file) = ready {
        let linked = rustix::fs::linkat(
            rustix::fs::CWD,
            format!("/proc/self/fd/{}", file.as_raw_fd()).as_str(),
            operator.as_fd(),
            "index.lock",
            rustix::fs::AtFlags::SYMLINK_FOLLOW,
        );
        match linked {
            Ok(()) => return Ok((file, true)),
            Err(rustix::io::Errno::EXIST) => {
                return Err(EditError::Locked(std::io::Error::from_raw_os_error(
                    libc::EEXIST,
                )));
            }
            Err(e) => tracing::debug!(%e, "the ready index could not be linked"),
        }
    }
    let lock = operator
        .open_with(
            "index.lock",
            // Read too: the mark of what was written is read from it once in place.
            cap_std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true),
        )
        .map_err(EditError::Locked)?;
    Ok((lock.into_std(), false))
}

/// A file with no name (`O_TMPFILE`) in the gitdir holding `bytes`, made after an edit has
/// answered for the next edit's lock; None where the file system has no such files.
fn make_ready(operator: &Dir, bytes: &[u8]) -> Option<std::fs::File> {
    use std::os::unix::fs::FileExt;
    let fd = rustix::fs::openat(
        operator.as_fd(),
        ".",
        rustix::fs::OFlags::TMPFILE | rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        // As git creates the index: 0666 less the umask.
        rustix::fs::Mode::from_raw_mode(0o666),
    )
    .ok()?;
    let file = std::fs::File::from(fd);
    file.write_all_at(bytes, 0).ok()?;
    Some(file)
}

/// [`edit`] once `index.lock` is held (`lock`, and whether it holds the index cordon wrote
/// last): git takes it before it rewrites the index, so held, the index stays as read.
fn edit_locked(
    operator: &Dir,
    (lock, prefilled): (std::fs::File, bool),
    request: &IndexEdit<'_>,
    known: &mut KnownIndex,
) -> Result<IndexMark, EditError> {
    let &IndexEdit {
        changes,
        oid_len,
        mark,
        skip_hash,
    } = request;
    remove_replaced_indexes(operator);
    if index_mark(operator) != *mark {
        return Err(EditError::ToGit(
            "the index changed since the import began".into(),
        ));
    }
    let started = std::time::Instant::now();
    let base = known
        .base(operator, mark)
        .map_err(|e| EditError::ToGit(format!("reading the index: {e}")))?;
    let read = started.elapsed();
    let pieces =
        match index_file::edit_pieces_at(&base.bytes, oid_len, changes, base.table.as_ref()) {
            Ok(pieces) => pieces,
            Err(e) => {
                known.spare_for_later(base.bytes);
                return Err(EditError::ToGit(e.to_string()));
            }
        };
    let edited = started.elapsed();
    // The lock already holds the bytes edited from: only what differs is written.
    let in_place = prefilled && base.kept;
    let trailer = write_pieces(&lock, &pieces, &base.bytes, in_place, oid_len, skip_hash)
        .map_err(|e| EditError::ToGit(format!("writing index.lock: {e}")));
    let written = started.elapsed();
    let placed = trailer.and_then(|trailer| Ok((trailer, put_in_place(operator, lock)?)));
    let (trailer, (new_mark, after)) = match placed {
        Ok(placed) => placed,
        Err(e) => {
            known.spare_for_later(base.bytes);
            return Err(e);
        }
    };
    tracing::debug!(
        read = ?read,
        from_copy = base.kept,
        in_place,
        edited = ?edited - read,
        written = ?written - edited,
        renamed = ?started.elapsed() - written,
        "the operator's index edited"
    );
    // What was written, copied for the next edit after this import has answered: the copy
    // and its table (about 1.6 ms at 100,000 files) are no call's wait.
    let (tx, rx) = std::sync::mpsc::channel();
    known.copying = Some(rx);
    let into = std::mem::take(&mut known.spare);
    let mark = new_mark.clone();
    let gitdir = operator.try_clone().ok();
    let work = move || {
        let mut written = copy_written(&base.bytes, &pieces, &trailer, into, oid_len, mark);
        if let (Some(w), Some(gitdir)) = (written.as_mut(), gitdir) {
            w.ready = make_ready(&gitdir, &w.bytes);
        }
        let _ = tx.send((written, base.bytes));
        after.run();
    };
    // The index is in place whatever happens here: a thread that cannot be made costs only
    // the copy (the next edit reads the file) and the early `fdatasync` (the replaced index
    // is removed by the next edit), never the import's success.
    if let Err(e) = std::thread::Builder::new()
        .name("cordon-index-copy".into())
        .spawn(work)
    {
        tracing::debug!(%e, "no thread for the copy of the operator's index");
    }
    Ok(new_mark)
}

/// The index written from `pieces` of `from` and `trailer`, copied into `into`, with its
/// table, as kept for the next edit: only while its size is the file's (`mark`).
fn copy_written(
    from: &[u8],
    pieces: &[index_file::Piece],
    trailer: &[u8],
    mut into: Vec<u8>,
    oid_len: usize,
    mark: IndexMark,
) -> Option<Written> {
    into.clear();
    for piece in pieces {
        into.extend_from_slice(piece.bytes(from));
    }
    into.extend_from_slice(trailer);
    let mark = mark.filter(|(size, _)| *size == into.len() as u64)?;
    let table = index_file::entry_table(&into, oid_len).ok();
    Some(Written {
        mark,
        bytes: into,
        table,
        ready: None,
    })
}

/// Writes the index made of `pieces` (of `from`) and its trailer into `lock`, the trailer
/// hashed on a second thread meanwhile (or zeros where the repository asks git not to hash).
/// `in_place`: the lock already holds `from`, so a run of it that stays where it was is not
/// written again. Returns the trailer.
fn write_pieces(
    lock: &std::fs::File,
    pieces: &[Piece],
    from: &[u8],
    in_place: bool,
    oid_len: usize,
    skip_hash: bool,
) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let parts: Vec<&[u8]> = pieces.iter().map(|p| p.bytes(from)).collect();
    let write = || {
        let mut at = 0;
        for (piece, part) in pieces.iter().zip(&parts) {
            let stays = matches!(piece, Piece::Old(range) if in_place && range.start == at);
            if !stays {
                lock.write_all_at(part, at as u64)?;
            }
            at += part.len();
        }
        Ok::<usize, std::io::Error>(at)
    };
    let (trailer, wrote) = std::thread::scope(|s| {
        let hashing = (!skip_hash).then(|| s.spawn(|| index_file::trailer_of(&parts, oid_len)));
        let wrote = write();
        let trailer = match hashing {
            Some(h) => h.join().unwrap_or_else(|_| vec![0; oid_len]),
            None => vec![0; oid_len],
        };
        (trailer, wrote)
    });
    let body = wrote?;
    lock.write_all_at(&trailer, body as u64)?;
    // A lock that held a longer index keeps nothing of it past the trailer.
    lock.set_len((body + trailer.len()) as u64)?;
    Ok(trailer)
}

/// What is left to do once the new index is in place: writing it to disk and removing the
/// one it replaced, on a thread of its own.
struct AfterPlacing {
    /// The new index, and the gitdir with the name of the replaced one.
    durable: Option<(std::fs::File, Dir, String)>,
}

impl AfterPlacing {
    fn run(self) {
        if let Some((new, dir, old)) = self.durable {
            let _ = rustix::fs::fdatasync(&new);
            let _ = dir.remove_file(&old);
        }
    }
}

/// Puts the written `index.lock` (`lock`, its open file) in the index's place, atomically
/// for every reader, as git's rename does, and returns its mark there and what is left to do.
/// On ext4 a rename over an existing file first allocates and starts writing the new file's
/// blocks (`auto_da_alloc`, ~5 ms for a 7.9 MB index) and then frees the old file's: so the
/// two are exchanged instead (`RENAME_EXCHANGE`, which does neither), the old index is moved
/// to a name of its own at once (`index.lock` must not outlive this edit, or the operator's
/// next git would take it for a git at work), and a thread writes the new index to disk
/// (`fdatasync`: the rename would only have started that, so a crash leaves it no less
/// durable than git's own write) and then removes the old one ([`AfterPlacing`]).
fn put_in_place(
    operator: &Dir,
    new: std::fs::File,
) -> Result<(IndexMark, AfterPlacing), EditError> {
    let fail = |what: &str, e: rustix::io::Errno| EditError::ToGit(format!("{what}: {e}"));
    let dir = operator.as_fd();
    let nothing = AfterPlacing { durable: None };
    match rustix::fs::renameat_with(
        dir,
        "index.lock",
        dir,
        "index",
        rustix::fs::RenameFlags::EXCHANGE,
    ) {
        Ok(()) => {}
        Err(rustix::io::Errno::NOENT) => {
            rustix::fs::renameat(dir, "index.lock", dir, "index")
                .map_err(|e| fail("renaming index.lock into place", e))?;
            return Ok((mark_of(&new), nothing));
        }
        Err(e) => return Err(fail("exchanging index.lock with the index", e)),
    }
    // The mark of the file written, taken from it (its rename moved its change time): the
    // name may already be another git's file.
    let mark = mark_of(&new);
    let old = format!("{REPLACED_INDEX}{:016x}", rand_u64());
    if let Err(e) = rustix::fs::renameat(dir, "index.lock", dir, old.as_str()) {
        // The new index is in place; the lock holds the old one and must go now.
        let _ = rustix::fs::unlinkat(dir, "index.lock", rustix::fs::AtFlags::empty());
        tracing::debug!(%e, "the replaced index was removed at once");
        return Ok((mark, nothing));
    }
    let Ok(dir) = operator.try_clone() else {
        let _ = operator.remove_file(&old);
        return Ok((mark, nothing));
    };
    Ok((
        mark,
        AfterPlacing {
            durable: Some((new, dir, old)),
        },
    ))
}

/// What [`put_in_place`] names the index it replaced until its thread removes it.
const REPLACED_INDEX: &str = "cordon-replaced-index-";

/// Removes replaced indexes a server that died before its thread ran left in the gitdir.
fn remove_replaced_indexes(operator: &Dir) {
    let Ok(entries) = operator.entries() else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy().starts_with(REPLACED_INDEX) {
            let _ = operator.remove_file(&name);
        }
    }
}

/// A random number for a file name (std's per-process random hash keys, and the time).
fn rand_u64() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        out.stdout
    }

    /// A repository of 300 files in 3 directories, committed; its gitdir's handle.
    fn repo() -> (tempfile::TempDir, Dir) {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path();
        git(work, &["init", "-q"]);
        for i in 0..300 {
            let dir = work.join(format!("d{}", i / 100));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("f{i}")), format!("{i}\n")).unwrap();
        }
        git(work, &["add", "-A"]);
        git(work, &["commit", "-qm", "base"]);
        let gitdir =
            Dir::open_ambient_dir(work.join(".git"), cap_std::ambient_authority()).unwrap();
        (tmp, gitdir)
    }

    fn blob(work: &Path, text: &str) -> Vec<u8> {
        use std::io::Write as _;
        let mut child = Command::new("git")
            .args(["hash-object", "-w", "--stdin"])
            .current_dir(work)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let hex = String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap();
        (0..40)
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    fn put(path: &str, oid: &[u8]) -> Change {
        Change {
            path: path.as_bytes().to_vec(),
            entry: Some((0o100644, oid.to_vec())),
        }
    }

    /// Edits the repository's index; returns what it wrote (read back from the file).
    fn edit_now(gitdir: &Dir, changes: &[Change], known: &mut KnownIndex) -> Vec<u8> {
        let mark = index_mark(gitdir);
        let request = IndexEdit {
            changes,
            oid_len: 20,
            mark: &mark,
            skip_hash: false,
        };
        let written = edit(gitdir, &request, known).unwrap();
        assert_eq!(
            written,
            index_mark(gitdir),
            "the mark returned is the file's"
        );
        std::fs::read(gitdir_path(gitdir).join("index")).unwrap()
    }

    fn gitdir_path(gitdir: &Dir) -> std::path::PathBuf {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", gitdir.as_raw_fd())).unwrap()
    }

    /// The second edit starts from the copy the first kept (nothing read), in the ready file
    /// (only what changed written), and writes byte for byte what an edit of the file as read
    /// writes: changes at the first, a middle and the last entry, added and removed paths.
    #[test]
    fn an_edit_from_the_kept_copy_writes_what_an_edit_of_the_file_writes() {
        let (tmp, gitdir) = repo();
        let work = tmp.path();
        let mut known = KnownIndex::default();
        let one = blob(work, "one");
        edit_now(&gitdir, &[put("d0/f0", &one)], &mut known);
        let change_sets = [
            vec![put("d0/f0", &blob(work, "two"))],
            vec![put("d1/f150", &one), put("d2/f299", &one)],
            vec![
                put("d1/new", &one),
                Change {
                    path: b"d2/f200".to_vec(),
                    entry: None,
                },
            ],
            vec![put("0first", &one), put("zz/last", &one)],
            // Shorter than what the ready file holds: nothing of that is left past the end.
            vec![
                Change {
                    path: b"d0/f1".to_vec(),
                    entry: None,
                },
                Change {
                    path: b"zz/last".to_vec(),
                    entry: None,
                },
            ],
        ];
        for changes in change_sets {
            let before = std::fs::read(gitdir_path(&gitdir).join("index")).unwrap();
            known.settle();
            let last = known.last.as_ref().expect("a copy kept");
            assert_eq!(Some(&last.mark), index_mark(&gitdir).as_ref());
            assert!(last.bytes == before, "the copy kept is not the file");
            assert!(last.table.is_some(), "no entry table kept");
            let ready = last.ready.as_ref().expect("no ready file made");
            let mut held = Vec::new();
            std::io::Read::read_to_end(&mut &*ready, &mut held).unwrap();
            assert!(held == before, "the ready file is not the index");
            let ours = edit_now(&gitdir, &changes, &mut known);
            let mut expected = index_file::edit(&before, 20, &changes).unwrap();
            expected.extend(index_file::trailer(&expected, 20));
            assert!(ours == expected, "the edit from the copy differs");
        }
        let listing = String::from_utf8(git(work, &["ls-files", "-s"])).unwrap();
        assert!(listing.contains("\td1/new\n") && !listing.contains("\td2/f200\n"));
        git(work, &["fsck", "--no-dangling"]);
    }

    /// Once the index is not the file cordon wrote (rewritten by git, or written in place
    /// with the same size and bytes), the copy kept is not edited from.
    #[test]
    fn a_kept_copy_is_dropped_once_the_index_is_another_file_or_written_in_place() {
        let (tmp, gitdir) = repo();
        let work = tmp.path();
        let mut known = KnownIndex::default();
        let one = blob(work, "one");
        let wrote = edit_now(&gitdir, &[put("d0/f0", &one)], &mut known);
        // The same bytes written over the same inode, its modification time put back: only
        // the change time tells.
        let path = gitdir_path(&gitdir).join("index");
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        std::fs::write(&path, &wrote).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_modified(modified).unwrap();
        drop(file);
        let base = known.base(&gitdir, &index_mark(&gitdir)).unwrap();
        assert!(!base.kept, "a copy was used for an index written in place");
        known.spare_for_later(base.bytes);
        edit_now(&gitdir, &[put("d0/f1", &one)], &mut known);
        // git's own write: a new file renamed over it.
        git(
            work,
            &["update-index", "-q", "--force-write-index", "--refresh"],
        );
        let base = known.base(&gitdir, &index_mark(&gitdir)).unwrap();
        assert!(!base.kept, "a copy was used for an index git rewrote");
    }

    #[test]
    fn replaced_indexes_a_dead_server_left_are_removed_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        for name in ["index", "cordon-replaced-index-0123456789abcdef", "config"] {
            std::fs::write(tmp.path().join(name), "x").unwrap();
        }
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        remove_replaced_indexes(&dir);
        let mut left: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["config", "index"]);
    }
}
