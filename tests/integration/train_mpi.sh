#!/usr/bin/env bash
# Data-parallel `latent train` under mpirun (docs/training.md, "Data
# parallel"): 2 and 3 ranks on this machine give the single process's losses
# and weights on the same global batch, to summation-order rounding, for
# plain, T2MLR (Jacobi) and LRT, with masked targets so the ranks' shares
# score different numbers of targets, and with a batch the ranks cannot
# split evenly; rank 0 alone writes; SIGTERM to mpirun saves a checkpoint and
# stops every rank; a run saved by 2 ranks resumes on 1 and stays on the
# single process's loss curve; without mpirun nothing of MPI is loaded.
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../harness.sh" train_mpi

if ! command -v mpirun >/dev/null || [ ! -f "$build/latent-mpi.so" ]; then
    fail "mpirun or $build/latent-mpi.so missing (make test installs openmpi-bin and libopenmpi-dev)"
    echo "0 of 1 checks passed"; exit 1
fi
# As root OpenMPI wants explicit consent; shared memory may be unavailable in
# containers, so TCP over loopback; more ranks than cores is intended here.
MPI=(mpirun --oversubscribe --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo)

small="--d 32 --layers 3 --heads 4 --kv-heads 2 --ffn 48 --vocab 300"
"$PY" "$ref/make_model.py" --out "$tmp/t2" --kind t2mlr --t2mlr 1,1 --seed 3 $small >/dev/null
"$PY" "$ref/make_model.py" --out "$tmp/lrt" --kind lrt --lrt-source 1 --lrt-inject 0,2 --seed 3 $small >/dev/null
"$PY" "$ref/make_model.py" --out "$tmp/plain" --kind plain --seed 3 $small >/dev/null
"$PY" - "$tmp" <<'PYEOF'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(9)
(np.arange(4000) * 7 % 290 + rng.integers(0, 10, 4000)).astype('<u4').tofile(d + '/train.bin')
(rng.random(4000) < 0.6).astype(np.uint8).tofile(d + '/train.mask')  # uneven scored counts per share
PYEOF

# compare A B LOSS_BOUND WEIGHT_BOUND: train.jsonl losses (relative) and the
# final weights (absolute) of two runs' OUT directories.
compare() {
    "$PY" - "$1" "$2" "$3" "$4" <<'PYEOF'
import json, os, sys
sys.path.insert(0, os.environ['REF'])
import numpy as np
from safetensors_py import read_model_dir
a, b, lb, wb = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
la = [json.loads(l) for l in open(a + '/train.jsonl')]
lbs = [json.loads(l) for l in open(b + '/train.jsonl')]
assert [x['step'] for x in la] == [x['step'] for x in lbs], 'steps differ'
worst = max(abs(x['loss'] - y['loss']) / abs(x['loss']) for x, y in zip(la, lbs))
ta, tb = read_model_dir(a + '/latest'), read_model_dir(b + '/latest')
wd = max(float(np.max(np.abs(ta[k].astype(np.float64) - tb[k]))) for k in ta)
print('%d steps, loss rel diff %.2e, weight diff %.2e' % (len(la), worst, wd))
assert worst <= lb, 'loss differs by %g > %g' % (worst, lb)
assert wd <= wb, 'weights differ by %g > %g' % (wd, wb)
PYEOF
}
export REF=$ref

train() { # OUT MODEL [extra...]
    local out=$1 model=$2; shift 2
    "$latent" train --model "$model" --data "$tmp/train.bin" --out "$out" --seq 8 --steps 10 --threads 1 "$@"
}
mtrain() { # NP OUT MODEL [extra...]
    local np=$1 out=$2 model=$3; shift 3
    "${MPI[@]}" -np "$np" "$latent" train --model "$model" --data "$tmp/train.bin" --out "$out" --seq 8 --steps 10 --threads 1 "$@"
}

