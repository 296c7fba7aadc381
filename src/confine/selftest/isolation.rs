//! Probes of what the sandbox init's namespaces and the seccomp additions promise: the host's
//! sockets, System V IPC objects, files' metadata and processes are out of reach, no setuid
//! file can be made, no descriptor leaks in, and TCP port rules have no side door.
//!
//! Same contract as the rest of `selftest`: each probe attempts the real operation and returns
//! `Ok(())` when it succeeded (confinement absent) or the error that stopped it. Probes that
//! try several ways to the same effect succeed when any way does, and print each attempt, so a
//! refusal means every way was refused.

use std::ffi::CString;
use std::io::Error;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub(crate) const PROBES: &[&str] = &[
    "unix-connect",
    "metadata",
    "setuid-chmod",
    "shm-read",
    "msg-read",
    "write-fd",
    "tcp-fastopen",
    "mptcp",
    "proc-visible",
];

/// `Some(result)` when `name` is one of this module's probes; `Err` carries usage text when
/// the argument is missing or malformed.
pub(crate) fn run(
    name: &str,
    arg: Option<&str>,
) -> Option<Result<Result<(), Error>, &'static str>> {
    let needs = |usage: &'static str| arg.ok_or(usage);
    let outcome = match name {
        "unix-connect" => needs("unix-connect PATH|@ABSTRACT").map(unix_connect),
        "metadata" => needs("metadata PATH").map(metadata),
        "setuid-chmod" => needs("setuid-chmod PATH").map(setuid_chmod),
        "shm-read" => number(arg, "shm-read SHMID").map(shm_read),
        "msg-read" => number(arg, "msg-read MSQID").map(msg_read),
        "write-fd" => number(arg, "write-fd FD").map(write_fd),
        "tcp-fastopen" => port(arg, "tcp-fastopen PORT").map(tcp_fastopen),
        "mptcp" => port(arg, "mptcp PORT").map(mptcp_connect),
        "proc-visible" => needs("proc-visible TOKEN").map(proc_visible),
        _ => return None,
    };
    Some(outcome)
}

fn number(arg: Option<&str>, usage: &'static str) -> Result<i32, &'static str> {
    arg.and_then(|a| a.parse().ok()).ok_or(usage)
}

fn port(arg: Option<&str>, usage: &'static str) -> Result<u16, &'static str> {
    arg.and_then(|a| a.parse().ok()).ok_or(usage)
}

/// Several ways to one effect: succeeded when any way did, else the last refusal.
#[derive(Default)]
struct Attempts {
    succeeded: bool,
    last_refusal: Option<Error>,
}

impl Attempts {
    /// Reports one attempt.
    fn record(&mut self, what: &str, result: Result<(), Error>) {
        match result {
            Ok(()) => {
                println!("  {what}: succeeded");
                self.succeeded = true;
            }
            Err(e) => {
                println!("  {what}: refused: {e}");
                self.last_refusal = Some(e);
            }
        }
    }

    fn outcome(self) -> Result<(), Error> {
        match (self.succeeded, self.last_refusal) {
            (true, _) | (false, None) => Ok(()),
            (false, Some(e)) => Err(e),
        }
    }
}

fn cstring(path: &str) -> Result<CString, Error> {
    CString::new(path).map_err(|_| Error::from_raw_os_error(libc::EINVAL))
}

fn check(ret: libc::c_long) -> Result<libc::c_long, Error> {
    if ret < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Connects to a Unix stream socket by path, or by abstract name when it starts with `@`.
fn unix_connect(target: &str) -> Result<(), Error> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixStream};
    match target.strip_prefix('@') {
        Some(name) => {
            let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
            UnixStream::connect_addr(&addr).map(|_| ())
        }
        None => UnixStream::connect(target).map(|_| ()),
    }
}

/// chmod, chown (to the owner it already has), utimensat and setxattr on `path`.
fn metadata(path: &str) -> Result<(), Error> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut any = Attempts::default();
    let before = std::fs::symlink_metadata(path);
    any.record(
        "chmod 0777",
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)),
    );
    let (uid, gid) = before
        .as_ref()
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((0, 0));
    any.record(
        "chown to its own owner",
        std::os::unix::fs::chown(path, Some(uid), Some(gid)),
    );
    let epoch = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
    };
    any.record(
        "utimensat (touch -d 1970)",
        rustix::fs::utimensat(rustix::fs::CWD, path, &epoch, rustix::fs::AtFlags::empty())
            .map_err(Error::from),
    );
    any.record(
        "setxattr user.cordon-probe",
        rustix::fs::setxattr(
            path,
            "user.cordon-probe",
            b"1",
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(Error::from),
    );
    // Put the mode back where a way succeeded, so the probe harms nothing it reached.
    if let Ok(m) = before
        && any.succeeded
    {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(m.mode() & 0o7777));
    }
    any.outcome()
}

