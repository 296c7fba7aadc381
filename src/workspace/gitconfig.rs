//! git configuration files as git reads them, and the allow-list of keys that run nothing.
//!
//! Why: a git config cordon did not see in the operator's repository at start (a planted
//! submodule's, a nested repository's, a new worktree's, `config.worktree`) is written by a
//! confined process, and git reads it outside any sandbox on the operator's next `git status`.
//! A deny-list of "keys that run commands" always misses one (`remote.*.uploadpack`,
//! `pager.*`, `difftool.*.cmd`, …), so such a config is accepted only when every key it sets
//! is on [`ALLOWED`]. Owns the parser (git's syntax: sections, `"subsections"`, the old
//! `[section.sub]` form, quoted values, escapes, continuation lines, comments, a leading UTF-8
//! BOM skipped as git skips it) and the decision; never panics (fuzzed: `git_index`).
//! Reading the file (bounded, no symlink) and moving it are the caller's business.

/// Largest config file vetted; a larger one is refused whole (git would read it).
pub(crate) const MAX_CONFIG_BYTES: usize = 1 << 20;

/// Keys a config cordon did not see at start may set: none of them names a program, a
/// script, a hook directory, another file to include or a filter, so a config made only of
/// them runs nothing when git reads it. `*` stands for one subsection (a remote, branch or
/// submodule name). Documented in SECURITY.md; extend only with keys that run nothing.
pub(crate) const ALLOWED: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    // `git submodule add` writes the submodule's work tree; `sparse-checkout set` the two
    // sparse switches. Each names a directory or a boolean, never a program.
    "core.worktree",
    "core.sparsecheckout",
    "core.sparsecheckoutcone",
    "remote.*.url",
    "remote.*.fetch",
    "branch.*.remote",
    "branch.*.merge",
    "user.name",
    "user.email",
    "submodule.*.url",
    "submodule.*.active",
    "extensions.worktreeconfig",
    "extensions.objectformat",
];

/// One `key = value` line: section and name lowercased (git compares them so), the
/// subsection as written (the old `[section.sub]` form lowercases it, as git does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub section: String,
    pub subsection: Option<String>,
    pub name: String,
    /// None: a bare key (`[core] bare`), which git reads as true.
    pub value: Option<String>,
}

impl Entry {
    /// The key as git prints it (`remote.origin.url`).
    pub fn key(&self) -> String {
        match &self.subsection {
            Some(sub) => format!("{}.{sub}.{}", self.section, self.name),
            None => format!("{}.{}", self.section, self.name),
        }
    }

    /// Whether this key is on [`ALLOWED`].
    pub fn is_allowed(&self) -> bool {
        ALLOWED.iter().any(|pattern| {
            let mut parts = pattern.splitn(3, '.');
            let (section, middle, name) = (parts.next(), parts.next(), parts.next());
            match (section, middle, name, &self.subsection) {
                (Some(s), Some(n), None, None) => s == self.section && n == self.name,
                (Some(s), Some("*"), Some(n), Some(_)) => s == self.section && n == self.name,
                _ => false,
            }
        })
    }
}

/// Why a config is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigRefusal {
    #[error("it is larger than {} bytes", MAX_CONFIG_BYTES)]
    TooLarge,
    #[error("it is not valid UTF-8")]
    NotUtf8,
    #[error("it is not valid git config syntax (line {0})")]
    Syntax(usize),
    #[error("it sets `{0}`, which is not on cordon's list of git keys that run nothing")]
    Key(String),
}

