//! `RelPath`: a path argument that has been checked for form and made workspace-relative.
//!
//! Owns: the lexical part of path handling (empty, NUL, absolute-inside → relative, absolute
//! outside → escape). Does not own confinement: a `RelPath` may still contain `..` or go
//! through symlinks; the kernel decides on every open whether it stays beneath the root.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use super::PathError;

/// Linux's PATH_MAX (terminating NUL included) and NAME_MAX: longer arguments are refused as
/// invalid up front instead of surfacing later as an I/O error (ENAMETOOLONG).
const PATH_MAX: usize = 4096;
const NAME_MAX: usize = 255;

/// A workspace-relative path, as the model should see it.
///
/// Only obtainable from [`crate::workspace::Workspace::resolve_arg`] or from the workspace
/// itself, so it never holds an absolute path, an empty string or a NUL byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct RelPath(String);

impl RelPath {
    /// The path as text, relative to the workspace root (`.` is the root itself).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the workspace root itself, spelled `.` (an absolute argument naming the
    /// root becomes `.` too).
    pub fn is_root(&self) -> bool {
        self.0 == "."
    }

    /// The path for handing to cap-std (relative, so it resolves beneath the root `Dir`).
    pub fn as_path(&self) -> &Path {
        Path::new(&self.0)
    }

    /// For paths the workspace builds itself (spill files, symlink targets it has resolved).
    pub(crate) fn from_trusted(path: String) -> Self {
        debug_assert!(!path.is_empty() && !Path::new(&path).is_absolute());
        RelPath(path)
    }

    /// Checks the form of a tool argument and makes it relative to the workspace root.
    ///
    /// `roots` are the absolute spellings of the workspace root (canonical first); an absolute
    /// argument under any of them is made relative. The comparison is by path components, not by
    /// string prefix, so `/ws-other` is not mistaken for being under `/ws`.
    pub(crate) fn parse(arg: &str, roots: &[PathBuf]) -> Result<Self, PathError> {
        if arg.is_empty() {
            return Err(PathError::invalid(
                arg,
                "the path is empty; give a path relative to the workspace root, or `.` for the \
                 root itself",
            ));
        }
        if arg.contains('\0') {
            return Err(PathError::invalid(
                arg,
                "the path contains a NUL byte, which no file name can contain; remove it",
            ));
        }
        if arg.len() >= PATH_MAX {
            return Err(PathError::invalid(
                arg,
                format!(
                    "the path is {} bytes long; Linux paths are shorter than {PATH_MAX} bytes",
                    arg.len()
                ),
            ));
        }
        if let Some(long) = arg.split('/').find(|c| c.len() > NAME_MAX) {
            return Err(PathError::invalid(
                arg,
                format!(
                    "a path component is {} bytes long; file names are at most {NAME_MAX} bytes",
                    long.len()
                ),
            ));
        }
        let path = Path::new(arg);
        if !path.is_absolute() {
            return Ok(RelPath(arg.to_owned()));
        }
        for root in roots {
            if let Ok(rest) = path.strip_prefix(root) {
                return Ok(RelPath(relative_display(rest)));
            }
        }
        Err(PathError::Escape {
            path: arg.to_owned(),
        })
    }
}

/// Renders the remainder of an absolute path after the root: `.` for the root itself, and a
/// trailing slash kept only when the argument had one (it matters for "this must be a directory").
fn relative_display(rest: &Path) -> String {
    let parts: Vec<&str> = rest
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            Component::ParentDir => Some(".."),
            // strip_prefix never leaves RootDir/Prefix; CurDir components are noise here.
            _ => None,
        })
        .collect();
    if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<Path> for RelPath {
    fn as_ref(&self) -> &Path {
        self.as_path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> Vec<PathBuf> {
        vec![PathBuf::from("/srv/ws"), PathBuf::from("/link/ws")]
    }

    fn parse(arg: &str) -> Result<RelPath, PathError> {
        RelPath::parse(arg, &roots())
    }

    #[test]
    fn relative_paths_are_kept_as_given() {
        assert_eq!(parse("src/main.rs").unwrap().as_str(), "src/main.rs");
        assert_eq!(parse("./a").unwrap().as_str(), "./a");
        // `..` is not judged here: the kernel decides at open time whether it stays inside.
        assert_eq!(parse("a/../b").unwrap().as_str(), "a/../b");
    }

    #[test]
    fn absolute_inside_becomes_relative() {
        assert_eq!(parse("/srv/ws/src/lib.rs").unwrap().as_str(), "src/lib.rs");
        assert_eq!(parse("/srv/ws").unwrap().as_str(), ".");
        assert_eq!(parse("/srv/ws/").unwrap().as_str(), ".");
        assert_eq!(parse("/link/ws/x").unwrap().as_str(), "x");
        assert_eq!(parse("/srv/ws//a/./b").unwrap().as_str(), "a/b");
    }

    #[test]
    fn absolute_outside_is_an_escape() {
        for arg in ["/etc/passwd", "/srv/ws-other/a", "/srv", "/"] {
            assert!(
                matches!(parse(arg), Err(PathError::Escape { .. })),
                "{arg} should escape"
            );
        }
    }

    #[test]
    fn empty_and_nul_are_invalid_with_a_reason() {
        let err = parse("").unwrap_err();
        assert!(matches!(err, PathError::Invalid { .. }));
        assert!(err.to_string().contains("empty"), "{err}");
        let err = parse("a\0b").unwrap_err();
        assert!(err.to_string().contains("NUL"), "{err}");
        assert_eq!(err.kind_str(), "invalid_argument");
    }

    #[test]
    fn overlong_paths_are_invalid_and_not_echoed_whole() {
        let err = parse(&"x".repeat(5 << 20)).unwrap_err();
        assert_eq!(err.kind_str(), "invalid_argument");
        assert!(
            err.to_string().len() < 1000,
            "message echoes the whole argument"
        );
        let err = parse(&format!("a/{}/b", "y".repeat(256))).unwrap_err();
        assert_eq!(err.kind_str(), "invalid_argument");
        assert!(err.to_string().contains("255"), "{err}");
        assert!(parse(&format!("a/{}/b", "y".repeat(255))).is_ok());
    }
}
