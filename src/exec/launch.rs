//! Starting one confined process — a call, a background job or a long-lived worker — and the
//! work after a call or job ends.
//!
//! Owns the one way a confined tree is born ([`LaunchKind`] says which of the three): a slot
//! of the sandbox init (warm for calls and jobs, made for a worker with its own limits and
//! private directory), or a child the server forks itself where namespaces cannot be had; the
//! TMPDIR or private home, environment, egress ticket, rlimits and disk watch come with it.
//! And the one way a call's or job's tree is buried ([`Launched::finish`]: the tree killed
//! through its cgroup, limit hits and CPU read, the proxy's report, the git check, the
//! directories removed and the next slot prepared off the answer's path). `Executor::run`
//! waits for a call between the two; `jobs` keeps a job running between them for as long as
//! its policy allows; `worker` hands a worker back alive. It does not own capture, timeouts
//! or how a result is shown.

use super::process::{self, Pipes, Process};
use super::{
    ExecError, Executor, Program, kill_tree, open_workspace_root, relative_cwd, spawn_confined,
};
use crate::confine::sandbox_init::wire::PtySize;
use crate::confine::{CallCgroup, CallLimits, LimitHits, SandboxInit, WarmSlot};
use crate::workspace::GuardReport;
use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Instant;

/// What to start.
pub struct LaunchSpec {
    pub program: Program,
    /// A pipe to the process's stdin (else /dev/null).
    pub piped_stdin: bool,
    /// RLIMIT_CPU in seconds instead of the policy's per-call value (a job lives far longer
    /// than one command).
    pub cpu_seconds: Option<u64>,
    pub kind: LaunchKind,
}

/// Which of the three confined processes to start.
pub enum LaunchKind {
    /// A call or a background job: the policy's per-call limits and a TMPDIR of its own.
    Call,
    /// A long-lived worker (an interpreter session, the parser worker): its own cgroup
    /// limits for its whole life, its private directory as the one extra grant (`home` below
    /// it is HOME and TMPDIR), and descriptors placed at the given numbers (3 or more).
    Worker {
        private_dir: PathBuf,
        limits: CallLimits,
        pass_fds: Vec<(i32, OwnedFd)>,
    },
}

/// A running confined process with everything that ends with it.
pub struct Launched {
    pub child: Process,
    pub pipes: Pipes,
    pub cgroup: Option<CallCgroup>,
    /// The call's registration with the egress proxy (proxy-mode policies).
    pub egress: Option<crate::egress::CallTicket>,
    /// The per-call disk budget's watch, when the filesystems can be measured.
    pub disk: Option<Arc<super::disk::DiskWatch>>,
    pub started: Instant,
    /// When the slot was in hand and when the program ran (see `super::steps`).
    pub marks: super::steps::Marks,
    /// The process group (and pid) in the server's namespace, while it runs.
    pub pgid: Option<u32>,
    /// The call's TMPDIR (None for a worker, whose home is in its private directory).
    tmp: Option<crate::confine::scratch::RemovedOnDrop>,
    /// This process counted as running in its view (`git::Repositories::hold`), until its tree
    /// is dead.
    pub(super) git_hold: Option<crate::git::ViewHold>,
    /// The init the process was born in, kept up for its life (declared last).
    pub(super) sandbox_init: Option<Arc<SandboxInit>>,
}

impl Launched {
    /// Starts importing what the workspace's calls' git wrote so far into the operator's
    /// repository (a job, while it runs): the verified import every call's end runs
    /// (`crate::git`), on the blocking pool, so the job's supervisor keeps answering signals
    /// and stops while a large import runs. None without a sandbox init (no shadow gitdir).
    pub fn start_git_import(&self) -> Option<tokio::task::JoinHandle<GuardReport>> {
        let sandbox_init = Arc::clone(self.sandbox_init.as_ref()?);
        Some(tokio::task::spawn_blocking(move || {
            sandbox_init.import_for_job()
        }))
    }
}

/// What is known once the tree is dead.
pub struct Finished {
    pub status: Option<ExitStatus>,
    pub hits: Option<LimitHits>,
    pub network: Option<crate::egress::NetworkReport>,
    pub guard: GuardReport,
    /// Processes the main process left running when it ended by itself (ended with the
    /// call), where the sandbox init counts them.
    pub leftovers: Option<u32>,
}

/// How long a call's end waits for its reaper's count of what it left running, after its tree
/// is gone (the report is sent when the reaper is reaped: normally well under a millisecond).
const LEFTOVERS_REPORT_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

