//! Every repository of one workspace and its shadow: the root's, each nested repository the
//! operator has (a `.git` directory below the root that is not a gitlink of the operator's
//! index, found when the server starts), and each one a call or job makes, which becomes a
//! shadow of its own at the end of the call that made it (`adopt`): its `.git` is moved out
//! of the workspace into cordon's state, and the next import makes the operator's repository
//! there with git's own `init` and brings over only data, as for the root. From then on the
//! view binds that shadow read-write at `<dir>/.git` over the operator's, exactly as the
//! root's.
//!
//! A running job cannot be moved from under: a repository found while a job runs ends the job
//! (and the job's end makes it a shadow), and a job whose view predates a shadow (it could
//! still write that operator's gitdir) ends at its next import.
//!
//! Owns the set of shadows, what was found and not yet made one, and the order of the work.
//! Does not own one repository's sync (`GitShadow`), the search (`nested`) or views.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cap_std::fs::Dir;

use super::nested::{self, DotGit};
use super::{ConfinedGit, GitShadow, GuardReport, ShadowPaths};

/// Most repositories below the root that get a shadow of their own: each is two binds and a
/// pin in every view, and an import after every call. The operator's beyond it are bound
/// read-only; a call's beyond it are moved out of the workspace and refused.
pub(crate) const MAX_NESTED: usize = 256;

/// The shadows of one workspace's repositories.
pub(crate) struct Repositories {
    workspace: PathBuf,
    ws_root: Dir,
    root: GitShadow,
    /// Each repository below the root that has a shadow, by its directory.
    nested: Mutex<BTreeMap<PathBuf, Arc<GitShadow>>>,
    /// Repositories found while a job ran, made shadows when nothing runs that could write
    /// them (a job's end, the next call's end).
    found: Mutex<BTreeSet<PathBuf>>,
    /// Directories whose `.git` is a gitfile a call made into the root's gitdir (a worktree's),
    /// looked at again at every call's end: rewritten or given a second name, it is refused.
    gitfiles: Mutex<BTreeSet<PathBuf>>,
    /// What of the operator's the view binds read-only over itself instead of a shadow: the
    /// gitfiles below the root when the server started (worktrees, submodules the index does
    /// not record), and the gitdirs of repositories beyond [`MAX_NESTED`] or whose shadow
    /// could not be made.
    read_only: BTreeSet<PathBuf>,
    /// Bumped at every adoption: a view built before it does not bind the new shadows.
    generation: AtomicU64,
    /// Confined processes still running, by the generation of their view ([`ViewHold`]).
    running: Mutex<BTreeMap<u64, usize>>,
    /// Adopted repositories whose gitdir in the workspace no process of an older view can
    /// write any more only once none runs: until then nothing is imported there, and then
    /// whatever such a process left there is cleared first (by generation of adoption).
    unsettled: Mutex<BTreeMap<PathBuf, u64>>,
    finder: nested::Finder,
}

impl Repositories {
    /// The root's shadow and one for every nested repository the operator has (made and
    /// seeded from it when new). `root` is the workspace (canonical) as a handle. `watch`:
    /// new repositories are found through fanotify where it can be had (a server), not by a
    /// walk at each look (one command).
    pub(crate) fn open(workspace: &Path, root: Dir, watch: bool) -> std::io::Result<Self> {
        let finder = nested::Finder::new(root.as_fd(), workspace, watch);
        let shadow = GitShadow::open(workspace, Path::new(""), root.try_clone()?, false)?;
        let gitlinked = super::bound::gitlinked_paths(&root);
        let mut nested = BTreeMap::new();
        let mut read_only = BTreeSet::new();
        let started = std::time::Instant::now();
        let found = nested::find_all(root.as_fd());
        tracing::debug!(
            micros = started.elapsed().as_micros() as u64,
            found = found.len(),
            "the workspace's repositories found at start"
        );
        for rel in found {
            if gitlinked.contains(&rel) {
                continue; // bound read-only as it is (`bound`)
            }
            let Ok(fd) = nested::open_beneath(root.as_fd(), &rel) else {
                continue;
            };
            let bare = match nested::dot_git(fd.as_fd()) {
                DotGit::Directory => false,
                DotGit::Bare => true,
                DotGit::File(..) => {
                    read_only.insert(rel.join(".git"));
                    continue;
                }
                DotGit::Other => continue,
            };
            let gitdir = if bare { rel.clone() } else { rel.join(".git") };
            if nested.len() >= MAX_NESTED {
                read_only.insert(gitdir);
                continue;
            }
            let dir = Dir::from_std_file(std::fs::File::from(fd));
            match GitShadow::open(&workspace.join(&rel), &rel, dir, bare) {
                Ok(g) => {
                    nested.insert(rel, Arc::new(g));
                }
                Err(e) => {
                    tracing::warn!(
                        "cannot make the shadow gitdir of the repository at `{}` ({e}): the \
                         view binds it read-only",
                        rel.display()
                    );
                    read_only.insert(gitdir);
                }
            }
        }
        Ok(Self {
            workspace: workspace.to_path_buf(),
            ws_root: root,
            root: shadow,
            nested: Mutex::new(nested),
            found: Mutex::new(BTreeSet::new()),
            gitfiles: Mutex::new(BTreeSet::new()),
            read_only,
            generation: AtomicU64::new(0),
            running: Mutex::new(BTreeMap::new()),
            unsettled: Mutex::new(BTreeMap::new()),
            finder,
        })
    }

