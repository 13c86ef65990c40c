#!/usr/bin/env bash
# `latent train` end to end on tiny models: argument errors, progress lines
# and train.jsonl, the §5 window order (losses of a run with lr 0 against the
# independent reference, wrapping around the file), shuffling, checkpoints,
# bit-exact --resume after a crash injected at every point of a save and
# after real kill -9s during saves, SIGINT, and the trained model loading in
# the inference engine.
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../harness.sh" train

small="--d 32 --layers 3 --heads 4 --kv-heads 2 --ffn 48 --vocab 300"
"$PY" "$ref/make_model.py" --out "$tmp/t2" --kind t2mlr --t2mlr 1,1 --seed 3 $small >/dev/null
"$PY" "$ref/make_model.py" --out "$tmp/lrt" --kind lrt --lrt-source 1 --lrt-inject 0,2 --seed 3 $small >/dev/null
"$PY" "$ref/make_model.py" --out "$tmp/plain" --kind plain --seed 3 $small >/dev/null
"$PY" - "$tmp" <<'EOF'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(9)
(np.arange(3000) * 7 % 290 + rng.integers(0, 10, 3000)).astype('<u4').tofile(d + '/train.bin')
rng.integers(3, 300, 600).astype('<u4').tofile(d + '/eval.bin')
rng.integers(3, 300, 50).astype('<u4').tofile(d + '/short.bin')      # wraps every few steps at T=8
np.array([1, 2, 300, 4] * 20, dtype='<u4').tofile(d + '/badid.bin')  # 300 >= vocab
rng.integers(3, 300, 100).astype('<u4').tofile(d + '/badmask.bin')
np.ones(99, np.uint8).tofile(d + '/badmask.mask')                    # one byte short
open(d + '/odd.bin', 'wb').write(b'\x01\x00\x00\x00\x02\x00')       # not whole uint32s
EOF
base=(--batch 2 --seq 8 --lr 3e-3)

# --- arguments ----------------------------------------------------------------
expect_fail() { # DESCRIPTION PATTERN -- command...
    local desc=$1 pat=$2; shift 3
    local rc=0
    "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || rc=$?
    if [ "$rc" -eq 0 ]; then fail "$desc: exited 0"
    elif [ "$rc" -ge 128 ]; then fail "$desc: killed by signal (exit $rc)" "$(head -c 300 "$tmp/err")"
    elif ! grep -Eqi -- "$pat" "$tmp/err"; then fail "$desc: stderr does not name the problem (/$pat/)" "$(head -c 300 "$tmp/err")"
    else ok "$desc (exit $rc: $(head -n 1 "$tmp/err" | head -c 110))"; fi
}
if "$latent" train --help | grep -q -- "--jacobi-grad-iters"; then ok "train --help"; else fail "train --help"; fi
expect_fail "unknown flag" "--bogus" -- "$latent" train --model "$tmp/t2" --data "$tmp/train.bin" --out "$tmp/o" --bogus
expect_fail "missing --data" "data" -- "$latent" train --model "$tmp/t2" --out "$tmp/o"
expect_fail "missing --out" "out" -- "$latent" train --model "$tmp/t2" --data "$tmp/train.bin"
expect_fail "bad --optimizer" "optimizer" -- "$latent" train --model "$tmp/t2" --data "$tmp/train.bin" --out "$tmp/o" --optimizer lion
expect_fail "jacobi on a plain model" "T2MLR" -- "$latent" train --model "$tmp/plain" --data "$tmp/train.bin" --out "$tmp/o" --mode jacobi "${base[@]}"
expect_fail "lrt subsets > seq" "lrt-subsets" -- "$latent" train --model "$tmp/lrt" --data "$tmp/train.bin" --out "$tmp/o" --lrt-subsets 9 "${base[@]}"
expect_fail "seq beyond max_pos" "max_position" -- "$latent" train --model "$tmp/t2" --data "$tmp/train.bin" --out "$tmp/o" --seq 4096
expect_fail "token id outside vocab" "vocabulary" -- "$latent" train --model "$tmp/t2" --data "$tmp/badid.bin" --out "$tmp/o" "${base[@]}"
expect_fail "mask of the wrong size" "badmask.mask" -- "$latent" train --model "$tmp/t2" --data "$tmp/badmask.bin" --out "$tmp/o" "${base[@]}"
expect_fail "file not whole uint32s" "uint32" -- "$latent" train --model "$tmp/t2" --data "$tmp/odd.bin" --out "$tmp/o" "${base[@]}"
expect_fail "file shorter than a window" "tokens" -- "$latent" train --model "$tmp/t2" --data "$tmp/short.bin" --out "$tmp/o" --seq 64
expect_fail "--schedule-steps below --steps" "schedule-steps" -- "$latent" train --model "$tmp/t2" --data "$tmp/train.bin" --out "$tmp/o" --steps 6 --schedule-steps 5 "${base[@]}"
expect_fail "missing data file" "no-such" -- "$latent" train --model "$tmp/t2" --data "$tmp/no-such.bin" --out "$tmp/o" "${base[@]}"

