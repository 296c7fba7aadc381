//! Shaping what a tool returns: the tool error (kinds are `error_kind`'s, and a lower layer's
//! error becomes one through `From`), long-output truncation with spill (by the policy's
//! [`OutputPolicy`], which this module owns), the `--- stream ---` sections of a text block,
//! and [`ToolOutcome`]: the `CallToolResult` (structured content plus a short text block for
//! the model) that tools build without knowing MCP and only `server` unwraps.
//!
//! Text results pass through [`hygiene`] (escape sequences and control characters removed,
//! unless the policy keeps them) and invalid UTF-8 is replaced with a note saying where the
//! exact bytes are.
//!
//! Owns presentation only. It never decides whether something is an error (tools do) and
//! never touches processes; it writes a spill file only through the opener it is given.

pub(crate) mod hygiene;

use crate::exec::Captured;
use rmcp::model::{CallToolResult, ContentBlock};
use schemars::JsonSchema;
use serde::Serialize;

pub(crate) use crate::error_kind::ErrorKind;

/// `structuredContent.error` of every `isError` result.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ToolError {
    pub kind: ErrorKind,
    /// What happened and how to fix it.
    pub message: String,
    /// Whether the same call may succeed if simply retried.
    pub retriable: bool,
}

impl ToolError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        let retriable = matches!(
            kind,
            ErrorKind::Timeout | ErrorKind::Io | ErrorKind::Internal
        );
        Self {
            kind,
            message: message.into(),
            retriable,
        }
    }

    /// The text block of a failed call: the kind and what to do, first, where a model looks.
    pub fn text(&self) -> String {
        format!("error [{}]: {}", self.kind, self.message)
    }
}

/// A lower layer's error as a tool error: its own kind (each error type says which) and its
/// message, which already says how to fix it.
impl<'a, E> From<&'a E> for ToolError
where
    E: std::fmt::Display,
    ErrorKind: From<&'a E>,
{
    fn from(e: &'a E) -> Self {
        ToolError::new(ErrorKind::from(e), e.to_string())
    }
}

/// What a tool answers, already in the form it goes on the wire: `structuredContent` is the
/// full typed output, the text block a short human-readable rendering (not the JSON again) so
/// a model reads it cheaply, then any figures. Tools build it without knowing the protocol;
/// `server` takes the result out with [`ToolOutcome::into_result`].
#[derive(Debug, Clone)]
pub struct ToolOutcome(CallToolResult);

impl ToolOutcome {
    pub fn new(structured: &impl Serialize, text: String, is_error: bool) -> Self {
        let value = serde_json::to_value(structured).unwrap_or_else(|e| {
            serde_json::json!({"error": {"kind": "internal", "message": format!("cannot serialize result: {e}"), "retriable": false}})
        });
        let mut result = if is_error {
            CallToolResult::structured_error(value)
        } else {
            CallToolResult::structured(value)
        };
        result.content = vec![ContentBlock::text(text)];
        Self(result)
    }

    /// Appends a PNG image (base64) after the text.
    pub fn with_png(mut self, base64: String) -> Self {
        self.0
            .content
            .push(ContentBlock::image(base64, "image/png"));
        self
    }

