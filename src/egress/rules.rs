//! The egress rules of a policy, compiled: which targets a confined call may reach through
//! the proxy, which resolved addresses it may connect to, and the words of every refusal.
//!
//! Owns the decisions that need no network: a target is judged here before any name is
//! resolved (a denied name causes no DNS query), and the addresses a resolver returned are
//! filtered here before any connection. It does not resolve or connect (that is `proxy`) and
//! does not read policy files (`policy` builds it and tells it where each list was written).

use super::pattern::{Cidr, Host, HostPattern, PortMatch, Target, non_public};
pub(crate) use super::site::Site;
use serde::Serialize;
use std::fmt;
use std::net::IpAddr;

/// A pattern and the line it is written on.
#[derive(Debug, Clone, Serialize)]
pub struct SitedPattern {
    #[serde(rename = "pattern", serialize_with = "as_text")]
    pub pattern: HostPattern,
    #[serde(skip)]
    pub site: Site,
}

fn as_text<S: serde::Serializer, T: fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn all_as_text<S: serde::Serializer, T: fmt::Display>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|x| x.to_string()))
}

/// `[network]` in proxy mode.
#[derive(Debug, Clone, Serialize)]
pub struct EgressRules {
    pub allow_hosts: Vec<SitedPattern>,
    pub deny_hosts: Vec<SitedPattern>,
    #[serde(serialize_with = "all_as_text")]
    pub allow_private: Vec<Cidr>,
    /// Connections one call may open through the proxy (refused ones count too).
    pub max_connections_per_call: usize,
    /// Bytes (both directions together) one connection may carry before it is cut.
    pub max_bytes_per_connection: u64,
    #[serde(skip)]
    pub allow_site: Site,
    #[serde(skip)]
    pub deny_site: Site,
    #[serde(skip)]
    pub private_site: Site,
    #[serde(skip)]
    pub caps_site: Site,
    /// `[[network.credentials]]`: values the sandbox never holds (see `secrets`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<super::secrets::CredentialRule>,
    /// `[[network.rules]]`: methods and paths per intercepted host (see `l7`).
    #[serde(rename = "rules", skip_serializing_if = "Vec::is_empty")]
    pub http_rules: Vec<super::l7::HttpRule>,
    /// `[network.git]`: which refs a push through the proxy may update.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git: Option<super::l7::GitPolicy>,
    /// `[network].extra_roots`: PEM files trusted for intercepted upstreams, besides the
    /// system roots.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_roots: Vec<std::path::PathBuf>,
}

/// Why a request was refused, before or after resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Denied {
        pattern: String,
        site: Site,
    },
    NotAllowed {
        site: Site,
    },
    /// The host matches an entry, but not on this port.
    Port {
        pattern: String,
        ports: PortMatch,
        site: Site,
    },
    UnlistedIp {
        site: Site,
    },
    Private {
        addresses: Vec<(IpAddr, &'static str)>,
        site: Site,
    },
    Unresolved(String),
    TooManyConnections {
        max: usize,
        site: Site,
    },
    /// The request itself is unusable (bad head, `Host` mismatch, unsupported form).
    BadRequest(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied { pattern, site } => write!(
                f,
                "matches `{pattern}` in [network].deny_hosts ({site}); deny_hosts wins over \
                 allow_hosts, remove it there to allow"
            ),
            Self::NotAllowed { site } => write!(
                f,
                "not in [network].allow_hosts ({site}); add it there to allow"
            ),
            Self::Port {
                pattern,
                ports,
                site,
            } => write!(
                f,
                "not in [network].allow_hosts on this port: `{pattern}` ({site}) allows {}; add \
                 the host with this port (`host:PORT`, or `host:*` for any) there to allow",
                match ports {
                    PortMatch::Web => "ports 80 and 443 (no port written)".to_owned(),
                    PortMatch::One(p) => format!("only its own port {p}"),
                    PortMatch::Any => "every port".to_owned(),
                }
            ),
            Self::UnlistedIp { site } => write!(
                f,
                "an IP address is only reached when it is listed itself in [network].allow_hosts \
                 ({site}); add it there (e.g. `203.0.113.7:443`) to allow"
            ),
            Self::Private { addresses, site } => {
                let shown: Vec<String> = addresses
                    .iter()
                    .map(|(ip, why)| format!("{ip} ({why})"))
                    .collect();
                write!(
                    f,
                    "resolves only to non-public addresses [{}], not in [network].allow_private \
                     ({site}); add the range there (e.g. `127.0.0.0/8`) to allow",
                    shown.join(", ")
                )
            }
            Self::Unresolved(e) => write!(f, "the name does not resolve: {e}"),
            Self::TooManyConnections { max, site } => write!(
                f,
                "this call already opened {max} connections, the most \
                 [network].max_connections_per_call allows ({site}); raise it there to allow more"
            ),
            Self::BadRequest(why) => write!(f, "{why}"),
        }
    }
}

