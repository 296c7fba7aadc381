//! `cordon serve --http` over raw HTTP: every refusal of the front door (no token, wrong
//! token, foreign Origin or Host, oversized body, unknown session, too many sessions, too
//! many calls in one session), what startup refuses, that sessions do not share interpreter
//! state, and that a call whose client went away (or whose session ended) has its tree killed.

use crate::common::{CORDON, Need, assert_no_survivors, processes_with, skip, unique_token};
use crate::http_client::{HttpServer, Start, call_body, read_until, request, send_raw, token_file};
use crate::stdio_server::eventually;
use serde_json::json;
use std::time::Duration;

const REAP_WITHIN: Duration = Duration::from_secs(5);

fn with_token(ws: &std::path::Path) -> HttpServer {
    HttpServer::with_token(ws)
}

fn init_body() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
}

#[cordon_test::test]
fn http_request_without_a_token_gets_401_with_a_bearer_challenge() {
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    let headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        (
            "Accept".to_owned(),
            crate::http_client::ACCEPT_BOTH.to_owned(),
        ),
    ];
    let r = request(
        server.addr,
        "POST",
        &headers,
        init_body().to_string().as_bytes(),
    );
    assert_eq!(r.status, 401, "{r:?}");
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"cordon\"")
    );
    assert!(r.body.contains("Authorization: Bearer"), "{}", r.body);
    // Another scheme is no bearer token either; nor is a GET or DELETE let through.
    let mut basic = headers.clone();
    basic.push(("Authorization".into(), "Basic dXNlcjpwYXNz".into()));
    assert_eq!(request(server.addr, "POST", &basic, b"{}").status, 401);
    assert_eq!(request(server.addr, "GET", &[], b"").status, 401);
    assert_eq!(request(server.addr, "DELETE", &[], b"").status, 401);
}

#[cordon_test::test]
fn http_request_with_a_wrong_token_gets_401_invalid_token_and_the_token_is_never_echoed() {
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    let real = server.token.clone().unwrap();
    for wrong in [
        format!("{real}x"),
        real[..real.len() - 1].to_owned(),
        real.to_uppercase(),
        "short".to_owned(),
    ] {
        let headers = vec![
            ("Authorization".to_owned(), format!("Bearer {wrong}")),
            ("Content-Type".to_owned(), "application/json".to_owned()),
            (
                "Accept".to_owned(),
                crate::http_client::ACCEPT_BOTH.to_owned(),
            ),
        ];
        let r = request(
            server.addr,
            "POST",
            &headers,
            init_body().to_string().as_bytes(),
        );
        assert_eq!(r.status, 401, "{wrong}: {r:?}");
        let challenge = r.header("www-authenticate").unwrap();
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
        assert!(
            !r.body.contains(&wrong) && !r.body.contains(&real),
            "{}",
            r.body
        );
    }
    // The right one works, and the server never wrote the token anywhere it logs.
    let session = server.open_session();
    assert!(!session.is_empty());
    assert!(!server.stderr().contains(&real), "{}", server.stderr());
}

#[cordon_test::test]
fn http_request_from_a_foreign_origin_gets_403_and_localhost_pages_are_served() {
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    for origin in [
        "https://evil.example",
        "http://localhost.evil.example",
        "null",
    ] {
        let r = server.post(&init_body(), &[("Origin", origin)]);
        assert_eq!(r.status, 403, "{origin}: {r:?}");
        assert!(r.body.contains("allowed_origins"), "{}", r.body);
    }
    let r = server.post(&init_body(), &[("Origin", "http://localhost:5173")]);
    assert_eq!(r.status, 200, "{r:?}");
    // The policy's list replaces the default one.
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            policy: Some("[server.http]\nallowed_origins = [\"https://app.example.com\"]\n"),
            ..Start::default()
        },
    );
    assert_eq!(
        server
            .post(&init_body(), &[("Origin", "https://app.example.com")])
            .status,
        200
    );
    assert_eq!(
        server
            .post(&init_body(), &[("Origin", "http://localhost:5173")])
            .status,
        403
    );
}

#[cordon_test::test]
fn http_request_naming_a_foreign_host_gets_403() {
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    let mut raw = format!(
        "POST /mcp HTTP/1.1\r\nHost: rebound.evil.example\r\nConnection: close\r\n\
         Authorization: Bearer {}\r\nContent-Type: application/json\r\nAccept: {}\r\n",
        server.token.as_ref().unwrap(),
        crate::http_client::ACCEPT_BOTH
    );
    let body = init_body().to_string();
    raw.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    let r = send_raw(server.addr, raw.as_bytes());
    assert_eq!(r.status, 403, "{r:?}");
}

#[cordon_test::test]
fn http_oversized_body_gets_413_whether_declared_or_chunked() {
    let ws = tempfile::tempdir().unwrap();
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            policy: Some("[server.http]\nmax_body_kb = 64\n"),
            ..Start::default()
        },
    );
    let content = "a".repeat(100 * 1024);
    let big = call_body(
        1,
        "write_file",
        json!({"path": "big.txt", "content": content}),
    );
    let r = server.post(&big, &[]);
    assert_eq!(r.status, 413, "{r:?}");
    assert!(r.body.contains("max_body_kb"), "{}", r.body);
    // Chunked, no length: counted as it streams.
    let body = big.to_string();
    let mut raw = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: Bearer \
         {}\r\nContent-Type: application/json\r\nAccept: {}\r\nTransfer-Encoding: chunked\r\n\r\n",
        server.token.as_ref().unwrap(),
        crate::http_client::ACCEPT_BOTH
    )
    .into_bytes();
    for chunk in body.as_bytes().chunks(8192) {
        raw.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        raw.extend_from_slice(chunk);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let r = send_raw(server.addr, &raw);
    assert_eq!(r.status, 413, "{r:?}");
    assert!(!ws.path().join("big.txt").exists(), "nothing was written");
    // A body under the cap is served.
    let session = server.open_session();
    let ok = server.call(
        &session,
        2,
        "write_file",
        json!({"path": "small.txt", "content": "x"}),
    );
    assert_eq!(ok["result"]["isError"], json!(false), "{ok}");
}

