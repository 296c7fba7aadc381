//! The MCP Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) driven by raw JSON-RPC,
//! over stdio and over HTTP: neither the Python SDK (2.3) nor the TypeScript SDK (1.x) speaks
//! it (the TypeScript SDK has only the 2025-11-25 experimental tasks, a different protocol).
//! A client that declares the extension on a `tools/call` of `shell_exec` or
//! `code_interpreter` gets a task handle at once, polls `tasks/get` for progress and then the
//! call's own result; `tasks/cancel` kills the call's tree; a task ends with its session
//! (stdin closed, HTTP DELETE); a session holds a bounded number of running tasks; another
//! HTTP session never sees a task; and a client that does not declare the extension sees no
//! change.

use crate::common::{
    HANG_GUARD, Need, assert_no_survivors, marker, processes_with, skip, unique_token,
};
use crate::http_client::{HttpServer, request};
use crate::stdio_server::{StdioServer, eventually, structured};
use serde_json::{Value, json};
use std::time::Duration;

const REAP_WITHIN: Duration = Duration::from_secs(5);

/// The extension's bound on running tasks per session (`server::tasks::MAX_RUNNING`).
const MAX_RUNNING: usize = 8;

/// A request's `_meta` declaring the extension in its per-request client capabilities.
fn declaring() -> Value {
    json!({"io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}}})
}

fn task_call_params(tool: &str, arguments: Value) -> Value {
    json!({"name": tool, "arguments": arguments, "_meta": declaring()})
}

/// A `tools/call` declaring the extension; the JSON-RPC `result`.
fn call_as_task(server: &mut StdioServer, tool: &str, arguments: Value) -> Value {
    let id = server.send_request("tools/call", task_call_params(tool, arguments));
    let response = server
        .response(id, HANG_GUARD)
        .unwrap_or_else(|| panic!("no answer to {tool}"));
    response
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{tool} failed at the protocol level: {response}"))
}

/// A `tasks/*` request (declaring the extension unless `declare` is false); the whole
/// JSON-RPC response.
fn tasks_request(server: &mut StdioServer, method: &str, task_id: &str, declare: bool) -> Value {
    let mut params = json!({"taskId": task_id});
    if declare {
        params["_meta"] = declaring();
    }
    if method == "tasks/update" {
        params["inputResponses"] = json!({});
    }
    let id = server.send_request(method, params);
    server
        .response(id, HANG_GUARD)
        .unwrap_or_else(|| panic!("no answer to {method}"))
}

/// The task id of a `CreateTaskResult`, after checking its shape against the extension.
fn task_id(created: &Value) -> String {
    assert_eq!(created["resultType"], json!("task"), "{created}");
    assert_eq!(created["status"], json!("working"), "{created}");
    assert!(created["createdAt"].is_string(), "{created}");
    assert!(created["lastUpdatedAt"].is_string(), "{created}");
    assert!(created["ttlMs"].as_u64().unwrap_or(0) > 0, "{created}");
    assert!(created["pollIntervalMs"].as_u64().is_some(), "{created}");
    assert!(created.get("content").is_none(), "{created}");
    let id = created["taskId"].as_str().expect("taskId").to_owned();
    assert!(id.len() >= 32, "a guessable task id: {id}");
    id
}

/// Polls `tasks/get` until the task is terminal; every status message seen and the last
/// `result`.
fn settle(server: &mut StdioServer, id: &str) -> (Vec<String>, Value) {
    let mut messages = Vec::new();
    let deadline = std::time::Instant::now() + HANG_GUARD;
    loop {
        let got = tasks_request(server, "tasks/get", id, true);
        let result = got
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tasks/get failed: {got}"));
        assert_eq!(result["resultType"], json!("complete"), "{result}");
        assert_eq!(result["taskId"], json!(id), "{result}");
        if let Some(m) = result["statusMessage"].as_str() {
            messages.push(m.to_owned());
        }
        let status = result["status"].as_str().unwrap_or_default().to_owned();
        if ["completed", "failed", "cancelled"].contains(&status.as_str()) {
            return (messages, result);
        }
        assert_eq!(status, "working", "{result}");
        assert!(
            std::time::Instant::now() < deadline,
            "task {id} never ended"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cordon_test::test]
fn stdio_task_runs_shell_exec_and_code_interpreter_and_ends_with_their_results() {
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);

    let created = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": "echo first-line; sleep 3; echo done", "timeout_secs": 60}),
    );
    let id = task_id(&created);
    let (messages, last) = settle(&mut server, &id);
    assert_eq!(last["status"], json!("completed"), "{last}");
    let result = &last["result"];
    assert_eq!(result["isError"], json!(false), "{last}");
    let out = structured(result);
    assert_eq!(out["stdout"], json!("first-line\ndone\n"), "{last}");
    assert_eq!(out["exit_code"], json!(0), "{last}");
    assert!(out["duration_ms"].as_u64().unwrap() >= 3000, "{last}");
    assert_eq!(result["content"][0]["type"], json!("text"), "{last}");
    assert!(
        messages
            .iter()
            .any(|m| m.contains("running for") && m.contains("last output: first-line")),
        "no progress in the status messages: {messages:?}"
    );
    // The result stays there for later polls.
    let again = tasks_request(&mut server, "tasks/get", &id, true);
    assert_eq!(again["result"]["status"], json!("completed"), "{again}");

    // A command that fails is a completed task whose result says so (`failed` is for
    // JSON-RPC errors only).
    let created = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": "sleep 1; exit 3"}),
    );
    let id = task_id(&created);
    let (_, last) = settle(&mut server, &id);
    assert_eq!(last["status"], json!("completed"), "{last}");
    assert_eq!(structured(&last["result"])["exit_code"], json!(3), "{last}");

    // A call whose arguments fail their checks is answered at once, like a plain call.
    let created = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": "true", "cwd": "no-such-dir"}),
    );
    assert!(created.get("taskId").is_none(), "{created}");
    assert_eq!(created["isError"], json!(true), "{created}");
    assert_eq!(
        structured(&created)["error"]["kind"],
        json!("not_found"),
        "{created}"
    );

    let created = call_as_task(
        &mut server,
        "code_interpreter",
        json!({"code": "import time\ntime.sleep(1)\nx = 6 * 7\nx"}),
    );
    let id = task_id(&created);
    let (_, last) = settle(&mut server, &id);
    assert_eq!(last["status"], json!("completed"), "{last}");
    assert_eq!(structured(&last["result"])["result"], json!("42"), "{last}");
    // The interpreter session is the client's own, as for a plain call.
    let plain = server.call("code_interpreter", json!({"code": "x + 1"}));
    assert_eq!(structured(&plain)["result"], json!("43"), "{plain}");
}

