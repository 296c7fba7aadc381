//! The server's `instructions`: what an agent needs to know before its first call — where the
//! workspace is, how paths work, and what the policy allows — in one short text.

use crate::runtime::Session;

/// The instructions of a server whose calls run in `ctx`'s workspace.
pub(super) fn render(ctx: &Session) -> String {
    let workspace = format!("Workspace: {}.", ctx.runtime.workspace.root().display());
    render_with(ctx, &workspace)
}

/// The instructions of a server that gives each authenticated subject its own workspace
/// (`serve --workspaces`): `ctx` is the template's, whose directory no call ever sees.
pub(super) fn render_per_subject(ctx: &Session) -> String {
    let mut workspace = "Workspace: your own, private to your credentials (this server gives \
                         each authenticated user one)."
        .to_owned();
    if !ctx.runtime.policy.server.http.group_policies.is_empty() {
        workspace.push_str(" Your group may select another policy than the one below.");
    }
    render_with(ctx, &workspace)
}

fn render_with(ctx: &Session, workspace: &str) -> String {
    let p = &ctx.runtime.policy;
    let l = &p.limits;
    let network = if let Some(rules) = &p.network.proxy {
        let hosts: Vec<String> = rules
            .allow_hosts
            .iter()
            .map(|h| h.pattern.to_string())
            .collect();
        if ctx.runtime.confinement.egress().is_none() {
            "no network access (this policy's egress proxy needs namespaces this host lacks)"
                .to_owned()
        } else if hosts.is_empty() {
            "no network access: the policy's egress proxy allows no host yet (the operator adds \
             them to [network].allow_hosts)"
                .to_owned()
        } else {
            format!(
                "network only through the egress proxy that HTTP_PROXY/HTTPS_PROXY point at, to \
                 these hosts: {} (no port = 80 and 443); refused connections are listed in a \
                 result's network.refused",
                hosts.join(", ")
            )
        }
    } else if p.network.is_off() {
        "no network access (no TCP, UDP or DNS)".to_owned()
    } else {
        format!(
            "TCP connect allowed only to ports {:?} (bind: {:?}); no UDP",
            p.network.tcp_connect, p.network.tcp_bind
        )
    };
    format!(
        "cordon runs your commands and file edits in a sandbox.\n\
         {workspace} Every path argument is relative to it (an absolute path inside it is \
         accepted); paths leading outside it are refused.\n\
         Policy `{name}` ({enforcement}): workspace {access}, system paths read-only, {network}. \
         Each shell command gets {timeout}s by default (at most {max}s), {mem} MiB of memory, \
         {pids} processes and its own TMPDIR; everything it starts is killed when the call ends, \
         so start servers and watch jobs within one command.\n\
         Prefer read_file/write_file/edit_file over shell redirection for files: they are exact \
         and return lint diagnostics. Long command output is cut to head and tail with the full \
         text saved under .cordon/outputs/ (read it with read_file or grep; the result also links it \
         as a resource). Terminal escape sequences are removed from command output.\n\
         code_interpreter keeps Python state per `session` between calls (up to {sessions} \
         sessions, {imem} MiB each, ended after {idle}s unused); a cell past its timeout is \
         interrupted, and if it will not stop the session restarts and its state is lost.",
        name = p.name,
        enforcement = ctx.runtime.executor.confinement().enforcement().summary(),
        access = match p.filesystem.workspace {
            crate::policy::WorkspaceAccess::ReadWrite => "read-write",
            crate::policy::WorkspaceAccess::ReadOnly => "read-only",
        },
        timeout = l.timeout.as_secs(),
        max = l.max_timeout.as_secs(),
        mem = l.memory_bytes >> 20,
        pids = l.pids,
        sessions = p.interpreter.max_sessions,
        imem = p.interpreter.memory_bytes >> 20,
        idle = p.interpreter.idle_timeout.as_secs(),
    )
}
