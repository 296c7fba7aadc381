//! The git index file (`.git/index`), read and edited at the byte level.
//!
//! Owns two uses of the format by the in-process import. **Reading a claim**
//! ([`cache_tree_root`], or [`eoie_extensions_offset`] then [`cache_tree_root_in_extensions`]):
//! the root tree an index's cache tree (its `TREE` extension) says the index would write. It
//! runs on the shadow's index, which confined code wrote, so its input is hostile: every
//! length read from the file is checked, nothing is allocated by a count read from it, nesting
//! is followed without recursion, and anything git would not have written is an error, never a
//! panic (fuzzed: `git_index`). The answer stays a claim, which the caller vets like any other
//! tree. **Editing** ([`edit`] or [`edit_pieces`], [`trailer`] or [`trailer_of`]): the
//! operator's index with a few paths changed: at 100,000 files, under a millisecond as pieces
//! (the runs of unchanged entries left in place), about a millisecond more to copy them into
//! one buffer, where `git update-index` parses and rewrites every entry (30 ms); with an
//! [`EntryTable`] of the same bytes (made once by [`entry_table`], which also checks git's
//! order), [`edit_pieces_at`] jumps to the changed paths by binary search (0.03 ms), writing
//! exactly what the walk writes. That index is
//! git's own, so the edit trusts its order, but it walks it with the same checked reader,
//! keeps unchanged runs of entries byte for byte, writes
//! only the changed entries anew, invalidates the cache tree along their paths (a record left
//! valid would make the operator's next commit record the old content), and leaves to git
//! (`Unsupported`) every index it does not fully understand: split and sparse indexes,
//! conflicts, required extensions it does not know.
//!
//! The format: <https://git-scm.com/docs/index-format>; where that page is silent, git's
//! `read-cache.c` and `cache-tree.c` decide (entry sizes follow the name length in the flags,
//! as git computes them).

use std::borrow::Cow;
use std::cmp::Ordering;

/// Why an index could not be read or edited.
#[derive(Debug, thiserror::Error)]
pub enum IndexFileError {
    /// Not an index git writes, or a change set that cannot apply.
    #[error("malformed git index: {0}")]
    Malformed(String),
    /// A valid index (or change) this editor leaves to git.
    #[error("git index left to git: {0}")]
    Unsupported(String),
}

type Result<T> = std::result::Result<T, IndexFileError>;

fn malformed(why: impl Into<String>) -> IndexFileError {
    IndexFileError::Malformed(why.into())
}

fn unsupported(why: impl Into<String>) -> IndexFileError {
    IndexFileError::Unsupported(why.into())
}

/// One change: `entry` None removes `path`, Some((mode, raw object id)) adds or replaces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: Vec<u8>,
    pub entry: Option<(u32, Vec<u8>)>,
}

const HEADER_LEN: usize = 12;
/// ctime and mtime (seconds, nanoseconds), dev, ino, mode, uid, gid, size: ten u32.
const STAT_LEN: usize = 40;
const MODE_AT: usize = 24;
const FLAG_EXTENDED: u16 = 0x4000;
const NAME_MASK: u16 = 0x0fff;
const STAGE_MASK: u16 = 0x3000;
const MODE_TYPE: u32 = 0o170000;
const MODE_DIRECTORY: u32 = 0o040000;
/// The modes git gives an entry: blob, executable, symlink, gitlink.
const ENTRY_MODES: [u32; 4] = [0o100644, 0o100755, 0o120000, 0o160000];
const EXTENSION_HEADER_LEN: usize = 8;
const TREE: [u8; 4] = *b"TREE";
const REUC: [u8; 4] = *b"REUC";
const EOIE: [u8; 4] = *b"EOIE";
const LINK: [u8; 4] = *b"link";
const SDIR: [u8; 4] = *b"sdir";
/// The largest count a cache-tree record holds (git parses them into an `int`).
const MAX_TREE_COUNT: u64 = i32::MAX as u64;

/// The root tree the index's cache tree claims (None: no TREE extension, or its root record is
/// invalid). Walks the entries to find the extensions; an EOIE extension must agree with them.
pub fn cache_tree_root(index: &[u8], oid_len: usize) -> Result<Option<Vec<u8>>> {
    check_oid_len(oid_len)?;
    let header = read_header(index)?;
    let layout = Layout::new(index, header.version, oid_len)?;
    let mut pos = HEADER_LEN;
    let mut prev_len = 0;
    // Each entry takes at least 62 bytes, so a hostile count ends at the data's end.
    for _ in 0..header.count {
        let entry = entry_at(index, pos, &layout, prev_len)?;
        prev_len = entry.path_len();
        pos = entry.end;
    }
    let extensions = index
        .get(pos..layout.limit)
        .ok_or_else(|| malformed("the entries run into the trailer"))?;
    let found = read_extensions(extensions, oid_len)?;
    if let Some(offset) = found.eoie_offset
        && usize::try_from(offset).ok() != Some(pos)
    {
        return Err(malformed(
            "its EOIE extension does not point where the entries end",
        ));
    }
    found.tree.map_or(Ok(None), |tree| tree_root(tree, oid_len))
}

/// How many bytes at the end of an index [`eoie_extensions_offset`] reads: an EOIE extension
/// (header, offset, hash) and the trailer.
pub fn eoie_tail_len(oid_len: usize) -> usize {
    EXTENSION_HEADER_LEN + 4 + 2 * oid_len
}

/// Where the extensions start according to an EOIE extension, given the file's last
/// [`eoie_tail_len`] bytes and the file's length; None when there is no plausible EOIE. Only
/// a pointer: [`cache_tree_root_in_extensions`] checks the EOIE's hash of what it finds there.
pub fn eoie_extensions_offset(tail: &[u8], file_len: u64, oid_len: usize) -> Option<u64> {
    if tail.len() != eoie_tail_len(oid_len) || tail.get(..4)? != EOIE {
        return None;
    }
    if usize::try_from(be32(tail, 4)?).ok()? != 4 + oid_len {
        return None;
    }
    let offset = u64::from(be32(tail, 8)?);
    let eoie_at = file_len.checked_sub(tail.len() as u64)?;
    (offset >= HEADER_LEN as u64 && offset <= eoie_at).then_some(offset)
}

/// The same claim as [`cache_tree_root`] read from the extensions alone: `extensions` are the
/// bytes from the first extension up to (not including) the trailer. An EOIE extension among
/// them must be the last and hash their headers; whether the entries really end where they
/// start is not known here (a hostile index can make the two routes disagree).
pub fn cache_tree_root_in_extensions(extensions: &[u8], oid_len: usize) -> Result<Option<Vec<u8>>> {
    check_oid_len(oid_len)?;
    let found = read_extensions(extensions, oid_len)?;
    found.tree.map_or(Ok(None), |tree| tree_root(tree, oid_len))
}

/// `old` (a whole index file) with `changes` applied, without the trailer (see [`trailer`]).
///
/// A removed path's entries vanish; an added or replaced path gets one stage-0 entry with no
/// stat data (git refreshes it), as `git update-index --index-info` writes it. Entries keep
/// their bytes except, in version 4, the one after a change, whose path is re-encoded against
/// its new predecessor. The cache tree is invalidated on every changed path, `REUC` kept, the
/// other optional extensions dropped (their offsets, bitmaps and stat data would be stale).
pub fn edit(old: &[u8], oid_len: usize, changes: &[Change]) -> Result<Vec<u8>> {
    let pieces = edit_pieces(old, oid_len, changes)?;
    let mut out = Vec::with_capacity(pieces.iter().map(|p| p.bytes(old).len()).sum());
    for piece in &pieces {
        out.extend_from_slice(piece.bytes(old));
    }
    Ok(out)
}

/// A part of an edited index, in order: a run of the old index's bytes, or new bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Old(std::ops::Range<usize>),
    New(Vec<u8>),
}

impl Piece {
    /// This part's bytes (`old`: the index the edit was made from).
    pub fn bytes<'a>(&'a self, old: &'a [u8]) -> &'a [u8] {
        match self {
            Self::Old(range) => old.get(range.clone()).unwrap_or_default(),
            Self::New(bytes) => bytes,
        }
    }
}

/// [`edit`] as the parts of its result, without copying the runs of unchanged entries: the
/// caller writes (and hashes) them straight from `old`.
pub fn edit_pieces(old: &[u8], oid_len: usize, changes: &[Change]) -> Result<Vec<Piece>> {
    edit_pieces_at(old, oid_len, changes, None)
}

/// [`edit_pieces`], finding where the changes go in `table` (made by [`entry_table`] from
/// these very bytes) by binary search instead of walking every entry. The result is the same
/// byte for byte; a table made from other bytes is refused.
pub fn edit_pieces_at(
    old: &[u8],
    oid_len: usize,
    changes: &[Change],
    table: Option<&EntryTable>,
) -> Result<Vec<Piece>> {
    check_oid_len(oid_len)?;
    let header = read_header(old)?;
    let layout = Layout::new(old, header.version, oid_len)?;
    if let Some(table) = table
        && (table.index_len != old.len()
            || table.oid_len != oid_len
            || table.starts.len() != header.count as usize)
    {
        return Err(malformed("an entry table made for another index"));
    }
    let sorted = sorted_changes(changes, oid_len)?;
    let keys = merge_keys(&sorted)?;
    let v4 = header.version == 4;
    let mut merge = Merge {
        old,
        out: Vec::new(),
        pieces: Vec::new(),
        oid_len,
        v4,
        changes: &sorted,
        keys,
        next: 0,
        matched: false,
        copied: HEADER_LEN,
        last_out: Vec::new(),
        detached: false,
        watch: None,
        added: 0,
        removed: 0,
    };
    let entries_end = if v4 {
        merge.entries::<true>(&layout, header.count, None)?
    } else {
        merge.entries::<false>(&layout, header.count, table)?
    };
    while merge.next < merge.keys.len() {
        merge.pass_key(entries_end)?;
    }
    merge.flush(entries_end)?;
    merge.seal();
    let count = u64::from(header.count) + merge.added - merge.removed;
    let count = u32::try_from(count).map_err(|_| malformed("more than 2^32 entries"))?;
    let mut head = old
        .get(..HEADER_LEN)
        .ok_or_else(|| malformed("a truncated header"))?
        .to_vec();
    head[8..HEADER_LEN].copy_from_slice(&count.to_be_bytes());
    let dirs = invalidated_dirs(&sorted);
    let mut extensions = Vec::new();
    edit_extensions(
        old,
        entries_end,
        layout.limit,
        oid_len,
        &dirs,
        &mut extensions,
    )?;
    let mut pieces = Vec::with_capacity(merge.pieces.len() + 2);
    pieces.push(Piece::New(head));
    pieces.append(&mut merge.pieces);
    if !extensions.is_empty() {
        pieces.push(Piece::New(extensions));
    }
    Ok(pieces)
}

