#!/usr/bin/env python3
"""Independent float64 numpy reference for models.md §1-3 inference.

  reference.py --model DIR --tokens 1,2,3 [--n-prompt K]
      prints {"logits": [[...] per position]}: tokens [0, K) are the prompt
      (control flow 2 if recur_on_prompt else 1), the rest are generated
      tokens (control flow 2). Without --n-prompt every token is prompt.
  reference.py --model DIR (--tokens 1,2,3 | --prompt TEXT) --generate N [--stop-at-eos]
      prints {"tokens": [prompt ids + N greedy ids], "prompt_tokens": P,
              "generated": [...], "stopped_at_eos": bool, "text": decoded generated ids}
      (argmax, ties to the lowest id; with --stop-at-eos an eos id ends the
      output and is not included). Prompt tokens run as prompt (control flow
      per recur_on_prompt), generated ones with control flow 2.

Every token runs one sequential forward pass with a KV cache, exactly as
models.md states the recurrence (no parallel approximation anywhere).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe_py  # noqa: E402
import safetensors_py  # noqa: E402


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x) + eps) * w


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def bf16_round(x):
    """x rounded to the nearest bf16 (ties to even), via float32, as float64."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32).astype(np.float64)


def q8_round(x):
    """x as the q8 contract sees it (docs/model-format.md, "Int8 weights"):
    along the last axis in blocks of 32, in float32 as the engine computes,
    q = nearest-even(x * (127 / max|x|)) clamped to +-127, times max / 127;
    as float64. A block that is all zero (or below 1e-36) stays zero."""
    x = np.asarray(x, dtype=np.float32)
    k = x.shape[-1]
    nb = (k + 31) // 32
    b = np.zeros(x.shape[:-1] + (nb * 32,), np.float32)
    b[..., :k] = x
    b = b.reshape(x.shape[:-1] + (nb, 32))
    amax = np.abs(b).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = np.float32(127) / amax
        live = (amax > 0) & np.isfinite(inv)
        q = np.clip(np.rint(b * np.where(live, inv, np.float32(0))), -127, 127)
        s = np.where(live, amax / np.float32(127), np.float32(0))
    out = q.astype(np.float64) * s.astype(np.float64)
    return out.reshape(x.shape[:-1] + (nb * 32,))[..., :k]


# P: what a matrix product's input becomes. Identity in f32; under bf16
# (docs/model-format.md, "Precision") every input vector and every weight
# matrix is rounded to bf16 and the products are exact sums of those.
P = lambda x: x  # noqa: E731
# PKV: what a cached k or v row becomes (bf16 under --kv-dtype bf16).
PKV = lambda x: x  # noqa: E731


