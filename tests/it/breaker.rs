//! The circuit breaker for repeated refusals, end to end over stdio and `serve --http`: three
//! denials of one command rule trip it and the fourth is no plain deny (nobody to ask: the
//! result says stop, with `breaker`; elicitation: the client's user is asked; the operator
//! answers through `cordon approve`/`deny`), a success of the same tool resets it, a variant
//! spelling of the refused command counts in the same group, and nothing a model sends (an
//! argument, `_meta`, another tool's success) resets it.

use crate::common::{CORDON, HANG_GUARD, Need, skip};
use crate::http_client::{HttpServer, Start, call_body, read_until};
use crate::stdio_server::{StdioServer, structured, text};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Two harmless deny rules (so "allow" can be proven by running them) and a copy of the
/// shipped home-deletion rule (for the variant spellings; never allowed here).
const RULES: &str = r#"
[[commands.rules]]
name = "no-touch-marker"
decision = "deny"
justification = "The test forbids creating the marker."
match = { program = ["touch"], any_arg = ["marker"] }
examples = { match = ["touch marker"], not_match = ["touch other"] }

[[commands.rules]]
name = "no-touch-second"
decision = "deny"
justification = "The test forbids creating the second marker."
match = { program = ["touch"], any_arg = ["second"] }
examples = { match = ["touch second"], not_match = ["touch other"] }

[[commands.rules]]
name = "rm-recursive-root-or-home"
decision = "deny"
justification = "Recursively deleting the home directory destroys the workspace."
match = { program = ["rm"], all_flags = ["-r|-R|--recursive"], any_arg = ["/", "~", "$HOME", "${HOME}"] }
examples = { match = ["rm -rf ~", "rm  -r -f $HOME", "rm -R --force ~", "sh -c 'rm -fr ~'", "rm -fr $HOME"], not_match = ["rm -rf build"] }
"#;

const MARKER_RULE: &str = "rule:no-touch-marker";

struct Setup {
    root: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        for dir in ["ws", "run"] {
            std::fs::create_dir(root.path().join(dir)).unwrap();
        }
        std::fs::write(root.path().join("ws/notes.txt"), "hello\n").unwrap();
        Self { root }
    }
    fn ws(&self) -> PathBuf {
        self.root.path().join("ws")
    }
    fn audit(&self) -> PathBuf {
        self.root.path().join("audit.jsonl")
    }
    fn run_dir(&self) -> String {
        self.root.path().join("run").display().to_string()
    }
    fn policy(&self, extra: &str) -> String {
        let path = self.root.path().join("policy.toml");
        std::fs::write(&path, format!("extends = \"default\"\n{extra}\n{RULES}")).unwrap();
        path.display().to_string()
    }
    /// A stdio server under `extra` (plus the rules), declaring `capabilities`.
    fn serve(&self, extra: &str, capabilities: Value) -> StdioServer {
        let policy = self.policy(extra);
        let audit = self.audit().display().to_string();
        let run = self.run_dir();
        // As root the channel is /run/cordon whatever XDG_RUNTIME_DIR says (server::operator):
        // the test's own directory is named explicitly, as the CLI's `--dir` names it.
        let dir = format!("{run}/cordon");
        StdioServer::start_declaring(
            &self.ws(),
            &["--policy", &policy, "--audit-log", &audit],
            "",
            &[("XDG_RUNTIME_DIR", &run), ("CORDON_APPROVALS_DIR", &dir)],
            capabilities,
        )
    }
    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.audit())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
    fn cli(&self, args: &[&str], dir: Option<&str>) -> std::process::Output {
        let mut cmd = Command::new(CORDON);
        cmd.args(args);
        if let Some(dir) = dir {
            cmd.args(["--dir", dir]);
        }
        cmd.output().unwrap()
    }
}

