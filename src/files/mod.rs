//! The pure logic of the file tools: reading a window of lines, applying exact edits, and
//! rendering unified diffs.
//!
//! Owns: decisions about *content* (is it text, which lines to return, where an `old_string`
//! matches, what changed). Does not own: touching the file system (see `crate::workspace`), MCP
//! argument or result types, or lint. Every function here takes and returns plain values, so
//! it can be tested without a disk.

pub(crate) mod diff;
pub(crate) mod edit;
mod nearest;
pub(crate) mod read;
pub(crate) mod text;

pub(crate) use diff::{unified_diff, write_unified_diff};
pub(crate) use edit::{Edit, apply_edits_within};
pub(crate) use read::{ReadLimits, read_lines_with};
