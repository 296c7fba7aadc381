//! What the sandbox's view binds read-only for git, and its signature: the operator's
//! gitdirs that the shadow does not replace (each gitlinked repository's `.git`, file or
//! directory, as the operator's index records them), the protected entries outside `.git`,
//! and, when there is no shadow, the operator's whole `.git`.
//!
//! Owns the listing (a few `lstat`s, plus parsing the operator's index when its mark
//! changed) and its comparison: a view whose signature differs is rebuilt before the next
//! call. Only the operator's index is read here (the shadow's never reaches the host's git).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, MetadataExt};

use super::refs::{IndexMark, index_mark};
use crate::workspace::{EntryKind, existing_protected, gitlinks};

/// (device, inode, is a directory) of each bound entry, and whether the operator has a
/// repository: a difference means the view is out of date.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Signature {
    entries: BTreeMap<PathBuf, (u64, u64, bool)>,
    operator_repository: Option<(u64, u64)>,
}

/// The gitlinks of the operator's index, by the index's mark (parsed again only when it
/// changes, e.g. after an import).
static GITLINKS: Mutex<Option<(PathBuf, IndexMark, Vec<PathBuf>)>> = Mutex::new(None);

/// The workspace-relative entries the view binds read-only over themselves, and the
/// signature. `shadowed`: the shadow replaces `.git` in the view. `gitfiles`: the operator's
/// gitfiles and gitdirs below the root that have no shadow (`git::Repositories::read_only`).
pub(crate) fn take(
    root: &Dir,
    patterns: &[String],
    shadowed: bool,
    gitfiles: &std::collections::BTreeSet<PathBuf>,
) -> (Vec<PathBuf>, Signature) {
    let mut paths: Vec<PathBuf> = gitfiles
        .iter()
        .filter(|p| {
            root.symlink_metadata(p)
                .is_ok_and(|m| !m.file_type().is_symlink())
        })
        .cloned()
        .collect();
    let git = Path::new(".git");
    for entry in existing_protected(root, patterns) {
        // Under a shadow, `.git/…` in the view is the shadow; a link is never bound (a bind
        // would follow it).
        if (shadowed && entry.path.starts_with(git)) || entry.kind == EntryKind::Symlink {
            continue;
        }
        paths.push(entry.path);
    }
    let operator = root
        .open_dir_nofollow(".git")
        .ok()
        .filter(|d| d.symlink_metadata("HEAD").is_ok());
    // The operator's hooks may be a link into the workspace (`.git/hooks -> ../shared-hooks`):
    // the operator's git runs what is there, so its target is bound read-only too.
    if let Some(target) = hooks_target(root) {
        paths.push(target);
    }
    if !shadowed && root.symlink_metadata(git).is_ok_and(|m| m.is_dir()) {
        paths.push(git.to_path_buf());
    }
    if let Some(dir) = &operator {
        for link in gitlinked(root, dir) {
            let dotgit = link.join(".git");
            if root
                .symlink_metadata(&dotgit)
                .is_ok_and(|m| !m.file_type().is_symlink())
            {
                paths.push(dotgit);
            }
        }
    }
    paths.sort();
    paths.dedup();
    let mut entries = BTreeMap::new();
    for path in &paths {
        if let Ok(m) = root.symlink_metadata(path) {
            entries.insert(path.clone(), (m.dev(), m.ino(), m.is_dir()));
        }
    }
    let operator_repository = operator
        .and_then(|_| root.symlink_metadata(git).ok())
        .map(|m| (m.dev(), m.ino()));
    (
        paths,
        Signature {
            entries,
            operator_repository,
        },
    )
}

/// Where the operator's `.git/hooks` link leads, when that is a directory inside the
/// workspace (resolved lexically from `.git`; a target outside or through `..` past the root is
/// not in the view at all).
fn hooks_target(root: &Dir) -> Option<PathBuf> {
    let link = root.read_link(".git/hooks").ok()?;
    if link.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from(".git");
    for c in link.components() {
        match c {
            std::path::Component::ParentDir if !out.pop() => return None,
            std::path::Component::ParentDir => {}
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    let meta = root.symlink_metadata(&out).ok()?;
    (meta.is_dir() && !out.as_os_str().is_empty() && !out.starts_with(".git")).then_some(out)
}

/// The gitlink paths of the operator's index at the workspace root `root` (none without a
/// repository there).
pub(crate) fn gitlinked_paths(root: &Dir) -> std::collections::BTreeSet<PathBuf> {
    root.open_dir_nofollow(".git")
        .ok()
        .filter(|d| d.symlink_metadata("HEAD").is_ok())
        .map(|dir| gitlinked(root, &dir).into_iter().collect())
        .unwrap_or_default()
}

/// The gitlink paths of the operator's index (none when it cannot be read: the operator's
/// own index, and a gitlink the import would add is refused there).
fn gitlinked(root: &Dir, gitdir: &Dir) -> Vec<PathBuf> {
    let mark = index_mark(gitdir);
    let key = root
        .dir_metadata()
        .map(|m| PathBuf::from(format!("{}:{}", m.dev(), m.ino())))
        .unwrap_or_default();
    if let Ok(cache) = GITLINKS.lock()
        && let Some((k, m, links)) = cache.as_ref()
        && *k == key
        && *m == mark
    {
        return links.clone();
    }
    let links = match mark {
        None => Vec::new(),
        Some(_) => gitdir
            .open("index")
            .ok()
            .and_then(|f| gitlinks::read_gitlinks(std::io::BufReader::new(f)).ok())
            .unwrap_or_default(),
    };
    if let Ok(mut cache) = GITLINKS.lock() {
        *cache = Some((key, mark, links.clone()));
    }
    links
}
