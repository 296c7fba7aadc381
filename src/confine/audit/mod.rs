//! Denials as the kernel saw them: Landlock's audit records, read and attributed to calls.
//!
//! Linux 6.15+ (Landlock ABI 7) writes an `AUDIT_LANDLOCK_ACCESS` record for each denied access
//! of a domain whose creator asked for logging, and an `AUDIT_LANDLOCK_DOMAIN` record (with the
//! creator's pid) the first time a domain shows in the log. The server reads them as root from
//! the audit netlink multicast group (no auditd). Each call's process creates its own Landlock
//! domain (a slot's layer, or the per-child fallback's), so the domain record's pid names the
//! call: [`watch`] registers that pid, and every record of the domains it created lands in
//! that call's bounded [`KernelDenials`]. [`CallWatch::finish`] sends a barrier message through
//! the kernel's audit queue, so a failed call's records are all in before its result is made.
//!
//! Owns the reader thread, the attribution and the bounds; what a denial means under the
//! policy is `policy::explain`'s job. Nothing here runs in a child.

pub(crate) mod host;
mod netlink;
pub(crate) mod record;

use record::{Access, Domain, Record};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The text of cordon's barrier message, followed by `PID-NUMBER`.
pub(crate) const BARRIER_PREFIX: &str = "cordon-barrier ";
/// `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`: log denials after the creator's `execve` too
/// (every call's program is exec'd after its domain is made; the kernel's default is silence).
pub(crate) const LOG_NEW_EXEC_ON: u32 = 1 << 1;
/// Landlock ABI that knows the logging flags.
const LOGGING_ABI: u32 = 7;
/// Distinct denials (right + path or port) kept per call; further records only count. A
/// noisy call (a loop over denied files) costs this much and no more.
pub(crate) const MAX_DENIALS_PER_CALL: usize = 32;
/// Domains of one call (its slot's layer, the job's scope layer, any the program made).
const MAX_DOMAINS_PER_CALL: usize = 16;
/// Domains seen before their call registered (the record raced the registration), kept
/// until claimed; older ones are forgotten.
const MAX_UNCLAIMED: usize = 64;
const MAX_UNCLAIMED_RECORDS: usize = 8;
/// How long a call's end waits for its barrier to come back through the audit queue.
const BARRIER_WAIT: Duration = Duration::from_secs(1);
/// More records than this from one call within [`FLOOD_WINDOW`] end the call (limit `audit`):
/// a loop of denied operations (`kill(1, 0)` a million times) would otherwise fill the
/// kernel's audit backlog, and the kernel then drops every call's records and every host audit
/// reader's with them. Programs that work hit a denial a few times (pyenv probing `/dev/tty`
/// sixteen times per `python3`), not a thousand times a second. The count is of records
/// *delivered* to the reader, and while a flood outruns delivery the kernel's queue holds the
/// rest: with a loop making ~100k records/s and delivery at a fifth of that (2 busy cores),
/// the queue holds about four records per one delivered when the bound trips. At 1024 that
/// is ~4k queued, well inside [`BACKLOG_LIMIT`]; at 4096 it was ~16k, and the kernel dropped
/// other calls' records in 2 of 5 runs of the flood test beside other servers (0 of 6 at 1024).
pub(crate) const MAX_RECORDS_PER_WINDOW: u64 = 1024;
pub(crate) const FLOOD_WINDOW: Duration = Duration::from_secs(1);
/// The audit backlog cordon asks for where the host's is smaller: room for the records
/// written between a flooding call's trip and its end (it is killed within milliseconds), so
/// that other calls' records are not dropped meanwhile. A few MiB of kernel memory at most.
const BACKLOG_LIMIT: u32 = 16384;

/// Restrict flags for every Landlock layer a confined process takes: [`LOG_NEW_EXEC_ON`] once
/// the reader runs, else 0 (a kernel before ABI 7 refuses any flag). Read in `pre_exec` by the
/// per-child path (an atomic load is async-signal-safe) and put in the sandbox init's plan.
static RESTRICT_FLAGS: AtomicU32 = AtomicU32::new(0);

/// Whether confined processes take cordon's login uid ([`host::CORDON_LOGINUID`]): set once
/// the rule that leaves every other task without an audit context is in force. The server
/// itself keeps none (its own system calls stay off the audit path: with a context, every
/// path it opens costs a walk of the dentry's parents, measured at 0.6 ms an `openat` 40,000
/// levels deep); the sandbox init's launcher takes it before it forks PID 1, and a process
/// the server forks is forked from a thread that took it ([`on_a_cordon_thread`]), so every
/// confined process has a context.
static CONFINED_LOGINUID: AtomicBool = AtomicBool::new(false);

