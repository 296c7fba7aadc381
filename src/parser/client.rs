//! The server's side of the parser worker: starting it confined, sending it one request at a
//! time with a deadline, and replacing it when it crashes, hangs, hits a limit or talks
//! nonsense.
//!
//! Owns the worker's lifecycle and the translation of every way a request can fail into one
//! [`ParserError`] that says why in words a model can act on. A failure costs only the
//! request in flight: the worker is killed and the next request starts a new one, unless
//! workers have been dying so fast ([`MAX_STARTS`] within [`STORM_WINDOW`]) that starting
//! another would only burn CPU; then requests fail at once until the window passes. What to do
//! with a failure (lint `unavailable`, the command rules' fallback) is the caller's.
//!
//! Nothing the worker sends is trusted: frames are bounded by `protocol`, answers must carry
//! the id of the request, and its stderr is kept only as a short, cleaned tail for messages.

use super::bash::Analysis;
use super::protocol::{self, MAX_LINES, MAX_TEXT, ProtocolError, Request, Response, SyntaxOutcome};
use super::syntax::Language;
use crate::confine::CallLimits;
use crate::exec::{ConfinedWorker, Executor, Program, WorkerSpec, signal_name};
use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe::{Receiver as ChildStdout, Sender as ChildStdin};

/// The hidden subcommand that runs `worker::run`.
pub(crate) const WORKER_SUBCOMMAND: &str = "__parse-worker";

/// At most this many worker starts within [`STORM_WINDOW`].
pub const MAX_STARTS: usize = 8;
pub(crate) const STORM_WINDOW: Duration = Duration::from_secs(60);

/// Bytes of the worker's stderr kept for error messages.
const STDERR_TAIL: usize = 4096;

/// The worker's budget. Small on purpose: a parse needs a few MiB and one core.
#[derive(Debug, Clone)]
pub struct ParserConfig {
    /// cgroup memory limit of the worker.
    pub memory_bytes: u64,
    /// cgroup pids limit: the worker is one thread and starts nothing.
    pub pids: u64,
    pub cpu_percent: u64,
    /// RLIMIT_CPU over the worker's life; a worker that reaches it is replaced.
    pub cpu_seconds: u64,
    /// Deadline of one syntax check (the parse itself gives up after 250 ms).
    pub syntax_timeout: Duration,
    /// Deadline of one command analysis.
    pub commands_timeout: Duration,
}

impl Default for ParserConfig {
    fn default() -> Self {
        Self {
            memory_bytes: 256 << 20,
            pids: 4,
            cpu_percent: 100,
            cpu_seconds: 600,
            syntax_timeout: Duration::from_secs(2),
            commands_timeout: Duration::from_secs(2),
        }
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ParserError {
    #[error("the parser worker could not be started: {0}")]
    Start(String),
    #[error(
        "the parser worker was started {MAX_STARTS} times in the last {}s and kept failing; it is \
         not started again until {wait_secs}s have passed",
        STORM_WINDOW.as_secs()
    )]
    RestartStorm { wait_secs: u64 },
    #[error("the parser worker did not answer within {ms} ms and was killed")]
    Timeout { ms: u128 },
    #[error("the parser worker crashed ({0}); it is restarted for the next request")]
    Crashed(String),
    #[error("the parser worker sent an invalid answer ({0}) and was replaced")]
    Protocol(String),
    #[error("the parser worker refused the request: {0}")]
    Refused(String),
    #[error("{what} is {len} bytes, over the parser's limit of {max}")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
}

struct Live {
    proc: ConfinedWorker,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<StdMutex<VecDeque<u8>>>,
    dir: PathBuf,
    /// Set while a request is on the pipe: if the caller's future is dropped half way, the
    /// stream is out of step and the worker must not be reused.
    in_flight: bool,
}

#[derive(Default)]
struct State {
    live: Option<Live>,
    starts: VecDeque<Instant>,
    generation: u64,
}

/// The parser worker, shared by every call of one server.
pub struct ParserClient {
    executor: Arc<Executor>,
    program: PathBuf,
    config: ParserConfig,
    env: BTreeMap<String, String>,
    state: tokio::sync::Mutex<State>,
    next_id: AtomicU64,
}

impl ParserClient {
    /// A client whose workers run `program __parse-worker` (the cordon binary itself)
    /// through `executor`. Nothing starts until the first request (or [`Self::warm_up`]).
    pub fn new(executor: Arc<Executor>, program: PathBuf, config: ParserConfig) -> Self {
        let mut env = BTreeMap::new();
        if let Ok(marker) = std::env::var(super::worker::HANG_ON_ENV) {
            env.insert(super::worker::HANG_ON_ENV.to_owned(), marker);
        }
        Self {
            executor,
            program,
            config,
            env,
            state: tokio::sync::Mutex::new(State::default()),
            next_id: AtomicU64::new(1),
        }
    }

