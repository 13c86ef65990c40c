#!/usr/bin/env bash
# Data-parallel scaling on one machine: `latent train` as 1 process with 2
# threads against 2 ranks under mpirun with 1 thread each, alternating,
# printing the median tokens/s of steps 2..N and the median allreduce time
# (docs/training.md, "Data parallel").
# usage: clients/train_scaling.sh MODEL_DIR DATA.bin [ROUNDS] [STEPS]
set -eu
model=$1 data=$2 rounds=${3:-2} steps=${4:-8}
latent=${LATENT:-$(dirname "$0")/../build/latent}
PY=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpi=(mpirun --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
summary() {
    "$PY" - "$1" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
ar = [r['allreduce_s'] for r in rows if 'allreduce_s' in r]
print('tokens/s %.0f' % statistics.median(r['tokens_per_s'] for r in rows) +
      ('  allreduce %.1f ms/step' % (1e3 * statistics.median(ar)) if ar else ''))
PYEOF
}
args=(--model "$model" --data "$data" --batch 8 --seq 256 --steps "$steps")
grep -m1 "model name" /proc/cpuinfo
for r in $(seq 1 "$rounds"); do
    rm -rf "$tmp/one" "$tmp/two"
    "$latent" train "${args[@]}" --out "$tmp/one" --threads 2 >/dev/null
    echo "round $r, 1 process x 2 threads: $(summary "$tmp/one/train.jsonl")"
    "${mpi[@]}" -np 2 "$latent" train "${args[@]}" --out "$tmp/two" --threads 1 >/dev/null
    echo "round $r, 2 ranks x 1 thread:   $(summary "$tmp/two/train.jsonl")"
done
