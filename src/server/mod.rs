//! The MCP face of cordon: the server type one client session is served by, and the dispatch
//! of every request it answers.
//!
//! Owns everything that knows MCP types on the way in and out; each part has its own file:
//! the tools, their descriptions and their schemas patched with the policy's bounds
//! (`tools`), results made to fit their `outputSchema` (argument errors included) and the
//! portable schemas (`schema`), the stdio loop, signals and session end (`stdio`), the spill
//! area as resources (`resources`), asking the user (`approval`) or the operator
//! (`operator`), log messages (`logging`), the egress proxy's connections in the audit log
//! (`connection_audit`), the server instructions, what a failed start answers
//! (`failed_start`), and the HTTP front door (`http`). This file holds
//! [`CordonServer`], the scope a call runs in, and `tools/call` from admission to the
//! finished response; unknown tools and methods are named back here. The work itself is in
//! `crate::tools`. One [`CordonServer`] serves one client session (`runtime::Session`) over
//! a shared `runtime::Runtime`. Long calls of clients that declare the MCP Tasks extension
//! run as tasks (`tasks`).

mod approval;
mod breaker;
mod connection_audit;
pub(crate) mod failed_start;
mod framing;
pub(crate) mod http;
mod instructions;
mod logging;
pub(crate) mod operator;
mod resources;
pub(crate) mod schema;
pub(crate) mod scope;
mod scopes;
pub(crate) mod stdio;
mod tasks;
mod tools;
pub(crate) mod workspaces;

pub(crate) use stdio::{StopSignals, startup_line_with};

use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError};
use crate::tools::SharedContext;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, JsonObject, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, tool_handler};
use std::sync::Arc;

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
    /// `--workspaces`: each subject's calls run in its own workspace's runtime.
    workspaces: Option<Arc<workspaces::SubjectWorkspaces>>,
}

/// What letting a `tools/call` in gave it: over HTTP the session's place for a running call
/// (held until the call or its task ends), and the scope whose job endings its result reports.
struct Admitted {
    running: Option<tokio::sync::OwnedSemaphorePermit>,
    events_scope: Option<scope::Scope>,
}

