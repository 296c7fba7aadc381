//! The audit netlink socket: the only code that talks to the kernel's audit subsystem.
//!
//! Owns opening `NETLINK_AUDIT`, joining the read-only multicast group (`AUDIT_NLGRP_READLOG`,
//! which needs CAP_AUDIT_READ and no auditd), the status request and the switch that turns
//! audit on (`AUDIT_GET` / `AUDIT_SET`, CAP_AUDIT_CONTROL), the user message cordon uses as a
//! barrier (`AUDIT_TRUSTED_APP`, CAP_AUDIT_WRITE), and receiving one record. It parses nothing
//! but the netlink header: what a record says is `record`'s job.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NETLINK_AUDIT: libc::c_int = 9;
/// Multicast group of read-only log listeners (`AUDIT_NLGRP_READLOG`), as a group bit.
const AUDIT_NLGRP_READLOG_BIT: u32 = 1;
pub(super) const AUDIT_GET: u16 = 1000;
const AUDIT_SET: u16 = 1001;
/// "Trusted app msg - freestyle text": what the barrier is sent as.
pub(super) const AUDIT_TRUSTED_APP: u16 = 1121;
const AUDIT_ADD_RULE: u16 = 1011;
const AUDIT_LIST_RULES: u16 = 1013;
const NLMSG_DONE: u16 = 3;
const NLM_F_DUMP: u16 = 0x300;
/// `AUDIT_FILTER_TASK`: rules judged once per task, when it is forked.
const AUDIT_FILTER_TASK: u32 = 0x01;
/// `AUDIT_NEVER`: a task a rule matches gets no audit context.
const AUDIT_NEVER: u32 = 0;
/// `AUDIT_LOGINUID` (a field) and `AUDIT_NOT_EQUAL` (its operator).
const AUDIT_LOGINUID: u32 = 9;
const AUDIT_NOT_EQUAL: u32 = 0x3000_0000;
/// `struct audit_rule_data` without its trailing buffer: flags, action, field_count, then
/// `mask`, `fields`, `values` and `fieldflags` of 64 words each, then `buflen`.
const RULE_DATA_LEN: usize = 4 * (3 + 64 * 4 + 1);
const AUDIT_STATUS_ENABLED: u32 = 0x0001;
const AUDIT_STATUS_BACKLOG_LIMIT: u32 = 0x0010;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
/// The biggest record the kernel sends (`MAX_AUDIT_MESSAGE_LENGTH` is 8970); one page more
/// than that is plenty and bounds what one `recv` may hand us.
pub(super) const MAX_RECORD: usize = 16 * 1024;
/// Receive buffer asked for the multicast socket: a noisy call's burst waits here while the
/// reader thread catches up (as root, `SO_RCVBUFFORCE` goes past `rmem_max`). 16 MiB holds
/// about as many records as the backlog cordon asks the kernel for (a record takes about a
/// kilobyte of socket memory), so a burst the kernel keeps is not dropped here instead;
/// memory that is only used while the reader lags.
const RECEIVE_BUFFER: libc::c_int = 16 << 20;

/// The part of `struct audit_status` cordon reads (the kernel's first eight `u32`s).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Status {
    /// 0 off, 1 on, 2 on and locked until reboot.
    pub enabled: u32,
    /// 0 silent, 1 printk, 2 panic: what the kernel does when it loses a record.
    pub failure: u32,
    pub pid: u32,
    pub backlog_limit: u32,
    pub lost: u32,
}

/// One message read from the socket: its type and payload (header removed).
pub(super) struct Message {
    pub kind: u16,
    pub payload: Vec<u8>,
}

pub(super) struct AuditSocket {
    fd: OwnedFd,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct NlMsgHdr {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
}

const HDR: usize = std::mem::size_of::<NlMsgHdr>();

impl AuditSocket {
    /// A socket bound to nothing (requests only).
    pub(super) fn control() -> io::Result<Self> {
        Self::open(0)
    }

