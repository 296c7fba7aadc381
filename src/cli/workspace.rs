//! Which directory a command works in: `--workspace` when given, else the current directory,
//! unless that is a directory no project lives in.
//!
//! MCP hosts start servers with whatever working directory they have, often `/` or the home
//! directory. Serving that silently would make the whole file system (or all of a user's
//! files) the agent's read-write workspace. So an implicit workspace is refused when it is `/`,
//! a system directory (or inside one such as `/usr` or `/etc`), or the home directory itself;
//! naming it with `--workspace` is taken as meaning it.

use std::path::{Path, PathBuf};

/// Directories refused as an implicit workspace, together with everything beneath them.
const SYSTEM_TREES: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
    "/sbin", "/sys", "/usr",
];

/// Directories refused as an implicit workspace themselves (projects may live beneath them).
const SYSTEM_DIRS: &[&str] = &[
    "/", "/home", "/media", "/mnt", "/opt", "/root", "/srv", "/tmp", "/var", "/var/tmp",
];

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("cannot read the current directory: {0}")]
    NoCurrentDir(std::io::Error),
    #[error(
        "workspace {path} does not exist or cannot be opened ({source}); pass --workspace DIR with the project directory"
    )]
    Missing {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "refusing to use {path} ({what}) as the workspace: no --workspace was given, so the \
         current directory would have been used, which is how MCP hosts that start servers in \
         `/` or the home directory end up exposing everything. Pass --workspace DIR with the \
         project directory (add `--workspace {path}` only if you really mean it)"
    )]
    Refused { path: String, what: &'static str },
}

/// The canonical workspace root: `explicit` if given (any directory), else `cwd` unless it is
/// refused (see the module docs). `home` is the user's home directory, if known.
pub(crate) fn resolve(
    explicit: Option<PathBuf>,
    cwd: impl FnOnce() -> std::io::Result<PathBuf>,
    home: Option<&Path>,
) -> Result<PathBuf, WorkspaceError> {
    let implicit = explicit.is_none();
    let path = match explicit {
        Some(p) => p,
        None => cwd().map_err(WorkspaceError::NoCurrentDir)?,
    };
    let root = path
        .canonicalize()
        .map_err(|source| WorkspaceError::Missing {
            path: path.display().to_string(),
            source,
        })?;
    if implicit && let Some(what) = refused(&root, home) {
        return Err(WorkspaceError::Refused {
            path: root.display().to_string(),
            what,
        });
    }
    Ok(root)
}

/// [`resolve`] with the process's current directory and `$HOME`.
pub fn resolve_from_env(explicit: Option<PathBuf>) -> Result<PathBuf, WorkspaceError> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .and_then(|h| PathBuf::from(h).canonicalize().ok());
    resolve(explicit, std::env::current_dir, home.as_deref())
}

/// Why `root` (canonical) is no implicit workspace, if it is not.
fn refused(root: &Path, home: Option<&Path>) -> Option<&'static str> {
    if root == Path::new("/") {
        return Some("the root of the file system");
    }
    if home.is_some_and(|h| h == root) {
        return Some("the home directory itself");
    }
    if SYSTEM_DIRS.iter().any(|d| root == Path::new(d))
        || SYSTEM_TREES.iter().any(|d| root.starts_with(d))
    {
        return Some("a system directory");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn implicit(cwd: &str, home: Option<&str>) -> Result<PathBuf, WorkspaceError> {
        let cwd = PathBuf::from(cwd);
        resolve(None, move || Ok(cwd), home.map(Path::new))
    }

    #[test]
    fn root_system_directories_and_home_are_refused_when_implicit() {
        for dir in ["/", "/usr", "/usr/lib", "/etc", "/tmp", "/proc/self"] {
            let err = implicit(dir, None).unwrap_err();
            assert!(
                matches!(err, WorkspaceError::Refused { .. }),
                "{dir}: {err}"
            );
            assert!(err.to_string().contains("--workspace"), "{err}");
        }
        let home = std::env::temp_dir().canonicalize().unwrap();
        let home = home.to_str().unwrap();
        assert!(matches!(
            implicit(home, Some(home)),
            Err(WorkspaceError::Refused {
                what: "the home directory itself",
                ..
            })
        ));
    }

    #[test]
    fn a_project_directory_or_an_explicit_one_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().canonicalize().unwrap();
        assert_eq!(implicit(path.to_str().unwrap(), None).unwrap(), path);
        let explicit = resolve(Some("/".into()), || unreachable!(), None).unwrap();
        assert_eq!(explicit, PathBuf::from("/"));
    }
}
