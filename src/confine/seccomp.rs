//! The seccomp programs: everything Landlock does not cover (kernel attack surface, non-TCP
//! sockets, namespaces, ptrace).
//!
//! Profiles are seccompiler JSON (`sandbox-profiles/`, embedded), compiled once per policy in
//! the parent. Three things JSON cannot say are spliced in here, right after seccompiler's
//! architecture check: x32 syscall numbers are refused (seccompiler only checks
//! AUDIT_ARCH_X86_64, which x32 shares), and `clone3` and `fchmodat2` answer ENOSYS, so libc
//! falls back to `clone` and `fchmodat`, whose flags and mode the profile *can* inspect.
//! Where namespaces cannot be had, [`fallback_programs`] add what they would have hidden. Installing the programs is `child`'s job.

use seccompiler::{BpfProgram, TargetArch, sock_filter};
use std::path::Path;

const EMBEDDED: &[(&str, &str)] = &[
    (
        "default",
        include_str!("../../sandbox-profiles/default.json"),
    ),
    ("tcp", include_str!("../../sandbox-profiles/tcp.json")),
    (
        "tcp_udp",
        include_str!("../../sandbox-profiles/tcp_udp.json"),
    ),
];

/// The profile the sandbox init's calls get instead of a built-in one when the sandbox has
/// its own network namespace (see `confine::private_netns_seccomp`); never named by a policy.
pub(crate) const PRIVATE_NETNS: &str = "builtin:private_netns";
const PRIVATE_NETNS_TEXT: &str = include_str!("../../sandbox-profiles/private_netns.json");

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error(
        "seccomp profile `{0}` is neither built in (default, tcp, tcp_udp) nor a readable file"
    )]
    UnknownProfile(String),
    #[error("seccomp profile {origin}: {source}")]
    Compile {
        origin: String,
        source: seccompiler::Error,
    },
    #[error("seccomp profile {origin}: {message}")]
    Shape { origin: String, message: String },
    #[error("cannot read seccomp profile {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

/// Extra programs for the per-child path (no namespaces): System V IPC refused, and Unix
/// sockets unless `allow_unix_sockets` (the policy's `sandbox.fallback_unix_sockets`).
pub(crate) fn fallback_programs(allow_unix_sockets: bool) -> Result<Vec<BpfProgram>, SeccompError> {
    let mut sources = vec![(
        "builtin:fallback_sysv",
        include_str!("../../sandbox-profiles/fallback_sysv.json"),
    )];
    if !allow_unix_sockets {
        sources.push((
            "builtin:fallback_unix",
            include_str!("../../sandbox-profiles/fallback_unix.json"),
        ));
    }
    let mut out = Vec::new();
    for (origin, text) in sources {
        let map = seccompiler::compile_from_json(text.as_bytes(), TargetArch::x86_64).map_err(
            |source| SeccompError::Compile {
                origin: origin.to_owned(),
                source,
            },
        )?;
        out.extend(map.into_values());
    }
    Ok(out)
}

pub(crate) fn embedded_profile_names() -> Vec<&'static str> {
    EMBEDDED.iter().map(|(n, _)| *n).collect()
}

/// The syscalls that trace another process. The built-in profiles refuse them; where a call's
/// processes may trace each other ([`Tracing::OwnCall`]) they are left to Landlock, which lets
/// a process trace only processes of its own domain or one nested in it: the call's own tree,
/// never its reaper, another call, the sandbox init or the server.
pub(crate) const TRACE_SYSCALLS: &[&str] = &["ptrace", "process_vm_readv", "process_vm_writev"];

/// Whether a built-in profile keeps refusing [`TRACE_SYSCALLS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tracing {
    /// Refused (the profile as written).
    Refused,
    /// Left to Landlock's scoping: only ever chosen where Landlock is in force.
    OwnCall,
}