#[cordon_test::test]
fn http_unknown_or_ended_session_gets_404() {
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"});
    let r = server.post(&list, &[("Mcp-Session-Id", "no-such-session")]);
    assert_eq!(r.status, 404, "{r:?}");
    let session = server.open_session();
    let r = server.post(&list, &[("Mcp-Session-Id", &session)]);
    assert_eq!(r.status, 200, "{r:?}");
    let mut headers = server.auth();
    headers.push(("Mcp-Session-Id".into(), session.clone()));
    let deleted = request(server.addr, "DELETE", &headers, b"");
    assert!(
        deleted.status == 202 || deleted.status == 200,
        "{deleted:?}"
    );
    let r = server.post(&list, &[("Mcp-Session-Id", &session)]);
    assert_eq!(r.status, 404, "after DELETE: {r:?}");
}

#[cordon_test::test]
fn http_sessions_past_the_ceiling_get_503_until_one_ends() {
    let ws = tempfile::tempdir().unwrap();
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            policy: Some("[server.http]\nmax_sessions = 2\n"),
            ..Start::default()
        },
    );
    let first = server.open_session();
    let _second = server.open_session();
    let r = server.post(&init_body(), &[]);
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    assert!(r.body.contains("max_sessions"), "{}", r.body);
    let mut headers = server.auth();
    headers.push(("Mcp-Session-Id".into(), first));
    request(server.addr, "DELETE", &headers, b"");
    assert!(
        eventually(Duration::from_secs(5), || server
            .post(&init_body(), &[])
            .status
            == 200),
        "a place is free again after DELETE"
    );
}

#[cordon_test::test]
fn http_startup_refuses_a_public_address_without_a_token_and_an_empty_token() {
    let ws = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(CORDON)
            .args(["serve", "--workspace"])
            .arg(ws.path())
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["--http", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("without authentication") && stderr.contains("--http-token-file"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let empty = token_file(dir.path(), "\n", 0o600);
    let out = run(&[
        "--http",
        "127.0.0.1:0",
        "--http-token-file",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = std::process::Command::new(CORDON)
        .args(["serve", "--workspace"])
        .arg(ws.path())
        .args([
            "--http",
            "127.0.0.1:0",
            "--http-token-env",
            "CORDON_TOKEN_FOR_TEST",
        ])
        .env("CORDON_TOKEN_FOR_TEST", "")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cordon_test::test]
fn http_token_file_readable_by_others_is_warned_about_and_env_tokens_work() {
    let ws = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = "0123456789abcdef0123456789abcdef-world-readable";
    let path = token_file(dir.path(), token, 0o644);
    let server = HttpServer::start(
        ws.path(),
        Start {
            extra: &["--http-token-file", path.to_str().unwrap()],
            ..Start::default()
        },
    );
    assert!(
        server.stderr().contains("readable by its group or others"),
        "{}",
        server.stderr()
    );
    assert!(!server.stderr().contains(token));
    drop(server);
    let mut cmd = std::process::Command::new(CORDON);
    cmd.args(["serve", "--workspace"])
        .arg(ws.path())
        .args([
            "--http",
            "127.0.0.1:0",
            "--http-token-env",
            "CORDON_TOKEN_FOR_TEST",
        ])
        .env("CORDON_TOKEN_FOR_TEST", token)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("bearer token required"), "{line}");
}

#[cordon_test::test]
fn http_sessions_do_not_share_interpreter_state() {
    if skip(
        "http_sessions_do_not_share_interpreter_state",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    let a = server.open_session();
    let b = server.open_session();
    let set = server.call(&a, 1, "code_interpreter", json!({"code": "secret = 41"}));
    assert_eq!(set["result"]["isError"], json!(false), "{set}");
    let same = server.call(&a, 2, "code_interpreter", json!({"code": "secret + 1"}));
    assert_eq!(
        same["result"]["structuredContent"]["result"],
        json!("42"),
        "{same}"
    );
    let other = server.call(&b, 3, "code_interpreter", json!({"code": "secret"}));
    let error = &other["result"]["structuredContent"]["error"];
    assert_eq!(error["type"], json!("NameError"), "{other}");
}

#[cordon_test::test]
fn http_calls_past_the_per_session_bound_are_refused() {
    if skip(
        "http_calls_past_the_per_session_bound_are_refused",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            policy: Some("[server.http]\nmax_calls_per_session = 1\n"),
            ..Start::default()
        },
    );
    let session = server.open_session();
    let token = unique_token();
    let mut running = server.start_call(
        &[("Mcp-Session-Id", &session)],
        &call_body(
            1,
            "shell_exec",
            json!({"command": format!("sleep {token}"), "timeout_secs": 60}),
        ),
    );
    read_until(&mut running, "retry:", Duration::from_secs(10));
    assert!(
        eventually(Duration::from_secs(30), || !processes_with(&token)
            .is_empty()),
        "the first call never started"
    );
    let second = server.call(&session, 2, "read_file", json!({"path": "nothing"}));
    let error = &second["result"]["structuredContent"]["error"];
    assert_eq!(error["kind"], json!("resource_limit"), "{second}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("max_calls_per_session"),
        "{second}"
    );
    // Another session is not held back by this one.
    let other = server.open_session();
    let free = server.call(&other, 3, "read_file", json!({"path": "nothing"}));
    assert_eq!(
        free["result"]["structuredContent"]["error"]["kind"],
        json!("not_found"),
        "{free}"
    );
    drop(running);
    assert!(eventually(REAP_WITHIN, || processes_with(&token).is_empty()));
    assert_no_survivors(&token, "the first call after its client left");
}

#[cordon_test::test]
fn http_client_that_disconnects_mid_call_has_its_tree_killed() {
    if skip(
        "http_client_that_disconnects_mid_call_has_its_tree_killed",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    let session = server.open_session();
    let token = unique_token();
    let mut running = server.start_call(
        &[("Mcp-Session-Id", &session)],
        &call_body(
            1,
            "shell_exec",
            json!({"command": format!("sleep {token} & sleep {token}; wait"), "timeout_secs": 120}),
        ),
    );
    read_until(&mut running, "retry:", Duration::from_secs(10));
    assert!(
        eventually(Duration::from_secs(30), || processes_with(&token).len()
            >= 2),
        "the call's processes never started"
    );
    drop(running);
    let gone = eventually(REAP_WITHIN, || processes_with(&token).is_empty());
    assert_no_survivors(&token, "shell_exec after its HTTP client disconnected");
    assert!(gone);
    // The session itself lives on.
    let after = server.call(
        &session,
        2,
        "shell_exec",
        json!({"command": "echo still-here"}),
    );
    assert_eq!(
        after["result"]["structuredContent"]["stdout"],
        json!("still-here\n"),
        "{after}"
    );
}

#[cordon_test::test]
fn http_stateless_client_that_disconnects_mid_call_has_its_tree_killed() {
    if skip(
        "http_stateless_client_that_disconnects_mid_call_has_its_tree_killed",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    let token = unique_token();
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "shell_exec", "arguments": {"command": format!("sleep {token}"), "timeout_secs": 120},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {},
                  "progressToken": "p1"}}});
    let running = server.start_call(
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "shell_exec"),
        ],
        &body,
    );
    assert!(
        eventually(Duration::from_secs(30), || !processes_with(&token)
            .is_empty()),
        "the call's process never started"
    );
    drop(running);
    let gone = eventually(REAP_WITHIN, || processes_with(&token).is_empty());
    assert_no_survivors(&token, "stateless shell_exec after its client disconnected");
    assert!(gone);
}

