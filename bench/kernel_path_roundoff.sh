#!/usr/bin/env bash
# How far one training moves under round-off alone, against how far the layouts move: the data
# behind the layout-equivalence tests' tolerance (tests/integration/distributed_train_test.cpp,
# expect_same_run; docs/benchmarks.md, "Layouts against one process"). Trains the tests' tiny and
# tiny4 runs (20 steps) on each of LibTorch's CPU kernel paths (ATEN_CPU_CAPABILITY avx512, avx2,
# default: 16, 8 and 1 lanes per sum) and three four-rank layouts on each, then prints per pair the
# worst element over the largest weight (the old test's measure) and the largest per-tensor norm of
# the difference over the norm (the test's measure). On a CPU without AVX-512, avx512 runs as avx2.
#
# usage: bench/kernel_path_roundoff.sh [BUILD_DIR] [WORK_DIR]   (about 90 s on 2 cores)
set -euo pipefail
BUILD="$(cd "${1:-build}" && pwd)"
WORK="${2:-$(mktemp -d)}"
CPT="$BUILD/bin/cpt"
PY="${CPT_DEPS_DIR:-$HOME/.cache/cpt}/venv/bin/python"  # numpy comes with scripts/setup's venv
mkdir -p "$WORK" && cd "$WORK"
SRC=$(python3 -c 'import json, os; print(os.path.dirname(json.__file__))')
[ -f tok.model ] || "$CPT" data train-tokenizer "$SRC" --ext .py --vocab-size 512 --out tok >/dev/null
[ -d data ] || "$CPT" data prepare "$SRC" --ext .py --tokenizer tok.model --out data >/dev/null
cat > train.json <<'JSON'
{"data": [{"name": "py", "path": "data"}], "steps": 20,
 "lr": {"schedule": "cosine", "peak": 0.003, "warmup_steps": 4}, "seed": 5, "threads": 1,
 "dp_bucket_mib": 0.1, "log_interval_steps": 0}
JSON
cat > tiny4.json <<'JSON'
{"name": "tiny4", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 176, "vocab": 515,
 "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "tied_embeddings": false, "max_seq_len": 128}
JSON
plan() { "$CPT" plan --model "$2" --gpu h100 --gpus "$4" --global-batch 8 --seq-len 64 --fix "$3" --out "$1" >/dev/null; }
plan single tiny micro_batch=2 1
plan single4 "$WORK/tiny4.json" micro_batch=2 1
plan tp2 tiny tp=2,micro_batch=2 2
plan tp2-zero2-dp2 "$WORK/tiny4.json" tp=2,dp=2,zero=2,offload=none,micro_batch=2 4
plan pp2-tp2-sp "$WORK/tiny4.json" pp=2,tp=2,sequence_parallel=true,schedule=1f1b,micro_batch=2 4
plan zero3-dp2-tp2-full "$WORK/tiny4.json" dp=2,tp=2,zero=3,offload=none,recompute=full,micro_batch=2 4
for kernels in avx512 avx2 default; do
  for layout in single:1 single4:1 tp2:2 tp2-zero2-dp2:4 pp2-tp2-sp:4 zero3-dp2-tp2-full:4; do
    name=${layout%:*} procs=${layout#*:}
    rm -rf "run-$kernels-$name"
    ATEN_CPU_CAPABILITY=$kernels "$CPT" train --plan "$name/plan.json" --config train.json --out "run-$kernels-$name" \
      --nproc-per-node "$procs" >/dev/null 2>&1
  done
done
"$PY" - <<'PY'
import json, struct
import numpy as np

def weights(run):
    raw = open(run + "/checkpoints/step_00000020/model.safetensors", "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32).astype(np.float64)
            for k, v in header.items() if k != "__metadata__"}

def measures(a, b):
    a, b = weights(a), weights(b)
    worst = max(np.abs(a[k] - b[k]).max() / np.abs(a[k]).max() for k in a)
    norm = max(np.linalg.norm(a[k] - b[k]) / np.linalg.norm(a[k]) for k in a)
    return worst, norm

print("%-44s %14s %14s" % ("pair", "worst element", "norm"))
for ref in ["single", "single4"]:
    for x, y in [("avx512", "avx2"), ("avx512", "default"), ("avx2", "default")]:
        print("%-44s %14.2e %14.2e" % ((ref + " " + x + " vs " + y,) + measures("run-%s-%s" % (x, ref), "run-%s-%s" % (y, ref))))
for ref, layout in [("single", "tp2"), ("single4", "tp2-zero2-dp2"), ("single4", "pp2-tp2-sp"), ("single4", "zero3-dp2-tp2-full")]:
    for kernels in ["avx512", "avx2", "default"]:
        print("%-44s %14.2e %14.2e" % ((layout + " vs " + ref + " on " + kernels,) +
                                       measures("run-%s-%s" % (kernels, ref), "run-%s-%s" % (kernels, layout))))
PY
