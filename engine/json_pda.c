/* The byte-level pushdown automaton of a compiled JSON grammar. Each frame
 * kind has a step function that says what one byte does to it: consumed,
 * rejected, consumed and the frame is complete (pop), the frame is complete
 * without the byte (pop, and the parent sees the byte), or a child value
 * starts here (push the child's leaves; each sees the byte). */
#include <string.h>

#include "json_grammar.h"

enum { R_FAIL, R_OK, R_DONE, R_POP, R_PUSH };

enum { O_START, O_OPEN, O_KEY, O_COLON, O_VALUE, O_AFTER, O_COMMA };
enum { A_START, A_OPEN, A_AFTER, A_ELEM };
enum { S_START, S_CHAR, S_ESC };
enum { N_START, N_SIGN, N_ZERO, N_INT, N_FRAC0, N_FRAC, N_EXP0, N_EXPS, N_EXP };
#define NUM_DIGITS 15         /* integer and fraction digits: exact in a double */
#define EXP_DIGITS 2

static int is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static int ws_step(jp_frame *f) { return f->ws < JP_MAX_WS ? (f->ws++, R_OK) : R_FAIL; }

static uint32_t next_req(const latent_json_grammar *g, const jg_node *nd, uint32_t i) {
    return i < nd->n ? g->props[nd->first + i].next_req : nd->n;
}

/* A key byte: the lowest property in [f->b, last offered] whose key has the
 * bytes so far and c next. Offered: from f->a up to the first required one. */
static int key_byte(const latent_json_grammar *g, const jg_node *nd, jp_frame *f, uint8_t c) {
    uint32_t last = next_req(g, nd, f->a), off = f->u;
    if (last >= nd->n) last = nd->n - 1;
    const char *kj = g->bytes + g->props[nd->first + f->b].key_off;
    for (uint32_t j = f->b; j <= last; j++) {
        const jg_prop *p = &g->props[nd->first + j];
        const char *k = g->bytes + p->key_off;
        if (p->dead || p->key_len <= off || (uint8_t)k[off] != c || (j != f->b && memcmp(k, kj, off))) continue;
        f->b = j, f->u = (uint16_t)(off + 1);
        if (off + 1 == p->key_len) f->phase = O_COLON, f->ws = 0;
        return R_OK;
    }
    return R_FAIL;
}

static int key_begin(const latent_json_grammar *g, const jg_node *nd, jp_frame *f, uint32_t *child) {
    if (nd->free) { *child = g->any_string, f->phase = O_COLON, f->ws = 0; return R_PUSH; }
    f->b = f->a, f->u = 0, f->phase = O_KEY;
    while (f->b < nd->n && g->props[nd->first + f->b].dead) f->b++;
    if (f->b >= nd->n || f->b > next_req(g, nd, f->a)) return R_FAIL;
    return key_byte(g, nd, f, '"');
}

static int object_step(const latent_json_grammar *g, const jg_node *nd, jp_frame *f, uint8_t c, uint32_t *child) {
    if (f->phase != O_START && f->phase != O_KEY && is_ws(c)) return ws_step(f);
    switch (f->phase) {
    case O_START: return c == '{' ? (f->phase = O_OPEN, R_OK) : R_FAIL;
    case O_OPEN: case O_COMMA:
        if (c == '}' && f->phase == O_OPEN) return nd->free || next_req(g, nd, 0) == nd->n ? R_DONE : R_FAIL;
        return c == '"' ? key_begin(g, nd, f, child) : R_FAIL;
    case O_KEY: return key_byte(g, nd, f, c);
    case O_COLON: return c == ':' ? (f->phase = O_VALUE, f->ws = 0, R_OK) : R_FAIL;
    case O_VALUE:
        *child = nd->free ? g->any : g->props[nd->first + f->b].child;
        f->a = nd->free ? 0 : f->b + 1, f->phase = O_AFTER, f->ws = 0;
        return R_PUSH;
    case O_AFTER:
        if (c == '}') return nd->free || next_req(g, nd, f->a) == nd->n ? R_DONE : R_FAIL;
        if (c != ',') return R_FAIL;
        if (!nd->free) { /* another key must be on offer */
            uint32_t j = f->a;
            while (j < nd->n && g->props[nd->first + j].dead) j++;
            if (j >= nd->n) return R_FAIL;
        }
        return f->phase = O_COMMA, f->ws = 0, R_OK;
    }
    return R_FAIL;
}

static int array_step(const jg_node *nd, jp_frame *f, uint8_t c, uint32_t *child) {
    if (f->phase != A_START && is_ws(c)) return ws_step(f);
    switch (f->phase) {
    case A_START: return c == '[' ? (f->phase = A_OPEN, R_OK) : R_FAIL;
    case A_OPEN:
        if (c == ']') return nd->min == 0 ? R_DONE : R_FAIL;
        if (nd->max == 0) return R_FAIL;
        return *child = nd->child, f->a = 1, f->phase = A_AFTER, f->ws = 0, R_PUSH;
    case A_AFTER:
        if (c == ']') return f->a >= nd->min ? R_DONE : R_FAIL;
        return c == ',' && f->a < nd->max ? (f->phase = A_ELEM, f->ws = 0, R_OK) : R_FAIL;
    case A_ELEM: return *child = nd->child, f->a++, f->phase = A_AFTER, f->ws = 0, R_PUSH;
    }
    return R_FAIL;
}

