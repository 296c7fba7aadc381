//! End to end with the official Rust MCP client (rmcp): spawns `cordon serve` as a child
//! process and drives it over stdio, once with the `initialize` handshake and once in the
//! stateless 2026-07-28 lifecycle (`server/discover`).
//!
//! Guards what SPEC.md promises a stock client: the four tools are listed with truthful
//! annotations, strict input schemas (`additionalProperties: false`, `required`) and an output
//! schema; every tool answers a good call with `structuredContent` plus a text block and a bad
//! call with `isError` and `structuredContent.error = {kind, message, retriable}`; an unknown
//! tool is a JSON-RPC error and the session survives it.

use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion, Tool};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use std::path::Path;

type Client = RunningService<RoleClient, ()>;

async fn connect(workspace: &Path, lifecycle: ClientLifecycleMode) -> Client {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_cordon"));
    cmd.arg("serve").arg("--workspace").arg(workspace);
    let transport = TokioChildProcess::new(cmd).expect("spawn cordon serve");
    ().serve_with_lifecycle(transport, lifecycle)
        .await
        .expect("MCP session with cordon starts")
}

fn legacy() -> ClientLifecycleMode {
    ClientLifecycleMode::Initialize
}

fn stateless() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

async fn call(client: &Client, tool: &'static str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
        .await
        .unwrap_or_else(|e| panic!("{tool} call failed at the protocol level: {e}"))
}

/// The structured content of a successful call (also checks the text block).
fn success(result: &CallToolResult) -> &Value {
    assert_ne!(result.is_error, Some(true), "unexpected error: {result:?}");
    assert!(text_of(result).is_some(), "no text block: {result:?}");
    let sc = result
        .structured_content
        .as_ref()
        .expect("structuredContent");
    assert!(sc.get("error").is_none_or(Value::is_null), "{sc}");
    sc
}

/// The `error.kind` of a failed call, after checking the error object's shape.
fn error_kind(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "expected an error: {result:?}");
    assert!(text_of(result).is_some_and(|t| t.starts_with("error [")));
    let error = &result
        .structured_content
        .as_ref()
        .expect("structuredContent")["error"];
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{error}"
    );
    assert!(error["retriable"].is_boolean(), "{error}");
    error["kind"].as_str().expect("error.kind").to_owned()
}

fn text_of(result: &CallToolResult) -> Option<&str> {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.as_str())
}

fn hints(tool: &Tool) -> (bool, bool, bool, bool) {
    let a = tool.annotations.as_ref().expect("annotations");
    (
        a.read_only_hint.expect("readOnlyHint"),
        a.destructive_hint.expect("destructiveHint"),
        a.idempotent_hint.expect("idempotentHint"),
        a.open_world_hint.expect("openWorldHint"),
    )
}

async fn lists_tools_with_strict_schemas_and_annotations(lifecycle: ClientLifecycleMode) {
    let ws = tempfile::tempdir().unwrap();
    let client = connect(ws.path(), lifecycle).await;
    let mut tools = client.list_all_tools().await.expect("tools/list");
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "checkpoint",
            "code_interpreter",
            "edit_file",
            "job",
            "read_file",
            "shell_exec",
            "write_file"
        ]
    );
    let expected = [
        ("checkpoint", (false, true, false, false), vec!["action"]),
        (
            "code_interpreter",
            (false, true, false, false),
            vec!["code"],
        ),
        (
            "edit_file",
            (false, true, false, false),
            vec!["path", "edits"],
        ),
        ("job", (false, true, false, false), vec![]),
        ("read_file", (true, false, true, false), vec!["path"]),
        ("shell_exec", (false, true, false, false), vec!["command"]),
        (
            "write_file",
            (false, true, true, false),
            vec!["path", "content"],
        ),
    ];
    for (tool, (name, annotations, required)) in tools.iter().zip(expected) {
        assert_eq!(tool.name, name);
        assert_eq!(hints(tool), annotations, "{name} annotations");
        let input = &tool.input_schema;
        assert_eq!(input.get("type"), Some(&json!("object")), "{name}");
        assert_eq!(
            input.get("additionalProperties"),
            Some(&json!(false)),
            "{name}"
        );
        // A tool whose arguments are all optional (`job`) has no `required` list.
        let mut req: Vec<&str> = match input.get("required") {
            Some(list) => list
                .as_array()
                .expect("required is a list")
                .iter()
                .filter_map(Value::as_str)
                .collect(),
            None => Vec::new(),
        };
        req.sort_unstable();
        let mut want = required.clone();
        want.sort_unstable();
        assert_eq!(req, want, "{name} required");
        let output = tool.output_schema.as_ref().expect("outputSchema");
        assert!(
            output.get("properties").is_some_and(Value::is_object),
            "{name}"
        );
    }
    client.cancel().await.expect("close session");
}

