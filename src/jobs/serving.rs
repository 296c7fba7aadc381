//! Whether a job serves connections made inside the sandbox: what keeps a quiet dev server
//! from being ended as idle while later calls and interpreter cells use it.
//!
//! The kernel keeps no count of connections per listening socket, but it does per network
//! namespace: `PassiveOpens` in `/proc/<pid>/net/snmp`, the connections accepted there so
//! far. The sandbox's namespace is shared by its calls and jobs, so a job counts as serving
//! when that count grew since the last look and the job holds a listening socket then (its
//! descriptors' socket inodes among the namespace's listeners). That over-counts (a job that
//! listens is kept alive while another server of the sandbox is used), never under-counts,
//! and costs one small file read per look while nothing is accepted.
//!
//! Connections relayed from the host (`[jobs] forward`) are `forward`'s; this module owns
//! only the in-sandbox side.

use super::sockets::Members;
use std::collections::HashSet;

/// The most of `/proc/<pid>/net/snmp` read (it is about 2 KiB).
const MAX_SNMP: u64 = 64 * 1024;

/// What the last look saw, to tell whether the namespace accepted connections since.
#[derive(Debug, Default)]
pub(crate) struct ServingLook {
    passive_opens: Option<u64>,
}

impl ServingLook {
    /// Whether the job's namespace accepted a connection since the previous look while the
    /// job listens (see the module note). The first look only sets the baseline.
    pub(crate) fn served_since(&mut self, members: &Members) -> bool {
        let now = passive_opens(members);
        let before = std::mem::replace(&mut self.passive_opens, now);
        match (before, now) {
            (Some(before), Some(now)) if now > before => listens(members),
            _ => false,
        }
    }
}

/// Connections accepted so far in the network namespace of the job's processes.
fn passive_opens(members: &Members) -> Option<u64> {
    let pid = members.root.or_else(|| members.pids().first().copied())?;
    let bytes = super::sockets::read_bounded(&format!("/proc/{pid}/net/snmp"), MAX_SNMP)?;
    parse_passive_opens(&String::from_utf8_lossy(&bytes))
}

/// `PassiveOpens` from `/proc/net/snmp` text: the `Tcp:` header line names the columns, the
/// next `Tcp:` line holds the values.
fn parse_passive_opens(text: &str) -> Option<u64> {
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next()?, tcp.next()?);
    let column = names.split_whitespace().position(|n| n == "PassiveOpens")?;
    values.split_whitespace().nth(column)?.parse().ok()
}

/// Whether one of the job's processes holds a listening TCP socket (IPv4 or IPv6).
fn listens(members: &Members) -> bool {
    let Some(pid) = members.root.or_else(|| members.pids().first().copied()) else {
        return false;
    };
    let listeners: HashSet<u64> = [("tcp", false), ("tcp6", true)]
        .into_iter()
        .flat_map(|(table, v6)| {
            super::forward::read_listening(&format!("/proc/{pid}/net/{table}"), v6)
        })
        .map(|l| l.inode)
        .collect();
    !listeners.is_empty() && !members.socket_inodes().is_disjoint(&listeners)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passive_opens_is_read_from_the_tcp_lines() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails\n\
                    Tcp: 1 200 120000 -1 12 7 0\nUdp: InDatagrams\nUdp: 3\n";
        assert_eq!(parse_passive_opens(text), Some(7));
        assert_eq!(parse_passive_opens("Tcp: PassiveOpens\n"), None);
        assert_eq!(parse_passive_opens(""), None);
    }

    #[test]
    fn a_connection_accepted_by_a_listener_of_the_job_is_seen() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let members = Members {
            cgroup: None,
            root: Some(std::process::id()),
        };
        let mut look = ServingLook::default();
        assert!(!look.served_since(&members), "the first look is a baseline");
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _accepted = listener.accept().unwrap();
        assert!(look.served_since(&members));
    }
}
