#!/usr/bin/env bash
# Runs every fuzz target (each `[[bin]]` in fuzz/Cargo.toml, as `cargo fuzz list` reports them)
# coverage-guided for SECONDS each, on the stable toolchain, and fails if any target finds a
# crash, an invariant violation, a leak, a timeout or an out-of-memory input.
#
#   fuzz/run-all.sh SECONDS [TARGET...]
#
# The seeds in fuzz/seeds/<target>/ (kept in git) are read, never written; what a run learns
# goes to fuzz/corpus/<target>/ (git-ignored) and a failing input to fuzz/artifacts/<target>/.
# The last lines of each target's log (executions, coverage, features) are printed, and the
# full log is kept in fuzz/logs/<target>.log (git-ignored).
#
# FUZZ_PROFILE=dev builds unoptimised (about half the cold build time, several times fewer
# executions per second): enough for a short CI run that replays the seeds and mutates a
# little; the default, release, is for real runs.
#
# cargo-fuzz passes nightly-only flags (-Zsanitizer=address, -Cpasses=sancov-module); the
# stable compiler accepts them with RUSTC_BOOTSTRAP=1, so no nightly toolchain is needed.
set -euo pipefail

if [[ $# -lt 1 || ! $1 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: $0 SECONDS [TARGET...]  (SECONDS: a positive whole number, per target)" >&2
    exit 2
fi
seconds=$1
shift
cd "$(dirname "$0")"
command -v cargo-fuzz >/dev/null || {
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz --locked" >&2
    exit 2
}
export RUSTC_BOOTSTRAP=1
case ${FUZZ_PROFILE:-release} in
    release) build_flags=() profile_dir=release ;;
    dev) build_flags=(--dev) profile_dir=debug ;;
    *)
        echo "FUZZ_PROFILE must be release or dev, not '$FUZZ_PROFILE'" >&2
        exit 2
        ;;
esac

if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi
if [[ ${#targets[@]} -eq 0 ]]; then
    echo "no fuzz targets found in fuzz/Cargo.toml" >&2
    exit 2
fi

echo "== building ${#targets[@]} fuzz targets (${FUZZ_PROFILE:-release}, AddressSanitizer, coverage)"
if [[ $# -gt 0 ]]; then
    for target in "${targets[@]}"; do cargo fuzz build "${build_flags[@]}" "$target"; done
else
    cargo fuzz build "${build_flags[@]}"
fi
# The binaries are run directly: `cargo fuzz run` would rebuild whenever the sources changed
# since, so every target of one invocation fuzzes the same build.
bin_dir="target/$(rustc -vV | sed -n 's/^host: //p')/$profile_dir"

mkdir -p logs
failed=()
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target" "artifacts/$target"
    dirs=("corpus/$target")
    [[ -d "seeds/$target" ]] && dirs+=("seeds/$target")
    echo "== $target: ${seconds}s"
    # -timeout: one input running this long is a hang; -rss_limit_mb: the machine is shared.
    if "$bin_dir/$target" "${dirs[@]}" -artifact_prefix="artifacts/$target/" \
        -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
        >"logs/$target.log" 2>&1; then
        grep -E '^#[0-9]+\s+DONE|^stat::number_of_executed_units|^stat::peak_rss_mb' \
            "logs/$target.log" || true
    else
        echo "!! $target FAILED; the end of its log (logs/$target.log):"
        tail -n 40 "logs/$target.log"
        failed+=("$target")
    fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "== fuzzing found problems in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "== all ${#targets[@]} targets ran ${seconds}s each without a finding"
