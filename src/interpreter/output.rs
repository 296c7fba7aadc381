//! What a cell printed: two memory files (memfds) the server creates for each worker before
//! it starts and keeps open. The worker receives them as descriptors (the driver moves them to
//! its fds 1 and 2, so prints, C extensions and subprocesses all land there); the server
//! empties them before a cell and reads them after it.
//!
//! A confined process can write into these files, but it cannot make the server's descriptors
//! refer to anything else, and the server never opens a path for them: a link, FIFO or device a
//! cell puts anywhere is never read, and no read can block. What is read is bounded by the
//! bytes the file really holds (a sparse tail made with `ftruncate` costs the cell nothing and
//! is not read) and by [`READ_LIMIT`]. Pages of a memfd are charged to the cgroup of the
//! process that writes them, so a cell's output counts against its session's memory limit.

use crate::exec::{CaptureSpec, Captured, capture};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;

/// The most read of one stream of one cell, like a spill file of a command.
pub(super) const READ_LIMIT: u64 = capture::SPILL_LIMIT;

/// The two output files of one worker.
pub(super) struct CellFiles {
    stdout: File,
    stderr: File,
}

impl CellFiles {
    pub(super) fn new() -> io::Result<Self> {
        Ok(Self {
            stdout: memory_file("cordon-cell-stdout")?,
            stderr: memory_file("cordon-cell-stderr")?,
        })
    }

    /// Descriptors for the worker, each at the number the driver expects.
    pub(super) fn for_worker(&self) -> io::Result<Vec<(i32, OwnedFd)>> {
        Ok(vec![
            (super::boot::STDOUT_FD, self.stdout.try_clone()?.into()),
            (super::boot::STDERR_FD, self.stderr.try_clone()?.into()),
        ])
    }

    /// Empties both files before a cell.
    pub(super) fn clear(&self) -> io::Result<()> {
        self.stdout.set_len(0)?;
        self.stderr.set_len(0)
    }

    /// Reads what the cell wrote, each stream shaped by its spec.
    pub(super) async fn read(
        &self,
        stdout: CaptureSpec,
        stderr: CaptureSpec,
    ) -> (Captured, Captured) {
        (
            read_one(&self.stdout, stdout).await,
            read_one(&self.stderr, stderr).await,
        )
    }
}

fn memory_file(name: &str) -> io::Result<File> {
    // No ALLOW_SEALING: a worker must not be able to seal the file and make `clear` fail.
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?;
    // The worker shares this open file description: with O_APPEND every write lands at the
    // end, so after `clear` the next cell writes from offset 0 again.
    rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::APPEND)?;
    Ok(File::from(fd))
}

async fn read_one(file: &File, spec: CaptureSpec) -> Captured {
    let Some(end) = readable_len(file) else {
        return Captured::default();
    };
    let snapshot = Snapshot { file, pos: 0, end };
    capture::drain(snapshot, spec, None, CancellationToken::new()).await
}

/// How much of the file to read: its size, but no more than it holds and [`READ_LIMIT`];
/// None when it is not a regular file (it always is: the server made it).
fn readable_len(file: &File) -> Option<u64> {
    let st = rustix::fs::fstat(file).ok()?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return None;
    }
    let size = u64::try_from(st.st_size).unwrap_or(0);
    let held = u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512);
    Some(size.min(held).min(READ_LIMIT))
}

/// Positional reads of `[0, end)` of a memory file, so the read neither moves the offset the
/// worker shares nor sees what is written after the size was taken. A memfd read is a memory
/// copy that never waits, so it is done right in `poll_read`.
struct Snapshot<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl AsyncRead for Snapshot<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let want = (this.end - this.pos).min(buf.remaining() as u64) as usize;
        if want == 0 {
            return Poll::Ready(Ok(()));
        }
        let dst = buf.initialize_unfilled_to(want);
        loop {
            match this.file.read_at(dst, this.pos) {
                // Shrunk meanwhile (a cell's own ftruncate): the rest is gone.
                Ok(0) => this.end = this.pos,
                Ok(n) => {
                    buf.advance(n);
                    this.pos += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
            return Poll::Ready(Ok(()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn spec() -> CaptureSpec {
        CaptureSpec {
            memory_cap: 1 << 20,
            spill: None,
            tee: None,
        }
    }

    #[tokio::test]
    async fn what_the_worker_appends_is_read_and_cleared() {
        let files = CellFiles::new().unwrap();
        let fds = files.for_worker().unwrap();
        let mut worker_stdout = File::from(fds.into_iter().next().unwrap().1);
        worker_stdout.write_all(b"one\n").unwrap();
        let (out, err) = files.read(spec(), spec()).await;
        assert_eq!(out.head, b"one\n");
        assert_eq!(err.total_bytes, 0);
        files.clear().unwrap();
        worker_stdout.write_all(b"two\n").unwrap();
        let (out, _) = files.read(spec(), spec()).await;
        assert_eq!(
            out.head, b"two\n",
            "O_APPEND: after clear the write starts at 0"
        );
    }

    #[tokio::test]
    async fn a_sparse_tail_is_not_read() {
        let files = CellFiles::new().unwrap();
        let (_, fd) = files.for_worker().unwrap().into_iter().next().unwrap();
        let mut worker_stdout = File::from(fd);
        worker_stdout.write_all(b"real\n").unwrap();
        worker_stdout.set_len(8 << 30).unwrap();
        let (out, _) = files.read(spec(), spec()).await;
        assert!(out.total_bytes <= 4096, "{} bytes read", out.total_bytes);
        assert!(out.head.starts_with(b"real\n"));
    }
}
