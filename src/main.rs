//! The `cordon` command line: `serve`, `exec`, `doctor` (and the hidden `probe` used by
//! doctor and the tests). Thin by design: parse arguments, call the library, map errors to
//! exit codes. The only place `anyhow` is used.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use cordon::app::exec::{CaptureSpec, ExecRequest, Program};
use cordon::app::policy::{Policy, TimeoutError, timeout_within};
use cordon::app::runtime::{AuditTarget, Runtime, RuntimeOptions, Session};
use std::path::PathBuf;
use std::sync::Arc;

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
    /// Serve the MCP tools on stdin/stdout, or over Streamable HTTP with --http (logs go to
    /// stderr; CORDON_LOG=info for more).
    Serve {
        /// Workspace root, the only directory the tools may write. Default: the current
        /// directory, unless that is `/`, a system directory or the home directory itself
        /// (then this option is required).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Built-in policy name (default, dev, strict) or a policy file.
        #[arg(long, default_value = "default")]
        policy: String,
        /// Append one JSON line per tool call to this file (default: the policy's
        /// `server.audit_log`, if set).
        #[arg(long)]
        audit_log: Option<PathBuf>,
        /// Run with whatever confinement the kernel offers instead of refusing.
        #[arg(long)]
        allow_degraded: bool,
        /// Do not read the kernel's Landlock audit records (nor turn the host's audit on to
        /// get them); denials are then explained from error messages only.
        #[arg(long)]
        no_kernel_denials: bool,
        #[command(flatten)]
        http: HttpArgs,
    },
    /// Run one command confined by a policy, passing its output through.
    Exec {
        /// Workspace root (read-write for the command). Default: the current directory,
        /// unless that is `/`, a system directory or the home directory itself.
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Built-in policy name (default, dev, strict) or a policy file.
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
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Built-in policy name (default, dev, strict) or a policy file whose confinement
        /// is checked.
        #[arg(long, default_value = "default")]
        policy: String,
        /// Instead of the probes: measure a bare spawn against a confined one (and with
        /// --mcp an MCP shell_exec round trip), interleaved, on this machine.
        #[arg(long)]
        bench: bool,
        /// Rounds of --bench.
        #[arg(long, default_value_t = 200, requires = "bench")]
        n: usize,
        /// With --bench: also an MCP `shell_exec true` through an in-process server.
        #[arg(long, requires = "bench")]
        mcp: bool,
    },
    /// Lint files with the same pipeline write_file and edit_file use.
    Lint {
        /// Files to check (inside the workspace).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print the reports as JSON.
        #[arg(long)]
        json: bool,
        /// Workspace root. Default: the current directory, unless that is `/`, a system
        /// directory or the home directory itself.
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Built-in policy name (default, dev, strict) or a policy file (its `[lint]`
        /// section is used).
        #[arg(long, default_value = "default")]
        policy: String,
        /// Run the linters with whatever confinement the kernel offers instead of refusing.
        #[arg(long)]
        allow_degraded: bool,
    },
    /// Show, check, explain or replay a policy.
    Policy {
        #[command(subcommand)]
        action: PolicyAction,
    },
    /// List, diff or restore a workspace's checkpoints: what calls changed, kept so that it
    /// can be taken back (also while a server serves the workspace).
    Checkpoints {
        #[command(subcommand)]
        action: CheckpointsAction,
    },
    /// List the approval questions waiting for the operator (command, rule, reason, age) on
    /// every running cordon server of this user.
    Approvals {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Stay attached and print the questions each time they change (one JSON line per
        /// change with --json); while attached, servers ask this operator instead of
        /// refusing at once.
        #[arg(long)]
        watch: bool,
        /// The approvals directory (default: $CORDON_APPROVALS_DIR; as root /run/cordon; else $XDG_RUNTIME_DIR/cordon, else /tmp/cordon-UID).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Approve a waiting question: its command runs.
    Approve {
        /// The question's id, as `cordon approvals` lists it.
        id: String,
        /// The approvals directory (default: $CORDON_APPROVALS_DIR; as root /run/cordon; else $XDG_RUNTIME_DIR/cordon, else /tmp/cordon-UID).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Deny a waiting question: its command is refused.
    Deny {
        /// The question's id, as `cordon approvals` lists it.
        id: String,
        /// The approvals directory (default: $CORDON_APPROVALS_DIR; as root /run/cordon; else $XDG_RUNTIME_DIR/cordon, else /tmp/cordon-UID).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Attempt one forbidden operation (used by `doctor` and the tests).
    #[command(hide = true)]
    Probe {
        /// The probe to run.
        name: String,
        /// Its argument, if it takes one.
        arg: Option<String>,
    },
    /// The confined parser worker the server starts (frames on stdin/stdout; not for people).
    #[command(hide = true, name = "__parse-worker")]
    ParseWorker,
}

/// `cordon checkpoints …`.
#[derive(Subcommand)]
enum CheckpointsAction {
    /// The kept checkpoints, newest first, and the storage budget.
    List {
        #[command(flatten)]
        on: CheckpointsOn,
    },
    /// A unified diff of what changed since checkpoint ID (to --to, or to now).
    Diff {
        /// A checkpoint id, e.g. cp-12.
        id: String,
        /// A later checkpoint id: only what changed from ID to it.
        #[arg(long)]
        to: Option<String>,
        #[command(flatten)]
        on: CheckpointsOn,
    },
    /// Put the workspace back as it was before checkpoint ID's call (itself undoable).
    Restore {
        /// A checkpoint id, e.g. cp-12.
        id: String,
        #[command(flatten)]
        on: CheckpointsOn,
    },
}

/// Which workspace's checkpoints, bounded by which policy.
#[derive(clap::Args)]
struct CheckpointsOn {
    /// Workspace root. Default: the current directory, unless that is `/`, a system
    /// directory or the home directory itself.
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Built-in policy name (default, dev, strict) or a policy file: its `[checkpoints]`
    /// bounds and `include` apply (use the server's).
    #[arg(long, default_value = "default")]
    policy: String,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// `cordon checkpoints …`: prints what the command did.
fn checkpoints(action: CheckpointsAction) -> Result<i32> {
    use cordon::app::cli::checkpoints::{Action, run};
    let (on, action) = match &action {
        CheckpointsAction::List { on } => (on, Action::List),
        CheckpointsAction::Diff { id, to, on } => (
            on,
            Action::Diff {
                id,
                to: to.as_deref(),
            },
        ),
        CheckpointsAction::Restore { id, on } => (on, Action::Restore { id }),
    };
    let workspace = workspace_or_cwd(on.workspace.clone())?;
    let policy = Policy::load(&on.policy)?;
    print!("{}", run(&workspace, &policy, action, on.json)?);
    Ok(0)
}

/// `serve --http`: where to listen and where the bearer token is.
#[derive(clap::Args)]
struct HttpArgs {
    /// Serve MCP's Streamable HTTP transport at http://ADDR:PORT/mcp instead of stdio
    /// (a bare port, or `:PORT`, means 127.0.0.1). A non-loopback address needs a token.
    #[arg(long, value_name = "ADDR:PORT")]
    http: Option<String>,
    /// File holding the bearer token every HTTP request must carry (mode 0600), or one line
    /// per holder: `sha256:<hex of the token's SHA-256> <name> <scope>...` (`*`: every scope).
    #[arg(
        long,
        value_name = "FILE",
        requires = "http",
        conflicts_with = "http_token_env"
    )]
    http_token_file: Option<PathBuf>,
    /// Environment variable holding the bearer token every HTTP request must carry.
    #[arg(long, value_name = "VAR", requires = "http")]
    http_token_env: Option<String>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (a loopback address; same
    /// authentication as /mcp) instead of at /metrics on the --http listener.
    #[arg(long, value_name = "ADDR:PORT", requires = "http")]
    metrics_addr: Option<String>,
    /// Give each authenticated subject its own workspace, DIR/<subject>, with its own
    /// sandbox, proxy, home, jobs and audit stream, under the policy its groups select
    /// (`[[server.http.group_policies]]`). Needs authentication (a token file of holders, or
    /// `[server.http.oauth]`).
    #[arg(
        long,
        value_name = "DIR",
        requires = "http",
        conflicts_with = "workspace"
    )]
    workspaces: Option<PathBuf>,
}

impl HttpArgs {
    /// The listen address and authenticator, or why they cannot be had.
    fn options(&self) -> Result<Option<cordon::app::server::http::HttpOptions>> {
        use cordon::app::server::http::auth::{Authenticator, TokenSource};
        let Some(spec) = &self.http else {
            return Ok(None);
        };
        let addr = parse_listen_addr(spec)?;
        let auth = match (&self.http_token_file, &self.http_token_env) {
            (Some(file), _) => Authenticator::load(&TokenSource::File(file.clone()))?,
            (None, Some(var)) => Authenticator::load(&TokenSource::Env(var.clone()))?,
            (None, None) => Authenticator::none(),
        };
        // Checked by `serve` once the policy's `[server.http.oauth]` is known too.
        let metrics_addr = self
            .metrics_addr
            .as_deref()
            .map(parse_listen_addr)
            .transpose()?;
        Ok(Some(cordon::app::server::http::HttpOptions {
            addr,
            auth,
            metrics_addr,
            workspaces: None,
        }))
    }
}

/// `ADDR:PORT`, `[V6]:PORT`, `:PORT` or `PORT` (the last two on 127.0.0.1).
fn parse_listen_addr(spec: &str) -> Result<std::net::SocketAddr> {
    let spec = spec.trim();
    let full = match spec.strip_prefix(':') {
        Some(port) => format!("127.0.0.1:{port}"),
        None if spec.bytes().all(|b| b.is_ascii_digit()) => format!("127.0.0.1:{spec}"),
        None => spec.to_owned(),
    };
    full.parse().with_context(|| {
        format!(
            "--http {spec:?} is not ADDR:PORT: write e.g. 127.0.0.1:8080, [::1]:8080, :8080 or \
             0.0.0.0:8080 (with a token)"
        )
    })
}

#[derive(Subcommand)]
enum PolicyAction {
    /// Print the fully resolved policy (TOML, or JSON with --json).
    Show {
        /// Built-in policy name (default, dev, strict) or a policy file.
        #[arg(default_value = "default")]
        policy: String,
        /// Print JSON instead of TOML.
        #[arg(long)]
        json: bool,
    },
    /// Validate a policy file, including its seccomp profile and rule examples.
    Check {
        /// Built-in policy name or a policy file.
        policy: String,
    },
    /// Say in plain language what the policy allows and what this kernel enforces.
    Explain {
        /// Built-in policy name (default, dev, strict) or a policy file.
        #[arg(default_value = "default")]
        policy: String,
        /// Explain what this subject of `serve --http` may do, named as the audit log names
        /// it: `bearer`, `bearer:<holder>` or `jwt:<issuer>#<sub>`.
        #[arg(long, value_name = "SUBJECT")]
        subject: Option<String>,
        /// The token file of holders: a `bearer:<holder>` subject's scopes and groups.
        #[arg(long, value_name = "FILE", requires = "subject")]
        http_token_file: Option<PathBuf>,
        /// A JWT subject's `scope` claim (space-separated).
        #[arg(long, value_name = "SCOPES", requires = "subject")]
        scopes: Option<String>,
        /// A JWT subject's groups (comma-separated).
        #[arg(
            long,
            value_name = "GROUPS",
            requires = "subject",
            value_delimiter = ','
        )]
        groups: Vec<String>,
        /// The server's `--workspaces` root, if it has one.
        #[arg(long, value_name = "DIR", requires = "subject")]
        workspaces: Option<PathBuf>,
    },
    /// Re-decide every call of an audit log under a policy and list the decisions that would
    /// change (exit 1 when one does, 0 when none does).
    Replay {
        /// The audit log (JSON lines, as `serve --audit-log` writes it).
        audit_log: PathBuf,
        /// The candidate policy (built-in name or file). Default: the one the log names.
        #[arg(long)]
        policy: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Replay only this subject's calls, named as the log names it (`bearer:<holder>`,
        /// `jwt:<issuer>#<sub>`); its last record's policy is the default candidate.
        #[arg(long, value_name = "SUBJECT")]
        subject: Option<String>,
    },
}

