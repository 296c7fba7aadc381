//! The audit log: one JSON line per tool call with what was asked, what was decided, what
//! happened, which client asked, under which policy and enforcement; under a proxy-mode
//! policy also one line per connection through the egress proxy (tool `egress`).
//!
//! Append-only and line-buffered so `tail -f` and log shippers see whole records; long
//! argument strings are shortened so a log cannot balloon with file contents, and `env`
//! values, `stdin` and a job's `input` are redacted to their sizes unless the policy opts in
//! (`server.audit_log_values`), since that is where secrets are passed. The file is rotated by
//! size (`<file>.1` .. `.3`). Owns the typed record ([`AuditRecord`] with its [`Decision`] and
//! per-tool [`Outcome`]) and the file; records are written at one point, `Runtime::audit`,
//! which every tool reaches through `tools::finish`. Tools decide what their outcome is.

use crate::confine::EnforcementLevel;
use crate::error_kind::ErrorKind;
use crate::exec::LimitKind;
use crate::lint::LintStatus;
use serde::Serialize;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Strings in logged arguments longer than this are cut (with their length noted).
const MAX_LOGGED_STRING: usize = 200;

/// Rotated files kept beside the live one (`.1` is the newest).
const KEEP_ROTATED: u32 = 3;

/// How the log is kept.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// Rotate before the file would grow past this; 0 never rotates.
    pub max_bytes: u64,
    /// Log `env` values and `stdin` verbatim.
    pub keep_values: bool,
    /// The policy's name and where it came from, named in every record.
    pub policy: String,
}

pub struct AuditLog {
    path: PathBuf,
    options: AuditOptions,
    file: Mutex<Open>,
    /// `clientInfo` of the client (`{name, version}`), once known.
    client: Mutex<Option<Value>>,
}

struct Open {
    file: std::fs::File,
    written: u64,
}

#[derive(Debug, Serialize)]
pub struct AuditRecord<'a> {
    pub time: String,
    pub tool: &'a str,
    pub arguments: Value,
    pub decision: Decision,
    pub outcome: Outcome,
    pub duration_ms: u64,
    pub enforcement: EnforcementLevel,
    /// The checkpoint that restores the workspace to before this call (`crate::checkpoint`),
    /// when it changed the workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
}

/// What was decided about a call, logged as `allow`, `deny:<rule>` or
/// `ask:<rule>:<answer>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// A `deny` rule (or `on_unknown`/`on_analysis_failure` set to deny) refused it.
    Deny {
        rule: String,
    },
    /// An `ask` rule asked the user (or could not).
    Ask {
        rule: String,
        answer: Answer,
        /// Who answered, through which channel (logged as the record's `approval`).
        by: Option<AnsweredBy>,
    },
}

/// Who answered an approval question and how: `elicitation` (the client's user, named by the
/// client's `clientInfo`), `input_required` (the same in a 2026-07-28 session) or `operator`
/// (`cordon approve`/`deny` on the host, named by the kernel's credentials of its process).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnsweredBy {
    pub channel: &'static str,
    pub by: String,
}

/// How an `ask` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Approved,
    Declined,
    /// Dismissed without an answer, or the call was cancelled while asking.
    Cancelled,
    /// Nobody answered within `server.approval_timeout_secs`.
    Expired,
    /// The client cannot be asked.
    Unavailable,
    /// Asked through `input_required`; the answer comes with a later request.
    Pending,
    /// Not asked: the call would have failed its argument checks anyway.
    NotAsked,
}

impl Answer {
    fn as_str(self) -> &'static str {
        match self {
            Answer::Approved => "approved",
            Answer::Declined => "declined",
            Answer::Cancelled => "cancelled",
            Answer::Expired => "expired",
            Answer::Unavailable => "unavailable",
            Answer::Pending => "pending",
            Answer::NotAsked => "not-asked",
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decision::Allow => f.write_str("allow"),
            Decision::Deny { rule } => write!(f, "deny:{rule}"),
            Decision::Ask { rule, answer, .. } => write!(f, "ask:{rule}:{}", answer.as_str()),
        }
    }
}

