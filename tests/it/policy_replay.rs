//! `cordon policy replay`: a log recorded by running real calls through `cordon serve
//! --audit-log` under one policy, replayed under that policy (nothing changes: exit 0) and
//! under a candidate (a new deny rule, a new protected path, a host newly allowed: exit 1,
//! one line per changed call with the rule or field and its policy line, the summary table,
//! the record it cannot judge and why), with the log's redactions kept.

use crate::common::{CORDON, Need, skip};
use crate::stdio_server::{StdioServer, structured};
use serde_json::{Value, json};
use std::process::Command;

const RECORDED: &str = r#"extends = "default"

[server]
approvals = ["elicitation"]

[sandbox]
seccomp_profile = "tcp"

[network]
proxy = true
allow_hosts = ["allowed.invalid"]
"#;

const CANDIDATE: &str = r#"extends = "default"

[server]
approvals = ["elicitation"]

[sandbox]
seccomp_profile = "tcp"

[network]
proxy = true
allow_hosts = ["allowed.invalid", "blocked.invalid"]

[filesystem]
protected = [".cordon", ".git/hooks", ".git/config",
  "docs",
]

[[commands.rules]]
name = "no-deploy"
decision = "deny"
justification = "deploys go through CI"
match = { program = ["make"], any_arg = ["deploy"] }
examples = { match = ["make deploy"], not_match = ["make test"] }

[jobs]
max_per_session = 0
"#;

fn replay(log: &std::path::Path, policy: Option<&str>, json: bool) -> std::process::Output {
    let mut cmd = Command::new(CORDON);
    cmd.args(["policy", "replay"]).arg(log);
    if let Some(policy) = policy {
        cmd.args(["--policy", policy]);
    }
    if json {
        cmd.arg("--json");
    }
    cmd.output().unwrap()
}

/// A workspace with the recorded and candidate policies beside it, and a `cordon serve` over
/// it writing its audit log under the recorded policy.
struct Recording {
    _root: tempfile::TempDir,
    candidate: std::path::PathBuf,
    log: std::path::PathBuf,
    server: StdioServer,
}

fn recording() -> Recording {
    let root = tempfile::tempdir().unwrap();
    let ws = root.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let recorded = root.path().join("recorded.toml");
    let candidate = root.path().join("candidate.toml");
    std::fs::write(&recorded, RECORDED).unwrap();
    std::fs::write(&candidate, CANDIDATE).unwrap();
    let log = root.path().join("audit.jsonl");
    let (recorded_s, log_s) = (recorded.display().to_string(), log.display().to_string());
    let server = StdioServer::start(
        &ws,
        &["--policy", &recorded_s, "--audit-log", &log_s],
        "",
        &[],
    );
    Recording {
        _root: root,
        candidate,
        log,
        server,
    }
}

