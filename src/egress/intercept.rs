//! Interception: one HTTP/1.1 request to a host named by a credential, a `[[network.rules]]`
//! entry or `[network.git]`, read in clear by the proxy (inside TLS it terminates with a leaf
//! of cordon's authority, or as a plain request), judged, rewritten and sent on.
//!
//! Owns the exchange, in order: the client's TLS (a client that refuses cordon's certificate,
//! e.g. one that pins, fails here and is reported so), the request head, its `Host`, the
//! placeholders (an unbound one is an exfiltration attempt: refused, nothing sent), the host's
//! method and path rules, a push's ref updates (read from the body before anything is sent;
//! refused in git's own report format), then the upstream's TLS (verified, never downgraded),
//! the request with the real credential in it and `Connection: close`, its body (watched for
//! placeholders), and the response with any echoed real value scrubbed. One request per
//! tunnel: the response says `Connection: close`, so a client opens a new one for the next
//! (the leaf is cached, so that is one handshake, no minting). What the rules and secrets
//! decide is `l7`/`secrets`/`pktline`; which hosts are intercepted, and the connection
//! before this (admission, resolution, the address checks), is `proxy`'s.

use super::http::{self, Body, OriginHead, ResponseHead};
use super::l7::{self, PushRefusal};
use super::pattern::Target;
use super::pktline;
use super::rules::EgressRules;
use super::secrets::{Detector, Vault};
use super::tls;
use super::upstream::{self, Fault, TlsFault};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

const CHUNK: usize = 64 * 1024;

/// What the proxy knows that an exchange needs.
pub(super) struct Scope<'a> {
    pub rules: &'a EgressRules,
    pub vault: &'a Vault,
    pub upstream_tls: Option<&'a Arc<rustls::ClientConfig>>,
    pub head_timeout: Duration,
    pub cancel: &'a CancellationToken,
}

/// What one intercepted request turned out to be, for its connection record.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub method: Option<String>,
    pub path: Option<String>,
    pub status: Option<u16>,
    pub credential: Option<String>,
    pub rule: Option<String>,
    pub exfiltration: Option<String>,
    pub allowed: bool,
    pub sent: u64,
    pub received: u64,
    pub note: Option<String>,
    /// `host:port` the request went to (the client's words), for the proxy's own.
    pub target: Option<String>,
}

impl Outcome {
    fn refused(mut self, note: String) -> Self {
        self.allowed = false;
        self.note = Some(note);
        self
    }
}

/// An intercepted CONNECT: the tunnel is established (the client was told so), `upstream` is
/// connected to a checked address; `early` is what the client sent behind its CONNECT head.
pub(super) async fn tunnel(
    ctx: &Scope<'_>,
    client: TcpStream,
    upstream: TcpStream,
    early: Vec<u8>,
    target: &Target,
) -> Outcome {
    let outcome = Outcome::default();
    let server = match tls::Authority::global().server_config(&target.host) {
        Ok(s) => s,
        Err(e) => return outcome.refused(e.to_string()),
    };
    let accept = tokio_rustls::TlsAcceptor::from(server).accept(Prefixed::new(early, client));
    let client = tokio::select! {
        _ = ctx.cancel.cancelled() => return outcome.refused("cut when the call ended".into()),
        r = tokio::time::timeout(ctx.head_timeout, accept) => r,
    };
    let client = match client {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            return outcome.refused(format!(
                "the client refused cordon's interception certificate for {} ({e}): this host \
                 is intercepted (a credential, a rule or [network.git] names it), so a client \
                 must trust the CA bundle cordon gives the sandbox (SSL_CERT_FILE and the \
                 system bundle); a client that pins certificates cannot use it",
                target.host
            ));
        }
        Err(_) => return outcome.refused("the client did not finish its TLS handshake".into()),
    };
    let connect = async {
        let Some(config) = ctx.upstream_tls else {
            return Err("no upstream TLS configuration".to_owned());
        };
        let name = tls::server_name(&target.host).map_err(|e| e.to_string())?;
        tokio_rustls::TlsConnector::from(Arc::clone(config))
            .connect(name, upstream)
            .await
            .map_err(|e| upstream::describe(&target.to_string(), &Fault::Tls(TlsFault::of(&e))))
    };
    exchange(ctx, client, connect, None, Vec::new(), target, true).await
}