async fn every_tool_succeeds_and_fails_with_structured_content(lifecycle: ClientLifecycleMode) {
    let ws = tempfile::tempdir().unwrap();
    let client = connect(ws.path(), lifecycle).await;

    // write_file
    let r = call(
        &client,
        "write_file",
        json!({"path": "pkg/m.py", "content": "v = 1\n"}),
    )
    .await;
    let sc = success(&r);
    assert_eq!(sc["path"], "pkg/m.py");
    assert_eq!(sc["bytes"], 6);
    assert_eq!(sc["created"], true);
    assert!(sc["lint"]["status"].is_string() && sc["lint"]["diagnostics"].is_array());
    let r = call(
        &client,
        "write_file",
        json!({"path": "../escape.py", "content": "x"}),
    )
    .await;
    assert_eq!(error_kind(&r), "path_escape");
    assert!(!ws.path().parent().unwrap().join("escape.py").exists());

    // edit_file
    let r = call(
        &client,
        "edit_file",
        json!({"path": "pkg/m.py", "edits": [{"old_string": "v = 1", "new_string": "v = 2"}]}),
    )
    .await;
    let sc = success(&r);
    assert_eq!(sc["replacements"], 1);
    assert_eq!(sc["applied"], true);
    assert!(sc["diff"].as_str().unwrap().contains("+v = 2"));
    let r = call(
        &client,
        "edit_file",
        json!({"path": "pkg/m.py", "edits": [{"old_string": "w = 9", "new_string": "w = 0"}]}),
    )
    .await;
    assert_eq!(error_kind(&r), "invalid_argument");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("pkg/m.py")).unwrap(),
        "v = 2\n"
    );

    // read_file
    let r = call(&client, "read_file", json!({"path": "pkg/m.py"})).await;
    let sc = success(&r);
    assert_eq!(sc["content"], "v = 2\n");
    assert_eq!(
        (sc["start_line"].clone(), sc["total_lines"].clone()),
        (json!(1), json!(1))
    );
    let r = call(&client, "read_file", json!({"path": "pkg/missing.py"})).await;
    assert_eq!(error_kind(&r), "not_found");

    // shell_exec
    let r = call(
        &client,
        "shell_exec",
        json!({"command": "cat m.py", "cwd": "pkg"}),
    )
    .await;
    let sc = success(&r);
    assert_eq!(sc["stdout"], "v = 2\n");
    assert_eq!(sc["exit_code"], 0);
    assert_eq!(sc["timed_out"], false);
    let r = call(
        &client,
        "shell_exec",
        json!({"command": "echo oops >&2; exit 5"}),
    )
    .await;
    assert_eq!(error_kind(&r), "exit_status");
    let sc = r.structured_content.as_ref().unwrap();
    assert_eq!(
        (sc["exit_code"].clone(), sc["stderr"].clone()),
        (json!(5), json!("oops\n"))
    );

    // arguments that do not match the schema
    let r = call(
        &client,
        "shell_exec",
        json!({"command": "true", "bogus": 1}),
    )
    .await;
    assert_eq!(error_kind(&r), "invalid_argument");

    client.cancel().await.expect("close session");
}

async fn unknown_tool_is_a_protocol_error(lifecycle: ClientLifecycleMode) {
    let ws = tempfile::tempdir().unwrap();
    let client = connect(ws.path(), lifecycle).await;
    let err = client
        .call_tool(CallToolRequestParams::new("format_disk"))
        .await
        .expect_err("an unknown tool is a JSON-RPC error, not a result");
    assert!(matches!(err, ServiceError::McpError(_)), "{err:?}");
    let r = call(&client, "shell_exec", json!({"command": "echo alive"})).await;
    assert_eq!(success(&r)["stdout"], "alive\n");
    client.cancel().await.expect("close session");
}

#[cordon_test::test(flavor = "multi_thread")]
async fn legacy_session_lists_tools_with_strict_schemas_and_annotations() {
    lists_tools_with_strict_schemas_and_annotations(legacy()).await;
}

