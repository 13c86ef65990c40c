/* Byte-level BPE tokenizer read from a Hugging Face tokenizer.json.
 *
 * Encoding runs the same stages as the `tokenizers` library:
 *   1. added tokens are cut out of the raw text (leftmost, then longest match),
 *   2. each remaining segment goes through the pre-tokenizer steps (Digits,
 *      ByteLevel's prefix space and GPT-2 regex; a Sequence is a list of steps),
 *   3. each resulting word is mapped byte-wise through GPT-2's byte-to-unicode
 *      table and merged by rank (lowest rank first, leftmost on ties).
 * The regex is matched by hand over Unicode classes from unicode_tables.c.
 * The tokenizer is immutable after load: encode/decode may run concurrently. */
#include "latent/tokenizer.h"

#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "unicode_tables.h"

#define MAX_STEPS 16
#define MAX_ID (1 << 24) /* ids above this are refused as a broken file */

enum { STEP_DIGITS, STEP_DIGITS_CONTIGUOUS, STEP_PREFIX_SPACE, STEP_GPT2_REGEX };

typedef struct added_token {
    char *content; /* owned, NUL-terminated */
    size_t len;
    int32_t id;
    unsigned char special, lstrip, rstrip, single_word;
} added_token;

struct latent_tokenizer {
    int n_vocab;                 /* max id + 1 over vocab and added tokens */
    /* model vocab strings (byte-level form) by id: vstr + voff[id] .. voff[id+1] */
    uint32_t *voff;              /* (n_vocab + 1) */
    char *vstr;
    int32_t *vmap;               /* open-addressing string -> id, -1 empty */
    uint32_t vmap_mask;
    /* decoded bytes by id: dbytes + doff[id] .. doff[id+1]; holes are empty */
    uint32_t *doff;              /* (n_vocab + 1) */
    char *dbytes;
    unsigned char *present;      /* (n_vocab) 1 if the id names a token */
    /* merges: (left id, right id) -> rank, merged id */
    uint64_t *mkey;              /* UINT64_MAX empty */
    uint32_t *mrank;
    int32_t *mnew;
    uint32_t mmask;
    int32_t byte_id[256];        /* id of each byte's single-character token, -1 if none */
    int32_t unk_id;
    int ignore_merges;
    int steps[MAX_STEPS];
    int n_steps;
    added_token *added;          /* sorted by first byte, then longest first */
    int n_added;
    int added_start[257];        /* added[added_start[b] .. added_start[b+1]) start with byte b */
};

/* ---- GPT-2 byte <-> unicode ------------------------------------------------ */

/* Bytes that are printable stay themselves; the other 68 go to U+0100.. in
 * byte order. Filled once, by the first load. */
static uint32_t b2u_table[256];
static int16_t u2b_table[256 + 68];
static pthread_once_t byte_tables_once = PTHREAD_ONCE_INIT;

static void byte_tables_fill(void) {
    int n = 0;
    for (int i = 0; i < 256 + 68; i++) u2b_table[i] = -1;
    for (int i = 0; i < 256; i++) {
        int keep = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF);
        b2u_table[i] = keep ? (uint32_t)i : (uint32_t)(256 + n++);
        u2b_table[b2u_table[i]] = (int16_t)i;
    }
}

static uint32_t byte_to_cp(int b) { return b2u_table[b]; }

/* Byte of a byte-level character, or -1 for any other code point. */
static int cp_to_byte(uint32_t cp) { return cp < 256 + 68 ? u2b_table[cp] : -1; }

static size_t utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | cp >> 6); o[1] = (unsigned char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12); o[1] = (unsigned char)(0x80 | (cp >> 6 & 63));
        o[2] = (unsigned char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18); o[1] = (unsigned char)(0x80 | (cp >> 12 & 63));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 63)); o[3] = (unsigned char)(0x80 | (cp & 63));
    return 4;
}

#define CP_INVALID 0xFFFFFFFFu

/* Decodes the character at s[i] (i < len): returns its byte length and sets
 * *cp, or returns 1 with *cp = CP_INVALID for a byte that does not start a
 * well-formed sequence (overlong, surrogate, > U+10FFFF, truncated). */
static size_t utf8_next(const unsigned char *s, size_t len, size_t i, uint32_t *cp) {
    unsigned c = s[i];
    if (c < 0x80) { *cp = c; return 1; }
    size_t n;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; v = c & 0x07; min = 0x10000; }
    else { *cp = CP_INVALID; return 1; }
    if (i + n > len) { *cp = CP_INVALID; return 1; }
    for (size_t k = 1; k < n; k++) {
        unsigned d = s[i + k];
        if ((d & 0xC0) != 0x80) { *cp = CP_INVALID; return 1; }
        v = v << 6 | (d & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) { *cp = CP_INVALID; return 1; }
    *cp = v;
    return n;
}

