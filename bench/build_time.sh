#!/usr/bin/env bash
# bench/build_time.sh: the build-speed targets of docs/benchmarks.md, measured on a fresh clone.
#   1. scripts/setup when everything is installed (idempotence: must take seconds)
#   2. configure + clean build with an empty ccache (the worst case of a new machine; < 20 min)
#   3. configure + clean build with a warm ccache (CI on a machine that built before)
#   4. no-op rebuild (< 10 s)
#   5. the CPU test suite (ctest -L cpu)
# Usage: bench/build_time.sh [--keep-ccache]   (without the flag it empties ccache: it is slow)
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/cpt"
cd "$work/cpt"
now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.1f}')"; }

t0=$(now); scripts/setup >/dev/null; t1=$(now)
echo "setup (already installed):        $(elapsed "$t0" "$t1") s"

if [ "${1:-}" != "--keep-ccache" ]; then ccache -C >/dev/null; fi
t0=$(now); scripts/configure build >/dev/null 2>&1; cmake --build build >/dev/null; t1=$(now)
echo "configure + clean build (ccache $([ "${1:-}" = "--keep-ccache" ] && echo warm || echo cold)): $(elapsed "$t0" "$t1") s"

rm -rf build
t0=$(now); scripts/configure build >/dev/null 2>&1; cmake --build build >/dev/null; t1=$(now)
echo "configure + clean build (ccache warm): $(elapsed "$t0" "$t1") s"

t0=$(now); cmake --build build >/dev/null; t1=$(now)
echo "no-op rebuild:                    $(elapsed "$t0" "$t1") s"

t0=$(now); (cd build && ctest -L cpu >/dev/null); t1=$(now)
echo "ctest -L cpu:                     $(elapsed "$t0" "$t1") s"
