//! Loading a policy: a built-in name or a file, the `extends` chain child first, the layers
//! overlaid on the built-in default and validated, and every error pointed at the file and
//! line that set the value.
//!
//! Owns the embedded policies, [`PolicyError`] and finding where a field is written
//! ([`field_line`], and the proxy lists' sites in [`locate_network`]). What a valid policy
//! is belongs to `validate`; the TOML mirror to `raw`.

use super::raw::{Overlay, RawPolicy};
use super::{NetworkPolicy, Policy, commands, interception, validate};
use std::path::{Path, PathBuf};

/// The policies compiled into the binary; the files under `policies/` are their source.
const EMBEDDED: &[(&str, &str)] = &[
    ("default", include_str!("../../policies/default.toml")),
    ("strict", include_str!("../../policies/strict.toml")),
    ("dev", include_str!("../../policies/dev.toml")),
];

/// How deep an `extends` chain may go before we call it a mistake (and catch cycles).
const MAX_EXTENDS_DEPTH: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy `{0}` is neither a built-in policy ({known}) nor a readable file", known = embedded_names().join(", "))]
    UnknownPolicy(String),
    #[error("cannot read policy file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: field `{field}`: {message}")]
    Invalid {
        origin: String,
        field: &'static str,
        message: String,
    },
    #[error("{origin}: `extends` chain is longer than {MAX_EXTENDS_DEPTH} or loops back on itself")]
    ExtendsTooDeep { origin: String },
}

pub fn embedded_names() -> Vec<&'static str> {
    EMBEDDED.iter().map(|(name, _)| *name).collect()
}

fn embedded_source(name: &str) -> Option<&'static str> {
    EMBEDDED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| *src)
}

impl Policy {
    /// Loads a policy by built-in name or file path. A name wins over a file of the same name
    /// only when no such file exists, so `./strict.toml` and `strict` never surprise.
    pub fn load(name_or_path: &str) -> Result<Self, PolicyError> {
        load_chain(locate(name_or_path, None)?, true)
    }

    /// Parses a policy from TOML text (as if it were a file named `origin`); `extends` may only
    /// name built-in policies here, so no file is read. Used by fuzzing and tests.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, PolicyError> {
        load_chain((origin.to_owned(), text.to_owned(), None), false)
    }

    /// The built-in default policy.
    pub fn builtin_default() -> Self {
        Self::load("default").expect("the embedded default policy is valid (tested)")
    }
}

/// One file of an `extends` chain: (origin, text, parsed). The text points a validation
/// error at the line that set the bad value.
type Layer = (String, String, RawPolicy);

/// A policy's `extends` chain as read, child first.
struct Chain {
    layers: Vec<Layer>,
    /// The layers read from files, canonical (see `Policy::sources`).
    sources: Vec<PathBuf>,
    /// Where each command rule was written, child first: its examples are checked later,
    /// through the parser worker, and their errors must still cite the file and line.
    rule_sites: Vec<(String, String, usize)>,
}

/// Loads a policy and the chain it `extends`, child first, then resolves the merge over the
/// built-in default. `first` is the located (origin, text, directory) of the policy itself;
/// with `files_allowed` false, parents may only be built-in policies.
fn load_chain(
    first: (String, String, Option<PathBuf>),
    files_allowed: bool,
) -> Result<Policy, PolicyError> {
    let chain = read_chain(first, files_allowed)?;
    let origin = chain.layers[0].0.clone();
    // Everything falls back to the built-in default, so a policy names only what it changes.
    let default_raw: RawPolicy =
        toml::from_str(embedded_source("default").unwrap_or("")).map_err(|e| {
            PolicyError::Parse {
                origin: "builtin:default".into(),
                message: e.to_string(),
            }
        })?;
    let mut merged = default_raw;
    for (origin, text, layer) in chain.layers.iter().rev() {
        unset_names_are_inherited(origin, text, layer, &merged)?;
        merged = layer.clone().overlay(merged);
    }
    let mut policy = validate::validate(merged, origin)
        .map_err(|e| at_the_line_that_set_it(e, &chain.layers))?;
    policy.commands.locate(&chain.rule_sites);
    locate_network(&mut policy.network, &chain.layers);
    policy.sources = chain.sources;
    Ok(policy)
}

