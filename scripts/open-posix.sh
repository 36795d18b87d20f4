#!/usr/bin/env bash
# LTP's Open POSIX conformance tests of pthread_mutex*, pthread_cond* and
# pthread_rwlock* (with their attribute objects), run plainly (glibc) and under
# numa-preload for every NUMA_LOCK value, with a per-test timeout; prints a
# table of the tests that did not pass everywhere and a per-column summary.
#
# Usage: scripts/open-posix.sh [LTP_CHECKOUT]   (or LTP_DIR=...)
#   The LTP checkout (git clone https://github.com/linux-test-project/ltp) is
#   an argument because CI machines cannot fetch it.
# Environment:
#   LTP_DIR       LTP checkout (if no argument)
#   OPTS_TIMEOUT  seconds per test run (default 30)
#   OPTS_MODES    columns (default: "plain pthread cna queued hq cst")
#   OPTS_FILTER   extended regex on test names (default: all 179)
#   PRELOAD_LIB   the interposer (default: the shipped build, made with cargo in
#                 target/preload-shipped; the corpus test's target/preload-test has test hooks)
#   OPTS_OUT      output directory (default target/open-posix): bin/, logs/, results.tsv
# Exit codes of the tests (posixtest.h): 0 PASS, 1 FAIL, 2 UNRESOLVED,
# 4 UNSUPPORTED, 5 UNTESTED; 124 here means the timeout killed it.
set -euo pipefail
cd "$(dirname "$0")/.."

ltp=${1:-${LTP_DIR:-}}
if [[ -z "$ltp" || ! -d "$ltp/testcases/open_posix_testsuite" ]]; then
    echo "usage: $0 LTP_CHECKOUT (or LTP_DIR=...): a checkout of linux-test-project/ltp" >&2
    exit 2
fi
ops="$ltp/testcases/open_posix_testsuite"
timeout_s=${OPTS_TIMEOUT:-30}
modes=${OPTS_MODES:-"plain pthread cna queued hq cst"}
filter=${OPTS_FILTER:-.}
out=${OPTS_OUT:-target/open-posix}
mkdir -p "$out/bin" "$out/logs"
out=$(realpath "$out")

if [[ -z "${PRELOAD_LIB:-}" ]]; then
    nice -n 10 cargo build --release -p numa-preload -j1 --target-dir target/preload-shipped >&2
    PRELOAD_LIB=$PWD/target/preload-shipped/release/libnuma_preload.so
fi
test -f "$PRELOAD_LIB" || { echo "no $PRELOAD_LIB" >&2; exit 2; }

# The tests: every N-M.c under the interfaces' directories.
# (Not the speculative/ subdirectories: behaviour POSIX leaves open.)
mapfile -t srcs < <(find "$ops/conformance/interfaces" -mindepth 2 -maxdepth 2 \
    \( -path '*/pthread_mutex*/*' -o -path '*/pthread_cond*/*' -o -path '*/pthread_rwlock*/*' \) \
    -name '[0-9]*-[0-9]*.c' | sort -V)
# Newer suites name the tests' entry test_main and link lib/common.c's main.
common=
if [[ -f "$ops/lib/common.c" ]] && grep -q test_main "$ops/lib/common.c"; then
    common="$ops/lib/common.c"
fi
names=()
for src in "${srcs[@]}"; do
    dir=$(basename "$(dirname "$src")")
    name="$dir/$(basename "$src" .c)"
    [[ "$name" =~ $filter ]] || continue
    names+=("$name")
    bin="$out/bin/${name//\//.}"
    if [[ ! -x "$bin" || "$src" -nt "$bin" ]]; then
        libs=$(cat "$(dirname "$src")/LDLIBS" 2>/dev/null || true)
        # The suite's own flags (include/mk/config.mk.in), -w: its warnings are not ours.
        # shellcheck disable=SC2086
        if ! nice -n 10 cc -std=c99 -D_POSIX_C_SOURCE=200809L -D_XOPEN_SOURCE=700 -w -O2 \
            -I "$ops/include" -I "$(dirname "$src")" -o "$bin" "$src" $common -pthread $libs -lrt 2>"$out/logs/${name//\//.}.cc"; then
            echo "build failed: $name (see $out/logs)" >&2
            rm -f "$bin"
        fi
    fi
done

verdict() {
    case $1 in
    0) echo PASS ;; 1) echo FAIL ;; 2) echo UNRESOLVED ;; 4) echo UNSUPPORTED ;;
    5) echo UNTESTED ;; 124) echo TIMEOUT ;; nobuild) echo NOBUILD ;;
    *) if (($1 > 128)); then echo "SIG$(kill -l $(($1 - 128)) 2>/dev/null || echo $(($1 - 128)))"; else echo "EXIT$1"; fi ;;
    esac
}

results="$out/results.tsv"
printf 'test\t%s\n' "${modes// /$'\t'}" >"$results"
for name in "${names[@]}"; do
    bin="$out/bin/${name//\//.}"
    row="$name"
    for mode in $modes; do
        log="$out/logs/${name//\//.}.$mode"
        if [[ ! -x "$bin" ]]; then
            rc=nobuild
        else
            # Each test in its own directory (some create files), with a
            # clean environment but for the preload.
            wd=$(mktemp -d)
            binabs=$(realpath "$bin")
            set +e
            if [[ $mode == plain ]]; then
                (cd "$wd" && env -i PATH=/usr/bin:/bin timeout -k 5 "$timeout_s" "$binabs" >"$log" 2>&1) 2>/dev/null
            else
                (cd "$wd" && env -i PATH=/usr/bin:/bin LD_PRELOAD="$PRELOAD_LIB" NUMA_LOCK="$mode" \
                    timeout -k 5 "$timeout_s" "$binabs" >"$log" 2>&1) 2>/dev/null
            fi
            rc=$?
            set -e
            rm -rf "$wd"
        fi
        row+=$'\t'$(verdict "$rc")
    done
    printf '%s\n' "$row" >>"$results"
    printf '%s\n' "$row" | tr '\t' ' ' >&2
done

# The table: tests that did not pass in every column, then the summary.
python3 - "$results" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
head, rows = rows[0], rows[1:]
print("| " + " | ".join(head) + " |")
print("|" + " --- |" * len(head))
for r in rows:
    if any(v != "PASS" for v in r[1:]):
        print("| " + " | ".join(r) + " |")
print("| passed (of %d) | " % len(rows)
      + " | ".join(str(sum(r[i] == "PASS" for r in rows)) for i in range(1, len(head))) + " |")
EOF
echo "full results: $results; logs: $out/logs" >&2
