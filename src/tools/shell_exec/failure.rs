//! Why a `shell_exec` call failed, in words a model can act on: cordon stopped it (timeout,
//! a limit, cancellation, a refused git change), the egress proxy refused a connection, or
//! the sandbox denied something: the kernel's Landlock records of this call where the server
//! reads them (those the output names first), else what stderr suggests, with the policy
//! field that governs each (`policy::explain`).

use super::ShellExec;
use crate::exec::ExecOutcome;
use crate::policy::explain;
use crate::shape::{ErrorKind, ToolError};
use crate::tools::Tool;

/// A failed call's denials: the kernel's record of them where the server reads it, else what
/// its stderr suggests. A successful call lists none: programs probe paths they can do without
/// (every `bash` tries `/dev/tty`), and the call did what it was asked.
pub(super) fn call_denials(o: &ExecOutcome, scene: &explain::Scene<'_>) -> Vec<explain::Denial> {
    if o.success() {
        return Vec::new();
    }
    if let Some(kernel) = &o.kernel_denials
        && !kernel.denials.is_empty()
    {
        // What the output names first: the likely cause leads (the sort is stable).
        let output = call_output(o);
        let mut ordered = kernel.denials.clone();
        ordered.sort_by_key(|d| !mentioned(d.path.as_deref(), d.port, &output));
        return explain::explain_kernel(scene, &ordered);
    }
    let mut denials = explain::message_denials(scene, &stderr_text(o));
    denials.truncate(explain::MAX_DENIALS_SHOWN);
    denials
}

/// Both streams as far as they were kept (head and tail), for finding what they name.
fn call_output(o: &ExecOutcome) -> String {
    let mut text = stderr_text(o);
    for part in [&o.stdout.head, &o.stdout.tail] {
        text.push('\n');
        text.push_str(&String::from_utf8_lossy(part));
    }
    text
}

/// Whether `output` names the path (or a file in the directory) or the port of a denial.
fn mentioned(path: Option<&str>, port: Option<u16>, output: &str) -> bool {
    if let Some(path) = path
        && path.len() > 1
        && output.contains(path)
    {
        return true;
    }
    port.is_some_and(|p| output.contains(&format!(":{p}")) || output.contains(&format!("port {p}")))
}

fn stderr_text(o: &ExecOutcome) -> String {
    let mut stderr = String::from_utf8_lossy(&o.stderr.head).into_owned();
    stderr.push('\n');
    stderr.push_str(&String::from_utf8_lossy(&o.stderr.tail));
    stderr
}

pub(super) fn outcome_error(
    o: &ExecOutcome,
    scene: &explain::Scene<'_>,
    denials: &[explain::Denial],
) -> Option<ToolError> {
    if let Some(error) = stopped_by_cordon(o) {
        return Some(error);
    }
    if o.success() {
        return None;
    }
    let mut message = o.reason().unwrap_or_else(|| "the command failed".into());
    // A refused connection is the likeliest cause of a network client's failure: say it
    // first, in the proxy's words (they name the policy line to change).
    if let Some(refused) = o.network.as_ref().and_then(|n| n.refused.first()) {
        message.push_str(&format!(
            "; the egress proxy refused a connection: {refused}"
        ));
        return Some(ToolError {
            kind: ErrorKind::ExitStatus,
            message,
            retriable: false,
        });
    }
    let stderr = stderr_text(o);
    let kernel: Vec<&explain::Denial> = denials
        .iter()
        .filter(|d| d.source == explain::DenialSource::Kernel)
        .collect();
    if kernel.is_empty() {
        explain_without_kernel_denials(&mut message, o, scene, &stderr);
    } else {
        let shown = explain_kernel_denials(&mut message, o, scene, &kernel, &stderr);
        if let Some(k) = &o.kernel_denials {
            note_unlisted_denials(&mut message, k, shown);
        }
    }
    if let Some(tracing) = explain::explain_tracing(scene.policy, &stderr) {
        message.push_str("; ");
        message.push_str(&tracing);
    }
    Some(ToolError {
        kind: ErrorKind::ExitStatus,
        message,
        retriable: false,
    })
}