impl Serialize for Decision {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What a call came to, per tool (fields in the order the log has always had them).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Outcome {
    Shell {
        error: Option<ErrorKind>,
        exit_code: Option<i32>,
        limit: Option<LimitKind>,
        signal: Option<String>,
        timed_out: bool,
        /// Under a proxy-mode policy: the call's connections through the egress proxy.
        #[serde(skip_serializing_if = "Option::is_none")]
        network: Option<crate::egress::NetworkReport>,
        /// The git changes cordon refused to import into the operator's repository, in
        /// cordon's words (refs and paths, never file contents); left out when none.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        git_refused: Vec<String>,
    },
    /// The call is waiting for the user's answer (`input_required`).
    InputRequired {
        input_required: bool,
    },
    Write {
        bytes: u64,
        created: bool,
        error: Option<ErrorKind>,
        lint: LintStatus,
    },
    Edit {
        applied: bool,
        error: Option<ErrorKind>,
        lint: LintStatus,
        replacements: u64,
    },
    Read {
        error: Option<ErrorKind>,
        ok: bool,
    },
    Interpreter {
        background_killed: u32,
        error: Option<ErrorKind>,
        evicted_session: Option<String>,
        exception: Option<String>,
        images: u32,
        limit: Option<LimitKind>,
        session: String,
        state_lost: bool,
        timed_out: bool,
        /// Under a proxy-mode policy: the cell's connections through the egress proxy.
        #[serde(skip_serializing_if = "Option::is_none")]
        network: Option<crate::egress::NetworkReport>,
    },
    /// Anything else a caller wants on record (tests, future tools).
    Other(Value),
}

/// Who made a call, when the transport knows more than "the one stdio client": over HTTP,
/// the MCP session and the authenticated subject (the JWT `sub`, or `bearer` for the static
/// token, never a token itself), and that session's `clientInfo`. Set for the duration of a
/// call with [`CALL_ORIGIN`]`.scope(..)`; every record written inside it names them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CallOrigin {
    /// `Mcp-Session-Id`, or `stateless` for a 2026-07-28 request (that revision has none).
    pub session: Option<String>,
    pub subject: Option<String>,
    /// The scope of the subject's token that allowed the call (`[server.http.scopes]`); None
    /// where the credentials grant every tool (the single static token, no token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(skip)]
    pub client: Option<Value>,
}

tokio::task_local! {
    /// The origin of the call this task serves (HTTP only; stdio has one client and no
    /// subject, and leaves it unset).
    pub static CALL_ORIGIN: CallOrigin;
}

/// What is written: the record plus the fields the log itself knows.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    record: &'a AuditRecord<'a>,
    client: Value,
    policy: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    session: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    subject: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    approval: Option<&'a AnsweredBy>,
}

impl AuditLog {
    pub fn open(path: &Path, options: AuditOptions) -> std::io::Result<Self> {
        let file = open_append(path)?;
        let written = file.metadata()?.len();
        Ok(Self {
            path: path.to_owned(),
            options,
            file: Mutex::new(Open { file, written }),
            client: Mutex::new(None),
        })
    }

    /// Remembers the client named in `initialize` (or a request's `_meta`); one stdio server
    /// serves one client, so the latest is the one.
    pub fn set_client(&self, client: Value) {
        if let Ok(mut c) = self.client.lock() {
            *c = Some(client);
        }
    }

    /// Whether `env` values and `stdin` are logged verbatim.
    pub fn keeps_values(&self) -> bool {
        self.options.keep_values
    }

