//! What reading a command line finds: the [`SimpleCommand`]s it would run, each a list of
//! [`Word`]s with the wrappers peeled off it, and the [`Unknown`] parts no rule can judge,
//! together one [`Analysis`]. These cross the parser worker's pipe and are what
//! `policy::commands::rules` matches on.
//!
//! Owns the data only; finding it is `walk`'s.

use serde::{Deserialize, Serialize};

/// One word of a command line as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Word {
    /// The value after quote removal when `dynamic` is false; otherwise the source text with
    /// quote characters removed (`"$HOME"/` → `$HOME/`), never an expanded value.
    pub text: String,
    /// The word contains an expansion, substitution or ANSI-C string.
    pub dynamic: bool,
}

impl Word {
    pub(super) fn literal(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            dynamic: false,
        }
    }
}

/// One simple command that the command line would run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimpleCommand {
    /// The command's words: `words[0]` is the program as written (a path or a name), after
    /// wrappers were removed. (Words of a command line as written, not what cordon runs:
    /// that is `exec::Program`.)
    pub words: Vec<Word>,
    /// Wrappers peeled off to get here, outermost first (`sudo env rm` → `["sudo", "env"]`).
    pub wrappers: Vec<String>,
    /// Programs that read this command's output: later stages of its pipeline, and the
    /// command whose argument is the `$(…)`/`<(…)` it runs in.
    pub feeds_into: Vec<String>,
    /// The shell function whose body contains this command, if any.
    pub in_function: Option<String>,
    /// How many substitutions deep it sits (0 = top level of its script). Only the walk
    /// needs it, so it does not cross the parser worker's pipe.
    #[serde(skip)]
    pub(super) subst_depth: usize,
}

impl SimpleCommand {
    /// The program's name: the last path component of `argv[0]`.
    pub fn program(&self) -> &str {
        program_name(&self.words[0].text)
    }

    /// The command as it reads after unwrapping, for messages.
    pub fn display(&self) -> String {
        let words: Vec<&str> = self.words.iter().map(|w| w.text.as_str()).collect();
        words.join(" ")
    }
}

/// A part of the command line no rule can judge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unknown {
    /// Why, in words a user understands.
    pub reason: String,
    /// The text it is about (shortened).
    pub text: String,
}

/// Everything the command line was found to run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Analysis {
    pub commands: Vec<SimpleCommand>,
    pub unknown: Vec<Unknown>,
    /// The command line itself does not parse as shell (an open quote, a backslash at its end, an
    /// unclosed `do`, or plain bad syntax): typed into a shell, it waits for more lines.
    #[serde(default)]
    pub unfinished: bool,
}

/// The last path component of a program as written (`/usr/bin/rm` → `rm`).
pub(crate) fn program_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}
