#!/usr/bin/env bash
# Continual pre-training: what reduces forgetting, and at what cost.
#
# A tiny LLaMA (cpt's "tiny", 158k parameters) is pre-trained on English text (the copyright files
# of Debian packages d-h), then continually pre-trained on Python source (the standard library)
# for the same number of steps under each mitigation: none, replay of 5% and 25% English, KL
# distillation against the base (λ 0.1), EWC (λ 1000), replay 25% + KL. Forgetting = relative
# increase of held-out English perplexity (copyright files p-z); adaptation = relative decrease of
# held-out Python perplexity (json, html, wsgiref, tomllib). Everything is on the machine after
# scripts/setup; nothing is committed. Writes OUT/results.json, OUT/results.md and OUT/continual.svg,
# and OUT/forecast.md: `cpt forecast` fitted to the first third of the runs, against their ends.
#
# usage: bench/continual_experiment.sh [BUILD_DIR] [OUT_DIR] [CONTINUAL_STEPS]
set -euo pipefail
BUILD="$(cd "${1:-build}" && pwd)"
OUT="${2:-runs/continual-experiment}"
STEPS="${3:-300}"
CPT="$BUILD/bin/cpt"
SRC="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"; cd "$OUT"
PY=$(ls -d /usr/lib/python3.* | grep -E 'python3\.[0-9]+$' | head -1)

json_list() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@"; }
english_train=$(json_list /usr/share/doc/[d-h]*/copyright)
english_heldout=$(json_list /usr/share/doc/[p-z]*/copyright)
code_train=$(json_list "$PY"/asyncio "$PY"/email "$PY"/http "$PY"/logging "$PY"/multiprocessing "$PY"/unittest "$PY"/xml "$PY"/importlib "$PY"/urllib "$PY"/concurrent)
code_heldout=$(json_list "$PY"/json "$PY"/html "$PY"/wsgiref "$PY"/tomllib)

# One tokenizer for both domains (so that perplexities compare across runs).
if [ ! -f tok.model ]; then
  "$CPT" data train-tokenizer /usr/share/doc "$PY"/asyncio "$PY"/email --ext copyright --ext .py --vocab-size 512 --out tok >/dev/null
fi
"$CPT" plan --model tiny --gpu h100 --gpus 1 --global-batch 16 --seq-len 128 --fix micro_batch=16 --out plan >/dev/null

