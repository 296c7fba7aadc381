//! A long-lived confined child: spawned under the same confinement as `Executor::run`, but
//! handed back alive with its pipes, for callers that talk to it over many requests (the
//! interpreter sessions).
//!
//! Owns the spawn and the end of the worker's tree: its cgroup lives as long as the worker,
//! and `terminate` (or dropping the worker) kills everything it started. It does not own what
//! is said over the pipes (that is the caller's protocol) nor any timeout: a worker has no
//! deadline of its own.

use super::process::{Pipes, Process};
use super::{ExecError, Executor, KILL_WAIT, kill_tree};
use crate::confine::{CallCgroup, CallLimits, LimitHits};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::unix::pipe;

/// One worker to start.
pub struct WorkerSpec {
    /// What to run (in the workspace root unless `program.cwd` says otherwise).
    pub program: super::Program,
    /// The worker's own directory, its only read-write grant besides the workspace (and the
    /// policy's `read_write` list). `home` below it becomes HOME and TMPDIR. Must lie below
    /// `Confinement::private_root()`, which is what the sandbox's view holds.
    pub private_dir: PathBuf,
    /// Quotas of the worker's cgroup, for the worker's whole life.
    pub limits: CallLimits,
    /// RLIMIT_CPU of the worker, replacing the policy's per-call value: a session lives much
    /// longer than one command.
    pub cpu_seconds: Option<u64>,
    /// Descriptors the worker starts with besides stdio, each at the given number (3 or
    /// more); when any are given, every other descriptor ≥ 3 is closed in the worker. The
    /// server's copies are not affected: what it keeps of them it keeps.
    pub pass_fds: Vec<(i32, OwnedFd)>,
    /// The worker runs the agent's code (an interpreter session), not only cordon's own (the
    /// parser): it counts as a running process of its view for the git import
    /// (`git::Repositories::hold`) for its whole life.
    pub runs_agent_code: bool,
}

/// A running confined worker. Dropping it kills its whole tree (the child is `kill_on_drop`
/// and the cgroup kills its members when dropped).
pub struct ConfinedWorker {
    child: Process,
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
    cgroup: Option<CallCgroup>,
    pid: Option<u32>,
    /// The worker's registration with the egress proxy (proxy-mode policies), for its life.
    egress: Option<crate::egress::CallTicket>,
    /// Counted as running in its view, for its life (see `WorkerSpec::runs_agent_code`).
    git_hold: Option<crate::git::ViewHold>,
    /// The init the worker was born in, kept up for the worker's life (declared last: the
    /// worker's process and cgroup go first).
    sandbox_init: Option<Arc<crate::confine::SandboxInit>>,
}

/// How a worker ended.
#[derive(Debug, Default)]
pub struct WorkerEnd {
    pub status: Option<ExitStatus>,
    pub hits: LimitHits,
}

impl Executor {
    /// Starts a confined worker and returns it running: the one launch
    /// (`launch::LaunchKind::Worker`), in a slot made for it with the spec's limits and
    /// private directory, or forked with a private Landlock ruleset.
    ///
    /// Call it from an async task, not from `spawn_blocking`: the parent-death signal is tied
    /// to the thread that forks, and blocking-pool threads exit when idle.
    pub fn spawn_worker(&self, spec: WorkerSpec) -> Result<ConfinedWorker, ExecError> {
        let runs_agent_code = spec.runs_agent_code;
        let mut launched = self.launch_blocking(super::launch::LaunchSpec {
            program: spec.program,
            piped_stdin: true,
            cpu_seconds: spec.cpu_seconds,
            kind: super::launch::LaunchKind::Worker {
                private_dir: spec.private_dir,
                limits: spec.limits,
                pass_fds: spec.pass_fds,
            },
        })?;
        let git_hold = launched.git_hold.take().filter(|_| runs_agent_code);
        let mut worker = ConfinedWorker::new(launched.child, launched.pipes, launched.cgroup);
        worker.git_hold = git_hold;
        worker.egress = launched.egress;
        worker.sandbox_init = launched.sandbox_init;
        Ok(worker)
    }
}

