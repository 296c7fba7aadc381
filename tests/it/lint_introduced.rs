//! `introduced` end to end: the embedded syntax check run on old and new content.

use cordon::testing::lint::{Diagnostic, LintReport, mark_introduced};
use cordon::testing::parser::syntax::{Language, check};

/// The syntax check in process, as lint reports it.
fn check_syntax(lang: Language, source: &str) -> Result<Vec<Diagnostic>, String> {
    let errors = check(lang, source).map_err(|e| e.to_string())?;
    Ok(cordon::testing::lint::syntax::diagnostics(errors))
}

fn lint(source: &str) -> Vec<Diagnostic> {
    check_syntax(Language::Python, source).expect("parsed")
}

/// (line, introduced) of each new diagnostic after an edit from `old` to `new`.
fn after_edit(old: Option<&str>, new: &str) -> Vec<(u32, bool)> {
    let old_diags = old.map(lint).unwrap_or_default();
    let mut new_diags = lint(new);
    mark_introduced(old, new, &old_diags, &mut new_diags);
    new_diags.iter().map(|d| (d.line, d.introduced)).collect()
}

const OLD: &str = "import os\n\ndef f(:\n    return 1\n\nx = 2\n";

#[cordon_test::test]
fn lines_inserted_above_an_old_error() {
    let new = "import os\nimport sys\nimport re\n\ndef f(:\n    return 1\n\nx = 2\n";
    assert_eq!(after_edit(Some(OLD), new), vec![(5, false)]);
}

#[cordon_test::test]
fn lines_deleted_above_an_old_error() {
    let new = "def f(:\n    return 1\n\nx = 2\n";
    assert_eq!(after_edit(Some(OLD), new), vec![(1, false)]);
}

#[cordon_test::test]
fn new_error_below_old_one() {
    let new = "import os\n\ndef f(:\n    return 1\n\nx = (2\n";
    let result = after_edit(Some(OLD), new);
    assert_eq!(result.first(), Some(&(3, false)));
    assert!(result.iter().skip(1).all(|(_, introduced)| *introduced));
    assert!(result.len() >= 2);
}

#[cordon_test::test]
fn changing_the_broken_line_into_another_error_is_introduced() {
    // Same line, different problem (`missing )` becomes an error near `]`).
    let new = "import os\n\ndef f(a]:\n    return 1\n\nx = 2\n";
    let result = after_edit(Some(OLD), new);
    assert_eq!(result.len(), 1);
    assert_eq!(result[0], (3, true));
}

#[cordon_test::test]
fn editing_the_broken_line_without_fixing_it_keeps_the_old_error() {
    // The line changed (the variable was renamed, moving the error sideways); the error, a
    // missing `;`, did not.
    let old = "fn main() {\n    let x = 1 }\n";
    let new = "fn main() {\n    let total = 1 }\n";
    let old_d = check_syntax(Language::Rust, old).unwrap();
    let mut new_d = check_syntax(Language::Rust, new).unwrap();
    assert_eq!(old_d.len(), 1);
    assert_eq!(new_d.len(), 1);
    assert_eq!(old_d[0].message, new_d[0].message);
    assert_ne!(old_d[0].column, new_d[0].column);
    mark_introduced(Some(old), new, &old_d, &mut new_d);
    assert!(!new_d[0].introduced);
}

#[cordon_test::test]
fn fixed_error_disappears_and_clean_file_reports_clean() {
    let new = "import os\n\ndef f():\n    return 1\n\nx = 2\n";
    assert_eq!(after_edit(Some(OLD), new), vec![]);
    let report = LintReport::from_diagnostics(vec!["syntax".into()], lint(new));
    // Only the syntax check ran, and `clean` says so (issue 11: lint tells what it checked).
    assert_eq!(
        report.summary(5),
        "lint: clean (syntax check only; no linter ran)"
    );
}

#[cordon_test::test]
fn brand_new_file_has_everything_introduced() {
    assert_eq!(after_edit(None, OLD), vec![(3, true)]);
    let mut diags = lint(OLD);
    mark_introduced(None, OLD, &[], &mut diags);
    let report = LintReport::from_diagnostics(vec!["syntax".into()], diags);
    assert_eq!(
        report.summary(5),
        "lint: 1 new issue: 1 error (syntax)\n  3:7 error missing-token missing `)` [syntax]"
    );
}
