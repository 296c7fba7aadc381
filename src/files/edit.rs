//! edit_file's logic: exact string replacement, in order, all or nothing.
//!
//! Owns: matching `old_string` byte for byte against the running content (no normalisation of
//! quotes, whitespace, line endings or Unicode, in either direction), the uniqueness rule, and
//! the errors that tell the model what to fix. Does not own: reading or writing the file, the
//! diff, or lint.
//!
//! All or nothing falls out of the shape: the edits are applied to an in-memory copy, and the
//! caller writes only an `Ok` result. Every error message says that nothing was changed, because
//! a model that is unsure will otherwise re-apply edits that did land elsewhere.

use crate::error_kind::ErrorKind;
use serde::{Deserialize, Serialize};

use super::nearest::{mismatch_hint, nearest_lines};
use super::text::{NotText, as_text};

pub(crate) use super::nearest::Candidate;

/// How many candidate lines a miss reports.
const MAX_CANDIDATES: usize = 3;
/// How many match line numbers an ambiguity reports.
const MAX_LISTED_MATCHES: usize = 10;

/// One replacement, as the model sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit {
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// The content after all edits, and how many replacements were made in total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditOutcome {
    pub new_content: String,
    pub replacements: usize,
}

/// Why the edits were not applied. In every case nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    #[error("no edits were given, so nothing was changed; pass between 1 and 100 edits")]
    NoEdits,

    #[error(
        "the file is not text: {0}. Nothing was changed: edit_file only edits UTF-8 text; \
         replace the file whole with write_file, or use shell_exec for binary tools"
    )]
    NotText(NotText),

    #[error(
        "edits[{edit_index}]: old_string is empty, so nothing was changed (no edit of this call \
         was applied). To create or replace a whole file use write_file; to insert text, put \
         the neighbouring text in old_string and repeat it, together with the insertion, in \
         new_string"
    )]
    EmptyOldString { edit_index: usize },

    #[error(
        "edits[{edit_index}]: old_string and new_string are identical, so nothing was changed \
         (no edit of this call was applied); drop this edit or put the intended new text in \
         new_string"
    )]
    Unchanged { edit_index: usize },

    #[error("{}", no_match_message(*.edit_index, .nearest, .hint.as_deref()))]
    NoMatch {
        edit_index: usize,
        /// The most similar lines of the content this edit was matched against, best first.
        nearest: Vec<Candidate>,
        /// How old_string differs, when it differs only in something mechanical.
        hint: Option<String>,
    },

    #[error(
        "edits[{edit_index}] would make the file {size} bytes, more than the {limit}-byte limit \
         for a file the tools write, so nothing was changed (no edit of this call was applied). \
         Replace fewer occurrences per call, or restructure the content with shell_exec"
    )]
    TooLarge {
        edit_index: usize,
        /// The size the content would have had (computed, never built).
        size: u128,
        limit: usize,
    },

    #[error("{}", multiple_matches_message(*.edit_index, *.count, .line_numbers))]
    MultipleMatches {
        edit_index: usize,
        count: usize,
        /// Lines where matches start (the first 10).
        line_numbers: Vec<usize>,
    },
}

/// The SPEC error kind: a bad edit is something the model fixes in its arguments; a result
/// over the size limit is a resource limit.
impl From<&EditError> for ErrorKind {
    fn from(e: &EditError) -> Self {
        match e {
            EditError::TooLarge { .. } => ErrorKind::ResourceLimit,
            _ => ErrorKind::InvalidArgument,
        }
    }
}

impl EditError {
    /// The SPEC error kind, by name.
    pub fn kind_str(&self) -> &'static str {
        ErrorKind::from(self).as_str()
    }
}

