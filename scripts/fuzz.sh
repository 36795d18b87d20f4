#!/usr/bin/env bash
# Fuzz smoke run (issue 6): each cargo-fuzz target of fuzz/ for FUZZ_SECS
# seconds (default 30), starting from its committed seeds (fuzz/seeds/<target>)
# plus the local corpus (fuzz/corpus/<target>, gitignored). Needs a nightly
# toolchain; installs cargo-fuzz if missing; otherwise says it skipped.
#
# Prints the executions per second and the total per target. Fails on any crash,
# hang (libFuzzer -timeout) or model violation, except crashes inside the system
# libhwloc itself (hwloc 2.9.0's XML import has known NULL dereferences, fixed
# upstream after 2.9): those are listed as "upstream hwloc" and do not fail.
#
# Environment: FUZZ_SECS (seconds per target), FUZZ_TARGETS (space-separated
# subset), CARGO_TARGET_DIR (default fuzz/target), LOCK_OPS_LOCK (lock_ops:
# run every input against this registry lock, e.g. hq).
set -uo pipefail
cd "$(dirname "$0")/../fuzz"

SECS=${FUZZ_SECS:-30}
TARGETS=${FUZZ_TARGETS:-"lock_ops topology_env topology_xml"}

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "fuzz: skipped (no nightly toolchain: rustup toolchain install nightly)"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz missing, installing it (cargo +nightly install cargo-fuzz)"
    if ! cargo +nightly install cargo-fuzz --locked; then
        echo "fuzz: skipped (cargo-fuzz could not be installed)"
        exit 0
    fi
fi

# One build for all targets. -O: no -Cdebug-assertions in RUSTFLAGS, so the
# release profile in fuzz/Cargo.toml decides (assertions on, except hwlocality).
if ! cargo +nightly fuzz build -O; then
    echo "fuzz: FAILED to build the fuzz targets"
    exit 1
fi
BIN_DIR="${CARGO_TARGET_DIR:-$PWD/target}/x86_64-unknown-linux-gnu/release"

# Per-target libFuzzer options.
options() {
    case "$1" in
        lock_ops) echo "-max_len=260 -timeout=20" ;;
        topology_env) echo "-max_len=256 -timeout=10" ;;
        # hwloc 2.9.0 leaks on XML import error paths (open-mpi/hwloc#781,
        # #777): leak detection off; fork mode keeps going after an hwloc crash.
        topology_xml) echo "-max_len=16384 -timeout=10 -detect_leaks=0 -fork=1 -ignore_crashes=1" ;;
    esac
}

# Prints "upstream" if the crash reproduced by $2 happens inside libhwloc.
classify() {
    local out
    out=$(ASAN_OPTIONS=detect_leaks=0 HWLOC_HIDE_ERRORS=2 timeout 60 "$BIN_DIR/$1" "$2" 2>&1)
    if grep -q "panicked at" <<<"$out"; then
        echo "ours"
    elif grep -A3 "ERROR: AddressSanitizer" <<<"$out" | grep -m1 "#0 " | grep -q "libhwloc"; then
        echo "upstream"
    elif grep -q "__assert_fail" <<<"$out" &&
        grep -E "^ *#[0-9]+ " <<<"$out" | grep -m1 -E "libhwloc|hwlocality|numa_topology" | grep -q "libhwloc"; then
        # An assert() of libhwloc itself aborted (e.g. hwloc_bitmap_sscanf in 2.9's
        # XML import): the innermost frame of hwloc or ours is hwloc's.
        echo "upstream"
    else
        echo "ours"
    fi
}

status=0
summary=()
for t in $TARGETS; do
    mkdir -p "corpus/$t" "artifacts/$t"
    # Replay the committed crashers of our own code first (topology_xml's are
    # crashes inside libhwloc 2.9 itself, kept for reference only). lock_ops'
    # inputs run 3000 times each: some failed only on a rare interleaving (a
    # hang: libFuzzer's -timeout turns it into a failure).
    if [ "$t" != topology_xml ] && [ -d "regressions/$t" ]; then
        replay=()
        [ "$t" = lock_ops ] && replay=(-runs=3000 -timeout=60)
        if ! "$BIN_DIR/$t" "${replay[@]}" regressions/"$t"/* >/dev/null 2>&1; then
            echo "$t: FAILED replaying fuzz/regressions/$t"
            summary+=("$t: FAILED replaying fuzz/regressions/$t")
            status=1
            continue
        fi
    fi
    before=$(ls "artifacts/$t" | sort)
    log=$(mktemp)
    echo
    echo "==> fuzz $t for ${SECS}s"
    # shellcheck disable=SC2046
    ASAN_OPTIONS=detect_leaks=$([ "$t" = topology_xml ] && echo 0 || echo 1) \
        HWLOC_HIDE_ERRORS=2 \
        cargo +nightly fuzz run -O "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$SECS" -print_final_stats=1 $(options "$t") >"$log" 2>&1
    rc=$?
    # Final stats (normal mode) or the last status line (fork mode).
    runs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" | tail -1)
    rate=$(grep -oE "stat::average_exec_per_sec: *[0-9]+" "$log" | grep -oE "[0-9]+$" | tail -1)
    if [ -z "$runs" ]; then
        runs=$(grep -oE "^#[0-9]+" "$log" | tail -1 | tr -d '#')
        rate=$(grep -oE "exec/s: [0-9]+" "$log" | tail -1 | grep -oE "[0-9]+")
    fi
    new=$(comm -13 <(echo "$before") <(ls "artifacts/$t" | sort) | grep -v '^$' || true)
    upstream=0
    ours=()
    for a in $new; do
        case "$a" in
            crash-* | timeout-* | oom-* | leak-*)
                if [ "$t" = topology_xml ] && [ "$(classify "$t" "artifacts/$t/$a")" = upstream ]; then
                    upstream=$((upstream + 1))
                else
                    ours+=("artifacts/$t/$a")
                fi
                ;;
        esac
    done
    if [ "$rc" -ne 0 ] && [ "$t" != topology_xml ] && [ ${#ours[@]} -eq 0 ]; then
        ours+=("(exit status $rc, see the log below)")
    fi
    line="$t: ${runs:-?} executions, ${rate:-?} exec/s"
    [ "$upstream" -gt 0 ] && line+=", $upstream crash(es) inside libhwloc 2.9 (upstream)"
    if [ ${#ours[@]} -gt 0 ]; then
        line+=", FAILED: ${ours[*]}"
        status=1
        grep -v "^hwloc\|^\s*\[\|Output of" "$log" | grep -E -A30 "panicked|ERROR|SUMMARY|violation" | head -80
        for a in "${ours[@]}"; do
            [ -f "$a" ] && echo "reproduce: (cd fuzz && cargo +nightly fuzz run -O $t $a)"
        done
    fi
    echo "$line"
    summary+=("$line")
    rm -f "$log"
done

echo
echo "fuzz summary (${SECS}s per target):"
printf '  %s\n' "${summary[@]}"
exit $status
