//! Background jobs (`shell_exec {background: true}` and the `job` tool), end to end through
//! `cordon serve`: a dev server reached from later calls, a REPL under a pty, Ctrl-C, signals,
//! every bound that ends a job (lifetime, idle time, memory, a fork bomb, a flood of output,
//! the per-session count), every way its owner can go (stdin closed, SIGTERM, SIGKILL, HTTP
//! DELETE, another HTTP session), forwarding from the host, a git plant caught while the job
//! runs, and a denied command that never starts. Each test is its own process (tests/runner) and
//! attempts the real thing.

use crate::common::{
    Need, Sandbox, assert_no_survivors, marker, processes_with, skip, unique_token,
};
use crate::stdio_server::{StdioServer, eventually, structured, text};
use serde_json::{Value, json};
use std::time::Duration;

const REAP_WITHIN: Duration = Duration::from_secs(10);

fn server(sb: &Sandbox, policy: Option<&str>) -> StdioServer {
    match policy {
        Some(text) => {
            let path = sb.policy("jobs.toml", &format!("extends = \"default\"\n{text}"));
            StdioServer::start(sb.ws(), &["--policy", &path], "", &[])
        }
        None => StdioServer::start(sb.ws(), &[], "", &[]),
    }
}

fn start_job(s: &mut StdioServer, command: &str, extra: Value) -> (Value, String) {
    let mut args = json!({"command": command, "background": true});
    if let (Value::Object(a), Value::Object(e)) = (&mut args, extra) {
        a.extend(e);
    }
    let r = s.call("shell_exec", args);
    let id = structured(&r)["job"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no job in the result: {r}"))
        .to_owned();
    (r, id)
}

fn job(s: &mut StdioServer, args: Value) -> Value {
    s.call("job", args)
}

/// Waits (bounded) until job `id` is no longer running; returns its last read.
fn until_ended(s: &mut StdioServer, id: &str, within: Duration) -> Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        let r = job(s, json!({"id": id, "wait_secs": 2}));
        if structured(&r)["job"]["state"] != json!("running")
            || std::time::Instant::now() > deadline
        {
            return r;
        }
    }
}

