#!/usr/bin/env bash
# The four ways an attacker took latentd down, each reproduced with small
# limits: one request crashing it (n above max-sessions), a listener that
# went deaf after every connection closed at max-connections, connection
# slots held by clients that had already hung up (and by one address's
# slowloris), and request smuggling shapes. Attackers use 127.0.0.2; every
# socket stays on loopback. env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../server/lib.sh"
attack=$root/tests/server/attack.py
test_models 5

# --- one request must not crash the server --------------------------------------------------
start_server A "$model" --max-sessions 4 --queue-len 4 --max-connections 8 --timeout-seconds 3 \
    --max-connections-per-client 0 || exit 1
U=$URL_A
for body in '{"prompt":"a","n":5}' '{"prompt":["a","b","c"],"n":3}' '{"prompt":"a","n":65}'; do
    check "completions $body: 400, server alive" bash -c "[ \$(curl -s -m 30 -o /dev/null -w '%{http_code}' $U/v1/completions -d '$body') = 400 ] &&
        [ \$(curl -s -m 5 -o /dev/null -w '%{http_code}' $U/health) = 200 ]"
done
check "chat n=5: 400, server alive" bash -c "[ \$(curl -s -m 30 -o /dev/null -w '%{http_code}' $U/v1/chat/completions \
    -d '{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"n\":5}') = 400 ] && [ \$(curl -s -m 5 -o /dev/null -w '%{http_code}' $U/health) = 200 ]"
check "n equal to max-sessions still served" bash -c "[ \$(curl -s -m 60 -o /dev/null -w '%{http_code}' $U/v1/completions -d '{\"prompt\":\"a\",\"n\":4,\"max_tokens\":2}') = 200 ]"

# --- the listener must come back after every connection closed at the limit --------------------
check "deaf: 8 idle connections at max-connections 8 timed out together" "$PY" "$attack" deaf "$U" 8 5
check "deaf: 8 clients at max-connections 8 hung up together" "$PY" "$attack" deaf-hangup "$U" 8
stop_server A

# --- clients that hung up free their slot at once ---------------------------------------------
start_server B "$model" --max-connections 64 --max-connections-per-client 0 --timeout-seconds 60 || exit 1
check "1100 hit-and-run connections, max-connections 64, no per-client limit" "$PY" "$attack" hit-and-run "$URL_B" 1100
stop_server B
start_server C "$model" || exit 1
check "1100 hit-and-run connections from one address, default limits" "$PY" "$attack" hit-and-run "$URL_C" 1100
# Bodies over 16 KiB are parsed and tokenized off the loop thread: the same answers.
"$PY" - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
json.dump({"prompt": "Hello", "max_tokens": 4, "temperature": 0}, open(d + "/small.json", "w"))
open(d + "/padded.json", "w").write('{"prompt": "Hello", "max_tokens": 4, "temperature": 0' + " " * 40000 + "}")
json.dump({"prompt": "lorem ipsum " * 300000, "max_tokens": 1}, open(d + "/huge.json", "w"))
json.dump({"prompt": "x", "max_tokens": "many", "pad": "y" * 30000}, open(d + "/badbig.json", "w"))
json.dump({"prompt": "Hello", "max_tokens": 2, "temperature": 0, "pad": "z" * 1500000}, open(d + "/big.json", "w"))
PY
check "a 40 KB body (parsed off the loop) answers as a small one" bash -c "
    a=\$(curl -s -m 30 $URL_C/v1/completions --data-binary @$tmp/small.json | $PY -c 'import json,sys; print(json.load(sys.stdin)[\"choices\"][0][\"text\"])');
    b=\$(curl -s -m 30 $URL_C/v1/completions --data-binary @$tmp/padded.json | $PY -c 'import json,sys; print(json.load(sys.stdin)[\"choices\"][0][\"text\"])');
    [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]"
check "a 3.6 MB prompt: 400 context_length_exceeded, refused before tokenizing" bash -c "curl -s -m 60 $URL_C/v1/completions --data-binary @$tmp/huge.json |
    grep context_length_exceeded | grep -q 'at least'"
