#!/usr/bin/env bash
# libFuzzer (clang, ASan + UBSan) on the four parsers of untrusted input, each
# for a bounded time from its seed corpus tests/fuzz/corpus_<name> (with
# tests/fuzz/<name>.dict when there is one):
#   request      latentd's request parser/validator, chat templates, stop-string stream
#   tokenizer    encode arbitrary bytes (decode(encode(x)) == x), decode arbitrary ids
#   safetensors  arbitrary .safetensors files (single and sharded) through the model loader
#   config       arbitrary config.json text; what is accepted survives save + load
#   json_schema  response_format schemas and documents: refusals say why, the automaton accepts only JSON
# One line per target, ok or FAIL; the crashing input is shown on a failure.
# env: LATENT_ROOT, LATENT_FUZZ_SECONDS (per target, default 20),
#      LATENT_FUZZ_TARGETS (default "request tokenizer safetensors config").
set -u
root=${LATENT_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
secs=${LATENT_FUZZ_SECONDS:-20}
targets=${LATENT_FUZZ_TARGETS:-request tokenizer safetensors config json_schema}
command -v clang >/dev/null || { echo "FAIL: clang is not installed (needed for -fsanitize=fuzzer)"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/latentd-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
fails=0

max_len() {
    case $1 in request) echo 8192 ;; safetensors) echo 16384 ;; *) echo 4096 ;; esac
}

for t in $targets; do
    bin=$root/build/fuzz/fuzz_$t
    if ! make --no-print-directory -C "$root" "build/fuzz/fuzz_$t" >"$work/build-$t.log" 2>&1; then
        echo "FAIL $t: cannot build the fuzz target"; tail -n 20 "$work/build-$t.log"
        fails=$((fails + 1)); continue
    fi
    dir=$work/$t; mkdir -p "$dir/corpus" "$dir/artifacts" "$dir/tmp"
    cp "$root/tests/fuzz/corpus_$t"/* "$dir/corpus/"
    dict=(); [ -f "$root/tests/fuzz/$t.dict" ] && dict=(-dict="$root/tests/fuzz/$t.dict")
    # TMPDIR: the targets write their scratch files there; it goes with $work.
    # (In a subshell, so a crash is an exit status here, not a job notice.)
    (TMPDIR=$dir/tmp "$bin" -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 \
        "${dict[@]}" -artifact_prefix="$dir/artifacts/" "$dir/corpus" >"$dir/log" 2>&1; exit $?) 2>/dev/null
    rc=$?
    if [ $rc -ne 0 ] || ls "$dir/artifacts" | grep -q .; then
        fails=$((fails + 1))
        echo "FAIL $t: the fuzzer found a problem (exit $rc):"
        grep -E "ERROR|SUMMARY|runtime error|check failed|Abort" "$dir/log" | head -n 10 | sed 's/^/     /'
        for f in "$dir"/artifacts/*; do
            [ -f "$f" ] && { echo "     input ($(basename "$f"), $(stat -c %s "$f") bytes):"; head -c 400 "$f" | od -c | head -n 8 | sed 's/^/     /'; }
        done
        continue
    fi
    echo "ok   $t: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$dir/log"), $(grep -o 'cov: [0-9]*' "$dir/log" | tail -n 1)"
done
[ "$fails" -eq 0 ]
