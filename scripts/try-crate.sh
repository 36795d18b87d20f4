#!/usr/bin/env bash
# Runs a published crate's tests on the parking_lot drop-in
# (crates/parking-lot-compat) and without it.
#
#   scripts/try-crate.sh NAME@VERSION [-- ARGS for cargo test]
#
# Fetches NAME@VERSION's source through cargo (a throwaway project that
# depends on it, `cargo fetch`, then the .crate from cargo's cache), makes two
# copies, adds `[patch.crates-io] parking_lot = { path = ... }` to one, shows
# `cargo tree -i parking_lot` there (the patch took effect), and runs
# `cargo test ARGS` unpatched, then patched with each backend (cst, cna).
# Prints one line per run: passed/failed/ignored counts summed over the test
# binaries, and the exit code.
#
# Environment:
#   BACKENDS      backends to run patched (default "cst cna")
#   CARGO         the cargo command (default "cargo"; e.g. "flock /tmp/cargo-build.lock cargo")
#   TRY_CRATE_DIR where to unpack (default: a new temporary directory, kept)
#   BENCH=1       also run the crate's criterion benches: unpatched (saved as
#                 criterion baseline "unpatched"), then each backend against it
#   BENCH_ARGS    arguments for `cargo bench` before `--` (e.g. "--bench benchmarks")
#   BENCH_FILTER  criterion's benchmark name filter (after `--`)
#   TESTS=0       skip the test runs (benchmarks only)
#   UNPATCHED=0   skip the unpatched test run
#   STRICT=1      exit non-zero when the patch did not take effect or a test run
#                 failed or ran no test (for CI)
set -euo pipefail

