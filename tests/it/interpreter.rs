//! `code_interpreter` end to end on the running kernel: notebook semantics, timeouts with and
//! without a cooperative interrupt, limits, escapes, isolation between sessions, hostile cell
//! output (links, FIFOs and devices where the output used to be read back), sessions that heal
//! (killed workers, eviction of the least recently used idle session, background processes),
//! reaping and shutdown. Every escape test attempts the real violation from inside a confined
//! worker.
//!
//! Needs Python 3 on the sandbox PATH (skipped with a message otherwise) and a kernel that
//! can enforce the default policy (Landlock ABI 6+, seccomp); the image test also needs
//! matplotlib importable by that Python.

use cordon::testing::exec::{CaptureSpec, Executor, LimitKind};
use cordon::testing::interpreter::{CellOutcome, CellRequest, InterpreterError, SessionManager};
use cordon::testing::policy::Policy;
use cordon::testing::runtime::{Runtime, RuntimeOptions, Session};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The sandbox PATH of the default policy.
const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One confinement for the whole test binary: cgroup parents are named after the process, so
/// a second `Confinement` in the same process would get none.
struct Shared {
    /// Kept alive for the whole run: the confinement grants it.
    _workspace: tempfile::TempDir,
    outside: tempfile::TempDir,
    executor: Arc<Executor>,
    runtime: Arc<Runtime>,
    policy: Policy,
}

fn shared() -> Option<&'static Shared> {
    static SHARED: OnceLock<Option<Shared>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            if !SANDBOX_PATH
                .split(':')
                .any(|d| Path::new(d).join("python3").exists())
            {
                let why = format!("python3 is not on the sandbox PATH ({SANDBOX_PATH})");
                eprintln!("SKIP: {why}");
                crate::runner::mark_skipped(&why);
                return None;
            }
            let mut policy = Policy::builtin_default();
            policy.interpreter.memory_bytes = 256 << 20;
            policy.interpreter.pids = 32;
            policy.interpreter.interrupt_grace = Duration::from_secs(1);
            let workspace = tempfile::tempdir().unwrap();
            let outside = tempfile::tempdir().unwrap();
            let root = workspace.path().canonicalize().unwrap();
            // The test binary cannot run the sandbox init itself: name the real cordon binary.
            let options = RuntimeOptions {
                workspace: root,
                init_program: Some(env!("CARGO_BIN_EXE_cordon").into()),
                ..RuntimeOptions::default()
            };
            let runtime = match Runtime::build(policy.clone(), options) {
                Ok(r) => Arc::new(r),
                Err(e) => {
                    let why = format!("this kernel cannot enforce the default policy: {e}");
                    eprintln!("SKIP: {why}");
                    crate::runner::mark_skipped(&why);
                    return None;
                }
            };
            let executor = Arc::clone(&runtime.executor);
            eprintln!(
                "enforcement: {}",
                executor.confinement().enforcement().summary()
            );
            Some(Shared {
                _workspace: workspace,
                outside,
                executor,
                runtime,
                policy,
            })
        })
        .as_ref()
}

macro_rules! setup {
    () => {
        match shared() {
            Some(s) => s,
            None => return,
        }
    };
}

fn manager(s: &Shared) -> Arc<SessionManager> {
    SessionManager::new(Arc::clone(&s.executor), &s.policy).unwrap()
}

fn manager_with(s: &Shared, tweak: impl FnOnce(&mut Policy)) -> Arc<SessionManager> {
    let mut policy = s.policy.clone();
    tweak(&mut policy);
    SessionManager::new(Arc::clone(&s.executor), &policy).unwrap()
}

fn spec() -> CaptureSpec {
    CaptureSpec {
        memory_cap: 1 << 20,
        spill: None,
        tee: None,
    }
}

fn cell(code: &str, timeout_secs: u64) -> CellRequest {
    CellRequest {
        code: code.to_owned(),
        reset: false,
        timeout: Duration::from_secs(timeout_secs),
        cancel: CancellationToken::new(),
        stdout: spec(),
        stderr: spec(),
    }
}

async fn run(m: &SessionManager, session: &str, code: &str) -> CellOutcome {
    m.run(session, cell(code, 20)).await.unwrap()
}

fn text(c: &cordon::testing::exec::Captured) -> String {
    String::from_utf8_lossy(&[c.head.as_slice(), c.tail.as_slice()].concat()).into_owned()
}

fn exc_type(o: &CellOutcome) -> Option<&str> {
    o.exception.as_ref().map(|e| e.type_name.as_str())
}

/// The outcome's exception message, for assertion messages.
fn show(o: &CellOutcome) -> String {
    format!(
        "result={:?} exc={:?} stdout={:?} stderr={:?} lost={:?} limit={:?} died={:?}",
        o.result,
        o.exception,
        text(&o.stdout),
        text(&o.stderr),
        o.state_lost,
        o.limit,
        o.worker_died
    )
}

/// Whether the process a cell knows as `pid` is alive (a zombie does not count).
fn alive(pid: u32) -> bool {
    host_pid(pid).is_some()
}

/// A slot's main process still waiting for its job (a warm call slot): the sandbox init's
/// program, forked, not yet exec'd. Every slot's is pid 2 of its own namespace, like a worker.
fn is_waiting_slot(host: u32) -> bool {
    std::fs::read(format!("/proc/{host}/cmdline"))
        .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == b"__sandbox-init"))
}

/// The pid in this (the host's) namespace of the live process a cell knows as `pid`. Cells
/// run in a PID namespace of their own, so their pids are that namespace's: the process
/// is found among this test process's descendants by the last entry of its `NSpid` line (the
/// same number as the pid itself where there are no namespaces).
fn host_pid(pid: u32) -> Option<u32> {
    let me = std::process::id();
    let dir = std::fs::read_dir("/proc").ok()?;
    let field = |status: &str, name: &str| -> Option<String> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    let descends_from_me = |mut host: u32| {
        for _ in 0..64 {
            if host == me {
                return true;
            }
            let Ok(status) = std::fs::read_to_string(format!("/proc/{host}/status")) else {
                return false;
            };
            match field(&status, "PPid:").and_then(|p| p.parse::<u32>().ok()) {
                Some(parent) if parent > 1 => host = parent,
                _ => return false,
            }
        }
        false
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|&host| {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{host}/status")) else {
                return false;
            };
            let inner = field(&status, "NSpid:").and_then(|v| {
                v.split_whitespace()
                    .last()
                    .and_then(|p| p.parse::<u32>().ok())
            });
            let zombie = field(&status, "State:").is_some_and(|s| s.starts_with('Z'));
            inner == Some(pid) && !zombie && !is_waiting_slot(host) && descends_from_me(host)
        })
}

#[cordon_test::test]
async fn variables_imports_and_functions_persist_across_calls() {
    let s = setup!();
    let m = manager(s);
    let first = run(
        &m,
        "p",
        "import math\nx = 41\ndef double(v):\n    return 2 * v",
    )
    .await;
    assert!(first.exception.is_none(), "{}", show(&first));
    assert!(first.fresh_start);
    let second = run(&m, "p", "double(x) + math.floor(0.5)").await;
    assert_eq!(second.result.as_deref(), Some("82"), "{}", show(&second));
    assert!(!second.fresh_start);
    m.shutdown().await;
}

