//! `cordon serve --http ADDR:PORT`: MCP's Streamable HTTP transport at `/mcp`.
//!
//! rmcp's `StreamableHttpService` speaks the protocol (POST with JSON or SSE answers, GET
//! streams, `Mcp-Session-Id` for sessions begun with `initialize`, DELETE to end one, the
//! stateless 2026-07-28 revision). This module is the front door in front of it, and decides
//! what rmcp never sees: the `Host` and request target (403, `target`), the path, the
//! `Origin` allow-list (403), the bearer token (401), the
//! body size and read time (413, 408), the session ceiling (503); and it cancels a call whose
//! client went away mid-answer. Each MCP session gets its own scope from the service factory
//! (`server::scope`). Connections are served by hyper, HTTP/1.1, with a header-read timeout;
//! which connections are kept at all is `admission`'s.

pub(crate) mod admission;
pub(crate) mod auth;
pub(crate) mod authority;
pub(crate) mod limits;
pub(crate) mod oauth;
pub(crate) mod origin;
mod subject;
pub(crate) mod target;
pub(crate) mod token_file;

use super::CordonServer;
use crate::audit::CallOrigin;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use limits::{BodyRefusal, BoundedSessions, CancelOnDrop};
use rmcp::RoleServer;
use rmcp::model::{CancelledNotificationParam, ClientJsonRpcMessage, ClientNotification};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The MCP endpoint.
pub(crate) const ENDPOINT: &str = "/mcp";
/// Prometheus metrics (`crate::metrics`), behind the same checks and authentication as
/// [`ENDPOINT`]; on the `--metrics-addr` listener instead when one is given.
pub(crate) const METRICS_PATH: &str = "/metrics";
/// How long an authenticated connection's client may take to send a later request's
/// headers (the first must authenticate within `admission::UNAUTHENTICATED_TIMEOUT`).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// What a session's idle time must exceed the longest call by: a call's tree is killed and
/// answered within this after its timeout.
const IDLE_MARGIN: Duration = Duration::from_secs(10);
/// How long shutdown waits for running calls to kill their trees.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

type Body = BoxBody<Bytes, Infallible>;
type Sessions = BoundedSessions<LocalSessionManager>;
type Mcp = StreamableHttpService<CordonServer, Sessions>;

pub struct HttpOptions {
    pub addr: SocketAddr,
    pub auth: auth::Authenticator,
    /// A separate listener for [`METRICS_PATH`] only (loopback addresses only).
    pub metrics_addr: Option<SocketAddr>,
    /// `--workspaces DIR`: a workspace per authenticated subject.
    pub workspaces: Option<Arc<crate::server::workspaces::SubjectWorkspaces>>,
}

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// `/mcp`, and `/metrics` too unless a metrics listener of its own is given.
    Main { metrics: bool },
    /// `/metrics` only (`--metrics-addr`).
    MetricsOnly,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(
        "refusing to serve {0} without authentication: a non-loopback address is reachable from other machines; give --http-token-file FILE or --http-token-env VAR (or bind 127.0.0.1)"
    )]
    Unauthenticated(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Origin(#[from] origin::BadOrigin),
    #[error(transparent)]
    OAuth(#[from] oauth::OAuthError),
    #[error(
        "refusing to serve metrics on {0}: --metrics-addr takes a loopback address (127.0.0.1:PORT or [::1]:PORT); to scrape from elsewhere, use /metrics on the --http listener, which has its authentication"
    )]
    MetricsNotLoopback(SocketAddr),
    #[error(
        "--workspaces gives each authenticated subject a workspace, but nothing authenticates \
         requests here (every client would be one anonymous subject); give --http-token-file \
         FILE (a file of named holders) or [server.http.oauth]"
    )]
    WorkspacesWithoutAuthentication,
}

