#!/usr/bin/env bash
# libFuzzer on latentd's request parser/validator, chat templates and
# stop-string stream (tests/fuzz/fuzz_request.c), for a bounded time
# (LATENT_FUZZ_SECONDS, default 30) from the seed corpus in tests/fuzz/corpus.
# env: LATENT_ROOT.
set -u
root=${LATENT_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
secs=${LATENT_FUZZ_SECONDS:-30}
command -v clang >/dev/null || { echo "FAIL: clang is not installed (needed for -fsanitize=fuzzer)"; exit 1; }
make --no-print-directory -C "$root" build/fuzz/fuzz_request >/dev/null || { echo "FAIL: cannot build the fuzz target"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/latentd-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$root"/tests/fuzz/corpus/* "$work/"
mkdir -p "$work/artifacts"
"$root/build/fuzz/fuzz_request" -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/artifacts/" "$work" > "$work/log" 2>&1
rc=$?
tail -n 4 "$work/log"
if [ $rc -ne 0 ] || ls "$work/artifacts" | grep -q .; then
    echo "FAIL: the fuzzer found a problem (exit $rc):"
    grep -E "ERROR|SUMMARY|runtime error|Abort" "$work/log" | head -n 10
    for f in "$work"/artifacts/*; do [ -f "$f" ] && { echo "input ($f):"; head -c 400 "$f" | od -c | head -n 8; }; done
    exit 1
fi
echo "ok   $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$work/log")"
