//! Protected paths (`.git/hooks`, `.git/config`) against commands that try to get around the
//! read-only binds: renaming `.git` away and putting a copy in its place, removing or moving
//! the protected directory, a symlink at `.git/hooks`, a protected path that only appears
//! after the server started, and git's own indirections to config and hooks elsewhere in the
//! workspace (`.git/commondir`, a nested repository registered as a submodule), judged by
//! what the operator's next `git status` / `git commit` on the host runs; also a protected
//! file deeper in the tree replaced by renaming its directory, and the policy file `serve`
//! loads from the workspace. The workspace has `.git` before cordon starts, as a real
//! repository does.

use crate::common::{Need, Sandbox, skip, skip_msg};
use crate::stdio_server::{StdioServer, structured, text};
use serde_json::json;

/// Commands can be kept off protected paths only where the sandbox has its own mount
/// namespace (root, or a user namespace).
fn skip_unprotected(test: &str) -> bool {
    if skip(test, Need::LandlockSeccomp) {
        return true;
    }
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.ws().join(".git/hooks")).unwrap();
    let run = sb.exec(
        &[],
        &["sh", "-c", "touch .git/hooks/probe 2>/dev/null; true"],
    );
    if sb.ws().join(".git/hooks/probe").exists() {
        skip_msg(
            test,
            &format!("protected paths are not enforced for commands here: {run:?}"),
        );
        return true;
    }
    false
}

fn git_workspace() -> Sandbox {
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.ws().join(".git/hooks")).unwrap();
    std::fs::write(sb.ws().join(".git/config"), "[core]\n").unwrap();
    std::fs::write(sb.ws().join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    sb
}

#[cordon_test::test]
fn git_directory_cannot_be_renamed_away_and_replaced() {
    let test = "git_directory_cannot_be_renamed_away_and_replaced";
    if skip_unprotected(test) {
        return;
    }
    let sb = git_workspace();
    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            "mv .git .git.orig; echo mv=$?; \
             mkdir -p .git.new/hooks && echo evil > .git.new/hooks/pre-commit && \
             mv -T .git.new .git; echo swap=$?; \
             rm -rf .git/hooks; mv .git/hooks .git/h2; mv .git/config .git/c2; \
             ln -sf /tmp .git/hooks; true",
        ],
    );
    assert!(
        run.stderr.contains("Device or resource busy"),
        "renaming a mount point must fail with EBUSY: {run:?}"
    );
    assert!(run.stdout.contains("mv=1"), "{run:?}");
    assert!(!run.stdout.contains("swap=0"), "{run:?}");
    assert!(!sb.ws().join(".git.orig").exists(), "{run:?}");
    assert!(sb.ws().join(".git/hooks").is_dir(), "{run:?}");
    assert!(!sb.ws().join(".git/hooks/pre-commit").exists(), "{run:?}");
    assert!(!sb.ws().join(".git/h2").exists(), "{run:?}");
    // What the command did inside `.git` it did to the shadow gitdir (SECURITY.md, "Git"):
    // the operator's config is where it was, unchanged.
    assert_eq!(
        std::fs::read_to_string(sb.ws().join(".git/config")).unwrap(),
        "[core]\n"
    );
}

#[cordon_test::test]
fn git_hooks_and_config_cannot_be_written_by_commands() {
    let test = "git_hooks_and_config_cannot_be_written_by_commands";
    if skip_unprotected(test) {
        return;
    }
    let sb = git_workspace();
    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            "echo evil > .git/hooks/pre-commit; chmod +x .git/hooks; \
             printf '[core]\\n\\tfsmonitor = evil\\n' >> .git/config; \
             cp .git/config c && echo x >> c && cp c .git/config; \
             git config --file .git/config core.hooksPath /tmp 2>&1; \
             touch -d 2001-01-01 .git/config; echo HEAD-ok >> .git/HEAD; true",
        ],
    );
    assert!(!sb.ws().join(".git/hooks/pre-commit").exists(), "{run:?}");
    // The command wrote the shadow gitdir; the operator's files are byte for byte the same,
    // and a `HEAD` git does not write is refused at import.
    let config = std::fs::read_to_string(sb.ws().join(".git/config")).unwrap();
    assert_eq!(config, "[core]\n", "{run:?}");
    assert_eq!(
        std::fs::read_to_string(sb.ws().join(".git/HEAD")).unwrap(),
        "ref: refs/heads/main\n",
        "{run:?}"
    );
    assert_eq!(run.code(), 125, "{run:?}");
}

