//! `cordon doctor`: proves on the running kernel that the confinement holds.
//!
//! Reports what the kernel offers, then runs live probes under the selected policy, each
//! attempting something forbidden (or something that must keep working) in a real confined
//! child, and compares what happened with what the policy promises. Owns the probe list and
//! the report; the forbidden operations themselves live in `confine::selftest`.

pub(crate) mod bench;
mod isolation;
mod toolchains;

use crate::confine::KernelSupport;
use crate::exec::{CaptureSpec, ExecOutcome, ExecRequest, Executor, LimitKind, Program};
use crate::policy::Policy;
use crate::runtime::{Runtime, RuntimeOptions};
use serde::Serialize;
use std::ffi::OsString;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error("doctor setup: {0}")]
    Setup(#[from] std::io::Error),
    #[error(transparent)]
    Parser(#[from] crate::policy::commands::ExampleCheckError),
    #[error("doctor --bench: {0}")]
    Bench(String),
}

#[derive(Debug, Serialize)]
pub struct DoctorReport {
    pub kernel: KernelSupport,
    pub enforcement: crate::confine::Enforcement,
    pub policy: String,
    pub probes: Vec<ProbeResult>,
    /// Directories on the operator's PATH confined commands cannot see, each with the policy
    /// field that would grant it.
    pub invisible_toolchains: Vec<String>,
    /// Whether `serve` puts the kernel's own record of each Landlock denial in results
    /// (`denials` with source "kernel"), or why not (results then explain from stderr).
    pub kernel_denials: crate::confine::audit::Availability,
}

#[derive(Debug, Serialize)]
pub struct ProbeResult {
    pub probe: String,
    pub expected: String,
    pub observed: String,
    pub pass: bool,
}

impl DoctorReport {
    pub fn all_passed(&self) -> bool {
        self.probes.iter().all(|p| p.pass)
    }

    pub fn render_table(&self) -> String {
        let k = &self.kernel;
        let mut out = format!(
            "kernel {}  Landlock ABI {}  seccomp {}  user namespaces {}  root {}\n\
             policy {}  enforcement {}\n",
            k.kernel_release,
            k.landlock_abi,
            yes(k.seccomp_filter),
            yes(k.user_namespaces),
            yes(k.is_root),
            self.policy,
            self.enforcement.summary(),
        );
        for note in &self.enforcement.notes {
            out.push_str(&format!("  note: {note}\n"));
        }
        for note in &self.invisible_toolchains {
            out.push_str(&format!("  toolchain: {note}\n"));
        }
        use crate::confine::audit::Availability;
        out.push_str(&match &self.kernel_denials {
            Availability::Available { enabled_audit } => format!(
                "  kernel-reported denials: available (Landlock audit records{})\n",
                if *enabled_audit {
                    "; cordon turned audit on"
                } else {
                    ""
                }
            ),
            Availability::Possible { audit_enabled } => format!(
                "  kernel-reported denials: available to `cordon serve` (Landlock audit records; \
                 audit is {})\n",
                if *audit_enabled {
                    "on"
                } else {
                    "off: serve turns it on, host-wide, see SECURITY.md"
                }
            ),
            Availability::Unavailable { reason } => format!(
                "  kernel-reported denials: unavailable ({reason}); denials are explained from \
                 error messages\n"
            ),
        });
        let w = self
            .probes
            .iter()
            .map(|p| p.probe.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let e = self
            .probes
            .iter()
            .map(|p| p.expected.len())
            .max()
            .unwrap_or(8)
            .max(8);
        out.push_str(&format!(
            "\n{:w$}  {:e$}  {:4}  observed\n",
            "probe", "expected", "ok"
        ));
        for p in &self.probes {
            out.push_str(&format!(
                "{:w$}  {:e$}  {:4}  {}\n",
                p.probe,
                p.expected,
                if p.pass { "PASS" } else { "FAIL" },
                p.observed
            ));
        }
        let failed = self.probes.iter().filter(|p| !p.pass).count();
        out.push_str(&format!(
            "\n{} passed, {} failed\n",
            self.probes.len() - failed,
            failed
        ));
        out
    }
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// The runtime a group of probes runs under: `policy` over the workspace `ws`.
fn runtime_in(
    policy: &Policy,
    ws: &std::path::Path,
    options: &RuntimeOptions,
) -> Result<Runtime, DoctorError> {
    let options = RuntimeOptions {
        workspace: ws.to_path_buf(),
        ..options.clone()
    };
    Ok(Runtime::build(policy.clone(), options)?)
}

/// Runs every probe under `policy` in a throwaway workspace: the groups of SECURITY.md's
/// table in order (files, network, the egress proxy, the kernel attack surface, quotas and
/// lifetime, a toolchain, then the sandbox init's isolation), each a step of [`Lab`].
pub async fn run(policy: &Policy) -> Result<DoctorReport, DoctorError> {
    let kernel = KernelSupport::detect();
    let workspace = tempfile::Builder::new()
        .prefix("cordon-doctor-ws-")
        .tempdir()?;
    let outside = tempfile::Builder::new()
        .prefix("cordon-doctor-outside-")
        .tempdir()?;
    let secret = outside.path().join("secret.txt");
    let secret_text = format!("cordon-secret-{}", std::process::id());
    std::fs::write(&secret, &secret_text)?;
    let self_exe = std::env::current_exe()?;

    let options = RuntimeOptions {
        extra_read_exec: vec![self_exe.clone()],
        ..RuntimeOptions::default()
    };
    let ws = workspace.path().canonicalize()?;
    // Before the confinement is built: the view makes what exists then read-only.
    isolation::prepare_git(&ws)?;
    // A read-only workspace: its first writable directory must exist for its grant.
    let read_only = policy.filesystem.workspace == crate::policy::WorkspaceAccess::ReadOnly;
    let writable_dir = policy
        .filesystem
        .workspace_writable
        .first()
        .filter(|_| read_only)
        .cloned();
    if let Some(dir) = &writable_dir {
        std::fs::create_dir_all(ws.join(dir))?;
    }
    let runtime = runtime_in(policy, &ws, &options)?;
    let executor = &*runtime.executor;
    let confinement = executor.confinement();
    let lab = Lab {
        executor,
        confinement,
        policy,
        workspace: &ws,
        outside: outside.path(),
        secret: &secret,
        secret_text: &secret_text,
        self_exe: &self_exe,
        read_only,
        writable_dir,
    };
    let mut probes = Vec::new();
    lab.files(&mut probes).await;
    // Held until every probe ran, so its port stays this listener's.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    lab.network(&listener, &mut probes).await?;
    lab.egress(&mut probes).await;
    lab.kernel_surface(&mut probes).await;
    lab.quotas(&mut probes).await;
    lab.host_uid(&mut probes).await;
    lab.toolchain(&mut probes).await;
    probes.extend(
        isolation::probes(&isolation::Setup {
            executor,
            confinement,
            policy,
            options: &options,
            workspace: &ws,
            outside: outside.path(),
            self_exe: &self_exe,
        })
        .await?,
    );
    drop(listener);
    Ok(DoctorReport {
        kernel,
        enforcement: confinement.enforcement().clone(),
        policy: policy.origin.clone(),
        probes,
        invisible_toolchains: toolchains::invisible_on_path(
            policy,
            &std::env::var("PATH").unwrap_or_default(),
        ),
        kernel_denials: crate::confine::audit::probe(),
    })
}

/// What the probes of [`run`] share: the confined runtime's executor, the throwaway
/// workspace and the host directory outside it with its secret.
struct Lab<'a> {
    executor: &'a Executor,
    confinement: &'a crate::confine::Confinement,
    policy: &'a Policy,
    workspace: &'a std::path::Path,
    outside: &'a std::path::Path,
    secret: &'a std::path::Path,
    secret_text: &'a str,
    self_exe: &'a std::path::Path,
    /// The policy's workspace is read-only ...
    read_only: bool,
    /// ... and this, its first writable directory, is the exception.
    writable_dir: Option<String>,
}

impl Lab<'_> {
    /// `cordon probe <name> [arg]`: this binary's confined self-test of one operation.
    fn probe(&self, name: &str, arg: Option<String>) -> Vec<OsString> {
        isolation::probe_argv(self.self_exe, name, arg)
    }

    /// Files: a secret outside, /etc/shadow, writes outside, protected paths, writes inside.
    async fn files(&self, probes: &mut Vec<ProbeResult>) {
        let o = run_one(
            self.executor,
            sh(&format!("cat '{}'", self.secret.display())),
            10,
        )
        .await;
        let leaked = contains(&o, self.secret_text);
        probes.push(result(
            "read a secret outside the workspace",
            "denied",
            &o,
            |o| !leaked && o.exit_code != Some(0),
        ));
        if std::path::Path::new("/etc/shadow").exists() {
            let o = run_one(self.executor, sh("cat /etc/shadow"), 10).await;
            probes.push(result("read /etc/shadow", "denied", &o, |o| {
                o.exit_code != Some(0)
            }));
        }
        let target = self.outside.join("pwned");
        let o = run_one(
            self.executor,
            sh(&format!("echo x > '{}'", target.display())),
            10,
        )
        .await;
        probes.push(result("write outside the workspace", "denied", &o, |o| {
            !target.exists() && o.exit_code != Some(0)
        }));
        if self.confinement.protects_paths() {
            // Git by construction (SECURITY.md, "Git"): a call's git writes land in the
            // shadow gitdir; the operator's gitdir never gets a hook or a config key.
            let o = run_one(
                self.executor,
                sh("mkdir -p .git/hooks && echo 'echo pwned' > .git/hooks/pre-commit"),
                10,
            )
            .await;
            probes.push(result(
                "write a git hook (the operator's gitdir)",
                "kept in the shadow gitdir",
                &o,
                |_| !self.workspace.join(".git/hooks/pre-commit").exists(),
            ));
            let o = run_one(
                self.executor,
                sh("echo '[core] fsmonitor = pwned' >> .git/config"),
                10,
            )
            .await;
            let config =
                std::fs::read_to_string(self.workspace.join(".git/config")).unwrap_or_default();
            probes.push(result(
                "write .git/config (a key that runs a command)",
                "kept in the shadow gitdir",
                &o,
                |_| !config.contains("pwned"),
            ));
        }
        let o = run_one(
            self.executor,
            sh("echo ok > inside.txt && cat inside.txt"),
            10,
        )
        .await;
        if self.read_only {
            probes.push(result(
                "write inside the read-only workspace",
                "denied",
                &o,
                |o| o.exit_code != Some(0) && !self.workspace.join("inside.txt").exists(),
            ));
        } else {
            probes.push(result("write inside the workspace", "allowed", &o, |o| {
                o.exit_code == Some(0) && text_contains(o, "ok")
            }));
        }
        if let Some(dir) = &self.writable_dir {
            let script = format!("echo ok > '{dir}/inside.txt' && cat '{dir}/inside.txt'");
            let o = run_one(self.executor, sh(&script), 10).await;
            probes.push(result(
                &format!("write inside {dir}/ (workspace_writable)"),
                "allowed",
                &o,
                |o| o.exit_code == Some(0) && text_contains(o, "ok"),
            ));
        }
    }

    /// Network: TCP to a loopback listener of the host, UDP to the host's loopback.
    async fn network(
        &self,
        listener: &std::net::TcpListener,
        probes: &mut Vec<ProbeResult>,
    ) -> Result<(), DoctorError> {
        let port = listener.local_addr()?.port();
        let tcp_allowed = self.policy.network.tcp_connect.contains(&port);
        let o = run_one(
            self.executor,
            self.probe("tcp-connect", Some(port.to_string())),
            10,
        )
        .await;
        probes.push(expect_refused(
            &format!("TCP connect to a loopback listener (:{port})"),
            &o,
            !tcp_allowed,
        ));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0")?;
        let udp_port = udp.local_addr()?.port();
        let o = run_one(
            self.executor,
            self.probe("udp", Some(udp_port.to_string())),
            10,
        )
        .await;
        if self.confinement.enforcement().network_namespace {
            // The sandbox's own namespace: the send may succeed there (UDP is allowed on its
            // loopback), but the host's loopback, where the receiver is, must get nothing.
            udp.set_read_timeout(Some(std::time::Duration::from_millis(300)))?;
            let arrived = udp.recv_from(&mut [0u8; 64]).is_ok();
            probes.push(result(
                "UDP send to the host's loopback (from the sandbox's network namespace)",
                "nothing arrives",
                &o,
                |_| !arrived,
            ));
        } else {
            // `tcp_udp` lets UDP through (Landlock cannot restrict it before ABI 10).
            let udp_allowed = self.policy.sandbox.seccomp_profile == "tcp_udp";
            probes.push(expect_refused("UDP send to loopback", &o, !udp_allowed));
        }
        Ok(())
    }

    /// The egress proxy (proxy-mode policies): a host the policy does not list is refused by
    /// the proxy, before any lookup, and the refusal is in the call's result.
    async fn egress(&self, probes: &mut Vec<ProbeResult>) {
        if let Some(rules) = self.confinement.egress().map(|p| p.rules()) {
            const TARGET: &str = "cordon-doctor-probe.invalid:443";
            let listed = crate::egress::pattern::Target::parse_authority(TARGET)
                .map(|t| rules.judge(&t).is_ok())
                .unwrap_or(true);
            if !listed {
                let o = run_one(
                    self.executor,
                    self.probe("proxy-connect", Some(TARGET.into())),
                    10,
                )
                .await;
                probes.push(result(
                    "egress proxy: CONNECT to a host not in network.allow_hosts",
                    "refused by the proxy and reported",
                    &o,
                    |o| {
                        o.exit_code == Some(1)
                            && o.network.as_ref().is_some_and(|n| {
                                n.refused.iter().any(|r| {
                                    r.starts_with(&format!(
                                        "CONNECT {TARGET} refused: not in [network].allow_hosts"
                                    ))
                                })
                            })
                    },
                ));
            }
        }
    }

    /// The kernel attack surface: syscalls seccomp refuses, clone3, the i386 entry.
    async fn kernel_surface(&self, probes: &mut Vec<ProbeResult>) {
        for name in [
            "ptrace",
            "mount",
            "unshare",
            "clone-newuser",
            "bpf",
            "io_uring",
            "signal-parent",
            "x32",
        ] {
            let o = run_one(self.executor, self.probe(name, None), 10).await;
            probes.push(expect_refused(name, &o, true));
        }
        let o = run_one(self.executor, self.probe("clone3", None), 10).await;
        probes.push(result(
            "clone3 (must be ENOSYS so libc falls back to clone)",
            "ENOSYS",
            &o,
            |o| o.exit_code == Some(1) && text_contains(o, "os error 38"),
        ));
        let o = run_one(self.executor, self.probe("int80", None), 10).await;
        probes.push(result(
            "i386 int 0x80 syscall",
            "killed (SIGSYS)",
            &o,
            |o| o.signal == Some(libc::SIGSYS),
        ));
    }

    /// Quotas and lifetime: the pids and memory limits, a daemon that tries to outlive the call.
    async fn quotas(&self, probes: &mut Vec<ProbeResult>) {
        let bomb = format!(
            "i=0; while [ $i -lt {} ]; do sleep 30 & i=$((i+1)); done; wait",
            self.policy.limits.pids * 2
        );
        let o = run_one(self.executor, sh(&bomb), 20).await;
        probes.push(result(
            &format!(
                "start {} processes (pids limit {})",
                self.policy.limits.pids * 2,
                self.policy.limits.pids
            ),
            "pids limit hit",
            &o,
            |o| o.limit.as_ref().is_some_and(|l| l.kind == LimitKind::Pids),
        ));
        let balloon_mb = self.policy.limits.memory_bytes / (1024 * 1024) + 512;
        let o = run_one(
            self.executor,
            sh(&format!("head -c {balloon_mb}M /dev/zero | tail")),
            60,
        )
        .await;
        probes.push(result(
            &format!(
                "allocate {balloon_mb} MiB (memory limit {} MiB)",
                self.policy.limits.memory_bytes >> 20
            ),
            "memory limit hit",
            &o,
            |o| {
                o.limit
                    .as_ref()
                    .is_some_and(|l| l.kind == LimitKind::Memory)
            },
        ));
        let marker = 3000 + std::process::id() % 1000;
        let o = run_one(
            self.executor,
            // Wait until the daemon has really left the process group before the call ends;
            // otherwise a process-group kill could catch it and hide a missing cgroup.
            sh(&format!(
                "setsid sh -c 'touch .daemon-ready; exec sleep {marker}' & \
                 i=0; while [ ! -e .daemon-ready ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; \
                 echo started"
            )),
            10,
        )
        .await;
        let argv = ["sleep".to_owned(), marker.to_string()];
        let survivors = processes_with_args(&[&argv[0], &argv[1]]);
        // A survivor is this probe's failure, not something to leave running.
        kill_processes_with_args(&[&argv[0], &argv[1]]);
        probes.push(result(
            "outlive the call with a setsid daemon",
            "killed with the call",
            &o,
            |o| survivors == 0 && text_contains(o, "started"),
        ));
    }

    /// Who a call is on the host, and that a per-user kernel budget it exhausts is not the
    /// host root's: the call takes every inotify instance it can and holds them while this
    /// (unconfined) process makes one of its own.
    async fn host_uid(&self, probes: &mut Vec<ProbeResult>) {
        // Read from the host's side, as the kernel sees the call's process: the call's own
        // `/proc/self/uid_map` may be denied by the policy (strict grants little of /proc),
        // and what the call reports of itself is not evidence.
        // A duration no other program on the host sleeps for (the probe's process is found,
        // and afterwards killed, by its arguments).
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let marker = format!("30.{nanos:09}{}", std::process::id());
        let call = run_one(self.executor, sh(&format!("exec sleep {marker}")), 10);
        let seen = async {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            let mut uids = None;
            while uids.is_none() && std::time::Instant::now() < deadline {
                uids = pids_with_args(&["sleep", &marker])
                    .first()
                    .and_then(|pid| host_uids(*pid));
                if uids.is_none() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            kill_processes_with_args(&["sleep", &marker]);
            uids
        };
        let (_, uids) = tokio::join!(call, seen);
        // Real, effective, saved and filesystem uids: all four must be the mapped one.
        let mapped = uids.and_then(|u| u.iter().all(|&x| x == u[0]).then_some(u[0]));
        probes.push(ProbeResult {
            probe: "the call's host uid".into(),
            expected: "not 0".into(),
            observed: mapped.map_or_else(|| "unknown".into(), |u| format!("uid {u}")),
            pass: mapped.is_some_and(|u| u != 0)
                && mapped == Some(self.confinement.enforcement().calls_uid),
        });
        let call = run_one(
            self.executor,
            self.probe("inotify-hold", Some("1500".into())),
            20,
        );
        let host = async {
            tokio::time::sleep(Duration::from_millis(700)).await;
            match rustix::fs::inotify::init(rustix::fs::inotify::CreateFlags::CLOEXEC) {
                Ok(_fd) => Ok(()),
                Err(e) => Err(e),
            }
        };
        let (o, host) = tokio::join!(call, host);
        let mut result = result(
            "exhaust inotify instances (a per-user limit)",
            "call stopped, host unaffected",
            &o,
            |o| o.exit_code == Some(1) && host.is_ok(),
        );
        if let Err(e) = host {
            result.observed = format!(
                "{}; the host's own inotify_init1 failed: {e}",
                result.observed
            );
        }
        probes.push(result);
    }

    /// A granted toolchain runs: python3, where the host has it.
    async fn toolchain(&self, probes: &mut Vec<ProbeResult>) {
        if let Some(python) = ["/usr/bin/python3", "/usr/local/bin/python3"]
            .iter()
            .find(|p| std::path::Path::new(p).exists())
        {
            let o = run_one(
                self.executor,
                vec![(*python).into(), "-c".into(), "print(6*7)".into()],
                20,
            )
            .await;
            probes.push(result("run python3", "allowed", &o, |o| {
                text_contains(o, "42")
            }));
        }
    }
}

fn sh(script: &str) -> Vec<OsString> {
    vec![OsString::from("/bin/sh"), "-c".into(), script.into()]
}

async fn run_one(
    executor: &Executor,
    argv: Vec<OsString>,
    timeout_secs: u64,
) -> Option<ExecOutcome> {
    let spec = || CaptureSpec::in_memory(64 * 1024);
    let timeout = Duration::from_secs(timeout_secs);
    executor
        .run(ExecRequest::new(
            Program::new(argv),
            timeout,
            spec(),
            spec(),
        ))
        .await
        .ok()
}

fn contains(o: &Option<ExecOutcome>, needle: &str) -> bool {
    o.as_ref().is_some_and(|o| text_contains(o, needle))
}

fn text_contains(o: &ExecOutcome, needle: &str) -> bool {
    let all = [&o.stdout.head[..], &o.stdout.tail[..]].concat();
    String::from_utf8_lossy(&all).contains(needle)
}

fn describe(o: &ExecOutcome) -> String {
    let text = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .lines()
            .last()
            .unwrap_or("")
            .trim()
            .to_owned()
    };
    let mut s = match (o.exit_code, o.signal_name()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(sig)) => format!("killed by {sig}"),
        (None, None) => "no status".into(),
    };
    if let Some(l) = &o.limit {
        s.push_str(&format!("; {} ({})", l.kind.describe(), l.evidence));
    }
    let out = text(&o.stdout.head);
    let err = text(&o.stderr.head);
    for t in [out, err] {
        if !t.is_empty() {
            s.push_str(&format!("; {}", crate::text::at_most_chars(&t, 80)));
        }
    }
    s
}

