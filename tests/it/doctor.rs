//! `cordon doctor` passes every probe on a machine that gives full enforcement (under the
//! default policy and the other shipped ones), and its JSON report is well formed; so CI
//! proves the doctor's claims on its own kernel every run.

use crate::common::{CORDON, HANG_GUARD, Need, run_guarded, skip};
use std::process::Command;

#[cordon_test::test]
fn doctor_passes_every_probe_here() {
    if skip("doctor_passes_every_probe_here", Need::Cgroups) {
        return;
    }
    let mut cmd = Command::new(CORDON);
    cmd.args(["doctor", "--json"]);
    let run = run_guarded(cmd, HANG_GUARD);
    let report: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}): {run:?}"));
    let probes = report["probes"].as_array().expect("probes");
    assert!(probes.len() >= 36, "too few probes: {}", probes.len());
    let failed: Vec<&serde_json::Value> = probes.iter().filter(|p| p["pass"] != true).collect();
    assert!(failed.is_empty(), "failed probes: {failed:#?}");
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(report["enforcement"]["level"], "full");
    // Whether results carry the kernel's own record of each denial (issue 21), and why not.
    let kernel = report["kernel_denials"]["status"]
        .as_str()
        .unwrap_or_default();
    assert!(
        ["available", "possible", "unavailable"].contains(&kernel),
        "doctor reports kernel-reported denials: {}",
        report["kernel_denials"]
    );
    if kernel == "unavailable" {
        assert!(
            report["kernel_denials"]["reason"]
                .as_str()
                .is_some_and(|r| !r.is_empty()),
            "{}",
            report["kernel_denials"]
        );
    }
    for expected in [
        "read a secret outside the workspace",
        "i386 int 0x80 syscall",
        "outlive the call with a setsid daemon",
        // What the sandbox init and the seccomp additions promise (issue 9).
        "connect to a Unix socket listening outside",
        "connect to an abstract Unix socket of the host",
        "chmod, chown, touch and setxattr a file outside",
        "setuid, setgid or file capability on a copied shell",
        "read a SysV shared-memory segment made outside",
        "read a SysV message queue made outside",
        "see a host process in /proc",
        "write through a descriptor cordon inherited",
        "the command is gone after kill -9 of its cordon",
        "write a git hook (the operator's gitdir)",
        "write .git/config (a key that runs a command)",
        "rename .git away",
        "spawn with a symlinked .git/hooks",
    ] {
        assert!(
            probes.iter().any(|p| p["probe"] == expected),
            "probe `{expected}` missing"
        );
    }
    for prefix in [
        "TCP policy: connect to the allowed port",
        "TCP policy: connect to a port not allowed",
        "TCP policy: TCP Fast Open (MSG_FASTOPEN)",
        "TCP policy: MPTCP socket",
    ] {
        assert!(
            probes
                .iter()
                .any(|p| p["probe"].as_str().is_some_and(|n| n.starts_with(prefix))),
            "probe `{prefix}…` missing"
        );
    }
}

/// The shipped policies with other promises (TCP and UDP under `dev`, a read-only workspace
/// under `strict`): doctor's expectations follow the policy, so every probe passes there too.
#[cordon_test::test]
fn doctor_passes_every_probe_under_dev_and_strict() {
    if skip(
        "doctor_passes_every_probe_under_dev_and_strict",
        Need::Cgroups,
    ) {
        return;
    }
    for policy in ["dev", "strict"] {
        let mut cmd = Command::new(CORDON);
        cmd.args(["doctor", "--json", "--policy", policy]);
        let run = run_guarded(cmd, HANG_GUARD);
        let report: serde_json::Value = serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("doctor --json is not JSON ({e}): {run:?}"));
        let failed: Vec<&serde_json::Value> = report["probes"]
            .as_array()
            .expect("probes")
            .iter()
            .filter(|p| p["pass"] != true)
            .collect();
        assert!(failed.is_empty(), "{policy}: failed probes: {failed:#?}");
        assert_eq!(run.code(), 0, "{policy}: {run:?}");
    }
}

#[cordon_test::test]
fn doctor_bench_reports_interleaved_series_with_ratios_and_the_machine() {
    if crate::common::skip(
        "doctor_bench_reports_series",
        crate::common::Need::Namespaces,
    ) {
        return;
    }
    let out = std::process::Command::new(crate::common::CORDON)
        .args(["doctor", "--bench", "--n", "5", "--mcp", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Its shape, not its numbers.
    assert_eq!(report["rounds"], 5);
    let series = report["series"].as_array().unwrap();
    assert_eq!(series.len(), 3, "{report}");
    for s in series {
        assert_eq!(s["samples"], 5, "{s}");
        for key in ["median_ms", "p90_ms", "min_ms"] {
            assert!(s[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {s}");
        }
    }
    assert_eq!(report["ratio_to_bare_spawn"].as_object().unwrap().len(), 2);
    for key in ["kernel", "cgroups", "load_average", "enforcement"] {
        assert!(report["machine"][key].is_string(), "{key}: {report}");
    }
    assert!(report["machine"]["cpus"].as_u64().is_some_and(|c| c >= 1));
    // The confined call's path, step by step, in path order; together no longer than the
    // call (each median is at most the whole call's p90).
    let steps = report["steps"].as_array().unwrap();
    let names: Vec<_> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, cordon::testing::exec::steps::STEP_NAMES, "{report}");
    let whole_p90 = series[1]["p90_ms"].as_f64().unwrap();
    for step in steps {
        let median = step["median_ms"].as_f64().unwrap();
        assert!((0.0..=whole_p90).contains(&median), "{step} vs {whole_p90}");
    }
    assert!(
        steps[2]["median_ms"].as_f64().unwrap() > 0.0,
        "the program's own run takes time: {report}"
    );
    // Text mode says the same in lines a person reads.
    let text = std::process::Command::new(crate::common::CORDON)
        .args(["doctor", "--bench", "--n", "3"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("bare spawn of /bin/true")
            && text.contains("x bare")
            && text.contains("take a ready slot"),
        "{text}"
    );
}
