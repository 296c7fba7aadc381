//! Fuzzes what the server reads after every call from files a confined process may have
//! written: the git index readers (the gitlink reader on `.git/index` and each submodule's
//! index, the cache-tree claim on the sandbox's index) and the git config parser and allow-list
//! check (on a submodule's or worktree's config). Any bytes give an answer, never a panic or an
//! unbounded allocation; a config accepted by the allow-list parses, and only sets allowed
//! keys. The index editor, which runs on the operator's index, is held to the same on any bytes,
//! and what it writes must read back with its cache tree invalidated.
#![no_main]

use cordon::testing::git::index_file::{Change, cache_tree_root, edit, trailer};
use cordon::testing::workspace::gitconfig::{parse, vet};
use cordon::testing::workspace::gitlinks::{MAX_GITLINKS, gitlinks};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(paths) = gitlinks(data) {
        assert!(paths.len() <= MAX_GITLINKS.min(data.len() / 62 + 1));
    }
    let _ = cache_tree_root(data, 20);
    let changes = [
        Change {
            path: b"a/b".to_vec(),
            entry: Some((0o100644, vec![0x11; 20])),
        },
        Change {
            path: b"c".to_vec(),
            entry: None,
        },
    ];
    if let Ok(mut edited) = edit(data, 20, &changes) {
        let hash = trailer(&edited, 20);
        edited.extend_from_slice(&hash);
        assert!(
            matches!(cache_tree_root(&edited, 20), Ok(None)),
            "an edited index does not read back with its cache tree invalid"
        );
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
