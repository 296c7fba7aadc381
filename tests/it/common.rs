//! Helpers shared by the integration tests: run the real `cordon` binary with a hang guard,
//! find out which enforcement the machine gives (so a test can skip with a reason instead of
//! passing without confinement), write throwaway policies, and look for processes that
//! outlived their call.

#![allow(dead_code)] // each test binary uses a different subset

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const CORDON: &str = env!("CARGO_BIN_EXE_cordon");

/// No call in these tests should take anywhere near this long; past it the call is a hang
/// and the test fails instead of blocking the suite.
pub const HANG_GUARD: Duration = Duration::from_secs(120);

/// What one process run produced. Its `Debug` (used in assertion messages) shows at most a
/// few KiB of each stream, so an unconfined run that floods its output cannot flood the log.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("status", &self.status)
            .field("stdout", &Abbreviated(&self.stdout))
            .field("stderr", &Abbreviated(&self.stderr))
            .field("elapsed", &self.elapsed)
            .finish()
    }
}

struct Abbreviated<'a>(&'a str);

impl std::fmt::Debug for Abbreviated<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const KEEP: usize = 2048;
        let s = self.0;
        if s.len() <= 2 * KEEP {
            return write!(f, "{s:?}");
        }
        let head = (0..=KEEP)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        let tail = (s.len() - KEEP..s.len())
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(s.len());
        write!(
            f,
            "{:?} …[{} bytes]… {:?}",
            &s[..head],
            tail - head,
            &s[tail..]
        )
    }
}

impl Run {
    /// The status as a shell reports it (128 + signal when killed), which is also what
    /// `cordon exec` itself exits with.
    pub fn code(&self) -> i32 {
        match (self.status.code(), self.status.signal()) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => -1,
        }
    }

    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `cmd` to completion, draining both pipes, failing the test if it outlives `guard`.
pub fn run_guarded(mut cmd: Command, guard: Duration) -> Run {
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {cmd:?}: {e}"));
    let reader = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("piped")));
    let err = reader(Box::new(child.stderr.take().expect("piped")));
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > guard {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after {guard:?}: hang");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = started.elapsed();
    Run {
        status,
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
        elapsed,
    }
}

/// The same command line without cordon: the control that shows an action is possible at all,
/// so that its refusal under cordon is the confinement's doing.
pub fn unconfined(argv: &[&str]) -> Run {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]);
    run_guarded(cmd, HANG_GUARD)
}

/// What the machine enforces for `cordon exec` under the default policy.
#[derive(Debug, Clone)]
pub enum Level {
    /// Landlock, seccomp and cgroup limits.
    Full,
    /// Landlock and seccomp, but no cgroup limits (cordon prints `cordon: enforcement …`).
    Reduced(String),
    /// cordon refuses to run confined work here (no Landlock ABI 6 / no seccomp).
    Refused(String),
}

/// Asked once per process: `cordon exec -- true` either runs fully confined, says on stderr
/// which enforcement it has, or refuses.
pub fn level() -> &'static Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    LEVEL.get_or_init(|| {
        let ws = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new(CORDON);
        cmd.arg("exec")
            .arg("--workspace")
            .arg(ws.path())
            .args(["--", "true"]);
        let run = run_guarded(cmd, HANG_GUARD);
        let line = run
            .stderr
            .lines()
            .find(|l| l.starts_with("cordon: enforcement"))
            .map(str::to_owned);
        match (run.code(), line) {
            (0, None) => Level::Full,
            (0, Some(line)) => Level::Reduced(line),
            (2, _) if run.stderr.contains("refusing to run confined work") => {
                Level::Refused(run.stderr.trim().to_owned())
            }
            _ => panic!("unexpected result of `cordon exec -- true`: {run:?}"),
        }
    })
}

/// What a test needs from the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Landlock + seccomp (cordon runs confined work at all).
    LandlockSeccomp,
    /// Also cgroup limits (memory, pids, killing processes that left the process group).
    Cgroups,
    /// The sandbox init's namespaces (root, or unprivileged user namespaces).
    Namespaces,
}