evals="[{\"name\": \"english-heldout\", \"sources\": $english_heldout, \"sequences\": 256},
        {\"name\": \"python-heldout\", \"sources\": $code_heldout, \"extensions\": [\".py\"], \"sequences\": 256}]"

# 1. The base model: English only.
if [ ! -d base/checkpoints ]; then
  cat > base.json <<JSON
{"tokenizer": {"model": "$OUT/tok.model"}, "data": [{"name": "english", "sources": $english_train}],
 "eval": $evals, "steps": 800, "lr": {"schedule": "cosine", "peak": 0.003, "warmup_steps": 40},
 "seed": 1, "log_interval_steps": 0}
JSON
  "$CPT" train --plan plan/plan.json --config base.json --out base >/dev/null
fi
BASE=$(ls -d "$OUT"/base/checkpoints/step_* | tail -1)

# 2. Continual runs on Python, equal steps, re-warmed to a lower peak.
run() {  # name, data sets JSON, extra keys[, steps]
  local name=$1 data=$2 extra=$3 steps=${4:-$STEPS}
  local every=$(( steps / 30 > 0 ? steps / 30 : 1 ))  # 30 evaluations a run: the forecast's curves
  cat > "$name.json" <<JSON
{"tokenizer": {"model": "$OUT/tok.model"}, "init_from": "$BASE", "data": $data, "eval": $evals,
 "steps": $steps, "lr": {"schedule": "cosine", "peak": 0.001, "warmup_steps": 10, "min_ratio": 0.1},
 "eval_interval_steps": $every, "eval_at_start": true, "seed": 2, "log_interval_steps": 0 $extra}
JSON
  rm -rf "$name"
  "$CPT" train --plan plan/plan.json --config "$name.json" --out "$name" >/dev/null
}
code="{\"name\": \"python\", \"sources\": $code_train, \"extensions\": [\".py\"]"
english="{\"name\": \"english-replay\", \"sources\": $english_train"
run none        "[$code}]" ""
run replay5     "[$code, \"weight\": 0.95}, $english, \"weight\": 0.05}]" ""
run replay25    "[$code, \"weight\": 0.75}, $english, \"weight\": 0.25}]" ""
run kl          "[$code}]" ', "distill": {"lambda": 0.1}'
run ewc         "[$code}]" ", \"ewc\": {\"lambda\": 1000, \"data\": {\"name\": \"english-fisher\", \"sources\": $english_train}, \"sequences\": 64}"
run replay25_kl "[$code, \"weight\": 0.75}, $english, \"weight\": 0.25}]" ', "distill": {"lambda": 0.1}'

# Short pilots: the same recipe run to the end of a schedule a third as long (no mitigation, 25%
# replay), for the forecast of the full runs below.
PILOT_STEPS=$(( STEPS / 3 ))
run pilot_none      "[$code}]" "" "$PILOT_STEPS"
run pilot_replay25  "[$code, \"weight\": 0.75}, $english, \"weight\": 0.25}]" "" "$PILOT_STEPS"

# 3. The table and the chart.
python3 - "$OUT" "$STEPS" <<'PY'
import json, math, sys, os
out, steps = sys.argv[1], int(sys.argv[2])
def final_eval(run):
    rows = [json.loads(l) for l in open(os.path.join(out, run, "eval.jsonl"))]
    last = max(r["step"] for r in rows)
    return {r["set"].replace("-heldout", ""): r["perplexity"] for r in rows if r["step"] == last}
base = final_eval("base")
runs = ["none", "replay5", "replay25", "kl", "ewc", "replay25_kl"]
labels = {"none": "no mitigation", "replay5": "replay 5%", "replay25": "replay 25%", "kl": "KL λ=0.1",
          "ewc": "EWC λ=1000", "replay25_kl": "replay 25% + KL"}
results = {"base": base, "continual_steps": steps, "runs": {}}
lines = ["| run | English ppl (base %.1f) | forgetting | Python ppl (base %.1f) | adaptation |" % (base["english"], base["python"]),
         "|---|---|---|---|---|"]
for r in runs:
    e = final_eval(r)
    forgetting = 100 * (e["english"] / base["english"] - 1)
    adaptation = 100 * (1 - e["python"] / base["python"])
    results["runs"][r] = {"english_ppl": e["english"], "python_ppl": e["python"],
                          "forgetting_pct": forgetting, "adaptation_pct": adaptation}
    lines.append(f"| {labels[r]} | {e['english']:.1f} | {forgetting:+.1f}% | {e['python']:.1f} | {adaptation:+.1f}% |")
json.dump(results, open(os.path.join(out, "results.json"), "w"), indent=2)
open(os.path.join(out, "results.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
# Scatter: forgetting (x) vs adaptation (y).
W, H, M = 640, 420, 60
pts = [(results["runs"][r]["forgetting_pct"], results["runs"][r]["adaptation_pct"], labels[r]) for r in runs]
xs, ys = [p[0] for p in pts], [p[1] for p in pts]
x0, x1 = min(0, min(xs)) - 5, max(xs) + 5
y0, y1 = min(0, min(ys)) - 5, max(ys) + 5
sx = lambda x: M + (x - x0) / (x1 - x0) * (W - 2 * M)
sy = lambda y: H - M - (y - y0) / (y1 - y0) * (H - 2 * M)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<line x1="{M}" y1="{H-M}" x2="{W-M}" y2="{H-M}" stroke="black"/>',
       f'<line x1="{M}" y1="{M}" x2="{M}" y2="{H-M}" stroke="black"/>',
       f'<text x="{W/2}" y="{H-20}" text-anchor="middle">forgetting: English perplexity increase (%)</text>',
       f'<text x="18" y="{H/2}" text-anchor="middle" transform="rotate(-90 18 {H/2})">adaptation: Python perplexity decrease (%)</text>',
       f'<text x="{W/2}" y="24" text-anchor="middle" font-size="14">Continual pre-training of tiny (158k): {steps} steps on Python after English</text>']
for v in range(math.ceil(x0 / 10) * 10, int(x1) + 1, 10):
    svg.append(f'<text x="{sx(v)}" y="{H-M+16}" text-anchor="middle">{v}</text>')
for v in range(math.ceil(y0 / 10) * 10, int(y1) + 1, 10):
    svg.append(f'<text x="{M-8}" y="{sy(v)+4}" text-anchor="end">{v}</text>')
for x, y, name in pts:
    svg.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="5" fill="#1f77b4"/>')
    svg.append(f'<text x="{sx(x)+8:.1f}" y="{sy(y)-6:.1f}">{name}</text>')
svg.append("</svg>")
open(os.path.join(out, "continual.svg"), "w").write("\n".join(svg))
PY

# 4. Forecasting from a third of each run (docs/continual.md, "Forecasting forgetting"): the loss
# law fitted to the evaluations up to step STEPS/3, its forecast of the last evaluation beside it.
THIRD=$(( STEPS / 3 ))
"$CPT" forecast none replay25 --new-data python --fit-until-step "$THIRD" --check replay5 --json > forecast_two_shares.json
"$CPT" forecast pilot_none pilot_replay25 --new-data python --check none --check replay5 --check replay25 \
  --json > forecast_short_pilots.json
for r in none replay5 replay25 kl ewc replay25_kl; do
  "$CPT" forecast "$r" --new-data python --fit-until-step "$THIRD" --json > "forecast_$r.json"
done
python3 - "$OUT" "$THIRD" <<'PY'
import json, math, os, sys
out, third = sys.argv[1], sys.argv[2]
def rows(name):
    return json.load(open(os.path.join(out, name)))["checks"]
lines = [f"Fitted on steps 0-{third} (or on complete {third}-step pilots); forecast vs measured perplexity at the last step; "
         "error = forecast/measured - 1.", "",
         "| fitted to | run | set | forecast ppl [±2 se] | measured | error | inside |", "|---|---|---|---|---|---|---|"]
def add(fitted, checks):
    for c in checks:
        f, lo, hi, m = (math.exp(c[k]) for k in ("loss", "loss_low", "loss_high", "measured_loss"))
        inside = "yes" if lo <= m <= hi else "no"
        lines.append(f"| {fitted} | {os.path.basename(c['run'])} | {c['set'].replace('-heldout', '')} | "
                     f"{f:.2f} [{lo:.2f}, {hi:.2f}] | {m:.2f} | {100 * (f / m - 1):+.1f}% | {inside} |")
add("none + replay25", rows("forecast_two_shares.json"))
add("short pilots 0 + 25%", rows("forecast_short_pilots.json"))
for r in ["none", "replay5", "replay25", "kl", "ewc", "replay25_kl"]:
    add(f"{r} alone", rows(f"forecast_{r}.json"))
open(os.path.join(out, "forecast.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