/// The trailer for `body`: its SHA-256 when object ids are 32 bytes long, else its SHA-1.
pub fn trailer(body: &[u8], oid_len: usize) -> Vec<u8> {
    trailer_of(&[body], oid_len)
}

/// The trailer for the body made of `parts`, in order.
pub fn trailer_of(parts: &[&[u8]], oid_len: usize) -> Vec<u8> {
    let mut hash = HeaderHash::new(oid_len);
    for part in parts {
        hash.update(part);
    }
    hash.finish()
}

/// Where each entry of a version 2 or 3 index starts and where the entries end, made by one
/// walk ([`entry_table`]) and tied to the bytes it was made from: with it,
/// [`edit_pieces_at`] finds the changed paths by binary search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryTable {
    starts: Vec<u32>,
    end: usize,
    index_len: usize,
    oid_len: usize,
}

impl EntryTable {
    /// Where entry `at` starts (`at` == the count: where the entries end).
    fn start(&self, at: usize) -> usize {
        self.starts.get(at).map_or(self.end, |&s| s as usize)
    }

    /// The first entry from `from` on that does not sort before `key` (all of them: the
    /// count).
    fn first_not_before(
        &self,
        index: &[u8],
        layout: &Layout,
        from: usize,
        key: Option<&[u8]>,
    ) -> Result<usize> {
        let Some(key) = key else {
            return Ok(self.starts.len());
        };
        let (mut low, mut high) = (from, self.starts.len());
        while low < high {
            let mid = low + (high - low) / 2;
            let entry = entry_at(index, self.start(mid), layout, 0)?;
            if sorts_after(key, entry.name) {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        Ok(low)
    }
}

/// The [`EntryTable`] of `index`, a whole index file of version 2 or 3 with no directory
/// entries and its entries in git's order (what [`edit_pieces`] edits, and what a binary
/// search needs); version 4 has none, its paths being edits of each other.
pub fn entry_table(index: &[u8], oid_len: usize) -> Result<EntryTable> {
    check_oid_len(oid_len)?;
    let header = read_header(index)?;
    if header.version == 4 {
        return Err(unsupported("an entry table of a version 4 index"));
    }
    let layout = Layout::new(index, header.version, oid_len)?;
    if u32::try_from(layout.limit).is_err() {
        return Err(unsupported("an index over 4 GiB"));
    }
    // Each entry takes at least 62 bytes: a hostile count ends at the data's end, and the
    // table never holds more starts than the data has room for.
    let room = layout.limit / 62;
    let mut starts = Vec::with_capacity((header.count as usize).min(room));
    let mut pos = HEADER_LEN;
    let mut prev: Option<Entry> = None;
    for _ in 0..header.count {
        let entry = entry_at(index, pos, &layout, 0)?;
        if entry.mode & MODE_TYPE == MODE_DIRECTORY {
            return Err(unsupported("a sparse index (it has directory entries)"));
        }
        // A binary search needs the order git keeps: by path, then by stage.
        if let Some(prev) = &prev {
            let in_order = match prev.name.cmp(entry.name) {
                Ordering::Less => true,
                Ordering::Equal => prev.stage < entry.stage,
                Ordering::Greater => false,
            };
            if !in_order {
                return Err(malformed("entries out of order"));
            }
        }
        starts.push(pos as u32);
        pos = entry.end;
        prev = Some(entry);
    }
    Ok(EntryTable {
        starts,
        end: pos,
        index_len: index.len(),
        oid_len,
    })
}

fn check_oid_len(oid_len: usize) -> Result<()> {
    match oid_len {
        20 | 32 => Ok(()),
        _ => Err(unsupported(format!("object ids of {oid_len} bytes"))),
    }
}

fn be16(data: &[u8], at: usize) -> Option<u16> {
    let bytes = data.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes(bytes.try_into().ok()?))
}

fn be32(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes(bytes.try_into().ok()?))
}

fn nul_at(data: &[u8]) -> Result<usize> {
    data.iter()
        .position(|&b| b == 0)
        .ok_or_else(|| malformed("a path without its terminating NUL"))
}

struct Header {
    version: u32,
    count: u32,
}

fn read_header(index: &[u8]) -> Result<Header> {
    if index.get(..4) != Some(b"DIRC") {
        return Err(malformed("no DIRC signature"));
    }
    let (Some(version), Some(count)) = (be32(index, 4), be32(index, 8)) else {
        return Err(malformed("a truncated header"));
    };
    if !(2..=4).contains(&version) {
        return Err(unsupported(format!("index version {version}")));
    }
    Ok(Header { version, count })
}

/// What the entry reader needs to know of the file.
struct Layout {
    version: u32,
    oid_len: usize,
    /// Where the trailer starts: no entry or extension reaches into it.
    limit: usize,
}

impl Layout {
    fn new(index: &[u8], version: u32, oid_len: usize) -> Result<Self> {
        let limit = index
            .len()
            .checked_sub(oid_len)
            .filter(|&limit| limit >= HEADER_LEN)
            .ok_or_else(|| malformed("too short for a header and a trailer"))?;
        Ok(Self {
            version,
            oid_len,
            limit,
        })
    }
}

/// One entry as git's reader sizes it.
struct Entry<'a> {
    /// Where the next entry starts (absolute).
    end: usize,
    /// Where the name field starts, from the entry's start: the fixed part is before it.
    name_at: usize,
    mode: u32,
    stage: u16,
    /// Version 4: how many bytes of the previous path this one starts with (else 0).
    keep: usize,
    /// The path (version 4: what follows the kept prefix).
    name: &'a [u8],
}

impl Entry<'_> {
    fn path_len(&self) -> usize {
        self.keep + self.name.len()
    }
}

/// The entry at `pos`; `prev_len` is the previous entry's path length (version 4 only).
#[inline(always)]
fn entry_at<'a>(
    index: &'a [u8],
    pos: usize,
    layout: &Layout,
    prev_len: usize,
) -> Result<Entry<'a>> {
    let truncated = || malformed("a truncated entry");
    let data = index.get(pos..layout.limit).ok_or_else(truncated)?;
    let flags_at = STAT_LEN + layout.oid_len;
    let flags = be16(data, flags_at).ok_or_else(truncated)?;
    let mode = be32(data, MODE_AT).ok_or_else(truncated)?;
    let mut name_at = flags_at + 2;
    if flags & FLAG_EXTENDED != 0 {
        if layout.version < 3 {
            return Err(malformed("extended flags in a version 2 index"));
        }
        name_at += 2;
    }
    let len = usize::from(flags & NAME_MASK);
    let long = len == usize::from(NAME_MASK);
    let rest = data.get(name_at..).ok_or_else(truncated)?;
    let (keep, name, size) = if layout.version == 4 {
        let (strip, varint_len) = read_varint(rest)?;
        let keep = prev_len
            .checked_sub(strip)
            .ok_or_else(|| malformed("a prefix longer than the previous path"))?;
        let suffix = rest.get(varint_len..).ok_or_else(truncated)?;
        let suffix_len = if long {
            nul_at(suffix)?
        } else {
            len.checked_sub(keep)
                .ok_or_else(|| malformed("a path shorter than the prefix it keeps"))?
        };
        if suffix.get(suffix_len) != Some(&0) {
            return Err(malformed("a path whose length disagrees with its flags"));
        }
        let name = suffix.get(..suffix_len).ok_or_else(truncated)?;
        (keep, name, name_at + varint_len + suffix_len + 1)
    } else {
        let name_len = if long { nul_at(rest)? } else { len };
        if rest.get(name_len) != Some(&0) {
            return Err(malformed("a path whose length disagrees with its flags"));
        }
        // 1 to 8 NULs pad the entry to a multiple of 8 bytes.
        let size = (name_at + name_len + 8) & !7;
        if size > data.len() {
            return Err(truncated());
        }
        (0, rest.get(..name_len).ok_or_else(truncated)?, size)
    };
    Ok(Entry {
        end: pos + size,
        name_at,
        mode,
        stage: flags & STAGE_MASK,
        keep,
        name,
    })
}

/// Git's offset varint (`varint.c`): its value and its length.
fn read_varint(data: &[u8]) -> Result<(usize, usize)> {
    let truncated = || malformed("a truncated path prefix");
    let mut byte = *data.first().ok_or_else(truncated)?;
    let mut value = u64::from(byte & 0x7f);
    let mut len = 1;
    while byte & 0x80 != 0 {
        value = value
            .checked_add(1)
            .filter(|v| v >> 57 == 0)
            .ok_or_else(|| malformed("an overlong path prefix"))?;
        byte = *data.get(len).ok_or_else(truncated)?;
        len += 1;
        value = (value << 7) | u64::from(byte & 0x7f);
    }
    let value = usize::try_from(value).map_err(|_| malformed("an overlong path prefix"))?;
    Ok((value, len))
}

fn push_varint(out: &mut Vec<u8>, value: usize) {
    let mut buf = [0u8; 16];
    let mut at = buf.len() - 1;
    let mut value = value as u64;
    buf[at] = (value & 0x7f) as u8;
    value >>= 7;
    while value != 0 {
        value -= 1;
        at -= 1;
        buf[at] = 0x80 | (value & 0x7f) as u8;
        value >>= 7;
    }
    out.extend_from_slice(&buf[at..]);
}

/// Whether `key` sorts after `path` (bytes, then length). Eight bytes at a time and inline:
/// paths share long prefixes, and a call to `memcmp` per entry costs more than the compare.
#[inline(always)]
fn sorts_after(key: &[u8], path: &[u8]) -> bool {
    let mut at = 0;
    while let (Some(k), Some(p)) = (key.get(at..at + 8), path.get(at..at + 8)) {
        let (Ok(k), Ok(p)) = (<[u8; 8]>::try_from(k), <[u8; 8]>::try_from(p)) else {
            break;
        };
        let (k, p) = (u64::from_be_bytes(k), u64::from_be_bytes(p));
        if k != p {
            return k > p;
        }
        at += 8;
    }
    let (key, path) = (
        key.get(at..).unwrap_or_default(),
        path.get(at..).unwrap_or_default(),
    );
    for (k, p) in key.iter().zip(path) {
        if k != p {
            return k > p;
        }
    }
    key.len() > path.len()
}

