//! Which directories on the operator's own PATH confined commands cannot see: a toolchain
//! installed there (`~/.local/bin`, a pyenv or nvm in an unusual place) is "command not
//! found" under cordon, and the fix is a policy field, which this names.

use crate::policy::Policy;
use std::path::{Path, PathBuf};

/// One sentence per directory of `path_var` (the server's PATH) that holds programs but is
/// not readable by confined processes under `policy`, saying which field would grant it.
pub(super) fn invisible_on_path(policy: &Policy, path_var: &str) -> Vec<String> {
    let fs = &policy.filesystem;
    let grants: Vec<PathBuf> = fs
        .read_exec
        .iter()
        .chain(&fs.read_write)
        .cloned()
        .chain(
            crate::policy::toolchains::present(&fs.toolchains)
                .into_iter()
                .map(|t| t.root),
        )
        .collect();
    let mut out = Vec::new();
    for dir in path_var.split(':').map(Path::new) {
        // A directory reached through a link is visible when its target is (toolchain roots
        // are granted by their canonical path).
        let real = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        if !dir.is_absolute()
            || !holds_programs(dir)
            || visible(dir, &grants, &fs.deny)
            || visible(&real, &grants, &fs.deny)
        {
            continue;
        }
        let home = crate::policy::server_home().unwrap_or_default();
        let spelled = match dir.strip_prefix(&home) {
            Ok(rest) if !home.is_empty() && home != "/" => format!("~/{}", rest.display()),
            _ => dir.display().to_string(),
        };
        out.push(format!(
            "{} is on your PATH but invisible to confined commands (programs there are \
             \"command not found\"): add \"{spelled}\" to filesystem.toolchains (read + execute, \
             put on the sandbox PATH where it says {{toolchains}}), or its directory to \
             filesystem.read_exec and environment.set.PATH",
            dir.display()
        ));
    }
    out
}

/// A grant covers `dir` and no deny entry carves it out between the two (Landlock grants a
/// path beneath its rule; `policy::landlock` expands a grant around the denied entries below it).
fn visible(dir: &Path, grants: &[PathBuf], deny: &[PathBuf]) -> bool {
    grants
        .iter()
        .any(|g| dir.starts_with(g) && !deny.iter().any(|d| d.starts_with(g) && dir.starts_with(d)))
}

fn holds_programs(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().take(1000).any(|e| {
            e.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_dir_outside_every_grant_is_named_with_the_field() {
        use std::os::unix::fs::PermissionsExt;
        let tools = tempfile::tempdir().unwrap();
        let bin = tools.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let prog = bin.join("mytool");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        let policy = Policy::load("default").unwrap();
        let path = format!("/usr/bin:{}", bin.display());
        let notes = invisible_on_path(&policy, &path);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("filesystem.toolchains"), "{notes:?}");
        assert!(notes[0].contains(&bin.display().to_string()), "{notes:?}");
    }

    #[test]
    fn a_deny_between_the_grant_and_the_dir_hides_it() {
        let grants = [PathBuf::from("/")];
        let deny = [PathBuf::from("/root")];
        assert!(!visible(Path::new("/root/.local/bin"), &grants, &deny));
        let grants = [PathBuf::from("/root/.cargo/bin")];
        assert!(visible(Path::new("/root/.cargo/bin"), &grants, &deny));
    }
}
