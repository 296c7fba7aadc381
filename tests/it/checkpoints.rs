//! Checkpoints (issue 35) end to end through `cordon serve`: a call changes the workspace the
//! way confined code can (edits, delete and recreate, rename over, truncate, hard links, a
//! FIFO, a huge sparse file, symlinks in and out, empty directories, modes), `checkpoint
//! restore` puts it back, and the tree is compared byte for byte and mode for mode with a walk
//! this test does itself; a restore of the restore; the bound dropping the oldest; the
//! operator's CLI on a workspace a server is serving; a call that changes nothing.

use crate::common::{CORDON, Need, Sandbox, skip};
use crate::stdio_server::{StdioServer, structured};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Files larger than this are compared by size alone (a sparse terabyte is never read).
const READ_WHOLE: u64 = 1 << 20;

/// What the test's own walk sees at one path: kind, permission bits, and content (a file's
/// bytes, a link's target, a large file's size).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    kind: &'static str,
    mode: u32,
    content: Vec<u8>,
}

/// The workspace as a walk outside cordon sees it, without `.git` and cordon's own `.cordon`
/// and `.cordon-home` (made by the server at its start; spilled outputs come and go).
fn snapshot(root: &Path) -> BTreeMap<String, Seen> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".git" || rel == ".cordon" || rel == ".cordon-home" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let ft = meta.file_type();
            let mode = meta.permissions().mode() & 0o7777;
            let seen = if ft.is_symlink() {
                Seen {
                    kind: "symlink",
                    mode: 0,
                    content: std::fs::read_link(&path)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                }
            } else if ft.is_dir() {
                stack.push(path.clone());
                Seen {
                    kind: "dir",
                    mode,
                    content: Vec::new(),
                }
            } else if ft.is_file() && meta.len() <= READ_WHOLE {
                Seen {
                    kind: "file",
                    mode,
                    content: std::fs::read(&path).unwrap(),
                }
            } else if ft.is_file() {
                Seen {
                    kind: "large file",
                    mode,
                    content: meta.len().to_string().into_bytes(),
                }
            } else {
                use std::os::unix::fs::FileTypeExt;
                Seen {
                    kind: if ft.is_fifo() { "fifo" } else { "special" },
                    mode,
                    content: Vec::new(),
                }
            };
            out.insert(rel, seen);
        }
    }
    out
}

/// The paths where two snapshots differ, to say what a failed comparison found.
fn differences(a: &BTreeMap<String, Seen>, b: &BTreeMap<String, Seen>) -> Vec<String> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{k}: {:?} vs {:?}", a.get(k), b.get(k)))
        .collect()
}

fn assert_same(want: &BTreeMap<String, Seen>, got: &BTreeMap<String, Seen>, what: &str) {
    let diff = differences(want, got);
    assert!(diff.is_empty(), "{what}: the trees differ at {diff:#?}");
}

fn state_dir(sb: &Sandbox) -> String {
    sb.outside().join("state").to_str().unwrap().to_owned()
}

fn server(sb: &Sandbox, policy: &str) -> StdioServer {
    let path = sb.policy(
        "checkpoints.toml",
        &format!("extends = \"default\"\n{policy}"),
    );
    let state = state_dir(sb);
    StdioServer::start(
        sb.ws(),
        &["--policy", &path],
        "",
        &[("CORDON_STATE_DIR", &state)],
    )
}

fn sh(s: &mut StdioServer, command: &str) -> Value {
    let r = s.call("shell_exec", json!({"command": command}));
    assert_eq!(structured(&r)["exit_code"], json!(0), "{command}: {r}");
    r
}

fn checkpoint_of(r: &Value) -> String {
    structured(r)["checkpoint"]
        .as_str()
        .unwrap_or_else(|| panic!("no checkpoint in a changing call's result: {r}"))
        .to_owned()
}

fn restore(s: &mut StdioServer, id: &str) -> Value {
    let r = s.call("checkpoint", json!({"action": "restore", "id": id}));
    assert_ne!(r["isError"], json!(true), "restore {id}: {r}");
    r
}