static READER: OnceLock<Result<Arc<Reader>, String>> = OnceLock::new();

/// Whether kernel-reported denials are available, and why not.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Availability {
    Available {
        /// Audit was off and cordon turned it on (a host-wide setting; see SECURITY.md).
        enabled_audit: bool,
    },
    /// Not yet enabled but everything is there: `serve` would start the reader.
    Possible {
        audit_enabled: bool,
    },
    Unavailable {
        reason: String,
    },
}

/// The restrict flags for a Landlock layer of a confined process (`RESTRICT_FLAGS`).
pub(crate) fn restrict_flags() -> u32 {
    RESTRICT_FLAGS.load(Ordering::Relaxed)
}

/// The login uid a confined process takes before it starts anything (see
/// [`CONFINED_LOGINUID`]); None when cordon does not narrow audit (it was on already, or the
/// rule could not be added). An atomic load: async-signal-safe, so fine between fork and exec.
pub(crate) fn confined_loginuid() -> Option<u32> {
    CONFINED_LOGINUID
        .load(Ordering::Relaxed)
        .then_some(host::CORDON_LOGINUID)
}

/// Runs `f` (a fork of a confined process by the server itself, where there is no sandbox
/// init) on a thread of the server that carries cordon's login uid, so that the forked process
/// gets an audit context at its fork and its own denials are recorded; on the calling thread
/// when cordon does not narrow audit. The login uid is a thread's own (`/proc/thread-self`),
/// so the server's other threads keep none and stay off the audit path. None: that thread is
/// gone (it panicked).
pub(crate) fn on_a_cordon_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    type Work = Box<dyn FnOnce() + Send>;
    static THREAD: OnceLock<Option<std::sync::mpsc::Sender<Work>>> = OnceLock::new();
    if confined_loginuid().is_none() {
        return Some(f());
    }
    let thread = THREAD.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Work>();
        std::thread::Builder::new()
            .name("cordon-forker".into())
            .spawn(move || {
                if let Err(e) = std::fs::write(
                    "/proc/thread-self/loginuid",
                    host::CORDON_LOGINUID.to_string(),
                ) {
                    tracing::warn!(
                        "cannot take cordon's login uid on the thread that forks confined \
                         processes ({e}): their own denials go unrecorded"
                    );
                }
                while let Ok(work) = rx.recv() {
                    work();
                }
            })
            .ok()
            .map(|_| tx)
    });
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let work: Work = Box::new(move || {
        let _ = tx.send(f());
    });
    let sent = match thread {
        Some(sender) => sender.send(work).map_err(|e| e.0),
        None => Err(work),
    };
    if let Err(work) = sent {
        // No such thread: forked here, without the login uid (denials go unrecorded).
        work();
    }
    rx.recv().ok()
}

/// Starts the reader once (turning audit on when it is off and cordon may); later calls
/// return the first answer. Call before the sandbox init's plan is made, so its layers log.
pub fn start() -> Availability {
    let reader = READER.get_or_init(Reader::start);
    match reader {
        Ok(r) => {
            RESTRICT_FLAGS.store(LOG_NEW_EXEC_ON, Ordering::Relaxed);
            Availability::Available {
                enabled_audit: r.enabled_audit,
            }
        }
        Err(reason) => Availability::Unavailable {
            reason: reason.clone(),
        },
    }
}

/// Makes sure the rule that leaves every task without cordon's login uid without an audit
/// context is in force (see `host`), and from then on has confined processes take that login
/// uid. A failure leaves audit as wide as the kernel makes it, said in the log.
fn narrow_to_cordon(control: &netlink::AuditSocket) {
    match control.add_never_unless_loginuid(host::CORDON_LOGINUID) {
        Ok(()) => CONFINED_LOGINUID.store(true, Ordering::Relaxed),
        Err(e) => tracing::warn!(
            "audit stays host-wide (cannot add the audit rule: {e}): every process on the \
             host pays for an audit context while it is on"
        ),
    }
}

