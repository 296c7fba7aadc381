//! The `Origin` allow-list (`server.http.allowed_origins`): a browser page from any other
//! origin gets 403, so a web page the user happens to visit cannot drive the tools through
//! the user's browser (DNS rebinding, cross-site POSTs to localhost).
//!
//! Requests without `Origin` pass: browsers always send it on cross-origin and on POST
//! requests, and non-browser clients (SDKs, proxies) do not; authentication is what guards
//! against those. Matching is by RFC 6454 origin, parsed strictly (`authority`): scheme, host
//! and port compared exactly, the port defaulting to the scheme's; an entry ending in `:*`
//! matches any port. `null` (sandboxed frames, file pages) matches only an entry `null`.
//! More than one `Origin` header, and the `Host` and request-target checks, are `target`'s.

/// One allow-list entry, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Allowed {
    Null,
    Origin {
        scheme: String,
        host: String,
        /// `None` is `:*`.
        port: Option<u16>,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct OriginPolicy {
    allowed: Vec<Allowed>,
}

/// An entry the allow-list cannot use (the policy loader checks the shape; this names what
/// is still wrong).
#[derive(Debug, thiserror::Error)]
#[error("`{0}` in server.http.allowed_origins is not an origin (scheme://host[:port|:*])")]
pub struct BadOrigin(String);

impl OriginPolicy {
    pub(crate) fn new(entries: &[String]) -> Result<Self, BadOrigin> {
        let allowed = entries
            .iter()
            .map(|entry| parse_entry(entry).ok_or_else(|| BadOrigin(entry.clone())))
            .collect::<Result<_, _>>()?;
        Ok(Self { allowed })
    }

    /// Whether a request carrying `Origin: value` may be served.
    pub(crate) fn allows(&self, value: &str) -> bool {
        if value == "null" {
            return self.allowed.contains(&Allowed::Null);
        }
        let Some((scheme, host, port)) = parse_origin(value) else {
            return false;
        };
        let port = port.or_else(|| default_port(&scheme));
        self.allowed.iter().any(|allowed| match allowed {
            Allowed::Null => false,
            Allowed::Origin {
                scheme: s,
                host: h,
                port: p,
            } => *s == scheme && *h == host && p.is_none_or(|p| Some(p) == port),
        })
    }
}

fn parse_entry(entry: &str) -> Option<Allowed> {
    let entry = entry.trim();
    if entry.eq_ignore_ascii_case("null") {
        return Some(Allowed::Null);
    }
    if let Some(base) = entry.strip_suffix(":*") {
        let (scheme, host, None) = parse_origin(base)? else {
            return None;
        };
        return Some(Allowed::Origin {
            scheme,
            host,
            port: None,
        });
    }
    let (scheme, host, port) = parse_origin(entry)?;
    let port = port.or_else(|| default_port(&scheme))?;
    Some(Allowed::Origin {
        scheme,
        host,
        port: Some(port),
    })
}

/// `scheme://host[:port]` with nothing after it (no user info, path, query, fragment or
/// trailing slash), scheme and host lower-cased.
fn parse_origin(value: &str) -> Option<(String, String, Option<u16>)> {
    let (scheme, authority) = value.split_once("://")?;
    let mut bytes = scheme.bytes();
    let scheme_ok = bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !scheme_ok {
        return None;
    }
    let parsed = super::authority::parse(authority)?;
    Some((scheme.to_ascii_lowercase(), parsed.host, parsed.port))
}

fn default_port(scheme: &str) -> Option<u16> {
    super::authority::default_port(scheme)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[&str]) -> OriginPolicy {
        OriginPolicy::new(&entries.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn the_default_list_admits_localhost_pages_on_any_port_and_nothing_else() {
        let p = policy(&crate::policy::DEFAULT_ALLOWED_ORIGINS);
        assert!(p.allows("http://localhost:3000"));
        assert!(p.allows("http://127.0.0.1"));
        assert!(p.allows("http://[::1]:8080"));
        assert!(p.allows("HTTP://LOCALHOST:5173"));
        assert!(!p.allows("https://evil.example"));
        assert!(!p.allows("http://localhost.evil.example"));
        assert!(!p.allows("http://127.0.0.1.nip.io"));
        assert!(
            !p.allows("https://localhost:3000"),
            "scheme is part of the origin"
        );
        assert!(!p.allows("null"));
        assert!(!p.allows("not an origin"));
        assert!(!p.allows("http://user@localhost"));
    }

    #[test]
    fn trailing_garbage_paths_and_user_info_are_not_an_origin() {
        let p = policy(&crate::policy::DEFAULT_ALLOWED_ORIGINS);
        for bad in [
            "http://localhost:80.evil.example",
            "http://localhost:3000.evil.example",
            "http://localhost:3000/",
            "http://localhost/",
            "http://localhost:3000/path",
            "http://localhost?x",
            "http://localhost#x",
            "http://evil@localhost",
            "http://localhost:evil@evil.example",
            "http://localhost:",
            "http://localhost:99999",
            "http://localhost http://evil.example",
            "http://localhost, https://evil.example",
            " http://localhost",
            "http:/localhost",
            "//localhost",
        ] {
            assert!(!p.allows(bad), "{bad:?} was taken for localhost");
        }
        assert!(
            p.allows("http://[0:0::1]:8080"),
            "IPv6 compared as an address"
        );
    }

    #[test]
    fn explicit_ports_match_exactly_and_default_by_scheme() {
        let p = policy(&["https://app.example.com", "http://dev.example:8080"]);
        assert!(p.allows("https://app.example.com"));
        assert!(p.allows("https://app.example.com:443"));
        assert!(!p.allows("https://app.example.com:8443"));
        assert!(p.allows("http://dev.example:8080"));
        assert!(!p.allows("http://dev.example"));
        assert!(!p.allows("http://app.example.com"));
    }

    #[test]
    fn null_matches_only_a_null_entry() {
        assert!(policy(&["null"]).allows("null"));
        assert!(!policy(&["http://localhost:*"]).allows("null"));
    }

    #[test]
    fn malformed_entries_are_refused() {
        assert!(OriginPolicy::new(&["app.example.com".to_owned()]).is_err());
        assert!(OriginPolicy::new(&["https://a.example/path".to_owned()]).is_err());
        assert!(OriginPolicy::new(&["https://a.example:443:*".to_owned()]).is_err());
        assert!(OriginPolicy::new(&["https://a.example:443.evil".to_owned()]).is_err());
    }
}
