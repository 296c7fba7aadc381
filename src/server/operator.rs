//! The operator's approval channel: `ask` rules answered on the host when the client cannot
//! ask its user (no elicitation), or when the policy prefers the operator
//! (`server.approvals`).
//!
//! Owns the host-only Unix socket and what it serves: the pending questions of this server
//! (command, rule, reason, age), listed and answered by `cordon approvals`, `cordon approve
//! ID` and `cordon deny ID` (`cli::approvals`), and the operators watching it (`cordon
//! approvals --watch`: a connection that stays open and is sent the list each time it
//! changes). One socket per server process, in a private directory ([`channel_dir`]:
//! `/run/cordon/` as root, else `$XDG_RUNTIME_DIR/cordon/`, else `/tmp/cordon-<uid>/`; mode
//! 0700, owned by this user, in a parent nobody else can rename it in), as
//! `approvals-<pid>.sock` (mode 0600, bound under a hidden name and renamed into place once
//! private) beside a token file `approvals-<pid>.token` (mode 0600) that every request must
//! quote.
//!
//! Whether an operator is there *now* is whether a watch connection is open
//! ([`OperatorChannel::watchers`]): a listing or an answer is a moment, a watch lasts as
//! long as the operator's terminal. `approval` asks the operator only then, and otherwise
//! refuses at once with a question left open ([`OperatorChannel::open`]) that the operator
//! can still approve for the call's retry.
//!
//! A confined process must never answer its own question. Three things see to it: the
//! directory is refused if it lies beneath the workspace or any path the policy grants, so
//! it is in no sandbox view (with namespaces the view has no `/run` or `/tmp` of the host at
//! all) and Landlock denies reading it everywhere; without namespaces seccomp refuses
//! `socket(AF_UNIX)` unless `sandbox.fallback_unix_sockets`; and where a confined process can
//! still connect (that opt-in: Landlock ABI 7 does not govern connecting to a named socket),
//! it cannot read the token, and a request without it is refused. Who answered is the
//! peer's kernel credentials (`SO_PEERCRED`), not anything the client says.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// Largest request line; a longer one is refused.
pub(crate) const MAX_REQUEST: usize = 8 * 1024;
/// How long one connection may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 16;
/// Questions waiting at once; one more is not asked (the call is refused, saying why).
pub(crate) const MAX_PENDING: usize = 64;
/// Watch connections at once; one more is refused, so watchers cannot take every
/// connection slot from `cordon approve`.
pub(crate) const MAX_WATCHERS: usize = 4;
/// How often a watcher is sent the list even when nothing changed (fresh ages; a peer that
/// went away without closing is found out by the failed write).
const WATCH_REFRESH: Duration = Duration::from_secs(10);
/// How long one write to a watcher may take before it is dropped (a watcher that does not
/// read must not hold a task forever).
const WATCH_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The approvals directory of a server running as root: `/run` is root's alone, so nobody
/// else can make the directory first (as anyone can in `/tmp`).
pub(crate) const ROOT_CHANNEL_DIR: &str = "/run/cordon";
/// Points servers and the CLI at another approvals directory (tests, or an operator who
/// keeps several apart); judged like any other.
pub(crate) const DIR_ENV: &str = "CORDON_APPROVALS_DIR";

#[derive(Debug, thiserror::Error)]
pub(crate) enum OperatorError {
    #[error("cannot prepare the approvals directory {}: {source}", path.display())]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the approvals directory {} is not private (it must be a directory of this user, mode \
         0700, not a symbolic link): {why}",
        path.display()
    )]
    NotPrivate { path: PathBuf, why: String },
    #[error(
        "the approvals directory {} lies beneath {}, which confined processes may read; set \
         XDG_RUNTIME_DIR to a directory outside the workspace and the policy's grants",
        dir.display(),
        granted.display()
    )]
    Visible { dir: PathBuf, granted: PathBuf },
    #[error("cannot open the approvals socket {}: {source}", path.display())]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The directory approval sockets live in, for this user: `$CORDON_APPROVALS_DIR` when set
