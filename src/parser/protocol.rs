//! The parser worker's wire format: what the server asks and what the worker answers, and the
//! framing that carries both over the worker's stdin and stdout.
//!
//! Owns encoding and decoding only. Every frame is `[version: u8][length: u32 LE][body]`, the
//! body is JSON of one [`Request`] or [`Response`], and every length is bounded before anything
//! is allocated for it: a frame is at most [`MAX_FRAME`] bytes, a text at most [`MAX_TEXT`].
//! A malformed frame is a [`ProtocolError`], never a panic, on either side: the worker is
//! untrusted by the server (it parses hostile text and may be subverted), and the server's
//! requests are checked by the worker because that is cheap and keeps the decoder honest.
//! Running the grammars is `worker`'s job, spawning and timing the worker is `client`'s.

use super::bash::Analysis;
use super::syntax::{Language, SyntaxError};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// Bumped whenever a message changes shape; both sides refuse a frame of another version.
/// 2: a syntax check answers the parser's own [`SyntaxError`]s (`errors`), not lint
/// diagnostics. 3: a simple command's words are `words` (were `argv`).
pub(crate) const VERSION: u8 = 3;

/// Bytes of the frame header: version and body length.
pub(crate) const HEADER_LEN: usize = 5;

/// Largest text the server sends for one check (the syntax check of a file, or all the
/// command lines of one analysis). Larger texts are not sent at all.
pub(crate) const MAX_TEXT: usize = 16 << 20;

/// Largest frame body either side accepts: a maximal text plus its JSON escaping headroom.
/// Anything longer is refused from its header alone, before it is read.
pub const MAX_FRAME: usize = MAX_TEXT * 2 + 4096;

/// Most command lines in one analysis request (the policy's rule examples are the largest
/// batch: a few hundred).
pub(crate) const MAX_LINES: usize = 4096;

/// What the server asks the worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// The syntax check of one text.
    Syntax {
        id: u64,
        language: Language,
        text: String,
        /// Remember this text's tree under this key, for a later incremental re-parse.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remember: Option<u64>,
        /// The key of an earlier text this one was edited from: when the worker still has
        /// its tree, only the changed region is re-parsed. The answer equals a fresh parse.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous: Option<u64>,
    },
    /// Which simple commands each command line runs (see `bash`).
    Commands { id: u64, lines: Vec<String> },
}

impl Request {
    pub fn id(&self) -> u64 {
        match self {
            Request::Syntax { id, .. } | Request::Commands { id, .. } => *id,
        }
    }

    /// Checks the bounds the decoder cannot express: text sizes and counts.
    pub fn validate(&self) -> Result<(), ProtocolError> {
        match self {
            Request::Syntax { text, .. } if text.len() > MAX_TEXT => Err(ProtocolError::TooLarge {
                what: "syntax text",
                len: text.len(),
                max: MAX_TEXT,
            }),
            Request::Commands { lines, .. } if lines.len() > MAX_LINES => {
                Err(ProtocolError::TooLarge {
                    what: "command line count",
                    len: lines.len(),
                    max: MAX_LINES,
                })
            }
            Request::Commands { lines, .. } => {
                let total: usize = lines.iter().map(String::len).sum();
                if total > MAX_TEXT {
                    return Err(ProtocolError::TooLarge {
                        what: "command text",
                        len: total,
                        max: MAX_TEXT,
                    });
                }
                Ok(())
            }
            Request::Syntax { .. } => Ok(()),
        }
    }
}

/// What the worker answers; `id` is the request's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Response {
    Syntax {
        id: u64,
        outcome: SyntaxOutcome,
    },
    /// One analysis per requested line, in order.
    Commands {
        id: u64,
        analyses: Vec<Analysis>,
    },
    /// The request could not be understood (bad frame, wrong version, over a bound).
    Error {
        id: u64,
        message: String,
    },
}

impl Response {
    pub fn id(&self) -> u64 {
        match self {
            Response::Syntax { id, .. }
            | Response::Commands { id, .. }
            | Response::Error { id, .. } => *id,
        }
    }
}

/// The verdict of one syntax check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case", deny_unknown_fields)]
pub enum SyntaxOutcome {
    /// The grammar ran; an empty list means it accepted the text.
    Checked {
        errors: Vec<SyntaxError>,
        /// True when the worker still had the remembered tree of `previous` (it reuses it
        /// unless most of the text changed, where a fresh parse is cheaper).
        incremental: bool,
    },
    /// The parse exceeded its budget.
    TooSlow { budget_ms: u64 },
    /// The grammar could not be loaded.
    Grammar { detail: String },
}

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("frame of protocol version {found}, expected {VERSION}")]
    Version { found: u8 },
    #[error("{what} of {len} bytes is over the limit of {max}")]
    TooLarge {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("malformed frame body: {0}")]
    Body(String),
    #[error("the stream ended inside a frame")]
    Truncated,
    #[error("pipe error: {0}")]
    Io(#[from] std::io::Error),
}

/// The header of a frame whose body is `len` bytes.
fn header(len: usize) -> Result<[u8; HEADER_LEN], ProtocolError> {
    if len > MAX_FRAME {
        return Err(ProtocolError::TooLarge {
            what: "frame",
            len,
            max: MAX_FRAME,
        });
    }
    let mut h = [0u8; HEADER_LEN];
    h[0] = VERSION;
    h[1..].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(h)
}

