/* Token masks for structured output: per vocabulary, a trie of the tokens'
 * bytes in preorder and the tokens that are plain string text; per
 * sequence, the automaton's state and the walk that finds which tokens can
 * come next.
 *
 * The walk visits the trie depth-first, feeding each node's byte to the
 * state of its parent, and skips a whole subtree as soon as no alternative
 * survives: structural positions (after '{', ',', ':') keep a few hundred
 * nodes. Inside a string almost every token survives, so there the mask is
 * precomputed: tokens of plain text (no '"', '\\' or control byte, whole
 * UTF-8 characters) are allowed by a bitset chosen by how many characters
 * the string may still take, and only the other tokens are walked. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json_grammar.h"

#define TOK_MAX_BYTES 64      /* longer tokens are never allowed under a mask */
#define PLAIN_MAX_CPS 32      /* plain tokens of more characters are walked */
#define ARENA_LINKS 4096

typedef struct tm_node { uint8_t byte, depth; uint32_t skip; int32_t tok; } tm_node;
typedef struct tm_special { int32_t tok; uint16_t prefix, cps; } tm_special;

struct latent_json_vocab {
    int n_vocab, words;
    char *bytes; uint32_t *off; uint8_t *len; /* each token's bytes (len 0: never allowed) */
    int32_t *same;            /* next token with the same bytes, -1 */
    tm_node *trie; uint32_t n_trie;
    uint64_t *plain;          /* (PLAIN_MAX_CPS + 1, words): plain tokens of at most c characters */
    tm_special *special; uint32_t n_special; /* the other allowed tokens: plain prefix length, its characters */
};

struct latent_json_guard {
    latent_json_grammar *g;
    const latent_json_vocab *v;
    int32_t eos[8]; int n_eos;
    jp_alt cur[JP_MAX_ALTS]; int n_cur;
    jp_arena committed, spare, scratch;
    uint64_t *bits;
    jp_alt walk[TOK_MAX_BYTES + 1][JP_MAX_ALTS];
    int n_walk[TOK_MAX_BYTES + 1];
    uint32_t mark[TOK_MAX_BYTES + 1];
};

/* Length of the longest prefix of whole plain UTF-8 characters; *cps its characters. */
static size_t plain_prefix(const uint8_t *p, size_t n, uint32_t *cps) {
    size_t i = 0;
    *cps = 0;
    while (i < n) {
        uint8_t c = p[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || c < 0x20 || c == '"' || c == '\\' || i + k > n) break;
        size_t j = 1;
        for (; j < k; j++) {
            uint8_t d = p[i + j], lo = 0x80, hi = 0xBF;
            if (j == 1) lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
            if (d < lo || d > hi) break;
        }
        if (j < k) break;
        i += k, (*cps)++;
    }
    return i;
}

static const latent_json_vocab *sort_v; /* for qsort; vocabularies are built once, at start-up */
static int cmp_tok(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint8_t la = sort_v->len[a], lb = sort_v->len[b];
    int c = memcmp(sort_v->bytes + sort_v->off[a], sort_v->bytes + sort_v->off[b], la < lb ? la : lb);
    return c ? c : la != lb ? la - lb : a - b;
}

/* Preorder trie from the tokens sorted by bytes: each token shares its
 * longest common prefix with the one before. */
static int build_trie(latent_json_vocab *v, int32_t *order, int n) {
    v->trie = malloc(((size_t)n * TOK_MAX_BYTES + 1) * sizeof *v->trie);
    uint32_t path[TOK_MAX_BYTES + 1];
    int depth = 0;
    if (!v->trie) return -1;
    for (int i = 0; i < n; i++) {
        int32_t t = order[i];
        const uint8_t *b = (const uint8_t *)v->bytes + v->off[t];
        int lcp = 0;
        if (i) {
            int32_t p = order[i - 1];
            const uint8_t *pb = (const uint8_t *)v->bytes + v->off[p];
            while (lcp < v->len[p] && lcp < v->len[t] && pb[lcp] == b[lcp]) lcp++;
            if (lcp == v->len[t] && lcp == v->len[p]) { v->same[t] = v->same[p], v->same[p] = t, order[i] = p; continue; } /* same bytes: chained */
        }
        while (depth > lcp) v->trie[path[--depth]].skip = v->n_trie;
        for (; depth < v->len[t]; depth++) {
            tm_node nd = {b[depth], (uint8_t)(depth + 1), 0, -1};
            path[depth] = v->n_trie;
            v->trie[v->n_trie++] = nd;
        }
        v->trie[path[depth - 1]].tok = t;
    }
    while (depth > 0) v->trie[path[--depth]].skip = v->n_trie;
    return 0;
}

