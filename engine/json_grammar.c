/* Storage of a compiled JSON grammar, its "any value" nodes, and the passes
 * that run once every node is built: productivity (which nodes accept some
 * finite document), pruning, and flattening anyOf into leaves. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_grammar.h"

/* Grows *p (elements of `size`) to hold n + 1; -1 when out of memory. */
static int grow(void **p, uint32_t *cap, uint32_t n, size_t size) {
    if (n < *cap) return 0;
    uint32_t c = *cap ? *cap * 2 : 16;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return -1;
    *p = q, *cap = c;
    return 0;
}

int latent_jg_add_node(latent_json_grammar *g, jg_kind kind, uint32_t *out) {
    if (g->n_nodes >= LATENT_JSON_MAX_NODES || grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes, sizeof *g->nodes)) return -1;
    memset(&g->nodes[g->n_nodes], 0, sizeof *g->nodes);
    g->nodes[g->n_nodes].kind = (uint8_t)kind;
    g->nodes[g->n_nodes].max = UINT32_MAX;
    *out = g->n_nodes++;
    return 0;
}

int latent_jg_add_bytes(latent_json_grammar *g, const char *p, size_t n, uint32_t *off) {
    if (g->n_bytes + n > LATENT_JSON_MAX_BYTES) return -1;
    while (g->cap_bytes < g->n_bytes + n)
        if (grow((void **)&g->bytes, &g->cap_bytes, g->cap_bytes, 1)) return -1;
    memcpy(g->bytes + g->n_bytes, p, n);
    *off = g->n_bytes;
    g->n_bytes += (uint32_t)n;
    return 0;
}

int latent_jg_add_alts(latent_json_grammar *g, const uint32_t *alts, uint32_t n, uint32_t *first) {
    *first = g->n_alts;
    for (uint32_t i = 0; i < n; i++) {
        if (grow((void **)&g->alts, &g->cap_alts, g->n_alts, sizeof *g->alts)) return -1;
        g->alts[g->n_alts++] = alts[i];
    }
    return 0;
}

int latent_jg_add_props(latent_json_grammar *g, const jg_prop *props, uint32_t n, uint32_t *first) {
    *first = g->n_props;
    for (uint32_t i = 0; i < n; i++) {
        if (grow((void **)&g->props, &g->cap_props, g->n_props, sizeof *g->props)) return -1;
        g->props[g->n_props++] = props[i];
    }
    return 0;
}

/* qsort has no context argument; requests compile on several threads */
static _Thread_local const latent_json_grammar *sort_g;
static int cmp_lit(const void *pa, const void *pb) {
    const jg_lit *a = pa, *b = pb;
    uint32_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(sort_g->bytes + a->off, sort_g->bytes + b->off, n);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

int latent_jg_add_literals(latent_json_grammar *g, jg_lit *lits, uint32_t n, uint32_t *first, uint32_t *n_out) {
    sort_g = g;
    qsort(lits, n, sizeof *lits, cmp_lit);
    *first = g->n_lits;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (k && cmp_lit(&lits[i], &g->lits[g->n_lits - 1]) == 0) continue;
        if (grow((void **)&g->lits, &g->cap_lits, g->n_lits, sizeof *g->lits)) return -1;
        g->lits[g->n_lits++] = lits[i], k++;
    }
    *n_out = k;
    return 0;
}

/* "Any JSON value": an anyOf of a free object, an array of anything, a
 * string, a number and the three literals. */
static int add_any(latent_json_grammar *g) {
    uint32_t obj, arr, str, num, lit, off, first, n;
    if (latent_jg_add_node(g, JG_ANYOF, &g->any) || latent_jg_add_node(g, JG_OBJECT, &obj) || latent_jg_add_node(g, JG_ARRAY, &arr) ||
        latent_jg_add_node(g, JG_STRING, &str) || latent_jg_add_node(g, JG_NUMBER, &num) || latent_jg_add_node(g, JG_LITERALS, &lit))
        return -1;
    g->nodes[obj].free = 1;
    g->nodes[arr].child = g->any;
    g->any_string = str;
    if (latent_jg_add_bytes(g, "truefalsenull", 13, &off)) return -1;
    jg_lit l[3] = {{off, 4}, {off + 4, 5}, {off + 9, 4}};
    if (latent_jg_add_literals(g, l, 3, &first, &n)) return -1;
    g->nodes[lit].first = first, g->nodes[lit].n = n;
    uint32_t alts[5] = {obj, arr, str, num, lit};
    if (latent_jg_add_alts(g, alts, 5, &first)) return -1;
    g->nodes[g->any].first = first, g->nodes[g->any].n = 5;
    return 0;
}

