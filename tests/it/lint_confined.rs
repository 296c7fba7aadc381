//! External linters are code execution (an eslint config can load a plugin), so they run
//! under the same confinement as shell commands. These tests configure a "linter" that is a
//! hostile script — it tries to write outside the workspace, read a secret and open a socket —
//! and one that hangs, then drive the real lint pipeline through `cordon lint` and check
//! every attempt was stopped and the hang was cut off, never reported as `clean`.

use crate::common::{CORDON, HANG_GUARD, Need, Sandbox, run_guarded, skip};
use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

fn lint(sb: &Sandbox, policy: &str, file: &str) -> crate::common::Run {
    let mut cmd = Command::new(CORDON);
    cmd.arg("lint")
        .arg("--json")
        .arg("--workspace")
        .arg(sb.ws())
        .arg("--policy")
        .arg(policy)
        .arg(sb.ws().join(file));
    run_guarded(cmd, HANG_GUARD)
}

#[cordon_test::test]
fn hostile_linter_cannot_write_outside_read_secrets_or_connect() {
    if skip(
        "hostile_linter_cannot_write_outside_read_secrets_or_connect",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let secret = sb.outside().join("secret.txt");
    std::fs::write(&secret, "TOP-SECRET-VALUE").unwrap();
    let pwned = sb.outside().join("pwned");
    // The "linter" reports one finding per attempt that succeeded, in the regex format the
    // policy maps, so a leak would show up as a diagnostic as well as on disk.
    let script = format!(
        "echo x > '{pwned}' && echo 'f.txt:1:1: error: WROTE-OUTSIDE'; \
         cat '{secret}' 2>/dev/null | sed 's/^/f.txt:1:1: error: READ /'; \
         (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo 'f.txt:1:1: error: CONNECTED'; \
         true",
        pwned = pwned.display(),
        secret = secret.display(),
    );
    std::fs::write(sb.outside().join("linter.sh"), &script).unwrap();
    std::fs::copy(sb.outside().join("linter.sh"), sb.ws().join("linter.sh")).unwrap();
    let policy = sb.policy(
        "hostile.toml",
        r#"extends = "default"
[lint]
syntax = false
[[lint.linters]]
name = "hostile"
command = "/bin/bash"
args = ["linter.sh", "{path}"]
extensions = ["txt"]
format = "regex"
ok_exit_codes = [0]
[lint.linters.regex]
pattern = '^[^:]+:(?P<line>\d+):(?P<col>\d+): (?P<severity>\w+): (?P<message>.*)$'
"#,
    );
    std::fs::write(sb.ws().join("f.txt"), "hello\n").unwrap();
    let run = lint(&sb, &policy, "f.txt");
    assert_eq!(
        run.code(),
        0,
        "the linter ran and reported nothing: {run:?}"
    );
    assert!(run.stdout.contains("\"linters\""), "{run:?}");
    assert!(run.stdout.contains("hostile"), "{run:?}");
    assert!(!pwned.exists(), "the linter wrote outside the workspace");
    assert!(
        !run.stdout.contains("TOP-SECRET-VALUE"),
        "the linter read the secret: {run:?}"
    );
    assert!(
        !run.stdout.contains("CONNECTED"),
        "the linter connected out: {run:?}"
    );
    assert!(
        listener.accept().is_err(),
        "the listener accepted a connection from the linter"
    );

    // Control: the same script unconfined does all three, so the test can fail.
    let control = Command::new("/bin/bash")
        .arg(sb.outside().join("linter.sh"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&control.stdout);
    assert!(
        pwned.exists() && out.contains("TOP-SECRET-VALUE"),
        "control: {out}"
    );
}

#[cordon_test::test]
fn hanging_linter_is_cut_off_and_reported_unavailable() {
    if skip(
        "hanging_linter_is_cut_off_and_reported_unavailable",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let sb = Sandbox::new();
    let policy = sb.policy(
        "hang.toml",
        r#"extends = "default"
[lint]
syntax = false
timeout_secs = 1
[[lint.linters]]
name = "sleepy"
command = "/bin/sleep"
args = ["300"]
extensions = ["txt"]
format = "regex"
[lint.linters.regex]
pattern = '^(?P<line>\d+): (?P<message>.*)$'
"#,
    );
    std::fs::write(sb.ws().join("f.txt"), "hello\n").unwrap();
    let run = lint(&sb, &policy, "f.txt");
    assert!(run.elapsed < Duration::from_secs(60), "{run:?}");
    assert_eq!(
        run.code(),
        3,
        "a linter that could not finish must not read as clean: {run:?}"
    );
    assert!(run.stdout.contains("\"unavailable\""), "{run:?}");
    assert!(run.stdout.contains("did not finish within 1s"), "{run:?}");
}
