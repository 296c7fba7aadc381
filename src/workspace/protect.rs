//! Protected paths inside the workspace (`.git/hooks`, `.git/config`, `.cordon`, the policy
//! file, …): places the file tools never write, because what lands there later runs or is
//! trusted outside any sandbox (a git hook runs on the operator's next commit, a `.git/config`
//! can name a command git runs).
//!
//! Owns: the pattern language (`/`-separated, workspace-relative segments; `*` inside a segment
//! matches any run of characters of that segment; a pattern protects the entry it names and
//! everything beneath it), the decision on a *resolved* target ([`protected_entry`], pure, so
//! it can be fuzzed), the identity snapshot that catches aliases the spelling cannot show (a
//! bind mount, a case-folding directory), and [`existing_protected`], the list the sandbox
//! turns into read-only binds for commands.
//!
//! Does not own: resolving a tool path to its final directory (`resolve`) or the write itself
//! (`write`); the decision is only ever asked about a path that `resolve` walked component by
//! component without following symlinks, so the spelling it judges is the one written through.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, MetadataExt};

/// What git executes or reads as configuration, from gitrepository-layout(5), plus cordon's
/// own state: the protected list of the built-in policies (see policies/default.toml).
pub const GIT_CONTROL_PATHS: &[&str] = &[
    ".git/hooks",
    ".git/config",
    ".git/config.worktree",
    ".git/commondir",
    ".git/info/attributes",
    ".git/objects/info/alternates",
    ".git/objects/info/http-alternates",
    ".git/remotes",
    ".git/branches",
    ".git/worktrees/*/config",
    ".git/worktrees/*/config.worktree",
    ".git/worktrees/*/commondir",
    ".git/worktrees/*/gitdir",
    ".git/worktrees/*/hooks",
    ".git/worktrees/*/info/attributes",
    ".git/modules/*/config",
    ".git/modules/*/config.worktree",
    ".git/modules/*/commondir",
    ".git/modules/*/gitdir",
    ".git/modules/*/hooks",
    ".git/modules/*/info/attributes",
    ".git/modules/*/objects/info/alternates",
    ".cordon",
];

/// The name git looks for in every directory: as a file ("gitdir: PATH") it says where the
/// repository is, so writing one points git at a repository (and its config) of the writer's
/// choosing. Refused at any depth and whatever the policy lists; a `.git` *directory* is never
/// written by the file tools anyway (it is a directory).
pub(crate) const GITFILE_NAME: &str = ".git";

/// `(device, inode)`: what a file *is*, whatever it is called.
pub(crate) type FileId = (u64, u64);

/// The segments of a pattern or path that matter: empty and `.` segments are noise.
fn segments(p: &str) -> impl Iterator<Item = &str> {
    p.split('/').filter(|c| !c.is_empty() && *c != ".")
}

/// Whether `name` (one path component) matches one pattern segment, where `*` matches any
/// run of characters: patterns are split into segments first, so a star never crosses `/`.
pub(crate) fn segment_matches(pattern: &str, name: &str) -> bool {
    crate::glob::matches(pattern, name)
}

/// The pattern that protects the resolved workspace-relative path `path` (its components, as
/// `resolve` found them on disk), if any: a pattern protects what it names and everything
/// beneath it, and `.git` and everything beneath any `.git` is always protected (see
/// [`GITFILE_NAME`]): the file tools write the host's files, and the operator's gitdir is
/// written only by cordon's verified import (`crate::git`), never at a model's request.
pub fn protected_entry<'a, S: AsRef<str>>(patterns: &'a [String], path: &[S]) -> Option<&'a str> {
    let path = clean(path);
    matching_pattern(patterns, &path)
        .or_else(|| path.contains(&GITFILE_NAME).then_some(GITFILE_NAME))
}

/// Whether the resolved directory `dir` lies in (or is) a protected entry, so that nothing
/// may be created in it: any directory inside a `.git` is (see [`protected_entry`]).
pub(crate) fn inside_protected<'a, S: AsRef<str>>(
    patterns: &'a [String],
    dir: &[S],
) -> Option<&'a str> {
    let dir = clean(dir);
    // `.git` itself is judged with the entry made in it ([`protected_entry`] names the pattern
    // that protects it, or `.git`); anything deeper is refused here.
    let inside = dir.len() > 1 && dir[..dir.len() - 1].contains(&GITFILE_NAME);
    matching_pattern(patterns, &dir).or_else(|| inside.then_some(GITFILE_NAME))
}