impl Executor {
    /// Starts a call or job `spec` confined: in a warm slot of the sandbox init, or forked by
    /// the server where there is no init. A worker goes through [`Self::launch_blocking`],
    /// which makes the slot with the worker's own limits.
    pub async fn launch(&self, spec: LaunchSpec) -> Result<Launched, ExecError> {
        if matches!(spec.kind, LaunchKind::Worker { .. }) {
            return self.launch_blocking(spec);
        }
        let started = Instant::now();
        let disk = self.watch_disk();
        // Held for the process's life: a replaced init stays up until its last process is done.
        let sandbox_init = self.sandbox_init().await.transpose()?;
        let warm = match &sandbox_init {
            Some(sandbox_init) => Some(self.call_slot(sandbox_init).await?),
            None => None,
        };
        let slot_taken = Instant::now();
        let mut launched = self.start_launched(spec, sandbox_init, warm)?;
        launched.marks = super::steps::Marks {
            started,
            slot_taken,
            running: Instant::now(),
        };
        if let Some(watch) = &disk {
            watch.held_by(launched.holders());
        }
        launched.disk = disk;
        launched.started = started;
        Ok(launched)
    }

    /// Starts `spec` like [`Self::launch`], making its slot on this thread (a worker's, with
    /// its own limits and private directory, or a call's). Blocking. Call it from an async
    /// task, not from `spawn_blocking`: the parent-death signal is tied to the thread that
    /// forks, and blocking-pool threads exit when idle.
    pub(super) fn launch_blocking(&self, spec: LaunchSpec) -> Result<Launched, ExecError> {
        let conf = &self.confinement;
        if let LaunchKind::Worker { private_dir, .. } = &spec.kind {
            // Before its slot is made: the slot's Landlock layer opens the directory.
            std::fs::create_dir_all(private_dir.join("home")).map_err(ExecError::TempDir)?;
        }
        let sandbox_init = conf.sandbox_init().transpose()?;
        let warm = match (&sandbox_init, &spec.kind) {
            (
                Some(f),
                LaunchKind::Worker {
                    private_dir,
                    limits,
                    ..
                },
            ) => Some(conf.make_worker_slot(f, limits, private_dir)?),
            (Some(f), LaunchKind::Call) => Some(conf.make_call_slot(f)?),
            (None, _) => None,
        };
        self.start_launched(spec, sandbox_init, warm)
    }

    /// The launch itself, once the slot (if any) is there: the process's directory, its
    /// environment and proxy ticket, its rlimits, then the start in the slot or the fork.
    fn start_launched(
        &self,
        mut spec: LaunchSpec,
        sandbox_init: Option<Arc<SandboxInit>>,
        mut warm: Option<WarmSlot>,
    ) -> Result<Launched, ExecError> {
        let conf = &self.confinement;
        // What the operator committed or checked out on the host since the last call is in
        // the shadow gitdir before this process starts (a few `lstat`s when nothing moved;
        // what could not be brought over is announced as a server event).
        if let Some(f) = &sandbox_init {
            let _ = f.before_call();
        }
        // Counted as running in this view from before it starts until its tree is dead: a
        // repository's gitdir cordon adopts meanwhile is not written while it could be.
        let git_hold = sandbox_init.as_ref().and_then(|f| f.hold());
        let (tmp, mut env) = match &spec.kind {
            LaunchKind::Call => {
                // The call's TMPDIR: its slot's own directory (no other call's process may
                // enter it), or, on the per-child path, one made now. Removed without
                // recursion when the call is done: the call writes into it, and a deep enough
                // tree overflows `remove_dir_all`'s stack (see `confine::scratch`).
                let tmp = match warm.as_mut().and_then(|w| w.tmp.take()) {
                    Some(tmp) => tmp,
                    None => crate::confine::scratch::RemovedOnDrop::take(
                        tempfile::Builder::new()
                            .prefix("call-")
                            .tempdir_in(conf.tmp_root())
                            .map_err(ExecError::TempDir)?,
                    ),
                };
                let env = self.plan.env.build(tmp.path(), &spec.program.env);
                (Some(tmp), env)
            }
            LaunchKind::Worker { private_dir, .. } => {
                // Made before the slot was (`launch_blocking`).
                let home = private_dir.join("home");
                let mut env = self.plan.env.build(&home, &spec.program.env);
                // A worker's HOME is its own private one, whatever the policy gives commands
                // (the workspace's shared home): no other session or command sees it.
                if !spec.program.env.contains_key("HOME") {
                    env.insert("HOME".into(), home.to_string_lossy().into_owned());
                }
                (None, env)
            }
        };
        // A proxy-mode policy: this process's own proxy URL (its token tells its connections
        // apart from other calls'), set last so it is the one its processes use.
        let egress = conf.egress().map(|proxy| proxy.open_call());
        if let Some(ticket) = &egress {
            env.extend(ticket.env(crate::egress::listen_addr()));
        }
        let (child, pipes, cgroup) = match warm {
            Some(warm) => {
                let (cwd, extra_fds, piped_stdin) = match &mut spec.kind {
                    LaunchKind::Call => (
                        relative_cwd(
                            spec.program.cwd.as_ref(),
                            conf.workspace(),
                            &spec.program.argv,
                        )?,
                        Vec::new(),
                        spec.piped_stdin,
                    ),
                    LaunchKind::Worker { pass_fds, .. } => {
                        (".".into(), std::mem::take(pass_fds), true)
                    }
                };
                let slot_spec = process::SlotSpawn {
                    program: &spec.program,
                    env: &env,
                    cwd,
                    piped_stdin,
                    rlimits: with_cpu_seconds(conf.job_rlimits(), spec.cpu_seconds),
                    extra_fds,
                };
                let (child, pipes) = process::spawn_in_slot(warm.slot, slot_spec)?;
                (child, pipes, warm.cgroup)
            }
            None => self.fork_confined(&mut spec, &env)?,
        };
        drop(spec.program.cwd);
        let pgid = child.id();
        Ok(Launched {
            child,
            pipes,
            cgroup,
            egress,
            disk: None,
            started: Instant::now(),
            marks: super::steps::Marks::new(Instant::now()),
            pgid,
            tmp,
            git_hold,
            sandbox_init,
        })
    }

