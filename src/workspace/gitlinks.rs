//! Submodule entries (gitlinks) in a git index, and whether a nested repository's config
//! names a command git would run.
//!
//! Why: a confined command can `git init sub`, plant `core.fsmonitor` in `sub/.git/config`
//! and record `sub` as a gitlink in the operator's index (only `.git/index` is written, which
//! git needs writable); the operator's next `git status` then runs the planted command in the
//! submodule, outside any sandbox. The sandbox checks for exactly that after a call that
//! changed the index. Owns only the parsing (bounded, never panics: the index is written by a
//! confined process); moving files is the caller's business.

use std::path::PathBuf;

/// Largest index read; an index above it is not scanned (and the caller says so).
pub const MAX_INDEX_BYTES: usize = 64 * 1024 * 1024;

const GITLINK_MODE: u32 = 0o160000;
const MODE_TYPE_MASK: u32 = 0o170000;

/// The paths of every gitlink entry in `index` (versions 2, 3 and 4). None: not an index
/// this parser understands.
pub fn gitlinks(index: &[u8]) -> Option<Vec<PathBuf>> {
    use std::os::unix::ffi::OsStrExt;
    let be32 = |at: usize| -> Option<u32> {
        index
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    if index.get(0..4)? != b"DIRC" {
        return None;
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = be32(8)? as usize;
    let mut at = 12;
    let mut previous: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    for _ in 0..count.min(index.len() / 62 + 1) {
        let start = at;
        let mode = be32(start + 24)?;
        let flags = u16::from_be_bytes([*index.get(start + 60)?, *index.get(start + 61)?]);
        let mut cursor = start + 62;
        if version >= 3 && flags & 0x4000 != 0 {
            cursor += 2; // extended flags
        }
        let path = if version == 4 {
            // Prefix compression: a varint of bytes to drop from the previous path, then the
            // NUL-terminated rest.
            let (strip, used) = varint(index.get(cursor..)?)?;
            cursor += used;
            let rest_len = index.get(cursor..)?.iter().position(|&b| b == 0)?;
            let keep = previous.len().checked_sub(strip)?;
            let mut path = previous[..keep].to_vec();
            path.extend_from_slice(&index[cursor..cursor + rest_len]);
            cursor += rest_len + 1;
            path
        } else {
            let len = index.get(cursor..)?.iter().position(|&b| b == 0)?;
            let path = index[cursor..cursor + len].to_vec();
            // Entries are NUL-padded to a multiple of 8 bytes (1 to 8 NULs).
            let entry_len = cursor + len - start;
            cursor = start + (entry_len + 8) / 8 * 8;
            path
        };
        if mode & MODE_TYPE_MASK == GITLINK_MODE {
            out.push(PathBuf::from(std::ffi::OsStr::from_bytes(&path)));
        }
        previous = path;
        at = cursor;
    }
    Some(out)
}

/// git's offset varint (as in pack files: 7 bits a byte, each continuation adding one).
fn varint(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut value: usize = 0;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        if i > 0 {
            value = value.checked_add(1)?.checked_mul(128)?;
        }
        value = value.checked_add((b & 0x7f) as usize)?;
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Whether a git config text sets a key that makes git run a command: the fsmonitor, hooks
/// elsewhere, an ssh command, a pager or editor, a proxy or askpass program, diff textconv or
/// external diff, filters, merge drivers. Section-insensitive, as git reads them.
pub fn runs_commands(config: &str) -> bool {
    let mut section = String::new();
    for raw in config.lines() {
        let line = raw.trim();
        if let Some(rest) = line.strip_prefix('[') {
            let name = rest.split([']', ' ', '"', '.']).next().unwrap_or("");
            section = name.to_ascii_lowercase();
            // `[core] fsmonitor = …` may follow on the same line after `]`.
            if let Some((_, after)) = rest.split_once(']')
                && key_runs_commands(&section, after.trim())
            {
                return true;
            }
            continue;
        }
        if key_runs_commands(&section, line) {
            return true;
        }
    }
    false
}

fn key_runs_commands(section: &str, line: &str) -> bool {
    let key = line
        .split(['=', ' ', '\t'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    if key.is_empty() || key.starts_with('#') || key.starts_with(';') {
        return false;
    }
    match section {
        "core" => matches!(
            key.as_str(),
            "fsmonitor" | "hookspath" | "sshcommand" | "pager" | "editor" | "askpass" | "gitproxy"
        ),
        "diff" => matches!(key.as_str(), "external" | "textconv" | "command"),
        "filter" => matches!(key.as_str(), "clean" | "smudge" | "process"),
        "merge" => key == "driver",
        "sequence" => key == "editor",
        "gpg" | "credential" => matches!(key.as_str(), "program" | "helper"),
        "include" | "includeif" => key == "path",
        _ => false,
    }
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
            let _ = gitlinks(&idx[..cut]);
        }
        assert!(gitlinks(b"not an index").is_none());
    }

    #[test]
    fn configs_that_run_commands_are_recognised() {
        assert!(runs_commands("[core]\n\tfsmonitor = \"touch /tmp/x\"\n"));
        assert!(runs_commands("[Core]\nHooksPath=/elsewhere\n"));
        assert!(runs_commands("[filter \"lfs\"]\n\tsmudge = x\n"));
        assert!(runs_commands("[core] sshCommand = x\n"));
        assert!(!runs_commands(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
        ));
        assert!(!runs_commands("[user]\n\tname = fsmonitor\n"));
    }
}
