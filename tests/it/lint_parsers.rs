//! External linter output → diagnostics, on real captured output (tests/fixtures/lint/).

use cordon::testing::lint::formats::{LinterConfig, OutputFormat, ParseError, parse_builtin};
use cordon::testing::lint::{Diagnostic, Severity};
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "fixtures",
        "lint",
        name,
    ]
    .iter()
    .collect();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (line, column, end_line, end_column, severity, code) for compact assertions.
type Row = (u32, u32, u32, u32, Severity, Option<String>);

fn row(d: &Diagnostic) -> Row {
    (
        d.line,
        d.column,
        d.end_line,
        d.end_column,
        d.severity,
        d.code.clone(),
    )
}

fn r(l: u32, c: u32, el: u32, ec: u32, s: Severity, code: Option<&str>) -> Row {
    (l, c, el, ec, s, code.map(str::to_string))
}

use Severity::{Error, Info, Warning};

#[cordon_test::test]
fn ruff_real_output() {
    let diags = parse_builtin(
        OutputFormat::Ruff,
        "ruff",
        &fixture("ruff_sample.json"),
        &fixture("sample.py"),
    )
    .unwrap();
    let rows: Vec<Row> = diags.iter().map(row).collect();
    assert_eq!(
        rows,
        vec![
            r(1, 8, 1, 10, Error, Some("F401")),
            r(2, 8, 2, 11, Error, Some("F401")),
            r(6, 5, 6, 6, Error, Some("F841")),
            // After `"héllo wörld"`: character column 24 (byte column would be 26).
            r(6, 24, 6, 34, Error, Some("F841")),
            r(7, 27, 7, 41, Error, Some("F821")),
        ]
    );
    assert_eq!(diags[4].message, "Undefined name `undefined_name`");
    assert!(diags.iter().all(|d| d.source == "ruff" && !d.introduced));
}

#[cordon_test::test]
fn ruff_syntax_errors() {
    let diags = parse_builtin(
        OutputFormat::Ruff,
        "ruff",
        &fixture("ruff_bad.json"),
        &fixture("bad.py"),
    )
    .unwrap();
    let rows: Vec<Row> = diags.iter().map(row).collect();
    assert_eq!(
        rows,
        vec![
            r(1, 7, 1, 8, Error, Some("invalid-syntax")),
            r(1, 8, 2, 1, Error, Some("invalid-syntax")),
        ]
    );
    assert_eq!(diags[1].message, "Expected `)`, found newline");
}

#[cordon_test::test]
fn ruff_older_format_without_severity() {
    // Older ruff: no `severity`, syntax errors with `code: null`.
    let out = r#"[{"code": null, "message": "SyntaxError: bad", "location": {"row": 2, "column": 3},
        "end_location": {"row": 2, "column": 4}},
       {"code": "F401", "message": "unused", "location": {"row": 1, "column": 1},
        "end_location": null}]"#;
    let diags = parse_builtin(OutputFormat::Ruff, "ruff", out, "a\nbcd\n").unwrap();
    let rows: Vec<Row> = diags.iter().map(row).collect();
    assert_eq!(
        rows,
        vec![
            r(2, 3, 2, 4, Error, None),
            r(1, 1, 1, 1, Warning, Some("F401"))
        ]
    );
}

#[cordon_test::test]
fn ruff_clean_and_malformed() {
    assert_eq!(
        parse_builtin(OutputFormat::Ruff, "ruff", "[]\n", "x = 1\n").unwrap(),
        vec![]
    );
    let empty = parse_builtin(OutputFormat::Ruff, "ruff", "", "x = 1\n").unwrap_err();
    assert!(matches!(empty, ParseError::EmptyOutput { .. }), "{empty}");
    let garbage = parse_builtin(OutputFormat::Ruff, "ruff", "error: ruff crashed", "").unwrap_err();
    assert!(
        matches!(garbage, ParseError::InvalidJson { .. }),
        "{garbage}"
    );
    let wrong_shape = parse_builtin(OutputFormat::Ruff, "ruff", "[{\"x\": 1}]", "").unwrap_err();
    assert!(
        matches!(wrong_shape, ParseError::InvalidJson { .. }),
        "{wrong_shape}"
    );
}

