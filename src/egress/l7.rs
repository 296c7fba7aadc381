//! HTTP rules by method and path (`[[network.rules]]`) for the hosts the proxy intercepts,
//! and the git push policy (`[network.git]`) that reads the refs a push names.
//!
//! Owns the rules as the policy compiled them and the decisions, all pure: which request a
//! host's rules allow (and, when none does, the words that name the rules and the policy line
//! to change), and which ref updates a push may make. A path is judged as sent, so one that a
//! server would read differently from how it reads here (dot segments, encoded slashes or
//! dots, backslashes) is refused before any rule sees it. Reading the requests is `intercept`'s;
//! the pkt-lines of a push are `pktline`'s.

use super::pattern::{HostPattern, Target};
use super::pktline::RefUpdate;
use super::site::Site;
use serde::Serialize;
use std::fmt;

fn as_text<S: serde::Serializer, T: fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// One `[[network.rules]]` entry.
#[derive(Debug, Clone, Serialize)]
pub struct HttpRule {
    #[serde(serialize_with = "as_text")]
    pub host: HostPattern,
    /// Upper-case methods; empty: any.
    pub methods: Vec<String>,
    /// Path patterns (`*` is any run of characters, `/` included); empty: any path.
    pub paths: Vec<String>,
    /// 0-based, in policy order (for "rule 2").
    pub index: usize,
    #[serde(skip)]
    pub site: Site,
}

/// `[network.git]`.
#[derive(Debug, Clone, Serialize)]
pub struct GitPolicy {
    /// Hosts whose pushes are judged; empty: every host a credential or rule names.
    #[serde(serialize_with = "all_as_text")]
    pub hosts: Vec<HostPattern>,
    /// Ref patterns a push may update (`*` as in paths).
    pub push_refs: Vec<String>,
    pub allow_delete: bool,
    #[serde(skip)]
    pub site: Site,
}

fn all_as_text<S: serde::Serializer, T: fmt::Display>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|x| x.to_string()))
}

/// Which rule let a request through (for the audit record).
pub fn rule_label(rule: &HttpRule) -> String {
    format!("network.rules[{}] ({})", rule.index, rule.site)
}

/// Why a request was refused by the rules of its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleRefusal {
    /// The path could be read two ways.
    AmbiguousPath {
        path: String,
        why: &'static str,
        site: Site,
    },
    /// No rule of the host allows this method and path.
    NotAllowed {
        method: String,
        path: String,
        /// Each rule of the host, as "rule N (site): methods …, paths …".
        rules: Vec<String>,
        /// The first rule's site (where to change it).
        site: Site,
    },
}

impl fmt::Display for RuleRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AmbiguousPath { path, why, site } => write!(
                f,
                "the path `{}` {why}; a host with [[network.rules]] ({site}) is sent only paths \
                 that every server reads the same way (send the path normalised)",
                path.escape_debug()
            ),
            Self::NotAllowed {
                method,
                path,
                rules,
                site,
            } => write!(
                f,
                "{method} {} is not allowed by [[network.rules]] for this host: {}; add the \
                 method to `methods` or the path to `paths` there ({site}) to allow it",
                path.escape_debug(),
                rules.join("; ")
            ),
        }
    }
}

impl HttpRule {
    fn allows(&self, method: &str, path: &str) -> bool {
        (self.methods.is_empty() || self.methods.iter().any(|m| m == method))
            && (self.paths.is_empty() || self.paths.iter().any(|p| crate::glob::matches(p, path)))
    }

    fn describe(&self) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "any".to_owned()
            } else {
                v.join(", ")
            }
        };
        format!(
            "rule {} ({}) allows methods {} on paths {}",
            self.index,
            self.site,
            list(&self.methods),
            list(&self.paths)
        )
    }
}

/// The rules naming `target`'s host.
pub fn rules_for<'a>(
    rules: &'a [HttpRule],
    target: &'a Target,
) -> impl Iterator<Item = &'a HttpRule> {
    rules.iter().filter(move |r| r.host.matches(target))
}

/// Judges `method path` (the query already dropped) against the rules of its host: Ok(None)
/// when the host has none, Ok(Some(rule)) for the rule that allows it.
pub fn judge<'a>(
    rules: &'a [HttpRule],
    target: &Target,
    method: &str,
    path: &str,
) -> Result<Option<&'a HttpRule>, RuleRefusal> {
    let host_rules: Vec<&HttpRule> = rules.iter().filter(|r| r.host.matches(target)).collect();
    if host_rules.is_empty() {
        return Ok(None);
    }
    if let Some(why) = ambiguous(path) {
        return Err(RuleRefusal::AmbiguousPath {
            path: path.to_owned(),
            why,
            site: host_rules[0].site.clone(),
        });
    }
    if let Some(rule) = host_rules.iter().find(|r| r.allows(method, path)) {
        return Ok(Some(rule));
    }
    Err(RuleRefusal::NotAllowed {
        method: method.to_owned(),
        path: path.to_owned(),
        rules: host_rules.iter().map(|r| r.describe()).collect(),
        site: host_rules[0].site.clone(),
    })
}

/// Why a path could mean another path to the server, if it could.
pub fn ambiguous(path: &str) -> Option<&'static str> {
    if path == "*" {
        return None;
    }
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") {
        Some("has an encoded slash (%2F or %5C)")
    } else if lower.contains("%2e") {
        Some("has an encoded dot (%2E)")
    } else if path.contains('\\') {
        Some("has a backslash")
    } else if path.contains("//") {
        Some("has an empty segment (`//`)")
    } else if path.split('/').any(|s| s == "." || s == "..") {
        Some("has a dot segment (`.` or `..`)")
    } else if lower.contains("%00") {
        Some("has an encoded NUL")
    } else {
        None
    }
}

