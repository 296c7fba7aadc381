//! No confined process holds host uid 0 (issue "No call runs as host root"): where cordon runs
//! as root, each call runs in a user namespace of its own mapped to an unprivileged host uid,
//! the workspace is bound idmapped so its files keep their owners on disk, and per-user kernel
//! limits a call can exhaust are the sandbox uid's, capped per call, never root's.
//!
//! Each test looks at the call from the host: the call's real processes in the host's `/proc`,
//! the owners the host's filesystem records, the host root's own inotify budget.

use crate::common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// cordon's default first uid for calls when the workspace is root's
/// (`confine::call_ids::DEFAULT_UID`).
const DEFAULT_CALLS_UID: u32 = 2_000_000_000;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The real, effective, saved and filesystem uids of host process `pid`.
fn host_uids(pid: i32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    Some(
        line.split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect(),
    )
}

/// Starts `cordon exec` over `sb` running `script` (which should print a line and then keep
/// running), waits for its first line of output and returns the child with that line.
fn start(sb: &Sandbox, options: &[&str], script: &str) -> (std::process::Child, String) {
    let mut cmd = sb.command(options, &["sh", "-c", script]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn cordon exec");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the confined command printed nothing within 30 s")
        });
    (child, line)
}

/// The host processes carrying `token`, once one appears (bounded wait).
fn wait_for_processes(token: &str) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = processes_with(token);
        if !found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cordon_test::test]
fn a_call_of_a_root_server_runs_as_an_unprivileged_host_uid() {
    if skip(
        "a_call_of_a_root_server_runs_as_an_unprivileged_host_uid",
        Need::Namespaces,
    ) {
        return;
    }
    if !is_root() {
        skip_msg(
            "a_call_of_a_root_server_runs_as_an_unprivileged_host_uid",
            "cordon is not root here: calls run as the server's own uid",
        );
        return;
    }
    let sb = Sandbox::new();
    let token = unique_token();
    let (mut child, line) = start(&sb, &[], &format!("echo ready; id -u; exec sleep {token}"));
    assert_eq!(line.trim(), "ready");
    let pids = wait_for_processes(&token);
    assert!(!pids.is_empty(), "the call's sleep is not to be found");
    for pid in &pids {
        let uids = host_uids(*pid).expect("the call's process status");
        assert!(
            uids.iter().all(|&u| u == DEFAULT_CALLS_UID),
            "the call's process {pid} has host uids {uids:?}, expected {DEFAULT_CALLS_UID} \
             (never 0)"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
    // The kernel tears the call's PID namespace down after the init's death signal, not
    // within the server's exit: allow it a moment under load.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_with(&token).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_no_survivors(&token, "the call");
}

#[cordon_test::test]
fn a_call_cannot_exhaust_the_host_roots_inotify_instances() {
    if skip(
        "a_call_cannot_exhaust_the_host_roots_inotify_instances",
        Need::Namespaces,
    ) {
        return;
    }
    // The attack: take every inotify instance the call's uid may have and hold them. As host
    // root that was root's budget (fs.inotify.max_user_instances, 128 by default), and every
    // editor, `tail -f` and file watcher of the host's root failed with EMFILE meanwhile.
    let sb = Sandbox::new();
    let take = r#"
import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
held = []
while len(held) < 4096:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
print("held", len(held), flush=True)
time.sleep(20)
"#;
    std::fs::write(sb.ws().join("take.py"), take).unwrap();
    let (mut child, line) = start(&sb, &[], "exec python3 take.py");
    let held: u64 = line
        .trim()
        .strip_prefix("held ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output {line:?}"));
    // While the call holds all it could take, the host's processes still get theirs.
    // SAFETY: inotify_init1 takes a flag and returns a descriptor we close right away.
    let mine = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    let errno = std::io::Error::last_os_error();
    if mine >= 0 {
        // SAFETY: closing the descriptor just made.
        unsafe { libc::close(mine) };
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        mine >= 0,
        "the host could not make an inotify instance while a call held {held}: {errno}"
    );
    assert!(held > 0, "the call could make no inotify instance at all");
    assert!(
        held <= 32,
        "one call took {held} inotify instances; a call's own namespace caps it at 32"
    );
}

#[cordon_test::test]
fn what_a_call_creates_stays_the_workspace_owners_and_root_files_stay_writable() {
    if skip(
        "what_a_call_creates_stays_the_workspace_owners_and_root_files_stay_writable",
        Need::Namespaces,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let owner = std::fs::metadata(sb.ws()).unwrap();
    std::fs::write(sb.ws().join("existing"), "before\n").unwrap();
    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            "echo after >> existing && mkdir made && echo x > made/file && ln -s file made/link \
             && stat -c '%u %g' made/file",
        ],
    );
    assert_eq!(run.code(), 0, "{run:?}");
    // The call sees the files it made as its own (its namespace's root: the owner's image).
    assert_eq!(run.stdout.trim(), "0 0", "{run:?}");
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("existing")).unwrap(),
        "before\nafter\n"
    );
    for path in ["made", "made/file", "made/link"] {
        let meta = std::fs::symlink_metadata(sb.ws().join(path)).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (owner.uid(), owner.gid()),
            "{path} is owned on disk by {}:{}, not by the workspace's owner",
            meta.uid(),
            meta.gid()
        );
    }
}

