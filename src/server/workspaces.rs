//! A workspace per subject (`serve --http --workspaces DIR`): each authenticated subject's
//! calls run in `DIR/<name>`, a directory only that subject's runtime ever opens, under the
//! policy its groups select.
//!
//! A subject's [`Runtime`] is everything cordon builds for one workspace: its sandbox init
//! and view, its egress proxy, its parser worker, its slots (so one subject's flood of calls
//! waits for its own slots, never another's), its git shadow, its calls' home and its audit
//! stream. It is built on the subject's first call, from the authenticated request alone
//! (the subject and its groups; no argument a model writes reaches this module), and shut
//! down once no session of the subject is left and it has been idle for
//! `server.http.workspace_idle_secs`; the next call builds it again.
//!
//! The directory's name is derived from the subject: its printable part (bounded, only
//! `A-Z a-z 0-9 . _ -`, never starting with a dot) and 32 hex digits of the SHA-256 of the
//! subject's full display, so two subjects never share one, whatever their names. It is made
//! 0700 beneath a handle on `DIR`, and an existing entry of that name that is not a directory
//! of this uid (a symlink planted by anyone) is refused, never followed.
//!
//! A policy is part of a runtime: when a subject's credentials select another policy than the
//! one its running runtime was built with (its groups changed), the call is refused until
//! that runtime is idle, rather than run with rights the current token does not give.
//!
//! Owns the subject → runtime map, the names, and idle shutdown. What a call may do is the
//! runtime's policy; who the subject is, `http::auth`.

use crate::policy::{GroupPolicy, Policy};
use crate::runtime::{AuditTarget, Runtime, RuntimeError, RuntimeOptions};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::http::auth::Subject;

/// Longest printable prefix of a workspace name.
const MAX_PREFIX: usize = 48;
/// How long shutting an idle runtime down waits for its calls.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Why a subject's workspace could not be had; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum WorkspacesError {
    #[error(
        "this subject's workspace runs under policy `{running}`, selected by its credentials \
         when it started; these credentials select `{wanted}`. The workspace takes the new \
         policy once its other sessions end and it has been idle for \
         server.http.workspace_idle_secs ({idle}s)"
    )]
    PolicyChanged {
        running: String,
        wanted: String,
        idle: u64,
    },
    #[error("cannot make this subject's workspace {}: {source}", path.display())]
    Directory {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start this subject's workspace: {0}")]
    Runtime(#[from] RuntimeError),
    #[error("cannot start this subject's workspace: its start was abandoned ({0})")]
    Aborted(String),
    #[error(
        "{0} subjects' workspaces are running and every one is in use, the most \
         server.http.max_workspaces_running allows; retry when another user's sessions end"
    )]
    Full(usize),
}

/// The workspace root of every subject, and how to build a subject's runtime.
pub struct SubjectWorkspaces {
    root: PathBuf,
    /// Opened once: every subject directory is made and checked beneath it.
    root_dir: cap_std::fs::Dir,
    /// The server's own policy: subjects in no listed group run under it.
    default_policy: Policy,
    /// The `[[server.http.group_policies]]` entries, loaded at start.
    group_policies: Vec<(GroupPolicy, Policy)>,
    /// What every subject runtime is built with besides its workspace and audit stream.
    options: RuntimeOptions,
    idle: Duration,
    max_running: usize,
    subjects: Mutex<HashMap<Subject, Arc<Entry>>>,
}

/// One subject's runtime: made once (concurrent first calls wait for the same one).
struct Entry {
    policy_name: String,
    runtime: tokio::sync::OnceCell<Arc<Runtime>>,
    last_used: Mutex<Instant>,
}

