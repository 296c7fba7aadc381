//! Reusing a call's cgroups for a later call instead of removing them and making new ones
//! (issue 34): the `mkdir`s, limit writes, `cgroup.procs` opens and `rmdir`s of up to four
//! groups per call were a tenth of the server's CPU.
//!
//! A group goes back only when it is provably as good as new for what cordon reads from it:
//! no process and no child group left in any hierarchy, its peak memory reset where the kernel
//! allows it (v1's `memory.max_usage_in_bytes`, v2's per-descriptor `memory.peak` reset of
//! Linux 6.12+; where neither can be reset the group is removed), and the counters its result
//! is judged by (`memory.events`, `pids.events`, `memory.oom_control`, `cpu.stat`) recorded,
//! so the next call is judged by what they grow by. Limits are rewritten when the next call's
//! differ. A call cannot have changed any of this itself: its cgroup mounts are read-only.
//!
//! What a reused group keeps: the file pages earlier calls left charged to it. They are not
//! reclaimed on reset (that would evict the workspace's files from the page cache); the kernel
//! reclaims them when the next call needs the memory.

use super::{CallCgroup, keyed, keyed_counter, read_procs};
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

/// At most this many emptied groups wait for a call; more are removed. The warm pool and a
/// few concurrent calls' worth.
const KEPT: usize = 16;

/// Emptied, reset groups waiting for the next call.
#[derive(Debug, Default)]
pub(super) struct Pool {
    waiting: Mutex<Waiting>,
}

#[derive(Debug, Default)]
struct Waiting {
    groups: Vec<CallCgroup>,
    /// The parents are going away: nothing more is kept.
    closed: bool,
}

impl Pool {
    pub(super) fn take(&self) -> Option<CallCgroup> {
        self.waiting.lock().ok()?.groups.pop()
    }

    /// Keeps `group` for a later call, or (pool full or closed) lets it be removed.
    pub(super) fn give(&self, group: CallCgroup) {
        let rejected = match self.waiting.lock() {
            Ok(mut w) if !w.closed && w.groups.len() < KEPT => {
                w.groups.push(group);
                None
            }
            _ => Some(group),
        };
        // Outside the lock: its drop removes its directories.
        drop(rejected);
    }

    /// Stops keeping groups and hands back those waiting, to be removed.
    pub(super) fn close(&self) -> Vec<CallCgroup> {
        match self.waiting.lock() {
            Ok(mut w) => {
                w.closed = true;
                std::mem::take(&mut w.groups)
            }
            Err(_) => Vec::new(),
        }
    }
}

/// The counters a call's limit hits are read from.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counters {
    pub(super) v2_oom_kill: u64,
    pub(super) v2_memory_max: u64,
    pub(super) v2_oom: u64,
    pub(super) v2_pids_max: u64,
    pub(super) v1_oom_kill: u64,
    pub(super) v1_pids_max: u64,
    /// `cpu.stat`'s `usage_usec` (read for the baseline only; `cpu_usage` reads its own).
    pub(super) cpu_usec: u64,
}

impl Counters {
    /// The limit counters as they stand (not the CPU time).
    pub(super) fn read(call: &CallCgroup) -> Self {
        let mut c = Self::default();
        if let Some(f) = &call.v2_memory_events {
            let text = fs::read_to_string(f).unwrap_or_default();
            c.v2_oom_kill = keyed(&text, "oom_kill");
            c.v2_memory_max = keyed(&text, "max");
            c.v2_oom = keyed(&text, "oom");
        }
        if let Some(f) = &call.v2_pids_events {
            c.v2_pids_max = keyed_counter(f, "max");
        }
        if let Some(dir) = &call.v1_memory_dir {
            c.v1_oom_kill = keyed_counter(&dir.join("memory.oom_control"), "oom_kill");
        }
        if let Some(dir) = &call.v1_pids_dir {
            c.v1_pids_max = keyed_counter(&dir.join("pids.events"), "max");
        }
        c
    }
}

/// `usage_usec` of a v2 group's `cpu.stat` (present in every v2 group, hybrid hosts too).
pub(super) fn cpu_usec(dir: &Path) -> Option<u64> {
    let text = fs::read_to_string(dir.join("cpu.stat")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
}

/// Reads a number from the start of `file` (a `memory.peak` kept open since its reset).
pub(super) fn read_at_start(file: &fs::File) -> Option<u64> {
    let mut buf = [0u8; 32];
    let n = file.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// Makes an emptied call's groups ready for another call, taking them out of `call` (which is
/// left owning nothing). None, leaving `call` as it was, when any part cannot be made as good
/// as new: a process or a child group is left, or the peak memory cannot be reset.
pub(super) fn reset(call: &mut CallCgroup) -> Option<CallCgroup> {
    if call.dirs.iter().any(|dir| !read_procs(dir).is_empty()) {
        return None;
    }
    if let Some(dir) = &call.v2_dir
        && keyed_counter(&dir.join("cgroup.stat"), "nr_descendants") > 0
    {
        return None;
    }
    for dir in [&call.v1_memory_dir, &call.v1_pids_dir, &call.v1_cpu_dir]
        .into_iter()
        .flatten()
    {
        if has_child_group(dir) {
            return None;
        }
    }
    if let Some(dir) = &call.v1_memory_dir {
        // Writing 0 resets the maximum to the current usage.
        fs::OpenOptions::new()
            .write(true)
            .open(dir.join("memory.max_usage_in_bytes"))
            .and_then(|mut f| f.write_all(b"0"))
            .ok()?;
    }
    let mut peak = None;
    if let (Some(dir), Some(_), None) = (&call.v2_dir, &call.v2_memory_events, &call.v1_memory_dir)
    {
        // Any write resets the peak seen through this descriptor (Linux 6.12+; before, the
        // file is read-only and the open fails).
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join("memory.peak"))
            .ok()?;
        f.write_all(b"reset").ok()?;
        peak = Some(f);
    }
    let mut baseline = Counters::read(call);
    if let Some(dir) = &call.v2_dir {
        baseline.cpu_usec = cpu_usec(dir).unwrap_or(0);
    }
    let mut ready = std::mem::take(call);
    ready.baseline = baseline;
    ready.peak = peak;
    ready.pool = None;
    Some(ready)
}

/// Whether `dir` (a v1 group) has a group below it: its processes would not be listed in
/// `dir`'s `cgroup.procs`.
fn has_child_group(dir: &Path) -> bool {
    match fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .any(|e| e.file_type().is_ok_and(|t| t.is_dir())),
        Err(_) => true,
    }
}
