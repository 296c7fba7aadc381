//! Fuzzes line paging: windows are consistent and binary input is refused, never mangled.
#![no_main]

use cordon::testing::files::read_lines;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (Vec<u8>, u16, u16)| {
    let (bytes, offset, limit) = input;
    if let Ok(w) = read_lines(&bytes, offset as usize, limit as usize) {
        assert!(w.end_line <= w.total_lines);
        assert!(w.start_line <= w.end_line + 1);
        assert!(!bytes.contains(&0), "binary input accepted");
    }
});
