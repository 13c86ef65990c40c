/* Structured output: the JSON Schema subset compiles, everything outside it
 * is refused with its keyword and JSON pointer, the caps hold, the automaton
 * accepts valid documents and rejects invalid ones byte by byte, and the
 * token mask equals a brute-force check of every token (tokens crossing
 * boundaries such as `":` or `},{` included) along random constrained
 * generations, whose results parse as JSON.
 *
 * `test_json_schema --bench TOKENIZER_JSON [N]`: the mask's cost per token
 * for a 10-field object schema over that vocabulary (docs/benchmarks.md). */
#include <jansson.h>
#include <string.h>
#include <time.h>

#include "latent/json_schema.h"
#include "latent/rng.h"
#include "testutil.h"

static latent_json_grammar *compile_text(const char *schema, latent_json_error *err) {
    json_error_t je;
    json_t *s = schema ? json_loads(schema, JSON_DECODE_ANY, &je) : NULL;
    if (schema && !s) { fprintf(stderr, "bad test schema: %s\n", je.text); exit(2); }
    latent_json_grammar *g = latent_json_grammar_compile(s, err);
    json_decref(s);
    return g;
}

static void expect_error(const char *schema, const char *keyword, const char *pointer) {
    latent_json_error err;
    latent_json_grammar *g = compile_text(schema, &err);
    CHECK(!g, "compiled, expected a refusal: %s", schema);
    CHECK(!strcmp(err.keyword, keyword), "keyword '%s', expected '%s' (%s)", err.keyword, keyword, err.msg);
    CHECK(!strcmp(err.pointer, pointer), "pointer '%s', expected '%s' (%s)", err.pointer, pointer, err.msg);
    latent_json_grammar_free(g);
}

/* 1 when the whole text is a complete document of the schema. */
static int accepts(const char *schema, const char *doc) {
    latent_json_error err;
    latent_json_grammar *g = compile_text(schema, &err);
    if (!g) { fprintf(stderr, "%s: %s at '%s'\n", schema, err.msg, err.pointer); return -1; }
    latent_json_guard *jg = latent_json_guard_new(g, NULL, NULL, 0);
    latent_json_status st = latent_json_guard_feed(jg, doc, strlen(doc));
    int ok = st != LATENT_JSON_REJECT && latent_json_guard_complete(jg);
    latent_json_guard_free(jg), latent_json_grammar_free(g);
    return ok;
}

static const char *PERSON =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",1,null]},\"maxItems\":3},"
    "\"kind\":{\"const\":\"x\"},\"ok\":{\"type\":[\"boolean\",\"null\"]},\"score\":{\"type\":\"number\"}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";

static const char *TREE =
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
    "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"],\"additionalProperties\":false}},"
    "\"$ref\":\"#/$defs/node\"}";

