#!/usr/bin/env bash
# The lookup probes of docs/experiments.md ("Variable assignment: the first
# hop"): can a plain model of the state recipe (d 64, 4 blocks, 4 heads) learn
# the one lookup every depth of var-assign starts with? Data with depth 0
# only (the query names a digit variable), K digit variables and 8 scored
# queries a record, in program order; the recipe's optimizer; the accuracy
# on a one-query test set (per depth) at each of STEPS.
# env: K (digit variables, 2), STD (init, 0.02), LR (2e-3), BATCH (32), STEPS ("500 1000
#      1500 2000"), SEED (11), W (build/var-probe);
#      FROM=DIR: start from that model's weights instead of a new init (the K
#      curriculum: FROM=the K=2 run's latest, then K=8); DEPTH ("0", or "1 2"
#      for depths 1..2) and DISTRACTORS (0) for the later stages;
#      TRAIN_ARGS (more `latent train` options, e.g. "--mode jacobi
#      --jacobi-iters 8 --jacobi-grad-iters 4" with FROM= a retrofitted
#      T2MLR model) and TAG (a name for the run, beside its settings).
set -eu
cd "$(dirname "$0")/../.."
L=build/latent K=${K:-2} STD=${STD:-0.02} LR=${LR:-2e-3} BATCH=${BATCH:-32} SEED=${SEED:-11} W=${W:-build/var-probe}
STEPS=${STEPS:-"500 1000 1500 2000"}
DEPTH=${DEPTH:-0} DISTRACTORS=${DISTRACTORS:-0}
read -r dlo dhi <<<"$DEPTH"; dhi=${dhi:-$dlo}
d=$W/k$K-d$dlo-$dhi-x$DISTRACTORS-s$SEED n=$d/std$STD-lr$LR-b$BATCH${FROM:+-from}${TAG:+-$TAG}
mkdir -p "$d"
if [ ! -s "$d/train.json" ]; then
    "$L" data var-assign --min-depth "$dlo" --max-depth "$dhi" --n-base "$K" --distractors "$DISTRACTORS" --queries 8 --order program --n-records 60000 \
        --seed "$SEED" --out "$d/train" --tokenizer-out "$d/tok" 2>/dev/null
    "$L" data var-assign --min-depth "$dlo" --max-depth "$dhi" --n-base "$K" --distractors "$DISTRACTORS" --order program --n-records 1000 \
        --seed $((SEED + 1000)) --out "$d/test" 2>/dev/null
fi
rec=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['record_len'])" "$d/train.json")
python3 models/tools/experiment_config.py "$d/config.json" 42 plain
rm -rf "$n.init" "$n.run"
if [ -n "${FROM:-}" ]; then cp -rL "$FROM" "$n.init"
else "$L" init --config "$d/config.json" --out "$n.init" --seed "$SEED" --tokenizer "$d/tok" --std "$STD" 2>/dev/null; fi
for s in $STEPS; do
    a=(--data "$d/train.bin" --out "$n.run" --seq "$rec" --batch "$BATCH" --steps "$s" --optimizer adamw --lr "$LR"
       --beta1 0.9 --beta2 0.98 --weight-decay 0.1 --warmup 100 --lr-schedule constant --grad-clip 1 --seed "$SEED"
       --threads 1 --eval-every 1000000 --keep 1 ${TRAIN_ARGS:-})
    if [ -d "$n.run/latest" ]; then a+=(--resume); else a+=(--model "$n.init"); fi
    "$L" train "${a[@]}" >"$n.log" 2>&1
    acc=$("$L" eval --model "$n.run/latest" --data "$d/test.bin" --json | python3 -c 'import json,sys; print(" ".join("%.3f" % r["accuracy"] for r in json.load(sys.stdin)["rows"]))')
    echo "K=$K std=$STD lr=$LR batch=$BATCH step $s: accuracy $acc"
done
