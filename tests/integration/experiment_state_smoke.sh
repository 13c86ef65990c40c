#!/usr/bin/env bash
# `make experiment-state QUICK=1` / `make experiment-long`, cut to a few
# steps: the S5 and variable-assignment recipes train, evaluate and report,
# and a run stopped part way continues where it stopped to the same weights,
# bit for bit, as a run that was never stopped (the stage ends pinned with
# STATE_STAGE_STEPS, so that CPU time does not decide them). The numbers are
# not evidence (docs/experiments.md, "State tracking", has the full runs).
# Under mpirun (NP=2) the S5 recipe gives the single process's curve and
# weights.
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../harness.sh" experiment_state

state() { # WORK MAX_STEPS [TASKS [NP]]; env PRECISION
    PRECISION="${PRECISION:-}" STATE=1 QUICK=1 STATE_TASKS="${3:-s5 var}" NP="${4:-1}" STATE_MODELS=t2mlr STATE_SEEDS=11 STATE_STAGE_STEPS="10 15 20 25" STATE_COOL_CPU=0 \
        STATE_MAX_STEPS=$2 STATE_BUDGET=1000 STATE_VAR_LOOKUP_BUDGET=1000 JOBS=2 WORK="$1" LATENT="$latent" PYTHON="$PY" \
        bash "$root/models/experiment.sh" >>"$1.log" 2>&1
}
if state "$tmp/whole" 30; then ok "STATE=1 QUICK=1: S5 and var-assign train and report"
else fail "STATE=1 QUICK=1" "$(tail -n 20 "$tmp/whole.log")"; fi
# a run short of its target gets a projection line, or the reason there is none, in each task's section
[ "$(grep -c '^Projection, .* seed 11: ' "$tmp/whole/report/experiment-state.md" 2>/dev/null)" = 2 ] &&
    ok "the report: a projection line for S5 and for var-assign" ||
    fail "the report's projection lines" "$(grep '^Projection' "$tmp/whole/report/experiment-state.md" 2>&1)"
# var: the lookup run's 20 steps (QUICK's STATE_VAR_LOOKUP_STEPS), then the fork's 30
for tl in s5:6 var:10; do
    t=${tl%:*}
    [ -s "$tmp/whole/results/$t.t2mlr.s11.eval.json" ] && [ "$(wc -l <"$tmp/whole/results/$t.t2mlr.s11.curve.jsonl")" = "${tl#*:}" ] &&
        ok "$t: a final evaluation and a curve line per chunk of 5 steps" ||
        fail "$t: evaluation or curve missing" "$(ls "$tmp/whole/results")"
done
# var's held-out set: the final test set's parameters, its own seed, evaluated into .heldout.json and the report
"$PY" - "$tmp/whole" <<'PYEOF' && ok "var: the held-out set (the test set's parameters, its own seed) in .heldout.json and the report" ||
import json, sys
w = sys.argv[1]
t, h = json.load(open(w + '/var-s11/test5.json')), json.load(open(w + '/var-s11/heldout.json'))
keys = ('task', 'min_depth', 'max_depth', 'n_base', 'n_distractors', 'record_len', 'program_order', 'vocab_size')
assert all(t[k] == h[k] for k in keys), [(k, t[k], h[k]) for k in keys if t[k] != h[k]]
assert h['n_records'] == 100 and h['seed'] not in (t['seed'], 1101, 1102, 1103, 1104, 1105), h['seed']
ev = json.load(open(w + '/results/var.t2mlr.s11.heldout.json'))
assert ev['records'] == 100 and any(r['from'] == 5 and r['n'] > 0 for r in ev['rows']), ev
rows = [l for l in open(w + '/report/experiment-state.md') if l.startswith('| T2MLR') and '| depth ' in l]
assert rows and rows[0].rstrip().endswith('records) |'), rows
PYEOF
    fail "var: the held-out set" "$(ls "$tmp/whole/results" "$tmp/whole/var-s11" | tr '\n' ' ')"
