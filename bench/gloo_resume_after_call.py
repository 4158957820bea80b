#!/usr/bin/env python3
"""Compute right after a blocking Gloo all-reduce against the same compute back to back, in plain
PyTorch.

Why: cpt's executor resumes from a blocking call every tensor-parallel layer; `cpt calibrate`
measures what that costs the work after the call (`intra_node.compute_lost_resuming_from_call_us`,
docs/calibration.md, "Resuming from a blocking call"). This script checks it outside cpt, for two
kinds of work: 256 x 256 GEMMs alone, and training-like work (a residual MLP block with an RMS
norm over [1024, 64], forward and backward through autograd).

Run: bench/gloo_resume_after_call.py [PIECES ...] (default 1 2 4: GEMMs or MLP blocks per piece)
with the project's venv python. Prints, per kind and size, three rounds of: back-to-back calls,
the work alone, the work right after a call, and the wait in the call (ms, rank 0's).
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank: int, world: int, kind: str, pieces: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    buffer = torch.zeros(64 * 1024)  # 256 KiB, summed in place: zeros stay finite
    a, b, c = torch.randn(256, 256), torch.randn(256, 256), torch.empty(256, 256)
    x = torch.randn(1024, 64)
    up = [torch.randn(64, 88, requires_grad=True) for _ in range(pieces)]
    down = [torch.randn(88, 64, requires_grad=True) for _ in range(pieces)]

    def work() -> None:
        if kind == "gemm":
            for _ in range(pieces):
                torch.mm(a, b, out=c)
            return
        h = x
        for w1, w2 in zip(up, down):
            normed = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + 1e-6)
            h = h + torch.nn.functional.silu(normed @ w1) @ w2
        h.square().mean().backward()
        for w in up + down:
            w.grad = None

    for _ in range(20):
        work()
    reps = 300
    rows = []
    for _ in range(3):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(reps):
            dist.all_reduce(buffer)
        back_to_back = (time.perf_counter() - start) / reps
        dist.barrier()
        start = time.perf_counter()
        for _ in range(reps):
            work()
        alone = (time.perf_counter() - start) / reps
        dist.barrier()
        after = waited = 0.0
        for _ in range(reps):
            t0 = time.perf_counter()
            work()
            t1 = time.perf_counter()
            dist.all_reduce(buffer)
            after += t1 - t0
            waited += time.perf_counter() - t1
        rows.append((back_to_back, alone, after / reps, waited / reps))
    if rank == 0:
        cells = "  ".join(f"b2b {r[0] * 1e3:.3f} alone {r[1] * 1e3:.3f} after {r[2] * 1e3:.3f} wait {r[3] * 1e3:.3f}"
                          for r in rows)
        print(f"{kind:4s} x{pieces}: {cells}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    sizes = [int(s) for s in sys.argv[1:]] or [1, 2, 4]
    port = 29540
    for kind in ("gemm", "mlp"):
        for pieces in sizes:
            mp.spawn(worker, args=(2, kind, pieces, port), nprocs=2)
            port += 1


if __name__ == "__main__":
    main()
