//! Moving one existing branch of the operator's repository in the server's own process, the
//! way git's files backend does it, in place of a `git update-ref` process (the in-process
//! import's last host git on its usual path).
//!
//! The protocol is git's own, so a git running on the host at the same moment sees either
//! the old value or the new one and never both moving it: `refs/heads/<name>.lock` created
//! exclusively, the ref's current value read under it (the loose file, else `packed-refs`)
//! and compared with the value cordon agreed, the new value written into the lock, the
//! reflog line appended (to the branch's log and, when `HEAD` names the branch, to `HEAD`'s,
//! as git does), and the lock renamed over the ref. Anything else (a new branch, whose name
//! git must check against every other ref; a deletion; a repository on the reftable
//! backend; a branch name whose directory holds a file) is left to `git update-ref`, which
//! handles all of it.

use std::io::Write;

use cap_std::fs::{Dir, OpenOptions};

use super::refs::{Head, Oid};

/// Why the branch was not moved here: `git update-ref` is to do it (nothing was changed).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct ToGit(String);

/// Moves branch `name` (a full `refs/heads/…` name, checked by the caller) from `old` to
/// `new` in the operator's gitdir `operator`, whose `HEAD` is `head`; `log`: the repository
/// logs ref updates (`settings`).
pub(super) fn move_branch(
    operator: &Dir,
    name: &str,
    old: &Oid,
    new: &Oid,
    head: &Head,
    message: &str,
    log: bool,
) -> Result<(), ToGit> {
    if operator.symlink_metadata("reftable").is_ok() {
        return Err(ToGit("the repository keeps its refs in a reftable".into()));
    }
    let lock_name = format!("{name}.lock");
    let mut lock = operator
        .open_with(&lock_name, OpenOptions::new().write(true).create_new(true))
        .map_err(|e| ToGit(format!("cannot take `{lock_name}`: {e}")))?;
    let result = (|| {
        let current = super::refs::ref_value(operator, name).map_err(ToGit)?;
        if current.as_deref() != Some(old.as_str()) {
            return Err(ToGit(format!(
                "`{name}` is at {} on the host, not {old}",
                current.as_deref().unwrap_or("nothing")
            )));
        }
        lock.write_all(format!("{new}\n").as_bytes())
            .map_err(|e| ToGit(format!("writing `{lock_name}`: {e}")))?;
        if log {
            let line = reflog_line(old, new, message);
            append_log(operator, &format!("logs/{name}"), &line)?;
            if *head == Head::Branch(name.to_owned()) {
                append_log(operator, "logs/HEAD", &line)?;
            }
        }
        operator
            .rename(&lock_name, operator, name)
            .map_err(|e| ToGit(format!("renaming `{lock_name}` into place: {e}")))
    })();
    if result.is_err() {
        let _ = operator.remove_file(&lock_name);
    }
    result
}

/// A reflog line as git writes it; the identity is cordon's (it moved the branch).
fn reflog_line(old: &str, new: &str, message: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{old} {new} cordon <cordon@localhost> {now} +0000\t{message}\n")
}

/// Appends `line` to the log at `path` (made, with its directories, when missing), in one
/// write as git does.
fn append_log(operator: &Dir, path: &str, line: &str) -> Result<(), ToGit> {
    let fail = |e: std::io::Error| ToGit(format!("appending to `{path}`: {e}"));
    if let Some(parent) = std::path::Path::new(path).parent() {
        operator.create_dir_all(parent).map_err(fail)?;
    }
    let mut log = operator
        .open_with(path, OpenOptions::new().append(true).create(true))
        .map_err(fail)?;
    log.write_all(line.as_bytes()).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &std::path::Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A repository with two commits on `main`; returns them (older, newer).
    fn repo(dir: &std::path::Path) -> (String, String) {
        git(dir, &["init", "-q", "-b", "main"]);
        git(dir, &["commit", "-q", "--allow-empty", "-m", "one"]);
        let one = git(dir, &["rev-parse", "HEAD"]);
        git(dir, &["commit", "-q", "--allow-empty", "-m", "two"]);
        let two = git(dir, &["rev-parse", "HEAD"]);
        git(dir, &["update-ref", "refs/heads/main", &one]);
        (one, two)
    }

    fn gitdir(dir: &std::path::Path) -> Dir {
        Dir::open_ambient_dir(dir.join(".git"), cap_std::ambient_authority()).unwrap()
    }

    const HEAD: &str = "refs/heads/main";

    #[test]
    fn a_branch_moves_with_its_reflog_and_heads_as_git_would() {
        let tmp = tempfile::tempdir().unwrap();
        let (one, two) = repo(tmp.path());
        let head = Head::Branch(HEAD.into());
        move_branch(&gitdir(tmp.path()), HEAD, &one, &two, &head, "moved", true).unwrap();
        assert_eq!(git(tmp.path(), &["rev-parse", "main"]), two);
        assert!(git(tmp.path(), &["reflog", "-1", "--format=%gs", "main"]).contains("moved"));
        assert!(git(tmp.path(), &["reflog", "-1", "--format=%gs", "HEAD"]).contains("moved"));
        assert!(!tmp.path().join(".git/refs/heads/main.lock").exists());
        git(tmp.path(), &["fsck", "--no-dangling"]);
    }

    #[test]
    fn a_packed_branch_moves_and_a_moved_one_is_left_to_git() {
        let tmp = tempfile::tempdir().unwrap();
        let (one, two) = repo(tmp.path());
        git(tmp.path(), &["pack-refs", "--all"]);
        assert!(!tmp.path().join(".git/refs/heads/main").exists());
        let head = Head::Branch(HEAD.into());
        let dir = gitdir(tmp.path());
        // Not where cordon agreed it was: nothing changes.
        let err = move_branch(&dir, HEAD, &two, &one, &head, "x", true).unwrap_err();
        assert!(err.to_string().contains("on the host"), "{err}");
        assert_eq!(git(tmp.path(), &["rev-parse", "main"]), one);
        move_branch(&dir, HEAD, &one, &two, &head, "x", true).unwrap();
        assert_eq!(git(tmp.path(), &["rev-parse", "main"]), two);
    }

    #[test]
    fn a_held_lock_is_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let (one, two) = repo(tmp.path());
        let lock = tmp.path().join(".git/refs/heads/main.lock");
        std::fs::write(&lock, "held").unwrap();
        let head = Head::Branch(HEAD.into());
        assert!(move_branch(&gitdir(tmp.path()), HEAD, &one, &two, &head, "x", true).is_err());
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), "held");
        assert_eq!(git(tmp.path(), &["rev-parse", "main"]), one);
    }
}