/// Parses a config as git does. Err(line) for what git would refuse (or read differently
/// from anything this parser can vouch for).
pub fn parse(text: &str) -> Result<Vec<Entry>, usize> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let chars: Vec<char> = text.chars().collect();
    let mut at = 0;
    let mut line = 1;
    let mut section: Option<(String, Option<String>)> = None;
    let mut out = Vec::new();
    while at < chars.len() {
        let c = chars[at];
        if c == '\n' {
            line += 1;
            at += 1;
        } else if c == ' ' || c == '\t' || c == '\r' {
            at += 1;
        } else if c == '#' || c == ';' {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
        } else if c == '[' {
            let (header, next) = section_header(&chars, at + 1).ok_or(line)?;
            section = Some(header);
            at = next;
        } else if c.is_ascii_alphabetic() {
            let (sec, sub) = section.clone().ok_or(line)?;
            let start = at;
            while at < chars.len() && (chars[at].is_ascii_alphanumeric() || chars[at] == '-') {
                at += 1;
            }
            let name: String = chars[start..at].iter().collect::<String>().to_lowercase();
            while at < chars.len() && (chars[at] == ' ' || chars[at] == '\t') {
                at += 1;
            }
            let value = match chars.get(at) {
                None | Some('\n') | Some('#') | Some(';') | Some('\r') => None,
                Some('=') => {
                    let (value, next, lines) = value(&chars, at + 1).ok_or(line)?;
                    at = next;
                    line += lines;
                    Some(value)
                }
                Some(_) => return Err(line),
            };
            out.push(Entry {
                section: sec,
                subsection: sub,
                name,
                value,
            });
        } else {
            return Err(line);
        }
    }
    Ok(out)
}

/// `[section]`, `[section "sub"]` or `[section.sub]`, starting after the `[`.
type Header = (String, Option<String>);

fn section_header(chars: &[char], mut at: usize) -> Option<(Header, usize)> {
    let start = at;
    while at < chars.len()
        && (chars[at].is_ascii_alphanumeric() || chars[at] == '-' || chars[at] == '.')
    {
        at += 1;
    }
    let name: String = chars[start..at].iter().collect::<String>().to_lowercase();
    if name.is_empty() {
        return None;
    }
    match chars.get(at)? {
        ']' => {
            // The old form: everything after the first dot is the (lowercased) subsection.
            let header = match name.split_once('.') {
                Some((s, sub)) if !s.is_empty() && !sub.is_empty() => {
                    (s.to_owned(), Some(sub.to_owned()))
                }
                Some(_) => return None,
                None => (name, None),
            };
            Some((header, at + 1))
        }
        ' ' | '\t' if !name.contains('.') => {
            while matches!(chars.get(at), Some(' ' | '\t')) {
                at += 1;
            }
            if chars.get(at) != Some(&'"') {
                return None;
            }
            at += 1;
            let mut sub = String::new();
            loop {
                match chars.get(at)? {
                    '"' => break,
                    '\n' | '\0' => return None,
                    '\\' => {
                        at += 1;
                        match chars.get(at)? {
                            '\n' | '\0' => return None,
                            c => sub.push(*c),
                        }
                    }
                    c => sub.push(*c),
                }
                at += 1;
            }
            if chars.get(at + 1) != Some(&']') {
                return None;
            }
            Some(((name, Some(sub)), at + 2))
        }
        _ => None,
    }
}

/// A value after `=`: returns it, the index after it (at the line's end) and how many
/// continuation lines it consumed.
fn value(chars: &[char], mut at: usize) -> Option<(String, usize, usize)> {
    let mut out = String::new();
    let mut quoted = false;
    let mut lines = 0;
    // Whitespace outside quotes is kept only between non-space characters.
    let mut pending_space = String::new();
    while matches!(chars.get(at), Some(' ' | '\t')) {
        at += 1;
    }
    loop {
        let Some(&c) = chars.get(at) else {
            return (!quoted).then_some((out, at, lines));
        };
        match c {
            '\n' => {
                return (!quoted).then_some((out, at, lines));
            }
            '\0' => return None,
            // git turns each blank between words into one space, and drops leading and
            // trailing ones.
            ' ' | '\t' | '\r' if !quoted => {
                if !out.is_empty() {
                    pending_space.push(' ');
                }
            }
            '#' | ';' if !quoted => {
                while at < chars.len() && chars[at] != '\n' {
                    at += 1;
                }
                return Some((out, at, lines));
            }
            '"' => {
                out.push_str(&std::mem::take(&mut pending_space));
                quoted = !quoted;
            }
            '\\' => {
                at += 1;
                let escaped = match chars.get(at) {
                    Some('\n') => {
                        lines += 1;
                        at += 1;
                        continue;
                    }
                    Some('\r') if chars.get(at + 1) == Some(&'\n') => {
                        lines += 1;
                        at += 2;
                        continue;
                    }
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('b') => '\u{8}',
                    Some('"') => '"',
                    Some('\\') => '\\',
                    _ => return None,
                };
                out.push_str(&std::mem::take(&mut pending_space));
                out.push(escaped);
            }
            c => {
                out.push_str(&std::mem::take(&mut pending_space));
                out.push(c);
            }
        }
        at += 1;
    }
}

