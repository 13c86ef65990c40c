#!/usr/bin/env bash
# response_format over HTTP (issue 25), on the shipped model (models/default)
# at temperature 1:
# - 1,000 random schemas from a seeded generator (tests/server/structured.py;
#   every keyword of the subset in docs/api.md, recursive $ref included),
#   completions and chat alternating, 24 at a time. Every document that
#   finishes with "stop" parses and validates against its schema with ajv
#   (npm; tests/server/validate_ajv.mjs), an independent validator;
#   documents cut by max_tokens ("length") are counted and at least 90% must
#   finish. Eight known-bad documents fed to the same validator must all
#   fail, so a wrong document fails the test.
# - The random T2MLR test model (any bytes, any Unicode, in strings and
#   keys; about 10 s): 1,000 more schemas of the generator (another seed),
#   checked the same way, and 200 json_object requests (models/default
#   writes free strings it seldom ends; about 85% finish here, at least 70%
#   must), validated against {"type": "object"}.
# - Streaming sends the same text and finish_reason.
# - Schemas outside the subset or past a cap get a 400 naming the keyword and
#   pointer, quickly, and the server keeps serving.
# (Constrained requests alone and under load, bit for bit: server_determinism.sh.)
# env: LATENT_BUILD, LATENT_ROOT, PYTHON; LATENT_STRUCTURED_COUNT (1000).
set -u
. "$(dirname "$0")/../server/lib.sh"
sp=$root/tests/server/structured.py
count=${LATENT_STRUCTURED_COUNT:-1000}
max_tokens=512

if [ ! -d "$root/tests/node_modules/ajv" ]; then
    npm ci --prefix "$root/tests" --no-audit --no-fund >/dev/null 2>&1 || { echo "FAIL: npm ci --prefix tests"; exit 1; }
fi
start_server A "$root/models/default" || exit 1

# judge OUT_OF_VALIDATOR MIN_STOP_PERCENT: the counts line of validate_ajv.mjs.
judge() {
    "$PY" -c '
import json, sys
c = json.loads(sys.argv[1].strip().split("\n")[-1])
ok = c["invalid"] == 0 and c["other"] == 0 and c["valid"] + c["cut"] == c["total"] and c["valid"] * 100 >= int(sys.argv[2]) * c["total"]
print("%d of %d documents finished and are valid (%.1f%%), %d cut by max_tokens, %d invalid" % (
    c["valid"], c["total"], 100.0 * c["valid"] / max(c["total"], 1), c["cut"], c["invalid"] + c["other"]))
sys.exit(0 if ok else 1)' "$1" "$2"
}

t0=$SECONDS
if out=$("$PY" "$sp" ask "$URL_A" "$tmp/docs.jsonl" "$count" 25 "$max_tokens" 24 2>&1); then
    ok "$out"
    v=$(node "$root/tests/server/validate_ajv.mjs" "$root/tests/node_modules" "$tmp/docs.jsonl" 2>&1)
    if summary=$(judge "$v" 90); then
        ok "ajv: $summary (max_tokens $max_tokens; $((SECONDS - t0)) s in all)"
    else
        fail "ajv: $summary (at least 90% must finish, none invalid)" "$(head -c 3000 <<<"$v")"
    fi
else
    fail "asking $count schemas" "$(head -c 1500 <<<"$out")"
fi

# The validator on documents each wrong in one way: every one must fail.
"$PY" - "$tmp/bad.jsonl" <<'PY'
import json, sys
node = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}, "name": {"type": "string", "maxLength": 2}},
        "required": ["name"], "additionalProperties": False}
bad = [({"type": "string", "maxLength": 3}, '"abcd"'),
       ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, "{}"),
       ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}, '{"a": 1, "b": 2}'),
       ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "1"),
       ({"$defs": {"node": node}, "$ref": "#/$defs/node"}, '{"kids": [{"name": "abc"}], "name": "ab"}'),
       ({"type": "object"}, '{"a": 1'),
       ({"type": ["string", "null"], "const": "x"}, "null"),
       ({"type": "array", "items": {"enum": [1, "a"]}, "minItems": 2}, "[1]")]
with open(sys.argv[1], "w") as f:
    for i, (s, text) in enumerate(bad):
        f.write(json.dumps({"i": i, "schema": s, "text": text, "finish_reason": "stop"}) + "\n")
PY
v=$(node "$root/tests/server/validate_ajv.mjs" "$root/tests/node_modules" "$tmp/bad.jsonl" 2>&1)
check "ajv fails each of 8 wrong documents" "$PY" -c '
import json, sys
c = json.loads(sys.argv[1].strip().split("\n")[-1])
assert c == {"total": 8, "valid": 0, "invalid": 8, "cut": 0, "other": 0}, sys.argv[1]
print("8 invalid")' "$v"

check "streamed = not streamed" "$PY" "$sp" stream "$URL_A" 8 25 "$max_tokens"
check "refusals" "$PY" "$sp" refusals "$URL_A"

stop_server A
[ "$STOP_RC" = 0 ] && ok "drains cleanly" || fail "exit status $STOP_RC"

"$root/tests/make_test_model.sh" "$tmp/t2mlr" t2mlr >/dev/null
start_server T "$tmp/t2mlr" || exit 1
if out=$("$PY" "$sp" ask "$URL_T" "$tmp/rand.jsonl" 1000 26 "$max_tokens" 16 2>&1); then
    v=$(node "$root/tests/server/validate_ajv.mjs" "$root/tests/node_modules" "$tmp/rand.jsonl" 2>&1)
    if summary=$(judge "$v" 90); then ok "the test model, ajv: $summary (${out%%;*})"
    else fail "the test model, ajv: $summary (at least 90% must finish, none invalid)" "$(head -c 3000 <<<"$v")"; fi
else
    fail "asking the test model" "$(head -c 1500 <<<"$out")"
fi
if out=$("$PY" "$sp" ask "$URL_T" "$tmp/objects.jsonl" 200 0 512 16 json_object 2>&1); then
    v=$(node "$root/tests/server/validate_ajv.mjs" "$root/tests/node_modules" "$tmp/objects.jsonl" 2>&1)
    if summary=$(judge "$v" 70); then ok "json_object on the test model, ajv: $summary"
    else fail "json_object on the test model, ajv: $summary (at least 70% must finish, none invalid)" "$(head -c 3000 <<<"$v")"; fi
else
    fail "asking json_object" "$(head -c 1500 <<<"$out")"
fi
stop_server T
finish
