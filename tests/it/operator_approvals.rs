//! The operator's approval channel end to end: a client without elicitation calls a command an
//! `ask` rule names, the question waits on the host-only socket, `cordon approvals` lists it,
//! `cordon approve ID` / `cordon deny ID` answer it, the call reports progress while it waits,
//! the approval timeout applies, and the audit log names who answered and how. And the
//! attack: a confined process tries to reach the socket, with namespaces and in the
//! no-namespace fallback (with and without `sandbox.fallback_unix_sockets`).

use crate::common::{CORDON, HANG_GUARD, Need, skip};
use crate::stdio_server::{StdioServer, structured, text};
use serde_json::{Value, json};
use std::io::BufRead;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const ASK_COMMAND: &str = "rm -rf ./*";
const ASK_RULE: &str = "rm-recursive-workspace";

/// A workspace, an approvals directory and an audit log outside it.
struct Setup {
    root: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("ws")).unwrap();
        std::fs::create_dir(root.path().join("run")).unwrap();
        std::fs::write(root.path().join("ws/keep.txt"), "precious\n").unwrap();
        Self { root }
    }
    fn ws(&self) -> std::path::PathBuf {
        self.root.path().join("ws")
    }
    /// `$XDG_RUNTIME_DIR` of the server; the sockets are in its `cordon/`.
    fn run_dir(&self) -> String {
        self.root.path().join("run").display().to_string()
    }
    fn dir(&self) -> String {
        format!("{}/cordon", self.run_dir())
    }
    fn audit(&self) -> std::path::PathBuf {
        self.root.path().join("audit.jsonl")
    }
    fn policy(&self, body: &str) -> String {
        let path = self.root.path().join("policy.toml");
        std::fs::write(&path, format!("extends = \"default\"\n{body}")).unwrap();
        path.display().to_string()
    }
    fn serve(&self, policy: &str, env: &[(&str, &str)]) -> StdioServer {
        let run = self.run_dir();
        let dir = self.dir();
        let mut env = env.to_vec();
        env.push(("XDG_RUNTIME_DIR", &run));
        // As root the channel is /run/cordon unless told otherwise: each test its own.
        env.push(("CORDON_APPROVALS_DIR", &dir));
        let audit = self.audit().display().to_string();
        StdioServer::start(
            &self.ws(),
            &["--policy", policy, "--audit-log", &audit],
            "",
            &env,
        )
    }
    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(CORDON)
            .args(args)
            .args(["--dir", &self.dir()])
            .output()
            .unwrap()
    }
    /// The questions `cordon approvals --json` lists, once one is there (or after 30 s).
    fn pending(&self) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.cli(&["approvals", "--json"]);
            assert!(out.status.success(), "{out:?}");
            let listing: Value = serde_json::from_slice(&out.stdout).unwrap();
            let pending: Vec<Value> = listing["servers"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|s| s["pending"].as_array().cloned().unwrap_or_default())
                .collect();
            if !pending.is_empty() || Instant::now() > deadline {
                return pending;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    /// `cordon approvals --watch --json`, once it is attached to the server `pid`.
    fn watch(&self, pid: i32) -> Watcher {
        let mut child = Command::new(CORDON)
            .args(["approvals", "--watch", "--json", "--dir", &self.dir()])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let watcher = Watcher(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let Some(Ok(line)) = lines.next() else { break };
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["servers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["pid"] == pid)
            {
                std::thread::spawn(move || for _ in lines {});
                return watcher;
            }
        }
        panic!("the watcher never attached to pid {pid}");
    }
    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.audit())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// A running `cordon approvals --watch`, killed when dropped.
struct Watcher(std::process::Child);

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ask_call(server: &mut StdioServer, token: u64) -> u64 {
    server.send_request(
        "tools/call",
        json!({"name": "shell_exec", "arguments": {"command": ASK_COMMAND},
               "_meta": {"progressToken": token}}),
    )
}

#[cordon_test::test]
fn the_operator_answers_an_ask_rule_for_a_client_without_elicitation() {
    let test = "the_operator_answers_an_ask_rule_for_a_client_without_elicitation";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let policy = setup.policy("");
    let mut server = setup.serve(&policy, &[]);
    // An operator watches: questions wait for the answer.
    let _watcher = setup.watch(server.pid());

    // Denied by the operator: nothing runs, the refusal is the operator's.
    let id = ask_call(&mut server, 7);
    let pending = setup.pending();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let question = &pending[0];
    assert_eq!(question["command"], ASK_COMMAND);
    assert_eq!(question["rule"], ASK_RULE);
    assert!(
        !question["reason"].as_str().unwrap().is_empty(),
        "{question}"
    );
    assert!(question["age_secs"].is_u64(), "{question}");
    let table = setup.cli(&["approvals"]);
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(
        table.contains(ASK_RULE) && table.contains(ASK_COMMAND) && table.contains("AGE"),
        "{table}"
    );
    let qid = question["id"].as_str().unwrap();
    // Long enough for the wait to be reported again (every 5 s).
    std::thread::sleep(Duration::from_secs(6));
    let denied = setup.cli(&["deny", qid]);
    assert!(denied.status.success(), "{denied:?}");
    let response = server.response(id, HANG_GUARD).expect("an answer");
    let result = &response["result"];
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(structured(result)["error"]["kind"], "denied", "{result}");
    assert!(
        text(result).contains("the operator declined it"),
        "{result}"
    );
    assert!(setup.ws().join("keep.txt").exists());
    let progress: Vec<(f64, String)> = server
        .notifications("notifications/progress", Duration::from_secs(5))
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| {
            (
                n["params"]["progress"].as_f64().unwrap(),
                n["params"]["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert!(
        progress.len() >= 2,
        "said again while waiting: {progress:?}"
    );
    for (_, m) in &progress {
        // It says who is asked: the watching operator, as the kernel names it.
        assert!(
            m.contains("waiting for the operator's approval (asked of the operator watching")
                && m.contains("uid ")
                && m.contains("run `cordon approvals`")
                && m.contains(qid),
            "{progress:?}"
        );
    }
    // Progress only grows, and stays below the command's own first tick (1 s run).
    assert!(
        progress.windows(2).all(|w| w[0].0 < w[1].0) && progress.iter().all(|p| p.0 < 1.0),
        "{progress:?}"
    );
    // An answered question is gone; answering it again says so.
    assert!(!setup.cli(&["approve", qid]).status.success());

    // Approved by the operator: it runs.
    let id = ask_call(&mut server, 8);
    let pending = setup.pending();
    let qid = pending[0]["id"].as_str().unwrap().to_owned();
    assert!(setup.cli(&["approve", &qid]).status.success());
    let response = server.response(id, HANG_GUARD).expect("an answer");
    assert_eq!(
        structured(&response["result"])["exit_code"],
        0,
        "{response}"
    );
    assert!(
        !setup.ws().join("keep.txt").exists(),
        "the approved command ran"
    );

    let records = setup.records();
    let asked: Vec<&Value> = records
        .iter()
        .filter(|r| r["tool"] == "shell_exec")
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[0]["decision"], format!("ask:{ASK_RULE}:declined"));
    assert_eq!(asked[1]["decision"], format!("ask:{ASK_RULE}:approved"));
    for record in &asked {
        assert_eq!(record["approval"]["channel"], "operator", "{record}");
        let by = record["approval"]["by"].as_str().unwrap();
        assert!(by.starts_with("uid ") && by.contains("pid "), "{record}");
    }
}

#[cordon_test::test]
fn unanswered_operator_questions_expire_and_elicitation_alone_asks_nobody() {
    let test = "unanswered_operator_questions_expire_and_elicitation_alone_asks_nobody";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let policy = setup.policy("[server]\napproval_timeout_secs = 2\napprovals = [\"operator\"]\n");
    let mut server = setup.serve(&policy, &[]);
    let _watcher = setup.watch(server.pid());
    let result = server.call("shell_exec", json!({"command": ASK_COMMAND}));
    assert_eq!(structured(&result)["error"]["kind"], "denied", "{result}");
    assert!(text(&result).contains("within 2s"), "{result}");
    assert!(
        setup.pending_now().is_empty(),
        "an expired question is not listed"
    );
    drop(server);

    let policy = setup.policy("[server]\napprovals = [\"elicitation\"]\n");
    let mut server = setup.serve(&policy, &[]);
    let started = Instant::now();
    let result = server.call("shell_exec", json!({"command": ASK_COMMAND}));
    assert_eq!(structured(&result)["error"]["kind"], "denied", "{result}");
    assert!(
        text(&result).contains("elicitation") && text(&result).contains("server.approvals"),
        "{result}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "refused without waiting"
    );
    let decisions: Vec<Value> = setup
        .records()
        .iter()
        .map(|r| r["decision"].clone())
        .collect();
    assert!(
        decisions.contains(&json!(format!("ask:{ASK_RULE}:expired")))
            && decisions.contains(&json!(format!("ask:{ASK_RULE}:unavailable"))),
        "{decisions:?}"
    );
    assert!(setup.ws().join("keep.txt").exists());
}

impl Setup {
    fn pending_now(&self) -> Vec<Value> {
        let out = self.cli(&["approvals", "--json"]);
        let listing: Value = serde_json::from_slice(&out.stdout).unwrap();
        listing["servers"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["pending"].as_array().cloned().unwrap_or_default())
            .collect()
    }
}

/// From inside `shell_exec`: read the token, connect to the socket and ask for the list.
fn attack_script(dir: &str) -> String {
    format!(
        r#"import glob, json, os, socket
d = {dir:?}
try:
    socks = sorted(os.listdir(d))
    print("listdir ALLOWED", socks)
except OSError as e:
    print("listdir refused", e.errno)
sock = os.path.join(d, "approvals-%d.sock" % int(os.environ["SERVER_PID"]))
try:
    open(sock[:-5] + ".token").read()
    print("token ALLOWED")
except OSError as e:
    print("token refused", e.errno)
try:
    s = socket.socket(socket.AF_UNIX)
except OSError as e:
    print("socket refused", e.errno)
    raise SystemExit(0)
try:
    s.connect(sock)
except OSError as e:
    print("connect refused", e.errno)
    raise SystemExit(0)
s.sendall(json.dumps({{"op": "list", "token": "0" * 64}}).encode() + b"\n")
print("answer", s.recv(65536).decode().strip())
"#
    )
}

fn attack(setup: &Setup, env: &[(&str, &str)], policy_body: &str) -> (String, Vec<Value>) {
    let policy = setup.policy(policy_body);
    let mut server = setup.serve(&policy, env);
    let _watcher = setup.watch(server.pid());
    // A question is waiting: this is what an attacker would approve.
    let id = ask_call(&mut server, 1);
    let pending = setup.pending();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let pid = server.pid().to_string();
    let script = attack_script(&setup.dir());
    let result = server.call(
        "shell_exec",
        json!({"command": "python3 -c \"$SCRIPT\"", "env": {"SCRIPT": script, "SERVER_PID": pid}}),
    );
    let out = structured(&result)["stdout"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    // The question is still waiting for the operator, unanswered by the attempt.
    let still = setup.pending_now();
    let qid = still
        .first()
        .and_then(|q| q["id"].as_str())
        .map(str::to_owned);
    if let Some(qid) = qid {
        setup.cli(&["deny", &qid]);
    }
    server
        .response(id, HANG_GUARD)
        .expect("the asked call ends");
    eprintln!("from inside the sandbox: {out}");
    (
        format!(
            "{out}\n{}",
            structured(&result)["stderr"].as_str().unwrap_or("")
        ),
        still,
    )
}

/// Whether python3 runs here; when not, the test is reported skipped (and fails under CI).
fn have_python() -> bool {
    let found = Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("python3 is missing, and the approvals-socket probes are written in it");
        }
        crate::common::skip_msg("approvals socket probe", "python3 is missing");
    }
    found
}

#[cordon_test::test]
fn a_confined_process_cannot_reach_the_approvals_socket() {
    let test = "a_confined_process_cannot_reach_the_approvals_socket";
    if skip(test, Need::Namespaces) || !have_python() {
        return;
    }
    let setup = Setup::new();
    let (out, still) = attack(&setup, &[], "");
    assert_eq!(still.len(), 1, "{out}");
    // The sandbox view has no host /tmp at all: nothing to list, read or connect to.
    assert!(out.contains("listdir refused 2"), "{out}");
    assert!(out.contains("token refused 2"), "{out}");
    assert!(out.contains("connect refused 2"), "{out}");
    assert!(!out.contains("ALLOWED") && !out.contains("answer"), "{out}");
}

#[cordon_test::test]
fn without_namespaces_a_confined_process_cannot_reach_the_approvals_socket() {
    let test = "without_namespaces_a_confined_process_cannot_reach_the_approvals_socket";
    if skip(test, Need::LandlockSeccomp) || !have_python() {
        return;
    }
    let simulate = [("CORDON_SIMULATE_MISSING", "namespaces")];
    let setup = Setup::new();
    // Seccomp refuses AF_UNIX sockets in the fallback; Landlock refuses the directory.
    let (out, still) = attack(&setup, &simulate, "");
    assert_eq!(still.len(), 1, "{out}");
    let (eacces, eperm) = (libc::EACCES, libc::EPERM);
    assert!(out.contains(&format!("listdir refused {eacces}")), "{out}");
    assert!(out.contains(&format!("token refused {eacces}")), "{out}");
    assert!(out.contains(&format!("socket refused {eperm}")), "{out}");
    assert!(!out.contains("ALLOWED"), "{out}");

    // With Unix sockets opted back in, connecting may succeed (Landlock ABI 7 does not govern
    // connecting to a named socket), but without the token nothing is listed or answered.
    let setup = Setup::new();
    let (out, still) = attack(
        &setup,
        &simulate,
        "[sandbox]\nfallback_unix_sockets = true\n",
    );
    assert_eq!(
        still.len(),
        1,
        "the question is still the operator's: {out}"
    );
    assert!(out.contains(&format!("token refused {eacces}")), "{out}");
    assert!(!out.contains("ALLOWED"), "{out}");
    if let Some(answer) = out.lines().find(|l| l.starts_with("answer ")) {
        assert!(
            answer.contains("token does not match") && !answer.contains(ASK_RULE),
            "{out}"
        );
    } else {
        assert!(out.contains("connect refused"), "{out}");
    }
}

#[cordon_test::test]
fn the_socket_and_its_token_are_private_and_removed_when_the_server_ends() {
    let test = "the_socket_and_its_token_are_private_and_removed_when_the_server_ends";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let setup = Setup::new();
    let policy = setup.policy("");
    let server = setup.serve(&policy, &[]);
    let dir = Path::new(&setup.dir()).to_owned();
    let pid = server.pid();
    let sock = dir.join(format!("approvals-{pid}.sock"));
    let token = dir.join(format!("approvals-{pid}.token"));
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&sock), 0o600);
    assert_eq!(mode(&token), 0o600);
    assert_eq!(
        std::fs::metadata(&sock).unwrap().uid(),
        rustix_uid(),
        "owned by the server's user"
    );
    let mut server = server;
    server.signal(libc::SIGTERM);
    assert!(
        server.wait_exit(HANG_GUARD).is_some(),
        "the server ends on SIGTERM"
    );
    assert!(!sock.exists() && !token.exists(), "left behind");
}

