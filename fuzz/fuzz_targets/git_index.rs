//! Fuzzes the git index reader the server runs after a call on `.git/index` (a file a
//! confined process may have written) and the config check on a nested repository's config:
//! any bytes give an answer, never a panic or an unbounded allocation.
#![no_main]

use cordon::workspace::gitlinks::{gitlinks, runs_commands};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(paths) = gitlinks(data) {
        assert!(paths.len() <= data.len() / 62 + 1);
    }
    let _ = runs_commands(&String::from_utf8_lossy(data));
});
