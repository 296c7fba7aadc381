//! The import done in the server's own process, for what agents mostly do: new commits on a
//! branch, one after another, of ordinary files, still loose in the shadow.
//!
//! It decides nothing the confined path would not: the same refs, `HEAD` and index move,
//! and a new gitlink is refused with the same words. What differs is who reads the sandbox's
//! data. Here the server reads exactly the objects the moved refs and the index's tree need
//! that the operator's repository lacks, one loose file each (`loose`: beneath the shadow's
//! handle, bounded, hashed against its name), and vouches for them only inside a strict
//! subset of git's own checks (`vet`). Everything else falls back, before anything is
//! written, to the confined export and the host's `index-pack --strict`: packed objects, a
//! tag object, a merge, a root commit, a commit the operator has that no ref names, a new
//! symbolic link, a name outside the subset, an index whose cache tree does not name its
//! tree. Objects are then written as loose objects into the operator's store (gitoxide's
//! `gix-odb`, which hashes them again), and the operator's index is edited in place of
//! `git update-index` (`index_file`).
//!
//! Connectivity: a commit chain is followed back to a commit one of the operator's refs
//! names (whose history git already holds), and every tree of a new commit is compared with
//! its parent's: what is equal was the operator's, what differs is read, vetted and found
//! either in the operator's store or as a verified object from the shadow.

use std::collections::{BTreeSet, HashMap};

use cap_std::fs::Dir;
use gix_hash::ObjectId;
use gix_object::{Exists, Find};

use super::index_file::Change;
use super::loose::{self, LooseError};
use super::vet::{self, Mode};

/// Most new commits one import takes here (a longer history is git's to move).
const MAX_COMMITS: usize = 256;
/// Most new objects one import takes here.
const MAX_OBJECTS: usize = 20_000;
/// Most bytes of new objects one import holds in memory here.
const MAX_BYTES: u64 = 64 << 20;
/// Deepest directory nesting compared here (each level is a frame of the comparison's
/// recursion on a thread whose stack is bounded; git's own `core.maxTreeDepth` is 2048).
const MAX_DEPTH: usize = 256;
/// Most bytes of the shadow's index held in memory while its cache tree is looked for (the
/// whole index where it has no `EOIE` extension, else its extensions): a call writes it. A
/// 500,000-entry index is ~40 MB; more is left to git run confined.
const MAX_SHADOW_INDEX: u64 = 64 << 20;

/// Why the in-process import did not finish its checks.
#[derive(Debug, thiserror::Error)]
pub(super) enum Direct {
    /// The change is refused whichever path imports it (a sentence for the agent).
    #[error("{0}")]
    Refuse(String),
    /// Not in the subset this path takes: git run confined imports it instead.
    #[error("{0}")]
    Fallback(String),
}

/// What the checks found: what to write.
pub(super) struct Checked {
    /// The objects the operator's repository lacks, children before the objects that name
    /// them (each verified against its name).
    pub objects: Vec<(ObjectId, gix_object::Kind, Vec<u8>)>,
    /// The index's new tree and how it differs from the tree of the operator's index.
    pub index: Option<IndexPlan>,
}

/// The operator's index, to be moved to `tree`.
pub(super) struct IndexPlan {
    pub tree: ObjectId,
    /// Every path whose entry differs, in no particular order.
    pub changes: Vec<Change>,
}

/// What the checks are given.
pub(super) struct Inputs<'a> {
    /// The shadow's gitdir (only its loose objects and its index are read).
    pub shadow: &'a Dir,
    /// The operator's object store (trusted: no confined process can write it).
    pub operator: &'a gix_odb::Handle,
    pub hash: gix_hash::Kind,
    /// The commits the moved refs and a detached `HEAD` name, with the kind each needs.
    pub wanted: &'a [(ObjectId, &'static str)],
    /// Every commit a ref of the operator's names: where a chain of new commits must end.
    pub operator_tips: &'a BTreeSet<ObjectId>,
    /// With the index moved: the tree of the operator's index, and the tree the shadow's
    /// index claims ([`shadow_index_tree`]).
    pub index: Option<(ObjectId, ObjectId)>,
}