#[cordon_test::test]
async fn last_expression_is_the_result_like_a_notebook() {
    let s = setup!();
    let m = manager(s);
    assert_eq!(run(&m, "r", "1+1").await.result.as_deref(), Some("2"));
    assert_eq!(
        run(&m, "r", "'a' + 'b'").await.result.as_deref(),
        Some("'ab'")
    );
    assert_eq!(run(&m, "r", "y = 3").await.result, None);
    assert_eq!(run(&m, "r", "None").await.result, None);
    // A trailing semicolon suppresses the value, as in Jupyter.
    assert_eq!(run(&m, "r", "y * 2;").await.result, None);
    // `_` holds the last value.
    assert_eq!(
        run(&m, "r", "[1, 2]\n").await.result.as_deref(),
        Some("[1, 2]")
    );
    assert_eq!(
        run(&m, "r", "_ + [3]").await.result.as_deref(),
        Some("[1, 2, 3]")
    );
    m.shutdown().await;
}

#[cordon_test::test]
async fn an_exception_comes_back_with_a_traceback_trimmed_to_the_cell() {
    let s = setup!();
    let m = manager(s);
    let o = run(&m, "e", "def f():\n    return 1 / 0\n\nf()").await;
    let e = o.exception.as_ref().expect("an exception");
    assert_eq!(e.type_name, "ZeroDivisionError");
    assert_eq!(e.message, "division by zero");
    assert!(e.traceback.contains("line 2, in f"), "{}", e.traceback);
    assert!(e.traceback.contains("return 1 / 0"), "{}", e.traceback);
    assert!(
        !e.traceback.contains("_run_cell") && !e.traceback.contains("<string>"),
        "driver frames leaked: {}",
        e.traceback
    );
    let syntax = run(&m, "e", "def broken(:\n    pass").await;
    assert_eq!(exc_type(&syntax), Some("SyntaxError"), "{}", show(&syntax));
    // SystemExit must not end the session.
    let exit = run(&m, "e", "x = 5\nraise SystemExit(3)").await;
    assert_eq!(exc_type(&exit), Some("SystemExit"), "{}", show(&exit));
    let after = run(&m, "e", "x").await;
    assert_eq!(after.result.as_deref(), Some("5"), "{}", show(&after));
    assert!(after.state_lost.is_none());
    m.shutdown().await;
}

#[cordon_test::test]
async fn stdout_and_stderr_are_captured_separately_per_cell() {
    let s = setup!();
    let m = manager(s);
    let o = run(
        &m,
        "io",
        "import os, sys, subprocess\nprint('to-out')\nprint('to-err', file=sys.stderr)\n\
         os.write(1, b'fd-one\\n')\nos.write(2, b'fd-two\\n')\n\
         subprocess.run(['sh', '-c', 'echo sub-out; echo sub-err >&2'])\n'done'",
    )
    .await;
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(out, "to-out\nfd-one\nsub-out\n", "{}", show(&o));
    assert_eq!(err, "to-err\nfd-two\nsub-err\n", "{}", show(&o));
    assert_eq!(o.result.as_deref(), Some("'done'"));
    // The next cell starts with empty streams.
    let next = run(&m, "io", "print('second')").await;
    assert_eq!(text(&next.stdout), "second\n");
    assert_eq!(text(&next.stderr), "");
    m.shutdown().await;
}

#[cordon_test::test]
async fn raw_writes_to_fd_1_cannot_forge_protocol_frames() {
    let s = setup!();
    let m = manager(s);
    // A well-formed frame header + JSON written to fd 1 must land in stdout, not the protocol.
    let forged = r#"import os
body = b'{"id": 1, "result": "forged", "images": []}'
os.write(1, len(body).to_bytes(4, 'big') + body)
'real'"#;
    let o = run(&m, "f", forged).await;
    assert_eq!(o.result.as_deref(), Some("'real'"), "{}", show(&o));
    assert!(text(&o.stdout).contains("forged"));
    let next = run(&m, "f", "2 * 21").await;
    assert_eq!(next.result.as_deref(), Some("42"), "{}", show(&next));
    m.shutdown().await;
}

#[cordon_test::test]
async fn a_timeout_interrupts_a_cooperative_cell_and_keeps_the_state() {
    let s = setup!();
    let m = manager(s);
    run(&m, "t", "kept = 'yes'").await;
    let started = Instant::now();
    let o = m.run("t", cell("while True:\n    pass", 1)).await.unwrap();
    assert!(o.timed_out, "{}", show(&o));
    assert_eq!(exc_type(&o), Some("KeyboardInterrupt"), "{}", show(&o));
    assert!(o.state_lost.is_none(), "{}", show(&o));
    assert!(started.elapsed() < Duration::from_secs(3));
    let after = run(&m, "t", "kept").await;
    assert_eq!(after.result.as_deref(), Some("'yes'"), "{}", show(&after));
    m.shutdown().await;
}

#[cordon_test::test]
async fn a_cell_that_swallows_keyboard_interrupt_is_killed_and_the_session_restarted() {
    let s = setup!();
    let m = manager(s);
    run(&m, "k", "kept = 1").await;
    // Each worker is pid 2 of its own PID namespace, so the process is told apart by its start
    // time (field 22 of /proc/self/stat), not its pid.
    let identity = "open('/proc/self/stat').read().rsplit(') ', 1)[1].split()[19]";
    let pid_before = run(&m, "k", identity).await.result;
    let stubborn = "while True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n        print('caught, going on')";
    let o = m.run("k", cell(stubborn, 1)).await.unwrap();
    assert!(o.timed_out, "{}", show(&o));
    let lost = o.state_lost.as_deref().unwrap_or_default();
    assert!(lost.contains("did not stop"), "{}", show(&o));
    assert!(text(&o.stdout).contains("caught, going on"), "{}", show(&o));
    let pid_after = run(&m, "k", identity).await.result;
    assert_ne!(pid_before, pid_after, "the worker was not replaced");
    let gone = run(&m, "k", "kept").await;
    assert_eq!(exc_type(&gone), Some("NameError"), "{}", show(&gone));
    m.shutdown().await;
}

#[cordon_test::test]
async fn a_cell_that_ignores_sigint_is_killed_and_the_session_restarted() {
    let s = setup!();
    let m = manager(s);
    run(&m, "i", "kept = 1").await;
    let code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass";
    let started = Instant::now();
    let o = m.run("i", cell(code, 1)).await.unwrap();
    assert!(o.timed_out, "{}", show(&o));
    assert!(o.state_lost.is_some(), "{}", show(&o));
    assert!(started.elapsed() < Duration::from_secs(5));
    let gone = run(&m, "i", "kept").await;
    assert_eq!(exc_type(&gone), Some("NameError"), "{}", show(&gone));
    // The restarted session takes interrupts again.
    let o = m.run("i", cell("while True:\n    pass", 1)).await.unwrap();
    assert_eq!(exc_type(&o), Some("KeyboardInterrupt"), "{}", show(&o));
    m.shutdown().await;
}

#[cordon_test::test]
async fn a_memory_balloon_ends_with_the_memory_limit_and_the_session_recovers() {
    let s = setup!();
    let m = manager(s);
    // 512 MiB of touched bytes against a 256 MiB session limit.
    let o = run(&m, "mem", "x = 1\nballoon = b'x' * (512 << 20)").await;
    let limit = o.limit.as_ref().map(|l| l.kind);
    assert_eq!(limit, Some(LimitKind::Memory), "{}", show(&o));
    assert!(o.state_lost.is_some(), "{}", show(&o));
    let after = run(&m, "mem", "1 + 1").await;
    assert_eq!(after.result.as_deref(), Some("2"), "{}", show(&after));
    m.shutdown().await;
}

