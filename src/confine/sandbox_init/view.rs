//! The filesystem a confined process sees, built once by the sandbox init in its own mount
//! namespace: a read-only tmpfs root holding binds of exactly what the policy grants, a
//! minimal `/dev`, a `/proc` of the init's own PID namespace, `/sys/devices/system/cpu`, an
//! `/etc/hosts` that names the sandbox's hostname, and nothing else of the host (no `/tmp`,
//! `/run`, `/dev/shm`, homes, and so no host Unix socket to connect to). Each slot then mounts
//! its own `/proc`, `/tmp`, `/dev/shm`, devpts and cgroups on top (`slot_mounts`).
//!
//! Owns the mount calls. Runs in the init (single-threaded, before any confinement); the only
//! input is the server's [`InitPlan`].

use super::plan::{GitShadowPlan, InitPlan};
use rustix::mount::{
    MountFlags, MountPropagationFlags, UnmountFlags, mount, mount_bind_recursive, mount_change,
    unmount,
};
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};

/// The device nodes every view has, whatever the policy's Landlock grants say about them
/// (Landlock still decides who may open them).
const BASE_DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

#[derive(Debug, thiserror::Error)]
#[error("{step} {path}: {source}")]
pub(crate) struct ViewError {
    pub step: &'static str,
    pub path: PathBuf,
    pub source: io::Error,
}

fn at<T>(step: &'static str, path: &Path, r: rustix::io::Result<T>) -> Result<T, ViewError> {
    r.map_err(|e| ViewError {
        step,
        path: path.to_path_buf(),
        source: e.into(),
    })
}

fn io_at<T>(step: &'static str, path: &Path, r: io::Result<T>) -> Result<T, ViewError> {
    r.map_err(|source| ViewError {
        step,
        path: path.to_path_buf(),
        source,
    })
}

/// `path` (absolute, host) as a path below `root`.
fn inside(root: &Path, path: &Path) -> PathBuf {
    let mut out = root.to_path_buf();
    for c in path.components() {
        if let Component::Normal(n) = c {
            out.push(n);
        }
    }
    out
}

/// Makes the mount point for `src` at `dst`: a directory, or an empty file for a file.
fn make_mount_point(src: &Path, dst: &Path) -> Result<(), ViewError> {
    let is_dir = io_at("stat", src, std::fs::metadata(src))?.is_dir();
    if dst.symlink_metadata().is_ok() {
        return Ok(());
    }
    if is_dir {
        io_at("mkdir", dst, std::fs::create_dir_all(dst))
    } else {
        if let Some(parent) = dst.parent() {
            io_at("mkdir", parent, std::fs::create_dir_all(parent))?;
        }
        io_at("create", dst, std::fs::File::create(dst).map(drop))
    }
}

/// Mount attributes applied to a whole bound subtree in one call (`mount_setattr`).
fn set_attributes(path: &Path, read_only: bool) -> Result<(), ViewError> {
    use super::mount_attr::{self, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, Target};
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
    let c_path = io_at("path", path, c_path)?;
    let attrs =
        MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | if read_only { MOUNT_ATTR_RDONLY } else { 0 };
    io_at(
        "mount_setattr",
        path,
        mount_attr::set(Target::Path(&c_path), attrs, None),
    )
}

