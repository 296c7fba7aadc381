//! Strict parsing of `host[:port]` as it appears in `Origin`, `Host` and absolute-form
//! request targets: a registered name (letters, digits, `-`, `.`, `_`, `~`), an IPv4 address
//! or a bracketed IPv6 one, then at most `:` and a decimal port, and nothing else. No user
//! info, path, query, fragment, whitespace or trailing bytes: `localhost:80.evil.example` is
//! not `localhost`. Hosts come back lower-cased, IPv6 ones in canonical form without brackets,
//! so equal authorities compare equal as strings.

use std::net::Ipv6Addr;

/// A parsed authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Authority {
    pub host: String,
    pub port: Option<u16>,
}

/// `host[:port]`, or `None` when the text is anything else.
pub(crate) fn parse(text: &str) -> Option<Authority> {
    let (host, rest) = if let Some(inner) = text.strip_prefix('[') {
        let (v6, rest) = inner.split_once(']')?;
        let addr: Ipv6Addr = v6.parse().ok()?;
        (addr.to_string(), rest)
    } else {
        let end = text.find(':').unwrap_or(text.len());
        let (name, rest) = text.split_at(end);
        if name.is_empty() || !name.bytes().all(is_name_byte) {
            return None;
        }
        (name.to_ascii_lowercase(), rest)
    };
    let port = match rest {
        "" => None,
        _ => Some(parse_port(rest.strip_prefix(':')?)?),
    };
    Some(Authority { host, port })
}

/// An allow-list entry of `allowed_hosts`: an authority, or a bare IPv6 address (`::1`).
pub(crate) fn parse_host_entry(text: &str) -> Option<Authority> {
    if let Ok(addr) = text.parse::<Ipv6Addr>() {
        return Some(Authority {
            host: addr.to_string(),
            port: None,
        });
    }
    parse(text)
}

fn parse_port(digits: &str) -> Option<u16> {
    if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// The port a scheme implies when none is written.
pub(crate) fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str, host: &str, port: Option<u16>) {
        assert_eq!(
            parse(text),
            Some(Authority {
                host: host.into(),
                port
            }),
            "{text}"
        );
    }

    #[test]
    fn hosts_and_ports_parse_exactly() {
        ok("localhost", "localhost", None);
        ok("LocalHost:8080", "localhost", Some(8080));
        ok("127.0.0.1:80", "127.0.0.1", Some(80));
        ok("[::1]", "::1", None);
        ok("[0:0::1]:3000", "::1", Some(3000));
        ok("cordon.team.svc", "cordon.team.svc", None);
    }

    #[test]
    fn trailing_garbage_user_info_and_paths_are_refused() {
        for bad in [
            "localhost:80.evil.example",
            "localhost:",
            "localhost:65536",
            "localhost:080000",
            "localhost:80:81",
            "user@localhost",
            "localhost/",
            "localhost/mcp",
            "localhost?x",
            "localhost#x",
            "local host",
            "",
            ":80",
            "[::1",
            "[::1]x",
            "[::1]:",
            "[evil]",
            "localhost\t",
            "lôcalhost",
        ] {
            assert_eq!(parse(bad), None, "{bad:?} was accepted");
        }
    }

    #[test]
    fn host_entries_may_be_bare_ipv6() {
        assert_eq!(
            parse_host_entry("::1"),
            Some(Authority {
                host: "::1".into(),
                port: None
            })
        );
        assert_eq!(
            parse_host_entry("example.com:8080").unwrap().port,
            Some(8080)
        );
    }
}
