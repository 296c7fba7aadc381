//! The policy resolved against one workspace, once, into the plans the stages to the right
//! take: [`ConfinePlan`] for `confine`, [`ExecPlan`] (with its [`EnvTemplate`]) for `exec`,
//! [`LintPlan`] for `lint`, and the protected set and write rules the workspace enforces for
//! the file tools. Those modules never see a `Policy`.
//!
//! Owns the derivations. `~/` in a policy path and `{home}` in an environment value are both
//! the home of the user running cordon ([`server_home`], from `home`).
//! `{workspace_home}` is the calls' own persistent home for this workspace (granted
//! read-write and created: see `toolchains::workspace_home`), `{toolchains}` the bin
//! directories of the `filesystem.toolchains` that exist (granted read + execute).
//! It does not validate the TOML (that is `policy::load` and `policy::validate`) and builds
//! nothing that runs.

use super::home::server_home;
use super::{Policy, WorkspaceAccess};
use crate::confine::{CallLimits, ConfinePlan, RlimitPlan};
use crate::exec::ExecPlan;
use crate::exec::env::EnvTemplate;
use crate::lint::LintPlan;
use std::path::Path;

/// Everything a runtime derives from its policy.
#[derive(Debug, Clone)]
pub struct Plans {
    pub confine: ConfinePlan,
    pub exec: ExecPlan,
    pub lint: LintPlan,
    /// Workspace-relative patterns nothing confined may write: the sandbox's read-only binds
    /// and the file tools' refusals are this one list.
    pub protected: Vec<String>,
    /// With a read-only workspace, the only directories the file tools may write; None: the
    /// whole workspace (protected paths aside).
    pub writable_only: Option<Vec<String>>,
    /// Read-write directories to create before the sandbox is built (the workspace home,
    /// granted directories that do not exist yet): a grant of a missing path grants nothing.
    pub create_dirs: Vec<std::path::PathBuf>,
    /// The calls' persistent home, when the environment names `{workspace_home}`: the runtime
    /// creates it (beneath the workspace, never through a link) before the sandbox is built.
    pub workspace_home: Option<std::path::PathBuf>,
}

/// A session manager's settings, from the policy it serves.
impl From<&Policy> for crate::interpreter::InterpreterPlan {
    fn from(policy: &Policy) -> Self {
        Self {
            policy: policy.interpreter.clone(),
            max_repr: policy.output.memory_cap_bytes,
        }
    }
}

impl Policy {
    /// The plans for `workspace` (absolute and canonical).
    pub fn resolve(&self, workspace: &Path) -> Plans {
        let protected = self.protected_patterns(workspace);
        let fs = &self.filesystem;
        let read_only_workspace = fs.workspace == WorkspaceAccess::ReadOnly;
        let toolchains = super::toolchains::present(&fs.toolchains);
        let uses_home = self
            .environment
            .set
            .values()
            .any(|v| v.contains("{workspace_home}"));
        let home = uses_home.then(|| super::toolchains::workspace_home(workspace));
        let mut read_write = fs.read_write.clone();
        let create_dirs: Vec<std::path::PathBuf> = fs
            .read_write
            .iter()
            .filter(|p| p.symlink_metadata().is_err())
            .cloned()
            .collect();
        if let Some(home) = home.as_ref().filter(|_| read_only_workspace) {
            // Inside the workspace: writable with it, or on its own when the workspace is not.
            read_write.push(home.clone());
        }
        if read_only_workspace {
            read_write.extend(fs.workspace_writable.iter().map(|p| workspace.join(p)));
        }
        let mut read_exec = fs.read_exec.clone();
        read_exec.extend(toolchains.iter().map(|t| t.root.clone()));
        let limits = &self.limits;
        let confine = ConfinePlan {
            workspace: workspace.to_path_buf(),
            read_only_workspace,
            read_exec,
            read_write,
            devices: fs.devices.clone(),
            deny: fs.deny.clone(),
            tcp_connect: self.network.tcp_connect.clone(),
            tcp_bind: self.network.tcp_bind.clone(),
            // The proxy needs a namespace whose only route out is its listener.
            isolate_network: self.network.uses_proxy()
                || (self.network.is_off() && self.sandbox.seccomp_profile == "default"),
            proxy: self.network.proxy.clone(),
            seccomp_profile: self.sandbox.seccomp_profile.clone(),
            fallback_unix_sockets: self.sandbox.fallback_unix_sockets,
            trace_own_call: self.sandbox.ptrace == super::PtraceScope::Call,
            writable_shims: toolchains
                .iter()
                .map(|t| t.root.join("shims"))
                .filter(|shims| shims.is_dir())
                .collect(),
            call_ids: crate::confine::CallIdsPolicy {
                uid: self.sandbox.uid,
                count: self.sandbox.uid_count,
            },
            protected: protected.clone(),
            names_protected_paths: !fs.protected.is_empty(),
            rlimits: RlimitPlan {
                file_size_bytes: limits.file_size_bytes,
                open_files: limits.open_files,
                cpu_seconds: limits.cpu_seconds,
                address_space_bytes: limits.address_space_bytes,
                memory_bytes: limits.memory_bytes,
                pids: limits.pids,
            },
            shm_bytes: limits.shm_bytes,
            call_limits: CallLimits {
                memory_bytes: limits.memory_bytes,
                pids: limits.pids,
                cpu_percent: limits.cpu_percent,
            },
        };
        let env = self.env_template(workspace, home.as_deref(), &toolchains, &confine.read_exec);
        let lint = LintPlan {
            enabled: self.lint.enabled,
            syntax: self.lint.syntax,
            timeout: self.lint.timeout,
            max_file_bytes: self.lint.max_file_bytes,
            linters: self.lint.linters.clone(),
            // A linter is found where the confined child's `execvp` will look.
            search_path: env.set.get("PATH").cloned().unwrap_or_default(),
        };
        let exec = ExecPlan {
            env,
            disk_budget: limits.disk_bytes,
            disk_extra: fs.read_write.clone(),
        };
        Plans {
            confine,
            exec,
            lint,
            protected,
            writable_only: read_only_workspace.then(|| fs.workspace_writable.clone()),
            create_dirs,
            workspace_home: home,
        }
    }