/// Whether a config cordon did not see at start may stay: valid UTF-8, parseable, at most
/// [`MAX_CONFIG_BYTES`], and every key on [`ALLOWED`].
pub fn vet(bytes: &[u8]) -> Result<(), ConfigRefusal> {
    if bytes.len() > MAX_CONFIG_BYTES {
        return Err(ConfigRefusal::TooLarge);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| ConfigRefusal::NotUtf8)?;
    let entries = parse(text).map_err(ConfigRefusal::Syntax)?;
    match entries.iter().find(|e| !e.is_allowed()) {
        Some(e) => Err(ConfigRefusal::Key(e.key())),
        None => Ok(()),
    }
}

/// The operator's git identity (`user.name`, `user.email`, and only those), read by this
/// parser from the operator's system and global configs as git orders them (`/etc/gitconfig`,
/// `$XDG_CONFIG_HOME/git/config` or `~/.config/git/config`, then `$GIT_CONFIG_GLOBAL` or
/// `~/.gitconfig`; a later file wins). Never by running git, and never from the workspace:
/// calls get it as `GIT_AUTHOR_*`/`GIT_COMMITTER_*`, so `git commit` works confined. Includes
/// are not followed; a file that does not parse is skipped.
/// (The call environment composes `operator_configs` and `identity_of` itself; this is their
/// composition for the tests.)
#[cfg(test)]
pub(crate) fn operator_identity(
    home: Option<&std::path::Path>,
    xdg_config_home: Option<&std::path::Path>,
    global: Option<&std::path::Path>,
    system: bool,
) -> (Option<String>, Option<String>) {
    identity_of(&operator_configs(home, xdg_config_home, global, system))
}

/// `user.name` and `user.email` of configs in git's order (a later value wins).
pub(crate) fn identity_of(configs: &[Vec<Entry>]) -> (Option<String>, Option<String>) {
    let (mut name, mut email) = (None, None);
    for entries in configs {
        for e in entries.iter().cloned() {
            if e.section != "user" || e.subsection.is_some() {
                continue;
            }
            match e.name.as_str() {
                "name" => name = e.value.filter(|v| !v.is_empty()),
                "email" => email = e.value.filter(|v| !v.is_empty()),
                _ => {}
            }
        }
    }
    (name, email)
}

/// The entries of the operator's system and global configs, in git's order (a later file
/// wins): `/etc/gitconfig` (when `system`), `$XDG_CONFIG_HOME/git/config` or
/// `~/.config/git/config`, then `$GIT_CONFIG_GLOBAL` or `~/.gitconfig`. Includes are not
/// followed; a file that is missing, too large or does not parse is skipped.
pub(crate) fn operator_configs(
    home: Option<&std::path::Path>,
    xdg_config_home: Option<&std::path::Path>,
    global: Option<&std::path::Path>,
    system: bool,
) -> Vec<Vec<Entry>> {
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    if system {
        files.push("/etc/gitconfig".into());
    }
    match (xdg_config_home, home) {
        (Some(xdg), _) => files.push(xdg.join("git/config")),
        (None, Some(home)) => files.push(home.join(".config/git/config")),
        _ => {}
    }
    match (global, home) {
        (Some(global), _) => files.push(global.to_path_buf()),
        (None, Some(home)) => files.push(home.join(".gitconfig")),
        _ => {}
    }
    files
        .iter()
        .filter_map(|file| parse(&read_small(file)?).ok())
        .collect()
}

