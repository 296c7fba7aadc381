//! Help for an edit whose `old_string` was not found: the file's most similar lines, and a hint
//! when the only difference is one that models commonly introduce (line endings, curly quotes
//! and other typography, whitespace, double escaping).
//!
//! Owns: similarity scoring and the "would match if …" checks. Does not own matching itself:
//! edits are always applied by exact byte comparison (see `edit`); nothing here ever changes
//! what matches, it only explains a miss.

use serde::Serialize;

/// Lines compared per candidate: enough to rank, bounded so a huge line costs little.
const MAX_CHARS_COMPARED: usize = 400;
/// Characters of a candidate line returned to the model.
const MAX_CANDIDATE_CHARS: usize = 200;
/// Candidates below this similarity are noise, not help.
const MIN_SCORE: f64 = 0.35;
/// Above this size, skip the "would match if" checks: each one folds the whole file.
const MAX_HINT_BYTES: usize = 8 * 1024 * 1024;

/// A line of the file that resembles the start of an `old_string` that did not match.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// 1-based line number in the content the edit was matched against.
    pub line_no: usize,
    /// The line as it is in the file, without its `\n` (a `\r` is kept), cut to 200 characters.
    pub text: String,
}

/// Up to `max` lines of `content` most similar to the first non-blank line of `needle`, best
/// first. For a multi-line `needle`, the lines that follow each candidate count too.
pub(crate) fn nearest_lines(content: &str, needle: &str, max: usize) -> Vec<Candidate> {
    let needle_lines: Vec<&str> = needle.split('\n').collect();
    let Some(anchor_at) = needle_lines.iter().position(|l| !l.trim().is_empty()) else {
        return Vec::new();
    };
    let needle_keys: Vec<Vec<(char, char)>> = needle_lines[anchor_at..]
        .iter()
        .take(30)
        .map(|l| bigrams(&comparison_key(l)))
        .collect();
    let file_lines: Vec<&str> = content.split_inclusive('\n').collect();

    // Rank every line against the anchor, then refine the best few with the following lines.
    let mut scored: Vec<(f64, usize)> = file_lines
        .iter()
        .enumerate()
        .map(|(i, line)| (dice(&bigrams(&comparison_key(line)), &needle_keys[0]), i))
        .filter(|(score, _)| *score >= MIN_SCORE)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.truncate(max * 4);
    if needle_keys.len() > 1 {
        for (score, i) in &mut scored {
            let following: Vec<f64> = needle_keys
                .iter()
                .enumerate()
                .skip(1)
                .map(|(j, key)| {
                    file_lines
                        .get(*i + j)
                        .map_or(0.0, |l| dice(&bigrams(&comparison_key(l)), key))
                })
                .collect();
            let rest = following.iter().sum::<f64>() / following.len() as f64;
            *score = (*score + rest) / 2.0;
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    }
    scored
        .into_iter()
        .take(max)
        .map(|(_, i)| Candidate {
            line_no: i + 1,
            text: shorten(file_lines[i].strip_suffix('\n').unwrap_or(file_lines[i])),
        })
        .collect()
}

/// A sentence saying how `needle` differs from the file when the difference is of a kind the
/// model can fix mechanically, with the line(s) where it would then match.
pub(crate) fn mismatch_hint(content: &str, needle: &str) -> Option<String> {
    if content.len() > MAX_HINT_BYTES {
        return None;
    }
    line_ending_hint(content, needle)
        .or_else(|| typography_hint(content, needle))
        .or_else(|| whitespace_hint(content, needle))
        .or_else(|| escaping_hint(content, needle))
}

fn line_ending_hint(content: &str, needle: &str) -> Option<String> {
    let opts = Fold {
        line_endings: true,
        ..Fold::NONE
    };
    let lines = folded_match_lines(content, needle, opts)?;
    let (file_crlf, needle_crlf) = (content.contains("\r\n"), needle.contains("\r\n"));
    let detail = match (file_crlf, needle_crlf) {
        (true, false) => {
            "the file uses CRLF (\\r\\n) line endings but old_string uses LF (\\n); end the lines \
             of old_string (and new_string) with \\r\\n"
        }
        (false, true) => {
            "old_string uses CRLF (\\r\\n) line endings but the file uses LF (\\n); end the lines \
             of old_string (and new_string) with \\n"
        }
        _ => "the file mixes CRLF (\\r\\n) and LF (\\n) line endings; copy them exactly",
    };
    Some(format!(
        "It differs only in line endings and would match at {}: {detail}",
        describe_lines(&lines)
    ))
}

fn typography_hint(content: &str, needle: &str) -> Option<String> {
    let opts = Fold {
        line_endings: true,
        typography: true,
        ..Fold::NONE
    };
    let lines = folded_match_lines(content, needle, opts)?;
    let file_region: String = content
        .split_inclusive('\n')
        .skip(lines[0] - 1)
        .take(needle.split('\n').count())
        .collect();
    let in_file = typographic_chars(&file_region);
    let in_needle = typographic_chars(needle);
    let mut detail = String::new();
    if !in_file.is_empty() {
        detail.push_str(&format!(" the file has {in_file}"));
    }
    if !in_needle.is_empty() {
        if !detail.is_empty() {
            detail.push_str(" and");
        }
        detail.push_str(&format!(" old_string has {in_needle}"));
    }
    Some(format!(
        "It differs only in quote, dash or space characters and would match at {}:{detail}; \
         copy those characters exactly as the file has them",
        describe_lines(&lines)
    ))
}

fn whitespace_hint(content: &str, needle: &str) -> Option<String> {
    let opts = Fold {
        whitespace: true,
        ..Fold::NONE
    };
    let lines = folded_match_lines(content, needle, opts).or_else(|| {
        folded_match_lines(
            content,
            needle,
            Fold {
                whitespace: true,
                typography: true,
                ..Fold::NONE
            },
        )
    })?;
    Some(format!(
        "It would match at {} if whitespace were ignored: indentation, tabs versus spaces, \
         trailing spaces or line breaks differ; copy the exact text, with its whitespace, from \
         read_file",
        describe_lines(&lines)
    ))
}

fn escaping_hint(content: &str, needle: &str) -> Option<String> {
    if !["\\n", "\\t", "\\\""].iter().any(|e| needle.contains(e)) {
        return None;
    }
    let unescaped = needle
        .replace("\\r\\n", "\r\n")
        .replace("\\n", "\n")
        .replace("\\t", "\t")
        .replace("\\\"", "\"");
    let lines = folded_match_lines(content, &unescaped, Fold::NONE)?;
    Some(format!(
        "old_string contains backslash sequences such as `\\n` where the file has real line \
         breaks, tabs or quotes (it looks escaped twice); with them unescaped it would match at \
         {}",
        describe_lines(&lines)
    ))
}

/// What a fold ignores. Folding maps both sides to a looser form; a match there means the
/// exact strings differ only in what was ignored.
#[derive(Debug, Clone, Copy)]
struct Fold {
    line_endings: bool,
    typography: bool,
    whitespace: bool,
}

impl Fold {
    const NONE: Fold = Fold {
        line_endings: false,
        typography: false,
        whitespace: false,
    };
}

/// Folded text plus the folded offset where each original line starts, to map a match back to a
/// line number without keeping a per-byte map of a possibly large file.
struct Folded {
    text: String,
    line_starts: Vec<usize>,
}

fn fold(s: &str, opts: Fold) -> Folded {
    let mut text = String::with_capacity(s.len());
    let mut line_starts = vec![0];
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let skip_cr = opts.line_endings && c == '\r' && chars.peek() == Some(&'\n');
        let skip_ws = opts.whitespace && c.is_whitespace();
        if !skip_cr && !skip_ws {
            match opts.typography.then(|| typographic_fold(c)).flatten() {
                Some(replacement) => text.push_str(replacement),
                None => text.push(c),
            }
        }
        if c == '\n' {
            line_starts.push(text.len());
        }
    }
    Folded { text, line_starts }
}

