//! Forbidden operations, attempted for real, to prove the confinement holds.
//!
//! `cordon probe NAME` (hidden) runs one of these inside a confined child; `doctor` and the
//! confinement tests read its exit code: 0 = the operation succeeded (confinement absent),
//! 1 = it was refused (the expected result), 2 = the probe could not run. Some probes are
//! killed by seccomp instead (int 0x80), which callers see as SIGSYS. Raw syscalls are needed
//! because libc wrappers and std would hide or avoid exactly the paths we want to test.

pub(crate) mod isolation;

pub(crate) use isolation::HostSysvObjects;

use std::io::Error;
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream, UdpSocket};

pub(crate) const PROBES: &[&str] = &[
    "ptrace",
    "mount",
    "unshare",
    "clone-newuser",
    "clone3",
    "bpf",
    "io_uring",
    "udp",
    "tcp-connect",
    "proxy-connect",
    "signal-parent",
    "x32",
    "int80",
    "inotify-hold",
];

/// What `inotify-hold` tries to take: far more than any host's per-user default (128).
const INOTIFY_ATTEMPTS: usize = 4096;

/// Runs probe `name`, prints one line about what happened and returns the exit code.
pub fn run(name: &str, arg: Option<&str>) -> i32 {
    let outcome: Result<(), Error> = match name {
        "ptrace" => {
            let parent = rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get());
            // SAFETY: PTRACE_ATTACH with integer arguments only.
            syscall_result(unsafe { libc::ptrace(libc::PTRACE_ATTACH, parent, 0, 0) })
        }
        "mount" => {
            let target = std::env::temp_dir();
            let target =
                std::ffi::CString::new(target.as_os_str().as_encoded_bytes()).unwrap_or_default();
            // SAFETY: all pointers are valid NUL-terminated strings or null.
            syscall_result(unsafe {
                libc::mount(
                    c"none".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            } as libc::c_long)
        }
        // SAFETY: unshare takes only flags.
        "unshare" => syscall_result(unsafe { libc::unshare(libc::CLONE_NEWUSER) } as libc::c_long),
        "clone-newuser" => {
            // SAFETY: raw clone with a null stack behaves like fork; the child exits at once.
            let pid = unsafe {
                libc::syscall(
                    libc::SYS_clone,
                    (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                )
            };
            if pid == 0 {
                // SAFETY: leaving the forked child without running any Rust destructors.
                unsafe { libc::_exit(0) }
            }
            if pid > 0 {
                // SAFETY: reaping our own child.
                unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), 0) };
            }
            syscall_result(pid)
        }
        "clone3" => {
            // SAFETY: clone3 with a null argument struct fails before touching memory (EFAULT
            // unfiltered, ENOSYS under our filter); either way no process is created.
            syscall_result(unsafe { libc::syscall(libc::SYS_clone3, 0usize, 0usize) })
        }
        "bpf" => {
            // SAFETY: BPF_PROG_LOAD with a null attr: EFAULT unfiltered, EPERM filtered.
            syscall_result(unsafe { libc::syscall(libc::SYS_bpf, 5, 0usize, 0usize) })
        }
        "io_uring" => {
            let mut params = [0u8; 120];
            // SAFETY: io_uring_setup writes at most sizeof(io_uring_params)=120 bytes.
            let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
            if fd >= 0 {
                // SAFETY: closing the fd we just got.
                unsafe { libc::close(fd as i32) };
            }
            syscall_result(fd)
        }
        "udp" => UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
            .and_then(|s| {
                let port = arg.and_then(|a| a.parse().ok()).unwrap_or(9);
                s.send_to(
                    b"cordon-probe",
                    SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
                )
            })
            .map(|_| ()),
        "tcp-connect" => match arg.and_then(|a| a.parse::<u16>().ok()) {
            Some(port) => {
                TcpStream::connect(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).map(|_| ())
            }
            None => return usage("tcp-connect PORT"),
        },
        "proxy-connect" => match arg {
            Some(target) => proxy_connect(target),
            None => return usage("proxy-connect HOST:PORT"),
        },
        "signal-parent" => {
            let parent = rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get());
            // SAFETY: kill with signal 0 only checks permission.
            syscall_result(unsafe { libc::kill(parent, 0) } as libc::c_long)
        }
        "x32" => {
            const X32_BIT: libc::c_long = 0x4000_0000;
            // SAFETY: getpid through its x32 number takes no arguments.
            syscall_result(unsafe { libc::syscall(X32_BIT | libc::SYS_getpid) })
        }
        "int80" => int80_getpid(),
        "inotify-hold" => inotify_hold(arg),
        other => match isolation::run(other, arg) {
            Some(Ok(outcome)) => outcome,
            Some(Err(what)) => return usage(what),
            None => return usage("NAME"),
        },
    };
    match outcome {
        Ok(()) => {
            println!("{name}: ALLOWED");
            0
        }
        Err(e) => {
            println!("{name}: refused: {e}");
            1
        }
    }
}

