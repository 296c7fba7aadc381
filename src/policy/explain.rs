//! What a permission error in a confined command's stderr means under the policy.
//!
//! Owns two pure steps: spotting, in stderr text, the paths named next to "Permission denied" /
//! "Operation not permitted" and the ports named in failed connects/binds ([`findings`]); and
//! evaluating one path or port against the policy ([`explain_path`], [`explain_port`]): which
//! operation was stopped, which grant is missing, and which policy line would allow it.
//!
//! It reads no kernel log and touches no file: the result is *derived from the policy* (and
//! says so), so it can be wrong when the error came from somewhere else, e.g. a file's own mode
//! bits. It does not run anything and does not know MCP.

use super::{Policy, WorkspaceAccess};
use regex::Regex;
use std::path::{Component, Path, PathBuf};
use std::sync::LazyLock;

/// At most this many paths/ports are explained per call; the first ones are the likely cause.
const MAX_FINDINGS: usize = 3;

/// What the command was doing to a path, as far as the message tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Read,
    Write,
    Execute,
    /// The message does not say.
    Access,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetOperation {
    Connect,
    Bind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    /// A path as written in the message (may be relative to the command's directory).
    Path {
        path: String,
        op: Operation,
        /// The message said the path does not exist: the sandbox's view holds only what the
        /// policy grants, so an ungranted path is absent rather than refused.
        missing: bool,
    },
    Port {
        port: u16,
        op: NetOperation,
    },
}

/// Where the command ran: absolute workspace root and working directory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scene<'a> {
    pub policy: &'a Policy,
    pub workspace: &'a Path,
    pub cwd: &'a Path,
    /// Protected paths are read-only binds for commands on this host (cordon runs as root).
    pub protected_for_commands: bool,
}

const DENIED: [&str; 2] = ["Permission denied", "Operation not permitted"];
const MISSING: &str = "No such file or directory";

