//! Git by construction (issue 29), against the adversarial findings of issues 18 and 29: each
//! scenario runs real git inside a long-lived `cordon serve` (one view across calls, as an
//! agent sees it) and plays the operator by running the real `git` on the host, during the
//! session and after it: nothing planted runs, the operator's config, hooks, index and refs
//! are never written by a call, what cannot be imported is a `denied` result, and the agent's
//! commits show up in the operator's repository.
//!
//! Each scenario is its own server process with its own workspace, and its own shadow state
//! (`CORDON_STATE_DIR`), so no scenario sees another's shadow gitdir.

use crate::common::{CORDON, Need, skip};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) type Client = RunningService<RoleClient, ()>;

/// The cordon under test: this build's, or `GIT_TESTS_CORDON` (another build, to show these
/// scenarios failing on it).
fn cordon() -> String {
    std::env::var("GIT_TESTS_CORDON")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| CORDON.to_owned())
}

async fn connect(workspace: &Path) -> Client {
    connect_with_pid(workspace).await.0
}

/// A session, and the pid of its `cordon serve`. The server keeps its shadow state beside the
/// workspace (`<workspace>.state`, removed with the workspace's parent temporary directory).
async fn connect_with_pid(workspace: &Path) -> (Client, u32) {
    connect_with_env(workspace, &[]).await
}

/// The same, with `env` set for the server.
pub(crate) async fn connect_with_env(workspace: &Path, env: &[(&str, &str)]) -> (Client, u32) {
    let mut cmd = tokio::process::Command::new(cordon());
    cmd.arg("serve")
        .arg("--workspace")
        .arg(workspace)
        .env("CORDON_STATE_DIR", state_dir(workspace))
        .envs(env.iter().copied());
    let transport = TokioChildProcess::new(cmd).expect("spawn cordon serve");
    let pid = transport.id().expect("the server's pid");
    let client = ().serve(transport).await.expect("MCP session with cordon starts");
    (client, pid)
}

/// Where a test's server keeps its shadow gitdirs: outside the workspace, one per workspace.
fn state_dir(workspace: &Path) -> PathBuf {
    let name = workspace
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    std::env::temp_dir().join(format!("cordon-git-state-{name}"))
}

/// One `shell_exec` call: (isError, structured content).
pub(crate) async fn shell(client: &Client, command: &str) -> (bool, Value) {
    let Value::Object(arguments) = json!({ "command": command, "timeout_secs": 120 }) else {
        unreachable!()
    };
    let result: CallToolResult = client
        .call_tool(CallToolRequestParams::new("shell_exec").with_arguments(arguments))
        .await
        .expect("shell_exec answers");
    (
        result.is_error.unwrap_or(false),
        result.structured_content.expect("structured content"),
    )
}

pub(crate) fn denied(out: &(bool, Value)) -> bool {
    out.0 && out.1["error"]["kind"] == "denied"
}

