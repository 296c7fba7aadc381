//! The on-disk store of one workspace's checkpoints, in cordon's private state directory
//! (never inside the workspace, where confined code could read or forge it).
//!
//! Owns the layout and its consistency:
//! ```text
//! <state>/checkpoints/<sha256(workspace)[..16]>/
//!   lock          flock'd by whoever records or restores (server and `cordon checkpoints`)
//!   state.json    the newest state's number, how many checkpoints were dropped
//!   head.json     a recorded tree (manifest + stat cache): the newest, or an older one
//!                 that the records after it roll forward (state.json says which)
//!   records/N.json  checkpoint N: what changed from state N to state N+1, and by which call
//!   blobs/ab/cdef…  file contents by sha256, shared by every record and the head
//!   tmp/          blobs being written (emptied when the store opens)
//! ```
//! and the bounds: the oldest records go first ([`Store::evict`]) and a blob nobody needs
//! any more is deleted. Does not own: what is recorded (`scan`) or put back (`restore`).

use super::CheckpointError;
use super::entry::{Change, Manifest};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// One checkpoint as stored: the changes from the state it names to the next one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The state this checkpoint restores (its id is `cp-<seq>`).
    pub seq: u64,
    /// The call that made the changes (null: made between calls, by the operator or a job).
    pub call: Option<String>,
    pub tool: String,
    pub summary: String,
    pub created_at: String,
    pub created_unix: u64,
    /// Bytes of file contents this checkpoint added to the store.
    pub bytes: u64,
    pub changes: Vec<Change>,
}

/// `state.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct State {
    /// The newest recorded state's number (the next record's `seq`).
    pub head_seq: u64,
    /// Checkpoints dropped by the bounds so far.
    pub dropped: u64,
    /// Whether `head.json` holds a recorded tree yet.
    pub has_head: bool,
    /// The state `head.json` holds, when it is older than `head_seq`: the records from it
    /// up to `head_seq` roll it forward (their `after` entries), so a changing call need not
    /// rewrite the whole tree. None: `head.json` is at `head_seq` (every store before this
    /// field was written so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_file_seq: Option<u64>,
}

/// How many records `head.json` may lag behind the newest state before it is written whole
/// again: reading the store afresh (another process, a restart) replays at most these.
const HEAD_LAG_RECORDS: u64 = 32;

/// The store's directory (its files are cordon's alone: mode 0700).
pub(crate) struct Store {
    root: PathBuf,
    /// What the bounds need of each record, by its number, read once: a record's file is
    /// never changed after it is written (a number written again after a crash goes through
    /// [`Store::add_record`], which replaces it here too).
    summaries: std::sync::Mutex<HashMap<u64, Summary>>,
}

/// What [`Store::evict`] needs of one record without reading it again.
#[derive(Debug, Clone)]
struct Summary {
    created_unix: u64,
    /// The blobs its entries name (before and after), with their sizes.
    blobs: Vec<(String, u64)>,
}

impl Summary {
    fn of(record: &Record) -> Self {
        let blobs = record
            .changes
            .iter()
            .flat_map(|c| c.before.iter().chain(c.after.iter()))
            .filter_map(|entry| match &entry.kind {
                super::entry::Kind::File { sha256, size } => Some((sha256.clone(), *size)),
                _ => None,
            })
            .collect();
        Self {
            created_unix: record.created_unix,
            blobs,
        }
    }
}

/// An exclusive hold on a store, across processes; released when dropped.
pub(crate) struct Locked {
    _file: File,
}

/// What the bounds left, for `list`'s `budget`.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Budget {
    /// Bytes of file contents only checkpoints keep (no longer in the workspace as it is).
    pub bytes_used: u64,
    /// `[checkpoints] max_bytes`.
    pub bytes_max: u64,
    /// Checkpoints kept.
    pub count: u64,
    /// Checkpoints dropped by the bounds (oldest first) since the store was made.
    pub dropped: u64,
    /// Bytes of the copy of the workspace as it is now, which any restore needs; not counted
    /// in `bytes_used` (files over `max_file_bytes` are never copied).
    pub current_bytes: u64,
}

/// The bounds of `[checkpoints]`.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub max_bytes: u64,
    pub max_count: u64,
    pub max_age_secs: u64,
}

fn mkdir_private(path: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// Writes `bytes` to `path` atomically (temporary file beside it, then rename). Not synced:
/// the store is a record of the workspace, not the workspace; after a power loss the newest
/// record may be missing (or the head unreadable, and the next recording starts afresh),
/// which is cheaper than an fsync of a many-megabyte tree at every changing call.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    std::fs::rename(&tmp, path)
}

