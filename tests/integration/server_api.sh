#!/usr/bin/env bash
# latentd over HTTP with curl: every endpoint, every error status with the
# OpenAI error shape, authentication, CORS, the body limit, the unix socket,
# config file vs flags, the chat-template start-up check, greedy and seeded
# output equal to `latent generate`, SIGHUP log reopening, sd_notify, and the
# SIGTERM drain (exit 0). Every server runs on 127.0.0.1 and a free port.
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../server/lib.sh"
test_models 5
"$PY" "$root/tests/ref/make_model.py" --out "$tmp/lrt" --kind lrt --seed 6 >/dev/null

start_server A "$model" --api-key k1 --api-key k2 --cors-origin http://app.example --max-body-bytes 20000 \
    --log-file "$tmp/A.file.log" || exit 1
U=$URL_A
AUTH=(-H "Authorization: Bearer k2")

# code METHOD PATH [curl args...]: the HTTP status
code() { local m=$1 p=$2; shift 2; curl -s -m 30 -o "$tmp/body" -w '%{http_code}' -X "$m" "$U$p" "$@"; }
# expect_error STATUS TYPE METHOD PATH [curl args]: status and the error shape
expect_error() {
    local want=$1 type=$2 m=$3 p=$4; shift 4
    local got; got=$(code "$m" "$p" "$@")
    if [ "$got" = "$want" ] && "$PY" - "$tmp/body" "$type" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["error"]
assert set(e) == {"message", "type", "param", "code"}, e
assert e["type"] == sys.argv[2] and e["message"], e
PY
    then ok "$m $p -> $want $type"; else fail "$m $p: want $want $type, got $got" "$(head -c 300 "$tmp/body")"; fi
}

# --- open endpoints ---------------------------------------------------------------
check "GET /health 200" bash -c "[ \$(curl -s -m 5 -o $tmp/h -w '%{http_code}' $U/health) = 200 ] && grep -q '\"ok\"' $tmp/h"
check "GET /metrics (Prometheus text)" bash -c "curl -s -m 5 -D $tmp/mh $U/metrics > $tmp/m && grep -qi 'content-type: text/plain; version=0.0.4' $tmp/mh &&
    grep -q '^# TYPE latentd_requests_total counter' $tmp/m && grep -q '^latentd_time_to_first_token_seconds_bucket{le=\"+Inf\"}' $tmp/m &&
    grep -q '^latentd_kv_pages_free ' $tmp/m && grep -q '^latentd_engine_recurrence_share ' $tmp/m"