/* Plain tokens into the bitsets, the rest into the walked list. */
static int classify(latent_json_vocab *v) {
    v->plain = calloc((size_t)(PLAIN_MAX_CPS + 1) * v->words, sizeof *v->plain);
    v->special = malloc((size_t)v->n_vocab * sizeof *v->special);
    if (!v->plain || !v->special) return -1;
    for (int t = 0; t < v->n_vocab; t++) {
        if (!v->len[t]) continue;
        uint32_t cps;
        size_t p = plain_prefix((const uint8_t *)v->bytes + v->off[t], v->len[t], &cps);
        if (p == v->len[t] && cps <= PLAIN_MAX_CPS) {
            for (uint32_t c = cps; c <= PLAIN_MAX_CPS; c++) v->plain[(size_t)c * v->words + t / 64] |= 1ull << (t % 64);
        } else {
            if (cps > PLAIN_MAX_CPS) p = 0, cps = 0;
            tm_special sp = {t, (uint16_t)p, (uint16_t)cps};
            v->special[v->n_special++] = sp;
        }
    }
    return 0;
}

latent_json_vocab *latent_json_vocab_new(const latent_tokenizer *tok) {
    latent_json_vocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    int n = v->n_vocab = latent_tokenizer_vocab_size(tok);
    v->words = (n + 63) / 64;
    v->bytes = malloc((size_t)n * TOK_MAX_BYTES), v->off = malloc((size_t)n * sizeof *v->off);
    v->len = calloc((size_t)n, 1), v->same = malloc((size_t)n * sizeof *v->same);
    int32_t *order = malloc((size_t)n * sizeof *order);
    int m = 0, rc = -1;
    if (v->bytes && v->off && v->len && v->same && order) {
        char buf[TOK_MAX_BYTES + 1];
        for (int t = 0; t < n; t++) {
            v->same[t] = -1, v->off[t] = (uint32_t)t * TOK_MAX_BYTES;
            int k = latent_tokenizer_token_bytes(tok, t, buf, sizeof buf);
            if (k <= 0 || k > TOK_MAX_BYTES) continue;
            if (k >= 4 && !memcmp(buf, "<|", 2) && !memcmp(buf + k - 2, "|>", 2)) continue; /* a control token: never JSON */
            memcpy(v->bytes + v->off[t], buf, (size_t)k);
            v->len[t] = (uint8_t)k, order[m++] = t;
        }
        sort_v = v;
        qsort(order, (size_t)m, sizeof *order, cmp_tok);
        rc = build_trie(v, order, m) || classify(v) ? -1 : 0;
    }
    free(order);
    if (rc) { latent_json_vocab_free(v); return NULL; }
    return v;
}

void latent_json_vocab_free(latent_json_vocab *v) {
    if (!v) return;
    free(v->bytes), free(v->off), free(v->len), free(v->same), free(v->trie), free(v->plain), free(v->special);
    free(v);
}