#[cordon_test::test]
fn http_delete_of_a_session_kills_its_running_calls_and_interpreters() {
    if skip(
        "http_delete_of_a_session_kills_its_running_calls_and_interpreters",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    let session = server.open_session();
    let token = unique_token();
    let cell = json!({"code": format!("import subprocess\nsubprocess.run(['sleep', '{token}'])"),
                      "timeout_secs": 120});
    let mut running = server.start_call(
        &[("Mcp-Session-Id", &session)],
        &call_body(1, "code_interpreter", cell),
    );
    read_until(&mut running, "retry:", Duration::from_secs(10));
    assert!(
        eventually(Duration::from_secs(30), || !processes_with(&token)
            .is_empty()),
        "the cell never started"
    );
    let mut headers = server.auth();
    headers.push(("Mcp-Session-Id".into(), session));
    let deleted = request(server.addr, "DELETE", &headers, b"");
    assert!(deleted.status < 300, "{deleted:?}");
    let gone = eventually(REAP_WITHIN, || processes_with(&token).is_empty());
    assert_no_survivors(&token, "a cell of a DELETEd session");
    assert!(gone);
    drop(running);
}

#[cordon_test::test]
fn http_sigterm_kills_running_calls_of_every_session_and_exits() {
    if skip(
        "http_sigterm_kills_running_calls_of_every_session_and_exits",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let mut server = with_token(ws.path());
    let token = unique_token();
    let mut streams = Vec::new();
    for id in 0..2 {
        let session = server.open_session();
        let mut s = server.start_call(
            &[("Mcp-Session-Id", &session)],
            &call_body(
                id + 1,
                "shell_exec",
                json!({"command": format!("sleep {token}"), "timeout_secs": 120}),
            ),
        );
        read_until(&mut s, "retry:", Duration::from_secs(10));
        streams.push(s);
    }
    assert!(
        eventually(Duration::from_secs(30), || processes_with(&token).len()
            >= 2),
        "the calls never started"
    );
    server.signal(libc::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(15));
    let gone = eventually(REAP_WITHIN, || processes_with(&token).is_empty());
    assert_no_survivors(&token, "calls of an HTTP server that got SIGTERM");
    assert!(gone);
    assert!(
        status.is_some(),
        "cordon serve --http did not exit after SIGTERM"
    );
}

#[cordon_test::test]
fn http_audit_log_names_the_session_and_subject_never_the_token() {
    let ws = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("audit.jsonl");
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            audit_log: Some(&log),
            ..Start::default()
        },
    );
    let session = server.open_session();
    std::fs::write(ws.path().join("a.txt"), "hello\n").unwrap();
    let r = server.call(&session, 1, "read_file", json!({"path": "a.txt"}));
    assert_eq!(r["result"]["isError"], json!(false), "{r}");
    let stateless = server.stateless_call(2, "read_file", json!({"path": "a.txt"}));
    assert_eq!(stateless.status, 200, "{stateless:?}");
    let text = std::fs::read_to_string(&log).unwrap();
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2, "{text}");
    assert_eq!(records[0]["session"], json!(session), "{text}");
    assert_eq!(records[0]["subject"], json!("bearer"), "{text}");
    assert_eq!(records[0]["client"]["name"], json!("cordon-it"), "{text}");
    assert_eq!(records[1]["session"], json!("stateless"), "{text}");
    assert_eq!(records[1]["subject"], json!("bearer"), "{text}");
    assert!(!text.contains(server.token.as_ref().unwrap()));
}