pub(crate) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Store {
    /// The store of the workspace at `canonical` under `base` (cordon's state directory),
    /// made when missing.
    pub(crate) fn open(base: &Path, canonical: &Path) -> Result<Self, CheckpointError> {
        use sha2::Digest;
        use std::os::unix::ffi::OsStrExt;
        let digest = sha2::Sha256::digest(canonical.as_os_str().as_bytes());
        let id: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        let root = base.join("checkpoints").join(id);
        let io = |e| CheckpointError::Store(root.clone(), e);
        for sub in ["records", "blobs", "tmp"] {
            mkdir_private(&root.join(sub)).map_err(io)?;
        }
        Ok(Self {
            root,
            summaries: Default::default(),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.root
    }

    fn io(&self, e: std::io::Error) -> CheckpointError {
        CheckpointError::Store(self.root.clone(), e)
    }

    /// Waits for the store's lock (another server or the operator's CLI may hold it while it
    /// records or restores), then empties `tmp/` of what an interrupted writer left.
    pub(crate) fn lock(&self) -> Result<Locked, CheckpointError> {
        // Opened for reading (flock needs no more): closing a file opened for writing is an
        // event for the fanotify fast path to resolve at every call.
        let path = self.root.join("lock");
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                File::create(&path).map_err(|e| self.io(e))?;
                File::open(&path).map_err(|e| self.io(e))?
            }
            Err(e) => return Err(self.io(e)),
        };
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| self.io(e.into()))?;
        if let Ok(entries) = std::fs::read_dir(self.root.join("tmp")) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(Locked { _file: file })
    }

    pub(crate) fn state(&self, _: &Locked) -> Result<State, CheckpointError> {
        match std::fs::read(self.root.join("state.json")) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| CheckpointError::Corrupt(self.root.join("state.json"), e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(State::default()),
            Err(e) => Err(self.io(e)),
        }
    }

    pub(crate) fn set_state(&self, _: &Locked, state: &State) -> Result<(), CheckpointError> {
        let bytes = serde_json::to_vec(state).expect("state serializes");
        write_atomic(&self.root.join("state.json"), &bytes).map_err(|e| self.io(e))
    }

    /// The newest recorded tree: `head.json`, rolled forward by the records after it. A
    /// path a record changed comes without a stat cache (the next scan reads it again).
    pub(crate) fn head(&self, lock: &Locked, state: &State) -> Result<Manifest, CheckpointError> {
        let path = self.root.join("head.json");
        let bytes = std::fs::read(&path).map_err(|e| self.io(e))?;
        let mut head: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| CheckpointError::Corrupt(path.clone(), e.to_string()))?;
        let from = state.head_file_seq.unwrap_or(state.head_seq);
        for seq in from..state.head_seq {
            let record = self.record(lock, seq)?.ok_or_else(|| {
                CheckpointError::Corrupt(
                    path.clone(),
                    format!("the record of state {seq} that rolls it forward is missing"),
                )
            })?;
            for change in record.changes {
                match change.after {
                    Some(entry) => {
                        head.insert(change.path, super::entry::Cached::unknown_stat(entry));
                    }
                    None => {
                        head.remove(&change.path);
                    }
                }
            }
        }
        Ok(head)
    }

    /// Keeps `head` (the tree at `state.head_seq`, whose record is already written) as the
    /// newest tree: written whole when `whole`, when `head.json` lags too far behind, or
    /// when it is missing; otherwise the records roll the older `head.json` forward.
    pub(crate) fn save_head(
        &self,
        lock: &Locked,
        state: &mut State,
        head: &Manifest,
        whole: bool,
    ) -> Result<(), CheckpointError> {
        let file_seq = state.head_file_seq.unwrap_or(state.head_seq);
        let lag = state.head_seq.saturating_sub(file_seq);
        let present = self.root.join("head.json").exists();
        if whole || lag >= HEAD_LAG_RECORDS || !present {
            self.write_head(lock, state, head)?;
        } else {
            state.head_file_seq = Some(file_seq);
        }
        Ok(())
    }

    /// Writes `head` whole as the tree at `state.head_seq`, and says so in `state` (the
    /// caller writes it: until then the older `head_file_seq` rolls this newer file forward
    /// again, which changes nothing, since records set absolute entries).
    fn write_head(
        &self,
        _: &Locked,
        state: &mut State,
        head: &Manifest,
    ) -> Result<(), CheckpointError> {
        let bytes = serde_json::to_vec(head).expect("manifest serializes");
        write_atomic(&self.root.join("head.json"), &bytes).map_err(|e| self.io(e))?;
        state.head_file_seq = None;
        Ok(())
    }

    fn record_path(&self, seq: u64) -> PathBuf {
        self.root.join("records").join(format!("{seq}.json"))
    }

    pub(crate) fn add_record(&self, _: &Locked, record: &Record) -> Result<(), CheckpointError> {
        let bytes = serde_json::to_vec(record).expect("record serializes");
        write_atomic(&self.record_path(record.seq), &bytes).map_err(|e| self.io(e))?;
        if let Ok(mut summaries) = self.summaries.lock() {
            summaries.insert(record.seq, Summary::of(record));
        }
        Ok(())
    }

    /// What the bounds need of the records `seqs`, read from disk only for those this
    /// process has not seen yet (None: gone since listed).
    fn summaries(
        &self,
        lock: &Locked,
        seqs: &[u64],
    ) -> Result<Vec<(u64, Summary)>, CheckpointError> {
        let mut out = Vec::with_capacity(seqs.len());
        for &seq in seqs {
            let known = self
                .summaries
                .lock()
                .ok()
                .and_then(|s| s.get(&seq).cloned());
            let summary = match known {
                Some(s) => s,
                None => {
                    let Some(record) = self.record(lock, seq)? else {
                        continue;
                    };
                    let s = Summary::of(&record);
                    if let Ok(mut summaries) = self.summaries.lock() {
                        summaries.insert(seq, s.clone());
                    }
                    s
                }
            };
            out.push((seq, summary));
        }
        if let Ok(mut summaries) = self.summaries.lock() {
            summaries.retain(|seq, _| seqs.binary_search(seq).is_ok());
        }
        Ok(out)
    }

    /// [`Store::evict`] when a bound may be exceeded, judged without the head: more records
    /// than `max_count`, the oldest past `max_age_secs`, or the records' blobs together
    /// (counting those the head still holds, so never less than what is charged) over
    /// `max_bytes`. What a changing call pays instead of a whole accounting.
    pub(crate) fn evict_if_over(
        &self,
        lock: &Locked,
        head: &Manifest,
        bounds: Bounds,
    ) -> Result<(), CheckpointError> {
        let seqs = self.record_seqs(lock)?;
        let summaries = self.summaries(lock, &seqs)?;
        let now = now_unix();
        let too_many = summaries.len() as u64 > bounds.max_count;
        let too_old = summaries
            .first()
            .is_some_and(|(_, s)| now.saturating_sub(s.created_unix) > bounds.max_age_secs);
        let mut seen = std::collections::HashSet::new();
        let upper: u64 = summaries
            .iter()
            .flat_map(|(_, s)| s.blobs.iter())
            .filter(|(sha, _)| seen.insert(sha.as_str()))
            .map(|(_, size)| size)
            .sum();
        if too_many || too_old || upper > bounds.max_bytes {
            self.evict(lock, head, bounds)?;
        }
        Ok(())
    }

    /// The numbers of the records kept, oldest first.
    pub(crate) fn record_seqs(&self, _: &Locked) -> Result<Vec<u64>, CheckpointError> {
        let mut seqs: Vec<u64> = std::fs::read_dir(self.root.join("records"))
            .map_err(|e| self.io(e))?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json")?.parse().ok())
            .collect();
        seqs.sort_unstable();
        Ok(seqs)
    }

    pub(crate) fn record(&self, _: &Locked, seq: u64) -> Result<Option<Record>, CheckpointError> {
        let path = self.record_path(seq);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| CheckpointError::Corrupt(path, e.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io(e)),
        }
    }

    fn blob_path(&self, sha: &str) -> PathBuf {
        let (a, b) = sha.split_at(2.min(sha.len()));
        self.root.join("blobs").join(a).join(b)
    }

    /// A new file in `tmp/` to write a blob into before its name (its hash) is known.
    pub(crate) fn blob_writer(&self) -> Result<(PathBuf, File), CheckpointError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let path = self.root.join("tmp").join(format!(
            "{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let file = File::create(&path).map_err(|e| self.io(e))?;
        Ok((path, file))
    }

    /// Files the blob written at `tmp` under its hash; returns whether it was new.
    pub(crate) fn adopt_blob(&self, tmp: &Path, sha: &str) -> Result<bool, CheckpointError> {
        let to = self.blob_path(sha);
        if to.exists() {
            let _ = std::fs::remove_file(tmp);
            return Ok(false);
        }
        if let Some(parent) = to.parent() {
            mkdir_private(parent).map_err(|e| self.io(e))?;
        }
        std::fs::rename(tmp, &to).map_err(|e| self.io(e))?;
        Ok(true)
    }

    /// The bytes of a blob, at most `limit` of them (the caller bounds what it shows).
    pub(crate) fn read_blob(&self, sha: &str, limit: u64) -> Result<Vec<u8>, CheckpointError> {
        let file = File::open(self.blob_path(sha)).map_err(|e| self.io(e))?;
        let mut out = Vec::new();
        file.take(limit)
            .read_to_end(&mut out)
            .map_err(|e| self.io(e))?;
        Ok(out)
    }

    pub(crate) fn open_blob(&self, sha: &str) -> Result<File, CheckpointError> {
        File::open(self.blob_path(sha)).map_err(|e| self.io(e))
    }

    /// Drops the oldest records until `bounds` hold, deletes the blobs nothing needs any
    /// more, and returns the budget after it. The head's blobs are always kept: a restore
    /// of any kept checkpoint starts from the tree as it is.
    pub(crate) fn evict(
        &self,
        lock: &Locked,
        head: &Manifest,
        bounds: Bounds,
    ) -> Result<Budget, CheckpointError> {
        let mut state = self.state(lock)?;
        let seqs = self.record_seqs(lock)?;
        // Blob → (size, references); the head counts as one reference that never goes.
        let mut refs: HashMap<String, (u64, u64, bool)> = HashMap::new();
        let mut current_bytes = 0;
        for cached in head.values() {
            if let (Some(sha), super::entry::Kind::File { size, .. }) =
                (cached.entry.blob(), &cached.entry.kind)
            {
                let slot = refs.entry(sha.to_owned()).or_insert((*size, 0, false));
                if !slot.2 {
                    current_bytes += size;
                }
                slot.2 = true;
            }
        }
        let records = self.summaries(lock, &seqs)?;
        for (_, summary) in &records {
            for (sha, size) in &summary.blobs {
                refs.entry(sha.clone()).or_insert((*size, 0, false)).1 += 1;
            }
        }
        let history = |refs: &HashMap<String, (u64, u64, bool)>| -> u64 {
            refs.values()
                .filter(|(_, n, in_head)| *n > 0 && !in_head)
                .map(|(size, ..)| size)
                .sum()
        };
        let mut bytes_used = history(&refs);
        let now = now_unix();
        let mut dropped_any = false;
        let mut kept = records.len() as u64;
        for (seq, summary) in &records {
            let too_many = kept > bounds.max_count;
            let too_big = bytes_used > bounds.max_bytes;
            let too_old = now.saturating_sub(summary.created_unix) > bounds.max_age_secs;
            if !(too_many || too_big || too_old) {
                break;
            }
            if state.head_file_seq.is_some_and(|file_seq| *seq >= file_seq) {
                // `head.json` needs this record to roll forward: it is written whole first.
                self.write_head(lock, &mut state, head)?;
                self.set_state(lock, &state)?;
            }
            for (sha, _) in &summary.blobs {
                if let Some(slot) = refs.get_mut(sha) {
                    slot.1 = slot.1.saturating_sub(1);
                    if slot.1 == 0 && !slot.2 {
                        bytes_used = bytes_used.saturating_sub(slot.0);
                    }
                }
            }
            std::fs::remove_file(self.record_path(*seq)).map_err(|e| self.io(e))?;
            state.dropped += 1;
            kept -= 1;
            dropped_any = true;
        }
        if dropped_any {
            self.set_state(lock, &state)?;
            self.collect_garbage(&refs)?;
        }
        Ok(Budget {
            bytes_used,
            bytes_max: bounds.max_bytes,
            count: kept,
            dropped: state.dropped,
            current_bytes,
        })
    }

    /// Deletes every blob that no record and not the head references.
    fn collect_garbage(
        &self,
        refs: &HashMap<String, (u64, u64, bool)>,
    ) -> Result<(), CheckpointError> {
        let blobs = self.root.join("blobs");
        for shard in std::fs::read_dir(&blobs).map_err(|e| self.io(e))?.flatten() {
            let Some(prefix) = shard.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            let Ok(files) = std::fs::read_dir(shard.path()) else {
                continue;
            };
            for file in files.flatten() {
                let Some(rest) = file.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let needed = refs
                    .get(&format!("{prefix}{rest}"))
                    .is_some_and(|(_, n, in_head)| *n > 0 || *in_head);
                if !needed {
                    let _ = std::fs::remove_file(file.path());
                }
            }
        }
        Ok(())
    }
}