#[cordon_test::test]
fn a_dev_server_job_is_reached_by_later_shell_exec_and_code_interpreter_calls() {
    if skip(
        "a_dev_server_job_is_reached_by_later_calls",
        Need::Namespaces,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let (started, id) = start_job(
        &mut s,
        "python3 -m http.server 8000 --bind 127.0.0.1",
        json!({"wait_secs": 0}),
    );
    assert_eq!(
        structured(&started)["job"]["state"],
        json!("running"),
        "{started}"
    );
    assert_eq!(structured(&started)["isError"], Value::Null);
    let ready = job(
        &mut s,
        json!({"id": id, "wait_secs": 20, "until": "Serving"}),
    );
    let output = structured(&ready)["output"]
        .as_str()
        .unwrap_or("")
        .to_owned()
        + structured(&started)["stdout"].as_str().unwrap_or("");
    assert!(output.contains("Serving HTTP"), "never ready: {ready}");
    let curl = s.call(
        "shell_exec",
        json!({"command": "curl -sS -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/"}),
    );
    assert_eq!(structured(&curl)["stdout"], json!("200"), "{curl}");
    let py = s.call(
        "code_interpreter",
        json!({"code": "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:8000/').status"}),
    );
    assert_eq!(structured(&py)["result"], json!("200"), "{py}");
    // The server saw both requests, and says so in the job's output.
    let log = job(&mut s, json!({"id": id, "wait_secs": 2}));
    let stderr = structured(&log)["stderr"].as_str().unwrap_or("");
    assert!(stderr.matches("GET / HTTP").count() >= 2, "{log}");
    assert!(
        structured(&log)["full_output"]
            .as_str()
            .is_some_and(|p| p.starts_with(".cordon/outputs/"))
    );
}

#[cordon_test::test]
fn a_python_repl_under_a_pty_keeps_its_state_and_ctrl_c_interrupts_it() {
    if skip("a_python_repl_under_a_pty", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let (_, id) = start_job(
        &mut s,
        "exec python3 -i -q",
        json!({"pty": true, "wait_secs": 2}),
    );
    job(
        &mut s,
        json!({"id": id, "input": "answer = 6 * 7\n", "wait_secs": 3, "until": ">>> "}),
    );
    let printed = job(
        &mut s,
        json!({"id": id, "input": "print(answer)\n", "wait_secs": 5, "until": "42"}),
    );
    assert!(
        structured(&printed)["output"]
            .as_str()
            .unwrap_or("")
            .contains("42"),
        "a value defined in one input was not printed by the next: {printed}"
    );
    job(
        &mut s,
        json!({"id": id, "input": "import time; time.sleep(600)\n", "wait_secs": 1}),
    );
    let interrupted = job(
        &mut s,
        json!({"id": id, "input": "\u{3}", "wait_secs": 10, "until": "KeyboardInterrupt"}),
    );
    assert!(
        structured(&interrupted)["output"]
            .as_str()
            .unwrap_or("")
            .contains("KeyboardInterrupt"),
        "Ctrl-C did not reach the REPL: {interrupted}"
    );
    assert_eq!(structured(&interrupted)["job"]["state"], json!("running"));
    assert_eq!(structured(&interrupted)["job"]["pty"], json!(true));
    // Ctrl-D at the prompt ends it (Python then exits as it chooses: after an interrupt
    // recent versions end by SIGINT), and the end is reported as it was.
    job(&mut s, json!({"id": id, "input": "\u{4}"}));
    let ended = until_ended(&mut s, &id, Duration::from_secs(15));
    let st = structured(&ended);
    assert_ne!(st["job"]["state"], json!("running"), "{ended}");
    assert!(
        st["exit_code"].is_i64() || st["signal"].is_string(),
        "{ended}"
    );
}

#[cordon_test::test]
fn a_call_under_a_pty_sees_a_terminal() {
    if skip("a_call_under_a_pty_sees_a_terminal", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let plain = s.call(
        "shell_exec",
        json!({"command": "test -t 1 && echo tty || echo notty"}),
    );
    assert_eq!(structured(&plain)["stdout"], json!("notty\n"));
    let r = s.call(
        "shell_exec",
        json!({"command": "test -t 0 && test -t 1 && stty size", "pty": true, "cols": 100, "rows": 30}),
    );
    assert_eq!(structured(&r)["exit_code"], json!(0), "{r}");
    assert!(
        structured(&r)["stdout"]
            .as_str()
            .unwrap_or("")
            .contains("30 100"),
        "{r}"
    );
    let bad = s.call("shell_exec", json!({"command": "true", "cols": 100}));
    assert_eq!(
        structured(&bad)["error"]["kind"],
        json!("invalid_argument"),
        "{bad}"
    );
}

/// Issue 32, item 5: `/dev/tty` is the call's own controlling terminal. Under a pty a
/// prompt read from it gets the agent's input; without one the open fails with ENXIO (no
/// terminal), as on any Linux, and no Landlock denial of it is recorded or explained.
#[cordon_test::test]
fn dev_tty_is_the_calls_own_terminal_or_none() {
    if skip(
        "dev_tty_is_the_calls_own_terminal_or_none",
        Need::Namespaces,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let plain = s.call(
        "shell_exec",
        json!({"command": "exec 3<>/dev/tty; echo opened"}),
    );
    let st = structured(&plain);
    assert_ne!(st["exit_code"], json!(0), "{plain}");
    let stderr = st["stderr"].as_str().unwrap_or("");
    assert!(stderr.contains("No such device or address"), "{plain}");
    assert!(!stderr.contains("Permission denied"), "{plain}");
    assert!(!text(&plain).contains("filesystem.devices"), "{plain}");
    let (_, id) = start_job(
        &mut s,
        "printf 'password: ' > /dev/tty; read -r answer < /dev/tty; echo \"got=$answer\"",
        json!({"pty": true, "wait_secs": 10, "until": "password: "}),
    );
    let r = job(
        &mut s,
        json!({"id": id, "input": "hunter2\n", "wait_secs": 10, "until": "got=hunter2"}),
    );
    assert!(read_text(&r).contains("got=hunter2"), "{r}");
}

#[cordon_test::test]
fn signals_end_a_job_and_its_whole_tree() {
    if skip("signals_end_a_job", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let token = unique_token();
    let m = marker(&token);
    let (_, id) = start_job(
        &mut s,
        &format!("sh -c 'sleep {token}; : {m}' & sleep {token}; : {m}"),
        json!({}),
    );
    assert!(eventually(Duration::from_secs(10), || processes_with(
        &token
    )
    .len()
        >= 2));
    let r = job(&mut s, json!({"id": id, "signal": "TERM", "wait_secs": 10}));
    // SIGTERM reaches the group first (both sleeps end by it), then the main shell, which
    // by then has carried on past its `sleep` and ended by itself.
    assert_eq!(structured(&r)["job"]["state"], json!("exited"), "{r}");
    assert_eq!(structured(&r)["exit_code"], json!(0), "{r}");
    assert!(eventually(REAP_WITHIN, || processes_with(&token).is_empty()));
    assert_no_survivors(&token, "a job ended by SIGTERM");
    // KILL too, and a signal to an ended job says so.
    let (_, id) = start_job(&mut s, "sleep 600", json!({}));
    let r = job(&mut s, json!({"id": id, "signal": "KILL", "wait_secs": 10}));
    assert_eq!(structured(&r)["signal"], json!("SIGKILL"), "{r}");
    let again = job(&mut s, json!({"id": id, "signal": "KILL"}));
    assert!(text(&again).contains("already ended"), "{again}");
    // Unknown ids are the caller's to fix.
    let unknown = job(&mut s, json!({"id": "job-999"}));
    assert_eq!(
        structured(&unknown)["error"]["kind"],
        json!("invalid_argument")
    );
    assert!(
        structured(&unknown)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no job job-999 in this session")
    );
}

#[cordon_test::test]
fn a_job_past_its_lifetime_is_killed_and_the_next_result_says_so() {
    if skip("a_job_past_its_lifetime_is_killed", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let audit = sb.outside().join("audit.jsonl");
    let policy = sb.policy(
        "jobs.toml",
        "extends = \"default\"\n[jobs]\nmax_lifetime_secs = 2\n",
    );
    let mut s = StdioServer::start(
        sb.ws(),
        &["--policy", &policy, "--audit-log", audit.to_str().unwrap()],
        "",
        &[],
    );
    let token = unique_token();
    let (_, id) = start_job(&mut s, &format!("sleep {token}"), json!({"wait_secs": 0}));
    assert!(eventually(REAP_WITHIN, || processes_with(&token).is_empty()));
    // Any later result of the session carries the ending, once (the tree is gone a moment
    // before its end is recorded: the git check runs first).
    let mut r = Value::Null;
    eventually(Duration::from_secs(5), || {
        r = s.call("read_file", json!({"path": "nothing-here"}));
        structured(&r).get("job_events").is_some()
    });
    let events = &structured(&r)["job_events"];
    assert_eq!(events[0]["id"], json!(id), "{r}");
    assert_eq!(events[0]["state"], json!("killed"));
    assert!(
        events[0]["reason"]
            .as_str()
            .unwrap()
            .contains("max_lifetime_secs"),
        "{r}"
    );
    let r = s.call("read_file", json!({"path": "nothing-here"}));
    assert!(
        structured(&r).get("job_events").is_none(),
        "reported twice: {r}"
    );
}

#[cordon_test::test]
fn a_job_nobody_reads_is_killed_after_its_idle_time() {
    if skip("a_job_nobody_reads_is_killed", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, Some("[jobs]\nidle_kill_secs = 2\n"));
    let token = unique_token();
    let (_, id) = start_job(&mut s, &format!("sleep {token}"), json!({"wait_secs": 0}));
    assert!(eventually(REAP_WITHIN, || processes_with(&token).is_empty()));
    // Its end is recorded a moment after the tree is gone.
    let r = job(&mut s, json!({"id": id, "wait_secs": 5}));
    assert_eq!(structured(&r)["job"]["state"], json!("killed"), "{r}");
    assert!(text(&r).contains("idle_kill_secs"), "{r}");
}

#[cordon_test::test]
fn a_job_past_its_memory_limit_ends_as_limit() {
    if skip("a_job_past_its_memory_limit", Need::Cgroups) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, Some("[limits]\nmemory_mb = 128\nshm_mb = 16\n"));
    let (_, id) = start_job(
        &mut s,
        "python3 -c 'import time; x = bytearray(1 << 30); time.sleep(60)'",
        json!({"wait_secs": 0}),
    );
    let r = until_ended(&mut s, &id, Duration::from_secs(30));
    assert_eq!(structured(&r)["job"]["state"], json!("limit"), "{r}");
    assert_eq!(structured(&r)["limit"]["kind"], json!("memory"), "{r}");
}

#[cordon_test::test]
fn a_fork_bomb_in_a_job_is_contained() {
    if skip("a_fork_bomb_in_a_job_is_contained", Need::Cgroups) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, Some("[limits]\npids = 64\n"));
    let token = unique_token();
    // A bomb the command rules cannot see (they refuse the shell's `:(){ :|:& };:`).
    let bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.05)";
    let (_, id) = start_job(
        &mut s,
        &format!("python3 -c '{bomb}' {token}"),
        json!({"wait_secs": 2}),
    );
    // The bomb hits the job's pids limit; the server still answers other calls.
    let echo = s.call("shell_exec", json!({"command": "echo alive"}));
    assert_eq!(structured(&echo)["stdout"], json!("alive\n"), "{echo}");
    // The bomb ran (it forked well past a handful) and stopped at the limit.
    let bombs = processes_with(&token).len();
    assert!((16..=64).contains(&bombs), "{bombs} bomb processes");
    job(&mut s, json!({"id": id, "signal": "KILL", "wait_secs": 10}));
    assert!(eventually(REAP_WITHIN, || processes_with(&token).is_empty()));
    assert_no_survivors(&token, "a fork bomb in a job");
}

/// The server's resident set size in KiB (from /proc).
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[cordon_test::test]
fn a_gibibyte_of_job_output_costs_the_server_its_ring_not_the_flood() {
    if skip("a_gibibyte_of_job_output", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, Some("[jobs]\nring_kb = 256\n"));
    let before = rss_kib(s.pid());
    let (_, id) = start_job(
        &mut s,
        "head -c 1073741824 /dev/zero | tr '\\0' x",
        json!({"wait_secs": 0}),
    );
    let mut peak = before;
    let mut dropped = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    let ended = loop {
        peak = peak.max(rss_kib(s.pid()));
        let r = job(&mut s, json!({"id": id, "wait_secs": 1, "max_bytes": 1024}));
        dropped += structured(&r)["dropped_bytes"].as_u64().unwrap();
        if structured(&r)["job"]["state"] != json!("running")
            || std::time::Instant::now() > deadline
        {
            break r;
        }
    };
    peak = peak.max(rss_kib(s.pid()));
    assert_eq!(
        structured(&ended)["job"]["state"],
        json!("exited"),
        "{ended}"
    );
    // Almost all of it fell out of the ring before anyone read it, and says so.
    let mut read_all = dropped;
    loop {
        let r = job(&mut s, json!({"id": id, "max_bytes": 1048576}));
        read_all += structured(&r)["output"].as_str().unwrap_or("").len() as u64;
        read_all += structured(&r)["dropped_bytes"].as_u64().unwrap();
        if !structured(&r)["truncated"].as_bool().unwrap() {
            break;
        }
    }
    assert!(dropped > 1 << 29, "dropped only {dropped}");
    assert!(read_all > 0);
    // The server's memory grew by far less than the output (two 256 KiB rings, buffers).
    let grew_mib = peak.saturating_sub(before) / 1024;
    assert!(
        grew_mib < 64,
        "server RSS grew by {grew_mib} MiB for 1 GiB of output"
    );
}

#[cordon_test::test]
fn a_fifth_job_is_refused_with_the_policy_line_to_change() {
    if skip("a_fifth_job_is_refused", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    for _ in 0..4 {
        start_job(&mut s, "sleep 600", json!({"wait_secs": 0}));
    }
    let r = s.call(
        "shell_exec",
        json!({"command": "sleep 600", "background": true}),
    );
    let error = &structured(&r)["error"];
    assert_eq!(error["kind"], json!("resource_limit"), "{r}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("max_per_session"),
        "{r}"
    );
    assert_eq!(structured(&r)["job"], Value::Null);
    let list = job(&mut s, json!({}));
    assert_eq!(
        structured(&list)["jobs"].as_array().unwrap().len(),
        4,
        "{list}"
    );
    // The refused start made no log: only the four jobs' logs are in the spill area.
    let logs = std::fs::read_dir(sb.ws().join(".cordon/outputs"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("job-"))
        })
        .count();
    assert_eq!(logs, 4, "a refused start left a log file");
}

#[cordon_test::test]
fn strict_disables_jobs_and_says_so() {
    if skip("strict_disables_jobs", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = StdioServer::start(sb.ws(), &["--policy", "strict"], "", &[]);
    let r = s.call(
        "shell_exec",
        json!({"command": "sleep 600", "background": true}),
    );
    assert_eq!(structured(&r)["error"]["kind"], json!("denied"), "{r}");
    assert!(text(&r).contains("max_per_session = 0"), "{r}");
}

#[cordon_test::test]
fn a_denied_command_never_starts_as_a_job() {
    if skip(
        "a_denied_command_never_starts_as_a_job",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let token = unique_token();
    let mut s = server(
        &sb,
        Some(
            "[[commands.rules]]\nname = \"no-sleep\"\ndecision = \"deny\"\n\
             match = { program = [\"sleep\"] }\njustification = \"test\"\n\
             examples = { match = [\"sleep 1\"], not_match = [\"echo sleep\"] }\n",
        ),
    );
    let r = s.call(
        "shell_exec",
        json!({"command": format!("sleep {token}"), "background": true}),
    );
    assert_eq!(structured(&r)["error"]["kind"], json!("denied"), "{r}");
    assert_eq!(structured(&r)["job"], Value::Null);
    std::thread::sleep(Duration::from_millis(500));
    assert_no_survivors(&token, "a denied background command");
    assert!(
        structured(&job(&mut s, json!({})))["jobs"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

fn leaves_no_job(ending: &str, end: impl FnOnce(&mut StdioServer)) {
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let token = unique_token();
    let m = marker(&token);
    start_job(
        &mut s,
        &format!("setsid sh -c 'sleep {token}; : {m}' & sleep {token}; : {m}"),
        json!({}),
    );
    assert!(eventually(Duration::from_secs(10), || processes_with(
        &token
    )
    .len()
        >= 2));
    end(&mut s);
    assert!(
        eventually(REAP_WITHIN, || processes_with(&token).is_empty()),
        "{ending}: the job outlived its owner"
    );
    assert_no_survivors(&token, ending);
}

#[cordon_test::test]
fn closing_stdin_ends_every_job() {
    if skip("closing_stdin_ends_every_job", Need::Namespaces) {
        return;
    }
    leaves_no_job("stdin closed", |s| s.close_stdin());
}

#[cordon_test::test]
fn sigterm_of_the_server_ends_every_job() {
    if skip("sigterm_of_the_server_ends_every_job", Need::Namespaces) {
        return;
    }
    leaves_no_job("SIGTERM", |s| s.signal(libc::SIGTERM));
}

#[cordon_test::test]
fn sigkill_of_the_server_ends_every_job() {
    if skip("sigkill_of_the_server_ends_every_job", Need::Namespaces) {
        return;
    }
    leaves_no_job("SIGKILL", |s| s.signal(libc::SIGKILL));
}

#[cordon_test::test]
fn a_job_that_ends_within_its_wait_reports_the_git_change_cordon_refused() {
    // The background start answers once the job has ended: what the end's git check found
    // is that answer's, as it would be a `job` read's.
    if skip(
        "a_job_that_ends_within_its_wait_reports_the_git_change",
        Need::Namespaces,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let ok = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(sb.ws())
        .status()
        .unwrap()
        .success();
    assert!(ok, "git init");
    let mut s = server(&sb, None);
    let r = s.call(
        "shell_exec",
        json!({"command": "git init -q sub && git -C sub -c user.email=a@b.invalid -c user.name=a \
                           commit -q --allow-empty -m s && \
                           git -C sub config core.fsmonitor 'touch pwned' && git add sub",
               "background": true, "wait_secs": 10}),
    );
    assert_eq!(structured(&r)["error"]["kind"], json!("denied"), "{r}");
    let config = std::fs::read_to_string(sb.ws().join(".git/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
}

#[cordon_test::test]
fn a_job_that_plants_a_git_hook_is_caught_while_it_runs() {
    if skip("a_job_that_plants_a_git_hook", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(sb.ws())
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    let mut s = server(&sb, None);
    let hook = sb.ws().join(".git/hooks/pre-commit");
    let (r, id) = start_job(
        &mut s,
        "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; echo planted; sleep 600",
        json!({"wait_secs": 2}),
    );
    // Either the write was refused outright (the hooks are read-only in the view) or the
    // guard moved the hook away: within seconds, while the job still runs.
    let caught = eventually(Duration::from_secs(5), || !hook.exists());
    let still = job(&mut s, json!({"id": id}));
    assert!(caught, "the planted hook stayed while the job ran: {r}");
    assert_eq!(
        structured(&still)["job"]["state"],
        json!("running"),
        "{still}"
    );
}

#[cordon_test::test]
fn forwarding_reaches_a_job_server_from_the_host_and_nothing_else() {
    if skip("forwarding_reaches_a_job_server", Need::Namespaces) {
        return;
    }
    let free_port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (forwarded, other) = (free_port(), free_port());
    let sb = Sandbox::new();
    let mut s = server(&sb, Some(&format!("[jobs]\nforward = [{forwarded}]\n")));
    for port in [forwarded, other] {
        let (_, id) = start_job(
            &mut s,
            &format!("python3 -m http.server {port} --bind 127.0.0.1"),
            json!({"wait_secs": 0}),
        );
        let ready = job(
            &mut s,
            json!({"id": id, "wait_secs": 20, "until": "Serving"}),
        );
        // Both servers really listen inside the sandbox, so the unforwarded one's silence
        // from the host below is the forwarding's doing, not a server that never started.
        let said = format!(
            "{}{}",
            structured(&ready)["output"].as_str().unwrap_or_default(),
            structured(&ready)["stderr"].as_str().unwrap_or_default()
        );
        assert!(said.contains("Serving"), "port {port}: {ready}");
        if port == forwarded {
            // The listening ports are read at most once a second: the URL shows within that.
            let url = json!([format!("http://127.0.0.1:{forwarded}")]);
            let mut seen = structured(&ready)["job"]["forwarded"].clone();
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while seen != url && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(250));
                seen = structured(&job(&mut s, json!({"id": id})))["job"]["forwarded"].clone();
            }
            assert_eq!(seen, url, "{ready}");
        }
    }
    let get = |port: u16| {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        c.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
        let mut answer = String::new();
        c.read_to_string(&mut answer).ok()?;
        Some(answer)
    };
    let answer = get(forwarded).unwrap_or_default();
    assert!(
        answer.starts_with("HTTP/1.0 200"),
        "forwarded port: {answer:?}"
    );
    // The other server listens on the same port number inside the sandbox, not on the host.
    let unforwarded = get(other);
    assert!(
        unforwarded.as_deref().is_none_or(|a| !a.contains("200")),
        "an unforwarded port was reachable from the host: {unforwarded:?}"
    );
}

/// A port free on the host's 127.0.0.1 now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `python3 -m http.server port --bind bind` as a job and waits until it serves.
fn http_server_job(s: &mut StdioServer, port: u16, bind: &str) -> String {
    let (_, id) = start_job(
        s,
        &format!("python3 -m http.server {port} --bind {bind}"),
        json!({"wait_secs": 0}),
    );
    let ready = job(s, json!({"id": id, "wait_secs": 20, "until": "Serving"}));
    let said = format!(
        "{}{}",
        structured(&ready)["output"].as_str().unwrap_or_default(),
        structured(&ready)["stderr"].as_str().unwrap_or_default()
    );
    assert!(said.contains("Serving"), "{bind} port {port}: {ready}");
    id
}

/// Job `id`'s `forwarded` once it is `urls` (the listening ports are read at most once a
/// second), or as it is after a few seconds.
fn forwarded_settles(s: &mut StdioServer, id: &str, urls: &[String]) -> Value {
    let want = json!(urls);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let seen = structured(&job(s, json!({"id": id})))["job"]["forwarded"].clone();
        if seen == want || std::time::Instant::now() > deadline {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// An HTTP/1.0 GET of `/` on the host's 127.0.0.1:`port`.
fn host_get(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    c.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut answer = String::new();
    c.read_to_string(&mut answer).ok()?;
    Some(answer)
}

#[cordon_test::test]
fn forwarding_reaches_a_job_server_on_ipv6_loopback() {
    if skip("forwarding_reaches_a_job_server_on_ipv6", Need::Namespaces) {
        return;
    }
    let port = free_port();
    let sb = Sandbox::new();
    let mut s = server(&sb, Some(&format!("[jobs]\nforward = [{port}]\n")));
    // Node's and Vite's `localhost` where `/etc/hosts` says `::1 localhost`.
    let id = http_server_job(&mut s, port, "::1");
    let url = format!("http://127.0.0.1:{port}");
    let seen = forwarded_settles(&mut s, &id, std::slice::from_ref(&url));
    assert_eq!(seen, json!([url]));
    // The relay dials ::1, where the server is: 127.0.0.1 would refuse (a reset here).
    let answer = host_get(port).unwrap_or_default();
    assert!(
        answer.starts_with("HTTP/1.0 200"),
        "through {url}: {answer:?}"
    );
}

#[cordon_test::test]
fn forwarding_lists_a_job_server_on_the_ipv6_wildcard() {
    if skip(
        "forwarding_lists_a_job_server_on_the_ipv6",
        Need::Namespaces,
    ) {
        return;
    }
    let port = free_port();
    let sb = Sandbox::new();
    let mut s = server(&sb, Some(&format!("[jobs]\nforward = [{port}]\n")));
    let id = http_server_job(&mut s, port, "::");
    let url = format!("http://127.0.0.1:{port}");
    let seen = forwarded_settles(&mut s, &id, std::slice::from_ref(&url));
    assert_eq!(
        seen,
        json!([url]),
        "a server on `::` is in /proc/net/tcp6 only"
    );
    let answer = host_get(port).unwrap_or_default();
    assert!(
        answer.starts_with("HTTP/1.0 200"),
        "through {url}: {answer:?}"
    );
}

#[cordon_test::test]
fn each_job_lists_only_its_own_forwarded_ports() {
    if skip("each_job_lists_only_its_own_forwarded", Need::Namespaces) {
        return;
    }
    let (a, b) = (free_port(), free_port());
    let sb = Sandbox::new();
    let mut s = server(&sb, Some(&format!("[jobs]\nforward = [{a}, {b}]\n")));
    let first = http_server_job(&mut s, a, "127.0.0.1");
    let second = http_server_job(&mut s, b, "127.0.0.1");
    // Both listen now: each job's `forwarded` names its own server, not the other's.
    for (id, port) in [(&first, a), (&second, b)] {
        let url = format!("http://127.0.0.1:{port}");
        let seen = forwarded_settles(&mut s, id, std::slice::from_ref(&url));
        assert_eq!(seen, json!([url]), "{id}");
    }
    for port in [a, b] {
        let answer = host_get(port).unwrap_or_default();
        assert!(
            answer.starts_with("HTTP/1.0 200"),
            "port {port}: {answer:?}"
        );
    }
}

#[cordon_test::test]
fn connections_through_the_forward_keep_a_quiet_job_server_alive() {
    if skip("connections_through_the_forward_keep", Need::Namespaces) {
        return;
    }
    let port = free_port();
    let sb = Sandbox::new();
    let mut s = server(
        &sb,
        Some(&format!("[jobs]\nidle_kill_secs = 3\nforward = [{port}]\n")),
    );
    // No output (its request log goes nowhere) and nobody reads it: only the connections
    // relayed from the host show that it is in use.
    let (_, id) = start_job(
        &mut s,
        &format!("python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1"),
        json!({"wait_secs": 0}),
    );
    let ok = |port| host_get(port).is_some_and(|a| a.starts_with("HTTP/1.0 200"));
    assert!(
        eventually(Duration::from_secs(10), || ok(port)),
        "the server never answered through the forward"
    );
    let until = std::time::Instant::now() + Duration::from_secs(9);
    while std::time::Instant::now() < until {
        assert!(ok(port), "the job stopped answering while it was in use");
        std::thread::sleep(Duration::from_millis(700));
    }
    let r = job(&mut s, json!({"id": id}));
    assert_eq!(structured(&r)["job"]["state"], json!("running"), "{r}");
}

/// Issue 32, item 3: a quiet job server that later calls use (no output, no forward, nobody
/// reading the job) is in use, and is not ended as idle.
#[cordon_test::test]
fn connections_from_later_calls_keep_a_quiet_job_server_alive() {
    if skip("connections_from_later_calls_keep", Need::Namespaces) {
        return;
    }
    let port = free_port();
    let sb = Sandbox::new();
    let mut s = server(&sb, Some("[jobs]\nidle_kill_secs = 3\n"));
    let (_, id) = start_job(
        &mut s,
        &format!("python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1"),
        json!({"wait_secs": 0}),
    );
    let get = format!(
        "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/').status)\""
    );
    let ok = |s: &mut StdioServer| {
        let r = s.call("shell_exec", json!({"command": get}));
        structured(&r)["stdout"]
            .as_str()
            .unwrap_or("")
            .contains("200")
    };
    assert!(
        eventually(Duration::from_secs(10), || ok(&mut s)),
        "the server never answered a later call"
    );
    let until = std::time::Instant::now() + Duration::from_secs(9);
    while std::time::Instant::now() < until {
        assert!(ok(&mut s), "the job stopped answering while it was in use");
        std::thread::sleep(Duration::from_millis(500));
    }
    let r = job(&mut s, json!({"id": id}));
    assert_eq!(structured(&r)["job"]["state"], json!("running"), "{r}");
}

#[cordon_test::test]
fn a_job_about_to_be_ended_as_idle_says_so_first() {
    if skip("a_job_about_to_be_ended_as_idle", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, Some("[jobs]\nidle_kill_secs = 3\n"));
    let id = s.send_request("logging/setLevel", json!({"level": "info"}));
    s.response(id, crate::common::HANG_GUARD).expect("setLevel");
    let token = unique_token();
    let (_, job_id) = start_job(&mut s, &format!("sleep {token}"), json!({"wait_secs": 0}));
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut seen: Vec<Value> = Vec::new();
    while !seen
        .iter()
        .any(|n| n["params"]["data"]["event"] == "job_ended")
        && std::time::Instant::now() < deadline
    {
        // Every notification so far, in order.
        seen = s
            .notifications("notifications/message", Duration::from_millis(300))
            .into_iter()
            .filter(|n| n["params"]["data"]["job"] == json!(job_id))
            .collect();
    }
    let events: Vec<&Value> = seen.iter().map(|n| &n["params"]["data"]["event"]).collect();
    assert_eq!(
        events,
        [&json!("job_idle"), &json!("job_ended")],
        "one warning, then the end: {seen:?}"
    );
    let warning = &seen[0]["params"];
    assert_eq!(warning["level"], json!("warning"), "{warning}");
    let message = warning["data"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("idle_kill_secs"), "{message}");
}

#[cordon_test::test]
fn http_sessions_cannot_see_each_others_jobs_and_delete_ends_a_sessions_jobs() {
    if skip(
        "http_sessions_cannot_see_each_others_jobs",
        Need::Namespaces,
    ) {
        return;
    }
    use crate::http_client::{HttpServer, request};
    let ws = tempfile::tempdir().unwrap();
    let server = HttpServer::with_token(ws.path());
    let (a, b) = (server.open_session(), server.open_session());
    let token = unique_token();
    let m = marker(&token);
    let started = server.call(
        &a,
        1,
        "shell_exec",
        json!({"command": format!("sleep {token}; : {m}"), "background": true, "wait_secs": 0}),
    );
    let id = started["result"]["structuredContent"]["job"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_owned();
    assert!(eventually(Duration::from_secs(10), || processes_with(
        &token
    )
    .len()
        == 2));
    // The other session neither lists nor reads nor drives it.
    let listed = server.call(&b, 2, "job", json!({}));
    assert_eq!(
        listed["result"]["structuredContent"]["jobs"],
        json!([]),
        "{listed}"
    );
    for args in [
        json!({"id": id}),
        json!({"id": id, "signal": "KILL"}),
        json!({"id": id, "input": "x\n"}),
    ] {
        let other = server.call(&b, 3, "job", args);
        let error = &other["result"]["structuredContent"]["error"];
        assert_eq!(error["kind"], json!("invalid_argument"), "{other}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains(&format!("no job {id} in this session"))
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        processes_with(&token).len(),
        2,
        "session b's KILL reached a's job"
    );
    // Its own session reads it.
    let own = server.call(&a, 4, "job", json!({"id": id}));
    assert_eq!(
        own["result"]["structuredContent"]["job"]["state"],
        json!("running"),
        "{own}"
    );
    // DELETE of the session ends its jobs.
    let mut headers = server.auth();
    headers.push(("Mcp-Session-Id".into(), a));
    let deleted = request(server.addr, "DELETE", &headers, b"");
    assert!(deleted.status < 300, "{deleted:?}");
    assert!(
        eventually(REAP_WITHIN, || processes_with(&token).is_empty()),
        "a job outlived its DELETEd session"
    );
    assert_no_survivors(&token, "a job of a DELETEd session");
}

#[cordon_test::test]
fn a_job_ending_is_a_log_message_of_its_session() {
    if skip("a_job_ending_is_a_log_message", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, Some("[jobs]\nmax_lifetime_secs = 1\n"));
    let id = s.send_request("logging/setLevel", json!({"level": "info"}));
    s.response(id, crate::common::HANG_GUARD).expect("setLevel");
    let token = unique_token();
    let (_, job_id) = start_job(
        &mut s,
        &format!("sleep {token} # sk-secret-in-the-command"),
        json!({"wait_secs": 0}),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let ended = loop {
        let found: Vec<Value> = s
            .notifications("notifications/message", Duration::from_millis(300))
            .into_iter()
            .filter(|n| n["params"]["data"]["event"] == "job_ended")
            .collect();
        if !found.is_empty() || std::time::Instant::now() > deadline {
            break found;
        }
    };
    assert_eq!(ended.len(), 1, "no job_ended message");
    let params = &ended[0]["params"];
    assert_eq!(params["level"], json!("warning"), "{params}");
    assert_eq!(params["data"]["job"], json!(job_id));
    assert!(
        !params.to_string().contains("sk-secret"),
        "the command line leaked: {params}"
    );
}

#[cordon_test::test]
fn a_job_server_stays_reachable_after_the_view_is_rebuilt() {
    if skip(
        "a_job_server_stays_reachable_after_a_rebuild",
        Need::Namespaces,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let (_, id) = start_job(
        &mut s,
        "python3 -m http.server 8000 --bind 127.0.0.1",
        json!({"wait_secs": 0}),
    );
    job(
        &mut s,
        json!({"id": id, "wait_secs": 20, "until": "Serving"}),
    );
    // `git init` makes the operator's repository appear (cordon makes it on the host at the
    // call's end): the next call runs in a new sandbox init whose view binds it read-only
    // where the shadow gitdir's alternate points.
    let init = s.call("shell_exec", json!({"command": "git init -q && echo made"}));
    assert_eq!(structured(&init)["stdout"], json!("made\n"), "{init}");
    let hooks = s.call(
        "shell_exec",
        json!({"command": "test -d \"$(cat .git/objects/info/alternates)\" && echo bound"}),
    );
    assert_eq!(
        structured(&hooks)["stdout"],
        json!("bound\n"),
        "the view was not rebuilt (the operator's objects are not bound): {hooks}"
    );
    // The job still runs in the first init, its server in the namespace the new init joined.
    let curl = s.call(
        "shell_exec",
        json!({"command": "curl -sS -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/"}),
    );
    assert_eq!(structured(&curl)["stdout"], json!("200"), "{curl}");
    let still = job(&mut s, json!({"id": id}));
    assert_eq!(
        structured(&still)["job"]["state"],
        json!("running"),
        "{still}"
    );
}

#[cordon_test::test]
fn the_control_character_count_is_a_field_never_text_in_the_output() {
    if skip("the_control_character_count_is_a_field", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    // A plain call's stdout: coloured text, the count beside it.
    let call = s.call(
        "shell_exec",
        json!({"command": "printf '\\033[32mgreen\\033[0m\\n'"}),
    );
    assert_eq!(structured(&call)["stdout"], json!("green\n"), "{call}");
    assert_eq!(
        structured(&call)["control_chars_removed"],
        json!(2),
        "{call}"
    );
    // A REPL under a pty: its prompt ends the output, as the terminal showed it.
    let (started, id) = start_job(
        &mut s,
        "exec python3 -i -q",
        json!({"pty": true, "wait_secs": 2}),
    );
    let mut seen = structured(&started)["stdout"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    if !seen.contains(">>> ") {
        let read = job(&mut s, json!({"id": id, "wait_secs": 5, "until": ">>> "}));
        seen = structured(&read)["output"]
            .as_str()
            .unwrap_or("")
            .to_owned();
    }
    let r = job(
        &mut s,
        json!({"id": id, "input": "print('\\033[1mbold\\033[0m')\n", "wait_secs": 5, "until": "bold[\\s\\S]*>>> "}),
    );
    let output = structured(&r)["output"].as_str().unwrap_or("");
    assert!(
        output.ends_with(">>> "),
        "the output does not end at the prompt: {r} (first: {seen})"
    );
    assert!(!output.contains("removed"), "{r}");
    assert!(
        structured(&r)["control_chars_removed"]
            .as_u64()
            .unwrap_or(0)
            >= 2,
        "{r}"
    );
    job(&mut s, json!({"id": id, "signal": "KILL"}));
}

/// A program that says which signals it got, and cleans up for half a second on SIGTERM.
const SIGNAL_APP: &str = r#"import signal, sys, time
def on_int(n, f): print("got-int", flush=True)
def on_term(n, f):
    print("term-received", flush=True)
    time.sleep(0.5)
    print("cleaned-up", flush=True)
    sys.exit(0)
signal.signal(signal.SIGINT, on_int)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(0.1)
"#;

/// The output of a read and of the reads before it, as one text.
fn read_text(r: &Value) -> String {
    let s = structured(r);
    format!(
        "{}{}{}",
        s["output"].as_str().unwrap_or(""),
        s["stdout"].as_str().unwrap_or(""),
        s["stderr"].as_str().unwrap_or("")
    )
}

#[cordon_test::test]
fn signals_reach_the_program_the_jobs_shell_runs_and_term_lets_it_clean_up() {
    if skip(
        "signals_reach_the_program_the_jobs_shell_runs",
        Need::Cgroups,
    ) {
        return;
    }
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("app.py"), SIGNAL_APP).unwrap();
    let mut s = server(&sb, None);
    // `sh -c` stays the main process: the program is its child.
    let (started, id) = start_job(
        &mut s,
        "python3 app.py; echo shell-after",
        json!({"wait_secs": 10, "until": "ready"}),
    );
    assert!(read_text(&started).contains("ready"), "{started}");
    let int = job(&mut s, json!({"id": id, "signal": "INT", "wait_secs": 2}));
    assert!(
        read_text(&int).contains("got-int"),
        "SIGINT never reached the program under the job's shell: {int}"
    );
    assert_eq!(structured(&int)["job"]["state"], json!("running"), "{int}");
    assert!(text(&int).contains("outlived SIGINT"), "{int}");
    // (Its shell got the SIGINT too, as from a terminal: dash ends with it once the program
    // does.) A fresh run for TERM: the program cleans up, then its shell carries on and ends
    // by itself.
    job(&mut s, json!({"id": id, "signal": "KILL"}));
    let (_, id) = start_job(
        &mut s,
        "python3 app.py; echo shell-after",
        json!({"wait_secs": 10, "until": "ready"}),
    );
    let term = job(&mut s, json!({"id": id, "signal": "TERM", "wait_secs": 10}));
    let mut seen = read_text(&term);
    let last = if structured(&term)["job"]["state"] == json!("running") {
        let r = until_ended(&mut s, &id, Duration::from_secs(15));
        seen.push_str(&read_text(&r));
        r
    } else {
        term.clone()
    };
    assert!(seen.contains("term-received"), "{term} {last}");
    assert!(
        seen.contains("cleaned-up") && seen.contains("shell-after"),
        "SIGTERM did not give the program its time to clean up: {term} {last}"
    );
    assert_eq!(structured(&last)["job"]["state"], json!("exited"), "{last}");
    assert_eq!(structured(&last)["exit_code"], json!(0), "{last}");
}

#[cordon_test::test]
fn a_job_that_outlives_sigterm_is_killed_after_its_grace_and_the_end_says_so() {
    if skip("a_job_that_outlives_sigterm", Need::Cgroups) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let token = unique_token();
    // Signalled only once the trap is set (a SIGTERM before it would end the job at once).
    let (_, id) = start_job(
        &mut s,
        &format!("trap '' TERM; echo armed; sleep {token}"),
        json!({"wait_secs": 10, "until": "armed"}),
    );
    let term = job(&mut s, json!({"id": id, "signal": "TERM", "wait_secs": 1}));
    assert_eq!(
        structured(&term)["job"]["state"],
        json!("running"),
        "{term}"
    );
    assert!(text(&term).contains("outlived SIGTERM"), "{term}");
    let last = until_ended(&mut s, &id, Duration::from_secs(20));
    assert_eq!(structured(&last)["job"]["state"], json!("killed"), "{last}");
    assert!(text(&last).contains("outlived SIGTERM"), "{last}");
    assert!(eventually(REAP_WITHIN, || processes_with(&token).is_empty()));
}

/// A program under the job's shell that dies of the SIGTERM sent: the shell reports 143, and
/// the job was stopped (`killed`), as a dev server stopped with TERM is.
#[cordon_test::test]
fn a_shells_program_ended_by_sigterm_is_a_stopped_job() {
    if skip("a_shells_program_ended_by_sigterm", Need::Cgroups) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let token = unique_token();
    // A list, so the shell waits for `sleep` instead of becoming it; `&&` ends it with
    // sleep's status.
    let (_, id) = start_job(
        &mut s,
        &format!("sleep {token} && echo never"),
        json!({"wait_secs": 0}),
    );
    // The program must be running under the shell before the signal: sent earlier (a busy
    // machine), it reaches only the shell's group, the shell then starts `sleep` and waits,
    // and the stop ends the shell itself — a different case.
    assert!(
        eventually(REAP_WITHIN, || !processes_with(&token).is_empty()),
        "the job's sleep never started"
    );
    let term = job(&mut s, json!({"id": id, "signal": "TERM", "wait_secs": 10}));
    let last = if structured(&term)["job"]["state"] == json!("running") {
        until_ended(&mut s, &id, Duration::from_secs(15))
    } else {
        term
    };
    assert_eq!(structured(&last)["job"]["state"], json!("killed"), "{last}");
    assert_eq!(structured(&last)["exit_code"], json!(143), "{last}");
    assert!(!read_text(&last).contains("never"), "{last}");
    assert!(text(&last).contains("stopped by the SIGTERM"), "{last}");
}

#[cordon_test::test]
fn a_read_after_input_waits_for_the_answer_not_the_echo() {
    if skip("a_read_after_input_waits_for_the_answer", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let (_, id) = start_job(
        &mut s,
        "exec python3 -i -q",
        json!({"pty": true, "wait_secs": 2}),
    );
    job(&mut s, json!({"id": id, "wait_secs": 5, "until": ">>> "}));
    // No `until`: the read settles after the answer, not at the terminal's echo.
    let r = job(
        &mut s,
        json!({"id": id, "input": "import time; time.sleep(0.5); print(6 * 7)\n", "wait_secs": 10}),
    );
    let output = structured(&r)["output"].as_str().unwrap_or("");
    assert!(
        output.contains("42"),
        "the read returned before the answer: {r}"
    );
    assert!(output.ends_with(">>> "), "{r}");
    // `until` never matches the echo of the input just sent.
    let r = job(
        &mut s,
        json!({"id": id, "input": "time.sleep(0.5); print('-'.join(['mark', 'done']))\n",
               "wait_secs": 10, "until": "mark"}),
    );
    assert!(
        read_text(&r).contains("mark-done"),
        "`until` matched the echo of the input: {r}"
    );
    // Input that ends the program: the read reports the end. Sent at the prompt, as a user
    // would: a Ctrl-D that reaches the terminal while Python is still printing (the `until`
    // above returns before the next prompt) is read by readline as no input at all.
    job(&mut s, json!({"id": id, "wait_secs": 5, "until": ">>> $"}));
    let r = job(&mut s, json!({"id": id, "input": "\u{4}", "wait_secs": 10}));
    assert_eq!(structured(&r)["job"]["state"], json!("exited"), "{r}");
    assert_eq!(structured(&r)["exit_code"], json!(0), "{r}");
}

#[cordon_test::test]
fn a_background_start_returns_at_its_ready_line_and_restart_and_resize_drive_it() {
    if skip(
        "a_background_start_returns_at_its_ready_line",
        Need::Namespaces,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let token = unique_token();
    let (started, id) = start_job(
        &mut s,
        &format!("echo run >> runs.txt; sleep 0.3; echo server-ready; sleep {token}"),
        json!({"wait_secs": 20, "until": "server-ready"}),
    );
    assert!(read_text(&started).contains("server-ready"), "{started}");
    assert_eq!(
        structured(&started)["job"]["state"],
        json!("running"),
        "{started}"
    );
    let restarted = job(
        &mut s,
        json!({"id": id, "restart": true, "wait_secs": 20, "until": "server-ready"}),
    );
    assert_eq!(
        structured(&restarted)["job"]["id"],
        json!(id),
        "{restarted}"
    );
    assert_eq!(
        structured(&restarted)["job"]["state"],
        json!("running"),
        "{restarted}"
    );
    assert!(
        read_text(&restarted).contains("server-ready"),
        "{restarted}"
    );
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("runs.txt")).unwrap(),
        "run\nrun\n"
    );
    // One tree only: the first run's went with the restart. (The ready line comes before the
    // new run's `sleep` starts: wait for it, then there must be exactly one.)
    let mut found = processes_with(&token);
    eventually(Duration::from_secs(5), || {
        found = processes_with(&token);
        !found.is_empty()
    });
    assert_eq!(found.len(), 1, "{found:?}");
    job(&mut s, json!({"id": id, "signal": "KILL"}));

    // A pty job's terminal is resized; its program hears SIGWINCH.
    let (_, tty) = start_job(
        &mut s,
        "exec python3 -c \"import os, signal, time\nsignal.signal(signal.SIGWINCH, lambda *a: print('size', os.get_terminal_size().columns, flush=True))\nprint('ready', flush=True)\ntime.sleep(100)\"",
        json!({"pty": true, "wait_secs": 10, "until": "ready"}),
    );
    let resized = job(
        &mut s,
        json!({"id": tty, "cols": 100, "rows": 30, "wait_secs": 10, "until": "size 100"}),
    );
    assert!(read_text(&resized).contains("size 100"), "{resized}");
    let refused = job(&mut s, json!({"id": id, "cols": 100, "rows": 30}));
    assert_eq!(
        structured(&refused)["error"]["kind"],
        json!("invalid_argument"),
        "{refused}"
    );
    job(&mut s, json!({"id": tty, "signal": "KILL"}));
}

const NO_TOUCH: &str = "[[commands.rules]]\nname = \"no-touch\"\ndecision = \"deny\"\n\
     match = { program = [\"touch\"] }\njustification = \"test\"\n\
     examples = { match = [\"touch x\"], not_match = [\"echo touch\"] }\n";

/// Issue 32, item 4: a line typed into a job's shell is judged like a `shell_exec` command. A
/// denied line is never written (so it never runs), under a pty and through a pipe alike; a
/// command sent in pieces is judged whole; a line typed ahead while the shell runs another
/// program is judged too; the shell keeps running what is allowed.
#[cordon_test::test]
fn input_to_a_jobs_shell_is_judged_by_the_command_rules() {
    if skip(
        "input_to_a_jobs_shell_is_judged_by_the_command_rules",
        Need::Namespaces,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, Some(NO_TOUCH));
    let denied = |r: &Value| {
        assert_eq!(structured(r)["error"]["kind"], json!("denied"), "{r}");
        assert!(text(r).contains("no-touch"), "{r}");
    };
    for pty in [true, false] {
        let tag = if pty { "pty" } else { "pipe" };
        let (_, id) = start_job(
            &mut s,
            "exec bash --norc --noprofile -i",
            json!({"pty": pty, "wait_secs": 1}),
        );
        let alive = |s: &mut StdioServer, n: u32| {
            let r = job(
                s,
                json!({"id": id, "input": format!("echo alive-$(({n} * 7))\n"),
                       "wait_secs": 10, "until": format!("alive-{}", n * 7)}),
            );
            assert!(read_text(&r).contains(&format!("alive-{}", n * 7)), "{r}");
        };
        alive(&mut s, 1);
        denied(&job(
            &mut s,
            json!({"id": id, "input": format!("touch whole-{tag}\n"), "wait_secs": 1}),
        ));
        // Typed ahead while `sleep` runs in front: the shell reads it next, so it is judged.
        let r = job(&mut s, json!({"id": id, "input": "sleep 1\n"}));
        assert_eq!(structured(&r)["error"], Value::Null, "{r}");
        denied(&job(
            &mut s,
            json!({"id": id, "input": format!("touch ahead-{tag}\n")}),
        ));
        alive(&mut s, 2);
        if pty {
            // In pieces: the first runs nothing and is kept; the line it becomes is judged.
            let r = job(&mut s, json!({"id": id, "input": "touch "}));
            assert_eq!(structured(&r)["error"], Value::Null, "{r}");
            denied(&job(
                &mut s,
                json!({"id": id, "input": "pieces-pty\n", "wait_secs": 1}),
            ));
            // Ctrl-C clears the shell's line, and what was kept with it.
            job(&mut s, json!({"id": id, "input": "\u{3}", "wait_secs": 1}));
            // Editing keys would make the shell run another line than the one judged.
            let r = job(&mut s, json!({"id": id, "input": "touch x\u{7f}\n"}));
            assert_eq!(
                structured(&r)["error"]["kind"],
                json!("invalid_argument"),
                "{r}"
            );
            assert!(text(&r).contains("Backspace"), "{r}");
        }
        alive(&mut s, 3);
        if !pty {
            // The end of input makes the shell run what its line holds, newline or not.
            for piece in ["touch ", "eof-pipe"] {
                let r = job(&mut s, json!({"id": id, "input": piece}));
                assert_eq!(structured(&r)["error"], Value::Null, "{r}");
            }
            denied(&job(
                &mut s,
                json!({"id": id, "input": "\u{4}", "wait_secs": 1}),
            ));
        }
        job(&mut s, json!({"id": id, "signal": "KILL", "wait_secs": 5}));
    }
    std::thread::sleep(Duration::from_millis(1500));
    for name in [
        "whole-pty",
        "ahead-pty",
        "pieces-pty",
        "whole-pipe",
        "ahead-pipe",
        "eof-pipe",
    ] {
        assert!(
            !sb.ws().join(name).exists(),
            "{name}: a denied line reached the shell"
        );
    }
    // A job with no shell (the REPL itself): its input is no command line, and is not judged.
    let (_, id) = start_job(
        &mut s,
        "exec python3 -i -q",
        json!({"pty": true, "wait_secs": 5, "until": ">>> "}),
    );
    let r = job(
        &mut s,
        json!({"id": id, "input": "touch = 41; print(touch + 1)\n", "wait_secs": 10, "until": "42"}),
    );
    assert_eq!(structured(&r)["error"], Value::Null, "{r}");
    assert!(read_text(&r).contains("42"), "{r}");
}

/// Issue 32, item 4: an `ask` rule asks about a line typed into a job's shell as it asks about
/// a `shell_exec` command; with nobody to ask it is refused at once, naming the rule.
#[cordon_test::test]
fn input_to_a_jobs_shell_meets_ask_rules() {
    if skip("input_to_a_jobs_shell_meets_ask_rules", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let (_, id) = start_job(&mut s, "bash", json!({"wait_secs": 1}));
    let started = std::time::Instant::now();
    let r = job(
        &mut s,
        json!({"id": id, "input": "git push --force origin main\n", "wait_secs": 1}),
    );
    assert_eq!(structured(&r)["error"]["kind"], json!("denied"), "{r}");
    assert!(text(&r).contains("git-push-force"), "{r}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "an ask with nobody to ask waited: {r}"
    );
}

/// Issue 32, item 10: a call that leaves processes behind (`cmd &`) says how many were ended
/// with it and points to `background: true`, and a later call that finds nothing on that port
/// is told why, jobs included; a call that leaves nothing says nothing of it.
#[cordon_test::test]
fn a_call_that_leaves_a_daemon_says_it_ended_and_points_to_jobs() {
    if skip(
        "a_call_that_leaves_a_daemon_says_it_ended_and_points_to_jobs",
        Need::Namespaces,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, None);
    let port = free_port();
    // Debian's interpreter by its path: a version manager's `python3` shim (pyenv's is a bash
    // script) forks helpers of its own while it starts, and those are counted too when the
    // command ends meanwhile, so the count would depend on the machine's PATH.
    let r = s.call(
        "shell_exec",
        json!({"command": format!(
            "/usr/bin/python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & sleep 60 & echo started"
        )}),
    );
    assert_eq!(structured(&r)["exit_code"], json!(0), "{r}");
    assert!(
        text(&r).contains("2 processes the command left running")
            && text(&r).contains("\"background\": true"),
        "{r}"
    );
    let quiet = s.call("shell_exec", json!({"command": "echo hi | cat"}));
    assert!(!text(&quiet).contains("left running"), "{quiet}");
    let curl = std::process::Command::new("curl").arg("--version").output();
    if !curl.is_ok_and(|o| o.status.success()) {
        crate::common::skip_msg(
            "a_call_that_leaves_a_daemon_says_it_ended_and_points_to_jobs (curl part)",
            "curl is not installed",
        );
        return;
    }
    let r = s.call(
        "shell_exec",
        json!({"command": format!("curl -sS -m 5 http://127.0.0.1:{port}/")}),
    );
    assert_ne!(structured(&r)["exit_code"], json!(0), "{r}");
    let explained = structured(&r)["denials"].to_string();
    assert!(
        explained.contains(&port.to_string()) && explained.contains("background"),
        "the refused connection's explanation does not mention jobs: {r}"
    );
}

/// Issue 32, item 4: under a pty, text typed into a program the job's shell runs in front
/// (`python3`) is judged by the rules only: what does not parse as shell is no `on_unknown`
/// refusal, and it is not kept as the start of the shell's next line.
#[cordon_test::test]
fn a_repl_started_from_a_jobs_shell_takes_code_that_is_not_shell() {
    if skip(
        "a_repl_started_from_a_jobs_shell_takes_code_that_is_not_shell",
        Need::Namespaces,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(
        &sb,
        Some(&format!("[commands]\non_unknown = \"deny\"\n{NO_TOUCH}")),
    );
    let (_, id) = start_job(
        &mut s,
        "exec bash --norc --noprofile -i",
        json!({"pty": true, "wait_secs": 1}),
    );
    let typed = |s: &mut StdioServer, input: &str, until: &str| {
        let r = job(
            s,
            json!({"id": id, "input": input, "wait_secs": 10, "until": until}),
        );
        assert_eq!(structured(&r)["error"], Value::Null, "{input:?}: {r}");
        r
    };
    typed(&mut s, "python3 -q\n", ">>> ");
    typed(&mut s, "def f():\n", "\\.\\.\\. ");
    typed(&mut s, "    return 6 * 7\n", "\\.\\.\\. ");
    typed(&mut s, "\n", ">>> ");
    let r = typed(&mut s, "print(f())\n", "42");
    assert!(read_text(&r).contains("42"), "{r}");
    typed(&mut s, "exit()\n", "\\$ ");
    // Back at the shell: its line starts afresh, and the rules judge it again.
    let r = typed(&mut s, "echo back-$((2 * 3))\n", "back-6");
    assert!(read_text(&r).contains("back-6"), "{r}");
    let r = job(
        &mut s,
        json!({"id": id, "input": "touch refused\n", "wait_secs": 1}),
    );
    assert_eq!(structured(&r)["error"]["kind"], json!("denied"), "{r}");
}
