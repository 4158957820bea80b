"""PyTorch's data parallelism on the CPU (torchrun, Gloo) for the same model and step as
bench/pytorch_train_step.py: DDP, or FSDP2 (fully_shard) with reshard_after_forward=False
(SHARD_GRAD_OP, ZeRO-2-like) or True (FULL_SHARD, ZeRO-3). Prints rank 0's global tokens/s.

usage: torchrun --nproc-per-node 2 bench/pytorch_dp_step.py --mode ddp|fsdp-grad-op|fsdp-full
           [--batch 4] [--seq 512] [--steps 6] [--warmup 2] [--threads 1] [--json]
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_train_step import Model, init_weights  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    for k, v in dict(layers=8, hidden=384, heads=6, kv_heads=2, ffn=1024, vocab=16000, batch=4, seq=512, steps=6,
                     warmup=2, threads=1).items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    p.add_argument("--mode", choices=["ddp", "fsdp-grad-op", "fsdp-full"], default="ddp")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = Model(a)
    init_weights(model)
    if a.mode == "ddp":
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25, gradient_as_bucket_view=True)
    else:
        from torch.distributed.fsdp import fully_shard
        for blk in model.blocks:
            fully_shard(blk, reshard_after_forward=a.mode == "fsdp-full")
        fully_shard(model, reshard_after_forward=a.mode == "fsdp-full")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            foreach=True)
    g = torch.Generator().manual_seed(rank)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
    inp, tgt = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    pos = torch.arange(a.seq).unsqueeze(0).expand(a.batch, a.seq)
    n = a.batch * a.seq * world

    def step():
        logits = model(inp, pos)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), tgt.view(-1), reduction="sum")
        (loss / n * world).backward()  # DDP/FSDP average over ranks; scale back to a per-token mean
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(a.warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    dist.barrier()
    dt = time.perf_counter() - t0
    if rank == 0:
        r = {"mode": a.mode, "ranks": world, "tokens_per_s": n * a.steps / dt, "step_time_s": dt / a.steps,
             "batch_per_rank": a.batch, "seq": a.seq, "threads": a.threads}
        print(json.dumps(r) if a.json else r)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