impl Refusal {
    /// A short label for logs and counters.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Denied { .. } => "deny_hosts",
            Self::NotAllowed { .. } => "not_allowed",
            Self::Port { .. } => "port",
            Self::UnlistedIp { .. } => "ip_literal",
            Self::Private { .. } => "private_address",
            Self::Unresolved(_) => "unresolved",
            Self::TooManyConnections { .. } => "connection_cap",
            Self::BadRequest(_) => "bad_request",
        }
    }
}

impl EgressRules {
    /// Whether the proxy terminates TLS to `target` (a credential, a rule or `[network.git]`
    /// names it); every other allowed target stays an opaque tunnel.
    pub fn intercepts(&self, target: &Target) -> bool {
        self.credentials.iter().any(|c| c.names(target))
            || self.http_rules.iter().any(|r| r.host.matches(target))
            || self
                .git
                .as_ref()
                .is_some_and(|g| g.hosts.iter().any(|h| h.matches(target)))
    }

    /// Whether any host is intercepted (so the sandbox needs cordon's CA).
    pub fn intercepts_any(&self) -> bool {
        !self.credentials.is_empty()
            || !self.http_rules.is_empty()
            || self.git.as_ref().is_some_and(|g| !g.hosts.is_empty())
    }

    /// Judges a target by its name alone: deny list first (it wins), then the allow list.
    /// Nothing here resolves; a refused name is never looked up.
    pub fn judge(&self, target: &Target) -> Result<(), Refusal> {
        if let Some(d) = self
            .deny_hosts
            .iter()
            .find(|d| d.pattern.matches_host(&target.host))
        {
            // A deny entry with a port only denies that port; without one it denies the host.
            let denies = match d.pattern.ports {
                PortMatch::Web => true,
                other => other.allows(target.port),
            };
            if denies {
                return Err(Refusal::Denied {
                    pattern: d.pattern.text.clone(),
                    site: d.site.clone(),
                });
            }
        }
        if self.allow_hosts.iter().any(|a| a.pattern.matches(target)) {
            return Ok(());
        }
        if let Some(a) = self
            .allow_hosts
            .iter()
            .find(|a| a.pattern.matches_host(&target.host))
        {
            return Err(Refusal::Port {
                pattern: a.pattern.text.clone(),
                ports: a.pattern.ports,
                site: a.site.clone(),
            });
        }
        if matches!(target.host, Host::Ip(_)) {
            return Err(Refusal::UnlistedIp {
                site: self.allow_site.clone(),
            });
        }
        Err(Refusal::NotAllowed {
            site: self.allow_site.clone(),
        })
    }

    /// The resolved addresses the proxy may connect to: public ones, and non-public ones in
    /// `allow_private`. Empty input is the resolver's failure, reported as such.
    pub fn usable_addresses(&self, resolved: &[IpAddr]) -> Result<Vec<IpAddr>, Refusal> {
        if resolved.is_empty() {
            return Err(Refusal::Unresolved("no addresses".into()));
        }
        let mut refused = Vec::new();
        let mut usable = Vec::new();
        for &ip in resolved {
            match non_public(ip) {
                Some(why) if !self.allow_private.iter().any(|c| c.contains(ip)) => {
                    refused.push((ip, why))
                }
                _ => usable.push(ip),
            }
        }
        if usable.is_empty() {
            return Err(Refusal::Private {
                addresses: refused,
                site: self.private_site.clone(),
            });
        }
        Ok(usable)
    }
}

impl EgressRules {
    /// Every entry that names a loopback host ([`HostPattern::names_loopback`]), with where it
    /// is (`allow_hosts`, `credential `gh``, `rule 2`, `[network.git] hosts`): entries that
    /// never apply to an ordinary client in a call. `deny_hosts` entries are left out (denying
    /// what is never reached changes nothing).
    pub fn loopback_entries(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for e in &self.allow_hosts {
            if e.pattern.names_loopback() {
                out.push((format!("allow_hosts ({})", e.site), e.pattern.to_string()));
            }
        }
        for c in &self.credentials {
            for h in c.hosts.iter().filter(|h| h.pattern.names_loopback()) {
                out.push((
                    format!("credential `{}` ({})", c.name, c.site),
                    h.pattern.to_string(),
                ));
            }
        }
        for r in self.http_rules.iter().filter(|r| r.host.names_loopback()) {
            out.push((
                format!("[[network.rules]] rule {} ({})", r.index + 1, r.site),
                r.host.to_string(),
            ));
        }
        if let Some(g) = &self.git {
            for h in g.hosts.iter().filter(|h| h.names_loopback()) {
                out.push((format!("[network.git] hosts ({})", g.site), h.to_string()));
            }
        }
        out
    }
}

