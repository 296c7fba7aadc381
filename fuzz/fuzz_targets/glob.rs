//! Fuzzes the one `*` glob: it agrees with a plain reference matcher and never panics, on any
//! pattern and text (mostly drawn from a small alphabet, so matches are common).
#![no_main]

use libfuzzer_sys::fuzz_target;

/// The obvious dynamic program over characters: `can[i][j]` is whether the first `i` pattern
/// characters match the first `j` text characters. Quadratic, so only for small inputs.
fn reference(pattern: &[char], text: &[char]) -> bool {
    let mut can = vec![vec![false; text.len() + 1]; pattern.len() + 1];
    can[0][0] = true;
    for i in 1..=pattern.len() {
        for j in 0..=text.len() {
            can[i][j] = if pattern[i - 1] == '*' {
                can[i - 1][j] || (j > 0 && can[i][j - 1])
            } else {
                j > 0 && can[i - 1][j - 1] && pattern[i - 1] == text[j - 1]
            };
        }
    }
    can[pattern.len()][text.len()]
}

/// Bytes as text: below 0x80 a small alphabet (star, slash, two letters, a two-byte letter),
/// so stars meet text they can match; otherwise the input's own UTF-8 characters.
fn text_of(bytes: &[u8], small: bool) -> Option<String> {
    if small {
        const ALPHABET: [char; 5] = ['*', 'a', 'b', '/', 'é'];
        Some(bytes.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()]).collect())
    } else {
        std::str::from_utf8(bytes).ok().map(str::to_owned)
    }
}

fuzz_target!(|input: (bool, Vec<u8>, Vec<u8>)| {
    let (small, pattern, text) = input;
    let (Some(pattern), Some(text)) = (text_of(&pattern, small), text_of(&text, small)) else {
        return;
    };
    let got = cordon::testing::glob::matches(&pattern, &text);
    if pattern.len() <= 64 && text.len() <= 256 {
        let p: Vec<char> = pattern.chars().collect();
        let t: Vec<char> = text.chars().collect();
        assert_eq!(got, reference(&p, &t), "pattern {pattern:?} text {text:?}");
    }
    // Consequences of the grammar that hold at any size.
    if !pattern.contains('*') {
        assert_eq!(got, pattern == text);
    }
    if got {
        let literal: usize = pattern.split('*').map(str::len).sum();
        assert!(literal <= text.len(), "{pattern:?} matched the shorter {text:?}");
    }
});