/// True (after saying what is missing) when this machine cannot give the test what it needs;
/// the test then returns early instead of asserting on unconfined behaviour, and the harness
/// reports it as skipped.
pub fn skip(test: &str, need: Need) -> bool {
    let missing = match (level(), need) {
        (Level::Full, _) | (Level::Reduced(_), Need::LandlockSeccomp) => return false,
        (Level::Reduced(line), Need::Namespaces) if !line.contains("NO namespaces") => {
            return false;
        }
        (Level::Reduced(line), Need::Namespaces) => format!("no namespaces here ({line})"),
        (Level::Reduced(line), Need::Cgroups) => format!("no cgroup limits here ({line})"),
        (Level::Refused(why), _) => format!("cordon refuses to confine on this kernel: {why}"),
    };
    // CI runs as root on a kernel with everything: a missing prerequisite there is a failure,
    // never a silent pass.
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} cannot run in CI: {missing}");
    }
    eprintln!("SKIPPED {test}: {missing}");
    crate::runner::mark_skipped(&missing);
    true
}

/// Says the test (or the part of it named in `test`) cannot run here; the test then returns,
/// or goes on without that part. Either way the harness reports it as skipped.
pub fn skip_msg(test: &str, missing: &str) {
    eprintln!("SKIPPED {test}: {missing}");
    crate::runner::mark_skipped(missing);
}

/// A workspace and, beside it (outside the workspace), a directory for secrets, policies and
/// other things the confined command must not reach.
pub struct Sandbox {
    pub ws: tempfile::TempDir,
    pub outside: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        Self {
            ws: tempfile::Builder::new()
                .prefix("cordon-test-ws-")
                .tempdir()
                .expect("workspace tempdir"),
            outside: tempfile::Builder::new()
                .prefix("cordon-test-outside-")
                .tempdir()
                .expect("outside tempdir"),
        }
    }

    pub fn ws(&self) -> &Path {
        self.ws.path()
    }

    pub fn outside(&self) -> &Path {
        self.outside.path()
    }

    /// A `cordon exec` command over this workspace with `options` before `--`.
    pub fn command(&self, options: &[&str], argv: &[&str]) -> Command {
        let mut cmd = Command::new(CORDON);
        cmd.arg("exec")
            .arg("--workspace")
            .arg(self.ws())
            .args(options)
            .arg("--")
            .args(argv);
        cmd
    }

    /// Runs `cordon exec [options] -- argv` and checks the run really was confined: cordon
    /// neither refused nor fell back to degraded mode. A test built on this can therefore not
    /// pass because confinement was silently missing.
    pub fn exec(&self, options: &[&str], argv: &[&str]) -> Run {
        self.exec_cmd(self.command(options, argv))
    }

    pub fn exec_cmd(&self, cmd: Command) -> Run {
        let run = run_guarded(cmd, HANG_GUARD);
        assert_confined(&run);
        run
    }

    /// Writes a policy file outside the workspace and returns its path.
    pub fn policy(&self, name: &str, toml_text: &str) -> String {
        let path = self.outside().join(name);
        std::fs::write(&path, toml_text).expect("write policy");
        path.to_str().expect("utf-8 temp path").to_owned()
    }

    /// A policy like the default that also lets the command execute the cordon binary (for
    /// `cordon probe`). The default's `read_exec` list is copied from policies/default.toml
    /// because lists replace rather than append when a policy extends another.
    pub fn probe_policy(&self) -> String {
        let default = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/default.toml"),
        )
        .expect("read policies/default.toml");
        let default: toml::Table = toml::from_str(&default).expect("default.toml parses");
        let mut read_exec = default["filesystem"]["read_exec"]
            .as_array()
            .expect("default read_exec is a list")
            .clone();
        let bin_dir = Path::new(CORDON).parent().expect("binary has a directory");
        read_exec.push(toml::Value::String(
            bin_dir.to_str().expect("utf-8 target dir").to_owned(),
        ));
        let mut filesystem = toml::Table::new();
        filesystem.insert("read_exec".into(), toml::Value::Array(read_exec));
        let mut policy = toml::Table::new();
        policy.insert("extends".into(), "default".into());
        policy.insert("filesystem".into(), toml::Value::Table(filesystem));
        self.policy(
            "probe.toml",
            &toml::to_string(&policy).expect("serialize policy"),
        )
    }

    /// `cordon exec --policy <probe policy> -- cordon probe NAME [ARG]`.
    pub fn probe(&self, name: &str, arg: Option<&str>) -> Run {
        let policy = self.probe_policy();
        let mut argv = vec![CORDON, "probe", name];
        argv.extend(arg);
        self.exec(&["--policy", &policy], &argv)
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

/// Fails the test when a run was not actually confined.
pub fn assert_confined(run: &Run) {
    assert!(
        !run.stderr.contains("refusing to run confined work"),
        "cordon refused to confine (callers must check `skip` first): {run:?}"
    );
    assert!(
        !run.stderr.contains("cordon: enforcement degraded"),
        "cordon ran without Landlock or seccomp: {run:?}"
    );
}

/// Fails the test when cordon said it lacked cgroup limits for this run.
pub fn assert_full_enforcement(run: &Run) {
    assert!(
        !run.stderr.contains("cordon: enforcement"),
        "this run was not fully enforced: {run:?}"
    );
}

/// A token no other process on the machine has in its command line: used as a `sleep`
/// duration (`3600.<pid><n>`, a valid number) or inside a shell comment, so the survivor scan
/// finds exactly the processes this test started.
pub fn unique_token() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "3600.{}{:04}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Pids of live processes (other than this one) with an argument equal to `token` or, for
/// shell scripts, containing `marker(token)`.
pub fn processes_with(token: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    let marker = marker(token);
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        // Processes exit while we scan; a zombie's cmdline is empty.
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let hit = cmdline.split(|&b| b == 0).any(|arg| {
            let arg = String::from_utf8_lossy(arg);
            arg == token || arg.contains(&marker)
        });
        if hit {
            found.push(pid);
        }
    }
    found
}