/// A non-loopback address needs authentication (a token, or `[server.http.oauth]`).
pub(crate) fn check_options(options: &HttpOptions) -> Result<(), HttpError> {
    if !options.addr.ip().is_loopback() && !options.auth.is_required() {
        return Err(HttpError::Unauthenticated(options.addr));
    }
    if let Some(addr) = options.metrics_addr
        && !addr.ip().is_loopback()
    {
        return Err(HttpError::MetricsNotLoopback(addr));
    }
    Ok(())
}

/// The authenticated subject of a request served over HTTP.
pub(crate) fn subject_of(rctx: &RequestContext<RoleServer>) -> Option<auth::Subject> {
    rctx.extensions
        .get::<http::request::Parts>()?
        .extensions
        .get::<auth::Subject>()
        .cloned()
}

/// What the credentials of a request served over HTTP grant (`None` on stdio: everything).
pub(crate) fn granted_of(rctx: &RequestContext<RoleServer>) -> Option<auth::Granted> {
    rctx.extensions
        .get::<http::request::Parts>()?
        .extensions
        .get::<auth::Granted>()
        .cloned()
}

/// The groups the credentials of a request served over HTTP name (none on stdio).
pub(crate) fn groups_of(rctx: &RequestContext<RoleServer>) -> auth::Groups {
    rctx.extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<auth::Groups>())
        .cloned()
        .unwrap_or_default()
}

/// The `Mcp-Session-Id` of a request served over HTTP in a session.
pub(crate) fn session_of(rctx: &RequestContext<RoleServer>) -> Option<String> {
    rctx.extensions
        .get::<http::request::Parts>()?
        .headers
        .get(rmcp::transport::common::http_header::HEADER_SESSION_ID)?
        .to_str()
        .ok()
        .map(str::to_owned)
}

/// Who made a call that came over HTTP (`None` on stdio), for the audit log.
pub(crate) fn call_origin(rctx: &RequestContext<RoleServer>) -> Option<CallOrigin> {
    let parts = rctx.extensions.get::<http::request::Parts>()?;
    let session = parts
        .headers
        .get(rmcp::transport::common::http_header::HEADER_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| "stateless".to_owned(), str::to_owned);
    let client = rctx
        .client_info()
        .map(|info| serde_json::json!({"name": info.name, "version": info.version}));
    Some(CallOrigin {
        session: Some(session),
        subject: parts
            .extensions
            .get::<auth::Subject>()
            .map(ToString::to_string),
        scope: None,
        client,
    })
}

/// The front door: every request passes here before rmcp sees it.
struct Front {
    mcp: Mcp,
    sessions: Arc<Sessions>,
    auth: auth::Authenticator,
    origins: origin::OriginPolicy,
    hosts: target::HostPolicy,
    max_body: usize,
    /// Sessions one subject may have open (`server.http.max_sessions_per_subject`).
    max_sessions_per_subject: usize,
    policy_origin: String,
    /// Every scope some tool needs (`[server.http.scopes]`): a token granting none of them
    /// may call nothing.
    tool_scopes: std::collections::BTreeSet<String>,
}