    /// What the view binds for the root's repository.
    pub(crate) fn root_paths(&self) -> ShadowPaths {
        self.root.paths()
    }

    /// What the view binds for each nested repository, by its directory: those whose
    /// directory is still there, each with a directory at `<dir>/.git` to bind on (made beneath
    /// the workspace's handle when the operator removed it).
    pub(crate) fn nested_paths(&self) -> BTreeMap<PathBuf, ShadowPaths> {
        let Ok(mut nested) = self.nested.lock() else {
            return BTreeMap::new();
        };
        nested.retain(|rel, g| {
            let Ok(fd) = nested::open_beneath(self.ws_root.as_fd(), rel) else {
                return false;
            };
            if g.bare {
                return true; // the directory is the mount point
            }
            match nested::dot_git(fd.as_fd()) {
                DotGit::Directory => true,
                DotGit::File(..) => false,
                DotGit::Bare | DotGit::Other => {
                    rustix::fs::mkdirat(&fd, c".git", rustix::fs::Mode::from_raw_mode(0o755))
                        .is_ok()
                }
            }
        });
        if let Ok(mut unsettled) = self.unsettled.lock() {
            unsettled.retain(|rel, _| nested.contains_key(rel));
        }
        nested
            .iter()
            .map(|(rel, g)| (rel.clone(), g.paths()))
            .collect()
    }

    /// What the view binds read-only over itself instead of a shadow (see the field).
    pub(crate) fn read_only(&self) -> &BTreeSet<PathBuf> {
        &self.read_only
    }

