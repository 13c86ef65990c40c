#!/usr/bin/env bash
# LRT recipe search on S3 (issue 24 item 4, docs/experiments.md): the S3 task of `make experiment`
# (SEED, default 1; 60,000 records of 16, test 500 of 32), 3000 steps, the same
# optimizer; varies LRT's gamma init, source layer and S.
set -eu
cd "$(dirname "$0")/../.."; SEED=${SEED:-1}
L=build/latent W=build/lrt-search
d=$W/s3-seed$SEED
if [ ! -s $d/train.json ]; then
  mkdir -p $d
  $L data group --group s3 --len 16 --n-records 60000 --seed $SEED --out $d/train --tokenizer-out $d/tok 2>/dev/null
  $L data group --group s3 --len 32 --n-records 500 --seed $((SEED + 1000)) --out $d/test 2>/dev/null
fi
vocab=$(python3 -c "import json;print(json.load(open('$d/train.json'))['vocab_size'])")
rec=$(python3 -c "import json;print(json.load(open('$d/train.json'))['record_len'])")
run() { # name gamma source start end S
  local n=$1 g=$2 src=$3 a=$4 b=$5 S=$6
  [ -s $W/$n.eval.json ] && return 0
  python3 models/tools/experiment_config.py $W/$n.config.json $vocab lrt --lrt-source $src --lrt-inject $a,$b
  rm -rf $W/$n.init $W/$n.run
  $L init --config $W/$n.config.json --out $W/$n.init --seed $SEED --tokenizer $d/tok --gamma $g 2>/dev/null
  local t0=$(date +%s)
  /usr/bin/time -f "%U %S" -o $W/$n.cpu $L train --model $W/$n.init --data $d/train.bin --out $W/$n.run --seq $rec --batch 32 --steps 3000 \
    --optimizer adamw --lr 2e-3 --beta1 0.9 --beta2 0.98 --weight-decay 0.1 --warmup 100 --lr-schedule cosine --grad-clip 1 \
    --seed $SEED --threads 1 --precision bf16 --eval-every 100000 --mode lrt --lrt-subsets $S >$W/$n.train.log 2>&1 </dev/null
  echo "$(($(date +%s) - t0))" > $W/$n.wall
  $L eval --model $W/$n.run/latest --data $d/test.bin --json --bucket-width 1 > $W/$n.eval.json
  python3 - $W/$n.eval.json $W/$n.cpu $n <<'PY'
import json,sys
ev=json.load(open(sys.argv[1])); a={r["from"]:r["accuracy"] for r in ev["rows"] if r["from"]==r["to"]}
i=[a[k] for k in sorted(a) if k<=16]; o=[a[k] for k in sorted(a) if k>16]
cpu=sum(float(x) for x in open(sys.argv[2]).read().split()[-2:])
print("%-22s in %.3f worst %.3f | past %.3f worst %.3f | cpu %.0f s" % (sys.argv[3], sum(i)/len(i), min(i), sum(o)/len(o), min(o), cpu))
PY
}
if [ "$SEED" = 1 ]; then # the grid
  run seed1-base-g0.1-src2-S$rec 0.1 2 1 2 $rec
  run seed1-g1-src2-S$rec 1.0 2 1 2 $rec
  run seed1-g0.1-src3-S$rec 0.1 3 1 2 $rec
  run seed1-g0.1-src2-inj0-3-S$rec 0.1 2 0 3 $rec
  run seed1-g0.1-src2-S2 0.1 2 1 2 2
  run seed1-g0.1-src2-S4 0.1 2 1 2 4
else # other seeds: block 2 against block 3
  run seed$SEED-base-g0.1-src2-S$rec 0.1 2 1 2 $rec
  run seed$SEED-g0.1-src3-S$rec 0.1 3 1 2 $rec
fi
