//! The parser worker: every tree-sitter grammar runs in a confined child of `cordon serve`,
//! so hostile text can cost one answer but never the server. Each test drives a real server
//! over stdio and attempts the real failure: a grammar's abort (the YAML scanner's
//! `length <= 1024` assertion), a bash heredoc storm that never finishes parsing, a worker
//! killed from outside in the middle of a request, and one that stops answering.

use crate::common::{HANG_GUARD, Need, Sandbox, skip, unique_token};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CORDON: &str = env!("CARGO_BIN_EXE_cordon");
const HANG_ON: &str = "CORDON_PARSER_WORKER_HANG_ON";

/// A `cordon serve` driven line by line; its replies are read on a thread so a hung server
/// fails the test at [`HANG_GUARD`] instead of blocking it.
struct Server {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<Value>,
    next_id: u64,
}

impl Server {
    fn start(sb: &Sandbox, policy: &str, env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(CORDON)
            .arg("serve")
            .arg("--workspace")
            .arg(sb.ws())
            .arg("--policy")
            .arg(policy)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn cordon serve");
        let stdin = child.stdin.take().unwrap();
        let stdout: ChildStdout = child.stdout.take().unwrap();
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    break;
                }
            }
        });
        let mut s = Server {
            child,
            stdin,
            replies,
            next_id: 1,
        };
        let init = s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "parser-worker-test", "version": "1"}}),
        );
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, v: Value) {
        let mut line = serde_json::to_vec(&v).unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self
                .replies
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no answer to {method} (server dead or hung)"));
            if v["id"] == id {
                return v;
            }
        }
    }

    /// The `result` of a tool call.
    fn call(&mut self, tool: &str, args: Value) -> Value {
        let v = self.request("tools/call", json!({"name": tool, "arguments": args}));
        v.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("{tool} got a protocol error: {v}"))
    }

    fn lint_of(&mut self, path: &str, content: &str) -> Value {
        let r = self.call("write_file", json!({"path": path, "content": content}));
        assert_eq!(r["isError"], false, "write_file failed: {r}");
        r["structuredContent"]["lint"].clone()
    }

    fn text_of(result: &Value) -> String {
        result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A syntax-only policy (no external linters), with `extra` appended.
fn policy(sb: &Sandbox, extra: &str) -> String {
    sb.policy(
        "parser.toml",
        &format!("extends = \"default\"\n[lint]\nlinters = []\n{extra}"),
    )
}

/// The syntax check works: a broken Python file has its error, a fixed one is clean.
fn assert_syntax_check_works(server: &mut Server, file: &str) {
    let lint = server.lint_of(file, "def f(:\n    pass\n");
    assert_eq!(lint["status"], "issues", "{lint}");
    assert_eq!(lint["diagnostics"][0]["message"], "missing `)`", "{lint}");
    let lint = server.lint_of(file, "def f():\n    pass\n");
    assert_eq!(lint["status"], "clean", "{lint}");
}

/// Pids of parser workers whose environment carries `token` (the marker the server passed
/// on), wherever in the process tree the executor placed them.
fn workers_with(token: &str) -> Vec<i32> {
    let needle = format!("{HANG_ON}={token}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains("__parse-worker") {
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if environ.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

#[cordon_test::test]
fn yaml_scanner_abort_costs_one_answer() {
    if skip("yaml_scanner_abort_costs_one_answer", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let mut server = Server::start(&sb, &policy(&sb, ""), &[]);
    // tree-sitter-yaml's external scanner asserts `length <= 1024` on this 1,200-byte file
    // and aborts its process; that used to be the server.
    let crash = "- ".repeat(600);
    for round in 0..2 {
        let lint = server.lint_of("ci.yaml", &crash);
        assert_eq!(lint["status"], "unavailable", "round {round}: {lint}");
        let reason = lint["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("parser worker crashed"),
            "round {round}: the reason should say the worker crashed: {lint}"
        );
        assert!(
            lint["skipped"]
                .as_array()
                .is_some_and(|s| s.iter().any(|c| c["name"] == "syntax")),
            "round {round}: the syntax check is listed as not run: {lint}"
        );
        assert!(server.alive(), "round {round}: the server died");
        // The next call gets a fresh worker and a real answer.
        assert_syntax_check_works(&mut server, "ok.py");
    }
    assert!(std::fs::read_to_string(sb.ws().join("ci.yaml")).unwrap() == crash);
}

#[cordon_test::test]
fn bash_heredoc_storm_in_a_command_costs_one_answer() {
    if skip(
        "bash_heredoc_storm_in_a_command_costs_one_answer",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let mut server = Server::start(
        &sb,
        &policy(&sb, "[commands]\non_analysis_failure = \"deny\"\n"),
        &[],
    );
    // Twenty thousand pending here-documents: tree-sitter-bash's scanner takes quadratic
    // time on them, far past any deadline (it used to block a server thread for minutes).
    let storm = format!(
        "cat {}\n{}",
        (0..20_000)
            .map(|i| format!("<<E{i}"))
            .collect::<Vec<_>>()
            .join(" "),
        (0..20_000)
            .map(|i| format!("x\nE{i}\n"))
            .collect::<String>()
    );
    let started = Instant::now();
    let r = server.call("shell_exec", json!({"command": storm}));
    let took = started.elapsed();
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["error"]["kind"], "denied", "{r}");
    let text = Server::text_of(&r);
    assert!(
        text.contains("on_analysis_failure") && text.contains("did not answer"),
        "the refusal names the fallback and why: {text}"
    );
    assert!(
        took < Duration::from_secs(30),
        "the deadline did not hold: {took:?}"
    );
    assert!(server.alive());
    // The rules work again at once: a deny rule fires, an everyday command runs.
    let r = server.call("shell_exec", json!({"command": "rm -rf ~"}));
    assert_eq!(r["structuredContent"]["error"]["kind"], "denied", "{r}");
    assert!(
        Server::text_of(&r).contains("rm-recursive-root-or-home"),
        "{r}"
    );
    let r = server.call("shell_exec", json!({"command": "echo still-here"}));
    assert_eq!(r["isError"], false, "{r}");
    assert!(
        r["structuredContent"]["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("still-here")
    );
}

#[cordon_test::test]
fn parser_worker_killed_mid_request_is_restarted() {
    if skip(
        "parser_worker_killed_mid_request_is_restarted",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let token = unique_token();
    let mut server = Server::start(&sb, &policy(&sb, ""), &[(HANG_ON, &token)]);
    assert_syntax_check_works(&mut server, "before.py");
    let workers = workers_with(&token);
    assert_eq!(workers.len(), 1, "one parser worker runs: {workers:?}");
    let first = workers[0];
    // The worker confined itself on top of the executor's confinement: a second seccomp
    // filter (its allowlist) and no new privileges.
    let status = std::fs::read_to_string(format!("/proc/{first}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");
    assert!(
        field("Seccomp_filters:").parse::<u32>().unwrap_or(0) >= 2,
        "the worker's own seccomp allowlist is missing: {status}"
    );
    // A request the worker will not finish (it stops at the marker), killed from outside
    // while the server waits for its answer.
    let id = server.next_id;
    server.next_id += 1;
    server.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "write_file", "arguments": {"path": "stuck.py", "content": format!("# {token}\n")}}}));
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signalling the worker pid found above; no memory is involved.
    assert_eq!(unsafe { libc::kill(first, libc::SIGKILL) }, 0);
    let reply = loop {
        let v = server.replies.recv_timeout(HANG_GUARD).expect("an answer");
        if v["id"] == id {
            break v;
        }
    };
    let lint = &reply["result"]["structuredContent"]["lint"];
    assert_eq!(lint["status"], "unavailable", "{reply}");
    assert!(
        lint["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("SIGKILL"),
        "the reason says how the worker died: {lint}"
    );
    assert!(server.alive());
    assert_syntax_check_works(&mut server, "after.py");
    let now = workers_with(&token);
    assert!(
        now.len() == 1 && now[0] != first,
        "a new worker replaced the killed one: {now:?} (was {first})"
    );
}

#[cordon_test::test]
fn hung_parser_worker_times_out_and_lint_is_unavailable() {
    if skip(
        "hung_parser_worker_times_out_and_lint_is_unavailable",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let token = unique_token();
    // Elicitation alone: this client cannot be asked (with the operator channel, the default,
    // the question would wait for `cordon approve`).
    let only_elicitation = policy(&sb, "[server]\napprovals = [\"elicitation\"]\n");
    let mut server = Server::start(&sb, &only_elicitation, &[(HANG_ON, &token)]);
    let started = Instant::now();
    let lint = server.lint_of("hang.py", &format!("x = 1  # {token}\n"));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(lint["status"], "unavailable", "{lint}");
    assert!(
        lint["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("did not answer within"),
        "{lint}"
    );
    assert!(
        workers_with(&token).len() <= 1,
        "the hung worker was killed"
    );
    assert_syntax_check_works(&mut server, "next.py");
    // Command analysis that hangs falls back to the default `on_analysis_failure = "ask"`;
    // this client cannot be asked, so the command does not run, and the message says why.
    let marker = sb.ws().join("ran");
    let r = server.call(
        "shell_exec",
        json!({"command": format!("touch {} # {token}", marker.display())}),
    );
    assert_eq!(r["structuredContent"]["error"]["kind"], "denied", "{r}");
    assert!(Server::text_of(&r).contains("on_analysis_failure"), "{r}");
    assert!(!marker.exists(), "a command that could not be analysed ran");
}

#[cordon_test::test]
fn lint_skipped_names_ruff_when_absent() {
    if skip("lint_skipped_names_ruff_when_absent", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let policy = sb.policy(
        "noruff.toml",
        r#"extends = "default"
[[lint.linters]]
name = "ruff"
command = "ruff-that-is-not-installed"
args = ["check", "-"]
extensions = ["py"]
format = "ruff"
stdin = true
optional = true
install_hint = "pip install ruff"
"#,
    );
    let mut server = Server::start(&sb, &policy, &[]);
    let r = server.call(
        "write_file",
        json!({"path": "calc.py", "content": "def add(a, b):\n    return a + c\n"}),
    );
    let lint = &r["structuredContent"]["lint"];
    assert_eq!(lint["status"], "clean", "{lint}");
    assert_eq!(lint["linters"], json!(["syntax"]), "{lint}");
    let skipped = lint["skipped"].as_array().expect("skipped is a list");
    let ruff = skipped
        .iter()
        .find(|s| s["name"] == "ruff")
        .unwrap_or_else(|| panic!("ruff is named as skipped: {lint}"));
    let reason = ruff["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("not installed") && reason.contains("pip install ruff"),
        "{reason}"
    );
    let text = Server::text_of(&r);
    assert!(
        text.contains("syntax check only") && text.contains("ruff"),
        "`clean` says it was the syntax check only and what did not run: {text}"
    );
}

/// Workers that die as soon as they start are not restarted without end: after
/// `MAX_STARTS` starts within the window, requests fail at once with a reason that says so.
#[cordon_test::test]
async fn parser_restart_storm_is_bounded() {
    use cordon::testing::parser::client::MAX_STARTS;
    use cordon::testing::parser::{ParserClient, ParserConfig, ParserError};
    if skip("parser_restart_storm_is_bounded", Need::LandlockSeccomp) {
        return;
    }
    let policy = cordon::testing::policy::Policy::builtin_default();
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    let runtime = cordon::testing::runtime::Runtime::build(
        policy,
        cordon::testing::runtime::RuntimeOptions {
            workspace: root,
            ..Default::default()
        },
    )
    .expect("confinement");
    // A "worker" that exits at once without reading a byte: every request finds it dead.
    let client = ParserClient::new(
        std::sync::Arc::clone(&runtime.executor),
        "/bin/true".into(),
        ParserConfig::default(),
    );
    let lines = vec!["ls".to_owned()];
    let mut crashes = 0;
    for _ in 0..MAX_STARTS {
        match client.analyze(&lines).await {
            Err(ParserError::Crashed(_)) => crashes += 1,
            other => panic!("a dead worker cannot answer: {other:?}"),
        }
    }
    assert_eq!(crashes, MAX_STARTS);
    let started = Instant::now();
    match client.analyze(&lines).await {
        Err(e @ ParserError::RestartStorm { .. }) => {
            assert!(e.to_string().contains("not started again"), "{e}");
        }
        other => panic!("the restart bound did not hold: {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused without a start"
    );
}