/// Serves until SIGTERM/SIGINT, then ends every call of every session and returns.
pub async fn serve(
    server: CordonServer,
    mut options: HttpOptions,
    signals: super::StopSignals,
) -> Result<(), HttpError> {
    let mut template = server.into_http_template();
    let workspaces = options.workspaces.take();
    if let Some(workspaces) = &workspaces {
        template = template.with_subject_workspaces(Arc::clone(workspaces));
    }
    let ctx = Arc::clone(template.context());
    let http = ctx.runtime.policy.server.http.clone();
    if let Some(oauth) = &http.oauth {
        let tool_scopes: Vec<String> = http.scopes.values().cloned().collect();
        options.auth = options.auth.with_jwt(
            oauth::JwtVerifier::load(oauth, &tool_scopes)?.with_group_claim(&http.group_claim),
        );
    }
    check_options(&options)?;
    if workspaces.is_some() && !options.auth.is_required() {
        return Err(HttpError::WorkspacesWithoutAuthentication);
    }
    let origins = origin::OriginPolicy::new(&http.allowed_origins)?;
    warn_of_loopback_hosts(&options, &http, &ctx.runtime.policy.origin);
    let server_shutdown = ctx.runtime.shutdown.clone();
    let front = Arc::new(front(&template, options.auth, origins, &server_shutdown));

    let listener = listen(options.addr).map_err(|source| HttpError::Bind {
        addr: options.addr,
        source,
    })?;
    let local_addr = listener.local_addr().unwrap_or(options.addr);
    // Listening before the ready line: whoever reads it may scrape at once.
    let role = Role::Main {
        metrics: options.metrics_addr.is_none(),
    };
    if let Some(addr) = options.metrics_addr {
        let metrics = listen(addr).map_err(|source| HttpError::Bind { addr, source })?;
        eprintln!(
            "cordon: metrics at http://{}{METRICS_PATH}",
            metrics.local_addr().unwrap_or(addr)
        );
        tokio::spawn(serve_metrics(
            metrics,
            Arc::clone(&front),
            server_shutdown.clone(),
        ));
    }
    let workspace = match &workspaces {
        Some(workspaces) => {
            tokio::spawn(Arc::clone(workspaces).shut_idle_until(server_shutdown.clone()));
            format!(
                "a workspace per subject beneath {}",
                workspaces.root().display()
            )
        }
        None => format!("workspace {}", ctx.runtime.workspace.root().display()),
    };
    let listening = format!(
        "listening on http://{local_addr}{ENDPOINT} ({})",
        if front.auth.is_required() {
            "bearer token required"
        } else {
            "no authentication: loopback only"
        }
    );
    let ready = super::startup_line_with(&ctx, &workspace, &listening);
    // Always said: whoever started an HTTP server wants to know where it listens (and the
    // tests read the port from here when they bind port 0).
    eprintln!("{ready}");

    accept_until_stopped(listener, &front, signals, &server_shutdown, role).await;
    // Every call of every session is cancelled (its tree killed) and answered; then the
    // interpreters go and the process exits.
    server_shutdown.cancel();
    if let Some(shared) = &template.http {
        shared.stateless.close_all().await;
    }
    if let Some(workspaces) = &workspaces {
        workspaces.close_all(SHUTDOWN_GRACE).await;
    }
    ctx.runtime.drain(SHUTDOWN_GRACE).await;
    Ok(())
}

/// Listening beyond loopback while the allowed hosts are only loopback names refuses every
/// client that names this host: said once, at start.
fn warn_of_loopback_hosts(
    options: &HttpOptions,
    http: &crate::policy::HttpPolicy,
    policy_origin: &str,
) {
    if !options.addr.ip().is_loopback()
        && http
            .allowed_hosts
            .iter()
            .all(|h| crate::policy::DEFAULT_ALLOWED_HOSTS.contains(&h.as_str()))
    {
        tracing::warn!(
            "listening on {} but server.http.allowed_hosts lists only loopback names: requests \
             naming another Host get 403; list the names clients use ({})",
            options.addr,
            policy_origin
        );
    }
}

/// The front door over rmcp's Streamable HTTP service: sessions bounded in number and
/// kept alive at least as long as a call may run, each made from `template`.
fn front(
    template: &CordonServer,
    auth: auth::Authenticator,
    origins: origin::OriginPolicy,
    server_shutdown: &tokio_util::sync::CancellationToken,
) -> Front {
    let ctx = template.context();
    let http = &ctx.runtime.policy.server.http;
    let mut session_config = SessionConfig::default();
    session_config.keep_alive = Some(session_keep_alive(&ctx.runtime.policy));
    let mut local = LocalSessionManager::default();
    local.session_config = session_config;
    let registry = Arc::clone(
        &template
            .http
            .as_ref()
            .expect("an HTTP template has its shared parts")
            .registry,
    );
    let sessions = Arc::new(BoundedSessions::new(local, http.max_sessions, registry));

    let mut config = StreamableHttpServerConfig::default()
        // Our own cap comes first (with a clear message); this is rmcp's backstop.
        .with_max_request_body_bytes(http.max_body_bytes)
        .with_cancellation_token(server_shutdown.child_token());
    config = if http.allowed_hosts.iter().any(|h| h == "*") {
        config.disable_allowed_hosts()
    } else {
        config.with_allowed_hosts(http.allowed_hosts.clone())
    };
    let factory = template.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(factory.new_session()),
        Arc::clone(&sessions),
        config,
    );
    Front {
        mcp,
        sessions,
        auth,
        origins,
        hosts: target::HostPolicy::new(&http.allowed_hosts),
        max_body: http.max_body_bytes,
        max_sessions_per_subject: http.max_sessions_per_subject,
        policy_origin: ctx.runtime.policy.origin.clone(),
        tool_scopes: http.scopes.values().cloned().collect(),
    }
}