fn main() {
    // The sandbox init is this binary too; it must start before anything else (no runtime,
    // no threads) because it forks.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(
            cordon::app::confine::sandbox_init::init::INIT_ARG,
        ))
    {
        cordon::app::confine::sandbox_init::init::main();
    }
    mark_inherited_descriptors_cloexec();
    let cli = Cli::parse();
    if matches!(cli.command, Command::Serve { .. }) {
        serve_logging();
    }
    let code = match cli.command {
        Command::Probe { name, arg } => cordon::app::confine::selftest::run(&name, arg.as_deref()),
        Command::ParseWorker => cordon::app::parser::worker::run(),
        command => match runtime().and_then(|rt| {
            let result = rt.block_on(run(command));
            // rmcp reads stdin on a blocking thread; after SIGTERM that read never ends, and
            // dropping the runtime would wait for it for ever.
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
            result
        }) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("cordon: {}", error_chain(&e));
                2
            }
        },
    };
    std::process::exit(code);
}

/// `serve`'s log: stderr, filtered by `CORDON_LOG` (default `warn`).
fn serve_logging() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CORDON_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
}

/// Descriptors this process inherited (an `exec 7>/outside/f` in the shell that started us)
/// must never reach a confined child: every one above stderr is made close-on-exec before
/// anything else runs.
fn mark_inherited_descriptors_cloexec() {
    if let Err(e) = cordon::app::confine::mark_inherited_descriptors_cloexec() {
        eprintln!("cordon: cannot mark inherited descriptors close-on-exec: {e}");
        std::process::exit(2);
    }
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

/// `text` on one line: hosts show the first stderr line of a server that failed, and some only
/// that. Multi-line messages (a TOML parse error quotes the line) are joined with " | ".
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "|")
        .collect::<Vec<_>>()
        .join(" | ")
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
            no_kernel_denials,
            http,
        } => {
            let served = serve(
                workspace,
                &policy,
                audit_log,
                allow_degraded,
                no_kernel_denials,
                &http,
            )
            .await;
            // Whatever the end, audit goes back off when this server turned it on and is the
            // last cordon server reading it.
            cordon::app::confine::audit::release();
            served
        }
        Command::Exec {
            workspace,
            policy,
            timeout,
            allow_degraded,
            command,
        } => exec(workspace, &policy, timeout, allow_degraded, command).await,
        Command::Doctor {
            json,
            policy,
            bench: true,
            n,
            mcp,
        } => bench(json, &policy, n, mcp).await,
        Command::Doctor { json, policy, .. } => doctor(json, &policy).await,
        Command::Lint {
            files,
            json,
            workspace,
            policy,
            allow_degraded,
        } => lint(files, json, workspace, &policy, allow_degraded).await,
        Command::Policy { action } => policy_action(action).await,
        Command::Checkpoints { action } => checkpoints(action),
        Command::Approvals { json, watch, dir } => approvals(json, watch, dir),
        Command::Approve { id, dir } => answer_question(id, dir, true),
        Command::Deny { id, dir } => answer_question(id, dir, false),
        Command::Probe { .. } | Command::ParseWorker => {
            unreachable!("handled before the runtime starts")
        }
    }
}

