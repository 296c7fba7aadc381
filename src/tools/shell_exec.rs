//! `shell_exec`: one shell command, confined, with its output shaped for a model.
//!
//! Owns the argument contract and the result; a call goes args → [`decide`] (the command
//! rules' verdict, `prepare`'s checks, a person's answer through an [`Approver`]) → `run`
//! (a slot, the command in the foreground or as a `background` job) → shape (the streams cut,
//! and why it failed: `failure`). How the user is asked is the server's (it knows MCP);
//! running and killing the process is `exec`; truncation and spill are `shape`; what a
//! permission error means under the policy is `policy::explain`.

use super::Tool;
use crate::audit::Outcome;
use crate::confine::EnforcementLevel;
use crate::exec::LimitHit;
use crate::policy::explain;
use crate::runtime::Session;
use crate::shape::ToolError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub(crate) mod background;
mod decide;
mod failure;
mod prepare;
mod run;

pub(crate) use decide::{
    Answer, Approval, Approver, Decided, Overrule, Refusal, decide, refusal_error,
};

#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellExecArgs {
    /// Command line, run as `/bin/sh -c COMMAND` inside the sandbox.
    #[schemars(length(min = 1))]
    pub command: String,
    /// Directory to run in, relative to the workspace root.
    #[serde(default = "dot")]
    pub cwd: String,
    /// Wall-clock limit in seconds; the whole process tree is killed when it is reached.
    /// Default and maximum come from the policy.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_secs: Option<u64>,
    /// Text written to the command's standard input (closed after it); default: no input.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Environment variables set for this command, over the sandbox's scrubbed environment.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Keep the command running after this call returns, as a job (dev servers, watchers,
    /// REPLs): the call answers after `wait_secs` with the output so far and `job`; read and
    /// drive it with the `job` tool. Confined and bounded like any call; it ends at the
    /// policy's `[jobs]` bounds or when this session ends.
    #[serde(default)]
    pub background: bool,
    /// Run under a terminal (for programs that need a tty: REPLs, prompts, `git add -p`).
    /// Its output is one stream (in `stdout`); colours are removed from the text and kept in
    /// the spill file.
    #[serde(default)]
    pub pty: bool,
    /// Terminal width with `pty` (default 120).
    #[serde(default)]
    #[schemars(range(min = 20, max = 1000))]
    pub cols: Option<u16>,
    /// Terminal height with `pty` (default 40).
    #[serde(default)]
    #[schemars(range(min = 5, max = 500))]
    pub rows: Option<u16>,
    /// With `background`: seconds to wait before answering (earlier if the job exits);
    /// default 1.
    #[serde(default)]
    #[schemars(range(min = 0, max = 30))]
    pub wait_secs: Option<u64>,
    /// With `background`: a regular expression; answer as soon as the output matches it
    /// (readiness, e.g. "Listening on|ready in"). Without it, the answer comes once the
    /// output has been quiet for a moment (~200 ms), or after `wait_secs`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 1000))]
    pub until: Option<String>,
}

/// Default terminal size of `pty`.
pub(crate) const DEFAULT_COLS: u16 = 120;
pub(crate) const DEFAULT_ROWS: u16 = 40;

fn dot() -> String {
    ".".into()
}

#[derive(Debug, Default, Serialize, JsonSchema)]
pub(crate) struct ShellExecOutput {
    /// The checkpoint that restores the workspace to before this call (`checkpoint` tool),
    /// or null when the call changed nothing.
    pub checkpoint: Option<String>,
    /// Exit status; null when the command was killed by a signal.
    pub exit_code: Option<i32>,
    /// Name of the signal that killed the command (e.g. "SIGKILL"), or null.
    pub signal: Option<String>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    /// True when stdout or stderr was cut to its head and tail.
    pub truncated: bool,
    /// Workspace-relative path of the complete output when it was cut (or was not valid
    /// UTF-8: the file keeps the exact bytes), else null.
    pub full_output: Option<String>,
    pub duration_ms: u64,
    /// The limit that stopped the command, with the evidence, or null.
    pub limit: Option<LimitHit>,
    /// Enforcement in force for this call.
    pub enforcement: EnforcementLevel,
    /// Under a proxy-mode policy: every connection the command made through cordon's egress
    /// proxy (host, port, allowed, bytes each way, duration), and each refusal in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::egress::NetworkReport>,
    /// With `background`: the job the command keeps running as (read it with the `job`
    /// tool), or null.
    pub job: Option<super::job_answer::JobInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// A failed call's denials, each with the policy field that governs it and where its
    /// explanation comes from (`source`: "kernel" = the kernel's Landlock audit record for
    /// this call, "error_message" = derived from stderr); the ones the output names first.
    /// Left out when there are none, and for a successful call.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub denials: Vec<explain::Denial>,
    /// Terminal escape sequences and control characters removed from `stdout` and `stderr`
    /// (the spill file and a job's log keep the exact bytes); 0 when the policy keeps them.
    pub control_chars_removed: u64,
    /// The git changes cordon refused to import (its own sentences about refs and paths),
    /// for the audit record; the result says them in `error` and stderr.
    #[serde(skip)]
    pub git_refusals: Vec<String>,
}

/// The output of a call that ran nothing: the error in an otherwise default output.
fn nothing_ran(ctx: &Session, error: ToolError) -> ShellExecOutput {
    ShellExecOutput {
        checkpoint: None,
        enforcement: ctx.runtime.enforcement_level(),
        error: Some(error),
        ..Default::default()
    }
}

/// The tool as the shared skeleton sees it.
pub(crate) struct ShellExec;

impl Tool for ShellExec {
    const NAME: &'static str = "shell_exec";
    type Args = ShellExecArgs;
    type Output = ShellExecOutput;

    fn failed(ctx: &Session, _args: &ShellExecArgs, error: ToolError) -> ShellExecOutput {
        nothing_ran(ctx, error)
    }

    /// The denials the kernel reported for this call: each is a refusal of its path or port.
    fn refusals(output: &ShellExecOutput) -> Vec<crate::breaker::Group> {
        output
            .denials
            .iter()
            .filter(|d| d.source == explain::DenialSource::Kernel)
            .map(|d| crate::breaker::Group::Kernel {
                field: d.policy_field.clone(),
                target: d
                    .path
                    .clone()
                    .or_else(|| d.port.map(|p| format!("port {p}")))
                    .unwrap_or_default(),
            })
            .collect()
    }

    fn set_checkpoint(output: &mut ShellExecOutput, id: Option<String>) {
        output.checkpoint = id;
    }

    fn audit(output: &ShellExecOutput, _is_error: bool) -> Outcome {
        Outcome::Shell {
            error: output.error.as_ref().map(|e| e.kind),
            exit_code: output.exit_code,
            limit: output.limit.as_ref().map(|l| l.kind),
            signal: output.signal.clone(),
            timed_out: output.timed_out,
            network: output.network.clone(),
            git_refused: output.git_refusals.clone(),
        }
    }
}
