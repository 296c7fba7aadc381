//! Git by construction: no call can write anything the operator's git reads as
//! configuration, hooks, worktree location, index, refs or object replacement.
//!
//! The sandbox's view binds a per-workspace **shadow gitdir** (`shadow`) read-write at
//! `<workspace>/.git`, over the operator's gitdir, which the view shows only read-only (as the
//! shadow's alternate object store). Every git write of a call lands in the shadow. After each
//! call or job, [`GitShadow::after_call`] **imports** into the operator's repository only data
//! (`import`): objects (sent as a pack by git run confined in the view, received by the host's
//! `git index-pack --strict`, which recomputes every hash and runs git's fsck checks), refs in
//! `refs/heads/*` and `refs/tags/*` (never `refs/replace/*`), `HEAD` as a branch or a commit,
//! and an index the host's git writes from the shadow index's tree. Before each call,
//! [`GitShadow::before_call`] brings what the operator moved on the host into the shadow. A
//! ref both sides moved is not imported and is reported; anything that cannot be imported is
//! refused as a whole (the call's result `denied`) and the operator's repository is left as
//! it was.
//!
//! Owns the shadow's lifetime, the record of what both sides last agreed on, and the reports.
//! Does not own building the view (`confine::sandbox_init::view`) or running confined processes
//! (`confine::sandbox_init` implements [`ConfinedGit`]).

pub(crate) mod bound;
mod direct;
mod host;
mod import;
pub(crate) mod index_file;
pub(crate) mod loose;
pub(crate) mod nested;
mod open;
mod operator_index;
mod ref_write;
pub(crate) mod refs;
mod repositories;
mod settings;
mod shadow;
pub(crate) mod vet;
pub(crate) use repositories::{Repositories, ViewHold};
pub(crate) use shadow::state_dir;

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cap_fs_ext::DirExt;
use cap_std::fs::Dir;

use refs::{Head, IndexMark, Oid, RepoState, read_state};
use shadow::Shadow;

/// What one sync or import found, for a call's result.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GuardReport {
    /// One sentence per finding, for the agent (what, why, what cordon did, what to do).
    pub notices: Vec<String>,
    /// Something was refused: the call's result is a `denied` error.
    pub refused: bool,
}

impl GuardReport {
    fn info(&mut self, text: String) {
        self.notices.push(text);
    }
    fn refuse(&mut self, text: String) {
        self.notices.push(text);
        self.refused = true;
    }
    pub fn extend(&mut self, other: GuardReport) {
        self.notices.extend(other.notices);
        self.refused |= other.refused;
    }
    pub fn is_empty(&self) -> bool {
        self.notices.is_empty()
    }
    /// A report of one refusal.
    pub fn refused(text: String) -> Self {
        Self {
            notices: vec![text],
            refused: true,
        }
    }

    /// Each finding as a server event for every session (they share the workspace):
    /// `warning` when something was refused, else `notice`. cordon's own sentences about
    /// refs and paths, never file contents.
    fn announce(&self) {
        let level = if self.refused {
            crate::events::Level::Warning
        } else {
            crate::events::Level::Notice
        };
        for notice in &self.notices {
            crate::events::emit(level, "git", serde_json::json!({ "message": notice }));
        }
    }
}

/// Runs a shell script confined, in a view that binds the shadow at `<workspace>/.git`.
pub(crate) trait ConfinedGit {
    /// `sh -c script` in the workspace directory `cwd` with `input` on stdin, stdout on `stdout` and
    /// `side` on descriptor 3; waits for it. Its exit code, or why it could not run.
    fn run_confined(
        &self,
        cwd: &Path,
        script: &str,
        input: &[u8],
        stdout: OwnedFd,
        side: OwnedFd,
    ) -> Result<i32, String>;
}

/// What both sides last agreed on, and what each looked like then.
#[derive(Debug, Default)]
struct Agreed {
    refs: BTreeMap<String, Oid>,
    head: Head,
    /// The shadow's whole state after the last import (None: look again).
    shadow_seen: Option<RepoState>,
    /// The operator's whole state after the last sync (None: look again).
    operator_seen: Option<RepoState>,
    /// The shadow's state whose import was last refused, and what was said: while the
    /// shadow stays so, [`GitShadow::refusal_in_force`] says it again.
    refused: Option<(RepoState, Vec<String>)>,
    /// The shadow's index mark when its index last matched the operator's.
    shadow_index: IndexMark,
    /// The operator's index mark then.
    operator_index: IndexMark,
    /// The tree of the operator's index when it had that mark, when cordon wrote it (None:
    /// ask git).
    operator_index_tree: Option<Oid>,
}

/// One repository's shadow gitdir and its sync with the operator's repository.
pub(crate) struct GitShadow {
    /// The repository's work tree (canonical): the workspace root, or a directory in it.
    workspace: PathBuf,
    /// Where that is in the workspace (empty for the root).
    rel: PathBuf,
    /// A handle on the work tree (for a bare repository, on the repository's directory).
    root: Dir,
    /// A bare repository: the directory is the gitdir (no `.git`, no index).
    bare: bool,
    shadow: Shadow,
    agreed: Mutex<Agreed>,
    /// The operator's index as cordon last wrote it, kept for the next import
    /// (`operator_index`).
    known_index: Mutex<operator_index::KnownIndex>,
}