/// Version 4: whether the entry that keeps `keep` bytes of the previous path and appends
/// `suffix` sorts before `key`, given `lcp`, what the previous path (sorted before `key`)
/// shares with `key`; `lcp` becomes what this entry shares with it. Mostly without comparing
/// bytes: an entry that keeps more than `lcp` bytes keeps the byte where the previous path
/// sorted before `key`.
#[inline(always)]
fn v4_before(key: &[u8], lcp: &mut usize, keep: usize, suffix: &[u8]) -> bool {
    if keep > *lcp {
        return true;
    }
    let rest = key.get(keep..).unwrap_or_default();
    let common = common_prefix(rest, suffix);
    *lcp = keep + common;
    match (rest.get(common), suffix.get(common)) {
        (Some(k), Some(s)) => s < k,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// `changes` sorted by path and checked: paths git could store, modes git gives entries,
/// object ids of the repository's length, each path once.
fn sorted_changes(changes: &[Change], oid_len: usize) -> Result<Vec<&Change>> {
    for change in changes {
        let path = &change.path;
        // What git's `verify_path` refuses too, so that a change the fallback to git would
        // refuse is refused here.
        let bad_component =
            |c: &[u8]| c.is_empty() || c == b"." || c == b".." || c.eq_ignore_ascii_case(b".git");
        if path.is_empty() || path.contains(&0) || path.split(|&b| b == b'/').any(bad_component) {
            return Err(malformed(format!(
                "a change to the path {:?}, which git cannot store",
                String::from_utf8_lossy(path)
            )));
        }
        if let Some((mode, oid)) = &change.entry {
            if !ENTRY_MODES.contains(mode) {
                return Err(malformed(format!("a change to mode {mode:o}")));
            }
            if oid.len() != oid_len {
                return Err(malformed(format!(
                    "an object id of {} bytes where the repository's have {oid_len}",
                    oid.len()
                )));
            }
        }
    }
    let mut sorted: Vec<&Change> = changes.iter().collect();
    sorted.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    if let Some(pair) = sorted.windows(2).find(|w| w[0].path == w[1].path) {
        return Err(malformed(format!(
            "the path {:?} changed twice",
            String::from_utf8_lossy(&pair[0].path)
        )));
    }
    Ok(sorted)
}

/// What the merge pass looks out for at a path.
enum KeyKind {
    /// The change at this index of the sorted changes.
    Change(usize),
    /// A directory of an added path: an entry kept there would be a file in its way.
    Directory,
    /// An added path followed by `/`: an entry kept below it would be a directory in its way.
    Below,
}

struct Key<'a> {
    path: Cow<'a, [u8]>,
    kind: KeyKind,
}

/// The keys of the merge pass, sorted by path. A change set that itself puts a file where
/// another change puts a directory is left to git (`update-index` replaces one by the other).
fn merge_keys<'a>(sorted: &[&'a Change]) -> Result<Vec<Key<'a>>> {
    let conflict = |path: &[u8]| {
        unsupported(format!(
            "a change that makes {:?} both a file and a directory",
            String::from_utf8_lossy(path)
        ))
    };
    let mut keys = Vec::with_capacity(sorted.len() * 3);
    for (i, change) in sorted.iter().enumerate() {
        keys.push(Key {
            path: Cow::Borrowed(change.path.as_slice()),
            kind: KeyKind::Change(i),
        });
        if change.entry.is_none() {
            continue;
        }
        let path = change.path.as_slice();
        for (at, _) in path.iter().enumerate().filter(|(_, b)| **b == b'/') {
            let dir = &path[..at];
            match sorted.binary_search_by(|c| c.path.as_slice().cmp(dir)) {
                Ok(j) if sorted[j].entry.is_some() => return Err(conflict(dir)),
                // Removed by the change set: no entry will be left there.
                Ok(_) => {}
                Err(_) => keys.push(Key {
                    path: Cow::Borrowed(dir),
                    kind: KeyKind::Directory,
                }),
            }
        }
        let mut below = path.to_vec();
        below.push(b'/');
        keys.push(Key {
            path: Cow::Owned(below),
            kind: KeyKind::Below,
        });
    }
    keys.sort_by(|a, b| a.path.cmp(&b.path));
    // Only `Directory` keys can repeat (two added paths in one directory).
    keys.dedup_by(|a, b| a.path == b.path);
    Ok(keys)
}

/// The cache-tree records to invalidate: the root, each directory of a changed path, and the
/// path itself (a directory it replaces).
fn invalidated_dirs<'a>(sorted: &[&'a Change]) -> Vec<&'a [u8]> {
    let mut dirs: Vec<&[u8]> = Vec::new();
    if sorted.is_empty() {
        return dirs;
    }
    dirs.push(&[]);
    for change in sorted {
        let path = change.path.as_slice();
        for (at, _) in path.iter().enumerate().filter(|(_, b)| **b == b'/') {
            dirs.push(&path[..at]);
        }
        dirs.push(path);
    }
    dirs.sort_unstable();
    dirs.dedup();
    dirs
}

/// The state of the merge of the sorted changes into the entries.
struct Merge<'a> {
    old: &'a [u8],
    /// New bytes not yet in `pieces`.
    out: Vec<u8>,
    /// The output so far.
    pieces: Vec<Piece>,
    oid_len: usize,
    v4: bool,
    changes: &'a [&'a Change],
    keys: Vec<Key<'a>>,
    /// The first key not yet passed.
    next: usize,
    /// Whether the change at `next` has removed an entry already.
    matched: bool,
    /// How much of `old` the output accounts for (copied, removed or replaced).
    copied: usize,
    /// Version 4, while `detached`: the path of the last entry written.
    last_out: Vec<u8>,
    /// Version 4: an entry was removed or written since the last copied one, so the next kept
    /// entry's prefix, relative to the old predecessor, must be re-encoded.
    detached: bool,
    /// A `Below` key passed: kept entries are checked against it until one is past it.
    watch: Option<usize>,
    added: u64,
    removed: u64,
}

impl Merge<'_> {
    /// Merges the keys into the `count` entries: the walk and its fast path, specialized for
    /// version 4 or not. With a `table` (versions 2 and 3), the runs that are copied as they
    /// are are jumped over instead of walked. Returns where the entries end.
    fn entries<const V4: bool>(
        &mut self,
        layout: &Layout,
        count: u32,
        table: Option<&EntryTable>,
    ) -> Result<usize> {
        let mut pos = HEADER_LEN;
        // Version 4: the current entry's path (each is stored as an edit of the one before).
        let mut path = Vec::new();
        // Version 4: how many bytes that path shares with the next key, which sorts after it.
        let mut key_lcp = 0;
        let mut prev_len = 0;
        let count = count as usize;
        let mut at = 0;
        while at < count {
            if let Some(table) = table.filter(|_| !V4 && !self.detached && self.watch.is_none()) {
                // Every entry before the next key is in a run copied as it is: nothing is
                // done at it, so the merge goes straight to the first one that is not.
                let key = self.keys.get(self.next).map(|k| k.path.as_ref());
                let first = table.first_not_before(self.old, layout, at, key)?;
                if first > at {
                    at = first;
                    pos = table.start(first);
                    continue;
                }
            }
            at += 1;
            let entry = entry_at(self.old, pos, layout, prev_len)?;
            if entry.mode & MODE_TYPE == MODE_DIRECTORY {
                return Err(unsupported("a sparse index (it has directory entries)"));
            }
            let before_next_key = match self.keys.get(self.next) {
                None => true,
                Some(key) if V4 => v4_before(&key.path, &mut key_lcp, entry.keep, entry.name),
                Some(key) => sorts_after(&key.path, entry.name),
            };
            if before_next_key && !self.detached && self.watch.is_none() {
                // The common case: an entry inside a run that is copied as it is.
                if V4 {
                    path.truncate(entry.keep);
                    path.extend_from_slice(entry.name);
                }
            } else {
                if V4 {
                    if !self.detached {
                        // The output's last entry is this one's predecessor, whose path is about
                        // to be overwritten: a new or re-encoded entry is written against it.
                        self.last_out.clear();
                        self.last_out.extend_from_slice(&path);
                    }
                    path.truncate(entry.keep);
                    path.extend_from_slice(entry.name);
                }
                let full: &[u8] = if V4 { &path } else { entry.name };
                self.at_entry(pos, &entry, full)?;
                if let (true, Some(key)) = (V4, self.keys.get(self.next)) {
                    key_lcp = common_prefix(&key.path, &path);
                }
            }
            prev_len = entry.path_len();
            pos = entry.end;
        }
        if V4 && !self.detached {
            self.last_out.clear();
            self.last_out.extend_from_slice(&path);
        }
        Ok(pos)
    }

    /// Takes the run of unchanged entries up to `upto` (one piece with the run before it
    /// when nothing new came between).
    fn flush(&mut self, upto: usize) -> Result<()> {
        if self.old.get(self.copied..upto).is_none() {
            return Err(malformed("entries out of place"));
        }
        if upto == self.copied {
            return Ok(());
        }
        self.seal();
        match self.pieces.last_mut() {
            Some(Piece::Old(run)) if run.end == self.copied => run.end = upto,
            _ => self.pieces.push(Piece::Old(self.copied..upto)),
        }
        self.copied = upto;
        Ok(())
    }

    /// Moves the new bytes written so far into a piece of their own.
    fn seal(&mut self) {
        if !self.out.is_empty() {
            self.pieces.push(Piece::New(std::mem::take(&mut self.out)));
        }
    }

    /// The entry at `pos` (its whole path `path`) met a key at or before it: passes the keys
    /// before it, then removes it (its change's key) or keeps it (re-encoded if it must be).
    fn at_entry(&mut self, pos: usize, entry: &Entry, path: &[u8]) -> Result<()> {
        while let Some(key) = self.keys.get(self.next) {
            match key.path.as_ref().cmp(path) {
                Ordering::Greater => break,
                Ordering::Less => self.pass_key(pos)?,
                Ordering::Equal => match key.kind {
                    KeyKind::Change(_) => {
                        if entry.stage != 0 {
                            return Err(unsupported(format!(
                                "a change to {:?}, which has a merge conflict",
                                String::from_utf8_lossy(path)
                            )));
                        }
                        self.flush(pos)?;
                        self.copied = entry.end;
                        self.matched = true;
                        self.removed += 1;
                        self.detached = self.v4;
                        return Ok(());
                    }
                    KeyKind::Directory => {
                        return Err(unsupported(format!(
                            "an added path below the file {:?}, which stays",
                            String::from_utf8_lossy(path)
                        )));
                    }
                    KeyKind::Below => self.pass_key(pos)?,
                },
            }
        }
        if let Some(watch) = self.watch {
            let below = self.keys.get(watch).map(|k| k.path.as_ref());
            if below.is_some_and(|below| path.starts_with(below)) {
                return Err(unsupported(format!(
                    "an added file where {:?} keeps a directory",
                    String::from_utf8_lossy(path)
                )));
            }
            self.watch = None;
        }
        if self.detached {
            self.flush(pos)?;
            let fixed = self
                .old
                .get(pos..pos + entry.name_at)
                .ok_or_else(|| malformed("a truncated entry"))?;
            self.out.extend_from_slice(fixed);
            self.push_v4_name(path);
            self.copied = entry.end;
            self.detached = false;
        }
        Ok(())
    }

    /// Passes the key at `next`, the entries after it starting at `pos`: writes its change's
    /// new entry there.
    fn pass_key(&mut self, pos: usize) -> Result<()> {
        let Some(key) = self.keys.get(self.next) else {
            return Ok(());
        };
        match key.kind {
            KeyKind::Change(i) => {
                let change = self.changes[i];
                match &change.entry {
                    None if !self.matched => {
                        return Err(unsupported(format!(
                            "removing {:?}, which the index does not have",
                            String::from_utf8_lossy(&change.path)
                        )));
                    }
                    None => {}
                    Some((mode, oid)) => {
                        self.flush(pos)?;
                        self.push_new(&change.path, *mode, oid);
                        self.added += 1;
                        self.detached = self.v4;
                    }
                }
                self.matched = false;
            }
            KeyKind::Directory => {}
            KeyKind::Below => self.watch = Some(self.next),
        }
        self.next += 1;
        Ok(())
    }

    /// A fresh stage-0 entry, as `git update-index --index-info` makes it: no stat data, no
    /// extended flags.
    fn push_new(&mut self, path: &[u8], mode: u32, oid: &[u8]) {
        let out = &mut self.out;
        out.extend_from_slice(&[0; MODE_AT]);
        out.extend_from_slice(&mode.to_be_bytes());
        out.extend_from_slice(&[0; STAT_LEN - MODE_AT - 4]);
        out.extend_from_slice(oid);
        let flags = path.len().min(usize::from(NAME_MASK)) as u16;
        out.extend_from_slice(&flags.to_be_bytes());
        if self.v4 {
            self.push_v4_name(path);
            self.last_out.clear();
            self.last_out.extend_from_slice(path);
        } else {
            out.extend_from_slice(path);
            let name_at = STAT_LEN + self.oid_len + 2;
            let padding = ((name_at + path.len() + 8) & !7) - name_at - path.len();
            out.extend_from_slice(&[0; 8][..padding]);
        }
    }

    /// A version-4 name field: `path` as an edit of the last entry written.
    fn push_v4_name(&mut self, path: &[u8]) {
        let common = common_prefix(&self.last_out, path);
        push_varint(&mut self.out, self.last_out.len() - common);
        self.out.extend_from_slice(&path[common..]);
        self.out.push(0);
    }
}

