//! MCP Tasks (`io.modelcontextprotocol/tasks`, SEP-2663): one client scope's long calls
//! answered with a task handle and polled.
//!
//! Owns the bookkeeping of a scope's tasks ([`Tasks`]): unguessable ids, the bound on running
//! tasks ([`MAX_RUNNING`], refused with a clear error past it), how long and how many finished
//! results are kept ([`KEEP_FINISHED`], [`MAX_KEPT`]: memory stays bounded whether or not the
//! client ever polls), `tasks/get` (progress as the status message, then the call's own
//! `CallToolResult`), `tasks/cancel` (the call's cancellation token: the same path as
//! `notifications/cancelled`, which kills the process tree) and `tasks/update` (cordon's
//! tasks never ask for input: approvals are settled before a task exists). Each task's token
//! is a child of its session's, so a task ends with its session like any call.
//!
//! Which calls become tasks ([`offer`]): `shell_exec` and `code_interpreter` calls of a client
//! that declared the extension. `server::call_tool` asks [`offer`] first (which reserves a
//! place), puts the [`Offer`] in the request's extensions, and runs the tool as usual; a tool
//! that decides to run (after the command rules, the argument checks and any approval) hands
//! its run to the offer instead of awaiting it, and [`TaskOffer::start`] starts it with the
//! same finishing a plain call's result gets (`server::finish_response`, the audit origin, the
//! HTTP session's call permit).

use super::CordonServer;
use crate::shape::{ErrorKind, ToolError};
use crate::tools::{CallHooks, SharedContext};
use rmcp::ErrorData as McpError;
use rmcp::RoleServer;
use rmcp::model::{
    CallToolResponse, CallToolResult, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject,
    Task, TaskPayload, TaskStatus,
};
use rmcp::service::RequestContext;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The tools whose calls may become tasks: the ones that run processes for as long as the
/// policy's timeout allows. The file tools answer in milliseconds and stay plain calls.
pub(super) const TASK_TOOLS: [&str; 2] = ["shell_exec", "code_interpreter"];

/// Tasks of one scope that may be running (or waiting for a slot) at once.
pub(super) const MAX_RUNNING: usize = 8;

/// Finished results one scope keeps; past it the oldest is dropped (each result is at most
/// `tools::MAX_RESULT_BYTES`, so this bounds a scope's memory whatever the client does).
pub(super) const MAX_KEPT: usize = 16;

/// How long a finished result is kept for `tasks/get`.
pub(super) const KEEP_FINISHED: Duration = Duration::from_secs(600);

/// The polling interval suggested to clients.
pub(super) const POLL_INTERVAL_MS: u64 = 1000;

/// A call that ends within this is answered directly, as for any other client; only a call
/// still running then becomes a task (a client honouring `pollIntervalMs` would otherwise
/// wait a second for an `echo`).
pub(super) const ANSWER_DIRECTLY_WITHIN: Duration = Duration::from_millis(300);

/// How a call offered as a task went: answered directly (it ended within
/// [`ANSWER_DIRECTLY_WITHIN`]), or a task's handle.
pub(crate) enum Started {
    Direct(Result<CallToolResult, McpError>),
    Task(CreateTaskResult),
}

/// Margin for killing a tree and shaping its output after the call's timeout.
const END_MARGIN: Duration = Duration::from_secs(30);

/// The run a tool hands to its task: given the task's hooks, the call's finished result (or
/// the JSON-RPC error it ended with).
pub(super) type Run = Box<
    dyn FnOnce(CallHooks) -> Pin<Box<dyn Future<Output = Result<CallToolResult, McpError>> + Send>>
        + Send,
>;

/// Put in a task-capable call's request extensions by the server when the call may become
/// a task: a tool that decides to run hands its run over here instead of awaiting it.
#[derive(Clone, Default)]
pub(super) struct Offer {
    run: Arc<Mutex<Option<Run>>>,
}

impl Offer {
    /// Hands the call's run over; the server starts it as a task.
    pub(super) fn defer(&self, run: Run) {
        *lock(&self.run) = Some(run);
    }

    /// The run a tool handed over, if it did (it answers at once otherwise: refused,
    /// invalid, waiting for approval).
    pub(super) fn take(&self) -> Option<Run> {
        lock(&self.run).take()
    }
}

