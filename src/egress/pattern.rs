//! Host patterns of `[network].allow_hosts` / `deny_hosts`, the targets a request names, and
//! the address ranges of `allow_private`.
//!
//! Owns the grammar and matching only, all pure: no DNS, no sockets. A pattern is
//! `name[:port]`, `*.name[:port]` (any name strictly below `name`), an IPv4 literal or a
//! bracketed IPv6 literal, each with an optional port: none means the web ports 80 and 443,
//! `:N` that port only, `:*` any port. Names are compared lower-case without a trailing dot.
//! A name that a resolver would read as a number (`2130706433`, `0x7f.1`, `127.1`) is not a
//! name: it is refused as an unlisted IP literal, so no resolver ever gets to interpret it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest host name (RFC 1035, without the trailing dot).
const MAX_NAME: usize = 253;
const MAX_LABEL: usize = 63;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("`{0}`: empty pattern")]
    Empty(String),
    #[error("`{text}`: {why}")]
    Host { text: String, why: String },
    #[error("`{text}`: the port `{port}` is not 1-65535 or `*`")]
    Port { text: String, port: String },
    #[error("`{0}`: a CIDR range is `address/prefix`, e.g. `127.0.0.0/8` or `::1/128`")]
    Cidr(String),
}

/// What the host part of a target is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// Lower-case, no trailing dot, validated labels.
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => f.write_str(n),
            Self::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            Self::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

