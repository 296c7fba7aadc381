//! The operator's git settings that calls get besides the identity: an allow-list of keys
//! that change how git behaves and never what it runs or reads.
//!
//! Why: calls have their own HOME, so the operator's `~/.gitconfig` is not theirs, and without
//! these `git init` made `master` where the operator's makes `main`, `git pull` merged where it
//! rebases, and the operator's aliases were unknown. A key is passed only when it is on
//! [`PASSED_KEYS`] (or is a `color.*` key, or an `alias.*` whose value does not start with `!`:
//! a shell alias runs a program). Keys that name a program, a hook directory, a filter, another
//! file to read or a URL rewrite (`core.fsmonitor`, `core.hooksPath`, `core.editor`,
//! `*.command`, `filter.*`, `diff.external`, `credential.*`, `include.*`, `url.*`, …) are
//! never passed, whatever their value.
//!
//! Owns the choice of keys and their encoding as `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_<n>`/
//! `GIT_CONFIG_VALUE_<n>` (git 2.31+). Reading the files is `gitconfig::operator_configs`'s;
//! putting the variables into the calls' environment is `policy::resolve`'s.

use super::gitconfig::Entry;
use std::collections::BTreeMap;

/// Keys (lowercased, as git compares them) passed as the operator set them. Each takes a
/// boolean, a name, a number or a mode, never a command or a path. Documented in SECURITY.md
/// ("Git") and policies/README.md ("[environment]"); extend only with keys of that kind.
pub(crate) const PASSED_KEYS: &[&str] = &[
    "init.defaultbranch",
    "pull.rebase",
    "pull.ff",
    "merge.conflictstyle",
    "merge.ff",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.quotepath",
    "core.whitespace",
    "diff.algorithm",
    "diff.colormoved",
    "diff.renames",
    "diff.mnemonicprefix",
    "push.default",
    "push.autosetupremote",
    "push.followtags",
    "rebase.autosquash",
    "rebase.autostash",
    "rebase.updaterefs",
    "fetch.prune",
    "fetch.prunetags",
    "rerere.enabled",
    "commit.verbose",
    "log.date",
    "log.decorate",
    "branch.sort",
    "tag.sort",
    "column.ui",
    "status.short",
    "status.branch",
];

/// Whether `entry` may reach calls (see the module docs).
pub(crate) fn is_passed(entry: &Entry) -> bool {
    match (entry.section.as_str(), &entry.subsection) {
        // `[color] ui`, `[color "diff"] meta`: colours and switches only.
        ("color", _) => true,
        // `[alias] st = status`; `!cmd` runs a shell. A subsection form is not an alias git
        // knows, so it is not passed either.
        ("alias", None) => {
            entry
                .value
                .as_deref()
                .is_some_and(|v| !v.trim_start().starts_with('!'))
                && entry
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-')
        }
        (_, None) => PASSED_KEYS.contains(&entry.key().as_str()),
        _ => false,
    }
}

/// The operator's passed keys, a later file's value winning (`configs` in git's order), as
/// the `GIT_CONFIG_*` variables that give them to git: empty when there are none.
pub(crate) fn as_environment(configs: &[Vec<Entry>]) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<String, String> = BTreeMap::new();
    for entry in configs.iter().flatten().filter(|e| is_passed(e)) {
        // A bare key (`[color] ui`) is git's `true`.
        let value = entry.value.clone().unwrap_or_else(|| "true".into());
        chosen.insert(entry.key(), value);
    }
    let mut env = BTreeMap::new();
    if chosen.is_empty() {
        return env;
    }
    env.insert("GIT_CONFIG_COUNT".into(), chosen.len().to_string());
    for (i, (key, value)) in chosen.into_iter().enumerate() {
        env.insert(format!("GIT_CONFIG_KEY_{i}"), key);
        env.insert(format!("GIT_CONFIG_VALUE_{i}"), value);
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::gitconfig::parse;

    fn env_of(text: &str) -> BTreeMap<String, String> {
        as_environment(&[parse(text).unwrap()])
    }

    #[test]
    fn harmless_keys_and_aliases_pass_and_a_later_value_wins() {
        let env = as_environment(&[
            parse("[init]\n\tdefaultBranch = trunk\n").unwrap(),
            parse(
                "[init]\n\tdefaultBranch = main\n[pull]\n\trebase = true\n\
                 [alias]\n\tst = status -sb\n[color]\n\tui\n[merge]\n\tconflictStyle = zdiff3\n",
            )
            .unwrap(),
        ]);
        let pairs: BTreeMap<&str, &str> = (0..env["GIT_CONFIG_COUNT"].parse().unwrap())
            .map(|i: usize| {
                (
                    env[&format!("GIT_CONFIG_KEY_{i}")].as_str(),
                    env[&format!("GIT_CONFIG_VALUE_{i}")].as_str(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            BTreeMap::from([
                ("alias.st", "status -sb"),
                ("color.ui", "true"),
                ("init.defaultbranch", "main"),
                ("merge.conflictstyle", "zdiff3"),
                ("pull.rebase", "true"),
            ])
        );
    }

    #[test]
    fn keys_that_run_programs_or_read_files_never_pass() {
        for text in [
            "[alias]\n\tx = !sh -c 'touch /tmp/pwned'\n",
            "[alias]\n\tx = \"  !touch /tmp/pwned\"\n",
            "[alias \"x\"]\n\tcommand = status\n",
            "[core]\n\tfsmonitor = touch /tmp/x\n",
            "[core]\n\thooksPath = /tmp/hooks\n",
            "[core]\n\teditor = vim\n",
            "[core]\n\tpager = less\n",
            "[core]\n\texcludesFile = ~/.gitignore\n",
            "[sequence]\n\teditor = vim\n",
            "[diff]\n\texternal = difft\n",
            "[diff \"x\"]\n\ttextconv = cat\n",
            "[filter \"lfs\"]\n\tclean = git-lfs clean\n",
            "[credential]\n\thelper = store\n",
            "[include]\n\tpath = ~/.other\n",
            "[includeIf \"gitdir:~/\"]\n\tpath = ~/.other\n",
            "[url \"https://evil/\"]\n\tinsteadOf = https://github.com/\n",
            "[gpg]\n\tprogram = gpg2\n",
            "[commit]\n\tgpgSign = true\n",
            "[init]\n\ttemplateDir = ~/tpl\n",
            "[user]\n\tname = Someone\n",
        ] {
            assert_eq!(env_of(text), BTreeMap::new(), "{text}");
        }
    }
}
