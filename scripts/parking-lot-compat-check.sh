#!/usr/bin/env bash
# The parking_lot 0.12 drop-in (crates/parking-lot-compat), kept out of the
# workspace-wide `--all-features` runs because its `deadlock_detection` feature
# fails the build on purpose. Here: clippy, tests and docs with every other
# feature, for each backend; then the build failures that must happen
# (deadlock_detection, an unknown backend) with their messages.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*"; }

# `-p parking_lot` alone is ambiguous: the workspace also depends on the real
# parking_lot 0.13 (the benchmark baseline).
pkg=(-p parking_lot@0.12.5)
features=arc_lock,serde,owning_ref,send_guard,nightly,hardware-lock-elision

for backend in cst cna hq; do
    export PARKING_LOT_COMPAT_BACKEND=$backend
    step "parking_lot drop-in, backend $backend: clippy -D warnings"
    cargo clippy "${pkg[@]}" --all-targets --features "$features" -- -D warnings
    step "parking_lot drop-in, backend $backend: tests (default features, then $features)"
    cargo test "${pkg[@]}" --release
    cargo test "${pkg[@]}" --release --features "$features"
done
unset PARKING_LOT_COMPAT_BACKEND

step "parking_lot drop-in, --cfg parking_lot_compat=\"cna\" selects the same backend"
RUSTFLAGS='--cfg parking_lot_compat="cna"' CARGO_TARGET_DIR=target/plc-cfg \
    cargo test "${pkg[@]}" --release --test api

step "parking_lot drop-in: docs (RUSTDOCFLAGS=-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc "${pkg[@]}" --no-deps --features "$features"

step "parking_lot drop-in: builds that must fail, with their reason"
expect_failure() { # WHAT PATTERN CARGO-ARGS...
    local what=$1 pattern=$2 out
    shift 2
    if out=$("$@" 2>&1); then
        echo "$what: the build succeeded"; exit 1
    fi
    grep -q "$pattern" <<<"$out" || { echo "$what: no '$pattern' in:"; echo "$out" | tail -20; exit 1; }
    echo "$what: fails as it should"
}
expect_failure deadlock_detection "deadlock_detection. feature is not supported" \
    cargo check "${pkg[@]}" --features deadlock_detection
expect_failure "backend foo" "accepted values: .cst." \
    env PARKING_LOT_COMPAT_BACKEND=foo cargo check "${pkg[@]}"
expect_failure "cfg and environment disagree" "disagree" \
    env PARKING_LOT_COMPAT_BACKEND=hq RUSTFLAGS='--cfg parking_lot_compat="cna"' \
    CARGO_TARGET_DIR=target/plc-cfg cargo check "${pkg[@]}"

# A program nobody here wrote: tokio's own runtime and sync tests on the drop-in
# (tokio's `parking_lot` feature, part of `full`, puts its internal mutexes and
# its runtime's locks on parking_lot). A fixed subset within CI's budget (about
# 2.5 minutes cold); the full list is in crates/parking-lot-compat/README.md.
step "tokio 1.54.1's sync_mutex, sync_rwlock, sync_notify and rt_threaded tests, patched (default backend)"
STRICT=1 UNPATCHED=0 BACKENDS=cst TRY_CRATE_DIR="$PWD/target/try-crate/tokio" \
    scripts/try-crate.sh tokio@1.54.1 -- --features full,test-util \
    --test sync_mutex --test sync_rwlock --test sync_notify --test rt_threaded
