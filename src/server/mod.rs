//! The MCP face of cordon: rmcp handler, tool registration, protocol revisions, progress and
//! cancellation, and shutdown.
//!
//! Owns everything that knows MCP types on the way in and out: tool descriptions and
//! annotations, schemas patched with the policy's bounds and made portable (`schema`), results
//! made to fit their `outputSchema` (argument errors included), unknown tools and methods named
//! back, the spill area as resources (`resources`), asking the user (`approval`) or the
//! operator (`operator`), log messages (`logging`), the server instructions, and what a failed
//! start answers (`failed_start`). The work itself is in
//! `tools`; this module only translates a request context into a tool's arguments and hooks
//! (cancellation, progress, the `approval::Asker` `shell_exec` asks through) and unwraps the
//! `shape::ToolOutcome` it answers. One [`CordonServer`] serves one client session
//! (`runtime::Session`) over a shared `runtime::Runtime`. Long calls of clients that declare
//! the MCP Tasks extension run as tasks (`tasks`).

mod approval;
pub mod failed_start;
mod framing;
pub mod http;
mod instructions;
mod logging;
pub mod operator;
mod resources;
pub mod schema;
pub mod scope;
mod tasks;

use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError};
use crate::tools::CallHooks;
use crate::tools::SharedContext;
use crate::tools::code_interpreter::{self, CodeInterpreterArgs, CodeInterpreterOutput};
use crate::tools::edit_file::{self, EditFileArgs, EditFileOutput};
use crate::tools::job::{self, JobArgs, JobOutput};
use crate::tools::read_file::{self, ReadFileArgs, ReadFileOutput};
use crate::tools::shell_exec::{self, ShellExecArgs, ShellExecOutput};
use crate::tools::write_file::{self, WriteFileArgs, WriteFileOutput};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{InputResponses, RequestState, ToolCallContext};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router,
};
use std::sync::Arc;
use std::time::Duration;

/// How long shutdown waits for in-flight calls to kill their process trees.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct CordonServer {
    ctx: SharedContext,
    tool_router: ToolRouter<Self>,
    instructions: Arc<String>,
    /// This client's open approval questions: one per MCP session, like its interpreters.
    approvals: Arc<approval::Approvals>,
    /// The state calls of this MCP session run in; on stdio `ctx` and `approvals`, over HTTP
    /// made on the session's first call (see `scope`).
    own: Arc<tokio::sync::OnceCell<scope::Scope>>,
    /// Over HTTP only.
    http: Option<HttpShared>,
    /// This MCP session's `logging/setLevel` and its messages.
    logging: Arc<logging::Logging>,
    /// The operator's approval channel (one per server), or why it is not running.
    operator: Arc<Result<operator::OperatorChannel, String>>,
}

/// What every HTTP session's server shares: the stateless scopes, the registry that ends a
/// session's state with it, and the per-session call bound.
#[derive(Clone)]
struct HttpShared {
    stateless: Arc<scope::StatelessScopes>,
    registry: Arc<scope::SessionRegistry>,
    max_calls_per_session: usize,
}

/// Every connection through the egress proxy gets its own audit record (tool `egress`) as it
/// ends, with the proxy's id of the call it belonged to (the `network.call` of that call's
/// result) or none: connections without valid credentials are in no call's result, and those
/// of lint runs in no tool's. Calls list their connections in their own records as well. Over
/// HTTP the record names the session and subject of the call, as the call's own record does.
fn audit_connections(runtime: &Arc<crate::runtime::Runtime>) {
    if let Some(proxy) = runtime.confinement.egress() {
        proxy.set_audit(Arc::new(ConnectionAuditor {
            runtime: Arc::downgrade(runtime),
        }));
    }
}

/// The egress proxy's audit sink: the runtime's audit log, and the call's origin captured as
/// the call registers with the proxy.
struct ConnectionAuditor {
    runtime: std::sync::Weak<crate::runtime::Runtime>,
}

