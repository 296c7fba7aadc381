//! Fuzzes the protected-path decision where it matters: on disk, against the write that
//! follows it. Each input builds a small tree of directories and symlinks (names from the
//! words git cares about, so `.git/hooks` aliases are common), then asks the workspace to write
//! one path under the built-in protected list. Whatever the tree and the spelling:
//! - no file outside the workspace is created or changed;
//! - no written file ends up at a place the protected list covers, judged on its real path
//!   (found independently of the code under test, by walking the tree and canonicalising);
//! - `.git/config` keeps its content.
#![no_main]

use arbitrary::Arbitrary;
use cordon::testing::workspace::protect::protected_entry;
use cordon::testing::workspace::{GIT_CONTROL_PATHS, Workspace, WriteRules};
use libfuzzer_sys::fuzz_target;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const WORDS: &[&str] = &[
    ".git", "hooks", "config", "commondir", "info", "worktrees", "modules", "w", "a", "b", "..",
    ".", ".cordon", "outputs", "pre-commit", "x",
];
const PAYLOAD: &[u8] = b"PWNED-by-fuzz";

#[derive(Arbitrary, Debug)]
enum Op {
    Mkdir(Vec<u8>),
    /// (link path, target path, absolute target?)
    Symlink(Vec<u8>, Vec<u8>, bool),
}

#[derive(Arbitrary, Debug)]
struct Input {
    ops: Vec<Op>,
    target: Vec<u8>,
    create_dirs: bool,
}

/// Words picked by the fuzzer's bytes, at most 5 of them, joined by `/`.
fn path_of(bytes: &[u8]) -> String {
    let words: Vec<&str> = bytes
        .iter()
        .take(5)
        .map(|b| WORDS[*b as usize % WORDS.len()])
        .collect();
    if words.is_empty() {
        "x".to_owned()
    } else {
        words.join("/")
    }
}

fn base() -> &'static Path {
    static BASE: OnceLock<tempfile::TempDir> = OnceLock::new();
    BASE.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

/// Every regular file beneath `dir`, not following symlinks.
fn files_in(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(ft) = entry.file_type() else { continue };
        if ft.is_dir() {
            files_in(&entry.path(), out);
        } else if ft.is_file() {
            out.push(entry.path());
        }
    }
}

fuzz_target!(|input: Input| {
    let ws = base().join("ws");
    let outside = base().join("outside");
    let _ = fs::remove_dir_all(&ws);
    let _ = fs::remove_dir_all(&outside);
    fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    for op in input.ops.iter().take(12) {
        match op {
            Op::Mkdir(p) => {
                let _ = fs::create_dir_all(ws.join(path_of(p)));
            }
            Op::Symlink(link, target, absolute) => {
                let target = if *absolute {
                    outside.join(path_of(target))
                } else {
                    PathBuf::from(path_of(target))
                };
                let _ = std::os::unix::fs::symlink(target, ws.join(path_of(link)));
            }
        }
    }
    let workspace = Workspace::open(&ws).unwrap();
    let patterns: Vec<String> = GIT_CONTROL_PATHS.iter().map(|s| (*s).to_owned()).collect();
    let rules = WriteRules {
        protected: &patterns,
        writable_only: None,
    };
    let target = path_of(&input.target);
    if let Ok(rel) = workspace.resolve_arg(&target) {
        let _ = workspace.write_checked(&rel, PAYLOAD, input.create_dirs, &rules);
    }

    let mut outside_files = Vec::new();
    files_in(&outside, &mut outside_files);
    assert!(outside_files.is_empty(), "wrote outside via {target:?}: {outside_files:?}");
    assert_eq!(fs::read(ws.join(".git/config")).unwrap(), b"[core]\n");
    let root = fs::canonicalize(&ws).unwrap();
    let mut written = Vec::new();
    files_in(&ws, &mut written);
    for file in written {
        if !fs::read(&file).is_ok_and(|b| b == PAYLOAD) {
            continue;
        }
        let real = fs::canonicalize(&file).unwrap();
        let rel = real.strip_prefix(&root).expect("written file is inside the workspace");
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        assert!(
            protected_entry(&patterns, &parts).is_none(),
            "{target:?} wrote the protected {}",
            rel.display()
        );
    }
});
