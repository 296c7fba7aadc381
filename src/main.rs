//! The `cordon` command line: `serve`, `exec`, `doctor` (and the hidden `probe` used by
//! doctor and the tests). Thin by design: parse arguments, call the library, map errors to
//! exit codes. The only place `anyhow` is used.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use cordon::confine::{ConfineOptions, Confinement};
use cordon::exec::{CaptureSpec, ExecRequest, Executor};
use cordon::policy::Policy;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "cordon",
    version,
    about = "Confined shell, file and code tools for coding agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the MCP tools on stdin/stdout (logs go to stderr).
    Serve {
        /// Workspace root; default: the current directory.
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Built-in policy name or policy file.
        #[arg(long, default_value = "default")]
        policy: String,
        /// Append one JSON line per tool call to this file (default: the policy's
        /// `server.audit_log`, if set).
        #[arg(long)]
        audit_log: Option<PathBuf>,
        /// Run with whatever confinement the kernel offers instead of refusing.
        #[arg(long)]
        allow_degraded: bool,
    },
    /// Run one command confined by a policy, passing its output through.
    Exec {
        /// Workspace root (read-write for the command); default: the current directory.
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Built-in policy name or policy file.
        #[arg(long, default_value = "default")]
        policy: String,
        /// Wall-clock limit in seconds (default: the policy's).
        #[arg(long)]
        timeout: Option<u64>,
        /// Run with whatever confinement the kernel offers instead of refusing.
        #[arg(long)]
        allow_degraded: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Check that this kernel enforces the confinement, with live probes.
    Doctor {
        #[arg(long)]
        json: bool,
        #[arg(long, default_value = "default")]
        policy: String,
    },
    /// Lint files with the same pipeline write_file and edit_file use.
    Lint {
        /// Files to check (inside the workspace).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print the reports as JSON.
        #[arg(long)]
        json: bool,
        /// Workspace root; default: the current directory.
        #[arg(long)]
        workspace: Option<PathBuf>,
        #[arg(long, default_value = "default")]
        policy: String,
        #[arg(long)]
        allow_degraded: bool,
    },
    /// Show, check or explain a policy.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// Attempt one forbidden operation (used by `doctor` and the tests).
    #[command(hide = true)]
    Probe { name: String, arg: Option<String> },
}

#[derive(Subcommand)]
enum PolicyAction {
    /// Print the fully resolved policy (TOML, or JSON with --json).
    Show {
        #[arg(default_value = "default")]
        policy: String,
        #[arg(long)]
        json: bool,
    },
    /// Validate a policy file, including its seccomp profile and rule examples.
    Check { policy: String },
    /// Say in plain language what the policy allows and what this kernel enforces.
    Explain {
        #[arg(default_value = "default")]
        policy: String,
    },
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Probe { name, arg } => cordon::confine::selftest::run(&name, arg.as_deref()),
        command => match runtime().and_then(|rt| rt.block_on(run(command))) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("cordon: {}", error_chain(&e));
                2
            }
        },
    };
    std::process::exit(code);
}

/// The error and its causes on one line. Our typed errors already quote their source in
/// their own message (`cannot read policy file X: <io error>`), so a cause the line already
/// contains is not repeated; anyhow's `{:#}` would print it twice.
fn error_chain(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

async fn run(command: Command) -> Result<i32> {
    match command {
        Command::Serve {
            workspace,
            policy,
            audit_log,
            allow_degraded,
        } => serve(workspace, &policy, audit_log, allow_degraded).await,
        Command::Exec {
            workspace,
            policy,
            timeout,
            allow_degraded,
            command,
        } => exec(workspace, &policy, timeout, allow_degraded, command).await,
        Command::Doctor { json, policy } => {
            let policy = Policy::load(&policy)?;
            let report = cordon::doctor::run(&policy).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.render_table());
            }
            Ok(if report.all_passed() { 0 } else { 1 })
        }
        Command::Lint {
            files,
            json,
            workspace,
            policy,
            allow_degraded,
        } => {
            let workspace = workspace_or_cwd(workspace)?;
            let policy = Policy::load(&policy)?;
            let reports =
                cordon::cli::lint::run(&workspace, &policy, &files, allow_degraded).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&reports)?);
            } else {
                print!("{}", cordon::cli::lint::render(&reports));
            }
            Ok(cordon::cli::lint::exit_code(&reports))
        }
        Command::Policy { action } => {
            use cordon::cli::policy;
            match action {
                PolicyAction::Show { policy: name, json } => {
                    print!("{}", policy::show(&Policy::load(&name)?, json)?);
                    if json {
                        println!();
                    }
                }
                PolicyAction::Check { policy: name } => {
                    print!("{}", policy::check(&Policy::load(&name)?)?);
                }
                PolicyAction::Explain { policy: name } => {
                    print!("{}", policy::explain(&Policy::load(&name)?));
                }
            }
            Ok(0)
        }
        Command::Probe { .. } => unreachable!("handled before the runtime starts"),
    }
}

