#!/usr/bin/env bash
# `make experiment`: does latent recurrence pay on the tasks the papers name?
#
# For each task (parity, S3 and S5 word problems, variable assignment with
# alias depth 1-5) it trains, from one seed and one backbone (the same
# `latent init` seed, so the same transformer weights with or without the
# recurrence), for the same number of steps:
#   plain           the transformer alone
#   t2mlr           T2MLR over blocks 1..2, Jacobi with D = the record length
#                   (exact: the recurrence of every position is settled)
#   t2mlr-adaptive  the same, --jacobi-tol 0.01; the cap D + 5 = T + 1 + G lets the
#                   passes without gradient converge (one position a pass) before
#                   the G = 4 gradient passes (var: 16, as fixed)
#   lrt             LRT, memory from block 2 injected into blocks 1..2, trained
#                   with S = T interleaved subsets (the exact recurrence)
# then runs `latent eval` (exact sequential recurrence) on records twice the
# trained length (group tasks) or over alias depths 1-5 (var-assign), and
# writes docs/experiment-results.md and docs/experiment-*.svg
# (models/tools/experiment_report.py). The S3 T2MLR model is copied to
# models/s3 (served by the test tests/integration/server_s3.sh).
#
# usage: make experiment [QUICK=1]    (or models/experiment.sh)
# env:   QUICK=1    a smoke run: few steps, minutes, not evidence (written to
#                   build/experiment-quick/report, docs/ untouched)
#        STEPS, VAR_STEPS (group tasks / var-assign steps), TASKS (names below), WD (weight decay, 0.1),
#        MODELS, JOBS (runs at once, default 2, each --threads 1),
#        WORK (build/experiment), SEED (1: the seed of the data, the inits and
#        the training order; another seed is a replicate, whose report goes to
#        WORK/report, and WORK defaults to build/experiment-seedN),
#        REPLICATES (seeds run again for the report's table over seeds:
#        "2 3 4 5" in the canonical run, 2 with QUICK, none otherwise),
#        REPLICATE_TASKS (s3), REPLICATE_MODELS ("plain t2mlr"), LATENT
#        (build/latent), PYTHON, PRECISION (f32 or bf16; default bf16 where
#        the CPU has bf16 instructions)
set -euo pipefail
# The whole script is one block, parsed before it runs: bash reads a script
# as it goes, and a run of hours must not pick up an edit made meanwhile.
{
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
PY=${PYTHON:-/usr/bin/python3}
latent=${LATENT:-build/latent}
quick=${QUICK:-0}
[ "$quick" = 0 ] || quick=1
seed=${SEED:-1}
case $seed in '' | *[!0-9]*) echo "experiment: SEED must be a number" >&2; exit 2 ;; esac
# The CPU and its relevant flags, for the reports (figures name their machine).
machine_line() {
    local cpu flags="" f
    cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
    for f in avx512f avx512_bf16 amx_bf16; do grep -qw $f /proc/cpuinfo && flags="$flags $f"; done
    echo "$cpu ($(nproc) vCPUs;$flags)"
}
# Waits until fewer than N background runs are left; a failed one sets failed=1.
throttle() {
    while [ "$(jobs -rp | wc -l)" -ge "$1" ]; do wait -n || failed=1; done
}

if [ "$quick" = 1 ]; then
    steps=${STEPS:-120}; var_steps=${VAR_STEPS:-60}; work=${WORK:-build/experiment-quick}; n_train=4000
elif [ "$seed" != 1 ]; then
    steps=${STEPS:-3000}; var_steps=${VAR_STEPS:-1000}; work=${WORK:-build/experiment-seed$seed}; n_train=60000
else
    steps=${STEPS:-3000}; var_steps=${VAR_STEPS:-1000}; work=${WORK:-build/experiment}; n_train=60000
fi
# Only the canonical run (seed 1, not QUICK) writes docs/ and models/s3.
canonical=0
[ "$quick" = 0 ] && [ "$seed" = 1 ] && canonical=1
tasks=${TASKS:-"parity s3 s5 var"}
models=${MODELS:-"plain t2mlr t2mlr-adaptive lrt"}
jobs=${JOBS:-2}
wd=${WD:-0.1}     # AdamW weight decay on matrices
train_len=16      # group tasks: elements per training record
test_len=32       # ... and per test record (2x)
var_depth_lo=1 var_depth_hi=5
# Replicates: the same recipe on other seeds' data, inits and training
# order, for REPLICATE_TASKS with REPLICATE_MODELS, each in its own WORK
# (build/experiment-seedN; a QUICK run's under its own work directory), so
# that the report says how many seeds reach what one seed shows. The
# canonical run makes four; a replicate run makes none.
if [ "$quick" = 1 ]; then replicates=${REPLICATES-2}
elif [ "$canonical" = 1 ]; then replicates=${REPLICATES-"2 3 4 5"}
else replicates=${REPLICATES-}; fi
rep_tasks=""
for t in ${REPLICATE_TASKS:-s3}; do
    case " $tasks " in *" $t "*) ;; *) continue ;; esac # only tasks this run has
    case $t in parity | s3 | s5) rep_tasks="$rep_tasks $t" ;; *) echo "experiment: REPLICATE_TASKS: group tasks only ($t)" >&2; exit 2 ;; esac
done
[ -n "$rep_tasks" ] || replicates=""
rep_models=""
for m in ${REPLICATE_MODELS:-"plain t2mlr"}; do
    case " $models " in *" $m "*) rep_models="$rep_models $m" ;; esac # only models this run has
done
[ -n "$rep_models" ] || replicates=""
rep_work() { if [ "$quick" = 1 ]; then echo "$work/seed$1"; else echo "build/experiment-seed$1"; fi; }

[ -x "$latent" ] || make "$latent"
mkdir -p "$work/results"
log() { printf '[experiment %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# set -e stops at a failed command; say which (the data commands' own
# messages go to /dev/null), inside functions too (-E)
set -E
trap 'log "stopped: exit $? at line $LINENO: $BASH_COMMAND"' ERR
precision=f32
grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null && precision=bf16 || true
grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null && precision=bf16 || true
precision=${PRECISION:-$precision}

# ---- data: one directory per task, with its tokenizer --------------------------
make_data() { # task
    local t=$1 d="$work/$1"
    [ -s "$d/test.json" ] && return 0
    mkdir -p "$d"
    case $t in
    parity | s3 | s5)
        local g=$t
        "$latent" data group --group "$g" --len $train_len --n-records $n_train --seed $seed --out "$d/train" --tokenizer-out "$d/tok" 2>/dev/null
        "$latent" data group --group "$g" --len $test_len --n-records 500 --seed $((seed + 1000)) --out "$d/test" 2>/dev/null ;;
    var)
        "$latent" data var-assign --min-depth $var_depth_lo --max-depth $var_depth_hi --n-records $n_train --seed $seed \
            --out "$d/train" --tokenizer-out "$d/tok" 2>/dev/null
        "$latent" data var-assign --min-depth $var_depth_lo --max-depth $var_depth_hi --n-records 1000 --seed $((seed + 1000)) \
            --out "$d/test" 2>/dev/null ;;
    *) echo "experiment: unknown task $t" >&2; exit 2 ;;
    esac
}

