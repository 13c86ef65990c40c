#!/usr/bin/env bash
# `latent data` and `latent eval`:
# - each task writes its files (sizes consistent, PREFIX.json right) and a
#   tokenizer a model can be initialised with;
# - eval's predictions equal the argmax of the independent float64 numpy
#   reference (tests/ref/reference.py, sequential recurrence) on the same
#   records, with the dictionary of S5 retrieval run as prompt tokens (flow 1
#   for a model with recur_on_prompt false) and the rest as generated tokens;
#   its accuracy table counts what --show prints; buckets are depths for
#   var-assign, positions for the group task;
# - refusals: a model vocabulary smaller than the task's, a missing PREFIX.json.
# env: LATENT_BUILD (dir with `latent`), LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../harness.sh" data
run() { # DESCRIPTION -- command...
    local desc=$1; shift 2
    if "$@" >"$tmp/out" 2>"$tmp/err"; then ok "$desc"; else fail "$desc" "$(tail -5 "$tmp/err")"; fi
}

run "data s5-retrieval" -- "$latent" data s5-retrieval --len 5 --n-records 12 --seed 4 --out "$tmp/s5r" --tokenizer-out "$tmp/s5tok"
run "data group s4" -- "$latent" data group --group s4 --min-len 3 --max-len 20 --n-records 40 --seed 5 --out "$tmp/s4" --tokenizer-out "$tmp/s4tok"
run "data group parity --final-only" -- "$latent" data group --group parity --len 9 --final-only --n-records 30 --seed 6 --out "$tmp/par"
run "data var-assign" -- "$latent" data var-assign --min-depth 0 --max-depth 4 --n-records 50 --seed 7 --out "$tmp/var" --tokenizer-out "$tmp/vartok"

run "data var-assign --order program" -- "$latent" data var-assign --min-depth 1 --max-depth 5 --record-len 80 --n-records 300 --seed 8 --order program --out "$tmp/varp"
run "data var-assign (shuffled, the default)" -- "$latent" data var-assign --min-depth 1 --max-depth 5 --record-len 80 --n-records 300 --seed 8 --out "$tmp/vars"
if "$latent" data var-assign --depth 2 --n-records 5 --seed 1 --order sorted --out "$tmp/varbad" 2>"$tmp/err"; then
    fail "data var-assign --order sorted is refused" "exit 0"
elif grep -q -- "--order must be shuffled or program" "$tmp/err"; then ok "data var-assign --order sorted is refused"
else fail "data var-assign --order sorted is refused" "$(cat "$tmp/err")"; fi
run "data var-assign --queries 4" -- "$latent" data var-assign --min-depth 1 --max-depth 5 --queries 4 --n-records 200 --seed 9 --order program --out "$tmp/varq"
# --queries 4: three "v ? d ;" before the task's query, every answer the
# digit its variable's chain ends at, and each of the four scored
if out=$("$PY" - "$tmp" <<'EOF'
import json, os, sys
import numpy as np
tmp = sys.argv[1]
meta = json.load(open(os.path.join(tmp, "varq.json")))
L = meta["record_len"]
tok = np.fromfile(os.path.join(tmp, "varq.bin"), dtype="<u4")
mask = np.fromfile(os.path.join(tmp, "varq.mask"), dtype="u1")
assert meta["n_queries"] == 4 and L == 1 + 4 * 19 + 3 * 4 + 3, meta
for r in range(meta["n_records"]):
    rec, m = [int(x) for x in tok[r * L:(r + 1) * L]], mask[r * L:(r + 1) * L]
    val, p = {}, 1
    while rec[p + 1] == 3:
        val[rec[p]] = rec[p + 2]; p += 4
    scored = []
    while p < L and rec[p] != 0:
        name, q, ans = rec[p:p + 3]
        assert q == 5, rec
        x = name
        while val[x] >= 16: x = val[x]
        assert ans == val[x], rec
        scored.append(p + 2); p += 4
    assert len(scored) == 4 and [i for i in range(L) if m[i]] == scored, (scored, rec)
EOF
); then ok "var-assign --queries 4: each answer the chain's digit, all four scored"
else fail "var-assign --queries 4" "$out"; fi

