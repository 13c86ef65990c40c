#!/usr/bin/env bash
# The `latent` CLI: help texts, refusal of bad arguments (non-zero exit and a
# message on stderr naming the problem), greedy `generate` equal to the
# independent reference's greedy decode, seeded sampling reproducible, and
# `tokenize` equal to the reference's own BPE on ASCII text.
# env: LATENT_BUILD (dir with `latent`), LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../harness.sh" cli


model=$tmp/t2mlr
"$PY" "$ref/make_model.py" --out "$model" --kind t2mlr --seed 5 --recur-on-prompt 0
"$PY" "$ref/make_model.py" --out "$tmp/plain" --kind plain --seed 5
"$PY" "$ref/make_model.py" --out "$tmp/lrt" --kind lrt --seed 6 --dtype bf16

# --- help -----------------------------------------------------------------
for sub in "" logits generate tokenize; do
    # shellcheck disable=SC2086
    if out=$("$latent" $sub --help 2>"$tmp/err") && grep -qi usage <<<"$out"; then
        ok "latent $sub --help"
    else
        fail "latent $sub --help: exit 0 with usage on stdout" "$(head -c 300 <<<"$out")" "$(head -c 300 "$tmp/err")"
    fi
done

# --- bad arguments ----------------------------------------------------------
# expect_fail DESCRIPTION PATTERN(regex for stderr, case-insensitive) -- command...
expect_fail() {
    local desc=$1 pat=$2; shift 3
    local rc=0
    "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || rc=$?
    if [ "$rc" -eq 0 ]; then
        fail "$desc: exited 0" "stdout: $(head -c 200 "$tmp/out")"
    elif [ "$rc" -ge 128 ]; then
        fail "$desc: killed by signal (exit $rc)" "$(head -c 300 "$tmp/err")"
    elif ! grep -Eqi -- "$pat" "$tmp/err"; then
        fail "$desc: stderr does not name the problem (/$pat/)" "stderr: $(head -c 300 "$tmp/err")"
    else
        ok "$desc (exit $rc: $(head -n 1 "$tmp/err" | head -c 120))"
    fi
}
expect_fail "no command" "usage" -- "$latent"
expect_fail "unknown command" "frobnicate" -- "$latent" frobnicate
expect_fail "logits unknown flag" "--bogus" -- "$latent" logits --model "$model" --tokens 1,2 --bogus
expect_fail "generate unknown flag" "--bogus" -- "$latent" generate --model "$model" --prompt hi --bogus 3
expect_fail "tokenize unknown flag" "--bogus" -- "$latent" tokenize --model "$model" --bogus
expect_fail "logits missing --model" "model" -- "$latent" logits --tokens 1,2
expect_fail "generate missing --model" "model" -- "$latent" generate --prompt hi
expect_fail "tokenize missing --model" "model" -- "$latent" tokenize
expect_fail "logits nonexistent dir" "no-such-dir" -- "$latent" logits --model "$tmp/no-such-dir" --tokens 1,2
expect_fail "generate nonexistent dir" "no-such-dir" -- "$latent" generate --model "$tmp/no-such-dir" --prompt hi
expect_fail "logits missing --tokens" "tokens" -- "$latent" logits --model "$model"
expect_fail "logits --tokens not a number" "tokens|x7" -- "$latent" logits --model "$model" --tokens 1,x7,3
expect_fail "logits --tokens negative" "tokens|-4" -- "$latent" logits --model "$model" --tokens 1,-4
expect_fail "logits --tokens empty item" "tokens" -- "$latent" logits --model "$model" --tokens 1,,3
expect_fail "logits --tokens id >= vocab" "512|vocab" -- "$latent" logits --model "$model" --tokens 1,512
expect_fail "logits --n-prompt > tokens" "n-prompt" -- "$latent" logits --model "$model" --tokens 1,2 --n-prompt 5
expect_fail "logits option without value" "tokens" -- "$latent" logits --model "$model" --tokens
expect_fail "generate -n negative" "-n" -- "$latent" generate --model "$model" --prompt hi -n -3
expect_fail "generate -n not a number" "-n" -- "$latent" generate --model "$model" --prompt hi -n many
expect_fail "generate --temperature negative" "temperature" -- "$latent" generate --model "$model" --prompt hi --temperature -1
expect_fail "generate missing --prompt" "prompt" -- "$latent" generate --model "$model"
expect_fail "bench --kinds unknown name" "t2mlrx.*plain, t2mlr and lrt" -- "$latent" bench --kinds plain,t2mlrx --rounds 1
expect_fail "bench --kinds empty item" "kind ''.*plain, t2mlr and lrt" -- "$latent" bench --kinds plain,,lrt --rounds 1
expect_fail "bench --kinds empty" "kind ''" -- "$latent" bench --kinds "" --rounds 1

# --- greedy generate == reference ------------------------------------------------
# greedy_check MODEL PROMPT N
greedy_check() {
    local dir=$1 prompt=$2 ngen=$3 name
    name="generate $(basename "$dir") --prompt '$prompt' -n $ngen --temperature 0"
    "$PY" "$ref/reference.py" --model "$dir" --prompt "$prompt" --generate "$ngen" --stop-at-eos > "$tmp/ref.json" || {
        fail "$name: reference failed"; return; }
    if ! "$latent" generate --model "$dir" --prompt "$prompt" -n "$ngen" --temperature 0 --ids > "$tmp/ids" 2>"$tmp/err"; then
        fail "$name --ids: exit non-zero" "$(head -c 300 "$tmp/err")"; return
    fi
    if ! "$latent" generate --model "$dir" --prompt "$prompt" -n "$ngen" --temperature 0 > "$tmp/text" 2>"$tmp/err"; then
        fail "$name: exit non-zero" "$(head -c 300 "$tmp/err")"; return
    fi
    "$PY" - "$tmp/ref.json" "$tmp/ids" "$tmp/text" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))
