//! Line framing between the real stdin/stdout and rmcp: the one place that sees raw input
//! lines before they are parsed.
//!
//! rmcp silently drops a line that is not JSON (by design, to avoid error storms) and one
//! longer than its 16 MiB limit, which leaves a client waiting forever. SPEC.md wants a
//! malformed request answered with a JSON-RPC error and the server serving on, so this layer
//! answers those lines itself (-32700 parse error; -32600 for an oversized line, with the id
//! recovered from its start when possible) and forwards every other line untouched. It also
//! serialises all output so each JSON-RPC message reaches stdout as one whole line.

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The longest input line forwarded to rmcp (its own limit).
pub(super) const MAX_LINE: usize = 16 * 1024 * 1024;

/// Buffer between this layer and rmcp in each direction.
const PIPE: usize = 1 << 20;

/// Starts the framing tasks over `input`/`output` and returns the ends rmcp should use.
pub(super) fn frame<I, O>(input: I, output: O) -> (tokio::io::DuplexStream, tokio::io::DuplexStream)
where
    I: AsyncRead + Unpin + Send + 'static,
    O: AsyncWrite + Unpin + Send + 'static,
{
    let (to_rmcp, rmcp_reads) = tokio::io::duplex(PIPE);
    let (rmcp_writes, from_rmcp) = tokio::io::duplex(PIPE);
    let (errors_tx, errors_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(read_input(input, to_rmcp, errors_tx));
    tokio::spawn(write_output(from_rmcp, errors_rx, output));
    (rmcp_reads, rmcp_writes)
}

async fn read_input<I: AsyncRead + Unpin>(
    input: I,
    mut to_rmcp: tokio::io::DuplexStream,
    errors: mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, input);
    loop {
        let mut line = Vec::new();
        // Read at most MAX_LINE + 1 bytes of this line, so an endless line cannot grow memory.
        let n = match (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if line.last() != Some(&b'\n') && n > MAX_LINE {
            let id = recover_id(&line);
            tracing::warn!("dropping an input line over {MAX_LINE} bytes");
            if discard_rest_of_line(&mut reader).await.is_err() {
                break;
            }
            let _ = errors.send(error_line(
                id,
                -32600,
                &format!("request line is longer than {MAX_LINE} bytes and was not processed; send smaller arguments (e.g. write large content in several files)"),
            ));
            continue;
        }
        let body = trim_line(&line);
        if body.is_empty() {
            continue;
        }
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            let _ = errors.send(error_line(
                Value::Null,
                -32700,
                &format!("parse error: the line is not valid JSON ({e}); send one JSON-RPC message per line"),
            ));
            continue;
        }
        if to_rmcp.write_all(&line).await.is_err() {
            break;
        }
        if line.last() != Some(&b'\n') && to_rmcp.write_all(b"\n").await.is_err() {
            break;
        }
    }
    // EOF on stdin: rmcp sees EOF too and shuts the session down (cancelling in-flight calls).
    let _ = to_rmcp.shutdown().await;
}

async fn discard_rest_of_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
) -> std::io::Result<()> {
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            reader.consume(i + 1);
            return Ok(());
        }
        let len = buf.len();
        reader.consume(len);
    }
}

async fn write_output<O: AsyncWrite + Unpin>(
    from_rmcp: tokio::io::DuplexStream,
    mut errors: mpsc::UnboundedReceiver<Vec<u8>>,
    mut output: O,
) {
    let mut rmcp = BufReader::new(from_rmcp);
    let mut errors_open = true;
    loop {
        let mut line = Vec::new();
        let next = tokio::select! {
            read = rmcp.read_until(b'\n', &mut line) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => line,
            },
            err = errors.recv(), if errors_open => match err {
                Some(l) => l,
                None => { errors_open = false; continue; }
            },
        };
        let next = with_null_id(next);
        if output.write_all(&next).await.is_err() || output.flush().await.is_err() {
            break;
        }
    }
    // rmcp is done; answer any parse errors still queued, then close.
    while let Ok(l) = errors.try_recv() {
        let _ = output.write_all(&l).await;
    }
    let _ = output.flush().await;
}

/// JSON-RPC 2.0 wants `"id": null` on an error answering a request whose id could not be
/// read; rmcp leaves the member out. Only such lines (an error, no id, no method) are parsed.
fn with_null_id(line: Vec<u8>) -> Vec<u8> {
    let has = |needle: &[u8]| line.windows(needle.len()).any(|w| w == needle);
    if line.len() > 4096 || has(b"\"id\"") || has(b"\"method\"") || !has(b"\"error\"") {
        return line;
    }
    match serde_json::from_slice::<Value>(&line) {
        Ok(Value::Object(mut map)) if map.contains_key("error") => {
            map.insert("id".into(), Value::Null);
            let mut out = serde_json::to_vec(&map).unwrap_or(line);
            if out.last() != Some(&b'\n') {
                out.push(b'\n');
            }
            out
        }
        _ => line,
    }
}

fn trim_line(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    let start = line[..end]
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(end);
    &line[start..end]
}

fn error_line(id: Value, code: i64, message: &str) -> Vec<u8> {
    let mut v = serde_json::to_vec(&json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message}
    }))
    .unwrap_or_default();
    v.push(b'\n');
    v
}

/// The `id` of a request whose line is too long to parse, when it appears near the start
/// (clients usually serialise `jsonrpc`, `id`, `method` first).
fn recover_id(start: &[u8]) -> Value {
    let head = String::from_utf8_lossy(&start[..start.len().min(4096)]);
    let Some(pos) = head.find("\"id\"") else {
        return Value::Null;
    };
    let rest = head[pos + 4..].trim_start();
    let Some(rest) = rest.strip_prefix(':') else {
        return Value::Null;
    };
    let rest = rest.trim_start();
    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    match stream.next() {
        Some(Ok(v @ (Value::Number(_) | Value::String(_)))) => v,
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_recovered_from_the_start_of_a_long_line() {
        assert_eq!(
            recover_id(br#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"x":"aaaa"#),
            json!(42)
        );
        assert_eq!(recover_id(br#"{"id": "abc", "method""#), json!("abc"));
        assert_eq!(recover_id(br#"{"method":"x","params":{"#), Value::Null);
    }

    #[test]
    fn errors_without_id_get_a_null_id() {
        let fixed = with_null_id(b"{\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32600}}\n".to_vec());
        let v: Value = serde_json::from_slice(&fixed).unwrap();
        assert_eq!(v["id"], Value::Null);
        assert!(v.as_object().unwrap().contains_key("id"));
        let ok = b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n".to_vec();
        assert_eq!(with_null_id(ok.clone()), ok);
    }

    #[tokio::test]
    async fn malformed_lines_get_parse_errors_and_good_lines_pass_through() {
        let input: &[u8] = b"{not json\n\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
        let (mut rmcp_reads, rmcp_writes) = frame(input, tokio::io::sink());
        let mut got = String::new();
        rmcp_reads.read_to_string(&mut got).await.unwrap();
        assert_eq!(got, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
        drop(rmcp_writes);
    }
}
