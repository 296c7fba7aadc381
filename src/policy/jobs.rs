//! `[jobs]`: long-lived processes started by `shell_exec {background: true}`: how many a
//! client may keep, how long they live, how much of their output stays in memory, and which
//! host ports reach their servers.
//!
//! Owns the raw table as written, its validation (one error per field, saying what to write)
//! and the validated [`JobsPolicy`]. It does not run jobs (`jobs`) nor explain them
//! (`cli::policy`).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Most host ports `[jobs] forward` may name in all: each is a listening socket of the server.
pub(crate) const MAX_FORWARDED_PORTS: usize = 64;

/// `[jobs]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawJobs {
    pub max_per_session: Option<u64>,
    pub max_lifetime_secs: Option<u64>,
    pub idle_kill_secs: Option<u64>,
    pub ring_kb: Option<u64>,
    pub forward: Option<Vec<RawPort>>,
}

/// One entry of `forward`: a port (`3000`) or an inclusive range (`"8080-8089"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawPort {
    Port(i64),
    Range(String),
}

impl RawJobs {
    pub fn overlay(self, base: Self) -> Self {
        Self {
            max_per_session: self.max_per_session.or(base.max_per_session),
            max_lifetime_secs: self.max_lifetime_secs.or(base.max_lifetime_secs),
            idle_kill_secs: self.idle_kill_secs.or(base.idle_kill_secs),
            ring_kb: self.ring_kb.or(base.ring_kb),
            forward: self.forward.or(base.forward),
        }
    }
}

/// `[jobs]`, validated.
#[derive(Debug, Clone, Serialize)]
pub struct JobsPolicy {
    /// Jobs one client may have running at once; 0 disables `background`.
    pub max_per_session: usize,
    /// A job is killed this long after it started, whatever it does.
    #[serde(serialize_with = "secs")]
    pub max_lifetime: Duration,
    /// A job is killed when nobody read its output or wrote to it, it wrote no output and no
    /// forwarded connection reached its servers for this long (its session is warned first).
    #[serde(serialize_with = "secs")]
    pub idle_kill: Duration,
    /// Output kept in memory per job (and per stream), in bytes; the rest is in its log file.
    pub ring_bytes: usize,
    /// Host ports (on 127.0.0.1) relayed to the same port of the sandbox's loopback.
    pub forward: Vec<u16>,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

/// Defaults, as `policies/default.toml` writes them.
pub(crate) const DEFAULT_MAX_PER_SESSION: u64 = 4;
pub(crate) const DEFAULT_MAX_LIFETIME_SECS: u64 = 3600;
pub(crate) const DEFAULT_IDLE_KILL_SECS: u64 = 900;
pub(crate) const DEFAULT_RING_KB: u64 = 1024;

/// Largest `ring_kb`: four jobs a session at this size is already 256 MiB of server memory.
const MAX_RING_KB: u64 = 64 * 1024;
/// Most jobs per session: every one is a process tree with its own cgroups.
const MAX_PER_SESSION: u64 = 64;

/// Why `[jobs]` is not valid: the field and what to write instead.
#[derive(Debug, PartialEq, Eq)]
pub struct JobsError {
    pub field: &'static str,
    pub message: String,
}

impl JobsPolicy {
    /// Validates `raw`; a field left out takes its default.
    pub fn validate(raw: RawJobs) -> Result<Self, JobsError> {
        let err = |field: &'static str, message: String| JobsError { field, message };
        let max_per_session = raw.max_per_session.unwrap_or(DEFAULT_MAX_PER_SESSION);
        if max_per_session > MAX_PER_SESSION {
            return Err(err(
                "jobs.max_per_session",
                format!("{max_per_session} is above {MAX_PER_SESSION}; 0 disables jobs"),
            ));
        }
        let positive = |field: &'static str, v: Option<u64>, default: u64| match v {
            Some(0) => Err(err(field, "must be greater than 0".into())),
            v => Ok(v.unwrap_or(default)),
        };
        let max_lifetime = positive(
            "jobs.max_lifetime_secs",
            raw.max_lifetime_secs,
            DEFAULT_MAX_LIFETIME_SECS,
        )?;
        let idle_kill = positive(
            "jobs.idle_kill_secs",
            raw.idle_kill_secs,
            DEFAULT_IDLE_KILL_SECS,
        )?;
        let ring_kb = positive("jobs.ring_kb", raw.ring_kb, DEFAULT_RING_KB)?;
        if ring_kb > MAX_RING_KB {
            return Err(err(
                "jobs.ring_kb",
                format!(
                    "{ring_kb} is above {MAX_RING_KB} (64 MiB a job); the whole log is kept \
                     on disk anyway"
                ),
            ));
        }
        let forward = ports(raw.forward.unwrap_or_default())
            .and_then(refuse_proxy_port)
            .map_err(|message| err("jobs.forward", message))?;
        Ok(Self {
            max_per_session: max_per_session as usize,
            max_lifetime: Duration::from_secs(max_lifetime),
            idle_kill: Duration::from_secs(idle_kill),
            ring_bytes: ring_kb as usize * 1024,
            forward,
        })
    }

