//! The workspace root as a capability.
//!
//! Owns: the single ambient-authority call of the file tools (`Dir::open_ambient_dir` on the
//! workspace root), the turning of tool `path`/`cwd` arguments into workspace-relative paths, and
//! every file-system access the file tools make — all of it through that one `Dir`. Paths are
//! resolved beneath it either by the kernel (openat2 `RESOLVE_BENEATH`, via cap-std: `..`,
//! absolute paths and outward symlinks refused atomically at open time) or, for anything that
//! is read or written, by `resolve`, which opens one component at a time with no symlink
//! followed by the kernel, so that the directory a decision is about is the one used.
//!
//! Confined processes can write the workspace, so nothing found in it is trusted: files are
//! opened no-follow and non-blocking, checked regular on the open handle, and read with a bound;
//! protected entries (`protect`) are decided on the resolved target inside the handle that
//! writes (`write`).
//!
//! Does not own: what the tools do with the bytes (see `crate::files`), MCP types, policy, or the
//! confinement of child processes (they get the root's host path and are confined separately).

pub(crate) mod error;
pub(crate) mod gitconfig;
pub(crate) mod gitlinks;
mod home;
pub(crate) mod operator_git;
pub(crate) mod protect;
mod reclaim;
pub(crate) use reclaim::MovedAside;
pub(crate) mod relpath;
mod resolve;
pub(crate) mod spill;
pub(crate) use spill::SPILL_LIMIT;
pub(crate) mod write;

use std::io::Read;
use std::path::{Path, PathBuf};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt, OpenOptionsSyncExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, File, FileType, Metadata, OpenOptions};

pub(crate) use crate::git::GuardReport;
pub(crate) use error::PathError;
pub(crate) use protect::{EntryKind, existing_protected};
pub(crate) use relpath::RelPath;
pub(crate) use write::{WriteReport, WriteRules};

/// Files larger than this are not loaded by [`Workspace::read_bytes`]; the model is pointed to
/// shell tools instead. Large enough for any source file, small enough to keep the server's
/// memory bounded when a call names a log or a database.
pub(crate) const MAX_READ_BYTES: u64 = 32 * 1024 * 1024;

/// The workspace: one open directory handle plus how to name it.
#[derive(Debug)]
pub struct Workspace {
    dir: Dir,
    /// Canonical absolute path of the root: for display and for confined children.
    root: PathBuf,
    /// Absolute spellings of the root that an argument may use (canonical first, then the path
    /// as given, when it differs, e.g. through a symlinked parent).
    root_aliases: Vec<PathBuf>,
    /// Total bytes the spill area may hold (`output.spill_total_mb`); see `spill`.
    spill_total: u64,
}

/// Opening the workspace root itself failed (a startup error, not a tool error).
#[derive(Debug, thiserror::Error)]
#[error("cannot open workspace `{path}`: {source}; pass an existing directory with --workspace")]
pub struct OpenWorkspaceError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

