//! The sandbox init's process, seen from the server ([`InitProcess`]): starting it, asking it
//! for slots, handing a slot what to run, and learning how the program's main process ended.
//!
//! ```text
//! server ──control socket──▶ init (PID 1 of its namespaces: builds the view once, then stays
//!    │                          │  unconfined: no Landlock, no seccomp, its capabilities kept)
//!    │                          └─ slot: forked, joined its cgroups, mounted its own /proc,
//!    │                             /tmp, devpts, then confined ITSELF (capabilities dropped,
//!    │                             no_new_privs, Landlock, seccomp); waiting  ◀── Exec (SCM_RIGHTS)
//!    └──────── slot socket ────────┘
//! ```
//! Owns the server's ends of those sockets and a dispatcher thread reading the control socket
//! (slot replies, exit reports). It does not decide what a job is (that is `exec`) nor which
//! cgroups a slot joins (the caller passes them). Dropping the [`InitProcess`] closes the control
//! socket: the init exits and the kernel kills everything left in its PID namespace.

use super::wire::{self, Exec, FromInit, FromSlot, SlotLayer, ToInit, ToSlot};
use super::{fdpass, init, plan};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;
use tokio::sync::watch;

/// How long the init may take to build its view and report ready.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a slot may take to be forked, join its cgroups and report ready.
const SLOT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a slot may take between a job and its exec.
const EXEC_TIMEOUT: Duration = Duration::from_secs(10);
/// How long PID 1's exit report may lag behind the kernel's (the pidfd) before the status
/// is taken to be a kill.
const EXIT_REPORT_WAIT: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum SandboxInitError {
    #[error("cannot start the sandbox init: {0}")]
    Start(io::Error),
    #[error("the sandbox init failed at `{stage}`: {error}")]
    Init { stage: String, error: String },
    #[error("the sandbox init did not report ready within {0:?}")]
    StartTimeout(Duration),
    #[error("the sandbox init has ended")]
    Gone,
    #[error("the sandbox init could not make a slot: {0}")]
    Slot(String),
    #[error("protocol: {0}")]
    Wire(#[from] wire::WireError),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Which namespaces the init runs in (all but network and user are always there).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Namespaces {
    pub network: bool,
    pub user: bool,
    /// The host uid calls run as when the init maps each slot's root to one (cordon is root).
    pub calls_uid: Option<u32>,
    /// Why calls are host root although the plan asked for other ids.
    pub calls_as_root: Option<String>,
}

type SlotReply = Result<OwnedFd, String>;

/// What the init hands over when it is ready.
struct InitReady {
    namespaces: Namespaces,
    listener: Option<OwnedFd>,
    netns: Option<OwnedFd>,
}

struct Shared {
    control: OwnedFd,
    pending: Mutex<HashMap<u64, mpsc::Sender<SlotReply>>>,
    exits: Mutex<HashMap<u64, watch::Sender<Option<ExitReport>>>>,
    alive: AtomicBool,
}

/// A running sandbox init. Cheap to share behind an `Arc`.
pub(crate) struct InitProcess {
    shared: Arc<Shared>,
    next_id: AtomicU64,
    namespaces: Namespaces,
    /// The listening socket the init made for the egress proxy, until it is taken.
    proxy_listener: Mutex<Option<OwnedFd>>,
    /// The init's own network namespace, when it has one (job forwarding connects into it).
    netns: Option<Arc<OwnedFd>>,
    /// The empty directory the init mounted its root on; removed when we go.
    _new_root: crate::confine::scratch::ScratchDir,
}

/// Status reported when the init died under a process (the kernel killed it): SIGKILL.
const KILLED_STATUS: i32 = libc::SIGKILL;

impl InitProcess {
    /// Starts the init for `plan` (its `new_root` is replaced by a fresh empty directory) and
    /// waits until it has built its view and applied its confinement.
    /// `join`: the network namespace of an init this one replaces (its `netns`), to join
    /// instead of making a new one; honoured only with `plan.join_network`.
    pub(crate) fn start(
        mut plan: plan::InitPlan,
        program: PathBuf,
        join: Option<Arc<OwnedFd>>,
    ) -> Result<Self, SandboxInitError> {
        let new_root =
            crate::confine::scratch::ScratchDir::new("view").map_err(SandboxInitError::Start)?;
        plan.new_root = new_root.path().to_path_buf();
        plan.version = wire::PROTOCOL_VERSION;
        let (server_end, init_end) = fdpass::seqpacket_pair().map_err(SandboxInitError::Start)?;
        let plan_json =
            serde_json::to_vec(&plan).map_err(|e| SandboxInitError::Start(io::Error::other(e)))?;
        let shared = Arc::new(Shared {
            control: server_end,
            pending: Mutex::new(HashMap::new()),
            exits: Mutex::new(HashMap::new()),
            alive: AtomicBool::new(true),
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread_shared = Arc::clone(&shared);
        // The launcher's death signal follows the thread that forked it, so it is forked by a
        // thread that lives exactly as long as the init: this one, which then dispatches.
        std::thread::Builder::new()
            .name("cordon-sandbox".into())
            .spawn(move || run_init(thread_shared, program, init_end, join, plan_json, ready_tx))
            .map_err(SandboxInitError::Start)?;
        let InitReady {
            namespaces: ready,
            listener,
            netns,
        } = ready_rx
            .recv_timeout(START_TIMEOUT)
            .map_err(|_| SandboxInitError::StartTimeout(START_TIMEOUT))??;
        if plan.proxy_listener.is_some() && listener.is_none() {
            return Err(SandboxInitError::Init {
                stage: "proxy listener".into(),
                error: "the init reported ready without the proxy's listening socket".into(),
            });
        }
        Ok(Self {
            shared,
            next_id: AtomicU64::new(1),
            namespaces: ready,
            proxy_listener: Mutex::new(listener),
            netns: netns.map(Arc::new),
            _new_root: new_root,
        })
    }

    pub(crate) fn namespaces(&self) -> Namespaces {
        self.namespaces.clone()
    }

    /// The egress proxy's listening socket in the init's network namespace (once).
    pub(crate) fn take_proxy_listener(&self) -> Option<OwnedFd> {
        lock(&self.proxy_listener).take()
    }

    /// The init's private network namespace, if it has one: a socket made by a thread that
    /// entered it reaches the sandbox's loopback.
    pub(crate) fn network_namespace(&self) -> Option<Arc<OwnedFd>> {
        self.netns.clone()
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::Acquire)
    }

    /// Asks the init for a slot that joins the cgroups whose `cgroup.procs` are `cgroup_procs`
    /// and puts `layer` on itself, and waits until it is ready. Blocking: call it off the
    /// async threads (the warm pool does, ahead of need).
    pub(crate) fn make_slot(
        &self,
        layer: SlotLayer,
        cgroup_procs: &[OwnedFd],
    ) -> Result<Slot, SandboxInitError> {
        self.request_slot(layer, cgroup_procs)?.wait()
    }

    /// Asks for a slot without waiting for it: several requests made first and waited for
    /// after overlap their forks and cgroup migrations (which can share one RCU grace period).
    pub(crate) fn request_slot(
        &self,
        layer: SlotLayer,
        cgroup_procs: &[OwnedFd],
    ) -> Result<PendingSlot<'_>, SandboxInitError> {
        if !self.is_alive() {
            return Err(SandboxInitError::Gone);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (exit_tx, exit_rx) = watch::channel(None);
        let (reply_tx, reply_rx) = mpsc::channel();
        lock(&self.shared.exits).insert(id, exit_tx);
        lock(&self.shared.pending).insert(id, reply_tx);
        let pending = PendingSlot {
            sandbox: self,
            id,
            reply: reply_rx,
            exit: Some(exit_rx),
        };
        let request = wire::encode(&ToInit::Slot { id, layer })?;
        fdpass::send(
            self.shared.control.as_fd(),
            &request,
            &fdpass::borrow_all(cgroup_procs),
        )?;
        Ok(pending)
    }
}

/// A slot asked for and not yet ready. Dropped unwaited, it is forgotten (the slot exits when
/// its socket closes).
pub(crate) struct PendingSlot<'a> {
    sandbox: &'a InitProcess,
    id: u64,
    reply: mpsc::Receiver<SlotReply>,
    exit: Option<watch::Receiver<Option<ExitReport>>>,
}

impl Drop for PendingSlot<'_> {
    fn drop(&mut self) {
        if self.exit.is_some() {
            lock(&self.sandbox.shared.exits).remove(&self.id);
            lock(&self.sandbox.shared.pending).remove(&self.id);
        }
    }
}

