//! Fail closed: when the kernel lacks a feature the policy needs, cordon refuses to run
//! confined work and says which feature and how to fix it; `--allow-degraded` runs anyway and
//! says the enforcement level actually in force. The missing features are simulated with
//! `CORDON_SIMULATE_MISSING`, which can only take features away.

use crate::common::{CORDON, HANG_GUARD, run_guarded};
use std::process::Command;

fn exec_without(features: &str, extra: &[&str], script: &str) -> crate::common::Run {
    let ws = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(CORDON);
    cmd.env("CORDON_SIMULATE_MISSING", features)
        .arg("exec")
        .arg("--workspace")
        .arg(ws.path())
        .args(extra)
        .args(["--", "sh", "-c", script]);
    run_guarded(cmd, HANG_GUARD)
}

#[cordon_test::test]
fn missing_landlock_is_refused_with_the_fix() {
    let marker = tempfile::tempdir().unwrap();
    let ran = marker.path().join("ran");
    let run = exec_without("landlock", &[], &format!("touch '{}'", ran.display()));
    assert_eq!(run.code(), 2, "{run:?}");
    assert!(run.stderr.contains("Landlock ABI 6"), "{run:?}");
    assert!(run.stderr.contains("--allow-degraded"), "{run:?}");
    assert!(!ran.exists(), "the command ran although cordon refused");
}

#[cordon_test::test]
fn missing_seccomp_is_refused_with_the_fix() {
    let run = exec_without("seccomp", &[], "true");
    assert_eq!(run.code(), 2, "{run:?}");
    assert!(run.stderr.contains("seccomp"), "{run:?}");
}

#[cordon_test::test]
fn degraded_mode_runs_and_says_so() {
    let run = exec_without("landlock,seccomp", &["--allow-degraded"], "echo ran");
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(run.stdout, "ran\n");
    assert!(
        run.stderr
            .contains("cordon: enforcement degraded (NO Landlock, NO seccomp"),
        "{run:?}"
    );
}

#[cordon_test::test]
fn an_older_landlock_abi_is_reported_as_a_partial_ruleset() {
    // Below the required ABI, --allow-degraded applies what this ABI knows: reported as a
    // partial ruleset of that ABI, not as "NO Landlock".
    let run = exec_without("landlock-abi-5", &["--allow-degraded"], "echo ran");
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(run.stdout, "ran\n");
    assert!(
        run.stderr
            .contains("cordon: enforcement degraded (Landlock ABI 5 (partial"),
        "{run:?}"
    );
}

#[cordon_test::test]
fn without_cgroups_enforcement_is_reduced_and_memory_falls_back_to_rlimit_as() {
    let policy_dir = tempfile::tempdir().unwrap();
    let policy = policy_dir.path().join("small.toml");
    std::fs::write(
        &policy,
        "extends = \"default\"\n[limits]\nmemory_mb = 256\n",
    )
    .unwrap();
    let policy = policy.to_str().unwrap().to_owned();
    let run = exec_without(
        "cgroups",
        &["--policy", &policy],
        "head -c 1024M /dev/zero | tail",
    );
    assert!(
        run.stderr
            .contains("cordon: enforcement reduced (Landlock ABI"),
        "{run:?}"
    );
    assert!(
        run.stderr
            .contains("cordon: stopped by the memory limit (inferred"),
        "{run:?}"
    );
    assert_ne!(run.code(), 0, "{run:?}");
}