/// A regular file of at most [`MAX_CONFIG_BYTES`], as text; None otherwise.
fn read_small(path: &std::path::Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_CONFIG_BYTES as u64 {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES as u64)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_operators_identity_comes_from_the_global_configs_in_gits_order() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join(".config/git")).unwrap();
        std::fs::write(
            home.path().join(".config/git/config"),
            "[user]\n\tname = Early\n\temail = early@example.invalid\n",
        )
        .unwrap();
        std::fs::write(
            home.path().join(".gitconfig"),
            "\u{feff}[User]\n\tName = \"Op Erator\"\n[core]\n\tpager = less\n",
        )
        .unwrap();
        let got = operator_identity(Some(home.path()), None, None, false);
        assert_eq!(
            got,
            (
                Some("Op Erator".to_owned()),
                Some("early@example.invalid".to_owned())
            )
        );
        assert_eq!(operator_identity(None, None, None, false), (None, None));
    }

    use super::*;

    #[test]
    fn what_git_init_and_clone_write_is_accepted() {
        let init = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\
                    \tlogallrefupdates = true\n";
        assert_eq!(vet(init.as_bytes()), Ok(()));
        let clone = "[core]\n\trepositoryformatversion = 0\n[remote \"origin\"]\n\t\
                     url = https://example.com/x.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n\
                     [branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n\
                     [user]\n\tname = A \"B\" C\n";
        assert_eq!(vet(clone.as_bytes()), Ok(()));
    }

    #[test]
    fn keys_that_run_commands_are_refused_however_spelled() {
        for text in [
            "[core]\n\tfsmonitor = \"touch /tmp/x\"\n",
            "[Core]\nFSMonitor=x\n",
            "[core] fsmonitor = x\n",
            "[core.]\n",
            "[remote \"o\"]\n\tuploadpack = x\n",
            "[pager]\n\tlog = x\n",
            "[interactive]\n\tdiffFilter = x\n",
            "[difftool \"a\"]\n\tcmd = x\n",
            "[trailer \"a\"]\n\tcmd = x\n",
            "[include]\n\tpath = elsewhere\n",
            "[submodule \"s\"]\n\tupdate = !x\n",
            "[core]\n\thooksPath = /x\n",
            // The old subsection form and a continuation line: still one key each.
            "[remote.o]\n\treceivepack = x\n",
            "[core]\n\tbare = \\\n false\n\tpager = x\n",
        ] {
            assert!(vet(text.as_bytes()).is_err(), "{text:?}");
        }
    }

    #[test]
    fn a_bom_is_skipped_as_git_skips_it() {
        let text = "\u{feff}[core]\n\tfsmonitor = x\n";
        assert_eq!(
            vet(text.as_bytes()),
            Err(ConfigRefusal::Key("core.fsmonitor".into()))
        );
        assert_eq!(vet("\u{feff}[core]\nbare = false\n".as_bytes()), Ok(()));
    }

    #[test]
    fn unreadable_configs_are_refused() {
        let mut big = b"[core]\nbare = false\n".to_vec();
        big.extend(std::iter::repeat_n(b'#', MAX_CONFIG_BYTES));
        assert_eq!(vet(&big), Err(ConfigRefusal::TooLarge));
        assert_eq!(vet(b"[core]\nbare = \xff\n"), Err(ConfigRefusal::NotUtf8));
        assert!(matches!(
            vet(b"bare = true\n"),
            Err(ConfigRefusal::Syntax(1))
        ));
        assert!(matches!(
            vet(b"[core]\nbare = \"x\n"),
            Err(ConfigRefusal::Syntax(2))
        ));
        assert!(matches!(
            vet(b"[core]\n\tbare = \\q\n"),
            Err(ConfigRefusal::Syntax(2))
        ));
    }

    #[test]
    fn values_parse_as_git_reads_them() {
        let e = parse("[a \"S.b\"]\n k = \" x \" y ; c\n").unwrap();
        assert_eq!(e[0].key(), "a.S.b.k");
        assert_eq!(e[0].value.as_deref(), Some(" x  y"));
        let e = parse("[A.B]\nk\n").unwrap();
        assert_eq!(e[0].key(), "a.b.k");
        assert_eq!(e[0].value, None);
        let e = parse("[s]\nk = a\tb \t\nj = 1\n").unwrap();
        assert_eq!(e[0].value.as_deref(), Some("a b"));
        let e = parse("[s]\nk = a\\\nb\nj = 1\n").unwrap();
        assert_eq!(e[0].value.as_deref(), Some("ab"));
        assert_eq!(e[1].key(), "s.j");
    }

    #[test]
    fn any_prefix_of_a_config_parses_or_fails_without_panicking() {
        let text = "\u{feff}[a \"b\\\"c\"] k = \"v\\\\\" # x\n[d.e]\nf = g\\\n h\n";
        for cut in 0..=text.len() {
            if text.is_char_boundary(cut) {
                let _ = parse(&text[..cut]);
            }
        }
    }
}
