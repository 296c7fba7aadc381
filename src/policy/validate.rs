//! The merged raw layers checked into a [`Policy`], one small function per section
//! (`filesystem`, `network`, `limits`, …), each turning its raw table into its typed section or
//! the first error, which names the field and says what to write.
//!
//! Owns what a valid policy is. Every check goes through one [`Check`] (`check`, shared with
//! `interception`), which knows the policy's origin; `load` adds the file and line afterwards, since only it has the texts. Reading files
//! and `extends` is `load`'s; the interception fields of `[network]` are `interception`'s;
//! `[jobs]` validates itself (`jobs`).

use super::check::Check;
use super::home::expand_home;
use super::raw::{self, RawPolicy};
use super::{
    ApprovalChannel, DEFAULT_ALLOWED_HOSTS, DEFAULT_ALLOWED_ORIGINS, DEFAULT_APPROVALS,
    DEFAULT_MAX_CONNECTIONS_PER_CALL, DEFAULT_MAX_MB_PER_CONNECTION, DEFAULT_SHM_MB,
    EnvironmentPolicy, FilesPolicy, FilesystemPolicy, HttpPolicy, InterpreterPolicy, Limits,
    LintPolicy, MAX_READ_BUDGET_KB, NetworkPolicy, OAUTH_ALGORITHMS, OAuthPolicy, OutputPolicy,
    Policy, PolicyError, PtraceScope, SandboxPolicy, ServerPolicy, breaker, commands, interception,
    jobs,
};
use std::path::PathBuf;
use std::time::Duration;

fn mib(v: u64) -> u64 {
    v.saturating_mul(1024 * 1024)
}

