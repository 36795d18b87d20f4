#!/usr/bin/env bash
# The repository is self-contained: a fresh clone of the committed HEAD, alone in an
# empty temporary directory (nothing beside it) and with NUMA_TOPOLOGY_TESTDATA unset,
# runs the tests that read the hwloc XML fixtures (crates/topology/tests/data/topologies).
# Reuses a build cache in target/clone-check (CARGO_TARGET_DIR overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q "$root" "$tmp/repo"
unset NUMA_TOPOLOGY_TESTDATA
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/clone-check}
cd "$tmp/repo"
echo "clone of $(git rev-parse --short HEAD) in $tmp/repo (beside it: $(ls -A "$tmp" | tr '\n' ' '))"
# Both tests are `#![cfg(feature = "hwloc")]`: check that they ran, not just compiled away.
run() {
    local log="$tmp/log"
    cargo test --release "$@" 2>&1 | tee "$log"
    grep -Eq '^test result: ok\. [1-9][0-9]* passed' "$log" || { echo "clone-check: no test ran for: $*"; exit 1; }
}
run -p numa-topology --all-features --test hwloc_xml
# numa-bench's default features are empty; `hwloc` turns its fixture test on.
run -p numa-bench --features hwloc --test topology_json
echo "clone-check: fixture tests pass from a clean clone"
