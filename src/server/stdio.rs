//! Serving one client on stdin/stdout: the handshake, the session, SIGTERM/SIGINT, and what
//! ends with the session (its calls, interpreter workers and background jobs).

use super::{CordonServer, framing};
use crate::runtime::Session;
use rmcp::ServiceExt;
use std::sync::Arc;
use std::time::Duration;

/// How long shutdown waits for in-flight calls to kill their process trees.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

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
pub(crate) fn startup_line(ctx: &Session) -> String {
    let workspace = format!("workspace {}", ctx.runtime.workspace.root().display());
    startup_line_with(ctx, &workspace, "waiting for an MCP client on stdin")
}

/// The startup line with what serves (`workspace`: the workspace, or where the subjects'
/// workspaces are) and where it waits for clients (`waiting`).
pub(crate) fn startup_line_with(ctx: &Session, workspace: &str, waiting: &str) -> String {
    let enforcement = ctx.runtime.executor.confinement().enforcement();
    format!(
        "cordon {}: {workspace}, policy `{}` ({}), enforcement {}; {waiting}",
        env!("CARGO_PKG_VERSION"),
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
