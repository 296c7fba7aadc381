//! The walk over tree-sitter-bash's syntax tree of one script (the command line, or a script
//! string found in it): pipelines, lists, subshells, `$(…)`, backticks, `<(…)`, function
//! bodies, compound commands, quote removal in words, and following what a command runs in
//! turn (`sh -c` scripts and `eval` text parsed again to [`MAX_DEPTH`], `find -exec`).
//!
//! Owns the tree and the recording of commands and unknowns; what a wrapper's arguments mean
//! is `wrappers`'.

use super::analysis::{Analysis, SimpleCommand, Unknown, Word, program_name};
use super::wrappers::{find_exec_segments, shell_script, unwrap};
use tree_sitter::{Node, Parser};

/// How many `sh -c` / `eval` levels are parsed again before the rest is called unknown.
pub(crate) const MAX_DEPTH: usize = 4;

/// Reads `script` as bash and lists the simple commands it runs.
pub(crate) fn analyze(script: &str) -> Analysis {
    let mut out = Analysis::default();
    let ctx = Ctx::default();
    Walker { out: &mut out }.script(script, &ctx, 0, "the command line");
    out
}

#[derive(Debug, Clone, Default)]
struct Ctx {
    feeds_into: Vec<String>,
    in_function: Option<String>,
    subst_depth: usize,
}

struct Walker<'o> {
    out: &'o mut Analysis,
}

fn excerpt(text: &str) -> String {
    const MAX: usize = 80;
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::text::ellipsized(&one_line, MAX).into_owned()
}

impl Walker<'_> {
    fn unknown(&mut self, reason: impl Into<String>, text: &str) {
        self.out.unknown.push(Unknown {
            reason: reason.into(),
            text: excerpt(text),
        });
    }

    /// Parses and walks one script: the command line itself or a `-c`/`eval` string.
    fn script(&mut self, script: &str, ctx: &Ctx, depth: usize, what: &str) {
        if depth > MAX_DEPTH {
            self.unknown(
                format!("{what} is nested more than {MAX_DEPTH} shells deep"),
                script,
            );
            return;
        }
        let mut parser = Parser::new();
        if parser
            .set_language(&tree_sitter_bash::LANGUAGE.into())
            .is_err()
        {
            self.unknown("the bash grammar could not be loaded", script);
            return;
        }
        let Some(tree) = parser.parse(script, None) else {
            self.unknown(format!("{what} could not be parsed"), script);
            return;
        };
        let root = tree.root_node();
        if root.has_error() {
            self.out.unfinished |= depth == 0;
            // Still walk it: what did parse may hit a rule, and a deny beats on_unknown.
            self.unknown(format!("{what} does not parse as shell"), script);
        }
        let mut walk = TreeWalk {
            src: script,
            depth,
            w: self,
        };
        walk.node(root, ctx);
    }
}

struct TreeWalk<'s, 'w, 'o> {
    src: &'s str,
    depth: usize,
    w: &'w mut Walker<'o>,
}

