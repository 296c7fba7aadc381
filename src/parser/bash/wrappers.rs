//! How a wrapper's own arguments name the command it runs: `env`, `sudo`, `doas`, `xargs`,
//! `nice`, `timeout`, `nohup`, `exec`, `command`, `builtin`, `time`, `stdbuf`, `ionice`,
//! `setsid`, `busybox` (their options, operands and assignments skipped), the script string of
//! a shell run with `-c` (and `su -c`), and the `-exec` segments of `find`.
//!
//! Owns the argv rules of each wrapper only; it parses nothing and records nothing (`walk`).

use super::analysis::Word;

/// How a wrapper's own options look, so its inner command can be found.
struct WrapperSyntax {
    /// Short options that take a value (`-u root` or `-uroot`).
    short_with_value: &'static str,
    /// Long options that take a value (`--user root` or `--user=root`).
    long_with_value: &'static [&'static str],
    /// Operands the wrapper itself consumes before the command (timeout's DURATION).
    operands: usize,
    /// `NAME=value` words before the command are assignments, not the command.
    assignments: bool,
    /// Any of these options means no command runs (`command -v rm` only prints a path).
    no_command: &'static [&'static str],
    /// `-NUM` is an option (`nice -10 cmd`).
    numeric_options: bool,
}

const fn syntax(
    short_with_value: &'static str,
    long_with_value: &'static [&'static str],
) -> WrapperSyntax {
    WrapperSyntax {
        short_with_value,
        long_with_value,
        operands: 0,
        assignments: false,
        no_command: &[],
        numeric_options: false,
    }
}

fn wrapper_syntax(program: &str) -> Option<WrapperSyntax> {
    Some(match program {
        "env" => WrapperSyntax {
            assignments: true,
            ..syntax("uCS", &["--unset", "--chdir", "--split-string"])
        },
        "sudo" => WrapperSyntax {
            assignments: true,
            no_command: &[
                "-l",
                "--list",
                "-v",
                "--validate",
                "-k",
                "-K",
                "-e",
                "--edit",
            ],
            ..syntax(
                "ugpCDRTrthU",
                &[
                    "--user",
                    "--group",
                    "--host",
                    "--prompt",
                    "--close-from",
                    "--chdir",
                    "--chroot",
                    "--command-timeout",
                    "--role",
                    "--type",
                    "--other-user",
                ],
            )
        },
        "doas" => syntax("uC", &[]),
        "xargs" => syntax(
            "adEILnPs",
            &[
                "--arg-file",
                "--delimiter",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--process-slot-var",
            ],
        ),
        "nice" => WrapperSyntax {
            numeric_options: true,
            ..syntax("n", &["--adjustment"])
        },
        "timeout" => WrapperSyntax {
            operands: 1,
            ..syntax("sk", &["--signal", "--kill-after"])
        },
        "nohup" | "setsid" | "busybox" | "builtin" => syntax("", &[]),
        "exec" => syntax("a", &[]),
        "command" => WrapperSyntax {
            no_command: &["-v", "-V"],
            ..syntax("", &[])
        },
        "time" => syntax("fo", &["--format", "--output"]),
        "stdbuf" => syntax("ioe", &["--input", "--output", "--error"]),
        "ionice" => WrapperSyntax {
            no_command: &["-p", "--pid", "-P", "--pgid", "-u", "--uid"],
            ..syntax(
                "cnpPu",
                &["--class", "--classdata", "--pid", "--pgid", "--uid"],
            )
        },
        _ => return None,
    })
}

