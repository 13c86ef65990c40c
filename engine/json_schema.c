/* JSON Schema (the subset of docs/api.md, "Structured output") to grammar
 * nodes. Every keyword outside the subset is refused with its JSON pointer;
 * annotations (title, description, ...) are skipped. $ref targets are
 * compiled once and shared, so recursive schemas become cycles. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_grammar.h"

enum { T_OBJECT = 1, T_ARRAY = 2, T_STRING = 4, T_NUMBER = 8, T_INTEGER = 16, T_BOOLEAN = 32, T_NULL = 64 };

typedef struct cc {
    latent_json_grammar *g;
    const json_t *root;
    latent_json_error *err;
    const json_t **memo_s;    /* $ref targets compiled so far ... */
    uint32_t *memo_n;         /* ... and their nodes */
    uint32_t n_memo, cap_memo;
    int depth;
    uint32_t n_literals;
} cc;

static int fail(cc *c, const char *ptr, const char *kw, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(cc *c, const char *ptr, const char *kw, const char *fmt, ...) {
    if (c->err->msg[0]) return -1; /* the first error stands */
    snprintf(c->err->pointer, sizeof c->err->pointer, "%s", ptr);
    snprintf(c->err->keyword, sizeof c->err->keyword, "%s", kw);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err->msg, sizeof c->err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static int oom(cc *c, const char *ptr) {
    return fail(c, ptr, "", "the schema is too large (caps: %d nodes, %d enum/const values, %d bytes of keys and values)",
                LATENT_JSON_MAX_NODES, LATENT_JSON_MAX_LITERALS, LATENT_JSON_MAX_BYTES);
}

/* ptr + "/" + key, escaped as RFC 6901 says (~ -> ~0, / -> ~1), truncated. */
static void ptr_join(char *out, size_t cap, const char *ptr, const char *key) {
    size_t n = (size_t)snprintf(out, cap, "%s/", ptr);
    for (const char *k = key; *k && n + 3 < cap; k++) {
        if (*k == '~') out[n++] = '~', out[n++] = '0';
        else if (*k == '/') out[n++] = '~', out[n++] = '1';
        else out[n++] = *k;
    }
    if (n < cap) out[n] = 0;
}

static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                          "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL};
static const char *const SUPPORTED[] = {"type", "properties", "required", "additionalProperties", "items", "minItems",
                                        "maxItems", "enum", "const", "anyOf", "oneOf", "minLength", "maxLength", "$ref", NULL};

static int in_list(const char *k, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i])) return 1;
    return 0;
}

/* Refuses unknown keywords, and constraints beside one that excludes them
 * ($ref, anyOf/oneOf, enum/const). */
static int check_keywords(cc *c, const json_t *s, const char *ptr) {
    const char *k;
    json_t *v;
    const char *sole = json_object_get(s, "$ref") ? "$ref" : json_object_get(s, "anyOf") ? "anyOf"
                       : json_object_get(s, "oneOf") ? "oneOf" : NULL;
    json_object_foreach((json_t *)s, k, v) {
        if (in_list(k, ANNOTATIONS)) continue;
        if (!in_list(k, SUPPORTED)) return fail(c, ptr, k, "'%s' is not supported in response_format schemas (see docs/api.md)", k);
        if (sole && strcmp(k, sole))
            return fail(c, ptr, k, "'%s' beside '%s' is not supported: put the constraint inside the branches", k, sole);
    }
    return 0;
}

static int get_count(cc *c, const json_t *s, const char *key, const char *ptr, uint32_t *out) {
    json_t *v = json_object_get(s, key);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000)
        return fail(c, ptr, key, "'%s' must be an integer in 0..1000000", key);
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

static int type_bit(const char *t) {
    static const char *const names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return 1 << i;
    return 0;
}

