#!/usr/bin/env bash
# Multi-node for real: two network namespaces joined by a veth pair are two "nodes" (10.77.0.1 and
# 10.77.0.2); one `cpt train --nnodes 2` runs in each, rendezvous over TCP and Gloo over the veth
# link. The job must complete with the losses of the same plan on one node. Exit 77 (ctest: skipped)
# where namespaces cannot be made (not root, no CAP_SYS_ADMIN).
#
# usage: two_namespaces.sh CPT_BINARY WORK_DIR
set -euo pipefail
CPT="$1"
WORK="$2"
NS0=cpt-node0-$$
NS1=cpt-node1-$$
cleanup() { ip netns del "$NS0" 2>/dev/null || true; ip netns del "$NS1" 2>/dev/null || true; }
trap cleanup EXIT
if ! ip netns add "$NS0" 2>/dev/null || ! ip netns add "$NS1" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (needs root / CAP_SYS_ADMIN)"
  exit 77
fi
ip link add "v0-$$" netns "$NS0" type veth peer name "v1-$$" netns "$NS1"
ip -n "$NS0" addr add 10.77.0.1/24 dev "v0-$$"
ip -n "$NS1" addr add 10.77.0.2/24 dev "v1-$$"
for ns in "$NS0" "$NS1"; do ip -n "$ns" link set lo up; done
ip -n "$NS0" link set "v0-$$" up
ip -n "$NS1" link set "v1-$$" up

rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
src=$(ls -d /usr/lib/python3.*/json | head -1)
"$CPT" data train-tokenizer "$src" --ext .py --vocab-size 512 --out tok >/dev/null
"$CPT" data prepare "$src" --ext .py --tokenizer tok.model --out data >/dev/null
cat > train.json <<JSON
{"data": [{"name": "py", "path": "data"}], "steps": 10, "seed": 5, "threads": 1, "log_interval_steps": 0,
 "collective_timeout_s": 60}
JSON
"$CPT" plan --model tiny --gpu h100 --gpus 2 --global-batch 8 --seq-len 64 --fix dp=2,zero=0,micro_batch=2 --out p >/dev/null

# One node, two ranks: the reference.
"$CPT" train --plan p/plan.json --config train.json --out one-node --nproc-per-node 2 >/dev/null
# Two nodes, one rank each, in their own namespaces.
common=(train --plan p/plan.json --config train.json --out two-nodes --nproc-per-node 1 --nnodes 2
        --master-addr 10.77.0.1 --master-port 29877)
GLOO_SOCKET_IFNAME="v0-$$" ip netns exec "$NS0" "$CPT" "${common[@]}" --node-rank 0 > node0.log 2>&1 &
node0=$!
GLOO_SOCKET_IFNAME="v1-$$" ip netns exec "$NS1" "$CPT" "${common[@]}" --node-rank 1 > node1.log 2>&1 &
node1=$!
status=0
wait "$node0" || status=$?
wait "$node1" || status=$?
if [ "$status" -ne 0 ]; then
  echo "FAILED: a node exited with $status"; cat node0.log node1.log; exit 1
fi
python3 - <<'PY'
import json
a = [json.loads(l)["loss"] for l in open("one-node/metrics.jsonl")]
b = [json.loads(l)["loss"] for l in open("two-nodes/metrics.jsonl")]
assert len(a) == len(b) == 10, (len(a), len(b))
worst = max(abs(x / y - 1) for x, y in zip(a, b))
print(f"two nodes vs one node: 10 steps, max relative loss difference {worst:.2e}")
assert worst <= 1e-4, worst
PY
echo OK
