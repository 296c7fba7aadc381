//! Spawn overhead of the confinement core: a confined `/bin/true` against a bare spawn of
//! the same, measured in one interleaved run.
//!
//! Interleaving (one sample of every variant per round, in a fixed order) exposes all
//! variants to the same background load, so on a busy machine the *ratio* stays meaningful
//! even when absolute times drift. The target from the issue is confined ≤ 1.3× bare median.
//!
//! Variants, each a complete spawn → read stdout/stderr to EOF → reap:
//!
//! * `std_status`: `std::process::Command::status()`, the floor (no pipes, no runtime).
//! * `bare`: what a non-sandboxing MCP server does: `tokio::process::Command`, env cleared,
//!   stdin null, stdout/stderr piped and read to EOF, then `wait` (std then uses
//!   `posix_spawn`). **The baseline.**
//! * `confined`: `Executor::run` with the sandbox init: the call takes a warm slot (already
//!   forked inside the init's namespaces and placed in its per-call cgroups) and hands it the
//!   job. **The measured path.**
//! * `slot_only`: the same slot spawn without `Executor::run`'s bookkeeping (no tmp dir, env
//!   build, kill-tree, limit reads): pop a warm slot, `spawn_in_slot`, read both pipes, wait.
//! * `slot_make`: (spaced only) making one slot on demand, `Confinement::make_call_slot`: the
//!   per-call cgroups, the init's fork, the slot's cgroup join and Landlock layer, its ready
//!   report. This is what the warm pool takes off the critical path, and what a call pays
//!   when it finds the pool empty.
//! * `per_child`: `Executor::run` on the per-child path (`CORDON_SIMULATE_MISSING=namespaces`:
//!   one fork per call, confined in `pre_exec`, joining its cgroups on the critical path), for
//!   comparison with the design the init replaced.
//!
//! and, to say where the per-child time goes, each row adding one layer to the one above (all
//! built from the per-child confinement):
//!
//! * `fork_noop`: `bare` with an empty `pre_exec`. Any `pre_exec` makes std use
//!   `fork` instead of `posix_spawn` (vfork-like), so this is the price of having a hook at all.
//! * `prexec_basic`: the library's child setup without Landlock and seccomp (setsid, fchdir,
//!   rlimits, parent-death signal, capability drop, no_new_privs).
//! * `prexec_landlock`: plus `landlock_restrict_self`.
//! * `prexec`: plus the seccomp programs: the complete child-side confinement, no cgroup.
//! * `prexec_cgroup`: plus a per-call cgroup, created before the spawn, joined in the child,
//!   and dropped (kill + rmdir) after the reap.
//! * `cgroup_create`, `cgroup_drop`: no process, `Confinement::create_call_cgroup()` and
//!   dropping its result, timed separately.
//!
//! Two phases, each interleaved:
//!
//! * *back-to-back*: `std_status`, `bare`, `confined`, `slot_only`, `per_child`, without
//!   pause, as the issue asks, each run in blocks (default 10 in a row, the first dropped) so
//!   a call is measured after calls of its own kind, not while the previous variant's
//!   background work (refill, cleanup) still runs. This flatters `per_child`: joining a cgroup write-locks
//!   the kernel's global `cgroup_threadgroup_rwsem`, which waits out an RCU grace period
//!   (`rcu_sync_enter`) unless another migration took it within about one grace period
//!   before, and in a tight loop the previous call always did. It is the hard case for the
//!   warm slots: the refill after one call competes with the next call.
//! * *spaced*: every variant including the breakdown, idling before each sample like an
//!   agent that issues a command now and then, so every cgroup join starts cold. This is
//!   the realistic number, and the breakdown rows cannot warm the lock for one another.
//!
//! Run with `cargo bench --bench spawn`. `BENCH_N` (default 500) and `BENCH_N_SPACED`
//! (default 100) set samples per variant, `BENCH_GAP_MS` (default 50) the spaced pause,
//! `BENCH_BLOCK` (default 10) how many back-to-back samples of one variant run in a row.
//! Creating cgroups needs root or a delegated subtree; the header states what was in force.
//! The sandbox init is `cordon __sandbox-init`, which this bench binary cannot run, so the
//! confinement names the release `cordon` binary Cargo built beside it (or
//! `BENCH_INIT_PROGRAM`, to measure another build's init).

