//! The one error type for everything that can go wrong with a workspace path.
//!
//! Owns: turning `std::io::Error`s from cap-std into a small set of cases the model can act on,
//! the wording of those cases (what was wrong *and* how to fix it), and their SPEC error kind.
//! Does not own: deciding what to do about an error (tools do), or MCP result shaping.

use crate::error_kind::ErrorKind;
use std::fmt;
use std::io;

use super::RelPath;

/// Linux errno values we tell apart. Written out instead of pulling in `libc` for five constants;
/// they are part of the stable Linux ABI.
mod errno {
    pub(super) const EACCES: i32 = 13;
    pub(super) const EPERM: i32 = 1;
    pub(super) const ENOTDIR: i32 = 20;
    pub(super) const EISDIR: i32 = 21;
    pub(super) const ELOOP: i32 = 40;
}

/// Why a workspace path could not be used.
///
/// Every `Display` message says what was wrong and how to fix it, so a tool can hand it to the
/// model unchanged.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The argument is not a usable path at all (empty, NUL byte, names no file, ...).
    #[error("invalid path {arg:?}: {reason}")]
    Invalid { arg: String, reason: String },

    /// The path leads outside the workspace: `..` climbing out, an absolute path elsewhere, or a
    /// symlink whose target lies outside. Detected by the kernel at open time (RESOLVE_BENEATH),
    /// which also refuses every symlink with an absolute target, even one pointing inside.
    #[error(
        "path `{path}` leads outside the workspace (through `..`, an absolute path, or a symlink \
         whose target lies outside or is written as an absolute path); use a path relative to \
         the workspace root that stays inside it"
    )]
    Escape { path: String },

    /// The path (or one of its directories) does not exist.
    #[error(
        "`{path}` does not exist; check the spelling (paths are relative to the workspace root) \
         or list the directory with shell_exec `ls`"
    )]
    NotFound { path: String },

    /// A write targets a directory that does not exist and `create_dirs` was false.
    #[error(
        "the directory `{parent}` for `{path}` does not exist; pass create_dirs=true to create \
         it, or choose an existing directory"
    )]
    ParentMissing { path: String, parent: String },

    /// The operating system refused access (a real EACCES/EPERM, not a workspace escape).
    #[error(
        "permission denied by the operating system on `{path}`; the file or a directory on the \
         way has permissions that forbid this, choose another path or change them with shell_exec"
    )]
    PermissionDenied { path: String },

    /// The path names something that is neither a regular file nor a directory, or is a
    /// directory where a file was expected in a way not covered by `IsADirectory`.
    #[error("`{path}` is a {found}, not a regular file; only regular files can be read or written")]
    NotAFile { path: String, found: &'static str },

    /// The path is a directory where a file was expected.
    #[error(
        "`{path}` is a directory, not a file; give the path of a file (inside it, for example)"
    )]
    IsADirectory { path: String },

    /// The path (or a component of it) is a file where a directory was expected.
    #[error(
        "`{path}` is not a directory, or one of the directories on the way is a file; check the \
         path"
    )]
    NotADirectory { path: String },

    /// Symlinks form a loop, or nest too deeply to follow.
    #[error("`{path}` goes through too many symbolic links (a loop?); use the real path instead")]
    SymlinkLoop { path: String },

    /// The file is larger than we are willing to load into memory.
    #[error(
        "`{path}` is {size} bytes, more than the {limit}-byte limit for this tool; inspect it \
         with shell_exec (for example `head`, `tail`, `grep` or `sed -n '100,200p'`)"
    )]
    TooLarge { path: String, size: u64, limit: u64 },

    /// The target is, or lies in, a protected entry (decided on the path as resolved on disk).
    #[error(
        "`{path}` is inside the protected path `{entry}`{}: files there run or are trusted \
         outside the sandbox (git hooks and configuration, cordon's own state, policy files), \
         so the file tools never write them; ask the operator to make this change",
        resolved_note(.path, .resolved)
    )]
    Protected {
        path: String,
        /// The path as resolved on disk (symlinked directories followed).
        resolved: String,
        entry: String,
    },

    /// The workspace is read-only and the target lies outside its writable directories.
    #[error(
        "`{path}`{} is not in a writable directory of this read-only workspace; write inside \
         one of them",
        resolved_note(.path, .resolved)
    )]
    NotWritable { path: String, resolved: String },

    /// The final component is a symbolic link: the file tools never write through one.
    #[error("{}", final_symlink_message(.path, .target.as_deref()))]
    FinalSymlink {
        path: String,
        /// Where it leads, workspace-relative, when that could be worked out.
        target: Option<String>,
    },

    /// Any other operating-system error; the source says what it was.
    #[error("I/O error on `{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// ` (resolved on disk to `X`)` when the resolved path differs from the spelling.
fn resolved_note(path: &str, resolved: &str) -> String {
    let spelled = path.trim_start_matches("./");
    if resolved.is_empty() || resolved == spelled {
        String::new()
    } else {
        format!(" (resolved on disk to `{resolved}`)")
    }
}

fn final_symlink_message(path: &str, target: Option<&str>) -> String {
    let leads = match target {
        Some(t) => format!(" to `{t}`"),
        None => String::new(),
    };
    let instead = match target {
        Some(t) => format!("write `{t}` by its own path instead, or "),
        None => String::new(),
    };
    format!(
        "`{path}` is a symbolic link{leads}; write_file and edit_file never write through a \
         symbolic link (nor replace it). Nothing was written: {instead}remove the link with \
         shell_exec first if a regular file should take its place"
    )
}

