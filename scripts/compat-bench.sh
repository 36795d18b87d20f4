#!/usr/bin/env bash
# Real programs' hot paths on the parking_lot drop-in against crates.io's
# parking_lot 0.12: quick_cache's concurrent get/insert and tokio's
# multi-thread runtime spawning and joining tasks (scripts/compat-bench/).
#
#   scripts/compat-bench.sh
#
# Builds scripts/compat-bench once unpatched and once per backend with
# `[patch.crates-io] parking_lot = { path = "crates/parking-lot-compat" }`
# (checking with `cargo tree -i parking_lot` that the patch took effect), then
# runs every (workload, threads) point REPEAT times, the builds interleaved
# within each repeat, and prints the median ops/us of each build with its
# min-max and the median of the per-repeat ratios to the unpatched build.
#
# Environment:
#   BACKENDS  drop-in backends to compare (default "cst cna")
#   THREADS   thread counts (default "1 2 32")
#   WORKLOADS (default "quick_cache tokio")
#   REPEAT    repeats per point (default 5)
#   MILLIS    window per run, ms (default 500)
#   OUT       where to write results.json (default target/compat-bench)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
compat="$repo/crates/parking-lot-compat"
backends=${BACKENDS:-cst cna}
threads=${THREADS:-1 2 32}
workloads=${WORKLOADS:-quick_cache tokio}
repeat=${REPEAT:-5}
millis=${MILLIS:-500}
out=${OUT:-$repo/target/compat-bench}
mkdir -p "$out"
work="$out/build"

setup() { # NAME PATCHED
    local dir="$work/$1"
    # Keep the build's target directory (incremental rebuilds), nothing else.
    mkdir -p "$dir"
    find "$dir" -mindepth 1 -maxdepth 1 ! -name target -exec rm -rf {} +
    cp -r "$repo/scripts/compat-bench/Cargo.toml" "$repo/scripts/compat-bench/src" "$dir/"
    if [[ $2 == 1 ]]; then
        printf '\n[patch.crates-io]\nparking_lot = { path = "%s" }\n' "$compat" >> "$dir/Cargo.toml"
    fi
}

setup unpatched 0
(cd "$work/unpatched" && cargo generate-lockfile --quiet)
builds=(unpatched)
for b in $backends; do
    setup "$b" 1
    cp "$work/unpatched/Cargo.lock" "$work/$b/Cargo.lock"
    builds+=("$b")
done
for b in "${builds[@]}"; do
    echo "== build $b"
    if [[ $b == unpatched ]]; then
        (cd "$work/$b" && cargo build --release --quiet)
    else
        (cd "$work/$b" && PARKING_LOT_COMPAT_BACKEND=$b cargo build --release --quiet)
        tree=$(cd "$work/$b" && cargo tree --quiet -e normal -i parking_lot)
        if ! grep -q "^parking_lot v0.12.5 ($compat)" <<< "$tree" ||
            grep -q "^parking_lot v0.12.[0-9]*$" <<< "$tree"; then
            echo "!! the patch did not take effect in $work/$b:"; echo "$tree"; exit 1
        fi
    fi
done

raw="$out/raw.txt"
: > "$raw"
echo "== $repeat interleaved repeats of ${millis} ms per point; builds: ${builds[*]}"
for r in $(seq 1 "$repeat"); do
    for w in $workloads; do
        for t in $threads; do
            for b in "${builds[@]}"; do
                line=$("$work/$b/target/release/compat-bench" "$w" "$t" "$millis")
                echo "$r $b $line" >> "$raw"
            done
        done
    done
    echo "   repeat $r of $repeat done"
done

python3 - "$raw" "$out/results.json" "$(nproc)" <<'PY'
import json, statistics, sys
raw, dest, cpus = sys.argv[1], sys.argv[2], sys.argv[3]
runs = {}
for line in open(raw):
    rep, build, workload, threads, ops = line.split()
    runs.setdefault((workload, int(threads)), {}).setdefault(build, {})[int(rep)] = float(ops)
print(f"\nops/us, median of repeats (min-max); ratio = median of per-repeat ratios to unpatched parking_lot 0.12; {cpus} CPUs, one NUMA node")
rows = []
for (workload, threads), by_build in sorted(runs.items()):
    base = by_build["unpatched"]
    for build, reps in by_build.items():
        vals = list(reps.values())
        ratios = [reps[r] / base[r] for r in reps if r in base and base[r] > 0]
        row = dict(workload=workload, threads=threads, build=build,
                   median=statistics.median(vals), min=min(vals), max=max(vals),
                   ratio=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios))
        rows.append(row)
        print(f"{workload:12} {threads:3} {build:10} {row['median']:9.3f} ({row['min']:.3f}-{row['max']:.3f})"
              f"  ratio {row['ratio']:.3f} ({row['ratio_min']:.2f}-{row['ratio_max']:.2f})")
json.dump(dict(cpus=int(cpus), points=rows), open(dest, "w"), indent=1)
print(f"\nwrote {dest}")
PY