/// At the server's exit: lets go of the host's shared audit state, and turns audit off when
/// cordon turned it on and no other cordon server still reads it.
pub fn release() {
    let Some(Ok(reader)) = READER.get() else {
        return;
    };
    let Some(share) = reader.share.lock().ok().and_then(|mut s| s.take()) else {
        return;
    };
    let turn_off = || match reader.control.lock() {
        Ok(control) => control.set_enabled(false),
        Err(_) => Err(std::io::Error::other(
            "the audit control socket is poisoned",
        )),
    };
    match host::release(share, turn_off) {
        Ok(true) => tracing::info!("turned the kernel's audit off again (cordon turned it on)"),
        Ok(false) => {}
        Err(e) => tracing::warn!("cannot turn the kernel's audit off again: {e}"),
    }
}

/// Whether the rule that leaves every task but cordon's without an audit context is in the
/// kernel (for `doctor` and the tests).
pub fn rule_in_force() -> bool {
    netlink::AuditSocket::control()
        .and_then(|c| c.has_never_unless_loginuid(host::CORDON_LOGINUID))
        .unwrap_or(false)
}

/// What `doctor` says: the reader's state when it runs, else whether it could (without
/// turning anything on).
pub fn probe() -> Availability {
    if let Some(Ok(r)) = READER.get() {
        return Availability::Available {
            enabled_audit: r.enabled_audit,
        };
    }
    match preconditions() {
        Ok(status) => Availability::Possible {
            audit_enabled: status.enabled != 0,
        },
        Err(reason) => Availability::Unavailable { reason },
    }
}

/// The kernel and privileges the reader needs, and the audit status.
fn preconditions() -> Result<netlink::Status, String> {
    let abi = crate::confine::kernel::KernelSupport::detect().landlock_abi;
    if abi < LOGGING_ABI {
        return Err(format!(
            "Landlock ABI {abi} writes no audit records (ABI {LOGGING_ABI}, Linux 6.15, is needed)"
        ));
    }
    if crate::confine::kernel::simulated_missing("audit") {
        return Err("audit simulated missing (CORDON_SIMULATE_MISSING)".into());
    }
    if !rustix::process::geteuid().is_root() {
        return Err("reading the kernel's audit records needs root (CAP_AUDIT_READ)".into());
    }
    let control = netlink::AuditSocket::control()
        .map_err(|e| format!("no audit netlink socket ({e}): the kernel lacks CONFIG_AUDIT"))?;
    let status = control
        .status()
        .map_err(|e| format!("the kernel's audit status cannot be read: {e}"))?;
    if status.failure == 2 {
        // A noisy call can overflow the backlog, and a lost record then panics the host.
        return Err(
            "the host's audit failure mode is `panic` (auditctl -f 2): cordon does not make \
             confined processes' denials audit records there"
                .into(),
        );
    }
    Ok(status)
}

/// Watches the Landlock domains `pid` creates (a call's slot, or its forked child) until
/// [`CallWatch::finish`]; None when kernel-reported denials are unavailable.
pub(crate) fn watch(pid: u32) -> Option<CallWatch> {
    let reader = Arc::clone(READER.get()?.as_ref().ok()?);
    if !reader.alive.load(Ordering::Acquire) {
        return None;
    }
    let id = reader.next_watch.fetch_add(1, Ordering::Relaxed);
    reader.state.lock().ok()?.register(id, pid);
    Some(CallWatch { reader, id })
}

/// One denied access of a call, as the kernel reported it, with how often it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelDenial {
    pub blockers: Vec<String>,
    pub path: Option<String>,
    pub port: Option<u16>,
    pub address: Option<String>,
    pub count: u64,
}

/// A call's kernel-reported denials.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelDenials {
    pub denials: Vec<KernelDenial>,
    /// Records beyond [`MAX_DENIALS_PER_CALL`] distinct ones (counted, not kept).
    pub not_kept: u64,
    /// The barrier came back and no record was lost meanwhile: `denials` is every denial the
    /// kernel logged for the call.
    pub complete: bool,
}

/// A registered call; dropping it unregisters.
pub(crate) struct CallWatch {
    reader: Arc<Reader>,
    id: u64,
}

impl CallWatch {
    /// Trips when the call's records come faster than the rate bound (see [`Flood`]).
    pub(crate) fn flood(&self) -> Arc<Flood> {
        self.reader
            .state
            .lock()
            .ok()
            .and_then(|s| s.calls.get(&self.id).map(|(_, c)| Arc::clone(&c.flood)))
            .unwrap_or_default()
    }

