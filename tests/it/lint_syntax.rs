//! Embedded syntax check: a clean and a broken sample for every grammar, with exact positions.

use cordon::testing::lint::{Diagnostic, Severity};
use cordon::testing::parser::syntax::{
    CheckError, Language, check, check_with_budget, detect_language, language_for_path,
    language_for_shebang,
};
use std::path::Path;
use std::time::Duration;

/// The syntax check in process, as lint reports it.
fn errors(lang: Language, source: &str) -> Vec<Diagnostic> {
    cordon::testing::lint::syntax::diagnostics(check(lang, source).expect("syntax check ran"))
}

/// (line, column, message) of each diagnostic, for compact assertions.
fn brief(lang: Language, source: &str) -> Vec<(u32, u32, String)> {
    errors(lang, source)
        .into_iter()
        .map(|d| (d.line, d.column, d.message))
        .collect()
}

fn one(line: u32, column: u32, message: &str) -> Vec<(u32, u32, String)> {
    vec![(line, column, message.to_string())]
}

const CLEAN: &[(Language, &str)] = &[
    (
        Language::Python,
        "import os\n\n\nclass Greeter:\n    def greet(self, name: str) -> str:\n        \"\"\"Say hi.\"\"\"\n        return f\"héllo {name}\" + os.sep\n\n\nif __name__ == \"__main__\":\n    print([x * 2 for x in range(3)])\n",
    ),
    (
        Language::JavaScript,
        "import fs from 'fs';\nexport function read(p) {\n  const s = fs.readFileSync(p, 'utf8');\n  return s.split('\\n').map((l) => l.trim());\n}\nconst el = <div className=\"x\">{read('a')}</div>;\n",
    ),
    (
        Language::TypeScript,
        "interface Point { x: number; y: number }\nexport function norm<T extends Point>(p: T): number {\n  return Math.sqrt(p.x ** 2 + p.y ** 2);\n}\nconst n = norm({ x: 3, y: 4 }) as number;\n",
    ),
    (
        Language::Tsx,
        "type Props = { name: string };\nexport const Hello = ({ name }: Props) => <p>Hello {name}</p>;\n",
    ),
    (
        Language::Rust,
        "use std::collections::HashMap;\n\nfn main() {\n    let mut m: HashMap<&str, i32> = HashMap::new();\n    m.insert(\"é\", 1);\n    println!(\"{:?}\", m);\n}\n",
    ),
    (
        Language::Go,
        "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tx := []int{1, 2}\n\tfor _, v := range x {\n\t\tfmt.Println(v)\n\t}\n}\n",
    ),
    (
        Language::Bash,
        "#!/usr/bin/env bash\nset -euo pipefail\nfor f in \"$@\"; do\n  if [[ -f \"$f\" ]]; then echo \"$f\"; fi\ndone\ncase \"$1\" in a) echo a ;; *) echo b ;; esac\n",
    ),
    (
        Language::Json,
        "{\"name\": \"cordon\", \"list\": [1, 2.5, true, null], \"nested\": {\"é\": \"x\"}}\n",
    ),
    (
        Language::Toml,
        "[package]\nname = \"cordon\"\nversion = \"0.1.0\"\n\n[dependencies]\nserde = { version = \"1\", features = [\"derive\"] }\n",
    ),
    (
        Language::Yaml,
        "name: ci\non: [push]\njobs:\n  test:\n    steps:\n      - run: cargo test\n      - name: \"héllo\"\n",
    ),
    (
        Language::C,
        "#include <stdio.h>\n\nint main(void) {\n    int a[3] = {1, 2, 3};\n    printf(\"%d\\n\", a[0]);\n    return 0;\n}\n",
    ),
    (
        Language::Cpp,
        "#include <vector>\nnamespace n {\ntemplate <typename T>\nclass Box {\n public:\n  explicit Box(T v) : v_(v) {}\n  T get() const { return v_; }\n private:\n  T v_;\n};\n}  // namespace n\n",
    ),
    (
        Language::Java,
        "package a;\n\nimport java.util.List;\n\npublic class A {\n    public static void main(String[] args) {\n        List<String> xs = List.of(\"é\");\n        System.out.println(xs);\n    }\n}\n",
    ),
    (
        Language::Css,
        "body { margin: 0; }\n.a > .b:hover { color: #fff; }\n@media (max-width: 600px) { .c { display: none; } }\n",
    ),
];