impl PendingSlot<'_> {
    /// Waits until the slot is forked, in its cgroups and ready.
    pub(crate) fn wait(mut self) -> Result<Slot, SandboxInitError> {
        let socket = match self.reply.recv_timeout(SLOT_TIMEOUT) {
            Ok(Ok(fd)) => fd,
            Ok(Err(e)) => return Err(SandboxInitError::Slot(e)),
            Err(_) => return Err(SandboxInitError::Slot("no answer from the init".into())),
        };
        // From here the exit report arrives on its own; only the ready message is awaited.
        if !poll_readable(&socket, SLOT_TIMEOUT)? {
            return Err(SandboxInitError::Slot(
                "the slot did not report ready".into(),
            ));
        }
        let received = fdpass::recv(socket.as_fd())?;
        if received.eof {
            return Err(SandboxInitError::Slot(
                "the slot ended before it was ready".into(),
            ));
        }
        match wire::decode::<FromSlot>(&received.data, wire::MAX_MESSAGE)? {
            FromSlot::Ready => {}
            FromSlot::Failed { stage, errno } => {
                return Err(SandboxInitError::Slot(format!(
                    "{stage}: {}",
                    io::Error::from_raw_os_error(errno)
                )));
            }
            FromSlot::Pty => {
                return Err(SandboxInitError::Slot(
                    "the slot sent a terminal before it had a job".into(),
                ));
            }
        }
        let mut fds = received.fds.into_iter();
        let pidfd = fds
            .next()
            .ok_or_else(|| SandboxInitError::Slot("ready without a pidfd".into()))?;
        Ok(Slot {
            pid: pid_of(&pidfd),
            pidfd,
            main_pidfd: fds.next(),
            socket,
            exit: self.exit.take().expect("taken only here"),
        })
    }
}

