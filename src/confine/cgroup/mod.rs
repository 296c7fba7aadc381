//! Per-call cgroups: the quotas (memory, pids, CPU) and the kill switch for a call's whole
//! process tree. A call's groups, once emptied, are reset and kept for a later call
//! ([`reuse`]) rather than removed.
//!
//! Works on pure cgroup v2 hosts (controllers delegated to us), on hybrid hosts (limits from
//! the v1 controllers, `cgroup.kill` from the v2 tree, like the CI machines), and degrades to
//! nothing when no cgroup can be created (an unprivileged user without delegation); the
//! caller then falls back to process-group kill and rlimits and reports that. Files are
//! written directly: the only alternatives pull in D-Bus or pick v1 on hybrid hosts.

mod reuse;

use serde::Serialize;
use std::fs;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroup {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What cgroup machinery this process can use, with the directories it created for itself.
#[derive(Debug, Serialize)]
pub struct Cgroups {
    /// v2 directory under which per-call groups are made (kill switch, maybe limits).
    v2_parent: Option<PathBuf>,
    /// Whether memory/pids/cpu limits are available in the v2 tree.
    v2_limits: bool,
    /// v1 parents per controller, on hybrid or v1-only hosts.
    v1_memory: Option<PathBuf>,
    v1_pids: Option<PathBuf>,
    v1_cpu: Option<PathBuf>,
    /// The names of the v1 hierarchies holding those parents (`memory`, `cpu,cpuacct`), which
    /// are also their mount options.
    #[serde(skip)]
    v1_hierarchies: Vec<String>,
    #[serde(skip)]
    next_call: AtomicU64,
    /// Groups calls emptied, reset and waiting for the next call.
    #[serde(skip)]
    pool: Arc<reuse::Pool>,
    /// Why something is missing, for `doctor` and the enforcement report.
    pub notes: Vec<String>,
}

/// What the host's cgroups give us, in one word for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupMode {
    /// v2 with memory, pids and cpu delegated.
    V2,
    /// v1 controllers for limits plus v2 `cgroup.kill` (hybrid hosts).
    Hybrid,
    /// v1 controllers only: limits, kill by signalling every member.
    V1,
    /// v2 kill switch without limits.
    KillOnly,
    /// No cgroups: process-group kill and rlimits only.
    None,
}

impl Cgroups {
    /// Looks at /proc/self/cgroup and the cgroup mounts and creates `cordon-<pid>` parents
    /// where it may. Never fails: what cannot be had is recorded in `notes`.
    pub fn setup() -> Self {
        let mut me = Self {
            v2_parent: None,
            v2_limits: false,
            v1_memory: None,
            v1_pids: None,
            v1_cpu: None,
            v1_hierarchies: Vec::new(),
            next_call: AtomicU64::new(1),
            pool: Arc::default(),
            notes: Vec::new(),
        };
        if super::kernel::simulated_missing("cgroups") {
            me.notes
                .push("cgroups treated as unavailable (CORDON_SIMULATE_MISSING)".into());
            return me;
        }
        let mounts = CgroupMounts::read();
        let own = OwnCgroups::read();
        // Unique per Cgroups in this process too (tests and benches build several).
        static INSTANCE: AtomicU64 = AtomicU64::new(0);
        let label = format!(
            "cordon-{}-{}",
            std::process::id(),
            INSTANCE.fetch_add(1, Ordering::Relaxed)
        );

        if let (Some(mount), Some(path)) = (&mounts.v2, &own.v2) {
            let own_dir = join_cgroup(mount, path);
            remove_stale_parents(&own_dir);
            let parent = own_dir.join(&label);
            match fs::create_dir(&parent) {
                Ok(()) => {
                    me.v2_limits = enable_v2_controllers(&own_dir, &parent, &mut me.notes);
                    me.v2_parent = Some(parent);
                }
                Err(e) => me
                    .notes
                    .push(format!("cannot create {}: {e}", parent.display())),
            }
        } else {
            me.notes.push("no cgroup v2 hierarchy mounted".into());
        }

        let rcu_note = mounts
            .v2
            .as_ref()
            .filter(|_| !mounts.v2_favordynmods)
            .map(|(m, _)| {
                format!(
                    "each call's cgroup join waits for an RCU grace period (typically 5-20 ms); \
                 `mount -o remount,favordynmods {}` removes most of that wait at a small \
                 cost to fork/exit host-wide (Linux 6.0+)",
                    m.display()
                )
            });
        if !me.v2_limits {
            for (controller, slot) in [
                ("memory", &mut me.v1_memory),
                ("pids", &mut me.v1_pids),
                ("cpu", &mut me.v1_cpu),
            ] {
                let (Some(mount), Some(path)) = (mounts.v1.get(controller), own.v1.get(controller))
                else {
                    me.notes.push(format!("no v1 `{controller}` controller"));
                    continue;
                };
                let own_dir = join_cgroup(mount, path);
                remove_stale_parents(&own_dir);
                let parent = own_dir.join(&label);
                match fs::create_dir(&parent) {
                    Ok(()) => {
                        *slot = Some(parent);
                        if let Some(name) = mount.0.file_name().and_then(|n| n.to_str())
                            && !me.v1_hierarchies.iter().any(|h| h == name)
                        {
                            me.v1_hierarchies.push(name.to_owned());
                        }
                    }
                    Err(e) => me
                        .notes
                        .push(format!("cannot create {}: {e}", parent.display())),
                }
            }
        }
        let in_use = me.v2_parent.is_some() || me.v1_memory.is_some() || me.v1_pids.is_some();
        if let (true, Some(note)) = (in_use, rcu_note) {
            me.notes.push(note);
        }
        me
    }

