//! `cordon policy replay AUDIT.jsonl [--policy NAME|FILE] [--json]`: what a candidate policy
//! would have decided about every call an audit log recorded, and where that differs.
//!
//! Owns reading the log (bounded per line; every record is data, never trusted to be well
//! formed), re-deciding each record the way the server would under the candidate policy, and
//! the report: one line per changed call, a summary by kind of change, and each record it
//! cannot judge with the reason. What it re-decides:
//! * `shell_exec`: the command rules (allow, ask, deny, and which rule), on the command line
//!   as logged, analysed by a confined parser worker exactly as the server analyses it; and
//!   for `background: true`, whether the candidate still runs jobs (`[jobs] max_per_session`);
//! * `job`: the command rules on input typed into a job's shell, which the server judged as a
//!   command line and logged as the record's `arguments.command` (`tools::job_input`);
//! * `write_file` / `edit_file`: the write rules (`filesystem.protected`, a read-only
//!   workspace and its `workspace_writable`), on the path as given in the call;
//! * `egress`: the proxy's host rules (`network.allow_hosts`, `deny_hosts`, proxy on or off),
//!   by name.
//!
//! Nothing else in a policy decides whether a call may go ahead (`read_file` and
//! `code_interpreter` calls are confined work with nothing to decide), so those records are
//! judged unchanged. The log's redactions stay: `env` values and `stdin` are never printed,
//! and a value the log shortened (`…(N chars)`) cannot be judged, which the report says.

use crate::parser::bash::Analysis;
use crate::policy::commands::{Decision, ON_ANALYSIS_FAILURE, ON_UNKNOWN, Verdict};
use crate::policy::{Analysed, Policy, Request, WorkspaceAccess};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// Longest audit line read; the server writes far shorter ones (strings are cut at 200).
const MAX_LINE: u64 = 1 << 20;
/// Command lines sent to the parser worker per request.
const BATCH: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("cannot read the audit log {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the audit log {} names no policy its calls ran under; say which to replay with \
         --policy NAME|FILE",
        path.display()
    )]
    NoPolicy { path: PathBuf },
    #[error(
        "the policy the log names ({named}) cannot be loaded ({why}); say which to replay \
         with --policy NAME|FILE"
    )]
    RecordedPolicy { named: String, why: String },
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    #[error(transparent)]
    Parser(#[from] super::policy::PolicyCliError),
}

/// One call whose decision would change.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// Line of the audit log (1-based).
    pub line: usize,
    pub time: String,
    pub tool: String,
    /// The argument that matters, as logged: the command, the path or `host:port`.
    pub argument: String,
    pub old: String,
    pub new: String,
    /// `command rule`, `write rule` or `egress host`.
    pub kind: &'static str,
    /// The rule or field that decides now, and where the policy says so.
    pub because: String,
    /// The checkpoint the record names (`crate::checkpoint`): the workspace as it was before
    /// the call, for a call that ran but would now be refused.
    pub checkpoint: Option<String>,
}

