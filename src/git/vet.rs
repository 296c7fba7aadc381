//! Which commits and trees from the sandbox the server imports itself (`direct`): a strict
//! subset of what git's own `fsck` (as `index-pack --strict` runs it) accepts.
//!
//! Anything outside the subset is not an error here: the caller leaves it to the confined
//! export and the host's `index-pack --strict`, so git's full set of checks still decides
//! every object this module does not vouch for. What the subset leaves out is exactly what
//! those checks exist for: tree entry names a checkout on some file system would take for
//! `.git` (any name starting with `.git` in any case, a `~` that could be an 8.3 short name,
//! a `\`, a non-ASCII byte that HFS+ might ignore), the special files git vets by content or
//! type (`.gitmodules`, `.gitattributes`, `.gitignore`, `.mailmap` all start with `.git` or
//! hold a `~` in their short names), modes other than the five git writes, unsorted or
//! duplicate entries, and commits whose headers are not the plain sequence git writes with
//! well-formed identities.

use std::collections::HashSet;

use gix_hash::ObjectId;

/// A commit's links: its tree and parents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub tree: ObjectId,
    pub parents: Vec<ObjectId>,
}

/// A tree entry's mode, as git writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    File,
    Executable,
    Symlink,
    Tree,
    Gitlink,
}

impl Mode {
    fn parse(text: &[u8]) -> Option<Self> {
        Some(match text {
            b"100644" => Self::File,
            b"100755" => Self::Executable,
            b"120000" => Self::Symlink,
            b"40000" => Self::Tree,
            b"160000" => Self::Gitlink,
            _ => return None,
        })
    }

    /// The mode's number as the index and `diff --raw` write it.
    pub fn bits(self) -> u32 {
        match self {
            Self::File => 0o100644,
            Self::Executable => 0o100755,
            Self::Symlink => 0o120000,
            Self::Tree => 0o040000,
            Self::Gitlink => 0o160000,
        }
    }
}

/// One tree entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub mode: Mode,
    pub name: Vec<u8>,
    pub id: ObjectId,
}

/// Parses a tree (any, the operator's included): the five modes, names with no `/` or NUL,
/// sorted as git sorts them, no name twice. None: not in the subset.
pub fn tree(data: &[u8], hash: gix_hash::Kind) -> Option<Vec<Entry>> {
    let mut entries: Vec<Entry> = Vec::new();
    let mut names: HashSet<&[u8]> = HashSet::new();
    let mut rest = data;
    while !rest.is_empty() {
        let space = rest.iter().position(|b| *b == b' ')?;
        let mode = Mode::parse(&rest[..space])?;
        rest = &rest[space + 1..];
        let nul = rest.iter().position(|b| *b == 0)?;
        let name = &rest[..nul];
        if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
            return None;
        }
        rest = &rest[nul + 1..];
        let raw = rest.get(..hash.len_in_bytes())?;
        let id = ObjectId::try_from(raw).ok()?;
        rest = &rest[hash.len_in_bytes()..];
        if let Some(last) = entries.last()
            && tree_order(&last.name, last.mode, name, mode) != std::cmp::Ordering::Less
        {
            return None;
        }
        if !names.insert(name) {
            return None;
        }
        entries.push(Entry {
            mode,
            name: name.to_vec(),
            id,
        });
    }
    Some(entries)
}

/// git's tree order: names compared as bytes, a tree's as if it ended in `/`.
pub fn tree_order(a: &[u8], a_mode: Mode, b: &[u8], b_mode: Mode) -> std::cmp::Ordering {
    let common = a.len().min(b.len());
    let ordering = a[..common].cmp(&b[..common]);
    if ordering.is_ne() {
        return ordering;
    }
    // Past the shared prefix: each key's next byte (a name's own, or a tree's `/`), or none.
    let next = |name: &[u8], mode: Mode| {
        name.get(common)
            .copied()
            .or((mode == Mode::Tree).then_some(b'/'))
    };
    next(a, a_mode).cmp(&next(b, b_mode))
}

/// Whether a name in a tree the sandbox wrote is one this module vouches for (see the
/// module note): printable ASCII without `\` or `~`, not starting with `.git` in any case.
pub fn plain_name(name: &[u8]) -> bool {
    name.iter().all(|b| b.is_ascii_graphic() || *b == b' ')
        && !name.contains(&b'\\')
        && !name.contains(&b'~')
        && !name.to_ascii_lowercase().starts_with(b".git")
}

/// Parses a commit in the subset: `tree`, any `parent`s, one `author`, one `committer`,
/// then only `encoding`, `gpgsig` or `gpgsig-sha256` headers, a blank line and the message.
pub fn commit(data: &[u8], hash: gix_hash::Kind) -> Option<Commit> {
    let end = data.windows(2).position(|w| w == b"\n\n")?;
    let headers = &data[..=end];
    if headers.contains(&0) {
        return None;
    }
    let mut lines = headers.split_inclusive(|b| *b == b'\n').peekable();
    let tree = hex_line(lines.next()?, b"tree ", hash)?;
    let mut parents = Vec::new();
    while let Some(line) = lines.peek()
        && line.starts_with(b"parent ")
    {
        parents.push(hex_line(line, b"parent ", hash)?);
        lines.next();
    }
    ident(lines.next()?.strip_prefix(b"author ")?)?;
    ident(lines.next()?.strip_prefix(b"committer ")?)?;
    let mut in_signature = false;
    for line in lines {
        if in_signature && line.starts_with(b" ") {
            continue;
        }
        in_signature = false;
        if line.starts_with(b"gpgsig ") || line.starts_with(b"gpgsig-sha256 ") {
            in_signature = true;
        } else if !line.starts_with(b"encoding ") {
            return None;
        }
    }
    Some(Commit { tree, parents })
}