/// (and absolute); as root [`ROOT_CHANNEL_DIR`] (root's `XDG_RUNTIME_DIR` is not used: under
/// `sudo -E` it is another user's directory); else `$XDG_RUNTIME_DIR/cordon` when that is
/// set (and absolute), else `/tmp/cordon-<uid>` (the host's `/tmp`, never a call's).
pub(crate) fn channel_dir() -> PathBuf {
    let env = |name| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let uid = rustix::process::geteuid();
    channel_dir_for(uid.as_raw(), env(DIR_ENV), env("XDG_RUNTIME_DIR"))
}

/// [`channel_dir`] for `uid` and the two variables as given.
fn channel_dir_for(uid: u32, explicit: Option<PathBuf>, xdg: Option<PathBuf>) -> PathBuf {
    match (explicit, uid, xdg) {
        (Some(dir), _, _) => dir,
        (None, 0, _) => PathBuf::from(ROOT_CHANNEL_DIR),
        (None, _, Some(xdg)) => xdg.join("cordon"),
        (None, uid, None) => PathBuf::from(format!("/tmp/cordon-{uid}")),
    }
}

/// Starts the operator channel when `server.approvals` names it; otherwise, or when it cannot
/// start (said on stderr), the reason it is not running.
pub(crate) fn start_for(ctx: &crate::runtime::Session) -> Result<OperatorChannel, String> {
    let runtime = &ctx.runtime;
    if !runtime
        .policy
        .server
        .approvals
        .contains(&crate::policy::ApprovalChannel::Operator)
    {
        return Err("`server.approvals` does not list \"operator\"".into());
    }
    // The token keeps a confined peer out only where it cannot read it: outside the sandbox
    // view (namespaces) or outside Landlock's grants. With neither, a command could answer
    // its own question.
    let enforcement = runtime.executor.confinement().enforcement();
    if !enforcement.namespaces && !enforcement.landlock.is_enforced() {
        let why = "without namespaces and without Landlock a confined command could read the \
                   channel's token and answer its own question";
        tracing::warn!("operator approvals are off: {why}");
        return Err(why.into());
    }
    let root = runtime.workspace.root();
    let plan = runtime.policy.resolve(root).confine;
    let mut granted = vec![root.to_path_buf()];
    granted.extend(
        plan.read_exec
            .into_iter()
            .chain(plan.read_write)
            .chain(plan.devices),
    );
    OperatorChannel::start(root, &granted).map_err(|e| {
        tracing::warn!("operator approvals are off: {e}");
        e.to_string()
    })
}

/// A request to a server's channel (one JSON line).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Request {
    List {
        token: String,
    },
    Answer {
        token: String,
        id: String,
        approve: bool,
    },
    /// Stay connected: the server sends [`Response::Pending`] now and each time its
    /// questions change, until the client closes the connection. While it is open an
    /// operator is there to ask.
    Watch {
        token: String,
    },
}

/// One question waiting for an answer, as listed.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PendingView {
    pub id: String,
    pub command: String,
    pub rule: String,
    pub reason: String,
    pub age_secs: u64,
}

/// A server's answer (one JSON line).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Response {
    Pending {
        workspace: String,
        pid: u32,
        pending: Vec<PendingView>,
    },
    Answered {
        id: String,
        /// The call that asked was answered already (no operator watched): the approval
        /// is for its retry.
        #[serde(default)]
        for_retry: bool,
    },
    Error {
        message: String,
    },
}

/// The operator's verdict and who gave it (`uid N, pid P` from the kernel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub approve: bool,
    pub by: String,
}

/// How waiting for the operator ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    Answered(Verdict),
    Expired,
    Cancelled,
    /// Too many questions are open already.
    Full,
}

struct Question {
    view: PendingView,
    since: Instant,
    /// Not listed, and not answerable, from then on.
    deadline: Instant,
    /// Its call returned already: an answer is kept for the retry.
    for_retry: bool,
    answer: tokio::sync::oneshot::Sender<Verdict>,
}

struct Shared {
    token: String,
    workspace: String,
    questions: Mutex<HashMap<String, Question>>,
    /// Bumped whenever a question is opened or closed: watchers send the list again.
    changed: tokio::sync::watch::Sender<u64>,
    /// The operators watching now (`uid N, pid P` from the kernel), by connection.
    watchers: Mutex<HashMap<u64, String>>,
}

