//! `serve --http --workspaces DIR` (issue 36): each authenticated subject, two JWT subjects
//! and two holders of a token file, works in a workspace of its own, with its own files,
//! jobs and loopback, git repository, home and interpreter state; the groups of its
//! credentials select the policy its calls run under; a read-only subject cannot write
//! through any tool; no argument selects another subject's workspace; each subject has its
//! own audit stream naming it, its scope and its policy.

use crate::common::unique_token;
use crate::http_client::{HttpServer, Start, call_body, token_file};
use crate::http_server::{jwt, oauth_policy, open_session_as, tool_names};
use serde_json::{Value, json};

/// One client: its `Authorization` value and an open session.
struct Client<'a> {
    server: &'a HttpServer,
    auth: String,
    session: String,
    next_id: std::cell::Cell<u64>,
}

impl<'a> Client<'a> {
    fn open(server: &'a HttpServer, auth: String) -> Self {
        let session = open_session_as(server, &auth);
        Self {
            server,
            auth,
            session,
            next_id: std::cell::Cell::new(10),
        }
    }

    fn headers(&self) -> [(&str, &str); 2] {
        [
            ("Authorization", self.auth.as_str()),
            ("Mcp-Session-Id", self.session.as_str()),
        ]
    }

    /// A tool call's result (`isError`, `structuredContent`).
    fn call(&self, tool: &str, args: Value) -> Value {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let reply = self
            .server
            .post(&call_body(id, tool, args), &self.headers());
        let message = reply.message(id).unwrap_or_else(|| panic!("{reply:?}"));
        message["result"].clone()
    }

    fn shell(&self, command: &str) -> Value {
        self.call("shell_exec", json!({"command": command}))
    }

    fn tools(&self) -> Vec<String> {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        tool_names(self.server, &self.headers(), id)
    }
}

fn stdout(result: &Value) -> &str {
    result["structuredContent"]["stdout"].as_str().unwrap_or("")
}

fn is_error(result: &Value) -> bool {
    result["isError"] == json!(true)
}

fn hex_sha256(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `Authorization` for a JWT of the test issuer naming `sub`, every tool scope and `groups`.
fn bearer(sub: &str, groups: Value) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    format!(
        "Bearer {}",
        jwt(
            json!({"iss": "https://auth.example", "aud": "https://cordon.example/mcp",
                   "sub": sub, "exp": now + 600,
                   "scope": "cordon:read cordon:write cordon:exec", "groups": groups})
        )
    )
}

/// `serve --http --workspaces root` accepting the test issuer's JWTs, with `http` lines of
/// `[server.http]` and `after` appended to the policy (group policies).
fn team_server(
    root: &std::path::Path,
    keys: &std::path::Path,
    http: &str,
    after: &str,
    how: Start<'_>,
) -> HttpServer {
    let policy = format!("[server.http]\n{http}{}\n{after}", oauth_policy(keys, ""));
    HttpServer::start(
        root,
        Start {
            policy: Some(&policy),
            workspaces: true,
            ..how
        },
    )
}

const REVIEWERS_ON_STRICT: &str =
    "[[server.http.group_policies]]\ngroup = \"reviewers\"\npolicy = \"strict\"\n";

