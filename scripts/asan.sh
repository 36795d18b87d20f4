#!/usr/bin/env bash
# AddressSanitizer run (issue 6): the lock crates' unit and integration tests,
# then a short torture run (locks created, contended on several virtual nodes
# and dropped while their snodes exist), under nightly `-Zsanitizer=address`,
# to catch use-after-free / double free of queue nodes and snodes, and leaks
# (LeakSanitizer runs at exit).
#
# Needs: a nightly toolchain (no rust-src / -Zbuild-std: std itself is not
# instrumented, our crates and their dependencies are, and ASan's runtime
# replaces malloc/free for everything), an explicit --target (so RUSTFLAGS do
# not reach build scripts and proc macros), and a target dir of its own
# (target/asan). Doc tests are skipped (rustdoc would need the flags too).
# Says "skipped" without nightly. Time on this 2-core machine: ~1.5 min cold
# for the lock crates, plus the torture build (lock-tests).
#
# Environment: ASAN_TORTURE_SECS (default 6; 0 skips the torture run).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "asan: skipped (no nightly toolchain: rustup toolchain install nightly)"
    exit 0
fi
target=$(rustc -vV | sed -n 's/^host: //p')

export RUSTFLAGS="-Zsanitizer=address"
export RUSTDOCFLAGS="-Zsanitizer=address"
export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1"
export CARGO_TARGET_DIR=target/asan

echo "==> asan: numa-spin and cst-mutex tests"
cargo +nightly test --target "$target" -p numa-spin -p cst-mutex --all-features --lib --tests

secs=${ASAN_TORTURE_SECS:-6}
if [ "$secs" != 0 ]; then
    echo "==> asan: torture test, TORTURE_SECS=$secs"
    TORTURE_SECS=$secs cargo +nightly test --target "$target" -p lock-tests --all-features \
        --release --test torture -- --ignored
fi
echo "asan: no AddressSanitizer or LeakSanitizer report"