impl Shared {
    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// One question opened on the channel: listed until it is answered, its deadline passes or
/// the ticket is dropped.
pub(crate) struct Ticket {
    shared: Arc<Shared>,
    id: String,
    since: Instant,
    deadline: Instant,
    answer: tokio::sync::oneshot::Receiver<Verdict>,
}

impl Ticket {
    /// The id the operator types (`cordon approve ID`).
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Whether the question can no longer be answered.
    pub(crate) fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// When it was opened.
    pub(crate) fn since(&self) -> Instant {
        self.since
    }

    /// How long it can still be answered.
    pub(crate) fn deadline_in(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The answer, if the operator gave one already.
    pub(crate) fn answered(&mut self) -> Option<Verdict> {
        self.answer.try_recv().ok()
    }

    /// Marks the question as one whose call returned: an answer is for its retry.
    pub(crate) fn park(&self) {
        if let Ok(mut q) = self.shared.questions.lock()
            && let Some(q) = q.get_mut(&self.id)
        {
            q.for_retry = true;
        }
    }

    /// Waits for the answer, the question's deadline or `cancel`.
    pub(crate) async fn wait(&mut self, cancel: &tokio_util::sync::CancellationToken) -> Waited {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if let Ok(mut q) = self.shared.questions.lock()
            && let Some(q) = q.get_mut(&self.id)
        {
            q.for_retry = false;
        }
        tokio::select! {
            answer = &mut self.answer => match answer {
                Ok(verdict) => Waited::Answered(verdict),
                Err(_) => Waited::Cancelled,
            },
            _ = cancel.cancelled() => Waited::Cancelled,
            _ = tokio::time::sleep(left) => Waited::Expired,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Ok(mut q) = self.shared.questions.lock()
            && q.remove(&self.id).is_some()
        {
            drop(q);
            self.shared.bump();
        }
    }
}

/// This server's channel; dropping it closes the socket and removes its files.
pub(crate) struct OperatorChannel {
    shared: Arc<Shared>,
    socket: PathBuf,
    token_file: PathBuf,
    accept: tokio::task::JoinHandle<()>,
}

impl OperatorChannel {
    /// Opens the socket in [`channel_dir`] and starts answering on it. `granted` are the
    /// paths confined processes may read (the workspace first): the directory must lie
    /// beneath none of them.
    pub(crate) fn start(workspace: &Path, granted: &[PathBuf]) -> Result<Self, OperatorError> {
        Self::start_in(&channel_dir(), workspace, granted)
    }

    pub(crate) fn start_in(
        dir: &Path,
        workspace: &Path,
        granted: &[PathBuf],
    ) -> Result<Self, OperatorError> {
        // Judged before anything is made, on the path as it will resolve (its parent's real
        // path), and again on the directory as it is.
        let planned = match (dir.parent(), dir.file_name()) {
            (Some(parent), Some(name)) => parent
                .canonicalize()
                .map(|p| p.join(name))
                .unwrap_or_else(|_| dir.to_owned()),
            _ => dir.to_owned(),
        };
        visible_to_confined(&planned, granted)?;
        let dir = private_dir(dir)?;
        visible_to_confined(&dir, granted)?;
        let pid = std::process::id();
        let socket = dir.join(format!("approvals-{pid}.sock"));
        let token_file = dir.join(format!("approvals-{pid}.token"));
        // A file of the same name is a leftover of a killed process that had our pid.
        let _ = std::fs::remove_file(&socket);
        let _ = std::fs::remove_file(&token_file);
        let failed = |path: &Path| {
            let path = path.to_owned();
            move |source| OperatorError::Socket { path, source }
        };
        // The token is the one thing a confined peer lacks: it must be unguessable, so no
        // randomness means no channel (never a clock-derived token).
        let token = random_hex().map_err(failed(&token_file))?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&token_file)
            .and_then(|mut f| f.write_all(token.as_bytes()))
            .map_err(failed(&token_file))?;
        // Bound under a hidden name and renamed into place once private: `cordon approvals`
        // refuses a socket others may use, and must never find ours in the moment between
        // bind (mode from the umask) and chmod.
        let hidden = dir.join(format!(".approvals-{pid}.sock.new"));
        let _ = std::fs::remove_file(&hidden);
        let listener = UnixListener::bind(&hidden).map_err(failed(&socket))?;
        std::fs::set_permissions(&hidden, std::fs::Permissions::from_mode(0o600))
            .and_then(|()| std::fs::rename(&hidden, &socket))
            .map_err(|e| {
                let _ = std::fs::remove_file(&hidden);
                let _ = std::fs::remove_file(&token_file);
                failed(&socket)(e)
            })?;
        let shared = Arc::new(Shared {
            token,
            workspace: workspace.display().to_string(),
            questions: Mutex::default(),
            changed: tokio::sync::watch::Sender::new(0),
            watchers: Mutex::default(),
        });
        let accept = tokio::spawn(serve(listener, Arc::clone(&shared)));
        tracing::info!(
            "operator approvals on {} (`cordon approvals` lists them)",
            socket.display()
        );
        Ok(Self {
            shared,
            socket,
            token_file,
            accept,
        })
    }

    /// Puts a question to the operator and waits for the answer, the timeout or `cancel`.
    /// `on_open` is called once with the question's id when it is listed.
    pub(crate) async fn ask(
        &self,
        command: &str,
        rule: &str,
        reason: &str,
        timeout: Duration,
        cancel: &tokio_util::sync::CancellationToken,
        on_open: impl FnOnce(&str),
    ) -> Waited {
        let Some(mut ticket) = self.open(command, rule, reason, timeout) else {
            return Waited::Full;
        };
        on_open(ticket.id());
        ticket.wait(cancel).await
    }

    /// Lists a question for `open_for` (or until the ticket is dropped) without waiting
    /// for it. None when [`MAX_PENDING`] questions are open already.
    pub(crate) fn open(
        &self,
        command: &str,
        rule: &str,
        reason: &str,
        open_for: Duration,
    ) -> Option<Ticket> {
        let id = short_id();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let now = Instant::now();
        let deadline = now + open_for;
        {
            let mut questions = self.shared.questions.lock().ok()?;
            questions.retain(|_, q| q.deadline > now);
            if questions.len() >= MAX_PENDING {
                return None;
            }
            questions.insert(
                id.clone(),
                Question {
                    view: PendingView {
                        id: id.clone(),
                        command: crate::text::shortened(command, 2000).into_owned(),
                        rule: rule.to_owned(),
                        reason: reason.to_owned(),
                        age_secs: 0,
                    },
                    since: now,
                    deadline,
                    for_retry: false,
                    answer: tx,
                },
            );
        }
        self.shared.bump();
        Some(Ticket {
            shared: Arc::clone(&self.shared),
            id,
            since: now,
            deadline,
            answer: rx,
        })
    }

    /// The operators watching this server's questions now (`cordon approvals --watch`),
    /// each as the kernel names its process (`uid N, pid P`); empty when nobody watches.
    pub(crate) fn watchers(&self) -> Vec<String> {
        let mut who: Vec<String> = self
            .shared
            .watchers
            .lock()
            .map(|w| w.values().cloned().collect())
            .unwrap_or_default();
        who.sort();
        who
    }
}

impl Drop for OperatorChannel {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.token_file);
    }
}

