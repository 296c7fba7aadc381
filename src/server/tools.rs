//! The tools as MCP sees them: each tool's description, annotations and schemas, the method
//! rmcp routes a `tools/call` to, and the schema patching the router gets before it serves.
//!
//! A tool method only turns a request context into the tool's arguments and hooks
//! (cancellation, progress, the `approval::Asker` `shell_exec` asks through) and unwraps the
//! `shape::ToolOutcome` it answers; the work is in `crate::tools`. The schemas are tightened
//! with the policy's bounds, made portable (`schema`) and given `job_events`, which every
//! result may carry (added by [`with_job_events`]).

use super::{CordonServer, approval, schema, tasks};
use crate::runtime::Session;
use crate::tools::CallHooks;
use crate::tools::checkpoint::{self, CheckpointArgs, CheckpointOutput};
use crate::tools::code_interpreter::{self, CodeInterpreterArgs, CodeInterpreterOutput};
use crate::tools::edit_file::{self, EditFileArgs, EditFileOutput};
use crate::tools::job::{self, JobArgs, JobOutput};
use crate::tools::read_file::{self, ReadFileArgs, ReadFileOutput};
use crate::tools::shell_exec::{self, ShellExecArgs, ShellExecOutput};
use crate::tools::write_file::{self, WriteFileArgs, WriteFileOutput};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{InputResponses, RequestState};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, JsonObject, ProgressNotificationParam,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use std::sync::Arc;
use std::time::Duration;

fn output_schema<T: schemars::JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_output::<T>()
}

/// The router a new server serves: every tool, its schemas patched for this policy, made
/// portable and declaring `job_events`.
pub(super) fn router(ctx: &Session) -> ToolRouter<CordonServer> {
    let mut router = CordonServer::tool_router();
    patch_schemas(&mut router, ctx);
    make_portable(&mut router);
    declare_job_events(&mut router);
    super::breaker::declare_breaker(&mut router);
    router
}

