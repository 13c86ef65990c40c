#!/usr/bin/env bash
# `make experiment QUICK=1` end to end, cut to two tasks and a few steps so
# that it stays a smoke test: every model of each task trains and evaluates,
# a replicate (seed 2) of parity trains, and the report has a table row per
# model, a table over the two seeds and well-formed SVG plots. The
# numbers themselves are not evidence (docs/experiments.md has the full run);
# docs/ and models/s3 are not touched by a QUICK run.
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../harness.sh" experiment

before=$(cd "$root" && git status --porcelain -- docs models 2>/dev/null | md5sum)
if QUICK=1 STEPS=12 VAR_STEPS=4 TASKS="parity var" REPLICATE_TASKS=parity JOBS=2 WORK="$tmp/work" LATENT="$latent" PYTHON="$PY" \
    bash "$root/models/experiment.sh" >"$tmp/log" 2>&1; then
    ok "models/experiment.sh QUICK=1 runs ($(grep -c ' done in ' "$tmp/log") models trained and evaluated)"
else
    fail "models/experiment.sh QUICK=1" "$(tail -n 20 "$tmp/log")"
fi
report=$tmp/work/report
"$PY" - "$report" <<'PYEOF' && ok "report: a row per model and task, a table over seeds 1 and 2 (the replicate), plots parse" || fail "report"
import os, sys, xml.dom.minidom
rep = sys.argv[1]
md = open(os.path.join(rep, "experiment-results.md")).read()
for task in ("Parity (Z2)", "Variable assignment"):
    assert "### " + task in md, task
# a row per task and model; the two replicated models also head the table over seeds
for model, n in (("plain transformer", 3), ("T2MLR, Jacobi fixed D", 3), ("T2MLR, adaptive Jacobi", 2), ("LRT", 2)):
    assert md.count("| " + model + " |") == n, model
seeds = md.split("### Parity (Z2) over 2 seeds", 1)[1]
assert "| 1 (the tables above) | " in seeds and "\n| 2 | " in seeds, seeds[:400]
assert "of 2 seeds" in seeds
assert "QUICK=1" in md
for svg in ("experiment-parity.svg", "experiment-var.svg"):
    doc = xml.dom.minidom.parse(os.path.join(rep, svg))
    assert len(doc.getElementsByTagName("path")) == 4, svg
PYEOF
after=$(cd "$root" && git status --porcelain -- docs models 2>/dev/null | md5sum)
[ "$before" = "$after" ] && ok "a QUICK run leaves docs/ and models/ alone" || fail "a QUICK run changed docs/ or models/"
echo "$((n - fails)) of $n checks passed"
[ "$fails" -eq 0 ]