# --order program: no line uses a variable before the line assigning it, and
# the answer is the chain's digit; the default order has such uses (parsed
# here from the tokens, independently of the generator).
if out=$("$PY" - "$tmp" <<'EOF'
import json, os, sys
import numpy as np
tmp = sys.argv[1]
def forward_uses(name):
    meta = json.load(open(os.path.join(tmp, name + ".json")))
    L = meta["record_len"]
    tok = np.fromfile(os.path.join(tmp, name + ".bin"), dtype="<u4")
    uses, depths = 0, set()
    for r in range(meta["n_records"]):
        rec = [int(x) for x in tok[r * L:(r + 1) * L]]
        body = rec[1:rec.index(5)]  # up to "?"
        lines = [body[i:i + 4] for i in range(0, len(body) - 1, 4)]
        assigned, val = set(), {}
        for name_, eq, rhs, semi in lines:
            assert eq == 3 and semi == 4, rec
            if rhs >= 16 and rhs not in assigned: uses += 1
            assigned.add(name_); val[name_] = rhs
        q, d = body[-1], 0
        while val[q] >= 16: q, d = val[q], d + 1
        assert rec[rec.index(5) + 1] == val[q], rec
        depths.add(d)
    assert depths == {1, 2, 3, 4, 5}, depths
    assert meta["program_order"] == (name == "varp"), meta
    return uses
p, s = forward_uses("varp"), forward_uses("vars")
assert p == 0 and s > 0, (p, s)
print(s)
EOF
); then ok "var-assign --order program: every variable assigned before its use (shuffled: $out uses before assignment in 300 records)"
else fail "var-assign --order program: every variable assigned before its use" "$out"; fi

if out=$("$PY" - "$tmp" <<'EOF'
import json, os, sys
import numpy as np
tmp = sys.argv[1]
for name, extra in (("s5r", {"labels", "flow"}), ("s4", {"labels"}), ("par", set()), ("var", set())):
    meta = json.load(open(os.path.join(tmp, name + ".json")))
    n = meta["n_records"] * meta["record_len"] + meta["record_len"] + 1
    assert meta["n_tokens"] == n and os.path.getsize(os.path.join(tmp, name + ".bin")) == 4 * n, name
    assert os.path.getsize(os.path.join(tmp, name + ".mask")) == n, name
    for e in ("labels", "flow"):
        assert os.path.exists(os.path.join(tmp, name + "." + e)) == (e in extra), (name, e)
        assert meta[e] == (e in extra), (name, e)
    tok = np.fromfile(os.path.join(tmp, name + ".bin"), dtype="<u4")
    assert tok.max() < meta["vocab_size"] and (tok[::meta["record_len"]][:meta["n_records"]] == 1).all(), name
assert json.load(open(os.path.join(tmp, "s5r.json")))["vocab_size"] == 187
t = json.load(open(os.path.join(tmp, "s5tok", "tokenizer.json")))
assert len(t["model"]["vocab"]) == 187 and t["added_tokens"][0]["content"] == "<pad>"
print("ok")
EOF
); then ok "files: sizes, PREFIX.json, optional files, BOS per record, task tokenizer"; else fail "files: sizes, PREFIX.json, optional files, BOS per record, task tokenizer" "$out"; fi

# A T2MLR model on the S5-retrieval vocabulary, not recurring on the prompt,
# with weights large enough that the argmax is not a near tie.
cat >"$tmp/cfg.json" <<'EOF'
{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 190, "max_position_embeddings": 256,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "bos_token_id": 1, "eos_token_id": 2,
 "latent_recurrence": {"type": "t2mlr", "l_start": 1, "l_end": 1, "recur_on_prompt": false}}