#[tool_router]
impl CordonServer {
    #[tool(
        description = "Run a shell command (`/bin/sh -c`) in the workspace, inside the sandbox: \
files outside the workspace are read-only or invisible, the network is off unless the policy \
allows ports or hosts (through cordon's egress proxy: refused connections are listed in \
`network.refused`), and the command's whole process tree is killed when the call ends or times out. \
Use it to build, test, search (grep/rg/find), run git and other CLI tools. Do not use it to read \
or write files when read_file/write_file/edit_file fit: those are exact and linted. \
The policy's command rules refuse a few destructive commands (e.g. `rm -rf ~`) and ask the user \
before others (e.g. `git push --force`); a refusal has error kind `denied`. \
Long output is cut to its first and last lines, and the full text is saved under \
.cordon/outputs/ (see `full_output`). Example: {\"command\": \"cargo test 2>&1 | tail -n 30\", \"cwd\": \".\", \"timeout_secs\": 120}",
        annotations(
            title = "Run a shell command",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<ShellExecOutput>()
    )]
    async fn shell_exec(
        &self,
        Parameters(args): Parameters<ShellExecArgs>,
        RequestState(state): RequestState,
        InputResponses(responses): InputResponses,
        rctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let refuse = |e| self.refused_as::<shell_exec::ShellExec>(&args, e);
        let scope = match self.scope_or(&rctx, refuse).await {
            Ok(scope) => scope,
            Err(refused) => return Ok(refused.into()),
        };
        let gate = self.gate(&scope, &rctx, state, responses);
        let ready = match shell_exec::decide(Arc::clone(&scope.session), args, gate).await {
            shell_exec::Decided::Answer(shell_exec::Answer::Done(outcome)) => {
                return Ok(outcome.into_result().into());
            }
            shell_exec::Decided::Answer(shell_exec::Answer::Pending(input_required)) => {
                return Ok(input_required.into());
            }
            shell_exec::Decided::Run(ready) => ready,
        };
        // Admitted and checked: the run starts now, or as a task with the task's hooks.
        let run = move |hooks| async move { ready.run(hooks).await.into_result() };
        Ok(self.run_or_defer(&rctx, &scope.session, run).await.into())
    }

    #[tool(
        description = "Run Python in a persistent, sandboxed interpreter session, like a notebook \
cell: variables, imports and functions persist between calls with the same `session`; the value \
of a final expression comes back as `result` (its repr); stdout and stderr are captured per \
cell; an exception comes back as `error` {type, message, traceback}. matplotlib figures (where \
installed) come back as PNG images. The sandbox is the same as shell_exec's: the workspace is \
the working directory, the network is off unless the policy allows ports. A cell that runs past \
timeout_secs is interrupted (KeyboardInterrupt); if it does not stop, the interpreter is \
restarted and the result says the session state was lost. `reset: true` starts the session \
fresh. Example: {\"code\": \"import statistics\\nxs = [3, 1, 4, 1, 5]\\nstatistics.mean(xs)\", \
\"session\": \"default\"}",
        annotations(
            title = "Run Python (persistent session)",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<CodeInterpreterOutput>()
    )]
    async fn code_interpreter(
        &self,
        Parameters(args): Parameters<CodeInterpreterArgs>,
        rctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let refuse = refused_by_schema::<CodeInterpreterOutput>;
        let session = match self.scope_or(&rctx, refuse).await {
            Ok(scope) => scope.session,
            Err(refused) => return Ok(refused),
        };
        let ctx = Arc::clone(&session);
        let run = move |hooks: CallHooks| async move {
            code_interpreter::run(ctx, args, hooks.cancel)
                .await
                .into_result()
        };
        Ok(self.run_or_defer(&rctx, &session, run).await)
    }

    #[tool(
        description = "Read and drive a background job (started by shell_exec with \
`background: true`: dev servers, watchers, REPLs). With `id`: writes `input` (under a pty \
\"\\u0003\" is Ctrl-C), sends `signal` (INT, TERM, HUP, KILL), waits up to `wait_secs` for new \
output, for output matching `until` (a regex, e.g. \"Listening on\") or for the job to end, and \
returns the output produced since the previous read, with the job's state, exit status and \
usage; `full_output` is its whole log. Without `id`: lists this session's jobs. A job is \
confined like any command and ends at the policy's limits, its lifetime, after a long idle time, \
or when this session ends; every later result says so in `job_events`. Example: {\"id\": \
\"job-1\", \"wait_secs\": 10, \"until\": \"Serving HTTP\"}",
        annotations(
            title = "Read or drive a background job",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<JobOutput>()
    )]
    async fn job(
        &self,
        Parameters(args): Parameters<JobArgs>,
        RequestState(state): RequestState,
        InputResponses(responses): InputResponses,
        rctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let scope = match self.scope_or(&rctx, refused_by_schema::<JobOutput>).await {
            Ok(scope) => scope,
            Err(refused) => return Ok(refused.into()),
        };
        // Input to a job's shell is judged like a `shell_exec` command, asked about the same way.
        let gate = self.gate(&scope, &rctx, state, responses);
        Ok(
            match job::run(Arc::clone(&scope.session), args, gate).await {
                shell_exec::Answer::Done(outcome) => outcome.into_result().into(),
                shell_exec::Answer::Pending(input_required) => input_required.into(),
            },
        )
    }

    #[tool(
        description = "Read a text file of the workspace, a window of lines at a time \
(`offset` is the 1-based first line, `limit` the number of lines). Content comes back byte for \
byte, so it can be pasted into edit_file's old_string. Binary files are refused. Use it instead \
of `cat` in shell_exec. Example: {\"path\": \"src/lib.rs\", \"offset\": 120, \"limit\": 80}",
        annotations(
            title = "Read a file",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<ReadFileOutput>()
    )]
    async fn read_file(
        &self,
        Parameters(args): Parameters<ReadFileArgs>,
        rctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        // Its client's workspace (the subject's, with `--workspaces`).
        let refuse = |e| self.refused_as::<read_file::ReadFile>(&args, e);
        let session = match self.scope_or(&rctx, refuse).await {
            Ok(scope) => scope.session,
            Err(refused) => return Ok(refused),
        };
        Ok(read_file::run(session, args).await.into_result())
    }

    #[tool(
        description = "Create or replace a whole file in the workspace, atomically (temporary \
file + rename; an existing file keeps its permission bits; missing parent directories are \
created unless create_dirs is false). The result includes lint diagnostics, with those this \
write introduced marked. Use edit_file to change part of an existing file. Example: \
{\"path\": \"src/util.py\", \"content\": \"def add(a, b):\\n    return a + b\\n\"}",
        annotations(
            title = "Write a file",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        ),
        output_schema = output_schema::<WriteFileOutput>()
    )]
    async fn write_file(
        &self,
        Parameters(args): Parameters<WriteFileArgs>,
        rctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        // Its client's workspace (the subject's, with `--workspaces`).
        let refuse = |e| self.refused_as::<write_file::WriteFile>(&args, e);
        let session = match self.scope_or(&rctx, refuse).await {
            Ok(scope) => scope.session,
            Err(refused) => return Ok(refused),
        };
        Ok(write_file::run(session, args).await.into_result())
    }

    #[tool(
        description = "Replace exact text in a workspace file. Each edit's old_string must \
occur exactly once (or set replace_all); matching is byte-exact, nothing is normalised (line \
endings, quotes, whitespace, Unicode). Edits apply in order, all or nothing; on a miss nothing \
is changed and the nearest lines are shown with their numbers. dry_run shows the diff without \
writing. The result includes a unified diff and lint diagnostics. Example: {\"path\": \
\"src/app.py\", \"edits\": [{\"old_string\": \"return a - b\", \"new_string\": \"return a + b\"}]}",
        annotations(
            title = "Edit a file",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<EditFileOutput>()
    )]
    async fn edit_file(
        &self,
        Parameters(args): Parameters<EditFileArgs>,
        rctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        // Its client's workspace (the subject's, with `--workspaces`).
        let refuse = |e| self.refused_as::<edit_file::EditFile>(&args, e);
        let session = match self.scope_or(&rctx, refuse).await {
            Ok(scope) => scope.session,
            Err(refused) => return Ok(refused),
        };
        Ok(edit_file::run(session, args).await.into_result())
    }

    #[tool(
        description = "Take back what calls did to the workspace. Every result of a call that \
changed the workspace (shell_exec, write_file, edit_file, code_interpreter, a job read) carries \
`checkpoint`, an id such as \"cp-12\": the workspace as it was before that call. `list`: the \
kept checkpoints, newest first (call, tool, summary, files changed, time) and the storage budget. \
`diff` with `id` (and optionally `to`): a unified diff of what changed since. `restore` with \
`id`: puts every file, symlink, mode and directory the calls since changed back as it was, \
atomically per file; the result's `checkpoint` undoes the restore itself. Covered: what git does \
not ignore, plus the policy's `[checkpoints] include`; `.git` is never touched. A restore refuses \
while a job of this session runs, unless `stop_jobs: true`. Example: {\"action\": \"restore\", \
\"id\": \"cp-12\"}",
        annotations(
            title = "Undo calls: list, diff or restore checkpoints",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        ),
        output_schema = output_schema::<CheckpointOutput>()
    )]
    async fn checkpoint(
        &self,
        Parameters(args): Parameters<CheckpointArgs>,
        rctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let scope = match self
            .scope_or(&rctx, refused_by_schema::<CheckpointOutput>)
            .await
        {
            Ok(scope) => scope,
            Err(refused) => return Ok(refused),
        };
        Ok(checkpoint::run(Arc::clone(&scope.session), args)
            .await
            .into_result())
    }
}

