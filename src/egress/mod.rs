//! Network by host name: the egress proxy a proxy-mode policy (`[network] proxy = true`)
//! routes every confined connection through.
//!
//! ```text
//! confined process ──▶ 127.0.0.1:3128 in its own network namespace (nothing else there)
//!                        │ listening socket made by the sandbox init, its fd sent to the server
//!                        ▼
//! server: proxy ── judge name (allow/deny) ── resolve ── drop non-public ── connect ── relay
//! ```
//!
//! * [`pattern`]: the host-pattern and CIDR grammar, pure.
//! * [`rules`]: the decisions that need no network, and the words of each refusal.
//! * [`http`]: the bounded request-head parser (fuzzed).
//! * [`admission`]: how many connections it holds at once, per call and in all.
//! * [`proxy`]: the server side: connections, per-call attribution and reports; `relay`
//!   copies the bytes, `credentials` reads which call a connection belongs to.
//! * Interception (issue 20), only for hosts a credential, a rule or `[network.git]` names:
//!   [`tls`] (cordon's in-memory CA, leaves, verified upstreams), [`secrets`] (credentials
//!   the sandbox sees as placeholders), [`canon`] (the one spelling of a path that rules,
//!   push detection and the upstream share), [`l7`] (method/path rules, the push policy),
//!   [`pktline`] (a push's ref updates), [`upstream`] (the only words made from what an
//!   upstream sent), `intercept` (one request, end to end).
//!
//! How the listener gets into the namespace, and what confines the process (Landlock's
//! connect rule narrowed to the proxy port, seccomp without UDP) is `confine`'s job.

pub(crate) mod admission;
pub(crate) mod canon;
pub(crate) mod credentials;
pub(crate) mod http;
mod intercept;
pub(crate) mod l7;
pub(crate) mod pattern;
pub(crate) mod pktline;
pub(crate) mod proxy;
mod relay;
pub(crate) mod rules;
pub(crate) mod secrets;
pub(crate) mod site;
pub(crate) mod tls;
pub(crate) mod upstream;

pub(crate) use proxy::{CallTicket, ConnectionRecord, NetworkReport, Proxy};
pub(crate) use rules::EgressRules;

/// The proxy's port on the loopback of a sandbox's network namespace. Fixed (the namespace
/// is private, so nothing else can hold it); a policy's `tcp_bind` may not name it.
pub(crate) const PROXY_PORT: u16 = 3128;

/// Where confined processes reach the proxy, inside their namespace.
pub(crate) fn listen_addr() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], PROXY_PORT))
}
