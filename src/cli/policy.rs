//! `cordon policy show|check|explain`: what a policy allows, for the people who approve it.
//!
//! `show` prints the fully resolved policy (after `extends` and defaults), `check` validates a
//! file including everything that is only checked when enforcement is built (seccomp profile,
//! Landlock paths), and `explain` writes it out in plain language together with what this
//! kernel can actually enforce.

use crate::confine::kernel::{KernelSupport, REQUIRED_LANDLOCK_ABI};
use crate::confine::landlock::GrantKind;
use crate::confine::seccomp;
use crate::policy::{Plans, Policy, WorkspaceAccess};
use std::fmt::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PolicyCliError {
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error("cannot render the policy: {0}")]
    Render(String),
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error(transparent)]
    Examples(#[from] crate::policy::commands::ExampleCheckError),
    #[error("cannot prepare the parser worker: {0}")]
    Io(#[from] std::io::Error),
}

/// The rule examples of `policy`, checked in a parser worker confined in a throwaway
/// workspace (degraded confinement is accepted: only the worker runs there).
pub async fn check_examples(policy: &Policy) -> Result<(), PolicyCliError> {
    if policy.commands.rules.is_empty() {
        return Ok(());
    }
    let workspace = tempfile::Builder::new()
        .prefix("cordon-policy-check-")
        .tempdir()?;
    let options = crate::runtime::RuntimeOptions {
        workspace: workspace.path().canonicalize()?,
        allow_degraded: true,
        parser_program: Some(crate::parser::worker_program()?),
        ..Default::default()
    };
    // The command examples need no credential: their sources are `check`'s to report (a
    // policy is checked where its secrets are not set), so the proxy starts without them.
    let mut policy = policy.clone();
    if let Some(rules) = policy.network.proxy.as_mut() {
        rules.credentials.clear();
    }
    let runtime = crate::runtime::Runtime::build(policy.clone(), options)?;
    if let Some(parser) = &runtime.parser {
        crate::policy::commands::check_examples(parser, &policy.commands).await?;
    }
    Ok(())
}

pub fn show(policy: &Policy, json: bool) -> Result<String, PolicyCliError> {
    if json {
        serde_json::to_string_pretty(policy).map_err(|e| PolicyCliError::Render(e.to_string()))
    } else {
        toml::to_string_pretty(policy).map_err(|e| PolicyCliError::Render(e.to_string()))
    }
}

/// What `[sandbox] ptrace` lets a confined process trace, in one line.
pub(crate) fn ptrace_summary(scope: crate::policy::PtraceScope) -> &'static str {
    match scope {
        crate::policy::PtraceScope::Call => {
            "processes of the same call may trace each other (gdb, strace, LeakSanitizer); \
             never its reaper, another call, the sandbox init or the server (Landlock's \
             scoping; refused everywhere where Landlock is not in force)"
        }
        crate::policy::PtraceScope::None => {
            "refused (`ptrace`, `process_vm_*`); set `[sandbox] ptrace = \"call\"` to let a \
             call debug its own processes"
        }
    }
}

/// Validates what `Policy::load` cannot: the seccomp profile compiles, and which Landlock
/// paths exist on this machine. Returns a short report.
pub fn check(policy: &Policy) -> Result<String, PolicyCliError> {
    let tracing = match policy.sandbox.ptrace {
        crate::policy::PtraceScope::Call => seccomp::Tracing::OwnCall,
        crate::policy::PtraceScope::None => seccomp::Tracing::Refused,
    };
    let programs = seccomp::compile_profile(&policy.sandbox.seccomp_profile, tracing)?;
    let mut out = format!(
        "{}: valid (seccomp profile `{}`: {} program(s), {} instructions)\n",
        policy.origin,
        policy.sandbox.seccomp_profile,
        programs.len(),
        programs.iter().map(Vec::len).sum::<usize>()
    );
    if let Some(rules) = &policy.network.proxy {
        check_host_patterns(&mut out, rules);
        check_interception(&mut out, rules);
        loopback_warnings(&mut out, rules);
    }
    let _ = writeln!(out, "  ptrace: {}", ptrace_summary(policy.sandbox.ptrace));
    check_jobs(&mut out, &policy.jobs);
    let _ = writeln!(out, "  breaker: {}", breaker_summary(&policy.breaker));
    let fs = &policy.filesystem;
    for p in fs.read_exec.iter().chain(&fs.read_write).chain(&fs.devices) {
        if !p.exists() {
            let _ = writeln!(
                out,
                "  note: {} does not exist here; its grant is skipped",
                p.display()
            );
        }
    }
    Ok(out)
}

