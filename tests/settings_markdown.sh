#!/usr/bin/env bash
# Prints latentd's settings table (`latentd --settings`) as the markdown that
# docs/deployment.md holds between its settings markers. `make docs-settings`
# rewrites that part of the page; tests/integration/settings_docs.sh checks it.
# usage: tests/settings_markdown.sh LATENTD
set -eu
echo "| setting | default | range | what it sets |"
echo "|---|---|---|---|"
"$1" --settings | while IFS=$'\t' read -r name dflt range help; do
    [ "$dflt" = - ] && dflt="(unset)"
    [ "$range" = - ] && range=""
    printf '| `%s` | %s | %s | %s |\n' "$name" "$dflt" "${range//|/ \\| }" "${help//|/\\|}"
done
