//! The circuit breaker for repeated refusals: per client session, how often the same thing was
//! refused, and whether the breaker has tripped.
//!
//! A refusal belongs to a [`Group`]: what refused it, never how the call was spelled (two
//! spellings of `rm -rf ~` are refused by the same command rule, so they are one group; a
//! protected path is its `filesystem.protected` entry; a proxy refusal its host; a kernel
//! denial the policy field and the path or port it names). [`Breaker`] keeps, per group, the
//! run of refusals with no successful call of the same tool between them (it ends after the
//! policy's window without a new one), and over all groups the refusals of the last window.
//! When a run reaches `[breaker] consecutive`, or the window `window_refusals`, the breaker is
//! tripped for that group: the *next* refusal of it is no longer answered as a plain deny
//! (`server::breaker` asks a person or answers with the breaker's message). A person's answer
//! resets the group; "keep refusing" stays for the session, as does "allow for this session".
//!
//! Tools report what they refused through [`report`] into the call's [`collect`] scope (a
//! task-local the server sets around each `tools/call`), so no tool knows the breaker exists
//! and nothing in a call's arguments reaches it: the thresholds are the policy's alone.
//!
//! Owns the counting only. It asks nobody and writes no result (`server::breaker`), and
//! knows nothing of MCP.

use crate::audit::AnsweredBy;
use crate::policy::breaker::BreakerPolicy;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Instant, SystemTime};

/// Groups tracked per session at most; the one refused longest ago is forgotten first.
const MAX_GROUPS: usize = 256;
/// Refusals of the window remembered per session at most (the count saturates there).
const MAX_WINDOW_KEPT: usize = 10_000;

/// What refused a call: the unit the breaker counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Group {
    /// A command rule (`deny`, or an `ask` nobody could answer), by name.
    Rule(String),
    /// A path argument that leaves the workspace.
    PathEscape,
    /// A file-tool write refused by a `filesystem.protected` entry.
    Protected(String),
    /// A file-tool write outside `filesystem.workspace_writable` of a read-only workspace.
    ReadOnlyWorkspace,
    /// A git change cordon refused after a command left it.
    Git,
    /// A connection the egress proxy refused, by host.
    Host(String),
    /// A denial the kernel reported: the policy field that governs it and the path or port.
    Kernel { field: String, target: String },
    /// Any other refusal (`denied`) of this tool.
    Denied(&'static str),
}

impl Group {
    /// The group as results, audit records and `policy replay` name it.
    pub(crate) fn key(&self) -> String {
        match self {
            Group::Rule(rule) => format!("rule:{rule}"),
            Group::PathEscape => "path_escape".into(),
            Group::Protected(entry) => format!("protected:{entry}"),
            Group::ReadOnlyWorkspace => "workspace_read_only".into(),
            Group::Git => "git".into(),
            Group::Host(host) => format!("host:{host}"),
            Group::Kernel { field, target } => format!("kernel:{field}:{target}"),
            Group::Denied(tool) => format!("denied:{tool}"),
        }
    }

    /// The group as log messages name it: without what the agent chose (a host, a path),
    /// since events carry no argument values.
    pub(crate) fn public_key(&self) -> String {
        match self {
            Group::Host(_) => "host".into(),
            Group::Kernel { field, .. } => format!("kernel:{field}"),
            other => other.key(),
        }
    }

    /// What was refused, in words, for the breaker's message.
    pub(crate) fn describe(&self) -> String {
        match self {
            Group::Rule(rule) => format!("the command rule `{rule}`"),
            Group::PathEscape => "a path outside the workspace".into(),
            Group::Protected(entry) => {
                format!("a write under the protected path `{entry}` (filesystem.protected)")
            }
            Group::ReadOnlyWorkspace => "a write to the read-only workspace".into(),
            Group::Git => "a git change cordon does not let through".into(),
            Group::Host(host) => format!("a connection to `{host}` (the egress proxy)"),
            Group::Kernel { field, target } => {
                format!("access to `{target}`, which the kernel denied ({field})")
            }
            Group::Denied(tool) => format!("a {tool} call the policy does not allow"),
        }
    }