static QUOTED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"'([^'\n]+)'|"([^"\n]+)"|‘([^’\n]+)’|`([^'\n]+)'"#).expect("valid regex")
});
static PORT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)/dev/(?:tcp|udp)/[^/\s]+/(\d{1,5})\b|\bport\s+(\d{1,5})\b|(?:\blocalhost|\[[0-9a-f:]+\]|\b\d{1,3}(?:\.\d{1,3}){3}|\b[a-z0-9][a-z0-9.-]*\.[a-z]{2,}):(\d{1,5})\b",
    )
    .expect("valid regex")
});

/// The paths and ports a failed command's stderr names in permission and network errors.
pub(crate) fn findings(stderr: &str) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for line in stderr.lines() {
        if out.len() >= MAX_FINDINGS {
            break;
        }
        let lower = line.to_lowercase();
        let networky = [
            "connect",
            "bind",
            "listen",
            "refused",
            "unreachable",
            "/dev/tcp/",
        ]
        .iter()
        .any(|w| lower.contains(w));
        if networky && let Some(port) = port_in(line) {
            let op = if lower.contains("bind") || lower.contains("listen") {
                NetOperation::Bind
            } else {
                NetOperation::Connect
            };
            let f = Finding::Port { port, op };
            if !out.contains(&f) {
                out.push(f);
            }
            continue;
        }
        let denied = DENIED.iter().filter_map(|d| line.find(d)).min();
        let Some((at, missing)) = denied
            .map(|at| (at, false))
            .or_else(|| line.find(MISSING).map(|at| (at, true)))
        else {
            continue;
        };
        if let Some(path) = path_in(line, at) {
            let f = Finding::Path {
                op: operation(&lower, line, &path),
                path,
                missing,
            };
            if !out.contains(&f) {
                out.push(f);
            }
        }
    }
    out
}

fn port_in(line: &str) -> Option<u16> {
    PORT.captures_iter(line)
        .filter_map(|c| (1..=3).find_map(|i| c.get(i)))
        .filter_map(|m| m.as_str().parse::<u16>().ok())
        .find(|p| *p != 0)
}

/// The path the error is about: a quoted one (the last before the error phrase, else the first
/// after it), or the last unquoted `/…` or `./…` word before the phrase.
fn path_in(line: &str, at: usize) -> Option<String> {
    let quoted: Vec<(usize, String)> = QUOTED
        .captures_iter(line)
        .filter_map(|c| {
            let m = (1..=4).find_map(|i| c.get(i))?;
            Some((m.start(), m.as_str().to_owned()))
        })
        .filter(|(_, q)| looks_like_path(q))
        .collect();
    if let Some((_, q)) = quoted.iter().rev().find(|(start, _)| *start < at) {
        return Some(q.clone());
    }
    if let Some((_, q)) = quoted.iter().find(|(start, _)| *start > at) {
        return Some(q.clone());
    }
    line[..at]
        .split_whitespace()
        .map(|w| w.trim_end_matches([':', ',', ';']))
        .rfind(|w| w.starts_with('/') || w.starts_with("./") || w.starts_with("../"))
        .map(str::to_owned)
}

fn looks_like_path(s: &str) -> bool {
    !s.is_empty() && !s.contains(' ') || s.starts_with('/')
}

fn operation(lower: &str, line: &str, path: &str) -> Operation {
    const WRITE: [&str; 14] = [
        "cannot create",
        "cannot touch",
        "cannot remove",
        "cannot make",
        "cannot mkdir",
        "could not lock",
        "cannot move",
        "cannot write",
        "cannot overwrite",
        "failed to create",
        "unable to create",
        "cannot open for writing",
        "cannot set",
        "cannot change",
    ];
    const READ: [&str; 5] = [
        "cannot open",
        "cannot access",
        "cannot read",
        "cannot stat",
        "cannot list",
    ];
    if WRITE.iter().any(|w| lower.contains(w)) {
        return Operation::Write;
    }
    if READ.iter().any(|w| lower.contains(w)) {
        return Operation::Read;
    }
    // `sh: 1: /opt/tool: Permission denied`: the shell could not execute the program.
    let exec_shape = line
        .split_once(": ")
        .is_some_and(|(prog, _)| prog.ends_with("sh") || prog.ends_with("bash"))
        && line.contains(&format!("{path}: Permission denied"));
    if exec_shape {
        return Operation::Execute;
    }
    // `cat: /x: Permission denied`: reading tools say only the path.
    let tool = line.split(':').next().unwrap_or("").trim();
    if [
        "cat", "head", "tail", "less", "grep", "wc", "ls", "cd", "sort", "diff", "file",
    ]
    .contains(&tool)
    {
        return Operation::Read;
    }
    Operation::Access
}

fn verb(op: Operation) -> &'static str {
    match op {
        Operation::Read => "reading",
        Operation::Write => "writing",
        Operation::Execute => "executing",
        Operation::Access => "accessing",
    }
}

/// `a/./b/../c` → `a/c`, without touching the filesystem.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether `path` is the `filesystem.deny` entry `entry` or beneath it, as enforcement decides
/// it (`confine::landlock`): every component but the last is compared as written, and `*` in
/// the last matches any run of characters within that one component.
fn denied_by(path: &Path, entry: &Path) -> bool {
    let (Some(parent), Some(last)) = (entry.parent(), entry.file_name()) else {
        return path == entry;
    };
    path.ancestors().any(|a| {
        a.parent() == Some(parent)
            && a.file_name().is_some_and(|name| {
                crate::glob::matches(&last.to_string_lossy(), &name.to_string_lossy())
            })
    })
}

/// The `filesystem.protected` entry the workspace-relative `rel` is in, matched as the
/// workspace matches it (`*` in any segment, within that segment).
fn protected_entry<'a>(protected: &'a [String], rel: &Path) -> Option<&'a str> {
    let segments: Vec<_> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect();
    crate::workspace::protect::inside_protected(protected, &segments)
}

fn shown(p: &Path) -> String {
    format!("\"{}\"", p.display())
}

/// Said when the sandbox's file rules allow an access that failed anyway.
const NOT_SANDBOX: &str = "so the sandbox's file rules allow it and the error comes from \
                           elsewhere (the file's own permissions or owner; check `ls -l`)";

/// What the policy says about `op` on `path` (as written in the message; relative paths are
/// taken from the command's directory).
pub(crate) fn explain_path(scene: &Scene<'_>, path: &str, op: Operation) -> String {
    let fs = &scene.policy.filesystem;
    let origin = &scene.policy.origin;
    let abs = lexical(&scene.cwd.join(path));
    let doing = verb(op);
    if let Some(entry) = fs.deny.iter().find(|d| denied_by(&abs, d)) {
        return format!(
            "{doing} {} was stopped: it is under {} in filesystem.deny, which no grant overrides. \
             If the command really needs it, remove {} from filesystem.deny in policy {origin}.",
            abs.display(),
            shown(entry),
            shown(entry)
        );
    }
    if let Ok(rel) = abs.strip_prefix(scene.workspace) {
        return explain_workspace_path(scene, &abs, rel, op);
    }
    if abs.starts_with("/dev") {
        if fs.devices.iter().any(|d| d == &abs) {
            return format!(
                "{} is listed in filesystem.devices, {NOT_SANDBOX}.",
                abs.display()
            );
        }
        return format!(
            "{doing} {} was stopped: device files are reachable only when listed in \
             filesystem.devices. To allow it, add {} to filesystem.devices in policy {origin}.",
            abs.display(),
            shown(&abs)
        );
    }
    if let Some(entry) = fs.read_write.iter().find(|g| abs.starts_with(g)) {
        return format!(
            "{} is granted read-write by {} in filesystem.read_write, {NOT_SANDBOX}.",
            abs.display(),
            shown(entry)
        );
    }
    explain_outside_write_grants(scene, &abs, op)
}

/// A path in the workspace: a read-only workspace, a protected path, or granted.
fn explain_workspace_path(scene: &Scene<'_>, abs: &Path, rel: &Path, op: Operation) -> String {
    let fs = &scene.policy.filesystem;
    let origin = &scene.policy.origin;
    let doing = verb(op);
    let rel_str = rel.to_string_lossy();
    let writing = matches!(op, Operation::Write | Operation::Access);
    let writable_dir = fs.workspace_writable.iter().any(|w| rel.starts_with(w));
    if fs.workspace == WorkspaceAccess::ReadOnly && writing && !writable_dir {
        return format!(
            "{doing} {} was stopped: the workspace is read-only under this policy \
             (filesystem.workspace = \"read_only\") except {}. To let commands write \
             here, add its directory to filesystem.workspace_writable, or set \
             filesystem.workspace = \"read_write\", in policy {origin}.",
            abs.display(),
            writable_list(fs)
        );
    }
    if let Some(entry) = protected_entry(&fs.protected, rel) {
        if scene.protected_for_commands && writing {
            return format!(
                "{doing} {} was stopped: `{entry}` is a protected path \
                 (filesystem.protected), read-only for commands because what lands there \
                 runs or is trusted outside the sandbox. Ask the operator to make the \
                 change, or to remove `{entry}` from filesystem.protected in policy {origin}.",
                abs.display()
            );
        }
        return format!(
            "`{rel_str}` is inside the protected path `{entry}` (filesystem.protected): the \
             file tools never write there, but on this host (cordon not running as root) \
             shell commands are not stopped by that entry; the workspace is granted {}, \
             {NOT_SANDBOX}.",
            access(fs.workspace)
        );
    }
    format!(
        "`{}` is in the workspace, which this policy grants {}, {NOT_SANDBOX}.",
        if rel_str.is_empty() { "." } else { &rel_str },
        access(fs.workspace)
    )
}

/// A path outside the workspace, the devices and every read-write grant: read-only under a
/// read_exec grant, or outside every grant, with the line that would allow it.
fn explain_outside_write_grants(scene: &Scene<'_>, abs: &Path, op: Operation) -> String {
    let fs = &scene.policy.filesystem;
    let origin = &scene.policy.origin;
    let doing = verb(op);
    // Where a write would need a grant: the directory, since new files need their parent.
    let write_target = abs
        .parent()
        .filter(|_| op == Operation::Write)
        .unwrap_or(abs);
    if let Some(entry) = fs.read_exec.iter().find(|g| abs.starts_with(g)) {
        return match op {
            Operation::Read | Operation::Execute => format!(
                "{} is granted read and execute by {} in filesystem.read_exec, {NOT_SANDBOX}.",
                abs.display(),
                shown(entry)
            ),
            Operation::Write | Operation::Access => format!(
                "{doing} {} was stopped if it was a write: {} in filesystem.read_exec grants \
                 reading and executing only. To let commands write there, add {} to \
                 filesystem.read_write in policy {origin}.",
                abs.display(),
                shown(entry),
                shown(write_target)
            ),
        };
    }
    let tmp_hint = if abs.starts_with("/tmp") || abs.starts_with("/var/tmp") {
        " Each call has a private temporary directory in $TMPDIR (also $HOME); use that instead \
         of /tmp."
    } else {
        ""
    };
    let grant = match op {
        Operation::Write => format!("add {} to filesystem.read_write", shown(write_target)),
        Operation::Read | Operation::Execute => {
            format!("add {} to filesystem.read_exec", shown(abs))
        }
        Operation::Access => format!(
            "add {} to filesystem.read_exec (to read it) or to filesystem.read_write (to write it)",
            shown(abs)
        ),
    };
    format!(
        "{doing} {} was stopped: it is outside every path the policy grants (the workspace, the \
         call's temporary directory, filesystem.read_exec and filesystem.read_write). To allow \
         it, {grant} in policy {origin}.{tmp_hint}",
        abs.display()
    )
}

/// The writable directories of a read-only workspace, in words.
fn writable_list(fs: &super::FilesystemPolicy) -> String {
    if fs.workspace_writable.is_empty() {
        "nothing".to_owned()
    } else {
        fs.workspace_writable.join(", ")
    }
}

/// The workspace's access, in words.
fn access(w: WorkspaceAccess) -> &'static str {
    match w {
        WorkspaceAccess::ReadWrite => "read-write",
        WorkspaceAccess::ReadOnly => "read-only",
    }
}

/// What the policy says about a TCP connect to / bind of `port`.
pub(crate) fn explain_port(policy: &Policy, port: u16, op: NetOperation) -> String {
    let origin = &policy.origin;
    let (field, doing, granted) = match op {
        NetOperation::Connect => ("tcp_connect", "connecting to", &policy.network.tcp_connect),
        NetOperation::Bind => ("tcp_bind", "listening on", &policy.network.tcp_bind),
    };
    if granted.contains(&port) {
        return format!(
            "{doing} TCP port {port} is allowed by network.{field}, so the sandbox did not stop \
             it (is the other side there? is the port already in use?)."
        );
    }
    let own_namespace = policy.network.uses_proxy()
        || (policy.network.is_off() && policy.sandbox.seccomp_profile == "default");
    if own_namespace && op == NetOperation::Bind {
        return format!(
            "listening on TCP port {port} is not restricted by this policy: the sandbox has its \
             own network namespace, where any port may be bound (is the port already in use by \
             another process of this call?). Without namespaces cordon gives this policy no \
             network at all."
        );
    }
    if policy.network.uses_proxy() && op == NetOperation::Connect {
        return format!(
            "connecting to TCP port {port} directly was stopped: this policy routes the network \
             through cordon's egress proxy (HTTP_PROXY/HTTPS_PROXY/ALL_PROXY are set), and the \
             sandbox has no other route out. Use a client that honours those variables; to \
             allow a host, add it to network.allow_hosts in policy {origin}. (network.tcp_connect \
             names ports of the sandbox's own loopback only, where a server runs only while its \
             call does, or as a background job: `shell_exec {{\"background\": true}}`.)"
        );
    }
    if own_namespace {
        return format!(
            "{doing} TCP port {port} found nothing: the sandbox has its own network namespace \
             with only its own loopback, so 127.0.0.1:{port} there is a server this call started \
             itself or a background job of this session runs (any port works for those), never \
             one on the host, and nothing outside is reachable. A server started with `&` (or as \
             a daemon) by an earlier call was ended when that call ended: start it with \
             `shell_exec {{\"background\": true}}` to keep it running, and read it with `job`. \
             To reach hosts, use a policy with the egress proxy (`dev`) and list them in \
             network.allow_hosts; policy {origin} has the network off."
        );
    }
    if policy.network.is_off() {
        return format!(
            "{doing} TCP port {port} was stopped: the network is off in this policy (network \
             lists no ports, and the seccomp profile \"{}\" refuses non-Unix sockets). To allow \
             it, add {port} to network.{field} and set sandbox.seccomp_profile = \"tcp\" in \
             policy {origin}.",
            policy.sandbox.seccomp_profile
        );
    }
    format!(
        "{doing} TCP port {port} was stopped: network.{field} allows only {granted:?}. To allow \
         it, add {port} to network.{field} in policy {origin}."
    )
}

/// Whether the policy grants `path` at all (so the sandbox's view holds it).
fn is_granted(scene: &Scene<'_>, path: &str) -> bool {
    let abs = lexical(&scene.cwd.join(path));
    let fs = &scene.policy.filesystem;
    abs.starts_with(scene.workspace)
        || fs
            .read_exec
            .iter()
            .chain(&fs.read_write)
            .chain(&fs.devices)
            .any(|g| abs.starts_with(g))
}

/// The explanation for a failed command's stderr, labeled as derived from the policy, or None
/// when it names no path or port in a permission or network error.
pub(crate) fn explain_stderr(scene: &Scene<'_>, stderr: &str) -> Option<String> {
    let found = findings(stderr);
    if found.is_empty() {
        return None;
    }
    let parts: Vec<String> = found
        .iter()
        .filter_map(|f| match f {
            // A granted path that does not exist is just missing: nothing to explain.
            Finding::Path {
                path,
                missing: true,
                ..
            } if is_granted(scene, path) => None,
            Finding::Path { path, op, .. } => Some(explain_path(scene, path, *op)),
            Finding::Port { port, op } => Some(explain_port(scene.policy, *port, *op)),
        })
        .collect();
    if parts.is_empty() {
        return None;
    }
    Some(format!(
        "[explanation derived from the policy {} by reading the error message, not from a kernel \
         log] {}",
        scene.policy.origin,
        parts.join(" ")
    ))
}

/// A tracer's failure (gdb, strace, LeakSanitizer: their own words name `ptrace`) explained by
/// `[sandbox] ptrace`: what the policy lets a call trace and how to opt in; None when the
/// output shows no refused tracing.
pub(crate) fn explain_tracing(policy: &Policy, stderr: &str) -> Option<String> {
    let lower = stderr.to_lowercase();
    let tracing = lower.contains("ptrace") || lower.contains("leaksanitizer has encountered");
    let refused = [
        "operation not permitted",
        "permission denied",
        "fatal error",
    ]
    .iter()
    .any(|w| lower.contains(w));
    if !(tracing && refused) {
        return None;
    }
    Some(match policy.sandbox.ptrace {
        super::PtraceScope::None => format!(
            "tracing was refused: policy {} sets `[sandbox] ptrace = \"none\"`, so seccomp \
             refuses `ptrace` and `process_vm_*` (gdb, strace and LeakSanitizer need them). \
             To let a call debug its own processes, set `[sandbox] ptrace = \"call\"` there.",
            policy.origin
        ),
        super::PtraceScope::Call => "tracing is allowed only between processes of the same call \
             (`[sandbox] ptrace = \"call\"`): a process outside it (its reaper, pid 1; another \
             call or a job; the server) cannot be traced, and without Landlock on this host no \
             tracing is allowed at all (see the result's `enforcement`). Start the program \
             under the debugger in the same call (`gdb -batch -ex run --args prog`, `strace -f \
             prog`)."
            .to_owned(),
    })
}

/// Where a denial's explanation comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DenialSource {
    /// The kernel's Landlock audit record for this call: the exact right and object.
    Kernel,
    /// Derived from the policy by reading the command's error message (no kernel record was
    /// available): can be wrong when the error came from elsewhere.
    ErrorMessage,
}

