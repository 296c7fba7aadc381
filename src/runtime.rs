//! The composition root: everything a policy turns into, built once, in one place.
//!
//! [`Runtime::build`] opens the workspace capability, resolves the policy against it once
//! (`Policy::resolve`: one plan per stage) and builds from those plans, in order: the
//! confinement and the executor that runs through it, the protected set and write rules (the
//! set the confinement binds read-only is the set the file tools refuse), the parser worker
//! client, the lint pipeline, the audit log, the concurrency slots and the per-file locks. `serve`, `exec`,
//! `doctor`, `lint`, the benches and the tests all get theirs from here, so a newcomer who
//! wants to know what a call can use reads this file.
//!
//! A [`Runtime`] is shared by every client of one server (`Arc`); a [`Session`] is what one
//! client connection owns on top of it: its interpreter sessions and its cancellation. The
//! stdio transport has one session; a transport with many clients builds one per connection
//! from the same runtime, so they share the workspace, the slots, the locks and the audit log
//! but never each other's Python state.
//!
//! Owns construction and the shared state's small helpers (write rules, audit, blocking work
//! off the async threads). It decides nothing about a call (that is `policy` and `tools`) and
//! knows nothing of MCP (that is `server`).

use crate::audit::{AuditLog, AuditOptions, AuditRecord};
use crate::confine::{ConfineOptions, Confinement, EnforcementLevel};
use crate::exec::Executor;
use crate::interpreter::{InterpreterError, SessionManager};
use crate::lint::Linting;
use crate::parser::ParserClient;
use crate::policy::Policy;
use crate::shape::{ErrorKind, ToolError};
use crate::workspace::{PathError, Workspace, WriteRules};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Why a runtime could not be built; each says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Workspace(#[from] crate::workspace::OpenWorkspaceError),
    /// Creating `.cordon/` (the spill area) failed.
    #[error(transparent)]
    SpillArea(PathError),
    /// Creating the calls' persistent home (`{workspace_home}`) failed.
    #[error("the calls' home directory (HOME = {{workspace_home}} in the policy): {0}")]
    Home(PathError),
    #[error(transparent)]
    Confine(#[from] crate::confine::ConfineError),
    #[error("cannot hand the workspace to the confinement: {0}")]
    Handed(std::io::Error),
    #[error("cannot open the audit log {}: {source}", path.display())]
    Audit {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Parser(#[from] crate::policy::commands::ExampleCheckError),
    #[error(transparent)]
    Interpreter(#[from] InterpreterError),
}

/// Where audit records go.
#[derive(Debug, Clone, Default)]
pub enum AuditTarget {
    /// Nowhere (`exec`, `doctor`, `lint`, most tests).
    #[default]
    Off,
    /// The policy's `server.audit_log`, if it names one.
    Policy,
    /// This file (`serve --audit-log`), whatever the policy says.
    File(PathBuf),
}

/// What the caller adds to the policy: where, how strictly, and which parts it needs.
#[derive(Debug, Clone, Default)]
pub struct RuntimeOptions {
    /// The workspace root (an existing directory; see `cli::workspace`).
    pub workspace: PathBuf,
    /// Run with whatever confinement the kernel offers instead of refusing (`--allow-degraded`).
    pub allow_degraded: bool,
    /// The cordon binary the confined parser worker runs; it gets a read+execute grant in the
    /// sandbox. None: no parser worker (no syntax check, no command analysis).
    pub parser_program: Option<PathBuf>,
    /// Further read+execute grants (doctor's probes run this binary).
    pub extra_read_exec: Vec<PathBuf>,
    /// The binary that runs the sandbox init; default: this process's own executable (tests
    /// that embed the library name the real `cordon` here).
    pub init_program: Option<PathBuf>,
    pub audit: AuditTarget,
    /// Create `.cordon/` now, so it exists, and is protected, before the first command runs.
    pub spill_area: bool,
    /// One command and done (`cordon exec`): no warm slots are kept ready.
    pub one_shot: bool,
    /// Record checkpoints of the calls (`serve`; `[checkpoints] enabled` decides too).
    pub checkpoints: bool,
}

/// The workspace's checkpoint store. A store that cannot be opened (an unwritable state
/// directory) does not stop the server: it is logged, and results carry no checkpoint.
fn open_checkpoints(
    workspace: &Workspace,
    policy: &Policy,
) -> Option<Arc<crate::checkpoint::Checkpoints>> {
    match crate::checkpoint::Checkpoints::open(
        workspace.root(),
        workspace.dir(),
        policy.checkpoints.settings(),
    ) {
        Ok(mut checkpoints) => {
            if let Err(why) = checkpoints.watch_changes(workspace.root()) {
                tracing::info!("checkpoints walk the workspace at every call: {why}");
            }
            Some(Arc::new(checkpoints))
        }
        Err(e) => {
            tracing::warn!("checkpoints are off for this server: {e}");
            None
        }
    }
}

/// What one policy turns into, shared by every call of every client.
pub struct Runtime {
    pub policy: Policy,
    pub workspace: Workspace,
    /// What the kernel enforces on every confined process (built once: "build once, apply
    /// many"); `executor` runs children through it.
    pub confinement: Arc<Confinement>,
    pub executor: Arc<Executor>,
    /// Workspace-relative patterns nothing confined may write, derived once (the policy's
    /// `filesystem.protected` plus every policy file of its `extends` chain inside the
    /// workspace): the sandbox's read-only binds and the file tools' refusals are this list.
    pub protected: Vec<String>,
    /// With a read-only workspace, the only directories the file tools may write.
    pub writable_only: Option<Vec<String>>,
    /// The confined parser worker: command analysis for the rules (and, through `lint`, the
    /// syntax check). The server never runs a grammar itself.
    pub parser: Option<Arc<ParserClient>>,
    pub lint: Linting,
    pub audit: Option<AuditLog>,
    /// Bounds how much confined work runs at once (commands, interpreter cells, lint runs);
    /// the rest wait their turn.
    pub slots: Arc<tokio::sync::Semaphore>,
    /// Serialises read-modify-write of one file, so two edits of it cannot interleave.
    /// Crate-private, so a `Runtime` can only come from [`Runtime::build`].
    pub(crate) file_locks: FileLocks,
    /// Cancelled when the server shuts down: every session's calls end with it.
    pub shutdown: CancellationToken,
    /// Host ports relayed to jobs' servers (`[jobs] forward`), once `serve` started them.
    pub forwarder: std::sync::OnceLock<Arc<crate::jobs::forward::Forwarder>>,
    /// What the start found in place of cordon's own directories and moved aside (logged
    /// at start, and each session's first log message).
    pub moved_aside: Vec<crate::workspace::MovedAside>,
    /// The workspace's checkpoints (`crate::checkpoint`); None when not recorded (not
    /// serving, `[checkpoints] enabled = false`, or the store could not be opened: logged).
    pub checkpoints: Option<Arc<crate::checkpoint::Checkpoints>>,
}

impl Runtime {
    /// Builds everything `policy` needs for `options`. Call it on the thread that keeps
    /// running (not from `spawn_blocking`): the sandbox init dies with the thread that forked
    /// it.
    pub fn build(policy: Policy, options: RuntimeOptions) -> Result<Self, RuntimeError> {
        let workspace =
            Workspace::open(&options.workspace)?.with_spill_total(policy.output.spill_total_bytes);
        // What a call left in place of cordon's own directories is moved aside, never a
        // reason not to start (`workspace::reclaim`).
        let mut moved_aside = workspace
            .reclaim_own_dirs(options.spill_area, None)
            .map_err(RuntimeError::SpillArea)?;
        if options.spill_area {
            workspace.spill_dir().map_err(RuntimeError::SpillArea)?;
        }
        let mut extra_read_exec = options.extra_read_exec.clone();
        extra_read_exec.extend(options.parser_program.iter().cloned());
        let confine_options = ConfineOptions {
            allow_degraded: options.allow_degraded,
            extra_read_exec,
            init_program: options.init_program.clone(),
            one_shot: options.one_shot,
        };
        // The policy, resolved once: every stage below gets its plan, none the policy.
        let plans = policy.resolve(workspace.root());
        create_granted_dirs(&plans.create_dirs);
        if plans.workspace_home.is_some() {
            let home = crate::policy::toolchains::WORKSPACE_HOME;
            moved_aside.extend(
                workspace
                    .reclaim_own_dirs(false, Some(home))
                    .map_err(RuntimeError::Home)?,
            );
            workspace.ensure_home(home).map_err(RuntimeError::Home)?;
        }
        // What confinement needs opened or started, done here so `confine` opens nothing by
        // ambient path and starts no server: the workspace capability and the egress proxy.
        let handed = crate::confine::Handed {
            workspace: workspace.dir().try_clone().map_err(RuntimeError::Handed)?,
            proxy: match &plans.confine.proxy {
                Some(rules) => Some(
                    crate::egress::Proxy::start(rules.clone())
                        .map_err(|e| crate::confine::ConfineError::Egress(e.to_string()))?,
                ),
                None => None,
            },
        };
        let confinement = Arc::new(Confinement::build(
            &plans.confine,
            &confine_options,
            handed,
        )?);
        let executor = Arc::new(Executor::new(Arc::clone(&confinement), plans.exec));
        let parser = options.parser_program.clone().map(|program| {
            Arc::new(ParserClient::new(
                Arc::clone(&executor),
                program,
                crate::parser::ParserConfig::default(),
            ))
        });
        let slots = Arc::new(tokio::sync::Semaphore::new(
            policy.server.max_concurrent_calls,
        ));
        let lint = Linting::new(plans.lint, Some(Arc::clone(&executor)), parser.clone())
            .with_slots(Arc::clone(&slots));
        let audit = open_audit(&policy, &options.audit)?;
        let checkpoints = (options.checkpoints && policy.checkpoints.enabled)
            .then(|| open_checkpoints(&workspace, &policy))
            .flatten();
        Ok(Self {
            checkpoints,
            slots,
            file_locks: FileLocks::default(),
            shutdown: CancellationToken::new(),
            forwarder: std::sync::OnceLock::new(),
            moved_aside,
            policy,
            workspace,
            confinement,
            executor,
            protected: plans.protected,
            writable_only: plans.writable_only,
            parser,
            lint,
            audit,
        })
    }

    /// Starts relaying `[jobs] forward` ports from the host's 127.0.0.1 into the sandbox's
    /// loopback (`serve` does, before it answers anything). Refused, and said, where the
    /// sandbox's loopback is not private: then a job's server is on the host's loopback anyway.
    pub async fn start_forwarding(&self) {
        let ports = &self.policy.jobs.forward;
        if ports.is_empty() || self.forwarder.get().is_some() {
            return;
        }
        let private = match self.executor.sandbox_init().await {
            Some(Ok(init)) if init.namespaces().network => Ok(()),
            Some(Ok(_)) => Err(
                "the sandbox shares the host's network under this policy, so its \
                                 loopback is not private"
                    .to_owned(),
            ),
            Some(Err(e)) => Err(format!("the sandbox init could not start: {e}")),
            None => Err(
                "namespaces are not available here (the per-child fallback), so the \
                         sandbox's loopback is the host's"
                    .to_owned(),
            ),
        };
        let confinement = Arc::clone(&self.confinement);
        let source: crate::jobs::forward::NamespaceSource = Box::new(move || {
            // No view check: the namespace does not depend on the view, and this runs for
            // every forwarded connection.
            confinement
                .installed_sandbox_init()
                .and_then(|init| init.network_namespace())
        });
        let forwarder = crate::jobs::forward::Forwarder::start(ports, source, private).await;
        let _ = self.forwarder.set(Arc::new(forwarder));
    }

    /// Whether the sandbox's loopback belongs to the sandbox alone (a private network
    /// namespace): servers that jobs start there are reachable only from confined calls.
    pub fn private_loopback(&self) -> bool {
        self.confinement
            .installed_sandbox_init()
            .is_some_and(|init| init.namespaces().network)
    }

    /// Starts the parser worker and checks the policy's command-rule examples in it (they are
    /// command lines like any other: the server does not parse them). `serve` does this before
    /// it answers anything, so a policy whose examples fail never serves.
    ///
    /// Where every rule comes from a built-in policy, their examples are this binary's own,
    /// checked for every built-in policy by the test suite (`policy check` on each), so the
    /// verdict is known: the worker then starts in the background, off the start path, and
    /// the first call that needs it waits for it.
    pub async fn start_parser(&self) -> Result<(), RuntimeError> {
        let Some(parser) = &self.parser else {
            return Ok(());
        };
        if rules_are_builtin(&self.policy.commands) {
            let parser = Arc::clone(parser);
            tokio::spawn(async move {
                if let Err(e) = parser.warm_up().await {
                    tracing::warn!("the parser worker did not start: {e}");
                }
            });
            return Ok(());
        }
        parser
            .warm_up()
            .await
            .map_err(crate::policy::commands::ExampleCheckError::from)?;
        crate::policy::commands::check_examples(parser, &self.policy.commands).await?;
        Ok(())
    }

    /// The enforcement level in force for every call of this runtime.
    pub fn enforcement_level(&self) -> EnforcementLevel {
        self.confinement.enforcement().level
    }

    /// The rules every file-tool write must pass, judged by the workspace on the path as it
    /// resolves on disk (see `workspace::write`).
    pub fn write_rules(&self) -> WriteRules<'_> {
        WriteRules {
            protected: &self.protected,
            writable_only: self.writable_only.as_deref(),
        }
    }

    /// A failed write as a tool error; a refusal by the policy's write rules names the
    /// policy setting to change (`policy::explain`).
    pub fn write_error(&self, e: &PathError) -> ToolError {
        // The circuit breaker counts a write rule's refusal by what refused it.
        match e {
            PathError::Protected { entry, .. } => {
                crate::breaker::report_write(crate::breaker::Group::Protected(entry.clone()));
            }
            PathError::NotWritable { .. } => {
                crate::breaker::report_write(crate::breaker::Group::ReadOnlyWorkspace);
            }
            _ => {}
        }
        match crate::policy::explain::write_refusal(&self.policy, e) {
            Some(message) => ToolError::new(ErrorKind::Denied, message),
            None => ToolError::from(e),
        }
    }

    /// The most bytes a write or edit may leave in a file: the policy's file-size limit
    /// (the same RLIMIT_FSIZE a command gets), refused before the content is built.
    pub fn max_file_bytes(&self) -> u64 {
        self.policy.limits.file_size_bytes
    }

    /// Records a finished call in the audit log, if there is one: the one place records are
    /// written.
    pub fn audit(
        &self,
        tool: &str,
        arguments: &impl serde::Serialize,
        decision: &crate::audit::Decision,
        outcome: crate::audit::Outcome,
        started: Instant,
    ) {
        self.audit_call(tool, arguments, decision, outcome, started, None);
    }

    /// [`Runtime::audit`] of a call that names the checkpoint undoing it.
    pub fn audit_call(
        &self,
        tool: &str,
        arguments: &impl serde::Serialize,
        decision: &crate::audit::Decision,
        outcome: crate::audit::Outcome,
        started: Instant,
        checkpoint: Option<String>,
    ) {
        let Some(log) = &self.audit else { return };
        let arguments = serde_json::to_value(arguments).unwrap_or_default();
        log.record(&AuditRecord {
            time: crate::audit::now_rfc3339(),
            tool,
            arguments: crate::audit::loggable(&arguments, log.keeps_values()),
            decision: decision.clone(),
            outcome,
            duration_ms: started.elapsed().as_millis() as u64,
            enforcement: self.enforcement_level(),
            checkpoint,
        });
    }

    /// Runs `work` where it cannot stall the async threads: file-system calls on workspace
    /// paths (opening, reading, writing, renaming) may stall on a slow disk, and every other
    /// call runs on those threads. On the multi-thread runtime (the server's) the work runs
    /// in place and the thread's other tasks move to another worker (`block_in_place`: no
    /// hand-off to a pool thread on the call's own path, which measured ~0.1 ms per write);
    /// elsewhere on the blocking pool. A panic in `work` is re-raised here.
    pub async fn blocking<T, F>(self: &Arc<Self>, work: F) -> T
    where
        T: Send + 'static,
        F: FnOnce(&Runtime) -> T + Send + 'static,
    {
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread {
            return tokio::task::block_in_place(|| work(self));
        }
        let runtime = Arc::clone(self);
        match tokio::task::spawn_blocking(move || work(&runtime)).await {
            Ok(value) => value,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// Waits (at most `grace`) until no call holds a slot: their process trees are dead.
    pub async fn drain(&self, grace: Duration) {
        let all = self.policy.server.max_concurrent_calls as u32;
        let _ = tokio::time::timeout(grace, self.slots.acquire_many(all)).await;
    }
}

fn open_audit(policy: &Policy, target: &AuditTarget) -> Result<Option<AuditLog>, RuntimeError> {
    let path = match target {
        AuditTarget::Off => return Ok(None),
        AuditTarget::Policy => match &policy.server.audit_log {
            Some(path) => path.clone(),
            None => return Ok(None),
        },
        AuditTarget::File(path) => path.clone(),
    };
    let options = AuditOptions {
        max_bytes: policy.server.audit_log_max_bytes,
        keep_values: policy.server.audit_log_values,
        policy: format!("{} ({})", policy.name, policy.origin),
    };
    AuditLog::open(&path, options)
        .map(Some)
        .map_err(|source| RuntimeError::Audit { path, source })
}

/// What one client connection owns on top of the shared [`Runtime`].
pub struct Session {
    pub runtime: Arc<Runtime>,
    /// This client's `code_interpreter` sessions: another client never sees them.
    pub interpreter: Arc<SessionManager>,
    /// Cancelled when this client goes away or the server shuts down (a child of the
    /// runtime's token): every call of the session ends with it.
    pub cancel: CancellationToken,
    /// This client's background jobs: another client never sees them, and they end with the
    /// session.
    pub jobs: Arc<crate::jobs::JobTable>,
}

impl Session {
    /// A new client session over `runtime`. Call it inside the Tokio runtime (the interpreter
    /// manager starts its upkeep task).
    pub fn new(runtime: Arc<Runtime>) -> Result<Self, RuntimeError> {
        let interpreter = SessionManager::new(Arc::clone(&runtime.executor), &runtime.policy)?;
        Ok(Self::with_interpreter(runtime, interpreter))
    }

    /// A session whose interpreter sessions are `interpreter`'s (built over the runtime's
    /// executor, possibly with other `[interpreter]` settings: tests tighten them).
    pub fn with_interpreter(runtime: Arc<Runtime>, interpreter: Arc<SessionManager>) -> Self {
        let cancel = runtime.shutdown.child_token();
        // Every ending goes to the audit log as it happens (the session may never call again).
        let audited = Arc::downgrade(&runtime);
        let observer: crate::jobs::Observer = Arc::new(move |event: &crate::jobs::JobEvent| {
            if let Some(runtime) = audited.upgrade() {
                runtime.audit(
                    "job",
                    &serde_json::json!({"id": event.id, "command": event.command}),
                    &crate::audit::Decision::Allow,
                    crate::audit::Outcome::Other(if event.git_refused.is_empty() {
                        serde_json::json!({"state": event.state, "reason": event.reason})
                    } else {
                        serde_json::json!({
                            "state": event.state,
                            "reason": event.reason,
                            "git_refused": event.git_refused,
                        })
                    }),
                    Instant::now(),
                );
            }
        });
        let jobs = Arc::new(
            crate::jobs::JobTable::new(
                runtime.policy.jobs.clone(),
                runtime.policy.origin.clone(),
                Arc::clone(&runtime.executor),
                cancel.child_token(),
                Some(observer),
            )
            .with_served({
                let runtime = Arc::downgrade(&runtime);
                Arc::new(move |inodes: &std::collections::HashSet<u64>| {
                    runtime.upgrade()?.forwarder.get()?.last_served(inodes)
                })
            }),
        );
        Self {
            cancel,
            interpreter,
            jobs,
            runtime,
        }
    }

    /// Ends the session: its running calls are cancelled (their trees killed) and its
    /// interpreters stopped, waiting at most `grace`.
    pub async fn close(&self, grace: Duration) {
        self.cancel.cancel();
        let _ = tokio::time::timeout(grace, async {
            tokio::join!(self.interpreter.shutdown(), self.jobs.shutdown(grace));
        })
        .await;
    }
}

/// One lock per file, taken for a read-modify-write (`edit_file`) or a write and the lint run
/// that reads it back. Writes to different files never wait for each other.
///
/// The key is the workspace-relative path as the workspace resolved it (`..` and `.` removed):
/// two spellings through a symlinked directory are two keys. That can only lose one of two
/// racing edits of the same file, never corrupt it (every write is a rename of a complete
/// temporary file), which is what the lock exists to prevent for ordinary use.
#[derive(Default)]
pub(crate) struct FileLocks {
    held: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl FileLocks {
    /// Waits for `path`'s lock; it is released when the guard drops.
    pub(crate) async fn lock(&self, path: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            match held.get(path).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    // Forget the locks nobody holds any more, so the map stays as small as the
                    // number of files being written right now.
                    held.retain(|_, lock| lock.strong_count() > 0);
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    held.insert(path.to_owned(), Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
    }
}

/// Creates the read-write directories the policy grants that do not exist yet (the
/// workspace's persistent home, package caches), owner-only, so the grant is not silently
/// void (Landlock and the sandbox's view can only grant what exists). One that cannot be made
/// is said in the log and stays ungranted; the call still runs.
fn create_granted_dirs(dirs: &[PathBuf]) {
    use std::os::unix::fs::DirBuilderExt;
    for dir in dirs {
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
        {
            tracing::warn!(
                "cannot create {}, granted read-write by the policy: {e}; commands cannot use it",
                dir.display()
            );
        }
    }
}

/// Whether every command rule was written in a built-in policy (none comes from an operator's
/// file), so their examples are the binary's own. Matched exactly: a policy file may itself be
/// named `builtin:….toml`.
fn rules_are_builtin(rules: &crate::policy::commands::CommandRules) -> bool {
    let builtin: Vec<String> = crate::policy::embedded_names()
        .iter()
        .map(|name| format!("builtin:{name}"))
        .collect();
    rules.rules.iter().all(|r| builtin.contains(&r.origin))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_file_waits_for_its_own_lock_and_another_file_does_not() {
        let locks = FileLocks::default();
        let a = locks.lock("a.txt").await;
        // Another file: free at once.
        let b = tokio::time::timeout(Duration::from_millis(100), locks.lock("b.txt")).await;
        assert!(b.is_ok(), "b.txt waited for a.txt's lock");
        // The same file: waits until the first guard is gone.
        let again = tokio::time::timeout(Duration::from_millis(100), locks.lock("a.txt")).await;
        assert!(again.is_err(), "a.txt was locked twice at once");
        drop(a);
        let again = tokio::time::timeout(Duration::from_millis(100), locks.lock("a.txt")).await;
        assert!(again.is_ok(), "a.txt stayed locked after its guard dropped");
    }

    #[tokio::test]
    async fn released_locks_are_forgotten() {
        let locks = FileLocks::default();
        for i in 0..100 {
            drop(locks.lock(&format!("f{i}")).await);
        }
        let _g = locks.lock("last").await;
        assert!(locks.held.lock().unwrap().len() <= 2);
    }
}
