//! The rlimit plan applied in every child: file size, open files, core dumps, CPU seconds and
//! a loose address-space backstop.
//!
//! Values are clamped to the parent's current hard limits, because an unprivileged child
//! cannot raise them and a failing setrlimit would abort the spawn. RLIMIT_NPROC is used only
//! for non-root users without cgroup limits: root ignores it, and it counts per user across
//! the whole host, so with cgroups `pids.max` is the real bound.

use crate::policy::Limits;
use rustix::process::{Resource, getrlimit};

pub fn plan(limits: &Limits, use_nproc: bool) -> Vec<(Resource, u64)> {
    let mut plan = vec![
        (Resource::Fsize, limits.file_size_bytes),
        (Resource::Nofile, limits.open_files),
        (Resource::Core, 0),
        (Resource::Cpu, limits.cpu_seconds),
        (Resource::As, limits.address_space_bytes),
    ];
    if use_nproc {
        plan.push((Resource::Nproc, limits.pids));
    }
    for (resource, value) in &mut plan {
        if let Some(hard) = getrlimit(*resource).maximum {
            *value = (*value).min(hard);
        }
    }
    plan
}
