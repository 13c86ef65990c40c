#!/usr/bin/env python3
"""Writes a small random Hugging Face-style model directory (models.md §4):
config.json, model.safetensors (or shards + index), tokenizer.json,
tokenizer_config.json, generation_config.json.

  make_model.py --out DIR --kind plain|t2mlr|lrt [--dtype f32|bf16|f16] [--shards N]
                [--seed S] [--d 64 --layers 4 --heads 4 --kv-heads 2 --ffn 96
                --vocab 512 --head-dim H --tied|--untied]
                [--t2mlr 1,2] [--recur-on-prompt 0|1] [--cache-residual 0|1]
                [--lrt-source 2 --lrt-inject 0,3 --lrt-shared
                 --residual-injection 0|1 --kv-injection 0|1] [--gammas nonzero|zero]

Token ids: <|endoftext|> = 0, <|im_start|> = 1, <|im_end|> = 2 (as SmolLM2-Instruct);
config.json has bos_token_id 1 and eos_token_id 2.

Random streams: the backbone tensors come from RandomState(seed) in a fixed
order that does not depend on --kind, and the recurrent tensors from
RandomState(seed + 1000003), so a t2mlr/lrt model and a plain model with the
same seed and sizes share the backbone bit for bit.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe_py  # noqa: E402
import safetensors_py  # noqa: E402

CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def int_pair(s):
    a, b = s.split(",")
    return int(a), int(b)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--kind", choices=["plain", "t2mlr", "lrt"], default="plain")
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=96)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--head-dim", type=int, default=0, help="0: d / heads, and no head_dim key in config")
    p.add_argument("--max-pos", type=int, default=2048)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--rms-eps", type=float, default=1e-5)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tied", dest="tied", action="store_true", default=True)
    g.add_argument("--untied", dest="tied", action="store_false")
    p.add_argument("--t2mlr", type=int_pair, default=(1, 2), help="l_start,l_end")
    p.add_argument("--recur-on-prompt", type=int, choices=[0, 1], default=1)
    p.add_argument("--cache-residual", type=int, choices=[0, 1], default=1)
    p.add_argument("--cache-norm-clamp", type=float, default=5.0)
    p.add_argument("--cache-norm-eps", type=float, default=1e-6)
    p.add_argument("--lrt-source", type=int, default=2)
    p.add_argument("--lrt-inject", type=int_pair, default=(0, 3), help="inject_start,inject_end")
    p.add_argument("--lrt-shared", action="store_true")
    p.add_argument("--residual-injection", type=int, choices=[0, 1], default=1)
    p.add_argument("--kv-injection", type=int, choices=[0, 1], default=1)
    p.add_argument("--gammas", choices=["nonzero", "zero"], default="nonzero")
    a = p.parse_args(argv)
    if a.head_dim == 0 and a.d % a.heads:
        p.error("--d must be divisible by --heads unless --head-dim is given")
    if a.heads % a.kv_heads:
        p.error("--heads must be a multiple of --kv-heads")
    if a.shards < 1:
        p.error("--shards must be >= 1")
    return a


def backbone_tensors(a, rng):
    """Backbone tensors in HF order, drawn from rng in an order independent of --kind."""
    d, hd = a.d, (a.head_dim or a.d // a.heads)
    qd, kvd = a.heads * hd, a.kv_heads * hd
    f32 = np.float32

    def mat(out, inp, std):
        return (rng.standard_normal((out, inp)) * std).astype(f32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(f32)

    t = [("model.embed_tokens.weight", mat(a.vocab, d, 1.5 / np.sqrt(d)))]
    for i in range(a.layers):
        pre = "model.layers.%d." % i
        t += [
            (pre + "self_attn.q_proj.weight", mat(qd, d, 0.6 / np.sqrt(d))),
            (pre + "self_attn.k_proj.weight", mat(kvd, d, 0.6 / np.sqrt(d))),
            (pre + "self_attn.v_proj.weight", mat(kvd, d, 0.7 / np.sqrt(d))),
            (pre + "self_attn.o_proj.weight", mat(d, qd, 0.7 / np.sqrt(qd))),
            (pre + "mlp.gate_proj.weight", mat(a.ffn, d, 1.0 / np.sqrt(d))),
            (pre + "mlp.up_proj.weight", mat(a.ffn, d, 1.0 / np.sqrt(d))),
            (pre + "mlp.down_proj.weight", mat(d, a.ffn, 0.7 / np.sqrt(a.ffn))),
            (pre + "input_layernorm.weight", norm(d)),
            (pre + "post_attention_layernorm.weight", norm(d)),
        ]
    t.append(("model.norm.weight", norm(d)))
    lm = mat(a.vocab, d, 1.5 / np.sqrt(d))  # always drawn, so tied/untied share the rest
    if not a.tied:
        t.append(("lm_head.weight", lm))
    return t


def recurrent_tensors(a, rng):
    d, hd = a.d, (a.head_dim or a.d // a.heads)
    kvd = a.kv_heads * hd
    f32 = np.float32
    t = []
    if a.kind == "t2mlr":
        zero = a.gammas == "zero"
        t += [
            ("model.t2mlr.w_rec.weight", (rng.standard_normal((d, d)) * 1.0 / np.sqrt(d)).astype(f32)),
            ("model.t2mlr.f_cur.weight", (rng.standard_normal((d, 2 * d)) * 1.0 / np.sqrt(2 * d)).astype(f32)),
            ("model.t2mlr.f_cur.bias", (rng.standard_normal(d) * 0.5).astype(f32)),
            ("model.t2mlr.f_rec.weight", (rng.standard_normal((d, 2 * d)) * 1.0 / np.sqrt(2 * d)).astype(f32)),
            ("model.t2mlr.f_rec.bias", (rng.standard_normal(d) * 0.5).astype(f32)),
            ("model.t2mlr.gamma_cur", np.array([0.0 if zero else 0.5], f32)),
            ("model.t2mlr.gamma_rec", np.array([0.0 if zero else 0.7], f32)),
        ]
    elif a.kind == "lrt":
        s, e = a.lrt_inject
        for i in range(s, e + 1):
            pre = "model.layers.%d.lrt." % i
            if a.residual_injection:
                t.append((pre + "alpha", np.array([1.0 + 0.1 * rng.standard_normal()], f32)))
                t.append((pre + "gamma", np.array([0.1 + 0.2 * rng.random()], f32)))
            if a.kv_injection:
                t.append((pre + "gate.weight", (rng.standard_normal((2 * a.kv_heads, d)) * 0.15).astype(f32)))
                if not a.lrt_shared:
                    t.append((pre + "k_proj.weight", (rng.standard_normal((kvd, d)) * 0.6 / np.sqrt(d)).astype(f32)))
                    t.append((pre + "v_proj.weight", (rng.standard_normal((kvd, d)) * 0.6 / np.sqrt(d)).astype(f32)))
        if a.kv_injection and a.lrt_shared:
            t.append(("model.lrt.k_proj.weight", (rng.standard_normal((kvd, d)) * 0.6 / np.sqrt(d)).astype(f32)))
            t.append(("model.lrt.v_proj.weight", (rng.standard_normal((kvd, d)) * 0.6 / np.sqrt(d)).astype(f32)))
    return t


def config_json(a):
    c = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": a.d,
        "intermediate_size": a.ffn,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "vocab_size": a.vocab,
        "max_position_embeddings": a.max_pos,
        "rms_norm_eps": a.rms_eps,
        "rope_theta": a.rope_theta,
        "tie_word_embeddings": a.tied,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[a.dtype],
    }
    if a.head_dim:
        c["head_dim"] = a.head_dim
    if a.kind == "t2mlr":
        c["latent_recurrence"] = {
            "type": "t2mlr", "l_start": a.t2mlr[0], "l_end": a.t2mlr[1],
            "cache_residual": bool(a.cache_residual), "cache_norm_clamp": a.cache_norm_clamp,
            "cache_norm_eps": a.cache_norm_eps, "recur_on_prompt": bool(a.recur_on_prompt)}
    elif a.kind == "lrt":
        c["latent_recurrence"] = {
            "type": "lrt", "source_layer": a.lrt_source,
            "inject_start": a.lrt_inject[0], "inject_end": a.lrt_inject[1],
            "residual_injection": bool(a.residual_injection), "kv_injection": bool(a.kv_injection),
            "shared_kv_projection": bool(a.lrt_shared)}
    return c


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    tensors = backbone_tensors(a, np.random.RandomState(a.seed))
    tensors += recurrent_tensors(a, np.random.RandomState(a.seed + 1000003))
    dt = {"f32": "F32", "bf16": "BF16", "f16": "F16"}[a.dtype]

    if a.shards == 1:
        safetensors_py.write_file(os.path.join(a.out, "model.safetensors"), tensors, dt)
    else:
        per = -(-len(tensors) // a.shards)
        groups = [tensors[i * per:(i + 1) * per] for i in range(a.shards)]
        wm, total = {}, 0
        for k, grp in enumerate(groups):
            fn = "model-%05d-of-%05d.safetensors" % (k + 1, a.shards)
            total += safetensors_py.write_file(os.path.join(a.out, fn), grp, dt)
            for name, _ in grp:
                wm[name] = fn
        write_json(os.path.join(a.out, "model.safetensors.index.json"),
                   {"metadata": {"total_size": total}, "weight_map": wm})

    write_json(os.path.join(a.out, "config.json"), config_json(a))
    vocab, merges = bpe_py.train(a.vocab)
    write_json(os.path.join(a.out, "tokenizer.json"), bpe_py.tokenizer_json(vocab, merges))
    write_json(os.path.join(a.out, "tokenizer_config.json"), {
        "add_prefix_space": False,
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "model_max_length": a.max_pos,
        "clean_up_tokenization_spaces": False,
        "tokenizer_class": "GPT2Tokenizer",
        "chat_template": CHAT_TEMPLATE,
    })
    write_json(os.path.join(a.out, "generation_config.json"),
               {"bos_token_id": 1, "eos_token_id": 2, "do_sample": False})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
