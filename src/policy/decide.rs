//! `decide`: whether the policy lets one tool request go ahead: allow, deny or ask the user,
//! for every tool.
//!
//! Owns the answer per request. A command line is judged by the command rules on its
//! analysis (the parser worker's, handed in: grammars never run in the server); file writes
//! and edits are allowed here and held to the write rules (`Plans::protected`,
//! `Plans::writable_only`) by the workspace on the final target, the one place that check
//! cannot race; reads and interpreter cells are confined work with nothing to decide. It
//! does not ask anyone (that is `server`) and runs nothing.

use super::Policy;
use super::commands::{Decision, Verdict};
use crate::parser::bash::Analysis;

/// One tool call as the policy sees it.
pub enum Request<'a> {
    ShellExec {
        command: &'a str,
        analysis: Analysed<'a>,
    },
    WriteFile,
    EditFile,
    ReadFile,
    CodeInterpreter,
}

/// What the parser worker made of a command line.
pub enum Analysed<'a> {
    /// Not analysed: [`Policy::needs_analysis`] said the rules could not use it.
    NotNeeded,
    Done(&'a Analysis),
    /// The analysis failed (the worker crashed, hung or hit a limit); says why.
    Failed(&'a str),
}

impl Policy {
    /// Whether [`Policy::decide`] needs the command line's analysis to judge it; when it
    /// does not, the command is not analysed at all.
    pub fn needs_analysis(&self) -> bool {
        self.commands.needs_analysis()
    }

    /// The policy's answer to `request`.
    pub fn decide(&self, request: &Request<'_>) -> Verdict {
        let allow = Verdict {
            decision: Decision::Allow,
            reason: None,
        };
        match request {
            Request::ShellExec { command, analysis } => match analysis {
                Analysed::Done(analysis) => self.commands.decide(analysis),
                Analysed::Failed(why) => self.commands.decide_unanalysed(command, why),
                Analysed::NotNeeded if self.needs_analysis() => self
                    .commands
                    .decide_unanalysed(command, "the command line was not analysed"),
                Analysed::NotNeeded => allow,
            },
            Request::WriteFile
            | Request::EditFile
            | Request::ReadFile
            | Request::CodeInterpreter => allow,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::bash::analyze;

    #[test]
    fn commands_are_judged_by_their_analysis_and_files_by_the_workspace() {
        let policy = Policy::builtin_default();
        let line = "rm -rf ~";
        let denied = policy.decide(&Request::ShellExec {
            command: line,
            analysis: Analysed::Done(&analyze(line)),
        });
        assert_eq!(denied.decision, Decision::Deny, "{denied:?}");
        let unanalysed = policy.decide(&Request::ShellExec {
            command: line,
            analysis: Analysed::Failed("worker crashed"),
        });
        assert_eq!(
            unanalysed.decision, policy.commands.on_analysis_failure,
            "{unanalysed:?}"
        );
        for request in [Request::WriteFile, Request::EditFile, Request::ReadFile] {
            assert_eq!(policy.decide(&request).decision, Decision::Allow);
        }
    }
}