/// The extensions of `old` (from `pos` to the trailer at `limit`) as the edited index keeps
/// them.
fn edit_extensions(
    old: &[u8],
    mut pos: usize,
    limit: usize,
    oid_len: usize,
    dirs: &[&[u8]],
    out: &mut Vec<u8>,
) -> Result<()> {
    let data = old
        .get(..limit)
        .ok_or_else(|| malformed("a truncated index"))?;
    let mut tree_seen = false;
    while pos < limit {
        let (signature, body, end) = extension_at(data, pos)?;
        match signature {
            TREE => {
                if std::mem::replace(&mut tree_seen, true) {
                    return Err(malformed("two TREE extensions"));
                }
                out.extend_from_slice(&TREE);
                let size_at = out.len();
                out.extend_from_slice(&[0; 4]);
                rewrite_tree(body, oid_len, dirs, out)?;
                let size = u32::try_from(out.len() - size_at - 4)
                    .map_err(|_| malformed("a TREE extension over 4 GiB"))?;
                if let Some(field) = out.get_mut(size_at..size_at + 4) {
                    field.copy_from_slice(&size.to_be_bytes());
                }
            }
            REUC => out.extend_from_slice(data.get(pos..end).unwrap_or_default()),
            LINK => return Err(unsupported("a split index")),
            SDIR => return Err(unsupported("a sparse index")),
            other if !other[0].is_ascii_uppercase() => {
                return Err(unsupported(format!(
                    "the required extension {:?}",
                    String::from_utf8_lossy(&other)
                )));
            }
            // Optional, and stale once entries move: EOIE, IEOT, UNTR, FSMN, and the rest.
            _ => {}
        }
        pos = end;
    }
    Ok(())
}

/// The extension at `pos` of `data` (which ends at the trailer): its signature, its body, and
/// where the next one starts.
fn extension_at(data: &[u8], pos: usize) -> Result<([u8; 4], &[u8], usize)> {
    let truncated = || malformed("a truncated extension");
    let signature: [u8; 4] = data
        .get(pos..)
        .and_then(|d| d.get(..4))
        .and_then(|s| s.try_into().ok())
        .ok_or_else(truncated)?;
    let size = be32(data, pos + 4).ok_or_else(truncated)?;
    let start = pos + EXTENSION_HEADER_LEN;
    let end = usize::try_from(size)
        .ok()
        .and_then(|size| start.checked_add(size))
        .ok_or_else(truncated)?;
    let body = data.get(start..end).ok_or_else(truncated)?;
    Ok((signature, body, end))
}

/// What the claim needs of the extensions.
struct Extensions<'a> {
    tree: Option<&'a [u8]>,
    /// Where the EOIE extension says the extensions start.
    eoie_offset: Option<u32>,
}

/// The extensions from the first to the trailer, checked as git reads them: every one whole,
/// an EOIE only last and hashing the headers before it, no required extension git does not
/// know.
fn read_extensions(extensions: &[u8], oid_len: usize) -> Result<Extensions<'_>> {
    let mut found = Extensions {
        tree: None,
        eoie_offset: None,
    };
    let mut headers = HeaderHash::new(oid_len);
    let mut pos = 0;
    while pos < extensions.len() {
        if found.eoie_offset.is_some() {
            return Err(malformed("an extension after EOIE"));
        }
        let (signature, body, end) = extension_at(extensions, pos)?;
        match signature {
            EOIE => {
                let (Some(offset), Some(hash)) = (be32(body, 0), body.get(4..)) else {
                    return Err(malformed("a truncated EOIE extension"));
                };
                if hash != headers.finish().as_slice() {
                    return Err(malformed("an EOIE extension that does not hash the others"));
                }
                found.eoie_offset = Some(offset);
                pos = end;
                continue;
            }
            TREE => {
                if found.tree.is_some() {
                    return Err(malformed("two TREE extensions"));
                }
                found.tree = Some(body);
            }
            LINK | SDIR => {}
            other if !other[0].is_ascii_uppercase() => {
                return Err(unsupported(format!(
                    "the required extension {:?}",
                    String::from_utf8_lossy(&other)
                )));
            }
            _ => {}
        }
        if let Some(header) = extensions.get(pos..pos + EXTENSION_HEADER_LEN) {
            headers.update(header);
        }
        pos = end;
    }
    Ok(found)
}

/// The hash an EOIE extension records: of the signature and size of each extension before it,
/// in the repository's hash.
enum HeaderHash {
    Sha1(sha1::Sha1),
    Sha256(sha2::Sha256),
}

impl HeaderHash {
    fn new(oid_len: usize) -> Self {
        use sha2::Digest;
        if oid_len == 32 {
            Self::Sha256(sha2::Sha256::new())
        } else {
            Self::Sha1(sha1::Sha1::new())
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        use sha2::Digest;
        match self {
            Self::Sha1(h) => h.update(bytes),
            Self::Sha256(h) => h.update(bytes),
        }
    }

    fn finish(&self) -> Vec<u8> {
        use sha2::Digest;
        match self {
            Self::Sha1(h) => h.clone().finalize().to_vec(),
            Self::Sha256(h) => h.clone().finalize().to_vec(),
        }
    }
}

/// One cache-tree record: `name NUL entry_count SP subtree_count LF [oid]`.
struct Record<'a> {
    name: &'a [u8],
    /// The subtree count as written (copied into an invalidated record).
    subtrees_text: &'a [u8],
    subtrees: u64,
    /// The tree id, when the record is valid (entry count not negative).
    oid: Option<&'a [u8]>,
    end: usize,
}

fn record_at(data: &[u8], pos: usize, oid_len: usize) -> Result<Record<'_>> {
    let truncated = || malformed("a truncated cache-tree record");
    let rest = data.get(pos..).ok_or_else(truncated)?;
    let name_len = rest.iter().position(|&b| b == 0).ok_or_else(truncated)?;
    let name = rest.get(..name_len).ok_or_else(truncated)?;
    let mut at = name_len + 1;
    let negative = rest.get(at) == Some(&b'-');
    if negative {
        at += 1;
    }
    let (_, len) = decimal(rest.get(at..).ok_or_else(truncated)?)?;
    at += len;
    if rest.get(at) != Some(&b' ') {
        return Err(malformed("a cache-tree record without its subtree count"));
    }
    at += 1;
    let (subtrees, len) = decimal(rest.get(at..).ok_or_else(truncated)?)?;
    let subtrees_text = rest.get(at..at + len).ok_or_else(truncated)?;
    at += len;
    if rest.get(at) != Some(&b'\n') {
        return Err(malformed("a cache-tree record without its newline"));
    }
    at += 1;
    let oid = if negative {
        None
    } else {
        let oid = rest.get(at..at + oid_len).ok_or_else(truncated)?;
        at += oid_len;
        Some(oid)
    };
    Ok(Record {
        name,
        subtrees_text,
        subtrees,
        oid,
        end: pos + at,
    })
}

/// A cache-tree count: ASCII digits at the start of `data`, at most [`MAX_TREE_COUNT`].
fn decimal(data: &[u8]) -> Result<(u64, usize)> {
    let digits = data
        .iter()
        .take(11)
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 {
        return Err(malformed("a cache-tree record without a count"));
    }
    // At most 11 digits: no overflow.
    let value = data
        .iter()
        .take(digits)
        .fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'));
    if value > MAX_TREE_COUNT {
        return Err(malformed("a cache-tree count out of range"));
    }
    Ok((value, digits))
}

fn check_subtree_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.contains(&b'/') {
        return Err(malformed("a cache-tree subtree without a plain name"));
    }
    Ok(())
}

/// Where the `pending` sibling subtrees starting at `pos` end, their descendants included.
/// Counts instead of recursing: a hostile count or nesting costs neither stack nor memory.
fn subtrees_end(data: &[u8], mut pos: usize, mut pending: u64, oid_len: usize) -> Result<usize> {
    while pending > 0 {
        let record = record_at(data, pos, oid_len)?;
        check_subtree_name(record.name)?;
        pending = (pending - 1)
            .checked_add(record.subtrees)
            .ok_or_else(|| malformed("a cache tree with too many subtrees"))?;
        pos = record.end;
    }
    Ok(pos)
}

/// The root tree a TREE extension's body claims; checks the whole body.
fn tree_root(tree: &[u8], oid_len: usize) -> Result<Option<Vec<u8>>> {
    let root = record_at(tree, 0, oid_len)?;
    if !root.name.is_empty() {
        return Err(malformed("a cache tree whose first record is not the root"));
    }
    if subtrees_end(tree, root.end, root.subtrees, oid_len)? != tree.len() {
        return Err(malformed("bytes after the cache tree"));
    }
    Ok(root.oid.map(<[u8]>::to_vec))
}