/// One denial of a call and the policy field that governs it (the `denials` of a result).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub(crate) struct Denial {
    /// "kernel" (from the kernel's Landlock audit record) or "error_message" (derived from
    /// the policy by reading stderr).
    pub source: DenialSource,
    /// The access rights the kernel reported missing, as it names them ("fs.read_file",
    /// "fs.write_file", "fs.make_reg", "fs.execute", "net.connect_tcp", …); for an
    /// error-message explanation, the operation the message suggests ("read", "write", …).
    pub access: Vec<String>,
    /// The file or directory (for creating or removing an entry: its directory), or null.
    pub path: Option<String>,
    /// The TCP port, or null.
    pub port: Option<u16>,
    /// The policy field that governs it: "filesystem.deny", "filesystem.read_exec" (grants
    /// reading and executing only), "filesystem.workspace", "filesystem.devices",
    /// "network.tcp_connect", "network.tcp_bind", "not_granted" (outside every grant), or
    /// "sandbox_scope" (cordon's own isolation of the sandbox, no policy field).
    pub policy_field: String,
    /// What was stopped and which policy line would allow it.
    pub explanation: String,
    /// How many times the kernel reported it during the call (1 for error-message ones).
    pub count: u64,
}

/// Most denials listed in one result; the first ones are the likely cause.
pub(crate) const MAX_DENIALS_SHOWN: usize = 8;