/// Applies `edits` in order to `original`, each against the result of the previous ones.
///
/// Each `old_string` must occur exactly once in the running content, or at least once with
/// `replace_all` (then every non-overlapping occurrence is replaced, left to right). On any
/// error no result is produced, so the caller writes nothing.
pub fn apply_edits(original: &[u8], edits: &[Edit]) -> Result<EditOutcome, EditError> {
    apply_edits_within(original, edits, usize::MAX)
}

/// [`apply_edits`] with a bound on the content: an edit whose result would exceed `max_bytes`
/// is refused before its result is built (the size is computed from the match count), so one
/// call holds at most about twice `max_bytes` however many edits chain.
pub(crate) fn apply_edits_within(
    original: &[u8],
    edits: &[Edit],
    max_bytes: usize,
) -> Result<EditOutcome, EditError> {
    if edits.is_empty() {
        return Err(EditError::NoEdits);
    }
    let mut content = as_text(original).map_err(EditError::NotText)?.to_owned();
    let mut replacements = 0;
    for (edit_index, edit) in edits.iter().enumerate() {
        replacements += apply_one(&mut content, edit_index, edit, max_bytes)?;
    }
    Ok(EditOutcome {
        new_content: content,
        replacements,
    })
}

fn apply_one(
    content: &mut String,
    edit_index: usize,
    edit: &Edit,
    max_bytes: usize,
) -> Result<usize, EditError> {
    let old = edit.old_string.as_str();
    let new = edit.new_string.as_str();
    if old.is_empty() {
        return Err(EditError::EmptyOldString { edit_index });
    }
    if old == new {
        return Err(EditError::Unchanged { edit_index });
    }
    if edit.replace_all {
        // Non-overlapping occurrences are what gets replaced; one pass counts them, so the
        // size is known before the result is allocated, and a second builds it.
        let count = content.matches(old).count();
        if count == 0 {
            return Err(no_match(content, edit_index, old));
        }
        let size = fits(content, edit_index, count, old, new, max_bytes)?;
        let mut out = String::with_capacity(size);
        let mut last = 0;
        for (at, _) in content.match_indices(old) {
            out.push_str(&content[last..at]);
            out.push_str(new);
            last = at + old.len();
        }
        out.push_str(&content[last..]);
        *content = out;
        return Ok(count);
    }
    let matches = scan_matches(content, old);
    match matches.count {
        0 => Err(no_match(content, edit_index, old)),
        1 => {
            fits(content, edit_index, 1, old, new, max_bytes)?;
            let at = matches.first[0];
            content.replace_range(at..at + old.len(), new);
            Ok(1)
        }
        count => Err(EditError::MultipleMatches {
            edit_index,
            count,
            line_numbers: line_numbers(content, &matches.first),
        }),
    }
}

fn no_match(content: &str, edit_index: usize, old: &str) -> EditError {
    EditError::NoMatch {
        edit_index,
        nearest: nearest_lines(content, old, MAX_CANDIDATES),
        hint: mismatch_hint(content, old),
    }
}

/// The size `content` has after `count` replacements of `old` by `new`, computed (never
/// built); refused when over `max_bytes`. u128: no count × length can overflow it.
fn fits(
    content: &str,
    edit_index: usize,
    count: usize,
    old: &str,
    new: &str,
    max_bytes: usize,
) -> Result<usize, EditError> {
    let size = content.len() as u128 + count as u128 * new.len() as u128
        - count as u128 * old.len() as u128;
    if size > max_bytes as u128 {
        Err(EditError::TooLarge {
            edit_index,
            size,
            limit: max_bytes,
        })
    } else {
        Ok(size as usize)
    }
}

/// Occurrences of a needle: how many (overlapping ones included: "aa" occurs twice in "aaa",
/// and that is ambiguous even though `str::replace` would only see one) and where the first
/// few start. Only the first few are kept, so a one-letter needle in a large file costs no
/// memory.
struct Matches {
    count: usize,
    first: Vec<usize>,
}

