#!/usr/bin/env python3
"""Structured output (response_format) checks for
tests/integration/server_structured.sh (stdlib only).

usage: structured.py COMMAND URL [args...]
  ask URL OUT.jsonl COUNT SEED MAX_TOKENS CONCURRENCY [json_object]
      COUNT random schemas inside the JSON Schema subset of docs/api.md from a
      generator seeded with SEED (every keyword of the subset; the run fails
      when one is missing), or with `json_object` COUNT json_object
      requests, each sent once at temperature 1 (completions and chat
      alternating), CONCURRENCY at a time. Writes one JSON line per request:
      {i, endpoint, schema, text, finish_reason} (json_object as the schema
      {"type": "object"}); tests/server/validate_ajv.mjs validates them.
  stream URL N SEED MAX_TOKENS
      a json_object request and the first N of the same schemas, streamed
      and not: the same text and finish_reason.
  refusals URL
      schemas outside the subset or past a cap: a 400 naming the keyword and
      its JSON pointer within 5 s, and the server serves afterwards.
The generator is rand_schemas(); client.py's `determinism` command uses it
for its constrained requests."""
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

# ---- the generator ------------------------------------------------------------

# Values for enum and const: every JSON type, nested ones included.
POOL = ["a", "bb", "yes", "no", "", "x y", 0, 1, -3, 2.5, 1e3, True, False, None,
        [], [1, "a"], {}, {"x": 1}, {"k": [True, None]}]
WORDS = ["id", "name", "age", "city", "tags", "score", "ok", "kind", "note", "items",
         "count", "level", "color", "size", "owner", "value", "title", "year"]
KEYWORDS = ("type", "type list", "properties", "required", "additionalProperties",
            "items", "minItems", "maxItems", "enum", "const", "anyOf", "oneOf",
            "minLength", "maxLength", "$ref", "$defs", "recursive $ref")
SCALARS = ("string", "integer", "number", "boolean", "null")


def json_type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