# Bounds (docs/training.md): the ranks' gradients differ from the single
# process's only in the order rows are summed (float32, ~1e-7 relative); SGD
# carries that into the weights linearly, AdamW's normalised steps can
# amplify it where a gradient is near zero, so its bound is on the losses.
for kind in plain t2 lrt; do
    for opt in sgd adamw; do
        extra=(--batch 6 --optimizer "$opt" --lr 3e-3)
        [ "$kind" = t2 ] && extra+=(--jacobi-iters 3 --jacobi-grad-iters 2)
        [ "$kind" = lrt ] && extra+=(--lrt-subsets 2)
        train "$tmp/$kind-$opt-1" "$tmp/$kind" "${extra[@]}" >"$tmp/log1" 2>&1 || { fail "$kind $opt: single process" "$(tail -3 "$tmp/log1")"; continue; }
        for np in 2 3; do
            if ! mtrain $np "$tmp/$kind-$opt-$np" "$tmp/$kind" "${extra[@]}" >"$tmp/log$np" 2>&1; then
                fail "$kind $opt: mpirun -np $np" "$(tail -5 "$tmp/log$np")"; continue
            fi
            if [ "$opt" = sgd ]; then bounds=(1e-5 1e-6); else bounds=(1e-4 1e-3); fi
            if out=$(compare "$tmp/$kind-$opt-1" "$tmp/$kind-$opt-$np" "${bounds[@]}" 2>&1); then
                ok "$kind $opt: $np ranks = 1 process ($out)"
            else fail "$kind $opt: $np ranks vs 1 process" "$out"; fi
        done
    done
done

# A batch of 5 over 2 ranks (2 + 3 sequences).
train "$tmp/odd-1" "$tmp/plain" --batch 5 --optimizer sgd >/dev/null 2>&1
mtrain 2 "$tmp/odd-2" "$tmp/plain" --batch 5 --optimizer sgd >"$tmp/logodd" 2>&1
if out=$(compare "$tmp/odd-1" "$tmp/odd-2" 1e-5 1e-6 2>&1); then ok "batch 5 over 2 ranks ($out)"; else fail "batch 5 over 2 ranks" "$out"; fi
# (mpirun gives the ranks a terminal: the progress line is a bar)
banners=$(grep -c "data parallel over 2 ranks" "$tmp/logodd"); lasts=$(grep -o "step 10/10" "$tmp/logodd" | wc -l)
if [ "$banners" = 1 ] && [ "$lasts" = 1 ]; then ok "rank 0 alone prints (one banner, one last step)"
else fail "rank 0 alone prints" "banners $banners, last steps $lasts" "$(head -5 "$tmp/logodd")"; fi
if grep -q '"allreduce_s"' "$tmp/odd-2/train.jsonl" && ! grep -q '"allreduce_s"' "$tmp/odd-1/train.jsonl"; then
    ok "train.jsonl logs allreduce time under MPI only"
else fail "allreduce_s in train.jsonl"; fi

# A batch smaller than the ranks: refused, every rank exits.
if timeout 60 "${MPI[@]}" -np 3 "$latent" train --model "$tmp/plain" --data "$tmp/train.bin" --out "$tmp/tiny" --seq 8 \
        --batch 2 --steps 2 --threads 1 >"$tmp/logtiny" 2>&1; then fail "batch 2 over 3 ranks: exited 0"
elif grep -q "smaller than the 3 ranks" "$tmp/logtiny"; then ok "batch 2 over 3 ranks refused"
else fail "batch 2 over 3 ranks" "$(tail -3 "$tmp/logtiny")"; fi

# Adaptive Jacobi decides per batch: refused under mpirun (each rank would decide on its share).
if "${MPI[@]}" -np 2 "$latent" train --model "$tmp/t2" --data "$tmp/train.bin" --out "$tmp/adapt" --seq 8 --batch 4 \
        --steps 2 --threads 1 --jacobi-tol 1e-4 >"$tmp/logadapt" 2>&1; then fail "--jacobi-tol under mpirun: exited 0"
elif grep -q "jacobi-tol under mpirun" "$tmp/logadapt"; then ok "--jacobi-tol under mpirun refused, naming why"
else fail "--jacobi-tol under mpirun" "$(tail -3 "$tmp/logadapt")"; fi