impl Drop for InitProcess {
    fn drop(&mut self) {
        // The dispatcher thread holds the other reference; shutting the socket down wakes it
        // and tells the init to exit (which kills its whole PID namespace).
        let _ = rustix::net::shutdown(&self.shared.control, rustix::net::Shutdown::Both);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn poll_readable(fd: &OwnedFd, timeout: Duration) -> io::Result<bool> {
    let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: timeout.subsec_nanos() as i64,
    };
    loop {
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether `pid` is the main process of the job whose slot (its PID namespace's reaper) is
/// `reaper`: the reaper's first child, pid 2 of that namespace (pids there are never reused
/// below 300 once they wrap). Read from /proc, which the kernel writes.
pub(crate) fn is_job_main(pid: i32, reaper: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let parent = field("PPid:").and_then(|p| p.parse::<i32>().ok());
    let innermost = field("NSpid:").and_then(|p| p.split_whitespace().last()?.parse::<i32>().ok());
    parent == Some(reaper) && innermost == Some(2)
}

/// The wait status the kernel keeps on `pidfd` once its process was reaped (`PIDFD_GET_INFO`
/// with `PIDFD_INFO_EXIT`, Linux 6.15+); None while it runs or is not yet reaped, and on
/// kernels without it.
fn pidfd_exit_status(pidfd: &OwnedFd) -> Option<i32> {
    /// `struct pidfd_info` up to `exit_code` and its spare word (`PIDFD_INFO_SIZE_VER0`, 64
    /// bytes): the kernel fills what both sides know.
    #[repr(C)]
    #[derive(Default)]
    struct PidfdInfo {
        mask: u64,
        cgroupid: u64,
        ids: [u32; 11],
        exit_code: i32,
    }
    const PIDFD_INFO_EXIT: u64 = 1 << 3;
    // _IOWR(PIDFS_IOCTL_MAGIC = 0xFF, 11, struct pidfd_info of 64 bytes).
    const PIDFD_GET_INFO: libc::c_ulong = 0xC040_FF0B;
    const _: () = assert!(std::mem::size_of::<PidfdInfo>() == 64);
    let mut info = PidfdInfo {
        mask: PIDFD_INFO_EXIT,
        ..PidfdInfo::default()
    };
    // SAFETY: the ioctl writes at most 64 bytes (the size encoded in the request) into
    // `info`, a live, writable, 64-byte `repr(C)` struct; `pidfd` is an open pidfd.
    let ret = unsafe {
        libc::ioctl(
            pidfd.as_raw_fd(),
            PIDFD_GET_INFO as _,
            &mut info as *mut PidfdInfo,
        )
    };
    (ret == 0 && info.mask & PIDFD_INFO_EXIT != 0).then_some(info.exit_code)
}

/// The pid (in our namespace) of the process a pidfd refers to.
fn pid_of(pidfd: &OwnedFd) -> Option<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|&p| p > 0)
        .map(|p| p as u32)
}

/// The dispatcher thread: starts the launcher, passes on the ready report, then routes every
/// message of the control socket until it closes.
fn run_init(
    shared: Arc<Shared>,
    program: PathBuf,
    init_end: OwnedFd,
    join: Option<Arc<OwnedFd>>,
    plan_json: Vec<u8>,
    ready: mpsc::Sender<Result<InitReady, SandboxInitError>>,
) {
    use std::io::Write;
    let mut child = match spawn_launcher(&program, &init_end, join) {
        Ok(c) => c,
        Err(e) => {
            let _ = ready.send(Err(SandboxInitError::Start(e)));
            return;
        }
    };
    drop(init_end);
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(&plan_json);
    }
    let mut ready = Some(ready);
    loop {
        let received = match fdpass::recv(shared.control.as_fd()) {
            Ok(r) if !r.eof => r,
            _ => break,
        };
        match wire::decode::<FromInit>(&received.data, wire::MAX_MESSAGE) {
            Ok(message) => route(&shared, &mut ready, message, received.fds),
            Err(e) => tracing::warn!("sandbox init sent a malformed message: {e}"),
        }
    }
    // The init is gone, and with it every process of its namespace.
    shared.alive.store(false, Ordering::Release);
    if let Some(tx) = ready.take() {
        let _ = tx.send(Err(SandboxInitError::Init {
            stage: "start".into(),
            error: "the init exited before it was ready (see the lines above on stderr)".into(),
        }));
    }
    lock(&shared.pending).clear();
    for (_, tx) in lock(&shared.exits).drain() {
        let _ = tx.send(Some(ExitReport::killed()));
    }
    let _ = child.wait();
}

/// Starts the launcher (`<program> __sandbox-init`) with the control socket at
/// `init::CONTROL_FD` and, for a rebuilt init, the network namespace to join at
/// `init::NETNS_FD`; its stdin takes the plan.
fn spawn_launcher(
    program: &std::path::Path,
    init_end: &OwnedFd,
    join: Option<Arc<OwnedFd>>,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let init_raw = init_end.as_raw_fd();
    // Above the numbers the child places, so neither dup2 below clobbers the other's source.
    // A failed copy is the start's failure: the plan says to join, and the launcher would
    // otherwise find nothing at NETNS_FD.
    let join = join
        .map(|fd| rustix::io::fcntl_dupfd_cloexec(&*fd, 10))
        .transpose()?;
    let join_raw = join.as_ref().map(|fd| fd.as_raw_fd());
    let server_pid = std::process::id();
    let mut cmd = std::process::Command::new(program);
    cmd.arg(init::INIT_ARG)
        .env_clear()
        .env(init::PARENT_ENV, server_pid.to_string())
        .stdin(std::process::Stdio::piped())
        // stdout carries the MCP protocol: never the init's.
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit());
    // SAFETY: only async-signal-safe calls between fork and exec: dup2 of a descriptor the
    // parent keeps open until spawn returns, setsid, prctl.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(init_raw, init::CONTROL_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(fd) = join_raw
                && libc::dup2(fd, init::NETNS_FD) < 0
            {
                return Err(io::Error::last_os_error());
            }
            // Out of the terminal's process group: Ctrl-C is the server's to handle.
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // `join` (the duplicate) stays open until the spawn has placed it.
    let spawned = cmd.spawn();
    drop(join);
    spawned
}