#[cordon_test::test]
fn http_other_paths_get_404_and_stdio_stays_the_default() {
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    let r = send_raw(
        server.addr,
        format!(
            "GET /other HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: \
             Bearer {}\r\n\r\n",
            server.token.as_ref().unwrap()
        )
        .as_bytes(),
    );
    assert_eq!(r.status, 404, "{r:?}");
    assert!(r.body.contains("/mcp"), "{}", r.body);
    // Without --http, serve speaks stdio: EOF at once is a clean exit.
    let out = std::process::Command::new(CORDON)
        .args(["serve", "--workspace"])
        .arg(ws.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// A test-only Ed25519 key (PKCS#8 DER, hex) whose public half the JWKS below holds.
const JWT_KEY_DER: &str = "302e020100300506032b657004220420764680f3dc521693994272b5f3a247f186a57bc91c0c1d6666f9ed074bab63b2";
const JWT_KEY_X: &str = "qTgB9HSbavbEQHGFS2H-9bGmF-loX2WiqgSHXXx2Tgc";

pub(crate) fn jwt(claims: serde_json::Value) -> String {
    let der: Vec<u8> = (0..JWT_KEY_DER.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&JWT_KEY_DER[i..i + 2], 16).unwrap())
        .collect();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("k1".into());
    jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_ed_der(&der),
    )
    .unwrap()
}

/// Writes a JWKS with the test key into `dir` and returns a policy accepting JWTs signed with
/// it (issuer `https://auth.example`, resource `https://cordon.example/mcp`), plus `extra`
/// lines of `[server.http.oauth]`.
pub(crate) fn oauth_policy(dir: &std::path::Path, extra: &str) -> String {
    let jwks = dir.join("jwks.json");
    std::fs::write(
        &jwks,
        json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": JWT_KEY_X, "kid": "k1", "alg": "EdDSA"}]})
            .to_string(),
    )
    .unwrap();
    format!(
        "[server.http.oauth]\nissuer = \"https://auth.example\"\nresource = \
         \"https://cordon.example/mcp\"\njwks_file = {:?}\n{extra}",
        jwks.display().to_string()
    )
}

#[cordon_test::test]
fn http_oauth_resource_server_accepts_valid_jwts_serves_metadata_and_refuses_the_rest() {
    let ws = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let log = keys.path().join("audit.jsonl");
    let policy = oauth_policy(keys.path(), "required_scopes = [\"mcp\"]\n");
    let server = HttpServer::start(
        ws.path(),
        Start {
            policy: Some(&policy),
            audit_log: Some(&log),
            ..Start::default()
        },
    );
    // The metadata is public.
    let meta = send_raw(
        server.addr,
        b"GET /.well-known/oauth-protected-resource/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(meta.status, 200, "{meta:?}");
    let doc: serde_json::Value = serde_json::from_str(&meta.body).unwrap();
    assert_eq!(doc["resource"], "https://cordon.example/mcp");
    assert_eq!(doc["authorization_servers"][0], "https://auth.example");
    // No token: the challenge says where the metadata is.
    let r = server.post(&init_body(), &[]);
    assert_eq!(r.status, 401);
    assert!(
        r.header("www-authenticate").unwrap().contains(
            "resource_metadata=\"https://cordon.example/.well-known/oauth-protected-resource/mcp\""
        ),
        "{r:?}"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = |extra: serde_json::Value| {
        let mut c = json!({"iss": "https://auth.example", "aud": "https://cordon.example/mcp",
                           "sub": "alice", "exp": now + 600,
                           "scope": "mcp cordon:read cordon:write cordon:exec"});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    };
    for bad in [
        jwt(claims(json!({"exp": now - 600}))),
        jwt(claims(json!({"aud": "https://elsewhere/mcp"}))),
        jwt(claims(json!({"iss": "https://evil.example"}))),
        jwt(claims(json!({"scope": "read"}))),
    ] {
        let auth = format!("Bearer {bad}");
        let r = server.post(&init_body(), &[("Authorization", &auth)]);
        assert_eq!(r.status, 401, "{r:?}");
        assert!(
            r.header("www-authenticate")
                .unwrap()
                .contains("invalid_token")
        );
    }
    // A valid one opens a session; the audit log names its subject.
    let auth = format!("Bearer {}", jwt(claims(json!({}))));
    let init = server.post(&init_body(), &[("Authorization", &auth)]);
    assert_eq!(init.status, 200, "{init:?}");
    let session = init.header("mcp-session-id").unwrap().to_owned();
    server.post(
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &[("Authorization", &auth), ("Mcp-Session-Id", &session)],
    );
    let r = server.post(
        &call_body(1, "shell_exec", json!({"command": "echo as-alice"})),
        &[("Authorization", &auth), ("Mcp-Session-Id", &session)],
    );
    let answer = r.message(1).unwrap();
    assert_eq!(
        answer["result"]["structuredContent"]["stdout"], "as-alice\n",
        "{answer}"
    );
    let record: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(record["subject"], "jwt:https://auth.example#alice");
    assert_eq!(record["session"], json!(session));

    // Another subject holding alice's session id gets what an unknown id gets, for a call
    // and for DELETE; the session stays alice's.
    let mallory = format!("Bearer {}", jwt(claims(json!({"sub": "mallory"}))));
    let stolen = server.post(
        &call_body(2, "shell_exec", json!({"command": "echo as-mallory"})),
        &[("Authorization", &mallory), ("Mcp-Session-Id", &session)],
    );
    assert_eq!(stolen.status, 404, "{stolen:?}");
    assert!(!stolen.body.contains("as-mallory"), "{stolen:?}");
    let deleted = request(
        server.addr,
        "DELETE",
        &[
            ("Authorization".into(), mallory.clone()),
            ("Mcp-Session-Id".into(), session.clone()),
        ],
        b"",
    );
    assert_eq!(deleted.status, 404, "{deleted:?}");
    let r = server.post(
        &call_body(3, "shell_exec", json!({"command": "echo still-alice"})),
        &[("Authorization", &auth), ("Mcp-Session-Id", &session)],
    );
    let answer = r.message(3).unwrap();
    assert_eq!(
        answer["result"]["structuredContent"]["stdout"], "still-alice\n",
        "{answer}"
    );
}

#[cordon_test::test]
fn http_idle_session_expires_with_its_interpreters() {
    if skip(
        "http_idle_session_expires_with_its_interpreters",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    // Calls of at most 1 s, so the idle time may be short: 1 s asked, 11 s in force (the
    // longest call plus the margin).
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            policy: Some(
                "[limits]\ntimeout_secs = 1\nmax_timeout_secs = 1\n[interpreter]\n\
                 timeout_secs = 1\nmax_timeout_secs = 1\nkeep_background = true\n\
                 [server.http]\nsession_idle_secs = 1\n",
            ),
            ..Start::default()
        },
    );
    assert!(
        server.stderr().contains("idle sessions end after 11s"),
        "{}",
        server.stderr()
    );
    let session = server.open_session();
    let token = unique_token();
    let cell =
        json!({"code": format!("import subprocess\nsubprocess.Popen(['sleep', '{token}'])\n1")});
    let r = server.call(&session, 1, "code_interpreter", cell);
    assert_eq!(r["result"]["isError"], json!(false), "{r}");
    assert!(
        eventually(Duration::from_secs(10), || !processes_with(&token)
            .is_empty()),
        "the background process never started"
    );
    // Still alive well within the idle time.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !processes_with(&token).is_empty(),
        "ended before the idle time"
    );
    // No request may touch the session while it idles (each one would renew it): watch its
    // interpreter's background process instead, then ask once.
    let gone = eventually(Duration::from_secs(30), || {
        processes_with(&token).is_empty()
    });
    assert_no_survivors(&token, "the interpreter of an expired session");
    assert!(gone, "the idle session's interpreter was never ended");
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"});
    let r = server.post(&list, &[("Mcp-Session-Id", &session)]);
    assert_eq!(r.status, 404, "the expired session still answers: {r:?}");
    assert!(gone);
}

