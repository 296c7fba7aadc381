//! What the sandbox init builds, decided once by the server: the host paths of its view, the
//! namespaces, the Landlock grants and the seccomp programs.
//!
//! Owns the plan as data (serialised to the init's stdin, so any size is fine) and nothing
//! else: building the view is `view`, applying it is `init`. Paths are absolute host paths;
//! the view mounts each at the same path, so every path the server computes (workspace, call
//! temporary directories, the cordon binary) means the same inside.
//!
//! Paths that come from the workspace's content (`pinned`, `protected`) travel as bytes: a
//! directory a confined process named `$'\377'…` must be bound like any other, and JSON
//! strings cannot carry a name that is not UTF-8.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct InitPlan {
    pub version: u32,
    /// An empty directory the init mounts its new root on (made and removed by the server).
    pub new_root: PathBuf,
    /// Read-only, nosuid, nodev (system paths the policy grants, the cordon binary).
    pub read_only: Vec<PathBuf>,
    /// Read-write, nosuid, nodev (workspace, temporary roots, the policy's `read_write`).
    pub read_write: Vec<PathBuf>,
    /// The workspace root (cwd of every job is resolved beneath it).
    pub workspace: PathBuf,
    /// Directories made mount points of themselves, so they cannot be renamed or replaced
    /// (`.git`): rename(2) of a mount point fails with EBUSY.
    #[serde(with = "path_bytes")]
    pub pinned: Vec<PathBuf>,
    /// Existing protected entries, bound read-only over themselves (after `pinned`).
    #[serde(with = "path_bytes")]
    pub protected: Vec<PathBuf>,
    /// Device nodes bound into the private `/dev` (which also gets `pts`, `ptmx`, `fd`).
    pub devices: Vec<PathBuf>,
    /// A network namespace with only `lo` (the policy has no network, or uses the proxy).
    pub isolate_network: bool,
    /// With `isolate_network`: a TCP listener on this port of the namespace's 127.0.0.1,
    /// made by PID 1 before it confines itself and sent to the server with `Ready` (the
    /// egress proxy accepts on it; a descriptor works across namespaces).
    #[serde(default)]
    pub proxy_listener: Option<u16>,
    /// With `isolate_network`: join the network namespace passed at [`super::init::NETNS_FD`]
    /// (the first init's, so jobs' servers and the proxy's listener stay reachable when the
    /// view is rebuilt) instead of making a new one; its loopback is up already and no proxy
    /// listener is made.
    #[serde(default)]
    pub join_network: bool,
    /// The CA bundle (PEM, certificates only) the view binds read-only over each of
    /// `egress::tls::BUNDLE_PATHS` that it has: the system bundle plus cordon's interception
    /// CA, when the proxy intercepts hosts.
    #[serde(default)]
    pub ca_bundle: Option<String>,
    /// `Some((uid, gid))` when cordon is not root: a user namespace mapping them to themselves.
    pub user_namespace: Option<(u32, u32)>,
    /// When cordon is root: the host ids confined processes run as instead of root (each
    /// slot's own user namespace maps its ids `0..count` to them), and through which the
    /// view's read-write binds are idmapped (`idmap`). None: calls are host root (a policy
    /// that asks for it cannot be had here, see `confine::call_ids`).
    #[serde(default)]
    pub calls_ids: Option<CallIds>,
    pub hostname: String,
    /// The login uid the launcher takes before it forks PID 1, so that every process of the
    /// init has an audit context where cordon narrowed audit to its own processes
    /// (`audit::confined_loginuid`). None: the launcher keeps the server's.
    #[serde(default)]
    pub loginuid: Option<u32>,
    pub landlock: Option<LandlockPlan>,
    /// BPF programs, each instruction as (code, jt, jf, k); installed in order, last step.
    pub seccomp: Vec<Vec<(u16, u8, u8, u32)>>,
    pub drop_capabilities: bool,
    /// Size of each slot's private `/dev/shm` (a tmpfs of its own mount namespace; its pages
    /// are charged to the call's memory cgroup, and it is gone with the call).
    #[serde(default)]
    pub shm_bytes: u64,
    /// The cgroup hierarchies each slot mounts read-only at `/sys/fs/cgroup`, rooted by a
    /// cgroup namespace at the slot's own cgroups (so JVMs and Node size their heaps from the
    /// call's limits). Empty without cgroups.
    #[serde(default)]
    pub cgroup_mounts: Vec<CgroupMount>,
    /// Where the server makes each call slot's own directory (its TMPDIR). The root itself is
    /// never granted to a slot.
    #[serde(default)]
    pub calls_tmp: PathBuf,
    /// Where the long-lived workers' private directories are; never granted as a whole either.
    #[serde(default)]
    pub private_root: PathBuf,
    /// Toolchain shim directories (`~/.pyenv/shims`) each call slot gets a writable copy of,
    /// bound over them, so a rehash succeeds and changes only the call's copy (`shims`).
    #[serde(default)]
    pub writable_shims: Vec<PathBuf>,
    /// One-shot (`cordon exec`): the server made no shared copy; the slot copies each shim
    /// directory onto a tmpfs of its own instead (`shims::onto_tmpfs`).
    #[serde(default)]
    pub shims_per_slot: bool,
    /// The workspace's shadow gitdir (see `crate::git`): bound read-write at
    /// `<workspace>/.git`, over the operator's gitdir, which is bound read-only elsewhere.
    #[serde(default)]
    pub git_shadow: Option<GitShadowPlan>,
    /// The shadow of each repository below the root (`crate::git::Repositories`), bound the
    /// same way at `<dir>/.git`, whose directory the server made (the init makes none there).
    #[serde(default)]
    pub nested_git: Vec<GitShadowPlan>,
}