    pub fn mode(&self) -> CgroupMode {
        let v1_limits = self.v1_memory.is_some() && self.v1_pids.is_some();
        match (&self.v2_parent, self.v2_limits, v1_limits) {
            (Some(_), true, _) => CgroupMode::V2,
            (Some(_), false, true) => CgroupMode::Hybrid,
            (None, _, true) => CgroupMode::V1,
            (Some(_), false, false) => CgroupMode::KillOnly,
            (None, _, false) => CgroupMode::None,
        }
    }

    /// The hierarchies a slot mounts at `/sys/fs/cgroup` under a cgroup namespace rooted at
    /// its call's groups: the v2 tree where it carries the limits, else the v1 controllers'.
    pub fn view_mounts(&self) -> Vec<crate::confine::sandbox_init::plan::CgroupMount> {
        use crate::confine::sandbox_init::plan::CgroupMount;
        match self.mode() {
            CgroupMode::V2 => vec![CgroupMount {
                fstype: "cgroup2".into(),
                options: String::new(),
                subdir: String::new(),
            }],
            CgroupMode::Hybrid | CgroupMode::V1 => self
                .v1_hierarchies
                .iter()
                .map(|name| CgroupMount {
                    fstype: "cgroup".into(),
                    options: name.clone(),
                    subdir: name.clone(),
                })
                .collect(),
            CgroupMode::KillOnly | CgroupMode::None => Vec::new(),
        }
    }

    pub fn has_limits(&self) -> bool {
        matches!(
            self.mode(),
            CgroupMode::V2 | CgroupMode::Hybrid | CgroupMode::V1
        )
    }

    /// Creates the groups for one call with its limits written, and opens their
    /// `cgroup.procs` for the child to join.
    /// A call cgroup with `limits` where this host has cgroups; None where it has none (the
    /// one place that decides, for calls, warm slots, workers and spares).
    pub fn create_call_if_any(
        &self,
        limits: &CallLimits,
    ) -> Result<Option<CallCgroup>, CgroupError> {
        if matches!(self.mode(), CgroupMode::None) {
            return Ok(None);
        }
        self.create_call(limits).map(Some)
    }

