//! The child's environment: a scrubbed allow-list, never the server's environment.
//!
//! Built from an [`EnvTemplate`] (the policy's `pass` and `set`, resolved once by
//! `policy::resolve`: `{home}` and `{workspace}` are already expanded there), with `{tmp}`
//! expanded per call (each call has its own), then the caller's overrides. Nothing else
//! reaches a child: API keys and tokens in the server's environment stay there.

use std::collections::BTreeMap;
use std::path::Path;

/// The variables that point clients at a CA bundle (owned by the proxy that intercepts).
pub(crate) use crate::egress::tls::CA_BUNDLE_VARIABLES;

/// The environment every child starts from, resolved for one workspace.
#[derive(Debug, Clone, Default)]
pub struct EnvTemplate {
    /// Names copied from the server's environment when it has them.
    pub pass: Vec<String>,
    /// Values set for every child; `{tmp}` is the call's own temporary directory.
    pub set: BTreeMap<String, String>,
}

impl EnvTemplate {
    /// The environment of one child whose temporary directory is `tmp`.
    pub fn build(
        &self,
        tmp: &Path,
        overrides: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for name in &self.pass {
            if let Ok(value) = std::env::var(name) {
                env.insert(name.clone(), value);
            }
        }
        let tmp = tmp.to_string_lossy();
        for (name, value) in &self.set {
            env.insert(name.clone(), value.replace("{tmp}", &tmp));
        }
        for (name, value) in overrides {
            env.insert(name.clone(), value.clone());
        }
        env
    }
}

/// Checks a caller-supplied variable; the message says how to fix it.
pub(crate) fn validate_override(name: &str, value: &str) -> Result<(), String> {
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