/// Why no task could be reserved.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NoTask {
    #[error(
        "this session already has {MAX_RUNNING} tasks running, the most cordon allows; wait \
         for one to finish (tasks/get) or cancel one (tasks/cancel), then call again"
    )]
    Full,
    /// No randomness for an unguessable id: the call runs without a task.
    #[error("no random bytes for a task id")]
    NoEntropy,
}

/// One scope's tasks.
#[derive(Default)]
pub(crate) struct Tasks {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Places taken by calls deciding whether to run (see [`Reservation`]).
    reserved: usize,
}

struct Entry {
    tool: &'static str,
    created: Instant,
    created_at: String,
    updated_at: String,
    ttl_ms: u64,
    cancel: CancellationToken,
    cancel_requested: bool,
    /// The latest output line of a running `shell_exec` (bounded by `exec`).
    last_line: String,
    finished: Option<Finished>,
}

struct Finished {
    at: Instant,
    payload: TaskPayload,
    message: String,
}

impl Inner {
    fn running(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.finished.is_none())
            .count()
            + self.reserved
    }

    /// Drops finished results past [`KEEP_FINISHED`], then the oldest past [`MAX_KEPT`].
    fn sweep(&mut self) {
        self.entries.retain(|_, e| {
            e.finished
                .as_ref()
                .is_none_or(|f| f.at.elapsed() < KEEP_FINISHED)
        });
        let mut finished: Vec<(Instant, String)> = self
            .entries
            .iter()
            .filter_map(|(id, e)| e.finished.as_ref().map(|f| (f.at, id.clone())))
            .collect();
        if finished.len() > MAX_KEPT {
            finished.sort();
            for (_, id) in &finished[..finished.len() - MAX_KEPT] {
                self.entries.remove(id);
            }
        }
    }
}

impl Entry {
    fn detailed(&self, id: &str) -> DetailedTask {
        let (payload, message) = match &self.finished {
            Some(f) => (f.payload.clone(), f.message.clone()),
            None => {
                let mut message = format!(
                    "{} running for {}s",
                    self.tool,
                    self.created.elapsed().as_secs()
                );
                if self.cancel_requested {
                    message.push_str("; cancellation requested, its processes are being killed");
                } else if !self.last_line.is_empty() {
                    message.push_str(&format!("; last output: {}", self.last_line));
                }
                (TaskPayload::Working, message)
            }
        };
        let task = Task::new(id, TaskStatus::Working, &self.created_at, &self.updated_at)
            .with_status_message(message)
            .with_ttl_ms(self.ttl_ms)
            .with_poll_interval_ms(POLL_INTERVAL_MS);
        DetailedTask::new(task, payload)
    }
}

impl Tasks {
    /// A place for one more running task, or why there is none. Taken before the tool
    /// decides (and perhaps asks the user), so the limit holds for concurrent calls too.
    pub(crate) fn reserve(self: &Arc<Self>) -> Result<Reservation, NoTask> {
        let id = random_id().ok_or(NoTask::NoEntropy)?;
        let mut inner = lock(&self.inner);
        inner.sweep();
        if inner.running() >= MAX_RUNNING {
            return Err(NoTask::Full);
        }
        inner.reserved += 1;
        Ok(Reservation {
            tasks: Arc::clone(self),
            id,
            held: true,
        })
    }

    /// `tasks/get`: the task's state; once finished, its result (`completed`), the JSON-RPC
    /// error it ended with (`failed`), or `cancelled`.
    pub(crate) fn get(&self, id: &str) -> Result<GetTaskResult, McpError> {
        let mut inner = lock(&self.inner);
        inner.sweep();
        let entry = inner.entries.get(id).ok_or_else(|| unknown(id))?;
        Ok(GetTaskResult::new(entry.detailed(id)))
    }

    /// `tasks/cancel`: the call is cancelled as by `notifications/cancelled` (its tree is
    /// killed); the task reads `cancelled` once the call has ended. A finished task stays as
    /// it was, and the answer says so (`-32602`, as the extension requires for a task in a
    /// terminal state): a plain success would read as if the cancel had stopped something.
    pub(crate) fn cancel(&self, id: &str) -> Result<(), McpError> {
        let mut inner = lock(&self.inner);
        inner.sweep();
        let entry = inner.entries.get_mut(id).ok_or_else(|| unknown(id))?;
        if let Some(finished) = &entry.finished {
            let status = match finished.payload {
                TaskPayload::Completed { .. } => "completed",
                TaskPayload::Failed { .. } => "failed",
                TaskPayload::Cancelled => "cancelled",
                _ => "finished",
            };
            return Err(McpError::invalid_params(
                format!(
                    "task `{}` has already ended ({status}: {}); cancelling it changed \
                     nothing. Its result stays readable with tasks/get",
                    crate::tools::echo_arg(id),
                    finished.message
                ),
                None,
            ));
        }
        entry.cancel_requested = true;
        entry.updated_at = crate::audit::now_rfc3339();
        entry.cancel.cancel();
        Ok(())
    }

