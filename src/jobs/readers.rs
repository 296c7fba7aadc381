//! Who reads what is typed into a job: its shells that read commands, and its terminal's
//! foreground programs.
//!
//! The command rules judge input to a job when a shell may run it as a command
//! (`tools::job_input`). That is so while any of the job's processes is a shell reading its
//! commands from its input (`bash`, `sh -i`; not `sh -c …` nor `bash build.sh`), whatever runs
//! in the terminal's foreground now: what is typed while `sleep` or `make` runs in front of an
//! interactive shell waits in the terminal and is read by that shell next. Under a pty, this
//! module also names the programs of the terminal's foreground group (those that read what is
//! typed now), since only a shell there turns editing keys into a different command line.
//! Programs are named by the last component of their executable (`/proc/<pid>/exe`, which a
//! process cannot rename the way it can its `comm`); the processes are the job's members,
//! found and bounded like `sockets`'.
//!
//! Owns only the reading; what is judged is `tools::job_input`'s.

use super::sockets::Members;
use std::collections::HashMap;

/// The programs (executable names) of the job's foreground group `group` that have no child
/// in it; empty when none of the job's processes is in that group (or none could be read).
pub(crate) fn readers(members: &Members, group: u32) -> Vec<String> {
    // pid → parent, for the members of the group.
    let mut in_group: HashMap<u32, u32> = HashMap::new();
    for pid in members.pids() {
        if let Some((parent, pgrp)) = parent_and_group(pid)
            && pgrp == group
        {
            in_group.insert(pid, parent);
        }
    }
    let parents: std::collections::HashSet<u32> = in_group.values().copied().collect();
    let mut names: Vec<String> = in_group
        .keys()
        .filter(|pid| !parents.contains(pid))
        .filter_map(|&pid| executable(pid))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Programs that read commands: the shells, and busybox (whose `sh` is one).
const SHELLS: &[&str] = &[
    "sh", "bash", "rbash", "dash", "zsh", "fish", "ksh", "ksh93", "mksh", "pdksh", "ash", "yash",
    "tcsh", "csh", "busybox",
];
/// The most of a process's command line read.
const MAX_CMDLINE: u64 = 64 * 1024;

/// Whether `program` (a name or path) is a shell.
pub(crate) fn is_shell(program: &str) -> bool {
    let name = program.rsplit('/').next().unwrap_or(program);
    SHELLS.contains(&name.trim_start_matches('-'))
}

/// Whether a shell given `args` (the words after its name) reads its commands from its input:
/// no `-c`, no script operand and no `<` redirection (`-s` reads its input whatever follows).
/// The words may be a command line's (then a redirection is a word) or a process's argv.
pub(crate) fn shell_args_read_input<'a>(args: impl IntoIterator<Item = &'a str>) -> bool {
    let mut skip_next = false;
    for word in args {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        let redirect = word.trim_start_matches(|c: char| c.is_ascii_digit());
        match word {
            "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file" => skip_next = true,
            _ if redirect.starts_with('<') => return false,
            // An output redirection; its target is the next word when not attached.
            _ if redirect.starts_with('>') => {
                skip_next = redirect.trim_start_matches('>').is_empty()
            }
            _ if word.starts_with("--") => {}
            _ if word.starts_with(['-', '+']) => {
                if word.contains('s') {
                    return true;
                }
                if word.contains('c') {
                    return false;
                }
            }
            // A script operand: the shell reads its commands from that file.
            _ => return false,
        }
    }
    true
}

/// Whether any of the job's processes is a shell reading its commands from its input; None
/// when none of them could be read.
pub(crate) fn a_shell_reads_input(members: &Members) -> Option<bool> {
    let pids = members.pids();
    let mut read_any = false;
    for pid in pids {
        let Some((exe, args)) = program_and_args(pid) else {
            continue;
        };
        read_any = true;
        if is_shell(&exe) && shell_args_read_input(args.iter().skip(1).map(String::as_str)) {
            return Some(true);
        }
    }
    read_any.then_some(false)
}