json_field() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }
# the learning rate and the training set's suffix (decoys or not) of the
# chunk that ends at STEP, from the run's curve (models/tools/chunk_schedule.py)
cool_lr() { "$PY" models/tools/chunk_schedule.py lr "$@"; }          # CURVE FINAL_STAGE COOL BASE STEP [FOLLOW]
decoy_suffix() { "$PY" models/tools/chunk_schedule.py data "$@"; }   # CURVE STAGE DECOY_FROM GATE DEPTH STEP [FOLLOW]
# curve_last CURVE FIELD...: those fields of a curve's last line ("next" is "stay" where absent)
curve_last() { "$PY" -c 'import json,sys; l=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(*(l.get(k, "stay") for k in sys.argv[2:]))' "$@"; }

# ---- one model: config, init, train, eval ---------------------------------------
run_model() { # task model
    local t=$1 m=$2 d="$work/$1"
    local out="$work/results/$t.$m"
    local vocab rec
    vocab=$(json_field "$d/train.json" vocab_size)
    rec=$(json_field "$d/train.json" record_len)
    local D=$rec
    [ "$t" = var ] && D=16 # 76-token records: D = T would cost 5x the group tasks' budget
    local cfg="$d/$m.config.json" kind=plain
    case $m in t2mlr*) kind=t2mlr ;; lrt) kind=lrt ;; esac
    "$PY" models/tools/experiment_config.py "$cfg" "$vocab" "$kind"
    local s=$steps
    [ "$t" = var ] && s=$var_steps
    local args=(--model "$d/$m.init" --data "$d/train.bin" --out "$d/$m.run" --seq "$rec" --batch 32 --steps "$s"
        --optimizer adamw --lr 2e-3 --beta1 0.9 --beta2 0.98 --weight-decay "$wd" --warmup $((s < 1000 ? s / 10 : 100))
        --lr-schedule cosine --grad-clip 1 --seed $seed --threads 1 --precision "$precision" --eval-every 100000)
    case $m in
    t2mlr) args+=(--mode jacobi --jacobi-iters "$D" --jacobi-grad-iters 4) ;;
    t2mlr-adaptive)
        local cap=$((D + 5))
        [ "$t" = var ] && cap=$D
        args+=(--mode jacobi --jacobi-iters "$cap" --jacobi-grad-iters 4 --jacobi-tol 0.01) ;;
    lrt) args+=(--mode lrt --lrt-subsets "$rec") ;; # S = T: every position its own subset, the exact recurrence
    esac
    # a finished run with the same arguments is kept (rerunning resumes the experiment)
    [ -s "$out.eval.json" ] && [ -s "$out.train.json" ] &&
        [ "$(json_field "$out.train.json" args)" = "${args[*]}" ] && return 0
    rm -rf "$d/$m.init" "$d/$m.run" "$out.eval.json"
    "$latent" init --config "$cfg" --out "$d/$m.init" --seed $seed --tokenizer "$d/tok" --gamma-rec 1 --gamma-cur 0 2>/dev/null
    local t0 t1
    t0=$(date +%s.%N)
    "$latent" train "${args[@]}" >"$d/$m.train.log" 2>&1 </dev/null || { log "$t/$m: training failed, see $d/$m.train.log"; return 1; }
    t1=$(date +%s.%N)
    "$latent" eval --model "$d/$m.run/latest" --data "$d/test.bin" --json --bucket-width 1 >"$out.eval.tmp" 2>"$d/$m.eval.log" ||
        { log "$t/$m: eval failed, see $d/$m.eval.log"; return 1; }
    "$PY" - "$d/$m.run/train.jsonl" "$t0" "$t1" "$out.train.json" "${args[*]}" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
secs = float(sys.argv[3]) - float(sys.argv[2])
it = [r["jacobi_iters"] for r in rows if "jacobi_iters" in r]
json.dump({"seconds": secs, "time": "%d:%02d" % (secs // 60, secs % 60),
           "iters": ("%.1f" % (sum(it) / len(it))) if it else "—", "final_loss": rows[-1]["loss"],
           "args": sys.argv[5]}, open(sys.argv[4], "w"))
EOF
    mv "$out.eval.tmp" "$out.eval.json"
    log "$t/$m (seed $seed) done in $(json_field "$out.train.json" time)"
}

