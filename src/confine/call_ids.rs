//! Which host ids confined processes run as when cordon runs as root.
//!
//! Never host uid 0: a call that is host root shares every per-user kernel limit with the
//! host's root (one call taking every inotify instance broke editors and other servers' file
//! watchers), and owns every root-owned file its view shows. So, where cordon is root, each
//! slot of the sandbox init maps its own root to an unprivileged host uid (`sandbox_init::idmap`):
//! - the policy's `[sandbox] uid` (and `uid_count`) when it names one;
//! - otherwise the workspace owner's uid when that is not root (one id: the call is then the
//!   user whose files these are, as if that user ran cordon);
//! - otherwise [`DEFAULT_UID`]`..+65536`, a range no account of an ordinary host uses, so
//!   that the call's own ids (`chown` to a build user, `tar` keeping owners) work as for root.
//!
//! Owns that decision and nothing else. Where cordon is not root, calls are the server's own
//! uid (the sandbox init's user namespace maps it to itself), and each slot's namespace maps
//! the same: only its per-namespace limits are new.

use super::sandbox_init::plan::CallIds;
use cap_std::fs::MetadataExt;

/// The first host uid (and gid) of the default range: 2,000,000,000, far above the ids
/// distributions hand to accounts (below 65,536) and the subordinate ranges `useradd` gives
/// for rootless containers (from 100,000 up, 65,536 each).
pub(crate) const DEFAULT_UID: u32 = 2_000_000_000;
/// How many ids the default range maps: all that an ordinary system's files carry.
pub(crate) const DEFAULT_COUNT: u32 = 65_536;

/// The policy's `[sandbox] uid`/`uid_count`, as resolved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallIdsPolicy {
    pub uid: Option<u32>,
    pub count: Option<u32>,
}

/// The ids calls run as in their slots' own user namespaces. Where cordon is not root, the
/// server's own (the init's namespace maps them already; the slot's adds its own limits).
pub(crate) fn decide(
    is_root: bool,
    policy: CallIdsPolicy,
    workspace: &cap_std::fs::Dir,
) -> Option<CallIds> {
    if !is_root {
        // Each slot still gets a namespace of its own, mapped to the same ids as the init's,
        // so that its per-namespace limits bound what one call takes of the user's budget.
        let (uid, gid) = (
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        );
        return Some(CallIds {
            inside: uid,
            uid,
            gid,
            count: 1,
            idmap: false,
        });
    }
    if let Some(uid) = policy.uid {
        return Some(CallIds {
            inside: 0,
            uid,
            gid: uid,
            count: policy.count.unwrap_or(DEFAULT_COUNT),
            idmap: true,
        });
    }
    let owner = workspace
        .dir_metadata()
        .ok()
        .map(|m| (m.uid(), m.gid()))
        .filter(|&(uid, _)| uid != 0);
    Some(match owner {
        Some((uid, gid)) => CallIds {
            inside: 0,
            idmap: true,
            uid,
            // A workspace of a user in root's group must not hand the calls that group.
            gid: if gid == 0 { DEFAULT_UID } else { gid },
            count: 1,
        },
        None => CallIds {
            inside: 0,
            idmap: true,
            uid: DEFAULT_UID,
            gid: DEFAULT_UID,
            count: policy.count.unwrap_or(DEFAULT_COUNT),
        },
    })
}
