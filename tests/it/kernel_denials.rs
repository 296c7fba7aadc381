//! Denials as the kernel saw them (issue 21, part 2): a denied read, write, exec and TCP
//! connect each come back in the result's `denials` from the kernel's Landlock audit record
//! (`source: "kernel"`), naming the right, the path or port and the policy field that governs
//! it, with the error message saying so. Each test starts its own `cordon serve` (its own
//! process); they skip loudly where the kernel or privileges give no audit records, and fail
//! under `CI=true`.

use crate::common::{CORDON, Need, Sandbox, skip};
use crate::stdio_server::{StdioServer, structured};
use serde_json::{Value, json};
use std::path::Path;

/// True (after saying why) when this machine gives no kernel-reported denials.
fn skip_without_audit(test: &str) -> bool {
    if skip(test, Need::LandlockSeccomp) {
        return true;
    }
    use cordon::testing::confine::audit::Availability;
    let why = match cordon::testing::confine::audit::probe() {
        Availability::Available { .. } | Availability::Possible { .. } => return false,
        Availability::Unavailable { reason } => reason,
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} cannot run in CI: kernel-reported denials unavailable: {why}");
    }
    eprintln!("SKIPPED {test}: kernel-reported denials unavailable: {why}");
    crate::runner::mark_skipped(&format!("kernel-reported denials unavailable: {why}"));
    true
}

/// The default policy's lists (lists replace rather than append when a policy extends).
fn default_list(section: &str, key: &str) -> Vec<toml::Value> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/default.toml"),
    )
    .expect("read policies/default.toml");
    let table: toml::Table = toml::from_str(&text).expect("default.toml parses");
    table[section][key].as_array().expect("a list").clone()
}

/// A policy denying, besides the default's, files the call's uid could read by their modes
/// (`common::READABLE_DENIED`): their refusal is Landlock's, and the kernel logs it.
fn readable_denied_policy() -> String {
    format!(
        "extends = \"default\"\n{}",
        crate::common::deny_readable_section()
    )
}

fn policy_with(sb: &Sandbox, name: &str, body: toml::Table) -> String {
    let mut policy = body;
    policy.insert("extends".into(), "default".into());
    sb.policy(name, &toml::to_string(&policy).expect("serialize policy"))
}

fn run(sb: &Sandbox, args: &[&str], env: &[(&str, &str)], command: &str) -> Value {
    let mut server = StdioServer::start(sb.ws(), args, "", env);
    let result = server.call("shell_exec", json!({ "command": command }));
    structured(&result).clone()
}

/// The single kernel-sourced denial of `out`, checked against what the error says.
fn kernel_denial<'a>(out: &'a Value, access: &str) -> &'a Value {
    let denials = out["denials"]
        .as_array()
        .unwrap_or_else(|| panic!("no denials in the result: {out:#}"));
    let d = denials
        .iter()
        .find(|d| {
            d["access"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == access))
        })
        .unwrap_or_else(|| panic!("no denial of {access}: {out:#}"));
    assert_eq!(
        d["source"], "kernel",
        "explained from the kernel's record: {out:#}"
    );
    let message = out["error"]["message"].as_str().expect("an error message");
    assert!(
        message.contains("from the kernel's Landlock audit record"),
        "the message says where its explanation comes from: {message}"
    );
    assert!(
        !message.contains("by reading the error message"),
        "the stderr guess is not used when the kernel said: {message}"
    );
    d
}