/// What a loopback entry means, for `policy check` and `policy explain`: one warning line.
pub(crate) fn loopback_warning(place: &str, pattern: &str) -> String {
    format!(
        "warning: {place} names `{pattern}`, a loopback host: inside a call `localhost`, \
         127.0.0.1 and ::1 are the call's own loopback (clients skip the proxy for them, \
         NO_PROXY), so this entry never applies to an ordinary client. A call reaches a \
         service on the host's loopback only through the proxy: with the loopback range in \
         `allow_private` and a client told to use the proxy for it (`unset NO_PROXY`); \
         otherwise run the service inside the sandbox (a job), or list an address that is \
         not loopback"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str], deny: &[&str], private: &[&str]) -> EgressRules {
        let site = |line| Site {
            origin: "p.toml".into(),
            line: Some(line),
        };
        let sited = |list: &[&str], line| {
            list.iter()
                .map(|p| SitedPattern {
                    pattern: HostPattern::parse(p).unwrap(),
                    site: site(line),
                })
                .collect()
        };
        EgressRules {
            allow_hosts: sited(allow, 3),
            deny_hosts: sited(deny, 4),
            allow_private: private.iter().map(|c| Cidr::parse(c).unwrap()).collect(),
            max_connections_per_call: 8,
            max_bytes_per_connection: 1 << 20,
            allow_site: site(3),
            deny_site: site(4),
            private_site: site(5),
            caps_site: site(6),
            credentials: Vec::new(),
            http_rules: Vec::new(),
            git: None,
            extra_roots: Vec::new(),
        }
    }

    fn target(s: &str) -> Target {
        Target::parse_authority(s).unwrap()
    }

    #[test]
    fn deny_wins_and_every_refusal_names_its_line() {
        let r = rules(
            &["*.example.net", "example.org:8443"],
            &["bad.example.net"],
            &[],
        );
        assert!(r.judge(&target("api.example.net:443")).is_ok());
        let e = r.judge(&target("bad.example.net:443")).unwrap_err();
        assert!(matches!(e, Refusal::Denied { .. }), "{e}");
        assert!(e.to_string().contains("policy line 4 of p.toml"), "{e}");
        let e = r.judge(&target("other.org:443")).unwrap_err().to_string();
        assert_eq!(
            e,
            "not in [network].allow_hosts (policy line 3 of p.toml); add it there to allow"
        );
        let e = r.judge(&target("example.org:443")).unwrap_err();
        assert!(matches!(e, Refusal::Port { .. }), "{e}");
        assert!(e.to_string().contains("only its own port"), "{e}");
        let e = r.judge(&target("api.example.net:22")).unwrap_err();
        assert!(e.to_string().contains("ports 80 and 443"), "{e}");
    }

    #[test]
    fn loopback_names_and_addresses_are_found_wherever_they_are_listed() {
        for text in [
            "localhost",
            "localhost:8080",
            "app.localhost",
            "*.localhost",
            "ip6-localhost",
            "127.0.0.1:3000",
            "127.8.9.10",
            "[::1]:443",
            "0.0.0.0:80",
            "[::ffff:127.0.0.1]:80",
        ] {
            let p = HostPattern::parse(text).unwrap();
            assert!(p.names_loopback(), "{text}");
        }
        for text in [
            "example.org",
            "localhost.example.org",
            "*.example.org",
            "10.0.0.1",
        ] {
            let p = HostPattern::parse(text).unwrap();
            assert!(!p.names_loopback(), "{text}");
        }
        let r = rules(&["github.com", "localhost:8080"], &["127.0.0.1"], &[]);
        let found = r.loopback_entries();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].0.starts_with("allow_hosts"), "{found:?}");
        assert_eq!(found[0].1, "localhost:8080");
        let w = loopback_warning(&found[0].0, &found[0].1);
        assert!(
            w.contains("the call's own loopback") && w.contains("unset NO_PROXY"),
            "{w}"
        );
    }

    #[test]
    fn ip_literals_need_their_own_entry() {
        let r = rules(&["localhost:*"], &[], &[]);
        let e = r.judge(&target("127.0.0.1:80")).unwrap_err();
        assert!(matches!(e, Refusal::UnlistedIp { .. }), "{e}");
        let r = rules(&["127.0.0.1:80"], &[], &[]);
        assert!(r.judge(&target("127.0.0.1:80")).is_ok());
    }

    #[test]
    fn private_addresses_are_dropped_unless_their_range_is_listed() {
        let r = rules(&["localhost:*"], &[], &[]);
        let lo: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
        let e = r.usable_addresses(&lo).unwrap_err();
        assert!(e.to_string().contains("127.0.0.1 (loopback)"), "{e}");
        assert!(e.to_string().contains("line 5"), "{e}");
        let r = rules(&["localhost:*"], &[], &["127.0.0.0/8"]);
        assert_eq!(r.usable_addresses(&lo).unwrap(), vec![lo[0]]);
        let mixed: Vec<IpAddr> = vec![
            "10.0.0.1".parse().unwrap(),
            "93.184.215.14".parse().unwrap(),
        ];
        assert_eq!(r.usable_addresses(&mixed).unwrap(), vec![mixed[1]]);
        assert!(matches!(
            r.usable_addresses(&[]),
            Err(Refusal::Unresolved(_))
        ));
    }
}