/// The command did not end on its own terms: cordon stopped it (timeout, a limit, the
/// call's cancellation) or refused the git change it left.
fn stopped_by_cordon(o: &ExecOutcome) -> Option<ToolError> {
    if o.timed_out {
        return Some(ToolError::new(
            ErrorKind::Timeout,
            format!(
                "the command ran longer than its timeout and was killed with everything it started \
                 ({:.1}s); pass a larger timeout_secs, or run long jobs in smaller steps",
                o.duration.as_secs_f64()
            ),
        ));
    }
    if let Some(hit) = &o.limit {
        return Some(ToolError {
            kind: ErrorKind::ResourceLimit,
            message: format!(
                "the command was stopped by the sandbox's {} ({}); reduce what it uses, or ask \
                 the operator to raise the policy's limit",
                hit.kind.describe(),
                hit.evidence
            ),
            retriable: false,
        });
    }
    if o.cancelled {
        return Some(ToolError::new(
            ErrorKind::Internal,
            "the call was cancelled; the command and everything it started were killed",
        ));
    }
    if o.git_refused {
        // What git would have read outside the sandbox was moved away: the command's own
        // exit status says nothing about whether its git change took effect.
        crate::breaker::report(ShellExec::NAME, crate::breaker::Group::Git);
        let status = match o.reason() {
            Some(reason) => format!("the command {reason}"),
            None => "the command exited 0".to_owned(),
        };
        return Some(ToolError::new(
            ErrorKind::Denied,
            format!(
                "{status}, but cordon refused a git change it left: {} (details in stderr, \
                 marked [cordon]). Do not retry it in another form; if the change is needed, \
                 ask the operator to make it on the host, outside cordon",
                o.notices
                    .first()
                    .map(String::as_str)
                    .unwrap_or("see stderr")
            ),
        ));
    }
    None
}

/// Adds the kernel's Landlock denials of this call to a failure's message: those the output
/// names (the likely cause), else the stderr's explanation, else the first few. Returns how
/// many denials the message shows.
fn explain_kernel_denials(
    message: &mut String,
    o: &ExecOutcome,
    scene: &explain::Scene<'_>,
    kernel: &[&explain::Denial],
    stderr: &str,
) -> usize {
    // A denial the output names is the likely cause; others (a program probing
    // `/dev/tty` or a config file it can do without) may have nothing to do with it.
    let output = call_output(o);
    let named: Vec<&str> = kernel
        .iter()
        .filter(|d| mentioned(d.path.as_deref(), d.port, &output))
        .map(|d| d.explanation.as_str())
        .take(3)
        .collect();
    if !named.is_empty() {
        message.push_str(&format!(
            "; [from the kernel's Landlock audit record for this call] {}",
            named.join(" ")
        ));
        named.len()
    } else if let Some(explanation) = explain::explain_stderr(scene, stderr) {
        message.push_str("; ");
        message.push_str(&explanation);
        message.push_str(
            " (The kernel's audit records of this call show other Landlock denials, which \
             the output does not mention: see `denials`.)",
        );
        0
    } else {
        let first: Vec<&str> = kernel
            .iter()
            .map(|d| d.explanation.as_str())
            .take(3)
            .collect();
        message.push_str(&format!(
            "; [from the kernel's Landlock audit record for this call; the output names none \
             of these, so they may not be why it failed] {}",
            first.join(" ")
        ));
        if stderr.contains("Permission denied") || stderr.contains("Operation not permitted") {
            message.push_str(
                " stderr's permission error may also be seccomp refusing a syscall or \
                 socket.",
            );
        }
        first.len()
    }
}

/// How many of the call's kernel denials the message does not show: in `denials`, or not
/// listed at all, and whether the kernel's records may be incomplete.
fn note_unlisted_denials(
    message: &mut String,
    k: &crate::confine::audit::KernelDenials,
    shown: usize,
) {
    let listed = k.denials.len().min(explain::MAX_DENIALS_SHOWN);
    let in_field = listed.saturating_sub(shown);
    let not_listed = (k.denials.len() - listed) as u64 + k.not_kept;
    if in_field > 0 {
        message.push_str(&format!(" ({in_field} more in the result's `denials`)"));
    }
    if not_listed > 0 {
        message.push_str(&format!(
            " ({not_listed} more denied accesses of this call are not listed)"
        ));
    }
    if !k.complete {
        message.push_str(" (the kernel's records of this call may be incomplete)");
    }
}

/// Explains a failure the kernel recorded no Landlock denial for: the stderr's explanation,
/// or whose the permission error it reports may be.
fn explain_without_kernel_denials(
    message: &mut String,
    o: &ExecOutcome,
    scene: &explain::Scene<'_>,
    stderr: &str,
) {
    let kernel_saw_none = o.kernel_denials.as_ref().is_some_and(|k| k.complete);
    if let Some(explanation) = explain::explain_stderr(scene, stderr) {
        message.push_str("; ");
        message.push_str(&explanation);
        if kernel_saw_none {
            message.push_str(
                " (The kernel's audit log has no denial by the sandbox's Landlock rules for this \
                 call, so the error did not come from its file or port rules.)",
            );
        }
    } else if kernel_saw_none
        && (stderr.contains("Permission denied") || stderr.contains("Operation not permitted"))
    {
        message.push_str(
            "; stderr reports a permission error, and the kernel's audit log has no denial by \
             the sandbox's Landlock rules for this call: it came from elsewhere (seccomp \
             refusing a syscall or socket, a read-only mount, or the file's own permissions)",
        );
    } else if stderr.contains("Permission denied") || stderr.contains("Operation not permitted") {
        message.push_str(
            "; stderr reports a permission error, which may be the sandbox refusing a path, \
             socket or syscall outside the policy",
        );
    }
}
