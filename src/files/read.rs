//! read_file's logic: a window of lines from text content, bounded so that one call cannot
//! flood the model's context.
//!
//! Owns: line numbering (lines end at `\n`; a final `\n` does not start another line), paging
//! by `offset`/`limit`, the per-line and per-response caps, and the binary refusal. Does not own:
//! loading the bytes (the workspace does) or formatting with line numbers for display.
//!
//! Content is returned byte for byte, line endings included, so that text copied from it can be
//! used as an edit_file `old_string` unchanged; only lines over the length cap are altered, and
//! those are listed in `cut_lines`.

use crate::error_kind::ErrorKind;
use serde::Serialize;

use super::text::{NotText, as_text};

/// Default number of lines per call (SPEC `limit` default).
pub(crate) const DEFAULT_LIMIT: usize = 2000;

/// Caps that keep one response small enough for a model's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadLimits {
    /// Characters kept from a single line; a minified file can have megabyte-long lines.
    pub max_line_chars: usize,
    /// Bytes of `content` per call; reading stops at the line that would exceed it.
    pub max_content_bytes: usize,
    /// What `content` may cost once escaped as a JSON string (a control character takes six
    /// bytes there): reading also stops at the line that would exceed this, so a file of
    /// control characters cannot make a result six times its budget on the wire.
    pub max_escaped_bytes: usize,
}

/// read_file's default byte budget (policy `files.read_budget_kb`), well under what hosts
/// accept in one tool result (Claude Code cuts at 25,000 tokens).
pub(crate) const DEFAULT_BUDGET_BYTES: usize = 48 * 1024;

/// The escaped-size bound: with the content in the structured result and the text block, two
/// of these plus framing stay under the 1 MiB a result may take.
pub(crate) const MAX_ESCAPED_BYTES: usize = 384 * 1024;

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            max_line_chars: 2000,
            max_content_bytes: DEFAULT_BUDGET_BYTES,
            max_escaped_bytes: MAX_ESCAPED_BYTES,
        }
    }
}

/// Bytes `text` takes as the inside of a JSON string (serde_json's escaping).
pub(crate) fn json_escaped_len(text: &str) -> usize {
    text.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// A window of lines. Matches the SPEC output `{content, start_line, end_line, total_lines,
/// truncated}` plus two fields that explain a truncation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadOutcome {
    /// The lines, exactly as in the file (line endings included), except lines in `cut_lines`.
    pub content: String,
    /// 1-based number of the first line returned.
    pub start_line: usize,
    /// 1-based number of the last line returned (`start_line - 1` when nothing was returned,
    /// which only happens for an empty file).
    pub end_line: usize,
    /// Lines in the whole file.
    pub total_lines: usize,
    /// True when the content is not everything from `start_line` to the end of the file: lines
    /// remain after `end_line`, or some lines were cut (see `cut_lines`).
    pub truncated: bool,
    /// Line numbers whose text was cut to `max_line_chars`; each is marked in `content`.
    pub cut_lines: Vec<usize>,
    /// A sentence for the model saying why the result is partial and how to get the rest.
    pub note: Option<String>,
}

/// Why a window could not be returned. Messages end with what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error(
        "the file is not text: {0}. read_file only returns UTF-8 text; inspect the file with shell_exec, e.g. `file PATH` or `xxd PATH | head -n 20`"
    )]
    NotText(#[from] NotText),
    #[error("offset must be at least 1 (line numbers start at 1)")]
    ZeroOffset,
    #[error("limit must be at least 1 line")]
    ZeroLimit,
    #[error(
        "offset {offset} is past the end of the file, which has {total_lines} lines; use an offset from 1 to {total_lines}"
    )]
    OffsetPastEnd { offset: usize, total_lines: usize },
}

/// The SPEC error kind: every case is fixed by a different argument (or a different tool).
impl From<&ReadError> for ErrorKind {
    fn from(_: &ReadError) -> Self {
        ErrorKind::InvalidArgument
    }
}

impl ReadError {
    /// The SPEC error kind, by name.
    pub fn kind_str(&self) -> &'static str {
        ErrorKind::from(self).as_str()
    }
}

/// [`read_lines_with`] with the default [`ReadLimits`].
pub fn read_lines(bytes: &[u8], offset: usize, limit: usize) -> Result<ReadOutcome, ReadError> {
    read_lines_with(bytes, offset, limit, &ReadLimits::default())
}

