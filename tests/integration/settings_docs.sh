#!/usr/bin/env bash
# The settings table in server/config.c is the one source of every default:
# etc/latentd.conf names every setting and states each default it sets, and
# docs/deployment.md holds the table as `latentd --settings` prints it
# (regenerate with `make docs-settings`). env: LATENT_ROOT, LATENT_BUILD.
set -u
. "$(dirname "$0")/../harness.sh" settings
conf=$root/etc/latentd.conf
rows=$("$build/latentd" --settings) || { echo "FAIL: latentd --settings"; exit 1; }
count=$(printf '%s\n' "$rows" | wc -l)
[ "$count" -ge 25 ] && ok "latentd --settings lists $count settings" || fail "latentd --settings lists only $count"
while IFS=$'\t' read -r name dflt range help; do
    line=$(grep -E "^#?[[:space:]]*$name[[:space:]]*=" "$conf" | head -n 1)
    if [ -z "$line" ]; then fail "etc/latentd.conf does not name $name"; continue; fi
    value=$(grep -E "^[[:space:]]*$name[[:space:]]*=" "$conf" | head -n 1 | sed 's/^[^=]*=[[:space:]]*//; s/[[:space:]]*$//')
    if [ "$dflt" != - ] && [ "$value" != "$dflt" ]; then
        fail "etc/latentd.conf sets $name = '${value}', the default is '$dflt'"
    else
        ok "etc/latentd.conf: $name${value:+ = $value}"
    fi
done <<< "$rows"
want=$(bash "$root/tests/settings_markdown.sh" "$build/latentd")
have=$(sed -n '/<!-- settings:begin -->/,/<!-- settings:end -->/p' "$root/docs/deployment.md" | sed '1d;$d')
if [ "$want" = "$have" ]; then ok "docs/deployment.md holds the settings table as latentd prints it"
else fail "docs/deployment.md's settings table differs from latentd --settings (run make docs-settings)" \
    "$(diff <(echo "$want") <(echo "$have") | head -n 10 | tr '\n' ' ')"; fi
echo "$((n - fails)) of $n checks passed"
[ "$fails" -eq 0 ]