/// Checks everything an import of `inputs` writes, writing nothing.
pub(super) fn check(inputs: &Inputs<'_>) -> Result<Checked, Direct> {
    let mut reader = Reader {
        inputs,
        incoming: Vec::new(),
        by_id: HashMap::new(),
        bytes: 0,
    };
    let mut commits: Vec<(ObjectId, vet::Commit)> = Vec::new();
    let mut seen: BTreeSet<ObjectId> = BTreeSet::new();
    for (tip, kind) in inputs.wanted {
        reader.chain(*tip, kind, &mut seen, &mut commits)?;
    }
    // Each new commit against its parent; the index's move is most often the last one's
    // (what `git commit` leaves), so its comparison is kept for it.
    let mut compared: HashMap<(ObjectId, ObjectId), Vec<Change>> = HashMap::new();
    for (_, commit) in &commits {
        let parent = commit.parents[0];
        let base = reader.commit_tree(&parent)?;
        let mut changes = Vec::new();
        reader.diff(Some(base), Some(commit.tree), b"", &mut changes)?;
        compared.insert((base, commit.tree), changes);
    }
    let index = match inputs.index {
        None => None,
        Some((base, tree)) => {
            let changes = match compared.remove(&(base, tree)) {
                Some(changes) => changes,
                None => {
                    let mut changes = Vec::new();
                    reader.diff(Some(base), Some(tree), b"", &mut changes)?;
                    changes
                }
            };
            Some(IndexPlan { tree, changes })
        }
    };
    let mut objects = reader.incoming;
    objects.reverse();
    Ok(Checked { objects, index })
}

/// Reads objects for the checks: the operator's from its store, the rest from the shadow
/// (kept, in the order read, as what the import writes).
struct Reader<'a> {
    inputs: &'a Inputs<'a>,
    incoming: Vec<(ObjectId, gix_object::Kind, Vec<u8>)>,
    by_id: HashMap<ObjectId, usize>,
    bytes: u64,
}

/// Where an object read came from.
enum Source {
    Operator,
    Sandbox,
}

