//! What deciding protection on the resolved target costs a write: `write_checked` with the
//! built-in protected list (identity snapshot + by-hand walk + decision) against the same
//! atomic write with no rules, in a workspace with a real-looking `.git`, for a file one and
//! three directories deep. Medians of interleaved rounds, in microseconds. Run:
//! `cargo bench --bench protected_write`.

use cordon::testing::workspace::protect::IdentitySnapshot;
use cordon::testing::workspace::{GIT_CONTROL_PATHS, Workspace, WriteRules, existing_protected};
use std::time::Instant;

const ROUNDS: usize = 2000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for dir in [
        ".git/hooks",
        ".git/info",
        ".git/objects/info",
        ".git/worktrees/wt",
        "src/a/b",
    ] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    let ws = Workspace::open(root).unwrap();
    let patterns: Vec<String> = GIT_CONTROL_PATHS.iter().map(|s| (*s).to_owned()).collect();
    let rules = WriteRules {
        protected: &patterns,
        writable_only: None,
    };
    let none = WriteRules::default();
    // The decision's own work, without the fsyncs that dominate (and blur) a whole write.
    let mut snap = Vec::new();
    let mut listed = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        std::hint::black_box(IdentitySnapshot::take(ws.dir(), &patterns));
        snap.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        std::hint::black_box(existing_protected(ws.dir(), &patterns));
        listed.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "identity snapshot of the built-in list {:6.1} µs   existing_protected {:6.1} µs",
        median(snap),
        median(listed)
    );
    let content = "x = 1\n".repeat(1000);
    for path in ["main.py", "src/a/b/main.py"] {
        let rel = ws.resolve_arg(path).unwrap();
        let (mut checked, mut plain) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let t = Instant::now();
            ws.write_checked(&rel, content.as_bytes(), true, &rules)
                .unwrap();
            checked.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            ws.write_checked(&rel, content.as_bytes(), true, &none)
                .unwrap();
            plain.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let (c, p) = (median(checked), median(plain));
        println!(
            "{path:<18} with protected list {c:8.1} µs   without {p:8.1} µs   decision costs {:6.1} µs",
            c - p
        );
    }
}
