#!/usr/bin/env bash
# `latent init` and `latent retrofit`:
# - a retrofitted model (T2MLR; LRT per-block and shared; LRT residual-only and
#   KV-only) gives exactly the base model's logits when decoding token by token
#   (same kernels both ways: bit for bit), and the same logits to rounding in
#   one prefill; a BF16 base stays BF16 and stays exact;
# - init writes a loadable directory (config round trip, tokenizer copied),
#   the same seed gives the same weights, and a plain and a T2MLR init with one
#   seed share their backbone (same logits when the gammas are 0);
# - bad arguments are refused with a message, and an existing --out is
#   refused without --force and replaced with it.
# env: LATENT_BUILD (dir with `latent`), LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../harness.sh" retrofit


"$PY" "$ref/make_model.py" --out "$tmp/base" --kind plain --seed 11 --layers 4 >/dev/null
"$PY" "$ref/make_model.py" --out "$tmp/base16" --kind plain --seed 12 --layers 4 --dtype bf16 --untied >/dev/null
tokens=1,17,300,2,99,45,7,7,480,0,511,3,64,64,5,200,13
n_prompt=9

# logits MODEL OUT [--incremental]
logits() { "$latent" logits --model "$1" --tokens "$tokens" --n-prompt "$n_prompt" ${3:-} >"$2" 2>"$2.err"; }

# check_exact NAME BASE RETROFIT_ARGS...
check_retrofit() {
    local name=$1 base=$2; shift 2
    local dir=$tmp/$name
    if ! "$latent" retrofit --model "$tmp/$base" --out "$dir" --seed 7 "$@" 2>"$tmp/err"; then
        fail "retrofit $name: runs" "$(cat "$tmp/err")"; return
    fi
    logits "$tmp/$base" "$tmp/$base.inc" --incremental
    logits "$dir" "$tmp/$name.inc" --incremental
    if [ -s "$tmp/$name.inc" ] && cmp -s "$tmp/$base.inc" "$tmp/$name.inc"; then
        ok "retrofit $name: token-by-token logits equal the base's bit for bit"
    else
        fail "retrofit $name: token-by-token logits equal the base's bit for bit" \
            "$("$PY" "$ref/compare_logits.py" "$tmp/$name.inc" "$tmp/$base.inc" 0 2>&1)" "$(head -c 300 "$tmp/$name.inc.err")"
    fi
    # Prefill runs the recurrent window in waves of single rows where the base
    # batches them: equal up to F32 rounding, which bf16 rounding of the
    # activations (auto for BF16 checkpoints) would amplify to 1e-3; so f32 here.
    logits "$tmp/$base" "$tmp/$base.pre" "--precision f32"
    logits "$dir" "$tmp/$name.pre" "--precision f32"
    if out=$("$PY" "$ref/compare_logits.py" "$tmp/$name.pre" "$tmp/$base.pre" 1e-5 2>&1); then
        ok "retrofit $name: prefill logits equal the base's to rounding ($out)"
    else
        fail "retrofit $name: prefill logits equal the base's to rounding" "$out"
    fi
}

check_retrofit t2mlr base --t2mlr 1,2
check_retrofit t2mlr_all base --t2mlr 0,3 --recur-on-prompt 0
check_retrofit lrt base --lrt 2
check_retrofit lrt_shared base --lrt -1,1,3 --shared-kv
check_retrofit lrt_residual base --lrt 1,0,3 --no-kv-injection
check_retrofit lrt_kv base --lrt 3,2,3 --no-residual-injection
check_retrofit t2mlr_bf16 base16 --t2mlr 2,3
check_retrofit lrt_bf16 base16 --lrt 1