/// Where the view binds the shadow gitdir and the operator's gitdir.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct GitShadowPlan {
    /// Where the repository is in the workspace (empty for the root's). Like every path
    /// below the workspace here, it travels as bytes: a repository a call makes may be in a
    /// directory whose name is not UTF-8.
    #[serde(default, with = "path_byte")]
    pub rel: PathBuf,
    /// The shadow (host path, in cordon's private state), bound read-write at `at`.
    pub shadow: PathBuf,
    /// `<workspace>/.git`, or `<dir>/.git` (`<dir>` itself for a bare repository).
    #[serde(with = "path_byte")]
    pub at: PathBuf,
    /// The operator's gitdir when there is one, bound read-only at `operator_at` (the
    /// shadow's alternate object store points into it).
    #[serde(with = "opt_path_byte")]
    pub operator: Option<PathBuf>,
    pub operator_at: PathBuf,
}

/// The ids a confined process runs as: ids `inside..inside + count` of each slot's own user
/// namespace are `uid..uid + count` and `gid..gid + count` of the init's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CallIds {
    /// 0 where cordon is root (the call is its namespace's root, as it was before), the
    /// server's own uid where it is not (the mapping is the identity, as the init's is).
    pub inside: u32,
    pub uid: u32,
    pub gid: u32,
    pub count: u32,
    /// The read-write binds are idmapped to these ids (cordon is root: calls must own the
    /// root-owned workspace's files). Without root there is nothing to map: the binds are the
    /// server's uid's already, and an idmapped mount would need root.
    pub idmap: bool,
}

/// One cgroup hierarchy as a slot mounts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupMount {
    /// `cgroup2`, or `cgroup` (v1) with `options` naming its controllers (`memory`, `cpu,cpuacct`).
    pub fstype: String,
    pub options: String,
    /// Below `/sys/fs/cgroup` ("" for the v2 root, `memory` for a v1 controller).
    pub subdir: String,
}

/// The policy's Landlock grants. Each slot builds its layer from them plus its own directory
/// (see `wire::SlotLayer`) and what its mount namespace holds (`/proc`, `/dev/shm`,
/// `/dev/pts`, `/sys` subsets); the roots holding every slot's directory (`InitPlan::calls_tmp`,
/// `InitPlan::private_root`) are never granted
/// as wholes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LandlockPlan {
    pub read_exec: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    pub read_only: Vec<PathBuf>,
    pub devices: Vec<PathBuf>,
    pub deny: Vec<PathBuf>,
    /// `Any` in the sandbox's own network namespace (see `TcpPorts`).
    pub tcp_connect: crate::confine::landlock::TcpPorts,
    pub tcp_bind: crate::confine::landlock::TcpPorts,
    pub best_effort: bool,
    /// `landlock_restrict_self` flags of every layer a slot puts on (audit logging of
    /// denials after exec when the server reads them, see `confine::audit`).
    #[serde(default)]
    pub restrict_flags: u32,
}

