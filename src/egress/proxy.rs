//! The egress proxy: an HTTP forward proxy (plain requests in absolute form, and `CONNECT`
//! tunnels) that confined processes reach through a listener in their own network namespace,
//! and that reaches out from the server's.
//!
//! Owns the connections end to end: reading one bounded request head under a deadline (a
//! slow or huge head is refused, not waited for), telling calls apart by the credentials in
//! their proxy URL, judging the target by name before any DNS query, resolving it itself,
//! dropping non-public addresses unless `allow_private` lists them, connecting to an address
//! it checked (never a second lookup, so DNS rebinding gains nothing), and relaying bytes
//! within the per-connection cap. Every connection, allowed or refused, becomes a
//! [`ConnectionRecord`] for its call's result and the audit log. It runs on its own small
//! runtime, so it serves the same whether its owner is async (the server) or not (the CLI).
//! The rules themselves are `rules`; the wire format `http`; where the listener comes from is
//! `confine` (the sandbox init creates it inside the namespace).

use super::http::{self, Body, HeadError, Request, RequestHead};
use super::pattern::{Host, Target};
use super::rules::{EgressRules, Refusal};
use super::{credentials, relay};
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// How long a client has to send its whole request head (slowloris bound), by default.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long name resolution may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections handled at once, over all calls; more wait in the listen backlog.
const MAX_IN_FLIGHT: usize = 512;
/// Unattributed connections kept for the audit (the newest).
const KEEP_UNATTRIBUTED: usize = 256;
/// Connections listed per call (or per interpreter cell); more are counted, not listed, so a
/// loop of refused attempts cannot grow the server's memory or the result without bound.
pub const MAX_LISTED: usize = 256;
/// After a call's processes are dead, how long its connections may take to wind down (their
/// clients are gone, so the kernel has already closed them) before they are cut.
const FINISH_GRACE: Duration = Duration::from_millis(200);
/// The user name in the proxy URL; the password is the call's token.
pub const PROXY_USER: &str = "cordon";

/// One connection a confined process made (or tried to make) through the proxy.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ConnectionRecord {
    /// `CONNECT` for a tunnel, else the plain-HTTP method.
    pub method: String,
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    /// The address connected to, when it got that far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Client to target.
    pub bytes_sent: u64,
    /// Target to client.
    pub bytes_received: u64,
    pub duration_ms: u64,
    /// Why it was refused, or why it ended early (the byte cap, a failed connect).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What a call's processes did on the network, for its result.
#[derive(Debug, Clone, Default, Serialize, JsonSchema)]
pub struct NetworkReport {
    /// The proxy's id of this call (the `call` of its connections' `egress` audit records).
    pub call: u64,
    /// Every connection through the proxy, in the order they ended.
    pub connections: Vec<ConnectionRecord>,
    /// One line per refused connection: what was asked, why it was refused, how to allow it.
    pub refused: Vec<String>,
    /// Connections beyond the first 256, counted but not listed (0 normally).
    pub omitted: u64,
}

/// How names become addresses; the system resolver by default, a fake in tests.
pub trait Resolve: Send + Sync + 'static {
    fn resolve(
        &self,
        name: &str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;
}

/// `getaddrinfo`, through tokio's blocking pool.
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(
        &self,
        name: &str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> {
        let query = (name.to_owned(), port);
        Box::pin(async move {
            let addrs = tokio::net::lookup_host(query).await?;
            let mut out: Vec<IpAddr> = Vec::new();
            for a in addrs {
                if !out.contains(&a.ip()) {
                    out.push(a.ip());
                }
            }
            Ok(out)
        })
    }
}

/// Where every finished connection goes besides its call's report: the server's audit log.
/// The proxy knows nothing of who made a call; the sink captures that itself when the call
/// registers (in the caller's task) and gets it back with each of the call's connections.
pub trait ConnectionAudit: Send + Sync {
    /// Called by [`Proxy::open_call`] in the registering task: what to hand back with each
    /// of this call's connections (over HTTP, its session and subject).
    fn call_context(&self) -> Option<CallContext>;
    /// One finished connection: its call's id and context (None when it named no valid call).
    fn record(&self, call: Option<u64>, context: Option<&CallContext>, record: &ConnectionRecord);
}

/// What a [`ConnectionAudit`] keeps about a call, opaque to the proxy.
pub type CallContext = Arc<dyn std::any::Any + Send + Sync>;

struct CallState {
    id: u64,
    opened: AtomicUsize,
    active: AtomicUsize,
    records: Mutex<Vec<ConnectionRecord>>,
    /// Records not kept because `records` was full.
    omitted: AtomicU64,
    cancel: CancellationToken,
    /// The audit sink's context for this call (see [`ConnectionAudit::call_context`]).
    context: Option<CallContext>,
}