/// The host paths the view needs to bind the shadow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShadowPaths {
    pub shadow: PathBuf,
    /// Where the view binds it: `<workspace>/.git`.
    pub at: PathBuf,
    /// The operator's gitdir, when there is one, and where the view binds it read-only.
    pub operator: Option<PathBuf>,
    pub operator_at: PathBuf,
}

impl GitShadow {
    /// The shadow of the repository whose work tree is `workspace` (canonical; `rel` in the
    /// workspace, `root` its handle), made and seeded from the operator's repository when
    /// new.
    pub(crate) fn open(
        workspace: &Path,
        rel: &Path,
        root: Dir,
        bare: bool,
    ) -> std::io::Result<Self> {
        let (shadow, fresh) = Shadow::open(workspace)?;
        let operator_dir = operator_gitdir(&root, bare);
        let operator = operator_dir.as_ref().map(read_state);
        if let (Some(dir), Some(op)) = (&operator_dir, &operator) {
            if fresh {
                shadow.seed(dir, &op.head)?;
                for (name, oid) in &op.refs {
                    shadow.set_ref(name, Some(oid))?;
                }
                shadow.copy_index(dir)?;
            }
            shadow.write_alternates()?;
        }
        let seen = read_state(shadow.dir());
        let agreed = match (&operator, fresh) {
            (Some(op), true) => Agreed {
                refs: op.refs.clone(),
                head: op.head.clone(),
                shadow_index: seen.index.clone(),
                operator_index: op.index.clone(),
                operator_index_tree: None,
                refused: None,
                shadow_seen: Some(seen),
                operator_seen: Some(op.clone()),
            },
            // A shadow from an earlier session: what it holds that the operator's repository
            // does not was refused or never imported; the operator's side wins at the first
            // call's start (`before_call`), index included.
            _ => Agreed {
                refs: seen.refs.clone(),
                head: seen.head.clone(),
                shadow_index: seen.index.clone(),
                operator_index: None,
                operator_index_tree: None,
                refused: None,
                shadow_seen: None,
                operator_seen: None,
            },
        };
        Ok(Self {
            workspace: workspace.to_path_buf(),
            rel: rel.to_path_buf(),
            root,
            bare,
            shadow,
            agreed: Mutex::new(agreed),
            known_index: Mutex::default(),
        })
    }

    /// The repository a call made at `rel` (work tree `workspace`, canonical; `root` its
    /// handle): its `.git` moved out of the workspace to become its shadow. The operator has
    /// none there now; the next import makes it (git's own `init`, no template) and brings the
    /// data over.
    pub(crate) fn adopt(workspace: &Path, rel: &Path, root: Dir) -> std::io::Result<Self> {
        let shadow = Shadow::adopt(workspace, &root, c".git")?;
        Ok(Self::adopted(workspace, rel, root, false, shadow))
    }

    /// The bare repository a call made at `rel` (`name` beneath the handle `parent`; its
    /// canonical path `workspace`): the directory itself moved out of the workspace to become
    /// the shadow, and an empty directory made in its place for the view to bind it on (the
    /// next import makes the operator's bare repository there).
    pub(crate) fn adopt_bare(
        workspace: &Path,
        rel: &Path,
        parent: &Dir,
        name: &std::ffi::CStr,
    ) -> std::io::Result<Self> {
        use std::os::fd::AsFd;
        let shadow = Shadow::adopt(workspace, parent, name)?;
        rustix::fs::mkdirat(parent.as_fd(), name, rustix::fs::Mode::from_raw_mode(0o755))?;
        let fd = nested::open_beneath(
            parent.as_fd(),
            Path::new(std::ffi::OsStr::new(
                name.to_str()
                    .map_err(|_| std::io::Error::other("a name that is not UTF-8"))?,
            )),
        )?;
        let root = Dir::from_std_file(std::fs::File::from(fd));
        Ok(Self::adopted(workspace, rel, root, true, shadow))
    }

    fn adopted(workspace: &Path, rel: &Path, root: Dir, bare: bool, shadow: Shadow) -> Self {
        Self {
            workspace: workspace.to_path_buf(),
            rel: rel.to_path_buf(),
            root,
            bare,
            shadow,
            agreed: Mutex::new(Agreed::default()),
            known_index: Mutex::default(),
        }
    }

    /// Empties the operator's side of an adopted repository (`.git` in the work tree, or the
    /// bare repository's directory), keeping the directory the view binds on: what is there
    /// was written by a process whose view did not bind the shadow, never by the operator
    /// (cordon moved the repository out and has not made the operator's yet).
    fn clear_operator_side(&self) -> std::io::Result<()> {
        use std::os::fd::AsFd;
        // A descriptor that reads (the handles cap-std keeps may be `O_PATH`, which cannot
        // list a directory).
        let target = match nested::open_beneath(
            self.root.as_fd(),
            Path::new(if self.bare { "" } else { ".git" }),
        ) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        crate::confine::scratch::empty_dir(&target)
    }

