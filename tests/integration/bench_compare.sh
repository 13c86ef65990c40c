#!/usr/bin/env bash
# latent-bench against real daemons: a plain run reports p50/p90/p99 with the
# sample count; --compare runs the T2MLR test model (A) against its own
# backbone without the recurrence (B, same seed and sizes) in alternating
# rounds and prints both servers' distributions, equal request counts, and the
# per-token overhead ratio with a bootstrap interval that contains it; no
# sessions are left behind; options that would make the comparison unfair are
# refused. (The percentile and interval arithmetic: unit test test_bench_stats.)
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../server/lib.sh"
bench=$build/latent-bench
[ -x "$bench" ] || { echo "FAIL: $bench not built"; exit 1; }
# Wider than the standard test models, so a decode step takes milliseconds and
# a stream sends its tokens over many chunks (a tiny model finishes a request
# faster than the loop sends one chunk). Same seed and sizes: same backbone.
sizes=(--seed 1 --d 256 --layers 8 --heads 4 --kv-heads 2 --ffn 1024 --vocab 512)
"$PY" "$root/tests/ref/make_model.py" --out "$tmp/t2mlr" --kind t2mlr --t2mlr 2,5 "${sizes[@]}" >/dev/null
"$PY" "$root/tests/ref/make_model.py" --out "$tmp/plain" --kind plain "${sizes[@]}" >/dev/null

start_server A "$tmp/t2mlr" --max-sessions 8 || exit 1
start_server B "$tmp/plain" --max-sessions 8 || exit 1

# A plain run: every distribution with its sample count.
"$bench" --url "$URL_A" --clients 2 --requests 6 --max-tokens 16 > "$tmp/plain.out" 2>&1
rc=$?
check "latent-bench run (exit 0)" test $rc = 0
check "TTFT p50/p90/p99 with n 6" grep -Eq '^time to first token: p50 [0-9.]+ ms, p90 [0-9.]+ ms, p99 [0-9.]+ ms \(n 6\)$' "$tmp/plain.out"
check "inter-token latency with its n" grep -Eq '^inter-token latency: p50 [0-9.]+ ms, p90 [0-9.]+ ms, p99 [0-9.]+ ms \(n [1-9][0-9]*\)$' "$tmp/plain.out"

# --compare: 4 clients, 16 requests per server = 4 round pairs.
"$bench" --url "$URL_A" --compare "$URL_B" --clients 4 --requests 16 --max-tokens 24 > "$tmp/cmp.out" 2>&1
rc=$?
sed 's/^/     | /' "$tmp/cmp.out"
check "latent-bench --compare (exit 0)" test $rc = 0
check "4 round pairs in ABBA order" grep -q '^compare: 4 clients, 4 round pairs in ABBA order' "$tmp/cmp.out"
check "both servers named" bash -c "grep -qx 'A: $URL_A' '$tmp/cmp.out' && grep -qx 'B: $URL_B' '$tmp/cmp.out'"
check "16 requests on each, no errors" test "$(grep -c '^  requests 16 ok, 0 errors' "$tmp/cmp.out")" = 2
check "TTFT distribution of each (n 16)" test \
    "$(grep -Ec '^  time to first token: p50 [0-9.]+ ms, p90 [0-9.]+ ms, p99 [0-9.]+ ms \(n 16\)$' "$tmp/cmp.out")" = 2
check "inter-token distribution of each" test \
    "$(grep -Ec '^  inter-token latency: p50 [0-9.]+ ms, p90 [0-9.]+ ms, p99 [0-9.]+ ms \(n [1-9][0-9]*\)$' "$tmp/cmp.out")" = 2
check "no sessions left on either" test "$(grep -c '^  server sessions left after the run: 0$' "$tmp/cmp.out")" = 2
check "overhead ratio with a 95% bootstrap interval around it" "$PY" - "$tmp/cmp.out" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"^per-token overhead A/B: per-token decode time ratio ([0-9.]+), 95% CI ([0-9.]+)-([0-9.]+) "
              r"\(percentile bootstrap over 4 round pairs, 2000 resamples\); median inter-token latency ratio ([0-9.]+)$",
              text, re.M)
assert m, "no ratio line"
r, lo, hi, med = map(float, m.groups())
assert 0 < lo <= r <= hi, (lo, r, hi)
# the median inter-token ratio is A's p50 over B's as printed above it (to
# their 0.1 ms rounding). With one event per token several often arrive in one
# read on these tiny models: p50s under 0.5 ms are too coarse to compare, and
# a p50 of exactly 0 for B makes the ratio 0.
p50 = [float(x) for x in re.findall(r"^  inter-token latency: p50 ([0-9.]+) ms", text, re.M)]
assert len(p50) == 2, p50
assert med >= 0, med
if p50[1] >= 0.5:
    assert abs(med - p50[0] / p50[1]) <= 0.06 * p50[0] / p50[1] + 0.1, (med, p50)
# the ratio is the one of the two per-token times printed above it
t = [float(x) for x in re.findall(r"^  per-token decode time: ([0-9.]+) ms \([0-9.]+ s from first to last chunk over "
                                   r"[1-9]\d* tokens\)$", text, re.M)]
assert len(t) == 2 and abs(t[0] / t[1] - r) <= 0.005 * r, (t, r)  # printed to 4 digits, the ratio to 3 decimals
# decode tokens: completion_tokens - 1 of each request with 2+ chunks, at most 16 * 23
n = [int(x) for x in re.findall(r"^  per-token decode time: .* over (\d+) tokens\)$", text, re.M)]
assert len(n) == 2 and all(0 < k <= 16 * 23 for k in n), n
print("ratio %.3f [%.3f, %.3f]" % (r, lo, hi))
PY

check "--compare refuses --cancel-fraction" bash -c \
    "'$bench' --url '$URL_A' --compare '$URL_B' --cancel-fraction 0.5 2>&1 | grep -q 'do not apply'; [ \${PIPESTATUS[0]} = 2 ]"
check "--compare needs a URL" bash -c "'$bench' --url '$URL_A' --compare localhost:1 >/dev/null 2>&1; [ \$? = 2 ]"

stop_server A; check "A exits cleanly" test "$STOP_RC" = 0
stop_server B; check "B exits cleanly" test "$STOP_RC" = 0
finish