impl TreeWalk<'_, '_, '_> {
    fn text(&self, n: Node) -> &str {
        n.utf8_text(self.src.as_bytes()).unwrap_or("")
    }

    fn node(&mut self, n: Node, ctx: &Ctx) {
        match n.kind() {
            "command" => self.command(n, ctx),
            "pipeline" => self.pipeline(n, ctx),
            "function_definition" => {
                let mut inner = ctx.clone();
                inner.in_function = n
                    .child_by_field_name("name")
                    .map(|name| self.text(name).to_owned());
                self.children(n, &inner);
            }
            "command_substitution" | "process_substitution" => {
                let mut inner = ctx.clone();
                inner.subst_depth += 1;
                self.children(n, &inner);
            }
            _ => self.children(n, ctx),
        }
    }

    fn children(&mut self, n: Node, ctx: &Ctx) {
        let mut cursor = n.walk();
        let kids: Vec<Node> = n.named_children(&mut cursor).collect();
        for child in kids {
            self.node(child, ctx);
        }
    }

    fn pipeline(&mut self, n: Node, ctx: &Ctx) {
        let mut cursor = n.walk();
        let stages: Vec<Node> = n.named_children(&mut cursor).collect();
        let mut ranges = Vec::with_capacity(stages.len());
        for stage in stages {
            let start = self.w.out.commands.len();
            self.node(stage, ctx);
            ranges.push(start..self.w.out.commands.len());
        }
        // The programs a stage's output reaches: every top-level command of a later stage
        // (not those inside its substitutions, whose output goes elsewhere).
        for i in 0..ranges.len() {
            let downstream: Vec<String> = ranges[i + 1..]
                .iter()
                .flat_map(|r| self.w.out.commands[r.clone()].iter())
                .filter(|c| c.subst_depth == ctx.subst_depth)
                .map(|c| c.program().to_owned())
                .collect();
            for c in &mut self.w.out.commands[ranges[i].clone()] {
                for p in &downstream {
                    if !c.feeds_into.contains(p) {
                        c.feeds_into.push(p.clone());
                    }
                }
            }
        }
    }

    fn command(&mut self, n: Node, ctx: &Ctx) {
        let mut argv = Vec::new();
        if let Some(name) = n.child_by_field_name("name") {
            // command_name wraps the real word node.
            let word = name.named_child(0).unwrap_or(name);
            argv.push(self.word(word));
        }
        let mut cursor = n.walk();
        let args: Vec<Node> = n.children_by_field_name("argument", &mut cursor).collect();
        argv.extend(args.iter().map(|a| self.word(*a)));
        let source = self.text(n).to_owned();
        let consumer = if argv.is_empty() {
            None // only assignments or redirections
        } else {
            self.emit(argv, Vec::new(), ctx, &source)
        };
        // Substitutions inside the words run too; their output goes to this command.
        let mut inner = ctx.clone();
        inner.feeds_into = consumer.into_iter().collect();
        self.children(n, &inner);
    }

    /// The word as the rules see it (see [`Word`]).
    fn word(&self, n: Node) -> Word {
        match self.static_value(n) {
            Some(text) => Word::literal(text),
            None => Word {
                text: self.text(n).replace(['"', '\''], ""),
                dynamic: true,
            },
        }
    }

    /// The value of a word without expansions, or None when it has one.
    fn static_value(&self, n: Node) -> Option<String> {
        let raw = self.text(n);
        match n.kind() {
            "word" | "number" => Some(unescape(raw, |_| true)),
            "raw_string" => Some(raw.get(1..raw.len().saturating_sub(1))?.to_owned()),
            "string" => {
                let mut cursor = n.walk();
                let all_content = n
                    .named_children(&mut cursor)
                    .all(|c| c.kind() == "string_content");
                if !all_content {
                    return None;
                }
                let inner = raw.get(1..raw.len().saturating_sub(1))?;
                // Inside double quotes a backslash only escapes these.
                Some(unescape(inner, |c| {
                    matches!(c, '"' | '\\' | '$' | '`' | '\n')
                }))
            }
            "concatenation" => {
                let mut cursor = n.walk();
                let parts: Vec<Node> = n.named_children(&mut cursor).collect();
                // Anonymous pieces (e.g. `{`/`}` of `{}`) are part of the literal too.
                let mut value = String::new();
                let mut at = n.start_byte();
                for p in parts {
                    value.push_str(self.src.get(at..p.start_byte())?);
                    value.push_str(&self.static_value(p)?);
                    at = p.end_byte();
                }
                value.push_str(self.src.get(at..n.end_byte())?);
                Some(value)
            }
            _ => None,
        }
    }

    /// Records one simple command after peeling wrappers, and follows what it runs in turn
    /// (`sh -c` scripts, `eval` text, `find -exec`). Returns the program that reads what
    /// substitutions in its arguments print.
    fn emit(
        &mut self,
        mut argv: Vec<Word>,
        mut wrappers: Vec<String>,
        ctx: &Ctx,
        source: &str,
    ) -> Option<String> {
        loop {
            let first = argv.first()?;
            if first.dynamic {
                self.w.unknown(
                    format!(
                        "the program name `{}` is computed when the command runs",
                        first.text
                    ),
                    source,
                );
                return None;
            }
            let program = program_name(&first.text).to_owned();
            match unwrap(&program, &argv) {
                Some(rest) if !rest.is_empty() => {
                    wrappers.push(program);
                    argv = rest;
                }
                _ => break,
            }
        }
        let program = program_name(&argv[0].text).to_owned();
        if program == "eval" {
            self.eval(&argv, ctx, source);
        } else if let Some(script) = shell_script(&program, &argv) {
            match script {
                Some(w) if !w.dynamic => {
                    let what = format!("the script of `{program} -c`");
                    self.w.script(&w.text, ctx, self.depth + 1, &what);
                }
                _ => self.w.unknown(
                    format!("the script given to `{program} -c` is computed when the command runs"),
                    source,
                ),
            }
        } else if program == "find" {
            for segment in find_exec_segments(&argv) {
                self.emit(segment, wrappers.clone(), ctx, source);
            }
        }
        self.w.out.commands.push(SimpleCommand {
            words: argv,
            wrappers,
            feeds_into: ctx.feeds_into.clone(),
            in_function: ctx.in_function.clone(),
            subst_depth: ctx.subst_depth,
        });
        Some(program)
    }

    fn eval(&mut self, argv: &[Word], ctx: &Ctx, source: &str) {
        let args = &argv[1..];
        if args.iter().any(|w| w.dynamic) {
            self.w
                .unknown("`eval` runs text computed when the command runs", source);
            return;
        }
        let text: Vec<&str> = args.iter().map(|w| w.text.as_str()).collect();
        self.w.script(
            &text.join(" "),
            ctx,
            self.depth + 1,
            "the text given to `eval`",
        );
    }
}

/// Removes backslash escapes (`\x` → `x` when `escapes(x)`; `\<newline>` vanishes).
fn unescape(s: &str, escapes: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\n') => {}
            Some(next) if escapes(next) => out.push(next),
            Some(next) => {
                out.push('\\');
                out.push(next);
            }
            None => out.push('\\'),
        }
    }
    out
}