impl Reader<'_> {
    /// The object `id`, and whether the operator's repository has it.
    fn object(&mut self, id: &ObjectId) -> Result<(gix_object::Kind, Vec<u8>, Source), Direct> {
        if let Some(&i) = self.by_id.get(id) {
            let (_, kind, data) = &self.incoming[i];
            return Ok((*kind, data.clone(), Source::Sandbox));
        }
        if self.inputs.operator.exists(id) {
            let mut buf = Vec::new();
            let found = self
                .inputs
                .operator
                .try_find(id, &mut buf)
                .map_err(|e| {
                    Direct::Fallback(format!("the operator's object {id} is unreadable: {e}"))
                })?
                .ok_or_else(|| Direct::Fallback(format!("the operator's object {id} went away")))?;
            let kind = found.kind;
            return Ok((kind, buf, Source::Operator));
        }
        let (kind, data) = loose::read(self.inputs.shadow, id).map_err(|e| match e {
            LooseError::Absent(_) | LooseError::Unusable { .. } => Direct::Fallback(e.to_string()),
        })?;
        self.bytes += data.len() as u64;
        if self.incoming.len() >= MAX_OBJECTS || self.bytes > MAX_BYTES {
            return Err(Direct::Fallback(
                "more new objects than this path takes".into(),
            ));
        }
        self.by_id.insert(*id, self.incoming.len());
        self.incoming.push((*id, kind, data.clone()));
        Ok((kind, data, Source::Sandbox))
    }

    /// Follows `tip` back to a commit an operator's ref names, adding each new commit.
    fn chain(
        &mut self,
        tip: ObjectId,
        kind: &str,
        seen: &mut BTreeSet<ObjectId>,
        commits: &mut Vec<(ObjectId, vet::Commit)>,
    ) -> Result<(), Direct> {
        let mut at = tip;
        loop {
            if self.inputs.operator_tips.contains(&at) || !seen.insert(at) {
                return Ok(());
            }
            let (found, data, source) = self.object(&at)?;
            if found != gix_object::Kind::Commit {
                return Err(Direct::Fallback(format!(
                    "{at} is a {found} where a {kind} is wanted"
                )));
            }
            if matches!(source, Source::Operator) {
                return Err(Direct::Fallback(format!(
                    "commit {at} is the operator's but no ref of theirs names it"
                )));
            }
            let commit = vet::commit(&data, self.inputs.hash)
                .ok_or_else(|| Direct::Fallback(format!("commit {at} is not in the plain form")))?;
            let [parent] = commit.parents[..] else {
                return Err(Direct::Fallback(format!(
                    "commit {at} has {} parents",
                    commit.parents.len()
                )));
            };
            commits.push((at, commit));
            if commits.len() > MAX_COMMITS {
                return Err(Direct::Fallback("a long history of new commits".into()));
            }
            at = parent;
        }
    }

    /// The tree of commit `id` (one this import brings or the operator's).
    fn commit_tree(&mut self, id: &ObjectId) -> Result<ObjectId, Direct> {
        let (kind, data, _) = self.object(id)?;
        if kind != gix_object::Kind::Commit {
            return Err(Direct::Fallback(format!("{id} is not a commit")));
        }
        gix_object::CommitRefIter::from_bytes(&data, self.inputs.hash)
            .tree_id()
            .map_err(|e| Direct::Fallback(format!("commit {id} is unreadable: {e}")))
    }

    /// The entries of tree `id`, and whether it is new (the sandbox's).
    fn tree(&mut self, id: &ObjectId) -> Result<(Vec<vet::Entry>, bool), Direct> {
        let (kind, data, source) = self.object(id)?;
        if kind != gix_object::Kind::Tree {
            return Err(Direct::Fallback(format!(
                "{id} is a {kind} where a tree is named"
            )));
        }
        let entries = vet::tree(&data, self.inputs.hash)
            .ok_or_else(|| Direct::Fallback(format!("tree {id} is not in the plain form")))?;
        Ok((entries, matches!(source, Source::Sandbox)))
    }

    /// Compares tree `a` (trusted: the operator's, or checked before) with `b`, reading and
    /// vetting what differs, refusing a new gitlink; the file-level differences go to `out`.
    fn diff(
        &mut self,
        a: Option<ObjectId>,
        b: Option<ObjectId>,
        prefix: &[u8],
        out: &mut Vec<Change>,
    ) -> Result<(), Direct> {
        if a == b {
            return Ok(());
        }
        let depth = prefix.iter().filter(|b| **b == b'/').count();
        if depth > MAX_DEPTH {
            return Err(Direct::Fallback(format!(
                "directories nested deeper than {MAX_DEPTH}"
            )));
        }
        let old = match a {
            Some(id) => self.tree(&id)?.0,
            None => Vec::new(),
        };
        let (new, sandbox_tree) = match b {
            Some(id) => self.tree(&id)?,
            None => (Vec::new(), false),
        };
        // Both sides are in git's tree order (`vet::tree` checked it): one merge pass pairs
        // the entries of the same name and kind; a file and a directory of one name are a
        // removal and an addition, as `git diff-tree` has them.
        let (mut i, mut j) = (0, 0);
        loop {
            let order = match (old.get(i), new.get(j)) {
                (Some(x), Some(y)) => vet::tree_order(&x.name, x.mode, &y.name, y.mode),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => break,
            };
            let (x, y) = match order {
                std::cmp::Ordering::Less => (old.get(i), None),
                std::cmp::Ordering::Greater => (None, new.get(j)),
                std::cmp::Ordering::Equal => (old.get(i), new.get(j)),
            };
            i += usize::from(x.is_some());
            j += usize::from(y.is_some());
            if let (Some(x), Some(y)) = (x, y)
                && x.mode == y.mode
                && x.id == y.id
            {
                continue;
            }
            let name = y.or(x).map(|e| e.name.as_slice()).unwrap_or_default();
            let mut path = prefix.to_vec();
            path.extend_from_slice(name);
            if let Some(y) = y
                && sandbox_tree
                && !vet::plain_name(name)
            {
                return Err(Direct::Fallback(format!(
                    "`{}` ({:?}) is a name git's own checks must see",
                    String::from_utf8_lossy(&path),
                    y.mode
                )));
            }
            let (x_tree, y_tree) = (
                x.filter(|e| e.mode == Mode::Tree).map(|e| e.id),
                y.filter(|e| e.mode == Mode::Tree).map(|e| e.id),
            );
            if x_tree.is_some() || y_tree.is_some() {
                let mut sub = path.clone();
                sub.push(b'/');
                self.diff(x_tree, y_tree, &sub, out)?;
            }
            let x_file = x.filter(|e| e.mode != Mode::Tree);
            let y_file = y.filter(|e| e.mode != Mode::Tree);
            if let Some(y) = y_file {
                self.file(x_file, y, &path)?;
                out.push(Change {
                    path,
                    entry: Some((y.mode.bits(), y.id.as_bytes().to_vec())),
                });
            } else if x_file.is_some() {
                out.push(Change { path, entry: None });
            }
        }
        Ok(())
    }

    /// A file-level entry `y` that differs from `x`: a gitlink must have been one before, a
    /// blob must be the operator's or a verified one from the shadow (a new symbolic link is
    /// left to git's checks of its target).
    fn file(&mut self, x: Option<&vet::Entry>, y: &vet::Entry, path: &[u8]) -> Result<(), Direct> {
        let shown = String::from_utf8_lossy(path);
        match y.mode {
            Mode::Gitlink => {
                if x.map(|e| e.mode) != Some(Mode::Gitlink) {
                    return Err(Direct::Refuse(gitlink_message(&shown)));
                }
                Ok(())
            }
            Mode::Symlink if !self.inputs.operator.exists(&y.id) => Err(Direct::Fallback(format!(
                "`{shown}` is a new symbolic link"
            ))),
            _ => {
                let (kind, _, _) = self.object(&y.id)?;
                if kind != gix_object::Kind::Blob {
                    return Err(Direct::Fallback(format!(
                        "`{shown}` names a {kind} where a blob belongs"
                    )));
                }
                Ok(())
            }
        }
    }
}

