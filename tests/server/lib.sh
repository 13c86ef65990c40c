# Shared by tests/integration/server_*.sh: start the real daemon on
# 127.0.0.1 and a free port (--port 0; the port is read back from its log),
# wait until /health answers 200, and always stop it at exit.
# Sourced by path; env LATENT_ROOT, LATENT_BUILD, PYTHON.
root=${LATENT_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
build=${LATENT_BUILD:-$root/build}
client=$root/tests/server/client.py
PY=${PYTHON:-/usr/bin/python3}
latentd=$build/latentd
tmp=$(mktemp -d "${TMPDIR:-/tmp}/latentd-test.XXXXXX")
fails=0; n=0
SERVER_PIDS=()

ok()   { n=$((n + 1)); printf 'ok   %s\n' "$1"; }
fail() { n=$((n + 1)); fails=$((fails + 1)); printf 'FAIL %s\n' "$1"; shift; for l in "$@"; do printf '     %s\n' "$l"; done; }
# check NAME COMMAND...: ok when the command succeeds; its output goes in the failure note.
check() {
    local name=$1; shift
    local out
    if out=$("$@" 2>&1); then ok "$name${out:+ ($(head -c 160 <<<"$out" | tr '\n' ' '))}"; else fail "$name" "$(head -c 1500 <<<"$out")"; fi
}

cleanup() {
    local p
    for p in "${SERVER_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT

[ -x "$latentd" ] || { echo "FAIL: $latentd not built"; exit 1; }

# test_models PLAIN_SEED: $model, the standard T2MLR test model, and $tmp/plain.
test_models() {
    model=$tmp/t2mlr
    "$root/tests/make_test_model.sh" "$model" t2mlr >/dev/null
    "$PY" "$root/tests/ref/make_model.py" --out "$tmp/plain" --kind plain --seed "$1" >/dev/null
}

# start_server NAME MODEL_DIR [flags...]: sets URL_<NAME>, PID_<NAME>, LOG_<NAME>.
start_server() {
    local name=$1 model=$2; shift 2
    local log=$tmp/$name.log a prev="" watch
    watch=$log
    for a in "$@"; do [ "$prev" = --log-file ] && watch=$a; prev=$a; done
    "$latentd" --model "$model" --host 127.0.0.1 --port 0 "$@" >"$log" 2>&1 &
    local pid=$!
    SERVER_PIDS+=("$pid")
    local url="" i
    for i in $(seq 1 300); do
        url=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$watch" 2>/dev/null | head -n 1 | sed 's/listening on //')
        [ -n "$url" ] && curl -s -m 2 -o /dev/null -w '%{http_code}' "$url/health" 2>/dev/null | grep -q 200 && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$url" ] || ! curl -s -m 2 "$url/health" | grep -q ok; then
        echo "server $name did not come up:"; tail -n 20 "$log" "$watch"
        return 1
    fi
    printf -v "URL_$name" '%s' "$url"
    printf -v "PID_$name" '%s' "$pid"
    printf -v "LOG_$name" '%s' "$log"
}

# stop_server NAME: SIGTERM, wait up to 30 s; STOP_RC gets the exit status.
stop_server() {
    local pidvar=PID_$1 i
    local pid=${!pidvar}
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; STOP_RC=killed; return 1; fi
    wait "$pid" 2>/dev/null
    STOP_RC=$?
    local logvar=LOG_$1
    if grep -q "Sanitizer" "${!logvar}" 2>/dev/null; then
        fail "server $1: sanitizer report" "$(grep -A 12 Sanitizer "${!logvar}" | head -n 30)"
    fi
    # A state change the request's table does not allow (server/generate.c gen_enter).
    if grep -q " bug: " "${!logvar}" 2>/dev/null; then
        fail "server $1: logged a bug" "$(grep " bug: " "${!logvar}" | head -n 5)"
    fi
}

# metric URL NAME: a metric's value from /metrics (first line that matches exactly).
metric() {
    curl -s -m 5 "$1/metrics" | awk -v m="$2" '$1 == m { print $2; exit }'
}

finish() {
    echo "$((n - fails)) of $n checks passed"
    [ "$fails" -eq 0 ]
}