static void test_documents(void) {
    CHECK(accepts(PERSON, "{\"name\":\"ab\",\"age\":3}") == 1, "minimal person");
    CHECK(accepts(PERSON, "{ \"name\": \"ab\", \"age\": -30, \"tags\": [\"a\", 1, null], \"kind\": \"x\", \"ok\": null, \"score\": 1.5e3}") == 1, "full person");
    CHECK(accepts(PERSON, "{\"age\":3,\"name\":\"ab\"}") == 0, "keys out of the schema's order");
    CHECK(accepts(PERSON, "{\"name\":\"\",\"age\":3}") == 0, "minLength");
    CHECK(accepts(PERSON, "{\"name\":\"123456789\",\"age\":3}") == 0, "maxLength");
    CHECK(accepts(PERSON, "{\"name\":\"ab\",\"age\":3.5}") == 0, "integer");
    CHECK(accepts(PERSON, "{\"name\":\"ab\"}") == 0, "required age");
    CHECK(accepts(PERSON, "{\"name\":\"ab\",\"age\":3,\"tags\":[\"a\",\"a\",\"a\",\"a\"]}") == 0, "maxItems");
    CHECK(accepts(PERSON, "{\"name\":\"ab\",\"age\":3,\"tags\":[\"c\"]}") == 0, "enum");
    CHECK(accepts(PERSON, "{\"name\":\"ab\",\"age\":3,\"extra\":1}") == 0, "additionalProperties false");
    CHECK(accepts(PERSON, "{\"name\":\"\xc3\xa9t\xe2\x82\xac\",\"age\":3}") == 1, "UTF-8 counts characters");
    CHECK(accepts(PERSON, "{\"name\":\"\xc3\",\"age\":3}") == 0, "broken UTF-8");
    CHECK(accepts(TREE, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}") == 1, "recursive $ref");
    CHECK(accepts(TREE, "{\"kids\":[]}") == 0, "recursive required");
    CHECK(accepts(NULL, "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}") == 1, "json_object");
    CHECK(accepts(NULL, "[1]") == 0, "json_object is an object");
    CHECK(accepts("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
                  "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]}]}",
                  "{\"a\":\"s\"}") == 1, "anyOf decided late");
    CHECK(accepts("{\"type\":\"number\"}", "12") == 1, "a number at the top");
    CHECK(accepts("{\"type\":\"number\"}", "012") == 0, "leading zero");
    CHECK(accepts("{\"enum\":[\"red\",\"reddish\",12]}", "\"reddish\"") == 1, "enum prefixes");
}

static void test_refusals(void) {
    expect_error("{\"type\":\"object\",\"properties\":{\"a/b\":{\"type\":\"string\",\"pattern\":\"x\"}}}", "pattern", "/properties/a~1b");
    expect_error("{\"type\":\"integer\",\"minimum\":0}", "minimum", "");
    expect_error("{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"format\":\"date\"}}]}", "format", "/anyOf/1/items");
    expect_error("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", "additionalProperties", "");
    expect_error("{\"$ref\":\"#/$defs/missing\"}", "$ref", "");
    expect_error("{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "minLength", "");
    expect_error("{\"type\":\"strin\"}", "type", "");
    expect_error("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "", ""); /* accepts nothing */
    expect_error("{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}", "$ref", "");
    expect_error("{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#\"}},\"required\":[\"x\"]}", "", "");
    /* caps: a 10^5-entry enum, deep nesting, a wide anyOf of anyOfs */
    json_t *big = json_array();
    for (int i = 0; i < 100000; i++) json_array_append_new(big, json_integer(i));
    json_t *s = json_pack("{so}", "enum", big);
    latent_json_error err;
    clock_t t0 = clock();
    CHECK(!latent_json_grammar_compile(s, &err) && !strcmp(err.keyword, "enum"), "10^5 enum: %s", err.msg);
    CHECK((double)(clock() - t0) / CLOCKS_PER_SEC < 1.0, "the enum cap is quick");
    json_decref(s);
    char deep[4096] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 100; i++) strcat(deep, "}");
    latent_json_grammar *g = compile_text(deep, &err);
    CHECK(!g && strstr(err.msg, "deeper"), "deep nesting: %s", err.msg);
    char wide[8192] = "{\"anyOf\":[";
    for (int i = 0; i < 40; i++) strcat(wide, i ? ",{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"string\",\"maxLength\":1}]}" : "{\"type\":\"null\"}");
    strcat(wide, "]}");
    g = compile_text(wide, &err);
    CHECK(!g && !strcmp(err.keyword, "anyOf"), "anyOf expanding past the cap: %s", err.msg);
}

/* ---- masks over a small byte-level vocabulary ---- */

static void byte_char(int b, char *out) { /* GPT-2's bytes_to_unicode */
    int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF), cp = b;
    if (!keep) {
        int n = 0;
        for (int i = 0; i < b; i++) n += !((i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF));
        cp = 256 + n;
    }
    if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
    else out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63)), out[2] = 0;
}

/* Tokens that cross JSON's boundaries, and a partial UTF-8 character. */
static const char *EXTRA[] = {"\":", "\":\"", "},{", "{\"", "\"}", "\",", "\", \"", "name", "age", "12", "true", "null",
                              " \"", "\xc3\xa9", "\xe2\x82", "\"x\"", "[]", "]}", "\": [", "ab", "tags", "\":1,\"", "}]", NULL};
#define EOS_ID 400