/// A TREE body with every record whose path is in `dirs` (sorted; the root's path is empty,
/// and in `dirs` whenever anything is) invalidated, the others copied byte for byte.
fn rewrite_tree(tree: &[u8], oid_len: usize, dirs: &[&[u8]], out: &mut Vec<u8>) -> Result<()> {
    let root = record_at(tree, 0, oid_len)?;
    if !root.name.is_empty() {
        return Err(malformed("a cache tree whose first record is not the root"));
    }
    if dirs.is_empty() {
        if subtrees_end(tree, root.end, root.subtrees, oid_len)? != tree.len() {
            return Err(malformed("bytes after the cache tree"));
        }
        out.extend_from_slice(tree);
        return Ok(());
    }
    push_invalid(out, &root);
    let mut path: Vec<u8> = Vec::new();
    // Per open directory: subtrees still to read, and the length of `path` before its name.
    let mut open: Vec<(u64, usize)> = vec![(root.subtrees, 0)];
    let mut pos = root.end;
    while let Some(top) = open.last_mut() {
        if top.0 == 0 {
            path.truncate(top.1);
            open.pop();
            continue;
        }
        top.0 -= 1;
        let record = record_at(tree, pos, oid_len)?;
        check_subtree_name(record.name)?;
        let base = path.len();
        if base > 0 {
            path.push(b'/');
        }
        path.extend_from_slice(record.name);
        if dirs.binary_search(&path.as_slice()).is_ok() {
            push_invalid(out, &record);
            open.push((record.subtrees, base));
            pos = record.end;
        } else {
            // Nothing changed below it: the whole subtree stays as it is.
            let end = subtrees_end(tree, pos, 1, oid_len)?;
            out.extend_from_slice(tree.get(pos..end).unwrap_or_default());
            path.truncate(base);
            pos = end;
        }
    }
    if pos != tree.len() {
        return Err(malformed("bytes after the cache tree"));
    }
    Ok(())
}