ids_raw = open(sys.argv[2]).read()
text = open(sys.argv[3], "rb").read()
try:
    ids = json.loads(ids_raw)
except ValueError:
    print("--ids output is not a JSON array: %r" % ids_raw[:200]); sys.exit(1)
if ids != ref["generated"]:
    print("ids differ: engine %s, reference %s" % (ids, ref["generated"])); sys.exit(1)
want = ref["text"].encode("utf-8") + b"\n"
if "\ufffd" in ref["text"]:
    # invalid UTF-8 in the generated bytes: the replacement policy may differ, ids already match
    print("ids equal %s; text has invalid UTF-8 (U+FFFD policy may differ): %s" %
          (ids, "text equal too" if text == want else "NOTE text differs: %r vs %r" % (text, want)))
    sys.exit(0)
if text != want:
    print("text differs: engine %r, reference %r" % (text, want)); sys.exit(1)
print("ids %s, text %r" % (ids, ref["text"]))
PY
    if [ $? -eq 0 ]; then ok "$name"; else fail "$name"; fi
}
greedy_check "$model" hello 8
greedy_check "$model" "The quick brown fox" 12
greedy_check "$tmp/plain" hello 8
greedy_check "$tmp/lrt" "Once upon a time" 10

# --- seeded sampling is reproducible --------------------------------------------
# sample SEED [--ids]: the sampled output, or "ERROR: ..." when latent fails
sample() {
    local seed=$1; shift
    "$latent" generate --model "$model" --prompt hello -n 16 --temperature 0.8 --seed "$seed" "$@" 2>"$tmp/serr" ||
        echo "ERROR: exit $?: $(head -c 200 "$tmp/serr")"
}
a=$(sample 7 --ids); b=$(sample 7 --ids)
if [[ "$a" == \[* ]] && [ "$a" = "$b" ]; then ok "same seed, same sampled ids ($a)"; else fail "same seed, same sampled ids" "$a" "$b"; fi
a=$(sample 7); b=$(sample 7)
if [[ "$a" != ERROR* ]] && [ "$a" = "$b" ]; then ok "same seed, same sampled text"; else fail "same seed, same sampled text" "$a" "$b"; fi
s7=$(sample 7 --ids); differ=0
for s in 1 2 3 4; do [ "$(sample $s --ids)" != "$s7" ] && differ=1; done
if [[ "$s7" != ERROR* ]] && [ $differ -eq 1 ]; then ok "other seeds give other samples"; else fail "seeds 1-4 all equal seed 7" "$s7"; fi

# --- tokenize == reference BPE (ASCII) ----------------------------------------------
for text in "hello" "The quick brown fox jumps over the lazy dog." "  two  spaces and
a newline" "<|im_start|>user
hi<|im_end|>" "it's 2024, isn't it?"; do
    want=$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import bpe_py, json
print(json.dumps(bpe_py.Tokenizer(sys.argv[2]).encode(sys.argv[3])))' "$ref" "$model/tokenizer.json" "$text")
    got=$(printf '%s' "$text" | "$latent" tokenize --model "$model" 2>&1)
    if [ "$("$PY" -c 'import json,sys; print(json.loads(sys.argv[1]) == json.loads(sys.argv[2]))' "$got" "$want" 2>/dev/null)" = True ]; then
        ok "tokenize $(printf '%q' "$text")"
    else
        fail "tokenize $(printf '%q' "$text")" "engine:    $got" "reference: $want"
    fi
done

# --- init: config.json names the dtype model.safetensors holds -------------------
for dt in f32 bf16; do
    want=float32; [ "$dt" = bf16 ] && want=bfloat16
    "$latent" init --config "$model/config.json" --out "$tmp/init-$dt" --seed 1 --dtype "$dt" >/dev/null 2>"$tmp/err"
    got=$("$PY" -c 'import json, struct, sys
d = sys.argv[1]
h = open(d + "/model.safetensors", "rb"); n = struct.unpack("<Q", h.read(8))[0]
dts = {v["dtype"] for k, v in json.loads(h.read(n)).items() if k != "__metadata__"}
print(json.load(open(d + "/config.json"))["torch_dtype"], *sorted(dts))' "$tmp/init-$dt" 2>&1)
    wantst=F32; [ "$dt" = bf16 ] && wantst=BF16
    if [ "$got" = "$want $wantst" ]; then
        ok "init --dtype $dt: torch_dtype $want, tensors $wantst"
    else
        fail "init --dtype $dt: torch_dtype $want, tensors $wantst" "got: $got" "$(head -c 300 "$tmp/err")"
    fi
done

# --- bench runs on a model directory ------------------------------------------
# Not a speed check (that is `make bench`): every row is printed with positive
# figures and, for a recurrent model, a ratio beside the backbone's.
for m in "$tmp/lrt" "$model"; do
    out=$("$latent" bench --model "$m" --prefill 20 --decode 4 --batches 1,3 --rounds 1 --threads 2 2>"$tmp/err")
    rows=$(awk '/^(prefill|decode) / && $(NF) + 0 > 0 && $(NF-3) + 0 > 0' <<<"$out" | wc -l)
    if [ "$rows" -eq 4 ]; then
        ok "bench --model $(basename "$m"): 4 rows with ratios"
    else
        fail "bench --model $(basename "$m"): 4 rows with ratios" "$out" "$(head -c 300 "$tmp/err")"
    fi
done

echo "$((n - fails)) of $n checks passed"
[ "$fails" -eq 0 ]