/// `cordon doctor --bench`: the spawn benchmark, as a table or JSON.
async fn bench(json: bool, policy: &str, n: usize, mcp: bool) -> Result<i32> {
    let policy = Policy::load(policy)?;
    let options = cordon::app::doctor::bench::BenchOptions { n, mcp };
    let report = cordon::app::doctor::bench::run(&policy, options).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(0)
}

/// `cordon doctor`: every probe; exit 1 unless all pass.
async fn doctor(json: bool, policy: &str) -> Result<i32> {
    let policy = Policy::load(policy)?;
    let report = cordon::app::doctor::run(&policy).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render_table());
    }
    Ok(if report.all_passed() { 0 } else { 1 })
}

/// `cordon lint`: the policy's linters on `files`, confined; the exit code says whether any
/// reported a problem.
async fn lint(
    files: Vec<PathBuf>,
    json: bool,
    workspace: Option<PathBuf>,
    policy: &str,
    allow_degraded: bool,
) -> Result<i32> {
    let options = RuntimeOptions {
        workspace: workspace_or_cwd(workspace)?,
        allow_degraded,
        ..RuntimeOptions::default()
    };
    let runtime = cordon::app::cli::lint::runtime(Policy::load(policy)?, options)?;
    let reports = cordon::app::cli::lint::run(&runtime, &files).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        print!("{}", cordon::app::cli::lint::render(&reports));
    }
    Ok(cordon::app::cli::lint::exit_code(&reports))
}