/// Routes one message of the init: the ready report (or the start failure) to the starter,
/// a slot's socket (or its failure) to whoever asked for it, an exit status to its watcher.
fn route(
    shared: &Shared,
    ready: &mut Option<mpsc::Sender<Result<InitReady, SandboxInitError>>>,
    message: FromInit,
    fds: Vec<OwnedFd>,
) {
    match message {
        FromInit::Ready {
            network_namespace,
            user_namespace,
            proxy_listener,
            calls_uid,
            calls_as_root,
            ..
        } => {
            let mut fds = fds.into_iter();
            let listener = if proxy_listener { fds.next() } else { None };
            let netns = if network_namespace { fds.next() } else { None };
            if let Some(tx) = ready.take() {
                let _ = tx.send(Ok(InitReady {
                    namespaces: Namespaces {
                        network: network_namespace,
                        user: user_namespace,
                        calls_uid,
                        calls_as_root,
                    },
                    listener,
                    netns,
                }));
            }
        }
        FromInit::Failed { stage, error } => {
            if let Some(tx) = ready.take() {
                let _ = tx.send(Err(SandboxInitError::Init { stage, error }));
            }
        }
        FromInit::Slot { id } => {
            if let Some(tx) = lock(&shared.pending).remove(&id) {
                let reply = fds
                    .into_iter()
                    .next()
                    .ok_or_else(|| "no socket attached".to_owned());
                let _ = tx.send(reply);
            }
        }
        FromInit::SlotFailed { id, error } => {
            if let Some(tx) = lock(&shared.pending).remove(&id) {
                let _ = tx.send(Err(error));
            }
        }
        FromInit::Exited {
            id,
            status,
            leftovers,
            emptied,
        } => {
            if let Some(tx) = lock(&shared.exits).remove(&id) {
                let _ = tx.send(Some(ExitReport {
                    status,
                    leftovers,
                    emptied,
                }));
            }
        }
    }
}