fn clean<S: AsRef<str>>(path: &[S]) -> Vec<&str> {
    path.iter()
        .map(AsRef::as_ref)
        .filter(|c| !c.is_empty() && *c != ".")
        .collect()
}

fn matching_pattern<'a>(patterns: &'a [String], path: &[&str]) -> Option<&'a str> {
    patterns.iter().map(String::as_str).find(|pattern| {
        let segs: Vec<&str> = segments(pattern).collect();
        !segs.is_empty()
            && segs.len() <= path.len()
            && segs
                .iter()
                .zip(path)
                .all(|(seg, name)| segment_matches(seg, name))
    })
}

/// Kind of an existing protected entry, as the sandbox needs to know it for a bind mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Directory,
    File,
    /// A symbolic link, reported as such and not followed: redirecting it would redirect
    /// whatever reads the protected path, so the link itself is what must stay put.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// One protected entry that exists now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedEntry {
    /// Workspace-relative path, as found on disk (globs expanded).
    pub path: PathBuf,
    pub kind: EntryKind,
    /// The pattern it matched (`.git` for a gitfile).
    pub pattern: String,
}

/// The protected entries that exist beneath `root` right now, globs expanded, walked without
/// following any symlink: a symlink on the way to (or at) a protected path is itself reported,
/// as [`EntryKind::Symlink`]. For the sandbox to make them read-only for commands. A gitfile
/// (`.git` that is not a directory) at the root is included.
pub fn existing_protected(root: &Dir, patterns: &[String]) -> Vec<ProtectedEntry> {
    let mut out: Vec<ProtectedEntry> = Vec::new();
    if let Ok(meta) = root.symlink_metadata(GITFILE_NAME)
        && !meta.is_dir()
    {
        out.push(ProtectedEntry {
            path: PathBuf::from(GITFILE_NAME),
            kind: kind_of(&meta),
            pattern: GITFILE_NAME.to_owned(),
        });
    }
    expand_all(root, patterns, false, &mut |path, meta, pattern| {
        let path: PathBuf = path.iter().collect();
        if !out.iter().any(|e| e.path == path) {
            out.push(ProtectedEntry {
                path,
                kind: kind_of(meta),
                pattern: pattern.to_owned(),
            });
        }
    });
    out
}

