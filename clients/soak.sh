#!/usr/bin/env bash
# A bounded soak of latentd: mixed streaming, non-streaming and cancelled
# requests (completions and chat) for SECONDS, then checks zero failed
# requests and zero sessions left behind. A benchmark script, not a CI test.
# usage: clients/soak.sh URL [SECONDS=600] [CLIENTS=16]
set -u
url=${1:?usage: clients/soak.sh URL [SECONDS] [CLIENTS]}; secs=${2:-600}; clients=${3:-16}
bench=$(cd "$(dirname "$0")/.." && pwd)/build/latent-bench
half=$(( secs / 2 ))
"$bench" --url "$url" --clients "$clients" --duration "$half" --max-tokens 96 --temperature 0.8 \
    --cancel-fraction 0.2 --nonstream-fraction 0.3 --seed 1 > /tmp/latentd-soak.1 2>&1; a=$?
"$bench" --url "$url" --clients "$clients" --duration "$half" --max-tokens 64 --chat --temperature 0.8 \
    --cancel-fraction 0.2 --nonstream-fraction 0.3 --seed 2 > /tmp/latentd-soak.2 2>&1; b=$?
cat /tmp/latentd-soak.1 /tmp/latentd-soak.2
left=$(curl -s "$url/metrics" | awk '$1 == "latentd_sessions" {print $2}')
echo "sessions left: ${left:-?}"
[ $a -eq 0 ] && [ $b -eq 0 ] && [ "${left:-1}" = 0 ] && echo "soak: OK" || { echo "soak: FAILED"; exit 1; }