impl CordonServer {
    /// The MCP face of one client session (its runtime may serve other sessions too).
    pub fn new(ctx: Session) -> Self {
        let ctx = Arc::new(ctx);
        connection_audit::audit_connections(&ctx.runtime);
        let tool_router = tools::router(&ctx);
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
            workspaces: None,
        });
        self
    }

    /// Gives every subject a workspace of its own (`serve --http --workspaces`): calls run
    /// in their subject's runtime, never in this template's.
    pub fn with_subject_workspaces(
        mut self,
        workspaces: Arc<workspaces::SubjectWorkspaces>,
    ) -> Self {
        // The instructions name the caller's workspace, not the template's (no call runs
        // there).
        self.instructions = Arc::new(instructions::render_per_subject(&self.ctx));
        if let Some(http) = &mut self.http {
            http.workspaces = Some(workspaces);
        }
        self
    }

    /// The subject workspaces, when the server has them.
    pub fn subject_workspaces(&self) -> Option<&Arc<workspaces::SubjectWorkspaces>> {
        self.http.as_ref()?.workspaces.as_ref()
    }

    /// The session whose workspace this request's calls and resources are in: over HTTP
    /// its scope's (its subject's workspace with `--workspaces`), on stdio the server's.
    async fn request_session(
        &self,
        rctx: &RequestContext<RoleServer>,
    ) -> Result<SharedContext, McpError> {
        if self.http.is_none() {
            return Ok(Arc::clone(&self.ctx));
        }
        self.call_scope(rctx)
            .await
            .map(|scope| scope.session)
            .map_err(|error| McpError::internal_error(error.message, None))
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
        let failed = |e: crate::runtime::RuntimeError| {
            ToolError::new(
                ErrorKind::Internal,
                format!("this session's state could not be set up: {e}"),
            )
        };
        // With `--workspaces`, the subject's own runtime, chosen from the authenticated
        // request alone (its subject and groups), never from an argument.
        let subject_runtime =
            match &shared.workspaces {
                None => None,
                Some(workspaces) => {
                    let subject = http::subject_of(rctx).unwrap_or(http::auth::Subject::Anonymous);
                    let groups = http::groups_of(rctx);
                    Some(workspaces.runtime_for(&subject, &groups.0).await.map_err(
                        |e| match e {
                            workspaces::WorkspacesError::PolicyChanged { .. } => {
                                ToolError::new(ErrorKind::Denied, e.to_string())
                            }
                            workspaces::WorkspacesError::Full(_) => {
                                ToolError::new(ErrorKind::ResourceLimit, e.to_string())
                            }
                            other => ToolError::new(ErrorKind::Internal, other.to_string()),
                        },
                    )?)
                }
            };
        let runtime = subject_runtime.as_ref().unwrap_or(&self.ctx.runtime);
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
        if let Some(wanted) = &subject_runtime
            && !Arc::ptr_eq(wanted, &scope.session.runtime)
        {
            // Cannot happen while the session holds its runtime (it is never shut down under
            // it); said rather than run in the wrong workspace.
            return Err(ToolError::new(
                ErrorKind::Internal,
                "this session's workspace was restarted under it; open a new session".to_owned(),
            ));
        }
        if let Some(session) = http::session_of(rctx) {
            shared.registry.register(&session, &scope.session);
        }
        Ok(scope.clone())
    }

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

    /// A `tools/call` let in: over HTTP (`over_http`, the call has an origin) its session's
    /// scope and a place among the session's running calls, or why not; on stdio the client
    /// is noted for the audit log and the server's own scope reports the job endings.
    async fn admit(
        &self,
        context: &RequestContext<RoleServer>,
        over_http: bool,
    ) -> Result<Admitted, ToolError> {
        if !over_http {
            self.note_client(context);
            // The client's own scope, whose job endings this result reports.
            let events_scope = self
                .http
                .is_none()
                .then(|| self.own.get().cloned())
                .flatten();
            return Ok(Admitted {
                running: None,
                events_scope,
            });
        }
        let scope = self.call_scope(context).await?;
        let running = scope.begin_call().map_err(|limit| {
            ToolError::new(
                ErrorKind::ResourceLimit,
                format!(
                    "this session already has {limit} calls running, the most \
                     `server.http.max_calls_per_session` allows ({}); wait for one to \
                     end, or open another session",
                    self.ctx.runtime.policy.origin
                ),
            )
        })?;
        Ok(Admitted {
            running,
            events_scope: Some(scope),
        })
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

#[tool_handler(router = self.tool_router)]
impl ServerHandler for CordonServer {
    /// The tools this request's credentials allow (every tool on stdio; `scopes`).
    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, McpError> {
        let supports_cache_hints = context
            .protocol_version()
            .is_some_and(|version| version >= rmcp::model::ProtocolVersion::V_2026_07_28);
        let personal = scopes::list_is_personal(&context);
        let tools = scopes::visible(
            &context,
            &self.ctx.runtime.policy,
            self.tool_router.list_all(),
        );
        Ok(rmcp::model::ListToolsResult {
            result_type: Some(rmcp::model::ResultType::COMPLETE),
            tools,
            meta: None,
            next_cursor: None,
            ttl_ms: supports_cache_hints.then_some(0),
            // A list that depends on the token's scopes is no one else's to reuse.
            cache_scope: supports_cache_hints.then_some(if personal {
                rmcp::model::CacheScope::Private
            } else {
                rmcp::model::CacheScope::Public
            }),
        })
    }

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
        let origin = http::call_origin(&context).map(|mut origin| {
            origin.scope = scopes::used(&context, &self.ctx.runtime.policy, &name);
            origin
        });
        // Over HTTP, only the tools the token's scopes allow (never decided by an argument);
        // a refusal is on record with its subject.
        if let Some((refused, scope)) = scopes::refusal(&context, &self.ctx.runtime.policy, &name) {
            let record = || scopes::audit_refusal(&self.ctx.runtime, &name, &scope);
            match origin {
                Some(origin) => crate::audit::CALL_ORIGIN.sync_scope(origin, record),
                None => record(),
            }
            let result = schema::refused_result(&refused, output_schema.as_deref());
            return Ok(CallToolResponse::Complete(result));
        }
        let admitted = match self.admit(&context, origin.is_some()).await {
            Ok(admitted) => admitted,
            Err(error) => {
                let result = schema::refused_result(&error, output_schema.as_deref());
                return Ok(CallToolResponse::Complete(result));
            }
        };
        let task = match tasks::offer(self, &name, &context).await {
            Ok(task) => task,
            Err(error) => {
                let result = schema::refused_result(&error, output_schema.as_deref());
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
        // What the call refused goes to its client's circuit breaker, which may answer it.
        let watched = admitted.events_scope.clone();
        let call = crate::events::in_session(key, async {
            let (mut response, seen) = crate::breaker::collect(self.tool_router.call(tcc)).await;
            if let Some(scope) = &watched {
                breaker::observe(&scope.breaker, &scope.session, seen, &mut response);
            }
            response
        });
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
                running: admitted.running,
                origin,
                schema: output_schema,
                ctx: admitted
                    .events_scope
                    .as_ref()
                    .map_or_else(|| Arc::clone(&self.ctx), |scope| Arc::clone(&scope.session)),
                events: key,
            };
            return match task.start(run, finish).await {
                tasks::Started::Task(created) => Ok(CallToolResponse::Task(created)),
                // Ended within the threshold: answered as a plain call, job events included.
                tasks::Started::Direct(result) => {
                    let mut response = CallToolResponse::Complete(result?);
                    if let Some(scope) = &admitted.events_scope {
                        tools::with_job_events(&mut response, scope.session.jobs.take_events());
                    }
                    Ok(response)
                }
            };
        }
        let mut response = response;
        if let Some(scope) = &admitted.events_scope {
            tools::with_job_events(&mut response, scope.session.jobs.take_events());
        }
        let ctx = admitted
            .events_scope
            .as_ref()
            .map_or_else(|| Arc::clone(&self.ctx), |scope| Arc::clone(&scope.session));
        finish_response(response, output_schema, ctx).await
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
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        let ctx = self.request_session(&context).await?;
        on_blocking_pool(move || Ok(resources::list(&ctx))).await
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        let ctx = self.request_session(&context).await?;
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
        // What the start moved aside in the workspace (`workspace::reclaim`): the
        // session's first message, since the start's log line is only on the host.
        let repaired: Vec<crate::events::Event> = self
            .ctx
            .runtime
            .moved_aside
            .iter()
            .map(|m| crate::events::Event {
                level: crate::events::Level::Warning,
                kind: "workspace_repaired",
                data: serde_json::json!({
                    "path": m.path,
                    "found": m.found,
                    "moved_to": m.moved_to,
                    "message": m.message(),
                }),
            })
            .collect();
        self.logging
            .set_level(request.level, context.peer, below_full, &repaired)
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
    let response = schema::fits_output_schema(response, schema.as_deref());
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