#[cordon_test::test]
fn shellcheck_real_output() {
    let diags = parse_builtin(
        OutputFormat::Shellcheck,
        "shellcheck",
        &fixture("shellcheck_sample.json"),
        &fixture("sample.sh"),
    )
    .unwrap();
    let rows: Vec<Row> = diags.iter().map(row).collect();
    assert_eq!(
        rows,
        vec![
            r(2, 6, 2, 8, Info, Some("SC2086")),
            // After `naïve="é"; `: character column 12.
            r(3, 12, 3, 19, Warning, Some("SC2164")),
            // The line starts with a tab, counted as one column by json1.
            r(4, 11, 4, 22, Error, Some("SC2045")),
            r(4, 16, 4, 17, Info, Some("SC2035")),
            r(4, 32, 4, 34, Info, Some("SC2086")),
            r(5, 6, 5, 8, Warning, Some("SC2154")),
            r(5, 6, 5, 8, Info, Some("SC2086")),
            r(5, 9, 5, 11, Warning, Some("SC3014")),
        ]
    );
    assert_eq!(diags[5].message, "x is referenced but not assigned.");
    assert!(diags.iter().all(|d| d.source == "shellcheck"));
}

#[cordon_test::test]
fn shellcheck_syntax_errors_and_wrong_format() {
    let diags = parse_builtin(
        OutputFormat::Shellcheck,
        "shellcheck",
        &fixture("shellcheck_bad.json"),
        &fixture("bad.sh"),
    )
    .unwrap();
    assert_eq!(diags.len(), 4);
    assert_eq!(row(&diags[0]), r(2, 1, 2, 1, Error, Some("SC1046")));
    assert_eq!(diags[0].message, "Couldn't find 'fi' for this 'if'.");

    let clean = parse_builtin(OutputFormat::Shellcheck, "sc", "{\"comments\":[]}", "").unwrap();
    assert_eq!(clean, vec![]);
    // `-f json` (bare array, tabs = 8 columns) is refused, not misread.
    let err = parse_builtin(OutputFormat::Shellcheck, "sc", "[]", "").unwrap_err();
    assert!(err.to_string().contains("json1"), "{err}");
}

#[cordon_test::test]
fn eslint_real_output() {
    let diags = parse_builtin(
        OutputFormat::Eslint,
        "eslint",
        &fixture("eslint_sample.json"),
        &fixture("sample.js"),
    )
    .unwrap();
    let rows: Vec<Row> = diags.iter().map(row).collect();
    assert_eq!(
        rows,
        vec![
            r(2, 5, 2, 11, Warning, Some("no-unused-vars")),
            r(2, 27, 2, 28, Warning, Some("no-unused-vars")),
            r(2, 31, 2, 33, Error, Some("no-undef")),
            r(3, 7, 3, 9, Error, Some("eqeqeq")),
            r(3, 15, 3, 24, Error, Some("no-debugger")),
        ]
    );
    assert_eq!(diags[2].message, "'zz' is not defined.");
}

#[cordon_test::test]
fn eslint_parse_error_has_no_rule_or_end() {
    let diags = parse_builtin(
        OutputFormat::Eslint,
        "eslint",
        &fixture("eslint_bad.json"),
        &fixture("bad.js"),
    )
    .unwrap();
    assert_eq!(
        diags.iter().map(row).collect::<Vec<_>>(),
        vec![r(2, 1, 2, 1, Error, None)]
    );
    assert_eq!(diags[0].message, "Parsing error: Unexpected token");
}

#[cordon_test::test]
fn eslint_utf16_columns_become_characters() {
    // 😀 is two UTF-16 units: ESLint puts `zz` at column 9, it is character 8.
    let source = "a = '😀'+zz;\n";
    let out = r#"[{"filePath": "x.js", "messages": [{"ruleId": "no-undef", "severity": 2,
        "message": "'zz' is not defined.", "line": 1, "column": 10, "endLine": 1, "endColumn": 12}]}]"#;
    let diags = parse_builtin(OutputFormat::Eslint, "eslint", out, source).unwrap();
    assert_eq!((diags[0].column, diags[0].end_column), (9, 11));
}

#[cordon_test::test]
fn oxlint_real_output_bytes_become_characters() {
    let diags = parse_builtin(
        OutputFormat::Oxlint,
        "oxlint",
        &fixture("oxlint_sample.json"),
        &fixture("sample.js"),
    )
    .unwrap();
    let rows: Vec<Row> = diags.iter().map(row).collect();
    assert_eq!(
        rows,
        vec![
            r(2, 5, 2, 11, Warning, Some("eslint(no-unused-vars)")),
            // oxlint says byte column 28; after `"héllo"` that is character 27 (as ESLint says).
            r(2, 27, 2, 28, Warning, Some("eslint(no-unused-vars)")),
            r(3, 15, 3, 24, Warning, Some("eslint(no-debugger)")),
        ]
    );
    let bad = parse_builtin(
        OutputFormat::Oxlint,
        "oxlint",
        &fixture("oxlint_bad.json"),
        &fixture("bad.js"),
    )
    .unwrap();
    assert_eq!(
        bad.iter().map(row).collect::<Vec<_>>(),
        vec![r(2, 1, 2, 1, Error, None)]
    );
    assert_eq!(bad[0].message, "Expected `}` but found `EOF`");
}

