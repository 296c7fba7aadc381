//! What a person or a host sees when `cordon` starts, fails to start, or is started in the
//! wrong place (issue 11): a sign of life on a terminal and at `info`, a start failure as one
//! stderr line that is also the answer to `initialize`, an implicit workspace of `/`, a system
//! directory or the home directory refused with what to pass, and help for every option.

use crate::common::{CORDON, HANG_GUARD, run_guarded};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// Starts `cordon serve` with `args`, sends `initialize` and returns its answer and the
/// finished process's output (stdin is closed after the answer).
fn initialize_answer(args: &[&std::ffi::OsStr]) -> (serde_json::Value, std::process::Output) {
    initialize_answer_in(std::path::Path::new("."), args)
}

/// [`initialize_answer`], started in the directory `cwd`.
fn initialize_answer_in(
    cwd: &std::path::Path,
    args: &[&std::ffi::OsStr],
) -> (serde_json::Value, std::process::Output) {
    let mut child = Command::new(CORDON)
        .current_dir(cwd)
        .arg("serve")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cordon serve");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{INITIALIZE}").unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let answer = serde_json::from_str(&line).expect("a JSON-RPC answer");
    (answer, out)
}

#[cordon_test::test]
fn a_start_failure_is_one_stderr_line_and_the_answer_to_initialize() {
    let (answer, out) = initialize_answer(&[
        "--workspace".as_ref(),
        "/nonexistent/cordon-test-ws".as_ref(),
    ]);
    assert_eq!(answer["id"], 0, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("could not start") && message.contains("/nonexistent/cordon-test-ws"),
        "{answer}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line a host can show: {stderr}"
    );
    assert!(stderr.starts_with("cordon: cannot start: "), "{stderr}");
    assert_eq!(out.status.code(), Some(2));
}

#[cordon_test::test]
fn a_multi_line_start_failure_is_still_one_stderr_line() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("broken.toml");
    std::fs::write(&policy, "name = \"x\"\n[limits\n").unwrap();
    let mut cmd = Command::new(CORDON);
    cmd.args(["serve", "--workspace"])
        .arg(dir.path())
        .arg("--policy")
        .arg(&policy);
    let run = run_guarded(cmd, HANG_GUARD);
    assert_eq!(run.code(), 2, "{run:?}");
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
    assert!(
        run.stderr.contains("TOML parse error") && run.stderr.contains("unclosed table"),
        "{run:?}"
    );
}

#[cordon_test::test]
fn info_logging_always_names_workspace_policy_and_enforcement_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(CORDON);
    cmd.args(["serve", "--workspace"])
        .arg(dir.path())
        .env("CORDON_LOG", "info");
    let run = run_guarded(cmd, HANG_GUARD);
    let ws = dir.path().canonicalize().unwrap();
    let startup = run
        .stderr
        .lines()
        .find(|l| l.contains("waiting for an MCP client on stdin"))
        .unwrap_or_else(|| panic!("no startup line: {run:?}"));
    assert!(startup.contains(&*ws.to_string_lossy()), "{startup}");
    assert!(
        startup.contains("policy `default`") && startup.contains("enforcement "),
        "{startup}"
    );
    // Closing stdin before any client spoke is a normal end, not "could not start".
    assert_eq!(run.code(), 0, "{run:?}");
    assert!(!run.stderr.contains("could not start"), "{run:?}");
}

#[cordon_test::test]
fn serve_on_a_terminal_says_it_is_waiting_and_ctrl_d_quits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let command = format!("{CORDON} serve --workspace {}", dir.path().display());
    // `script` gives cordon a pseudo-terminal as stdin; Ctrl-D after a moment closes it.
    let mut child = match Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => panic!("`script` (util-linux) is needed for this test: {e}"),
    };
    let mut stdin = child.stdin.take().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    stdin.write_all(b"\x04").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        screen.contains("waiting for an MCP client on stdin") && screen.contains("Ctrl-D"),
        "{screen}"
    );
    assert!(!screen.contains("could not start"), "{screen}");
    assert_eq!(out.status.code(), Some(0), "{screen}");
}

fn implicit_workspace_run(args: &[&str], cwd: &std::path::Path, home: &std::path::Path) -> String {
    let mut cmd = Command::new(CORDON);
    cmd.args(args).current_dir(cwd).env("HOME", home);
    let run = run_guarded(cmd, HANG_GUARD);
    assert_eq!(run.code(), 2, "{run:?}");
    run.stderr
}