impl crate::egress::proxy::ConnectionAudit for ConnectionAuditor {
    fn call_context(&self) -> Option<crate::egress::proxy::CallContext> {
        crate::audit::CALL_ORIGIN
            .try_with(|origin| Arc::new(origin.clone()) as crate::egress::proxy::CallContext)
            .ok()
    }

    fn record(
        &self,
        call: Option<u64>,
        context: Option<&crate::egress::proxy::CallContext>,
        record: &crate::egress::ConnectionRecord,
    ) {
        let Some(runtime) = self.runtime.upgrade() else {
            return;
        };
        let started = std::time::Instant::now()
            .checked_sub(Duration::from_millis(record.duration_ms))
            .unwrap_or_else(std::time::Instant::now);
        let decision = match (call, record.allowed) {
            (_, true) => crate::audit::Decision::Allow,
            // A credential's placeholder sent where it is not bound (issue 20).
            (_, false) if record.exfiltration.is_some() => crate::audit::Decision::Deny {
                rule: "egress-exfiltration".into(),
            },
            (Some(_), false) => crate::audit::Decision::Deny {
                rule: "egress".into(),
            },
            (None, false) => crate::audit::Decision::Deny {
                rule: "egress-unattributed".into(),
            },
        };
        let write = || {
            runtime.audit(
                "egress",
                &serde_json::json!({
                    "call": call,
                    "method": record.method,
                    "host": record.host,
                    "port": record.port,
                }),
                &decision,
                crate::audit::Outcome::Other(serde_json::to_value(record).unwrap_or_default()),
                started,
            )
        };
        match context.and_then(|c| c.downcast_ref::<crate::audit::CallOrigin>()) {
            Some(origin) => crate::audit::CALL_ORIGIN.sync_scope(origin.clone(), write),
            None => write(),
        }
    }
}

fn output_schema<T: schemars::JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_output::<T>()
}

#[tool_router]
impl CordonServer {
    /// The MCP face of one client session (its runtime may serve other sessions too).
    pub fn new(ctx: Session) -> Self {
        let ctx = Arc::new(ctx);
        audit_connections(&ctx.runtime);
        let mut tool_router = Self::tool_router();
        patch_schemas(&mut tool_router, &ctx);
        make_portable(&mut tool_router);
        declare_job_events(&mut tool_router);
        let instructions = Arc::new(instructions::render(&ctx));
        let approvals = Arc::new(approval::Approvals::new(
            ctx.runtime.policy.server.approval_timeout,
        ));
        let own = scope::Scope::new(Arc::clone(&ctx), Arc::clone(&approvals), None);
        let operator = Arc::new(operator::start_for(&ctx));
        Self {
            ctx,
            tool_router,
            instructions,
            approvals,
            own: Arc::new(tokio::sync::OnceCell::new_with(Some(own))),
            http: None,
            logging: Arc::default(),
            operator,
        }
    }

    /// The template the HTTP service factory copies for each MCP session
    /// ([`Self::new_session`]): the runtime is shared, each session's state is its own.
    pub fn into_http_template(mut self) -> Self {
        let http = &self.ctx.runtime.policy.server.http;
        self.http = Some(HttpShared {
            stateless: Arc::new(scope::StatelessScopes::new(
                http.max_sessions,
                http.max_calls_per_session,
            )),
            registry: Arc::default(),
            max_calls_per_session: http.max_calls_per_session,
        });
        self
    }

    /// A server for a new MCP session: this one's shared parts and an empty scope (made on
    /// the first call, so the throwaway services rmcp asks for cost nothing).
    pub fn new_session(&self) -> Self {
        Self {
            own: Arc::new(tokio::sync::OnceCell::new()),
            approvals: Arc::new(approval::Approvals::new(
                self.ctx.runtime.policy.server.approval_timeout,
            )),
            logging: Arc::default(),
            ..self.clone()
        }
    }

    /// The session whose runtime every HTTP session shares (and the stdio server's one).
    pub fn context(&self) -> &SharedContext {
        &self.ctx
    }

