#!/usr/bin/env bash
# The library's shape: every global symbol libengine.a defines starts with
# latent_ (no clashes with the programs that link it), the public headers
# include nothing private, and no engine source file passes 1,000 lines.
# env: LATENT_ROOT, LATENT_BUILD.
set -u
. "$(dirname "$0")/../harness.sh" layout

lib=$build/libengine.a
[ -f "$lib" ] || { echo "FAIL: $lib not built"; exit 1; }
bad=$(nm -g --defined-only "$lib" | awk 'NF == 3 && $3 !~ /^latent_/ { print $3 }' | sort -u)
total=$(nm -g --defined-only "$lib" | awk 'NF == 3' | wc -l)
if [ -z "$bad" ] && [ "$total" -gt 50 ]; then ok "all $total global symbols of libengine.a start with latent_"
else fail "libengine.a exports symbols without the latent_ prefix" "$(echo $bad | head -c 600)"; fi

priv=$(grep -n '#include "' "$root"/include/latent/*.h | grep -v '#include "latent/' || true)
[ -z "$priv" ] && ok "include/latent/ includes only include/latent/" || fail "a public header includes a private one" "$priv"

long=$(find "$root/engine" -name '*.[ch]' -exec wc -l {} + | awk '$2 != "total" && $1 > 1000')
[ -z "$long" ] && ok "no engine source over 1,000 lines" || fail "engine sources over 1,000 lines" "$long"

echo "$((n - fails)) of $n checks passed"
[ "$fails" -eq 0 ]
