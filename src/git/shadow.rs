//! The shadow gitdir of one workspace: where a call's git writes go (its own config, index,
//! refs, `HEAD` and objects, with the operator's objects as an alternate), kept in cordon's
//! private state outside the workspace and bound read-write at `<workspace>/.git` in the
//! sandbox's view, over the operator's gitdir. Only confined processes read it as a
//! repository.
//!
//! Owns where the shadow lives (one per workspace, kept across sessions so that a
//! submodule's or worktree's gitdir made in one `cordon exec` is there for the next), making
//! it, and the server's few writes into it (refs and `HEAD` the operator moved, the
//! operator's index, the alternates line). The shadow is the calls' to write, so every write
//! goes through a handle on its root, beneath it and without following a link, as a new file
//! renamed into place.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use cap_fs_ext::DirExt;
use cap_std::fs::Dir;

use super::refs::{Head, Oid};

/// Largest operator config copied into a new shadow (its `[remote]`s, identity, filters).
const MAX_CONFIG: u64 = 1 << 20;
/// Largest operator index copied into the shadow.
const MAX_INDEX: u64 = 1 << 30;

/// Written into a shadow made for a workspace whose repository cordon cannot read.
const DEFAULT_CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\
                              \tbare = false\n\tlogallrefupdates = true\n";

/// Appended to a new shadow's config: git then ends the index with an `EOIE` extension
/// (where the extensions start), so the import reads the index's cache tree without
/// reading every entry of a large index. The call may remove it; the import then reads
/// the whole index instead.
const SHADOW_CONFIG: &str = "# cordon: lets the git import find the index's cache tree without reading every entry\n\
                             [index]\n\trecordEndOfIndexEntries = true\n";

/// One workspace's shadow: its host paths and a handle on the gitdir.
#[derive(Debug)]
pub(super) struct Shadow {
    /// The gitdir the view binds at `<workspace>/.git` (read-write).
    pub gitdir: PathBuf,
    /// An empty directory the view binds the operator's gitdir on, read-only: the shadow's
    /// alternate names its `objects` (confined git reads them; nothing writes them).
    pub operator_at: PathBuf,
    dir: Dir,
}

/// Where cordon keeps state across sessions: `CORDON_STATE_DIR`, else `$XDG_STATE_HOME/cordon`,
/// else `~/.local/state/cordon`.
fn state_base() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("CORDON_STATE_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("cordon"));
    }
    std::env::var_os("HOME")
        .filter(|d| !d.is_empty())
        .map(|h| PathBuf::from(h).join(".local/state/cordon"))
}

/// cordon's state directory ([`state_base`]), or a per-user one under the temporary
/// directory where no home is known; shared by the git shadows and the checkpoint stores.
pub(crate) fn state_dir() -> PathBuf {
    state_base()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("cordon-state-{}", current_uid())))
}

fn mkdir_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// Where the shadow of `workspace` (canonical) lives: its root in the state directory, and
/// the root's `git` and `operator` beneath it.
fn locate(workspace: &Path) -> std::io::Result<(PathBuf, PathBuf, PathBuf)> {
    use sha2::Digest;
    use std::os::unix::ffi::OsStrExt;
    let base = state_dir();
    let digest = sha2::Sha256::digest(workspace.as_os_str().as_bytes());
    let id: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    let root = base.join("git-shadows").join(id);
    mkdir_private(&base)?;
    mkdir_private(&root)?;
    let gitdir = root.join("git");
    let operator_at = root.join("operator");
    match std::fs::create_dir(&operator_at) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    Ok((root, gitdir, operator_at))
}