    /// Whether a person's "allow" can take effect: only a command rule is a decision cordon
    /// makes before anything runs. Everything else is enforced by construction (the
    /// workspace capability, the view, Landlock, the proxy) and only a policy change lifts it.
    #[cfg(test)]
    pub(crate) fn can_be_allowed(&self) -> bool {
        matches!(self, Group::Rule(_))
    }
}

/// One refusal a call made, reported by the tool that refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    pub tool: &'static str,
    pub group: Group,
}

/// What one call reported: its refusals, and whether it succeeded.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub refused: Vec<Refused>,
    /// The tool of a call that ended without an error.
    pub succeeded: Option<&'static str>,
}

tokio::task_local! {
    static CALL: RefCell<Seen>;
}

/// Runs `call` collecting what it reports through [`report`] and [`succeeded`].
pub(crate) async fn collect<F: std::future::Future>(call: F) -> (F::Output, Seen) {
    CALL.scope(RefCell::new(Seen::default()), async move {
        let out = call.await;
        let seen = CALL.with(|c| std::mem::take(&mut *c.borrow_mut()));
        (out, seen)
    })
    .await
}

/// A refusal of the running call (nothing happens outside a [`collect`] scope: the CLI,
/// tests, a task's deferred run). A group reported twice in one call counts once.
pub(crate) fn report(tool: &'static str, group: Group) {
    let _ = CALL.try_with(|c| {
        let mut seen = c.borrow_mut();
        if !seen.refused.iter().any(|r| r.group == group) {
            seen.refused.push(Refused { tool, group });
        }
    });
}

/// A refusal by a stage that does not know which tool it serves (the workspace's write
/// rules); the tool's end claims it ([`claim`]).
pub(crate) fn report_write(group: Group) {
    report("", group);
}

/// Names `tool` as the refuser of every refusal of the running call reported without one.
pub(crate) fn claim(tool: &'static str) {
    let _ = CALL.try_with(|c| {
        for r in &mut c.borrow_mut().refused {
            if r.tool.is_empty() {
                r.tool = tool;
            }
        }
    });
}

/// Whether the running call has reported a refusal already.
pub(crate) fn reported() -> bool {
    CALL.try_with(|c| !c.borrow().refused.is_empty())
        .unwrap_or(false)
}

/// The running call ended without an error.
pub(crate) fn succeeded(tool: &'static str) {
    let _ = CALL.try_with(|c| c.borrow_mut().succeeded = Some(tool));
}

/// Why the breaker is tripped for a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cause {
    /// `consecutive` refusals of this group in a row.
    Consecutive,
    /// `window_refusals` refusals of any group within the window.
    Window,
    /// A person was asked and chose to keep refusing, for the rest of the session.
    KeptByPerson(AnsweredBy),
}

/// A tripped breaker, as a result's `breaker` field says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Trip {
    pub group: Group,
    /// Refusals of the run (or of the window, when the window tripped it), this one included
    /// once it is recorded.
    pub count: u32,
    /// When the run (or the window) began.
    pub since: SystemTime,
    pub cause: Cause,
}

/// What recording one refusal came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// The breaker was already tripped for the group: this refusal is not answered plainly.
    pub tripped: Option<Trip>,
    /// This refusal tripped it (for the log, the audit record and the metric).
    pub newly: Option<Trip>,
}

/// A person's answer to a tripped breaker's question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    AllowOnce,
    AllowSession,
    KeepRefusing,
}

impl Choice {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Choice::AllowOnce => "allow_once",
            Choice::AllowSession => "allow_session",
            Choice::KeepRefusing => "keep_refusing",
        }
    }
}

