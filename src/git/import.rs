//! The two directions of the sync between the operator's repository and the shadow.
//!
//! Operator → shadow (before a call): refs, `HEAD` and the index the operator moved on the
//! host are written into the shadow by the server (the operator's data is trusted; the
//! shadow's writes go beneath a handle on it, never through a link).
//!
//! Shadow → operator (after a call): only data crosses. The shadow's refs and `HEAD` are read
//! by `refs` (strictly, bounded). Missing objects are packed by git **run confined** in the
//! view (`git pack-objects`, which reads the shadow as a repository, its config included) and
//! received by the host's `git index-pack --strict --fix-thin`, which recomputes every object
//! name from the bytes and runs git's fsck checks (tree entries named `.git` or `..`, bad
//! modes, hostile `.gitmodules`). The host then checks that every imported tip has the type
//! its ref needs and that everything it reaches is there, refuses a new gitlink (host git
//! would enter that directory and read its config), and only then moves refs in one
//! `git update-ref --stdin` transaction whose old values are the agreed ones. The index
//! follows the tree of the shadow's index: only the entries that differ from the tree of the
//! operator's index (which cordon remembers while the operator leaves it alone) are changed,
//! under git's own `index.lock` (the operator's stat data of every other entry is kept): by
//! cordon's own edit (`operator_index`) where the in-process checks found the changes, else by
//! the host's `git update-index --index-info`; a repository with no index gets one from `git
//! read-tree`, renamed into place.
//!
//! The ordinary case (`direct`) never runs git: new commits on a branch, loose in the shadow,
//! read and vetted by the server itself, written as loose objects, the branch moved under
//! git's ref lock (`ref_write`) and the index edited (`operator_index`).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;

use cap_std::fs::Dir;

use super::direct::{self, Direct};
use super::host::{self, HostGitError};
use super::index_file;
use super::operator_index::{self, EditError, KnownIndex};
use super::ref_write;
use super::refs::{Head, IndexMark, Oid, RepoState, is_oid, read_state};
use super::settings::Settings;
use super::shadow::Shadow;
use super::{Agreed, ConfinedGit, GitShadow, GuardReport};

/// Git's mode for a gitlink (a submodule's commit).
const GITLINK: &str = "160000";

/// Why an import stopped: each a sentence for the agent.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("{0}")]
    Host(#[from] HostGitError),
    #[error("{0}")]
    Plain(String),
}

pub(super) fn operator_to_shadow(
    shadow: &Shadow,
    operator: &Dir,
    op: &RepoState,
    agreed: &mut Agreed,
    report: &mut GuardReport,
) -> std::io::Result<()> {
    let sh = read_state(shadow.dir());
    let names: BTreeSet<String> = op.refs.keys().chain(agreed.refs.keys()).cloned().collect();
    for name in names {
        let (o, base, s) = (
            op.refs.get(&name),
            agreed.refs.get(&name).cloned(),
            sh.refs.get(&name),
        );
        if o == base.as_ref() {
            continue;
        }
        if s == base.as_ref() {
            shadow.set_ref(&name, o)?;
        } else if s != o {
            report.info(format!(
                "`{name}` moved both on the host and in the sandbox since cordon last synced \
                 them: the sandbox keeps its own value; reconcile them by hand (e.g. fetch the \
                 sandbox's commit under another branch name)"
            ));
            continue;
        }
        match o {
            Some(oid) => agreed.refs.insert(name, oid.clone()),
            None => agreed.refs.remove(&name),
        };
    }
    if op.head != agreed.head {
        if sh.head == agreed.head {
            shadow.set_head(&op.head)?;
            agreed.head = op.head.clone();
        } else if sh.head == op.head {
            agreed.head = op.head.clone();
        }
    }
    if op.index != agreed.operator_index {
        let sh_index = read_state(shadow.dir()).index;
        if sh_index == agreed.shadow_index {
            shadow.copy_index(operator)?;
            agreed.shadow_index = read_state(shadow.dir()).index;
        }
        agreed.operator_index = op.index.clone();
        agreed.operator_index_tree = None;
    }
    agreed.operator_seen = Some(op.clone());
    agreed.shadow_seen = None;
    Ok(())
}

/// A ref the shadow moved since the agreement: (name, agreed value, shadow's value).
type Move = (String, Option<Oid>, Option<Oid>);