#[cordon_test::test]
fn a_root_server_on_a_users_workspace_runs_calls_as_that_user() {
    if skip(
        "a_root_server_on_a_users_workspace_runs_calls_as_that_user",
        Need::Namespaces,
    ) {
        return;
    }
    if !is_root() {
        skip_msg(
            "a_root_server_on_a_users_workspace_runs_calls_as_that_user",
            "needs root to hand the workspace to another uid",
        );
        return;
    }
    const USER: u32 = 4242;
    let sb = Sandbox::new();
    std::os::unix::fs::chown(sb.ws(), Some(USER), Some(USER)).unwrap();
    let token = unique_token();
    let (mut child, line) = start(
        &sb,
        &[],
        &format!("touch made && echo ready && exec sleep {token}"),
    );
    assert_eq!(line.trim(), "ready");
    let pids = wait_for_processes(&token);
    assert!(!pids.is_empty(), "the call's sleep is not to be found");
    for pid in &pids {
        let uids = host_uids(*pid).expect("the call's process status");
        assert!(
            uids.iter().all(|&u| u == USER),
            "the call's process {pid} has host uids {uids:?}, expected the owner's {USER}"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
    let made = std::fs::metadata(sb.ws().join("made")).unwrap();
    assert_eq!(
        (made.uid(), made.gid()),
        (USER, USER),
        "what the call made belongs to the workspace's owner"
    );
}

#[cordon_test::test]
fn a_policy_may_name_the_calls_uid_but_never_root() {
    if skip(
        "a_policy_may_name_the_calls_uid_but_never_root",
        Need::Namespaces,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let root = sb.policy(
        "root.toml",
        "extends = \"default\"\n[sandbox]\nuid = 0\nuid_count = 1\n",
    );
    let run = run_guarded(
        sb.command(&["--policy", &root], &["true"]),
        Duration::from_secs(60),
    );
    assert_ne!(run.code(), 0, "{run:?}");
    assert!(
        run.stderr.contains("sandbox.uid") && run.stderr.contains("root"),
        "{run:?}"
    );
    if !is_root() {
        skip_msg(
            "a_policy_may_name_the_calls_uid_but_never_root (named uid)",
            "cordon is not root here: calls run as the server's own uid",
        );
        return;
    }
    let named = sb.policy(
        "named.toml",
        "extends = \"default\"\n[sandbox]\nuid = 3000000000\nuid_count = 1\n",
    );
    let token = unique_token();
    let (mut child, line) = start(
        &sb,
        &["--policy", &named],
        &format!("echo ready && exec sleep {token}"),
    );
    assert_eq!(line.trim(), "ready");
    let pids = wait_for_processes(&token);
    assert!(!pids.is_empty(), "the call's sleep is not to be found");
    for pid in &pids {
        assert_eq!(
            host_uids(*pid).expect("status"),
            vec![3_000_000_000u32; 4],
            "process {pid}"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}
