//! The one HTTP/1.x request head the proxy reads from a confined client, parsed strictly and
//! within bounds; and the head it forwards in its place.
//!
//! Owns parsing and re-serialising only (pure, no I/O; `fuzz/fuzz_targets/proxy_request.rs`
//! feeds it hostile bytes). The input is the confined side's: every line ends in CRLF, header
//! names are tokens, values carry no control characters, there is no obsolete line folding,
//! and the head as a whole stays under [`MAX_HEAD`] with at most [`MAX_HEADERS`] fields.
//! Anything else is an error naming what was wrong, never a guess.

use super::pattern::{PatternError, Target};

/// Largest request head (request line and headers) accepted.
pub const MAX_HEAD: usize = 16 * 1024;
/// Most header fields in one head.
pub const MAX_HEADERS: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("the request head is larger than {MAX_HEAD} bytes")]
    TooLarge,
    #[error("the request has more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    #[error("malformed request line: {0}")]
    RequestLine(String),
    #[error("malformed header field: {0}")]
    Header(String),
    #[error("the request target: {0}")]
    Target(String),
    /// The head's grammar, shared with responses: described, never quoted.
    #[error("malformed request head: {0}")]
    Malformed(Malformed),
}

/// What is wrong with a head's lines, by kind and size only: it holds no byte of the head, so
/// neither a request's refusal nor (through `upstream::describe`) a response's can quote one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    TooLarge,
    TooManyFields,
    /// A line that ends in a bare LF, or holds a CR elsewhere.
    LineEnd,
    /// The first line has a byte outside printable ASCII.
    FirstLine,
    /// A response's first line is not `HTTP/1.x NNN reason`.
    StatusLine,
    Folding,
    /// A field line without `:`, this long.
    NoColon {
        len: usize,
    },
    /// A field name that is empty or not a token, this long.
    FieldName {
        len: usize,
    },
    /// A control character in the value of a field whose name is this long.
    ControlInValue {
        name_len: usize,
    },
    /// A value that is not UTF-8, of a field whose name is this long.
    ValueNotUtf8 {
        name_len: usize,
    },
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge => write!(f, "the head is larger than {MAX_HEAD} bytes"),
            Self::TooManyFields => write!(f, "more than {MAX_HEADERS} header fields"),
            Self::LineEnd => f.write_str("a line that does not end in CRLF"),
            Self::FirstLine => f.write_str("a first line with bytes outside printable ASCII"),
            Self::StatusLine => f.write_str("a status line that is not `HTTP/1.x NNN reason`"),
            Self::Folding => f.write_str("obsolete line folding"),
            Self::NoColon { len } => write!(f, "a field line without `:`, {len} bytes"),
            Self::FieldName { len } => write!(f, "malformed header name, {len} bytes"),
            Self::ControlInValue { name_len } => write!(
                f,
                "a control character in the value of a field whose name is {name_len} bytes"
            ),
            Self::ValueNotUtf8 { name_len } => write!(
                f,
                "a value that is not UTF-8, of a field whose name is {name_len} bytes"
            ),
        }
    }
}

impl From<Malformed> for HeadError {
    fn from(m: Malformed) -> Self {
        match m {
            Malformed::TooLarge => Self::TooLarge,
            Malformed::TooManyFields => Self::TooManyHeaders,
            other => Self::Malformed(other),
        }
    }
}

impl From<PatternError> for HeadError {
    fn from(e: PatternError) -> Self {
        Self::Target(e.to_string())
    }
}

/// What the client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `CONNECT host:port` (a tunnel, usually TLS).
    Connect { target: Target },
    /// A plain-HTTP request in absolute form (`GET http://host/path`).
    Forward {
        method: String,
        target: Target,
        /// The origin-form target sent on (`/path?query`).
        path: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub request: Request,
    /// 0 or 1 (HTTP/1.0 or HTTP/1.1).
    pub minor_version: u8,
    /// Header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
    /// Bytes of the buffer the head took (the body, or tunnel data, follows).
    pub len: usize,
}