/// Finding 9 of issue 18: 600 connections that each sent one byte (and reconnect when the
/// server closes them) must not keep an authenticated client from being served.
#[cordon_test::test]
fn http_idle_unauthenticated_connections_do_not_keep_an_authenticated_client_out() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Instant;

    const IDLE: usize = 600;
    // The attacker's bounds: it reconnects what the server closes, at most this often and
    // for at most this long, so the test cannot run away.
    const MAX_RECONNECTS: usize = 20_000;
    const ATTACK_FOR: Duration = Duration::from_secs(20);

    let limit = crate::http_client::raise_nofile_limit();
    assert!(
        limit >= IDLE as u64 + 200,
        "this test needs {} open files, RLIMIT_NOFILE allows {limit}",
        IDLE + 200
    );
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    let addr = server.addr;
    let open_one = move || -> Option<TcpStream> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
        s.write_all(b"P").ok()?;
        s.set_nonblocking(true).ok()?;
        Some(s)
    };
    let mut idle: Vec<Option<TcpStream>> = (0..IDLE).map(|_| open_one()).collect();
    assert!(
        idle.iter().filter(|s| s.is_some()).count() >= IDLE - 10,
        "could not open {IDLE} connections to the server"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let reconnects = Arc::new(AtomicUsize::new(0));
    let attacker = {
        let stop = Arc::clone(&stop);
        let reconnects = Arc::clone(&reconnects);
        std::thread::spawn(move || {
            let started = Instant::now();
            let mut buf = [0u8; 64];
            while !stop.load(Ordering::Relaxed)
                && started.elapsed() < ATTACK_FOR
                && reconnects.load(Ordering::Relaxed) < MAX_RECONNECTS
            {
                for slot in &mut idle {
                    let closed = match slot {
                        None => true,
                        Some(s) => match s.read(&mut buf) {
                            Ok(_) => true,
                            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                        },
                    };
                    if closed {
                        *slot = open_one();
                        reconnects.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            idle.len()
        })
    };
    // Let the server see all of them.
    std::thread::sleep(Duration::from_millis(500));
    let mut headers = server.auth();
    headers.push(("Content-Type".into(), "application/json".into()));
    headers.push(("Accept".into(), crate::http_client::ACCEPT_BOTH.into()));
    let raw = crate::http_client::encode_post(&headers, init_body().to_string().as_bytes());
    let mut served = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let answer = crate::http_client::try_send_raw(addr, &raw, Duration::from_secs(5));
        let took = started.elapsed();
        eprintln!("initialize with {IDLE} idle connections: {answer:?} after {took:?}");
        served.push((answer, took));
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    eprintln!(
        "the attacker reconnected {} times",
        reconnects.load(Ordering::Relaxed)
    );
    for (answer, took) in served {
        let answer = answer.unwrap_or_else(|e| {
            panic!("an authenticated initialize was not served with {IDLE} idle connections: {e}")
        });
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.header("mcp-session-id").is_some(), "{answer:?}");
        assert!(
            took < Duration::from_secs(1),
            "an authenticated initialize took {took:?} with {IDLE} idle connections"
        );
    }
}

/// An unauthenticated connection has two seconds from accept to authenticate, not the ten a
/// request head may take on an authenticated one.
#[cordon_test::test]
fn http_unauthenticated_connection_is_closed_within_the_short_head_timeout() {
    use std::io::{Read, Write};
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    let started = std::time::Instant::now();
    let mut idle = std::net::TcpStream::connect(server.addr).unwrap();
    idle.write_all(b"P").unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut buf = [0u8; 64];
    let read = idle.read(&mut buf);
    let took = started.elapsed();
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "the server answered a one-byte head: {read:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "an idle unauthenticated connection stayed open {took:?}"
    );
    // An authenticated client is served as before.
    assert!(!server.open_session().is_empty());
}

/// Finding 10 of issue 18: a JWT whose `sub` is `bearer` (or `jwt:bearer`) is not the static
/// token's holder, nor each other: none can use another's session or stateless scope.
#[cordon_test::test]
fn http_jwt_subjects_never_collide_with_the_static_token_or_each_other() {
    let ws = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let log = keys.path().join("audit.jsonl");
    let policy = oauth_policy(keys.path(), "");
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            policy: Some(&policy),
            audit_log: Some(&log),
            ..Start::default()
        },
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let bearer_of = |sub: &str| {
        format!(
            "Bearer {}",
            jwt(
                json!({"iss": "https://auth.example", "aud": "https://cordon.example/mcp",
                       "sub": sub, "exp": now + 600,
                       "scope": "cordon:read cordon:write cordon:exec"})
            )
        )
    };
    let holders = [
        format!("Bearer {}", server.token.as_ref().unwrap()),
        bearer_of("bearer"),
        bearer_of("jwt:bearer"),
    ];
    let post = |auth: &str, body: &serde_json::Value, extra: &[(&str, &str)]| {
        let mut headers = vec![
            ("Authorization".to_owned(), auth.to_owned()),
            ("Content-Type".to_owned(), "application/json".to_owned()),
            (
                "Accept".to_owned(),
                crate::http_client::ACCEPT_BOTH.to_owned(),
            ),
        ];
        headers.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        request(server.addr, "POST", &headers, body.to_string().as_bytes())
    };
    // Each opens a session and runs a call in it.
    let mut sessions = Vec::new();
    for (i, auth) in holders.iter().enumerate() {
        let init = post(auth, &init_body(), &[]);
        assert_eq!(init.status, 200, "{i}: {init:?}");
        let session = init.header("mcp-session-id").unwrap().to_owned();
        let ack = post(
            auth,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            &[("Mcp-Session-Id", &session)],
        );
        assert_eq!(ack.status, 202, "{ack:?}");
        sessions.push(session);
    }
    // Nobody can use another's session.
    for (i, auth) in holders.iter().enumerate() {
        for (j, session) in sessions.iter().enumerate() {
            let r = post(
                auth,
                &call_body(
                    10,
                    "shell_exec",
                    json!({"command": format!("echo holder-{i}-in-{j}")}),
                ),
                &[("Mcp-Session-Id", session)],
            );
            if i == j {
                let answer = r.message(10).unwrap_or_else(|| panic!("{r:?}"));
                assert_eq!(
                    answer["result"]["structuredContent"]["stdout"],
                    format!("holder-{i}-in-{j}\n"),
                    "{answer}"
                );
            } else {
                assert_eq!(r.status, 404, "holder {i} used session {j}: {r:?}");
                assert!(!r.body.contains("holder-"), "{r:?}");
            }
        }
    }
    // The audit log tells them apart.
    let subjects: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["subject"].to_string())
        .collect();
    assert!(subjects.contains(&"\"bearer\"".to_owned()), "{subjects:?}");
    assert!(
        subjects.contains(&"\"jwt:https://auth.example#bearer\"".to_owned()),
        "{subjects:?}"
    );
    assert!(
        subjects.contains(&"\"jwt:https://auth.example#jwt:bearer\"".to_owned()),
        "{subjects:?}"
    );

    // Stateless scopes are one per subject: an interpreter variable set by one is not the
    // other's.
    if skip(
        "http_jwt_subjects_never_collide_with_the_static_token_or_each_other (stateless part)",
        Need::Namespaces,
    ) {
        return;
    }
    let stateless = |auth: &str, id: u64, code: &str| {
        let r = post(
            auth,
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "code_interpreter", "arguments": {"code": code}, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {}}}}),
            &[
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "code_interpreter"),
            ],
        );
        r.message(id).unwrap_or_else(|| panic!("{r:?}"))
    };
    for (i, auth) in holders.iter().enumerate() {
        let set = stateless(auth, 20 + i as u64, &format!("mine = {i}"));
        assert_eq!(set["result"]["isError"], json!(false), "{set}");
    }
    for (i, auth) in holders.iter().enumerate() {
        let got = stateless(auth, 30 + i as u64, "mine");
        assert_eq!(
            got["result"]["structuredContent"]["result"],
            json!(i.to_string()),
            "holder {i} sees another's stateless scope: {got}"
        );
    }
}