class Model:
    def __init__(self, d, precision="f32"):
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        self.c = c
        self.d = c["hidden_size"]
        self.L = c["num_hidden_layers"]
        self.nh = c["num_attention_heads"]
        self.nkv = c.get("num_key_value_heads", self.nh)
        self.hd = c.get("head_dim") or self.d // self.nh
        self.vocab = c["vocab_size"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.theta = c.get("rope_theta", 10000.0)
        self.tied = c.get("tie_word_embeddings", False)
        eos = c.get("eos_token_id")
        self.eos = set(eos if isinstance(eos, list) else ([] if eos is None else [eos]))
        self.rec = c.get("latent_recurrence")
        self.w = safetensors_py.read_model_dir(d)
        if precision == "bf16":
            self.w = {k: bf16_round(v) if v.ndim == 2 else v for k, v in self.w.items()}
        if precision == "q8":  # every matrix row quantized along K, the embedding too
            self.w = {k: q8_round(v) if v.ndim == 2 else v for k, v in self.w.items()}
        self.lm_head = self.w["model.embed_tokens.weight"] if self.tied else self.w["lm_head.weight"]
        self.tok_path = os.path.join(d, "tokenizer.json")

    def W(self, name):
        return self.w[name]

    def rope(self, x, pos):
        """x: (n_heads, head_dim); HF rotate_half: pairs (j, j + hd/2)."""
        half = self.hd // 2
        j = np.arange(half, dtype=np.float64)
        ang = pos * self.theta ** (-2.0 * j / self.hd)
        cos, sin = np.cos(ang), np.sin(ang)
        x1, x2 = x[:, :half], x[:, half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=1)


class Session:
    """Per-sequence state: KV cache per block, T2MLR R, LRT memory m."""

    def __init__(self, m):
        self.m = m
        self.k = [[] for _ in range(m.L)]  # per block: list of (nkv, hd)
        self.v = [[] for _ in range(m.L)]
        self.pos = 0
        self.R = np.zeros(m.d)      # R_{-1} = 0
        self.mem = np.zeros(m.d)    # m_{-1} = 0

    def step(self, token, cflow):
        """One token at position self.pos with control flow cflow (1 or 2); returns logits."""
        m = self.m
        W = m.W
        rec = m.rec or {}
        typ = rec.get("type")
        pos = self.pos
        x = W("model.embed_tokens.weight")[token].copy()
        hs = []
        R_prev = self.R
        m_prev = self.mem
        R_new = None
        if typ == "lrt":
            inj = range(rec["inject_start"], rec["inject_end"] + 1)
        for i in range(m.L):
            pre = "model.layers.%d." % i
            if typ == "t2mlr" and i == rec["l_start"] and cflow == 2:
                u = W("model.t2mlr.w_rec.weight") @ P(R_prev)
                z = np.concatenate([x, u])
                g_rec = sigmoid(W("model.t2mlr.f_rec.weight") @ P(z) + W("model.t2mlr.f_rec.bias"))
                g_cur = sigmoid(W("model.t2mlr.f_cur.weight") @ P(z) + W("model.t2mlr.f_cur.bias"))
                x = (x + np.tanh(W("model.t2mlr.gamma_rec")[0]) * g_rec * u
                     + np.tanh(W("model.t2mlr.gamma_cur")[0]) * g_cur * x)
            injected = typ == "lrt" and i in inj
            if injected and rec.get("residual_injection"):
                x = W(pre + "lrt.alpha")[0] * x + W(pre + "lrt.gamma")[0] * m_prev
            a = rmsnorm(x, W(pre + "input_layernorm.weight"), m.eps)
            q = (W(pre + "self_attn.q_proj.weight") @ P(a)).reshape(m.nh, m.hd)
            k = (W(pre + "self_attn.k_proj.weight") @ P(a)).reshape(m.nkv, m.hd)
            v = (W(pre + "self_attn.v_proj.weight") @ P(a)).reshape(m.nkv, m.hd)
            if injected and rec.get("kv_injection"):
                g = 2.0 * sigmoid(W(pre + "lrt.gate.weight") @ P(a))
                if rec.get("shared_kv_projection"):
                    K, V = W("model.lrt.k_proj.weight"), W("model.lrt.v_proj.weight")
                else:
                    K, V = W(pre + "lrt.k_proj.weight"), W(pre + "lrt.v_proj.weight")
                mk = (K @ P(m_prev)).reshape(m.nkv, m.hd)
                mv = (V @ P(m_prev)).reshape(m.nkv, m.hd)
                gl = g[:m.nkv, None]
                gf = g[m.nkv:, None]
                k = gl * k + gf * mk
                v = gl * v + gf * mv
            q = m.rope(q, pos)
            k = m.rope(k, pos)
            self.k[i].append(PKV(k))
            self.v[i].append(PKV(v))
            Ks = np.stack(self.k[i])  # (T, nkv, hd)
            Vs = np.stack(self.v[i])
            grp = m.nh // m.nkv
            o = np.zeros((m.nh, m.hd))
            for h in range(m.nh):
                kh = Ks[:, h // grp, :]
                s = kh @ q[h] / np.sqrt(m.hd)
                p = np.exp(s - s.max())
                p /= p.sum()
                o[h] = p @ Vs[:, h // grp, :]
            x = x + W(pre + "self_attn.o_proj.weight") @ P(o.reshape(-1))
            mm = rmsnorm(x, W(pre + "post_attention_layernorm.weight"), m.eps)
            x = x + W(pre + "mlp.down_proj.weight") @ P(
                silu(W(pre + "mlp.gate_proj.weight") @ P(mm)) * (W(pre + "mlp.up_proj.weight") @ P(mm)))
            hs.append(x)
            if typ == "t2mlr" and i == rec["l_end"]:
                y = x
                if cflow == 2 and rec.get("cache_residual", True):
                    vv = y + R_prev
                    clamp = rec.get("cache_norm_clamp", 5.0)
                    f = 1.0 / np.sqrt(np.mean(vv * vv) + rec.get("cache_norm_eps", 1e-6))
                    f = min(max(f, 1.0 / clamp), clamp)
                    R_new = vv * f
                else:
                    R_new = y.copy()
        fin = rmsnorm(x, W("model.norm.weight"), m.eps)
        logits = m.lm_head @ P(fin)
        if typ == "t2mlr":
            self.R = R_new
        if typ == "lrt":
            src = rec["source_layer"]
            self.mem = fin.copy() if src == -1 else hs[src].copy()
        self.pos += 1
        return logits


def prompt_flow(m):
    rec = m.rec or {}
    if rec.get("type") == "t2mlr" and not rec.get("recur_on_prompt", True):
        return 1
    return 2


def argmax_low(v):
    return int(np.argmax(v))  # numpy returns the first (lowest) index among ties


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--tokens")
    p.add_argument("--prompt", help="text, encoded with the reference's own BPE")
    p.add_argument("--n-prompt", type=int)
    p.add_argument("--generate", type=int)
    p.add_argument("--stop-at-eos", action="store_true")
    p.add_argument("--precision", choices=["f32", "bf16", "q8"], default="f32",
                   help="bf16: round every matrix and every product input to bf16 (the engine's contract); "
                        "q8: quantize them as --weights q8 does")
    p.add_argument("--kv-dtype", choices=["f32", "bf16"], default="f32",
                   help="bf16: round cached keys and values to bf16 as they are stored")
    a = p.parse_args(argv)
    global P, PKV
    if a.precision == "bf16":
        P = bf16_round
    if a.precision == "q8":
        P = q8_round
    if a.kv_dtype == "bf16":
        PKV = bf16_round
    m = Model(a.model, a.precision)
    if a.tokens is not None:
        toks = [int(t) for t in a.tokens.split(",") if t != ""]
    elif a.prompt is not None:
        toks = bpe_py.Tokenizer(m.tok_path).encode(a.prompt)
    else:
        p.error("need --tokens or --prompt")
    for t in toks:
        if not 0 <= t < m.vocab:
            p.error("token %d out of range" % t)
    sess = Session(m)
    pf = prompt_flow(m)
    if a.generate is None:
        k = len(toks) if a.n_prompt is None else a.n_prompt
        out = [sess.step(t, pf if i < k else 2) for i, t in enumerate(toks)]
        json.dump({"logits": [[float(x) for x in row] for row in out]}, sys.stdout)
        sys.stdout.write("\n")
        return 0
    if not toks:
        p.error("--generate needs at least one prompt token")
    logits = None
    for t in toks:
        logits = sess.step(t, pf)
    gen = []
    stopped = False
    for n in range(a.generate):
        nxt = argmax_low(logits)
        if a.stop_at_eos and nxt in m.eos:
            stopped = True  # the end-of-sequence id is not part of the output
            break
        gen.append(nxt)
        if n + 1 < a.generate:
            logits = sess.step(nxt, 2)
    res = {"tokens": toks + gen, "prompt_tokens": len(toks), "generated": gen, "stopped_at_eos": stopped}
    if os.path.exists(m.tok_path):
        tk = bpe_py.Tokenizer(m.tok_path)
        res["text"] = tk.decode(gen)
        res["text_skip_special"] = tk.decode(gen, skip_special=True)
        res["prompt_text"] = tk.decode(toks)
    json.dump(res, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
