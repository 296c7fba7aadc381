//! Submodule entries (gitlinks) in a git index.
//!
//! Why: the operator's `git status` enters every gitlinked directory and reads the repository
//! there, so the sandbox's view binds each gitlink's `.git` of the operator's index read-only
//! (`git::bound`). Owns only the parsing: streamed, so an index padded with a huge optional
//! extension (`ZPAD`) is read up to the end of its entries and no further; bounded, never
//! panics (the index is written by a confined process; fuzzed: `git_index`). An index it
//! cannot read is an error the caller treats as hostile, never as "no gitlinks".

use std::io::Read;
use std::path::PathBuf;

/// Most gitlinks one index may hold; more is refused as hostile.
pub const MAX_GITLINKS: usize = 100_000;

/// Longest entry path git writes (its own limit is 4096 in practice on Linux).
const MAX_PATH: usize = 64 * 1024;

const GITLINK_MODE: u32 = 0o160000;
const MODE_TYPE_MASK: u32 = 0o170000;

/// Why an index could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("it is not a git index of version 2, 3 or 4 ({0})")]
    Format(&'static str),
    #[error("it records more than {MAX_GITLINKS} submodules")]
    TooManyGitlinks,
    #[error("reading it failed: {0}")]
    Io(#[from] std::io::Error),
}

/// The paths of every gitlink entry in `index` (versions 2, 3 and 4).
pub fn gitlinks(index: &[u8]) -> Result<Vec<PathBuf>, IndexError> {
    read_gitlinks(index)
}

/// The same, read from a stream: only the header and the entries are read (extensions and
/// the checksum after them are not), so its memory is bounded by the gitlinks found.
pub(crate) fn read_gitlinks(mut input: impl Read) -> Result<Vec<PathBuf>, IndexError> {
    use std::os::unix::ffi::OsStrExt;
    let eof = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => IndexError::Format("truncated"),
        _ => IndexError::Io(e),
    };
    let mut header = [0u8; 12];
    input.read_exact(&mut header).map_err(eof)?;
    if &header[0..4] != b"DIRC" {
        return Err(IndexError::Format("no DIRC signature"));
    }
    let version = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    if !(2..=4).contains(&version) {
        return Err(IndexError::Format("unknown version"));
    }
    let count = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    let mut previous: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    let byte = |input: &mut dyn Read| -> Result<u8, IndexError> {
        let mut b = [0u8; 1];
        input.read_exact(&mut b).map_err(eof)?;
        Ok(b[0])
    };
    for _ in 0..count {
        // ctime, mtime, dev, ino (24 bytes), mode, uid, gid, size, a 20-byte object id,
        // flags: 62 bytes (a sha256 repository's 32-byte ids are not supported: Format).
        let mut fixed = [0u8; 62];
        input.read_exact(&mut fixed).map_err(eof)?;
        let mode = u32::from_be_bytes([fixed[24], fixed[25], fixed[26], fixed[27]]);
        let flags = u16::from_be_bytes([fixed[60], fixed[61]]);
        let mut consumed = 62;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return Err(IndexError::Format("extended flags in a version 2 index"));
            }
            let mut extended = [0u8; 2];
            input.read_exact(&mut extended).map_err(eof)?;
            consumed += 2;
        }
        let mut path = if version == 4 {
            // Prefix compression: a varint of bytes to drop from the previous path, then the
            // NUL-terminated rest.
            let strip = varint(&mut input)?;
            let keep = previous
                .len()
                .checked_sub(strip)
                .ok_or(IndexError::Format("prefix longer than the previous path"))?;
            previous[..keep].to_vec()
        } else {
            Vec::new()
        };
        let mut rest = 0usize;
        loop {
            let b = byte(&mut input)?;
            if b == 0 {
                break;
            }
            path.push(b);
            rest += 1;
            if path.len() > MAX_PATH {
                return Err(IndexError::Format("a path longer than 64 KiB"));
            }
        }
        if version != 4 {
            // Entries are NUL-padded to a multiple of 8 bytes (1 to 8 NULs, one read above).
            let entry_len = consumed + rest;
            let padding = (entry_len + 8) / 8 * 8 - entry_len - 1;
            for _ in 0..padding {
                if byte(&mut input)? != 0 {
                    return Err(IndexError::Format("entry padding is not NUL"));
                }
            }
        }
        if mode & MODE_TYPE_MASK == GITLINK_MODE {
            if out.len() == MAX_GITLINKS {
                return Err(IndexError::TooManyGitlinks);
            }
            out.push(PathBuf::from(std::ffi::OsStr::from_bytes(&path)));
        }
        previous = path;
    }
    Ok(out)
}