/// `cordon policy show|check|explain|replay`.
async fn policy_action(action: PolicyAction) -> Result<i32> {
    use cordon::app::cli::policy;
    match action {
        PolicyAction::Show { policy: name, json } => {
            print!("{}", policy::show(&Policy::load(&name)?, json)?);
            if json {
                println!();
            }
        }
        PolicyAction::Check { policy: name } => {
            let loaded = Policy::load(&name)?;
            policy::check_examples(&loaded).await?;
            print!("{}", policy::check(&loaded)?);
        }
        PolicyAction::Explain {
            policy: name,
            subject: None,
            ..
        } => {
            print!("{}", policy::explain(&Policy::load(&name)?));
        }
        PolicyAction::Explain {
            policy: name,
            subject: Some(subject),
            http_token_file,
            scopes,
            groups,
            workspaces,
        } => {
            use cordon::app::cli::subject;
            let server = Policy::load(&name)?;
            let query = subject::SubjectQuery::new(
                &subject,
                http_token_file.as_deref(),
                scopes.as_deref(),
                &groups,
            )?;
            let (summary, runs_under) =
                subject::explain_subject(&server, &query, workspaces.as_deref())?;
            print!("{summary}\n{}", policy::explain(&runs_under));
        }
        PolicyAction::Replay {
            audit_log,
            policy: candidate,
            json,
            subject,
        } => {
            use cordon::app::cli::replay;
            let report = replay::run(&audit_log, candidate.as_deref(), subject.as_deref()).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", replay::render(&report));
            }
            return Ok(if report.changed.is_empty() { 0 } else { 1 });
        }
    }
    Ok(0)
}

