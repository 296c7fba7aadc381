//! Fuzzes what the server reads after every call from files a confined process may have
//! written: the git index reader (on `.git/index` and each submodule's index) and the git
//! config parser and allow-list check (on a submodule's or worktree's config). Any bytes give
//! an answer, never a panic or an unbounded allocation; a config accepted by the allow-list
//! parses, and only sets allowed keys.
#![no_main]

use cordon::testing::workspace::gitconfig::{parse, vet};
use cordon::testing::workspace::gitlinks::{MAX_GITLINKS, gitlinks};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(paths) = gitlinks(data) {
        assert!(paths.len() <= MAX_GITLINKS.min(data.len() / 62 + 1));
    }
    let accepted = vet(data).is_ok();
    if let Ok(text) = std::str::from_utf8(data) {
        let parsed = parse(text);
        if accepted {
            let entries = parsed.expect("an accepted config parses");
            assert!(entries.iter().all(|e| e.is_allowed()));
        }
    } else {
        assert!(!accepted, "a config that is not UTF-8 was accepted");
    }
});