#[cordon_test::test]
fn a_denied_read_is_explained_from_the_kernels_record() {
    if skip_without_audit("a_denied_read_is_explained_from_the_kernels_record") {
        return;
    }
    let sb = Sandbox::new();
    let policy = sb.policy("deny.toml", &readable_denied_policy());
    let mut server = StdioServer::start(sb.ws(), &["--policy", &policy], "", &[]);
    let result = server.call("shell_exec", json!({ "command": "cat /etc/passwd" }));
    let out = structured(&result).clone();
    assert_ne!(out["exit_code"], 0, "{out:#}");
    let d = kernel_denial(&out, "fs.read_file");
    // The result's new field is in the tool's outputSchema, optional, and every denial has
    // what its item schema requires.
    let id = server.send_request("tools/list", json!({}));
    let tools = server
        .response(id, crate::common::HANG_GUARD)
        .expect("tools/list");
    let shell = tools["result"]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "shell_exec"))
        .expect("shell_exec listed");
    let schema = &shell["outputSchema"];
    assert!(
        !schema["required"]
            .as_array()
            .is_some_and(|r| r.iter().any(|f| f == "denials")),
        "denials is optional: {schema:#}"
    );
    let item = &schema["properties"]["denials"]["items"];
    for field in item["required"].as_array().expect("denial fields required") {
        assert!(
            d.get(field.as_str().unwrap()).is_some(),
            "{field} missing in {d:#}"
        );
    }
    let sources: Vec<&Value> = item["properties"]["source"]["oneOf"]
        .as_array()
        .expect("source is one of named constants")
        .iter()
        .map(|v| &v["const"])
        .collect();
    assert_eq!(
        sources,
        [&json!("kernel"), &json!("error_message")],
        "{item:#}"
    );
    assert_eq!(d["path"], "/etc/passwd", "{d:#}");
    assert_eq!(d["policy_field"], "filesystem.deny", "{d:#}");
    assert!(d["count"].as_u64().is_some_and(|c| c >= 1), "{d:#}");
}

/// Without namespaces (the per-child path) the host's tree is visible and Landlock alone
/// refuses a write outside every grant: the fallback's layer logs too.
#[cordon_test::test]
fn a_denied_write_is_explained_from_the_kernels_record() {
    if skip_without_audit("a_denied_write_is_explained_from_the_kernels_record") {
        return;
    }
    let sb = Sandbox::new();
    let target = sb.outside().join("new.txt");
    let out = run(
        &sb,
        &[],
        &[("CORDON_SIMULATE_MISSING", "namespaces")],
        &format!("echo x > '{}'", target.display()),
    );
    assert!(!target.exists(), "the write happened: {out:#}");
    let d = kernel_denial(&out, "fs.make_reg");
    assert_eq!(d["path"], sb.outside().to_str().unwrap(), "{d:#}");
    assert_eq!(d["policy_field"], "not_granted", "{d:#}");
    assert!(
        d["explanation"]
            .as_str()
            .is_some_and(|e| e.contains("filesystem.read_write")),
        "names the field that would allow it: {d:#}"
    );
}

