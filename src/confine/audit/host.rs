//! What cordon changes of the host's audit state, and how it is put back.
//!
//! Landlock writes its denial records only while the kernel's audit is on. Turned on with no
//! rule, audit gives every task forked from then on an audit context, and every system call
//! of every process on the host then takes the kernel's audit path: measured here, 11% more
//! per `getppid` for any process (BENCHMARKS.md, "Audit's host-wide cost"); and once audit has
//! been on, turning it off again leaves new tasks a context that only checks the switch (12%
//! more than with none). So when cordon is the one that turns audit on (it was off: nobody on
//! the host reads it), it adds one task rule, `never,task -F auid!=CORDON_LOGINUID`, and its
//! confined processes carry that login uid ([`CORDON_LOGINUID`]): the sandbox init's launcher
//! takes it before it forks PID 1, and where the server forks a confined process itself it
//! does so from one thread of its own that took it. A task that is not theirs, the server's
//! other threads included, gets no context at all, as if audit were off; confined processes
//! get one, and their denials are recorded.
//!
//! Several servers share that state through a directory of root's, [`STATE_DIR`]: each holds
//! a shared `flock` on `audit.lock` while it runs, and the marker `enabled-by-cordon` says
//! cordon turned audit on. The last server out (its exclusive lock is granted) turns audit
//! off and removes the marker; the rule stays, so that the host's tasks keep having no
//! context (the cheapest state once audit has ever been on) and a crashed server's audit-on
//! costs the host nothing either. When audit was already on (an operator's auditd), cordon
//! changes neither its rules nor its login uid: that cost, and that audit trail, are theirs.
//!
//! Owns the lock, the marker and the login uid; the netlink requests are `netlink`'s.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// The login uid cordon's processes carry when cordon manages audit: one no login session
/// has (distributions give accounts ids below 65,536 and subordinate ranges from 100,000).
pub const CORDON_LOGINUID: u32 = 1_999_999_999;

/// Where servers of this host meet about audit (root's alone: audit needs root).
pub const STATE_DIR: &str = "/run/cordon";

const LOCK: &str = "audit.lock";
const MARKER: &str = "enabled-by-cordon";

/// A server's hold on the shared audit state: released by [`release`] at exit, or by the
/// kernel when the process ends.
#[derive(Debug)]
pub(crate) struct Share {
    lock: File,
    dir: PathBuf,
}

/// Takes a shared hold on the audit state in `dir` (made 0700 when missing). Blocks while
/// a server that is leaving decides whether to turn audit off.
pub(crate) fn join(dir: &Path) -> io::Result<Share> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockShared)?;
    Ok(Share {
        lock,
        dir: dir.to_path_buf(),
    })
}

impl Share {
    /// Whether a cordon server turned audit on (and it has not been turned off since).
    pub(crate) fn enabled_by_cordon(&self) -> bool {
        self.dir.join(MARKER).exists()
    }

    /// Notes that this server turned audit on.
    pub(crate) fn mark_enabled(&self) -> io::Result<()> {
        std::fs::write(self.dir.join(MARKER), std::process::id().to_string())
    }
}

/// Lets go of `share`; when no other server holds the state and cordon turned audit on,
/// calls `turn_off` and, if it worked, removes the marker. Returns whether audit was turned
/// off.
pub(crate) fn release(share: Share, turn_off: impl FnOnce() -> io::Result<()>) -> io::Result<bool> {
    let Share { lock, dir } = share;
    // A second description of the same file: ours must be gone before an exclusive lock can
    // be granted, and one that is granted is never shared with a newcomer (who waits in
    // `join`).
    drop(lock);
    let sole = File::options().write(true).open(dir.join(LOCK))?;
    match rustix::fs::flock(&sole, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Ok(false),
        Err(e) => return Err(e.into()),
    }
    if !dir.join(MARKER).exists() {
        return Ok(false);
    }
    turn_off()?;
    std::fs::remove_file(dir.join(MARKER))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_server_out_turns_off_what_cordon_turned_on() {
        let dir = tempfile::tempdir().unwrap();
        let first = join(dir.path()).unwrap();
        assert!(!first.enabled_by_cordon());
        first.mark_enabled().unwrap();
        let second = join(dir.path()).unwrap();
        assert!(second.enabled_by_cordon(), "the marker is shared");
        let mut calls = 0;
        // Another server still runs: audit stays on.
        assert!(
            !release(first, || {
                calls += 1;
                Ok(())
            })
            .unwrap()
        );
        assert_eq!(calls, 0);
        assert!(second.enabled_by_cordon());
        // The last one out turns it off, and the marker goes.
        assert!(
            release(second, || {
                calls += 1;
                Ok(())
            })
            .unwrap()
        );
        assert_eq!(calls, 1);
        let third = join(dir.path()).unwrap();
        assert!(!third.enabled_by_cordon());
        // Nothing to put back when cordon did not turn audit on (an operator's auditd).
        assert!(!release(third, || panic!("audit is not cordon's to turn off")).unwrap());
    }

    #[test]
    fn a_failed_switch_keeps_the_marker_for_the_next_server() {
        let dir = tempfile::tempdir().unwrap();
        let share = join(dir.path()).unwrap();
        share.mark_enabled().unwrap();
        assert!(release(share, || Err(io::Error::other("refused"))).is_err());
        assert!(join(dir.path()).unwrap().enabled_by_cordon());
    }
}