# ---- `make experiment-state` (STATE=1): S5 and variable assignment, with curricula ----
# Issue 24. Each (task, model, seed) is one continuous AdamW run (lr 2e-3; var 1e-3,
# betas 0.9/0.98, weight decay 0.1, 100 warmup steps, then constant) cut into
# chunks of `latent train --resume` (bit-exact continuation; the data file
# and --seq change with the stage). After every chunk `latent eval` measures
# the stage's test set and the final test set: the learning curve. The
# curriculum advances when the stage's criterion is met, or when the stage's
# share of the budget is spent, so that every model reaches the final stage:
#   s5   length curriculum 4 -> 8 -> 16 elements (records of 6, 10, 18 tokens);
#        advance when every position of the stage's test set is >= 0.95, or at
#        50% / 75% of the budget. d 128, 4 blocks, 4 heads, FFN 512; T2MLR over
#        blocks 1..2, Jacobi D = the record length, gradient through the last 4.
#   var  first the lookup stages (depth 0: "a=3;b=7;...;b?" with 2 digit
#        variables, then 8; advance at depth-0 accuracy >= 0.9, or at 1200 CPU
#        s; done at >= 0.95 with 8, or at 1500 CPU s; lr 1e-3 and f32
#        products unless PRECISION says otherwise, as in the probes, here and
#        in the forks), one plain run per seed
#        (model "lookup") from which every model forks: plain from its weights,
#        T2MLR and LRT from them with the recurrence added by `latent retrofit`
#        (the same function at the start), each with a fresh optimizer; its
#        curve is the first lines of theirs and its CPU seconds count in their
#        budget. Then the depth curriculum: alias depths 1..k, k = 1 .. 5,
#        with 2k digit variables and 2(k-1) distractor aliases (up to the
#        task's 8 and 6; STATE_VAR_LINES=0: 8 and 6 from the start); advance
#        when the mean over depths 1..k is >= 0.9, or 300/600/900/1200 CPU s
#        after the lookup's end. Training records hold 8 queries (each
#        answer scored; 108 tokens at k = 5), test records one (80 at k = 5).
#        The probes of docs/experiments.md found both halves necessary.
#        STATE_VAR_LOOKUP=0: the earlier recipe (no lookup stages, one query
#        a record, stage ends at 360/540/720/900 CPU s).
#        d 64, 4 blocks, FFN 256; T2MLR over blocks 1..2, Jacobi D 8,
#        gradient through 4 (the paper's D/B here).
# A run stops after STATE_BUDGET CPU seconds of `latent train` (1200: 20
# minutes of one core, --threads 1; evaluations not counted; CPU time rather
# than wall time so that other jobs on a shared machine do not shrink the
# budget) or STATE_MAX_STEPS steps. The curve records both. Results in
# WORK (build/experiment-state)/results: TASK.MODEL.sSEED.curve.jsonl (a line
# per chunk: step, stage, training tokens, training seconds, accuracies),
# .eval.json (final `latent eval`; s5 also .eval32.json, twice the length;
# var also .heldout.json, the final model on a held-out set of
# STATE_VAR_HELDOUT records, 5000, QUICK 100: state_heldout below).
# The report (models/tools/experiment_report.py --state) goes to WORK/report.
# env: STATE_TASKS ("s5 var"), STATE_MODELS ("t2mlr plain"; also lrt, with
#      STATE_LRT_SOURCE (3: the memory from the last block, the LRT search of
#      docs/experiments.md), STATE_LRT_GAMMA (0.1), STATE_LRT_S (the record
#      length)), STATE_STD (the init's standard deviation, 0.02), STATE_SEEDS
#      ("11 12 13"), STATE_BUDGET, STATE_MAX_STEPS, STATE_CHUNK (s5 500, var 250),
#      STATE_STAGE_STEPS (the steps at which the stages end, e.g. "11500 13500":
#      a control run on the schedule another run took; criteria then unused;
#      by default a plain run takes the finished T2MLR run's of its task and
#      seed, stage ends and steps, so the two see the same data);
#      STATE_STAGE_CPU (the CPU seconds at which a stage ends if its
#      criterion is not met: s5 "600 900", i.e. 50/75% of the 20-minute
#      budget, also when the budget grows; var without the lookup stages
#      "360 540 720 900"; the lookup recipe ignores it and takes
#      STATE_VAR_LOOKUP_L2_CPU and STATE_VAR_STAGE_CPU);
#      STATE_COOL_CPU (the cool-down: from this many CPU s on, each chunk of
#      the final stage halves the learning rate, to 1/16 at most; s5 1000,
#      var 1800 after the lookup run's end; the long runs and cool-downs of
#      docs/experiments.md found the constant rate stalls short of the
#      targets and the halvings reach them; a run following T2MLR's schedule
#      takes its rates too),
#      STATE_VAR_LOOKUP (1: the lookup stages; 0: without, as above),
#      STATE_VAR_LOOKUP_BUDGET (1500: CPU s of the lookup run at most),
#      STATE_VAR_LOOKUP_TARGET (0.95: L8's accuracy at which the lookup run
#      ends; the forks from a lookup run learnt to 0.96-1.00 stalled below
#      the target in seeds 11 and 13, docs/experiments.md),
#      STATE_VAR_LOOKUP_L2_CPU (1200: CPU s at which L2 ends, criterion unmet),
#      STATE_VAR_STAGE_CPU ("300 600 900 1200": CPU s after the lookup run's
#      end at which depth stages 1-4 end, criterion unmet),
#      STATE_VAR_COOL_AFTER (1800: var's cool-down, CPU s after that end),
#      STATE_VAR_STAGE_STEPS, STATE_VAR_COOL_AFTER_STEPS: the same two in
#      steps after the lookup run's end instead of CPU seconds (unset: the
#      CPU seconds), so that the recipe takes the same steps on every CPU;
#      STATE_VAR_LOOKUP_L2_STEPS: L2's cap in steps instead of
#      STATE_VAR_LOOKUP_L2_CPU; with these and STATE_VAR_LOOKUP_STEPS the
#      whole var recipe is pinned in steps;
#      STATE_D (the model width of every task, FFN 4x; default s5 128, var 64),
#      STATE_VAR_LOOKUP_STEPS (its steps at most; QUICK: 20);
#      STATE_VAR_FORK_GAMMA_REC: T2MLR's gamma_rec at the fork (unset: 0, as
#      `latent retrofit` leaves it, the lookup's function exactly; 1: the
#      path open as in a T2MLR from scratch); the curve logs both gammas;
#      STATE_VAR_QUERY_FROM: any (default: the 7 extra queries of a training
#      record ask for any variable), chain (only the task query's aliases,
#      depths 1..k) or alias (any alias: the chain and the distractors, no
#      plain lookups): `latent data var-assign --query-from`;
#      STATE_VAR_QUERIES: queries a training record of the depth stages
#      (8; 1: the task query alone, no answer to lean on another);
#      STATE_VAR_QUERY_ANY: percent of the depth stages' training records
#      whose task query asks for a random variable instead of the chain's
#      head (0; `latent data var-assign --query-any`); the test sets keep
#      the chain's head;
#      STATE_VAR_DECOY: percent of the depth stages' training records with
#      a decoy among the distractors, a chain as deep as the query's that
#      ends at another digit variable (0; `latent data var-assign --decoy`);
#      the test sets have none; STATE_VAR_DECOY_FROM: the first depth
#      stage whose training records have them (1); STATE_VAR_DECOY_GAMMA:
#      the decoys start only once T2MLR's |gamma_rec| has reached this value
#      (unset: from the stage on; decoys from the fork slowed the recurrent
#      path's opening in every seed, docs/experiments.md), and stay on;
#      STATE_VAR_DECOY_DEPTH=k: they also wait until depths 1..k are learnt
#      (stage k's criterion, met in stage k or later: their mean accuracy on
#      the stage's test set >= 0.9; 0, the default:
#      no such condition; decoys before depth 2 was learnt closed the path
#      in the runs where it closed, docs/experiments.md); the
#      curve marks each chunk that trained on them ("decoy": 1), and a plain
#      run following T2MLR's schedule takes the same data at each step;
#      STATE_VAR_LINES: 1 (default with the lookup stages: the lines grow
#      with the depth, as above) or 0 (8 digit variables, 6 distractors from
#      stage 1 on);
#      STATE_VAR_ORDER: program (default: every variable assigned before its
#      use, as in a program and the paper's task) or shuffled (lines in any
#      order: uses before assignment, which the first runs had);
#      STATE_UNTIL_TARGET=1: stop as soon as the final stage meets the task's
#      target (s5: every position >= 0.95; var: depth 5 >= 0.9);
#      NP=N: every chunk runs data parallel under `mpirun -np N` (one thread
#      per rank; the same batches and steps as one process, docs/training.md);
#      QUICK=1: a few chunks of a few steps, into build/experiment-state-quick.
# A run that was stopped (no .eval.json yet, a curve and a checkpoint there)
# continues from its last curve line: `latent train --resume` is bit-exact,
# so the run is the one an uninterrupted run makes (the CPU seconds of the
# interrupted chunk are not counted).
state_data() { # task seed dir
    local t=$1 s=$2 d=$3 n k
    local order=${STATE_VAR_ORDER:-program} lookup=${STATE_VAR_LOOKUP:-1} lines
    lines=${STATE_VAR_LINES:-$lookup} # the lookup recipe also grows the lines: 2 digit variables at depth 1
    local qf=${STATE_VAR_QUERY_FROM:-any} qtag=""
    [ "$qf" = any ] || qtag=" queries-$qf" # the default keeps the data.done of earlier runs
    local nq=${STATE_VAR_QUERIES:-8}
    [ "$nq" = 8 ] || qtag="$qtag q$nq"
    local qany=${STATE_VAR_QUERY_ANY:-0}
    [ "$qany" = 0 ] || qtag="$qtag any$qany"
    local decoy=${STATE_VAR_DECOY:-0} decoy_from=${STATE_VAR_DECOY_FROM:-1}
    [ "$decoy" = 0 ] || qtag="$qtag decoy$decoy"
    [ "$decoy_from" = 1 ] || qtag="$qtag from$decoy_from"
    local gate=${STATE_VAR_DECOY_GAMMA:-}
    [ -z "$gate" ] || qtag="$qtag gamma$gate"
    [ "$t" = var ] && order="$order lines$lines lookup$lookup$qtag" || order=""
    [ "$(cat "$d/data.done" 2>/dev/null)" = "ok${order:+ $order}" ] && return 0
    mkdir -p "$d"
    case $t in
    s5)
        for n in 4 8 16; do
            "$latent" data group --group s5 --len $n --n-records $n_train --seed $((s * 100 + n)) --out "$d/train$n" --tokenizer-out "$d/tok" 2>/dev/null
            "$latent" data group --group s5 --len $n --n-records 500 --seed $((s * 100 + n + 50)) --out "$d/test$n" 2>/dev/null
        done
        "$latent" data group --group s5 --len 32 --n-records 500 --seed $((s * 100 + 99)) --out "$d/test32" 2>/dev/null ;;
    var)
        # stage k: depths 1..k; with STATE_VAR_LINES=1 also fewer lines at
        # first (digit variables 2k, distractors 2(k-1), up to the task's 8
        # and 6), records just long enough: 16, 36, 56, 76, 80 tokens. The
        # lookup recipe trains on Q = 8 queries a record (7 more lines of 4
        # tokens, each answer scored) and first on the lookup stages: depth
        # 0 with 2 and then 8 digit variables. Test sets: one query a record.
        local nb=8 nd=6 len=80 q=1 K
        if [ "$lookup" = 1 ]; then
            q=$nq # the depth stages' queries a record; the lookup stages keep 8
            for K in 2 8; do
                "$latent" data var-assign --depth 0 --n-base $K --distractors 0 --queries 8 --order "${order%% *}" \
                    --n-records $n_train --seed $((s * 100 + 10 + K)) --out "$d/trainL$K" --tokenizer-out "$d/tok" 2>/dev/null
                "$latent" data var-assign --depth 0 --n-base $K --distractors 0 --order "${order%% *}" \
                    --n-records 1000 --seed $((s * 100 + 60 + K)) --out "$d/testL$K" 2>/dev/null
            done
        fi
        for k in 1 2 3 4 5; do
            if [ "$lines" = 1 ]; then
                nb=$((2 * k > 8 ? 8 : 2 * k)); nd=$((2 * k - 2 > 6 ? 6 : 2 * k - 2)); len=$((4 * (nb + k + nd) + 4))
            fi
            # with the gamma gate, train$k has no decoys and train${k}d (the
            # same seed) has them, for the chunks after the gate opens
            local dk=$((k >= decoy_from ? decoy : 0)) runs r
            runs="$dk:"
            [ -z "$gate" ] || { runs="0:"; [ "$dk" = 0 ] || runs="$runs $dk:d"; }
            for r in $runs; do
                "$latent" data var-assign --min-depth 1 --max-depth $k --n-base $nb --distractors $nd --record-len $((len + 4 * (q - 1))) \
                    --queries $q --query-from "$qf" --query-any "$qany" --decoy "${r%%:*}" --n-records $n_train --seed $((s * 100 + k)) \
                    --order "${order%% *}" --out "$d/train$k${r#*:}" --tokenizer-out "$d/tok" 2>/dev/null
            done
            "$latent" data var-assign --min-depth 1 --max-depth $k --n-base $nb --distractors $nd --record-len $len \
                --n-records 1000 --seed $((s * 100 + k + 50)) --order "${order%% *}" --out "$d/test$k" 2>/dev/null
        done ;;
    *) echo "experiment: STATE_TASKS: s5 or var ($t)" >&2; exit 2 ;;
    esac
    echo "ok${order:+ $order}" >"$d/data.done"
}

