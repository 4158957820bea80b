#!/usr/bin/env bash
# Builds the libFuzzer harnesses of fuzz/ with clang, AddressSanitizer and UndefinedBehavior-
# Sanitizer (no LibTorch), seeds each from the repository's own files and runs it for RUNS
# executions. A finding (a crash, a sanitizer report, an exception other than cpt's one-line
# ConfigError/RuntimeError) stops the run with the input saved as WORK/<harness>/crash-*.
# Usage: bench/fuzz.sh [WORK (default /tmp/cpt-fuzz)] [RUNS (default 1000000)] [SECONDS per harness]
#   HARNESSES="paper_runs spec_json" runs only those.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/cpt-fuzz}
runs=${2:-1000000}
seconds=${3:-600}
build=$work/build
mkdir -p "$work"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$(command -v clang++-14 || command -v clang++)" \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCPT_WITH_TORCH=OFF -DCPT_BUILD_TESTS=OFF -DCPT_FUZZERS=ON >"$work/configure.log"
harnesses=${HARNESSES:-"spec_json published_runs paper_runs token_shard safetensors checkpoint_manifest tokenizer"}
cmake --build "$build" --target $(for h in $harnesses; do printf 'cpt_fuzz_%s ' "$h"; done) >"$work/build.log"

# Seeds: every JSON document of the repository's own (a selector byte first for spec_json), the
# published-runs sample, and one well-formed token shard (index length in two bytes, index, tokens).
seed() { mkdir -p "$work/$1/corpus"; }
seed spec_json
i=0
for f in examples/models/*.json examples/plans/*.json examples/tiny/plan.json \
         examples/*/train*.json hardware_profiles/gpus/*.json \
         hardware_profiles/clusters/*.json tests/data/*.json tests/data/*/config.json; do
  [ -f "$f" ] || continue
  for which in 0 1 2 3 4 5 6 7; do
    { printf "\\x$(printf %02x $which)"; cat "$f"; } >"$work/spec_json/corpus/seed_$i"
    i=$((i + 1))
  done
done
# calibrate-host's measurements (selector 7), as spec/host_measurements.h writes them.
python3 - "$work/spec_json/corpus/seed_host" <<'PY'
import json, sys
host = {"device": "cpu", "device_name": "a CPU", "dtype": "fp32", "cuda_devices": 0, "cores": 2, "threads": 1,
        "memory_bytes": 2.4e10, "copy_bytes_per_s": 1e10, "adamw_params_per_s": 1e8,
        "cross_entropy": [{"tokens": 1024, "vocab": 4096, "forward_seconds": 3e-3, "backward_seconds": 4e-3}],
        "seconds_per_dispatched_op": 5e-6, "gemm": [{"m": 128, "n": 512, "k": 512, "seconds": 1e-3}],
        "attention": [{"batch": 4, "heads": 4, "kv_heads": 2, "seq": 256, "head_dim": 64,
                       "forward_seconds": 2e-3, "backward_seconds": 5e-3}]}
open(sys.argv[1], "wb").write(b"\x07" + json.dumps(host).encode())
PY
seed published_runs
cp tests/golden/published_runs_sample.jsonl bench/data/moe_published_runs.jsonl "$work/published_runs/corpus/"
seed paper_runs
# vTrain's two files, where the shared validation data is beside the repository (a selector byte
# first: 0 the multi-node form, 1 the single-node one).
for form in multi:0 single:1; do
  f=../shared/validation/vtrain/ground_truth_${form%%:*}.csv
  if [ -f "$f" ]; then
    { printf "\\x0${form##*:}"; head -40 "$f"; } >"$work/paper_runs/corpus/seed_${form%%:*}"
  fi
done
seed token_shard
python3 - "$work/token_shard/corpus/seed" <<'PY'
import struct, sys
lengths = [3, 1, 4]
index = b"MMIDIDX\0\0" + struct.pack("<QBQQ", 1, 8, len(lengths), len(lengths)) + struct.pack(f"<{len(lengths)}i", *lengths)
tokens = struct.pack(f"<{sum(lengths)}H", *range(1, sum(lengths) + 1))
open(sys.argv[1], "wb").write(struct.pack("<H", len(index)) + index + tokens)
PY

seed safetensors
python3 - "$work/safetensors/corpus/seed" <<'PY'
import json, struct, sys
header = {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
          "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}, "__metadata__": {"format": "pt"}}
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + bytes(32))
PY
seed checkpoint_manifest
python3 - "$work/checkpoint_manifest/corpus/seed" examples/models/tiny.json examples/models/tiny_moe.json <<'PY'
import json, sys
for i, model in enumerate(sys.argv[2:]):
    manifest = {"format": "cpt-checkpoint-v1", "step": 10, "model": json.load(open(model)),
                "files": {"model.safetensors": {"bytes": 632124, "fnv1a64": "0123456789abcdef"},
                          "optimizer.safetensors": {"bytes": 1264248, "fnv1a64": "fedcba9876543210"}}}
    open(f"{sys.argv[1]}_{i}", "w").write(json.dumps(manifest))
PY
seed tokenizer
if command -v spm_train >/dev/null; then
  cat examples/models/*.json README.md >"$work/tokenizer/text"
  (cd "$work/tokenizer" && spm_train --input=text --model_prefix=corpus/seed --vocab_size=200 \
     --model_type=bpe >train.log 2>&1 && rm -f corpus/seed.vocab)
fi

for harness in $harnesses; do
  dir=$work/$harness
  start=$(date +%s)
  (cd "$dir" && "$build/bin/cpt_fuzz_$harness" -runs="$runs" -max_total_time="$seconds" -max_len=4096 -seed=1 \
     -print_final_stats=1 corpus >"$dir/log" 2>&1) || { echo "$harness: FINDING, see $dir/log"; tail -30 "$dir/log"; exit 1; }
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$')
  echo "$harness: $execs executions in $(( $(date +%s) - start )) s, no finding ($(ls "$dir/corpus" | wc -l) inputs in the corpus)"
done