/// Finding 14 of issue 18: `Origin`, `Host` and the request target are parsed, not
/// prefix-matched, and there is exactly one of each to check.
#[cordon_test::test]
fn http_origin_host_and_request_target_are_parsed_exactly() {
    let ws = tempfile::tempdir().unwrap();
    let server = with_token(ws.path());
    for origin in [
        "http://localhost:80.evil.example",
        "http://localhost:5173.evil.example",
        "http://127.0.0.1:80@evil.example",
    ] {
        let r = server.post(&init_body(), &[("Origin", origin)]);
        assert_eq!(r.status, 403, "{origin}: {r:?}");
    }
    let body = init_body().to_string();
    let raw = |target: &str, headers: &str| {
        let text = format!(
            "POST {target} HTTP/1.1\r\n{headers}Connection: close\r\nAuthorization: Bearer \
             {}\r\nContent-Type: application/json\r\nAccept: {}\r\nContent-Length: {}\r\n\r\n{body}",
            server.token.as_ref().unwrap(),
            crate::http_client::ACCEPT_BOTH,
            body.len()
        );
        send_raw(server.addr, text.as_bytes())
    };
    for (what, target, headers) in [
        (
            "two Origin headers, the second foreign",
            "/mcp",
            "Host: 127.0.0.1\r\nOrigin: http://localhost:5173\r\nOrigin: https://evil.example\r\n",
        ),
        (
            "two Host headers, the second foreign",
            "/mcp",
            "Host: 127.0.0.1\r\nHost: rebound.evil.example\r\n",
        ),
        (
            "a foreign absolute-form target",
            "http://evil.example/mcp",
            "Host: 127.0.0.1\r\n",
        ),
        (
            "an absolute-form target that is not the Host",
            "http://localhost/mcp",
            "Host: 127.0.0.1\r\n",
        ),
        (
            "a Host with trailing garbage",
            "/mcp",
            "Host: 127.0.0.1:80.evil.example\r\n",
        ),
    ] {
        let r = raw(target, headers);
        assert_eq!(r.status, 403, "{what}: {r:?}");
        assert!(!r.body.contains("\"result\""), "{what}: {r:?}");
    }
    // What is right is served: one allowed Origin, an absolute target naming the Host.
    let r = raw(
        "http://127.0.0.1/mcp",
        "Host: 127.0.0.1\r\nOrigin: http://localhost:5173\r\n",
    );
    assert_eq!(r.status, 200, "{r:?}");
}