/// The inner command of a wrapper (empty when it runs none), or None if `program` is not a
/// wrapper.
pub(super) fn unwrap(program: &str, argv: &[Word]) -> Option<Vec<Word>> {
    let syntax = wrapper_syntax(program)?;
    let mut i = 1;
    let mut prefix: Vec<Word> = Vec::new();
    // Options.
    while let Some(w) = argv.get(i) {
        let t = w.text.as_str();
        if t == "--" {
            i += 1;
            break;
        }
        if let Some(long) = t.strip_prefix("--") {
            let name = format!("--{}", long.split('=').next().unwrap_or(long));
            if syntax.no_command.contains(&name.as_str()) {
                return Some(Vec::new());
            }
            if program == "env" && name == "--split-string" {
                let value = long.split_once('=').map(|(_, v)| v.to_owned());
                let value = value.or_else(|| {
                    i += 1;
                    argv.get(i).map(|w| w.text.clone())
                });
                prefix.extend(
                    value
                        .iter()
                        .flat_map(|v| v.split_whitespace().map(Word::literal)),
                );
            } else if syntax.long_with_value.contains(&name.as_str()) && !long.contains('=') {
                i += 1;
            }
            i += 1;
            continue;
        }
        if t.len() > 1 && t.starts_with('-') {
            if syntax.numeric_options && t[1..].chars().all(|c| c.is_ascii_digit()) {
                i += 1;
                continue;
            }
            // A cluster like `-iu NAME` or `-uNAME`: the first value-taking letter eats the rest
            // of the word, or the next word when it is last.
            let letters: Vec<char> = t[1..].chars().collect();
            for (k, c) in letters.iter().enumerate() {
                if syntax.no_command.contains(&format!("-{c}").as_str()) {
                    return Some(Vec::new());
                }
                if syntax.short_with_value.contains(*c) {
                    let attached: String = letters[k + 1..].iter().collect();
                    if program == "env" && *c == 'S' {
                        let value = if attached.is_empty() {
                            i += 1;
                            argv.get(i).map(|w| w.text.clone()).unwrap_or_default()
                        } else {
                            attached
                        };
                        prefix.extend(value.split_whitespace().map(Word::literal));
                    } else if attached.is_empty() {
                        i += 1;
                    }
                    break;
                }
            }
            i += 1;
            continue;
        }
        if t == "-" && program == "env" {
            i += 1;
            continue;
        }
        break;
    }
    if syntax.assignments {
        while argv.get(i).is_some_and(|w| is_assignment(&w.text)) {
            i += 1;
        }
    }
    i += syntax.operands;
    let mut rest = prefix;
    rest.extend(argv.get(i..).unwrap_or(&[]).iter().cloned());
    Some(rest)
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "su",
];

/// For a shell run with `-c` (or `su -c`): Some(Some(script)); Some(None) when the script word
/// is missing; None when this is not a shell running a `-c` string.
pub(super) fn shell_script(program: &str, argv: &[Word]) -> Option<Option<Word>> {
    if !SHELLS.contains(&program) {
        return None;
    }
    let args = &argv[1..];
    if program == "su" {
        // su takes its -c value directly and user names anywhere.
        let mut it = args.iter();
        while let Some(w) = it.next() {
            if w.text == "-c" || w.text == "--command" {
                return Some(it.next().cloned());
            }
            if let Some(v) = w.text.strip_prefix("--command=") {
                return Some(Some(Word {
                    text: v.to_owned(),
                    dynamic: w.dynamic,
                }));
            }
        }
        return None;
    }
    let mut has_c = false;
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let t = w.text.as_str();
        if t == "--" || t == "-" {
            i += 1;
            break;
        }
        if t.starts_with("--") {
            if matches!(t, "--rcfile" | "--init-file") {
                i += 1;
            }
            i += 1;
            continue;
        }
        if t.len() > 1 && (t.starts_with('-') || t.starts_with('+')) {
            has_c |= t.starts_with('-') && t.contains('c');
            if t.contains('o') || t.contains('O') {
                i += 1; // `-o pipefail`, `-O extglob`
            }
            i += 1;
            continue;
        }
        break;
    }
    if !has_c {
        return None;
    }
    Some(args.get(i).cloned())
}

/// The commands `find` runs: each `-exec`/`-execdir`/`-ok`/`-okdir` up to `;` or `+`.
pub(super) fn find_exec_segments(argv: &[Word]) -> Vec<Vec<Word>> {
    let mut segments = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        if matches!(
            argv[i].text.as_str(),
            "-exec" | "-execdir" | "-ok" | "-okdir"
        ) {
            let start = i + 1;
            let mut end = start;
            while end < argv.len() && !matches!(argv[end].text.as_str(), ";" | "+") {
                end += 1;
            }
            if end > start {
                segments.push(argv[start..end].to_vec());
            }
            i = end;
        }
        i += 1;
    }
    segments
}