    /// `tasks/update`: acknowledged for a known task. cordon's tasks never ask for input
    /// (approvals are settled before the task exists), so every response is for a key that
    /// is not outstanding, which the extension says to ignore.
    pub(crate) fn update(&self, id: &str) -> Result<(), McpError> {
        let mut inner = lock(&self.inner);
        inner.sweep();
        inner.entries.get(id).map(|_| ()).ok_or_else(|| unknown(id))
    }

    /// Records how task `id`'s call ended.
    fn finish(&self, id: &str, result: Result<CallToolResult, McpError>) {
        let mut inner = lock(&self.inner);
        let Some(entry) = inner.entries.get_mut(id) else {
            return;
        };
        let elapsed = entry.created.elapsed().as_secs();
        let (payload, message) = if entry.cancel_requested {
            (
                TaskPayload::Cancelled,
                format!("cancelled by tasks/cancel after {elapsed}s; its processes were killed"),
            )
        } else {
            match result {
                Ok(result) => {
                    let failed = result.is_error == Some(true);
                    let message = if failed {
                        format!("{} finished after {elapsed}s with an error", entry.tool)
                    } else {
                        format!("{} finished after {elapsed}s", entry.tool)
                    };
                    (
                        TaskPayload::Completed {
                            result: to_object(&result),
                        },
                        message,
                    )
                }
                Err(error) => {
                    let message = format!("{} failed: {}", entry.tool, error.message);
                    (
                        TaskPayload::Failed {
                            error: to_object(&error),
                        },
                        message,
                    )
                }
            }
        };
        entry.updated_at = crate::audit::now_rfc3339();
        entry.finished = Some(Finished {
            at: Instant::now(),
            payload,
            message,
        });
        inner.sweep();
    }

    /// Notes a running call's latest output line for its status message. The line is the
    /// confined command's (at most 200 bytes, cut by `exec`): terminal escapes and control
    /// characters are removed, as from any text result, before a client shows it.
    /// False when there is no task `id` (yet).
    fn note_line(&self, id: &str, line: &str) -> bool {
        let (line, _) = crate::shape::hygiene::strip_controls(line);
        let mut inner = lock(&self.inner);
        let Some(entry) = inner.entries.get_mut(id) else {
            return false;
        };
        if entry.finished.is_none() && entry.last_line != line {
            entry.last_line = line;
            entry.updated_at = crate::audit::now_rfc3339();
        }
        true
    }

    /// How many tasks are running (tests).
    #[cfg(test)]
    fn running(&self) -> usize {
        lock(&self.inner).running()
    }
}

impl Drop for Tasks {
    /// The scope is gone (its HTTP session's service was dropped): nothing of it may run on.
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        for entry in inner.entries.values() {
            entry.cancel.cancel();
        }
    }
}

/// A place for one task, held while the tool decides; released if it answers without one.
pub(crate) struct Reservation {
    tasks: Arc<Tasks>,
    id: String,
    /// Still a reservation (not yet a task's entry).
    held: bool,
}

