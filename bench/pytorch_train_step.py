"""The same model and training step as cpt_bench_train_step, in PyTorch eager from Python: a
LLaMA-style decoder (RMSNorm in fp32, rotate-half RoPE, GQA through scaled_dot_product_attention,
SwiGLU), token-summed cross-entropy scaled by 1/tokens, clip_grad_norm_(1.0), AdamW(fused=True,
betas (0.9, 0.95), weight decay 0.1 except norms). Same dimensions as cpt's catalog model.

On --device cuda the step runs under bf16 autocast with fp32 master weights (as cpt's executor
does); --tied shares the embedding with the LM head (Llama 3.2). MFU (with --peak-tflops) uses the
same convention as cpt_bench_train_step: 6·P_matmul + 12·L·(a·d)·S FLOPs per token.

usage: pytorch_train_step.py [--layers 8 --hidden 384 --heads 6 --kv-heads 2 --ffn 1024 --vocab 16000]
                             [--batch 4] [--seq 512] [--steps 10] [--warmup 2] [--threads N]
                             [--device cpu|cuda] [--tied] [--peak-tflops T] [--json]
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate(q, cos, sin):
    half = q.shape[-1] // 2
    cos, sin = cos.to(q.dtype), sin.to(q.dtype)  # in q's dtype, as cpt's executor (bf16 under autocast)
    return q * cos + torch.cat((-q[..., half:], q[..., :half]), -1) * sin


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        d = a.hidden // a.heads
        self.heads, self.kv, self.d = a.heads, a.kv_heads, d
        self.q = nn.Linear(a.hidden, a.heads * d, bias=False)
        self.k = nn.Linear(a.hidden, a.kv_heads * d, bias=False)
        self.v = nn.Linear(a.hidden, a.kv_heads * d, bias=False)
        self.o = nn.Linear(a.heads * d, a.hidden, bias=False)
        self.gate = nn.Linear(a.hidden, a.ffn, bias=False)
        self.up = nn.Linear(a.hidden, a.ffn, bias=False)
        self.down = nn.Linear(a.ffn, a.hidden, bias=False)
        self.n1 = RMSNorm(a.hidden, 1e-5)
        self.n2 = RMSNorm(a.hidden, 1e-5)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv, self.d).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.heads)
        x = x + self.o(att.transpose(1, 2).reshape(b, s, -1))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = nn.Embedding(a.vocab, a.hidden)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden, 1e-5)
        self.head = nn.Linear(a.hidden, a.vocab, bias=False)
        if getattr(a, "tied", False):
            self.head.weight = self.embed.weight
        d = a.hidden // a.heads
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
        ang = torch.outer(torch.arange(a.seq).float(), inv)
        both = torch.cat((ang, ang), -1)
        self.register_buffer("cos", both.cos(), persistent=False)
        self.register_buffer("sin", both.sin(), persistent=False)

    def forward(self, tokens, positions):
        x = self.embed(tokens)
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return self.head(self.norm(x))


def init_weights(model):
    """N(0, 0.02) for every weight but the norms (ones), as cpt's init without the residual scaling."""
    for name, w in model.named_parameters():
        if "norm" in name or name.endswith((".n1.weight", ".n2.weight")):
            continue
        nn.init.normal_(w, 0.0, 0.02)


def main():
    p = argparse.ArgumentParser()
    for k, v in dict(layers=8, hidden=384, heads=6, kv_heads=2, ffn=1024, vocab=16000, batch=4, seq=512, steps=10,
                     warmup=2, threads=0).items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--tied", action="store_true")
    p.add_argument("--peak-tflops", type=float, default=0.0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    dev = torch.device(a.device)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Model(a)
    init_weights(model)
    model.to(dev)
    decay = [w for n, w in model.named_parameters() if not (n.startswith("norm") or ".n1." in n or ".n2." in n)]
    no_decay = [w for n, w in model.named_parameters() if n.startswith("norm") or ".n1." in n or ".n2." in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    inp, tgt = tokens[:, :-1].contiguous().to(dev), tokens[:, 1:].contiguous().to(dev)
    pos = torch.arange(a.seq).unsqueeze(0).expand(a.batch, a.seq).to(dev)
    n = a.batch * a.seq

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.device == "cuda"):
            logits = model(inp, pos)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), tgt.view(-1), reduction="sum")
        (loss / n).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item() / n

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        loss = step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    s = time.perf_counter() - t0
    tps = a.steps * n / s
    params = sum(w.numel() for w in model.parameters())
    matmul_params = params - (0 if a.tied else a.vocab * a.hidden)
    flops_per_token = 6 * matmul_params + 12 * a.layers * a.hidden * a.seq
    mfu = tps * flops_per_token / (a.peak_tflops * 1e12) if a.peak_tflops > 0 else 0.0
    peak_mib = torch.cuda.max_memory_allocated() / 2**20 if a.device == "cuda" else 0.0
    if a.json:
        print(json.dumps(dict(impl="pytorch", params=params, device=a.device, threads=torch.get_num_threads(),
                              batch=a.batch, seq=a.seq, steps=a.steps, seconds=round(s, 4), tokens_per_s=round(tps, 1),
                              model_flops_per_token=flops_per_token, mfu=round(mfu, 4), peak_memory_mib=round(peak_mib, 1),
                              final_loss=round(loss, 5))))
    else:
        print(f"pytorch: {params} params on {a.device}, {torch.get_num_threads()} threads, batch {a.batch} x {a.seq}: "
              f"{tps:.1f} tokens/s ({s / a.steps:.3f} s/step)" + (f", MFU {100 * mfu:.1f}%" if mfu else "") +
              f", loss {loss:.4f}")


if __name__ == "__main__":
    main()
