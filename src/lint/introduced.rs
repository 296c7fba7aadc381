//! Deciding which diagnostics a write or edit *introduced*.
//!
//! Owns the rule below and the old→new line mapping it needs. It does not produce
//! diagnostics; the caller lints the old content (or keeps the previous result) and the new
//! content the same way and passes both lists in.
//!
//! # The rule
//! A new diagnostic is **pre-existing** (`introduced = false`) when an old diagnostic with the
//! same `source`, `code` and `message` sits on the *corresponding* line; otherwise it is
//! introduced. `severity` and the end position are not compared (a config change of a rule's
//! level is not a new problem). Each old diagnostic vouches for at most one new one. Columns
//! only decide the pairing: same-column candidates are paired first (so `x + x` with two
//! identical findings stays two-for-two), then any remaining candidate on the corresponding
//! line, since editing a line moves text sideways.
//!
//! Corresponding lines come from a line diff (patience) of old → new content:
//! * an unchanged line corresponds to its new position, so inserting or deleting lines above an
//!   old finding keeps it pre-existing;
//! * inside a changed region, old and new lines pair up by position (the region's first old
//!   line with its first new line, and so on). A finding on a changed line is therefore
//!   pre-existing only if the same finding was on the paired old line, i.e. the edit touched
//!   the line without fixing that problem (e.g. renamed a variable before a missing `;`);
//! * lines added beyond the paired ones and deleted lines correspond to nothing: every finding
//!   on an added line is introduced, and a finding moved with cut-and-paste counts as new;
//! * a line past the end of the old file (where parsers put "missing `fi`") corresponds to
//!   the same distance past the new end of file.
//!
//! A brand-new file (`old_text = None`) has everything introduced.

use crate::lint::diagnostic::Diagnostic;
use similar::{Algorithm, DiffTag, capture_diff_slices_deadline};
use std::collections::HashMap;
use std::ops::Range;
use std::time::{Duration, Instant};

/// Bound on the diff; past it `similar` returns a coarser (still valid) diff, which at worst
/// marks more findings as introduced.
const DIFF_BUDGET: Duration = Duration::from_millis(100);

/// Sets `introduced` on every diagnostic in `new_diags` according to the module rule.
pub fn mark_introduced(
    old_text: Option<&str>,
    new_text: &str,
    old_diags: &[Diagnostic],
    new_diags: &mut [Diagnostic],
) {
    // The line diff is the costly part (a patience diff of both contents on every write), and
    // it only matters when there is something to pair: no new findings, nothing to mark; no
    // old findings (or no old file), everything is introduced.
    if new_diags.is_empty() {
        return;
    }
    let Some(old_text) = old_text.filter(|_| !old_diags.is_empty()) else {
        new_diags.iter_mut().for_each(|d| d.introduced = true);
        return;
    };
    let map = LineMap::new(old_text, new_text);

    let mut candidates: HashMap<Identity<'_>, Vec<Slot>> = HashMap::new();
    for old in old_diags {
        if let Some(line) = map.new_line_for(old.line) {
            candidates
                .entry(identity(line, old))
                .or_default()
                .push(Slot {
                    column: old.column,
                    used: false,
                });
        }
    }

    let mut pre_existing = vec![false; new_diags.len()];
    // Pass 1 pairs exact columns, pass 2 anything left on the corresponding line.
    for exact_column in [true, false] {
        for (new, matched) in new_diags.iter().zip(pre_existing.iter_mut()) {
            if *matched {
                continue;
            }
            let Some(slots) = candidates.get_mut(&identity(new.line, new)) else {
                continue;
            };
            let free = slots
                .iter_mut()
                .find(|s| !s.used && (!exact_column || s.column == new.column));
            if let Some(slot) = free {
                slot.used = true;
                *matched = true;
            }
        }
    }
    for (new, matched) in new_diags.iter_mut().zip(pre_existing) {
        new.introduced = !matched;
    }
}

/// What makes two findings "the same": the (new) line they sit on, source, code, message.
type Identity<'a> = (u32, &'a str, Option<&'a str>, &'a str);

fn identity(line: u32, d: &Diagnostic) -> Identity<'_> {
    (
        line,
        d.source.as_str(),
        d.code.as_deref(),
        d.message.as_str(),
    )
}

/// An old finding waiting to vouch for a new one.
struct Slot {
    column: u32,
    used: bool,
}

/// Old line → corresponding new line, per the module rule.
struct LineMap {
    /// Index = old line - 1; value = new line (1-based) or `None` for a deleted line.
    old_to_new: Vec<Option<u32>>,
    new_line_count: usize,
}

impl LineMap {
    fn new(old_text: &str, new_text: &str) -> Self {
        let old_lines: Vec<&str> = old_text.lines().collect();
        let new_lines: Vec<&str> = new_text.lines().collect();
        let deadline = Instant::now() + DIFF_BUDGET;
        let ops = capture_diff_slices_deadline(
            Algorithm::Patience,
            &old_lines,
            &new_lines,
            Some(deadline),
        );

        let mut old_to_new = vec![None; old_lines.len()];
        // Consecutive non-equal ops form one changed region; its lines pair up by position.
        let mut region: Option<ChangedRegion> = None;
        for op in &ops {
            let (tag, old_range, new_range) = op.as_tag_tuple();
            if tag == DiffTag::Equal {
                if let Some(done) = region.take() {
                    done.pair_into(&mut old_to_new);
                }
                for (o, n) in old_range.zip(new_range) {
                    if let Some(slot) = old_to_new.get_mut(o) {
                        *slot = Some(one_based(n));
                    }
                }
            } else {
                region = Some(match region {
                    None => ChangedRegion {
                        old: old_range,
                        new: new_range,
                    },
                    Some(r) => ChangedRegion {
                        old: r.old.start.min(old_range.start)..r.old.end.max(old_range.end),
                        new: r.new.start.min(new_range.start)..r.new.end.max(new_range.end),
                    },
                });
            }
        }
        if let Some(done) = region {
            done.pair_into(&mut old_to_new);
        }
        LineMap {
            old_to_new,
            new_line_count: new_lines.len(),
        }
    }