fn push_invalid(out: &mut Vec<u8>, record: &Record) {
    out.extend_from_slice(record.name);
    out.extend_from_slice(b"\0-1 ");
    out.extend_from_slice(record.subtrees_text);
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::Write;
    use std::path::PathBuf;
    use std::process::{Command, Stdio};

    /// A repository in a temporary directory, driven by the real `git`.
    struct Repo {
        tmp: tempfile::TempDir,
        oid_len: usize,
    }

    impl Repo {
        fn new(object_format: &str) -> Self {
            let tmp = tempfile::tempdir().unwrap();
            let repo = Self {
                tmp,
                oid_len: if object_format == "sha256" { 32 } else { 20 },
            };
            std::fs::create_dir(repo.work()).unwrap();
            repo.git(&["init", "-q", &format!("--object-format={object_format}")]);
            repo
        }

        /// Files in nested directories, with neighbours that sort between a directory's name
        /// and its entries (`dir1-x.txt`, `dir1.txt` before `dir1/`), committed.
        fn with_files(object_format: &str) -> Self {
            let repo = Self::new(object_format);
            for path in [
                "a.txt",
                "b.txt",
                "dir1-x.txt",
                "dir1.txt",
                "dir1/sub/deep/w.txt",
                "dir1/sub/z.txt",
                "dir1/x.txt",
                "dir1/y.txt",
                "dir10/q.txt",
                "dir2/p.txt",
                "dir2/r/s.txt",
                "f",
                "g/h.txt",
                "z_last.txt",
            ] {
                repo.write(path, &format!("content of {path}\n"));
            }
            repo.git(&["add", "-A"]);
            repo.git(&["commit", "-q", "-m", "files"]);
            repo
        }

        /// Adds `count` entries of `blob` to the index, the `i`th at `path(i)`.
        fn add_entries(&self, blob: &[u8], count: usize, path: impl Fn(usize) -> String) {
            let mut info = Vec::new();
            for i in 0..count {
                info.extend_from_slice(format!("100644 {}\t{}\0", hex(blob), path(i)).as_bytes());
            }
            self.run(
                None,
                &["update-index", "--add", "-z", "--index-info"],
                &info,
            );
        }

        fn work(&self) -> PathBuf {
            self.tmp.path().join("w")
        }

        fn gitdir_file(&self, name: &str) -> PathBuf {
            self.work().join(".git").join(name)
        }

        /// `git args` on `index` (a file in the gitdir; None: the repository's index), with
        /// `input` on stdin; its stdout. Fails the test when git fails.
        fn run(&self, index: Option<&str>, args: &[&str], input: &[u8]) -> Vec<u8> {
            let mut cmd = Command::new("git");
            cmd.current_dir(self.work())
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", self.tmp.path())
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args([
                    "-c",
                    "init.defaultBranch=main",
                    "-c",
                    "advice.detachedHead=false",
                ])
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(index) = index {
                cmd.env("GIT_INDEX_FILE", self.gitdir_file(index));
            }
            let mut child = cmd.spawn().unwrap();
            let mut stdin = child.stdin.take().unwrap();
            let out = std::thread::scope(|s| {
                s.spawn(move || stdin.write_all(input).unwrap());
                child.wait_with_output().unwrap()
            });
            assert!(
                out.status.success(),
                "git {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        }

        fn git(&self, args: &[&str]) -> String {
            String::from_utf8(self.run(None, args, b"")).unwrap()
        }

        fn write(&self, path: &str, content: &str) {
            let path = self.work().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }

        /// A blob of `content` written to the repository: its raw id.
        fn blob(&self, content: &str) -> Vec<u8> {
            let out = self.run(None, &["hash-object", "-w", "--stdin"], content.as_bytes());
            unhex(String::from_utf8(out).unwrap().trim())
        }

        fn index(&self) -> Vec<u8> {
            std::fs::read(self.gitdir_file("index")).unwrap()
        }

        fn set_index(&self, bytes: &[u8]) {
            std::fs::write(self.gitdir_file("index"), bytes).unwrap();
        }

        fn head_tree(&self) -> Vec<u8> {
            unhex(self.git(&["rev-parse", "HEAD^{tree}"]).trim())
        }

        /// Every tree below `tree`, by path (the root's is empty).
        fn subtrees(&self, tree: &str) -> BTreeMap<Vec<u8>, String> {
            let out = self.run(None, &["ls-tree", "-r", "-d", "-z", tree], b"");
            let mut trees = BTreeMap::from([(Vec::new(), tree.to_string())]);
            for record in out.split(|&b| b == 0).filter(|r| !r.is_empty()) {
                let tab = record.iter().position(|&b| b == b'\t').unwrap();
                let meta = String::from_utf8(record[..tab].to_vec()).unwrap();
                let oid = meta.split(' ').nth(2).unwrap().to_string();
                trees.insert(record[tab + 1..].to_vec(), oid);
            }
            trees
        }

        /// The entries of the index, by path (stage 0 only).
        fn entries(&self) -> BTreeMap<Vec<u8>, (u32, Vec<u8>)> {
            let out = self.run(None, &["ls-files", "-s", "-z"], b"");
            let mut entries = BTreeMap::new();
            for record in out.split(|&b| b == 0).filter(|r| !r.is_empty()) {
                let tab = record.iter().position(|&b| b == b'\t').unwrap();
                let meta = String::from_utf8(record[..tab].to_vec()).unwrap();
                let mut fields = meta.split(' ');
                let mode = u32::from_str_radix(fields.next().unwrap(), 8).unwrap();
                let oid = unhex(fields.next().unwrap());
                entries.insert(record[tab + 1..].to_vec(), (mode, oid));
            }
            entries
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    fn put(path: &str, mode: u32, oid: &[u8]) -> Change {
        Change {
            path: path.as_bytes().to_vec(),
            entry: Some((mode, oid.to_vec())),
        }
    }

    fn del(path: &str) -> Change {
        Change {
            path: path.as_bytes().to_vec(),
            entry: None,
        }
    }

    /// `git update-index -z --index-info` records for `changes`, removals first (git applies
    /// them in order, and would otherwise replace a file by a directory itself).
    fn index_info(changes: &[Change], oid_len: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for change in changes.iter().filter(|c| c.entry.is_none()) {
            out.extend_from_slice(format!("0 {}\t", "0".repeat(2 * oid_len)).as_bytes());
            out.extend_from_slice(&change.path);
            out.push(0);
        }
        for change in changes {
            if let Some((mode, oid)) = &change.entry {
                out.extend_from_slice(format!("{mode:o} {}\t", hex(oid)).as_bytes());
                out.extend_from_slice(&change.path);
                out.push(0);
            }
        }
        out
    }

    fn version(index: &[u8]) -> u32 {
        be32(index, 4).unwrap()
    }

    /// The extensions of a whole index, in order.
    fn extensions(index: &[u8], oid_len: usize) -> Vec<([u8; 4], Vec<u8>)> {
        let header = read_header(index).unwrap();
        let layout = Layout::new(index, header.version, oid_len).unwrap();
        let (mut pos, mut prev_len) = (HEADER_LEN, 0);
        for _ in 0..header.count {
            let entry = entry_at(index, pos, &layout, prev_len).unwrap();
            prev_len = entry.path_len();
            pos = entry.end;
        }
        let data = &index[..layout.limit];
        let mut found = Vec::new();
        while pos < data.len() {
            let (signature, body, end) = extension_at(data, pos).unwrap();
            found.push((signature, body.to_vec()));
            pos = end;
        }
        found
    }

    /// Every cache-tree record of `index`: its path and, when valid, its tree.
    fn tree_records(index: &[u8], oid_len: usize) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let Some((_, tree)) = extensions(index, oid_len)
            .into_iter()
            .find(|(s, _)| *s == TREE)
        else {
            return Vec::new();
        };
        let root = record_at(&tree, 0, oid_len).unwrap();
        let mut records = vec![(Vec::new(), root.oid.map(<[u8]>::to_vec))];
        let mut path = Vec::new();
        let mut open = vec![(root.subtrees, 0)];
        let mut pos = root.end;
        while let Some(top) = open.last_mut() {
            if top.0 == 0 {
                path.truncate(top.1);
                open.pop();
                continue;
            }
            top.0 -= 1;
            let record = record_at(&tree, pos, oid_len).unwrap();
            let base = path.len();
            if base > 0 {
                path.push(b'/');
            }
            path.extend_from_slice(record.name);
            records.push((path.clone(), record.oid.map(<[u8]>::to_vec)));
            open.push((record.subtrees, base));
            pos = record.end;
        }
        assert_eq!(pos, tree.len());
        records
    }

    /// `changes` applied to the repository's index by `edit` and, on a copy, by git; asserts
    /// that both agree (entries, tree, what status sees, no stale cache-tree record) and that
    /// fsck accepts the edited index. Leaves the edited index in place; returns it.
    fn check(repo: &Repo, changes: &[Change]) -> Vec<u8> {
        check_with(repo, changes, true)
    }

    /// Where `old` has an entry table (versions 2 and 3), the edit that jumps by it writes
    /// exactly `walked`, what the walk wrote; and what it wrote has a table of its own.
    fn assert_table_agrees(old: &[u8], oid_len: usize, changes: &[Change], walked: &[u8]) {
        if version(old) == 4 {
            assert!(
                entry_table(old, oid_len).is_err(),
                "a table of a version 4 index"
            );
            return;
        }
        let table = entry_table(old, oid_len).unwrap();
        let pieces = edit_pieces_at(old, oid_len, changes, Some(&table)).unwrap();
        let jumped: Vec<u8> = pieces.iter().flat_map(|p| p.bytes(old).to_vec()).collect();
        assert!(
            jumped == walked,
            "the edit by the table differs from the walk's"
        );
        let mut whole = walked.to_vec();
        whole.extend(vec![0; oid_len]);
        let next = entry_table(&whole, oid_len).unwrap();
        assert_eq!(next.starts.len(), be32(&whole, 8).unwrap() as usize);
    }

    /// A table is the bytes it was made from: another index's is refused, and an index whose
    /// entries are out of git's order has none (a binary search would go astray in it).
    #[test]
    fn entry_tables_fit_only_their_own_index_in_order() {
        let repo = Repo::with_files("sha1");
        let old = repo.index();
        let table = entry_table(&old, 20).unwrap();
        let blob = repo.blob("x\n");
        let change = [put("dir1/x.txt", 0o100644, &blob)];
        let mut edited = edit(&old, 20, &change).unwrap();
        edited.extend(trailer(&edited, 20));
        assert!(matches!(
            edit_pieces_at(&edited, 20, &change, Some(&table)),
            Err(IndexFileError::Malformed(_))
        ));
        // The first two entries (`a.txt`, `b.txt`: the same room) swapped.
        let layout = Layout::new(&old, 2, 20).unwrap();
        let first = entry_at(&old, HEADER_LEN, &layout, 0).unwrap();
        let size = first.end - HEADER_LEN;
        let second = entry_at(&old, first.end, &layout, 0).unwrap();
        assert_eq!(second.end - first.end, size);
        let mut swapped = old.clone();
        swapped[HEADER_LEN..HEADER_LEN + size].copy_from_slice(&old[first.end..second.end]);
        swapped[first.end..second.end].copy_from_slice(&old[HEADER_LEN..first.end]);
        assert!(matches!(
            entry_table(&swapped, 20),
            Err(IndexFileError::Malformed(_))
        ));
    }

    fn check_with(repo: &Repo, changes: &[Change], status: bool) -> Vec<u8> {
        let oid_len = repo.oid_len;
        let old = repo.index();
        std::fs::write(repo.gitdir_file("index.expected"), &old).unwrap();
        let info = index_info(changes, oid_len);
        repo.run(
            Some("index.expected"),
            &["update-index", "-z", "--index-info"],
            &info,
        );
        let mut ours = edit(&old, oid_len, changes).unwrap();
        assert_table_agrees(&old, oid_len, changes, &ours);
        ours.extend(trailer(&ours, oid_len));
        repo.set_index(&ours);
        assert_eq!(version(&ours), version(&old));

        let listing = ["ls-files", "-s", "-v", "-z"];
        let expected_entries = repo.run(Some("index.expected"), &listing, b"");
        assert_eq!(
            String::from_utf8_lossy(&repo.run(None, &listing, b"")),
            String::from_utf8_lossy(&expected_entries)
        );
        repo.run(None, &["fsck", "--no-dangling", "--no-progress"], b"");
        assert_eq!(cache_tree_root(&ours, oid_len).unwrap(), None);
        for (signature, _) in extensions(&ours, oid_len) {
            assert!(
                signature == TREE || signature == REUC,
                "{:?} kept",
                String::from_utf8_lossy(&signature)
            );
        }

        let expected_tree =
            String::from_utf8(repo.run(Some("index.expected"), &["write-tree"], b""))
                .unwrap()
                .trim()
                .to_string();
        let trees = repo.subtrees(&expected_tree);
        for (path, oid) in tree_records(&ours, oid_len) {
            if let Some(oid) = oid {
                assert_eq!(
                    trees.get(&path),
                    Some(&hex(&oid)),
                    "the cache tree's record for {:?} is stale",
                    String::from_utf8_lossy(&path)
                );
            }
        }
        // git writes the index it reads back (cache tree, refreshed stat data): a copy.
        std::fs::write(repo.gitdir_file("index.check"), &ours).unwrap();
        let our_tree =
            String::from_utf8(repo.run(Some("index.check"), &["write-tree"], b"")).unwrap();
        assert_eq!(our_tree.trim(), expected_tree);
        if status {
            let commit = repo.git(&["commit-tree", &expected_tree, "-m", "expected"]);
            repo.git(&["update-ref", "HEAD", commit.trim()]);
            let status = repo.run(Some("index.check"), &["status", "--porcelain", "-z"], b"");
            for line in status.split(|&b| b == 0).filter(|l| l.len() > 3) {
                assert!(
                    matches!(line[0], b' ' | b'?' | b'!'),
                    "status sees a staged change: {}",
                    String::from_utf8_lossy(line)
                );
            }
        }
        ours
    }

    #[test]
    fn version_2_edits() {
        let repo = Repo::with_files("sha1");
        assert_eq!(version(&repo.index()), 2);
        let (one, two) = (repo.blob("one\n"), repo.blob("two\n"));
        check(
            &repo,
            &[
                put("dir1/sub/z.txt", 0o100644, &one),
                del("dir2/p.txt"),
                put("dir1/new.txt", 0o100755, &two),
                put("newdir/deeper/n.txt", 0o100644, &one),
                put("dir1/sub/link", 0o120000, &two),
                put("0first", 0o100644, &two),
                put("zz/last", 0o100644, &two),
            ],
        );
        check(&repo, &[del("dir2/r/s.txt"), del("g/h.txt")]);
        check(&repo, &[put("dir1.txt", 0o100644, &one)]);
        check(&repo, &[]);
    }

    #[test]
    fn version_3_with_skip_worktree_entries() {
        let repo = Repo::with_files("sha1");
        repo.git(&[
            "update-index",
            "--skip-worktree",
            "dir1/x.txt",
            "dir2/p.txt",
            "f",
        ]);
        assert_eq!(version(&repo.index()), 3);
        let blob = repo.blob("new\n");
        check(
            &repo,
            &[
                put("dir1/x.txt", 0o100644, &blob),
                put("dir1/y.txt", 0o100644, &blob),
                put("dir2/q.txt", 0o100644, &blob),
                del("b.txt"),
            ],
        );
        assert!(repo.git(&["ls-files", "-v"]).contains("S dir2/p.txt"));
        check(&repo, &[del("f"), put("f/inside", 0o100644, &blob)]);
    }

    #[test]
    fn version_4_changes_at_start_middle_end_and_adjacent() {
        let repo = Repo::with_files("sha1");
        repo.git(&["update-index", "--index-version", "4"]);
        assert_eq!(version(&repo.index()), 4);
        let (one, two) = (repo.blob("one\n"), repo.blob("two\n"));
        check(&repo, &[put("a.txt", 0o100644, &one)]);
        check(&repo, &[put("0before", 0o100644, &one)]);
        check(&repo, &[del("0before"), del("a.txt")]);
        check(&repo, &[del("dir1/sub/z.txt")]);
        check(
            &repo,
            &[
                put("dir1/x.txt", 0o100644, &two),
                put("dir1/y.txt", 0o100644, &one),
            ],
        );
        check(&repo, &[del("z_last.txt")]);
        check(
            &repo,
            &[
                put("zz/after", 0o100644, &one),
                put("zz/after2", 0o100644, &two),
            ],
        );
        check(
            &repo,
            &[
                put("dir1/sub/deep/w.txt", 0o100644, &two),
                put("dir1/sub/deep/v", 0o100644, &two),
            ],
        );
        repo.git(&["write-tree"]);
        check(
            &repo,
            &[
                put("b.txt", 0o100644, &one),
                put("dir1-x.txt", 0o100644, &one),
                del("dir1.txt"),
                put("dir1/a", 0o100644, &one),
                del("dir10/q.txt"),
                put("dir10/r.txt", 0o100644, &two),
                put("zz/after", 0o100755, &one),
            ],
        );
    }

    #[test]
    fn file_replaced_by_directory_and_back() {
        for version in ["2", "4"] {
            let repo = Repo::with_files("sha1");
            repo.git(&["update-index", "--index-version", version]);
            let blob = repo.blob("blob\n");
            check(&repo, &[del("f"), put("f/b", 0o100644, &blob)]);
            repo.git(&["write-tree"]);
            check(&repo, &[del("f/b"), put("f", 0o100644, &blob)]);
            check(
                &repo,
                &[
                    del("dir2/p.txt"),
                    del("dir2/r/s.txt"),
                    put("dir2", 0o100644, &blob),
                ],
            );
            repo.git(&["write-tree"]);
            check(&repo, &[del("dir2"), put("dir2/r/s.txt", 0o100644, &blob)]);
        }
    }

    #[test]
    fn untracked_cache_is_dropped() {
        let repo = Repo::with_files("sha1");
        repo.write("untracked.txt", "u\n");
        repo.git(&["update-index", "--untracked-cache"]);
        repo.git(&["status", "--porcelain"]);
        let signatures: Vec<_> = extensions(&repo.index(), 20)
            .into_iter()
            .map(|e| e.0)
            .collect();
        assert!(signatures.contains(b"UNTR"), "{signatures:?}");
        let blob = repo.blob("x\n");
        check(&repo, &[put("dir1/x.txt", 0o100644, &blob)]);
        repo.git(&["status", "--porcelain"]);
    }

    #[test]
    fn resolve_undo_is_kept() {
        let repo = Repo::with_files("sha1");
        let (one, two, three) = (repo.blob("1\n"), repo.blob("2\n"), repo.blob("3\n"));
        let mut info = format!("0 {}\tdir1/x.txt\0", "0".repeat(40));
        for (stage, oid) in [(1, &one), (2, &two), (3, &three)] {
            info += &format!("100644 {} {stage}\tdir1/x.txt\0", hex(oid));
        }
        repo.run(
            None,
            &["update-index", "-z", "--index-info"],
            info.as_bytes(),
        );
        repo.git(&["add", "dir1/x.txt"]);
        let reuc = |index: &[u8]| {
            extensions(index, 20)
                .into_iter()
                .find(|e| e.0 == REUC)
                .map(|e| e.1)
        };
        let before = reuc(&repo.index());
        assert!(before.is_some());
        let ours = check(&repo, &[put("b.txt", 0o100644, &one)]);
        assert_eq!(reuc(&ours), before);
        assert_eq!(
            repo.git(&["ls-files", "--resolve-undo"]),
            String::from_utf8(repo.run(
                Some("index.expected"),
                &["ls-files", "--resolve-undo"],
                b""
            ))
            .unwrap()
        );
    }

    #[test]
    fn sha256_repository() {
        for version in ["2", "4"] {
            let repo = Repo::with_files("sha256");
            repo.git(&["update-index", "--index-version", version]);
            let blob = repo.blob("sha256\n");
            assert_eq!(blob.len(), 32);
            assert_eq!(
                cache_tree_root(&repo.index(), 32).unwrap(),
                Some(repo.head_tree())
            );
            check(
                &repo,
                &[
                    put("dir1/sub/z.txt", 0o100644, &blob),
                    del("a.txt"),
                    put("new/file", 0o100644, &blob),
                ],
            );
        }
    }

    #[test]
    fn paths_longer_than_the_name_field() {
        for version in ["2", "4"] {
            let repo = Repo::with_files("sha1");
            repo.git(&["update-index", "--index-version", version]);
            let blob = repo.blob("long\n");
            let component = "c".repeat(100);
            let long = |total: usize, leaf: &str| {
                let mut path = String::new();
                while path.len() + component.len() + 1 + leaf.len() < total {
                    path += &component;
                    path.push('/');
                }
                path += &"l".repeat(total - path.len() - leaf.len());
                path + leaf
            };
            let (a, b, c) = (long(5000, "a"), long(0xfff, "b"), long(0xffe, "c"));
            assert_eq!((a.len(), b.len(), c.len()), (5000, 0xfff, 0xffe));
            // No status: the work tree cannot hold such paths.
            check_with(
                &repo,
                &[
                    put(&a, 0o100644, &blob),
                    put(&b, 0o100644, &blob),
                    put(&c, 0o100644, &blob),
                ],
                false,
            );
            let other = repo.blob("other\n");
            check_with(&repo, &[put(&a, 0o100644, &other), del(&c)], false);
            check_with(&repo, &[put(&c, 0o100644, &other), del("a.txt")], false);
        }
    }

    /// xorshift64: deterministic, no crate.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    #[test]
    fn randomized_changes_agree_with_git() {
        const NAMES: [&str; 7] = ["a", "b", "c", "a.x", "a-b", "b0", "dd"];
        let repo = Repo::new("sha1");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let blobs: Vec<Vec<u8>> = (0..6).map(|i| repo.blob(&format!("blob {i}\n"))).collect();
        let random_path = |rng: &mut Rng| {
            let depth = 1 + rng.below(3);
            (0..depth)
                .map(|_| NAMES[rng.below(NAMES.len())])
                .collect::<Vec<_>>()
                .join("/")
                .into_bytes()
        };
        // Adds `path`, replacing the files in its directories and whatever was below it.
        let add = |state: &mut BTreeMap<Vec<u8>, (u32, Vec<u8>)>, path: Vec<u8>, entry| {
            for (at, _) in path.iter().enumerate().filter(|(_, b)| **b == b'/') {
                state.remove(&path[..at]);
            }
            let mut below = path.clone();
            below.push(b'/');
            state.retain(|p, _| !p.starts_with(&below));
            state.insert(path, entry);
        };
        let mut state = BTreeMap::new();
        for _ in 0..40 {
            let path = random_path(&mut rng);
            add(
                &mut state,
                path,
                (0o100644, blobs[rng.below(blobs.len())].clone()),
            );
        }
        let mut info = Vec::new();
        for (path, (mode, oid)) in &state {
            info.extend_from_slice(format!("{mode:o} {}\t", hex(oid)).as_bytes());
            info.extend_from_slice(path);
            info.push(0);
        }
        repo.run(
            None,
            &["update-index", "--add", "-z", "--index-info"],
            &info,
        );
        repo.git(&["write-tree"]);
        for round in 0..30 {
            if rng.below(3) == 0 {
                let version = ["2", "4"][rng.below(2)];
                repo.git(&["update-index", "--index-version", version]);
            }
            if rng.below(6) == 0 {
                let current = repo.entries();
                if let Some(path) = current.keys().nth(rng.below(current.len().max(1))) {
                    let path = String::from_utf8(path.clone()).unwrap();
                    repo.git(&["update-index", "--skip-worktree", &path]);
                }
            }
            // A cache tree valid again, for the edit to invalidate.
            if rng.below(3) != 0 {
                repo.git(&["write-tree"]);
            }
            let current = repo.entries();
            let mut next = current.clone();
            for _ in 0..1 + rng.below(6) {
                let existing = next.keys().nth(rng.below(next.len().max(1))).cloned();
                let blob = blobs[rng.below(blobs.len())].clone();
                match (rng.below(4), existing) {
                    (0, Some(path)) => {
                        let mode = [0o100644, 0o100755, 0o120000][rng.below(3)];
                        next.insert(path, (mode, blob));
                    }
                    (1, Some(path)) => {
                        next.remove(&path);
                    }
                    _ => {
                        let path = random_path(&mut rng);
                        add(&mut next, path, (0o100644, blob));
                    }
                }
            }
            let mut changes: Vec<Change> = current
                .keys()
                .filter(|p| !next.contains_key(*p))
                .map(|p| Change {
                    path: p.clone(),
                    entry: None,
                })
                .collect();
            for (path, entry) in &next {
                if current.get(path) != Some(entry) {
                    changes.push(Change {
                        path: path.clone(),
                        entry: Some(entry.clone()),
                    });
                }
            }
            // The editor sorts them itself.
            changes.reverse();
            let old = repo.index();
            let ours = check_with(&repo, &changes, round % 5 == 0);
            assert_eq!(repo.entries(), next, "round {round}");
            assert_eq!(version(&ours), version(&old));
        }
    }

    #[test]
    fn unsupported_indexes_are_left_to_git() {
        let repo = Repo::with_files("sha1");
        let blob = repo.blob("x\n");
        let change = [put("dir1/x.txt", 0o100644, &blob)];
        let unsupported = |index: &[u8], changes: &[Change]| {
            let result = edit(index, 20, changes);
            assert!(
                matches!(result, Err(IndexFileError::Unsupported(_))),
                "{result:?}"
            );
        };
        let plain = repo.index();

        unsupported(&plain, &[del("nothing/here")]);
        unsupported(&plain, &[put("f/x", 0o100644, &blob)]);
        unsupported(&plain, &[put("dir2", 0o100644, &blob)]);
        unsupported(&plain, &[put("dir2", 0o100644, &blob), del("dir2/p.txt")]);
        unsupported(
            &plain,
            &[put("q", 0o100644, &blob), put("q/r", 0o100644, &blob)],
        );
        assert!(matches!(
            edit(&plain, 20, &[change[0].clone(), change[0].clone()]),
            Err(IndexFileError::Malformed(_))
        ));
        assert!(matches!(
            edit(&plain, 20, &[put("bad//path", 0o100644, &blob)]),
            Err(IndexFileError::Malformed(_))
        ));
        assert!(matches!(
            edit(&plain, 20, &[put("dir", 0o040000, &blob)]),
            Err(IndexFileError::Malformed(_))
        ));

        let mut required = plain[..plain.len() - 20].to_vec();
        required.extend_from_slice(b"abcd\0\0\0\0");
        required.extend(trailer(&required, 20));
        unsupported(&required, &change);
        assert!(matches!(
            cache_tree_root(&required, 20),
            Err(IndexFileError::Unsupported(_))
        ));
        let mut optional = plain[..plain.len() - 20].to_vec();
        optional.extend_from_slice(b"ABCD\0\0\0\x01z");
        optional.extend(trailer(&optional, 20));
        assert!(edit(&optional, 20, &change).is_ok());

        let mut version_5 = plain.clone();
        version_5[7] = 5;
        unsupported(&version_5, &change);

        let mut conflict = format!("0 {}\tdir1/y.txt\0", "0".repeat(40));
        for stage in 1..=3 {
            conflict += &format!("100644 {} {stage}\tdir1/y.txt\0", hex(&blob));
        }
        repo.run(
            None,
            &["update-index", "-z", "--index-info"],
            conflict.as_bytes(),
        );
        let conflicted = repo.index();
        unsupported(&conflicted, &[put("dir1/y.txt", 0o100644, &blob)]);
        unsupported(&conflicted, &[del("dir1/y.txt")]);
        assert!(edit(&conflicted, 20, &change).is_ok());
        repo.set_index(&plain);

        repo.git(&["update-index", "--split-index"]);
        let split = repo.index();
        assert!(extensions(&split, 20).iter().any(|e| e.0 == LINK));
        unsupported(&split, &change);
        repo.git(&["update-index", "--no-split-index"]);

        repo.git(&["sparse-checkout", "set", "--cone", "--sparse-index", "dir1"]);
        let sparse = repo.index();
        assert!(extensions(&sparse, 20).iter().any(|e| e.0 == SDIR));
        unsupported(&sparse, &change);
        unsupported(&sparse, &[put("a.txt", 0o100644, &blob)]);
    }

    #[test]
    fn cache_tree_root_claims_what_git_recorded() {
        for format in ["sha1", "sha256"] {
            let repo = Repo::with_files(format);
            let oid_len = repo.oid_len;
            let index = repo.index();
            assert_eq!(
                cache_tree_root(&index, oid_len).unwrap(),
                Some(repo.head_tree())
            );
            assert_eq!(
                eoie_extensions_offset(
                    &index[index.len() - eoie_tail_len(oid_len)..],
                    index.len() as u64,
                    oid_len
                ),
                None
            );

            repo.write("dir1/x.txt", "changed\n");
            repo.git(&["add", "dir1/x.txt"]);
            assert_eq!(cache_tree_root(&repo.index(), oid_len).unwrap(), None);

            let eoie = ["-c", "index.recordEndOfIndexEntries=true"];
            let by_eoie = |index: &[u8]| {
                let tail = &index[index.len() - eoie_tail_len(oid_len)..];
                let offset = eoie_extensions_offset(tail, index.len() as u64, oid_len)
                    .expect("an EOIE extension") as usize;
                cache_tree_root_in_extensions(&index[offset..index.len() - oid_len], oid_len)
                    .unwrap()
            };
            repo.run(None, &[&eoie[..], &["read-tree", "HEAD"]].concat(), b"");
            let index = repo.index();
            assert!(extensions(&index, oid_len).iter().any(|e| e.0 == EOIE));
            assert_eq!(by_eoie(&index), Some(repo.head_tree()));
            assert_eq!(
                cache_tree_root(&index, oid_len).unwrap(),
                Some(repo.head_tree())
            );

            repo.run(None, &[&eoie[..], &["add", "dir1/x.txt"]].concat(), b"");
            let index = repo.index();
            assert!(extensions(&index, oid_len).iter().any(|e| e.0 == EOIE));
            assert_eq!(by_eoie(&index), None);
            assert_eq!(cache_tree_root(&index, oid_len).unwrap(), None);

            repo.git(&["update-index", "--index-version", "4"]);
            repo.run(
                None,
                &[&eoie[..], &["commit", "-q", "-m", "v4"]].concat(),
                b"",
            );
            let index = repo.index();
            assert_eq!(version(&index), 4);
            assert_eq!(by_eoie(&index), Some(repo.head_tree()));
            assert_eq!(
                cache_tree_root(&index, oid_len).unwrap(),
                Some(repo.head_tree())
            );

            // An EOIE pointing elsewhere than where the entries end is refused.
            let mut moved = index.clone();
            let at = moved.len() - eoie_tail_len(oid_len) + 8;
            let offset = be32(&moved, at).unwrap() - 8;
            moved[at..at + 4].copy_from_slice(&offset.to_be_bytes());
            assert!(cache_tree_root(&moved, oid_len).is_err());
        }
    }

    /// What git writes for threaded reading (an offset table, `IEOT`, and `EOIE`): read by
    /// both routes, and dropped by the edit.
    #[test]
    fn threaded_index_extensions() {
        let repo = Repo::new("sha1");
        let blob = repo.blob("x\n");
        repo.add_entries(&blob, 20_000, |i| {
            format!("d{:02}/s{}/f{i:05}", i / 1000, (i / 100) % 10)
        });
        let threads = [
            "-c",
            "index.threads=4",
            "-c",
            "index.recordOffsetTable=true",
            "-c",
            "index.recordEndOfIndexEntries=true",
        ];
        let other = repo.blob("y\n");
        for (version, path, removed) in [
            ("2", "d05/s5/f05500", "d00/s0/f00000"),
            ("4", "d15/s1/f15150", "d00/s0/f00001"),
        ] {
            repo.run(
                None,
                &[&threads[..], &["update-index", "--index-version", version]].concat(),
                b"",
            );
            let tree =
                String::from_utf8(repo.run(None, &[&threads[..], &["write-tree"]].concat(), b""))
                    .unwrap();
            let index = repo.index();
            let signatures: Vec<_> = extensions(&index, 20).into_iter().map(|e| e.0).collect();
            assert!(
                signatures.contains(b"IEOT") && signatures.contains(&EOIE),
                "{signatures:?}"
            );
            assert_eq!(
                cache_tree_root(&index, 20).unwrap(),
                Some(unhex(tree.trim()))
            );
            let tail = &index[index.len() - eoie_tail_len(20)..];
            let offset = eoie_extensions_offset(tail, index.len() as u64, 20).unwrap() as usize;
            assert_eq!(
                cache_tree_root_in_extensions(&index[offset..index.len() - 20], 20).unwrap(),
                Some(unhex(tree.trim()))
            );
            check_with(&repo, &[put(path, 0o100644, &other), del(removed)], false);
        }
    }

    /// An index of no entries with `extensions` and a zero trailer.
    fn bare_index(extensions: &[(&[u8; 4], &[u8])]) -> Vec<u8> {
        let mut index = b"DIRC\0\0\0\x02\0\0\0\0".to_vec();
        for (signature, body) in extensions {
            index.extend_from_slice(*signature);
            index.extend_from_slice(&(body.len() as u32).to_be_bytes());
            index.extend_from_slice(body);
        }
        index.extend_from_slice(&[0; 20]);
        index
    }

    #[test]
    fn hostile_cache_trees_are_errors() {
        let oid = [7u8; 20];
        let valid = [b"\x001 0\n".as_slice(), &oid].concat();
        assert_eq!(
            cache_tree_root(&bare_index(&[(b"TREE", &valid)]), 20).unwrap(),
            Some(oid.to_vec())
        );
        assert_eq!(
            cache_tree_root(&bare_index(&[(b"TREE", b"\0-1 0\n")]), 20).unwrap(),
            None
        );
        assert_eq!(cache_tree_root(&bare_index(&[]), 20).unwrap(), None);
        for tree in [
            // a count claiming more subtrees than there are records, at git's maximum and past it
            b"\0-1 2147483647\n".as_slice(),
            b"\0-1 2147483648\n",
            b"\0-1 99999999999999999999\n",
            b"\x001 2147483647\n",
            b"\0-1 1\n",
            b"",
            b"\0",
            b"\0-1",
            b"\0-1 ",
            b"\0 1 0\n",
            b"\0-1 0",
            b"\0x 0\n",
            b"\0-1 0\nextra",
            b"root\0-1 0\n",
            b"\0-1 1\n\0-1 0\n",
            b"\0-1 1\na/b\0-1 0\n",
            b"\x005 0\nshort",
        ] {
            let index = bare_index(&[(b"TREE", tree)]);
            assert!(cache_tree_root(&index, 20).is_err(), "{tree:?}");
            assert!(edit(&index, 20, &[]).is_err(), "{tree:?}");
        }
        assert!(
            cache_tree_root(
                &bare_index(&[(b"TREE", b"\0-1 0\n"), (b"TREE", b"\0-1 0\n")]),
                20
            )
            .is_err()
        );

        // Deep nesting is counted, not recursed into.
        let mut deep = b"\0-1 1\n".to_vec();
        for _ in 0..100_000 {
            deep.extend_from_slice(b"a\0-1 1\n");
        }
        deep.extend_from_slice(b"a\0-1 0\n");
        assert_eq!(
            cache_tree_root(&bare_index(&[(b"TREE", &deep)]), 20).unwrap(),
            None
        );

        let mut many = b"DIRC\0\0\0\x02\xff\xff\xff\xff".to_vec();
        many.extend_from_slice(&[0; 200]);
        assert!(cache_tree_root(&many, 20).is_err());
        assert!(cache_tree_root(b"DIRC", 20).is_err());
        assert!(cache_tree_root(b"", 20).is_err());
        assert!(cache_tree_root(&bare_index(&[]), 21).is_err());
    }

    #[test]
    fn damaged_indexes_never_panic() {
        let repo = Repo::with_files("sha1");
        repo.git(&["update-index", "--skip-worktree", "f"]);
        let mut samples = vec![];
        for version in ["3", "4"] {
            repo.git(&["update-index", "--index-version", version]);
            repo.run(
                None,
                &["-c", "index.recordEndOfIndexEntries=true", "write-tree"],
                b"",
            );
            samples.push(repo.index());
        }
        let blob = repo.blob("x\n");
        let changes = [put("dir1/x.txt", 0o100644, &blob), del("dir1/y.txt")];
        let mut rng = Rng(42);
        for index in &samples {
            let claim = cache_tree_root(index, 20).unwrap();
            assert!(claim.is_some());
            let mut accepted = 0;
            for len in 0..index.len() {
                // Only where the cut leaves whole extensions and something for a trailer: the
                // entries and the TREE's first bytes, or all but an EOIE's last bytes.
                if let Ok(cut) = cache_tree_root(&index[..len], 20) {
                    assert!(cut.is_none() || cut == claim, "{len}");
                    accepted += 1;
                }
                let _ = edit(&index[..len], 20, &changes);
                let tail_len = eoie_tail_len(20).min(len);
                let _ = eoie_extensions_offset(&index[len - tail_len..len], len as u64, 20);
                let _ = cache_tree_root_in_extensions(&index[len..], 20);
            }
            assert!(accepted <= 2, "{accepted} truncations accepted");
            for at in 0..index.len() {
                let mut damaged = index.clone();
                damaged[at] ^= 1 << rng.below(8);
                let _ = cache_tree_root(&damaged, 20);
                if let Ok(body) = edit(&damaged, 20, &changes) {
                    let mut edited = body.clone();
                    edited.extend(trailer(&body, 20));
                    assert!(matches!(cache_tree_root(&edited, 20), Ok(None)));
                }
                let _ = cache_tree_root_in_extensions(&damaged[at..], 20);
            }
        }
        for _ in 0..2000 {
            let mut garbage = b"DIRC\0\0\0".to_vec();
            garbage.push(2 + rng.below(3) as u8);
            garbage.extend((0..rng.below(300)).map(|_| rng.below(256) as u8));
            let _ = cache_tree_root(&garbage, 20);
            let _ = edit(&garbage, 20, &changes);
        }
    }

    /// Times `edit` on an index of 100,000 entries with one change (run with `--release
    /// --ignored --nocapture`).
    #[test]
    #[ignore]
    fn timing_100k_entries() {
        let repo = Repo::new("sha1");
        let blob = repo.blob("x\n");
        repo.add_entries(&blob, 100_000, |i| {
            format!("dir{:03}/sub{}/file{i:05}.txt", i / 1000, (i / 100) % 10)
        });
        repo.git(&["write-tree"]);
        let other = repo.blob("y\n");
        for version in ["2", "4"] {
            repo.git(&["update-index", "--index-version", version]);
            repo.git(&["write-tree"]);
            let old = repo.index();
            assert!(cache_tree_root(&old, 20).unwrap().is_some());
            let changes = [put("dir050/sub5/file50500.txt", 0o100644, &other)];
            let median = |runs: usize, f: &mut dyn FnMut()| {
                let mut times: Vec<_> = (0..runs)
                    .map(|_| {
                        let started = std::time::Instant::now();
                        f();
                        started.elapsed()
                    })
                    .collect();
                times.sort();
                times[runs / 2]
            };
            let body = edit(&old, 20, &changes).unwrap();
            if version == "2" {
                let table = entry_table(&old, 20).unwrap();
                let mut into = Vec::with_capacity(old.len());
                println!(
                    "version 2: entry_table {:?}, edit_pieces_at {:?}, a copy into a kept \
                     buffer {:?} (medians)",
                    median(50, &mut || drop(std::hint::black_box(entry_table(
                        &old, 20
                    )))),
                    median(200, &mut || drop(std::hint::black_box(edit_pieces_at(
                        &old,
                        20,
                        &changes,
                        Some(&table)
                    )))),
                    median(50, &mut || {
                        into.clear();
                        into.extend_from_slice(&old);
                        std::hint::black_box(&into);
                    }),
                );
            }
            println!(
                "version {version}, {} bytes: edit {:?}, edit_pieces {:?}, trailer {:?}, \
                 a plain copy {:?}, cache_tree_root {:?} (medians)",
                old.len(),
                median(200, &mut || drop(std::hint::black_box(edit(
                    &old, 20, &changes
                )))),
                median(200, &mut || {
                    drop(std::hint::black_box(edit_pieces(&old, 20, &changes)))
                }),
                median(50, &mut || drop(std::hint::black_box(trailer(&body, 20)))),
                median(50, &mut || drop(std::hint::black_box(old.clone()))),
                median(50, &mut || drop(std::hint::black_box(cache_tree_root(
                    &old, 20
                )))),
            );
            check_with(&repo, &changes, false);
        }
    }
}