usage() { echo "usage: $0 NAME@VERSION [-- cargo test args]" >&2; exit 2; }
[[ $# -ge 1 && $1 == *@* ]] || usage
spec=$1; shift
name=${spec%@*}; version=${spec#*@}
if [[ $# -gt 0 ]]; then
    [[ $1 == -- ]] || usage
    shift
fi
test_args=("$@")

repo=$(cd "$(dirname "$0")/.." && pwd)
compat="$repo/crates/parking-lot-compat"
[[ -f $compat/Cargo.toml ]] || { echo "no $compat/Cargo.toml" >&2; exit 1; }
read -r -a cargo <<< "${CARGO:-cargo}"
backends=${BACKENDS:-cst cna}
work=${TRY_CRATE_DIR:-$(mktemp -d "/tmp/try-crate.$name.XXXX")}
mkdir -p "$work"
# One target directory for every run: what does not depend on parking_lot is built once.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$work/target}
echo "== $name@$version in $work"

# 1. The source, through cargo: a project that depends on exactly that version.
fetcher="$work/fetch"
if [[ ! -d $fetcher ]]; then
    mkdir -p "$fetcher/src"
    : > "$fetcher/src/lib.rs"
    cat > "$fetcher/Cargo.toml" <<TOML
[package]
name = "try-crate-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$name = "=$version"

[workspace]
TOML
fi
(cd "$fetcher" && "${cargo[@]}" fetch --quiet)
crate_file=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$name-$version.crate" 2>/dev/null | head -n1)
[[ -n $crate_file ]] || { echo "cargo fetch left no $name-$version.crate" >&2; exit 1; }

unpack() { # DIR
    rm -rf "$1"
    mkdir -p "$1"
    tar -xzf "$crate_file" -C "$1" --strip-components=1
    # Its own workspace, whatever directory it sits in.
    grep -q '^\[workspace\]' "$1/Cargo.toml" || printf '\n[workspace]\n' >> "$1/Cargo.toml"
}
unpack "$work/plain"
unpack "$work/patched"
# Both copies resolve the same versions: the plain copy's shipped Cargo.lock may
# pin versions below what the drop-in's dependencies need (libc, say), so the
# plain copy resolves afresh and the patched one starts from that lock file.
rm -f "$work/plain/Cargo.lock" "$work/patched/Cargo.lock"
(cd "$work/plain" && "${cargo[@]}" generate-lockfile --quiet)
cp "$work/plain/Cargo.lock" "$work/patched/Cargo.lock"
cat >> "$work/patched/Cargo.toml" <<TOML

[patch.crates-io]
parking_lot = { path = "$compat" }
TOML

# 2. The patch took effect: ours, and no registry parking_lot 0.12.
echo "== cargo tree -i parking_lot (patched)"
# With the crate's default features first; if parking_lot is optional there
# (tokio), with all of them.
tree=$(cd "$work/patched" && "${cargo[@]}" tree --quiet -e all -i parking_lot 2>"$work/tree.err") ||
    tree=$(cd "$work/patched" && "${cargo[@]}" tree --quiet -e all -i parking_lot --all-features \
        2>"$work/tree.err") || true
echo "$tree" | head -n 30
cat "$work/tree.err" >&2
failed=0
if ! grep -q "^parking_lot v0.12.5 ($compat)" <<< "$tree" ||
    grep -q "^parking_lot v0.12.[0-9]*$" <<< "$tree"; then
    echo "!! the patch did not take effect: cargo tree -i parking_lot does not show $compat alone" >&2
    failed=1
fi

# 3. The tests, unpatched and patched with each backend.
summary=()
run_tests() { # LABEL DIR [ENV...]
    local label=$1 dir=$2; shift 2
    local log="$work/test-$label.log" rc=0
    (cd "$dir" && env "$@" "${cargo[@]}" test "${test_args[@]}") > "$log" 2>&1 || rc=$?
    local counts
    counts=$(grep -E '^test result:' "$log" | awk '
        { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed;?$/) p += $(i-1);
          if ($(i) ~ /^failed;?$/) f += $(i-1); if ($(i) ~ /^ignored;?$/) g += $(i-1) } }
        END { printf "%d passed, %d failed, %d ignored", p, f, g }' || true)
    summary+=("$(printf '%-14s %s (exit %d, log %s)' "$label" "$counts" "$rc" "$log")")
    if [[ $rc -ne 0 || $counts == "0 passed"* ]]; then
        failed=1
        [[ ${STRICT:-0} != 1 ]] || tail -n 40 "$log"
    fi
    echo "${summary[-1]}"
}
if [[ ${TESTS:-1} != 0 ]]; then
    [[ ${UNPATCHED:-1} == 0 ]] || run_tests unpatched "$work/plain"
    for b in $backends; do
        run_tests "patched-$b" "$work/patched" "PARKING_LOT_COMPAT_BACKEND=$b"
    done
fi

# 4. Criterion benchmarks, when asked and the crate has them: unpatched saved as
# a baseline, then each backend compared with it (criterion's `change:` lines).
if [[ ${BENCH:-0} == 1 && -d $work/plain/benches ]]; then
    read -r -a bench_args <<< "${BENCH_ARGS:-}"
    echo "== cargo bench ${bench_args[*]} (unpatched), log $work/bench-unpatched.log"
    (cd "$work/plain" && "${cargo[@]}" bench "${bench_args[@]}" -- --save-baseline unpatched ${BENCH_FILTER:-}) \
        > "$work/bench-unpatched.log" 2>&1 || echo "!! cargo bench failed (criterion benches only)"
    for b in $backends; do
        echo "== cargo bench (patched-$b against unpatched), log $work/bench-patched-$b.log"
        (cd "$work/patched" && PARKING_LOT_COMPAT_BACKEND=$b "${cargo[@]}" bench "${bench_args[@]}" \
            -- --baseline unpatched ${BENCH_FILTER:-}) > "$work/bench-patched-$b.log" 2>&1 || echo "!! cargo bench failed"
        grep -E 'time:|change:|Performance has|No change' "$work/bench-patched-$b.log" || true
    done
fi

echo "== $name@$version, cargo test ${test_args[*]}"
[[ ${#summary[@]} -eq 0 ]] || printf '%s\n' "${summary[@]}"
if [[ ${STRICT:-0} == 1 && $failed -ne 0 ]]; then
    echo "!! $name@$version: a run failed or the patch did not take effect" >&2
    exit 1
fi