/// A plain-HTTP request to an intercepted host: `head` in origin form, `early` what followed it.
pub(super) async fn plain(
    ctx: &Scope<'_>,
    client: TcpStream,
    upstream: TcpStream,
    head: OriginHead,
    early: Vec<u8>,
    target: &Target,
) -> Outcome {
    let connect = async { Ok::<_, String>(upstream) };
    exchange(ctx, client, connect, Some(head), early, target, false).await
}

/// One intercepted request and its response; a refusal at any step is the outcome's note.
async fn exchange<C, U, F>(
    ctx: &Scope<'_>,
    mut client: C,
    connect: F,
    head: Option<OriginHead>,
    early: Vec<u8>,
    target: &Target,
    tls: bool,
) -> Outcome
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
    F: std::future::Future<Output = Result<U, String>>,
{
    let mut outcome = Outcome {
        target: Some(target.to_string()),
        ..Outcome::default()
    };
    let request = Intercepted { target, tls };
    match request
        .exchange(ctx, &mut client, connect, head, early, &mut outcome)
        .await
    {
        Ok(()) => outcome,
        Err(why) => outcome.refused(why),
    }
}

/// The request of an intercepted exchange: where it goes and whether it came through TLS.
struct Intercepted<'a> {
    target: &'a Target,
    tls: bool,
}

