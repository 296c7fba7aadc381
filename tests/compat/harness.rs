//! Runs one workload the way a user would, twice: unconfined, then under `cordon exec` with a
//! built-in policy, each in a fresh workspace prepared the same way outside the sandbox, and
//! fails when the confined result (exit status and output) differs from the unconfined one.
//!
//! A row whose tools are missing on this machine is skipped with a loud `SKIPPED` line, and
//! fails under CI (`CI=true`, set by `.ci/run`), so a missing install step never passes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The cordon under test: this build's, or `COMPAT_CORDON` (another build, to record a
/// before/after table).
pub fn cordon() -> String {
    std::env::var("COMPAT_CORDON").unwrap_or_else(|_| env!("CARGO_BIN_EXE_cordon").to_owned())
}

/// Wall-clock bound of one run of a workload (each side).
const TIMEOUT_SECS: u64 = 300;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Says a row cannot run here: a failure under CI, a `SKIPPED` line locally.
pub fn missing(row: &str, what: &str) {
    let line = format!("SKIPPED compat row {row}: {what} (.ci/run installs it)");
    if in_ci() {
        panic!("{line}; CI=true: a row whose prerequisites are missing fails the run");
    }
    eprintln!("{line}");
    crate::runner::mark_skipped(&format!("{what} (.ci/run installs it)"));
}

/// Whether every program is on this process's PATH; names the first missing one.
pub fn have(row: &str, programs: &[&str]) -> bool {
    for p in programs {
        let found = std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .any(|d| Path::new(d).join(p).is_file());
        if !found {
            missing(row, &format!("`{p}` is not on PATH"));
            return false;
        }
    }
    true
}

/// What one side produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: String,
}

/// One workload: a shell script run in the workspace root, after `prepare` made the
/// workspace (outside any sandbox).
pub struct Row<'a> {
    pub name: &'a str,
    pub script: &'a str,
    pub prepare: &'a dyn Fn(&Path),
    /// Built-in policies the confined side runs under.
    pub policies: &'a [&'a str],
    /// Workspace-relative directory the command starts in ("" = the root).
    pub cwd: &'a str,
    /// Bytes piped to the command's stdin (None: /dev/null).
    pub stdin: Option<&'a [u8]>,
    /// A second command in the same workspace after the first one ended (a separate
    /// `cordon exec`), for what only shows later: a repository broken by the first call.
    pub after: Option<&'a str>,
    /// A command the operator then runs on the host, unconfined, in the same workspace (after
    /// both sides): what the host sees of the work (the agent's commits in its `git log`).
    pub host_after: Option<&'a str>,
    /// A difference this build has on purpose, with why: the row then asserts that every
    /// policy still differs (the confined side fails, never silently), and says so; when it
    /// stops differing the row fails, so the marker goes with the difference.
    pub known_difference: Option<&'a str>,
    /// Variables set for both sides: the unconfined shell's, and `cordon exec`'s own (the
    /// server's, which cordon scrubs before a call; e.g. a HOME holding the toolchains it grants).
    pub env: &'a [(&'a str, &'a str)],
    /// Variables only the unconfined side gets, after `env`: what the operator's login shell
    /// has that cordon gives calls itself (USER, SHELL, a PATH with `~/.local/bin`).
    pub plain_env: &'a [(&'a str, &'a str)],
}

impl Default for Row<'_> {
    fn default() -> Self {
        Self {
            name: "",
            script: "",
            prepare: &|_| {},
            policies: &["default", "dev"],
            cwd: "",
            stdin: None,
            after: None,
            host_after: None,
            known_difference: None,
            env: &[],
            plain_env: &[],
        }
    }
}

fn workspace(row: &Row<'_>) -> tempfile::TempDir {
    let ws = tempfile::Builder::new()
        .prefix("cordon-compat-")
        .tempdir()
        .expect("workspace");
    (row.prepare)(ws.path());
    ws
}