/* ---- Unicode classes ---------------------------------------------------------- */

enum { C_OTHER, C_LETTER, C_NUMBER, C_SPACE };

static int in_ranges(const latent_unicode_range *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo) hi = mid;
        else if (cp > r[mid].hi) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* \s: the Unicode White_Space property (Oniguruma's and Rust regex's \s). */
static int is_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

static int uclass(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return C_LETTER;
        if (cp >= '0' && cp <= '9') return C_NUMBER;
        return is_space(cp) ? C_SPACE : C_OTHER;
    }
    if (cp == CP_INVALID) return C_OTHER; /* a stray byte counts as punctuation-like */
    if (is_space(cp)) return C_SPACE;
    if (in_ranges(latent_unicode_letters, latent_unicode_letters_len, cp)) return C_LETTER;
    if (in_ranges(latent_unicode_numbers, latent_unicode_numbers_len, cp)) return C_NUMBER;
    return C_OTHER;
}

static int class_at(const unsigned char *s, size_t len, size_t i, size_t *clen) {
    uint32_t cp;
    *clen = utf8_next(s, len, i, &cp);
    return uclass(cp);
}

/* Length in bytes of the GPT-2 regex match that starts at s[i], i < len:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * The alternatives are tried in order, as a backtracking engine does; every
 * character belongs to exactly one of L, N, \s, other, so something matches. */
static size_t gpt2_match(const unsigned char *s, size_t len, size_t i) {
    if (s[i] == '\'' && i + 1 < len) {
        unsigned c = s[i + 1];
        if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
        if (i + 2 < len && ((c == 'r' && s[i + 2] == 'e') || (c == 'v' && s[i + 2] == 'e') ||
                            (c == 'l' && s[i + 2] == 'l')))
            return 3;
    }
    size_t n;
    int cls = class_at(s, len, i, &n);
    size_t j = i;
    if (s[i] == ' ' && i + 1 < len) { /* " ?X+": a space may lead a run of L, N or other */
        size_t n2;
        int c2 = class_at(s, len, i + 1, &n2);
        if (c2 != C_SPACE) { cls = c2; j = i + 1; }
    }
    if (cls != C_SPACE) { /* the run of one class */
        size_t k = j;
        while (k < len) {
            size_t m;
            if (class_at(s, len, k, &m) != cls) break;
            k += m;
        }
        return k - i;
    }
    /* Whitespace: \s+(?!\S) keeps the run but its last character when a
     * non-space follows (so " word" stays together); a lone one is \s+. */
    size_t k = i, last = i;
    while (k < len) {
        size_t m;
        if (class_at(s, len, k, &m) != C_SPACE) break;
        last = k;
        k += m;
    }
    if (k == len || last == i) return k - i;
    return last - i;
}

