//! The embedded syntax check: tree-sitter parses a text and its ERROR and MISSING nodes become
//! [`SyntaxError`]s, with 1-based lines and *character* columns.
//!
//! Owns the choice of grammar for a path (extension, then shebang), the time-boxed parse, the
//! incremental re-parse of an edited text, and the reduction of tree-sitter's error nodes to at
//! most one readable error per line. It runs inside the parser worker (`worker`), never in the
//! server. It knows nothing of lint (`lint::syntax` turns these errors into diagnostics), and
//! it does not decide `introduced`, run external linters or read files.
//!
//! Why the reduction: ERROR nodes nest, and an outer one can cover hundreds of lines (TOML,
//! JavaScript and Python recover by swallowing whole blocks). Every ERROR node is reported at
//! its *start* with its span clipped to that first line (where recovery began, usually the real
//! mistake), and each line keeps one error: the innermost node starting there (MISSING tokens
//! count as innermost), leftmost on ties. So an outer node spanning lines 2-40 costs one entry
//! on line 2, and nested errors on later lines still show up on their own lines.

use crate::text::{chars_between, to_u32};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::{Duration, Instant};
use tree_sitter::{InputEdit, Node, ParseOptions, Parser, Point, Tree};

/// Default parse budget. A 1,000-line file parses in about a millisecond, so this only trips
/// on pathological input (megabytes of minified code, grammar blow-ups).
pub(crate) const DEFAULT_BUDGET: Duration = Duration::from_millis(250);

/// More than this many syntax errors means the file is not the language we think (or is
/// garbage); listing them all would only cost the agent context.
pub const MAX_SYNTAX_ERRORS: usize = 50;

/// Longest excerpt quoted in "syntax error near `…`", in characters.
const EXCERPT_CHARS: usize = 40;

/// The languages with an embedded grammar. Serialized as [`Language::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
    JavaScript,
    TypeScript,
    Tsx,
    Rust,
    Go,
    Bash,
    Json,
    Toml,
    Yaml,
    C,
    Cpp,
    Java,
    Css,
}

impl Language {
    pub const ALL: [Language; 14] = [
        Language::Python,
        Language::JavaScript,
        Language::TypeScript,
        Language::Tsx,
        Language::Rust,
        Language::Go,
        Language::Bash,
        Language::Json,
        Language::Toml,
        Language::Yaml,
        Language::C,
        Language::Cpp,
        Language::Java,
        Language::Css,
    ];

    /// Lowercase display name.
    pub fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Tsx => "tsx",
            Language::Rust => "rust",
            Language::Go => "go",
            Language::Bash => "bash",
            Language::Json => "json",
            Language::Toml => "toml",
            Language::Yaml => "yaml",
            Language::C => "c",
            Language::Cpp => "cpp",
            Language::Java => "java",
            Language::Css => "css",
        }
    }

    fn grammar(self) -> tree_sitter::Language {
        match self {
            Language::Python => tree_sitter_python::LANGUAGE.into(),
            Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Language::Rust => tree_sitter_rust::LANGUAGE.into(),
            Language::Go => tree_sitter_go::LANGUAGE.into(),
            Language::Bash => tree_sitter_bash::LANGUAGE.into(),
            Language::Json => tree_sitter_json::LANGUAGE.into(),
            Language::Toml => tree_sitter_toml_ng::LANGUAGE.into(),
            Language::Yaml => tree_sitter_yaml::LANGUAGE.into(),
            Language::C => tree_sitter_c::LANGUAGE.into(),
            Language::Cpp => tree_sitter_cpp::LANGUAGE.into(),
            Language::Java => tree_sitter_java::LANGUAGE.into(),
            Language::Css => tree_sitter_css::LANGUAGE.into(),
        }
    }
}

/// Grammar for a path by its extension (case-insensitive).
///
/// `.h` maps to C++: the C++ grammar accepts almost all C headers, while the C grammar rejects
/// every C++ header (classes, namespaces, templates), and a false syntax error costs the agent
/// more than a missed one.
pub fn language_for_path(path: &Path) -> Option<Language> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    let lang = match ext.as_str() {
        "py" | "pyi" => Language::Python,
        "js" | "mjs" | "cjs" | "jsx" => Language::JavaScript,
        "ts" | "mts" | "cts" => Language::TypeScript,
        "tsx" => Language::Tsx,
        "rs" => Language::Rust,
        "go" => Language::Go,
        "sh" | "bash" => Language::Bash,
        "c" => Language::C,
        "h" | "cc" | "cpp" | "cxx" | "c++" | "hpp" | "hh" | "hxx" | "h++" => Language::Cpp,
        "java" => Language::Java,
        "json" => Language::Json,
        "toml" => Language::Toml,
        "yaml" | "yml" => Language::Yaml,
        "css" => Language::Css,
        _ => return None,
    };
    Some(lang)
}