EOF
run "init a T2MLR model on the task tokenizer" -- "$latent" init --config "$tmp/cfg.json" --out "$tmp/m" --seed 3 --std 0.4 --gamma 0.8 --tokenizer "$tmp/s5tok"
"$latent" eval --model "$tmp/m" --data "$tmp/s5r.bin" --show 4 >"$tmp/eval.txt" 2>"$tmp/err" || fail "eval s5-retrieval runs" "$(cat "$tmp/err")"
if out=$(REF=$ref "$PY" - "$tmp" "$latent" <<'EOF'
import json, os, subprocess, sys
import numpy as np
tmp, latent = sys.argv[1], sys.argv[2]
meta = json.load(open(os.path.join(tmp, "s5r.json")))
L = meta["record_len"]
tok = np.fromfile(os.path.join(tmp, "s5r.bin"), dtype="<u4")
lab = np.fromfile(os.path.join(tmp, "s5r.labels"), dtype="<u4")
mask = np.fromfile(os.path.join(tmp, "s5r.mask"), dtype=np.uint8)
flow = np.fromfile(os.path.join(tmp, "s5r.flow"), dtype=np.uint8)
lines = [l for l in open(os.path.join(tmp, "eval.txt")) if l.startswith("record ")]
assert len(lines) == 4, lines
checked = skipped = 0
for r, line in enumerate(lines):
    ids = line.split("|")[0].split(":", 1)[1].split()
    got = {int(p): (int(w), int(g)) for p, w, g in (x.split(":") for x in ids)}
    o = r * L
    pos = [p for p in range(1, L) if mask[o + p]]
    assert sorted(got) == pos, (sorted(got), pos)
    last = max(pos)
    f = 0
    while flow[o + f] == 1:
        f += 1
    toks = ",".join(str(x) for x in tok[o:o + last])
    res = subprocess.run([sys.executable, os.path.join(os.environ["REF"], "reference.py"), "--model", os.path.join(tmp, "m"),
                          "--tokens", toks, "--n-prompt", str(f)], capture_output=True, text=True, check=True)
    logits = np.array(json.loads(res.stdout)["logits"])
    for p in pos:
        row = logits[p - 1]
        top = np.sort(row)[-2:]
        assert got[p][0] == lab[o + p]
        if top[1] - top[0] < 1e-3 * max(1.0, abs(top[1])):
            skipped += 1
            continue
        assert got[p][1] == int(np.argmax(row)), (r, p, got[p], int(np.argmax(row)))
        checked += 1
assert checked >= 20, (checked, skipped)
print("%d predictions equal the reference's argmax (%d near ties skipped)" % (checked, skipped))
EOF
); then ok "eval s5-retrieval: $out"; else fail "eval s5-retrieval: predictions equal the reference's argmax" "$out"; fi

# The table counts what --show prints (all 12 records shown).
"$latent" eval --model "$tmp/m" --data "$tmp/s5r.bin" --show 12 --json >"$tmp/eval.json" 2>"$tmp/err"
if out=$("$PY" - "$tmp" <<'EOF'
import json, os, sys
tmp = sys.argv[1]
lines = open(os.path.join(tmp, "eval.json")).read().splitlines()
recs = [l for l in lines if l.startswith("record ")]
res = json.loads([l for l in lines if l.startswith("{")][0])
n = {"state": [0, 0], "retrieval": [0, 0]}
whole = 0
for line in recs:
    items = [x.split(":") for x in line.split("|")[0].split(":", 1)[1].split()]
    allok = True
    for i, (p, w, g) in enumerate(items):
        kind = "state" if i % 2 == 0 else "retrieval"
        n[kind][0] += 1
        n[kind][1] += w == g
        allok &= w == g
    whole += allok
for k in n:
    assert abs(res["overall"][k] - n[k][1] / n[k][0]) < 1e-6, (k, res["overall"][k], n[k])
assert res["records"] == 12 and abs(res["records_correct"] - whole / 12) < 1e-6
assert sum(r["n"] for r in res["rows"]) == 12 * 10 and res["bucket"] == "position"
print("ok")
EOF
); then ok "eval: the table counts what --show prints"; else fail "eval: the table counts what --show prints" "$out"; fi

# var-assign: buckets are depths 0..4; group: positions; final-only: lengths.
sed 's/"vocab_size": 190/"vocab_size": 64/; s/"l_end": 1, "recur_on_prompt": false/"l_end": 2/' "$tmp/cfg.json" >"$tmp/cfg64.json"
"$latent" init --config "$tmp/cfg64.json" --out "$tmp/m64" --seed 1 --tokenizer "$tmp/vartok" 2>/dev/null
if "$latent" eval --model "$tmp/m64" --data "$tmp/var.bin" --json >"$tmp/var.eval" 2>"$tmp/err" &&
   "$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["bucket"] == "depth" and sorted(x["from"] for x in r["rows"]) == [0, 1, 2, 3, 4], r["rows"]
assert sum(x["n"] for x in r["rows"]) == 50 and "answer" in r["overall"]' "$tmp/var.eval"; then
    ok "eval var-assign: one answer per record, buckets are the depths 0..4"
else
    fail "eval var-assign: one answer per record, buckets are the depths 0..4" "$(cat "$tmp/err" "$tmp/var.eval")"
fi
if "$latent" eval --model "$tmp/m64" --data "$tmp/par.bin" --bucket-width 1 --json >"$tmp/par.eval" 2>"$tmp/err" &&
   "$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["bucket"] == "length" and [x["from"] for x in r["rows"]] == [9] and r["rows"][0]["n"] == 30, r' "$tmp/par.eval"; then
    ok "eval parity --final-only: one target per record, bucket = length 9"