# the fork: T2MLR starts from the lookup run's weights, and its curve from the lookup's
REF=$ref "$PY" - "$tmp/whole" <<'PYEOF' && ok "var: T2MLR forks from the lookup run (its backbone, its curve, stages L2 L8 then 1..5)" || fail "var: the fork from the lookup run"
import json, os, sys
sys.path.insert(0, os.environ['REF'])
import numpy as np
from safetensors_py import read_model_dir
w = sys.argv[1]
look = read_model_dir(w + '/var-s11/lookup.run/latest')
init = read_model_dir(w + '/var-s11/t2mlr.init')
assert all(np.array_equal(look[k], init[k]) for k in look), 'backbone differs from the lookup run'
assert len(init) > len(look), 'no recurrent tensors added'
lc = open(w + '/results/var.lookup.s11.curve.jsonl').read().splitlines()
tc = open(w + '/results/var.t2mlr.s11.curve.jsonl').read().splitlines()
assert tc[:len(lc)] == lc, 'the fork curve does not start with the lookup curve'
stages = [json.loads(l)['stage'] for l in tc]
assert stages[:4] == ['L2', 'L2', 'L8', 'L8'] and stages[4:] == [1, 2, 3, 4, 5, 5], stages
steps = [json.loads(l)['step'] for l in tc]
assert steps == list(range(5, 55, 5)), steps
# the fork's lines log T2MLR's gammas (models/tools/st_scalar.py), the lookup's have none
gam = [('gamma_rec' in json.loads(l), 'gamma_cur' in json.loads(l)) for l in tc]
assert gam == [(False, False)] * 4 + [(True, True)] * 6, gam
PYEOF
# STATE_VAR_LOOKUP_TARGET: the lookup run ends at the first L8 line at or past
# it (0: the first L8 line; the default 0.95 ran on to its 20 steps above)
PRECISION="" STATE=1 QUICK=1 STATE_TASKS=var STATE_MODELS=lookup STATE_SEEDS=11 STATE_STAGE_STEPS="10 15 20 25" \
    STATE_VAR_LOOKUP_TARGET=0 STATE_BUDGET=1000 STATE_VAR_LOOKUP_BUDGET=1000 JOBS=1 WORK="$tmp/target" LATENT="$latent" PYTHON="$PY" \
    bash "$root/models/experiment.sh" >>"$tmp/target.log" 2>&1 &&
    [ "$("$PY" -c 'import json, sys; print(" ".join(json.loads(l)["stage"] for l in open(sys.argv[1])))' \
        "$tmp/target/results/var.lookup.s11.curve.jsonl")" = "L2 L2 L8" ] &&
    ok "STATE_VAR_LOOKUP_TARGET ends the lookup run at L8's first line past it" ||
    fail "STATE_VAR_LOOKUP_TARGET" "$(tail -n 5 "$tmp/target.log")"
# STATE_VAR_LOOKUP_L2_STEPS / STATE_VAR_STAGE_STEPS / STATE_VAR_COOL_AFTER_STEPS:
# L2 ends at step 15 (QUICK's CPU cap ended it at 10 above), the depth stages
# end, and the final stage cools, at steps after the lookup run's end (20
# steps here), with no STATE_STAGE_STEPS and no CPU caps: stages 1-4 end at
# 25, 30, 35, 40, and the chunk after the stage-5 line at 45 runs at half the rate
PRECISION="" STATE=1 QUICK=1 STATE_TASKS=var STATE_MODELS=t2mlr STATE_SEEDS=11 STATE_VAR_LOOKUP_STEPS=20 STATE_VAR_LOOKUP_L2_STEPS=15 \
    STATE_VAR_STAGE_STEPS="5 10 15 20" STATE_VAR_COOL_AFTER_STEPS=25 STATE_MAX_STEPS=30 STATE_BUDGET=1000 \
    STATE_VAR_LOOKUP_BUDGET=1000 JOBS=1 WORK="$tmp/steps" LATENT="$latent" PYTHON="$PY" \
    bash "$root/models/experiment.sh" >>"$tmp/steps.log" 2>&1 &&
    "$PY" - "$tmp/steps/results/var.t2mlr.s11.curve.jsonl" <<'PYEOF' &&