/// The merged raw layers, checked section by section into a [`Policy`] (the plans come later,
/// from `resolve`). Sections are checked in this order, so the first error is always the same.
pub(super) fn validate(raw: RawPolicy, origin: String) -> Result<Policy, PolicyError> {
    let check = Check { origin: &origin };
    let filesystem = filesystem(&check, raw.filesystem)?;
    let network = network(&check, raw.network)?;
    let limits = limits(&check, raw.limits)?;
    let environment = environment(&check, raw.environment)?;
    if let Some(rules) = &network.proxy {
        interception::check_reach(rules, &filesystem, &environment, &check)?;
    }
    let sandbox = sandbox(&check, raw.sandbox, &network)?;
    let output = output(&check, raw.output)?;
    let server = server(&check, raw.server)?;
    let lint = lint(&check, raw.lint)?;
    let commands = commands(&check, raw.commands)?;
    let interpreter = interpreter(&check, raw.interpreter)?;
    let jobs =
        jobs::JobsPolicy::validate(raw.jobs).map_err(|e| check.invalid(e.field, e.message))?;
    let files = files(&check, raw.files)?;
    let checkpoints = super::checkpoints::CheckpointsPolicy::validate(raw.checkpoints)
        .map_err(|e| check.invalid(e.field, e.message))?;
    let breaker = breaker::BreakerPolicy::validate(raw.breaker)
        .map_err(|e| check.invalid(e.field, e.message))?;
    Ok(Policy {
        breaker,
        checkpoints,
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

/// `[filesystem]`: absolute grants, workspace-relative writable and protected paths.
fn filesystem(check: &Check, fs: raw::RawFilesystem) -> Result<FilesystemPolicy, PolicyError> {
    let filesystem = FilesystemPolicy {
        read_exec: check.paths("filesystem.read_exec", fs.read_exec)?,
        read_write: check.paths("filesystem.read_write", fs.read_write)?,
        deny: check.paths("filesystem.deny", fs.deny)?,
        devices: check.paths("filesystem.devices", fs.devices)?,
        workspace: check.required("filesystem.workspace", fs.workspace)?,
        workspace_writable: fs.workspace_writable.unwrap_or_default(),
        protected: fs.protected.unwrap_or_default(),
        toolchains: check.paths(
            "filesystem.toolchains",
            Some(fs.toolchains.unwrap_or_default()),
        )?,
    };
    let inside = |p: &str| {
        !(p.starts_with('/') || p.split('/').any(|c| c == "..") || p.trim_matches('/').is_empty())
    };
    if let Some(p) = filesystem.workspace_writable.iter().find(|p| !inside(p)) {
        return Err(check.invalid(
            "filesystem.workspace_writable",
            format!("`{p}` must be a workspace-relative directory without `..`"),
        ));
    }
    if let Some(p) = filesystem.protected.iter().find(|p| !inside(p)) {
        return Err(check.invalid(
            "filesystem.protected",
            format!("`{p}` must be a workspace-relative path without `..`"),
        ));
    }
    Ok(filesystem)
}

/// `[network]`: ports, or the egress proxy with its host rules and interception.
fn network(check: &Check, n: raw::RawNetwork) -> Result<NetworkPolicy, PolicyError> {
    let proxy = n.proxy.unwrap_or(false);
    if !proxy {
        refuse_host_rules_without_proxy(check, &n)?;
    }
    let egress = if proxy {
        let mut rules = proxy_rules(check, &n)?;
        interception::compile(&n, &mut rules, check)?;
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
        return Err(check.invalid(
            "network.tcp_connect",
            "nothing can be connected to on port 0; list the ports to connect to (port 0 is \
             meaningful in tcp_bind only: any port the kernel picks)"
                .into(),
        ));
    }
    if network.uses_proxy() && network.tcp_bind.contains(&crate::egress::PROXY_PORT) {
        return Err(check.invalid(
            "network.tcp_bind",
            format!(
                "port {} is the egress proxy's in the sandbox's network namespace; bind \
                 another",
                crate::egress::PROXY_PORT
            ),
        ));
    }
    Ok(network)
}

/// Host rules mean nothing without the proxy: say so rather than ignore them.
fn refuse_host_rules_without_proxy(check: &Check, n: &raw::RawNetwork) -> Result<(), PolicyError> {
    let listed = |l: &Option<Vec<String>>| l.as_ref().is_some_and(|l| !l.is_empty());
    let interception = interception::any_set(n);
    for (field, set) in [
        ("network.allow_hosts", listed(&n.allow_hosts)),
        ("network.deny_hosts", listed(&n.deny_hosts)),
        ("network.allow_private", listed(&n.allow_private)),
        ("network.host_examples", n.host_examples.is_some()),
        (
            interception.unwrap_or("network.credentials"),
            interception.is_some(),
        ),
    ] {
        if set {
            return Err(check.invalid(
                field,
                "host rules only apply through the egress proxy: set `proxy = true` in \
                 [network] (and remove tcp_connect ports meant for the internet)"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// `[network]` in proxy mode, compiled; where each list is written is filled in later
/// (`load::locate_network`), when the layers' texts are at hand.
fn proxy_rules(
    check: &Check,
    n: &raw::RawNetwork,
) -> Result<crate::egress::EgressRules, PolicyError> {
    use crate::egress::pattern::Cidr;
    use crate::egress::rules::Site;
    let site = Site {
        origin: check.origin.to_owned(),
        line: None,
    };
    let allow_private = n
        .allow_private
        .iter()
        .flatten()
        .map(|c| Cidr::parse(c).map_err(|e| check.invalid("network.allow_private", e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    let positive = |field: &'static str, v: Option<u64>, default: u64| {
        check.positive(field, Some(v.unwrap_or(default)))
    };
    let rules = crate::egress::EgressRules {
        allow_hosts: host_patterns(check, "network.allow_hosts", &n.allow_hosts, &site)?,
        deny_hosts: host_patterns(check, "network.deny_hosts", &n.deny_hosts, &site)?,
        allow_private,
        max_connections_per_call: positive(
            "network.max_connections_per_call",
            n.max_connections_per_call,
            DEFAULT_MAX_CONNECTIONS_PER_CALL,
        )? as usize,
        max_bytes_per_connection: mib(positive(
            "network.max_mb_per_connection",
            n.max_mb_per_connection,
            DEFAULT_MAX_MB_PER_CONNECTION,
        )?),
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
        host_examples(check, &rules, examples)?;
    }
    Ok(rules)
}

/// One host list, each entry parsed as a pattern (the error recalls the grammar).
fn host_patterns(
    check: &Check,
    field: &'static str,
    list: &Option<Vec<String>>,
    site: &crate::egress::rules::Site,
) -> Result<Vec<crate::egress::rules::SitedPattern>, PolicyError> {
    use crate::egress::pattern::HostPattern;
    list.iter()
        .flatten()
        .map(|text| {
            HostPattern::parse(text)
                .map(|pattern| crate::egress::rules::SitedPattern {
                    pattern,
                    site: site.clone(),
                })
                .map_err(|e| {
                    check.invalid(
                        field,
                        format!(
                            "{e}. A pattern is `name`, `*.name` (names below it), an IP \
                             address, or `[IPv6]`, each optionally with `:port` or `:*`; \
                             e.g. \"example.org\", \"*.example.net:443\""
                        ),
                    )
                })
        })
        .collect()
}

/// `network.host_examples`: each example judged by the compiled host lists, as the proxy
/// will judge it.
fn host_examples(
    check: &Check,
    rules: &crate::egress::EgressRules,
    examples: &raw::RawHostExamples,
) -> Result<(), PolicyError> {
    use crate::egress::pattern::Target;
    let field = "network.host_examples";
    for (text, want_allowed) in examples
        .allowed
        .iter()
        .map(|t| (t, true))
        .chain(examples.refused.iter().map(|t| (t, false)))
    {
        let target = Target::parse_with_default(text, 443).map_err(|e| {
            check.invalid(
                field,
                format!("{e} (an example is `host` or `host:port`; no port means 443)"),
            )
        })?;
        match (rules.judge(&target), want_allowed) {
            (Ok(()), true) | (Err(_), false) => {}
            (Ok(()), false) => {
                return Err(check.invalid(
                    field,
                    format!(
                        "`{text}` is listed as refused, but allow_hosts allows {target} (and \
                         no deny_hosts entry matches it)"
                    ),
                ));
            }
            (Err(refusal), true) => {
                return Err(check.invalid(
                    field,
                    format!(
                        "`{text}` is listed as allowed, but {target} is refused: {}",
                        refusal.kind()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `[limits]`: every bound above 0, the default timeout within the maximum, `/dev/shm`
/// within the memory it is charged to.
fn limits(check: &Check, l: raw::RawLimits) -> Result<Limits, PolicyError> {
    let timeout = check.positive("limits.timeout_secs", l.timeout_secs)?;
    let max_timeout = check.positive("limits.max_timeout_secs", l.max_timeout_secs)?;
    if timeout > max_timeout {
        return Err(check.invalid(
            "limits.timeout_secs",
            format!("{timeout} is above limits.max_timeout_secs ({max_timeout})"),
        ));
    }
    let limits = Limits {
        timeout: Duration::from_secs(timeout),
        max_timeout: Duration::from_secs(max_timeout),
        memory_bytes: mib(check.positive("limits.memory_mb", l.memory_mb)?),
        pids: check.positive("limits.pids", l.pids)?,
        cpu_percent: check.positive("limits.cpu_percent", l.cpu_percent)?,
        cpu_seconds: check.positive("limits.cpu_seconds", l.cpu_seconds)?,
        // Unset: the disk budget. A lower default killed a call writing one large file
        // (SIGXFSZ) that the disk budget allowed.
        file_size_bytes: mib(check.positive("limits.file_size_mb", l.file_size_mb.or(l.disk_mb))?),
        open_files: check.positive("limits.open_files", l.open_files)?,
        address_space_bytes: mib(check.positive("limits.address_space_mb", l.address_space_mb)?),
        disk_bytes: mib(check.positive("limits.disk_mb", l.disk_mb)?),
        // Unset: the default, but never more than a quarter of the call's memory.
        shm_bytes: match l.shm_mb {
            Some(mb) => mib(mb),
            None => mib(DEFAULT_SHM_MB).min(mib(l.memory_mb.unwrap_or(0)) / 4),
        },
    };
    if limits.shm_bytes > limits.memory_bytes {
        return Err(check.invalid(
            "limits.shm_mb",
            format!(
                "{} is above limits.memory_mb ({}): /dev/shm is charged to the call's memory, so \
                 it cannot be larger",
                limits.shm_bytes >> 20,
                limits.memory_bytes >> 20
            ),
        ));
    }
    Ok(limits)
}

/// `[environment]`: names that can be variable names.
fn environment(check: &Check, e: raw::RawEnvironment) -> Result<EnvironmentPolicy, PolicyError> {
    let environment = EnvironmentPolicy {
        pass: e.pass.unwrap_or_default(),
        set: e.set.unwrap_or_default(),
    };
    for name in environment.pass.iter().chain(environment.set.keys()) {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(check.invalid(
                "environment",
                format!("`{name}` is not a valid variable name"),
            ));
        }
    }
    Ok(environment)
}

/// `[sandbox] uid`/`uid_count`: never root, at most 65,536 ids (what a call's own user
/// namespace maps), and a range that cannot be confused with the on-disk ids it stands for
/// (idmapped binds show on-disk uid `k` as `uid + k`, so the two ranges must not overlap).
fn call_ids(check: &Check, s: &SandboxPolicy) -> Result<(), PolicyError> {
    let count = s
        .uid_count
        .unwrap_or(crate::confine::call_ids::DEFAULT_COUNT);
    if !(1..=65_536).contains(&count) {
        return Err(check.invalid(
            "sandbox.uid_count",
            format!("{count} ids: a call's user namespace maps between 1 and 65536"),
        ));
    }
    let Some(uid) = s.uid else {
        return Ok(());
    };
    if uid == 0 {
        return Err(check.invalid(
            "sandbox.uid",
            "0 is the host's root, which no confined process may be; name an unprivileged \
             uid no account uses, or leave `uid` out for cordon's default range"
                .to_string(),
        ));
    }
    if uid < count || u64::from(uid) + u64::from(count) > u64::from(u32::MAX) {
        return Err(check.invalid(
            "sandbox.uid",
            format!(
                "uid {uid} with uid_count {count} overlaps the on-disk ids 0..{count} it \
                 stands for (or passes the largest uid); set `uid_count = 1` for a single \
                 dedicated uid, or a uid of at least {count}"
            ),
        ));
    }
    Ok(())
}

/// `[sandbox]`: a seccomp profile that allows the sockets `network` needs.
fn sandbox(
    check: &Check,
    s: raw::RawSandbox,
    network: &NetworkPolicy,
) -> Result<SandboxPolicy, PolicyError> {
    let sandbox = SandboxPolicy {
        seccomp_profile: check.required("sandbox.seccomp_profile", s.seccomp_profile)?,
        fallback_unix_sockets: s.fallback_unix_sockets.unwrap_or(false),
        uid: s.uid,
        uid_count: s.uid_count,
        ptrace: match s.ptrace.as_deref() {
            None | Some("call") => PtraceScope::Call,
            Some("none") => PtraceScope::None,
            Some(other) => {
                return Err(check.invalid(
                    "sandbox.ptrace",
                    format!(
                        "{other:?} is not a tracing scope; use \"call\" (processes of the same \
                         call may trace each other: gdb, strace, LeakSanitizer) or \"none\""
                    ),
                ));
            }
        },
    };
    call_ids(check, &sandbox)?;
    if !network.is_off() && sandbox.seccomp_profile == "default" {
        return Err(check.invalid(
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
    Ok(sandbox)
}

/// `[output]`: head and tail within the line bound, room for one full spill file.
fn output(check: &Check, o: raw::RawOutput) -> Result<OutputPolicy, PolicyError> {
    let output = OutputPolicy {
        max_lines: check.positive("output.max_lines", o.max_lines.map(|v| v as u64))? as usize,
        max_chars: check.positive("output.max_chars", o.max_chars.map(|v| v as u64))? as usize,
        head_lines: check.required("output.head_lines", o.head_lines)?,
        tail_lines: check.required("output.tail_lines", o.tail_lines)?,
        memory_cap_bytes: check
            .positive("output.memory_cap_kb", o.memory_cap_kb.map(|v| v as u64))?
            as usize
            * 1024,
        keep_control_chars: o.keep_control_chars.unwrap_or(false),
        spill_total_bytes: mib(check.positive("output.spill_total_mb", o.spill_total_mb)?),
    };
    let one_spill_file_mb = crate::exec::capture::SPILL_LIMIT >> 20;
    if output.spill_total_bytes < crate::exec::capture::SPILL_LIMIT {
        return Err(check.invalid(
            "output.spill_total_mb",
            format!(
                "must be at least {one_spill_file_mb}, the most one spill file holds, so the \
                 newest full output always fits"
            ),
        ));
    }
    if output.head_lines + output.tail_lines >= output.max_lines {
        return Err(check.invalid(
            "output.head_lines",
            "head_lines + tail_lines must be below max_lines".into(),
        ));
    }
    Ok(output)
}

/// `[server]`, with `[server.http]` and who answers `ask` rules.
fn server(check: &Check, s: raw::RawServer) -> Result<ServerPolicy, PolicyError> {
    Ok(ServerPolicy {
        max_concurrent_calls: check.positive(
            "server.max_concurrent_calls",
            s.max_concurrent_calls.map(|v| v as u64),
        )? as usize,
        audit_log: s.audit_log.map(PathBuf::from),
        audit_log_max_bytes: s.audit_log_max_kb.unwrap_or(10 * 1024) * 1024,
        audit_log_values: s.audit_log_values.unwrap_or(false),
        approval_timeout: check.seconds(
            "server.approval_timeout_secs",
            Some(s.approval_timeout_secs.unwrap_or(300)),
        )?,
        approvals: approval_channels(s.approvals)
            .map_err(|m| check.invalid("server.approvals", m))?,
        http: http(check, s.http)?,
    })
}

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

/// `[server.http]`: origins that are origins, at least one host, bounds above 0.
fn http(check: &Check, raw: raw::RawHttp) -> Result<HttpPolicy, PolicyError> {
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
            return Err(check.invalid(
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
        return Err(check.invalid(
            "server.http.allowed_hosts",
            "an empty list would refuse every request; list the host names clients use, or \
             [\"*\"] to accept any Host header"
                .to_owned(),
        ));
    }
    let count = |field: &'static str, v: Option<usize>, default: usize| {
        check
            .positive(field, Some(v.unwrap_or(default) as u64))
            .map(|v| v as usize)
    };
    let max_sessions = count("server.http.max_sessions", raw.max_sessions, 16)?;
    Ok(HttpPolicy {
        allowed_origins,
        allowed_hosts,
        max_body_bytes: check.positive(
            "server.http.max_body_kb",
            Some(raw.max_body_kb.unwrap_or(4096)),
        )? as usize
            * 1024,
        max_sessions,
        max_sessions_per_subject: count(
            "server.http.max_sessions_per_subject",
            raw.max_sessions_per_subject,
            max_sessions,
        )?,
        max_calls_per_session: count(
            "server.http.max_calls_per_session",
            raw.max_calls_per_session,
            4,
        )?,
        session_idle: check.seconds(
            "server.http.session_idle_secs",
            Some(raw.session_idle_secs.unwrap_or(900)),
        )?,
        oauth: raw.oauth.map(|o| oauth(check, o)).transpose()?,
        scopes: tool_scopes(check, raw.scopes.unwrap_or_default())?,
        workspace_idle: check.seconds(
            "server.http.workspace_idle_secs",
            Some(raw.workspace_idle_secs.unwrap_or(900)),
        )?,
        max_workspaces_running: count(
            "server.http.max_workspaces_running",
            raw.max_workspaces_running,
            16,
        )?,
        group_claim: group_claim(check, raw.group_claim)?,
        group_policies: group_policies(check, raw.group_policies.unwrap_or_default())?,
    })
}

/// `server.http.group_claim`: a JWT claim name (default `groups`).
fn group_claim(check: &Check, raw: Option<String>) -> Result<String, PolicyError> {
    let claim = raw.unwrap_or_else(|| "groups".to_owned());
    if claim.is_empty() || claim.len() > 128 || claim.chars().any(char::is_control) {
        return Err(check.invalid(
            "server.http.group_claim",
            format!("{claim:?} is not a claim name; write e.g. \"groups\" or \"roles\""),
        ));
    }
    Ok(claim)
}

/// `[[server.http.group_policies]]`: each group once, each policy a built-in name or an
/// absolute file (loaded, and its errors reported, when `serve --workspaces` starts).
fn group_policies(
    check: &Check,
    raw: Vec<raw::RawGroupPolicy>,
) -> Result<Vec<super::GroupPolicy>, PolicyError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for entry in raw {
        let field = "server.http.group_policies";
        if entry.group.is_empty() || entry.group.chars().any(char::is_control) {
            return Err(check.invalid(field, format!("{:?} is not a group name", entry.group)));
        }
        if !seen.insert(entry.group.clone()) {
            return Err(check.invalid(
                field,
                format!(
                    "group `{}` is listed twice; the first entry would always win",
                    entry.group
                ),
            ));
        }
        let builtin = super::embedded_names().contains(&entry.policy.as_str());
        if !builtin && !std::path::Path::new(&entry.policy).is_absolute() {
            return Err(check.invalid(
                field,
                format!(
                    "the policy of group `{}`, {:?}, is neither a built-in policy ({}) nor an \
                     absolute policy file",
                    entry.group,
                    entry.policy,
                    super::embedded_names().join(", ")
                ),
            ));
        }
        out.push(super::GroupPolicy {
            group: entry.group,
            policy: entry.policy,
        });
    }
    Ok(out)
}

/// `[server.http.scopes]`: the defaults, overridden per tool; every key a tool, every value
/// one scope token (RFC 6749: printable ASCII without space, `"` or `\`).
fn tool_scopes(
    check: &Check,
    set: std::collections::BTreeMap<String, String>,
) -> Result<std::collections::BTreeMap<String, String>, PolicyError> {
    let mut scopes: std::collections::BTreeMap<String, String> = super::DEFAULT_TOOL_SCOPES
        .iter()
        .map(|(tool, scope)| ((*tool).to_owned(), (*scope).to_owned()))
        .collect();
    for (tool, scope) in set {
        if !scopes.contains_key(&tool) {
            let tools: Vec<&str> = super::DEFAULT_TOOL_SCOPES.iter().map(|(t, _)| *t).collect();
            return Err(check.invalid(
                "server.http.scopes",
                format!("`{tool}` is not a tool; the tools are {}", tools.join(", ")),
            ));
        }
        let token_char =
            |b: u8| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b);
        if scope.is_empty() || !scope.bytes().all(token_char) {
            return Err(check.invalid(
                "server.http.scopes",
                format!(
                    "the scope of `{tool}`, {scope:?}, is not one scope token (printable ASCII \
                     without spaces, quotes or backslashes), e.g. \"cordon:exec\""
                ),
            ));
        }
        scopes.insert(tool, scope);
    }
    Ok(scopes)
}

/// `[server.http.oauth]`: an issuer, this server's URL, an absolute JWKS file and asymmetric
/// signature algorithms only.
fn oauth(check: &Check, raw: raw::RawOAuth) -> Result<OAuthPolicy, PolicyError> {
    let required = |field: &'static str, v: Option<String>| {
        v.filter(|v| !v.trim().is_empty()).ok_or_else(|| {
            check.invalid(field, "is required when [server.http.oauth] is set".into())
        })
    };
    let issuer = required("server.http.oauth.issuer", raw.issuer)?;
    let resource = required("server.http.oauth.resource", raw.resource)?;
    if !(resource.starts_with("https://") || resource.starts_with("http://")) {
        return Err(check.invalid(
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
        return Err(check.invalid(
            "server.http.oauth.jwks_file",
            format!("`{}` must be an absolute path", jwks_file.display()),
        ));
    }
    let algorithms = raw
        .algorithms
        .unwrap_or_else(|| vec!["RS256".into(), "ES256".into(), "EdDSA".into()]);
    if algorithms.is_empty() {
        return Err(check.invalid(
            "server.http.oauth.algorithms",
            "name at least one signature algorithm".into(),
        ));
    }
    if let Some(alg) = algorithms
        .iter()
        .find(|alg| !OAUTH_ALGORITHMS.contains(&alg.as_str()))
    {
        return Err(check.invalid(
            "server.http.oauth.algorithms",
            format!(
                "`{alg}` is not accepted: use asymmetric ones ({}); HS* and none are refused",
                OAUTH_ALGORITHMS.join(", ")
            ),
        ));
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

/// `[lint]`: bounds above 0; each linter compiled now, which is what validates it.
fn lint(check: &Check, l: raw::RawLint) -> Result<LintPolicy, PolicyError> {
    Ok(LintPolicy {
        enabled: l.enabled.unwrap_or(true),
        syntax: l.syntax.unwrap_or(true),
        timeout: check.seconds("lint.timeout_secs", l.timeout_secs)?,
        max_file_bytes: check.positive("lint.max_file_kb", l.max_file_kb)? as usize * 1024,
        linters: l
            .linters
            .unwrap_or_default()
            .iter()
            .map(|linter| {
                linter
                    .compile()
                    .map_err(|e| check.invalid("lint.linters", e.to_string()))
            })
            .collect::<Result<_, _>>()?,
    })
}

/// `[commands]`: the merged rule list compiled (each layer's rules were already checked
/// against their own file by `load`, where the lines are known).
fn commands(check: &Check, c: raw::RawCommands) -> Result<commands::CommandRules, PolicyError> {
    let mut commands = commands::CommandRules::compile(
        c.on_unknown.unwrap_or(commands::Decision::Allow),
        c.rules.unwrap_or_default(),
        None,
    )
    .map_err(|e| check.invalid("commands.rules", e.to_string()))?;
    commands.on_analysis_failure = c
        .on_analysis_failure
        .unwrap_or(commands::DEFAULT_ON_ANALYSIS_FAILURE);
    Ok(commands)
}

/// `[interpreter]`: a Python to run, bounds above 0, the default timeout within the maximum.
fn interpreter(check: &Check, i: raw::RawInterpreter) -> Result<InterpreterPolicy, PolicyError> {
    let python = check.required("interpreter.python", i.python)?;
    if python.trim().is_empty() || python.contains('\0') {
        return Err(check.invalid("interpreter.python", "must name a Python executable".into()));
    }
    let interpreter = InterpreterPolicy {
        python,
        memory_bytes: mib(check.positive("interpreter.memory_mb", i.memory_mb)?),
        pids: check.positive("interpreter.pids", i.pids)?,
        cpu_percent: check.positive("interpreter.cpu_percent", i.cpu_percent)?,
        cpu_seconds: check.positive("interpreter.cpu_seconds", i.cpu_seconds)?,
        timeout: check.seconds("interpreter.timeout_secs", i.timeout_secs)?,
        max_timeout: check.seconds("interpreter.max_timeout_secs", i.max_timeout_secs)?,
        interrupt_grace: check
            .seconds("interpreter.interrupt_grace_secs", i.interrupt_grace_secs)?,
        start_timeout: check.seconds("interpreter.start_timeout_secs", i.start_timeout_secs)?,
        idle_timeout: check.seconds("interpreter.idle_timeout_secs", i.idle_timeout_secs)?,
        max_sessions: check
            .positive("interpreter.max_sessions", i.max_sessions.map(|v| v as u64))?
            as usize,
        keep_background: i.keep_background.unwrap_or(false),
    };
    if interpreter.timeout > interpreter.max_timeout {
        return Err(check.invalid(
            "interpreter.timeout_secs",
            "is above interpreter.max_timeout_secs".into(),
        ));
    }
    Ok(interpreter)
}

/// `[files]`: a read budget a result can carry twice within 1 MiB.
fn files(check: &Check, f: raw::RawFiles) -> Result<FilesPolicy, PolicyError> {
    let read_budget_kb = check.positive("files.read_budget_kb", f.read_budget_kb)?;
    if read_budget_kb > MAX_READ_BUDGET_KB {
        return Err(check.invalid(
            "files.read_budget_kb",
            format!(
                "{read_budget_kb} is above {MAX_READ_BUDGET_KB}: read_file's content goes out \
                 twice (structured and text) and a result must stay under 1 MiB"
            ),
        ));
    }
    Ok(FilesPolicy {
        read_budget_bytes: read_budget_kb as usize * 1024,
    })
}

#[cfg(test)]
mod tests {
    use super::super::load::tests::load_text;
    use super::*;

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
    fn tcp_ports_need_a_profile_that_allows_sockets() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(&f, "[network]\ntcp_connect = [443]\n").unwrap();
        let err = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("seccomp_profile"), "{err}");
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
}