/// Refuses `dir` when it lies beneath a path confined processes may read.
fn visible_to_confined(dir: &Path, granted: &[PathBuf]) -> Result<(), OperatorError> {
    for g in granted {
        let g = g.canonicalize().unwrap_or_else(|_| g.clone());
        if dir.starts_with(&g) {
            return Err(OperatorError::Visible {
                dir: dir.to_owned(),
                granted: g,
            });
        }
    }
    Ok(())
}

/// `dir` made (mode 0700) or checked: a real directory of ours that nobody else can enter.
/// Returns it canonical.
fn private_dir(dir: &Path) -> Result<PathBuf, OperatorError> {
    let io = |source| OperatorError::Dir {
        path: dir.to_owned(),
        source,
    };
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(io)?;
    let not_private = |why: String| OperatorError::NotPrivate {
        path: dir.to_owned(),
        why,
    };
    if !meta.file_type().is_dir() {
        return Err(not_private("it is not a directory".into()));
    }
    let uid = rustix::process::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(not_private(format!(
            "it belongs to uid {}, not {uid}",
            meta.uid()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(not_private(format!(
            "its mode is {:o}",
            meta.mode() & 0o777
        )));
    }
    let canonical = dir.canonicalize().map_err(io)?;
    // Nobody else may rename or replace the directory in its parent: a parent of root's or
    // ours that others cannot write, or a sticky one (`/tmp`: only the entry's owner renames).
    if let Some(parent) = canonical.parent() {
        let pmeta = std::fs::metadata(parent).map_err(io)?;
        let owner_ok = pmeta.uid() == 0 || pmeta.uid() == uid;
        let shared = pmeta.mode() & 0o022 != 0 && pmeta.mode() & 0o1000 == 0;
        if !owner_ok || shared {
            return Err(not_private(format!(
                "its parent {} (uid {}, mode {:o}) lets another user rename or replace it",
                parent.display(),
                pmeta.uid(),
                pmeta.mode() & 0o7777
            )));
        }
    }
    Ok(canonical)
}

async fn serve(listener: UnixListener, shared: Arc<Shared>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let next = std::sync::atomic::AtomicU64::new(0);
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("operator approvals: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::spawn(async move {
            let _permit = permit;
            let _ = connection(stream, &shared, n).await;
        });
    }
}

