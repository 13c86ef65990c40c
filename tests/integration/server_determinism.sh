#!/usr/bin/env bash
# Deterministic serving (docs/api.md, "Determinism"): a request's text and
# every logprob are the same bits sent alone and while 32 other streams of
# random lengths run, greedy and seeded at temperature 1; for T2MLR and the
# plain model, in f32 and bf16. Prompts are prefilled in 7-token chunks under
# load (whole when alone) and the prefix cache is off, so the request's rows
# really are computed in different batches and pieces.
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../server/lib.sh"
test_models 7

run() {
    local name=$1 model=$2; shift 2
    start_server "$name" "$model" --prefix-cache 0 --prefill-chunk 7 --step-tokens 96 "$@" || { fail "$name: start"; return; }
    local url=URL_$name
    check "$name: alone = under load, bit for bit" "$PY" "$client" determinism "${!url}" 32
    stop_server "$name"
}
run T2MLR_F32 "$model" --precision f32
run T2MLR_BF16 "$model" --precision bf16
run PLAIN_F32 "$tmp/plain" --precision f32

finish