/// `<prefix><hex>\n` with an object name of the repository's length, lowercase.
fn hex_line(line: &[u8], prefix: &[u8], hash: gix_hash::Kind) -> Option<ObjectId> {
    let hex = line.strip_prefix(prefix)?.strip_suffix(b"\n")?;
    if hex.len() != hash.len_in_hex() || !hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return None;
    }
    ObjectId::from_hex(hex).ok()
}

/// `Name <email> 1234567890 +0000\n` as git's `fsck_ident` wants it, and stricter: a
/// non-empty name, no leading zero in the time, at most 16 digits.
fn ident(line: &[u8]) -> Option<()> {
    let line = line.strip_suffix(b"\n")?;
    let open = line.iter().position(|b| *b == b'<')?;
    let name = &line[..open];
    if name.len() < 2 || !name.ends_with(b" ") || name.contains(&b'>') {
        return None;
    }
    let close = open + 1 + line[open + 1..].iter().position(|b| *b == b'>')?;
    if line[open + 1..close].contains(&b'<') {
        return None;
    }
    let when = line[close + 1..].strip_prefix(b" ")?;
    let (time, zone) = when.split_at(when.iter().position(|b| *b == b' ')?);
    let zone = &zone[1..];
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    if !digits(time) || time.len() > 16 || (time.len() > 1 && time[0] == b'0') {
        return None;
    }
    if zone.len() != 5 || !matches!(zone[0], b'+' | b'-') || !digits(&zone[1..]) {
        return None;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA1: gix_hash::Kind = gix_hash::Kind::Sha1;

    fn raw_tree(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (mode, name) in entries {
            out.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            out.extend_from_slice(&[7u8; 20]);
        }
        out
    }

    #[test]
    fn a_plain_tree_parses_in_git_order() {
        let t = tree(
            &raw_tree(&[
                ("100644", "a.c"),
                ("40000", "a"),
                ("100755", "b"),
                ("160000", "s"),
            ]),
            SHA1,
        )
        .unwrap();
        let names: Vec<&[u8]> = t.iter().map(|e| e.name.as_slice()).collect();
        assert_eq!(names, [&b"a.c"[..], b"a", b"b", b"s"]);
        assert_eq!(t[1].mode, Mode::Tree);
    }

    #[test]
    fn trees_outside_the_subset_are_left_to_git() {
        for bad in [
            raw_tree(&[("040000", "a")]),
            raw_tree(&[("100664", "a")]),
            raw_tree(&[("100644", "b"), ("100644", "a")]),
            raw_tree(&[("100644", "a"), ("100644", "a")]),
            raw_tree(&[("100644", "a"), ("100644", "a.c"), ("40000", "a")]),
            raw_tree(&[("100644", "..")]),
            raw_tree(&[("100644", "a/b")]),
            raw_tree(&[("100644", "")]),
        ] {
            assert_eq!(
                tree(&bad, SHA1),
                None,
                "{:?}",
                String::from_utf8_lossy(&bad)
            );
        }
        assert_eq!(tree(b"100644 a\0short", SHA1), None);
    }

    #[test]
    fn names_that_could_be_git_metadata_anywhere_are_not_plain() {
        for ok in ["main.rs", ".eslintrc", "a b", "x.git", "gitx"] {
            assert!(plain_name(ok.as_bytes()), "{ok}");
        }
        for bad in [
            ".git",
            ".GIT",
            ".Git ",
            ".gitmodules",
            ".gitattributes",
            "git~1",
            "GI7EBA~1",
            "a\\.git",
            ".g\u{200c}it",
            "\u{200c}.git",
            "tab\there",
        ] {
            assert!(!plain_name(bad.as_bytes()), "{bad:?}");
        }
    }

    fn commit_text(extra: &str, author: &str) -> String {
        format!(
            "tree {t}\nparent {p}\nauthor {author}\ncommitter C <c@x> 1700000000 +0000\n{extra}\nmsg\n",
            t = "a".repeat(40),
            p = "b".repeat(40)
        )
    }

    #[test]
    fn a_plain_commit_parses_and_odd_ones_are_left_to_git() {
        let c = commit(
            commit_text("", "A U <a@x> 1700000000 -0130").as_bytes(),
            SHA1,
        )
        .unwrap();
        assert_eq!(c.parents.len(), 1);
        let signed = commit_text(
            "gpgsig -----BEGIN\n -----END\nencoding UTF-8\n",
            "A <a@x> 1 +0000",
        );
        assert!(commit(signed.as_bytes(), SHA1).is_some());
        for author in [
            "<a@x> 1 +0000",
            "A<a@x> 1 +0000",
            "A <a@x>1 +0000",
            "A <a@x> 01 +0000",
            "A <a@x> 1 0000",
            "A <a<x> 1 +0000",
            "A <a@x> 1 +0000 extra",
        ] {
            assert!(
                commit(commit_text("", author).as_bytes(), SHA1).is_none(),
                "{author}"
            );
        }
        let other = commit_text("mergetag object x\n", "A <a@x> 1 +0000");
        assert!(commit(other.as_bytes(), SHA1).is_none());
        let upper = commit_text("", "A <a@x> 1 +0000").replace(&"a".repeat(40), &"A".repeat(40));
        assert!(commit(upper.as_bytes(), SHA1).is_none());
    }
}