/// Each host pattern with a target it lets through and one it does not, judged by the same
/// code the proxy runs (deny entries included), so a surprising match shows here.
fn check_host_patterns(out: &mut String, rules: &crate::egress::EgressRules) {
    for (list, entries) in [
        ("allow_hosts", &rules.allow_hosts),
        ("deny_hosts", &rules.deny_hosts),
    ] {
        for entry in entries {
            let (yes, no) = entry.pattern.examples();
            let verdict = |t: &str| match crate::egress::pattern::Target::parse_authority(t) {
                Ok(target) => match rules.judge(&target) {
                    Ok(()) => "allowed".to_owned(),
                    Err(r) => format!("refused ({})", r.kind()),
                },
                Err(e) => format!("not a target ({e})"),
            };
            let _ = write!(
                out,
                "  {list} `{}` ({}): {yes} -> {}",
                entry.pattern,
                entry.site,
                verdict(&yes)
            );
            if let Some(no) = no {
                let _ = write!(out, "; {no} -> {}", verdict(&no));
            }
            out.push('\n');
        }
    }
    if rules.allow_hosts.is_empty() {
        let _ = writeln!(
            out,
            "  note: network.allow_hosts is empty: the proxy refuses every host until you \
             list some"
        );
    }
}

/// A warning for each egress entry that names a loopback host (it never applies to an
/// ordinary client in a call), for `check` and `explain` alike.
fn loopback_warnings(out: &mut String, rules: &crate::egress::EgressRules) {
    for (place, pattern) in rules.loopback_entries() {
        let _ = writeln!(
            out,
            "  {}",
            crate::egress::rules::loopback_warning(&place, &pattern)
        );
    }
}

/// `[jobs]` in one line, and a note when host ports reach into the sandbox.
fn check_jobs(out: &mut String, j: &crate::policy::jobs::JobsPolicy) {
    let _ = if j.enabled() {
        writeln!(
            out,
            "  jobs: up to {} per session, killed after {}s (lifetime) or {}s unread (idle), {} KiB \
             of output in memory per stream, host ports forwarded: {}",
            j.max_per_session,
            j.max_lifetime.as_secs(),
            j.idle_kill.as_secs(),
            j.ring_bytes / 1024,
            if j.forward.is_empty() {
                "none".to_owned()
            } else {
                format!("{:?}", j.forward)
            }
        )
    } else {
        writeln!(out, "  jobs: disabled (max_per_session = 0)")
    };
    if !j.forward.is_empty() {
        let _ = writeln!(
            out,
            "  note: jobs.forward makes 127.0.0.1 ports {:?} of the host reach servers in the \
             sandbox: any local user or process can connect to them",
            j.forward
        );
    }
}

/// Who answers an `ask` rule under `policy` (`server.approvals`), in words.
pub(crate) fn approval_channels(policy: &Policy) -> String {
    use crate::policy::ApprovalChannel;
    let said: Vec<String> = policy
        .server
        .approvals
        .iter()
        .map(|c| match c {
            ApprovalChannel::Elicitation => {
                "the client's user (elicitation, where the client declared it)".to_owned()
            }
            ApprovalChannel::Operator => format!(
                "the operator on the host (`cordon approvals`, then `cordon approve ID` or \
                 `cordon deny ID`; socket in {})",
                crate::server::operator::channel_dir().display()
            ),
        })
        .collect();
    format!(
        "`ask` rules are answered by {} (`server.approvals`); unanswered after {}s, the command \
         is refused.",
        said.join(", else by "),
        policy.server.approval_timeout.as_secs()
    )
}

/// The policy in plain language, with what this kernel can enforce of it. Files and the
/// network are described from the plan confinement enforces (`Policy::resolve`), resolved
/// against a stand-in workspace: a policy is explained for every workspace at once.
pub fn explain(policy: &Policy) -> String {
    let kernel = KernelSupport::detect();
    let plans = policy.resolve(Path::new(STAND_IN_WORKSPACE));
    let mut o = String::new();
    let _ = writeln!(o, "Policy `{}` ({})", policy.name, policy.origin);
    if !policy.description.is_empty() {
        let _ = writeln!(o, "  {}", policy.description);
    }
    explain_files(&mut o, policy, &plans, &kernel);
    explain_network(&mut o, policy);
    explain_limits(&mut o, policy);
    explain_commands(&mut o, policy);
    explain_interpreter(&mut o, policy);
    explain_jobs(&mut o, policy, &plans.confine);
    explain_breaker(&mut o, policy);
    explain_http(&mut o, policy);
    explain_kernel(&mut o, &kernel);
    o
}

/// Where `explain` resolves the policy: no workspace in particular (and none that exists, so
/// no grant of the real machine's lies beneath it); the workspace is described in words.
const STAND_IN_WORKSPACE: &str = "/nonexistent/cordon-explain-workspace";