impl Intercepted<'_> {
    /// The steps of [`exchange`]: `Err` is why it was refused (the client has been answered).
    async fn exchange<C, U, F>(
        &self,
        ctx: &Scope<'_>,
        client: &mut C,
        connect: F,
        head: Option<OriginHead>,
        early: Vec<u8>,
        outcome: &mut Outcome,
    ) -> Result<(), String>
    where
        C: AsyncRead + AsyncWrite + Unpin,
        U: AsyncRead + AsyncWrite + Unpin,
        F: std::future::Future<Output = Result<U, String>>,
    {
        let (mut head, pending) = match head {
            Some(h) => (h, early),
            None => match read_request(ctx, client).await {
                Ok(x) => x,
                Err(Some((status, why))) => {
                    let _ = client.write_all(&answer(status, &why)).await;
                    return Err(why);
                }
                Err(None) => return Err("the client sent no request".into()),
            },
        };
        outcome.method = Some(head.method.clone());
        outcome.path = Some(head.path_only().to_owned());
        let body = self.admit(ctx, client, &mut head, outcome).await?;
        let mut reader = self
            .push_checked(ctx, client, &head, body, pending, outcome)
            .await?;
        let upstream = tokio::select! {
            _ = ctx.cancel.cancelled() => return Err("cut when the call ended".into()),
            u = connect => u,
        };
        let mut upstream = match upstream {
            Ok(u) => u,
            Err(why) => {
                let _ = client.write_all(&answer((502, "Bad Gateway"), &why)).await;
                outcome.status = Some(502);
                return Err(why);
            }
        };
        outcome.allowed = true;
        let cap = ctx.rules.max_bytes_per_connection;
        self.send_head(&mut upstream, head, outcome).await?;
        self.send_body(ctx, client, &mut upstream, &mut reader, cap, outcome)
            .await?;
        let _ = upstream.flush().await;
        relay_response(ctx, &mut upstream, client, outcome, cap).await;
        let _ = client.shutdown().await;
        Ok(())
    }

    /// The head judged by the rules, its body framing read, and `100 Continue` answered by
    /// the proxy, which reads the body before anything goes on (the push check needs it).
    async fn admit<C: AsyncWrite + Unpin>(
        &self,
        ctx: &Scope<'_>,
        client: &mut C,
        head: &mut OriginHead,
        outcome: &mut Outcome,
    ) -> Result<Body, String> {
        if let Err((status, why)) = judge(ctx, head, self.target, self.tls, outcome) {
            let _ = client.write_all(&answer(status, &why)).await;
            let _ = client.shutdown().await;
            outcome.status = Some(status.0);
            return Err(why);
        }
        let body = match http::body_in(&head.headers) {
            Ok(b) => b,
            Err(e) => {
                let why = e.to_string();
                let _ = client.write_all(&answer((400, "Bad Request"), &why)).await;
                return Err(why);
            }
        };
        if http::values_in(&head.headers, "expect").any(|v| v.eq_ignore_ascii_case("100-continue"))
        {
            head.headers
                .retain(|(n, _)| !n.eq_ignore_ascii_case("expect"));
            if client
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .is_err()
            {
                return Err("the client closed the connection".into());
            }
        }
        Ok(body)
    }

    /// The body's reader; a git push the rules judge has its ref updates checked first.
    async fn push_checked<C: AsyncRead + AsyncWrite + Unpin>(
        &self,
        ctx: &Scope<'_>,
        client: &mut C,
        head: &OriginHead,
        body: Body,
        pending: Vec<u8>,
        outcome: &mut Outcome,
    ) -> Result<BodyReader, String> {
        let judged_push = push_by_path(head) && push_judged(ctx, self.target);
        let mut reader = BodyReader::new(body, pending, judged_push);
        if judged_push {
            match check_push(ctx, client, &mut reader, head).await {
                Ok(None) => {
                    outcome.rule = Some(format!("network.git.push_refs ({})", git_site(ctx)));
                }
                Ok(Some(report)) => {
                    outcome.status = Some(200);
                    outcome.rule = Some(format!("network.git.push_refs ({})", git_site(ctx)));
                    let why = report.1;
                    let _ = client.write_all(&report.0).await;
                    let _ = client.shutdown().await;
                    return Err(why);
                }
                Err((status, why)) => {
                    let _ = client.write_all(&answer(status, &why)).await;
                    outcome.status = Some(status.0);
                    return Err(why);
                }
            }
        }
        Ok(reader)
    }

    /// The head goes on with `Connection: close`: one request per tunnel (see the module).
    async fn send_head<U: AsyncWrite + Unpin>(
        &self,
        upstream: &mut U,
        mut head: OriginHead,
        outcome: &mut Outcome,
    ) -> Result<(), String> {
        head.headers.retain(|(n, _)| {
            !matches!(
                n.to_ascii_lowercase().as_str(),
                "connection"
                    | "keep-alive"
                    | "proxy-connection"
                    | "proxy-authorization"
                    | "upgrade"
            )
        });
        head.headers.push(("Connection".into(), "close".into()));
        let head_bytes = head.to_bytes();
        if upstream.write_all(&head_bytes).await.is_err() {
            return Err(format!("{} closed the connection", self.target));
        }
        outcome.sent += head_bytes.len() as u64;
        Ok(())
    }

    /// The body, scanned for real credential values and bounded by `cap`, until it ends or
    /// the upstream stops reading (its answer is read next).
    async fn send_body<C, U>(
        &self,
        ctx: &Scope<'_>,
        client: &mut C,
        upstream: &mut U,
        reader: &mut BodyReader,
        cap: u64,
        outcome: &mut Outcome,
    ) -> Result<(), String>
    where
        C: AsyncRead + AsyncWrite + Unpin,
        U: AsyncWrite + Unpin,
    {
        let mut detector = Detector::new(ctx.vault, self.target, self.tls);
        loop {
            let piece = tokio::select! {
                _ = ctx.cancel.cancelled() => return Err("cut when the call ended".into()),
                p = reader.next(client) => p,
            };
            match piece {
                Ok(Some(bytes)) => {
                    if let Some(exf) = detector.feed(&bytes) {
                        outcome.exfiltration = Some(exf.credential.clone());
                        let why = exf.to_string();
                        let _ = client.write_all(&answer((403, "Forbidden"), &why)).await;
                        return Err(why);
                    }
                    if outcome.sent + bytes.len() as u64 > cap {
                        return Err(cap_note(cap));
                    }
                    if upstream.write_all(&bytes).await.is_err() {
                        return Ok(()); // the upstream answered early; its answer is read next
                    }
                    outcome.sent += bytes.len() as u64;
                }
                Ok(None) => return Ok(()),
                Err(e) => {
                    let why = format!("the request body: {e}");
                    let _ = client.write_all(&answer((400, "Bad Request"), &why)).await;
                    return Err(why);
                }
            }
        }
    }
}

