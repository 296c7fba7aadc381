//! What the running kernel can enforce: Landlock ABI, seccomp, user namespaces, root.
//!
//! Detection only, read from syscalls and /proc; deciding what to do about a missing feature
//! (refuse, or degrade when the operator allowed it) is `super::Confinement::build`'s job.

use serde::Serialize;

/// Landlock ABI needed for everything the policies ask for: filesystem rights incl. truncate
/// and ioctl (V3, V5), TCP rules (V4) and the signal / abstract-socket scopes (V6).
pub(crate) const REQUIRED_LANDLOCK_ABI: u32 = 6;

#[derive(Debug, Clone, Serialize)]
pub struct KernelSupport {
    pub kernel_release: String,
    /// 0 when Landlock is not built in or not enabled at boot (`lsm=` lacks `landlock`).
    pub landlock_abi: u32,
    pub seccomp_filter: bool,
    pub user_namespaces: bool,
    pub is_root: bool,
}

/// Whether `feature` is named in [`SIMULATE_MISSING_ENV`].
pub(crate) fn simulated_missing(feature: &str) -> bool {
    std::env::var(SIMULATE_MISSING_ENV).is_ok_and(|v| v.split(',').any(|f| f.trim() == feature))
}

/// Names features to treat as missing (`landlock`, `seccomp`, `cgroups`, `fanotify`,
/// comma-separated; `landlock-abi-5` caps the Landlock ABI at 5, below the required one;
/// `git-export` refuses every git import the server's own checks leave to git run
/// confined), so the fail-closed and degraded paths can be tested on a kernel that has
/// everything. It can only take features away, never add them.
pub(crate) const SIMULATE_MISSING_ENV: &str = "CORDON_SIMULATE_MISSING";

impl KernelSupport {
    pub fn detect() -> Self {
        let mut me = Self::detect_real();
        if let Ok(missing) = std::env::var(SIMULATE_MISSING_ENV) {
            for feature in missing.split(',').map(str::trim) {
                match feature {
                    "landlock" => me.landlock_abi = 0,
                    "landlock-abi-5" => me.landlock_abi = me.landlock_abi.min(5),
                    "seccomp" => me.seccomp_filter = false,
                    _ => {}
                }
            }
        }
        me
    }

    fn detect_real() -> Self {
        Self {
            kernel_release: rustix::system::uname()
                .release()
                .to_string_lossy()
                .into_owned(),
            landlock_abi: landlock_abi(),
            seccomp_filter: seccomp_filter_available(),
            user_namespaces: user_namespaces_available(),
            is_root: rustix::process::geteuid().is_root(),
        }
    }
}

fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: landlock_create_ruleset with a NULL attribute, size 0 and the VERSION flag only
    // returns the ABI number (or -1/errno); it touches no memory of ours.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi < 0 { 0 } else { abi as u32 }
}

fn seccomp_filter_available() -> bool {
    // `Seccomp_filters:` in /proc/self/status exists only on kernels built with
    // CONFIG_SECCOMP_FILTER; the plain `Seccomp:` line predates filters.
    std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Seccomp_filters:")))
        .unwrap_or(false)
        || std::path::Path::new("/proc/sys/kernel/seccomp/actions_avail").exists()
}

fn user_namespaces_available() -> bool {
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let unprivileged = std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone")
        .map(|s| s.trim() != "0")
        .unwrap_or(true);
    max > 0 && unprivileged
}
