//! The Kubernetes manifests (sandbox-profiles/kubernetes/cordon.yaml, one workspace, and
//! cordon-team.yaml, a workspace per subject) against the Kubernetes API schemas, with PyPI's `kubernetes-validate` (it bundles the schemas: no cluster, no
//! network) in strict mode, so a misspelled or misplaced field fails CI. The policy the
//! manifest ships in its ConfigMap must pass `cordon policy check`, and the security context
//! must keep what the sandbox needs.

use crate::common::CORDON;
use crate::suites::missing_prerequisites;
use std::path::Path;
use std::process::Command;

const MANIFEST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/sandbox-profiles/kubernetes/cordon.yaml"
);
const TEAM_MANIFEST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/sandbox-profiles/kubernetes/cordon-team.yaml"
);
/// What every manifest's pod keeps: the confinement's needs and the scrape annotations.
const EVERY_MANIFEST_NEEDS: [&str; 7] = [
    "hostUsers: false",
    "procMount: Unmasked",
    "allowPrivilegeEscalation: false",
    "command: [\"cordon\", \"doctor\"]",
    // Scraped where `serve --http` serves its metrics (issue 21).
    "prometheus.io/scrape: \"true\"",
    "prometheus.io/port: \"8080\"",
    "prometheus.io/path: \"/metrics\"",
];

fn validate(path: &Path) -> Option<std::process::Output> {
    Command::new("kubernetes-validate")
        .args(["--strict", "--quiet"])
        .arg(path)
        .output()
        .ok()
}

#[cordon_test::test]
fn kubernetes_manifest_passes_the_schema_check() {
    for manifest in [MANIFEST, TEAM_MANIFEST] {
        let Some(out) = validate(Path::new(manifest)) else {
            return missing_prerequisites(
                "kubernetes_manifest_passes_the_schema_check",
                "kubernetes-validate is not installed",
                "python3 -m pip install kubernetes-validate==1.37.0 (as .ci/run does)",
            );
        };
        assert!(
            out.status.success(),
            "{manifest}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The check can fail: the same manifest with one field misspelled does.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.yaml");
    let text = std::fs::read_to_string(MANIFEST).unwrap();
    assert!(text.contains("readOnlyRootFilesystem"));
    std::fs::write(
        &broken,
        text.replace("readOnlyRootFilesystem", "readOnlyRootFileSystem"),
    )
    .unwrap();
    let out = validate(&broken).unwrap();
    assert!(
        !out.status.success(),
        "a misspelled field passed the schema check"
    );
}

#[cordon_test::test]
fn kubernetes_manifest_policy_is_valid_and_the_context_keeps_what_the_sandbox_needs() {
    let text = std::fs::read_to_string(MANIFEST).unwrap();
    check_policy_block(&text);
    for needed in EVERY_MANIFEST_NEEDS
        .iter()
        .chain(&["--http-token-env=CORDON_HTTP_TOKEN"])
    {
        assert!(text.contains(needed), "the manifest lost `{needed}`");
    }
}

/// Issue 36: the team manifest serves a workspace per subject from a StatefulSet's volume,
/// authenticates with a token file of holders and JWTs (both from Secrets), and its policy,
/// group policies included, passes `policy check`.
#[cordon_test::test]
fn kubernetes_team_manifest_serves_a_workspace_per_subject_from_secrets() {
    let text = std::fs::read_to_string(TEAM_MANIFEST).unwrap();
    let policy = check_policy_block(&text);
    assert!(
        policy.contains("[[server.http.group_policies]]"),
        "{policy}"
    );
    assert!(policy.contains("max_sessions_per_subject"), "{policy}");
    assert!(
        policy.contains("[server.http.oauth]"),
        "the whole block: {policy}"
    );
    for needed in EVERY_MANIFEST_NEEDS.iter().chain(&[
        "kind: StatefulSet",
        "volumeClaimTemplates:",
        "--workspaces=/workspaces",
        "--http-token-file=/etc/cordon-tokens/holders",
        "secretName: cordon-tokens",
        "secretName: cordon-jwks",
        "jwks_file = \"/etc/cordon-oauth/jwks.json\"",
    ]) {
        assert!(text.contains(needed), "the team manifest lost `{needed}`");
    }
}

/// The ConfigMap's `policy.toml: |` block, de-indented, checked with `cordon policy check`;
/// returns it.
fn check_policy_block(manifest: &str) -> String {
    let mut lines = manifest
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("policy.toml: |"));
    lines.next().expect("the ConfigMap holds policy.toml");
    let block: Vec<&str> = lines.take_while(|l| l.starts_with("    ")).collect();
    let policy: String = block.iter().map(|l| format!("{}\n", &l[4..])).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, &policy).unwrap();
    let out = Command::new(CORDON)
        .args(["policy", "check"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{policy}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    policy
}
