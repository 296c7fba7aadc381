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

use serde::{Deserialize, Serialize};
use tree_sitter::{Node, Parser};

/// How many `sh -c` / `eval` levels are parsed again before the rest is called unknown.
pub const MAX_DEPTH: usize = 4;

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
    fn literal(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            dynamic: false,
        }
    }
}

/// One simple command that the command line would run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimpleCommand {
    /// `argv[0]` is the program as written (a path or a name), after wrappers were removed.
    pub argv: Vec<Word>,
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
    subst_depth: usize,
}

impl SimpleCommand {
    /// The program's name: the last path component of `argv[0]`.
    pub fn program(&self) -> &str {
        program_name(&self.argv[0].text)
    }

    /// The command as it reads after unwrapping, for messages.
    pub fn display(&self) -> String {
        let words: Vec<&str> = self.argv.iter().map(|w| w.text.as_str()).collect();
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
}

/// Reads `script` as bash and lists the simple commands it runs.
pub fn analyze(script: &str) -> Analysis {
    let mut out = Analysis::default();
    let ctx = Ctx::default();
    Walker { out: &mut out }.script(script, &ctx, 0, "the command line");
    out
}

pub fn program_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
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
            argv,
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
fn unwrap(program: &str, argv: &[Word]) -> Option<Vec<Word>> {
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
fn shell_script(program: &str, argv: &[Word]) -> Option<Option<Word>> {
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
fn find_exec_segments(argv: &[Word]) -> Vec<Vec<Word>> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(a.commands[0].argv[1].dynamic);
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
