//! A `cordon serve --http` on a free loopback port, and raw HTTP/1.1 to talk to it: the tests
//! of the front door need what a client library hides (missing or wrong headers, oversized
//! and chunked bodies, a connection dropped mid-answer).

#![allow(dead_code)] // each test module uses a different subset

use crate::common::CORDON;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

pub struct HttpServer {
    child: Child,
    pub addr: SocketAddr,
    pub token: Option<String>,
    /// Everything the server wrote to stderr so far.
    pub stderr: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

/// How to start the server.
#[derive(Default)]
pub struct Start<'a> {
    /// Whether to give it a token (in a 0600 file).
    pub token: bool,
    /// A policy text (`extends = "default"` is prepended).
    pub policy: Option<&'a str>,
    pub audit_log: Option<&'a Path>,
    pub extra: &'a [&'a str],
    /// `ws` is `--workspaces` (a workspace per subject beneath it), not `--workspace`.
    pub workspaces: bool,
    /// Environment variables set for the server.
    pub env: &'a [(&'a str, &'a str)],
}

impl HttpServer {
    /// `serve --http` on the default policy with a token: what most tests need.
    pub fn with_token(ws: &Path) -> Self {
        Self::start(
            ws,
            Start {
                token: true,
                ..Start::default()
            },
        )
    }

    pub fn start(ws: &Path, how: Start<'_>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(CORDON);
        cmd.args(["serve", "--http", "127.0.0.1:0"])
            .arg(if how.workspaces {
                "--workspaces"
            } else {
                "--workspace"
            })
            .arg(ws);
        let token = how.token.then(|| {
            let token = format!("t0k-{}-{}", std::process::id(), random_hex());
            let path = dir.path().join("token");
            std::fs::write(&path, &token).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            cmd.arg("--http-token-file").arg(&path);
            token
        });
        if let Some(policy) = how.policy {
            let path = dir.path().join("policy.toml");
            std::fs::write(&path, format!("extends = \"default\"\n{policy}")).unwrap();
            cmd.arg("--policy").arg(&path);
        }
        if let Some(log) = how.audit_log {
            cmd.arg("--audit-log").arg(log);
        }
        cmd.args(how.extra);
        cmd.envs(how.env.iter().copied());
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cordon serve --http");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = BufReader::new(child.stderr.take().unwrap());
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest.split('/').next().unwrap_or_default().to_owned();
                    let _ = tx.send(addr);
                }
                let mut all = sink.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => addr.parse().expect("listen address"),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "cordon serve --http did not say where it listens:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        Self {
            child,
            addr,
            token,
            stderr,
            _dir: dir,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The `Authorization` header line of this server's token (empty without one).
    pub fn auth(&self) -> Vec<(String, String)> {
        self.token
            .iter()
            .map(|t| ("Authorization".to_owned(), format!("Bearer {t}")))
            .collect()
    }

    /// POST `body` to /mcp with the token and the usual MCP headers, plus `extra`.
    pub fn post(&self, body: &Value, extra: &[(&str, &str)]) -> Response {
        let mut headers = self.auth();
        headers.push(("Content-Type".into(), "application/json".into()));
        headers.push(("Accept".into(), ACCEPT_BOTH.into()));
        headers.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        request(self.addr, "POST", &headers, body.to_string().as_bytes())
    }