struct Run {
    count: u32,
    since: SystemTime,
    /// When the run began; only tests read it (`run_age`).
    #[cfg(test)]
    first: Instant,
    last: Instant,
    /// The tools this group was refused in: a success of one of them ends the run.
    tools: Vec<&'static str>,
}

#[derive(Default)]
struct State {
    runs: HashMap<Group, Run>,
    /// When each refusal of the window happened (oldest first), and its wall-clock time.
    window: VecDeque<(Instant, SystemTime)>,
    allowed: HashMap<Group, AnsweredBy>,
    kept: HashMap<Group, AnsweredBy>,
}

/// One client session's breaker.
pub(crate) struct Breaker {
    policy: BreakerPolicy,
    state: Mutex<State>,
}

impl Breaker {
    pub(crate) fn new(policy: BreakerPolicy) -> Self {
        Self {
            policy,
            state: Mutex::default(),
        }
    }

    pub(crate) fn policy(&self) -> &BreakerPolicy {
        &self.policy
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a refusal of `group` now would meet a tripped breaker (before it is recorded).
    pub(crate) fn tripped(&self, group: &Group, now: Instant) -> Option<Trip> {
        let mut state = self.state();
        self.expire(&mut state, now);
        self.trip_of(&state, group)
    }

    /// Who allowed `group` for the rest of the session, if someone did.
    pub(crate) fn allowed_for_session(&self, group: &Group) -> Option<AnsweredBy> {
        self.state().allowed.get(group).cloned()
    }

    /// Records a refusal of `group` by `tool` at `now`.
    pub(crate) fn record(&self, tool: &'static str, group: &Group, now: Instant) -> Recorded {
        let mut state = self.state();
        self.expire(&mut state, now);
        let before = self.trip_of(&state, group);
        let wall = SystemTime::now();
        if self.policy.window_refusals > 0 {
            state.window.push_back((now, wall));
            // Kept past the threshold, so a result counts every refusal of the window.
            while state.window.len() > MAX_WINDOW_KEPT {
                state.window.pop_front();
            }
        }
        if !state.runs.contains_key(group) && state.runs.len() >= MAX_GROUPS {
            let oldest = state
                .runs
                .iter()
                .min_by_key(|(_, run)| run.last)
                .map(|(g, _)| g.clone());
            if let Some(oldest) = oldest {
                state.runs.remove(&oldest);
            }
        }
        let run = state.runs.entry(group.clone()).or_insert(Run {
            count: 0,
            since: wall,
            #[cfg(test)]
            first: now,
            last: now,
            tools: Vec::new(),
        });
        run.count = run.count.saturating_add(1);
        run.last = now;
        if !run.tools.contains(&tool) {
            run.tools.push(tool);
        }
        let after = self.trip_of(&state, group);
        match before {
            Some(mut trip) => {
                // This refusal is one more of the run (or window) that tripped it.
                if let Some(after) = &after
                    && after.cause == trip.cause
                {
                    trip.count = after.count;
                } else {
                    trip.count = trip.count.saturating_add(1);
                }
                Recorded {
                    tripped: Some(trip),
                    newly: None,
                }
            }
            None => Recorded {
                tripped: None,
                newly: after,
            },
        }
    }

    /// A call of `tool` succeeded: the runs of groups refused in it end.
    pub(crate) fn succeeded(&self, tool: &'static str) {
        self.state()
            .runs
            .retain(|_, run| !run.tools.contains(&tool));
    }

    /// A person answered the tripped breaker about `group`: its run and the window start
    /// again; "keep refusing" and "allow for this session" hold for the session.
    pub(crate) fn answered(&self, group: &Group, choice: Choice, by: AnsweredBy) {
        let mut state = self.state();
        state.runs.remove(group);
        state.window.clear();
        match choice {
            Choice::AllowOnce => {}
            Choice::AllowSession => {
                state.allowed.insert(group.clone(), by);
            }
            Choice::KeepRefusing => {
                state.kept.insert(group.clone(), by);
            }
        }
    }

    /// Drops what the window's end has ended: refusals older than the window, and runs whose
    /// last refusal is.
    fn expire(&self, state: &mut State, now: Instant) {
        let window = self.policy.window;
        let old = |at: Instant| now.saturating_duration_since(at) >= window;
        while state.window.front().is_some_and(|(at, _)| old(*at)) {
            state.window.pop_front();
        }
        state.runs.retain(|_, run| !old(run.last));
    }

    fn trip_of(&self, state: &State, group: &Group) -> Option<Trip> {
        if let Some(by) = state.kept.get(group) {
            let run = state.runs.get(group);
            return Some(Trip {
                group: group.clone(),
                count: run.map_or(0, |r| r.count),
                since: run.map_or_else(SystemTime::now, |r| r.since),
                cause: Cause::KeptByPerson(by.clone()),
            });
        }
        if let Some(run) = state.runs.get(group)
            && self.policy.consecutive > 0
            && run.count >= self.policy.consecutive
        {
            return Some(Trip {
                group: group.clone(),
                count: run.count,
                since: run.since,
                cause: Cause::Consecutive,
            });
        }
        if self.policy.window_refusals > 0
            && state.window.len() >= self.policy.window_refusals as usize
        {
            let since = state
                .window
                .front()
                .map_or_else(SystemTime::now, |(_, wall)| *wall);
            return Some(Trip {
                group: group.clone(),
                count: state.window.len() as u32,
                since,
                cause: Cause::Window,
            });
        }
        None
    }

    /// How long the run of `group` has lasted (for tests).
    #[cfg(test)]
    pub(crate) fn run_age(&self, group: &Group, now: Instant) -> Option<std::time::Duration> {
        self.state()
            .runs
            .get(group)
            .map(|r| now.saturating_duration_since(r.first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::breaker::RawBreaker;
    use std::time::Duration;

    fn breaker(consecutive: u64, window: u64, secs: u64) -> Breaker {
        Breaker::new(
            BreakerPolicy::validate(RawBreaker {
                consecutive: Some(consecutive),
                window_refusals: Some(window),
                window_secs: Some(secs),
                ask: None,
            })
            .unwrap(),
        )
    }

    fn rule(name: &str) -> Group {
        Group::Rule(name.into())
    }

    fn by() -> AnsweredBy {
        AnsweredBy {
            channel: "operator",
            by: "uid 0, pid 1".into(),
        }
    }

    #[test]
    fn the_third_refusal_trips_and_the_fourth_meets_it() {
        let b = breaker(3, 0, 300);
        let t = Instant::now();
        let g = rule("no-rm");
        assert_eq!(b.record("shell_exec", &g, t).newly, None);
        assert_eq!(b.record("shell_exec", &g, t).newly, None);
        let third = b.record("shell_exec", &g, t);
        assert_eq!(third.tripped, None, "the third is still answered plainly");
        let trip = third.newly.expect("the third trips it");
        assert_eq!((trip.count, trip.cause), (3, Cause::Consecutive));
        assert!(b.tripped(&g, t).is_some());
        let fourth = b.record("shell_exec", &g, t);
        assert_eq!(fourth.tripped.map(|t| t.count), Some(4));
        // Another group is not tripped by this one's run.
        assert_eq!(b.tripped(&rule("other"), t), None);
    }

    #[test]
    fn a_success_of_the_same_tool_ends_the_run_and_another_tools_does_not() {
        let b = breaker(3, 0, 300);
        let t = Instant::now();
        let g = rule("no-rm");
        b.record("shell_exec", &g, t);
        b.record("shell_exec", &g, t);
        b.succeeded("read_file");
        b.record("shell_exec", &g, t);
        assert!(
            b.tripped(&g, t).is_some(),
            "read_file's success is not this run's"
        );
        b.succeeded("shell_exec");
        assert_eq!(b.tripped(&g, t), None);
        assert_eq!(b.record("shell_exec", &g, t).newly, None);
    }

    #[test]
    fn the_window_trips_on_refusals_of_any_group_and_its_end_resets() {
        let b = breaker(0, 4, 60);
        let t = Instant::now();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            b.record("shell_exec", &rule(name), t + Duration::from_secs(i as u64));
        }
        let fourth = b.record("write_file", &Group::PathEscape, t + Duration::from_secs(3));
        let fifth = b.record("write_file", &Group::PathEscape, t + Duration::from_secs(3));
        assert_eq!(
            fifth.tripped.map(|t| t.count),
            Some(5),
            "every refusal counts"
        );
        assert_eq!(
            fourth.newly.map(|t| (t.count, t.cause)),
            Some((4, Cause::Window))
        );
        assert!(b.tripped(&rule("z"), t + Duration::from_secs(4)).is_some());
        // 60 s after the third, the first three have left the window; two are too few.
        assert_eq!(b.tripped(&rule("z"), t + Duration::from_secs(62)), None);
    }

    #[test]
    fn a_run_ends_a_window_after_its_last_refusal() {
        let b = breaker(3, 0, 60);
        let t = Instant::now();
        let g = rule("x");
        b.record("shell_exec", &g, t);
        b.record("shell_exec", &g, t + Duration::from_secs(30));
        // More than a window after the last one: a new run.
        b.record("shell_exec", &g, t + Duration::from_secs(91));
        assert_eq!(b.tripped(&g, t + Duration::from_secs(92)), None);
        assert!(b.run_age(&g, t + Duration::from_secs(92)).unwrap() < Duration::from_secs(2));
    }

    #[test]
    fn answers_reset_and_keep_refusing_stays_for_the_session() {
        let b = breaker(3, 10, 300);
        let t = Instant::now();
        let g = rule("x");
        for _ in 0..3 {
            b.record("shell_exec", &g, t);
        }
        b.answered(&g, Choice::AllowOnce, by());
        assert_eq!(b.tripped(&g, t), None);
        assert_eq!(b.allowed_for_session(&g), None);
        for _ in 0..3 {
            b.record("shell_exec", &g, t);
        }
        b.answered(&g, Choice::KeepRefusing, by());
        let kept = b.tripped(&g, t).expect("a person's deny stays");
        assert!(matches!(kept.cause, Cause::KeptByPerson(_)));
        b.succeeded("shell_exec");
        assert!(b.tripped(&g, t).is_some(), "not even a success lifts it");
        let other = rule("y");
        b.answered(&other, Choice::AllowSession, by());
        assert_eq!(b.allowed_for_session(&other), Some(by()));
    }

    #[test]
    fn groups_are_bounded() {
        let b = breaker(3, 0, 300);
        let t = Instant::now();
        for i in 0..(MAX_GROUPS + 10) {
            b.record(
                "shell_exec",
                &rule(&i.to_string()),
                t + Duration::from_millis(i as u64),
            );
        }
        assert!(b.state().runs.len() <= MAX_GROUPS);
    }

    #[tokio::test]
    async fn reports_are_collected_per_call_and_count_once() {
        let ((), seen) = collect(async {
            report("shell_exec", rule("x"));
            report("shell_exec", rule("x"));
            assert!(reported());
            succeeded("shell_exec");
        })
        .await;
        assert_eq!(seen.refused.len(), 1);
        assert_eq!(seen.succeeded, Some("shell_exec"));
        // Outside a call nothing is kept, and nothing fails.
        report("shell_exec", rule("x"));
        assert!(!reported());
    }

    #[test]
    fn keys_name_what_refused() {
        assert_eq!(rule("no-rm").key(), "rule:no-rm");
        assert_eq!(Group::Host("evil.example".into()).public_key(), "host");
        assert!(rule("x").can_be_allowed() && !Group::PathEscape.can_be_allowed());
    }
}
