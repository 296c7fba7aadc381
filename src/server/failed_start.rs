//! When the server cannot start (no Landlock, a bad policy, a refused workspace), the host
//! should show why, not just "failed to connect".
//!
//! The reason always goes to stderr first, as one line (hosts show or log a server's stderr).
//! Then, because many hosts show only what the protocol carries, the first request that
//! arrives on stdin within a short wait, normally `initialize`, is answered with a JSON-RPC
//! error whose message is that reason. Nothing else is served.

use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// JSON-RPC "server error" code used for "this server could not start".
pub(crate) const START_FAILED: i64 = -32001;

/// How long to wait for a client's first request before exiting anyway.
pub const WAIT_FOR_REQUEST: Duration = Duration::from_secs(10);

/// Answers the first request read from stdin (within `wait`) with an error carrying
/// `reason`. Returns whether a request was answered.
pub async fn answer_first_request(reason: &str, wait: Duration) -> bool {
    let work = async {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            // Notifications have no id and get no answer.
            let Some(id) = message.get("id").filter(|id| !id.is_null()).cloned() else {
                continue;
            };
            let mut out = serde_json::to_vec(&error_response(id, reason)).unwrap_or_default();
            out.push(b'\n');
            let mut stdout = tokio::io::stdout();
            let _ = stdout.write_all(&out).await;
            let _ = stdout.flush().await;
            return true;
        }
        false
    };
    tokio::time::timeout(wait, work).await.unwrap_or(false)
}

fn error_response(id: Value, reason: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": START_FAILED,
            "message": format!("cordon could not start: {reason}"),
            "data": {"reason": reason},
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_carries_the_reason_and_the_request_id() {
        let v = error_response(json!(0), "Landlock is not available");
        assert_eq!(v["id"], 0);
        assert_eq!(v["error"]["code"], START_FAILED);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Landlock is not available")
        );
    }
}
