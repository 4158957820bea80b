#!/usr/bin/env bash
# The GPU checks of issues #7 and #9 in one run on the device machine (one H200, the image's
# PyTorch 2.11.0+cu130, no network), from the repository root with .device/ carried (made here by
# bench/gpu/pack.sh). About 6 minutes; each step is independent and logged, a failed one does not
# stop the others. Writes at most 8 files to $OUT (the device tool's folder; ./gpu-out elsewhere):
#   log.txt               everything printed, step by step
#   calibrate.report.json `cpt calibrate --device cuda`: measured curves beside the catalog H200's
#   h200.json             the calibrated profile (cpt plan --gpu local with CPT_LOCAL_PROFILE)
#   mfu.jsonl             Llama 3.2 1B bf16 training step: cpt vs PyTorch eager, alternating, twice
#   compare-1b.json       `cpt train --device cuda` of Llama 3.2 1B planned on the calibrated profile,
#                         `cpt compare`: step time, activation peak, model state
#   measured-1b.json      that run's measured.json
# Back here: copy the files, then `cpt calibrate --device cuda --measurements calibrate.report.json`
# refits the profile, and docs/benchmarks.md and docs/calibration.md take the numbers.
set -uo pipefail
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
ROOT="$PWD"
B="$ROOT/.device/bin"
TORCH_LIB=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH="$ROOT/.device/lib:$TORCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PEAK_TFLOPS=989.4  # H200 dense bf16, the catalog's datasheet figure (hardware_profiles/gpus/h200_sxm_141gb.json)
WORK=$(mktemp -d)
step() { echo; echo "=== $* ($(date +%T))"; }

step "machine"
echo "packed from commit $(cat .device/commit 2>/dev/null)"
nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
python3 -c 'import torch; print("python torch", torch.__version__, torch.version.cuda)'
timeout 60 "$B/cpt-exec" info || echo "FAILED: cpt-exec info"

step "executor tests that touch CUDA"
timeout 120 "$B/cpt_tests_executor" --gtest_filter='RouteByDevice.*:*.Cuda*:CudaDeviceIndex.*' || echo "FAILED: tests"

step "calibrate --device cuda"
timeout 240 "$B/cpt" calibrate --device cuda --seconds 90 --out "$WORK/h200.json" \
  && cp "$WORK/h200.json" "$OUT/h200.json" && cp "$WORK/h200.report.json" "$OUT/calibrate.report.json" \
  || echo "FAILED: calibrate"

step "MFU: Llama 3.2 1B, bf16, batch 8 x 2048, cpt vs PyTorch eager"
for i in 1 2; do
  timeout 150 "$B/cpt_bench_train_step" --model llama3.2-1b --device cuda --batch 8 --seq 2048 --steps 10 --warmup 3 \
    --peak-tflops $PEAK_TFLOPS --json | tee -a "$OUT/mfu.jsonl" || echo "FAILED: cpt step $i"
  timeout 150 python3 bench/pytorch_train_step.py --device cuda --layers 16 --hidden 2048 --heads 32 --kv-heads 8 \
    --ffn 8192 --vocab 128256 --tied --batch 8 --seq 2048 --steps 10 --warmup 3 --peak-tflops $PEAK_TFLOPS --json \
    | tee -a "$OUT/mfu.jsonl" || echo "FAILED: pytorch step $i"
done

step "train Llama 3.2 1B on the GPU, planned on the calibrated profile; compare (issues #7, #9)"
SRC=$(python3 -c 'import json, os; print(os.path.dirname(os.path.dirname(json.__file__)))')
cd "$WORK"
"$B/cpt" data train-tokenizer "$SRC/asyncio" "$SRC/email" --ext .py --vocab-size 4000 --out tok >/dev/null \
  && "$B/cpt" data prepare "$SRC/asyncio" "$SRC/email" "$SRC/json" --ext .py --tokenizer tok.model --out data >/dev/null \
  || echo "FAILED: data"
step "the GPU trains as the CPU does: a small model, 30 steps, bf16 on CUDA (none and full recompute) vs fp32 on CPU"
python3 - <<'PY'
import json
json.dump({"name": "small", "layers": 4, "hidden": 256, "heads": 8, "kv_heads": 2, "ffn_hidden": 704, "vocab": 4000,
           "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "tied_embeddings": False, "max_seq_len": 512},
          open("small.json", "w"))
PY
for r in none full; do
  "$B/cpt" plan --model small.json --gpu h200 --gpus 1 --global-batch 16 --seq-len 256 \
    --fix micro_batch=8,recompute=$r --for-executor --out plan-small-$r >/dev/null || echo "FAILED: plan small $r"
done
for dev in cpu cuda; do
  cat > small-$dev.json <<JSON
{"data": [{"name": "py", "path": "data"}], "steps": 30, "seed": 3, "log_interval_steps": 10, "device": "$dev",
 "lr": {"schedule": "cosine", "peak": 0.002, "warmup_steps": 5}}
JSON
done
timeout 120 "$B/cpt" train --plan plan-small-none/plan.json --config small-cpu.json --out small-cpu >/dev/null || echo "FAILED: small cpu"
timeout 120 "$B/cpt" train --plan plan-small-none/plan.json --config small-cuda.json --out small-cuda >/dev/null || echo "FAILED: small cuda"
timeout 120 "$B/cpt" train --plan plan-small-full/plan.json --config small-cuda.json --out small-cuda-full >/dev/null \
  || echo "FAILED: small cuda full recompute"
python3 - <<'PY'
import json
def losses(d):
    try:
        return [json.loads(l)["loss"] for l in open(d + "/metrics.jsonl") if '"loss"' in l]
    except OSError:
        return []
cpu, cuda, full = losses("small-cpu"), losses("small-cuda"), losses("small-cuda-full")
print("losses cpu  ", [round(x, 4) for x in cpu[::5]])
print("losses cuda ", [round(x, 4) for x in cuda[::5]])
print("losses cuda full recompute", [round(x, 4) for x in full[::5]])
if cpu and cuda and full:
    rel = lambda a, b: max(abs(x - y) / abs(y) for x, y in zip(a, b))
    print("max relative difference, cuda bf16 vs cpu fp32: %.4f (expect < 0.03)" % rel(cuda, cpu))
    print("max relative difference, cuda full recompute vs none: %.5f (expect < 0.01)" % rel(full, cuda))
PY

cat > train.json <<JSON
{"data": [{"name": "py", "path": "data"}], "steps": 12, "seed": 1, "log_interval_steps": 4, "device": "cuda"}
JSON
export CPT_LOCAL_PROFILE="$WORK/h200.json"
[ -f h200.json ] || export CPT_LOCAL_PROFILE=""  # calibration failed: plan on the catalog's H200 instead
GPU=local; [ -n "$CPT_LOCAL_PROFILE" ] || GPU=h200
"$B/cpt" plan --model llama3.2-1b --gpu $GPU --gpus 1 --global-batch 8 --seq-len 2048 --fix micro_batch=4 --for-executor --out plan-1b \
  && timeout 240 "$B/cpt" train --plan plan-1b/plan.json --config train.json --out run-1b \
  && cp run-1b/measured.json "$OUT/measured-1b.json" \
  && "$B/cpt" compare run-1b --log "$WORK/fidelity.jsonl" \
  && "$B/cpt" compare run-1b --json --log "$WORK/fidelity.jsonl" > "$OUT/compare-1b.json" \
  || echo "FAILED: train/compare"
cd "$ROOT"
step "done"
ls -la "$OUT"
