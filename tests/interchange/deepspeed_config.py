#!/usr/bin/env python3
"""cpt plan's ds_config.json read by DeepSpeed's own parser (deepspeed.runtime.config.DeepSpeedConfig,
the version scripts/setup pins), as Megatron-DeepSpeed reads it: with the model's mpu giving the
data-parallel size. For each layout the global batch DeepSpeed derives is the plan's, ZeRO is at
most 1 with a pipeline (DeepSpeed's pipeline engine refuses 2 and 3) and CPU offload comes with the
optimizer block DeepSpeed's CPU Adam is built from.

Usage: deepspeed_config.py CPT_BINARY WORK_DIR   (exit 77: DeepSpeed is not installed)
"""
import json
import os
import subprocess
import sys

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29531")
for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
    os.environ.setdefault(key, value)

try:
    import deepspeed
    from deepspeed.runtime.config import DeepSpeedConfig
except ImportError:
    print("deepspeed is not installed (scripts/setup installs it)")
    sys.exit(77)

# (model, GPUs, --fix): pure ZeRO-3, a pipeline asked for ZeRO-2, tensor parallelism with the
# distributed optimizer, hybrid sharding, ZeRO-3 with the optimizer offloaded.
LAYOUTS = [
    ("llama3-8b", 16, "tp=1,pp=1,cp=1,zero=3"),
    ("llama3-70b", 64, "tp=2,pp=4,cp=1,zero=2"),
    ("llama3-70b", 64, "tp=8,pp=1,cp=1,zero=1"),
    ("llama3-8b", 16, "tp=1,pp=1,cp=1,zero=3,hsdp=true"),
    ("llama3-8b", 16, "tp=1,pp=1,cp=1,zero=3,offload=optimizer"),
]


class Mpu:
    """The part of Megatron-DeepSpeed's mpu DeepSpeedConfig reads."""

    def __init__(self, dp):
        self.dp = dp

    def get_data_parallel_world_size(self):
        return self.dp

    def get_data_parallel_rank(self):
        return 0


def main():
    cpt, work = sys.argv[1], sys.argv[2]
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    failures = []
    for index, (model, gpus, fix) in enumerate(LAYOUTS):
        out = os.path.join(work, f"plan{index}")
        subprocess.run([cpt, "plan", "--model", model, "--gpu", "h100", "--gpus", str(gpus), "--global-batch", "64",
                        "--seq-len", "4096", "--fix", fix, "--threads", "1", "--out", out],
                       check=True, stdout=subprocess.DEVNULL)
        parallel = json.load(open(os.path.join(out, "plan.json")))["parallel"]
        path = os.path.join(out, "ds_config.json")
        config = DeepSpeedConfig(path, mpu=Mpu(parallel["dp"]))
        raw = json.load(open(path))
        checks = [
            (config.train_batch_size == parallel["global_batch"], "global batch"),
            (parallel["pp"] == 1 or config.zero_optimization_stage <= 1, "ZeRO stage with a pipeline"),
            (parallel["offload"] == "none" or raw.get("optimizer", {}).get("type") == "AdamW", "offload optimizer"),
        ]
        for ok, what in checks:
            if not ok:
                failures.append(f"{fix}: {what}: {raw}")
        print(f"{fix}: DeepSpeed reads train_batch_size {config.train_batch_size}, "
              f"ZeRO {config.zero_optimization_stage}")
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