# --- a run: progress lines, train.jsonl, eval, checkpoints, inference -----------
out=$tmp/run1
if "$latent" train --model "$tmp/t2" --data "$tmp/train.bin" --out "$out" --steps 7 "${base[@]}" \
        --eval-data "$tmp/eval.bin" --eval-every 3 --eval-batches 2 --save-every 3 --keep 2 >"$tmp/run1.log" 2>&1; then
    nl=$(grep -cE "loss [0-9]+\.[0-9]+" "$tmp/run1.log")
    [ "$nl" -ge 7 ] && ok "a progress line with 'loss <float>' per step ($nl)" || fail "progress lines" "$(head -5 "$tmp/run1.log")"
    grep -q "activations .* MiB" "$tmp/run1.log" && ok "activation memory printed" || fail "activation memory line missing"
    v=$("$PY" - "$out/train.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = {'step', 'loss', 'eval_loss', 'lr', 'grad_norm', 'tokens_per_s', 'tanh_gamma_rec', 'tanh_gamma_cur', 'gate_rec', 'gate_cur'}
bad = [r for r in rows if not keys <= set(r)]
ev = [r['step'] for r in rows if r['eval_loss'] is not None]
print('ok' if len(rows) == 7 and not bad and ev == [3, 6, 7] and [r['step'] for r in rows] == list(range(1, 8))
      else 'bad %d rows, missing keys in %d, eval at %s' % (len(rows), len(bad), ev))
EOF
)
    [ "$v" = ok ] && ok "train.jsonl: 7 rows with loss, eval_loss (steps 3, 6, 7), lr, grad_norm, tokens/s, gates" || fail "train.jsonl: $v"
    ls -d "$out"/step-* | xargs -n1 basename | tr '\n' ' ' >"$tmp/ck"
    [ "$(cat "$tmp/ck")" = "step-00000006 step-00000007 " ] && [ "$(readlink "$out/latest")" = step-00000007 ] \
        && ok "checkpoints: newest two kept, latest -> step-00000007" || fail "checkpoints: $(cat "$tmp/ck") latest=$(readlink "$out/latest")"
    if "$latent" generate --model "$out/latest" --prompt "hello" -n 4 >"$tmp/g1" 2>"$tmp/gen.err" &&
       "$latent" generate --model "$out" --prompt "hello" -n 4 >"$tmp/g2" 2>>"$tmp/gen.err" && cmp -s "$tmp/g1" "$tmp/g2"; then
        ok "the checkpoint loads and generates, and OUT itself loads as the newest model"
    else fail "generate from the checkpoint" "$(head -c 300 "$tmp/gen.err")"; fi
else
    fail "training run" "$(tail -n 5 "$tmp/run1.log")"
fi

