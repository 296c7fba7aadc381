//! A call's cgroups are reset and reused for later calls instead of being removed and made
//! again (issue 34), and nothing an earlier call did in them is the next call's: not the
//! process or memory limit it hit, not its peak memory. Each test plays an earlier call that
//! hits a limit or uses much memory, then checks later calls' results, and from the host that
//! the groups were in fact reused (else the test would prove nothing).

use crate::common::{Need, skip};
use crate::stdio_server::{StdioServer, structured};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The names of the call groups (`call-N`) below the server's `cordon-<pid>-*` parents, in
/// every cgroup hierarchy mounted on the host.
fn call_groups(server_pid: i32) -> BTreeSet<String> {
    let prefix = format!("cordon-{server_pid}-");
    let mut names = BTreeSet::new();
    let mut stack: Vec<(PathBuf, usize)> = vec![(PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) && !name.ends_with("-server") {
                for call in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
                    let call = call.file_name().to_string_lossy().into_owned();
                    if call.starts_with("call-") {
                        names.insert(call);
                    }
                }
            } else if depth < 8 {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    names
}

fn shell(server: &mut StdioServer, command: &str) -> Value {
    let r = server.call(
        "shell_exec",
        json!({"command": command, "timeout_secs": 30}),
    );
    structured(&r).clone()
}

fn policy(dir: &Path, memory_mb: u64) -> String {
    let p = dir.join("policy.toml");
    std::fs::write(
        &p,
        format!("extends = \"default\"\n[limits]\nmemory_mb = {memory_mb}\npids = 32\n"),
    )
    .unwrap();
    p.to_string_lossy().into_owned()
}

/// The server's call groups once the teardown after its last answer is done; never empty
/// (else a check of their reuse would prove nothing).
fn settled_groups(pid: i32) -> BTreeSet<String> {
    std::thread::sleep(Duration::from_millis(500));
    let groups = call_groups(pid);
    assert!(
        !groups.is_empty(),
        "no call group of server {pid} was found below /sys/fs/cgroup: the check of reuse \
         would prove nothing"
    );
    groups
}

/// A server over a workspace of its own whose policy allows `memory_mb` and 32 pids per call,
/// with the directories it needs kept alive beside it.
struct Served {
    server: StdioServer,
    _dirs: [tempfile::TempDir; 2],
}

fn serve(memory_mb: u64) -> Served {
    let ws = tempfile::tempdir().unwrap();
    let etc = tempfile::tempdir().unwrap();
    let policy = policy(etc.path(), memory_mb);
    let server = StdioServer::start(ws.path(), &["--policy", &policy], "", &[]);
    Served {
        server,
        _dirs: [ws, etc],
    }
}

#[cordon_test::test]
fn a_limit_an_earlier_call_hit_is_not_reported_for_the_calls_that_reuse_its_groups() {
    let test = "a_limit_an_earlier_call_hit_is_not_reported_for_the_calls_that_reuse_its_groups";
    if skip(test, Need::Cgroups) {
        return;
    }
    let Served { mut server, _dirs } = serve(64);
    let pid = server.pid();
    // Several of each, so every group the warm pool holds has seen a limit hit.
    for _ in 0..4 {
        // More sleepers than the pids limit allows (the policy's command rules refuse the
        // classic bomb before it runs).
        let bomb = shell(
            &mut server,
            "i=0; while [ $i -lt 64 ]; do sleep 2 & i=$((i+1)); done 2>/dev/null; wait",
        );
        assert_eq!(
            bomb["limit"]["kind"], "pids",
            "the bomb was not stopped: {bomb}"
        );
        let balloon = shell(&mut server, "head -c 512M /dev/zero | tail > /dev/null");
        assert_eq!(
            balloon["limit"]["kind"], "memory",
            "the balloon was not stopped: {balloon}"
        );
    }
    let before = settled_groups(pid);
    for i in 0..12 {
        let r = shell(&mut server, "true");
        assert_eq!(r["exit_code"], 0, "call {i}: {r}");
        assert!(
            r["limit"].is_null(),
            "call {i} was reported as stopped by a limit an earlier call hit: {r}"
        );
    }
    let after = settled_groups(pid);
    let new: Vec<&String> = after.difference(&before).collect();
    assert!(
        new.len() <= 4,
        "12 calls made {} new call groups ({new:?}; before: {before:?}): the groups are not \
         reused",
        new.len()
    );
}

#[cordon_test::test]
fn a_jobs_peak_memory_counts_from_its_own_start_in_a_reused_group() {
    let test = "a_jobs_peak_memory_counts_from_its_own_start_in_a_reused_group";
    if skip(test, Need::Cgroups) {
        return;
    }
    let Served { mut server, _dirs } = serve(512);
    let pid = server.pid();
    // `tail` holds the one endless "line" in its own memory: ~160 MiB of anonymous pages.
    for _ in 0..5 {
        let r = shell(&mut server, "head -c 160M /dev/zero | tail > /dev/null");
        assert_eq!(r["exit_code"], 0, "{r}");
    }
    let before = settled_groups(pid);
    for i in 0..5 {
        let started = server.call(
            "shell_exec",
            json!({"command": "sleep 0.3", "background": true}),
        );
        let id = structured(&started)["job"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no job in the result: {started}"))
            .to_owned();
        let deadline = Instant::now() + Duration::from_secs(30);
        let ended = loop {
            let r = server.call("job", json!({"id": id, "wait_secs": 2}));
            let r = structured(&r).clone();
            if r["job"]["state"] != "running" || Instant::now() > deadline {
                break r;
            }
        };
        assert_eq!(ended["job"]["state"], "exited", "job {i}: {ended}");
        let peak = ended["peak_memory_bytes"]
            .as_u64()
            .unwrap_or_else(|| panic!("job {i} reported no peak memory: {ended}"));
        assert!(
            peak < 64 << 20,
            "job {i} (`sleep 0.3`) reported a peak of {} MiB: an earlier call's peak",
            peak >> 20
        );
    }
    let after = settled_groups(pid);
    assert!(
        after.difference(&before).count() <= 3,
        "the jobs ran in new groups (before {before:?}, after {after:?}): nothing was reused"
    );
}