/// 1-based lines where `needle` matches `content` once both are folded (at most 5), or None.
fn folded_match_lines(content: &str, needle: &str, opts: Fold) -> Option<Vec<usize>> {
    let folded_needle = fold(needle, opts).text;
    if folded_needle.trim().is_empty() {
        return None;
    }
    let folded = fold(content, opts);
    let lines: Vec<usize> = folded
        .text
        .match_indices(folded_needle.as_str())
        .take(5)
        .map(|(at, _)| folded.line_starts.partition_point(|&start| start <= at))
        .collect();
    (!lines.is_empty()).then_some(lines)
}

/// The ASCII stand-in for a character that models often swap in or out, if it is one.
fn typographic_fold(c: char) -> Option<&'static str> {
    Some(match c {
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{2032}' | '\u{00B4}' => "'",
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{2033}' | '\u{00AB}'
        | '\u{00BB}' => "\"",
        '\u{2010}'..='\u{2015}' | '\u{2212}' => "-",
        '\u{2026}' => "...",
        '\u{00A0}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => " ",
        '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{2060}' | '\u{FEFF}' => "",
        _ => return None,
    })
}

/// The distinct typographic characters in `s`, written so invisible ones can be seen.
fn typographic_chars(s: &str) -> String {
    let mut seen: Vec<char> = s
        .chars()
        .filter(|&c| typographic_fold(c).is_some())
        .collect();
    seen.sort_unstable();
    seen.dedup();
    seen.iter()
        .map(|c| format!("`{}` (U+{:04X})", c, u32::from(*c)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe_lines(lines: &[usize]) -> String {
    match lines {
        [one] => format!("line {one}"),
        _ => {
            let list: Vec<String> = lines.iter().map(usize::to_string).collect();
            format!("lines {}", list.join(", "))
        }
    }
}

/// What similarity is judged on: typography folded, whitespace runs collapsed, ends trimmed,
/// and bounded in length.
fn comparison_key(line: &str) -> String {
    let mut key = String::new();
    let mut pending_space = false;
    for c in line.trim().chars().take(MAX_CHARS_COMPARED) {
        let c = match typographic_fold(c) {
            Some(s) => s.chars().next().unwrap_or(' '),
            None => c,
        };
        if c.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space && !key.is_empty() {
            key.push(' ');
        }
        pending_space = false;
        key.push(c);
    }
    key
}

/// Sorted character bigrams; a one-character string is its own bigram so it can still match.
fn bigrams(s: &str) -> Vec<(char, char)> {
    let chars: Vec<char> = s.chars().collect();
    let mut grams: Vec<(char, char)> = match chars.len() {
        0 => Vec::new(),
        1 => vec![(chars[0], '\0')],
        _ => chars.windows(2).map(|w| (w[0], w[1])).collect(),
    };
    grams.sort_unstable();
    grams
}

/// Sørensen–Dice coefficient of two sorted bigram multisets: 1.0 equal, 0.0 nothing shared.
fn dice(a: &[(char, char)], b: &[(char, char)]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (mut i, mut j, mut shared) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    2.0 * shared as f64 / (a.len() + b.len()) as f64
}

fn shorten(line: &str) -> String {
    match line.char_indices().nth(MAX_CANDIDATE_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "fn main() {\n    let greeting = \"hello\";\n    println!(\"{greeting}\");\n}\n\nfn helper(x: u32) -> u32 {\n    x + 1\n}\n";

    #[test]
    fn nearest_finds_the_similar_line_with_its_number() {
        let found = nearest_lines(FILE, "    let greting = \"hello\";\n", 3);
        assert_eq!(found[0].line_no, 2);
        assert_eq!(found[0].text, "    let greeting = \"hello\";");
    }

    #[test]
    fn nearest_uses_following_lines_to_rank() {
        let content = "x = 1\ny = 2\n\nx = 1\ny = 3\n";
        let found = nearest_lines(content, "x = 1\ny = 3\n", 2);
        assert_eq!(found[0].line_no, 4, "{found:?}");
    }

    #[test]
    fn nothing_similar_gives_no_candidates() {
        assert!(nearest_lines(FILE, "zzzzqqqq", 3).is_empty());
        assert!(nearest_lines(FILE, "   \n  ", 3).is_empty());
    }

    #[test]
    fn candidate_text_keeps_cr_and_is_shortened() {
        let long = format!("{}\r\n", "a".repeat(500));
        let found = nearest_lines(&long, &format!("{}b", "a".repeat(499)), 1);
        assert!(found[0].text.ends_with('…'));
        let found = nearest_lines("abc def\r\n", "abc def", 1);
        assert_eq!(found[0].text, "abc def\r");
    }

    #[test]
    fn hint_line_endings_crlf_file() {
        let hint = mismatch_hint("a\r\nb\r\nc\r\n", "b\nc\n").unwrap();
        assert!(
            hint.contains("line endings") && hint.contains("line 2"),
            "{hint}"
        );
        assert!(hint.contains("file uses CRLF"), "{hint}");
    }

    #[test]
    fn hint_line_endings_crlf_needle() {
        let hint = mismatch_hint("a\nb\n", "a\r\nb").unwrap();
        assert!(hint.contains("old_string uses CRLF"), "{hint}");
    }

    #[test]
    fn hint_curly_quotes_names_the_characters() {
        let hint = mismatch_hint("x\nit\u{2019}s \u{201c}done\u{201d}\n", "it's \"done\"").unwrap();
        assert!(hint.contains("quote") && hint.contains("line 2"), "{hint}");
        assert!(hint.contains("U+2019"), "{hint}");
    }

    #[test]
    fn hint_whitespace() {
        let hint = mismatch_hint("if x:\n\tpass\n", "if x:\n    pass").unwrap();
        assert!(
            hint.contains("whitespace") && hint.contains("line 1"),
            "{hint}"
        );
    }

    #[test]
    fn hint_double_escaped() {
        let hint = mismatch_hint("a\nb\n", "a\\nb").unwrap();
        assert!(hint.contains("escaped twice"), "{hint}");
    }

    #[test]
    fn no_hint_for_a_real_difference() {
        assert_eq!(mismatch_hint(FILE, "let farewell"), None);
    }

    #[test]
    fn dice_basics() {
        let a = bigrams("hello");
        assert_eq!(dice(&a, &a), 1.0);
        assert_eq!(dice(&a, &bigrams("zzz")), 0.0);
        assert!(dice(&a, &bigrams("help")) > 0.3);
    }
}