fn result(
    probe: &str,
    expected: &str,
    o: &Option<ExecOutcome>,
    pass: impl Fn(&ExecOutcome) -> bool,
) -> ProbeResult {
    ProbeResult {
        probe: probe.to_owned(),
        expected: expected.to_owned(),
        observed: o.as_ref().map_or_else(|| "could not run".into(), describe),
        pass: o.as_ref().is_some_and(pass),
    }
}

/// A selftest probe: exit 1 = refused, 0 = allowed.
fn expect_refused(probe: &str, o: &Option<ExecOutcome>, refused: bool) -> ProbeResult {
    let expected_code = if refused { 1 } else { 0 };
    result(probe, if refused { "denied" } else { "allowed" }, o, |o| {
        o.exit_code == Some(expected_code)
    })
}

/// SIGKILLs every process whose argv is exactly `args`.
/// The four uids (real, effective, saved, filesystem) of a host process, from its status.
fn host_uids(pid: i32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    let uids: Vec<u32> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    (uids.len() == 4).then_some(uids)
}

fn kill_processes_with_args(args: &[&str]) {
    for pid in pids_with_args(args) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

fn pids_with_args(args: &[&str]) -> Vec<i32> {
    let want: Vec<u8> = args
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .parse::<i32>()
                        .ok()
                        .map(|p| (p, e.path()))
                })
                .filter(|(_, path)| std::fs::read(path.join("cmdline")).is_ok_and(|c| c == want))
                .map(|(pid, _)| pid)
                .collect()
        })
        .unwrap_or_default()
}

/// Counts live processes whose argv is exactly `args` (used to find survivors).
pub(crate) fn processes_with_args(args: &[&str]) -> usize {
    pids_with_args(args).len()
}
