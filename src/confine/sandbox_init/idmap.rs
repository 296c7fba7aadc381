//! Who a confined process is on the host when cordon runs as root: never uid 0.
//!
//! Each slot is cloned into a user namespace of its own whose ids `0..count` are the host ids
//! `uid..uid + count` ([`CallIds`]): the call sees itself as root of its namespace, as before,
//! but every per-user kernel limit (inotify instances and watches, message queues, keys,
//! processes) is counted against an unprivileged host uid, and no file the host's root owns is
//! its own. So that the workspace stays writable and what a call creates stays the operator's,
//! the view's read-write binds are **idmapped** with the same mapping (`mount_setattr` with
//! `MOUNT_ATTR_IDMAP`, as container runtimes do): a file owned by host uid `k` on disk is seen
//! through the bind as owned by `uid + k`, that is by `k` inside the call, and a file the call
//! creates as its root is written to disk as uid 0. Nothing on disk ever belongs to the
//! sandbox's ids.
//!
//! Owns the mapping's three mechanisms, all run by the init's PID 1 (host root, unconfined):
//! writing a slot's maps, making the namespace an idmapped mount refers to, and the idmapped
//! bind itself; plus the two steps the slot takes in its namespace (becoming its root, and
//! lowering its namespace's per-user limits). Which ids, and whether at all, is decided by the
//! server (`confine::call_ids`).

use super::plan::CallIds;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// Per-user-namespace limits a slot sets on its own namespace before it drops its
/// capabilities: a call cannot take more of its host uid's inotify budget than this, so one
/// call can never exhaust it for the others (the host's `fs.inotify.max_user_instances` is
/// 128 by default, shared by every call of the uid), and it can make no namespaces of its
/// own (seccomp refuses that already; this holds even if a profile allowed it).
const NAMESPACE_LIMITS: &[(&str, u64)] = &[
    ("max_inotify_instances", 32),
    ("max_inotify_watches", 65536),
    ("max_user_namespaces", 0),
    ("max_mnt_namespaces", 0),
];

/// `/proc/<pid>/uid_map` and `gid_map` of a process in a fresh user namespace: its ids
/// `0..count` are `uid..` and `gid..` on the host. Written by a process of the parent
/// namespace with CAP_SETUID/CAP_SETGID (PID 1), so `setgroups` stays allowed for the slot,
/// which uses it to drop the supplementary groups it inherited from PID 1. `proc` is a
/// procfs of the PID namespace `pid` is a number of (PID 1's own: the host's `/proc` would
/// name another process).
pub(crate) fn write_maps(proc: &Path, pid: i32, ids: &CallIds) -> io::Result<()> {
    let dir = proc.join(pid.to_string());
    std::fs::write(
        dir.join("uid_map"),
        format!("{} {} {}\n", ids.inside, ids.uid, ids.count),
    )?;
    std::fs::write(
        dir.join("gid_map"),
        format!("{} {} {}\n", ids.inside, ids.gid, ids.count),
    )
}

/// A user namespace with `ids`' mapping that nothing runs in: what an idmapped mount refers
/// to. A child is cloned into a new namespace, its maps written, the namespace opened, and
/// the child let go. `proc` as for [`write_maps`].
pub(crate) fn namespace_for(ids: &CallIds, proc: &Path) -> io::Result<OwnedFd> {
    let (hold, release) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // SAFETY: clone without CLONE_VM and with a null stack is fork(2) with a flag; the caller
    // (PID 1 building the view) is single-threaded, and the child only reads a pipe and exits.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    } as i32;
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        drop(release);
        let mut byte = [0u8; 1];
        let _ = rustix::io::read(&hold, &mut byte);
        // SAFETY: _exit ends this forked child without running the parent's exit handlers.
        unsafe { libc::_exit(0) }
    }
    drop(hold);
    let opened = write_maps(proc, pid, ids).and_then(|()| {
        rustix::fs::open(
            proc.join(pid.to_string()).join("ns/user"),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(io::Error::from)
    });
    drop(release);
    let mut status = 0;
    // SAFETY: waitpid on our own child, writing its status into a live local.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    opened
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x04;

fn c_path(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// A detached copy of the mount tree at `src` (submounts included), idmapped through
/// `userns`, nosuid and nodev: ready to be moved into the view with [`attach`]. Fails
/// (EINVAL) where a filesystem of the tree cannot be idmapped (NFS, some FUSE).
pub(crate) fn idmapped_tree(src: &Path, userns: &OwnedFd) -> io::Result<OwnedFd> {
    let path = c_path(src)?;
    // SAFETY: open_tree reads the NUL-terminated path and returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE
                | libc::O_CLOEXEC as libc::c_uint
                | libc::AT_RECURSIVE as libc::c_uint
                | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: open_tree returned a descriptor that nothing else owns.
    let tree = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    use super::mount_attr::{self, MOUNT_ATTR_IDMAP, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, Target};
    mount_attr::set(
        Target::Tree(tree.as_fd()),
        MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        Some(userns.as_fd()),
    )?;
    Ok(tree)
}

/// Moves a detached tree from [`idmapped_tree`] onto `dst` (an existing mount point).
pub(crate) fn attach(tree: &OwnedFd, dst: &Path) -> io::Result<()> {
    let to = c_path(dst)?;
    // SAFETY: move_mount reads the two NUL-terminated paths; the descriptor is ours.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The slot's first step in its namespace, once PID 1 has written the maps: its ids become
/// `ids.inside` (host `uid`, `gid`: until now a root server's slot was still host uid 0, only
/// unmapped), and where cordon is root the supplementary groups it inherited from PID 1 (the
/// host's root group) are dropped, so no group permission of the host's root reaches a call.
/// (Without root the init's namespace denies `setgroups`, and the groups are the user's own.)
pub(crate) fn become_mapped(ids: &CallIds) -> io::Result<()> {
    let id = ids.inside;
    // SAFETY: setgroups with a zero count reads no memory; setresgid/setresuid take integers.
    unsafe {
        if ids.idmap && libc::setgroups(0, std::ptr::null()) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::setresgid(id, id, id) != 0 || libc::setresuid(id, id, id) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Lowers this namespace's per-user limits ([`NAMESPACE_LIMITS`]) through the slot's own
/// `/proc` (mounted by then); a user namespace's limits apply on top of its parent's.
pub(crate) fn limit_namespace() -> io::Result<()> {
    for (name, value) in NAMESPACE_LIMITS {
        let path = format!("/proc/sys/user/{name}");
        if Path::new(&path).exists() {
            std::fs::write(&path, value.to_string())?;
        }
    }
    Ok(())
}