fn config(toml_text: &str) -> LinterConfig {
    toml::from_str(toml_text).expect("valid linter config")
}

#[cordon_test::test]
fn exit_status_outside_ok_codes_is_an_error_not_clean() {
    let linter = config(
        r#"name = "ruff"
command = "ruff"
args = ["check", "--output-format=json", "{path}"]
extensions = ["py", "pyi"]
format = "ruff""#,
    )
    .compile()
    .unwrap();
    assert_eq!(
        linter.config().command_args("src/a.py"),
        vec!["check", "--output-format=json", "src/a.py"]
    );
    assert!(linter.config().applies_to("PY"));
    assert!(!linter.config().applies_to("js"));
    assert_eq!(linter.parse("[]", Some(0), "").unwrap(), vec![]);
    let crashed = linter.parse("[]", Some(2), "").unwrap_err();
    assert!(matches!(
        crashed,
        ParseError::UnexpectedExit { code: Some(2), .. }
    ));
    let killed = linter.parse("", None, "").unwrap_err();
    assert!(killed.to_string().contains("a signal"), "{killed}");
}

#[cordon_test::test]
fn generic_json_reproduces_builtin_ruff() {
    let linter = config(
        r#"name = "ruff"
command = "ruff"
extensions = ["py"]
format = "json"
[json]
line = "/location/row"
column = "/location/column"
end_line = "/end_location/row"
end_column = "/end_location/column"
severity = "severity"
code = "code"
message = "message""#,
    )
    .compile()
    .unwrap();
    let generic = linter
        .parse(&fixture("ruff_sample.json"), Some(1), &fixture("sample.py"))
        .unwrap();
    let builtin = parse_builtin(
        OutputFormat::Ruff,
        "ruff",
        &fixture("ruff_sample.json"),
        &fixture("sample.py"),
    )
    .unwrap();
    assert_eq!(generic, builtin);
}

#[cordon_test::test]
fn generic_json_nested_results_with_severity_map_and_utf16() {
    let linter = config(
        r#"name = "eslint"
command = "eslint"
extensions = ["js"]
format = "json"
column_unit = "utf16"
severity_map = { "1" = "warning", "2" = "error" }
[json]
nested = "/messages"
line = "line"
column = "column"
end_line = "endLine"
end_column = "endColumn"
severity = "severity"
code = "ruleId"
message = "message""#,
    )
    .compile()
    .unwrap();
    let generic = linter
        .parse(
            &fixture("eslint_sample.json"),
            Some(1),
            &fixture("sample.js"),
        )
        .unwrap();
    let builtin = parse_builtin(
        OutputFormat::Eslint,
        "eslint",
        &fixture("eslint_sample.json"),
        &fixture("sample.js"),
    )
    .unwrap();
    assert_eq!(generic, builtin);
}

#[cordon_test::test]
fn generic_json_zero_based_byte_columns() {
    let linter = config(
        r#"name = "tool"
command = "tool"
extensions = ["txt"]
format = "json"
column_unit = "byte"
column_base = 0
line_base = 0
default_severity = "info"
[json]
results = "/report/items"
line = "/pos/l"
column = "/pos/c"
message = "text"
code = "id"
severity = "level""#,
    )
    .compile()
    .unwrap();
    let out = r#"{"report": {"items": [
        {"pos": {"l": 1, "c": 6}, "text": "x after é", "id": 12, "level": "WARN"},
        {"pos": {"l": 0, "c": 0}, "text": "top", "id": null}]}}"#;
    let diags = linter.parse(out, Some(0), "first\nab é x\n").unwrap();
    assert_eq!(
        diags.iter().map(row).collect::<Vec<_>>(),
        vec![
            r(2, 6, 2, 6, Warning, Some("12")),
            r(1, 1, 1, 1, Info, None)
        ]
    );

    let missing = linter
        .parse(
            r#"{"report": {"items": [{"text": "no line"}]}}"#,
            Some(0),
            "",
        )
        .unwrap_err();
    assert!(missing.to_string().contains("no line number"), "{missing}");
    let no_array = linter.parse(r#"{"report": {}}"#, Some(0), "").unwrap_err();
    assert!(
        matches!(no_array, ParseError::UnexpectedShape { .. }),
        "{no_array}"
    );
    let empty = linter.parse("  \n", Some(0), "").unwrap_err();
    assert!(matches!(empty, ParseError::EmptyOutput { .. }), "{empty}");
}

