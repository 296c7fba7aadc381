//! Doctor's probes of what the sandbox init and the seccomp additions promise: nothing of the
//! host is reachable (pathname and abstract Unix sockets, files' metadata outside every grant,
//! System V IPC objects, other processes in /proc, descriptors cordon inherited), no setuid
//! file can be made, `.git` cannot be renamed away and a symlinked `.git/hooks` breaks no
//! spawn, TCP port rules have no side door (Fast Open, MPTCP), and a command does not outlive
//! its cordon process killed with SIGKILL.
//!
//! Each probe sets up the host side here (a listener, a segment, a process to look for), runs
//! the attempt confined (mostly a `cordon probe`) and checks the host side afterwards.

use super::{DoctorError, ProbeResult, expect_refused, kill_processes_with_args, result, run_one};
use super::{pids_with_args, text_contains};
use crate::confine::Confinement;
use crate::confine::selftest::HostSysvObjects;
use crate::exec::Executor;
use crate::policy::Policy;
use crate::runtime::RuntimeOptions;
use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the probes share with the rest of doctor.
pub(super) struct Setup<'a> {
    pub executor: &'a Executor,
    pub confinement: &'a Confinement,
    pub policy: &'a Policy,
    pub options: &'a RuntimeOptions,
    pub workspace: &'a Path,
    pub outside: &'a Path,
    pub self_exe: &'a Path,
}

/// `cordon probe <name> [arg]`: the argv of this binary's confined self-test of one
/// operation (`self_exe` is this binary).
pub(super) fn probe_argv(self_exe: &Path, name: &str, arg: Option<String>) -> Vec<OsString> {
    let mut v = vec![self_exe.as_os_str().to_owned(), "probe".into(), name.into()];
    v.extend(arg.map(OsString::from));
    v
}

impl Setup<'_> {
    fn probe(&self, name: &str, arg: Option<String>) -> Vec<OsString> {
        probe_argv(self.self_exe, name, arg)
    }

    /// The `--policy` argument that loads the policy doctor runs under.
    fn policy_arg(&self) -> &str {
        self.policy
            .origin
            .strip_prefix("builtin:")
            .unwrap_or(&self.policy.origin)
    }

    /// `cordon exec` of this binary over the workspace, under the same policy.
    fn cordon_exec(&self, argv: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(self.self_exe);
        cmd.arg("exec")
            .arg("--workspace")
            .arg(self.workspace)
            .arg("--policy")
            .arg(self.policy_arg())
            .arg("--")
            .args(argv)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        cmd
    }
}

pub(super) async fn probes(s: &Setup<'_>) -> Result<Vec<ProbeResult>, DoctorError> {
    let mut probes = Vec::new();
    let token = format!("cordon-doctor-{}", std::process::id());

    probes.extend(host_unix_sockets(s, &token).await?);
    probes.extend(metadata_and_setuid(s).await?);
    probes.extend(host_ipc_and_processes(s, &token).await?);
    probes.push(inherited_descriptor(s).await?);
    probes.push(gone_after_sigkill_of_its_cordon(s).await);
    probes.extend(protected_git(s).await?);
    probes.extend(tcp_side_doors(s).await?);
    Ok(probes)
}

/// Unix sockets listening on the host: a pathname one outside the workspace, an abstract one.
async fn host_unix_sockets(s: &Setup<'_>, token: &str) -> Result<Vec<ProbeResult>, DoctorError> {
    let mut probes = Vec::new();
    let sock = s.outside.join("host.sock");
    let _pathname = std::os::unix::net::UnixListener::bind(&sock)?;
    let o = run_one(
        s.executor,
        s.probe("unix-connect", Some(sock.display().to_string())),
        10,
    )
    .await;
    probes.push(expect_refused(
        "connect to a Unix socket listening outside",
        &o,
        true,
    ));
    let abstract_name = format!("{token}-abstract");
    let _abstract = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())?;
        std::os::unix::net::UnixListener::bind_addr(&addr)?
    };
    let o = run_one(
        s.executor,
        s.probe("unix-connect", Some(format!("@{abstract_name}"))),
        10,
    )
    .await;
    probes.push(expect_refused(
        "connect to an abstract Unix socket of the host",
        &o,
        true,
    ));

    Ok(probes)
}