impl ConfinedWorker {
    fn new(child: Process, pipes: Pipes, cgroup: Option<CallCgroup>) -> Self {
        Self {
            pid: child.id(),
            stdin: pipes.stdin,
            stdout: pipes.stdout,
            stderr: pipes.stderr,
            child,
            cgroup,
            egress: None,
            git_hold: None,
            sandbox_init: None,
        }
    }

    /// What the worker's connections through the egress proxy did since the last call
    /// (None when the policy does not use the proxy).
    pub async fn network(&self) -> Option<crate::egress::NetworkReport> {
        match &self.egress {
            Some(ticket) => Some(ticket.settled().await),
            None => None,
        }
    }

    /// The worker's pid (also its process group: the child starts its own session).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Whose open files are the worker's, for a disk budget over its work (interpreter cells).
    pub fn holders(&self) -> super::disk_held::Holders {
        super::disk_held::Holders::of(self.cgroup.as_ref(), self.pid)
    }

    /// Sends SIGINT to the worker's main process only (not its group): the interpreter turns
    /// it into KeyboardInterrupt, while its subprocesses are left to the caller's decision.
    pub fn interrupt(&self) -> bool {
        self.child.signal(rustix::process::Signal::INT)
    }

    /// The exit status, if the main process has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait()
    }

    /// Which cgroup limits the worker's tree has run into so far.
    pub fn limit_hits(&self) -> LimitHits {
        self.cgroup
            .as_ref()
            .map(CallCgroup::limit_hits)
            .unwrap_or_default()
    }

    /// Kills every process of the worker's tree except the worker itself (what a request left
    /// running in the background) and returns how many it killed. Membership comes from the
    /// worker's cgroup; without one, from its process group, which a process that called
    /// `setsid` has left and so is out of reach here (it still dies with the worker).
    pub async fn kill_background(&self) -> usize {
        let Some(main) = self.pid.map(|p| p as i32) else {
            return 0;
        };
        let mut killed = std::collections::HashSet::new();
        let deadline = tokio::time::Instant::now() + KILL_WAIT;
        loop {
            let others: Vec<i32> = match self.cgroup.as_ref().and_then(CallCgroup::member_pids) {
                Some(pids) => pids,
                None => process_group_members(main),
            }
            .into_iter()
            .filter(|&p| p != main && !crate::confine::sandbox_init::is_job_main(p, main))
            .collect();
            // Done when the killed ones are gone too (exited processes are not listed), so
            // none of them still writes when the caller reads the request's output.
            if others.is_empty() || tokio::time::Instant::now() >= deadline {
                return killed.len();
            }
            for pid in others {
                if !killed.contains(&pid)
                    && let Some(p) = rustix::process::Pid::from_raw(pid)
                    && rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok()
                {
                    killed.insert(pid);
                }
            }
            // A member may have forked between the read and the kill: look again.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits up to `wait` for the main process to exit by itself.
    pub async fn wait_for_exit(&mut self, wait: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(wait, self.child.wait())
            .await
            .ok()
            .flatten()
    }

    /// Kills the whole tree, reaps the main process and removes the cgroup.
    pub async fn terminate(mut self) -> WorkerEnd {
        // Closing the pipes first lets a worker blocked on them see EOF; it dies either way.
        drop((self.stdin.take(), self.stdout.take(), self.stderr.take()));
        let hits = self.limit_hits();
        let cgroup = kill_tree(self.cgroup.take(), self.pid, false).await;
        // Awaited, never `try_wait`: right after the kill the process is gone but its report
        // may still be on its way, and `try_wait` would sleep for it on a runtime thread.
        let status = tokio::time::timeout(KILL_WAIT, self.child.wait())
            .await
            .ok()
            .flatten();
        if let Some(cg) = cgroup {
            // Removing the group may wait for the last members to go; keep it off the runtime.
            let _ = tokio::task::spawn_blocking(move || drop(cg)).await;
        }
        WorkerEnd { status, hits }
    }
}

/// Live processes whose process group is `pgid` (read from /proc, which the kernel writes).
fn process_group_members(pgid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // After the command name (which may hold anything): state, ppid, pgrp.
            let Some((_, rest)) = stat.rsplit_once(") ") else {
                return false;
            };
            let mut fields = rest.split(' ');
            let state = fields.next();
            let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
            state != Some("Z") && pgrp == Some(pgid)
        })
        .collect()
}
