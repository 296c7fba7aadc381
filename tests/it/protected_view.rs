//! The operator's gitdir in the sandbox's view (issue 29), driven through a long-lived
//! `cordon serve` (one view across calls, as an agent sees it):
//! * a repository that appears after the server started (`git init` in a call) is made on the
//!   host by cordon, with no hook or config of the call's, and its `.git` cannot be moved;
//! * a git control file a command writes (`.git/commondir`, which makes git read another
//!   directory's config) lands in the shadow gitdir, never in the operator's;
//! * a symbolic link at a protected path never breaks a spawn.
//!
//! Each scenario is its own server process with its own workspace.

use crate::common::{Need, skip};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::path::Path;

type Client = RunningService<RoleClient, ()>;

async fn connect(workspace: &Path) -> Client {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_cordon"));
    let state = std::env::temp_dir().join(format!(
        "cordon-git-state-{}",
        workspace.file_name().unwrap().to_string_lossy()
    ));
    cmd.arg("serve")
        .arg("--workspace")
        .arg(workspace)
        .env("CORDON_STATE_DIR", state);
    let transport = TokioChildProcess::new(cmd).expect("spawn cordon serve");
    ().serve(transport)
        .await
        .expect("MCP session with cordon starts")
}

async fn shell(client: &Client, command: &str) -> Value {
    let Value::Object(arguments) = json!({ "command": command }) else {
        unreachable!()
    };
    let result: CallToolResult = client
        .call_tool(CallToolRequestParams::new("shell_exec").with_arguments(arguments))
        .await
        .expect("shell_exec answers");
    result.structured_content.expect("structured content")
}

fn git_init(ws: &Path) {
    let ok = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws)
        .status()
        .expect("git runs")
        .success();
    assert!(ok, "git init");
}

#[cordon_test::test]
async fn repository_created_by_a_call_is_protected_from_the_next_call() {
    if skip(
        "repository_created_by_a_call_is_protected_from_the_next_call",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let client = connect(ws.path()).await;
    let made = shell(&client, "git init -q . && test -d .git/hooks && echo made").await;
    assert_eq!(made["exit_code"], 0, "{made}");
    assert!(
        ws.path().join(".git/HEAD").is_file(),
        "the host has the repository after the call: {made}"
    );
    let hook = ws.path().join(".git/hooks/pre-commit");
    let write = shell(
        &client,
        "printf '#!/bin/sh\ntouch /tmp/pwned\n' > .git/hooks/pre-commit &&          chmod +x .git/hooks/pre-commit && echo written",
    )
    .await;
    assert_eq!(
        write["stdout"], "written\n",
        "the shadow's hooks are the call's: {write}"
    );
    assert!(!hook.exists(), "a hook reached the operator's gitdir");
    let rename = shell(&client, "mv .git .git-moved").await;
    assert_ne!(rename["exit_code"], 0, "{rename}");
    assert!(ws.path().join(".git").is_dir() && !ws.path().join(".git-moved").exists());
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn commondir_created_by_a_command_never_reaches_the_operators_gitdir() {
    if skip(
        "commondir_created_by_a_command_never_reaches_the_operators_gitdir",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    git_init(ws.path());
    // Control: the same write is possible in the repository (git's layout lets it be made).
    let client = connect(ws.path()).await;
    let run = shell(
        &client,
        "mkdir -p evil && printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > evil/config \
         && echo ../evil > .git/commondir && cat .git/commondir",
    )
    .await;
    assert_eq!(
        run["stdout"], "../evil\n",
        "the command itself could write it: {run}"
    );
    assert!(
        !ws.path().join(".git/commondir").exists(),
        ".git/commondir reached the operator's gitdir: {run}"
    );
    // git in the repository reads its own config.
    let status = std::process::Command::new("git")
        .args(["rev-parse", "--git-common-dir"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&status.stdout).trim(), ".git");
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn symlinked_hooks_never_break_a_spawn() {
    if skip("symlinked_hooks_never_break_a_spawn", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    git_init(ws.path());
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::remove_dir_all(ws.path().join(".git/hooks")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), ws.path().join(".git/hooks")).unwrap();
    let client = connect(ws.path()).await;
    for _ in 0..3 {
        let run = shell(&client, "echo alive").await;
        assert_eq!(run["stdout"], "alive\n", "{run}");
    }
    // The link points outside the workspace; the view does not follow it there.
    let through = shell(&client, "echo x > .git/hooks/pre-commit").await;
    assert_ne!(through["exit_code"], 0, "{through}");
    assert!(!elsewhere.path().join("pre-commit").exists());
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn commondir_backdated_with_touch_never_reaches_the_operators_gitdir() {
    if skip(
        "commondir_backdated_with_touch_never_reaches_the_operators_gitdir",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    git_init(ws.path());
    let client = connect(ws.path()).await;
    // mtime can be set back by the writer; the check must not trust it.
    let run = shell(
        &client,
        "echo ../evil > .git/commondir && touch -d '2001-01-01' .git/commondir && echo planted",
    )
    .await;
    assert_eq!(run["stdout"], "planted\n", "{run}");
    assert!(
        !ws.path().join(".git/commondir").exists(),
        "a back-dated .git/commondir survived the call: {run}"
    );
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn submodule_planted_through_a_gitfile_never_reaches_the_operators_index() {
    if skip(
        "submodule_planted_through_a_gitfile_never_reaches_the_operators_index",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    git_init(ws.path());
    let client = connect(ws.path()).await;
    // `sub/.git` is a gitfile naming a repository elsewhere in the workspace, whose config
    // names a command; the index records `sub` as a gitlink.
    let script = "git init -q store && git -C store -c user.email=a@b.invalid -c user.name=a \
         commit -q --allow-empty -m s && mkdir sub && echo 'gitdir: ../store/.git' > sub/.git && \
         printf '[core]\\n\\tfsmonitor = \"touch pwned\"\\n' >> store/.git/config && \
         git update-index --add --cacheinfo 160000,$(git -C store rev-parse HEAD),sub && echo ok";
    let run = shell(&client, script).await;
    assert_eq!(run["stdout"], "ok\n", "{run}");
    assert_eq!(run["error"]["kind"], "denied", "{run}");
    assert!(
        run["stderr"].as_str().unwrap_or("").contains("submodule"),
        "the result does not say: {run}"
    );
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-s", "sub"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert!(
        listed.stdout.is_empty(),
        "the operator's index has `sub`: {listed:?}"
    );
    let _ = std::process::Command::new("git")
        .args(["-c", "core.fsmonitor=", "status"])
        .current_dir(ws.path())
        .output();
    let _ = std::process::Command::new("git")
        .arg("status")
        .current_dir(ws.path())
        .output();
    assert!(
        !ws.path().join("pwned").exists(),
        "the operator's git status ran the plant"
    );
    client.cancel().await.ok();
}