    fn new_line_for(&self, old_line: u32) -> Option<u32> {
        let idx = usize::try_from(old_line).ok()?.checked_sub(1)?;
        match self.old_to_new.get(idx) {
            Some(mapped) => *mapped,
            // Past the old end of file: keep the same distance from the new end of file.
            None => {
                let past_end = idx - self.old_to_new.len();
                Some(one_based(self.new_line_count + past_end))
            }
        }
    }
}

/// A run of changed lines: old indices `old` were replaced by new indices `new`.
struct ChangedRegion {
    old: Range<usize>,
    new: Range<usize>,
}

impl ChangedRegion {
    /// The i-th old line corresponds to the i-th new line; the surplus on either side maps
    /// to nothing (stays `None`).
    fn pair_into(self, old_to_new: &mut [Option<u32>]) {
        for (o, n) in self.old.zip(self.new) {
            if let Some(slot) = old_to_new.get_mut(o) {
                *slot = Some(one_based(n));
            }
        }
    }
}

fn one_based(index: usize) -> u32 {
    u32::try_from(index + 1).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::diagnostic::Severity;

    fn d(line: u32, column: u32, code: &str) -> Diagnostic {
        Diagnostic::at(
            line,
            column,
            Severity::Error,
            Some(code.into()),
            format!("problem {code}"),
            "ruff",
        )
    }

    fn introduced(old: &str, new: &str, old_d: &[Diagnostic], new_d: &[Diagnostic]) -> Vec<bool> {
        let mut new_d = new_d.to_vec();
        mark_introduced(Some(old), new, old_d, &mut new_d);
        new_d.iter().map(|d| d.introduced).collect()
    }

    #[test]
    fn new_file_has_everything_introduced() {
        let mut diags = vec![d(1, 1, "A"), d(2, 1, "B")];
        mark_introduced(None, "x\ny\n", &[], &mut diags);
        assert!(diags.iter().all(|d| d.introduced));
    }

    /// The short cut past the line diff: nothing old to vouch, so every new finding is
    /// introduced, even on lines the edit did not touch.
    #[test]
    fn without_old_findings_every_new_one_is_introduced() {
        let mut diags = vec![d(1, 1, "A"), d(3, 1, "B")];
        diags.iter_mut().for_each(|d| d.introduced = false);
        mark_introduced(Some("a\nb\nc\n"), "a\nb\nc\nd\n", &[], &mut diags);
        assert!(diags.iter().all(|d| d.introduced));
    }

    #[test]
    fn lines_inserted_above_keep_old_error_pre_existing() {
        let old = "a\nbad\nc\n";
        let new = "new1\nnew2\na\nbad\nc\n";
        // The old error moved from line 2 to line 4; a new one appears on inserted line 1.
        let result = introduced(old, new, &[d(2, 1, "E1")], &[d(1, 1, "E1"), d(4, 1, "E1")]);
        assert_eq!(result, vec![true, false]);
    }

    #[test]
    fn lines_deleted_above_keep_old_error_pre_existing() {
        let old = "a\nb\nc\nbad\n";
        let new = "c\nbad\n";
        let result = introduced(old, new, &[d(4, 3, "E1")], &[d(2, 3, "E1")]);
        assert_eq!(result, vec![false]);
    }

    #[test]
    fn same_line_changed() {
        let old = "a\nx = foo(undefined)\nc\n";
        let new = "a\ny = 1 + foo(undefined)\nc\n";
        // The same finding survives the edit (its column moved): pre-existing. A different
        // finding on that changed line: introduced.
        let result = introduced(
            old,
            new,
            &[d(2, 9, "F821")],
            &[d(2, 13, "F821"), d(2, 1, "E999")],
        );
        assert_eq!(result, vec![false, true]);
    }

    #[test]
    fn finding_on_line_that_was_not_paired_is_introduced() {
        // The old error was on line 2; the edit deleted it and added a line at the end
        // with the same problem: that is new code, so it is introduced.
        let old = "a\nbad\nc\n";
        let new = "a\nc\nbad again\n";
        let result = introduced(old, new, &[d(2, 1, "E1")], &[d(3, 1, "E1")]);
        assert_eq!(result, vec![true]);
    }

    #[test]
    fn each_old_finding_vouches_for_one_new_one() {
        let old = "x + x\n";
        let new = "x + x + x\n";
        let result = introduced(
            old,
            new,
            &[d(1, 1, "F821"), d(1, 5, "F821")],
            &[d(1, 1, "F821"), d(1, 5, "F821"), d(1, 9, "F821")],
        );
        assert_eq!(result, vec![false, false, true]);
    }

    #[test]
    fn different_source_or_message_is_introduced() {
        let old = "a\n";
        let mut other_source = d(1, 1, "E1");
        other_source.source = "syntax".into();
        let mut other_message = d(1, 1, "E1");
        other_message.message = "another".into();
        let result = introduced(old, old, &[d(1, 1, "E1")], &[other_source, other_message]);
        assert_eq!(result, vec![true, true]);
    }

    #[test]
    fn end_of_file_position_follows_the_end() {
        // "missing `fi`" is reported one line past the last line.
        let old = "if true; then\n  echo hi\n";
        let new = "# added\nif true; then\n  echo hi\n";
        let result = introduced(old, new, &[d(3, 1, "MISSING")], &[d(4, 1, "MISSING")]);
        assert_eq!(result, vec![false]);
    }
}