    pub fn enabled(&self) -> bool {
        self.max_per_session > 0
    }
}

impl Default for JobsPolicy {
    fn default() -> Self {
        Self::validate(RawJobs::default()).expect("the defaults are valid")
    }
}

/// Refuses the egress proxy's port: a relay from the host's loopback to it would hand every
/// host process the sandbox's way out (the proxy, the hosts it allows, and the credentials
/// it injects toward them), outside every call's attribution and rules. Refused whatever
/// `[network]` says, so a policy that `extends` this one and turns the proxy on cannot
/// expose it silently.
fn refuse_proxy_port(ports: Vec<u16>) -> Result<Vec<u16>, String> {
    let proxy = crate::egress::PROXY_PORT;
    if ports.contains(&proxy) {
        return Err(format!(
            "port {proxy} is the egress proxy's port inside the sandbox (fixed: it is where \
             `network.proxy = true` listens); forwarding it would let any process on the host \
             use the proxy and the credentials it injects. Forward the ports your dev servers \
             use, and run them on another port than {proxy}"
        ));
    }
    Ok(ports)
}

/// The ports `forward` names, sorted, each once.
fn ports(entries: Vec<RawPort>) -> Result<Vec<u16>, String> {
    let port = |v: i64, entry: &str| -> Result<u16, String> {
        u16::try_from(v).ok().filter(|&p| p > 0).ok_or_else(|| {
            format!("`{entry}` is not a port: write a number from 1 to 65535, or \"FROM-TO\"")
        })
    };
    let mut out = std::collections::BTreeSet::new();
    for entry in entries {
        let (from, to) = match entry {
            RawPort::Port(p) => {
                let p = port(p, &p.to_string())?;
                (p, p)
            }
            RawPort::Range(text) => {
                let bad = || {
                    format!("`{text}` is not a port range: write \"FROM-TO\", e.g. \"8080-8089\"")
                };
                let (a, b) = text.split_once('-').ok_or_else(bad)?;
                let a: i64 = a.trim().parse().map_err(|_| bad())?;
                let b: i64 = b.trim().parse().map_err(|_| bad())?;
                let (a, b) = (port(a, &text)?, port(b, &text)?);
                if a > b {
                    return Err(format!("`{text}`: the range ends before it starts"));
                }
                (a, b)
            }
        };
        for p in from..=to {
            out.insert(p);
            if out.len() > MAX_FORWARDED_PORTS {
                return Err(format!(
                    "names more than {MAX_FORWARDED_PORTS} ports; forward only the ports your \
                     dev servers use"
                ));
            }
        }
    }
    Ok(out.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(toml_text: &str) -> RawJobs {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn defaults_when_left_out() {
        let p = JobsPolicy::validate(RawJobs::default()).unwrap();
        assert_eq!(p.max_per_session, 4);
        assert_eq!(p.max_lifetime, Duration::from_secs(3600));
        assert_eq!(p.idle_kill, Duration::from_secs(900));
        assert_eq!(p.ring_bytes, 1024 * 1024);
        assert!(p.forward.is_empty());
        assert!(p.enabled());
    }

    #[test]
    fn forward_takes_ports_and_ranges() {
        let p = JobsPolicy::validate(raw("forward = [3000, \"8080-8082\", 3000]")).unwrap();
        assert_eq!(p.forward, vec![3000, 8080, 8081, 8082]);
    }

    #[test]
    fn bad_forward_entries_say_what_to_write() {
        for (text, needle) in [
            ("forward = [0]", "not a port"),
            ("forward = [70000]", "not a port"),
            ("forward = [\"80\"]", "FROM-TO"),
            ("forward = [\"90-80\"]", "ends before it starts"),
            ("forward = [\"1-1000\"]", "more than 64"),
            ("forward = [3128]", "egress proxy's port"),
            ("forward = [\"3120-3130\"]", "network.proxy = true"),
        ] {
            let e = JobsPolicy::validate(raw(text)).unwrap_err();
            assert_eq!(e.field, "jobs.forward", "{text}");
            assert!(e.message.contains(needle), "{text}: {}", e.message);
        }
    }

    #[test]
    fn zero_disables_but_zero_lifetimes_are_refused() {
        assert!(
            !JobsPolicy::validate(raw("max_per_session = 0"))
                .unwrap()
                .enabled()
        );
        for field in ["max_lifetime_secs", "idle_kill_secs", "ring_kb"] {
            let e = JobsPolicy::validate(raw(&format!("{field} = 0"))).unwrap_err();
            assert_eq!(e.field, format!("jobs.{field}"));
        }
        assert!(JobsPolicy::validate(raw("max_per_session = 1000")).is_err());
        assert!(JobsPolicy::validate(raw("ring_kb = 1000000")).is_err());
    }
}