impl SubjectWorkspaces {
    /// The workspaces beneath `root` (an existing directory; made 0700 when missing), with
    /// every group's policy loaded now so that a bad one stops the start, not a call.
    pub fn open(
        root: &Path,
        default_policy: Policy,
        options: RuntimeOptions,
    ) -> Result<Self, WorkspacesOpenError> {
        let http = &default_policy.server.http;
        let mut group_policies = Vec::new();
        for entry in &http.group_policies {
            let policy =
                Policy::load(&entry.policy).map_err(|source| WorkspacesOpenError::Policy {
                    group: entry.group.clone(),
                    source: Box::new(source),
                })?;
            group_policies.push((entry.clone(), policy));
        }
        make_private_dir(root).map_err(|source| WorkspacesOpenError::Root {
            path: root.to_owned(),
            source,
        })?;
        let root = root
            .canonicalize()
            .map_err(|source| WorkspacesOpenError::Root {
                path: root.to_owned(),
                source,
            })?;
        let root_dir = cap_std::fs::Dir::open_ambient_dir(&root, cap_std::ambient_authority())
            .map_err(|source| WorkspacesOpenError::Root {
                path: root.clone(),
                source,
            })?;
        Ok(Self {
            idle: http.workspace_idle,
            max_running: http.max_workspaces_running,
            root,
            root_dir,
            default_policy,
            group_policies,
            options,
            subjects: Mutex::new(HashMap::new()),
        })
    }

    /// Where the workspaces are.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The policy `groups` select: the first `[[server.http.group_policies]]` entry whose
    /// group is among them, else the server's own.
    pub fn policy_for(&self, groups: &BTreeSet<String>) -> &Policy {
        // The same choice as [`selected_group`], over the loaded policies.
        self.group_policies
            .iter()
            .find(|(entry, _)| groups.contains(&entry.group))
            .map_or(&self.default_policy, |(_, policy)| policy)
    }

    /// The runtime of `subject`'s workspace, built on its first call under the policy its
    /// `groups` select.
    pub async fn runtime_for(
        &self,
        subject: &Subject,
        groups: &BTreeSet<String>,
    ) -> Result<Arc<Runtime>, WorkspacesError> {
        let policy = self.policy_for(groups);
        let wanted = policy_label(policy);
        let entry = {
            let mut subjects = self.subjects.lock().unwrap_or_else(|e| e.into_inner());
            let stale = subjects
                .get(subject)
                .is_some_and(|e| e.policy_name != wanted && unused(e));
            if stale {
                // Its sessions are gone: the next build takes the new policy (the old
                // runtime stops when its last reference goes).
                subjects.remove(subject);
            }
            if !subjects.contains_key(subject) && subjects.len() >= self.max_running {
                // Room for one more: the runtime unused longest goes (its next call starts
                // it again), or, with every one in use, this call waits for none.
                let oldest = subjects
                    .iter()
                    .filter(|(_, e)| unused(e))
                    .min_by_key(|(_, e)| std::cmp::Reverse(e.idle_for()))
                    .map(|(s, _)| s.clone())
                    .ok_or(WorkspacesError::Full(self.max_running))?;
                if let Some(evicted) = subjects.remove(&oldest)
                    && let Some(runtime) = evicted.runtime.get().cloned()
                {
                    tokio::spawn(async move {
                        runtime.shutdown.cancel();
                        runtime.drain(DRAIN_GRACE).await;
                    });
                }
            }
            let entry = subjects
                .entry(subject.clone())
                .or_insert_with(|| {
                    Arc::new(Entry {
                        policy_name: wanted.clone(),
                        runtime: tokio::sync::OnceCell::new(),
                        last_used: Mutex::new(Instant::now()),
                    })
                })
                .clone();
            if entry.policy_name != wanted {
                return Err(WorkspacesError::PolicyChanged {
                    running: entry.policy_name.clone(),
                    wanted,
                    idle: self.idle.as_secs(),
                });
            }
            entry
        };
        let runtime = entry
            .runtime
            .get_or_try_init(|| self.build(subject, policy.clone()))
            .await?;
        *entry.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        Ok(Arc::clone(runtime))
    }