/// A layer's `environment.unset` may only name variables it inherits in `environment.set`:
/// a misspelt name would otherwise leave the variable set while the file says it is not.
fn unset_names_are_inherited(
    origin: &str,
    text: &str,
    layer: &RawPolicy,
    inherited: &RawPolicy,
) -> Result<(), PolicyError> {
    let inherited_set = inherited.environment.set.as_ref();
    let Some(name) = layer
        .environment
        .unset
        .iter()
        .flatten()
        .find(|n| !inherited_set.is_some_and(|set| set.contains_key(*n)))
    else {
        return Ok(());
    };
    let line = field_line(text, "environment.unset")
        .map(|l| format!(":{l}"))
        .unwrap_or_default();
    Err(PolicyError::Invalid {
        origin: format!("{origin}{line}"),
        field: "environment.unset",
        message: format!(
            "`{name}` is not set by the policy this one extends, so there is nothing to unset \
             (inherited: {})",
            inherited_set
                .map(|s| s.keys().cloned().collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        ),
    })
}

/// Reads and parses each layer of the chain, child first, checking each layer's command
/// rules against its own text.
fn read_chain(
    first: (String, String, Option<PathBuf>),
    files_allowed: bool,
) -> Result<Chain, PolicyError> {
    let mut chain = Chain {
        layers: Vec::new(),
        sources: Vec::new(),
        rule_sites: Vec::new(),
    };
    let first_origin = first.0.clone();
    let mut next = Some(first);
    while let Some((origin, text, dir)) = next.take() {
        if chain.layers.len() >= MAX_EXTENDS_DEPTH {
            return Err(PolicyError::ExtendsTooDeep {
                origin: first_origin,
            });
        }
        // A layer has a directory exactly when it was read from a file.
        if dir.is_some() {
            let path = PathBuf::from(&origin);
            chain
                .sources
                .push(std::fs::canonicalize(&path).unwrap_or(path));
        }
        let raw: RawPolicy = toml::from_str(&text).map_err(|e| PolicyError::Parse {
            origin: origin.clone(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        if let Some(rules) = raw.commands.rules.clone() {
            chain.rule_sites.extend(rule_sites(&origin, &text, rules)?);
        }
        next = match raw.extends.as_deref() {
            None => None,
            Some(parent) if files_allowed => Some(locate(parent, dir.as_deref())?),
            Some(parent) => match embedded_source(parent) {
                Some(text) => Some((format!("builtin:{parent}"), text.to_owned(), None)),
                None => return Err(PolicyError::UnknownPolicy(parent.to_owned())),
            },
        };
        chain.layers.push((origin, text, raw));
    }
    Ok(chain)
}

/// One layer's command rules, checked while its text is at hand (so errors cite the file's
/// line), as (origin, rule name, line).
fn rule_sites(
    origin: &str,
    text: &str,
    rules: Vec<commands::RawRule>,
) -> Result<Vec<(String, String, usize)>, PolicyError> {
    let compiled = commands::CommandRules::compile(commands::Decision::Allow, rules, Some(text))
        .map_err(|e| PolicyError::Invalid {
            origin: origin.to_owned(),
            field: "commands.rules",
            message: e.to_string(),
        })?;
    Ok(compiled
        .rules
        .into_iter()
        .map(|r| (origin.to_owned(), r.name, r.line))
        .collect())
}

/// A validation error, its origin made the file and line that set the field (the first layer,
/// child first, that names it), or the policy itself when none does.
fn at_the_line_that_set_it(e: PolicyError, layers: &[Layer]) -> PolicyError {
    match e {
        PolicyError::Invalid { field, message, .. } => match layers
            .iter()
            .find_map(|(o, t, _)| field_line(t, field).map(|line| (o.clone(), line)))
        {
            Some((origin, line)) => PolicyError::Invalid {
                origin: format!("{origin}:{line}"),
                field,
                message,
            },
            None => PolicyError::Invalid {
                origin: layers[0].0.clone(),
                field,
                message,
            },
        },
        other => other,
    }
}

/// Finds the text of a policy reference: a file path (relative to the extending file's
/// directory) or an embedded name.
fn locate(
    reference: &str,
    relative_to: Option<&Path>,
) -> Result<(String, String, Option<PathBuf>), PolicyError> {
    let candidate = match relative_to {
        Some(dir) if Path::new(reference).is_relative() => dir.join(reference),
        _ => PathBuf::from(reference),
    };
    let looks_like_path = reference.contains('/') || reference.ends_with(".toml");
    if looks_like_path || candidate.is_file() {
        let text = std::fs::read_to_string(&candidate).map_err(|source| PolicyError::Read {
            path: candidate.clone(),
            source,
        })?;
        let dir = candidate.parent().map(Path::to_path_buf);
        return Ok((candidate.display().to_string(), text, dir));
    }
    match embedded_source(reference) {
        Some(text) => Ok((format!("builtin:{reference}"), text.to_owned(), None)),
        None => Err(PolicyError::UnknownPolicy(reference.to_owned())),
    }
}

/// The 1-based line where `field` (`section.key`, or a bare top-level key) is set in a policy
/// text, found by reading section headers and `key =` lines (enough for cordon's flat schema).
fn field_line(text: &str, field: &str) -> Option<usize> {
    let (section, key) = match field.rsplit_once('.') {
        Some((s, k)) => (Some(s), k),
        None => (None, field),
    };
    let mut current: Option<String> = None;
    let mut header_line = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            let name = t.trim_matches(|c| c == '[' || c == ']').trim().to_owned();
            if section.is_none() && name == key {
                header_line = Some(i + 1);
            }
            current = Some(name);
            continue;
        }
        if let Some((k, _)) = t.split_once('=')
            && k.trim() == key
            && current.as_deref() == section
        {
            return Some(i + 1);
        }
    }
    header_line
}

/// Fills in where the proxy's lists are written (file and line of the list, and of each
/// pattern), so a refusal can say "add it there". `layers` is child first.
fn locate_network(network: &mut NetworkPolicy, layers: &[Layer]) {
    use crate::egress::rules::Site;
    let Some(rules) = network.proxy.as_mut() else {
        return;
    };
    let site_of = |field: &str| -> (Site, Option<&str>) {
        for (origin, text, _) in layers {
            if let Some(line) = field_line(text, field) {
                return (
                    Site {
                        origin: origin.clone(),
                        line: Some(line),
                    },
                    Some(text.as_str()),
                );
            }
        }
        (
            Site {
                origin: layers.first().map(|l| l.0.clone()).unwrap_or_default(),
                line: None,
            },
            None,
        )
    };
    let place = |list: &mut [crate::egress::rules::SitedPattern], field: &str| -> Site {
        let (site, text) = site_of(field);
        for entry in list.iter_mut() {
            entry.site = site.clone();
            if let (Some(text), Some(from)) = (text, site.line) {
                let quoted = format!("\"{}\"", entry.pattern.text);
                if let Some(i) = text
                    .lines()
                    .enumerate()
                    .skip(from - 1)
                    .find(|(_, l)| l.contains(&quoted))
                    .map(|(i, _)| i)
                {
                    entry.site.line = Some(i + 1);
                }
            }
        }
        site
    };
    rules.allow_site = place(&mut rules.allow_hosts, "network.allow_hosts");
    rules.deny_site = place(&mut rules.deny_hosts, "network.deny_hosts");
    rules.private_site = site_of("network.allow_private").0;
    rules.caps_site = site_of("network.max_connections_per_call").0;
    interception::locate(rules, layers);
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Loads `text` as the file `p.toml` (so errors cite `p.toml:LINE`).
    pub(in crate::policy) fn load_text(text: &str) -> Result<Policy, PolicyError> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(&f, text).unwrap();
        Policy::load(f.to_str().unwrap())
    }

    #[test]
    fn embedded_default_is_complete_and_valid() {
        let p = Policy::builtin_default();
        assert_eq!(p.name, "default");
        assert!(p.network.is_off());
        assert!(
            p.filesystem
                .deny
                .iter()
                .any(|d| d == Path::new("/etc/shadow"))
        );
    }

    #[test]
    fn unknown_field_is_an_error_with_a_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(&f, "[limits]\nmemory_mb = 10\nmemroy_mb = 5\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("memroy_mb"), "{err}");
    }

    #[test]
    fn invalid_value_cites_file_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.toml");
        std::fs::write(&base, "# base\n[limits]\n\nmemory_mb = 0\n").unwrap();
        let f = dir.path().join("child.toml");
        std::fs::write(&f, "extends = \"base.toml\"\n[limits]\npids = 9\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            err.contains("base.toml:4: field `limits.memory_mb`"),
            "{err}"
        );
        std::fs::write(&f, "[limits]\npids = 0\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("child.toml:2: field `limits.pids`"), "{err}");
    }

    #[test]
    fn extends_overlays_only_named_fields() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.toml"), "[limits]\npids = 7\n").unwrap();
        let f = dir.path().join("child.toml");
        std::fs::write(&f, "extends = \"base.toml\"\n[limits]\nmemory_mb = 64\n").unwrap();
        let p = Policy::load(f.to_str().unwrap()).unwrap();
        assert_eq!(p.limits.pids, 7);
        assert_eq!(p.limits.memory_bytes, 64 << 20);
        assert_eq!(
            p.limits.open_files,
            Policy::builtin_default().limits.open_files
        );
    }

    #[test]
    fn environment_set_merges_across_extends_and_unset_removes_an_inherited_key() {
        // Issue 33: a policy extending `dev` that set one variable lost PATH, HOME and TMPDIR.
        let child = Policy::from_toml(
            "extends = \"dev\"\n[environment]\nset = { FOO = \"bar\", GOCACHE = \"/elsewhere\" }\n\
             unset = [\"PIP_CACHE_DIR\"]\n",
            "child.toml",
        )
        .unwrap();
        let dev = Policy::load("dev").unwrap();
        let set = &child.environment.set;
        assert_eq!(set["FOO"], "bar");
        assert_eq!(set["GOCACHE"], "/elsewhere", "the child's value wins");
        for inherited in ["PATH", "HOME", "TMPDIR", "npm_config_cache"] {
            assert_eq!(
                set.get(inherited),
                dev.environment.set.get(inherited),
                "{inherited}"
            );
        }
        assert!(
            !set.contains_key("PIP_CACHE_DIR"),
            "unset removes it: {set:?}"
        );
        // `policy show` prints the merged table.
        let shown = crate::cli::policy::show(&child, false).unwrap();
        assert!(
            shown.contains("PATH = ") && shown.contains("FOO = \"bar\""),
            "{shown}"
        );
        assert!(!shown.contains("PIP_CACHE_DIR"), "{shown}");
        // A name the parent does not set is a mistake, reported at its line.
        let err = Policy::from_toml(
            "extends = \"default\"\n[environment]\nunset = [\"PIP_CACHE_DIR\"]\n",
            "typo.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("typo.toml:3: field `environment.unset`") && err.contains("PIP_CACHE_DIR"),
            "{err}"
        );
    }

    #[test]
    fn extends_cycle_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.toml");
        std::fs::write(&f, "extends = \"a.toml\"\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err();
        assert!(matches!(err, PolicyError::ExtendsTooDeep { .. }), "{err}");
    }

    #[test]
    fn a_typo_in_a_rule_is_a_parse_error_with_a_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(
            &f,
            "[commands]\non_unknown = \"ask\"\n[[commands.rules]]\nname = \"a\"\n\
             decision = \"deny\"\njustification = \"j\"\nmatch = { progam = [\"ls\"] }\n",
        )
        .unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("line 7"), "{err}");
        assert!(err.contains("progam"), "{err}");
        std::fs::write(&f, "[commands]\non_unknown = \"maybe\"\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn dev_ships_the_proxy_with_an_empty_allow_list_and_no_udp() {
        let p = Policy::load("dev").unwrap();
        let rules = p.network.proxy.as_ref().expect("dev uses the proxy");
        assert!(rules.allow_hosts.is_empty() && rules.deny_hosts.is_empty());
        assert!(p.network.tcp_connect.is_empty());
        assert_eq!(p.sandbox.seccomp_profile, "tcp");
        assert_eq!(rules.allow_site.origin, "builtin:dev");
        assert!(rules.allow_site.line.is_some());
        assert!(Policy::builtin_default().network.is_off());
        assert!(Policy::load("strict").unwrap().network.is_off());
    }

    #[test]
    fn refusals_cite_the_line_of_the_matching_entry() {
        let p = load_text(
            "extends = \"dev\"\n[network]\nallow_hosts = [\n  \"example.org\",\n  \
             \"*.example.net\",\n]\ndeny_hosts = [\"bad.example.net\"]\n",
        )
        .unwrap();
        let rules = p.network.proxy.unwrap();
        assert_eq!(rules.allow_site.line, Some(3));
        assert_eq!(rules.allow_hosts[1].site.line, Some(5));
        assert_eq!(rules.deny_hosts[0].site.line, Some(7));
        let target =
            crate::egress::pattern::Target::parse_authority("bad.example.net:443").unwrap();
        let e = rules.judge(&target).unwrap_err().to_string();
        assert!(e.contains("policy line 7 of"), "{e}");
        let target = crate::egress::pattern::Target::parse_authority("example.com:443").unwrap();
        let e = rules.judge(&target).unwrap_err().to_string();
        assert!(
            e.starts_with("not in [network].allow_hosts (policy line 3 of"),
            "{e}"
        );
    }

    #[test]
    fn the_policy_file_and_its_extends_chain_join_the_protected_set() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(root.join("conf")).unwrap();
        let outside = t.path().canonicalize().unwrap().join("grand.toml");
        std::fs::write(&outside, "extends = \"default\"\n").unwrap();
        std::fs::write(
            root.join("conf/base.toml"),
            format!("extends = {:?}\n", outside.display().to_string()),
        )
        .unwrap();
        std::fs::write(root.join("conf/child.toml"), "extends = \"base.toml\"\n").unwrap();
        let policy = Policy::load(root.join("conf/child.toml").to_str().unwrap()).unwrap();
        assert_eq!(policy.sources.len(), 3, "{:?}", policy.sources);
        let protected = policy.protected_patterns(&root);
        assert!(
            protected.contains(&"conf/child.toml".to_owned()),
            "{protected:?}"
        );
        assert!(
            protected.contains(&"conf/base.toml".to_owned()),
            "{protected:?}"
        );
        // The one outside the workspace is not a workspace path at all.
        assert!(
            !protected.iter().any(|p| p.contains("grand")),
            "{protected:?}"
        );
        assert!(protected.contains(&".git/hooks".to_owned()));
        // Built-in policies are no files.
        assert!(Policy::builtin_default().sources.is_empty());
    }
}
