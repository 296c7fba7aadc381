//! `[jobs] forward` never relays the egress proxy's port: from the host's loopback it would
//! give every host process the sandbox's way out (the proxy, its allowed hosts, the
//! credentials it injects). `cordon policy check` and `serve` refuse such a policy and name
//! the port and why.

use crate::common::{CORDON, HANG_GUARD, Sandbox, run_guarded};
use std::process::Command;

#[cordon_test::test]
fn forwarding_the_proxys_port_is_refused_by_policy_check_and_serve() {
    let sb = Sandbox::new();
    for (base, forward) in [("dev", "[3128]"), ("default", "[\"3120-3130\"]")] {
        let policy = sb.policy(
            "forward.toml",
            &format!("extends = \"{base}\"\n[jobs]\nforward = {forward}\n"),
        );
        let mut cmd = Command::new(CORDON);
        cmd.args(["policy", "check", &policy]);
        let run = run_guarded(cmd, HANG_GUARD);
        assert_ne!(run.code(), 0, "{base}: accepted: {run:?}");
        let out = run.output();
        assert!(
            out.contains("jobs.forward")
                && out.contains("3128")
                && out.contains("egress proxy's port")
                && out.contains("network.proxy = true"),
            "{base}: {run:?}"
        );

        let mut cmd = Command::new(CORDON);
        cmd.args(["serve", "--workspace"])
            .arg(sb.ws())
            .args(["--policy", &policy]);
        let run = run_guarded(cmd, HANG_GUARD);
        assert_ne!(run.code(), 0, "{base}: served: {run:?}");
        assert!(run.stderr.contains("jobs.forward"), "{base}: {run:?}");
    }
    // A port beside it is still fine.
    let policy = sb.policy(
        "ok.toml",
        "extends = \"dev\"\n[jobs]\nforward = [3127, 3129]\n",
    );
    let mut cmd = Command::new(CORDON);
    cmd.args(["policy", "check", &policy]);
    let run = run_guarded(cmd, HANG_GUARD);
    assert_eq!(run.code(), 0, "{run:?}");
}
