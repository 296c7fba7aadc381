//! The validated policy: [`Policy`] and one type per section, in their final units (durations,
//! bytes, absolute paths, compiled patterns and rules), plus the defaults and bounds the
//! sections are checked against.
//!
//! Owns the shape only. Reading TOML and `extends` is `load`'s, turning raw fields into these
//! types `validate`'s; nothing here fails.

use super::raw::WorkspaceAccess;
use super::{InterpreterPolicy, OutputPolicy, breaker, commands, jobs};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// A validated policy. Durations and sizes are in their final units; paths are absolute.
#[derive(Debug, Clone, Serialize)]
pub struct Policy {
    pub name: String,
    pub description: String,
    /// Where it came from: `builtin:default` or a file path.
    pub origin: String,
    pub filesystem: FilesystemPolicy,
    pub network: NetworkPolicy,
    pub limits: Limits,
    pub environment: EnvironmentPolicy,
    pub sandbox: SandboxPolicy,
    pub output: OutputPolicy,
    pub server: ServerPolicy,
    pub lint: LintPolicy,
    /// Command rules for `shell_exec` (a courtesy layer; see `commands`).
    pub commands: commands::CommandRules,
    pub interpreter: InterpreterPolicy,
    pub files: FilesPolicy,
    /// Long-lived processes (`shell_exec {background: true}`, the `job` tool).
    pub jobs: jobs::JobsPolicy,
    /// What calls changed, kept to take it back (`crate::checkpoint`).
    pub checkpoints: super::checkpoints::CheckpointsPolicy,
    /// When repeated refusals are handed to a person (`crate::breaker`).
    pub breaker: breaker::BreakerPolicy,
    /// The files this policy was read from (itself first, then each file it `extends`),
    /// canonical; built-in layers are not files and are not listed. The server protects the
    /// ones inside the workspace, so a call cannot rewrite the policy it runs under.
    pub sources: Vec<PathBuf>,
}

/// `[files]`: bounds of the file tools' answers.
#[derive(Debug, Clone, Serialize)]
pub struct FilesPolicy {
    /// The most `content` one read_file call returns, in bytes (it ends on a whole line).
    pub read_budget_bytes: usize,
}

/// The largest `files.read_budget_kb`: with the content in both the structured result and
/// the text block, a larger one could not stay under the 1 MiB a result may take on the wire.
pub(crate) const MAX_READ_BUDGET_KB: u64 = 256;