fn kind_of(meta: &cap_std::fs::Metadata) -> EntryKind {
    let ft = meta.file_type();
    if ft.is_symlink() {
        EntryKind::Symlink
    } else if ft.is_dir() {
        EntryKind::Directory
    } else if ft.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

/// Calls `found` for every existing entry a pattern names, with the (first) pattern naming it.
///
/// All patterns are walked together, as a tree of their shared prefixes, so each directory is
/// opened, listed (for a `*` segment) and each name looked at once however many patterns pass
/// through it: the built-in list is two dozen patterns under `.git`, and this runs per write.
///
/// Without `follow`, nothing is followed: a symlink met on the way (or at the end) is reported
/// itself and not walked through. With `follow`, a symlink is reported and then followed
/// beneath the root (a `stat` or directory open, which cannot block on a FIFO): the walk goes on
/// from its target, and a final one's target is reported too.
fn expand_all(
    root: &Dir,
    patterns: &[String],
    follow: bool,
    found: &mut dyn FnMut(&[OsString], &cap_std::fs::Metadata, &str),
) {
    let segs: Vec<Vec<&str>> = patterns.iter().map(|p| segments(p).collect()).collect();
    let active: Vec<usize> = (0..segs.len()).filter(|&i| !segs[i].is_empty()).collect();
    if active.is_empty() {
        return;
    }
    let Ok(start) = root.try_clone() else { return };
    // Each step consumes one segment, so symlinks cannot make this loop.
    let mut stack: Vec<(Dir, Vec<OsString>, Vec<usize>)> = vec![(start, Vec::new(), active)];
    while let Some((dir, path, active)) = stack.pop() {
        let depth = path.len();
        let mut names: Vec<OsString> = Vec::new();
        // Names already queued, so a listing of tens of thousands stays linear.
        let mut queued: std::collections::HashSet<OsString> = std::collections::HashSet::new();
        for &i in &active {
            let seg = segs[i][depth];
            if !seg.contains('*') && queued.insert(OsString::from(seg)) {
                names.push(OsString::from(seg));
            }
        }
        if active.iter().any(|&i| segs[i][depth].contains('*'))
            && let Ok(entries) = dir.entries()
        {
            // Listed in full: a listing limit would decide protection (6,000 planted
            // directories in `.git/modules` pushed the operator's real submodule out of a
            // 4,096-entry listing and so out of the view's read-only binds).
            for name in entries.flatten().map(|e| e.file_name()) {
                let text = name.to_string_lossy();
                let globbed = active.iter().any(|&i| {
                    let seg = segs[i][depth];
                    seg.contains('*') && segment_matches(seg, &text)
                });
                if globbed && queued.insert(name.clone()) {
                    names.push(name);
                }
            }
        }
        for name in names {
            let text = name.to_string_lossy();
            let matching: Vec<usize> = active
                .iter()
                .copied()
                .filter(|&i| segment_matches(segs[i][depth], &text))
                .collect();
            let Some(&first) = matching.first() else {
                continue;
            };
            let Ok(meta) = dir.symlink_metadata(&name) else {
                continue;
            };
            let ending = matching.iter().find(|&&i| segs[i].len() == depth + 1);
            let going_on: Vec<usize> = matching
                .iter()
                .copied()
                .filter(|&i| segs[i].len() > depth + 1)
                .collect();
            let mut child = path.clone();
            child.push(name.clone());
            if meta.file_type().is_symlink() {
                found(&child, &meta, &patterns[*ending.unwrap_or(&first)]);
                if !follow {
                    continue;
                }
                let rel: PathBuf = child.iter().collect();
                if let Some(&i) = ending
                    && let Ok(target) = root.metadata(&rel)
                {
                    found(&child, &target, &patterns[i]);
                }
                if !going_on.is_empty()
                    && let Ok(sub) = root.open_dir(&rel)
                {
                    stack.push((sub, child, going_on));
                }
            } else {
                if let Some(&i) = ending {
                    found(&child, &meta, &patterns[i]);
                }
                if !going_on.is_empty()
                    && meta.is_dir()
                    && let Ok(sub) = dir.open_dir_nofollow(&name)
                {
                    stack.push((sub, child, going_on));
                }
            }
        }
    }
}

/// Identities of the existing protected entries (symlinks followed beneath the root, so an
/// entry reached through `.git -> real-git-dir` is known by the directory it really is), for
/// catching a target whose spelling matches no pattern but which *is* a protected entry.
#[derive(Debug, Default)]
pub struct IdentitySnapshot {
    ids: HashMap<FileId, String>,
}

impl IdentitySnapshot {
    /// Takes the snapshot: one `statx` per distinct name the patterns lead to, one open per
    /// directory they pass through; taken once per write.
    pub fn take(root: &Dir, patterns: &[String]) -> Self {
        let mut ids = HashMap::new();
        expand_all(root, patterns, true, &mut |_, meta, pattern| {
            ids.entry((meta.dev(), meta.ino()))
                .or_insert_with(|| pattern.to_owned());
        });
        IdentitySnapshot { ids }
    }

    /// The pattern whose entry has this identity, if any.
    pub fn entry_for(&self, id: FileId) -> Option<&str> {
        self.ids.get(&id).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pats(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn segments_glob_within_one_component() {
        assert!(segment_matches("*", "anything"));
        assert!(segment_matches("*.lock", "Cargo.lock"));
        assert!(segment_matches("a*b*c", "aXXbYYc"));
        assert!(!segment_matches("a*b", "ac"));
        assert!(!segment_matches("config", "config.worktree"));
        assert!(segment_matches("**", ""));
    }

    #[test]
    fn a_pattern_protects_its_entry_and_everything_beneath() {
        let p = pats(&[".git/hooks", ".git/worktrees/*/config"]);
        assert_eq!(protected_entry(&p, &[".git", "hooks"]), Some(".git/hooks"));
        assert_eq!(
            protected_entry(&p, &[".git", "hooks", "pre-commit"]),
            Some(".git/hooks")
        );
        assert_eq!(
            protected_entry(&p, &[".git", "worktrees", "wt1", "config"]),
            Some(".git/worktrees/*/config")
        );
        // Beneath a `.git`, what no pattern names is still never the file tools' to write.
        assert_eq!(
            protected_entry(&p, &[".git", "worktrees", "wt1", "HEAD"]),
            Some(".git")
        );
        assert_eq!(protected_entry(&p, &[".git", "HEAD"]), Some(".git"));
        assert_eq!(protected_entry(&p, &["src", "hooks"]), None);
        assert_eq!(
            protected_entry(&p, &[".", ".git", "", "hooks"]),
            Some(".git/hooks")
        );
    }

    #[test]
    fn a_gitfile_is_protected_at_any_depth() {
        let none: Vec<String> = Vec::new();
        assert_eq!(protected_entry(&none, &[".git"]), Some(".git"));
        assert_eq!(
            protected_entry(&none, &["vendor", "sub", ".git"]),
            Some(".git")
        );
        assert_eq!(
            protected_entry(&none, &[".github", "workflows", "ci.yml"]),
            None
        );
        // Nor is anything created inside a `.git` directory (the import writes it, not a tool).
        assert_eq!(inside_protected(&none, &[".git", "refs"]), Some(".git"));
        assert_eq!(
            inside_protected(&none, &["lib", ".git", "refs"]),
            Some(".git")
        );
        assert_eq!(inside_protected(&none, &["src"]), None);
    }

    #[test]
    fn the_builtin_list_covers_what_git_runs_or_reads() {
        let p: Vec<String> = GIT_CONTROL_PATHS.iter().map(|s| (*s).to_owned()).collect();
        for path in [
            ".git/config",
            ".git/config.worktree",
            ".git/commondir",
            ".git/info/attributes",
            ".git/objects/info/alternates",
            ".git/hooks/pre-commit",
            ".git/worktrees/x/commondir",
            ".git/worktrees/x/gitdir",
            ".git/modules/lib/config",
            ".git/modules/lib/hooks/post-checkout",
            ".cordon/outputs/x",
        ] {
            let parts: Vec<&str> = path.split('/').collect();
            assert!(protected_entry(&p, &parts).is_some(), "{path}");
        }
        // The file tools write the host's files: nothing of a gitdir is theirs to write (calls'
        // git writes go to the shadow gitdir, `crate::git`).
        for path in [
            ".git/HEAD",
            ".git/objects/ab/cdef",
            ".git/refs/heads/main",
            ".git/info/exclude",
            "sub/.git/config",
        ] {
            let parts: Vec<&str> = path.split('/').collect();
            assert_eq!(protected_entry(&p, &parts), Some(".git"), "{path}");
        }
        for path in ["src/config", ".github/workflows/ci.yml", "a.git/x"] {
            let parts: Vec<&str> = path.split('/').collect();
            assert!(protected_entry(&p, &parts).is_none(), "{path}");
        }
    }

    #[test]
    fn the_default_policy_protects_exactly_the_builtin_list() {
        let policy = crate::policy::Policy::builtin_default();
        assert_eq!(policy.filesystem.protected, GIT_CONTROL_PATHS);
    }

    #[test]
    fn existing_entries_are_listed_with_symlinks_as_such() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join(".git/hooks")).unwrap();
        std::fs::create_dir_all(t.path().join(".git/worktrees/a")).unwrap();
        std::fs::write(t.path().join(".git/worktrees/a/gitdir"), "x").unwrap();
        std::os::unix::fs::symlink("../elsewhere", t.path().join(".git/config")).unwrap();
        let root = Dir::open_ambient_dir(t.path(), cap_std::ambient_authority()).unwrap();
        let p = pats(&[
            ".git/hooks",
            ".git/config",
            ".git/worktrees/*/gitdir",
            ".git/info/attributes",
        ]);
        let mut found = existing_protected(&root, &p);
        found.sort_by(|a, b| a.path.cmp(&b.path));
        let got: Vec<(String, EntryKind)> = found
            .iter()
            .map(|e| (e.path.display().to_string(), e.kind))
            .collect();
        assert_eq!(
            got,
            vec![
                (".git/config".to_owned(), EntryKind::Symlink),
                (".git/hooks".to_owned(), EntryKind::Directory),
                (".git/worktrees/a/gitdir".to_owned(), EntryKind::File),
            ]
        );
    }

    #[test]
    fn a_symlinked_git_dir_is_reported_as_the_link() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("real/hooks")).unwrap();
        std::os::unix::fs::symlink("real", t.path().join(".git")).unwrap();
        let root = Dir::open_ambient_dir(t.path(), cap_std::ambient_authority()).unwrap();
        let found = existing_protected(&root, &pats(&[".git/hooks"]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, std::path::Path::new(".git"));
        assert_eq!(found[0].kind, EntryKind::Symlink);
        // ...and the identity snapshot knows the real directory behind it, and only that one.
        let snap = IdentitySnapshot::take(&root, &pats(&[".git/hooks"]));
        use std::os::unix::fs::MetadataExt as _;
        let hooks = std::fs::metadata(t.path().join("real/hooks")).unwrap();
        assert!(snap.entry_for((hooks.dev(), hooks.ino())).is_some());
        let real = std::fs::metadata(t.path().join("real")).unwrap();
        assert!(snap.entry_for((real.dev(), real.ino())).is_none());
    }
}
