//! `cordon approvals`, `cordon approve ID`, `cordon deny ID`: the operator's side of the
//! approval channel (`server::operator`).
//!
//! Owns finding this user's running servers (every `approvals-<pid>.sock` in the channel
//! directory with its `.token` beside it), asking each for its pending questions, and
//! answering one by id (the server holding it answers; the others say they do not know it).
//! A socket nobody listens on is a killed server's leftover and is skipped, said once.

use crate::server::operator::{self, PendingView, Request, Response};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
}

/// One running server's questions.
#[derive(Debug, serde::Serialize)]
pub struct ServerQuestions {
    pub socket: PathBuf,
    pub workspace: String,
    pub pid: u32,
    pub pending: Vec<PendingView>,
}

/// What asking every server found: their questions, and the sockets that did not answer.
#[derive(Debug, Default, serde::Serialize)]
pub struct Listing {
    pub servers: Vec<ServerQuestions>,
    pub unreachable: Vec<String>,
}

/// The sockets in `dir`, each with its token file.
fn sockets(dir: &Path) -> Result<Vec<(PathBuf, PathBuf)>, ApprovalsError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ApprovalsError::Dir {
                dir: dir.to_owned(),
                source,
            });
        }
    };
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

/// One request to one server, one answer back.
fn exchange(socket: &Path, request: &Request) -> Result<Response, String> {
    let stream = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(TIMEOUT)).ok();
    stream.set_write_timeout(Some(TIMEOUT)).ok();
    let mut line = serde_json::to_vec(request).map_err(|e| e.to_string())?;
    line.push(b'\n');
    (&stream).write_all(&line).map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    BufReader::new(std::io::Read::take(&stream, MAX_RESPONSE))
        .read_until(b'\n', &mut answer)
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&answer).map_err(|e| format!("not an answer: {e}"))
}

fn token(token_file: &Path) -> Result<String, String> {
    std::fs::read_to_string(token_file)
        .map(|t| t.trim().to_owned())
        .map_err(|e| format!("cannot read its token {}: {e}", token_file.display()))
}

/// Every server's pending questions, from the sockets in `dir`.
pub fn list(dir: &Path) -> Result<Listing, ApprovalsError> {
    let mut listing = Listing::default();
    for (socket, token_file) in sockets(dir)? {
        let reply =
            token(&token_file).and_then(|token| exchange(&socket, &Request::List { token }));
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

/// Answers question `id` on whichever server holds it. Returns that server's socket.
pub fn answer(dir: &Path, id: &str, approve: bool) -> Result<PathBuf, ApprovalsError> {
    if id.len() != 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApprovalsError::BadId { id: id.to_owned() });
    }
    let id = id.to_ascii_lowercase();
    for (socket, token_file) in sockets(dir)? {
        let Ok(token) = token(&token_file) else {
            continue;
        };
        let request = Request::Answer {
            token,
            id: id.clone(),
            approve,
        };
        match exchange(&socket, &request) {
            Ok(Response::Answered { .. }) => return Ok(socket),
            Ok(Response::Error { message }) if message.contains("token") => {
                return Err(ApprovalsError::Refused { socket, message });
            }
            _ => continue,
        }
    }
    Err(ApprovalsError::NotFound { id })
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
        let _ = writeln!(
            o,
            "note: {u} (a server that was killed leaves its socket behind)"
        );
    }
    o
}

/// A command on one line: control characters (newlines, escapes a model could use to paint
/// over the terminal) shown as `\u{..}`.
fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
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
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            answer(dir.path(), "../../x", true),
            Err(ApprovalsError::BadId { .. })
        ));
        assert!(matches!(
            answer(dir.path(), "0123abcd", true),
            Err(ApprovalsError::NotFound { .. })
        ));
    }
}