    /// Builds `subject`'s runtime in its own directory (made now if new).
    async fn build(
        &self,
        subject: &Subject,
        policy: Policy,
    ) -> Result<Arc<Runtime>, WorkspacesError> {
        let name = directory_name(subject);
        let path = self.root.join(&name);
        self.ensure_directory(&name)
            .map_err(|source| WorkspacesError::Directory {
                path: path.clone(),
                source,
            })?;
        let mut options = self.options.clone();
        options.workspace = path;
        options.audit = subject_audit(&options.audit, &policy, &name);
        let started = Instant::now();
        let runtime = tokio::task::spawn_blocking(move || Runtime::build(policy, options))
            .await
            .map_err(|e| WorkspacesError::Aborted(e.to_string()))??;
        let runtime = Arc::new(runtime);
        // Its proxy's connections go to its own audit stream, as the server's do.
        super::connection_audit::audit_connections(&runtime);
        runtime.start_parser().await?;
        runtime.start_forwarding().await;
        tracing::info!(
            subject = %subject,
            workspace = %name,
            millis = started.elapsed().as_millis() as u64,
            "started a subject's workspace"
        );
        Ok(runtime)
    }

    /// Makes `name` beneath the root, 0700, or checks that what is there is a directory of
    /// ours (not a link: `open_dir_nofollow` refuses one).
    fn ensure_directory(&self, name: &str) -> std::io::Result<()> {
        use cap_fs_ext::{DirExt, OsMetadataExt};
        use cap_std::fs::DirBuilderExt;
        let mut builder = cap_std::fs::DirBuilder::new();
        builder.mode(0o700);
        match self.root_dir.create_dir_with(name, &builder) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let dir = self.root_dir.open_dir_nofollow(name)?;
        let meta = dir.dir_metadata()?;
        if meta.uid() != rustix::process::geteuid().as_raw() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "it is owned by uid {}, not by this server's uid; move it away",
                    meta.uid()
                ),
            ));
        }
        Ok(())
    }

    /// Shuts down the runtimes that no session uses and that have been idle for
    /// `workspace_idle_secs`; their next call starts them again.
    pub async fn shut_idle(&self) {
        let idle: Vec<Arc<Runtime>> = {
            let mut subjects = self.subjects.lock().unwrap_or_else(|e| e.into_inner());
            let expired: Vec<Subject> = subjects
                .iter()
                .filter(|(_, e)| unused(e) && e.idle_for() >= self.idle)
                .map(|(s, _)| s.clone())
                .collect();
            expired
                .iter()
                .filter_map(|s| subjects.remove(s))
                .filter_map(|e| e.runtime.get().cloned())
                .collect()
        };
        for runtime in idle {
            runtime.shutdown.cancel();
            runtime.drain(DRAIN_GRACE).await;
            tracing::info!(
                workspace = %runtime.workspace.root().display(),
                "shut down an idle subject's workspace"
            );
        }
    }

    /// Checks for idle runtimes until `stop`, every quarter of the idle time (at most a
    /// minute, at least a second).
    pub async fn shut_idle_until(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let every = (self.idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => self.shut_idle().await,
            }
        }
    }

    /// Ends every subject's runtime (server shutdown): their calls are cancelled.
    pub async fn close_all(&self, grace: Duration) {
        let all: Vec<Arc<Runtime>> = {
            let mut subjects = self.subjects.lock().unwrap_or_else(|e| e.into_inner());
            subjects
                .drain()
                .filter_map(|(_, e)| e.runtime.get().cloned())
                .collect()
        };
        for runtime in all {
            runtime.shutdown.cancel();
            runtime.drain(grace).await;
        }
    }

    /// How many subject runtimes are running (metrics, tests).
    pub fn running(&self) -> usize {
        let subjects = self.subjects.lock().unwrap_or_else(|e| e.into_inner());
        subjects
            .values()
            .filter(|e| e.runtime.get().is_some())
            .count()
    }
}