/// Grammar named by a `#!` line: `#!/bin/sh`, `#!/usr/bin/env bash`, `#!/usr/bin/env -S
/// python3 -u`, `#!/usr/bin/node`.
pub fn language_for_shebang(source: &str) -> Option<Language> {
    let first_line = source.lines().next()?;
    let command = first_line.strip_prefix("#!")?;
    let mut words = command.split_whitespace();
    let mut program = basename(words.next()?);
    if program == "env" {
        // Skip env's options and VAR=value assignments to reach the interpreter.
        program = basename(words.find(|w| !w.starts_with('-') && !w.contains('='))?);
    }
    let lang = match program {
        "sh" | "bash" | "dash" | "ash" => Language::Bash,
        "node" | "nodejs" => Language::JavaScript,
        p if p == "python" || p.starts_with("python3") || p.starts_with("python2") => {
            Language::Python
        }
        _ => return None,
    };
    Some(lang)
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Grammar for a file: by extension, else (only for extension-less files) by shebang.
pub fn detect_language(path: &Path, source: &str) -> Option<Language> {
    if path.extension().is_some() {
        return language_for_path(path);
    }
    language_for_shebang(source)
}

/// One syntax error found in a text. Positions are 1-based; columns count characters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntaxError {
    pub line: u32,
    pub column: u32,
    pub end_line: u32,
    pub end_column: u32,
    pub kind: ErrorKind,
    /// Readable on its own: "syntax error near `…`", "missing `)`".
    pub message: String,
}

/// Which tree-sitter node an error comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// An ERROR node: text the grammar could not fit, quoted in the message.
    Unexpected,
    /// A MISSING node: a token the grammar had to assume (it spans no text).
    Missing,
}

/// Why the syntax check produced no verdict. Callers report it as lint status `skipped`
/// (too slow) or `unavailable` (grammar), never as clean.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckError {
    #[error("skipped: too slow (syntax check of {language} exceeded {budget_ms} ms)")]
    TooSlow {
        language: &'static str,
        budget_ms: u128,
    },
    #[error("syntax check unavailable: the {language} grammar does not load: {detail}")]
    Grammar {
        language: &'static str,
        detail: String,
    },
}

/// [`check_with_budget`] with [`DEFAULT_BUDGET`].
pub fn check(lang: Language, source: &str) -> Result<Vec<SyntaxError>, CheckError> {
    check_with_budget(lang, source, DEFAULT_BUDGET)
}

thread_local! {
    // Parser allocation and its internal stacks are reused between calls on a thread.
    static PARSER: RefCell<Parser> = RefCell::new(Parser::new());
}

/// Parses `source` and returns its syntax errors, sorted by position, at most one per line and
/// at most [`MAX_SYNTAX_ERRORS`]. An empty vector means the grammar accepted the file.
pub fn check_with_budget(
    lang: Language,
    source: &str,
    budget: Duration,
) -> Result<Vec<SyntaxError>, CheckError> {
    parse_with_thread_parser(lang, source, None, budget).map(|(diags, _)| diags)
}

/// A parse kept for the next check of the same file: re-parsing an edited text from it only
/// re-reads the changed region.
#[derive(Clone)]
pub(crate) struct ParsedSource {
    lang: Language,
    tree: Tree,
}

/// Like [`check`], also returning the parse for [`check_edited`].
pub(crate) fn check_keeping_tree(
    lang: Language,
    source: &str,
) -> Result<(Vec<SyntaxError>, ParsedSource), CheckError> {
    parse_with_thread_parser(lang, source, None, DEFAULT_BUDGET)
        .map(|(d, tree)| (d, ParsedSource { lang, tree }))
}

/// Checks `new_source`, an edited version of `old_source` whose parse is `old`, re-parsing
/// incrementally (tree-sitter reuses every subtree outside the changed byte range). The
/// errors are exactly those of a fresh parse.
pub(crate) fn check_edited(
    old: &ParsedSource,
    old_source: &str,
    new_source: &str,
) -> Result<(Vec<SyntaxError>, ParsedSource), CheckError> {
    let edit = edit_between(old_source, new_source);
    // Reusing a tree costs more than it saves when most of the text changed (a rewrite).
    let changed = edit.new_end_byte - edit.start_byte;
    if changed * 4 > new_source.len() {
        return check_keeping_tree(old.lang, new_source);
    }
    let mut tree = old.tree.clone();
    tree.edit(&edit);
    parse_with_thread_parser(old.lang, new_source, Some(&tree), DEFAULT_BUDGET).map(|(d, tree)| {
        (
            d,
            ParsedSource {
                lang: old.lang,
                tree,
            },
        )
    })
}