/// Returns up to `limit` lines starting at 1-based line `offset`.
pub(crate) fn read_lines_with(
    bytes: &[u8],
    offset: usize,
    limit: usize,
    limits: &ReadLimits,
) -> Result<ReadOutcome, ReadError> {
    let text = as_text(bytes)?;
    if offset == 0 {
        return Err(ReadError::ZeroOffset);
    }
    if limit == 0 {
        return Err(ReadError::ZeroLimit);
    }
    let total_lines = text.split_inclusive('\n').count();
    if total_lines == 0 && offset == 1 {
        return Ok(ReadOutcome {
            content: String::new(),
            start_line: 1,
            end_line: 0,
            total_lines: 0,
            truncated: false,
            cut_lines: Vec::new(),
            note: Some("the file is empty".to_owned()),
        });
    }
    if offset > total_lines {
        return Err(ReadError::OffsetPastEnd {
            offset,
            total_lines,
        });
    }

    let mut content = String::new();
    let mut cut_lines = Vec::new();
    let mut end_line = offset - 1;
    let mut hit_byte_cap = false;
    let mut escaped = 0usize;
    for (line_no, line) in (offset..).zip(text.split_inclusive('\n').skip(offset - 1).take(limit)) {
        let (piece, was_cut) = cap_line(line, limits.max_line_chars);
        let piece_escaped = json_escaped_len(&piece);
        // Always return at least one line, or a huge line could make no progress possible.
        if line_no > offset
            && (content.len() + piece.len() > limits.max_content_bytes
                || escaped + piece_escaped > limits.max_escaped_bytes)
        {
            hit_byte_cap = true;
            break;
        }
        escaped += piece_escaped;
        content.push_str(&piece);
        if was_cut {
            cut_lines.push(line_no);
        }
        end_line = line_no;
    }

    let more_after = end_line < total_lines;
    let note = explain(
        offset,
        end_line,
        total_lines,
        more_after,
        hit_byte_cap,
        &cut_lines,
        limits,
    );
    Ok(ReadOutcome {
        content,
        start_line: offset,
        end_line,
        total_lines,
        truncated: more_after || !cut_lines.is_empty(),
        cut_lines,
        note,
    })
}

/// Cuts a line to `max_chars` characters, keeping its line ending and saying how much is gone.
fn cap_line(line: &str, max_chars: usize) -> (std::borrow::Cow<'_, str>, bool) {
    let Some((cut_at, _)) = line.char_indices().nth(max_chars) else {
        return (line.into(), false);
    };
    let body_end = line
        .strip_suffix("\r\n")
        .or_else(|| line.strip_suffix('\n'))
        .map_or(line.len(), str::len);
    if cut_at >= body_end {
        // Only the line ending lies past the cap.
        return (line.into(), false);
    }
    let hidden = line[cut_at..body_end].chars().count();
    let ending = &line[body_end..];
    let marker = format!(" … [cordon: {hidden} more characters on this line not shown]");
    (format!("{}{marker}{ending}", &line[..cut_at]).into(), true)
}

