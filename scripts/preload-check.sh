#!/usr/bin/env bash
# numa-preload's CI step: the interposer's tests (Rust unit tests of the in-place
# encodings, the C corpus under every NUMA_LOCK value) and one short point of
# each application (2 threads) under each lock, with NUMA_LOCK_STATS=1 showing
# that our locks served it, and its plots. About 1-2 minutes on 2 CPUs once built.
set -euo pipefail
cd "$(dirname "$0")/.."

printf '\n==> numa-preload: unit tests and C corpus under every NUMA_LOCK\n'
cargo test --release -p numa-preload

printf '\n==> numa-preload: one short point of each application under each lock\n'
scripts/apps.sh --quick
for prog in sysbench leveldb kccachetest; do
    test -s "target/apps-quick/${prog}_ratio.svg" || { echo "no plot for $prog" >&2; exit 1; }
done

# LTP's Open POSIX conformance tests of the interposed functions, when a
# checkout is at hand (CI machines cannot fetch it): a table, not a verdict.
if [[ -n "${LTP_DIR:-}" ]]; then
    printf '\n==> numa-preload: Open POSIX conformance tests (LTP_DIR=%s)\n' "$LTP_DIR"
    scripts/open-posix.sh "$LTP_DIR"
fi
