//! Protected paths inside the workspace (`.git/hooks`, `.git/config`, `.cordon`, …): places the
//! file tools refuse to write, because what lands there later runs or is trusted outside any
//! sandbox (a git hook runs on the operator's next commit).
//!
//! The check is by identity, not by spelling: a path is protected when the file it names, or
//! any directory it lies in, *is* (same device and inode) a protected entry, so an alias
//! through a symlink inside the workspace (`hooks -> .git/hooks`) is caught too. Confining
//! shell commands away from these paths is `confine`'s business, not this module's.

use std::collections::HashSet;

use cap_std::fs::{Dir, MetadataExt};

use super::{RelPath, Workspace};

/// How far up from a target we walk before giving up (deep trees are fine; loops are not).
const MAX_DEPTH: usize = 256;

impl Workspace {
    /// The protected entry `rel` would write into, if any. `protected` are workspace-relative.
    pub fn protected_match<'a>(&self, rel: &RelPath, protected: &'a [String]) -> Option<&'a str> {
        // Lexical first: cheap, and covers entries that do not exist yet.
        let normal = normalize(rel.as_str());
        if let Some(p) = protected
            .iter()
            .find(|p| normal == normalize(p) || normal.starts_with(&format!("{}/", normalize(p))))
        {
            return Some(p);
        }
        let identities: Vec<(u64, u64, &str)> = protected
            .iter()
            .filter_map(|p| {
                let m = self.dir().metadata(p.as_str()).ok()?;
                Some((m.dev(), m.ino(), p.as_str()))
            })
            .collect();
        if identities.is_empty() {
            return None;
        }
        let hit = |dev: u64, ino: u64| {
            identities
                .iter()
                .find(|(d, i, _)| *d == dev && *i == ino)
                .map(|(_, _, p)| *p)
        };
        if let Ok(m) = self.dir().metadata(rel.as_path())
            && let Some(p) = hit(m.dev(), m.ino())
        {
            return Some(p);
        }
        let parent = rel.as_path().parent().filter(|p| !p.as_os_str().is_empty());
        let start = match parent {
            Some(parent) => self.dir().open_dir(parent).ok()?,
            None => return None,
        };
        for (dev, ino) in ancestors(&start, self.dir()) {
            if let Some(p) = hit(dev, ino) {
                return Some(p);
            }
        }
        None
    }
}

/// (dev, ino) of `dir` and each directory above it, up to (not including) `root`.
fn ancestors(dir: &Dir, root: &Dir) -> Vec<(u64, u64)> {
    let Ok(root_meta) = root.dir_metadata() else {
        return Vec::new();
    };
    let root_id = (root_meta.dev(), root_meta.ino());
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let Ok(mut current) = dir.try_clone() else {
        return out;
    };
    for _ in 0..MAX_DEPTH {
        let Ok(m) = current.dir_metadata() else { break };
        let id = (m.dev(), m.ino());
        if id == root_id || !seen.insert(id) {
            break;
        }
        out.push(id);
        // `..` of a directory inside the root stays inside; cap-std refuses to climb above.
        match current.open_dir("..") {
            Ok(up) => current = up,
            Err(_) => break,
        }
    }
    out
}

fn normalize(p: &str) -> String {
    p.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join(".git/hooks")).unwrap();
        std::fs::write(t.path().join(".git/config"), "[core]\n").unwrap();
        let w = Workspace::open(t.path()).unwrap();
        (t, w)
    }

    fn protected() -> Vec<String> {
        vec![".git/hooks".into(), ".git/config".into(), ".cordon".into()]
    }

    #[test]
    fn direct_spellings_are_protected() {
        let (_t, w) = ws();
        for p in [
            ".git/hooks/pre-commit",
            "./.git/config",
            ".cordon/x",
            ".git//hooks/a",
        ] {
            let rel = w.resolve_arg(p).unwrap();
            assert!(w.protected_match(&rel, &protected()).is_some(), "{p}");
        }
        let rel = w.resolve_arg("src/main.rs").unwrap();
        assert!(w.protected_match(&rel, &protected()).is_none());
    }

    #[test]
    fn symlink_aliases_are_protected() {
        let (t, w) = ws();
        std::os::unix::fs::symlink(".git/hooks", t.path().join("hooks")).unwrap();
        std::os::unix::fs::symlink(".git/config", t.path().join("cfg")).unwrap();
        std::os::unix::fs::symlink(".git", t.path().join("g")).unwrap();
        for p in ["hooks/pre-commit", "cfg", "g/hooks/post-merge", "g/config"] {
            let rel = w.resolve_arg(p).unwrap();
            assert!(w.protected_match(&rel, &protected()).is_some(), "{p}");
        }
    }
}