#[cordon_test::test]
async fn a_fork_bomb_is_contained_by_the_session_pids_limit() {
    let s = setup!();
    let m = manager(s);
    let bomb =
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass";
    let started = Instant::now();
    let o = m.run("bomb", cell(bomb, 2)).await.unwrap();
    assert_eq!(
        o.limit.as_ref().map(|l| l.kind),
        Some(LimitKind::Pids),
        "{}",
        show(&o)
    );
    assert!(o.state_lost.is_some(), "{}", show(&o));
    assert!(started.elapsed() < Duration::from_secs(10));
    // Another session is unaffected and the bombed one works again.
    assert_eq!(run(&m, "other", "3 * 3").await.result.as_deref(), Some("9"));
    let after = run(&m, "bomb", "import os; len(os.listdir('/proc'))").await;
    assert!(after.exception.is_none(), "{}", show(&after));
    m.shutdown().await;
}

#[cordon_test::test]
async fn escapes_are_denied_secret_network_ptrace_and_writes_outside() {
    let s = setup!();
    let m = manager(s);
    let secret = s.outside.path().join("secret.txt");
    std::fs::write(&secret, "top secret").unwrap();
    let o = run(
        &m,
        "esc",
        &format!("open({:?}).read()", secret.to_str().unwrap()),
    )
    .await;
    // Refused by Landlock, or absent: the sandbox's view holds only what the policy grants.
    assert!(
        matches!(exc_type(&o), Some("PermissionError" | "FileNotFoundError")),
        "{}",
        show(&o)
    );
    let o = run(&m, "esc", "open('/etc/shadow').read()").await;
    assert_eq!(exc_type(&o), Some("PermissionError"), "{}", show(&o));

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let o = run(
        &m,
        "esc",
        &format!("import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)"),
    )
    .await;
    // Refused by Landlock where the host's network namespace is shared; in the sandbox's own
    // namespace nothing listens on that port (the host's loopback is not there).
    assert!(
        matches!(
            exc_type(&o),
            Some("PermissionError" | "ConnectionRefusedError")
        ),
        "{}",
        show(&o)
    );
    assert!(
        listener.accept().is_err(),
        "the sandbox reached a host listener"
    );
    let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver
        .set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let udp_port = receiver.local_addr().unwrap().port();
    let o = run(
        &m,
        "esc",
        &format!(
            "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'x', ('127.0.0.1', {udp_port}))"
        ),
    )
    .await;
    // Refused by seccomp where the host's namespace is shared; sent to the sandbox's own
    // loopback otherwise. Either way the host's receiver gets nothing.
    assert!(
        matches!(exc_type(&o), Some("PermissionError") | None),
        "{}",
        show(&o)
    );
    assert!(
        receiver.recv_from(&mut [0u8; 16]).is_err(),
        "a datagram from the sandbox reached the host"
    );

    // PTRACE_ATTACH (16) to the server itself, through ctypes.
    let o = run(
        &m,
        "esc",
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]\n\
         rc = libc.ptrace(16, os.getppid(), None, None)\n(rc, ctypes.get_errno())",
    )
    .await;
    assert_eq!(
        o.result.as_deref(),
        Some(format!("(-1, {})", libc::EPERM).as_str()),
        "{}",
        show(&o)
    );

    let target = s.outside.path().join("pwned");
    let o = run(
        &m,
        "esc",
        &format!("open({:?}, 'w').write('x')", target.to_str().unwrap()),
    )
    .await;
    assert!(
        matches!(exc_type(&o), Some("PermissionError" | "FileNotFoundError")),
        "{}",
        show(&o)
    );
    assert!(!target.exists());
    let o = run(&m, "esc", "open('/usr/pwned', 'w')").await;
    assert!(
        matches!(exc_type(&o), Some("PermissionError" | "OSError")),
        "{}",
        show(&o)
    );
    m.shutdown().await;
}

#[cordon_test::test]
async fn sessions_cannot_see_each_others_state_or_private_files() {
    let s = setup!();
    let m = manager(s);
    let a = run(
        &m,
        "iso-a",
        "import os\nsecret = 'a-only'\np = os.path.join(os.environ['TMPDIR'], 'a.txt')\n\
         open(p, 'w').write('private to a')\nopen('shared-iso.txt', 'w').write('from a')\n\
         (p, os.getpid())",
    )
    .await;
    assert!(a.exception.is_none(), "{}", show(&a));
    let (path, pid): (String, u32) = {
        let r = a.result.clone().unwrap();
        let inner = r.trim_start_matches('(').trim_end_matches(')');
        let (p, pid) = inner.rsplit_once(", ").unwrap();
        (p.trim_matches('\'').to_owned(), pid.parse().unwrap())
    };
    let b = run(&m, "iso-b", "secret").await;
    assert_eq!(exc_type(&b), Some("NameError"), "{}", show(&b));
    let b = run(&m, "iso-b", &format!("open({path:?}).read()")).await;
    // Refused (Landlock), or not even there (each session's mount namespace shows only its own
    // private directory): either way a's file is out of b's reach.
    assert!(
        matches!(exc_type(&b), Some("PermissionError" | "FileNotFoundError")),
        "{}",
        show(&b)
    );
    // a's process cannot even be named from b: b's PID namespace holds b's worker and its
    // reaper only (a's worker is pid {pid} of a namespace of its own).
    let b = run(
        &m,
        "iso-b",
        "import os\nsorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid())",
    )
    .await;
    assert_eq!(
        b.result.as_deref(),
        Some("[1]"),
        "a's pid {pid}: {}",
        show(&b)
    );
    // And the reaper's environment (it names the server's pid) is not readable either.
    let b = run(&m, "iso-b", "open('/proc/1/environ', 'rb').read()").await;
    assert_eq!(exc_type(&b), Some("PermissionError"), "{}", show(&b));
    // The workspace is shared on purpose.
    let b = run(&m, "iso-b", "open('shared-iso.txt').read()").await;
    assert_eq!(b.result.as_deref(), Some("'from a'"), "{}", show(&b));
    m.shutdown().await;
}

#[cordon_test::test]
async fn one_session_runs_one_cell_at_a_time_and_sessions_run_in_parallel() {
    let s = setup!();
    let m = manager(s);
    run(&m, "par-a", "import time").await;
    run(&m, "par-b", "import time").await;
    // Each cell reports when it ran (one clock for all processes), so the test reads overlap
    // from the cells themselves instead of from how long the whole thing took.
    let span = "s = time.time(); time.sleep(0.6); (s, time.time())";
    let interval = |o: &CellOutcome| -> (f64, f64) {
        let r = o.result.as_deref().unwrap_or_default();
        let nums: Vec<f64> = r
            .trim_matches(|c| c == '(' || c == ')')
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .collect();
        assert_eq!(nums.len(), 2, "unexpected result {r:?}");
        (nums[0], nums[1])
    };
    let (a, b) = tokio::join!(
        m.run("par-a", cell(span, 10)),
        m.run("par-b", cell(span, 10)),
    );
    let (a, b) = (interval(&a.unwrap()), interval(&b.unwrap()));
    assert!(
        a.0 < b.1 && b.0 < a.1,
        "cells of different sessions did not overlap: {a:?} {b:?}"
    );
    let (first, second) = tokio::join!(
        m.run("par-a", cell(span, 10)),
        m.run("par-a", cell(span, 10)),
    );
    let (x, y) = (interval(&first.unwrap()), interval(&second.unwrap()));
    assert!(
        x.1 <= y.0 || y.1 <= x.0,
        "two cells of one session overlapped: {x:?} {y:?}"
    );
    m.shutdown().await;
}