fn scan_matches(haystack: &str, needle: &str) -> Matches {
    let step = needle.chars().next().map_or(1, char::len_utf8);
    let mut found = Matches {
        count: 0,
        first: Vec::new(),
    };
    let mut from = 0;
    while let Some(at) = haystack[from..].find(needle) {
        let at = from + at;
        found.count += 1;
        if found.first.len() < MAX_LISTED_MATCHES {
            found.first.push(at);
        }
        from = at + step;
    }
    found
}

/// 1-based line numbers of ascending byte offsets.
fn line_numbers(content: &str, offsets: &[usize]) -> Vec<usize> {
    let bytes = content.as_bytes();
    let (mut line, mut scanned) = (1, 0);
    offsets
        .iter()
        .map(|&at| {
            line += bytes[scanned..at].iter().filter(|&&b| b == b'\n').count();
            scanned = at;
            line
        })
        .collect()
}

fn nothing_changed(edit_index: usize) -> String {
    let mut s = String::from("nothing was changed (no edit of this call was applied)");
    if edit_index > 0 {
        s.push_str(&format!(
            "; line numbers refer to the content after edits[0..{edit_index}], which were \
             checked but not saved either"
        ));
    }
    s
}

fn no_match_message(edit_index: usize, nearest: &[Candidate], hint: Option<&str>) -> String {
    let mut msg = format!(
        "edits[{edit_index}]: old_string was not found in the file, so {}.",
        nothing_changed(edit_index)
    );
    if let Some(hint) = hint {
        msg.push(' ');
        msg.push_str(hint);
        msg.push('.');
    }
    if nearest.is_empty() {
        msg.push_str(" No line of the file resembles the start of old_string.");
    } else {
        let listed: Vec<String> = nearest
            .iter()
            .map(|c| format!("line {}: {:?}", c.line_no, c.text))
            .collect();
        msg.push_str(&format!(
            " Most similar lines (escaped, so tabs, \\r and invisible characters show): {}.",
            listed.join("; ")
        ));
    }
    msg.push_str(
        " Matching is exact, byte for byte: copy old_string from read_file output and try again.",
    );
    msg
}

