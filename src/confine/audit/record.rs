//! Reading one Landlock audit record's text.
//!
//! Owns the two record shapes Linux 6.15+ writes for Landlock (`AUDIT_LANDLOCK_ACCESS`,
//! `AUDIT_LANDLOCK_DOMAIN`) and the barrier cordon sends itself, parsed from the text after
//! `audit(TIME:SERIAL): `. The kernel writes every value a process controls (a path) quoted
//! when it is plain and hex-encoded otherwise, so a file name cannot smuggle in a field of its
//! own; values are still bounded here, because the names are the confined process's choice.

pub(crate) const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
pub(crate) const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;

/// Longest path kept from a record (the kernel's own `PATH_MAX`).
const MAX_PATH: usize = 4096;
/// Most blockers one record can name (every filesystem and network right is fewer).
const MAX_BLOCKERS: usize = 24;

/// A denied access, as the kernel recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Access {
    pub serial: u64,
    pub domain: u64,
    /// The rights missing, as the kernel names them (`fs.read_file`, `net.connect_tcp`,
    /// `scope.signal`, …).
    pub blockers: Vec<String>,
    /// The file or directory (for `fs.make_*` and `fs.remove_*`: the directory the entry is
    /// in), as seen from the denied process's root.
    pub path: Option<String>,
    /// The TCP port of a `net.*` denial.
    pub port: Option<u16>,
    /// The address of a `net.connect_tcp` denial.
    pub address: Option<String>,
}

/// What a domain record says: the process that created the domain, or that it is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Domain {
    Allocated { serial: u64, domain: u64, pid: u32 },
    Deallocated { domain: u64 },
}

/// One record of interest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Record {
    Access(Access),
    Domain(Domain),
    /// cordon's own barrier message (see `super::CallWatch::finish`): the sending
    /// server's pid and the barrier's number.
    Barrier {
        pid: u32,
        number: u64,
    },
}

/// The domain of an `AUDIT_LANDLOCK_ACCESS` payload, read without parsing the rest: the
/// kernel writes `domain=` as the first field after the header, in hex. For the reader's
/// fast path, which drops the records of domains it keeps nothing more of (another
/// server's call flooding the log reaches every server's reader) before the full parse.
pub(crate) fn access_domain(payload: &[u8]) -> Option<u64> {
    let start = payload.windows(3).position(|w| w == b"): ")? + 3;
    let rest = payload.get(start..)?.strip_prefix(b"domain=")?;
    let hex = rest
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .map_or(rest, |end| &rest[..end]);
    if hex.is_empty() || hex.len() > 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// Parses the payload of a message of type `kind`; None for any other record.
pub(crate) fn parse(kind: u16, payload: &[u8]) -> Option<Record> {
    let text = std::str::from_utf8(payload.split(|&b| b == 0).next()?).ok()?;
    let (serial, body) = header(text)?;
    match kind {
        AUDIT_LANDLOCK_ACCESS => {
            let fields = fields(body);
            let get = |k: &str| fields.iter().find(|(key, _)| *key == k).map(|(_, v)| v);
            let domain = u64::from_str_radix(get("domain")?, 16).ok()?;
            let blockers = get("blockers")?
                .split(',')
                .filter(|b| !b.is_empty())
                .take(MAX_BLOCKERS)
                .map(str::to_owned)
                .collect();
            let path = get("path").map(|p| {
                let mut p = p.clone();
                if p.len() > MAX_PATH {
                    let cut = (0..=MAX_PATH).rev().find(|&i| p.is_char_boundary(i));
                    p.truncate(cut.unwrap_or(0));
                }
                p
            });
            let port = get("dest")
                .or_else(|| get("dport"))
                .or_else(|| get("src"))
                .or_else(|| get("lport"))
                .and_then(|p| p.parse().ok());
            let address = get("daddr").or_else(|| get("saddr")).cloned();
            Some(Record::Access(Access {
                serial,
                domain,
                blockers,
                path,
                port,
                address,
            }))
        }
        AUDIT_LANDLOCK_DOMAIN => {
            let fields = fields(body);
            let get = |k: &str| fields.iter().find(|(key, _)| *key == k).map(|(_, v)| v);
            let domain = u64::from_str_radix(get("domain")?, 16).ok()?;
            match get("status")?.as_str() {
                "allocated" => Some(Record::Domain(Domain::Allocated {
                    serial,
                    domain,
                    pid: get("pid")?.parse().ok()?,
                })),
                "deallocated" => Some(Record::Domain(Domain::Deallocated { domain })),
                _ => None,
            }
        }
        super::netlink::AUDIT_TRUSTED_APP => {
            let start = body.find(super::BARRIER_PREFIX)? + super::BARRIER_PREFIX.len();
            let digits =
                |s: &str| -> String { s.chars().take_while(char::is_ascii_digit).collect() };
            let pid = digits(&body[start..]);
            let number = digits(body[start + pid.len()..].strip_prefix('-')?);
            Some(Record::Barrier {
                pid: pid.parse().ok()?,
                number: number.parse().ok()?,
            })
        }
        _ => None,
    }
}

/// `audit(1796163057.611:178): rest` → (178, rest).
fn header(text: &str) -> Option<(u64, &str)> {
    let rest = text.strip_prefix("audit(")?;
    let (stamp, body) = rest.split_once("): ")?;
    let serial = stamp.rsplit_once(':')?.1.parse().ok()?;
    Some((serial, body))
}

/// `k=v k="quoted" k=48455820` → pairs, quoted values unquoted and hex values (what the
/// kernel writes for a value with a space, quote or control character) decoded.
fn fields(body: &str) -> Vec<(&str, String)> {
    let mut out = Vec::new();
    let mut rest = body.trim_start();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else { break };
        let key = &rest[..eq];
        let after = &rest[eq + 1..];
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.find('"') {
                Some(end) => (quoted[..end].to_owned(), &quoted[end + 1..]),
                None => (quoted.to_owned(), ""),
            }
        } else {
            let end = after.find(' ').unwrap_or(after.len());
            let raw = &after[..end];
            // Only a path-like value is ever hex-encoded; numbers and names stay as written.
            let value = if matches!(key, "path" | "name" | "exe" | "comm") {
                decode_hex(raw).unwrap_or_else(|| raw.to_owned())
            } else {
                raw.to_owned()
            };
            (value, &after[end..])
        };
        if !key.contains(' ') {
            out.push((key, value));
        }
        rest = next.trim_start();
    }
    out
}