/// What the proxy does besides the policy's rules.
#[derive(Clone)]
pub struct ProxyOptions {
    pub resolver: Arc<dyn Resolve>,
    /// How long a client has to send its whole request head.
    pub head_timeout: Duration,
}

impl Default for ProxyOptions {
    fn default() -> Self {
        Self {
            resolver: Arc::new(SystemResolver),
            head_timeout: HEAD_TIMEOUT,
        }
    }
}

struct Shared {
    rules: EgressRules,
    head_timeout: Duration,
    resolver: Arc<dyn Resolve>,
    calls: Mutex<HashMap<String, Arc<CallState>>>,
    next_call: AtomicU64,
    unattributed: Mutex<VecDeque<ConnectionRecord>>,
    unattributed_count: AtomicU64,
    in_flight: Arc<tokio::sync::Semaphore>,
    audit: Mutex<Option<Arc<dyn ConnectionAudit>>>,
}

/// The running proxy. Dropping it stops every listener and connection.
pub struct Proxy {
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
    stop: CancellationToken,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(rt) = self.runtime.take() {
            // Dropping a runtime inside another's async context would panic.
            rt.shutdown_background();
        }
    }
}

/// Stops one listener's accept loop when dropped (its sandbox init is gone).
pub struct ListenerGuard(CancellationToken);

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

impl Proxy {
    pub fn start(rules: EgressRules) -> io::Result<Self> {
        Self::with_options(rules, ProxyOptions::default())
    }

