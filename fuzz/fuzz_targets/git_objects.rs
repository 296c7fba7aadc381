//! Fuzzes what the server reads itself out of the shadow's object store for the in-process
//! git import: a loose object file (zlib, header, size), and the strict subset of trees and
//! commits the server vouches for. Any bytes give an answer, never a panic or an allocation
//! beyond the object bound; a tree accepted is exactly its entries written back, in git's
//! order, with no name twice; a commit accepted names a tree.
#![no_main]

use cordon::testing::git::loose::{MAX_OBJECT, decode};
use cordon::testing::git::vet::{commit, plain_name, tree, tree_order};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((_, content)) = decode(data) {
        assert!(content.len() as u64 <= MAX_OBJECT);
    }
    let hash = gix_hash::Kind::Sha1;
    if let Some(entries) = tree(data, hash) {
        let mut written = Vec::new();
        for e in &entries {
            let mode = format!("{:o}", e.mode.bits());
            written.extend_from_slice(mode.as_bytes());
            written.push(b' ');
            written.extend_from_slice(&e.name);
            written.push(0);
            written.extend_from_slice(e.id.as_bytes());
        }
        assert_eq!(written, data, "an accepted tree is its entries written back");
        for pair in entries.windows(2) {
            assert!(tree_order(&pair[0].name, pair[0].mode, &pair[1].name, pair[1].mode).is_lt());
        }
        let mut names: Vec<&[u8]> = entries.iter().map(|e| e.name.as_slice()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), entries.len(), "no name twice");
        for e in &entries {
            if plain_name(&e.name) {
                assert!(!e.name.to_ascii_lowercase().starts_with(b".git"));
            }
        }
    }
    if let Some(c) = commit(data, hash) {
        assert!(data.starts_with(format!("tree {}\n", c.tree).as_bytes()));
    }
});
