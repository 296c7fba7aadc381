//! The audit log: one JSON line per tool call with what was asked, what was decided, what
//! happened and under which enforcement.
//!
//! Append-only and line-buffered so `tail -f` and log shippers see whole records; long
//! argument strings are shortened so a log cannot balloon with file contents. Owns the file
//! format only; callers decide what an outcome is.

use serde::Serialize;
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Strings in logged arguments longer than this are cut (with their length noted).
const MAX_LOGGED_STRING: usize = 200;

pub struct AuditLog {
    file: Mutex<std::fs::File>,
}

#[derive(Debug, Serialize)]
pub struct AuditRecord<'a> {
    pub time: String,
    pub tool: &'a str,
    pub arguments: Value,
    pub decision: &'a str,
    pub outcome: Value,
    pub duration_ms: u64,
    pub enforcement: &'a str,
}

impl AuditLog {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            file: Mutex::new(file),
        })
    }

    pub fn record(&self, record: &AuditRecord<'_>) {
        let Ok(mut line) = serde_json::to_vec(record) else {
            return;
        };
        line.push(b'\n');
        if let Ok(mut f) = self.file.lock() {
            // One write per record keeps lines whole even with concurrent calls (O_APPEND).
            if let Err(e) = f.write_all(&line) {
                tracing::warn!("audit log write failed: {e}");
            }
        }
    }
}

/// The arguments with every long string shortened.
pub fn shorten(value: &Value) -> Value {
    match value {
        Value::String(s) if s.chars().count() > MAX_LOGGED_STRING => {
            let kept: String = s.chars().take(MAX_LOGGED_STRING).collect();
            Value::String(format!("{kept}…({} chars)", s.chars().count()))
        }
        Value::Array(items) => Value::Array(items.iter().map(shorten).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), shorten(v))).collect())
        }
        other => other.clone(),
    }
}

/// Now as RFC 3339 UTC with milliseconds, without pulling in a date crate.
pub fn now_rfc3339() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{:03}Z",
        now.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_strings_are_shortened_recursively() {
        let v = serde_json::json!({"content": "x".repeat(1000), "edits": [{"old_string": "y".repeat(300)}], "n": 3});
        let s = shorten(&v);
        assert!(s["content"].as_str().unwrap().ends_with("…(1000 chars)"));
        assert!(
            s["edits"][0]["old_string"]
                .as_str()
                .unwrap()
                .ends_with("…(300 chars)")
        );
        assert_eq!(s["n"], 3);
    }

    #[test]
    fn timestamp_has_rfc3339_shape() {
        let t = now_rfc3339();
        assert_eq!(t.len(), 24, "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z'));
    }
}