pub(super) fn shadow_to_operator(
    git: &GitShadow,
    sh: &RepoState,
    agreed: &mut Agreed,
    confined: &dyn ConfinedGit,
    report: &mut GuardReport,
) {
    if !sh.unreadable.is_empty() {
        report.refuse(format!(
            "the sandbox's git repository holds entries git does not write, so cordon imported \
             nothing into the operator's repository: {}; remove them inside the sandbox \
             (e.g. `rm .git/<path>`) and run git again",
            sh.unreadable.join("; ")
        ));
        return;
    }
    if !sh.replace.is_empty() {
        report.refuse(format!(
            "the sandbox's repository has replace refs ({}), which change what `git show` and \
             `git log -p` display; cordon never imports them and imported nothing; remove \
             them with `git replace -d <object>`",
            sh.replace.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
        return;
    }
    let moves: Vec<Move> = sh
        .refs
        .keys()
        .chain(agreed.refs.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter_map(|name| {
            let (base, s) = (agreed.refs.get(name), sh.refs.get(name));
            (base != s).then(|| (name.clone(), base.cloned(), s.cloned()))
        })
        .collect();
    let head_moved = sh.head != agreed.head && sh.head != Head::Absent;
    let index_moved = sh.index != agreed.shadow_index && sh.index.is_some();
    if moves.is_empty() && !head_moved && !index_moved {
        return;
    }
    let moved = Moved {
        refs: &moves,
        head: head_moved,
        index: index_moved,
    };
    match import(git, sh, moved, agreed, confined, report) {
        Ok(()) => {}
        Err(e) => report.refuse(format!(
            "cordon did not import this call's git changes into the operator's repository, \
             which is unchanged: {e}"
        )),
    }
}

/// How long each step of an import took, for the server's debug log (`benches/git_import.py`
/// prints it when an import is slow to explain).
struct Steps {
    last: std::time::Instant,
    taken: Vec<(&'static str, std::time::Duration)>,
}

impl Steps {
    fn new() -> Self {
        Self {
            last: std::time::Instant::now(),
            taken: Vec::new(),
        }
    }
    fn mark(&mut self, step: &'static str) {
        let now = std::time::Instant::now();
        self.taken.push((step, now - self.last));
        self.last = now;
    }
}

impl std::fmt::Display for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (step, took)) in self.taken.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{step}={}µs", took.as_micros())?;
        }
        Ok(())
    }
}

/// What the shadow moved since the agreement.
struct Moved<'a> {
    refs: &'a [Move],
    head: bool,
    index: bool,
}

/// What of the shadow's moves the operator did not also move: what an import may write.
struct Plan<'a> {
    refs: Vec<&'a Move>,
    head: bool,
    index: bool,
    /// The objects the moved refs and a detached HEAD name, each with the type it needs.
    wanted: Vec<(Oid, &'static str)>,
}

/// Imports the shadow's moves into the operator's repository: reconcile them with what the
/// operator moved, bring the objects over, check everything, then write refs, HEAD and index.
fn import(
    git: &GitShadow,
    sh: &RepoState,
    moved: Moved<'_>,
    agreed: &mut Agreed,
    confined: &dyn ConfinedGit,
    report: &mut GuardReport,
) -> Result<(), Refusal> {
    let host_worktree = git.host_worktree();
    let ws = host_worktree.as_path();
    let gitdir = git.host_gitdir();
    if git.operator_dir().is_none() {
        create_repository(&gitdir, ws, sh, git.bare)?;
        // Its `HEAD` is cordon's doing, not a move of the operator's to keep.
        if let Some(made) = git.operator_dir() {
            agreed.head = read_state(&made).head;
        }
    }
    let operator = git
        .operator_dir()
        .ok_or_else(|| Refusal::Plain("the operator's `.git` is not a directory".into()))?;
    let op = read_state(&operator);
    let settings = Settings::read(&operator);
    let plan = reconcile(sh, &op, moved, agreed, report);
    let mut steps = Steps::new();
    // The tree of the operator's index: the one cordon wrote there, while the operator has
    // not changed it since (no `write-tree` over every entry then).
    let known = agreed
        .operator_index_tree
        .clone()
        .filter(|_| op.index.is_some() && op.index == agreed.operator_index);
    let mut op = op;
    let checked = match check_directly(
        git,
        &operator,
        &op,
        settings.hash,
        &plan,
        known.as_ref(),
        &mut steps,
    ) {
        Ok((odb, checked, rewrote_index)) => {
            // `git write-tree` stored the tree it computed in the operator's index: the
            // index the edit starts from is that one (its entries unchanged).
            if rewrote_index {
                op.index = super::refs::index_mark(&operator);
            }
            Some((odb, checked))
        }
        Err(Direct::Refuse(why)) => return Err(Refusal::Plain(why)),
        Err(Direct::Fallback(why)) => {
            tracing::debug!(%why, "git import by git run confined");
            None
        }
    };
    steps.mark("checks");
    let (tree, index_diff) = match checked {
        Some((odb, checked)) => {
            write_objects(&odb, checked.objects)?;
            steps.mark("objects");
            let tree = checked.index.as_ref().map(|ix| ix.tree.to_string());
            (tree, checked.index.map(IndexDiff::Changes))
        }
        None => bring_confined(git, &operator, &op, &plan, known, confined, &mut steps)?,
    };
    // Everything checked: move the refs in one transaction, then HEAD, then the index.
    move_refs(
        &operator, &gitdir, ws, &plan.refs, &op.head, settings, agreed,
    )?;
    steps.mark("refs");
    if plan.head {
        let mut cmd = host::command(&gitdir, ws);
        match &sh.head {
            Head::Branch(name) => cmd.args(["symbolic-ref", "HEAD", name]),
            Head::Detached(oid) => cmd.args(["update-ref", "--no-deref", "HEAD", oid]),
            Head::Absent => unreachable!("head_moved excludes an absent HEAD"),
        };
        host::run(cmd, "set HEAD", None)?;
        agreed.head = sh.head.clone();
    }
    if let Some(tree) = &tree {
        let mut known = git
            .known_index
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let written = write_index(
            &operator,
            &gitdir,
            ws,
            tree,
            index_diff.as_ref(),
            OperatorIndex {
                mark: &op.index,
                skip_hash: settings.skip_index_hash,
                known: &mut known,
            },
        )?;
        agreed.shadow_index = sh.index.clone();
        agreed.operator_index = written;
        agreed.operator_index_tree = Some(tree.clone());
        steps.mark("index");
    }
    tracing::debug!(steps = %steps, "git import steps");
    agreed.operator_seen = None;
    Ok(())
}

