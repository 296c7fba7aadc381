//! `mount_setattr(2)`, the one way the view sets attributes on a whole mount tree: read-only,
//! nosuid and nodev on a bound path, and the id mapping of a detached tree (`idmap`). rustix
//! has no wrapper, so the struct and flags the kernel defines live here, once.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

pub(super) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(super) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(super) const MOUNT_ATTR_NODEV: u64 = 0x4;
pub(super) const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `struct mount_attr` (linux/mount.h, the first version's size).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Where the tree to change is: a path (resolved from the current directory, never
/// following its last component), or a detached tree's descriptor.
pub(super) enum Target<'a> {
    Path(&'a CStr),
    Tree(BorrowedFd<'a>),
}

/// Sets `attr_set` on every mount of the tree at `target` (`AT_RECURSIVE`); `userns` is the
/// user namespace of `MOUNT_ATTR_IDMAP`.
pub(super) fn set(
    target: Target<'_>,
    attr_set: u64,
    userns: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.map_or(0, |fd| fd.as_raw_fd() as u64),
    };
    let recursive = libc::AT_RECURSIVE as libc::c_uint;
    let (dirfd, path, flags): (RawFd, &CStr, libc::c_uint) = match target {
        Target::Path(path) => (
            libc::AT_FDCWD,
            path,
            recursive | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint,
        ),
        Target::Tree(fd) => (
            fd.as_raw_fd(),
            c"",
            recursive | libc::AT_EMPTY_PATH as libc::c_uint,
        ),
    };
    // SAFETY: mount_setattr reads `attr` (a live, correctly sized repr(C) struct) and the
    // NUL-terminated path; it writes no memory of ours.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