/* UTF-8 as RFC 3629: u holds the continuation bytes still due (bits 0-1)
 * and the range of the next one (bits 2-4: 80-BF, A0-BF, 80-9F, 90-BF, 80-8F),
 * which rules out overlong forms and surrogates. */
static const uint8_t RANGE_LO[5] = {0x80, 0xA0, 0x80, 0x90, 0x80}, RANGE_HI[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};

static int utf8_lead(uint8_t c, uint16_t *u) {
    if (c >= 0xC2 && c <= 0xDF) *u = 1;
    else if (c == 0xE0) *u = 2 | 1 << 2;
    else if (c == 0xED) *u = 2 | 2 << 2;
    else if (c >= 0xE1 && c <= 0xEF) *u = 2;
    else if (c == 0xF0) *u = 3 | 3 << 2;
    else if (c >= 0xF1 && c <= 0xF3) *u = 3;
    else if (c == 0xF4) *u = 3 | 4 << 2;
    else return 0;
    return 1;
}

/* Escapes are the one-letter ones; \u is left out (a subset, and lengths
 * then count code points exactly as validators do). */
static int string_step(const jg_node *nd, jp_frame *f, uint8_t c) {
    if (f->phase == S_START) return c == '"' ? (f->phase = S_CHAR, f->a = 0, f->u = 0, R_OK) : R_FAIL;
    if (f->phase == S_ESC) return c && strchr("\"\\/bfnrt", c) ? (f->phase = S_CHAR, R_OK) : R_FAIL;
    if (f->u & 3) {
        int r = (f->u >> 2) & 7;
        if (c < RANGE_LO[r] || c > RANGE_HI[r]) return R_FAIL;
        f->u = (uint16_t)((f->u & 3) - 1);
        return R_OK;
    }
    if (c == '"') return f->a >= nd->min ? R_DONE : R_FAIL;
    if (c < 0x20 || f->a >= nd->max) return R_FAIL;
    if (c == '\\') return f->a++, f->phase = S_ESC, R_OK;
    if (c < 0x80) return f->a++, R_OK;
    return utf8_lead(c, &f->u) ? (f->a++, R_OK) : R_FAIL;
}

static int number_step(const jg_node *nd, jp_frame *f, uint8_t c) {
    int digit = c >= '0' && c <= '9', frac_ok = !nd->integer;
    switch (f->phase) {
    case N_START:
        if (c == '-') return f->phase = N_SIGN, R_OK;
        /* fall through */
    case N_SIGN:
        if (c == '0') return f->phase = N_ZERO, R_OK;
        return digit ? (f->phase = N_INT, f->a = 1, R_OK) : R_FAIL;
    case N_ZERO: case N_INT:
        if (digit && f->phase == N_INT && f->a < NUM_DIGITS) return f->a++, R_OK;
        if (frac_ok && c == '.') return f->phase = N_FRAC0, R_OK;
        if (frac_ok && (c == 'e' || c == 'E')) return f->phase = N_EXP0, R_OK;
        return digit ? R_FAIL : R_POP;
    case N_FRAC0: return digit ? (f->phase = N_FRAC, f->a = 1, R_OK) : R_FAIL;
    case N_FRAC:
        if (digit) return f->a < NUM_DIGITS ? (f->a++, R_OK) : R_FAIL;
        if (c == 'e' || c == 'E') return f->phase = N_EXP0, R_OK;
        return R_POP;
    case N_EXP0: if (c == '+' || c == '-') return f->phase = N_EXPS, R_OK;
        /* fall through */
    case N_EXPS: return digit ? (f->phase = N_EXP, f->a = 1, R_OK) : R_FAIL;
    case N_EXP:
        if (digit) return f->a < EXP_DIGITS ? (f->a++, R_OK) : R_FAIL;
        return R_POP;
    }
    return R_FAIL;
}

/* Literals sorted: those sharing the first `off` bytes are a range, and the
 * ones with byte c next a sub-range of it (after at most one that ends at off). */
static int literal_step(const latent_json_grammar *g, const jg_node *nd, jp_frame *f, uint8_t c) {
    const jg_lit *L = g->lits + nd->first;
    uint32_t lo = f->a, hi = f->b, off = f->u;
    int complete = L[lo].len == off;
    if (complete) lo++;
    uint32_t a = lo, b = hi;
    while (a < b) { /* first with byte >= c */
        uint32_t m = (a + b) / 2;
        if ((uint8_t)g->bytes[L[m].off + off] < c) a = m + 1; else b = m;
    }
    uint32_t e = a, z = hi;
    while (e < z) { /* first with byte > c */
        uint32_t m = (e + z) / 2;
        if ((uint8_t)g->bytes[L[m].off + off] <= c) e = m + 1; else z = m;
    }
    if (a < e) return f->a = a, f->b = e, f->u = (uint16_t)(off + 1), R_OK;
    return complete ? R_POP : R_FAIL;
}