impl Workspace {
    /// Opens `root` as the workspace. This is the only place the file tools use ambient
    /// authority; everything after goes through the returned handle.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, OpenWorkspaceError> {
        let given = root.as_ref();
        let fail = |source| OpenWorkspaceError {
            path: given.to_path_buf(),
            source,
        };
        let canonical = std::fs::canonicalize(given).map_err(fail)?;
        // Open the canonical path so the handle and the displayed root are the same directory.
        let dir = Dir::open_ambient_dir(&canonical, ambient_authority()).map_err(fail)?;
        let mut root_aliases = vec![canonical.clone()];
        if let Ok(absolute) = std::path::absolute(given)
            && absolute != canonical
        {
            root_aliases.push(absolute);
        }
        Ok(Workspace {
            dir,
            root: canonical,
            root_aliases,
            spill_total: spill::DEFAULT_SPILL_TOTAL,
        })
    }

    /// Sets the spill area's total size cap (the policy's `output.spill_total_mb`).
    pub fn with_spill_total(mut self, bytes: u64) -> Self {
        self.spill_total = bytes;
        self
    }

    /// The canonical absolute path of the workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The root directory handle, for callers that need a cap-std operation not offered here.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Turns a tool `path`/`cwd` argument into a workspace-relative path.
    ///
    /// Relative paths are kept; an absolute path inside the root is made relative; an absolute
    /// path elsewhere is [`PathError::Escape`]; empty strings and NUL bytes are
    /// [`PathError::Invalid`]. This check is lexical: `..` and symlinks are judged by the kernel
    /// when the path is opened through [`Workspace::dir`].
    pub fn resolve_arg(&self, arg: &str) -> Result<RelPath, PathError> {
        RelPath::parse(arg, &self.root_aliases)
    }

    /// The host path of `rel`, for handing to a confined child process as its cwd. Never open
    /// it in this process: that would bypass the capability. Check it first with
    /// [`Workspace::open_dir`].
    pub fn host_path(&self, rel: &RelPath) -> PathBuf {
        self.root.join(rel.as_path())
    }

    /// Metadata of `rel`, following symlinks (inside the workspace only).
    pub fn metadata(&self, rel: &RelPath) -> Result<Metadata, PathError> {
        self.dir.metadata(rel).map_err(|e| PathError::at(rel, e))
    }

    /// Opens `rel` as a directory, e.g. to validate a `cwd` argument.
    pub fn open_dir(&self, rel: &RelPath) -> Result<Dir, PathError> {
        self.dir.open_dir(rel).map_err(|e| PathError::at(rel, e))
    }

    /// A second handle on the root directory: a descriptor duplicate, which never touches the
    /// file system (so it cannot stall on a slow disk, unlike [`Workspace::open_dir`]).
    pub fn root_dir(&self) -> Result<Dir, PathError> {
        let root = RelPath::from_trusted(".".into());
        self.dir.try_clone().map_err(|e| PathError::at(&root, e))
    }

    /// Reads a whole regular file, refusing directories, devices, FIFOs and sockets (reading
    /// those could block forever or have side effects) and files over [`MAX_READ_BYTES`].
    pub fn read_bytes(&self, rel: &RelPath) -> Result<Vec<u8>, PathError> {
        self.read_bytes_limited(rel, MAX_READ_BYTES)
    }

    /// [`Workspace::read_bytes`] with a caller-chosen size limit.
    ///
    /// The workspace is writable by confined processes, so nothing here trusts a name: the
    /// path is resolved by hand (`resolve`: symlinks inside the workspace are followed by the
    /// walk, never by the kernel), the file is opened with `O_NOFOLLOW | O_NONBLOCK` in the
    /// directory the walk reached, `fstat` must say regular file, and the read stops at the
    /// limit whatever the file does meanwhile.
    pub fn read_bytes_limited(&self, rel: &RelPath, limit: u64) -> Result<Vec<u8>, PathError> {
        let file = self.open_regular(rel)?;
        let meta = file.metadata().map_err(|e| PathError::at(rel, e))?;
        if meta.len() > limit {
            return Err(PathError::TooLarge {
                path: rel.to_string(),
                size: meta.len(),
                limit,
            });
        }
        read_capped(rel, file, meta.len(), limit)
    }

    /// Opens `rel` for reading as described at [`Workspace::read_bytes_limited`], checked to
    /// be a regular file on the opened handle.
    pub fn open_regular(&self, rel: &RelPath) -> Result<File, PathError> {
        let shown = rel.as_str();
        let (dir, name) =
            resolve::resolve_file(&self.dir, rel.as_path(), shown).map_err(|e| match e {
                // For a read, a missing directory on the way is simply "does not exist".
                PathError::ParentMissing { path, .. } => PathError::NotFound { path },
                other => other,
            })?;
        // Look before opening so a FIFO or device is never even opened (a non-blocking open
        // of a FIFO still succeeds); then check the opened handle, because the name may have
        // been swapped in between.
        let meta = dir
            .dir
            .symlink_metadata(&name)
            .map_err(|e| PathError::at(rel, e))?;
        require_regular_file(rel, &meta)?;
        let mut options = OpenOptions::new();
        options.read(true).nonblock(true).follow(FollowSymlinks::No);
        let file = dir
            .dir
            .open_with(&name, &options)
            .map_err(|e| PathError::at(rel, e))?;
        let meta = file.metadata().map_err(|e| PathError::at(rel, e))?;
        require_regular_file(rel, &meta)?;
        Ok(file)
    }
}

/// Reads at most `limit` bytes; a file that grew past the limit since `fstat` is refused too.
fn read_capped(rel: &RelPath, file: File, len_hint: u64, limit: u64) -> Result<Vec<u8>, PathError> {
    let capacity = usize::try_from(len_hint).unwrap_or(0);
    let mut bytes = Vec::with_capacity(capacity);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| PathError::at(rel, e))?;
    if bytes.len() as u64 > limit {
        return Err(PathError::TooLarge {
            path: rel.to_string(),
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

fn require_regular_file(rel: &RelPath, meta: &Metadata) -> Result<(), PathError> {
    let file_type = meta.file_type();
    if file_type.is_file() {
        Ok(())
    } else if file_type.is_dir() {
        Err(PathError::IsADirectory {
            path: rel.to_string(),
        })
    } else {
        Err(PathError::NotAFile {
            path: rel.to_string(),
            found: describe_file_type(file_type),
        })
    }
}

/// A word for the kind of file, for messages.
fn describe_file_type(file_type: FileType) -> &'static str {
    use cap_std::fs::FileTypeExt;
    if file_type.is_dir() {
        "directory"
    } else if file_type.is_symlink() {
        "symbolic link"
    } else if file_type.is_fifo() {
        "named pipe (FIFO)"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "device"
    } else {
        "special file"
    }
}