impl Reservation {
    /// Starts `run` as a task of the scope: cancelled by `tasks/cancel`, and with `session`
    /// (its token's parent: the client going away, DELETE, idle expiry, shutdown). `max_run`
    /// is the longest the call may run (the policy's maximum timeout); the advertised
    /// `ttlMs` covers it and the time the result is kept. The task is visible to `tasks/get`
    /// before this returns, as the extension requires.
    pub(crate) async fn start(
        mut self,
        tool: &'static str,
        max_run: Duration,
        session: &CancellationToken,
        run: Run,
    ) -> Started {
        let cancel = session.child_token();
        let weak = Arc::downgrade(&self.tasks);
        let id = self.id.clone();
        // Before the call is a task there is no entry: its latest line waits here for one.
        let early_line = Arc::new(Mutex::new(String::new()));
        let progress = {
            let (weak, id, early) = (weak.clone(), id.clone(), Arc::clone(&early_line));
            Box::new(move |_elapsed: Duration, line: String| {
                if let Some(tasks) = weak.upgrade()
                    && !tasks.note_line(&id, &line)
                {
                    *lock(&early) = line;
                }
            }) as Box<dyn Fn(Duration, String) + Send + Sync>
        };
        let hooks = CallHooks {
            cancel: cancel.clone(),
            progress: Some(progress),
        };
        let created = Instant::now();
        let created_at = crate::audit::now_rfc3339();
        let call = run(hooks);
        let (done_tx, mut done) = tokio::sync::oneshot::channel();
        let guard_token = cancel.clone();
        tokio::spawn(async move {
            // Dropped early (the runtime is going away): the call is cancelled all the same.
            let _ends_with_the_task = guard_token.drop_guard();
            let _ = done_tx.send(call.await);
        });
        let gone = || McpError::internal_error("the call's task ended without a result", None);
        // Ended in time: a plain answer; the reservation's Drop frees the place.
        if let Ok(result) = tokio::time::timeout(ANSWER_DIRECTLY_WITHIN, &mut done).await {
            return Started::Direct(result.unwrap_or_else(|_| Err(gone())));
        }
        let ttl = max_run + END_MARGIN + KEEP_FINISHED;
        let entry = Entry {
            tool,
            created,
            updated_at: created_at.clone(),
            created_at,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            cancel: cancel.clone(),
            cancel_requested: false,
            last_line: crate::shape::hygiene::strip_controls(&lock(&early_line)).0,
            finished: None,
        };
        let seed = {
            let mut inner = lock(&self.tasks.inner);
            inner.entries.insert(id.clone(), entry);
            // The reservation becomes the entry: its Drop must not release the place again.
            inner.reserved -= 1;
            self.held = false;
            inner.entries[&id].detailed(&id).task
        };
        tokio::spawn(async move {
            let result = done.await.unwrap_or_else(|_| Err(gone()));
            if let Some(tasks) = weak.upgrade() {
                tasks.finish(&id, result);
            }
        });
        Started::Task(CreateTaskResult::new(seed))
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.held {
            let mut inner = lock(&self.tasks.inner);
            inner.reserved = inner.reserved.saturating_sub(1);
        }
    }
}

/// The JSON-RPC error for a task id this scope does not have (never was, expired, dropped,
/// or another client's): `-32602`, as the extension requires.
fn unknown(id: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "no task `{}` in this session: task ids are per client session, and a finished \
             task's result is kept for {}s (at most {MAX_KEPT} of them); call the tool again",
            crate::tools::echo_arg(id),
            KEEP_FINISHED.as_secs()
        ),
        None,
    )
}