/// git's offset varint (as in pack files: 7 bits a byte, each continuation adding one).
fn varint(input: &mut impl Read) -> Result<usize, IndexError> {
    let mut value: usize = 0;
    for i in 0..10 {
        let mut b = [0u8; 1];
        input.read_exact(&mut b).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => IndexError::Format("truncated"),
            _ => IndexError::Io(e),
        })?;
        let b = b[0];
        let overflow = IndexError::Format("varint overflow");
        if i > 0 {
            value = value
                .checked_add(1)
                .and_then(|v| v.checked_mul(128))
                .ok_or(overflow)?;
        }
        value = value
            .checked_add((b & 0x7f) as usize)
            .ok_or(IndexError::Format("varint overflow"))?;
        if b & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(IndexError::Format("varint too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v2 index with the given (mode, path) entries.
    fn index(entries: &[(u32, &str)]) -> Vec<u8> {
        let mut out = b"DIRC".to_vec();
        out.extend(2u32.to_be_bytes());
        out.extend((entries.len() as u32).to_be_bytes());
        for (mode, path) in entries {
            let start = out.len();
            out.extend([0u8; 24]);
            out.extend(mode.to_be_bytes());
            out.extend([0u8; 12]);
            out.extend([0u8; 20]);
            out.extend((path.len() as u16).to_be_bytes());
            out.extend(path.as_bytes());
            let len = out.len() - start;
            out.extend(std::iter::repeat_n(0u8, (len + 8) / 8 * 8 - len));
        }
        out
    }

    #[test]
    fn finds_gitlinks_among_files() {
        let idx = index(&[(0o100644, "a.txt"), (0o160000, "sub"), (0o100755, "run.sh")]);
        assert_eq!(gitlinks(&idx).unwrap(), vec![PathBuf::from("sub")]);
    }

    #[test]
    fn reads_indexes_git_wrote_in_versions_2_and_4() {
        // Written by git 2.47: a file `a` and a gitlink `sub` (see fuzz/seeds/git_index).
        for index in [
            &include_bytes!("../../fuzz/seeds/git_index/index-v2-gitlink")[..],
            &include_bytes!("../../fuzz/seeds/git_index/index-v4-gitlink")[..],
        ] {
            assert_eq!(gitlinks(index).unwrap(), vec![PathBuf::from("sub")]);
        }
    }

    #[test]
    fn truncated_or_foreign_input_is_none_not_a_panic() {
        let idx = index(&[(0o160000, "sub")]);
        for cut in 0..idx.len() {
            assert!(gitlinks(&idx[..cut]).is_err(), "{cut}");
        }
        assert!(gitlinks(b"not an index").is_err());
        assert!(gitlinks(&idx[..idx.len() - 1]).is_err());
    }

    #[test]
    fn a_padded_index_is_read_up_to_its_entries() {
        // 64 MiB of an optional extension after the entries (finding 2's `ZPAD`): the reader
        // stops after the entries, whatever follows.
        let mut idx = index(&[(0o160000, "sub")]);
        idx.extend(b"ZPAD");
        idx.extend(((64u32 << 20) + 1).to_be_bytes());
        idx.extend(std::iter::repeat_n(0u8, (64 << 20) + 1));
        assert_eq!(gitlinks(&idx).unwrap(), vec![PathBuf::from("sub")]);
    }
}
