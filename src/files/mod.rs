//! The pure logic of the file tools: reading a window of lines, applying exact edits, and
//! rendering unified diffs.
//!
//! Owns: decisions about *content* (is it text, which lines to return, where an `old_string`
//! matches, what changed). Does not own: touching the file system (see `crate::workspace`), MCP
//! argument or result types, or lint. Every function here takes and returns plain values, so
//! it can be tested without a disk.

pub mod diff;
pub mod edit;
mod nearest;
pub mod read;
pub mod text;

pub use diff::{unified_diff, write_unified_diff};
pub use edit::{Candidate, Edit, EditError, EditOutcome, apply_edits, apply_edits_within};
pub use read::{ReadError, ReadLimits, ReadOutcome, read_lines, read_lines_with};
pub use text::{NotText, as_text};