/// Explains each kernel-reported denial (in the order the kernel reported them).
pub(crate) fn explain_kernel(
    scene: &Scene<'_>,
    denials: &[crate::confine::audit::KernelDenial],
) -> Vec<Denial> {
    denials
        .iter()
        .take(MAX_DENIALS_SHOWN)
        .map(|d| {
            let (policy_field, explanation) = kernel_one(scene, d);
            Denial {
                source: DenialSource::Kernel,
                access: d.blockers.clone(),
                path: d.path.clone(),
                port: d.port,
                policy_field,
                explanation,
                count: d.count,
            }
        })
        .collect()
}

/// The governing policy field and the explanation of one kernel record.
fn kernel_one(scene: &Scene<'_>, d: &crate::confine::audit::KernelDenial) -> (String, String) {
    let has = |prefix: &str| d.blockers.iter().any(|b| b.starts_with(prefix));
    let rights = d.blockers.join(", ");
    if has("net.") {
        return kernel_net(scene, d, &rights);
    }
    if has("scope.") {
        return (
            "sandbox_scope".into(),
            format!(
                "The kernel denied {rights} (Landlock scope): a confined process may not signal \
                 or reach abstract Unix sockets of processes outside its own sandbox. No policy \
                 field changes this."
            ),
        );
    }
    let Some(path) = d.path.as_deref() else {
        return (
            "not_granted".into(),
            format!("The kernel denied {rights} (Landlock) on an object it did not name."),
        );
    };
    kernel_file(scene, &FileDenial::new(d, &rights, path))
}