    /// The size of the result on the wire (its JSON), for the check against the most a
    /// result may take.
    pub fn wire_size(&self) -> usize {
        // Counted as it is serialized: every call is measured, and a copy of up to a MiB
        // just to take its length would be allocated and thrown away each time.
        struct Count(usize);
        impl std::io::Write for Count {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0 += bytes.len();
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut count = Count(0);
        serde_json::to_writer(&mut count, &self.0).map_or(usize::MAX, |()| count.0)
    }

    pub fn is_error(&self) -> bool {
        self.0.is_error == Some(true)
    }

    pub fn into_result(self) -> CallToolResult {
        self.0
    }
}

/// Appends `--- name ---` sections to a result's text block, one per non-empty stream, each
/// ending in a newline.
pub(crate) fn push_sections(text: &mut String, sections: &[(&str, &str)]) {
    for (name, body) in sections {
        if !body.is_empty() {
            text.push_str(&format!("--- {name} ---\n{body}"));
            if !body.ends_with('\n') {
                text.push('\n');
            }
        }
    }
}

/// The policy's `[output]` section: how long output is cut and kept.
#[derive(Debug, Clone, Serialize)]
pub struct OutputPolicy {
    pub max_lines: usize,
    pub max_chars: usize,
    pub head_lines: usize,
    pub tail_lines: usize,
    pub memory_cap_bytes: usize,
    /// Keep ANSI escapes and control characters in text results (default: removed).
    pub keep_control_chars: bool,
    /// Total size of the spill area (`.cordon/outputs/`); the oldest files are deleted to stay
    /// under it.
    pub spill_total_bytes: u64,
}

/// One output stream as shown to the agent.
#[derive(Debug, Default)]
pub struct ShapedStream {
    pub text: String,
    pub truncated: bool,
    /// Workspace-relative path of the complete stream, when it was cut (or when its bytes
    /// were not valid UTF-8, so the exact bytes are kept somewhere).
    pub full_output: Option<String>,
    /// Escape sequences and control characters removed from `text`.
    pub controls_removed: usize,
    /// The stream was not valid UTF-8; `text` shows U+FFFD in place of the bad bytes.
    pub invalid_utf8: bool,
}

/// Opens a spill file for a stream that was cut but fit in memory: (display path, file).
pub(crate) type SpillWriter<'a> = &'a dyn Fn(&str) -> std::io::Result<(String, std::fs::File)>;

/// Cuts a long stream to its first and last lines with a marker saying exactly what was left
/// out and where the whole of it is. Output within the thresholds is returned whole.
pub fn shape_stream(
    captured: &Captured,
    policy: &OutputPolicy,
    stream_name: &str,
    spill: Option<SpillWriter<'_>>,
) -> ShapedStream {
    shape(Stream::from(captured), policy, stream_name, spill)
}

/// [`shape_stream`] for bytes that are a whole stream (a job's new output, read from its
/// buffer): nothing was spilled while capturing, and every byte is here.
pub(crate) fn shape_bytes(
    bytes: &[u8],
    policy: &OutputPolicy,
    stream_name: &str,
    spill: Option<SpillWriter<'_>>,
) -> ShapedStream {
    let stream = Stream {
        head: bytes,
        tail: &[],
        total_bytes: bytes.len() as u64,
        total_lines: bytes.iter().filter(|&&b| b == b'\n').count() as u64,
        spill_path: None,
        spill_error: None,
    };
    shape(stream, policy, stream_name, spill)
}

/// What shaping reads of one stream: the bytes kept of it, its counts, and where its whole is
/// when it was spilled while being captured.
struct Stream<'a> {
    head: &'a [u8],
    tail: &'a [u8],
    total_bytes: u64,
    total_lines: u64,
    spill_path: Option<&'a str>,
    spill_error: Option<&'a str>,
}

impl<'a> From<&'a Captured> for Stream<'a> {
    fn from(c: &'a Captured) -> Self {
        Stream {
            head: &c.head,
            tail: &c.tail,
            total_bytes: c.total_bytes,
            total_lines: c.total_lines,
            spill_path: c.spill_path.as_deref(),
            spill_error: c.spill_error.as_deref(),
        }
    }
}

impl Stream<'_> {
    /// The whole stream when head and tail are all of it.
    fn complete_bytes(&self) -> Option<Vec<u8>> {
        ((self.head.len() + self.tail.len()) as u64 == self.total_bytes)
            .then(|| [self.head, self.tail].concat())
    }
}

fn shape(
    captured: Stream<'_>,
    policy: &OutputPolicy,
    stream_name: &str,
    spill: Option<SpillWriter<'_>>,
) -> ShapedStream {
    let complete = captured.complete_bytes();
    let invalid_utf8 = match &complete {
        Some(bytes) => !utf8_ok(bytes, false, false),
        None => !utf8_ok(captured.head, false, true) || !utf8_ok(captured.tail, true, false),
    };
    let mut shaped = cut_stream(
        &captured,
        complete,
        policy,
        stream_name,
        spill,
        invalid_utf8,
    );
    shaped.invalid_utf8 = invalid_utf8;
    if !policy.keep_control_chars {
        let (clean, removed) = hygiene::strip_controls(&shaped.text);
        shaped.text = clean;
        shaped.controls_removed = removed;
    }
    let notes = notes(&shaped);
    if !notes.is_empty() {
        if !shaped.text.is_empty() && !shaped.text.ends_with('\n') {
            shaped.text.push('\n');
        }
        shaped
            .text
            .push_str(&format!("[... {} ...]\n", notes.join("; ")));
    }
    shaped
}

/// The human-readable line saying how many escape sequences or control characters were
/// removed from a result's streams (none when nothing was), for its text block only.
pub(crate) fn controls_note(removed: usize) -> Option<String> {
    (removed > 0).then(|| {
        format!(
            "[cordon] {removed} terminal escape sequences or control characters removed (count in `control_chars_removed`)\n"
        )
    })
}

