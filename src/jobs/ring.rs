//! The output of one job stream kept in memory: a byte ring of fixed capacity with absolute
//! offsets, read by cursor.
//!
//! Owns only the bookkeeping: what is unread, what fell out before it was read (counted,
//! never silently lost), the last complete line for listings. A flood costs at most the
//! capacity; everything also goes to the job's log file, which is `job`'s.

use std::collections::VecDeque;

/// Longest "last line" kept for the job list.
const LAST_LINE_MAX: usize = 200;

#[derive(Debug)]
pub(crate) struct Ring {
    buf: VecDeque<u8>,
    capacity: usize,
    /// Absolute offset (bytes ever written) of `buf[0]`.
    start: u64,
    /// Absolute offset up to which the output was read.
    read: u64,
    last_line: String,
    /// A line still being written (no newline yet), for `last_line`.
    partial: Vec<u8>,
}

/// One read of the unread part.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    pub bytes: Vec<u8>,
    /// Output that left the ring before anyone read it.
    pub dropped: u64,
    /// More unread output remains after this chunk (it was cut at the caller's bound).
    pub more: bool,
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            buf: VecDeque::new(),
            capacity: capacity.max(1),
            start: 0,
            read: 0,
            last_line: String::new(),
            partial: Vec::new(),
        }
    }

    /// Appends `data`, dropping the oldest bytes beyond the capacity.
    pub(crate) fn push(&mut self, data: &[u8]) {
        self.note_lines(data);
        let data = if data.len() > self.capacity {
            // Only the newest `capacity` bytes can stay; the rest is dropped at once.
            let skip = data.len() - self.capacity;
            self.start += (self.buf.len() + skip) as u64;
            self.buf.clear();
            &data[skip..]
        } else {
            data
        };
        self.buf.extend(data);
        let over = self.buf.len().saturating_sub(self.capacity);
        if over > 0 {
            self.buf.drain(..over);
            self.start += over as u64;
        }
    }

    fn note_lines(&mut self, data: &[u8]) {
        let mut rest = data;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let room = LAST_LINE_MAX.saturating_sub(self.partial.len());
            self.partial.extend_from_slice(&rest[..nl.min(room)]);
            let line = String::from_utf8_lossy(&self.partial);
            let line = line.trim_end_matches('\r');
            if !line.trim().is_empty() {
                self.last_line = line.to_owned();
            }
            self.partial.clear();
            rest = &rest[nl + 1..];
        }
        let room = LAST_LINE_MAX.saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&rest[..rest.len().min(room)]);
    }

    /// Bytes ever written.
    pub(crate) fn total(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    /// Absolute offset read so far.
    pub(crate) fn cursor(&self) -> u64 {
        self.read
    }

    pub(crate) fn has_unread(&self) -> bool {
        self.read < self.total()
    }

    /// The unread output without consuming it (for `until`), newest `max` bytes at most.
    pub(crate) fn peek_unread(&self, max: usize) -> Vec<u8> {
        let from = self.read.max(self.start) - self.start;
        let from = (from as usize).max(self.buf.len().saturating_sub(max));
        self.buf.range(from..).copied().collect()
    }

    /// The unread output from absolute offset `from` on (what is older, or already read, is
    /// left out), oldest first, at most `max` bytes.
    pub(crate) fn peek_since(&self, from: u64, max: usize) -> Vec<u8> {
        let from = from.max(self.read).max(self.start) - self.start;
        let from = (from as usize).min(self.buf.len());
        let to = from.saturating_add(max).min(self.buf.len());
        self.buf.range(from..to).copied().collect()
    }

    /// Consumes at most `max` unread bytes, oldest first.
    pub(crate) fn take_unread(&mut self, max: usize) -> Chunk {
        let dropped = self.start.saturating_sub(self.read);
        self.read = self.read.max(self.start);
        let from = (self.read - self.start) as usize;
        let n = (self.buf.len() - from).min(max);
        let bytes: Vec<u8> = self.buf.range(from..from + n).copied().collect();
        self.read += n as u64;
        Chunk {
            bytes,
            dropped,
            more: self.has_unread(),
        }
    }

    /// The last complete, non-blank line written (or the line being written).
    pub(crate) fn last_line(&self) -> String {
        if self.last_line.is_empty() {
            String::from_utf8_lossy(&self.partial).into_owned()
        } else {
            self.last_line.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_was_written_once() {
        let mut r = Ring::new(16);
        r.push(b"hello\n");
        let c = r.take_unread(100);
        assert_eq!(c.bytes, b"hello\n");
        assert_eq!((c.dropped, c.more), (0, false));
        assert_eq!(r.take_unread(100), Chunk::default());
        r.push(b"more");
        assert_eq!(r.take_unread(100).bytes, b"more");
        assert_eq!(r.cursor(), 10);
    }

    #[test]
    fn a_flood_keeps_the_newest_and_counts_the_rest() {
        let mut r = Ring::new(8);
        for _ in 0..1000 {
            r.push(b"0123456789");
        }
        assert_eq!(r.total(), 10_000);
        let c = r.take_unread(100);
        assert_eq!(c.bytes.len(), 8);
        assert_eq!(c.dropped, 10_000 - 8);
        assert_eq!(c.bytes, b"23456789");
        // One push larger than the ring.
        r.push(&[b'x'; 50]);
        let c = r.take_unread(100);
        assert_eq!((c.bytes.len(), c.dropped), (8, 42));
    }

    #[test]
    fn a_bounded_read_leaves_the_rest_for_the_next() {
        let mut r = Ring::new(64);
        r.push(b"abcdefghij");
        let c = r.take_unread(4);
        assert_eq!((c.bytes.as_slice(), c.more), (&b"abcd"[..], true));
        let c = r.take_unread(100);
        assert_eq!((c.bytes.as_slice(), c.more), (&b"efghij"[..], false));
    }

    #[test]
    fn peek_does_not_consume_and_last_line_skips_blanks() {
        let mut r = Ring::new(64);
        r.push(b"Serving HTTP on 127.0.0.1\n\n  \n");
        assert_eq!(r.peek_unread(1000), b"Serving HTTP on 127.0.0.1\n\n  \n");
        assert!(r.has_unread());
        assert_eq!(r.last_line(), "Serving HTTP on 127.0.0.1");
        r.push(b">>> ");
        assert_eq!(r.last_line(), "Serving HTTP on 127.0.0.1");
        let mut fresh = Ring::new(8);
        fresh.push(b">>> ");
        assert_eq!(fresh.last_line(), ">>> ");
    }
}