use cordon::testing::confine::{ChildSetup, Confinement, confine_on_spawn};
use cordon::testing::exec::process::{Process, SlotSpawn, spawn_in_slot};
use cordon::testing::exec::{CaptureSpec, ExecRequest, Executor, Program};
use cordon::testing::policy::Policy;
use cordon::testing::runtime::{Runtime, RuntimeOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

const PROGRAM: &str = "/bin/true";

fn main() {
    // `cargo bench` passes `--bench`; there are no filters to honour.
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let n = env("BENCH_N", 500) as usize;
    let n_spaced = env("BENCH_N_SPACED", 100) as usize;
    let block = env("BENCH_BLOCK", 10).max(1) as usize;
    let gap = Duration::from_millis(env("BENCH_GAP_MS", 50));
    let workspace = tempfile::tempdir().expect("workspace tempdir");
    let workspace_path = workspace
        .path()
        .canonicalize()
        .expect("canonical workspace");
    let policy = Policy::builtin_default();
    // The per-child confinement first, while this process has no other thread that could read
    // the environment during `set_var`.
    // SAFETY: single-threaded here (no runtime, no sandbox dispatcher thread yet).
    unsafe { std::env::set_var("CORDON_SIMULATE_MISSING", "namespaces") };
    let per_child = Runtime::build(
        policy.clone(),
        RuntimeOptions {
            workspace: workspace_path.clone(),
            ..RuntimeOptions::default()
        },
    )
    .expect("this host must enforce the default policy (run as root or with delegation)");
    // SAFETY: as above; still single-threaded.
    unsafe { std::env::remove_var("CORDON_SIMULATE_MISSING") };
    assert!(
        !per_child.confinement.uses_sandbox_init(),
        "per-child path expected"
    );
    let options = RuntimeOptions {
        workspace: workspace_path.clone(),
        // BENCH_INIT_PROGRAM: another cordon build's init, to compare two builds in one run.
        init_program: Some(
            std::env::var_os("BENCH_INIT_PROGRAM")
                .unwrap_or_else(|| env!("CARGO_BIN_EXE_cordon").into())
                .into(),
        ),
        ..Default::default()
    };
    let sandboxed = Runtime::build(policy, options)
        .expect("this host must enforce the default policy (run as root or with delegation)");
    assert!(
        sandboxed.confinement.uses_sandbox_init(),
        "the sandbox init did not start: {:?}",
        sandboxed.confinement.enforcement().notes
    );
    // The same runtime shape as the `cordon` binary (multi-thread, one worker per core).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run(n, n_spaced, gap, block, sandboxed, per_child));
}

async fn run(
    n: usize,
    n_spaced: usize,
    gap: Duration,
    block: usize,
    sandboxed_runtime: Runtime,
    per_child_runtime: Runtime,
) {
    let sandboxed = Arc::clone(&sandboxed_runtime.confinement);
    let per_child = Arc::clone(&per_child_runtime.confinement);
    let executor = &*sandboxed_runtime.executor;
    let per_child_executor = &*per_child_runtime.executor;
    let bench = Bench {
        sandboxed: &sandboxed,
        per_child: &per_child,
        executor,
        per_child_executor,
    };

    for (name, c) in [("confined", &sandboxed), ("per_child", &per_child)] {
        println!("enforcement ({name}): {}", c.enforcement().summary());
        for note in &c.enforcement().notes {
            println!("  note: {note}");
        }
    }
    // The first call would otherwise make its slot on demand.
    let warm = Arc::clone(&sandboxed);
    tokio::task::spawn_blocking(move || {
        if let Some(Ok(sandbox_init)) = warm.sandbox_init() {
            warm.refill_call_slots(&sandbox_init);
        }
    })
    .await
    .expect("refill");

    println!(
        "\n## back-to-back: {n} samples per variant after 5 warm-up rounds, interleaved in \
         blocks of {block} (first of each block dropped)\n"
    );
    bench.phase(&Variant::HEADLINE, n, 5, None, block).await;

    println!(
        "\n## spaced: {n_spaced} samples per variant, {} ms idle before each, interleaved\n",
        gap.as_millis()
    );
    bench.phase(&Variant::ALL, n_spaced, 5, Some(gap), 1).await;
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    StdStatus,
    Bare,
    ForkNoop,
    PrexecBasic,
    PrexecLandlock,
    Prexec,
    PrexecCgroup,
    Confined,
    SlotOnly,
    SlotMake,
    PerChild,
    CgroupCreate,
    CgroupDrop,
}

impl Variant {
    /// The order of one round. `CgroupCreate` and `CgroupDrop` are one operation timed in
    /// two halves (see `Bench::sample`), so they must stay adjacent in this order.
    const ALL: [Variant; 13] = [
        Variant::StdStatus,
        Variant::Bare,
        Variant::Confined,
        Variant::SlotOnly,
        Variant::SlotMake,
        Variant::PerChild,
        Variant::ForkNoop,
        Variant::PrexecBasic,
        Variant::PrexecLandlock,
        Variant::Prexec,
        Variant::PrexecCgroup,
        Variant::CgroupCreate,
        Variant::CgroupDrop,
    ];
    /// The comparison the issue asks for, plus the std floor and the two comparison paths.
    const HEADLINE: [Variant; 5] = [
        Variant::StdStatus,
        Variant::Bare,
        Variant::Confined,
        Variant::SlotOnly,
        Variant::PerChild,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::StdStatus => "std_status",
            Variant::Bare => "bare",
            Variant::ForkNoop => "fork_noop",
            Variant::PrexecBasic => "prexec_basic",
            Variant::PrexecLandlock => "prexec_landlock",
            Variant::Prexec => "prexec",
            Variant::PrexecCgroup => "prexec_cgroup",
            Variant::Confined => "confined",
            Variant::SlotOnly => "slot_only",
            Variant::SlotMake => "slot_make",
            Variant::PerChild => "per_child",
            Variant::CgroupCreate => "cgroup_create",
            Variant::CgroupDrop => "cgroup_drop",
        }
    }
}