/// Whether [`shape_stream`] shows `captured` whole and so writes no spill file: it is all in
/// memory, valid UTF-8, and within the line and character thresholds. A caller may then
/// shape it without moving to the blocking pool.
pub(crate) fn shown_whole(captured: &Captured, policy: &OutputPolicy) -> bool {
    captured.is_complete()
        && captured.tail.is_empty()
        && captured.head.len() <= policy.max_chars
        && count_lines(&Stream::from(captured)) <= policy.max_lines as u64
        && std::str::from_utf8(&captured.head).is_ok()
}

/// Whether `bytes` is UTF-8, allowing a character cut at the start or end (a kept head or
/// tail of a longer stream may begin or end mid-character).
fn utf8_ok(bytes: &[u8], cut_start: bool, cut_end: bool) -> bool {
    let bytes = if cut_start {
        let skip = bytes
            .iter()
            .take(3)
            .take_while(|&&b| b & 0xC0 == 0x80)
            .count();
        &bytes[skip..]
    } else {
        bytes
    };
    match std::str::from_utf8(bytes) {
        Ok(_) => true,
        Err(e) => cut_end && e.error_len().is_none(),
    }
}

/// The notes a stream's text carries about itself. The count of removed control characters is
/// not one of them: it is the result's own field (`control_chars_removed`, see
/// [`controls_note`]), because a note inside the text breaks what agents parse there (a
/// prompt such as `>>> ` would no longer end the output).
fn notes(shaped: &ShapedStream) -> Vec<String> {
    let mut notes = Vec::new();
    if shaped.invalid_utf8 {
        notes.push(match &shaped.full_output {
            Some(path) => format!("invalid UTF-8 shown as U+FFFD; the exact bytes are in {path}"),
            None => "invalid UTF-8 shown as U+FFFD; the exact bytes were not kept".into(),
        });
    }
    notes
}

/// Truncation and spill, before hygiene. Invalid UTF-8 is spilled even when short, so the
/// exact bytes exist somewhere.
fn cut_stream(
    captured: &Stream<'_>,
    complete: Option<Vec<u8>>,
    policy: &OutputPolicy,
    stream_name: &str,
    spill: Option<SpillWriter<'_>>,
    invalid_utf8: bool,
) -> ShapedStream {
    let lines = count_lines(captured);
    if let Some(bytes) = &complete
        && let Some(shaped) =
            whole_if_it_fits(bytes, lines, policy, stream_name, spill, invalid_utf8)
    {
        return shaped;
    }

    let (full_output, spill_note) =
        where_it_is_whole(captured, complete.as_deref(), stream_name, spill);

    let (head, tail): (&[u8], &[u8]) = match &complete {
        // Few but long lines: head and tail would overlap, so cut the middle by characters.
        Some(all) if lines <= (policy.head_lines + policy.tail_lines) as u64 => (all, &[]),
        Some(all) => (
            first_lines(all, policy.head_lines),
            last_lines(all, policy.tail_lines),
        ),
        None => (
            first_lines(captured.head, policy.head_lines),
            last_lines(captured.tail, policy.tail_lines),
        ),
    };
    let (head_text, tail_text) = shown_ends(head, tail, policy);
    let shown_bytes = (head_text.len() + tail_text.len()) as u64;
    let shown_lines = (head_text.matches('\n').count() + tail_text.matches('\n').count()) as u64;
    let omitted_lines = lines.saturating_sub(shown_lines);
    let omitted_bytes = captured.total_bytes.saturating_sub(shown_bytes);
    let whereabouts = match (&full_output, &spill_note) {
        (Some(path), Some(note)) => {
            format!("output saved in {path} (read it with read_file or grep), but {note}")
        }
        (Some(path), None) => format!("full output: {path} (read it with read_file or grep)"),
        (None, Some(note)) => note.clone(),
        (None, None) => "full output not saved".into(),
    };
    let mut text = head_text;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!(
        "[... {omitted_lines} lines ({omitted_bytes} bytes) omitted; {} lines, {} bytes in total; {whereabouts} ...]\n",
        lines, captured.total_bytes
    ));
    text.push_str(&tail_text);
    ShapedStream {
        text,
        truncated: true,
        full_output,
        ..Default::default()
    }
}

