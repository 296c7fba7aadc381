//! The Landlock ruleset: which files a confined call may read, write or execute, and which TCP
//! ports it may use.
//!
//! Built once per policy in the parent and kept as an fd; children only call
//! `landlock_restrict_self` on it (see `child`). Landlock can only *grant*, so a granted
//! directory that contains a denied path is expanded here into its children minus the denied
//! ones. TCP ports are restricted only where the host's network namespace is shared
//! ([`TcpPorts`]). Nothing in this module runs in the child.

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// How far below a granted directory we descend to carve out denied paths. The default
/// policy needs 2 (`/etc/ssh/ssh_host_*_key`); the bound keeps a bad policy from walking /usr.
const MAX_EXPANSION_DEPTH: usize = 6;

#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    #[error("Landlock ruleset: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error("Landlock: cannot open {path} for a rule: {source}")]
    PathFd {
        path: PathBuf,
        source: landlock::PathFdError,
    },
    #[error("Landlock: cannot open {path} for a rule: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("Landlock is not supported by this kernel")]
    Unsupported,
}

/// What the ruleset grants, in terms a reviewer can check against the policy.
#[derive(Debug, Clone)]
pub struct LandlockSpec<'a> {
    pub read_exec: &'a [PathBuf],
    pub read_write: &'a [PathBuf],
    pub read_only: &'a [PathBuf],
    pub devices: &'a [PathBuf],
    pub deny: &'a [PathBuf],
    pub tcp_connect: &'a TcpPorts,
    pub tcp_bind: &'a TcpPorts,
}

/// Which TCP ports one direction (connect or bind) may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TcpPorts {
    /// Only these (port 0 in a bind rule: any port the kernel picks). Where the host's network
    /// namespace is shared, a port rule is what stands between a command and the host's and
    /// the internet's services.
    Only(Vec<u16>),
    /// Not restricted by Landlock: the sandbox has its own network namespace whose only
    /// interface is `lo` (plus, under the proxy, the proxy's listener), so every port reaches
    /// only what the call itself started there.
    Any,
}

impl TcpPorts {
    /// No port at all.
    pub const NONE: TcpPorts = TcpPorts::Only(Vec::new());

    pub fn is_restricted(&self) -> bool {
        matches!(self, TcpPorts::Only(_))
    }

    fn ports(&self) -> &[u16] {
        match self {
            TcpPorts::Only(ports) => ports,
            TcpPorts::Any => &[],
        }
    }
}

/// One grant as actually written into the ruleset (after deny expansion).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub path: PathBuf,
    pub access: GrantKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantKind {
    ReadExec,
    /// Only listing the directory: it contains a denied entry, its other children are granted
    /// one by one.
    ListOnly,
    ReadWrite,
    Device,
}

/// Builds the ruleset. `best_effort` is the operator's explicit degraded mode: rights this
/// kernel lacks are dropped instead of failing.
pub(crate) fn build_ruleset(
    spec: &LandlockSpec<'_>,
    best_effort: bool,
) -> Result<OwnedFd, LandlockError> {
    ruleset_of_grants(
        &expand_grants(spec),
        spec.tcp_connect,
        spec.tcp_bind,
        best_effort,
    )
}

/// Builds a ruleset from grants already expanded (the sandbox init expands the policy's once
/// and each slot opens them anew inside its own mount namespace, plus its own directories).
pub(crate) fn ruleset_of_grants(
    grants: &[Grant],
    tcp_connect: &TcpPorts,
    tcp_bind: &TcpPorts,
    best_effort: bool,
) -> Result<OwnedFd, LandlockError> {
    let opened = open_grants(grants)?;
    let all: Vec<&OpenedGrant> = opened.iter().collect();
    ruleset_of_opened(&all, tcp_connect, tcp_bind, best_effort)
}

/// A grant whose path is already open: a rule names an inode, so a descriptor opened once
/// serves every ruleset built from it (the sandbox init opens the policy's grants once and each
/// slot reuses them, opening anew only what its own mounts replace).
#[derive(Debug)]
pub(crate) struct OpenedGrant {
    pub path: PathBuf,
    pub access: GrantKind,
    pub is_dir: bool,
    pub fd: OwnedFd,
}