#[cordon_test::test]
async fn reset_starts_the_session_fresh() {
    let s = setup!();
    let m = manager(s);
    run(&m, "reset", "x = 1").await;
    let mut req = cell("x", 10);
    req.reset = true;
    let o = m.run("reset", req).await.unwrap();
    assert!(o.fresh_start);
    assert_eq!(exc_type(&o), Some("NameError"), "{}", show(&o));
    m.shutdown().await;
}

#[cordon_test::test]
async fn an_abandoned_call_does_not_leave_replies_out_of_step() {
    let s = setup!();
    let m = manager(s);
    run(&m, "ab", "import time").await;
    // The caller gives up mid-cell (its future is dropped, as on a client disconnect).
    let dropped = tokio::time::timeout(
        Duration::from_millis(300),
        m.run("ab", cell("time.sleep(2); 'late'", 10)),
    )
    .await;
    assert!(dropped.is_err());
    let o = run(&m, "ab", "'now'").await;
    assert_eq!(o.result.as_deref(), Some("'now'"), "{}", show(&o));
    assert!(o.state_lost.is_some(), "{}", show(&o));
    m.shutdown().await;
}

#[cordon_test::test]
async fn idle_sessions_are_reaped_and_their_workers_killed() {
    let s = setup!();
    let m = manager_with(s, |p| p.interpreter.idle_timeout = Duration::from_secs(1));
    let pid: u32 = run(&m, "idle", "import os; os.getpid()")
        .await
        .result
        .unwrap()
        .parse()
        .unwrap();
    assert!(alive(pid));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !m.sessions().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(m.sessions().is_empty(), "not reaped: {:?}", m.sessions());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!alive(pid), "worker {pid} outlived its session");
    m.shutdown().await;
}