#[cordon_test::test]
fn stdio_task_cancel_kills_the_calls_process_tree() {
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    let token = unique_token();
    let created = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": format!("sleep {token} & sleep {token}; wait"), "timeout_secs": 120}),
    );
    let id = task_id(&created);
    assert!(
        eventually(Duration::from_secs(30), || processes_with(&token).len()
            >= 2),
        "the task's processes never started"
    );
    let ack = tasks_request(&mut server, "tasks/cancel", &id, true);
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let gone = eventually(REAP_WITHIN, || processes_with(&token).is_empty());
    assert_no_survivors(&token, "a cancelled task");
    assert!(gone);
    let (_, last) = settle(&mut server, &id);
    assert_eq!(last["status"], json!("cancelled"), "{last}");
    assert!(last.get("result").is_none(), "{last}");
    // Cancelling again changes nothing and says so; updating a known task is acknowledged;
    // unknown ids are -32602.
    let again = tasks_request(&mut server, "tasks/cancel", &id, true);
    assert_eq!(again["error"]["code"], json!(-32602), "{again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("changed nothing")),
        "{again}"
    );
    let update = tasks_request(&mut server, "tasks/update", &id, true);
    assert_eq!(
        update["result"]["resultType"],
        json!("complete"),
        "{update}"
    );
    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let unknown = tasks_request(&mut server, method, "0123456789abcdef", true);
        assert_eq!(
            unknown["error"]["code"],
            json!(-32602),
            "{method}: {unknown}"
        );
        assert!(
            unknown["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no task `0123456789abcdef` in this session"),
            "{unknown}"
        );
    }
}