/* ---- hash maps ------------------------------------------------------------------ */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t hash_u64(uint64_t x) { /* splitmix64 finalizer */
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint32_t table_size(size_t n) { /* power of two, load <= 1/2 */
    uint32_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

/* Model-vocab id of the byte-level string s[0..n), or -1. */
static int32_t vocab_find(const latent_tokenizer *t, const char *s, size_t n) {
    if (!t->vmap) return -1;
    for (uint32_t h = (uint32_t)hash_bytes(s, n) & t->vmap_mask;; h = (h + 1) & t->vmap_mask) {
        int32_t id = t->vmap[h];
        if (id < 0) return -1;
        uint32_t a = t->voff[id], b = t->voff[id + 1];
        if (b - a == n && memcmp(t->vstr + a, s, n) == 0) return id;
    }
}

static int merge_find(const latent_tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    if (!t->mkey) return 0;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t h = (uint32_t)hash_u64(key) & t->mmask;; h = (h + 1) & t->mmask) {
        if (t->mkey[h] == UINT64_MAX) return 0;
        if (t->mkey[h] == key) { *rank = t->mrank[h]; *new_id = t->mnew[h]; return 1; }
    }
}

/* ---- loading ---------------------------------------------------------------------- */

void latent_tokenizer_free(latent_tokenizer *t) {
    if (!t) return;
    free(t->voff); free(t->vstr); free(t->vmap);
    free(t->doff); free(t->dbytes); free(t->present);
    free(t->mkey); free(t->mrank); free(t->mnew);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    free(t);
}

static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_step(latent_tokenizer *t, int step, const char *path, latent_err *err) {
    if (t->n_steps == MAX_STEPS)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: pre_tokenizer has more than %d steps", path, MAX_STEPS);
    t->steps[t->n_steps++] = step;
    return 0;
}

static int bool_field(json_t *o, const char *key, int dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* Appends the steps of a pre_tokenizer node; *byte_level is set when a
 * ByteLevel node is seen. */
static int parse_pretok(latent_tokenizer *t, json_t *node, const char *path, int *byte_level,
                        latent_err *err) {
    const char *type = json_string_value(json_object_get(node, "type"));
    if (!json_is_object(node) || !type)
        return latent_err_set(err, LATENT_E_FORMAT, "%s: pre_tokenizer entry has no \"type\"", path);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(node, "pretokenizers");
        if (!json_is_array(list))
            return latent_err_set(err, LATENT_E_FORMAT, "%s: pre_tokenizer Sequence has no \"pretokenizers\" array", path);
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            if (parse_pretok(t, v, path, byte_level, err)) return -1;
        }
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) {
        *byte_level = 1;
        if (bool_field(node, "add_prefix_space", 1) && add_step(t, STEP_PREFIX_SPACE, path, err)) return -1;
        if (bool_field(node, "use_regex", 1) && add_step(t, STEP_GPT2_REGEX, path, err)) return -1;
        return 0;
    }
    if (!strcmp(type, "Digits"))
        return add_step(t, bool_field(node, "individual_digits", 0) ? STEP_DIGITS : STEP_DIGITS_CONTIGUOUS,
                        path, err);
    if (!strcmp(type, "Split")) {
        /* Only the GPT-2 pattern itself, isolated: what ByteLevel(use_regex) does. */
        const char *re = json_string_value(json_object_get(json_object_get(node, "pattern"), "Regex"));
        const char *behavior = json_string_value(json_object_get(node, "behavior"));
        if (re && !strcmp(re, gpt2_pattern) && behavior && !strcmp(behavior, "Isolated") &&
            !bool_field(node, "invert", 0))
            return add_step(t, STEP_GPT2_REGEX, path, err);
        return latent_err_set(err, LATENT_E_UNSUPPORTED, "%s: pre_tokenizer Split with pattern %s is not supported "
                              "(only the GPT-2 regex, behavior Isolated)", path, re ? re : "(not a regex)");
    }
    return latent_err_set(err, LATENT_E_UNSUPPORTED, "%s: pre_tokenizer type \"%s\" is not supported "
                          "(supported: ByteLevel, Digits, Sequence of them)", path, type);
}

static int cmp_added(const void *pa, const void *pb) {
    const added_token *a = pa, *b = pb;
    unsigned char ca = (unsigned char)a->content[0], cb = (unsigned char)b->content[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1; /* longest first */
    return strcmp(a->content, b->content);
}

/* Token string as HF's ByteLevel decoder turns it into bytes: every character
 * mapped back to its byte, or, if any character is not a byte-level one, the
 * string's own UTF-8. Writes at most strlen(s) bytes; returns the count. */
static size_t bytelevel_decode(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t m = utf8_next((const unsigned char *)s, n, i, &cp);
        int b = cp == CP_INVALID ? -1 : cp_to_byte(cp);
        if (b < 0) { memcpy(out, s, n); return n; }
        out[o++] = (char)b;
        i += m;
    }
    return o;
}

/* Checks the ids of the vocab and of the added tokens: *max_id the largest,
 * *total the bytes of all their strings. 0, or -1 with err set. */
static int vocab_count(json_t *vocab, json_t *added, const char *path, long *max_id, size_t *total, latent_err *err) {
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= MAX_ID)
            return latent_err_set(err, LATENT_E_FORMAT, "%s: model.vocab[\"%s\"] is not an id in [0, %d)", path, key, MAX_ID);
        if (json_integer_value(v) > *max_id) *max_id = (long)json_integer_value(v);
        *total += strlen(key);
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= MAX_ID ||
            !json_is_string(json_object_get(v, "content")) ||
            json_string_length(json_object_get(v, "content")) == 0)
            return latent_err_set(err, LATENT_E_FORMAT, "%s: added_tokens[%zu] needs an \"id\" in [0, %d) and a non-empty "
                                  "\"content\"", path, i, MAX_ID);
        if (json_integer_value(id) > *max_id) *max_id = (long)json_integer_value(id);
        *total += json_string_length(json_object_get(v, "content"));
    }
    if (*max_id < 0) return latent_err_set(err, LATENT_E_FORMAT, "%s: model.vocab is empty", path);
    return 0;
}

/* The model vocab's strings: by_id[id] (n, zeroed) each id's key, t->vstr
 * the strings in id order, t->vmap the string -> id map. 0, or -1 with err
 * set when two keys share an id. */