    /// `initialize` + `notifications/initialized`; returns the session id.
    pub fn open_session(&self) -> String {
        let init = self.post(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "cordon-it", "version": "1"}}}),
            &[],
        );
        assert_eq!(init.status, 200, "initialize: {init:?}");
        let session = init
            .header("mcp-session-id")
            .expect("initialize answers with Mcp-Session-Id")
            .to_owned();
        let ack = self.post(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            &[("Mcp-Session-Id", &session)],
        );
        assert_eq!(ack.status, 202, "initialized: {ack:?}");
        session
    }

    /// `tools/call` in `session`; the JSON-RPC answer.
    pub fn call(&self, session: &str, id: u64, tool: &str, arguments: Value) -> Value {
        let r = self.post(
            &call_body(id, tool, arguments),
            &[("Mcp-Session-Id", session)],
        );
        assert_eq!(r.status, 200, "{tool}: {r:?}");
        r.message(id)
            .unwrap_or_else(|| panic!("no answer to {id}: {r:?}"))
    }

    /// A stateless (2026-07-28) `tools/call`: no session, the revision's headers and `_meta`.
    pub fn stateless_call(&self, id: u64, tool: &str, arguments: Value) -> Response {
        self.post(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": tool, "arguments": arguments, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {}}}}),
            &[
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", tool),
            ],
        )
    }

    /// Sends a `tools/call` and returns the open connection once the answer's headers came
    /// (the call is running); dropping it is the client going away mid-call.
    pub fn start_call(&self, extra: &[(&str, &str)], body: &Value) -> TcpStream {
        let mut headers = self.auth();
        headers.push(("Content-Type".into(), "application/json".into()));
        headers.push(("Accept".into(), ACCEPT_BOTH.into()));
        headers.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let mut stream = TcpStream::connect(self.addr).unwrap();
        stream
            .write_all(&encode("POST", &headers, body.to_string().as_bytes()))
            .unwrap();
        stream
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child by pid.
        unsafe { libc::kill(self.pid(), signal) };
    }

    /// Waits for the server to exit; its status, or `None` if it did not within `within`.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn call_body(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
}

fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The JSON-RPC messages of the body: the body itself (JSON), or each SSE `data:` line.
    pub fn messages(&self) -> Vec<Value> {
        if let Ok(v) = serde_json::from_str::<Value>(&self.body) {
            return vec![v];
        }
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    }

    /// The answer to request `id`.
    pub fn message(&self, id: u64) -> Option<Value> {
        self.messages().into_iter().find(|m| m["id"] == json!(id))
    }
}

fn encode(method: &str, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// One request on a fresh connection (`Connection: close`); the whole response.
pub fn request(
    addr: SocketAddr,
    method: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Response {
    send_raw(addr, &encode(method, headers, body))
}

/// Writes `bytes` as they are and reads the response to the end of the connection.
pub fn send_raw(addr: SocketAddr, bytes: &[u8]) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    // The server may answer (413) before it read everything; a failed write is fine then.
    let _ = stream.write_all(bytes);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    parse_response(&raw)
}

pub fn parse_response(raw: &[u8]) -> Response {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            out.push_str(&rest[..rest.len().min(n)]);
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Reads from `stream` until `needle` appeared (or `within` passed); what was read.
pub fn read_until(stream: &mut TcpStream, needle: &str, within: Duration) -> String {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                seen.extend_from_slice(&buf[..n]);
                if String::from_utf8_lossy(&seen).contains(needle) {
                    break;
                }
            }
            Err(_) => {}
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// A token file path helper for startup tests.
pub fn token_file(dir: &Path, content: &str, mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("token");
    std::fs::write(&path, content).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// Like [`send_raw`], but a connection the server closes or refuses, or an answer that takes
/// longer than `within`, is an `Err` saying which (for tests where that is the finding).
pub fn try_send_raw(addr: SocketAddr, bytes: &[u8], within: Duration) -> Result<Response, String> {
    let mut stream =
        TcpStream::connect_timeout(&addr, within).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(within))
        .map_err(|e| format!("set_read_timeout: {e}"))?;
    stream.write_all(bytes).map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    match stream.read_to_end(&mut raw) {
        Ok(_) => {}
        Err(e) if raw.is_empty() => return Err(format!("read: {e}")),
        Err(_) => {}
    }
    if !raw.starts_with(b"HTTP/") {
        return Err(format!(
            "the server closed the connection without an answer ({} bytes read)",
            raw.len()
        ));
    }
    Ok(parse_response(&raw))
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (tests that hold hundreds of
/// sockets); the limit now in force.
pub fn raise_nofile_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on this process with a valid, owned struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        limit.rlim_cur = limit.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
    }
    limit.rlim_cur
}

/// The raw bytes of a POST of `body` to /mcp with `headers` (and `Connection: close`).
pub fn encode_post(headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    encode("POST", headers, body)
}