impl RequestHead {
    /// Every value of header `name` (case-insensitive).
    pub fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        values_in(&self.headers, name)
    }

    /// The one value of `name`; an error when it is repeated.
    pub fn single_header<'a>(&'a self, name: &'a str) -> Result<Option<&'a str>, HeadError> {
        single_in(&self.headers, name)
    }

    /// How the request body is framed, which decides how much the proxy forwards.
    pub fn body(&self) -> Result<Body, HeadError> {
        body_in(&self.headers)
    }

    /// The head sent to the origin in place of this one: origin-form target, the proxy's own
    /// hop-by-hop fields dropped (credentials included), and `Connection: close` so the origin
    /// answers exactly one request.
    pub fn forwarded(&self) -> Option<Vec<u8>> {
        let Request::Forward { method, path, .. } = &self.request else {
            return None;
        };
        let named_by_connection: Vec<String> = self
            .header_values("connection")
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect();
        let mut out = format!("{method} {path} HTTP/1.{}\r\n", self.minor_version).into_bytes();
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            let hop = matches!(
                lower.as_str(),
                "proxy-authorization"
                    | "proxy-connection"
                    | "connection"
                    | "keep-alive"
                    | "te"
                    | "upgrade"
                    | "trailer"
            );
            if hop || named_by_connection.contains(&lower) {
                continue;
            }
            push_field(&mut out, name, value);
        }
        out.extend_from_slice(b"Connection: close\r\n\r\n");
        Some(out)
    }
}

/// Appends `name: value\r\n`: the one field serialiser of every head the proxy writes.
fn push_field(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Every value of header `name` among `headers` (case-insensitive).
pub(crate) fn values_in<'a>(
    headers: &'a [(String, String)],
    name: &'a str,
) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .iter()
        .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The one value of `name` among `headers`; an error when it is repeated.
pub(crate) fn single_in<'a>(
    headers: &'a [(String, String)],
    name: &'a str,
) -> Result<Option<&'a str>, HeadError> {
    let mut values = values_in(headers, name);
    let first = values.next();
    if values.next().is_some() {
        return Err(HeadError::Header(format!(
            "`{name}` appears more than once"
        )));
    }
    Ok(first)
}

/// How a request body is framed by `headers` (a request without either field has none).
pub(crate) fn body_in(headers: &[(String, String)]) -> Result<Body, HeadError> {
    let te: Vec<&str> = values_in(headers, "transfer-encoding").collect();
    let cl = single_in(headers, "content-length")?;
    match (te.as_slice(), cl) {
        ([], None) => Ok(Body::Length(0)),
        ([], Some(n)) => n
            .parse::<u64>()
            .ok()
            .filter(|_| n.bytes().all(|b| b.is_ascii_digit()))
            .map(Body::Length)
            .ok_or_else(|| HeadError::Header(format!("Content-Length `{n}` is not a number"))),
        ([one], None) if one.trim().eq_ignore_ascii_case("chunked") => Ok(Body::Chunked),
        (_, Some(_)) => Err(HeadError::Header(
            "both Transfer-Encoding and Content-Length are set (a request-smuggling shape)".into(),
        )),
        _ => Err(HeadError::Header(
            "the only Transfer-Encoding accepted is a single `chunked`".into(),
        )),
    }
}

/// A request in origin form (`GET /path HTTP/1.1`), as a client sends it to the server itself:
/// what the proxy reads inside a tunnel it intercepts (see `intercept`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OriginHead {
    pub method: String,
    /// The origin-form target (`/path?query`), or `*` for `OPTIONS *`.
    pub path: String,
    pub minor_version: u8,
    pub headers: Vec<(String, String)>,
    /// Bytes of the buffer the head took.
    pub len: usize,
}

impl OriginHead {
    /// The head as bytes, with its fields as they are now.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "{} {} HTTP/1.{}\r\n",
            self.method, self.path, self.minor_version
        )
        .into_bytes();
        for (name, value) in &self.headers {
            push_field(&mut out, name, value);
        }
        out.extend_from_slice(b"\r\n");
        out
    }

    /// The path without its query: what rules match and the audit records.
    pub(crate) fn path_only(&self) -> &str {
        self.path.split('?').next().unwrap_or_default()
    }
}