static int vocab_strings(latent_tokenizer *t, json_t *vocab, const char **by_id, const char *path, latent_err *err) {
    const int n = t->n_vocab;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if (by_id[id])
            return latent_err_set(err, LATENT_E_FORMAT, "%s: model.vocab gives id %d to both \"%s\" and \"%s\"", path, id,
                                  by_id[id], key);
        by_id[id] = key;
    }
    uint32_t off = 0;
    for (int id = 0; id < n; id++) {
        t->voff[id] = off;
        if (by_id[id]) {
            size_t l = strlen(by_id[id]);
            memcpy(t->vstr + off, by_id[id], l);
            off += (uint32_t)l;
        }
    }
    t->voff[n] = off;
    memset(t->vmap, 0xff, ((size_t)t->vmap_mask + 1) * sizeof *t->vmap);
    for (int id = 0; id < n; id++) {
        if (!by_id[id]) continue;
        size_t l = t->voff[id + 1] - t->voff[id];
        uint32_t h = (uint32_t)hash_bytes(t->vstr + t->voff[id], l) & t->vmap_mask;
        while (t->vmap[h] >= 0) h = (h + 1) & t->vmap_mask;
        t->vmap[h] = id;
    }
    return 0;
}

/* The added tokens into t->added; each overrides the string its id decodes
 * from in content[] (as id_to_token does). 0, or -1 with err set. */
static int load_added(latent_tokenizer *t, json_t *added, const char **content, const char *path, latent_err *err) {
    size_t i;
    json_t *v;
    t->n_added = (int)json_array_size(added);
    t->added = calloc((size_t)t->n_added + 1, sizeof *t->added);
    if (!t->added) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
    json_array_foreach(added, i, v) {
        added_token *a = &t->added[i];
        json_t *c = json_object_get(v, "content");
        a->len = json_string_length(c);
        a->content = malloc(a->len + 1);
        if (!a->content) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path);
        memcpy(a->content, json_string_value(c), a->len + 1);
        if (strlen(a->content) != a->len)
            return latent_err_set(err, LATENT_E_FORMAT, "%s: added_tokens[%zu] content holds a NUL character", path, i);
        a->id = (int32_t)json_integer_value(json_object_get(v, "id"));
        a->special = (unsigned char)bool_field(v, "special", 0);
        a->lstrip = (unsigned char)bool_field(v, "lstrip", 0);
        a->rstrip = (unsigned char)bool_field(v, "rstrip", 0);
        a->single_word = (unsigned char)bool_field(v, "single_word", 0);
        content[a->id] = a->content;
    }
    return 0;
}

/* What encoding and decoding look up: every id's decoded bytes (from
 * content[id]), the added tokens sorted for matching (by first byte,
 * longest first), and the single-byte tokens every word starts from. */
static void index_tokens(latent_tokenizer *t, const char *const *content) {
    const int n = t->n_vocab;
    uint32_t off = 0;
    for (int id = 0; id < n; id++) {
        t->doff[id] = off;
        if (!content[id]) continue;
        t->present[id] = 1;
        off += (uint32_t)bytelevel_decode(content[id], strlen(content[id]), t->dbytes + off);
    }
    t->doff[n] = off;
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, cmp_added);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        t->added_start[b] = k;
        while (b < 256 && k < t->n_added && (unsigned char)t->added[k].content[0] == b) k++;
    }
    for (int b = 0; b < 256; b++) {
        char s[4];
        size_t l = utf8_put(byte_to_cp(b), s);
        t->byte_id[b] = vocab_find(t, s, l);
    }
}

static int load_vocab(latent_tokenizer *t, json_t *vocab, json_t *added, const char *path, latent_err *err) {
    long max_id = -1;
    size_t total = 0;
    if (vocab_count(vocab, added, path, &max_id, &total, err) != 0) return -1;
    int n = (int)max_id + 1;
    t->n_vocab = n;
    size_t n_vocab_keys = json_object_size(vocab);
    t->voff = calloc((size_t)n + 1, sizeof *t->voff);
    t->doff = calloc((size_t)n + 1, sizeof *t->doff);
    t->present = calloc((size_t)n, 1);
    t->vstr = malloc(total + 1);
    t->dbytes = malloc(total + 1);
    t->vmap_mask = table_size(n_vocab_keys) - 1;
    t->vmap = malloc(((size_t)t->vmap_mask + 1) * sizeof *t->vmap);
    const char **by_id = calloc((size_t)n, sizeof *by_id);
    if (!t->voff || !t->doff || !t->present || !t->vstr || !t->dbytes || !t->vmap || !by_id) {
        free(by_id);
        return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory for %d tokens", path, n);
    }
    /* by_id becomes the string each id decodes from: the vocab's, then the added tokens' */
    int rc = vocab_strings(t, vocab, by_id, path, err);
    if (rc == 0) rc = load_added(t, added, by_id, path, err);
    if (rc == 0) index_tokens(t, by_id);
    free(by_id);
    return rc;
}

