//! The file tools under attack, end to end: each test starts `cordon serve` (its own process),
//! sets the trap a confined command could set in the workspace (a symlink, a dangling link, a
//! directory swapped for a link while the call runs, a gitdir redirect, a policy in the
//! workspace, a blow-up edit, a set-id file), makes the call an agent would make, and checks
//! on disk that the attack did not land and that the answer stayed small.
//!
//! Every test is named after what it guards; each attack here worked on an earlier build.

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

type Client = RunningService<RoleClient, ()>;

/// The most a result may take on the wire (SPEC: no tool result exceeds 1 MiB).
const WIRE_MAX: usize = 1024 * 1024;

struct Server {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    client: Client,
}

/// No file-tool call should take anywhere near this; past it the call is a hang.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// A workspace holding a git-like `.git`, prepared by `setup` (which returns extra arguments
/// for `cordon serve`, e.g. `--policy FILE`), served by `cordon serve`.
async fn serve_with(setup: impl FnOnce(&Path) -> Vec<String>) -> Server {
    let tmp = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap().join("ws");
    fs::create_dir_all(root.join(".git/hooks")).unwrap();
    fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let extra = setup(&root);
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_cordon"));
    cmd.arg("serve").arg("--workspace").arg(&root).args(&extra);
    let transport = TokioChildProcess::new(cmd).expect("spawn cordon serve");
    let client =
        ().serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
            .await
            .expect("MCP session with cordon starts");
    Server {
        _tmp: tmp,
        root,
        client,
    }
}

async fn serve(setup: impl FnOnce(&Path)) -> Server {
    serve_with(|root| {
        setup(root);
        Vec::new()
    })
    .await
}

impl Server {
    async fn call(&self, tool: &'static str, arguments: Value) -> CallToolResult {
        let Value::Object(arguments) = arguments else {
            panic!("arguments must be an object")
        };
        let call = self
            .client
            .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments));
        let result = tokio::time::timeout(HANG_GUARD, call)
            .await
            .unwrap_or_else(|_| panic!("{tool} hung for {HANG_GUARD:?}"))
            .unwrap_or_else(|e| panic!("{tool} call failed at the protocol level: {e}"));
        let size = serde_json::to_vec(&result).unwrap().len();
        assert!(size <= WIRE_MAX, "{tool} answered {size} bytes");
        result
    }
}

fn structured(result: &CallToolResult) -> &Value {
    result
        .structured_content
        .as_ref()
        .expect("structuredContent")
}

/// The error kind of a failed call.
fn error_kind(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "expected an error: {result:?}");
    structured(result)["error"]["kind"]
        .as_str()
        .expect("error.kind")
        .to_owned()
}

