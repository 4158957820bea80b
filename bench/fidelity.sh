#!/usr/bin/env bash
# The fidelity loop on this machine: calibrate, then for each layout plan for `--gpu
# local`, train a few steps (step 2 profiled) and `cpt compare` predicted vs measured. Prints one
# table row per layout: step time predicted / measured / error, the model-state error, and the
# error of each kind of work of the profiled step (gemm, attention, loss, communication, other). With REPEATS=N
# (default 1) every layout trains N times and the run with the median step time is compared:
# this VM's step time moves by up to 40% between runs of one layout. A second table predicts each
# run held out, on a profile refitted from the other runs (`cpt calibrate --from-runs`).
#
# The four-rank layouts of examples/tiny/plans/ run four ranks on this machine's cores: they are
# planned on a second calibration made with four ranks (`cpt calibrate --ranks 4`: every rate
# measured with four ranks sharing the cores; the cost model speeds a rank up while fewer compute,
# costmodel/compute_sharing.h). HSDP is left out: on one node its shard group is the whole data-
# parallel group, which is the zero3-dp4 row.
#
# The continual recipe's rows (recipe kl, ewc or vocab) start from the single layout's final
# checkpoint (init_from): KL distillation against it, EWC around it, or its vocabulary extended
# from 4,000 to 4,037 tokens (`cpt checkpoint extend-vocab`; the plan reads it from init_from).
# They are compared like the others and left out of the held-out table. ONLY=REGEX runs only the
# layouts whose name matches (single always runs first: the recipe rows start from it).
#
# "steal" is the share of this machine's CPU time the hypervisor gave other guests while the row's
# runs ran (/proc/stat): on a shared VM a row with more than a few percent measured the neighbours.
#
# usage: [REPEATS=N] [ONLY=REGEX] bench/fidelity.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
BUILD="$(cd "${1:-build}" && pwd)"
WORK="${2:-$(mktemp -d)}"
CPT="$BUILD/bin/cpt"
mkdir -p "$WORK" && cd "$WORK"
export CPT_LOCAL_PROFILE="$WORK/local.json"
[ -f local.json ] || "$CPT" calibrate --seconds 30 --out local.json >/dev/null
[ -f local4.json ] || "$CPT" calibrate --ranks 4 --seconds 30 --out local4.json >/dev/null 2>calibrate4.log ||
  { echo "fidelity: cpt calibrate --ranks 4 failed:" >&2; tail -3 calibrate4.log >&2; exit 1; }