/// What the slot's reaper reported of its job's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExitReport {
    /// The main process's wait status.
    status: i32,
    /// Processes the job had started that still ran when its main process ended (the
    /// reaper ended them).
    leftovers: u32,
    /// The reaper killed and reaped every process of the call before it reported.
    emptied: bool,
}

impl ExitReport {
    fn killed() -> Self {
        Self {
            status: KILLED_STATUS,
            leftovers: 0,
            emptied: false,
        }
    }
}

/// A ready slot: forked, in its cgroups, waiting for one job. Dropping an unused slot closes
/// its socket, and the slot exits.
pub struct Slot {
    pid: Option<u32>,
    /// The slot's reaper (PID 1 of its namespace): what is signalled and waited for.
    pidfd: OwnedFd,
    /// The job's main process, when the slot sent it: it ends first, and tells sooner.
    main_pidfd: Option<OwnedFd>,
    socket: OwnedFd,
    exit: watch::Receiver<Option<ExitReport>>,
}

/// Why a job did not start.
#[derive(Debug, thiserror::Error)]
#[error("{stage}: {source}")]
pub struct StartError {
    pub stage: String,
    pub source: io::Error,
}

impl Slot {
    /// Hands the slot its job with `fds` (placed at `job.fds`) and waits until the program is
    /// running (the slot's socket closes at exec) or failed to start.
    pub fn start(self, job: Exec, fds: Vec<OwnedFd>) -> Result<SandboxChild, StartError> {
        let err = |stage: &str, source: io::Error| StartError {
            stage: stage.into(),
            source,
        };
        let job_wants_pty = job.program.pty.is_some();
        let bytes =
            wire::encode(&ToSlot::Exec(job)).map_err(|e| err("encode", io::Error::other(e)))?;
        if bytes.len() > wire::MAX_EXEC {
            return Err(err("exec", io::Error::from_raw_os_error(libc::E2BIG)));
        }
        let mut attached: Vec<OwnedFd> = Vec::new();
        let message = if bytes.len() <= wire::MAX_MESSAGE {
            bytes
        } else {
            // Too big for one datagram: the job travels in a memfd. Not sealed: only this send
            // holds it, and the slot reads it once.
            let memfd = rustix::fs::memfd_create("cordon-job", rustix::fs::MemfdFlags::CLOEXEC)
                .map_err(|e| err("memfd", e.into()))?;
            let mut file = std::fs::File::from(memfd);
            std::io::Write::write_all(&mut file, &bytes).map_err(|e| err("memfd", e))?;
            std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0))
                .map_err(|e| err("memfd", e))?;
            attached.push(OwnedFd::from(file));
            wire::encode(&ToSlot::ExecInMemfd { len: bytes.len() })
                .map_err(|e| err("encode", io::Error::other(e)))?
        };
        attached.extend(fds);
        fdpass::send(
            self.socket.as_fd(),
            &message,
            &fdpass::borrow_all(&attached),
        )
        .map_err(|e| err("send job", e))?;
        drop(attached);
        let wants_pty = job_wants_pty;
        let mut pty = None;
        loop {
            if !poll_readable(&self.socket, EXEC_TIMEOUT).map_err(|e| err("wait for exec", e))? {
                return Err(err("exec", io::Error::from(io::ErrorKind::TimedOut)));
            }
            let reply = fdpass::recv(self.socket.as_fd()).map_err(|e| err("wait for exec", e))?;
            if reply.eof {
                break;
            }
            match wire::decode::<FromSlot>(&reply.data, wire::MAX_MESSAGE) {
                // The terminal's master, once, and only for a job that asked for one.
                Ok(FromSlot::Pty) if wants_pty && pty.is_none() && reply.fds.len() == 1 => {
                    pty = reply.fds.into_iter().next();
                }
                Ok(FromSlot::Failed { stage, errno }) => {
                    return Err(err(&stage, io::Error::from_raw_os_error(errno)));
                }
                Ok(_) | Err(_) => return Err(err("exec", io::Error::other("unexpected reply"))),
            }
        }
        if wants_pty && pty.is_none() {
            return Err(err("pty", io::Error::other("the slot sent no terminal")));
        }
        Ok(SandboxChild {
            pid: self.pid,
            pidfd: self.pidfd,
            main_pidfd: self.main_pidfd,
            exit: self.exit,
            status: None,
            pty,
        })
    }
}