class Gen:
    """One root schema: nodes of bounded size (strings and arrays mostly have
    a maximum, so a small model finishes most documents) with every keyword
    of the subset; oneOf branches are disjoint (different JSON types, or
    objects told apart by a const `kind`), because a validator requires
    exactly one branch to match while the server enforces oneOf as anyOf."""

    def __init__(self, rng):
        self.rng = rng
        self.defs = {}

    def string(self):
        r, s = self.rng, {"type": "string"}
        if r.random() < 0.3:
            s["minLength"] = r.randint(0, 3)
        if r.random() < 0.97:
            s["maxLength"] = s.get("minLength", 0) + r.randint(0, 10)
        return s

    def scalar(self):
        r = self.rng
        k = r.choice(("string", "string", "integer", "number", "boolean", "null",
                      "enum", "typed enum", "const", "typed const", "type list"))
        if k == "string":
            return self.string()
        if k in SCALARS:
            return {"type": k}
        if k == "enum":
            return {"enum": r.sample(POOL, r.randint(1, 5))}
        if k == "typed enum":
            vals = r.sample(POOL, r.randint(2, 6))
            t = json_type(r.choice(vals))
            return {"type": "number" if t == "integer" and r.random() < 0.5 else t, "enum": vals}
        if k == "const":
            return {"const": r.choice(POOL)}
        if k == "typed const":
            v = r.choice(POOL)
            return {"type": json_type(v), "const": v}
        ts = r.sample(SCALARS, r.randint(2, 3))
        s = {"type": ts}
        if "string" in ts:
            s["maxLength"] = r.randint(0, 8)
            if r.random() < 0.3:
                s["minLength"] = r.randint(0, s["maxLength"])
        return s

    def node(self, depth):
        r = self.rng
        kinds = ["scalar"] * 6 + ["ref"]
        if depth < 3:
            kinds += ["object", "object", "array", "anyOf", "oneOf", "nullable"]
        k = r.choice(kinds)
        if k == "scalar":
            return self.scalar()
        if k == "ref":
            return self.ref(depth)
        if k == "object":
            return self.object(depth)
        if k == "array":
            return self.array(depth)
        if k == "anyOf":
            return {"anyOf": [self.node(depth + 1) for _ in range(r.randint(2, 3))]}
        if k == "oneOf":
            return self.one_of(depth)
        # nullable containers: a type list with object or array
        if r.random() < 0.5:
            s = self.array(depth)
            s["type"] = ["array", "null"]
        else:
            s = self.object(depth)
            s["type"] = ["object", "null"]
        return s

    def object(self, depth, nprops=None):
        r = self.rng
        names = r.sample(WORDS, nprops or r.randint(1, 3))
        props = {n: self.node(depth + 1) for n in names}
        s = {"type": "object", "properties": props,
             "required": sorted(r.sample(names, r.randint(0, len(names))))}
        if r.random() < 0.85:
            s["additionalProperties"] = False
        return s

    def array(self, depth):
        r = self.rng
        s = {"type": "array", "items": self.node(depth + 1)}
        if r.random() < 0.5:
            s["minItems"] = r.randint(0, 2)
        if r.random() < 0.97:
            s["maxItems"] = s.get("minItems", 0) + r.randint(0, 3)
        return s

    def one_of(self, depth):
        r = self.rng
        if r.random() < 0.3:  # a discriminated union of objects
            tags = r.sample(["a", "b", "c", "d"], r.randint(2, 3))
            out = []
            for t in tags:
                o = self.object(depth + 1)
                o["properties"].pop("kind", None)
                o["properties"] = {"kind": {"const": t}, **o["properties"]}
                o["required"] = ["kind"] + [x for x in o["required"] if x != "kind"]
                out.append(o)
            return {"oneOf": out}
        fams = r.sample(("string", "num", "boolean", "null", "array", "object"), r.randint(2, 3))
        out = []
        for f in fams:
            if f == "string":
                out.append(self.string() if r.random() < 0.7 else {"enum": ["red", "green", "blue"]})
            elif f == "num":
                out.append({"type": r.choice(("integer", "number"))})
            elif f == "boolean":
                out.append({"type": "boolean"} if r.random() < 0.7 else {"const": True})
            elif f == "null":
                out.append({"type": "null"})
            elif f == "array":
                out.append(self.array(depth + 1))
            else:
                out.append(self.object(depth + 1))
        return {"oneOf": out}

    def ref(self, depth):
        """A non-recursive reference: a new definition, or one made before
        (a definition may itself refer to earlier ones)."""
        r = self.rng
        if self.defs and r.random() < 0.4:
            name = r.choice(sorted(self.defs))
        else:
            # made before it is named, so it refers only to earlier definitions
            d = self.node(max(depth, 2)) if r.random() < 0.5 else self.scalar()
            name = "d%d" % len(self.defs)
            self.defs[name] = d
        return {"$ref": "#/$defs/" + name}

    def recursive(self):
        """A schema that refers to itself. A model ends such a document by
        leaving out an optional key, choosing null or closing an array; a
        small one ends it when that choice comes before the recursive key,
        so the recursive key comes first where it is optional."""
        r = self.rng
        leaf = self.scalar()
        k = r.randint(0, 3)
        if k == 0:  # a tree: kids optional, at most 2
            node = {"type": "object",
                    "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                            "maxItems": r.randint(1, 2)}, "name": self.string()},
                    "required": ["name"], "additionalProperties": False}
            return {"$defs": {"node": node}, "$ref": "#/$defs/node"}
        if k == 1:  # a linked list ending in null
            node = {"type": "object",
                    "properties": {"v": leaf, "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/list"}]}},
                    "required": ["v", "next"], "additionalProperties": False}
            return {"type": "object", "properties": {"head": {"$ref": "#/$defs/list"}}, "required": ["head"],
                    "additionalProperties": False, "$defs": {"list": node}}
        if k == 2:  # the root itself, through an optional key or a required nullable one
            if r.random() < 0.5:
                return {"type": "object", "properties": {"sub": {"$ref": "#"}, "a": leaf},
                        "required": ["a"], "additionalProperties": False}
            return {"type": "object", "properties": {"a": leaf, "sub": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}},
                    "required": ["a", "sub"], "additionalProperties": False}
        # a JSON-like value: scalars or short arrays of values
        v = {"anyOf": [leaf, {"type": "array", "items": {"$ref": "#/$defs/value"}, "maxItems": r.randint(1, 3)}]}
        return {"$defs": {"value": v}, "type": "object", "properties": {"value": {"$ref": "#/$defs/value"}},
                "required": ["value"], "additionalProperties": False}

    def root(self):
        r = self.rng
        k = r.random()
        if k < 0.12:
            return self.recursive()
        if k < 0.75:
            s = self.object(0, r.randint(1, 5))
        elif k < 0.87:
            s = self.array(0)
        else:
            s = self.node(0)
        if self.defs:
            s = dict(s, **{"$defs": self.defs})
        return s


