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

pub mod admission;
pub mod canon;
pub mod credentials;
pub mod http;
mod intercept;
pub mod l7;
pub mod pattern;
pub mod pktline;
pub mod proxy;
mod relay;
pub mod rules;
pub mod secrets;
mod site;
pub mod tls;
pub mod upstream;

pub use proxy::{CallTicket, ConnectionRecord, NetworkReport, Proxy};
pub use rules::EgressRules;

/// The proxy's port on the loopback of a sandbox's network namespace. Fixed (the namespace
/// is private, so nothing else can hold it); a policy's `tcp_bind` may not name it.
pub const PROXY_PORT: u16 = 3128;

/// Where confined processes reach the proxy, inside their namespace.
pub fn listen_addr() -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], PROXY_PORT))
}