fn multiple_matches_message(edit_index: usize, count: usize, line_numbers: &[usize]) -> String {
    let listed: Vec<String> = line_numbers.iter().map(usize::to_string).collect();
    let more = if count > line_numbers.len() {
        ", …"
    } else {
        ""
    };
    format!(
        "edits[{edit_index}]: old_string matches {count} times (starting at lines {}{more}), so \
         {}. Include more surrounding lines in old_string so that it matches only the place \
         you mean, or set replace_all=true to replace all {count}.",
        listed.join(", "),
        nothing_changed(edit_index)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(old: &str, new: &str) -> Edit {
        Edit {
            old_string: old.into(),
            new_string: new.into(),
            replace_all: false,
        }
    }

    fn apply(original: &str, edits: &[Edit]) -> Result<EditOutcome, EditError> {
        apply_edits(original.as_bytes(), edits)
    }

    #[test]
    fn single_exact_replacement() {
        let out = apply("a = 1\nb = 2\n", &[edit("b = 2", "b = 3")]).unwrap();
        assert_eq!(out.new_content, "a = 1\nb = 3\n");
        assert_eq!(out.replacements, 1);
    }

    #[test]
    fn crlf_is_preserved_and_not_normalised() {
        let original = "one\r\ntwo\r\nthree\r\n";
        let out = apply(original, &[edit("two\r\n", "2\r\n")]).unwrap();
        assert_eq!(out.new_content, "one\r\n2\r\nthree\r\n");
        // An LF old_string must not match CRLF content...
        let err = apply(original, &[edit("one\ntwo", "x")]).unwrap_err();
        assert!(matches!(err, EditError::NoMatch { .. }));
        // ...and the miss says why.
        assert!(err.to_string().contains("line endings"), "{err}");
        // Nor does a CRLF old_string match LF content.
        assert!(apply("one\ntwo\n", &[edit("one\r\ntwo", "x")]).is_err());
    }

    #[test]
    fn tabs_quotes_and_emoji_are_byte_for_byte() {
        let original = "\tlet s = \u{201c}hi\u{201d}; // \u{1f600} caf\u{e9}\n";
        let out = apply(
            original,
            &[edit("\u{201c}hi\u{201d}", "\u{2018}yo\u{2019}")],
        )
        .unwrap();
        assert_eq!(
            out.new_content,
            "\tlet s = \u{2018}yo\u{2019}; // \u{1f600} caf\u{e9}\n"
        );
        // Straight quotes do not match curly ones.
        let err = apply(original, &[edit("\"hi\"", "x")]).unwrap_err();
        assert!(err.to_string().contains("U+201C"), "{err}");
        // Spaces do not match a tab.
        assert!(apply(original, &[edit("    let", "x")]).is_err());
        // Decomposed e + combining acute does not match precomposed é.
        assert!(apply(original, &[edit("cafe\u{301}", "x")]).is_err());
        // Emoji replaced as a unit, bytes around untouched.
        let out = apply(original, &[edit("\u{1f600}", "\u{1f642}")]).unwrap();
        assert!(out.new_content.contains("// \u{1f642} caf\u{e9}"));
    }

    #[test]
    fn new_string_is_inserted_verbatim() {
        let out = apply("x\n", &[edit("x\n", "y\r\n\t\u{a0}z\n")]).unwrap();
        assert_eq!(out.new_content.as_bytes(), "y\r\n\t\u{a0}z\n".as_bytes());
    }

    #[test]
    fn no_match_reports_candidates_and_says_nothing_changed() {
        let original = "fn alpha() {}\nfn beta() {}\nfn gamma() {}\n";
        let err = apply(original, &[edit("fn betta() {}", "x")]).unwrap_err();
        let EditError::NoMatch {
            edit_index,
            nearest,
            ..
        } = &err
        else {
            panic!("expected NoMatch, got {err:?}");
        };
        assert_eq!(*edit_index, 0);
        assert_eq!(nearest[0].line_no, 2);
        assert_eq!(nearest[0].text, "fn beta() {}");
        let msg = err.to_string();
        assert!(msg.contains("nothing was changed"), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn two_matches_is_an_error_with_line_numbers() {
        let original = "x = 1\ny = 2\nx = 1\n";
        let err = apply(original, &[edit("x = 1", "x = 9")]).unwrap_err();
        assert_eq!(
            err,
            EditError::MultipleMatches {
                edit_index: 0,
                count: 2,
                line_numbers: vec![1, 3]
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("nothing was changed") && msg.contains("replace_all"));
    }

    #[test]
    fn overlapping_occurrences_are_ambiguous() {
        let err = apply("aaa", &[edit("aa", "b")]).unwrap_err();
        assert!(matches!(err, EditError::MultipleMatches { count: 2, .. }));
    }

    #[test]
    fn replace_all_replaces_every_occurrence() {
        let mut e = edit("x", "yy");
        e.replace_all = true;
        let out = apply("x1 x2\nx3\n", &[e]).unwrap();
        assert_eq!(out.new_content, "yy1 yy2\nyy3\n");
        assert_eq!(out.replacements, 3);
    }

    #[test]
    fn replace_all_with_a_single_occurrence_is_fine() {
        let mut e = edit("only", "one");
        e.replace_all = true;
        assert_eq!(apply("only\n", &[e]).unwrap().replacements, 1);
    }

    #[test]
    fn edits_apply_in_order_to_the_running_result() {
        let original = "name = old\n";
        let edits = [edit("old", "middle"), edit("name = middle", "name = new")];
        let out = apply(original, &edits).unwrap();
        assert_eq!(out.new_content, "name = new\n");
        assert_eq!(out.replacements, 2);
    }

    #[test]
    fn all_or_nothing_when_a_later_edit_fails() {
        let edits = [edit("a", "b"), edit("missing", "x")];
        let err = apply("a\n", &edits).unwrap_err();
        assert!(matches!(err, EditError::NoMatch { edit_index: 1, .. }));
        let msg = err.to_string();
        assert!(msg.starts_with("edits[1]:"), "{msg}");
        assert!(msg.contains("edits[0..1]"), "{msg}");
    }

    #[test]
    fn empty_and_identical_edits_are_refused() {
        let err = apply("a", &[edit("", "x")]).unwrap_err();
        assert_eq!(err, EditError::EmptyOldString { edit_index: 0 });
        assert!(err.to_string().contains("write_file"));
        let err = apply("a", &[edit("a", "a")]).unwrap_err();
        assert_eq!(err, EditError::Unchanged { edit_index: 0 });
        assert!(err.to_string().contains("nothing was changed"));
        assert_eq!(apply("a", &[]).unwrap_err(), EditError::NoEdits);
    }

    #[test]
    fn growth_past_the_limit_is_refused_before_it_is_built() {
        let mut grow = edit("ab", "abab");
        grow.replace_all = true;
        // 10 bytes -> 20 -> 40: the second edit would pass a 30-byte limit.
        let err = apply_edits_within(b"ababababab", &[grow.clone(), grow.clone()], 30).unwrap_err();
        assert_eq!(
            err,
            EditError::TooLarge {
                edit_index: 1,
                size: 40,
                limit: 30
            }
        );
        assert_eq!(err.kind_str(), "resource_limit");
        assert!(err.to_string().contains("nothing was changed"), "{err}");
        // Exactly at the limit is fine; a single replacement is checked too.
        assert_eq!(
            apply_edits_within(b"ababababab", &[grow], 20)
                .unwrap()
                .new_content
                .len(),
            20
        );
        let err = apply_edits_within(b"x", &[edit("x", "yyyy")], 3).unwrap_err();
        assert!(matches!(err, EditError::TooLarge { size: 4, .. }));
        // Shrinking never trips it, even when the file is already over the limit.
        assert!(apply_edits_within(b"xxxx", &[edit("xxxx", "x")], 2).is_ok());
    }

    #[test]
    fn many_matches_cost_no_memory_and_still_count() {
        let text = "a".repeat(100_000);
        let err = apply(&text, &[edit("a", "b")]).unwrap_err();
        match err {
            EditError::MultipleMatches {
                count,
                line_numbers,
                ..
            } => {
                assert_eq!(count, 100_000);
                assert_eq!(line_numbers.len(), MAX_LISTED_MATCHES);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn binary_content_is_refused() {
        let err = apply_edits(b"\x00\x01abc", &[edit("abc", "x")]).unwrap_err();
        assert!(matches!(err, EditError::NotText(NotText::NulByte { .. })));
        assert!(err.to_string().contains("Nothing was changed"));
    }

    #[test]
    fn every_error_says_nothing_changed() {
        let cases = [
            apply("a", &[]).unwrap_err(),
            apply_edits(b"\xff", &[edit("a", "b")]).unwrap_err(),
            apply("a", &[edit("", "b")]).unwrap_err(),
            apply("a", &[edit("a", "a")]).unwrap_err(),
            apply("a", &[edit("b", "c")]).unwrap_err(),
            apply("aa", &[edit("a", "c")]).unwrap_err(),
        ];
        for err in cases {
            let msg = err.to_string().to_lowercase();
            assert!(msg.contains("nothing was changed"), "{msg}");
            assert_eq!(err.kind_str(), "invalid_argument");
        }
    }

    #[test]
    fn line_numbers_of_offsets() {
        let s = "a\nb\nc\nb\n";
        assert_eq!(line_numbers(s, &[0, 2, 6]), vec![1, 2, 4]);
    }
}
