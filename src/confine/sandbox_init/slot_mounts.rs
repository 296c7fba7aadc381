//! What a slot's own mount namespace holds that no other slot sees: a `/proc` of its own PID
//! namespace, its directory at `/tmp` and `/var/tmp`, a private `/dev/shm`, a private devpts
//! instance, and its own cgroups at `/sys/fs/cgroup` through a cgroup namespace.
//!
//! Owns these mount calls and the Landlock grants they need (a rule names an inode, so what is
//! mounted here is granted here). Runs in the slot, single-threaded, before it confines itself;
//! the mount points were made by `view` when the init built the view.

use super::plan::InitPlan;
use crate::confine::landlock::{Grant, GrantKind};
use rustix::mount::{MountFlags, MountPropagationFlags, mount, mount_bind, mount_change};
use std::io;
use std::path::{Path, PathBuf};

/// A mount step that failed, with the kernel's error.
#[derive(Debug)]
pub(super) struct MountError {
    pub step: &'static str,
    pub source: io::Error,
}

fn step<T>(step: &'static str, r: rustix::io::Result<T>) -> Result<T, MountError> {
    r.map_err(|e| MountError {
        step,
        source: e.into(),
    })
}

fn grant(path: &str, access: GrantKind) -> Grant {
    Grant {
        path: PathBuf::from(path),
        access,
    }
}

/// Mounts the slot's own filesystems and returns what its Landlock layer must grant besides
/// the policy: `dir` (the call's TMPDIR or a worker's private directory) and the mounts made.
/// `joined_cgroups`: the slot is in cgroups of its own, which a cgroup namespace can root.
pub(super) fn build(
    plan: &InitPlan,
    dir: &Path,
    joined_cgroups: bool,
) -> Result<Vec<Grant>, MountError> {
    // Nothing mounted here may reach the init's namespace (or another slot's).
    step(
        "make mounts private",
        mount_change(
            "/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        ),
    )?;
    let data = MountFlags::NOSUID | MountFlags::NODEV;
    step(
        "mount /proc",
        mount("proc", "/proc", "proc", data | MountFlags::NOEXEC, c""),
    )?;
    let mut grants = vec![Grant {
        path: dir.to_path_buf(),
        access: GrantKind::ReadWrite,
    }];
    // Before `own_tmp`, which hides the calls' temporary root the copies live in.
    if plan.shims_per_slot {
        grants.extend(super::shims::onto_tmpfs(&plan.writable_shims));
    } else {
        grants.extend(super::shims::bind(&plan.calls_tmp, &plan.writable_shims));
    }
    own_tmp(plan, dir)?;
    if plan.shm_bytes > 0 && Path::new("/dev/shm").is_dir() {
        let options = std::ffi::CString::new(format!("mode=1777,size={}", plan.shm_bytes))
            .expect("no NUL in formatted numbers");
        step(
            "mount /dev/shm",
            mount("shm", "/dev/shm", "tmpfs", data, options.as_c_str()),
        )?;
        grants.push(grant("/dev/shm", GrantKind::ReadWrite));
    }
    // A devpts instance of its own: no call can open another call's terminal. Optional, as in
    // the view: a kernel that refuses it still runs every program that needs no pty.
    if mount(
        "devpts",
        "/dev/pts",
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        c"newinstance,ptmxmode=0666,mode=0620",
    )
    .is_ok()
    {
        grants.push(grant("/dev/pts", GrantKind::Device));
    }
    if Path::new("/sys/devices/system/cpu").is_dir() {
        grants.push(grant("/sys/devices/system/cpu", GrantKind::ReadExec));
    }
    if joined_cgroups && !plan.cgroup_mounts.is_empty() && cgroup_namespace().is_ok() {
        let mut mounted = false;
        for m in &plan.cgroup_mounts {
            let target = Path::new("/sys/fs/cgroup").join(&m.subdir);
            let Ok(options) = std::ffi::CString::new(m.options.as_bytes()) else {
                continue;
            };
            // Best effort: a host whose hierarchies cannot be mounted here still runs calls;
            // only heap sizing from the cgroup is lost.
            mounted |= mount(
                "cgroup",
                &target,
                m.fstype.as_str(),
                data | MountFlags::NOEXEC | MountFlags::RDONLY,
                options.as_c_str(),
            )
            .is_ok();
        }
        if mounted {
            grants.push(grant("/sys/fs/cgroup", GrantKind::ReadExec));
        }
    }
    Ok(grants)
}

/// Programs that hard-code `/tmp` (or `/var/tmp`) find the slot's own directory there: the
/// same inode, so the grant of `dir` covers it. What the view had below `/tmp` (the server's
/// TMPDIR usually holds the slots' directories, and a workspace may live there too) would be
/// hidden by that mount, so each of those mounts is bound again at its own path on top (in a
/// read-only skeleton), except the roots of every slot's directories; `dir` itself comes back at
/// its own path the same way, so every path the server computed still means the same here.
fn own_tmp(plan: &InitPlan, dir: &Path) -> Result<(), MountError> {
    use rustix::fs::{Mode, OFlags, open};
    let opened = |path: &Path| {
        step(
            "open for /tmp",
            open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()),
        )
    };
    let tmp = Path::new("/tmp");
    let mut again: Vec<(PathBuf, std::os::fd::OwnedFd)> = Vec::new();
    for mount_point in top_mounts_below(tmp) {
        if mount_point == plan.calls_tmp || mount_point == plan.private_root {
            continue;
        }
        again.push((mount_point.clone(), opened(&mount_point)?));
    }
    if dir.starts_with(tmp) {
        again.push((dir.to_path_buf(), opened(dir)?));
    }
    let own = opened(dir)?;
    let own_path = fd_path(&own);
    step("bind /tmp", mount_bind(&own_path, tmp))?;
    if Path::new("/var/tmp").is_dir() {
        step("bind /var/tmp", mount_bind(&own_path, "/var/tmp"))?;
    }
    // Grouped by their first name below /tmp: a mount there directly gets a mount point in the
    // slot's directory, which the mount covers; deeper ones get a read-only skeleton of their
    // own there, so the names that lead to them cannot be written into (a write there would
    // land in the call's TMPDIR and vanish with it, where outside the sandbox it fails).
    let mut tops: std::collections::BTreeMap<PathBuf, Vec<(PathBuf, std::os::fd::OwnedFd)>> =
        std::collections::BTreeMap::new();
    for (mount_point, fd) in again {
        let Some(first) = mount_point
            .strip_prefix(tmp)
            .ok()
            .and_then(|rest| rest.components().next())
        else {
            continue;
        };
        tops.entry(tmp.join(first))
            .or_default()
            .push((mount_point, fd));
    }
    for (top, mounts) in &tops {
        let direct = mounts.len() == 1 && mounts[0].0 == *top;
        if !direct {
            std::fs::create_dir_all(top).map_err(|source| MountError {
                step: "mount point below /tmp",
                source,
            })?;
            step(
                "skeleton below /tmp",
                mount(
                    "cordon-tmp",
                    top,
                    "tmpfs",
                    MountFlags::NOSUID | MountFlags::NODEV,
                    c"mode=0755,size=64k",
                ),
            )?;
        }
        for (mount_point, fd) in mounts {
            bind_again(mount_point, fd)?;
        }
        if !direct {
            step(
                "skeleton below /tmp read-only",
                rustix::mount::mount_remount(
                    top,
                    MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
                    c"",
                ),
            )?;
        }
    }
    Ok(())
}