# --- --schedule-steps: a short run follows the start of a longer run's schedule --
if "$latent" train --model "$tmp/t2" --data "$tmp/train.bin" --out "$tmp/sched6" --steps 6 --warmup 1 "${base[@]}" >"$tmp/sched.log" 2>&1 &&
   "$latent" train --model "$tmp/t2" --data "$tmp/train.bin" --out "$tmp/sched3" --steps 3 --schedule-steps 6 --warmup 1 "${base[@]}" >>"$tmp/sched.log" 2>&1; then
    v=$("$PY" - "$tmp/sched6/train.jsonl" "$tmp/sched3/train.jsonl" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
same = [(x['lr'], x['loss']) for x in a[:3]] == [(y['lr'], y['loss']) for y in b]
print("ok" if len(b) == 3 and same else 'lr %s loss %s against the 6-step run\'s %s %s' %
      ([y['lr'] for y in b], [y['loss'] for y in b], [x['lr'] for x in a[:3]], [x['loss'] for x in a[:3]]))
EOF
)
    [ "$v" = ok ] && ok "--steps 3 --schedule-steps 6: the first 3 steps (lr and loss) of the 6-step run" || fail "--schedule-steps: $v"
else fail "--schedule-steps runs" "$(tail -n 3 "$tmp/sched.log")"; fi

expect_fail "a fresh run into OUT with checkpoints" "resume" -- "$latent" train --model "$tmp/t2" --data "$tmp/train.bin" --out "$tmp/run1" "${base[@]}"

# --- §5 window order: with lr 0 every step's loss is the loss of its windows ----
out=$tmp/order
if "$latent" train --model "$tmp/plain" --data "$tmp/short.bin" --out "$out" --steps 6 --batch 3 --seq 8 --lr 0 \
        --optimizer sgd --no-shuffle --mode plain >/dev/null 2>&1; then
    bad=""
    for s in 0 1 2 3 4 5; do
        r=$("$PY" "$ref/train_reference.py" --model "$tmp/plain" --data "$tmp/short.bin" --batch 3 --seq 8 --mode plain --step $s)
        c=$(sed -n "$((s + 1))p" "$out/train.jsonl")
        "$PY" -c "import json,sys; a=json.loads(sys.argv[1])['loss']; b=json.loads(sys.argv[2])['loss']; sys.exit(abs(a-b) > 1e-5*abs(b))" "$c" "$r" \
            || bad="$bad step$s"
    done
    [ -z "$bad" ] && ok "unshuffled order of models.md §5 (6 steps wrapping a 50-token file)" || fail "window order:$bad"
else fail "order run failed"; fi

# --- shuffling: seeded and reproducible -------------------------------------------
for run in 1a:1 1b:1 2:2; do
    "$latent" train --model "$tmp/plain" --data "$tmp/train.bin" --out "$tmp/sh" --steps 3 "${base[@]}" --seed "${run#*:}" >/dev/null 2>&1
    cut -d, -f2 "$tmp/sh/train.jsonl" >"$tmp/sh.${run%%:*}"
    rm -rf "$tmp/sh"
done
if [ -s "$tmp/sh.1a" ] && cmp -s "$tmp/sh.1a" "$tmp/sh.1b" && ! cmp -s "$tmp/sh.1a" "$tmp/sh.2"; then ok "shuffled order: same seed repeats, another seed differs"
else fail "shuffle reproducibility"; fi

