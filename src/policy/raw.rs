//! The policy file as written: a serde mirror of the TOML schema in `policies/README.md`.
//!
//! Every field is optional here so that a policy can `extends` another and only name what it
//! changes; `deny_unknown_fields` everywhere so a typo is an error with a line number instead of
//! a silently ignored rule. Turning this into a usable [`super::Policy`] (defaults, validation)
//! is `super::validate`'s job, not this module's.

use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    pub name: Option<String>,
    pub description: Option<String>,
    pub extends: Option<String>,
    #[serde(default)]
    pub filesystem: RawFilesystem,
    #[serde(default)]
    pub network: RawNetwork,
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub environment: RawEnvironment,
    #[serde(default)]
    pub sandbox: RawSandbox,
    #[serde(default)]
    pub output: RawOutput,
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub lint: RawLint,
    #[serde(default)]
    pub commands: RawCommands,
    #[serde(default)]
    pub interpreter: RawInterpreter,
    #[serde(default)]
    pub files: RawFiles,
    #[serde(default)]
    pub jobs: super::jobs::RawJobs,
    #[serde(default)]
    pub checkpoints: super::checkpoints::RawCheckpoints,
    #[serde(default)]
    pub breaker: super::breaker::RawBreaker,
}

/// `[files]`: bounds of the file tools' answers.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFiles {
    pub read_budget_kb: Option<u64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCommands {
    pub on_unknown: Option<super::commands::Decision>,
    pub on_analysis_failure: Option<super::commands::Decision>,
    pub rules: Option<Vec<super::commands::RawRule>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawInterpreter {
    pub python: Option<String>,
    pub memory_mb: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_percent: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub timeout_secs: Option<u64>,
    pub max_timeout_secs: Option<u64>,
    pub interrupt_grace_secs: Option<u64>,
    pub start_timeout_secs: Option<u64>,
    pub idle_timeout_secs: Option<u64>,
    pub max_sessions: Option<usize>,
    pub keep_background: Option<bool>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLint {
    pub enabled: Option<bool>,
    pub syntax: Option<bool>,
    pub timeout_secs: Option<u64>,
    pub max_file_kb: Option<u64>,
    pub linters: Option<Vec<crate::lint::LinterConfig>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFilesystem {
    pub read_exec: Option<Vec<String>>,
    pub read_write: Option<Vec<String>>,
    pub deny: Option<Vec<String>>,
    pub devices: Option<Vec<String>>,
    pub workspace: Option<WorkspaceAccess>,
    pub workspace_writable: Option<Vec<String>>,
    pub protected: Option<Vec<String>>,
    pub toolchains: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceAccess {
    ReadWrite,
    ReadOnly,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNetwork {
    pub tcp_connect: Option<Vec<u16>>,
    pub tcp_bind: Option<Vec<u16>>,
    /// Route connections through cordon's egress proxy (hosts by name, see `egress`).
    pub proxy: Option<bool>,
    pub allow_hosts: Option<Vec<String>>,
    pub deny_hosts: Option<Vec<String>>,
    pub allow_private: Option<Vec<String>>,
    pub max_connections_per_call: Option<u64>,
    pub max_mb_per_connection: Option<u64>,
    pub host_examples: Option<RawHostExamples>,
    /// PEM files trusted for intercepted upstreams besides the system roots.
    pub extra_roots: Option<Vec<String>>,
    /// `[[network.credentials]]`: secrets the sandbox sees only as placeholders.
    pub credentials: Option<Vec<RawCredential>>,
    /// `[[network.rules]]`: methods and paths allowed per intercepted host.
    pub rules: Option<Vec<RawHttpRule>>,
    /// `[network.git]`: the refs a push through the proxy may update.
    pub git: Option<RawGit>,
}

/// One `[[network.credentials]]` entry.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCredential {
    pub name: Option<String>,
    pub hosts: Option<Vec<String>>,
    pub env: Option<String>,
    pub from_env: Option<String>,
    pub from_file: Option<String>,
    pub inject: Option<String>,
}

/// One `[[network.rules]]` entry.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttpRule {
    pub host: Option<String>,
    pub methods: Option<Vec<String>>,
    pub paths: Option<Vec<String>>,
}

/// `[network.git]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGit {
    pub hosts: Option<Vec<String>>,
    pub push_refs: Option<Vec<String>>,
    pub allow_delete: Option<bool>,
}

/// Targets the host patterns must allow and refuse, checked when the policy is loaded.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHostExamples {
    #[serde(default)]
    pub allowed: Vec<String>,
    #[serde(default)]
    pub refused: Vec<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    pub timeout_secs: Option<u64>,
    pub max_timeout_secs: Option<u64>,
    pub memory_mb: Option<u64>,
    pub pids: Option<u64>,
    pub cpu_percent: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub file_size_mb: Option<u64>,
    pub open_files: Option<u64>,
    pub address_space_mb: Option<u64>,
    pub disk_mb: Option<u64>,
    pub shm_mb: Option<u64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEnvironment {
    pub pass: Option<Vec<String>>,
    /// Merged across `extends` key by key (see the `Overlay` impl below).
    pub set: Option<BTreeMap<String, String>>,
    /// Names of inherited `set` entries this layer removes; consumed by the merge.
    pub unset: Option<Vec<String>>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSandbox {
    pub seccomp_profile: Option<String>,
    pub fallback_unix_sockets: Option<bool>,
    pub ptrace: Option<String>,
    pub uid: Option<u32>,
    pub uid_count: Option<u32>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutput {
    pub max_lines: Option<usize>,
    pub max_chars: Option<usize>,
    pub head_lines: Option<usize>,
    pub tail_lines: Option<usize>,
    pub memory_cap_kb: Option<usize>,
    pub keep_control_chars: Option<bool>,
    pub spill_total_mb: Option<u64>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub max_concurrent_calls: Option<usize>,
    pub audit_log: Option<String>,
    pub audit_log_max_kb: Option<u64>,
    pub audit_log_values: Option<bool>,
    pub approval_timeout_secs: Option<u64>,
    /// Who answers an `ask` rule, in order of preference (`elicitation`, `operator`).
    pub approvals: Option<Vec<String>>,
    #[serde(default)]
    pub http: RawHttp,
}

/// `[server.http]`: what `serve --http` accepts and how much of it.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub allowed_origins: Option<Vec<String>>,
    pub allowed_hosts: Option<Vec<String>>,
    pub max_body_kb: Option<u64>,
    pub max_sessions: Option<usize>,
    pub max_sessions_per_subject: Option<usize>,
    pub max_calls_per_session: Option<usize>,
    pub session_idle_secs: Option<u64>,
    /// Replaced whole by an extending policy (its fields belong together).
    pub oauth: Option<RawOAuth>,
    /// Tool → the scope a subject needs to see and call it; merged key by key across
    /// `extends`.
    pub scopes: Option<std::collections::BTreeMap<String, String>>,
    pub workspace_idle_secs: Option<u64>,
    pub max_workspaces_running: Option<usize>,
    pub group_claim: Option<String>,
    /// Replaced whole by an extending policy (its order is its meaning).
    pub group_policies: Option<Vec<RawGroupPolicy>>,
}

/// One `[[server.http.group_policies]]` entry.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGroupPolicy {
    pub group: String,
    pub policy: String,
}

/// `[server.http.oauth]`: accept JWT access tokens of one authorization server.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOAuth {
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub jwks_file: Option<String>,
    pub resource: Option<String>,
    pub algorithms: Option<Vec<String>>,
    pub required_scopes: Option<Vec<String>>,
}

/// Field-by-field overlay: what `self` (the extending policy) sets wins, the rest comes from
/// `base`. Lists replace rather than append, so a policy can remove a grant it inherited.
pub(super) trait Overlay {
    fn overlay(self, base: Self) -> Self;
}

macro_rules! overlay_struct {
    ($ty:ident { $($field:ident),* $(,)? }) => {
        impl Overlay for $ty {
            fn overlay(self, base: Self) -> Self {
                Self { $($field: self.$field.or(base.$field)),* }
            }
        }
    };
}

overlay_struct!(RawFilesystem {
    read_exec,
    read_write,
    deny,
    devices,
    workspace,
    workspace_writable,
    protected,
    toolchains,
});
overlay_struct!(RawLint {
    enabled,
    syntax,
    timeout_secs,
    max_file_kb,
    linters
});
overlay_struct!(RawInterpreter {
    python,
    memory_mb,
    pids,
    cpu_percent,
    cpu_seconds,
    timeout_secs,
    max_timeout_secs,
    interrupt_grace_secs,
    start_timeout_secs,
    idle_timeout_secs,
    max_sessions,
    keep_background,
});
overlay_struct!(RawNetwork {
    tcp_connect,
    tcp_bind,
    proxy,
    allow_hosts,
    deny_hosts,
    allow_private,
    max_connections_per_call,
    max_mb_per_connection,
    host_examples,
    extra_roots,
    credentials,
    rules,
    git,
});
overlay_struct!(RawLimits {
    timeout_secs,
    max_timeout_secs,
    memory_mb,
    pids,
    cpu_percent,
    cpu_seconds,
    file_size_mb,
    open_files,
    address_space_mb,
    disk_mb,
    shm_mb,
});

impl Overlay for RawEnvironment {
    /// `set` merges key by key (a policy that adds one variable keeps PATH, HOME and TMPDIR);
    /// the layer's `unset` names leave the inherited table first, so its own `set` can still
    /// name them. `pass` is a list and replaces, like every other list.
    fn overlay(self, base: Self) -> Self {
        let set = match (self.set, base.set) {
            (None, None) => None,
            (own, inherited) => {
                let mut merged = inherited.unwrap_or_default();
                for name in self.unset.iter().flatten() {
                    merged.remove(name);
                }
                merged.extend(own.unwrap_or_default());
                Some(merged)
            }
        };
        Self {
            pass: self.pass.or(base.pass),
            set,
            // Consumed here: the merged table is what every later stage (and `policy show`) sees.
            unset: None,
        }
    }
}
overlay_struct!(RawCommands {
    on_unknown,
    on_analysis_failure,
    rules
});
overlay_struct!(RawSandbox {
    seccomp_profile,
    fallback_unix_sockets,
    ptrace,
    uid,
    uid_count
});
overlay_struct!(RawOutput {
    max_lines,
    max_chars,
    head_lines,
    tail_lines,
    memory_cap_kb,
    keep_control_chars,
    spill_total_mb
});
overlay_struct!(RawFiles { read_budget_kb });
impl Overlay for RawHttp {
    fn overlay(self, base: Self) -> Self {
        // Scopes merge key by key (a policy changes one tool's scope without restating the
        // others); every other field as `overlay_struct!` does.
        let scopes = match (self.scopes, base.scopes) {
            (Some(mine), Some(mut inherited)) => {
                inherited.extend(mine);
                Some(inherited)
            }
            (mine, inherited) => mine.or(inherited),
        };
        Self {
            allowed_origins: self.allowed_origins.or(base.allowed_origins),
            allowed_hosts: self.allowed_hosts.or(base.allowed_hosts),
            max_body_kb: self.max_body_kb.or(base.max_body_kb),
            max_sessions: self.max_sessions.or(base.max_sessions),
            max_sessions_per_subject: self
                .max_sessions_per_subject
                .or(base.max_sessions_per_subject),
            max_calls_per_session: self.max_calls_per_session.or(base.max_calls_per_session),
            session_idle_secs: self.session_idle_secs.or(base.session_idle_secs),
            oauth: self.oauth.or(base.oauth),
            scopes,
            workspace_idle_secs: self.workspace_idle_secs.or(base.workspace_idle_secs),
            max_workspaces_running: self.max_workspaces_running.or(base.max_workspaces_running),
            group_claim: self.group_claim.or(base.group_claim),
            group_policies: self.group_policies.or(base.group_policies),
        }
    }
}

impl Overlay for RawServer {
    fn overlay(self, base: Self) -> Self {
        Self {
            max_concurrent_calls: self.max_concurrent_calls.or(base.max_concurrent_calls),
            audit_log: self.audit_log.or(base.audit_log),
            audit_log_max_kb: self.audit_log_max_kb.or(base.audit_log_max_kb),
            audit_log_values: self.audit_log_values.or(base.audit_log_values),
            approval_timeout_secs: self.approval_timeout_secs.or(base.approval_timeout_secs),
            approvals: self.approvals.or(base.approvals),
            // A sub-table overlays field by field too, so a policy can change one HTTP bound.
            http: self.http.overlay(base.http),
        }
    }
}

impl Overlay for RawPolicy {
    fn overlay(self, base: Self) -> Self {
        Self {
            name: self.name.or(base.name),
            description: self.description.or(base.description),
            // `extends` is consumed by the loader; the merged result extends nothing.
            extends: None,
            filesystem: self.filesystem.overlay(base.filesystem),
            network: self.network.overlay(base.network),
            limits: self.limits.overlay(base.limits),
            environment: self.environment.overlay(base.environment),
            sandbox: self.sandbox.overlay(base.sandbox),
            output: self.output.overlay(base.output),
            server: self.server.overlay(base.server),
            lint: self.lint.overlay(base.lint),
            commands: self.commands.overlay(base.commands),
            interpreter: self.interpreter.overlay(base.interpreter),
            files: self.files.overlay(base.files),
            jobs: self.jobs.overlay(base.jobs),
            checkpoints: self.checkpoints.overlay(base.checkpoints),
            breaker: self.breaker.overlay(base.breaker),
        }
    }
}