/// A host and port a confined process asked to reach.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    pub host: Host,
    pub port: u16,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl Target {
    /// Parses `host:port` (CONNECT's authority form; IPv6 in brackets).
    pub fn parse_authority(text: &str) -> Result<Self, PatternError> {
        let (host, port) = split_host_port(text)?;
        let port = match port {
            Some(p) => parse_port(text, p)?,
            None => {
                return Err(PatternError::Port {
                    text: text.into(),
                    port: String::new(),
                });
            }
        };
        Ok(Self {
            host: parse_host(text, host)?,
            port,
        })
    }

    /// Parses `host[:port]` with `default_port` when none is given (a URL's authority).
    pub fn parse_with_default(text: &str, default_port: u16) -> Result<Self, PatternError> {
        let (host, port) = split_host_port(text)?;
        let port = match port {
            Some(p) => parse_port(text, p)?,
            None => default_port,
        };
        Ok(Self {
            host: parse_host(text, host)?,
            port,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Exact(String),
    /// Any name ending in `.{suffix}` (not the suffix itself).
    Below(String),
    Ip(IpAddr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortMatch {
    /// No port written: 80 and 443.
    Web,
    One(u16),
    Any,
}

impl PortMatch {
    pub fn allows(self, port: u16) -> bool {
        match self {
            Self::Web => port == 80 || port == 443,
            Self::One(p) => p == port,
            Self::Any => true,
        }
    }
}

/// One entry of `allow_hosts` or `deny_hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    /// As written in the policy.
    pub text: String,
    host: HostMatch,
    pub ports: PortMatch,
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl HostPattern {
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(PatternError::Empty(text.into()));
        }
        let (host, port) = split_host_port(t)?;
        let ports = match port {
            None => PortMatch::Web,
            Some("*") => PortMatch::Any,
            Some(p) => PortMatch::One(parse_port(t, p)?),
        };
        let host = if let Some(rest) = host.strip_prefix("*.") {
            match parse_host(t, rest)? {
                Host::Name(n) => HostMatch::Below(n),
                Host::Ip(_) => {
                    return Err(PatternError::Host {
                        text: t.into(),
                        why: "a wildcard applies to names, not to IP addresses".into(),
                    });
                }
            }
        } else if host.contains('*') {
            return Err(PatternError::Host {
                text: t.into(),
                why: "`*` is only allowed as a whole first label (`*.example.org`)".into(),
            });
        } else {
            match parse_host(t, host)? {
                Host::Name(n) => HostMatch::Exact(n),
                Host::Ip(ip) => HostMatch::Ip(canonical_ip(ip)),
            }
        };
        Ok(Self {
            text: t.to_owned(),
            host,
            ports,
        })
    }

    /// Whether the host part matches (ports aside).
    pub fn matches_host(&self, host: &Host) -> bool {
        match (&self.host, host) {
            (HostMatch::Exact(p), Host::Name(n)) => p == n,
            (HostMatch::Below(suffix), Host::Name(n)) => n
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostMatch::Ip(p), Host::Ip(ip)) => *p == canonical_ip(*ip),
            _ => false,
        }
    }

    pub fn matches(&self, target: &Target) -> bool {
        self.matches_host(&target.host) && self.ports.allows(target.port)
    }

    pub fn is_ip(&self) -> bool {
        matches!(self.host, HostMatch::Ip(_))
    }

    /// Whether the pattern names a loopback host: `localhost` and names below it (RFC 6761),
    /// Debian's `ip6-localhost`/`ip6-loopback`, a loopback address, or the unspecified one
    /// (which connects to the local host). Inside a call those are the call's own loopback
    /// (`NO_PROXY` keeps clients off the proxy for them), so such an entry never applies to
    /// an ordinary client; `policy check` says so.
    pub fn names_loopback(&self) -> bool {
        let loopback_name =
            |n: &str| n == "localhost" || n.ends_with(".localhost") || n == "ip6-localhost";
        match &self.host {
            HostMatch::Exact(n) => loopback_name(n) || n == "ip6-loopback",
            HostMatch::Below(suffix) => loopback_name(suffix),
            HostMatch::Ip(ip) => ip.is_loopback() || ip.is_unspecified(),
        }
    }

    /// A target this pattern allows, and one of the same shape it does not (None when it
    /// allows every port of one address), for `policy check`.
    pub fn examples(&self) -> (String, Option<String>) {
        let port = match self.ports {
            PortMatch::Web | PortMatch::Any => 443,
            PortMatch::One(p) => p,
        };
        let other_port = match self.ports {
            PortMatch::Web => Some(8080),
            PortMatch::One(443) => Some(80),
            PortMatch::One(_) => Some(443),
            PortMatch::Any => None,
        };
        match &self.host {
            HostMatch::Exact(n) => (format!("{n}:{port}"), Some(format!("www.{n}:{port}"))),
            HostMatch::Below(s) => (format!("api.{s}:{port}"), Some(format!("{s}:{port}"))),
            HostMatch::Ip(ip) => {
                let h = Host::Ip(*ip).to_string();
                (
                    format!("{h}:{port}"),
                    other_port.map(|o| format!("{h}:{o}")),
                )
            }
        }
    }
}

/// IPv4-mapped IPv6 addresses are their IPv4 address (one address, one spelling).
pub(crate) fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

fn split_host_port(text: &str) -> Result<(&str, Option<&str>), PatternError> {
    if let Some(rest) = text.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else {
            return Err(PatternError::Host {
                text: text.into(),
                why: "an IPv6 address in brackets lacks its `]`".into(),
            });
        };
        return match after {
            "" => Ok((inside, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((inside, Some(port))),
                None => Err(PatternError::Host {
                    text: text.into(),
                    why: "only `:port` may follow `]`".into(),
                }),
            },
        };
    }
    match text.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => Err(PatternError::Host {
            text: text.into(),
            why: "an IPv6 address must be written in brackets, e.g. `[::1]:8080`".into(),
        }),
        Some((host, port)) => Ok((host, Some(port))),
        None => Ok((text, None)),
    }
}

fn parse_port(text: &str, port: &str) -> Result<u16, PatternError> {
    match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => Err(PatternError::Port {
            text: text.into(),
            port: port.into(),
        }),
    }
}