state_model() { # task model seed
    local t=$1 m=$2 s=$3
    local d="$work/$t-s$s" out="$work/results/$t.$m.s$s"
    [ -s "$out.eval.json" ] && return 0
    local kind=plain dm=64 ff=256 stages="1 2 3 4 5" final=5 chunk=${STATE_CHUNK:-250} ends="360 540 720 900"
    local budget=$state_budget lookup=0 from="" end_steps="" step0=0 cpu0=0 own_max=$state_max_steps lr=2e-3 prec=$precision
    [ "$m" = t2mlr ] && kind=t2mlr
    [ "$m" = lrt ] && kind=lrt
    [ "$t" = s5 ] && { dm=128 ff=512 stages="4 8 16" final=16 chunk=${STATE_CHUNK:-500} ends="600 900"; }
    [ -n "${STATE_D:-}" ] && { dm=$STATE_D ff=$((4 * STATE_D)); }
    if [ "$t" = var ] && [ "${STATE_VAR_LOOKUP:-1}" = 1 ]; then
        # the rate and the precision of the probes that learnt the lookup (a
        # bf16 lookup run stayed on the plateau to step 14,500, docs/experiments.md)
        lookup=1 lr=1e-3 prec=${PRECISION:-f32}
        if [ "$m" = lookup ]; then
            # the shared lookup stages; the runs of every model fork from its weights
            # (1200 and 1500 CPU s, fixed: a longer budget gives the same lookup run;
            # seed 12's L2 plateau outlasted 600 CPU s, docs/experiments.md)
            stages="L2 L8" ends=${STATE_VAR_LOOKUP_L2_CPU:-1200} budget=${STATE_VAR_LOOKUP_BUDGET:-1500} own_max=${STATE_VAR_LOOKUP_STEPS:-$state_max_steps}
            [ "$quick" = 1 ] && { ends=1; budget=${STATE_VAR_LOOKUP_BUDGET:-2}; own_max=${STATE_VAR_LOOKUP_STEPS:-20}; }
            # or L2's cap in steps, as the depth stages' below
            [ -z "${STATE_VAR_LOOKUP_L2_STEPS:-}" ] || { ends=""; end_steps=$STATE_VAR_LOOKUP_L2_STEPS; }
        else
            from="$work/results/$t.lookup.s$s"
            [ -s "$from.eval.json" ] || { log "$t/$m/s$s: no lookup run to start from ($from)"; return 1; }
            read -r step0 cpu0 < <(curve_last "$from.curve.jsonl" step cpu_s)
            # a depth stage ends, criterion unmet, 300/600/900/1200 CPU s after
            # the lookup run's end (fixed, as s5's: the long run is this one
            # continued; seed 13's stages, ended at 120/240/360/480 below 0.75,
            # never learnt depth 2, docs/experiments.md)
            ends=$("$PY" -c 'import sys; c = float(sys.argv[1]); print(" ".join("%.0f" % (c + float(x)) for x in sys.argv[2:]))' \
                "$cpu0" ${STATE_VAR_STAGE_CPU:-300 600 900 1200})
            # or at steps after that end, which every machine takes alike (CPU
            # seconds made the same recipe take other steps on another CPU)
            if [ -n "${STATE_VAR_STAGE_STEPS:-}" ]; then
                ends=""
                for x in $STATE_VAR_STAGE_STEPS; do end_steps="$end_steps $((step0 + x))"; done
            fi
        fi
    fi
    # var's lookup recipe has its own caps (STATE_VAR_LOOKUP_L2_CPU, STATE_VAR_STAGE_CPU)
    [ "$lookup" = 1 ] || ends=${STATE_STAGE_CPU:-$ends}
    [ "$quick" = 1 ] && chunk=${STATE_CHUNK:-5}
    local step=0 si=0 wall0 esteps=($end_steps)
    wall0=$(date +%s.%N)
    # a fork continues only from the lookup run it forked from
    local forked_here=1
    [ -z "$from" ] || [ "$(head -n "$(wc -l <"$from.curve.jsonl")" "$out.curve.jsonl" 2>/dev/null)" = "$(cat "$from.curve.jsonl")" ] || forked_here=0
    if [ -s "$out.curve.jsonl" ] && [ -d "$d/$m.run/latest" ] && [ $forked_here = 1 ]; then
        # continue a stopped run from its last curve line
        local prev_stage prev_wall next
        read -r step prev_stage prev_wall next < <(curve_last "$out.curve.jsonl" step stage wall_s next)
        step=$((step - step0))
        for x in $stages; do [ "$x" = "$prev_stage" ] && break; si=$((si + 1)); done
        [ "$next" = advance ] && si=$((si + 1))
        wall0=$("$PY" -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$wall0" "$prev_wall")
        log "$t/$m (seed $s): continuing at step $((step + step0)) (stage $prev_stage)"
    else
        rm -rf "$d/$m.init" "$d/$m.run" "$out.curve.jsonl" "$d/$m.train.log"
        if [ -n "$from" ]; then
            # the same weights for every model: the lookup run's, the
            # recurrence added so that the model starts as exactly that
            # function (latent retrofit); its curve is the start of this one
            case $m in
            t2mlr) "$latent" retrofit --model "$d/lookup.run/latest" --t2mlr 1,2 --out "$d/$m.init" --seed "$s" 2>/dev/null
                   # the path open from the fork (gamma_rec as `latent init --gamma-rec` gives
                   # a T2MLR trained from scratch) rather than closed as the retrofit leaves it
                   [ -z "${STATE_VAR_FORK_GAMMA_REC:-}" ] ||
                       "$PY" models/tools/st_scalar.py "$d/$m.init" "model.t2mlr.gamma_rec=$STATE_VAR_FORK_GAMMA_REC" ;;
            lrt) "$latent" retrofit --model "$d/lookup.run/latest" --lrt "${STATE_LRT_SOURCE:-3},1,2" --out "$d/$m.init" --seed "$s" 2>/dev/null ;;
            *) mkdir -p "$d/$m.init"
               cp "$d/lookup.run/latest/"{config.json,model.safetensors,tokenizer.json,tokenizer_config.json} "$d/$m.init/" ;;
            esac
            cp "$from.curve.jsonl" "$out.curve.jsonl"
            wall0=$("$PY" -c "import sys; print(float(sys.argv[1]) - float(sys.argv[2]))" "$wall0" "$(curve_last "$from.curve.jsonl" wall_s)")
        else
            "$PY" models/tools/experiment_config.py "$d/$m.config.json" "$(json_field "$d/train$final.json" vocab_size)" "$kind" \
                --d $dm --ff $ff --lrt-source "${STATE_LRT_SOURCE:-3}"
            "$latent" init --config "$d/$m.config.json" --out "$d/$m.init" --seed "$s" --tokenizer "$d/tok" --gamma-rec 1 --gamma-cur 0 \
                --std "${STATE_STD:-0.02}" \
                --gamma "${STATE_LRT_GAMMA:-0.1}" 2>/dev/null
        fi
    fi
    local base=(--out "$d/$m.run" --batch 32 --optimizer adamw --beta1 0.9 --beta2 0.98 --weight-decay 0.1
        --warmup 100 --lr-schedule constant --grad-clip 1 --seed "$s" --threads 1 --precision "$prec"
        --eval-every 1000000 --keep 1)
    local stage rec D status args gammas dsuf
    local st=($stages) en=($ends) runner=()
    [ "${NP:-1}" -gt 1 ] && runner=(mpirun -np "$NP" --oversubscribe --allow-run-as-root --mca btl self,tcp --mca btl_tcp_if_include lo)
    # plain and LRT follow the T2MLR run of their task and seed where that has
    # finished: the same stages, ended at the same steps, the same step count
    local stage_steps=${STATE_STAGE_STEPS:-} max_steps=$((own_max + step0)) follow=""  # steps of its own, after the lookup run's
    if [ "$m" != t2mlr ] && [ "$m" != lookup ] && [ -z "$stage_steps" ] && [ -s "$work/results/$t.t2mlr.s$s.eval.json" ]; then
        follow="$work/results/$t.t2mlr.s$s.curve.jsonl"
        read -r max_steps stage_steps < <("$PY" - "$work/results/$t.t2mlr.s$s.curve.jsonl" <<'PYEOF'
import json, sys
cv = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
# the stage ends after the shared lookup stages (L2, L8): the fork's own
print(cv[-1]["step"], " ".join(str(cv[i]["step"]) for i in range(len(cv) - 1)
                               if cv[i + 1]["stage"] != cv[i]["stage"] and not str(cv[i]["stage"]).startswith("L")))
PYEOF
)
    fi
    # the cool-down: from STATE_COOL_CPU CPU s on, each chunk of the final
    # stage halves the rate, down to 1/16 of it (s5 1000: the last ~200 CPU s
    # of the 20-minute budget; var 1800 after the lookup run's end); runs that
    # follow T2MLR's schedule take its rate at each step
    local cool=${STATE_COOL_CPU:-}
    [ -n "$cool" ] || { [ "$t" = s5 ] && cool=1000 || cool=$("$PY" -c 'import sys; print("%.0f" % (float(sys.argv[1]) + float(sys.argv[2])))' "$cpu0" "${STATE_VAR_COOL_AFTER:-1800}"); }
    [ "$t" != var ] || [ -z "${STATE_VAR_COOL_AFTER_STEPS:-}" ] || cool="step:$((step0 + STATE_VAR_COOL_AFTER_STEPS))"
    [ "$m" = lookup ] && cool=1e30 # the shared lookup run is not the recipe's end
    local chunk_lr
    while :; do
        stage=${st[$si]}
        rec=$(json_field "$d/train$stage.json" record_len)
        D=$rec; [ "$t" = var ] && D=8
        chunk_lr=$(cool_lr "$out.curve.jsonl" "${st[-1]}" "$cool" "$lr" "$((step + step0 + chunk))" "$follow")
        dsuf=""
        [ "$t" != var ] || [ -z "${STATE_VAR_DECOY_GAMMA:-}" ] ||
            dsuf=$(decoy_suffix "$out.curve.jsonl" "$stage" "${STATE_VAR_DECOY_FROM:-1}" "$STATE_VAR_DECOY_GAMMA" "${STATE_VAR_DECOY_DEPTH:-0}" "$((step + step0 + chunk))" "$follow")
        args=("${base[@]}" --lr "$chunk_lr" --data "$d/train$stage$dsuf.bin" --seq "$rec" --steps $((step + chunk)))
        [ "$m" = t2mlr ] && args+=(--mode jacobi --jacobi-iters "$D" --jacobi-grad-iters 4)
        [ "$m" = lrt ] && args+=(--mode lrt --lrt-subsets "${STATE_LRT_S:-$rec}")
        if [ "$step" = 0 ]; then args+=(--model "$d/$m.init"); else args+=(--resume); fi
        echo "${runner[*]}${runner:+ }latent train ${args[*]}" >>"$d/$m.train.log"
        # the chunk's CPU seconds (user + system) of the training process
        /usr/bin/time -f "%U %S" -o "$d/$m.cpu" "${runner[@]}" "$latent" train "${args[@]}" >>"$d/$m.train.log" 2>&1 </dev/null ||
            { log "$t/$m/s$s: training failed, see $d/$m.train.log"; return 1; }
        step=$((step + chunk))
        "$latent" eval --model "$d/$m.run/latest" --data "$d/test$stage.bin" --json --bucket-width 1 >"$d/$m.ev_stage.json" 2>/dev/null
        "$latent" eval --model "$d/$m.run/latest" --data "$d/test$final.bin" --json --bucket-width 1 >"$d/$m.ev_final.json" 2>/dev/null
        # T2MLR's gammas go into its curve: whether the recurrent path opened
        gammas=""
        [ "$m" = t2mlr ] && gammas=$("$PY" models/tools/st_scalar.py "$d/$m.run/latest" model.t2mlr.gamma_rec model.t2mlr.gamma_cur | tr '\n' ' ')
        # a curve line; prints "advance", "stop" or "stay"
        status=$("$PY" - "$d/$m.run/train.jsonl" "$d/$m.ev_stage.json" "$d/$m.ev_final.json" "$out.curve.jsonl" \
            "$t" "$stage" "$rec" "$chunk" "$(date +%s.%N)" "$wall0" "$budget" "$max_steps" "$d/$m.cpu" \
            "${en[$si]:-1e30}" "$((si + 1 < ${#st[@]} ? 1 : 0))" "$(echo $stage_steps | cut -d' ' -f$((si + 1)))" \
            "${STATE_UNTIL_TARGET:-0}" "$step0" "$chunk_lr" "$gammas" "$dsuf" "${STATE_VAR_LOOKUP_TARGET:-0.95}" "${esteps[$si]:-}" <<'PYEOF'
import json, os, sys
(jl, es, ef, curve, task, stage, rec, chunk, now, wall0, budget, max_steps, cpuf, end_cpu, more, at, until, step0, lr,
 gammas, dsuf, lookup_target, end_step) = sys.argv[1:]
rows = [json.loads(l) for l in open(jl) if l.strip()]
prev = [json.loads(l) for l in open(curve)] if os.path.exists(curve) else []
tok0, sec0, cpu0 = (prev[-1]["tokens"], prev[-1]["train_s"], prev[-1]["cpu_s"]) if prev else (0, 0.0, 0.0)
cpu = sum(float(x) for x in open(cpuf).read().split()[-2:])
bt = 32 * int(rec)
new = rows[-int(chunk):]
def acc(path):
    ev = json.load(open(path))
    return {str(r["from"]): round(r["accuracy"], 4) for r in ev["rows"] if r["from"] == r["to"]}
sa, fa = acc(es), acc(ef)
lookup = stage.startswith("L")  # var's lookup stages L2, L8: depth 0, scored in bucket 0
line = {"step": int(step0) + rows[-1]["step"], "stage": stage if lookup else int(stage), "loss": round(sum(r["loss"] for r in new) / len(new), 4),
        "tokens": tok0 + bt * len(new), "train_s": round(sec0 + sum(bt / r["tokens_per_s"] for r in new), 1),
        "cpu_s": round(cpu0 + cpu, 1), "lr": float(lr),
        "wall_s": round(float(now) - float(wall0), 1), "stage_acc": sa, "final_acc": fa}
for kv in gammas.split():  # model.t2mlr.gamma_rec=0.12 -> "gamma_rec": 0.12
    k, v = kv.split("=")
    line[k.rsplit(".", 1)[1]] = round(float(v), 4)
if dsuf == "d":  # the chunk trained on the records with decoys
    line["decoy"] = 1
def target_met(acc):  # the issue's targets, on the final stage's test set
    if task == "s5":
        return min(acc.values()) >= 0.95
    return acc.get("5", 0) >= 0.9
def lookup_met(acc, level):  # a lookup stage's criterion: depth 0 answered
    return acc.get("0", 0) >= level
# the curriculum's decision is kept in the line, so that a run stopped here
# and continued takes the same one
if more == "1" and at:
    line["next"] = "advance" if line["step"] >= int(at) else "stay"
elif more == "1":
    if task == "s5":
        met = min(sa.values()) >= 0.95
    elif lookup:
        met = lookup_met(sa, 0.9)
    else:
        sys.path.insert(0, "models/tools")
        from chunk_schedule import stage_met
        met = stage_met(sa, stage)
    capped = line["cpu_s"] >= float(end_cpu) or (end_step != "" and line["step"] >= int(end_step))
    line["next"] = "advance" if met or capped else "stay"
else:
    line["next"] = "stay"
open(curve, "a").write(json.dumps(line) + "\n")
if line["cpu_s"] >= float(budget) or line["step"] >= int(max_steps):
    print("stop")
elif more == "0" and until == "1" and target_met(fa):
    print("stop")
elif more == "0" and lookup and lookup_met(sa, float(lookup_target)):  # the lookup run ends when its last stage is learnt
    print("stop")
else:
    print(line["next"])
PYEOF
)
        [ "$status" = stop ] && break
        [ "$status" = advance ] && si=$((si + 1))
    done
    "$latent" eval --model "$d/$m.run/latest" --data "$d/test$final.bin" --json --bucket-width 1 >"$out.eval.tmp" 2>/dev/null
    [ "$t" = s5 ] && "$latent" eval --model "$d/$m.run/latest" --data "$d/test32.bin" --json --bucket-width 1 >"$out.eval32.json" 2>/dev/null
    mv "$out.eval.tmp" "$out.eval.json"
    log "$t/$m (seed $s): $step steps, $(tail -n 1 "$out.curve.jsonl" | "$PY" -c 'import json,sys; l=json.load(sys.stdin); print("%.0f CPU s of training (%.0f s wall), final stage %s" % (l["cpu_s"], l["train_s"], l["stage"]))')"
}

