//! A writable copy of the granted toolchains' shim directories for the calls.
//!
//! pyenv (and rbenv, asdf) keep one small script per installed program in `<root>/shims` and
//! regenerate them (`rehash`) after every install, under `set -e`: with the directory read-only,
//! as a granted toolchain is, every `pip install` through the shim fails after it succeeded.
//! So the server copies each shim directory once, when it sets up confinement, into the calls'
//! temporary root (through the view's idmapped bind the copy is the calls' own), and every slot
//! binds that copy over the shim directory in its own mount namespace. A rehash writes the copy:
//! the operator's shims never change. The copy is the workspace's calls' together, like their
//! home (`{workspace_home}`, whose `.local/bin` and `.cargo/bin` come first on PATH anyway), and
//! goes with the server. It is made once rather than per call: ~140 pyenv shims cost ~7 ms to
//! copy and remove (measured), which per call would be more than a call's own confinement.
//!
//! A one-shot command (`cordon exec`) has no server to share a copy with: making ~140 files on
//! ext4 and removing them again was half of its CPU (inode allocation scanning past recently
//! deleted inodes). Its one slot instead mounts a tmpfs over each shim directory, in its own
//! mount namespace, and copies the operator's shims onto it from a handle on the directory
//! below; the copy goes with the slot's namespace, with nothing to remove.
//!
//! Owns the copy (bounded: regular files and symlinks of the top level only, [`MAX_ENTRIES`]
//! of them, each at most [`MAX_FILE`] bytes; the source is the operator's own toolchain) and
//! the bind with its Landlock grant.

use crate::confine::landlock::{Grant, GrantKind};
use std::io;
use std::path::{Path, PathBuf};

/// Where in the calls' temporary root the copies live: `<root>/.cordon-shims/<n>` for the n-th
/// shim directory of the plan.
const COPIES: &str = ".cordon-shims";
/// Most entries copied from one shim directory (pyenv makes one per program: ~130 for three
/// Python versions).
pub(crate) const MAX_ENTRIES: usize = 4096;
/// Largest shim copied (they are scripts of a few hundred bytes).
pub(crate) const MAX_FILE: u64 = 1 << 20;

/// The copy of the `n`-th shim directory in `dir`.
fn copy_of(dir: &Path, n: usize) -> PathBuf {
    dir.join(COPIES).join(n.to_string())
}

/// Server side, on the host path of the calls' temporary root: copies each of `shims` into it.
/// A shim directory that cannot be copied is left out (its calls find it read-only, as before).
pub(crate) fn prepare(dir: &Path, shims: &[PathBuf]) {
    for (n, shim) in shims.iter().enumerate() {
        let copy = copy_of(dir, n);
        if let Err(e) = copy_dir(shim, &copy) {
            tracing::debug!("no writable copy of {}: {e}", shim.display());
            let _ = std::fs::remove_dir_all(&copy);
        }
    }
}

fn copy_dir(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(to)?;
    for entry in std::fs::read_dir(from)?.take(MAX_ENTRIES) {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else if kind.is_file() && entry.metadata()?.len() <= MAX_FILE {
            std::fs::copy(entry.path(), &target)?;
            let mode = entry.metadata()?.permissions().mode() & 0o777;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))?;
        }
    }
    Ok(())
}

/// Slot side, in its own mount namespace, with the calls' temporary root `dir` still in view:
/// binds each copy over its shim directory and returns the grants that make it writable. A
/// missing copy or a failed bind leaves that directory read-only.
pub(crate) fn bind(dir: &Path, shims: &[PathBuf]) -> Vec<Grant> {
    let mut grants = Vec::new();
    for (n, shim) in shims.iter().enumerate() {
        let copy = copy_of(dir, n);
        if !copy.is_dir() || !shim.is_dir() {
            continue;
        }
        if rustix::mount::mount_bind(&copy, shim).is_ok() {
            grants.push(Grant {
                path: shim.clone(),
                access: GrantKind::ReadWrite,
            });
        }
    }
    grants
}

/// Slot side, one-shot: mounts a tmpfs over each shim directory and copies the directory's
/// entries onto it (bounded as [`prepare`]), returning the grants that make them writable. A
/// directory whose copy fails is unmounted again: its calls find it read-only, as before.
pub(crate) fn onto_tmpfs(shims: &[PathBuf]) -> Vec<Grant> {
    let mut grants = Vec::new();
    for shim in shims {
        let Ok(below) = cap_std::fs::Dir::open_ambient_dir(shim, cap_std::ambient_authority())
        else {
            continue;
        };
        let options = format!(
            "mode=0755,size={},nr_inodes={}",
            MAX_ENTRIES as u64 * 4096 + (4 << 20),
            MAX_ENTRIES + 16
        );
        let Ok(options) = std::ffi::CString::new(options) else {
            continue;
        };
        let flags = rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV;
        if rustix::mount::mount("shims", shim, "tmpfs", flags, options.as_c_str()).is_err() {
            continue;
        }
        let copied = cap_std::fs::Dir::open_ambient_dir(shim, cap_std::ambient_authority())
            .and_then(|onto| copy_entries(&below, &onto));
        match copied {
            Ok(()) => grants.push(Grant {
                path: shim.clone(),
                access: GrantKind::ReadWrite,
            }),
            Err(e) => {
                tracing::debug!("no writable copy of {}: {e}", shim.display());
                let _ = rustix::mount::unmount(shim, rustix::mount::UnmountFlags::DETACH);
            }
        }
    }
    grants
}

/// Copies `from`'s regular files and symlinks (the top level, bounded) into `to`.
fn copy_entries(from: &cap_std::fs::Dir, to: &cap_std::fs::Dir) -> io::Result<()> {
    use cap_std::fs::PermissionsExt;
    for entry in from.entries()?.take(MAX_ENTRIES) {
        let entry = entry?;
        let kind = entry.file_type()?;
        let name = entry.file_name();
        if kind.is_symlink() {
            to.symlink(from.read_link(&name)?, &name)?;
        } else if kind.is_file() {
            let meta = entry.metadata()?;
            if meta.len() > MAX_FILE {
                continue;
            }
            to.write(&name, from.read(&name)?)?;
            to.set_permissions(
                &name,
                cap_std::fs::Permissions::from_mode(meta.permissions().mode() & 0o777),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_keeps_files_modes_and_links_and_leaves_directories_out() {
        use std::os::unix::fs::PermissionsExt;
        let src = tempfile::tempdir().unwrap();
        std::fs::write(
            src.path().join("python3"),
            "#!/bin/sh\nexec pyenv exec \"$0\"\n",
        )
        .unwrap();
        std::fs::set_permissions(
            src.path().join("python3"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("python3", src.path().join("python")).unwrap();
        std::fs::create_dir(src.path().join("nested")).unwrap();
        let call = tempfile::tempdir().unwrap();
        prepare(call.path(), &[src.path().to_path_buf()]);
        let copy = copy_of(call.path(), 0);
        let meta = std::fs::metadata(copy.join("python3")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        assert_eq!(
            std::fs::read_link(copy.join("python")).unwrap(),
            Path::new("python3")
        );
        assert!(!copy.join("nested").exists());
    }
}
