//! Sending one datagram with descriptors attached (`SCM_RIGHTS`) and receiving it, on the
//! `SOCK_SEQPACKET` sockets between the server, the init and the slots.
//!
//! Owns only the socket calls (safe rustix wrappers). Received descriptors are always
//! close-on-exec and owned, so a truncated or unexpected message leaks nothing into a child.

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::wire::{MAX_FDS, MAX_MESSAGE};

/// A connected pair of `SOCK_SEQPACKET` Unix sockets, both close-on-exec.
pub(crate) fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Sends `data` as one datagram with `fds` attached. Blocks while the peer's queue is full.
pub(crate) fn send(socket: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    loop {
        match rustix::net::sendmsg(
            socket,
            &[IoSlice::new(data)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Ok(n) if n == data.len() => return Ok(()),
            Ok(_) => return Err(io::Error::other("datagram sent in part")),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// One received datagram. `data` empty with `eof` set: the peer closed its end.
#[derive(Debug, Default)]
pub(crate) struct Received {
    pub data: Vec<u8>,
    pub fds: Vec<OwnedFd>,
    pub eof: bool,
}

/// Receives one datagram (blocking unless `socket` is non-blocking). A datagram larger than
/// [`MAX_MESSAGE`] or carrying more than [`MAX_FDS`] descriptors is an error; its descriptors
/// are closed.
pub(crate) fn recv(socket: BorrowedFd<'_>) -> io::Result<Received> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = loop {
        match rustix::net::recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(m) => break m,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if msg.flags.contains(ReturnFlags::TRUNC) || msg.flags.contains(ReturnFlags::CTRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "datagram or its descriptors were truncated",
        ));
    }
    if msg.bytes == 0 && fds.is_empty() {
        return Ok(Received {
            eof: true,
            ..Received::default()
        });
    }
    buf.truncate(msg.bytes);
    Ok(Received {
        data: buf,
        fds,
        eof: false,
    })
}

/// Borrows a list of owned descriptors for [`send`].
pub(crate) fn borrow_all(fds: &[OwnedFd]) -> Vec<BorrowedFd<'_>> {
    fds.iter().map(AsFd::as_fd).collect()
}