/// A session's calls must not be cut by idle expiry while they run without a word: the
/// idle time is at least the longest a call may take.
fn session_keep_alive(policy: &crate::policy::Policy) -> Duration {
    let http = &policy.server.http;
    let longest_call = policy
        .limits
        .max_timeout
        .max(policy.interpreter.max_timeout);
    let keep_alive = http.session_idle.max(longest_call + IDLE_MARGIN);
    if keep_alive > http.session_idle {
        tracing::warn!(
            "server.http.session_idle_secs {}s is shorter than the longest call ({}s); idle \
             sessions end after {}s instead",
            http.session_idle.as_secs(),
            longest_call.as_secs(),
            keep_alive.as_secs()
        );
    }
    keep_alive
}

/// The main listener's accept loop, until SIGTERM or SIGINT: every connection admitted
/// under the unauthenticated bounds and served on its own task.
async fn accept_until_stopped(
    listener: tokio::net::TcpListener,
    front: &Arc<Front>,
    mut signals: super::StopSignals,
    server_shutdown: &tokio_util::sync::CancellationToken,
    role: Role,
) {
    let admission = admission::Admission::new(admission::Bounds::default());
    let stop = async move {
        let name = signals.recv().await;
        tracing::info!("{name}: ending every session and running call");
    };
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // An SSE answer goes out as several small writes (head, then each event); with
        // Nagle's algorithm each one after the first waits for the client's delayed ACK
        // (~40 ms a round trip).
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY on the connection from {peer}: {e}");
        }
        // Never refused here: if the unauthenticated bounds are full, the oldest
        // unauthenticated connection is closed instead.
        let ticket = Arc::new(admission.admit(&peer));
        let front = Arc::clone(front);
        let closing = server_shutdown.clone();
        tokio::spawn(serve_connection(
            stream,
            peer,
            front,
            Arc::clone(&ticket),
            closing,
            role,
        ));
        // The next accept may evict: first let this connection's task read what its client
        // sent (an authenticated head leaves the bounds at once). Under a flood the accept
        // loop would otherwise run ahead of every task it spawned.
        let _ = tokio::time::timeout(FIRST_READ_WAIT, ticket.first_read()).await;
    }
}

/// Connections the kernel may hold for us before `accept`: under a flood of connections a
/// short queue overflows, and a client whose handshake is dropped waits a second to retry.
const LISTEN_BACKLOG: u32 = 4096;
/// The longest the accept loop waits for a new connection's first read.
const FIRST_READ_WAIT: Duration = Duration::from_millis(10);

fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The `--metrics-addr` listener's accept loop: its connections pass the same admission
/// bounds and front door as the main listener's, and are answered only at [`METRICS_PATH`].
async fn serve_metrics(
    listener: tokio::net::TcpListener,
    front: Arc<Front>,
    closing: tokio_util::sync::CancellationToken,
) {
    let admission = admission::Admission::new(admission::Bounds::default());
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = closing.cancelled() => return,
        };
        let Ok((stream, peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let ticket = Arc::new(admission.admit(&peer));
        tokio::spawn(serve_connection(
            stream,
            peer,
            Arc::clone(&front),
            Arc::clone(&ticket),
            closing.clone(),
            Role::MetricsOnly,
        ));
        // As on the main listener: a flood's accepts do not run ahead of its reads.
        let _ = tokio::time::timeout(FIRST_READ_WAIT, ticket.first_read()).await;
    }
}