/* One merge: the two token strings, from "a b" or ["a", "b"]. */
static int merge_parts(json_t *m, const char **a, size_t *la, const char **b, size_t *lb) {
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        const char *sp = strchr(s, ' ');
        if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ')) return -1;
        *a = s; *la = (size_t)(sp - s);
        *b = sp + 1; *lb = strlen(sp + 1);
        return 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0)); *la = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1)); *lb = json_string_length(json_array_get(m, 1));
        return 0;
    }
    return -1;
}

static int load_merges(latent_tokenizer *t, json_t *merges, const char *path, latent_err *err) {
    size_t n = json_array_size(merges);
    t->mmask = table_size(n) - 1;
    size_t cap = (size_t)t->mmask + 1;
    t->mkey = malloc(cap * sizeof *t->mkey);
    t->mrank = malloc(cap * sizeof *t->mrank);
    t->mnew = malloc(cap * sizeof *t->mnew);
    char *buf = NULL;
    size_t buf_cap = 0;
    if (!t->mkey || !t->mrank || !t->mnew) return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory for %zu merges", path, n);
    memset(t->mkey, 0xff, cap * sizeof *t->mkey);
    uint32_t rank = 0;
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        const char *a, *b;
        size_t la, lb;
        if (json_is_string(m) && !strncmp(json_string_value(m), "#version", 8)) continue;
        if (merge_parts(m, &a, &la, &b, &lb)) {
            free(buf);
            return latent_err_set(err, LATENT_E_FORMAT, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
        }
        if (la + lb > buf_cap) {
            char *nb = realloc(buf, buf_cap = 2 * (la + lb) + 16);
            if (!nb) { free(buf); return latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path); }
            buf = nb;
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        int32_t ia = vocab_find(t, a, la), ib = vocab_find(t, b, lb), inew = vocab_find(t, buf, la + lb);
        if (ia < 0 || ib < 0 || inew < 0) {
            const char *what = ia < 0 ? a : ib < 0 ? b : buf;
            int wl = (int)(ia < 0 ? la : ib < 0 ? lb : la + lb);
            latent_err_set(err, LATENT_E_FORMAT, "%s: model.merges[%zu]: token \"%.*s\" is not in model.vocab", path, i,
                           wl > 64 ? 64 : wl, what);
            free(buf);
            return -1;
        }
        /* a repeated pair keeps its last rank, as the HF builder's map does */
        uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
        uint32_t h = (uint32_t)hash_u64(key) & t->mmask;
        while (t->mkey[h] != UINT64_MAX && t->mkey[h] != key) h = (h + 1) & t->mmask;
        t->mkey[h] = key;
        t->mrank[h] = rank++;
        t->mnew[h] = inew;
    }
    free(buf);
    return 0;
}

latent_tokenizer *latent_tokenizer_load(const char *path, latent_err *err) {
    json_error_t jerr;
    pthread_once(&byte_tables_once, byte_tables_fill);
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        if (jerr.line < 0) /* could not open: jansson puts the reason in text */
            latent_err_set(err, LATENT_E_IO, "%s: cannot read tokenizer: %s", path, jerr.text);
        else
            latent_err_set(err, LATENT_E_FORMAT, "%s:%d:%d: invalid JSON in tokenizer file: %s", path, jerr.line, jerr.column,
                           jerr.text);
        return NULL;
    }
    latent_tokenizer *t = calloc(1, sizeof *t);
    if (!t) { json_decref(root); latent_err_set(err, LATENT_E_NOMEM, "%s: out of memory", path); return NULL; }
    t->unk_id = -1;
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    json_t *pre = json_object_get(root, "pre_tokenizer");
    json_t *norm = json_object_get(root, "normalizer");
    const char *type = json_string_value(json_object_get(model, "type"));
    const char *s;
    int byte_level = 0;
    if (!json_is_object(root) || !json_is_object(model)) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: not a tokenizer.json: no \"model\" object", path);
        goto fail;
    }
    if (type && strcmp(type, "BPE")) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: model.type is \"%s\"; only \"BPE\" is supported", path, type);
        goto fail;
    }
    if (!json_is_object(vocab) || !json_is_array(merges)) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: model needs a \"vocab\" object and a \"merges\" array", path);
        goto fail;
    }
    if (added && !json_is_null(added) && !json_is_array(added)) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: \"added_tokens\" is not an array", path);
        goto fail;
    }
    if (norm && !json_is_null(norm) &&
        !(json_is_array(json_object_get(norm, "normalizers")) &&
          json_array_size(json_object_get(norm, "normalizers")) == 0)) {
        s = json_string_value(json_object_get(norm, "type"));
        latent_err_set(err, LATENT_E_UNSUPPORTED, "%s: normalizer \"%s\" is not supported (byte-level BPE takes none)", path,
                       s ? s : "?");
        goto fail;
    }
    if ((s = json_string_value(json_object_get(model, "continuing_subword_prefix"))) && *s) {
        latent_err_set(err, LATENT_E_UNSUPPORTED, "%s: model.continuing_subword_prefix is not supported", path);
        goto fail;
    }
    if ((s = json_string_value(json_object_get(model, "end_of_word_suffix"))) && *s) {
        latent_err_set(err, LATENT_E_UNSUPPORTED, "%s: model.end_of_word_suffix is not supported", path);
        goto fail;
    }
    if (!pre || json_is_null(pre)) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: no pre_tokenizer; only byte-level BPE (ByteLevel pre_tokenizer) is supported",
                       path);
        goto fail;
    }
    if (parse_pretok(t, pre, path, &byte_level, err)) goto fail;
    if (!byte_level) {
        latent_err_set(err, LATENT_E_FORMAT, "%s: pre_tokenizer has no ByteLevel step; only byte-level BPE is supported", path);
        goto fail;
    }
    json_t *no_added = json_array();
    int rc = load_vocab(t, vocab, json_is_array(added) ? added : no_added, path, err);
    json_decref(no_added);
    if (rc || load_merges(t, merges, path, err)) goto fail;
    t->ignore_merges = bool_field(model, "ignore_merges", 0);
    if ((s = json_string_value(json_object_get(model, "unk_token")))) t->unk_id = vocab_find(t, s, strlen(s));
    json_decref(root);
    return t;
