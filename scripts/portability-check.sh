#!/usr/bin/env bash
# Portability checks (issue 13, items 1, 5 and 6):
#  1. numa-bench builds and runs with hwloc's pkg-config files hidden
#     (PKG_CONFIG_LIBDIR=/nonexistent): the README's first command needs no C library,
#     and the binary links no libhwloc;
#  2. the lock crates and numa-bench build with the minimum supported Rust version
#     (1.95.0) for every feature set, if that toolchain is installed;
#  3. they build for every other installed target (non-Linux, non-x86), and say which of
#     the targets we care about are not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n==> %s\n' "$*"; }

step "numa-bench without hwloc (PKG_CONFIG_LIBDIR=/nonexistent)"
export_nohwloc() { PKG_CONFIG_LIBDIR=/nonexistent "$@"; }
export_nohwloc cargo build --release -p numa-bench
bin=target/release/numa-bench
if command -v ldd >/dev/null && ldd "$bin" | grep -qi hwloc; then
    echo "numa-bench links libhwloc in its default build"; exit 1
fi
export_nohwloc cargo run --release -p numa-bench -- topology
export_nohwloc cargo run --release -p numa-bench -- run --lock cna --workload kv --threads 2 \
    --virtual-nodes 2 --duration 200ms --json >/dev/null
if export_nohwloc "$bin" topology --synthetic "pack:2" 2>/tmp/numa-bench-nohwloc.err; then
    echo "--synthetic worked without hwloc?"; exit 1
fi
grep -q -- "--features hwloc" /tmp/numa-bench-nohwloc.err ||
    { echo "--synthetic without hwloc does not say how to get it:"; cat /tmp/numa-bench-nohwloc.err; exit 1; }
echo "builds, runs, links no hwloc, and --synthetic points at --features hwloc"

libs=(-p numa-topology -p numa-spin -p cst-mutex)
lock_features=numa-spin/lock_api_04,numa-spin/arc_lock,numa-spin/serde,numa-spin/owning_ref,numa-spin/stats,cst-mutex/lock_api_04,cst-mutex/arc_lock,cst-mutex/serde,cst-mutex/owning_ref

msrv=1.95.0
step "MSRV $msrv: every feature set"
if rustup toolchain list 2>/dev/null | grep -q "^$msrv"; then
    CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check "${libs[@]}"
    CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check "${libs[@]}" --features "$lock_features"
    CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check "${libs[@]}" -p numa-bench --all-features
else
    echo "skipped: toolchain $msrv not installed (rustup toolchain install $msrv)"
fi

step "other targets (as far as installed)"
host=$(rustc -vV | sed -n 's/^host: //p')
wanted=(aarch64-unknown-linux-gnu x86_64-apple-darwin aarch64-apple-darwin x86_64-pc-windows-msvc
    x86_64-pc-windows-gnu x86_64-unknown-freebsd i686-unknown-linux-gnu riscv64gc-unknown-linux-gnu)
installed=$(rustup target list --installed 2>/dev/null || echo "$host")
checked=0
for t in $installed; do
    [ "$t" = "$host" ] && continue
    echo "--- $t"
    CARGO_TARGET_DIR=target/cross cargo check --target "$t" "${libs[@]}" --features "$lock_features"
    CARGO_TARGET_DIR=target/cross cargo check --target "$t" -p numa-bench
    checked=$((checked + 1))
done
missing=()
for t in "${wanted[@]}"; do grep -qx "$t" <<<"$installed" || missing+=("$t"); done
echo "checked $checked non-host target(s); not installed, so not checked: ${missing[*]:-none}"

echo
echo "portability-check: all checks passed"