# A finished var run, measured again on a held-out test set: the runs stop
# at the first chunk whose test set reaches the target, so that set's figure
# is picked from an oscillating curve. This set (STATE_VAR_HELDOUT records,
# 5000; QUICK 100) has the final test set's parameters, read from its .json,
# and a seed nothing else uses; `latent eval` writes $out.heldout.json.
state_heldout() { # model seed
    local m=$1 s=$2 d="$work/var-s$2" out="$work/results/var.$1.s$2"
    [ -s "$out.eval.json" ] || return 0
    [ -s "$out.heldout.json" ] && [ "$out.heldout.json" -nt "$out.eval.json" ] && return 0 # a continued run is measured again
    local h="$d/heldout" n=${STATE_VAR_HELDOUT:-5000}
    [ "$quick" = 1 ] && n=${STATE_VAR_HELDOUT:-100}
    if [ ! -s "$h.json" ] || [ "$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["n_records"])' "$h.json")" != "$n" ]; then
        local args
        args=$("$PY" - "$d/test5.json" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))
print("--min-depth %d --max-depth %d --n-base %d --distractors %d --record-len %d --order %s" % (
    t["min_depth"], t["max_depth"], t["n_base"], t["n_distractors"], t["record_len"],
    "program" if t["program_order"] else "shuffled"))