    /// A group for one call with `limits` written: one an earlier call emptied, reset (see
    /// [`reuse`]), or a new one. Their `cgroup.procs` are open for the child to join.
    pub fn create_call(&self, limits: &CallLimits) -> Result<CallCgroup, CgroupError> {
        if let Some(mut call) = self.pool.take() {
            // A limit that cannot be rewritten (v1 refuses a memory limit below what the
            // group still has charged) sends the group back to be removed.
            if call.write_limits(limits).is_ok() {
                call.pool = Some(Arc::clone(&self.pool));
                return Ok(call);
            }
        }
        let name = format!("call-{}", self.next_call.fetch_add(1, Ordering::Relaxed));
        let mut call = CallCgroup::default();
        if let Some(parent) = &self.v2_parent {
            let dir = parent.join(&name);
            fs::create_dir(&dir).map_err(io_err(&dir))?;
            call.dirs.push(dir.clone());
            if self.v2_limits {
                call.v2_memory_events = Some(dir.join("memory.events"));
                call.v2_pids_events = Some(dir.join("pids.events"));
            }
            call.v2_dir = Some(dir);
        }
        for (parent, slot) in [
            (&self.v1_memory, &mut call.v1_memory_dir),
            (&self.v1_pids, &mut call.v1_pids_dir),
            (&self.v1_cpu, &mut call.v1_cpu_dir),
        ] {
            if let Some(parent) = parent {
                let dir = parent.join(&name);
                fs::create_dir(&dir).map_err(io_err(&dir))?;
                call.dirs.push(dir.clone());
                *slot = Some(dir);
            }
        }
        call.write_limits(limits)?;
        for dir in &call.dirs {
            let procs = dir.join("cgroup.procs");
            let file = fs::OpenOptions::new()
                .write(true)
                .open(&procs)
                .map_err(io_err(&procs))?;
            call.procs_fds.push(OwnedFd::from(file));
        }
        call.pool = Some(Arc::clone(&self.pool));
        Ok(call)
    }

    /// Starts, on a thread of its own, the wait that the first cgroup migration after a quiet
    /// moment pays, so that a one-shot command's slot (which joins its cgroups on the
    /// critical path) finds it over or under way. Every write to a `cgroup.procs` takes the
    /// kernel's global `cgroup_threadgroup_rwsem` for writing, which waits for an RCU grace
    /// period (5-16 ms measured here) unless a writer went before within about one grace
    /// period (or the v2 mount has `favordynmods`). The write moves this process into the
    /// group it is already in: nothing changes, only the lock is taken. Done after `setup`,
    /// which may itself move this process (into a leaf, on v2). Best effort.
    pub fn prime_migrations(&self) {
        if matches!(self.mode(), CgroupMode::None) {
            return;
        }
        let _ = std::thread::Builder::new()
            .name("cordon-cgprime".into())
            .spawn(|| {
                let mounts = CgroupMounts::read();
                let own = OwnCgroups::read();
                let v1 = ["pids", "memory", "cpu"]
                    .iter()
                    .find_map(|c| Some(join_cgroup(mounts.v1.get(*c)?, own.v1.get(*c)?)));
                let dir = v1.or_else(|| {
                    let (m, p) = (mounts.v2.as_ref()?, own.v2.as_ref()?);
                    Some(join_cgroup(m, p))
                });
                if let Some(dir) = dir {
                    let _ = write_file(&dir.join("cgroup.procs"), &std::process::id().to_string());
                }
            });
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        // The emptied groups waiting for a call go first: their parents cannot be removed
        // while they exist. Groups still in use are removed by their own drop.
        drop(self.pool.close());
        for dir in [
            &self.v2_parent,
            &self.v1_memory,
            &self.v1_pids,
            &self.v1_cpu,
        ]
        .into_iter()
        .flatten()
        {
            let _ = fs::remove_dir(dir);
        }
    }
}

const CPU_PERIOD_US: u64 = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    pub memory_bytes: u64,
    pub pids: u64,
    pub cpu_percent: u64,
}

/// One call's groups. Dropping it kills whatever is left in them; then they are reset for a
/// later call (see [`reuse`]) or, where they cannot be, removed.
#[derive(Debug, Default)]
pub struct CallCgroup {
    dirs: Vec<PathBuf>,
    procs_fds: Vec<OwnedFd>,
    v2_dir: Option<PathBuf>,
    v2_memory_events: Option<PathBuf>,
    v2_pids_events: Option<PathBuf>,
    v1_memory_dir: Option<PathBuf>,
    v1_pids_dir: Option<PathBuf>,
    v1_cpu_dir: Option<PathBuf>,
    /// The limits written in the groups now.
    limits: Option<CallLimits>,
    /// The counters as they stood when the groups were handed to this call (zero for new
    /// groups): what the call did is what they grew by.
    baseline: reuse::Counters,
    /// v2's `memory.peak`, opened and reset when the group was reset: reads through this
    /// descriptor give the peak since then (Linux 6.12+).
    peak: Option<fs::File>,
    /// Where the groups go back once emptied; None for groups waiting there.
    pool: Option<Arc<reuse::Pool>>,
}

