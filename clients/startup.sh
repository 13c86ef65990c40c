#!/usr/bin/env bash
# How latentd starts on a model: seconds from launch to /health 200, how many
# /health answers were 503 meanwhile (the server keeps answering while it
# loads), then one completion and the process's resident memory (anonymous:
# packed weights and KV pool; file-backed: weights used in place and
# libraries) and the weights it released. A measurement script, not a test.
# usage: clients/startup.sh MODEL_DIR [latentd flags...]   (port 18977)
set -u
model=${1:?usage: clients/startup.sh MODEL_DIR [latentd flags...]}; shift
latentd=$(cd "$(dirname "$0")/.." && pwd)/build/latentd
url=http://127.0.0.1:18977
log=$(mktemp "${TMPDIR:-/tmp}/latentd-startup.XXXXXX")
t0=$(date +%s.%N)
"$latentd" --model "$model" --port 18977 "$@" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -f "$log"' EXIT
n503=0; st=000
while kill -0 "$pid" 2>/dev/null; do
    st=$(curl -s -m 2 -o /dev/null -w '%{http_code}' "$url/health")
    [ "$st" = 200 ] && break
    [ "$st" = 503 ] && n503=$((n503 + 1))
    sleep 0.01
done
t1=$(date +%s.%N)
[ "$st" = 200 ] || { echo "latentd did not come up:"; tail -n 5 "$log"; exit 1; }
printf 'ready after %.2f s; /health answered 503 %d times before that\n' "$(echo "$t1 - $t0" | bc)" "$n503"
curl -s -m 60 "$url/v1/completions" -d '{"prompt":"hello","max_tokens":8}' >/dev/null
awk '/^(VmRSS|RssAnon|RssFile):/ {printf "%s %.0f MB  ", $1, $2 / 1024} END {print ""}' "/proc/$pid/status"
grep -o '[0-9.]* MiB of unpacked weights released' "$log"
