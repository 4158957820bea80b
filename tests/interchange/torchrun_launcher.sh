#!/usr/bin/env bash
# The torchrun.sh that `cpt plan --out` writes, run by PyTorch's own torchrun (the pinned torch
# wheel's, in scripts/setup's venv) on this machine's CPU: a two-rank data-parallel plan of the
# tiny model trains end to end (torchrun's agent serves the rendezvous store; cpt's ranks join it).
# Usage: torchrun_launcher.sh CPT_BINARY PYTHON WORK_DIR   (exit 77: no torchrun beside PYTHON)
set -euo pipefail
cpt=$1
torchrun_dir=$(dirname "$2")
work=$3
[ -x "$torchrun_dir/torchrun" ] || { echo "no torchrun in $torchrun_dir (scripts/setup installs torch)"; exit 77; }
source_dir=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work"
"$cpt" plan --model tiny --gpu h100 --gpus 2 --global-batch 8 --seq-len 64 --fix dp=2,zero=0,micro_batch=2 \
  --out plan >/dev/null
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); c["steps"] = 3; c.pop("eval", None); json.dump(c, open("train.json", "w"))' \
  "$source_dir/examples/tiny/train.json"
port=$((20000 + RANDOM % 20000))
PATH="$torchrun_dir:$(dirname "$cpt"):$PATH" NNODES=1 MASTER_PORT=$port \
  ./plan/torchrun.sh train.json --out run --device cpu >log 2>&1 || { tail -20 log; exit 1; }
steps=$(wc -l <run/metrics.jsonl)
processes=$(python3 -c 'import json; print(json.load(open("run/measured.json"))["processes"])')
echo "torchrun.sh: $steps steps on $processes ranks"
[ "$steps" = 3 ] && [ "$processes" = 2 ]
