#!/usr/bin/env python3
"""Writes a GGUF file shaped like the engine's standard benchmark model
(SmolLM2-135M: d 576, 30 blocks, 9 heads, 3 KV heads, FFN 1536, vocab 49152,
tied embeddings) with random weights, F32 or BF16, so that llama.cpp's
llama-bench measures the same shape in the same run (docs/benchmarks.md).
It uses the gguf-py package of a llama.cpp checkout (nothing is downloaded;
llama.cpp itself is built outside this repository).

usage: clients/make_gguf.py LLAMA_CPP_DIR OUT.gguf f32|bf16"""
import os
import sys
import types

if len(sys.argv) != 4 or sys.argv[3] not in ("f32", "bf16"):
    sys.exit(__doc__)
llama, out, dt = sys.argv[1:]
sys.path.insert(0, os.path.join(llama, "gguf-py"))
# gguf-py imports sentencepiece for vocab conversion this script does not use
sys.modules.setdefault("sentencepiece", types.SimpleNamespace(SentencePieceProcessor=object))
import numpy as np  # noqa: E402
import gguf  # noqa: E402

d, L, H, KV, F, V, hd = 576, 30, 9, 3, 1536, 49152, 64
w = gguf.GGUFWriter(out, "llama")
w.add_context_length(8192)
w.add_embedding_length(d)
w.add_block_count(L)
w.add_feed_forward_length(F)
w.add_head_count(H)
w.add_head_count_kv(KV)
w.add_rope_freq_base(100000.0)
w.add_layer_norm_rms_eps(1e-5)
w.add_vocab_size(V)
w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if dt == "bf16" else gguf.LlamaFileType.ALL_F32)
# a BPE vocabulary llama.cpp accepts (it needs one merge); llama-bench feeds random ids
w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("default")
w.add_token_list(["a", "b", "ab"] + ["<t%d>" % i for i in range(3, V)])
w.add_token_types([1] * V)
w.add_token_merges(["a b"])
w.add_bos_token_id(1)
w.add_eos_token_id(2)
rng = np.random.default_rng(1)


def add_matrix(name, rows, cols):
    a = (rng.standard_normal((rows, cols), dtype=np.float32) / np.sqrt(cols)).astype(np.float32)
    if dt == "bf16":
        w.add_tensor(name, gguf.quants.quantize(a, gguf.GGMLQuantizationType.BF16), raw_dtype=gguf.GGMLQuantizationType.BF16)
    else:
        w.add_tensor(name, a)


add_matrix("token_embd.weight", V, d)
w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
for layer in range(L):
    p = "blk.%d." % layer
    w.add_tensor(p + "attn_norm.weight", np.ones(d, dtype=np.float32))
    w.add_tensor(p + "ffn_norm.weight", np.ones(d, dtype=np.float32))
    add_matrix(p + "attn_q.weight", H * hd, d)
    add_matrix(p + "attn_k.weight", KV * hd, d)
    add_matrix(p + "attn_v.weight", KV * hd, d)
    add_matrix(p + "attn_output.weight", d, H * hd)
    add_matrix(p + "ffn_gate.weight", F, d)
    add_matrix(p + "ffn_up.weight", F, d)
    add_matrix(p + "ffn_down.weight", d, F)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", out)