/// The stream uncut, when it is within the policy's lines and characters (`None` if not);
/// saved as a file too when it had invalid UTF-8, which the text cannot carry.
fn whole_if_it_fits(
    bytes: &[u8],
    lines: u64,
    policy: &OutputPolicy,
    stream_name: &str,
    spill: Option<SpillWriter<'_>>,
    invalid_utf8: bool,
) -> Option<ShapedStream> {
    // A UTF-8 character is at most 4 bytes, so only plausible candidates are decoded.
    if lines <= policy.max_lines as u64 && bytes.len() <= policy.max_chars.saturating_mul(4) {
        let text = String::from_utf8_lossy(bytes);
        if text.chars().count() <= policy.max_chars {
            let full_output = match (invalid_utf8, spill) {
                (true, Some(open)) => open(stream_name)
                    .and_then(|(path, mut file)| {
                        std::io::Write::write_all(&mut file, bytes)?;
                        Ok(path)
                    })
                    .ok(),
                _ => None,
            };
            return Some(ShapedStream {
                text: text.into_owned(),
                truncated: false,
                full_output,
                ..Default::default()
            });
        }
    }

    None
}

/// Where the whole stream lives: spilled while capturing, or written now from memory; and
/// why not, where it is not whole anywhere.
fn where_it_is_whole(
    captured: &Stream<'_>,
    complete: Option<&[u8]>,
    stream_name: &str,
    spill: Option<SpillWriter<'_>>,
) -> (Option<String>, Option<String>) {
    let mut full_output = captured.spill_path.map(str::to_owned);
    let mut spill_note = captured.spill_error.map(str::to_owned);
    if full_output.is_none() {
        match (complete, spill) {
            (Some(bytes), Some(open)) => match open(stream_name).and_then(|(path, mut file)| {
                std::io::Write::write_all(&mut file, bytes)?;
                Ok(path)
            }) {
                Ok(path) => full_output = Some(path),
                Err(e) => spill_note = Some(format!("could not save the full output: {e}")),
            },
            (None, _) => {
                spill_note.get_or_insert_with(|| "the middle of the output was not kept".into());
            }
            (Some(_), None) => {}
        }
    }

    (full_output, spill_note)
}

/// The text of the head and tail kept, each within half the policy's characters; a head
/// alone (few but long lines) is cut in its middle.
fn shown_ends(head: &[u8], tail: &[u8], policy: &OutputPolicy) -> (String, String) {
    if tail.is_empty() {
        let text = String::from_utf8_lossy(head);
        let chars = text.chars().count();
        let half = policy.max_chars / 2;
        if chars <= policy.max_chars {
            (text.into_owned(), String::new())
        } else {
            (
                text.chars().take(half).collect(),
                text.chars().skip(chars - half).collect(),
            )
        }
    } else {
        (
            clip_chars(&String::from_utf8_lossy(head), policy.max_chars / 2, true),
            clip_chars(&String::from_utf8_lossy(tail), policy.max_chars / 2, false),
        )
    }
}

/// Lines as a person counts them: a final line without a newline still counts.
fn count_lines(c: &Stream<'_>) -> u64 {
    let last = c.tail.last().or(c.head.last());
    c.total_lines + u64::from(last.is_some_and(|&b| b != b'\n'))
}

fn first_lines(bytes: &[u8], n: usize) -> &[u8] {
    let mut seen = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' {
            seen += 1;
            if seen == n {
                return &bytes[..=i];
            }
        }
    }
    bytes
}

fn last_lines(bytes: &[u8], n: usize) -> &[u8] {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let mut seen = 0;
    for (i, &b) in body.iter().enumerate().rev() {
        if b == b'\n' {
            seen += 1;
            if seen == n {
                return &bytes[i + 1..];
            }
        }
    }
    bytes
}

