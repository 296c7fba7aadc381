//! What of the operator's repository config the server's own import follows, read once per
//! import (bounded, a regular file beneath the gitdir): the object format, whether git would
//! hash the index (`index.skipHash`, or `feature.manyFiles`, which implies it), and whether
//! git would log a ref update (`core.logAllRefUpdates`, by default on unless the repository
//! is bare). The operator's config is trusted (no call can write it); includes are not
//! followed, so a setting kept only in an included file takes git's default here.

use std::io::Read;

use cap_std::fs::Dir;

use crate::workspace::gitconfig::{Entry, MAX_CONFIG_BYTES, parse};

/// The repository's settings the import follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Settings {
    pub hash: gix_hash::Kind,
    /// The index's trailer is left as zeros, as git writes it then.
    pub skip_index_hash: bool,
    /// Ref updates get a reflog line.
    pub log_ref_updates: bool,
}

impl Settings {
    /// The settings of the gitdir `operator` (git's defaults where its config is missing,
    /// too large or does not parse).
    pub(super) fn read(operator: &Dir) -> Self {
        let entries = config(operator).unwrap_or_default();
        let (mut sha256, mut skip, mut bare, mut log) = (false, false, false, None);
        for e in entries.iter().filter(|e| e.subsection.is_none()) {
            match (e.section.as_str(), e.name.as_str()) {
                ("extensions", "objectformat") => {
                    sha256 = e
                        .value
                        .as_deref()
                        .is_some_and(|v| v.eq_ignore_ascii_case("sha256"));
                }
                ("feature", "manyfiles") | ("index", "skiphash") => skip = is_true(e),
                ("core", "bare") => bare = is_true(e),
                ("core", "logallrefupdates") => {
                    let always = e
                        .value
                        .as_deref()
                        .is_some_and(|v| v.eq_ignore_ascii_case("always"));
                    log = Some(always || is_true(e));
                }
                _ => {}
            }
        }
        Self {
            hash: if sha256 {
                gix_hash::Kind::Sha256
            } else {
                gix_hash::Kind::Sha1
            },
            skip_index_hash: skip,
            log_ref_updates: log.unwrap_or(!bare),
        }
    }
}

/// git's boolean: a bare key, or `true`, `yes`, `on`, `1` in any case.
fn is_true(entry: &Entry) -> bool {
    entry.value.as_deref().is_none_or(|v| {
        ["true", "yes", "on", "1"]
            .iter()
            .any(|t| v.eq_ignore_ascii_case(t))
    })
}

/// The entries of `config` in the gitdir, or None.
fn config(operator: &Dir) -> Option<Vec<Entry>> {
    let file = super::open::open_regular(operator, "config").ok()?;
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .ok()?;
    if text.len() > MAX_CONFIG_BYTES {
        return None;
    }
    parse(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(config: Option<&str>) -> Settings {
        let tmp = tempfile::tempdir().unwrap();
        if let Some(text) = config {
            std::fs::write(tmp.path().join("config"), text).unwrap();
        }
        Settings::read(&Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap())
    }

    #[test]
    fn git_defaults_where_the_config_says_nothing() {
        let expected = Settings {
            hash: gix_hash::Kind::Sha1,
            skip_index_hash: false,
            log_ref_updates: true,
        };
        assert_eq!(settings(None), expected);
        assert_eq!(settings(Some("not a config [")), expected);
        let bare = settings(Some("[core]\n\tbare = true\n"));
        assert!(!bare.log_ref_updates);
    }

    #[test]
    fn the_settings_the_import_follows_are_read_as_git_reads_them() {
        let s = settings(Some(
            "[extensions]\n\tobjectFormat = SHA256\n[feature]\n\tmanyFiles\n\
             [core]\n\tbare = yes\n\tlogAllRefUpdates = always\n",
        ));
        assert_eq!(s.hash, gix_hash::Kind::Sha256);
        assert!(s.skip_index_hash && s.log_ref_updates);
        let later_wins = settings(Some("[index]\n\tskipHash = true\n\tskipHash = off\n"));
        assert!(!later_wins.skip_index_hash);
        let no_log = settings(Some("[core]\n\tlogallrefupdates = false\n"));
        assert!(!no_log.log_ref_updates);
    }
}