fn rustix_uid() -> u32 {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").unwrap())
}

#[cordon_test::test]
fn without_namespaces_or_landlock_the_operator_channel_stays_off() {
    let test = "without_namespaces_or_landlock_the_operator_channel_stays_off";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let policy = setup.policy("");
    let run = setup.run_dir();
    let audit = setup.audit().display().to_string();
    let dir = setup.dir();
    let mut server = StdioServer::start(
        &setup.ws(),
        &[
            "--policy",
            &policy,
            "--audit-log",
            &audit,
            "--allow-degraded",
        ],
        "",
        &[
            ("XDG_RUNTIME_DIR", &run),
            ("CORDON_APPROVALS_DIR", &dir),
            ("CORDON_SIMULATE_MISSING", "namespaces,landlock"),
        ],
    );
    let result = server.call("shell_exec", json!({"command": ASK_COMMAND}));
    assert_eq!(structured(&result)["error"]["kind"], "denied", "{result}");
    assert!(
        text(&result).contains("operator channel is not running")
            && text(&result).contains("read the channel's token"),
        "{result}"
    );
    assert!(setup.ws().join("keep.txt").exists());
    let sockets = std::fs::read_dir(setup.dir())
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(sockets, 0, "no socket was opened");
}

#[cordon_test::test]
fn an_approvals_directory_inside_the_workspace_is_refused() {
    let test = "an_approvals_directory_inside_the_workspace_is_refused";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let policy = setup.policy("");
    let inside = setup.ws().join("run").display().to_string();
    let mut server = StdioServer::start(
        &setup.ws(),
        &["--policy", &policy],
        "",
        &[
            ("XDG_RUNTIME_DIR", &inside),
            ("CORDON_APPROVALS_DIR", &format!("{inside}/cordon")),
        ],
    );
    let result = server.call("shell_exec", json!({"command": ASK_COMMAND}));
    assert_eq!(structured(&result)["error"]["kind"], "denied", "{result}");
    assert!(
        text(&result).contains("operator channel is not running")
            && text(&result).contains("which confined processes may read"),
        "{result}"
    );
    assert!(
        !setup.ws().join("run").exists(),
        "nothing made in the workspace"
    );
    assert!(setup.ws().join("keep.txt").exists());
}