static latent_tokenizer *small_tokenizer(void) {
    json_t *vocab = json_object();
    char s[8], tok[64];
    for (int b = 0; b < 256; b++) byte_char(b, s), json_object_set_new(vocab, s, json_integer(b));
    for (int i = 0; EXTRA[i]; i++) {
        tok[0] = 0;
        for (const char *p = EXTRA[i]; *p; p++) byte_char((uint8_t)*p, s), strcat(tok, s);
        json_object_set_new(vocab, tok, json_integer(256 + i));
    }
    json_t *root = json_pack("{s:s, s:[{s:i, s:s, s:b}], s:n, s:{s:s, s:b}, s:{s:s, s:o, s:[]}, s:{s:s}}", "version", "1.0",
                             "added_tokens", "id", EOS_ID, "content", "<|endoftext|>", "special", 1, "normalizer",
                             "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "model", "type", "BPE", "vocab",
                             vocab, "merges", "decoder", "type", "ByteLevel");
    const char *path = "/tmp/test_json_schema_tokenizer.json";
    if (!root || json_dump_file(root, path, 0)) { fprintf(stderr, "cannot write %s\n", path); exit(1); }
    json_decref(root);
    latent_err err = {0};
    latent_tokenizer *t = latent_tokenizer_load(path, &err);
    if (!t) { fprintf(stderr, "tokenizer: %s\n", err.msg); exit(1); }
    remove(path);
    return t;
}

/* Random constrained generations; the mask must equal accepting each token
 * on a fresh replay, and every finished document must parse. */
static void test_masks(const latent_tokenizer *tok, const char *schema, int runs, int brute_steps) {
    latent_json_vocab *v = latent_json_vocab_new(tok);
    latent_json_error err;
    latent_json_grammar *g = compile_text(schema, &err);
    int V = latent_tokenizer_vocab_size(tok), eos = EOS_ID, crossed = 0;
    CHECK(v && g, "vocab and grammar: %s", err.msg);
    if (!v || !g) return;
    latent_rng rng;
    latent_rng_seed(&rng, 7);
    for (int r = 0; r < runs; r++) {
        latent_json_guard *jg = latent_json_guard_new(g, v, &eos, 1);
        char doc[4096];
        size_t len = 0;
        latent_json_status st = LATENT_JSON_MORE;
        for (int step = 0; step < 300 && st == LATENT_JSON_MORE; step++) {
            const uint64_t *bits = latent_json_guard_allowed(jg);
            int allowed[1024], n = 0;
            for (int t = 0; t < V && n < 1024; t++)
                if (bits[t / 64] >> (t % 64) & 1) allowed[n++] = t;
            CHECK(n > 0, "no token allowed after '%.*s'", (int)len, doc);
            if (!n) break;
            for (int t = 0; step < brute_steps && t < V; t++) { /* brute force: replay, then the token */
                latent_json_guard *b = latent_json_guard_new(g, v, &eos, 1);
                int ok = (len == 0 || latent_json_guard_feed(b, doc, len) != LATENT_JSON_REJECT) &&
                         latent_json_guard_accept(b, t) != LATENT_JSON_REJECT;
                CHECK(ok == (int)(bits[t / 64] >> (t % 64) & 1), "token %d after '%.*s': mask %d, replay %d", t, (int)len, doc,
                      (int)(bits[t / 64] >> (t % 64) & 1), ok);
                latent_json_guard_free(b);
            }
            int t = allowed[(int)(latent_rng_uniform(&rng) * n)];
            st = latent_json_guard_accept(jg, t);
            CHECK(st != LATENT_JSON_REJECT, "allowed token %d rejected", t);
            if (t == eos) break;
            char b[64];
            int k = latent_tokenizer_token_bytes(tok, t, b, sizeof b);
            if (k > 1 && memchr(b, '"', k) && k > 1) crossed++;
            if (len + k < sizeof doc) memcpy(doc + len, b, k), len += k;
        }
        if (st == LATENT_JSON_DONE) {
            json_error_t je;
            json_t *d = json_loadb(doc, len, JSON_DECODE_ANY, &je);
            CHECK(d != NULL, "generated '%.*s' does not parse: %s", (int)len, doc, je.text);
            json_decref(d);
        }
        latent_json_guard_free(jg);
    }
    CHECK(crossed > 0, "some accepted token crossed a string boundary");
    latent_json_grammar_free(g), latent_json_vocab_free(v);
}

