//! Text hygiene for command output shown to a model: terminal escape sequences and control
//! characters removed, invalid UTF-8 made visible.
//!
//! Output of a confined command is untrusted. Escape sequences can rewrite what a person sees
//! in a terminal or log viewer (cursor moves, OSC 8 links, title changes) and, to a model, are
//! noise at best; other control bytes break some hosts' JSON handling. Newline and tab are kept;
//! everything else below U+0020, DEL and the C1 range goes. The exact bytes stay in the spill
//! file (see `shape`), so nothing is lost for good.

/// `text` without escape sequences and control characters other than `\n` and `\t`, and how
/// many sequences or characters were removed.
pub(crate) fn strip_controls(text: &str) -> (String, usize) {
    if !text.chars().any(is_removed_control) {
        return (text.to_owned(), 0);
    }
    let mut out = String::with_capacity(text.len());
    let mut removed = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            removed += 1;
            skip_escape(&mut chars);
        } else if c == '\u{9b}' {
            // C1 CSI: the same parameters as `ESC [`.
            removed += 1;
            skip_csi(&mut chars);
        } else if is_removed_control(c) {
            removed += 1;
        } else {
            out.push(c);
        }
    }
    (out, removed)
}

fn is_removed_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || c == '\u{7f}'
}

/// Consumes the rest of an escape sequence after `ESC` (ECMA-48): CSI, OSC/DCS/APC/PM/SOS
/// strings up to their terminator, or a single following character.
fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.peek().copied() {
        Some('[') => {
            chars.next();
            skip_csi(chars);
        }
        Some(']' | 'P' | '_' | '^' | 'X') => {
            chars.next();
            skip_string(chars);
        }
        // Intermediate bytes (e.g. `ESC ( B`), then one final byte.
        Some(c) if ('\u{20}'..='\u{2f}').contains(&c) => {
            while chars
                .next_if(|c| ('\u{20}'..='\u{2f}').contains(c))
                .is_some()
            {}
            chars.next_if(|c| ('\u{30}'..='\u{7e}').contains(c));
        }
        Some(c) if ('\u{30}'..='\u{7e}').contains(&c) => {
            chars.next();
        }
        _ => {}
    }
}

/// CSI: parameter bytes 0x30–0x3F, intermediate bytes 0x20–0x2F, one final byte 0x40–0x7E.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars
        .next_if(|c| ('\u{30}'..='\u{3f}').contains(c))
        .is_some()
    {}
    while chars
        .next_if(|c| ('\u{20}'..='\u{2f}').contains(c))
        .is_some()
    {}
    chars.next_if(|c| ('\u{40}'..='\u{7e}').contains(c));
}

/// A control string runs to BEL, ST (`ESC \`) or C1 ST; bounded by the text itself.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' => {
                chars.next_if_eq(&'\\');
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_cursor_moves_and_links_are_removed() {
        let (s, n) = strip_controls("\u{1b}[1;31merror\u{1b}[0m: x\u{1b}[2K\r\n");
        assert_eq!(s, "error: x\n");
        assert_eq!(n, 4);
        let (s, n) = strip_controls("see \u{1b}]8;;http://e.x\u{7}link\u{1b}]8;;\u{1b}\\ now");
        assert_eq!(s, "see link now");
        assert_eq!(n, 2);
        let (s, _) = strip_controls("\u{1b}(Bplain\u{1b}=");
        assert_eq!(s, "plain");
    }

    #[test]
    fn newline_and_tab_stay_and_other_controls_go() {
        let (s, n) = strip_controls("a\tb\nc\u{0}d\u{8}e\u{7f}f\u{85}g");
        assert_eq!(s, "a\tb\ncdefg");
        assert_eq!(n, 4);
        let (s, n) = strip_controls("clean text, ünïcödé\n");
        assert_eq!((s.as_str(), n), ("clean text, ünïcödé\n", 0));
    }
}