#[cordon_test::test]
fn stdio_close_ends_a_running_task_and_leaves_no_process() {
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    let token = unique_token();
    let created = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": format!("sleep {token}"), "timeout_secs": 120}),
    );
    task_id(&created);
    let cell_token = unique_token();
    let created = call_as_task(
        &mut server,
        "code_interpreter",
        json!({"code": format!("import subprocess\nsubprocess.run(['sleep', '{cell_token}'])"),
               "timeout_secs": 120}),
    );
    task_id(&created);
    assert!(
        eventually(Duration::from_secs(30), || !processes_with(&token)
            .is_empty()
            && !processes_with(&cell_token).is_empty()),
        "the tasks' processes never started"
    );
    server.close_stdin();
    let status = server.wait_exit(Duration::from_secs(15));
    let gone = eventually(REAP_WITHIN, || {
        processes_with(&token).is_empty() && processes_with(&cell_token).is_empty()
    });
    assert_no_survivors(&token, "a shell_exec task after the client closed stdin");
    assert_no_survivors(&cell_token, "a code_interpreter task after stdin closed");
    assert!(gone);
    assert!(
        status.is_some(),
        "cordon serve did not exit after stdin closed"
    );
}

#[cordon_test::test]
fn stdio_client_without_the_extension_sees_no_change() {
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    // A 2025-11-25-style task augmentation (`params.task`) from a client that did not declare
    // the extension: processed as an ordinary call.
    let id = server.send_request(
        "tools/call",
        json!({"name": "shell_exec", "arguments": {"command": "echo plain"},
               "task": {"ttl": 60000}}),
    );
    let response = server.response(id, HANG_GUARD).expect("an answer");
    let result = &response["result"];
    assert!(result.get("taskId").is_none(), "{response}");
    assert_ne!(result["resultType"], json!("task"), "{response}");
    assert_eq!(structured(result)["stdout"], json!("plain\n"), "{response}");
    // No tool claims the 2025-11-25 per-tool task support this server does not implement.
    let id = server.send_request("tools/list", json!({}));
    let tools = server.response(id, HANG_GUARD).expect("tools/list");
    for tool in tools["result"]["tools"].as_array().unwrap() {
        assert!(tool.get("execution").is_none(), "{tool}");
    }
    // tasks/* from a client that did not declare the extension: -32021 naming it.
    let refused = tasks_request(&mut server, "tasks/get", "0123456789abcdef", false);
    assert_eq!(refused["error"]["code"], json!(-32021), "{refused}");
    assert!(
        refused["error"]["data"]["requiredCapabilities"]["extensions"]
            .get("io.modelcontextprotocol/tasks")
            .is_some(),
        "{refused}"
    );
    // The file tools are never tasks, declared or not.
    let read = call_as_task(&mut server, "read_file", json!({"path": "missing.txt"}));
    assert!(read.get("taskId").is_none(), "{read}");
    assert_eq!(
        structured(&read)["error"]["kind"],
        json!("not_found"),
        "{read}"
    );
}

#[cordon_test::test]
fn stdio_tasks_past_the_bound_are_refused_with_a_clear_error() {
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    let token = unique_token();
    let mut ids = Vec::new();
    for _ in 0..MAX_RUNNING {
        let created = call_as_task(
            &mut server,
            "shell_exec",
            json!({"command": format!("sleep {token}"), "timeout_secs": 120}),
        );
        ids.push(task_id(&created));
    }
    let refused = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": format!("sleep {token}")}),
    );
    assert!(refused.get("taskId").is_none(), "{refused}");
    assert_eq!(refused["isError"], json!(true), "{refused}");
    let error = &structured(&refused)["error"];
    assert_eq!(error["kind"], json!("resource_limit"), "{refused}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{MAX_RUNNING} tasks running"))
            && message.contains("tasks/cancel"),
        "{refused}"
    );
    // The bound is the session's: the file tools still answer (tasks take the runtime's
    // slots as calls do, so a plain shell_exec would wait for one like any call).
    let read = server.call("read_file", json!({"path": "missing.txt"}));
    assert_eq!(
        structured(&read)["error"]["kind"],
        json!("not_found"),
        "{read}"
    );
    // One cancelled makes room for one more.
    tasks_request(&mut server, "tasks/cancel", &ids.remove(0), true);
    let more = eventually(Duration::from_secs(30), || {
        let created = call_as_task(
            &mut server,
            "shell_exec",
            json!({"command": format!("sleep {token}"), "timeout_secs": 120}),
        );
        match created["taskId"].as_str() {
            Some(id) => {
                ids.push(id.to_owned());
                true
            }
            None => false,
        }
    });
    assert!(more, "no place came free after a cancel");
    for id in &ids {
        tasks_request(&mut server, "tasks/cancel", id, true);
    }
    let gone = eventually(Duration::from_secs(30), || {
        processes_with(&token).is_empty()
    });
    assert_no_survivors(&token, "cancelled tasks");
    assert!(gone);
}