/// Opens each grant's path (`O_PATH`, close-on-exec, following links as a rule does).
pub(crate) fn open_grants(grants: &[Grant]) -> Result<Vec<OpenedGrant>, LandlockError> {
    use rustix::fs::{Mode, OFlags, fstat, open};
    grants
        .iter()
        .map(|grant| {
            let failed = |e: rustix::io::Errno| LandlockError::Open {
                path: grant.path.clone(),
                source: e.into(),
            };
            let fd =
                open(&grant.path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).map_err(failed)?;
            let is_dir =
                rustix::fs::FileType::from_raw_mode(fstat(&fd).map_err(failed)?.st_mode).is_dir();
            Ok(OpenedGrant {
                path: grant.path.clone(),
                access: grant.access,
                is_dir,
                fd,
            })
        })
        .collect()
}

/// Builds a ruleset from grants already open (see [`OpenedGrant`]).
pub(crate) fn ruleset_of_opened(
    grants: &[&OpenedGrant],
    tcp_connect: &TcpPorts,
    tcp_bind: &TcpPorts,
    best_effort: bool,
) -> Result<OwnedFd, LandlockError> {
    let abi = ABI::V6;
    let level = if best_effort {
        CompatLevel::BestEffort
    } else {
        CompatLevel::HardRequirement
    };
    let read = AccessFs::from_read(abi);
    let read_file = AccessFs::ReadFile | AccessFs::Execute;
    // Block/char device creation needs CAP_MKNOD, which children never have; not granting it
    // keeps the ruleset honest about what the workspace is for.
    let write = AccessFs::from_all(abi) & !(AccessFs::MakeBlock | AccessFs::MakeChar);
    let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;

    // A direction Landlock does not handle is not restricted at all (TcpPorts::Any); a handled
    // one allows exactly the ports given rules below.
    let mut net = BitFlags::<AccessNet>::empty();
    if tcp_connect.is_restricted() {
        net |= AccessNet::ConnectTcp;
    }
    if tcp_bind.is_restricted() {
        net |= AccessNet::BindTcp;
    }
    let mut ruleset = Ruleset::default()
        .set_compatibility(level)
        .handle_access(AccessFs::from_all(abi))?;
    if !net.is_empty() {
        ruleset = ruleset.handle_access(net)?;
    }
    let mut created = ruleset
        .scope(Scope::AbstractUnixSocket | Scope::Signal)?
        .create()?;

    for grant in grants {
        let access = match (grant.access, grant.is_dir) {
            (GrantKind::ReadExec, true) => read,
            (GrantKind::ReadExec, false) => read_file,
            (GrantKind::ListOnly, _) => AccessFs::ReadDir.into(),
            (GrantKind::ReadWrite, true) => write,
            (GrantKind::ReadWrite, false) => write & AccessFs::from_file(abi),
            (GrantKind::Device, _) => device,
        };
        created = created.add_rule(PathBeneath::new(grant.fd.as_fd(), access))?;
    }
    for &port in tcp_connect.ports() {
        created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp))?;
    }
    for &port in tcp_bind.ports() {
        created = created.add_rule(NetPort::new(port, AccessNet::BindTcp))?;
    }
    Option::<OwnedFd>::from(created).ok_or(LandlockError::Unsupported)
}

/// A ruleset that restricts no file access and only scopes signals and abstract Unix sockets
/// to its own domain: put on a job's main process by its slot, it keeps the job from signalling
/// the slot (its PID 1) or reaching its abstract sockets, which share the slot's domain otherwise.
pub(crate) fn scope_only_ruleset(best_effort: bool) -> Result<OwnedFd, LandlockError> {
    let level = if best_effort {
        CompatLevel::BestEffort
    } else {
        CompatLevel::HardRequirement
    };
    // Any layer denies moving a file to another directory unless it grants `Refer` there
    // (even one that handles nothing else), so this one grants it everywhere: the slot's own
    // layer still decides what may be moved where.
    let root = PathFd::new("/").map_err(|source| LandlockError::PathFd {
        path: PathBuf::from("/"),
        source,
    })?;
    let created = Ruleset::default()
        .set_compatibility(level)
        .handle_access(AccessFs::Refer)?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)?
        .create()?
        .add_rule(PathBeneath::new(root, AccessFs::Refer))?;
    Option::<OwnedFd>::from(created).ok_or(LandlockError::Unsupported)
}

