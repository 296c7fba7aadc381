//! Policies: what a confined call may do, as data.
//!
//! A policy is TOML (schema in `policies/README.md`). This module owns loading it (embedded
//! name or file, following `extends`: [`load`], with `raw` holding all of serde) and validating
//! it section by section ([`validate`]) into the typed [`Policy`] ([`model`]); resolving it
//! against a workspace into the plans the other stages take ([`resolve`]); answering allow,
//! deny or ask for each tool request ([`decide`], with the command rules in [`commands`]); and
//! saying what a denial means ([`explain`]). How a policy is *enforced* belongs to `confine`,
//! `exec` and `workspace`, which never see a `Policy`.

pub(crate) mod breaker;
mod call_env;
mod check;
pub(crate) mod checkpoints;
pub(crate) mod commands;
pub(crate) mod decide;
pub(crate) mod explain;
mod home;
mod interception;
pub(crate) mod jobs;
pub(crate) mod load;
mod login;
pub(crate) mod model;
mod raw;
pub(crate) mod resolve;
pub(crate) mod toolchains;
mod validate;

pub(crate) use crate::interpreter::InterpreterPolicy;
pub(crate) use crate::shape::OutputPolicy;
pub(crate) use decide::{Analysed, Request};
pub(crate) use home::server_home;
pub(crate) use load::{PolicyError, embedded_names};
pub(crate) use model::*;
pub(crate) use raw::WorkspaceAccess;
pub(crate) use resolve::Plans;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::bash::analyze;

    #[test]
    fn every_shipped_command_rule_has_passing_examples() {
        // Loading already checks each rule's examples; this pins that the default ships them
        // and that each match example gets a non-allow decision from the whole rule list.
        let p = Policy::builtin_default();
        assert_eq!(p.commands.on_unknown, commands::Decision::Allow);
        let names: Vec<&str> = p.commands.rules.iter().map(|r| r.name.as_str()).collect();
        for expected in [
            "rm-recursive-root-or-home",
            "rm-recursive-workspace",
            "git-push-force",
            "download-piped-into-shell",
            "mkfs",
            "dd-to-device",
            "chmod-chown-recursive-root",
            "fork-bomb",
        ] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        p.commands
            .verify_examples(&|l| Some(analyze(l)))
            .expect("the shipped examples pass");
        for rule in &p.commands.rules {
            assert!(!rule.examples.matches.is_empty() && !rule.examples.not_match.is_empty());
            for example in &rule.examples.matches {
                let v = p.commands.decide(&analyze(example));
                assert!(
                    v.decision >= rule.decision,
                    "{}: `{example}` got {v:?}",
                    rule.name
                );
            }
        }
    }

    #[test]
    fn a_rule_with_a_failing_example_makes_the_policy_invalid_citing_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(
            &f,
            "name = \"x\"\n\n[[commands.rules]]\nname = \"no-ls\"\ndecision = \"deny\"\n\
             justification = \"why\"\nmatch = { program = [\"ls\"] }\n\
             examples = { match = [\"ls\"], not_match = [\"ls -la\"] }\n",
        )
        .unwrap();
        // Loading checks the rule's shape; its examples are run through the parser worker
        // by the server, as here through the in-process analysis of the tests.
        let p = Policy::load(f.to_str().unwrap()).unwrap();
        let err = p
            .commands
            .verify_examples(&|l| Some(analyze(l)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("p.toml"), "{err}");
        assert!(err.contains("line 4"), "{err}");
        assert!(err.contains("rule `no-ls`"), "{err}");
        assert!(err.contains("`ls -la`"), "{err}");
    }

    #[test]
    fn tool_scopes_default_merge_across_extends_and_are_checked() {
        let p = Policy::builtin_default();
        assert_eq!(p.server.http.scopes["read_file"], "cordon:read");
        assert_eq!(p.server.http.scopes["edit_file"], "cordon:write");
        assert_eq!(p.server.http.scopes["job"], "cordon:exec");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(
            &f,
            "extends = \"dev\"\n[server.http.scopes]\nread_file = \"files:read\"\n",
        )
        .unwrap();
        let p = Policy::load(f.to_str().unwrap()).unwrap();
        assert_eq!(p.server.http.scopes["read_file"], "files:read");
        assert_eq!(
            p.server.http.scopes["shell_exec"], "cordon:exec",
            "merged, not replaced"
        );
        for (bad, says) in [
            ("rm_rf = \"x\"", "is not a tool"),
            ("shell_exec = \"two words\"", "one scope token"),
            ("shell_exec = \"\"", "one scope token"),
        ] {
            std::fs::write(&f, format!("[server.http.scopes]\n{bad}\n")).unwrap();
            let e = Policy::load(f.to_str().unwrap()).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn extending_policies_inherit_or_replace_the_rules() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.toml");
        std::fs::write(
            &f,
            "extends = \"default\"\n[commands]\non_unknown = \"deny\"\n",
        )
        .unwrap();
        let p = Policy::load(f.to_str().unwrap()).unwrap();
        assert_eq!(p.commands.on_unknown, commands::Decision::Deny);
        assert_eq!(
            p.commands.rules.len(),
            Policy::builtin_default().commands.rules.len()
        );
        std::fs::write(&f, "[commands]\nrules = []\n").unwrap();
        let p = Policy::load(f.to_str().unwrap()).unwrap();
        assert!(p.commands.rules.is_empty());
        assert_eq!(
            p.commands.decide(&analyze("rm -rf /")).decision,
            commands::Decision::Allow
        );
    }

    #[test]
    fn everyday_agent_commands_pass_the_default_rules() {
        let p = Policy::builtin_default();
        for line in [
            "cargo test 2>&1 | tail -n 30",
            "rm -rf target build dist node_modules",
            "rm -rf ./build/*",
            "git push origin HEAD",
            "git push --force-with-lease",
            "find . -name '*.pyc' -delete",
            "find . -type f -exec grep -l TODO {} +",
            "curl -s localhost:8080/health | jq .",
            "python3 -c 'print(1)'",
            "for f in *.py; do python3 -m py_compile \"$f\"; done",
            "cat <<EOF > notes.txt\nrm -rf /\nEOF",
            "dd if=/dev/zero of=disk.img bs=1M count=10",
            "chmod -R u+w .",
            "sh -c 'make -j2 && make install DESTDIR=$PWD/out'",
            "$EDITOR file",
        ] {
            let v = p.commands.decide(&analyze(line));
            assert_eq!(v.decision, commands::Decision::Allow, "`{line}`: {v:?}");
        }
    }
}