/// A TCP connect or bind the kernel refused.
fn kernel_net(
    scene: &Scene<'_>,
    d: &crate::confine::audit::KernelDenial,
    rights: &str,
) -> (String, String) {
    let (op, field) = if d.blockers.iter().any(|b| b.starts_with("net.bind_tcp")) {
        (NetOperation::Bind, "network.tcp_bind")
    } else {
        (NetOperation::Connect, "network.tcp_connect")
    };
    let port = d.port.unwrap_or(0);
    let text = format!(
        "The kernel denied {rights}{} (Landlock). {}",
        d.address
            .as_ref()
            .map(|a| format!(" to {a}:{port}"))
            .unwrap_or_else(|| format!(" on port {port}")),
        explain_port(scene.policy, port, op)
    );
    (field.into(), text)
}

/// A file access the kernel refused, as its record tells it.
struct FileDenial {
    abs: PathBuf,
    /// Creating or removing an entry: the record names the directory it is in.
    in_dir: bool,
    writing: bool,
    /// "The kernel denied … on …: … was stopped", which every explanation starts with.
    head: String,
}

impl FileDenial {
    fn new(d: &crate::confine::audit::KernelDenial, rights: &str, path: &str) -> Self {
        let has = |prefix: &str| d.blockers.iter().any(|b| b.starts_with(prefix));
        let abs = lexical(Path::new(path));
        let in_dir = has("fs.make_") || has("fs.remove_") || has("fs.refer");
        let writing = in_dir || has("fs.write_file") || has("fs.truncate");
        let what = if in_dir {
            format!("creating or removing entries in {}", abs.display())
        } else {
            let doing = if writing {
                "writing"
            } else if has("fs.execute") {
                "executing"
            } else {
                "reading"
            };
            format!("{doing} {}", abs.display())
        };
        let head = format!(
            "The kernel denied {rights} on {} (Landlock): {what} was stopped",
            abs.display()
        );
        Self {
            abs,
            in_dir,
            writing,
            head,
        }
    }

    /// The directory a write grant is needed for: the named one for entries, else the
    /// file's directory.
    fn write_target(&self) -> &Path {
        if self.in_dir {
            &self.abs
        } else {
            self.abs.parent().unwrap_or(&self.abs)
        }
    }
}

/// Which file rule stopped a file access: a deny entry, the workspace's access, the devices
/// list, a read-only grant, or no grant at all.
fn kernel_file(scene: &Scene<'_>, f: &FileDenial) -> (String, String) {
    let fs = &scene.policy.filesystem;
    let origin = &scene.policy.origin;
    let (abs, head) = (&f.abs, &f.head);
    if let Some(entry) = fs.deny.iter().find(|e| denied_by(abs, e)) {
        return (
            "filesystem.deny".into(),
            format!(
                "{head}; it is under {} in filesystem.deny, which no grant overrides. If the \
                 command really needs it, remove {} from filesystem.deny in policy {origin}.",
                shown(entry),
                shown(entry)
            ),
        );
    }
    if let Ok(rel) = abs.strip_prefix(scene.workspace) {
        return (
            "filesystem.workspace".into(),
            kernel_workspace(scene, f, rel),
        );
    }
    if abs.starts_with("/dev") {
        return (
            "filesystem.devices".into(),
            format!(
                "{head}; device files are reachable only when listed in filesystem.devices. To \
                 allow it, add {} to filesystem.devices in policy {origin}.",
                shown(abs)
            ),
        );
    }
    if f.writing
        && let Some(entry) = fs.read_exec.iter().find(|g| abs.starts_with(g))
    {
        return (
            "filesystem.read_exec".into(),
            format!(
                "{head}; {} in filesystem.read_exec grants reading and executing only. To let \
                 commands write there, add {} to filesystem.read_write in policy {origin}.",
                shown(entry),
                shown(f.write_target())
            ),
        );
    }
    let grant = if f.writing {
        format!("add {} to filesystem.read_write", shown(f.write_target()))
    } else {
        format!("add {} to filesystem.read_exec", shown(abs))
    };
    (
        "not_granted".into(),
        format!(
            "{head}; it is outside every path the policy grants for that (the workspace, the \
             call's temporary directory, filesystem.read_exec and filesystem.read_write). To \
             allow it, {grant} in policy {origin}."
        ),
    )
}

/// A refused access in the workspace: a write to a read-only workspace, or the workspace's
/// own right, whatever it is.
fn kernel_workspace(scene: &Scene<'_>, f: &FileDenial, rel: &Path) -> String {
    let fs = &scene.policy.filesystem;
    let origin = &scene.policy.origin;
    let head = &f.head;
    if f.writing && fs.workspace == WorkspaceAccess::ReadOnly {
        format!(
            "{head}; `{}` is in the workspace, which this policy grants read-only (writable \
             there: {}). To let commands write here, add its directory to \
             filesystem.workspace_writable or set filesystem.workspace = \"read_write\" in \
             policy {origin}.",
            rel.display(),
            writable_list(fs)
        )
    } else {
        format!(
            "{head}; `{}` is in the workspace, which this policy grants {}: the sandbox \
             keeps this right from every call there (policy {origin}).",
            rel.display(),
            access(fs.workspace)
        )
    }
}

