//! Input to a job as the command rules see it: which input is a command line, and which text
//! is judged.
//!
//! Lines typed into a shell job (`bash -i` under a pty, `sh` reading its stdin) run like a
//! `shell_exec` command, so they are judged like one: a `deny` rule refuses the input (nothing
//! is written), an `ask` rule asks first (the same channels, the circuit breaker included),
//! and the call's audit record carries the judged text as its `arguments.command`, which
//! `policy replay` judges again. Input is judged while a shell may run it: one of the job's
//! processes is a shell reading its commands from its input, or the job's command starts one
//! (`bash`, `sh -i`, `exec zsh`; not `bash build.sh`, `sh -c …` or `sh < file`). That holds
//! while the shell runs another program in front (`python3`, `sleep`): what is typed then and
//! not read by that program is read by the shell next, so judging only what a shell reads
//! at this moment would let a line typed ahead pass unjudged. A job with no such shell
//! (`exec python3 -i`, a dev server) has its input written as it is. Under a pty, while the
//! terminal's foreground program is not a shell (`python3` started from `bash`), the text may
//! not be shell at all: only a rule that matches what does parse decides (never
//! `commands.on_unknown`), and the text is not kept as the start of the shell's next line.
//!
//! Nothing runs before a newline, so only input holding one is judged, and the text judged is
//! what the shell has been typed since its last whole command (the job's `typed`) followed by
//! this input: a command sent in pieces (`rm -rf ` then `~\n`, a line ending in a backslash,
//! an open quote or `do`) is judged whole. The text is kept while it does not parse as
//! complete shell (at most [`MAX_TYPED`] bytes). Under a pty, Ctrl-C clears it, as it clears
//! the shell's line, and while a shell is in the terminal's foreground its editing keys (Tab,
//! Backspace, the arrows and every other escape sequence, Ctrl-U, Ctrl-W) would make it run a
//! line other than the text judged, so such input is refused with a note to send plain lines;
//! Ctrl-C, Ctrl-D, Ctrl-Z and Ctrl-\\ alone are keys, not text, and pass. Without a terminal
//! every byte is text, judged as it is.
//!
//! Like every command rule this is a courtesy layer in front of the sandbox (SECURITY.md):
//! a renamed shell binary, `python3 -c 'import pty; pty.spawn("bash")'`, history expansion or
//! an alias defined earlier runs text no rule saw. What confines the result is the sandbox.

use super::shell_exec::{self, Approval, Approver, Overrule, Refusal, ShellExecArgs};
use crate::audit::{Answer, AnsweredBy, Decision};
use crate::jobs::Job;
use crate::jobs::readers::{is_shell, shell_args_read_input};
use crate::policy::commands::{Decision as RuleDecision, Verdict};
use crate::policy::{Analysed, Request};
use crate::runtime::Session;
use crate::shape::{ErrorKind, ToolError};

/// The most unfinished text kept for judging with the next input.
pub(crate) const MAX_TYPED: usize = 16 * 1024;
/// Keys a terminal turns into signals or an end of input: sent alone under a pty, they are
/// not text.
const KEYS: &[char] = &['\u{3}', '\u{4}', '\u{1a}', '\u{1c}'];

/// Whether `command` (a job's command line, as `sh -c` runs it) starts a shell that reads
/// its commands from its input: one of its pipeline stages or list items is a shell with no
/// `-c`, no script operand and no `<` redirection (`bash`, `bash -i --norc`, `exec zsh -l`,
/// `cat cmds | sh -s`). A reading of the words, not a parse: it covers the moments before
/// that shell runs (and a job whose processes cannot be read).
pub(crate) fn starts_a_shell(command: &str) -> bool {
    command
        .split(['|', ';', '&', '\n', '(', ')', '{', '}'])
        .any(reads_its_input)
}