fn workspace_or_cwd(workspace: Option<PathBuf>) -> Result<PathBuf> {
    let workspace = match workspace {
        Some(w) => w,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    workspace
        .canonicalize()
        .with_context(|| format!("workspace {} does not exist", workspace.display()))
}

async fn serve(
    workspace: Option<PathBuf>,
    policy: &str,
    audit_log: Option<PathBuf>,
    allow_degraded: bool,
) -> Result<i32> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CORDON_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let root = workspace_or_cwd(workspace)?;
    let policy = Policy::load(policy)?;
    let workspace = cordon::workspace::Workspace::open(&root)?
        .with_spill_total(policy.output.spill_total_bytes);
    // Created up front so `.cordon` exists, and is protected, before the first command runs.
    workspace.spill_dir()?;
    let options = ConfineOptions {
        allow_degraded,
        ..Default::default()
    };
    let confinement = Arc::new(Confinement::build(&policy, workspace.root(), &options)?);
    let enforcement = confinement.enforcement().clone();
    if enforcement.level != "full" {
        tracing::warn!("enforcement {}", enforcement.summary());
        for note in &enforcement.notes {
            tracing::warn!("{note}");
        }
    }
    let audit = match audit_log.or_else(|| policy.server.audit_log.clone()) {
        Some(path) => Some(
            cordon::audit::AuditLog::open(&path)
                .with_context(|| format!("cannot open the audit log {}", path.display()))?,
        ),
        None => None,
    };
    let executor = Arc::new(Executor::new(confinement, &policy));
    let lint = cordon::lint::Linting::for_policy(&policy, Some(Arc::clone(&executor)))?;
    let mut protected = policy.filesystem.protected.clone();
    if let Ok(policy_file) = std::path::Path::new(&policy.origin).canonicalize()
        && let Ok(inside) = policy_file.strip_prefix(workspace.root())
    {
        protected.push(inside.to_string_lossy().into_owned());
    }
    let interpreter = cordon::interpreter::SessionManager::new(Arc::clone(&executor), &policy)?;
    let ctx = cordon::tools::ToolContext {
        executor,
        interpreter,
        lint,
        slots: tokio::sync::Semaphore::new(policy.server.max_concurrent_calls),
        file_lock: tokio::sync::Mutex::new(()),
        protected,
        workspace,
        audit,
        policy,
    };
    cordon::server::serve_stdio(cordon::server::CordonServer::new(ctx)).await?;
    Ok(0)
}

async fn exec(
    workspace: Option<PathBuf>,
    policy: &str,
    timeout: Option<u64>,
    allow_degraded: bool,
    command: Vec<std::ffi::OsString>,
) -> Result<i32> {
    let workspace = workspace_or_cwd(workspace)?;
    let policy = Policy::load(policy)?;
    let timeout = match timeout {
        Some(0) => anyhow::bail!("--timeout must be at least 1 second"),
        Some(t) if t > policy.limits.max_timeout.as_secs() => anyhow::bail!(
            "--timeout {t} is above the policy's max_timeout_secs ({})",
            policy.limits.max_timeout.as_secs()
        ),
        Some(t) => Duration::from_secs(t),
        None => policy.limits.timeout,
    };
    let options = ConfineOptions {
        allow_degraded,
        ..Default::default()
    };
    let confinement = Arc::new(Confinement::build(&policy, &workspace, &options)?);
    let executor = Executor::new(confinement, &policy);
    let passthrough = |tee: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>| CaptureSpec {
        memory_cap: 64 * 1024,
        spill: None,
        tee: Some(tee),
    };
    let outcome = executor
        .run(ExecRequest {
            argv: command,
            cwd: None,
            env: Default::default(),
            stdin: None,
            timeout,
            stdout: passthrough(Box::pin(tokio::io::stdout())),
            stderr: passthrough(Box::pin(tokio::io::stderr())),
            cancel: None,
            live: None,
        })
        .await;
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) if e.is_not_found() => {
            eprintln!("cordon: {e}");
            return Ok(127);
        }
        Err(e) => return Err(e.into()),
    };
    if outcome.enforcement.level != "full" {
        eprintln!("cordon: enforcement {}", outcome.enforcement.summary());
    }
    if outcome.limit.is_some()
        && let Some(reason) = outcome.reason()
    {
        eprintln!("cordon: {reason}");
    }
    if outcome.output_cut_short {
        eprintln!(
            "cordon: a process that escaped the process group still holds the output; \
             reading stopped (no cgroup here to kill it)"
        );
    }
    Ok(outcome.shell_status())
}