fn decode_hex(raw: &str) -> Option<String> {
    if raw.is_empty() || !raw.len().is_multiple_of(2) || !raw.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return None;
    }
    let bytes: Vec<u8> = (0..raw.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&raw[i..i + 2], 16).ok())
        .collect::<Option<_>>()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_records_this_kernel_writes() {
        let access = parse(
            AUDIT_LANDLOCK_ACCESS,
            b"audit(1796163057.611:181): domain=13e30c8b2 blockers=fs.execute,fs.read_file \
              path=\"/tmp/kprobe/true_copy\" dev=\"vda\" ino=10035238",
        );
        assert_eq!(
            access,
            Some(Record::Access(Access {
                serial: 181,
                domain: 0x13e30c8b2,
                blockers: vec!["fs.execute".into(), "fs.read_file".into()],
                path: Some("/tmp/kprobe/true_copy".into()),
                port: None,
                address: None,
            }))
        );
        let net = parse(
            AUDIT_LANDLOCK_ACCESS,
            b"audit(1796163057.615:183): domain=13e30c8b2 blockers=net.connect_tcp \
              daddr=127.0.0.1 dest=9",
        );
        let Some(Record::Access(net)) = net else {
            panic!("{net:?}")
        };
        assert_eq!(
            (net.port, net.address.as_deref()),
            (Some(9), Some("127.0.0.1"))
        );
        let domain = parse(
            AUDIT_LANDLOCK_DOMAIN,
            b"audit(1796163057.611:178): domain=13e30c8b2 status=allocated mode=enforcing \
              pid=10466 uid=0 exe=\"/usr/bin/python3\" comm=\"python3\"",
        );
        assert_eq!(
            domain,
            Some(Record::Domain(Domain::Allocated {
                serial: 178,
                domain: 0x13e30c8b2,
                pid: 10466
            }))
        );
        assert_eq!(
            parse(
                AUDIT_LANDLOCK_DOMAIN,
                b"audit(1.2:184): domain=13e30c8b2 status=deallocated denials=6"
            ),
            Some(Record::Domain(Domain::Deallocated {
                domain: 0x13e30c8b2
            }))
        );
    }

    #[test]
    fn the_fast_path_reads_the_domain_of_an_access_record_only() {
        let access = b"audit(1796163057.611:181): domain=13e30c8b2 blockers=fs.read_file \
                       path=\"/etc/passwd\" dev=\"vda\" ino=1";
        assert_eq!(access_domain(access), Some(0x13e30c8b2));
        let full = parse(AUDIT_LANDLOCK_ACCESS, access);
        assert!(matches!(full, Some(Record::Access(a)) if a.domain == 0x13e30c8b2));
        // A `domain=` anywhere but first is not read (a path is the process's choice).
        assert_eq!(
            access_domain(b"audit(1.2:3): blockers=fs.read_file path=\" domain=ff\""),
            None
        );
        assert_eq!(access_domain(b"audit(1.2:3): domain= blockers=x"), None);
        assert_eq!(
            access_domain(b"audit(1.2:3): domain=11112222333344445 b=x"),
            None
        );
    }

    #[test]
    fn a_hostile_file_name_stays_one_value() {
        // `a b" domain=1 x="` hex-encoded, as the kernel writes a name with a space or quote.
        let name = "a b\" domain=1 x=\"";
        let hex: String = name.bytes().map(|b| format!("{b:02X}")).collect();
        let text = format!("audit(1.2:3): domain=ff blockers=fs.read_file path={hex} dev=\"x\"");
        let Some(Record::Access(a)) = parse(AUDIT_LANDLOCK_ACCESS, text.as_bytes()) else {
            panic!("not parsed")
        };
        assert_eq!(a.domain, 0xff);
        assert_eq!(a.path.as_deref(), Some(name));
    }

    #[test]
    fn reads_the_barrier_as_the_kernel_wraps_it() {
        let text = format!(
            "audit(1.2:9): pid=77 uid=0 auid=4294967295 ses=4294967295 msg='{}77-12'",
            super::super::BARRIER_PREFIX
        );
        assert_eq!(
            parse(super::super::netlink::AUDIT_TRUSTED_APP, text.as_bytes()),
            Some(Record::Barrier {
                pid: 77,
                number: 12
            })
        );
    }

    #[test]
    fn other_records_and_garbage_are_ignored() {
        assert_eq!(parse(1300, b"audit(1.2:3): arch=c000003e"), None);
        assert_eq!(parse(AUDIT_LANDLOCK_ACCESS, b"garbage"), None);
        assert_eq!(
            parse(AUDIT_LANDLOCK_ACCESS, b"audit(1.2:3): blockers=x"),
            None
        );
        assert_eq!(parse(AUDIT_LANDLOCK_DOMAIN, &[0xff, 0xfe]), None);
    }
}