fn reads_its_input(segment: &str) -> bool {
    let mut words = segment
        .split_whitespace()
        .map(|w| w.trim_matches(['"', '\'']));
    let program = loop {
        match words.next() {
            // Assignments and wrappers that leave stdin where it was.
            Some(w) if w.contains('=') && !w.starts_with(['-', '=']) => {}
            Some("exec" | "env" | "command" | "nohup" | "nice" | "stdbuf" | "time") => {}
            Some(w) => break w,
            None => return false,
        }
    };
    is_shell(program) && shell_args_read_input(words)
}

/// Whether a shell may run what is typed into `job` as a command: one of its processes is a
/// shell reading its input, or its command starts one (see the module note).
pub(crate) fn reads_commands(job: &Job) -> bool {
    job.a_shell_reads_input() == Some(true) || starts_a_shell(&job.command)
}

/// Who reads a job's input now, as far as it can be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// A shell: through a pipe (whose readers cannot be told apart), or the program in the
    /// terminal's foreground, or a foreground that cannot be read.
    Shell,
    /// Under a pty, a foreground program that is not a shell (`python3` started from `bash`):
    /// it reads the text, unless it ends first and leaves it to the shell (typed ahead).
    AnotherProgram,
}

fn reader(job: &Job) -> Reader {
    if !job.pty {
        return Reader::Shell;
    }
    match job.foreground_programs() {
        Some(programs) if !programs.is_empty() && !programs.iter().any(|p| is_shell(p)) => {
            Reader::AnotherProgram
        }
        _ => Reader::Shell,
    }
}

/// What typing one input into a job comes to.
pub(crate) enum Typing<P> {
    /// It may be written. `decision` is the call's (for the audit log); `command` the text
    /// judged, when some was; `typed_after` what the job's `typed` becomes once the input is
    /// written (None: unchanged).
    Admitted {
        decision: Decision,
        command: Option<String>,
        typed_after: Option<String>,
    },
    /// Not written: the refusal, with the call's decision and the text judged.
    Refused {
        error: ToolError,
        decision: Decision,
        command: Option<String>,
    },
    /// Asked; the answer comes with a later request (the 2026-07-28 `input_required`).
    Pending {
        pending: P,
        rule: String,
        command: String,
    },
}