    /// The call's denials. With `sync` (the call's processes are all gone), first waits until
    /// the kernel's audit queue has passed a barrier sent now, so every record of the call
    /// has been read; blocks for at most `BARRIER_WAIT` (1 s). Without, what has arrived so far.
    pub(crate) fn finish(self, sync: bool) -> KernelDenials {
        let complete = sync && self.reader.barrier();
        let Ok(mut state) = self.reader.state.lock() else {
            return KernelDenials::default();
        };
        let lost = state.lost;
        let Some((_, call)) = state.remove(self.id) else {
            return KernelDenials::default();
        };
        KernelDenials {
            complete: complete && lost == call.lost_at_start,
            denials: call.denials,
            not_kept: call.not_kept,
        }
    }
}

impl Drop for CallWatch {
    fn drop(&mut self) {
        if let Ok(mut state) = self.reader.state.lock() {
            state.remove(self.id);
        }
    }
}

struct Reader {
    state: Mutex<State>,
    arrived: Condvar,
    /// Requests (barriers); the mutex also orders barriers as the kernel queues them.
    control: Mutex<netlink::AuditSocket>,
    next_barrier: AtomicU64,
    next_watch: AtomicU64,
    enabled_audit: bool,
    /// This server's hold on the host's shared audit state (see `host`), let go at exit.
    share: Mutex<Option<host::Share>>,
    /// The reader thread runs (it stops only on a socket error it cannot recover from).
    alive: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct State {
    calls: HashMap<u64, (u32, Collected)>,
    by_pid: HashMap<u32, u64>,
    by_domain: HashMap<u64, u64>,
    unclaimed: VecDeque<Unclaimed>,
    /// The last access record of a domain not yet known: its domain record follows it (same
    /// serial) when this is the domain's first denial.
    pending: Option<Access>,
    barrier_seen: u64,
    /// Times the socket overflowed (records lost).
    lost: u64,
}

struct Unclaimed {
    pid: u32,
    domain: u64,
    records: Vec<Access>,
}

#[derive(Default)]
struct Collected {
    domains: Vec<u64>,
    denials: Vec<KernelDenial>,
    not_kept: u64,
    lost_at_start: u64,
    /// Records of this call in the current flood window, and when that window began.
    in_window: u64,
    window_start: Option<Instant>,
    flood: Arc<Flood>,
}

/// A call's records came faster than [`MAX_RECORDS_PER_WINDOW`] a [`FLOOD_WINDOW`]: whoever
/// waits for the call ends it (limit `audit`).
#[derive(Debug, Default)]
pub(crate) struct Flood {
    tripped: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl Flood {
    /// Resolves once the call has flooded the audit log (never otherwise).
    pub(crate) async fn tripped(&self) {
        while !self.tripped.load(Ordering::Acquire) {
            self.notify.notified().await;
        }
    }

    fn trip(&self) {
        if !self.tripped.swap(true, Ordering::AcqRel) {
            // A stored permit: a waiter that starts waiting later still wakes.
            self.notify.notify_one();
        }
    }
}

impl Collected {
    fn add(&mut self, a: Access) {
        let now = Instant::now();
        match self.window_start {
            Some(start) if now.duration_since(start) < FLOOD_WINDOW => self.in_window += 1,
            _ => {
                self.window_start = Some(now);
                self.in_window = 1;
            }
        }
        if self.in_window > MAX_RECORDS_PER_WINDOW {
            self.flood.trip();
        }
        if let Some(d) = self
            .denials
            .iter_mut()
            .find(|d| d.blockers == a.blockers && d.path == a.path && d.port == a.port)
        {
            d.count += 1;
        } else if self.denials.len() < MAX_DENIALS_PER_CALL {
            self.denials.push(KernelDenial {
                blockers: a.blockers,
                path: a.path,
                port: a.port,
                address: a.address,
                count: 1,
            });
        } else {
            self.not_kept += 1;
        }
    }
}

impl State {
    /// Registers call `id` for the domains `pid` creates, claiming any of them read before
    /// (the domain's first record can race the registration).
    fn register(&mut self, id: u64, pid: u32) {
        let mut call = Collected {
            lost_at_start: self.lost,
            ..Collected::default()
        };
        let mut kept = VecDeque::new();
        while let Some(u) = self.unclaimed.pop_front() {
            if u.pid == pid && call.domains.len() < MAX_DOMAINS_PER_CALL {
                call.domains.push(u.domain);
                for access in u.records {
                    call.add(access);
                }
            } else {
                kept.push_back(u);
            }
        }
        self.unclaimed = kept;
        for &d in &call.domains {
            self.by_domain.insert(d, id);
        }
        self.by_pid.insert(pid, id);
        self.calls.insert(id, (pid, call));
    }