async fn connection(stream: UnixStream, shared: &Shared, n: u64) -> std::io::Result<()> {
    let by = match stream.peer_cred() {
        Ok(cred) => match cred.pid() {
            Some(pid) => format!("uid {}, pid {pid}", cred.uid()),
            None => format!("uid {}", cred.uid()),
        },
        Err(_) => "an unidentified peer".to_owned(),
    };
    let (read, mut write) = stream.into_split();
    let mut line = Vec::new();
    let mut reader = BufReader::new(read.take(MAX_REQUEST as u64 + 1));
    // The request within its time; only a watch outlives it.
    match tokio::time::timeout(REQUEST_TIMEOUT, reader.read_until(b'\n', &mut line)).await {
        Ok(read) => read?,
        Err(_) => return Ok(()),
    };
    let response = if line.len() > MAX_REQUEST {
        error(format!("the request is over {MAX_REQUEST} bytes"))
    } else {
        match serde_json::from_slice::<Request>(&line) {
            Ok(Request::Watch { token }) if same(token.as_bytes(), shared.token.as_bytes()) => {
                return watch(reader.into_inner().into_inner(), write, shared, n, by).await;
            }
            Ok(request) => answer(shared, request, by),
            Err(e) => error(format!("not a request this server understands: {e}")),
        }
    };
    send(&mut write, &response).await
}

async fn send(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    response: &Response,
) -> std::io::Result<()> {
    let mut out = serde_json::to_vec(response).unwrap_or_default();
    out.push(b'\n');
    match tokio::time::timeout(WATCH_WRITE_TIMEOUT, write.write_all(&out)).await {
        Ok(written) => written,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

/// An operator watching: the list now and at each change (and every [`WATCH_REFRESH`]),
/// until the peer closes its side or stops reading. While this runs the operator counts as
/// there ([`OperatorChannel::watchers`]).
async fn watch(
    mut read: tokio::net::unix::OwnedReadHalf,
    mut write: tokio::net::unix::OwnedWriteHalf,
    shared: &Shared,
    n: u64,
    by: String,
) -> std::io::Result<()> {
    let attached = match shared.watchers.lock() {
        Ok(mut watchers) if watchers.len() < MAX_WATCHERS => {
            watchers.insert(n, by.clone());
            true
        }
        _ => false,
    };
    if !attached {
        let full = error(format!(
            "{MAX_WATCHERS} operators watch this server already; close one `cordon approvals \
             --watch` first"
        ));
        return send(&mut write, &full).await;
    }
    tracing::info!("operator approvals: {by} watches");
    struct Detach<'a>(&'a Shared, u64);
    impl Drop for Detach<'_> {
        fn drop(&mut self) {
            if let Ok(mut w) = self.0.watchers.lock() {
                w.remove(&self.1);
            }
        }
    }
    let _detach = Detach(shared, n);
    let mut changed = shared.changed.subscribe();
    let mut scratch = [0u8; 256];
    loop {
        let listing = list(shared);
        send(&mut write, &listing).await?;
        tokio::select! {
            // The watcher says nothing after its request: any read that ends is it leaving.
            got = read.read(&mut scratch) => match got {
                Ok(0) | Err(_) => return Ok(()),
                Ok(_) => {}
            },
            seen = changed.changed() => if seen.is_err() { return Ok(()) },
            _ = tokio::time::sleep(WATCH_REFRESH) => {}
        }
    }
}

