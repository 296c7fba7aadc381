//! End-to-end checks of the workspace capability and the file-tool logic on a real file system:
//! every escape route the SPEC names, atomic writes, the spill area, and edit/read fidelity
//! through the disk.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use cordon::testing::files::{self, Edit, EditError, ReadError};
use cordon::testing::workspace::{PathError, RelPath, Workspace};

/// A workspace directory with an `outside` sibling that must never be written.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    ws: Workspace,
}

impl Fixture {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        let outside = tmp.path().join("outside");
        fs::create_dir(&root).unwrap();
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("secret.txt"), "top secret\n").unwrap();
        let ws = Workspace::open(&root).unwrap();
        let root = fs::canonicalize(&root).unwrap();
        let outside = fs::canonicalize(&outside).unwrap();
        Fixture {
            _tmp: tmp,
            root,
            outside,
            ws,
        }
    }

    fn rel(&self, arg: &str) -> RelPath {
        self.ws.resolve_arg(arg).unwrap()
    }

    fn write(&self, arg: &str, content: &str) -> Result<bool, PathError> {
        self.ws
            .write_atomic(&self.rel(arg), content.as_bytes(), true)
            .map(|r| r.created)
    }

    fn read(&self, arg: &str) -> Result<Vec<u8>, PathError> {
        self.ws.read_bytes(&self.rel(arg))
    }

    /// Names in `outside` other than the planted secret.
    fn outside_intruders(&self) -> Vec<String> {
        let mut found = Vec::new();
        collect_names(&self.outside, &mut found);
        found.retain(|n| n != "secret.txt");
        found
    }
}