static const char *ten_fields(void) {
    return "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"name\":{\"type\":\"string\"},"
           "\"email\":{\"type\":\"string\",\"maxLength\":40},\"age\":{\"type\":\"integer\"},\"score\":{\"type\":\"number\"},"
           "\"active\":{\"type\":\"boolean\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":4},"
           "\"role\":{\"enum\":[\"admin\",\"user\",\"guest\"]},\"note\":{\"type\":[\"string\",\"null\"]},"
           "\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\"}},"
           "\"required\":[\"city\"],\"additionalProperties\":false}},"
           "\"required\":[\"id\",\"name\",\"email\",\"age\",\"score\",\"active\",\"tags\",\"role\",\"note\",\"address\"],"
           "\"additionalProperties\":false}";
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Per-token cost of the mask along constrained generations. The draw is
 * random among the allowed tokens, half the time among those that are not
 * plain string text, so documents finish and every structural position
 * (keys, numbers, enums, nesting) is reached, not just the string fast path. */
static int bench(const char *path, int docs) {
    latent_err e = {0};
    latent_tokenizer *tok = latent_tokenizer_load(path, &e);
    if (!tok) { fprintf(stderr, "%s: %s\n", path, e.msg); return 1; }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    latent_json_vocab *v = latent_json_vocab_new(tok);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double t_vocab = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9;
    latent_json_error err;
    latent_json_grammar *g = compile_text(ten_fields(), &err);
    int V = latent_tokenizer_vocab_size(tok), eos = -1, finished = 0, *pick = malloc(V * sizeof *pick);
    float *logits = malloc(V * sizeof *logits);
    double *times = malloc((size_t)docs * 400 * sizeof *times), total = 0;
    latent_rng rng;
    latent_rng_seed(&rng, 1);
    long steps = 0;
    for (int d = 0; d < docs; d++) {
        latent_json_guard *jg = latent_json_guard_new(g, v, &eos, 0);
        for (int s = 0; s < 400; s++) {
            for (int i = 0; i < V; i++) logits[i] = 0;
            clock_gettime(CLOCK_MONOTONIC, &a);
            int n = latent_json_guard_mask(jg, logits, V);
            clock_gettime(CLOCK_MONOTONIC, &b);
            times[steps] = (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9, total += times[steps++];
            if (!n) break;
            int m = 0, structural = latent_rng_uniform(&rng) < 0.5;
            for (int t = 0; t < V; t++) {
                if (logits[t] == -INFINITY) continue;
                char buf[64];
                int k = latent_tokenizer_token_bytes(tok, t, buf, sizeof buf);
                if (!structural || (k > 0 && k <= 64 && strpbrk((buf[k < 64 ? k : 63] = 0, buf), "\"{}[],:0123456789")))
                    pick[m++] = t;
            }
            if (!m) for (int t = 0; t < V; t++) if (logits[t] != -INFINITY) pick[m++] = t;
            latent_json_status st = latent_json_guard_accept(jg, pick[(int)(latent_rng_uniform(&rng) * m)]);
            if (st == LATENT_JSON_DONE) finished++;
            if (st != LATENT_JSON_MORE) break;
        }
        latent_json_guard_free(jg);
    }
    qsort(times, steps, sizeof *times, cmp_double);
    printf("vocab %d: tables built in %.1f ms; 10-field object schema: %ld masked steps, %d of %d documents complete; "
           "per token per sequence: mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us\n", V, t_vocab * 1e3, steps, finished,
           docs, total / steps * 1e6, times[steps / 2] * 1e6, times[steps * 99 / 100] * 1e6, times[steps - 1] * 1e6);
    free(logits), free(pick), free(times);
    latent_json_grammar_free(g), latent_json_vocab_free(v), latent_tokenizer_free(tok);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "--bench")) return bench(argv[2], argc > 3 ? atoi(argv[3]) : 20);
    test_documents();
    test_refusals();
    latent_tokenizer *tok = small_tokenizer();
    test_masks(tok, PERSON, 30, 40);
    test_masks(tok, TREE, 20, 30);
    test_masks(tok, NULL, 20, 30);
    test_masks(tok, ten_fields(), 10, 20);
    latent_tokenizer_free(tok);
    return tu_finish("test_json_schema");
}