#[cordon_test::test]
fn with_nobody_watching_an_ask_is_refused_at_once_and_the_operator_can_approve_the_retry() {
    let test =
        "with_nobody_watching_an_ask_is_refused_at_once_and_the_operator_can_approve_the_retry";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let policy = setup.policy("");
    let mut server = setup.serve(&policy, &[]);
    let started = Instant::now();
    let result = server.call("shell_exec", json!({"command": ASK_COMMAND}));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "refused at once, not after the approval timeout"
    );
    assert_eq!(structured(&result)["error"]["kind"], "denied", "{result}");
    assert!(setup.ws().join("keep.txt").exists(), "nothing ran");
    let said = text(&result);
    assert!(said.contains("no operator is watching"), "{result}");
    // The question is still open, and the refusal names it and the command that approves it.
    let pending = setup.pending_now();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let qid = pending[0]["id"].as_str().unwrap().to_owned();
    assert!(
        said.contains(&format!("`cordon approve {qid}`")),
        "{result}"
    );

    // Asked again before anyone answers: the same question, refused again.
    let again = server.call("shell_exec", json!({"command": ASK_COMMAND}));
    assert!(
        text(&again).contains(&format!("cordon approve {qid}")),
        "{again}"
    );
    assert_eq!(setup.pending_now().len(), 1, "one question, not two");

    let approved = setup.cli(&["approve", &qid]);
    assert!(approved.status.success(), "{approved:?}");
    assert!(
        String::from_utf8_lossy(&approved.stdout).contains("next call"),
        "{approved:?}"
    );
    // The retry runs on the operator's approval; the one after it is asked afresh.
    let retry = server.call("shell_exec", json!({"command": ASK_COMMAND}));
    assert_eq!(structured(&retry)["exit_code"], 0, "{retry}");
    assert!(
        !setup.ws().join("keep.txt").exists(),
        "the approved retry ran"
    );
    let once_more = server.call("shell_exec", json!({"command": ASK_COMMAND}));
    assert_eq!(
        structured(&once_more)["error"]["kind"],
        "denied",
        "{once_more}"
    );
    let decisions: Vec<Value> = setup
        .records()
        .iter()
        .map(|r| r["decision"].clone())
        .collect();
    assert_eq!(
        decisions,
        [
            json!(format!("ask:{ASK_RULE}:unavailable")),
            json!(format!("ask:{ASK_RULE}:unavailable")),
            json!(format!("ask:{ASK_RULE}:approved")),
            json!(format!("ask:{ASK_RULE}:unavailable")),
        ],
        "{decisions:?}"
    );
}