fn run(mut cmd: Command, stdin: Option<&[u8]>) -> (Outcome, String) {
    use std::io::Write;
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    if let (Some(mut pipe), Some(input)) = (child.stdin.take(), stdin) {
        let input = input.to_vec();
        std::thread::spawn(move || pipe.write_all(&input));
    }
    let out = child.wait_with_output().expect("wait");
    (
        Outcome {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        },
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the row unconfined, then confined under each policy; panics naming every policy whose
/// result differs, with both sides' output.
pub fn check(row: Row<'_>) {
    let plain_ws = workspace(&row);
    let dir: PathBuf = plain_ws.path().join(row.cwd);
    let plain = |script: &str, stdin| {
        let mut cmd = Command::new("timeout");
        cmd.arg(TIMEOUT_SECS.to_string())
            .args(["bash", "-c", script])
            .current_dir(&dir)
            .envs(row.env.iter().copied())
            .envs(row.plain_env.iter().copied());
        run(cmd, stdin)
    };
    let (mut expected, plain_err) = plain(row.script, row.stdin);
    if let Some(after) = row.after {
        let (then, _) = plain(after, None);
        expected.stdout.push_str(&then.stdout);
        expected.code = expected.code.max(then.code);
    }
    if let Some(host) = row.host_after {
        let (then, _) = plain(host, None);
        expected.stdout.push_str(&then.stdout);
        expected.code = expected.code.max(then.code);
    }
    assert_eq!(
        expected.code,
        Some(0),
        "{}: the workload fails even unconfined (fix the row): {expected:?}\n{plain_err}",
        row.name
    );
    let mut failures = Vec::new();
    for policy in row.policies {
        let ws = workspace(&row);
        let confined = |script: &str, stdin| {
            let mut cmd = Command::new(cordon());
            cmd.args(["exec", "--workspace"])
                .arg(ws.path())
                .args(["--policy", policy, "--timeout"])
                .arg(TIMEOUT_SECS.to_string())
                .args(["--", "bash", "-c", script])
                .current_dir(ws.path().join(row.cwd))
                .envs(row.env.iter().copied());
            run(cmd, stdin)
        };
        let (mut got, mut err) = confined(row.script, row.stdin);
        if let Some(after) = row.after {
            let (then, then_err) = confined(after, None);
            got.stdout.push_str(&then.stdout);
            got.code = got.code.max(then.code);
            err.push_str(&then_err);
        }
        if let Some(host) = row.host_after {
            let mut cmd = Command::new("timeout");
            cmd.arg(TIMEOUT_SECS.to_string())
                .args(["bash", "-c", host])
                .current_dir(ws.path().join(row.cwd));
            let (then, then_err) = run(cmd, None);
            got.stdout.push_str(&then.stdout);
            got.code = got.code.max(then.code);
            err.push_str(&then_err);
        }
        if got != expected {
            failures.push(format!(
                "under `{policy}`: exit {:?}, stdout {:?}\n  stderr: {}\n  unconfined: exit {:?}, stdout {:?}",
                got.code,
                got.stdout,
                tail(&err, 15),
                expected.code,
                expected.stdout
            ));
        }
    }
    if let Some(why) = row.known_difference {
        assert_eq!(
            failures.len(),
            row.policies.len(),
            "compat row {} is marked as a known difference ({why}) but runs unchanged under \
             some policy now: remove the marker\n{}",
            row.name,
            failures.join("\n")
        );
        eprintln!(
            "KNOWN DIFFERENCE {}: {why}\n{}",
            row.name,
            failures.join("\n")
        );
        return;
    }
    assert!(
        failures.is_empty(),
        "compat row {} behaves differently confined:\n{}",
        row.name,
        failures.join("\n")
    );
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n  ")
}

/// Writes `files` (relative path, contents) beneath `root`.
pub fn write_files(root: &Path, files: &[(&str, &str)]) {
    for (rel, text) in files {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }
}

/// Runs a preparation command on the host; panics with its output when it fails.
pub fn host(dir: &Path, argv: &[&str]) {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(out.status.success(), "{argv:?}: {out:?}");
}

/// A directory kept between runs for downloads (the medium suite's sdist).
pub fn cache_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compat-cache");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