#[cordon_test::test]
fn every_grammar_accepts_its_clean_sample() {
    assert_eq!(
        CLEAN.len(),
        Language::ALL.len(),
        "one clean sample per grammar"
    );
    for lang in Language::ALL {
        let (_, source) = CLEAN
            .iter()
            .find(|(l, _)| *l == lang)
            .expect("sample exists");
        assert_eq!(errors(lang, source), vec![], "{} clean sample", lang.name());
    }
}

#[cordon_test::test]
fn python_missing_paren() {
    assert_eq!(
        brief(Language::Python, "def f(:\n    pass\n"),
        one(1, 7, "missing `)`")
    );
}

#[cordon_test::test]
fn python_columns_count_characters_not_bytes() {
    // `+` is the 14th character but the 15th byte (é is two bytes).
    let diags = errors(Language::Python, "x = (\"héllo\" + ))\n");
    assert_eq!(diags.len(), 1);
    let d = &diags[0];
    assert_eq!((d.line, d.column, d.end_line, d.end_column), (1, 14, 1, 17));
    assert_eq!(d.message, "syntax error near `+ )`");
    assert_eq!(d.severity, Severity::Error);
    assert_eq!(d.source, "syntax");
    assert_eq!(d.code.as_deref(), Some("syntax-error"));

    // The brief's example: a dangling `+`. The error spans the whole line; its end column is
    // in characters (13 characters, exclusive end 14; it would be 15 in bytes).
    let diags = errors(Language::Python, "x = \"héllo\" +\n");
    assert_eq!(diags.len(), 1);
    assert_eq!(
        (diags[0].line, diags[0].column, diags[0].end_column),
        (1, 1, 14)
    );
    assert_eq!(diags[0].message, "syntax error near `x = \"héllo\" +`");
}

#[cordon_test::test]
fn javascript_missing_operand() {
    assert_eq!(
        brief(Language::JavaScript, "function f() {\n  return 1 +;\n}\n"),
        one(2, 13, "missing identifier")
    );
}

#[cordon_test::test]
fn typescript_missing_initializer() {
    assert_eq!(
        brief(Language::TypeScript, "let x: number = ;\n"),
        one(1, 15, "syntax error near `=`")
    );
}

#[cordon_test::test]
fn tsx_unclosed_tag() {
    assert_eq!(
        brief(Language::Tsx, "const a = <div>hi</div;\n"),
        one(1, 23, "missing `>`")
    );
}

#[cordon_test::test]
fn rust_missing_semicolon() {
    assert_eq!(
        brief(Language::Rust, "fn main() {\n    let x = 1 }\n"),
        one(2, 14, "missing `;`")
    );
}

#[cordon_test::test]
fn go_missing_expression() {
    assert_eq!(
        brief(Language::Go, "package main\n\nfunc main() {\n\tx := \n}\n"),
        one(4, 6, "missing identifier")
    );
}

#[cordon_test::test]
fn bash_missing_fi_is_reported_past_the_last_line() {
    assert_eq!(
        brief(Language::Bash, "if true; then echo hi\n"),
        one(2, 1, "missing `fi`")
    );
}

#[cordon_test::test]
fn json_trailing_comma() {
    let diags = errors(Language::Json, "{\"a\": 1,}\n");
    assert_eq!(diags.len(), 1);
    assert_eq!(
        (diags[0].line, diags[0].column, diags[0].end_column),
        (1, 8, 9)
    );
    assert_eq!(diags[0].message, "syntax error near `,`");
}

#[cordon_test::test]
fn toml_missing_value() {
    assert_eq!(
        brief(Language::Toml, "[a]\nb = \nc = 1\n"),
        one(2, 1, "syntax error near `b =`")
    );
}

#[cordon_test::test]
fn yaml_unclosed_flow_sequence() {
    assert_eq!(
        brief(Language::Yaml, "a: [1, 2\nb: 3\n"),
        one(1, 4, "syntax error near `[1, 2`")
    );
}

#[cordon_test::test]
fn c_missing_semicolon() {
    assert_eq!(
        brief(Language::C, "int main(void) {\n  return 0\n}\n"),
        one(2, 11, "missing `;`")
    );
}

#[cordon_test::test]
fn cpp_missing_semicolon_in_class() {
    assert_eq!(
        brief(Language::Cpp, "class A {\n  int x\n};\n"),
        one(2, 8, "missing `;`")
    );
}