/// The prelude every tool method shares: the caller's scope, or the refusal; a run that may
/// become a task; the call's cancellation and progress.
impl CordonServer {
    /// The caller's scope (its workspace, session, breaker and approvals), or `refuse`'s
    /// answer when there is none for it (an HTTP subject whose workspace cannot be opened).
    async fn scope_or(
        &self,
        rctx: &RequestContext<RoleServer>,
        refuse: impl FnOnce(crate::shape::ToolError) -> CallToolResult,
    ) -> Result<super::scope::Scope, CallToolResult> {
        self.call_scope(rctx).await.map_err(refuse)
    }

    /// A call refused before it starts, as the tool's own output with the error.
    fn refused_as<T: crate::tools::Tool>(
        &self,
        args: &T::Args,
        error: crate::shape::ToolError,
    ) -> CallToolResult {
        crate::tools::failed::<T>(&self.ctx, args, error).into_result()
    }

    /// Runs a call that may become a task: handed to the task the client's offer opens (the
    /// call is answered at once, empty, and the task's hooks drive the run), or run now with
    /// this call's cancellation (ended with the call) and progress notifications.
    async fn run_or_defer<F, Fut>(
        &self,
        rctx: &RequestContext<RoleServer>,
        session: &Session,
        run: F,
    ) -> CallToolResult
    where
        F: FnOnce(CallHooks) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = CallToolResult> + Send + 'static,
    {
        if let Some(offer) = rctx.extensions.get::<tasks::Offer>() {
            offer.defer(Box::new(move |hooks| {
                Box::pin(async move { Ok(run(hooks).await) })
            }));
            return CallToolResult::success(Vec::new());
        }
        let cancel = self.call_token(rctx, session);
        let _ends_with_the_call = cancel.clone().drop_guard();
        run(CallHooks {
            cancel,
            progress: progress_reporter(rctx),
        })
        .await
    }

    /// How a call asks a person: `ask` rules through the approval channels, a tripped
    /// breaker's refusals through the breaker (`shell_exec` commands and input to a job's
    /// shell alike).
    fn gate<'a>(
        &'a self,
        scope: &'a super::scope::Scope,
        rctx: &'a RequestContext<RoleServer>,
        state: Option<String>,
        responses: Option<rmcp::model::InputResponses>,
    ) -> super::breaker::Gate<'a> {
        let session = &scope.session;
        let asker = approval::Asker {
            approvals: &scope.approvals,
            rctx,
            state,
            responses,
            operator: self.operator.as_ref().as_ref().ok(),
            channels: &session.runtime.policy.server.approvals,
            operator_down: self.operator.as_ref().as_ref().err().map(String::as_str),
        };
        super::breaker::Gate {
            asker,
            breaker: &scope.breaker,
            session,
        }
    }
}

