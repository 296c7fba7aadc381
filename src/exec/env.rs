//! The child's environment: a scrubbed allow-list, never the server's environment.
//!
//! Built from the policy's `pass` (copied from the server's environment when present) and
//! `set` (with `{tmp}`, `{workspace}` and `{home}` (the server user's home) expanded), then the caller's overrides. Nothing else
//! reaches a child: API keys and tokens in the server's environment stay there.

use crate::policy::EnvironmentPolicy;
use std::collections::BTreeMap;
use std::path::Path;

pub fn build(
    policy: &EnvironmentPolicy,
    tmp: &Path,
    workspace: &Path,
    overrides: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for name in &policy.pass {
        if let Ok(value) = std::env::var(name) {
            env.insert(name.clone(), value);
        }
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let expand = |v: &str| {
        v.replace("{tmp}", &tmp.to_string_lossy())
            .replace("{workspace}", &workspace.to_string_lossy())
            .replace("{home}", &home)
    };
    for (name, value) in &policy.set {
        env.insert(name.clone(), expand(value));
    }
    for (name, value) in overrides {
        env.insert(name.clone(), value.clone());
    }
    env
}

/// Checks a caller-supplied variable; the message says how to fix it.
pub fn validate_override(name: &str, value: &str) -> Result<(), String> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err(format!(
            "environment variable name `{}` is invalid: names must be non-empty and contain no `=` or NUL",
            name.escape_debug()
        ));
    }
    if value.contains('\0') {
        return Err(format!(
            "environment variable `{name}` contains a NUL byte, which cannot be passed to a process"
        ));
    }
    Ok(())
}