# --- authentication ------------------------------------------------------------------
expect_error 401 invalid_request_error GET /v1/models
expect_error 401 invalid_request_error GET /v1/models -H "Authorization: Bearer nope"
expect_error 401 invalid_request_error POST /v1/completions -d '{"prompt":"x"}' -H "Authorization: Basic k1"
check "Bearer k1 and k2 both accepted" bash -c "[ \$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer k1' $U/v1/models) = 200 ] &&
    [ \$(curl -s -m 5 -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer k2' $U/v1/models) = 200 ]"

# --- models --------------------------------------------------------------------------
check "GET /v1/models lists the served model" bash -c "curl -s -m 5 ${AUTH[*]@Q} $U/v1/models | $PY -c '
import json, sys; d = json.load(sys.stdin)
assert d[\"object\"] == \"list\" and d[\"data\"][0][\"id\"] == \"t2mlr\" and d[\"data\"][0][\"object\"] == \"model\", d'"
check "GET /v1/models/t2mlr" bash -c "[ \$(curl -s -m 5 -o /dev/null -w '%{http_code}' ${AUTH[*]@Q} $U/v1/models/t2mlr) = 200 ]"
expect_error 404 invalid_request_error GET /v1/models/other "${AUTH[@]}"

# --- routes and methods ----------------------------------------------------------------
expect_error 404 invalid_request_error GET /nope "${AUTH[@]}"
expect_error 404 invalid_request_error POST /v1/completionsx "${AUTH[@]}" -d '{}'
expect_error 405 invalid_request_error GET /v1/completions "${AUTH[@]}"
expect_error 405 invalid_request_error DELETE /v1/chat/completions "${AUTH[@]}"
expect_error 405 invalid_request_error POST /health
check "405 carries Allow" bash -c "curl -s -m 5 -D - -o /dev/null -X PUT ${AUTH[*]@Q} $U/tokenize | grep -qi '^Allow: POST'"
expect_error 404 invalid_request_error POST /v1/completions "${AUTH[@]}" -d '{"prompt":"x","model":"gpt-4"}'
expect_error 400 invalid_request_error POST /v1/completions "${AUTH[@]}" -d '{"prompt":"x","temperature":"hot"}'
expect_error 400 invalid_request_error POST /v1/chat/completions "${AUTH[@]}" -d '{"messages":[{"role":"user"'
head -c 30000 /dev/zero | tr '\0' 'a' > "$tmp/big"
expect_error 413 invalid_request_error POST /v1/completions "${AUTH[@]}" --data-binary "@$tmp/big"
expect_error 413 invalid_request_error POST /v1/completions "${AUTH[@]}" --data-binary "@$tmp/big" -H "Transfer-Encoding: chunked"

# --- CORS -------------------------------------------------------------------------------------
check "CORS preflight" bash -c "curl -s -m 5 -D - -o /dev/null -X OPTIONS -H 'Origin: http://app.example' $U/v1/chat/completions |
    tr -d '\r' | grep -q '^Access-Control-Allow-Origin: http://app.example' &&
    curl -s -m 5 -D - -o /dev/null -X OPTIONS -H 'Origin: http://app.example' $U/v1/chat/completions | grep -qi 'Access-Control-Allow-Headers: Authorization'"
check "CORS header for an allowed origin only" bash -c "curl -s -m 5 -D - -o /dev/null -H 'Origin: http://app.example' $U/health | grep -qi 'Access-Control-Allow-Origin' &&
    ! curl -s -m 5 -D - -o /dev/null -H 'Origin: http://evil.example' $U/health | grep -qi 'Access-Control-Allow-Origin'"

# --- tokenize / detokenize -------------------------------------------------------------------------
check "POST /tokenize equals latent tokenize" bash -c "a=\$(curl -s -m 5 ${AUTH[*]@Q} $U/tokenize -d '{\"prompt\":\"The quick brown fox\"}' | $PY -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])');
    b=\$(printf 'The quick brown fox' | $build/latent tokenize --model $model | $PY -c 'import json,sys; print(json.load(sys.stdin))'); [ \"\$a\" = \"\$b\" ] || { echo \"\$a vs \$b\"; false; }"
check "POST /tokenize with messages applies the chat template" bash -c "curl -s -m 5 ${AUTH[*]@Q} $U/tokenize -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' |
    $PY -c 'import json,sys; t = json.load(sys.stdin)[\"tokens\"]; assert t[0] == 1 and 2 in t, t'"
check "POST /detokenize round trip" bash -c "curl -s -m 5 ${AUTH[*]@Q} $U/detokenize -d '{\"tokens\":[1,100,200,2]}' | $PY -c '
import json,sys; p = json.load(sys.stdin)[\"prompt\"]; assert p.startswith(\"<|im_start|>\") and p.endswith(\"<|im_end|>\"), p'"
expect_error 400 invalid_request_error POST /detokenize "${AUTH[@]}" -d '{"tokens":[1,100000]}'
expect_error 400 invalid_request_error POST /tokenize "${AUTH[@]}" -d '{"prompt":5}'

# --- completions and chat: shapes ---------------------------------------------------------------------
check "completion object shape" bash -c "curl -s -m 30 ${AUTH[*]@Q} $U/v1/completions -d '{\"prompt\":\"hello\",\"max_tokens\":5,\"temperature\":0,\"model\":\"t2mlr\"}' | $PY -c '
import json,sys; d = json.load(sys.stdin)
assert d[\"object\"] == \"text_completion\" and d[\"id\"].startswith(\"cmpl-\") and d[\"model\"] == \"t2mlr\" and isinstance(d[\"created\"], int), d
c = d[\"choices\"][0]; assert set(c) >= {\"index\", \"text\", \"logprobs\", \"finish_reason\"} and c[\"finish_reason\"] in (\"stop\", \"length\"), c
u = d[\"usage\"]; assert u[\"prompt_tokens\"] == 3 and u[\"total_tokens\"] == u[\"prompt_tokens\"] + u[\"completion_tokens\"], u'"
check "chat completion object shape" bash -c "curl -s -m 30 ${AUTH[*]@Q} $U/v1/chat/completions -d '{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],\"max_completion_tokens\":4}' | $PY -c '
import json,sys; d = json.load(sys.stdin)
assert d[\"object\"] == \"chat.completion\" and d[\"id\"].startswith(\"chatcmpl-\"), d
m = d[\"choices\"][0][\"message\"]; assert m[\"role\"] == \"assistant\" and isinstance(m[\"content\"], str), m
assert d[\"usage\"][\"completion_tokens\"] <= 4'"
check "streamed chat: role first, deltas, [DONE], SSE headers" bash -c "curl -s -m 30 -N -D $tmp/sh ${AUTH[*]@Q} $U/v1/chat/completions -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":6,\"stream\":true,\"stream_options\":{\"include_usage\":true}}' > $tmp/s &&
    tr -d '\r' < $tmp/sh | grep -qi '^content-type: text/event-stream' && tr -d '\r' < $tmp/sh | grep -qi '^x-accel-buffering: no' && $PY -c '
import json,sys; ev = [l[6:] for l in open(sys.argv[1]).read().split(\"\n\") if l.startswith(\"data: \")]
assert ev[-1] == \"[DONE]\", ev[-1]; js = [json.loads(e) for e in ev[:-1]]
assert js[0][\"choices\"][0][\"delta\"][\"role\"] == \"assistant\", js[0]
assert all(j[\"object\"] == \"chat.completion.chunk\" for j in js)
assert js[-1][\"choices\"] == [] and js[-1][\"usage\"][\"completion_tokens\"] >= 1, js[-1]
assert js[-2][\"choices\"][0][\"finish_reason\"] in (\"stop\", \"length\"), js[-2]' $tmp/s"
check "completions: list of prompts, token ids, id lists; choice indexes" bash -c "curl -s -m 30 ${AUTH[*]@Q} $U/v1/completions -d '{\"prompt\":[[1,5,9],[7,7]],\"max_tokens\":3,\"n\":2}' | $PY -c '
import json,sys; d = json.load(sys.stdin); assert sorted(c[\"index\"] for c in d[\"choices\"]) == [0,1,2,3], d; assert d[\"usage\"][\"prompt_tokens\"] == 5, d[\"usage\"]' &&
    curl -s -m 30 ${AUTH[*]@Q} $U/v1/completions -d '{\"prompt\":[\"a\",\"b\",\"c\"],\"max_tokens\":2}' | $PY -c 'import json,sys; assert len(json.load(sys.stdin)[\"choices\"]) == 3'"
check "echo with logprobs (prompt logprobs, first null)" bash -c "curl -s -m 30 ${AUTH[*]@Q} $U/v1/completions -d '{\"prompt\":\"hello world\",\"max_tokens\":3,\"echo\":true,\"logprobs\":2,\"temperature\":0}' | $PY -c '
import json,sys; c = json.load(sys.stdin)[\"choices\"][0]; lp = c[\"logprobs\"]
assert c[\"text\"].startswith(\"hello world\"), c[\"text\"]
assert lp[\"token_logprobs\"][0] is None and lp[\"top_logprobs\"][0] is None and len(lp[\"tokens\"]) >= 4, lp
assert all(len(t) <= 2 for t in lp[\"top_logprobs\"][1:]) and lp[\"text_offset\"][0] == 0'"
check "chat logprobs with top_logprobs" bash -c "curl -s -m 30 ${AUTH[*]@Q} $U/v1/chat/completions -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3,\"logprobs\":true,\"top_logprobs\":3,\"temperature\":0}' | $PY -c '
import json,sys; c = json.load(sys.stdin)[\"choices\"][0][\"logprobs\"][\"content\"]
assert len(c) >= 1 and all(len(t[\"top_logprobs\"]) == 3 and t[\"logprob\"] <= 0 and isinstance(t[\"bytes\"], list) for t in c), c
assert c[0][\"logprob\"] == c[0][\"top_logprobs\"][0][\"logprob\"]'"
check "max_tokens 0 gives an empty length-finished completion" bash -c "curl -s -m 30 ${AUTH[*]@Q} $U/v1/completions -d '{\"prompt\":\"x\",\"max_tokens\":0}' | $PY -c '
import json,sys; c = json.load(sys.stdin)[\"choices\"][0]; assert c[\"text\"] == \"\" and c[\"finish_reason\"] == \"length\", c'"
check "logit_bias forces a token" bash -c "curl -s -m 30 ${AUTH[*]@Q} $U/v1/completions -d '{\"prompt\":\"x\",\"max_tokens\":4,\"logit_bias\":{\"100\":100},\"ignore_eos\":true}' > $tmp/lb &&
    want=\$(curl -s -m 5 ${AUTH[*]@Q} $U/detokenize -d '{\"tokens\":[100,100,100,100]}' | $PY -c 'import json,sys; print(json.load(sys.stdin)[\"prompt\"])');
    got=\$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"choices\"][0][\"text\"])' $tmp/lb); [ \"\$got\" = \"\$want\" ] || { echo \"\$got vs \$want\"; false; }"
check "error fields naming the parameter" env PYTHONDONTWRITEBYTECODE=1 "$PY" -c "
import sys; sys.path.insert(0, '$root/tests/server'); import client
client.post.__defaults__
orig = client.request
def authed(url, method, path, body=None, headers=None, **kw):
    h = {'Authorization': 'Bearer k1'}; h.update(headers or {}); return orig(url, method, path, body, h, **kw)
client.request = authed
client.cmd_errors('$U')"

stop_server A
check "SIGTERM with nothing running: exit 0" test "$STOP_RC" = 0
check "--log-file got the request lines" grep -q 'path=/v1/completions status=200' "$tmp/A.file.log"

# --- greedy / seeded output equals latent generate ----------------------------------------------------------
for kind in t2mlr plain lrt; do
    dir=$model; [ $kind != t2mlr ] && dir=$tmp/$kind
    start_server G "$dir" --step-tokens 7 --prefill-chunk 3 || { fail "server on $kind"; continue; }
    for prompt in "hello" "The quick brown fox jumps over the lazy dog"; do
        "$build/latent" generate --model "$dir" --prompt "$prompt" -n 24 --temperature 0 > "$tmp/gen.txt" 2>/dev/null
        "$PY" "$client" text "$URL_G" "$prompt" 24 "$tmp/srv.txt"
        printf '\n' >> "$tmp/srv.txt"
        if cmp -s "$tmp/gen.txt" "$tmp/srv.txt"; then ok "greedy $kind '$prompt' equals latent generate"
        else fail "greedy $kind '$prompt'" "generate: $(od -c "$tmp/gen.txt" | head -3)" "server:   $(od -c "$tmp/srv.txt" | head -3)"; fi
    done
    "$build/latent" generate --model "$dir" --prompt "Once upon" -n 20 --temperature 0.9 --seed 42 > "$tmp/gen.txt" 2>/dev/null
    "$PY" "$client" text "$URL_G" "Once upon" 20 "$tmp/srv.txt" '{"temperature": 0.9, "seed": 42}'
    printf '\n' >> "$tmp/srv.txt"
    if cmp -s "$tmp/gen.txt" "$tmp/srv.txt"; then ok "seed 42 temperature 0.9 on $kind equals latent generate --seed 42"
    else fail "seeded $kind" "generate: $(head -c 200 "$tmp/gen.txt")" "server:   $(head -c 200 "$tmp/srv.txt")"; fi
    stop_server G
done

# --- unix socket, config file vs flags --------------------------------------------------------------------------
cat > "$tmp/latentd.conf" <<CONF
# a test config
model = $model
served-model-name = from-file
max_sessions = 3
log-level = "debug"
CONF
"$latentd" --config "$tmp/latentd.conf" --unix "$tmp/sock" --served-model-name from-flag > "$tmp/U.log" 2>&1 &
upid=$!; SERVER_PIDS+=("$upid")
for i in $(seq 1 100); do curl -s -m 1 --unix-socket "$tmp/sock" http://x/health 2>/dev/null | grep -q ok && break; sleep 0.1; done
check "unix socket serves /health" bash -c "curl -s -m 5 --unix-socket $tmp/sock http://x/health | grep -q ok"
check "flags win over the config file" bash -c "curl -s -m 5 --unix-socket $tmp/sock http://x/v1/models | grep -q '\"from-flag\"'"
check "config file applies (debug log level)" grep -q ' debug ' "$tmp/U.log"
check "completion over the unix socket" bash -c "curl -s -m 30 --unix-socket $tmp/sock http://x/v1/completions -d '{\"prompt\":\"hi\",\"max_tokens\":3}' | grep -q text_completion"
kill -TERM "$upid"; wait "$upid"; urc=$?
check "unix server exits 0 and removes its socket" bash -c "[ $urc = 0 ] && [ ! -e $tmp/sock ]"

# --- start-up errors -------------------------------------------------------------------------------------------
startup_fail() { # NAME PATTERN ARGS...
    local name=$1 pat=$2; shift 2
    local rc=0
    timeout 20 "$latentd" "$@" --host 127.0.0.1 --port 0 > "$tmp/sf.log" 2>&1 || rc=$?
    if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -Eqi -- "$pat" "$tmp/sf.log"; then ok "$name (exit $rc: $(grep -Ei -- "$pat" "$tmp/sf.log" | head -n 1 | cut -c1-120))"
    else fail "$name: exit $rc" "$(head -c 400 "$tmp/sf.log")"; fi
}
cp -r "$model" "$tmp/weird"
"$PY" - "$tmp/weird/tokenizer_config.json" <<'PY'
import json, sys
p = sys.argv[1]; c = json.load(open(p)); c["chat_template"] = "{% for m in messages %}[[{{ m.content }}]]{% endfor %}"
json.dump(c, open(p, "w"))
PY
startup_fail "unknown chat template is a start-up error" "chat-template" --model "$tmp/weird"
start_server W "$tmp/weird" --chat-template plain && {
    check "--chat-template plain overrides an unknown template" bash -c "curl -s -m 30 $URL_W/v1/chat/completions -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}' | grep -q chat.completion"
    stop_server W; }
# What each template renders, read back through /tokenize + /detokenize (byte-level BPE round-trips).
render_check() { # NAME MODEL_DIR FLAGS EXPECTED(python literal)
    local name=$1 dir=$2 flags=$3 want=$4
    # shellcheck disable=SC2086
    start_server R "$dir" $flags || { fail "$name: server"; return; }
    local ids; ids=$(curl -s -m 10 "$URL_R/tokenize" -d '{"messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"},{"role":"assistant","content":" ok "},{"role":"user","content":"more"}]}' |
        "$PY" -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["tokens"]))')
    check "$name" "$PY" -c "
import json, sys, urllib.request
got = json.load(urllib.request.urlopen(urllib.request.Request('$URL_R/detokenize', json.dumps({'tokens': $ids}).encode())))['prompt']
want = $want
assert got == want, (got, want)"
    stop_server R
}
"$PY" - "$tmp/weird/tokenizer_config.json" "$tmp/llama3" "$model" <<'PY'
import json, shutil, sys
shutil.copytree(sys.argv[3], sys.argv[2])
p = sys.argv[2] + "/tokenizer_config.json"; c = json.load(open(p))
c["chat_template"] = "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
json.dump(c, open(p, "w"))
PY
render_check "chatml template (recognised)" "$model" "" \
    "'<|im_start|>system\\nS<|im_end|>\\n<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n ok <|im_end|>\\n<|im_start|>user\\nmore<|im_end|>\\n<|im_start|>assistant\\n'"
render_check "llama3 template (recognised)" "$tmp/llama3" "" \
    "'<|begin_of_text|><|start_header_id|>system<|end_header_id|>\\n\\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\\n\\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\nok<|eot_id|><|start_header_id|>user<|end_header_id|>\\n\\nmore<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\n'"
render_check "plain template (flag)" "$model" "--chat-template plain" \
    "'S\\n\\nUser: hi\\nAssistant:  ok \\nUser: more\\nAssistant:'"
start_server R "$model" || true
check "chatml adds the model's default system prompt" bash -c "curl -s -m 10 $URL_R/tokenize -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' |
    $PY -c 'import json,sys,urllib.request; t = json.load(sys.stdin)[\"tokens\"]
p = json.load(urllib.request.urlopen(urllib.request.Request(\"$URL_R/detokenize\", json.dumps({\"tokens\": t}).encode())))[\"prompt\"]
assert p.startswith(\"<|im_start|>system\\nYou are a helpful AI assistant.<|im_end|>\\n<|im_start|>user\\nhi\"), p'"
# Bodies over 16 KiB are parsed and tokenized on the thread pool (server/offload.c): the same answers.
"$PY" - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
open(d + "/tok_padded.json", "w").write('{"prompt": "The quick brown fox"' + " " * 40000 + "}")
json.dump({"tokens": [1, 100, 200, 2] * 5000}, open(d + "/detok_big.json", "w"))
json.dump({"prompt": 5, "pad": "y" * 30000}, open(d + "/tok_bad.json", "w"))
json.dump({"prompt": "lorem ipsum dolor " * 200000}, open(d + "/tok_huge.json", "w"))
PY
check "POST /tokenize, a 40 KB body (on the pool): the small body's tokens" bash -c "a=\$(curl -s -m 5 $URL_R/tokenize -d '{\"prompt\":\"The quick brown fox\"}');
    b=\$(curl -s -m 30 $URL_R/tokenize --data-binary @$tmp/tok_padded.json); [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]"
check "POST /detokenize, 20,000 tokens (on the pool): 5,000 copies of the 4-token text" bash -c "
    one=\$(curl -s -m 5 $URL_R/detokenize -d '{\"tokens\":[1,100,200,2]}' | $PY -c 'import json,sys; print(json.load(sys.stdin)[\"prompt\"])');
    curl -s -m 30 $URL_R/detokenize --data-binary @$tmp/detok_big.json | $PY -c 'import json,sys; p=json.load(sys.stdin)[\"prompt\"]; sys.exit(0 if p == sys.argv[1] * 5000 else 1)' \"\$one\""
check "POST /tokenize, a big body with a bad field: 400 naming it" bash -c "curl -s -m 30 $URL_R/tokenize --data-binary @$tmp/tok_bad.json | grep -q '\"param\":\"prompt\"'"
check "clients leaving while their 3.6 MB /tokenize bodies are tokenized; /health answers meanwhile" bash -c "
    for i in 1 2 3 4; do curl -s -m 0.\$i -o /dev/null $URL_R/tokenize --data-binary @$tmp/tok_huge.json & done;
    curl -s -m 60 -o $tmp/tok_huge.out $URL_R/tokenize --data-binary @$tmp/tok_huge.json &
    h=\$(curl -s -m 5 -o /dev/null -w '%{http_code}' $URL_R/health); wait;
    [ \"\$h\" = 200 ] && $PY -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r[\"count\"] > 500000 else 1)' $tmp/tok_huge.out"
stop_server R
startup_fail "missing model directory" "no-such" --model "$tmp/no-such"
startup_fail "unknown flag" "--bogus" --model "$model" --bogus 1
startup_fail "bad flag value" "max-sessions" --model "$model" --max-sessions zero
startup_fail "bad config key" "frobnicate" --model "$model" --config <(echo "frobnicate = 1")
check "--help" bash -c "$latentd --help | grep -q -- '--kv-pool-mib'"

# --- SIGHUP reopens the log; sd_notify READY and WATCHDOG -------------------------------------------------------
rm -f "$tmp/notify"
"$PY" "$client" sdnotify "$tmp/notify" 15 > "$tmp/notify.out" &
npid=$!
for i in $(seq 1 50); do [ -S "$tmp/notify" ] && break; sleep 0.1; done
NOTIFY_SOCKET=$tmp/notify WATCHDOG_USEC=300000 start_server N "$model" --log-file "$tmp/N.log" --log-format json
wait "$npid"
check "sd_notify READY=1 and WATCHDOG=1" bash -c "grep -q 'READY=1' $tmp/notify.out && grep -q 'WATCHDOG=1' $tmp/notify.out || { cat $tmp/notify.out; false; }"
mv "$tmp/N.log" "$tmp/N.log.1"
kill -HUP "$PID_N"; sleep 0.3
curl -s -m 5 "$URL_N/health" >/dev/null
check "SIGHUP reopens the log file (JSON lines)" bash -c "sleep 0.2; [ -s $tmp/N.log ] && $PY -c '
import json,sys; [json.loads(l) for l in open(sys.argv[1])]' $tmp/N.log"
stop_server N

# --- SIGTERM drain -------------------------------------------------------------------------------------------
# A long context and a model big enough (about 1 ms a token here) that a
# 3000-token request is still running when the 0.5 s grace period ends.
"$PY" "$root/tests/ref/make_model.py" --out "$tmp/long" --kind t2mlr --seed 2 --max-pos 4096 \
    --d 384 --layers 8 --ffn 1024 >/dev/null
start_server D "$tmp/long" --grace-seconds 120 --max-tokens 4000 || exit 1
check "SIGTERM drain: running request finishes, new work 503" "$PY" "$client" drain "$URL_D" "$PID_D" finish
for i in $(seq 1 100); do kill -0 "$PID_D" 2>/dev/null || break; sleep 0.1; done
wait "$PID_D"; drc=$?
check "drained server exits 0" test "$drc" = 0
start_server E "$tmp/long" --grace-seconds 0.5 --max-tokens 4000 || exit 1
check "grace period over: the running request ends with an error event" "$PY" "$client" drain "$URL_E" "$PID_E" cut
for i in $(seq 1 100); do kill -0 "$PID_E" 2>/dev/null || break; sleep 0.1; done
wait "$PID_E"; erc=$?
check "server exits 0 after the grace period" test "$erc" = 0

finish
