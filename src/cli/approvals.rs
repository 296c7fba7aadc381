//! `cordon approvals`, `cordon approve ID`, `cordon deny ID`: the operator's side of the
//! approval channel (`server::operator`).
//!
//! Owns finding this user's running servers (every `approvals-<pid>.sock` in the channel
//! directory with its `.token` beside it), asking each for its pending questions, and
//! answering one by id (the server holding it answers; the others say they do not know it),
//! and watching them (`--watch`: attached to every server, which then knows an operator is
//! there to ask).
//!
//! Nothing found there is trusted until it is shown to be this user's own: the directory, each
//! socket and each token must belong to the CLI's uid and be closed to others (else the entry
//! is refused with its path, owner and mode and how to fix it, never listed or answered), the
//! server behind a socket must run as this uid (`SO_PEERCRED`), and every text a server sends
//! is shown with its control characters escaped. A socket nobody listens on (connection
//! refused) is a killed server's leftover: it and its token are removed.

use crate::server::operator::{self, PendingView, Request, Response};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Largest token file read.
const MAX_TOKEN: u64 = 1024;

/// How long one server may take to answer.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Largest answer read from a server.
const MAX_RESPONSE: u64 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ApprovalsError {
    #[error("cannot read the approvals directory {}: {source}", dir.display())]
    Dir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "no question {id} is waiting on any cordon server of this user (run `cordon approvals` \
         to list them; a question ends when it is answered, times out or its call is cancelled)"
    )]
    NotFound { id: String },
    #[error(
        "`{id}` is not a question id: ids are the 8 hexadecimal digits `cordon approvals` lists"
    )]
    BadId { id: String },
    #[error("the server at {} refused: {message}", socket.display())]
    Refused { socket: PathBuf, message: String },
    #[error(
        "refusing the approvals directory {}: {why}; a cordon server of yours (uid {me}) makes \
         it as its own with mode 700, so this one may be another user's trap. Remove it if \
         nothing of yours uses it, or point --dir (or {}) at your own",
        dir.display(),
        operator::DIR_ENV
    )]
    Untrusted { dir: PathBuf, why: String, me: u32 },
}

/// One running server's questions.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServerQuestions {
    pub socket: PathBuf,
    pub workspace: String,
    pub pid: u32,
    pub pending: Vec<PendingView>,
}

/// What asking every server found: their questions, the sockets that did not answer, the
/// entries refused as not this user's, and the stale sockets removed.
#[derive(Debug, Default, serde::Serialize)]
pub struct Listing {
    pub servers: Vec<ServerQuestions>,
    pub unreachable: Vec<String>,
    pub refused: Vec<String>,
    pub pruned: Vec<String>,
}

fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Why `meta` is not this user's private entry, in words (owner and mode), or None.
fn not_private(meta: &std::fs::Metadata) -> Option<String> {
    let (uid, mode) = (meta.uid(), meta.mode() & 0o7777);
    if uid != me() {
        Some(format!(
            "it belongs to uid {uid} (mode {mode:o}), not to you (uid {})",
            me()
        ))
    } else if mode & 0o077 != 0 {
        Some(format!(
            "others may use it (mode {mode:o}; yours are 600/700)"
        ))
    } else {
        None
    }
}

/// The directory, checked: absent (no servers), or a real directory of ours closed to others.
fn checked_dir(dir: &Path) -> Result<bool, ApprovalsError> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(ApprovalsError::Dir {
                dir: dir.to_owned(),
                source,
            });
        }
    };
    let why = if !meta.file_type().is_dir() {
        Some(format!(
            "it is not a directory (a {})",
            if meta.file_type().is_symlink() {
                "symbolic link"
            } else {
                "file"
            }
        ))
    } else {
        not_private(&meta)
    };
    match why {
        Some(why) => Err(ApprovalsError::Untrusted {
            dir: dir.to_owned(),
            why,
            me: me(),
        }),
        None => Ok(true),
    }
}

/// The sockets in `dir`, each with its token file.
fn sockets(dir: &Path) -> Result<Vec<(PathBuf, PathBuf)>, ApprovalsError> {
    if !checked_dir(dir)? {
        return Ok(Vec::new());
    }
    let entries = std::fs::read_dir(dir).map_err(|source| ApprovalsError::Dir {
        dir: dir.to_owned(),
        source,
    })?;
    let mut out: Vec<(PathBuf, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("approvals-") && n.ends_with(".sock"))
        })
        .map(|p| {
            let token = p.with_extension("token");
            (p, token)
        })
        .collect();
    out.sort();
    Ok(out)
}