fail:
    json_decref(root);
    latent_tokenizer_free(t);
    return NULL;
}

int latent_tokenizer_vocab_size(const latent_tokenizer *t) { return t ? t->n_vocab : 0; }

int32_t latent_tokenizer_token_id(const latent_tokenizer *t, const char *content) {
    if (!t || !content) return -1;
    size_t n = strlen(content);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->added[i].content, content, n)) return t->added[i].id;
    return vocab_find(t, content, n);
}

/* ---- encoding ----------------------------------------------------------------------- */

typedef struct bpe_sym {
    int32_t id;
    int prev, next; /* linked list over the word; -1 at the ends */
    int len;        /* bytes covered; 0 once merged into its left neighbour */
} bpe_sym;

typedef struct bpe_merge {
    uint32_t rank;
    int pos;        /* left symbol */
    int32_t new_id;
} bpe_merge;

typedef struct enc_ctx {
    const latent_tokenizer *t;
    int32_t *out;
    int cap;
    size_t n;        /* ids produced so far (also past cap) */
    bpe_sym *sym;
    bpe_merge *heap;
    size_t sym_cap, heap_cap, heap_n;
    char *scratch;   /* prefix-space copies and ignore_merges lookups */
    size_t scratch_cap;
    int oom;
} enc_ctx;

static void emit(enc_ctx *c, int32_t id) {
    if (c->n < (size_t)c->cap) c->out[c->n] = id;
    c->n++;
}

static int heap_less(const bpe_merge *a, const bpe_merge *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(enc_ctx *c, uint32_t rank, int pos, int32_t new_id) {
    size_t i = c->heap_n++; /* capacity: at most one live entry per symbol plus pushes, see bpe_word */
    c->heap[i] = (bpe_merge){rank, pos, new_id};
    while (i > 0 && heap_less(&c->heap[i], &c->heap[(i - 1) / 2])) {
        bpe_merge tmp = c->heap[i];
        c->heap[i] = c->heap[(i - 1) / 2];
        c->heap[(i - 1) / 2] = tmp;
        i = (i - 1) / 2;
    }
}

static bpe_merge heap_pop(enc_ctx *c) {
    bpe_merge top = c->heap[0];
    c->heap[0] = c->heap[--c->heap_n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < c->heap_n && heap_less(&c->heap[l], &c->heap[m])) m = l;
        if (r < c->heap_n && heap_less(&c->heap[r], &c->heap[m])) m = r;
        if (m == i) break;
        bpe_merge tmp = c->heap[i];
        c->heap[i] = c->heap[m];
        c->heap[m] = tmp;
        i = m;
    }
    return top;
}

static int reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return -1;
    *p = np;
    *cap = nc;
    return 0;
}

/* BPE of one pre-tokenized word (raw bytes): its bytes become byte-level
 * symbols, then the lowest-ranked adjacent pair is merged until none is left
 * (ties: leftmost first), as tokenizers' Word::merge_all does. */