/// Parses an origin-form request head at the start of `buf` (`Ok(None)`: not complete yet).
pub(crate) fn parse_origin_head(buf: &[u8]) -> Result<Option<OriginHead>, HeadError> {
    let Some((line, headers, len)) = split_head(buf)? else {
        return Ok(None);
    };
    let (method, target, minor_version) = request_line(&line)?;
    if !(target.starts_with('/') || (target == "*" && method == "OPTIONS")) {
        return Err(HeadError::Target(format!(
            "inside a tunnel the request target is a path (`GET /path`), not `{}`",
            target.escape_debug()
        )));
    }
    if target.contains('#') {
        return Err(HeadError::Target("a request target has no fragment".into()));
    }
    Ok(Some(OriginHead {
        method: method.to_owned(),
        path: target.to_owned(),
        minor_version,
        headers,
        len,
    }))
}

/// The status line and fields of a response, read by the proxy from an origin it intercepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub minor_version: u8,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub len: usize,
}

impl ResponseHead {
    /// The head as bytes, with its fields as they are now.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.{} {} {}\r\n",
            self.minor_version, self.status, self.reason
        )
        .into_bytes();
        for (name, value) in &self.headers {
            push_field(&mut out, name, value);
        }
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// Parses a response head at the start of `buf` (`Ok(None)`: not complete yet). Its error
/// holds no byte of the response (see [`Malformed`]).
pub(crate) fn parse_response_head(buf: &[u8]) -> Result<Option<ResponseHead>, Malformed> {
    let Some((line, headers, len)) = split_head(buf)? else {
        return Ok(None);
    };
    let bad = || Malformed::StatusLine;
    let rest = line.strip_prefix("HTTP/1.").ok_or_else(bad)?;
    let minor_version = match rest.as_bytes().first() {
        Some(b'0') => 0,
        Some(b'1') => 1,
        _ => return Err(bad()),
    };
    let rest = rest[1..].strip_prefix(' ').ok_or_else(bad)?;
    let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
    let status = code
        .parse::<u16>()
        .ok()
        .filter(|c| code.len() == 3 && (100..600).contains(c))
        .ok_or_else(bad)?;
    Ok(Some(ResponseHead {
        status,
        minor_version,
        reason: reason.to_owned(),
        headers,
        len,
    }))
}

/// A head's first line, its fields, and its length.
type SplitHead = (String, Vec<(String, String)>, usize);

/// The first line and the fields of a head, and its length; None when not complete.
fn split_head(buf: &[u8]) -> Result<Option<SplitHead>, Malformed> {
    let window = &buf[..buf.len().min(MAX_HEAD)];
    let Some(end) = find(window, b"\r\n\r\n") else {
        if buf.len() >= MAX_HEAD {
            return Err(Malformed::TooLarge);
        }
        return Ok(None);
    };
    let head = &buf[..end + 2];
    let mut lines = head[..head.len() - 1].split(|&b| b == b'\n');
    let first = lines.next().unwrap_or_default();
    let first = strip_cr(first).ok_or(Malformed::LineEnd)?;
    let first = std::str::from_utf8(first)
        .ok()
        .filter(|l| l.bytes().all(|b| b == b' ' || b.is_ascii_graphic()))
        .ok_or(Malformed::FirstLine)?;
    Ok(Some((first.to_owned(), fields(lines)?, end + 4)))
}

/// `METHOD target HTTP/1.x`, checked.
fn request_line(text: &str) -> Result<(&str, &str, u8), HeadError> {
    let mut parts = text.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::RequestLine(
            "expected `METHOD target HTTP/1.1`, separated by single spaces".into(),
        ));
    };
    if method.is_empty() || !method.bytes().all(is_token) {
        return Err(HeadError::RequestLine(format!(
            "bad method `{}`",
            method.escape_debug()
        )));
    }
    let minor_version = match version {
        "HTTP/1.1" => 1,
        "HTTP/1.0" => 0,
        other => {
            return Err(HeadError::RequestLine(format!(
                "unsupported version `{}` (HTTP/1.0 or HTTP/1.1)",
                other.escape_debug()
            )));
        }
    };
    if target.is_empty() || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(HeadError::RequestLine(
            "the target has spaces or control characters".into(),
        ));
    }
    Ok((method, target, minor_version))
}