/// How reaching one server failed.
enum Unreached {
    /// Not this user's: refused, said, never asked.
    Refused(String),
    /// Nobody listens: a killed server's leftover (removed).
    Stale,
    /// Gone meanwhile (the server ended).
    Gone,
    Other(String),
}

/// A connection to the server at `socket` with its token, once the socket, the token and
/// the server's process are shown to be this user's.
fn connect(socket: &Path, token_file: &Path) -> Result<(UnixStream, String), Unreached> {
    let shown = socket.display();
    let meta = match std::fs::symlink_metadata(socket) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unreached::Gone),
        Err(e) => return Err(Unreached::Other(format!("{shown}: {e}"))),
    };
    if !meta.file_type().is_socket() {
        return Err(Unreached::Refused(format!(
            "{shown}: not a socket; remove it"
        )));
    }
    if let Some(why) = not_private(&meta) {
        return Err(Unreached::Refused(format!(
            "{shown}: {why}; not a socket of your servers, so it is not asked (remove it)"
        )));
    }
    let token = read_token(token_file).map_err(Unreached::Refused)?;
    let stream = match UnixStream::connect(socket) {
        Ok(stream) => stream,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(Unreached::Stale);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unreached::Gone),
        Err(e) => return Err(Unreached::Other(format!("{shown}: {e}"))),
    };
    match rustix::net::sockopt::socket_peercred(&stream) {
        Ok(cred) if cred.uid.as_raw() == me() => Ok((stream, token)),
        Ok(cred) => Err(Unreached::Refused(format!(
            "{shown}: the process listening there runs as uid {}, not you (uid {}); not asked",
            cred.uid.as_raw(),
            me()
        ))),
        Err(e) => Err(Unreached::Other(format!("{shown}: {e}"))),
    }
}

/// The token, read only from a regular file of ours closed to others (never through a
/// link, never blocking on a FIFO), bounded.
fn read_token(token_file: &Path) -> Result<String, String> {
    let shown = token_file.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(token_file)
        .map_err(|e| format!("cannot read its token {shown}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!(
            "its token {shown} is not a regular file; remove it"
        ));
    }
    if let Some(why) = not_private(&meta) {
        return Err(format!("its token {shown}: {why}; not asked (remove it)"));
    }
    let mut text = String::new();
    file.take(MAX_TOKEN)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read its token {shown}: {e}"))?;
    Ok(text.trim().to_owned())
}

/// Removes a stale socket and its token (both shown to be ours by [`connect`]).
fn prune(socket: &Path, token_file: &Path) -> bool {
    let removed = std::fs::remove_file(socket).is_ok();
    let _ = std::fs::remove_file(token_file);
    removed
}

/// One request to one server, one answer back.
fn exchange(stream: UnixStream, request: &Request) -> Result<Response, String> {
    stream.set_read_timeout(Some(TIMEOUT)).ok();
    stream.set_write_timeout(Some(TIMEOUT)).ok();
    let mut line = serde_json::to_vec(request).map_err(|e| e.to_string())?;
    line.push(b'\n');
    (&stream).write_all(&line).map_err(|e| e.to_string())?;
    read_response(&mut BufReader::new(Read::take(&stream, MAX_RESPONSE)))
}

fn read_response(reader: &mut impl BufRead) -> Result<Response, String> {
    let mut answer = Vec::new();
    reader
        .read_until(b'\n', &mut answer)
        .map_err(|e| e.to_string())?;
    if answer.is_empty() {
        return Err("the server closed the connection".into());
    }
    serde_json::from_slice(&answer)
        .map(clean_response)
        .map_err(|e| format!("not an answer: {e}"))
}