# SIGTERM to mpirun: it signals the ranks (then SIGKILLs them after
# odls_base_sigkill_timeout, 1 s by default): they agree on the step, rank 0
# saves, the others wait for it. Then 1 process resumes the 2 ranks' run and
# stays on the single process's curve (SGD: differences stay at rounding).
ref_run=(--batch 6 --optimizer sgd --lr 3e-3 --steps 12000 --save-every 100000)
train "$tmp/long-1" "$tmp/plain" "${ref_run[@]}" >/dev/null 2>&1
"${MPI[@]}" -np 2 "$latent" train --model "$tmp/plain" --data "$tmp/train.bin" --out "$tmp/long-2" --seq 8 --threads 1 \
    "${ref_run[@]}" >"$tmp/logterm" 2>&1 &
pid=$!
for i in $(seq 1 400); do [ -s "$tmp/long-2/train.jsonl" ] && [ "$(wc -l <"$tmp/long-2/train.jsonl")" -ge 50 ] && break; sleep 0.02; done
kill -TERM $pid
wait $pid
saved=$(ls -d "$tmp"/long-2/step-* 2>/dev/null | tail -n 1)
last=$(tail -n 1 "$tmp/long-2/train.jsonl" | sed 's/{"step": \([0-9]*\).*/\1/')
left=$(pgrep -f "long-2" | wc -l)
if [ -n "$saved" ] && [ "$(basename "$saved")" = "$(printf 'step-%08d' "$last")" ] && [ "$left" = 0 ] && [ "$last" -lt 12000 ]; then
    ok "SIGTERM to mpirun: every rank stopped at step $last, saved $(basename "$saved")"
else fail "SIGTERM to mpirun" "saved=$saved last logged=$last ranks left=$left"; fi
if train "$tmp/long-2" "$tmp/plain" "${ref_run[@]}" --resume >"$tmp/logres" 2>&1 &&
   out=$(compare "$tmp/long-1" "$tmp/long-2" 1e-4 1e-4 2>&1); then
    ok "2 ranks' checkpoint resumed on 1 process: the same curve ($out)"
else fail "resume 2 ranks -> 1 process" "$(tail -3 "$tmp/logres")" "${out:-}"; fi

# The sanitizer builds under mpirun (make test builds them): ASan's leak
# check is off for these runs only, because OpenMPI's own allocations at
# MPI_Finalize (some in components it has already unloaded, which no
# suppression can name) are reported as leaks; every other check stays on.
for san in asan ubsan; do
    bin=$build/$san/latent
    [ -x "$bin" ] || { echo "skip $san under mpirun: $bin not built"; continue; }
    if LATENT_MPI_PLUGIN=$build/latent-mpi.so ASAN_OPTIONS=detect_leaks=0 "${MPI[@]}" -np 2 "$bin" train --model "$tmp/lrt" \
            --data "$tmp/train.bin" --out "$tmp/$san-2" --seq 8 --steps 10 --threads 1 --batch 6 --optimizer sgd --lr 3e-3 \
            --lrt-subsets 2 >"$tmp/log$san" 2>&1 &&
       out=$(compare "$tmp/lrt-sgd-1" "$tmp/$san-2" 1e-5 1e-6 2>&1); then
        ok "$san build, LRT over 2 ranks = 1 process ($out)"
    else fail "$san build under mpirun" "$(tr '\r' '\n' <"$tmp/log$san" | grep -v '^\[' | tail -5)" "${out:-}"; fi
done

# Without mpirun: one process, MPI never loaded.
"$latent" train --model "$tmp/plain" --data "$tmp/train.bin" --out "$tmp/solo" --seq 8 --batch 2 --steps 3 --threads 1 >/dev/null 2>&1 &
spid=$!
maps=""
for i in $(seq 1 100); do maps=$(cat /proc/$spid/maps 2>/dev/null); [ -n "$maps" ] && break; sleep 0.01; done
wait $spid
if [ -n "$maps" ] && ! grep -q "libmpi\|latent-mpi" <<<"$maps"; then ok "without mpirun, libmpi is never mapped"
else fail "without mpirun, libmpi is never mapped"; fi

echo "$((n - fails)) of $n checks passed"
[ "$fails" = 0 ]
