//! The operator's approval channel: `ask` rules answered on the host when the client cannot
//! ask its user (no elicitation), or when the policy prefers the operator
//! (`server.approvals`).
//!
//! Owns the host-only Unix socket and what it serves: the pending questions of this server
//! (command, rule, reason, age), listed and answered by `cordon approvals`, `cordon approve
//! ID` and `cordon deny ID` (`cli::approvals`). One socket per server process, in a private
//! directory ([`channel_dir`]: `$XDG_RUNTIME_DIR/cordon/`, else `/tmp/cordon-<uid>/`, mode
//! 0700, owned by this user), as `approvals-<pid>.sock` (mode 0600) beside a token file
//! `approvals-<pid>.token` (mode 0600) that every request must quote.
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
pub const MAX_REQUEST: usize = 8 * 1024;
/// How long one connection may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 16;
/// Questions waiting at once; one more is not asked (the call is refused, saying why).
pub const MAX_PENDING: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
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

/// The directory approval sockets live in, for this user: `$XDG_RUNTIME_DIR/cordon` when
/// that is set (and absolute), else `/tmp/cordon-<uid>` (the host's `/tmp`, never a call's).
pub fn channel_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("cordon"),
        _ => PathBuf::from(format!(
            "/tmp/cordon-{}",
            rustix::process::getuid().as_raw()
        )),
    }
}

/// Starts the operator channel when `server.approvals` names it; otherwise, or when it cannot
/// start (said on stderr), the reason it is not running.
pub fn start_for(ctx: &crate::runtime::Session) -> Result<OperatorChannel, String> {
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
pub enum Request {
    List {
        token: String,
    },
    Answer {
        token: String,
        id: String,
        approve: bool,
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
pub enum Response {
    Pending {
        workspace: String,
        pid: u32,
        pending: Vec<PendingView>,
    },
    Answered {
        id: String,
    },
    Error {
        message: String,
    },
}

/// The operator's verdict and who gave it (`uid N, pid P` from the kernel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub approve: bool,
    pub by: String,
}

/// How waiting for the operator ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited {
    Answered(Verdict),
    Expired,
    Cancelled,
    /// Too many questions are open already.
    Full,
}

struct Question {
    view: PendingView,
    since: Instant,
    answer: tokio::sync::oneshot::Sender<Verdict>,
}

struct Shared {
    token: String,
    workspace: String,
    questions: Mutex<HashMap<String, Question>>,
}

/// This server's channel; dropping it closes the socket and removes its files.
pub struct OperatorChannel {
    shared: Arc<Shared>,
    socket: PathBuf,
    token_file: PathBuf,
    accept: tokio::task::JoinHandle<()>,
}

impl OperatorChannel {
    /// Opens the socket in [`channel_dir`] and starts answering on it. `granted` are the
    /// paths confined processes may read (the workspace first): the directory must lie
    /// beneath none of them.
    pub fn start(workspace: &Path, granted: &[PathBuf]) -> Result<Self, OperatorError> {
        Self::start_in(&channel_dir(), workspace, granted)
    }

    pub fn start_in(
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
        let listener = UnixListener::bind(&socket).map_err(failed(&socket))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(failed(&socket))?;
        let shared = Arc::new(Shared {
            token,
            workspace: workspace.display().to_string(),
            questions: Mutex::default(),
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

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Puts a question to the operator and waits for the answer, the timeout or `cancel`.
    /// `on_open` is called once with the question's id when it is listed.
    pub async fn ask(
        &self,
        command: &str,
        rule: &str,
        reason: &str,
        timeout: Duration,
        cancel: &tokio_util::sync::CancellationToken,
        on_open: impl FnOnce(&str),
    ) -> Waited {
        let id = short_id();
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let Ok(mut questions) = self.shared.questions.lock() else {
                return Waited::Full;
            };
            if questions.len() >= MAX_PENDING {
                return Waited::Full;
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
                    since: Instant::now(),
                    answer: tx,
                },
            );
        }
        // However the wait ends, the question is no longer listed.
        let _forget = Forget {
            shared: &self.shared,
            id: &id,
        };
        on_open(&id);
        tokio::select! {
            answer = rx => match answer {
                Ok(verdict) => Waited::Answered(verdict),
                Err(_) => Waited::Cancelled,
            },
            _ = cancel.cancelled() => Waited::Cancelled,
            _ = tokio::time::sleep(timeout) => Waited::Expired,
        }
    }
}

impl Drop for OperatorChannel {
    fn drop(&mut self) {
        self.accept.abort();
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.token_file);
    }
}

struct Forget<'a> {
    shared: &'a Shared,
    id: &'a str,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        if let Ok(mut q) = self.shared.questions.lock() {
            q.remove(self.id);
        }
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
    let uid = rustix::process::getuid().as_raw();
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
    dir.canonicalize().map_err(io)
}

async fn serve(listener: UnixListener, shared: Arc<Shared>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
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
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, connection(stream, &shared)).await;
        });
    }
}

async fn connection(stream: UnixStream, shared: &Shared) -> std::io::Result<()> {
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
    reader.read_until(b'\n', &mut line).await?;
    let response = if line.len() > MAX_REQUEST {
        error(format!("the request is over {MAX_REQUEST} bytes"))
    } else {
        match serde_json::from_slice::<Request>(&line) {
            Ok(request) => answer(shared, request, by),
            Err(e) => error(format!("not a request this server understands: {e}")),
        }
    };
    let mut out = serde_json::to_vec(&response).unwrap_or_default();
    out.push(b'\n');
    write.write_all(&out).await
}

fn error(message: String) -> Response {
    Response::Error { message }
}

fn answer(shared: &Shared, request: Request, by: String) -> Response {
    let token = match &request {
        Request::List { token } | Request::Answer { token, .. } => token,
    };
    if !same(token.as_bytes(), shared.token.as_bytes()) {
        tracing::warn!("operator approvals: a request from {by} without the token was refused");
        return error(
            "the token does not match this server's (read it from the .token file beside the \
             socket, as `cordon approvals` does)"
                .into(),
        );
    }
    let Ok(mut questions) = shared.questions.lock() else {
        return error("the server's question list is unavailable".into());
    };
    match request {
        Request::List { .. } => {
            let mut pending: Vec<PendingView> = questions
                .values()
                .map(|q| PendingView {
                    age_secs: q.since.elapsed().as_secs(),
                    ..q.view.clone()
                })
                .collect();
            pending.sort_by_key(|p| std::cmp::Reverse(p.age_secs));
            Response::Pending {
                workspace: shared.workspace.clone(),
                pid: std::process::id(),
                pending,
            }
        }
        Request::Answer { id, approve, .. } => match questions.remove(&id) {
            Some(q) => {
                tracing::info!(
                    "operator approvals: {id} ({}) {} by {by}",
                    q.view.rule,
                    if approve { "approved" } else { "denied" }
                );
                let _ = q.answer.send(Verdict { approve, by });
                Response::Answered { id }
            }
            None => error(format!("no question {id} is waiting on this server")),
        },
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