#[cordon_test::test]
fn http_each_subject_works_in_its_own_workspace_under_its_groups_policy() {
    let root = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let alice_token = format!("alice-{}", unique_token());
    let rita_token = format!("rita-{}", unique_token());
    let entries = format!(
        "sha256:{} alice * group=developers\nsha256:{} rita cordon:read group=reviewers\n",
        hex_sha256(&alice_token),
        hex_sha256(&rita_token)
    );
    let file = token_file(keys.path(), &entries, 0o600);
    let file_s = file.display().to_string();
    let log = keys.path().join("audit.jsonl");
    let server = team_server(
        root.path(),
        keys.path(),
        "",
        REVIEWERS_ON_STRICT,
        Start {
            audit_log: Some(&log),
            extra: &["--http-token-file", &file_s],
            ..Start::default()
        },
    );
    let alice = Client::open(&server, format!("Bearer {alice_token}"));
    let rita = Client::open(&server, format!("Bearer {rita_token}"));
    let bob = Client::open(&server, bearer("bob", json!(["developers"])));
    let carol = Client::open(&server, bearer("carol", json!("reviewers")));

    // Files: what alice writes, by any tool, only alice sees.
    let wrote = alice.call(
        "write_file",
        json!({"path": "secret.txt", "content": "alice's\n"}),
    );
    assert!(!is_error(&wrote), "{wrote}");
    let made = alice.shell("echo made-by-shell > shell.txt && pwd && echo $HOME");
    assert!(!is_error(&made), "{made}");
    // Each subject's workspace records its own checkpoints: alice can undo her call, and
    // bob's list holds none of hers.
    let undo = made["structuredContent"]["checkpoint"]
        .as_str()
        .unwrap_or_else(|| panic!("a subject's changing call carries a checkpoint: {made}"));
    let alice_list = alice.call("checkpoint", json!({"action": "list"}));
    assert!(alice_list.to_string().contains(undo), "{alice_list}");
    assert!(alice_list.to_string().contains("shell.txt"), "{alice_list}");
    let bob_list = bob.call("checkpoint", json!({"action": "list"}));
    assert!(!is_error(&bob_list), "{bob_list}");
    assert!(!bob_list.to_string().contains("shell.txt"), "{bob_list}");
    let bob_reads = bob.call("read_file", json!({"path": "secret.txt"}));
    assert!(
        is_error(&bob_reads),
        "bob must not see alice's file: {bob_reads}"
    );
    let listing = bob.shell("ls -a; cat secret.txt shell.txt 2>&1; true");
    assert!(
        !stdout(&listing).contains("alice's") && !stdout(&listing).contains("made-by-shell"),
        "{listing}"
    );
    // Not by naming it: the workspaces are siblings beneath the root, and neither a relative
    // climb nor an absolute path reaches another.
    let names: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    let alice_dir = names
        .iter()
        .find(|n| n.starts_with("bearer_alice-"))
        .unwrap_or_else(|| panic!("{names:?}"))
        .clone();
    let alice_path = root.path().join(&alice_dir);
    assert_eq!(
        std::fs::read_to_string(alice_path.join("secret.txt")).unwrap(),
        "alice's\n"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&alice_path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "a subject's workspace is the server's alone");
    }
    for path in [
        format!("../{alice_dir}/secret.txt"),
        alice_path.join("secret.txt").display().to_string(),
    ] {
        let read = bob.call("read_file", json!({"path": path}));
        assert!(is_error(&read), "{path}: {read}");
        let kind = &read["structuredContent"]["error"]["kind"];
        assert!(
            kind == "path_escape" || kind == "not_found",
            "{path}: {read}"
        );
        let write = bob.call(
            "write_file",
            json!({"path": path, "content": "bob was here\n"}),
        );
        assert!(is_error(&write), "{path}: {write}");
        let cat = bob.shell(&format!("cat {path} 2>&1; true"));
        assert!(!stdout(&cat).contains("alice's"), "{path}: {cat}");
    }
    assert_eq!(
        std::fs::read_to_string(alice_path.join("secret.txt")).unwrap(),
        "alice's\n",
        "bob's writes went nowhere near alice's file"
    );

    // Home: each subject's calls have their own.
    alice.shell("echo alice-home > ~/.marker");
    let bob_home = bob.shell("cat ~/.marker 2>&1; true");
    assert!(!stdout(&bob_home).contains("alice-home"), "{bob_home}");
    let alice_home = alice.shell("cat ~/.marker");
    assert_eq!(stdout(&alice_home), "alice-home\n", "{alice_home}");

    // Git: alice's repository is not bob's.
    let git = alice.shell(
        "git init -q . && git -c user.name=a -c user.email=a@x add secret.txt && \
         git -c user.name=a -c user.email=a@x commit -qm alice && git log --format=%s",
    );
    assert_eq!(stdout(&git), "alice\n", "{git}");
    let bob_git = bob.shell("git log --format=%s 2>&1; true");
    assert!(!stdout(&bob_git).contains("alice"), "{bob_git}");

    // Interpreter state.
    let set = alice.call("code_interpreter", json!({"code": "shared = 41"}));
    assert!(!is_error(&set), "{set}");
    let get = bob.call("code_interpreter", json!({"code": "print(shared)"}));
    assert!(
        is_error(&get) || !get.to_string().contains("41"),
        "bob must not see alice's variables: {get}"
    );

    // Jobs and loopback: alice's server is not reachable from bob's calls, nor listed.
    let port = 20_000 + (std::process::id() % 20_000) as u16;
    let serve = alice.call(
        "shell_exec",
        json!({"command": format!("exec python3 -u -m http.server {port} --bind 127.0.0.1"),
               "background": true, "until": "Serving", "wait_secs": 20}),
    );
    assert!(
        serve["structuredContent"]["job"]["id"].is_string(),
        "{serve}"
    );
    let probe = format!(
        "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/', \
         timeout=3).status)\" 2>&1; true"
    );
    let from_alice = alice.shell(&probe);
    assert!(stdout(&from_alice).contains("200"), "{from_alice}");
    let from_bob = bob.shell(&probe);
    assert!(!stdout(&from_bob).contains("200"), "{from_bob}");
    let bob_jobs = bob.call("job", json!({"action": "list"}));
    assert!(!bob_jobs.to_string().contains("http.server"), "{bob_jobs}");

    // A read-only subject: rita's token has only cordon:read; carol has every scope but is
    // a reviewer, so her calls run under `strict` (a read-only workspace).
    assert_eq!(rita.tools(), ["read_file"]);
    let rita_write = rita.call("write_file", json!({"path": "r.txt", "content": "x"}));
    assert!(is_error(&rita_write), "{rita_write}");
    let rita_shell = rita.shell("touch r.txt");
    assert!(is_error(&rita_shell), "{rita_shell}");
    let carol_shell = carol.shell("touch c.txt");
    assert!(is_error(&carol_shell), "strict: no write: {carol_shell}");
    let carol_write = carol.call("write_file", json!({"path": "c.txt", "content": "x"}));
    assert!(is_error(&carol_write), "{carol_write}");
    let carol_edit = carol.call(
        "edit_file",
        json!({"path": "c.txt", "edits": [{"old_string": "x", "new_string": "y"}]}),
    );
    assert!(is_error(&carol_edit), "{carol_edit}");
    let carol_py = carol.call(
        "code_interpreter",
        json!({"code": "open('c.txt', 'w').write('x')"}),
    );
    assert!(is_error(&carol_py), "{carol_py}");
    let carol_root = names_now(root.path())
        .into_iter()
        .find(|n| n.starts_with("jwt_https___auth.example_carol-"))
        .expect("carol's workspace");
    assert!(
        !root.path().join(&carol_root).join("c.txt").exists(),
        "nothing carol ran wrote"
    );

    // Each subject's own audit stream, naming it, the scope and the policy.
    let stream_of = |dir: &str| {
        std::fs::read_to_string(keys.path().join(format!("audit.{dir}.jsonl")))
            .unwrap_or_else(|e| panic!("audit stream of {dir}: {e}"))
    };
    let alice_audit = stream_of(&alice_dir);
    assert!(
        alice_audit.contains("\"subject\":\"bearer:alice\""),
        "{alice_audit}"
    );
    assert!(
        !alice_audit.contains("jwt:"),
        "only alice's calls: {alice_audit}"
    );
    let carol_audit = stream_of(&carol_root);
    assert!(
        carol_audit.contains("\"policy\":\"strict (built-in)\"")
            || carol_audit.contains("\"policy\":\"strict"),
        "{carol_audit}"
    );
    assert!(
        carol_audit.contains("\"scope\":\"cordon:exec\""),
        "{carol_audit}"
    );
    assert!(!carol_audit.contains(&alice_token) && !alice_audit.contains(&alice_token));
}

