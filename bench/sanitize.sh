#!/usr/bin/env bash
# Builds cpt without LibTorch under AddressSanitizer and UndefinedBehaviorSanitizer (clang, as
# bench/fuzz.sh) and runs every CPU test that build has: core, spec, the cost model, the planner
# and the CLI (the `cpt` binary sanitized too). Any sanitizer report fails its test: ASan aborts,
# UBSan is built without recovery. The executor (LibTorch) is not instrumented; its readers are
# fuzzed through the harnesses of fuzz/ instead.
# Usage: bench/sanitize.sh [WORK (default /tmp/cpt-sanitize)] [ctest -R filter]
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/cpt-sanitize}
filter=${2:-}
build=$work/build
mkdir -p "$work"
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$(command -v clang++-14 || command -v clang++)" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCPT_WITH_TORCH=OFF >"$work/configure.log"
start=$(date +%s)
cmake --build "$build" >"$work/build.log"
echo "sanitize: built in $(($(date +%s) - start)) s ($build)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
start=$(date +%s)
(cd "$build" && ctest -L cpu -j2 --timeout 900 ${filter:+-R "$filter"} --output-on-failure) >"$work/test.log" 2>&1 || status=$?
tail -n 4 "$work/test.log"
echo "sanitize: tests in $(($(date +%s) - start)) s; log $work/test.log"
exit "${status:-0}"
