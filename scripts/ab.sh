#!/usr/bin/env bash
# Two or more numa-bench builds measured side by side on one machine: rounds
# of `numa-bench compare`, the builds interleaved within each round, then
# `numa-bench diff` of each build against the first, over all rounds pooled.
#
#   scripts/ab.sh OUT ROUNDS NAME=BINARY NAME=BINARY... -- COMPARE-ARGS...
#
# e.g. (a build of the commit before a change against the working tree's):
#   git worktree add /tmp/base <commit>
#   (cd /tmp/base && cargo build --release -p numa-bench)
#   cargo build --release -p numa-bench
#   scripts/ab.sh target/ab 6 base=/tmp/base/target/release/numa-bench \
#       new=target/release/numa-bench -- --locks cst,parking_lot \
#       --workloads locktorture,kv --threads 1,2,32 --repeat 5 --duration 0.3s \
#       --virtual-nodes 2
#
# OUT/NAME is emptied first; round r writes OUT/NAME/rR (a `compare` result
# directory) for every NAME; the order of the builds turns by one each round,
# so none always runs first or last. `numa-bench diff OUT/FIRST OUT/NAME` then pools each side's rounds
# (the repeats of all rounds, paired repeat by repeat with parking_lot's),
# and its `vs_pl` NEW/OLD column is the figure to judge a change by: each
# repeat's ratio to parking_lot cancels what the machine did at that moment
# (a virtual machine's vCPUs moving between host cores, other tenants), which
# moves both locks of a repeat alike. Include parking_lot in --locks for it.
# On the 2-vCPU development guest one build's ratio moves by about 5% from
# run to run even so, and by more between two binaries of the same lock code
# (code layout): take several rounds, and read a change of a few percent as
# noise.
#
# Code layout: a ratio between two locks of one binary also moves with where
# the linker put their code. On that guest, five builds of one commit that
# differ only in the order of their functions read combining over CNA at one
# thread (a point that never reaches combining's queue) at 0.90 to 1.11
# (locktorture and kv, with and without a CPU hog; four rounds each). To judge a change of a few percent, give each side several
# such builds (names `old1=... old2=... new1=... new2=...`) and pool them:
#   cargo rustc --release -p numa-bench --bin numa-bench -- \
#       -C link-arg=-Wl,--shuffle-sections='.text*=SEED'
# (a relink with lld, Rust's default linker on x86_64 Linux, seconds per
# SEED; the idea of Curtsinger and Berger's Stabilizer, ASPLOS 2013).
#
# Environment:
#   NUMA_BENCH  the binary that runs `diff` (default: the last build given; a
#               build from before `diff` pooled rounds cannot read OUT/NAME)
#   BASELINE    the lock of diff's `vs_` columns (default parking_lot; e.g.
#               `cna` for the combining lock, which runs on a CNA lock)
set -euo pipefail

usage() {
    sed -n '6p' "$0" >&2
    exit 2
}

[[ $# -ge 4 ]] || usage
out=$1
rounds=$2
shift 2
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ab.sh: ROUNDS must be a positive integer, got '$rounds'" >&2; exit 2; }
names=()
bins=()
while [[ $# -gt 0 && $1 != -- ]]; do
    spec=$1
    shift
    [[ $spec == *=* ]] || { echo "ab.sh: expected NAME=BINARY, got '$spec'" >&2; exit 2; }
    name=${spec%%=*}
    bin=${spec#*=}
    [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "ab.sh: bad build name '$name'" >&2; exit 2; }
    [[ -x $bin ]] || { echo "ab.sh: $bin (build '$name') is not an executable" >&2; exit 2; }
    names+=("$name")
    bins+=("$bin")
done
[[ $# -gt 0 ]] || usage
shift
[[ ${#names[@]} -ge 2 ]] || { echo "ab.sh: give at least two builds" >&2; exit 2; }
for a in "$@"; do
    [[ $a != --out && $a != --out=* ]] || { echo "ab.sh: OUT names the output, not --out" >&2; exit 2; }
done

n=${#names[@]}
for name in "${names[@]}"; do
    rm -rf "${out:?}/$name"
done
for r in $(seq 1 "$rounds"); do
    for i in $(seq 0 $((n - 1))); do
        k=$(( (i + r - 1) % n ))
        dir="$out/${names[$k]}/r$r"
        mkdir -p "$out/${names[$k]}"
        rm -rf "$dir"
        echo "== round $r/$rounds: ${names[$k]}" >&2
        "${bins[$k]}" compare "$@" --out "$dir" > "$dir.log" 2>&1 || {
            echo "ab.sh: ${names[$k]} failed in round $r, see $dir.log" >&2
            tail -5 "$dir.log" >&2
            exit 1
        }
    done
done

diff_bin=${NUMA_BENCH:-${bins[$((n - 1))]}}
for k in $(seq 1 $((n - 1))); do
    echo
    echo "## ${names[0]} (OLD) -> ${names[$k]} (NEW), $rounds rounds"
    "$diff_bin" diff --baseline "${BASELINE:-parking_lot}" "$out/${names[0]}" "$out/${names[$k]}"
done
