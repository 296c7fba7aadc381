//! The variables cordon adds to every call's environment besides the policy's `set`: the
//! operator's git identity and harmless git settings, and the login variables.
//!
//! Each is added only when the policy neither sets it nor passes it from a server environment
//! that has it, so a policy can always say otherwise. Reading the operator's git configs is
//! `workspace::gitconfig`'s, choosing its keys `workspace::operator_git`'s, and the call's user
//! `login`'s; this module only puts them together for `resolve`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Adds the implicit variables to `set` (the policy's expanded table); `pass` is the policy's
/// pass list, `read_exec` and `deny` what the call may run from.
pub(super) fn add_implicit(
    set: &mut BTreeMap<String, String>,
    pass: &[String],
    read_exec: &[PathBuf],
    deny: &[PathBuf],
) {
    // Decided before `add` borrows the table.
    let git_owned = set.contains_key("GIT_CONFIG_COUNT")
        || (pass.iter().any(|p| p == "GIT_CONFIG_COUNT")
            && std::env::var_os("GIT_CONFIG_COUNT").is_some());
    let mut add = |name: &str, value: String| {
        let passed = pass.iter().any(|p| p == name) && std::env::var_os(name).is_some();
        if !passed {
            set.entry(name.to_owned()).or_insert(value);
        }
    };
    let var = |n: &str| std::env::var_os(n).map(PathBuf::from);
    let home = super::server_home().map(PathBuf::from);
    let configs = crate::workspace::gitconfig::operator_configs(
        home.as_deref(),
        var("XDG_CONFIG_HOME").as_deref(),
        var("GIT_CONFIG_GLOBAL").as_deref(),
        std::env::var_os("GIT_CONFIG_NOSYSTEM").is_none(),
    );
    // The operator's identity (only `user.name`/`user.email`), so `git commit` works in
    // calls without showing them the operator's git configuration.
    let (name, email) = crate::workspace::gitconfig::identity_of(&configs);
    for (value, names) in [
        (name, ["GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"]),
        (email, ["GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"]),
    ] {
        if let Some(value) = value {
            for n in names {
                add(n, value.clone());
            }
        }
    }
    // The operator's harmless settings (`init.defaultBranch`, `pull.rebase`, aliases, …), as
    // one block: a policy that sets or passes GIT_CONFIG_COUNT owns the whole numbering.
    let git = crate::workspace::operator_git::as_environment(&configs);
    if !git_owned {
        for (name, value) in git {
            add(&name, value);
        }
    }
    let login = super::login::of_calls(|p| runnable(p, read_exec, deny));
    if let Some(user) = login.user {
        add("USER", user.clone());
        add("LOGNAME", user);
    }
    add("SHELL", login.shell);
}

/// Whether a call can run `program`: an executable file (links followed, as `execve` does)
/// whose real path lies beneath a read + execute grant and no deny entry.
fn runnable(program: &Path, read_exec: &[PathBuf], deny: &[PathBuf]) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Ok(real) = program.canonicalize() else {
        return false;
    };
    let executable =
        std::fs::metadata(&real).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let beneath = |roots: &[PathBuf], path: &Path| roots.iter().any(|r| path.starts_with(r));
    executable
        && (beneath(read_exec, program) || beneath(read_exec, &real))
        && !beneath(deny, program)
        && !beneath(deny, &real)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_runnable_only_beneath_a_grant_and_no_deny() {
        let Ok(sh) = Path::new("/bin/sh").canonicalize() else {
            return;
        };
        let grants = [PathBuf::from("/usr"), PathBuf::from("/bin")];
        assert!(runnable(Path::new("/bin/sh"), &grants, &[]));
        assert!(!runnable(Path::new("/bin/sh"), &[], &[]));
        assert!(!runnable(
            Path::new("/bin/sh"),
            &grants,
            std::slice::from_ref(&sh)
        ));
        assert!(!runnable(Path::new("/nonexistent/sh"), &grants, &[]));
    }

    #[test]
    fn the_policy_and_passed_variables_win_over_implicit_ones() {
        let mut set = BTreeMap::from([("SHELL".to_owned(), "/bin/policy-shell".to_owned())]);
        add_implicit(&mut set, &[], &[PathBuf::from("/")], &[]);
        assert_eq!(set["SHELL"], "/bin/policy-shell");
        // The test process's own name is what a call of this uid gets.
        let name = std::process::Command::new("id").arg("-un").output().ok();
        if let Some(out) = name.filter(|o| o.status.success()) {
            let name = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            assert_eq!(set.get("USER"), Some(&name));
            assert_eq!(set.get("LOGNAME"), Some(&name));
        }
    }
}