/// Compiles a profile (embedded name or JSON file) into the programs to install, in a stable
/// order, the first carrying the x32/clone3 prologue. `tracing` applies to the built-in
/// profiles; an operator's profile file is used as written.
pub(crate) fn compile_profile(
    name_or_path: &str,
    tracing: Tracing,
) -> Result<Vec<BpfProgram>, SeccompError> {
    let builtin = |origin: String, text: &str| -> Result<(String, String), SeccompError> {
        match tracing {
            Tracing::Refused => Ok((origin, text.to_owned())),
            Tracing::OwnCall => {
                let text = without_rules_for(text, TRACE_SYSCALLS).map_err(|message| {
                    SeccompError::Shape {
                        origin: origin.clone(),
                        message,
                    }
                })?;
                Ok((origin, text))
            }
        }
    };
    let (origin, text) = match EMBEDDED.iter().find(|(n, _)| *n == name_or_path) {
        Some((n, text)) => builtin(format!("builtin:{n}"), text)?,
        None if name_or_path == PRIVATE_NETNS => {
            builtin(PRIVATE_NETNS.to_owned(), PRIVATE_NETNS_TEXT)?
        }
        None if Path::new(name_or_path).is_file() => {
            let text =
                std::fs::read_to_string(name_or_path).map_err(|source| SeccompError::Read {
                    path: name_or_path.to_owned(),
                    source,
                })?;
            (name_or_path.to_owned(), text)
        }
        None => return Err(SeccompError::UnknownProfile(name_or_path.to_owned())),
    };
    let map =
        seccompiler::compile_from_json(text.as_bytes(), TargetArch::x86_64).map_err(|source| {
            SeccompError::Compile {
                origin: origin.clone(),
                source,
            }
        })?;
    let mut programs: Vec<(String, BpfProgram)> = map.into_iter().collect();
    programs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut programs: Vec<BpfProgram> = programs.into_iter().map(|(_, p)| p).collect();
    let Some(first) = programs.first_mut() else {
        return Err(SeccompError::Shape {
            origin,
            message: "defines no filter".into(),
        });
    };
    splice_prologue(first).map_err(|message| SeccompError::Shape { origin, message })?;
    Ok(programs)
}

/// `text` (seccompiler JSON) without the rules naming any of `syscalls`, in every filter.
fn without_rules_for(text: &str, syscalls: &[&str]) -> Result<String, String> {
    let mut profile: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let filters = profile
        .as_object_mut()
        .ok_or("not an object of filters")?
        .values_mut();
    for filter in filters {
        if let Some(rules) = filter.get_mut("filter").and_then(|r| r.as_array_mut()) {
            rules.retain(|rule| {
                rule.get("syscall")
                    .and_then(|s| s.as_str())
                    .is_none_or(|name| !syscalls.contains(&name))
            });
        }
    }
    serde_json::to_string(&profile).map_err(|e| e.to_string())
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const SECCOMP_DATA_ARCH: u32 = 4;
const SECCOMP_DATA_NR: u32 = 0;
const SYS_FCHMODAT2: u32 = 452;

fn splice_prologue(prog: &mut BpfProgram) -> Result<(), String> {
    // Refuse to patch a program whose start is not the arch check we expect: a seccompiler
    // upgrade that changed it would otherwise turn our relative jumps into nonsense.
    let expected = [
        (BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        (BPF_JEQ_K, AUDIT_ARCH_X86_64),
        (BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
    ];
    let matches = prog.len() > 3
        && expected
            .iter()
            .zip(prog.iter())
            .all(|(&(code, k), ins)| ins.code == code && ins.k == k)
        && prog[1].jt == 1
        && prog[1].jf == 0;
    if !matches {
        return Err(
            "unexpected architecture-check prologue; cannot add the x32/clone3 rules".into(),
        );
    }
    let enosys = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    prog.splice(
        3..3,
        [
            sock_filter {
                code: BPF_LD_W_ABS,
                jt: 0,
                jf: 0,
                k: SECCOMP_DATA_NR,
            },
            // x32 numbers carry bit 30: answer ENOSYS instead of letting them alias past the
            // deny rules.
            sock_filter {
                code: BPF_JGE_K,
                jt: 2,
                jf: 0,
                k: X32_SYSCALL_BIT,
            },
            sock_filter {
                code: BPF_JEQ_K,
                jt: 1,
                jf: 0,
                k: libc::SYS_clone3 as u32,
            },
            // fchmodat2 (Linux 6.6) carries its mode where the profile's setuid rules for
            // chmod/fchmod/fchmodat cannot name it (seccompiler has no number for it); libc
            // falls back to fchmodat on ENOSYS, which those rules do inspect.
            sock_filter {
                code: BPF_JEQ_K,
                jt: 0,
                jf: 1,
                k: SYS_FCHMODAT2,
            },
            sock_filter {
                code: BPF_RET_K,
                jt: 0,
                jf: 0,
                k: enosys,
            },
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_profiles_compile_with_prologue() {
        for name in embedded_profile_names().into_iter().chain([PRIVATE_NETNS]) {
            let progs = compile_profile(name, Tracing::Refused).unwrap();
            assert_eq!(progs[0][4].k, X32_SYSCALL_BIT, "{name}");
        }
    }

    #[test]
    fn unknown_profile_is_named() {
        let err = compile_profile("nope", Tracing::Refused)
            .unwrap_err()
            .to_string();
        assert!(err.contains("nope"), "{err}");
    }
}
