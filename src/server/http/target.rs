//! What a request says it is for: its `Host` header and, in absolute form
//! (`POST http://host/mcp`), its target's authority. A request is refused (403) when it
//! carries more than one `Host` or `Origin` header (a proxy and cordon could each read a
//! different one), when its `Host` or its target's authority is not one of
//! `server.http.allowed_hosts` (DNS rebinding), or when the two disagree (RFC 9112 §3.2.2:
//! the target wins, so a check of `Host` alone would judge the wrong name).
//!
//! Parsing is `authority`'s (strict); the `Origin` allow-list is `origin`'s. A request with
//! neither `Host` nor an absolute target is left to rmcp, which answers 400.

use super::authority::{self, Authority};

/// `server.http.allowed_hosts`, parsed once.
#[derive(Debug, Clone)]
pub(crate) struct HostPolicy {
    /// `None`: `["*"]`, any host.
    allowed: Option<Vec<Authority>>,
}

/// Why a request's target was refused; the message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadTarget {
    #[error("more than one {0} header: send exactly one")]
    Duplicate(&'static str),
    #[error("{what} {value:?} is not a host[:port]")]
    Malformed { what: &'static str, value: String },
    #[error("{what} {value:?} is not in server.http.allowed_hosts")]
    NotAllowed { what: &'static str, value: String },
    #[error("the request target names {target:?} but Host names {host:?}")]
    Disagree { target: String, host: String },
}

impl HostPolicy {
    /// Entries that are not a host[:port] are skipped with a warning (they could match
    /// nothing).
    pub(crate) fn new(entries: &[String]) -> Self {
        if entries.iter().any(|h| h == "*") {
            return Self { allowed: None };
        }
        let allowed = entries
            .iter()
            .filter_map(|entry| {
                let parsed = authority::parse_host_entry(entry.trim());
                if parsed.is_none() {
                    tracing::warn!(
                        "server.http.allowed_hosts entry {entry:?} is not a host[:port]; it \
                         matches no request"
                    );
                }
                parsed
            })
            .collect();
        Self {
            allowed: Some(allowed),
        }
    }

    fn allows(&self, asked: &Authority) -> bool {
        match &self.allowed {
            None => true,
            Some(allowed) => allowed
                .iter()
                .any(|a| a.host == asked.host && a.port.is_none_or(|p| asked.port == Some(p))),
        }
    }

    /// Checks a request's `Host` and `Origin` headers and its target.
    pub(crate) fn check(
        &self,
        uri: &http::Uri,
        headers: &http::HeaderMap,
    ) -> Result<(), BadTarget> {
        for (name, label) in [
            (http::header::HOST, "Host"),
            (http::header::ORIGIN, "Origin"),
        ] {
            if headers.get_all(&name).iter().nth(1).is_some() {
                return Err(BadTarget::Duplicate(label));
            }
        }
        let host = match headers.get(http::header::HOST) {
            None => None,
            Some(value) => {
                let text = String::from_utf8_lossy(value.as_bytes());
                let parsed = authority::parse(&text).ok_or_else(|| BadTarget::Malformed {
                    what: "Host",
                    value: text.clone().into_owned(),
                })?;
                if !self.allows(&parsed) {
                    return Err(BadTarget::NotAllowed {
                        what: "Host",
                        value: text.into_owned(),
                    });
                }
                Some(parsed)
            }
        };
        let Some(target) = uri.authority() else {
            return Ok(());
        };
        let what = "the request target's authority";
        let parsed = authority::parse(target.as_str()).ok_or_else(|| BadTarget::Malformed {
            what,
            value: target.to_string(),
        })?;
        if !self.allows(&parsed) {
            return Err(BadTarget::NotAllowed {
                what,
                value: target.to_string(),
            });
        }
        if let Some(host) = host {
            let implied = uri.scheme_str().and_then(authority::default_port);
            let same = host.host == parsed.host && host.port.or(implied) == parsed.port.or(implied);
            if !same {
                return Err(BadTarget::Disagree {
                    target: target.to_string(),
                    host: headers
                        .get(http::header::HOST)
                        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                        .unwrap_or_default(),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[&str]) -> HostPolicy {
        HostPolicy::new(&entries.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    fn check(
        p: &HostPolicy,
        target: &str,
        hosts: &[&str],
        origins: &[&str],
    ) -> Result<(), BadTarget> {
        let mut headers = http::HeaderMap::new();
        for h in hosts {
            headers.append(http::header::HOST, h.parse().unwrap());
        }
        for o in origins {
            headers.append(http::header::ORIGIN, o.parse().unwrap());
        }
        p.check(&target.parse().unwrap(), &headers)
    }

    #[test]
    fn one_allowed_host_passes_and_duplicates_do_not() {
        let p = policy(&crate::policy::DEFAULT_ALLOWED_HOSTS);
        assert_eq!(check(&p, "/mcp", &["127.0.0.1:8080"], &[]), Ok(()));
        assert_eq!(check(&p, "/mcp", &["[::1]:8080"], &[]), Ok(()));
        assert_eq!(check(&p, "/mcp", &[], &[]), Ok(()), "no Host: rmcp's 400");
        assert_eq!(
            check(&p, "/mcp", &["127.0.0.1", "evil.example"], &[]),
            Err(BadTarget::Duplicate("Host"))
        );
        assert_eq!(
            check(
                &p,
                "/mcp",
                &["127.0.0.1"],
                &["http://localhost", "https://evil.example"]
            ),
            Err(BadTarget::Duplicate("Origin"))
        );
        assert!(matches!(
            check(&p, "/mcp", &["127.0.0.1:80.evil.example"], &[]),
            Err(BadTarget::Malformed { .. })
        ));
        assert!(matches!(
            check(&p, "/mcp", &["evil.example"], &[]),
            Err(BadTarget::NotAllowed { .. })
        ));
    }

    #[test]
    fn an_absolute_target_must_be_allowed_and_agree_with_host() {
        let p = policy(&crate::policy::DEFAULT_ALLOWED_HOSTS);
        assert_eq!(
            check(&p, "http://127.0.0.1/mcp", &["127.0.0.1"], &[]),
            Ok(())
        );
        assert_eq!(
            check(&p, "http://127.0.0.1/mcp", &["127.0.0.1:80"], &[]),
            Ok(()),
            "the scheme's port is implied"
        );
        assert!(matches!(
            check(&p, "http://evil.example/mcp", &["127.0.0.1"], &[]),
            Err(BadTarget::NotAllowed { .. })
        ));
        assert!(matches!(
            check(&p, "http://localhost/mcp", &["127.0.0.1"], &[]),
            Err(BadTarget::Disagree { .. })
        ));
        assert!(matches!(
            check(&p, "http://127.0.0.1:8080/mcp", &["127.0.0.1:9090"], &[]),
            Err(BadTarget::Disagree { .. })
        ));
        // Any host allowed: targets and Host still agree.
        let any = policy(&["*"]);
        assert_eq!(
            check(&any, "http://a.example/mcp", &["a.example"], &[]),
            Ok(())
        );
        assert!(matches!(
            check(&any, "http://a.example/mcp", &["b.example"], &[]),
            Err(BadTarget::Disagree { .. })
        ));
    }

    #[test]
    fn listed_ports_must_match() {
        let p = policy(&["cordon.example:8443", "::1"]);
        assert_eq!(check(&p, "/mcp", &["cordon.example:8443"], &[]), Ok(()));
        assert!(check(&p, "/mcp", &["cordon.example"], &[]).is_err());
        assert!(check(&p, "/mcp", &["cordon.example:9000"], &[]).is_err());
        assert_eq!(check(&p, "/mcp", &["[::1]:1234"], &[]), Ok(()));
    }
}