# --- resume: bit-exact after a crash at every point of a save ---------------------
run=(--data "$tmp/train.bin" --steps 6 "${base[@]}" --save-every 2 --eval-data "$tmp/eval.bin" --eval-every 2 --eval-batches 1)
for model in t2 lrt; do
    "$latent" train --model "$tmp/$model" --out "$tmp/full_$model" "${run[@]}" >/dev/null 2>&1
    for point in model optimizer rename latest; do
        o=$tmp/crash_${model}_$point
        # (a subshell, so the shell's "Killed" notice goes nowhere)
        rc=$( (LATENT_TRAIN_CRASH=4:$point "$latent" train --model "$tmp/$model" --out "$o" "${run[@]}" >/dev/null 2>&1
               echo $?) 2>/dev/null)
        want=step-00000002   # at 'latest' step-4 is in place but latest not switched yet
        lt=$(readlink "$o/latest")
        if [ "$rc" -ne 137 ] || [ "$lt" != "$want" ]; then
            fail "$model crash at $point: exit $rc, latest -> $lt"; continue
        fi
        if ! "$latent" logits --model "$o/latest" --tokens 1,2,3 >/dev/null 2>"$tmp/lg.err"; then
            fail "$model crash at $point: latest does not load" "$(head -c 200 "$tmp/lg.err")"; continue
        fi
        if ! "$latent" train --out "$o" --resume "${run[@]}" >/dev/null 2>"$tmp/res.err"; then
            fail "$model crash at $point: resume failed" "$(tail -n 2 "$tmp/res.err")"; continue
        fi
        if cmp -s "$tmp/full_$model/latest/model.safetensors" "$o/latest/model.safetensors" &&
           cmp -s "$tmp/full_$model/latest/optimizer.safetensors" "$o/latest/optimizer.safetensors" &&
           diff -q <(cut -d, -f1-3 "$tmp/full_$model/train.jsonl") <(cut -d, -f1-3 "$o/train.jsonl") >/dev/null; then
            ok "$model: killed at '$point' of a save, previous checkpoint loads, --resume gives identical losses and weights"
        else
            fail "$model crash at $point: resumed run differs" "$(diff <(cut -d, -f1-3 "$tmp/full_$model/train.jsonl") <(cut -d, -f1-3 "$o/train.jsonl") | head -4)"
        fi
    done
done

# --- leftovers of saves killed mid-write: removed at start and resume, a live run's kept
o=$tmp/stale
"$latent" train --model "$tmp/t2" --out "$o" --data "$tmp/train.bin" --steps 2 "${base[@]}" --save-every 2 >/dev/null 2>&1
sleep 0 & dead=$!; wait "$dead"   # a PID that no longer runs
mkdir -p "$o/.step-00000004.staging.tmp-$dead" "$o/.step-00000004.staging.tmp-$$"
touch "$o/.step-00000004.staging.tmp-$dead/model.safetensors"
"$latent" train --out "$o" --resume --data "$tmp/train.bin" --steps 4 "${base[@]}" --save-every 2 >/dev/null 2>"$tmp/stale.err"
if [ ! -e "$o/.step-00000004.staging.tmp-$dead" ] && [ -d "$o/.step-00000004.staging.tmp-$$" ]; then
    ok "resume removes a dead save's temporary directory and keeps a live process's"
else
    fail "stale staging directories" "$(ls -a "$o" | tr '\n' ' ') $(tail -n 2 "$tmp/stale.err")"
fi
rm -rf "$o/.step-00000004.staging.tmp-$$"

# --- real kill -9 at random moments of a run that saves every step ----------------
o=$tmp/kill
killed=0; good=0
for i in 1 2 3 4 5 6; do
    "$latent" train --model "$tmp/t2" --out "$o" --data "$tmp/train.bin" --steps 400 "${base[@]}" --save-every 1 --resume \
        >/dev/null 2>&1 &
    pid=$!
    sleep "0.$((RANDOM % 6 + 2))"
    kill -9 $pid 2>/dev/null && killed=$((killed + 1))
    wait $pid 2>/dev/null
    if [ -e "$o/latest" ]; then
        "$latent" logits --model "$o/latest" --tokens 1,2,3 >/dev/null 2>&1 && good=$((good + 1))
    else
        good=$((good + 1)) # killed before the first save: nothing to load yet
    fi
done
if [ "$good" -eq 6 ] && [ -e "$o/latest" ]; then ok "kill -9 at random times ($killed kills): the latest checkpoint always loads ($(readlink "$o/latest"))"
else fail "kill -9: latest loadable after $good of 6 kills"; fi