/// git on the host, as the operator runs it: no global or system config of this machine.
pub(crate) fn host_git(ws: &Path, args: &[&str]) -> std::process::Output {
    let home = tempfile::tempdir().unwrap();
    Command::new("git")
        .args(args)
        .current_dir(ws)
        .env("HOME", home.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .expect("git runs")
}

/// The operator's `git commit --allow-empty -m <message>` in `dir`, with an identity of its own.
fn host_commit(dir: &Path, message: &str) -> std::process::Output {
    host_git(
        dir,
        &[
            "-c",
            "user.email=o@example.invalid",
            "-c",
            "user.name=o",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            message,
        ],
    )
}

/// The common start of a plant test: the operator's repository, a marker the plant would
/// create, and a session with cordon on it. None when namespaces are missing here (a failure
/// in CI, see `skip`).
async fn operator_session(test: &str) -> Option<(tempfile::TempDir, Marker, Client)> {
    if skip(test, Need::Namespaces) {
        return None;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let marker = Marker::new();
    let client = connect(ws.path()).await;
    Some((ws, marker, client))
}

/// An operator's repository with one commit.
pub(crate) fn operator_repo(ws: &Path) {
    for args in [
        &["init", "-q"][..],
        &["config", "user.email", "op@example.invalid"],
        &["config", "user.name", "Operator"],
        &["commit", "-q", "--allow-empty", "-m", "start"],
    ] {
        let out = host_git(ws, args);
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }
}

/// A place outside the workspace a planted command would touch, and the shell text that
/// touches it.
struct Marker {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl Marker {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pwned");
        Marker { _dir: dir, path }
    }
    fn command(&self) -> String {
        format!("touch {}", self.path.display())
    }
}

/// The operator's `git status` (which enters every submodule) runs nothing planted.
fn assert_host_status_is_safe(ws: &Path, marker: &Marker) {
    let _ = host_git(ws, &["status"]);
    let _ = host_git(ws, &["status", "--ignore-submodules=none"]);
    assert!(
        !marker.path.exists(),
        "the operator's git status ran a planted command"
    );
}

/// `git init sub` with one commit, recorded in the index as a gitlink (benign config).
const BENIGN_SUBMODULE: &str = "git init -q sub && git -C sub -c user.email=a@b.invalid \
    -c user.name=a commit -q --allow-empty -m s && git add sub 2>/dev/null";

/// The operator's index has no gitlink `path` (a submodule a call recorded never reached it).
fn assert_no_host_gitlink(ws: &Path, path: &str) {
    let out = host_git(ws, &["ls-files", "-s", "--", path]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        !listed.starts_with("160000"),
        "the operator's index records `{path}` as a gitlink: {listed}"
    );
}

/// Runs the operator's `git status` `times` times, `every` apart, while something runs in the
/// sandbox; true when none of them ran the plant.
async fn host_status_during(ws: &Path, marker: &Marker, times: usize, every_ms: u64) -> bool {
    for _ in 0..times {
        let _ = host_git(ws, &["status"]);
        if marker.path.exists() {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(every_ms)).await;
    }
    true
}

/// A background job (`shell_exec {background: true}`): its id.
async fn background(client: &Client, command: &str) -> String {
    let Value::Object(arguments) = json!({ "command": command, "background": true }) else {
        unreachable!()
    };
    let result: CallToolResult = client
        .call_tool(CallToolRequestParams::new("shell_exec").with_arguments(arguments))
        .await
        .expect("shell_exec answers");
    let out = result.structured_content.expect("structured content");
    assert!(!result.is_error.unwrap_or(false), "{out}");
    out["job"]["id"].as_str().expect("a job id").to_owned()
}

// ---------------------------------------------------------------------------------------
// Issue 29: the eight findings against the guard that watched, compared and undid.
// ---------------------------------------------------------------------------------------

/// Finding 1: the guard's name for putting `.git/config` back was predictable (a counter and
/// the server's pid); a job that made those names first kept its `core.fsmonitor` for the
/// session. Nothing of the operator's gitdir is a call's to write any more.
#[cordon_test::test]
async fn issue29_finding1_predicted_restore_names_keep_no_plant() {
    if skip("issue29_finding1", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let before = std::fs::read(ws.path().join(".git/config")).unwrap();
    let marker = Marker::new();
    let (client, pid) = connect_with_pid(ws.path()).await;
    background(
        &client,
        &format!(
            "for n in $(seq 0 400); do : > .git/.cordon-restore-$n-{pid}; done; \
             git config core.fsmonitor '{}'; sleep 60",
            marker.command()
        ),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        host_status_during(ws.path(), &marker, 20, 100).await,
        "the operator's git status ran the planted fsmonitor during the session"
    );
    let after = std::fs::read(ws.path().join(".git/config")).unwrap();
    assert_eq!(after, before, "the operator's .git/config changed");
    client.cancel().await.ok();
    assert_host_status_is_safe(ws.path(), &marker);
}

/// Finding 2: a call that rewrote `.git/config` in place right after the guard's restore had
/// its plant recorded as accepted. The operator's config file is never written by a call.
#[cordon_test::test]
async fn issue29_finding2_an_in_place_rewrite_is_never_the_operators_config() {
    let Some((ws, marker, client)) = operator_session("issue29_finding2").await else {
        return;
    };
    let before = std::fs::read(ws.path().join(".git/config")).unwrap();
    // Whenever the config lacks the plant (an undo renamed a clean file into place), it is
    // written back in place at once, for three seconds.
    let run = shell(
        &client,
        &format!(
            "printf '[core]\\n\\tfsmonitor = {}\\n' > /tmp/plant && end=$(($(date +%s) + 3)); \
             while [ $(date +%s) -lt $end ]; do \
               grep -q fsmonitor .git/config || cat /tmp/plant > .git/config; \
             done; grep -c fsmonitor .git/config",
            marker.command()
        ),
    )
    .await;
    let after = std::fs::read(ws.path().join(".git/config")).unwrap();
    assert_host_status_is_safe(ws.path(), &marker);
    assert_eq!(after, before, "the operator's .git/config changed: {run:?}");
    assert!(
        !run.0,
        "the shadow's config is the call's to write: {run:?}"
    );
    // A later call does not launder it either.
    let next = shell(&client, "git status --short >/dev/null; echo ok").await;
    assert_eq!(next.1["stdout"], "ok\n", "{next:?}");
    assert_eq!(
        std::fs::read(ws.path().join(".git/config")).unwrap(),
        before
    );
    client.cancel().await.ok();
}

/// Finding 3: a job re-planting `.git/config` right after each undo made the operator's
/// `git status` run the plant 30 times out of 30, and a gitlinked nested repository's config
/// 10 out of 10. Now neither config is one the operator's git reads.
#[cordon_test::test]
async fn issue29_finding3_a_replanting_job_never_reaches_the_operators_git() {
    let Some((ws, marker, client)) = operator_session("issue29_finding3").await else {
        return;
    };
    background(
        &client,
        &format!(
            "{BENIGN_SUBMODULE}; while :; do git config core.fsmonitor '{m}'; \
             git -C sub config core.fsmonitor '{m}'; sleep 0.02; done",
            m = marker.command()
        ),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(
        host_status_during(ws.path(), &marker, 30, 50).await,
        "the operator's git status ran a plant the job kept writing"
    );
    assert_no_host_gitlink(ws.path(), "sub");
    client.cancel().await.ok();
    assert_host_status_is_safe(ws.path(), &marker);
}

/// Finding 4: symlinks inside `.git` (`logs/HEAD`, `COMMIT_EDITMSG`) made the operator's next
/// commit append to a file outside the workspace and truncate another.
#[cordon_test::test]
async fn issue29_finding4_symlinks_in_git_never_redirect_the_operators_writes() {
    let Some((ws, _marker, client)) = operator_session("issue29_finding4").await else {
        return;
    };
    let outside = tempfile::tempdir().unwrap();
    let reflog = outside.path().join("bashrc");
    let notes = outside.path().join("notes");
    std::fs::write(&reflog, "keep\n").unwrap();
    std::fs::write(&notes, "my notes\n").unwrap();
    let run = shell(
        &client,
        &format!(
            "mkdir -p .git/logs && ln -sfn {} .git/logs/HEAD && ln -sfn {} .git/COMMIT_EDITMSG \
             && echo linked",
            reflog.display(),
            notes.display()
        ),
    )
    .await;
    assert_eq!(run.1["stdout"], "linked\n", "{run:?}");
    let commit = host_git(
        ws.path(),
        &["commit", "-q", "--allow-empty", "-m", "operator"],
    );
    assert!(commit.status.success(), "{commit:?}");
    assert_eq!(std::fs::read_to_string(&reflog).unwrap(), "keep\n");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "my notes\n");
    assert!(
        !std::fs::symlink_metadata(ws.path().join(".git/logs/HEAD"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    client.cancel().await.ok();
}

/// Finding 5: with no `.git` at start, `git init` plus a `core.fsmonitor` and a `pre-commit`
/// hook were only reported; the operator's `git status` and `git commit` ran both. What the
/// host gets is a repository cordon made, holding the agent's commit and nothing else.
#[cordon_test::test]
async fn issue29_finding5_a_repository_a_call_creates_runs_nothing_on_the_host() {
    if skip("issue29_finding5", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("README"), "hello\n").unwrap();
    let marker = Marker::new();
    let hook = Marker::new();
    let client = connect(ws.path()).await;
    let run = shell(
        &client,
        &format!(
            "git init -q && git config core.fsmonitor '{}' && \
             printf '#!/bin/sh\\n{}\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit \
             && git -c core.fsmonitor=false add README && \
             git -c core.fsmonitor=false -c core.hooksPath=/dev/null -c user.email=a@b.invalid \
             -c user.name=agent commit -qm 'agent commit' && echo made",
            marker.command(),
            hook.command()
        ),
    )
    .await;
    assert_eq!(run.1["stdout"], "made\n", "{run:?}");
    assert!(!run.0, "{run:?}");
    let log = host_git(ws.path(), &["log", "-1", "--format=%s"]);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "agent commit\n",
        "{log:?}"
    );
    assert_host_status_is_safe(ws.path(), &marker);
    let commit = host_commit(ws.path(), "operator");
    assert!(commit.status.success(), "{commit:?}");
    assert!(
        !hook.path.exists(),
        "the operator's commit ran the planted hook"
    );
    assert!(
        !marker.path.exists(),
        "the operator's commit ran the fsmonitor"
    );
    client.cancel().await.ok();
}

/// Finding 6: a gitlink kept only in `.git/sharedindex.*` (split index) was never read; the
/// nested repository's config then ran code. The operator's index is cordon's, written from
/// a tree, and a new gitlink is refused.
#[cordon_test::test]
async fn issue29_finding6_a_gitlink_in_a_split_index_is_refused() {
    let Some((ws, marker, client)) = operator_session("issue29_finding6").await else {
        return;
    };
    let run = shell(
        &client,
        &format!(
            "git update-index --split-index && {BENIGN_SUBMODULE} && \
             git -C sub config core.fsmonitor '{}' && ls .git | grep -q sharedindex && echo split",
            marker.command()
        ),
    )
    .await;
    assert_eq!(run.1["stdout"], "split\n", "the index was split: {run:?}");
    assert_host_status_is_safe(ws.path(), &marker);
    assert_no_host_gitlink(ws.path(), "sub");
    assert!(denied(&run), "{run:?}");
    assert!(
        !std::fs::read_dir(ws.path().join(".git")).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("sharedindex")),
        "the operator's gitdir has a shared index"
    );
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

/// Finding 7: `core.worktree` pointed outside the workspace made the operator's
/// `git checkout -- .` write files there and `git clean -fd` delete the operator's files there.
#[cordon_test::test]
async fn issue29_finding7_core_worktree_never_moves_the_operators_work_tree() {
    if skip("issue29_finding7", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    std::fs::write(ws.path().join("tracked"), "tracked\n").unwrap();
    assert!(host_git(ws.path(), &["add", "tracked"]).status.success());
    assert!(
        host_git(ws.path(), &["commit", "-q", "-m", "tracked"])
            .status
            .success()
    );
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("precious"), "mine\n").unwrap();
    let client = connect(ws.path()).await;
    let run = shell(
        &client,
        &format!(
            "git config core.worktree {} && git config core.worktree",
            elsewhere.path().display()
        ),
    )
    .await;
    assert!(!run.0, "{run:?}");
    for args in [&["checkout", "--", "."][..], &["clean", "-fd"]] {
        let _ = host_git(ws.path(), args);
    }
    assert_eq!(
        std::fs::read_to_string(elsewhere.path().join("precious")).unwrap(),
        "mine\n",
        "the operator's git clean removed a file outside the workspace"
    );
    assert!(
        !elsewhere.path().join("tracked").exists(),
        "the operator's git checkout wrote outside the workspace"
    );
    client.cancel().await.ok();
}

/// Finding 8: `git replace <backdoor> <benign>` made the operator's `git show` display the
/// benign text while the committed blob held the backdoor. Replace refs are never imported,
/// and a shadow holding one imports nothing (the call is refused).
#[cordon_test::test]
async fn issue29_finding8_replace_refs_never_hide_a_change_from_review() {
    let Some((ws, _marker, client)) = operator_session("issue29_finding8").await else {
        return;
    };
    let run = shell(
        &client,
        "echo backdoor > f && git add f && git -c user.email=a@b.invalid -c user.name=a \
         commit -qm 'add f' && bad=$(git rev-parse HEAD:f) && \
         good=$(echo benign | git hash-object -w --stdin) && git replace $bad $good && \
         git show HEAD:f",
    )
    .await;
    assert_eq!(
        run.1["stdout"], "benign\n",
        "the replace works confined: {run:?}"
    );
    let shown = host_git(ws.path(), &["log", "-p", "--all"]);
    assert!(
        !String::from_utf8_lossy(&shown.stdout).contains("benign"),
        "the operator's git log -p shows the replacement"
    );
    let replaced = host_git(ws.path(), &["replace", "-l"]);
    assert_eq!(
        String::from_utf8_lossy(&replaced.stdout),
        "",
        "{replaced:?}"
    );
    assert!(denied(&run), "{run:?}");
    // Once the replace ref is gone, the commit (with its real content) is imported.
    let fixed = shell(
        &client,
        "git replace -d $(git rev-parse HEAD:f) && echo removed",
    )
    .await;
    assert!(!fixed.0, "{fixed:?}");
    let show = host_git(ws.path(), &["show", "HEAD:f"]);
    assert_eq!(
        String::from_utf8_lossy(&show.stdout),
        "backdoor\n",
        "{show:?}"
    );
    client.cancel().await.ok();
}

/// Issue 29, fail closed: a refused import is in the audit log, not only in the result: the
/// call's record (and a job's ending record) carries cordon's sentences about what it refused.
#[cordon_test::test]
async fn a_refused_import_is_in_the_audit_record_of_the_call_and_of_the_job() {
    if skip("a_refused_import_is_in_the_audit_record", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let outside = tempfile::tempdir().unwrap();
    let audit = outside.path().join("audit.jsonl");
    let mut cmd = tokio::process::Command::new(cordon());
    cmd.arg("serve")
        .arg("--workspace")
        .arg(ws.path())
        .arg("--audit-log")
        .arg(&audit)
        .env("CORDON_STATE_DIR", state_dir(ws.path()));
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    let replace =
        "git replace $(git rev-parse HEAD) $(git commit-tree -m x $(git rev-parse HEAD^{tree}))";
    let run = shell(&client, replace).await;
    assert!(denied(&run), "{run:?}");
    let Value::Object(arguments) = json!({
        // A replacement of another object than the call's (that one was refused already).
        "command": format!("git commit -q --allow-empty -m two && {}", replace.replace("-m x", "-m y")),
        "background": true,
        "wait_secs": 10,
    }) else {
        unreachable!()
    };
    let started = client
        .call_tool(CallToolRequestParams::new("shell_exec").with_arguments(arguments))
        .await
        .expect("the job starts");
    assert!(started.structured_content.is_some(), "{started:?}");
    let records = || -> Vec<Value> {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let job_ending = loop {
        let found = records()
            .into_iter()
            .find(|r| r["tool"] == "job" && r["outcome"]["state"].is_string());
        if let Some(found) = found {
            break found;
        }
        assert!(std::time::Instant::now() < deadline, "{:?}", records());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    client.cancel().await.ok();
    let call = records()
        .into_iter()
        .find(|r| r["tool"] == "shell_exec")
        .expect("the call's record");
    let said = call["outcome"]["git_refused"].to_string();
    assert!(said.contains("replace"), "{call}");
    let said = job_ending["outcome"]["git_refused"].to_string();
    assert!(said.contains("replace"), "{job_ending}");
}

/// The operator sees the agent's commit on their branch right after the call, and what the
/// operator commits on the host is the sandbox's at the next call.
#[cordon_test::test]
async fn commits_flow_both_ways_between_the_operator_and_the_sandbox() {
    let Some((ws, _marker, client)) = operator_session("commits_both_ways").await else {
        return;
    };
    let run = shell(
        &client,
        "echo one > a && git add a && git -c user.email=a@b.invalid -c user.name=agent \
         commit -qm 'agent one' && git checkout -qb topic && git -c user.email=a@b.invalid \
         -c user.name=agent commit -q --allow-empty -m 'on topic' && git checkout -q - && \
         git tag v1 && echo ok",
    )
    .await;
    assert!(!run.0, "{run:?}");
    let log = host_git(ws.path(), &["log", "-1", "--format=%s"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout), "agent one\n");
    let topic = host_git(ws.path(), &["log", "-1", "--format=%s", "topic"]);
    assert_eq!(String::from_utf8_lossy(&topic.stdout), "on topic\n");
    assert!(host_git(ws.path(), &["rev-parse", "v1"]).status.success());
    let status = host_git(ws.path(), &["status", "--porcelain"]);
    assert_eq!(
        String::from_utf8_lossy(&status.stdout),
        "",
        "the operator's index follows the agent's commit"
    );
    let fsck = host_git(ws.path(), &["fsck", "--no-progress"]);
    assert!(fsck.status.success(), "{fsck:?}");
    // The operator commits on the host; the next call starts from it.
    std::fs::write(ws.path().join("b"), "two\n").unwrap();
    assert!(host_git(ws.path(), &["add", "b"]).status.success());
    assert!(
        host_git(ws.path(), &["commit", "-q", "-m", "operator two"])
            .status
            .success()
    );
    let next = shell(&client, "git log -1 --format=%s && git status --porcelain").await;
    assert_eq!(next.1["stdout"], "operator two\n", "{next:?}");
    client.cancel().await.ok();
}

/// Adversarial input to the import itself: a symlinked ref and a ref named like a path out of
/// the gitdir are refused as a whole, and the operator's refs stay as they were.
#[cordon_test::test]
async fn refs_the_import_cannot_vouch_for_are_refused_as_a_whole() {
    let Some((ws, _marker, client)) = operator_session("hostile_refs").await else {
        return;
    };
    let before = host_git(ws.path(), &["for-each-ref"]).stdout;
    let run = shell(
        &client,
        "git -c user.email=a@b.invalid -c user.name=a commit -q --allow-empty -m x && \
         ln -s /etc/passwd .git/refs/heads/evil && echo planted",
    )
    .await;
    assert_eq!(run.1["stdout"], "planted\n", "{run:?}");
    assert!(denied(&run), "{run:?}");
    assert_eq!(host_git(ws.path(), &["for-each-ref"]).stdout, before);
    client.cancel().await.ok();
}

// ---------------------------------------------------------------------------------------
// Issue 18's findings (1–7), each still played against the operator's git.
// ---------------------------------------------------------------------------------------

/// A nested repository recorded as a gitlink by a call never reaches the operator's index,
/// so a config planted in it later is never read by the operator's git.
#[cordon_test::test]
async fn finding1_submodule_config_changed_in_a_later_call_is_never_read_by_the_host() {
    let Some((ws, marker, client)) = operator_session("finding1").await else {
        return;
    };
    let first = shell(&client, BENIGN_SUBMODULE).await;
    assert!(
        denied(&first),
        "a new gitlink is refused at import: {first:?}"
    );
    assert!(
        first.1["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("sub"),
        "{first:?}"
    );
    let second = shell(
        &client,
        &format!("git -C sub config core.fsmonitor '{}'", marker.command()),
    )
    .await;
    assert!(!second.0, "{second:?}");
    assert_no_host_gitlink(ws.path(), "sub");
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding2_configs_cordon_cannot_read_never_reach_the_host() {
    let Some((ws, marker, client)) = operator_session("finding2").await else {
        return;
    };
    let plant = |dir: &str| {
        format!(
            "git init -q {dir} && git -C {dir} -c user.email=a@b.invalid -c user.name=a commit -q \
             --allow-empty -m s && git -C {dir} config core.fsmonitor '{}'",
            marker.command()
        )
    };
    // Over 1 MiB; behind a UTF-8 BOM; not UTF-8 after the planted key.
    let script = format!(
        "{} && head -c 1100000 /dev/zero | tr '\\0' '#' >> big/.git/config && \
         {} && printf '\\357\\273\\277[core]\\n\\tfsmonitor = {}\\n' > bom/.git/config && \
         {} && printf '# \\377\\n' >> latin/.git/config && \
         git add big bom latin 2>/dev/null && echo planted",
        plant("big"),
        plant("bom"),
        marker.command(),
        plant("latin"),
    );
    let run = shell(&client, &script).await;
    assert!(denied(&run), "{run:?}");
    for dir in ["big", "bom", "latin"] {
        assert_no_host_gitlink(ws.path(), dir);
    }
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding2_a_submodule_gitdir_outside_the_workspace_is_refused() {
    let Some((ws, marker, client)) = operator_session("finding2_outside").await else {
        return;
    };
    let script = format!(
        "evil=\"$(dirname \"$TMPDIR\")/evil.git\"; \
         (git init -q --bare \"$evil\" && git --git-dir=\"$evil\" config core.fsmonitor '{}') \
         2>/dev/null; mkdir out && printf 'gitdir: %s\\n' \"$evil\" > out/.git && \
         git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),out && echo planted",
        marker.command()
    );
    let run = shell(&client, &script).await;
    assert_eq!(run.1["stdout"], "planted\n", "{run:?}");
    assert!(denied(&run), "{run:?}");
    assert_no_host_gitlink(ws.path(), "out");
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding2_an_index_padded_past_64_mib_carries_nothing_to_the_host() {
    let Some((ws, marker, client)) = operator_session("finding2_zpad").await else {
        return;
    };
    // An optional extension (`ZPAD`) of 64 MiB after the entries, with a valid checksum: git
    // reads the index as usual.
    let pad = r#"python3 -c '
import hashlib, struct
data = open(".git/index", "rb").read()[:-20]
data += b"ZPAD" + struct.pack(">I", 64 << 20) + bytes(64 << 20)
open(".git/index", "wb").write(data + hashlib.sha1(data).digest())'"#;
    let script = format!(
        "{BENIGN_SUBMODULE} && git -C sub config core.fsmonitor '{}' && git add sub && {pad} && \
         git ls-files -s sub | cut -c1-6",
        marker.command()
    );
    let run = shell(&client, &script).await;
    assert_eq!(
        run.1["stdout"], "160000\n",
        "git reads the padded index: {run:?}"
    );
    assert!(denied(&run), "{run:?}");
    let index = std::fs::metadata(ws.path().join(".git/index")).map_or(0, |m| m.len());
    assert!(
        index < 1 << 20,
        "the padded index reached the host ({index} bytes)"
    );
    assert_no_host_gitlink(ws.path(), "sub");
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

/// The operator's real submodule `lib` (in `.git/modules/lib`), made on the host.
fn operator_submodule(ws: &Path) {
    let src = tempfile::tempdir().unwrap();
    for args in [
        &["init", "-q"][..],
        &[
            "-c",
            "user.email=a@b.invalid",
            "-c",
            "user.name=a",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "l",
        ],
    ] {
        assert!(host_git(src.path(), args).status.success());
    }
    let add = host_git(
        ws,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            src.path().to_str().unwrap(),
            "lib",
        ],
    );
    assert!(add.status.success(), "{add:?}");
    assert!(
        host_git(ws, &["commit", "-q", "-m", "lib"])
            .status
            .success()
    );
    assert!(ws.join(".git/modules/lib/config").is_file());
}

/// Issue 18's finding 3 flooded `.git/modules` until a listing limit dropped the operator's
/// submodule from the view's binds. The operator's gitdir, modules included, is read-only in
/// the view as a whole, and the gitlinked `lib/.git` is bound read-only over itself.
#[cordon_test::test]
async fn finding3_the_operators_submodule_is_never_writable() {
    if skip("finding3", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    operator_submodule(ws.path());
    let marker = Marker::new();
    let client = connect(ws.path()).await;
    let flood = shell(
        &client,
        "mkdir -p .git/modules && cd .git/modules && seq 0 4999 | sed 's/^/d/' | xargs mkdir && \
         ls | wc -l",
    )
    .await;
    assert!(!flood.0, "{flood:?}");
    let write = shell(
        &client,
        &format!(
            "git -C lib config core.fsmonitor '{m}'; printf 'gitdir: ../evil\\n' > lib/.git; \
             mv lib lib2",
            m = marker.command()
        ),
    )
    .await;
    assert!(write.0, "the operator's submodule was writable: {write:?}");
    let config = std::fs::read_to_string(ws.path().join(".git/modules/lib/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("lib/.git")).unwrap(),
        "gitdir: ../.git/modules/lib\n"
    );
    assert!(!ws.path().join(".git/modules/d0").exists());
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding4_a_gitfile_into_the_main_git_dir_never_reaches_the_operators_config() {
    if skip("finding4", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    // What husky sets: a key off any allow-list in the operator's own config.
    assert!(
        host_git(ws.path(), &["config", "core.hooksPath", ".husky"])
            .status
            .success()
    );
    let before = std::fs::read(ws.path().join(".git/config")).unwrap();
    let client = connect(ws.path()).await;
    let run = shell(
        &client,
        "mkdir s && printf 'gitdir: ../.git' > s/.git && \
         git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),s && echo planted",
    )
    .await;
    assert_eq!(run.1["stdout"], "planted\n", "{run:?}");
    assert!(denied(&run), "{run:?}");
    assert_eq!(
        std::fs::read(ws.path().join(".git/config")).unwrap(),
        before
    );
    assert_no_host_gitlink(ws.path(), "s");
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding5_the_operators_edit_during_a_call_is_kept() {
    if skip("finding5", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    assert!(
        host_git(
            ws.path(),
            &["remote", "add", "origin", "https://example.invalid/r.git"]
        )
        .status
        .success()
    );
    let client = connect(ws.path()).await;
    let path = ws.path().to_path_buf();
    let edit = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(800));
        // Lock and rename: a new inode at .git/config, made on the host.
        host_git(&path, &["config", "user.name", "Renamed Operator"])
    });
    let run = shell(&client, "sleep 3; git status --short >/dev/null; echo done").await;
    assert!(edit.join().unwrap().status.success());
    assert!(!run.0, "{run:?}");
    assert_eq!(run.1["stdout"], "done\n", "{run:?}");
    let config = std::fs::read_to_string(ws.path().join(".git/config"))
        .expect("the operator's .git/config is where it was");
    assert!(config.contains("Renamed Operator"), "{config}");
    assert!(
        config.contains("example.invalid"),
        "the remotes went: {config}"
    );
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding6_a_hostile_name_in_git_never_downgrades_cordon() {
    let Some((ws, marker, client)) = operator_session("finding6").await else {
        return;
    };
    let name = "\"$(printf '\\377')$(printf 'a%.0s' $(seq 240))\"";
    let planted = shell(
        &client,
        &format!(
            "mkdir -p .git/modules/{name}/hooks && \
             printf '#!/bin/sh\\n{}\\n' > .git/modules/{name}/hooks/post-checkout && echo ok",
            marker.command()
        ),
    )
    .await;
    assert_eq!(planted.1["stdout"], "ok\n", "{planted:?}");
    assert!(
        !ws.path().join(".git/modules").exists(),
        "the plant reached the operator's gitdir"
    );
    let level = planted.1["enforcement"].clone();
    client.cancel().await.ok();
    // A new server over the same workspace (and shadow) still gets its namespaces.
    let client = connect(ws.path()).await;
    let again = shell(&client, "echo alive").await;
    assert_eq!(again.1["stdout"], "alive\n", "{again:?}");
    assert_eq!(again.1["enforcement"], level, "{again:?}");
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding7_keys_a_deny_list_missed_never_reach_the_host() {
    let Some((ws, marker, client)) = operator_session("finding7").await else {
        return;
    };
    let keys = [
        "remote.origin.uploadpack",
        "remote.origin.receivepack",
        "pager.status",
        "interactive.diffFilter",
        "difftool.x.cmd",
        "mergetool.x.cmd",
        "trailer.x.cmd",
        "core.alternateRefsCommand",
    ];
    let mut script = String::from("set -e; ");
    for (i, key) in keys.iter().enumerate() {
        script.push_str(&format!(
            "git config {key} '{m}'; git init -q s{i}; git -C s{i} -c user.email=a@b.invalid \
             -c user.name=a commit -q --allow-empty -m s; git -C s{i} config {key} '{m}'; \
             git add s{i} 2>/dev/null; ",
            m = marker.command()
        ));
    }
    let run = shell(&client, &script).await;
    assert!(denied(&run), "{run:?}");
    let config = std::fs::read_to_string(ws.path().join(".git/config")).unwrap();
    assert!(!config.contains("pwned"), "{config}");
    for i in 0..keys.len() {
        assert_no_host_gitlink(ws.path(), &format!("s{i}"));
    }
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

/// A plant by a process that outlives its call's check (a background job): the operator's
/// git, run while it is there, reads none of it.
#[cordon_test::test]
async fn a_plant_by_a_process_still_running_never_reaches_the_host() {
    let Some((ws, marker, client)) = operator_session("running_plant").await else {
        return;
    };
    let command = format!(
        "git config core.fsmonitor '{m}'; mkdir -p .git/hooks; \
         printf '#!/bin/sh\\n{m}\\n' > .git/hooks/post-checkout; chmod +x .git/hooks/post-checkout; \
         sleep 20",
        m = marker.command()
    );
    let safe = {
        let call = shell(&client, &command);
        let poll = async {
            tokio::time::sleep(std::time::Duration::from_millis(800)).await;
            let safe = host_status_during(ws.path(), &marker, 10, 100).await;
            let _ = host_git(ws.path(), &["checkout", "-q", "-b", "probe"]);
            safe && !marker.path.exists()
        };
        tokio::pin!(call);
        tokio::select! {
            safe = poll => safe,
            _ = &mut call => panic!("the call ended before the host's git ran"),
        }
    };
    assert!(safe, "the operator's git ran a plant while its call ran");
    client.cancel().await.ok();
}

// Issue 24's git rows: ordinary git work runs unchanged, without reopening the above.

#[cordon_test::test]
async fn git_commit_in_a_call_uses_the_operators_identity() {
    if skip("identity", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join(".gitconfig"),
        "[user]\n\tname = Host Operator\n\temail = host@example.invalid\n[core]\n\tpager = less\n",
    )
    .unwrap();
    assert!(host_git(ws.path(), &["init", "-q"]).status.success());
    let mut cmd = tokio::process::Command::new(cordon());
    cmd.arg("serve")
        .arg("--workspace")
        .arg(ws.path())
        .env("HOME", home.path())
        .env("CORDON_STATE_DIR", state_dir(ws.path()))
        .env("GIT_CONFIG_NOSYSTEM", "1");
    let transport = TokioChildProcess::new(cmd).expect("spawn cordon serve");
    let client: Client = ().serve(transport).await.expect("MCP session starts");
    let run = shell(
        &client,
        "git commit -q --allow-empty -m first && git log -1 --format='%an <%ae> / %cn <%ce>'",
    )
    .await;
    assert!(!run.0, "{run:?}");
    assert_eq!(
        run.1["stdout"],
        "Host Operator <host@example.invalid> / Host Operator <host@example.invalid>\n",
        "{run:?}"
    );
    // The operator's repository has the commit right after the call.
    let log = host_git(ws.path(), &["log", "-1", "--format=%an %s"]);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "Host Operator first\n"
    );
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn git_gc_and_update_server_info_write_info_refs() {
    if skip("gc", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let client = connect(ws.path()).await;
    let run = shell(
        &client,
        "git -c user.email=a@b.invalid -c user.name=a commit -q --allow-empty -m more && \
         git gc -q 2>&1 && git update-server-info && test -f .git/info/refs && echo ok",
    )
    .await;
    assert!(!run.0, "{run:?}");
    assert_eq!(run.1["stdout"], "ok\n", "{run:?}");
    // Packed refs in the shadow are read like loose ones: the commit reached the host.
    let log = host_git(ws.path(), &["log", "-1", "--format=%s"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout), "more\n");
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn git_worktree_add_works_in_the_sandbox() {
    if skip("worktree", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let client = connect(ws.path()).await;
    let add = shell(&client, "git worktree add -q wt && echo added").await;
    assert!(!add.0, "{add:?}");
    assert_eq!(add.1["stdout"], "added\n", "{add:?}");
    let next = shell(
        &client,
        "git -C wt log -1 --format=%s && git worktree list | wc -l",
    )
    .await;
    assert!(!next.0, "{next:?}");
    assert_eq!(next.1["stdout"], "start\n2\n", "{next:?}");
    // The worktree's branch is the operator's too; its gitdir stays in the shadow (the
    // operator's gitdir gets no `worktrees/` from a call).
    assert!(
        host_git(ws.path(), &["rev-parse", "--verify", "wt"])
            .status
            .success()
    );
    assert!(!ws.path().join(".git/worktrees").exists());
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn git_config_of_the_repositorys_own_keys_works_in_the_shadow() {
    if skip("config_shadow", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    assert!(
        host_git(ws.path(), &["config", "core.hooksPath", ".husky"])
            .status
            .success()
    );
    let before = std::fs::read(ws.path().join(".git/config")).unwrap();
    let marker = Marker::new();
    let client = connect(ws.path()).await;
    let ordinary = shell(
        &client,
        "git config user.email agent@example.invalid && \
         git remote add origin https://example.invalid/r.git && \
         git config branch.master.remote origin && git config branch.master.merge refs/heads/master && \
         mkdir -p src && git sparse-checkout set src && git config user.email && \
         git config core.hooksPath",
    )
    .await;
    assert!(!ordinary.0, "{ordinary:?}");
    assert_eq!(
        ordinary.1["stdout"], "agent@example.invalid\n.husky\n",
        "the shadow starts from the operator's config: {ordinary:?}"
    );
    let hostile = shell(
        &client,
        &format!(
            "git config core.fsmonitor '{}' && sleep 1 && git config --get core.fsmonitor",
            marker.command()
        ),
    )
    .await;
    assert_eq!(
        hostile.1["stdout"],
        format!("{}\n", marker.command()),
        "{hostile:?}"
    );
    let next = shell(&client, "git config remote.origin.url").await;
    assert_eq!(
        next.1["stdout"], "https://example.invalid/r.git\n",
        "{next:?}"
    );
    assert_eq!(
        std::fs::read(ws.path().join(".git/config")).unwrap(),
        before,
        "the operator's config changed"
    );
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn git_submodule_add_is_refused_at_import_and_never_reaches_the_host() {
    if skip("submodule_add", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let client = connect(ws.path()).await;
    let add = shell(
        &client,
        "git init -q libsrc && git -C libsrc -c user.email=a@b.invalid -c user.name=a commit -q \
         --allow-empty -m lib && git -c protocol.file.allow=always submodule add -q ./libsrc lib \
         && git submodule status | wc -l",
    )
    .await;
    assert_eq!(
        add.1["stdout"], "1\n",
        "submodule add works confined: {add:?}"
    );
    assert!(denied(&add), "{add:?}");
    let next = shell(&client, "git -C lib log -1 --format=%s").await;
    assert_eq!(next.1["stdout"], "lib\n", "{next:?}");
    assert_no_host_gitlink(ws.path(), "lib");
    assert!(!ws.path().join(".git/modules").exists());
    client.cancel().await.ok();
}

/// A code_interpreter cell can write what git reads as well as a shell command can; it lands
/// in the shadow, and the operator's git reads none of it.
#[cordon_test::test]
async fn a_cell_that_plants_git_config_never_reaches_the_host() {
    if skip("cell_git_plant", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let before = std::fs::read(ws.path().join(".git/config")).unwrap();
    let client = connect(ws.path()).await;
    let Value::Object(arguments) = json!({
        "code": "open('.git/config', 'a').write('[core]\\n\\tfsmonitor = touch pwned\\n')",
    }) else {
        unreachable!()
    };
    let result: CallToolResult = client
        .call_tool(CallToolRequestParams::new("code_interpreter").with_arguments(arguments))
        .await
        .expect("code_interpreter answers");
    assert!(!result.is_error.unwrap_or(false), "{result:?}");
    assert_eq!(
        std::fs::read(ws.path().join(".git/config")).unwrap(),
        before
    );
    let status = host_git(ws.path(), &["status", "--short"]);
    assert!(status.status.success(), "{status:?}");
    assert!(
        !ws.path().join("pwned").exists(),
        "the operator's git ran the plant"
    );
    client.cancel().await.ok();
}

/// Issue 29: while a job runs, what its git writes is imported within moments (the operator
/// sees its commit before it ends), and a change the import refuses ends the job then, not at
/// its end; the operator's repository keeps no trace of the refused change.
#[cordon_test::test]
async fn a_running_jobs_commits_reach_the_operator_and_a_refused_change_ends_it() {
    if skip(
        "a_running_jobs_commits_reach_the_operator",
        Need::Namespaces,
    ) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let client = connect(ws.path()).await;
    let id = background(
        &client,
        "git commit -q --allow-empty -m from-the-job && sleep 120",
    )
    .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let log = host_git(ws.path(), &["log", "--format=%s", "-1"]);
        if String::from_utf8_lossy(&log.stdout).trim() == "from-the-job" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the running job's commit never reached the operator: {log:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let job = |id: &str| {
        let Value::Object(arguments) = json!({ "id": id }) else {
            unreachable!()
        };
        let client = &client;
        async move {
            let result: CallToolResult = client
                .call_tool(CallToolRequestParams::new("job").with_arguments(arguments))
                .await
                .expect("job answers");
            result.structured_content.expect("structured content")
        }
    };
    assert_eq!(job(&id).await["job"]["state"], "running", "still running");

    let planter = background(
        &client,
        "git replace $(git rev-parse HEAD) $(git commit-tree -m x $(git rev-parse HEAD^{tree})) \
         && sleep 120",
    )
    .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let ended = loop {
        let read = job(&planter).await;
        if read["job"]["state"] != "running" {
            break read;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a job whose git change was refused kept running: {read}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(ended.to_string().contains("refused"), "{ended}");
    // Which job made the change cannot be told: every job running while it stands ends.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while job(&id).await["job"]["state"] == "running" {
        assert!(
            std::time::Instant::now() < deadline,
            "the other job kept running while a refused change stood"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let refs = host_git(ws.path(), &["for-each-ref", "--format=%(refname)"]);
    assert!(
        !String::from_utf8_lossy(&refs.stdout).contains("refs/replace"),
        "{refs:?}"
    );
    client.cancel().await.ok();
}

// ---------------------------------------------------------------------------------------
// Issue 29: repositories below the root, made by a call or a job, or the operator's own.
// ---------------------------------------------------------------------------------------

/// The subject of the last commit the operator's git shows in `dir` (empty when none).
fn host_subject(dir: &Path) -> String {
    let log = host_git(dir, &["log", "-1", "--format=%s"]);
    String::from_utf8_lossy(&log.stdout).trim_end().to_owned()
}

/// One `job` read: its structured answer.
async fn job_read(client: &Client, id: &str) -> Value {
    let Value::Object(arguments) = json!({ "id": id }) else {
        unreachable!()
    };
    let result: CallToolResult = client
        .call_tool(CallToolRequestParams::new("job").with_arguments(arguments))
        .await
        .expect("job answers");
    result.structured_content.expect("structured content")
}

/// Waits (at most 20 s) for job `id` to end; its last read.
async fn ended(client: &Client, id: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let read = job_read(client, id).await;
        if read["job"]["state"] != "running" {
            return read;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} kept running: {read}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The operator's `git status` and `git commit` inside `dir` run nothing planted.
fn assert_host_git_in_is_safe(dir: &Path, marker: &Marker) {
    let _ = host_git(dir, &["status"]);
    let _ = host_commit(dir, "operator");
    assert!(
        !marker.path.exists(),
        "the operator's git in `{}` ran a planted command",
        dir.display()
    );
}

/// A repository a call makes in a subdirectory, with a `core.fsmonitor` and a `pre-commit`
/// hook: from the end of that call the operator's `sub/.git` is one cordon made, holding the
/// agent's commits and nothing of its config; git in the sandbox keeps working on it (its
/// own config included, in the shadow) and later commits reach the host too.
#[cordon_test::test]
async fn a_repository_a_call_makes_below_the_root_reaches_the_host_as_data_only() {
    let Some((ws, marker, client)) = operator_session("nested_call_repository").await else {
        return;
    };
    let hook = Marker::new();
    let run = shell(
        &client,
        &format!(
            "git init -q sub && cd sub && git config core.fsmonitor '{}' && \
             printf '#!/bin/sh\\n{}\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit \
             && echo one > f && git -c core.fsmonitor=false add f && \
             git -c core.fsmonitor=false -c core.hooksPath=/dev/null -c user.email=a@b.invalid \
             -c user.name=agent commit -qm 'agent sub commit' && echo made",
            marker.command(),
            hook.command()
        ),
    )
    .await;
    assert_eq!(run.1["stdout"], "made\n", "{run:?}");
    let sub = ws.path().join("sub");
    assert_eq!(host_subject(&sub), "agent sub commit");
    let config = std::fs::read_to_string(sub.join(".git/config")).unwrap_or_default();
    assert!(!config.contains("fsmonitor"), "{config}");
    assert!(!sub.join(".git/hooks/pre-commit").exists());
    assert_host_git_in_is_safe(&sub, &marker);
    assert!(!hook.path.exists(), "the operator's commit ran the hook");
    // In the sandbox it is the agent's repository still, config and all.
    let again = shell(
        &client,
        "cd sub && git config core.fsmonitor >/dev/null && echo two > f && \
         git -c core.fsmonitor=false -c core.hooksPath=/dev/null -c user.email=a@b.invalid \
         -c user.name=agent commit -qam 'second' && git -c core.fsmonitor=false log --format=%s | head -3",
    )
    .await;
    assert!(!again.0, "{again:?}");
    assert!(
        again.1["stdout"].as_str().unwrap().contains("operator"),
        "the operator's commit reached the sandbox's repository: {again:?}"
    );
    assert_eq!(host_subject(&sub), "second");
    // A plant written later, by a call, still never reaches the operator's gitdir.
    let plant = shell(
        &client,
        &format!("git -C sub config core.fsmonitor '{}'; printf '[core]\\n\\tfsmonitor = {}\\n' >> sub/.git/config; echo done", marker.command(), marker.command()),
    )
    .await;
    assert_eq!(plant.1["stdout"], "done\n", "{plant:?}");
    assert_host_git_in_is_safe(&sub, &marker);
    client.cancel().await.ok();
    assert_host_git_in_is_safe(&sub, &marker);
}

/// Finding 3's nested repository, made and re-planted by a job: the job is ended (a
/// repository made while a job runs cannot be moved from under it), its end gives the
/// repository a shadow, and from then on the operator's git there runs nothing.
#[cordon_test::test]
async fn a_job_that_makes_and_replants_a_repository_below_the_root_is_ended() {
    let Some((ws, marker, client)) = operator_session("nested_job_repository").await else {
        return;
    };
    let id = background(
        &client,
        &format!(
            "git init -q sub && while :; do git -C sub config core.fsmonitor '{m}'; \
             sleep 0.02; done",
            m = marker.command()
        ),
    )
    .await;
    let read = ended(&client, &id).await;
    assert!(
        read.to_string()
            .contains("was made at `sub` while this job ran"),
        "{read}"
    );
    let sub = ws.path().join("sub");
    assert_host_git_in_is_safe(&sub, &marker);
    let config = std::fs::read_to_string(sub.join(".git/config")).unwrap_or_default();
    assert!(!config.contains("fsmonitor"), "{config}");
    // The agent's repository is in the shadow, as the job left it.
    let run = shell(&client, "git -C sub config core.fsmonitor").await;
    assert_eq!(
        run.1["stdout"],
        format!("{}\n", marker.command()),
        "{run:?}"
    );
    client.cancel().await.ok();
    assert_host_git_in_is_safe(&sub, &marker);
}

/// A job started before a call made a repository below the root has a view without that
/// repository's shadow (it could write the operator's new gitdir there): it is ended.
#[cordon_test::test]
async fn a_job_whose_view_predates_a_new_repository_is_ended() {
    let Some((ws, marker, client)) = operator_session("nested_stale_job").await else {
        return;
    };
    let id = background(&client, "sleep 120").await;
    let run = shell(&client, "git init -q lib && echo made").await;
    assert_eq!(run.1["stdout"], "made\n", "{run:?}");
    let read = ended(&client, &id).await;
    assert!(
        read.to_string()
            .contains("was given a shadow gitdir after this job started"),
        "{read}"
    );
    assert_host_git_in_is_safe(&ws.path().join("lib"), &marker);
    client.cancel().await.ok();
}

/// A nested repository the operator already has (not a gitlink: git's status shows it as an
/// untracked directory) is the operator's: a call's writes to its config land in a shadow.
#[cordon_test::test]
async fn the_operators_nested_repository_is_never_writable() {
    if skip("operators_nested_repository", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let vendor = ws.path().join("vendor/lib");
    std::fs::create_dir_all(&vendor).unwrap();
    operator_repo(&vendor);
    let before = std::fs::read(vendor.join(".git/config")).unwrap();
    let marker = Marker::new();
    let client = connect(ws.path()).await;
    let run = shell(
        &client,
        &format!(
            "git -C vendor/lib config core.fsmonitor '{m}'; \
             printf '[core]\\n\\tfsmonitor = {m}\\n' >> vendor/lib/.git/config; \
             git -C vendor/lib -c user.email=a@b.invalid -c user.name=agent \
             -c core.fsmonitor=false commit -q --allow-empty -m 'agent in vendor' && echo done",
            m = marker.command()
        ),
    )
    .await;
    assert_eq!(run.1["stdout"], "done\n", "{run:?}");
    assert_eq!(std::fs::read(vendor.join(".git/config")).unwrap(), before);
    assert_eq!(host_subject(&vendor), "agent in vendor");
    assert_host_git_in_is_safe(&vendor, &marker);
    client.cancel().await.ok();
}

/// A gitfile a call writes below the root that names a gitdir elsewhere in the workspace
/// (the operator's git would read that directory's config) is refused and removed.
#[cordon_test::test]
async fn a_gitfile_naming_a_gitdir_of_the_calls_is_refused_and_removed() {
    let Some((ws, marker, client)) = operator_session("nested_gitfile").await else {
        return;
    };
    let run = shell(
        &client,
        &format!(
            "mkdir -p a && git init -q --bare evil.git && git -C evil.git config core.fsmonitor \
             '{}' && echo 'gitdir: ../evil.git' > a/.git && echo written",
            marker.command()
        ),
    )
    .await;
    assert!(denied(&run), "{run:?}");
    assert!(
        run.1.to_string().contains("named the gitdir `../evil.git`"),
        "{run:?}"
    );
    assert!(!ws.path().join("a/.git").exists());
    assert_host_git_in_is_safe(&ws.path().join("a"), &marker);
    client.cancel().await.ok();
}

/// A bare repository a call makes (a remote to push to): the operator's push into it runs
/// none of its hooks or config, and it holds what the agent pushed.
#[cordon_test::test]
async fn a_bare_repository_a_call_makes_runs_nothing_when_the_operator_pushes_to_it() {
    let Some((ws, marker, client)) = operator_session("nested_bare_repository").await else {
        return;
    };
    let run = shell(
        &client,
        &format!(
            "git init -q --bare remote.git && \
             printf '#!/bin/sh\\n{m} 2>/dev/null\\nexit 0\\n' > remote.git/hooks/post-receive && \
             chmod +x remote.git/hooks/post-receive && \
             mkdir -p hooks2 && cp remote.git/hooks/post-receive hooks2/pre-receive && \
             git -C remote.git config core.hooksPath \"$PWD/hooks2\" && \
             git push -q ./remote.git HEAD:refs/heads/main && echo pushed",
            m = marker.command()
        ),
    )
    .await;
    assert_eq!(run.1["stdout"], "pushed\n", "{run:?}");
    let remote = ws.path().join("remote.git");
    let log = host_git(&remote, &["log", "-1", "--format=%s", "main"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout), "start\n", "{log:?}");
    let push = host_commit(ws.path(), "operator");
    assert!(push.status.success(), "{push:?}");
    let push = host_git(
        ws.path(),
        &["push", "-q", "./remote.git", "HEAD:refs/heads/op"],
    );
    assert!(push.status.success(), "{push:?}");
    assert!(
        !marker.path.exists(),
        "the operator's push ran the bare repository's hook"
    );
    let config = std::fs::read_to_string(remote.join("config")).unwrap_or_default();
    assert!(!config.contains("hooksPath"), "{config}");
    // The agent keeps using it as a remote.
    let again = shell(
        &client,
        "git -c user.email=a@b.invalid -c user.name=agent commit -q --allow-empty -m again && \
         git push -q ./remote.git HEAD:refs/heads/main && echo pushed",
    )
    .await;
    assert_eq!(again.1["stdout"], "pushed\n", "{again:?}");
    let log = host_git(&remote, &["log", "-1", "--format=%s", "main"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout), "again\n", "{log:?}");
    client.cancel().await.ok();
}

/// A worktree's gitfile a call made is accepted (it leads into the root's gitdir); rewritten
/// in place by a later call to lead elsewhere, it is refused and removed.
#[cordon_test::test]
async fn a_worktree_gitfile_rewritten_by_a_later_call_is_refused() {
    let Some((ws, marker, client)) = operator_session("nested_gitfile_rewrite").await else {
        return;
    };
    let run = shell(&client, "git worktree add -q wt && echo added").await;
    assert_eq!(run.1["stdout"], "added\n", "{run:?}");
    assert!(!run.0, "{run:?}");
    let run = shell(
        &client,
        &format!(
            "mkdir -p evil/objects evil/refs && echo 'ref: refs/heads/x' > evil/HEAD && \
             printf '[core]\\n\\tfsmonitor = {}\\n' > evil/config && \
             echo \"gitdir: $PWD/evil\" > wt/.git && echo rewritten",
            marker.command()
        ),
    )
    .await;
    assert!(denied(&run), "{run:?}");
    assert!(!ws.path().join("wt/.git").exists());
    assert_host_git_in_is_safe(&ws.path().join("wt"), &marker);
    assert_host_git_in_is_safe(&ws.path().join("evil"), &marker);
    client.cancel().await.ok();
}

/// The operator's own worktree inside the workspace (a gitfile no gitlink records) is bound
/// read-only: a call cannot point it elsewhere.
#[cordon_test::test]
async fn the_operators_worktree_gitfile_is_never_writable() {
    if skip("operators_worktree_gitfile", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let out = host_git(ws.path(), &["worktree", "add", "-q", "wt"]);
    assert!(out.status.success(), "{out:?}");
    let before = std::fs::read(ws.path().join("wt/.git")).unwrap();
    let client = connect(ws.path()).await;
    let run = shell(
        &client,
        "echo 'gitdir: ../elsewhere' > wt/.git; rm -f wt/.git; mv wt wt2; cat wt/.git >/dev/null && echo kept",
    )
    .await;
    assert_eq!(run.1["stdout"], "kept\n", "{run:?}");
    assert_eq!(std::fs::read(ws.path().join("wt/.git")).unwrap(), before);
    client.cancel().await.ok();
}

/// A job of an older view keeps writing where a call's repository was moved out (its view
/// does not bind the new shadow): nothing is imported there while it runs, it is ended, and
/// what it wrote is cleared before cordon makes the operator's repository there.
#[cordon_test::test]
async fn what_a_job_of_an_older_view_writes_into_an_adopted_repository_is_cleared() {
    let Some((ws, marker, client)) = operator_session("nested_stale_writer").await else {
        return;
    };
    let id = background(
        &client,
        &format!(
            "while :; do if [ -d lib/.git ] && [ ! -e lib/.git/description ]; then \
             mkdir -p lib/.git/objects lib/.git/refs; echo 'ref: refs/heads/main' > lib/.git/HEAD; \
             printf '[core]\\n\\tfsmonitor = {}\\n' > lib/.git/config; fi; sleep 0.02; done",
            marker.command()
        ),
    )
    .await;
    let run = shell(
        &client,
        "git init -q lib && git -C lib -c user.email=a@b.invalid -c user.name=agent commit -q \
         --allow-empty -m 'agent lib commit' && echo made",
    )
    .await;
    assert_eq!(run.1["stdout"], "made\n", "{run:?}");
    let read = ended(&client, &id).await;
    assert!(
        read.to_string()
            .contains("was given a shadow gitdir after this job started"),
        "{read}"
    );
    // The next call's end imports, once no process of the older view runs.
    let run = shell(&client, "echo next").await;
    assert_eq!(run.1["stdout"], "next\n", "{run:?}");
    let lib = ws.path().join("lib");
    let config = std::fs::read_to_string(lib.join(".git/config")).unwrap_or_default();
    assert!(!config.contains("fsmonitor"), "{config}");
    assert_eq!(host_subject(&lib), "agent lib commit");
    assert_host_git_in_is_safe(&lib, &marker);
    client.cancel().await.ok();
}

/// The operator's index follows the agent's, entry by entry, across calls: a changed file, a
/// removal, a mode change and a file staged but not committed show in the operator's `git
/// status` exactly as in the sandbox's, and the untouched entries keep their stat data.
#[cordon_test::test]
async fn the_operators_index_follows_what_the_agent_staged() {
    if skip("operators_index_follows", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    for (name, text) in [
        ("keep", "1\n"),
        ("gone", "2\n"),
        ("mode.sh", "echo\n"),
        ("same", "3\n"),
    ] {
        std::fs::write(ws.path().join(name), text).unwrap();
    }
    assert!(host_git(ws.path(), &["add", "-A"]).status.success());
    assert!(
        host_git(ws.path(), &["commit", "-qm", "files"])
            .status
            .success()
    );
    let client = connect(ws.path()).await;
    let run = shell(
        &client,
        "echo changed > keep && git rm -q gone && chmod +x mode.sh && git add -A && \
         git -c user.email=a@b.invalid -c user.name=agent commit -qm agent1 && \
         echo staged > new && git add new && git status --porcelain",
    )
    .await;
    assert_eq!(run.1["stdout"], "A  new\n", "{run:?}");
    let status = host_git(ws.path(), &["status", "--porcelain"]);
    assert_eq!(
        String::from_utf8_lossy(&status.stdout),
        "A  new\n",
        "{status:?}"
    );
    let mode = host_git(ws.path(), &["ls-files", "-s", "mode.sh"]);
    assert!(
        String::from_utf8_lossy(&mode.stdout).starts_with("100755"),
        "{mode:?}"
    );
    let gone = host_git(ws.path(), &["ls-files", "gone"]);
    assert!(gone.stdout.is_empty(), "{gone:?}");
    let run = shell(
        &client,
        "git -c user.email=a@b.invalid -c user.name=agent commit -qm agent2 && echo ok",
    )
    .await;
    assert_eq!(run.1["stdout"], "ok\n", "{run:?}");
    let status = host_git(ws.path(), &["status", "--porcelain"]);
    assert_eq!(String::from_utf8_lossy(&status.stdout), "", "{status:?}");
    let log = host_git(ws.path(), &["log", "--format=%s", "-2"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout), "agent2\nagent1\n");
    let fsck = host_git(ws.path(), &["fsck", "--no-progress"]);
    assert!(fsck.status.success(), "{fsck:?}");
    client.cancel().await.ok();
}

/// A repository made in a directory whose name is not UTF-8 gets its shadow like any other
/// (the paths travel to the sandbox init as bytes): the agent keeps working in it and the
/// operator sees its commit.
#[cordon_test::test]
async fn a_repository_in_a_directory_whose_name_is_not_utf8_gets_a_shadow() {
    let Some((ws, marker, client)) = operator_session("nested_non_utf8").await else {
        return;
    };
    let run = shell(
        &client,
        &format!(
            "d=$(printf 'lib-\\377') && git init -q \"$d\" && git -C \"$d\" config core.fsmonitor '{}' \
             && git -C \"$d\" -c core.fsmonitor=false -c user.email=a@b.invalid -c user.name=a \
             commit -q --allow-empty -m odd && echo made",
            marker.command()
        ),
    )
    .await;
    assert_eq!(run.1["stdout"], "made\n", "{run:?}");
    assert!(!run.0, "{run:?}");
    let dir = ws
        .path()
        .join(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"lib-\xff"));
    assert_eq!(host_subject(&dir), "odd");
    assert_host_git_in_is_safe(&dir, &marker);
    let again = shell(
        &client,
        "d=$(printf 'lib-\\377') && git -C \"$d\" -c core.fsmonitor=false -c user.email=a@b.invalid \
         -c user.name=a commit -q --allow-empty -m again && echo ok",
    )
    .await;
    assert_eq!(again.1["stdout"], "ok\n", "{again:?}");
    assert_eq!(host_subject(&dir), "again");
    client.cancel().await.ok();
}

/// Past 256 repositories with shadows of their own, a repository a call makes is moved out of
/// the workspace and the call is refused (each shadow is binds in every view and an import
/// after every call).
#[cordon_test::test]
async fn repositories_past_the_limit_are_moved_out_and_refused() {
    let Some((ws, _marker, client)) = operator_session("nested_limit").await else {
        return;
    };
    let run = shell(
        &client,
        "for i in $(seq 1 257); do mkdir -p r$i/.git; done; echo made",
    )
    .await;
    assert_eq!(run.1["stdout"], "made\n", "{run:?}");
    assert!(denied(&run), "{run:?}");
    assert!(
        run.1
            .to_string()
            .contains("already has 256 git repositories"),
        "{run:?}"
    );
    let left = (1..=257)
        .filter(|i| ws.path().join(format!("r{i}/.git")).exists())
        .count();
    assert_eq!(left, 256, "one `.git` set aside, 256 kept as mount points");
    let next = shell(&client, "echo still-works").await;
    assert_eq!(next.1["stdout"], "still-works\n", "{next:?}");
    client.cancel().await.ok();
}