    /// The scope a call runs in: its MCP session's, or for a stateless (2026-07-28) request
    /// over HTTP its subject's. `Err` says what refused it.
    async fn call_scope(
        &self,
        rctx: &RequestContext<RoleServer>,
    ) -> Result<scope::Scope, ToolError> {
        let Some(shared) = &self.http else {
            return Ok(self
                .own
                .get()
                .expect("a stdio server's scope is set")
                .clone());
        };
        let runtime = &self.ctx.runtime;
        let failed = |e: crate::runtime::RuntimeError| {
            ToolError::new(
                ErrorKind::Internal,
                format!("this session's state could not be set up: {e}"),
            )
        };
        let is_stateless = rctx
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        if is_stateless {
            let subject = http::subject_of(rctx).unwrap_or(http::auth::Subject::Anonymous);
            return shared
                .stateless
                .for_subject(&subject, runtime)
                .map_err(|why| match why {
                    scope::NoScope::Failed(e) => failed(e),
                    scope::NoScope::Full(max) => ToolError::new(
                        ErrorKind::ResourceLimit,
                        format!(
                            "every one of the {max} stateless client scopes has a call running; \
                             retry when one ends, or ask the operator to raise \
                             `server.http.max_sessions` ({})",
                            runtime.policy.origin
                        ),
                    ),
                });
        }
        let scope = self
            .own
            .get_or_try_init(|| async {
                let session = crate::runtime::Session::new(Arc::clone(runtime))?;
                Ok(scope::Scope::new(
                    Arc::new(session),
                    Arc::clone(&self.approvals),
                    Some(shared.max_calls_per_session),
                ))
            })
            .await
            .map_err(failed)?;
        if let Some(session) = http::session_of(rctx) {
            shared.registry.register(&session, &scope.session);
        }
        Ok(scope.clone())
    }

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
        let scope = match self.call_scope(&rctx).await {
            Ok(scope) => scope,
            Err(error) => {
                let outcome =
                    crate::tools::failed::<shell_exec::ShellExec>(&self.ctx, &args, error);
                return Ok(outcome.into_result().into());
            }
        };
        let ctx = &scope.session;
        let offer = rctx.extensions.get::<tasks::Offer>().cloned();
        let approver = approval::Asker {
            approvals: &scope.approvals,
            rctx: &rctx,
            state,
            responses,
            operator: self.operator.as_ref().as_ref().ok(),
            channels: &ctx.runtime.policy.server.approvals,
            operator_down: self.operator.as_ref().as_ref().err().map(String::as_str),
        };
        let ready = match shell_exec::decide(Arc::clone(ctx), args, approver).await {
            shell_exec::Decided::Answer(shell_exec::Answer::Done(outcome)) => {
                return Ok(outcome.into_result().into());
            }
            shell_exec::Decided::Answer(shell_exec::Answer::Pending(input_required)) => {
                return Ok(input_required.into());
            }
            shell_exec::Decided::Run(ready) => ready,
        };
        // Admitted and checked: a task's run starts now, with the task's hooks.
        if let Some(offer) = offer {
            offer.defer(Box::new(move |hooks| {
                Box::pin(async move { Ok(ready.run(hooks).await.into_result()) })
            }));
            return Ok(CallToolResult::success(Vec::new()).into());
        }
        let progress = rctx.meta.get_progress_token().map(|token| {
            let peer = rctx.peer.clone();
            Box::new(move |elapsed: Duration, line: String| {
                let peer = peer.clone();
                let mut message = format!("running for {}s", elapsed.as_secs());
                if !line.is_empty() {
                    message.push_str(&format!("; last output: {line}"));
                }
                let param =
                    ProgressNotificationParam::new(token.clone(), elapsed.as_secs_f64().floor())
                        .with_message(message);
                tokio::spawn(async move {
                    let _ = peer.notify_progress(param).await;
                });
            }) as Box<dyn Fn(Duration, String) + Send + Sync>
        });
        let cancel = self.call_token(&rctx, ctx);
        let _ends_with_the_call = cancel.clone().drop_guard();
        let hooks = CallHooks { cancel, progress };
        Ok(ready.run(hooks).await.into_result().into())
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
        let scope = match self.call_scope(&rctx).await {
            Ok(scope) => scope,
            Err(error) => {
                return Ok(refused_result(
                    &error,
                    Some(&output_schema::<CodeInterpreterOutput>()),
                ));
            }
        };
        if let Some(offer) = rctx.extensions.get::<tasks::Offer>() {
            offer.defer(Box::new(move |hooks| {
                Box::pin(async move {
                    Ok(code_interpreter::run(scope.session, args, hooks.cancel)
                        .await
                        .into_result())
                })
            }));
            return Ok(CallToolResult::success(Vec::new()));
        }
        let cancel = self.call_token(&rctx, &scope.session);
        let _ends_with_the_call = cancel.clone().drop_guard();
        Ok(code_interpreter::run(scope.session, args, cancel)
            .await
            .into_result())
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
        rctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let scope = match self.call_scope(&rctx).await {
            Ok(scope) => scope,
            Err(error) => {
                return Ok(refused_result(&error, Some(&output_schema::<JobOutput>())));
            }
        };
        Ok(job::run(scope.session, args).await.into_result())
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
    ) -> Result<CallToolResult, McpError> {
        Ok(read_file::run(Arc::clone(&self.ctx), args)
            .await
            .into_result())
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
    ) -> Result<CallToolResult, McpError> {
        Ok(write_file::run(Arc::clone(&self.ctx), args)
            .await
            .into_result())
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
    ) -> Result<CallToolResult, McpError> {
        Ok(edit_file::run(Arc::clone(&self.ctx), args)
            .await
            .into_result())
    }
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

