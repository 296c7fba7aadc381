//! The code's shape, checked (issue 37): no function over 120 lines, no two files of `src/`
//! importing each other, `tools/shell_exec.rs` under 500 lines, and `Program` the only struct
//! that carries an argv. Read from the sources as rustfmt lays them out (`cargo fmt --check`
//! runs in CI), so a line-based reading is exact enough: a function at indent N ends at the
//! first line that is N spaces and `}`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LONGEST_FUNCTION: usize = 120;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src/`, with its path relative to `src/`.
fn sources() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![src()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path
                    .strip_prefix(src())
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned();
                out.push((rel, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The code of a file without comments (doc links name modules too) and without its test
/// module (`#[cfg(test)]` at the end, whose `super` is the file itself).
fn code(text: &str) -> String {
    let text = match text.find("\n#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(at) if !l[..at].contains('"') => &l[..at],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The name of the function a line declares, if it declares one.
fn declared_function(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace().peekable();
    while let Some(word) = words.next() {
        match word {
            "fn" => {
                let name = words.next()?;
                let end = name.find(['(', '<']).unwrap_or(name.len());
                return Some(&name[..end]);
            }
            "pub" | "const" | "async" | "unsafe" | "extern" | "\"C\"" => {}
            w if w.starts_with("pub(") => {}
            _ => return None,
        }
    }
    None
}

#[cordon_test::test]
fn the_line_reading_finds_functions_and_their_ends() {
    assert_eq!(
        declared_function("    pub(crate) async fn run<T>("),
        Some("run")
    );
    assert_eq!(declared_function("fn main() -> ! {"), Some("main"));
    assert_eq!(declared_function("    let f = |x| x;"), None);
    let long = format!(
        "fn long() {{\n{}}}\n",
        "    x();\n".repeat(LONGEST_FUNCTION)
    );
    assert_eq!(function_lengths(&long), [("long".to_owned(), 1, 122)]);
    assert_eq!(
        imports(
            &["a"],
            "use crate::b::{c::D, e};\nfn f() { super::g::h(); }",
            &["a", "b", "b/c", "b/e", "g"]
        ),
        ["b/c", "b/e", "g"]
            .iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<_>>()
    );
}

/// (name, first line, lines) of each function of a file.
fn function_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = declared_function(line) else {
            continue;
        };
        let indent = &line[..line.len() - line.trim_start().len()];
        // The signature ends at `{` (a body) or `;` (a declaration in a trait).
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') || lines[open].trim_end().ends_with("{}") {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j] == close) {
            out.push((name.to_owned(), i + 1, end - i + 1));
        }
    }
    out
}

#[cordon_test::test]
fn no_function_is_longer_than_120_lines() {
    let long: Vec<String> = sources()
        .iter()
        .flat_map(|(path, text)| {
            function_lengths(text)
                .into_iter()
                .filter(|(_, _, n)| *n > LONGEST_FUNCTION)
                .map(move |(name, at, n)| format!("src/{path}:{at} `{name}` is {n} lines"))
        })
        .collect();
    assert!(
        long.is_empty(),
        "functions over {LONGEST_FUNCTION} lines (split them into named steps):\n{}",
        long.join("\n")
    );
}

/// The module of a file: `a/b.rs` and `a/b/mod.rs` are `a/b`; `lib.rs` is ``.
fn module_of(path: &str) -> Vec<String> {
    let stem = path.strip_suffix(".rs").unwrap();
    let mut parts: Vec<String> = stem.split('/').map(str::to_owned).collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Expands one `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(prefix, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand(prefix, &inner[start..], out);
        return;
    }
    if let Some(at) = tree.find("::{") {
        let mut p = prefix.to_vec();
        p.extend(tree[..at].split("::").map(|s| s.trim().to_owned()));
        expand(&p, &tree[at + 2..], out);
        return;
    }
    let name = tree.split(" as ").next().unwrap_or(tree);
    if name.is_empty() {
        return;
    }
    let mut p = prefix.to_vec();
    p.extend(name.split("::").map(|s| s.trim().to_owned()));
    out.push(p);
}

/// Every path a file's code names that starts at `crate`, `super` or `self`.
fn named_paths(text: &str) -> Vec<Vec<String>> {
    let code = code(text);
    let mut out = Vec::new();
    for statement in code.split(';') {
        if let Some(at) = statement.find("use ") {
            let tree = statement[at + 4..].trim();
            if ["crate", "super", "self"]
                .iter()
                .any(|s| tree.starts_with(s))
            {
                expand(&[], tree, &mut out);
                continue;
            }
        }
        // Paths written inline: `crate::a::b(...)`.
        let bytes = statement.as_bytes();
        for start in ["crate::", "super::"]
            .iter()
            .flat_map(|s| statement.match_indices(s).map(|(i, _)| i))
        {
            if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
                continue;
            }
            let path: String = statement[start..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(path.split("::").map(str::to_owned).collect());
        }
    }
    out
}

/// The files (as modules) a file in module `me` imports from, given the modules that exist.
fn resolve(me: &[String], path: &[String], modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let mut segments = path.iter().filter(|s| !s.is_empty() && *s != "*");
    let mut base: Vec<String> = match segments.next()?.as_str() {
        "crate" => Vec::new(),
        "self" => me.to_vec(),
        "super" => me[..me.len().saturating_sub(1)].to_vec(),
        _ => return None,
    };
    let mut rest: Vec<String> = Vec::new();
    for s in segments {
        match s.as_str() {
            "super" if rest.is_empty() => {
                base.pop();
            }
            "self" if rest.is_empty() => {}
            _ => rest.push(s.clone()),
        }
    }
    base.extend(rest);
    (1..=base.len())
        .rev()
        .map(|n| base[..n].to_vec())
        .find(|m| modules.contains(m))
}

/// The modules (as `a/b`) a file of module `me` imports from, among `modules`.
fn imports(me: &[&str], text: &str, modules: &[&str]) -> BTreeSet<String> {
    let me: Vec<String> = me.iter().map(|s| s.to_string()).collect();
    let modules: BTreeSet<Vec<String>> = modules
        .iter()
        .map(|m| m.split('/').map(str::to_owned).collect())
        .collect();
    named_paths(text)
        .iter()
        .filter_map(|p| resolve(&me, p, &modules))
        .filter(|m| *m != me)
        .map(|m| m.join("/"))
        .collect()
}

#[cordon_test::test]
fn no_file_imports_a_file_that_imports_it() {
    let files = sources();
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .filter(|(p, _)| p != "main.rs" && !p.starts_with("bin/"))
        .map(|(p, _)| module_of(p))
        .collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (path, text) in &files {
        if path == "main.rs" || path.starts_with("bin/") {
            continue;
        }
        let me = module_of(path);
        let to: BTreeSet<Vec<String>> = named_paths(text)
            .iter()
            .filter_map(|p| resolve(&me, p, &modules))
            .filter(|m| *m != me && !m.is_empty())
            .collect();
        edges.insert(me, to);
    }
    let edges = &edges;
    let circles: Vec<String> = edges
        .iter()
        .flat_map(|(a, to)| {
            to.iter()
                .filter(move |b| a < *b && edges.get(*b).is_some_and(|back| back.contains(a)))
                .map(move |b| format!("{} <-> {}", a.join("/"), b.join("/")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "files that import each other (move what both need into one of them, or below both):\n{}",
        circles.join("\n")
    );
}

#[cordon_test::test]
fn shell_exec_rs_is_under_500_lines() {
    let text = std::fs::read_to_string(src().join("tools/shell_exec.rs")).unwrap();
    let lines = text.lines().count();
    assert!(lines < 500, "src/tools/shell_exec.rs is {lines} lines");
}

#[cordon_test::test]
fn only_program_carries_an_argv() {
    let mut carriers = Vec::new();
    for (path, text) in sources() {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let Some(rest) = trimmed
                .strip_prefix("pub struct ")
                .or_else(|| trimmed.strip_prefix("pub(crate) struct "))
                .or_else(|| trimmed.strip_prefix("pub(super) struct "))
                .or_else(|| trimmed.strip_prefix("struct "))
            else {
                continue;
            };
            if !line.trim_end().ends_with('{') {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let indent = &line[..line.len() - trimmed.len()];
            let close = format!("{indent}}}");
            let body = lines[i + 1..].iter().take_while(|l| **l != close);
            let has_argv = body.into_iter().any(|l| {
                let field = l.trim_start();
                let field = field
                    .strip_prefix("pub ")
                    .or_else(|| field.strip_prefix("pub(crate) "))
                    .or_else(|| field.strip_prefix("pub(super) "))
                    .unwrap_or(field);
                field.starts_with("argv:")
            });
            if has_argv && name != "Program" {
                carriers.push(format!("src/{path}:{} struct {name}", i + 1));
            }
        }
    }
    assert!(
        carriers.is_empty(),
        "structs other than `Program` carrying an argv (hold an exec::Program instead):\n{}",
        carriers.join("\n")
    );
}