check "6 big bodies at once (one lane of the pool, in order) and a 40 KB one beside them: all answered" bash -c "
    for i in 1 2 3 4 5 6; do curl -s -m 60 -o $tmp/big\$i.out $URL_C/v1/completions --data-binary @$tmp/big.json & done;
    curl -s -m 0.3 -o /dev/null $URL_C/v1/completions --data-binary @$tmp/big.json; curl -s -m 0.3 -o /dev/null $URL_C/v1/completions --data-binary @$tmp/big.json;
    a=\$(curl -s -m 30 $URL_C/v1/completions --data-binary @$tmp/padded.json | $PY -c 'import json,sys; print(json.load(sys.stdin)[\"choices\"][0][\"text\"])');
    wait; [ -n \"\$a\" ] && for i in 1 2 3 4 5 6; do grep -q '\"choices\"' $tmp/big\$i.out || exit 1; done"
check "a big body with a bad field: 400 naming it" bash -c "curl -s -m 30 $URL_C/v1/completions --data-binary @$tmp/badbig.json | grep -q max_tokens"
check "clients leaving while their big prompts are tokenized" bash -c "
    for i in 1 2 3 4 5 6; do curl -s -m 0.2 -o /dev/null $URL_C/v1/completions --data-binary @$tmp/huge.json; done;
    sleep 2; [ \$(curl -s -m 5 -o /dev/null -w '%{http_code}' $URL_C/health) = 200 ]"
stop_server C
[ "$STOP_RC" = 0 ] && ok "exit 0 after big bodies" || fail "exit status after big bodies: $STOP_RC"

# --- one address cannot take every slot; framing that smuggles is refused ------------------------
start_server D "$model" --max-connections 64 --max-connections-per-client 16 --timeout-seconds 60 || exit 1
check "slowloris from one address: capped at 16, others served" "$PY" "$attack" slowloris "$URL_D" 200 16
check "smuggling shapes: 400/501/413, connection closed, nothing smuggled served" "$PY" "$attack" smuggle "$URL_D"
check "too many request headers: 431" "$PY" "$attack" header-flood "$URL_D"
check "server still serves after the attacks" bash -c "[ \$(curl -s -m 30 -o /dev/null -w '%{http_code}' $URL_D/v1/completions -d '{\"prompt\":\"a\",\"max_tokens\":2}') = 200 ]"
stop_server D
[ "$STOP_RC" = 0 ] && ok "drained and exited 0 after the attacks" || fail "exit status after the attacks: $STOP_RC"

# --- fairness: one client cannot take every slot and queue place -------------------------------
start_server E "$model" --api-key ka --api-key kb --max-sessions 4 --queue-len 8 --max-sequences-per-client 4 || exit 1
curl -s -m 60 -o /dev/null "$URL_E/v1/completions" -H "Authorization: Bearer ka" \
    -d '{"prompt":"a","n":4,"max_tokens":2000,"ignore_eos":true}' & hog=$!
for i in $(seq 1 50); do [ "$(metric "$URL_E" latentd_sessions)" = 4 ] && break; sleep 0.1; done
check "a client at its limit gets 429 naming it" bash -c "[ \$(curl -s -m 10 -o $tmp/q.json -w '%{http_code}' $URL_E/v1/completions \
    -H 'Authorization: Bearer ka' -d '{\"prompt\":\"a\",\"max_tokens\":2}') = 429 ] && grep -q 'this client' $tmp/q.json"
check "another client is still served" bash -c "[ \$(curl -s -m 60 -o /dev/null -w '%{http_code}' $URL_E/v1/completions \
    -H 'Authorization: Bearer kb' -d '{\"prompt\":\"a\",\"max_tokens\":2}') = 200 ]"
kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null
for i in $(seq 1 50); do [ "$(metric "$URL_E" latentd_sessions)" = 0 ] && break; sleep 0.1; done
check "the client's quota is given back when its request ends" bash -c "[ \$(curl -s -m 60 -o /dev/null -w '%{http_code}' $URL_E/v1/completions \
    -H 'Authorization: Bearer ka' -d '{\"prompt\":\"a\",\"n\":4,\"max_tokens\":2}') = 200 ]"
stop_server E

# metric_at_least URL NAME MIN: the metric is there and at least MIN.
metric_at_least() {
    local v; v=$(metric "$1" "$2")
    [ -n "$v" ] && awk -v v="$v" -v m="$3" 'BEGIN { exit !(v + 0 >= m + 0) }' || { echo "$2 = '$v', want >= $3"; return 1; }
}

# --- part 2: a client that does not read, drip-fed headers from many addresses, held bodies ------
start_server F "$model" --max-sessions 8 --max-sequences-per-client 8 --stream-stall-seconds 6 || exit 1
check "sequences above the per-client cap: 400 naming the cap, not 429" bash -c "[ \$(curl -s -m 10 -o $tmp/n.json -w '%{http_code}' \
    $URL_F/v1/completions -d '{\"prompt\":[\"a\",\"b\"],\"n\":5,\"max_tokens\":1}') = 400 ] && grep -q 'max-sequences-per-client' $tmp/n.json"
check "a non-reading n=8 stream does not keep the others' slots" "$PY" "$attack" nonreader "$URL_F" 8 15
check "a stream whose client reads nothing is cancelled at stream-stall-seconds" "$PY" "$attack" stall "$URL_F" 8 6
check "...and counted" metric_at_least "$URL_F" latentd_stream_stalls_total 1
check "paused streams gave their slots to others" metric_at_least "$URL_F" latentd_paused_preemptions_total 1
stop_server F
[ "$STOP_RC" = 0 ] && ok "exit 0 after non-reading streams" || fail "exit status after non-reading streams: $STOP_RC"

start_server G "$model" --max-connections 48 --header-timeout-seconds 4 || exit 1
check "drip-fed headers from 6 addresses x 10 connections, max-connections 48" "$PY" "$attack" drip "$URL_G" 6 10 30
check "...closed by the header deadline" metric_at_least "$URL_G" latentd_http_header_timeouts_total 1
check "...and by evictions at max-connections" metric_at_least "$URL_G" latentd_http_evictions_total 1
stop_server G

start_server H "$model" --max-body-buffer-mib 32 --body-timeout-seconds 5 || exit 1
check "40 held 4 MiB bodies, max-body-buffer-mib 32: RSS bounded, others served" "$PY" "$attack" body-hold "$URL_H" "$PID_H" 40 4 48 5
check "...503 past the budget, counted" metric_at_least "$URL_H" latentd_http_body_buffer_refusals_total 1
check "...and every body's memory is given back" bash -c "[ \"\$(curl -s -m 5 $URL_H/metrics | awk '\$1 == \"latentd_http_body_buffer_bytes\" { print \$2 }')\" = 0 ]"
stop_server H
[ "$STOP_RC" = 0 ] && ok "exit 0 after held bodies" || fail "exit status after held bodies: $STOP_RC"
finish
