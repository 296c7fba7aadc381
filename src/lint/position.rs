//! Text positions: converting what tools report into 1-based *character* columns.
//!
//! Owns the unit conversions the rest of the lint code needs: tree-sitter and oxlint count
//! bytes, ESLint counts UTF-16 code units, ruff and shellcheck (json1) count characters, and
//! cordon's contract is characters. It does not know any linter's output format; parsers pick
//! the unit and call in here.

use serde::{Deserialize, Serialize};

/// The unit a tool counts columns (or offsets) in.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ColumnUnit {
    /// Unicode scalar values: what cordon reports.
    #[default]
    Char,
    /// UTF-8 bytes (tree-sitter, oxlint, many C tools).
    Byte,
    /// UTF-16 code units (JavaScript tools such as ESLint).
    Utf16,
}

pub(crate) use crate::text::{chars_between, to_u32};

/// Byte offsets of line starts, so a (line, column-in-some-unit) pair can be turned into a
/// character column without rescanning the file for each diagnostic.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, starts }
    }

    /// The text of 1-based `line` without its terminator; `None` past the last line.
    pub(crate) fn line_text(&self, line: u32) -> Option<&'a str> {
        let idx = usize::try_from(line).ok()?.checked_sub(1)?;
        let start = *self.starts.get(idx)?;
        let end = self
            .starts
            .get(idx + 1)
            .map_or(self.text.len(), |next| next - 1);
        let raw = self.text.get(start..end)?;
        Some(raw.strip_suffix('\r').unwrap_or(raw))
    }

    /// Converts a 1-based `column` counted in `unit` on 1-based `line` into a 1-based character
    /// column. Columns past the end of the line (tools point one past the last character for
    /// "end of line") keep their overshoot, so a zero-width end-of-line span stays valid.
    pub(crate) fn char_column(&self, line: u32, column: u32, unit: ColumnUnit) -> u32 {
        if unit == ColumnUnit::Char || column <= 1 {
            return column.max(1);
        }
        let Some(text) = self.line_text(line) else {
            return column;
        };
        let target = (column - 1) as usize;
        let mut consumed = 0usize;
        let mut chars = 0usize;
        for ch in text.chars() {
            if consumed >= target {
                break;
            }
            consumed += match unit {
                ColumnUnit::Byte => ch.len_utf8(),
                ColumnUnit::Utf16 => ch.len_utf16(),
                ColumnUnit::Char => 1,
            };
            chars += 1;
        }
        let overshoot = target.saturating_sub(consumed);
        to_u32(chars + overshoot + 1)
    }

    /// 1-based (line, character column) of a byte offset into the whole text.
    pub(crate) fn position_of_byte_offset(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        // `starts[0] == 0`, so the partition point is at least 1.
        let line_idx = self
            .starts
            .partition_point(|&s| s <= offset)
            .saturating_sub(1);
        let line_start = self.starts.get(line_idx).copied().unwrap_or(0);
        let column = chars_between(self.text, line_start, offset) + 1;
        (to_u32(line_idx + 1), to_u32(column))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_and_utf16_columns_become_characters() {
        let idx = LineIndex::new("ab\nx = \"héllo\" + 😀z\n");
        // `+` is the 13th character; in bytes it is at 14 (é is 2 bytes).
        assert_eq!(idx.char_column(2, 14, ColumnUnit::Byte), 13);
        // `z` after the emoji: character 16, UTF-16 unit 17, byte 19.
        assert_eq!(idx.char_column(2, 17, ColumnUnit::Utf16), 16);
        assert_eq!(idx.char_column(2, 19, ColumnUnit::Byte), 16);
        assert_eq!(idx.char_column(2, 16, ColumnUnit::Char), 16);
        // One past the end of the line keeps its overshoot.
        assert_eq!(idx.char_column(1, 3, ColumnUnit::Byte), 3);
    }

    #[test]
    fn byte_offsets_map_to_lines() {
        let idx = LineIndex::new("é\nab\n");
        assert_eq!(idx.position_of_byte_offset(0), (1, 1));
        assert_eq!(idx.position_of_byte_offset(2), (1, 2));
        assert_eq!(idx.position_of_byte_offset(3), (2, 1));
        assert_eq!(idx.position_of_byte_offset(4), (2, 2));
        assert_eq!(idx.position_of_byte_offset(999), (3, 1));
    }

    #[test]
    fn chars_between_tolerates_bad_indices() {
        assert_eq!(chars_between("héllo", 0, 2), 1); // 2 is inside `é`
        assert_eq!(chars_between("héllo", 3, 100), 3);
    }
}