/// A record the replay cannot judge, and why.
#[derive(Debug, Clone, Serialize)]
pub struct NotJudged {
    pub line: usize,
    pub tool: String,
    pub why: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    /// The candidate policy, `name (origin)`.
    pub policy: String,
    pub records: usize,
    pub unchanged: usize,
    pub changed: Vec<Change>,
    pub not_judged: Vec<NotJudged>,
    /// Changed calls by kind.
    pub summary: BTreeMap<&'static str, usize>,
    /// Where the candidate's `[breaker]` would have tripped, replaying the candidate's
    /// decisions per session (see [`breaker_trips`]).
    pub breaker: Vec<BreakerTrip>,
    /// `--subject`: only this subject's records were replayed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

/// One record as read: its line and fields.
struct Record {
    line: usize,
    value: Value,
}

impl Record {
    fn str(&self, key: &str) -> &str {
        self.value[key].as_str().unwrap_or("")
    }
    fn tool(&self) -> String {
        self.str("tool").to_owned()
    }
    /// The checkpoint that undoes the call, when the log names one (a string of a sane size).
    fn checkpoint(&self) -> Option<String> {
        self.value["checkpoint"]
            .as_str()
            .filter(|c| c.len() <= 64)
            .map(str::to_owned)
    }
}

/// Reads the log: each line a JSON object, or a `NotJudged` saying what is wrong with it.
fn read_log(path: &Path) -> Result<(Vec<Record>, Vec<NotJudged>), ReplayError> {
    let read = |source| ReplayError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut reader = std::io::BufReader::new(file);
    let (mut records, mut bad) = (Vec::new(), Vec::new());
    let mut line = 0;
    loop {
        let mut buf = Vec::new();
        let n = std::io::Read::take(&mut reader, MAX_LINE + 1)
            .read_until(b'\n', &mut buf)
            .map_err(read)?;
        if n == 0 {
            break;
        }
        line += 1;
        if buf.len() as u64 > MAX_LINE && !buf.ends_with(b"\n") {
            // Skip the rest of the overlong line.
            let mut rest = Vec::new();
            reader.read_until(b'\n', &mut rest).map_err(read)?;
            bad.push(NotJudged {
                line,
                tool: String::new(),
                why: format!("the line is over {MAX_LINE} bytes, not a record cordon writes"),
            });
            continue;
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Value>(&buf) {
            Ok(value) if value.is_object() && value["tool"].is_string() => {
                records.push(Record { line, value })
            }
            Ok(_) => bad.push(NotJudged {
                line,
                tool: String::new(),
                why: "not an audit record (a JSON object with a `tool`)".into(),
            }),
            Err(e) => bad.push(NotJudged {
                line,
                tool: String::new(),
                why: format!("not JSON: {e}"),
            }),
        }
    }
    Ok((records, bad))
}

/// The policy a record names (`name (origin)`), as `Policy::load` takes it.
fn recorded_policy(named: &str) -> Option<String> {
    let origin = named.rsplit_once(" (")?.1.strip_suffix(')')?;
    Some(origin.strip_prefix("builtin:").unwrap_or(origin).to_owned())
}

/// Whether the log cut this value short (`…(N chars)`): then no rule can be applied to it.
fn shortened(text: &str) -> bool {
    text.strip_suffix(" chars)")
        .and_then(|t| t.rsplit_once("…("))
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Re-decides every record of the log at `path` under `candidate` (default: the policy the
/// log's last record names), or with `subject` only that subject's records (named as the log
/// names it; its last record's policy is then the default).
pub async fn run(
    path: &Path,
    candidate: Option<&str>,
    subject: Option<&str>,
) -> Result<Report, ReplayError> {
    let (mut records, mut not_judged) = read_log(path)?;
    if let Some(subject) = subject {
        records.retain(|r| r.str("subject") == subject);
        // A line that is no record names no subject: it is not this subject's either.
        not_judged.retain(|n| !n.tool.is_empty());
    }
    let named = records
        .iter()
        .rev()
        .find_map(|r| r.value["policy"].as_str().map(str::to_owned));
    let policy = match candidate {
        Some(name) => Policy::load(name)?,
        None => {
            let named = named.ok_or_else(|| ReplayError::NoPolicy {
                path: path.to_owned(),
            })?;
            let name = recorded_policy(&named).ok_or_else(|| ReplayError::RecordedPolicy {
                named: named.clone(),
                why: "not `name (origin)`".into(),
            })?;
            Policy::load(&name).map_err(|e| ReplayError::RecordedPolicy {
                named: named.clone(),
                why: e.to_string(),
            })?
        }
    };
    let analyses = analyse(&policy, &records).await?;
    let mut recorded: BTreeMap<String, Option<Policy>> = BTreeMap::new();
    let mut changed = Vec::new();
    let mut unchanged = 0;
    for record in &records {
        let judged = match record.str("tool") {
            "shell_exec" => match judge_command(&policy, record, &analyses) {
                Ok(None) => Ok(judge_job(&policy, record)),
                other => other,
            },
            // Input typed into a job's shell was judged as a command line; other job calls
            // (reads, signals, input to a program that is not a shell) decide nothing.
            "job" if record.value["arguments"]["command"].is_string() => {
                judge_command(&policy, record, &analyses)
            }
            "job" => Ok(None),
            "write_file" | "edit_file" => judge_write(&policy, record),
            "egress" => {
                let named = record.str("policy").to_owned();
                let old = recorded
                    .entry(named.clone())
                    .or_insert_with(|| recorded_policy(&named).and_then(|n| Policy::load(&n).ok()));
                judge_egress(&policy, old.as_ref(), record)
            }
            // The breaker's and the scopes' own records say what happened, not what a
            // policy's rules decide.
            "read_file" | "code_interpreter" | "breaker" | "scope" => Ok(None),
            other => Err(format!(
                "`{}` is not a tool this replay knows",
                crate::tools::echo_arg(other)
            )),
        };
        match judged {
            Ok(None) => unchanged += 1,
            Ok(Some(change)) => changed.push(change),
            Err(why) => not_judged.push(NotJudged {
                line: record.line,
                tool: record.tool(),
                why,
            }),
        }
    }
    not_judged.sort_by_key(|n| n.line);
    let breaker = breaker_trips(&policy, &records, &analyses);
    let mut summary = BTreeMap::new();
    for c in &changed {
        *summary.entry(c.kind).or_insert(0) += 1;
    }
    Ok(Report {
        policy: format!("{} ({})", policy.name, policy.origin),
        records: records.len() + not_judged.iter().filter(|n| n.tool.is_empty()).count(),
        unchanged,
        changed,
        not_judged,
        summary,
        breaker,
        subject: subject.map(str::to_owned),
    })
}

/// Every judgeable `shell_exec` command line analysed by a confined parser worker (as the
/// server does: grammars never run in this process), in batches; a batch that fails is
/// retried line by line so one bad line fails only itself.
async fn analyse(
    policy: &Policy,
    records: &[Record],
) -> Result<BTreeMap<String, Result<Analysis, String>>, ReplayError> {
    let mut lines: Vec<String> = records
        .iter()
        .filter(|r| matches!(r.str("tool"), "shell_exec" | "job"))
        .filter_map(|r| r.value["arguments"]["command"].as_str())
        .filter(|c| !shortened(c))
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines.dedup();
    let mut out = BTreeMap::new();
    if lines.is_empty() || !policy.needs_analysis() {
        return Ok(out);
    }
    let workspace = tempfile::Builder::new()
        .prefix("cordon-policy-replay-")
        .tempdir()
        .map_err(super::policy::PolicyCliError::Io)?;
    let options = crate::runtime::RuntimeOptions {
        workspace: workspace
            .path()
            .canonicalize()
            .map_err(super::policy::PolicyCliError::Io)?,
        allow_degraded: true,
        parser_program: Some(
            crate::parser::worker_program().map_err(super::policy::PolicyCliError::Io)?,
        ),
        ..Default::default()
    };
    let runtime = crate::runtime::Runtime::build(policy.clone(), options)
        .map_err(super::policy::PolicyCliError::Runtime)?;
    let Some(parser) = &runtime.parser else {
        return Ok(out);
    };
    // A worker that cannot start at all would make every line `on_analysis_failure`: say so
    // instead of reporting changes that are not the policy's.
    parser.warm_up().await.map_err(|e| {
        super::policy::PolicyCliError::Examples(crate::policy::commands::ExampleCheckError::from(e))
    })?;
    for batch in lines.chunks(BATCH) {
        match parser.analyze(batch).await {
            Ok(analyses) if analyses.len() == batch.len() => {
                for (line, analysis) in batch.iter().zip(analyses) {
                    out.insert(line.clone(), Ok(analysis));
                }
            }
            _ => {
                for line in batch {
                    let one = match parser.analyze(std::slice::from_ref(line)).await {
                        Ok(mut a) if a.len() == 1 => Ok(a.remove(0)),
                        Ok(_) => Err("the analysis came back empty".to_owned()),
                        Err(e) => Err(e.to_string()),
                    };
                    out.insert(line.clone(), one);
                }
            }
        }
    }
    Ok(out)
}

/// A decision as the log spells it, without the answer: `allow`, `deny:R`, `ask:R`.
fn spelled(decision: Decision, rule: Option<&str>) -> String {
    match (decision, rule) {
        (Decision::Allow, _) | (_, None) => "allow".into(),
        (d, Some(rule)) => format!("{}:{rule}", d.as_str()),
    }
}

/// Where the candidate policy says `rule` (a rule's name, or `on_unknown`/
/// `on_analysis_failure`).
fn rule_site(policy: &Policy, rule: &str) -> String {
    if rule == ON_UNKNOWN || rule == ON_ANALYSIS_FAILURE {
        return format!("`commands.{rule}` ({})", policy.origin);
    }
    match policy.commands.rules.iter().find(|r| r.name == rule) {
        Some(r) if r.line > 0 => format!(
            "rule `{rule}` ({} line {})",
            if r.origin.is_empty() {
                &policy.origin
            } else {
                &r.origin
            },
            r.line
        ),
        Some(_) => format!("rule `{rule}` ({})", policy.origin),
        None => format!("rule `{rule}` is not in {}", policy.origin),
    }
}

fn judge_command(
    policy: &Policy,
    record: &Record,
    analyses: &BTreeMap<String, Result<Analysis, String>>,
) -> Result<Option<Change>, String> {
    let Some(command) = record.value["arguments"]["command"].as_str() else {
        return Err("the record has no `arguments.command`".into());
    };
    if shortened(command) {
        return Err(
            "the log shortened the command (strings over 200 characters are cut), so no rule \
             can be applied to the whole line"
                .into(),
        );
    }
    let old = record.str("decision");
    let mut parts = old.splitn(3, ':');
    let (old_decision, old_rule) = match (parts.next(), parts.next(), parts.next()) {
        (Some("allow"), None, None) => (Decision::Allow, None),
        (Some("deny"), Some(rule), None) => (Decision::Deny, Some(rule)),
        (Some("ask"), Some(_), Some("pending")) => {
            return Err(
                "an input_required round: the retry that carries the answer is its own record"
                    .into(),
            );
        }
        (Some("ask"), Some(rule), Some(_)) => (Decision::Ask, Some(rule)),
        _ => return Err(format!("the decision `{old}` is not one cordon writes")),
    };
    let analysed = match analyses.get(command) {
        Some(Ok(analysis)) => Analysed::Done(analysis),
        Some(Err(why)) => Analysed::Failed(why),
        None => Analysed::NotNeeded,
    };
    let verdict: Verdict = policy.decide(&Request::ShellExec {
        command,
        analysis: analysed,
    });
    let new_rule = verdict.reason.as_ref().map(|r| r.rule.as_str());
    let (old_text, new_text) = (
        spelled(old_decision, old_rule),
        spelled(verdict.decision, new_rule),
    );
    if old_text == new_text {
        return Ok(None);
    }
    let because = match (new_rule, verdict.decision) {
        (Some(rule), d) if d != Decision::Allow => rule_site(policy, rule),
        _ => match old_rule {
            Some(rule) => format!("no rule stops it now; {}", rule_site(policy, rule)),
            None => "no rule stops it now".into(),
        },
    };
    Ok(Some(Change {
        line: record.line,
        checkpoint: record.checkpoint(),
        time: record.str("time").to_owned(),
        tool: record.tool(),
        argument: command.to_owned(),
        old: old_text,
        new: new_text,
        kind: "command rule",
        because,
    }))
}

/// A `shell_exec {background: true}` the command rules still allow: whether the candidate
/// still runs jobs (`[jobs] max_per_session`). A call that started a job had no `denied`
/// error; one refused because jobs were off had one.
fn judge_job(policy: &Policy, record: &Record) -> Option<Change> {
    if record.value["arguments"]["background"] != Value::Bool(true) {
        return None;
    }
    let started = record.value["outcome"]["error"].as_str() != Some("denied");
    let runs = policy.jobs.enabled();
    if started == runs {
        return None;
    }
    let spell = |yes: bool| if yes { "job started" } else { "jobs disabled" };
    let site = line_in_sources(policy, "max_per_session")
        .unwrap_or_else(|| format!("policy {}", policy.origin));
    Some(Change {
        line: record.line,
        checkpoint: record.checkpoint(),
        time: record.str("time").to_owned(),
        tool: record.tool(),
        argument: record.value["arguments"]["command"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        old: spell(started).into(),
        new: spell(runs).into(),
        kind: "jobs",
        because: format!(
            "`[jobs] max_per_session = {}` ({site})",
            policy.jobs.max_per_session
        ),
    })
}

/// The line of `needle` in the first of the policy's files that has it.
fn line_in_sources(policy: &Policy, needle: &str) -> Option<String> {
    policy.sources.iter().find_map(|file| {
        let text = std::fs::read_to_string(file).ok()?;
        let n = text.lines().position(|l| l.contains(needle))? + 1;
        Some(format!("{} line {n}", file.display()))
    })
}

/// What the candidate's write rules say about the workspace-relative `path`: None (allowed)
/// or the field that refuses it, with its site.
fn write_refused(policy: &Policy, segments: &[&str]) -> Option<String> {
    let fs = &policy.filesystem;
    if let Some(pattern) = crate::workspace::protect::protected_entry(&fs.protected, segments)
        .or_else(|| {
            segments.split_last().and_then(|(_, dir)| {
                crate::workspace::protect::inside_protected(&fs.protected, dir)
            })
        })
    {
        let site = line_in_sources(policy, &format!("\"{pattern}\""))
            .unwrap_or_else(|| policy.origin.clone());
        return Some(format!("`filesystem.protected` entry `{pattern}` ({site})"));
    }
    if fs.workspace == WorkspaceAccess::ReadOnly {
        let writable = fs.workspace_writable.iter().any(|w| {
            let w: Vec<&str> = w
                .split('/')
                .filter(|s| !s.is_empty() && *s != ".")
                .collect();
            !w.is_empty() && segments.starts_with(&w)
        });
        if !writable {
            let site =
                line_in_sources(policy, "workspace =").unwrap_or_else(|| policy.origin.clone());
            return Some(format!(
                "`filesystem.workspace = \"read-only\"` and no `workspace_writable` entry holds it ({site})"
            ));
        }
    }
    None
}

fn judge_write(policy: &Policy, record: &Record) -> Result<Option<Change>, String> {
    let Some(path) = record.value["arguments"]["path"].as_str() else {
        return Err("the record has no `arguments.path`".into());
    };
    if shortened(path) {
        return Err("the log shortened the path, so it cannot be matched".into());
    }
    if path.starts_with('/') {
        return Err(
            "an absolute path: the log does not record the workspace root it was beneath".into(),
        );
    }
    let segments: Vec<&str> = path
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if segments.contains(&"..") {
        return Err("the path has `..`: where it led depended on the workspace then".into());
    }
    let error = record.value["outcome"]["error"].as_str();
    let old = match error {
        None => "written",
        Some("denied") => "refused",
        // It failed for another reason; the write rules would not have changed that.
        Some(_) => return Ok(None),
    };
    let refused = write_refused(policy, &segments);
    let new = if refused.is_some() {
        "refused"
    } else {
        "written"
    };
    if old == new {
        return Ok(None);
    }
    Ok(Some(Change {
        line: record.line,
        checkpoint: record.checkpoint(),
        time: record.str("time").to_owned(),
        tool: record.tool(),
        argument: path.to_owned(),
        old: old.into(),
        new: new.into(),
        kind: "write rule",
        because: refused.unwrap_or_else(|| {
            "neither `filesystem.protected` nor a read-only workspace refuses it now".into()
        }),
    }))
}

/// The candidate's verdict on `host:port` by name: Ok(site of the allowing entry) or the
/// refusal in words.
fn egress_verdict(policy: &Policy, host: &str, port: u64) -> Result<String, String> {
    let Some(rules) = &policy.network.proxy else {
        return Err(format!(
            "`network.proxy` is off in {}: no connection goes out by name",
            policy.origin
        ));
    };
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let target = crate::egress::pattern::Target::parse_authority(&authority)
        .map_err(|e| format!("not a target: {e}"))?;
    match rules.judge(&target) {
        Ok(()) => Ok(rules
            .allow_hosts
            .iter()
            .find(|a| a.pattern.matches(&target))
            .map(|a| format!("`network.allow_hosts` entry `{}` ({})", a.pattern, a.site))
            .unwrap_or_else(|| "`network.allow_hosts`".into())),
        Err(refusal) => Err(refusal.to_string()),
    }
}

fn judge_egress(
    policy: &Policy,
    recorded: Option<&Policy>,
    record: &Record,
) -> Result<Option<Change>, String> {
    let args = &record.value["arguments"];
    let (Some(host), Some(port)) = (args["host"].as_str(), args["port"].as_u64()) else {
        return Err("the record has no `arguments.host` and `port`".into());
    };
    let decision = record.str("decision");
    if decision == "deny:egress-unattributed" {
        return Err("a connection without a call's credentials: refused under any policy".into());
    }
    let old_allowed = decision == "allow";
    let new = egress_verdict(policy, host, port);
    let change = |old: &str, new: &str, because: String| Change {
        line: record.line,
        checkpoint: record.checkpoint(),
        time: record.str("time").to_owned(),
        tool: record.tool(),
        argument: format!("{host}:{port}"),
        old: old.into(),
        new: new.into(),
        kind: "egress host",
        because,
    };
    match (old_allowed, new) {
        (true, Ok(_)) => Ok(None),
        (true, Err(why)) => Ok(Some(change("allowed", "refused", why))),
        (false, Err(_)) => Ok(None),
        (false, Ok(site)) => {
            // Refused then: by name (then this is a change), or for a reason names do not
            // decide (a private address, the connection cap), which would recur.
            let Some(recorded) = recorded else {
                return Err(
                    "refused then, allowed by name now; the log's own policy cannot be loaded \
                     to tell whether the refusal was by name"
                        .into(),
                );
            };
            match egress_verdict(recorded, host, port) {
                Ok(_) => Ok(None),
                Err(_) => Ok(Some(change("refused", "allowed", site))),
            }
        }
    }
}

/// One place the candidate's circuit breaker would have tripped.
#[derive(Debug, Clone, Serialize)]
pub struct BreakerTrip {
    /// Line of the audit log (1-based) of the refusal that trips it.
    pub line: usize,
    pub time: String,
    /// The session the record names (`stdio` when it names none).
    pub session: String,
    /// What refused it (`rule:NAME`, `path_escape`, `protected:…`, `denied:TOOL`).
    pub group: String,
    pub count: u32,
    /// `consecutive` (one group's run) or `window` (refusals of any group).
    pub cause: &'static str,
    /// Later refusals in the session that would have met the tripped breaker (asked a person,
    /// or been told to stop) until its run ended.
    pub met: usize,
}

/// Replays the log's calls through the candidate's `[breaker]`, per session and in the log's
/// time: a `shell_exec` the candidate's command rules deny is a refusal of that rule; a
/// call the candidate allows but the log shows refused for another reason (a path escape, a
/// write rule, a git refusal) keeps that refusal; a call that ended without an error is a
/// success of its tool. A command the candidate allows that was denied when it was logged has
/// no outcome to go by and counts as neither. No person's answer is replayed.
fn breaker_trips(
    policy: &Policy,
    records: &[Record],
    analyses: &BTreeMap<String, Result<Analysis, String>>,
) -> Vec<BreakerTrip> {
    use crate::breaker::{Breaker, Cause, Group};
    if !policy.breaker.enabled() {
        return Vec::new();
    }
    let start = std::time::Instant::now();
    let first = records.iter().find_map(|r| log_millis(r.str("time")));
    let mut sessions: BTreeMap<String, Breaker> = BTreeMap::new();
    let mut trips: Vec<BreakerTrip> = Vec::new();
    let mut open: BTreeMap<(String, String), usize> = BTreeMap::new();
    for record in records {
        let tool: &'static str = match record.str("tool") {
            "shell_exec" => "shell_exec",
            "job" => "job",
            "write_file" => "write_file",
            "edit_file" => "edit_file",
            "read_file" => "read_file",
            "code_interpreter" => "code_interpreter",
            _ => continue,
        };
        let Some(at) = log_millis(record.str("time")) else {
            continue;
        };
        let now = start + std::time::Duration::from_millis(at.saturating_sub(first.unwrap_or(at)));
        let session = record.value["session"]
            .as_str()
            .unwrap_or("stdio")
            .to_owned();
        let breaker = sessions
            .entry(session.clone())
            .or_insert_with(|| Breaker::new(policy.breaker.clone()));
        let error = record.value["outcome"]["error"].as_str();
        let old = record.str("decision");
        let refused = match (tool, candidate_denial(policy, record, analyses)) {
            (_, Some(rule)) => Some(Group::Rule(rule)),
            ("shell_exec" | "job", None) if old.starts_with("deny:") => continue,
            (_, None) => match error {
                Some("path_escape") => Some(Group::PathEscape),
                Some("denied") if tool == "write_file" || tool == "edit_file" => {
                    let path = record.value["arguments"]["path"].as_str().unwrap_or("");
                    let segments: Vec<&str> = path
                        .split('/')
                        .filter(|s| !s.is_empty() && *s != ".")
                        .collect();
                    write_refused(policy, &segments).map(|_| Group::Denied(tool))
                }
                Some("denied") => Some(Group::Denied(tool)),
                _ => None,
            },
        };
        let Some(group) = refused else {
            if error.is_none() {
                breaker.succeeded(tool);
            }
            continue;
        };
        let recorded = breaker.record(tool, &group, now);
        if recorded.tripped.is_some()
            && let Some(&i) = open.get(&(session.clone(), group.key()))
        {
            trips[i].met += 1;
        }
        if let Some(trip) = recorded.newly {
            open.insert((session.clone(), group.key()), trips.len());
            trips.push(BreakerTrip {
                line: record.line,
                time: record.str("time").to_owned(),
                session,
                group: group.key(),
                count: trip.count,
                cause: match trip.cause {
                    Cause::Window => "window",
                    _ => "consecutive",
                },
                met: 0,
            });
        }
    }
    trips
}

/// The command rule the candidate denies a logged `shell_exec` by, if it does.
fn candidate_denial(
    policy: &Policy,
    record: &Record,
    analyses: &BTreeMap<String, Result<Analysis, String>>,
) -> Option<String> {
    let command = record.value["arguments"]["command"].as_str()?;
    if !matches!(record.str("tool"), "shell_exec" | "job") || shortened(command) {
        return None;
    }
    let analysed = match analyses.get(command) {
        Some(Ok(analysis)) => Analysed::Done(analysis),
        Some(Err(why)) => Analysed::Failed(why),
        None => Analysed::NotNeeded,
    };
    let verdict = policy.decide(&Request::ShellExec {
        command,
        analysis: analysed,
    });
    match (verdict.decision, verdict.reason) {
        (Decision::Deny, Some(reason)) => Some(reason.rule),
        _ => None,
    }
}

/// A log time (`YYYY-MM-DDTHH:MM:SS.mmmZ`, as the audit log writes it) in milliseconds since
/// the epoch; None for anything else.
fn log_millis(time: &str) -> Option<u64> {
    let b = time.as_bytes();
    if b.len() != 24 || b[4] != b'-' || b[10] != b'T' || b[19] != b'.' || b[23] != b'Z' {
        return None;
    }
    let num = |from: usize, to: usize| time.get(from..to)?.parse::<u64>().ok();
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hh, mm, ss, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || y < 1970 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm), for years from 1970.
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(((days * 86_400 + hh * 3600 + mm * 60 + ss) * 1000) + ms)
}

/// The breaker part of the report: where the candidate would have tripped it.
fn render_breaker(o: &mut String, report: &Report) {
    use std::fmt::Write;
    if report.breaker.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "The candidate's circuit breaker ([breaker]) would trip {} time(s):",
        report.breaker.len()
    );
    for t in &report.breaker {
        let how = match t.cause {
            "window" => format!("{} refusals within the window", t.count),
            _ => format!("{} refusals in a row", t.count),
        };
        let _ = writeln!(
            o,
            "  {} line {} (session {}): {} ({how}); {} later refusal(s) would have met it",
            t.time, t.line, t.session, t.group, t.met
        );
    }
}

/// The report for people: changed calls, the summary table, what could not be judged.
pub fn render(report: &Report) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    for c in &report.changed {
        let _ = writeln!(
            o,
            "{} line {}: {} `{}`: {} → {} ({}: {})",
            c.time,
            c.line,
            c.tool,
            one_line(&c.argument),
            c.old,
            c.new,
            c.kind,
            c.because
        );
        if let Some(checkpoint) = &c.checkpoint {
            let _ = writeln!(
                o,
                "  the call's changes can be undone: checkpoint {checkpoint} (cordon checkpoints \
                 restore {checkpoint})"
            );
        }
    }
    if !report.changed.is_empty() {
        o.push('\n');
    }
    let _ = writeln!(
        o,
        "Replayed {} records{} under {}: {} would change, {} unchanged, {} not judged.",
        report.records,
        report
            .subject
            .as_ref()
            .map(|s| format!(" of {s}"))
            .unwrap_or_default(),
        report.policy,
        report.changed.len(),
        report.unchanged,
        report.not_judged.len()
    );
    if !report.summary.is_empty() {
        let _ = writeln!(o, "  {:<14} {:>6}", "change kind", "calls");
        for (kind, n) in &report.summary {
            let _ = writeln!(o, "  {kind:<14} {n:>6}");
        }
    }
    render_breaker(&mut o, report);
    for n in &report.not_judged {
        let tool = if n.tool.is_empty() {
            String::new()
        } else {
            format!(" ({})", n.tool)
        };
        let _ = writeln!(o, "not judged: line {}{tool}: {}", n.line, n.why);
    }
    o
}

/// A logged value on one line: control characters shown escaped.
fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_times_read_as_milliseconds_since_the_epoch() {
        assert_eq!(log_millis("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(log_millis("1970-01-02T00:00:01.250Z"), Some(86_401_250));
        assert_eq!(
            log_millis("2026-12-01T22:32:53.170Z").unwrap()
                - log_millis("2026-12-01T22:32:52.989Z").unwrap(),
            181
        );
        assert_eq!(
            log_millis("2024-03-01T00:00:00.000Z").unwrap()
                - log_millis("2024-02-28T00:00:00.000Z").unwrap(),
            2 * 86_400_000
        );
        for bad in [
            "",
            "2026-12-01 22:32:53",
            "2026-13-01T00:00:00.000Z",
            "x".repeat(24).as_str(),
        ] {
            assert_eq!(log_millis(bad), None, "{bad}");
        }
    }

    #[test]
    fn recorded_policy_names_are_loadable_names() {
        assert_eq!(
            recorded_policy("default (builtin:default)").as_deref(),
            Some("default")
        );
        assert_eq!(
            recorded_policy("team (/etc/cordon/team.toml)").as_deref(),
            Some("/etc/cordon/team.toml")
        );
        assert_eq!(recorded_policy("nonsense"), None);
    }

    #[test]
    fn values_the_log_shortened_are_recognised() {
        let long = "x".repeat(300);
        assert!(shortened(&crate::text::shortened(&long, 200)));
        assert!(!shortened("echo (3 chars)"));
        assert!(!shortened("ls"));
    }

    #[test]
    fn write_rules_are_judged_on_the_path_as_given() {
        let mut policy = Policy::builtin_default();
        policy.filesystem.protected = vec![".github/workflows".into()];
        assert!(write_refused(&policy, &[".github", "workflows", "ci.yml"]).is_some());
        assert!(write_refused(&policy, &["src", "main.rs"]).is_none());
        assert!(
            write_refused(&policy, &["sub", ".git"]).is_some(),
            "a .git file"
        );
        policy.filesystem.workspace = WorkspaceAccess::ReadOnly;
        policy.filesystem.workspace_writable = vec!["out".into()];
        assert!(write_refused(&policy, &["src", "main.rs"]).is_some());
        assert!(write_refused(&policy, &["out", "report.txt"]).is_none());
    }
}