impl ParsedSource {
    pub(crate) fn language(&self) -> Language {
        self.lang
    }
}

/// The single edit turning `old` into `new`: everything between their common prefix and
/// common suffix (kept on character boundaries) was replaced.
fn edit_between(old: &str, new: &str) -> InputEdit {
    let (a, b) = (old.as_bytes(), new.as_bytes());
    let mut prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    while !old.is_char_boundary(prefix) || !new.is_char_boundary(prefix) {
        prefix -= 1;
    }
    let max_suffix = a.len().min(b.len()) - prefix;
    let mut suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_suffix)
        .take_while(|(x, y)| x == y)
        .count();
    while !old.is_char_boundary(a.len() - suffix) || !new.is_char_boundary(b.len() - suffix) {
        suffix -= 1;
    }
    InputEdit {
        start_byte: prefix,
        old_end_byte: a.len() - suffix,
        new_end_byte: b.len() - suffix,
        start_position: point_at(old, prefix),
        old_end_position: point_at(old, a.len() - suffix),
        new_end_position: point_at(new, b.len() - suffix),
    }
}

/// Row and byte column of `offset` in `text` (tree-sitter's positions).
fn point_at(text: &str, offset: usize) -> Point {
    let before = &text.as_bytes()[..offset];
    let row = before.iter().filter(|&&c| c == b'\n').count();
    let line_start = before
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1);
    Point {
        row,
        column: offset - line_start,
    }
}

fn parse_with_thread_parser(
    lang: Language,
    source: &str,
    old_tree: Option<&Tree>,
    budget: Duration,
) -> Result<(Vec<SyntaxError>, Tree), CheckError> {
    PARSER.with(|cell| match cell.try_borrow_mut() {
        Ok(mut parser) => parse_and_collect(&mut parser, lang, source, old_tree, budget),
        // Only reachable through re-entrance, which nothing here does; stay correct anyway.
        Err(_) => parse_and_collect(&mut Parser::new(), lang, source, old_tree, budget),
    })
}

fn parse_and_collect(
    parser: &mut Parser,
    lang: Language,
    source: &str,
    old_tree: Option<&Tree>,
    budget: Duration,
) -> Result<(Vec<SyntaxError>, Tree), CheckError> {
    parser
        .set_language(&lang.grammar())
        .map_err(|e| CheckError::Grammar {
            language: lang.name(),
            detail: e.to_string(),
        })?;
    // A previous parse on this thread may have been cancelled; never resume it.
    parser.reset();

    let bytes = source.as_bytes();
    let deadline = Instant::now() + budget;
    let mut over_budget = |_: &tree_sitter::ParseState| {
        if Instant::now() >= deadline {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let options = ParseOptions::new().progress_callback(&mut over_budget);
    let tree = parser.parse_with_options(
        &mut |offset, _| bytes.get(offset..).unwrap_or_default(),
        old_tree,
        Some(options),
    );
    let Some(tree) = tree else {
        parser.reset();
        return Err(CheckError::TooSlow {
            language: lang.name(),
            budget_ms: budget.as_millis(),
        });
    };
    Ok((collect_errors(tree.root_node(), source), tree))
}

/// Walks the tree (iteratively: deeply nested input must not overflow the stack) collecting
/// every MISSING and ERROR node with its nesting depth, then keeps one per line: the innermost,
/// and of equally deep ones the leftmost.
fn collect_errors(root: Node<'_>, source: &str) -> Vec<SyntaxError> {
    let mut found: Vec<(u32, SyntaxError)> = Vec::new();
    if !root.has_error() {
        return Vec::new();
    }
    let mut cursor = root.walk();
    // ERROR-nesting depth of each node on the cursor's path above the current node.
    let mut depth_stack: Vec<u32> = Vec::new();
    'walk: loop {
        let node = cursor.node();
        let depth = depth_stack.last().copied().unwrap_or(0) + u32::from(node.is_error());
        if node.is_missing() {
            // A missing token is as precise as it gets: rank it below its enclosing ERROR.
            found.push((depth + 1, missing_error(node, source)));
        } else if node.is_error() {
            found.push((depth, unexpected_error(node, source)));
        }
        if node.has_error() && !node.is_missing() && cursor.goto_first_child() {
            depth_stack.push(depth);
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                break 'walk;
            }
            depth_stack.pop();
        }
    }
    found.sort_by_key(|(depth, d)| (d.line, std::cmp::Reverse(*depth), d.column));
    found.dedup_by_key(|(_, d)| d.line);
    found
        .into_iter()
        .map(|(_, d)| d)
        .take(MAX_SYNTAX_ERRORS)
        .collect()
}