/// The form of `token` to embed in a shell script so `processes_with` finds the script's
/// processes.
pub fn marker(token: &str) -> String {
    format!("cordon-test-marker-{token}-end")
}

/// Asserts no process carrying `token` is alive; kills any it finds first so a failing test
/// does not leave them behind.
pub fn assert_no_survivors(token: &str, what: &str) {
    let survivors = processes_with(token);
    for &pid in &survivors {
        // SAFETY: sending a signal to a pid we just found; no memory is involved.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(
        survivors.is_empty(),
        "{what}: processes outlived the call: {survivors:?}"
    );
}

pub fn exists(path: impl AsRef<Path>) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// World-readable files that a test policy denies, so that a read of them is refused by
/// Landlock and logged by the kernel. The default policy's own denials (`/etc/shadow`, …) are
/// no longer readable by a call's uid at all (calls are never host root): the kernel refuses
/// them by their file modes before Landlock is asked, and logs nothing.
pub const READABLE_DENIED: [&str; 2] = ["/etc/passwd", "/etc/group"];

/// A `[filesystem] deny` section: the default policy's list (lists replace rather than append
/// when a policy extends) plus [`READABLE_DENIED`].
pub fn deny_readable_section() -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/default.toml"),
    )
    .expect("read policies/default.toml");
    let table: toml::Table = toml::from_str(&text).expect("default.toml parses");
    let mut deny = table["filesystem"]["deny"]
        .as_array()
        .expect("default deny is a list")
        .clone();
    deny.extend(
        READABLE_DENIED
            .iter()
            .map(|p| toml::Value::String((*p).into())),
    );
    let mut filesystem = toml::Table::new();
    filesystem.insert("deny".into(), toml::Value::Array(deny));
    let mut section = toml::Table::new();
    section.insert("filesystem".into(), toml::Value::Table(filesystem));
    toml::to_string(&section).expect("serialize policy")
}
