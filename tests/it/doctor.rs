//! `cordon doctor` passes every probe on a machine that gives full enforcement, and its JSON
//! report is well formed; so CI proves the doctor's claims on its own kernel every run.

use crate::common::{CORDON, HANG_GUARD, Need, run_guarded, skip};
use std::process::Command;

#[test]
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
    assert!(probes.len() >= 18, "too few probes: {}", probes.len());
    let failed: Vec<&serde_json::Value> = probes.iter().filter(|p| p["pass"] != true).collect();
    assert!(failed.is_empty(), "failed probes: {failed:#?}");
    assert_eq!(run.code(), 0, "{run:?}");
    assert_eq!(report["enforcement"]["level"], "full");
    for expected in [
        "read a secret outside the workspace",
        "i386 int 0x80 syscall",
        "outlive the call with a setsid daemon",
    ] {
        assert!(
            probes.iter().any(|p| p["probe"] == expected),
            "probe `{expected}` missing"
        );
    }
}