/// The confined path: the objects `plan` needs that the operator lacks, packed by git run
/// confined and received by the host's `index-pack --strict`, then checked by the host's
/// git (types, connectivity, new gitlinks). Returns the index's new tree and its diff.
fn bring_confined(
    git: &GitShadow,
    operator: &Dir,
    op: &RepoState,
    plan: &Plan<'_>,
    known: Option<Oid>,
    confined: &dyn ConfinedGit,
    steps: &mut Steps,
) -> Result<(Option<Oid>, Option<IndexDiff>), Refusal> {
    let (gitdir, worktree) = (git.host_gitdir(), git.host_worktree());
    let ws = worktree.as_path();
    let present = types(&gitdir, ws, plan.wanted.iter().map(|(o, _)| o))?;
    let missing: Vec<&Oid> = plan
        .wanted
        .iter()
        .map(|(o, _)| o)
        .filter(|o| !present.iter().any(|(p, t)| p == *o && t != "missing"))
        .collect();
    let tips: BTreeSet<&Oid> = op.refs.values().collect();
    let mut tree = None;
    if !missing.is_empty() || plan.index {
        tree = export(&gitdir, ws, &git.rel, &missing, &tips, plan.index, confined)?;
        steps.mark("export");
    }
    verify_objects(&gitdir, ws, &plan.wanted, &missing, tree.as_ref())?;
    steps.mark("verify");
    let index_diff =
        refuse_new_gitlinks(&gitdir, ws, operator, &plan.wanted, tree.as_ref(), known)?;
    steps.mark("gitlinks");
    Ok((tree, index_diff))
}

/// The in-process checks (`direct`) of what `plan` imports, with the operator's object
/// store they read (which then takes the new objects).
fn check_directly(
    git: &GitShadow,
    operator: &Dir,
    op: &RepoState,
    hash: gix_hash::Kind,
    plan: &Plan<'_>,
    known: Option<&Oid>,
    steps: &mut Steps,
) -> Result<(gix_odb::Handle, direct::Checked, bool), Direct> {
    let fallback = |why: String| Direct::Fallback(why);
    let id = |hex: &str| {
        gix_hash::ObjectId::from_hex(hex.as_bytes())
            .map_err(|e| fallback(format!("`{hex}` is not an object name: {e}")))
    };
    let (gitdir, worktree) = (git.host_gitdir(), git.host_worktree());
    let odb = gix_odb::at(gitdir.join("objects"), hash)
        .map_err(|e| fallback(format!("the operator's object store: {e}")))?;
    steps.mark("store");
    let wanted = plan
        .wanted
        .iter()
        .map(|(o, k)| Ok((id(o)?, *k)))
        .collect::<Result<Vec<_>, Direct>>()?;
    let operator_tips = op
        .refs
        .values()
        .map(|o| id(o))
        .collect::<Result<BTreeSet<_>, Direct>>()?;
    let mut rewrote_index = false;
    let index = if plan.index {
        let claim = direct::shadow_index_tree(git.shadow.dir(), hash)?;
        steps.mark("claim");
        let base = match known {
            Some(k) => id(k)?,
            None => {
                let (tree, rewrote) = operator_index_tree(operator, &gitdir, &worktree, hash)?;
                rewrote_index = rewrote;
                tree
            }
        };
        steps.mark("base");
        Some((base, claim))
    } else {
        None
    };
    let checked = direct::check(&direct::Inputs {
        shadow: git.shadow.dir(),
        operator: &odb,
        hash,
        wanted: &wanted,
        operator_tips: &operator_tips,
        index,
    })?;
    Ok((odb, checked, rewrote_index))
}

