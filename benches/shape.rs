//! Cost of shaping one output stream for a model (`shape::shape_stream`): truncation plus the
//! output hygiene of issue 11 (escape sequences and control characters removed, UTF-8 checked).
//!
//! Cases: a clean 8 KiB build log (the common case: one validation pass, one scan, nothing
//! copied twice), the same log coloured with ANSI escapes (every line rewritten), and a
//! 1 MiB log that is cut to head and tail. Prints the median of many runs per case, and the
//! same shaping with `keep_control_chars = true` as the baseline without hygiene.

use cordon::testing::exec::Captured;
use cordon::testing::policy::OutputPolicy;
use cordon::testing::shape::shape_stream;
use std::time::{Duration, Instant};

fn policy(keep: bool) -> OutputPolicy {
    OutputPolicy {
        max_lines: 200,
        max_chars: 10_000,
        head_lines: 50,
        tail_lines: 50,
        memory_cap_bytes: 4 << 20,
        keep_control_chars: keep,
        spill_total_bytes: 2 << 30,
    }
}

fn captured(text: &str) -> Captured {
    Captured {
        head: text.as_bytes().to_vec(),
        total_bytes: text.len() as u64,
        total_lines: text.matches('\n').count() as u64,
        ..Default::default()
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time(c: &Captured, keep: bool, rounds: usize) -> Duration {
    let p = policy(keep);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spill");
    let open = move |_: &str| Ok(("spill".to_owned(), std::fs::File::create(&path)?));
    median(
        (0..rounds)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(shape_stream(c, &p, "stdout", Some(&open)));
                t.elapsed()
            })
            .collect(),
    )
}

fn main() {
    let line = "   Compiling cordon v0.1.0 (/work/cordon) warning: unused variable `x`\n";
    let clean: String = line.repeat(8 * 1024 / line.len());
    let coloured: String = clean
        .lines()
        .map(|l| format!("\u{1b}[1;32m{}\u{1b}[0m{}\n", &l[..12], &l[12..]))
        .collect();
    let long: String = line.repeat((1 << 20) / line.len());
    println!("case                       hygiene     keep (no hygiene)");
    for (name, text, rounds) in [
        ("clean 8 KiB, 115 lines", &clean, 2000),
        ("coloured 8 KiB", &coloured, 2000),
        ("1 MiB, cut to head+tail", &long, 200),
    ] {
        let c = captured(text);
        let with = time(&c, false, rounds);
        let without = time(&c, true, rounds);
        println!("{name:<26} {with:>10.1?}  {without:>10.1?}");
    }
}