/// A program running in a slot. Dropping it kills it (like tokio's `kill_on_drop`).
pub struct SandboxChild {
    pid: Option<u32>,
    pidfd: OwnedFd,
    main_pidfd: Option<OwnedFd>,
    exit: watch::Receiver<Option<ExitReport>>,
    status: Option<ExitStatus>,
    /// The master side of the job's terminal, for a job run under one.
    pty: Option<OwnedFd>,
}

impl SandboxChild {
    /// The pid in the server's namespace (also its process group: the slot made a session).
    pub fn id(&self) -> Option<u32> {
        if self.status.is_some() {
            None
        } else {
            self.pid
        }
    }

    /// The master side of the job's terminal (once), when it runs under one.
    pub fn take_pty(&mut self) -> Option<OwnedFd> {
        self.pty.take()
    }

    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if let Some(status) = self.reported() {
            return Some(status);
        }
        if self.has_exited() {
            // The kernel says it is gone (the pidfd is readable) but PID 1's report is still on
            // its way: it follows within moments, so wait for it rather than answer "running".
            let deadline = std::time::Instant::now() + EXIT_REPORT_WAIT;
            while self.status.is_none() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(50));
                self.reported();
            }
            if self.status.is_none() {
                self.status = Some(ExitStatus::from_raw(KILLED_STATUS));
            }
        }
        self.status
    }

    /// The exit status if it is known without waiting: seen before, relayed by the slot's
    /// reaper, or kept by the kernel on the main process's pidfd once it was reaped
    /// (`PIDFD_GET_INFO`, Linux 6.15+), whichever is there first.
    fn reported(&mut self) -> Option<ExitStatus> {
        if self.status.is_none()
            && let Some(report) = *self.exit.borrow()
        {
            self.status = Some(ExitStatus::from_raw(report.status));
        }
        if self.status.is_none()
            && let Some(main) = &self.main_pidfd
            && let Some(raw) = pidfd_exit_status(main)
        {
            self.status = Some(ExitStatus::from_raw(raw));
        }
        self.status
    }

    /// Whether the job's main process has exited, straight from the kernel (a pidfd turns
    /// readable): the reaper's report of its status follows within moments.
    fn has_exited(&self) -> bool {
        poll_readable(
            self.main_pidfd.as_ref().unwrap_or(&self.pidfd),
            Duration::ZERO,
        )
        .unwrap_or(false)
    }

    pub async fn wait(&mut self) -> ExitStatus {
        // Never the sleeping `try_wait` here: an exited process whose report is on its way is
        // awaited on the report itself, without holding a runtime thread.
        if let Some(s) = self.reported() {
            return s;
        }
        let raw = match self.exit.wait_for(Option::is_some).await {
            Ok(v) => v.map_or(KILLED_STATUS, |r| r.status),
            // The dispatcher dropped the sender: the init is gone, and the process with it.
            Err(_) => KILLED_STATUS,
        };
        let status = ExitStatus::from_raw(raw);
        self.status = Some(status);
        status
    }

    /// How many processes the job left running when its main process ended (each ended with
    /// its slot), as the reaper reports it: awaited up to `within` (the report follows the
    /// reaper's end, which a call's tree kill waits for). None when it did not come, or the
    /// job was killed before its reaper could count.
    pub async fn leftovers(&mut self, within: Duration) -> Option<u32> {
        let report = tokio::time::timeout(within, self.exit.wait_for(Option::is_some))
            .await
            .ok()?
            .ok()?;
        report.map(|r| r.leftovers)
    }

    /// Whether the slot's reaper reported that it killed and reaped every process of the call
    /// (the job ended by itself): nothing of it runs, and only the reaper's own exit, which
    /// tears the call's namespaces down, is left.
    pub fn emptied(&self) -> bool {
        self.exit.borrow().is_some_and(|r| r.emptied)
    }

    /// Sends `signal` to the main process through its pidfd (no pid-reuse race).
    pub fn signal(&self, signal: rustix::process::Signal) -> bool {
        self.status.is_none() && rustix::process::pidfd_send_signal(&self.pidfd, signal).is_ok()
    }
}

impl Drop for SandboxChild {
    fn drop(&mut self) {
        if self.try_wait().is_none() {
            let _ = rustix::process::pidfd_send_signal(&self.pidfd, rustix::process::Signal::KILL);
        }
    }
}