/// The header fields of a head's lines (each still ending in CR), checked strictly.
fn fields<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Result<Vec<(String, String)>, Malformed> {
    let mut headers = Vec::new();
    for line in lines {
        let line = strip_cr(line).ok_or(Malformed::LineEnd)?;
        if headers.len() >= MAX_HEADERS {
            return Err(Malformed::TooManyFields);
        }
        if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
            return Err(Malformed::Folding);
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(Malformed::NoColon { len: line.len() })?;
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().copied().all(is_token) {
            return Err(Malformed::FieldName { len: name.len() });
        }
        let name_len = name.len();
        if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(Malformed::ControlInValue { name_len });
        }
        let value = std::str::from_utf8(value)
            .map_err(|_| Malformed::ValueNotUtf8 { name_len })?
            .trim_matches(|c| c == ' ' || c == '\t');
        // A token is ASCII, so the name converts whole.
        headers.push((String::from_utf8_lossy(name).into_owned(), value.to_owned()));
    }
    Ok(headers)
}

/// Request body framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    Length(u64),
    Chunked,
}

/// Parses the head at the start of `buf`. `Ok(None)`: not complete yet (read more, unless
/// `buf` already holds [`MAX_HEAD`] bytes, which is then an error).
pub fn parse_head(buf: &[u8]) -> Result<Option<RequestHead>, HeadError> {
    let Some((line, headers, len)) = split_head(buf)? else {
        return Ok(None);
    };
    let (method, target, minor_version) = request_line(&line)?;
    let request = if method == "CONNECT" {
        Request::Connect {
            target: Target::parse_authority(target)?,
        }
    } else {
        let (target, path) = absolute_http(target)?;
        Request::Forward {
            method: method.to_owned(),
            target,
            path,
        }
    };
    Ok(Some(RequestHead {
        request,
        minor_version,
        headers,
        len,
    }))
}

/// The request of a head whose request line is complete but whose fields may not be, for
/// the record of a connection that never finished its head (None when the line is not
/// complete or not valid).
pub fn parse_request_line(buf: &[u8]) -> Option<Request> {
    let window = &buf[..buf.len().min(MAX_HEAD)];
    let end = find(window, b"\r\n")?;
    let mut line = window[..end + 2].to_vec();
    line.extend_from_slice(b"\r\n");
    parse_head(&line).ok().flatten().map(|h| h.request)
}

/// `http://authority/path` → (target, `/path`). Userinfo is refused (it would be sent on to
/// a host that never asked for it), and so is any scheme but `http`.
fn absolute_http(target: &str) -> Result<(Target, String), HeadError> {
    let Some(rest) = target
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &target[7..])
    else {
        return Err(HeadError::Target(if target.starts_with('/') {
            "a proxy needs the absolute form (`GET http://host/path`); an origin-form target \
             means the client did not know it was talking to a proxy"
                .into()
        } else if target.len() > 8 && target[..8].eq_ignore_ascii_case("https://") {
            "https:// goes through CONNECT (the client opens a tunnel), not a plain request".into()
        } else {
            format!(
                "only http:// URLs are forwarded, not `{}`",
                target.escape_debug()
            )
        }));
    };
    let split = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.contains('@') {
        return Err(HeadError::Target(
            "credentials in the URL (`user@host`) are not forwarded".into(),
        ));
    }
    let path = path.split('#').next().unwrap_or_default();
    let path = if path.is_empty() {
        "/".to_owned()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    Ok((Target::parse_with_default(authority, 80)?, path))
}

/// Whether a plain request's `Host` names its target: the same host, and the same port
/// (which may be left out when it is 80).
pub fn host_matches(host_header: &str, target: &Target) -> bool {
    match Target::parse_with_default(host_header.trim(), 80) {
        Ok(named) => named == *target,
        Err(_) => false,
    }
}