#[cordon_test::test]
fn stdio_denied_command_is_answered_at_once_and_never_becomes_a_task() {
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    let token = unique_token();
    let denied = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": format!("rm -rf ~ # {}", marker(&token))}),
    );
    assert!(denied.get("taskId").is_none(), "{denied}");
    assert_eq!(
        structured(&denied)["error"]["kind"],
        json!("denied"),
        "{denied}"
    );
    assert!(processes_with(&token).is_empty());
}

/// POSTs `body` in `session` with the extension's routing headers; the answer to `id`.
fn http_post(server: &HttpServer, session: &str, id: u64, body: &Value, name: &str) -> Value {
    let method = body["method"].as_str().unwrap().to_owned();
    let r = server.post(
        body,
        &[
            ("Mcp-Session-Id", session),
            ("Mcp-Method", &method),
            ("Mcp-Name", name),
        ],
    );
    assert_eq!(r.status, 200, "{method}: {r:?}");
    r.message(id)
        .unwrap_or_else(|| panic!("no answer to {id}: {r:?}"))
}

fn http_task_call(server: &HttpServer, session: &str, id: u64, arguments: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": task_call_params("shell_exec", arguments)});
    http_post(server, session, id, &body, "shell_exec")
}

fn http_tasks(server: &HttpServer, session: &str, id: u64, method: &str, task: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method,
                      "params": {"taskId": task, "_meta": declaring()}});
    http_post(server, session, id, &body, task)
}

#[cordon_test::test]
fn http_task_completes_and_no_other_session_sees_it() {
    if skip(
        "http_task_completes_and_no_other_session_sees_it",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let server = HttpServer::with_token(ws.path());
    let session = server.open_session();
    let other = server.open_session();
    let created = http_task_call(
        &server,
        &session,
        1,
        json!({"command": "sleep 1; echo over-http"}),
    );
    let id = task_id(&created["result"]);
    // Another session (another client) cannot read or cancel it.
    for (n, method) in ["tasks/get", "tasks/cancel"].iter().enumerate() {
        let foreign = http_tasks(&server, &other, 10 + n as u64, method, &id);
        assert_eq!(foreign["error"]["code"], json!(-32602), "{foreign}");
    }
    let mut n = 100;
    let last = loop {
        n += 1;
        let got = http_tasks(&server, &session, n, "tasks/get", &id);
        let result = got["result"].clone();
        assert_eq!(result["taskId"], json!(id), "{got}");
        if result["status"] != json!("working") {
            break result;
        }
        assert!(n < 100 + 600, "the task never ended");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(last["status"], json!("completed"), "{last}");
    assert_eq!(
        structured(&last["result"])["stdout"],
        json!("over-http\n"),
        "{last}"
    );
    // The session's plain calls are unchanged.
    let plain = server.call(
        &session,
        900,
        "shell_exec",
        json!({"command": "echo plain"}),
    );
    assert_eq!(
        plain["result"]["structuredContent"]["stdout"],
        json!("plain\n"),
        "{plain}"
    );
}

#[cordon_test::test]
fn http_delete_of_a_session_kills_its_running_task() {
    if skip(
        "http_delete_of_a_session_kills_its_running_task",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let server = HttpServer::with_token(ws.path());
    let session = server.open_session();
    let token = unique_token();
    let created = http_task_call(
        &server,
        &session,
        1,
        json!({"command": format!("sleep {token} & sleep {token}; wait"), "timeout_secs": 120}),
    );
    task_id(&created["result"]);
    assert!(
        eventually(Duration::from_secs(30), || processes_with(&token).len()
            >= 2),
        "the task's processes never started"
    );
    // The call's answer came long ago: only the session holds the task now.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(processes_with(&token).len(), 2, "the task ended early");
    let mut headers = server.auth();
    headers.push(("Mcp-Session-Id".into(), session));
    let deleted = request(server.addr, "DELETE", &headers, b"");
    assert!(deleted.status < 300, "{deleted:?}");
    let gone = eventually(REAP_WITHIN, || processes_with(&token).is_empty());
    assert_no_survivors(&token, "a task of a DELETEd session");
    assert!(gone);
}

/// A stateless (2026-07-28) request: no session; the revision's `_meta` and headers.
fn stateless(server: &HttpServer, id: u64, method: &str, params: Value, name: &str) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}}});
    let r = server.post(
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", method),
            ("Mcp-Name", name),
        ],
    );
    assert_eq!(r.status, 200, "{method}: {r:?}");
    r.message(id)
        .unwrap_or_else(|| panic!("no answer to {id}: {r:?}"))
}

