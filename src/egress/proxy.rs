//! The egress proxy: an HTTP forward proxy (plain requests in absolute form, and `CONNECT`
//! tunnels) that confined processes reach through a listener in their own network namespace,
//! and that reaches out from the server's.
//!
//! Owns the connections end to end: reading one bounded request head under a deadline (a
//! slow or huge head is refused, not waited for), telling calls apart by the credentials in
//! their proxy URL, judging the target by name before any DNS query, resolving it itself,
//! dropping non-public addresses unless `allow_private` lists them, connecting to an address
//! it checked (never a second lookup, so DNS rebinding gains nothing), and relaying bytes
//! within the per-connection cap. How many connections it holds at once, and whose, is
//! `admission`: a connection counts against its call's own bounds once its credentials are
//! seen, and against the proxy's overall one only once its head is complete. Every connection, allowed or refused, becomes a
//! [`ConnectionRecord`] for its call's result and the audit log. It runs on its own small
//! runtime, so it serves the same whether its owner is async (the server) or not (the CLI).
//! The rules themselves are `rules`; the wire format `http`; where the listener comes from is
//! `confine` (the sandbox init creates it inside the namespace). A target a credential, a
//! rule or `[network.git]` names is handed, once connected, to `intercept` (TLS terminated,
//! one request read and judged); every other one is relayed as bytes. The credentials'
//! values (`secrets::Vault`) and the upstream TLS configuration are loaded when the proxy
//! starts, and every call's environment gets the placeholders and CA variables.

use super::admission::{Admission, AnonymousSlot, CallCounts, CallSlot, Limits};
use super::http::{self, Body, HeadError, OriginHead, Request, RequestHead};
use super::pattern::{Host, Target};
use super::rules::{EgressRules, Refusal};
use super::secrets::{Detector, Vault};
use super::{credentials, intercept, relay, tls};
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

/// How long a client has to send its whole request head (slowloris bound), by default; its
/// credentials must come within [`super::admission::ANONYMOUS_TIMEOUT`].
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long name resolution may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Unattributed connections kept for the audit (the newest).
const KEEP_UNATTRIBUTED: usize = 256;
/// Unattributed connections that never sent a complete head (idle, evicted, timed out) get
/// an audit record each up to this many per second; the rest are counted and logged. A
/// flood of empty sockets must not turn into a flood of audit writes.
const IDLE_AUDITS_PER_SECOND: u32 = 50;
/// Connections listed per call (or per interpreter cell); more are counted, not listed, so a
/// loop of refused attempts cannot grow the server's memory or the result without bound.
pub(crate) const MAX_LISTED: usize = 256;
/// After a call's processes are dead, how long its connections may take to wind down (their
/// clients are gone, so the kernel has already closed them) before they are cut.
const FINISH_GRACE: Duration = Duration::from_millis(200);
/// The hosts confined clients reach without the proxy: the sandbox's own loopback.
pub(crate) const NO_PROXY: &str = "localhost,127.0.0.1,::1";

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
    /// The proxy read this request in clear (a host a credential, `[[network.rules]]` or
    /// `[network.git]` names): `method` is then the request's own, and `path`, `status`,
    /// `credential` and `rule` say what happened to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub intercepted: bool,
    /// The request's path, its query dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The HTTP status the client got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The credential(s) whose real value the proxy put into the request, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// The rule that decided (`network.rules[N] (policy line …)`, `network.git.push_refs …`,
    /// `network.allow_hosts …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The credential whose placeholder was sent where it is not bound (refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exfiltration: Option<String>,
}