/// A host as a resolver must never see it misread: an IP literal (dotted-quad IPv4, or IPv6
/// from inside brackets) or a validated lower-case name.
fn parse_host(text: &str, host: &str) -> Result<Host, PatternError> {
    let bad = |why: &str| PatternError::Host {
        text: text.into(),
        why: why.into(),
    };
    if let Ok(v4) = host.parse::<Ipv4Addr>() {
        return Ok(Host::Ip(IpAddr::V4(v4)));
    }
    if let Ok(v6) = host.parse::<Ipv6Addr>() {
        return Ok(Host::Ip(IpAddr::V6(v6)));
    }
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if name.is_empty() {
        return Err(bad("the host is empty"));
    }
    if name.len() > MAX_NAME {
        return Err(bad("the name is longer than 253 characters"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(bad("the name has an empty label (`..`)"));
        }
        if label.len() > MAX_LABEL {
            return Err(bad("a label is longer than 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad(
                "a name has only letters, digits, `-` and `_` (internationalised names in \
                 their xn-- form)",
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(bad("a label cannot start or end with `-`"));
        }
    }
    let last = name.rsplit('.').next().unwrap_or_default();
    let numeric = last.bytes().all(|b| b.is_ascii_digit())
        || (last.len() > 2
            && last[..2].eq_ignore_ascii_case("0x")
            && last[2..].bytes().all(|b| b.is_ascii_hexdigit()));
    if numeric {
        return Err(bad(
            "this is a numeric address in a form resolvers read differently (write IPv4 as \
             four decimal numbers, e.g. 127.0.0.1)",
        ));
    }
    Ok(Host::Name(name))
}

/// One `allow_private` range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    base: IpAddr,
    prefix: u8,
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

impl Cidr {
    /// `address/prefix`; IPv4 ranges in IPv4 form (addresses are compared with IPv4-mapped
    /// IPv6 addresses already turned into IPv4).
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let bad = || PatternError::Cidr(text.into());
        let (addr, prefix_text) = text.trim().split_once('/').ok_or_else(bad)?;
        let base: IpAddr = addr.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix_text.parse().map_err(|_| bad())?;
        let max = if base.is_ipv4() { 32 } else { 128 };
        if prefix > max || prefix.to_string() != prefix_text {
            return Err(bad());
        }
        Ok(Self { base, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.base, canonical_ip(ip)) {
            (IpAddr::V4(base), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - self.prefix as u32).unwrap_or(0);
                u32::from(base) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(base), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - self.prefix as u32).unwrap_or(0);
                u128::from(base) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Why an address is not on the public internet, or None when it is. Checked on every
/// resolved address before a connection (the proxy connects to the address it checked).
pub(crate) fn non_public(ip: IpAddr) -> Option<&'static str> {
    match canonical_ip(ip) {
        IpAddr::V4(a) => {
            let o = a.octets();
            if a.is_loopback() {
                Some("loopback")
            } else if a.is_private() {
                Some("private")
            } else if a.is_link_local() {
                Some("link-local")
            } else if a.is_unspecified() || o[0] == 0 {
                Some("unspecified (this host)")
            } else if a.is_broadcast() || a.is_multicast() || o[0] >= 240 {
                Some("broadcast, multicast or reserved")
            } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
                Some("carrier-grade NAT (shared)")
            } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
                Some("IETF protocol assignments")
            } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
                Some("benchmarking")
            } else {
                None
            }
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            if a.is_loopback() {
                Some("loopback")
            } else if a.is_unspecified() {
                Some("unspecified (this host)")
            } else if (s[0] & 0xfe00) == 0xfc00 {
                Some("unique local (ULA)")
            } else if (s[0] & 0xffc0) == 0xfe80 {
                Some("link-local")
            } else if (s[0] & 0xff00) == 0xff00 {
                Some("multicast")
            } else if s[0] == 0x64 && s[1] == 0xff9b {
                // NAT64 embeds an IPv4 address, possibly a private one.
                Some("NAT64 (embeds an IPv4 address)")
            } else if s[0] == 0x2002 || (s[0] == 0x2001 && s[1] == 0) {
                Some("6to4 or Teredo (embeds an IPv4 address)")
            } else if s[..6] == [0, 0, 0, 0, 0, 0] {
                Some("IPv4-compatible (deprecated)")
            } else {
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Target {
        Target::parse_authority(s).unwrap()
    }

    #[test]
    fn exact_names_match_only_themselves_on_the_web_ports() {
        let p = HostPattern::parse("Example.ORG").unwrap();
        assert!(p.matches(&t("example.org:443")));
        assert!(p.matches(&t("EXAMPLE.org.:80")));
        assert!(!p.matches(&t("example.org:8080")));
        assert!(!p.matches(&t("www.example.org:443")));
        assert!(!p.matches(&t("example.org.evil.net:443")));
        assert!(!p.matches(&t("evilexample.org:443")));
    }

    #[test]
    fn wildcards_match_below_the_suffix_only() {
        let p = HostPattern::parse("*.example.net:443").unwrap();
        assert!(p.matches(&t("api.example.net:443")));
        assert!(p.matches(&t("a.b.example.net:443")));
        assert!(!p.matches(&t("example.net:443")));
        assert!(!p.matches(&t("badexample.net:443")));
        assert!(!p.matches(&t("api.example.net:80")));
        for bad in ["*example.net", "a.*.example.net", "*", "*.", "*.1.2.3.4"] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ports_none_one_or_any() {
        assert!(HostPattern::parse("h:*").unwrap().matches(&t("h:65535")));
        assert!(HostPattern::parse("h:8080").unwrap().matches(&t("h:8080")));
        assert!(!HostPattern::parse("h:8080").unwrap().matches(&t("h:443")));
        for bad in ["h:0", "h:65536", "h:+80", "h:", "h:8o"] {
            assert!(HostPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ip_literals_match_only_as_written_and_mapped_forms_are_one_address() {
        let p = HostPattern::parse("127.0.0.1:*").unwrap();
        assert!(p.is_ip());
        assert!(p.matches(&t("127.0.0.1:9")));
        assert!(p.matches(&t("[::ffff:127.0.0.1]:9")));
        assert!(!p.matches(&t("127.0.0.2:9")));
        let v6 = HostPattern::parse("[::1]:8080").unwrap();
        assert!(v6.matches(&t("[0:0::1]:8080")));
        assert!(HostPattern::parse("::1").is_err());
    }

    #[test]
    fn names_resolvers_would_read_as_numbers_are_refused() {
        for bad in [
            "2130706433:80",
            "0x7f000001:80",
            "127.1:80",
            "0x7f.1:80",
            "a.017:80",
        ] {
            let e = Target::parse_authority(bad).unwrap_err().to_string();
            assert!(e.contains("numeric"), "{bad}: {e}");
        }
        assert!(Target::parse_authority("1password.com:443").is_ok());
    }

    #[test]
    fn malformed_names_are_refused() {
        for bad in [
            "a..b:80",
            "-a.b:80",
            "a-.b:80",
            "a b:80",
            "a%2eb:80",
            "a/b:80",
            "a@b:80",
            ":80",
            "[::1:80",
            "[::1]x:80",
        ] {
            assert!(Target::parse_authority(bad).is_err(), "{bad}");
        }
        let long = format!("{}.org:80", "a".repeat(64));
        assert!(Target::parse_authority(&long).is_err());
    }

    #[test]
    fn cidr_ranges() {
        let c = Cidr::parse("127.0.0.0/8").unwrap();
        assert!(c.contains("127.1.2.3".parse().unwrap()));
        assert!(c.contains("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!c.contains("128.0.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let c6 = Cidr::parse("::1/128").unwrap();
        assert!(c6.contains("::1".parse().unwrap()));
        assert!(
            Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        for bad in ["127.0.0.0", "127.0.0.0/33", "x/8", "::1/129", "10.0.0.0/08"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn non_public_ranges() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:10.0.0.1",
            "::",
            "64:ff9b::a00:1",
            "224.0.0.1",
        ] {
            assert!(non_public(ip.parse().unwrap()).is_some(), "{ip}");
        }
        for ip in [
            "93.184.215.14",
            "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
            "8.8.8.8",
        ] {
            assert_eq!(non_public(ip.parse().unwrap()), None, "{ip}");
        }
    }
}
