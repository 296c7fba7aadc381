//! The lint pipeline run after every write and edit: the embedded syntax check plus the
//! policy's external linters, each run **confined** like any shell command (a workspace
//! config can make a linter load plugins: that is code execution), then `introduced` marking.
//!
//! Owns choosing which checks apply, running them with their timeout, and folding their
//! results into one [`LintReport`] that never claims "clean" when a check did not run.
//! Parsing output is `parsers`, the syntax check `syntax`, the marking `introduced`.

use super::parsers::{CompiledLinter, LinterConfig, ParseError};
use super::syntax::{ParsedSource, check_syntax_edited, check_syntax_keeping_tree};
use super::{
    Diagnostic, LintReport, SyntaxCheckError, check_syntax, detect_language, mark_introduced,
};
use crate::exec::{CaptureSpec, ExecRequest, Executor};
use crate::policy::LintPolicy;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Linter output kept in memory; JSON for one file is far below this.
const LINTER_OUTPUT_CAP: usize = 8 << 20;

/// Source name of the embedded syntax check.
const SYNTAX: &str = "syntax";

/// How many (file, content) results are remembered for the next write's "before".
const CACHE_ENTRIES: usize = 64;

/// Diagnostics per check for recently linted contents, keyed by path and content hash. A
/// stale entry (a linter config changed in between) can only affect `introduced`, never the
/// diagnostics reported, which always come from a fresh run on the new content.
#[derive(Default)]
struct ResultCache {
    entries: std::sync::Mutex<std::collections::VecDeque<(u64, Remembered)>>,
}

/// Diagnostics of one content, per check (`syntax`, `ruff`, …).
type CheckResults = Vec<(String, Vec<Diagnostic>)>;

/// What is remembered of one content: its diagnostics per check and its syntax tree (for an
/// incremental re-parse of the next edit).
#[derive(Clone, Default)]
struct Remembered {
    results: std::collections::HashMap<String, Vec<Diagnostic>>,
    tree: Option<ParsedSource>,
}

impl ResultCache {
    fn get(&self, key: &u64) -> Option<Remembered> {
        let entries = self.entries.lock().ok()?;
        entries
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, key: u64, results: CheckResults, tree: Option<ParsedSource>) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|(k, _)| *k != key);
            if entries.len() >= CACHE_ENTRIES {
                entries.pop_front();
            }
            let results = results.into_iter().collect();
            entries.push_back((key, Remembered { results, tree }));
        }
    }
}

fn content_key(path: &str, content: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    content.hash(&mut h);
    h.finish()
}

struct ExternalLinter {
    compiled: CompiledLinter,
    /// Absolute path of the command, when found on the sandbox PATH.
    command: Option<PathBuf>,
}

/// The configured lint pipeline of one server.
pub struct Linting {
    policy: LintPolicy,
    cache: ResultCache,
    linters: Vec<ExternalLinter>,
    executor: Option<Arc<Executor>>,
}

impl Linting {
    /// Compiles the policy's linters and finds their commands on `search_path` (the sandbox's
    /// PATH). Without an executor only the embedded syntax check runs.
    pub fn new(
        policy: &LintPolicy,
        search_path: &str,
        executor: Option<Arc<Executor>>,
    ) -> Result<Self, ParseError> {
        let linters = policy
            .linters
            .iter()
            .map(|config| {
                Ok(ExternalLinter {
                    compiled: config.compile()?,
                    command: find_command(&config.command, search_path),
                })
            })
            .collect::<Result<_, ParseError>>()?;
        Ok(Self {
            policy: policy.clone(),
            cache: ResultCache::default(),
            linters,
            executor,
        })
    }

    /// The pipeline of `policy`, finding linter commands on the sandbox's own PATH (what
    /// `execvp` in the confined child will search).
    pub fn for_policy(
        policy: &crate::policy::Policy,
        executor: Option<Arc<Executor>>,
    ) -> Result<Self, ParseError> {
        let home = std::env::var("HOME").unwrap_or_default();
        let search_path = policy
            .environment
            .set
            .get("PATH")
            .map(|p| p.replace("{home}", &home))
            .unwrap_or_default();
        Self::new(&policy.lint, &search_path, executor)
    }

    /// Names of the external linters that will run for files they apply to.
    pub fn available_linters(&self) -> Vec<String> {
        self.linters
            .iter()
            .filter(|l| l.command.is_some())
            .map(|l| l.compiled.config().name.clone())
            .collect()
    }

