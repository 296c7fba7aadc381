//! `code_interpreter` end to end on the running kernel: notebook semantics, timeouts with and
//! without a cooperative interrupt, limits, escapes, isolation between sessions, reaping and
//! shutdown. Every escape test attempts the real violation from inside a confined worker.
//!
//! Needs Python 3 on the sandbox PATH (skipped with a message otherwise) and a kernel that
//! can enforce the default policy (Landlock ABI 6+, seccomp); the image test also needs
//! matplotlib importable by that Python.

use cordon::confine::{ConfineOptions, Confinement};
use cordon::exec::{CaptureSpec, Executor, LimitKind};
use cordon::interpreter::{CellOutcome, CellRequest, InterpreterError, SessionManager};
use cordon::policy::Policy;
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
                eprintln!("SKIP: python3 is not on the sandbox PATH ({SANDBOX_PATH})");
                return None;
            }
            let mut policy = Policy::builtin_default();
            policy.interpreter.memory_bytes = 256 << 20;
            policy.interpreter.pids = 32;
            policy.interpreter.interrupt_grace = Duration::from_secs(1);
            let workspace = tempfile::tempdir().unwrap();
            let outside = tempfile::tempdir().unwrap();
            let root = workspace.path().canonicalize().unwrap();
            let confinement = match Confinement::build(&policy, &root, &ConfineOptions::default()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("SKIP: this kernel cannot enforce the default policy: {e}");
                    return None;
                }
            };
            eprintln!("enforcement: {}", confinement.enforcement().summary());
            let executor = Arc::new(Executor::new(Arc::new(confinement), &policy));
            Some(Shared {
                _workspace: workspace,
                outside,
                executor,
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

fn text(c: &cordon::exec::Captured) -> String {
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

fn alive(pid: u32) -> bool {
    // A zombie still has /proc/<pid>; only a running or sleeping process counts.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
async fn a_cell_that_swallows_keyboard_interrupt_is_killed_and_the_session_restarted() {
    let s = setup!();
    let m = manager(s);
    run(&m, "k", "kept = 1").await;
    let pid_before = run(&m, "k", "import os; os.getpid()").await.result;
    let stubborn = "while True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n        print('caught, going on')";
    let o = m.run("k", cell(stubborn, 1)).await.unwrap();
    assert!(o.timed_out, "{}", show(&o));
    let lost = o.state_lost.as_deref().unwrap_or_default();
    assert!(lost.contains("did not stop"), "{}", show(&o));
    assert!(text(&o.stdout).contains("caught, going on"), "{}", show(&o));
    let pid_after = run(&m, "k", "import os; os.getpid()").await.result;
    assert_ne!(pid_before, pid_after, "the worker was not replaced");
    let gone = run(&m, "k", "kept").await;
    assert_eq!(exc_type(&gone), Some("NameError"), "{}", show(&gone));
    m.shutdown().await;
}

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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
    assert_eq!(exc_type(&o), Some("PermissionError"), "{}", show(&o));
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
    assert_eq!(exc_type(&o), Some("PermissionError"), "{}", show(&o));
    assert!(
        listener.accept().is_err(),
        "the sandbox reached a host listener"
    );
    let o = run(
        &m,
        "esc",
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'x', ('127.0.0.1', 9))",
    )
    .await;
    assert_eq!(exc_type(&o), Some("PermissionError"), "{}", show(&o));

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
    assert_eq!(exc_type(&o), Some("PermissionError"), "{}", show(&o));
    assert!(!target.exists());
    let o = run(&m, "esc", "open('/usr/pwned', 'w')").await;
    assert!(
        matches!(exc_type(&o), Some("PermissionError" | "OSError")),
        "{}",
        show(&o)
    );
    m.shutdown().await;
}

#[tokio::test]
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
    assert_eq!(exc_type(&b), Some("PermissionError"), "{}", show(&b));
    let b = run(
        &m,
        "iso-b",
        &format!("open('/proc/{pid}/environ', 'rb').read()"),
    )
    .await;
    assert_eq!(exc_type(&b), Some("PermissionError"), "{}", show(&b));
    // The workspace is shared on purpose.
    let b = run(&m, "iso-b", "open('shared-iso.txt').read()").await;
    assert_eq!(b.result.as_deref(), Some("'from a'"), "{}", show(&b));
    m.shutdown().await;
}

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
async fn shutdown_kills_every_worker_and_refuses_new_calls() {
    let s = setup!();
    let m = manager(s);
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

#[tokio::test]
async fn too_many_sessions_are_refused_with_the_live_names() {
    let s = setup!();
    let m = manager_with(s, |p| p.interpreter.max_sessions = 2);
    run(&m, "one", "1").await;
    run(&m, "two", "2").await;
    let err = m.run("three", cell("3", 5)).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, InterpreterError::TooManySessions { .. }));
    assert!(msg.contains("one, two"), "{msg}");
    m.shutdown().await;
}

#[tokio::test]
async fn a_missing_python_is_reported_as_not_found() {
    let s = setup!();
    let m = manager_with(s, |p| p.interpreter.python = "/nonexistent/python3".into());
    let err = m.run("np", cell("1", 5)).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    m.shutdown().await;
}

#[tokio::test]
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
#[tokio::test]
async fn figures_come_back_as_png_images_and_are_closed() {
    let s = setup!();
    let m = manager(s);
    let probe = run(&m, "img", "import matplotlib").await;
    if let Some(e) = probe.exception {
        eprintln!(
            "SKIP: matplotlib is not importable by the sandbox's python3 ({}); install it for \
             /usr/bin/python3, e.g. `apt-get install -y python3-matplotlib`",
            e.message
        );
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

fn tool_ctx(s: &Shared) -> cordon::tools::SharedContext {
    let policy = s.policy.clone();
    Arc::new(cordon::tools::ToolContext {
        workspace: cordon::workspace::Workspace::open(s._workspace.path()).unwrap(),
        executor: Arc::clone(&s.executor),
        interpreter: manager(s),
        lint: cordon::lint::Linting::new(&policy.lint, SANDBOX_PATH, None, None).unwrap(),
        // Started only if a call needs it; these tests only run cells.
        parser: Arc::new(cordon::parser::ParserClient::new(
            Arc::clone(&s.executor),
            env!("CARGO_BIN_EXE_cordon").into(),
            cordon::parser::ParserConfig::default(),
        )),
        audit: None,
        slots: tokio::sync::Semaphore::new(4),
        file_lock: tokio::sync::Mutex::new(()),
        protected: Vec::new(),
        policy,
    })
}

async fn call(
    ctx: &cordon::tools::SharedContext,
    args: serde_json::Value,
) -> (bool, serde_json::Value, Vec<rmcp::model::ContentBlock>) {
    let args = serde_json::from_value(args).unwrap();
    let r =
        cordon::tools::code_interpreter::run(Arc::clone(ctx), args, CancellationToken::new()).await;
    (
        r.is_error == Some(true),
        r.structured_content.unwrap(),
        r.content,
    )
}

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
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

#[tokio::test]
async fn figures_are_image_content_blocks() {
    let s = setup!();
    let ctx = tool_ctx(s);
    let (_, probe, _) = call(
        &ctx,
        serde_json::json!({"code": "import matplotlib", "session": "fig"}),
    )
    .await;
    if !probe["error"].is_null() {
        eprintln!("SKIP: matplotlib is not importable by the sandbox's python3");
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