    pub fn with_options(rules: EgressRules, options: ProxyOptions) -> io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cordon-egress")
            .enable_all()
            .build()?;
        Ok(Self {
            shared: Arc::new(Shared {
                rules,
                head_timeout: options.head_timeout,
                resolver: options.resolver,
                calls: Mutex::new(HashMap::new()),
                next_call: AtomicU64::new(1),
                unattributed: Mutex::new(VecDeque::new()),
                unattributed_count: AtomicU64::new(0),
                in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
                audit: Mutex::new(None),
            }),
            runtime: Some(runtime),
            stop: CancellationToken::new(),
        })
    }

    pub fn rules(&self) -> &EgressRules {
        &self.shared.rules
    }

    /// Every finished connection also goes to `sink` (the server's audit log).
    pub fn set_audit(&self, sink: Arc<dyn ConnectionAudit>) {
        *lock(&self.shared.audit) = Some(sink);
    }

    /// Serves a listening socket (made inside a sandbox's network namespace; a descriptor
    /// works across namespaces) until the guard is dropped.
    pub fn serve(&self, listener: OwnedFd) -> io::Result<ListenerGuard> {
        self.serve_std(std::net::TcpListener::from(listener))
    }

    pub fn serve_std(&self, listener: std::net::TcpListener) -> io::Result<ListenerGuard> {
        listener.set_nonblocking(true)?;
        let runtime = self.runtime.as_ref().expect("present until drop");
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let stop = self.stop.child_token();
        let guard = ListenerGuard(stop.clone());
        let shared = Arc::clone(&self.shared);
        runtime.spawn(async move {
            loop {
                let permit = tokio::select! {
                    _ = stop.cancelled() => return,
                    p = Arc::clone(&shared.in_flight).acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => return,
                    },
                };
                let accepted = tokio::select! {
                    _ = stop.cancelled() => return,
                    a = listener.accept() => a,
                };
                match accepted {
                    Ok((stream, _)) => {
                        let shared = Arc::clone(&shared);
                        let stop = stop.clone();
                        tokio::spawn(async move {
                            let _permit = permit;
                            handle(shared, stream, stop).await;
                        });
                    }
                    Err(e) => {
                        tracing::warn!("egress proxy: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
        Ok(guard)
    }

    /// Registers a call: its connections are told apart by the token in its proxy URL.
    pub fn open_call(&self) -> CallTicket {
        let id = self.shared.next_call.fetch_add(1, Ordering::Relaxed);
        let token = random_token();
        let state = Arc::new(CallState {
            id,
            opened: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            records: Mutex::new(Vec::new()),
            omitted: AtomicU64::new(0),
            cancel: self.stop.child_token(),
            context: lock(&self.shared.audit)
                .clone()
                .and_then(|sink| sink.call_context()),
        });
        lock(&self.shared.calls).insert(token.clone(), Arc::clone(&state));
        CallTicket {
            shared: Arc::clone(&self.shared),
            token,
            state,
        }
    }

    /// Connections that named no valid call (and so were refused), the newest last.
    pub fn unattributed(&self) -> Vec<ConnectionRecord> {
        lock(&self.shared.unattributed).iter().cloned().collect()
    }
}

/// One call's registration with the proxy. Dropping it forgets the token and cuts what is
/// left of the call's connections.
pub struct CallTicket {
    shared: Arc<Shared>,
    token: String,
    state: Arc<CallState>,
}

impl CallTicket {
    pub fn id(&self) -> u64 {
        self.state.id
    }

    /// The proxy URL a confined process of this call uses (its namespace's loopback).
    pub fn url(&self, listen: SocketAddr) -> String {
        format!("http://{PROXY_USER}:{}@{listen}", self.token)
    }

    /// The variables that point curl, Python, git and most other clients at the proxy.
    pub fn env(&self, listen: SocketAddr) -> Vec<(String, String)> {
        let url = self.url(listen);
        ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"]
            .into_iter()
            .flat_map(|n| [n.to_owned(), n.to_ascii_lowercase()])
            .map(|n| (n, url.clone()))
            .collect()
    }

    /// The call's processes are dead: lets its connections finish winding down (briefly),
    /// cuts the rest, and returns what they did.
    pub async fn finish(self) -> NetworkReport {
        let deadline = Instant::now() + FINISH_GRACE;
        while self.state.active.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.state.cancel.cancel();
        // Cut connections record themselves as they unwind.
        let deadline = Instant::now() + FINISH_GRACE;
        while self.state.active.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.drain()
    }

    /// Lets the connections open now finish winding down (briefly; a response the client has
    /// read may still be on its way to the proxy's record), then drains. A long-lived worker
    /// calls it after each cell; a connection it keeps open past that is reported when it ends.
    pub async fn settled(&self) -> NetworkReport {
        let deadline = Instant::now() + FINISH_GRACE;
        while self.state.active.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.drain()
    }

    /// What the call's connections that have ended did, since the last drain (a long-lived
    /// worker reports per cell; one still open is reported once it ends).
    pub fn drain(&self) -> NetworkReport {
        let connections = std::mem::take(&mut *lock(&self.state.records));
        let refused = connections
            .iter()
            .filter(|c| !c.allowed)
            .map(|c| {
                format!(
                    "{} {}:{} refused: {}",
                    c.method,
                    c.host,
                    c.port,
                    c.note.as_deref().unwrap_or("refused")
                )
            })
            .collect();
        NetworkReport {
            call: self.state.id,
            connections,
            refused,
            omitted: self.state.omitted.swap(0, Ordering::AcqRel),
        }
    }
}

impl Drop for CallTicket {
    fn drop(&mut self) {
        lock(&self.shared.calls).remove(&self.token);
        self.state.cancel.cancel();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// 128 random bits, hex.
fn random_token() -> String {
    let mut bytes = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| io::Read::read_exact(&mut f, &mut bytes))
        .is_ok();
    if !filled {
        // Not a secret boundary (attribution only; see SECURITY.md), but never predictable.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
            ^ (std::process::id() as u128) << 64;
        bytes = seed.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What one connection turned out to be, built up as it goes.
struct Attempt {
    started: Instant,
    record: ConnectionRecord,
    call: Option<Arc<CallState>>,
    /// Refused only for want of credentials the client had not been asked for yet: audited,
    /// not warned about (git asks to be challenged on every connection).
    challenge_only: bool,
}

impl Attempt {
    fn finish(mut self, shared: &Shared) {
        self.record.duration_ms = self.started.elapsed().as_millis() as u64;
        let sink = lock(&shared.audit).clone();
        if let Some(sink) = sink {
            let call = self.call.as_ref();
            sink.record(
                call.map(|c| c.id),
                call.and_then(|c| c.context.as_ref()),
                &self.record,
            );
        }
        match &self.call {
            Some(call) => {
                let mut records = lock(&call.records);
                if records.len() < MAX_LISTED {
                    records.push(self.record);
                } else {
                    call.omitted.fetch_add(1, Ordering::AcqRel);
                }
                drop(records);
                call.active.fetch_sub(1, Ordering::AcqRel);
            }
            None => {
                // Logged, but not one line per connection of a flood.
                let n = shared.unattributed_count.fetch_add(1, Ordering::AcqRel) + 1;
                if !self.challenge_only && (n <= 20 || n.is_multiple_of(1000)) {
                    tracing::warn!(
                        "egress proxy: refused an unattributed connection to {}:{} ({n} so far): {}",
                        self.record.host,
                        self.record.port,
                        self.record.note.as_deref().unwrap_or_default()
                    );
                }
                let mut kept = lock(&shared.unattributed);
                if kept.len() >= KEEP_UNATTRIBUTED {
                    kept.pop_front();
                }
                kept.push_back(self.record);
            }
        }
    }
}

async fn handle(shared: Arc<Shared>, mut client: TcpStream, stop: CancellationToken) {
    let _ = client.set_nodelay(true);
    let mut attempt = Attempt {
        started: Instant::now(),
        record: ConnectionRecord {
            method: String::new(),
            host: String::new(),
            port: 0,
            allowed: false,
            address: None,
            bytes_sent: 0,
            bytes_received: 0,
            duration_ms: 0,
            note: None,
        },
        call: None,
        challenge_only: false,
    };
    let mut buf = Vec::with_capacity(4096);
    let head = tokio::select! {
        _ = stop.cancelled() => return,
        h = tokio::time::timeout(shared.head_timeout, read_head(&mut client, &mut buf)) => h,
    };
    let head = match head {
        Err(_) => {
            let why = format!(
                "the request head did not arrive within {:?}",
                shared.head_timeout
            );
            let _ = client
                .write_all(&response(408, "Request Timeout", &why, &[]))
                .await;
            attempt.record.note = Some(why);
            return attempt.finish(&shared);
        }
        Ok(Err(ReadHeadError::Io)) | Ok(Err(ReadHeadError::Closed)) => return,
        Ok(Err(ReadHeadError::Head(e))) => {
            let why = e.to_string();
            let status = if e == HeadError::TooLarge || e == HeadError::TooManyHeaders {
                (431, "Request Header Fields Too Large")
            } else {
                (400, "Bad Request")
            };
            let _ = client
                .write_all(&response(status.0, status.1, &why, &[]))
                .await;
            attempt.record.note = Some(why);
            return attempt.finish(&shared);
        }
        Ok(Ok(head)) => head,
    };
    let target = match &head.request {
        Request::Connect { target } => {
            attempt.record.method = "CONNECT".into();
            target.clone()
        }
        Request::Forward { method, target, .. } => {
            attempt.record.method = method.clone();
            target.clone()
        }
    };
    attempt.record.host = target.host.to_string();
    attempt.record.port = target.port;

    // Which call is this? Without valid credentials, nobody's: refused, and the 407 lets a
    // client that waits to be asked (git's default `anyauth`) send them.
    let sent_credentials = head.header_values("proxy-authorization").next().is_some();
    let call = credentials::token(&head).and_then(|token| lock(&shared.calls).get(&token).cloned());
    let Some(call) = call else {
        let why = if sent_credentials {
            "no valid cordon proxy credentials (use the HTTP_PROXY URL this call was given)"
        } else {
            // A client that waits to be challenged (git's default `anyauth`) sends them next.
            "no cordon proxy credentials sent (challenged with 407; a client with this call's \
             HTTP_PROXY URL answers with them)"
        };
        attempt.challenge_only = !sent_credentials;
        let _ = client
            .write_all(&response(
                407,
                "Proxy Authentication Required",
                why,
                &["Proxy-Authenticate: Basic realm=\"cordon\""],
            ))
            .await;
        attempt.record.note = Some(why.into());
        return attempt.finish(&shared);
    };
    call.active.fetch_add(1, Ordering::AcqRel);
    attempt.call = Some(Arc::clone(&call));
    let cancel = call.cancel.clone();
    let opened = call.opened.fetch_add(1, Ordering::AcqRel) + 1;
    let rules = &shared.rules;

    let refusal = if opened > rules.max_connections_per_call {
        Some(Refusal::TooManyConnections {
            max: rules.max_connections_per_call,
            site: rules.caps_site.clone(),
        })
    } else {
        check_request(&head, &target).err()
    };
    let refusal = match refusal {
        Some(r) => Some(r),
        None => rules.judge(&target).err(),
    };
    if let Some(refusal) = refusal {
        return refuse(&shared, attempt, &mut client, refusal).await;
    }

    // Allowed by name: only now is it resolved.
    let resolved = match &target.host {
        Host::Ip(ip) => Ok(vec![*ip]),
        Host::Name(name) => {
            match tokio::time::timeout(RESOLVE_TIMEOUT, shared.resolver.resolve(name, target.port))
                .await
            {
                Ok(Ok(addrs)) => Ok(addrs),
                Ok(Err(e)) => Err(Refusal::Unresolved(e.to_string())),
                Err(_) => Err(Refusal::Unresolved(format!(
                    "no answer within {}s",
                    RESOLVE_TIMEOUT.as_secs()
                ))),
            }
        }
    };
    let usable = match resolved.and_then(|r| rules.usable_addresses(&r)) {
        Ok(u) => u,
        Err(refusal) => return refuse(&shared, attempt, &mut client, refusal).await,
    };
    attempt.record.allowed = true;
    let upstream = tokio::select! {
        _ = cancel.cancelled() => None,
        u = connect_any(&usable, target.port) => Some(u),
    };
    let mut upstream = match upstream {
        None => {
            attempt.record.note = Some("the call ended".into());
            return attempt.finish(&shared);
        }
        Some(Err(e)) => {
            let why = format!("cannot connect to {target}: {e}");
            let _ = client
                .write_all(&response(502, "Bad Gateway", &why, &[]))
                .await;
            attempt.record.note = Some(why);
            return attempt.finish(&shared);
        }
        Some(Ok((stream, addr))) => {
            attempt.record.address = Some(addr.to_string());
            stream
        }
    };
    let _ = upstream.set_nodelay(true);
    let cap = rules.max_bytes_per_connection;
    let early = buf.split_off(head.len);
    let outcome = match &head.request {
        Request::Connect { .. } => {
            if client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_err()
            {
                return attempt.finish(&shared);
            }
            relay::relay(client, upstream, early, None, cap, &cancel).await
        }
        Request::Forward { .. } => {
            let Some(forwarded) = head.forwarded() else {
                return attempt.finish(&shared);
            };
            let body = head.body().unwrap_or(Body::Length(0));
            if upstream.write_all(&forwarded).await.is_err() {
                attempt.record.note = Some(format!("{target} closed the connection"));
                return attempt.finish(&shared);
            }
            relay::relay(client, upstream, early, Some(body), cap, &cancel).await
        }
    };
    attempt.record.bytes_sent = outcome.sent;
    attempt.record.bytes_received = outcome.received;
    attempt.record.note = outcome.note;
    attempt.finish(&shared)
}

/// Checks a plain request's own consistency: its `Host` names its target, its body framing
/// is unambiguous. CONNECT has nothing to check here.
fn check_request(head: &RequestHead, target: &Target) -> Result<(), Refusal> {
    if let Request::Forward { .. } = head.request {
        let host = head
            .single_header("host")
            .map_err(|e| Refusal::BadRequest(e.to_string()))?;
        match host {
            Some(h) if http::host_matches(h, target) => {}
            Some(h) => {
                return Err(Refusal::BadRequest(format!(
                    "the Host header `{}` does not name the request's target {target}; a proxy \
                     forwards a request only to the host it names",
                    h.escape_debug()
                )));
            }
            None => {
                return Err(Refusal::BadRequest(
                    "a plain-HTTP request needs a Host header naming its target".into(),
                ));
            }
        }
        head.body()
            .map_err(|e| Refusal::BadRequest(e.to_string()))?;
    }
    Ok(())
}

async fn refuse(shared: &Shared, mut attempt: Attempt, client: &mut TcpStream, refusal: Refusal) {
    let message = refusal.to_string();
    let (status, reason) = match refusal {
        Refusal::BadRequest(_) => (400, "Bad Request"),
        Refusal::Unresolved(_) => (502, "Bad Gateway"),
        Refusal::TooManyConnections { .. } => (429, "Too Many Requests"),
        _ => (403, "Forbidden"),
    };
    let line = format!(
        "{} {}:{} refused: {message}",
        attempt.record.method, attempt.record.host, attempt.record.port
    );
    let _ = client
        .write_all(&response(status, reason, &line, &[]))
        .await;
    attempt.record.allowed = false;
    attempt.record.note = Some(message);
    attempt.finish(shared)
}

enum ReadHeadError {
    Io,
    Closed,
    Head(HeadError),
}

async fn read_head(
    client: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Result<RequestHead, ReadHeadError> {
    let mut chunk = [0u8; 4096];
    loop {
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|_| ReadHeadError::Io)?;
        if n == 0 {
            return Err(ReadHeadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(head) = http::parse_head(buf).map_err(ReadHeadError::Head)? {
            return Ok(head);
        }
    }
}

fn response(status: u16, reason: &str, message: &str, extra: &[&str]) -> Vec<u8> {
    let body = format!("cordon egress proxy: {message}\n");
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for h in extra {
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&body);
    out.into_bytes()
}

async fn connect_any(addrs: &[IpAddr], port: u16) -> io::Result<(TcpStream, SocketAddr)> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
    for &ip in addrs {
        let addr = SocketAddr::new(ip, port);
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok((s, addr)),
            Ok(Err(e)) => last = e,
            Err(_) => last = io::Error::new(io::ErrorKind::TimedOut, "connect timed out"),
        }
    }
    Err(last)
}