/// The questions waiting for the operator of server `pid` in `dir` (None: the default
/// directory), once there is one (or after 30 s).
fn pending(setup: &Setup, dir: Option<&str>, pid: Option<u64>) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = setup.cli(&["approvals", "--json"], dir);
        assert!(out.status.success(), "{out:?}");
        let listing: Value = serde_json::from_slice(&out.stdout).unwrap();
        let found: Vec<Value> = listing["servers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| pid.is_none_or(|p| s["pid"] == p))
            .flat_map(|s| s["pending"].as_array().cloned().unwrap_or_default())
            .collect();
        if !found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn shell(command: &str) -> Value {
    json!({ "command": command })
}

/// A plain refusal by a command rule: `denied`, and no breaker yet.
fn assert_plain_deny(result: &Value, what: &str) {
    assert_eq!(result["isError"], true, "{what}: {result}");
    let content = structured(result);
    assert_eq!(content["error"]["kind"], "denied", "{what}: {result}");
    assert!(
        content.get("breaker").is_none(),
        "{what}: no breaker yet: {result}"
    );
    assert!(
        text(result).contains("not run: refused by"),
        "{what}: {result}"
    );
}

/// A refusal the breaker answered: stop, with `breaker = {group, count, since}`.
fn assert_breaker(result: &Value, group: &str, count: u64) {
    assert_eq!(result["isError"], true, "{result}");
    let content = structured(result);
    assert_eq!(content["error"]["kind"], "denied", "{result}");
    assert_eq!(content["error"]["retriable"], false, "{result}");
    assert_eq!(content["breaker"]["group"], group, "{result}");
    assert_eq!(content["breaker"]["count"], count, "{result}");
    assert!(
        content["breaker"]["since"].as_str().unwrap().ends_with('Z'),
        "{result}"
    );
    let said = content["error"]["message"].as_str().unwrap();
    assert!(
        said.contains("will not help") || said.contains("keep refusing"),
        "{said}"
    );
    assert!(
        text(result).starts_with("error [denied]: refused again"),
        "{result}"
    );
}

/// Nobody to ask (`server.approvals = ["elicitation"]` and a client without it).
const NOBODY: &str = "[server]\napprovals = [\"elicitation\"]\n";

#[cordon_test::test]
fn breaker_three_denials_of_one_rule_trip_it_and_the_next_says_stop_over_stdio() {
    let test = "breaker_three_denials_of_one_rule_trip_it_and_the_next_says_stop_over_stdio";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let mut server = setup.serve(NOBODY, json!({}));
    let id = server.send_request("logging/setLevel", json!({"level": "info"}));
    server.response(id, HANG_GUARD).expect("setLevel answered");
    for i in 1..=3 {
        let result = server.call("shell_exec", shell("touch marker"));
        assert_plain_deny(&result, &format!("denial {i}"));
    }
    let fourth = server.call("shell_exec", shell("touch marker"));
    assert_breaker(&fourth, MARKER_RULE, 4);
    let said = structured(&fourth)["error"]["message"].as_str().unwrap();
    assert!(
        said.contains("has repeated 4 times") && said.contains("Stop and ask your user"),
        "{said}"
    );
    // The refusal's own explanation is still there.
    assert!(
        said.contains("The test forbids creating the marker"),
        "{said}"
    );
    assert!(!setup.ws().join("marker").exists(), "nothing ran");
    // The trip is a log message, an audit record and a line on stderr's side (see HTTP).
    let notes = server.notifications("notifications/message", Duration::from_secs(5));
    let trips: Vec<&Value> = notes
        .iter()
        .filter(|n| n["params"]["data"]["event"] == "breaker_tripped")
        .collect();
    assert_eq!(trips.len(), 1, "one trip: {notes:?}");
    assert_eq!(trips[0]["params"]["data"]["group"], MARKER_RULE);
    assert_eq!(trips[0]["params"]["data"]["count"], 3);
    let records = setup.records();
    let tripped: Vec<&Value> = records.iter().filter(|r| r["tool"] == "breaker").collect();
    assert_eq!(tripped.len(), 1, "{records:?}");
    assert_eq!(tripped[0]["arguments"]["group"], MARKER_RULE);
    assert_eq!(tripped[0]["outcome"]["breaker"], "tripped");
    let denied = records
        .iter()
        .filter(|r| r["tool"] == "shell_exec" && r["decision"] == "deny:no-touch-marker")
        .count();
    assert_eq!(denied, 4, "{records:?}");
    // `policy replay` shows where a policy would trip it: this one at the third denial, one
    // with `consecutive = 2` at the second.
    let shell_lines: Vec<usize> = std::fs::read_to_string(setup.audit())
        .unwrap()
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains("\"tool\":\"shell_exec\""))
        .map(|(i, _)| i + 1)
        .collect();
    let replay = |policy: &str| -> Value {
        let out = Command::new(CORDON)
            .args(["policy", "replay", "--json", "--policy", policy])
            .arg(setup.audit())
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let same = replay(&setup.policy(NOBODY));
    assert_eq!(same["breaker"][0]["line"], shell_lines[2], "{same}");
    assert_eq!(same["breaker"][0]["group"], MARKER_RULE, "{same}");
    assert_eq!(same["breaker"][0]["met"], 1, "{same}");
    let eager = replay(&setup.policy("[breaker]\nconsecutive = 2\n"));
    assert_eq!(eager["breaker"][0]["line"], shell_lines[1], "{eager}");
    assert_eq!(eager["breaker"][0]["count"], 2, "{eager}");
}

#[cordon_test::test]
fn breaker_counts_variant_spellings_of_one_refused_command_in_one_group() {
    let test = "breaker_counts_variant_spellings_of_one_refused_command_in_one_group";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let mut server = setup.serve(NOBODY, json!({}));
    for variant in ["rm -rf ~", "rm  -r -f $HOME", "rm -R --force ~"] {
        let result = server.call("shell_exec", shell(variant));
        assert_plain_deny(&result, variant);
    }
    let fourth = server.call("shell_exec", shell("sh -c 'rm -fr ~'"));
    assert_breaker(&fourth, "rule:rm-recursive-root-or-home", 4);
    // Another rule's group is its own: its first refusal is plain.
    let other = server.call("shell_exec", shell("touch marker"));
    assert_plain_deny(&other, "another rule");
}

#[cordon_test::test]
fn breaker_is_reset_by_a_success_of_the_same_tool() {
    let test = "breaker_is_reset_by_a_success_of_the_same_tool";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let mut server = setup.serve(NOBODY, json!({}));
    for _ in 0..2 {
        assert_plain_deny(&server.call("shell_exec", shell("touch marker")), "before");
    }
    let ok = server.call("shell_exec", shell("true"));
    assert_eq!(ok["isError"], false, "{ok}");
    // A new run: three more plain denials, the fourth of the run meets the breaker.
    for i in 1..=3 {
        let result = server.call("shell_exec", shell("touch marker"));
        assert_plain_deny(&result, &format!("after the success, {i}"));
    }
    assert_breaker(
        &server.call("shell_exec", shell("touch marker")),
        MARKER_RULE,
        4,
    );
}

#[cordon_test::test]
fn breaker_cannot_be_reset_by_anything_a_model_sends() {
    let test = "breaker_cannot_be_reset_by_anything_a_model_sends";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let mut server = setup.serve(NOBODY, json!({}));
    for _ in 0..3 {
        server.call("shell_exec", shell("touch marker"));
    }
    // Another tool's success is not this run's.
    let read = server.call("read_file", json!({"path": "notes.txt"}));
    assert_eq!(read["isError"], false, "{read}");
    // Arguments and `_meta` that look like a reset are just more of the same call.
    let with_env = server.call(
        "shell_exec",
        json!({"command": "touch marker", "env": {"CORDON_BREAKER": "reset"}}),
    );
    assert_breaker(&with_env, MARKER_RULE, 4);
    let id = server.send_request(
        "tools/call",
        json!({"name": "shell_exec", "arguments": {"command": "touch marker"},
               "_meta": {"breaker": {"reset": true}, "cordon/breaker": "reset"}}),
    );
    let response = server.response(id, HANG_GUARD).expect("an answer");
    assert_breaker(&response["result"], MARKER_RULE, 5);
    // An argument the schema does not have is refused as such, and resets nothing.
    let bad = server.call(
        "shell_exec",
        json!({"command": "touch marker", "breaker_reset": true}),
    );
    assert_eq!(bad["isError"], true, "{bad}");
    assert_breaker(
        &server.call("shell_exec", shell("touch marker")),
        MARKER_RULE,
        6,
    );
    assert!(!setup.ws().join("marker").exists());
}

/// The client's user answers the breaker's question through elicitation: allow once runs
/// the command and resets; keep refusing holds for the session; allow for the session lets
/// later refusals of that rule run without asking.
#[cordon_test::test]
fn breaker_asks_the_clients_user_through_elicitation() {
    let test = "breaker_asks_the_clients_user_through_elicitation";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let mut server = setup.serve(NOBODY, json!({"elicitation": {"form": {}}}));
    let answer = |server: &mut StdioServer, command: &str, decision: Option<&str>| -> Value {
        let id = server.start_call("shell_exec", shell(command));
        let asked = server
            .server_request("elicitation/create", Duration::from_secs(30))
            .expect("the breaker asks the client's user");
        let message = asked["params"]["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains(command) && message.contains("4 times"),
            "{message}"
        );
        let schema = asked["params"]["requestedSchema"].to_string();
        assert!(
            schema.contains("allow_once") && schema.contains("keep_refusing"),
            "{schema}"
        );
        let reply = match decision {
            Some(d) => json!({"action": "accept", "content": {"decision": d}}),
            None => json!({"action": "decline"}),
        };
        server.reply(&asked["id"], reply);
        server
            .response(id, HANG_GUARD)
            .expect("an answer")
            .get("result")
            .cloned()
            .unwrap()
    };
    for _ in 0..3 {
        assert_plain_deny(&server.call("shell_exec", shell("touch marker")), "run 1");
    }
    let allowed = answer(&mut server, "touch marker", Some("allow_once"));
    assert_eq!(structured(&allowed)["exit_code"], 0, "{allowed}");
    assert!(setup.ws().join("marker").exists(), "allowed once, it ran");
    std::fs::remove_file(setup.ws().join("marker")).unwrap();
    // The answer reset the run: three plain denials again, then the question.
    for _ in 0..3 {
        assert_plain_deny(&server.call("shell_exec", shell("touch marker")), "run 2");
    }
    let kept = answer(&mut server, "touch marker", None);
    assert_breaker(&kept, MARKER_RULE, 1);
    assert!(
        structured(&kept)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("chose to keep refusing"),
        "{kept}"
    );
    // A person's deny stays: no question again, the breaker's answer at once.
    let again = server.call("shell_exec", shell("touch marker"));
    assert_breaker(&again, MARKER_RULE, 2);
    assert!(!setup.ws().join("marker").exists());
    // Allow for the session: this rule's later refusals run without a question.
    for _ in 0..3 {
        assert_plain_deny(&server.call("shell_exec", shell("touch second")), "second");
    }
    let allowed = answer(&mut server, "touch second", Some("allow_session"));
    assert_eq!(structured(&allowed)["exit_code"], 0, "{allowed}");
    std::fs::remove_file(setup.ws().join("second")).unwrap();
    let later = server.call("shell_exec", shell("touch second"));
    assert_eq!(structured(&later)["exit_code"], 0, "{later}");
    assert!(setup.ws().join("second").exists());
    let records = setup.records();
    let answers: Vec<&str> = records
        .iter()
        .filter(|r| r["tool"] == "breaker" && r["outcome"]["breaker"] == "answered")
        .map(|r| r["outcome"]["answer"].as_str().unwrap())
        .collect();
    assert_eq!(answers, ["allow_once", "keep_refusing", "allow_session"]);
    let approved = records
        .iter()
        .filter(|r| r["decision"] == "ask:no-touch-marker:approved")
        .count();
    assert_eq!(approved, 1, "{records:?}");
}

#[cordon_test::test]
fn breaker_asks_the_operator_when_the_client_cannot_elicit() {
    let test = "breaker_asks_the_operator_when_the_client_cannot_elicit";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let mut server = setup.serve("", json!({}));
    let dir = format!("{}/cordon", setup.run_dir());
    for _ in 0..3 {
        assert_plain_deny(&server.call("shell_exec", shell("touch marker")), "run 1");
    }
    let id = server.start_call("shell_exec", shell("touch marker"));
    let waiting = pending(&setup, Some(&dir), None);
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0]["rule"], "breaker:no-touch-marker");
    assert!(
        waiting[0]["reason"]
            .as_str()
            .unwrap()
            .contains("refused 4 times"),
        "{waiting:?}"
    );
    let qid = waiting[0]["id"].as_str().unwrap().to_owned();
    assert!(setup.cli(&["approve", &qid], Some(&dir)).status.success());
    let result = server.response(id, HANG_GUARD).expect("an answer")["result"].clone();
    assert_eq!(structured(&result)["exit_code"], 0, "{result}");
    assert!(
        setup.ws().join("marker").exists(),
        "the operator allowed it once"
    );
    std::fs::remove_file(setup.ws().join("marker")).unwrap();
    for _ in 0..3 {
        assert_plain_deny(&server.call("shell_exec", shell("touch marker")), "run 2");
    }
    let id = server.start_call("shell_exec", shell("touch marker"));
    let waiting = pending(&setup, Some(&dir), None);
    let qid = waiting[0]["id"].as_str().unwrap().to_owned();
    assert!(setup.cli(&["deny", &qid], Some(&dir)).status.success());
    let result = server.response(id, HANG_GUARD).expect("an answer")["result"].clone();
    assert_breaker(&result, MARKER_RULE, 1);
    assert!(!setup.ws().join("marker").exists());
    let records = setup.records();
    assert!(
        records.iter().any(|r| r["tool"] == "breaker"
            && r["outcome"]["answer"] == "keep_refusing"
            && r["outcome"]["approval"]["channel"] == "operator"),
        "{records:?}"
    );
}