static void bpe_word(enc_ctx *c, const unsigned char *w, size_t len) {
    const latent_tokenizer *t = c->t;
    if (len == 0) return;
    if (t->ignore_merges) { /* a word that is a token is taken whole */
        if (reserve((void **)&c->scratch, &c->scratch_cap, 2 * len, 1)) { c->oom = 1; return; }
        size_t l = 0;
        for (size_t i = 0; i < len; i++) l += utf8_put(byte_to_cp(w[i]), c->scratch + l);
        int32_t id = vocab_find(t, c->scratch, l);
        if (id >= 0) { emit(c, id); return; }
    }
    if (reserve((void **)&c->sym, &c->sym_cap, len, sizeof *c->sym) ||
        reserve((void **)&c->heap, &c->heap_cap, 3 * len, sizeof *c->heap)) {
        c->oom = 1;
        return;
    }
    int n = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id < 0) id = t->unk_id;
        if (id < 0) continue; /* no token for this byte and no unk: dropped, as HF does */
        c->sym[n] = (bpe_sym){id, n - 1, n + 1, 1};
        n++;
    }
    if (n == 0) return;
    c->sym[n - 1].next = -1;
    c->heap_n = 0;
    uint32_t rank;
    int32_t new_id;
    for (int i = 0; i + 1 < n; i++)
        if (merge_find(t, c->sym[i].id, c->sym[i + 1].id, &rank, &new_id)) heap_push(c, rank, i, new_id);
    /* Each merge removes a symbol and pushes at most two entries: n-1 initial
     * + 2(n-1) pushes fit in the 3*len heap. */
    while (c->heap_n > 0) {
        bpe_merge top = heap_pop(c);
        bpe_sym *s = &c->sym[top.pos];
        if (s->len == 0 || s->next < 0) continue; /* merged away, or now last */
        bpe_sym *r = &c->sym[s->next];
        int32_t want;
        if (!merge_find(t, s->id, r->id, &rank, &want) || want != top.new_id) continue; /* stale */
        s->id = top.new_id;
        s->len += r->len;
        r->len = 0;
        s->next = r->next;
        if (s->next >= 0) c->sym[s->next].prev = top.pos;
        if (s->prev >= 0 && merge_find(t, c->sym[s->prev].id, s->id, &rank, &new_id))
            heap_push(c, rank, s->prev, new_id);
        if (s->next >= 0 && merge_find(t, s->id, c->sym[s->next].id, &rank, &new_id))
            heap_push(c, rank, top.pos, new_id);
    }
    for (int i = 0; i >= 0; i = c->sym[i].next) emit(c, c->sym[i].id);
}

/* Runs pre-tokenizer steps [step, n_steps) on one piece, then BPE on each word. */
static void pretokenize(enc_ctx *c, int step, const unsigned char *s, size_t len) {
    if (len == 0 || c->oom) return;
    if (step == c->t->n_steps) { bpe_word(c, s, len); return; }
    switch (c->t->steps[step]) {
    case STEP_PREFIX_SPACE: {
        if (s[0] == ' ') { pretokenize(c, step + 1, s, len); return; }
        unsigned char small[256];
        unsigned char *buf = len + 1 <= sizeof small ? small : malloc(len + 1);
        if (!buf) { c->oom = 1; return; }
        buf[0] = ' ';
        memcpy(buf + 1, s, len);
        pretokenize(c, step + 1, buf, len + 1);
        if (buf != small) free(buf);
        return;
    }
    case STEP_GPT2_REGEX:
        for (size_t i = 0; i < len;) {
            size_t m = gpt2_match(s, len, i);
            pretokenize(c, step + 1, s + i, m);
            i += m;
        }
        return;
    case STEP_DIGITS:
    case STEP_DIGITS_CONTIGUOUS: {
        /* numeric characters isolated one by one (individual_digits) or as
         * runs; the text between them stays one piece */
        int individual = c->t->steps[step] == STEP_DIGITS;
        size_t start = 0, i = 0;
        int start_num = 0;
        while (i < len) {
            size_t m;
            int num = class_at(s, len, i, &m) == C_NUMBER;
            if (i > start && (num != start_num || (num && individual))) {
                pretokenize(c, step + 1, s + start, i - start);
                start = i;
            }
            if (i == start) start_num = num;
            i += m;
        }
        pretokenize(c, step + 1, s + start, len - start);
        return;
    }
    }
}

static int space_before(const unsigned char *s, size_t lo, size_t *i) { /* whitespace char ending at *i? */
    size_t j = *i;
    if (j <= lo) return 0;
    do j--; while (j > lo && (s[j] & 0xC0) == 0x80);
    uint32_t cp;
    size_t m = utf8_next(s, *i, j, &cp);
    if (j + m != *i || !is_space(cp)) return 0;
    *i = j;
    return 1;
}

static int word_char(uint32_t cp) { /* \w, approximated by L, N and '_' */
    int k = uclass(cp);
    return k == C_LETTER || k == C_NUMBER || cp == '_';
}

