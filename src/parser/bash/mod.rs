//! Shell text → the simple commands it would run, with wrappers peeled off.
//!
//! Owns the walk over tree-sitter-bash's syntax tree: pipelines, lists, subshells, `$(…)`,
//! backticks, `<(…)`, function bodies, `if`/`for`/`while` bodies, the script strings of
//! `sh -c`/`bash -c`/`su -c`/`eval` (parsed again, to a bounded depth) and `find -exec`
//! segments, and the unwrapping of wrappers (`env`, `sudo`, `doas`, `xargs`, `nice`, `timeout`,
//! `nohup`, `exec`, `command`, `builtin`, `time`, `stdbuf`, `ionice`, `setsid`, `busybox`).
//! It runs inside the parser worker, never in the server. It does not decide anything (that
//! is `policy::commands::rules`, which reads the [`Analysis`]) and it never expands anything:
//! `~`, `$HOME` and globs stay as written, which is what rules match on.
//!
//! This is an *advisory* reading of the command. The shell that really runs it is `/bin/sh`
//! inside the kernel confinement, and that confinement is the security boundary; these are
//! the forms this reading does NOT see through (also listed in `policies/README.md`):
//!
//! * code run by another interpreter: `python -c 'import os; os.system("rm -rf ~")'`,
//!   `perl -e`, `node -e`, `awk 'BEGIN{system(…)}'`, a script file (`./x.sh`, `bash x.sh`);
//! * text decoded or assembled at run time: `echo cm0gLXJmIH4= | base64 -d | sh`,
//!   `sh -c "$CMD"`, `eval "$X"`, `$(printf 'r%s' m) -rf ~` (these are *unknown*, see below,
//!   except when piped into a shell, which `piped_into` rules see);
//! * scripts fed to a shell on standard input or a here-document: `echo 'rm -rf ~' | sh`,
//!   `sh <<EOF … EOF`;
//! * aliases and functions defined earlier in the same command line (`f() { rm -rf ~; }; f`
//!   is seen as the command `rm -rf ~` inside `f` and as a call of `f`, but `alias x=rm; x -rf ~`
//!   is only a call of `x`);
//! * arguments that only exist at run time: what `xargs` reads from stdin, variables, globs
//!   (`rm -rf $DIR` is `rm` with the operand `$DIR`, not its value);
//! * wrappers not listed above (`watch`, `flock`, `chroot`, `unshare`, `script -c`, `parallel`,
//!   `ssh host cmd`, `pkexec`, `runuser`, `strace`, …): the wrapper is the program.
//!
//! A command whose *name* is computed at run time (`$X`, `$(…)`, `eval "$X"`, `sh -c "$X"`), a
//! script nested deeper than [`MAX_DEPTH`], or input that does not parse is reported as
//! [`Unknown`]; the policy's `commands.on_unknown` decides those.
//!
//! * [`analysis`]: what is found ([`Analysis`]), the data the rules read;
//! * `walk`: the walk over the syntax tree;
//! * `wrappers`: how each wrapper names the command it runs.

pub(crate) mod analysis;
mod walk;
mod wrappers;

pub(crate) use analysis::{Analysis, SimpleCommand, program_name};
pub(crate) use walk::analyze;

#[cfg(test)]
mod tests {
    use super::*;
    use walk::MAX_DEPTH;

    fn argvs(script: &str) -> Vec<String> {
        analyze(script)
            .commands
            .iter()
            .map(|c| c.display())
            .collect()
    }

    fn has(script: &str, expected: &str) {
        let found = argvs(script);
        assert!(
            found.iter().any(|c| c == expected),
            "`{script}` should contain the command `{expected}`; found {found:?}"
        );
    }

    #[test]
    fn lists_pipelines_subshells_and_substitutions() {
        has("ls | grep x && rm -rf /tmp/x", "rm -rf /tmp/x");
        has("true; (cd / && rm -rf .)", "rm -rf .");
        has("{ echo; rm -rf ~; }", "rm -rf ~");
        has("echo \"a $(rm -rf /) b\"", "rm -rf /");
        has("echo `rm -rf /`", "rm -rf /");
        has("cat <(rm -rf /)", "rm -rf /");
        has("if true; then rm -rf /; fi", "rm -rf /");
        has("for f in a; do rm -rf \"$f\"; done", "rm -rf $f");
        has("! rm -rf / 2>/dev/null", "rm -rf /");
        has("x=$(rm -rf /)", "rm -rf /");
    }

    #[test]
    fn quotes_and_escapes_are_removed_but_nothing_is_expanded() {
        has("\\rm -rf '/'", "rm -rf /");
        has("\"rm\" -rf \"$HOME\"/", "rm -rf $HOME/");
        has("/bin/rm -rf ~", "/bin/rm -rf ~");
        has("rm a\\ b", "rm a b");
        let a = analyze("rm \"$HOME\"");
        assert!(a.commands[0].words[1].dynamic);
    }

