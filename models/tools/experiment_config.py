#!/usr/bin/env python3
"""The config.json of the experiments' small Llama models (`make experiment`,
`make experiment-state`, models/tools/lrt_search.sh, var_probe.sh): 4 blocks
of 4 heads, tied embeddings, RoPE 10000, 256 positions; optionally T2MLR's
recurrence over blocks 1..2 or LRT's memory injected into blocks 1..2.

usage: experiment_config.py OUT VOCAB KIND [--d 64] [--ff 256]
                            [--lrt-source 2] [--lrt-inject 1,2]
KIND: plain, t2mlr or lrt. VOCAB below 16 is raised to 16.
"""
import argparse
import json

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("out")
p.add_argument("vocab", type=int)
p.add_argument("kind", choices=["plain", "t2mlr", "lrt"])
p.add_argument("--d", type=int, default=64)
p.add_argument("--ff", type=int, default=256)
p.add_argument("--lrt-source", type=int, default=2)
p.add_argument("--lrt-inject", default="1,2")
a = p.parse_args()
c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
     "hidden_size": a.d, "intermediate_size": a.ff, "num_hidden_layers": 4, "num_attention_heads": 4,
     "num_key_value_heads": 4, "vocab_size": max(16, a.vocab), "max_position_embeddings": 256,
     "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
     "bos_token_id": 1, "eos_token_id": 2}
if a.kind == "t2mlr":
    c["latent_recurrence"] = {"type": "t2mlr", "l_start": 1, "l_end": 2, "cache_residual": True,
                              "cache_norm_clamp": 5.0, "cache_norm_eps": 1e-6, "recur_on_prompt": True}
elif a.kind == "lrt":
    start, end = (int(x) for x in a.lrt_inject.split(","))
    c["latent_recurrence"] = {"type": "lrt", "source_layer": a.lrt_source, "inject_start": start, "inject_end": end}
with open(a.out, "w") as f:
    json.dump(c, f, indent=1)
