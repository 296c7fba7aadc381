//! The MCP face of cordon: rmcp handler, tool registration, protocol revisions, progress and
//! cancellation, and shutdown.
//!
//! Owns everything that knows MCP types on the way in: tool descriptions and annotations,
//! schemas patched with the policy's bounds, the server instructions. The work itself is in
//! `tools`; this module only translates a request context into `tools::*::run` arguments.

mod approval;
mod framing;
mod instructions;

use crate::policy::commands::Decision;
use crate::shape::{ErrorKind, ToolError};
use crate::tools::code_interpreter::{self, CodeInterpreterArgs, CodeInterpreterOutput};
use crate::tools::edit_file::{self, EditFileArgs, EditFileOutput};
use crate::tools::read_file::{self, ReadFileArgs, ReadFileOutput};
use crate::tools::shell_exec::{self, CallHooks, Refusal, ShellExecArgs, ShellExecOutput};
use crate::tools::write_file::{self, WriteFileArgs, WriteFileOutput};
use crate::tools::{SharedContext, ToolContext};
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
    approvals: Arc<approval::Approvals>,
}

fn output_schema<T: schemars::JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_output::<T>()
}

#[tool_router]
impl CordonServer {
    pub fn new(ctx: ToolContext) -> Self {
        let ctx = Arc::new(ctx);
        let mut tool_router = Self::tool_router();
        patch_schemas(&mut tool_router, &ctx);
        let instructions = Arc::new(instructions::render(&ctx));
        Self {
            ctx,
            tool_router,
            instructions,
            approvals: Arc::default(),
        }
    }

    #[tool(
        description = "Run a shell command (`/bin/sh -c`) in the workspace, inside the sandbox: \
files outside the workspace are read-only or invisible, the network is off unless the policy \
allows ports, and the command's whole process tree is killed when the call ends or times out. \
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
        let ctx = &self.ctx;
        let verdict = shell_exec::assess(ctx, &args).await;
        let decision = match (verdict.decision, verdict.reason) {
            (Decision::Allow, _) | (_, None) => "allow".to_owned(),
            (Decision::Deny, Some(reason)) => {
                return Ok(shell_exec::refuse(ctx, &args, &reason, &Refusal::Denied).into());
            }
            (Decision::Ask, Some(reason)) => {
                // Nobody should be asked about a call that would fail its argument checks.
                if let Err(error) = shell_exec::precheck(ctx, &args) {
                    let label = format!("ask:{}:not-asked", reason.rule);
                    return Ok(shell_exec::rejected(ctx, &args, error, &label).into());
                }
                match self
                    .approvals
                    .obtain(&rctx, &args, &reason, state, responses)
                    .await
                {
                    approval::Approval::Approved => format!("ask:{}:approved", reason.rule),
                    approval::Approval::Refused(refusal) => {
                        return Ok(shell_exec::refuse(ctx, &args, &reason, &refusal).into());
                    }
                    approval::Approval::Pending(input_required) => {
                        let label = format!("ask:{}:pending", reason.rule);
                        ctx.audit(
                            "shell_exec",
                            &args,
                            &label,
                            serde_json::json!({ "input_required": true }),
                            std::time::Instant::now(),
                        );
                        return Ok(input_required.into());
                    }
                }
            }
        };
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
        let hooks = CallHooks {
            cancel: rctx.ct.clone(),
            progress,
        };
        Ok(
            shell_exec::run(Arc::clone(&self.ctx), args, hooks, &decision)
                .await
                .into(),
        )
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
        Ok(code_interpreter::run(Arc::clone(&self.ctx), args, rctx.ct.clone()).await)
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
        Ok(read_file::run(Arc::clone(&self.ctx), args).await)
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
        Ok(write_file::run(Arc::clone(&self.ctx), args).await)
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
        Ok(edit_file::run(Arc::clone(&self.ctx), args).await)
    }
}

/// Tightens the static schemas with this policy's numbers, so a client can validate before
/// calling: the timeout bound, and whether the tools reach the network.
fn patch_schemas(router: &mut ToolRouter<CordonServer>, ctx: &ToolContext) {
    for (tool, max_timeout) in [
        ("shell_exec", ctx.policy.limits.max_timeout),
        ("code_interpreter", ctx.policy.interpreter.max_timeout),
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
            annotations.open_world_hint = Some(!ctx.policy.network.is_off());
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for CordonServer {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tcc = ToolCallContext::new(self, request, context);
        let response = self.tool_router.call(tcc).await?;
        Ok(with_structured_argument_error(response))
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cordon", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.instructions.as_str())
    }
}

/// rmcp answers arguments that do not deserialize (unknown field, wrong type) with a bare
/// text result; SPEC.md wants every `isError` result to carry `structuredContent.error`.
fn with_structured_argument_error(response: CallToolResponse) -> CallToolResponse {
    let CallToolResponse::Complete(mut result) = response else {
        return response;
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
        result.content = vec![ContentBlock::text(crate::tools::error_text(&error))];
        result.structured_content = Some(serde_json::json!({ "error": error }));
    }
    CallToolResponse::Complete(result)
}

/// Serves MCP on stdin/stdout until the client disconnects, then kills whatever is still
/// running and returns.
pub async fn serve_stdio(server: CordonServer) -> Result<(), ServeError> {
    let ctx = Arc::clone(&server.ctx);
    let service = server
        .serve(framing::frame(tokio::io::stdin(), tokio::io::stdout()))
        .await
        .map_err(|e| ServeError::Start(e.to_string()))?;
    let quit = service.waiting().await;
    // Interpreter workers outlive calls, so they are killed explicitly; this also ends any
    // cell still running.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, ctx.interpreter.shutdown()).await;
    // rmcp cancels every in-flight request at EOF; give their process trees time to die.
    let all = ctx.policy.server.max_concurrent_calls as u32;
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, ctx.slots.acquire_many(all)).await;
    quit.map(|_| ()).map_err(|e| ServeError::Run(e.to_string()))
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("MCP session could not start: {0}")]
    Start(String),
    #[error("MCP session ended with an error: {0}")]
    Run(String),
}