    /// Lints `after` (the content now at `path`, relative to the workspace root); `before` is
    /// the previous content, None for a new file.
    pub async fn check(&self, path: &str, before: Option<&str>, after: &str) -> LintReport {
        if !self.policy.enabled {
            return LintReport::skipped("lint is disabled by the policy");
        }
        if after.len() > self.policy.max_file_bytes {
            return LintReport::skipped(format!(
                "file is larger than the policy's lint limit ({} KiB)",
                self.policy.max_file_bytes / 1024
            ));
        }
        let mut ran = Vec::new();
        let mut problems = Vec::new();
        let mut skipped = Vec::new();
        let mut new_diags: Vec<Diagnostic> = Vec::new();
        let mut old_diags: Vec<Diagnostic> = Vec::new();
        // Diagnostics of linters that could not see the old content: judged by changed lines.
        let mut unpaired: Vec<Diagnostic> = Vec::new();

        // What the checks said about the previous content, when it was the content of an
        // earlier check of this file (the usual edit-after-edit case): saves a second parse
        // and a second linter run per write.
        let after_key = content_key(path, after);
        let cached_before = before.and_then(|b| self.cache.get(&content_key(path, b)));
        let mut fresh: CheckResults = Vec::new();

        // The syntax check runs on the blocking pool while the external linters run, so a
        // write costs the slower of the two, not their sum.
        let syntax = self
            .policy
            .syntax
            .then(|| detect_language(Path::new(path), after))
            .flatten()
            .map(|lang| {
                let cached_old = cached_before
                    .as_ref()
                    .and_then(|c| c.results.get(SYNTAX).cloned());
                // With the previous content's tree, only the edited region is re-parsed.
                let old_tree = cached_before
                    .as_ref()
                    .and_then(|c| c.tree.clone())
                    .filter(|t| t.language() == lang)
                    .zip(before.map(str::to_owned));
                let a = after.to_owned();
                let new_task = tokio::task::spawn_blocking(move || match old_tree {
                    Some((tree, old_text)) => check_syntax_edited(&tree, &old_text, &a),
                    None => check_syntax_keeping_tree(lang, &a),
                });
                // The old content is parsed on the other core while the new one is.
                let old_task = match (&cached_old, before) {
                    (None, Some(b)) => {
                        let b = b.to_owned();
                        Some(tokio::task::spawn_blocking(move || check_syntax(lang, &b)))
                    }
                    _ => None,
                };
                (lang, new_task, old_task, cached_old)
            });

        let ext = Path::new(path)
            .extension()
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_default();
        for linter in self
            .linters
            .iter()
            .filter(|l| l.compiled.config().applies_to(&ext))
        {
            let config = linter.compiled.config();
            let Some(command) = &linter.command else {
                if !config.optional {
                    problems.push(format!(
                        "{}: command `{}` not found on the sandbox PATH",
                        config.name, config.command
                    ));
                }
                continue;
            };
            let Some(executor) = &self.executor else {
                continue;
            };
            let cached_old = cached_before
                .as_ref()
                .and_then(|c| c.results.get(&config.name).cloned());
            let run_after = self.run_one(executor, command, config, path, after);
            let (after_result, old) = match (config.stdin, before, cached_old) {
                (true, Some(_), Some(old)) => (run_after.await, Some(old)),
                (true, Some(old_text), None) => {
                    let (a, b) = tokio::join!(
                        run_after,
                        self.run_one(executor, command, config, path, old_text)
                    );
                    let old = b
                        .ok()
                        .and_then(|(out, code)| linter.compiled.parse(&out, code, old_text).ok());
                    (a, old)
                }
                _ => (run_after.await, None),
            };
            match after_result.and_then(|(out, code)| {
                linter
                    .compiled
                    .parse(&out, code, after)
                    .map_err(|e| e.to_string())
            }) {
                Ok(diags) => {
                    ran.push(config.name.clone());
                    if config.stdin {
                        fresh.push((config.name.clone(), diags.clone()));
                    }
                    match old {
                        Some(old) => {
                            new_diags.extend(diags);
                            old_diags.extend(old);
                        }
                        None if before.is_some() => unpaired.extend(diags),
                        None => new_diags.extend(diags),
                    }
                }
                Err(reason) => problems.push(reason),
            }
        }
        let mut tree = None;
        if let Some((lang, new_task, old_task, cached_old)) = syntax {
            let old = match old_task {
                Some(t) => t.await.ok().and_then(Result::ok),
                None => cached_old,
            };
            match new_task.await {
                Ok(Ok((new, parsed))) => {
                    tree = Some(parsed);
                    // Listed first: the check every file type has.
                    ran.insert(0, SYNTAX.to_owned());
                    fresh.push((SYNTAX.to_owned(), new.clone()));
                    new_diags.extend(new);
                    old_diags.extend(old.unwrap_or_default());
                }
                Ok(Err(SyntaxCheckError::TooSlow { .. })) => {
                    skipped.push(format!("syntax check of {} took too long", lang.name()));
                }
                Ok(Err(e)) => problems.push(e.to_string()),
                Err(e) => problems.push(format!("syntax check crashed: {e}")),
            }
        }
        self.cache.put(after_key, fresh, tree);

        mark_introduced(before, after, &old_diags, &mut new_diags);
        // A second line diff only when some linter could not see the old content.
        if let (Some(old_text), false) = (before, unpaired.is_empty()) {
            let changed = changed_lines(old_text, after);
            for d in &mut unpaired {
                d.introduced = (d.line..=d.end_line.max(d.line)).any(|l| changed.contains(&l));
            }
        }
        new_diags.extend(unpaired);

        if !problems.is_empty() {
            return LintReport::unavailable(ran, new_diags, problems.join("; "));
        }
        if ran.is_empty() {
            return LintReport::skipped(if skipped.is_empty() {
                format!("no syntax check or linter is configured for `{path}`")
            } else {
                skipped.join("; ")
            });
        }
        LintReport::from_diagnostics(ran, new_diags)
    }

