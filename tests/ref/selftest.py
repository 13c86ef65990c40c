#!/usr/bin/env python3
"""Sanity checks of the reference against itself (no C engine needed):
  - sequential KV-cache forward == an independent whole-sequence (batched,
    causal-mask) forward for plain models, incl. GQA and head_dim != d/heads;
  - T2MLR with gammas 0 == the plain model of the same seed (exactly);
  - LRT with alpha 1, gamma 0, gates 0, memory projections 0 == plain;
  - T2MLR with recur_on_prompt false: an all-prompt run == the plain model;
  - T2MLR fed a Jacobi fixed point: D >= T parallel iterations == sequential;
  - bf16 round-to-nearest-even, safetensors round trip, sharded == single;
  - the BPE encodes and decodes round trip.
Exit status 0 when all pass.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import bpe_py  # noqa: E402
import reference  # noqa: E402
import safetensors_py  # noqa: E402

failures = []


def check(name, ok, detail=""):
    print("%s %s %s" % ("ok  " if ok else "FAIL", name, detail))
    if not ok:
        failures.append(name)


def make(out, *args):
    subprocess.check_call([sys.executable, os.path.join(here, "make_model.py"), "--out", out] + list(args))
    return reference.Model(out)


def run_seq(m, toks, n_prompt=None):
    s = reference.Session(m)
    pf = reference.prompt_flow(m)
    k = len(toks) if n_prompt is None else n_prompt
    return np.array([s.step(t, pf if i < k else 2) for i, t in enumerate(toks)])


def rms_rows(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def block_batched(m, i, X, pos):
    """Block i over a whole (T, d) sequence with a causal mask."""
    W = m.W
    pre = "model.layers.%d." % i
    T = X.shape[0]
    A = rms_rows(X, W(pre + "input_layernorm.weight"), m.eps)
    Q = (A @ W(pre + "self_attn.q_proj.weight").T).reshape(T, m.nh, m.hd)
    K = (A @ W(pre + "self_attn.k_proj.weight").T).reshape(T, m.nkv, m.hd)
    V = (A @ W(pre + "self_attn.v_proj.weight").T).reshape(T, m.nkv, m.hd)
    half = m.hd // 2
    inv = m.theta ** (-np.arange(half) * 2.0 / m.hd)
    ang = pos[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, axis=1)[:, None, :]

    def rot(x):
        return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    Q = Q * cos + rot(Q) * sin
    K = K * cos + rot(K) * sin
    rep = m.nh // m.nkv
    K = np.repeat(K, rep, axis=1)
    V = np.repeat(V, rep, axis=1)
    S = np.einsum("thd,shd->hts", Q, K) / np.sqrt(m.hd)
    S = S + np.triu(np.full((T, T), -np.inf), 1)[None]
    P = np.exp(S - S.max(-1, keepdims=True))
    P /= P.sum(-1, keepdims=True)
    O = np.einsum("hts,shd->thd", P, V).reshape(T, -1)
    X = X + O @ W(pre + "self_attn.o_proj.weight").T
    M = rms_rows(X, W(pre + "post_attention_layernorm.weight"), m.eps)
    G = M @ W(pre + "mlp.gate_proj.weight").T
    U = M @ W(pre + "mlp.up_proj.weight").T
    return X + (G / (1 + np.exp(-G)) * U) @ W(pre + "mlp.down_proj.weight").T


def logits_batched(m, X):
    return rms_rows(X, m.W("model.norm.weight"), m.eps) @ m.lm_head.T


def plain_batched(m, toks):
    X = m.W("model.embed_tokens.weight")[toks]
    pos = np.arange(len(toks), dtype=np.float64)
    for i in range(m.L):
        X = block_batched(m, i, X, pos)
    return logits_batched(m, X)


def t2mlr_jacobi(m, toks, D):
    """models.md §2 Jacobi with every c_t = 2, D iterations, as plain numpy."""
    rec = m.rec
    W = m.W
    ls, le = rec["l_start"], rec["l_end"]
    X = m.W("model.embed_tokens.weight")[toks]
    pos = np.arange(len(toks), dtype=np.float64)
    for i in range(ls):
        X = block_batched(m, i, X, pos)
    Xs = X

    def phi(H, R):
        U = R @ W("model.t2mlr.w_rec.weight").T
        Z = np.concatenate([H, U], axis=1)
        gr = 1 / (1 + np.exp(-(Z @ W("model.t2mlr.f_rec.weight").T + W("model.t2mlr.f_rec.bias"))))
        gc = 1 / (1 + np.exp(-(Z @ W("model.t2mlr.f_cur.weight").T + W("model.t2mlr.f_cur.bias"))))
        return H + np.tanh(W("model.t2mlr.gamma_rec")[0]) * gr * U + np.tanh(W("model.t2mlr.gamma_cur")[0]) * gc * H

    def middle(H):
        for i in range(ls, le + 1):
            H = block_batched(m, i, H, pos)
        return H

    def shift(Y):
        return np.concatenate([np.zeros((1, Y.shape[1])), Y[:-1]], axis=0)

    def s(v):
        c = rec["cache_norm_clamp"]
        f = 1 / np.sqrt(np.mean(v * v, axis=1, keepdims=True) + rec["cache_norm_eps"])
        return v * np.clip(f, 1 / c, c)

    R = shift(middle(Xs))
    for _ in range(1, D):
        Y = middle(phi(Xs, R))
        M = s(Y + R) if rec["cache_residual"] else Y
        R = shift(M)
    H = phi(Xs, R)
    for i in range(ls, m.L):
        H = block_batched(m, i, H, pos)
    return logits_batched(m, H)


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def main():
    tmp = tempfile.mkdtemp(prefix="latent-ref-selftest-")
    toks = [5, 100, 200, 300, 7, 8, 400, 9, 33]

    # bf16 rounding
    v = np.array([1.0, 1.00390625, 1.01171875, 1.0 + 2 ** -9, 1.0 + 3 * 2 ** -9, -2.5], np.float32)
    got = safetensors_py.bf16_bits_to_f32(safetensors_py.f32_to_bf16_bits(v))
    want = np.array([1.0, 1.0, 1.015625, 1.0, 1.0078125, -2.5], np.float32)
    check("bf16 round-to-nearest-even", np.array_equal(got, want), str(got))

    for name, args in [("plain tied", []), ("plain untied", ["--untied"]),
                       ("gqa head_dim 24", ["--head-dim", "24", "--heads", "4", "--kv-heads", "1"]),
                       ("mha", ["--kv-heads", "4"])]:
        m = make(os.path.join(tmp, name.replace(" ", "_")), "--seed", "11", *args)
        a, b = run_seq(m, toks), plain_batched(m, toks)
        check("sequential == batched: " + name, rel(a, b) < 1e-12, "rel %.3g" % rel(a, b))

    for dt in ["f32", "bf16", "f16"]:
        d1 = os.path.join(tmp, "rt_" + dt)
        make(d1, "--seed", "5", "--dtype", dt)
        got = safetensors_py.read_file(os.path.join(d1, "model.safetensors"))["model.layers.1.mlp.up_proj.weight"]
        # regenerate the float32 source values and round them the same way
        import make_model
        a = make_model.parse_args(["--out", d1, "--seed", "5"])
        src = dict(make_model.backbone_tensors(a, np.random.RandomState(5)))["model.layers.1.mlp.up_proj.weight"]
        exp = safetensors_py.stored_values(src, dt.upper())
        check("safetensors round trip " + dt, np.array_equal(got, exp))
    m1 = make(os.path.join(tmp, "one"), "--seed", "9", "--kind", "lrt")
    m3 = make(os.path.join(tmp, "three"), "--seed", "9", "--kind", "lrt", "--shards", "3")
    check("sharded == single", set(m1.w) == set(m3.w) and all(np.array_equal(m1.w[k], m3.w[k]) for k in m1.w))

    plain = make(os.path.join(tmp, "p"), "--seed", "3")
    lp = run_seq(plain, toks)
    t0 = make(os.path.join(tmp, "t0"), "--seed", "3", "--kind", "t2mlr", "--gammas", "zero")
    check("t2mlr gammas 0 == plain", np.array_equal(run_seq(t0, toks), lp))
    tn = make(os.path.join(tmp, "tn"), "--seed", "3", "--kind", "t2mlr")
    lt = run_seq(tn, toks)
    check("t2mlr gammas != 0 differs from plain", rel(lt, lp) > 1e-2, "rel %.3g" % rel(lt, lp))
    tf = make(os.path.join(tmp, "tf"), "--seed", "3", "--kind", "t2mlr", "--recur-on-prompt", "0")
    check("t2mlr recur_on_prompt false, all prompt == plain", np.array_equal(run_seq(tf, toks), lp))
    lg = run_seq(tf, toks, n_prompt=4)
    check("t2mlr recur_on_prompt false, n_prompt 4: prompt rows == plain, generated differ",
          np.array_equal(lg[:4], lp[:4]) and rel(lg[4:], lp[4:]) > 1e-2)
    check("t2mlr recur_on_prompt true: n_prompt does not matter",
          np.array_equal(run_seq(tn, toks, n_prompt=3), lt))
    for nm, extra in [("cache_residual", []), ("no cache_residual", ["--cache-residual", "0"]),
                      ("l_start 0", ["--t2mlr", "0,3"]), ("l_start == l_end", ["--t2mlr", "2,2"])]:
        mm = make(os.path.join(tmp, "tj" + str(len(nm)) + nm.replace(" ", "")), "--seed", "4",
                  "--kind", "t2mlr", *extra)
        seq = run_seq(mm, toks)
        jac = t2mlr_jacobi(mm, toks, len(toks))
        jac1 = t2mlr_jacobi(mm, toks, 1)
        check("t2mlr Jacobi D=T == sequential (%s)" % nm, rel(jac, seq) < 1e-10,
              "rel %.3g (D=1: %.3g)" % (rel(jac, seq), rel(jac1, seq)))

    for nm, extra in [("per-block", []), ("shared", ["--lrt-shared"]), ("source -1", ["--lrt-source", "-1"]),
                      ("residual only", ["--kv-injection", "0"]), ("kv only", ["--residual-injection", "0"])]:
        lm = make(os.path.join(tmp, "l" + nm.replace(" ", "")), "--seed", "3", "--kind", "lrt", *extra)
        ll = run_seq(lm, toks)
        check("lrt %s differs from plain" % nm, rel(ll, lp) > 1e-2, "rel %.3g" % rel(ll, lp))
        for k in list(lm.w):
            if k.endswith("lrt.alpha"):
                lm.w[k] = np.ones(1)
            elif k.endswith("lrt.gamma") or "lrt.gate" in k or ("lrt" in k and "proj" in k):
                lm.w[k] = np.zeros_like(lm.w[k])
        check("lrt %s neutral weights == plain" % nm, rel(run_seq(lm, toks), lp) < 1e-13)

    tk = bpe_py.Tokenizer(os.path.join(tmp, "p", "tokenizer.json"))
    for text in ["hello", "The quick brown fox jumps over the lazy dog.", "  spaces  and\nnewlines\n\n",
                 "<|im_start|>user\nhi<|im_end|>", "caf\u00e9 \u00fcber 2024!", "x'll we've"]:
        ids = tk.encode(text)
        check("bpe round trip %r" % text, tk.decode(ids) == text, str(ids))
    ids = tk.encode("The quick brown fox")
    check("bpe merges apply", len(ids) < len("The quick brown fox") / 2, str(ids))

    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
