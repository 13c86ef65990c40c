#!/usr/bin/env bash
# Runs test suites and prints one closing line "N passed, N failed".
# usage: tests/run_tests.sh unit|integration|all BUILD_DIR
#   unit:        every binary in BUILD_DIR/tests (plain build, or a sanitizer build)
#   integration: every tests/integration/*.sh against BUILD_DIR's binaries
#   all:         unit tests of build/, build/asan, build/ubsan, then integration
set -u
suite=${1:-all}; build=${2:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PYTHON=${PYTHON:-/usr/bin/python3}
export LATENT_ROOT=$root
logdir=build/test-logs; mkdir -p "$logdir"
passed=0; failed=0; failures=()

run_one() { # name, command...
    local name=$1; shift
    local log="$logdir/$(echo "$name" | tr '/ ' '__').log"
    local start=$SECONDS
    if "$@" >"$log" 2>&1; then
        passed=$((passed + 1)); printf 'PASS %-48s %3ds\n' "$name" $((SECONDS - start))
    else
        failed=$((failed + 1)); failures+=("$name")
        printf 'FAIL %-48s %3ds (log: %s)\n' "$name" $((SECONDS - start)) "$log"
        tail -n 30 "$log" | sed 's/^/    | /'
    fi
}

run_unit() { # build dir
    local b=$1 t
    [ -d "$b/tests" ] || { echo "no unit tests built in $b"; failed=$((failed + 1)); return; }
    for t in "$b"/tests/test_*; do
        [ -x "$t" ] || continue
        case "$t" in *.d|*.o) continue;; esac
        run_one "${b}:$(basename "$t")" env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
            UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 "$t"
    done
}

run_integration() { # build dir
    local b=$1 t
    export LATENT_BUILD=$root/$b
    for t in tests/integration/*.sh; do
        [ -f "$t" ] || continue
        run_one "integration:$(basename "$t" .sh)" bash "$t"
    done
}

case $suite in
    unit) run_unit "$build" ;;
    integration) run_integration "$build" ;;
    all) run_unit build; run_unit build/asan; run_unit build/ubsan; run_integration build ;;
    *) echo "unknown suite $suite"; exit 2 ;;
esac

if [ ${#failures[@]} -gt 0 ]; then printf 'failed: %s\n' "${failures[@]}"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