/// Every text a server sent, with control characters (and bidirectional overrides) shown
/// as `\u{..}`: a command, a rule or a workspace name must not paint over the terminal.
fn clean_response(response: Response) -> Response {
    match response {
        Response::Pending {
            workspace,
            pid,
            pending,
        } => Response::Pending {
            workspace: one_line(&workspace),
            pid,
            pending: pending
                .into_iter()
                .map(|p| PendingView {
                    id: one_line(&p.id),
                    command: one_line(&p.command),
                    rule: one_line(&p.rule),
                    reason: one_line(&p.reason),
                    age_secs: p.age_secs,
                })
                .collect(),
        },
        Response::Answered { id, for_retry } => Response::Answered {
            id: one_line(&id),
            for_retry,
        },
        Response::Error { message } => Response::Error {
            message: one_line(&message),
        },
    }
}

/// Every server's pending questions, from the sockets in `dir`.
pub fn list(dir: &Path) -> Result<Listing, ApprovalsError> {
    let mut listing = Listing::default();
    for (socket, token_file) in sockets(dir)? {
        let reply = match connect(&socket, &token_file) {
            Ok((stream, token)) => exchange(stream, &Request::List { token }),
            Err(Unreached::Refused(why)) => {
                listing.refused.push(why);
                continue;
            }
            Err(Unreached::Stale) => {
                if prune(&socket, &token_file) {
                    listing.pruned.push(socket.display().to_string());
                }
                continue;
            }
            Err(Unreached::Gone) => continue,
            Err(Unreached::Other(e)) => Err(e),
        };
        match reply {
            Ok(Response::Pending {
                workspace,
                pid,
                pending,
            }) => listing.servers.push(ServerQuestions {
                socket,
                workspace,
                pid,
                pending,
            }),
            Ok(Response::Error { message }) => {
                listing
                    .unreachable
                    .push(format!("{}: {message}", socket.display()));
            }
            Ok(_) => listing
                .unreachable
                .push(format!("{}: an answer of the wrong kind", socket.display())),
            Err(e) => listing
                .unreachable
                .push(format!("{}: {e}", socket.display())),
        }
    }
    Ok(listing)
}

/// How an answer was taken.
#[derive(Debug)]
pub struct Answered {
    /// The socket of the server that held the question.
    pub socket: PathBuf,
    /// The call that asked had been refused already (nobody watched): the answer is for its
    /// retry.
    pub for_retry: bool,
}

/// Answers question `id` on whichever server holds it.
pub fn answer(dir: &Path, id: &str, approve: bool) -> Result<Answered, ApprovalsError> {
    if id.len() != 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApprovalsError::BadId { id: id.to_owned() });
    }
    let id = id.to_ascii_lowercase();
    for (socket, token_file) in sockets(dir)? {
        let (stream, token) = match connect(&socket, &token_file) {
            Ok(found) => found,
            Err(Unreached::Stale) => {
                prune(&socket, &token_file);
                continue;
            }
            Err(_) => continue,
        };
        let request = Request::Answer {
            token,
            id: id.clone(),
            approve,
        };
        match exchange(stream, &request) {
            Ok(Response::Answered { for_retry, .. }) => {
                return Ok(Answered { socket, for_retry });
            }
            Ok(Response::Error { message }) if message.contains("token") => {
                return Err(ApprovalsError::Refused { socket, message });
            }
            _ => continue,
        }
    }
    Err(ApprovalsError::NotFound { id })
}

