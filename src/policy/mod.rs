//! Policies: what a confined call may do, as data.
//!
//! A policy is TOML (schema in `policies/README.md`). This module owns loading it (embedded
//! name or file, following `extends`, `raw` holding all of serde) and validating it into the
//! typed [`Policy`]; resolving it against a workspace into the plans the other stages take
//! ([`resolve`]); answering allow, deny or ask for each tool request ([`decide`], with the
//! command rules in [`commands`]); and saying what a denial means ([`explain`]). How a policy
//! is *enforced* belongs to `confine`, `exec` and `workspace`, which never see a `Policy`.

pub mod commands;
pub mod decide;
pub mod explain;
mod interception;
pub mod jobs;
mod raw;
pub mod resolve;
pub mod toolchains;

pub use crate::interpreter::InterpreterPolicy;
pub use crate::shape::OutputPolicy;
pub use decide::{Analysed, Request};
pub use raw::WorkspaceAccess;
use raw::{Overlay, RawPolicy};
use resolve::expand_home;
pub use resolve::{Plans, server_home};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The policies compiled into the binary; the files under `policies/` are their source.
const EMBEDDED: &[(&str, &str)] = &[
    ("default", include_str!("../../policies/default.toml")),
    ("strict", include_str!("../../policies/strict.toml")),
    ("dev", include_str!("../../policies/dev.toml")),
];

/// How deep an `extends` chain may go before we call it a mistake (and catch cycles).
const MAX_EXTENDS_DEPTH: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy `{0}` is neither a built-in policy ({known}) nor a readable file", known = embedded_names().join(", "))]
    UnknownPolicy(String),
    #[error("cannot read policy file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: field `{field}`: {message}")]
    Invalid {
        origin: String,
        field: &'static str,
        message: String,
    },
    #[error("{origin}: `extends` chain is longer than {MAX_EXTENDS_DEPTH} or loops back on itself")]
    ExtendsTooDeep { origin: String },
}

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
pub const MAX_READ_BUDGET_KB: u64 = 256;

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
pub const DEFAULT_MAX_CONNECTIONS_PER_CALL: u64 = 256;
/// Default `network.max_mb_per_connection`.
pub const DEFAULT_MAX_MB_PER_CONNECTION: u64 = 1024;

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
pub const DEFAULT_SHM_MB: u64 = 256;

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
pub const DEFAULT_APPROVALS: [ApprovalChannel; 2] =
    [ApprovalChannel::Elicitation, ApprovalChannel::Operator];

/// `server.approvals` validated: known names, none twice, at least one.
fn approval_channels(list: Option<Vec<String>>) -> Result<Vec<ApprovalChannel>, String> {
    let Some(list) = list else {
        return Ok(DEFAULT_APPROVALS.to_vec());
    };
    if list.is_empty() {
        return Err(
            "is empty, so an `ask` rule could ask nobody: list \"elicitation\", \
                    \"operator\" or both (or make the rule `deny`)"
                .into(),
        );
    }
    let mut out = Vec::new();
    for name in &list {
        let channel = match name.as_str() {
            "elicitation" => ApprovalChannel::Elicitation,
            "operator" => ApprovalChannel::Operator,
            other => {
                return Err(format!(
                    "`{other}` is not an approval channel: use \"elicitation\" (the client asks \
                     its user) or \"operator\" (`cordon approvals` on the host)"
                ));
            }
        };
        if out.contains(&channel) {
            return Err(format!("lists `{name}` twice"));
        }
        out.push(channel);
    }
    Ok(out)
}

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
    /// Tool calls one session may have running at once; one more is refused.
    pub max_calls_per_session: usize,
    /// A session without any request for this long is ended (its calls and interpreters too).
    #[serde(serialize_with = "secs")]
    pub session_idle: Duration,
    /// `[server.http.oauth]`: JWT access tokens accepted besides (or instead of) the static
    /// token.
    pub oauth: Option<OAuthPolicy>,
}

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
pub const DEFAULT_ALLOWED_ORIGINS: [&str; 3] =
    ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"];
/// Hosts accepted when the policy names none: the loopback names.
pub const DEFAULT_ALLOWED_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

pub fn embedded_names() -> Vec<&'static str> {
    EMBEDDED.iter().map(|(name, _)| *name).collect()
}

fn embedded_source(name: &str) -> Option<&'static str> {
    EMBEDDED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| *src)
}

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

impl Policy {
    /// Loads a policy by built-in name or file path. A name wins over a file of the same name
    /// only when no such file exists, so `./strict.toml` and `strict` never surprise.
    pub fn load(name_or_path: &str) -> Result<Self, PolicyError> {
        load_chain(locate(name_or_path, None)?, true)
    }

    /// Parses a policy from TOML text (as if it were a file named `origin`); `extends` may only
    /// name built-in policies here, so no file is read. Used by fuzzing and tests.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, PolicyError> {
        load_chain((origin.to_owned(), text.to_owned(), None), false)
    }

    /// The built-in default policy.
    pub fn builtin_default() -> Self {
        Self::load("default").expect("the embedded default policy is valid (tested)")
    }
}

