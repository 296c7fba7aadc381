//! `cordon exec` as a shell user runs it: what is piped into it reaches the command, and a
//! command started from a subdirectory of the workspace runs there.

use crate::common::{CORDON, Need, Sandbox, skip};
use std::io::Write;
use std::process::{Command, Stdio};

#[cordon_test::test]
fn piped_stdin_reaches_the_command() {
    if skip("piped_stdin_reaches_the_command", Need::LandlockSeccomp) {
        return;
    }
    let sb = Sandbox::new();
    let mut child = Command::new(CORDON)
        .args(["exec", "--workspace"])
        .arg(sb.ws())
        .args(["--", "sh", "-c", "wc -l; echo done"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input: String = (0..10_000).map(|i| format!("line {i}\n")).collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "10000\ndone\n",
        "{out:?}"
    );
}

#[cordon_test::test]
fn the_callers_subdirectory_is_the_commands_cwd() {
    if skip(
        "the_callers_subdirectory_is_the_commands_cwd",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let sub = sb.ws().join("src/deep");
    std::fs::create_dir_all(&sub).unwrap();
    let run = |dir: &std::path::Path| {
        Command::new(CORDON)
            .args(["exec", "--workspace"])
            .arg(sb.ws())
            .args(["--", "sh", "-c", "pwd; touch made-here"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&sub);
    assert!(out.status.success(), "{out:?}");
    let ws = sb.ws().canonicalize().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        ws.join("src/deep").to_string_lossy(),
        "{out:?}"
    );
    assert!(sub.join("made-here").exists());
    // From outside the workspace: its root, as before.
    let out = run(sb.outside());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        ws.to_string_lossy(),
        "{out:?}"
    );
}

/// A command whose git change cordon refuses does not look like a success to a script: as a
/// tool result would be `denied`, `cordon exec` exits 125 and says why.
#[cordon_test::test]
fn a_refused_git_change_makes_exec_exit_125() {
    if skip("a_refused_git_change_makes_exec_exit_125", Need::Namespaces) {
        return;
    }
    let sb = Sandbox::new();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(sb.ws())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git runs");
        assert!(out.status.success(), "{out:?}");
    };
    git(&["init", "-q"]);
    let run = |script: &str| {
        Command::new(CORDON)
            .args(["exec", "--workspace"])
            .arg(sb.ws())
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    // A new gitlink is never imported into the operator's index (issue 29); its planted
    // config stays in a repository the operator's git never enters from the root.
    let refused = run(
        "git init -q sub && git -C sub -c user.email=a@b.invalid -c user.name=a commit -q \
         --allow-empty -m s && git -C sub config core.fsmonitor 'touch pwned' && git add sub",
    );
    assert_eq!(refused.status.code(), Some(125), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("refused a git change"),
        "{refused:?}"
    );
    let config = std::fs::read_to_string(sb.ws().join(".git/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    // A change that reaches only the shadow gitdir is the command's own success.
    let allowed = run("git config user.email agent@example.invalid");
    assert_eq!(allowed.status.code(), Some(0), "{allowed:?}");
}