/* The "type" keyword as a mask; absent: implied by the other keywords, or 0 (anything). */
static int parse_types(cc *c, const json_t *s, const char *ptr, int *mask) {
    json_t *t = json_object_get(s, "type");
    *mask = 0;
    if (!t) {
        if (json_object_get(s, "properties") || json_object_get(s, "required") || json_object_get(s, "additionalProperties")) *mask |= T_OBJECT;
        if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems")) *mask |= T_ARRAY;
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength")) *mask |= T_STRING;
        return 0;
    }
    if (json_is_string(t)) {
        if (!(*mask = type_bit(json_string_value(t)))) return fail(c, ptr, "type", "unknown type '%s'", json_string_value(t));
        return 0;
    }
    size_t i;
    json_t *e;
    if (!json_is_array(t) || !json_array_size(t)) return fail(c, ptr, "type", "'type' must be a string or a non-empty list of strings");
    json_array_foreach(t, i, e) {
        int b = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
        if (!b) return fail(c, ptr, "type", "'type' lists an unknown type");
        *mask |= b;
    }
    return 0;
}

static int value_has_type(const json_t *v, int mask) {
    if (!mask) return 1;
    switch (json_typeof(v)) {
    case JSON_OBJECT: return mask & T_OBJECT;
    case JSON_ARRAY: return mask & T_ARRAY;
    case JSON_STRING: return mask & T_STRING;
    case JSON_INTEGER: return mask & (T_NUMBER | T_INTEGER);
    case JSON_REAL: {
        double d = json_real_value(v);
        return (mask & T_NUMBER) || ((mask & T_INTEGER) && d == floor(d) && fabs(d) < 1e15);
    }
    case JSON_TRUE: case JSON_FALSE: return mask & T_BOOLEAN;
    case JSON_NULL: return mask & T_NULL;
    }
    return 0;
}

/* enum / const: each value as compact JSON text, one literal each. */
static int compile_literals(cc *c, const json_t *s, const char *ptr, int types, uint32_t idx) {
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    const char *kw = en ? "enum" : "const";
    if (en && !json_is_array(en)) return fail(c, ptr, "enum", "'enum' must be a list");
    size_t n = en ? json_array_size(en) : 1;
    if (c->n_literals + n > LATENT_JSON_MAX_LITERALS)
        return fail(c, ptr, kw, "more than %d enum/const values in the schema", LATENT_JSON_MAX_LITERALS);
    c->n_literals += (uint32_t)n;
    jg_lit *lits = malloc((n ? n : 1) * sizeof *lits);
    if (!lits) return oom(c, ptr);
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = en ? json_array_get(en, i) : cn;
        if (!value_has_type(v, types)) continue; /* "type" beside enum: only values of that type */
        char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
        if (!txt || latent_jg_add_bytes(c->g, txt, strlen(txt), &lits[k].off)) { free(txt), free(lits); return oom(c, ptr); }
        lits[k++].len = (uint32_t)strlen(txt);
        free(txt);
    }
    if (!k) { free(lits); return fail(c, ptr, kw, "'%s' has no value (of the schema's type)", kw); }
    uint32_t first, m;
    int rc = latent_jg_add_literals(c->g, lits, k, &first, &m);
    free(lits);
    if (rc) return oom(c, ptr);
    jg_node *nd = &c->g->nodes[idx];
    nd->kind = JG_LITERALS, nd->first = first, nd->n = m;
    return 0;
}

static int compile(cc *c, const json_t *s, const char *ptr, uint32_t *out);
static int compile_into(cc *c, const json_t *s, const char *ptr, uint32_t idx);

/* Resolves "#", "#/a/b~1c" against the root document. */
static const json_t *resolve_ref(const cc *c, const char *ref) {
    if (ref[0] != '#') return NULL;
    const json_t *v = c->root;
    const char *p = ref + 1;
    char tok[256];
    while (*p == '/' && v) {
        size_t n = 0;
        for (p++; *p && *p != '/' && n + 1 < sizeof tok; p++) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) tok[n++] = p[1] == '0' ? '~' : '/', p++;
            else tok[n++] = *p;
        }
        tok[n] = 0;
        v = json_is_object(v) ? json_object_get(v, tok) : json_is_array(v) ? json_array_get(v, (size_t)atol(tok)) : NULL;
    }
    return *p ? NULL : v;
}

