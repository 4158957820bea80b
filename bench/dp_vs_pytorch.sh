#!/usr/bin/env bash
# cpt's data parallelism (DP2 with ZeRO-0, ZeRO-2 and ZeRO-3) vs PyTorch's DDP and FSDP2 (torchrun,
# Gloo) on the CPU: cpt-25m, 2 ranks of 1 thread, 4 × 512 tokens per rank per
# step. cpt trains real text (the Python standard library, a 4,000-token tokenizer), PyTorch random
# tokens of a 16,000 vocabulary: the work per step is the same (the model's vocabulary is 16,000 in
# both). Prints tokens/s and, for cpt, the share of the step its ranks were blocked in dp
# communication (measured.json step_time_breakdown_s).
#
# usage: bench/dp_vs_pytorch.sh [BUILD_DIR] [WORK_DIR] [STEPS]
set -euo pipefail
BUILD="$(cd "${1:-build}" && pwd)"
WORK="${2:-$(mktemp -d)}"
STEPS="${3:-8}"
PY="${CPT_PYTHON:-$HOME/.cache/cpt/venv/bin/python}"
TORCHRUN="$(dirname "$PY")/torchrun"
HERE="$(cd "$(dirname "$0")" && pwd)"
CPT="$BUILD/bin/cpt"
mkdir -p "$WORK" && cd "$WORK"
SRC=$(python3 -c 'import json, os; print(os.path.dirname(os.path.dirname(json.__file__)))')
[ -f tok.model ] || "$CPT" data train-tokenizer "$SRC" --ext .py --vocab-size 4000 --out tok >/dev/null 2>&1
[ -d data ] || "$CPT" data prepare "$SRC/asyncio" "$SRC/email" "$SRC/json" --ext .py --tokenizer tok.model --out data >/dev/null 2>&1
cat > train.json <<JSON
{"data": [{"name": "py", "path": "data"}], "steps": $STEPS, "seed": 1, "threads": 1, "log_interval_steps": 0}
JSON
printf '%-22s %12s %14s\n' run tokens/s dp_comm_share
for zero in 0 2 3; do
  "$CPT" plan --model cpt-25m --gpu h100 --gpus 2 --global-batch 8 --seq-len 512 \
    --fix "dp=2,zero=$zero,offload=none,micro_batch=4,recompute=none" --out "plan-z$zero" >/dev/null
  rm -rf "run-z$zero"
  "$CPT" train --plan "plan-z$zero/plan.json" --config train.json --out "run-z$zero" --nproc-per-node 2 >/dev/null 2>&1
  python3 - "run-z$zero/measured.json" "cpt dp2 zero$zero" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
share = m["ranks"][0]["step_time_breakdown_s"]["dp_comm"] / m["step_time_s"]
print("%-22s %12.0f %13.1f%%" % (sys.argv[2], m["tokens_per_s"], 100 * share))
PY
done
for mode in ddp fsdp-grad-op fsdp-full; do
  "$TORCHRUN" --nproc-per-node 2 "$HERE/pytorch_dp_step.py" --mode "$mode" --steps "$STEPS" --json 2>/dev/null |
    python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("%-22s %12.0f %14s" % ("pytorch " + r["mode"], r["tokens_per_s"], "-"))'
done