fn names_now(root: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A subject's credentials that select another policy than its running workspace's are
/// refused (never run with the rights of the old ones); and `--workspaces` without any
/// authentication does not start.
#[cordon_test::test]
fn http_workspaces_refuse_a_changed_policy_and_need_authentication() {
    let root = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let server = team_server(
        root.path(),
        keys.path(),
        "",
        REVIEWERS_ON_STRICT,
        Start::default(),
    );
    let bearer = |groups: Value| bearer("dana", groups);
    // The instructions speak of the caller's own workspace, never of the server's template.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let answer = server.post(&init, &[("Authorization", &bearer(json!([])))]);
    let instructions = answer.message(0).unwrap()["result"]["instructions"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        instructions.contains("Workspace: your own"),
        "{instructions}"
    );
    assert!(!instructions.contains(".server"), "{instructions}");
    let developer = Client::open(&server, bearer(json!([])));
    let first = developer.shell("touch made && echo ok");
    assert_eq!(stdout(&first), "ok\n", "{first}");
    // The same subject, now a reviewer, while the developer session is open.
    let reviewer = Client::open(&server, bearer(json!(["reviewers"])));
    let refused = reviewer.shell("touch again");
    assert!(is_error(&refused), "{refused}");
    assert_eq!(
        refused["structuredContent"]["error"]["kind"],
        json!("denied"),
        "{refused}"
    );
    let message = refused["structuredContent"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("strict"), "{message}");
    drop(server);

    let out = std::process::Command::new(crate::common::CORDON)
        .args(["serve", "--http", "127.0.0.1:0", "--workspaces"])
        .arg(root.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--workspaces"), "{stderr}");
}

/// One subject cannot take every session (`max_sessions_per_subject`); a subject's workspace
/// runtime with no session left is shut down after `workspace_idle_secs`, and its next call
/// starts it again, files intact.
#[cordon_test::test]
fn http_subject_sessions_are_bounded_and_idle_workspaces_shut_down_and_come_back() {
    let root = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let server = team_server(
        root.path(),
        keys.path(),
        "workspace_idle_secs = 1\nmax_sessions_per_subject = 2\n",
        "",
        Start {
            env: &[("CORDON_LOG", "cordon=info")],
            ..Start::default()
        },
    );
    let bearer = |sub: &str| bearer(sub, json!([]));
    let eve = bearer("eve");
    let _first = Client::open(&server, eve.clone());
    let _second = Client::open(&server, eve.clone());
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let third = server.post(&init, &[("Authorization", &eve)]);
    assert_eq!(third.status, 503, "{third:?}");
    assert!(third.body.contains("max_sessions_per_subject"), "{third:?}");

    let frank = Client::open(&server, bearer("frank"));
    let made = frank.shell("echo kept > kept.txt && echo ok");
    assert_eq!(stdout(&made), "ok\n", "{made}");
    let mut headers = vec![("Authorization".to_owned(), frank.auth.clone())];
    headers.push(("Mcp-Session-Id".to_owned(), frank.session.clone()));
    let deleted = crate::http_client::request(server.addr, "DELETE", &headers, b"");
    assert!(
        deleted.status == 202 || deleted.status == 200,
        "{deleted:?}"
    );
    let shut = crate::stdio_server::eventually(std::time::Duration::from_secs(20), || {
        server
            .stderr()
            .contains("shut down an idle subject's workspace")
    });
    assert!(shut, "{}", server.stderr());
    let again = Client::open(&server, bearer("frank"));
    let back = again.shell("cat kept.txt");
    assert_eq!(stdout(&back), "kept\n", "{back}");
    let starts = server
        .stderr()
        .matches("started a subject's workspace")
        .count();
    // eve never called (a session alone builds nothing): frank's first start and its restart.
    assert_eq!(starts, 2, "{}", server.stderr());
}

/// `max_workspaces_running`: past it, a new subject's call is refused while every running
/// workspace is in use, and takes the place of one no session uses any more.
#[cordon_test::test]
fn http_running_subject_workspaces_are_bounded() {
    let root = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let server = team_server(
        root.path(),
        keys.path(),
        "max_workspaces_running = 1\n",
        "",
        Start::default(),
    );
    let bearer = |sub: &str| bearer(sub, json!([]));
    let first = Client::open(&server, bearer("gina"));
    assert_eq!(stdout(&first.shell("echo one")), "one\n");
    let second = Client::open(&server, bearer("hank"));
    let refused = second.shell("echo two");
    assert!(is_error(&refused), "{refused}");
    assert_eq!(
        refused["structuredContent"]["error"]["kind"],
        json!("resource_limit"),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("max_workspaces_running"),
        "{refused}"
    );
    // gina's session ends: her workspace is no one's in use, and hank's takes its place.
    let headers = vec![
        ("Authorization".to_owned(), first.auth.clone()),
        ("Mcp-Session-Id".to_owned(), first.session.clone()),
    ];
    let deleted = crate::http_client::request(server.addr, "DELETE", &headers, b"");
    assert!(
        deleted.status == 202 || deleted.status == 200,
        "{deleted:?}"
    );
    let ran = crate::stdio_server::eventually(std::time::Duration::from_secs(10), || {
        stdout(&second.shell("echo two")) == "two\n"
    });
    assert!(ran, "hank's call never got a place");
}
