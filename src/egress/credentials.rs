//! Which call a proxied connection belongs to: the token in its `Proxy-Authorization:
//! Basic` credentials (`cordon:<token>`, from the call's proxy URL).
//!
//! Owns the credentials' encoding (for clients: the doctor probe, tests, benches) and their
//! decoding, bounded and strict; the registry of tokens is `proxy`'s.

use super::http::RequestHead;

/// The user name in the proxy URL; the password is the call's token.
pub(crate) const PROXY_USER: &str = "cordon";

/// The token from `Proxy-Authorization: Basic base64(cordon:TOKEN)`.
pub(super) fn token(head: &RequestHead) -> Option<String> {
    token_of(head.single_header("proxy-authorization").ok()??)
}

/// The token in the `Proxy-Authorization` field of a head still arriving: the first such
/// field among its complete lines (the request line excluded). Only says whose connection it
/// is while it waits for the rest; the complete head is judged by [`token`] alone.
pub(super) fn token_in_partial(buf: &[u8]) -> Option<String> {
    let buf = &buf[..buf.len().min(crate::egress::http::MAX_HEAD)];
    let complete = buf.len() - buf.iter().rev().position(|&b| b == b'\n')?;
    buf[..complete]
        .split(|&b| b == b'\n')
        .skip(1)
        .filter_map(|line| line.strip_suffix(b"\r"))
        .find_map(|line| {
            let colon = line.iter().position(|&b| b == b':')?;
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            name.eq_ignore_ascii_case(b"proxy-authorization")
                .then(|| std::str::from_utf8(value).ok())
                .flatten()
        })
        .and_then(|value| token_of(value.trim_matches(|c| c == ' ' || c == '\t')))
}

fn token_of(value: &str) -> Option<String> {
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64_decode(encoded.trim())?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, token) = text.split_once(':')?;
    (user == PROXY_USER && token.len() == 32).then(|| token.to_owned())
}

/// The `Proxy-Authorization` value a client of the proxy sends for the userinfo of its proxy
/// URL (`user:password`): `Basic base64(user:password)`.
pub fn basic_authorization(userinfo: &str) -> String {
    format!("Basic {}", base64_encode(userinfo.as_bytes()))
}

pub(super) fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    base64_decode_within(s, 256)
}

/// Strict standard base64 of at most `max` characters (the `Authorization: Basic` of an
/// intercepted request carries a credential, longer than the proxy's own token).
pub(super) fn base64_decode_within(s: &str, max: usize) -> Option<Vec<u8>> {
    if s.len() > max || !s.len().is_multiple_of(4) {
        return None;
    }
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for (i, quad) in bytes.chunks(4).enumerate() {
        let last = i == bytes.len() / 4 - 1;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let three = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&three[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_through_the_strict_decoder() {
        for text in [
            "",
            "a",
            "ab",
            "abc",
            "cordon:0123456789abcdef0123456789abcdef",
        ] {
            let encoded = base64_encode(text.as_bytes());
            assert_eq!(base64_decode(&encoded).as_deref(), Some(text.as_bytes()));
        }
        assert_eq!(basic_authorization("cordon:t"), "Basic Y29yZG9uOnQ=");
    }

    #[test]
    fn credentials_are_found_in_a_head_still_arriving() {
        let auth = basic_authorization("cordon:0123456789abcdef0123456789abcdef");
        let head = format!("CONNECT h:443 HTTP/1.1\r\nHost: h\r\nproxy-AUTHORIZATION: {auth}\r\n");
        assert_eq!(
            token_in_partial(head.as_bytes()).as_deref(),
            Some("0123456789abcdef0123456789abcdef")
        );
        // The field's line is not complete yet; on the request line it is not a field.
        assert_eq!(token_in_partial(&head.as_bytes()[..head.len() - 2]), None);
        let on_request_line = format!("GET http://h/{auth} HTTP/1.1\r\n");
        assert_eq!(token_in_partial(on_request_line.as_bytes()), None);
        assert_eq!(
            token_in_partial(b"CONNECT h:443 HTTP/1.1\r\nProxy-Authorization: Basic !!\r\n"),
            None
        );
    }

    #[test]
    fn basic_credentials_decode() {
        assert_eq!(base64_decode("Y29yZG9uOmFi").unwrap(), b"cordon:ab");
        assert_eq!(base64_decode("YQ==").unwrap(), b"a");
        assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
        for bad in ["YQ=", "Y===", "YQ==YQ==", "Y$==", ""] {
            assert!(
                base64_decode(bad).is_none_or(|v| v.is_empty() && bad.is_empty()),
                "{bad}"
            );
        }
    }
}