PYEOF
        ) || return 1
        # seed s*100 + 95: train sets use s*100 + 1..5, test sets + 51..55, lookups + 12, 18, 62, 68
        # shellcheck disable=SC2086
        "$latent" data var-assign $args --n-records "$n" --seed $((s * 100 + 95)) --out "$h" >/dev/null 2>&1 ||
            { log "var/$m (seed $s): the held-out set failed"; return 1; }
    fi
    "$latent" eval --model "$d/$m.run/latest" --data "$h.bin" --json --bucket-width 1 >"$out.heldout.tmp" 2>/dev/null &&
        mv "$out.heldout.tmp" "$out.heldout.json" || { log "var/$m (seed $s): the held-out eval failed"; return 1; }
}

if [ "${STATE:-0}" = 1 ]; then
    state_tasks=${STATE_TASKS:-"s5 var"}
    state_models=${STATE_MODELS:-"t2mlr plain"} # T2MLR first: plain follows its schedule
    state_seeds=${STATE_SEEDS:-"11 12 13"}
    state_budget=${STATE_BUDGET:-1200}
    state_max_steps=${STATE_MAX_STEPS:-100000}
    if [ "$quick" = 1 ]; then
        work=${WORK:-build/experiment-state-quick}; state_budget=${STATE_BUDGET:-4}; state_max_steps=${STATE_MAX_STEPS:-30}; n_train=2000
    else
        work=${WORK:-build/experiment-state}
    fi
    mkdir -p "$work/results"
    prec_said=$precision
    [ -z "${PRECISION:-}" ] && [ "${STATE_VAR_LOOKUP:-1}" = 1 ] && [[ " $state_tasks " = *" var "* ]] && prec_said="$precision (var-assign: f32)"
    log "state: ${state_tasks}; ${state_models}; seeds ${state_seeds}; budget ${state_budget} s of training per model; precision $prec_said"
    for t in $state_tasks; do for s in $state_seeds; do state_data "$t" "$s" "$work/$t-s$s"; done; done
    failed=0
    # var's shared lookup stages first: every model of a seed forks from them
    if [ "${STATE_VAR_LOOKUP:-1}" = 1 ] && [[ " $state_tasks " = *" var "* ]]; then
        for s in $state_seeds; do
            throttle "$jobs"
            state_model var lookup "$s" &
        done
        throttle 1
        [ $failed = 0 ] || { log "a run failed"; exit 1; }
    fi
    for t in $state_tasks; do
        for s in $state_seeds; do
            for m in $state_models; do
                throttle "$jobs"
                state_model "$t" "$m" "$s" &
            done
        done
    done
    throttle 1
    [ $failed = 0 ] || { log "a run failed"; exit 1; }
    if [[ " $state_tasks " = *" var "* ]]; then
        for s in $state_seeds; do for m in $state_models; do state_heldout "$m" "$s" || exit 1; done; done
    fi
    # NP: under mpirun a run is NP ranks of one thread, and the report says so
    "$PY" models/tools/experiment_report.py --state "$work/results" "$work/report" "$(machine_line)" "$jobs" "$prec_said" \
        "$state_budget" "$quick" "${NP:-1}"
    log "wrote $work/report/experiment-state.md and its plots"
    exit 0