#[cordon_test::test]
fn a_recorded_log_replayed_under_its_own_policy_and_a_candidate() {
    let test = "a_recorded_log_replayed_under_its_own_policy_and_a_candidate";
    if skip(test, Need::Namespaces) {
        return;
    }
    // Record: real calls through `cordon serve`.
    let Recording {
        _root,
        candidate,
        log,
        mut server,
    } = recording();
    let shell = |server: &mut StdioServer, args: Value| server.call("shell_exec", args);
    shell(&mut server, json!({"command": "echo hello"}));
    let push = shell(
        &mut server,
        json!({"command": "git push --force origin main"}),
    );
    assert_eq!(structured(&push)["error"]["kind"], "denied", "{push}");
    shell(&mut server, json!({"command": "make deploy"}));
    let job = shell(
        &mut server,
        json!({"command": "sleep 1", "background": true, "wait_secs": 0}),
    );
    assert_eq!(structured(&job)["job"]["state"], "running", "{job}");
    shell(
        &mut server,
        json!({"command": "printenv TOKEN", "env": {"TOKEN": "sk-replay-secret"}}),
    );
    let long = format!("echo {}", "x".repeat(300));
    shell(&mut server, json!({"command": long}));
    shell(
        &mut server,
        json!({"command": "curl -sS -m 10 https://blocked.invalid/; curl -sS -m 10 https://allowed.invalid/"}),
    );
    let w = server.call(
        "write_file",
        json!({"path": "docs/a.md", "content": "# notes\n"}),
    );
    assert_eq!(structured(&w)["created"], true, "{w}");
    let refused = server.call("write_file", json!({"path": ".cordon/x", "content": "x"}));
    assert_eq!(structured(&refused)["error"]["kind"], "denied", "{refused}");
    server.call("read_file", json!({"path": "docs/a.md"}));
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("\"tool\":\"egress\"") && text.contains("blocked.invalid"),
        "the proxy's connections are in the log: {text}"
    );
    assert!(
        !text.contains("sk-replay-secret"),
        "the log redacts env values"
    );

    // Under the policy it was recorded under (the one the log names): nothing changes.
    let same = replay(&log, None, false);
    let out = String::from_utf8_lossy(&same.stdout);
    assert_eq!(same.status.code(), Some(0), "{same:?}");
    assert!(out.contains("0 would change"), "{out}");
    assert!(
        out.contains("not judged") && out.contains("shortened the command"),
        "{out}"
    );

    // Under the candidate: five calls change (a background job among them), each with its rule or field and line. One is
    // the kind of surprise replay is for: a `[[commands.rules]]` list replaces the one it
    // extends, so the default's `git-push-force` rule is gone and the push would run.
    let changed = replay(&log, Some(&candidate.display().to_string()), false);
    let out = String::from_utf8_lossy(&changed.stdout).into_owned();
    assert_eq!(changed.status.code(), Some(1), "{changed:?}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(" → ")).collect();
    assert_eq!(lines.len(), 5, "{out}");
    let job = lines.iter().find(|l| l.contains("sleep 1")).expect(&out);
    let jobs_line = CANDIDATE
        .lines()
        .position(|l| l.starts_with("max_per_session"))
        .unwrap()
        + 1;
    assert!(
        job.contains("job started → jobs disabled")
            && job.contains("max_per_session = 0")
            && job.contains(&format!("line {jobs_line}")),
        "{job}"
    );
    let push = lines
        .iter()
        .find(|l| l.contains("git push --force"))
        .expect(&out);
    assert!(
        push.contains("ask:git-push-force → allow")
            && push.contains("rule `git-push-force` is not in"),
        "{push}"
    );
    let deploy = lines
        .iter()
        .find(|l| l.contains("make deploy"))
        .expect(&out);
    let rule_line = CANDIDATE
        .lines()
        .position(|l| l.contains("name = \"no-deploy\""))
        .unwrap()
        + 1;
    assert!(
        deploy.contains("allow → deny:no-deploy")
            && deploy.contains("command rule")
            && deploy.contains(&format!("line {rule_line}")),
        "{deploy}"
    );
    let docs = lines.iter().find(|l| l.contains("docs/a.md")).expect(&out);
    let docs_line = CANDIDATE
        .lines()
        .position(|l| l.contains("\"docs\""))
        .unwrap()
        + 1;
    assert!(
        docs.contains("written → refused")
            && docs.contains("`filesystem.protected` entry `docs`")
            && docs.contains(&format!("line {docs_line}")),
        "{docs}"
    );
    let host = lines
        .iter()
        .find(|l| l.contains("blocked.invalid:443"))
        .expect(&out);
    let hosts_line = CANDIDATE
        .lines()
        .position(|l| l.starts_with("allow_hosts"))
        .unwrap()
        + 1;
    assert!(
        host.contains("refused → allowed")
            && host.contains("allow_hosts")
            && host.contains(&format!("line {hosts_line}")),
        "{host}"
    );
    // allowed.invalid was refused for not resolving, which names do not decide: unchanged.
    assert!(
        !lines.iter().any(|l| l.contains("allowed.invalid")),
        "{out}"
    );
    for (kind, n) in [
        ("command rule", '2'),
        ("write rule", '1'),
        ("egress host", '1'),
        ("jobs", '1'),
    ] {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(kind) && l.trim_end().ends_with(n)),
            "summary row for {kind}: {out}"
        );
    }
    assert!(!out.contains("sk-replay-secret"), "{out}");

    // --json: the same, for scripts; redacted fields stay redacted.
    let as_json = replay(&log, Some(&candidate.display().to_string()), true);
    assert_eq!(as_json.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&as_json.stdout).unwrap();
    assert_eq!(report["changed"].as_array().unwrap().len(), 5, "{report}");
    assert_eq!(report["summary"]["command rule"], 2, "{report}");
    assert!(
        report["not_judged"][0]["why"]
            .as_str()
            .unwrap()
            .contains("shortened")
    );
    assert!(!String::from_utf8_lossy(&as_json.stdout).contains("sk-replay-secret"));
}