    fn remove(&mut self, id: u64) -> Option<(u32, Collected)> {
        let (pid, call) = self.calls.remove(&id)?;
        if self.by_pid.get(&pid) == Some(&id) {
            self.by_pid.remove(&pid);
        }
        for d in &call.domains {
            self.by_domain.remove(d);
        }
        Some((pid, call))
    }

    /// Whether an access record of `domain` would change nothing: the domain is no call's
    /// and its unclaimed entry is full (see [`State::handle`]).
    fn keeps_nothing_of(&self, domain: u64) -> bool {
        !self.by_domain.contains_key(&domain)
            && self
                .unclaimed
                .iter()
                .any(|u| u.domain == domain && u.records.len() >= MAX_UNCLAIMED_RECORDS)
    }

    fn handle(&mut self, record: Record) {
        match record {
            Record::Access(a) => {
                if let Some(id) = self.by_domain.get(&a.domain)
                    && let Some((_, call)) = self.calls.get_mut(id)
                {
                    call.add(a);
                } else if let Some(u) = self.unclaimed.iter_mut().find(|u| u.domain == a.domain) {
                    if u.records.len() < MAX_UNCLAIMED_RECORDS {
                        u.records.push(a);
                    }
                } else {
                    self.pending = Some(a);
                }
            }
            Record::Domain(Domain::Allocated {
                serial,
                domain,
                pid,
            }) => {
                let first = self
                    .pending
                    .take_if(|p| p.serial == serial && p.domain == domain);
                if let Some(&id) = self.by_pid.get(&pid)
                    && let Some((_, call)) = self.calls.get_mut(&id)
                {
                    if call.domains.len() < MAX_DOMAINS_PER_CALL {
                        call.domains.push(domain);
                        self.by_domain.insert(domain, id);
                    }
                    if let Some(a) = first {
                        call.add(a);
                    }
                } else {
                    if self.unclaimed.len() >= MAX_UNCLAIMED {
                        self.unclaimed.pop_front();
                    }
                    self.unclaimed.push_back(Unclaimed {
                        pid,
                        domain,
                        records: first.into_iter().collect(),
                    });
                }
            }
            Record::Domain(Domain::Deallocated { domain }) => {
                self.unclaimed.retain(|u| u.domain != domain);
            }
            Record::Barrier { pid, number } if pid == std::process::id() => {
                self.barrier_seen = self.barrier_seen.max(number);
            }
            Record::Barrier { .. } => {}
        }
    }
}

impl Reader {
    fn start() -> Result<Arc<Self>, String> {
        let status = preconditions()?;
        let control = netlink::AuditSocket::control().map_err(|e| e.to_string())?;
        let reader = netlink::AuditSocket::reader().map_err(|e| {
            format!("cannot join the audit log's multicast group (CAP_AUDIT_READ): {e}")
        })?;
        let share = match host::join(std::path::Path::new(host::STATE_DIR)) {
            Ok(share) => Some(share),
            Err(e) => {
                tracing::warn!(
                    "cannot share the audit state with other cordon servers in {} ({e}): \
                     audit is not narrowed to cordon's processes nor turned off at exit",
                    host::STATE_DIR
                );
                None
            }
        };
        // The status again, now that no server leaving can turn audit off under us.
        let status = control.status().unwrap_or(status);
        let mut enabled_audit = false;
        if status.enabled == 0 {
            // Landlock writes no record while audit is off. Narrowed first, so that no task
            // forked once it is on gets an audit context it does not need.
            if share.is_some() {
                narrow_to_cordon(&control);
            }
            control.set_enabled(true).map_err(|e| {
                format!("audit is off and cannot be turned on (CAP_AUDIT_CONTROL): {e}")
            })?;
            enabled_audit = true;
            if let Some(share) = &share
                && let Err(e) = share.mark_enabled()
            {
                tracing::warn!("cannot note that cordon turned audit on: {e}");
            }
            tracing::warn!(
                "turned the kernel's audit on (it was off) to read Landlock denials; only \
                 cordon's processes get audit contexts, and the last cordon server to exit \
                 turns it off again (see SECURITY.md, \"Kernel-reported denials\")"
            );
        } else if share.as_ref().is_some_and(host::Share::enabled_by_cordon) {
            // Another server turned it on and narrowed it: this one's processes must be
            // cordon's too, or their denials go unrecorded.
            narrow_to_cordon(&control);
        } else if control
            .has_never_unless_loginuid(host::CORDON_LOGINUID)
            .unwrap_or(false)
        {
            // On without the marker (turned on by someone else, or by a server that died
            // before it could note it) while cordon's rule is in force: the kernel gives an
            // audit context only to tasks with cordon's login uid, so confined processes must
            // carry it, or each record of theirs comes alone and a denial is not tied to its
            // call's domain. The kernel's rules decide, not the marker; nothing is changed.
            CONFINED_LOGINUID.store(true, Ordering::Relaxed);
        }
        if status.backlog_limit != 0 && status.backlog_limit < BACKLOG_LIMIT {
            match control.set_backlog_limit(BACKLOG_LIMIT) {
                Ok(()) => tracing::info!(
                    "raised the kernel's audit backlog limit from {} to {BACKLOG_LIMIT}, so a \
                     call's burst of denials is ended before the kernel drops records",
                    status.backlog_limit
                ),
                Err(e) => tracing::warn!("cannot raise the audit backlog limit: {e}"),
            }
        }
        let me = Arc::new(Self {
            state: Mutex::new(State::default()),
            arrived: Condvar::new(),
            control: Mutex::new(control),
            next_barrier: AtomicU64::new(1),
            next_watch: AtomicU64::new(1),
            enabled_audit,
            alive: std::sync::atomic::AtomicBool::new(true),
            share: Mutex::new(share),
        });
        let shared = Arc::clone(&me);
        std::thread::Builder::new()
            .name("cordon-audit".into())
            .spawn(move || shared.read_loop(reader))
            .map_err(|e| format!("cannot start the audit reader thread: {e}"))?;
        Ok(me)
    }