fn error(message: String) -> Response {
    Response::Error { message }
}

/// The open questions, oldest first.
fn list(shared: &Shared) -> Response {
    let now = Instant::now();
    let mut pending: Vec<PendingView> = shared
        .questions
        .lock()
        .map(|questions| {
            questions
                .values()
                .filter(|q| q.deadline > now)
                .map(|q| PendingView {
                    age_secs: q.since.elapsed().as_secs(),
                    ..q.view.clone()
                })
                .collect()
        })
        .unwrap_or_default();
    pending.sort_by_key(|p| std::cmp::Reverse(p.age_secs));
    Response::Pending {
        workspace: shared.workspace.clone(),
        pid: std::process::id(),
        pending,
    }
}

fn answer(shared: &Shared, request: Request, by: String) -> Response {
    let token = match &request {
        Request::List { token } | Request::Answer { token, .. } | Request::Watch { token } => token,
    };
    if !same(token.as_bytes(), shared.token.as_bytes()) {
        tracing::warn!("operator approvals: a request from {by} without the token was refused");
        return error(
            "the token does not match this server's (read it from the .token file beside the \
             socket, as `cordon approvals` does)"
                .into(),
        );
    }
    match request {
        Request::List { .. } | Request::Watch { .. } => list(shared),
        Request::Answer { id, approve, .. } => {
            let Ok(mut questions) = shared.questions.lock() else {
                return error("the server's question list is unavailable".into());
            };
            let open = questions
                .get(&id)
                .is_some_and(|q| q.deadline > Instant::now());
            match open.then(|| questions.remove(&id)).flatten() {
                Some(q) => {
                    drop(questions);
                    shared.bump();
                    tracing::info!(
                        "operator approvals: {id} ({}) {} by {by}",
                        q.view.rule,
                        if approve { "approved" } else { "denied" }
                    );
                    let _ = q.answer.send(Verdict { approve, by });
                    Response::Answered {
                        id,
                        for_retry: q.for_retry,
                    }
                }
                None => error(format!("no question {id} is waiting on this server")),
            }
        }
    }
}

/// 256 random bits from the kernel, hex.
fn random_hex() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Constant-time comparison of two tokens.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 128 random bits, hex: an unguessable handle (the value itself means nothing).
pub(super) fn random_handle() -> String {
    let mut bytes = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if filled.is_err() {
        // Without randomness a handle could be guessed, but a guessed handle only lets the
        // client re-answer its own question for the same arguments; still, mix in the clock.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes.copy_from_slice(&nanos.to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 8 hex digits: short enough to type, and unique among the open questions of all servers
/// in practice (the CLI asks every server for it and only the one holding it answers).
fn short_id() -> String {
    random_handle()[..8].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_others_can_enter_or_a_symlink_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            private_dir(&open),
            Err(OperatorError::NotPrivate { .. })
        ));
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path(), &link).unwrap();
        assert!(matches!(
            private_dir(&link),
            Err(OperatorError::NotPrivate { .. })
        ));
        let fresh = tmp.path().join("fresh");
        private_dir(&fresh).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[tokio::test]
    async fn a_directory_beneath_a_granted_path_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("ws")).unwrap();
        let dir = tmp.path().join("ws/.cordon/approvals");
        let err = OperatorChannel::start_in(&dir, &tmp.path().join("ws"), &[tmp.path().join("ws")])
            .err()
            .expect("refused");
        assert!(matches!(err, OperatorError::Visible { .. }), "{err}");
        assert!(
            !tmp.path().join("ws/.cordon").exists(),
            "nothing was made in the workspace"
        );
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}
