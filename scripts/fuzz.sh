#!/usr/bin/env bash
# Bounded fuzzing of the engine (fuzz/, cargo-fuzz + libFuzzer): each target runs SECS seconds
# (default 30) from its seed corpus in fuzz/corpus/TARGET; new inputs go to a scratch corpus
# under the target directory, never into the tree. A crash, a failed check or a timeout fails
# the script and leaves the input in fuzz/artifacts/TARGET/ (replay it with
# `cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/crash-...`).
#
# Usage: bash scripts/fuzz.sh [SECS] [TARGET...]   (default: every target of fuzz/Cargo.toml)
# Needs the nightly toolchain (`rustup toolchain install nightly`) and cargo-fuzz (installed
# here when missing). Missing nightly is an error, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
ensure_cargo

secs=${1:-30}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(nat44 nat64 siit tunnel all ftp)

cargo +nightly --version >/dev/null 2>&1 ||
    die "fuzzing needs the nightly toolchain (libFuzzer's sanitizer flags): rustup toolchain install nightly"
if ! cargo fuzz --version >/dev/null 2>&1; then
    say "installing cargo-fuzz"
    timeout 900 cargo install cargo-fuzz --locked
fi

target_dir=${CARGO_TARGET_DIR:-target}/fuzz
# The checks first: each must catch the bad packet it exists for (fuzz/src/lib.rs tests).
say "fuzz checks self-test"
timeout 1800 cargo +nightly test --manifest-path fuzz/Cargo.toml --lib --target-dir "$target_dir/test"
timeout 1800 cargo +nightly fuzz build --target-dir "$target_dir"
for t in "${targets[@]}"; do
    [ -d "fuzz/corpus/$t" ] || die "no seed corpus fuzz/corpus/$t"
    scratch="$target_dir/corpus/$t"
    mkdir -p "$scratch" "fuzz/artifacts/$t"
    say "fuzz $t for ${secs}s ($(find "fuzz/corpus/$t" -type f | wc -l) seeds)"
    # -timeout: one input taking more than 10 s is a hang, and a failure.
    log="$target_dir/fuzz-$t.log"
    if ! timeout -k 10 $((secs + 120)) cargo +nightly fuzz run --target-dir "$target_dir" "$t" \
        "$scratch" "fuzz/corpus/$t" -- -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1 >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        die "fuzz target $t failed (input in fuzz/artifacts/$t/, log $log)"
    fi
    grep -E '^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units)' "$log" || true
done
echo "fuzzing passed: ${targets[*]}, ${secs}s each"
