//! Fuzzes path rooting: whatever the spelling, a tool path never reaches outside the workspace.
#![no_main]

use cordon::testing::workspace::Workspace;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

struct Fixture {
    _dir: tempfile::TempDir,
    workspace: Workspace,
}

/// A workspace with a sibling secret and symlinks pointing in and out, built once.
fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("sub/deeper")).unwrap();
        std::fs::write(ws.join("sub/inside.txt"), "inside").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "SECRET").unwrap();
        std::os::unix::fs::symlink("../../secret.txt", ws.join("sub/out")).unwrap();
        std::os::unix::fs::symlink(dir.path(), ws.join("abs_out")).unwrap();
        std::os::unix::fs::symlink("inside.txt", ws.join("sub/in")).unwrap();
        let workspace = Workspace::open(&ws).unwrap();
        Fixture {
            _dir: dir,
            workspace,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(arg) = std::str::from_utf8(data) else {
        return;
    };
    let f = fixture();
    let Ok(rel) = f.workspace.resolve_arg(arg) else {
        return;
    };
    assert!(
        !rel.as_str().starts_with('/'),
        "absolute after resolution: {rel}"
    );
    assert!(!rel.as_str().contains('\0'));
    if let Ok(bytes) = f.workspace.read_bytes(&rel) {
        assert!(
            !bytes.windows(6).any(|w| w == b"SECRET"),
            "read the secret via {arg:?}"
        );
    }
});
