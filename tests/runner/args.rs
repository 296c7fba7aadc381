//! The libtest command line, as far as cargo, cargo-nextest and people use it: filters,
//! `--exact`, `--skip`, `--ignored` / `--include-ignored`, `--list [--format terse]`,
//! `--nocapture`, `--show-output`, `--test-threads N`, `-q`. Options that only change
//! libtest's presentation (`--color`, `-Z unstable-options`, `--report-time`) are accepted and
//! ignored; anything else is an error, so a run never silently does something else than asked.

/// Which tests `#[ignore]` decides about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// The default: ignored tests are reported as ignored and not run.
    Exclude,
    /// `--ignored`: only the ignored tests.
    Only,
    /// `--include-ignored`: all of them.
    Include,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub filters: Vec<String>,
    pub skip: Vec<String>,
    pub exact: bool,
    pub ignored: Ignored,
    pub list: bool,
    /// `--format terse` (for `--list`: names only; for a run: one character per test).
    pub terse: bool,
    /// Children's output goes straight to this process's stdout/stderr.
    pub nocapture: bool,
    /// Also print the output of tests that passed or skipped.
    pub show_output: bool,
    pub test_threads: Option<usize>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgsError {
    #[error("{0} needs a value")]
    MissingValue(String),
    #[error("--test-threads wants a number above 0, not {0:?}")]
    BadThreads(String),
    #[error("--format {0:?} is not supported here (pretty or terse)")]
    BadFormat(String),
    #[error("unknown option {0} (this is cordon's test harness, tests/runner)")]
    Unknown(String),
}

impl Options {
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, ArgsError> {
        let mut options = Options {
            filters: Vec::new(),
            skip: Vec::new(),
            exact: false,
            ignored: Ignored::Exclude,
            list: false,
            terse: false,
            nocapture: env_flag("RUST_TEST_NOCAPTURE"),
            show_output: false,
            test_threads: None,
        };
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            // `--name=value` is the same as `--name value`.
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value)),
                _ => (arg.clone(), None),
            };
            let mut value = |name: &str| -> Result<String, ArgsError> {
                match inline {
                    Some(v) => Ok(v.to_owned()),
                    None => args
                        .next()
                        .ok_or_else(|| ArgsError::MissingValue(name.to_owned())),
                }
            };
            match flag.as_str() {
                "--exact" => options.exact = true,
                "--skip" => options.skip.push(value("--skip")?),
                "--ignored" => options.ignored = Ignored::Only,
                "--include-ignored" => options.ignored = Ignored::Include,
                "--list" => options.list = true,
                "--nocapture" | "--no-capture" => options.nocapture = true,
                "--show-output" => options.show_output = true,
                "-q" | "--quiet" => options.terse = true,
                "--format" => match value("--format")?.as_str() {
                    "terse" => options.terse = true,
                    "pretty" => options.terse = false,
                    other => return Err(ArgsError::BadFormat(other.to_owned())),
                },
                "--test-threads" => {
                    let n = value("--test-threads")?;
                    options.test_threads = Some(parse_threads(&n)?);
                }
                // Presentation only, or what cargo passes to every harness.
                "--test" | "--report-time" => {}
                "--color" | "-Z" => {
                    value(&flag)?;
                }
                _ if flag.starts_with("-Z") => {}
                _ if flag.starts_with('-') => return Err(ArgsError::Unknown(arg)),
                _ => options.filters.push(arg),
            }
        }
        Ok(options)
    }

    /// Whether the filters select the test named `name` (libtest's rules: any filter matches
    /// as a substring, or exactly with `--exact`; then `--skip` takes tests out the same way).
    pub fn selects(&self, name: &str) -> bool {
        let matches = |pattern: &String| {
            if self.exact {
                name == pattern
            } else {
                name.contains(pattern.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(matches))
            && !self.skip.iter().any(matches)
    }

    /// How many tests run at once: `--test-threads`, else `RUST_TEST_THREADS`, else the
    /// machine's CPUs.
    pub fn parallelism(&self) -> usize {
        self.test_threads
            .or_else(|| {
                std::env::var("RUST_TEST_THREADS")
                    .ok()
                    .and_then(|n| parse_threads(&n).ok())
            })
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

fn parse_threads(n: &str) -> Result<usize, ArgsError> {
    match n.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ArgsError::BadThreads(n.to_owned())),
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}
