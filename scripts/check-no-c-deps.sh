#!/usr/bin/env bash
# Checks that the lock crates, built without numa-topology's `hwloc` feature, pull in
# no crate that links a C library (hwlocality-sys, pkg-config probes, `links = ...`).
set -euo pipefail
cd "$(dirname "$0")/.."
for crate in numa-spin cst-mutex; do
    tree=$(cargo tree -p "$crate" -e normal --prefix none --format '{p}')
    if grep -Eq '^(hwlocality|hwlocality-sys|pkg-config|cc) ' <<<"$tree"; then
        echo "$crate depends on a C library without the hwloc feature:" >&2
        grep -E '^(hwlocality|hwlocality-sys|pkg-config|cc) ' <<<"$tree" >&2
        exit 1
    fi
    echo "$crate: no C library in its normal dependency tree ($(wc -l <<<"$tree") crates)"
done