SRC=$(python3 -c 'import json, os; print(os.path.dirname(json.__file__))')
[ -f tok.model ] || "$CPT" data train-tokenizer "$SRC/.." --ext .py --vocab-size 4000 --out tok >/dev/null 2>&1
[ -d data ] || "$CPT" data prepare "$SRC/../asyncio" "$SRC/../email" --ext .py --tokenizer tok.model --out data >/dev/null 2>&1
python3 - <<'PY'
import json
json.dump({"name": "tiny4", "layers": 4, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 176, "vocab": 4000,
           "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "tied_embeddings": False, "max_seq_len": 512},
          open("tiny4.json", "w"))
json.dump({"name": "tinyv", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 176, "vocab": 4000,
           "mlp": "swiglu", "norm": "rmsnorm", "position": "rope", "tied_embeddings": False, "max_seq_len": 512},
          open("tinyv.json", "w"))
PY
# name model gpus seq global_batch steps fix [recipe]
LAYOUTS=(
  "single tinyv.json 1 128 16 20 micro_batch=8"
  "dp2 tinyv.json 2 128 16 20 dp=2,zero=0,micro_batch=8"
  "zero1-dp2 tinyv.json 2 128 16 20 dp=2,zero=1,offload=none,micro_batch=8"
  "zero2-dp2 tinyv.json 2 128 16 20 dp=2,zero=2,offload=none,micro_batch=8"
  "zero3-dp2 tinyv.json 2 128 16 20 dp=2,zero=3,offload=none,micro_batch=8"
  "tp2 tinyv.json 2 128 16 20 tp=2,micro_batch=8"
  "tp2-sp tinyv.json 2 128 16 20 tp=2,sequence_parallel=true,micro_batch=8"
  "pp2 tinyv.json 2 128 16 20 pp=2,schedule=1f1b,micro_batch=4"
  "pp2-interleaved tiny4.json 2 128 16 20 pp=2,vp=2,schedule=interleaved_1f1b,micro_batch=4"
  "cp2 tinyv.json 2 128 16 20 cp=2,zero=0,micro_batch=8"
  "25m-dp2 cpt-25m 2 256 8 4 dp=2,zero=0,micro_batch=2"
  "25m-zero2 cpt-25m 2 256 8 4 dp=2,zero=2,offload=none,micro_batch=2"
  "25m-tp2 cpt-25m 2 256 8 4 tp=2,micro_batch=2"
  "25m-pp2 cpt-25m 2 256 8 4 pp=2,schedule=1f1b,micro_batch=2"
  "tp2-dp2 tinyv.json 4 128 16 20 tp=2,dp=2,sequence_parallel=true,zero=0,micro_batch=8"
  "pp2-dp2 tinyv.json 4 128 16 20 pp=2,dp=2,zero=0,schedule=1f1b,micro_batch=4"
  "pp2-tp2 tinyv.json 4 128 16 20 pp=2,tp=2,sequence_parallel=true,schedule=1f1b,micro_batch=4"
  "cp2-dp2 tinyv.json 4 128 16 20 cp=2,dp=2,zero=1,offload=none,micro_batch=8"
  "zero3-dp4 tinyv.json 4 128 16 20 dp=4,zero=3,offload=none,micro_batch=4"
  "kl-single tinyv.json 1 128 16 20 micro_batch=8 kl"
  "kl-dp2 tinyv.json 2 128 16 20 dp=2,zero=0,micro_batch=8 kl"
  "kl-tp2 tinyv.json 2 128 16 20 tp=2,micro_batch=8 kl"
  "kl-pp2 tinyv.json 2 128 16 20 pp=2,schedule=1f1b,micro_batch=4 kl"
  "kl-tp2-dp2 tinyv.json 4 128 16 20 tp=2,dp=2,sequence_parallel=true,zero=0,micro_batch=8 kl"
  "ewc-single tinyv.json 1 128 16 20 micro_batch=8 ewc"
  "ewc-dp2 tinyv.json 2 128 16 20 dp=2,zero=0,micro_batch=8 ewc"
  "ewc-tp2 tinyv.json 2 128 16 20 tp=2,micro_batch=8 ewc"
  "ewc-zero3-dp4 tinyv.json 4 128 16 20 dp=4,zero=3,offload=none,micro_batch=4 ewc"
  "vocab-tp2 tinyv.json 2 128 16 20 tp=2,micro_batch=8 vocab"
  "vocab-tp2-dp2 tinyv.json 4 128 16 20 tp=2,dp=2,sequence_parallel=true,zero=0,micro_batch=8 vocab"
)
# TRAIN.json of a row: the data, and the recipe's part starting from the single run's checkpoint.
recipe_json() {
  local base="$WORK/run-single/checkpoints/step_00000020"
  case "$1" in
    kl) echo ", \"init_from\": \"$base\", \"distill\": {\"lambda\": 0.1}" ;;
    ewc) echo ", \"init_from\": \"$base\", \"ewc\": {\"lambda\": 100, \"data\": {\"name\": \"py\", \"path\": \"data\"}, \"sequences\": 8}" ;;
    vocab)
      [ -d vocab-4037 ] || "$CPT" checkpoint extend-vocab "$base" --vocab 4037 vocab-4037 >/dev/null
      echo ", \"init_from\": \"$WORK/vocab-4037\"" ;;
    *) echo "" ;;
  esac
}
# The profile a layout is planned on: the four-rank calibration for four ranks.
# CPU time the hypervisor gave to other guests (/proc/stat's steal) and all CPU time, in ticks: a
# shared VM's rows measured while others took much of its cores are not the model's error.
cpu_ticks() { awk '/^cpu /{print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
profile_for() { if [ "$1" -gt 2 ]; then echo "$WORK/local4.json"; else echo "$WORK/local.json"; fi; }
printf '%-16s %12s %12s %8s %10s %8s %8s %8s %8s %8s %6s\n' layout predicted_s measured_s error state_err \
  gemm attn loss comm other steal
for row in "${LAYOUTS[@]}"; do
  read -r name model gpus seq gb steps fix recipe <<<"$row"
  [ "$name" = single ] || [[ "$name" =~ ${ONLY:-.} ]] || continue
  # Each rank's threads as its profile measured them (shared_cores.threads_per_device).
  threads=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["node"].get("shared_cores", {}).get("threads_per_device", 1))' \
    "$(profile_for "$gpus")")
  cat > "train-$name.json" <<JSON
{"data": [{"name": "py", "path": "data"}], "steps": $steps, "seed": 1, "threads": $threads, "log_interval_steps": 0$(recipe_json "${recipe:-}")}
JSON
  CPT_LOCAL_PROFILE="$(profile_for "$gpus")" "$CPT" plan --model "$model" --gpu local --gpus "$gpus" \
    --global-batch "$gb" --seq-len "$seq" --fix "$fix" --config "train-$name.json" --out "plan-$name" >/dev/null
  echo "$gpus" > "plan-$name/ranks"
  launch=(); [ "$gpus" -gt 1 ] && launch=(--nproc-per-node "$gpus")
  read -r steal_before ticks_before < <(cpu_ticks)
  for ((i = 1; i <= ${REPEATS:-1}; i++)); do
    rm -rf "run-$name.$i"
    "$CPT" train --plan "plan-$name/plan.json" --config "train-$name.json" --out "run-$name.$i" \
      --profile-step 2 "${launch[@]}" >/dev/null 2>&1
  done
  read -r steal_after ticks_after < <(cpu_ticks)
  steal=$(( 100 * (steal_after - steal_before) / (ticks_after - ticks_before + 1) ))
  # The run with the median step time becomes run-NAME.
  median=$(python3 -c '
import json, sys
runs = sorted(sys.argv[1:], key=lambda d: json.load(open(d + "/measured.json"))["step_time_s"])
print(runs[(len(runs) - 1) // 2])' run-"$name".*)
  rm -rf "run-$name" && mv "$median" "run-$name" && rm -rf run-"$name".*
  "$CPT" compare "run-$name" --json --log "$WORK/fidelity.jsonl" | python3 -c '
import json, sys
f = json.load(sys.stdin)["fields"]; name = sys.argv[1]
state = max(abs(f[k]["rel_err"]) for k in ("weights_bytes", "grads_bytes", "optimizer_bytes", "teacher_bytes",
                                           "ewc_bytes") if k in f)
t = f["step_time_s"]
def kind(k):
    e = f.get("kind_%s_s" % k, {}).get("rel_err")
    return "%7.0f%%" % (100 * e) if e is not None else "%8s" % "-"
print("%-16s %12.4f %12.4f %7.1f%% %9.1f%% %s %5s%%" % (name, t["predicted"], t["measured"], 100 * t["rel_err"],
      100 * state, " ".join(kind(k) for k in ("gemm", "attention", "loss", "communication", "other")), sys.argv[2]))' \
    "$name" "$steal"
done
# Recalibration from runs, held out: each run predicted on a profile refitted (`cpt calibrate
# --from-runs`) from the other layouts' runs only, as a user's next run would be.
echo
echo "held out: each run on a profile refitted from the other runs (cpt calibrate --from-runs)"
printf '%-16s %12s %12s %8s\n' layout predicted_s measured_s error
RUNS=()
for r in run-*; do [[ "$r" =~ ^run-(kl|ewc|vocab)- ]] || RUNS+=("$r"); done
for r in "${RUNS[@]}"; do
  # The other runs planned on the same calibration.
  ranks=$(cat "plan-${r#run-}/ranks")
  others=()
  for o in "${RUNS[@]}"; do
    [ "$o" != "$r" ] && [ "$(profile_for "$(cat "plan-${o#run-}/ranks")")" = "$(profile_for "$ranks")" ] && others+=("$o")
  done
  "$CPT" calibrate --from-runs "${others[@]}" --base "$(profile_for "$ranks")" --out "refit-${r#run-}.json" >/dev/null
  "$CPT" compare "$r" --cluster "refit-${r#run-}.json" --json --log "$WORK/fidelity-refit.jsonl" | python3 -c '
import json, sys
t = json.load(sys.stdin)["fields"]["step_time_s"]
print("%-16s %12.4f %12.4f %7.1f%%" % (sys.argv[1], t["predicted"], t["measured"], 100 * t["rel_err"]))' "${r#run-}"
done