#[cordon_test::test]
fn java_missing_initializer() {
    assert_eq!(
        brief(Language::Java, "class A {\n  void f() { int x = ; }\n}\n"),
        one(2, 20, "syntax error near `=`")
    );
}

#[cordon_test::test]
fn css_unclosed_block_and_missing_colon() {
    assert_eq!(
        brief(Language::Css, "a { color: red;\n"),
        one(1, 16, "missing `}`")
    );
    assert_eq!(
        brief(Language::Css, "a { color red; }\n"),
        one(1, 5, "syntax error near `color red;`")
    );
}

#[cordon_test::test]
fn nested_error_spans_are_reduced_to_one_per_line() {
    // tree-sitter gives one ERROR over lines 1-5 with a nested ERROR on line 2. We report
    // the outer one only at its start line (clipped to that line) and the inner one on its own.
    let source = "function f( {\n  if (x {\n    y = [1, 2;\n  }\n}\n";
    let diags = errors(Language::JavaScript, source);
    let spans: Vec<_> = diags
        .iter()
        .map(|d| (d.line, d.column, d.end_line, d.end_column))
        .collect();
    assert_eq!(spans, vec![(1, 1, 1, 14), (2, 7, 2, 8)]);
    assert_eq!(diags[0].message, "syntax error near `function f( {`");

    // Python: an ERROR over lines 2-4 with two inner ERRORs on line 3 and a MISSING on line 4.
    let source = "def f(:\n    if x\n        y = (]\n    z = {)\nq = 1 +\n";
    assert_eq!(
        brief(Language::Python, source),
        vec![
            (1, 7, "missing `)`".to_string()),
            (2, 5, "syntax error near `if x`".to_string()),
            (3, 9, "syntax error near `y =`".to_string()),
            (4, 10, "missing `}`".to_string()),
            (5, 1, "syntax error near `q = 1 +`".to_string()),
        ]
    );
    assert!(
        errors(Language::Python, source)
            .iter()
            .all(|d| d.end_line == d.line)
    );
}

#[cordon_test::test]
fn long_excerpts_are_capped() {
    let source = format!("x = ({} +* 1\n", "a".repeat(200));
    let diags = errors(Language::Python, &source);
    assert!(!diags.is_empty());
    for d in diags {
        assert!(d.message.chars().count() < 70, "{}", d.message);
    }
}

#[cordon_test::test]
fn garbage_is_capped() {
    let source = "}{ ) (\n".repeat(500);
    let diags = errors(Language::Rust, &source);
    assert!(!diags.is_empty());
    assert!(diags.len() <= cordon::testing::parser::syntax::MAX_SYNTAX_ERRORS);
}

#[cordon_test::test]
fn over_budget_parse_is_reported_as_too_slow() {
    // ~1.5 MB of code cannot be parsed in zero time; the parse must stop, not hang.
    let source = "def f(x):\n    return [x + i for i in range(10)]\n".repeat(30_000);
    let result = check_with_budget(Language::Python, &source, Duration::ZERO);
    let err = result.expect_err("zero budget trips");
    assert!(matches!(
        err,
        CheckError::TooSlow {
            language: "python",
            ..
        }
    ));
    assert!(err.to_string().starts_with("skipped: too slow"), "{err}");
    // The thread's parser is usable again afterwards.
    assert_eq!(errors(Language::Python, "x = 1\n"), vec![]);
}

#[cordon_test::test]
fn languages_by_extension() {
    let cases = [
        ("a.py", Language::Python),
        ("a.pyi", Language::Python),
        ("a.js", Language::JavaScript),
        ("a.mjs", Language::JavaScript),
        ("a.cjs", Language::JavaScript),
        ("a.jsx", Language::JavaScript),
        ("a.ts", Language::TypeScript),
        ("a.mts", Language::TypeScript),
        ("a.cts", Language::TypeScript),
        ("a.tsx", Language::Tsx),
        ("src/main.rs", Language::Rust),
        ("a.go", Language::Go),
        ("a.sh", Language::Bash),
        ("a.bash", Language::Bash),
        ("a.c", Language::C),
        ("a.h", Language::Cpp),
        ("a.cc", Language::Cpp),
        ("a.cpp", Language::Cpp),
        ("a.cxx", Language::Cpp),
        ("a.hpp", Language::Cpp),
        ("a.hh", Language::Cpp),
        ("A.java", Language::Java),
        ("a.json", Language::Json),
        ("Cargo.toml", Language::Toml),
        ("a.yaml", Language::Yaml),
        ("a.YML", Language::Yaml),
        ("a.css", Language::Css),
    ];
    for (path, lang) in cases {
        assert_eq!(language_for_path(Path::new(path)), Some(lang), "{path}");
    }
    assert_eq!(language_for_path(Path::new("README.md")), None);
    assert_eq!(language_for_path(Path::new("Makefile")), None);
}