/// Finding 14 of issue 18: `allowed_origins = ["null"]` is accepted, as documented, and admits
/// exactly `Origin: null`.
#[cordon_test::test]
fn http_null_origin_is_served_when_the_policy_lists_it() {
    let ws = tempfile::tempdir().unwrap();
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            policy: Some("[server.http]\nallowed_origins = [\"null\"]\n"),
            ..Start::default()
        },
    );
    let r = server.post(&init_body(), &[("Origin", "null")]);
    assert_eq!(r.status, 200, "{r:?}");
    let r = server.post(&init_body(), &[("Origin", "http://localhost:5173")]);
    assert_eq!(r.status, 403, "{r:?}");
    let r = server.post(&init_body(), &[]);
    assert_eq!(r.status, 200, "no Origin: not a browser");
}

/// Opens an MCP session with `auth` (an `Authorization` value) and acknowledges it; returns its
/// id.
pub(crate) fn open_session_as(server: &HttpServer, auth: &str) -> String {
    let init = server.post(&init_body(), &[("Authorization", auth)]);
    assert_eq!(init.status, 200, "{init:?}");
    let session = init.header("mcp-session-id").unwrap().to_owned();
    server.post(
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &[("Authorization", auth), ("Mcp-Session-Id", &session)],
    );
    session
}