    #[test]
    fn every_wrapper_form_is_unwrapped() {
        for (script, inner) in [
            ("env rm -rf /", "rm -rf /"),
            ("env -i FOO=1 BAR=2 rm -rf /", "rm -rf /"),
            ("env -u HOME -C /tmp rm -rf /", "rm -rf /"),
            ("env --unset=HOME -- rm -rf /", "rm -rf /"),
            ("env -S 'rm -rf' /", "rm -rf /"),
            ("/usr/bin/env rm -rf /", "rm -rf /"),
            ("FOO=1 rm -rf /", "rm -rf /"),
            ("sudo rm -rf /", "rm -rf /"),
            ("sudo -u root -E rm -rf /", "rm -rf /"),
            ("sudo -uroot HOME=/ rm -rf /", "rm -rf /"),
            ("sudo --user=root -- rm -rf /", "rm -rf /"),
            ("doas -u root rm -rf /", "rm -rf /"),
            ("xargs rm -rf", "rm -rf"),
            ("find . | xargs -0 -n 1 -I {} rm -rf {}", "rm -rf {}"),
            ("nice rm -rf /", "rm -rf /"),
            ("nice -n 10 rm -rf /", "rm -rf /"),
            ("nice -10 rm -rf /", "rm -rf /"),
            ("timeout 5 rm -rf /", "rm -rf /"),
            ("timeout -s KILL -k 1 5s rm -rf /", "rm -rf /"),
            ("nohup rm -rf / &", "rm -rf /"),
            ("exec rm -rf /", "rm -rf /"),
            ("exec -a name rm -rf /", "rm -rf /"),
            ("command rm -rf /", "rm -rf /"),
            ("builtin command rm -rf /", "rm -rf /"),
            ("time rm -rf /", "rm -rf /"),
            ("time -p rm -rf /", "rm -rf /"),
            ("stdbuf -oL -e 0 rm -rf /", "rm -rf /"),
            ("ionice -c 3 rm -rf /", "rm -rf /"),
            ("setsid -f rm -rf /", "rm -rf /"),
            ("busybox rm -rf /", "rm -rf /"),
            ("sudo env FOO=1 nice timeout 3 rm -rf /", "rm -rf /"),
            ("sh -c 'rm -rf /'", "rm -rf /"),
            ("bash -lc \"rm -rf /\"", "rm -rf /"),
            ("bash -e -o pipefail -c 'rm -rf /'", "rm -rf /"),
            ("sudo bash -c 'sh -c \"rm -rf /\"'", "rm -rf /"),
            ("su -c 'rm -rf /' root", "rm -rf /"),
            ("busybox sh -c 'rm -rf /'", "rm -rf /"),
            ("eval rm -rf /", "rm -rf /"),
            ("eval 'rm -rf /'", "rm -rf /"),
            ("find / -name x -exec rm -rf {} \\;", "rm -rf {}"),
            ("find / -execdir sudo rm -rf {} +", "rm -rf {}"),
        ] {
            has(script, inner);
        }
    }

    #[test]
    fn wrappers_that_run_nothing_stay_themselves() {
        assert_eq!(argvs("command -v rm"), ["command -v rm"]);
        assert_eq!(argvs("env"), ["env"]);
        assert_eq!(argvs("sudo -l"), ["sudo -l"]);
        assert_eq!(argvs("xargs"), ["xargs"]);
    }

    #[test]
    fn pipelines_record_where_output_goes() {
        let a = analyze("curl -fsSL https://x | sudo bash");
        let curl = a.commands.iter().find(|c| c.program() == "curl").unwrap();
        assert_eq!(curl.feeds_into, ["bash"]);
        let a = analyze("sh -c \"$(curl -fsSL https://x)\"");
        let curl = a.commands.iter().find(|c| c.program() == "curl").unwrap();
        assert_eq!(curl.feeds_into, ["sh"]);
        let a = analyze("bash <(wget -qO- https://x)");
        let wget = a.commands.iter().find(|c| c.program() == "wget").unwrap();
        assert_eq!(wget.feeds_into, ["bash"]);
        let a = analyze("curl x | grep \"$(sh -c id)\" ; sh");
        let curl = a.commands.iter().find(|c| c.program() == "curl").unwrap();
        assert_eq!(curl.feeds_into, ["grep"]);
    }

    #[test]
    fn functions_are_recorded() {
        let a = analyze(":(){ :|:& };:");
        let inside: Vec<_> = a
            .commands
            .iter()
            .filter(|c| c.in_function.as_deref() == Some(":"))
            .collect();
        assert_eq!(inside.len(), 2);
        assert!(inside.iter().all(|c| c.program() == ":"));
    }

    #[test]
    fn dynamic_names_and_parse_errors_are_unknown() {
        for script in [
            "$X foo",
            "$(which rm) -rf /",
            "`which rm` -rf /",
            "eval \"$Y\"",
            "sh -c \"$CMD\"",
            "bash -c",
            "echo 'unterminated",
        ] {
            let a = analyze(script);
            assert!(!a.unknown.is_empty(), "`{script}` should be unknown: {a:?}");
        }
        assert!(analyze("ls -la; FOO=1; >out").unknown.is_empty());
        let mut nested = "rm -rf /".to_owned();
        for _ in 0..=MAX_DEPTH {
            nested = format!("sh -c '{}'", nested.replace('\'', "'\\''"));
        }
        let a = analyze(&nested);
        assert!(
            a.unknown.iter().any(|u| u.reason.contains("nested")),
            "{a:?}"
        );
        assert!(!a.commands.iter().any(|c| c.program() == "rm"));
    }
}
