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
rm -rf .device && mkdir -p .device/bin .device/lib
for b in cpt cpt-exec cpt_bench_train_step cpt_tests_executor; do
  [ -x "$BUILD/bin/$b" ] || { echo "pack: $BUILD/bin/$b missing (build first)" >&2; exit 2; }
  cp "$BUILD/bin/$b" .device/bin/
  strip --strip-debug .device/bin/$b
done
for l in libsentencepiece.so.0 libsentencepiece_train.so.0; do
  cp -L "$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')" .device/lib/$l
done
git rev-parse HEAD > .device/commit
du -sh .device
