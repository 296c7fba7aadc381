//! Draining one output stream of a child: bounded memory, exact counts, optional spill file
//! and pass-through.
//!
//! The reader never stops reading (a child blocked on a full pipe would look like a hang); it
//! keeps the first and the last `cap/2` bytes in memory, counts everything, and once the
//! output outgrows memory streams all of it to a spill file so nothing is lost. Deciding how
//! much of that to *show* is `shape`'s job, not this module's.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Opens the spill file on first need: returns its display path and the file.
pub(crate) type SpillOpener = Box<dyn FnOnce() -> io::Result<(String, std::fs::File)> + Send>;

/// How one stream is captured.
pub struct CaptureSpec {
    /// Bytes kept in memory (half head, half tail).
    pub memory_cap: usize,
    /// Where the full stream goes once it does not fit in memory (None: the middle is lost,
    /// but counted).
    pub spill: Option<SpillOpener>,
    /// Copy every byte here as it arrives (`cordon exec` passes output through).
    pub tee: Option<Pin<Box<dyn AsyncWrite + Send>>>,
}

impl CaptureSpec {
    /// At most `memory_cap` bytes kept (head and tail), no spill file, no pass-through.
    pub fn in_memory(memory_cap: usize) -> Self {
        Self {
            memory_cap,
            spill: None,
            tee: None,
        }
    }
}

/// The most written to one spill file (owned by the spill area, `workspace::spill`).
pub(crate) use crate::workspace::SPILL_LIMIT;

/// Bytes this process has written to spill files, ever. The disk budget (`disk`) credits a
/// call with what the server spilled while it ran: output the server saves is bounded by the
/// spill area's own limits, and is not the call's writing.
static SPILLED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// See [`SPILLED`].
pub(crate) fn spilled_total() -> u64 {
    SPILLED.load(std::sync::atomic::Ordering::Relaxed)
}

pub(crate) fn count_spilled(n: usize) {
    SPILLED.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
}

/// What was captured of one stream.
#[derive(Debug, Default, Clone)]
pub struct Captured {
    /// The first bytes, up to half the memory cap.
    pub head: Vec<u8>,
    /// The last bytes, up to half the memory cap; empty when everything fit in `head`.
    pub tail: Vec<u8>,
    pub total_bytes: u64,
    pub total_lines: u64,
    /// Display path of the spill file holding the complete stream, if one was written.
    pub spill_path: Option<String>,
    /// Why the spill file is incomplete or missing, if it is.
    pub spill_error: Option<String>,
}

impl Captured {
    /// True when `head` + `tail` are the whole stream.
    pub fn is_complete(&self) -> bool {
        (self.head.len() + self.tail.len()) as u64 == self.total_bytes
    }

    /// The whole stream when it is complete in memory.
    pub fn complete_bytes(&self) -> Option<Vec<u8>> {
        self.is_complete()
            .then(|| [self.head.as_slice(), self.tail.as_slice()].concat())
    }
}

/// The latest complete line seen on either stream, for progress reports.
#[derive(Debug, Default)]
pub struct LiveStatus {
    last_line: Mutex<String>,
}

