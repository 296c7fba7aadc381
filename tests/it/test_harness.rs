//! The integration binaries' own harness (tests/runner), on the parts a run cannot show by
//! itself: the libtest arguments cargo and nextest pass, which tests they select, and how a
//! child's report becomes an outcome (a skip only when the child said so).

use crate::runner::args::{ArgsError, Ignored, Options};
use crate::runner::child;
use crate::runner::report::Outcome;

fn parse(args: &[&str]) -> Result<Options, ArgsError> {
    Options::parse(args.iter().map(|a| (*a).to_owned()))
}

#[cordon_test::test]
fn nextest_list_and_run_arguments_are_understood() {
    let list = parse(&["--list", "--format", "terse", "--ignored"]).unwrap();
    assert!(list.list && list.terse);
    assert_eq!(list.ignored, Ignored::Only);
    let one = parse(&["--exact", "confinement::x", "--nocapture"]).unwrap();
    assert!(one.exact && one.nocapture);
    assert_eq!(one.filters, ["confinement::x"]);
    assert!(one.selects("confinement::x"));
    assert!(!one.selects("confinement::xy"));
}

#[cordon_test::test]
fn cargo_test_arguments_select_like_libtest() {
    let o = parse(&[
        "confinement",
        "jobs",
        "--skip",
        "shadow",
        "--test-threads=3",
    ])
    .unwrap();
    assert_eq!(o.parallelism(), 3);
    assert!(o.selects("confinement::etc_passwd_is_readable"));
    assert!(o.selects("jobs::a_dev_server"));
    assert!(!o.selects("confinement::etc_shadow_is_unreadable"));
    assert!(!o.selects("egress::anything"));
}

#[cordon_test::test]
fn unknown_or_malformed_arguments_are_errors_not_ignored() {
    assert_eq!(
        parse(&["--bogus"]).unwrap_err(),
        ArgsError::Unknown("--bogus".into())
    );
    assert!(matches!(
        parse(&["--test-threads", "0"]),
        Err(ArgsError::BadThreads(_))
    ));
    assert!(matches!(
        parse(&["--format", "json"]),
        Err(ArgsError::BadFormat(_))
    ));
    assert!(matches!(
        parse(&["--skip"]),
        Err(ArgsError::MissingValue(_))
    ));
}

#[cordon_test::test]
fn a_skip_is_only_what_the_child_reported() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("outcome");
    std::fs::write(&file, "skipped\nno cgroup limits here\n").unwrap();
    assert_eq!(
        child::outcome(true, "exit status: 0", &file),
        Outcome::Skipped("no cgroup limits here".into())
    );
    assert!(!file.exists(), "the parent removes the outcome file");
    std::fs::write(&file, "passed\n").unwrap();
    assert_eq!(
        child::outcome(true, "exit status: 0", &file),
        Outcome::Passed
    );
    // Exited 0 without a report: it never finished its test.
    assert!(matches!(
        child::outcome(true, "exit status: 0", &file),
        Outcome::Failed(_)
    ));
    // A failing exit is a failure whatever the file says.
    std::fs::write(&file, "skipped\nwhatever\n").unwrap();
    assert_eq!(
        child::outcome(false, "killed by signal 6", &file),
        Outcome::Failed("killed by signal 6".into())
    );
}

#[cordon_test::test]
fn every_test_of_this_binary_is_registered_once_under_its_libtest_name() {
    let mut names: Vec<String> = crate::runner::TESTS.iter().map(|t| t.path()).collect();
    assert!(names.contains(&"test_harness::a_skip_is_only_what_the_child_reported".to_owned()));
    let total = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), total, "a test name is registered twice");
}
