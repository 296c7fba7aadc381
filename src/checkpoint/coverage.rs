//! Which paths a checkpoint covers: what git does not ignore, plus the policy's
//! `[checkpoints] include` among the ignored, never a `.git`.
//!
//! Owns: the gitignore rules of one directory (its `.gitignore`, and at the root the
//! operator's `.git/info/exclude`), the decision for one path given the rules of the
//! directories above it, and whether an ignored directory must still be walked because an
//! `include` pattern may match beneath it. Matching itself is the `ignore` crate's (git's
//! own syntax: negation, anchoring, `**`, directory-only patterns). The global
//! `core.excludesFile` is not read: it is the operator's configuration, not the workspace's,
//! and a path it ignores is merely recorded too.
//!
//! Does not own: reading the files (the scan hands their bytes in, read beneath the
//! workspace handle without following a link).

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use std::path::{Path, PathBuf};

/// The rules of one directory: its `.gitignore` lines, rooted there.
pub(crate) struct DirRules(Gitignore);

/// A path's virtual absolute spelling: matching happens on `/`-rooted paths so that each
/// directory's rules see the path relative to that directory.
fn rooted(rel: &str) -> PathBuf {
    Path::new("/").join(rel)
}

impl DirRules {
    /// The rules of directory `dir_rel` (workspace-relative, "" for the root) from the texts
    /// of its ignore files. Lines git could not parse are skipped, as git skips them.
    pub(crate) fn new(dir_rel: &str, texts: &[&str]) -> Option<Self> {
        let mut builder = GitignoreBuilder::new(rooted(dir_rel));
        let mut any = false;
        for text in texts {
            for line in text.lines() {
                if builder.add_line(None, line).is_ok() {
                    any = true;
                }
            }
        }
        any.then(|| builder.build().ok().map(DirRules)).flatten()
    }
}

/// The policy's side of coverage: `include` patterns (gitignore syntax, rooted at the
/// workspace) that bring ignored paths back.
pub(crate) struct Coverage {
    include: Option<Gitignore>,
    /// Anchored `include` patterns as written (without a leading `/`), to tell which ignored
    /// directories may hold an included path.
    anchored: Vec<String>,
    /// Some `include` pattern has no inner `/`, so it may match at any depth: every ignored
    /// directory must be walked to find its matches (the operator's choice, and its cost).
    anywhere: bool,
}

impl Coverage {
    /// Coverage with `include` patterns (already validated by the policy).
    pub(crate) fn new(include: &[String]) -> Self {
        let mut builder = GitignoreBuilder::new("/");
        let mut anchored = Vec::new();
        let mut anywhere = false;
        for pattern in include {
            if builder.add_line(None, pattern).is_err() {
                continue;
            }
            let trimmed = pattern.trim_end_matches('/');
            let body = trimmed.strip_prefix('/').unwrap_or(trimmed);
            if trimmed.starts_with('/') || body.contains('/') {
                anchored.push(body.to_owned());
            } else {
                anywhere = true;
            }
        }
        Self {
            include: (!include.is_empty())
                .then(|| builder.build().ok())
                .flatten(),
            anchored,
            anywhere,
        }
    }

    /// Whether `pattern` is a pattern `include` accepts: gitignore syntax, no negation (it
    /// would mean nothing here), not empty.
    pub(crate) fn check_pattern(pattern: &str) -> Result<(), String> {
        if pattern.trim().is_empty() || pattern.starts_with('#') {
            return Err("an empty pattern or a comment includes nothing".into());
        }
        if pattern.starts_with('!') {
            return Err("a negated pattern includes nothing; list only what to include".into());
        }
        let mut builder = GitignoreBuilder::new("/");
        builder
            .add_line(None, pattern)
            .map_err(|e| format!("not a gitignore pattern: {e}"))?;
        builder
            .build()
            .map(|_| ())
            .map_err(|e| format!("not a gitignore pattern: {e}"))
    }

    /// Whether git ignores `rel` under the rules of the directories above it (`stack`, the
    /// root's first): the deepest directory whose rules say anything decides.
    pub(crate) fn ignored(stack: &[Option<DirRules>], rel: &str, is_dir: bool) -> bool {
        let path = rooted(rel);
        for rules in stack.iter().rev().flatten() {
            let m = rules.0.matched(&path, is_dir);
            if m.is_ignore() {
                return true;
            }
            if m.is_whitelist() {
                return false;
            }
        }
        false
    }

    /// Whether an ignored `rel` is brought back by `include` (a pattern naming it or a
    /// directory above it).
    pub(crate) fn included(&self, rel: &str, is_dir: bool) -> bool {
        self.include.as_ref().is_some_and(|g| {
            g.matched_path_or_any_parents(rooted(rel), is_dir)
                .is_ignore()
        })
    }

    /// Whether the ignored directory `rel` (not itself included) may hold an included path,
    /// so the scan must walk it.
    pub(crate) fn may_include_beneath(&self, rel: &str) -> bool {
        if self.anywhere {
            return true;
        }
        let prefix = format!("{rel}/");
        self.anchored
            .iter()
            .any(|p| p.starts_with(&prefix) || p.starts_with("**") || p.starts_with('*'))
    }
}

/// Whether a name is never recorded: git's own directory anywhere (the operator's history
/// belongs to git and to cordon's git import, never to a checkpoint), and at the root
/// cordon's own directories (spilled outputs, the calls' home), which the server makes and
/// prunes itself: a restore must not take them away nor bring old outputs back.
pub(crate) fn never_recorded(at_root: bool, name: &str) -> bool {
    name == ".git"
        || (at_root && (name == ".cordon" || name == crate::policy::toolchains::WORKSPACE_HOME))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deeper_rules_decide_and_negation_brings_back() {
        let root = DirRules::new("", &["target/\n*.log\n"]);
        let sub = DirRules::new("src", &["!keep.log\n/gen\n"]);
        let stack = [root, sub];
        assert!(Coverage::ignored(&stack[..1], "target", true));
        assert!(!Coverage::ignored(&stack[..1], "target", false));
        assert!(Coverage::ignored(&stack, "src/a.log", false));
        assert!(!Coverage::ignored(&stack, "src/keep.log", false));
        assert!(Coverage::ignored(&stack, "src/gen", true));
        assert!(!Coverage::ignored(&stack, "gen", true));
        assert!(!Coverage::ignored(&stack, "src/main.rs", false));
    }

    #[test]
    fn include_brings_back_ignored_paths_and_says_where_to_walk() {
        let c = Coverage::new(&["target/keep/".into(), ".env".into()]);
        assert!(c.included("target/keep", true));
        assert!(c.included("target/keep/a/b", false));
        assert!(!c.included("target/other", false));
        assert!(c.included("sub/.env", false));
        assert!(c.may_include_beneath("target"));
        let anchored = Coverage::new(&["target/keep/".into()]);
        assert!(anchored.may_include_beneath("target"));
        assert!(!anchored.may_include_beneath("node_modules"));
        let none = Coverage::new(&[]);
        assert!(!none.included("target", true));
        assert!(!none.may_include_beneath("target"));
    }

    #[test]
    fn include_patterns_are_checked() {
        assert!(Coverage::check_pattern("target/keep/").is_ok());
        assert!(Coverage::check_pattern("!x").is_err());
        assert!(Coverage::check_pattern("  ").is_err());
        assert!(Coverage::check_pattern("# a comment").is_err());
    }
}
