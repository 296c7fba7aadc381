//! Fuzzes what the egress proxy reads from a confined client: the request head parser, the
//! head it forwards in its place, the request line read alone, chunked-body framing, and the host-pattern grammar.
//! Invariants: nothing panics; an accepted head lies within the bounds; a target prints as
//! text that parses back to itself; the forwarded head carries no proxy credentials and ends
//! exactly once; the chunked framer consumes the same bytes however its input is split; a
//! pattern's own "allowed" example matches it.
#![no_main]

use cordon::testing::egress::http::{self, ChunkedEnd, MAX_HEAD, MAX_HEADERS, Request};
use cordon::testing::egress::pattern::{HostPattern, Target};
use libfuzzer_sys::fuzz_target;

fn check_target(t: &Target) {
    let again = Target::parse_authority(&t.to_string()).expect("a target's text parses");
    assert_eq!(&again, t);
}

fuzz_target!(|data: &[u8]| {
    // The request line read alone (for the record of a head that never completed) never
    // panics, and agrees with the whole head whenever that parses.
    let line = http::parse_request_line(data);
    if let Ok(Some(head)) = http::parse_head(data) {
        assert_eq!(line.as_ref(), Some(&head.request));
        assert!(head.len <= data.len() && head.len <= MAX_HEAD);
        assert!(head.headers.len() <= MAX_HEADERS);
        match &head.request {
            Request::Connect { target } => check_target(target),
            Request::Forward { target, path, .. } => {
                check_target(target);
                assert!(path.starts_with('/'));
                if let Ok(Some(host)) = head.single_header("host")
                    && http::host_matches(host, target)
                {
                    assert_eq!(&Target::parse_with_default(host.trim(), 80).unwrap(), target);
                }
                let out = head.forwarded().expect("a plain request forwards");
                let text = String::from_utf8(out).expect("forwarded heads are UTF-8");
                // A field *named* Proxy-Authorization never leaves; the words may appear
                // inside another field's value, which is the client's own text.
                assert!(
                    !text.split("\r\n").skip(1).any(|line| line
                        .split_once(':')
                        .is_some_and(|(name, _)| name.eq_ignore_ascii_case("proxy-authorization"))),
                    "{text:?}"
                );
                assert!(text.ends_with("Connection: close\r\n\r\n"));
                assert_eq!(text.matches("\r\n\r\n").count(), 1, "{text:?}");
            }
        }
        let _ = head.body();
        let rest = &data[head.len..];
        let mut whole = ChunkedEnd::default();
        let at_once = whole.feed(rest);
        let split = rest.first().map_or(0, |&b| b as usize % (rest.len() + 1));
        let mut parts = ChunkedEnd::default();
        let in_two = parts.feed(&rest[..split]).and_then(|a| {
            if parts.is_done() {
                Ok(a)
            } else {
                parts.feed(&rest[split..]).map(|b| a + b)
            }
        });
        match (at_once, in_two) {
            (Ok(a), Ok(b)) => {
                assert!(a <= rest.len());
                assert_eq!(a, b);
                assert_eq!(whole.is_done(), parts.is_done());
            }
            (Err(_), Err(_)) => {}
            (a, b) => panic!("split changed the outcome: {a:?} vs {b:?}"),
        }
    }
    if let Ok(text) = std::str::from_utf8(data)
        && let Some(line) = text.lines().next()
        && let Ok(pattern) = HostPattern::parse(line)
    {
        let (allowed, _) = pattern.examples();
        let target = Target::parse_authority(&allowed).expect("an example is a target");
        assert!(pattern.matches(&target), "{line:?} does not match its example {allowed}");
    }
});