/// `CONNECT target` through the egress proxy named by `HTTPS_PROXY`, with the credentials of
/// its URL, as a TLS client would: Ok when the proxy opens the tunnel, else the status line.
fn proxy_connect(target: &str) -> Result<(), Error> {
    use std::io::{Read, Write};
    let url = std::env::var("HTTPS_PROXY")
        .map_err(|_| Error::other("no HTTPS_PROXY in the environment"))?;
    let (credentials, addr) = url
        .strip_prefix("http://")
        .and_then(|rest| rest.rsplit_once('@'))
        .ok_or_else(|| {
            Error::other(format!(
                "HTTPS_PROXY `{url}` is not http://user:pass@host:port"
            ))
        })?;
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(
        stream,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {}\r\n\r\n",
        crate::egress::credentials::basic_authorization(credentials)
    )?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\r\n") && line.len() < 1024 && stream.read(&mut byte)? == 1 {
        line.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&line).trim_end().to_owned();
    if line.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(Error::other(line))
    }
}

/// Takes inotify instances until the kernel refuses one (or [`INOTIFY_ATTEMPTS`]), says how
/// many, and holds them for `arg` milliseconds (so a host process can check meanwhile that
/// its own budget is untouched). Allowed = the call could take them all.
fn inotify_hold(arg: Option<&str>) -> Result<(), Error> {
    let hold_ms: u64 = arg.and_then(|a| a.parse().ok()).unwrap_or(0);
    let mut held = Vec::new();
    let mut refusal = None;
    while held.len() < INOTIFY_ATTEMPTS {
        match rustix::fs::inotify::init(rustix::fs::inotify::CreateFlags::CLOEXEC) {
            Ok(fd) => held.push(fd),
            Err(e) => {
                refusal = Some(Error::from(e));
                break;
            }
        }
    }
    println!("held {}", held.len());
    std::thread::sleep(std::time::Duration::from_millis(hold_ms));
    match refusal {
        None => Ok(()),
        Some(e) => Err(Error::other(format!("after {} instances: {e}", held.len()))),
    }
}

fn usage(what: &str) -> i32 {
    eprintln!(
        "usage: cordon probe {what} (probes: {}, {})",
        PROBES.join(", "),
        isolation::PROBES.join(", ")
    );
    2
}

fn syscall_result(ret: libc::c_long) -> Result<(), Error> {
    if ret < 0 {
        Err(Error::last_os_error())
    } else {
        Ok(())
    }
}

/// getpid through the i386 compatibility entry point. Under our filter the process dies with
/// SIGSYS (seccompiler's architecture check), so returning at all means it was not stopped.
fn int80_getpid() -> Result<(), Error> {
    const I386_GETPID: u64 = 20;
    let ret: u64;
    // SAFETY: `int 0x80` with eax=20 is getpid in the i386 ABI; it reads no memory. r8-r11 are
    // declared clobbered because the compat entry does not preserve them on every kernel.
    unsafe {
        std::arch::asm!(
            "int 0x80",
            inlateout("rax") I386_GETPID => ret,
            out("r8") _, out("r9") _, out("r10") _, out("r11") _,
        );
    }
    if (ret as i64) < 0 {
        Err(Error::from_raw_os_error(-(ret as i64) as i32))
    } else {
        Ok(())
    }
}