#[cordon_test::test]
fn symlinked_git_hooks_never_breaks_a_spawn() {
    let test = "symlinked_git_hooks_never_breaks_a_spawn";
    if skip_unprotected(test) {
        return;
    }
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.ws().join(".git")).unwrap();
    std::fs::create_dir_all(sb.ws().join("shared-hooks")).unwrap();
    std::os::unix::fs::symlink("../shared-hooks", sb.ws().join(".git/hooks")).unwrap();
    // A dangling one and one leaving the workspace must not break a spawn either.
    std::os::unix::fs::symlink("/nonexistent/cordon", sb.ws().join(".git/config")).unwrap();
    for _ in 0..3 {
        let run = sb.exec(&[], &["sh", "-c", "echo ran"]);
        assert_eq!(run.code(), 0, "{run:?}");
        assert_eq!(run.stdout, "ran\n", "{run:?}");
    }
    let mut server = StdioServer::start(sb.ws(), &[], "", &[]);
    let result = server.call("shell_exec", json!({"command": "echo ran"}));
    assert_eq!(structured(&result)["exit_code"], 0, "{result}");
    assert!(text(&result).contains("ran"), "{result}");
}

#[cordon_test::test]
fn hooks_cannot_be_written_through_a_symlinked_git_hooks() {
    let test = "hooks_cannot_be_written_through_a_symlinked_git_hooks";
    if skip_unprotected(test) {
        return;
    }
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.ws().join(".git")).unwrap();
    std::fs::create_dir_all(sb.ws().join("shared-hooks")).unwrap();
    std::os::unix::fs::symlink("../shared-hooks", sb.ws().join(".git/hooks")).unwrap();
    // git follows the symlink: a hook written either way runs on the operator's next commit.
    let run = sb.exec(
        &[],
        &[
            "sh",
            "-c",
            "echo evil > .git/hooks/pre-commit; echo evil > shared-hooks/post-checkout; \
             rm .git/hooks && mkdir .git/hooks && echo evil > .git/hooks/pre-push; true",
        ],
    );
    for hook in [
        "shared-hooks/pre-commit",
        "shared-hooks/post-checkout",
        ".git/hooks/pre-push",
    ] {
        assert!(
            !sb.ws().join(hook).exists(),
            "{hook} was written through the symlinked .git/hooks: {run:?}"
        );
    }
}

#[cordon_test::test]
fn git_hooks_created_after_the_server_started_are_read_only() {
    let test = "git_hooks_created_after_the_server_started_are_read_only";
    if skip_unprotected(test) {
        return;
    }
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.ws().join(".git")).unwrap();
    let mut server = StdioServer::start(sb.ws(), &[], "", &[]);
    // One call makes the directory (harmless on its own) ...
    let first = server.call("shell_exec", json!({"command": "mkdir -p .git/hooks"}));
    assert_eq!(structured(&first)["exit_code"], 0, "{first}");
    // ... a later call must not be able to put a hook in it.
    let second = server.call(
        "shell_exec",
        json!({"command": "echo evil > .git/hooks/pre-commit; true"}),
    );
    assert!(
        !sb.ws().join(".git/hooks/pre-commit").exists(),
        "a hook was written into a .git/hooks made after start: {second}"
    );
}

/// `git` run on the host as the operator would, with no user or system configuration.
fn operator_git(sb: &Sandbox, args: &[&str]) -> crate::common::Run {
    let mut cmd = std::process::Command::new("git");
    cmd.arg("-C")
        .arg(sb.ws())
        .args([
            "-c",
            "user.email=op@example.invalid",
            "-c",
            "user.name=operator",
        ])
        .args(args)
        .env("HOME", sb.outside())
        .env("GIT_CONFIG_NOSYSTEM", "1");
    crate::common::run_guarded(cmd, crate::common::HANG_GUARD)
}

/// A real repository in the workspace, made before cordon starts; None (after saying why)
/// where this machine has no git.
fn git_repository(test: &str) -> Option<Sandbox> {
    let sb = Sandbox::new();
    let init = std::process::Command::new("git")
        .arg("init")
        .arg("-q")
        .arg(sb.ws())
        .status();
    if !init.is_ok_and(|s| s.success()) {
        skip_msg(test, "no git on this machine");
        return None;
    }
    let commit = operator_git(&sb, &["commit", "-q", "--allow-empty", "-m", "init"]);
    assert_eq!(commit.code(), 0, "{commit:?}");
    Some(sb)
}

/// Runs what the operator runs next in the workspace, and asserts that nothing a confined
/// command planted ran: `marker` (outside the workspace) must not exist.
fn assert_operator_git_runs_nothing_planted(sb: &Sandbox, marker: &std::path::Path, planted: &str) {
    let status = operator_git(sb, &["status"]);
    let commit = operator_git(sb, &["commit", "-q", "--allow-empty", "-m", "operator"]);
    assert!(
        !marker.exists(),
        "the operator's git ran code a confined command planted ({planted}): \
         {status:?} {commit:?}; marker: {:?}",
        std::fs::read_to_string(marker)
    );
}

