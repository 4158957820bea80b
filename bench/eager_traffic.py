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
counting = {"on": True}

# costmodel/elementwise_traffic.cpp, in elements per column of `columns()` below.
COST_MODEL_FORWARD = [20, 0, 10, 10, 5, 4, 12, 0, 0]
COST_MODEL_BACKWARD = [54, 9, 16, 16, 9, 3, 22, 0, 0]


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


class Gather(torch.autograd.Function):  # sequence parallelism's all-gather (communication: not counted)
    @staticmethod
    def forward(ctx, x, n):
        counting["on"] = False
        y = torch.cat([x] * n, 1)
        counting["on"] = True
        ctx.n = n
        return y

    @staticmethod
    def backward(ctx, g):
        counting["on"] = False
        r = g.narrow(1, 0, g.size(1) // ctx.n).contiguous()
        counting["on"] = True
        return r, None


class Scatter(torch.autograd.Function):  # its reduce-scatter (communication: not counted)
    @staticmethod
    def forward(ctx, x, n):
        counting["on"] = False
        y = x.narrow(1, 0, x.size(1) // n).contiguous()
        counting["on"] = True
        ctx.n = n
        return y

    @staticmethod
    def backward(ctx, g):
        counting["on"] = False
        r = torch.cat([g] * ctx.n, 1)
        counting["on"] = True
        return r, None


def rms_norm(x, w, eps=1e-5):  # RMSNormImpl::forward
    xf = x.to(torch.float32)
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotary(q, cos, sin):  # apply_rotary
    half = q.size(-1) // 2
    return q * cos + torch.cat([-q.narrow(-1, half, half), q.narrow(-1, 0, half)], -1) * sin


def layer(x, p, cos, sin, a, g, d, sp):  # DecoderBlockImpl::forward
    b = x.size(0)
    h1 = rms_norm(x, p["n1"])
    h1 = Gather.apply(h1, sp) if sp > 1 else h1
    s = h1.size(1)
    q = F.linear(h1, p["q"]).view(b, s, a, d).transpose(1, 2)
    k = F.linear(h1, p["k"]).view(b, s, g, d).transpose(1, 2)
    v = F.linear(h1, p["v"]).view(b, s, g, d).transpose(1, 2)
    q, k = rotary(q, cos, sin), rotary(k, cos, sin)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=(a != g))
    attn = F.linear(o.transpose(1, 2).reshape(b, s, a * d), p["o"])
    h = x + (Scatter.apply(attn, sp) if sp > 1 else attn)
    h2 = rms_norm(h, p["n2"])
    h2 = Gather.apply(h2, sp) if sp > 1 else h2
    mlp = F.linear(F.silu(F.linear(h2, p["gate"])) * F.linear(h2, p["up"]), p["down"])
    return h + (Scatter.apply(mlp, sp) if sp > 1 else mlp)


def measure(B, S, H, a, g, d, f, sp):
    shapes = {"n1": (H,), "n2": (H,), "q": (a * d, H), "k": (g * d, H), "v": (g * d, H), "o": (H, a * d),
              "gate": (f, H), "up": (f, H), "down": (H, f)}
    p = {name: (torch.randn(*shape) * 0.02).requires_grad_(True) for name, shape in shapes.items()}
    angles = torch.randn(S, d)
    cos = angles.cos()[None, None].expand(B, 1, S, d).contiguous()
    sin = angles.sin()[None, None].expand(B, 1, S, d).contiguous()
    x = torch.randn(B, S // sp, H, requires_grad=True)
    with ByteCounter() as forward:
        y = layer(x, p, cos, sin, a, g, d, sp)
    grad = torch.randn_like(y)
    with ByteCounter() as backward:
        y.backward(grad)
    return forward.bytes / 4, backward.bytes / 4  # fp32 elements


def columns(B, S, H, a, g, d, f, sp):
    T = B * S
    return [T * H / sp, T * H, T * a * d, T * g * d, T * f, T * d, T / sp, T * a, T]


def main():
    random.seed(1)
    torch.manual_seed(1)
    configs = []
    for _ in range(24):
        a = random.choice([2, 4, 8])
        configs.append((random.choice([2, 4]), random.choice([32, 64, 128]), random.choice([48, 64, 96, 128, 160]), a,
                        random.choice([g for g in (1, 2, a) if a % g == 0]), random.choice([8, 16, 32]),
                        random.choice([64, 100, 176, 300]), random.choice([1, 2])))
    rows, fwd, bwd = [], [], []
    for c in configs:
        f_el, b_el = measure(*c)
        rows.append(columns(*c))
        fwd.append(f_el)
        bwd.append(b_el)
    A = np.array(rows)
    print("columns: T*h/s, T*h, T*q, T*kv, T*f, T*d, T/s, T*a, T (elements)")
    for name, y, model in (("forward", np.array(fwd), COST_MODEL_FORWARD), ("backward", np.array(bwd), COST_MODEL_BACKWARD)):
        fit = np.linalg.lstsq(A, y, rcond=None)[0]
        err = np.max(np.abs(A @ np.array(model, float) - y) / y)
        print(f"{name:8s} least squares {np.round(fit, 2).tolist()}")
        print(f"{name:8s} cost model    {model}: largest error over {len(y)} shapes {100 * err:.2f}%")


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
