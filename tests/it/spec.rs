//! The tool contract against the server: each tool's input and output field names, as the
//! schemas `cordon serve` lists them, compared with the `in:`/`out:` lists of SPEC.md.
//!
//! SPEC.md lives beside the repository (`../shared`), which a clean checkout does not have, so
//! the test reads the copy in `tests/fixtures/SPEC.md` (the shared contract with the
//! corrections this repository proposes); `CORDON_SPEC=/path/to/SPEC.md` points it at another
//! copy. Without such a test a field added to a result (issue 37: `enforcement`, `denials`,
//! `job`'s `pty` and `forwarded`, ...) drifts away from the contract unseen.
//!
//! What the test reads in SPEC.md: under `## Tools`, a bullet `- out (every tool): ...` names
//! the fields every result has; under each `### <tool>`, bullets starting `in:`/`in (...):`
//! and `out:`/`out (...):` name the fields. A field is a backticked name outside parentheses,
//! up to the bullet's first full stop. When the parentheses right after a name open with a
//! backticked `{a, b: ...}` or `[{a, b}]`, those are the nested object's fields and are
//! compared too (an `…` among them means "and others": only the named ones are checked).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// One field named by SPEC.md, with the nested fields it spells out.
#[derive(Debug, Default)]
struct Field {
    nested: Option<Nested>,
}

#[derive(Debug)]
struct Nested {
    names: BTreeSet<String>,
    /// The list ends with `…`: the object has more fields than it names.
    open: bool,
}

#[derive(Debug, Default)]
struct Contract {
    inputs: BTreeMap<String, Field>,
    outputs: BTreeMap<String, Field>,
}

/// The contract SPEC.md states, per tool, with the common outputs merged into each.
fn parse_spec(text: &str) -> BTreeMap<String, Contract> {
    let mut tools: BTreeMap<String, Contract> = BTreeMap::new();
    let mut common = BTreeMap::new();
    let mut in_tools = false;
    let mut tool: Option<String> = None;
    for bullet in bullets(text) {
        match bullet {
            Line::Section(title) => {
                in_tools = title == "Tools";
                tool = None;
            }
            Line::Tool(name) => {
                tool = in_tools.then(|| name.clone());
                if in_tools {
                    tools.entry(name).or_default();
                }
            }
            Line::Bullet(text) => {
                let Some((head, rest)) = text.split_once(':') else {
                    continue;
                };
                let head = head.trim();
                let is = |word: &str| head == word || head.starts_with(&format!("{word} ("));
                match &tool {
                    None if in_tools && head == "out (every tool)" => {
                        common.extend(fields(rest));
                    }
                    Some(name) if is("in") => {
                        let contract = tools.get_mut(name).expect("entered above");
                        contract.inputs.extend(fields(rest));
                    }
                    Some(name) if is("out") => {
                        let contract = tools.get_mut(name).expect("entered above");
                        contract.outputs.extend(fields(rest));
                    }
                    _ => {}
                }
            }
        }
    }
    for contract in tools.values_mut() {
        for (name, field) in &common {
            contract
                .outputs
                .entry(name.clone())
                .or_insert_with(|| Field {
                    nested: field.nested.as_ref().map(|n| Nested {
                        names: n.names.clone(),
                        open: n.open,
                    }),
                });
        }
    }
    tools
}

enum Line {
    Section(String),
    Tool(String),
    /// A top-level bullet with its continuation lines joined, without the `- `.
    Bullet(String),
}

fn bullets(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let flush = |current: &mut Option<String>, out: &mut Vec<Line>| {
        if let Some(b) = current.take() {
            out.push(Line::Bullet(b));
        }
    };
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("### ") {
            flush(&mut current, &mut out);
            out.push(Line::Tool(title.trim().to_owned()));
        } else if let Some(title) = line.strip_prefix("## ") {
            flush(&mut current, &mut out);
            out.push(Line::Section(title.trim().to_owned()));
        } else if let Some(item) = line.strip_prefix("- ") {
            flush(&mut current, &mut out);
            current = Some(item.to_owned());
        } else if let Some(b) = current.as_mut().filter(|_| line.starts_with(' ')) {
            b.push(' ');
            b.push_str(line.trim());
        } else {
            flush(&mut current, &mut out);
        }
    }
    flush(&mut current, &mut out);
    out
}

/// The fields a list names: backticked names outside parentheses, up to the first full stop
/// outside parentheses and backticks.
fn fields(list: &str) -> BTreeMap<String, Field> {
    let mut out = BTreeMap::new();
    let chars: Vec<char> = list.chars().collect();
    let mut depth = 0usize;
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '`' => {
                let end = closing_tick(&chars, i);
                if depth == 0 {
                    let name: String = chars[i + 1..end].iter().collect();
                    let nested = nested_after(&chars, end + 1);
                    out.insert(name, Field { nested });
                }
                i = end + 1;
                continue;
            }
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            '.' if depth == 0 && chars.get(i + 1).is_none_or(|c| c.is_whitespace()) => break,
            _ => {}
        }
        i += 1;
    }
    out
}

fn closing_tick(chars: &[char], open: usize) -> usize {
    (open + 1..chars.len())
        .find(|&j| chars[j] == '`')
        .unwrap_or(chars.len())
}