/// `serve --http` with the rules, an audit log, and `extra` policy text.
fn http_server(setup: &Setup, extra: &str) -> HttpServer {
    let policy = format!("{extra}\n{RULES}");
    let audit = setup.audit();
    HttpServer::start(
        &setup.ws(),
        Start {
            token: true,
            policy: Some(&policy),
            audit_log: Some(&audit),
            ..Start::default()
        },
    )
}

#[cordon_test::test]
fn breaker_over_http_trips_resets_and_groups_variants_per_session() {
    let test = "breaker_over_http_trips_resets_and_groups_variants_per_session";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let server = http_server(&setup, NOBODY);
    let session = server.open_session();
    let mut id = 10;
    let mut call = |session: &str, arguments: Value| -> Value {
        id += 1;
        let answer = server.call(session, id, "shell_exec", arguments);
        answer.get("result").cloned().unwrap_or(answer)
    };
    for _ in 0..2 {
        assert_plain_deny(&call(&session, shell("touch marker")), "before");
    }
    assert_eq!(call(&session, shell("true"))["isError"], false);
    for _ in 0..3 {
        assert_plain_deny(&call(&session, shell("touch marker")), "run");
    }
    assert_breaker(&call(&session, shell("touch marker")), MARKER_RULE, 4);
    // Nothing a model sends resets it.
    assert_breaker(
        &call(
            &session,
            json!({"command": "touch marker", "env": {"CORDON_BREAKER": "reset"}}),
        ),
        MARKER_RULE,
        5,
    );
    // Variant spellings of one refused command are one group.
    for variant in ["rm -rf ~", "rm  -r -f $HOME", "rm -R --force ~"] {
        assert_plain_deny(&call(&session, shell(variant)), variant);
    }
    assert_breaker(
        &call(&session, shell("rm -fr $HOME")),
        "rule:rm-recursive-root-or-home",
        4,
    );
    // Another session has a breaker of its own.
    let other = server.open_session();
    assert_plain_deny(&call(&other, shell("touch marker")), "another session");
    // Counted in /metrics, and on stderr.
    let scrape = crate::http_client::send_raw(
        server.addr,
        format!(
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Authorization: Bearer {}\r\n\r\n",
            server.token.as_ref().unwrap()
        )
        .as_bytes(),
    );
    assert!(
        scrape
            .body
            .contains("cordon_breaker_trips_total{cause=\"consecutive\"} 2")
            && scrape.body.contains("cordon_breaker_refusals_total 3"),
        "{}",
        scrape.body
    );
    assert!(
        server
            .stderr()
            .contains("circuit breaker tripped: rule:no-touch-marker"),
        "{}",
        server.stderr()
    );
    assert!(!setup.ws().join("marker").exists());
}