/// No call is starting it (only the map holds the entry) and no session holds its runtime
/// (only the entry does), or it was never built: shutting it down takes nothing from anyone.
fn unused(entry: &Arc<Entry>) -> bool {
    Arc::strong_count(entry) == 1
        && entry
            .runtime
            .get()
            .is_none_or(|r| Arc::strong_count(r) == 1)
}

impl Entry {
    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }
}

/// Why `--workspaces` could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WorkspacesOpenError {
    #[error("--workspaces {}: {source}", path.display())]
    Root {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the policy of group `{group}` ([[server.http.group_policies]]): {source}")]
    Policy {
        group: String,
        source: Box<crate::policy::PolicyError>,
    },
}

/// The first `[[server.http.group_policies]]` entry whose group is among `groups`.
pub(crate) fn selected_group<'a>(
    entries: &'a [GroupPolicy],
    groups: &BTreeSet<String>,
) -> Option<&'a GroupPolicy> {
    entries.iter().find(|entry| groups.contains(&entry.group))
}

/// A policy as the audit log and messages name it.
fn policy_label(policy: &Policy) -> String {
    format!("{} ({})", policy.name, policy.origin)
}

/// The directory name of `subject`'s workspace: its printable part and a hash of the whole.
pub(crate) fn directory_name(subject: &Subject) -> String {
    let display = subject.to_string();
    let mut prefix: String = display
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(MAX_PREFIX)
        .collect();
    while prefix.starts_with('.') {
        prefix.replace_range(..1, "_");
    }
    let digest = Sha256::digest(display.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}-{hex}")
}

/// A subject's own audit stream beside the server's: `audit.jsonl` → `audit.<name>.jsonl`.
fn subject_audit(target: &AuditTarget, policy: &Policy, name: &str) -> AuditTarget {
    let path = match target {
        AuditTarget::Off => return AuditTarget::Off,
        AuditTarget::Policy => match &policy.server.audit_log {
            Some(path) => path.clone(),
            None => return AuditTarget::Off,
        },
        AuditTarget::File(path) => path.clone(),
    };
    AuditTarget::File(subject_audit_path(&path, name))
}

/// `dir/audit.jsonl` → `dir/audit.<name>.jsonl` (no extension: `dir/audit.<name>`).
pub(crate) fn subject_audit_path(path: &Path, name: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "audit".into());
    let file = match path.extension() {
        Some(ext) => format!("{stem}.{name}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{name}"),
    };
    path.with_file_name(file)
}

/// Makes `path` (and its parents) when missing, the last one 0700.
fn make_private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_bounded_printable_and_distinct() {
        let jwt = |sub: &str| Subject::Jwt {
            issuer: "https://idp.example".into(),
            sub: sub.into(),
        };
        let names: Vec<String> = [
            jwt("alice"),
            jwt("alice/../bob"),
            jwt("alice_.._bob"),
            jwt(&"x".repeat(5000)),
            jwt(".hidden"),
            Subject::TokenHolder("alice".into()),
            Subject::StaticToken,
            Subject::Anonymous,
        ]
        .iter()
        .map(directory_name)
        .collect();
        for name in &names {
            assert!(name.len() <= MAX_PREFIX + 33, "{name}");
            assert!(!name.starts_with('.'), "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
                "{name}"
            );
        }
        let distinct: BTreeSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        // `alice/../bob` and `alice_.._bob` print alike; the hash keeps them apart.
        assert_eq!(names[1][..20], names[2][..20]);
        assert_eq!(directory_name(&jwt("alice")), names[0], "stable");
    }

    #[test]
    fn a_subjects_audit_stream_is_beside_the_servers() {
        assert_eq!(
            subject_audit_path(Path::new("/var/log/cordon/audit.jsonl"), "bearer_rita-00"),
            Path::new("/var/log/cordon/audit.bearer_rita-00.jsonl")
        );
        assert_eq!(
            subject_audit_path(Path::new("/tmp/log"), "n"),
            Path::new("/tmp/log.n")
        );
    }
}