latent_json_guard *latent_json_guard_new(latent_json_grammar *g, const latent_json_vocab *v, const int32_t *eos_ids, int n_eos) {
    latent_json_guard *jg = calloc(1, sizeof *jg);
    if (!jg) return NULL;
    jg->committed.p = malloc(JP_MAX_STACK * JP_MAX_ALTS * sizeof(jp_link));
    jg->spare.p = malloc(JP_MAX_STACK * JP_MAX_ALTS * sizeof(jp_link));
    jg->scratch.p = malloc(ARENA_LINKS * sizeof(jp_link));
    jg->bits = malloc((size_t)(v ? v->words : 1) * sizeof *jg->bits);
    if (!jg->committed.p || !jg->spare.p || !jg->scratch.p || !jg->bits) { latent_json_guard_free(jg); return NULL; }
    jg->committed.cap = jg->spare.cap = JP_MAX_STACK * JP_MAX_ALTS, jg->scratch.cap = ARENA_LINKS;
    atomic_fetch_add(&g->refs, 1);
    jg->g = g, jg->v = v;
    for (int i = 0; i < n_eos && jg->n_eos < 8; i++) jg->eos[jg->n_eos++] = eos_ids[i];
    jg->cur[0] = latent_jp_start(g), jg->n_cur = 1;
    return jg;
}

void latent_json_guard_free(latent_json_guard *jg) {
    if (!jg) return;
    latent_json_grammar_free(jg->g);
    free(jg->committed.p), free(jg->spare.p), free(jg->scratch.p), free(jg->bits);
    free(jg);
}

int latent_json_guard_complete(const latent_json_guard *jg) {
    for (int i = 0; i < jg->n_cur; i++)
        if (latent_jp_accepts(jg->g, &jg->cur[i])) return 1;
    return 0;
}

/* Feeds bytes to the current state into out (scratch arena); returns the
 * surviving alternatives. */
static int feed_bytes(latent_json_guard *jg, const jp_alt *in, int n_in, const uint8_t *b, size_t n, jp_alt *out) {
    jp_alt tmp[2][JP_MAX_ALTS];
    const jp_alt *src = in;
    int ns = n_in;
    for (size_t i = 0; i < n && ns; i++) {
        jp_alt *dst = i + 1 == n ? out : tmp[i % 2];
        int nd = 0;
        for (int k = 0; k < ns; k++)
            if (latent_jp_feed(jg->g, &jg->scratch, &src[k], b[i], dst, &nd, JP_MAX_ALTS) < 0) return 0;
        src = dst, ns = nd;
    }
    return ns;
}

static void set_tok(latent_json_guard *jg, int32_t t) {
    for (; t >= 0; t = jg->v->same[t]) jg->bits[t / 64] |= 1ull << (t % 64);
}

/* The trie walk from the current state. */
static void walk_trie(latent_json_guard *jg) {
    const latent_json_vocab *v = jg->v;
    memcpy(jg->walk[0], jg->cur, jg->n_cur * sizeof *jg->cur);
    jg->n_walk[0] = jg->n_cur, jg->mark[0] = 0;
    for (uint32_t i = 0; i < v->n_trie;) {
        const tm_node *nd = &v->trie[i];
        int d = nd->depth, n = 0;
        jg->scratch.used = jg->mark[d - 1];
        for (int k = 0; k < jg->n_walk[d - 1] && n >= 0; k++)
            if (latent_jp_feed(jg->g, &jg->scratch, &jg->walk[d - 1][k], nd->byte, jg->walk[d], &n, JP_MAX_ALTS) < 0) n = 0;
        jg->n_walk[d] = n, jg->mark[d] = jg->scratch.used;
        if (!n) { i = nd->skip; continue; }
        if (nd->tok >= 0) set_tok(jg, nd->tok);
        i++;
    }
}

/* Inside a string: the plain tokens by bitset, the others one by one. */
static void string_mask(latent_json_guard *jg, uint32_t count, uint32_t max) {
    const latent_json_vocab *v = jg->v;
    uint32_t room = max - count > PLAIN_MAX_CPS ? PLAIN_MAX_CPS : max - count;
    memcpy(jg->bits, v->plain + (size_t)room * v->words, v->words * sizeof *jg->bits);
    jp_alt out[JP_MAX_ALTS];
    for (uint32_t i = 0; i < v->n_special; i++) {
        const tm_special *s = &v->special[i];
        if (s->cps > max - count) continue;
        jp_alt a = latent_jp_string_advance(&jg->cur[0], s->cps); /* its plain prefix leaves the state as it was, longer */
        jg->scratch.used = 0;
        if (feed_bytes(jg, &a, 1, (const uint8_t *)v->bytes + v->off[s->tok] + s->prefix, v->len[s->tok] - s->prefix, out))
            set_tok(jg, s->tok);
    }
}

