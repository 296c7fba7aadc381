//! MCP logging over stdio: the `logging` capability, `logging/setLevel`, and the server's
//! events as `notifications/message` at their levels, filtered by the level the client set,
//! addressed to the session they concern, and without secrets. (Over HTTP:
//! tests/e2e/test_mcp_http.py, `test_http_sdk_log_messages_follow_the_level`.)

use crate::common::{HANG_GUARD, Need, skip};
use crate::stdio_server::{StdioServer, structured};
use serde_json::{Value, json};
use std::time::Duration;

/// The `notifications/message` seen so far whose `data.event` is `event`.
fn messages(server: &mut StdioServer, event: &str, wait: Duration) -> Vec<Value> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let found: Vec<Value> = server
            .notifications("notifications/message", Duration::from_millis(200))
            .into_iter()
            .filter(|n| {
                n["method"] == "notifications/message" && n["params"]["data"]["event"] == event
            })
            .map(|n| n["params"].clone())
            .collect();
        if !found.is_empty() || std::time::Instant::now() > deadline {
            return found;
        }
    }
}

fn set_level(server: &mut StdioServer, level: &str) {
    let id = server.send_request("logging/setLevel", json!({"level": level}));
    let answer = server
        .response(id, HANG_GUARD)
        .expect("an answer to setLevel");
    assert_eq!(answer["result"], json!({}), "{answer}");
}

/// A call stopped by its wall-clock limit, with secrets in its command and environment.
fn limit_call(server: &mut StdioServer) -> Value {
    server.call(
        "shell_exec",
        json!({"command": "sleep 30 # sk-command-secret", "timeout_secs": 1,
               "env": {"API_KEY": "sk-env-secret"}}),
    )
}

#[cordon_test::test]
fn set_level_is_answered_and_limit_hits_arrive_at_or_above_the_level() {
    let test = "set_level_is_answered_and_limit_hits_arrive_at_or_above_the_level";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    assert!(
        server.initialize["result"]["capabilities"]["logging"].is_object(),
        "{}",
        server.initialize
    );
    // No level set: nothing is sent.
    let r = limit_call(&mut server);
    assert_eq!(structured(&r)["limit"]["kind"], "wall_time", "{r}");
    assert!(messages(&mut server, "limit", Duration::from_secs(1)).is_empty());
    // `error`: a limit hit (a warning) is below it.
    set_level(&mut server, "error");
    limit_call(&mut server);
    assert!(messages(&mut server, "limit", Duration::from_secs(1)).is_empty());
    // `info`: it arrives, as a warning from cordon, naming the tool and the limit only.
    set_level(&mut server, "info");
    limit_call(&mut server);
    let got = messages(&mut server, "limit", Duration::from_secs(10));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["level"], "warning");
    assert_eq!(got[0]["logger"], "cordon");
    assert_eq!(got[0]["data"]["tool"], "shell_exec");
    assert_eq!(got[0]["data"]["limit"], "wall_time");
    let all = server.notifications("notifications/message", Duration::ZERO);
    let text = serde_json::to_string(&all).unwrap();
    assert!(
        !text.contains("sk-command-secret") && !text.contains("sk-env-secret"),
        "a secret reached a log message: {text}"
    );
    // Bad levels are the client's error, said as such.
    let id = server.send_request("logging/setLevel", json!({"level": "loud"}));
    let answer = server.response(id, HANG_GUARD).unwrap();
    assert!(answer.get("error").is_some(), "{answer}");
}

#[cordon_test::test]
fn reduced_enforcement_is_reported_when_the_level_is_set() {
    let test = "reduced_enforcement_is_reported_when_the_level_is_set";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(
        ws.path(),
        &[],
        "",
        &[("CORDON_SIMULATE_MISSING", "namespaces")],
    );
    set_level(&mut server, "warning");
    let got = messages(&mut server, "enforcement", Duration::from_secs(10));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["level"], "warning");
    assert_eq!(got[0]["data"]["level"], "reduced");
    assert!(
        got[0]["data"]["notes"].as_array().is_some_and(|n| n
            .iter()
            .any(|n| n.as_str().unwrap_or("").contains("namespaces"))),
        "{got:?}"
    );
    // Once per session: a second setLevel does not repeat it.
    set_level(&mut server, "debug");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        messages(&mut server, "enforcement", Duration::ZERO).len(),
        1
    );
}

#[cordon_test::test]
fn a_rebuilt_view_and_a_restarted_parser_worker_are_reported() {
    let test = "a_rebuilt_view_and_a_restarted_parser_worker_are_reported";
    if skip(test, Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let token = crate::common::unique_token();
    let mut server = StdioServer::start(
        ws.path(),
        &[],
        "",
        &[("CORDON_PARSER_WORKER_HANG_ON", &token)],
    );
    set_level(&mut server, "debug");
    // `git init` makes a protected path appear: the next call gets a new view.
    let r = server.call("shell_exec", json!({"command": "git init -q ."}));
    assert_eq!(structured(&r)["exit_code"], 0, "{r}");
    server.call("shell_exec", json!({"command": "true"}));
    let rebuilt = messages(&mut server, "view_rebuilt", Duration::from_secs(10));
    assert!(!rebuilt.is_empty(), "no view_rebuilt message");
    assert_eq!(rebuilt[0]["level"], "info");
    // A syntax check the worker hangs on: it is killed, and the next check starts another.
    let hang = server.call(
        "write_file",
        json!({"path": "hang.py", "content": format!("x = 1  # {token}\n")}),
    );
    assert_eq!(structured(&hang)["lint"]["status"], "unavailable", "{hang}");
    server.call("write_file", json!({"path": "ok.py", "content": "x = 1\n"}));
    let restarted = messages(&mut server, "parser_restarted", Duration::from_secs(10));
    assert!(!restarted.is_empty(), "no parser_restarted message");
    assert_eq!(restarted[0]["level"], "warning");
}

#[cordon_test::test]
fn a_refused_git_import_is_reported() {
    let test = "a_refused_git_import_is_reported";
    if skip(test, Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    for args in [
        &["init", "-q"][..],
        &[
            "-c",
            "user.email=o@example.invalid",
            "-c",
            "user.name=o",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "s",
        ],
    ] {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(ws.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    set_level(&mut server, "notice");
    let first = server.call(
        "shell_exec",
        json!({"command": "git init -q sub && git -C sub -c user.email=a@b.invalid -c user.name=a \
                           commit -q --allow-empty -m s && git add sub 2>/dev/null"}),
    );
    // A new gitlink is never imported into the operator's index (its config would run there).
    assert_eq!(structured(&first)["error"]["kind"], "denied", "{first}");
    let got = messages(&mut server, "git", Duration::from_secs(10));
    assert!(!got.is_empty(), "no git message");
    assert_eq!(got[0]["level"], "warning");
    assert!(
        got[0]["data"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("sub"),
        "{got:?}"
    );
}