#[cordon_test::test]
async fn shutdown_kills_every_worker_and_refuses_new_calls() {
    let s = setup!();
    // Background children are kept past their cell here, so shutdown has them to kill.
    let m = manager_with(s, |p| p.interpreter.keep_background = true);
    let mut pids = Vec::new();
    for name in ["down-a", "down-b"] {
        // A background child too: the whole tree must go.
        let o = run(
            &m,
            name,
            "import os, subprocess\np = subprocess.Popen(['sleep', '60'])\n(os.getpid(), p.pid)",
        )
        .await;
        let r = o.result.unwrap();
        for part in r.trim_matches(|c| c == '(' || c == ')').split(", ") {
            pids.push(part.parse::<u32>().unwrap());
        }
    }
    // A cell still running at shutdown is ended too.
    let m2 = Arc::clone(&m);
    let running = tokio::spawn(async move { m2.run("down-a", cell("while True: pass", 60)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    m.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(
        running.await.unwrap(),
        Err(InterpreterError::ShuttingDown)
    ));
    for pid in &pids {
        assert!(!alive(*pid), "process {pid} survived shutdown");
    }
    assert!(matches!(
        m.run("down-a", cell("1", 5)).await,
        Err(InterpreterError::ShuttingDown)
    ));
}

#[cordon_test::test]
async fn sessions_all_running_a_cell_refuse_a_new_one_with_the_live_names() {
    let s = setup!();
    let m = manager_with(s, |p| p.interpreter.max_sessions = 2);
    run(&m, "one", "import time").await;
    run(&m, "two", "import time").await;
    let busy: Vec<_> = ["one", "two"]
        .into_iter()
        .map(|name| {
            let m = Arc::clone(&m);
            tokio::spawn(async move { m.run(name, cell("time.sleep(1.5)", 10)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let err = m.run("three", cell("3", 5)).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, InterpreterError::TooManySessions { .. }));
    assert!(msg.contains("one, two"), "{msg}");
    for b in busy {
        assert!(b.await.unwrap().unwrap().exception.is_none());
    }
    // Once they are idle again, a new session gets a slot.
    let o = run(&m, "three", "3").await;
    assert_eq!(o.result.as_deref(), Some("3"), "{}", show(&o));
    m.shutdown().await;
}

#[cordon_test::test]
async fn a_missing_python_is_reported_as_not_found() {
    let s = setup!();
    let m = manager_with(s, |p| p.interpreter.python = "/nonexistent/python3".into());
    let err = m.run("np", cell("1", 5)).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    m.shutdown().await;
}

#[cordon_test::test]
async fn the_interpreter_exiting_is_reported_and_the_session_restarts() {
    let s = setup!();
    let m = manager(s);
    run(&m, "die", "x = 1").await;
    let o = run(&m, "die", "import os\nos._exit(7)").await;
    assert!(
        o.worker_died
            .as_deref()
            .unwrap_or_default()
            .contains("status 7"),
        "{}",
        show(&o)
    );
    assert!(o.state_lost.is_some());
    let after = run(&m, "die", "x").await;
    assert_eq!(exc_type(&after), Some("NameError"), "{}", show(&after));
    m.shutdown().await;
}

/// The sandbox's own Python must be able to import matplotlib for figures; skipped otherwise.
#[cordon_test::test]
async fn figures_come_back_as_png_images_and_are_closed() {
    let s = setup!();
    let m = manager(s);
    let probe = run(&m, "img", "import matplotlib").await;
    if let Some(e) = probe.exception {
        missing_in_ci(&format!(
            "matplotlib is not importable by the sandbox's python3 ({}); install it for the \
             python3 first on the sandbox PATH (a granted toolchain's, e.g. `python3 -m pip \
             install matplotlib`, or Debian's: `apt-get install -y python3-matplotlib`)",
            e.message
        ));
        return;
    }
    let o = run(
        &m,
        "img",
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.figure()\nplt.bar([1], [2])\nplt.show()",
    )
    .await;
    assert!(o.exception.is_none(), "{}", show(&o));
    assert_eq!(o.images.len(), 2, "{}", show(&o));
    for png in &o.images {
        assert!(png.starts_with("iVBORw0KGgo"), "not a PNG: {}", &png[..16]);
    }
    assert!(!text(&o.stderr).contains("non-GUI"), "{}", show(&o));
    let backend = run(&m, "img", "import matplotlib; matplotlib.get_backend()").await;
    assert_eq!(
        backend.result.as_deref().map(str::to_lowercase).as_deref(),
        Some("'agg'")
    );
    // The figures were closed: the next cell has none.
    let next = run(&m, "img", "len(plt.get_fignums())").await;
    assert_eq!(next.result.as_deref(), Some("0"));
    assert!(next.images.is_empty());
    m.shutdown().await;
}

// --- Through the tool: the SPEC result shape ---------------------------------------------

fn tool_ctx(s: &Shared) -> cordon::testing::tools::SharedContext {
    tool_ctx_with(s, s.policy.clone())
}

fn tool_ctx_with(s: &Shared, policy: Policy) -> cordon::testing::tools::SharedContext {
    // The shared runtime (one confinement per test process), with this policy's interpreter
    // settings; the parser worker is started only if a call needs it (these only run cells).
    Arc::new(Session::with_interpreter(
        Arc::clone(&s.runtime),
        SessionManager::new(Arc::clone(&s.executor), &policy).unwrap(),
    ))
}

async fn call(
    ctx: &cordon::testing::tools::SharedContext,
    args: serde_json::Value,
) -> (bool, serde_json::Value, Vec<rmcp::model::ContentBlock>) {
    let args = serde_json::from_value(args).unwrap();
    let r = cordon::testing::tools::code_interpreter::run(
        Arc::clone(ctx),
        args,
        CancellationToken::new(),
    )
    .await
    .into_result();
    (
        r.is_error == Some(true),
        r.structured_content.unwrap(),
        r.content,
    )
}

#[cordon_test::test]
async fn the_tool_result_carries_the_spec_fields() {
    let s = setup!();
    let ctx = tool_ctx(s);
    let (is_error, out, content) = call(
        &ctx,
        serde_json::json!({"code": "print('hi')\n6 * 7", "session": "tool"}),
    )
    .await;
    assert!(!is_error, "{out}");
    for field in [
        "session",
        "stdout",
        "stderr",
        "result",
        "error",
        "images",
        "timed_out",
        "truncated",
        "duration_ms",
        "background_killed",
        "evicted_session",
    ] {
        assert!(out.get(field).is_some(), "missing {field}: {out}");
    }
    assert_eq!(out["session"], "tool");
    assert_eq!(out["stdout"], "hi\n");
    assert_eq!(out["result"], "42");
    assert!(out["error"].is_null());
    assert_eq!(out["images"], 0);
    assert!(content[0].as_text().unwrap().text.contains("42"));
    ctx.interpreter.shutdown().await;
}

#[cordon_test::test]
async fn an_exception_is_an_error_result_with_both_error_shapes() {
    let s = setup!();
    let ctx = tool_ctx(s);
    let (is_error, out, _) = call(&ctx, serde_json::json!({"code": "{}['missing']"})).await;
    assert!(is_error);
    let e = &out["error"];
    assert_eq!(e["type"], "KeyError");
    assert_eq!(e["message"], "'missing'");
    assert!(e["traceback"].as_str().unwrap().contains("KeyError"), "{e}");
    assert_eq!(e["kind"], "exception");
    assert_eq!(e["retriable"], false);
    ctx.interpreter.shutdown().await;
}

#[cordon_test::test]
async fn bad_arguments_are_invalid_argument_results() {
    let s = setup!();
    let ctx = tool_ctx(s);
    for args in [
        serde_json::json!({"code": "1", "session": "../etc"}),
        serde_json::json!({"code": "1", "session": "x".repeat(65)}),
        serde_json::json!({"code": "1", "timeout_secs": 0}),
        serde_json::json!({"code": "1", "timeout_secs": 100_000}),
    ] {
        let (is_error, out, _) = call(&ctx, args.clone()).await;
        assert!(is_error, "{args}");
        assert_eq!(out["error"]["kind"], "invalid_argument", "{args}: {out}");
    }
    assert!(ctx.interpreter.sessions().is_empty());
    ctx.interpreter.shutdown().await;
}

#[cordon_test::test]
async fn timeouts_and_limits_map_to_their_kinds() {
    let s = setup!();
    let ctx = tool_ctx(s);
    let (is_error, out, _) = call(
        &ctx,
        serde_json::json!({"code": "while True: pass", "timeout_secs": 1, "session": "k"}),
    )
    .await;
    assert!(is_error);
    assert_eq!(out["timed_out"], true);
    assert_eq!(out["error"]["kind"], "timeout", "{out}");
    assert_eq!(out["error"]["type"], "KeyboardInterrupt", "{out}");
    assert_eq!(out["state_lost"], false, "{out}");
    let (is_error, out, _) = call(
        &ctx,
        serde_json::json!({"code": "b = b'x' * (512 << 20)", "session": "k"}),
    )
    .await;
    assert!(is_error);
    assert_eq!(out["error"]["kind"], "resource_limit", "{out}");
    assert_eq!(out["limit"]["kind"], "memory", "{out}");
    assert_eq!(out["state_lost"], true, "{out}");
    ctx.interpreter.shutdown().await;
}

#[cordon_test::test]
async fn long_output_is_cut_to_head_and_tail_with_a_spill_file() {
    let s = setup!();
    let ctx = tool_ctx(s);
    let (_, out, _) = call(
        &ctx,
        serde_json::json!({"code": "for i in range(1000): print('line', i)", "session": "long"}),
    )
    .await;
    assert_eq!(out["truncated"], true, "{out}");
    let stdout = out["stdout"].as_str().unwrap();
    assert!(
        stdout.starts_with("line 0\n") && stdout.ends_with("line 999\n"),
        "{stdout}"
    );
    assert!(stdout.contains("900 lines"), "{stdout}");
    let spill = out["full_output"].as_str().expect("a spill file");
    let full = std::fs::read_to_string(s._workspace.path().join(spill)).unwrap();
    assert_eq!(full.lines().count(), 1000);
    ctx.interpreter.shutdown().await;
}

#[cordon_test::test]
async fn figures_are_image_content_blocks() {
    let s = setup!();
    let ctx = tool_ctx(s);
    let (_, probe, _) = call(
        &ctx,
        serde_json::json!({"code": "import matplotlib", "session": "fig"}),
    )
    .await;
    if !probe["error"].is_null() {
        missing_in_ci("matplotlib is not importable by the sandbox's python3");
        return;
    }
    let (is_error, out, content) = call(&ctx, serde_json::json!({"code": "import matplotlib.pyplot as plt\nplt.plot([3, 1, 2]);", "session": "fig"})).await;
    assert!(!is_error, "{out}");
    assert_eq!(out["images"], 1);
    let images: Vec<_> = content.iter().filter_map(|c| c.as_image()).collect();
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].mime_type, "image/png");
    ctx.interpreter.shutdown().await;
}

// --- Hostile cell output: the server reads only descriptors it opened itself -------------

/// Longest any of the hostile-output calls below may take; past it the call hung.
const HANG: Duration = Duration::from_secs(30);

/// A cell that swaps every path its output could be read back from (the targets of its own fd
/// 1 and 2, and the `io/stdout`, `io/stderr` files next to its HOME) for `make(path)`, then
/// prints one line.
fn swap_capture_paths(make: &str) -> String {
    format!(
        r#"import os
def make(p):
{make}
for fd in (1, 2):
    try:
        p = os.readlink('/proc/self/fd/%d' % fd)
        os.unlink(p)
        make(p)
    except OSError:
        pass
io = os.path.join(os.path.dirname(os.environ['HOME']), 'io')
os.makedirs(io, exist_ok=True)
for name in ('stdout', 'stderr'):
    p = os.path.join(io, name)
    try:
        os.unlink(p)
    except OSError:
        pass
    make(p)
print('x')
"#
    )
}

async fn run_bounded(m: &SessionManager, session: &str, code: &str) -> CellOutcome {
    match tokio::time::timeout(HANG, m.run(session, cell(code, 20))).await {
        Ok(o) => o.unwrap(),
        Err(_) => panic!("the call hung on hostile cell output"),
    }
}

#[cordon_test::test]
async fn capture_link_to_secret_is_not_read() {
    let s = setup!();
    let m = manager(s);
    // Another session's private file: the old layout put sessions side by side.
    let victim = run(
        &m,
        "victim",
        "import os\np = os.path.join(os.environ['HOME'], 'private.txt')\n\
         open(p, 'w').write('VICTIM-PRIVATE')\np",
    )
    .await;
    let victim_file = victim.result.clone().unwrap().trim_matches('\'').to_owned();
    let secret = s.outside.path().join("capture-secret.txt");
    std::fs::write(&secret, "OUTSIDE-SECRET").unwrap();
    let mut targets = vec![
        (
            secret.to_str().unwrap().to_owned(),
            "OUTSIDE-SECRET".to_owned(),
        ),
        (victim_file, "VICTIM-PRIVATE".to_owned()),
        // The server's own environment, as the server would read it.
        (
            "/proc/self/environ".to_owned(),
            "CARGO_MANIFEST_DIR=".to_owned(),
        ),
    ];
    if let Ok(shadow) = std::fs::read_to_string("/etc/shadow")
        && let Some(line) = shadow.lines().next()
    {
        targets.push(("/etc/shadow".into(), line.to_owned()));
    }
    for (target, marker) in targets {
        let o = run_bounded(
            &m,
            "attacker",
            &swap_capture_paths(&format!("    os.symlink({target:?}, p)")),
        )
        .await;
        assert!(
            !show(&o).contains(&marker),
            "cell output read through a link to {target}: {}",
            show(&o)
        );
        assert_eq!(text(&o.stdout), "x\n", "{}", show(&o));
        assert!(o.exception.is_none(), "{}", show(&o));
    }
    m.shutdown().await;
}

#[cordon_test::test]
async fn capture_fifo_does_not_hang() {
    let s = setup!();
    let m = manager(s);
    let o = run_bounded(&m, "fifo", &swap_capture_paths("    os.mkfifo(p)")).await;
    assert_eq!(text(&o.stdout), "x\n", "{}", show(&o));
    // The session keeps working, and shutdown does not hang either.
    let next = run_bounded(&m, "fifo", "6 * 7").await;
    assert_eq!(next.result.as_deref(), Some("42"), "{}", show(&next));
    tokio::time::timeout(HANG, m.shutdown())
        .await
        .expect("shutdown hung");
}

#[cordon_test::test]
async fn capture_link_to_dev_zero_is_bounded() {
    let s = setup!();
    let ctx = tool_ctx(s);
    let code = swap_capture_paths("    os.symlink('/dev/zero', p)");
    let (_, out, _) = tokio::time::timeout(
        HANG,
        call(&ctx, serde_json::json!({"code": code, "session": "zero"})),
    )
    .await
    .expect("the call hung reading a device");
    assert_eq!(out["stdout"], "x\n", "{out}");
    assert!(out["full_output"].is_null(), "{out}");
    let outputs = s._workspace.path().join(".cordon/outputs");
    for entry in std::fs::read_dir(outputs).into_iter().flatten().flatten() {
        let len = entry.metadata().unwrap().len();
        assert!(len < 1 << 20, "{:?} is {len} bytes", entry.path());
    }
    ctx.interpreter.shutdown().await;
}

#[cordon_test::test]
async fn a_cell_replacing_its_own_stdout_cannot_redirect_what_the_server_reads() {
    let s = setup!();
    let m = manager(s);
    let secret = s.outside.path().join("dup2-secret.txt");
    std::fs::write(&secret, "DUP2-SECRET").unwrap();
    // The cell points fd 1 at a FIFO of its own and writes there; the server must neither
    // block on it nor follow it.
    let o = run_bounded(
        &m,
        "dup2",
        "import os\nprint('before', flush=True)\np = os.path.join(os.environ['HOME'], 'f')\n\
         os.mkfifo(p)\nfd = os.open(p, os.O_RDWR)\nos.dup2(fd, 1)\nos.write(1, b'into fifo')\n'done'",
    )
    .await;
    assert_eq!(text(&o.stdout), "before\n", "{}", show(&o));
    assert_eq!(o.result.as_deref(), Some("'done'"), "{}", show(&o));
    m.shutdown().await;
}

// --- Sessions that heal --------------------------------------------------------------------

/// A cell expression naming its process uniquely across sessions: each session's worker is
/// pid 2 of its own PID namespace, so the pid is paired with the start time (clock ticks since
/// boot, field 22 of /proc/self/stat, the same number the host sees).
const WORKER_IDENTITY: &str =
    "import os\n(os.getpid(), int(open('/proc/self/stat').read().rsplit(') ', 1)[1].split()[19]))";

fn identity_of(o: &CellOutcome) -> (u32, u64) {
    let r = o
        .result
        .as_deref()
        .unwrap_or_else(|| panic!("no identity: {}", show(o)));
    let (pid, start) = r
        .trim_matches(['(', ')'])
        .split_once(", ")
        .unwrap_or_else(|| panic!("no identity: {}", show(o)));
    (pid.parse().unwrap(), start.parse().unwrap())
}

/// Whether the process a cell identified with [`WORKER_IDENTITY`] is still alive.
fn alive_identity(identity: (u32, u64)) -> bool {
    host_of_identity(identity).is_some()
}

/// The host pid of the live process a cell identified with [`WORKER_IDENTITY`].
fn host_of_identity((pid, start): (u32, u64)) -> Option<u32> {
    let me = std::process::id();
    let dir = std::fs::read_dir("/proc").ok()?;
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&host| host != me)
        .find(|&host| {
            let stat = std::fs::read_to_string(format!("/proc/{host}/stat")).unwrap_or_default();
            let fields: Vec<&str> = stat
                .rsplit_once(") ")
                .map(|(_, rest)| rest.split(' ').collect())
                .unwrap_or_default();
            let started = fields.get(19).and_then(|f| f.parse::<u64>().ok());
            let zombie = fields.first() == Some(&"Z");
            let inner = std::fs::read_to_string(format!("/proc/{host}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("NSpid:"))
                        .and_then(|v| v.split_whitespace().last()?.parse::<u32>().ok())
                });
            started == Some(start) && !zombie && inner == Some(pid) && !is_waiting_slot(host)
        })
}

fn kill9_identity(identity: (u32, u64)) {
    let host = host_of_identity(identity)
        .unwrap_or_else(|| panic!("no live process {identity:?} of this test"));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(host as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
}

fn pid_of(o: &CellOutcome) -> u32 {
    o.result
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no pid: {}", show(o)))
}

fn kill9(pid: u32) {
    let host = host_pid(pid).unwrap_or_else(|| panic!("no live process {pid} of this test"));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(host as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cordon_test::test]
async fn killed_worker_frees_slot_and_next_call_runs() {
    let s = setup!();
    let m = manager_with(s, |p| p.interpreter.max_sessions = 2);
    run(&m, "ka", "x = 1").await;
    let a = identity_of(&run(&m, "ka", WORKER_IDENTITY).await);
    let b = identity_of(&run(&m, "kb", WORKER_IDENTITY).await);
    // Killed from outside, as the OOM killer or an operator would.
    kill9_identity(a);
    kill9_identity(b);
    wait_until("both dead sessions left the list", || {
        m.sessions().is_empty()
    })
    .await;
    // Their slots are free: a new session takes one without ending anyone.
    let c = run(&m, "kc", "1").await;
    assert_eq!(c.evicted, None, "{}", show(&c));
    // The killed session's next call runs its code in a fresh interpreter and says so.
    let again = run(&m, "ka", "2 + 2").await;
    assert_eq!(again.result.as_deref(), Some("4"), "{}", show(&again));
    assert!(
        again.exception.is_none() && again.worker_died.is_none(),
        "{}",
        show(&again)
    );
    let lost = again.state_lost.as_deref().unwrap_or_default();
    assert!(
        lost.contains("SIGKILL") && lost.contains("between calls"),
        "{}",
        show(&again)
    );
    let gone = run(&m, "ka", "x").await;
    assert_eq!(exc_type(&gone), Some("NameError"), "{}", show(&gone));
    assert!(gone.state_lost.is_none(), "{}", show(&gone));
    m.shutdown().await;
}

#[cordon_test::test]
async fn a_call_right_after_the_kill_runs_its_code_instead_of_reporting_a_death() {
    let s = setup!();
    let m = manager(s);
    let pid = pid_of(&run(&m, "quick", "import os\nos.getpid()").await);
    kill9(pid);
    wait_until("the worker is dead", || !alive(pid)).await;
    // No wait for the manager to notice: the call itself must find the dead worker.
    let o = run(&m, "quick", "'ran'").await;
    assert_eq!(o.result.as_deref(), Some("'ran'"), "{}", show(&o));
    assert!(
        o.worker_died.is_none() && o.exception.is_none(),
        "{}",
        show(&o)
    );
    assert!(o.state_lost.is_some() && o.fresh_start, "{}", show(&o));
    m.shutdown().await;
}

#[cordon_test::test]
async fn lru_idle_session_is_evicted() {
    let s = setup!();
    let m = manager_with(s, |p| p.interpreter.max_sessions = 2);
    let one = identity_of(&run(&m, "l1", WORKER_IDENTITY).await);
    run(&m, "l2", "v = 'two'").await;
    let two = identity_of(&run(&m, "l2", WORKER_IDENTITY).await);
    // l1 is used again, so l2 is now the least recently used.
    run(&m, "l1", "1").await;
    let three = run(&m, "l3", "3").await;
    assert_eq!(three.result.as_deref(), Some("3"), "{}", show(&three));
    assert_eq!(three.evicted.as_deref(), Some("l2"), "{}", show(&three));
    assert_eq!(m.sessions(), ["l1", "l3"]);
    wait_until("the evicted worker is dead", || !alive_identity(two)).await;
    assert!(alive_identity(one));
    // The evicted session comes back fresh, says why, and itself evicts the LRU (l1).
    let back = run(&m, "l2", "'back'").await;
    assert_eq!(back.result.as_deref(), Some("'back'"), "{}", show(&back));
    let lost = back.state_lost.as_deref().unwrap_or_default();
    assert!(
        lost.contains("make room for session \"l3\""),
        "{}",
        show(&back)
    );
    assert_eq!(back.evicted.as_deref(), Some("l1"), "{}", show(&back));
    let v = run(&m, "l2", "v").await;
    assert_eq!(exc_type(&v), Some("NameError"), "{}", show(&v));
    m.shutdown().await;
}

#[cordon_test::test]
async fn a_session_running_a_cell_is_never_evicted() {
    let s = setup!();
    let m = manager_with(s, |p| p.interpreter.max_sessions = 2);
    run(&m, "busy", "import time").await;
    run(&m, "idle", "1").await;
    let m2 = Arc::clone(&m);
    // `busy` is the least recently used, but it is running a cell.
    let running =
        tokio::spawn(async move { m2.run("busy", cell("time.sleep(1); 'slept'", 10)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let o = run(&m, "new", "1").await;
    assert_eq!(o.evicted.as_deref(), Some("idle"), "{}", show(&o));
    let busy = running.await.unwrap().unwrap();
    assert_eq!(busy.result.as_deref(), Some("'slept'"), "{}", show(&busy));
    assert!(busy.state_lost.is_none(), "{}", show(&busy));
    m.shutdown().await;
}

#[cordon_test::test]
async fn cell_background_child_is_killed() {
    let s = setup!();
    let m = manager(s);
    let o = run(
        &m,
        "bg",
        "import os, subprocess\np = subprocess.Popen(['sleep', '60'])\n\
         d = subprocess.run(['sh', '-c', 'setsid sleep 60 >/dev/null 2>&1 & echo $!'], \
         capture_output=True, text=True).stdout.strip()\n(p.pid, int(d))",
    )
    .await;
    let r = o.result.clone().unwrap_or_default();
    let pids: Vec<u32> = r
        .trim_matches(|c| c == '(' || c == ')')
        .split(", ")
        .filter_map(|p| p.parse().ok())
        .collect();
    assert_eq!(pids.len(), 2, "{}", show(&o));
    let with_cgroup = !matches!(
        s.executor.confinement().enforcement().cgroups,
        cordon::testing::confine::CgroupMode::None
    );
    // The child it kept a handle on, and (where a cgroup tracks it) a setsid daemon.
    let expected = if with_cgroup { 2 } else { 1 };
    assert_eq!(o.background_killed, expected, "{}", show(&o));
    assert!(!alive(pids[0]), "the background child outlived its cell");
    if with_cgroup {
        assert!(!alive(pids[1]), "the setsid daemon outlived its cell");
    }
    // The session is intact, and sees its child killed.
    let poll = run(&m, "bg", "p.poll()").await;
    assert_eq!(poll.result.as_deref(), Some("-9"), "{}", show(&poll));
    assert!(poll.state_lost.is_none(), "{}", show(&poll));
    let quiet = run(&m, "bg", "1").await;
    assert_eq!(quiet.background_killed, 0, "{}", show(&quiet));
    m.shutdown().await;
}

#[cordon_test::test]
async fn cell_background_child_is_kept_when_the_policy_says_so() {
    let s = setup!();
    let m = manager_with(s, |p| p.interpreter.keep_background = true);
    let o = run(
        &m,
        "keep",
        "import subprocess\np = subprocess.Popen(['sleep', '60'])\np.pid",
    )
    .await;
    assert_eq!(o.background_killed, 0, "{}", show(&o));
    let child = pid_of(&o);
    let poll = run(&m, "keep", "p.poll()").await;
    assert_eq!(poll.result, None, "still running: {}", show(&poll));
    assert!(alive(child));
    m.shutdown().await;
    assert!(!alive(child), "the kept child outlived its session");
}

#[cordon_test::test]
async fn driver_not_in_argv() {
    let s = setup!();
    let m = manager(s);
    let pid = pid_of(&run(&m, "argv", "import os\nos.getpid()").await);
    let host = host_pid(pid).expect("the worker is alive");
    let cmdline = std::fs::read(format!("/proc/{host}/cmdline")).unwrap();
    let shown = String::from_utf8_lossy(&cmdline);
    assert!(
        cmdline.len() < 400,
        "{} bytes of argv: {shown}",
        cmdline.len()
    );
    assert!(!shown.contains("_run_cell"), "{shown}");
    m.shutdown().await;
}

#[cordon_test::test]
async fn another_sessions_output_files_are_out_of_reach() {
    let s = setup!();
    let m = manager(s);
    let a = run(&m, "out-a", "print('A-OUTPUT')").await;
    assert!(a.exception.is_none(), "{}", show(&a));
    // Session b tries every process it can name except itself and its PID 1: each session
    // lives in a PID namespace of its own, so there is none of a's to find, and any write
    // that went through would show in a's next output.
    let o = run(
        &m,
        "out-b",
        "import os\nothers = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in \
         (1, os.getpid())]\nfor p in others:\n    for fd in (1, 2):\n        try:\n            \
         open(f'/proc/{p}/fd/{fd}', 'a').write('INJECTED')\n        except OSError:\n            \
         pass\nothers",
    )
    .await;
    assert_eq!(o.result.as_deref(), Some("[]"), "{}", show(&o));
    let a = run(&m, "out-a", "print('again')").await;
    assert_eq!(text(&a.stdout), "again\n", "{}", show(&a));
    m.shutdown().await;
}

#[cordon_test::test]
async fn the_tool_result_counts_killed_background_processes_and_names_an_evicted_session() {
    let s = setup!();
    let mut policy = s.policy.clone();
    policy.interpreter.max_sessions = 1;
    let ctx = tool_ctx_with(s, policy);
    let (is_error, out, content) = call(
        &ctx,
        serde_json::json!({"code": "import subprocess\nsubprocess.Popen(['sleep', '60']);", "session": "t1"}),
    )
    .await;
    assert!(!is_error, "{out}");
    assert_eq!(out["background_killed"], 1, "{out}");
    assert!(out["evicted_session"].is_null(), "{out}");
    let text = content[0].as_text().unwrap().text.clone();
    assert!(text.contains("killed 1 process"), "{text}");
    let (is_error, out, content) =
        call(&ctx, serde_json::json!({"code": "2", "session": "t2"})).await;
    assert!(!is_error, "{out}");
    assert_eq!(out["evicted_session"], "t1", "{out}");
    assert_eq!(out["background_killed"], 0, "{out}");
    let text = content[0].as_text().unwrap().text.clone();
    assert!(text.contains("session \"t1\" was ended"), "{text}");
    let (_, out, _) = call(&ctx, serde_json::json!({"code": "3", "session": "t1"})).await;
    assert_eq!(out["state_lost"], true, "{out}");
    assert!(
        out["notice"]
            .as_str()
            .unwrap_or_default()
            .contains("make room"),
        "{out}"
    );
    ctx.interpreter.shutdown().await;
}

#[cordon_test::test]
async fn capture_sparse_tail_is_not_read() {
    let s = setup!();
    let m = manager(s);
    // A cell makes its stdout huge without writing it (a sparse file costs it nothing).
    let o = run_bounded(
        &m,
        "sparse",
        "import os\nprint('real', flush=True)\ntry:\n    os.ftruncate(1, 4 << 30)\nexcept OSError:\n    pass",
    )
    .await;
    assert!(
        o.stdout.total_bytes <= 1 << 16,
        "{} bytes read",
        o.stdout.total_bytes
    );
    assert!(text(&o.stdout).starts_with("real\n"), "{}", show(&o));
    m.shutdown().await;
}

#[cordon_test::test]
async fn worker_holds_only_its_pipes_and_output_files() {
    let s = setup!();
    let m = manager(s);
    let o = run(
        &m,
        "fds",
        "import os\nlinks = {}\nfor f in os.listdir('/proc/self/fd'):\n    try:\n        \
         links[int(f)] = os.readlink('/proc/self/fd/' + f)\n    except OSError:\n        \
         pass\nsorted(links.items())",
    )
    .await;
    let links = o.result.clone().unwrap_or_default();
    assert!(
        links.contains("(1, '/memfd:cordon-cell-stdout"),
        "{}",
        show(&o)
    );
    assert!(
        links.contains("(2, '/memfd:cordon-cell-stderr"),
        "{}",
        show(&o)
    );
    // The driver image was closed by the bootstrap, and nothing of the server's leaked in
    // (workspace or cgroup descriptors, other sessions' files).
    let entries: Vec<&str> = links
        .trim_matches(|c| c == '[' || c == ']')
        .split("), (")
        .collect();
    for entry in entries {
        let target = entry.split_once(", ").map_or(entry, |(_, t)| t);
        assert!(
            target.contains("pipe:")
                || target.contains("/memfd:cordon-cell-")
                || target.contains("/dev/null"),
            "unexpected descriptor {entry} in {links}"
        );
    }
    m.shutdown().await;
}

#[cordon_test::test]
async fn cell_writing_past_the_disk_budget_is_killed_and_reported() {
    let s = setup!();
    // An executor of its own: the budget is the executor's (the policy's limits.disk_mb).
    let mut policy = s.policy.clone();
    policy.limits.disk_bytes = 64 << 20;
    let options = RuntimeOptions {
        workspace: s.executor.confinement().workspace().to_path_buf(),
        init_program: Some(env!("CARGO_BIN_EXE_cordon").into()),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::build(policy.clone(), options).unwrap();
    let m = SessionManager::new(Arc::clone(&runtime.executor), &policy).unwrap();
    let o = run(
        &m,
        "disk",
        "import os\nchunk = os.urandom(1 << 20)\nwith open('disk-hog.bin', 'wb') as f:\n    \
         for _ in range(2048):\n        f.write(chunk); f.flush(); os.fsync(f.fileno())\n'done'",
    )
    .await;
    let written = std::fs::metadata(s.executor.confinement().workspace().join("disk-hog.bin"))
        .map(|m| m.len())
        .unwrap_or(0);
    let _ = std::fs::remove_file(s.executor.confinement().workspace().join("disk-hog.bin"));
    assert_eq!(
        o.limit.as_ref().map(|l| l.kind),
        Some(LimitKind::Disk),
        "{}",
        show(&o)
    );
    assert_ne!(o.result.as_deref(), Some("'done'"), "{}", show(&o));
    assert!(written < 1 << 30, "the cell wrote {written} bytes");
    assert!(o.state_lost.is_some(), "{}", show(&o));
    m.shutdown().await;
}

#[cordon_test::test]
async fn figures_past_the_result_budget_are_counted_not_attached() {
    let s = setup!();
    let ctx = tool_ctx(s);
    // Noise compresses badly: each 600x600 figure is a PNG of several hundred KiB.
    let (is_error, out, content) = call(
        &ctx,
        serde_json::json!({
            "code": "import matplotlib.pyplot as plt, numpy as np\nfor _ in range(6):\n    \
                     plt.figure(figsize=(6, 6), dpi=100); plt.imshow(np.random.rand(600, 600))\n\
                     plt.show()",
            "session": "figs",
        }),
    )
    .await;
    if out["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("No module named"))
    {
        missing_in_ci("matplotlib/numpy are not importable by the sandbox's python3");
        return;
    }
    assert!(!is_error, "{out}");
    let attached: usize = content
        .iter()
        .filter_map(|c| c.as_image())
        .map(|i| i.data.len())
        .sum();
    let images = out["images"].as_u64().unwrap() as usize;
    assert!(images < 6, "all six figures were attached: {out}");
    assert!(attached <= 768 * 1024, "{attached} bytes of images");
    let text = content[0].as_text().unwrap().text.clone();
    assert!(
        text.contains(&format!("{} more figure(s) not attached", 6 - images)),
        "{text}"
    );
}

/// A prerequisite of a test is missing: a failure in CI (which installs it), a visible skip
/// locally.
fn missing_in_ci(what: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("cannot run in CI: {what}");
    }
    eprintln!("SKIP: {what}");
    crate::runner::mark_skipped(what);
}