/// Judges `input` for `job`, whose shell has been typed `typed` since its last whole command.
pub(crate) async fn judge<A: Approver>(
    ctx: &Session,
    job: &Job,
    typed: &str,
    input: &str,
    approver: A,
) -> Typing<A::Pending> {
    let admitted = |typed_after| Typing::Admitted {
        decision: Decision::Allow,
        command: None,
        typed_after,
    };
    if !reads_commands(job) {
        return admitted(None);
    }
    // An end of input (Ctrl-D under a pty; `"\u0004"` alone closes a pipe) makes a shell run
    // what its line holds, newline or not: that text is judged as the line it then is.
    let ends_input = if job.pty {
        input.chars().all(|c| KEYS.contains(&c)) && input.contains('\u{4}')
    } else {
        input == "\u{4}"
    };
    // Without a terminal every other byte is text the shell reads, control characters included.
    if job.pty && !ends_input && input.chars().all(|c| KEYS.contains(&c)) {
        // Ctrl-C clears the shell's line; the others leave it as it was.
        return admitted(input.contains('\u{3}').then(String::new));
    }
    if ends_input && typed.trim().is_empty() {
        return admitted(None);
    }
    let input = if ends_input { "\n" } else { input };
    let reader = reader(job);
    // Editing keys would make the shell run another line than the one judged.
    if let Some(key) = editing_key(input, job.pty).filter(|_| job.pty && reader == Reader::Shell) {
        return Typing::Refused {
            error: ToolError::new(
                ErrorKind::InvalidArgument,
                format!(
                    "input not written: it holds {key}, and input to the job's shell is judged \
                     by the policy's command rules as the text it is, which a terminal's \
                     editing keys would change. Send the command as a plain line ending in \
                     \"\\n\" (Ctrl-C, Ctrl-D, Ctrl-Z and Ctrl-\\ are keys of their own: send \
                     one alone)"
                ),
            ),
            decision: Decision::Allow,
            command: None,
        };
    }
    let text = format!("{typed}{}", input.replace('\r', "\n"));
    let Some(last_newline) = text.rfind('\n') else {
        // Nothing runs before a newline: typed, judged with the line it becomes.
        return admitted(Some(bounded(text)));
    };
    let (verdict, unfinished) = assess(ctx, &text, reader).await;
    // Text a shell has not finished reading is kept for the next input; text another program
    // reads is that program's (kept, it would make the shell's next line judged as something
    // it is not).
    let typed_after = if unfinished && reader == Reader::Shell {
        bounded(text.clone())
    } else {
        text[last_newline + 1..].to_owned()
    };
    let command = Some(text.clone());
    let Some(reason) = verdict
        .reason
        .filter(|_| verdict.decision != RuleDecision::Allow)
    else {
        return Typing::Admitted {
            decision: Decision::Allow,
            command,
            typed_after: Some(typed_after),
        };
    };
    let args = as_command(&text);
    let approved = |by| Typing::Admitted {
        decision: asked(&reason.rule, Answer::Approved, Some(by)),
        command: command.clone(),
        typed_after: Some(typed_after.clone()),
    };
    let refused = |refusal: Refusal, by: Option<AnsweredBy>| Typing::Refused {
        error: written_nothing(
            shell_exec::refusal_error(ctx, &reason, &refusal, by.as_ref()),
            typed,
            job.pty,
        ),
        decision: refusal.audit_decision(&reason.rule, by),
        command: command.clone(),
    };
    match verdict.decision {
        RuleDecision::Allow => unreachable!("filtered above"),
        RuleDecision::Deny => match approver.overrule(&args, &reason).await {
            Overrule::Refuse => refused(Refusal::Denied, None),
            Overrule::Allow(by) => approved(by),
        },
        RuleDecision::Ask => match approver.ask(&args, &reason).await {
            Approval::Approved(by) => approved(by),
            Approval::Refused(refusal, by) => refused(refusal, by),
            Approval::Pending(pending) => Typing::Pending {
                pending,
                rule: reason.rule.clone(),
                command: text,
            },
        },
    }
}

/// A refusal of input, saying that nothing was written and, when the shell's line already
/// held earlier input, that it was judged with it and how to clear it.
fn written_nothing(mut error: ToolError, typed: &str, pty: bool) -> ToolError {
    error.message = format!("input not written to the job's shell. {}", error.message);
    if !typed.trim().is_empty() {
        let clear = if pty {
            "send Ctrl-C (\"\\u0003\") alone to clear it"
        } else {
            "a shell reading a pipe cannot be told to drop it: restart the job \
             (`restart: true`)"
        };
        error.message.push_str(&format!(
            " The shell's line already held {} bytes of earlier input, judged together with \
             this input as one line; {clear}.",
            typed.len()
        ));
    }
    error
}

/// `text`, or when it is longer than [`MAX_TYPED`], what follows its last newline (which the
/// next input is judged with).
fn bounded(text: String) -> String {
    if text.len() <= MAX_TYPED {
        return text;
    }
    match text.rfind('\n') {
        Some(at) if text.len() - at - 1 <= MAX_TYPED => text[at + 1..].to_owned(),
        _ => String::new(),
    }
}

/// The first terminal editing key in `input`, described, if it holds one.
fn editing_key(input: &str, pty: bool) -> Option<String> {
    input.chars().find_map(|c| {
        let name = match c {
            '\n' | '\r' => return None,
            // Without a terminal a tab is only a blank; under one, the shell completes.
            '\t' if !pty => return None,
            '\t' => "Tab (completion)".to_owned(),
            '\u{1b}' => "an escape sequence (ESC: arrows, history, other keys)".to_owned(),
            '\u{7f}' | '\u{8}' => "Backspace".to_owned(),
            c if KEYS.contains(&c) => format!("Ctrl-{} inside text", ctrl_letter(c)),
            c if (c as u32) < 0x20 => format!("Ctrl-{}", ctrl_letter(c)),
            c if ('\u{80}'..='\u{9f}').contains(&c) => {
                format!("the control character U+{:04X}", c as u32)
            }
            _ => return None,
        };
        Some(name)
    })
}