#[cordon_test::test]
fn git_commondir_cannot_redirect_the_operators_git_to_planted_hooks_and_config() {
    let test = "git_commondir_cannot_redirect_the_operators_git_to_planted_hooks_and_config";
    if skip_unprotected(test) {
        return;
    }
    let Some(sb) = git_repository(test) else {
        return;
    };
    let marker = sb.outside().join("planted-ran");
    // `.git/commondir` names the directory git takes config, hooks, refs and objects from:
    // a copy of the repository with a planted fsmonitor and hook.
    let script = format!(
        "mkdir -p planted/hooks && cp -r .git/objects .git/refs .git/HEAD planted/ && \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"echo fsmonitor >> {m}; false\"\\n' > planted/config && \
         printf '#!/bin/sh\\necho hook >> {m}\\n' > planted/hooks/pre-commit && chmod +x planted/hooks/pre-commit && \
         echo ../planted > .git/commondir; true",
        m = marker.display()
    );
    let run = sb.exec(&[], &["sh", "-c", &script]);
    // The command's own status was 0; its `.git/commondir` is the shadow's, never read by the
    // operator's git.
    assert_eq!(run.code(), 0, "{run:?}");
    assert!(!sb.ws().join(".git/commondir").exists(), "{run:?}");
    assert_operator_git_runs_nothing_planted(&sb, &marker, ".git/commondir");
}

#[cordon_test::test]
fn nested_repository_cannot_plant_config_for_the_operators_git_status() {
    let test = "nested_repository_cannot_plant_config_for_the_operators_git_status";
    if skip_unprotected(test) {
        return;
    }
    let Some(sb) = git_repository(test) else {
        return;
    };
    let marker = sb.outside().join("planted-ran");
    // A repository inside the workspace, registered as a submodule (a gitlink in the index,
    // which commands may write): the operator's `git status` recurses into it and obeys its
    // own .git/config.
    let script = format!(
        "export HOME=$TMPDIR GIT_CONFIG_NOSYSTEM=1; \
         git init -q sub && git -C sub -c user.email=a@b.invalid -c user.name=a commit -q --allow-empty -m s && \
         printf '\\tfsmonitor = \"echo fsmonitor >> {m}; false\"\\n' >> sub/.git/config && \
         git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub && \
         printf '[submodule \"sub\"]\\n\\tpath = sub\\n\\turl = ./sub\\n' > .gitmodules; echo rc=$?",
        m = marker.display()
    );
    let run = sb.exec(&[], &["sh", "-c", &script]);
    assert!(run.stdout.contains("rc=0"), "{run:?}");
    assert_operator_git_runs_nothing_planted(&sb, &marker, "sub/.git/config via a gitlink");
}

#[cordon_test::test]
fn policy_file_in_the_workspace_cannot_be_rewritten_by_commands() {
    let test = "policy_file_in_the_workspace_cannot_be_rewritten_by_commands";
    if skip_unprotected(test) {
        return;
    }
    // The policy the next `cordon serve` loads: a command that rewrites it (or renames its
    // directory away and plants another) widens every later session.
    let sb = Sandbox::new();
    let conf = sb.ws().join("conf");
    std::fs::create_dir_all(&conf).unwrap();
    let policy = conf.join("policy.toml");
    let original = "extends = \"default\"\n";
    std::fs::write(&policy, original).unwrap();
    let mut server = StdioServer::start(
        sb.ws(),
        &["--policy", policy.to_str().expect("utf-8 temp path")],
        "",
        &[],
    );
    let widen = "printf '[network]\\ntcp_connect = [443]\\n' >> conf/policy.toml; \
                 mv conf/policy.toml conf/old.toml; \
                 mv conf conf.orig && mkdir conf && \
                 printf 'extends = \"default\"\\n[network]\\ntcp_connect = [443]\\n' > conf/policy.toml; true";
    let result = server.call("shell_exec", json!({"command": widen}));
    drop(server);
    assert_eq!(
        std::fs::read_to_string(&policy).ok().as_deref(),
        Some(original),
        "the policy file the next server loads was changed by a command: {result}"
    );
    assert!(!sb.ws().join("conf.orig").exists(), "{result}");
}

#[cordon_test::test]
fn protected_file_cannot_be_replaced_by_renaming_its_directory() {
    let test = "protected_file_cannot_be_replaced_by_renaming_its_directory";
    if skip_unprotected(test) {
        return;
    }
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.ws().join("deploy/keys")).unwrap();
    std::fs::write(sb.ws().join("deploy/keys/trusted.pub"), "operator key\n").unwrap();
    let policy = sb.policy(
        "protect.toml",
        "extends = \"default\"\n[filesystem]\n\
         protected = [\".git/hooks\", \".git/config\", \".cordon\", \"deploy/keys/trusted.pub\"]\n",
    );
    let run = sb.exec(
        &["--policy", &policy],
        &[
            "sh",
            "-c",
            "echo attacker >> deploy/keys/trusted.pub; \
             mv deploy deploy.orig; mv deploy/keys deploy/keys.orig; \
             mkdir -p deploy/keys && echo 'attacker key' > deploy/keys/trusted.pub; true",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("deploy/keys/trusted.pub"))
            .ok()
            .as_deref(),
        Some("operator key\n"),
        "a protected file was replaced by renaming a directory above it: {run:?}"
    );
}