/// The error-message explanations as denials (the fallback where no kernel record exists).
pub(crate) fn message_denials(scene: &Scene<'_>, stderr: &str) -> Vec<Denial> {
    findings(stderr)
        .into_iter()
        .filter_map(|f| match f {
            Finding::Path {
                path,
                missing: true,
                ..
            } if is_granted(scene, &path) => None,
            Finding::Path { path, op, .. } => {
                let explanation = explain_path(scene, &path, op);
                let field = message_field(&explanation);
                Some(Denial {
                    source: DenialSource::ErrorMessage,
                    access: vec![
                        match op {
                            Operation::Read => "read",
                            Operation::Write => "write",
                            Operation::Execute => "execute",
                            Operation::Access => "access",
                        }
                        .into(),
                    ],
                    path: Some(lexical(&scene.cwd.join(&path)).display().to_string()),
                    port: None,
                    policy_field: field,
                    explanation,
                    count: 1,
                })
            }
            Finding::Port { port, op } => Some(Denial {
                source: DenialSource::ErrorMessage,
                access: vec![
                    match op {
                        NetOperation::Connect => "connect",
                        NetOperation::Bind => "bind",
                    }
                    .into(),
                ],
                path: None,
                port: Some(port),
                policy_field: match op {
                    NetOperation::Connect => "network.tcp_connect",
                    NetOperation::Bind => "network.tcp_bind",
                }
                .into(),
                explanation: explain_port(scene.policy, port, op),
                count: 1,
            }),
        })
        .collect()
}

/// The field an error-message explanation names first (they all name the line to change).
fn message_field(explanation: &str) -> String {
    for field in [
        "filesystem.deny",
        "filesystem.workspace_writable",
        "filesystem.protected",
        "filesystem.devices",
        "filesystem.read_write",
        "filesystem.read_exec",
    ] {
        if explanation.contains(field) {
            return match field {
                "filesystem.workspace_writable" => "filesystem.workspace".into(),
                _ if explanation.contains("outside every path") => "not_granted".into(),
                f => f.into(),
            };
        }
    }
    "not_granted".into()
}