const uint64_t *latent_json_guard_allowed(latent_json_guard *jg) {
    const latent_json_vocab *v = jg->v;
    uint32_t count, max;
    if (jg->n_cur == 1 && latent_jp_in_plain_string(jg->g, &jg->cur[0], &count, &max)) string_mask(jg, count, max);
    else memset(jg->bits, 0, v->words * sizeof *jg->bits), walk_trie(jg);
    jg->scratch.used = 0;
    /* the end-of-sequence ids: exactly when the document is complete, whatever their bytes */
    int complete = latent_json_guard_complete(jg);
    for (int i = 0; i < jg->n_eos; i++) {
        int32_t t = jg->eos[i];
        if (t < 0 || t >= v->n_vocab) continue;
        if (complete) jg->bits[t / 64] |= 1ull << (t % 64);
        else jg->bits[t / 64] &= ~(1ull << (t % 64));
    }
    return jg->bits;
}

int latent_json_guard_mask(latent_json_guard *jg, float *logits, int vocab) {
    const uint64_t *bits = latent_json_guard_allowed(jg);
    int allowed = 0;
    for (int w = 0; w * 64 < vocab; w++) {
        uint64_t b = w < jg->v->words ? bits[w] : 0;
        int hi = vocab - w * 64 < 64 ? vocab - w * 64 : 64;
        allowed += __builtin_popcountll(hi < 64 ? b & ((1ull << hi) - 1) : b);
        if (b == ~0ull) continue;
        for (int i = 0; i < hi; i++)
            if (!(b >> i & 1)) logits[w * 64 + i] = -INFINITY;
    }
    return allowed;
}

/* 1 when some byte can follow (the root takes no trailing whitespace). */
static int can_continue(latent_json_guard *jg) {
    jp_alt out[JP_MAX_ALTS];
    for (int c = 0; c < 256; c++) {
        uint8_t b = (uint8_t)c;
        jg->scratch.used = 0;
        if (feed_bytes(jg, jg->cur, jg->n_cur, &b, 1, out)) return 1;
    }
    return 0;
}

latent_json_status latent_json_guard_feed(latent_json_guard *jg, const char *bytes, size_t n) {
    jp_alt out[JP_MAX_ALTS];
    jg->scratch.used = 0;
    int k = n ? feed_bytes(jg, jg->cur, jg->n_cur, (const uint8_t *)bytes, n, out) : 0;
    if (!k) return LATENT_JSON_REJECT;
    /* the survivors, copied out of the scratch arena */
    jp_alt kept[JP_MAX_ALTS];
    jg->spare.used = 0;
    int m = 0;
    for (int i = 0; i < k; i++)
        if (!latent_jp_alt_copy(&jg->spare, &out[i], &kept[m])) m++;
    if (!m) return LATENT_JSON_REJECT;
    memcpy(jg->cur, kept, m * sizeof *kept), jg->n_cur = m;
    jp_arena t = jg->committed; jg->committed = jg->spare; jg->spare = t;
    return latent_json_guard_complete(jg) && !can_continue(jg) ? LATENT_JSON_DONE : LATENT_JSON_MORE;
}

latent_json_status latent_json_guard_accept(latent_json_guard *jg, int32_t id) {
    for (int i = 0; i < jg->n_eos; i++)
        if (jg->eos[i] == id) return latent_json_guard_complete(jg) ? LATENT_JSON_DONE : LATENT_JSON_REJECT;
    const latent_json_vocab *v = jg->v;
    if (!v || id < 0 || id >= v->n_vocab || !v->len[id]) return LATENT_JSON_REJECT;
    return latent_json_guard_feed(jg, v->bytes + v->off[id], v->len[id]);
}