#[cordon_test::test]
fn breaker_over_http_asks_the_operator_and_the_clients_user() {
    let test = "breaker_over_http_asks_the_operator_and_the_clients_user";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let server = http_server(&setup, "");
    let session = server.open_session();
    let mut id = 10;
    for _ in 0..3 {
        id += 1;
        let r = server.call(&session, id, "shell_exec", shell("touch marker"));
        assert_plain_deny(&r["result"], "operator run");
    }
    // The operator (default channel directory, this server's pid) allows it once.
    id += 1;
    let mut stream = server.start_call(
        &[("Mcp-Session-Id", &session)],
        &call_body(id, "shell_exec", shell("touch marker")),
    );
    let waiting = pending(&setup, None, Some(server.pid() as u64));
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0]["rule"], "breaker:no-touch-marker");
    let qid = waiting[0]["id"].as_str().unwrap().to_owned();
    assert!(setup.cli(&["approve", &qid], None).status.success());
    let answer = read_until(&mut stream, "exit_code", HANG_GUARD);
    assert!(answer.contains("\"exit_code\":0"), "{answer}");
    assert!(
        setup.ws().join("marker").exists(),
        "the operator allowed it once"
    );

    // A client that declared elicitation is asked on the call's stream; it keeps refusing.
    let init = server.post(
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "raw-eliciting", "version": "1"}}}),
        &[],
    );
    let eliciting = init.header("mcp-session-id").unwrap().to_owned();
    let ack = server.post(
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        &[("Mcp-Session-Id", &eliciting)],
    );
    assert_eq!(ack.status, 202);
    for _ in 0..3 {
        id += 1;
        let r = server.call(&eliciting, id, "shell_exec", shell("touch second"));
        assert_plain_deny(&r["result"], "elicitation run");
    }
    id += 1;
    let mut stream = server.start_call(
        &[("Mcp-Session-Id", &eliciting)],
        &call_body(id, "shell_exec", shell("touch second")),
    );
    let seen = read_until(&mut stream, "elicitation/create", Duration::from_secs(30));
    let request: Value = seen
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["method"] == "elicitation/create")
        .unwrap_or_else(|| panic!("the breaker asks on the call's stream: {seen}"));
    assert!(
        request["params"]["message"]
            .as_str()
            .unwrap()
            .contains("touch second"),
        "{request}"
    );
    let reply = server.post(
        &json!({"jsonrpc": "2.0", "id": request["id"],
                "result": {"action": "accept", "content": {"decision": "keep_refusing"}}}),
        &[("Mcp-Session-Id", &eliciting)],
    );
    assert_eq!(reply.status, 202, "{reply:?}");
    let answer = read_until(&mut stream, "\"breaker\"", HANG_GUARD);
    assert!(
        answer.contains("\"group\":\"rule:no-touch-second\"")
            && answer.contains("chose to keep refusing"),
        "{answer}"
    );
    assert!(!setup.ws().join("second").exists());
}