#[cordon_test::test]
fn a_denied_exec_is_explained_from_the_kernels_record() {
    if skip_without_audit("a_denied_exec_is_explained_from_the_kernels_record") {
        return;
    }
    let sb = Sandbox::new();
    // Not below /tmp: in the sandbox's view /tmp is the call's own directory, granted whole.
    let tools_dir = tempfile::Builder::new()
        .prefix("cordon-test-tools-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let tools = tools_dir.path().to_path_buf();
    let denied = tools.join("denied-tool");
    std::fs::copy("/bin/true", &denied).unwrap();
    std::fs::copy("/bin/true", tools.join("allowed-tool")).unwrap();
    let mut read_exec = default_list("filesystem", "read_exec");
    read_exec.push(tools.to_str().unwrap().into());
    let mut deny = default_list("filesystem", "deny");
    deny.push(denied.to_str().unwrap().into());
    let mut fs = toml::Table::new();
    fs.insert("read_exec".into(), toml::Value::Array(read_exec));
    fs.insert("deny".into(), toml::Value::Array(deny));
    let mut body = toml::Table::new();
    body.insert("filesystem".into(), toml::Value::Table(fs));
    let policy = policy_with(&sb, "exec.toml", body);
    let out = run(
        &sb,
        &["--policy", &policy],
        &[],
        &format!(
            "'{}' && '{}'",
            tools.join("allowed-tool").display(),
            denied.display()
        ),
    );
    assert_eq!(
        out["exit_code"], 126,
        "the allowed tool ran, the denied one did not: {out:#}"
    );
    let d = kernel_denial(&out, "fs.execute");
    assert_eq!(d["path"], denied.to_str().unwrap(), "{d:#}");
    assert_eq!(d["policy_field"], "filesystem.deny", "{d:#}");
}

/// Where the policy shares the host's network (`tcp` seccomp profile, a port list), Landlock's
/// port rules refuse the connect, and the kernel's record names the port.
#[cordon_test::test]
fn a_denied_tcp_connect_is_explained_from_the_kernels_record() {
    if skip_without_audit("a_denied_tcp_connect_is_explained_from_the_kernels_record") {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sb = Sandbox::new();
    let mut read_exec = default_list("filesystem", "read_exec");
    let bin_dir = Path::new(CORDON).parent().expect("binary has a directory");
    read_exec.push(bin_dir.to_str().unwrap().into());
    let mut body: toml::Table =
        toml::from_str("[network]\ntcp_connect = [1]\n[sandbox]\nseccomp_profile = \"tcp\"\n")
            .unwrap();
    let mut fs = toml::Table::new();
    fs.insert("read_exec".into(), toml::Value::Array(read_exec));
    body.insert("filesystem".into(), toml::Value::Table(fs));
    let policy = policy_with(&sb, "tcp.toml", body);
    let out = run(
        &sb,
        &["--policy", &policy],
        &[],
        &format!("'{CORDON}' probe tcp-connect {port}"),
    );
    assert_eq!(out["exit_code"], 1, "{out:#}");
    let d = kernel_denial(&out, "net.connect_tcp");
    assert_eq!(d["port"], port, "{d:#}");
    assert_eq!(d["policy_field"], "network.tcp_connect", "{d:#}");
}

/// `--no-kernel-denials` (or a machine without audit): the same denial comes from the error
/// message, labeled as such.
#[cordon_test::test]
fn without_kernel_records_a_denial_is_explained_from_the_error_message() {
    if skip(
        "without_kernel_records_a_denial_is_explained_from_the_error_message",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let out = run(&sb, &["--no-kernel-denials"], &[], "cat /etc/shadow");
    let denials = out["denials"].as_array().expect("denials");
    assert_eq!(denials.len(), 1, "{out:#}");
    let d = &denials[0];
    assert_eq!(d["source"], "error_message", "{d:#}");
    assert_eq!(d["path"], "/etc/shadow", "{d:#}");
    assert_eq!(d["policy_field"], "filesystem.deny", "{d:#}");
    let message = out["error"]["message"].as_str().expect("an error message");
    assert!(
        message.contains("by reading the error message"),
        "{message}"
    );
}

/// The denial the output names leads; one it does not name is not blamed for the failure;
/// a successful call lists none.
#[cordon_test::test]
fn the_denial_the_output_names_leads_and_others_are_not_blamed() {
    if skip_without_audit("the_denial_the_output_names_leads_and_others_are_not_blamed") {
        return;
    }
    let sb = Sandbox::new();
    let policy = sb.policy("deny.toml", &readable_denied_policy());
    let mut server = StdioServer::start(sb.ws(), &["--policy", &policy], "", &[]);
    let mut shell = |command: &str| {
        let result = server.call("shell_exec", json!({ "command": command }));
        structured(&result).clone()
    };
    let out = shell("cat /etc/group 2>/dev/null; cat /etc/passwd");
    let denials = out["denials"].as_array().expect("denials");
    assert_eq!(denials.len(), 2, "{out:#}");
    assert_eq!(denials[0]["path"], "/etc/passwd", "named first: {out:#}");
    assert_eq!(denials[1]["path"], "/etc/group", "{out:#}");
    let message = out["error"]["message"].as_str().unwrap();
    assert!(message.contains("on /etc/passwd"), "{message}");
    assert!(!message.contains("on /etc/group"), "{message}");
    assert!(
        message.contains("1 more in the result's `denials`"),
        "{message}"
    );

    let out = shell("cat /etc/passwd 2>/dev/null; exit 3");
    assert_eq!(out["denials"][0]["path"], "/etc/passwd", "{out:#}");
    let message = out["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("the output names none of these, so they may not be why it failed"),
        "{message}"
    );

    let out = shell("cat /etc/passwd 2>/dev/null; true");
    assert_eq!(out["exit_code"], 0, "{out:#}");
    assert!(
        out.get("denials").is_none(),
        "a successful call lists none: {out:#}"
    );
}

/// A loop of refused operations (here `kill(1, 0)`, refused by Landlock's signal scope) makes
/// the kernel log a record each time: left alone it fills the kernel's audit backlog, and the
/// kernel then drops every call's records (and any host audit reader's). The flooding call is
/// ended with limit `audit`, and a denied call of another session beside it still gets its
/// denial from the kernel's record.
#[cordon_test::test]
fn a_call_flooding_the_audit_log_is_ended_and_others_keep_their_records() {
    if skip_without_audit("a_call_flooding_the_audit_log_is_ended_and_others_keep_their_records") {
        return;
    }
    let sb = Sandbox::new();
    let policy = sb.policy("deny.toml", &readable_denied_policy());
    let ws = sb.ws().to_path_buf();
    let flood_policy = policy.clone();
    let flooder = std::thread::spawn(move || {
        let mut server = StdioServer::start(&ws, &["--policy", &flood_policy], "", &[]);
        let started = std::time::Instant::now();
        // Denied opens as fast as a process can make them (each is one Landlock record; the
        // issue's `kill(1, 0)` loop now stops at the uid check, before any LSM logs it).
        let flood = "python3 -c \"\nwhile True:\n    try: open('/etc/passwd')\n    except OSError: pass\n\"";
        let result = server.call(
            "shell_exec",
            json!({ "command": flood, "timeout_secs": 60 }),
        );
        (structured(&result).clone(), started.elapsed())
    });
    let other = Sandbox::new();
    let mut server = StdioServer::start(other.ws(), &["--policy", &policy], "", &[]);
    let mut beside = Vec::new();
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let result = server.call("shell_exec", json!({ "command": "cat /etc/passwd" }));
        beside.push(structured(&result).clone());
    }
    let (flood, took) = flooder.join().expect("the flooding session");
    assert_eq!(flood["limit"]["kind"], "audit", "{flood:#}");
    assert_eq!(flood["error"]["kind"], "resource_limit", "{flood:#}");
    assert!(
        took < std::time::Duration::from_secs(30),
        "ended by the bound, not by its 60 s timeout: {took:?}"
    );
    for out in &beside {
        let d = kernel_denial(out, "fs.read_file");
        assert_eq!(d["path"], "/etc/passwd", "{out:#}");
    }
}

#[cordon_test::test]
fn a_job_flooding_the_audit_log_is_ended_with_the_audit_limit() {
    if skip_without_audit("a_job_flooding_the_audit_log_is_ended_with_the_audit_limit") {
        return;
    }
    let sb = Sandbox::new();
    let policy = sb.policy("deny.toml", &readable_denied_policy());
    let mut server = StdioServer::start(sb.ws(), &["--policy", &policy], "", &[]);
    let flood =
        "python3 -c \"\nwhile True:\n    try: open('/etc/passwd')\n    except OSError: pass\n\"";
    let started = server.call(
        "shell_exec",
        json!({ "command": flood, "background": true, "wait_secs": 1 }),
    );
    let id = structured(&started)["job"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a job id: {started:#}"))
        .to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let ended = loop {
        let read = server.call("job", json!({ "id": id, "wait_secs": 5 }));
        let sc = structured(&read).clone();
        if sc["job"]["state"] != "running" || std::time::Instant::now() > deadline {
            break sc;
        }
    };
    assert_eq!(ended["job"]["state"], "limit", "{ended:#}");
    assert_eq!(ended["limit"]["kind"], "audit", "{ended:#}");
}

/// The login uid of the host's process whose command line is `argv`, if one runs.
fn host_loginuid_of(argv: &[&str]) -> Option<String> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let dir = entry.path();
            if std::fs::read(dir.join("cmdline")).is_ok_and(|c| c == want) {
                return std::fs::read_to_string(dir.join("loginuid"))
                    .ok()
                    .map(|s| s.trim().to_owned());
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    None
}

/// Where cordon is the one that turned the kernel's audit on, only its confined processes pay
/// for audit contexts: they carry cordon's login uid (so their denials are recorded), in a
/// slot of the sandbox init and when the server forks them itself; the server does not (its
/// own system calls stay off the audit path), and the kernel holds the task rule that leaves
/// every other task without a context. Where audit was on before any cordon server (an
/// operator's auditd), cordon changes neither.
#[cordon_test::test]
fn only_cordons_processes_pay_for_the_audit_it_turned_on() {
    if skip_without_audit("only_cordons_processes_pay_for_the_audit_it_turned_on") {
        return;
    }
    use cordon::testing::confine::audit::host::{CORDON_LOGINUID, STATE_DIR};
    let sb = Sandbox::new();
    let managed = || {
        std::path::Path::new(STATE_DIR)
            .join("enabled-by-cordon")
            .exists()
    };
    for (round, env) in [&[][..], &[("CORDON_SIMULATE_MISSING", "namespaces")][..]]
        .into_iter()
        .enumerate()
    {
        let mut server = StdioServer::start(sb.ws(), &[], "", env);
        // Read from the host: inside a slot's user namespace cordon's login uid is unmapped
        // and reads as unset.
        let marker = format!("600.{round}17");
        let r = server.call(
            "shell_exec",
            json!({ "command": format!("exec sleep {marker}"), "background": true }),
        );
        let call = host_loginuid_of(&["sleep", &marker])
            .unwrap_or_else(|| panic!("the job's process is not found on the host: {r}"));
        let server_uid = std::fs::read_to_string(format!("/proc/{}/loginuid", server.pid()))
            .expect("the server's login uid");
        assert_ne!(
            server_uid.trim(),
            CORDON_LOGINUID.to_string(),
            "the server itself carries no login uid of cordon's ({env:?})"
        );
        let rule = cordon::testing::confine::audit::rule_in_force();
        if managed() {
            assert_eq!(call, CORDON_LOGINUID.to_string(), "a call's ({env:?}): {r}");
            assert!(
                rule,
                "the rule `never,task -F auid!={CORDON_LOGINUID}` is in the kernel"
            );
        } else if rule {
            // On without the marker, cordon's rule in force: calls carry the login uid that
            // rule lets keep an audit context (see the test below).
            assert_eq!(call, CORDON_LOGINUID.to_string(), "a call's ({env:?}): {r}");
        } else {
            assert_ne!(
                call,
                CORDON_LOGINUID.to_string(),
                "audit that was on before cordon is left as the operator set it: {r}"
            );
        }
    }
}

/// Audit on with cordon's rule in the kernel but no server's marker saying cordon turned it
/// on (it was turned on by someone else, or by a server that died before it noted it): the
/// rule leaves every task without cordon's login uid without an audit context, so a server
/// that judged by the marker alone gave its calls none, and every record came alone, never
/// tied to the call's Landlock domain (found on the project's machine: every kernel-denial
/// test failed). The kernel's rules decide: calls carry the login uid and the denial is the
/// kernel's.
#[cordon_test::test]
fn a_denial_is_the_kernels_when_audit_is_on_with_cordons_rule_and_no_marker() {
    let test = "a_denial_is_the_kernels_when_audit_is_on_with_cordons_rule_and_no_marker";
    if skip_without_audit(test) {
        return;
    }
    use cordon::testing::confine::audit::host::STATE_DIR;
    let sb = Sandbox::new();
    let policy = sb.policy("deny.toml", &readable_denied_policy());
    // A first server makes sure audit is on and cordon's rule is in force (it adds the rule
    // when it turns audit on; with the rule there already, the kernel's state stays).
    let mut first = StdioServer::start(sb.ws(), &["--policy", &policy], "", &[]);
    let warm = first.call("shell_exec", json!({ "command": "true" }));
    assert_eq!(structured(&warm)["exit_code"], 0, "{warm}");
    if !cordon::testing::confine::audit::rule_in_force() {
        crate::common::skip_msg(
            test,
            "audit was on before any cordon server (an operator's auditd): cordon's rule is              not in the kernel, so the state this test needs cannot be made here",
        );
        return;
    }
    // The marker gone while audit stays on: the state a server that died between turning
    // audit on and noting it leaves (audit then stays on after the last server: the cheap
    // state, with the rule).
    let _ = std::fs::remove_file(std::path::Path::new(STATE_DIR).join("enabled-by-cordon"));
    let mut server = StdioServer::start(sb.ws(), &["--policy", &policy], "", &[]);
    let result = server.call("shell_exec", json!({ "command": "cat /etc/passwd" }));
    let out = structured(&result).clone();
    assert_ne!(out["exit_code"], 0, "{out:#}");
    kernel_denial(&out, "fs.read_file");
    drop(first);
}
