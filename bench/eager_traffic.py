#!/usr/bin/env python3
"""Bytes moved by the element-wise operators of cpt's decoder layer, as the cost model counts them
for eager dispatch (costmodel/elementwise_traffic.h).

The layer of executor/model/llama_blocks.cpp (RMSNorm, RoPE, GQA attention through SDPA, SwiGLU,
residuals; sequence parallelism's gather and scatter around the tensor-parallel regions) is
replicated operator for operator in PyTorch and run forward and backward under a dispatch mode
that sums, for every ATen operator below autograd that is neither a GEMM, the attention kernel nor
a view, the bytes of its tensor inputs and outputs. Over random shapes the totals are fitted as
elements per [T*h/s, T*h, T*q, T*kv, T*f, T*d, T/s, T*a, T] (s: the sequence-parallel divisor), and
the fit is checked against the integer coefficients the cost model uses.

Usage: ~/.cache/cpt/venv/bin/python bench/eager_traffic.py   (a few seconds, CPU)
"""
import random

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

GEMMS = {"mm", "addmm", "bmm", "matmul", "linear"}
NOT_COUNTED = ("_scaled_dot_product", "scaled_dot_product", "_unsafe_view", "detach")
counting = {"on": True, "copies": True}

# costmodel/elementwise_traffic.cpp, in elements per column of `columns()` below.
COST_MODEL_FORWARD = [20, 0, 10, 10, 5, 4, 12]
COST_MODEL_BACKWARD = [54, 9, 16, 16, 9, 3, 22]
# Tensor parallelism's copies around its collectives, ([T*h, T*h/s] forward, backward).
COST_MODEL_TP_COPIES = ([4, 0], [4, 0])
COST_MODEL_SP_COPIES = ([4, 4], [4, 4])
# Under sequence parallelism the projections' copies of their gathered input (T*h, forward, backward).
COST_MODEL_SP_PROJECTIONS = (10, 4)


class ByteCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        is_view = any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)
        if counting["on"] and name not in GEMMS and not name.startswith(NOT_COUNTED) and not is_view:
            tensors = [t for t in torch.utils._pytree.tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
            self.bytes += sum(t.numel() * t.element_size() for t in tensors)
        return out


# Tensor parallelism's regions as executor/parallel/tensor_parallel.cpp writes them, on one rank:
# the copies it makes around each collective are counted; the collective itself (replaced by a
# concatenation or a slice, as if the other ranks held the same values) is not.
def _uncounted(fn):
    saved = counting["on"]
    counting["on"] = False
    try:
        return fn()
    finally:
        counting["on"] = saved


def _copy(fn):  # a copy the executor makes around a collective: counted when copies are
    return fn() if counting["copies"] else _uncounted(fn)


def _gathered_dim1(x, n):  # all_gathered_dim1: transpose to [S, B, ...], contiguous, gather, transpose back
    t = _copy(lambda: x.transpose(0, 1).contiguous())
    return _uncounted(lambda: torch.cat([t] * n, 0)).transpose(0, 1)


def _scattered_dim1(x, n):  # reduce_scattered_dim1
    t = _copy(lambda: x.transpose(0, 1).contiguous())
    return _uncounted(lambda: t.narrow(0, 0, t.size(0) // n).contiguous()).transpose(0, 1)


def _region(forward, backward):  # an autograd function: `forward` on the way in, `backward` on the way out
    class Region(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, n):
            ctx.n = n
            return forward(x, n)

        @staticmethod
        def backward(ctx, g):
            return backward(g, ctx.n), None

    return Region


Gather = _region(_gathered_dim1, _scattered_dim1)   # GatherSequence: gather forward, reduce-scatter backward
Scatter = _region(_scattered_dim1, _gathered_dim1)  # ReduceScatterSequence: the reverse


class CopyToTp(torch.autograd.Function):  # identity forward, all-reduce (of a clone) backward
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return _copy(lambda: g.contiguous().clone())


class ReduceFromTp(torch.autograd.Function):  # all-reduce (of a clone) forward, identity backward
    @staticmethod
    def forward(ctx, x):
        return _copy(lambda: x.contiguous().clone())

    @staticmethod
    def backward(ctx, g):
        return g


def enter_region(x, mode, n):  # enter_tp_region
    if mode == "sp":
        return Gather.apply(x, n)
    return CopyToTp.apply(x) if mode == "tp" else x


def leave_region(x, mode, n):  # leave_tp_region
    if mode == "sp":
        return Scatter.apply(x, n)
    return ReduceFromTp.apply(x) if mode == "tp" else x


def rms_norm(x, w, eps=1e-5):  # RMSNormImpl::forward
    xf = x.to(torch.float32)
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotary(q, cos, sin):  # apply_rotary
    half = q.size(-1) // 2
    return q * cos + torch.cat([-q.narrow(-1, half, half), q.narrow(-1, 0, half)], -1) * sin


def layer(x, p, cos, sin, a, g, d, mode, n):  # DecoderBlockImpl::forward; mode "none", "tp" or "sp"
    h1 = enter_region(rms_norm(x, p["n1"]), mode, n)
    b, s = h1.size(0), h1.size(1)
    q = F.linear(h1, p["q"]).view(b, s, a, d).transpose(1, 2)
    k = F.linear(h1, p["k"]).view(b, s, g, d).transpose(1, 2)
    v = F.linear(h1, p["v"]).view(b, s, g, d).transpose(1, 2)
    q, k = rotary(q, cos, sin), rotary(k, cos, sin)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=(a != g))
    h = x + leave_region(F.linear(o.transpose(1, 2).reshape(b, s, a * d), p["o"]), mode, n)
    h2 = enter_region(rms_norm(h, p["n2"]), mode, n)
    return h + leave_region(F.linear(F.silu(F.linear(h2, p["gate"])) * F.linear(h2, p["up"]), p["down"]), mode, n)


def measure(B, S, H, a, g, d, f, sp, mode="none", n=2, copies=True):
    counting["copies"] = copies
    shapes = {"n1": (H,), "n2": (H,), "q": (a * d, H), "k": (g * d, H), "v": (g * d, H), "o": (H, a * d),
              "gate": (f, H), "up": (f, H), "down": (H, f)}
    p = {name: (torch.randn(*shape) * 0.02).requires_grad_(True) for name, shape in shapes.items()}
    angles = torch.randn(S, d)
    cos = angles.cos()[None, None].expand(B, 1, S, d).contiguous()
    sin = angles.sin()[None, None].expand(B, 1, S, d).contiguous()
    x = torch.randn(B, S // sp, H, requires_grad=True)
    with ByteCounter() as forward:
        y = layer(x, p, cos, sin, a, g, d, mode, n)
    grad = torch.randn_like(y)
    with ByteCounter() as backward:
        y.backward(grad)
    return forward.bytes / 4, backward.bytes / 4  # fp32 elements


def sp_model(base, projections):  # the base coefficients plus sequence parallelism's extra T*h column
    return list(base) + [projections]


def columns(B, S, H, a, g, d, f, s):
    """T*h/s, T*h, T*q, T*kv, T*f, T*d, T/s (s: the sequence-parallel divisor)."""
    T = B * S
    return [T * H / s, T * H, T * a * d, T * g * d, T * f, T * d, T / s]


def main():
    random.seed(1)
    torch.manual_seed(1)
    shapes = []
    for _ in range(12):
        a = random.choice([2, 4, 8])
        shapes.append((random.choice([2, 4]), random.choice([32, 64, 128]), random.choice([48, 64, 96, 128, 160]), a,
                       random.choice([g for g in (1, 2, a) if a % g == 0]), random.choice([8, 16, 32]),
                       random.choice([64, 100, 176, 300])))
    print("the layer's own operators, elements per [T*h/s, T*h, T*q, T*kv, T*f, T*d, T/s]:")
    # Sequence parallelism (s = 2 and 4) without its copies around the collectives (below); its
    # projections read the gathered input through a transposed view, which each copies.
    for label, mode, s, fmodel, bmodel in (("none", "none", 1, COST_MODEL_FORWARD, COST_MODEL_BACKWARD),
                                           ("sp", "sp", 0, sp_model(COST_MODEL_FORWARD, COST_MODEL_SP_PROJECTIONS[0]),
                                            sp_model(COST_MODEL_BACKWARD, COST_MODEL_SP_PROJECTIONS[1]))):
        rows, fwd, bwd = [], [], []
        for shape in shapes:
            for ss in ((1,) if s == 1 else (2, 4)):
                f_el, b_el = measure(*shape, ss, mode=mode, n=ss, copies=False)
                rows.append(columns(*shape, ss) + ([shape[0] * shape[1] * shape[2]] if mode == "sp" else []))
                fwd.append(f_el)
                bwd.append(b_el)
        A = np.array(rows)
        for name, y, model in (("forward", np.array(fwd), fmodel), ("backward", np.array(bwd), bmodel)):
            err = np.max(np.abs(A @ np.array(model, float) - y) / y)
            fit = np.linalg.lstsq(A[:, :7], y, rcond=None)[0]  # the T*h column once (it equals the last)
            print(f"  {label:4s} {name:8s} least squares {np.round(fit, 2).tolist()}")
            print(f"  {label:4s} {name:8s} cost model    {model}: largest error over {len(y)} layers {100 * err:.2f}%")
    print("tensor parallelism's copies around its collectives, elements per [T*h, T*h/s]:")
    for mode, model in (("tp", COST_MODEL_TP_COPIES), ("sp", COST_MODEL_SP_COPIES)):
        rows, fwd, bwd = [], [], []
        for shape in shapes:
            for ss in ((1,) if mode == "tp" else (2, 4)):
                with_f, with_b = measure(*shape, ss, mode=mode, n=max(2, ss), copies=True)
                without_f, without_b = measure(*shape, ss, mode=mode, n=max(2, ss), copies=False)
                B, S, H = shape[0], shape[1], shape[2]
                rows.append([B * S * H, B * S * H / ss])
                fwd.append(with_f - without_f)
                bwd.append(with_b - without_b)
        A = np.array(rows)
        for name, y, coef in (("forward", np.array(fwd), model[0]), ("backward", np.array(bwd), model[1])):
            fit = np.linalg.lstsq(A, y, rcond=None)[0]
            err = np.max(np.abs(A @ np.array(coef, float) - y) / y)
            print(f"  {mode:4s} {name:8s} least squares {np.round(fit, 2).tolist()}; cost model {coef}: "
                  f"largest error {100 * err:.2f}%")


def final_norm():
    """The final norm before the LM head (the cost model: 7·T·h + 6·T forward, 24·T·h + 11·T backward)."""
    for T, H in ((1024, 64), (512, 384)):
        w = torch.ones(H, requires_grad=True)
        x = torch.randn(1, T, H, requires_grad=True)
        head = torch.randn(50, H, requires_grad=True)
        with ByteCounter() as forward:
            y = F.linear(rms_norm(x, w), head)
        grad = torch.randn_like(y)
        with ByteCounter() as backward:
            y.backward(grad)
        print(f"final norm T={T} h={H}: forward {forward.bytes / 4:.0f} elements (cost model {7 * T * H + 6 * T}), "
              f"backward {backward.bytes / 4:.0f} (cost model {24 * T * H + 11 * T})")


if __name__ == "__main__":
    main()
    final_norm()