#[derive(Debug, Clone, Serialize)]
pub struct LintPolicy {
    pub enabled: bool,
    /// The embedded tree-sitter syntax check.
    pub syntax: bool,
    /// Per external linter run.
    #[serde(serialize_with = "secs")]
    pub timeout: Duration,
    pub max_file_bytes: usize,
    /// Compiled when the policy loads (which is what validates them), and only then.
    pub linters: Vec<crate::lint::CompiledLinter>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FilesystemPolicy {
    pub read_exec: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    pub deny: Vec<PathBuf>,
    pub devices: Vec<PathBuf>,
    pub workspace: WorkspaceAccess,
    /// With a read-only workspace: the workspace-relative directories that stay writable.
    pub workspace_writable: Vec<String>,
    /// Workspace-relative paths the file tools never write.
    pub protected: Vec<String>,
    /// Toolchain roots in the operator's home (rustup, pyenv, nvm, ...): each one that exists
    /// is granted read + execute and its bin directories go where PATH says `{toolchains}`.
    pub toolchains: Vec<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NetworkPolicy {
    /// Without the proxy: ports confined processes may connect to, on any host. With it:
    /// ports on the loopback of their own network namespace (nothing else is there).
    pub tcp_connect: Vec<u16>,
    pub tcp_bind: Vec<u16>,
    /// `proxy = true`: every connection out goes through cordon's egress proxy, by host name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy: Option<crate::egress::EgressRules>,
}

impl NetworkPolicy {
    /// No network at all: no ports and no proxy.
    pub fn is_off(&self) -> bool {
        self.tcp_connect.is_empty() && self.tcp_bind.is_empty() && self.proxy.is_none()
    }

    pub fn uses_proxy(&self) -> bool {
        self.proxy.is_some()
    }
}

/// Default `network.max_connections_per_call`.
pub(crate) const DEFAULT_MAX_CONNECTIONS_PER_CALL: u64 = 256;
/// Default `network.max_mb_per_connection`.
pub(crate) const DEFAULT_MAX_MB_PER_CONNECTION: u64 = 1024;

#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    #[serde(serialize_with = "secs")]
    pub timeout: Duration,
    #[serde(serialize_with = "secs")]
    pub max_timeout: Duration,
    pub memory_bytes: u64,
    pub pids: u64,
    pub cpu_percent: u64,
    pub cpu_seconds: u64,
    pub file_size_bytes: u64,
    pub open_files: u64,
    pub address_space_bytes: u64,
    /// How far one call may shrink the free space of the filesystems it writes (the whole
    /// tree; see `exec::disk`), in bytes.
    pub disk_bytes: u64,
    /// Size of each call's private `/dev/shm` (charged to its memory limit); 0: none.
    pub shm_bytes: u64,
}

/// Default `limits.shm_mb`: room for multiprocessing queues, Chromium and test databases.
pub(crate) const DEFAULT_SHM_MB: u64 = 256;

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

#[derive(Debug, Clone, Serialize)]
pub struct EnvironmentPolicy {
    pub pass: Vec<String>,
    pub set: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SandboxPolicy {
    pub seccomp_profile: String,
    /// Where namespaces cannot be had, seccomp refuses `socket(AF_UNIX, …)` so no host
    /// socket can be reached; true opts back in (socketpair works either way).
    pub fallback_unix_sockets: bool,
    /// Where cordon runs as root, the first host uid (and gid) confined processes run as;
    /// None: the workspace owner's when not root, else `confine::call_ids::DEFAULT_UID`.
    pub uid: Option<u32>,
    /// How many ids from `uid` each call's user namespace maps (its ids 0..count).
    pub uid_count: Option<u32>,
    /// Which processes a confined process may trace (`ptrace`, `process_vm_*`).
    pub ptrace: PtraceScope,
}

/// `[sandbox] ptrace`: what a confined process may trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PtraceScope {
    /// Processes of its own call (debuggers, strace, LeakSanitizer), where Landlock scopes
    /// tracing to the call's own domain; refused everywhere without Landlock.
    Call,
    /// Nothing: `ptrace` and `process_vm_*` are refused by seccomp.
    None,
}

#[derive(Debug, Clone, Serialize)]
pub struct ServerPolicy {
    pub max_concurrent_calls: usize,
    /// Audit log used when `--audit-log` is not given.
    pub audit_log: Option<PathBuf>,
    /// The audit log is rotated (to `<file>.1`, `.2`, `.3`) before it grows past this;
    /// 0 never rotates.
    pub audit_log_max_bytes: u64,
    /// Log `env` values and `stdin` verbatim instead of only their names and sizes.
    pub audit_log_values: bool,
    /// How long a question to the user (an `ask` rule) waits for an answer before the
    /// command is refused.
    pub approval_timeout: Duration,
    /// Who answers an `ask` rule, in order of preference: the first channel available for
    /// the call asks (elicitation needs a client that declared it; the operator channel a
    /// running `approvals` socket).
    pub approvals: Vec<ApprovalChannel>,
    /// `[server.http]`: bounds of `serve --http` (unused on stdio).
    pub http: HttpPolicy,
}

/// One way to ask whether an `ask` rule's command may run (`server.approvals`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalChannel {
    /// The client asks its user (`elicitation/create`, or `input_required` in 2026-07-28).
    Elicitation,
    /// The operator answers on the host: `cordon approvals`, `cordon approve ID`.
    Operator,
}

impl ApprovalChannel {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation",
            Self::Operator => "operator",
        }
    }
}

/// `server.approvals` when the policy names none: the client's user where it can be asked,
/// else the operator.
pub(crate) const DEFAULT_APPROVALS: [ApprovalChannel; 2] =
    [ApprovalChannel::Elicitation, ApprovalChannel::Operator];

