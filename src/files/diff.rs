//! Unified diffs of a file's old and new content, for edit_file results.
//!
//! Owns: line splitting (at `\n` only, the same numbering as read_file), hunk grouping with 3
//! lines of context, and rendering. Does not own: the diff algorithm (the `similar` crate) or
//! deciding whether a diff should be shortened for the model.
//!
//! Byte-faithful on purpose: each line is written with its own ending, so a `\r` before the
//! `\n` stays visible and a CRLF→LF change shows up as a changed line instead of vanishing.
//! (`similar`'s own line splitter treats a lone `\r` as a line break, which would shift line
//! numbers away from read_file's, so we split ourselves and diff the line slices.)

use std::fmt::Write;
use std::time::{Duration, Instant};

use similar::udiff::UnifiedHunkHeader;
use similar::{Algorithm, DiffOp, DiffTag, capture_diff_slices_deadline, group_diff_ops};

/// Lines of unchanged context around each change, as `diff -u` does.
pub(crate) const CONTEXT_LINES: usize = 3;

/// Past this, Myers gives up on the minimal diff and returns a correct but coarser one, so a
/// pathological file cannot stall a call.
const DIFF_TIME_BUDGET: Duration = Duration::from_millis(500);

/// A unified diff of `old` → `new` with `--- a/PATH` / `+++ b/PATH` headers, or an empty string
/// when they are equal.
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    let mut out = String::new();
    write_unified_diff(&mut out, path, old, new);
    out
}

/// [`unified_diff`] rendered into any writer, so a caller can keep only part of a huge diff in
/// memory and stream the rest elsewhere.
pub(crate) fn write_unified_diff(out: &mut dyn Write, path: &str, old: &str, new: &str) {
    let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
    let new_lines: Vec<&str> = new.split_inclusive('\n').collect();
    let deadline = Instant::now() + DIFF_TIME_BUDGET;
    let ops =
        capture_diff_slices_deadline(Algorithm::Myers, &old_lines, &new_lines, Some(deadline));
    let hunks = group_diff_ops(ops, CONTEXT_LINES);
    if hunks.is_empty() {
        return;
    }
    // Writers here are in-memory or best-effort sinks: a failed write loses text, not safety.
    let _ = write!(out, "--- a/{path}\n+++ b/{path}\n");
    for hunk in &hunks {
        render_hunk(out, hunk, &old_lines, &new_lines);
    }
}

fn render_hunk(out: &mut dyn Write, ops: &[DiffOp], old_lines: &[&str], new_lines: &[&str]) {
    let _ = writeln!(out, "{}", UnifiedHunkHeader::new(ops));
    for op in ops {
        let (tag, old_range, new_range) = op.as_tag_tuple();
        match tag {
            DiffTag::Equal => push_lines(out, ' ', &old_lines[old_range]),
            DiffTag::Delete => push_lines(out, '-', &old_lines[old_range]),
            DiffTag::Insert => push_lines(out, '+', &new_lines[new_range]),
            DiffTag::Replace => {
                push_lines(out, '-', &old_lines[old_range]);
                push_lines(out, '+', &new_lines[new_range]);
            }
        }
    }
}

fn push_lines(out: &mut dyn Write, prefix: char, lines: &[&str]) {
    for line in lines {
        let _ = out.write_char(prefix);
        let _ = out.write_str(line);
        if !line.ends_with('\n') {
            let _ = out.write_str("\n\\ No newline at end of file\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_content_gives_empty_diff() {
        assert_eq!(unified_diff("a.txt", "x\ny\n", "x\ny\n"), "");
    }

    #[test]
    fn simple_change_with_three_lines_of_context() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nFIVE\n6\n7\n8\n9\n";
        let diff = unified_diff("src/x.txt", old, new);
        assert_eq!(
            diff,
            "--- a/src/x.txt\n+++ b/src/x.txt\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+FIVE\n 6\n 7\n 8\n"
        );
    }

    #[test]
    fn crlf_is_kept_visible() {
        let diff = unified_diff("w.txt", "a\r\nb\r\n", "a\r\nc\r\n");
        assert!(diff.contains("-b\r\n+c\r\n"), "{diff:?}");
        assert!(diff.contains(" a\r\n"), "{diff:?}");
    }

    #[test]
    fn line_ending_only_change_is_a_change() {
        let diff = unified_diff("w.txt", "a\r\n", "a\n");
        assert!(diff.contains("-a\r\n+a\n"), "{diff:?}");
    }

    #[test]
    fn missing_final_newline_is_marked() {
        let diff = unified_diff("f", "a\nb", "a\nc");
        assert!(
            diff.ends_with("-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"),
            "{diff:?}"
        );
    }

    #[test]
    fn lone_cr_does_not_split_lines() {
        // read_file counts lines at `\n` only; so must the diff's hunk headers.
        let diff = unified_diff("f", "a\rb\nc\n", "a\rb\nC\n");
        assert!(diff.contains("@@ -1,2 +1,2 @@"), "{diff:?}");
    }

    #[test]
    fn distant_changes_make_separate_hunks() {
        let old: String = (1..=30).map(|i| format!("{i}\n")).collect();
        let new: String = (1..=30)
            .map(|i| match i {
                2 => "two\n".to_owned(),
                29 => "twenty-nine\n".to_owned(),
                _ => format!("{i}\n"),
            })
            .collect();
        let diff = unified_diff("f", &old, &new);
        assert_eq!(diff.matches("@@ -").count(), 2, "{diff}");
    }

    #[test]
    fn creating_content_from_empty() {
        let diff = unified_diff("new.txt", "", "hello\n");
        assert!(diff.contains("@@ -0,0 +1 @@\n+hello\n"), "{diff:?}");
    }
}
