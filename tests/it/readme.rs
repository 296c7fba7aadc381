//! The README's commands and client snippets, run as written (paths replaced): a newcomer's
//! first hour must just work (issue 11). Each snippet is the fenced block after a
//! `<!-- snippet: NAME -->` marker. Server configurations are started and asked for their
//! tools; the Python and TypeScript programs run verbatim with their SDKs (missing SDKs: see
//! `suites`).

use crate::common::CORDON;
use crate::suites::missing_prerequisites;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const README: &str = include_str!("../../README.md");
const CI_RUN: &str = include_str!("../../.ci/run");
const CARGO_TOML: &str = include_str!("../../Cargo.toml");

fn snippet(name: &str) -> String {
    let marker = format!("<!-- snippet: {name} -->");
    let after = README
        .split_once(&marker)
        .unwrap_or_else(|| panic!("README has no {marker}"))
        .1;
    let body = after
        .trim_start()
        .split_once('\n')
        .expect("a fenced block")
        .1;
    body.split_once("\n```")
        .expect("a closed fence")
        .0
        .to_owned()
}

/// A workspace with a file the snippets' `ls -la` must show.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("readme-marker.txt"), "x").unwrap();
    dir
}

fn substitute(text: &str, ws: &Path) -> String {
    let ws = ws.to_str().unwrap();
    text.replace(
        "/path/to/cordon-audit.jsonl",
        &format!("{ws}/cordon-audit.jsonl"),
    )
    .replace("/path/to/cordon", CORDON)
    .replace("/path/to/project", ws)
    .replace("${workspaceFolder}", ws)
}

/// Starts `argv` as a client would, initializes, and returns the tool names it lists.
fn tools_of(argv: &[String]) -> Vec<String> {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {argv:?}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    for line in [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"readme","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    ] {
        writeln!(stdin, "{line}").unwrap();
    }
    let mut tools = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let message: Value = serde_json::from_str(&line.unwrap()).expect("JSON-RPC on stdout");
        assert!(message.get("error").is_none(), "{argv:?}: {message}");
        if message["id"] == 1 {
            tools = message["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect();
            break;
        }
    }
    drop(stdin);
    let _ = child.wait();
    tools.sort();
    tools
}

fn assert_serves_all_tools(argv: &[String]) {
    assert_eq!(
        tools_of(argv),
        [
            "checkpoint",
            "code_interpreter",
            "edit_file",
            "job",
            "read_file",
            "shell_exec",
            "write_file"
        ],
        "{argv:?}"
    );
}

/// `command` + `args` of one server entry, from the cordon binary on (a remote entry's
/// transport, ssh/docker/wsl, is not available here).
fn cordon_argv(entry: &Value) -> Vec<String> {
    let mut argv = vec![entry["command"].as_str().unwrap().to_owned()];
    argv.extend(
        entry["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned()),
    );
    let start = argv
        .iter()
        .position(|a| a == CORDON)
        .unwrap_or_else(|| panic!("no cordon in {argv:?}"));
    argv.split_off(start)
}

#[cordon_test::test]
fn readme_run_command_names_the_server_binary() {
    // The README leads with `cargo run --release -- serve …`; with a second binary
    // (cordon-init) cargo refuses to guess which one to run unless `default-run` says it.
    assert!(README.contains("```sh\ncargo run --release -- serve --workspace .\n```\n"));
    let bins = CARGO_TOML.matches("[[bin]]").count();
    assert!(
        bins <= 1
            || CARGO_TOML
                .lines()
                .any(|l| l.replace(' ', "") == "default-run=\"cordon\""),
        "Cargo.toml has {bins} binaries and no `default-run = \"cordon\"`: `cargo run` fails"
    );
}

#[cordon_test::test]
fn readme_test_command_is_the_one_ci_runs_and_says_how_to_install_nextest() {
    // The test command needs nothing beyond Rust; nextest is the optional alternative.
    assert!(README.contains("```sh\ncargo test --no-fail-fast\n```\n"));
    assert!(README.contains(
        "(`cargo install --locked cargo-nextest`, then `cargo nextest run --no-fail-fast`)"
    ));
    assert!(
        CI_RUN
            .lines()
            .any(|l| l.trim() == "cargo test --no-fail-fast"),
        ".ci/run must run the README's test command"
    );
}

#[cordon_test::test]
fn readme_claude_code_snippet_starts_a_server() {
    let ws = workspace();
    let line = substitute(&snippet("claude"), ws.path());
    let (claude, server) = line
        .trim()
        .split_once(" -- ")
        .expect("claude mcp add NAME -- CMD");
    assert!(claude.starts_with("claude mcp add cordon"), "{claude}");
    let argv: Vec<String> = server.split_whitespace().map(str::to_owned).collect();
    assert_serves_all_tools(&argv);
}

#[cordon_test::test]
fn readme_vscode_snippet_is_a_stdio_server_that_starts() {
    let ws = workspace();
    let config: Value = serde_json::from_str(&substitute(&snippet("vscode"), ws.path())).unwrap();
    let entry = &config["servers"]["cordon"];
    assert_eq!(entry["type"], "stdio", "{config}");
    assert_serves_all_tools(&cordon_argv(entry));
}

#[cordon_test::test]
fn readme_mcpservers_and_remote_snippets_start_servers() {
    for name in ["mcpservers", "remote"] {
        let ws = workspace();
        let config: Value = serde_json::from_str(&substitute(&snippet(name), ws.path()))
            .unwrap_or_else(|e| panic!("snippet {name} is not JSON: {e}"));
        let servers = config["mcpServers"].as_object().expect("mcpServers");
        assert!(!servers.is_empty());
        for (server, entry) in servers {
            eprintln!("{name}: {server}");
            assert_serves_all_tools(&cordon_argv(entry));
        }
    }
}

#[cordon_test::test]
fn readme_python_snippet_runs_verbatim() {
    let python = std::env::var("CORDON_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import mcp.client.client"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        return missing_prerequisites(
            "readme_python_snippet_runs_verbatim",
            "the Python SDK (mcp 2.x) is not importable",
            "python3 -m pip install mcp==2.3.0",
        );
    }
    let ws = workspace();
    let script = ws.path().join("../readme_snippet.py");
    std::fs::write(&script, substitute(&snippet("python"), ws.path())).unwrap();
    let out = Command::new(&python).arg(&script).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("readme-marker.txt"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cordon_test::test]
fn readme_typescript_snippet_runs_verbatim() {
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/node/node_modules");
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success())
        || !modules
            .join("@modelcontextprotocol/sdk/package.json")
            .exists()
    {
        return missing_prerequisites(
            "readme_typescript_snippet_runs_verbatim",
            "node or the TypeScript SDK (tests/e2e/node/node_modules) is missing",
            "apt-get install nodejs npm && npm ci --prefix tests/e2e/node",
        );
    }
    let ws = workspace();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&modules, dir.path().join("node_modules")).unwrap();
    std::fs::write(
        dir.path().join("list.mjs"),
        substitute(&snippet("typescript"), ws.path()),
    )
    .unwrap();
    let out = Command::new("node")
        .arg("list.mjs")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("readme-marker.txt"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