/// The tree of the operator's index: its cache tree's root when valid, else `git
/// write-tree` (which also stores the tree it computes in the index for next time: true).
fn operator_index_tree(
    operator: &Dir,
    gitdir: &Path,
    ws: &Path,
    hash: gix_hash::Kind,
) -> Result<(gix_hash::ObjectId, bool), Direct> {
    let bytes = match operator.read("index") {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Direct::Fallback("the operator has no index".into()));
        }
        Err(e) => return Err(Direct::Fallback(format!("the operator's index: {e}"))),
    };
    if let Ok(Some(root)) = index_file::cache_tree_root(&bytes, hash.len_in_bytes()) {
        return gix_hash::ObjectId::try_from(root.as_slice())
            .map(|tree| (tree, false))
            .map_err(|e| Direct::Fallback(e.to_string()));
    }
    let mut cmd = host::command(gitdir, ws);
    cmd.arg("write-tree");
    let out = host::run(cmd, "write-tree", None).map_err(|e| Direct::Fallback(e.to_string()))?;
    gix_hash::ObjectId::from_hex(String::from_utf8_lossy(&out).trim().as_bytes())
        .map(|tree| (tree, true))
        .map_err(|e| Direct::Fallback(e.to_string()))
}

/// Writes the checked objects into the operator's store as loose objects (gix hashes each
/// again; a name that differs stops the import before any ref moves).
fn write_objects(
    odb: &gix_odb::Handle,
    objects: Vec<(gix_hash::ObjectId, gix_object::Kind, Vec<u8>)>,
) -> Result<(), Refusal> {
    use gix_object::Write;
    for (id, kind, data) in objects {
        let written = odb.write_buf(kind, &data).map_err(|e| {
            Refusal::Plain(format!(
                "writing object {id} into the operator's repository: {e}"
            ))
        })?;
        if written != id {
            return Err(Refusal::Plain(format!(
                "object {id} was written as {written}; nothing was imported"
            )));
        }
    }
    Ok(())
}

/// Keeps the moves the operator did not also make (a ref, HEAD or index both sides moved is
/// the operator's: not imported, reported) and names the objects they need.
fn reconcile<'a>(
    sh: &RepoState,
    op: &RepoState,
    moved: Moved<'a>,
    agreed: &Agreed,
    report: &mut GuardReport,
) -> Plan<'a> {
    let mut refs: Vec<&Move> = Vec::new();
    for m in moved.refs {
        let (name, base, _) = m;
        if op.refs.get(name) != base.as_ref() {
            report.info(format!(
                "`{name}` moved both on the host and in the sandbox: cordon did not import the \
                 sandbox's value; reconcile them by hand"
            ));
        } else {
            refs.push(m);
        }
    }
    let head = moved.head && op.head == agreed.head;
    let index = moved.index && op.index == agreed.operator_index;
    if moved.index && !index {
        report.info(
            "the operator's index changed on the host while the sandbox's did too: cordon \
             kept the operator's (the sandbox's staged changes are not on the host)"
                .into(),
        );
    }
    let mut wanted: Vec<(Oid, &'static str)> = refs
        .iter()
        .filter_map(|(name, _, new)| {
            let kind = if name.starts_with("refs/tags/") {
                "tag"
            } else {
                "commit"
            };
            new.clone().map(|n| (n, kind))
        })
        .collect();
    if head && let Head::Detached(oid) = &sh.head {
        wanted.push((oid.clone(), "commit"));
    }
    Plan {
        refs,
        head,
        index,
        wanted,
    }
}