/// Serves one connection until it ends, is evicted, fails to authenticate within
/// `admission::UNAUTHENTICATED_TIMEOUT` of its accept, or the server shuts down.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    front: Arc<Front>,
    ticket: Arc<admission::Ticket>,
    closing: tokio_util::sync::CancellationToken,
    role: Role,
) {
    let service = {
        let ticket = Arc::clone(&ticket);
        hyper::service::service_fn(move |request| {
            let front = Arc::clone(&front);
            let ticket = Arc::clone(&ticket);
            async move { Ok::<_, Infallible>(front.handle(request, &ticket, role).await) }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(
            hyper_util::rt::TokioIo::new(admission::Watched::new(stream, Arc::clone(&ticket))),
            service,
        );
    tokio::pin!(connection);
    let deadline = tokio::time::sleep(admission::UNAUTHENTICATED_TIMEOUT);
    tokio::pin!(deadline);
    let mut deadline_passed = false;
    loop {
        tokio::select! {
            result = &mut connection => {
                if let Err(e) = result {
                    tracing::debug!("connection from {peer}: {e}");
                }
                break;
            }
            () = ticket.evicted().cancelled() => {
                tracing::debug!("closed the unauthenticated connection from {peer} to make room");
                break;
            }
            () = &mut deadline, if !deadline_passed => {
                if !ticket.is_authenticated() {
                    tracing::debug!(
                        "closed the connection from {peer}: no authenticated request within {}s",
                        admission::UNAUTHENTICATED_TIMEOUT.as_secs()
                    );
                    break;
                }
                deadline_passed = true;
            }
            () = closing.cancelled() => {
                connection.as_mut().graceful_shutdown();
                break;
            }
        }
    }
}

impl Front {
    /// One HTTP request: the front door's checks (host, path, origin, credentials), then the
    /// metrics or MCP behind it.
    async fn handle(
        &self,
        request: Request<Incoming>,
        ticket: &admission::Ticket,
        role: Role,
    ) -> Response<Body> {
        let metrics = match self.route(&request, role) {
            Route::Mcp => false,
            Route::Metrics => true,
            Route::Answer(answer) => return answer,
        };
        let (subject, granted, groups) = match self.auth.authenticate(request.headers()) {
            Ok(authenticated) => authenticated,
            Err(why) => return unauthorized(&self.auth, why),
        };
        // A complete head that authenticated: the connection leaves the unauthenticated
        // bounds and their timeout.
        if let Err(refused) = ticket.authenticate() {
            return connection_refused(refused);
        }
        if metrics {
            return metrics_response(request.method());
        }
        // A token that may call no tool at all is refused at the door (RFC 6750), saying which
        // scopes would do; one that may call some gets only those (`server::scopes`).
        if !self.tool_scopes.iter().any(|s| granted.allows(s)) {
            return insufficient_scope(&self.auth, &self.tool_scopes, &granted);
        }
        let mut request = request;
        request.extensions_mut().insert(granted);
        request.extensions_mut().insert(groups);
        self.mcp_request(request, subject).await
    }

    /// Which of this listener's endpoints a request is for, or the answer that refuses it: a host not allowed, a path not served, an origin not allowed.
    /// The OAuth metadata is answered here too: public by design.
    fn route(&self, request: &Request<Incoming>, role: Role) -> Route {
        // Which host the request is for, before anything answers it. A scrape of the metrics
        // names the pod's or host's address, which no allow-list can know: where a token is
        // required it is what keeps a rebinding page out (it cannot know the token), so the
        // host list is not asked then.
        let token_guarded_scrape = request.uri().path() == METRICS_PATH && self.auth.is_required();
        if !token_guarded_scrape
            && let Err(bad) = self.hosts.check(request.uri(), request.headers())
        {
            tracing::warn!("refused a request: {bad}");
            return Route::Answer(plain(
                StatusCode::FORBIDDEN,
                format!(
                    "Forbidden: {bad} (server.http.allowed_hosts of the policy, {}, lists the \
                     names this server answers to)",
                    self.policy_origin
                ),
            ));
        }
        // RFC 9728 metadata: public by design (it says where to get a token).
        if let Some(jwt) = self.auth.jwt()
            && oauth::METADATA_PATHS.contains(&request.uri().path())
            && request.method() == http::Method::GET
        {
            return Route::Answer(
                Response::builder()
                    .status(StatusCode::OK)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Full::new(Bytes::from(jwt.metadata().to_owned())).boxed())
                    .expect("a static response is valid"),
            );
        }
        let path = request.uri().path();
        let metrics = path == METRICS_PATH && role != Role::Main { metrics: false };
        if role == Role::MetricsOnly && !metrics {
            return Route::Answer(plain(
                StatusCode::NOT_FOUND,
                format!("Not Found: this listener serves only {METRICS_PATH}"),
            ));
        }
        if path != ENDPOINT && !metrics {
            return Route::Answer(plain(
                StatusCode::NOT_FOUND,
                format!(
                    "Not Found: this server's endpoints are {ENDPOINT} (MCP Streamable HTTP){}",
                    if role == (Role::Main { metrics: true }) {
                        format!(" and {METRICS_PATH} (Prometheus metrics)")
                    } else {
                        String::new()
                    }
                ),
            ));
        }
        if let Some(origin) = request.headers().get(http::header::ORIGIN) {
            let allowed = origin.to_str().is_ok_and(|o| self.origins.allows(o));
            if !allowed {
                tracing::warn!(
                    "refused a request from Origin {:?} (not in server.http.allowed_origins)",
                    String::from_utf8_lossy(origin.as_bytes())
                );
                return Route::Answer(plain(
                    StatusCode::FORBIDDEN,
                    format!(
                        "Forbidden: Origin {:?} is not in server.http.allowed_origins of the \
                         policy ({}); the operator can add it",
                        String::from_utf8_lossy(origin.as_bytes()),
                        self.policy_origin
                    ),
                ));
            }
        }
        if metrics { Route::Metrics } else { Route::Mcp }
    }

    /// An authenticated request to the MCP endpoint: in its subject's session only, its body
    /// bounded, a new session only while there is room, and a call answered on an SSE stream
    /// cancelled when its client goes.
    async fn mcp_request(
        &self,
        request: Request<Incoming>,
        subject: auth::Subject,
    ) -> Response<Body> {
        let (mut parts, body) = request.into_parts();
        let session = parts
            .headers
            .get(rmcp::transport::common::http_header::HEADER_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // A session belongs to the subject that began it: with OAuth, one subject holding
        // another's session id (a log, a proxy) gets what an unknown id gets.
        if let Some(id) = &session
            && !self.sessions.may_use(id, &subject)
        {
            tracing::warn!(
                "refused a request of subject {subject} for a session another subject began"
            );
            return plain(
                StatusCode::NOT_FOUND,
                "Not Found: Session not found".to_owned(),
            );
        }
        let owner = subject.clone();
        parts.extensions.insert(subject);
        if parts.method != http::Method::POST {
            // GET (a session's stream) and DELETE (its end) carry no body worth reading.
            let request = Request::from_parts(parts, Full::new(Bytes::new()));
            return self.mcp.handle(request).await;
        }
        let bytes = match self.read_body(&parts.headers, body).await {
            Ok(bytes) => bytes,
            Err(refused) => return refused,
        };
        let peek = Peek::of(&bytes);
        let initializes = session.is_none() && peek.method.as_deref() == Some("initialize");
        if initializes && self.sessions.is_full() {
            return self.sessions_full();
        }
        // One subject cannot take every place: the others' clients still get theirs.
        if initializes && self.sessions.owned_by(&owner) >= self.max_sessions_per_subject {
            return self.subject_sessions_full();
        }
        let request = Request::from_parts(parts, Full::new(bytes));
        let response = self.mcp.handle(request).await;
        if initializes
            && let Some(id) = response
                .headers()
                .get(rmcp::transport::common::http_header::HEADER_SESSION_ID)
                .and_then(|v| v.to_str().ok())
        {
            self.sessions.claim(id, &owner);
        }
        // A call inside a session answered on an SSE stream: if the client goes before the
        // answer, the call is cancelled (rmcp would let it run on for a resume).
        match (session, peek.request_id) {
            (Some(session), Some(id))
                if response.status() == StatusCode::OK && is_event_stream(&response) =>
            {
                let sessions = Arc::clone(&self.sessions);
                let (head, body) = response.into_parts();
                let cancel = Box::new(move || cancel_request(sessions, session, id));
                Response::from_parts(head, CancelOnDrop::new(body, cancel).boxed())
            }
            _ => response,
        }
    }

    /// A POST's body, at most `max_body` bytes and within the read timeout, or the answer
    /// that says which bound it broke.
    async fn read_body(
        &self,
        headers: &http::HeaderMap,
        body: Incoming,
    ) -> Result<Bytes, Response<Body>> {
        let declared = headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        limits::read_body(body, declared, self.max_body)
            .await
            .map_err(|refusal| match refusal {
                BodyRefusal::TooLarge { limit } => plain(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "Payload Too Large: a request body may take at most {limit} bytes \
                         (server.http.max_body_kb of the policy, {}); send large files in \
                         parts, or ask the operator to raise it",
                        self.policy_origin
                    ),
                ),
                BodyRefusal::TooSlow => plain(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "Request Timeout: the body did not arrive within {}s",
                        limits::BODY_READ_TIMEOUT.as_secs()
                    ),
                ),
                BodyRefusal::Broken(e) => {
                    plain(StatusCode::BAD_REQUEST, format!("Bad Request: {e}"))
                }
            })
    }

    /// The answer to an `initialize` of a subject that has every session it may have open.
    /// Not logged: a client that keeps asking would fill the log (the 503 says it all).
    fn subject_sessions_full(&self) -> Response<Body> {
        let mut response = plain(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "Service Unavailable: this subject has {} MCP sessions open, the most \
                 server.http.max_sessions_per_subject allows ({}); end one (DELETE {ENDPOINT}) \
                 or retry later",
                self.max_sessions_per_subject, self.policy_origin
            ),
        );
        response.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("5"),
        );
        response
    }

    /// The answer to an `initialize` while every session the policy allows is open.
    fn sessions_full(&self) -> Response<Body> {
        let mut response = plain(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "Service Unavailable: {} MCP sessions are open, the most \
                 server.http.max_sessions allows ({}); end one (DELETE {ENDPOINT}) or retry \
                 later",
                self.sessions.max(),
                self.policy_origin
            ),
        );
        response.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("5"),
        );
        response
    }
}

