//! The lint pipeline run after every write and edit: the syntax check (tree-sitter, in the
//! confined parser worker) plus the policy's external linters, each run **confined** like any
//! shell command (a workspace config can make a linter load plugins: that is code execution),
//! then `introduced` marking.
//!
//! Owns choosing which checks apply, running them with their timeout, and folding their
//! results into one [`LintReport`] that never claims "clean" when a check did not run, and
//! names every configured check that did not (`skipped`). Reading linters' output is
//! `formats`, the grammars run in `crate::parser`'s worker (their errors become diagnostics in
//! `syntax`), the marking is `introduced`. This module never calls a grammar itself: the
//! server process must not run their C code.

use super::diagnostic::{Diagnostic, LintReport, SkippedCheck};
use super::formats::{CompiledLinter, LinterConfig};
use super::introduced::mark_introduced;
use super::syntax::{self, SYNTAX_SOURCE};
use crate::exec::{CaptureSpec, ExecRequest, Executor, Program};
use crate::parser::ParserClient;
use crate::parser::protocol::SyntaxOutcome;
use crate::parser::syntax::{Language, detect_language};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The lint settings of one runtime, resolved from the policy by `policy::resolve`: the
/// linters already compiled (once, when the policy loaded), the sandbox's PATH already
/// expanded.
#[derive(Debug, Clone)]
pub struct LintPlan {
    pub enabled: bool,
    /// The embedded tree-sitter syntax check.
    pub syntax: bool,
    /// Per external linter run.
    pub timeout: Duration,
    pub max_file_bytes: usize,
    pub linters: Vec<CompiledLinter>,
    /// The sandbox's PATH: what `execvp` in the confined child will search.
    pub search_path: String,
}

/// Linter output kept in memory; JSON for one file is far below this.
const LINTER_OUTPUT_CAP: usize = 8 << 20;

/// How many (file, content) results are remembered for the next write's "before".
const CACHE_ENTRIES: usize = 64;

/// Diagnostics per check for recently linted contents, keyed by path and content hash. A
/// stale entry (a linter config changed in between) can only affect `introduced`, never the
/// diagnostics reported, which always come from a fresh run on the new content. The same key
/// names the content's syntax tree in the parser worker, for an incremental re-parse.
#[derive(Default)]
struct ResultCache {
    entries: std::sync::Mutex<std::collections::VecDeque<(u64, Remembered)>>,
}

/// Diagnostics of one content, per check (`syntax`, `ruff`, …).
type CheckResults = Vec<(String, Vec<Diagnostic>)>;
type Remembered = std::collections::HashMap<String, Vec<Diagnostic>>;

impl ResultCache {
    fn get(&self, key: &u64) -> Option<Remembered> {
        let entries = self.entries.lock().ok()?;
        entries
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, key: u64, results: CheckResults) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|(k, _)| *k != key);
            if entries.len() >= CACHE_ENTRIES {
                entries.pop_front();
            }
            entries.push_back((key, results.into_iter().collect()));
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
    policy: LintPlan,
    cache: ResultCache,
    linters: Vec<ExternalLinter>,
    executor: Option<Arc<Executor>>,
    parser: Option<Arc<ParserClient>>,
    /// The server's concurrency slots: a linter is confined work like a command, so it waits
    /// its turn with them. None: unbounded (the CLI lints one file at a time).
    slots: Option<Arc<tokio::sync::Semaphore>>,
}

/// What one group of checks (the syntax check, or the external linters) contributed.
#[derive(Default)]
struct Findings {
    ran: Vec<String>,
    problems: Vec<String>,
    skipped: Vec<SkippedCheck>,
    new_diags: Vec<Diagnostic>,
    old_diags: Vec<Diagnostic>,
    /// Diagnostics of linters that could not see the old content: judged by changed lines.
    unpaired: Vec<Diagnostic>,
    fresh: CheckResults,
}

