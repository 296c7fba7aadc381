//! A thin, safe face on fanotify for the checkpoint recorder (`crate::checkpoint`) and the
//! search for git repositories (`crate::git::nested`): one
//! notification group marking the whole file system that holds the workspace, reporting each
//! event as the handle of the directory it happened in, and opening such a handle again.
//!
//! Owns the three system calls that have no safe wrapper (`fanotify_init`, `fanotify_mark`,
//! `open_by_handle_at`, each with its SAFETY note) and the parsing of the event buffer, which
//! is plain byte slicing. Does not own what an event means for a checkpoint: the caller
//! decides whether the directory lies in the workspace.
//!
//! Needs CAP_SYS_ADMIN (a file-system mark) and CAP_DAC_READ_SEARCH (opening by handle);
//! without them [`DirWatch::new`] fails and the recorder walks the whole tree instead.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `struct fanotify_event_metadata`: event_len u32, vers u8, reserved u8, metadata_len u16,
/// mask u64, fd i32, pid i32.
const METADATA_LEN: usize = 24;

/// What one drain of the queue found.
#[derive(Debug, Default)]
pub(crate) struct Drained {
    /// The kernel dropped events (its queue was full): anything may have changed.
    pub overflow: bool,
    /// An event came without a directory handle this parser understands.
    pub unreadable: bool,
    /// Where the events happened: (`handle_type`, the directory's handle bytes, the name of
    /// the entry in it, empty when the event did not name one), deduplicated.
    pub dirs: Vec<(i32, Vec<u8>, Vec<u8>)>,
}

impl Drained {
    /// The entries named, by directory (`handle_type`, handle): events come per entry, and a
    /// directory is resolved once however many of its entries changed (a build writes
    /// thousands into one directory).
    pub(crate) fn by_dir(&self) -> std::collections::BTreeMap<(i32, &[u8]), Vec<&[u8]>> {
        let mut by_dir: std::collections::BTreeMap<(i32, &[u8]), Vec<&[u8]>> = Default::default();
        for (kind, handle, name) in &self.dirs {
            by_dir
                .entry((*kind, handle.as_slice()))
                .or_default()
                .push(name.as_slice());
        }
        by_dir
    }
}

/// A fanotify group watching one file system for changes to directory entries and files.
pub(crate) struct DirWatch {
    group: OwnedFd,
    /// A descriptor on the watched file system, for `open_by_handle_at`.
    mount: OwnedFd,
}

impl DirWatch {
    /// Watches the file system that holds `root`: creations, deletions, renames, writes and
    /// attribute changes of files and directories anywhere on it.
    pub(crate) fn new(root: BorrowedFd<'_>) -> io::Result<Self> {
        Self::with_mask(
            root,
            libc::FAN_MODIFY
                | libc::FAN_ATTRIB
                | libc::FAN_CLOSE_WRITE
                | libc::FAN_CREATE
                | libc::FAN_DELETE
                | libc::FAN_MOVED_FROM
                | libc::FAN_MOVED_TO
                | libc::FAN_DELETE_SELF
                | libc::FAN_MOVE_SELF
                | libc::FAN_ONDIR,
        )
    }