impl CordonServer {
    /// The call's cancellation: the client's (`notifications/cancelled`, disconnect), the
    /// session's end or the server's own shutdown, whichever comes first. The caller drops a
    /// guard of it when the call ends, which also ends the watcher task.
    fn call_token(
        &self,
        rctx: &RequestContext<RoleServer>,
        session: &crate::runtime::Session,
    ) -> tokio_util::sync::CancellationToken {
        let call = session.cancel.child_token();
        let (client, watched) = (rctx.ct.clone(), call.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = client.cancelled() => watched.cancel(),
                _ = watched.cancelled() => {}
            }
        });
        call
    }

    /// The scope whose tasks `tasks/*` requests see: the caller's own.
    async fn task_scope(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<scope::Scope, McpError> {
        self.call_scope(context)
            .await
            .map_err(|error| McpError::internal_error(error.message, None))
    }

    /// Hands the calling client's `clientInfo` to the audit log.
    fn note_client(&self, context: &RequestContext<RoleServer>) {
        if let Some(log) = &self.ctx.runtime.audit
            && let Some(info) = context.client_info()
        {
            log.set_client(serde_json::json!({"name": info.name, "version": info.version}));
        }
    }
}

/// Adds the job endings not yet reported to this client to a result: `job_events` in its
/// structured content and a line each in its text.
fn with_job_events(response: &mut CallToolResponse, events: Vec<crate::jobs::JobEvent>) {
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
                "state": {"type": "string", "enum": ["exited", "killed", "limit", "ended"]},
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

#[tool_handler(router = self.tool_router)]
impl ServerHandler for CordonServer {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        let Some(route) = self.tool_router.map.get(name.as_str()) else {
            return Err(unknown_tool(&name, &self.tool_router));
        };
        let output_schema = route.attr.output_schema.clone();
        // Over HTTP: who is calling (for the audit log) and whether their session may run
        // one more call.
        let origin = http::call_origin(&context);
        let mut running = None;
        // The client's own scope, whose job endings this result reports.
        let mut events_scope = self
            .http
            .is_none()
            .then(|| self.own.get().cloned())
            .flatten();
        if origin.is_some() {
            let admitted = match self.call_scope(&context).await {
                Err(error) => Err(error),
                Ok(scope) => {
                    events_scope = Some(scope.clone());
                    scope.begin_call()
                }
                .map_err(|limit| {
                    ToolError::new(
                        ErrorKind::ResourceLimit,
                        format!(
                            "this session already has {limit} calls running, the most \
                             `server.http.max_calls_per_session` allows ({}); wait for one to \
                             end, or open another session",
                            self.ctx.runtime.policy.origin
                        ),
                    )
                }),
            };
            match admitted {
                Ok(permit) => running = permit,
                Err(error) => {
                    let result = refused_result(&error, output_schema.as_deref());
                    return Ok(CallToolResponse::Complete(result));
                }
            }
        } else {
            self.note_client(&context);
        }
        let task = match tasks::offer(self, &name, &context).await {
            Ok(task) => task,
            Err(error) => {
                let result = refused_result(&error, output_schema.as_deref());
                return Ok(CallToolResponse::Complete(result));
            }
        };
        if let Some(task) = &task {
            context.extensions.insert(task.offer.clone());
        }
        let request_log = logging::RequestLogging::for_request(&context);
        let key = request_log
            .as_ref()
            .map_or(self.logging.key(), logging::RequestLogging::key);
        let tcc = ToolCallContext::new(self, request, context);
        let call = crate::events::in_session(key, self.tool_router.call(tcc));
        let response = match origin.clone() {
            Some(origin) => crate::audit::CALL_ORIGIN.scope(origin, call).await?,
            None => call.await?,
        };
        if let Some(log) = request_log {
            log.finish().await;
        }
        if let Some(task) = task
            && let Some(run) = task.offer.take()
        {
            let finish = tasks::Finish {
                running,
                origin,
                schema: output_schema,
                ctx: Arc::clone(&self.ctx),
                events: key,
            };
            return Ok(CallToolResponse::Task(task.start(run, finish)));
        }
        let mut response = response;
        if let Some(scope) = &events_scope {
            with_job_events(&mut response, scope.session.jobs.take_events());
        }
        finish_response(response, output_schema, Arc::clone(&self.ctx)).await
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        self.task_scope(&context).await?.tasks.get(&request.task_id)
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.task_scope(&context)
            .await?
            .tasks
            .update(&request.task_id)
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.task_scope(&context)
            .await?
            .tasks
            .cancel(&request.task_id)
    }

    async fn list_resources(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        let ctx = Arc::clone(&self.ctx);
        on_blocking_pool(move || Ok(resources::list(&ctx))).await
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        let ctx = Arc::clone(&self.ctx);
        on_blocking_pool(move || resources::read(&ctx, &request.uri).map(Into::into)).await
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let enforcement = self.ctx.runtime.executor.confinement().enforcement();
        let below_full = (!enforcement.level.is_full())
            .then(|| (enforcement.level.as_str(), enforcement.notes.as_slice()));
        self.logging
            .set_level(request.level, context.peer, below_full)
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        Err(McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!(
                "method not found: `{}` is not an MCP method this server implements; it \
                 serves initialize, ping, tools/list, tools/call, resources/list, \
                 resources/read and logging/setLevel (and server/discover in the 2026-07-28 \
                 revision; tasks/get, tasks/update and tasks/cancel for clients that declare \
                 the io.modelcontextprotocol/tasks extension)",
                request.method
            ),
            None,
        ))
    }

    #[allow(deprecated)] // logging: see `logging`
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_tasks()
                .enable_logging()
                .build(),
        )
        .with_server_info(Implementation::new("cordon", env!("CARGO_PKG_VERSION")))
        .with_instructions(self.instructions.as_str())
    }
}

