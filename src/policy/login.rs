//! Who a call is, as the login variables say it: `USER`, `LOGNAME` and `SHELL`.
//!
//! Why: programs read these rather than the password database. Without `SHELL`, `script`
//! ran `/bin/sh` and `watch` under it was stopped by SIGTTOU (the call hung to its timeout);
//! without `USER`/`LOGNAME`, tools that name the user (`whoami`-less scripts, pytest's tmp
//! paths, ssh) guessed or failed.
//!
//! A call's uid inside its user namespace is always the server's own uid (`confine::call_ids`:
//! 0 where cordon is root, the server's uid otherwise, whatever host uid it maps to), and the
//! view shows the host's `/etc/passwd`, so the name here is the one `id -un` prints in a call.
//! Owns reading that entry (`/etc/passwd` as text: no NSS, no `unsafe`) and choosing a shell
//! the call can run; the caller decides whether the policy's own values win.

use std::path::{Path, PathBuf};

/// The login variables of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Login {
    /// The name of the call's uid; None when `/etc/passwd` has no entry for it.
    pub user: Option<String>,
    /// The user's login shell when the call can run it, else `/bin/bash`, else `/bin/sh`.
    pub shell: String,
}

/// The login of a call whose uid is this process's, where `runnable` says whether a path is
/// executable inside the sandbox (granted and present).
pub(super) fn of_calls(runnable: impl Fn(&Path) -> bool) -> Login {
    let uid = rustix::process::getuid().as_raw();
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    from_passwd(&passwd, uid, runnable)
}

/// [`of_calls`] for a given `/etc/passwd` text and uid.
fn from_passwd(passwd: &str, uid: u32, runnable: impl Fn(&Path) -> bool) -> Login {
    // name:password:uid:gid:gecos:home:shell; the first entry for a uid is the one libc finds.
    let entry = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() == 7 && fields[2].parse() == Ok(uid)).then(|| (fields[0], fields[6]))
    });
    let user = entry
        .map(|(name, _)| name.to_owned())
        .filter(|n| !n.is_empty());
    let login_shell = entry
        .map(|(_, shell)| PathBuf::from(shell))
        // nologin and false are a refusal to log in, not a shell to start.
        .filter(|s| s.is_absolute() && !matches!(file_name(s), "nologin" | "false"));
    let shell = login_shell
        .into_iter()
        .chain([PathBuf::from("/bin/bash")])
        .find(|s| runnable(s))
        .unwrap_or_else(|| PathBuf::from("/bin/sh"));
    Login {
        user,
        shell: shell.to_string_lossy().into_owned(),
    }
}

fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/usr/bin/zsh\n\
                          daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
                          dev:x:1000:1000::/home/dev:/bin/fish\n";

    #[test]
    fn the_uid_names_the_user_and_its_shell_when_the_call_can_run_it() {
        let all = |_: &Path| true;
        let login = from_passwd(PASSWD, 0, all);
        assert_eq!(login.user.as_deref(), Some("root"));
        assert_eq!(login.shell, "/usr/bin/zsh");
        // fish not granted: bash; nothing runnable: sh.
        let only_bash = |p: &Path| p == Path::new("/bin/bash");
        assert_eq!(from_passwd(PASSWD, 1000, only_bash).shell, "/bin/bash");
        assert_eq!(from_passwd(PASSWD, 1000, |_| false).shell, "/bin/sh");
        // nologin is not a shell; an unknown uid has no name.
        assert_eq!(from_passwd(PASSWD, 1, all).shell, "/bin/bash");
        assert_eq!(from_passwd(PASSWD, 4242, all).user, None);
    }
}