    fn read_loop(&self, socket: netlink::AuditSocket) {
        loop {
            match socket.recv(-1) {
                // Another server's (or an unwatched) domain this reader keeps nothing more
                // of: dropped before the full parse, so a flood elsewhere costs this reader
                // a lookup per record and its socket does not overflow meanwhile.
                Ok(Some(msg))
                    if msg.kind == record::AUDIT_LANDLOCK_ACCESS
                        && record::access_domain(&msg.payload).is_some_and(|domain| {
                            self.state.lock().is_ok_and(|s| s.keeps_nothing_of(domain))
                        }) => {}
                Ok(Some(msg)) => {
                    if let Some(record) = record::parse(msg.kind, &msg.payload)
                        && let Ok(mut state) = self.state.lock()
                    {
                        let barrier = matches!(record, Record::Barrier { .. });
                        state.handle(record);
                        if barrier {
                            self.arrived.notify_all();
                        }
                    }
                }
                Ok(None) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    if let Ok(mut state) = self.state.lock() {
                        state.lost += 1;
                    }
                }
                Err(e) => {
                    tracing::warn!("the audit reader stopped: {e}; denials are no longer reported");
                    self.alive.store(false, Ordering::Release);
                    if let Ok(mut state) = self.state.lock() {
                        state.lost += 1;
                    }
                    self.arrived.notify_all();
                    return;
                }
            }
        }
    }

