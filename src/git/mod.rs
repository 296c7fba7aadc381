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
mod host;
mod import;
pub(crate) mod refs;
mod shadow;
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
    /// `sh -c script` in the workspace root with `input` on stdin, stdout on `stdout` and
    /// `side` on descriptor 3; waits for it. Its exit code, or why it could not run.
    fn run_confined(
        &self,
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
}

/// One workspace's shadow gitdir and its sync with the operator's repository.
pub(crate) struct GitShadow {
    workspace: PathBuf,
    root: Dir,
    shadow: Shadow,
    agreed: Mutex<Agreed>,
}

/// The host paths the view needs to bind the shadow.
#[derive(Debug, Clone)]
pub(crate) struct ShadowPaths {
    pub shadow: PathBuf,
    /// Where the view binds it: `<workspace>/.git`.
    pub at: PathBuf,
    /// The operator's gitdir, when there is one, and where the view binds it read-only.
    pub operator: Option<PathBuf>,
    pub operator_at: PathBuf,
}

impl GitShadow {
    /// The shadow of `workspace` (canonical; `root` its handle), made and seeded from the
    /// operator's repository when new.
    pub(crate) fn open(workspace: &Path, root: Dir) -> std::io::Result<Self> {
        let (shadow, fresh) = Shadow::open(workspace)?;
        let operator_dir = operator_gitdir(&root);
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
                refused: None,
                shadow_seen: None,
                operator_seen: None,
            },
        };
        Ok(Self {
            workspace: workspace.to_path_buf(),
            root,
            shadow,
            agreed: Mutex::new(agreed),
        })
    }

    /// What the view binds (see [`ShadowPaths`]).
    pub(crate) fn paths(&self) -> ShadowPaths {
        let operator = self.workspace.join(".git");
        ShadowPaths {
            shadow: self.shadow.gitdir.clone(),
            at: operator.clone(),
            operator: operator_gitdir(&self.root).map(|_| operator),
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
        operator_gitdir(&self.root).is_some()
    }

    /// Before a call: what the operator moved on the host since the last agreement goes into
    /// the shadow (refs, `HEAD`, the index), unless the shadow moved it too (reported).
    pub(crate) fn before_call(&self) -> GuardReport {
        let mut report = GuardReport::default();
        let Some(dir) = operator_gitdir(&self.root) else {
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

/// The operator's gitdir when it is a repository: `.git` a directory (not a link) with `HEAD`.
fn operator_gitdir(root: &Dir) -> Option<Dir> {
    let dir = root.open_dir_nofollow(".git").ok()?;
    dir.symlink_metadata("HEAD").ok()?;
    Some(dir)
}
