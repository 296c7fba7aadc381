//! Protected git paths in the sandbox's view, driven through a long-lived `cordon serve` (one
//! view across calls, as an agent sees it):
//! * a repository that appears after the server started (`git init` in a call) is protected
//!   from the next call on — the view is re-made, not left stale;
//! * a git control file a command creates in the operator's repository (`.git/commondir`,
//!   which makes git read another directory's config) is moved to quarantine when the call
//!   ends, and the result says so;
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
    cmd.arg("serve").arg("--workspace").arg(workspace);
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
    let hook = ws.path().join(".git/hooks/pre-commit");
    let write = shell(&client, "echo 'touch /tmp/pwned' > .git/hooks/pre-commit").await;
    assert_ne!(write["exit_code"], 0, "the hook was writable: {write}");
    assert!(
        write["stderr"]
            .as_str()
            .unwrap_or("")
            .contains("Read-only file system"),
        "{write}"
    );
    assert!(!hook.exists(), "a hook was created");
    let rename = shell(&client, "mv .git .git-moved").await;
    assert_ne!(rename["exit_code"], 0, "{rename}");
    assert!(ws.path().join(".git").is_dir() && !ws.path().join(".git-moved").exists());
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn commondir_created_by_a_command_is_quarantined() {
    if skip(
        "commondir_created_by_a_command_is_quarantined",
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
        ".git/commondir survived the call: {run}"
    );
    let quarantined: Vec<_> = std::fs::read_dir(ws.path().join(".cordon/quarantine"))
        .expect("quarantine directory")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        quarantined.iter().any(|n| n.ends_with(".git_commondir")),
        "{quarantined:?}"
    );
    let stderr = run["stderr"].as_str().unwrap_or("");
    assert!(stderr.contains("moved it to .cordon/quarantine"), "{run}");
    // git in the repository reads its own config again.
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
async fn commondir_backdated_with_touch_is_still_quarantined() {
    if skip(
        "commondir_backdated_with_touch_is_still_quarantined",
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
async fn submodule_planted_through_a_gitfile_has_its_config_quarantined() {
    if skip(
        "submodule_planted_through_a_gitfile_has_its_config_quarantined",
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
    let config = std::fs::read_to_string(ws.path().join("store/.git/config")).unwrap_or_default();
    assert!(
        !config.contains("fsmonitor"),
        "the planted config is still where git reads it: {run}"
    );
    assert!(
        run["stderr"].as_str().unwrap_or("").contains("submodule"),
        "the result does not say: {run}"
    );
    client.cancel().await.ok();
}