impl From<&PathError> for ErrorKind {
    fn from(e: &PathError) -> Self {
        match e {
            PathError::Invalid { .. }
            | PathError::NotAFile { .. }
            | PathError::IsADirectory { .. }
            | PathError::NotADirectory { .. }
            | PathError::SymlinkLoop { .. }
            | PathError::FinalSymlink { .. } => ErrorKind::InvalidArgument,
            PathError::Escape { .. } => ErrorKind::PathEscape,
            PathError::NotFound { .. } | PathError::ParentMissing { .. } => ErrorKind::NotFound,
            PathError::PermissionDenied { .. }
            | PathError::Protected { .. }
            | PathError::NotWritable { .. } => ErrorKind::Denied,
            PathError::TooLarge { .. } => ErrorKind::ResourceLimit,
            PathError::Io { .. } => ErrorKind::Io,
        }
    }
}

impl PathError {
    /// The SPEC `structuredContent.error.kind` for this error, by name.
    pub fn kind_str(&self) -> &'static str {
        ErrorKind::from(self).as_str()
    }

    /// Whether the same call might succeed if simply repeated (SPEC `error.retriable`). Only
    /// unclassified I/O errors can be transient; everything else needs a different argument.
    pub fn retriable(&self) -> bool {
        matches!(self, PathError::Io { .. })
    }

    pub(crate) fn invalid(arg: &str, reason: impl Into<String>) -> Self {
        // A huge argument is shown by its start only: the message goes back to the model.
        let arg = crate::text::ellipsized(arg, 120).into_owned();
        PathError::Invalid {
            arg,
            reason: reason.into(),
        }
    }

    /// Classifies an error returned by a cap-std operation on `path`.
    ///
    /// cap-std reports an escape as `PermissionDenied` *without* an OS error code (it comes from
    /// EXDEV of openat2 RESOLVE_BENEATH, or from its own resolver); a genuine EACCES carries
    /// `raw_os_error() == Some(13)`. That difference is the whole trick.
    pub(crate) fn from_io(path: impl fmt::Display, err: io::Error) -> Self {
        let path = path.to_string();
        match (err.kind(), err.raw_os_error()) {
            (io::ErrorKind::PermissionDenied, None) => PathError::Escape { path },
            (_, Some(errno::EACCES | errno::EPERM)) => PathError::PermissionDenied { path },
            (io::ErrorKind::NotFound, _) => PathError::NotFound { path },
            (_, Some(errno::EISDIR)) => PathError::IsADirectory { path },
            (_, Some(errno::ENOTDIR)) => PathError::NotADirectory { path },
            (_, Some(errno::ELOOP)) => PathError::SymlinkLoop { path },
            _ => PathError::Io { path, source: err },
        }
    }

    /// Like [`PathError::from_io`], for a `RelPath`.
    pub(crate) fn at(path: &RelPath, err: io::Error) -> Self {
        Self::from_io(path, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(err: io::Error) -> PathError {
        PathError::from_io("p", err)
    }

    #[test]
    fn cap_std_escape_without_errno_is_escape() {
        let e = io::Error::new(
            io::ErrorKind::PermissionDenied,
            "a path led outside of the filesystem",
        );
        assert!(matches!(classify(e), PathError::Escape { .. }));
    }

    #[test]
    fn real_eacces_is_permission_denied_not_escape() {
        let e = io::Error::from_raw_os_error(errno::EACCES);
        let err = classify(e);
        assert!(matches!(err, PathError::PermissionDenied { .. }));
        assert_eq!(err.kind_str(), "denied");
    }

    #[test]
    fn errno_cases_map_to_their_variants() {
        assert!(matches!(
            classify(io::Error::from_raw_os_error(2)),
            PathError::NotFound { .. }
        ));
        assert!(matches!(
            classify(io::Error::from_raw_os_error(errno::EISDIR)),
            PathError::IsADirectory { .. }
        ));
        assert!(matches!(
            classify(io::Error::from_raw_os_error(errno::ENOTDIR)),
            PathError::NotADirectory { .. }
        ));
        assert!(matches!(
            classify(io::Error::from_raw_os_error(errno::ELOOP)),
            PathError::SymlinkLoop { .. }
        ));
        let other = classify(io::Error::from_raw_os_error(28)); // ENOSPC
        assert!(matches!(other, PathError::Io { .. }));
        assert_eq!(other.kind_str(), "io");
        assert!(other.retriable());
    }

    #[test]
    fn escape_message_says_what_and_how() {
        let msg = PathError::Escape {
            path: "../x".into(),
        }
        .to_string();
        assert!(msg.contains("`../x` leads outside the workspace"), "{msg}");
        assert!(msg.contains("relative to the workspace root"), "{msg}");
    }

    #[test]
    fn kinds_follow_the_spec_vocabulary() {
        let spec = [
            "invalid_argument",
            "path_escape",
            "not_found",
            "denied",
            "io",
        ];
        let errors = [
            PathError::invalid("", "empty"),
            PathError::Escape { path: "x".into() },
            PathError::NotFound { path: "x".into() },
            PathError::PermissionDenied { path: "x".into() },
            PathError::Io {
                path: "x".into(),
                source: io::Error::other("boom"),
            },
        ];
        for (err, kind) in errors.iter().zip(spec) {
            assert_eq!(err.kind_str(), kind);
        }
    }
}