def rand_schemas(seed, count):
    rng = random.Random(seed)
    return [Gen(rng).root() for _ in range(count)]


def keywords(s, seen):
    """Counts the subset's keywords used in schema s into seen."""
    if isinstance(s, list):
        for x in s:
            keywords(x, seen)
        return
    if not isinstance(s, dict):
        return
    for k, v in s.items():
        if k in ("enum", "const"):
            seen[k] = seen.get(k, 0) + 1
            continue
        if k == "properties":
            seen[k] = seen.get(k, 0) + 1
            for x in v.values():
                keywords(x, seen)
            continue
        if k == "$defs":
            seen[k] = seen.get(k, 0) + 1
            for x in v.values():
                keywords(x, seen)
            continue
        if k in KEYWORDS:
            seen[k] = seen.get(k, 0) + 1
        if k == "type" and isinstance(v, list):
            seen["type list"] = seen.get("type list", 0) + 1
        keywords(v, seen)


def is_recursive(s):
    """True when a $ref of s leads back to a schema holding it."""
    def resolve(ref):
        t = s
        for part in ref.lstrip("#").split("/")[1:]:
            t = t[part.replace("~1", "/").replace("~0", "~")]
        return t

    def walk(x, stack):
        if isinstance(x, list):
            return any(walk(y, stack) for y in x)
        if not isinstance(x, dict):
            return False
        if "$ref" in x:
            t = resolve(x["$ref"])
            if any(t is y for y in stack):
                return True
            if walk(t, stack + [t]):
                return True
        return any(walk(v, stack) for k, v in x.items() if k not in ("$defs", "enum", "const", "$ref"))
    return walk(s, [s])


def recursed(s, doc):
    """True when doc, a document of one of Gen.recursive()'s schemas s,
    followed the recursive reference at least once."""
    props, defs = s.get("properties", {}), s.get("$defs", {})
    try:
        if "sub" in props:
            return isinstance(doc.get("sub"), dict)
        if "head" in props:
            return doc["head"]["next"] is not None
        if "value" in defs:
            return isinstance(doc["value"], list)
        return bool(doc.get("kids"))
    except (AttributeError, KeyError, TypeError):
        return False


# ---- HTTP -----------------------------------------------------------------------

def body_for(i, schema, max_tokens, stream=False):
    rf = ({"type": "json_object"} if schema is None else
          {"type": "json_schema", "json_schema": {"name": "s%d" % i, "schema": schema, "strict": True}})
    body = {"max_tokens": max_tokens, "temperature": 1, "seed": 1000 + i, "response_format": rf, "stream": stream}
    if i % 2:
        body["messages"] = [{"role": "user", "content": "Give me JSON."}]
        return "/v1/chat/completions", body
    body["prompt"] = "JSON:"
    return "/v1/completions", body


def post(url, path, body, c=None, timeout=300):
    u = urllib.parse.urlparse(url)
    own = c is None
    c = c or http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    c.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read().decode()
    if own:
        c.close()
    return r.status, raw


def answer(path, raw, stream):
    """(text, finish_reason) of a 200 response, streamed or not."""
    chat = "chat" in path
    if not stream:
        ch = json.loads(raw)["choices"][0]
        return (ch["message"]["content"] if chat else ch["text"]), ch["finish_reason"]
    text, fin = "", None
    for line in raw.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            cs = json.loads(line[6:])["choices"]
            if cs:
                text += (cs[0].get("delta", {}).get("content") or "") if chat else cs[0]["text"]
                fin = cs[0]["finish_reason"] or fin
    return text, fin


