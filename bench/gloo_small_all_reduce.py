#!/usr/bin/env python3
"""Gloo all-reduce of a few bytes against 4 KiB and more, back to back, in plain PyTorch.

Why: cpt's executor ends every step with all-reduces of two fp64 values (the loss, its token
count, the gradient norm); `cpt calibrate` measures them apart from its 4 KiB..16 MiB samples
because Gloo takes another path for them (docs/calibration.md, "The scalar all-reduce").

Run: bench/gloo_small_all_reduce.py [RANKS ...] (default 2 4) with the project's venv python.
Prints per rank count the mean ms per call of each message size, the slowest rank's.
"""
import os
import subprocess
import sys
import time


def worker(rank: int, world: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")
    sizes = [(2, torch.float64), (1024, torch.float32), (16384, torch.float32), (262144, torch.float32)]
    means = []
    for numel, dtype in sizes:
        t = torch.zeros(numel, dtype=dtype)
        for _ in range(5):
            dist.all_reduce(t)
        dist.barrier()
        calls = 100
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(t)
        means.append((time.perf_counter() - t0) / calls)
    out = torch.tensor(means, dtype=torch.float64)
    gathered = [torch.zeros_like(out) for _ in range(world)]
    dist.all_gather(gathered, out)
    if rank == 0:
        slowest = torch.stack(gathered).max(dim=0).values.tolist()
        labels = ["16 B", "4 KiB", "64 KiB", "1 MiB"]
        print(f"{world} ranks: " + ", ".join(f"{l} {s * 1e3:.2f} ms" for l, s in zip(labels, slowest)))
    dist.destroy_process_group()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), int(os.environ["PORT"]))
        return
    for i, world in enumerate(int(a) for a in (sys.argv[1:] or ["2", "4"])):
        env = dict(os.environ, PORT=str(29600 + i))
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(r), str(world)], env=env)
                 for r in range(world)]
        if any(p.wait() != 0 for p in procs):
            sys.exit(f"a worker of the {world}-rank run failed")


if __name__ == "__main__":
    main()