fn to_object(value: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

/// 128 random bits, hex: task ids are bearer handles for a scope's results, so they must not
/// be guessable. None without randomness.
fn random_id() -> Option<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the client declared the extension on this request (or at `initialize`, for the
/// sessions of earlier revisions): the only clients that may get a task handle.
fn client_declared(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|caps| caps.supports_tasks())
}

/// A call that may become a task: its place reserved, and the [`Offer`] its tool hands its
/// run to.
pub(super) struct TaskOffer {
    tool: &'static str,
    /// The longest the call may run (the policy's maximum timeout for the tool).
    max_run: Duration,
    /// The caller's session: its end cancels the task.
    session: SharedContext,
    reservation: Reservation,
    pub offer: Offer,
}

/// Whether this call may become a task, and its reserved place if so: a task tool
/// ([`TASK_TOOLS`]) called by a client that declared the extension. `Err` is the session's
/// task bound, answered as the tool's error.
pub(super) async fn offer(
    server: &CordonServer,
    name: &str,
    context: &RequestContext<RoleServer>,
) -> Result<Option<TaskOffer>, ToolError> {
    let Some(tool) = TASK_TOOLS.iter().find(|t| **t == name).copied() else {
        return Ok(None);
    };
    if !client_declared(context) {
        return Ok(None);
    }
    // A scope that cannot be had is the tool's own error to answer, as a plain call.
    let Ok(scope) = server.call_scope(context).await else {
        return Ok(None);
    };
    let reservation = match scope.tasks.reserve() {
        Ok(reservation) => reservation,
        Err(NoTask::NoEntropy) => return Ok(None),
        Err(full @ NoTask::Full) => {
            return Err(ToolError::new(ErrorKind::ResourceLimit, full.to_string()));
        }
    };
    let policy = &server.ctx.runtime.policy;
    let max_run = if tool == "shell_exec" {
        policy.limits.max_timeout
    } else {
        policy.interpreter.max_timeout
    };
    Ok(Some(TaskOffer {
        tool,
        max_run,
        session: scope.session,
        reservation,
        offer: Offer::default(),
    }))
}

/// What a task's result goes through after its run, as a plain call's does in `call_tool`.
pub(super) struct Finish {
    /// Over HTTP: the session's place for a running call, held until the task ends.
    pub running: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Over HTTP: who called, for the audit record the call writes.
    pub origin: Option<crate::audit::CallOrigin>,
    pub schema: Option<Arc<JsonObject>>,
    pub ctx: SharedContext,
    /// The session the call's server events (a limit hit, a job's start) belong to: the task
    /// runs outside the `tools/call` that set it.
    pub events: crate::events::SessionKey,
}

impl TaskOffer {
    /// Starts the run the tool handed over: its result when it ends within
    /// [`ANSWER_DIRECTLY_WITHIN`], else a task of the caller's scope and its handle.
    pub(super) async fn start(self, run: Run, finish: Finish) -> Started {
        let Finish {
            running,
            origin,
            schema,
            ctx,
            events,
        } = finish;
        let run: Run = Box::new(move |hooks| {
            let call = run(hooks);
            Box::pin(async move {
                let _running = running;
                let finished = async move {
                    let result = call.await?;
                    let response = CallToolResponse::Complete(result);
                    match super::finish_response(response, schema, ctx).await? {
                        CallToolResponse::Complete(result) => Ok(result),
                        _ => Err(McpError::internal_error(
                            "a task's call answered with something other than a result",
                            None,
                        )),
                    }
                };
                let finished = crate::events::in_session(events, finished);
                match origin {
                    Some(origin) => crate::audit::CALL_ORIGIN.scope(origin, finished).await,
                    None => finished.await,
                }
            })
        });
        let session = &self.session.cancel;
        self.reservation
            .start(self.tool, self.max_run, session, run)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;

    fn ok(text: &str) -> Run {
        let text = text.to_owned();
        Box::new(move |_hooks| {
            Box::pin(async move { Ok(CallToolResult::success(vec![ContentBlock::text(text)])) })
        })
    }

    /// A run that answers `text` once `gate` is opened (so it outlives the direct answer).
    fn gated(text: &str) -> (Run, tokio::sync::oneshot::Sender<()>) {
        let text = text.to_owned();
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let run: Run = Box::new(move |_hooks| {
            Box::pin(async move {
                let _ = gate.await;
                Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
            })
        });
        (run, open)
    }

    fn task(started: Started) -> CreateTaskResult {
        match started {
            Started::Task(created) => created,
            Started::Direct(result) => panic!("answered directly: {result:?}"),
        }
    }

    async fn settled(tasks: &Tasks, id: &str) -> GetTaskResult {
        for _ in 0..200 {
            let got = tasks.get(id).unwrap();
            if got.task.status().is_terminal() {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("task {id} never finished");
    }

    #[tokio::test]
    async fn a_call_that_ends_at_once_is_answered_directly_and_frees_its_place() {
        let tasks = Arc::new(Tasks::default());
        let session = CancellationToken::new();
        let started = tasks
            .reserve()
            .unwrap()
            .start("shell_exec", Duration::from_secs(1), &session, ok("42"))
            .await;
        match started {
            Started::Direct(Ok(result)) => {
                assert_eq!(to_object(&result)["content"][0]["text"], "42");
            }
            Started::Direct(Err(e)) => panic!("{e:?}"),
            Started::Task(t) => panic!("an instant call became a task: {t:?}"),
        }
        assert_eq!(tasks.running(), 0);
        assert!(lock(&tasks.inner).entries.is_empty());
    }

    #[tokio::test]
    async fn a_task_is_visible_at_once_and_ends_with_its_result() {
        let tasks = Arc::new(Tasks::default());
        let session = CancellationToken::new();
        let (run, open) = gated("42");
        let created = task(
            tasks
                .reserve()
                .unwrap()
                .start("shell_exec", Duration::from_secs(1), &session, run)
                .await,
        );
        assert_eq!(created.task.status, TaskStatus::Working);
        assert_eq!(created.task.task_id.len(), 32);
        assert_eq!(
            tasks.get(&created.task.task_id).unwrap().task.status(),
            TaskStatus::Working
        );
        open.send(()).unwrap();
        let done = settled(&tasks, &created.task.task_id).await;
        match done.task.payload {
            TaskPayload::Completed { result } => {
                assert_eq!(result["content"][0]["text"], "42");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(tasks.running(), 0);
        // Cancelling it now changes nothing, and the answer says so.
        let err = tasks.cancel(&created.task.task_id).unwrap_err();
        assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(err.message.contains("changed nothing"), "{}", err.message);
        assert!(err.message.contains("completed"), "{}", err.message);
    }

    #[tokio::test]
    async fn places_past_the_limit_are_refused_and_released_reservations_free_them() {
        let tasks = Arc::new(Tasks::default());
        let held: Vec<_> = (0..MAX_RUNNING).map(|_| tasks.reserve().unwrap()).collect();
        assert!(matches!(tasks.reserve(), Err(NoTask::Full)));
        drop(held);
        assert_eq!(tasks.running(), 0);
        assert!(tasks.reserve().is_ok());
    }

    #[tokio::test]
    async fn cancel_cancels_the_calls_token_and_the_task_reads_cancelled() {
        let tasks = Arc::new(Tasks::default());
        let session = CancellationToken::new();
        let run: Run = Box::new(|hooks: CallHooks| {
            Box::pin(async move {
                hooks.cancel.cancelled().await;
                Ok(CallToolResult::success(vec![]))
            })
        });
        let created = task(
            tasks
                .reserve()
                .unwrap()
                .start("shell_exec", Duration::from_secs(1), &session, run)
                .await,
        );
        tasks.cancel(&created.task.task_id).unwrap();
        let done = settled(&tasks, &created.task.task_id).await;
        assert_eq!(done.task.status(), TaskStatus::Cancelled);
        assert!(
            !session.is_cancelled(),
            "one task's cancel ended its session"
        );
    }

    #[tokio::test]
    async fn finished_results_are_bounded_in_number() {
        let tasks = Arc::new(Tasks::default());
        let session = CancellationToken::new();
        let mut ids = Vec::new();
        for i in 0..MAX_KEPT + 3 {
            let (run, open) = gated(&i.to_string());
            let created = task(
                tasks
                    .reserve()
                    .unwrap()
                    .start("shell_exec", Duration::from_secs(1), &session, run)
                    .await,
            );
            open.send(()).unwrap();
            settled(&tasks, &created.task.task_id).await;
            ids.push(created.task.task_id);
        }
        assert_eq!(lock(&tasks.inner).entries.len(), MAX_KEPT);
        let err = tasks.get(&ids[0]).unwrap_err();
        assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(tasks.get(ids.last().unwrap()).is_ok());
    }

    #[tokio::test]
    async fn a_running_tasks_status_message_has_its_last_line_without_escapes() {
        let tasks = Arc::new(Tasks::default());
        let session = CancellationToken::new();
        let run: Run = Box::new(move |hooks: CallHooks| {
            Box::pin(async move {
                let progress = hooks.progress.expect("a task's call reports progress");
                // Said before the call is a task: kept for the task's status all the same.
                progress(
                    Duration::from_secs(1),
                    "\u{1b}[31mcompiling\u{1b}[0m \u{7}crate".into(),
                );
                hooks.cancel.cancelled().await;
                Ok(CallToolResult::success(vec![]))
            })
        });
        let created = task(
            tasks
                .reserve()
                .unwrap()
                .start("shell_exec", Duration::from_secs(1), &session, run)
                .await,
        );
        let id = created.task.task_id;
        let got = tasks.get(&id).unwrap();
        assert_eq!(got.task.status(), TaskStatus::Working);
        let message = got.task.task.status_message.unwrap();
        assert!(message.starts_with("shell_exec running for "), "{message}");
        assert!(
            message.ends_with("; last output: compiling crate"),
            "{message}"
        );
        session.cancel();
    }

    #[tokio::test]
    async fn unknown_ids_are_invalid_params_for_every_method() {
        let tasks = Tasks::default();
        for err in [
            tasks.get("nope").unwrap_err(),
            tasks.cancel("nope").unwrap_err(),
            tasks.update("nope").unwrap_err(),
        ] {
            assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            assert!(err.message.contains("no task `nope`"), "{}", err.message);
        }
    }
}