/// Which cgroup limits the call's processes ran into.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LimitHits {
    pub memory: bool,
    pub pids: bool,
}

impl CallCgroup {
    pub fn procs_fds(&self) -> &[OwnedFd] {
        &self.procs_fds
    }

    /// The `cgroup.procs` file of each of the call's groups (they list the same processes):
    /// where the kernel says which processes are the call's.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Kills every process in the call's groups and waits (bounded) until they are gone.
    /// Returns whether the groups were empty at the end.
    pub fn kill_all(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        if let Some(dir) = &self.v2_dir {
            // Usually the tree is already gone when the main process exits; one read of
            // cgroup.events is far cheaper than a kill and a poll.
            if !v2_populated(dir) {
                return true;
            }
        }
        if let Some(dir) = &self.v2_dir
            && write_file(&dir.join("cgroup.kill"), "1").is_ok()
        {
            while Instant::now() < deadline {
                if !v2_populated(dir) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            return !v2_populated(dir);
        }
        // v1 only: signal every member until none is left (a forking tree may add members
        // between a read and the kills, hence the loop).
        let Some(dir) = self.v1_pids_dir.as_ref().or(self.v1_memory_dir.as_ref()) else {
            return true;
        };
        loop {
            let pids = read_procs(dir);
            if pids.is_empty() {
                return true;
            }
            for pid in pids {
                if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The processes in the call's group right now (thread-group ids, as `cgroup.procs` lists
    /// them; exited ones are not listed), or None when there is no group to ask.
    pub fn member_pids(&self) -> Option<Vec<i32>> {
        Some(read_procs(self.procs_dir()?))
    }

    /// The directory whose `cgroup.procs` lists the call's processes.
    pub fn procs_dir(&self) -> Option<&Path> {
        self.v2_dir
            .as_deref()
            .or(self.v1_pids_dir.as_deref())
            .or(self.v1_memory_dir.as_deref())
    }

    pub fn limit_hits(&self) -> LimitHits {
        let now = reuse::Counters::read(self);
        let grew = |f: fn(&reuse::Counters) -> u64| f(&now).saturating_sub(f(&self.baseline)) > 0;
        LimitHits {
            memory: grew(|c| c.v2_oom_kill)
                || grew(|c| c.v2_memory_max) && grew(|c| c.v2_oom)
                || grew(|c| c.v1_oom_kill),
            pids: grew(|c| c.v2_pids_max) || grew(|c| c.v1_pids_max),
        }
    }

    /// CPU time the call's tree has used (all its processes, living and reaped), where the
    /// kernel reports it: v2's `cpu.stat`, present in every v2 group (hybrid hosts too).
    pub fn cpu_usage(&self) -> Option<Duration> {
        let used = reuse::cpu_usec(self.v2_dir.as_ref()?)?;
        Some(Duration::from_micros(
            used.saturating_sub(self.baseline.cpu_usec),
        ))
    }

    /// Peak memory of the call's tree in bytes, where the kernel reports it. For a reused
    /// group the peak counts from its reset, which starts at what an earlier call left charged
    /// (file pages it read or wrote, reclaimed when memory is short).
    pub fn memory_peak(&self) -> Option<u64> {
        let from = |p: PathBuf| fs::read_to_string(p).ok()?.trim().parse().ok();
        self.v1_memory_dir
            .as_ref()
            .and_then(|d| from(d.join("memory.max_usage_in_bytes")))
            .or_else(|| self.peak.as_ref().and_then(reuse::read_at_start))
            .or_else(|| {
                self.v2_dir
                    .as_ref()
                    .and_then(|d| from(d.join("memory.peak")))
            })
    }

    /// Writes `limits` into the groups, skipping what is already there.
    fn write_limits(&mut self, limits: &CallLimits) -> Result<(), CgroupError> {
        if self.limits.as_ref() == Some(limits) {
            return Ok(());
        }
        self.limits = None;
        let cpu_quota = limits.cpu_percent * CPU_PERIOD_US / 100;
        if let (Some(dir), Some(_)) = (&self.v2_dir, &self.v2_memory_events) {
            write_file(&dir.join("memory.max"), &limits.memory_bytes.to_string())?;
            write_optional(&dir.join("memory.swap.max"), "0");
            write_file(&dir.join("pids.max"), &limits.pids.to_string())?;
            write_file(
                &dir.join("cpu.max"),
                &format!("{cpu_quota} {CPU_PERIOD_US}"),
            )?;
        }
        if let Some(dir) = &self.v1_memory_dir {
            write_file(
                &dir.join("memory.limit_in_bytes"),
                &limits.memory_bytes.to_string(),
            )?;
            // Swap accounting exists only with swapaccount=1; without it swap is unlimited
            // only if the host has swap at all.
            write_optional(
                &dir.join("memory.memsw.limit_in_bytes"),
                &limits.memory_bytes.to_string(),
            );
        }
        if let Some(dir) = &self.v1_pids_dir {
            write_file(&dir.join("pids.max"), &limits.pids.to_string())?;
        }
        if let Some(dir) = &self.v1_cpu_dir {
            write_file(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
            write_file(&dir.join("cpu.cfs_quota_us"), &cpu_quota.to_string())?;
        }
        self.limits = Some(*limits);
        Ok(())
    }
}

impl Drop for CallCgroup {
    fn drop(&mut self) {
        let emptied = self.kill_all(Duration::from_secs(2));
        if emptied
            && let Some(pool) = self.pool.take()
            && let Some(reset) = reuse::reset(self)
        {
            pool.give(reset);
            return;
        }
        self.procs_fds.clear();
        // Children first is not needed (calls have no sub-groups); a group whose last process
        // is still exiting may refuse rmdir briefly, so retry a little.
        for dir in &self.dirs {
            for _ in 0..50 {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        }
    }
}

/// Removes `cordon-<pid>[-<n>]` groups left by cordon processes that died without cleaning
/// up (SIGKILL, power loss): their processes are gone (PDEATHSIG, cgroup.kill), only empty
/// directories remain. Groups of live processes, or with members, are left alone.
fn remove_stale_parents(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("cordon-")) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        let parent = entry.path();
        if let Ok(calls) = fs::read_dir(&parent) {
            for call in calls.flatten() {
                if call.file_type().is_ok_and(|t| t.is_dir()) {
                    let _ = fs::remove_dir(call.path());
                }
            }
        }
        let _ = fs::remove_dir(&parent);
    }
}

fn v2_populated(dir: &Path) -> bool {
    keyed_counter(&dir.join("cgroup.events"), "populated") > 0
}

fn read_procs(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Reads `key N` out of a flat-keyed cgroup file (memory.events, pids.events, …).
fn keyed_counter(file: &Path, key: &str) -> u64 {
    keyed(&fs::read_to_string(file).unwrap_or_default(), key)
}

/// `key N` of a flat-keyed cgroup file's text; 0 when absent.
fn keyed(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
        .unwrap_or(0)
}

fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(value.as_bytes()).map_err(io_err(path))
}

fn write_optional(path: &Path, value: &str) {
    if path.exists() {
        let _ = write_file(path, value);
    }
}

/// Turns on memory, pids and cpu for `parent`'s children. On v2 a group with processes cannot
/// enable controllers for its children ("no internal processes"), so when our own group is
/// busy only with us, we first move ourselves into a leaf of our own.
fn enable_v2_controllers(own_dir: &Path, parent: &Path, notes: &mut Vec<String>) -> bool {
    const WANTED: [&str; 3] = ["memory", "pids", "cpu"];
    let available = fs::read_to_string(own_dir.join("cgroup.controllers")).unwrap_or_default();
    let missing: Vec<&str> = WANTED
        .iter()
        .copied()
        .filter(|c| !available.split_whitespace().any(|a| a == *c))
        .collect();
    if !missing.is_empty() {
        notes.push(format!(
            "cgroup v2 controllers not delegated here: {} (limits then come from v1 or rlimits)",
            missing.join(", ")
        ));
        return false;
    }
    let enable = |dir: &Path| write_file(&dir.join("cgroup.subtree_control"), "+memory +pids +cpu");
    if enable(own_dir).is_err() {
        let leaf = own_dir.join(format!("cordon-{}-server", std::process::id()));
        let moved = fs::create_dir(&leaf).is_ok()
            && write_file(&leaf.join("cgroup.procs"), "0").is_ok()
            && enable(own_dir).is_ok();
        if !moved {
            notes.push(format!(
                "cannot enable controllers in {} (other processes share it?)",
                own_dir.display()
            ));
            return false;
        }
    }
    match enable(parent) {
        Ok(()) => true,
        Err(e) => {
            notes.push(e.to_string());
            false
        }
    }
}

/// Where each hierarchy is mounted and which part of it the mount shows.
struct CgroupMounts {
    v2: Option<(PathBuf, String)>,
    /// The v2 mount has `favordynmods` (cheap task migration).
    v2_favordynmods: bool,
    v1: std::collections::HashMap<String, (PathBuf, String)>,
}

impl CgroupMounts {
    fn read() -> Self {
        let mut me = Self {
            v2: None,
            v2_favordynmods: false,
            v1: Default::default(),
        };
        let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for line in info.lines() {
            // id parent major:minor root mountpoint options [optional…] - fstype source superopts
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let l: Vec<&str> = left.split(' ').collect();
            let r: Vec<&str> = right.split(' ').collect();
            if l.len() < 5 || r.len() < 3 {
                continue;
            }
            let (root, mountpoint) = (l[3].to_owned(), PathBuf::from(l[4]));
            match r[0] {
                "cgroup2" if me.v2.is_none() => {
                    me.v2_favordynmods = r[2].split(',').any(|o| o == "favordynmods");
                    me.v2 = Some((mountpoint, root));
                }
                "cgroup" => {
                    for opt in r[2].split(',') {
                        if matches!(opt, "memory" | "pids" | "cpu") {
                            me.v1
                                .entry(opt.to_owned())
                                .or_insert((mountpoint.clone(), root.clone()));
                        }
                    }
                }
                _ => {}
            }
        }
        me
    }
}

/// This process's own group in each hierarchy, from /proc/self/cgroup.
struct OwnCgroups {
    v2: Option<String>,
    v1: std::collections::HashMap<String, String>,
}

impl OwnCgroups {
    fn read() -> Self {
        let mut me = Self {
            v2: None,
            v1: Default::default(),
        };
        let text = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if id == "0" && controllers.is_empty() {
                me.v2 = Some(path.to_owned());
            } else {
                for c in controllers.split(',') {
                    me.v1.insert(c.to_owned(), path.to_owned());
                }
            }
        }
        me
    }
}

/// The directory of cgroup `path` given a mount that shows the hierarchy from `mount_root`.
fn join_cgroup((mountpoint, mount_root): &(PathBuf, String), path: &str) -> PathBuf {
    let relative = path
        .strip_prefix(mount_root.as_str())
        .unwrap_or(path)
        .trim_start_matches('/');
    mountpoint.join(relative)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_strips_the_mount_root() {
        let m = (PathBuf::from("/sys/fs/cgroup/memory"), "/".to_owned());
        assert_eq!(
            join_cgroup(&m, "/a/b"),
            PathBuf::from("/sys/fs/cgroup/memory/a/b")
        );
        let m = (PathBuf::from("/sys/fs/cgroup"), "/user.slice".to_owned());
        assert_eq!(
            join_cgroup(&m, "/user.slice/x"),
            PathBuf::from("/sys/fs/cgroup/x")
        );
    }

    #[test]
    fn keyed_counter_reads_flat_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("events");
        fs::write(&f, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n").unwrap();
        assert_eq!(keyed_counter(&f, "oom_kill"), 1);
        assert_eq!(keyed_counter(&f, "max"), 3);
        assert_eq!(keyed_counter(&f, "absent"), 0);
    }
}