/// Loads a policy and the chain it `extends`, child first, then resolves the merge over the
/// built-in default. `first` is the located (origin, text, directory) of the policy itself;
/// with `files_allowed` false, parents may only be built-in policies.
fn load_chain(
    first: (String, String, Option<PathBuf>),
    files_allowed: bool,
) -> Result<Policy, PolicyError> {
    // (origin, text, parsed), child first; the text points a validation error at the line
    // that set the bad value.
    let mut layers: Vec<(String, String, RawPolicy)> = Vec::new();
    let mut sources: Vec<PathBuf> = Vec::new();
    // Where each command rule was written, child first: its examples are checked later,
    // through the parser worker, and their errors must still cite the file and line.
    let mut rule_sites: Vec<(String, String, usize)> = Vec::new();
    let first_origin = first.0.clone();
    let mut next = Some(first);
    while let Some((origin, text, dir)) = next.take() {
        if layers.len() >= MAX_EXTENDS_DEPTH {
            return Err(PolicyError::ExtendsTooDeep {
                origin: first_origin,
            });
        }
        // A layer has a directory exactly when it was read from a file.
        if dir.is_some() {
            let path = PathBuf::from(&origin);
            sources.push(std::fs::canonicalize(&path).unwrap_or(path));
        }
        let raw: RawPolicy = toml::from_str(&text).map_err(|e| PolicyError::Parse {
            origin: origin.clone(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        if let Some(rules) = raw.commands.rules.clone() {
            // Checked per file, while the text is at hand, so errors cite the file's line.
            let compiled =
                commands::CommandRules::compile(commands::Decision::Allow, rules, Some(&text))
                    .map_err(|e| PolicyError::Invalid {
                        origin: origin.clone(),
                        field: "commands.rules",
                        message: e.to_string(),
                    })?;
            rule_sites.extend(
                compiled
                    .rules
                    .into_iter()
                    .map(|r| (origin.clone(), r.name, r.line)),
            );
        }
        next = match raw.extends.as_deref() {
            None => None,
            Some(parent) if files_allowed => Some(locate(parent, dir.as_deref())?),
            Some(parent) => match embedded_source(parent) {
                Some(text) => Some((format!("builtin:{parent}"), text.to_owned(), None)),
                None => return Err(PolicyError::UnknownPolicy(parent.to_owned())),
            },
        };
        layers.push((origin, text, raw));
    }
    let origin = layers[0].0.clone();
    // Everything falls back to the built-in default, so a policy names only what it changes.
    let default_raw: RawPolicy =
        toml::from_str(embedded_source("default").unwrap_or("")).map_err(|e| {
            PolicyError::Parse {
                origin: "builtin:default".into(),
                message: e.to_string(),
            }
        })?;
    let merged = layers
        .iter()
        .rev()
        .fold(default_raw, |base, (_, _, layer)| {
            layer.clone().overlay(base)
        });
    let resolved = validate(merged, origin).map_err(|e| match e {
        PolicyError::Invalid { field, message, .. } => match layers
            .iter()
            .find_map(|(o, t, _)| field_line(t, field).map(|line| (o.clone(), line)))
        {
            Some((origin, line)) => PolicyError::Invalid {
                origin: format!("{origin}:{line}"),
                field,
                message,
            },
            None => PolicyError::Invalid {
                origin: layers[0].0.clone(),
                field,
                message,
            },
        },
        other => other,
    });
    resolved.map(|mut policy| {
        policy.commands.locate(&rule_sites);
        locate_network(&mut policy.network, &layers);
        policy.sources = sources;
        policy
    })
}

/// Finds the text of a policy reference: a file path (relative to the extending file's
/// directory) or an embedded name.
fn locate(
    reference: &str,
    relative_to: Option<&Path>,
) -> Result<(String, String, Option<PathBuf>), PolicyError> {
    let candidate = match relative_to {
        Some(dir) if Path::new(reference).is_relative() => dir.join(reference),
        _ => PathBuf::from(reference),
    };
    let looks_like_path = reference.contains('/') || reference.ends_with(".toml");
    if looks_like_path || candidate.is_file() {
        let text = std::fs::read_to_string(&candidate).map_err(|source| PolicyError::Read {
            path: candidate.clone(),
            source,
        })?;
        let dir = candidate.parent().map(Path::to_path_buf);
        return Ok((candidate.display().to_string(), text, dir));
    }
    match embedded_source(reference) {
        Some(text) => Ok((format!("builtin:{reference}"), text.to_owned(), None)),
        None => Err(PolicyError::UnknownPolicy(reference.to_owned())),
    }
}

/// The 1-based line where `field` (`section.key`, or a bare top-level key) is set in a policy
/// text, found by reading section headers and `key =` lines (enough for cordon's flat schema).
fn field_line(text: &str, field: &str) -> Option<usize> {
    let (section, key) = match field.rsplit_once('.') {
        Some((s, k)) => (Some(s), k),
        None => (None, field),
    };
    let mut current: Option<String> = None;
    let mut header_line = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            let name = t.trim_matches(|c| c == '[' || c == ']').trim().to_owned();
            if section.is_none() && name == key {
                header_line = Some(i + 1);
            }
            current = Some(name);
            continue;
        }
        if let Some((k, _)) = t.split_once('=')
            && k.trim() == key
            && current.as_deref() == section
        {
            return Some(i + 1);
        }
    }
    header_line
}

/// `[network]` in proxy mode, compiled; where each list is written is filled in later
/// ([`locate_network`]), when the layers' texts are at hand.
fn egress_rules(
    n: &raw::RawNetwork,
    invalid: &dyn Fn(&'static str, String) -> PolicyError,
    origin: &str,
) -> Result<crate::egress::EgressRules, PolicyError> {
    use crate::egress::pattern::{Cidr, HostPattern, Target};
    use crate::egress::rules::{Site, SitedPattern};
    let site = Site {
        origin: origin.to_owned(),
        line: None,
    };
    let patterns = |field: &'static str, list: &Option<Vec<String>>| {
        list.iter()
            .flatten()
            .map(|text| {
                HostPattern::parse(text)
                    .map(|pattern| SitedPattern {
                        pattern,
                        site: site.clone(),
                    })
                    .map_err(|e| {
                        invalid(
                            field,
                            format!(
                                "{e}. A pattern is `name`, `*.name` (names below it), an IP \
                                 address, or `[IPv6]`, each optionally with `:port` or `:*`; \
                                 e.g. \"example.org\", \"*.example.net:443\""
                            ),
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let allow_private = n
        .allow_private
        .iter()
        .flatten()
        .map(|c| Cidr::parse(c).map_err(|e| invalid("network.allow_private", e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let positive = |field: &'static str, v: Option<u64>, default: u64| match v.unwrap_or(default) {
        0 => Err(invalid(field, "must be greater than 0".into())),
        v => Ok(v),
    };
    let rules = crate::egress::EgressRules {
        allow_hosts: patterns("network.allow_hosts", &n.allow_hosts)?,
        deny_hosts: patterns("network.deny_hosts", &n.deny_hosts)?,
        allow_private,
        max_connections_per_call: positive(
            "network.max_connections_per_call",
            n.max_connections_per_call,
            DEFAULT_MAX_CONNECTIONS_PER_CALL,
        )? as usize,
        max_bytes_per_connection: positive(
            "network.max_mb_per_connection",
            n.max_mb_per_connection,
            DEFAULT_MAX_MB_PER_CONNECTION,
        )?
        .saturating_mul(1024 * 1024),
        allow_site: site.clone(),
        deny_site: site.clone(),
        private_site: site.clone(),
        caps_site: site,
        credentials: Vec::new(),
        http_rules: Vec::new(),
        git: None,
        extra_roots: Vec::new(),
    };
    if let Some(examples) = &n.host_examples {
        for (text, want_allowed) in examples
            .allowed
            .iter()
            .map(|t| (t, true))
            .chain(examples.refused.iter().map(|t| (t, false)))
        {
            let target = Target::parse_with_default(text, 443).map_err(|e| {
                invalid(
                    "network.host_examples",
                    format!("{e} (an example is `host` or `host:port`; no port means 443)"),
                )
            })?;
            match (rules.judge(&target), want_allowed) {
                (Ok(()), true) | (Err(_), false) => {}
                (Ok(()), false) => {
                    return Err(invalid(
                        "network.host_examples",
                        format!(
                            "`{text}` is listed as refused, but allow_hosts allows {target} (and \
                             no deny_hosts entry matches it)"
                        ),
                    ));
                }
                (Err(refusal), true) => {
                    return Err(invalid(
                        "network.host_examples",
                        format!(
                            "`{text}` is listed as allowed, but {target} is refused: {}",
                            refusal.kind()
                        ),
                    ));
                }
            }
        }
    }
    Ok(rules)
}

/// Fills in where the proxy's lists are written (file and line of the list, and of each
/// pattern), so a refusal can say "add it there". `layers` is child first.
fn locate_network(network: &mut NetworkPolicy, layers: &[(String, String, RawPolicy)]) {
    use crate::egress::rules::Site;
    let Some(rules) = network.proxy.as_mut() else {
        return;
    };
    let site_of = |field: &str| -> (Site, Option<&str>) {
        for (origin, text, _) in layers {
            if let Some(line) = field_line(text, field) {
                return (
                    Site {
                        origin: origin.clone(),
                        line: Some(line),
                    },
                    Some(text.as_str()),
                );
            }
        }
        (
            Site {
                origin: layers.first().map(|l| l.0.clone()).unwrap_or_default(),
                line: None,
            },
            None,
        )
    };
    let place = |list: &mut [crate::egress::rules::SitedPattern], field: &str| -> Site {
        let (site, text) = site_of(field);
        for entry in list.iter_mut() {
            entry.site = site.clone();
            if let (Some(text), Some(from)) = (text, site.line) {
                let quoted = format!("\"{}\"", entry.pattern.text);
                if let Some(i) = text
                    .lines()
                    .enumerate()
                    .skip(from - 1)
                    .find(|(_, l)| l.contains(&quoted))
                    .map(|(i, _)| i)
                {
                    entry.site.line = Some(i + 1);
                }
            }
        }
        site
    };
    rules.allow_site = place(&mut rules.allow_hosts, "network.allow_hosts");
    rules.deny_site = place(&mut rules.deny_hosts, "network.deny_hosts");
    rules.private_site = site_of("network.allow_private").0;
    rules.caps_site = site_of("network.max_connections_per_call").0;
    interception::locate(rules, layers);
}

/// The merged raw layers, checked field by field into a [`Policy`] (the plans come later, from
/// [`resolve`]).
fn validate(raw: RawPolicy, origin: String) -> Result<Policy, PolicyError> {
    let invalid = |field: &'static str, message: String| PolicyError::Invalid {
        origin: origin.clone(),
        field,
        message,
    };
    let missing = |field: &'static str| invalid(field, "is required".into());
    let paths =
        |field: &'static str, list: Option<Vec<String>>| -> Result<Vec<PathBuf>, PolicyError> {
            let list = list.ok_or_else(|| missing(field))?;
            list.into_iter()
                .map(|p| {
                    let p = expand_home(p);
                    if !p.starts_with('/') || p.contains('\0') {
                        Err(invalid(field, format!("`{p}` must be an absolute path")))
                    } else {
                        Ok(PathBuf::from(p))
                    }
                })
                .collect()
        };
    let positive = |field: &'static str, v: Option<u64>| -> Result<u64, PolicyError> {
        match v {
            None => Err(missing(field)),
            Some(0) => Err(invalid(field, "must be greater than 0".into())),
            Some(v) => Ok(v),
        }
    };
    let mib = |v: u64| v.saturating_mul(1024 * 1024);

    let fs = raw.filesystem;
    let filesystem = FilesystemPolicy {
        read_exec: paths("filesystem.read_exec", fs.read_exec)?,
        read_write: paths("filesystem.read_write", fs.read_write)?,
        deny: paths("filesystem.deny", fs.deny)?,
        devices: paths("filesystem.devices", fs.devices)?,
        workspace: fs
            .workspace
            .ok_or_else(|| missing("filesystem.workspace"))?,
        workspace_writable: fs.workspace_writable.unwrap_or_default(),
        protected: fs.protected.unwrap_or_default(),
        toolchains: paths(
            "filesystem.toolchains",
            Some(fs.toolchains.unwrap_or_default()),
        )?,
    };
    for p in &filesystem.workspace_writable {
        if p.starts_with('/') || p.split('/').any(|c| c == "..") || p.trim_matches('/').is_empty() {
            return Err(invalid(
                "filesystem.workspace_writable",
                format!("`{p}` must be a workspace-relative directory without `..`"),
            ));
        }
    }
    for p in &filesystem.protected {
        if p.starts_with('/') || p.split('/').any(|c| c == "..") || p.trim_matches('/').is_empty() {
            return Err(invalid(
                "filesystem.protected",
                format!("`{p}` must be a workspace-relative path without `..`"),
            ));
        }
    }

    let n = raw.network;
    let proxy = n.proxy.unwrap_or(false);
    if !proxy {
        for (field, set) in [
            (
                "network.allow_hosts",
                n.allow_hosts.as_ref().is_some_and(|l| !l.is_empty()),
            ),
            (
                "network.deny_hosts",
                n.deny_hosts.as_ref().is_some_and(|l| !l.is_empty()),
            ),
            (
                "network.allow_private",
                n.allow_private.as_ref().is_some_and(|l| !l.is_empty()),
            ),
            ("network.host_examples", n.host_examples.is_some()),
            (
                interception::any_set(&n).unwrap_or("network.credentials"),
                interception::any_set(&n).is_some(),
            ),
        ] {
            if set {
                return Err(invalid(
                    field,
                    "host rules only apply through the egress proxy: set `proxy = true` in \
                     [network] (and remove tcp_connect ports meant for the internet)"
                        .into(),
                ));
            }
        }
    }
    let egress = if proxy {
        let mut rules = egress_rules(&n, &invalid, &origin)?;
        interception::compile(&n, &mut rules, &invalid, &origin)?;
        Some(rules)
    } else {
        None
    };
    let network = NetworkPolicy {
        tcp_connect: n.tcp_connect.unwrap_or_default(),
        tcp_bind: n.tcp_bind.unwrap_or_default(),
        proxy: egress,
    };
    // In tcp_bind, 0 is what a server asks for when any free port will do (the kernel picks
    // one); nothing can be connected to on port 0.
    if network.tcp_connect.contains(&0) {
        return Err(invalid(
            "network.tcp_connect",
            "nothing can be connected to on port 0; list the ports to connect to (port 0 is \
             meaningful in tcp_bind only: any port the kernel picks)"
                .into(),
        ));
    }
    if network.uses_proxy() && network.tcp_bind.contains(&crate::egress::PROXY_PORT) {
        return Err(invalid(
            "network.tcp_bind",
            format!(
                "port {} is the egress proxy's in the sandbox's network namespace; bind \
                 another",
                crate::egress::PROXY_PORT
            ),
        ));
    }

    let l = raw.limits;
    let timeout = positive("limits.timeout_secs", l.timeout_secs)?;
    let max_timeout = positive("limits.max_timeout_secs", l.max_timeout_secs)?;
    if timeout > max_timeout {
        return Err(invalid(
            "limits.timeout_secs",
            format!("{timeout} is above limits.max_timeout_secs ({max_timeout})"),
        ));
    }
    let limits = Limits {
        timeout: Duration::from_secs(timeout),
        max_timeout: Duration::from_secs(max_timeout),
        memory_bytes: mib(positive("limits.memory_mb", l.memory_mb)?),
        pids: positive("limits.pids", l.pids)?,
        cpu_percent: positive("limits.cpu_percent", l.cpu_percent)?,
        cpu_seconds: positive("limits.cpu_seconds", l.cpu_seconds)?,
        file_size_bytes: mib(positive("limits.file_size_mb", l.file_size_mb)?),
        open_files: positive("limits.open_files", l.open_files)?,
        address_space_bytes: mib(positive("limits.address_space_mb", l.address_space_mb)?),
        disk_bytes: mib(positive("limits.disk_mb", l.disk_mb)?),
        // Unset: the default, but never more than a quarter of the call's memory.
        shm_bytes: match l.shm_mb {
            Some(mb) => mib(mb),
            None => mib(DEFAULT_SHM_MB).min(mib(l.memory_mb.unwrap_or(0)) / 4),
        },
    };
    if limits.shm_bytes > limits.memory_bytes {
        return Err(invalid(
            "limits.shm_mb",
            format!(
                "{} is above limits.memory_mb ({}): /dev/shm is charged to the call's memory, so \
                 it cannot be larger",
                limits.shm_bytes >> 20,
                limits.memory_bytes >> 20
            ),
        ));
    }

    let environment = EnvironmentPolicy {
        pass: raw.environment.pass.unwrap_or_default(),
        set: raw.environment.set.unwrap_or_default(),
    };
    for name in environment.pass.iter().chain(environment.set.keys()) {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(invalid(
                "environment",
                format!("`{name}` is not a valid variable name"),
            ));
        }
    }

    if let Some(rules) = &network.proxy {
        interception::check_reach(rules, &filesystem, &environment, &invalid)?;
    }

    let sandbox = SandboxPolicy {
        seccomp_profile: raw
            .sandbox
            .seccomp_profile
            .ok_or_else(|| missing("sandbox.seccomp_profile"))?,
        fallback_unix_sockets: raw.sandbox.fallback_unix_sockets.unwrap_or(false),
    };
    if !network.is_off() && sandbox.seccomp_profile == "default" {
        return Err(invalid(
            "sandbox.seccomp_profile",
            if network.uses_proxy() {
                "the `default` profile allows no network sockets, but `network.proxy` is on; \
                 use seccomp_profile = \"tcp\" (the proxy resolves names itself, so no UDP is \
                 needed)"
            } else {
                "the `default` profile allows no network sockets, but `network` lists TCP ports; \
                 use seccomp_profile = \"tcp\" (or \"tcp_udp\" when DNS is needed)"
            }
            .into(),
        ));
    }

    let o = raw.output;
    let output = OutputPolicy {
        max_lines: positive("output.max_lines", o.max_lines.map(|v| v as u64))? as usize,
        max_chars: positive("output.max_chars", o.max_chars.map(|v| v as u64))? as usize,
        head_lines: o.head_lines.ok_or_else(|| missing("output.head_lines"))?,
        tail_lines: o.tail_lines.ok_or_else(|| missing("output.tail_lines"))?,
        memory_cap_bytes: positive("output.memory_cap_kb", o.memory_cap_kb.map(|v| v as u64))?
            as usize
            * 1024,
        keep_control_chars: o.keep_control_chars.unwrap_or(false),
        spill_total_bytes: mib(positive("output.spill_total_mb", o.spill_total_mb)?),
    };
    let one_spill_file_mb = crate::exec::capture::SPILL_LIMIT >> 20;
    if output.spill_total_bytes < crate::exec::capture::SPILL_LIMIT {
        return Err(invalid(
            "output.spill_total_mb",
            format!(
                "must be at least {one_spill_file_mb}, the most one spill file holds, so the \
                 newest full output always fits"
            ),
        ));
    }
    if output.head_lines + output.tail_lines >= output.max_lines {
        return Err(invalid(
            "output.head_lines",
            "head_lines + tail_lines must be below max_lines".into(),
        ));
    }

    let server = ServerPolicy {
        max_concurrent_calls: positive(
            "server.max_concurrent_calls",
            raw.server.max_concurrent_calls.map(|v| v as u64),
        )? as usize,
        audit_log: raw.server.audit_log.map(PathBuf::from),
        audit_log_max_bytes: raw.server.audit_log_max_kb.unwrap_or(10 * 1024) * 1024,
        audit_log_values: raw.server.audit_log_values.unwrap_or(false),
        approval_timeout: Duration::from_secs(positive(
            "server.approval_timeout_secs",
            Some(raw.server.approval_timeout_secs.unwrap_or(300)),
        )?),
        approvals: approval_channels(raw.server.approvals)
            .map_err(|m| invalid("server.approvals", m))?,
        http: resolve_http(raw.server.http, &invalid, &positive)?,
    };

    let lint = LintPolicy {
        enabled: raw.lint.enabled.unwrap_or(true),
        syntax: raw.lint.syntax.unwrap_or(true),
        timeout: Duration::from_secs(positive("lint.timeout_secs", raw.lint.timeout_secs)?),
        max_file_bytes: positive("lint.max_file_kb", raw.lint.max_file_kb)? as usize * 1024,
        linters: raw
            .lint
            .linters
            .unwrap_or_default()
            .iter()
            .map(|linter| {
                linter
                    .compile()
                    .map_err(|e| invalid("lint.linters", e.to_string()))
            })
            .collect::<Result<_, _>>()?,
    };

    let mut commands = commands::CommandRules::compile(
        raw.commands.on_unknown.unwrap_or(commands::Decision::Allow),
        raw.commands.rules.unwrap_or_default(),
        None,
    )
    .map_err(|e| invalid("commands.rules", e.to_string()))?;
    commands.on_analysis_failure = raw
        .commands
        .on_analysis_failure
        .unwrap_or(commands::DEFAULT_ON_ANALYSIS_FAILURE);
    let i = raw.interpreter;
    let python = i.python.ok_or_else(|| missing("interpreter.python"))?;
    if python.trim().is_empty() || python.contains('\0') {
        return Err(invalid(
            "interpreter.python",
            "must name a Python executable".into(),
        ));
    }
    let interpreter = InterpreterPolicy {
        python,
        memory_bytes: mib(positive("interpreter.memory_mb", i.memory_mb)?),
        pids: positive("interpreter.pids", i.pids)?,
        cpu_percent: positive("interpreter.cpu_percent", i.cpu_percent)?,
        cpu_seconds: positive("interpreter.cpu_seconds", i.cpu_seconds)?,
        timeout: Duration::from_secs(positive("interpreter.timeout_secs", i.timeout_secs)?),
        max_timeout: Duration::from_secs(positive(
            "interpreter.max_timeout_secs",
            i.max_timeout_secs,
        )?),
        interrupt_grace: Duration::from_secs(positive(
            "interpreter.interrupt_grace_secs",
            i.interrupt_grace_secs,
        )?),
        start_timeout: Duration::from_secs(positive(
            "interpreter.start_timeout_secs",
            i.start_timeout_secs,
        )?),
        idle_timeout: Duration::from_secs(positive(
            "interpreter.idle_timeout_secs",
            i.idle_timeout_secs,
        )?),
        max_sessions: positive("interpreter.max_sessions", i.max_sessions.map(|v| v as u64))?
            as usize,
        keep_background: i.keep_background.unwrap_or(false),
    };
    if interpreter.timeout > interpreter.max_timeout {
        return Err(invalid(
            "interpreter.timeout_secs",
            "is above interpreter.max_timeout_secs".into(),
        ));
    }

    let jobs = jobs::JobsPolicy::validate(raw.jobs).map_err(|e| invalid(e.field, e.message))?;

    let read_budget_kb = positive("files.read_budget_kb", raw.files.read_budget_kb)?;
    if read_budget_kb > MAX_READ_BUDGET_KB {
        return Err(invalid(
            "files.read_budget_kb",
            format!(
                "{read_budget_kb} is above {MAX_READ_BUDGET_KB}: read_file's content goes out \
                 twice (structured and text) and a result must stay under 1 MiB"
            ),
        ));
    }
    let files = FilesPolicy {
        read_budget_bytes: read_budget_kb as usize * 1024,
    };

    Ok(Policy {
        files,
        sources: Vec::new(),
        name: raw.name.unwrap_or_else(|| origin.clone()),
        description: raw.description.unwrap_or_default(),
        origin,
        filesystem,
        network,
        limits,
        environment,
        sandbox,
        output,
        server,
        lint,
        commands,
        interpreter,
        jobs,
    })
}

/// `[server.http]`, with `resolve`'s error makers (they name the policy file).
fn resolve_http(
    raw: raw::RawHttp,
    invalid: &dyn Fn(&'static str, String) -> PolicyError,
    positive: &dyn Fn(&'static str, Option<u64>) -> Result<u64, PolicyError>,
) -> Result<HttpPolicy, PolicyError> {
    let allowed_origins = raw.allowed_origins.unwrap_or_else(|| {
        DEFAULT_ALLOWED_ORIGINS
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    });
    for origin in &allowed_origins {
        // `null`: the `Origin` of sandboxed frames and file pages, as documented.
        let scheme_ok = origin.starts_with("http://") || origin.starts_with("https://");
        if origin != "null" && (!scheme_ok || origin.trim_end_matches(":*").ends_with('/')) {
            return Err(invalid(
                "server.http.allowed_origins",
                format!(
                    "`{origin}` is not an origin: write `scheme://host`, `scheme://host:port` \
                     or `scheme://host:*` (no path), e.g. \"https://app.example.com\", or \
                     `null`"
                ),
            ));
        }
    }
    let allowed_hosts = raw.allowed_hosts.unwrap_or_else(|| {
        DEFAULT_ALLOWED_HOSTS
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    });
    if allowed_hosts.is_empty() {
        return Err(invalid(
            "server.http.allowed_hosts",
            "an empty list would refuse every request; list the host names clients use, or \
             [\"*\"] to accept any Host header"
                .to_owned(),
        ));
    }
    Ok(HttpPolicy {
        allowed_origins,
        allowed_hosts,
        max_body_bytes: positive(
            "server.http.max_body_kb",
            Some(raw.max_body_kb.unwrap_or(4096)),
        )? as usize
            * 1024,
        max_sessions: positive(
            "server.http.max_sessions",
            Some(raw.max_sessions.unwrap_or(16) as u64),
        )? as usize,
        max_calls_per_session: positive(
            "server.http.max_calls_per_session",
            Some(raw.max_calls_per_session.unwrap_or(4) as u64),
        )? as usize,
        session_idle: Duration::from_secs(positive(
            "server.http.session_idle_secs",
            Some(raw.session_idle_secs.unwrap_or(900)),
        )?),
        oauth: raw.oauth.map(|o| resolve_oauth(o, invalid)).transpose()?,
    })
}

/// Algorithms `[server.http.oauth]` may name: the asymmetric ones. HS* would make the JWKS
/// file a shared secret (and a public key usable as an HMAC key), `none` no signature at all.
pub const OAUTH_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

fn resolve_oauth(
    raw: raw::RawOAuth,
    invalid: &dyn Fn(&'static str, String) -> PolicyError,
) -> Result<OAuthPolicy, PolicyError> {
    let required = |field: &'static str, v: Option<String>| {
        v.filter(|v| !v.trim().is_empty())
            .ok_or_else(|| invalid(field, "is required when [server.http.oauth] is set".into()))
    };
    let issuer = required("server.http.oauth.issuer", raw.issuer)?;
    let resource = required("server.http.oauth.resource", raw.resource)?;
    if !(resource.starts_with("https://") || resource.starts_with("http://")) {
        return Err(invalid(
            "server.http.oauth.resource",
            format!(
                "`{resource}` must be this server's URL as clients reach it, e.g. \"https://cordon.example.com/mcp\""
            ),
        ));
    }
    let jwks_file = PathBuf::from(expand_home(required(
        "server.http.oauth.jwks_file",
        raw.jwks_file,
    )?));
    if !jwks_file.is_absolute() {
        return Err(invalid(
            "server.http.oauth.jwks_file",
            format!("`{}` must be an absolute path", jwks_file.display()),
        ));
    }
    let algorithms = raw
        .algorithms
        .unwrap_or_else(|| vec!["RS256".into(), "ES256".into(), "EdDSA".into()]);
    if algorithms.is_empty() {
        return Err(invalid(
            "server.http.oauth.algorithms",
            "name at least one signature algorithm".into(),
        ));
    }
    for alg in &algorithms {
        if !OAUTH_ALGORITHMS.contains(&alg.as_str()) {
            return Err(invalid(
                "server.http.oauth.algorithms",
                format!(
                    "`{alg}` is not accepted: use asymmetric ones ({}); HS* and none are refused",
                    OAUTH_ALGORITHMS.join(", ")
                ),
            ));
        }
    }
    Ok(OAuthPolicy {
        audience: raw
            .audience
            .filter(|a| !a.trim().is_empty())
            .unwrap_or_else(|| resource.clone()),
        issuer,
        jwks_file,
        resource,
        algorithms,
        required_scopes: raw.required_scopes.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::bash::analyze;

    #[test]
    fn embedded_default_is_complete_and_valid() {
        let p = Policy::builtin_default();
        assert_eq!(p.name, "default");
        assert!(p.network.is_off());
        assert!(
            p.filesystem
                .deny
                .iter()
                .any(|d| d == Path::new("/etc/shadow"))
        );
    }

    #[test]
    fn unknown_field_is_an_error_with_a_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(&f, "[limits]\nmemory_mb = 10\nmemroy_mb = 5\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("memroy_mb"), "{err}");
    }

    #[test]
    fn approval_channels_are_named_once_each_in_order_of_preference() {
        assert_eq!(
            Policy::builtin_default().server.approvals,
            DEFAULT_APPROVALS.to_vec()
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        let load = |text: &str| {
            std::fs::write(&f, format!("extends = \"default\"\n[server]\n{text}\n")).unwrap();
            Policy::load(f.to_str().unwrap()).map(|p| p.server.approvals)
        };
        assert_eq!(
            load("approvals = [\"operator\", \"elicitation\"]").unwrap(),
            [ApprovalChannel::Operator, ApprovalChannel::Elicitation]
        );
        for (text, says) in [
            ("approvals = []", "could ask nobody"),
            (
                "approvals = [\"email\"]",
                "`email` is not an approval channel",
            ),
            ("approvals = [\"operator\", \"operator\"]", "twice"),
        ] {
            let err = load(text).unwrap_err().to_string();
            assert!(
                err.contains("field `server.approvals`") && err.contains(says),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn invalid_value_cites_file_line_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.toml");
        std::fs::write(&base, "# base\n[limits]\n\nmemory_mb = 0\n").unwrap();
        let f = dir.path().join("child.toml");
        std::fs::write(&f, "extends = \"base.toml\"\n[limits]\npids = 9\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            err.contains("base.toml:4: field `limits.memory_mb`"),
            "{err}"
        );
        std::fs::write(&f, "[limits]\npids = 0\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("child.toml:2: field `limits.pids`"), "{err}");
    }

    #[test]
    fn extends_overlays_only_named_fields() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.toml"), "[limits]\npids = 7\n").unwrap();
        let f = dir.path().join("child.toml");
        std::fs::write(&f, "extends = \"base.toml\"\n[limits]\nmemory_mb = 64\n").unwrap();
        let p = Policy::load(f.to_str().unwrap()).unwrap();
        assert_eq!(p.limits.pids, 7);
        assert_eq!(p.limits.memory_bytes, 64 << 20);
        assert_eq!(
            p.limits.open_files,
            Policy::builtin_default().limits.open_files
        );
    }

    #[test]
    fn extends_cycle_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.toml");
        std::fs::write(&f, "extends = \"a.toml\"\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err();
        assert!(matches!(err, PolicyError::ExtendsTooDeep { .. }), "{err}");
    }

    #[test]
    fn tcp_ports_need_a_profile_that_allows_sockets() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(&f, "[network]\ntcp_connect = [443]\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("seccomp_profile"), "{err}");
    }

    #[test]
    fn every_shipped_command_rule_has_passing_examples() {
        // Loading already checks each rule's examples; this pins that the default ships them
        // and that each match example gets a non-allow decision from the whole rule list.
        let p = Policy::builtin_default();
        assert_eq!(p.commands.on_unknown, commands::Decision::Allow);
        let names: Vec<&str> = p.commands.rules.iter().map(|r| r.name.as_str()).collect();
        for expected in [
            "rm-recursive-root-or-home",
            "rm-recursive-workspace",
            "git-push-force",
            "download-piped-into-shell",
            "mkfs",
            "dd-to-device",
            "chmod-chown-recursive-root",
            "fork-bomb",
        ] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        p.commands
            .verify_examples(&|l| Some(analyze(l)))
            .expect("the shipped examples pass");
        for rule in &p.commands.rules {
            assert!(!rule.examples.matches.is_empty() && !rule.examples.not_match.is_empty());
            for example in &rule.examples.matches {
                let v = p.commands.decide(&analyze(example));
                assert!(
                    v.decision >= rule.decision,
                    "{}: `{example}` got {v:?}",
                    rule.name
                );
            }
        }
    }

    #[test]
    fn a_rule_with_a_failing_example_makes_the_policy_invalid_citing_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(
            &f,
            "name = \"x\"\n\n[[commands.rules]]\nname = \"no-ls\"\ndecision = \"deny\"\n\
             justification = \"why\"\nmatch = { program = [\"ls\"] }\n\
             examples = { match = [\"ls\"], not_match = [\"ls -la\"] }\n",
        )
        .unwrap();
        // Loading checks the rule's shape; its examples are run through the parser worker
        // by the server, as here through the in-process analysis of the tests.
        let p = Policy::load(f.to_str().unwrap()).unwrap();
        let err = p
            .commands
            .verify_examples(&|l| Some(analyze(l)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("p.toml"), "{err}");
        assert!(err.contains("line 4"), "{err}");
        assert!(err.contains("rule `no-ls`"), "{err}");
        assert!(err.contains("`ls -la`"), "{err}");
    }

    #[test]
    fn a_typo_in_a_rule_is_a_parse_error_with_a_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(
            &f,
            "[commands]\non_unknown = \"ask\"\n[[commands.rules]]\nname = \"a\"\n\
             decision = \"deny\"\njustification = \"j\"\nmatch = { progam = [\"ls\"] }\n",
        )
        .unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("line 7"), "{err}");
        assert!(err.contains("progam"), "{err}");
        std::fs::write(&f, "[commands]\non_unknown = \"maybe\"\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn extending_policies_inherit_or_replace_the_rules() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(
            &f,
            "extends = \"default\"\n[commands]\non_unknown = \"deny\"\n",
        )
        .unwrap();
        let p = Policy::load(f.to_str().unwrap()).unwrap();
        assert_eq!(p.commands.on_unknown, commands::Decision::Deny);
        assert_eq!(
            p.commands.rules.len(),
            Policy::builtin_default().commands.rules.len()
        );
        std::fs::write(&f, "[commands]\nrules = []\n").unwrap();
        let p = Policy::load(f.to_str().unwrap()).unwrap();
        assert!(p.commands.rules.is_empty());
        assert_eq!(
            p.commands.decide(&analyze("rm -rf /")).decision,
            commands::Decision::Allow
        );
    }

    #[test]
    fn everyday_agent_commands_pass_the_default_rules() {
        let p = Policy::builtin_default();
        for line in [
            "cargo test 2>&1 | tail -n 30",
            "rm -rf target build dist node_modules",
            "rm -rf ./build/*",
            "git push origin HEAD",
            "git push --force-with-lease",
            "find . -name '*.pyc' -delete",
            "find . -type f -exec grep -l TODO {} +",
            "curl -s localhost:8080/health | jq .",
            "python3 -c 'print(1)'",
            "for f in *.py; do python3 -m py_compile \"$f\"; done",
            "cat <<EOF > notes.txt\nrm -rf /\nEOF",
            "dd if=/dev/zero of=disk.img bs=1M count=10",
            "chmod -R u+w .",
            "sh -c 'make -j2 && make install DESTDIR=$PWD/out'",
            "$EDITOR file",
        ] {
            let v = p.commands.decide(&analyze(line));
            assert_eq!(v.decision, commands::Decision::Allow, "`{line}`: {v:?}");
        }
    }

    fn load_text(text: &str) -> Result<Policy, PolicyError> {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(&f, text).unwrap();
        Policy::load(f.to_str().unwrap())
    }

    #[test]
    fn dev_ships_the_proxy_with_an_empty_allow_list_and_no_udp() {
        let p = Policy::load("dev").unwrap();
        let rules = p.network.proxy.as_ref().expect("dev uses the proxy");
        assert!(rules.allow_hosts.is_empty() && rules.deny_hosts.is_empty());
        assert!(p.network.tcp_connect.is_empty());
        assert_eq!(p.sandbox.seccomp_profile, "tcp");
        assert_eq!(rules.allow_site.origin, "builtin:dev");
        assert!(rules.allow_site.line.is_some());
        assert!(Policy::builtin_default().network.is_off());
        assert!(Policy::load("strict").unwrap().network.is_off());
    }

    #[test]
    fn host_rules_without_the_proxy_are_an_error_naming_the_fix() {
        let err = load_text("[network]\nallow_hosts = [\"example.org\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("p.toml:2: field `network.allow_hosts`"),
            "{err}"
        );
        assert!(err.contains("proxy = true"), "{err}");
    }

    #[test]
    fn port_0_binds_any_free_port_but_cannot_be_connected_to() {
        let p = load_text(
            "extends = \"default\"\n[network]\ntcp_bind = [0]\n[sandbox]\nseccomp_profile = \"tcp\"\n",
        )
        .unwrap();
        assert_eq!(p.network.tcp_bind, vec![0]);
        let err = load_text(
            "extends = \"default\"\n[network]\ntcp_connect = [0]\n[sandbox]\nseccomp_profile = \"tcp\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("network.tcp_connect"), "{err}");
        assert!(err.contains("tcp_bind only"), "{err}");
    }

    #[test]
    fn a_bad_pattern_cites_its_line_and_the_grammar() {
        let err = load_text("extends = \"dev\"\n[network]\nallow_hosts = [\"a.*.example.org\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("p.toml:3: field `network.allow_hosts`"),
            "{err}"
        );
        assert!(err.contains("`*.name`"), "{err}");
        let err = load_text("extends = \"dev\"\n[network]\nallow_private = [\"10.0.0.0\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("network.allow_private"), "{err}");
        let err = load_text("extends = \"dev\"\n[network]\ntcp_bind = [3128]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("egress proxy"), "{err}");
        let err = load_text("[network]\nproxy = true\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("seccomp_profile = \"tcp\""), "{err}");
    }

    #[test]
    fn host_examples_are_checked_when_the_policy_loads() {
        let base = "extends = \"dev\"\n[network]\nallow_hosts = [\"*.example.net:443\"]\n\
                    deny_hosts = [\"bad.example.net\"]\n";
        let ok = format!(
            "{base}host_examples = {{ allowed = [\"api.example.net\"], refused = \
             [\"bad.example.net\", \"example.net\", \"api.example.net:80\"] }}\n"
        );
        load_text(&ok).unwrap();
        let err = load_text(&format!(
            "{base}host_examples = {{ allowed = [\"bad.example.net\"] }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("p.toml:5: field `network.host_examples`"),
            "{err}"
        );
        assert!(err.contains("deny_hosts"), "{err}");
        let err = load_text(&format!(
            "{base}host_examples = {{ refused = [\"www.example.net\"] }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("listed as refused, but allow_hosts allows"),
            "{err}"
        );
    }

    #[test]
    fn refusals_cite_the_line_of_the_matching_entry() {
        let p = load_text(
            "extends = \"dev\"\n[network]\nallow_hosts = [\n  \"example.org\",\n  \
             \"*.example.net\",\n]\ndeny_hosts = [\"bad.example.net\"]\n",
        )
        .unwrap();
        let rules = p.network.proxy.unwrap();
        assert_eq!(rules.allow_site.line, Some(3));
        assert_eq!(rules.allow_hosts[1].site.line, Some(5));
        assert_eq!(rules.deny_hosts[0].site.line, Some(7));
        let target =
            crate::egress::pattern::Target::parse_authority("bad.example.net:443").unwrap();
        let e = rules.judge(&target).unwrap_err().to_string();
        assert!(e.contains("policy line 7 of"), "{e}");
        let target = crate::egress::pattern::Target::parse_authority("example.com:443").unwrap();
        let e = rules.judge(&target).unwrap_err().to_string();
        assert!(
            e.starts_with("not in [network].allow_hosts (policy line 3 of"),
            "{e}"
        );
    }

    #[test]
    fn the_policy_file_and_its_extends_chain_join_the_protected_set() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(root.join("conf")).unwrap();
        let outside = t.path().canonicalize().unwrap().join("grand.toml");
        std::fs::write(&outside, "extends = \"default\"\n").unwrap();
        std::fs::write(
            root.join("conf/base.toml"),
            format!("extends = {:?}\n", outside.display().to_string()),
        )
        .unwrap();
        std::fs::write(root.join("conf/child.toml"), "extends = \"base.toml\"\n").unwrap();
        let policy = Policy::load(root.join("conf/child.toml").to_str().unwrap()).unwrap();
        assert_eq!(policy.sources.len(), 3, "{:?}", policy.sources);
        let protected = policy.protected_patterns(&root);
        assert!(
            protected.contains(&"conf/child.toml".to_owned()),
            "{protected:?}"
        );
        assert!(
            protected.contains(&"conf/base.toml".to_owned()),
            "{protected:?}"
        );
        // The one outside the workspace is not a workspace path at all.
        assert!(
            !protected.iter().any(|p| p.contains("grand")),
            "{protected:?}"
        );
        assert!(protected.contains(&".git/hooks".to_owned()));
        // Built-in policies are no files.
        assert!(Policy::builtin_default().sources.is_empty());
    }
}