/// Binds host `src` at the same path below `root`. A symlink is re-made as a symlink (merged
/// /usr layouts: `/bin -> usr/bin`), so a link never drags its target into the view.
fn bind(
    root: &Path,
    src: &Path,
    read_only: bool,
    idmapped: Option<&std::os::fd::OwnedFd>,
) -> Result<(), ViewError> {
    let Ok(meta) = src.symlink_metadata() else {
        return Ok(()); // a policy lists /lib32 for the machines that have it
    };
    let dst = inside(root, src);
    if meta.file_type().is_symlink() {
        let target = io_at("readlink", src, std::fs::read_link(src))?;
        if let Some(parent) = dst.parent() {
            io_at("mkdir", parent, std::fs::create_dir_all(parent))?;
        }
        if dst.symlink_metadata().is_err() {
            io_at("symlink", &dst, symlink(&target, &dst))?;
        }
        return Ok(());
    }
    make_mount_point(src, &dst)?;
    if let Some(tree) = idmapped {
        // Already nosuid and nodev (`idmap::idmapped_tree`).
        return io_at("bind idmapped", src, super::idmap::attach(tree, &dst));
    }
    at("bind", src, mount_bind_recursive(src, &dst))?;
    set_attributes(&dst, read_only)
}

/// What building the view decided about the ids of confined processes.
#[derive(Debug, Default)]
pub(crate) struct Built {
    /// The plan's ids are in force: the read-write binds are idmapped to them and every slot
    /// is to map its root to them.
    pub calls_ids: Option<super::plan::CallIds>,
    /// Why the plan's ids could not be had (calls then stay host root, reported).
    pub calls_as_root: Option<String>,
}

/// The idmapped trees of the plan's read-write binds (by path), prepared before anything is
/// bound so that the view is idmapped wholly or not at all: one filesystem that cannot be
/// idmapped leaves every bind as it was, and the reason is reported. A bind whose root the
/// calls' uid owns already (the workspace owner's, where calls run as that owner) needs none.
fn idmapped_trees(
    plan: &InitPlan,
    proc: &Path,
) -> (
    std::collections::HashMap<PathBuf, std::os::fd::OwnedFd>,
    Built,
) {
    use std::os::unix::fs::MetadataExt;
    let mut trees = std::collections::HashMap::new();
    let Some(ids) = plan.calls_ids else {
        return (trees, Built::default());
    };
    if !ids.idmap {
        return (
            trees,
            Built {
                calls_ids: Some(ids),
                calls_as_root: None,
            },
        );
    }
    let userns = match super::idmap::namespace_for(&ids, proc) {
        Ok(fd) => fd,
        Err(e) => {
            return (
                trees,
                Built {
                    calls_ids: None,
                    calls_as_root: Some(format!("cannot make the id mapping's namespace: {e}")),
                },
            );
        }
    };
    let shadows = plan
        .git_shadow
        .iter()
        .chain(&plan.nested_git)
        .map(|git| &git.shadow);
    for path in plan.read_write.iter().chain(shadows) {
        let Ok(meta) = path.symlink_metadata() else {
            continue;
        };
        if meta.file_type().is_symlink() || meta.uid() == ids.uid {
            continue;
        }
        match super::idmap::idmapped_tree(path, &userns) {
            Ok(tree) => {
                trees.insert(path.clone(), tree);
            }
            Err(e) => {
                return (
                    std::collections::HashMap::new(),
                    Built {
                        calls_ids: None,
                        calls_as_root: Some(format!(
                            "{} cannot be idmapped ({e}; NFS and some FUSE filesystems \
                             cannot), so calls would not own their files as uid {}",
                            path.display(),
                            ids.uid
                        )),
                    },
                );
            }
        }
    }
    (
        trees,
        Built {
            calls_ids: Some(ids),
            calls_as_root: None,
        },
    )
}

