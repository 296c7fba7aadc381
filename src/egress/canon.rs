//! The one spelling of a request path that the proxy's rules, its push detection and the
//! upstream all read the same way.
//!
//! Owns [`canonical`]: a path (the query already dropped) decoded once, as a server that
//! normalises would read it: percent-encoded unreserved characters decoded (`%6B` is `k`),
//! the hex of every other escape in upper case, duplicate slashes merged, and dot segments
//! removed, including a segment that is a dot segment before its first `;` (`..;`, `.;`:
//! Tomcat, Jetty and Spring drop path parameters before they resolve dots). What no single
//! reading can settle is refused outright instead of guessed at: an encoded slash, backslash,
//! NUL or percent sign (a server that decodes twice reads `%252e` as `.`), an escape that is
//! not two hex digits, an encoded byte sequence that is not UTF-8 (an overlong `%c0%ae` is a
//! dot to a lax decoder), a raw backslash or a raw non-ASCII byte. The proxy refuses a path
//! whose canonical form differs from its spelling on hosts whose rules or pushes it judges
//! (`intercept`), so what was judged is what is sent. Pure; fuzzed by
//! `fuzz/fuzz_targets/intercept_bytes.rs` (idempotence, and that an accepted canonical path
//! is its own canonical form).

use std::fmt;

/// Why a path has no one reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathFault {
    /// It does not start with `/`.
    NotAbsolute,
    /// `%` not followed by two hex digits.
    BadEscape,
    /// `%2F` or `%5C`: a slash a server may or may not split on.
    EncodedSlash,
    /// `%25`: a server that decodes twice reads the next escape.
    EncodedPercent,
    /// `%00`.
    EncodedNul,
    /// Encoded bytes that are not UTF-8 (overlong forms such as `%c0%ae` included).
    NotUtf8,
    /// A raw `\`, read as `/` by some servers.
    Backslash,
    /// A raw byte outside printable ASCII.
    RawByte,
}

impl fmt::Display for PathFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotAbsolute => "does not start with `/`",
            Self::BadEscape => "has a `%` not followed by two hexadecimal digits",
            Self::EncodedSlash => "has an encoded slash (%2F or %5C)",
            Self::EncodedPercent => {
                "has an encoded percent sign (%25), which a server that decodes twice reads as \
                 another character"
            }
            Self::EncodedNul => "has an encoded NUL (%00)",
            Self::NotUtf8 => {
                "has percent-encoded bytes that are not UTF-8 (an overlong form such as %c0%ae \
                 is a dot to a lax decoder)"
            }
            Self::Backslash => "has a backslash",
            Self::RawByte => "has a byte outside printable ASCII",
        })
    }
}

/// `path`'s canonical form (see the module), or why it has none. `*` (of `OPTIONS *`) is its
/// own canonical form.
pub fn canonical(path: &str) -> Result<String, PathFault> {
    if path == "*" {
        return Ok(path.to_owned());
    }
    if !path.starts_with('/') {
        return Err(PathFault::NotAbsolute);
    }
    let decoded = decode_unreserved(path.as_bytes())?;
    Ok(remove_dots(&decoded))
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Decodes escapes of unreserved characters, upper-cases the rest, and checks that every run
/// of encoded bytes is UTF-8.
fn decode_unreserved(raw: &[u8]) -> Result<String, PathFault> {
    let mut out = String::with_capacity(raw.len());
    // The bytes of the current run of escapes that stay encoded, for the UTF-8 check.
    let mut run: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'%' {
            let (Some(hi), Some(lo)) = (
                raw.get(i + 1).copied().and_then(hex),
                raw.get(i + 2).copied().and_then(hex),
            ) else {
                return Err(PathFault::BadEscape);
            };
            let byte = hi << 4 | lo;
            match byte {
                b'/' | b'\\' => return Err(PathFault::EncodedSlash),
                b'%' => return Err(PathFault::EncodedPercent),
                0 => return Err(PathFault::EncodedNul),
                _ => {}
            }
            if unreserved(byte) {
                check_run(&mut run)?;
                out.push(char::from(byte));
            } else {
                run.push(byte);
                out.push('%');
                out.push(char::from(b"0123456789ABCDEF"[usize::from(hi)]));
                out.push(char::from(b"0123456789ABCDEF"[usize::from(lo)]));
            }
            i += 3;
            continue;
        }
        check_run(&mut run)?;
        if b == b'\\' {
            return Err(PathFault::Backslash);
        }
        if !b.is_ascii_graphic() {
            return Err(PathFault::RawByte);
        }
        out.push(char::from(b));
        i += 1;
    }
    check_run(&mut run)?;
    Ok(out)
}