/// The tree the shadow's index claims to hold (its cache tree's root), read through the
/// `EOIE` extension when git wrote one, else by walking the entries. Only a claim: the
/// caller reads and vets that tree like any other.
pub(super) fn shadow_index_tree(shadow: &Dir, hash: gix_hash::Kind) -> Result<ObjectId, Direct> {
    use std::os::unix::fs::FileExt;
    let fallback = |why: String| Direct::Fallback(format!("the sandbox's index: {why}"));
    let file = super::open::open_regular(shadow, "index").map_err(|e| fallback(e.to_string()))?;
    let len = file.metadata().map_err(|e| fallback(e.to_string()))?.len();
    let oid_len = hash.len_in_bytes();
    let read_at = |offset: u64, size: usize| -> Result<Vec<u8>, Direct> {
        if size as u64 > MAX_SHADOW_INDEX {
            return Err(fallback(format!(
                "more than {MAX_SHADOW_INDEX} bytes to read for its cache tree"
            )));
        }
        let mut buf = vec![0u8; size];
        file.read_exact_at(&mut buf, offset)
            .map_err(|e| fallback(e.to_string()))?;
        Ok(buf)
    };
    let tail_len = super::index_file::eoie_tail_len(oid_len);
    let root = match (len >= tail_len as u64)
        .then(|| read_at(len - tail_len as u64, tail_len))
        .transpose()?
        .and_then(|tail| super::index_file::eoie_extensions_offset(&tail, len, oid_len))
    {
        Some(offset) => {
            let size = len
                .checked_sub(offset)
                .and_then(|n| n.checked_sub(oid_len as u64))
                .ok_or_else(|| fallback("its EOIE extension points past its end".into()))?;
            let extensions = read_at(offset, size as usize)?;
            super::index_file::cache_tree_root_in_extensions(&extensions, oid_len)
        }
        None => super::index_file::cache_tree_root(&read_at(0, len as usize)?, oid_len),
    }
    .map_err(|e| fallback(e.to_string()))?;
    let root = root.ok_or_else(|| fallback("its cache tree does not name its tree".into()))?;
    ObjectId::try_from(root.as_slice()).map_err(|e| fallback(e.to_string()))
}

/// Why a new gitlink is refused (both import paths say it so).
pub(super) fn gitlink_message(path: &str) -> String {
    format!(
        "`{path}` became a gitlink (a submodule entry): the operator's git would enter \
         that directory and read its repository's configuration, which a call wrote; \
         remove it (`git rm --cached {path}`) or ask the operator to add the submodule on \
         the host"
    )
}
