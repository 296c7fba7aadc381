//! Fuzzes exact-match editing: success implies every old_string was found, and nothing else.
#![no_main]

use arbitrary::Arbitrary;
use cordon::testing::files::{Edit, apply_edits};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    original: Vec<u8>,
    edits: Vec<(String, String, bool)>,
}

fuzz_target!(|input: Input| {
    let edits: Vec<Edit> = input
        .edits
        .into_iter()
        .take(100)
        .map(|(old_string, new_string, replace_all)| Edit {
            old_string,
            new_string,
            replace_all,
        })
        .collect();
    if let Ok(outcome) = apply_edits(&input.original, &edits) {
        assert!(
            outcome.replacements >= edits.len(),
            "{} < {}",
            outcome.replacements,
            edits.len()
        );
        if let [single] = edits.as_slice() {
            if !single.replace_all {
                let original = String::from_utf8(input.original.clone()).unwrap();
                assert_eq!(
                    outcome.new_content,
                    original.replacen(&single.old_string, &single.new_string, 1)
                );
            }
        }
    }
});