/// `cordon approvals`: the questions waiting for the operator.
fn approvals(json: bool, watch: bool, dir: Option<PathBuf>) -> Result<i32> {
    use cordon::app::cli::approvals;
    let dir = approvals::dir_or_default(dir);
    if watch {
        approvals::watch(&dir, |listing| {
            if json {
                println!("{}", serde_json::to_string(listing).unwrap_or_default());
            } else {
                println!(
                    "--- {}",
                    cordon::app::clock::Utc::of(std::time::SystemTime::now()).compact()
                );
                print!("{}", approvals::render(listing, &dir));
            }
            use std::io::Write as _;
            let _ = std::io::stdout().flush();
        })?;
        return Ok(0);
    }
    let listing = approvals::list(&dir)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&listing)?);
    } else {
        print!("{}", approvals::render(&listing, &dir));
    }
    Ok(0)
}

/// `cordon approve ID` / `cordon deny ID`.
fn answer_question(id: String, dir: Option<PathBuf>, approve: bool) -> Result<i32> {
    use cordon::app::cli::approvals;
    let dir = approvals::dir_or_default(dir);
    let answered = approvals::answer(&dir, &id, approve)?;
    println!(
        "{} {id} (server {}){}",
        if approve { "approved" } else { "denied" },
        answered.socket.display(),
        if answered.for_retry {
            "; its call was refused at once (nobody watched), so this answers the agent's next \
             call of the same command"
        } else {
            ""
        }
    );
    Ok(0)
}

fn workspace_or_cwd(workspace: Option<PathBuf>) -> Result<PathBuf> {
    Ok(cordon::app::cli::workspace::resolve_from_env(workspace)?)
}

async fn serve(
    workspace: Option<PathBuf>,
    policy: &str,
    audit_log: Option<PathBuf>,
    allow_degraded: bool,
    no_kernel_denials: bool,
    http: &HttpArgs,
) -> Result<i32> {
    let signals = cordon::app::server::StopSignals::listen()
        .context("cannot listen for SIGTERM and SIGINT")?;
    if no_kernel_denials {
        tracing::info!("kernel-reported denials off (--no-kernel-denials)");
    }
    let kernel_denials = !no_kernel_denials;
    if http.http.is_some() {
        // Over HTTP nobody reads an `initialize` answer on stdin: a failed start is the
        // message on stderr and exit status 2.
        let started = async {
            let mut options = http.options()?.expect("--http was given");
            let server = match &http.workspaces {
                Some(dir) => {
                    let (server, workspaces) =
                        start_per_subject(dir, policy, audit_log, allow_degraded, kernel_denials)?;
                    options.workspaces = Some(workspaces);
                    server
                }
                None => start(workspace, policy, audit_log, allow_degraded, kernel_denials).await?,
            };
            Ok::<_, anyhow::Error>((server, options))
        };
        let (server, options) = match started.await {
            Ok(started) => started,
            Err(e) => {
                eprintln!("cordon: cannot start: {}", one_line(&error_chain(&e)));
                return Ok(2);
            }
        };
        cordon::app::server::http::serve(server, options, signals).await?;
        return Ok(0);
    }
    let server = match start(workspace, policy, audit_log, allow_degraded, kernel_denials).await {
        Ok(server) => server,
        Err(e) => {
            // One line a host shows, then the same reason as the answer to `initialize`.
            let reason = one_line(&error_chain(&e));
            eprintln!("cordon: cannot start: {reason}");
            if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                cordon::app::server::failed_start::answer_first_request(
                    &reason,
                    cordon::app::server::failed_start::WAIT_FOR_REQUEST,
                )
                .await;
            }
            return Ok(2);
        }
    };
    cordon::app::server::serve_stdio(server, signals).await?;
    Ok(0)
}

