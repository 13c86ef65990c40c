#!/usr/bin/env python3
"""Independent float64 reference of one training step (models.md §1-3, §5).

  train_reference.py --model DIR --data FILE.bin --batch B --seq T
                     --mode plain|jacobi|lrt [--jacobi-iters D --jacobi-grad-iters K]
                     [--lrt-subsets S] [--step S0] [--lr X] [--out FILE.safetensors]
                     [--check-fd N]

Reads the batch of step S0 in the unshuffled order of models.md §5 (with
FILE.labels / .mask / .flow beside FILE.bin when present, as docs/training.md
"Data files" says), computes the mode's loss and its gradient with a small
reverse-mode autodiff written here (numpy, float64, nothing shared with the
C trainer), and prints {"loss": L, "grad_norm": G}. With --out it writes the
weights after one plain SGD step w - lr * grad (F32). With --check-fd N it
also compares <grad, v> with central finite differences of its own loss
along N random directions (valid where nothing is detached: plain, LRT, and
Jacobi with K >= D and cache_residual false) and prints the worst relative
error as "fd_rel_err".

Semantics implemented from models.md, to the letter:
  plain   the backbone, recurrent tensors unused;
  jacobi  §2: full pass (blocks 0..l_end) without fusion, R^(0) = shift(Y0),
          detached when K < D; D-1 middle passes on the saved l_start input,
          M detached when D-1-(k-1) > K; final pass from l_start with fusion;
          the rms factor of s(.) is a constant; control flow 1 rows are not
          fused and leave R_t = y;
  lrt     §3: pass with m = 0 (loss L_0, k/v and h^(src) buffers), subsets
          s = 0..S-1 in order with write-back, loss (L_0 + sum L_s)/(S+1).
Every loss is the mean cross-entropy over its scored targets (0 when none).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py  # noqa: E402

# ---- a small reverse-mode autodiff ------------------------------------------


class V:
    """A float64 array with the graph edge that made it."""
    __slots__ = ("v", "g", "parents", "back")

    def __init__(self, v, parents=(), back=None):
        self.v = np.asarray(v, dtype=np.float64)
        self.g = None
        self.parents = parents
        self.back = back  # back(g) -> gradients for parents, in order

    @property
    def shape(self):
        return self.v.shape

    def __add__(self, o):
        return add(self, o)

    def __radd__(self, o):
        return add(o, self)

    def __sub__(self, o):
        return add(self, neg(o))

    def __rsub__(self, o):
        return add(o, neg(self))

    def __mul__(self, o):
        return mul(self, o)

    def __rmul__(self, o):
        return mul(o, self)

    def __neg__(self):
        return neg(self)

    def __matmul__(self, o):
        return matmul(self, o)

    def __getitem__(self, idx):
        return getitem(self, idx)


def const(x):
    return x if isinstance(x, V) else V(x)


def unbroadcast(g, shape):
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


def add(a, b):
    a, b = const(a), const(b)
    return V(a.v + b.v, (a, b), lambda g: (unbroadcast(g, a.shape), unbroadcast(g, b.shape)))


def neg(a):
    a = const(a)
    return V(-a.v, (a,), lambda g: (-g,))


def mul(a, b):
    a, b = const(a), const(b)
    return V(a.v * b.v, (a, b), lambda g: (unbroadcast(g * b.v, a.shape), unbroadcast(g * a.v, b.shape)))


def matmul(a, b):  # 2-D only
    return V(a.v @ b.v, (a, b), lambda g: (g @ b.v.T, a.v.T @ g))


def transpose(a):
    return V(a.v.T, (a,), lambda g: (g.T,))


def vsum(a, axis=None, keepdims=False):
    def back(g):
        if axis is not None and not keepdims:
            g = np.expand_dims(g, axis)
        return (np.broadcast_to(g, a.shape).copy(),)
    return V(a.v.sum(axis=axis, keepdims=keepdims), (a,), back)


def vexp(a):
    e = np.exp(a.v)
    return V(e, (a,), lambda g: (g * e,))


def vlog(a):
    return V(np.log(a.v), (a,), lambda g: (g / a.v,))


def vtanh(a):
    t = np.tanh(a.v)
    return V(t, (a,), lambda g: (g * (1 - t * t),))


def sigmoid(a):
    s = 1 / (1 + np.exp(-a.v))
    return V(s, (a,), lambda g: (g * s * (1 - s),))


def rsqrt(a):
    r = a.v ** -0.5
    return V(r, (a,), lambda g: (g * -0.5 * r / a.v,))


def recip(a):
    return V(1.0 / a.v, (a,), lambda g: (-g / (a.v * a.v),))


def getitem(a, idx):
    def back(g):
        z = np.zeros(a.shape)
        np.add.at(z, idx, g)
        return (z,)
    return V(a.v[idx], (a,), back)


def concat(xs, axis):
    xs = [const(x) for x in xs]
    sizes = np.cumsum([x.shape[axis] for x in xs])[:-1]
    return V(np.concatenate([x.v for x in xs], axis=axis), tuple(xs),
             lambda g: tuple(np.split(g, sizes, axis=axis)))


def stack(xs):
    xs = [const(x) for x in xs]
    return V(np.stack([x.v for x in xs]), tuple(xs), lambda g: tuple(g[i] for i in range(len(xs))))


def detach(a):
    return V(a.v.copy())


def backward(loss):
    order, seen = [], set()
    stack_ = [(loss, False)]
    while stack_:  # iterative post-order
        node, done = stack_.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack_.append((node, True))
        for p in node.parents:
            if id(p) not in seen:
                stack_.append((p, False))
    loss.g = np.ones_like(loss.v)
    for node in reversed(order):
        if node.back is None or node.g is None:
            continue
        for p, gp in zip(node.parents, node.back(node.g)):
            p.g = gp if p.g is None else p.g + gp

# ---- the model (models.md §1-3) ----------------------------------------------


class Model:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        self.c = c
        self.d = c["hidden_size"]
        self.L = c["num_hidden_layers"]
        self.nh = c["num_attention_heads"]
        self.nkv = c.get("num_key_value_heads", self.nh)
        self.hd = c.get("head_dim") or self.d // self.nh
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.theta = c.get("rope_theta", 10000.0)
        self.tied = c.get("tie_word_embeddings", False)
        self.rec = c.get("latent_recurrence") or {}
        self.arrays = safetensors_py.read_model_dir(d)
        self.p = {k: V(v) for k, v in self.arrays.items()}

    def W(self, name):
        return self.p[name]

    def lm_head(self):
        return self.W("model.embed_tokens.weight" if self.tied else "lm_head.weight")


def rmsnorm(x, w, eps):
    """x (n, d)"""
    ms = vsum(x * x, axis=1, keepdims=True) * (1.0 / x.shape[1])
    return x * rsqrt(ms + eps) * w


def linear(x, w):
    return x @ transpose(w)


def rope(x, pos, nheads, hd, theta):
    """x (n, nheads*hd), pos (n,) -> rotated, HF rotate_half layout."""
    half = hd // 2
    j = np.arange(half, dtype=np.float64)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * theta ** (-2.0 * j / hd)  # (n, half)
    cos, sin = np.cos(ang), np.sin(ang)
    outs = []
    for h in range(nheads):
        x1 = x[:, h * hd:h * hd + half]
        x2 = x[:, h * hd + half:(h + 1) * hd]
        outs.append(x1 * cos - x2 * sin)
        outs.append(x2 * cos + x1 * sin)
    return concat(outs, axis=1)


def attention(m, q, k, v, qpos):
    """q (nq, nh*hd) at positions qpos; k, v (T, nkv*hd) of positions 0..T-1."""
    T = k.shape[0]
    grp = m.nh // m.nkv
    mask = (np.arange(T)[None, :] <= np.asarray(qpos)[:, None]).astype(np.float64)
    outs = []
    for h in range(m.nh):
        g = h // grp
        qh = q[:, h * m.hd:(h + 1) * m.hd]
        kh = k[:, g * m.hd:(g + 1) * m.hd]
        vh = v[:, g * m.hd:(g + 1) * m.hd]
        s = (qh @ transpose(kh)) * (1.0 / np.sqrt(m.hd))
        mx = np.where(mask > 0, s.v, -np.inf).max(axis=1, keepdims=True)
        e = vexp(s * mask - mx + (mask - 1.0) * 1e4) * mask  # masked scores: exp underflows to 0
        p = e * recip(vsum(e, axis=1, keepdims=True))
        outs.append(p @ vh)
    return concat(outs, axis=1)


def block(m, i, x, pos, mem=None, inject=False, kv_sink=None, kv_source=None, qpos=None):
    """Block i on rows x (n, d) at positions pos. mem (n, d) is the LRT memory
    (None: m = 0). kv_sink(k, v) receives this block's k, v (after injection and
    RoPE); kv_source(l) returns the k, v the queries attend to (default: own)."""
    pre = "model.layers.%d." % i
    W = m.W
    rec = m.rec
    if inject and rec.get("residual_injection"):
        x = x * W(pre + "lrt.alpha") + (mem * W(pre + "lrt.gamma") if mem is not None else 0.0)
    a = rmsnorm(x, W(pre + "input_layernorm.weight"), m.eps)
    q = linear(a, W(pre + "self_attn.q_proj.weight"))
    k = linear(a, W(pre + "self_attn.k_proj.weight"))
    v = linear(a, W(pre + "self_attn.v_proj.weight"))
    if inject and rec.get("kv_injection"):
        g = sigmoid(linear(a, W(pre + "lrt.gate.weight"))) * 2.0
        if rec.get("shared_kv_projection"):
            K, Vp = W("model.lrt.k_proj.weight"), W("model.lrt.v_proj.weight")
        else:
            K, Vp = W(pre + "lrt.k_proj.weight"), W(pre + "lrt.v_proj.weight")
        ks, vs = [], []
        mk = linear(mem, K) if mem is not None else None
        mv = linear(mem, Vp) if mem is not None else None
        for j in range(m.nkv):
            sl = slice(j * m.hd, (j + 1) * m.hd)
            gl, gf = g[:, j:j + 1], g[:, m.nkv + j:m.nkv + j + 1]
            kj, vj = k[:, sl] * gl, v[:, sl] * gl
            if mem is not None:
                kj = kj + mk[:, sl] * gf
                vj = vj + mv[:, sl] * gf
            ks.append(kj)
            vs.append(vj)
        k, v = concat(ks, axis=1), concat(vs, axis=1)
    q = rope(q, pos, m.nh, m.hd, m.theta)
    k = rope(k, pos, m.nkv, m.hd, m.theta)
    if kv_sink is not None:
        kv_sink(k, v)
    K_, V_ = kv_source() if kv_source is not None else (k, v)
    o = attention(m, q, K_, V_, pos if qpos is None else qpos)
    x = x + linear(o, W(pre + "self_attn.o_proj.weight"))
    mm = rmsnorm(x, W(pre + "post_attention_layernorm.weight"), m.eps)
    gg = linear(mm, W(pre + "mlp.gate_proj.weight"))
    x = x + linear(gg * sigmoid(gg) * linear(mm, W(pre + "mlp.up_proj.weight")), W(pre + "mlp.down_proj.weight"))
    return x


def head(m, x):
    fn = rmsnorm(x, m.W("model.norm.weight"), m.eps)
    return fn, linear(fn, m.lm_head())


def ce_sum(logits, targets, scored):
    """Sum of the cross-entropy of the scored rows, and their count."""
    rows = [r for r in range(logits.shape[0]) if scored[r]]
    if not rows:
        return V(0.0), 0
    lg = logits[np.array(rows)]
    mx = lg.v.max(axis=1, keepdims=True)
    lse = vlog(vsum(vexp(lg - mx), axis=1, keepdims=True)) + mx
    picked = lg[(np.arange(len(rows)), np.asarray(targets)[rows])]
    return vsum(lse) - vsum(picked), len(rows)


def mean_of(parts):
    """parts: [(sum, count)] over the sequences of a batch -> mean (0 when none)."""
    n = sum(c for _, c in parts)
    if n == 0:
        return V(0.0)
    tot = parts[0][0]
    for s, _ in parts[1:]:
        tot = tot + s
    return tot * (1.0 / n)

# ---- the three modes ----------------------------------------------------------


def shift_right(x):
    return concat([np.zeros((1, x.shape[1])), x[:-1]], axis=0)


def fuse(m, h, R, rec_rows):
    """Phi(h, R) on rows with control flow 2 (rec_rows 1.0), h elsewhere."""
    W = m.W
    u = linear(R, W("model.t2mlr.w_rec.weight"))
    z = concat([h, u], axis=1)
    gr = sigmoid(linear(z, W("model.t2mlr.f_rec.weight")) + W("model.t2mlr.f_rec.bias"))
    gc = sigmoid(linear(z, W("model.t2mlr.f_cur.weight")) + W("model.t2mlr.f_cur.bias"))
    phi = h + gr * u * vtanh(W("model.t2mlr.gamma_rec")) + gc * h * vtanh(W("model.t2mlr.gamma_cur"))
    r = rec_rows[:, None]
    return phi * r + h * (1.0 - r)


def update(m, y, R, rec_rows):
    """M_t = s(y + R) (factor constant) at flow 2 with cache_residual, else y."""
    rc = m.rec
    if not rc.get("cache_residual", True):
        return y
    vv = y + R
    clamp = rc.get("cache_norm_clamp", 5.0)
    f = 1.0 / np.sqrt(np.mean(vv.v * vv.v, axis=1, keepdims=True) + rc.get("cache_norm_eps", 1e-6))
    f = np.clip(f, 1.0 / clamp, clamp)  # a constant: no gradient through the statistic
    r = rec_rows[:, None]
    return vv * f * r + y * (1.0 - r)


def seq_plain(m, tok, pos):
    x = m.W("model.embed_tokens.weight")[np.asarray(tok)]
    for i in range(m.L):
        x = block(m, i, x, pos)
    return head(m, x)[1]


def seq_jacobi(m, tok, pos, flow, D, K):
    rc = m.rec
    ls, le = rc["l_start"], rc["l_end"]
    rec_rows = (np.asarray(flow) == 2).astype(np.float64)
    x = m.W("model.embed_tokens.weight")[np.asarray(tok)]
    for i in range(ls):
        x = block(m, i, x, pos)
    X = x
    y = X
    for i in range(ls, le + 1):
        y = block(m, i, y, pos)
    R = shift_right(y)
    if K < D:
        R = detach(R)
    for k in range(1, D):
        h = fuse(m, X, R, rec_rows)
        for i in range(ls, le + 1):
            h = block(m, i, h, pos)
        M = update(m, h, R, rec_rows)
        if D - 1 - (k - 1) > K:
            M = detach(M)
        R = shift_right(M)
    h = fuse(m, X, R, rec_rows)
    for i in range(ls, m.L):
        h = block(m, i, h, pos)
    return head(m, h)[1]


def seq_lrt(m, tok, tgt, scored, S):
    """Returns [(sum, count)] for L_0 and each L_s of one sequence."""
    rc = m.rec
    T = len(tok)
    src = rc["source_layer"]
    inj = range(rc["inject_start"], rc["inject_end"] + 1)
    E = m.W("model.embed_tokens.weight")
    pos = list(range(T))
    k0, v0 = [None] * m.L, [None] * m.L
    # 1. the pass with m = 0
    x = E[np.asarray(tok)]
    h0 = None
    for i in range(m.L):
        def sink(k, v, i=i):
            k0[i], v0[i] = k, v
        x = block(m, i, x, pos, mem=None, inject=i in inj, kv_sink=sink)
        if i == src:
            h0 = x
    fn, lg = head(m, x)
    if src < 0:
        h0 = fn
    parts = [ce_sum(lg, tgt, scored)]
    # 2. subsets in order, with write-back of k, v and h^(src)
    krec = [[None] * T for _ in range(m.L)]
    vrec = [[None] * T for _ in range(m.L)]
    hrec = [None] * T
    d = m.d
    for s in range(S):
        P = [t for t in range(T) if t % S == s]
        mem = stack([np.zeros(d) if t == 0 else (hrec[t - 1] if (t - 1) % S < s else h0[t - 1]) for t in P])
        x = E[np.asarray([tok[t] for t in P])]
        hs = None
        for i in range(m.L):
            def sink(k, v, i=i):
                for j, t in enumerate(P):
                    krec[i][t], vrec[i][t] = k[j], v[j]

            def source(i=i):
                K_ = stack([krec[i][p] if p % S <= s else k0[i][p] for p in range(T)])
                V_ = stack([vrec[i][p] if p % S <= s else v0[i][p] for p in range(T)])
                return K_, V_
            x = block(m, i, x, P, mem=mem, inject=i in inj, kv_sink=sink, kv_source=source, qpos=P)
            if i == src:
                hs = x
        fn, lg = head(m, x)
        if src < 0:
            hs = fn
        parts.append(ce_sum(lg, [tgt[t] for t in P], [scored[t] for t in P]))
        for j, t in enumerate(P):
            hrec[t] = hs[j]
    return parts


def batch_loss(m, mode, batch, a):
    toks, tgts, scored, flows = batch
    T = len(toks[0])
    pos = list(range(T))
    if mode == "lrt":
        per = [seq_lrt(m, toks[b], tgts[b], scored[b], a.lrt_subsets) for b in range(len(toks))]
        total = None
        for j in range(a.lrt_subsets + 1):
            L = mean_of([p[j] for p in per])
            total = L if total is None else total + L
        return total * (1.0 / (a.lrt_subsets + 1))
    parts = []
    for b in range(len(toks)):
        if mode == "jacobi":
            lg = seq_jacobi(m, toks[b], pos, flows[b], a.jacobi_iters, a.jacobi_grad_iters)
        else:
            lg = seq_plain(m, toks[b], pos)
        parts.append(ce_sum(lg, tgts[b], scored[b]))
    return mean_of(parts)

# ---- data (models.md §5, docs/training.md "Data files") -----------------------


def read_batch(path, B, T, step):
    ids = np.fromfile(path, dtype="<u4").astype(np.int64)
    stem = path[:-4] if path.endswith(".bin") else path
    n = len(ids)
    labels = np.fromfile(stem + ".labels", dtype="<u4").astype(np.int64) if os.path.exists(stem + ".labels") else ids
    mask = np.fromfile(stem + ".mask", dtype=np.uint8) if os.path.exists(stem + ".mask") else np.ones(n, np.uint8)
    flow = np.fromfile(stem + ".flow", dtype=np.uint8) if os.path.exists(stem + ".flow") else np.full(n, 2, np.uint8)
    toks, tgts, scored, flows = [], [], [], []
    for b in range(B):
        o = ((step * B + b) * T) % (n - T - 1)
        toks.append([int(t) for t in ids[o:o + T]])
        tgts.append([int(t) for t in labels[o + 1:o + T + 1]])
        scored.append([bool(x) for x in mask[o + 1:o + T + 1]])
        flows.append([int(x) for x in flow[o:o + T]])
    return toks, tgts, scored, flows


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--mode", choices=["plain", "jacobi", "lrt"], required=True)
    p.add_argument("--jacobi-iters", type=int, default=4)
    p.add_argument("--jacobi-grad-iters", type=int, default=2)
    p.add_argument("--lrt-subsets", type=int, default=2)
    p.add_argument("--step", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--out")
    p.add_argument("--check-fd", type=int, default=0)
    a = p.parse_args(argv)
    m = Model(a.model)
    batch = read_batch(a.data, a.batch, a.seq, a.step)
    loss = batch_loss(m, a.mode, batch, a)
    backward(loss)
    used = {k: (v.g if v.g is not None else np.zeros_like(v.v)) for k, v in m.p.items()}
    gn = float(np.sqrt(sum(float((g * g).sum()) for g in used.values())))
    res = {"loss": float(loss.v), "grad_norm": gn}
    if a.check_fd:
        rng = np.random.default_rng(7)
        worst = 0.0
        base = {k: v.v.copy() for k, v in m.p.items()}
        for _ in range(a.check_fd):
            dirs = {k: rng.standard_normal(v.shape) for k, v in base.items()}
            dot = sum(float((used[k] * dirs[k]).sum()) for k in base)
            h = 1e-6
            vals = []
            for sgn in (1, -1):
                for k in base:
                    m.p[k] = V(base[k] + sgn * h * dirs[k])
                vals.append(float(batch_loss(m, a.mode, batch, a).v))
            fd = (vals[0] - vals[1]) / (2 * h)
            worst = max(worst, abs(fd - dot) / max(abs(dot), 1e-8))
        for k in base:
            m.p[k] = V(base[k])
        res["fd_rel_err"] = worst
    if a.out:
        tensors = [(k, (m.arrays[k] - a.lr * used[k]).astype(np.float32)) for k in m.arrays]
        safetensors_py.write_file(a.out, tensors, "F32")
    json.dump(res, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