/// Builds the view under `plan.new_root` and switches to it. Afterwards `/` is the read-only
/// tmpfs and the host's tree is unreachable.
pub(crate) fn build(plan: &InitPlan) -> Result<Built, ViewError> {
    let root = plan.new_root.as_path();
    // Nothing we mount may propagate back to the host's namespace.
    at(
        "make private",
        Path::new("/"),
        mount_change(
            "/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        ),
    )?;
    at(
        "mount tmpfs",
        root,
        mount(
            "cordon",
            root,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            c"mode=0755,size=4m",
        ),
    )?;

    // Parents before children, so a read-write workspace under a read-only /opt lands on top.
    let mut binds: Vec<(&PathBuf, bool)> = plan
        .read_only
        .iter()
        .map(|p| (p, true))
        .chain(plan.read_write.iter().map(|p| (p, false)))
        .filter(|(p, _)| !p.starts_with("/proc") && !p.starts_with("/dev"))
        .collect();
    binds.sort_by_key(|(p, _)| p.components().count());
    // The view's /proc, of this PID namespace, mounted first: the id mapping's maps are
    // written through it (the host's /proc would name other processes by these numbers).
    let proc_dir = inside(root, Path::new("/proc"));
    io_at("mkdir", &proc_dir, std::fs::create_dir_all(&proc_dir))?;
    at(
        "mount proc",
        &proc_dir,
        mount(
            "proc",
            &proc_dir,
            "proc",
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            c"",
        ),
    )?;
    let (idmapped, built) = idmapped_trees(plan, &proc_dir);
    for (path, read_only) in binds {
        let tree = (!read_only).then(|| idmapped.get(path)).flatten();
        bind(root, path, read_only, tree)?;
    }
    if let Some(git) = &plan.git_shadow {
        bind_git_shadow(root, git, idmapped.get(&git.shadow), None)?;
    }
    for git in &plan.nested_git {
        bind_git_shadow(root, git, idmapped.get(&git.shadow), Some(&plan.workspace))?;
    }
    drop(idmapped);
    // `.git` pinned as a mount point of itself, then its control files read-only on top.
    for path in &plan.pinned {
        if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            let dst = inside(root, path);
            at("pin", path, mount_bind_recursive(&dst, &dst))?;
        }
    }
    for path in &plan.protected {
        let Ok(meta) = path.symlink_metadata() else {
            continue;
        };
        if meta.file_type().is_symlink() {
            continue; // reported by the server; never followed out of the workspace
        }
        let dst = inside(root, path);
        at("protect", path, mount_bind_recursive(&dst, &dst))?;
        set_attributes(&dst, true)?;
    }
    build_dev(root, &plan.devices)?;
    slot_mount_points(root, plan)?;
    hosts_file(root, &plan.hostname)?;
    if let Some(bundle) = &plan.ca_bundle {
        ca_bundle(root, bundle)?;
    }

    // pivot_root(".", ".") stacks the old root under the new one; detaching it leaves only
    // the view (the runc idiom, no extra directory needed).
    io_at("chdir", root, std::env::set_current_dir(root))?;
    at("pivot_root", root, rustix::process::pivot_root(".", "."))?;
    at("detach old root", root, unmount(".", UnmountFlags::DETACH))?;
    io_at("chdir", Path::new("/"), std::env::set_current_dir("/"))?;
    at(
        "remount root read-only",
        Path::new("/"),
        rustix::mount::mount_remount(
            "/",
            MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV,
            c"",
        ),
    )?;
    Ok(built)
}