/// A tool's answer as the client gets it, directly or as a task's result: fitted to the
/// tool's `outputSchema`, and the spill file of a cut-short output linked as a resource.
async fn finish_response(
    response: CallToolResponse,
    schema: Option<Arc<JsonObject>>,
    ctx: SharedContext,
) -> Result<CallToolResponse, McpError> {
    let response = fits_output_schema(response, schema.as_deref());
    let Some(spilled) = resources::spilled_file(&response) else {
        return Ok(response);
    };
    // Finding the spill file's size is blocking file-system work; only a cut-short result
    // pays for the hop to the blocking pool.
    on_blocking_pool(move || Ok(resources::link_spilled(response, &spilled, &ctx))).await
}

/// Runs `work` (file-system calls in the spill area) on the blocking pool, so a slow disk
/// stalls only this request.
async fn on_blocking_pool<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, McpError> + Send + 'static,
) -> Result<T, McpError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| McpError::internal_error(format!("the request's worker failed: {e}"), None))?
}

/// The JSON-RPC error for a `tools/call` naming no tool of this server: which name was asked
/// for and which exist, so a model can correct the call.
fn unknown_tool(name: &str, router: &ToolRouter<CordonServer>) -> McpError {
    let mut names: Vec<&str> = router.map.keys().map(|k| k.as_ref()).collect();
    names.sort_unstable();
    McpError::invalid_params(
        format!(
            "tool not found: `{}` is not a tool of this server; its tools are {}",
            crate::tools::echo_arg(name),
            names.join(", ")
        ),
        Some(serde_json::json!({ "tool": crate::tools::echo_arg(name), "tools": names })),
    )
}