# The retrofitted files: recurrence block in config.json, gammas 0, dtype kept.
if out=$(REF=$ref "$PY" - "$tmp" <<'EOF'
import json, os, struct, sys
sys.path.insert(0, os.environ["REF"])
import safetensors_py as st
def dtypes(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    return {v["dtype"] for k, v in h.items() if k != "__metadata__"}
tmp = sys.argv[1]
c = json.load(open(os.path.join(tmp, "t2mlr", "config.json")))
r = c["latent_recurrence"]
assert r["type"] == "t2mlr" and r["l_start"] == 1 and r["l_end"] == 2, r
t = st.read_file(os.path.join(tmp, "t2mlr", "model.safetensors"))
assert float(t["model.t2mlr.gamma_rec"].flat[0]) == 0 and float(t["model.t2mlr.gamma_cur"].flat[0]) == 0
assert abs(t["model.t2mlr.w_rec.weight"]).max() > 0
t = st.read_file(os.path.join(tmp, "lrt", "model.safetensors"))
assert float(t["model.layers.0.lrt.alpha"].flat[0]) == 1 and float(t["model.layers.0.lrt.gamma"].flat[0]) == 0
assert abs(t["model.layers.0.lrt.k_proj.weight"]).max() == 0
dt = dtypes(os.path.join(tmp, "t2mlr_bf16", "model.safetensors"))
assert dt == {"BF16"}, dt
for f in ("tokenizer.json", "tokenizer_config.json"):
    assert open(os.path.join(tmp, "t2mlr", f)).read() == open(os.path.join(tmp, "base", f)).read(), f
print("ok")
EOF
); then ok "retrofit: config block, gammas 0, LRT alpha 1 gamma 0 k_proj 0, BF16 kept, tokenizer copied"
else fail "retrofit: config block, gammas 0, LRT alpha 1 gamma 0 k_proj 0, BF16 kept, tokenizer copied" "$out"; fi

# --- init -------------------------------------------------------------------
cat >"$tmp/plain.json" <<'EOF'
{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 520, "max_position_embeddings": 256,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": true,
 "bos_token_id": 1, "eos_token_id": 2}
EOF
sed 's/}$/, "latent_recurrence": {"type": "t2mlr", "l_start": 1, "l_end": 1}}/' "$tmp/plain.json" >"$tmp/t2.json"
sed 's/}$/, "latent_recurrence": {"type": "lrt", "source_layer": 1, "inject_start": 0, "inject_end": 2}}/' "$tmp/plain.json" >"$tmp/lrt.json"
if "$latent" init --config "$tmp/plain.json" --out "$tmp/i_plain" --seed 5 --tokenizer "$tmp/base" 2>"$tmp/err" &&
   "$latent" init --config "$tmp/plain.json" --out "$tmp/i_plain2" --seed 5 2>>"$tmp/err" &&
   "$latent" init --config "$tmp/t2.json" --out "$tmp/i_t2" --seed 5 --gamma 0 --tokenizer "$tmp/base" 2>>"$tmp/err" &&
   "$latent" init --config "$tmp/lrt.json" --out "$tmp/i_lrt" --seed 5 --dtype bf16 --tokenizer "$tmp/base" 2>>"$tmp/err"; then
    ok "init: plain, T2MLR and LRT directories written"
else
    fail "init: plain, T2MLR and LRT directories written" "$(cat "$tmp/err")"
fi
if cmp -s "$tmp/i_plain/model.safetensors" "$tmp/i_plain2/model.safetensors"; then
    ok "init: same seed, same weights"
else
    fail "init: same seed, same weights"
fi
logits "$tmp/i_plain" "$tmp/i_plain.inc" --incremental
logits "$tmp/i_t2" "$tmp/i_t2.inc" --incremental
if [ -s "$tmp/i_plain.inc" ] && cmp -s "$tmp/i_plain.inc" "$tmp/i_t2.inc"; then
    ok "init: plain and T2MLR (gammas 0) inits of one seed share the backbone"
else
    fail "init: plain and T2MLR (gammas 0) inits of one seed share the backbone" "$(head -c 300 "$tmp/i_t2.inc.err")"
fi
if out=$(REF=$ref "$PY" - "$tmp" <<'EOF'
import json, os, struct, sys
import numpy as np
sys.path.insert(0, os.environ["REF"])
import safetensors_py as st
def dtypes(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    return {v["dtype"] for k, v in h.items() if k != "__metadata__"}
tmp = sys.argv[1]
t = st.read_file(os.path.join(tmp, "i_plain", "model.safetensors"))
e = t["model.embed_tokens.weight"]
assert e.shape == (520, 64), e.shape
assert abs(e.std() - 0.02) < 0.002 and abs(e.mean()) < 0.002, (e.std(), e.mean())
o = t["model.layers.0.self_attn.o_proj.weight"]
assert abs(o.std() - 0.02 / np.sqrt(6)) < 0.002, o.std()
assert (t["model.layers.2.input_layernorm.weight"] == 1).all() and (t["model.norm.weight"] == 1).all()
assert "lm_head.weight" not in t
t = st.read_file(os.path.join(tmp, "i_lrt", "model.safetensors"))
assert dtypes(os.path.join(tmp, "i_lrt", "model.safetensors")) == {"BF16"}
assert float(t["model.layers.1.lrt.alpha"].flat[0]) == 1
assert abs(float(t["model.layers.1.lrt.gamma"].flat[0]) - 0.1) < 1e-3
assert (t["model.layers.1.lrt.gate.weight"] == 0).all()
assert abs(t["model.layers.1.lrt.k_proj.weight"]).max() > 0
c = json.load(open(os.path.join(tmp, "i_lrt", "config.json")))
assert c["latent_recurrence"]["type"] == "lrt" and c["vocab_size"] == 520
assert os.path.exists(os.path.join(tmp, "i_lrt", "tokenizer.json"))
assert not os.path.exists(os.path.join(tmp, "i_plain2", "tokenizer.json"))
assert not [f for f in os.listdir(tmp) if ".tmp-" in f], os.listdir(tmp)
print("ok")
EOF
); then ok "init: N(0, 0.02) matrices, scaled o_proj, norms 1, LRT alpha 1 gamma 0.1 gates 0, BF16, no temp dirs left"
else fail "init: N(0, 0.02) matrices, scaled o_proj, norms 1, LRT alpha 1 gamma 0.1 gates 0, BF16, no temp dirs left" "$out"; fi
if "$latent" generate --model "$tmp/i_t2" --prompt "hello" -n 4 >/dev/null 2>"$tmp/err"; then
    ok "init: the new model generates"
else
    fail "init: the new model generates" "$(cat "$tmp/err")"
fi

# --- refusals and --force -----------------------------------------------------
expect_fail() { # DESCRIPTION PATTERN -- command...
    local desc=$1 pat=$2; shift 3
    if "$@" >/dev/null 2>"$tmp/err"; then fail "$desc: exits non-zero"; return; fi
    if grep -qiE "$pat" "$tmp/err"; then ok "$desc"; else fail "$desc: stderr matches /$pat/" "$(cat "$tmp/err")"; fi
}
expect_fail "init: existing --out without --force" "already exists" -- "$latent" init --config "$tmp/plain.json" --out "$tmp/i_plain" --seed 1
expect_fail "init: missing --seed" "seed" -- "$latent" init --config "$tmp/plain.json" --out "$tmp/x"
expect_fail "init: vocab smaller than the tokenizer" "vocab_size" -- "$latent" init --config <(sed 's/520/100/' "$tmp/plain.json") --out "$tmp/x" --seed 1 --tokenizer "$tmp/base"
expect_fail "retrofit: window past the last block" "L_END" -- "$latent" retrofit --model "$tmp/base" --t2mlr 2,4 --out "$tmp/x" --seed 1
expect_fail "retrofit: both kinds" "exactly one" -- "$latent" retrofit --model "$tmp/base" --t2mlr 1,2 --lrt 1 --out "$tmp/x" --seed 1
expect_fail "retrofit: an already recurrent model" "already has" -- "$latent" retrofit --model "$tmp/t2mlr" --lrt 1 --out "$tmp/x" --seed 1
if "$latent" init --config "$tmp/plain.json" --out "$tmp/i_plain" --seed 6 --force 2>"$tmp/err" &&
   ! cmp -s "$tmp/i_plain/model.safetensors" "$tmp/i_plain2/model.safetensors" &&
   [ -z "$(ls "$tmp" | grep -F .tmp-)" ]; then
    ok "init --force replaces an existing directory (and leaves no temp dir)"
else
    fail "init --force replaces an existing directory (and leaves no temp dir)" "$(cat "$tmp/err")"
fi

echo "$((n - fails)) of $n checks passed"
[ "$fails" -eq 0 ]
