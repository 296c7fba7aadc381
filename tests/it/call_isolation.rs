//! Concurrent calls of one server cannot observe or affect each other: each call's processes
//! live in a PID namespace of their own (no `renice`, `prlimit`, `taskset` or `ionice` of
//! another call's process, no reading its command line), each call's TMPDIR is granted to that
//! call alone (the root holding them is not writable), and System V IPC objects die with the
//! call that made them. Each test runs two calls at once in one `cordon serve`, attempts the
//! real interference from the second, and checks the first from the host, where the kernel's
//! own view cannot be faked by the sandbox.

use crate::common::{HANG_GUARD, Need, marker, processes_with, skip, unique_token};
use crate::stdio_server::{StdioServer, structured};
use serde_json::json;
use std::time::{Duration, Instant};

/// The first of `tools` this machine lacks. Missing in CI is a failure, never a silent pass
/// (`.ci/run` installs them: util-linux, procps).
fn have(tools: &[&'static str]) -> Option<&'static str> {
    let missing = tools.iter().copied().find(|t| {
        !["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
            .iter()
            .any(|d| std::path::Path::new(d).join(t).exists())
    });
    if let Some(tool) = missing
        && std::env::var("CI").is_ok_and(|v| v == "true")
    {
        panic!("`{tool}` is missing in CI");
    }
    missing
}

/// Starts call A (`script`, which must create `ready` in the workspace once it is running)
/// and waits until it is.
fn start_a(server: &mut StdioServer, ws: &std::path::Path, script: &str) -> u64 {
    let id = server.start_call("shell_exec", json!({"command": script, "timeout_secs": 30}));
    let deadline = Instant::now() + Duration::from_secs(15);
    while !ws.join("ready").exists() {
        assert!(Instant::now() < deadline, "call A never became ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    id
}

/// Host-side facts about a process that another call might try to change.
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    nice: String,
    open_files: String,
    cpus: String,
    ioprio: String,
}

fn observe(pid: i32) -> Observed {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name: state is field 3, nice field 19 (index 16 after the name).
    let nice = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.split(' ').nth(16))
        .unwrap_or_default()
        .to_owned();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_default()
        .to_owned();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let cpus = status
        .lines()
        .find(|l| l.starts_with("Cpus_allowed_list"))
        .unwrap_or_default()
        .to_owned();
    // SAFETY: ioprio_get(IOPRIO_WHO_PROCESS, pid) reads no memory of ours.
    let ioprio = unsafe { libc::syscall(libc::SYS_ioprio_get, 1, pid) }.to_string();
    Observed {
        nice,
        open_files,
        cpus,
        ioprio,
    }
}

#[cordon_test::test]
fn a_call_cannot_renice_limit_pin_or_list_another_calls_process() {
    let test = "a_call_cannot_renice_limit_pin_or_list_another_calls_process";
    if skip(test, Need::Namespaces) {
        return;
    }
    if let Some(missing) = have(&["renice", "prlimit", "taskset", "ionice", "ps"]) {
        return crate::common::skip_msg(test, missing);
    }
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    let token = unique_token();
    // A publishes the pid it has for itself, as an attacker would read it from `ps`.
    let a = start_a(
        &mut server,
        ws.path(),
        &format!("echo $$ > a.pid; touch ready; exec sleep {token}"),
    );
    let host = {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(&pid) = processes_with(&token).first() {
                break pid;
            }
            assert!(Instant::now() < deadline, "A's sleep not found");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let before = observe(host);
    // B goes after A's published pid and after every other process it can see.
    let b = server.call(
        "shell_exec",
        json!({"command": format!(
            "P=$(cat a.pid); ps ax -o pid=,args= > seen.txt; \
             for p in $P $(ps ax -o pid=); do \
               renice -n 19 -p $p; prlimit --pid $p --nofile=16:16; taskset -p 1 $p; \
               ionice -c 3 -p $p; \
             done >/dev/null 2>&1; echo done # {}", marker("b"))}),
    );
    assert_eq!(structured(&b)["exit_code"], 0, "{b}");
    let after = observe(host);
    let seen = std::fs::read_to_string(ws.path().join("seen.txt")).unwrap();
    let _ = server.response(a, HANG_GUARD);
    assert_eq!(before, after, "call B changed call A's process");
    assert!(
        !seen.contains(&token),
        "call B could list call A's process: {seen}"
    );
}

#[cordon_test::test]
fn a_call_cannot_write_another_calls_tmpdir_or_leave_files_for_the_next() {
    let test = "a_call_cannot_write_another_calls_tmpdir_or_leave_files_for_the_next";
    if skip(test, Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    let a = start_a(
        &mut server,
        ws.path(),
        "echo secret > \"$TMPDIR/f\"; echo \"$TMPDIR\" > a.tmp; touch ready; sleep 3; \
         cat \"$TMPDIR/f\"",
    );
    let a_tmp = std::fs::read_to_string(ws.path().join("a.tmp")).unwrap();
    let a_tmp = std::path::PathBuf::from(a_tmp.trim());
    let root = a_tmp.parent().expect("TMPDIR has a parent").to_path_buf();
    // B overwrites every call directory it can reach by name and plants a file in the root.
    let b = server.call(
        "shell_exec",
        json!({"command": format!(
            "for d in \"$(dirname \"$TMPDIR\")\"/call-* {a}; do \
               [ \"$d\" = \"$TMPDIR\" ] || echo pwned > \"$d/f\"; done 2>/dev/null; \
             echo planted > \"$(dirname \"$TMPDIR\")/p\" 2>/dev/null; true",
            a = a_tmp.display()
        )}),
    );
    assert_eq!(structured(&b)["exit_code"], 0, "{b}");
    let a = server.response(a, HANG_GUARD).expect("A answers");
    let a = structured(&a["result"]).clone();
    assert_eq!(a["stdout"], "secret\n", "B rewrote A's TMPDIR: {a}");
    assert!(
        !root.join("p").exists(),
        "B left a file in the calls' common temporary root"
    );
    let c = server.call(
        "shell_exec",
        json!({"command": "cat \"$(dirname \"$TMPDIR\")/p\""}),
    );
    assert_ne!(
        structured(&c)["stdout"],
        "planted\n",
        "a later call read what an earlier one left: {c}"
    );
}

#[cordon_test::test]
fn sysv_ipc_objects_die_with_their_call() {
    let test = "sysv_ipc_objects_die_with_their_call";
    if skip(test, Need::Namespaces) {
        return;
    }
    if let Some(missing) = have(&["ipcmk", "ipcs"]) {
        return crate::common::skip_msg(test, missing);
    }
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    let one = server.call(
        "shell_exec",
        json!({"command": "ipcmk -M 1048576 >/dev/null && ipcmk -Q >/dev/null && ipcmk -S 4 >/dev/null && ipcs -m -q -s | grep -c '^0x'"}),
    );
    assert_eq!(
        structured(&one)["stdout"],
        "3\n",
        "the objects were made: {one}"
    );
    let two = server.call(
        "shell_exec",
        json!({"command": "ipcs -m -q -s | grep -c '^0x'; true"}),
    );
    assert_eq!(
        structured(&two)["stdout"],
        "0\n",
        "a later call sees an earlier call's System V objects: {two}"
    );
}

/// The layers that make a call alone must not break ordinary file moves: every Landlock layer
/// refuses moving a file to another directory (EXDEV) unless it grants that, and the scope
/// layer put on the job's main process once did in the workspace, TMPDIR, /tmp and /dev/shm.
#[cordon_test::test]
fn files_move_between_directories_in_every_writable_place() {
    let test = "files_move_between_directories_in_every_writable_place";
    if skip(test, Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    let r = server.call(
        "shell_exec",
        json!({"command": "for d in \"$PWD\" \"$TMPDIR\" /tmp /var/tmp /dev/shm; do \
            cd \"$d\" && mkdir -p mv-a mv-b && \
            python3 -c 'import os; os.rename(\"mv-a\", \"mv-b/mv-a\")' && echo \"$d ok\"; done"}),
    );
    let out = structured(&r)["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(out.matches(" ok\n").count(), 5, "{r}");
}
