//! The rlimit plan applied in every child: file size, open files, core dumps, CPU seconds and
//! a loose address-space backstop.
//!
//! Values are clamped to the parent's current hard limits, because an unprivileged child
//! cannot raise them and a failing setrlimit would abort the spawn. RLIMIT_NPROC is used only
//! for non-root users without cgroup limits: root ignores it, and it counts per user across
//! the whole host, so with cgroups `pids.max` is the real bound. Without cgroups, RLIMIT_AS
//! stands in for the memory limit, per process.

use super::RlimitPlan;
use rustix::process::{Resource, getrlimit};

/// `no_cgroup_limits`: there is no cgroup to bound memory and pids, so RLIMIT_AS takes the
/// memory limit (per process: the weaker substitute) and, for non-root users, RLIMIT_NPROC the
/// pids limit (the kernel ignores it for root).
pub fn plan(limits: &RlimitPlan, no_cgroup_limits: bool, is_root: bool) -> Vec<(Resource, u64)> {
    let address_space = if no_cgroup_limits {
        limits.address_space_bytes.min(limits.memory_bytes)
    } else {
        limits.address_space_bytes
    };
    let mut plan = vec![
        (Resource::Fsize, limits.file_size_bytes),
        (Resource::Nofile, limits.open_files),
        (Resource::Core, 0),
        (Resource::Cpu, limits.cpu_seconds),
        (Resource::As, address_space),
    ];
    if no_cgroup_limits && !is_root {
        plan.push((Resource::Nproc, limits.pids));
    }
    for (resource, value) in &mut plan {
        if let Some(hard) = getrlimit(*resource).maximum {
            *value = (*value).min(hard);
        }
    }
    plan
}