fn collect_names(dir: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        out.push(entry.file_name().to_string_lossy().into_owned());
        if entry.file_type().unwrap().is_dir() {
            collect_names(&entry.path(), out);
        }
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn assert_escape<T: std::fmt::Debug>(result: Result<T, PathError>) {
    match result {
        Err(err @ PathError::Escape { .. }) => assert_eq!(err.kind_str(), "path_escape"),
        other => panic!("expected a path escape, got {other:?}"),
    }
}

// ---------------------------------------------------------------- escapes

#[cordon_test::test]
fn dotdot_that_climbs_out_is_an_escape_for_every_operation() {
    let f = Fixture::new();
    fs::create_dir(f.root.join("sub")).unwrap();
    let rel = f.rel("../outside/secret.txt");
    assert_escape(f.ws.read_bytes(&rel));
    assert_escape(f.ws.metadata(&rel));
    assert_escape(f.ws.open_dir(&f.rel("..")));
    assert_escape(f.ws.write_atomic(&f.rel("../outside/new.txt"), b"x", true));
    assert_escape(f.ws.write_atomic(&f.rel("sub/../../outside/new.txt"), b"x", false));
    assert_escape(f.ws.write_atomic(&f.rel("../brand-new-dir/x.txt"), b"x", true));
    assert!(f.outside_intruders().is_empty());
    assert!(!f.root.parent().unwrap().join("brand-new-dir").exists());
}

#[cordon_test::test]
fn dotdot_that_stays_inside_is_fine() {
    let f = Fixture::new();
    fs::create_dir(f.root.join("sub")).unwrap();
    assert!(f.write("sub/../a.txt", "a").unwrap());
    assert_eq!(fs::read_to_string(f.root.join("a.txt")).unwrap(), "a");
}

#[cordon_test::test]
fn absolute_outside_is_an_escape() {
    let f = Fixture::new();
    let secret = f.outside.join("secret.txt");
    assert_escape(f.ws.resolve_arg(secret.to_str().unwrap()));
    assert_escape(f.ws.resolve_arg("/etc/passwd"));
    // A sibling whose name merely starts with the root's name is outside too.
    let lookalike = format!("{}-other/x", f.root.display());
    assert_escape(f.ws.resolve_arg(&lookalike));
}

#[cordon_test::test]
fn absolute_inside_is_accepted_and_shown_relative() {
    let f = Fixture::new();
    fs::create_dir(f.root.join("sub")).unwrap();
    fs::write(f.root.join("sub/a.txt"), "hello\n").unwrap();
    let arg = format!("{}/sub/a.txt", f.root.display());
    let rel = f.ws.resolve_arg(&arg).unwrap();
    assert_eq!(rel.to_string(), "sub/a.txt");
    assert_eq!(f.ws.read_bytes(&rel).unwrap(), b"hello\n");
    let root_arg = f.root.display().to_string();
    assert_eq!(f.ws.resolve_arg(&root_arg).unwrap().as_str(), ".");
}

#[cordon_test::test]
fn workspace_opened_through_a_symlink_accepts_both_spellings() {
    let f = Fixture::new();
    let alias = f.root.parent().unwrap().join("alias");
    symlink(&f.root, &alias).unwrap();
    let ws = Workspace::open(&alias).unwrap();
    assert_eq!(ws.root(), f.root.as_path());
    let via_alias = format!("{}/x.txt", alias.display());
    let via_root = format!("{}/x.txt", f.root.display());
    assert_eq!(ws.resolve_arg(&via_alias).unwrap().as_str(), "x.txt");
    assert_eq!(ws.resolve_arg(&via_root).unwrap().as_str(), "x.txt");
}

#[cordon_test::test]
fn empty_and_nul_arguments_are_invalid() {
    let f = Fixture::new();
    for arg in ["", "a\0b"] {
        let err = f.ws.resolve_arg(arg).unwrap_err();
        assert!(matches!(err, PathError::Invalid { .. }), "{err:?}");
        assert_eq!(err.kind_str(), "invalid_argument");
    }
}

#[cordon_test::test]
fn outward_symlink_with_absolute_target_is_an_escape() {
    let f = Fixture::new();
    symlink(&f.outside, f.root.join("evil_dir")).unwrap();
    symlink(f.outside.join("secret.txt"), f.root.join("evil_file")).unwrap();
    assert_escape(f.read("evil_dir/secret.txt"));
    assert_escape(f.read("evil_file"));
    assert_escape(f.ws.metadata(&f.rel("evil_dir")));
    assert_escape(f.ws.open_dir(&f.rel("evil_dir")));
    assert_escape(f.write("evil_dir/pwned.txt", "x"));
    assert_escape(f.write("evil_dir/new/deeper.txt", "x"));
    // Writing to a final symlink that points outside must not write through it.
    assert_escape(f.write("evil_file", "overwritten"));
    assert_eq!(
        fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "top secret\n"
    );
    assert!(f.outside_intruders().is_empty());
    // The link itself is left alone.
    assert!(
        fs::symlink_metadata(f.root.join("evil_file"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[cordon_test::test]
fn outward_symlink_with_relative_target_is_an_escape() {
    let f = Fixture::new();
    fs::create_dir(f.root.join("sub")).unwrap();
    symlink("../../outside/secret.txt", f.root.join("sub/rel_file")).unwrap();
    symlink("../../outside", f.root.join("sub/rel_dir")).unwrap();
    assert_escape(f.read("sub/rel_file"));
    assert_escape(f.read("sub/rel_dir/secret.txt"));
    assert_escape(f.write("sub/rel_file", "x"));
    assert_escape(f.write("sub/rel_dir/new.txt", "x"));
    assert_eq!(
        fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "top secret\n"
    );
    assert!(f.outside_intruders().is_empty());
}

/// Directory symlinks inside the workspace are followed (by the walk, not the kernel); a final
/// symlink is never written through nor replaced: the write is refused and names the target.
#[cordon_test::test]
fn final_symlink_is_refused_and_names_its_target() {
    let f = Fixture::new();
    fs::create_dir_all(f.root.join("real/dir")).unwrap();
    fs::write(f.root.join("real/a.txt"), "original\n").unwrap();
    symlink("real/a.txt", f.root.join("link")).unwrap();
    symlink("real/dir", f.root.join("dirlink")).unwrap();
    assert_eq!(f.read("link").unwrap(), b"original\n");

    let err =
        f.ws.write_atomic(&f.rel("link"), b"through the link\n", false)
            .unwrap_err();
    match &err {
        PathError::FinalSymlink { target, .. } => {
            assert_eq!(target.as_deref(), Some("real/a.txt"));
        }
        other => panic!("expected FinalSymlink, got {other:?}"),
    }
    assert_eq!(err.kind_str(), "invalid_argument");
    assert!(err.to_string().contains("write `real/a.txt`"), "{err}");
    assert!(
        fs::symlink_metadata(f.root.join("link"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link must stay a link"
    );
    assert_eq!(
        fs::read_to_string(f.root.join("real/a.txt")).unwrap(),
        "original\n"
    );

    assert!(f.write("dirlink/inner.txt", "x").unwrap());
    assert!(f.root.join("real/dir/inner.txt").is_file());
    let report =
        f.ws.write_atomic(&f.rel("dirlink/inner.txt"), b"y", false)
            .unwrap();
    assert_eq!(report.resolved.as_str(), "real/dir/inner.txt");
}

/// The kernel (RESOLVE_BENEATH) refuses absolute symlinks even when they point inside; reads
/// and writes agree on that, so a write never succeeds where a read of the same path fails.
#[cordon_test::test]
fn absolute_symlink_pointing_inside_is_refused_by_reads_and_writes_alike() {
    let f = Fixture::new();
    fs::write(f.root.join("a.txt"), "original\n").unwrap();
    symlink(f.root.join("a.txt"), f.root.join("abs_link")).unwrap();
    assert_escape(f.read("abs_link"));
    assert_escape(f.write("abs_link", "x"));
    assert_eq!(
        fs::read_to_string(f.root.join("a.txt")).unwrap(),
        "original\n"
    );
}

#[cordon_test::test]
fn symlink_loop_is_reported() {
    let f = Fixture::new();
    symlink("b", f.root.join("a")).unwrap();
    symlink("a", f.root.join("b")).unwrap();
    let err = f.write("a", "x").unwrap_err();
    assert!(matches!(err, PathError::SymlinkLoop { .. }), "{err:?}");
    let err = f.read("a").unwrap_err();
    assert!(matches!(err, PathError::SymlinkLoop { .. }), "{err:?}");
}

// ---------------------------------------------------------------- the race

/// A directory is swapped for an outward symlink, over and over, while writes run into it.
/// Each write must either land inside the workspace or fail; none may land outside.
#[cordon_test::test]
fn directory_swapped_for_outward_symlink_never_lets_a_write_out() {
    let f = Fixture::new();
    let d = f.root.join("d");
    let parked = f.root.join("d_parked");
    fs::create_dir(&d).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (d, parked, outside, stop) =
            (d.clone(), parked.clone(), f.outside.clone(), stop.clone());
        thread::spawn(move || {
            let mut swaps = 0u32;
            while !stop.load(Ordering::Relaxed) {
                // Alternate real directory / outward symlink in roughly equal slices of time.
                if fs::rename(&d, &parked).is_ok() {
                    let _ = symlink(&outside, &d);
                    thread::sleep(Duration::from_micros(30));
                    let _ = fs::remove_file(&d);
                    let _ = fs::rename(&parked, &d);
                    swaps += 1;
                }
                thread::sleep(Duration::from_micros(30));
            }
            swaps
        })
    };

    let (mut ok, mut escaped, mut missing) = (0, 0, 0);
    for i in 0..3000 {
        let rel = f.rel(&format!("d/f{i}.txt"));
        match f.ws.write_atomic(&rel, b"payload", false) {
            Ok(_) => ok += 1,
            Err(PathError::Escape { .. }) => escaped += 1,
            // The instants when `d` is neither the directory nor the link.
            Err(PathError::ParentMissing { .. } | PathError::NotFound { .. }) => missing += 1,
            Err(other) => panic!("unexpected error: {other:?}"),
        }
        assert!(f.outside_intruders().is_empty(), "write {i} escaped");
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    eprintln!("race: {ok} landed, {escaped} escapes refused, {missing} missing, {swaps} swaps");
    assert!(ok > 0);
    assert!(f.outside_intruders().is_empty());
    assert_eq!(
        fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "top secret\n"
    );
}

/// The same for the file itself: a regular file swapped for a symlink to a file outside.
#[cordon_test::test]
fn file_swapped_for_outward_symlink_never_writes_through_it() {
    let f = Fixture::new();
    let target = f.root.join("t.txt");
    fs::write(&target, "inside").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (target, secret, stop) = (target.clone(), f.outside.join("secret.txt"), stop.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = fs::remove_file(&target);
                let _ = symlink(&secret, &target);
                thread::yield_now();
                let _ = fs::remove_file(&target);
                let _ = fs::write(&target, "inside");
            }
        })
    };
    for _ in 0..2000 {
        match f.ws.write_atomic(&f.rel("t.txt"), b"clobber", false) {
            // A link seen at the check is refused (as an escape, or as a final symlink when it
            // changed again before its target was read); one swapped in later is replaced by
            // the rename, never written through.
            Ok(_) | Err(PathError::Escape { .. } | PathError::FinalSymlink { .. }) => {}
            Err(other) => panic!("unexpected error: {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(
        fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "top secret\n"
    );
    assert!(f.outside_intruders().is_empty());
}

// ---------------------------------------------------------------- atomic write

#[cordon_test::test]
fn atomic_write_keeps_mode_and_leaves_no_temp_files() {
    let f = Fixture::new();
    let path = f.root.join("script.sh");
    fs::write(&path, "#!/bin/sh\necho old\n").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o751)).unwrap();

    let report =
        f.ws.write_atomic(&f.rel("script.sh"), b"#!/bin/sh\necho new\n", false)
            .unwrap();
    assert!(!report.created);
    assert_eq!(report.bytes, 19);
    assert!(report.dropped_bits.is_empty());
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o751);
    assert_eq!(fs::read_to_string(&path).unwrap(), "#!/bin/sh\necho new\n");
    assert_eq!(names_in(&f.root), vec!["script.sh"]);
}

#[cordon_test::test]
fn atomic_write_replaces_the_inode_so_readers_never_see_a_mix() {
    let f = Fixture::new();
    let path = f.root.join("a.txt");
    fs::write(&path, "old content").unwrap();
    let mut held = fs::File::open(&path).unwrap();
    f.write("a.txt", "new").unwrap();
    // A reader that opened the file before the write still sees the whole old content.
    let mut old = String::new();
    std::io::Read::read_to_string(&mut held, &mut old).unwrap();
    assert_eq!(old, "old content");
    assert_eq!(fs::read_to_string(&path).unwrap(), "new");
}

#[cordon_test::test]
fn new_file_is_created_and_reported() {
    let f = Fixture::new();
    let report = f.ws.write_atomic(&f.rel("new.txt"), b"", false).unwrap();
    assert!(report.created);
    assert_eq!(report.bytes, 0);
    assert_eq!(fs::read(f.root.join("new.txt")).unwrap(), b"");
}

#[cordon_test::test]
fn create_dirs_false_refuses_missing_parent_with_a_hint() {
    let f = Fixture::new();
    let err =
        f.ws.write_atomic(&f.rel("a/b/c.txt"), b"x", false)
            .unwrap_err();
    assert!(matches!(err, PathError::ParentMissing { .. }), "{err:?}");
    assert_eq!(err.kind_str(), "not_found");
    assert!(err.to_string().contains("create_dirs=true"), "{err}");
    assert!(!f.root.join("a").exists());
}

#[cordon_test::test]
fn create_dirs_true_creates_parents() {
    let f = Fixture::new();
    let report =
        f.ws.write_atomic(&f.rel("a/b/c.txt"), b"deep", true)
            .unwrap();
    assert!(report.created);
    assert_eq!(fs::read(f.root.join("a/b/c.txt")).unwrap(), b"deep");
}

#[cordon_test::test]
fn writing_over_a_directory_is_refused() {
    let f = Fixture::new();
    fs::create_dir_all(f.root.join("dir/child")).unwrap();
    let err = f.write("dir", "x").unwrap_err();
    assert!(matches!(err, PathError::IsADirectory { .. }), "{err:?}");
    assert!(matches!(
        f.write(".", "x"),
        Err(PathError::IsADirectory { .. })
    ));
    assert!(matches!(
        f.write("dir/", "x"),
        Err(PathError::Invalid { .. })
    ));
    assert!(f.root.join("dir/child").is_dir());
    assert_eq!(names_in(&f.root), vec!["dir"]);
}

#[cordon_test::test]
fn a_file_in_the_middle_of_the_path_is_reported() {
    let f = Fixture::new();
    fs::write(f.root.join("file"), "x").unwrap();
    let err = f.write("file/child.txt", "x").unwrap_err();
    assert!(matches!(err, PathError::NotADirectory { .. }), "{err:?}");
}

// ---------------------------------------------------------------- reading

#[cordon_test::test]
fn reading_refuses_directories_and_fifos_without_blocking() {
    let f = Fixture::new();
    fs::create_dir(f.root.join("dir")).unwrap();
    assert!(matches!(f.read("dir"), Err(PathError::IsADirectory { .. })));
    let status = std::process::Command::new("mkfifo")
        .arg(f.root.join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let err = f.read("pipe").unwrap_err();
    assert!(matches!(err, PathError::NotAFile { .. }), "{err:?}");
    assert!(err.to_string().contains("FIFO"), "{err}");
    assert!(matches!(f.read("nope"), Err(PathError::NotFound { .. })));
}

#[cordon_test::test]
fn reading_refuses_files_over_the_limit() {
    let f = Fixture::new();
    fs::write(f.root.join("big"), vec![b'a'; 100]).unwrap();
    let err = f.ws.read_bytes_limited(&f.rel("big"), 99).unwrap_err();
    assert!(
        matches!(err, PathError::TooLarge { size: 100, .. }),
        "{err:?}"
    );
    assert_eq!(err.kind_str(), "resource_limit");
    assert_eq!(
        f.ws.read_bytes_limited(&f.rel("big"), 100).unwrap().len(),
        100
    );
}

#[cordon_test::test]
fn read_paging_through_the_disk() {
    let f = Fixture::new();
    let text: String = (1..=25).map(|i| format!("row {i}\r\n")).collect();
    f.write("rows.txt", &text).unwrap();
    let bytes = f.read("rows.txt").unwrap();
    let page = files::read_lines(&bytes, 11, 10).unwrap();
    assert_eq!(
        (page.start_line, page.end_line, page.total_lines),
        (11, 20, 25)
    );
    assert!(page.truncated);
    assert!(page.content.starts_with("row 11\r\n"));
    assert!(page.content.ends_with("row 20\r\n"));
    let last = files::read_lines(&bytes, 21, 10).unwrap();
    assert!(!last.truncated);
    assert_eq!(last.end_line, 25);
    let err = files::read_lines(&bytes, 26, 10).unwrap_err();
    assert!(err.to_string().contains("25 lines"), "{err}");
}

#[cordon_test::test]
fn binary_file_is_refused_by_read_and_edit() {
    let f = Fixture::new();
    fs::write(
        f.root.join("img.png"),
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    )
    .unwrap();
    let bytes = f.read("img.png").unwrap();
    let err = files::read_lines(&bytes, 1, 10).unwrap_err();
    assert!(matches!(err, ReadError::NotText(_)));
    assert!(err.to_string().contains("binary"), "{err}");
    let edit = Edit {
        old_string: "PNG".into(),
        new_string: "GIF".into(),
        replace_all: false,
    };
    assert!(matches!(
        files::apply_edits(&bytes, &[edit]),
        Err(EditError::NotText(_))
    ));
}

// ---------------------------------------------------------------- edit through the disk

fn edit(old: &str, new: &str) -> Edit {
    Edit {
        old_string: old.into(),
        new_string: new.into(),
        replace_all: false,
    }
}

/// read → apply → diff → write, the way edit_file will use these pieces.
fn edit_file(f: &Fixture, path: &str, edits: &[Edit]) -> Result<String, EditError> {
    let rel = f.rel(path);
    let before = f.ws.read_bytes(&rel).unwrap();
    let outcome = files::apply_edits(&before, edits)?;
    let old_text = std::str::from_utf8(&before).unwrap();
    let diff = files::unified_diff(rel.as_str(), old_text, &outcome.new_content);
    f.ws.write_atomic(&rel, outcome.new_content.as_bytes(), false)
        .unwrap();
    Ok(diff)
}

#[cordon_test::test]
fn edit_preserves_every_byte_it_does_not_replace() {
    let f = Fixture::new();
    let original = "\u{feff}// caf\u{e9} \u{1f980}\r\n\tlet q = \u{201c}x\u{201d};\r\nlet nbsp = \"a\u{a0}b\";\nend";
    f.write("mixed.rs", original).unwrap();
    let diff = edit_file(
        &f,
        "mixed.rs",
        &[edit("\u{201c}x\u{201d}", "\u{201c}y\u{201d}")],
    )
    .unwrap();
    let after = fs::read(f.root.join("mixed.rs")).unwrap();
    let expected = original.replace("\u{201c}x\u{201d}", "\u{201c}y\u{201d}");
    assert_eq!(after, expected.as_bytes());
    assert!(
        diff.contains("-\tlet q = \u{201c}x\u{201d};\r\n+\tlet q = \u{201c}y\u{201d};\r\n"),
        "{diff:?}"
    );
    assert!(diff.starts_with("--- a/mixed.rs\n+++ b/mixed.rs\n"));
}

#[cordon_test::test]
fn failed_edit_leaves_the_file_untouched() {
    let f = Fixture::new();
    f.write("a.txt", "one\ntwo\n").unwrap();
    let err = edit_file(&f, "a.txt", &[edit("one", "1"), edit("three", "3")]).unwrap_err();
    assert!(err.to_string().contains("nothing was changed"));
    assert_eq!(
        fs::read_to_string(f.root.join("a.txt")).unwrap(),
        "one\ntwo\n"
    );
}

// ---------------------------------------------------------------- spill area

#[cordon_test::test]
fn spill_area_is_created_git_ignored_and_names_are_unique() {
    let f = Fixture::new();
    let dir = f.ws.spill_dir().unwrap();
    assert_eq!(dir.as_str(), ".cordon/outputs");
    assert!(f.root.join(".cordon/outputs").is_dir());
    let ignore = fs::read_to_string(f.root.join(".cordon/.gitignore")).unwrap();
    assert!(ignore.lines().any(|l| l == "*"), "{ignore:?}");

    let (a, mut file_a) = f.ws.create_spill_file("shell_exec stdout").unwrap();
    let (b, _) = f.ws.create_spill_file("shell_exec stdout").unwrap();
    assert_ne!(a, b);
    assert!(
        a.as_str().starts_with(".cordon/outputs/shell_exec_stdout-"),
        "{a}"
    );
    std::io::Write::write_all(&mut file_a, b"full output").unwrap();
    assert_eq!(f.read(a.as_str()).unwrap(), b"full output");
}

#[cordon_test::test]
fn spill_area_keeps_an_existing_gitignore() {
    let f = Fixture::new();
    fs::create_dir(f.root.join(".cordon")).unwrap();
    fs::write(f.root.join(".cordon/.gitignore"), "custom\n").unwrap();
    f.ws.spill_dir().unwrap();
    assert_eq!(
        fs::read_to_string(f.root.join(".cordon/.gitignore")).unwrap(),
        "custom\n"
    );
}

#[cordon_test::test]
fn spill_area_refuses_a_symlinked_cordon_dir() {
    let f = Fixture::new();
    fs::create_dir(f.root.join("src")).unwrap();
    symlink("src", f.root.join(".cordon")).unwrap();
    let err = f.ws.spill_dir().unwrap_err();
    assert!(matches!(err, PathError::Invalid { .. }), "{err:?}");
    // Above all, no `*` .gitignore may land in src/.
    assert!(!f.root.join("src/.gitignore").exists());

    let g = Fixture::new();
    symlink(&g.outside, g.root.join(".cordon")).unwrap();
    assert!(g.ws.spill_dir().is_err());
    assert!(g.outside_intruders().is_empty());
}

// ---------------------------------------------------------------- protected targets

fn protected() -> Vec<String> {
    cordon::testing::workspace::GIT_CONTROL_PATHS
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

fn write_protected(
    f: &Fixture,
    arg: &str,
) -> Result<cordon::testing::workspace::WriteReport, PathError> {
    let patterns = protected();
    let rules = cordon::testing::workspace::WriteRules {
        protected: &patterns,
        writable_only: None,
    };
    f.ws.write_checked(&f.rel(arg), b"[core]\n\tfsmonitor = evil\n", true, &rules)
}

/// Protection is decided on the path as resolved on disk, so every alias a symlinked directory
/// gives a protected entry is refused, and nothing is created inside one on the way.
#[cordon_test::test]
fn protected_targets_are_refused_under_every_alias() {
    let f = Fixture::new();
    fs::create_dir_all(f.root.join(".git/hooks")).unwrap();
    fs::create_dir_all(f.root.join("sub")).unwrap();
    symlink(".git", f.root.join("g")).unwrap();
    symlink("../.git/hooks", f.root.join("sub/h")).unwrap();
    symlink("sub", f.root.join("s")).unwrap();
    for arg in [
        ".git/config",
        "g/config",
        "./g/../.git/commondir",
        "s/h/pre-commit",
        "sub/h/new/deeper/x",
        "g/worktrees/w/gitdir",
        ".cordon/outputs/x",
    ] {
        match write_protected(&f, arg) {
            Err(e @ PathError::Protected { .. }) => assert_eq!(e.kind_str(), "denied"),
            other => panic!("{arg}: expected Protected, got {other:?}"),
        }
    }
    assert!(!f.root.join(".git/config").exists());
    assert!(!f.root.join(".git/commondir").exists());
    assert!(!f.root.join(".git/hooks/new").exists());
    // (Unprotected directories on the way may be created; the control file is not.)
    assert!(!f.root.join(".git/worktrees/w/gitdir").exists());
    assert!(!f.root.join(".cordon").exists());
    // What the message says: the spelling and the resolved path.
    let msg = write_protected(&f, "g/config").unwrap_err().to_string();
    assert!(msg.contains("`.git/config`"), "{msg}");
    // Nothing of the operator's gitdir is the file tools' to write (issue 29), not even what
    // no pattern names; ordinary files next to the links are fine.
    assert!(write_protected(&f, "g/HEAD").is_err());
    assert!(write_protected(&f, "s/notes.txt").is_ok());
}

/// The library-level rename race at a higher rate than the end-to-end test: a directory is
/// swapped for a symlink to `.git` while writes of `dir/config` run; none reaches `.git/config`.
#[cordon_test::test]
fn rename_race_never_lets_a_protected_write_through() {
    let f = Fixture::new();
    fs::create_dir_all(f.root.join(".git")).unwrap();
    fs::write(f.root.join(".git/config"), "original\n").unwrap();
    let d = f.root.join("dir");
    fs::create_dir(&d).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (d, parked, stop) = (d.clone(), f.root.join("parked"), stop.clone());
        thread::spawn(move || {
            let mut swaps = 0u32;
            while !stop.load(Ordering::Relaxed) {
                if fs::rename(&d, &parked).is_ok() {
                    let _ = symlink(".git", &d);
                    thread::sleep(Duration::from_micros(20));
                    let _ = fs::remove_file(&d);
                    let _ = fs::rename(&parked, &d);
                    swaps += 1;
                }
                thread::sleep(Duration::from_micros(20));
            }
            swaps
        })
    };
    let patterns = protected();
    let rules = cordon::testing::workspace::WriteRules {
        protected: &patterns,
        writable_only: None,
    };
    let (mut landed, mut protected_refusals) = (0, 0);
    for i in 0..3000 {
        match f
            .ws
            .write_checked(&f.rel("dir/config"), b"evil", false, &rules)
        {
            Ok(_) => landed += 1,
            Err(PathError::Protected { .. }) => protected_refusals += 1,
            Err(PathError::ParentMissing { .. } | PathError::NotFound { .. }) => {}
            Err(other) => panic!("write {i}: unexpected {other:?}"),
        }
        assert_eq!(
            fs::read_to_string(f.root.join(".git/config")).unwrap(),
            "original\n",
            "write {i} reached .git/config"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    eprintln!("race: {landed} landed, {protected_refusals} refused as protected, {swaps} swaps");
    assert!(
        landed > 0 && protected_refusals > 0,
        "the race never happened"
    );
}

/// A read-only workspace's writable directories are judged on the resolved path too: a
/// symlinked directory inside `out/` that leads back into the read-only part is refused.
#[cordon_test::test]
fn read_only_workspace_judges_writable_dirs_on_the_resolved_path() {
    let f = Fixture::new();
    fs::create_dir_all(f.root.join("out")).unwrap();
    fs::create_dir_all(f.root.join("src")).unwrap();
    symlink("../src", f.root.join("out/back")).unwrap();
    let writable = vec!["out".to_owned()];
    let rules = cordon::testing::workspace::WriteRules {
        protected: &[],
        writable_only: Some(&writable),
    };
    assert!(
        f.ws.write_checked(&f.rel("out/a.txt"), b"x", true, &rules)
            .is_ok()
    );
    assert!(
        f.ws.write_checked(&f.rel("out/new/b.txt"), b"x", true, &rules)
            .is_ok()
    );
    for arg in [
        "out/back/main.rs",
        "src/main.rs",
        "top.txt",
        "elsewhere/x.txt",
    ] {
        match f.ws.write_checked(&f.rel(arg), b"x", true, &rules) {
            Err(PathError::NotWritable { .. }) => {}
            other => panic!("{arg}: expected NotWritable, got {other:?}"),
        }
    }
    assert!(!f.root.join("src/main.rs").exists());
    assert!(!f.root.join("elsewhere").exists());
}

/// Reads resolve by hand too: a final symlink inside the workspace is followed, a FIFO behind
/// one is refused without blocking, and a chain that leaves the workspace is an escape.
#[cordon_test::test]
fn reads_follow_inside_links_by_hand_and_refuse_what_is_not_a_file() {
    let f = Fixture::new();
    fs::write(f.root.join("real.txt"), "real\n").unwrap();
    symlink("real.txt", f.root.join("l1")).unwrap();
    symlink("l1", f.root.join("l2")).unwrap();
    symlink("../outside/secret.txt", f.root.join("out")).unwrap();
    symlink("out", f.root.join("to_out")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.root.join("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    symlink("fifo", f.root.join("to_fifo")).unwrap();
    assert_eq!(f.read("l2").unwrap(), b"real\n");
    assert_escape(f.read("to_out"));
    assert!(matches!(f.read("to_fifo"), Err(PathError::NotAFile { .. })));
    assert!(matches!(
        f.read("missing/x"),
        Err(PathError::NotFound { .. })
    ));
}
