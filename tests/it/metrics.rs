//! `serve --http` serves Prometheus metrics at `/metrics` behind the same authentication as
//! `/mcp` (issue 21, part 5), or on a `--metrics-addr` loopback listener of their own; a
//! scrape after a few calls shows the counters moved.

use crate::common::{Need, skip};
use crate::http_client::{HttpServer, Start, send_raw};
use serde_json::json;

fn scrape(addr: std::net::SocketAddr, token: Option<&str>) -> crate::http_client::Response {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    send_raw(
        addr,
        format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{auth}\r\n")
            .as_bytes(),
    )
}

/// The value of the sample named exactly `series` (name and labels), 0 when absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

#[cordon_test::test]
fn metrics_need_the_token_and_count_calls_denials_and_sessions() {
    if skip(
        "metrics_need_the_token_and_count_calls_denials_and_sessions",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let server = HttpServer::start(
        ws.path(),
        Start {
            // The default policy's rules refuse `rm -rf /`; /etc/passwd is denied too, a
            // file the call's uid could read (so Landlock refuses it, not its mode).
            token: true,
            policy: Some(&crate::common::deny_readable_section()),
            ..Start::default()
        },
    );
    let token = server.token.clone().unwrap();
    let refused = scrape(server.addr, None);
    assert_eq!(refused.status, 401, "no token, no metrics: {refused:?}");
    // A scrape names the pod's address, which no host list has: the token is what counts.
    let by_address = send_raw(
        server.addr,
        format!(
            "GET /metrics HTTP/1.1\r\nHost: 10.1.2.3:8080\r\nConnection: close\r\n\
             Authorization: Bearer {token}\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(by_address.status, 200, "{by_address:?}");
    let mcp_by_address = send_raw(
        server.addr,
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 10.1.2.3:8080\r\nConnection: close\r\n\
             Authorization: Bearer {token}\r\nContent-Length: 2\r\n\r\n{{}}"
        )
        .as_bytes(),
    );
    assert_eq!(
        mcp_by_address.status, 403,
        "/mcp keeps the host list: {mcp_by_address:?}"
    );
    let before = scrape(server.addr, Some(&token));
    assert_eq!(before.status, 200, "{before:?}");
    assert!(
        before
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/openmetrics-text")),
        "{before:?}"
    );
    let ok = "cordon_tool_calls_total{tool=\"shell_exec\",outcome=\"ok\"}";
    let error = "cordon_tool_calls_total{tool=\"shell_exec\",outcome=\"error\"}";
    let denied = "cordon_tool_calls_total{tool=\"shell_exec\",outcome=\"denied\"}";
    let rule = "cordon_denials_total{layer=\"rule\"}";
    let durations = "cordon_tool_call_duration_seconds_count{tool=\"shell_exec\"}";
    assert_eq!(sample(&before.body, ok), 0.0, "{}", before.body);

    let session = server.open_session();
    server.call(&session, 1, "shell_exec", json!({"command": "true"}));
    server.call(&session, 2, "shell_exec", json!({"command": "true"}));
    server.call(&session, 3, "shell_exec", json!({"command": "exit 3"}));
    server.call(&session, 4, "shell_exec", json!({"command": "rm -rf /"}));
    server.call(
        &session,
        5,
        "shell_exec",
        json!({"command": "cat /etc/passwd"}),
    );

    let after = scrape(server.addr, Some(&token));
    assert_eq!(after.status, 200, "{after:?}");
    let text = &after.body;
    assert_eq!(sample(text, ok), 2.0, "{text}");
    assert_eq!(sample(text, error), 2.0, "{text}");
    assert_eq!(sample(text, denied), 1.0, "{text}");
    assert_eq!(sample(text, rule), 1.0, "{text}");
    assert_eq!(sample(text, durations), 5.0, "{text}");
    // Landlock's refusals are counted from the kernel's records, where the server reads them.
    if !matches!(
        cordon::testing::confine::audit::probe(),
        cordon::testing::confine::audit::Availability::Unavailable { .. }
    ) {
        let landlock = "cordon_denials_total{layer=\"landlock\"}";
        assert!(sample(text, landlock) >= 1.0, "{text}");
    }
    assert_eq!(sample(text, "cordon_sessions_active"), 1.0, "{text}");
    for family in [
        "cordon_jobs_active",
        "cordon_warm_slot_misses_total",
        "cordon_view_rebuilds_total",
        "cordon_egress_refusals_total",
        "cordon_parser_worker_restarts_total",
    ] {
        assert!(
            text.contains(&format!("\n{family} ")),
            "{family} missing: {text}"
        );
    }
}

#[cordon_test::test]
fn metrics_addr_is_a_loopback_listener_of_its_own() {
    let ws = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics_addr = format!("127.0.0.1:{port}");
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            extra: &["--metrics-addr", &metrics_addr],
            ..Start::default()
        },
    );
    let token = server.token.clone().unwrap();
    let own: std::net::SocketAddr = metrics_addr.parse().unwrap();
    let r = scrape(own, Some(&token));
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.body.contains("cordon_sessions_active"), "{}", r.body);
    assert_eq!(scrape(own, None).status, 401, "same authentication as /mcp");
    // The main listener no longer serves them; the metrics listener serves nothing else.
    assert_eq!(scrape(server.addr, Some(&token)).status, 404);
    let mcp = send_raw(
        own,
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthorization: \
             Bearer {token}\r\nContent-Length: 2\r\n\r\n{{}}"
        )
        .as_bytes(),
    );
    assert_eq!(mcp.status, 404, "{mcp:?}");

    let out = std::process::Command::new(crate::common::CORDON)
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--metrics-addr",
            "0.0.0.0:9",
        ])
        .arg("--workspace")
        .arg(ws.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--metrics-addr takes a loopback address"),
        "{out:?}"
    );
}

