#!/usr/bin/env bash
# The experiment's evidence, served: models/s3 (the S3 word-problem T2MLR model
# `make experiment` trains, docs/experiments.md) answers 50 records of its test
# set (records of 32 elements, twice its training length) through
# /v1/completions, and every answer equals `latent eval`'s offline prediction,
# so the served accuracy is the offline accuracy.
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../server/lib.sh"
model=${S3_MODEL:-$root/models/s3}
[ -s "$model/model.safetensors" ] || { echo "FAIL: $model has no model (make experiment writes it)"; exit 1; }

"$build/latent" data group --group s3 --len 32 --n-records 50 --seed 1001 --out "$tmp/test" 2>/dev/null
"$build/latent" eval --model "$model" --data "$tmp/test.bin" --show 50 >"$tmp/eval.txt" 2>&1
check "latent eval of 50 test records" grep -m1 "product    all" "$tmp/eval.txt"

start_server S3 "$model" || exit 1
check "served answers = latent eval, record by record" "$PY" "$root/tests/server/s3_client.py" "$URL_S3" "$tmp/test" \
    "$tmp/eval.txt" 50 "$model/tokenizer.json"
stop_server S3
check "clean exit" test "$STOP_RC" = 0
finish