/// A call refused before it starts, as a result that only carries the error (valid against
/// the tool's output schema `T`).
fn refused_by_schema<T: schemars::JsonSchema + 'static>(
    error: crate::shape::ToolError,
) -> CallToolResult {
    schema::refused_result(&error, Some(&output_schema::<T>()))
}

/// Progress notifications for a call whose client gave a progress token: once a second,
/// how long it has run and its last line of output.
fn progress_reporter(
    rctx: &RequestContext<RoleServer>,
) -> Option<Box<dyn Fn(Duration, String) + Send + Sync>> {
    let token = rctx.meta.get_progress_token()?;
    let peer = rctx.peer.clone();
    Some(Box::new(move |elapsed: Duration, line: String| {
        let peer = peer.clone();
        let mut message = format!("running for {}s", elapsed.as_secs());
        if !line.is_empty() {
            message.push_str(&format!("; last output: {line}"));
        }
        let param = ProgressNotificationParam::new(token.clone(), elapsed.as_secs_f64().floor())
            .with_message(message);
        tokio::spawn(async move {
            let _ = peer.notify_progress(param).await;
        });
    }))
}

/// Tightens the static schemas with this policy's numbers, so a client can validate before
/// calling: the timeout bound, and whether the tools reach the network.
fn patch_schemas(router: &mut ToolRouter<CordonServer>, ctx: &Session) {
    for (tool, max_timeout) in [
        ("shell_exec", ctx.runtime.policy.limits.max_timeout),
        (
            "code_interpreter",
            ctx.runtime.policy.interpreter.max_timeout,
        ),
    ] {
        let Some(route) = router.map.get_mut(tool) else {
            continue;
        };
        let mut schema = (*route.attr.input_schema).clone();
        if let Some(timeout) = schema
            .get_mut("properties")
            .and_then(|p| p.get_mut("timeout_secs"))
            .and_then(|t| t.as_object_mut())
        {
            timeout.insert("maximum".into(), max_timeout.as_secs().into());
        }
        route.attr.input_schema = Arc::new(schema);
        if let Some(annotations) = route.attr.annotations.as_mut() {
            annotations.open_world_hint = Some(!ctx.runtime.policy.network.is_off());
        }
    }
}

/// Adds the job endings not yet reported to this client to a result: `job_events` in its
/// structured content and a line each in its text.
pub(super) fn with_job_events(response: &mut CallToolResponse, events: Vec<crate::jobs::JobEvent>) {
    let CallToolResponse::Complete(result) = response else {
        return;
    };
    if events.is_empty() {
        return;
    }
    let mut lines = String::new();
    for e in &events {
        lines.push_str(&format!(
            "[cordon] job {} ({}): {}\n",
            e.id, e.command, e.reason
        ));
    }
    if let Some(serde_json::Value::Object(content)) = &mut result.structured_content {
        content.insert(
            "job_events".into(),
            serde_json::to_value(&events).unwrap_or_default(),
        );
    }
    match result.content.first_mut() {
        Some(ContentBlock::Text(text)) => text.text.push_str(&format!("\n{lines}")),
        _ => result.content.push(ContentBlock::text(lines)),
    }
}

/// `job_events` in every tool's output schema: any result may carry the endings of this
/// client's jobs.
fn declare_job_events(router: &mut ToolRouter<CordonServer>) {
    let property = serde_json::json!({
        "type": "array",
        "description": "Background jobs of this session that ended since the previous result: \
                        which, and why (exited, killed at a bound or with its session, a limit).",
        "items": {
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "state": {"type": "string", "enum": crate::jobs::EventState::ALL},
                "reason": {"type": "string"},
                "command": {"type": "string"}
            },
            "required": ["id", "state", "reason", "command"]
        }
    });
    for route in router.map.values_mut() {
        if let Some(output) = &route.attr.output_schema {
            let mut schema = (**output).clone();
            if let Some(serde_json::Value::Object(properties)) = schema.get_mut("properties") {
                properties.insert("job_events".into(), property.clone());
            }
            route.attr.output_schema = Some(Arc::new(schema));
        }
    }
}

/// Rewrites every tool's schemas into the portable form of [`schema`].
fn make_portable(router: &mut ToolRouter<CordonServer>) {
    for route in router.map.values_mut() {
        route.attr.input_schema = Arc::new(schema::portable_input(&route.attr.input_schema));
        if let Some(output) = &route.attr.output_schema {
            route.attr.output_schema = Some(Arc::new(schema::portable_output(output)));
        }
    }
}