import json, sys
fork = [json.loads(l) for l in open(sys.argv[1])]
assert [l["stage"] for l in fork[:4]] == ["L2", "L2", "L2", "L8"], [l["stage"] for l in fork[:4]]
fork = [l for l in fork if not str(l["stage"]).startswith("L")]
got = [(l["step"], l["stage"], l["lr"]) for l in fork]
want = [(25, 1, 1e-3), (30, 2, 1e-3), (35, 3, 1e-3), (40, 4, 1e-3), (45, 5, 1e-3), (50, 5, 5e-4)]
assert got == want, got
PYEOF
    ok "STATE_VAR_LOOKUP_L2_STEPS, STATE_VAR_STAGE_STEPS and STATE_VAR_COOL_AFTER_STEPS: stage ends and cool-down in steps" ||
    fail "STATE_VAR_LOOKUP_L2_STEPS / STATE_VAR_STAGE_STEPS / STATE_VAR_COOL_AFTER_STEPS" "$(tail -n 5 "$tmp/steps.log")"
# STATE_VAR_FORK_GAMMA_REC's tool: the retrofit leaves the path closed, the tool opens it in place
cp -r "$tmp/whole/var-s11/t2mlr.init" "$tmp/open.init"
[ "$("$PY" "$root/models/tools/st_scalar.py" "$tmp/open.init" model.t2mlr.gamma_rec)" = model.t2mlr.gamma_rec=0 ] &&
    "$PY" "$root/models/tools/st_scalar.py" "$tmp/open.init" model.t2mlr.gamma_rec=0.75 &&
    [ "$("$PY" "$root/models/tools/st_scalar.py" "$tmp/open.init" model.t2mlr.gamma_rec model.t2mlr.gamma_cur | tr '\n' ' ')" = \
        "model.t2mlr.gamma_rec=0.75 model.t2mlr.gamma_cur=0 " ] &&
    ! "$PY" "$root/models/tools/st_scalar.py" "$tmp/open.init" model.t2mlr.w_rec.weight=1 2>/dev/null &&
    "$latent" eval --model "$tmp/open.init" --data "$tmp/whole/var-s11/test1.bin" --json >/dev/null 2>&1 &&
    ok "st_scalar.py: reads the retrofit's closed gamma_rec, sets it, refuses a matrix; the model still loads" ||
    fail "st_scalar.py on the fork's init"