    /// Runs one linter confined on `content`; returns (stdout, exit code) or why it failed.
    async fn run_one(
        &self,
        executor: &Executor,
        command: &Path,
        config: &LinterConfig,
        path: &str,
        content: &str,
    ) -> Result<(String, Option<i32>), String> {
        let mut argv = vec![command.as_os_str().to_owned()];
        argv.extend(config.command_args(path).into_iter().map(Into::into));
        let spec = || CaptureSpec {
            memory_cap: LINTER_OUTPUT_CAP,
            spill: None,
            tee: None,
        };
        let outcome = executor
            .run(ExecRequest {
                argv,
                cwd: None,
                env: Default::default(),
                stdin: config.stdin.then(|| content.as_bytes().to_vec()),
                timeout: self.policy.timeout,
                stdout: spec(),
                stderr: spec(),
                cancel: None,
                live: None,
            })
            .await
            .map_err(|e| format!("{}: could not start: {e}", config.name))?;
        if outcome.timed_out {
            return Err(format!(
                "{}: did not finish within {}s and was killed",
                config.name,
                self.policy.timeout.as_secs()
            ));
        }
        if let Some(hit) = &outcome.limit {
            return Err(format!(
                "{}: stopped by the {}",
                config.name,
                hit.kind.describe()
            ));
        }
        let Some(stdout) = outcome.stdout.complete_bytes() else {
            return Err(format!("{}: output too large", config.name));
        };
        let code = outcome.exit_code;
        if !code.is_some_and(|c| config.ok_exit_codes.contains(&c)) {
            let stderr = String::from_utf8_lossy(&outcome.stderr.head);
            let last = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            return Err(format!(
                "{}: exited with {}{}",
                config.name,
                code.map_or_else(
                    || outcome.signal_name().unwrap_or_default(),
                    |c| format!("status {c}")
                ),
                if last.is_empty() {
                    String::new()
                } else {
                    format!(": {}", last.chars().take(200).collect::<String>())
                }
            ));
        }
        Ok((String::from_utf8_lossy(&stdout).into_owned(), code))
    }
}

/// 1-based lines of `new` that are not an unchanged copy of a line of `old`.
fn changed_lines(old: &str, new: &str) -> std::collections::HashSet<u32> {
    let diff = similar::TextDiff::from_lines(old, new);
    let mut changed = std::collections::HashSet::new();
    for op in diff.ops() {
        if op.tag() != similar::DiffTag::Equal {
            for l in op.new_range() {
                changed.insert(l as u32 + 1);
            }
        }
    }
    changed
}

/// Finds `command` (a bare name or a path) the way the sandbox's `execvp` would.
fn find_command(command: &str, search_path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let p = PathBuf::from(command);
        return is_exec(&p).then_some(p);
    }
    search_path
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(command))
        .find(|p| is_exec(p))
}
