//! Toolchains installed in the operator's home (`filesystem.toolchains`): which of them exist,
//! the directories of each that go on the sandbox PATH, and the variable that tells the
//! toolchain where it lives once HOME is not the operator's.
//!
//! Owns the knowledge of the usual layouts (rustup, cargo's bin, pyenv, nvm, Go's GOPATH) and
//! where the per-workspace home (`{workspace_home}`) lives. Granting is `resolve`'s job: a toolchain root
//! is a read + execute grant only, so what lies beside it in the home (`~/.ssh`,
//! `~/.cargo/credentials.toml`) stays unreadable.

use std::path::{Path, PathBuf};

/// One toolchain root that exists on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Toolchain {
    pub root: PathBuf,
    /// Directories put on the sandbox PATH, in order (existing ones only).
    pub path_dirs: Vec<PathBuf>,
    /// The variable naming the root for the toolchain itself (`RUSTUP_HOME`, `PYENV_ROOT`,
    /// `NVM_DIR`): with HOME elsewhere it would look for itself under the wrong home.
    pub root_var: Option<&'static str>,
}

/// The toolchains among `roots` that exist, each with its PATH directories.
///
/// A root reached through a symlink (`~/.pyenv` → `~/dotfiles/pyenv`, as stow makes) is
/// described by its canonical target: the sandbox's view and Landlock grant what a path *is*,
/// and the link itself lies in a home the view does not show, so granting or putting on PATH
/// the spelling with the link found nothing and the toolchain silently fell back to the
/// system's. The layout is still recognised by the name the policy gives (`.pyenv`).
pub(crate) fn present(roots: &[PathBuf]) -> Vec<Toolchain> {
    let home = super::home::server_home().map(PathBuf::from);
    roots
        .iter()
        .filter(|r| r.is_dir())
        .filter_map(|root| {
            let canonical = root.canonicalize().ok()?;
            if canonical != *root && too_wide(&canonical, home.as_deref()) {
                // A link to `/` or to the home itself would grant the whole home; skip it
                // (`cordon doctor` then names it as invisible).
                return None;
            }
            Some(describe(root, &canonical))
        })
        .collect()
}

/// Whether a link's target would grant more than a toolchain: `/`, or the home (or a
/// directory above it).
fn too_wide(target: &Path, home: Option<&Path>) -> bool {
    target == Path::new("/") || home.is_some_and(|h| h.starts_with(target))
}

/// `root` as the policy names it (for its layout), `canonical` where it really is.
fn describe(root: &Path, canonical: &Path) -> Toolchain {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let root = canonical;
    let (dirs, root_var): (Vec<PathBuf>, Option<&'static str>) = match name.as_str() {
        ".rustup" => (Vec::new(), Some("RUSTUP_HOME")),
        ".pyenv" => (
            vec![root.join("shims"), root.join("bin")],
            Some("PYENV_ROOT"),
        ),
        ".nvm" => (newest_node(root).into_iter().collect(), Some("NVM_DIR")),
        // `~/.cargo/bin`, `~/go/bin`, a bin directory named directly.
        "bin" => (vec![root.to_path_buf()], None),
        _ => (vec![root.join("bin")], None),
    };
    Toolchain {
        root: root.to_path_buf(),
        path_dirs: dirs.into_iter().filter(|d| d.is_dir()).collect(),
        root_var,
    }
}

/// nvm keeps each Node version in `versions/node/vX.Y.Z`; the newest is the one on PATH
/// (nvm's `default` alias may name a range, which only nvm itself resolves).
fn newest_node(nvm: &Path) -> Option<PathBuf> {
    let versions = std::fs::read_dir(nvm.join("versions/node")).ok()?;
    let parse = |name: &str| -> Option<Vec<u64>> {
        name.strip_prefix('v')?
            .split('.')
            .map(|p| p.parse().ok())
            .collect()
    };
    versions
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            Some((parse(&name)?, e.path()))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, p)| p.join("bin"))
}

/// Where the calls' persistent home lives, relative to the workspace: inside it, so it goes
/// when the workspace goes and two workspaces never share one; git-ignored (its own
/// `.gitignore`, written by the server) so git and the tools that follow it leave it alone.
pub(crate) const WORKSPACE_HOME: &str = ".cordon-home";

/// The persistent home of the calls in `workspace` (see [`WORKSPACE_HOME`]).
pub(crate) fn workspace_home(workspace: &Path) -> PathBuf {
    workspace.join(WORKSPACE_HOME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_give_their_bin_dirs_and_root_variables() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        for d in [
            ".rustup/toolchains",
            ".cargo/bin",
            ".pyenv/shims",
            ".pyenv/bin",
            ".nvm/versions/node/v9.1.0/bin",
            ".nvm/versions/node/v20.11.1/bin",
            "go/bin",
        ] {
            std::fs::create_dir_all(h.join(d)).unwrap();
        }
        let roots: Vec<PathBuf> = [".rustup", ".cargo/bin", ".pyenv", ".nvm", "go", "absent"]
            .iter()
            .map(|r| h.join(r))
            .collect();
        let found = present(&roots);
        assert_eq!(found.len(), 5, "the absent root is left out: {found:?}");
        assert_eq!(found[0].root_var, Some("RUSTUP_HOME"));
        assert!(found[0].path_dirs.is_empty());
        assert_eq!(found[1].path_dirs, vec![h.join(".cargo/bin")]);
        assert_eq!(
            found[2].path_dirs,
            vec![h.join(".pyenv/shims"), h.join(".pyenv/bin")]
        );
        assert_eq!(
            found[3].path_dirs,
            vec![h.join(".nvm/versions/node/v20.11.1/bin")],
            "the newest version, compared as numbers"
        );
        assert_eq!(found[4].path_dirs, vec![h.join("go/bin")]);
    }

    #[test]
    fn a_symlinked_root_is_described_by_its_target_and_a_link_to_the_home_is_not_granted() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(t.join("store/pyenv/shims")).unwrap();
        std::fs::create_dir_all(t.join("home")).unwrap();
        std::os::unix::fs::symlink(t.join("store/pyenv"), t.join("home/.pyenv")).unwrap();
        let found = present(&[t.join("home/.pyenv")]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].root, t.join("store/pyenv"));
        assert_eq!(found[0].path_dirs, vec![t.join("store/pyenv/shims")]);
        assert_eq!(found[0].root_var, Some("PYENV_ROOT"));
        assert!(too_wide(Path::new("/"), None));
        assert!(too_wide(&t, Some(&t.join("home"))));
        assert!(!too_wide(&t.join("store/pyenv"), Some(&t.join("home"))));
    }
}