/// Sets S_ISUID (then S_ISGID) on `path` through chmod, fchmod, fchmodat and fchmodat2, and a
/// file capability, then checks that no such bit or capability is set.
fn setuid_chmod(path: &str) -> Result<(), Error> {
    const FCHMODAT2: libc::c_long = 452;
    let c = cstring(path)?;
    let mut any = Attempts::default();
    let file = std::fs::File::open(path)?;
    for (bit, mode) in [("S_ISUID", 0o4755u32), ("S_ISGID", 0o2755)] {
        // SAFETY: chmod-family syscalls with a valid NUL-terminated path or an open fd.
        let calls: [(&str, libc::c_long); 4] = unsafe {
            [
                ("chmod", libc::syscall(libc::SYS_chmod, c.as_ptr(), mode)),
                (
                    "fchmod",
                    libc::syscall(libc::SYS_fchmod, file.as_raw_fd(), mode),
                ),
                (
                    "fchmodat",
                    libc::syscall(libc::SYS_fchmodat, libc::AT_FDCWD, c.as_ptr(), mode),
                ),
                (
                    "fchmodat2",
                    libc::syscall(FCHMODAT2, libc::AT_FDCWD, c.as_ptr(), mode, 0),
                ),
            ]
        };
        for (name, ret) in calls {
            let r = check(ret).map(|_| ());
            any.record(&format!("{name} {bit}"), r);
        }
    }
    // A file capability is a setuid bit by other means (`setcap cap_setuid+ep`): revision 2
    // with the effective flag, CAP_SETUID (7) permitted.
    const CAP_SETUID: u32 = 7;
    let cap_setuid: Vec<u8> = [0x0200_0001u32, 1 << CAP_SETUID, 0, 0, 0]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    any.record(
        "setxattr security.capability (cap_setuid+ep)",
        rustix::fs::setxattr(
            path,
            "security.capability",
            &cap_setuid,
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(Error::from),
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode();
    let has_caps = rustix::fs::getxattr(path, "security.capability", &mut [0u8; 64][..]).is_ok();
    println!(
        "  afterwards: mode {:o}, file capabilities {}",
        mode & 0o7777,
        if has_caps { "set" } else { "none" }
    );
    if mode & 0o6000 != 0 || has_caps {
        return Ok(());
    }
    any.outcome()
}

/// Attaches a System V shared-memory segment by id and reads its first byte.
fn shm_read(id: i32) -> Result<(), Error> {
    // SAFETY: shmat maps the segment read-only at an address the kernel picks; we read one
    // byte inside it and unmap it.
    unsafe {
        let addr = libc::shmat(id, std::ptr::null(), libc::SHM_RDONLY);
        if addr as isize == -1 {
            return Err(Error::last_os_error());
        }
        let first = *(addr as *const u8);
        println!("  attached; first byte {first:#04x}");
        libc::shmdt(addr);
    }
    Ok(())
}

/// Reads a System V message queue's status by id (what `ipcs -q` shows).
fn msg_read(id: i32) -> Result<(), Error> {
    // SAFETY: msqid_ds is plain data the kernel fills in.
    let mut ds: libc::msqid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: IPC_STAT writes one msqid_ds into `ds`.
    check(unsafe { libc::msgctl(id, libc::IPC_STAT, &mut ds) } as libc::c_long)?;
    println!("  queue visible: {} messages", ds.msg_qnum);
    Ok(())
}

/// Writes through descriptor `fd`, which the probe did not open itself.
fn write_fd(fd: i32) -> Result<(), Error> {
    let text = b"cordon-probe wrote through an inherited descriptor\n";
    // SAFETY: write reads `text.len()` bytes from a valid buffer; a bad fd is just EBADF.
    check(unsafe { libc::write(fd, text.as_ptr().cast(), text.len()) } as libc::c_long).map(|_| ())
}

fn loopback(port: u16) -> libc::sockaddr_in {
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    // SAFETY: sockaddr_in is plain data.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = addr.port().to_be();
    sa.sin_addr.s_addr = u32::from(*addr.ip()).to_be();
    sa
}

fn tcp_socket(protocol: i32) -> Result<OwnedFd, Error> {
    // SAFETY: socket takes integers only; the descriptor is owned at once.
    let fd = check(unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            protocol,
        )
    } as libc::c_long)?;
    // SAFETY: `fd` was just returned by socket and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// TCP Fast Open: connects to 127.0.0.1:`port` from inside sendto, sendmsg and sendmmsg,
/// without a connect() call.
fn tcp_fastopen(port: u16) -> Result<(), Error> {
    let sa = loopback(port);
    let sa_len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let data = b"cordon-probe";
    let mut any = Attempts::default();

    let r = tcp_socket(0).and_then(|s| {
        // SAFETY: sendto reads `data` and `sa`, both valid for the lengths given.
        check(unsafe {
            libc::sendto(
                s.as_raw_fd(),
                data.as_ptr().cast(),
                data.len(),
                libc::MSG_FASTOPEN,
                (&sa as *const libc::sockaddr_in).cast(),
                sa_len,
            )
        } as libc::c_long)
        .map(|_| ())
    });
    any.record("sendto(MSG_FASTOPEN)", r);

    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data; the pointers set below outlive both calls.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&sa as *const libc::sockaddr_in) as *mut libc::c_void;
    msg.msg_namelen = sa_len;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let r = tcp_socket(0).and_then(|s| {
        // SAFETY: sendmsg reads the msghdr and what it points to, all valid.
        check(unsafe { libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_FASTOPEN) } as libc::c_long)
            .map(|_| ())
    });
    any.record("sendmsg(MSG_FASTOPEN)", r);

    let r =
        tcp_socket(0).and_then(|s| {
            let mut mmsg = libc::mmsghdr {
                msg_hdr: msg,
                msg_len: 0,
            };
            // SAFETY: sendmmsg reads one mmsghdr (and what it points to) and writes msg_len.
            let sent = check(unsafe {
                libc::sendmmsg(s.as_raw_fd(), &mut mmsg, 1, libc::MSG_FASTOPEN as _)
            } as libc::c_long)?;
            if sent == 0 {
                return Err(Error::from_raw_os_error(libc::ENOTCONN));
            }
            Ok(())
        });
    any.record("sendmmsg(MSG_FASTOPEN)", r);
    any.outcome()
}