/// Why a push was refused: git's own words for its report (`ng <ref> <reason>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushRefusal {
    pub refname: String,
    pub reason: String,
}

impl GitPolicy {
    /// Judges each ref update of a push; the refused ones with their reasons.
    pub fn judge(&self, updates: &[RefUpdate]) -> Vec<PushRefusal> {
        updates
            .iter()
            .filter_map(|u| {
                let reason = if u.is_delete() && !self.allow_delete {
                    Some(format!(
                        "cordon: deleting refs is not allowed ([network.git] allow_delete = \
                         false, {})",
                        self.site
                    ))
                } else if !self
                    .push_refs
                    .iter()
                    .any(|p| crate::glob::matches(p, &u.refname))
                {
                    Some(format!(
                        "cordon: {} is not in [network.git] push_refs [{}] ({}); push to a ref \
                         it lists",
                        u.refname,
                        self.push_refs.join(", "),
                        self.site
                    ))
                } else {
                    None
                };
                reason.map(|reason| PushRefusal {
                    refname: u.refname.clone(),
                    reason,
                })
            })
            .collect()
    }

    /// Whether pushes to `target` are judged (`names_elsewhere`: a credential or rule names it).
    pub fn covers(&self, target: &Target, names_elsewhere: bool) -> bool {
        if self.hosts.is_empty() {
            names_elsewhere
        } else {
            self.hosts.iter().any(|h| h.matches(target))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(line: usize) -> Site {
        Site {
            origin: "p.toml".into(),
            line: Some(line),
        }
    }

    fn rule(methods: &[&str], paths: &[&str]) -> HttpRule {
        HttpRule {
            host: HostPattern::parse("api.github.com").unwrap(),
            methods: methods.iter().map(|m| m.to_string()).collect(),
            paths: paths.iter().map(|m| m.to_string()).collect(),
            index: 0,
            site: site(12),
        }
    }

    #[test]
    fn globs_match_runs_of_anything() {
        use crate::glob::matches as glob;
        assert!(glob("/repos/acme/*", "/repos/acme/x/pulls"));
        assert!(glob("/user", "/user"));
        assert!(!glob("/user", "/users"));
        assert!(glob("refs/heads/agent/*", "refs/heads/agent/x"));
        assert!(!glob("refs/heads/agent/*", "refs/heads/main"));
        assert!(glob("*.json", "a/b.json"));
        assert!(glob("a*b*c", "aXbYc") && !glob("a*b*c", "aXcYb"));
        assert!(!glob("ab*ba", "aba"));
    }

    #[test]
    fn a_request_no_rule_allows_is_refused_with_the_rule_and_its_line() {
        let rules = vec![rule(&["GET", "HEAD"], &["/repos/acme/*", "/user"])];
        let t = Target::parse_authority("api.github.com:443").unwrap();
        assert!(judge(&rules, &t, "GET", "/user").unwrap().is_some());
        assert!(
            judge(&rules, &t, "HEAD", "/repos/acme/x")
                .unwrap()
                .is_some()
        );
        let e = judge(&rules, &t, "POST", "/user").unwrap_err().to_string();
        assert!(e.contains("POST /user is not allowed"), "{e}");
        assert!(e.contains("policy line 12 of p.toml"), "{e}");
        assert!(e.contains("GET, HEAD"), "{e}");
        assert!(judge(&rules, &t, "GET", "/orgs/evil").is_err());
        for sneaky in [
            "/repos/acme/../../orgs/evil",
            "/repos/acme/%2e%2e/x",
            "/repos/acme/x%2F..",
            "/repos/acme//x",
            "/repos/acme/.\\x",
        ] {
            let e = judge(&rules, &t, "GET", sneaky).unwrap_err();
            assert!(
                matches!(e, RuleRefusal::AmbiguousPath { .. }),
                "{sneaky}: {e}"
            );
        }
        let other = Target::parse_authority("github.com:443").unwrap();
        assert!(judge(&rules, &other, "POST", "/x").unwrap().is_none());
    }

    #[test]
    fn pushes_outside_push_refs_and_deletions_are_refused() {
        let git = GitPolicy {
            hosts: vec![],
            push_refs: vec!["refs/heads/agent/*".into()],
            allow_delete: false,
            site: site(20),
        };
        let zero = "0".repeat(40);
        let one = "1".repeat(40);
        let up = |old: &str, new: &str, r: &str| RefUpdate {
            old: old.into(),
            new: new.into(),
            refname: r.into(),
        };
        assert!(
            git.judge(&[up(&zero, &one, "refs/heads/agent/x")])
                .is_empty()
        );
        let refused = git.judge(&[
            up(&zero, &one, "refs/heads/agent/x"),
            up(&one, &one, "refs/heads/main"),
            up(&one, &zero, "refs/heads/agent/old"),
        ]);
        assert_eq!(refused.len(), 2);
        assert_eq!(refused[0].refname, "refs/heads/main");
        assert!(refused[0].reason.contains("push_refs"), "{:?}", refused[0]);
        assert!(
            refused[1].reason.contains("allow_delete"),
            "{:?}",
            refused[1]
        );
    }
}