/// The tool of each checkpoint a `list` answer holds, oldest first.
fn listed_tools(listed: &Value) -> Vec<&str> {
    structured(listed)["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["tool"].as_str().unwrap())
        .collect()
}

#[cordon_test::test]
fn every_kind_of_change_a_call_makes_is_restored_exactly() {
    if skip("every_kind_of_change_is_restored", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    std::fs::write(ws.join("edited.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(ws.join("recreated.sh"), "#!/bin/sh\necho old\n").unwrap();
    std::fs::set_permissions(
        ws.join("recreated.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(ws.join("renamed-over.txt"), "the original\n").unwrap();
    std::fs::write(ws.join("truncated.txt"), "x".repeat(10_000)).unwrap();
    std::fs::write(ws.join("linked.txt"), "shared inode\n").unwrap();
    std::fs::create_dir_all(ws.join("tree/empty")).unwrap();
    std::fs::write(ws.join("tree/leaf.txt"), "leaf\n").unwrap();
    std::fs::create_dir(ws.join("private")).unwrap();
    std::fs::set_permissions(ws.join("private"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("edited.txt", ws.join("link-in")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", ws.join("link-out")).unwrap();
    std::fs::write(ws.join(".gitignore"), "ignored/\n").unwrap();
    std::fs::create_dir(ws.join("ignored")).unwrap();
    std::fs::write(ws.join("ignored/cache"), "not covered").unwrap();
    let before = snapshot(ws);

    let mut s = server(&sb, "");
    let r = sh(
        &mut s,
        "set -e
         sed -i 's/two/TWO/' edited.txt
         rm recreated.sh && printf 'new\\n' > recreated.sh && chmod 600 recreated.sh
         printf 'the replacement\\n' > tmp && mv tmp renamed-over.txt
         : > truncated.txt
         ln linked.txt hardlink && printf 'written through\\n' >> hardlink
         mkfifo made.fifo
         truncate -s 4G sparse.bin
         rm -r tree && mkdir -p tree && printf 'other\\n' > tree/other.txt
         mkdir brand-new-empty
         chmod 700 private
         rm link-in && ln -s renamed-over.txt link-in
         rm link-out && ln -s /etc/passwd link-out
         printf 'changed' > ignored/cache",
    );
    let id = checkpoint_of(&r);
    let after = snapshot(ws);
    assert_ne!(after, before);

    // The huge sparse file (4 GiB, over `max_file_bytes`) is listed as not covered, never read.
    let listed = s.call("checkpoint", json!({"action": "list"}));
    let cps = structured(&listed)["checkpoints"]
        .as_array()
        .unwrap()
        .clone();
    let mine = cps
        .iter()
        .find(|c| c["id"] == json!(id))
        .unwrap_or_else(|| panic!("{id} not listed: {listed}"));
    assert_eq!(mine["tool"], json!("shell_exec"), "{mine}");
    assert!(
        mine["not_covered"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["path"] == json!("sparse.bin")),
        "{mine}"
    );
    let diff = s.call("checkpoint", json!({"action": "diff", "id": id}));
    let diff_text = structured(&diff)["diff"].as_str().unwrap();
    assert!(diff_text.contains("+TWO"), "{diff}");
    let files = structured(&diff)["files"].as_array().unwrap();
    let change = |p: &str| {
        files
            .iter()
            .find(|f| f["path"] == json!(p))
            .map(|f| f["change"].clone())
    };
    assert_eq!(change("edited.txt"), Some(json!("modified")));
    assert_eq!(change("made.fifo"), Some(json!("created")));
    assert_eq!(change("tree/empty"), Some(json!("deleted")));
    assert_eq!(change("link-out"), Some(json!("symlink")));
    assert_eq!(
        change("ignored/cache"),
        None,
        "an ignored file is not covered"
    );

    let restored = restore(&mut s, &id);
    let undo = checkpoint_of(&restored);
    let mut now = snapshot(ws);
    // The ignored file is not covered: it stays as the call left it.
    assert_eq!(now.remove("ignored/cache").unwrap().content, b"changed");
    let mut want = before.clone();
    want.remove("ignored/cache");
    assert_same(&want, &now, "after restoring the call");
    // The hard link's partner was written through the link: restored as its own file.
    assert_eq!(
        std::fs::read(ws.join("linked.txt")).unwrap(),
        b"shared inode\n"
    );

    // A restore of the restore: the tree as the call left it, except what no record holds
    // (the sparse terabyte), which is reported.
    let again = restore(&mut s, &undo);
    assert!(
        structured(&again)["not_restored"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["path"] == json!("sparse.bin")),
        "{again}"
    );
    let now = snapshot(ws);
    let mut want = after.clone();
    want.remove("sparse.bin");
    let mut now_less = now.clone();
    now_less.remove("sparse.bin");
    assert_same(&want, &now_less, "after undoing the restore");
    assert!(!ws.join("sparse.bin").exists());
    // The recreated hard link is a file of its own now, with the bytes it had.
    assert_eq!(
        std::fs::metadata(ws.join("hardlink")).unwrap().nlink(),
        1,
        "a restored file is written anew, never through a link"
    );
}

#[cordon_test::test]
fn a_symlink_out_of_the_workspace_is_neither_recorded_through_nor_written_through() {
    if skip("a_symlink_out_is_not_followed", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let ws = sb.ws();
    let outside = sb.outside().join("target");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), "outside secret\n").unwrap();
    std::fs::create_dir(ws.join("d")).unwrap();
    std::fs::write(ws.join("d/f"), "inside\n").unwrap();
    std::fs::write(ws.join("a.txt"), "workspace file\n").unwrap();
    let before = snapshot(ws);
    let outside_before = snapshot(&outside);

    let mut s = server(&sb, "");
    let out = outside.to_str().unwrap();
    // The call's confinement may refuse to see outside; a link is made whatever it points at.
    let r = sh(
        &mut s,
        &format!("rm -r d && ln -s {out} d && rm a.txt && ln -s {out}/secret a.txt"),
    );
    let id = checkpoint_of(&r);
    let diff = s.call("checkpoint", json!({"action": "diff", "id": id}));
    let text = structured(&diff)["diff"].as_str().unwrap();
    assert!(
        !text.contains("outside secret"),
        "recorded through a link: {text}"
    );
    assert!(text.contains(&format!("-> {out}")), "{text}");

    restore(&mut s, &id);
    assert_same(&before, &snapshot(ws), "after the restore");
    assert_same(
        &outside_before,
        &snapshot(&outside),
        "outside the workspace",
    );
}

#[cordon_test::test]
fn a_call_that_changes_nothing_has_no_checkpoint() {
    if skip("a_call_that_changes_nothing", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("a.txt"), "one\n").unwrap();
    let mut s = server(&sb, "");
    let r = sh(&mut s, "cat a.txt > /dev/null");
    assert_eq!(structured(&r)["checkpoint"], Value::Null, "{r}");
    let dry = s.call(
        "edit_file",
        json!({"path": "a.txt", "edits": [{"old_string": "one", "new_string": "two"}], "dry_run": true}),
    );
    assert_eq!(structured(&dry)["checkpoint"], Value::Null, "{dry}");
    let written = s.call("write_file", json!({"path": "a.txt", "content": "two\n"}));
    let id = checkpoint_of(&written);
    // An edit the operator makes between calls is its own checkpoint, not the next call's.
    std::fs::write(sb.ws().join("a.txt"), "by the operator\n").unwrap();
    let r = sh(&mut s, "true");
    assert_eq!(structured(&r)["checkpoint"], Value::Null, "{r}");
    let listed = s.call("checkpoint", json!({"action": "list"}));
    let tools = listed_tools(&listed);
    assert_eq!(tools, ["outside", "write_file"], "{listed}");
    let calls: Vec<bool> = structured(&listed)["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["call"].is_string())
        .collect();
    assert_eq!(
        calls,
        [false, true],
        "a change between calls has no call: {listed}"
    );
    // As root, changes are found by fanotify: a call that changes nothing walks nothing.
    let recording = structured(&listed)["recording"].as_str().unwrap();
    if rustix::process::geteuid().is_root() {
        assert!(recording.starts_with("fanotify"), "{listed}");
    }
    restore(&mut s, &id);
    assert_eq!(std::fs::read(sb.ws().join("a.txt")).unwrap(), b"one\n");
}

/// Without fanotify (an unprivileged server, here simulated) every call's start and end walks
/// the tree: the level is said, and changes by a call and between calls are recorded and
/// restored as on the fast path.
#[cordon_test::test]
fn without_fanotify_every_call_walks_and_still_records() {
    if skip("without_fanotify_every_call_walks", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    std::fs::create_dir(sb.ws().join("d")).unwrap();
    std::fs::write(sb.ws().join("d/a.txt"), "one\n").unwrap();
    let policy = sb.policy("checkpoints.toml", "extends = \"default\"\n");
    let state = state_dir(&sb);
    let mut s = StdioServer::start(
        sb.ws(),
        &["--policy", &policy],
        "",
        &[
            ("CORDON_STATE_DIR", &state),
            ("CORDON_SIMULATE_MISSING", "fanotify"),
        ],
    );
    let before = snapshot(sb.ws());
    let r = sh(&mut s, "true");
    assert_eq!(structured(&r)["checkpoint"], Value::Null, "{r}");
    let changed = sh(
        &mut s,
        "echo two > d/a.txt && mkdir -p e/f && echo new > e/f/b.txt",
    );
    let id = checkpoint_of(&changed);
    std::fs::write(sb.ws().join("d/a.txt"), "by the operator\n").unwrap();
    sh(&mut s, "true");
    let listed = s.call("checkpoint", json!({"action": "list"}));
    let recording = structured(&listed)["recording"].as_str().unwrap();
    assert!(recording.starts_with("full walk"), "{listed}");
    let tools = listed_tools(&listed);
    assert_eq!(tools, ["outside", "shell_exec"], "{listed}");
    restore(&mut s, &id);
    assert_same(&before, &snapshot(sb.ws()), "restored without fanotify");
}

#[cordon_test::test]
fn the_bound_drops_the_oldest_checkpoints_first() {
    if skip("the_bound_drops_the_oldest", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, "[checkpoints]\nmax_count = 2\n");
    let ids: Vec<String> = (0..4)
        .map(|i| {
            let r = s.call(
                "write_file",
                json!({"path": "f.txt", "content": format!("version {i}\n")}),
            );
            checkpoint_of(&r)
        })
        .collect();
    let listed = s.call("checkpoint", json!({"action": "list"}));
    let st = structured(&listed);
    let kept: Vec<&str> = st["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(kept, [ids[3].as_str(), ids[2].as_str()], "{listed}");
    assert_eq!(st["budget"]["count"], json!(2), "{listed}");
    assert_eq!(st["budget"]["dropped"], json!(2), "{listed}");
    let gone = s.call("checkpoint", json!({"action": "restore", "id": ids[0]}));
    assert_eq!(gone["isError"], json!(true), "{gone}");
    assert_eq!(
        structured(&gone)["error"]["kind"],
        json!("invalid_argument"),
        "{gone}"
    );
    restore(&mut s, &ids[2]);
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("f.txt")).unwrap(),
        "version 1\n"
    );
}

#[cordon_test::test]
fn the_operators_cli_restores_a_workspace_a_server_is_serving() {
    if skip("the_operators_cli_restores", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    std::fs::write(sb.ws().join("a.txt"), "original\n").unwrap();
    let mut s = server(&sb, "");
    let r = s.call(
        "write_file",
        json!({"path": "a.txt", "content": "by the agent\n"}),
    );
    let id = checkpoint_of(&r);
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(CORDON)
            .arg("checkpoints")
            .args(args)
            .arg("--workspace")
            .arg(sb.ws())
            .env("CORDON_STATE_DIR", state_dir(&sb))
            .output()
            .expect("run cordon checkpoints");
        assert!(
            out.status.success(),
            "cordon checkpoints {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let listed: Value = serde_json::from_str(&cli(&["list", "--json"])).unwrap();
    assert_eq!(listed["checkpoints"][0]["id"], json!(id), "{listed}");
    let restored: Value = serde_json::from_str(&cli(&["restore", &id, "--json"])).unwrap();
    assert_eq!(std::fs::read(sb.ws().join("a.txt")).unwrap(), b"original\n");
    let undo = restored["checkpoint"].as_str().unwrap().to_owned();
    // The server's next call sees the operator's restore as recorded, not as its own change.
    let r = sh(&mut s, "true");
    assert_eq!(structured(&r)["checkpoint"], Value::Null, "{r}");
    // And the agent can undo the operator's restore.
    restore(&mut s, &undo);
    assert_eq!(
        std::fs::read(sb.ws().join("a.txt")).unwrap(),
        b"by the agent\n"
    );
    let bad = std::process::Command::new(CORDON)
        .args(["checkpoints", "restore", "12", "--workspace"])
        .arg(sb.ws())
        .env("CORDON_STATE_DIR", state_dir(&sb))
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("cp-12"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[cordon_test::test]
fn a_restore_waits_for_this_sessions_jobs_unless_asked_to_stop_them() {
    if skip("a_restore_waits_for_jobs", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, "");
    let r = s.call("write_file", json!({"path": "a.txt", "content": "x\n"}));
    let id = checkpoint_of(&r);
    let started = s.call(
        "shell_exec",
        json!({"command": "sleep 60", "background": true, "wait_secs": 0}),
    );
    let job = structured(&started)["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let refused = s.call("checkpoint", json!({"action": "restore", "id": id}));
    assert_eq!(refused["isError"], json!(true), "{refused}");
    assert!(
        structured(&refused)["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&job),
        "{refused}"
    );
    assert!(sb.ws().join("a.txt").exists(), "nothing was restored");
    let done = s.call(
        "checkpoint",
        json!({"action": "restore", "id": id, "stop_jobs": true}),
    );
    assert_ne!(done["isError"], json!(true), "{done}");
    assert_eq!(structured(&done)["stopped_jobs"], json!([job]), "{done}");
    assert!(!sb.ws().join("a.txt").exists());
}

#[cordon_test::test]
fn the_audit_log_names_each_checkpoint_and_replay_points_at_it() {
    if skip("the_audit_log_names_each_checkpoint", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let log = sb.outside().join("audit.jsonl");
    let policy = sb.policy("recorded.toml", "extends = \"default\"\n");
    let state = state_dir(&sb);
    let mut s = StdioServer::start(
        sb.ws(),
        &["--policy", &policy, "--audit-log", log.to_str().unwrap()],
        "",
        &[("CORDON_STATE_DIR", &state)],
    );
    let written = s.call(
        "write_file",
        json!({"path": "notes/a.txt", "content": "x\n"}),
    );
    let id = checkpoint_of(&written);
    sh(&mut s, "true");
    drop(s);
    let audit = std::fs::read_to_string(&log).unwrap();
    let records: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |tool: &str| {
        records
            .iter()
            .find(|r| r["tool"] == json!(tool))
            .unwrap_or_else(|| panic!("no {tool} record: {audit}"))
            .clone()
    };
    assert_eq!(of("write_file")["checkpoint"], json!(id), "{audit}");
    assert_eq!(of("shell_exec").get("checkpoint"), None, "{audit}");
    // Under a candidate that protects `notes`, the write would be refused: replay says which
    // checkpoint undoes it.
    let candidate = sb.policy(
        "candidate.toml",
        "extends = \"default\"\n[filesystem]\nprotected = [\".cordon\", \"notes\"]\n",
    );
    let out = std::process::Command::new(CORDON)
        .args(["policy", "replay"])
        .arg(&log)
        .args(["--policy", &candidate])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("checkpoint {id}")),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A recording that fails (here the store's blob directory became a file under the server) is
/// not silent: the call's result names no checkpoint, and the session is told why, so a null
/// `checkpoint` is not read as "nothing changed".
#[cordon_test::test]
fn a_recording_that_fails_is_said_to_the_session() {
    if skip("a_recording_that_fails_is_said", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let mut s = server(&sb, "");
    let id = s.send_request("logging/setLevel", json!({"level": "info"}));
    s.response(id, std::time::Duration::from_secs(10))
        .expect("setLevel answered");
    let first = sh(&mut s, "echo one > a.txt");
    checkpoint_of(&first);
    let stores = std::path::Path::new(&state_dir(&sb)).join("checkpoints");
    let store = std::fs::read_dir(&stores)
        .unwrap()
        .next()
        .expect("the workspace's store")
        .unwrap()
        .path();
    std::fs::remove_dir_all(store.join("blobs")).unwrap();
    std::fs::write(store.join("blobs"), "not a directory").unwrap();
    let r = sh(&mut s, "echo two > b.txt");
    assert_eq!(structured(&r)["checkpoint"], Value::Null, "{r}");
    let notes = s.notifications("notifications/message", std::time::Duration::from_secs(5));
    assert!(
        notes
            .iter()
            .any(|n| n["params"]["data"]["event"] == "checkpoint"
                && n["params"]["data"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("could not record"))),
        "{notes:?}"
    );
}
