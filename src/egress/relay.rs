//! Relaying a proxied connection's bytes: both directions at once, counted against the
//! per-connection byte cap, a plain request's client side cut at the end of its body (nothing
//! pipelined or smuggled behind it reaches the target), everything stopped when the call ends.
//!
//! Owns the copying only; what may be relayed, and to where, is decided before (`proxy`).

use super::http::{Body, ChunkedEnd};
use super::secrets::{Detector, Exfiltration};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

const RELAY_BUFFER: usize = 64 * 1024;

pub(super) struct RelayOutcome {
    pub sent: u64,
    pub received: u64,
    pub note: Option<String>,
    /// A placeholder of a credential not bound to the target, found in a plain request's
    /// body (what followed it was not sent).
    pub exfiltration: Option<Exfiltration>,
}

/// Relays until both sides are done, the byte cap is reached or the call ends. `early` is
/// what the client sent behind its head. `body`: a plain request, whose client→target
/// direction ends with its body (nothing behind it reaches the target); None: a tunnel.
/// `scan`: what watches a plain request's body for placeholders of unbound credentials.
pub(super) async fn relay(
    client: TcpStream,
    upstream: TcpStream,
    early: Vec<u8>,
    body: Option<Body>,
    cap: u64,
    cancel: &CancellationToken,
    mut scan: Option<Detector<'_>>,
) -> RelayOutcome {
    let mut found: Option<Exfiltration> = None;
    let total = AtomicU64::new(0);
    let sent = AtomicU64::new(0);
    let received = AtomicU64::new(0);
    let stop = cancel.child_token();
    let capped = AtomicBool::new(false);
    let (mut client_r, mut client_w) = client.into_split();
    let (mut up_r, mut up_w) = upstream.into_split();
    let counters = Counters {
        total: &total,
        cap,
        capped: &capped,
        stop: &stop,
    };
    let up = async {
        let r = pump_up(
            &mut client_r,
            &mut up_w,
            early,
            body,
            &sent,
            &counters,
            (&mut scan, &mut found),
        )
        .await;
        if body.is_none() {
            // A tunnel's client finished sending: pass the half-close on.
            let _ = up_w.shutdown().await;
        }
        r
    };
    let down = async {
        let r = pump(&mut up_r, &mut client_w, &received, &counters).await;
        let _ = client_w.shutdown().await;
        // A plain request is over when its response is: stop reading the client.
        if body.is_some() {
            stop.cancel();
        }
        r
    };
    let (up_result, down_result) = tokio::join!(up, down);
    let note = if capped.load(Ordering::Acquire) {
        Some(format!(
            "cut at [network].max_mb_per_connection ({} bytes both ways)",
            cap
        ))
    } else if cancel.is_cancelled() {
        Some("cut when the call ended".into())
    } else {
        match (up_result, down_result) {
            (Err(e), _) | (_, Err(e)) if e.kind() != io::ErrorKind::ConnectionReset => {
                Some(format!("ended with an error: {e}"))
            }
            _ => None,
        }
    };
    RelayOutcome {
        sent: sent.load(Ordering::Acquire),
        received: received.load(Ordering::Acquire),
        note,
        exfiltration: found,
    }
}

struct Counters<'a> {
    total: &'a AtomicU64,
    cap: u64,
    capped: &'a AtomicBool,
    stop: &'a CancellationToken,
}

impl Counters<'_> {
    /// Takes `n` bytes from the budget; false (and everything stops) when it runs out.
    fn take(&self, n: usize) -> bool {
        let before = self.total.fetch_add(n as u64, Ordering::AcqRel);
        if before + n as u64 > self.cap {
            self.capped.store(true, Ordering::Release);
            self.stop.cancel();
            return false;
        }
        true
    }
}

async fn pump<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    count: &AtomicU64,
    c: &Counters<'_>,
) -> io::Result<()> {
    let mut buf = vec![0u8; RELAY_BUFFER];
    loop {
        let n = tokio::select! {
            _ = c.stop.cancelled() => return Ok(()),
            n = r.read(&mut buf) => n?,
        };
        if n == 0 || !pass_on(w, &buf[..n], count, c).await? {
            return Ok(());
        }
    }
}

/// Writes `bytes` on, counted against the call's byte cap and in `count`; false when the cap
/// or the call's end stops the relay (nothing is written then).
async fn pass_on<W: AsyncWrite + Unpin>(
    w: &mut W,
    bytes: &[u8],
    count: &AtomicU64,
    c: &Counters<'_>,
) -> io::Result<bool> {
    if !c.take(bytes.len()) {
        return Ok(false);
    }
    tokio::select! {
        _ = c.stop.cancelled() => return Ok(false),
        w = w.write_all(bytes) => w?,
    }
    count.fetch_add(bytes.len() as u64, Ordering::AcqRel);
    Ok(true)
}

/// Client → target: a tunnel's bytes, or a plain request's body and nothing after it.
async fn pump_up<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
    early: Vec<u8>,
    body: Option<Body>,
    count: &AtomicU64,
    c: &Counters<'_>,
    (scan, found): (&mut Option<Detector<'_>>, &mut Option<Exfiltration>),
) -> io::Result<()> {
    let mut left = match body {
        Some(Body::Length(n)) => Some(n),
        _ => None,
    };
    let mut chunked = matches!(body, Some(Body::Chunked)).then(ChunkedEnd::default);
    let mut pending = early;
    let mut buf = vec![0u8; RELAY_BUFFER];
    loop {
        if pending.is_empty() {
            if left == Some(0) || chunked.as_ref().is_some_and(ChunkedEnd::is_done) {
                return Ok(());
            }
            let n = tokio::select! {
                _ = c.stop.cancelled() => return Ok(()),
                n = r.read(&mut buf) => n?,
            };
            if n == 0 {
                return Ok(());
            }
            pending.extend_from_slice(&buf[..n]);
        }
        let mut n = pending.len();
        if let Some(l) = left.as_mut() {
            n = n.min(usize::try_from(*l).unwrap_or(usize::MAX));
            *l -= n as u64;
        }
        if let Some(ch) = chunked.as_mut() {
            n = ch
                .feed(&pending[..n])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        }
        if let Some(exf) = scan.as_mut().and_then(|d| d.feed(&pending[..n])) {
            // Not sent on: the request is cut here, and the response (if any) with it.
            *found = Some(exf);
            c.stop.cancel();
            return Ok(());
        }
        if n == 0 || !pass_on(w, &pending[..n], count, c).await? {
            return Ok(());
        }
        if body.is_some() && n < pending.len() {
            // What follows the body is not forwarded (a pipelined or smuggled request).
            return Ok(());
        }
        pending.clear();
    }
}