struct Bench<'a> {
    sandboxed: &'a Arc<Confinement>,
    per_child: &'a Confinement,
    executor: &'a Executor,
    per_child_executor: &'a Executor,
}

impl Bench<'_> {
    /// Runs `warmup + n` rounds of `variants` (one sample each, in order), optionally idling
    /// `gap` before every sample, and prints the table.
    /// Runs `warmup` rounds, then rounds until every variant has `n` samples. A round runs each
    /// variant `block` times in a row; with `block` > 1 the first sample of each block is
    /// dropped, because it overlaps the background work the previous variant left behind (a
    /// confined call's refill and cleanup run after its answer), which would otherwise be
    /// billed to whichever variant comes next.
    async fn phase(
        &self,
        variants: &[Variant],
        n: usize,
        warmup: usize,
        gap: Option<Duration>,
        block: usize,
    ) {
        let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); variants.len()];
        let skip = usize::from(block > 1);
        let mut round = 0;
        while samples.iter().any(|s| s.len() < n) {
            if round == warmup {
                POOL_MISSES.store(0, std::sync::atomic::Ordering::Relaxed);
            }
            for (i, variant) in variants.iter().enumerate() {
                for k in 0..block {
                    if let Some(gap) = gap {
                        // A blocking sleep: nothing else should run on the runtime meanwhile.
                        std::thread::sleep(gap);
                    }
                    let taken = self.sample(*variant).await;
                    if round >= warmup && k >= skip && samples[i].len() < n {
                        samples[i].push(taken);
                    }
                }
            }
            round += 1;
        }
        let stats: Vec<Stats> = samples.iter_mut().map(|s| Stats::of(s)).collect();
        let of = |v: Variant| &stats[variants.iter().position(|&x| x == v).expect("variant")];
        let (bare, confined) = (of(Variant::Bare), of(Variant::Confined));
        println!("| variant | min | median | p90 | p99 | mean | median / bare |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for (variant, s) in variants.iter().zip(&stats) {
            println!(
                "| `{}` | {} | {} | {} | {} | {} | {:.2}× |",
                variant.name(),
                us(s.min),
                us(s.median),
                us(s.p90),
                us(s.p99),
                us(s.mean),
                ratio(s.median, bare.median),
            );
        }
        let median_ratio = ratio(confined.median, bare.median);
        println!(
            "\nconfined / bare: median {median_ratio:.2}× (target ≤ 1.30×: {}), p90 {:.2}×; \
             per_child / bare: median {:.2}×",
            if median_ratio <= 1.3 { "met" } else { "MISSED" },
            ratio(confined.p90, bare.p90),
            ratio(of(Variant::PerChild).median, bare.median),
        );
        println!(
            "slot_only found the warm pool empty in {} of {n} samples",
            POOL_MISSES.load(std::sync::atomic::Ordering::Relaxed)
        );
    }

    async fn sample(&self, variant: Variant) -> Duration {
        let t = Instant::now();
        match variant {
            Variant::StdStatus => {
                let status = std::process::Command::new(PROGRAM)
                    .status()
                    .expect("spawn /bin/true");
                assert!(status.success());
            }
            Variant::Bare => spawn_piped(tokio_command()).await,
            Variant::ForkNoop => {
                let mut cmd = tokio_command();
                // SAFETY: the hook does nothing, which is trivially async-signal-safe.
                unsafe {
                    cmd.pre_exec(|| Ok(()));
                }
                spawn_piped(cmd).await;
            }
            Variant::PrexecBasic | Variant::PrexecLandlock | Variant::Prexec => {
                // Opened per call, as `Executor::run` does for the default cwd.
                let cwd = workspace_fd(self.per_child);
                let mut setup = self.per_child.child_setup(Some(cwd.as_raw_fd()), None);
                strip(&mut setup, variant);
                let mut cmd = tokio_command();
                confine_on_spawn(&mut cmd, setup);
                spawn_piped(cmd).await;
            }
            Variant::PrexecCgroup => {
                let cwd = workspace_fd(self.per_child);
                let cgroup = self.per_child.create_call_cgroup().expect("call cgroup");
                let mut cmd = tokio_command();
                confine_on_spawn(
                    &mut cmd,
                    self.per_child
                        .child_setup(Some(cwd.as_raw_fd()), cgroup.as_ref()),
                );
                spawn_piped(cmd).await;
                // Dropping kills what is left and removes the groups; blocking work, so off
                // the runtime threads like `Executor::run` does it.
                tokio::task::spawn_blocking(move || drop(cgroup))
                    .await
                    .expect("cgroup drop");
            }
            Variant::Confined | Variant::PerChild => {
                let executor = if variant == Variant::Confined {
                    self.executor
                } else {
                    self.per_child_executor
                };
                let outcome = executor
                    .run(ExecRequest::new(
                        Program::new([PROGRAM]),
                        Duration::from_secs(30),
                        capture(),
                        capture(),
                    ))
                    .await
                    .expect("confined /bin/true");
                assert_eq!(outcome.exit_code, Some(0), "confined /bin/true failed");
            }
            Variant::SlotOnly => self.slot_only().await,
            Variant::SlotMake => {
                let c = Arc::clone(self.sandboxed);
                let warm = tokio::task::spawn_blocking(move || {
                    let sandbox_init = c
                        .sandbox_init()
                        .expect("a sandbox init")
                        .expect("sandbox init alive");
                    c.make_call_slot(&sandbox_init)
                })
                .await
                .expect("make slot")
                .expect("make slot");
                let taken = t.elapsed();
                // Unused: its socket closes and it exits; the groups go off the runtime.
                tokio::task::spawn_blocking(move || drop(warm))
                    .await
                    .expect("drop slot");
                return taken;
            }
            Variant::CgroupCreate => {
                let cgroup = self.per_child.create_call_cgroup().expect("call cgroup");
                let taken = t.elapsed();
                // Kept for the `CgroupDrop` sample that follows in the same round.
                PENDING_DROP.with(|p| *p.borrow_mut() = Some(cgroup));
                return taken;
            }
            Variant::CgroupDrop => {
                let cgroup = PENDING_DROP.with(|p| p.borrow_mut().take());
                let t = Instant::now();
                drop(cgroup);
                return t.elapsed();
            }
        }
        t.elapsed()
    }
}