impl LiveStatus {
    pub fn last_line(&self) -> String {
        self.last_line.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn observe(&self, chunk: &[u8]) {
        const MAX: usize = 200;
        let trimmed = chunk.strip_suffix(b"\n").unwrap_or(chunk);
        let start = trimmed
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let line = &trimmed[start..];
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let text = String::from_utf8_lossy(&line[..line.len().min(MAX)]).into_owned();
        if let Ok(mut l) = self.last_line.lock() {
            *l = text;
        }
    }
}

/// Reads `pipe` to EOF according to `spec`.
pub(crate) async fn drain(
    pipe: impl AsyncRead + Unpin,
    spec: CaptureSpec,
    live: Option<Arc<LiveStatus>>,
    stop: tokio_util::sync::CancellationToken,
) -> Captured {
    drain_with_limit(pipe, spec, live, stop, SPILL_LIMIT).await
}

async fn drain_with_limit(
    mut pipe: impl AsyncRead + Unpin,
    mut spec: CaptureSpec,
    live: Option<Arc<LiveStatus>>,
    stop: tokio_util::sync::CancellationToken,
    spill_limit: u64,
) -> Captured {
    let half = (spec.memory_cap / 2).max(1);
    let mut out = Captured::default();
    let mut tail: VecDeque<u8> = VecDeque::new();
    let mut spill: Option<tokio::fs::File> = None;
    let mut spilled: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::select! {
            r = pipe.read(&mut buf) => r,
            _ = stop.cancelled() => break,
        };
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buf[..n];
        out.total_bytes += n as u64;
        out.total_lines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        if let Some(live) = &live {
            live.observe(chunk);
        }
        if let Some(tee) = spec.tee.as_mut() {
            // A closed terminal must not stop the drain; the child keeps running until the
            // call ends either way.
            if tee.write_all(chunk).await.is_err() {
                spec.tee = None;
            }
        }

        let room = half.saturating_sub(out.head.len());
        let (to_head, rest) = chunk.split_at(room.min(n));
        out.head.extend_from_slice(to_head);
        if rest.is_empty() {
            continue;
        }
        if spill.is_none()
            && out.spill_error.is_none()
            && let Some(open) = spec.spill.take()
        {
            match open_spill(open, &out.head, &tail).await {
                Ok((path, file)) => {
                    out.spill_path = Some(path);
                    spill = Some(file);
                    spilled = (out.head.len() + tail.len()) as u64;
                }
                Err(e) => out.spill_error = Some(e.to_string()),
            }
        }
        if let Some(file) = spill.as_mut() {
            let room = spill_limit.saturating_sub(spilled) as usize;
            let part = &rest[..rest.len().min(room)];
            match file.write_all(part).await {
                Err(e) => {
                    out.spill_error = Some(format!("spill file incomplete: {e}"));
                    spill = None;
                }
                Ok(()) => {
                    count_spilled(part.len());
                    if part.len() < rest.len() {
                        // tokio's File writes in the background; flush before letting it go.
                        let _ = file.flush().await;
                        out.spill_error = Some(format!(
                            "the saved output stops after its first {spill_limit} bytes"
                        ));
                        spill = None;
                    }
                }
            }
            spilled += part.len() as u64;
        }
        tail.extend(rest);
        if tail.len() > half {
            tail.drain(..tail.len() - half);
        }
    }
    if let Some(tee) = spec.tee.as_mut() {
        let _ = tee.flush().await;
    }
    if let Some(mut file) = spill {
        let _ = file.flush().await;
    }
    out.tail = tail.into();
    out
}

async fn open_spill(
    open: SpillOpener,
    head: &[u8],
    tail: &VecDeque<u8>,
) -> io::Result<(String, tokio::fs::File)> {
    let (path, file) = open()?;
    let mut file = tokio::fs::File::from_std(file);
    file.write_all(head).await?;
    let (a, b) = tail.as_slices();
    file.write_all(a).await?;
    file.write_all(b).await?;
    count_spilled(head.len() + tail.len());
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cap: usize) -> CaptureSpec {
        CaptureSpec {
            memory_cap: cap,
            spill: None,
            tee: None,
        }
    }

    #[tokio::test]
    async fn small_output_is_complete() {
        let c = drain(&b"a\nb\n"[..], spec(100), None, Default::default()).await;
        assert_eq!(c.complete_bytes().unwrap(), b"a\nb\n");
        assert_eq!(c.total_lines, 2);
    }

    #[tokio::test]
    async fn large_output_keeps_head_and_tail_and_counts_all() {
        let data: Vec<u8> = (0..10_000u32)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        let c = drain(&data[..], spec(100), None, Default::default()).await;
        assert_eq!(c.total_bytes, data.len() as u64);
        assert_eq!(c.total_lines, 10_000);
        assert_eq!(c.head, &data[..50]);
        assert_eq!(c.tail, &data[data.len() - 50..]);
        assert!(!c.is_complete());
    }

    #[tokio::test]
    async fn spill_file_gets_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spill");
        let p2 = path.clone();
        let data: Vec<u8> = (0..5_000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        let mut s = spec(64);
        s.spill = Some(Box::new(move || {
            Ok(("spill".into(), std::fs::File::create(p2)?))
        }));
        let c = drain(&data[..], s, None, Default::default()).await;
        assert_eq!(c.spill_path.as_deref(), Some("spill"));
        assert_eq!(std::fs::read(path).unwrap(), data);
    }

    #[tokio::test]
    async fn spill_file_stops_at_its_limit_while_the_stream_is_still_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spill");
        let p2 = path.clone();
        let data = vec![b'x'; 100_000];
        let mut s = spec(64);
        s.spill = Some(Box::new(move || {
            Ok(("spill".into(), std::fs::File::create(p2)?))
        }));
        let c = drain_with_limit(&data[..], s, None, Default::default(), 10_000).await;
        assert_eq!(c.total_bytes, 100_000);
        assert_eq!(std::fs::read(path).unwrap().len(), 10_000);
        assert!(c.spill_error.unwrap().contains("first 10000 bytes"));
    }

    #[test]
    fn live_status_keeps_last_nonblank_line() {
        let s = LiveStatus::default();
        s.observe(b"one\ntwo\n");
        assert_eq!(s.last_line(), "two");
        s.observe(b"\n");
        assert_eq!(s.last_line(), "two");
    }
}