/// Metadata of a file outside every grant, and setuid files inside.
async fn metadata_and_setuid(s: &Setup<'_>) -> Result<Vec<ProbeResult>, DoctorError> {
    let mut probes = Vec::new();
    let target = s.outside.join("metadata-target");
    std::fs::write(&target, "x")?;
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644))?;
    let before = std::fs::metadata(&target)?;
    let o = run_one(
        s.executor,
        s.probe("metadata", Some(target.display().to_string())),
        10,
    )
    .await;
    let after = std::fs::metadata(&target)?;
    let unchanged = after.mode() == before.mode()
        && after.mtime() == before.mtime()
        && after.mtime_nsec() == before.mtime_nsec()
        && rustix::fs::getxattr(&target, "user.cordon-probe", &mut [0u8; 8][..]).is_err();
    probes.push(result(
        "chmod, chown, touch and setxattr a file outside",
        "denied",
        &o,
        |o| o.exit_code == Some(1) && unchanged,
    ));
    let shell_copy = s.workspace.join("cordon-doctor-sh");
    std::fs::copy("/bin/sh", &shell_copy)?;
    let o = run_one(
        s.executor,
        s.probe("setuid-chmod", Some(shell_copy.display().to_string())),
        10,
    )
    .await;
    let special = std::fs::metadata(&shell_copy)?.mode() & 0o6000;
    let file_caps =
        rustix::fs::getxattr(&shell_copy, "security.capability", &mut [0u8; 64][..]).is_ok();
    std::fs::remove_file(&shell_copy)?;
    probes.push(result(
        "setuid, setgid or file capability on a copied shell",
        "denied",
        &o,
        |o| o.exit_code == Some(1) && special == 0 && !file_caps,
    ));

    Ok(probes)
}

/// System V IPC made outside, and other processes in /proc.
async fn host_ipc_and_processes(
    s: &Setup<'_>,
    token: &str,
) -> Result<Vec<ProbeResult>, DoctorError> {
    let mut probes = Vec::new();
    // System V IPC made outside.
    let sysv = HostSysvObjects::create(format!("{token}-secret").as_bytes())?;
    let o = run_one(
        s.executor,
        s.probe("shm-read", Some(sysv.shm_id.to_string())),
        10,
    )
    .await;
    probes.push(expect_refused(
        "read a SysV shared-memory segment made outside",
        &o,
        true,
    ));
    let o = run_one(
        s.executor,
        s.probe("msg-read", Some(sysv.msq_id.to_string())),
        10,
    )
    .await;
    probes.push(expect_refused(
        "read a SysV message queue made outside",
        &o,
        true,
    ));
    drop(sysv);

    // Other processes in /proc: a host process whose command line carries the token.
    // A duration no other process has: sleep's only argument, and what the probe looks for.
    let host_token = format!("3602.{}", std::process::id());
    let mut host_process = std::process::Command::new("sleep").arg(&host_token).spawn();
    let o = run_one(s.executor, s.probe("proc-visible", Some(host_token)), 10).await;
    if let Ok(child) = &mut host_process {
        let _ = child.kill();
        let _ = child.wait();
    }
    probes.push(match host_process {
        Ok(_) => expect_refused("see a host process in /proc", &o, true),
        Err(e) => unavailable(
            "see a host process in /proc",
            &format!("cannot start sleep: {e}"),
        ),
    });

    Ok(probes)
}

fn unavailable(probe: &str, why: &str) -> ProbeResult {
    ProbeResult {
        probe: probe.to_owned(),
        expected: "denied".into(),
        observed: format!("could not run: {why}"),
        pass: false,
    }
}

/// `exec 7>>file; cordon exec -- sh -c 'echo X >&7'`: the descriptor cordon inherited must not
/// reach the command.
async fn inherited_descriptor(s: &Setup<'_>) -> Result<ProbeResult, DoctorError> {
    const PROBE: &str = "write through a descriptor cordon inherited";
    let target = s.outside.join("inherited-fd");
    std::fs::write(&target, "")?;
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(
            "exec 7>>\"$0\"; exec \"$1\" exec --workspace \"$2\" --policy \"$3\" -- \
             /bin/sh -c 'echo cordon-doctor >&7 && echo WROTE || echo refused'",
        )
        .arg(&target)
        .arg(s.self_exe)
        .arg(s.workspace)
        .arg(s.policy_arg())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(Duration::from_secs(30), cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Ok(unavailable(PROBE, &e.to_string())),
        Err(_) => return Ok(unavailable(PROBE, "cordon exec did not finish in 30 s")),
    };
    let written = std::fs::read(&target)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let pass = written.is_empty() && stdout.contains("refused");
    Ok(ProbeResult {
        probe: PROBE.into(),
        expected: "denied".into(),
        observed: format!(
            "{}; file has {} bytes; {}",
            out.status,
            written.len(),
            stdout.trim()
        ),
        pass,
    })
}

