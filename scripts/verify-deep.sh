#!/usr/bin/env bash
# The slow, full verification runs that CI only samples (hours on 2 CPUs):
#   1. every ordering mutant of every lock crate (scripts/ordering-mutants.py --crate all;
#      CI runs a 3-minute daily share of each crate's sites);
#   2. the loom models at a deeper preemption bound (LOOM_MAX_PREEMPTIONS, default 3;
#      CST_LOOM_DEEP=1 also lifts cst-mutex's models that CI runs at bound 1 for time:
#      the timed upgrade and batch-switch models);
#   3. shuttle with 10x CI's schedules (SHUTTLE_ITERATIONS, default 20000);
#   4. cargo-mutants over the lock cores: first against the loom models, then the
#      mutants they missed against the crate's own tests and the generic suites, all
#      features on (as CI tests; the `stats` counters see what the lock word cannot)
#      (`--iterate` keeps the earlier run's caught mutants); the kill rate is printed;
#   5. the torture test for TORTURE_SECS (default 600).
# Usage: bash scripts/verify-deep.sh [step ...]   (steps: ordering loom shuttle mutants torture;
# default all). Results of step 4 go to target/verify-deep/mutants-<crate>/mutants.out.
# Needs python3 and `cargo install cargo-mutants` (installed here if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*"; }
steps=("$@")
((${#steps[@]})) || steps=(ordering loom shuttle mutants torture)
out=target/verify-deep
mkdir -p "$out"

for s in "${steps[@]}"; do
    case "$s" in
    ordering)
        step "ordering mutants, every crate"
        python3 scripts/ordering-mutants.py --crate all --json "$out/ordering.json"
        ;;
    loom)
        step "loom models, LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-3}"
        RUSTFLAGS="--cfg numa_loom" LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-3} CST_LOOM_DEEP=1 \
            CARGO_TARGET_DIR=target/loom cargo test --release -p numa-spin -p cst-mutex \
            --features numa-spin/loom,cst-mutex/loom --test loom -- --nocapture
        ;;
    shuttle)
        step "shuttle, SHUTTLE_ITERATIONS=${SHUTTLE_ITERATIONS:-20000}"
        SHUTTLE_ITERATIONS=${SHUTTLE_ITERATIONS:-20000} \
            RUSTFLAGS="--cfg numa_loom --cfg numa_shuttle" CARGO_TARGET_DIR=target/shuttle \
            cargo test --release -p numa-spin -p cst-mutex \
            --features numa-spin/loom,numa-spin/shuttle,cst-mutex/loom,cst-mutex/shuttle --test shuttle
        ;;
    mutants)
        cargo mutants --version >/dev/null 2>&1 || cargo install cargo-mutants --locked
        for crate in numa-spin cst-mutex; do
            case "$crate" in
            # numa-spin's loom models use the shared registry (a dev-dependency), so its
            # loom feature is switched on too; cst-mutex's models use the crate alone.
            numa-spin) files=(-f crates/numa-spin/src/cna.rs -f crates/numa-spin/src/raw_lock.rs
                -f crates/numa-spin/src/timed.rs -f crates/numa-spin/src/hq/mod.rs
                -f crates/numa-spin/src/hq/switch.rs -f crates/numa-spin/src/hq/plain.rs
                -f crates/numa-spin/src/hq/numa.rs -f crates/numa-spin/src/hq/pool.rs
                -f crates/numa-spin/src/node/mod.rs -f crates/numa-spin/src/node/registry.rs
                -f crates/numa-spin/src/node/handoff.rs -f crates/numa-spin/src/node/head_wait.rs
                -f crates/numa-spin/src/node/steal.rs -f crates/numa-spin/src/backoff.rs)
                loom_features=loom,lock-tests/loom ;;
            cst-mutex) files=(-f crates/cst-mutex/src/raw_mutex.rs -f crates/cst-mutex/src/raw_rwlock/mod.rs -f crates/cst-mutex/src/raw_rwlock/shared.rs
                -f crates/cst-mutex/src/raw_rwlock/exclusive.rs -f crates/cst-mutex/src/raw_rwlock/counters.rs
                -f crates/cst-mutex/src/raw_condvar.rs -f crates/cst-mutex/src/fair.rs)
                loom_features=loom ;;
            esac
            dir="$out/mutants-$crate"
            step "cargo-mutants $crate: against the loom models"
            RUSTFLAGS="--cfg numa_loom" LOOM_MAX_PREEMPTIONS=2 cargo mutants -j 1 -p "$crate" \
                "${files[@]}" --features "$loom_features" --profile release \
                --cargo-arg=--test --cargo-arg=loom --timeout 180 -o "$dir" || true
            step "cargo-mutants $crate: what loom missed, against the crate's tests and suites"
            cargo mutants -j 1 -p "$crate" "${files[@]}" --test-package "$crate,lock-tests" --all-features \
                --profile release --timeout 300 --iterate -o "$dir" || true
            m="$dir/mutants.out"
            # --iterate keeps the first run's kills in previously_caught.txt.
            caught=$(cat "$m/caught.txt" "$m/previously_caught.txt" 2>/dev/null | wc -l)
            missed=$(wc -l <"$m/missed.txt")
            timeout=$(wc -l <"$m/timeout.txt"); unviable=$(wc -l <"$m/unviable.txt")
            echo "$crate: caught $caught, timeout $timeout (a hang counts as killed), missed $missed, unviable $unviable"
            echo "missed mutants (each needs a test, or a reason it is equivalent):"
            cat "$m/missed.txt"
        done
        ;;
    torture)
        step "torture, TORTURE_SECS=${TORTURE_SECS:-600}"
        TORTURE_SECS=${TORTURE_SECS:-600} cargo test --release -p lock-tests --test torture \
            -- --ignored --nocapture
        ;;
    *)
        echo "unknown step $s (ordering loom shuttle mutants torture)"
        exit 2
        ;;
    esac
done