    /// The operator's gitdir when it is a repository (see [`operator_gitdir`]).
    fn operator_dir(&self) -> Option<Dir> {
        operator_gitdir(&self.root, self.bare)
    }

    /// The gitdir as the host's git is given it (see [`Self::host_worktree`]).
    fn host_gitdir(&self) -> PathBuf {
        if self.bare {
            self.host_worktree()
        } else {
            self.host_worktree().join(".git")
        }
    }

    /// The work tree as the host's git is given it: for a repository below the root, the
    /// directory the server holds a handle on (`/proc/<pid>/fd/<n>`), not a path a renamed or
    /// replaced parent could steer elsewhere.
    fn host_worktree(&self) -> PathBuf {
        if self.rel.as_os_str().is_empty() {
            return self.workspace.clone();
        }
        use std::os::fd::{AsFd, AsRawFd};
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.root.as_fd().as_raw_fd()
        ))
    }

    /// What the view binds (see [`ShadowPaths`]).
    pub(crate) fn paths(&self) -> ShadowPaths {
        let operator = if self.bare {
            self.workspace.clone()
        } else {
            self.workspace.join(".git")
        };
        ShadowPaths {
            shadow: self.shadow.gitdir.clone(),
            at: operator.clone(),
            operator: self.operator_dir().map(|_| operator),
            operator_at: self.shadow.operator_at.clone(),
        }
    }

    /// Points the shadow's alternate at the operator's objects (after the import made the
    /// operator's repository, for the next view, which binds it).
    pub(crate) fn refresh_alternates(&self) -> std::io::Result<()> {
        self.shadow.write_alternates()
    }

    /// Whether the operator has a repository (a `.git` directory with a `HEAD`).
    pub(crate) fn operator_has_repository(&self) -> bool {
        self.operator_dir().is_some()
    }

    /// Before a call: what the operator moved on the host since the last agreement goes into
    /// the shadow (refs, `HEAD`, the index), unless the shadow moved it too (reported).
    pub(crate) fn before_call(&self) -> GuardReport {
        let mut report = GuardReport::default();
        let Some(dir) = self.operator_dir() else {
            return report;
        };
        let Ok(mut agreed) = self.agreed.lock() else {
            return report;
        };
        let op = read_state(&dir);
        if agreed.operator_seen.as_ref() == Some(&op) {
            return report;
        }
        if let Err(e) =
            import::operator_to_shadow(&self.shadow, &dir, &op, &mut agreed, &mut report)
        {
            report.info(format!(
                "cordon could not bring the operator's latest git changes into the sandbox \
                 ({e}); the sandbox's repository may lag behind the host's"
            ));
        }
        report.announce();
        report
    }

    /// After a call or job: imports what the shadow holds that the operator's repository does
    /// not (see the module note). `confined` runs the export.
    pub(crate) fn after_call(&self, confined: &dyn ConfinedGit) -> GuardReport {
        let started = std::time::Instant::now();
        let mut report = GuardReport::default();
        let Ok(mut agreed) = self.agreed.lock() else {
            report.refuse("cordon's git import is unavailable (a previous import panicked)".into());
            return report;
        };
        let sh = read_state(self.shadow.dir());
        if agreed.shadow_seen.as_ref() != Some(&sh) {
            import::shadow_to_operator(self, &sh, &mut agreed, confined, &mut report);
            agreed.refused = report.refused.then(|| (sh.clone(), report.notices.clone()));
            agreed.shadow_seen = Some(sh);
            report.announce();
        }
        // What `benches/git_import.py` reads (CORDON_LOG=debug): the import's own cost.
        tracing::debug!(
            micros = started.elapsed().as_micros() as u64,
            "git import after a call"
        );
        report
    }
}

impl GitShadow {
    /// The refusal of the shadow's current state, when its import was refused and the shadow
    /// has not changed since (a job's periodic import ends the job on it, whichever job's
    /// or call's import saw it first).
    pub(crate) fn refusal_in_force(&self) -> Option<GuardReport> {
        let agreed = self.agreed.lock().ok()?;
        let (state, notices) = agreed.refused.as_ref()?;
        (read_state(self.shadow.dir()) == *state).then(|| GuardReport {
            notices: notices.clone(),
            refused: true,
        })
    }
}

/// The operator's gitdir when it is a repository: `.git` a directory (not a link) with `HEAD`,
/// or for a bare repository `root` itself with `HEAD`.
fn operator_gitdir(root: &Dir, bare: bool) -> Option<Dir> {
    let dir = if bare {
        root.try_clone().ok()?
    } else {
        root.open_dir_nofollow(".git").ok()?
    };
    dir.symlink_metadata("HEAD").ok()?;
    Some(dir)
}
