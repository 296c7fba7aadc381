//! Measures the embedded syntax check on a generated 1,000-line Python file (and a few other
//! languages), plus `mark_introduced` on the same file, and the same check through the
//! confined parser worker (what the server does: the request over a pipe, the parse in the
//! worker, the answer back), fresh and as an incremental one-line edit. Run with
//! `cargo bench --bench syntax`.

use cordon::testing::lint::{Diagnostic, Severity, mark_introduced};
use cordon::testing::parser::syntax::{Language as SyntaxLanguage, check as check_syntax};
use std::time::{Duration, Instant};

/// A realistic-looking Python module of exactly `lines` lines.
fn python_source(lines: usize) -> String {
    let block = [
        "class Handler{n}(Base):",
        "    \"\"\"Handles request {n} (héllo).\"\"\"",
        "",
        "    def __init__(self, name: str, items: list[int] | None = None) -> None:",
        "        self.name = name",
        "        self.items = [x * 2 for x in (items or []) if x % 3 != 0]",
        "",
        "    def run(self, ctx: dict[str, object]) -> str:",
        "        if not self.items:",
        "            raise ValueError(f\"empty {{self.name!r}}\")",
        "        total = sum(self.items) + len(ctx.get(\"extra\", ()))",
        "        return f\"{{self.name}}: {{total}}\"",
        "",
        "",
    ];
    let mut out = String::new();
    let mut n = 0;
    while out.lines().count() < lines {
        for line in block {
            out.push_str(
                &line
                    .replace("{n}", &n.to_string())
                    .replace("{{", "{")
                    .replace("}}", "}"),
            );
            out.push('\n');
        }
        n += 1;
    }
    out.lines().take(lines).map(|l| format!("{l}\n")).collect()
}

/// CPU time (user + system) this process has used so far, from /proc/self/stat in clock
/// ticks (100 Hz on Linux). Wall-clock medians are inflated when other builds share the two
/// cores; averaged CPU time per call is not.
fn process_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn measure(label: &str, iterations: u32, mut f: impl FnMut()) -> Duration {
    for _ in 0..iterations / 10 + 1 {
        f(); // warm-up: caches, parser allocation
    }
    let cpu_before = process_cpu_time();
    let mut samples: Vec<Duration> = (0..iterations)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    samples.sort();
    let median = samples[samples.len() / 2];
    let p95 = samples[samples.len() * 95 / 100];
    let cpu_per_call = cpu_before
        .zip(process_cpu_time())
        .map(|(before, after)| (after - before) / iterations);
    println!(
        "{label:<44} median {median:>10.3?}   p95 {p95:>10.3?}   cpu/call {:>10.3?}",
        cpu_per_call.unwrap_or_default()
    );
    median
}

fn main() {
    // Calibration: this machine's speed on a well-known workload, so the numbers below can be
    // compared with other hardware (serde_json typically parses to `Value` at a few hundred
    // MB/s on a desktop core).
    let json = format!(
        "[{}1]",
        "{\"a\": [1, 2.5, \"xyz\"], \"b\": null},\n".repeat(10_000)
    );
    let calibration = measure("calibration: serde_json 350 KB -> Value", 20, || {
        std::hint::black_box(serde_json::from_str::<serde_json::Value>(&json).ok());
    });
    println!(
        "  = {:.0} MB/s",
        json.len() as f64 / calibration.as_secs_f64() / 1e6
    );

    let py = python_source(1000);
    assert_eq!(py.lines().count(), 1000);
    println!(
        "python source: {} lines, {} bytes",
        py.lines().count(),
        py.len()
    );
    let clean = check_syntax(SyntaxLanguage::Python, &py).expect("parse");
    assert!(clean.is_empty(), "generated file must be clean: {clean:?}");
    measure("check_syntax python 1000 lines (clean)", 500, || {
        std::hint::black_box(check_syntax(SyntaxLanguage::Python, &py).ok());
    });

    // Baseline: bare tree-sitter parse, no time budget, no error walk.
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&tree_sitter_python::LANGUAGE.into())
        .expect("grammar");
    measure("baseline: bare Parser::parse python 1000", 500, || {
        std::hint::black_box(parser.parse(&py, None));
    });

    let broken = py.replacen("self.name = name", "self.name = (name", 1);
    let errors = check_syntax(SyntaxLanguage::Python, &broken).expect("parse");
    println!("  broken variant reports {} diagnostic(s)", errors.len());
    measure("check_syntax python 1000 lines (1 error)", 500, || {
        std::hint::black_box(check_syntax(SyntaxLanguage::Python, &broken).ok());
    });

    let rust: String = (0..250)
        .map(|i| format!("fn f{i}(x: u32) -> u32 {{\n    let y = x * {i};\n    y + 1\n}}\n"))
        .collect();
    measure("check_syntax rust 1000 lines", 500, || {
        std::hint::black_box(check_syntax(SyntaxLanguage::Rust, &rust).ok());
    });

    let old_diags: Vec<Diagnostic> = (1..=1000)
        .step_by(10)
        .map(|l| Diagnostic::at(l, 5, Severity::Warning, Some("W1".into()), "w", "ruff"))
        .collect();
    let edited = format!("import os\nimport sys\n{py}");
    let mut new_diags: Vec<Diagnostic> = old_diags
        .iter()
        .map(|d| Diagnostic {
            line: d.line + 2,
            ..d.clone()
        })
        .collect();
    measure("mark_introduced 1000 lines, 100 diagnostics", 200, || {
        mark_introduced(Some(&py), &edited, &old_diags, &mut new_diags);
    });
    assert!(new_diags.iter().all(|d| !d.introduced));

    through_the_worker(&py);
}

/// The syntax check as the server runs it: through the confined parser worker.
fn through_the_worker(py: &str) {
    use cordon::testing::parser::protocol::SyntaxOutcome;
    use cordon::testing::parser::{ParserClient, ParserConfig};
    use std::sync::Arc;
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let ws = tempfile::tempdir().expect("workspace");
    let root = ws.path().canonicalize().expect("workspace path");
    let program = std::path::PathBuf::from(env!("CARGO_BIN_EXE_cordon"));
    let policy = cordon::testing::policy::Policy::builtin_default();
    let options = cordon::testing::runtime::RuntimeOptions {
        workspace: root,
        allow_degraded: true,
        parser_program: Some(program.clone()),
        init_program: Some(program.clone()),
        ..Default::default()
    };
    let Ok(built) = cordon::testing::runtime::Runtime::build(policy, options) else {
        println!("parser worker series skipped: no confinement on this machine");
        return;
    };
    let client = ParserClient::new(
        Arc::clone(&built.executor),
        program,
        ParserConfig::default(),
    );
    let check = |text: &str, remember, previous| {
        let outcome = runtime
            .block_on(client.syntax(SyntaxLanguage::Python, text, remember, previous))
            .expect("the worker answers");
        assert!(
            matches!(outcome, SyntaxOutcome::Checked { .. }),
            "{outcome:?}"
        );
    };
    measure("worker: python 1000 lines, fresh parse", 300, || {
        check(py, None, None)
    });
    let a = py.to_owned();
    let b = py.replacen("self.name = name", "self.name = name  # edited", 1);
    check(&a, Some(1), None);
    check(&b, Some(2), Some(1));
    let mut flip = false;
    measure("worker: python 1000 lines, one-line edit", 300, || {
        flip = !flip;
        // Each edit is re-parsed from the tree of the text before it.
        if flip {
            check(&a, Some(1), Some(2))
        } else {
            check(&b, Some(2), Some(1))
        }
    });
}
