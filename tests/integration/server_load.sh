#!/usr/bin/env bash
# latentd under concurrency and abuse: 64 concurrent streams give the texts
# the same requests give one at a time (greedy), also when a small KV pool
# forces preemptions, n > 1 forks of one prompt state, overload answered with 429 + Retry-After within a bounded number of
# live sessions, clients leaving in the queue / mid-prefill / mid-decode leave
# no session behind (checked via /metrics), malformed HTTP and JSON answered
# while the server keeps serving, and prefix reuse equal to a cold start.
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../server/lib.sh"
test_models 7

# A small step budget makes concurrent requests mix decode tokens and prefill chunks in one step.
start_server A "$model" --step-tokens 48 --prefill-chunk 8 --max-sessions 64 || exit 1
check "64 concurrent streams equal one at a time" "$PY" "$client" concurrency "$URL_A" 64
for c in 1 8 32; do
    check "one event per token, $c streams" "$PY" "$client" events-per-token "$URL_A" $c
done
check "one event per token, 8 chat streams" "$PY" "$client" events-per-token "$URL_A" 8 1
check "curl -N: one event per token" bash -c "curl -sN -m 60 $URL_A/v1/completions -d '{\"prompt\":\"hello\",\"max_tokens\":32,\"ignore_eos\":true,\"stream\":true,\"logprobs\":1,\"stream_options\":{\"include_usage\":true}}' |
    $PY -c 'import json,sys
evs=[json.loads(l[6:]) for l in sys.stdin if l.startswith(\"data: {\")]
n=[len((e[\"choices\"][0].get(\"logprobs\") or {}).get(\"tokens\") or []) for e in evs if e.get(\"choices\")]
u=[e[\"usage\"] for e in evs if e.get(\"usage\")][0]
assert max(n) == 1 and sum(n) == u[\"completion_tokens\"] == 32, (n, u)
print(sum(n), \"events\")'"
check "a stream whose client does not read pauses, then finishes" "$PY" "$client" backpressure "$URL_A"
check "n > 1 forks the prompt state" "$PY" "$client" n-equal "$URL_A"
check "malformed HTTP and JSON" "$PY" "$client" malformed "$URL_A"
stop_server A
check "clean exit after the abuse" test "$STOP_RC" = 0

# A pool too small for every sequence to finish at once: the youngest are
# preempted (back to the queue, recomputed later) and the texts do not change.
start_server P "$model" --kv-pool-mib 1 || exit 1
check "preemption under a small KV pool keeps the texts" "$PY" "$client" concurrency "$URL_P" 6 300 100
preempted=$(metric "$URL_P" latentd_preemptions_total)
check "sequences were preempted ($preempted)" "$PY" -c "assert $preempted >= 1"
stop_server P

# Few slots, a short queue, a small pool: overload must turn into 429s, not memory.
start_server B "$model" --max-sessions 2 --queue-len 3 --kv-pool-mib 4 --keepalive-seconds 0.2 || exit 1
check "overload: 429 with Retry-After, bounded sessions" "$PY" "$client" overload "$URL_B" 24 5
used=$(metric "$URL_B" latentd_kv_pages_used); total=$(metric "$URL_B" latentd_kv_pages_total)
check "KV pages used never exceed the pool ($used of $total)" "$PY" -c "assert 0 <= $used <= $total"
stop_server B

# Clients that leave: a slow step (tiny budget) keeps a long prompt in prefill
# for a while; a long context lets one request hold the only slot for a while.
"$PY" "$root/tests/ref/make_model.py" --out "$tmp/long" --kind t2mlr --seed 2 --max-pos 4096 >/dev/null
start_server C "$tmp/long" --max-sessions 1 --step-tokens 2 --prefill-chunk 2 --keepalive-seconds 0.05 --max-tokens 4000 || exit 1
check "client leaves mid-prefill" "$PY" "$client" disconnect "$URL_C" prefill
check "client leaves mid-decode (stream)" "$PY" "$client" disconnect "$URL_C" decode
check "client leaves mid-decode (non-streaming)" "$PY" "$client" disconnect "$URL_C" decode-nonstream
check "client leaves while queued (after keep-alive comments)" "$PY" "$client" disconnect "$URL_C" queue
cancelled=$(metric "$URL_C" latentd_cancelled_sequences_total)
check "cancelled sequences were counted ($cancelled)" "$PY" -c "assert $cancelled >= 4"
check "aborted requests counted as 499" bash -c "curl -s -m 5 $URL_C/metrics | grep -q 'status=\"499\"'"
stop_server C

# Prefix reuse vs a cold start, for a recurrent and a plain model.
for m in "$model" "$tmp/plain"; do
    start_server W "$m" --page-tokens 8 || exit 1
    start_server K "$m" --page-tokens 8 --prefix-cache 0 || exit 1
    check "prefix reuse equals a cold start ($(basename "$m"))" "$PY" "$client" prefix "$URL_W" "$URL_K"
    stop_server W; stop_server K
done

finish