/// Refusals no person could lift (a path outside the workspace, a protected path) are counted
/// by what refused them too; the breaker then only tells the agent to stop, and a path escape
/// keeps its own kind.
#[cordon_test::test]
fn breaker_counts_path_escapes_and_protected_writes_and_only_says_stop() {
    let test = "breaker_counts_path_escapes_and_protected_writes_and_only_says_stop";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    // With elicitation declared: nobody is asked about what no answer could lift.
    let mut server = setup.serve("", json!({"elicitation": {"form": {}}}));
    let escapes = ["../escape.txt", "../../escape.txt", "/etc/escape.txt"];
    for path in escapes {
        let r = server.call("write_file", json!({"path": path, "content": "x"}));
        assert_eq!(structured(&r)["error"]["kind"], "path_escape", "{r}");
        assert!(structured(&r).get("breaker").is_none(), "{r}");
    }
    let fourth = server.call(
        "write_file",
        json!({"path": "../x/escape.txt", "content": "x"}),
    );
    let content = structured(&fourth);
    assert_eq!(content["error"]["kind"], "path_escape", "{fourth}");
    assert_eq!(content["error"]["retriable"], false, "{fourth}");
    assert_eq!(content["breaker"]["group"], "path_escape", "{fourth}");
    assert_eq!(content["breaker"]["count"], 4, "{fourth}");
    assert!(
        text(&fourth).starts_with("error [path_escape]: refused again"),
        "{fourth}"
    );
    for _ in 0..3 {
        let r = server.call("write_file", json!({"path": ".cordon/x", "content": "x"}));
        assert_eq!(structured(&r)["error"]["kind"], "denied", "{r}");
        assert!(structured(&r).get("breaker").is_none(), "{r}");
    }
    let protected = server.call("write_file", json!({"path": ".cordon/y", "content": "x"}));
    let group = structured(&protected)["breaker"]["group"]
        .as_str()
        .unwrap_or("");
    assert!(group.starts_with("protected:"), "{protected}");
    assert_eq!(structured(&protected)["breaker"]["count"], 4, "{protected}");
    assert!(
        server
            .server_request("elicitation/create", Duration::from_millis(300))
            .is_none(),
        "nobody is asked about what no answer could lift"
    );
    assert!(!setup.root.path().join("escape.txt").exists());
}