/// What to tell a file tool whose write the policy's write rules refused (a protected path,
/// or a read-only workspace): which setting of which policy to change. None for any other
/// failure, which says enough by itself.
pub(crate) fn write_refusal(policy: &Policy, e: &crate::workspace::PathError) -> Option<String> {
    use crate::workspace::PathError;
    let fs = &policy.filesystem;
    match e {
        PathError::Protected { entry, .. } => Some(format!(
            "{e}, or to remove `{entry}` from `filesystem.protected` in the policy ({}).",
            policy.origin
        )),
        PathError::NotWritable { .. } => Some(format!(
            "{e}: policy `{}` makes the workspace read-only except {}. Or ask the operator to \
             add the directory to `filesystem.workspace_writable` ({}).",
            policy.name,
            writable_list(fs),
            policy.origin
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scene(policy: &Policy) -> Scene<'_> {
        Scene {
            policy,
            workspace: Path::new("/ws"),
            cwd: Path::new("/ws/sub"),
            protected_for_commands: false,
        }
    }

    #[test]
    fn finds_paths_in_the_usual_message_shapes() {
        let cases = [
            (
                "cat: /srv/data/x: Permission denied",
                "/srv/data/x",
                Operation::Read,
            ),
            (
                "touch: cannot touch '/usr/x': Permission denied",
                "/usr/x",
                Operation::Write,
            ),
            (
                "mkdir: cannot create directory ‘/opt/x’: Permission denied",
                "/opt/x",
                Operation::Write,
            ),
            (
                "sh: 1: cannot create /etc/foo: Permission denied",
                "/etc/foo",
                Operation::Write,
            ),
            (
                "/bin/sh: 1: /opt/tool: Permission denied",
                "/opt/tool",
                Operation::Execute,
            ),
            (
                "PermissionError: [Errno 13] Permission denied: '/etc/shadow'",
                "/etc/shadow",
                Operation::Access,
            ),
            (
                "rm: cannot remove './a': Operation not permitted",
                "./a",
                Operation::Write,
            ),
        ];
        for (line, path, op) in cases {
            assert_eq!(
                findings(line),
                [Finding::Path {
                    path: path.into(),
                    op,
                    missing: false,
                }],
                "{line}"
            );
        }
        assert!(findings("error: no such file\nall good").is_empty());
        // The sandbox's view holds only what the policy grants: an ungranted path is absent.
        assert_eq!(
            findings("ls: cannot access '/var': No such file or directory"),
            [Finding::Path {
                path: "/var".into(),
                op: Operation::Read,
                missing: true,
            }]
        );
    }

    #[test]
    fn finds_ports_in_connect_and_bind_failures() {
        for (line, port, op) in [
            (
                "curl: (7) Failed to connect to 127.0.0.1 port 8080 after 0 ms: Couldn't connect to server",
                8080,
                NetOperation::Connect,
            ),
            (
                "nc: connect to localhost port 5432 (tcp) failed: Permission denied",
                5432,
                NetOperation::Connect,
            ),
            (
                "Error: connect EACCES 10.0.0.1:443",
                443,
                NetOperation::Connect,
            ),
            (
                "Error: listen EACCES: permission denied 0.0.0.0:3000",
                3000,
                NetOperation::Bind,
            ),
            (
                "OSError: bind [::1]:8000 Operation not permitted",
                8000,
                NetOperation::Bind,
            ),
        ] {
            assert_eq!(findings(line), [Finding::Port { port, op }], "{line}");
        }
    }

    fn kernel(blockers: &[&str], path: Option<&str>, port: Option<u16>) -> Denial {
        let p = Policy::builtin_default();
        let d = crate::confine::audit::KernelDenial {
            blockers: blockers.iter().map(|b| (*b).to_owned()).collect(),
            path: path.map(str::to_owned),
            port,
            address: port.map(|_| "127.0.0.1".to_owned()),
            count: 2,
        };
        explain_kernel(&scene(&p), &[d]).remove(0)
    }

    #[test]
    fn kernel_records_name_the_governing_field() {
        let d = kernel(&["fs.read_file"], Some("/etc/shadow"), None);
        assert_eq!(d.policy_field, "filesystem.deny");
        assert_eq!((d.source, d.count), (DenialSource::Kernel, 2));
        assert!(
            d.explanation.contains("remove \"/etc/shadow\""),
            "{}",
            d.explanation
        );
        // Writing a file below a read-only grant: the grant to add is its directory.
        let d = kernel(&["fs.write_file"], Some("/usr/lib/x.so"), None);
        assert_eq!(d.policy_field, "filesystem.read_exec");
        assert!(
            d.explanation
                .contains("add \"/usr/lib\" to filesystem.read_write"),
            "{}",
            d.explanation
        );
        // Creating an entry names the directory itself, which is what needs the grant.
        let d = kernel(&["fs.make_reg"], Some("/srv/out"), None);
        assert_eq!(d.policy_field, "not_granted");
        assert!(
            d.explanation
                .contains("add \"/srv/out\" to filesystem.read_write"),
            "{}",
            d.explanation
        );
        let d = kernel(&["fs.execute", "fs.read_file"], Some("/srv/tool"), None);
        assert_eq!(d.policy_field, "not_granted");
        assert!(
            d.explanation.contains("executing /srv/tool"),
            "{}",
            d.explanation
        );
        let d = kernel(&["fs.write_file"], Some("/dev/tty"), None);
        assert_eq!(d.policy_field, "filesystem.devices");
        let d = kernel(&["net.connect_tcp"], None, Some(5432));
        assert_eq!(
            (d.policy_field.as_str(), d.port),
            ("network.tcp_connect", Some(5432))
        );
        assert!(
            d.explanation.contains("127.0.0.1:5432"),
            "{}",
            d.explanation
        );
        let d = kernel(&["net.bind_tcp"], None, Some(8080));
        assert_eq!(d.policy_field, "network.tcp_bind");
        let d = kernel(&["scope.signal"], None, None);
        assert_eq!(d.policy_field, "sandbox_scope");
        // The workspace's own paths: the read-only workspace is the field to change.
        let mut p = Policy::builtin_default();
        p.filesystem.workspace = WorkspaceAccess::ReadOnly;
        let d = crate::confine::audit::KernelDenial {
            blockers: vec!["fs.make_reg".into()],
            path: Some("/ws/sub".into()),
            port: None,
            address: None,
            count: 1,
        };
        let d = explain_kernel(&scene(&p), &[d]).remove(0);
        assert_eq!(d.policy_field, "filesystem.workspace");
        assert!(d.explanation.contains("read-only"), "{}", d.explanation);
    }

    #[test]
    fn message_denials_say_their_source() {
        let p = Policy::builtin_default();
        let found = message_denials(&scene(&p), "cat: /etc/shadow: Permission denied\n");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].source, DenialSource::ErrorMessage);
        assert_eq!(found[0].policy_field, "filesystem.deny");
        assert_eq!(found[0].access, ["read"]);
        assert_eq!(found[0].path.as_deref(), Some("/etc/shadow"));
        assert!(message_denials(&scene(&p), "all fine\n").is_empty());
    }

    #[test]
    fn a_path_outside_every_grant_names_the_line_to_add() {
        let p = Policy::builtin_default();
        let e = explain_path(&scene(&p), "/srv/data/x", Operation::Read);
        assert!(e.contains("outside every path"), "{e}");
        assert!(
            e.contains("add \"/srv/data/x\" to filesystem.read_exec"),
            "{e}"
        );
        assert!(e.contains("builtin:default"), "{e}");
        let e = explain_path(&scene(&p), "/srv/data/new.txt", Operation::Write);
        assert!(
            e.contains("add \"/srv/data\" to filesystem.read_write"),
            "{e}"
        );
        let e = explain_path(&scene(&p), "/tmp/x", Operation::Write);
        assert!(e.contains("$TMPDIR"), "{e}");
    }

    #[test]
    fn a_write_under_a_read_only_grant_suggests_read_write() {
        let p = Policy::builtin_default();
        let e = explain_path(&scene(&p), "/usr/local/x", Operation::Write);
        assert!(e.contains("\"/usr\" in filesystem.read_exec"), "{e}");
        assert!(
            e.contains("add \"/usr/local\" to filesystem.read_write"),
            "{e}"
        );
        let e = explain_path(&scene(&p), "/usr/bin/ls", Operation::Read);
        assert!(e.contains("comes from elsewhere"), "{e}");
    }

    #[test]
    fn a_denied_path_names_the_deny_entry() {
        let p = Policy::builtin_default();
        let e = explain_path(&scene(&p), "/etc/shadow", Operation::Access);
        assert!(e.contains("\"/etc/shadow\" in filesystem.deny"), "{e}");
        let e = explain_path(&scene(&p), "/etc/ssh/ssh_host_rsa_key", Operation::Read);
        assert!(e.contains("ssh_host_*_key"), "{e}");
        let e = explain_path(&scene(&p), "/home/bob/.ssh/id_rsa", Operation::Read);
        assert!(e.contains("\"/home\" in filesystem.deny"), "{e}");
    }

    #[test]
    fn a_deny_entry_with_two_stars_is_explained_as_enforcement_applies_it() {
        use crate::confine::landlock::{LandlockSpec, TcpPorts, expand_grants};
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("srv");
        std::fs::create_dir_all(dir.join("aXbYc.d")).unwrap();
        for name in ["aXbYc", "aXcYb", "abc", "ab"] {
            std::fs::write(dir.join(name), "x").unwrap();
        }
        let mut p = Policy::builtin_default();
        p.filesystem.read_exec = vec![dir.clone()];
        p.filesystem.deny = vec![dir.join("a*b*c")];
        let grants = expand_grants(&LandlockSpec {
            read_exec: &p.filesystem.read_exec,
            read_write: &[],
            read_only: &[],
            devices: &[],
            deny: &p.filesystem.deny,
            tcp_connect: &TcpPorts::NONE,
            tcp_bind: &TcpPorts::NONE,
        });
        for name in ["aXbYc", "aXcYb", "abc", "ab", "aXbYc.d", "aXbYc.d/inner"] {
            let path = dir.join(name);
            // A path is enforced as denied when neither it nor any directory above it (below
            // the carved-out grant) is granted.
            let enforced_denied = !path
                .ancestors()
                .take_while(|a| a.starts_with(&dir) && *a != dir)
                .any(|a| grants.iter().any(|g| g.path == a));
            let e = explain_path(&scene(&p), path.to_str().unwrap(), Operation::Read);
            assert_eq!(
                e.contains("in filesystem.deny"),
                enforced_denied,
                "{name}: {e}"
            );
        }
        // Both stars count: the old explanation took everything after the first star as
        // one literal suffix and called `aXbYc` allowed.
        let e = explain_path(
            &scene(&p),
            dir.join("aXbYc").to_str().unwrap(),
            Operation::Read,
        );
        assert!(e.contains("in filesystem.deny"), "{e}");
    }

    #[test]
    fn workspace_paths_protected_and_read_only() {
        let mut p = Policy::builtin_default();
        let e = explain_path(&scene(&p), "../.git/hooks/pre-commit", Operation::Write);
        assert!(e.contains("protected path `.git/hooks`"), "{e}");
        assert!(e.contains("not stopped by that entry"), "{e}");
        let e = explain_path(&scene(&p), "out.txt", Operation::Write);
        assert!(e.contains("`sub/out.txt` is in the workspace"), "{e}");
        p.filesystem.workspace = WorkspaceAccess::ReadOnly;
        let e = explain_path(&scene(&p), "out.txt", Operation::Write);
        assert!(e.contains("filesystem.workspace = \"read_write\""), "{e}");
        p.filesystem.workspace_writable = vec!["sub".into()];
        let e = explain_path(&scene(&p), "out.txt", Operation::Write);
        assert!(e.contains("`sub/out.txt` is in the workspace"), "{e}");
    }

    #[test]
    fn protected_paths_read_only_for_commands_say_so() {
        let p = Policy::builtin_default();
        let s = Scene {
            protected_for_commands: true,
            ..scene(&p)
        };
        let e = explain_path(&s, "../.git/hooks/pre-commit", Operation::Write);
        assert!(e.contains("read-only for commands"), "{e}");
        assert!(
            e.contains("remove `.git/hooks` from filesystem.protected"),
            "{e}"
        );
    }

    #[test]
    fn ports_blocked_by_network_off_or_missing_from_the_list() {
        let mut p = Policy::builtin_default();
        // default: network off in a namespace of its own, where loopback is the call's.
        let e = explain_port(&p, 8080, NetOperation::Connect);
        assert!(e.contains("own network namespace"), "{e}");
        assert!(e.contains("network.allow_hosts"), "{e}");
        // A server an earlier call left running with `&` is gone: the way to keep one is a job.
        assert!(e.contains("\"background\": true"), "{e}");
        let e = explain_port(&p, 8080, NetOperation::Bind);
        assert!(e.contains("not restricted"), "{e}");
        // Network off with a custom profile: no namespace of its own, ports decide.
        p.sandbox.seccomp_profile = "/etc/cordon/profile.json".into();
        let e = explain_port(&p, 8080, NetOperation::Connect);
        assert!(e.contains("network is off"), "{e}");
        assert!(e.contains("add 8080 to network.tcp_connect"), "{e}");
        assert!(e.contains("seccomp_profile = \"tcp\""), "{e}");
        p.network.tcp_connect = vec![443];
        p.sandbox.seccomp_profile = "tcp".into();
        let e = explain_port(&p, 8080, NetOperation::Connect);
        assert!(e.contains("allows only [443]"), "{e}");
        let e = explain_port(&p, 443, NetOperation::Connect);
        assert!(e.contains("did not stop"), "{e}");
        let e = explain_port(&p, 3000, NetOperation::Bind);
        assert!(e.contains("network.tcp_bind"), "{e}");
    }

    #[test]
    fn stderr_explanations_are_labeled() {
        let p = Policy::builtin_default();
        let e = explain_stderr(&scene(&p), "cat: /srv/x: Permission denied\n").unwrap();
        assert!(e.starts_with("[explanation derived from the policy"), "{e}");
        assert!(e.contains("not from a kernel log"), "{e}");
        assert_eq!(explain_stderr(&scene(&p), "boom\n"), None);
    }

    #[test]
    fn direct_connects_under_the_proxy_point_at_the_proxy() {
        let p = Policy::load("dev").unwrap();
        let e = explain_port(&p, 443, NetOperation::Connect);
        assert!(e.contains("egress proxy"), "{e}");
        assert!(e.contains("network.allow_hosts"), "{e}");
    }
}