#[cordon_test::test]
fn languages_by_shebang() {
    let cases = [
        ("#!/bin/sh\necho hi\n", Some(Language::Bash)),
        ("#!/bin/bash -e\n", Some(Language::Bash)),
        ("#!/usr/bin/env bash\n", Some(Language::Bash)),
        ("#!/usr/bin/env -S bash -eu\n", Some(Language::Bash)),
        ("#!/usr/bin/env python3\n", Some(Language::Python)),
        ("#!/usr/bin/python3.12\n", Some(Language::Python)),
        ("#!/usr/bin/env node\n", Some(Language::JavaScript)),
        ("#!/usr/bin/perl\n", None),
        ("echo no shebang\n", None),
    ];
    for (source, lang) in cases {
        assert_eq!(language_for_shebang(source), lang, "{source:?}");
    }
    assert_eq!(
        detect_language(Path::new("bin/deploy"), "#!/bin/sh\n"),
        Some(Language::Bash)
    );
    // An extension wins over the shebang; an unknown extension is not second-guessed.
    assert_eq!(
        detect_language(Path::new("x.py"), "#!/bin/sh\n"),
        Some(Language::Python)
    );
    assert_eq!(detect_language(Path::new("x.txt"), "#!/bin/sh\n"), None);
}

#[cordon_test::test]
fn shebang_script_is_checked_as_bash() {
    let lang = detect_language(Path::new("run"), "#!/usr/bin/env bash\nif true; then\n").unwrap();
    assert_eq!(
        brief(lang, "#!/usr/bin/env bash\nif true; then\n"),
        one(2, 14, "missing `fi`")
    );
}

/// The server gets its syntax checks from the confined parser worker: for every grammar, a
/// clean and a broken sample, fresh and as an incremental re-parse from the worker's
/// remembered tree, must come back exactly as the in-process check computes them.
#[cordon_test::test]
async fn parser_worker_answers_equal_the_in_process_check_for_every_grammar() {
    use crate::common::{Need, skip};
    use cordon::testing::parser::protocol::SyntaxOutcome;
    use cordon::testing::parser::{ParserClient, ParserConfig};
    use std::sync::Arc;
    if skip(
        "parser_worker_answers_equal_the_in_process_check_for_every_grammar",
        Need::LandlockSeccomp,
    ) {
        return;
    }
    let policy = cordon::testing::policy::Policy::builtin_default();
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().canonicalize().unwrap();
    let program = std::path::PathBuf::from(env!("CARGO_BIN_EXE_cordon"));
    let options = cordon::testing::runtime::RuntimeOptions {
        workspace: root,
        parser_program: Some(program.clone()),
        init_program: Some(program.clone()),
        ..Default::default()
    };
    let runtime = cordon::testing::runtime::Runtime::build(policy, options).unwrap();
    let client = ParserClient::new(
        Arc::clone(&runtime.executor),
        program,
        ParserConfig::default(),
    );
    let mut key = 0;
    for (lang, clean) in CLEAN {
        // Broken in the middle, so the incremental re-parse has a tree on both sides of it.
        let mid = clean.len() / 2;
        let mid = (0..=mid)
            .rev()
            .find(|&i| clean.is_char_boundary(i))
            .unwrap();
        let broken = format!("{}(\"{{[ <\n{}", &clean[..mid], &clean[mid..]);
        key += 2;
        for (text, remember, previous) in [
            (*clean, Some(key), None),
            (broken.as_str(), Some(key + 1), Some(key)),
            (*clean, None, Some(key + 1)),
        ] {
            let expected = errors(*lang, text);
            match client.syntax(*lang, text, remember, previous).await {
                Ok(SyntaxOutcome::Checked {
                    errors,
                    incremental,
                }) => {
                    let diagnostics = cordon::testing::lint::syntax::diagnostics(errors);
                    assert_eq!(diagnostics, expected, "{} {text:?}", lang.name());
                    assert_eq!(incremental, previous.is_some(), "{}", lang.name());
                }
                other => panic!("{}: {other:?}", lang.name()),
            }
        }
    }
}