int latent_tokenizer_encode(const latent_tokenizer *t, const char *text, size_t len, int32_t *out, int cap) {
    if (!t || (!text && len) || cap < 0 || (cap > 0 && !out)) return -1;
    if (len == 0) return 0;
    enc_ctx c = {.t = t, .out = out, .cap = cap};
    const unsigned char *s = (const unsigned char *)text;
    size_t seg = 0; /* start of the text not yet consumed */
    size_t pos = 0; /* where the search for the next added token resumes */
    while (pos < len && !c.oom) {
        /* leftmost position where an added token matches, longest there */
        const added_token *hit = NULL;
        size_t at = pos;
        for (; at < len && !hit; at++) {
            unsigned char b = s[at];
            for (int k = t->added_start[b]; k < t->added_start[b + 1]; k++) {
                const added_token *a = &t->added[k];
                if (a->len <= len - at && !memcmp(s + at, a->content, a->len)) { hit = a; break; }
            }
        }
        if (!hit) break;
        size_t start = at - 1, stop = start + hit->len;
        pos = stop;
        if (hit->single_word) {
            uint32_t cp;
            size_t j = start;
            int word_before = 0, word_after = 0;
            if (j > 0) {
                do j--; while (j > 0 && (s[j] & 0xC0) == 0x80);
                utf8_next(s, start, j, &cp);
                word_before = word_char(cp);
            }
            if (stop < len) {
                utf8_next(s, len, stop, &cp);
                word_after = word_char(cp);
            }
            if (word_before || word_after) continue; /* not a word of its own: left to BPE */
        }
        if (hit->lstrip) while (space_before(s, seg, &start)) {}
        if (hit->rstrip)
            while (stop < len) {
                uint32_t cp;
                size_t m = utf8_next(s, len, stop, &cp);
                if (!is_space(cp)) break;
                stop += m;
            }
        pretokenize(&c, 0, s + seg, start - seg);
        emit(&c, hit->id);
        seg = pos = stop;
    }
    if (!c.oom) pretokenize(&c, 0, s + seg, len - seg);
    free(c.sym);
    free(c.heap);
    free(c.scratch);
    if (c.oom || c.n > INT_MAX) return -1;
    return (int)c.n;
}

/* ---- decoding ------------------------------------------------------------------------- */

int latent_tokenizer_token_bytes(const latent_tokenizer *t, int32_t id, char *buf, size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    uint32_t a = t->doff[id], n = t->doff[id + 1] - a;
    memcpy(buf, t->dbytes + a, n < cap ? n : cap);
    return (int)n;
}

char *latent_tokenizer_decode(const latent_tokenizer *t, const int32_t *ids, int n, size_t *len_out) {
    if (!t || n < 0 || (n > 0 && !ids)) return NULL;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < t->n_vocab) total += t->doff[ids[i] + 1] - t->doff[ids[i]];
    char *out = malloc(total + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) continue; /* unknown ids decode to nothing */
        uint32_t a = t->doff[ids[i]], l = t->doff[ids[i] + 1] - a;
        memcpy(out + o, t->dbytes + a, l);
        o += l;
    }
    out[o] = 0;
    if (len_out) *len_out = o;
    return out;
}

/* ---- UTF-8 streaming -------------------------------------------------------------------- */

/* A byte-at-a-time decoder (the WHATWG one): pending holds a well-formed
 * prefix; a byte that cannot continue it releases U+FFFD for the prefix (the
 * "maximal subpart") and is then read afresh. */
static size_t put_fffd(char *out) {
    memcpy(out, "\xEF\xBF\xBD", 3);
    return 3;
}

static int seq_len(unsigned char b) { /* length announced by a lead byte, 0 if none */
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

size_t latent_utf8_stream_feed(latent_utf8_stream *s, const char *bytes, size_t len, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)bytes[i];
        if (s->n_pending > 0) {
            unsigned char lead = (unsigned char)s->pending[0];
            unsigned char lo = 0x80, hi = 0xBF;
            if (s->n_pending == 1) {
                if (lead == 0xE0) lo = 0xA0;
                else if (lead == 0xED) hi = 0x9F;
                else if (lead == 0xF0) lo = 0x90;
                else if (lead == 0xF4) hi = 0x8F;
            }
            if (b >= lo && b <= hi) {
                s->pending[s->n_pending++] = (char)b;
                if (s->n_pending == seq_len(lead)) {
                    memcpy(out + o, s->pending, (size_t)s->n_pending);
                    o += (size_t)s->n_pending;
                    s->n_pending = 0;
                }
                continue;
            }
            o += put_fffd(out + o); /* the prefix can never complete */
            s->n_pending = 0;
        }
        if (b < 0x80) out[o++] = (char)b;
        else if (seq_len(b)) s->pending[s->n_pending++] = (char)b;
        else o += put_fffd(out + o);
    }
    return o;
}

size_t latent_utf8_stream_flush(latent_utf8_stream *s, char *out) {
    if (s->n_pending == 0) return 0;
    s->n_pending = 0;
    return put_fffd(out);
}