/// Through the egress proxy: the bytes of an allowed request and a refusal are counted.
#[cordon_test::test]
fn metrics_count_egress_bytes_and_refusals() {
    if skip("metrics_count_egress_bytes_and_refusals", Need::Namespaces) {
        return;
    }
    let origin = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = origin.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut stream in origin.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nhello-metric\n",
            );
        }
    });
    let ws = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("egress.toml");
    std::fs::write(
        &policy,
        "extends = \"dev\"\n[network]\nproxy = true\nallow_hosts = [\"localhost:*\"]\n\
         allow_private = [\"127.0.0.0/8\"]\n",
    )
    .unwrap();
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            extra: &["--policy", policy.to_str().unwrap()],
            ..Start::default()
        },
    );
    let token = server.token.clone().unwrap();
    let session = server.open_session();
    let got = server.call(
        &session,
        1,
        "shell_exec",
        // The host's loopback through the proxy (a call's NO_PROXY keeps localhost inside).
        json!({"command": format!("unset NO_PROXY no_proxy; curl -sS -m 20 http://localhost:{port}/")}),
    );
    assert!(got.to_string().contains("hello-metric"), "{got}");
    server.call(
        &session,
        2,
        "shell_exec",
        json!({"command": "curl -sS -m 20 https://not-listed.invalid/"}),
    );
    let text = scrape(server.addr, Some(&token)).body;
    assert!(
        sample(&text, "cordon_egress_bytes_total{direction=\"received\"}") >= 13.0,
        "{text}"
    );
    assert!(
        sample(&text, "cordon_egress_refusals_total") >= 1.0,
        "{text}"
    );
    assert!(
        sample(&text, "cordon_denials_total{layer=\"proxy\"}") >= 1.0,
        "{text}"
    );
}

/// A protected path appearing between calls (`git init` on the host) makes the next call
/// rebuild the sandbox's view: counted.
#[cordon_test::test]
fn metrics_count_view_rebuilds() {
    if skip("metrics_count_view_rebuilds", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            ..Start::default()
        },
    );
    let token = server.token.clone().unwrap();
    let session = server.open_session();
    server.call(&session, 1, "shell_exec", json!({"command": "true"}));
    let before = sample(
        &scrape(server.addr, Some(&token)).body,
        "cordon_view_rebuilds_total",
    );
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws.path())
        .status();
    assert!(git.is_ok_and(|s| s.success()), "git init in the workspace");
    server.call(&session, 2, "shell_exec", json!({"command": "true"}));
    let after = sample(
        &scrape(server.addr, Some(&token)).body,
        "cordon_view_rebuilds_total",
    );
    assert_eq!(after, before + 1.0, "one rebuild for the new .git");
}

/// The parser worker aborting (tree-sitter-yaml's scanner on this file) and being replaced for
/// the next write: counted.
#[cordon_test::test]
fn metrics_count_parser_worker_restarts() {
    if skip(
        "metrics_count_parser_worker_restarts",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let server = HttpServer::start(
        ws.path(),
        Start {
            token: true,
            policy: Some("[lint]\nlinters = []\n"),
            ..Start::default()
        },
    );
    let token = server.token.clone().unwrap();
    let session = server.open_session();
    let write = |id: u64, path: &str, content: &str| {
        server.call(
            &session,
            id,
            "write_file",
            json!({"path": path, "content": content}),
        )
    };
    write(1, "ok.py", "x = 1\n");
    let restarts = "cordon_parser_worker_restarts_total";
    let before = sample(&scrape(server.addr, Some(&token)).body, restarts);
    write(2, "ci.yaml", &"- ".repeat(600));
    write(3, "ok.py", "x = 2\n");
    let after = sample(&scrape(server.addr, Some(&token)).body, restarts);
    assert_eq!(after, before + 1.0, "the crashed worker was replaced once");
}
