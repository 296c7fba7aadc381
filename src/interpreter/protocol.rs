//! The framed protocol between the server and a session's driver (`driver.py`): each frame is a
//! 4-byte big-endian length followed by that many bytes of UTF-8 JSON.
//!
//! Owns the frame format and the message types. It runs over the worker's original stdin
//! (requests) and stdout (replies), which the driver moves to private descriptors before any
//! user code runs; cell output never travels here (it goes to the output files of `output`).
//! Knows nothing of processes, timeouts or MCP.

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest frame accepted from a driver. Replies carry figures as base64 PNG; anything larger
/// than this is a misbehaving session, not output.
pub(crate) const MAX_FRAME: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("the interpreter closed its end of the protocol pipe")]
    Closed,
    #[error("protocol pipe: {0}")]
    Io(std::io::Error),
    #[error("the interpreter sent a frame of {0} bytes, above the {MAX_FRAME}-byte bound")]
    TooLarge(usize),
    #[error("the interpreter sent a malformed frame: {0}")]
    Malformed(serde_json::Error),
}

/// server → driver.
#[derive(Debug, Serialize)]
pub(crate) struct Request<'a> {
    pub op: &'static str,
    pub id: u64,
    pub code: &'a str,
}

/// driver → server, once, when it is ready for requests.
#[derive(Debug, Deserialize)]
// The driver also sends its `pid`; the server knows the process already and leaves the field
// unread (serde skips fields a struct does not name).
pub struct Ready {
    pub ready: bool,
    pub python: Option<String>,
}

/// driver → server, one per request.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Reply {
    pub id: Option<u64>,
    /// repr() of the cell's final expression, when it had one whose value is not None.
    pub result: Option<String>,
    pub error: Option<PyException>,
    /// The cell ended in KeyboardInterrupt (the server's interrupt or the user's own).
    #[serde(default)]
    pub interrupted: bool,
    /// Figures as base64 PNG.
    #[serde(default)]
    pub images: Vec<String>,
}

/// A Python exception as the driver describes it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PyException {
    #[serde(rename = "type")]
    pub type_name: String,
    pub message: String,
    /// Formatted traceback, trimmed to the user's frames.
    #[serde(default)]
    pub traceback: String,
}

pub(crate) async fn write_frame(
    pipe: &mut (impl AsyncWrite + Unpin),
    message: &impl Serialize,
) -> Result<(), ProtocolError> {
    let body = serde_json::to_vec(message).map_err(ProtocolError::Malformed)?;
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    pipe.write_all(&frame).await.map_err(io_or_closed)?;
    pipe.flush().await.map_err(io_or_closed)
}

/// Reads one frame. Not cancel-safe: keep the future alive across `select!` arms (pin it)
/// rather than starting a new read, or the stream loses its framing.
pub async fn read_frame<T: serde::de::DeserializeOwned>(
    pipe: &mut (impl AsyncRead + Unpin),
) -> Result<T, ProtocolError> {
    let mut len = [0u8; 4];
    pipe.read_exact(&mut len).await.map_err(io_or_closed)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(ProtocolError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    pipe.read_exact(&mut body).await.map_err(io_or_closed)?;
    serde_json::from_slice(&body).map_err(ProtocolError::Malformed)
}

fn io_or_closed(e: std::io::Error) -> ProtocolError {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::BrokenPipe => ProtocolError::Closed,
        _ => ProtocolError::Io(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_frame_round_trips() {
        let mut buf = Vec::new();
        write_frame(
            &mut buf,
            &serde_json::json!({"id": 3, "result": "2", "images": []}),
        )
        .await
        .unwrap();
        assert_eq!(&buf[..4], &(buf.len() as u32 - 4).to_be_bytes());
        let reply: Reply = read_frame(&mut &buf[..]).await.unwrap();
        assert_eq!(reply.id, Some(3));
        assert_eq!(reply.result.as_deref(), Some("2"));
    }

    #[tokio::test]
    async fn a_truncated_frame_is_closed_not_garbage() {
        let buf = [0u8, 0, 0, 10, b'{'];
        let err = read_frame::<Reply>(&mut &buf[..]).await.unwrap_err();
        assert!(matches!(err, ProtocolError::Closed), "{err}");
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_before_allocating() {
        let buf = u32::MAX.to_be_bytes();
        let err = read_frame::<Reply>(&mut &buf[..]).await.unwrap_err();
        assert!(matches!(err, ProtocolError::TooLarge(_)), "{err}");
    }
}