fi

log "data: ${tasks} ($n_train training records each)"
for t in $tasks; do make_data "$t"; done
for r in $replicates; do
    mkdir -p "$(rep_work "$r")/results"
    for t in $rep_tasks; do (work=$(rep_work "$r") seed=$r; make_data "$t"); done
done

log "training: ${models} on each task, $steps steps (var-assign $var_steps), $jobs at once, precision $precision"
failed=0
for t in $tasks; do
    for m in $models; do
        throttle "$jobs"
        run_model "$t" "$m" &
    done
done
[ -z "$replicates" ] || log "replicates: seeds $replicates, ${rep_models} on ${rep_tasks}"
for r in $replicates; do
    for t in $rep_tasks; do
        for m in $rep_models; do
            throttle "$jobs"
            (work=$(rep_work "$r") seed=$r; run_model "$t" "$m") &
        done
    done
done
throttle 1
[ $failed = 0 ] || { log "a run failed"; exit 1; }

# ---- report ----------------------------------------------------------------------
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')   # models/s3's README names it
rep_list=""
for r in $replicates; do rep_list="$rep_list $r:$(rep_work "$r")/results"; done
"$PY" - "$work/results/run.json" "$(machine_line)" "$jobs" "$precision" "$seed" "$steps" "$var_steps" "$quick" \
    "$tasks" "$models" "$train_len" "$test_len" "$wd" "$rep_list" "$rep_tasks" "$rep_models" <<'EOF'