    /// Starts the worker now, so the first lint does not pay for it.
    pub async fn warm_up(&self) -> Result<(), ParserError> {
        let mut state = self.state.lock().await;
        self.ensure(&mut state).await.map(drop)
    }

    /// The syntax check of `text`. `remember` keeps its tree in the worker under that key;
    /// `previous` names the key of the text it was edited from.
    pub async fn syntax(
        &self,
        language: Language,
        text: &str,
        remember: Option<u64>,
        previous: Option<u64>,
    ) -> Result<SyntaxOutcome, ParserError> {
        if text.len() > MAX_TEXT {
            return Err(ParserError::TooLarge {
                what: "the file",
                len: text.len(),
                max: MAX_TEXT,
            });
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request = Request::Syntax {
            id,
            language,
            text: text.to_owned(),
            remember,
            previous,
        };
        match self.call(request, self.config.syntax_timeout).await? {
            Response::Syntax { outcome, .. } => Ok(outcome),
            other => Err(self.mismatch(&other).await),
        }
    }

    /// What each command line runs, in order.
    pub async fn analyze(&self, lines: &[String]) -> Result<Vec<Analysis>, ParserError> {
        let total: usize = lines.iter().map(String::len).sum();
        if total > MAX_TEXT || lines.len() > MAX_LINES {
            return Err(ParserError::TooLarge {
                what: "the command text",
                len: total,
                max: MAX_TEXT,
            });
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request = Request::Commands {
            id,
            lines: lines.to_vec(),
        };
        match self.call(request, self.config.commands_timeout).await? {
            Response::Commands { analyses, .. } if analyses.len() == lines.len() => Ok(analyses),
            other => Err(self.mismatch(&other).await),
        }
    }

    /// An answer of the wrong kind: the worker is not to be trusted any more.
    async fn mismatch(&self, got: &Response) -> ParserError {
        let mut state = self.state.lock().await;
        if let Some(live) = state.live.take() {
            bury(live).await;
        }
        ParserError::Protocol(format!(
            "an answer of the wrong kind or length to request {}",
            got.id()
        ))
    }

    async fn call(&self, request: Request, timeout: Duration) -> Result<Response, ParserError> {
        let id = request.id();
        let frame = protocol::encode(&request).map_err(|e| ParserError::Refused(e.to_string()))?;
        let mut state = self.state.lock().await;
        let live = self.ensure(&mut state).await?;
        live.in_flight = true;
        let exchange = async {
            live.stdin.write_all(&frame).await?;
            live.stdin.flush().await?;
            protocol::read_body_async(&mut live.stdout).await
        };
        let result = tokio::time::timeout(timeout, exchange).await;
        live.in_flight = false;
        let failure = match result {
            Ok(Ok(body)) => match protocol::decode_body::<Response>(&body) {
                Ok(Response::Error { id: got, message }) if got == id => {
                    return Err(ParserError::Refused(message));
                }
                Ok(response) if response.id() == id => return Ok(response),
                Ok(response) => ParserError::Protocol(format!(
                    "answer to request {} while waiting for {id}",
                    response.id()
                )),
                Err(e) => ParserError::Protocol(e.to_string()),
            },
            Ok(Err(ProtocolError::Io(_) | ProtocolError::Truncated)) => {
                let live = state.live.take().expect("a live worker was just used");
                return Err(ParserError::Crashed(bury(live).await));
            }
            Ok(Err(e)) => ParserError::Protocol(e.to_string()),
            Err(_) => ParserError::Timeout {
                ms: timeout.as_millis(),
            },
        };
        if let Some(live) = state.live.take() {
            let why = bury(live).await;
            tracing::warn!("parser worker replaced: {failure} ({why})");
        }
        Err(failure)
    }

    /// The live worker, started if there is none (or the last one is unusable).
    async fn ensure<'s>(&self, state: &'s mut State) -> Result<&'s mut Live, ParserError> {
        let reusable = match state.live.as_mut() {
            Some(live) => !live.in_flight && live.proc.try_status().is_none(),
            None => false,
        };
        if !reusable {
            if let Some(dead) = state.live.take() {
                let why = bury(dead).await;
                tracing::info!("parser worker ended between requests ({why})");
            }
            let now = Instant::now();
            while state
                .starts
                .front()
                .is_some_and(|t| now.duration_since(*t) > STORM_WINDOW)
            {
                state.starts.pop_front();
            }
            if state.starts.len() >= MAX_STARTS {
                let oldest = state.starts.front().copied().unwrap_or(now);
                let wait = STORM_WINDOW.saturating_sub(now.duration_since(oldest));
                return Err(ParserError::RestartStorm {
                    wait_secs: wait.as_secs().max(1),
                });
            }
            state.starts.push_back(now);
            if state.generation > 0 {
                crate::events::emit(
                    crate::events::Level::Warning,
                    "parser_restarted",
                    serde_json::json!({
                        "starts_in_window": state.starts.len(),
                        "message": "the parser worker (command analysis, syntax checks) \
                                    ended and is started again",
                    }),
                );
            }
            state.generation += 1;
            // Every worker after the first replaces one that crashed, hung or hit a limit.
            if state.generation > 1 {
                crate::metrics::parser_worker_restarted();
            }
            state.live = Some(self.start(state.generation)?);
        }
        Ok(state.live.as_mut().expect("a worker was just made live"))
    }

