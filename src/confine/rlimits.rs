//! The rlimit plan applied in every child: file size, open files, core dumps, CPU seconds and,
//! only where no cgroup bounds memory, an address-space limit.
//!
//! Values are clamped to the parent's current hard limits, because an unprivileged child
//! cannot raise them and a failing setrlimit would abort the spawn. RLIMIT_NPROC is used only
//! for non-root users without cgroup limits: root ignores it, and it counts per user across
//! the whole host, so with cgroups `pids.max` is the real bound. Without cgroups, RLIMIT_AS
//! stands in for the memory limit, per process. With them it is not set at all: the cgroup
//! bounds what is actually used, while RLIMIT_AS bounds what is *reserved*, which breaks
//! programs that reserve far more than they touch (WebAssembly engines reserve 8 GiB or more
//! per instance, ASan/TSan map terabytes of shadow memory PROT_NONE, Chromium, JVMs).

use super::RlimitPlan;
use rustix::process::{Resource, getrlimit};

/// `no_cgroup_limits`: there is no cgroup to bound memory and pids, so RLIMIT_AS takes the
/// memory limit (per process: the weaker substitute) and, for non-root users, RLIMIT_NPROC the
/// pids limit (the kernel ignores it for root).
pub(super) fn plan(
    limits: &RlimitPlan,
    no_cgroup_limits: bool,
    is_root: bool,
) -> Vec<(Resource, u64)> {
    let mut plan = vec![
        (Resource::Fsize, limits.file_size_bytes),
        (Resource::Nofile, limits.open_files),
        (Resource::Core, 0),
        (Resource::Cpu, limits.cpu_seconds),
    ];
    if no_cgroup_limits {
        plan.push((
            Resource::As,
            limits.address_space_bytes.min(limits.memory_bytes),
        ));
        if !is_root {
            plan.push((Resource::Nproc, limits.pids));
        }
    }
    for (resource, value) in &mut plan {
        if let Some(hard) = getrlimit(*resource).maximum {
            *value = (*value).min(hard);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: RlimitPlan = RlimitPlan {
        file_size_bytes: 1 << 30,
        open_files: 20_000,
        cpu_seconds: 600,
        address_space_bytes: 16 << 30,
        memory_bytes: 2 << 30,
        pids: 1024,
    };

    #[test]
    fn no_address_space_limit_where_the_cgroup_bounds_memory() {
        let with_cgroups = plan(&LIMITS, false, false);
        assert!(!with_cgroups.iter().any(|(r, _)| *r == Resource::As));
        assert!(!with_cgroups.iter().any(|(r, _)| *r == Resource::Nproc));
        let without = plan(&LIMITS, true, false);
        let hard_as = getrlimit(Resource::As).maximum.unwrap_or(u64::MAX);
        assert!(
            without
                .iter()
                .any(|&(r, v)| r == Resource::As && v == (2u64 << 30).min(hard_as)),
            "{without:?}"
        );
        assert!(without.iter().any(|(r, _)| *r == Resource::Nproc));
    }

    #[test]
    fn open_files_are_clamped_to_the_hard_limit() {
        let hard = getrlimit(Resource::Nofile).maximum.unwrap_or(u64::MAX);
        let p = plan(&LIMITS, false, true);
        let nofile = p.iter().find(|(r, _)| *r == Resource::Nofile).unwrap().1;
        assert_eq!(nofile, 20_000u64.min(hard));
    }
}
