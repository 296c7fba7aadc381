//! Git protection against the adversarial findings of issue 18 (1–7): each scenario runs
//! real git inside a long-lived `cordon serve` (one view across calls, as an agent sees it),
//! then checks what the operator's own git on the host would do afterwards: a planted
//! configuration is quarantined or refused, the call's result is a `denied` error, the
//! operator's files stay where they are, and `git status` on the host runs nothing planted.
//!
//! Each scenario is its own server process with its own workspace.

use crate::common::{CORDON, Need, skip};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

type Client = RunningService<RoleClient, ()>;

async fn connect(workspace: &Path) -> Client {
    let mut cmd = tokio::process::Command::new(CORDON);
    cmd.arg("serve").arg("--workspace").arg(workspace);
    let transport = TokioChildProcess::new(cmd).expect("spawn cordon serve");
    ().serve(transport)
        .await
        .expect("MCP session with cordon starts")
}

/// One `shell_exec` call: (isError, structured content).
async fn shell(client: &Client, command: &str) -> (bool, Value) {
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

fn denied(out: &(bool, Value)) -> bool {
    out.0 && out.1["error"]["kind"] == "denied"
}

/// git on the host, as the operator runs it: no global or system config of this machine.
fn host_git(ws: &Path, args: &[&str]) -> std::process::Output {
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
fn operator_repo(ws: &Path) {
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

fn quarantined(ws: &Path) -> Vec<String> {
    std::fs::read_dir(ws.join(".cordon/quarantine"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `git init sub` with one commit, recorded in the index as a gitlink (benign config).
const BENIGN_SUBMODULE: &str = "git init -q sub && git -C sub -c user.email=a@b.invalid \
    -c user.name=a commit -q --allow-empty -m s && git add sub 2>/dev/null";

#[cordon_test::test]
async fn finding1_submodule_config_changed_in_a_later_call_is_quarantined() {
    let Some((ws, marker, client)) = operator_session("finding1").await else {
        return;
    };
    let first = shell(&client, BENIGN_SUBMODULE).await;
    assert!(!first.0, "a benign submodule is accepted: {first:?}");
    // Seconds later, in a call that does not touch the index.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let second = shell(
        &client,
        &format!("git -C sub config core.fsmonitor '{}'", marker.command()),
    )
    .await;
    assert!(denied(&second), "{second:?}");
    let config = std::fs::read_to_string(ws.path().join("sub/.git/config")).unwrap_or_default();
    assert!(!config.contains("fsmonitor"), "{config}");
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding2_configs_cordon_cannot_read_are_quarantined_not_skipped() {
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
        let config = std::fs::read(ws.path().join(dir).join(".git/config")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&config).contains("fsmonitor"),
            "{dir}'s config survived: {run:?}"
        );
    }
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding2_a_submodule_gitdir_outside_the_workspace_is_refused() {
    let Some((ws, marker, client)) = operator_session("finding2_outside").await else {
        return;
    };
    // Where the calls' TMPDIR root is writable, a real repository there; either way the
    // gitfile names a gitdir outside the workspace, which cordon cannot vouch for.
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
    assert!(
        !ws.path().join("out/.git").exists(),
        "the gitfile pointing outside survived: {run:?}"
    );
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding2_an_index_padded_past_64_mib_is_still_read() {
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
    assert!(std::fs::metadata(ws.path().join(".git/index")).map_or(true, |m| m.len() > 64 << 20));
    assert!(denied(&run), "{run:?}");
    let config = std::fs::read_to_string(ws.path().join("sub/.git/config")).unwrap_or_default();
    assert!(!config.contains("fsmonitor"), "{run:?}");
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

#[cordon_test::test]
async fn finding3_thousands_of_module_directories_do_not_unprotect_a_real_submodule() {
    if skip("finding3", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    operator_submodule(ws.path());
    let marker = Marker::new();
    let client = connect(ws.path()).await;
    // Directories are added until the operator's `lib` is listed (readdir order) past the
    // first 4,096 entries, where a listing limit used to drop it from the view's binds.
    let flood = shell(
        &client,
        "cd .git/modules && i=0 && at() { ls -U | grep -n -x lib | cut -d: -f1; } && \
         while [ \"$(at)\" -le 4200 ] && [ $i -lt 40000 ]; do \
         seq $i $((i + 999)) | sed 's/^/d/' | xargs mkdir; i=$((i + 1000)); done; at",
    )
    .await;
    let position: usize = flood.1["stdout"]
        .as_str()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        position > 4096,
        "lib stayed early in the listing: {flood:?}"
    );
    let write = shell(
        &client,
        &format!("git -C lib config core.fsmonitor '{}'", marker.command()),
    )
    .await;
    assert!(
        write.0,
        "the operator's submodule config was writable: {write:?}"
    );
    let config = std::fs::read_to_string(ws.path().join(".git/modules/lib/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding4_a_gitfile_into_the_main_git_dir_never_moves_the_operators_config() {
    if skip("finding4", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    // What husky sets: a key off the allow-list in the operator's own config.
    assert!(
        host_git(ws.path(), &["config", "core.hooksPath", ".husky"])
            .status
            .success()
    );
    let client = connect(ws.path()).await;
    let run = shell(
        &client,
        "mkdir s && printf 'gitdir: ../.git' > s/.git && \
         git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),s && echo planted",
    )
    .await;
    assert_eq!(run.1["stdout"], "planted\n", "{run:?}");
    assert!(denied(&run), "{run:?}");
    let config = std::fs::read_to_string(ws.path().join(".git/config"))
        .expect("the operator's .git/config is where it was");
    assert!(config.contains("hooksPath"), "{config}");
    assert!(
        !ws.path().join("s/.git").exists(),
        "the gitfile stayed: {run:?}"
    );
    assert!(
        quarantined(ws.path())
            .iter()
            .all(|n| !n.ends_with(".git_config")),
        "{:?}",
        quarantined(ws.path())
    );
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding5_the_operators_edit_during_a_call_is_never_quarantined() {
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
    let run = shell(&client, "sleep 3; echo done").await;
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
    assert!(
        quarantined(ws.path()).is_empty(),
        "{:?}",
        quarantined(ws.path())
    );
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding6_a_hostile_name_is_protected_and_never_downgrades_cordon() {
    let Some((ws, marker, client)) = operator_session("finding6").await else {
        return;
    };
    let name = "\"$(printf '\\377')$(printf 'a%.0s' $(seq 240))\"";
    let planted = shell(
        &client,
        &format!(
            "mkdir -p .git/modules/{name}/hooks .git/modules/{name}x/hooks && \
             printf '#!/bin/sh\\n{}\\n' > .git/modules/{name}/hooks/post-checkout && echo ok",
            marker.command()
        ),
    )
    .await;
    assert_eq!(planted.1["stdout"], "ok\n", "{planted:?}");
    assert!(
        denied(&planted),
        "the planted hook was not refused: {planted:?}"
    );
    let modules = ws.path().join(".git/modules");
    let hooks: Vec<_> = std::fs::read_dir(&modules)
        .unwrap()
        .map(|e| e.unwrap().path().join("hooks/post-checkout"))
        .collect();
    assert!(hooks.iter().all(|h| !h.exists()), "{planted:?}");
    // The other (empty) hooks directory stays, and the next view binds it read-only: the
    // plan carries its non-UTF-8 name.
    let next = shell(
        &client,
        &format!("printf x > .git/modules/{name}x/hooks/pre-commit"),
    )
    .await;
    assert!(
        next.0,
        "a hook could be written into the bound directory: {next:?}"
    );
    let level = planted.1["enforcement"].clone();
    assert_eq!(next.1["enforcement"], level, "{next:?}");
    client.cancel().await.ok();
    // A new server over the same workspace still gets its namespaces.
    let client = connect(ws.path()).await;
    let again = shell(&client, "echo alive").await;
    assert_eq!(again.1["stdout"], "alive\n", "{again:?}");
    assert_eq!(again.1["enforcement"], level, "{again:?}");
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn finding7_keys_a_deny_list_missed_are_refused() {
    if skip("finding7", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let client = connect(ws.path()).await;
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
            "git init -q s{i}; git -C s{i} -c user.email=a@b.invalid -c user.name=a commit -q \
             --allow-empty -m s; git -C s{i} config {key} 'touch pwned'; git add s{i} 2>/dev/null; "
        ));
    }
    let run = shell(&client, &script).await;
    assert!(denied(&run), "{run:?}");
    for (i, key) in keys.iter().enumerate() {
        let config = std::fs::read_to_string(ws.path().join(format!("s{i}/.git/config")))
            .unwrap_or_default();
        assert!(!config.contains("touch pwned"), "{key} survived: {run:?}");
    }
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn a_plant_by_a_process_still_running_is_caught_before_the_call_ends() {
    let Some((ws, marker, client)) = operator_session("timer").await else {
        return;
    };
    let first = shell(&client, BENIGN_SUBMODULE).await;
    assert!(!first.0, "{first:?}");
    let started = std::time::Instant::now();
    let command = format!(
        "sleep 1; git -C sub config core.fsmonitor '{}'; sleep 20",
        marker.command()
    );
    let result = {
        let call = shell(&client, &command);
        // Poll from the host while the call still runs (it sleeps 20 s after the plant): the
        // config must be in quarantine before the call ends.
        let poll = async {
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                let moved = quarantined(ws.path())
                    .iter()
                    .any(|n| n.ends_with("sub_.git_config"));
                if moved || started.elapsed() > std::time::Duration::from_secs(18) {
                    return moved;
                }
            }
        };
        tokio::pin!(call);
        let moved = tokio::select! {
            moved = poll => moved,
            _ = &mut call => panic!("the call ended before the poll saw anything"),
        };
        assert!(moved, "the planted config stayed while its call ran");
        call.await
    };
    assert!(denied(&result), "{result:?}");
    assert_host_status_is_safe(ws.path(), &marker);
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
    let mut cmd = tokio::process::Command::new(CORDON);
    cmd.arg("serve")
        .arg("--workspace")
        .arg(ws.path())
        .env("HOME", home.path())
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
        "git gc -q 2>&1 && git update-server-info && test -f .git/info/refs && echo ok",
    )
    .await;
    assert!(!run.0, "{run:?}");
    assert_eq!(run.1["stdout"], "ok\n", "{run:?}");
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn git_worktree_add_works_and_is_not_quarantined() {
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
    assert!(
        quarantined(ws.path()).is_empty(),
        "{:?}",
        quarantined(ws.path())
    );
    // The operator's git reads the new worktree too.
    let host = host_git(
        &ws.path().join("wt"),
        &["rev-parse", "--is-inside-work-tree"],
    );
    assert_eq!(
        String::from_utf8_lossy(&host.stdout).trim(),
        "true",
        "{host:?}"
    );
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn git_config_writes_that_run_nothing_work_and_others_are_undone() {
    if skip("config_vetted", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    assert!(
        host_git(ws.path(), &["config", "core.hooksPath", ".husky"])
            .status
            .success()
    );
    let marker = Marker::new();
    let client = connect(ws.path()).await;
    let ordinary = shell(
        &client,
        "git config user.email agent@example.invalid && \
         git remote add origin https://example.invalid/r.git && \
         git config branch.master.remote origin && git config branch.master.merge refs/heads/master && \
         mkdir -p src && git sparse-checkout set src && git config user.email",
    )
    .await;
    assert!(!ordinary.0, "{ordinary:?}");
    assert_eq!(
        ordinary.1["stdout"], "agent@example.invalid\n",
        "{ordinary:?}"
    );
    let config = std::fs::read_to_string(ws.path().join(".git/config")).unwrap();
    assert!(config.contains("example.invalid/r.git"), "{config}");
    assert!(
        config.contains(".husky"),
        "the operator's key went: {config}"
    );
    let hostile = shell(
        &client,
        &format!(
            "git config core.fsmonitor '{}' && echo written",
            marker.command()
        ),
    )
    .await;
    assert_eq!(hostile.1["stdout"], "written\n", "{hostile:?}");
    assert!(denied(&hostile), "{hostile:?}");
    let config = std::fs::read_to_string(ws.path().join(".git/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    assert!(config.contains("agent@example.invalid"), "{config}");
    // Re-pointing a key off the list is undone too, and the next call sees the accepted file.
    let repoint = shell(&client, "git config core.hooksPath /tmp/elsewhere").await;
    assert!(denied(&repoint), "{repoint:?}");
    let next = shell(&client, "git config core.hooksPath").await;
    assert_eq!(next.1["stdout"], ".husky\n", "{next:?}");
    assert_host_status_is_safe(ws.path(), &marker);
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn git_submodule_add_works_and_is_not_quarantined() {
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
         && git commit -q -m 'add lib' && echo added",
    )
    .await;
    assert!(!add.0, "{add:?}");
    assert_eq!(add.1["stdout"], "added\n", "{add:?}");
    let next = shell(
        &client,
        "git -C lib log -1 --format=%s && git submodule status | wc -l",
    )
    .await;
    assert!(!next.0, "{next:?}");
    assert_eq!(next.1["stdout"], "lib\n1\n", "{next:?}");
    assert!(
        quarantined(ws.path()).is_empty(),
        "{:?}",
        quarantined(ws.path())
    );
    let host = host_git(ws.path(), &["submodule", "status"]);
    assert!(host.status.success(), "{host:?}");
    // Now the operator's: its config is bound read-only in the next view.
    let write = shell(&client, "git -C lib config core.fsmonitor 'touch pwned'").await;
    assert!(write.0, "{write:?}");
    let config = std::fs::read_to_string(ws.path().join(".git/modules/lib/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    client.cancel().await.ok();
}

#[cordon_test::test]
async fn a_refused_git_config_change_is_undone_while_the_call_still_runs() {
    if skip("config_watch", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
    let client = connect(ws.path()).await;
    // The write succeeds (the file is writable, but vetted); the watch of `.git` undoes it
    // long before the call ends, so a host git reading it meanwhile would not see it for long.
    let run = shell(
        &client,
        "git config core.fsmonitor 'touch pwned' && sleep 2 && \
         (git config --get core.fsmonitor || echo undone)",
    )
    .await;
    assert_eq!(run.1["stdout"], "undone\n", "{run:?}");
    assert!(denied(&run), "{run:?}");
    client.cancel().await.ok();
}

/// A code_interpreter cell can plant what git runs on the host as well as a shell command can;
/// its own result says what cordon undid, as a `denied` error, not only a later shell call's.
#[cordon_test::test]
async fn a_cell_that_plants_git_config_gets_a_denied_result() {
    if skip("cell_git_plant", Need::Namespaces) {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    operator_repo(ws.path());
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
    let out = (
        result.is_error.unwrap_or(false),
        result.structured_content.expect("structured content"),
    );
    assert!(out.0 && out.1["error"]["kind"] == "denied", "{out:?}");
    let config = std::fs::read_to_string(ws.path().join(".git/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    let status = host_git(ws.path(), &["status", "--short"]);
    assert!(status.status.success(), "{status:?}");
    assert!(
        !ws.path().join("pwned").exists(),
        "the operator's git ran the plant"
    );
    client.cancel().await.ok();
}
