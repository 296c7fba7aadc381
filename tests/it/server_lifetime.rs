//! Nothing reaches a confined process through cordon's own process, and nothing a call
//! started outlives the server: descriptors cordon inherits (`exec 7>file; cordon …`) are
//! closed before any command runs, for `cordon exec` and for `serve`'s shell_exec and
//! code_interpreter; and SIGKILL or SIGTERM of `cordon serve` mid-call leaves no process of
//! that call alive (a /proc scan for a token only that call carries).

use crate::common::{
    CORDON, HANG_GUARD, Need, Sandbox, assert_no_survivors, marker, path_str, processes_with,
    run_guarded, skip, unique_token,
};
use crate::stdio_server::{StdioServer, eventually, structured};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// How long the kernel and cordon get to end a call's processes after the server is gone.
const REAP_WITHIN: Duration = Duration::from_secs(5);

fn shell_with_fd7(target: &Path, then: &str) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(format!("exec 7>>\"$0\"; {then}"))
        .arg(target);
    cmd
}

#[cordon_test::test]
fn inherited_descriptor_does_not_reach_cordon_exec_commands() {
    if skip(
        "inherited_descriptor_does_not_reach_cordon_exec_commands",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let target = sb.outside().join("through-fd7");
    std::fs::write(&target, "").unwrap();

    // Control: an ordinary child of that shell writes through fd 7.
    let control = run_guarded(
        shell_with_fd7(&target, "sh -c 'echo control >&7'"),
        HANG_GUARD,
    );
    assert_eq!(control.code(), 0, "{control:?}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "control\n");
    std::fs::write(&target, "").unwrap();

    let ws = path_str(sb.ws());
    let policy = sb.probe_policy();
    let run = sb.exec_cmd(shell_with_fd7(
        &target,
        &format!(
            "\"{CORDON}\" exec --workspace '{ws}' --policy '{policy}' -- sh -c \
             'echo pwned >&7; \"{CORDON}\" probe write-fd 7; ls /proc/self/fd'"
        ),
    ));
    assert!(run.stdout.contains("write-fd: refused"), "{run:?}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "",
        "a command wrote through the inherited descriptor: {run:?}"
    );
}

#[cordon_test::test]
fn inherited_descriptor_does_not_reach_shell_exec_or_code_interpreter() {
    if skip(
        "inherited_descriptor_does_not_reach_shell_exec_or_code_interpreter",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let target = sb.outside().join("through-fd7");
    std::fs::write(&target, "").unwrap();
    let prefix = format!("exec 7>>'{}';", path_str(&target));
    let mut server = StdioServer::start(sb.ws(), &[], &prefix, &[]);

    let result = server.call(
        "shell_exec",
        json!({"command": "echo pwned >&7; echo status=$?"}),
    );
    let out = structured(&result)["stdout"].as_str().unwrap_or_default();
    assert!(
        out.contains("status=") && !out.contains("status=0"),
        "{result}"
    );

    let cell = server.call(
        "code_interpreter",
        json!({"code": "import os\ntry:\n    os.write(7, b'pwned\\n'); print('WROTE')\nexcept OSError as e:\n    print('refused', e.errno)"}),
    );
    let out = structured(&cell)["stdout"].as_str().unwrap_or_default();
    assert_eq!(out.trim(), format!("refused {}", libc::EBADF), "{cell}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "",
        "a tool wrote through the server's inherited descriptor"
    );
}

/// Starts a call whose processes carry `token`, waits until they run, signals the server and
/// asserts they are gone within `REAP_WITHIN`. Returns the pending call's answer, if the
/// server gave one before exiting.
fn kill_server_mid_call(
    tool: &str,
    arguments: serde_json::Value,
    token: &str,
    signal: i32,
) -> Option<serde_json::Value> {
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    let id = server.start_call(tool, arguments);
    assert!(
        eventually(Duration::from_secs(30), || !processes_with(token)
            .is_empty()),
        "the call's process never started"
    );
    server.signal(signal);
    let answer = server.response(id, REAP_WITHIN);
    let status = server.wait_exit(REAP_WITHIN);
    let gone = eventually(REAP_WITHIN, || processes_with(token).is_empty());
    let survivors = processes_with(token);
    assert_no_survivors(token, &format!("{tool} after signal {signal} to serve"));
    assert!(gone, "survivors: {survivors:?}");
    assert!(
        status.is_some(),
        "cordon serve did not exit after signal {signal}"
    );
    answer
}

fn sleep_command(token: &str) -> serde_json::Value {
    json!({"command": format!("sleep {token}"), "timeout_secs": 120})
}

fn sleep_cell(token: &str) -> serde_json::Value {
    json!({"code": format!("import subprocess\nsubprocess.run(['sleep', '{token}'])"), "timeout_secs": 120})
}

#[cordon_test::test]
fn sigkill_of_serve_kills_a_running_shell_exec() {
    if skip(
        "sigkill_of_serve_kills_a_running_shell_exec",
        Need::Namespaces,
    ) {
        return;
    }
    let token = unique_token();
    kill_server_mid_call("shell_exec", sleep_command(&token), &token, libc::SIGKILL);
}

#[cordon_test::test]
fn sigterm_of_serve_kills_a_running_shell_exec() {
    if skip(
        "sigterm_of_serve_kills_a_running_shell_exec",
        Need::Namespaces,
    ) {
        return;
    }
    let token = unique_token();
    kill_server_mid_call("shell_exec", sleep_command(&token), &token, libc::SIGTERM);
}

#[cordon_test::test]
fn sigterm_of_serve_answers_the_pending_call() {
    if skip(
        "sigterm_of_serve_answers_the_pending_call",
        Need::Namespaces,
    ) {
        return;
    }
    // SIGTERM is a polite stop (clients send it 2 s after closing stdin): the in-flight call
    // is killed and answered before the server exits.
    for (tool, arguments) in [
        ("shell_exec", sleep_command as fn(&str) -> serde_json::Value),
        ("code_interpreter", sleep_cell),
    ] {
        let token = unique_token();
        let answer = kill_server_mid_call(tool, arguments(&token), &token, libc::SIGTERM);
        assert!(
            answer.is_some(),
            "the pending {tool} call got no answer before serve exited on SIGTERM"
        );
    }
}

#[cordon_test::test]
fn sigkill_of_serve_kills_a_setsid_daemon_of_a_running_call() {
    if skip(
        "sigkill_of_serve_kills_a_setsid_daemon_of_a_running_call",
        Need::Namespaces,
    ) {
        return;
    }
    let token = unique_token();
    let m = marker(&token);
    let command = format!("setsid sh -c 'sleep {token}; : {m}' & sleep {token}; : {m}");
    kill_server_mid_call(
        "shell_exec",
        json!({"command": command, "timeout_secs": 120}),
        &token,
        libc::SIGKILL,
    );
}

#[cordon_test::test]
fn sigkill_of_serve_kills_a_running_code_interpreter_cell() {
    if skip(
        "sigkill_of_serve_kills_a_running_code_interpreter_cell",
        Need::Namespaces,
    ) {
        return;
    }
    let token = unique_token();
    kill_server_mid_call(
        "code_interpreter",
        sleep_cell(&token),
        &token,
        libc::SIGKILL,
    );
}

#[cordon_test::test]
fn sigterm_of_serve_kills_a_running_code_interpreter_cell() {
    if skip(
        "sigterm_of_serve_kills_a_running_code_interpreter_cell",
        Need::Namespaces,
    ) {
        return;
    }
    let token = unique_token();
    kill_server_mid_call(
        "code_interpreter",
        sleep_cell(&token),
        &token,
        libc::SIGTERM,
    );
}

#[cordon_test::test]
fn sigkill_of_cordon_exec_kills_its_command() {
    if skip("sigkill_of_cordon_exec_kills_its_command", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let token = unique_token();
    let mut child = sb
        .command(&[], &["sleep", &token])
        .spawn()
        .expect("spawn cordon exec");
    assert!(
        eventually(Duration::from_secs(30), || !processes_with(&token)
            .is_empty()),
        "the command never started"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = eventually(REAP_WITHIN, || processes_with(&token).is_empty());
    assert_no_survivors(&token, "sleep after SIGKILL of cordon exec");
    assert!(gone);
}

/// The names of the scratch directories a server made under `tmp` (`cordon-view-*`, …).
fn scratch_in(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cordon-"))
        .collect()
}

#[cordon_test::test]
fn sigterm_of_serve_before_initialize_exits_cleanly_and_leaves_no_scratch_directory() {
    if skip(
        "sigterm_of_serve_before_initialize_exits_cleanly_and_leaves_no_scratch_directory",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Command::new(CORDON)
        .args(["serve", "--workspace", path_str(ws.path())])
        .env("TMPDIR", tmp.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Up: its sandbox init has a mount point (the view is made after the private roots).
    assert!(
        eventually(Duration::from_secs(30), || scratch_in(tmp.path())
            .iter()
            .any(|n| n.starts_with("cordon-view-"))),
        "the server never started its sandbox init"
    );
    // The client gives up before `initialize`, as an SDK that closes early does.
    let pid = rustix::process::Pid::from_child(&server);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let mut status = None;
    assert!(
        eventually(REAP_WITHIN, || {
            status = server.try_wait().unwrap();
            status.is_some()
        }),
        "serve did not exit within {REAP_WITHIN:?} of SIGTERM before initialize"
    );
    let status = status.unwrap();
    assert!(
        status.success(),
        "serve should end through its normal exit on SIGTERM before initialize: {status:?}"
    );
    assert!(
        eventually(REAP_WITHIN, || scratch_in(tmp.path()).is_empty()),
        "scratch directories left behind: {:?}",
        scratch_in(tmp.path())
    );
}

/// The scratch entries (`cordon-*`) in `tmp` whose name carries owner `tag`, and the owner
/// lock itself.
fn owned_by(tmp: &Path, tag: &str) -> Vec<String> {
    scratch_in(tmp)
        .into_iter()
        .filter(|n| n.ends_with(&format!("-{tag}")) || n.contains(&format!("-{tag}-")))
        .collect()
}

/// The owner tags (`cordon-owner-<tag>`) present in `tmp`.
fn owner_tags(tmp: &Path) -> Vec<String> {
    scratch_in(tmp)
        .iter()
        .filter_map(|n| n.strip_prefix("cordon-owner-").map(str::to_owned))
        .collect()
}

#[cordon_test::test]
fn scratch_of_a_sigkilled_server_is_removed_by_the_next_and_a_live_ones_never() {
    if skip(
        "scratch_of_a_sigkilled_server_is_removed_by_the_next_and_a_live_ones_never",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let tmp_env = [("TMPDIR", path_str(tmp.path()))];
    let view_of = |tag: &str| {
        owned_by(tmp.path(), tag)
            .iter()
            .any(|n| n.starts_with("cordon-view-"))
    };

    // A server killed outright leaves its directories and its owner lock behind.
    let mut killed = StdioServer::start(ws.path(), &[], "", &tmp_env);
    let dead_tag = owner_tags(tmp.path())
        .pop()
        .expect("the server made an owner lock");
    assert!(eventually(Duration::from_secs(30), || view_of(&dead_tag)));
    killed.signal(libc::SIGKILL);
    assert!(killed.wait_exit(REAP_WITHIN).is_some());
    let left = owned_by(tmp.path(), &dead_tag);
    assert!(
        left.len() >= 4,
        "a SIGKILLed server should leave its owner lock, tmp, private and view: {left:?}"
    );

    // The next server removes them, and keeps its own.
    let mut next = StdioServer::start(ws.path(), &[], "", &tmp_env);
    assert!(
        eventually(Duration::from_secs(30), || owned_by(tmp.path(), &dead_tag)
            .is_empty()),
        "the dead server's scratch was not removed: {:?}",
        owned_by(tmp.path(), &dead_tag)
    );
    let live_tag = owner_tags(tmp.path())
        .pop()
        .expect("the live server's owner lock");
    assert!(eventually(Duration::from_secs(30), || view_of(&live_tag)));
    let live = owned_by(tmp.path(), &live_tag);

    // A third server's sweep finds the second alive: its directories stay and it still runs
    // commands (which need its per-call temporary root).
    let third = StdioServer::start(ws.path(), &[], "", &tmp_env);
    assert!(eventually(Duration::from_secs(30), || owner_tags(
        tmp.path()
    )
    .len()
        == 2));
    std::thread::sleep(Duration::from_millis(500));
    let mut still = owned_by(tmp.path(), &live_tag);
    still.sort();
    let mut live = live;
    live.sort();
    assert_eq!(
        still, live,
        "a live server's scratch changed under another's sweep"
    );
    let result = next.call(
        "shell_exec",
        json!({"command": "echo ok > \"$TMPDIR/f\" && cat \"$TMPDIR/f\""}),
    );
    assert_eq!(structured(&result)["stdout"], "ok\n", "{result}");
    drop(third);
}

/// A confined command can make its TMPDIR as deep as its disk budget allows: renaming a chain
/// into a fresh parent costs the same at every depth. Removing the call's TMPDIR afterwards
/// with `remove_dir_all` recursed once per level, overflowed the thread's stack and aborted
/// the server; the next call found no server.
#[cordon_test::test]
fn a_deep_directory_chain_in_a_calls_tmpdir_does_not_take_the_server_down() {
    if skip(
        "a_deep_directory_chain_in_a_calls_tmpdir_does_not_take_the_server_down",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let tmp_env = [("TMPDIR", path_str(tmp.path()))];
    let mut server = StdioServer::start(ws.path(), &[], "", &tmp_env);
    let chain = "import os\nos.chdir(os.environ['TMPDIR'])\nos.mkdir('a')\n\
                 for _ in range(40000):\n    os.mkdir('b'); os.rename('a', 'b/a'); \
                 os.rename('b', 'a')\nprint(os.environ['TMPDIR'])\n";
    let r = server.call(
        "shell_exec",
        json!({"command": "python3 -", "stdin": chain, "timeout_secs": 300}),
    );
    let deep = structured(&r)["stdout"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_owned();
    assert!(deep.contains("/call-"), "{r}");
    let r = server.call("shell_exec", json!({"command": "echo $TMPDIR"}));
    let second = structured(&r)["stdout"]
        .as_str()
        .unwrap_or_default()
        .trim()
        .to_owned();
    assert!(second.contains("/call-"), "{r}");
    // Both calls' TMPDIRs are gone (removed after each answer; warm slots waiting for the next
    // calls have directories of their own, which are not these).
    let call_dirs = || -> Vec<String> {
        [&deep, &second]
            .into_iter()
            .filter(|d| std::path::Path::new(d.as_str()).exists())
            .cloned()
            .collect()
    };
    assert!(
        eventually(Duration::from_secs(30), || call_dirs().is_empty()),
        "calls' TMPDIRs left: {:?}",
        call_dirs()
    );
    let r = server.call("shell_exec", json!({"command": "echo still"}));
    assert_eq!(structured(&r)["stdout"], "still\n", "{r}");
}
