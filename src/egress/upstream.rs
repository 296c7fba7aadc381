//! Every string the proxy makes from what an intercepted upstream sent: the body of its own
//! `502`, the connection record's `note`, and so the audit record and any log line made from
//! them.
//!
//! Owns [`describe`], the one function that turns an upstream's misbehaviour into words, and
//! [`Fault`], what it is given: kinds, counts and lengths only, never a byte the upstream
//! chose. An upstream that a request carried a credential to may put that credential
//! anywhere in its answer (a header name, a status line, a TLS alert's context), so nothing
//! of the answer may be quoted: errors say what was wrong and how long it was
//! (`malformed header name, 17 bytes`). What the upstream sends on to the client is relayed,
//! scrubbed, by `intercept`; this is only about the proxy's own words. Fuzzed by
//! `fuzz/fuzz_targets/intercept_bytes.rs`: the description of any response head does not
//! change when its letters do, and never holds a planted credential.

use super::http::{self, Malformed};
use std::io;

/// What went wrong with an upstream, in terms that carry none of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The response head did not parse.
    Head(Malformed),
    /// It closed the connection before a whole response head.
    ClosedBeforeHead,
    /// Its TLS handshake or certificate failed.
    Tls(TlsFault),
    /// Reading its response failed, of this kind.
    Read(io::ErrorKind),
    /// It answered a request that carried a credential with a `Content-Encoding` (a value
    /// this many bytes long) although the proxy asked for `identity`.
    Encoded { len: usize },
    /// It framed its response with a `Transfer-Encoding` other than a single `chunked` (a
    /// value this many bytes long).
    Framing { len: usize },
    /// Its chunked body is malformed.
    Chunked,
}

/// Why a TLS connection to an upstream failed, by category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFault {
    UnknownIssuer,
    Expired,
    NotYetValid,
    WrongName,
    BadSignature,
    Revoked,
    OtherCertificate,
    Alert,
    Handshake,
}

impl TlsFault {
    /// The category of a failed `tokio_rustls` connect.
    pub fn of(e: &io::Error) -> Self {
        use rustls::CertificateError as C;
        match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::InvalidCertificate(c)) => match c {
                C::UnknownIssuer => Self::UnknownIssuer,
                C::Expired | C::ExpiredContext { .. } => Self::Expired,
                C::NotValidYet | C::NotValidYetContext { .. } => Self::NotYetValid,
                C::NotValidForName | C::NotValidForNameContext { .. } => Self::WrongName,
                C::BadSignature => Self::BadSignature,
                C::Revoked => Self::Revoked,
                _ => Self::OtherCertificate,
            },
            Some(rustls::Error::AlertReceived(_)) => Self::Alert,
            _ => Self::Handshake,
        }
    }

    fn words(self) -> &'static str {
        match self {
            Self::UnknownIssuer => "its certificate is signed by no trusted root",
            Self::Expired => "its certificate has expired",
            Self::NotYetValid => "its certificate is not valid yet",
            Self::WrongName => "its certificate is not valid for this name",
            Self::BadSignature => "its certificate has a bad signature",
            Self::Revoked => "its certificate is revoked",
            Self::OtherCertificate => "its certificate was rejected",
            Self::Alert => "it ended the handshake with a TLS alert",
            Self::Handshake => "the TLS handshake failed",
        }
    }
}

/// The words for `fault` at `upstream` (the target the client named, which is the client's
/// text, not the upstream's).
pub fn describe(upstream: &str, fault: &Fault) -> String {
    match fault {
        Fault::Head(m) => format!(
            "the upstream {upstream} sent a malformed response head ({}); nothing of it is \
             quoted, since it may hold a credential",
            describe_malformed(m)
        ),
        Fault::ClosedBeforeHead => {
            format!("the upstream {upstream} closed the connection before its response head")
        }
        Fault::Tls(t) => format!(
            "the upstream {upstream} failed TLS verification against the system roots and \
             [network].extra_roots: {}; cordon never falls back to an unverified connection",
            t.words()
        ),
        Fault::Read(kind) => format!(
            "the response from {upstream} ended with an error ({})",
            read_words(*kind)
        ),
        Fault::Encoded { len } => format!(
            "the upstream {upstream} answered a request that carried a credential with a \
             Content-Encoding ({len} bytes) although cordon asked for identity; an encoded \
             answer cannot be checked for an echo of the credential, so it is not passed on"
        ),
        Fault::Framing { len } => format!(
            "the upstream {upstream} framed its response with a Transfer-Encoding other than \
             `chunked` ({len} bytes), which cordon cannot check; it is not passed on"
        ),
        Fault::Chunked => format!("the upstream {upstream} sent a malformed chunked body"),
    }
}

fn describe_malformed(m: &Malformed) -> String {
    // `Malformed` holds kinds and lengths only; its words are fixed text and numbers.
    m.to_string()
}

fn read_words(kind: io::ErrorKind) -> &'static str {
    match kind {
        io::ErrorKind::ConnectionReset => "connection reset",
        io::ErrorKind::ConnectionAborted => "connection aborted",
        io::ErrorKind::TimedOut => "timed out",
        io::ErrorKind::InvalidData => "invalid TLS data",
        io::ErrorKind::BrokenPipe => "broken pipe",
        _ => "read error",
    }
}

/// A response head at the start of `buf`, or the [`Fault`] that describes why not
/// (`Ok(None)`: not complete yet).
pub fn parse_head(buf: &[u8]) -> Result<Option<http::ResponseHead>, Fault> {
    http::parse_response_head(buf).map_err(Fault::Head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_head_is_described_by_kind_and_length_never_quoted() {
        let secret = "ghp_s3cretS3CRETs3cret";
        let head = format!("HTTP/1.1 200 OK\r\nX-{secret}@: 1\r\n\r\n");
        let fault = parse_head(head.as_bytes()).unwrap_err();
        let text = describe("api.example:443", &fault);
        assert!(!text.contains(secret), "{text}");
        assert!(text.contains("malformed header name, 25 bytes"), "{text}");
        for bad in [
            "HTTP/1.1 2000 OK\r\n\r\n".to_owned(),
            format!("HTTP/1.1 200 {secret}\x01\r\n\r\n"),
            format!("HTTP/1.1 200 OK\r\nX: {secret}\x01\r\n\r\n"),
            format!("HTTP/1.1 200 OK\r\n{secret}\r\n\r\n"),
            format!("HTTP/1.1 200 OK\r\n {secret}\r\n\r\n"),
        ] {
            let text = describe("h:1", &parse_head(bad.as_bytes()).unwrap_err());
            assert!(!text.contains(secret) && !text.contains("s3cret"), "{text}");
        }
    }
}
