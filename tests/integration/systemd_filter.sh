#!/usr/bin/env bash
# The shipped unit's system-call filter (systemd/latentd.service) lets latentd
# ask for AMX tile data: arch_prctl(ARCH_REQ_XCOMP_PERM) (engine/kernels/isa.c),
# without which the tile kernel cannot run under systemd. The unit's
# SystemCallFilter= lines are resolved here as systemd does (the first line
# an allow list, each later one adding to it, a leading ~ removing), each
# @group expanded through `systemd-analyze syscall-filter` (nested groups
# too); then arch_prctl must be allowed, and a call the unit denies on
# purpose (from @privileged) must not be, so the resolution is not vacuous.
# Skipped where systemd-analyze is not installed. env: LATENT_ROOT.
set -u
root=${LATENT_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
unit=$root/systemd/latentd.service
if ! command -v systemd-analyze >/dev/null; then
    echo "skip systemd-analyze is not installed (package systemd)"
    exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/latent-filter.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The system calls of @group, nested groups expanded, one a line.
expand() {
    local item=$1 sub
    case $item in
        @*) systemd-analyze syscall-filter "$item" 2>/dev/null | tail -n +2 | sed 's/^ *//' | grep -v '^#' | grep -v '^$' |
                while read -r sub; do expand "$sub"; done ;;
        *) echo "$item" ;;
    esac
}

: > "$tmp/allowed"
grep '^SystemCallFilter=' "$unit" | sed 's/^SystemCallFilter=//' > "$tmp/lines"
while read -r line; do
    deny=0
    case $line in "~"*) deny=1; line=${line#\~} ;; esac
    for item in $line; do expand "$item"; done | sort -u > "$tmp/set"
    if [ "$deny" = 1 ]; then comm -23 "$tmp/allowed" "$tmp/set" > "$tmp/next"
    else sort -u "$tmp/allowed" "$tmp/set" > "$tmp/next"; fi
    mv "$tmp/next" "$tmp/allowed"
done < "$tmp/lines"

fails=0
n=$(wc -l < "$tmp/allowed")
if grep -qx arch_prctl "$tmp/allowed"; then
    echo "ok   the unit's SystemCallFilter allows arch_prctl (AMX tile permission; $n calls allowed)"
else
    echo "FAIL the unit's SystemCallFilter denies arch_prctl: the AMX tile kernel cannot get tile data"; fails=1
fi
denied=$(expand @privileged | grep -vxF -f "$tmp/allowed" | head -n 1)
if [ -n "$denied" ] && grep -q '^SystemCallFilter=~@privileged' "$unit"; then
    echo "ok   and it denies what it means to ($denied, from @privileged)"
else
    echo "FAIL the filter's resolution found nothing of @privileged denied"; fails=1
fi
[ "$fails" -eq 0 ]