else
    fail "eval parity --final-only: one target per record, bucket = length 9" "$(cat "$tmp/err" "$tmp/par.eval")"
fi
if "$latent" eval --model "$tmp/m" --data "$tmp/s4.bin" --bucket-width 5 >"$tmp/s4.txt" 2>"$tmp/err" &&
   grep -q "^product *0-4 " "$tmp/s4.txt" && grep -q "^product *15-19 " "$tmp/s4.txt" && grep -q "^records fully correct" "$tmp/s4.txt"; then
    ok "eval group s4: position buckets of width 5"
else
    fail "eval group s4: position buckets of width 5" "$(cat "$tmp/err" "$tmp/s4.txt")"
fi
# raw mode: the same file described on the command line gives the same total
"$latent" eval --model "$tmp/m" --data "$tmp/s4.bin" --json >"$tmp/a.json" 2>/dev/null
L4=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["record_len"])' "$tmp/s4.json")
if "$latent" eval --model "$tmp/m" --data "$tmp/s4.bin" --task raw --record-len "$L4" --labels "$tmp/s4.labels" --json >"$tmp/b.json" 2>"$tmp/err" &&
   "$PY" -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert abs(a["overall"]["product"] - b["overall"]["token"]) < 1e-9, (a["overall"], b["overall"])' "$tmp/a.json" "$tmp/b.json"; then
    ok "eval --task raw --record-len: same accuracy as with PREFIX.json"
else
    fail "eval --task raw --record-len: same accuracy as with PREFIX.json" "$(cat "$tmp/err")"
fi

expect_fail() { # DESCRIPTION PATTERN -- command...
    local desc=$1 pat=$2; shift 3
    if "$@" >/dev/null 2>"$tmp/err"; then fail "$desc: exits non-zero"; return; fi
    if grep -qiE "$pat" "$tmp/err"; then ok "$desc"; else fail "$desc: stderr matches /$pat/" "$(cat "$tmp/err")"; fi
}
expect_fail "eval: model vocabulary smaller than the task's" "vocabulary" -- "$latent" eval --model "$tmp/m64" --data "$tmp/s5r.bin"
cp "$tmp/par.bin" "$tmp/nojson.bin"
expect_fail "eval: no PREFIX.json" "nojson.json" -- "$latent" eval --model "$tmp/m64" --data "$tmp/nojson.bin"
expect_fail "data: unknown task" "unknown task" -- "$latent" data sorting --out "$tmp/x" --n-records 3 --seed 1
expect_fail "data: S7 is too big" "S_n" -- "$latent" data group --group s7 --out "$tmp/x" --n-records 3 --seed 1
expect_fail "data: record too short" "too short" -- "$latent" data group --len 10 --record-len 5 --out "$tmp/x" --n-records 3 --seed 1

# The state-tracking recipe's start: gamma_rec and gamma_cur each their own value,
# the rest of the weights those of the same seed without the flags.
run "init --gamma-rec 1 --gamma-cur 0" -- "$latent" init --config "$tmp/cfg.json" --out "$tmp/mg" --seed 3 --gamma-rec 1 --gamma-cur 0
run "init without them" -- "$latent" init --config "$tmp/cfg.json" --out "$tmp/mg0" --seed 3
if out=$("$PY" - "$tmp" "$ref" <<'EOF' 2>&1
import sys
sys.path.insert(0, sys.argv[2])
import numpy as np
from safetensors_py import read_file
a, b = read_file(sys.argv[1] + "/mg/model.safetensors"), read_file(sys.argv[1] + "/mg0/model.safetensors")
assert np.all(a["model.t2mlr.gamma_rec"] == 1) and np.all(a["model.t2mlr.gamma_cur"] == 0), (a["model.t2mlr.gamma_rec"], a["model.t2mlr.gamma_cur"])
assert np.all(b["model.t2mlr.gamma_rec"] == np.float32(0.1)) and np.all(b["model.t2mlr.gamma_cur"] == np.float32(0.1))
for k in a:
    if "gamma" not in k:
        assert np.array_equal(a[k], b[k]), k
print("gamma_rec 1, gamma_cur 0; every other tensor as without the flags")
EOF
); then ok "init: the gammas set, nothing else changed ($out)"; else fail "init --gamma-rec/--gamma-cur" "$out"; fi
expect_fail "init: --gamma-rec out of range" "gamma-rec" -- "$latent" init --config "$tmp/cfg.json" --out "$tmp/mg2" --seed 3 --gamma-rec 11

echo "$((n - fails)) of $n checks passed"
[ "$fails" -eq 0 ]