impl ConnectionRecord {
    /// A line of a report's `refused` or `exfiltration` list: `METHOD host:port/path`, then
    /// `what`, then the note (or `fallback` without one).
    fn report_line(&self, what: &str, fallback: &str) -> String {
        format!(
            "{} {}:{}{}{what}: {}",
            self.method,
            self.host,
            self.port,
            self.path.as_deref().unwrap_or_default(),
            self.note.as_deref().unwrap_or(fallback)
        )
    }
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
    /// One line per exfiltration attempt: a credential's placeholder sent to a host it is not
    /// bound to (each also in `refused`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exfiltration: Vec<String>,
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
pub(crate) struct SystemResolver;

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
pub(crate) type CallContext = Arc<dyn std::any::Any + Send + Sync>;

struct CallState {
    id: u64,
    opened: AtomicUsize,
    /// Its connections still sending their head, and established (see `admission`).
    counts: Arc<CallCounts>,
    /// Its session's established connections, shared by all the session's calls (HTTP).
    session: Option<Arc<CallCounts>>,
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
    /// How many connections it holds at once, and per call.
    pub limits: Limits,
}

impl Default for ProxyOptions {
    fn default() -> Self {
        Self {
            resolver: Arc::new(SystemResolver),
            head_timeout: HEAD_TIMEOUT,
            limits: Limits::default(),
        }
    }
}

struct Shared {
    rules: EgressRules,
    /// The credentials' real values and placeholders (empty without `[[network.credentials]]`).
    vault: Vault,
    /// The verifying client side of intercepted hosts (None when nothing is intercepted).
    upstream_tls: Option<Arc<rustls::ClientConfig>>,
    /// What every call's environment gets besides the proxy URL: placeholders, CA variables.
    sandbox_env: Vec<(String, String)>,
    head_timeout: Duration,
    resolver: Arc<dyn Resolve>,
    calls: Mutex<HashMap<String, Arc<CallState>>>,
    /// Each MCP session's counts, while one of its calls is registered.
    sessions: Mutex<HashMap<String, std::sync::Weak<CallCounts>>>,
    next_call: AtomicU64,
    unattributed: Mutex<VecDeque<ConnectionRecord>>,
    unattributed_count: AtomicU64,
    /// Audit records of idle unattributed connections in the current second: (second, count).
    idle_audits: Mutex<(u64, u32)>,
    admission: Arc<Admission>,
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
        // What can fail for want of a secret or a root comes before the runtime (which may not
        // be dropped from inside another's async context).
        let vault = Vault::load(&rules.credentials).map_err(io::Error::other)?;
        let upstream_tls = if rules.intercepts_any() {
            Some(tls::client_config(&rules.extra_roots).map_err(io::Error::other)?)
        } else {
            None
        };
        let mut sandbox_env = vault.env();
        if rules.intercepts_any() {
            // Made now, so the CA exists before the first call's view binds its bundle.
            let _ = tls::Authority::global();
            if let Some(bundle) = tls::host_bundle() {
                let path = bundle.to_string_lossy().into_owned();
                sandbox_env.extend(
                    tls::CA_BUNDLE_VARIABLES
                        .iter()
                        .map(|v| ((*v).to_owned(), path.clone())),
                );
            }
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cordon-egress")
            .enable_all()
            .build()?;
        Ok(Self {
            shared: Arc::new(Shared {
                rules,
                vault,
                upstream_tls,
                sandbox_env,
                head_timeout: options.head_timeout,
                resolver: options.resolver,
                calls: Mutex::new(HashMap::new()),
                sessions: Mutex::new(HashMap::new()),
                next_call: AtomicU64::new(1),
                unattributed: Mutex::new(VecDeque::new()),
                unattributed_count: AtomicU64::new(0),
                idle_audits: Mutex::new((0, 0)),
                admission: Admission::new(options.limits),
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
            // Accepting never waits for a permit: a connection is counted against the
            // proxy's bound only once its head is complete and names a call (`admission`),
            // so sockets that send nothing cannot keep others in the listen backlog.
            loop {
                let accepted = tokio::select! {
                    _ = stop.cancelled() => return,
                    a = listener.accept() => a,
                };
                match accepted {
                    Ok((stream, _)) => {
                        let slot = shared.admission.anonymous();
                        let shared = Arc::clone(&shared);
                        let stop = stop.clone();
                        tokio::spawn(handle(shared, stream, stop, slot));
                        // Lets the connection just accepted read what it has sent before a
                        // flood behind it in the backlog evicts it from the anonymous pool.
                        tokio::task::yield_now().await;
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

    /// Registers a call: its connections are told apart by the token in its proxy URL. Over
    /// HTTP its connections also count against its session's share (see `admission`).
    pub fn open_call(&self) -> CallTicket {
        let id = self.shared.next_call.fetch_add(1, Ordering::Relaxed);
        let token = random_token();
        let state = Arc::new(CallState {
            id,
            opened: AtomicUsize::new(0),
            counts: Arc::default(),
            session: caller_share().map(|key| self.shared.session_counts(key)),
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
        format!("http://{}:{}@{listen}", credentials::PROXY_USER, self.token)
    }

    /// The variables that point curl, Python, git and most other clients at the proxy; keep
    /// loopback clients off it (`NO_PROXY`: a server the command started on the sandbox's own
    /// loopback is reached directly, and `localhost` means that loopback, not the host's);
    /// and make Node (22.21+, 24.5+) honour them too (`NODE_USE_ENV_PROXY`). Each variable in
    /// both cases: curl reads the lower-case ones first (and `http_proxy` only so), Python
    /// and Go either.
    pub fn env(&self, listen: SocketAddr) -> Vec<(String, String)> {
        let url = self.url(listen);
        let proxies = ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"].map(|n| (n, url.clone()));
        proxies
            .into_iter()
            .chain([("NO_PROXY", NO_PROXY.to_owned())])
            .flat_map(|(n, v)| [(n.to_owned(), v.clone()), (n.to_ascii_lowercase(), v)])
            .chain([("NODE_USE_ENV_PROXY".to_owned(), "1".to_owned())])
            .chain(self.shared.sandbox_env.iter().cloned())
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
            .map(|c| c.report_line(" refused", "refused"))
            .collect();
        let exfiltration = connections
            .iter()
            .filter(|c| c.exfiltration.is_some())
            .map(|c| c.report_line("", "exfiltration attempt"))
            .collect();
        NetworkReport {
            call: self.state.id,
            connections,
            refused,
            omitted: self.state.omitted.swap(0, Ordering::AcqRel),
            exfiltration,
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
    /// Which of its call's connections this is (1 for the first), once it has a call.
    opened: usize,
    /// Refused only for want of credentials the client had not been asked for yet: audited,
    /// not warned about (git asks to be challenged on every connection).
    challenge_only: bool,
    /// It named no call and never completed its head (idle, evicted, timed out): audited at a
    /// bounded rate (see [`IDLE_AUDITS_PER_SECOND`]).
    idle: bool,
}

impl Attempt {
    fn new() -> Self {
        Self {
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
                intercepted: false,
                path: None,
                status: None,
                credential: None,
                rule: None,
                exfiltration: None,
            },
            call: None,
            opened: 0,
            challenge_only: false,
            idle: false,
        }
    }

    /// The connection is `call`'s: it is in the call's report, and counts as one of the
    /// connections it opened, from now on.
    fn attribute(&mut self, call: Arc<CallState>) {
        call.active.fetch_add(1, Ordering::AcqRel);
        self.opened = call.opened.fetch_add(1, Ordering::AcqRel) + 1;
        self.call = Some(call);
    }

    /// What was asked, for the record.
    fn describe(&mut self, request: &Request) {
        let (method, target) = match request {
            Request::Connect { target } => ("CONNECT", target),
            Request::Forward { method, target, .. } => (method.as_str(), target),
        };
        self.record.method = method.to_owned();
        self.record.host = target.host.to_string();
        self.record.port = target.port;
    }

    /// The record of an intercepted request: the request's own method, its path and status,
    /// the credential injected and the rule that decided.
    fn intercepted(mut self, o: intercept::Outcome) -> Self {
        let r = &mut self.record;
        r.intercepted = true;
        if let Some(m) = o.method {
            r.method = m;
        }
        r.path = o.path;
        r.status = o.status;
        r.credential = o.credential;
        r.rule = o.rule;
        r.exfiltration = o.exfiltration;
        r.allowed = o.allowed;
        r.bytes_sent = o.sent;
        r.bytes_received = o.received;
        r.note = o.note;
        self
    }

    fn finish(mut self, shared: &Shared) {
        self.record.duration_ms = self.started.elapsed().as_millis() as u64;
        // An idle connection that named nothing was never a request: not a refusal.
        crate::metrics::egress_connection(
            self.record.bytes_sent,
            self.record.bytes_received,
            !self.record.allowed && !self.idle && !self.challenge_only,
        );
        let sink = lock(&shared.audit).clone();
        let audited = self.call.is_some() || !self.idle || shared.idle_audit_allowed();
        if let (Some(sink), true) = (sink, audited) {
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
                    let what = if self.record.host.is_empty() {
                        "a connection that named no call".to_owned()
                    } else {
                        format!(
                            "an unattributed connection to {}:{}",
                            self.record.host, self.record.port
                        )
                    };
                    tracing::warn!(
                        "egress proxy: refused {what} ({n} unattributed so far): {}",
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

/// The share a call registering now belongs to: its MCP session (the task-local the server
/// sets around an HTTP call, read where the call registers, as the audit log reads it), or its
/// subject for a revision without sessions. None over stdio (one client, nothing to share).
fn caller_share() -> Option<String> {
    let origin = crate::audit::CALL_ORIGIN.try_with(Clone::clone).ok()?;
    match (origin.session, origin.subject) {
        (Some(session), _) if session != "stateless" => Some(format!("session {session}")),
        (_, Some(subject)) => Some(format!("subject {subject}")),
        _ => None,
    }
}

impl Shared {
    /// The counts of the share `key`, made when none of its calls holds them any more.
    fn session_counts(&self, key: String) -> Arc<CallCounts> {
        let mut sessions = lock(&self.sessions);
        if let Some(counts) = sessions.get(&key).and_then(std::sync::Weak::upgrade) {
            return counts;
        }
        // Ended sessions leave dead entries; one sweep per new share keeps the map small.
        sessions.retain(|_, w| w.strong_count() > 0);
        let counts: Arc<CallCounts> = Arc::default();
        sessions.insert(key, Arc::downgrade(&counts));
        counts
    }

    /// Whether one more idle unattributed connection gets an audit record this second.
    fn idle_audit_allowed(&self) -> bool {
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let mut window = lock(&self.idle_audits);
        if window.0 != second {
            *window = (second, 0);
        }
        window.1 += 1;
        window.1 <= IDLE_AUDITS_PER_SECOND
    }
}

/// One client connection, start to end: its head read, the call it belongs to, the checks
/// by name, the lookup and the connection upstream, then the bytes carried (and, where the
/// rules ask, intercepted). Every path ends in `attempt.finish`, which records it.
async fn handle(
    shared: Arc<Shared>,
    mut client: TcpStream,
    stop: CancellationToken,
    anonymous: AnonymousSlot,
) {
    let _ = client.set_nodelay(true);
    let mut attempt = Attempt::new();
    let mut buf = Vec::with_capacity(4096);
    let head = read_head(
        &shared,
        &mut client,
        &mut buf,
        &stop,
        anonymous,
        &mut attempt,
    )
    .await;
    let head = match head {
        Ok(head) => head,
        Err(HeadEnd::Quiet) => return,
        Err(HeadEnd::Recorded(why)) => {
            attempt.record.note = Some(why);
            return attempt.finish(&shared);
        }
        Err(HeadEnd::Answered {
            status: (code, reason),
            why,
        }) => {
            let _ = client.write_all(&response(code, reason, &why, &[])).await;
            attempt.record.note = Some(why);
            return attempt.finish(&shared);
        }
    };
    let target = match &head.request {
        Request::Connect { target } | Request::Forward { target, .. } => target.clone(),
    };
    attempt.describe(&head.request);

    let Some(call) = which_call(&shared, &head, &mut attempt) else {
        return challenge(&shared, attempt, &mut client, &head).await;
    };
    let cancel = call.cancel.clone();
    let rules = &shared.rules;

    if let Some(refusal) = refusal_by_name(rules, &attempt, &head, &target) {
        return refuse(&shared, attempt, &mut client, refusal).await;
    }
    // A placeholder in a plain request's head to a host the proxy does not intercept is
    // bound nowhere there: an exfiltration attempt, refused before anything is resolved.
    if matches!(head.request, Request::Forward { .. })
        && !rules.intercepts(&target)
        && let Some(exf) =
            shared
                .vault
                .placeholder_in(&buf[..head.len], &target, false, "the request head")
    {
        attempt.record.exfiltration = Some(exf.credential.clone());
        let message = exf.to_string();
        return answer_refusal(&shared, attempt, &mut client, (403, "Forbidden"), message).await;
    }
    // Allowed by name. From here it holds resources (a lookup, an outbound socket): one of
    // its call's places, and one of the proxy's.
    let _established = match shared
        .admission
        .establish(&call.counts, call.session.as_ref())
    {
        Ok(e) => e,
        Err(crowded) => {
            let message = crowded.to_string();
            return answer_refusal(&shared, attempt, &mut client, crowded.status(), message).await;
        }
    };

    // Only now is it resolved.
    let usable = match resolve(&shared, &target)
        .await
        .and_then(|r| rules.usable_addresses(&r))
    {
        Ok(u) => u,
        Err(refusal) => return refuse(&shared, attempt, &mut client, refusal).await,
    };
    attempt.record.allowed = true;
    let Some(upstream) =
        connect_upstream(&mut attempt, &mut client, &usable, &target, &cancel).await
    else {
        return attempt.finish(&shared);
    };
    let early = buf.split_off(head.len);
    let connection = Connection {
        shared: &shared,
        head: &head,
        target: &target,
        cancel: &cancel,
    };
    connection.carry(attempt, client, upstream, early).await
}

/// The connection upstream, to the first of `usable` that answers, unless the call ends
/// first; `None` (the client told why, where it is waiting for an answer) when there is none.
async fn connect_upstream(
    attempt: &mut Attempt,
    client: &mut TcpStream,
    usable: &[IpAddr],
    target: &Target,
    cancel: &CancellationToken,
) -> Option<TcpStream> {
    let upstream = tokio::select! {
        _ = cancel.cancelled() => None,
        u = connect_any(usable, target.port) => Some(u),
    };
    match upstream {
        None => {
            attempt.record.note = Some("the call ended".into());
            None
        }
        Some(Err(e)) => {
            let why = format!("cannot connect to {target}: {e}");
            let _ = client
                .write_all(&response(502, "Bad Gateway", &why, &[]))
                .await;
            attempt.record.note = Some(why);
            None
        }
        Some(Ok((stream, addr))) => {
            attempt.record.address = Some(addr.to_string());
            Some(stream)
        }
    }
}

/// Which call is this? The complete head decides; credentials seen while it arrived only
/// said whose report it was in meanwhile. Without valid credentials, nobody's.
fn which_call(
    shared: &Shared,
    head: &RequestHead,
    attempt: &mut Attempt,
) -> Option<Arc<CallState>> {
    let call = credentials::token(head).and_then(|token| lock(&shared.calls).get(&token).cloned());
    match (call, attempt.call.clone()) {
        (Some(call), None) => {
            attempt.attribute(Arc::clone(&call));
            Some(call)
        }
        (Some(call), Some(seen)) if Arc::ptr_eq(&call, &seen) => Some(call),
        _ => None,
    }
}

/// A connection of no call is refused, and the 407 lets a client that waits to be asked
/// (git's default `anyauth`) send its credentials.
async fn challenge(
    shared: &Shared,
    mut attempt: Attempt,
    client: &mut TcpStream,
    head: &RequestHead,
) {
    let sent_credentials = head.header_values("proxy-authorization").next().is_some();
    let why = if sent_credentials {
        "no valid cordon proxy credentials (use the HTTP_PROXY URL this call was given, in \
         one Proxy-Authorization field)"
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
    attempt.finish(shared)
}

/// Why a request of a known call is refused before anything is resolved: one connection too
/// many for its call, a head that contradicts itself, or a target the rules do not allow.
fn refusal_by_name(
    rules: &EgressRules,
    attempt: &Attempt,
    head: &RequestHead,
    target: &Target,
) -> Option<Refusal> {
    let refusal = if attempt.opened > rules.max_connections_per_call {
        Some(Refusal::TooManyConnections {
            max: rules.max_connections_per_call,
            site: rules.caps_site.clone(),
        })
    } else {
        check_request(head, target).err()
    };
    match refusal {
        Some(r) => Some(r),
        None => rules.judge(target).err(),
    }
}

/// The target's addresses: an IP as it is, a name looked up within [`RESOLVE_TIMEOUT`].
async fn resolve(shared: &Shared, target: &Target) -> Result<Vec<IpAddr>, Refusal> {
    match &target.host {
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
    }
}

/// An allowed connection with its upstream open: what carrying its bytes needs.
struct Connection<'a> {
    shared: &'a Shared,
    head: &'a RequestHead,
    target: &'a Target,
    cancel: &'a CancellationToken,
}

impl Connection<'_> {
    /// Carries the connection's bytes both ways until either side ends, a bound or the
    /// call's end: a tunnel for CONNECT, a forwarded request otherwise, each intercepted
    /// where the rules ask; then records it.
    async fn carry(
        &self,
        mut attempt: Attempt,
        mut client: TcpStream,
        mut upstream: TcpStream,
        early: Vec<u8>,
    ) {
        let (shared, head, target, cancel) = (self.shared, self.head, self.target, self.cancel);
        let rules = &shared.rules;
        let _ = upstream.set_nodelay(true);
        let cap = rules.max_bytes_per_connection;
        let intercepted = rules.intercepts(target);
        let scope = intercept::Scope {
            rules,
            vault: &shared.vault,
            upstream_tls: shared.upstream_tls.as_ref(),
            head_timeout: shared.head_timeout,
            cancel,
        };
        let outcome = match &head.request {
            Request::Connect { .. } => {
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return attempt.finish(shared);
                }
                if intercepted {
                    let outcome = intercept::tunnel(&scope, client, upstream, early, target).await;
                    return attempt.intercepted(outcome).finish(shared);
                }
                relay::relay(client, upstream, early, None, cap, cancel, None).await
            }
            Request::Forward { method, path, .. } => {
                if intercepted {
                    let origin = origin_head(head, method, path);
                    let outcome =
                        intercept::plain(&scope, client, upstream, origin, early, target).await;
                    return attempt.intercepted(outcome).finish(shared);
                }
                let Some(forwarded) = head.forwarded() else {
                    return attempt.finish(shared);
                };
                let body = head.body().unwrap_or(Body::Length(0));
                if upstream.write_all(&forwarded).await.is_err() {
                    attempt.record.note = Some(format!("{target} closed the connection"));
                    return attempt.finish(shared);
                }
                let scan =
                    (!shared.vault.is_empty()).then(|| Detector::new(&shared.vault, target, false));
                relay::relay(client, upstream, early, Some(body), cap, cancel, scan).await
            }
        };
        attempt.record.bytes_sent = outcome.sent;
        attempt.record.bytes_received = outcome.received;
        attempt.record.note = outcome.note;
        if let Some(exf) = outcome.exfiltration {
            attempt.record.allowed = false;
            attempt.record.exfiltration = Some(exf.credential.clone());
            attempt.record.note = Some(exf.to_string());
        }
        attempt.finish(shared)
    }
}

/// The head an intercepted plain request is sent upstream with: the client's, without the
/// proxy's own fields.
fn origin_head(head: &RequestHead, method: &str, path: &str) -> OriginHead {
    OriginHead {
        method: method.to_owned(),
        path: path.to_owned(),
        minor_version: head.minor_version,
        headers: head
            .headers
            .iter()
            .filter(|(n, _)| {
                !n.eq_ignore_ascii_case("proxy-authorization")
                    && !n.eq_ignore_ascii_case("proxy-connection")
            })
            .cloned()
            .collect(),
        len: head.len,
    }
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

async fn refuse(shared: &Shared, attempt: Attempt, client: &mut TcpStream, refusal: Refusal) {
    let message = refusal.to_string();
    let status = match refusal {
        Refusal::BadRequest(_) => (400, "Bad Request"),
        Refusal::Unresolved(_) => (502, "Bad Gateway"),
        Refusal::TooManyConnections { .. } => (429, "Too Many Requests"),
        _ => (403, "Forbidden"),
    };
    answer_refusal(shared, attempt, client, status, message).await
}

/// Answers a refused request with `status` and the line its call's report gets, and records it.
async fn answer_refusal(
    shared: &Shared,
    mut attempt: Attempt,
    client: &mut TcpStream,
    (status, reason): (u16, &str),
    message: String,
) {
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

/// How reading a head ended, when it did not give one.
enum HeadEnd {
    /// Nothing to answer or record: the client closed before naming a call, or the proxy
    /// stops.
    Quiet,
    /// Recorded with this note, not answered (the client is gone, or its call is).
    Recorded(String),
    /// Answered with this status and recorded with this note.
    Answered {
        status: (u16, &'static str),
        why: String,
    },
}

/// Reads one request head into `buf` under the bounds of `admission`: until credentials name
/// a call, the connection is in the shared anonymous pool (evicted when newer ones need the
/// room, and only [`super::admission::ANONYMOUS_TIMEOUT`] to name one); once they do, it is its
/// call's (in its report, within its bound of unfinished heads) and has the whole head
/// timeout. What a connection still has to say when it is evicted it may finish saying, but
/// it is not waited for.
async fn read_head(
    shared: &Shared,
    client: &mut TcpStream,
    buf: &mut Vec<u8>,
    stop: &CancellationToken,
    anonymous: AnonymousSlot,
    attempt: &mut Attempt,
) -> Result<RequestHead, HeadEnd> {
    let limits = *shared.admission.limits();
    let started = tokio::time::Instant::from_std(attempt.started);
    let anonymous_timeout = limits.anonymous_timeout.min(shared.head_timeout);
    let mut anonymous = Some(anonymous);
    // Held while the head arrives; given back when it is complete (or refused).
    let mut _head_slot: Option<CallSlot> = None;
    let mut chunk = [0u8; 4096];
    loop {
        match http::parse_head(buf) {
            Ok(Some(head)) => return Ok(head),
            Ok(None) => {}
            Err(e) => return Err(malformed(shared, buf, attempt, e)),
        }
        if attempt.call.is_none()
            && let Some(call) = partial_call(shared, buf)
        {
            anonymous = None;
            _head_slot = Some(attribute_early(shared, buf, attempt, call)?);
        }
        let named = attempt.call.is_some();
        let (timeout, why_late) = if named {
            (shared.head_timeout, "the request head did not arrive")
        } else {
            (
                anonymous_timeout,
                "no request head with this call's proxy credentials arrived",
            )
        };
        let call_ended = attempt.call.as_ref().map(|c| c.cancel.clone());
        let evicted = anonymous.as_ref().map(|a| a.evicted().clone());
        // Biased, the read first: bytes the client has already sent always count, even on a
        // connection just evicted or out of time.
        let read = tokio::select! {
            biased;
            r = client.read(&mut chunk) => r,
            _ = stop.cancelled() => return Err(HeadEnd::Quiet),
            _ = cancelled(call_ended.as_ref()) => {
                return Err(HeadEnd::Recorded("the call ended".into()));
            }
            _ = cancelled(evicted.as_ref()) => {
                attempt.idle = true;
                return Err(HeadEnd::Answered {
                    status: (503, "Service Unavailable"),
                    why: format!(
                        "too many connections: {} connections had not sent their proxy \
                         credentials yet, and the oldest of them is closed to make room (send \
                         the request head at once)",
                        limits.anonymous_heads
                    ),
                });
            }
            _ = tokio::time::sleep_until(started + timeout) => {
                attempt.idle = !named;
                return Err(HeadEnd::Answered {
                    status: (408, "Request Timeout"),
                    why: format!("head timeout: {why_late} within {timeout:?}"),
                });
            }
        };
        match read {
            Ok(0) | Err(_) if named => {
                return Err(HeadEnd::Recorded(
                    "the client closed the connection before its request head was complete".into(),
                ));
            }
            Ok(0) | Err(_) => return Err(HeadEnd::Quiet),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A head that cannot be parsed: answered 431 or 400, in the name of the call its partial
/// credentials name, if any.
fn malformed(shared: &Shared, buf: &[u8], attempt: &mut Attempt, e: HeadError) -> HeadEnd {
    if attempt.call.is_none()
        && let Some(call) = partial_call(shared, buf)
    {
        attempt.attribute(call);
    }
    if let Some(request) = http::parse_request_line(buf) {
        attempt.describe(&request);
    }
    let status = if e == HeadError::TooLarge || e == HeadError::TooManyHeaders {
        (431, "Request Header Fields Too Large")
    } else {
        (400, "Bad Request")
    };
    HeadEnd::Answered {
        status,
        why: e.to_string(),
    }
}

/// A head still arriving whose credentials already name `call`: the connection is the
/// call's from now on, and holds one of its places for a head (refused when they are taken).
fn attribute_early(
    shared: &Shared,
    buf: &[u8],
    attempt: &mut Attempt,
    call: Arc<CallState>,
) -> Result<CallSlot, HeadEnd> {
    if let Some(request) = http::parse_request_line(buf) {
        attempt.describe(&request);
    }
    let counts = Arc::clone(&call.counts);
    attempt.attribute(call);
    shared
        .admission
        .head_of_call(&counts)
        .map_err(|crowded| HeadEnd::Answered {
            status: crowded.status(),
            why: crowded.to_string(),
        })
}

/// The call named by the credentials of a head still arriving, if they name one.
fn partial_call(shared: &Shared, buf: &[u8]) -> Option<Arc<CallState>> {
    let token = credentials::token_in_partial(buf)?;
    lock(&shared.calls).get(&token).cloned()
}

/// Completes when `token` is cancelled; never without one.
async fn cancelled(token: Option<&CancellationToken>) {
    match token {
        Some(t) => t.cancelled().await,
        None => std::future::pending().await,
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
