//! Cutting text to a number of characters, one way for every stage: what goes back to a model
//! or into a log is bounded, and always cut on a character boundary.
//!
//! Also counts characters between byte offsets (for line/column positions, whether a linter's
//! or the parser's), tolerant of offsets a tool got wrong.
//!
//! Owns the cut and its two markers (`…` alone, or `…(N chars)` with the full length). Does
//! not own how long anything may be (each caller's limit says why) nor head-and-tail cutting
//! of command output (`shape`).

use std::borrow::Cow;

/// Number of characters in `text[start..end]`, tolerant of indices that are past the end or
/// not on a character boundary (a tool's output must never make us panic).
pub(crate) fn chars_between(text: &str, start: usize, end: usize) -> usize {
    let end = end.min(text.len());
    let start = start.min(end);
    let mut lo = start;
    while !text.is_char_boundary(lo) {
        lo -= 1;
    }
    let mut hi = end;
    while !text.is_char_boundary(hi) {
        hi -= 1;
    }
    text.get(lo..hi).map_or(0, |s| s.chars().count())
}

/// Saturating conversion for positions: a file with more than 4 billion lines is not a case
/// worth an error path.
pub(crate) fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The first `max` characters of `text`, or all of it when it is no longer.
pub(crate) fn at_most_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}

/// `text`, or its first `max` characters followed by `…` when it is longer.
pub(crate) fn ellipsized(text: &str, max: usize) -> Cow<'_, str> {
    let kept = at_most_chars(text, max);
    if kept.len() == text.len() {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(format!("{kept}…"))
    }
}

/// `text`, or its first `max` characters followed by `…(N chars)`, N being its full length:
/// for an argument repeated back, where the model should see how much it sent.
pub(crate) fn shortened(text: &str, max: usize) -> Cow<'_, str> {
    let kept = at_most_chars(text, max);
    if kept.len() == text.len() {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(format!("{kept}…({} chars)", text.chars().count()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_count_characters_not_bytes() {
        assert_eq!(at_most_chars("héllo", 2), "hé");
        assert_eq!(at_most_chars("hé", 2), "hé");
        assert_eq!(at_most_chars("", 0), "");
        assert_eq!(ellipsized("héllo", 2), "hé…");
        assert_eq!(ellipsized("hé", 2), "hé");
        assert_eq!(shortened("héllo", 2), "hé…(5 chars)");
        assert!(matches!(shortened("hé", 2), Cow::Borrowed(_)));
    }
}
