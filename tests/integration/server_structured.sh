#!/usr/bin/env bash
# response_format over HTTP (issue 25): json_object and json_schema on
# completions and chat completions, on the random test model at temperature
# 1. Every document that finishes with "stop" parses and validates against
# its schema (a small independent validator below, not the server's code);
# 40 random schemas from a seeded generator use every keyword of the subset.
# Streaming sends the same text; schemas outside the subset or past a cap get
# a 400 naming the keyword and pointer, quickly, and the server keeps serving.
# env: LATENT_BUILD, LATENT_ROOT, PYTHON.
set -u
. "$(dirname "$0")/../server/lib.sh"
test_models 5
start_server A "$model" || exit 1

out=$("$PY" - "$URL_A" <<'PY'
import json, random, sys, time, urllib.request, urllib.error
url = sys.argv[1]
fails = []
def post(path, body, stream=False):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read().decode()
            return r.status, raw
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

def validate(v, s, root, path="$"):
    """The subset's meaning, written from the JSON Schema spec."""
    if s is True or s == {}: return
    if "$ref" in s:
        t = root
        for part in s["$ref"].lstrip("#").split("/")[1:]:
            t = t[part.replace("~1", "/").replace("~0", "~")]
        return validate(v, t, root, path)
    if "anyOf" in s or "oneOf" in s:
        errs = []
        for b in s.get("anyOf") or s.get("oneOf"):
            try: validate(v, b, root, path); return
            except AssertionError as e: errs.append(str(e))
        raise AssertionError(f"{path}: no branch matches: {errs}")
    if "const" in s: assert v == s["const"] and type(v) == type(s["const"]), f"{path}: const"
    if "enum" in s: assert any(v == e and type(v) == type(e) for e in s["enum"]), f"{path}: enum {v!r}"
    t = s.get("type")
    if t is not None:
        ts = t if isinstance(t, list) else [t]
        def is_t(x):
            return {"object": isinstance(v, dict), "array": isinstance(v, list), "string": isinstance(v, str),
                    "number": isinstance(v, (int, float)) and not isinstance(v, bool),
                    "integer": isinstance(v, int) and not isinstance(v, bool) or (isinstance(v, float) and v.is_integer()),
                    "boolean": isinstance(v, bool), "null": v is None}[x]
        assert any(is_t(x) for x in ts), f"{path}: {v!r} is not {t}"
    if isinstance(v, dict):
        for k in s.get("required", []): assert k in v, f"{path}: missing {k}"
        props = s.get("properties", {})
        for k, x in v.items():
            if k in props: validate(x, props[k], root, f"{path}.{k}")
            else: assert s.get("additionalProperties", True) is not False, f"{path}: extra {k}"
    if isinstance(v, list):
        assert len(v) >= s.get("minItems", 0) and len(v) <= s.get("maxItems", 1 << 30), f"{path}: items {len(v)}"
        if "items" in s:
            for i, x in enumerate(v): validate(x, s["items"], root, f"{path}[{i}]")
    if isinstance(v, str):
        assert s.get("minLength", 0) <= len(v) <= s.get("maxLength", 1 << 30), f"{path}: length {len(v)}"

def rand_schema(rng, depth=0):
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const", "typelist"]
    if depth < 3: kinds += ["object", "object", "array", "anyOf"]
    k = rng.choice(kinds)
    if k == "string":
        s = {"type": "string"}
        if rng.random() < 0.5: s["minLength"] = rng.randint(0, 3)
        if rng.random() < 0.5: s["maxLength"] = s.get("minLength", 0) + rng.randint(0, 6)
        return s
    if k in ("integer", "number", "boolean", "null"): return {"type": k}
    if k == "enum": return {"enum": rng.sample(["a", "bb", 1, 2.5, True, None, [1], {"x": 1}], rng.randint(1, 4))}
    if k == "const": return {"const": rng.choice(["on", 7, False, None])}
    if k == "typelist": return {"type": rng.sample(["string", "integer", "boolean", "null"], 2)}
    if k == "array":
        s = {"type": "array", "items": rand_schema(rng, depth + 1)}
        if rng.random() < 0.5: s["minItems"] = rng.randint(0, 2)
        s["maxItems"] = s.get("minItems", 0) + rng.randint(0, 3)
        return s
    if k == "anyOf": return {rng.choice(["anyOf", "oneOf"]): [rand_schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]}
    props = {f"k{i}": rand_schema(rng, depth + 1) for i in range(rng.randint(1, 4))}
    return {"type": "object", "properties": props, "required": rng.sample(sorted(props), rng.randint(0, len(props))),
            "additionalProperties": False}

def run(schema, i, chat, stream=False):
    rf = {"type": "json_object"} if schema is None else {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}
    body = {"max_tokens": 160, "temperature": 1, "seed": 1000 + i, "response_format": rf, "stream": stream}
    if chat: body["messages"] = [{"role": "user", "content": "Give me JSON."}]
    else: body["prompt"] = "JSON:"
    st, raw = post("/v1/chat/completions" if chat else "/v1/completions", body)
    if st != 200: fails.append(f"schema {i}: status {st}: {raw[:300]}"); return None, None
    if stream:
        text, fin = "", None
        for line in raw.split("\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                c = json.loads(line[6:])["choices"]
                if c:
                    text += (c[0].get("delta", {}).get("content") or "") if chat else c[0]["text"]
                    fin = c[0]["finish_reason"] or fin
        return text, fin
    c = json.loads(raw)["choices"][0]
    return (c["message"]["content"] if chat else c["text"]), c["finish_reason"]

rng = random.Random(25)
schemas = [None] + [rand_schema(rng) for _ in range(40)]
schemas.append({"$defs": {"n": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}, "maxItems": 2}},
                "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/n"})
