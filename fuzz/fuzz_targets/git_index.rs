//! Fuzzes what the server reads after every call from files a confined process may have
//! written: the git index readers (the gitlink reader on `.git/index` and each submodule's
//! index, the cache-tree claim on the sandbox's index) and the git config parser and allow-list
//! check (on a submodule's or worktree's config). Any bytes give an answer, never a panic or an
//! unbounded allocation; a config accepted by the allow-list parses, and only sets allowed
//! keys. The index editor, which runs on the operator's index, is held to the same on any bytes,
//! and what it writes must read back with its cache tree invalidated; given the entry table of
//! the same bytes (the copy of the index cordon keeps), it must write exactly what its walk
//! writes, and a table of what it wrote must be made.
#![no_main]

use cordon::testing::git::index_file::{
    Change, Piece, cache_tree_root, edit, edit_pieces_at, entry_table, trailer,
};
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
    let walked = edit(data, 20, &changes);
    if let Ok(table) = entry_table(data, 20) {
        let jumped = edit_pieces_at(data, 20, &changes, Some(&table)).map(|pieces| {
            pieces
                .iter()
                .flat_map(|p: &Piece| p.bytes(data).to_vec())
                .collect::<Vec<u8>>()
        });
        match (&walked, &jumped) {
            (Ok(a), Ok(b)) => assert!(a == b, "the table's edit differs from the walk's"),
            (Err(_), Err(_)) => {}
            _ => panic!("the table's edit and the walk's disagree on whether it can be made"),
        }
    }
    if let Ok(mut edited) = walked {
        let hash = trailer(&edited, 20);
        edited.extend_from_slice(&hash);
        assert!(
            matches!(cache_tree_root(&edited, 20), Ok(None)),
            "an edited index does not read back with its cache tree invalid"
        );
        if entry_table(data, 20).is_ok() {
            assert!(
                entry_table(&edited, 20).is_ok(),
                "no table of what was edited from a tabled index"
            );
        }
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