/// Body length named by a header, after checking its version and bound.
pub(crate) fn parse_header(h: &[u8; HEADER_LEN]) -> Result<usize, ProtocolError> {
    if h[0] != VERSION {
        return Err(ProtocolError::Version { found: h[0] });
    }
    let len = u32::from_le_bytes([h[1], h[2], h[3], h[4]]) as usize;
    if len > MAX_FRAME {
        return Err(ProtocolError::TooLarge {
            what: "frame",
            len,
            max: MAX_FRAME,
        });
    }
    Ok(len)
}

/// One message as a complete frame.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, ProtocolError> {
    let body = serde_json::to_vec(message).map_err(|e| ProtocolError::Body(e.to_string()))?;
    let mut frame = Vec::with_capacity(HEADER_LEN + body.len());
    frame.extend_from_slice(&header(body.len())?);
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Decodes a frame body.
pub fn decode_body<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ProtocolError> {
    serde_json::from_slice(body).map_err(|e| ProtocolError::Body(e.to_string()))
}

/// Decodes the first frame of `bytes`: the message and how many bytes it took, or None when
/// `bytes` holds only part of a frame so far.
pub fn decode_frame<T: for<'de> Deserialize<'de>>(
    bytes: &[u8],
) -> Result<Option<(T, usize)>, ProtocolError> {
    let Some(h) = bytes.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let len = parse_header(h)?;
    let Some(body) = bytes.get(HEADER_LEN..HEADER_LEN + len) else {
        return Ok(None);
    };
    Ok(Some((decode_body(body)?, HEADER_LEN + len)))
}

/// Reads one frame's body from a blocking stream (the worker's stdin). None at a clean end of
/// stream between frames.
pub fn read_body(r: &mut impl Read) -> Result<Option<Vec<u8>>, ProtocolError> {
    let mut h = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(ProtocolError::Truncated),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let len = parse_header(&h)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => ProtocolError::Truncated,
        _ => ProtocolError::Io(e),
    })?;
    Ok(Some(body))
}

/// Writes one message as a frame to a blocking stream (the worker's stdout) and flushes it.
pub(crate) fn write_message<T: Serialize>(
    w: &mut impl Write,
    message: &T,
) -> Result<(), ProtocolError> {
    w.write_all(&encode(message)?)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame's body from an async stream (the server's end of the worker's stdout).
pub(crate) async fn read_body_async(
    r: &mut (impl tokio::io::AsyncRead + Unpin),
) -> Result<Vec<u8>, ProtocolError> {
    use tokio::io::AsyncReadExt;
    let mut h = [0u8; HEADER_LEN];
    r.read_exact(&mut h).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => ProtocolError::Truncated,
        _ => ProtocolError::Io(e),
    })?;
    let len = parse_header(&h)?;
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => ProtocolError::Truncated,
        _ => ProtocolError::Io(e),
    })?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_survives_the_round_trip() {
        let req = Request::Syntax {
            id: 7,
            language: Language::Python,
            text: "def f(:\n  é\"\\".into(),
            remember: Some(1),
            previous: None,
        };
        let frame = encode(&req).unwrap();
        let (back, used): (Request, usize) = decode_frame(&frame).unwrap().unwrap();
        assert_eq!((back, used), (req, frame.len()));
        // Every strict prefix is "not yet", never an error or a panic.
        for cut in 0..frame.len() {
            assert!(decode_frame::<Request>(&frame[..cut]).unwrap().is_none());
        }
    }

    /// Version 2's answer to a syntax check: the parser's own errors, no lint fields.
    #[test]
    fn a_syntax_answer_carries_the_parsers_errors() {
        let body = r#"{"type": "syntax", "id": 1, "outcome": {"result": "checked", "errors": [{"line": 1, "column": 7, "end_line": 1, "end_column": 7, "kind": "missing", "message": "missing `)`"}], "incremental": true}}"#;
        let answer: Response = decode_body(body.as_bytes()).unwrap();
        let Response::Syntax {
            outcome:
                SyntaxOutcome::Checked {
                    errors,
                    incremental,
                },
            ..
        } = answer
        else {
            panic!("not a checked syntax answer: {answer:?}");
        };
        assert!(incremental);
        assert_eq!(errors[0].kind, crate::parser::syntax::ErrorKind::Missing);
        // A version 1 answer (lint diagnostics) is refused, not misread.
        let old = body.replace(r#""kind": "missing""#, r#""severity": "error""#);
        assert!(decode_body::<Response>(old.as_bytes()).is_err());
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        let mut frame = encode(&Request::Commands {
            id: 1,
            lines: vec!["ls".into()],
        })
        .unwrap();
        frame[0] = VERSION + 1;
        assert!(matches!(
            decode_frame::<Request>(&frame),
            Err(ProtocolError::Version { .. })
        ));
        let huge = [VERSION, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            decode_frame::<Request>(&huge),
            Err(ProtocolError::TooLarge { .. })
        ));
        let garbage = [&[VERSION, 3, 0, 0, 0][..], b"{x}"].concat();
        assert!(matches!(
            decode_frame::<Request>(&garbage),
            Err(ProtocolError::Body(_))
        ));
        let unknown = encode(&serde_json::json!({"type": "format_disk", "id": 1})).unwrap();
        assert!(decode_frame::<Request>(&unknown).is_err());
        let truncated = &encode(&Response::Error {
            id: 1,
            message: "x".into(),
        })
        .unwrap()[..7];
        assert!(matches!(
            read_body(&mut &truncated[..]),
            Err(ProtocolError::Truncated)
        ));
    }

    #[test]
    fn oversized_batches_are_refused() {
        let req = Request::Commands {
            id: 1,
            lines: vec![String::new(); MAX_LINES + 1],
        };
        assert!(req.validate().is_err());
    }
}
