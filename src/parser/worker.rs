//! The parser worker's loop: `cordon __parse-worker`, a confined child that runs every
//! tree-sitter grammar on behalf of the server, which never does.
//!
//! Owns reading requests from stdin, answering on stdout, and the trees it remembers for
//! incremental re-parses. It starts by locking itself down further (`lockdown`): it needs no
//! file, no network and no new process, since the server sends the text. A crash here (a
//! grammar's assertion, a stack overflow, the memory limit) ends only this process; the
//! server's client notices, answers `unavailable` and starts another.

use super::bash::analyze;
use super::lockdown;
use super::protocol::{
    ProtocolError, Request, Response, SyntaxOutcome, decode_body, read_body, write_message,
};
use super::syntax::{CheckError, ParsedSource, check_edited, check_keeping_tree};
use std::collections::VecDeque;
use std::io::{BufReader, BufWriter};

/// Fault injection for the tests of the client's timeout path: when the server was started
/// with this variable set, it passes it on, and a request whose text contains its value makes
/// the worker stop answering (it sleeps, as a grammar stuck in a loop would stop answering).
pub(crate) const HANG_ON_ENV: &str = "CORDON_PARSER_WORKER_HANG_ON";

/// How many texts' trees are kept, and how many bytes of text at most: trees cost several
/// times their text, and the worker's memory limit is small.
const TREES: usize = 32;
const TREE_TEXT_BYTES: usize = 4 << 20;

/// Remembered parses, newest last.
#[derive(Default)]
struct Trees {
    entries: VecDeque<(u64, String, ParsedSource)>,
    bytes: usize,
}

impl Trees {
    fn get(&self, key: u64) -> Option<&(u64, String, ParsedSource)> {
        self.entries.iter().rev().find(|(k, _, _)| *k == key)
    }

    fn put(&mut self, key: u64, text: String, tree: ParsedSource) {
        if text.len() > TREE_TEXT_BYTES / 4 {
            return;
        }
        if let Some(i) = self.entries.iter().position(|(k, _, _)| *k == key)
            && let Some((_, old, _)) = self.entries.remove(i)
        {
            self.bytes -= old.len();
        }
        self.bytes += text.len();
        self.entries.push_back((key, text, tree));
        while self.entries.len() > TREES || self.bytes > TREE_TEXT_BYTES {
            match self.entries.pop_front() {
                Some((_, old, _)) => self.bytes -= old.len(),
                None => break,
            }
        }
    }
}

/// Runs the worker until its stdin ends; returns the process exit code.
pub fn run() -> i32 {
    if let Err(e) = lockdown::apply() {
        // The executor's confinement still holds; this layer is defence in depth, and the
        // server logs what the worker says on stderr.
        eprintln!("cordon parser worker: running without its own lockdown: {e}");
    }
    let hang_on = std::env::var(HANG_ON_ENV).ok().filter(|m| !m.is_empty());
    let mut input = BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let mut output = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut trees = Trees::default();
    loop {
        let body = match read_body(&mut input) {
            Ok(Some(body)) => body,
            Ok(None) => return 0,
            Err(e) => {
                // The stream is out of step (or the pipe broke): say why once and stop; the
                // client starts a fresh worker.
                let _ = write_message(
                    &mut output,
                    &Response::Error {
                        id: 0,
                        message: e.to_string(),
                    },
                );
                return 2;
            }
        };
        let response = match decode_body::<Request>(&body).and_then(|r| r.validate().map(|_| r)) {
            Ok(request) => {
                if let Some(marker) = &hang_on
                    && mentions(&request, marker)
                {
                    loop {
                        std::thread::sleep(std::time::Duration::from_secs(3600));
                    }
                }
                answer(request, &mut trees)
            }
            Err(e) => Response::Error {
                id: 0,
                message: e.to_string(),
            },
        };
        if let Err(ProtocolError::Io(_)) = write_message(&mut output, &response) {
            return 0; // the server went away
        }
    }
}

fn mentions(request: &Request, marker: &str) -> bool {
    match request {
        Request::Syntax { text, .. } => text.contains(marker),
        Request::Commands { lines, .. } => lines.iter().any(|l| l.contains(marker)),
    }
}

/// Answers one well-formed request.
fn answer(request: Request, trees: &mut Trees) -> Response {
    match request {
        Request::Syntax {
            id,
            language,
            text,
            remember,
            previous,
        } => {
            let old = previous
                .and_then(|key| trees.get(key))
                .filter(|(_, _, tree)| tree.language() == language);
            let incremental = old.is_some();
            let result = match old {
                Some((_, old_text, tree)) => check_edited(tree, old_text, &text),
                None => check_keeping_tree(language, &text),
            };
            let outcome = match result {
                Ok((errors, tree)) => {
                    if let Some(key) = remember {
                        trees.put(key, text, tree);
                    }
                    SyntaxOutcome::Checked {
                        errors,
                        incremental,
                    }
                }
                Err(CheckError::TooSlow { budget_ms, .. }) => SyntaxOutcome::TooSlow {
                    budget_ms: budget_ms as u64,
                },
                Err(CheckError::Grammar { detail, .. }) => SyntaxOutcome::Grammar { detail },
            };
            Response::Syntax { id, outcome }
        }
        Request::Commands { id, lines } => Response::Commands {
            id,
            analyses: lines.iter().map(|l| analyze(l)).collect(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::syntax::Language;

    #[test]
    fn incremental_answers_equal_fresh_ones() {
        let mut trees = Trees::default();
        let base: String = (0..100)
            .map(|i| format!("def f{i}():\n    return {i}\n"))
            .collect();
        let edited = base.replacen("return 7", "return (7", 1);
        let ask = |trees: &mut Trees, text: &str, remember, previous| {
            answer(
                Request::Syntax {
                    id: 1,
                    language: Language::Python,
                    text: text.to_owned(),
                    remember,
                    previous,
                },
                trees,
            )
        };
        ask(&mut trees, &base, Some(1), None);
        let Response::Syntax {
            outcome:
                SyntaxOutcome::Checked {
                    errors: inc,
                    incremental: true,
                },
            ..
        } = ask(&mut trees, &edited, Some(2), Some(1))
        else {
            panic!("the remembered tree was not reused");
        };
        let Response::Syntax {
            outcome:
                SyntaxOutcome::Checked {
                    errors: fresh,
                    incremental: false,
                },
            ..
        } = ask(&mut Trees::default(), &edited, None, Some(1))
        else {
            panic!("a fresh parse was expected");
        };
        assert_eq!(inc, fresh);
        assert!(!inc.is_empty());
    }

    #[test]
    fn remembered_trees_stay_within_their_byte_budget() {
        let mut trees = Trees::default();
        let text = "x = 1\n".repeat(100_000);
        for key in 0..40 {
            let (_, tree) = check_keeping_tree(Language::Python, "x = 1\n").unwrap();
            trees.put(key, text.clone(), tree);
        }
        assert!(trees.bytes <= TREE_TEXT_BYTES);
        assert!(trees.entries.len() <= TREES);
    }
}
