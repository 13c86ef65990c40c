#!/usr/bin/env bash
# Deterministic serving (docs/api.md, "Determinism"): a request's text and
# every logprob are the same bits sent alone and while 32 other streams of
# random lengths run, greedy and seeded at temperature 1; for T2MLR and the
# plain model, in f32 and bf16. Prompts are prefilled in 7-token chunks under
# load (whole when alone) and the prefix cache is off, so the request's rows
# really are computed in different batches and pieces. bf16 also on the
# amx-model path (the AMX tile kernel through its software model; on an AMX
# CPU the plain bf16 run is already the amx path).
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
LATENT_ISA=amx-model run T2MLR_BF16_AMX_MODEL "$model" --precision bf16
check "amx-model: named in the start-up log" grep -q "kernels amx-model" "$tmp/T2MLR_BF16_AMX_MODEL.log"

# Without the guarantee, no fingerprint promising it.
start_server ND "$model" --deterministic false || exit 1
check "--deterministic false: system_fingerprint is null" bash -c "curl -s $URL_ND/v1/completions -d '{\"prompt\":\"a\",\"max_tokens\":2}' |
    $PY -c 'import json,sys; r=json.load(sys.stdin); assert r[\"system_fingerprint\"] is None, r'"
check "--deterministic false: named in the start-up log" grep -q "not deterministic" "$tmp/ND.log"
stop_server ND

finish