/// Keeps at most `max` characters from the start (or the end), marking the cut; protects the
/// response from a single enormous line.
fn clip_chars(text: &str, max: usize, from_start: bool) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let cut = count - max;
    if from_start {
        let kept: String = text.chars().take(max).collect();
        format!("{kept}[... {cut} characters omitted ...]\n")
    } else {
        let kept: String = text.chars().skip(cut).collect();
        format!("[... {cut} characters omitted ...]{kept}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_size_is_the_length_of_the_json() {
        let outcome = ToolOutcome::new(
            &serde_json::json!({"stdout": "é\n\u{1}", "exit_code": 0}),
            "text \"quoted\"".into(),
            false,
        )
        .with_png("iVBORw0KGgo=".into());
        let json = serde_json::to_vec(&outcome.0).unwrap();
        assert_eq!(outcome.wire_size(), json.len());
    }

    fn policy() -> OutputPolicy {
        OutputPolicy {
            max_lines: 200,
            max_chars: 10_000,
            head_lines: 50,
            tail_lines: 50,
            memory_cap_bytes: 1 << 20,
            keep_control_chars: false,
            spill_total_bytes: 2 << 30,
        }
    }

    fn captured(text: &str) -> Captured {
        Captured {
            head: text.as_bytes().to_vec(),
            total_bytes: text.len() as u64,
            total_lines: text.matches('\n').count() as u64,
            ..Default::default()
        }
    }

    #[test]
    fn short_output_is_untouched() {
        let s = shape_stream(&captured("a\nb\n"), &policy(), "stdout", None);
        assert_eq!(s.text, "a\nb\n");
        assert!(!s.truncated);
    }

    #[test]
    fn long_output_keeps_head_and_tail_with_exact_omitted_count() {
        let text: String = (1..=1000).map(|i| format!("line {i}\n")).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spill");
        let p = path.clone();
        let open = move |_: &str| Ok(("spill".to_owned(), std::fs::File::create(&p)?));
        let s = shape_stream(&captured(&text), &policy(), "stdout", Some(&open));
        assert!(s.truncated);
        assert!(s.text.starts_with("line 1\n"));
        assert!(s.text.contains("line 50\n[... 900 lines"), "{}", s.text);
        assert!(s.text.ends_with("line 1000\n"));
        assert!(!s.text.contains("line 51\n"));
        assert_eq!(s.full_output.as_deref(), Some("spill"));
        assert_eq!(std::fs::read_to_string(path).unwrap(), text);
    }

    #[test]
    fn escapes_are_removed_and_counted() {
        let s = shape_stream(
            &captured("\u{1b}[32mok\u{1b}[0m\n"),
            &policy(),
            "stdout",
            None,
        );
        // The count is the result's field, never text inside the stream.
        assert_eq!(s.text, "ok\n");
        assert_eq!(s.controls_removed, 2);
        let mut keep = policy();
        keep.keep_control_chars = true;
        let s = shape_stream(&captured("\u{1b}[32mok\u{1b}[0m\n"), &keep, "stdout", None);
        assert_eq!(s.text, "\u{1b}[32mok\u{1b}[0m\n");
    }

    #[test]
    fn invalid_utf8_is_noted_and_its_exact_bytes_spilled() {
        let bytes = b"caf\xe9\n".to_vec();
        let c = Captured {
            head: bytes.clone(),
            total_bytes: bytes.len() as u64,
            total_lines: 1,
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spill");
        let p = path.clone();
        let open = move |_: &str| Ok(("spill".to_owned(), std::fs::File::create(&p)?));
        let s = shape_stream(&c, &policy(), "stdout", Some(&open));
        assert!(s.invalid_utf8 && !s.truncated);
        assert!(s.text.starts_with("caf\u{fffd}\n"), "{}", s.text);
        assert!(
            s.text.contains("the exact bytes are in spill"),
            "{}",
            s.text
        );
        assert_eq!(s.full_output.as_deref(), Some("spill"));
        assert_eq!(std::fs::read(path).unwrap(), bytes);
    }

    #[test]
    fn a_character_cut_at_the_edge_of_a_kept_head_is_not_invalid() {
        assert!(utf8_ok("é".as_bytes(), false, false));
        assert!(utf8_ok(&"é".as_bytes()[..1], false, true));
        assert!(utf8_ok(&"é".as_bytes()[1..], true, false));
        assert!(!utf8_ok(b"a\xffb", true, true));
    }

    #[test]
    fn shown_whole_is_true_only_where_shaping_writes_nothing() {
        assert!(shown_whole(&captured("a\nb\n"), &policy()));
        let long: String = (1..=1000).map(|i| format!("line {i}\n")).collect();
        assert!(!shown_whole(&captured(&long), &policy()));
        let bytes = b"caf\xe9\n".to_vec();
        let invalid = Captured {
            head: bytes.clone(),
            total_bytes: bytes.len() as u64,
            total_lines: 1,
            ..Default::default()
        };
        assert!(!shown_whole(&invalid, &policy()));
        // Wherever it says "whole", the shaped text is the input, untouched.
        let s = shape_stream(&captured("a\nb\n"), &policy(), "stdout", None);
        assert!(!s.truncated && s.full_output.is_none());
    }

    #[test]
    fn one_huge_line_is_cut_by_characters() {
        let text = "x".repeat(50_000);
        let s = shape_stream(&captured(&text), &policy(), "stdout", None);
        assert!(s.truncated);
        assert!(s.text.chars().count() < 11_000, "{}", s.text.len());
    }
}
