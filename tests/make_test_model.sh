#!/usr/bin/env bash
# Writes a small random model into DIR unless DIR/config.json exists (used by `make run`).
# usage: tests/make_test_model.sh DIR [plain|t2mlr|lrt] [extra make_model.py flags...]
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [plain|t2mlr|lrt] [make_model.py flags]" >&2; exit 2; }
dir=$1; kind=${2:-t2mlr}; shift $(( $# >= 2 ? 2 : 1 ))
root=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
if [ -f "$dir/config.json" ]; then
    echo "model exists: $dir"
    exit 0
fi
"$PYTHON" "$root/tests/ref/make_model.py" --out "$dir" --kind "$kind" --seed 1 \
    --d 64 --layers 4 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 "$@"
echo "wrote $kind test model: $dir"