/// Files: the workspace, the plan's grants, and the protected paths.
fn explain_files(o: &mut String, policy: &Policy, plans: &Plans, kernel: &KernelSupport) {
    let fs = &policy.filesystem;
    let _ = writeln!(o, "\nFiles");
    let _ = writeln!(
        o,
        "  The workspace is {} for commands and file tools{}.",
        match fs.workspace {
            WorkspaceAccess::ReadWrite => "readable and writable",
            WorkspaceAccess::ReadOnly => "read-only",
        },
        match &plans.writable_only {
            Some(dirs) if !dirs.is_empty() => format!(", except {} (writable)", dirs.join(", ")),
            _ => String::new(),
        }
    );
    explain_grants(o, &plans.confine);
    let _ = writeln!(
        o,
        "  Everything else (other homes, /root, /tmp, /var, /sys, /dev) is invisible."
    );
    if !fs.protected.is_empty() {
        let _ = writeln!(
            o,
            "  Protected inside the workspace (never written by the file tools{}): {}.",
            if kernel.is_root {
                "; read-only for shell commands through a private mount namespace"
            } else {
                "; NOT enforced for shell commands here: cordon is not running as root"
            },
            fs.protected.join(", ")
        );
    }
}

/// The Landlock grants outside the workspace, as the ruleset is built from the plan (denied
/// paths carved out of the directories that hold them).
fn explain_grants(o: &mut String, confine: &crate::confine::ConfinePlan) {
    let grants = confine.landlock_paths(&[]).expand();
    let outside_workspace = |p: &&Path| !p.starts_with(&confine.workspace);
    let granted = |kind: GrantKind| -> Vec<&Path> {
        grants
            .iter()
            .filter(|g| g.access == kind)
            .map(|g| g.path.as_path())
            .filter(outside_workspace)
            .collect()
    };
    let shown = |paths: &[&Path]| -> Vec<String> {
        paths.iter().map(|p| p.display().to_string()).collect()
    };
    // A read_exec entry granted whole (not carved around a denied path inside it).
    let read_exec = granted(GrantKind::ReadExec);
    let whole: Vec<&Path> = confine
        .read_exec
        .iter()
        .map(PathBuf::as_path)
        .filter(|p| read_exec.contains(p))
        .collect();
    let _ = writeln!(
        o,
        "  Readable and executable: {}.",
        join_or_none(&shown(&whole))
    );
    let carved = granted(GrantKind::ListOnly);
    if !carved.is_empty() {
        let _ = writeln!(
            o,
            "  Partly readable (listed, and every entry except the denied ones): {}.",
            shown(&carved).join(", ")
        );
    }
    let deny: Vec<&Path> = confine.deny.iter().map(PathBuf::as_path).collect();
    let _ = writeln!(
        o,
        "  Never readable, even beneath a granted directory: {}.",
        join_or_none(&shown(&deny))
    );
    // The plan's read_write as given: a missing one is created before the sandbox is built.
    let writable: Vec<&Path> = confine
        .read_write
        .iter()
        .map(PathBuf::as_path)
        .filter(outside_workspace)
        .collect();
    let _ = writeln!(
        o,
        "  Also writable: each call's private TMPDIR{}.",
        if writable.is_empty() {
            String::new()
        } else {
            format!(", {}", shown(&writable).join(", "))
        }
    );
    let devices = granted(GrantKind::Device);
    let _ = writeln!(o, "  Devices: {}.", shown(&devices).join(", "));
}

/// Network: the proxy's rules, or the ports, or nothing.
fn explain_network(o: &mut String, policy: &Policy) {
    let _ = writeln!(o, "\nNetwork");
    if let Some(rules) = &policy.network.proxy {
        explain_egress(o, policy, rules);
    } else if policy.network.is_off() {
        let _ = writeln!(
            o,
            "  None: no TCP (Landlock), and no socket other than Unix-domain ones (seccomp), so no UDP or DNS."
        );
    } else {
        let _ = writeln!(
            o,
            "  TCP connect to ports {:?}, bind on {:?} (Landlock); no UDP, raw or other sockets (seccomp profile `{}`).",
            policy.network.tcp_connect, policy.network.tcp_bind, policy.sandbox.seccomp_profile
        );
    }
}