#[cordon_test::test]
fn a_log_that_is_not_an_audit_log_is_judged_line_by_line() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("audit.jsonl");
    std::fs::write(
        &log,
        "not json\n{\"x\": 1}\n{\"tool\": \"shell_exec\", \"arguments\": {\"command\": \"ls\"}, \
         \"decision\": \"maybe\", \"policy\": \"default (builtin:default)\"}\n",
    )
    .unwrap();
    let out = replay(&log, Some("default"), false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text.contains("line 1: not JSON"), "{text}");
    assert!(text.contains("line 2: not an audit record"), "{text}");
    assert!(
        text.contains("line 3 (shell_exec): the decision `maybe`"),
        "{text}"
    );
    let missing = replay(&root.path().join("none.jsonl"), None, false);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot read the audit log"),
        "{missing:?}"
    );
}

/// Issue 32, item 4: lines typed into a job's shell are audited as the command lines they were
/// judged as, and `policy replay` judges them again like `shell_exec` commands.
#[cordon_test::test]
fn lines_typed_into_a_jobs_shell_are_replayed_as_commands() {
    let test = "lines_typed_into_a_jobs_shell_are_replayed_as_commands";
    if skip(test, Need::Namespaces) {
        return;
    }
    let Recording {
        _root,
        candidate,
        log,
        mut server,
    } = recording();
    let started = server.call(
        "shell_exec",
        json!({"command": "bash", "background": true, "wait_secs": 0}),
    );
    let id = structured(&started)["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let typed = |server: &mut StdioServer, input: &str| {
        server.call("job", json!({"id": id, "input": input, "wait_secs": 1}))
    };
    // In two pieces: judged (and logged) as the one line they make.
    typed(&mut server, "make dep");
    typed(&mut server, "loy || true\n");
    let push = typed(&mut server, "git push --force origin main\n");
    assert_eq!(structured(&push)["error"]["kind"], "denied", "{push}");
    drop(server);

    let changed = replay(&log, Some(&candidate.display().to_string()), false);
    let out = String::from_utf8_lossy(&changed.stdout).into_owned();
    assert_eq!(changed.status.code(), Some(1), "{changed:?}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(" → ")).collect();
    let deploy = lines
        .iter()
        .find(|l| l.contains("make deploy || true"))
        .expect(&out);
    assert!(
        deploy.contains("allow → deny:no-deploy") && deploy.contains("job"),
        "{deploy}"
    );
    let push = lines
        .iter()
        .find(|l| l.contains("git push --force"))
        .expect(&out);
    assert!(push.contains("ask:git-push-force → allow"), "{push}");
    // The job's start (jobs disabled in the candidate) and the two lines typed into it.
    assert_eq!(lines.len(), 3, "{out}");
}

/// Issue 36: `policy replay --subject` replays one subject's calls only, by default under the
/// policy its own records name (a subject of a group policy has its own).
#[cordon_test::test]
fn one_subjects_calls_are_replayed_under_its_own_policy() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("audit.jsonl");
    let record = |subject: &str, policy: &str, path: &str| {
        json!({"time": "2026-12-04T20:00:00Z", "tool": "write_file",
               "arguments": {"path": path}, "decision": "allow", "outcome": {},
               "policy": policy, "subject": subject})
        .to_string()
    };
    std::fs::write(
        &log,
        [
            record("bearer:alice", "default (builtin:default)", "src/a.rs"),
            record("bearer:rita", "strict (builtin:strict)", "build/out.txt"),
            record("bearer:alice", "default (builtin:default)", "src/b.rs"),
        ]
        .join("\n")
            + "\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(CORDON)
            .args(["policy", "replay"])
            .arg(&log)
            .args(extra)
            .arg("--json")
            .output()
            .unwrap();
        let report: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        (out.status.code(), report)
    };
    // rita's one call, under strict (her records' policy): a write to build/ is still allowed.
    let (code, rita) = run(&["--subject", "bearer:rita"]);
    assert_eq!(code, Some(0), "{rita}");
    assert_eq!(rita["records"], json!(1), "{rita}");
    assert_eq!(rita["subject"], json!("bearer:rita"));
    assert!(
        rita["policy"].as_str().unwrap().starts_with("strict"),
        "{rita}"
    );
    // alice's two calls under strict: both writes to src/ would be refused.
    let (code, alice) = run(&["--subject", "bearer:alice", "--policy", "strict"]);
    assert_eq!(code, Some(1), "{alice}");
    assert_eq!(alice["records"], json!(2), "{alice}");
    assert_eq!(alice["changed"].as_array().unwrap().len(), 2, "{alice}");
    // Everyone's: three records.
    let (_, all) = run(&["--policy", "strict"]);
    assert_eq!(all["records"], json!(3), "{all}");
    let (code, nobody) = run(&["--subject", "bearer:nobody", "--policy", "strict"]);
    assert_eq!((code, &nobody["records"]), (Some(0), &json!(0)), "{nobody}");
}