/// The nested fields spelled out in the parentheses that follow a name, if they open with
/// a backticked `{...}` or `[{...}]`.
fn nested_after(chars: &[char], from: usize) -> Option<Nested> {
    let mut i = from;
    while chars.get(i) == Some(&' ') {
        i += 1;
    }
    if chars.get(i) != Some(&'(') {
        return None;
    }
    let tick = (i + 1..chars.len()).find(|&j| chars[j] == '`' || chars[j] == ')')?;
    if chars[tick] != '`' {
        return None;
    }
    let end = closing_tick(chars, tick);
    let span: String = chars[tick + 1..end].iter().collect();
    let inner = span.strip_prefix('[').unwrap_or(&span);
    let inner = inner.strip_prefix('{')?;
    let inner = inner.trim_end_matches(']').strip_suffix('}')?;
    let mut names = BTreeSet::new();
    let mut open = false;
    for item in split_top(inner) {
        let item = item.trim();
        if item == "…" || item == "..." {
            open = true;
            continue;
        }
        let name = item.split([':', '=']).next().unwrap_or(item).trim();
        names.insert(name.to_owned());
    }
    Some(Nested { names, open })
}

/// Splits on the commas not inside brackets or braces.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// The properties of the object a schema describes, looking through `null` unions and
/// array items.
fn object_properties(schema: &Value) -> Option<BTreeSet<String>> {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        return Some(props.keys().cloned().collect());
    }
    if let Some(items) = schema.get("items") {
        return object_properties(items);
    }
    ["anyOf", "oneOf"]
        .iter()
        .filter_map(|k| schema.get(*k).and_then(Value::as_array))
        .flatten()
        .find_map(object_properties)
}

/// Every difference between what SPEC.md names and what a schema has.
fn compare(at: &str, spec: &BTreeMap<String, Field>, schema: &Value, problems: &mut Vec<String>) {
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let served: BTreeSet<&String> = properties.keys().collect();
    let named: BTreeSet<&String> = spec.keys().collect();
    for missing in served.difference(&named) {
        problems.push(format!(
            "{at}: `{missing}` is served but SPEC.md does not name it"
        ));
    }
    for extra in named.difference(&served) {
        problems.push(format!(
            "{at}: SPEC.md names `{extra}` but the schema has no such field"
        ));
    }
    for (name, field) in spec {
        let (Some(nested), Some(sub)) = (&field.nested, properties.get(name)) else {
            continue;
        };
        let Some(sub_fields) = object_properties(sub) else {
            problems.push(format!(
                "{at}.{name}: SPEC.md spells out fields, the schema has none"
            ));
            continue;
        };
        for missing in sub_fields.difference(&nested.names) {
            if !nested.open {
                problems.push(format!(
                    "{at}.{name}: `{missing}` is served but SPEC.md does not name it"
                ));
            }
        }
        for extra in nested.names.difference(&sub_fields) {
            problems.push(format!(
                "{at}.{name}: SPEC.md names `{extra}` but the schema has no such field"
            ));
        }
    }
}

fn spec_text() -> (String, String) {
    let path = std::env::var("CORDON_SPEC").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/SPEC.md").to_owned()
    });
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    (path, text)
}

#[cordon_test::test]
async fn every_tool_field_is_the_one_spec_md_names() {
    let (path, text) = spec_text();
    let spec = parse_spec(&text);
    let tools = crate::schemas::listed_tools().await;
    let mut problems = Vec::new();
    let served: BTreeSet<String> = tools.iter().map(|t| t.name.to_string()).collect();
    for name in spec.keys().filter(|n| !served.contains(*n)) {
        problems.push(format!(
            "SPEC.md describes `{name}`, which the server does not list"
        ));
    }
    for tool in &tools {
        let Some(contract) = spec.get(tool.name.as_ref()) else {
            problems.push(format!(
                "`{}` is served but SPEC.md has no section",
                tool.name
            ));
            continue;
        };
        let input = Value::Object((*tool.input_schema).clone());
        compare(
            &format!("{} in", tool.name),
            &contract.inputs,
            &input,
            &mut problems,
        );
        let output = tool
            .output_schema
            .as_ref()
            .map(|o| Value::Object((**o).clone()))
            .unwrap_or_default();
        compare(
            &format!("{} out", tool.name),
            &contract.outputs,
            &output,
            &mut problems,
        );
    }
    assert!(
        problems.is_empty(),
        "the tool schemas and {path} disagree:\n  {}",
        problems.join("\n  ")
    );
}

/// The reader itself, on a small contract, so a parser slip cannot pass the test above by
/// reading nothing.
#[cordon_test::test]
fn the_spec_reader_finds_fields_nested_fields_and_common_outputs() {
    let text = "## Tools\n- out (every tool): `error` (`{kind, message}` or null).\n\n\
                ### demo\n- in: `a` (string), `b`/`c` (ints, default `1`). Not `d`.\n\
                - in (more): `e` (`[{x, y=1}]`).\n- out: `f` (`{p, q: r|s, …}`),\n  `g`.\n\
                - `h` is prose, not a field.\n## Other\n- out: `z`.\n";
    let spec = parse_spec(text);
    let demo = &spec["demo"];
    let names = |m: &BTreeMap<String, Field>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&demo.inputs), ["a", "b", "c", "e"]);
    assert_eq!(names(&demo.outputs), ["error", "f", "g"]);
    let e = demo.inputs["e"].nested.as_ref().expect("nested");
    assert_eq!(e.names.iter().collect::<Vec<_>>(), ["x", "y"]);
    let f = demo.outputs["f"].nested.as_ref().expect("nested");
    assert!(f.open);
    assert_eq!(f.names.iter().collect::<Vec<_>>(), ["p", "q"]);
    assert_eq!(spec.len(), 1);
}
