#!/usr/bin/env bash
# Packs what a GPU session needs into .device/ (git-ignored), for the device tool's `carry`:
# cpt, cpt-exec, the step bench and the executor tests, built here against the pinned torch wheel
# (a CUDA build: torch 2.11.0+cu130, the same as the H200 machine's image), and the one shared
# library they need that the image lacks (Debian's libsentencepiece). LibTorch itself is the
# image's: bench/gpu/session.sh points LD_LIBRARY_PATH at its torch/lib.
#
# usage: bench/gpu/pack.sh [BUILD_DIR]      then, with the device tool:
#   run(command="bash bench/gpu/session.sh", carry=[".device"], timeout_s=540)
set -euo pipefail
BUILD="${1:-build}"
TARGETS=(cpt cpt-exec cpt_bench_train_step cpt_tests_executor)
[ -f "$BUILD/build.ninja" ] || { echo "pack: $BUILD is not a configured build directory (run make build first)" >&2; exit 2; }
# Never a stale pack: bring the four binaries up to date with the working tree first.
cmake --build "$BUILD" --target "${TARGETS[@]}" >"$BUILD/pack-build.log" 2>&1 ||
  { echo "pack: building ${TARGETS[*]} in $BUILD failed:" >&2; tail -20 "$BUILD/pack-build.log" >&2; exit 2; }
rm -rf .device && mkdir -p .device/bin .device/lib
for b in "${TARGETS[@]}"; do
  cp "$BUILD/bin/$b" .device/bin/
  strip --strip-debug .device/bin/$b
done
for l in libsentencepiece.so.0 libsentencepiece_train.so.0; do
  cp -L "$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')" .device/lib/$l
done
git describe --always --dirty > .device/commit  # "-dirty": built from uncommitted changes
du -sh .device