static int frame_complete(const latent_json_grammar *g, const jp_frame *f) {
    const jg_node *nd = &g->nodes[f->node];
    if (nd->kind == JG_NUMBER) return f->phase == N_ZERO || f->phase == N_INT || f->phase == N_FRAC || f->phase == N_EXP;
    if (nd->kind == JG_LITERALS) return g->lits[nd->first + f->a].len == f->u;
    return 0;
}

static int frame_step(const latent_json_grammar *g, jp_frame *f, uint8_t c, uint32_t *child) {
    const jg_node *nd = &g->nodes[f->node];
    switch (nd->kind) {
    case JG_ROOT: return f->phase == 0 ? (f->phase = 1, *child = nd->child, R_PUSH) : R_FAIL;
    case JG_OBJECT: return object_step(g, nd, f, c, child);
    case JG_ARRAY: return array_step(nd, f, c, child);
    case JG_STRING: return string_step(nd, f, c);
    case JG_NUMBER: return number_step(nd, f, c);
    case JG_LITERALS: return literal_step(g, nd, f, c);
    }
    return R_FAIL;
}

static jp_frame frame_init(const latent_json_grammar *g, uint32_t node) {
    jp_frame f = {.node = node};
    if (g->nodes[node].kind == JG_LITERALS) f.b = g->nodes[node].n;
    return f;
}

static void pop(jp_alt *s) {
    s->top = s->up->f, s->up = s->up->up, s->depth--;
}

static int emit(const jp_alt *s, jp_alt *out, int *n, int cap) {
    for (int i = 0; i < *n; i++)
        if (latent_jp_alt_equal(&out[i], s)) return 0;
    if (*n < cap) out[(*n)++] = *s; /* past the cap: dropped (a smaller language, still valid) */
    return 0;
}

int latent_jp_feed(const latent_json_grammar *g, jp_arena *ar, const jp_alt *in, uint8_t c, jp_alt *out, int *n, int cap) {
    jp_alt s = *in;
    for (;;) {
        uint32_t child = 0;
        switch (frame_step(g, &s.top, c, &child)) {
        case R_FAIL: return 0;
        case R_OK: return emit(&s, out, n, cap);
        case R_DONE: pop(&s); return emit(&s, out, n, cap);
        case R_POP: pop(&s); continue;
        case R_PUSH: {
            const jg_node *cn = &g->nodes[child];
            if (s.depth + 1 >= JP_MAX_STACK) return 0;
            if (ar->used >= ar->cap) return -1;
            jp_link *l = &ar->p[ar->used++];
            l->up = s.up, l->f = s.top;
            for (uint32_t i = 0; i < cn->n_leaf; i++) {
                jp_alt t = {.top = frame_init(g, g->alts[cn->leaf_first + i]), .up = l, .depth = s.depth + 1};
                if (latent_jp_feed(g, ar, &t, c, out, n, cap) < 0) return -1;
            }
            return 0;
        }
        }
    }
}

jp_alt latent_jp_start(const latent_json_grammar *g) {
    jp_alt a = {.top = frame_init(g, g->root)};
    return a;
}

int latent_jp_accepts(const latent_json_grammar *g, const jp_alt *in) {
    jp_alt s = *in;
    while (s.depth > 0 && frame_complete(g, &s.top)) pop(&s);
    return s.depth == 0 && s.top.phase == 1;
}

int latent_jp_in_plain_string(const latent_json_grammar *g, const jp_alt *a, uint32_t *count, uint32_t *max) {
    const jg_node *nd = &g->nodes[a->top.node];
    if (nd->kind != JG_STRING || a->top.phase != S_CHAR || (a->top.u & 3)) return 0;
    *count = a->top.a, *max = nd->max;
    return 1;
}

jp_alt latent_jp_string_advance(const jp_alt *a, uint32_t cps) {
    jp_alt r = *a;
    r.top.a += cps;
    return r;
}

int latent_jp_alt_equal(const jp_alt *x, const jp_alt *y) {
    if (x->depth != y->depth || memcmp(&x->top, &y->top, sizeof x->top)) return 0;
    const jp_link *a = x->up, *b = y->up;
    for (; a != b; a = a->up, b = b->up)
        if (memcmp(&a->f, &b->f, sizeof a->f)) return 0;
    return 1;
}

int latent_jp_alt_copy(jp_arena *ar, const jp_alt *a, jp_alt *out) {
    if (ar->used + a->depth > ar->cap) return -1;
    *out = *a;
    jp_link *prev = NULL, *first = NULL;
    for (const jp_link *l = a->up; l; l = l->up) {
        jp_link *n = &ar->p[ar->used++];
        n->f = l->f, n->up = NULL;
        if (prev) prev->up = n; else first = n;
        prev = n;
    }
    out->up = first;
    return 0;
}