/// Binds the open `fd` (a mount the view had below /tmp) at `mount_point` again, making the
/// mount point as a file or a directory like what is bound on it.
fn bind_again(mount_point: &Path, fd: &std::os::fd::OwnedFd) -> Result<(), MountError> {
    let is_dir = step("stat for /tmp", rustix::fs::fstat(fd))
        .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir())?;
    let made = if is_dir {
        std::fs::create_dir_all(mount_point)
    } else {
        mount_point
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::File::create(mount_point).map(drop))
    };
    made.map_err(|source| MountError {
        step: "mount point below /tmp",
        source,
    })?;
    step(
        "bind again below /tmp",
        rustix::mount::mount_bind_recursive(fd_path(fd), mount_point),
    )
}

/// `/proc/self/fd/N`: a path that names the open file itself, whatever now covers its name.
fn fd_path(fd: &std::os::fd::OwnedFd) -> PathBuf {
    use std::os::fd::AsRawFd;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Mount points strictly below `dir` that no other such mount point lies above, from this
/// process's mountinfo. Read as bytes: a mount point's name is whatever the workspace holds
/// (mountinfo escapes only space, tab, newline and backslash), UTF-8 or not.
fn top_mounts_below(dir: &Path) -> Vec<PathBuf> {
    use std::io::Read;
    let mut text = Vec::new();
    if let Ok(file) = std::fs::File::open("/proc/self/mountinfo") {
        let _ = file.take(4 << 20).read_to_end(&mut text);
    }
    let mut below: Vec<PathBuf> = text
        .split(|&b| b == b'\n')
        .filter_map(|line| line.split(|&b| b == b' ').nth(4))
        .map(|field| PathBuf::from(unescape_mountinfo(field)))
        .filter(|p| p.starts_with(dir) && p != dir)
        .collect();
    below.sort();
    below.dedup();
    let mut top: Vec<PathBuf> = Vec::new();
    for p in below {
        if !top.iter().any(|t| p.starts_with(t)) {
            top.push(p);
        }
    }
    top
}

/// mountinfo writes space, tab, newline and backslash in paths as `\\ooo`.
fn unescape_mountinfo(bytes: &[u8]) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(code) = bytes
                .get(i + 1..i + 4)
                .and_then(|o| std::str::from_utf8(o).ok())
                .and_then(|o| u8::from_str_radix(o, 8).ok())
        {
            out.push(code);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    std::ffi::OsString::from_vec(out)
}

/// A cgroup namespace rooted at the cgroups the slot has just joined.
fn cgroup_namespace() -> io::Result<()> {
    // SAFETY: unshare takes only flags; CLONE_NEWCGROUP changes no descriptor table or memory.
    if unsafe { libc::unshare(libc::CLONE_NEWCGROUP) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn mountinfo_paths_are_unescaped_as_bytes() {
        assert_eq!(
            unescape_mountinfo(b"/tmp/a\\040b\\134c\xff").as_bytes(),
            b"/tmp/a b\\c\xff"
        );
        // A malformed escape is kept as it stands.
        assert_eq!(unescape_mountinfo(b"/x\\9").as_bytes(), b"/x\\9");
    }
}