fn check_run(run: &mut Vec<u8>) -> Result<(), PathFault> {
    if !run.is_empty() && std::str::from_utf8(run).is_err() {
        return Err(PathFault::NotUtf8);
    }
    run.clear();
    Ok(())
}

/// A segment's name before its path parameters (`..;jsessionid=1` is `..`).
fn bare(segment: &str) -> &str {
    segment.split(';').next().unwrap_or_default()
}

/// Empty segments merged, `.` dropped and `..` resolved (never above the root), as RFC 3986
/// section 5.2.4 does, with `;`-parameters ignored for the dot test.
fn remove_dots(path: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path[1..].split('/').collect();
    let last = segments.len() - 1;
    let mut trailing_slash = false;
    for (i, segment) in segments.iter().enumerate() {
        match bare(segment) {
            "." => trailing_slash = i == last,
            ".." => {
                kept.pop();
                trailing_slash = i == last;
            }
            "" if segment.is_empty() => trailing_slash = i == last,
            _ => {
                kept.push(segment);
                trailing_slash = false;
            }
        }
    }
    let mut out = String::with_capacity(path.len());
    for segment in &kept {
        out.push('/');
        out.push_str(segment);
    }
    if trailing_slash || out.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canonical_path_is_its_own_form() {
        for p in [
            "/",
            "/user",
            "/repos/acme/x/",
            "/a;b=1/c",
            "/caf%C3%A9",
            "*",
            "/a.b/c~d",
        ] {
            assert_eq!(canonical(p).as_deref(), Ok(p), "{p}");
        }
    }

    #[test]
    fn every_other_spelling_is_read_as_a_server_reads_it() {
        for (spelled, read) in [
            ("/r.git/git-receive-pac%6B", "/r.git/git-receive-pack"),
            ("/public/..;/admin", "/admin"),
            ("/public/.;/x", "/public/x"),
            ("/public/..;jsessionid=1/admin", "/admin"),
            ("/a/../../b", "/b"),
            ("/a/./b", "/a/b"),
            ("//a///b", "/a/b"),
            ("/a/%2e%2e/b", "/b"),
            ("/a/..", "/"),
            ("/a/b/.", "/a/b/"),
            ("/caf%c3%a9", "/caf%C3%A9"),
        ] {
            assert_eq!(canonical(spelled).as_deref(), Ok(read), "{spelled}");
        }
    }

    #[test]
    fn what_has_no_one_reading_is_refused() {
        for (p, fault) in [
            ("/a%2Fb", PathFault::EncodedSlash),
            ("/a%5cb", PathFault::EncodedSlash),
            ("/public/%252e%252e/admin", PathFault::EncodedPercent),
            ("/public/%c0%ae%c0%ae/admin", PathFault::NotUtf8),
            ("/a%00", PathFault::EncodedNul),
            ("/a%zz", PathFault::BadEscape),
            ("/a%4", PathFault::BadEscape),
            ("/a\\b", PathFault::Backslash),
            ("x", PathFault::NotAbsolute),
        ] {
            assert_eq!(canonical(p), Err(fault), "{p}");
        }
    }
}