/// Wall time, cgroup and rlimit bounds, disk, /dev/shm, seccomp and the environment.
fn explain_limits(o: &mut String, policy: &Policy) {
    let l = &policy.limits;
    let _ = writeln!(o, "\nProcesses and limits (per call)");
    let _ = writeln!(
        o,
        "  Wall time {}s by default, at most {}s; memory {} MiB and {} processes/threads for the whole tree; CPU {}% of a core (cgroups).",
        l.timeout.as_secs(),
        l.max_timeout.as_secs(),
        l.memory_bytes >> 20,
        l.pids,
        l.cpu_percent
    );
    let _ = writeln!(
        o,
        "  Per process: {} CPU seconds, files up to {} MiB, {} open files, {} MiB address space, no core dumps (rlimits).",
        l.cpu_seconds,
        l.file_size_bytes >> 20,
        l.open_files,
        l.address_space_bytes >> 20
    );
    let _ = writeln!(
        o,
        "  Disk: a call that shrinks the workspace filesystem's free space by more than {} MiB is killed (checked every 200 ms).",
        l.disk_bytes >> 20
    );
    if l.shm_bytes > 0 {
        let _ = writeln!(
            o,
            "  Each call has its own /dev/shm of {} MiB (counted in its memory), its own /tmp, processes and System V IPC.",
            l.shm_bytes >> 20
        );
    }
    let _ = writeln!(
        o,
        "  Everything a call starts is killed when it ends. No ptrace, mount, namespaces, bpf, io_uring, keyrings, perf, kernel modules or kexec (seccomp profile `{}`).",
        policy.sandbox.seccomp_profile
    );
    let _ = writeln!(
        o,
        "  Environment: only {} from the server, plus {}.",
        join_or_none(&policy.environment.pass),
        policy
            .environment
            .set
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The command rules, what no rule can judge, and who answers `ask`.
fn explain_commands(o: &mut String, policy: &Policy) {
    let _ = writeln!(
        o,
        "\nCommand rules (a courtesy layer in front of the sandbox, not a boundary)"
    );
    let decision = |d: &crate::policy::commands::Decision| {
        serde_json::to_value(d)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    for rule in &policy.commands.rules {
        let _ = writeln!(
            o,
            "  {} {}: {}",
            decision(&rule.decision),
            rule.name,
            rule.justification
        );
    }
    let _ = writeln!(
        o,
        "  Commands no rule can judge (dynamic program names, unparsable input): {}.",
        decision(&policy.commands.on_unknown)
    );
    let _ = writeln!(o, "  {}", approval_channels(policy));
}

/// `[breaker]` in one line: what trips it and what happens then.
fn breaker_summary(b: &crate::policy::breaker::BreakerPolicy) -> String {
    if !b.enabled() {
        return "off (`consecutive = 0` and `window_refusals = 0`): every refusal is answered \
                on its own"
            .into();
    }
    let mut triggers = Vec::new();
    if b.consecutive > 0 {
        triggers.push(format!(
            "{} refusals of one group in a row (the same command rule, protected path, host, \
             kernel-denied path, …; no successful call of the same tool between)",
            b.consecutive
        ));
    }
    if b.window_refusals > 0 {
        triggers.push(format!(
            "{} refusals of any group within {}s",
            b.window_refusals,
            b.window.as_secs()
        ));
    }
    format!(
        "trips after {}; a run ends {}s after its last refusal",
        triggers.join(", or "),
        b.window.as_secs()
    )
}

/// `[breaker]`: when repeated refusals are handed to a person.
fn explain_breaker(o: &mut String, policy: &Policy) {
    let b = &policy.breaker;
    let _ = writeln!(o, "\nCircuit breaker for repeated refusals");
    let _ = writeln!(o, "  {}.", capitalise(&breaker_summary(b)));
    if !b.enabled() {
        return;
    }
    let then = if b.ask {
        format!(
            "the next refusal of a command rule goes to a person ({}), who may allow it once, \
             allow it for this session or keep refusing it (a \"keep refusing\" holds for the \
             session); other refusals, and any when nobody can be asked, are answered with \
             `error.kind = \"denied\"`, `retriable: false`, a `breaker` field and a message \
             telling the agent to stop and ask its user",
            channel_names(policy)
        )
    } else {
        "nobody is asked (`ask = false`): the next refusal is answered with `error.kind = \
         \"denied\"`, `retriable: false`, a `breaker` field and a message telling the agent to \
         stop and ask its user"
            .into()
    };
    let _ = writeln!(o, "  Once tripped, {then}.");
    let _ = writeln!(
        o,
        "  A successful call of the same tool, a person's answer or the window's end resets it; \
         nothing a model sends changes these numbers."
    );
}

fn channel_names(policy: &Policy) -> String {
    use crate::policy::ApprovalChannel;
    policy
        .server
        .approvals
        .iter()
        .map(|c| match c {
            ApprovalChannel::Elicitation => "the client's user through elicitation",
            ApprovalChannel::Operator => "the operator through `cordon approvals`",
        })
        .collect::<Vec<_>>()
        .join(", else ")
}

fn capitalise(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// `code_interpreter` sessions and their bounds.
fn explain_interpreter(o: &mut String, policy: &Policy) {
    let i = &policy.interpreter;
    let _ = writeln!(o, "\nPython sessions (code_interpreter)");
    let _ = writeln!(
        o,
        "  `{}` with the same file, network and syscall rules; up to {} sessions, each {} MiB, {} processes/threads, {}% CPU, {} CPU seconds over its life; cells {}s by default, at most {}s; idle sessions end after {}s.",
        i.python,
        i.max_sessions,
        i.memory_bytes >> 20,
        i.pids,
        i.cpu_percent,
        i.cpu_seconds,
        i.timeout.as_secs(),
        i.max_timeout.as_secs(),
        i.idle_timeout.as_secs()
    );
}

/// `serve --http`: origins, hosts, bounds and OAuth.
fn explain_http(o: &mut String, policy: &Policy) {
    let h = &policy.server.http;
    let _ = writeln!(o, "\nOver HTTP (serve --http)");
    let pages = if h.allowed_origins.is_empty() {
        "No browser page may call (any request with an Origin gets 403)".to_owned()
    } else {
        format!(
            "Browser pages from {} may call; any other Origin gets 403",
            h.allowed_origins.join(", ")
        )
    };
    let _ = writeln!(
        o,
        "  {pages}. Host headers accepted: {}.",
        h.allowed_hosts.join(", ")
    );
    let _ = writeln!(
        o,
        "  At most {} MCP sessions (one more gets 503), {} running calls per session, request bodies of {} KiB; a session unused for {}s ends with its calls and interpreters. A bearer token (--http-token-file, --http-token-env, or a JWT under [server.http.oauth]) is required off loopback.",
        h.max_sessions,
        h.max_calls_per_session,
        h.max_body_bytes / 1024,
        h.session_idle.as_secs()
    );
    let mut by_scope: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for (tool, scope) in &h.scopes {
        by_scope.entry(scope).or_default().push(tool);
    }
    let _ = writeln!(
        o,
        "  Tools by the scope a token needs for them: {}. The single static token has every scope; a token file's holders and JWTs have theirs. `policy explain --subject` says what one subject may do.",
        by_scope
            .iter()
            .map(|(scope, tools)| format!("{scope} → {}", tools.join(", ")))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let _ = writeln!(
        o,
        "  With serve --workspaces DIR: each subject works in its own workspace beneath DIR (its own sandbox, proxy, home, jobs and audit stream), at most {} sessions per subject; a subject's workspace with no session is shut down after {}s idle.",
        h.max_sessions_per_subject,
        h.workspace_idle.as_secs()
    );
    if !h.group_policies.is_empty() {
        let _ = writeln!(
            o,
            "  Group policies (the `{}` claim, or a token file's group= words; first match): {}; others run under this policy.",
            h.group_claim,
            h.group_policies
                .iter()
                .map(|g| format!("{} → {}", g.group, g.policy))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Some(oauth) = &h.oauth {
        let _ = writeln!(
            o,
            "  OAuth 2.1 resource server: JWTs of {} for audience {} ({}), keys from {}{}.",
            oauth.issuer,
            oauth.audience,
            oauth.algorithms.join(", "),
            oauth.jwks_file.display(),
            if oauth.required_scopes.is_empty() {
                String::new()
            } else {
                format!(", scopes {}", oauth.required_scopes.join(" "))
            }
        );
    }
}

/// What this kernel can enforce of all that: Landlock, seccomp, namespaces, cgroups.
fn explain_kernel(o: &mut String, kernel: &KernelSupport) {
    let _ = writeln!(o, "\nWhat this kernel enforces ({})", kernel.kernel_release);
    let landlock = if kernel.landlock_abi >= REQUIRED_LANDLOCK_ABI {
        format!("yes (ABI {})", kernel.landlock_abi)
    } else if kernel.landlock_abi > 0 {
        format!(
            "partly (ABI {} < {REQUIRED_LANDLOCK_ABI}): cordon refuses to run unless --allow-degraded",
            kernel.landlock_abi
        )
    } else {
        "NO: cordon refuses to run unless --allow-degraded".into()
    };
    let _ = writeln!(o, "  Landlock file and TCP rules: {landlock}");
    let _ = writeln!(
        o,
        "  seccomp: {}",
        if kernel.seccomp_filter {
            "yes"
        } else {
            "NO: cordon refuses to run unless --allow-degraded"
        }
    );
    let namespaces = !crate::confine::kernel::simulated_missing("namespaces")
        && (kernel.is_root || kernel.user_namespaces);
    let _ = writeln!(
        o,
        "  Running as root: {} (capabilities are dropped in every child)",
        if kernel.is_root { "yes" } else { "no" },
    );
    let _ = writeln!(
        o,
        "  Namespaces: {}",
        if namespaces {
            if kernel.is_root {
                "yes: a sandbox init built once (mount, PID, IPC, UTS and, without network, \
                 net namespaces) holds only what the policy grants; protected paths are \
                 read-only for commands and every confined process dies with the server"
            } else {
                "yes, through a user namespace: a sandbox init built once (mount, PID, IPC, \
                 UTS and, without network, net namespaces) holds only what the policy grants; \
                 protected paths are read-only for commands and every confined process dies \
                 with the server"
            }
        } else {
            "NO (not root, and unprivileged user namespaces are refused): each child is forked \
             by the server; seccomp refuses Unix sockets and System V IPC instead, /proc shows \
             host processes, metadata changes outside the workspace are not stopped and \
             protected paths are refused by the file tools only (enforcement `reduced`)"
        }
    );
    explain_cgroups(o);
    let _ = writeln!(
        o,
        "  `cordon doctor` proves each guarantee with a live probe."
    );
}

/// Per-call cgroup limits and tree kill, as this host's cgroups allow them.
fn explain_cgroups(o: &mut String) {
    let (mode, notes) = crate::confine::probe_cgroups();
    let cgroups = match mode {
        crate::confine::CgroupMode::V2 => "yes (cgroup v2 with delegated controllers)",
        crate::confine::CgroupMode::Hybrid => "yes (v1 controllers for limits, v2 cgroup.kill)",
        crate::confine::CgroupMode::V1 => "yes (cgroup v1)",
        crate::confine::CgroupMode::KillOnly => {
            "tree kill only: memory/pids/CPU fall back to rlimits (enforcement `reduced`)"
        }
        crate::confine::CgroupMode::None => {
            "NO: rlimits and process-group kill only; a setsid daemon can outlive its call \
             (enforcement `reduced`)"
        }
    };
    let _ = writeln!(
        o,
        "  Per-call memory/pids/CPU limits and whole-tree kill: {cgroups}"
    );
    for note in notes {
        let _ = writeln!(o, "    note: {note}");
    }
}

/// `[jobs]`: what outlives a call, for how long, and who can reach it.
fn explain_jobs(o: &mut String, policy: &Policy, confine: &crate::confine::ConfinePlan) {
    let j = &policy.jobs;
    let _ = writeln!(o, "\nBackground jobs (shell_exec background, the job tool)");
    if !j.enabled() {
        let _ = writeln!(
            o,
            "  Disabled (`[jobs] max_per_session = 0`): no process outlives its call; \
             `background: true` is refused with `denied`."
        );
        return;
    }
    let _ = writeln!(
        o,
        "  Up to {} running jobs per client session, each a call's process tree with the call's \
         sandbox and limits (memory, pids, CPU bandwidth, disk budget; RLIMIT_CPU raised to the \
         job's lifetime). A job's whole tree is killed {}s after it started, after {}s with no \
         read and no input, at a limit, when its session ends (stdin closed, HTTP DELETE or idle \
         expiry) and when the server stops; every later result of the session says which job \
         ended and why (`job_events`). {} KiB of each stream stay in memory; all of it goes to \
         the job's log in .cordon/outputs/ (bounded like spill files). Command rules apply to a \
         job's command line as to any shell_exec.",
        j.max_per_session,
        j.max_lifetime.as_secs(),
        j.idle_kill.as_secs(),
        j.ring_bytes / 1024,
    );
    let _ = if confine.isolate_network {
        writeln!(
            o,
            "  This policy gives the sandbox its own network namespace (where namespaces can be \
             had: root, or user namespaces), so its loopback is private: a server a job starts \
             on 127.0.0.1:PORT is reachable from later shell_exec calls and code_interpreter \
             cells of this server (TCP connect and bind are allowed on any port there, since \
             nothing else is in that namespace) and from nothing on the host. Without \
             namespaces the loopback is the host's."
        )
    } else {
        writeln!(
            o,
            "  This policy shares the host's network (it lists TCP ports): a job's server on \
             127.0.0.1 is on the host's loopback, reachable by local processes, within the \
             listed tcp_bind ports; `[jobs] forward` is refused."
        )
    };
    if j.forward.is_empty() {
        let _ = writeln!(
            o,
            "  No host port is forwarded (`[jobs] forward = []`): jobs' servers are not reachable \
             from the host."
        );
    } else {
        let _ = writeln!(
            o,
            "  Forwarded from the host's 127.0.0.1 into the sandbox's loopback (`[jobs] \
             forward`): ports {:?}; any local process on the host can reach a job's server on \
             those ports. Refused where the sandbox's loopback is not private.",
            j.forward
        );
    }
}

/// `[[network.credentials]]`, `[[network.rules]]`, `[network.git]` and `extra_roots`: each
/// entry with what it does, and the sources and roots checked now (as the server's start
/// will check them).
fn check_interception(out: &mut String, rules: &crate::egress::EgressRules) {
    for c in &rules.credentials {
        check_credential(out, c);
    }
    for r in &rules.http_rules {
        check_http_rule(out, rules, r);
    }
    if let Some(g) = &rules.git {
        check_git(out, g);
    }
    if rules.intercepts_any() {
        check_upstream_tls(out, rules);
    }
}

/// One credential: what the sandbox sees, where the real value goes, and its source now.
fn check_credential(out: &mut String, c: &crate::egress::secrets::CredentialRule) {
    let source = credential_source(c);
    let _ = writeln!(
        out,
        "  credential `{}` ({}): the sandbox sees ${} = cordon-cred-{}-<random>; the real \
         value, {source}, goes only to {} as `{}` (intercepted)",
        c.name,
        c.site,
        c.env,
        c.name,
        c.host_list(),
        c.inject
    );
}

/// Whether a credential's source is there and private, as the server's start will check it.
fn credential_source(c: &crate::egress::secrets::CredentialRule) -> String {
    use crate::egress::secrets::SecretSource;
    match &c.source {
        SecretSource::Env(var) if std::env::var_os(var).is_some() => {
            format!("{} (set here)", c.source)
        }
        SecretSource::Env(_) => format!(
            "{} (NOT set in this environment: the server will not start without it)",
            c.source
        ),
        SecretSource::File(p) => match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_file() => {
                use std::os::unix::fs::MetadataExt;
                if m.mode() & 0o077 == 0 {
                    format!("{} (a private file)", c.source)
                } else {
                    format!(
                        "{} (mode {:04o}: the server refuses it until `chmod 600`)",
                        c.source,
                        m.mode() & 0o7777
                    )
                }
            }
            Ok(_) => format!("{} (NOT a regular file)", c.source),
            Err(e) => format!("{} (cannot be read: {e})", c.source),
        },
    }
}

/// One L7 rule, with example requests judged by the proxy's own code.
fn check_http_rule(
    out: &mut String,
    rules: &crate::egress::EgressRules,
    r: &crate::egress::l7::HttpRule,
) {
    let any = |v: &[String]| {
        if v.is_empty() {
            "any".to_owned()
        } else {
            v.join(", ")
        }
    };
    let _ = writeln!(
        out,
        "  rule {} `{}` ({}): methods {} on paths {}; every other request to it gets a 403 \
         naming this rule (intercepted)",
        r.index,
        r.host,
        r.site,
        any(&r.methods),
        any(&r.paths)
    );
    // Examples judged by the proxy's own code (all rules of the host together).
    let (host, _) = r.host.examples();
    if let Ok(target) = crate::egress::pattern::Target::parse_authority(&host) {
        let method = r.methods.first().map_or("GET", String::as_str);
        let path = r
            .paths
            .first()
            .map_or("/".to_owned(), |p| p.replace('*', "x"));
        let other = ["DELETE", "POST", "PATCH"]
            .into_iter()
            .find(|m| !r.methods.is_empty() && !r.methods.iter().any(|x| x == m));
        let mut examples = vec![(method.to_owned(), path.clone())];
        if let Some(m) = other {
            examples.push((m.to_owned(), path.clone()));
        }
        if !r.paths.is_empty() {
            examples.push((method.to_owned(), "/cordon-unlisted-example".to_owned()));
        }
        let verdicts: Vec<String> = examples
            .iter()
            .map(|(m, p)| {
                let v = match crate::egress::l7::judge(&rules.http_rules, &target, m, p) {
                    Ok(_) => "allowed",
                    Err(_) => "refused (403)",
                };
                format!("{m} {p} -> {v}")
            })
            .collect();
        let _ = writeln!(out, "    e.g. {}", verdicts.join("; "));
    }
}

/// `[network.git]`, with example pushes judged by the proxy's own code.
fn check_git(out: &mut String, g: &crate::egress::l7::GitPolicy) {
    let _ = writeln!(
        out,
        "  git ({}): pushes to {} may update only [{}]; deletions {}",
        g.site,
        if g.hosts.is_empty() {
            "every host a credential or rule names".to_owned()
        } else {
            g.hosts
                .iter()
                .map(|h| h.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        },
        g.push_refs.join(", "),
        if g.allow_delete { "allowed" } else { "refused" }
    );
    use crate::egress::pktline::RefUpdate;
    let (zero, one) = ("0".repeat(40), "1".repeat(40));
    let mut examples: Vec<(String, RefUpdate)> = Vec::new();
    if let Some(p) = g.push_refs.first() {
        let name = p.replace('*', "x");
        examples.push((
            format!("push {name}"),
            RefUpdate {
                old: zero.clone(),
                new: one.clone(),
                refname: name.clone(),
            },
        ));
        examples.push((
            format!("delete {name}"),
            RefUpdate {
                old: one.clone(),
                new: zero.clone(),
                refname: name,
            },
        ));
    }
    examples.push((
        "push refs/heads/main".into(),
        RefUpdate {
            old: one.clone(),
            new: one,
            refname: "refs/heads/main".into(),
        },
    ));
    let verdicts: Vec<String> = examples
        .into_iter()
        .map(|(what, u)| {
            let v = if g.judge(std::slice::from_ref(&u)).is_empty() {
                "allowed"
            } else {
                "refused"
            };
            format!("{what} -> {v}")
        })
        .collect();
    let _ = writeln!(out, "    e.g. {}", verdicts.join("; "));
}

/// Whether the upstream TLS roots of intercepted hosts load.
fn check_upstream_tls(out: &mut String, rules: &crate::egress::EgressRules) {
    match crate::egress::tls::client_config(&rules.extra_roots) {
        Ok(_) => {
            let _ = writeln!(
                out,
                "  upstream TLS of intercepted hosts: verified against the system roots{}",
                if rules.extra_roots.is_empty() {
                    String::new()
                } else {
                    format!(" and extra_roots {:?}", rules.extra_roots)
                }
            );
        }
        Err(e) => {
            let _ = writeln!(out, "  error: {e} (the server will not start)");
        }
    }
}

fn explain_egress(o: &mut String, policy: &Policy, rules: &crate::egress::EgressRules) {
    let list = |entries: &[crate::egress::rules::SitedPattern]| {
        if entries.is_empty() {
            "none".to_owned()
        } else {
            entries
                .iter()
                .map(|e| format!("`{}`", e.pattern))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let _ = writeln!(
        o,
        "  Through cordon's egress proxy only: confined processes get HTTP_PROXY/HTTPS_PROXY/\
         ALL_PROXY pointing at it and a network namespace with nothing else (Landlock lets TCP \
         connect only to the proxy's port{}; seccomp profile `{}`).",
        if policy.network.tcp_connect.is_empty() {
            String::new()
        } else {
            format!(
                " and the sandbox's own loopback ports {:?}",
                policy.network.tcp_connect
            )
        },
        policy.sandbox.seccomp_profile
    );
    let _ = writeln!(
        o,
        "  Hosts allowed: {} ({}). No port in a pattern means 80 and 443.",
        list(&rules.allow_hosts),
        rules.allow_site
    );
    let _ = writeln!(
        o,
        "  Hosts denied (wins over allowed): {}.",
        list(&rules.deny_hosts)
    );
    loopback_warnings(o, rules);
    let _ = writeln!(
        o,
        "  The proxy resolves names itself, only once a name is allowed; addresses in loopback, \
         private, link-local or ULA ranges are refused unless listed in allow_private ({}). IP \
         literals are reached only when listed themselves.",
        if rules.allow_private.is_empty() {
            "none".to_owned()
        } else {
            rules
                .allow_private
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    let _ = writeln!(
        o,
        "  At most {} connections per call, {} MiB per connection (both ways); plain-HTTP \
         requests must carry a Host header naming their target. Every connection is in the \
         call's result and the audit log.",
        rules.max_connections_per_call,
        rules.max_bytes_per_connection >> 20
    );
    if rules.intercepts_any() {
        let _ = writeln!(
            o,
            "  Intercepted (TLS terminated by the proxy with a certificate of cordon's own CA, \
             made in memory at start and trusted only inside the sandbox; upstreams verified \
             against the system roots and extra_roots): every host a credential, a rule or \
             [network.git] names. Every other allowed host stays an opaque tunnel. One audit \
             record per intercepted request (method, host, path without query, status, bytes, \
             credential, rule)."
        );
        let mut detail = String::new();
        check_interception(&mut detail, rules);
        o.push_str(&detail);
    }
}

fn join_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explain_reads_the_grants_from_the_plan_confinement_enforces() {
        // A toolchain root is granted by the plan, not listed in filesystem.read_exec; a
        // read-only workspace keeps its writable directories.
        let t = tempfile::tempdir().unwrap();
        let toolchain = t.path().join("toolchain");
        std::fs::create_dir_all(toolchain.join("bin")).unwrap();
        let mut policy = Policy::builtin_default();
        policy.filesystem.toolchains = vec![toolchain.clone()];
        policy.filesystem.workspace = WorkspaceAccess::ReadOnly;
        policy.filesystem.workspace_writable = vec!["out".into()];
        let text = explain(&policy);
        let line = |start: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(start))
                .unwrap_or_else(|| panic!("no `{start}` line in\n{text}"))
                .to_owned()
        };
        let readable = line("Readable and executable:");
        assert!(
            readable.contains(&toolchain.display().to_string()),
            "{readable}"
        );
        let plans = policy.resolve(Path::new(STAND_IN_WORKSPACE));
        let grants = plans.confine.landlock_paths(&[]).expand();
        for p in &plans.confine.read_exec {
            let whole = grants
                .iter()
                .any(|g| &g.path == p && g.access == GrantKind::ReadExec);
            assert_eq!(
                readable.contains(&format!(" {},", p.display()))
                    || readable.ends_with(&format!(" {}.", p.display())),
                whole,
                "{}: {readable}",
                p.display()
            );
        }
        assert!(
            line("The workspace is").contains("read-only for commands and file tools, except out"),
            "{text}"
        );
        assert!(!text.contains(STAND_IN_WORKSPACE), "{text}");
    }

    #[test]
    fn explain_names_the_approval_channels_in_force() {
        let mut policy = Policy::builtin_default();
        let text = explain(&policy);
        let line = text
            .lines()
            .find(|l| l.contains("`ask` rules are answered by"))
            .expect(&text);
        let (client, operator) = (
            line.find("the client's user").expect(line),
            line.find("`cordon approvals`").expect(line),
        );
        assert!(client < operator, "elicitation first: {line}");
        policy.server.approvals = vec![crate::policy::ApprovalChannel::Operator];
        let line = approval_channels(&policy);
        assert!(
            line.contains("`cordon approve ID`") && !line.contains("client's user"),
            "{line}"
        );
    }

    #[test]
    fn explain_and_show_say_what_trips_the_breaker() {
        let mut policy = Policy::builtin_default();
        let text = explain(&policy);
        assert!(
            text.contains("Circuit breaker for repeated refusals")
                && text.contains("3 refusals of one group in a row")
                && text.contains("10 refusals of any group within 300s")
                && text.contains("allow it once"),
            "{text}"
        );
        let shown = show(&policy, false).unwrap();
        assert!(
            shown.contains("[breaker]") && shown.contains("consecutive = 3"),
            "{shown}"
        );
        policy.breaker.ask = false;
        assert!(explain(&policy).contains("nobody is asked (`ask = false`)"));
        policy.breaker.consecutive = 0;
        policy.breaker.window_refusals = 0;
        assert!(explain(&policy).contains("Off (`consecutive = 0`"));
    }
}