/// The shadow gitdir read-write at `<workspace>/.git`, over the operator's gitdir, and the
/// operator's gitdir read-only where the shadow's alternate points (see `crate::git`): no
/// confined process can write anything the operator's git reads. Runs after the workspace's
/// bind (the mount point is made through it when the workspace has no `.git` yet: an empty
/// directory git ignores). `nested_in`: the workspace, for a repository below its root, whose
/// `.git` the server made beneath its handle; nothing is made here below the root (a parent
/// replaced by a link would lead elsewhere), and the path must have no link in it.
fn bind_git_shadow(
    root: &Path,
    git: &GitShadowPlan,
    idmapped: Option<&std::os::fd::OwnedFd>,
    nested_in: Option<&Path>,
) -> Result<(), ViewError> {
    if let Some(operator) = &git.operator {
        let dst = inside(root, &git.operator_at);
        io_at("mkdir", &dst, std::fs::create_dir_all(&dst))?;
        at(
            "bind the operator's gitdir",
            operator,
            mount_bind_recursive(operator, &dst),
        )?;
        set_attributes(&dst, true)?;
    }
    let dst = inside(root, &git.at);
    // Made on the host's path, not through the view: the workspace may already be bound
    // idmapped there, and a directory made through that bind by the init (host uid 0, which
    // the mapping does not cover) is refused with EOVERFLOW. mkdir never follows a link.
    if nested_in.is_none() {
        match std::fs::create_dir(&git.at) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return io_at("mkdir", &git.at, Err(e)),
        }
    }
    if !dst.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        return io_at(
            "bind the git shadow",
            &git.at,
            Err(io::Error::other("`.git` is not a directory")),
        );
    }
    if let Some(workspace) = nested_in {
        // Below the root, every parent must be a directory, not a link: the bind must land
        // on this repository's `.git`, nowhere else.
        let rel = git.at.strip_prefix(workspace).unwrap_or(&git.at);
        let ws = io_at(
            "open the workspace",
            workspace,
            rustix::fs::open(
                inside(root, workspace),
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(io::Error::from),
        )?;
        io_at(
            "bind the git shadow",
            &git.at,
            rustix::fs::openat2(
                &ws,
                rel,
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
                rustix::fs::ResolveFlags::NO_SYMLINKS | rustix::fs::ResolveFlags::BENEATH,
            )
            .map(drop)
            .map_err(io::Error::from),
        )?;
    }
    if let Some(tree) = idmapped {
        // The shadow is the server's (its state directory): the calls' uid writes it through
        // the same id mapping as the workspace, so what a call's git makes there stays the
        // server's on disk.
        return io_at(
            "bind the git shadow idmapped",
            &git.shadow,
            super::idmap::attach(tree, &dst),
        );
    }
    at(
        "bind the git shadow",
        &git.shadow,
        mount_bind_recursive(&git.shadow, &dst),
    )?;
    set_attributes(&dst, false)
}

/// Where each slot mounts what is its own (`slot_mounts`): `/tmp`, `/var/tmp`, cgroup
/// hierarchies under `/sys/fs/cgroup`; and the one read-only part of `/sys` every view has,
/// `/sys/devices/system/cpu` (`lscpu`, `nproc` and thread pools read the CPU topology there).
fn slot_mount_points(root: &Path, plan: &InitPlan) -> Result<(), ViewError> {
    let tmp = inside(root, Path::new("/tmp"));
    io_at("mkdir", &tmp, std::fs::create_dir_all(&tmp))?;
    // Inside a read-only bind of the host's /var that lacks it, there is no /var/tmp to mount
    // on: then only /tmp is the call's.
    let _ = std::fs::create_dir_all(inside(root, Path::new("/var/tmp")));
    let cpu = Path::new("/sys/devices/system/cpu");
    if cpu.is_dir() {
        let dst = inside(root, cpu);
        io_at("mkdir", &dst, std::fs::create_dir_all(&dst))?;
        at("bind", cpu, rustix::mount::mount_bind(cpu, &dst))?;
        set_attributes(&dst, true)?;
    }
    for m in &plan.cgroup_mounts {
        let dst = inside(root, &Path::new("/sys/fs/cgroup").join(&m.subdir));
        io_at("mkdir", &dst, std::fs::create_dir_all(&dst))?;
    }
    Ok(())
}