    /// Watches the file system that holds `root` for the events in `mask` (`FAN_*`).
    pub(crate) fn with_mask(root: BorrowedFd<'_>, mask: u64) -> io::Result<Self> {
        let flags = libc::FAN_CLASS_NOTIF
            | libc::FAN_CLOEXEC
            | libc::FAN_NONBLOCK
            | libc::FAN_REPORT_DFID_NAME;
        // SAFETY: fanotify_init takes two integer flag words and returns a new descriptor or
        // -1; no memory is shared with the kernel.
        let raw = unsafe { libc::fanotify_init(flags, libc::O_RDONLY as libc::c_uint) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor fanotify_init just returned to us and nothing else
        // owns.
        let group = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: both descriptors are open for the call's duration; the path argument is a
        // static NUL-terminated "." resolved relative to `root`.
        let marked = unsafe {
            libc::fanotify_mark(
                group.as_raw_fd(),
                libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
                mask,
                root.as_raw_fd(),
                c".".as_ptr(),
            )
        };
        if marked < 0 {
            return Err(io::Error::last_os_error());
        }
        // A readable descriptor, not the workspace handle itself: that may be `O_PATH`, which
        // open_by_handle_at refuses (EBADF).
        let mount = rustix::fs::openat(
            root,
            c".",
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        Ok(Self { group, mount })
    }

    /// Reads every event queued so far (never blocks).
    pub(crate) fn drain(&self) -> io::Result<Drained> {
        let mut out = Drained::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match rustix::io::read(&self.group, &mut buf) {
                Ok(0) | Err(rustix::io::Errno::AGAIN) => break,
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            parse(&buf[..n], &mut out);
        }
        out.dirs.sort();
        out.dirs.dedup();
        Ok(out)
    }

    /// Opens the directory a handle names (`O_PATH`: nothing is read through it), or the
    /// error when it is gone (`ESTALE`).
    pub(crate) fn open(&self, handle_type: i32, handle: &[u8]) -> io::Result<OwnedFd> {
        // `struct file_handle`: handle_bytes u32, handle_type i32, then the bytes, built in
        // an 8-aligned buffer.
        let mut raw = vec![0u64; (8 + handle.len()).div_ceil(8)];
        let bytes: &mut [u8] = bytemuck_bytes(&mut raw);
        bytes[..4].copy_from_slice(&(handle.len() as u32).to_ne_bytes());
        bytes[4..8].copy_from_slice(&handle_type.to_ne_bytes());
        bytes[8..8 + handle.len()].copy_from_slice(handle);
        // SAFETY: `raw` is a live, 8-aligned buffer holding a complete `struct file_handle`
        // whose handle_bytes matches the bytes that follow it; the kernel only reads it. The
        // mount descriptor is open for the call's duration.
        let fd = unsafe {
            libc::open_by_handle_at(
                self.mount.as_raw_fd(),
                raw.as_mut_ptr().cast::<libc::file_handle>(),
                libc::O_PATH | libc::O_CLOEXEC | libc::O_DIRECTORY,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a descriptor open_by_handle_at just returned to us.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// The bytes of a `u64` buffer, to build a `struct file_handle` in aligned memory.
fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
    let len = words.len() * 8;
    // SAFETY: u8 has no alignment or validity requirements, the slice covers exactly the
    // words' memory, and the returned borrow is tied to the mutable borrow of `words`.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Parses a buffer of events into `out`. Anything malformed marks the drain unreadable (the
/// caller then treats it as "anything may have changed").
pub(crate) fn parse(buf: &[u8], out: &mut Drained) {
    let mut at = 0;
    while at + METADATA_LEN <= buf.len() {
        let (Some(event_len), Some(meta_len), Some(mask)) =
            (u32_at(buf, at), u16_at(buf, at + 6), u64_at(buf, at + 8))
        else {
            out.unreadable = true;
            return;
        };
        let (event_len, meta_len) = (event_len as usize, meta_len as usize);
        if event_len < METADATA_LEN || meta_len < METADATA_LEN || at + event_len > buf.len() {
            out.unreadable = true;
            return;
        }
        if mask & libc::FAN_Q_OVERFLOW != 0 {
            out.overflow = true;
        }
        let event = &buf[at..at + event_len];
        let mut info = meta_len;
        let mut found = false;
        while info + 4 <= event.len() {
            let kind = event[info];
            let Some(len) = u16_at(event, info + 2).map(usize::from) else {
                break;
            };
            if len < 4 || info + len > event.len() {
                out.unreadable = true;
                break;
            }
            let record = &event[info..info + len];
            let fid = matches!(
                kind,
                libc::FAN_EVENT_INFO_TYPE_DFID_NAME | libc::FAN_EVENT_INFO_TYPE_DFID
            );
            // header (4) + fsid (8) + handle_bytes (4) + handle_type (4) + handle.
            if fid
                && let (Some(bytes), Some(kind)) = (u32_at(record, 12), u32_at(record, 16))
                && let Some(handle) = record.get(20..20 + bytes as usize)
            {
                // DFID_NAME: a NUL-terminated name follows the handle.
                let rest = &record[20 + bytes as usize..];
                let name = rest.split(|b| *b == 0).next().unwrap_or_default();
                out.dirs.push((kind as i32, handle.to_vec(), name.to_vec()));
                found = true;
            }
            info += len;
        }
        if !found && mask & libc::FAN_Q_OVERFLOW == 0 {
            out.unreadable = true;
        }
        at += event_len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(mask: u64, infos: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = infos.concat();
        let len = (METADATA_LEN + body.len()) as u32;
        let mut e = Vec::new();
        e.extend_from_slice(&len.to_ne_bytes());
        e.extend_from_slice(&[3, 0]);
        e.extend_from_slice(&(METADATA_LEN as u16).to_ne_bytes());
        e.extend_from_slice(&mask.to_ne_bytes());
        e.extend_from_slice(&(-1i32).to_ne_bytes());
        e.extend_from_slice(&1i32.to_ne_bytes());
        e.extend_from_slice(&body);
        e
    }

    fn dfid_name(handle: &[u8], name: &str) -> Vec<u8> {
        let mut r = vec![libc::FAN_EVENT_INFO_TYPE_DFID_NAME, 0, 0, 0];
        r.extend_from_slice(&[7u8; 8]);
        r.extend_from_slice(&(handle.len() as u32).to_ne_bytes());
        r.extend_from_slice(&1i32.to_ne_bytes());
        r.extend_from_slice(handle);
        r.extend_from_slice(name.as_bytes());
        r.push(0);
        while r.len() % 4 != 0 {
            r.push(0);
        }
        let len = r.len() as u16;
        r[2..4].copy_from_slice(&len.to_ne_bytes());
        r
    }

    #[test]
    fn events_yield_their_directory_handles_and_overflow_is_seen() {
        let mut buf = event(
            libc::FAN_CREATE,
            &[dfid_name(&[1, 2, 3, 4, 5, 6, 7, 8], "a")],
        );
        buf.extend(event(libc::FAN_MODIFY, &[dfid_name(&[9; 8], "b")]));
        buf.extend(event(
            libc::FAN_MODIFY,
            &[dfid_name(&[1, 2, 3, 4, 5, 6, 7, 8], "c")],
        ));
        let mut out = Drained::default();
        parse(&buf, &mut out);
        out.dirs.sort();
        out.dirs.dedup();
        assert!(!out.overflow && !out.unreadable);
        assert_eq!(out.dirs.len(), 3);
        assert_eq!(out.dirs[0].2, b"a");
        let mut over = Drained::default();
        parse(&event(libc::FAN_Q_OVERFLOW, &[]), &mut over);
        assert!(over.overflow);
    }

    #[test]
    fn a_truncated_or_bare_event_is_unreadable() {
        let full = event(libc::FAN_CREATE, &[dfid_name(&[1; 8], "a")]);
        let mut out = Drained::default();
        parse(&full[..full.len() - 3], &mut out);
        assert!(out.unreadable);
        let mut bare = Drained::default();
        parse(&event(libc::FAN_CREATE, &[]), &mut bare);
        assert!(bare.unreadable);
    }
}