/// Kernel-reported denials count by the path the kernel named, whichever program asked.
#[cordon_test::test]
fn breaker_counts_kernel_denials_of_one_path_whatever_reads_it() {
    let test = "breaker_counts_kernel_denials_of_one_path_whatever_reads_it";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    use cordon::testing::confine::audit::Availability;
    if let Availability::Unavailable { reason } = cordon::testing::confine::audit::probe() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test} cannot run in CI: kernel-reported denials unavailable: {reason}");
        }
        eprintln!("SKIPPED {test}: kernel-reported denials unavailable: {reason}");
        crate::runner::mark_skipped(&format!("kernel-reported denials unavailable: {reason}"));
        return;
    }
    let setup = Setup::new();
    // A world-readable file the policy denies: only Landlock can refuse it, so the kernel
    // logs each refusal (calls no longer run as host root, and `/etc/shadow` is refused by
    // its mode first, which no LSM logs).
    let extra = format!("{NOBODY}\n{}", crate::common::deny_readable_section());
    let mut server = setup.serve(&extra, json!({}));
    let group = "kernel:filesystem.deny:/etc/passwd";
    for command in [
        "cat /etc/passwd",
        "head -c 1 /etc/passwd",
        "tail -n 1 /etc/passwd",
    ] {
        let r = server.call("shell_exec", shell(command));
        assert_eq!(r["isError"], true, "{r}");
        assert!(structured(&r).get("breaker").is_none(), "{command}: {r}");
    }
    let fourth = server.call("shell_exec", shell("dd if=/etc/passwd of=/dev/null"));
    assert_eq!(structured(&fourth)["breaker"]["group"], group, "{fourth}");
    assert_eq!(structured(&fourth)["breaker"]["count"], 4, "{fourth}");
    assert_eq!(structured(&fourth)["error"]["retriable"], false, "{fourth}");
}