/// A process's executable and arguments, read as one image: a process that `exec`s between
/// the two reads (a job's shell starting its program) would pair one program's name with
/// another's arguments, so the executable is read again after the arguments and the pair is
/// taken only when it did not change; and in the middle of an `exec` the new program's
/// arguments read as empty for a moment (every program has at least its name), which is no
/// reading either. Tried a few times, then left out.
fn program_and_args(pid: u32) -> Option<(String, Vec<String>)> {
    for attempt in 0..4 {
        if attempt > 0 {
            std::thread::yield_now();
        }
        let exe = executable(pid)?;
        let args = argv(pid)?;
        if !args.is_empty() && executable(pid).as_ref() == Some(&exe) {
            return Some((exe, args));
        }
    }
    None
}

/// The last component of a process's executable ("bash (deleted)" for a binary replaced while
/// it runs reads as "bash").
fn executable(pid: u32) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let name = exe.file_name()?.to_string_lossy().into_owned();
    Some(name.trim_end_matches(" (deleted)").to_owned())
}

/// A process's arguments (at most [`MAX_CMDLINE`] bytes of them).
fn argv(pid: u32) -> Option<Vec<String>> {
    let bytes = super::sockets::read_bounded(&format!("/proc/{pid}/cmdline"), MAX_CMDLINE)?;
    Some(
        bytes
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// A process's parent and process group, from `/proc/<pid>/stat` (read after the last `)`:
/// the name before it may hold anything, spaces and parentheses included).
fn parent_and_group(pid: u32) -> Option<(u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

fn parse_stat(stat: &str) -> Option<(u32, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let _state = fields.next()?;
    let parent = fields.next()?.parse().ok()?;
    let group = fields.next()?.parse().ok()?;
    Some((parent, group))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_after_the_name_whatever_the_name_holds() {
        assert_eq!(
            parse_stat("42 (a) b) (c) S 7 42 42 0 -1"),
            Some((7, 42)),
            "a name with parentheses and spaces"
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn shells_read_their_input_unless_given_a_command_or_a_script() {
        let reads = |args: &[&str]| shell_args_read_input(args.iter().copied());
        assert!(reads(&[]));
        assert!(reads(&["-i"]));
        assert!(reads(&["--norc", "-i"]));
        assert!(reads(&["-s", "arg"]));
        assert!(reads(&["-o", "vi"]));
        assert!(!reads(&["-c", "ls"]));
        assert!(!reads(&["-ic", "ls"]));
        assert!(!reads(&["build.sh"]));
        assert!(!reads(&["--rcfile", "x", "script.sh"]));
        assert!(is_shell("/usr/bin/bash") && is_shell("-bash") && !is_shell("shellcheck"));
    }

    #[test]
    fn a_shell_reading_its_input_is_found_among_a_jobs_processes() {
        let me = std::process::id();
        let mut script = std::process::Command::new("sh")
            .args(["-c", "sleep 5"])
            .spawn()
            .unwrap();
        let script_members = Members {
            cgroup: None,
            root: Some(script.id()),
        };
        // Read only once the child is past its exec: until then it is a copy of this test
        // program, and in the middle of the exec it reads as nothing (None).
        until_execed(script.id());
        let found_script = a_shell_reads_input(&script_members);

        let _ = script.kill();
        let _ = script.wait();
        let mut shell = std::process::Command::new("sh")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let shell_members = Members {
            cgroup: None,
            root: Some(shell.id()),
        };
        until_execed(shell.id());
        let found_shell = a_shell_reads_input(&shell_members);
        let _ = shell.kill();
        let _ = shell.wait();
        assert_eq!(found_script, Some(false), "sh -c is not reading commands");
        assert_eq!(found_shell, Some(true), "a plain sh reads its input");
        let nobody = Members {
            cgroup: None,
            root: Some(u32::MAX - me),
        };
        assert_eq!(a_shell_reads_input(&nobody), None);
    }

    /// Waits (at most 5 s) until `pid` runs another program than this test's and its arguments
    /// read as that program's.
    fn until_execed(pid: u32) {
        let mine = executable(std::process::id()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Some((exe, _)) = program_and_args(pid)
                && exe != mine
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("process {pid} did not exec within 5 s");
    }

    #[test]
    fn a_child_in_the_group_is_what_reads_not_its_parent() {
        let me = std::process::id();
        let (_, group) = parent_and_group(me).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        until_execed(child.id());
        let members = Members {
            cgroup: None,
            root: Some(me),
        };
        let found = readers(&members, group);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.iter().any(|n| n == "sleep"), "{found:?}");
        assert!(readers(&members, u32::MAX).is_empty());
    }
}