/// A list of paths as lists of bytes (any name the kernel allows, UTF-8 or not).
mod path_bytes {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::PathBuf;

    pub(super) fn serialize<S: Serializer>(paths: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<&[u8]> = paths.iter().map(|p| p.as_os_str().as_bytes()).collect();
        bytes.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
        let bytes: Vec<Vec<u8>> = Vec::deserialize(d)?;
        Ok(bytes
            .into_iter()
            .map(|b| PathBuf::from(OsString::from_vec(b)))
            .collect())
    }
}

/// One path as bytes (see [`path_bytes`]).
mod path_byte {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::{Path, PathBuf};

    pub(super) fn serialize<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
        path.as_os_str().as_bytes().serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        Ok(PathBuf::from(OsString::from_vec(Vec::deserialize(d)?)))
    }
}

/// A path that may be absent, as bytes (see [`path_bytes`]).
mod opt_path_byte {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::PathBuf;

    pub(super) fn serialize<S: Serializer>(
        path: &Option<PathBuf>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        path.as_ref().map(|p| p.as_os_str().as_bytes()).serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<PathBuf>, D::Error> {
        let bytes: Option<Vec<u8>> = Option::deserialize(d)?;
        Ok(bytes.map(|b| PathBuf::from(OsString::from_vec(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn a_nested_repository_whose_name_is_not_utf8_round_trips() {
        let rel = PathBuf::from(std::ffi::OsStr::from_bytes(b"lib-\xff"));
        let plan = GitShadowPlan {
            rel: rel.clone(),
            shadow: PathBuf::from("/state/git"),
            at: PathBuf::from("/w").join(&rel).join(".git"),
            operator: Some(PathBuf::from("/w").join(&rel).join(".git")),
            operator_at: PathBuf::from("/state/operator"),
        };
        let text = serde_json::to_string(&plan).expect("serializes");
        let back: GitShadowPlan = serde_json::from_str(&text).expect("deserializes");
        assert_eq!(back.rel, rel);
        assert_eq!(back.at, plan.at);
        assert_eq!(back.operator, plan.operator);
    }

    #[test]
    fn protected_paths_that_are_not_utf8_round_trip() {
        let mut name = b"/w/.git/modules/\xff".to_vec();
        name.extend(std::iter::repeat_n(b'a', 240));
        name.extend(b"/hooks");
        let odd = PathBuf::from(std::ffi::OsStr::from_bytes(&name));
        let plan = InitPlan {
            version: 0,
            new_root: PathBuf::new(),
            read_only: Vec::new(),
            read_write: Vec::new(),
            workspace: PathBuf::from("/w"),
            pinned: vec![PathBuf::from("/w/.git"), odd.clone()],
            protected: vec![odd.clone()],
            devices: Vec::new(),
            isolate_network: false,
            proxy_listener: None,
            join_network: false,
            ca_bundle: None,
            user_namespace: None,
            calls_ids: None,
            hostname: "cordon".into(),
            loginuid: None,
            landlock: None,
            seccomp: Vec::new(),
            drop_capabilities: true,
            shm_bytes: 0,
            cgroup_mounts: Vec::new(),
            calls_tmp: PathBuf::new(),
            private_root: PathBuf::new(),
            writable_shims: Vec::new(),
            shims_per_slot: false,
            git_shadow: None,
            nested_git: Vec::new(),
        };
        let json = serde_json::to_vec(&plan).expect("serialises");
        let back: InitPlan = serde_json::from_slice(&json).expect("deserialises");
        assert_eq!(back.protected, vec![odd.clone()]);
        assert_eq!(back.pinned[1], odd);
    }
}