    /// The nested repositories that have a shadow.
    pub(crate) fn nested_dirs(&self) -> BTreeSet<PathBuf> {
        self.nested
            .lock()
            .map(|n| n.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Points every shadow's alternate at its operator's objects (see
    /// [`GitShadow::refresh_alternates`]).
    pub(crate) fn refresh_alternates(&self) -> std::io::Result<()> {
        if self.root.operator_has_repository() {
            self.root.refresh_alternates()?;
        }
        for g in self.shadows() {
            if g.operator_has_repository() {
                g.refresh_alternates()?;
            }
        }
        Ok(())
    }

    fn shadows(&self) -> Vec<Arc<GitShadow>> {
        self.nested
            .lock()
            .map(|n| n.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Before a call: every repository's [`GitShadow::before_call`].
    pub(crate) fn before_call(&self) -> GuardReport {
        let mut report = self.root.before_call();
        for g in self.shadows() {
            report.extend(g.before_call());
        }
        report
    }

    /// Moves the gitdir of the repository a call made at `rel` (`fd` its directory: `.git`
    /// in it, or the directory itself for a bare repository) out of the workspace, to where
    /// its shadow lives ([`GitShadow::adopt`], [`GitShadow::adopt_bare`]).
    fn move_out(&self, rel: &Path, fd: std::os::fd::OwnedFd) -> std::io::Result<GitShadow> {
        let workspace = self.workspace.join(rel);
        if nested::dot_git(fd.as_fd()) != DotGit::Bare {
            return GitShadow::adopt(&workspace, rel, Dir::from_std_file(std::fs::File::from(fd)));
        }
        let parent =
            nested::open_beneath(self.ws_root.as_fd(), rel.parent().unwrap_or(Path::new("")))?;
        let name = rel
            .file_name()
            .and_then(|n| std::ffi::CString::new(n.as_encoded_bytes()).ok())
            .ok_or_else(|| std::io::Error::other("a repository with no name"))?;
        GitShadow::adopt_bare(
            &workspace,
            rel,
            &Dir::from_std_file(std::fs::File::from(parent)),
            &name,
        )
    }

    /// Moves the gitdir of a repository a call made at `rel` (`fd` its directory) out of the
    /// workspace when no more shadows may be made: it goes where its shadow would be, is not
    /// bound, and the sentence for the refusal says where.
    fn set_aside(&self, rel: &Path, fd: std::os::fd::OwnedFd) -> String {
        let shown = rel.display();
        let moved = self.move_out(rel, fd);
        match moved {
            Ok(g) => format!(
                "the workspace already has {MAX_NESTED} git repositories with shadows of their \
                 own: the one made at `{shown}` was moved out of the workspace (to {}) and is \
                 not available in the sandbox; make fewer repositories, or ask the operator to \
                 raise the limit",
                g.paths().shadow.display()
            ),
            Err(e) => format!(
                "the workspace already has {MAX_NESTED} git repositories with shadows of their \
                 own, and the one made at `{shown}` could not be moved out of the workspace \
                 ({e}); remove it (the operator's git would read its config)"
            ),
        }
    }

    /// After a call or job, run through `confined` whose view binds the nested repositories
    /// `in_view`: each of their imports ([`GitShadow::after_call`]).
    pub(crate) fn after_call(
        &self,
        confined: &dyn ConfinedGit,
        in_view: &BTreeSet<PathBuf>,
    ) -> GuardReport {
        let mut report = self.root.after_call(confined);
        for g in self.shadows() {
            if !in_view.contains(&g.rel) {
                continue;
            }
            let unsettled = self
                .unsettled
                .lock()
                .ok()
                .and_then(|u| u.get(&g.rel).copied());
            if let Some(generation) = unsettled {
                if self.older_running(generation) {
                    tracing::debug!(rel = %g.rel.display(), "git import deferred: a process of an older view runs");
                    continue; // imported once those processes are gone
                }
                tracing::debug!(rel = %g.rel.display(), "clearing the operator's side of an adopted repository");
                if let Err(e) = g.clear_operator_side() {
                    report.refuse(format!(
                        "cordon could not clear `{}` of what a process started before it got a \
                         shadow gitdir wrote there ({e}); remove it by hand",
                        g.rel.display()
                    ));
                    continue;
                }
                if let Ok(mut u) = self.unsettled.lock() {
                    u.remove(&g.rel);
                }
            }
            report.extend(g.after_call(confined));
        }
        report
    }

    /// The generation of the shadows a view built now binds.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Counts a confined process of a view of `generation` as running until the hold drops.
    pub(crate) fn hold(self: &Arc<Self>, generation: u64) -> ViewHold {
        if let Ok(mut running) = self.running.lock() {
            *running.entry(generation).or_default() += 1;
        }
        ViewHold {
            repositories: Arc::clone(self),
            generation,
        }
    }

    /// Whether a process of a view older than `generation` still runs.
    fn older_running(&self, generation: u64) -> bool {
        self.running
            .lock()
            .map(|r| r.range(..generation).any(|(_, n)| *n > 0))
            .unwrap_or(true)
    }

    /// A refusal that still stands in any shadow (see [`GitShadow::refusal_in_force`]).
    pub(crate) fn refusal_in_force(&self) -> Option<GuardReport> {
        if let Some(r) = self.root.refusal_in_force() {
            return Some(r);
        }
        self.shadows().iter().find_map(|g| g.refusal_in_force())
    }

    /// Repositories below the root that no shadow covers yet: what the finder reports
    /// changed, and what was found earlier and is still there. Gitlinks of the operator's
    /// index (bound read-only) and gitfiles that lead into the root's gitdir (a worktree's, a
    /// submodule's: on the host they name the operator's gitdir, where only data is
    /// imported) are not.
    pub(crate) fn discover(&self) -> BTreeSet<PathBuf> {
        let changed = self.finder.changed(self.ws_root.as_fd());
        let (Ok(mut found), Ok(mut gitfiles)) = (self.found.lock(), self.gitfiles.lock()) else {
            return BTreeSet::new();
        };
        found.extend(changed);
        found.extend(gitfiles.iter().cloned());
        gitfiles.clear();
        if found.is_empty() {
            return BTreeSet::new(); // the common case: nothing named a repository
        }
        let known = self.nested_dirs();
        let gitlinked = super::bound::gitlinked_paths(&self.ws_root);
        found.retain(|rel| {
            if known.contains(rel)
                || gitlinked.contains(rel)
                || self.read_only.contains(&rel.join(".git"))
                || self.read_only.contains(rel)
            {
                return false;
            }
            let Ok(fd) = nested::open_beneath(self.ws_root.as_fd(), rel) else {
                return false;
            };
            match nested::dot_git(fd.as_fd()) {
                DotGit::Directory | DotGit::Bare => true,
                DotGit::File(target, links) => {
                    let vouched = links == 1
                        && nested::gitfile_into_root_gitdir(&self.workspace, rel, &target);
                    if vouched {
                        gitfiles.insert(rel.clone());
                    }
                    !vouched
                }
                DotGit::Other => false,
            }
        });
        found.clone()
    }

    /// Makes each repository in `found` a shadow (nothing may be running that could write
    /// it): a `.git` directory is moved out of the workspace; a gitfile naming a gitdir
    /// cordon cannot vouch for is removed (refused).
    pub(crate) fn adopt(&self, found: &BTreeSet<PathBuf>) -> GuardReport {
        let mut report = GuardReport::default();
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let settle = |rel: &PathBuf| {
            if let Ok(mut u) = self.unsettled.lock() {
                u.insert(rel.clone(), generation);
            }
        };
        for rel in found {
            let shown = rel.display();
            let Ok(fd) = nested::open_beneath(self.ws_root.as_fd(), rel) else {
                continue;
            };
            let full = self.nested.lock().map_or(true, |n| n.len() >= MAX_NESTED);
            if full
                && matches!(
                    nested::dot_git(fd.as_fd()),
                    DotGit::Directory | DotGit::Bare
                )
            {
                report.refuse(self.set_aside(rel, fd));
                continue;
            }
            match nested::dot_git(fd.as_fd()) {
                kind @ (DotGit::Directory | DotGit::Bare) => {
                    let (what, operators, held) = if kind == DotGit::Bare {
                        (
                            "bare git repository",
                            format!("`{shown}`"),
                            "commits, branches, tags, HEAD",
                        )
                    } else {
                        (
                            "git repository",
                            format!("`{shown}/.git`"),
                            "commits, branches, tags, HEAD, index",
                        )
                    };
                    match self.move_out(rel, fd) {
                        Ok(g) => {
                            settle(rel);
                            if let Ok(mut nested) = self.nested.lock() {
                                nested.insert(rel.clone(), Arc::new(g));
                            }
                            report.info(format!(
                                "the {what} made at `{shown}` is now kept in a shadow gitdir, \
                                 like the workspace's own: git in the sandbox works on it as \
                                 before, and the operator's {operators} holds only what cordon \
                                 imported from it ({held}), never its config or hooks"
                            ));
                        }
                        Err(e) => report.refuse(format!(
                            "the {what} made at `{shown}` could not be moved into a shadow \
                             gitdir ({e}); remove {operators} (the operator's git would read \
                             its config)"
                        )),
                    }
                }
                DotGit::File(target, links) => {
                    let removed = rustix::fs::unlinkat(&fd, c".git", rustix::fs::AtFlags::empty());
                    let why = if links > 1 {
                        format!("had a second name (a hard link, {links} in all)")
                    } else {
                        format!(
                            "named the gitdir `{target}`, which is not in this workspace's repository"
                        )
                    };
                    report.refuse(format!(
                        "`{shown}/.git` {why}: the operator's git would read what it leads to. \
                         cordon {} it; make worktrees with `git worktree add` and repositories \
                         with `git init`/`git clone` (they get a shadow of their own)",
                        if removed.is_ok() {
                            "removed"
                        } else {
                            "could not remove"
                        }
                    ));
                }
                DotGit::Other => {}
            }
        }
        if let Ok(mut pending) = self.found.lock() {
            pending.retain(|rel| !found.contains(rel));
        }
        report.announce();
        report
    }
}

/// A running confined process, counted by the generation of its view (see
/// [`Repositories::hold`]): an adopted repository's gitdir in the workspace is imported into
/// only once no process of an older view runs.
pub(crate) struct ViewHold {
    repositories: Arc<Repositories>,
    generation: u64,
}

impl Drop for ViewHold {
    fn drop(&mut self) {
        if let Ok(mut running) = self.repositories.running.lock()
            && let Some(n) = running.get_mut(&self.generation)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                running.remove(&self.generation);
            }
        }
    }
}