impl Bench<'_> {
    /// A warm slot's spawn and nothing else (what `Executor::run` adds is the difference to
    /// `confined`). Refills the pool afterwards off the runtime threads, as `run` does.
    async fn slot_only(&self) {
        let sandbox_init = self
            .sandboxed
            .current_sandbox_init()
            .expect("a live, current sandbox init");
        let warm = match sandbox_init.pop_warm() {
            Some(w) => w,
            None => {
                POOL_MISSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let (c, f) = (Arc::clone(self.sandboxed), Arc::clone(&sandbox_init));
                tokio::task::spawn_blocking(move || c.make_call_slot(&f))
                    .await
                    .expect("make slot")
                    .expect("make slot")
            }
        };
        let program = Program::new([PROGRAM]);
        let env = Default::default();
        let (mut child, pipes) = spawn_in_slot(
            warm.slot,
            SlotSpawn {
                program: &program,
                env: &env,
                cwd: ".".into(),
                piped_stdin: false,
                rlimits: self.sandboxed.job_rlimits(),
                extra_fds: Vec::new(),
            },
        )
        .expect("slot spawn");
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let mut out = pipes.stdout.expect("stdout pipe");
        let mut err = pipes.stderr.expect("stderr pipe");
        let (r1, r2, status) = tokio::join!(
            out.read_to_end(&mut o),
            err.read_to_end(&mut e),
            child.wait()
        );
        r1.and(r2).expect("read pipes");
        assert!(
            status.expect("status").success(),
            "/bin/true failed in a slot"
        );
        assert!(matches!(child, Process::Slot(_)));
        let c = Arc::clone(self.sandboxed);
        tokio::task::spawn_blocking(move || {
            drop(warm.cgroup);
            c.refill_call_slots(&sandbox_init);
        });
    }
}

