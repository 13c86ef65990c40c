#!/usr/bin/env python3
"""The training-speed anchor of the training issue, in PyTorch (Debian's
python3-torch): the standard small model of `latent train --bench` (Llama:
6 blocks, d 256, 4 heads of 64, FFN 768 SwiGLU, vocab 4096, tied embeddings,
RMSNorm, RoPE), B 8 x T 256 random tokens, AdamW, full steps (forward,
backward, optimizer), in F32 and with bf16 autocast. Prints tokens/s, the
best of N timed steps after a warm-up, as `latent train --bench` does.

usage: clients/torch_train_anchor.py [--steps N] [--threads N] [--precision f32,bf16]"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

D, LAYERS, HEADS, FFN, VOCAB, B, T = 256, 6, 4, 768, 4096, 8, 256
HD = D // HEADS


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.w


def rope(x, cos, sin):  # x (B, H, T, HD), rotate_half layout
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(nn.Module):
    def __init__(self, mask):
        super().__init__()
        self.mask = mask
        self.n1, self.n2 = RMSNorm(D), RMSNorm(D)
        self.q, self.k, self.v, self.o = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.g, self.u = nn.Linear(D, FFN, bias=False), nn.Linear(D, FFN, bias=False)
        self.d = nn.Linear(FFN, D, bias=False)

    def forward(self, x, cos, sin):
        h = self.n1(x)
        q = self.q(h).view(B, T, HEADS, HD).transpose(1, 2)
        k = self.k(h).view(B, T, HEADS, HD).transpose(1, 2)
        v = self.v(h).view(B, T, HEADS, HD).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(HD) + self.mask  # PyTorch 1.13: no fused attention
        a = torch.softmax(s.float(), dim=-1).type_as(v) @ v
        x = x + self.o(a.transpose(1, 2).reshape(B, T, D))
        h = self.n2(x)
        return x + self.d(F.silu(self.g(h)) * self.u(h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        nn.init.normal_(self.emb.weight, std=0.02)  # as `latent init`: logits start small
        mask = torch.full((T, T), float("-inf")).triu(1)
        self.blocks = nn.ModuleList(Block(mask) for _ in range(LAYERS))
        self.norm = RMSNorm(D)
        inv = 10000.0 ** (-torch.arange(0, HD, 2).float() / HD)
        ang = torch.arange(T).float()[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos())
        self.register_buffer("sin", ang.sin())

    def forward(self, tok):
        x = self.emb(tok)
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        return self.norm(x) @ self.emb.weight.t()


def bench(precision, steps):
    torch.manual_seed(1)
    m = Model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(12345)
    tok = torch.randint(0, VOCAB, (B, T), generator=g)
    tgt = torch.randint(0, VOCAB, (B, T), generator=g)
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = m(tok)
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), tgt.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    best = min(times[1:])
    print("%-28s %10.3f %10.0f   (loss %.4f)" % ("plain, " + precision + " (PyTorch)", best, B * T / best, loss.item()))
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="f32,bf16")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print("PyTorch %s, %d threads; the standard small model, B %d x T %d, AdamW; best of %d steps"
          % (torch.__version__, torch.get_num_threads(), B, T, a.steps))
    print("%-28s %10s %10s" % ("mode", "step (s)", "tokens/s"))
    for p in a.precision.split(","):
        bench(p, a.steps)


if __name__ == "__main__":
    main()
