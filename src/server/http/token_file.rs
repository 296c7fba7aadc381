//! A token file of several holders: each entry a subject, its scopes and the SHA-256 of its
//! token (hashed at rest: the file gives no token away).
//!
//! ```text
//! # sha256 of the token                                            holder  scopes ("*": all)
//! sha256:6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b  rita   cordon:read
//! sha256:d4735e3a265e16eee03f59718b9b5d03019c07d8b6c51f90da3a666eec13ab35  dev    *
//! ```
//!
//! A word `group=<name>` among the scopes puts the holder in a group instead (the group
//! selects the policy its calls run under, `[[server.http.group_policies]]`):
//! `sha256:… rita cordon:read group=reviewers`.
//!
//! One entry a line; blank lines and `#` comments are skipped. A holder's name is 1 to 64 of
//! `A-Z a-z 0-9 . _ -`, unique in the file; it is the subject `bearer:<name>` (never equal to
//! the single token's `bearer`, a JWT's subject, or another holder). A file whose first entry
//! does not start with `sha256:` is the single-token file it always was (the token itself).
//!
//! Owns the format; comparing tokens is `auth`'s.

use std::collections::BTreeSet;

/// Longest holder name.
const MAX_NAME: usize = 64;
/// Most entries a file may hold.
pub(crate) const MAX_ENTRIES: usize = 1024;

/// One holder of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub digest: [u8; 32],
    pub name: String,
    /// None: every scope (`*`).
    pub scopes: Option<BTreeSet<String>>,
    /// The groups its `group=` words name.
    pub groups: BTreeSet<String>,
}

/// Whether `text` is a file of entries rather than one token.
pub(crate) fn is_entries(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .is_some_and(|l| l.starts_with("sha256:"))
}

/// The holders of an entries file, or what is wrong with it (a line number and why).
pub(crate) fn parse(text: &str) -> Result<Vec<Holder>, String> {
    let mut holders: Vec<Holder> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |why: String| format!("line {}: {why}", n + 1);
        let mut words = line.split_ascii_whitespace();
        let (Some(hash), Some(name)) = (words.next(), words.next()) else {
            return Err(at(
                "an entry is `sha256:<64 hex digits> <name> <scope>...`".into()
            ));
        };
        let digest = hash
            .strip_prefix("sha256:")
            .and_then(hex32)
            .ok_or_else(|| at("the hash is not `sha256:` and 64 hex digits".into()))?;
        let name_ok = !name.is_empty()
            && name.len() <= MAX_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !name_ok {
            return Err(at(format!(
                "the holder name {name:?} is not 1 to {MAX_NAME} of A-Z a-z 0-9 . _ -"
            )));
        }
        if holders.iter().any(|h| h.name == name) {
            return Err(at(format!("the holder {name} is named twice")));
        }
        if holders.iter().any(|h| h.digest == digest) {
            return Err(at("the same token hash is given twice".into()));
        }
        let (group_words, words): (Vec<&str>, Vec<&str>) =
            words.partition(|w| w.starts_with("group="));
        let mut groups = BTreeSet::new();
        for word in group_words {
            let group = &word["group=".len()..];
            if group.is_empty() || group.len() > MAX_NAME {
                return Err(at(format!(
                    "`{word}` names no group: write group=<1 to {MAX_NAME} characters>"
                )));
            }
            groups.insert(group.to_owned());
        }
        let scopes = match words.as_slice() {
            [] => return Err(at(format!("{name} has no scope (`*` grants every one)"))),
            ["*"] => None,
            scopes if scopes.contains(&"*") => {
                return Err(at("`*` stands alone: it grants every scope".into()));
            }
            scopes => Some(scopes.iter().map(|s| (*s).to_owned()).collect()),
        };
        holders.push(Holder {
            digest,
            name: name.to_owned(),
            scopes,
            groups,
        });
        if holders.len() > MAX_ENTRIES {
            return Err(at(format!("more than {MAX_ENTRIES} entries")));
        }
    }
    if holders.is_empty() {
        return Err("the file holds no entry".into());
    }
    Ok(holders)
}

fn hex32(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b";
    const TWO: &str = "d4735e3a265e16eee03f59718b9b5d03019c07d8b6c51f90da3a666eec13ab35";

    #[test]
    fn entries_name_their_holders_and_scopes() {
        let text = format!("# who\n\nsha256:{ONE} rita cordon:read\nsha256:{TWO} dev *\n");
        assert!(is_entries(&text));
        let holders = parse(&text).unwrap();
        assert_eq!(holders[0].name, "rita");
        assert_eq!(
            holders[0].scopes,
            Some(BTreeSet::from(["cordon:read".to_owned()]))
        );
        assert_eq!(holders[1].scopes, None);
        assert!(holders[0].groups.is_empty());
        let grouped = parse(&format!("sha256:{ONE} rita cordon:read group=reviewers\n")).unwrap();
        assert_eq!(
            grouped[0].scopes,
            Some(BTreeSet::from(["cordon:read".to_owned()])),
            "a group word is not a scope"
        );
        assert_eq!(grouped[0].groups, BTreeSet::from(["reviewers".to_owned()]));
        assert!(!is_entries("a-plain-token-0123456789\n"));
    }

    #[test]
    fn a_bad_entry_names_its_line() {
        for (text, says) in [
            (format!("sha256:{ONE} rita"), "no scope"),
            (format!("sha256:{ONE}"), "an entry is"),
            ("sha256:abc rita x".to_owned(), "64 hex"),
            (format!("sha256:{ONE} ri/ta x"), "holder name"),
            (format!("sha256:{ONE} a x\nsha256:{TWO} a y"), "named twice"),
            (format!("sha256:{ONE} a x\nsha256:{ONE} b y"), "twice"),
            (format!("sha256:{ONE} a x *"), "stands alone"),
            (format!("sha256:{ONE} a x group="), "names no group"),
            (format!("sha256:{ONE} a group=g"), "no scope"),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
