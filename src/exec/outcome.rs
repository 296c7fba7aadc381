//! What a confined call ended as: exit status or signal, timeout, cancellation, and which
//! limit (if any) stopped it, with the evidence for that claim.

use super::capture::Captured;
use crate::confine::{Enforcement, LimitHits};
use serde::Serialize;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    Memory,
    Pids,
    Cpu,
    FileSize,
    OpenFiles,
    WallTime,
    /// The call shrank the free space of a filesystem it can write by more than its budget.
    Disk,
    /// The call made the kernel log denials faster than the audit rate bound.
    Audit,
}

impl LimitKind {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Memory => "memory limit",
            Self::Pids => "process/thread limit",
            Self::Cpu => "CPU time limit",
            Self::FileSize => "file size limit",
            Self::OpenFiles => "open files limit",
            Self::WallTime => "wall-clock timeout",
            Self::Disk => "disk budget",
            Self::Audit => "audit rate limit",
        }
    }
}

/// A limit that was hit, and how we know.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct LimitHit {
    pub kind: LimitKind,
    pub evidence: String,
}

#[derive(Debug)]
pub struct ExecOutcome {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub limit: Option<LimitHit>,
    pub stdout: Captured,
    pub stderr: Captured,
    pub duration: Duration,
    /// A process the call could not kill (it left the process group and there is no cgroup)
    /// still held an output pipe, so reading stopped at the drain bound; anything it wrote
    /// later is not in the output.
    pub output_cut_short: bool,
    pub enforcement: Enforcement,
    /// What cordon did about the call that the agent should know (e.g. a git change of the
    /// call's that was not imported into the operator's repository, and why).
    pub notices: Vec<String>,
    /// cordon refused to import the call's git changes into the operator's repository (see
    /// `crate::git`): the call's result is a `denied` error, never exit 0.
    pub git_refused: bool,
    /// What the call did through the egress proxy (proxy-mode policies only).
    pub network: Option<crate::egress::NetworkReport>,
    /// The call's Landlock denials as the kernel's audit records tell them, where the server
    /// reads them (root, Landlock ABI 7, audit); None elsewhere.
    pub kernel_denials: Option<crate::confine::audit::KernelDenials>,
    /// Processes the command left running when it ended by itself (`cmd &`, a daemon), which
    /// ended with the call (where the sandbox init counts them; 0 elsewhere).
    pub leftovers_ended: u32,
    /// How long each step of the call's path took (`cordon doctor --bench` reports them).
    pub steps: super::steps::CallSteps,
}

impl ExecOutcome {
    /// What to tell the agent when the call ended processes it left running, if it did.
    pub fn leftovers_notice(&self) -> Option<String> {
        let n = self.leftovers_ended;
        (n > 0).then(|| {
            let what = if n == 1 { "process" } else { "processes" };
            format!(
                "{n} {what} the command left running (started with `&`, or as a daemon) ended \
                 with the call: nothing a call starts outlives it. To keep a server or watcher \
                 running, start it with shell_exec {{\"background\": true}} and read or stop \
                 it with the job tool."
            )
        })
    }

    pub fn signal_name(&self) -> Option<String> {
        self.signal.map(signal_name)
    }

    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled
    }

    /// The status as a shell would report it: the exit code, or 128 + signal.
    pub fn shell_status(&self) -> i32 {
        match (self.exit_code, self.signal) {
            (Some(code), _) => code,
            (None, Some(sig)) => 128 + sig,
            (None, None) => 1,
        }
    }

    /// One line saying why the call did not simply succeed, or None if it did.
    pub fn reason(&self) -> Option<String> {
        if let Some(hit) = &self.limit {
            return Some(format!(
                "stopped by the {} ({})",
                hit.kind.describe(),
                hit.evidence
            ));
        }
        if self.cancelled {
            return Some("cancelled by the client; the whole process tree was killed".into());
        }
        match (self.exit_code, self.signal_name()) {
            (Some(0), _) => None,
            (Some(code), _) => Some(format!("exited with status {code}")),
            (None, Some(sig)) => Some(format!("killed by {sig}")),
            (None, None) => Some("ended without a status".into()),
        }
    }
}

const SIGXCPU: i32 = libc::SIGXCPU;
const SIGXFSZ: i32 = libc::SIGXFSZ;

/// The limit the kernel's own evidence names, if any: the cgroup's counters (`hits`) first,
/// then the signals the rlimits deliver (`killed_by(signal)`: whether the process died of it).
/// Memory, pids, CPU time or file size; callers word the evidence with their own numbers.
pub(crate) fn kernel_limit(
    hits: Option<&LimitHits>,
    killed_by: impl Fn(i32) -> bool,
) -> Option<LimitKind> {
    if let Some(hits) = hits {
        if hits.memory {
            return Some(LimitKind::Memory);
        }
        if hits.pids {
            return Some(LimitKind::Pids);
        }
    }
    if killed_by(SIGXCPU) {
        return Some(LimitKind::Cpu);
    }
    if killed_by(SIGXFSZ) {
        return Some(LimitKind::FileSize);
    }
    None
}

/// Works out which limit stopped the call. Counters from the kernel first; then signals the
/// rlimits deliver; then, for limits the kernel does not count (open files), the standard
/// error message the C library prints for the errno, said to be inferred.
pub(crate) fn classify_limit(
    timed_out: bool,
    hits: Option<LimitHits>,
    exit_code: Option<i32>,
    signal: Option<i32>,
    stderr: &[u8],
    timeout: Duration,
) -> Option<LimitHit> {
    let hit = |kind, evidence: String| Some(LimitHit { kind, evidence });
    if timed_out {
        return hit(
            LimitKind::WallTime,
            format!("ran longer than {}s", timeout.as_secs()),
        );
    }
    let by = |sig: i32| signal == Some(sig) || exit_code == Some(128 + sig);
    if let Some(kind) = kernel_limit(hits.as_ref(), by) {
        let evidence = match kind {
            LimitKind::Memory => "the cgroup's OOM killer fired",
            LimitKind::Pids => "the cgroup refused a fork (pids.max reached)",
            LimitKind::Cpu => "SIGXCPU from RLIMIT_CPU",
            _ => "SIGXFSZ from RLIMIT_FSIZE",
        };
        return hit(kind, evidence.into());
    }
    let says = |needle: &str| stderr.windows(needle.len()).any(|w| w == needle.as_bytes());
    if exit_code != Some(0) && says("Too many open files") {
        return hit(
            LimitKind::OpenFiles,
            "inferred: stderr reports EMFILE (\"Too many open files\")".into(),
        );
    }
    // Without cgroup counters (reduced enforcement) the rlimit fallbacks only show up as the
    // C library's messages for EAGAIN on fork and ENOMEM.
    if hits.is_none() && exit_code != Some(0) {
        if says("Cannot fork") || says("fork: Resource temporarily unavailable") {
            return hit(
                LimitKind::Pids,
                "inferred: stderr reports a refused fork (RLIMIT_NPROC, no cgroup here)".into(),
            );
        }
        if [
            "Cannot allocate memory",
            "memory exhausted",
            "MemoryError",
            "out of memory",
        ]
        .iter()
        .any(|m| says(m))
        {
            return hit(
                LimitKind::Memory,
                "inferred: stderr reports ENOMEM (RLIMIT_AS, no cgroup here)".into(),
            );
        }
    }
    None
}

pub(crate) fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_owned()
}
