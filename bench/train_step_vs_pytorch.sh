#!/usr/bin/env bash
# cpt's training step vs the same step in PyTorch eager from Python: the
# ~25M-parameter cpt-25m model, same threads, batch and sequence, random tokens. Runs each
# implementation REPEATS times, alternating, and reports the median tokens/s and the ratio.
#
# usage: bench/train_step_vs_pytorch.sh [BUILD_DIR] [THREADS] [REPEATS]
set -euo pipefail
BUILD="${1:-build}"
THREADS="${2:-$(nproc)}"
REPEATS="${3:-3}"
PY="${CPT_PYTHON:-$HOME/.cache/cpt/venv/bin/python}"
ARGS=(--batch 4 --seq 512 --steps 10 --warmup 2 --threads "$THREADS")
cpt_runs=(); py_runs=()
for _ in $(seq "$REPEATS"); do
  cpt_runs+=("$("$BUILD/bin/cpt_bench_train_step" --model cpt-25m "${ARGS[@]}" --json)")
  py_runs+=("$("$PY" "$(dirname "$0")/pytorch_train_step.py" "${ARGS[@]}" --json)")
done
printf '%s\n' "${cpt_runs[@]}" "${py_runs[@]}"
python3 - "$REPEATS" "${cpt_runs[@]}" "${py_runs[@]}" <<'PYEOF'
import json, statistics, sys
n = int(sys.argv[1]); rows = [json.loads(x) for x in sys.argv[2:]]
cpt = statistics.median(r["tokens_per_s"] for r in rows[:n])
py = statistics.median(r["tokens_per_s"] for r in rows[n:])
assert rows[0]["params"] == rows[n]["params"], "the two models differ in size"
print(f"median tokens/s: cpt {cpt:.0f}, pytorch {py:.0f}; cpt / pytorch = {cpt / py:.3f} "
      f"({rows[0]['params']} parameters, {rows[0]['threads']} threads, batch {rows[0]['batch']} x {rows[0]['seq']})")
PYEOF