import json, sys
(path, cpu, jobs, prec, seed, steps, var_steps, quick, tasks, models, tl, xl, wd, reps, rep_tasks, rep_models) = sys.argv[1:]
tl, xl = int(tl), int(xl)
titles = {"parity": ("Parity (Z2)", 0.5), "s3": ("S3 word problem", 1 / 6), "s5": ("S5 word problem", 1 / 120)}
out = []
for t in tasks.split():
    if t == "var":
        out.append({"name": "var", "kind": "var", "title": "Variable assignment", "min_x": 1, "max_x": 5,
                    "train_min": 1, "train_max": 5, "test_records": 1000, "chance": 0.1})
    else:
        out.append({"name": t, "kind": "group", "title": titles[t][0], "trained": tl, "test_len": xl,
                    "test_records": 500, "chance": titles[t][1]})
json.dump({"cpu": cpu, "threads": 1, "jobs": int(jobs), "precision": prec, "seeds": seed,
           "steps": "%s (var-assign %s)" % (steps, var_steps), "quick": quick == "1", "weight_decay": wd,
           "replicates": [{"seed": int(r.split(":", 1)[0]), "results": r.split(":", 1)[1]} for r in reps.split()],
           "replicate_tasks": rep_tasks.split(), "replicate_models": rep_models.split(),
           "tasks": out, "models": models.split()}, open(path, "w"), indent=1)
EOF
report=docs
[ "$canonical" = 1 ] || report="$work/report"
"$PY" models/tools/experiment_report.py "$work/results" "$report"
log "wrote the tables ($report/experiments.md between its markers, else $report/experiment-results.md) and $report/experiment-*.svg"

if [ "$canonical" = 1 ] && [ -d "$work/s3/t2mlr.run/latest" ]; then
    rm -rf models/s3.tmp && mkdir -p models/s3.tmp
    cp "$work/s3/t2mlr.run/latest/"{config.json,model.safetensors,tokenizer.json,tokenizer_config.json} models/s3.tmp/
    "$PY" - "$work/results/s3.t2mlr.eval.json" "$work/results/s3.t2mlr.train.json" "$cpu" >models/s3.tmp/README.md <<'EOF'
import json, sys
ev, tr, cpu = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
pts = [(r["from"], r["accuracy"], r["n"]) for r in ev["rows"] if r["from"] == r["to"]]
def mean(lo, hi):
    sel = [(a, n) for x, a, n in pts if lo <= x <= hi]
    return sum(a * n for a, n in sel) / sum(n for _, n in sel)
worst = min(a for x, a, n in pts)
print(f"""# models/s3

The S3 word-problem model of `make experiment` (docs/experiments.md): a tiny
T2MLR transformer (d 64, 4 blocks, 4 heads, FFN 256, recurrence over blocks
1..2, 0.28M parameters, F32) that reads a sequence of permutations of three
elements and answers, at every position, their running product.

- Tokens: `<bos>` then elements written `<123>`, `<132>`, ... (one-line
  notation, the identity first); the answer at each position is the next-token
  prediction, an element of the same vocabulary (`latent data group --group s3`).
- Trained on records of 16 elements with `latent train {tr["args"]}`
  ({tr["time"]} on {cpu}, one thread).
- Accuracy (`latent eval`, 500 records of 32 elements, seed 1001): positions
  1-16 {mean(1, 16):.4f}, positions 17-32 (past the trained length)
  {mean(17, 32):.4f}, worst position {worst:.4f}.

Served by latentd, it answers through /v1/completions: the prompt is the
elements' text, `max_tokens: 1, temperature: 0` gives the product of them all,
and `echo: true, logprobs: 1` the product after each one
(tests/integration/server_s3.sh checks 50 records against `latent eval`).
""")
EOF
    rm -rf models/s3 && mv models/s3.tmp models/s3
    log "copied the S3 T2MLR model to models/s3"
fi
exit
}