static int compile_ref(cc *c, const json_t *s, const char *ptr, uint32_t idx) {
    json_t *r = json_object_get(s, "$ref");
    const json_t *t = json_is_string(r) ? resolve_ref(c, json_string_value(r)) : NULL;
    if (!t) return fail(c, ptr, "$ref", "'$ref' must be a local reference (\"#\", \"#/$defs/name\") to a schema in this document");
    uint32_t target = UINT32_MAX;
    for (uint32_t i = 0; i < c->n_memo; i++)
        if (c->memo_s[i] == t) target = c->memo_n[i];
    if (target == UINT32_MAX) {
        if (c->n_memo == c->cap_memo) {
            uint32_t cap = c->cap_memo ? c->cap_memo * 2 : 16;
            const json_t **ms = realloc(c->memo_s, cap * sizeof *ms);
            if (ms) c->memo_s = ms;
            uint32_t *mn = ms ? realloc(c->memo_n, cap * sizeof *mn) : NULL;
            if (!mn) return oom(c, ptr);
            c->memo_n = mn, c->cap_memo = cap;
        }
        if (latent_jg_add_node(c->g, JG_ANYOF, &target)) return oom(c, ptr);
        c->memo_s[c->n_memo] = t, c->memo_n[c->n_memo++] = target;
        if (compile_into(c, t, json_string_value(r) + 1, target)) return -1;
    }
    uint32_t first;
    if (latent_jg_add_alts(c->g, &target, 1, &first)) return oom(c, ptr);
    jg_node *nd = &c->g->nodes[idx];
    nd->kind = JG_ANYOF, nd->first = first, nd->n = 1;
    return 0;
}

static int compile_anyof(cc *c, const json_t *s, const char *ptr, uint32_t idx) {
    const char *kw = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
    json_t *a = json_object_get(s, kw);
    char p[300], kp[256];
    ptr_join(kp, sizeof kp, ptr, kw);
    if (!json_is_array(a) || !json_array_size(a)) return fail(c, ptr, kw, "'%s' must be a non-empty list of schemas", kw);
    if (json_array_size(a) > LATENT_JSON_MAX_ALTS) return fail(c, ptr, kw, "'%s' has more than %d branches", kw, LATENT_JSON_MAX_ALTS);
    uint32_t kids[LATENT_JSON_MAX_ALTS], first;
    for (size_t i = 0; i < json_array_size(a); i++) {
        snprintf(p, sizeof p, "%s/%zu", kp, i);
        if (compile(c, json_array_get(a, i), p, &kids[i])) return -1;
    }
    if (latent_jg_add_alts(c->g, kids, (uint32_t)json_array_size(a), &first)) return oom(c, ptr);
    jg_node *nd = &c->g->nodes[idx];
    nd->kind = JG_ANYOF, nd->first = first, nd->n = (uint32_t)json_array_size(a);
    return 0;
}

static int required_has(const json_t *req, const char *k) {
    size_t i;
    json_t *e;
    json_array_foreach(req, i, e) if (json_is_string(e) && !strcmp(json_string_value(e), k)) return 1;
    return 0;
}

static int add_prop(cc *c, jg_prop *props, uint32_t *n, const char *key, uint32_t child, int required, const char *ptr) {
    if (*n >= LATENT_JSON_MAX_PROPS) return fail(c, ptr, "properties", "more than %d properties in one object", LATENT_JSON_MAX_PROPS);
    json_t *ks = json_string(key);
    char *txt = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL; /* the key as JSON: quotes, escapes */
    json_decref(ks);
    if (!txt || latent_jg_add_bytes(c->g, txt, strlen(txt), &props[*n].key_off)) { free(txt); return oom(c, ptr); }
    props[*n].key_len = (uint32_t)strlen(txt);
    props[*n].child = child, props[*n].required = (uint8_t)required, props[*n].dead = 0;
    (*n)++;
    free(txt);
    return 0;
}

/* Objects are written with their properties in the schema's order (as
 * OpenAI's strict mode does): a subset of what the schema allows, and an
 * automaton with no set of seen keys. No "properties" and no
 * "additionalProperties": false means any keys with any values. */