    /// The per-child path: the server forks the confined child itself.
    fn fork_confined(
        &self,
        spec: &mut LaunchSpec,
        env: &BTreeMap<String, String>,
    ) -> Result<(Process, Pipes, Option<CallCgroup>), ExecError> {
        let conf = &self.confinement;
        // A worker: its own limits, and a ruleset whose one private directory is its own
        // (not the calls' shared temporary root), with its descriptors placed.
        let (cgroup, ruleset, passed) = match &mut spec.kind {
            LaunchKind::Call => (conf.create_call_cgroup()?, None, Vec::new()),
            LaunchKind::Worker {
                private_dir,
                limits,
                pass_fds,
            } => (
                conf.create_cgroup_with(limits)?,
                conf.private_ruleset(private_dir)?,
                fds_above_targets(std::mem::take(pass_fds))?,
            ),
        };
        // The workspace root is the default cwd; an fd keeps it from being swapped
        // underneath, and a missing root is an error, not the server's cwd.
        let root_fd = match spec.program.cwd {
            Some(_) => None,
            None => Some(open_workspace_root(conf.workspace())?),
        };
        let cwd_fd = spec
            .program
            .cwd
            .as_ref()
            .or(root_fd.as_ref())
            .map(AsRawFd::as_raw_fd);
        let mut setup = conf.child_setup(cwd_fd, cgroup.as_ref());
        if let Some(fd) = &ruleset {
            setup.landlock_ruleset_fd = Some(fd.as_raw_fd());
        }
        setup.pass_fds = passed
            .iter()
            .map(|(target, fd)| (*target, fd.as_raw_fd()))
            .collect();
        if let Some(cpu) = spec.cpu_seconds.map(capped_cpu_seconds) {
            let mut rlimits = setup.rlimits.to_vec();
            for (resource, value) in rlimits.iter_mut() {
                if *resource == rustix::process::Resource::Cpu {
                    *value = cpu;
                }
            }
            setup.rlimits = Arc::new(rlimits);
        }
        let spawn_err = |source| ExecError::Spawn {
            program: spec
                .program
                .argv
                .first()
                .map(|a| a.to_string_lossy().into_owned())
                .unwrap_or_default(),
            source,
        };
        let (stdio, master) = match spec.program.pty {
            Some(size) => {
                let (master, terminal) = host_terminal(size).map_err(spawn_err)?;
                setup.controlling_tty = true;
                let copy = |fd: &OwnedFd| fd.try_clone().map(Stdio::from).map_err(spawn_err);
                (
                    [copy(&terminal)?, copy(&terminal)?, copy(&terminal)?],
                    Some(master),
                )
            }
            None => (
                [
                    if spec.piped_stdin || matches!(spec.kind, LaunchKind::Worker { .. }) {
                        Stdio::piped()
                    } else {
                        Stdio::null()
                    },
                    Stdio::piped(),
                    Stdio::piped(),
                ],
                None,
            ),
        };
        let mut child = spawn_confined(&spec.program.argv, env, stdio, setup)?;
        // The ruleset, cwd and passed descriptors were only needed until exec.
        drop((root_fd, ruleset, passed));
        let mut pipes = Pipes::of_child(&mut child);
        pipes.pty = master;
        Ok((Process::Forked(child), pipes, cgroup))
    }
}