/// Makes a result validate against its tool's `outputSchema`.
///
/// rmcp answers arguments that do not deserialize (unknown field, wrong type, a negative
/// `limit`) with a bare text result before the tool runs. SPEC.md wants every `isError` result
/// to carry `structuredContent.error`, and clients that validate error results (the TypeScript
/// SDK, the Inspector) want every required field too, so such a result gets the schema's
/// placeholder with the error in it. Required fields a tool left out are filled the same way.
fn fits_output_schema(response: CallToolResponse, schema: Option<&JsonObject>) -> CallToolResponse {
    let CallToolResponse::Complete(mut result) = response else {
        return response;
    };
    let Some(schema) = schema else {
        return CallToolResponse::Complete(result);
    };
    if result.is_error == Some(true) && result.structured_content.is_none() {
        let message = result
            .content
            .iter()
            .find_map(|c| c.as_text().map(|t| t.text.clone()))
            .unwrap_or_default();
        let error = ToolError::new(
            ErrorKind::InvalidArgument,
            format!("{message}; check the arguments against the tool's inputSchema"),
        );
        result.content = vec![ContentBlock::text(error.text())];
        result.structured_content = Some(error_placeholder(schema, &error));
    }
    // The placeholder (a copy of the schema walked) is built only when a required field is
    // missing: a tool's own output has them all, so the usual result skips it.
    if let Some(serde_json::Value::Object(content)) = &mut result.structured_content
        && schema::required(schema).any(|name| !content.contains_key(name))
        && let serde_json::Value::Object(empty) =
            schema::placeholder(&serde_json::Value::Object(schema.clone()))
    {
        for (key, value) in empty {
            content.entry(key).or_insert(value);
        }
    }
    CallToolResponse::Complete(result)
}

/// A call refused before its tool ran (a session bound, a scope that could not be made):
/// the error in the tool's result shape.
fn refused_result(error: &ToolError, schema: Option<&JsonObject>) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(error.text())]);
    result.structured_content = schema.map(|schema| error_placeholder(schema, error));
    result
}

/// The output schema's placeholder with `error` set: `{kind, message, retriable}`, plus the
/// `type` a `code_interpreter` error names (`cordon.<kind>`).
fn error_placeholder(schema: &JsonObject, error: &ToolError) -> serde_json::Value {
    let mut value = schema::placeholder(&serde_json::Value::Object(schema.clone()));
    let mut error_value = serde_json::to_value(error).unwrap_or_default();
    if let Some(error_schema) = schema::property(schema, "error") {
        let error_schema = schema::non_null(error_schema);
        if let (serde_json::Value::Object(filled), serde_json::Value::Object(given)) =
            (schema::placeholder(error_schema), &error_value)
        {
            let mut filled = filled;
            if filled.contains_key("type") {
                let kind = given["kind"].as_str().unwrap_or("internal");
                filled.insert("type".into(), format!("cordon.{kind}").into());
            }
            filled.extend(given.clone());
            error_value = serde_json::Value::Object(filled);
        }
    }
    if let serde_json::Value::Object(map) = &mut value {
        map.insert("error".into(), error_value);
    }
    value
}

