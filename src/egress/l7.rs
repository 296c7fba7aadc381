//! HTTP rules by method and path (`[[network.rules]]`) for the hosts the proxy intercepts,
//! and the git push policy (`[network.git]`) that reads the refs a push names.
//!
//! Owns the rules as the policy compiled them and the decisions, all pure: which request a
//! host's rules allow (and, when none does, the words that name the rules and the policy line
//! to change), and which ref updates a push may make. A path is judged as sent, so one whose
//! canonical form (`canon`) differs from its spelling, or that has none, is refused before
//! any rule sees it ([`spelled_once`]); a method-override header or `_method` parameter is
//! judged as a method too. Reading the requests is `intercept`'s; the pkt-lines of a push are
//! `pktline`'s.

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
pub(crate) fn rule_label(rule: &HttpRule) -> String {
    format!("network.rules[{}] ({})", rule.index, rule.site)
}

/// Why a request was refused by the rules of its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RuleRefusal {
    /// The path could be read two ways.
    AmbiguousPath {
        path: String,
        why: String,
        site: Site,
    },
    /// The path is read as another one by a server that normalises it.
    NotCanonical {
        path: String,
        canonical: String,
        site: Site,
    },
    /// No rule of the host allows this method and path.
    NotAllowed {
        method: String,
        /// Where the method was written when not on the request line (an override); boxed,
        /// as it is rare and the refusal travels in every `Result`.
        #[expect(
            clippy::box_collection,
            reason = "one pointer wide: a Box<str> is two, and the refusal travels in every Result"
        )]
        via: Option<Box<String>>,
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
                "the path `{}` {why}; a host whose requests cordon judges ({site}) is sent only \
                 paths that every server reads the same way (send the path normalised)",
                path.escape_debug()
            ),
            Self::NotCanonical {
                path,
                canonical,
                site,
            } => write!(
                f,
                "the path `{}` is read as `{}` by a server that decodes and normalises it (a \
                 dot segment, `..;`, a duplicate slash or an encoded unreserved character); a \
                 host whose requests cordon judges ({site}) is sent only paths spelled the way \
                 they are read: send `{}`",
                path.escape_debug(),
                canonical.escape_debug(),
                canonical.escape_debug()
            ),
            Self::NotAllowed {
                method,
                via,
                path,
                rules,
                site,
            } => write!(
                f,
                "{method}{} {} is not allowed by [[network.rules]] for this host: {}; add the \
                 method to `methods` or the path to `paths` there ({site}) to allow it",
                via.as_ref()
                    .map(|v| format!(
                        " (as {v} asks: a server may honour it in place of the \
                                      request's own method, so it is judged as one)"
                    ))
                    .unwrap_or_default(),
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
pub(crate) fn rules_for<'a>(
    rules: &'a [HttpRule],
    target: &'a Target,
) -> impl Iterator<Item = &'a HttpRule> {
    rules.iter().filter(move |r| r.host.matches(target))
}

/// Judges `method path` (the query already dropped) against the rules of its host: Ok(None)
/// when the host has none, Ok(Some(rule)) for the rule that allows it.
pub(crate) fn judge<'a>(
    rules: &'a [HttpRule],
    target: &Target,
    method: &str,
    path: &str,
) -> Result<Option<&'a HttpRule>, RuleRefusal> {
    let host_rules: Vec<&HttpRule> = rules.iter().filter(|r| r.host.matches(target)).collect();
    if host_rules.is_empty() {
        return Ok(None);
    }
    spelled_once(path, &host_rules[0].site)?;
    if let Some(rule) = host_rules.iter().find(|r| r.allows(method, path)) {
        return Ok(Some(rule));
    }
    Err(RuleRefusal::NotAllowed {
        method: method.to_owned(),
        via: None,
        path: path.to_owned(),
        rules: host_rules.iter().map(|r| r.describe()).collect(),
        site: host_rules[0].site.clone(),
    })
}

/// Header fields a framework may honour in place of the request method (Rails, Laravel,
/// Symfony, Express's method-override, ASP.NET, Google APIs).
pub(crate) const OVERRIDE_HEADERS: [&str; 3] = [
    "X-HTTP-Method-Override",
    "X-HTTP-Method",
    "X-Method-Override",
];

/// Every method a request may be read as: its own, then each override (a field of
/// [`OVERRIDE_HEADERS`], or `_method` in the query), with where the override was written.
pub(crate) fn methods_read(
    method: &str,
    headers: &[(String, String)],
    query: Option<&str>,
) -> Vec<(String, Option<String>)> {
    let mut out = vec![(method.to_owned(), None)];
    for (name, value) in headers {
        if let Some(known) = OVERRIDE_HEADERS
            .iter()
            .find(|h| h.eq_ignore_ascii_case(name))
        {
            out.push((
                value.trim().to_ascii_uppercase(),
                Some(format!("the `{known}` header")),
            ));
        }
    }
    for pair in query.unwrap_or_default().split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if percent_decoded(key).eq_ignore_ascii_case("_method") {
            out.push((
                percent_decoded(value).trim().to_ascii_uppercase(),
                Some("the `_method` query parameter".to_owned()),
            ));
        }
    }
    out
}

/// `text` with its `%XX` escapes (and `+`, a form's space) decoded; bad escapes kept as sent.
fn percent_decoded(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push(hi << 4 | lo);
                i += 3;
            }
            (b'+', ..) => {
                out.push(b' ');
                i += 1;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// [`judge`] for every method the request may be read as ([`methods_read`]): all must be
/// allowed; the rule that allowed the request's own method is the one recorded.
pub(crate) fn judge_request<'a>(
    rules: &'a [HttpRule],
    target: &Target,
    methods: &[(String, Option<String>)],
    path: &str,
) -> Result<Option<&'a HttpRule>, RuleRefusal> {
    let mut decided = None;
    for (i, (method, via)) in methods.iter().enumerate() {
        match judge(rules, target, method, path) {
            Ok(rule) if i == 0 => decided = rule,
            Ok(_) => {}
            Err(RuleRefusal::NotAllowed {
                method,
                path,
                rules,
                site,
                ..
            }) => {
                return Err(RuleRefusal::NotAllowed {
                    method,
                    via: via.clone().map(Box::new),
                    path,
                    rules,
                    site,
                });
            }
            Err(other) => return Err(other),
        }
    }
    Ok(decided)
}

/// Refuses a path that has no one reading, or whose reading differs from its spelling (see
/// `canon`); `site` is the policy line that made the host judged.
pub(crate) fn spelled_once(path: &str, site: &Site) -> Result<(), RuleRefusal> {
    match super::canon::canonical(path) {
        Err(fault) => Err(RuleRefusal::AmbiguousPath {
            path: path.to_owned(),
            why: fault.to_string(),
            site: site.clone(),
        }),
        Ok(canonical) if canonical != path => Err(RuleRefusal::NotCanonical {
            path: path.to_owned(),
            canonical,
            site: site.clone(),
        }),
        Ok(_) => Ok(()),
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
                matches!(
                    e,
                    RuleRefusal::AmbiguousPath { .. } | RuleRefusal::NotCanonical { .. }
                ),
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