# --- SIGINT: finish the step, save, exit 130 ----------------------------------------
o=$tmp/int
"$latent" train --model "$tmp/t2" --out "$o" --data "$tmp/train.bin" --steps 100000 "${base[@]}" >"$tmp/int.log" 2>&1 &
pid=$!
for _ in $(seq 50); do [ -s "$o/train.jsonl" ] && break; sleep 0.1; done
kill -INT $pid
rc=0; wait $pid || rc=$?
steps=$(wc -l <"$o/train.jsonl")
if [ "$rc" -eq 130 ] && [ "$(readlink "$o/latest")" = "$(printf 'step-%08d' "$steps")" ]; then
    ok "SIGINT: saved step $steps and exited 130"
else fail "SIGINT: exit $rc, latest $(readlink "$o/latest"), $steps steps logged"; fi

# --- adaptive Jacobi: fewer iterations than the cap, logged per step --------------------
o=$tmp/adapt
if "$latent" train --model "$tmp/t2" --out "$o" --data "$tmp/train.bin" --steps 4 "${base[@]}" --jacobi-iters 12 \
        --jacobi-tol 1e-4 >"$tmp/adapt.log" 2>&1 &&
   "$PY" -c "import json,sys; rs=[json.loads(l) for l in open(sys.argv[1])]; it=[r['jacobi_iters'] for r in rs]
rows=[r['jacobi_rows'] for r in rs]
assert len(it) == 4 and all(1 <= i < 12 for i in it), it
assert all(0 < f < 1 for f in rows), rows; print(it, 'rows', rows)" "$o/train.jsonl" >"$tmp/adapt.out" 2>&1; then
    ok "--jacobi-tol: iterations per step and fraction of rows computed $(cat "$tmp/adapt.out") of a cap of 12, in train.jsonl"
else fail "--jacobi-tol" "$(tail -3 "$tmp/adapt.log" "$tmp/adapt.out" 2>/dev/null)"; fi

# --- precision: bf16 products, the checkpoint's dtype, auto from a BF16 model ----------
o=$tmp/bf
if "$latent" train --model "$tmp/plain" --out "$o" --data "$tmp/train.bin" --steps 3 "${base[@]}" --precision bf16 \
        --save-dtype bf16 >"$tmp/bf.log" 2>&1 && grep -q "products bf16" "$tmp/bf.log" &&
   "$PY" -c "import json,struct,sys; f=open(sys.argv[1],'rb'); h=json.loads(f.read(struct.unpack('<Q',f.read(8))[0]))
assert {v['dtype'] for k,v in h.items() if k!='__metadata__'} == {'BF16'}, h" "$o/latest/model.safetensors" &&
   "$latent" generate --model "$o/latest" --prompt "ab" -n 4 --temperature 0 >/dev/null 2>&1; then
    ok "--precision bf16 --save-dtype bf16: a BF16 checkpoint that loads"
else fail "--precision bf16 --save-dtype bf16" "$(tail -3 "$tmp/bf.log")"; fi
if "$latent" train --model "$o/latest" --out "$tmp/bf2" --data "$tmp/train.bin" --steps 2 "${base[@]}" >"$tmp/bf2.log" 2>&1 &&
   grep -q "products bf16" "$tmp/bf2.log" &&
   "$PY" -c "import json,struct,sys; f=open(sys.argv[1],'rb'); h=json.loads(f.read(struct.unpack('<Q',f.read(8))[0]))
assert {v['dtype'] for k,v in h.items() if k!='__metadata__'} == {'BF16'}, h" "$tmp/bf2/latest/model.safetensors"; then
    ok "auto on a BF16 model: bf16 products, a BF16 checkpoint"
else fail "--precision/--save-dtype auto on a BF16 model" "$(tail -3 "$tmp/bf2.log")"; fi
expect_fail "--precision bogus" "precision must be" -- "$latent" train --model "$tmp/plain" --out "$tmp/bf3" --data "$tmp/train.bin" --precision fp8

echo "$((n - fails)) of $n passed"
[ "$fails" -eq 0 ]