#[cordon_test::test]
fn http_stateless_task_is_polled_to_its_result_and_cancel_kills_another() {
    if skip(
        "http_stateless_task_is_polled_to_its_result_and_cancel_kills_another",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let server = HttpServer::with_token(ws.path());
    let created = stateless(
        &server,
        1,
        "tools/call",
        json!({"name": "code_interpreter",
               "arguments": {"code": "import time\ntime.sleep(1)\nsum(range(10))"}}),
        "code_interpreter",
    );
    let id = task_id(&created["result"]);
    let mut n = 10;
    let last = loop {
        n += 1;
        let got = stateless(&server, n, "tasks/get", json!({"taskId": id}), &id);
        if got["result"]["status"] != json!("working") {
            break got["result"].clone();
        }
        assert!(n < 10 + 600, "the task never ended: {got}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(last["status"], json!("completed"), "{last}");
    assert_eq!(structured(&last["result"])["result"], json!("45"), "{last}");

    let token = unique_token();
    let created = stateless(
        &server,
        700,
        "tools/call",
        json!({"name": "shell_exec",
               "arguments": {"command": format!("sleep {token}"), "timeout_secs": 120}}),
        "shell_exec",
    );
    let id = task_id(&created["result"]);
    assert!(
        eventually(Duration::from_secs(30), || !processes_with(&token)
            .is_empty()),
        "the task's process never started"
    );
    let ack = stateless(&server, 701, "tasks/cancel", json!({"taskId": id}), &id);
    assert_eq!(ack["result"]["resultType"], json!("complete"), "{ack}");
    let gone = eventually(REAP_WITHIN, || processes_with(&token).is_empty());
    assert_no_survivors(&token, "a cancelled stateless task");
    assert!(gone);
}

#[cordon_test::test]
fn stdio_sigterm_or_sigkill_of_serve_leaves_no_task_running() {
    if skip(
        "stdio_sigterm_or_sigkill_of_serve_leaves_no_task_running",
        Need::Namespaces,
    ) {
        return;
    }
    for signal in [libc::SIGTERM, libc::SIGKILL] {
        let ws = tempfile::tempdir().unwrap();
        let mut server = StdioServer::start(ws.path(), &[], "", &[]);
        let token = unique_token();
        let created = call_as_task(
            &mut server,
            "shell_exec",
            json!({"command": format!("sleep {token} & sleep {token}; wait"), "timeout_secs": 120}),
        );
        task_id(&created);
        assert!(
            eventually(Duration::from_secs(30), || processes_with(&token).len()
                >= 2),
            "the task's processes never started"
        );
        server.signal(signal);
        let status = server.wait_exit(Duration::from_secs(15));
        let gone = eventually(REAP_WITHIN, || processes_with(&token).is_empty());
        assert_no_survivors(&token, &format!("a task after signal {signal} to serve"));
        assert!(gone);
        assert!(status.is_some(), "serve did not exit after signal {signal}");
    }
}

#[cordon_test::test]
fn stdio_task_cancelled_while_it_waits_for_a_slot_never_starts() {
    let sb = crate::common::Sandbox::new();
    let policy = sb.policy(
        "one-slot.toml",
        "extends = \"default\"\n[server]\nmax_concurrent_calls = 1\n",
    );
    let mut server = StdioServer::start(sb.ws(), &["--policy", &policy], "", &[]);
    let token = unique_token();
    let first = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": format!("sleep {token}"), "timeout_secs": 120}),
    );
    let first = task_id(&first);
    assert!(
        eventually(Duration::from_secs(30), || !processes_with(&token)
            .is_empty()),
        "the first task never started"
    );
    // The only slot is taken: this one waits for it.
    let queued = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": "echo ran > queued-ran.txt"}),
    );
    let queued = task_id(&queued);
    tasks_request(&mut server, "tasks/cancel", &queued, true);
    // It ends while the first still holds the slot, and its command never ran.
    let (_, last) = settle(&mut server, &queued);
    assert_eq!(last["status"], json!("cancelled"), "{last}");
    assert!(!processes_with(&token).is_empty(), "the first task ended");
    tasks_request(&mut server, "tasks/cancel", &first, true);
    let gone = eventually(REAP_WITHIN, || processes_with(&token).is_empty());
    assert_no_survivors(&token, "the first task after its cancel");
    assert!(gone);
    let (_, last) = settle(&mut server, &first);
    assert_eq!(last["status"], json!("cancelled"), "{last}");
    assert!(
        !sb.ws().join("queued-ran.txt").exists(),
        "the cancelled queued task ran its command"
    );
}

#[cordon_test::test]
fn a_task_that_hits_a_limit_sends_its_sessions_log_message() {
    if skip(
        "a_task_that_hits_a_limit_sends_its_sessions_log_message",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    let id = server.send_request("logging/setLevel", json!({"level": "warning"}));
    server.response(id, HANG_GUARD).expect("setLevel");
    // The task runs after its `tools/call` answered: its events still belong to this session.
    let created = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": "sleep 30", "timeout_secs": 1}),
    );
    let task = task_id(&created);
    let (_, result) = settle(&mut server, &task);
    assert_eq!(result["status"], json!("completed"), "{result}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let limits = loop {
        let found: Vec<Value> = server
            .notifications("notifications/message", Duration::from_millis(200))
            .into_iter()
            .filter(|n| n["params"]["data"]["event"] == "limit")
            .collect();
        if !found.is_empty() || std::time::Instant::now() > deadline {
            break found;
        }
    };
    assert_eq!(limits.len(), 1, "the task's limit hit sent no log message");
}

#[cordon_test::test]
fn stdio_a_call_that_ends_at_once_is_answered_directly_and_cancelling_a_finished_task_says_so() {
    let ws = tempfile::tempdir().unwrap();
    let mut server = StdioServer::start(ws.path(), &[], "", &[]);
    // Well within the ~300 ms threshold: the plain result, no task to poll for it.
    let direct = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": "echo instant"}),
    );
    assert!(
        direct.get("taskId").is_none(),
        "an instant call became a task: {direct}"
    );
    assert_ne!(direct["resultType"], json!("task"), "{direct}");
    assert_eq!(
        structured(&direct)["stdout"],
        json!("instant\n"),
        "{direct}"
    );
    assert_eq!(structured(&direct)["exit_code"], json!(0), "{direct}");
    // A longer one still becomes a task; once it has ended, cancelling it changes nothing and
    // the answer says so.
    let created = call_as_task(
        &mut server,
        "shell_exec",
        json!({"command": "sleep 1; echo later"}),
    );
    let id = task_id(&created);
    let (_, last) = settle(&mut server, &id);
    assert_eq!(last["status"], json!("completed"), "{last}");
    let cancel = tasks_request(&mut server, "tasks/cancel", &id, true);
    assert_eq!(cancel["error"]["code"], json!(-32602), "{cancel}");
    let message = cancel["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("changed nothing"), "{cancel}");
    assert!(message.contains("completed"), "{cancel}");
    let again = tasks_request(&mut server, "tasks/get", &id, true);
    assert_eq!(again["result"]["status"], json!("completed"), "{again}");
}