fn strip_cr(line: &[u8]) -> Option<&[u8]> {
    line.strip_suffix(b"\r").filter(|l| !l.contains(&b'\r'))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A chunked body as it passes: finds where it ends, so nothing after it (a second request
/// smuggled behind the first) reaches the origin. Fed bytes in order; bounded state.
#[derive(Debug, Default)]
pub struct ChunkedEnd {
    state: ChunkState,
    line: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading a chunk-size line.
    #[default]
    Size,
    /// Inside chunk data: this many bytes left, then CRLF.
    Data(u64),
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailer,
    Done,
}

/// Longest chunk-size or trailer line accepted.
const MAX_CHUNK_LINE: usize = 4096;

impl ChunkedEnd {
    /// Consumes `data`; returns how many of its bytes belong to the body (all of them until
    /// the end is found), or an error for a malformed body.
    pub fn feed(&mut self, data: &[u8]) -> Result<usize, HeadError> {
        let mut i = 0;
        while i < data.len() {
            match self.state {
                ChunkState::Done => return Ok(i),
                ChunkState::Data(left) => {
                    let take = (left.min((data.len() - i) as u64)) as usize;
                    i += take;
                    self.state = if left == take as u64 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left - take as u64)
                    };
                }
                ChunkState::Size | ChunkState::DataEnd | ChunkState::Trailer => {
                    let b = data[i];
                    i += 1;
                    if b != b'\n' {
                        if self.line.len() >= MAX_CHUNK_LINE {
                            return Err(HeadError::Header("a chunk line is too long".into()));
                        }
                        self.line.push(b);
                        continue;
                    }
                    let line = std::mem::take(&mut self.line);
                    let line = strip_cr(&line).ok_or_else(|| {
                        HeadError::Header("a chunk line ends without CRLF".into())
                    })?;
                    self.state = match self.state {
                        ChunkState::DataEnd if line.is_empty() => ChunkState::Size,
                        ChunkState::DataEnd => {
                            return Err(HeadError::Header(
                                "chunk data longer than its size".into(),
                            ));
                        }
                        ChunkState::Trailer if line.is_empty() => ChunkState::Done,
                        ChunkState::Trailer => ChunkState::Trailer,
                        _ => {
                            let size = line.split(|&b| b == b';').next().unwrap_or_default();
                            let size = std::str::from_utf8(size)
                                .ok()
                                .filter(|s| {
                                    !s.is_empty()
                                        && s.len() <= 16
                                        && s.bytes().all(|b| b.is_ascii_hexdigit())
                                })
                                .and_then(|s| u64::from_str_radix(s, 16).ok())
                                .ok_or_else(|| HeadError::Header("bad chunk size".into()))?;
                            if size == 0 {
                                ChunkState::Trailer
                            } else {
                                ChunkState::Data(size)
                            }
                        }
                    };
                }
            }
        }
        Ok(i)
    }

    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Option<RequestHead>, HeadError> {
        parse_head(s.as_bytes())
    }

    #[test]
    fn connect_and_absolute_requests() {
        let h = parse("CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\nxx")
            .unwrap()
            .unwrap();
        assert_eq!(
            h.request,
            Request::Connect {
                target: Target::parse_authority("example.org:443").unwrap()
            }
        );
        assert_eq!(h.len, 59);
        let h = parse("GET http://Example.org/a?b HTTP/1.0\r\nHost: example.org\r\n\r\n")
            .unwrap()
            .unwrap();
        let Request::Forward {
            method,
            target,
            path,
        } = &h.request
        else {
            panic!("{h:?}")
        };
        assert_eq!((method.as_str(), path.as_str()), ("GET", "/a?b"));
        assert_eq!(target.to_string(), "example.org:80");
        assert!(host_matches("example.org", target));
        assert!(host_matches("EXAMPLE.org:80", target));
        assert!(!host_matches("example.org:8080", target));
        assert!(!host_matches("evil.net", target));
        let h = parse("GET http://h:8080?q HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(matches!(&h.request, Request::Forward { path, .. } if path == "/?q"));
    }

    #[test]
    fn incomplete_heads_wait_and_oversized_ones_fail() {
        assert_eq!(parse("GET http://h/ HTTP/1.1\r\nHost: h\r\n"), Ok(None));
        let big = format!("GET http://h/ HTTP/1.1\r\nX: {}", "a".repeat(MAX_HEAD));
        assert_eq!(parse(&big), Err(HeadError::TooLarge));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X{i}: v\r\n")).collect();
        let req = format!("GET http://h/ HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse(&req), Err(HeadError::TooManyHeaders));
    }

    #[test]
    fn malformed_heads_are_errors() {
        for bad in [
            "GET  http://h/ HTTP/1.1\r\n\r\n",
            "GET http://h/ HTTP/2\r\n\r\n",
            "G(T http://h/ HTTP/1.1\r\n\r\n",
            "GET /relative HTTP/1.1\r\nHost: h\r\n\r\n",
            "GET https://h/ HTTP/1.1\r\n\r\n",
            "GET ftp://h/ HTTP/1.1\r\n\r\n",
            "GET http://u:p@h/ HTTP/1.1\r\n\r\n",
            "GET http://h/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
            "GET http://h/ HTTP/1.1\r\nX y: a\r\n\r\n",
            "GET http://h/ HTTP/1.1\r\nX: a\x01b\r\n\r\n",
            "GET http://h/ HTTP/1.1\nX: a\r\n\r\n",
            "GET http://h/ HTTP/1.1\r\nX: a\rb\r\n\r\n",
            "CONNECT h HTTP/1.1\r\n\r\n",
            "CONNECT 2130706433:443 HTTP/1.1\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}: {:?}", parse(bad));
        }
    }

    #[test]
    fn body_framing_refuses_smuggling_shapes() {
        let head = |extra: &str| {
            parse(&format!("POST http://h/ HTTP/1.1\r\n{extra}\r\n"))
                .unwrap()
                .unwrap()
        };
        assert_eq!(head("").body(), Ok(Body::Length(0)));
        assert_eq!(head("Content-Length: 5\r\n").body(), Ok(Body::Length(5)));
        assert_eq!(
            head("Transfer-Encoding: chunked\r\n").body(),
            Ok(Body::Chunked)
        );
        for bad in [
            "Content-Length: 5\r\nContent-Length: 6\r\n",
            "Content-Length: +5\r\n",
            "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            "Transfer-Encoding: gzip, chunked\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        ] {
            assert!(head(bad).body().is_err(), "{bad}");
        }
    }

    #[test]
    fn forwarded_head_drops_credentials_and_hop_by_hop_fields() {
        let h = parse(
            "GET http://h:81/x HTTP/1.1\r\nHost: h:81\r\nProxy-Authorization: Basic abc\r\n\
             Connection: keep-alive, X-Secret\r\nX-Secret: s\r\nAccept: */*\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        let out = String::from_utf8(h.forwarded().unwrap()).unwrap();
        assert_eq!(
            out,
            "GET /x HTTP/1.1\r\nHost: h:81\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
    }

    /// The fuzzer's first finding was its own invariant: a field *value* may spell out
    /// "Proxy-Authorization" (it is the client's text and goes on); only a field of that name
    /// is dropped.
    #[test]
    fn a_value_naming_proxy_authorization_is_only_text() {
        let h = parse(
            "GET http://h/x HTTP/1.1\r\nHost: h\r\nX-Note: Proxy-Authorization: Basic abc\r\n\
             proxy-AUTHORIZATION: Basic abc\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        let out = String::from_utf8(h.forwarded().unwrap()).unwrap();
        assert_eq!(
            out,
            "GET /x HTTP/1.1\r\nHost: h\r\nX-Note: Proxy-Authorization: Basic abc\r\n\
             Connection: close\r\n\r\n"
        );
    }

    #[test]
    fn chunked_bodies_end_where_they_end() {
        let body = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nX-T: 1\r\n\r\nGET /smuggled";
        let mut c = ChunkedEnd::default();
        let n = c.feed(body).unwrap();
        assert!(c.is_done());
        assert_eq!(&body[n..], b"GET /smuggled");
        // Byte by byte gives the same end.
        let mut c = ChunkedEnd::default();
        let mut total = 0;
        for b in body.iter() {
            total += c.feed(std::slice::from_ref(b)).unwrap();
            if c.is_done() {
                break;
            }
        }
        assert_eq!(total, n);
        for bad in [&b"x\r\n"[..], b"4\r\nWikiX\r\n", b"4\nWiki\r\n"] {
            assert!(ChunkedEnd::default().feed(bad).is_err(), "{bad:?}");
        }
    }
}