fn error_message(result: &CallToolResult) -> String {
    structured(result)["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

fn assert_ok(result: &CallToolResult) -> &Value {
    assert_ne!(result.is_error, Some(true), "unexpected error: {result:?}");
    structured(result)
}

// ---------------------------------------------------------------- protected paths

#[cordon_test::test]
async fn symlink_to_a_git_hook_does_not_let_write_file_create_the_hook() {
    let s = serve(|root| symlink(".git/hooks/pre-commit", root.join("pc")).unwrap()).await;
    let r = s
        .call(
            "write_file",
            json!({"path": "pc", "content": "#!/bin/sh\ntouch /tmp/pwned\n"}),
        )
        .await;
    assert_eq!(error_kind(&r), "invalid_argument");
    let msg = error_message(&r);
    assert!(
        msg.contains("symbolic link") && msg.contains(".git/hooks/pre-commit"),
        "{msg}"
    );
    assert!(
        !s.root.join(".git/hooks/pre-commit").exists(),
        "the hook was created"
    );
    assert!(
        fs::symlink_metadata(s.root.join("pc"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Writing the target by its own name is what the message suggests; it is protected.
    let r = s
        .call(
            "write_file",
            json!({"path": ".git/hooks/pre-commit", "content": "x"}),
        )
        .await;
    assert_eq!(error_kind(&r), "denied");
    assert!(!s.root.join(".git/hooks/pre-commit").exists());
}

#[cordon_test::test]
async fn dangling_symlink_to_git_config_does_not_let_write_file_create_it() {
    let s = serve(|root| symlink(".git/config", root.join("cfg")).unwrap()).await;
    let r = s
        .call(
            "write_file",
            json!({"path": "cfg", "content": "[core]\n\tfsmonitor = touch /tmp/pwned\n"}),
        )
        .await;
    assert_eq!(error_kind(&r), "invalid_argument");
    assert!(
        !s.root.join(".git/config").exists(),
        "the config was created"
    );
    // edit_file cannot get there either: there is nothing to read, and nothing is written.
    let r = s
        .call(
            "edit_file",
            json!({"path": "cfg", "edits": [{"old_string": "a", "new_string": "b"}]}),
        )
        .await;
    assert_eq!(r.is_error, Some(true));
    assert!(!s.root.join(".git/config").exists());
}

/// A directory is swapped, over and over, for a symlink to `.git` while `write_file dir/config`
/// runs: the decision and the write go through one directory handle, so no call lands in
/// `.git/config` (an earlier build overwrote it 202 times in 400).
#[cordon_test::test]
async fn directory_swapped_for_a_git_symlink_never_lets_write_file_reach_git_config() {
    const ORIGINAL: &str = "[core]\n\tbare = false\n";
    let s = serve(|root| {
        fs::write(root.join(".git/config"), ORIGINAL).unwrap();
        fs::create_dir(root.join("dir")).unwrap();
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (dir, parked, stop) = (s.root.join("dir"), s.root.join("dir.parked"), stop.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u32;
            while !stop.load(Ordering::Relaxed) {
                if fs::rename(&dir, &parked).is_ok() {
                    let _ = symlink(".git", &dir);
                    std::thread::sleep(Duration::from_micros(50));
                    let _ = fs::remove_file(&dir);
                    let _ = fs::rename(&parked, &dir);
                    swaps += 1;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
            swaps
        })
    };
    let (mut landed, mut refused) = (0, 0);
    for i in 0..400 {
        let r = s
            .call(
                "write_file",
                json!({"path": "dir/config", "content": format!("[core]\n\tfsmonitor = echo {i}\n"), "create_dirs": false}),
            )
            .await;
        if r.is_error == Some(true) {
            refused += 1;
        } else {
            landed += 1;
        }
        assert_eq!(
            fs::read_to_string(s.root.join(".git/config")).unwrap(),
            ORIGINAL,
            "call {i} overwrote .git/config"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    eprintln!("rename race: {landed} landed in dir/, {refused} refused, {swaps} swaps");
    assert!(swaps > 0, "the swapper never ran");
    assert!(landed > 0, "no write landed in the real directory");
}

/// `commondir` redirects git to another repository directory (and its config, which can name
/// a command such as core.fsmonitor); it and the other control files git reads are protected.
#[cordon_test::test]
async fn git_commondir_and_other_control_files_cannot_be_written() {
    let s = serve(|root| {
        fs::create_dir_all(root.join(".git/worktrees/wt")).unwrap();
        fs::create_dir_all(root.join(".git/modules/lib/hooks")).unwrap();
    })
    .await;
    for path in [
        ".git/commondir",
        ".git/config",
        ".git/config.worktree",
        ".git/info/attributes",
        ".git/objects/info/alternates",
        ".git/worktrees/wt/commondir",
        ".git/worktrees/wt/gitdir",
        ".git/modules/lib/config",
        ".git/modules/lib/hooks/post-checkout",
        ".git",
        "vendor/sub/.git",
        ".cordon/outputs/x.txt",
    ] {
        let r = s
            .call("write_file", json!({"path": path, "content": "../evil\n"}))
            .await;
        assert_eq!(r.is_error, Some(true), "{path} was written");
        assert!(
            !s.root.join(path).is_file(),
            "{path} exists after a refused write"
        );
    }
    // The trap's other half is an ordinary file and may be written: only the redirect is
    // dangerous, and that was refused.
    let r = s
        .call(
            "write_file",
            json!({"path": "evil/config", "content": "[core]\n\tfsmonitor = touch pwned\n"}),
        )
        .await;
    assert_ok(&r);
    assert!(!s.root.join(".git/commondir").exists());
    // Nothing was created inside a protected directory on the way either.
    let r = s
        .call(
            "write_file",
            json!({"path": ".git/hooks/new/dir/x", "content": "x"}),
        )
        .await;
    assert_eq!(error_kind(&r), "denied");
    assert!(!s.root.join(".git/hooks/new").exists());
}

/// The policy in force and the file it `extends`, both inside the workspace, cannot be
/// rewritten by the file tools (an earlier build let `read_write = ["/"]` be written and then
/// be in force).
#[cordon_test::test]
async fn policy_file_and_its_extends_chain_cannot_be_written() {
    const CHILD: &str = "extends = \"base.toml\"\nname = \"child\"\n";
    const BASE: &str = "extends = \"default\"\nname = \"base\"\n";
    let s = serve_with(|root| {
        fs::create_dir_all(root.join("conf")).unwrap();
        fs::write(root.join("conf/child.toml"), CHILD).unwrap();
        fs::write(root.join("conf/base.toml"), BASE).unwrap();
        vec![
            "--policy".to_owned(),
            root.join("conf/child.toml").display().to_string(),
        ]
    })
    .await;
    let evil = "extends = \"default\"\n[filesystem]\nread_write = [\"/\"]\n";
    for path in [
        "conf/child.toml",
        "conf/base.toml",
        "./conf/../conf/base.toml",
    ] {
        let r = s
            .call("write_file", json!({"path": path, "content": evil}))
            .await;
        assert_eq!(error_kind(&r), "denied", "{path}");
        assert!(
            error_message(&r).contains("protected"),
            "{}",
            error_message(&r)
        );
        let r = s
            .call(
                "edit_file",
                json!({"path": path, "edits": [{"old_string": "name", "new_string": "nom"}]}),
            )
            .await;
        assert_eq!(error_kind(&r), "denied", "{path}");
    }
    // Through a symlinked directory, too.
    symlink("conf", s.root.join("c")).unwrap();
    let r = s
        .call(
            "write_file",
            json!({"path": "c/base.toml", "content": evil}),
        )
        .await;
    assert_eq!(error_kind(&r), "denied");
    assert_eq!(
        fs::read_to_string(s.root.join("conf/child.toml")).unwrap(),
        CHILD
    );
    assert_eq!(
        fs::read_to_string(s.root.join("conf/base.toml")).unwrap(),
        BASE
    );
}

// ---------------------------------------------------------------- bounded results

/// `replace_all` growth is computed before the result is built: a chain that would grow a
/// 1 MiB file past the limit is refused whole, quickly, with a small answer (an earlier build
/// wrote 100 MB and answered 212 MB after 223 s).
#[cordon_test::test]
async fn blow_up_edit_is_refused_before_it_is_built() {
    let original = "a".repeat(1 << 20);
    let content = original.clone();
    let s = serve(move |root| fs::write(root.join("big.txt"), &content).unwrap()).await;
    let edits: Vec<Value> = (0..100)
        .map(|_| json!({"old_string": "aaaa", "new_string": "aaaaaaaa", "replace_all": true}))
        .collect();
    let started = std::time::Instant::now();
    let r = s
        .call("edit_file", json!({"path": "big.txt", "edits": edits}))
        .await;
    assert_eq!(error_kind(&r), "resource_limit", "{}", error_message(&r));
    assert!(
        error_message(&r).contains("nothing was changed"),
        "{}",
        error_message(&r)
    );
    eprintln!("blow-up edit refused in {:?}", started.elapsed());
    assert_eq!(
        fs::read_to_string(s.root.join("big.txt")).unwrap(),
        original
    );
    // One huge replacement is refused as well, before any of it exists.
    let r = s
        .call(
            "edit_file",
            json!({"path": "big.txt", "edits": [{"old_string": "aaaa", "new_string": "a".repeat(256), "replace_all": true}]}),
        )
        .await;
    assert_eq!(error_kind(&r), "resource_limit");
    assert_eq!(fs::metadata(s.root.join("big.txt")).unwrap().len(), 1 << 20);
}

/// A long diff is cut like long command output, and the whole of it is saved where the
/// result says.
#[cordon_test::test]
async fn long_diff_is_cut_and_the_full_diff_is_spilled() {
    let s = serve(|root| {
        let text: String = (0..20_000).map(|i| format!("x line {i}\n")).collect();
        fs::write(root.join("many.txt"), text).unwrap();
    })
    .await;
    let r = s
        .call(
            "edit_file",
            json!({"path": "many.txt", "edits": [{"old_string": "x line", "new_string": "y line", "replace_all": true}]}),
        )
        .await;
    let sc = assert_ok(&r);
    assert_eq!(sc["replacements"], 20_000);
    let diff = sc["diff"].as_str().unwrap();
    assert!(diff.len() < 20_000, "diff not cut: {} bytes", diff.len());
    assert!(diff.contains("lines ("), "no omission marker: {diff:.300}");
    let full = sc["full_diff"].as_str().expect("full_diff path");
    assert!(full.starts_with(".cordon/outputs/"), "{full}");
    let saved = fs::read_to_string(s.root.join(full)).unwrap();
    assert_eq!(saved.matches("\n-x line ").count(), 20_000);
    assert_eq!(saved.matches("\n+y line ").count(), 20_000);
    // A small diff is whole and has no spill file.
    let r = s
        .call(
            "edit_file",
            json!({"path": "many.txt", "edits": [{"old_string": "y line 7\n", "new_string": "seven\n"}]}),
        )
        .await;
    let sc = assert_ok(&r);
    assert!(sc["full_diff"].is_null());
    assert!(sc["diff"].as_str().unwrap().contains("+seven\n"));
}

/// read_file with default arguments returns at most the byte budget (48 KiB by default) and
/// says where to continue (an earlier build answered 408 KB).
#[cordon_test::test]
async fn read_file_defaults_stay_within_the_byte_budget() {
    let s = serve(|root| {
        let text: String = (0..2000)
            .map(|i| format!("{i:04} {}\n", "z".repeat(95)))
            .collect();
        fs::write(root.join("wide.txt"), text).unwrap();
        fs::write(root.join("ctl.txt"), "\u{1}".repeat(60) + "\n").unwrap();
    })
    .await;
    let r = s.call("read_file", json!({"path": "wide.txt"})).await;
    let sc = assert_ok(&r);
    let content = sc["content"].as_str().unwrap();
    assert!(content.len() <= 48 * 1024, "{} bytes", content.len());
    assert!(content.ends_with('\n'), "did not end on a whole line");
    assert_eq!(sc["truncated"], true);
    let next = sc["next_offset"].as_u64().expect("next_offset");
    assert_eq!(next, sc["end_line"].as_u64().unwrap() + 1);
    assert!(
        text_of(&r).contains(&format!("offset={next}")),
        "{:.200}",
        text_of(&r)
    );
    let wire = serde_json::to_vec(&r).unwrap().len();
    assert!(wire < 120 * 1024, "read_file answered {wire} bytes");
    // The continuation picks up exactly there.
    let r = s
        .call("read_file", json!({"path": "wide.txt", "offset": next}))
        .await;
    let sc = assert_ok(&r);
    assert!(
        sc["content"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{:04} ", next - 1))
    );
    // A whole small file has no continuation.
    let r = s.call("read_file", json!({"path": "ctl.txt"})).await;
    assert!(assert_ok(&r)["next_offset"].is_null());
}

/// A smaller `files.read_budget_kb` in the policy is what read_file uses.
#[cordon_test::test]
async fn read_budget_comes_from_the_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = tmp.path().join("small.toml");
    fs::write(
        &policy,
        "extends = \"default\"\n[files]\nread_budget_kb = 4\n",
    )
    .unwrap();
    let s = serve_with(|root| {
        let text: String = (0..1000)
            .map(|i| format!("{i:04} {}\n", "q".repeat(44)))
            .collect();
        fs::write(root.join("f.txt"), text).unwrap();
        vec!["--policy".to_owned(), policy.display().to_string()]
    })
    .await;
    let r = s.call("read_file", json!({"path": "f.txt"})).await;
    let sc = assert_ok(&r);
    let content = sc["content"].as_str().unwrap();
    assert!(
        content.len() <= 4096 && content.len() > 3000,
        "{}",
        content.len()
    );
    assert_eq!(sc["end_line"], 81); // 50-byte lines: 81 × 50 = 4050 ≤ 4096
}

// ---------------------------------------------------------------- set-id bits

/// A replaced set-id file loses its setuid/setgid bits (the server may be root: a 4755 file
/// owned by nobody must not become 4755 root), keeps its other bits and, under root, its owner;
/// the result says which bits were dropped.
#[cordon_test::test]
async fn write_file_and_edit_file_drop_setuid_and_setgid_bits() {
    const NOBODY: u32 = 65534;
    let as_root = rustix::process::geteuid().is_root();
    let s = serve(|root| {
        for name in ["suid.sh", "sgid.sh"] {
            fs::write(root.join(name), "#!/bin/sh\necho old\n").unwrap();
        }
        fs::set_permissions(root.join("suid.sh"), fs::Permissions::from_mode(0o4755)).unwrap();
        fs::set_permissions(root.join("sgid.sh"), fs::Permissions::from_mode(0o6750)).unwrap();
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(root.join("suid.sh"), Some(NOBODY), Some(NOBODY)).unwrap();
            // chown clears set-id bits; put them back as the trap had them.
            fs::set_permissions(root.join("suid.sh"), fs::Permissions::from_mode(0o4755)).unwrap();
        }
    })
    .await;
    let r = s
        .call(
            "write_file",
            json!({"path": "suid.sh", "content": "#!/bin/sh\necho new\n"}),
        )
        .await;
    let sc = assert_ok(&r);
    assert_eq!(sc["dropped_permissions"], json!(["setuid"]));
    assert!(text_of(&r).contains("setuid"), "{}", text_of(&r));
    let meta = fs::metadata(s.root.join("suid.sh")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
    if as_root {
        assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY), "owner not kept");
    }

    let r = s
        .call(
            "edit_file",
            json!({"path": "sgid.sh", "edits": [{"old_string": "old", "new_string": "new"}]}),
        )
        .await;
    let sc = assert_ok(&r);
    assert_eq!(sc["dropped_permissions"], json!(["setuid", "setgid"]));
    let mode = fs::metadata(s.root.join("sgid.sh"))
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o750);
    // A plain file reports nothing dropped.
    let r = s
        .call("write_file", json!({"path": "plain.txt", "content": "x"}))
        .await;
    assert_eq!(assert_ok(&r)["dropped_permissions"], json!([]));
}

// ---------------------------------------------------------------- hostile files

/// A FIFO or device where a file is expected is refused at once, by every file tool.
#[cordon_test::test]
async fn fifo_in_the_workspace_cannot_hang_a_file_tool() {
    let s = serve(|root| {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("pipe"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        symlink("pipe", root.join("to_pipe")).unwrap();
    })
    .await;
    // Server::call fails the test if a call hangs.
    for path in ["pipe", "to_pipe"] {
        let r = s.call("read_file", json!({"path": path})).await;
        assert_eq!(error_kind(&r), "invalid_argument", "{path}");
        let r = s
            .call(
                "edit_file",
                json!({"path": path, "edits": [{"old_string": "a", "new_string": "b"}]}),
            )
            .await;
        assert_eq!(error_kind(&r), "invalid_argument", "{path}");
    }
    let r = s
        .call("write_file", json!({"path": "pipe", "content": "x"}))
        .await;
    assert_eq!(error_kind(&r), "invalid_argument");
}