/// `cordon approvals --watch`: attaches to every server of `dir` (and to servers that start
/// later: the directory is looked at again every second) and calls `show` with the whole
/// listing each time one of them sends its questions. While attached, each server knows an
/// operator is there to ask. Returns only on an error about the directory.
pub fn watch(dir: &Path, mut show: impl FnMut(&Listing)) -> Result<(), ApprovalsError> {
    use std::collections::BTreeMap;
    use std::sync::mpsc;
    enum Update {
        Pending(PathBuf, ServerQuestions),
        Ended(PathBuf),
    }
    let (tx, rx) = mpsc::channel::<Update>();
    let mut attached: BTreeMap<PathBuf, Option<ServerQuestions>> = BTreeMap::new();
    let mut notes = Listing::default();
    loop {
        for (socket, token_file) in sockets(dir)? {
            if attached.contains_key(&socket) {
                continue;
            }
            let (stream, token) = match connect(&socket, &token_file) {
                Ok(found) => found,
                Err(Unreached::Refused(why)) => {
                    if !notes.refused.contains(&why) {
                        notes.refused.push(why);
                    }
                    continue;
                }
                Err(Unreached::Stale) => {
                    if prune(&socket, &token_file) {
                        notes.pruned.push(socket.display().to_string());
                    }
                    continue;
                }
                Err(_) => continue,
            };
            attached.insert(socket.clone(), None);
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut line = serde_json::to_vec(&Request::Watch { token }).unwrap_or_default();
                line.push(b'\n');
                if (&stream).write_all(&line).is_ok() {
                    let mut reader = BufReader::new(&stream);
                    while let Ok(Response::Pending {
                        workspace,
                        pid,
                        pending,
                    }) = read_response(&mut reader)
                    {
                        let server = ServerQuestions {
                            socket: socket.clone(),
                            workspace,
                            pid,
                            pending,
                        };
                        if tx.send(Update::Pending(socket.clone(), server)).is_err() {
                            return;
                        }
                    }
                }
                let _ = tx.send(Update::Ended(socket));
            });
        }
        let mut changed = !notes.refused.is_empty() || !notes.pruned.is_empty();
        while let Ok(update) = rx.recv_timeout(if changed {
            Duration::ZERO
        } else {
            Duration::from_secs(1)
        }) {
            changed = true;
            match update {
                Update::Pending(socket, server) => {
                    attached.insert(socket, Some(server));
                }
                Update::Ended(socket) => {
                    attached.remove(&socket);
                }
            }
        }
        if changed {
            let listing = Listing {
                servers: attached
                    .values()
                    .flatten()
                    .map(ServerQuestions::clone)
                    .collect(),
                unreachable: Vec::new(),
                refused: std::mem::take(&mut notes.refused),
                pruned: std::mem::take(&mut notes.pruned),
            };
            show(&listing);
        }
    }
}

/// The listing as a table: one block per server with questions, then what did not answer.
pub fn render(listing: &Listing, dir: &Path) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let waiting: usize = listing.servers.iter().map(|s| s.pending.len()).sum();
    if waiting == 0 {
        let _ = writeln!(
            o,
            "No approvals are waiting ({} cordon server(s) of this user answer on {}).",
            listing.servers.len(),
            dir.display()
        );
    }
    for server in listing.servers.iter().filter(|s| !s.pending.is_empty()) {
        let _ = writeln!(
            o,
            "cordon pid {} (workspace {}):",
            server.pid, server.workspace
        );
        let _ = writeln!(
            o,
            "  {:<8}  {:>6}  {:<24}  COMMAND / REASON",
            "ID", "AGE", "RULE"
        );
        for p in &server.pending {
            let _ = writeln!(
                o,
                "  {:<8}  {:>5}s  {:<24}  {}",
                p.id,
                p.age_secs,
                p.rule,
                one_line(&p.command)
            );
            let _ = writeln!(o, "  {:<8}  {:>6}  {:<24}  why: {}", "", "", "", p.reason);
        }
    }
    if waiting > 0 {
        let _ = writeln!(o, "Answer with `cordon approve ID` or `cordon deny ID`.");
    }
    for u in &listing.unreachable {
        let _ = writeln!(o, "note: {u}");
    }
    for r in &listing.refused {
        let _ = writeln!(o, "refused: {r}");
    }
    for p in &listing.pruned {
        let _ = writeln!(
            o,
            "removed {p}: its server is gone (a killed server leaves it behind)"
        );
    }
    o
}

/// A text on one line: control characters (newlines, escapes a model could use to paint
/// over the terminal) and bidirectional overrides shown as `\u{..}`.
fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
                c.escape_unicode().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// The directory `cordon approvals` looks in: `--dir`, else the servers' default.
pub fn dir_or_default(dir: Option<PathBuf>) -> PathBuf {
    dir.unwrap_or_else(operator::channel_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_in_a_command_are_shown_not_obeyed() {
        assert_eq!(one_line("rm -rf x\n\u{1b}[2J"), "rm -rf x\\u{a}\\u{1b}[2J");
    }

    #[test]
    fn ids_are_checked_before_any_server_is_asked() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // A run directory as servers make it: the CLI refuses one others may use.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(matches!(
            answer(dir.path(), "../../x", true),
            Err(ApprovalsError::BadId { .. })
        ));
        let got = answer(dir.path(), "0123abcd", true);
        assert!(
            matches!(got, Err(ApprovalsError::NotFound { .. })),
            "{got:?}"
        );
    }
}