/// `[server.http]`: who may talk to `serve --http` and how much. The bind address and the
/// token source are command-line flags (`--http`, `--http-token-file`, `--http-token-env`),
/// never policy: a token does not belong in a file the policy is shown from.
#[derive(Debug, Clone, Serialize)]
pub struct HttpPolicy {
    /// Browser origins (`scheme://host[:port|:*]`) whose requests are served; any other
    /// `Origin` gets 403. Requests without `Origin` (non-browser clients) pass.
    pub allowed_origins: Vec<String>,
    /// `Host` header values accepted (DNS-rebinding defence); `["*"]` accepts any.
    pub allowed_hosts: Vec<String>,
    pub max_body_bytes: usize,
    /// MCP sessions open at once (those begun with `initialize`); one more gets 503.
    pub max_sessions: usize,
    /// MCP sessions one subject may have open (default: `max_sessions`); one more of its
    /// `initialize`s gets 503 while other subjects still get theirs.
    pub max_sessions_per_subject: usize,
    /// Tool calls one session may have running at once; one more is refused.
    pub max_calls_per_session: usize,
    /// A session without any request for this long is ended (its calls and interpreters too).
    #[serde(serialize_with = "secs")]
    pub session_idle: Duration,
    /// `[server.http.oauth]`: JWT access tokens accepted besides (or instead of) the static
    /// token.
    pub oauth: Option<OAuthPolicy>,
    /// `[server.http.scopes]`: the scope each tool needs (a JWT's `scope` claim decides; the
    /// static token's holder has every scope). Every tool is listed.
    pub scopes: BTreeMap<String, String>,
    /// With `serve --workspaces DIR`: a subject's workspace runtime (its sandbox init, proxy,
    /// parser) with no session left is shut down after this long, and started again on its
    /// next call.
    #[serde(serialize_with = "secs")]
    pub workspace_idle: Duration,
    /// With `serve --workspaces DIR`: subject runtimes running at once; past it, the one
    /// unused longest is shut down to make room, and a call is refused when every one is in
    /// use.
    pub max_workspaces_running: usize,
    /// The JWT claim (a string or an array of strings) that names a subject's groups.
    pub group_claim: String,
    /// `[[server.http.group_policies]]`, in order: the first whose group a subject is in
    /// names the policy its calls run under (with `--workspaces`); in none, the server's own.
    pub group_policies: Vec<GroupPolicy>,
}

/// A group and the policy its members' calls run under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupPolicy {
    pub group: String,
    /// A built-in policy name or an absolute policy file.
    pub policy: String,
}

/// The tools whose scope `[server.http.scopes]` sets, with the scope each needs by default.
pub(crate) const DEFAULT_TOOL_SCOPES: [(&str, &str); 7] = [
    ("read_file", "cordon:read"),
    ("write_file", "cordon:write"),
    ("edit_file", "cordon:write"),
    ("shell_exec", "cordon:exec"),
    ("job", "cordon:exec"),
    ("code_interpreter", "cordon:exec"),
    // Scopes are per tool: `restore` rewrites the workspace, so the whole tool needs the
    // write scope (its `list` and `diff` show file contents a write token may see anyway).
    ("checkpoint", "cordon:write"),
];

/// An OAuth 2.1 resource server's settings: whose tokens, for which audience, signed by
/// which keys (a JWKS file; cordon fetches nothing).
#[derive(Debug, Clone, Serialize)]
pub struct OAuthPolicy {
    /// The `iss` every token must carry (also the authorization server named in the
    /// protected-resource metadata).
    pub issuer: String,
    /// The `aud` every token must include; default: `resource`.
    pub audience: String,
    pub jwks_file: PathBuf,
    /// This server's canonical URL as clients reach it (e.g. `https://cordon.example/mcp`):
    /// the metadata's `resource`, and where the metadata is said to be.
    pub resource: String,
    /// Signature algorithms accepted: asymmetric only (RS*, PS*, ES256/384, EdDSA).
    pub algorithms: Vec<String>,
    /// Scopes a token's `scope` claim must all include.
    pub required_scopes: Vec<String>,
}

/// Origins served when the policy names none: pages served from this machine only.
pub(crate) const DEFAULT_ALLOWED_ORIGINS: [&str; 3] =
    ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];
/// Hosts accepted when the policy names none: the loopback names.
pub(crate) const DEFAULT_ALLOWED_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Algorithms `[server.http.oauth]` may name: the asymmetric ones. HS* would make the JWKS
/// file a shared secret (and a public key usable as an HMAC key), `none` no signature at all.
pub(crate) const OAUTH_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

/// A requested timeout that the policy does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutError {
    Zero,
    AboveMax { requested: u64, max_secs: u64 },
}

impl TimeoutError {
    /// The message for a tool argument named `name`; `smaller` says how to split the work.
    pub fn for_argument(self, name: &str, smaller: &str) -> String {
        match self {
            TimeoutError::Zero => format!("`{name}` must be at least 1"),
            TimeoutError::AboveMax {
                requested,
                max_secs,
            } => format!(
                "`{name}` {requested} is above the policy maximum of {max_secs}s; ask for at \
                 most that, or {smaller}"
            ),
        }
    }
}

/// The timeout of one call: `requested` seconds if the policy allows them (at least 1, at
/// most `max`), else `default` when nothing was requested.
pub fn timeout_within(
    requested: Option<u64>,
    default: Duration,
    max: Duration,
) -> Result<Duration, TimeoutError> {
    match requested {
        None => Ok(default),
        Some(0) => Err(TimeoutError::Zero),
        Some(t) if t > max.as_secs() => Err(TimeoutError::AboveMax {
            requested: t,
            max_secs: max.as_secs(),
        }),
        Some(t) => Ok(Duration::from_secs(t)),
    }
}