fn ctrl_letter(c: char) -> char {
    char::from_u32(c as u32 + 0x40).unwrap_or('?')
}

/// The command rules' verdict on `text`, and whether it does not parse as complete shell
/// (unknown when the policy needs no analysis: then nothing is kept for the next input).
async fn assess(ctx: &Session, text: &str, reader: Reader) -> (Verdict, bool) {
    let policy = &ctx.runtime.policy;
    let decide = |analysis| {
        policy.decide(&Request::ShellExec {
            command: text,
            analysis,
        })
    };
    if !policy.needs_analysis() {
        return (decide(Analysed::NotNeeded), false);
    }
    let Some(parser) = &ctx.runtime.parser else {
        return (
            decide(Analysed::Failed("this runtime has no parser worker")),
            false,
        );
    };
    match parser.analyze(&[text.to_owned()]).await {
        Ok(mut analyses) if analyses.len() == 1 => {
            let mut analysis = analyses.remove(0);
            if reader == Reader::AnotherProgram {
                // Perhaps not shell at all (Python typed into `python3`): only a rule that
                // matches what does parse decides, never `on_unknown`.
                analysis.unknown.clear();
            }
            (decide(Analysed::Done(&analysis)), analysis.unfinished)
        }
        Ok(_) => (
            decide(Analysed::Failed("the analysis came back empty")),
            false,
        ),
        Err(e) => (decide(Analysed::Failed(&e.to_string())), false),
    }
}

/// The judged text as the `shell_exec` call a person is asked about.
fn as_command(text: &str) -> ShellExecArgs {
    ShellExecArgs {
        command: text.to_owned(),
        cwd: ".".into(),
        timeout_secs: None,
        stdin: None,
        env: None,
        background: false,
        pty: false,
        cols: None,
        rows: None,
        wait_secs: None,
        until: None,
    }
}

fn asked(rule: &str, answer: Answer, by: Option<AnsweredBy>) -> Decision {
    Decision::Ask {
        rule: rule.to_owned(),
        answer,
        by,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_reads_commands_when_its_command_is_a_shell_reading_its_input() {
        for shell in [
            "bash",
            "bash -i",
            "bash --norc -i",
            "/bin/sh",
            "exec zsh -l",
            "env TERM=dumb bash",
            "cat cmds | sh -s",
            "bash -o vi",
            "bash -i 2>&1",
            "cd src && bash",
            "sh -s arg",
        ] {
            assert!(starts_a_shell(shell), "{shell}");
        }
        for other in [
            "python3",
            "bash build.sh",
            "sh -c 'sleep 1'",
            "bash -ic ls",
            "sh < script",
            "npm run dev",
            "bash --rcfile x script.sh",
            "shellcheck x",
        ] {
            assert!(!starts_a_shell(other), "{other}");
        }
    }

    #[test]
    fn editing_keys_are_named_and_plain_lines_pass() {
        assert_eq!(editing_key("ls -l\n", true), None);
        assert_eq!(editing_key("a\tb\r\n", false), None);
        assert!(
            editing_key("rm -rf ~x\u{7f}\n", true)
                .unwrap()
                .contains("Backspace")
        );
        assert!(editing_key("\u{1b}[A\n", true).unwrap().contains("escape"));
        assert!(editing_key("ls\t", true).unwrap().contains("Tab"));
        assert!(editing_key("\u{3}ls\n", true).unwrap().contains("Ctrl-C"));
        assert!(editing_key("x\u{15}\n", true).unwrap().contains("Ctrl-U"));
    }

    #[test]
    fn unfinished_text_is_kept_within_its_bound() {
        assert_eq!(bounded("rm -rf ".into()), "rm -rf ");
        let long = format!("{}\nls", "x".repeat(MAX_TYPED));
        assert_eq!(bounded(long), "ls");
        assert_eq!(bounded("y".repeat(MAX_TYPED + 1)), "");
    }
}