/// Where the front door sends a request.
enum Route {
    Mcp,
    Metrics,
    /// Answered at the door: refused, or the public OAuth metadata.
    Answer(Response<Body>),
}

/// The metrics, to a GET.
fn metrics_response(method: &http::Method) -> Response<Body> {
    if method != http::Method::GET {
        return plain(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("Method Not Allowed: {METRICS_PATH} answers GET"),
        );
    }
    Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)
        .body(Full::new(Bytes::from(crate::metrics::render())).boxed())
        .expect("a metrics response is valid")
}

/// What the front door needs from a JSON-RPC body: its method and, for a request, its id.
struct Peek {
    method: Option<String>,
    request_id: Option<rmcp::model::RequestId>,
}

impl Peek {
    fn of(bytes: &[u8]) -> Self {
        #[derive(serde::Deserialize)]
        struct Head {
            method: Option<String>,
            id: Option<rmcp::model::RequestId>,
        }
        match serde_json::from_slice::<Head>(bytes) {
            Ok(head) => Self {
                request_id: head.id.filter(|_| head.method.is_some()),
                method: head.method,
            },
            // Not for us to judge: rmcp answers a malformed body with its own error.
            Err(_) => Self {
                method: None,
                request_id: None,
            },
        }
    }
}

fn is_event_stream(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Tells session `session` that its client cancelled request `id` (as if it had sent
/// `notifications/cancelled`): the call's token fires and its tree is killed.
fn cancel_request(sessions: Arc<Sessions>, session: String, id: rmcp::model::RequestId) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let param = CancelledNotificationParam::new(
            Some(id),
            Some("the client closed the connection before the answer".to_owned()),
        );
        let notification = ClientJsonRpcMessage::notification(
            ClientNotification::CancelledNotification(rmcp::model::Notification::new(param)),
        );
        let session: rmcp::transport::streamable_http_server::SessionId = session.into();
        if let Err(e) = sessions.accept_message(&session, notification).await {
            tracing::debug!("cancelling an abandoned call of session {session}: {e}");
        }
    });
}