def cmd_ask(url, out_path, count, seed, max_tokens, concurrency, what="json_schema"):
    count, seed, max_tokens, concurrency = int(count), int(seed), int(max_tokens), int(concurrency)
    schemas = [] if what == "json_object" else rand_schemas(seed, count)
    reqs = [(i, None) for i in range(count)] if what == "json_object" else list(enumerate(schemas))
    seen = {}
    keywords(schemas, seen)
    seen["recursive $ref"] = sum(map(is_recursive, schemas))
    missing = [k for k in KEYWORDS if not seen.get(k)]
    if schemas and missing:
        raise SystemExit("the generator used no %s" % ", ".join(missing))
    results = [None] * len(reqs)
    errors = []
    lock = threading.Lock()
    nxt = [0]

    def worker():
        u = urllib.parse.urlparse(url)
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
        while True:
            with lock:
                if nxt[0] >= len(reqs) or len(errors) > 5:
                    break
                i, s = reqs[nxt[0]]
                nxt[0] += 1
            path, body = body_for(i, s, max_tokens)
            try:
                st, raw = post(url, path, body, c)
            except (OSError, http.client.HTTPException) as e:
                c.close()
                c = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
                errors.append("request %d: %s" % (i, e))
                continue
            if st != 200:
                errors.append("request %d: HTTP %d: %s (schema %s)" % (i, st, raw[:300], json.dumps(s)[:500]))
                continue
            text, fin = answer(path, raw, False)
            results[i] = {"i": i, "endpoint": path, "schema": {"type": "object"} if s is None else s,
                          "response_format": "json_object" if s is None else "json_schema",
                          "text": text, "finish_reason": fin,
                          "completion_tokens": json.loads(raw)["usage"]["completion_tokens"]}
        c.close()

    t0 = time.time()
    ts = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.time() - t0
    if errors:
        raise SystemExit("; ".join(errors[:5]))
    with open(out_path, "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    toks = sum(r["completion_tokens"] for r in results)
    deep = 0
    for r in results:
        if r["finish_reason"] == "stop" and is_recursive(r["schema"]):
            try:
                deep += recursed(r["schema"], json.loads(r["text"]))
            except ValueError:
                pass  # not JSON: the validator reports it
    if not schemas:
        print("%d json_object requests in %.1f s, %d at a time, %d tokens" % (len(reqs), dt, concurrency, toks))
        return
    print("%d schemas (%d recursive, %d finished documents recursing) asked in %.1f s, "
          "%d at a time, %d tokens (%.0f/s); keywords: %s" % (
        len(reqs), seen["recursive $ref"], deep, dt, concurrency, toks, toks / dt,
        " ".join("%s %d" % (k, seen[k]) for k in KEYWORDS)))


def cmd_stream(url, n, seed, max_tokens):
    reqs = [(-1, None)] + list(enumerate(rand_schemas(int(seed), int(n))))
    for i, s in reqs:
        got = []
        for stream in (False, True):
            path, body = body_for(i, s, int(max_tokens), stream)
            st, raw = post(url, path, body)
            if st != 200:
                raise SystemExit("request %d: HTTP %d: %s" % (i, st, raw[:300]))
            got.append(answer(path, raw, stream))
        if got[0] != got[1]:
            raise SystemExit("request %d (%s): streamed %r %s, not streamed %r %s" % (
                i, "json_object" if s is None else "json_schema", got[1][0], got[1][1], got[0][0], got[0][1]))
    print("%d requests (completions and chat): the same text and finish_reason streamed" % len(reqs))


def cmd_refusals(url):
    bad = [({"type": "string", "pattern": "a"}, "pattern", "''"),
           ({"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}}}, "minimum", "'/properties/a'"),
           ({"enum": list(range(100000))}, "enum", "''"),
           ({"anyOf": [{"anyOf": [{"type": "string", "maxLength": j}, {"type": "integer"}]} for j in range(60)]}, "anyOf", "''"),
           (json.loads("{\"type\":\"array\",\"items\":" * 300 + "{}" + "}" * 300), "", ""),
           ({"$ref": "#/$defs/nope"}, "$ref", "''")]
    fails = []
    for s, kw, ptr in bad:
        t0 = time.time()
        st, raw = post(url, "/v1/completions", {"prompt": "x", "response_format": {
            "type": "json_schema", "json_schema": {"name": "b", "schema": s}}})
        dt = time.time() - t0
        if st != 400 or f"keyword '{kw}'" not in raw or (ptr and f"pointer {ptr}" not in raw) or dt > 5:
            fails.append(f"adversarial {kw}: {st} in {dt:.1f}s: {raw[:300]}")
    st, raw = post(url, "/v1/completions", {"prompt": "x", "response_format": {"type": "yaml"}})
    if st != 400:
        fails.append(f"type yaml: {st}")
    st, raw = post(url, "/v1/completions", {"prompt": "x", "max_tokens": 4, "response_format": {"type": "text"}})
    if st != 200:
        fails.append(f"text after the refusals: {st}")
    if fails:
        raise SystemExit("\n".join(fails))
    print("%d refusals (400 naming keyword and pointer, < 5 s each), then served" % (len(bad) + 1))


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1].replace("-", "_")](*sys.argv[2:])