/// `cordon exec -- sleep DURATION` (a duration only this doctor uses), then SIGKILL of that cordon process: the sleep must be gone
/// within a few seconds, however cordon ended.
async fn gone_after_sigkill_of_its_cordon(s: &Setup<'_>) -> ProbeResult {
    const PROBE: &str = "the command is gone after kill -9 of its cordon";
    let duration = format!("3601.{}", std::process::id());
    let argv = ["sleep", duration.as_str()];
    let mut child = match s.cordon_exec(&argv).spawn() {
        Ok(c) => c,
        Err(e) => return unavailable(PROBE, &e.to_string()),
    };
    let started = poll(Duration::from_secs(20), || {
        !pids_with_args(&argv).is_empty()
    })
    .await;
    let _ = child.start_kill();
    let _ = child.wait().await;
    let killed_at = Instant::now();
    let gone = poll(Duration::from_secs(5), || pids_with_args(&argv).is_empty()).await;
    let survivors = pids_with_args(&argv).len();
    kill_processes_with_args(&argv);
    ProbeResult {
        probe: PROBE.into(),
        expected: "killed with it".into(),
        observed: if !started {
            "the command never started".into()
        } else if gone {
            format!("gone {} ms after the kill", killed_at.elapsed().as_millis())
        } else {
            format!("{survivors} still running 5 s after the kill")
        },
        pass: started && gone,
    }
}

async fn poll(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Renaming `.git` away (it is a mount point in the view) and a workspace whose `.git/hooks`
/// is a symbolic link (its own confinement, so the link exists when the view is built).
async fn protected_git(s: &Setup<'_>) -> Result<Vec<ProbeResult>, DoctorError> {
    let mut probes = Vec::new();
    if s.confinement.protects_paths() {
        let o = run_one(
            s.executor,
            super::sh("mv .git .git.orig || echo refused"),
            10,
        )
        .await;
        let git = s.workspace.join(".git");
        let moved = s.workspace.join(".git.orig");
        let intact = git.is_dir() && !moved.exists();
        if moved.exists() && !git.exists() {
            // Put it back so the later probes see the workspace they expect.
            std::fs::rename(&moved, &git)?;
        }
        probes.push(result("rename .git away", "denied (EBUSY)", &o, |o| {
            intact && text_contains(o, "refused")
        }));
    }

    let ws = tempfile::Builder::new()
        .prefix("cordon-doctor-ws-")
        .tempdir()?;
    let ws_path = ws.path().canonicalize()?;
    std::fs::create_dir_all(ws_path.join(".git"))?;
    std::fs::create_dir_all(ws_path.join("shared-hooks"))?;
    std::os::unix::fs::symlink("../shared-hooks", ws_path.join(".git/hooks"))?;
    let runtime = super::runtime_in(s.policy, &ws_path, s.options)?;
    let executor = &*runtime.executor;
    let reported = executor
        .confinement()
        .enforcement()
        .notes
        .iter()
        .any(|n| n.contains("symbolic link"));
    let o = run_one(executor, super::sh("echo ran"), 10).await;
    probes.push(result(
        "spawn with a symlinked .git/hooks",
        "runs; the link is reported",
        &o,
        |o| o.exit_code == Some(0) && text_contains(o, "ran") && reported,
    ));
    Ok(probes)
}

/// Under a policy with TCP rules (this policy with the `tcp` seccomp profile and one allowed
/// port): the allowed port works; a port not allowed is refused to a plain connect, to TCP Fast
/// Open and to MPTCP.
async fn tcp_side_doors(s: &Setup<'_>) -> Result<Vec<ProbeResult>, DoctorError> {
    let allowed = std::net::TcpListener::bind("127.0.0.1:0")?;
    let allowed_port = allowed.local_addr()?.port();
    let forbidden = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = forbidden.local_addr()?.port();
    let mut policy = s.policy.clone();
    // Port rules to any host: without the proxy (under it, ports name the sandbox's own
    // loopback, where the host's listener is not).
    policy.network.proxy = None;
    policy.network.tcp_connect = vec![allowed_port];
    policy.network.tcp_bind = Vec::new();
    policy.sandbox.seccomp_profile = "tcp".into();
    let runtime = super::runtime_in(&policy, s.workspace, s.options)?;
    let executor = &*runtime.executor;

    let mut probes = Vec::new();
    let o = run_one(
        executor,
        s.probe("tcp-connect", Some(allowed_port.to_string())),
        10,
    )
    .await;
    probes.push(expect_refused(
        &format!("TCP policy: connect to the allowed port :{allowed_port}"),
        &o,
        false,
    ));
    for (name, what) in [
        ("tcp-connect", "connect"),
        ("tcp-fastopen", "TCP Fast Open (MSG_FASTOPEN)"),
        ("mptcp", "MPTCP socket"),
    ] {
        let o = run_one(executor, s.probe(name, Some(port.to_string())), 10).await;
        probes.push(expect_refused(
            &format!("TCP policy: {what} to a port not allowed (:{port})"),
            &o,
            true,
        ));
    }
    drop((allowed, forbidden));
    Ok(probes)
}

/// The workspace's protected git files, made before the confinement is built so the view
/// holds their read-only binds.
pub(super) fn prepare_git(workspace: &Path) -> std::io::Result<PathBuf> {
    let git = workspace.join(".git");
    std::fs::create_dir_all(git.join("hooks"))?;
    std::fs::write(git.join("config"), "[core]\n")?;
    Ok(git)
}
