#!/usr/bin/env bash
# A learning-rate cool-down after a stalled state-recipe run (docs/experiments.md,
# "The long recipe"): continues a copy of RUN (a `latent train` output
# directory of models/experiment.sh's state recipe, e.g.
# build/experiment-long/s5-s11/t2mlr.run) with `latent train --resume`,
# CHUNK steps at each learning rate of LRS (halving from the recipe's 2e-3),
# and after each chunk prints the accuracy per position of TEST (worst first).
# The same data, batch, seed and Jacobi settings as the recipe's last chunk,
# read from its train.log.
# usage: models/tools/cooldown.sh RUN TEST OUT   env: LRS ("1e-3 5e-4 2.5e-4 1.25e-4"), CHUNK (500),
#        TEST2 (a second test set, e.g. twice the length, evaluated at the end),
#        DATA (another training data file for the chunks, e.g. var-assign --query-any)
set -eu
cd "$(dirname "$0")/../.."
run=$1 test=$2 out=$3 L=build/latent
LRS=${LRS:-"1e-3 5e-4 2.5e-4 1.25e-4"} CHUNK=${CHUNK:-500}
log=${run%.run}.train.log
last=$(grep '^latent train --out' "$log" | tail -n 1)
[ -n "$last" ] || { echo "cooldown: no 'latent train' line in $log" >&2; exit 2; }
rm -rf "$out" && mkdir -p "$out" && cp "$run/train.jsonl" "$out/"
ck=$(readlink "$run/latest") # the checkpoint directory, and latest pointing at it, as latent train keeps them
cp -r "$run/$ck" "$out/" && ln -s "$ck" "$out/latest"
read -r -a args <<<"${last#latent train }"
step=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step"])' "$out/latest/trainer.json")
acc() { # TEST LABEL: mean and worst accuracy over the positions
    "$L" eval --model "$out/latest" --data "$1" --json --bucket-width 1 |
        /usr/bin/python3 -c 'import json,sys; r=[x for x in json.load(sys.stdin)["rows"] if x["from"]==x["to"]]; v=[x["accuracy"] for x in r]; print("%s: mean %.3f, worst %.3f at %d" % (sys.argv[1], sum(v)/len(v), min(v), min(r, key=lambda x: x["accuracy"])["from"]))' "$2"
}
for lr in $LRS; do
    step=$((step + CHUNK))
    a=()
    for ((i = 0; i < ${#args[@]}; i++)); do # the recipe's arguments, with the new rate, steps and output
        case ${args[$i]} in
        --lr | --steps | --out) i=$((i + 1)) ;;
        --data) a+=(--data "${DATA:-${args[$((i + 1))]}}"); i=$((i + 1)) ;;
        *) a+=("${args[$i]}") ;;
        esac
    done
    /usr/bin/time -f "%U %S" -o "$out/cpu" "$L" train "${a[@]}" --out "$out" --lr "$lr" --steps "$step" >"$out/train.log" 2>&1
    acc "$test" "lr $lr to step $step ($(awk '{print $1+$2}' "$out/cpu") CPU s this chunk)"
done
[ -z "${TEST2:-}" ] || acc "$TEST2" "$TEST2 at the end"