/// An MPTCP socket (`IPPROTO_MPTCP`), connected to 127.0.0.1:`port`.
fn mptcp_connect(port: u16) -> Result<(), Error> {
    const IPPROTO_MPTCP: i32 = 262;
    let s = tcp_socket(IPPROTO_MPTCP)?;
    let sa = loopback(port);
    // SAFETY: connect reads one sockaddr_in.
    check(unsafe {
        libc::connect(
            s.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    } as libc::c_long)
    .map(|_| ())
}

/// Looks through /proc for a process whose command line contains `token` (one started
/// outside the sandbox by the caller; this probe's own command line, which holds the token
/// too, is skipped), and says how many processes /proc shows at all.
fn proc_visible(token: &str) -> Result<(), Error> {
    let me = std::process::id();
    let mut pids = 0;
    let mut found = None;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        pids += 1;
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(token) {
            found = Some(pid);
        }
    }
    let init = std::fs::read("/proc/1/cmdline").unwrap_or_default();
    let init = String::from_utf8_lossy(&init).replace('\0', " ");
    println!("  /proc shows {pids} processes; pid 1 is `{}`", init.trim());
    match found {
        Some(pid) => {
            println!("  the outside process is visible as pid {pid}");
            Ok(())
        }
        None => Err(Error::from_raw_os_error(libc::ESRCH)),
    }
}

/// A 0600 System V shared-memory segment holding a secret and a 0600 message queue holding it
/// as one message, made by this (unconfined) process and removed on drop: what the
/// `shm-read` and `msg-read` probes try to reach from inside.
pub struct HostSysvObjects {
    pub shm_id: i32,
    pub msq_id: i32,
}

impl HostSysvObjects {
    pub fn create(secret: &[u8]) -> Result<Self, Error> {
        let len = secret.len().min(4096);
        // SAFETY: a new private segment of 4096 bytes, mapped, written within its size and
        // unmapped.
        let shm_id = unsafe {
            let id =
                check(libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600) as _)? as i32;
            let addr = libc::shmat(id, std::ptr::null(), 0);
            if addr as isize == -1 {
                let e = Error::last_os_error();
                libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
                return Err(e);
            }
            std::ptr::copy_nonoverlapping(secret.as_ptr(), addr.cast::<u8>(), len);
            libc::shmdt(addr);
            id
        };
        let objects = |msq_id| Self { shm_id, msq_id };
        // SAFETY: msgget takes integers only.
        let msq_id =
            match check(unsafe { libc::msgget(libc::IPC_PRIVATE, libc::IPC_CREAT | 0o600) } as _) {
                Ok(id) => id as i32,
                Err(e) => {
                    drop(objects(-1));
                    return Err(e);
                }
            };
        let made = objects(msq_id);
        // A message is a long type followed by the text.
        let mut buf = Vec::with_capacity(8 + len);
        buf.extend_from_slice(&1i64.to_ne_bytes());
        buf.extend_from_slice(&secret[..len]);
        // SAFETY: msgsnd reads 8 + len bytes from `buf`.
        check(unsafe { libc::msgsnd(msq_id, buf.as_ptr().cast(), len, libc::IPC_NOWAIT) } as _)?;
        Ok(made)
    }
}

impl Drop for HostSysvObjects {
    fn drop(&mut self) {
        // SAFETY: removing the objects this value made; a -1 id is simply EINVAL.
        unsafe {
            libc::shmctl(self.shm_id, libc::IPC_RMID, std::ptr::null_mut());
            libc::msgctl(self.msq_id, libc::IPC_RMID, std::ptr::null_mut());
        }
    }
}
