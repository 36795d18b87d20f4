#!/usr/bin/env bash
# Publishability checks (issue 13, item 3 and the "done when" of items 2 and 5):
#  1. `cargo package` for numa-topology, numa-spin, cst-mutex and numa-bench (one call, so
#     each package is verified against the others' packaged versions, as crates.io would
#     see them; `cargo install numa-bench` needs exactly this);
#  2. `cargo test --release` from each unpacked .crate, outside the workspace, with the
#     sibling crates patched in from their .crate files (they are not on crates.io yet);
#  3. a downstream crate (scripts/downstream: lock_api 0.4 + numa-spin + cst-mutex with
#     feature lock_api_04) runs generic lock_api 0.4 code over numa_spin::RawMutex,
#     cst_mutex::RawMutex and cst_mutex::RawRwLock, and its Cargo.lock holds no test-only
#     dependency (loom, shuttle and their dependencies).
# Needs no C library: the packages are built with default features (no hwloc).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
step() { printf '\n==> %s\n' "$*"; }

crates=(numa-topology numa-spin cst-mutex numa-lock-registry numa-bench)
version=$(cargo metadata --no-deps --format-version 1 |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"]=="numa-spin"))')

# `cargo package` verifies each package against its siblings' .crate files through
# a local overlay registry whose sources cargo unpacks under
# $CARGO_HOME/registry/src/-<hash>/ and never unpacks again for the same name and
# version: sources left there by an earlier run (an older commit, same version
# number) would be compiled instead of this tree's. Remove them first.
cargo_home=${CARGO_HOME:-$HOME/.cargo}
for c in "${crates[@]}"; do
    rm -rf "$cargo_home"/registry/src/-*/"$c-$version"
done

step "cargo package ${crates[*]} (verifies that each .crate builds)"
pkg_args=()
for c in "${crates[@]}"; do pkg_args+=(-p "$c"); done
cargo package --allow-dirty "${pkg_args[@]}"

step "every package has its README, LICENSE files and CHANGELOG"
for c in "${crates[@]}"; do
    list=$(tar -tzf "target/package/$c-$version.crate")
    for f in README.md LICENSE-MIT LICENSE-APACHE CHANGELOG.md; do
        grep -qx "$c-$version/$f" <<<"$list" || { echo "$c: $f missing from the package"; exit 1; }
    done
    grep -q '^readme = "README.md"' <(tar -xzOf "target/package/$c-$version.crate" "$c-$version/Cargo.toml") ||
        { echo "$c: no readme in the packaged manifest"; exit 1; }
done
echo "all present"

step "cargo test --release from each unpacked package"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
patch=()
for c in "${crates[@]}"; do
    tar -xzf "target/package/$c-$version.crate" -C "$work"
    patch+=(--config "patch.crates-io.$c.path='$work/$c-$version'")
done
# The archives' files keep the mtimes they were packaged with, and the test
# binaries' metadata does not depend on the unpacked path: in a target
# directory kept from an earlier run, cargo would find those binaries fresh
# and run them against that run's (deleted) temporary directory. Sources
# newer than any output make it build them anew.
find "$work" -type f -exec touch {} +
for c in "${crates[@]}"; do
    echo "--- $c"
    (cd "$work/$c-$version" &&
        CARGO_TARGET_DIR="$root/target/package-test" cargo test --release "${patch[@]}")
done

step "downstream crate on lock_api 0.4 (scripts/downstream)"
down=scripts/downstream
rm -f "$down/Cargo.lock"
CARGO_TARGET_DIR="$root/target/downstream" cargo test --release --manifest-path "$down/Cargo.toml"
bad=$(grep -E '^name = "(loom|shuttle|generator|scoped-tls|tracing|tracing-subscriber)"' "$down/Cargo.lock" || true)
if [ -n "$bad" ]; then
    echo "test-only dependencies in a downstream Cargo.lock:"
    echo "$bad"
    exit 1
fi
echo "downstream Cargo.lock: $(grep -c '^name = ' "$down/Cargo.lock") packages, no loom/shuttle"

echo
echo "package-check: all checks passed"
