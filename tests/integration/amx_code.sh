#!/usr/bin/env bash
# The AMX tile layer's hardware side, checked in the built library on any
# CPU (the instructions cannot run here, but their encoding can be read):
#   - every tile instruction in libengine.a sits in a function compiled
#     for AMX and reached only when latent_isa_tile_ops() gives latent_amx_hw:
#     amx_tile.h's amx_hw_* (the table's) or a kernel's *_hw entry
#     (gemm_amx.c's run_hw, which inlines them); nothing else runs one;
#   - the dot products use the roles of amx_tile.h: C[i][j] = tmm(2i+j)
#     += A[i] = tmm(4+i) . B[j] = tmm(6+j), for TDPBF16PS and TDPBSSD alike;
#   - LDTILECFG reads the configuration through the pointer it is given
#     (thread-local storage in latent_amx_shape), not from the stack.
# env: LATENT_BUILD (dir with libengine.a).
set -u
root=${LATENT_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${LATENT_BUILD:-$root/build}
lib=$build/libengine.a
if ! command -v objdump >/dev/null; then echo "skip objdump is not installed (package binutils)"; exit 0; fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/latent-amx-code.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # name, then a command that must succeed
    local name=$1; shift
    if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}

# "member function mnemonic operands" for every tile instruction
objdump -d --no-show-raw-insn "$lib" | awk '
    /^In archive/ { next }
    /file format/ { member = $1; sub(":$", "", member) }
    /^[0-9a-f]+ <.*>:$/ { fn = $2; gsub("[<>:]", "", fn) }
    $2 ~ /^(ldtilecfg|sttilecfg|tileloadd|tileloaddt1|tilestored|tilezero|tilerelease|tdp[a-z0-9]+)$/ {
        print member, fn, $2, $3 }' > "$tmp/tiles"

check "tile instructions found in libengine.a ($(wc -l < "$tmp/tiles"))" test -s "$tmp/tiles"
check "all of them in amx_hw_* or *_hw functions" bash -c "! awk '\$2 !~ /^amx_hw_/ && \$2 !~ /_hw(\\.[a-z0-9.]+)?\$/' '$tmp/tiles' | grep -q ."
check "the table's functions are amx_tile.o's" bash -c "awk '\$1 == \"amx_tile.o\"' '$tmp/tiles' | grep -q amx_hw_dpbf16ps"
for op in tdpbf16ps tdpbssd; do
    for ij in 00 01 10 11; do
        i=${ij:0:1}; j=${ij:1:1}
        want="%tmm$((6 + j)),%tmm$((4 + i)),%tmm$((2 * i + j))"
        check "$op C[$i][$j] += A[$i] . B[$j] is $op $want" grep -q " $op $want\$" "$tmp/tiles"
    done
    check "$op: no other operand triple anywhere" bash -c "! grep ' $op ' '$tmp/tiles' |
        grep -v ' %tmm6,%tmm4,%tmm0\$\| %tmm7,%tmm4,%tmm1\$\| %tmm6,%tmm5,%tmm2\$\| %tmm7,%tmm5,%tmm3\$' | grep -q ."
done
check "tilerelease present" grep -q " tilerelease" "$tmp/tiles"
check "ldtilecfg reads through a pointer, not the stack" bash -c "grep ' ldtilecfg ' '$tmp/tiles' | grep -q . &&
    ! grep ' ldtilecfg ' '$tmp/tiles' | grep -q '%rsp\|%rbp'"
echo "$fails failed"
[ "$fails" -eq 0 ]