    /// Sends a barrier and waits until the reader has seen it. False when it did not come
    /// back in time (records may be missing).
    fn barrier(&self) -> bool {
        if !self.alive.load(Ordering::Acquire) {
            return false;
        }
        let number = {
            let Ok(control) = self.control.lock() else {
                return false;
            };
            let number = self.next_barrier.fetch_add(1, Ordering::Relaxed);
            let text = format!("{BARRIER_PREFIX}{}-{number}", std::process::id());
            if control.send_user_message(&text).is_err() {
                return false;
            }
            number
        };
        let deadline = Instant::now() + BARRIER_WAIT;
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        while state.barrier_seen < number {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = match self.arrived.wait_timeout(state, left) {
                Ok((s, _)) => s,
                Err(_) => return false,
            };
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(serial: u64, domain: u64, path: &str) -> Record {
        Record::Access(Access {
            serial,
            domain,
            blockers: vec!["fs.read_file".into()],
            path: Some(path.into()),
            port: None,
            address: None,
        })
    }

    fn allocated(serial: u64, domain: u64, pid: u32) -> Record {
        Record::Domain(Domain::Allocated {
            serial,
            domain,
            pid,
        })
    }

    fn watching(state: &mut State, id: u64, pid: u32) {
        state.register(id, pid);
    }

    #[test]
    fn a_domain_seen_before_its_call_registered_is_claimed() {
        let mut state = State::default();
        state.handle(access(1, 0xc, "/early"));
        state.handle(allocated(1, 0xc, 300));
        state.handle(access(2, 0xc, "/later"));
        watching(&mut state, 7, 300);
        state.handle(access(3, 0xc, "/after"));
        assert!(state.unclaimed.is_empty());
        let (_, call) = state.remove(7).unwrap();
        let paths: Vec<_> = call
            .denials
            .iter()
            .filter_map(|d| d.path.as_deref())
            .collect();
        assert_eq!(paths, ["/early", "/later", "/after"]);
    }

    #[test]
    fn the_fast_path_drops_only_what_would_change_nothing() {
        let mut state = State::default();
        state.handle(allocated(1, 0xf, 900));
        for serial in 0..MAX_UNCLAIMED_RECORDS as u64 {
            assert!(
                !state.keeps_nothing_of(0xf),
                "record {serial} is still kept"
            );
            state.handle(access(serial + 2, 0xf, "/foreign"));
        }
        assert!(state.keeps_nothing_of(0xf));
        // A domain never seen, and a call's own domain, are always parsed.
        assert!(!state.keeps_nothing_of(0xa));
        watching(&mut state, 1, 300);
        state.handle(allocated(50, 0xb, 300));
        for serial in 51..80 {
            state.handle(access(serial, 0xb, "/mine"));
        }
        assert!(!state.keeps_nothing_of(0xb));
        // The foreign domain's pid registering later claims what was kept, as before.
        watching(&mut state, 2, 900);
        assert!(!state.keeps_nothing_of(0xf));
    }

    #[test]
    fn a_noisy_call_keeps_a_bounded_record() {
        let mut state = State::default();
        watching(&mut state, 1, 100);
        state.handle(access(1, 0xd, "/f0"));
        state.handle(allocated(1, 0xd, 100));
        for i in 0..10_000u64 {
            state.handle(access(2 + i, 0xd, &format!("/f{}", i % 500)));
        }
        let (_, call) = state.remove(1).unwrap();
        assert_eq!(call.denials.len(), MAX_DENIALS_PER_CALL);
        assert_eq!(call.denials[0].path.as_deref(), Some("/f0"));
        let kept: u64 = call.denials.iter().map(|d| d.count).sum();
        assert_eq!(kept + call.not_kept, 10_001);
        assert!(state.by_domain.is_empty() && state.by_pid.is_empty());
    }

    #[test]
    fn records_go_only_to_the_call_whose_process_made_the_domain() {
        let mut state = State::default();
        watching(&mut state, 1, 100);
        watching(&mut state, 2, 200);
        state.handle(access(1, 0xa, "/mine"));
        state.handle(allocated(1, 0xa, 100));
        // Another process's domain (a host program using Landlock, or another call).
        state.handle(access(2, 0xb, "/theirs"));
        state.handle(allocated(2, 0xb, 999));
        state.handle(access(3, 0xb, "/theirs-again"));
        let (_, one) = state.remove(1).unwrap();
        let (_, two) = state.remove(2).unwrap();
        assert_eq!(one.denials.len(), 1);
        assert_eq!(one.denials[0].path.as_deref(), Some("/mine"));
        assert!(two.denials.is_empty());
        // The unknown domain waits, bounded, for a call that registers late.
        assert_eq!(state.unclaimed.len(), 1);
        assert_eq!(state.unclaimed[0].records.len(), 2);
        for d in 0..(MAX_UNCLAIMED as u64 * 2) {
            state.handle(allocated(10 + d, 0x100 + d, 5000 + d as u32));
        }
        assert_eq!(state.unclaimed.len(), MAX_UNCLAIMED);
    }

    #[test]
    fn only_this_servers_barriers_count() {
        let mut state = State::default();
        state.handle(Record::Barrier {
            pid: std::process::id().wrapping_add(1),
            number: 9,
        });
        assert_eq!(state.barrier_seen, 0);
        state.handle(Record::Barrier {
            pid: std::process::id(),
            number: 3,
        });
        assert_eq!(state.barrier_seen, 3);
    }
}