impl Findings {
    fn merge(&mut self, other: Findings) {
        self.ran.extend(other.ran);
        self.problems.extend(other.problems);
        self.skipped.extend(other.skipped);
        self.new_diags.extend(other.new_diags);
        self.old_diags.extend(other.old_diags);
        self.unpaired.extend(other.unpaired);
        self.fresh.extend(other.fresh);
    }
}

impl Linting {
    /// The pipeline `plan` describes, each linter's command found on the plan's search path.
    /// Without an executor no external linter runs; without a parser client no syntax check
    /// does (both are then reported in `skipped`).
    pub fn new(
        plan: LintPlan,
        executor: Option<Arc<Executor>>,
        parser: Option<Arc<ParserClient>>,
    ) -> Self {
        let linters = plan
            .linters
            .iter()
            .map(|compiled| ExternalLinter {
                command: find_command(&compiled.config().command, &plan.search_path),
                compiled: compiled.clone(),
            })
            .collect();
        Self {
            policy: plan,
            cache: ResultCache::default(),
            linters,
            executor,
            parser,
            slots: None,
        }
    }

    /// Makes every external linter run take one of `slots` while it runs.
    pub fn with_slots(mut self, slots: Arc<tokio::sync::Semaphore>) -> Self {
        self.slots = Some(slots);
        self
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
        // What the checks said about the previous content, when it was the content of an
        // earlier check of this file (the usual edit-after-edit case): saves a second parse
        // and a second linter run per write.
        let after_key = content_key(path, after);
        let before_key = before.map(|b| content_key(path, b));
        let cached_before = before_key.and_then(|k| self.cache.get(&k));

        let language = self
            .policy
            .syntax
            .then(|| detect_language(Path::new(path), after))
            .flatten();
        // The syntax check (in the parser worker) runs while the external linters run, so a
        // write costs the slower of the two, not their sum.
        let syntax = async {
            match language {
                Some(lang) => {
                    self.syntax_check(lang, before, after, after_key, before_key, &cached_before)
                        .await
                }
                None => Findings::default(),
            }
        };
        let external = self.external_linters(path, before, after, &cached_before);
        let (mut all, external) = tokio::join!(syntax, external);
        all.merge(external);

        let Findings {
            ran,
            problems,
            skipped,
            mut new_diags,
            old_diags,
            mut unpaired,
            fresh,
        } = all;
        self.cache.put(after_key, fresh);

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
            return LintReport::unavailable(ran, new_diags, problems.join("; "))
                .with_skipped(skipped);
        }
        if ran.is_empty() {
            let reason = if skipped.is_empty() {
                format!("no syntax check or linter is configured for `{path}`")
            } else {
                "no configured check could run".to_owned()
            };
            return LintReport::skipped(reason).with_skipped(skipped);
        }
        LintReport::from_diagnostics(ran, new_diags).with_skipped(skipped)
    }

    /// The syntax check of `after` (and of `before` when its result is not remembered), in
    /// the parser worker. The old content is checked first and remembered, so the new one is
    /// an incremental re-parse of it.
    async fn syntax_check(
        &self,
        lang: Language,
        before: Option<&str>,
        after: &str,
        after_key: u64,
        before_key: Option<u64>,
        cached_before: &Option<Remembered>,
    ) -> Findings {
        let mut f = Findings::default();
        let skip = |f: &mut Findings, reason: String| {
            f.skipped.push(SkippedCheck {
                name: SYNTAX_SOURCE.into(),
                reason: reason.clone(),
            });
            f.problems
                .push(format!("syntax check unavailable: {reason}"));
        };
        let Some(parser) = &self.parser else {
            skip(&mut f, "no parser worker in this process".into());
            return f;
        };
        let mut old = cached_before
            .as_ref()
            .and_then(|c| c.get(SYNTAX_SOURCE).cloned());
        if let (None, Some(b)) = (&old, before) {
            // Best effort: without the old result every syntax error counts as introduced
            // only where lines changed (mark_introduced pairs against nothing).
            if let Ok(SyntaxOutcome::Checked { errors, .. }) =
                parser.syntax(lang, b, before_key, None).await
            {
                old = Some(syntax::diagnostics(errors));
            }
        }
        match parser
            .syntax(lang, after, Some(after_key), before_key)
            .await
        {
            Ok(SyntaxOutcome::Checked { errors, .. }) => {
                let diagnostics = syntax::diagnostics(errors);
                f.ran.push(SYNTAX_SOURCE.to_owned());
                f.fresh
                    .push((SYNTAX_SOURCE.to_owned(), diagnostics.clone()));
                f.new_diags.extend(diagnostics);
                f.old_diags.extend(old.unwrap_or_default());
            }
            Ok(SyntaxOutcome::TooSlow { budget_ms }) => f.skipped.push(SkippedCheck {
                name: SYNTAX_SOURCE.into(),
                reason: format!(
                    "the {} parse took longer than {budget_ms} ms and was stopped",
                    lang.name()
                ),
            }),
            Ok(SyntaxOutcome::Grammar { detail }) => {
                skip(
                    &mut f,
                    format!("the {} grammar does not load: {detail}", lang.name()),
                );
            }
            Err(e) => skip(&mut f, e.to_string()),
        }
        f
    }

    /// Every configured linter that applies to `path`, one after another.
    async fn external_linters(
        &self,
        path: &str,
        before: Option<&str>,
        after: &str,
        cached_before: &Option<Remembered>,
    ) -> Findings {
        let mut f = Findings::default();
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
                let hint = config
                    .install_hint
                    .as_deref()
                    .map(|h| format!("; install it with `{h}`"))
                    .unwrap_or_default();
                let reason = format!(
                    "not installed: `{}` is not on the sandbox PATH{hint}",
                    config.command
                );
                if !config.optional {
                    f.problems.push(format!("{}: {reason}", config.name));
                }
                f.skipped.push(SkippedCheck {
                    name: config.name.clone(),
                    reason,
                });
                continue;
            };
            let Some(executor) = &self.executor else {
                f.skipped.push(SkippedCheck {
                    name: config.name.clone(),
                    reason: "no confined executor in this process".into(),
                });
                continue;
            };
            let cached_old = cached_before
                .as_ref()
                .and_then(|c| c.get(&config.name).cloned());
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
                    f.ran.push(config.name.clone());
                    if config.stdin {
                        f.fresh.push((config.name.clone(), diags.clone()));
                    }
                    match old {
                        Some(old) => {
                            f.new_diags.extend(diags);
                            f.old_diags.extend(old);
                        }
                        None if before.is_some() => f.unpaired.extend(diags),
                        None => f.new_diags.extend(diags),
                    }
                }
                Err(reason) => {
                    let why = reason
                        .strip_prefix(&format!("{}: ", config.name))
                        .unwrap_or(&reason)
                        .to_owned();
                    f.skipped.push(SkippedCheck {
                        name: config.name.clone(),
                        reason: why,
                    });
                    f.problems.push(reason);
                }
            }
        }
        f
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
        let _slot = match &self.slots {
            Some(slots) => Some(
                slots
                    .acquire()
                    .await
                    .map_err(|_| format!("{}: the server is shutting down", config.name))?,
            ),
            None => None,
        };
        let mut argv = vec![command.as_os_str().to_owned()];
        argv.extend(config.command_args(path).into_iter().map(Into::into));
        let spec = || CaptureSpec::in_memory(LINTER_OUTPUT_CAP);
        let request = ExecRequest::new(Program::new(argv), self.policy.timeout, spec(), spec())
            .with_stdin(config.stdin.then(|| content.as_bytes().to_vec()));
        let outcome = executor
            .run(request)
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
                    format!(": {}", crate::text::at_most_chars(last, 200))
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