static int compile_object(cc *c, const json_t *s, const char *ptr, uint32_t idx) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, ptr, "properties", "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(c, ptr, "required", "'required' must be a list of strings");
    if (ap && !json_is_boolean(ap))
        return fail(c, ptr, "additionalProperties", "'additionalProperties' must be true or false (a schema is not supported)");
    if (!props && !json_is_false(ap) && !(req && json_array_size(req))) { c->g->nodes[idx].kind = JG_OBJECT, c->g->nodes[idx].free = 1; return 0; }
    jg_prop *list = malloc(LATENT_JSON_MAX_PROPS * sizeof *list);
    uint32_t n = 0, child;
    char pp[256], kp[256];
    if (!list) return oom(c, ptr);
    ptr_join(pp, sizeof pp, ptr, "properties");
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach(props, k, v) {
        ptr_join(kp, sizeof kp, pp, k);
        if ((rc = compile(c, v, kp, &child)) || (rc = add_prop(c, list, &n, k, child, req && required_has(req, k), ptr))) break;
    }
    for (size_t i = 0; !rc && req && i < json_array_size(req); i++) {
        json_t *e = json_array_get(req, i);
        if (!json_is_string(e)) rc = fail(c, ptr, "required", "'required' must be a list of strings");
        else if (props && json_object_get(props, json_string_value(e))) continue;
        else if (json_is_false(ap))
            rc = fail(c, ptr, "required", "required property '%s' is not in 'properties' and additionalProperties is false", json_string_value(e));
        else rc = add_prop(c, list, &n, json_string_value(e), c->g->any, 1, ptr); /* required, unconstrained */
    }
    for (uint32_t i = n, next = n; !rc && i-- > 0;) {
        if (list[i].required) next = i;
        list[i].next_req = next;
    }
    uint32_t first = 0;
    if (!rc && latent_jg_add_props(c->g, list, n, &first)) rc = oom(c, ptr);
    free(list);
    if (rc) return -1;
    jg_node *nd = &c->g->nodes[idx];
    nd->kind = JG_OBJECT, nd->first = first, nd->n = n;
    return 0;
}

static int compile_array(cc *c, const json_t *s, const char *ptr, uint32_t idx) {
    json_t *items = json_object_get(s, "items");
    uint32_t child = c->g->any, mn = 0, mx = UINT32_MAX;
    char p[256];
    if (items && json_is_array(items)) return fail(c, ptr, "items", "'items' as a list (tuples) is not supported");
    if (get_count(c, s, "minItems", ptr, &mn) || get_count(c, s, "maxItems", ptr, &mx)) return -1;
    if (mn > mx) return fail(c, ptr, "minItems", "minItems %u is above maxItems %u", mn, mx);
    ptr_join(p, sizeof p, ptr, "items");
    if (items && compile(c, items, p, &child)) return -1;
    jg_node *nd = &c->g->nodes[idx];
    nd->kind = JG_ARRAY, nd->child = child, nd->min = mn, nd->max = mx;
    return 0;
}

/* One node for one type. */
static int compile_type(cc *c, const json_t *s, const char *ptr, int type, uint32_t idx) {
    jg_node *nd = &c->g->nodes[idx];
    uint32_t mn = 0, mx = UINT32_MAX;
    switch (type) {
    case T_OBJECT: return compile_object(c, s, ptr, idx);
    case T_ARRAY: return compile_array(c, s, ptr, idx);
    case T_STRING:
        if (get_count(c, s, "minLength", ptr, &mn) || get_count(c, s, "maxLength", ptr, &mx)) return -1;
        if (mn > mx) return fail(c, ptr, "minLength", "minLength %u is above maxLength %u", mn, mx);
        nd = &c->g->nodes[idx];
        nd->kind = JG_STRING, nd->min = mn, nd->max = mx;
        return 0;
    case T_NUMBER: case T_INTEGER: nd->kind = JG_NUMBER, nd->integer = type == T_INTEGER; return 0;
    default: {
        json_t *v = type == T_NULL ? json_pack("[n]") : json_pack("[bb]", 0, 1);
        json_t *tmp = json_pack("{so}", "enum", v);
        int rc = tmp ? compile_literals(c, tmp, ptr, 0, idx) : oom(c, ptr);
        json_decref(tmp);
        return rc;
    }
    }
}