fn explain(
    offset: usize,
    end_line: usize,
    total_lines: usize,
    more_after: bool,
    hit_byte_cap: bool,
    cut_lines: &[usize],
    limits: &ReadLimits,
) -> Option<String> {
    let mut parts = Vec::new();
    if more_after {
        let why = if hit_byte_cap {
            format!(
                " (stopped early to keep the response under {} KiB)",
                limits.max_content_bytes / 1024
            )
        } else {
            String::new()
        };
        parts.push(format!(
            "showing lines {offset}-{end_line} of {total_lines}{why}; call read_file with \
             offset={} to continue",
            end_line + 1
        ));
    }
    if !cut_lines.is_empty() {
        let shown: Vec<String> = cut_lines.iter().take(10).map(|n| n.to_string()).collect();
        let more = if cut_lines.len() > 10 { ", …" } else { "" };
        parts.push(format!(
            "line(s) {}{more} are longer than {} characters and were cut (marked `[cordon: … not \
             shown]`); see them whole with shell_exec, e.g. `sed -n 'Np' PATH | cut -c 2000-6000`",
            shown.join(", "),
            limits.max_line_chars
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn whole_small_file() {
        let out = read_lines(b"a\nb\nc\n", 1, DEFAULT_LIMIT).unwrap();
        assert_eq!(out.content, "a\nb\nc\n");
        assert_eq!((out.start_line, out.end_line, out.total_lines), (1, 3, 3));
        assert!(!out.truncated);
        assert_eq!(out.note, None);
    }

    #[test]
    fn last_line_without_newline_counts() {
        let out = read_lines(b"a\nb", 1, 10).unwrap();
        assert_eq!(out.total_lines, 2);
        assert_eq!(out.content, "a\nb");
    }

    #[test]
    fn paging_reports_where_to_continue() {
        let text = lines(10);
        let out = read_lines(text.as_bytes(), 3, 4).unwrap();
        assert_eq!(out.content, "line 3\nline 4\nline 5\nline 6\n");
        assert_eq!((out.start_line, out.end_line, out.total_lines), (3, 6, 10));
        assert!(out.truncated);
        assert!(out.note.unwrap().contains("offset=7"));

        let tail = read_lines(text.as_bytes(), 7, 100).unwrap();
        assert_eq!((tail.start_line, tail.end_line), (7, 10));
        assert!(!tail.truncated);
    }

    #[test]
    fn crlf_and_tabs_come_back_byte_for_byte() {
        let text = "a\r\n\tb \r\n\u{201c}c\u{201d}\r\n";
        let out = read_lines(text.as_bytes(), 1, 10).unwrap();
        assert_eq!(out.content, text);
        assert_eq!(out.total_lines, 3);
    }

    #[test]
    fn offset_past_end_states_total() {
        let err = read_lines(b"a\nb\n", 5, 10).unwrap_err();
        assert_eq!(
            err,
            ReadError::OffsetPastEnd {
                offset: 5,
                total_lines: 2
            }
        );
        assert!(err.to_string().contains("has 2 lines"), "{err}");
    }

    #[test]
    fn zero_offset_and_limit_are_refused() {
        assert_eq!(read_lines(b"a", 0, 1), Err(ReadError::ZeroOffset));
        assert_eq!(read_lines(b"a", 1, 0), Err(ReadError::ZeroLimit));
    }

    #[test]
    fn empty_file_is_fine_at_offset_one_only() {
        let out = read_lines(b"", 1, 10).unwrap();
        assert_eq!((out.start_line, out.end_line, out.total_lines), (1, 0, 0));
        assert_eq!(out.content, "");
        assert!(!out.truncated);
        assert!(matches!(
            read_lines(b"", 2, 10),
            Err(ReadError::OffsetPastEnd { .. })
        ));
    }

    #[test]
    fn binary_is_refused_with_a_pointer_to_shell_tools() {
        let err = read_lines(b"PK\x03\x04\x00\x00", 1, 10).unwrap_err();
        assert!(matches!(err, ReadError::NotText(NotText::NulByte { .. })));
        let msg = err.to_string();
        assert!(msg.contains("binary") && msg.contains("xxd"), "{msg}");
        let err = read_lines(b"caf\xe9\n", 1, 10).unwrap_err();
        assert!(err.to_string().contains("not valid UTF-8"), "{err}");
    }

    #[test]
    fn long_lines_are_cut_and_listed() {
        let limits = ReadLimits {
            max_line_chars: 5,
            max_content_bytes: 1 << 20,
            ..ReadLimits::default()
        };
        let text = "short\r\n\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\r\nok\n";
        let out = read_lines_with(text.as_bytes(), 1, 10, &limits).unwrap();
        assert_eq!(out.cut_lines, vec![2]);
        assert!(out.truncated);
        let second = out.content.split_inclusive('\n').nth(1).unwrap();
        assert!(second.starts_with("\u{e9}\u{e9}\u{e9}\u{e9}\u{e9} … [cordon: 2 more"));
        assert!(second.ends_with("\r\n"), "line ending kept: {second:?}");
        // Exactly at the cap is not cut (the line ending does not count).
        assert!(out.content.starts_with("short\r\n"));
        assert!(out.note.unwrap().contains("line(s) 2"));
    }

    #[test]
    fn response_byte_cap_stops_at_a_line_boundary() {
        let limits = ReadLimits {
            max_line_chars: 2000,
            max_content_bytes: 20,
            ..ReadLimits::default()
        };
        let text = lines(10); // "line N\n" = 7 bytes each
        let out = read_lines_with(text.as_bytes(), 1, 100, &limits).unwrap();
        assert_eq!(out.end_line, 2);
        assert_eq!(out.content, "line 1\nline 2\n");
        assert!(out.truncated);
        let note = out.note.unwrap();
        assert!(note.contains("offset=3") && note.contains("KiB"), "{note}");
    }

    #[test]
    fn control_characters_count_at_their_escaped_size() {
        let limits = ReadLimits {
            max_line_chars: 2000,
            max_content_bytes: 1 << 20,
            max_escaped_bytes: 100,
        };
        // 10 lines of 10 \x01 + newline: 11 raw bytes, 62 escaped bytes each.
        let text: String = (0..10).map(|_| "\u{1}".repeat(10) + "\n").collect();
        let out = read_lines_with(text.as_bytes(), 1, 100, &limits).unwrap();
        assert_eq!(out.end_line, 1);
        assert!(out.note.unwrap().contains("offset=2"));
        assert_eq!(json_escaped_len("a\"\\\n\u{1}"), 1 + 2 + 2 + 2 + 6);
        let json = serde_json::to_string("a\"\\\n\u{1}\u{7f}é").unwrap();
        assert_eq!(json.len() - 2, json_escaped_len("a\"\\\n\u{1}\u{7f}é"));
    }

    #[test]
    fn one_line_is_always_returned_even_over_the_byte_cap() {
        let limits = ReadLimits {
            max_line_chars: 2000,
            max_content_bytes: 3,
            ..ReadLimits::default()
        };
        let out = read_lines_with(b"abcdef\nx\n", 1, 10, &limits).unwrap();
        assert_eq!((out.end_line, out.content.as_str()), (1, "abcdef\n"));
    }
}