latent_json_grammar *latent_jg_new(void) {
    latent_json_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    atomic_init(&g->refs, 1);
    if (add_any(g)) {
        latent_json_grammar_free(g);
        return NULL;
    }
    return g;
}

void latent_json_grammar_free(latent_json_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) > 1) return;
    free(g->nodes), free(g->props), free(g->alts), free(g->lits), free(g->bytes);
    free(g);
}

int latent_json_grammar_nodes(const latent_json_grammar *g) { return g ? (int)g->n_nodes : 0; }

static int node_productive(const latent_json_grammar *g, const jg_node *nd) {
    switch (nd->kind) {
    case JG_ROOT: return g->nodes[nd->child].productive;
    case JG_ANYOF:
        for (uint32_t i = 0; i < nd->n; i++)
            if (g->nodes[g->alts[nd->first + i]].productive) return 1;
        return 0;
    case JG_OBJECT:
        for (uint32_t i = 0; i < nd->n; i++) {
            const jg_prop *p = &g->props[nd->first + i];
            if (p->required && !g->nodes[p->child].productive) return 0;
        }
        return 1;
    case JG_ARRAY: return nd->min == 0 || g->nodes[nd->child].productive;
    default: return 1;
    }
}

/* Least fixpoint: a node is productive once what it needs is. */
static void mark_productive(latent_json_grammar *g) {
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t i = 0; i < g->n_nodes; i++)
            if (!g->nodes[i].productive && node_productive(g, &g->nodes[i])) g->nodes[i].productive = 1, changed = 1;
    }
}

/* Never offers a branch, property or array item that could not finish. */
static void prune(latent_json_grammar *g) {
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        jg_node *nd = &g->nodes[i];
        if (nd->kind == JG_ANYOF) {
            uint32_t k = 0;
            for (uint32_t j = 0; j < nd->n; j++)
                if (g->nodes[g->alts[nd->first + j]].productive) g->alts[nd->first + k++] = g->alts[nd->first + j];
            nd->n = k;
        } else if (nd->kind == JG_OBJECT) {
            for (uint32_t j = 0; j < nd->n; j++) {
                jg_prop *p = &g->props[nd->first + j];
                p->dead = !g->nodes[p->child].productive;
            }
        } else if (nd->kind == JG_ARRAY && !g->nodes[nd->child].productive) {
            nd->max = 0;
        }
    }
}

/* Leaves of node i into the open list (depth-first, de-duplicated); state:
 * 0 unvisited, 1 on the path, 2 done. */
static int collect_leaves(latent_json_grammar *g, uint32_t i, uint8_t *state, uint32_t *buf, uint32_t *n,
                          latent_json_error *err) {
    const jg_node *nd = &g->nodes[i];
    if (nd->kind != JG_ANYOF) {
        for (uint32_t k = 0; k < *n; k++)
            if (buf[k] == i) return 0;
        if (*n >= LATENT_JSON_MAX_ALTS) {
            snprintf(err->keyword, sizeof err->keyword, "anyOf");
            snprintf(err->msg, sizeof err->msg, "anyOf/oneOf/type lists open more than %d alternatives at one position",
                     LATENT_JSON_MAX_ALTS);
            return -1;
        }
        buf[(*n)++] = i;
        return 0;
    }
    if (state[i] == 2) return 0; /* its leaves are in the list already */
    if (state[i] == 1) {
        snprintf(err->keyword, sizeof err->keyword, "$ref");
        snprintf(err->msg, sizeof err->msg,
                 "a $ref or anyOf refers back to itself with no JSON in between (left recursion)");
        return -1;
    }
    state[i] = 1;
    for (uint32_t k = 0; k < nd->n; k++)
        if (collect_leaves(g, g->alts[nd->first + k], state, buf, n, err)) return -1;
    state[i] = 2;
    return 0;
}

static int flatten(latent_json_grammar *g, latent_json_error *err) {
    uint8_t *state = calloc(g->n_nodes, 1);
    uint32_t buf[LATENT_JSON_MAX_ALTS];
    if (!state) return -1;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        uint32_t n = 0;
        memset(state, 0, g->n_nodes);
        /* leaves live in alts[] too */
        if (collect_leaves(g, i, state, buf, &n, err) ||
            latent_jg_add_alts(g, buf, n, &g->nodes[i].leaf_first) < 0) {
            free(state);
            return -1;
        }
        g->nodes[i].n_leaf = n;
    }
    free(state);
    return 0;
}

int latent_jg_finish(latent_json_grammar *g, latent_json_error *err) {
    mark_productive(g);
    if (!g->nodes[g->root].productive) {
        snprintf(err->msg, sizeof err->msg, "the schema accepts no finite JSON document");
        return -1;
    }
    prune(g);
    return flatten(g, err);
}