    pub fn record(&self, record: &AuditRecord<'_>) {
        let origin = CALL_ORIGIN.try_with(Clone::clone).ok();
        let client = origin
            .as_ref()
            .and_then(|o| o.client.clone())
            .or_else(|| self.client.lock().ok().and_then(|c| c.clone()))
            .unwrap_or(Value::Null);
        let (session, subject, scope) =
            origin.map_or((None, None, None), |o| (o.session, o.subject, o.scope));
        let approval = match &record.decision {
            Decision::Ask { by, .. } => by.as_ref(),
            _ => None,
        };
        let line = Line {
            record,
            client,
            policy: &self.options.policy,
            session,
            subject,
            scope,
            approval,
        };
        let Ok(mut line) = serde_json::to_vec(&line) else {
            return;
        };
        line.push(b'\n');
        if let Ok(mut open) = self.file.lock() {
            let max = self.options.max_bytes;
            if max > 0 && open.written > 0 && open.written + line.len() as u64 > max {
                match self.rotate() {
                    Ok(file) => *open = Open { file, written: 0 },
                    Err(e) => tracing::warn!("audit log rotation failed: {e}"),
                }
            }
            // One write per record keeps lines whole even with concurrent calls (O_APPEND).
            match open.file.write_all(&line) {
                Ok(()) => open.written += line.len() as u64,
                Err(e) => tracing::warn!("audit log write failed: {e}"),
            }
        }
    }

    /// `<file>.2` -> `.3`, `.1` -> `.2`, `<file>` -> `.1`, then a fresh `<file>`.
    fn rotate(&self) -> std::io::Result<std::fs::File> {
        let numbered = |n: u32| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        for n in (1..KEEP_ROTATED).rev() {
            let from = numbered(n);
            if from.exists() {
                std::fs::rename(&from, numbered(n + 1))?;
            }
        }
        std::fs::rename(&self.path, numbered(1))?;
        open_append(&self.path)
    }
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// The arguments as logged: unless `keep_values`, each `env` value and `stdin` replaced by
/// its size (names kept); then long strings shortened.
pub(crate) fn loggable(arguments: &Value, keep_values: bool) -> Value {
    let mut value = arguments.clone();
    if !keep_values && let Value::Object(map) = &mut value {
        let redact = |v: &mut Value| {
            if let Value::String(s) = v {
                *v = Value::String(format!("[redacted: {} bytes]", s.len()));
            } else if !v.is_null() {
                *v = Value::String("[redacted]".into());
            }
        };
        if let Some(Value::Object(env)) = map.get_mut("env") {
            env.values_mut().for_each(redact);
        }
        // `input` is what the `job` tool types into a job (a password at a prompt, say).
        for key in ["stdin", "input"] {
            if let Some(v) = map.get_mut(key) {
                redact(v);
            }
        }
    }
    shorten(&value)
}

/// The arguments with every long string shortened.
pub(crate) fn shorten(value: &Value) -> Value {
    match value {
        Value::String(s) => {
            Value::String(crate::text::shortened(s, MAX_LOGGED_STRING).into_owned())
        }
        Value::Array(items) => Value::Array(items.iter().map(shorten).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), shorten(v))).collect())
        }
        other => other.clone(),
    }
}