/// Every tip has the type its ref needs, the index's tree arrived, and everything they reach
/// is in the operator's repository. `received`: the tips that came in this import's pack.
fn verify_objects(
    gitdir: &Path,
    ws: &Path,
    wanted: &[(Oid, &'static str)],
    received: &[&Oid],
    tree: Option<&Oid>,
) -> Result<(), Refusal> {
    let mut check: Vec<&Oid> = wanted.iter().map(|(o, _)| o).collect();
    check.extend(tree);
    let found = types(gitdir, ws, check.iter().copied())?;
    for (oid, kind) in wanted {
        let t = found
            .iter()
            .find(|(o, _)| o == oid)
            .map(|(_, t)| t.as_str());
        let fits = match *kind {
            "tag" => matches!(t, Some("commit" | "tag")),
            _ => t == Some("commit"),
        };
        if !fits {
            return Err(Refusal::Plain(format!(
                "object {oid} is {} where a {kind} is needed",
                t.unwrap_or("absent")
            )));
        }
    }
    if let Some(tree) = tree
        && !found.iter().any(|(o, t)| o == tree && t == "tree")
    {
        return Err(Refusal::Plain(format!(
            "the index's tree {tree} did not arrive"
        )));
    }
    // What came in the pack was checked by `index-pack --strict` with its links (an object
    // that refers to one absent fails it), so walking it again would only cost a walk of the
    // whole tree of every old tip. Walked: tips that were here before (left by an earlier,
    // refused import, or the operator's own dangling objects, whose history git may have
    // pruned), and the index's tree unless it is the tree of a tip that came in the pack.
    let mut walk: Vec<&Oid> = wanted
        .iter()
        .map(|(o, _)| o)
        .filter(|o| !received.contains(o))
        .collect();
    if let Some(tree) = tree {
        let received_commits: Vec<&&Oid> = received
            .iter()
            .filter(|o| wanted.iter().any(|(w, k)| w == **o && *k == "commit"))
            .collect();
        if !commit_trees(gitdir, ws, &received_commits)?.contains(tree) {
            walk.push(tree);
        }
    }
    if !walk.is_empty() {
        let mut cmd = host::command(gitdir, ws);
        cmd.args(["rev-list", "--objects", "--quiet"])
            .args(walk.iter().map(|o| o.as_str()))
            .args(["--not", "--all"]);
        host::run(cmd, "rev-list --objects", None)?;
    }
    Ok(())
}

/// The trees of `commits` (verified object names).
fn commit_trees(gitdir: &Path, ws: &Path, commits: &[&&Oid]) -> Result<Vec<Oid>, Refusal> {
    if commits.is_empty() {
        return Ok(Vec::new());
    }
    let mut input = String::new();
    for oid in commits {
        if !is_oid(oid) {
            return Err(Refusal::Plain(format!("`{oid}` is not an object name")));
        }
        input.push_str(&format!("{oid}^{{tree}}\n"));
    }
    Ok(batch_check(gitdir, ws, &input)?
        .into_iter()
        .filter(|(_, t)| t == "tree")
        .map(|(o, _)| o)
        .collect())
}

/// How the index's new tree differs from the tree of the operator's index.
enum IndexDiff {
    /// `git diff-tree -r -z --raw` from the tree of the operator's index to the new one.
    Raw(Vec<u8>),
    /// What the in-process checks found.
    Changes(direct::IndexPlan),
}

/// Refuses a new gitlink in the new commits or in the index's tree; returns how that tree
/// differs from the tree of the operator's index as it was (`known`, else `git write-tree`;
/// None: it had no index).
fn refuse_new_gitlinks(
    gitdir: &Path,
    ws: &Path,
    operator: &Dir,
    wanted: &[(Oid, &'static str)],
    tree: Option<&Oid>,
    known: Option<Oid>,
) -> Result<Option<IndexDiff>, Refusal> {
    let commits: Vec<&Oid> = wanted
        .iter()
        .filter(|(_, k)| *k == "commit")
        .map(|(o, _)| o)
        .collect();
    if !commits.is_empty() {
        let mut cmd = host::command(gitdir, ws);
        cmd.args([
            "log",
            "--raw",
            "-r",
            "-z",
            "--no-renames",
            "--no-abbrev",
            "--root",
            "--diff-merges=first-parent",
            "--format=",
        ])
        .args(commits.iter().map(|o| o.as_str()))
        .args(["--not", "--all"]);
        let raw = host::run(cmd, "log --raw", None)?;
        if let Some(path) = new_gitlink(&raw) {
            return Err(gitlink_refusal(&path));
        }
    }
    let Some(tree) = tree else {
        return Ok(None);
    };
    let before = if operator.symlink_metadata("index").is_err() {
        None
    } else if known.is_some() {
        known
    } else {
        let mut cmd = host::command(gitdir, ws);
        cmd.arg("write-tree");
        let out = host::run(cmd, "write-tree", None)?;
        Some(String::from_utf8_lossy(&out).trim().to_owned())
    };
    let empty = empty_tree(tree);
    let mut cmd = host::command(gitdir, ws);
    cmd.args([
        "diff-tree",
        "-r",
        "-z",
        "--raw",
        "--no-renames",
        "--no-abbrev",
    ])
    .arg(before.as_deref().unwrap_or(empty))
    .arg(tree);
    let raw = host::run(cmd, "diff-tree", None)?;
    if let Some(path) = new_gitlink(&raw) {
        return Err(gitlink_refusal(&path));
    }
    Ok(before.map(|_| IndexDiff::Raw(raw)))
}

/// Moves the refs: one branch that exists on both sides in the server's own process
/// (`ref_write`), else (or where that leaves it to git) by [`write_refs`].
fn move_refs(
    operator: &Dir,
    gitdir: &Path,
    ws: &Path,
    updates: &[&Move],
    head: &Head,
    settings: Settings,
    agreed: &mut Agreed,
) -> Result<(), Refusal> {
    if let [(name, Some(old), Some(new))] = updates
        && name.starts_with("refs/heads/")
    {
        match ref_write::move_branch(
            operator,
            name,
            old,
            new,
            head,
            REFLOG_MESSAGE,
            settings.log_ref_updates,
        ) {
            Ok(()) => {
                agreed.refs.insert(name.clone(), new.clone());
                return Ok(());
            }
            Err(why) => tracing::debug!(%why, "the branch is left to git update-ref"),
        }
    }
    write_refs(gitdir, ws, updates, agreed)
}

/// What an import's reflog lines say.
const REFLOG_MESSAGE: &str = "cordon: imported from the sandbox";

/// Moves the refs in one `update-ref --stdin` transaction whose old values are the agreed
/// ones (a ref the operator moved meanwhile fails the whole transaction).
fn write_refs(
    gitdir: &Path,
    ws: &Path,
    updates: &[&Move],
    agreed: &mut Agreed,
) -> Result<(), Refusal> {
    let Some(first) = updates.first() else {
        return Ok(());
    };
    let zero = "0".repeat(
        first
            .2
            .as_ref()
            .or(first.1.as_ref())
            .map_or(40, |o| o.len()),
    );
    let mut script = String::from("start\n");
    for (name, base, new) in updates {
        let old = base.as_deref().unwrap_or(&zero);
        match new {
            Some(new) => script.push_str(&format!("update {name} {new} {old}\n")),
            None => script.push_str(&format!("delete {name} {old}\n")),
        }
    }
    script.push_str("commit\n");
    let mut cmd = host::command(gitdir, ws);
    cmd.args(["update-ref", "-m", REFLOG_MESSAGE, "--stdin"]);
    host::run(cmd, "update-ref", Some(script.as_bytes()))?;
    for (name, _, new) in updates {
        match new {
            Some(new) => agreed.refs.insert(name.clone(), new.clone()),
            None => agreed.refs.remove(name),
        };
    }
    Ok(())
}

fn gitlink_refusal(path: &str) -> Refusal {
    Refusal::Plain(direct::gitlink_message(path))
}

/// The first path of `git … --raw -z` output whose new mode is a gitlink where the old one
/// was not (a gitlink the operator already had may move to another commit).
fn new_gitlink(raw: &[u8]) -> Option<String> {
    let mut fields = raw.split(|b| *b == 0).filter(|f| !f.is_empty());
    while let Some(meta) = fields.next() {
        let meta = String::from_utf8_lossy(meta);
        let Some(meta) = meta.strip_prefix(':') else {
            continue;
        };
        let path = fields
            .next()
            .map(|p| String::from_utf8_lossy(p).into_owned())?;
        let mut parts = meta.split(' ');
        let (old, new) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if new == GITLINK && old != GITLINK {
            return Some(path);
        }
    }
    None
}

fn empty_tree(like: &str) -> &'static str {
    if like.len() == 64 {
        "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"
    } else {
        "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    }
}

/// `git cat-file --batch-check` for `oids`: (name, type or "missing").
fn types<'a>(
    gitdir: &Path,
    ws: &Path,
    oids: impl Iterator<Item = &'a Oid>,
) -> Result<Vec<(Oid, String)>, Refusal> {
    let mut input = String::new();
    for oid in oids {
        if !is_oid(oid) {
            return Err(Refusal::Plain(format!("`{oid}` is not an object name")));
        }
        input.push_str(oid);
        input.push('\n');
    }
    batch_check(gitdir, ws, &input)
}

/// `git cat-file --batch-check` of `input` (a line per object expression, checked by the
/// caller): (name, type or "missing") per line.
fn batch_check(gitdir: &Path, ws: &Path, input: &str) -> Result<Vec<(Oid, String)>, Refusal> {
    if input.is_empty() {
        return Ok(Vec::new());
    }
    let mut cmd = host::command(gitdir, ws);
    cmd.args(["cat-file", "--batch-check=%(objectname) %(objecttype)"]);
    let out = host::run(cmd, "cat-file --batch-check", Some(input.as_bytes()))?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(o, t)| (o.to_owned(), t.to_owned()))
        .collect())
}

/// Packs `missing` (and, with `index`, the tree of the shadow's index, whose name it returns)
/// confined (in `rel`, the repository's directory in the workspace), into the host's
/// `git index-pack --strict`.
fn export(
    gitdir: &Path,
    ws: &Path,
    rel: &Path,
    missing: &[&Oid],
    tips: &BTreeSet<&Oid>,
    index: bool,
    confined: &dyn ConfinedGit,
) -> Result<Option<Oid>, Refusal> {
    if crate::confine::kernel::simulated_missing("git-export") {
        return Err(Refusal::Plain(
            "the confined export is simulated missing (CORDON_SIMULATE_MISSING=git-export)".into(),
        ));
    }
    let mut input = String::new();
    for oid in missing {
        input.push_str(oid);
        input.push('\n');
    }
    input.push_str("--not\n");
    for oid in tips {
        input.push_str(oid);
        input.push('\n');
    }
    // The shadow's own config still applies (confined); only what would make the export
    // itself slow or noisy is turned off.
    let pack = "git -c core.fsmonitor=false pack-objects --revs --stdout --thin -q";
    let script = if index {
        // An index that matches HEAD (what `git commit` leaves) has HEAD's tree: found without
        // writing anything. Otherwise `write-tree` on a copy of the index: it would rewrite
        // the index itself (its cache tree), and the next check would take that for a change
        // of the call's. Either way the tree is only a claim: the host checks it as any
        // object (its type, what it reaches, no new gitlink).
        format!(
            "if git -c core.fsmonitor=false diff-index --cached --quiet HEAD -- 2>/dev/null; then t=$(git rev-parse --verify -q 'HEAD^{{tree}}') || exit 3; else cp .git/index /tmp/.cordon-export-index && t=$(GIT_INDEX_FILE=/tmp/.cordon-export-index git -c core.fsmonitor=false write-tree) || exit 3; fi; echo \"$t\" >&3; {{ echo \"$t\"; cat; }} | {pack}"
        )
    } else {
        pack.to_owned()
    };
    let (pack_read, pack_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Refusal::Plain(format!("pipe: {e}")))?;
    let (side_read, side_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Refusal::Plain(format!("pipe: {e}")))?;
    let mut cmd = host::command(gitdir, ws);
    cmd.args(["index-pack", "--stdin", "--fix-thin", "--strict"])
        .stdin(std::process::Stdio::from(pack_read));
    let receiver = cmd
        .spawn()
        .map_err(|e| Refusal::Plain(format!("cannot start `git index-pack`: {e}")))?;
    let status = confined.run_confined(rel, &script, input.as_bytes(), pack_write, side_write);
    let mut side = String::new();
    let _ = std::fs::File::from(side_read)
        .take(256)
        .read_to_string(&mut side);
    let received = host::wait(receiver, "index-pack --strict");
    match status {
        Ok(0) => {}
        Ok(3) => {
            return Err(Refusal::Plain(
                "the sandbox's index has unresolved conflicts (`git write-tree` failed); \
                 resolve or reset them"
                    .into(),
            ));
        }
        Ok(code) => {
            return Err(Refusal::Plain(format!(
                "packing the sandbox's objects failed (exit {code})"
            )));
        }
        Err(e) => {
            return Err(Refusal::Plain(format!(
                "the confined export did not run: {e}"
            )));
        }
    }
    received?;
    if !index {
        return Ok(None);
    }
    let tree = side.trim().to_owned();
    if !is_oid(&tree) {
        return Err(Refusal::Plain("the sandbox's index gave no tree".into()));
    }
    Ok(Some(tree))
}

/// Makes the operator's repository for one a call created (no `.git` when the view was
/// built): git's own `init` with no template (no hooks, no `info/`), the same object format
/// (`bare`: a bare repository, its directory the gitdir).
fn create_repository(gitdir: &Path, ws: &Path, sh: &RepoState, bare: bool) -> Result<(), Refusal> {
    let sha256 = sh.refs.values().any(|o| o.len() == 64)
        || matches!(&sh.head, Head::Detached(o) if o.len() == 64);
    let mut cmd = host::command(gitdir, ws);
    cmd.args(["init", "-q", "--template="]);
    if bare {
        cmd.arg("--bare");
    }
    // On the sandbox's branch, so the repository's `HEAD` is the sandbox's from the start.
    if let Head::Branch(name) = &sh.head
        && let Some(branch) = name.strip_prefix("refs/heads/")
    {
        cmd.arg(format!("--initial-branch={branch}"));
    }
    if sha256 {
        cmd.arg("--object-format=sha256");
    }
    host::run(cmd, "init", None)?;
    Ok(())
}

/// Writes the operator's index from `tree`. Where it had one (`diff`: how `tree` differs from
/// its tree), only the entries that differ are changed: by cordon's own edit of the index
/// file (`index_file`) when the in-process checks found the changes, else (or where the edit
/// leaves the index to git: a split or sparse index, a conflict) by `git update-index -z
/// --index-info`, both under git's own `index.lock`; the stat data of every other entry is
/// kept, and a changed one is hashed again by the operator's next `git status`. Without one,
/// `git read-tree` into a new file under a random name, renamed into place while cordon
/// holds `index.lock`.
///
/// Returns the index's mark after the write: taken from the file cordon wrote where it wrote
/// it (another git may have replaced it by then), else read from the gitdir.
fn write_index(
    operator: &Dir,
    gitdir: &Path,
    ws: &Path,
    tree: &str,
    diff: Option<&IndexDiff>,
    index: OperatorIndex<'_>,
) -> Result<IndexMark, Refusal> {
    let info = match diff {
        Some(IndexDiff::Raw(raw)) => Some(index_info(raw, tree.len())),
        Some(IndexDiff::Changes(plan)) => {
            if plan.changes.is_empty() {
                return Ok(index.mark.clone());
            }
            let oid_len = plan.tree.as_bytes().len();
            let request = operator_index::IndexEdit {
                changes: &plan.changes,
                oid_len,
                mark: index.mark,
                skip_hash: index.skip_hash,
            };
            match operator_index::edit(operator, &request, index.known) {
                Ok(mark) => return Ok(mark),
                Err(EditError::Locked(e)) => {
                    return Err(Refusal::Plain(format!(
                        "the operator's index is locked by a git running on the host \
                         (retry): {e}"
                    )));
                }
                Err(EditError::ToGit(why)) => {
                    tracing::debug!(%why, "the operator's index is left to git update-index");
                    Some(change_records(&plan.changes, tree.len()))
                }
            }
        }
        None => None,
    };
    if let Some(info) = info {
        if info.is_empty() {
            return Ok(index.mark.clone());
        }
        let mut cmd = host::command(gitdir, ws);
        cmd.args(["update-index", "-z", "--index-info"]);
        host::run(cmd, "update-index --index-info", Some(&info)).map_err(|e| {
            Refusal::Plain(format!(
                "the operator's index could not be updated (a git running on the host may \
                 hold its lock; retry): {e}"
            ))
        })?;
        return Ok(super::refs::index_mark(operator));
    }
    let io = |what: &str, e: std::io::Error| Refusal::Plain(format!("{what}: {e}"));
    let lock = operator
        .open_with(
            "index.lock",
            cap_std::fs::OpenOptions::new().write(true).create_new(true),
        )
        .map_err(|e| {
            io(
                "the operator's index is locked by a git running on the host (retry)",
                e,
            )
        })?;
    let result = (|| {
        let staged = tempfile::Builder::new()
            .prefix("cordon-index-")
            .tempfile_in(gitdir)
            .map_err(|e| io("a new index", e))?;
        let mut cmd = host::command(gitdir, ws);
        cmd.env("GIT_INDEX_FILE", staged.path())
            .arg("read-tree")
            .arg(tree);
        host::run(cmd, "read-tree", None)?;
        staged
            .persist(gitdir.join("index"))
            .map_err(|e| io("renaming the new index into place", e.error))?;
        Ok(())
    })();
    drop(lock);
    let _ = operator.remove_file("index.lock");
    result.map(|()| super::refs::index_mark(operator))
}

/// The operator's index as the import found it, and how cordon writes it.
struct OperatorIndex<'a> {
    /// Its mark when the import planned (an index that no longer has it is left to git).
    mark: &'a IndexMark,
    /// The repository asks git not to hash it (`settings`).
    skip_hash: bool,
    /// What cordon wrote there last, and buffers kept across imports.
    known: &'a mut KnownIndex,
}

