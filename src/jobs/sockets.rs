//! Which sockets a job's processes hold: how a forwarded port is told to be this job's.
//!
//! A listening socket's inode (in `/proc/net/tcp{,6}`) is matched against the `socket:[N]`
//! links in `/proc/<pid>/fd` of the job's processes: its cgroup's members where it has one,
//! otherwise its main process and that process's descendants. Every walk is bounded (processes
//! and descriptors), so a job with a fork or descriptor flood costs a bounded read, and an
//! inode found past the bound is simply not this job's.
//!
//! Owns only the reading; what the inodes are matched with is `forward`'s.

use std::collections::HashSet;
use std::path::PathBuf;

/// Processes looked at per job.
const MAX_PROCESSES: usize = 256;
/// Descriptors looked at per job, all its processes together.
const MAX_DESCRIPTORS: usize = 16_384;

/// Where a job's processes are found (in the server's PID namespace).
#[derive(Debug, Clone)]
pub struct Members {
    /// The job's cgroup directory (its `cgroup.procs`).
    pub cgroup: Option<PathBuf>,
    /// The job's first process: its main process, or the slot's reaper above it.
    pub root: Option<u32>,
}

impl Members {
    /// The inodes of every socket the job's processes hold now.
    pub fn socket_inodes(&self) -> HashSet<u64> {
        let mut inodes = HashSet::new();
        let mut budget = MAX_DESCRIPTORS;
        for pid in self.pids() {
            let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                continue;
            };
            for fd in fds.map_while(Result::ok) {
                if budget == 0 {
                    return inodes;
                }
                budget -= 1;
                if let Ok(target) = std::fs::read_link(fd.path())
                    && let Some(inode) = socket_inode(&target.to_string_lossy())
                {
                    inodes.insert(inode);
                }
            }
        }
        inodes
    }

    pub(super) fn pids(&self) -> Vec<u32> {
        if let Some(dir) = &self.cgroup
            && let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs"))
        {
            return text
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .take(MAX_PROCESSES)
                .collect();
        }
        let Some(root) = self.root else {
            return Vec::new();
        };
        // No cgroup: the tree below the first process, breadth first.
        let mut pids = vec![root];
        let mut next = 0;
        while next < pids.len() && pids.len() < MAX_PROCESSES {
            let pid = pids[next];
            next += 1;
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for task in tasks.map_while(Result::ok) {
                let children = std::fs::read_to_string(task.path().join("children"));
                for child in children.unwrap_or_default().split_whitespace() {
                    if let Ok(child) = child.parse()
                        && pids.len() < MAX_PROCESSES
                        && !pids.contains(&child)
                    {
                        pids.push(child);
                    }
                }
            }
        }
        pids
    }
}

/// The inode of a `socket:[N]` descriptor link.
/// At most `max` bytes of a file (a `/proc` entry of a job's process, which the process can
/// make long: its command line).
pub(super) fn read_bounded(path: &str, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(max)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_socket_of_this_process_is_found() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let inode = {
            use std::os::fd::AsRawFd;
            let link = std::fs::read_link(format!("/proc/self/fd/{}", listener.as_raw_fd()));
            socket_inode(&link.unwrap().to_string_lossy()).unwrap()
        };
        let me = Members {
            cgroup: None,
            root: Some(std::process::id()),
        };
        assert!(me.socket_inodes().contains(&inode));
        assert_eq!(socket_inode("pipe:[12]"), None);
    }
}