    fn start(&self, generation: u64) -> Result<Live, ParserError> {
        let dir = self
            .executor
            .confinement()
            .private_root()
            .join(format!("parser-{generation}"));
        let spec = WorkerSpec {
            program: Program::new([
                self.program.clone().into_os_string(),
                OsString::from(WORKER_SUBCOMMAND),
            ])
            .with_env(self.env.clone()),
            private_dir: dir.clone(),
            limits: CallLimits {
                memory_bytes: self.config.memory_bytes,
                pids: self.config.pids,
                cpu_percent: self.config.cpu_percent,
            },
            cpu_seconds: Some(self.config.cpu_seconds),
            pass_fds: Vec::new(),
            runs_agent_code: false,
        };
        let mut proc = self
            .executor
            .spawn_worker(spec)
            .map_err(|e| ParserError::Start(e.to_string()))?;
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (proc.stdin.take(), proc.stdout.take(), proc.stderr.take())
        else {
            return Err(ParserError::Start("the worker has no pipes".into()));
        };
        let tail = Arc::new(StdMutex::new(VecDeque::with_capacity(STDERR_TAIL)));
        let sink = Arc::clone(&tail);
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            // What the worker says (e.g. that its own lockdown failed) reaches the server's
            // log, but only its first few KiB: a subverted worker must not flood it.
            let mut logged = 0;
            while let Ok(n) = stderr.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if logged < STDERR_TAIL {
                    logged += n;
                    tracing::warn!("parser worker says: {}", last_line(&buf[..n]));
                }
                if let Ok(mut t) = sink.lock() {
                    t.extend(&buf[..n]);
                    let excess = t.len().saturating_sub(STDERR_TAIL);
                    t.drain(..excess);
                }
            }
        });
        Ok(Live {
            proc,
            stdin,
            stdout: BufReader::with_capacity(1 << 16, stdout),
            stderr: tail,
            dir,
            in_flight: false,
        })
    }
}

/// Kills the worker and says how it ended, in a few words.
async fn bury(live: Live) -> String {
    let Live {
        proc, stderr, dir, ..
    } = live;
    let end = proc.terminate().await;
    // The worker could write there: removed without recursion (`confine::scratch`).
    let _ = tokio::task::spawn_blocking(move || crate::confine::scratch::remove_tree(&dir)).await;
    use std::os::unix::process::ExitStatusExt;
    let mut how = if end.hits.memory {
        "it hit its memory limit".to_owned()
    } else if end.hits.pids {
        "it hit its process limit".to_owned()
    } else {
        match end.status {
            Some(s) if s.signal() == Some(libc::SIGXCPU) => {
                "it used up its CPU time limit".to_owned()
            }
            Some(s) if s.signal().is_some() => {
                format!("killed by {}", signal_name(s.signal().unwrap_or_default()))
            }
            Some(s) => format!("exit status {}", s.code().unwrap_or_default()),
            None => "it did not exit".to_owned(),
        }
    };
    // Give the reader a moment to collect what the worker printed before dying.
    tokio::time::sleep(Duration::from_millis(2)).await;
    let last = stderr
        .lock()
        .map(|t| last_line(&t.iter().copied().collect::<Vec<u8>>()))
        .unwrap_or_default();
    if !last.is_empty() {
        how.push_str(": ");
        how.push_str(&last);
    }
    how
}

/// The last non-empty line of `bytes`, without control characters, at most 200 characters:
/// the worker's stderr is untrusted text headed for a model.
fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_tails_are_cleaned_and_capped() {
        let raw = b"x\n\x1b[31mAssertion `length <= 1024' failed.\x07\n\n";
        assert_eq!(last_line(raw), "[31mAssertion `length <= 1024' failed.");
        assert_eq!(last_line(&[b'a'; 500]).len(), 200);
        assert_eq!(last_line(b""), "");
    }
}
