//! Is this content text? One answer shared by read_file and edit_file.
//!
//! Owns: the binary/text decision (a NUL byte early on, or invalid UTF-8 anywhere) and its
//! explanation. Does not own: what a tool does with a refusal.

/// How far to look for a NUL byte: the same heuristic as git and grep use, cheap and reliable
/// for real binaries (executables, images, archives all have NULs in their headers).
pub(crate) const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Why content is not treated as text. `Display` explains it in a clause that fits after
/// "the file is not text: ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotText {
    #[error("it has a NUL byte at byte offset {offset}, so it looks like a binary file")]
    NulByte { offset: usize },
    #[error(
        "it is not valid UTF-8 (first invalid byte at byte offset {offset}, line {line}); it may \
         be binary or use another encoding such as Latin-1 or UTF-16"
    )]
    InvalidUtf8 { offset: usize, line: usize },
}

/// Returns the content as `&str` if it is text, byte for byte (no BOM stripping, no line-ending
/// or Unicode normalisation).
pub(crate) fn as_text(bytes: &[u8]) -> Result<&str, NotText> {
    let head = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    if let Some(offset) = head.iter().position(|&b| b == 0) {
        return Err(NotText::NulByte { offset });
    }
    std::str::from_utf8(bytes).map_err(|e| {
        let offset = e.valid_up_to();
        let line = 1 + bytes[..offset].iter().filter(|&&b| b == b'\n').count();
        NotText::InvalidUtf8 { offset, line }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_text_passes_unchanged() {
        let s = "\u{feff}caf\u{e9}\r\n\t\u{201c}q\u{201d} \u{1f600}\n";
        assert_eq!(as_text(s.as_bytes()), Ok(s));
        assert_eq!(as_text(b""), Ok(""));
    }

    #[test]
    fn nul_in_the_head_is_binary() {
        let err = as_text(b"\x7fELF\x02\x01\x01\x00rest").unwrap_err();
        assert_eq!(err, NotText::NulByte { offset: 7 });
        assert!(err.to_string().contains("binary"));
    }

    #[test]
    fn invalid_utf8_reports_where() {
        let err = as_text(b"ok\nline two \xe9t\xe9\n").unwrap_err();
        assert_eq!(
            err,
            NotText::InvalidUtf8 {
                offset: 12,
                line: 2
            }
        );
        assert!(err.to_string().contains("Latin-1"));
    }

    #[test]
    fn nul_after_the_sniff_window_is_accepted_like_git() {
        // A NUL past 8 KiB is valid UTF-8; it is accepted as text like git does.
        let mut bytes = vec![b'a'; BINARY_SNIFF_BYTES + 10];
        bytes.push(0);
        assert!(as_text(&bytes).is_ok());
    }
}
