#!/usr/bin/env bash
# Real programs from Debian packages on the numa-preload interposer, under every
# NUMA_LOCK value: sysbench mutex, LevelDB readrandom (a small driver built here
# against libleveldb-dev), kccachetest wicked. Table, JSON and one SVG plot per
# program (ratio to pthread against threads, `numa-bench plot-apps`) in target/apps/.
#
#   scripts/apps.sh                      # threads 1,2,4,8,16,32; 3 repeats
#   scripts/apps.sh --repeats 5 --threads 2,16
#   scripts/apps.sh --quick              # one short point per program and lock (CI)
#
# Other options are scripts/apps.py's (--help). Installs missing packages when
# root (apt-get), else prints the apt-get line and stops.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(sysbench kyotocabinet-utils libleveldb-dev g++ python3)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
    else
        echo "missing packages; run: sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi

out=target/apps
args=()
if [ "${1:-}" = "--quick" ]; then
    shift
    out=target/apps-quick
    args=(--threads 2 --repeats 1 --sb-locks 2000000 --kc-records 200000
          --ldb-keys 100000 --ldb-seconds 0.3 --check-stats --timeout 60)
fi

cargo build --release -p numa-preload
lib="$PWD/target/release/libnuma_preload.so"
mkdir -p "$out"
g++ -O2 -std=c++17 -pthread -o "$out/leveldb_readrandom" \
    crates/numa-preload/apps/leveldb_readrandom.cc -lleveldb

rc=0
python3 scripts/apps.py --lib "$lib" --ldb-bin "$out/leveldb_readrandom" --out "$out" "${args[@]}" "$@" || rc=$?
# The CNA-paper-shaped plots (one SVG per program) beside results.json.
if [ -f "$out/results.json" ]; then
    cargo run --release -q -p numa-bench -- plot-apps "$out/results.json" || rc=$?
fi
exit "$rc"