const MYPY: &str = r#"name = "mypy"
command = "mypy"
args = ["--show-column-numbers", "--no-error-summary", "{path}"]
extensions = ["py"]
format = "regex"
severity_map = { note = "info" }
[regex]
pattern = '^[^:]+:(?P<line>\d+):(?P<col>\d+): (?P<severity>\w+): (?P<message>.*?)(?:  \[(?P<code>[\w-]+)\])?$'
"#;

#[cordon_test::test]
fn generic_regex_mypy_style() {
    let linter = config(MYPY).compile().unwrap();
    let out = "a.py:3:5: error: Incompatible types in assignment  [assignment]\n\
               a.py:7:1: note: See https://example.invalid\n\
               Found 1 error in 1 file (checked 1 source file)\n";
    let diags = linter.parse(out, Some(1), "").unwrap();
    assert_eq!(
        diags.iter().map(row).collect::<Vec<_>>(),
        vec![
            r(3, 5, 3, 5, Error, Some("assignment")),
            r(7, 1, 7, 1, Info, None)
        ]
    );
    assert_eq!(diags[0].message, "Incompatible types in assignment");
    assert!(diags.iter().all(|d| d.source == "mypy"));
}

#[cordon_test::test]
fn generic_regex_with_ranges_and_byte_columns() {
    let linter = config(
        r#"name = "cc"
command = "cc"
extensions = ["c"]
format = "regex"
column_unit = "byte"
[regex]
pattern = '^(?P<line>\d+):(?P<col>\d+)-(?P<end_line>\d+):(?P<end_col>\d+) (?P<severity>[EW]) (?P<code>\S+) (?P<message>.+)$'
"#,
    )
    .compile()
    .unwrap();
    let diags = linter
        .parse("1:8-1:10 E x1 bad thing\n", Some(1), "s = \"é\" + y;\n")
        .unwrap();
    // Bytes 8..10 are characters 7..9; `E` maps through the common names.
    assert_eq!(row(&diags[0]), r(1, 7, 1, 9, Error, Some("x1")));
}

#[cordon_test::test]
fn invalid_configs_are_rejected_at_compile() {
    let base = "name = \"t\"\ncommand = \"t\"\nextensions = [\"x\"]\n";
    let no_mapping = config(&format!("{base}format = \"json\""))
        .compile()
        .unwrap_err();
    assert!(
        matches!(no_mapping, ParseError::InvalidConfig { .. }),
        "{no_mapping}"
    );
    let no_regex = config(&format!("{base}format = \"regex\""))
        .compile()
        .unwrap_err();
    assert!(matches!(no_regex, ParseError::InvalidConfig { .. }));

    let regex = |p: &str| {
        config(&format!(
            "{base}format = \"regex\"\n[regex]\npattern = '{p}'"
        ))
    };
    let typo = regex(r"(?P<line>\d+):(?P<column>\d+) (?P<message>.*)")
        .compile()
        .unwrap_err();
    assert!(typo.to_string().contains("`column`"), "{typo}");
    let no_message = regex(r"(?P<line>\d+)").compile().unwrap_err();
    assert!(no_message.to_string().contains("`message`"), "{no_message}");
    let broken = regex(r"(?P<line>\d+").compile().unwrap_err();
    assert!(
        matches!(broken, ParseError::InvalidRegex { .. }),
        "{broken}"
    );

    // Unknown keys in the policy entry are an error too (typos must not be ignored).
    let unknown: Result<LinterConfig, _> =
        toml::from_str(&format!("{base}format = \"ruff\"\nseverity_mapping = {{}}"));
    assert!(unknown.is_err());
}

#[cordon_test::test]
fn generic_regex_non_numeric_line_is_an_error() {
    let base = "name = \"t\"\ncommand = \"t\"\nextensions = [\"x\"]\nformat = \"regex\"\n";
    let linter = config(&format!(
        "{base}[regex]\npattern = '^(?P<line>\\w+): (?P<message>.*)$'"
    ))
    .compile()
    .unwrap();
    let err = linter.parse("abc: oops\n", Some(1), "").unwrap_err();
    assert!(err.to_string().contains("not a number"), "{err}");
}