/* idx becomes "any JSON value" ({} or true). */
static int set_any(cc *c, const char *ptr, uint32_t idx) {
    uint32_t first;
    if (latent_jg_add_alts(c->g, &c->g->any, 1, &first)) return oom(c, ptr);
    c->g->nodes[idx].kind = JG_ANYOF, c->g->nodes[idx].first = first, c->g->nodes[idx].n = 1;
    return 0;
}

static int compile_into(cc *c, const json_t *s, const char *ptr, uint32_t idx) {
    if (json_is_true(s)) return set_any(c, ptr, idx);
    if (json_is_false(s)) return fail(c, ptr, "false", "the schema false accepts nothing");
    if (!json_is_object(s)) return fail(c, ptr, "", "a schema must be an object or a boolean");
    if (c->depth >= LATENT_JSON_MAX_DEPTH) return fail(c, ptr, "", "schemas nested deeper than %d", LATENT_JSON_MAX_DEPTH);
    if (check_keywords(c, s, ptr)) return -1;
    c->depth++;
    int types, rc;
    if (json_object_get(s, "$ref")) rc = compile_ref(c, s, ptr, idx);
    else if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) rc = compile_anyof(c, s, ptr, idx);
    else if ((rc = parse_types(c, s, ptr, &types))) ;
    else if (json_object_get(s, "enum") || json_object_get(s, "const")) rc = compile_literals(c, s, ptr, types, idx);
    else if (!types) rc = set_any(c, ptr, idx);
    else if (!(types & (types - 1))) rc = compile_type(c, s, ptr, types, idx);
    else {
        uint32_t kids[7], n = 0, first;
        for (int b = 1; b <= T_NULL && !rc; b <<= 1) {
            if (!(types & b)) continue;
            rc = latent_jg_add_node(c->g, JG_ANYOF, &kids[n]) ? oom(c, ptr) : compile_type(c, s, ptr, b, kids[n]);
            n++;
        }
        if (!rc && latent_jg_add_alts(c->g, kids, n, &first)) rc = oom(c, ptr);
        if (!rc) c->g->nodes[idx].kind = JG_ANYOF, c->g->nodes[idx].first = first, c->g->nodes[idx].n = n;
    }
    c->depth--;
    return rc;
}

static int compile(cc *c, const json_t *s, const char *ptr, uint32_t *out) {
    if (latent_jg_add_node(c->g, JG_ANYOF, out)) return oom(c, ptr);
    return compile_into(c, s, ptr, *out);
}

latent_json_grammar *latent_json_grammar_compile(const json_t *schema, latent_json_error *err) {
    memset(err, 0, sizeof *err);
    cc c = {.g = latent_jg_new(), .root = schema, .err = err};
    uint32_t value;
    if (!c.g) { oom(&c, ""); return NULL; }
    int rc = latent_jg_add_node(c.g, JG_ROOT, &c.g->root) ? oom(&c, "") : 0;
    if (!rc && !schema) { /* json_object: any object */
        rc = latent_jg_add_node(c.g, JG_OBJECT, &value) ? oom(&c, "") : 0;
        if (!rc) c.g->nodes[value].free = 1;
    } else if (!rc) {
        c.memo_s = malloc(16 * sizeof *c.memo_s), c.memo_n = malloc(16 * sizeof *c.memo_n), c.cap_memo = 16;
        if (!c.memo_s || !c.memo_n) rc = oom(&c, "");
        else if (latent_jg_add_node(c.g, JG_ANYOF, &value)) rc = oom(&c, "");
        else {
            c.memo_s[c.n_memo] = schema, c.memo_n[c.n_memo++] = value; /* "$ref": "#" */
            rc = compile_into(&c, schema, "", value);
        }
    }
    free(c.memo_s), free(c.memo_n);
    if (!rc) c.g->nodes[c.g->root].child = value;
    if (!rc && latent_jg_finish(c.g, err)) rc = -1;
    if (rc) {
        latent_json_grammar_free(c.g);
        return NULL;
    }
    return c.g;
}