/// The grants after carving denied paths out of granted directories. Paths that do not exist
/// on this machine are skipped (a policy lists /lib32 for the machines that have it).
pub(crate) fn expand_grants(spec: &LandlockSpec<'_>) -> Vec<Grant> {
    let deny: Vec<DenyPattern> = spec.deny.iter().map(|p| DenyPattern::new(p)).collect();
    let mut out = Vec::new();
    for path in spec.read_exec.iter().chain(spec.read_only) {
        expand(path, GrantKind::ReadExec, &deny, 0, &mut out);
    }
    for path in spec.read_write {
        expand(path, GrantKind::ReadWrite, &deny, 0, &mut out);
    }
    for path in spec.devices {
        if path.exists() && !deny.iter().any(|d| d.matches(path)) {
            out.push(Grant {
                path: path.clone(),
                access: GrantKind::Device,
            });
        }
    }
    out
}

fn expand(path: &Path, kind: GrantKind, deny: &[DenyPattern], depth: usize, out: &mut Vec<Grant>) {
    if !path.exists() || deny.iter().any(|d| d.matches(path)) {
        return;
    }
    let carve = path.is_dir() && deny.iter().any(|d| d.is_strictly_beneath(path));
    if !carve || depth >= MAX_EXPANSION_DEPTH {
        out.push(Grant {
            path: path.to_path_buf(),
            access: kind,
        });
        return;
    }
    out.push(Grant {
        path: path.to_path_buf(),
        access: GrantKind::ListOnly,
    });
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        // A symlink is reached through its target's own ancestors; granting "the link" would
        // grant the target, which may be anything (even a denied file), so links are skipped.
        if entry.file_type().map(|t| t.is_symlink()).unwrap_or(true) {
            continue;
        }
        expand(&entry.path(), kind, deny, depth + 1, out);
    }
}

/// A denied path; `*` in the last component matches any run of characters there (the
/// parent is compared as written, so a star never reaches another directory).
struct DenyPattern {
    parent: PathBuf,
    last: String,
}

impl DenyPattern {
    fn new(path: &Path) -> Self {
        Self {
            parent: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            last: path
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }

    fn matches(&self, path: &Path) -> bool {
        if path.parent() != Some(self.parent.as_path()) {
            return false;
        }
        let name = path
            .file_name()
            .map(|s| s.to_string_lossy())
            .unwrap_or_default();
        crate::glob::matches(&self.last, &name)
    }

    fn is_strictly_beneath(&self, dir: &Path) -> bool {
        self.parent.starts_with(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_host_keys_only() {
        let deny = DenyPattern::new(Path::new("/etc/ssh/ssh_host_*_key"));
        assert!(deny.matches(Path::new("/etc/ssh/ssh_host_ed25519_key")));
        assert!(!deny.matches(Path::new("/etc/ssh/ssh_host_ed25519_key.pub")));
        // The star stays within the last component: the parent is compared as written.
        assert!(!deny.matches(Path::new("/etc/ssh/x/ssh_host_rsa_key")));
        let deny = DenyPattern::new(Path::new("/etc/shadow"));
        assert!(deny.matches(Path::new("/etc/shadow")));
        assert!(!deny.matches(Path::new("/etc/shadow-")));
    }

    #[test]
    fn granted_dir_with_denied_child_is_expanded() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("etc/ssh")).unwrap();
        for f in [
            "etc/passwd",
            "etc/shadow",
            "etc/ssh/ssh_host_rsa_key",
            "etc/ssh/sshd_config",
        ] {
            std::fs::write(r.join(f), "x").unwrap();
        }
        let read = vec![r.join("etc")];
        let deny = vec![r.join("etc/shadow"), r.join("etc/ssh/ssh_host_*_key")];
        let grants = expand_grants(&LandlockSpec {
            read_exec: &read,
            read_write: &[],
            read_only: &[],
            devices: &[],
            deny: &deny,
            tcp_connect: &TcpPorts::NONE,
            tcp_bind: &TcpPorts::NONE,
        });
        let has =
            |p: &str, k: GrantKind| grants.iter().any(|g| g.path == r.join(p) && g.access == k);
        assert!(has("etc", GrantKind::ListOnly));
        assert!(has("etc/passwd", GrantKind::ReadExec));
        assert!(has("etc/ssh", GrantKind::ListOnly));
        assert!(has("etc/ssh/sshd_config", GrantKind::ReadExec));
        assert!(!grants.iter().any(|g| g.path == r.join("etc/shadow")));
        assert!(
            !grants
                .iter()
                .any(|g| g.path == r.join("etc/ssh/ssh_host_rsa_key"))
        );
    }
}
