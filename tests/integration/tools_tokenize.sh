#!/usr/bin/env bash
# `latent tokenize-file`: the ids equal `latent tokenize` of the whole text
# (whatever the block size, as long as blocks have a safe cut), stored as
# little-endian uint32; --eos-between-lines equals each line encoded alone
# followed by the eos id; progress on stderr; bad arguments refused.
# env: LATENT_BUILD (dir with `latent`), LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../harness.sh" tokfile

"$PY" "$root/tests/ref/make_model.py" --out "$tmp/m" --kind plain --seed 3 --vocab 600 >/dev/null

# Text with the awkward cases: runs of spaces and newlines, CRLF, tabs,
# leading whitespace, contractions, digits, UTF-8, an empty last line.
{
    for i in $(seq 1 15); do
        printf 'The quick brown fox %d jumps over the lazy dog; it'"'"'s line %d.\n' "$i" "$i"
        printf 'Whenever she went out,  the little girl wore a red cloak.\r\n'
        printf '\n\n\tIndented after blank lines, numbers 1,234 and 3.14.\n'
        printf 'Café naïve résumé — “quotes” and emoji 😀 end.   \n'
        printf 'words    with   many     spaces\there\n'
    done
    printf 'no newline at the end'
} >"$tmp/text.txt"

ids_of_bin() { "$PY" -c 'import sys, numpy as np; print(",".join(map(str, np.fromfile(sys.argv[1], dtype="<u4"))))' "$1"; }
whole=$("$latent" tokenize --model "$tmp/m" <"$tmp/text.txt" | tr -d '[] \n')

for bs in default 200 1000; do
    args=(); [ "$bs" = default ] || args=(--block-bytes "$bs")
    if "$latent" tokenize-file --model "$tmp/m" --in "$tmp/text.txt" --out "$tmp/t.bin" "${args[@]}" 2>"$tmp/err"; then
        got=$(ids_of_bin "$tmp/t.bin")
        if [ -n "$whole" ] && [ "$got" = "$whole" ]; then
            ok "tokenize-file (block $bs) equals tokenize of the whole text"
        else
            fail "tokenize-file (block $bs) equals tokenize of the whole text" "got ${got:0:200}" "want ${whole:0:200}"
        fi
    else
        fail "tokenize-file (block $bs) runs" "$(cat "$tmp/err")"
    fi
done
if grep -q "tokenize-file: wrote .*t.bin: [0-9]* tokens" "$tmp/err" && grep -q "MB" "$tmp/err"; then
    ok "tokenize-file reports progress and the token count on stderr"
else
    fail "tokenize-file reports progress and the token count on stderr" "$(cat "$tmp/err")"
fi
if [ "$(stat -c %s "$tmp/t.bin")" -eq $(( 4 * $(tr ',' '\n' <<<"$whole" | wc -l) )) ]; then
    ok "4 bytes per token, no header"
else
    fail "4 bytes per token, no header"
fi

# One document per line: each non-empty line alone, then eos (config eos_token_id = 2).
eos=$("$PY" -c 'import json, sys; e = json.load(open(sys.argv[1]))["eos_token_id"]; print(e[0] if isinstance(e, list) else e)' "$tmp/m/config.json")
want=$(
    first=1
    while IFS= read -r line || [ -n "$line" ]; do
        line=${line%$'\r'}
        [ -n "$line" ] || continue
        ids=$(printf '%s' "$line" | "$latent" tokenize --model "$tmp/m" | tr -d '[] \n')
        [ $first = 1 ] || printf ','
        first=0
        printf '%s,%s' "$ids" "$eos"
    done <"$tmp/text.txt"
)
for bs in default 100; do
    args=(); [ "$bs" = default ] || args=(--block-bytes "$bs")
    if "$latent" tokenize-file --model "$tmp/m" --in "$tmp/text.txt" --out "$tmp/e.bin" --eos-between-lines "${args[@]}" 2>"$tmp/err"; then
        got=$(ids_of_bin "$tmp/e.bin")
        if [ "$got" = "$want" ]; then
            ok "--eos-between-lines (block $bs): each line alone, then eos $eos"
        else
            fail "--eos-between-lines (block $bs): each line alone, then eos $eos" "got ${got:0:300}" "want ${want:0:300}"
        fi
    else
        fail "--eos-between-lines (block $bs) runs" "$(cat "$tmp/err")"
    fi
done

expect_fail() { # DESCRIPTION PATTERN -- command...
    local desc=$1 pat=$2; shift 3
    if "$@" >/dev/null 2>"$tmp/err"; then fail "$desc: exits non-zero"; return; fi
    if grep -qiE "$pat" "$tmp/err"; then ok "$desc"; else fail "$desc: stderr matches /$pat/" "$(cat "$tmp/err")"; fi
}
expect_fail "missing input file" "nope.txt" -- "$latent" tokenize-file --model "$tmp/m" --in "$tmp/nope.txt" --out "$tmp/x.bin"
expect_fail "model without tokenizer" "tokenizer" -- "$latent" tokenize-file --model "$tmp" --in "$tmp/text.txt" --out "$tmp/x.bin"
expect_fail "missing --out" "out FILE" -- "$latent" tokenize-file --model "$tmp/m" --in "$tmp/text.txt"
[ ! -e "$tmp/x.bin" ] && [ ! -e "$tmp/x.bin.tmp" ] && ok "no output left by failures" || fail "no output left by failures"

echo "$((n - fails)) of $n checks passed"
[ "$fails" -eq 0 ]