stops = lengths = 0
for i, s in enumerate(schemas):
    text, fin = run(s, i, chat=i % 2 == 1)
    if text is None: continue
    if fin == "stop":
        stops += 1
        try:
            v = json.loads(text)
            if s is None: assert isinstance(v, dict), "json_object is an object"
            else: validate(v, s, s)
        except Exception as e:
            fails.append(f"schema {i} {json.dumps(s)}: {text!r}: {e}")
    elif fin == "length": lengths += 1
    else: fails.append(f"schema {i}: finish_reason {fin}")
    if i < 6:
        t2, f2 = run(s, i, chat=i % 2 == 1, stream=True)
        if (t2, f2) != (text, fin): fails.append(f"schema {i}: stream {t2!r} {f2} != {text!r} {fin}")
if stops < len(schemas) // 2: fails.append(f"only {stops} of {len(schemas)} documents finished (length: {lengths})")
print(f"{stops} documents valid, {lengths} cut by max_tokens;", end=" ")

bad = [({"type": "string", "pattern": "a"}, "pattern", "''"),
       ({"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}}}, "minimum", "'/properties/a'"),
       ({"enum": list(range(100000))}, "enum", "''"),
       ({"anyOf": [{"anyOf": [{"type": "string", "maxLength": j}, {"type": "integer"}]} for j in range(60)]}, "anyOf", "''"),
       (json.loads("{\"type\":\"array\",\"items\":" * 300 + "{}" + "}" * 300), "", ""),
       ({"$ref": "#/$defs/nope"}, "$ref", "''")]
for s, kw, ptr in bad:
    t0 = time.time()
    st, raw = post("/v1/completions", {"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "b", "schema": s}}})
    dt = time.time() - t0
    if st != 400 or f"keyword '{kw}'" not in raw or (ptr and f"pointer {ptr}" not in raw) or dt > 5:
        fails.append(f"adversarial {kw}: {st} in {dt:.1f}s: {raw[:300]}")
st, raw = post("/v1/completions", {"prompt": "x", "response_format": {"type": "yaml"}})
if st != 400: fails.append(f"type yaml: {st}")
st, raw = post("/v1/completions", {"prompt": "x", "max_tokens": 4, "response_format": {"type": "text"}})
if st != 200: fails.append(f"text after the refusals: {st}")
print(f"{len(bad) + 1} refusals")
for f in fails: print("FAIL", f)
sys.exit(1 if fails else 0)
PY
) && ok "response_format: $out" || fail "response_format" "$out"

stop_server A
[ "$STOP_RC" = 0 ] && ok "drains cleanly" || fail "exit status $STOP_RC"
echo "$n checks, $fails failed"
[ "$fails" = 0 ]