/// Reads the response head (1xx ones passed on), fixes `Connection: close`, and copies the
/// rest until the upstream closes, every real value scrubbed from the content: a chunked
/// body is decoded, scrubbed and chunked again (so an echo split across chunks is found),
/// and the answer to a request that carried a credential must be unencoded.
async fn relay_response<C, U>(
    ctx: &Scope<'_>,
    upstream: &mut U,
    client: &mut C,
    outcome: &mut Outcome,
    cap: u64,
) where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let carried = outcome.credential.is_some();
    let head_only = outcome.method.as_deref() == Some("HEAD");
    let name = outcome_target(outcome);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; CHUNK];
    let mut total = outcome.sent;
    let fail = |outcome: &mut Outcome, fault: Fault| {
        let why = upstream::describe(&name, &fault);
        outcome.note = Some(why.clone());
        outcome.status = Some(502);
        answer((502, "Bad Gateway"), &why)
    };
    let (rest, mut body) = loop {
        let parsed = match upstream::parse_head(&buf) {
            Ok(p) => p,
            Err(fault) => {
                let _ = client.write_all(&fail(outcome, fault)).await;
                return;
            }
        };
        if let Some(mut head) = parsed {
            let rest = buf.split_off(head.len);
            buf.clear();
            let interim = (100..200).contains(&head.status) && head.status != 101;
            let mut body = ResponseBody::Raw;
            if !interim {
                match final_head(&mut head, carried, head_only) {
                    Ok(b) => body = b,
                    Err(fault) => {
                        let _ = client.write_all(&fail(outcome, fault)).await;
                        return;
                    }
                }
            }
            outcome.status = Some(head.status);
            let bytes = scrub_head(&head, ctx.vault);
            if client.write_all(&bytes).await.is_err() {
                return;
            }
            outcome.received += bytes.len() as u64;
            if interim {
                buf = rest;
                continue;
            }
            break (rest, body);
        }
        let n = tokio::select! {
            _ = ctx.cancel.cancelled() => { outcome.note = Some("cut when the call ended".into()); return; }
            n = upstream.read(&mut chunk) => n,
        };
        match n {
            Ok(0) | Err(_) => {
                let _ = client
                    .write_all(&fail(outcome, Fault::ClosedBeforeHead))
                    .await;
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let mut scrubber = ctx.vault.scrubber();
    let mut piece = rest;
    loop {
        if !piece.is_empty() {
            total += piece.len() as u64;
            if total > cap {
                outcome.note = Some(cap_note(cap));
                return;
            }
            let out = match body.relay(&piece, &mut scrubber) {
                Ok(out) => out,
                Err(fault) => {
                    outcome.note = Some(upstream::describe(&name, &fault));
                    return;
                }
            };
            if client.write_all(&out).await.is_err() {
                return;
            }
            outcome.received += out.len() as u64;
            if body.is_done() {
                break;
            }
        }
        let n = tokio::select! {
            _ = ctx.cancel.cancelled() => { outcome.note = Some("cut when the call ended".into()); return; }
            n = upstream.read(&mut chunk) => n,
        };
        match n {
            Ok(0) => break,
            Ok(n) => piece = chunk[..n].to_vec(),
            // A TLS peer that closes without close_notify: the response is over all the same
            // (its framing, not ours, tells the client whether it is complete).
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
            Err(e) => {
                outcome.note = Some(upstream::describe(&name, &Fault::Read(e.kind())));
                break;
            }
        }
    }
    let out = body.finish(&mut scrubber);
    if client.write_all(&out).await.is_ok() {
        outcome.received += out.len() as u64;
    }
}

/// The final (not 1xx) response head made ready to pass on: how its body is relayed (see
/// [`response_framing`]; a body answering a request that carried a credential must be
/// unencoded) and `Connection: close` in place of the hop-by-hop fields.
fn final_head(
    head: &mut super::http::ResponseHead,
    carried: bool,
    head_only: bool,
) -> Result<ResponseBody, Fault> {
    let has_body = !head_only && !matches!(head.status, 204 | 304);
    let body = response_framing(&head.headers, carried && has_body)?;
    head.headers.retain(|(n, _)| {
        !matches!(
            n.to_ascii_lowercase().as_str(),
            "connection" | "keep-alive" | "trailer"
        )
    });
    head.headers.push(("Connection".into(), "close".into()));
    Ok(body)
}

/// The host and port an outcome's request went to, for the proxy's words (the client's own
/// text: the upstream chose none of it).
fn outcome_target(outcome: &Outcome) -> String {
    outcome.target.clone().unwrap_or_else(|| "upstream".into())
}

/// How a response body is relayed: as it comes, or decoded from chunks and chunked again.
/// Refused (`Err`): a `Transfer-Encoding` other than one `chunked`, and, when `checked` (a
/// request that carried a credential, with a body), any `Content-Encoding` but `identity`.
fn response_framing(headers: &[(String, String)], checked: bool) -> Result<ResponseBody, Fault> {
    if checked
        && let Some(v) = http::values_in(headers, "content-encoding")
            .find(|v| !v.trim().eq_ignore_ascii_case("identity"))
    {
        return Err(Fault::Encoded { len: v.len() });
    }
    let te: Vec<&str> = http::values_in(headers, "transfer-encoding").collect();
    match te.as_slice() {
        [] => Ok(ResponseBody::Raw),
        [one] if one.trim().eq_ignore_ascii_case("chunked") => Ok(ResponseBody::Chunked {
            framing: http::ChunkedEnd::default(),
            decoder: Dechunk::default(),
        }),
        other => Err(Fault::Framing {
            len: other.iter().map(|v| v.len()).sum(),
        }),
    }
}

/// A response body on its way to the client, scrubbed.
enum ResponseBody {
    /// Length-delimited or delimited by the upstream's close: scrubbed as it comes.
    Raw,
    /// Chunked: decoded (so the scrubber sees the content, not the framing), scrubbed and
    /// sent as chunks of what can go on now; trailers are dropped.
    Chunked {
        framing: http::ChunkedEnd,
        decoder: Dechunk,
    },
}

impl ResponseBody {
    /// What goes to the client for `piece` of the upstream's body.
    fn relay(
        &mut self,
        piece: &[u8],
        scrubber: &mut super::secrets::Scrubber,
    ) -> Result<Vec<u8>, Fault> {
        match self {
            Self::Raw => Ok(scrubber.feed(piece)),
            Self::Chunked { framing, decoder } => {
                let n = framing.feed(piece).map_err(|_| Fault::Chunked)?;
                let mut content = Vec::new();
                decoder.feed(&piece[..n], &mut content);
                let mut out = Vec::new();
                push_chunk(&mut out, &scrubber.feed(&content));
                if framing.is_done() {
                    push_chunk(&mut out, &scrubber.finish());
                    out.extend_from_slice(b"0\r\n\r\n");
                }
                Ok(out)
            }
        }
    }

    fn is_done(&self) -> bool {
        matches!(self, Self::Chunked { framing, .. } if framing.is_done())
    }

    /// What is still held back when the upstream is done (a chunked body that did not end
    /// stays unterminated, so the client sees it is incomplete).
    fn finish(&mut self, scrubber: &mut super::secrets::Scrubber) -> Vec<u8> {
        match self {
            Self::Raw => scrubber.finish(),
            Self::Chunked { framing, .. } if framing.is_done() => Vec::new(),
            Self::Chunked { .. } => {
                let mut out = Vec::new();
                push_chunk(&mut out, &scrubber.finish());
                out
            }
        }
    }
}

fn push_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// A response head as the client gets it: every real value scrubbed from its fields.
fn scrub_head(head: &ResponseHead, vault: &Vault) -> Vec<u8> {
    let mut s = vault.scrubber();
    let mut out = s.feed(&head.to_bytes());
    out.extend(s.finish());
    out
}

/// The request head inside a tunnel, within the head timeout and size bound.
async fn read_request<C: AsyncRead + Unpin>(
    ctx: &Scope<'_>,
    client: &mut C,
) -> Result<(OriginHead, Vec<u8>), Option<((u16, &'static str), String)>> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 8192];
    let deadline = tokio::time::Instant::now() + ctx.head_timeout;
    loop {
        match http::parse_origin_head(&buf) {
            Ok(Some(head)) => {
                let rest = buf.split_off(head.len);
                return Ok((head, rest));
            }
            Ok(None) => {}
            Err(e) => {
                let status = if matches!(
                    e,
                    http::HeadError::TooLarge | http::HeadError::TooManyHeaders
                ) {
                    (431, "Request Header Fields Too Large")
                } else {
                    (400, "Bad Request")
                };
                return Err(Some((status, e.to_string())));
            }
        }
        let n = tokio::select! {
            _ = ctx.cancel.cancelled() => return Err(None),
            _ = tokio::time::sleep_until(deadline) => {
                return Err(Some(((408, "Request Timeout"), format!(
                    "head timeout: the request head did not arrive within {:?}", ctx.head_timeout
                ))));
            }
            n = client.read(&mut chunk) => n,
        };
        match n {
            Ok(0) | Err(_) => return Err(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Host, placeholders, rules: everything decided from the head alone.
fn judge(
    ctx: &Scope<'_>,
    head: &mut OriginHead,
    target: &Target,
    tls: bool,
    outcome: &mut Outcome,
) -> Result<(), ((u16, &'static str), String)> {
    let bad = |why: String| ((400, "Bad Request"), why);
    let default_port = if tls { 443 } else { 80 };
    match http::single_in(&head.headers, "host").map_err(|e| bad(e.to_string()))? {
        Some(h) => match Target::parse_with_default(h.trim(), default_port) {
            Ok(named) if named == *target => {}
            _ => {
                return Err(bad(format!(
                    "the Host header `{}` does not name {target}, the host this connection is to",
                    h.escape_debug()
                )));
            }
        },
        None => return Err(bad("a request needs a Host header naming its target".into())),
    }
    let path = head.path_only().to_owned();
    let query = head.path.split_once('?').map(|(_, q)| q.to_owned());
    let methods = l7::methods_read(&head.method, &head.headers, query.as_deref());
    // Placeholders first: an attempt is reported as one whatever the rules would say.
    let injected = ctx
        .vault
        .rewrite(&head.path, &mut head.headers, target, tls)
        .map_err(|exf| {
            outcome.exfiltration = Some(exf.credential.clone());
            ((403, "Forbidden"), exf.to_string())
        })?;
    let first_rule = l7::rules_for(&ctx.rules.http_rules, target).next();
    let forbidden = |why: String| ((403, "Forbidden"), why);
    if first_rule.is_none() && push_judged(ctx, target) {
        // A git host without [[network.rules]]: its paths are still judged (push detection).
        let site = ctx
            .rules
            .git
            .as_ref()
            .map(|g| g.site.clone())
            .unwrap_or_default();
        if let Err(refusal) = l7::spelled_once(&path, &site) {
            outcome.rule = Some(format!("network.git.push_refs ({})", git_site(ctx)));
            return Err(forbidden(refusal.to_string()));
        }
    }
    if push_judged(ctx, target) {
        push_consistent(head).map_err(|why| {
            outcome.rule = Some(format!("network.git.push_refs ({})", git_site(ctx)));
            forbidden(why)
        })?;
    }
    match l7::judge_request(&ctx.rules.http_rules, target, &methods, &path) {
        Ok(Some(rule)) => outcome.rule = Some(l7::rule_label(rule)),
        Ok(None) => outcome.rule = Some(format!("network.allow_hosts ({})", ctx.rules.allow_site)),
        Err(refusal) => {
            if let Some(first) = first_rule {
                outcome.rule = Some(l7::rule_label(first));
            }
            return Err(forbidden(refusal.to_string()));
        }
    }
    // Recorded only for a request that goes on (a refused one carried nothing anywhere).
    if !injected.names.is_empty() {
        outcome.credential = Some(injected.names.join(","));
    }
    Ok(())
}

/// The media type of a push's body, which `git http-backend` requires.
const PUSH_TYPE: &str = "application/x-git-receive-pack-request";

/// Whether a request is a push by its path (a POST to `…/git-receive-pack`).
fn push_by_path(head: &OriginHead) -> bool {
    head.method == "POST" && head.path_only().ends_with("/git-receive-pack")
}

/// Whether a request is a push by its body's media type.
fn push_by_type(head: &OriginHead) -> bool {
    http::values_in(&head.headers, "content-type").any(|v| {
        v.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case(PUSH_TYPE))
    })
}

/// A push is recognised by its path and by its media type; a request that is one by only
/// one of them is read as a push by some server and not by the check, so it is refused.
fn push_consistent(head: &OriginHead) -> Result<(), String> {
    match (push_by_path(head), push_by_type(head)) {
        (true, false) => Err(format!(
            "a POST to …/git-receive-pack is a push, and a push through cordon is sent with \
             `Content-Type: {PUSH_TYPE}` (as git sends it) so that it is judged as one; this \
             one is not"
        )),
        (false, true) => Err(format!(
            "a request with `Content-Type: {PUSH_TYPE}` is a push, and a push through cordon \
             is a POST to a path ending in /git-receive-pack (as git sends it) so that it is \
             judged as one; this one is not"
        )),
        _ => Ok(()),
    }
}

fn push_judged(ctx: &Scope<'_>, target: &Target) -> bool {
    ctx.rules.git.as_ref().is_some_and(|g| {
        let named = ctx.rules.credentials.iter().any(|c| c.names(target))
            || l7::rules_for(&ctx.rules.http_rules, target)
                .next()
                .is_some();
        g.covers(target, named)
    })
}

fn git_site(ctx: &Scope<'_>) -> String {
    ctx.rules
        .git
        .as_ref()
        .map(|g| g.site.to_string())
        .unwrap_or_default()
}

/// Reads a push's command list from its body (kept in `reader` to be sent on) and judges it:
/// Ok(None) allowed; Ok(Some((report, why))) refused, the rest of the body read and dropped.
async fn check_push<C: AsyncRead + Unpin>(
    ctx: &Scope<'_>,
    client: &mut C,
    reader: &mut BodyReader,
    head: &OriginHead,
) -> Result<Option<(Vec<u8>, String)>, ((u16, &'static str), String)> {
    let bad = |why: String| ((400, "Bad Request"), why);
    if http::values_in(&head.headers, "content-encoding")
        .any(|v| !v.eq_ignore_ascii_case("identity"))
    {
        return Err(bad(
            "a push through cordon is judged by its ref updates, so its body must not be \
             compressed (git does not compress pushes; set no Content-Encoding)"
                .into(),
        ));
    }
    let git = ctx
        .rules
        .git
        .as_ref()
        .expect("judged only with [network.git]");
    let commands = loop {
        match pktline::parse_commands(reader.decoded()) {
            Ok(Some(c)) => break c,
            Ok(None) => {}
            Err(e) => return Err(bad(format!("the push: {e}"))),
        }
        let more = tokio::select! {
            _ = ctx.cancel.cancelled() => return Err(bad("the call ended".into())),
            m = reader.fill(client) => m,
        };
        match more {
            Ok(true) => {}
            Ok(false) => return Err(bad("the push ended before its command list".into())),
            Err(e) => return Err(bad(format!("the push body: {e}"))),
        }
    };
    let refused: Vec<PushRefusal> = git.judge(&commands.updates);
    if refused.is_empty() {
        return Ok(None);
    }
    // Read what is left of the body (dropped) so the client reads the answer, not a reset.
    let cap = ctx.rules.max_bytes_per_connection;
    let mut drained = 0u64;
    while let Ok(Some(piece)) = reader.next(client).await {
        drained += piece.len() as u64;
        if drained > cap {
            break;
        }
    }
    let pairs: Vec<(String, String)> = refused
        .iter()
        .map(|r| (r.refname.clone(), r.reason.clone()))
        .collect();
    let body = pktline::refusal_report(&commands, &pairs);
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-receive-pack-result\r\n\
         Cache-Control: no-cache\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend(body);
    let why = refused
        .iter()
        .map(|r| format!("push to {} refused: {}", r.refname, r.reason))
        .collect::<Vec<_>>()
        .join("; ");
    Ok(Some((out, why)))
}

/// A request body read per its framing: the raw bytes to send on (framing included), and,
/// for a push's check, the decoded bytes seen so far.
struct BodyReader {
    body: Body,
    /// Raw bytes read but not handed out yet.
    raw: Vec<u8>,
    /// Raw bytes consumed by the framing so far (Length) / the chunk parser.
    left: u64,
    chunked: http::ChunkedEnd,
    done: bool,
    /// Decoded content seen so far, kept only for a push's check (and bounded by its need).
    decoded: Vec<u8>,
    keep_decoded: bool,
    decoder: Dechunk,
    /// A framing error: the body is not sent on past it.
    error: Option<String>,
}

impl BodyReader {
    fn new(body: Body, early: Vec<u8>, keep_decoded: bool) -> Self {
        let left = match body {
            Body::Length(n) => n,
            Body::Chunked => 0,
        };
        let mut r = Self {
            body,
            raw: Vec::new(),
            left,
            chunked: http::ChunkedEnd::default(),
            done: matches!(body, Body::Length(0)),
            decoded: Vec::new(),
            keep_decoded,
            decoder: Dechunk::default(),
            error: None,
        };
        r.take(early);
        r
    }

    /// Adds raw bytes from the client, cut at the end of the body.
    fn take(&mut self, mut bytes: Vec<u8>) {
        if self.done && self.raw.is_empty() && matches!(self.body, Body::Length(0)) {
            return;
        }
        let n = match self.body {
            Body::Length(_) => {
                let n = bytes
                    .len()
                    .min(usize::try_from(self.left).unwrap_or(usize::MAX));
                self.left -= n as u64;
                if self.left == 0 {
                    self.done = true;
                }
                n
            }
            Body::Chunked => match self.chunked.feed(&bytes) {
                Ok(n) => {
                    if self.chunked.is_done() {
                        self.done = true;
                    }
                    n
                }
                Err(e) => {
                    self.done = true;
                    self.error = Some(e.to_string());
                    0
                }
            },
        };
        bytes.truncate(n);
        if self.keep_decoded && self.decoded.len() < pktline::MAX_COMMANDS + 4 {
            match self.body {
                Body::Length(_) => self.decoded.extend_from_slice(&bytes),
                Body::Chunked => self.decoder.feed(&bytes, &mut self.decoded),
            }
        }
        self.raw.extend(bytes);
    }

    fn decoded(&self) -> &[u8] {
        &self.decoded
    }

    /// Reads more from the client into the buffer; false at the end of the body.
    async fn fill<C: AsyncRead + Unpin>(&mut self, client: &mut C) -> io::Result<bool> {
        if self.done {
            return Ok(false);
        }
        let mut chunk = vec![0u8; CHUNK];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the client closed the connection inside the request body",
            ));
        }
        chunk.truncate(n);
        self.take(chunk);
        Ok(true)
    }

    /// The next raw piece to send on; None at the end of the body.
    async fn next<C: AsyncRead + Unpin>(&mut self, client: &mut C) -> io::Result<Option<Vec<u8>>> {
        if !self.raw.is_empty() {
            return Ok(Some(std::mem::take(&mut self.raw)));
        }
        if let Some(e) = &self.error {
            return Err(io::Error::new(io::ErrorKind::InvalidData, e.clone()));
        }
        if !self.fill(client).await? {
            return Ok(None);
        }
        Ok(Some(std::mem::take(&mut self.raw)))
    }
}

/// Chunked transfer coding, decoded as it arrives (the push check reads the content).
#[derive(Default)]
struct Dechunk {
    line: Vec<u8>,
    /// Data bytes left in the current chunk, then its CRLF (2).
    data_left: u64,
    crlf_left: u8,
    finished: bool,
}

impl Dechunk {
    fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<u8>) {
        while !bytes.is_empty() && !self.finished {
            if self.data_left > 0 {
                let n = bytes
                    .len()
                    .min(usize::try_from(self.data_left).unwrap_or(usize::MAX));
                out.extend_from_slice(&bytes[..n]);
                self.data_left -= n as u64;
                bytes = &bytes[n..];
                if self.data_left == 0 {
                    self.crlf_left = 2;
                }
                continue;
            }
            if self.crlf_left > 0 {
                self.crlf_left -= 1;
                bytes = &bytes[1..];
                continue;
            }
            let b = bytes[0];
            bytes = &bytes[1..];
            if b != b'\n' {
                if self.line.len() < 64 {
                    self.line.push(b);
                }
                continue;
            }
            let line = std::mem::take(&mut self.line);
            let size = line
                .split(|&c| c == b';' || c == b'\r')
                .next()
                .unwrap_or_default();
            let size = std::str::from_utf8(size)
                .ok()
                .and_then(|s| u64::from_str_radix(s.trim(), 16).ok());
            match size {
                Some(0) | None => self.finished = true, // the framing check reports errors
                Some(n) => self.data_left = n,
            }
        }
    }
}

fn cap_note(cap: u64) -> String {
    format!("cut at [network].max_mb_per_connection ({cap} bytes both ways)")
}

/// An answer from the proxy itself, closing the connection.
fn answer((status, reason): (u16, &str), message: &str) -> Vec<u8> {
    let body = format!("cordon egress proxy: {message}\n");
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A stream that first yields bytes already read from it (a TLS ClientHello that arrived
/// with the CONNECT head).
struct Prefixed<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    fn new(prefix: Vec<u8>, inner: S) -> Self {
        Self {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = (self.prefix.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_decodes_in_any_pieces() {
        let raw = b"5\r\nhello\r\n7;x=1\r\n, world\r\n0\r\n\r\n";
        for split in 0..raw.len() {
            let mut d = Dechunk::default();
            let mut out = Vec::new();
            d.feed(&raw[..split], &mut out);
            d.feed(&raw[split..], &mut out);
            assert_eq!(out, b"hello, world", "split {split}");
        }
    }

    #[test]
    fn a_body_reader_stops_at_the_end_of_its_framing() {
        let r = BodyReader::new(Body::Length(3), b"abcGET /smuggled".to_vec(), false);
        assert_eq!(r.raw, b"abc");
        assert!(r.done && r.decoded.is_empty());
        let r = BodyReader::new(Body::Chunked, b"3\r\nabc\r\n0\r\n\r\nGET /x".to_vec(), true);
        assert_eq!(r.raw, b"3\r\nabc\r\n0\r\n\r\n");
        assert_eq!(r.decoded, b"abc");
        assert!(r.done);
        let mut r = BodyReader::new(Body::Chunked, b"3\r\nabcX\r\n".to_vec(), false);
        assert!(
            r.error.is_some(),
            "a malformed chunk is an error, not a short body"
        );
        let mut empty: &[u8] = &[];
        let raw = std::mem::take(&mut r.raw);
        assert!(!raw.ends_with(b"X\r\n"));
        let e = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(r.next(&mut empty));
        assert!(e.is_err());
    }
}