impl Shadow {
    /// The shadow of `workspace` (canonical), made when missing. `fresh` is true when it was
    /// just made (nothing confined has seen it yet).
    pub(super) fn open(workspace: &Path) -> std::io::Result<(Self, bool)> {
        let (root, gitdir, operator_at) = locate(workspace)?;
        let fresh = match std::fs::create_dir(&gitdir) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(e),
        };
        // The root is cordon's alone: a link in place of `git` would hand the calls another
        // directory. Opened without following one.
        let root_dir = Dir::open_ambient_dir(&root, cap_std::ambient_authority())?;
        let dir = root_dir.open_dir_nofollow("git")?;
        Ok((
            Self {
                gitdir,
                operator_at,
                dir,
            },
            fresh,
        ))
    }

    /// The shadow of the repository a call made at `workspace` (canonical): its gitdir
    /// (`name` beneath the handle `parent`: `.git` in the work tree, or a bare repository
    /// itself) moved here whole, in place of any older shadow of that path. Nothing is read
    /// from it on the host; only confined git uses it.
    pub(super) fn adopt(
        workspace: &Path,
        parent: &Dir,
        name: &std::ffi::CStr,
    ) -> std::io::Result<Self> {
        use std::os::fd::AsFd;
        let (root, gitdir, operator_at) = locate(workspace)?;
        crate::confine::scratch::remove_tree(&gitdir)?;
        let root_dir = Dir::open_ambient_dir(&root, cap_std::ambient_authority())?;
        super::nested::move_dir(parent.as_fd(), name, root_dir.as_fd(), c"git")?;
        let dir = root_dir.open_dir_nofollow("git")?;
        Ok(Self {
            gitdir,
            operator_at,
            dir,
        })
    }

    pub(super) fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Makes a new shadow a repository like the operator's: its config (the operator's own,
    /// read only by confined git), `HEAD`, and the directories git expects. Refs and the
    /// index follow with the first sync.
    pub(super) fn seed(&self, operator: &Dir, head: &Head) -> std::io::Result<()> {
        for d in [
            "objects/info",
            "objects/pack",
            "refs/heads",
            "refs/tags",
            "info",
        ] {
            self.dir.create_dir_all(d)?;
        }
        let mut config = read_bounded(operator, "config", MAX_CONFIG)
            .ok()
            .flatten()
            .unwrap_or_else(|| DEFAULT_CONFIG.as_bytes().to_vec());
        if !config.ends_with(b"\n") && !config.is_empty() {
            config.push(b'\n');
        }
        config.extend_from_slice(SHADOW_CONFIG.as_bytes());
        self.write("config", &config)?;
        self.set_head(head)
    }

    /// Points the shadow's objects at the operator's (as the view shows them).
    pub(super) fn write_alternates(&self) -> std::io::Result<()> {
        self.dir.create_dir_all("objects/info")?;
        let mut line = self
            .operator_at
            .join("objects")
            .into_os_string()
            .into_encoded_bytes();
        line.push(b'\n');
        self.write("objects/info/alternates", &line)
    }

    /// Writes `HEAD` (a branch or a commit; nothing for [`Head::Absent`]).
    pub(super) fn set_head(&self, head: &Head) -> std::io::Result<()> {
        match head {
            Head::Absent => Ok(()),
            Head::Branch(name) => self.write("HEAD", format!("ref: {name}\n").as_bytes()),
            Head::Detached(oid) => self.write("HEAD", format!("{oid}\n").as_bytes()),
        }
    }

    /// Sets (or, with None, deletes) the ref `name` (validated by the caller): a loose file,
    /// and out of `packed-refs` when deleted.
    pub(super) fn set_ref(&self, name: &str, oid: Option<&Oid>) -> std::io::Result<()> {
        match oid {
            Some(oid) => {
                if let Some(parent) = Path::new(name).parent() {
                    self.dir.create_dir_all(parent)?;
                }
                self.write(name, format!("{oid}\n").as_bytes())
            }
            None => {
                match self.dir.remove_file(name) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
                let Some(packed) = read_bounded(&self.dir, "packed-refs", 64 << 20)? else {
                    return Ok(());
                };
                let text = String::from_utf8_lossy(&packed);
                let mut kept = String::with_capacity(text.len());
                let mut skipping = false;
                for line in text.lines() {
                    if line.starts_with('^') {
                        if !skipping {
                            kept.push_str(line);
                            kept.push('\n');
                        }
                        continue;
                    }
                    skipping = line.split_once(' ').is_some_and(|(_, n)| n == name);
                    if !skipping {
                        kept.push_str(line);
                        kept.push('\n');
                    }
                }
                self.write("packed-refs", kept.as_bytes())
            }
        }
    }

    /// Copies the operator's index into the shadow (its stat data is the work tree's).
    pub(super) fn copy_index(&self, operator: &Dir) -> std::io::Result<()> {
        match read_bounded(operator, "index", MAX_INDEX)? {
            Some(bytes) => self.write("index", &bytes),
            None => Ok(()),
        }
    }

    /// `bytes` as the file `rel` beneath the shadow: a new anonymous file, renamed into place
    /// (over whatever is there, never through it).
    fn write(&self, rel: &str, bytes: &[u8]) -> std::io::Result<()> {
        let path = Path::new(rel);
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => self.dir.open_dir_nofollow(p)?,
            _ => self.dir.try_clone()?,
        };
        let name = path
            .file_name()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let mut file = cap_tempfile::TempFile::new(&parent)?;
        file.write_all(bytes)?;
        file.replace(name)
    }
}

/// The whole of a regular file beneath `dir` (None: absent), not through a link, at most
/// `limit` bytes (more is an error).
pub(super) fn read_bounded(dir: &Dir, rel: &str, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let file = match super::open::open_regular(dir, rel) {
        Ok(f) => f,
        Err(super::open::Opened::Absent) => return Ok(None),
        Err(super::open::Opened::Not(why)) => {
            return Err(std::io::Error::other(format!("{rel}: {why}")));
        }
    };
    let meta = file.metadata()?;
    if meta.len() > limit {
        return Err(std::io::Error::other(format!(
            "{rel} is not a regular file of at most {limit} bytes"
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}