/// Everything `serve` needs before it reads its first message; any failure here is a start
/// failure (see `cordon::app::server::failed_start`).
/// Starts the kernel-denials reader (turning the host's audit on when it is off and cordon
/// may): before the sandbox init's plan is made, whose Landlock layers log denials only once
/// the reader runs, and after the workspace and policy are known good, so that a start that
/// fails changes nothing of the host's.
fn start_kernel_denials() {
    if let cordon::app::confine::audit::Availability::Unavailable { reason } =
        cordon::app::confine::audit::start()
    {
        tracing::info!("kernel-reported denials unavailable: {reason}");
    }
}

async fn start(
    workspace: Option<PathBuf>,
    policy: &str,
    audit_log: Option<PathBuf>,
    allow_degraded: bool,
    kernel_denials: bool,
) -> Result<cordon::app::server::CordonServer> {
    let options = RuntimeOptions {
        workspace: workspace_or_cwd(workspace)?,
        allow_degraded,
        // The parser worker is this binary: children must be able to execute it.
        parser_program: Some(cordon::app::parser::worker_program()?),
        audit: audit_log.map_or(AuditTarget::Policy, AuditTarget::File),
        spill_area: true,
        checkpoints: true,
        ..RuntimeOptions::default()
    };
    let policy = Policy::load(policy)?;
    if kernel_denials {
        start_kernel_denials();
    }
    let runtime = Arc::new(Runtime::build(policy, options)?);
    let enforcement = runtime.executor.confinement().enforcement();
    if !enforcement.level.is_full() {
        tracing::warn!("enforcement {}", enforcement.summary());
        for note in &enforcement.notes {
            tracing::warn!("{note}");
        }
    }
    runtime.start_parser().await?;
    runtime.start_forwarding().await;
    Ok(cordon::app::server::CordonServer::new(Session::new(
        runtime,
    )?))
}

/// `serve --http --workspaces DIR`: the subjects' workspaces, and the server every session
/// is made from, whose own runtime (over `DIR/.server`, an empty directory no subject's name
/// can take) runs no call: calls run in their subject's runtime.
fn start_per_subject(
    dir: &std::path::Path,
    policy: &str,
    audit_log: Option<PathBuf>,
    allow_degraded: bool,
    kernel_denials: bool,
) -> Result<(
    cordon::app::server::CordonServer,
    Arc<cordon::app::server::workspaces::SubjectWorkspaces>,
)> {
    let policy = Policy::load(policy)?;
    if kernel_denials {
        start_kernel_denials();
    }
    let subject_options = RuntimeOptions {
        allow_degraded,
        parser_program: Some(cordon::app::parser::worker_program()?),
        audit: audit_log.map_or(AuditTarget::Policy, AuditTarget::File),
        spill_area: true,
        // Each subject's workspace records its own checkpoints, as `serve`'s one does.
        checkpoints: true,
        ..RuntimeOptions::default()
    };
    let workspaces = Arc::new(cordon::app::server::workspaces::SubjectWorkspaces::open(
        dir,
        policy.clone(),
        subject_options,
    )?);
    use std::os::unix::fs::DirBuilderExt;
    let own = workspaces.root().join(".server");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&own)
        .with_context(|| format!("cannot make {}", own.display()))?;
    let template = Runtime::build(
        policy,
        RuntimeOptions {
            workspace: own,
            allow_degraded,
            ..RuntimeOptions::default()
        },
    )?;
    let server = cordon::app::server::CordonServer::new(Session::new(Arc::new(template))?);
    Ok((server, workspaces))
}