/// The names `tools/list` (request `id`) gives with `headers`.
pub(crate) fn tool_names(server: &HttpServer, headers: &[(&str, &str)], id: u64) -> Vec<String> {
    let list = server.post(
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
        headers,
    );
    list.message(id).unwrap()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Issue 36, scopes per tool: a JWT's `scope` claim decides which tools its subject sees and
/// may call (`[server.http.scopes]`, defaults: read → read_file, write → write_file and
/// edit_file, exec → shell_exec, job, code_interpreter); a call of another tool is a tool
/// error naming the scope; a token granting no tool scope is refused with 403
/// `insufficient_scope`; the metadata lists the scopes; a static token has every tool.
#[cordon_test::test]
fn http_jwt_scopes_decide_which_tools_a_subject_sees_and_calls() {
    let ws = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let policy = oauth_policy(keys.path(), "");
    let log = keys.path().join("audit.jsonl");
    let server = HttpServer::start(
        ws.path(),
        Start {
            policy: Some(&policy),
            audit_log: Some(&log),
            ..Start::default()
        },
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let bearer = |sub: &str, scope: &str| {
        format!(
            "Bearer {}",
            jwt(
                json!({"iss": "https://auth.example", "aud": "https://cordon.example/mcp",
                       "sub": sub, "exp": now + 600, "scope": scope})
            )
        )
    };
    let meta = send_raw(
        server.addr,
        b"GET /.well-known/oauth-protected-resource/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    let doc: serde_json::Value = serde_json::from_str(&meta.body).unwrap();
    assert_eq!(
        doc["scopes_supported"],
        json!(["cordon:exec", "cordon:read", "cordon:write"]),
        "{doc}"
    );

    // No tool scope at all: refused at the door, saying which scopes would do.
    let none = bearer("carol", "profile");
    let r = server.post(&init_body(), &[("Authorization", &none)]);
    assert_eq!(r.status, 403, "{r:?}");
    let challenge = r.header("www-authenticate").unwrap_or_default().to_owned();
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"cordon:exec cordon:read cordon:write\""),
        "{challenge}"
    );

    // A reader: sees read_file only; shell_exec is refused as a tool error naming its scope,
    // and nothing ran.
    let reader = bearer("rita", "cordon:read");
    let session = open_session_as(&server, &reader);
    let headers = [
        ("Authorization", reader.as_str()),
        ("Mcp-Session-Id", &session),
    ];
    assert_eq!(tool_names(&server, &headers, 1), ["read_file"]);
    let marker = ws.path().join("ran");
    let r = server.post(
        &call_body(2, "shell_exec", json!({"command": "touch ran"})),
        &headers,
    );
    let answer = r.message(2).unwrap();
    assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["error"]["kind"],
        json!("denied"),
        "{answer}"
    );
    assert!(answer.to_string().contains("cordon:exec"), "{answer}");
    for (id, tool, args) in [
        (3, "write_file", json!({"path": "w.txt", "content": "x"})),
        (
            4,
            "edit_file",
            json!({"path": "w.txt", "edits": [{"old_string": "x", "new_string": "y"}]}),
        ),
        (5, "code_interpreter", json!({"code": "open('ran', 'w')"})),
        (20, "checkpoint", json!({"action": "list"})),
    ] {
        let r = server.post(&call_body(id, tool, args), &headers);
        let answer = r.message(id).unwrap();
        assert_eq!(answer["result"]["isError"], json!(true), "{tool}: {answer}");
    }
    assert!(!marker.exists() && !ws.path().join("w.txt").exists());
    std::fs::write(ws.path().join("notes.txt"), "readable\n").unwrap();
    let r = server.post(
        &call_body(6, "read_file", json!({"path": "notes.txt"})),
        &headers,
    );
    let answer = r.message(6).unwrap();
    assert_eq!(
        answer["result"]["structuredContent"]["content"], "readable\n",
        "{answer}"
    );
    // The audit log names the scope that allowed the call, and the one a refused call needed.
    let audit = std::fs::read_to_string(&log).unwrap();
    assert!(
        audit.lines().any(|l| l.contains("\"tool\":\"read_file\"")
            && l.contains("\"scope\":\"cordon:read\"")
            && l.contains("jwt:https://auth.example#rita")),
        "{audit}"
    );
    assert!(
        audit
            .lines()
            .any(|l| l.contains("\"tool\":\"scope\"") && l.contains("scope:cordon:exec")),
        "{audit}"
    );

    // Every scope: every tool.
    let all = bearer("dana", "cordon:read cordon:write cordon:exec");
    let session = open_session_as(&server, &all);
    let headers = [
        ("Authorization", all.as_str()),
        ("Mcp-Session-Id", &session),
    ];
    assert_eq!(tool_names(&server, &headers, 7).len(), 7);
    let r = server.post(
        &call_body(8, "shell_exec", json!({"command": "echo ok"})),
        &headers,
    );
    assert_eq!(
        r.message(8).unwrap()["result"]["structuredContent"]["stdout"],
        "ok\n"
    );
}

/// Issue 36: a token file of several holders (each `sha256:<hash> <name> <scopes>`): each
/// holder is its own subject (`bearer:<name>` in the audit log) with its own scopes, the file
/// holds no token, and a token not in it is refused.
#[cordon_test::test]
fn http_token_file_holders_each_have_their_subject_and_scopes() {
    use sha2::Digest;
    let ws = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let reader = format!("reader-{}", unique_token());
    let admin = format!("admin-{}", unique_token());
    let hash = |t: &str| {
        sha2::Sha256::digest(t.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let entries = format!(
        "# holder entries\nsha256:{} rita cordon:read\nsha256:{} ops *\n",
        hash(&reader),
        hash(&admin)
    );
    let file = token_file(dir.path(), &entries, 0o600);
    let log = dir.path().join("audit.jsonl");
    let file_s = file.display().to_string();
    let server = HttpServer::start(
        ws.path(),
        Start {
            audit_log: Some(&log),
            extra: &["--http-token-file", &file_s],
            ..Start::default()
        },
    );
    let tools_of = |token: &str| {
        let auth = format!("Bearer {token}");
        let session = open_session_as(&server, &auth);
        let headers = [
            ("Authorization", auth.as_str()),
            ("Mcp-Session-Id", &session),
        ];
        let call = server.post(
            &call_body(2, "shell_exec", json!({"command": "echo hi"})),
            &headers,
        );
        (tool_names(&server, &headers, 1), call.message(2).unwrap())
    };
    let (names, call) = tools_of(&reader);
    assert_eq!(names, ["read_file"]);
    assert_eq!(call["result"]["isError"], json!(true), "{call}");
    let (names, call) = tools_of(&admin);
    assert_eq!(names.len(), 7, "{names:?}");
    assert_eq!(
        call["result"]["structuredContent"]["stdout"],
        json!("hi\n"),
        "{call}"
    );
    let wrong = server.post(
        &init_body(),
        &[("Authorization", "Bearer not-a-holder-token")],
    );
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let audit = std::fs::read_to_string(&log).unwrap();
    assert!(
        audit.contains("\"subject\":\"bearer:rita\"")
            && audit.contains("\"subject\":\"bearer:ops\""),
        "{audit}"
    );
    // ops's call names the scope that allowed it (here every scope: none named).
    assert!(
        audit
            .lines()
            .any(|l| l.contains("\"tool\":\"shell_exec\"") && l.contains("bearer:ops")),
        "{audit}"
    );
    // rita's refused call is on record, with the scope it needed.
    assert!(
        audit.lines().any(|l| l.contains("\"tool\":\"scope\"")
            && l.contains("scope:cordon:exec")
            && l.contains("bearer:rita")),
        "{audit}"
    );
    assert!(!audit.contains(&reader) && !audit.contains(&admin));
}