fn plain(status: StatusCode, message: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(message)).boxed())
        .expect("a static response is valid")
}

/// The 503 of a request whose connection may not stay: evicted while its head arrived, or
/// every authenticated place taken.
fn connection_refused(refused: admission::Refused) -> Response<Body> {
    let message = match refused {
        admission::Refused::Evicted => "Service Unavailable: this connection was closed to make \
             room for newer ones before its request authenticated; retry"
            .to_owned(),
        admission::Refused::Full(max) => format!(
            "Service Unavailable: {max} authenticated connections are open, the most this \
             server serves at once; reuse one (keep-alive) or retry later"
        ),
    };
    let mut response = plain(StatusCode::SERVICE_UNAVAILABLE, message);
    let headers = response.headers_mut();
    headers.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    response
}

/// 403 for a valid token none of whose scopes a tool needs (RFC 6750 `insufficient_scope`),
/// naming the scopes that would do.
fn insufficient_scope(
    auth: &auth::Authenticator,
    tool_scopes: &std::collections::BTreeSet<String>,
    granted: &auth::Granted,
) -> Response<Body> {
    let needed = tool_scopes.iter().cloned().collect::<Vec<_>>().join(" ");
    let mut response = plain(
        StatusCode::FORBIDDEN,
        format!(
            "Forbidden: this token's scopes ({}) allow no tool of this server; each tool needs \
             one of: {needed} ([server.http.scopes]); ask the authorization server for a token \
             with the scopes of the tools the client needs",
            granted.describe()
        ),
    );
    let mut challenge = "Bearer realm=\"cordon\"".to_owned();
    if let Some(jwt) = auth.jwt() {
        challenge.push_str(&format!(", resource_metadata=\"{}\"", jwt.metadata_url()));
    }
    challenge.push_str(&format!(
        ", error=\"insufficient_scope\", scope=\"{needed}\", error_description=\"the token \
         grants no scope a tool of this server needs\""
    ));
    if let Ok(value) = http::HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(http::header::WWW_AUTHENTICATE, value);
    }
    response
}

fn unauthorized(auth: &auth::Authenticator, why: auth::Unauthenticated) -> Response<Body> {
    let message = match why {
        auth::Unauthenticated::Missing => {
            "Unauthorized: this server needs `Authorization: Bearer <token>` on every request \
             (the token the operator gave it with --http-token-file or --http-token-env)"
        }
        auth::Unauthenticated::Invalid => {
            "Unauthorized: the bearer token is not valid for this server (not its static token, \
             nor a JWT its [server.http.oauth] accepts: issuer, audience, expiry, key, scopes); \
             check the token the client is configured with"
        }
    };
    let mut response = plain(StatusCode::UNAUTHORIZED, message.to_owned());
    if let Ok(value) = http::HeaderValue::from_str(&auth.challenge(why)) {
        response
            .headers_mut()
            .insert(http::header::WWW_AUTHENTICATE, value);
    }
    response
}
