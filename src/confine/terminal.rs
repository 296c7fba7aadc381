//! The server's side of a job's terminal: the pty master, registered with Tokio's reactor.
//!
//! Owns the one registration (Tokio's `AsyncFd::register` is `unsafe`: the descriptor must stay
//! open and the same for the registration's life), reading it as a stream (the end of the
//! output is EIO: no process has the terminal open any more) and writing input to it. The
//! terminal itself is opened by the slot in its own devpts (`sandbox_init::init`) or, on the
//! per-child path, by `exec::launch`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, ReadBuf};

/// A terminal's master side, shared by its reader and its writers.
#[derive(Clone)]
pub(crate) struct Terminal(Arc<AsyncFd<OwnedFd>>);

impl Terminal {
    /// `master`, non-blocking, ready for async reads and writes. Call inside a Tokio runtime.
    pub(crate) fn new(master: OwnedFd) -> io::Result<Self> {
        let flags = rustix::fs::fcntl_getfl(&master)?;
        rustix::fs::fcntl_setfl(&master, flags | rustix::fs::OFlags::NONBLOCK)?;
        // SAFETY: an `OwnedFd` is open for as long as it lives, and `as_raw_fd` always returns
        // the same descriptor; the `AsyncFd` owns it, so it closes only when the registration
        // ends.
        let fd = unsafe { AsyncFd::register(master).map_err(|e| e.into_parts().1)? };
        Ok(Self(Arc::new(fd)))
    }

    /// Writes all of `data` to the terminal's input, waiting while its input queue is full.
    pub(crate) async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut ready = self.0.writable().await?;
            match ready.try_io(|fd| rustix::io::write(fd.get_ref(), data).map_err(Into::into)) {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
        Ok(())
    }

    /// The terminal's foreground process group (as the server's PID namespace numbers it),
    /// when it has one: whose programs read what is typed now.
    pub(crate) fn foreground_group(&self) -> Option<u32> {
        // On a pty master, TIOCGPGRP answers for the slave side: the job's terminal.
        rustix::termios::tcgetpgrp(self.0.get_ref())
            .ok()
            .map(|pid| pid.as_raw_nonzero().get() as u32)
    }

    /// Sends `signal` to the terminal's foreground process group, as the line discipline does
    /// for Ctrl-C: whatever the job's shell runs in the foreground gets it, not only the shell.
    pub(crate) fn signal_foreground(&self, signal: rustix::process::Signal) -> io::Result<()> {
        // SAFETY: TIOCSIG takes the signal number as its plain integer argument; the
        // descriptor is the live master this value owns.
        let r = unsafe {
            libc::ioctl(
                self.0.get_ref().as_raw_fd(),
                libc::TIOCSIG,
                signal.as_raw() as libc::c_ulong,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Sets the terminal's size; the kernel sends SIGWINCH to its foreground process group.
    pub(crate) fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads a live local winsize through the pointer.
        let r = unsafe { libc::ioctl(self.0.get_ref().as_raw_fd(), libc::TIOCSWINSZ, &size) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl AsyncRead for Terminal {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|fd| rustix::io::read(fd.get_ref(), unfilled).map_err(Into::into)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                // Every process closed the other side: the end of the output.
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Poll::Ready(Ok(())),
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}