#[cordon_test::test(flavor = "multi_thread")]
async fn stateless_session_lists_tools_with_strict_schemas_and_annotations() {
    lists_tools_with_strict_schemas_and_annotations(stateless()).await;
}

#[cordon_test::test(flavor = "multi_thread")]
async fn legacy_session_every_tool_succeeds_and_fails_with_structured_content() {
    every_tool_succeeds_and_fails_with_structured_content(legacy()).await;
}

#[cordon_test::test(flavor = "multi_thread")]
async fn stateless_session_every_tool_succeeds_and_fails_with_structured_content() {
    every_tool_succeeds_and_fails_with_structured_content(stateless()).await;
}

#[cordon_test::test(flavor = "multi_thread")]
async fn legacy_session_unknown_tool_is_a_protocol_error() {
    unknown_tool_is_a_protocol_error(legacy()).await;
}

#[cordon_test::test(flavor = "multi_thread")]
async fn stateless_session_unknown_tool_is_a_protocol_error() {
    unknown_tool_is_a_protocol_error(stateless()).await;
}

#[cordon_test::test(flavor = "multi_thread")]
async fn sessions_negotiate_the_expected_protocol_versions() {
    let ws = tempfile::tempdir().unwrap();
    let client = connect(ws.path(), legacy()).await;
    assert_eq!(
        client.peer_info().map(|i| i.protocol_version.clone()),
        Some(ProtocolVersion::V_2025_11_25)
    );
    client.cancel().await.unwrap();
    let client = connect(ws.path(), stateless()).await;
    assert_eq!(
        client.peer_info().map(|i| i.protocol_version.clone()),
        Some(ProtocolVersion::V_2026_07_28)
    );
    client.cancel().await.unwrap();
}

/// The rmcp client declaring the MCP Tasks extension (SEP-2663; neither the Python nor the
/// TypeScript SDK speaks it): `shell_exec` answers with a task handle the client's own types
/// parse, `tasks/get` ends with the call's `CallToolResult`, structured content included.
async fn a_declaring_client_gets_shell_exec_as_a_task(lifecycle: ClientLifecycleMode) {
    use rmcp::model::{
        CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams, Implementation,
        TaskPayload, TaskStatus,
    };
    let ws = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_cordon"));
    cmd.arg("serve").arg("--workspace").arg(ws.path());
    let transport = TokioChildProcess::new(cmd).expect("spawn cordon serve");
    let config = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("cordon-it", "1"),
    );
    let client = config
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .expect("MCP session with cordon starts");
    let Value::Object(arguments) = json!({"command": "sleep 1; echo from-a-task"}) else {
        unreachable!()
    };
    let response = client
        .call_tool_once(CallToolRequestParams::new("shell_exec").with_arguments(arguments))
        .await
        .expect("tools/call");
    let CallToolResponse::Task(created) = response else {
        panic!("expected a task handle, got {response:?}")
    };
    assert_eq!(created.task.status, TaskStatus::Working);
    let id = created.task.task_id.clone();
    let done = loop {
        let got = client
            .get_task(GetTaskParams::new(id.clone()))
            .await
            .expect("tasks/get");
        if got.task.status().is_terminal() {
            break got.task;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let TaskPayload::Completed { result } = done.payload else {
        panic!("expected a completed task, got {done:?}")
    };
    let result: CallToolResult = serde_json::from_value(Value::Object(result)).unwrap();
    assert_eq!(success(&result)["stdout"], json!("from-a-task\n"));
    // read_file is never a task.
    let Value::Object(arguments) = json!({"path": "missing"}) else {
        unreachable!()
    };
    let response = client
        .call_tool_once(CallToolRequestParams::new("read_file").with_arguments(arguments))
        .await
        .expect("tools/call");
    let CallToolResponse::Complete(result) = response else {
        panic!("read_file became a task: {response:?}")
    };
    assert_eq!(error_kind(&result), "not_found");
}

#[cordon_test::test(flavor = "multi_thread")]
async fn legacy_session_declaring_tasks_gets_shell_exec_as_a_task() {
    a_declaring_client_gets_shell_exec_as_a_task(legacy()).await;
}

#[cordon_test::test(flavor = "multi_thread")]
async fn stateless_session_declaring_tasks_gets_shell_exec_as_a_task() {
    a_declaring_client_gets_shell_exec_as_a_task(stateless()).await;
}
