#!/usr/bin/env bash
# The official openai npm package (tests/package.json) as a real client of
# latentd: completions and chat, streaming and not, include_usage, n, stop,
# seed determinism, logprobs, error classes (tests/server/openai_client.mjs).
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../server/lib.sh"

command -v node >/dev/null || { echo "FAIL: node is not installed"; exit 1; }
if [ ! -d "$root/tests/node_modules/openai" ]; then
    npm ci --prefix "$root/tests" --no-audit --no-fund >/dev/null 2>&1 || { echo "FAIL: npm ci --prefix tests"; exit 1; }
fi
model=$tmp/t2mlr
"$root/tests/make_test_model.sh" "$model" t2mlr >/dev/null
start_server A "$model" --api-key sk-test --served-model-name smol-t2mlr || exit 1
node "$root/tests/server/openai_client.mjs" "$URL_A" sk-test
rc=$?
check "no session left after the SDK run" "$PY" "$client" wait_idle "$URL_A"
stop_server A
check "clean exit" test "$STOP_RC" = 0
[ $rc -eq 0 ] && finish