/// Serves MCP on stdin/stdout until the client disconnects, then kills whatever is still
/// running and returns. Says so when it starts: at `info` always, and on stderr when a person
/// started it on a terminal (where a silent server looks hung).
pub async fn serve_stdio(server: CordonServer, mut signals: StopSignals) -> Result<(), ServeError> {
    let ctx = Arc::clone(&server.ctx);
    let shutdown = ctx.runtime.shutdown.clone();
    let ready = startup_line(&ctx);
    tracing::info!("{ready}");
    if std::io::IsTerminal::is_terminal(&std::io::stdin())
        && !tracing::enabled!(tracing::Level::INFO)
    {
        eprintln!(
            "{ready} (this is an MCP server: configure it in an MCP client rather than typing \
             here; Ctrl-D quits)"
        );
    }
    // A client that gives up before `initialize` (SDKs send SIGTERM on close) ends the server
    // through its normal exit, which drops the runtime and removes its scratch directories.
    let handshake = server.serve(framing::frame(tokio::io::stdin(), tokio::io::stdout()));
    let handshake = tokio::select! {
        result = handshake => result,
        name = signals.recv() => {
            tracing::info!("{name} before an MCP client initialized; exiting");
            return Ok(());
        }
    };
    let service = match handshake {
        Ok(service) => service,
        // Ctrl-D on a terminal, or a client that connected and left: nothing went wrong.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("stdin closed before an MCP client initialized; exiting");
            return Ok(());
        }
        Err(e) => return Err(ServeError::Start(e.to_string())),
    };
    // SIGTERM/SIGINT (clients send them on close): every running call is cancelled, which
    // kills its tree, and answered; then the session ends. Were the server killed outright,
    // the kernel still ends every confined process with the sandbox init's PID namespace.
    let stop = service.cancellation_token();
    let signal_ctx = Arc::clone(&ctx);
    tokio::spawn(async move {
        let name = signals.recv().await;
        tracing::info!("{name}: ending the session and every running call");
        shutdown.cancel();
        signal_ctx.runtime.drain(SHUTDOWN_GRACE).await;
        // The last answers are on their way to stdout; give the writer a moment.
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.cancel();
    });
    let quit = service.waiting().await;
    // The client is gone: the calls no request waits for any more (its MCP tasks) end with
    // it, as every other call of the session did.
    ctx.cancel.cancel();
    // Interpreter workers outlive calls, so they are killed explicitly; this also ends any
    // cell still running.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, ctx.interpreter.shutdown()).await;
    // So do background jobs: the client that could read them is gone.
    ctx.jobs.shutdown(SHUTDOWN_GRACE).await;
    // rmcp cancels every in-flight request at EOF; give their process trees time to die.
    ctx.runtime.drain(SHUTDOWN_GRACE).await;
    quit.map(|_| ()).map_err(|e| ServeError::Run(e.to_string()))
}

/// The one line that says the server is up: workspace, policy, enforcement, and what it
/// waits for.
pub fn startup_line(ctx: &Session) -> String {
    let enforcement = ctx.runtime.executor.confinement().enforcement();
    format!(
        "cordon {}: workspace {}, policy `{}` ({}), enforcement {}; waiting for an MCP client \
         on stdin",
        env!("CARGO_PKG_VERSION"),
        ctx.runtime.workspace.root().display(),
        ctx.runtime.policy.name,
        ctx.runtime.policy.origin,
        enforcement.level,
    )
}

/// SIGTERM and SIGINT, listened for from the moment `serve` starts (before the runtime is
/// built): from then on neither ends the process by its default action, and one that arrives
/// during start-up is still seen once the server can act on it.
pub struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    pub fn listen() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next of them; returns its name.
    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("MCP session could not start: {0}")]
    Start(String),
    #[error("MCP session ended with an error: {0}")]
    Run(String),
}