async fn exec(
    workspace: Option<PathBuf>,
    policy: &str,
    timeout: Option<u64>,
    allow_degraded: bool,
    command: Vec<std::ffi::OsString>,
) -> Result<i32> {
    let policy = Policy::load(policy)?;
    let limits = &policy.limits;
    let timeout = match timeout_within(timeout, limits.timeout, limits.max_timeout) {
        Ok(timeout) => timeout,
        Err(TimeoutError::Zero) => anyhow::bail!("--timeout must be at least 1 second"),
        Err(TimeoutError::AboveMax {
            requested,
            max_secs,
        }) => anyhow::bail!(
            "--timeout {requested} is above the policy's max_timeout_secs ({max_secs})"
        ),
    };
    let options = RuntimeOptions {
        workspace: workspace_or_cwd(workspace)?,
        allow_degraded,
        one_shot: true,
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::build(policy, options)?;
    let executor = &runtime.executor;
    let cwd = caller_cwd_inside(executor.confinement().workspace());
    let stdin = forwarded_stdin().await?;
    let passthrough = |tee: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>| CaptureSpec {
        memory_cap: 64 * 1024,
        spill: None,
        tee: Some(tee),
    };
    let request = ExecRequest::new(
        Program::new(command).in_dir(cwd),
        timeout,
        passthrough(Box::pin(tokio::io::stdout())),
        passthrough(Box::pin(tokio::io::stderr())),
    )
    .with_stdin(stdin);
    let outcome = executor.run(request).await;
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) if e.is_not_found() => {
            eprintln!("cordon: {e}");
            return Ok(127);
        }
        Err(e) => return Err(e.into()),
    };
    if !outcome.enforcement.level.is_full() {
        eprintln!("cordon: enforcement {}", outcome.enforcement.summary());
    }
    if outcome.limit.is_some()
        && let Some(reason) = outcome.reason()
    {
        eprintln!("cordon: {reason}");
    }
    for notice in &outcome.notices {
        eprintln!("cordon: {notice}");
    }
    for refused in outcome.network.iter().flat_map(|n| &n.refused) {
        eprintln!("cordon: {refused}");
    }
    if outcome.output_cut_short {
        eprintln!(
            "cordon: a process that escaped the process group still holds the output; \
             reading stopped (no cgroup here to kill it)"
        );
    }
    if outcome.git_refused {
        // As a tool result would be `denied`: a command that "succeeded" while cordon undid
        // or moved what it wrote to git must not look like a success to a script.
        eprintln!(
            "cordon: exit status {GIT_REFUSED_STATUS}: cordon refused a git change the command made (above)"
        );
        return Ok(GIT_REFUSED_STATUS);
    }
    Ok(outcome.shell_status())
}

/// `cordon exec`'s exit status when the command's git change was refused at import (the
/// status wrappers use for "the wrapper refused", as 126 and 127 are the shell's).
const GIT_REFUSED_STATUS: i32 = 125;

/// The most `cordon exec` reads from its stdin for the command (it is handed over whole).
const MAX_FORWARDED_STDIN: u64 = 256 << 20;

/// `cordon exec`'s own stdin for the command, read to its end, unless it is a terminal (a
/// person typing: the command gets /dev/null as before, since nothing would end the read).
async fn forwarded_stdin() -> Result<Option<Vec<u8>>> {
    use tokio::io::AsyncReadExt;
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        return Ok(None);
    }
    let mut input = Vec::new();
    tokio::io::stdin()
        .take(MAX_FORWARDED_STDIN + 1)
        .read_to_end(&mut input)
        .await
        .context("cannot read stdin to pass it to the command")?;
    if input.len() as u64 > MAX_FORWARDED_STDIN {
        anyhow::bail!(
            "stdin is larger than {} MiB, the most `cordon exec` passes to a command; write \
             it to a file in the workspace and let the command read that",
            MAX_FORWARDED_STDIN >> 20
        );
    }
    Ok(Some(input))
}

/// The caller's current directory, opened, when it lies inside the workspace (a subdirectory
/// of it); None (the workspace root) otherwise.
fn caller_cwd_inside(workspace: &std::path::Path) -> Option<std::os::fd::OwnedFd> {
    let here = std::env::current_dir().ok()?.canonicalize().ok()?;
    if !here.starts_with(workspace) {
        return None;
    }
    let dir = std::fs::File::open(&here).ok()?;
    dir.metadata()
        .ok()
        .filter(|m| m.is_dir())
        .map(|_| std::os::fd::OwnedFd::from(dir))
}