#[cordon_test::test]
fn root_as_implicit_workspace_is_refused_with_what_to_pass() {
    let home = tempfile::tempdir().unwrap();
    for args in [&["serve"][..], &["exec", "--", "true"][..]] {
        let stderr = implicit_workspace_run(args, std::path::Path::new("/"), home.path());
        assert!(
            stderr.contains("refusing to use / (the root of the file system)"),
            "{stderr}"
        );
        assert!(stderr.contains("--workspace DIR"), "{stderr}");
    }
}

#[cordon_test::test]
fn system_directory_as_implicit_workspace_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let stderr = implicit_workspace_run(&["serve"], std::path::Path::new("/usr/lib"), home.path());
    assert!(stderr.contains("a system directory"), "{stderr}");
}

#[cordon_test::test]
fn home_directory_as_implicit_workspace_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let stderr = implicit_workspace_run(&["serve"], home.path(), home.path());
    assert!(stderr.contains("the home directory itself"), "{stderr}");
    assert!(stderr.contains("--workspace"), "{stderr}");
}

#[cordon_test::test]
fn every_cli_option_and_argument_has_help() {
    let commands: &[&[&str]] = &[
        &[],
        &["serve"],
        &["exec"],
        &["doctor"],
        &["lint"],
        &["policy"],
        &["policy", "show"],
        &["policy", "check"],
        &["policy", "explain"],
    ];
    for command in commands {
        let mut cmd = Command::new(CORDON);
        cmd.args(*command).arg("--help");
        let run = run_guarded(cmd, HANG_GUARD);
        assert_eq!(run.code(), 0, "{run:?}");
        let mut section = "";
        for line in run.stdout.lines() {
            if !line.starts_with(' ') && line.ends_with(':') {
                section = line;
                continue;
            }
            if !matches!(section, "Options:" | "Arguments:" | "Commands:") || line.trim().is_empty()
            {
                continue;
            }
            // `  --name <VALUE>  Help text`: the entry and its text are two columns.
            let entry = line.trim_start();
            assert!(
                entry.contains("  ") && !entry.split("  ").last().unwrap().trim().is_empty(),
                "`cordon {}` has no help for `{entry}`:\n{}",
                command.join(" "),
                run.stdout
            );
        }
    }
}

#[cordon_test::test]
fn every_builtin_policys_rule_examples_pass_in_the_parser_worker() {
    // `serve` skips this check at start when every rule is a built-in policy's (so the parser
    // worker starts off the start path): this test is what makes that verdict known.
    if crate::common::skip(
        "every_builtin_policys_rule_examples_pass_in_the_parser_worker",
        crate::common::Need::LandlockSeccomp,
    ) {
        return;
    }
    for name in cordon::testing::policy::embedded_names() {
        let mut cmd = Command::new(CORDON);
        cmd.args(["policy", "check", name]);
        let run = run_guarded(cmd, HANG_GUARD);
        assert_eq!(run.code(), 0, "policy {name}: {run:?}");
    }
}

#[cordon_test::test]
fn a_policy_file_whose_rule_example_fails_does_not_serve() {
    // An operator's rule is checked through the parser worker before `serve` answers
    // anything: its failing example is the answer to `initialize`.
    if crate::common::skip(
        "a_policy_file_whose_rule_example_fails_does_not_serve",
        crate::common::Need::LandlockSeccomp,
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // Also under a name that looks like a built-in policy's origin (`builtin:…`), given
    // relative to the directory serve starts in: still an operator's file, still checked.
    for name in ["bad.toml", "builtin:bad.toml"] {
        std::fs::write(
            dir.path().join(name),
            "extends = \"default\"\n\n[[commands.rules]]\nname = \"no-curl\"\n\
             decision = \"deny\"\njustification = \"test\"\nmatch = { program = [\"curl\"] }\n\
             examples = { match = [\"wget http://x\"], not_match = [\"ls\"] }\n",
        )
        .unwrap();
        let (answer, out) = initialize_answer_in(
            dir.path(),
            &[
                "--workspace".as_ref(),
                ws.path().as_os_str(),
                "--policy".as_ref(),
                name.as_ref(),
            ],
        );
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("no-curl") && message.contains("wget http://x"),
            "{name}: {answer}"
        );
        assert_eq!(out.status.code(), Some(2), "{name}: {out:?}");
    }
}