/// The host's `/etc/hosts` plus a line for the sandbox's hostname, bound read-only over the
/// view's copy, so `hostname -f`, `gethostbyname(gethostname())` and Java's `getLocalHost`
/// resolve (127.0.1.1 is on the loopback of any network namespace, as Debian does it).
fn hosts_file(root: &Path, hostname: &str) -> Result<(), ViewError> {
    use std::io::Read;
    let view_hosts = inside(root, Path::new("/etc/hosts"));
    if !view_hosts.is_file() {
        return Ok(()); // the policy grants no /etc
    }
    let mut text = String::new();
    if let Ok(file) = std::fs::File::open("/etc/hosts") {
        let _ = file.take(64 * 1024).read_to_string(&mut text);
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!("127.0.1.1\t{hostname}\n"));
    let staged = inside(root, Path::new("/.cordon-hosts"));
    io_at("write", &staged, std::fs::write(&staged, text))?;
    at(
        "bind /etc/hosts",
        &view_hosts,
        rustix::mount::mount_bind(&staged, &view_hosts),
    )?;
    // The staged file stays: an unlinked file still in use keeps the root tmpfs from being
    // remounted read-only (EBUSY).
    set_attributes(&view_hosts, true)
}

/// The sandbox's CA bundle (the system one plus cordon's interception CA) bound read-only
/// over each distribution bundle path the view has as a regular file, so clients that read
/// the system bundle trust intercepted hosts unchanged. Staged in the root tmpfs like the
/// hosts file; a view without `/etc` gets nothing (and no client there reads a bundle).
fn ca_bundle(root: &Path, bundle: &str) -> Result<(), ViewError> {
    let staged = inside(root, Path::new("/.cordon-ca-bundle.pem"));
    let mut written = false;
    for path in crate::egress::tls::BUNDLE_PATHS {
        let dst = inside(root, Path::new(path));
        if !dst.symlink_metadata().is_ok_and(|m| m.is_file()) {
            continue; // absent, or a link (its target, if granted, is bound itself)
        }
        if !written {
            io_at("write", &staged, std::fs::write(&staged, bundle))?;
            written = true;
        }
        at(
            "bind CA bundle",
            &dst,
            rustix::mount::mount_bind(&staged, &dst),
        )?;
        set_attributes(&dst, true)?;
    }
    Ok(())
}

/// A private `/dev`: a tmpfs with binds of the base device nodes and the policy's, a fresh
/// devpts instance, and the usual links.
fn build_dev(root: &Path, devices: &[PathBuf]) -> Result<(), ViewError> {
    let dev = inside(root, Path::new("/dev"));
    io_at("mkdir", &dev, std::fs::create_dir_all(&dev))?;
    at(
        "mount /dev",
        &dev,
        mount(
            "cordon-dev",
            &dev,
            "tmpfs",
            MountFlags::NOSUID | MountFlags::NOEXEC,
            c"mode=0755,size=64k",
        ),
    )?;
    let mut nodes: Vec<PathBuf> = BASE_DEVICES
        .iter()
        .map(|n| Path::new("/dev").join(n))
        .collect();
    for d in devices {
        if d.starts_with("/dev") && d.parent() == Some(Path::new("/dev")) && !nodes.contains(d) {
            nodes.push(d.clone());
        }
    }
    for node in &nodes {
        if node.symlink_metadata().is_err() {
            continue;
        }
        let dst = inside(root, node);
        io_at("create", &dst, std::fs::File::create(&dst).map(drop))?;
        at("bind device", node, rustix::mount::mount_bind(node, &dst))?;
    }
    // Each slot mounts a private tmpfs here (see `slot_mounts`).
    let shm = dev.join("shm");
    io_at("mkdir", &shm, std::fs::create_dir_all(&shm))?;
    let pts = dev.join("pts");
    io_at("mkdir", &pts, std::fs::create_dir_all(&pts))?;
    // A pty is convenient (script, tests that want a terminal) but not essential: a kernel
    // without devpts in this namespace still gets a working view.
    let _ = mount(
        "devpts",
        &pts,
        "devpts",
        MountFlags::NOSUID | MountFlags::NOEXEC,
        c"newinstance,ptmxmode=0666,mode=0620",
    );
    for (name, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let link = dev.join(name);
        io_at("symlink", &link, symlink(target, &link))?;
    }
    at(
        "remount /dev read-only",
        &dev,
        rustix::mount::mount_remount(
            &dev,
            MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NOEXEC,
            c"",
        ),
    )
}