/// Connections the egress proxy refuses count by host, whatever tool or URL asked.
#[cordon_test::test]
fn breaker_counts_proxy_refusals_of_one_host() {
    let test = "breaker_counts_proxy_refusals_of_one_host";
    if skip(test, Need::Namespaces) {
        return;
    }
    if which("curl").is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test} cannot run in CI: curl is missing");
        }
        crate::common::skip_msg(test, "curl is missing; to run it: apt-get install curl");
        return;
    }
    let setup = Setup::new();
    let proxy = "[sandbox]\nseccomp_profile = \"tcp\"\n[network]\nproxy = true\n\
                 allow_hosts = [\"allowed.invalid\"]\n";
    let mut server = setup.serve(&format!("{NOBODY}{proxy}"), json!({}));
    for url in [
        "https://blocked.invalid/",
        "https://blocked.invalid/other",
        "http://blocked.invalid/x",
    ] {
        let r = server.call("shell_exec", shell(&format!("curl -sS -m 10 {url}")));
        assert!(structured(&r).get("breaker").is_none(), "{url}: {r}");
    }
    let fourth = server.call(
        "shell_exec",
        shell("curl -sS -m 10 https://blocked.invalid:443/y"),
    );
    assert_eq!(
        structured(&fourth)["breaker"]["group"],
        "host:blocked.invalid",
        "{fourth}"
    );
    assert_eq!(structured(&fourth)["breaker"]["count"], 4, "{fourth}");
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// The window trigger: refusals of different groups add up, and the next refusal of any group
/// meets the tripped breaker.
#[cordon_test::test]
fn breaker_window_trips_on_refusals_of_any_group() {
    let test = "breaker_window_trips_on_refusals_of_any_group";
    if skip(test, Need::LandlockSeccomp) {
        return;
    }
    let setup = Setup::new();
    let mut server = setup.serve(
        &format!("{NOBODY}[breaker]\nconsecutive = 0\nwindow_refusals = 3\nwindow_secs = 600\n"),
        json!({}),
    );
    for command in ["touch marker", "touch second", "rm -rf ~"] {
        assert_plain_deny(&server.call("shell_exec", shell(command)), command);
    }
    let escape = server.call("read_file", json!({"path": "../notes.txt"}));
    let content = structured(&escape);
    assert_eq!(content["error"]["kind"], "path_escape", "{escape}");
    assert_eq!(content["breaker"]["group"], "path_escape", "{escape}");
    assert_eq!(content["breaker"]["count"], 4, "{escape}");
    assert!(
        content["error"]["message"]
            .as_str()
            .unwrap()
            .contains("4 calls of this session were refused"),
        "{escape}"
    );
}