/// A terminal of the host's devpts for a job on the per-child path (there is no private one
/// without namespaces): the master for the server, the other side for the child.
fn host_terminal(size: PtySize) -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::pty::OpenptFlags;
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    rustix::termios::tcsetwinsize(
        &master,
        rustix::termios::Winsize {
            ws_row: size.rows,
            ws_col: size.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    let terminal = rustix::pty::ioctl_tiocgptpeer(
        &master,
        OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC,
    )?;
    Ok((master, terminal))
}

/// `cpu` seconds of RLIMIT_CPU, or the server's own hard limit when that is lower: an
/// unprivileged server cannot raise it for a child.
/// Checks the target numbers and makes sure every source descriptor is numbered above every
/// target, so the child can `dup2` them into place in any order without overwriting a source
/// it has yet to place (the child may not allocate, so it cannot shuffle them itself).
fn fds_above_targets(fds: Vec<(i32, OwnedFd)>) -> Result<Vec<(i32, OwnedFd)>, ExecError> {
    let mut seen = std::collections::BTreeSet::new();
    for (target, _) in &fds {
        if *target < 3 || !seen.insert(*target) {
            return Err(ExecError::PassFds(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("descriptor number {target} is below 3 or given twice"),
            )));
        }
    }
    let Some(&floor) = seen.last() else {
        return Ok(fds);
    };
    fds.into_iter()
        .map(|(target, fd)| {
            if fd.as_raw_fd() > floor {
                return Ok((target, fd));
            }
            rustix::io::fcntl_dupfd_cloexec(&fd, floor + 1)
                .map(|high| (target, high))
                .map_err(|e| ExecError::PassFds(e.into()))
        })
        .collect()
}

/// `rlimits` (resource number, value) with RLIMIT_CPU set to `cpu_seconds` (capped) when given.
fn with_cpu_seconds(mut rlimits: Vec<(i32, u64)>, cpu_seconds: Option<u64>) -> Vec<(i32, u64)> {
    if let Some(cpu) = cpu_seconds.map(capped_cpu_seconds) {
        for (resource, value) in rlimits.iter_mut() {
            if *resource == libc::RLIMIT_CPU as i32 {
                *value = cpu;
            }
        }
    }
    rlimits
}

pub(crate) fn capped_cpu_seconds(cpu: u64) -> u64 {
    let hard = rustix::process::getrlimit(rustix::process::Resource::Cpu).maximum;
    hard.map_or(cpu, |h| cpu.min(h))
}

impl Launched {
    /// Whose open files are the call's, for the disk budget: its cgroups' processes, or its
    /// main process (and so its process group's leader) where there are no cgroups.
    pub fn holders(&self) -> super::disk_held::Holders {
        super::disk_held::Holders::of(self.cgroup.as_ref(), self.pgid)
    }

    /// Kills the whole tree (whatever is left of it), collects what the kernel and the proxy
    /// say about it, runs the git check and hands the clean-up to the blocking pool. `status`
    /// is the main process's exit status if it was already seen.
    pub async fn finish(mut self, executor: &Executor, status: Option<ExitStatus>) -> Finished {
        let ended_by_itself = status.is_some();
        // What a main process that ended by itself left running (`cmd &`, a daemon) its
        // slot's reaper kills and reaps, then reports with the count: after that report
        // nothing of the call runs, and the tree's end need not wait for the reaper's own exit
        // (the teardown of the call's namespaces happens after the answer).
        let leftovers = if ended_by_itself {
            self.child.leftovers(LEFTOVERS_REPORT_WAIT).await
        } else {
            None
        };
        let emptied = self.child.emptied();
        let cgroup = kill_tree(self.cgroup.take(), self.pgid, emptied).await;
        let status = match status {
            Some(s) => Some(s),
            None => self.child.wait().await,
        };
        let network = match self.egress.take() {
            Some(ticket) => Some(ticket.finish().await),
            None => None,
        };
        let hits = cgroup.as_ref().map(|c| c.limit_hits());
        drop(self.git_hold.take());
        // The tree is dead: what its git wrote in the shadow gitdir is imported into the
        // operator's repository now, verified (`crate::git`). Git and file-system work: off
        // the async threads.
        let guard = match &self.sandbox_init {
            Some(f) => {
                let f = Arc::clone(f);
                tokio::task::spawn_blocking(move || f.after_call())
                    .await
                    .unwrap_or_else(|e| GuardReport {
                        notices: vec![format!(
                            "cordon's git import after this call did not finish ({e}): the \
                             operator's repository is unchanged"
                        )],
                        refused: true,
                    })
            }
            None => GuardReport::default(),
        };
        // Removing the directories and preparing the next call's cgroup need not delay the
        // answer.
        let confinement = Arc::clone(&executor.confinement);
        let (tmp, sandbox_init) = (self.tmp, self.sandbox_init);
        tokio::task::spawn_blocking(move || {
            drop(cgroup);
            drop(tmp);
            match sandbox_init {
                Some(sandbox_init) => confinement.refill_call_slots(&sandbox_init),
                None => confinement.prepare_spare_cgroup(),
            }
        });
        Finished {
            status,
            hits,
            network,
            guard,
            leftovers,
        }
    }
}