/// `git update-index -z --index-info` records for `changes`: the new mode and object, or
/// mode 0 for a removal.
fn change_records(changes: &[index_file::Change], hex_len: usize) -> Vec<u8> {
    let zero = "0".repeat(hex_len);
    let mut out = Vec::new();
    for change in changes {
        let record = match &change.entry {
            Some((mode, id)) => {
                let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
                format!("{mode:o} {hex}\t")
            }
            None => format!("0 {zero}\t"),
        };
        out.extend_from_slice(record.as_bytes());
        out.extend_from_slice(&change.path);
        out.push(0);
    }
    out
}

/// `git update-index -z --index-info` records for the entries a `diff-tree -r -z --raw`
/// names: the new mode and object, or mode 0 (removed) for a deletion. Paths go through as
/// bytes; the objects are names of length `oid_len`.
fn index_info(raw: &[u8], oid_len: usize) -> Vec<u8> {
    let zero = "0".repeat(oid_len);
    let mut out = Vec::new();
    let mut fields = raw.split(|b| *b == 0).filter(|f| !f.is_empty());
    while let Some(meta) = fields.next() {
        let Some(meta) = meta.strip_prefix(b":") else {
            continue;
        };
        let Some(path) = fields.next() else {
            break;
        };
        let meta = String::from_utf8_lossy(meta);
        let parts: Vec<&str> = meta.split(' ').collect();
        let [_, new_mode, _, new_oid, status] = parts[..] else {
            continue;
        };
        let record = if status.starts_with('D') {
            format!("0 {zero}\t")
        } else {
            format!("{new_mode} {new_oid}\t")
        };
        out.extend_from_slice(record.as_bytes());
        out.extend_from_slice(path);
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_diff_becomes_index_records_of_the_changed_entries_only() {
        let z = |s: &str| s.replace('|', "\0").into_bytes();
        let raw = z(
            ":100644 100755 aaaa bbbb M|a b|:000000 100644 0000 cccc A|new|\
                     :100644 000000 dddd 0000 D|gone|",
        );
        assert_eq!(
            String::from_utf8(index_info(&raw, 4)).unwrap(),
            "100755 bbbb\ta b\x00100644 cccc\tnew\x000 0000\tgone\x00"
        );
    }

    #[test]
    fn only_a_gitlink_where_there_was_none_is_new() {
        let z = |s: &str| s.replace('|', "\0").into_bytes();
        let added = z(":000000 160000 0000 abcd A|sub|");
        assert_eq!(new_gitlink(&added).as_deref(), Some("sub"));
        let moved = z(":160000 160000 abcd ef01 M|sub|:100644 100644 1 2 M|f|");
        assert_eq!(new_gitlink(&moved), None);
        let file_to_link = z(":100644 100644 1 2 M|a|:100644 160000 1 2 T|b|");
        assert_eq!(new_gitlink(&file_to_link).as_deref(), Some("b"));
    }
}