# the cool-down (STATE_COOL_CPU=0: from the final stage's first line on), each
# chunk's rate as latent train was given it: s5 2e-3 until a line of stage 16
# is there, then halved a chunk; var 1e-3, the lookup run's lines included
for t in s5:'2e-3 2e-3 2e-3 2e-3 1e-3 5e-4' var:'1e-3 1e-3 1e-3 1e-3 1e-3 1e-3 1e-3 1e-3 1e-3 5e-4'; do
    want=$(for x in ${t#*:}; do "$PY" -c "print(repr($x))"; done | tr '\n' ' ')
    got=$( (grep -ho -- '--lr [^ ]*' "$tmp/whole/${t%%:*}-s11/lookup.train.log" 2>/dev/null; grep -ho -- '--lr [^ ]*' "$tmp/whole/${t%%:*}-s11/t2mlr.train.log") |
        cut -d' ' -f2 | tr '\n' ' ')
    curve=$("$PY" -c 'import json,sys; print(" ".join(repr(json.loads(l)["lr"]) for l in open(sys.argv[1])))' "$tmp/whole/results/${t%%:*}.t2mlr.s11.curve.jsonl")
    [ "$got" = "$want" ] && [ "$curve " = "$want" ] && ok "${t%%:*}: the cool-down halves the rate each chunk of the final stage ($want)" ||
        fail "${t%%:*}: the cool-down's rates" "want $want, given $got, curve $curve"
done
[ "$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["program_order"])' "$tmp/whole/var-s11/train5.json")" = 1 ] &&
    ok "var-assign data in program order (the default STATE_VAR_ORDER)" || fail "var-assign data not in program order"
# plain after the finished T2MLR run follows its schedule: the same stage
# ends, steps and rates (its own cool-down start set out of reach)
PRECISION="${PRECISION:-}" STATE=1 QUICK=1 STATE_TASKS=s5 STATE_MODELS=plain STATE_SEEDS=11 STATE_MAX_STEPS=30 STATE_BUDGET=1000 \
    STATE_COOL_CPU=1e30 JOBS=1 WORK="$tmp/whole" LATENT="$latent" PYTHON="$PY" bash "$root/models/experiment.sh" >>"$tmp/whole.log" 2>&1 &&
    "$PY" - "$tmp/whole/results/s5" <<'PYEOF' && ok "s5: plain follows T2MLR's stage ends, steps and rates" || fail "s5: plain does not follow T2MLR's schedule" "$(tail -n 5 "$tmp/whole.log")"
import json, sys
cv = lambda m: [(x['step'], x['stage'], x['lr']) for x in map(json.loads, open(sys.argv[1] + '.%s.s11.curve.jsonl' % m))]
assert cv('plain') == cv('t2mlr'), (cv('plain'), cv('t2mlr'))
PYEOF

# each chunk's rate and data from a curve (models/tools/chunk_schedule.py):
# the gate on |gamma_rec| (and, with DEPTH, on depths 1..DEPTH learnt)
# opens the decoys and they stay on when it falls back; the lookup stages
# and the stages before DECOY_FROM never get them; a run on another's
# schedule takes that run's rate and data at each step
"$PY" - "$tmp/gate.jsonl" "$tmp/followed.jsonl" <<'PYEOF'
import json, sys
# the third line: depth 1 learnt (0.97), depths 1-2 not (mean 0.87), on its stage's test set
lines = [(250, "L8", 10, None, 0, 0.2), (500, 1, 20, 0.2, 0, 0.5), (750, 2, 30, 0.6, 0, 0.77), (1000, 2, 40, 0.3, 1, 0.8),
         (1250, 5, 50, 0.1, 1, 0.9)]
with open(sys.argv[1], "w") as f:
    for step, stage, cpu, gamma, decoy, d2 in lines:
        line = {"step": step, "stage": stage, "cpu_s": cpu, "lr": 1e-3, "decoy": decoy,
                "stage_acc": {"1": 0.97, "2": d2}}
        if gamma is not None:
            line["gamma_rec"] = gamma
        f.write(json.dumps(line) + "\n")
with open(sys.argv[2], "w") as f:
    f.write(json.dumps({"step": 1500, "stage": 5, "cpu_s": 60, "lr": 2.5e-4, "decoy": 1}) + "\n")
PYEOF
schedule() { "$PY" "$root/models/tools/chunk_schedule.py" "$@"; }
cut_curve() { head -n "$1" "$tmp/gate.jsonl" >"$tmp/cut$1.jsonl"; echo "$tmp/cut$1.jsonl"; }
[ "$(schedule data "$(cut_curve 2)" 2 1 0.5 0 750)" = "" ] &&       # gamma_rec 0.2 < 0.5: no decoys yet
    [ "$(schedule data "$(cut_curve 3)" 2 1 0.5 0 1000)" = d ] &&  # 0.6 >= 0.5: on
    [ "$(schedule data "$(cut_curve 3)" 2 1 0.5 1 1000)" = d ] &&  # and depth 1 is learnt
    [ "$(schedule data "$(cut_curve 3)" 2 1 0.5 2 1000)" = "" ] &&  # but depths 1-2 are not: off
    [ "$(schedule data "$(cut_curve 3)" 2 1 0.5 3 1000)" = "" ] &&  # nor depth 3, not yet trained
    [ "$(schedule data "$(cut_curve 4)" 2 1 0.5 0 1250)" = d ] &&  # 0.3, but the last chunk had them: still on
    [ "$(schedule data "$(cut_curve 4)" 2 1 0.5 2 1250)" = d ] &&  # depths 1-2 at 0.885: on because the last had them
    [ "$(printf '{"step": 500, "stage": 3, "cpu_s": 9, "lr": 1e-3, "gamma_rec": 0.6, "stage_acc": {"1": 0.93, "2": 0.9, "3": 0.2}}\n' >"$tmp/learnt.jsonl"
         schedule data "$tmp/learnt.jsonl" 3 1 0.5 2 750)" = d ] &&  # depths 1-2 at 0.915 and the path open: on
    [ "$(sed 's/"gamma_rec": 0.6/"gamma_rec": -0.6/' "$tmp/learnt.jsonl" >"$tmp/negative.jsonl"
         schedule data "$tmp/negative.jsonl" 3 1 0.5 2 750)" = d ] &&  # gamma_rec -0.6 opens the path as well
    [ "$(sed 's/"gamma_rec": 0.6/"gamma_rec": -0.4/' "$tmp/learnt.jsonl" >"$tmp/negative.jsonl"
         schedule data "$tmp/negative.jsonl" 3 1 0.5 2 750)" = "" ] &&  # -0.4 does not
    [ "$(schedule data "$(cut_curve 3)" L8 1 0.5 0 1000)" = "" ] &&
    [ "$(schedule data "$(cut_curve 3)" 2 3 0.5 0 1000)" = "" ] &&
    [ "$(schedule data "$(cut_curve 3)" 2 1 "" 0 1000)" = "" ] &&
    [ "$(schedule data "$(cut_curve 1)" 5 1 0.5 0 1500 "$tmp/followed.jsonl")" = d ] &&
    [ "$(schedule data "$(cut_curve 5)" 5 1 0.5 0 1750 "$tmp/followed.jsonl")" = "" ] &&
    [ "$(schedule lr "$tmp/gate.jsonl" 5 45 1e-3 1500)" = 0.0005 ] &&  # one final-stage line past 45 CPU s
    [ "$(schedule lr "$tmp/gate.jsonl" 2 0 1e-3 1500)" = 0.00025 ] &&  # two lines of stage 2
    [ "$(cat "$tmp/gate.jsonl" "$tmp/gate.jsonl" "$tmp/gate.jsonl" >"$tmp/long.jsonl"; schedule lr "$tmp/long.jsonl" 2 0 1e-3 1500)" = 6.25e-05 ] &&  # six lines: 1/16 at most
    [ "$(schedule lr "$tmp/gate.jsonl" 5 0 1e-3 1500 "$tmp/followed.jsonl")" = 0.00025 ] &&
    ! schedule lr "$tmp/gate.jsonl" 5 2>/dev/null &&
    ok "chunk_schedule.py: the decoy gate opens on |gamma_rec| and the depths learnt and stays open, the rate halves per final-stage line, a follower copies both" ||
    fail "chunk_schedule.py's rates or decoy gate"

# stopped after 15 steps, then run again to 30: it continues
# (the lookup run is finished in the first: it stops at its own 20 steps)
state "$tmp/cut" 15 && rm "$tmp/cut/results/"*.t2mlr.*.eval.json && state "$tmp/cut" 30 ||
    fail "stopped and continued runs" "$(tail -n 20 "$tmp/cut.log")"
grep -q "continuing at step 15" "$tmp/cut.log" && ok "the second run says where it continues" ||
    fail "no 'continuing at step 15'" "$(tail -n 5 "$tmp/cut.log")"
for t in s5 var; do
    if cmp -s "$tmp/whole/$t-s11/t2mlr.run/latest/model.safetensors" "$tmp/cut/$t-s11/t2mlr.run/latest/model.safetensors" &&
        [ "$(cut -d, -f1,2,4 "$tmp/whole/results/$t.t2mlr.s11.curve.jsonl")" = "$(cut -d, -f1,2,4 "$tmp/cut/results/$t.t2mlr.s11.curve.jsonl")" ]; then
        ok "$t: stopped at 15 and continued, the same weights and curve (steps, stages, tokens) as one run to 30"
    else
        fail "$t: the continued run differs from the whole run" "$(diff "$tmp/whole/results/$t.t2mlr.s11.curve.jsonl" "$tmp/cut/results/$t.t2mlr.s11.curve.jsonl" | head -5)"
    fi
done
# the stopped run's held-out figure was measured at step 15: the continued run measures it again
cmp -s "$tmp/whole/results/var.t2mlr.s11.heldout.json" "$tmp/cut/results/var.t2mlr.s11.heldout.json" &&
    ok "var: the continued run's held-out figure is its final weights', as the whole run's" ||
    fail "var: the held-out figure of the continued run" "$(cat "$tmp/whole/results/var.t2mlr.s11.heldout.json" "$tmp/cut/results/var.t2mlr.s11.heldout.json")"

# `make experiment-long NP=2`: each chunk under mpirun on 2 ranks gives the
# single process's run: the same curve of steps and stages, weights equal to
# summation-order rounding (docs/training.md, "Data parallel"). In f32 for
# both: bf16 operands turn a rounding-level weight difference into a bf16
# rounding step, which would hide a real difference in that noise.
if ! command -v mpirun >/dev/null || [ ! -f "$build/latent-mpi.so" ]; then
    fail "mpirun or $build/latent-mpi.so missing (make test installs openmpi-bin and libopenmpi-dev)"
elif PRECISION=f32 state "$tmp/np1" 30 s5 1 && PRECISION=f32 state "$tmp/np2" 30 s5 2; then
    REF=$ref "$PY" - "$tmp/np1" "$tmp/np2" <<'PYEOF' && ok "NP=2: S5 under mpirun, the single process's curve and weights" || fail "NP=2 differs from one process"
import json, os, sys
sys.path.insert(0, os.environ['REF'])
import numpy as np
from safetensors_py import read_model_dir
a, b = sys.argv[1], sys.argv[2]
ca = [json.loads(l) for l in open(a + '/results/s5.t2mlr.s11.curve.jsonl')]
cb = [json.loads(l) for l in open(b + '/results/s5.t2mlr.s11.curve.jsonl')]
assert [(x['step'], x['stage'], x['tokens']) for x in ca] == [(x['step'], x['stage'], x['tokens']) for x in cb], 'curves differ'
ta = read_model_dir(a + '/s5-s11/t2mlr.run/latest')
tb = read_model_dir(b + '/s5-s11/t2mlr.run/latest')
t0 = read_model_dir(a + '/s5-s11/t2mlr.init')
wd = max(float(np.max(np.abs(ta[k].astype(np.float64) - tb[k]))) for k in ta)
moved = max(float(np.max(np.abs(ta[k].astype(np.float64) - t0[k]))) for k in ta)
print('NP=2 against one process: %d curve lines; weights differ by %.2e at most, training moved them up to %.2e'
      % (len(ca), wd, moved))
assert wd <= 1e-3, 'weights differ by %g' % wd  # train_mpi.sh's AdamW bound
last = json.loads(open(b + '/s5-s11/t2mlr.run/train.jsonl').read().splitlines()[-1])
assert 'allreduce_s' in last, 'the NP=2 run did not train under mpirun'
PYEOF
else
    fail "NP=1/NP=2 runs failed" "$(tail -n 20 "$tmp/np2.log")"
fi
echo "$((n - fails)) of $n checks passed"
[ "$fails" -eq 0 ]
