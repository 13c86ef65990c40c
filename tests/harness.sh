# Shared preamble of the integration scripts (sourced, not run):
#   . "$(dirname "$0")/../harness.sh" NAME
# sets root, build, PY, latent, ref; makes $tmp (removed at exit); defines
# ok/fail, which count checks in n and failures in fails; refuses to run
# without a built `latent`. env: LATENT_BUILD, LATENT_ROOT, PYTHON.
root=${LATENT_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
build=${LATENT_BUILD:-$root/build}
PY=${PYTHON:-/usr/bin/python3}
latent=$build/latent
ref=$root/tests/ref
tmp=$(mktemp -d "${TMPDIR:-/tmp}/latent-${1:-test}.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0; n=0
ok()   { n=$((n + 1)); printf 'ok   %s\n' "$1"; }
fail() { n=$((n + 1)); fails=$((fails + 1)); printf 'FAIL %s\n' "$1"; shift; for l in "$@"; do printf '     %s\n' "$l"; done; }
[ -x "$latent" ] || { echo "FAIL: $latent not built"; exit 1; }