/// A listener at `path` that answers every request with `reply`, and counts the requests.
fn fake_server(path: &Path, reply: Value) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::io::Write;
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut line = String::new();
            let _ = std::io::BufReader::new(&stream).read_line(&mut line);
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = stream.write_all(format!("{reply}\n").as_bytes());
        }
    });
    seen
}

#[cordon_test::test]
fn the_cli_trusts_only_its_own_users_directory_sockets_and_tokens() {
    use std::os::unix::fs::PermissionsExt;
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap()
        == 0;
    if !root {
        crate::common::skip_msg(
            "the_cli_trusts_only_its_own_users_directory_sockets_and_tokens",
            "needs root (chown to uid 65534)",
        );
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "needs root under CI"
        );
        return;
    }
    let setup = Setup::new();
    let dir = Path::new(&setup.dir()).to_owned();
    let fake = json!({"answered": {"id": "0123abcd"}});
    let listed = json!({"pending": {"workspace": "/ws\u{1b}[2J", "pid": 1, "pending": [
        {"id": "0123abcd", "command": "ls\u{1b}]0;pwned\u{7}", "rule": "r\u{9b}1m",
         "reason": "why\u{202e}", "age_secs": 1}]}});

    // A directory another user made: refused whole, naming path, owner and mode.
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let seen = fake_server(&dir.join("approvals-1.sock"), fake.clone());
    std::fs::write(dir.join("approvals-1.token"), "t").unwrap();
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    for args in [
        &["approvals"][..],
        &["approvals", "--json"],
        &["approve", "0123abcd"],
    ] {
        let out = setup.cli(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {out:?}");
        assert!(
            err.contains(&dir.display().to_string())
                && err.contains("uid 65534")
                && err.contains("755"),
            "{args:?}: {err}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("approved"),
            "{out:?}"
        );
    }
    assert_eq!(
        seen.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the planted socket was asked"
    );

    // Our directory, with a socket and token of another uid planted in it: not asked.
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let planted = dir.join("approvals-2.sock");
    let seen = fake_server(&planted, fake.clone());
    std::fs::write(dir.join("approvals-2.token"), "t").unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), None).unwrap();
    std::os::unix::fs::chown(dir.join("approvals-2.token"), Some(65534), None).unwrap();
    let out = setup.cli(&["approvals", "--json"]);
    let listing: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listing["servers"], json!([]), "{listing}");
    assert!(
        listing["refused"][0]
            .as_str()
            .unwrap()
            .contains("uid 65534"),
        "{listing}"
    );
    let out = setup.cli(&["approve", "0123abcd"]);
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(
        seen.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the planted socket was asked"
    );
    std::fs::remove_file(&planted).unwrap();
    std::fs::remove_file(dir.join("approvals-2.token")).unwrap();

    // A server of ours that sends terminal escapes: shown, not obeyed.
    let ours = dir.join("approvals-3.sock");
    fake_server(&ours, listed);
    std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token = dir.join("approvals-3.token");
    std::fs::write(&token, "t").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    for args in [&["approvals"][..], &["approvals", "--json"]] {
        let out = setup.cli(args);
        assert!(out.status.success(), "{out:?}");
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(shown.contains("0123abcd"), "{shown}");
        assert!(
            !shown
                .chars()
                .any(|c| c.is_control() && c != '\n' || c == '\u{202e}'),
            "{args:?}: {shown:?}"
        );
    }
    std::fs::remove_file(&ours).unwrap();
    std::fs::remove_file(&token).unwrap();

    // A killed server's leftovers: pruned.
    let stale = dir.join("approvals-4.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o600)).unwrap();
    let stale_token = dir.join("approvals-4.token");
    std::fs::write(&stale_token, "t").unwrap();
    std::fs::set_permissions(&stale_token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = setup.cli(&["approvals"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("removed"),
        "{out:?}"
    );
    assert!(
        !stale.exists() && !stale_token.exists(),
        "the stale socket was kept"
    );
}

#[cordon_test::test]
fn as_root_another_users_runtime_directory_does_not_take_the_channel() {
    let test = "as_root_another_users_runtime_directory_does_not_take_the_channel";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap()
        == 0;
    if !root {
        crate::common::skip_msg(test, "needs root");
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "needs root under CI"
        );
        return;
    }
    // uid 65534 owns the runtime directory root's server was given, and made cordon/ in it.
    let setup = Setup::new();
    let run = Path::new(&setup.run_dir()).to_owned();
    std::fs::create_dir(run.join("cordon")).unwrap();
    for p in [&run, &run.join("cordon")] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    let policy = setup.policy("");
    let run_s = run.display().to_string();
    let mut server = StdioServer::start(
        &setup.ws(),
        &["--policy", &policy],
        "",
        &[("XDG_RUNTIME_DIR", &run_s)],
    );
    let pid = server.pid();
    let sock = Path::new("/run/cordon").join(format!("approvals-{pid}.sock"));
    assert!(
        crate::stdio_server::eventually(Duration::from_secs(10), || sock.exists()),
        "root's channel is in /run/cordon"
    );
    assert_eq!(std::fs::read_dir(run.join("cordon")).unwrap().count(), 0);
    // The channel works: a question asked with nobody watching is open there.
    let result = server.call("shell_exec", json!({"command": ASK_COMMAND}));
    assert!(text(&result).contains("cordon approve "), "{result}");
    let out = Command::new(CORDON)
        .args(["approvals", "--json"])
        .env_remove("CORDON_APPROVALS_DIR")
        .output()
        .unwrap();
    let listing: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours = listing["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["pid"] == pid)
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        ours["pending"].as_array().map(Vec::len),
        Some(1),
        "{listing}"
    );
}