/// Now as RFC 3339 UTC with milliseconds.
pub(crate) fn now_rfc3339() -> String {
    crate::clock::Utc::now().rfc3339_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_strings_are_shortened_recursively() {
        let v = serde_json::json!({"content": "x".repeat(1000), "edits": [{"old_string": "y".repeat(300)}], "n": 3});
        let s = shorten(&v);
        assert!(s["content"].as_str().unwrap().ends_with("…(1000 chars)"));
        assert!(
            s["edits"][0]["old_string"]
                .as_str()
                .unwrap()
                .ends_with("…(300 chars)")
        );
        assert_eq!(s["n"], 3);
    }

    #[test]
    fn env_values_and_stdin_are_redacted_to_their_sizes_by_default() {
        let args = serde_json::json!({"command": "deploy", "env": {"API_KEY": "sk-secret"}, "stdin": "password\n"});
        let logged = loggable(&args, false);
        assert_eq!(logged["env"]["API_KEY"], "[redacted: 9 bytes]");
        assert_eq!(logged["stdin"], "[redacted: 9 bytes]");
        assert_eq!(logged["command"], "deploy");
        assert!(!logged.to_string().contains("sk-secret"));
        assert_eq!(loggable(&args, true)["env"]["API_KEY"], "sk-secret");
        let typed = serde_json::json!({"id": "job-1", "input": "hunter2\n"});
        assert_eq!(loggable(&typed, false)["input"], "[redacted: 8 bytes]");
        let none = serde_json::json!({"command": "ls", "stdin": null});
        assert_eq!(loggable(&none, false)["stdin"], serde_json::Value::Null);
    }

    fn options(max_bytes: u64) -> AuditOptions {
        AuditOptions {
            max_bytes,
            keep_values: false,
            policy: "default".into(),
        }
    }

    fn record() -> AuditRecord<'static> {
        AuditRecord {
            time: now_rfc3339(),
            tool: "shell_exec",
            arguments: serde_json::json!({"command": "x".repeat(100)}),
            decision: Decision::Allow,
            outcome: Outcome::Other(serde_json::json!({})),
            duration_ms: 1,
            enforcement: EnforcementLevel::Full,
            checkpoint: None,
        }
    }

    #[test]
    fn the_log_rotates_by_size_and_keeps_three_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, options(1000)).unwrap();
        for _ in 0..60 {
            log.record(&record());
        }
        assert!(std::fs::metadata(&path).unwrap().len() <= 1000);
        for n in 1..=3 {
            let rotated = dir.path().join(format!("audit.jsonl.{n}"));
            let text = std::fs::read_to_string(&rotated).unwrap();
            assert!(
                text.len() <= 1000 && text.lines().count() >= 2,
                "{rotated:?}"
            );
        }
        assert!(!dir.path().join("audit.jsonl.4").exists());
    }

    #[test]
    fn records_name_the_client_and_policy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, options(0)).unwrap();
        log.set_client(serde_json::json!({"name": "claude-code", "version": "2.1"}));
        log.record(&record());
        let line: Value =
            serde_json::from_str(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
        assert_eq!(line["client"]["name"], "claude-code");
        assert_eq!(line["policy"], "default");
        assert_eq!(line["enforcement"], "full");
        assert_eq!(line["tool"], "shell_exec");
    }

    #[test]
    fn decisions_are_logged_in_their_historic_spelling() {
        let ask = |answer| Decision::Ask {
            rule: "force-push".into(),
            answer,
            by: None,
        };
        assert_eq!(Decision::Allow.to_string(), "allow");
        assert_eq!(
            Decision::Deny {
                rule: "rm-home".into()
            }
            .to_string(),
            "deny:rm-home"
        );
        assert_eq!(ask(Answer::Approved).to_string(), "ask:force-push:approved");
        assert_eq!(
            ask(Answer::NotAsked).to_string(),
            "ask:force-push:not-asked"
        );
        assert_eq!(
            serde_json::to_value(ask(Answer::Pending)).unwrap(),
            "ask:force-push:pending"
        );
    }

    #[test]
    fn outcomes_keep_the_fields_the_log_always_had() {
        let shell = Outcome::Shell {
            error: Some(ErrorKind::Timeout),
            exit_code: None,
            limit: None,
            signal: Some("SIGKILL".into()),
            timed_out: true,
            // Without the proxy the field is left out: the record is as it always was.
            network: None,
            git_refused: Vec::new(),
        };
        assert_eq!(
            serde_json::to_value(shell).unwrap(),
            serde_json::json!({"error": "timeout", "exit_code": null, "limit": null,
                               "signal": "SIGKILL", "timed_out": true})
        );
    }

    #[test]
    fn an_answered_question_names_who_answered_and_how() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, options(0)).unwrap();
        let mut answered = record();
        answered.decision = Decision::Ask {
            rule: "force-push".into(),
            answer: Answer::Approved,
            by: Some(AnsweredBy {
                channel: "operator",
                by: "uid 1000, pid 42".into(),
            }),
        };
        log.record(&answered);
        log.record(&record());
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["decision"], "ask:force-push:approved");
        assert_eq!(
            lines[0]["approval"],
            serde_json::json!({"channel": "operator", "by": "uid 1000, pid 42"})
        );
        assert!(lines[1].get("approval").is_none(), "{}", lines[1]);
    }

    #[test]
    fn timestamp_has_rfc3339_shape() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 24, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z'));
    }
}