fn missing_error(node: Node<'_>, source: &str) -> SyntaxError {
    // A missing keyword or punctuation is named by its text; a missing named node (an
    // identifier, an expression) by its kind.
    let message = if node.is_named() {
        format!("missing {}", node.kind().replace('_', " "))
    } else {
        format!("missing `{}`", node.kind())
    };
    let (line, column) = char_position(node.start_byte(), node.start_position(), source);
    SyntaxError {
        line,
        column,
        end_line: line,
        end_column: column,
        kind: ErrorKind::Missing,
        message,
    }
}

fn unexpected_error(node: Node<'_>, source: &str) -> SyntaxError {
    let start_byte = node.start_byte();
    let (line, column) = char_position(start_byte, node.start_position(), source);
    // Clip to the first line so one diagnostic never spans a whole block.
    let line_end = source
        .get(start_byte..)
        .and_then(|rest| rest.find('\n'))
        .map_or(source.len(), |i| start_byte + i);
    let end_byte = node.end_byte().min(line_end);
    let (end_line, end_column) = if node.end_position().row == node.start_position().row {
        char_position(end_byte, node.end_position(), source)
    } else {
        (
            line,
            column + to_u32(chars_between(source, start_byte, end_byte)),
        )
    };
    let text = source.get(start_byte..end_byte).unwrap_or_default();
    let message = match excerpt(text) {
        Some(quoted) => format!("syntax error near `{quoted}`"),
        None => "syntax error".to_string(),
    };
    SyntaxError {
        line,
        column,
        end_line,
        end_column,
        kind: ErrorKind::Unexpected,
        message,
    }
}

/// 1-based (line, character column) of a node boundary; tree-sitter's column is in bytes.
fn char_position(byte: usize, point: tree_sitter::Point, source: &str) -> (u32, u32) {
    let line_start = byte.saturating_sub(point.column);
    let column = chars_between(source, line_start, byte) + 1;
    (to_u32(point.row + 1), to_u32(column))
}

fn excerpt(text: &str) -> Option<String> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(crate::text::ellipsized(text, EXCERPT_CHARS).into_owned())
}

#[cfg(test)]
mod incremental_tests {
    use super::*;

    /// Incremental results must equal a fresh parse, for edits anywhere, of any size.
    #[test]
    fn incremental_check_matches_a_fresh_parse() {
        let base: String = (0..200)
            .map(|i| format!("def f{i}(a, b):\n    return a + b * {i}  # é\n\n"))
            .collect();
        type Edit = Box<dyn Fn(&str) -> String>;
        let edits: Vec<Edit> = vec![
            Box::new(|s: &str| s.replacen("def f10(a, b):", "def f10(a, b:", 1)),
            Box::new(|s: &str| s.replacen("return a + b * 150", "return a +", 1)),
            Box::new(|s: &str| format!("import os\n{s}")),
            Box::new(|s: &str| format!("{s}def tail(:\n")),
            Box::new(|s: &str| s.replacen("# é", "# ü", 1)),
            Box::new(|s: &str| s[..s.len() / 2].to_owned()),
            Box::new(|_: &str| String::new()),
        ];
        let (_, first) = check_keeping_tree(Language::Python, &base).unwrap();
        for (i, edit) in edits.iter().enumerate() {
            let new = edit(&base);
            let fresh = check(Language::Python, &new).unwrap();
            let (incremental, _) = check_edited(&first, &base, &new).unwrap();
            assert_eq!(incremental, fresh, "edit {i}");
        }
        // Chained edits, as a session of edits produces them.
        let a = base.replacen("f3(a, b)", "f3(a, b, c)", 1);
        let b = a.replacen("return a + b * 7", "return (a", 1);
        let (_, pa) = check_edited(&first, &base, &a).unwrap();
        let (diags, _) = check_edited(&pa, &a, &b).unwrap();
        assert_eq!(diags, check(Language::Python, &b).unwrap());
        assert!(!diags.is_empty());
    }

    #[test]
    fn edit_between_finds_the_changed_range_on_char_boundaries() {
        let e = edit_between("aé-b", "aü-b");
        assert_eq!((e.start_byte, e.old_end_byte, e.new_end_byte), (1, 3, 3));
        let e = edit_between("x\ny\n", "x\nyz\n");
        assert_eq!(e.start_position, Point { row: 1, column: 1 });
        assert_eq!(e.new_end_position, Point { row: 1, column: 2 });
    }
}