    /// `environment` with `{home}`, `{workspace}`, `{workspace_home}` and `{toolchains}`
    /// expanded; `{tmp}` stays, it differs per call. Each present toolchain's root variable
    /// (`RUSTUP_HOME`, ...) is set too, unless the policy sets it or passes it from a server
    /// environment that has it; so are the login variables and the operator's git settings
    /// (`call_env`), under the same rule.
    fn env_template(
        &self,
        workspace: &Path,
        workspace_home: Option<&Path>,
        toolchains: &[super::toolchains::Toolchain],
        read_exec: &[std::path::PathBuf],
    ) -> EnvTemplate {
        let home = server_home().unwrap_or_default();
        let workspace = workspace.to_string_lossy();
        let workspace_home = workspace_home
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bins = toolchains
            .iter()
            .flat_map(|t| &t.path_dirs)
            .map(|d| d.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(":");
        let mut set: std::collections::BTreeMap<String, String> = self
            .environment
            .set
            .iter()
            .map(|(name, value)| {
                let value = value
                    .replace("{workspace_home}", &workspace_home)
                    .replace("{workspace}", &workspace)
                    .replace("{home}", &home)
                    .replace("{toolchains}", &bins);
                (name.clone(), value)
            })
            .collect();
        if let Some(path) = set.get_mut("PATH") {
            // An empty entry (no toolchain present) would mean "the current directory".
            *path = path
                .split(':')
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join(":");
        }
        for t in toolchains {
            let Some(var) = t.root_var else { continue };
            let passed =
                self.environment.pass.iter().any(|p| p == var) && std::env::var(var).is_ok();
            if !passed && !set.contains_key(var) {
                set.insert(var.to_owned(), t.root.to_string_lossy().into_owned());
            }
        }
        super::call_env::add_implicit(
            &mut set,
            &self.environment.pass,
            read_exec,
            &self.filesystem.deny,
        );
        EnvTemplate {
            pass: self.environment.pass.clone(),
            set,
        }
    }

    /// The workspace-relative patterns nothing confined may write: the policy's
    /// `filesystem.protected` plus every file of its `extends` chain that lies inside the
    /// workspace (a policy the agent could edit would loosen its own sandbox). `*` in a file
    /// name is a pattern character, so a policy file whose name holds one protects a little
    /// more, never less.
    pub fn protected_patterns(&self, workspace_root: &Path) -> Vec<String> {
        let mut protected = self.filesystem.protected.clone();
        for source in &self.sources {
            let canonical = source.canonicalize().unwrap_or_else(|_| source.clone());
            if let Ok(inside) = canonical.strip_prefix(workspace_root) {
                let rel = inside.to_string_lossy().into_owned();
                if !rel.is_empty() && !protected.contains(&rel) {
                    protected.push(rel);
                }
            }
        }
        protected
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::home::expand_home;

    #[test]
    fn home_means_the_same_in_paths_and_in_environment_values() {
        let Some(home) = server_home() else { return };
        assert_eq!(expand_home("~/bin".into()), format!("{home}/bin"));
        let mut policy = Policy::builtin_default();
        policy
            .environment
            .set
            .insert("X".into(), "{home}/bin:{workspace}:{tmp}".into());
        let plans = policy.resolve(Path::new("/ws"));
        assert_eq!(plans.exec.env.set["X"], format!("{home}/bin:/ws:{{tmp}}"));
    }

    #[test]
    fn a_read_only_workspace_keeps_its_writable_directories_writable() {
        let mut policy = Policy::builtin_default();
        policy.filesystem.workspace = WorkspaceAccess::ReadOnly;
        policy.filesystem.workspace_writable = vec!["out".into()];
        let plans = policy.resolve(Path::new("/ws"));
        assert!(plans.confine.read_only_workspace);
        assert!(
            plans
                .confine
                .read_write
                .contains(&Path::new("/ws/out").to_path_buf())
        );
        assert_eq!(plans.writable_only, Some(vec!["out".to_owned()]));
        assert_eq!(plans.protected, policy.protected_patterns(Path::new("/ws")));
    }
}