/// Removes the child-side layers a breakdown row does not include.
fn strip(setup: &mut ChildSetup, variant: Variant) {
    if matches!(variant, Variant::PrexecBasic | Variant::PrexecLandlock) {
        setup.seccomp_programs = Arc::new(Vec::new());
    }
    if variant == Variant::PrexecBasic {
        setup.landlock_ruleset_fd = None;
    }
}

/// `slot_only` samples that found no warm slot and made one on the critical path.
static POOL_MISSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    /// The group made by the last `CgroupCreate` sample, for `CgroupDrop` to time. The round
    /// runs inside `block_on` on one thread, so a thread-local is enough.
    static PENDING_DROP: std::cell::RefCell<Option<Option<cordon::testing::confine::CallCgroup>>> =
        const { std::cell::RefCell::new(None) };
}

fn tokio_command() -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(PROGRAM);
    cmd.env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Spawns, reads both pipes to EOF and reaps: the whole lifecycle a server has to do.
async fn spawn_piped(mut cmd: tokio::process::Command) {
    let mut child = cmd.spawn().expect("spawn /bin/true");
    let mut out = child.stdout.take().expect("stdout pipe");
    let mut err = child.stderr.take().expect("stderr pipe");
    let (mut o, mut e) = (Vec::new(), Vec::new());
    let (r1, r2, status) = tokio::join!(
        out.read_to_end(&mut o),
        err.read_to_end(&mut e),
        child.wait()
    );
    r1.and(r2).expect("read pipes");
    assert!(status.expect("wait").success(), "/bin/true failed");
}

fn workspace_fd(confinement: &Confinement) -> OwnedFd {
    OwnedFd::from(std::fs::File::open(confinement.workspace()).expect("open workspace"))
}

fn capture() -> CaptureSpec {
    CaptureSpec {
        memory_cap: 64 * 1024,
        spill: None,
        tee: None,
    }
}

struct Stats {
    min: Duration,
    median: Duration,
    p90: Duration,
    p99: Duration,
    mean: Duration,
}

impl Stats {
    fn of(samples: &mut [Duration]) -> Self {
        samples.sort_unstable();
        // Nearest-rank percentile: the smallest sample with at least q of the samples ≤ it.
        let pct = |q: f64| {
            let rank = ((q * samples.len() as f64).ceil() as usize).max(1);
            samples[rank - 1]
        };
        Self {
            min: samples[0],
            median: pct(0.5),
            p90: pct(0.9),
            p99: pct(0.99),
            mean: samples.iter().sum::<Duration>() / samples.len() as u32,
        }
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}