    /// A socket in the read-only log group: every record the kernel emits arrives here.
    pub(super) fn reader() -> io::Result<Self> {
        let sock = Self::open(AUDIT_NLGRP_READLOG_BIT)?;
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
            // SAFETY: setsockopt reads one c_int from a live local for its size.
            let ret = unsafe {
                libc::setsockopt(
                    sock.fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&RECEIVE_BUFFER as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if ret == 0 {
                break;
            }
        }
        Ok(sock)
    }

    fn open(groups: u32) -> io::Result<Self> {
        // SAFETY: socket() takes no pointers; the returned descriptor is owned right below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                NETLINK_AUDIT,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_nl is plain data; zeroed is its "any port id" value.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = groups;
        // SAFETY: bind reads exactly `size_of::<sockaddr_nl>()` bytes of the live local.
        let ret = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd })
    }

    /// Sends one request to the kernel (port id 0).
    fn send(&self, kind: u16, flags: u16, payload: &[u8]) -> io::Result<()> {
        let len = HDR + payload.len();
        let hdr = NlMsgHdr {
            len: len as u32,
            kind,
            flags,
            seq: 1,
            pid: 0,
        };
        let mut buf = Vec::with_capacity(len);
        // SAFETY: NlMsgHdr is repr(C) plain data of exactly HDR bytes with no padding
        // (4 + 2 + 2 + 4 + 4); viewing it as bytes reads only initialised memory.
        buf.extend_from_slice(unsafe {
            std::slice::from_raw_parts((&hdr as *const NlMsgHdr).cast::<u8>(), HDR)
        });
        buf.extend_from_slice(payload);
        // SAFETY: sockaddr_nl is plain data; zeroed addresses the kernel (port id 0).
        let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        to.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: sendto reads `buf.len()` bytes of `buf` and the live `to` for its size.
        let ret = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                0,
                (&to as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one message; `Ok(None)` when `timeout_ms` passed first (negative: wait).
    /// A multicast socket that overflowed reports `ENOBUFS` once: records were lost.
    pub(super) fn recv(&self, timeout_ms: i32) -> io::Result<Option<Message>> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll reads and writes the one live pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(e)
            };
        }
        if ready == 0 {
            return Ok(None);
        }
        let mut buf = vec![0u8; MAX_RECORD];
        // SAFETY: recv writes at most `buf.len()` bytes into `buf`.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        let n = n as usize;
        if n < HDR {
            return Ok(Some(Message {
                kind: 0,
                payload: Vec::new(),
            }));
        }
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        let len = (u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize).clamp(HDR, n);
        buf.truncate(len);
        buf.drain(..HDR);
        Ok(Some(Message { kind, payload: buf }))
    }

    /// The kernel's audit status (`AUDIT_GET`).
    pub(super) fn status(&self) -> io::Result<Status> {
        self.send(AUDIT_GET, NLM_F_REQUEST | NLM_F_ACK, &[])?;
        for _ in 0..8 {
            let Some(msg) = self.recv(1000)? else {
                return Err(io::Error::from(io::ErrorKind::TimedOut));
            };
            match msg.kind {
                AUDIT_GET if msg.payload.len() >= 32 => {
                    let word = |i: usize| {
                        let b = &msg.payload[i * 4..i * 4 + 4];
                        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
                    };
                    return Ok(Status {
                        enabled: word(1),
                        failure: word(2),
                        pid: word(3),
                        backlog_limit: word(5),
                        lost: word(6),
                    });
                }
                NLMSG_ERROR => check_ack(&msg.payload)?,
                _ => {}
            }
        }
        Err(io::Error::other("no audit status in the kernel's answer"))
    }

    /// Turns audit on or off (`AUDIT_SET` with only the `enabled` field).
    pub(super) fn set_enabled(&self, on: bool) -> io::Result<()> {
        // struct audit_status: mask, enabled, then fields the mask leaves alone.
        let mut payload = [0u8; 44];
        payload[0..4].copy_from_slice(&AUDIT_STATUS_ENABLED.to_ne_bytes());
        payload[4..8].copy_from_slice(&u32::from(on).to_ne_bytes());
        self.send(AUDIT_SET, NLM_F_REQUEST | NLM_F_ACK, &payload)?;
        self.await_ack()
    }

    /// Adds the task rule `never,task -F auid!=<loginuid>`: a task forked from then on gets no
    /// audit context (and so no per-syscall audit work) unless its login uid is `loginuid`.
    /// A rule already there is not an error.
    pub(super) fn add_never_unless_loginuid(&self, loginuid: u32) -> io::Result<()> {
        self.send(
            AUDIT_ADD_RULE,
            NLM_F_REQUEST | NLM_F_ACK,
            &never_unless(loginuid),
        )?;
        match self.await_ack() {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            other => other,
        }
    }

    /// Whether the kernel holds the rule [`AuditSocket::add_never_unless_loginuid`] adds.
    pub(super) fn has_never_unless_loginuid(&self, loginuid: u32) -> io::Result<bool> {
        self.send(AUDIT_LIST_RULES, NLM_F_REQUEST | NLM_F_DUMP, &[])?;
        let want = never_unless(loginuid);
        let mut found = false;
        for _ in 0..4096 {
            let Some(msg) = self.recv(1000)? else {
                return Err(io::Error::from(io::ErrorKind::TimedOut));
            };
            match msg.kind {
                NLMSG_DONE => return Ok(found),
                NLMSG_ERROR => check_ack(&msg.payload)?,
                AUDIT_LIST_RULES => {
                    found |= msg.payload.get(..RULE_DATA_LEN) == Some(&want[..]);
                }
                _ => {}
            }
        }
        Err(io::Error::other("the kernel's rule list did not end"))
    }

    /// Sets the kernel's audit backlog limit (`AUDIT_SET` with only `backlog_limit`): how many
    /// records may wait for the readers before the kernel drops new ones.
    pub(super) fn set_backlog_limit(&self, limit: u32) -> io::Result<()> {
        let mut payload = [0u8; 44];
        payload[0..4].copy_from_slice(&AUDIT_STATUS_BACKLOG_LIMIT.to_ne_bytes());
        payload[20..24].copy_from_slice(&limit.to_ne_bytes());
        self.send(AUDIT_SET, NLM_F_REQUEST | NLM_F_ACK, &payload)?;
        self.await_ack()
    }

    /// Sends a user message; the kernel queues it behind every record already queued, so
    /// the reader seeing it means it saw those too.
    pub(super) fn send_user_message(&self, text: &str) -> io::Result<()> {
        let mut payload = text.as_bytes().to_vec();
        payload.push(0);
        self.send(AUDIT_TRUSTED_APP, NLM_F_REQUEST | NLM_F_ACK, &payload)?;
        self.await_ack()
    }

    fn await_ack(&self) -> io::Result<()> {
        for _ in 0..8 {
            let Some(msg) = self.recv(1000)? else {
                return Err(io::Error::from(io::ErrorKind::TimedOut));
            };
            if msg.kind == NLMSG_ERROR {
                return check_ack(&msg.payload);
            }
        }
        Err(io::Error::other("no acknowledgement from the kernel"))
    }
}

/// The `struct audit_rule_data` of `never,task -F auid!=<loginuid>`, as the kernel also lists
/// it back (the syscall mask of a task rule is left empty, and so it stays).
fn never_unless(loginuid: u32) -> Vec<u8> {
    let mut words = vec![0u32; RULE_DATA_LEN / 4];
    words[0] = AUDIT_FILTER_TASK;
    words[1] = AUDIT_NEVER;
    words[2] = 1;
    let (fields, values, fieldflags) = (3 + 64, 3 + 128, 3 + 192);
    words[fields] = AUDIT_LOGINUID;
    words[values] = loginuid;
    words[fieldflags] = AUDIT_NOT_EQUAL;
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// An `NLMSG_ERROR` payload: errno 0 is the acknowledgement.
fn check_ack(payload: &[u8]) -> io::Result<()> {
    let Some(b) = payload.get(0..4) else {
        return Err(io::Error::other("short netlink error message"));
    };
    match i32::from_ne_bytes([b[0], b[1], b[2], b[3]]) {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(-e)),
    }
}
