/* KV pages from a fixed pool, and the per-sequence state built on them. */
#include "latent/kv.h"

#include "bf16.h"
#include "fault.h"
#include "hugemem.h"

#include <stdlib.h>
#include <string.h>

static int elem_bytes(latent_kv_dtype t) { return t == LATENT_KV_BF16 ? 2 : 4; }

const char *latent_kv_dtype_name(latent_kv_dtype t) { return t == LATENT_KV_BF16 ? "bf16" : "f32"; }

size_t latent_kv_page_bytes(const latent_config *cfg, int page_tokens, latent_kv_dtype dtype) {
    return 2 * (size_t)elem_bytes(dtype) * cfg->n_layers * page_tokens * latent_config_kv_dim(cfg);
}

void latent_kv_store(const latent_kv_pool *p, void *row, int off, const float *src, int n) {
    if (p->dtype == LATENT_KV_F32) {
        memcpy((float *)row + off, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = (uint16_t *)row + off;
    for (int i = 0; i < n; i++) d[i] = latent_f32_to_bf16(src[i]);
}

void latent_kv_load(const latent_kv_pool *p, const void *row, int off, float *dst, int n) {
    if (p->dtype == LATENT_KV_F32) {
        memcpy(dst, (const float *)row + off, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *s = (const uint16_t *)row + off;
    for (int i = 0; i < n; i++) dst[i] = latent_bf16_to_f32(s[i]);
}

/* Bytes of one page of K (or V). */
static size_t half_page_bytes(const latent_kv_pool *p) {
    return (size_t)p->n_layers * p->page_tokens * p->kv_dim * p->elem_bytes;
}

int latent_kv_pool_init(latent_kv_pool *p, const latent_config *cfg, int page_tokens, size_t bytes,
                        latent_kv_dtype dtype, latent_err *err) {
    memset(p, 0, sizeof *p);
    if (page_tokens < 1) return latent_err_set(err, LATENT_E_INVALID, "kv pool: page size must be at least 1 token");
    if (dtype != LATENT_KV_F32 && dtype != LATENT_KV_BF16) return latent_err_set(err, LATENT_E_INVALID, "kv pool: unknown dtype %d", (int)dtype);
    p->dtype = dtype, p->elem_bytes = elem_bytes(dtype);
    size_t page_bytes = latent_kv_page_bytes(cfg, page_tokens, dtype);
    size_t n = bytes / page_bytes;
    if (n < 1) n = 1;
    if (n > (size_t)1 << 30) return latent_err_set(err, LATENT_E_INVALID, "kv pool: %zu pages is too many", n);
    p->n_layers = cfg->n_layers;
    p->kv_dim = latent_config_kv_dim(cfg);
    p->page_tokens = page_tokens;
    p->n_pages = (int)n;
    size_t half = n * page_bytes / 2;
    p->k = latent_huge_alloc(half);
    p->v = latent_huge_alloc(half);
    p->refcount = calloc(n, sizeof(int));
    p->free_stack = malloc(n * sizeof(int));
    if (!p->k || !p->v || !p->refcount || !p->free_stack) {
        latent_kv_pool_free(p);
        return latent_err_set(err, LATENT_E_NOMEM, "kv pool: cannot allocate %zu pages of %zu bytes", n, page_bytes);
    }
    /* Commit the pool now: the memory is taken at start-up, where running out
     * is an error the caller reports, instead of page by page under the first
     * requests (each first touch a page fault inside a timed step). */
    latent_huge_commit(p->k, half);
    latent_huge_commit(p->v, half);
    /* Pop order hands out page 0 first: keeps early sequences' pages close. */
    for (int i = 0; i < p->n_pages; i++) p->free_stack[i] = p->n_pages - 1 - i;
    p->n_free = p->n_pages;
    return 0;
}

void latent_kv_pool_free(latent_kv_pool *p) {
    if (!p) return;
    size_t bytes = (size_t)p->n_pages * half_page_bytes(p);
    latent_huge_free(p->k, bytes);
    latent_huge_free(p->v, bytes);
    free(p->refcount);
    free(p->free_stack);
    memset(p, 0, sizeof *p);
}

static int pool_take(latent_kv_pool *p) {
    if (p->n_free == 0) return -1;
    int page = p->free_stack[--p->n_free];
    p->refcount[page] = 1;
    return page;
}

static void pool_release(latent_kv_pool *p, int page) {
    if (--p->refcount[page] == 0) p->free_stack[p->n_free++] = page;
}

int latent_seq_init(latent_seq *s, latent_kv_pool *pool, const latent_config *cfg, latent_err *err) {
    memset(s, 0, sizeof *s);
    s->pool = pool;
    s->d_state = cfg->rec == LATENT_REC_NONE ? 0 : cfg->d;
    if (s->d_state) {
        s->state = calloc(s->d_state, sizeof(float));
        if (!s->state) return latent_err_set(err, LATENT_E_NOMEM, "sequence: out of memory");
    }
    return 0;
}

void latent_seq_free(latent_seq *s) {
    if (!s) return;
    for (int i = 0; i < s->n_pages; i++) pool_release(s->pool, s->pages[i]);
    free(s->pages);
    free(s->state);
    free(s->snapshots);
    free(s->tokens);
    free(s->flows);
    memset(s, 0, sizeof *s);
}

/* Grows the per-page arrays to hold `cap` pages. */
static int seq_grow(latent_seq *s, int cap) {
    if (cap <= s->cap_pages) return 0;
    int newcap = s->cap_pages ? s->cap_pages : 4;
    while (newcap < cap) newcap *= 2;
    size_t P = (size_t)s->pool->page_tokens;
    int *pages = latent_step_realloc(s->pages, newcap * sizeof(int));
    if (!pages) return -1;
    s->pages = pages;
    int32_t *tokens = latent_step_realloc(s->tokens, newcap * P * sizeof(int32_t));
    if (!tokens) return -1;
    s->tokens = tokens;
    uint8_t *flows = latent_step_realloc(s->flows, newcap * P);
    if (!flows) return -1;
    s->flows = flows;
    if (s->d_state) {
        float *snaps = latent_step_realloc(s->snapshots, (size_t)newcap * s->d_state * sizeof(float));
        if (!snaps) return -1;
        s->snapshots = snaps;
    }
    s->cap_pages = newcap;
    return 0;
}

/* Pages a sequence must take to hold n_total tokens: new ones, plus a copy
 * of the page the next token lands in when a fork shares it (the sequence
 * was truncated into it). *need gets the page count it will have. */
static int pages_to_take(const latent_seq *s, int n_total, int *need) {
    int P = s->pool->page_tokens;
    *need = latent_kv_pages_for(P, n_total);
    int cow = n_total > s->n_pos && s->n_pos % P != 0 && s->pool->refcount[s->pages[s->n_pos / P]] > 1;
    return (*need > s->n_pages ? *need - s->n_pages : 0) + cow;
}

int latent_seq_reserve_many(latent_seq *const *seqs, const int *n_totals, int n, int max_tokens, latent_err *err) {
    for (int i = 0; i < n; i++)
        if (n_totals[i] > max_tokens)
            return latent_err_set(err, LATENT_E_CONTEXT, "sequence of %d tokens exceeds the context of %d tokens",
                                  n_totals[i], max_tokens);
    for (int i = 0; i < n; i++) {
        int take = 0, need, first = 1;
        for (int j = 0; j < n; j++) {
            if (seqs[j]->pool != seqs[i]->pool) continue;
            if (j < i) first = 0;
            take += pages_to_take(seqs[j], n_totals[j], &need);
        }
        if (first && take > seqs[i]->pool->n_free)
            return latent_err_set(err, LATENT_E_KV_FULL, "kv pool exhausted: %d more pages needed, %d free of %d", take,
                                  seqs[i]->pool->n_free, seqs[i]->pool->n_pages);
    }
    /* Grow every page table first: the only step that can fail now, and it
     * takes no pages, so a failure leaves every sequence as it was. */
    for (int i = 0; i < n; i++) {
        int need;
        pages_to_take(seqs[i], n_totals[i], &need);
        if (seq_grow(seqs[i], need) != 0) return latent_err_set(err, LATENT_E_NOMEM, "sequence: out of memory");
    }
    for (int i = 0; i < n; i++)
        if (latent_seq_reserve(seqs[i], n_totals[i], max_tokens, err) != 0) return -1; /* cannot fail: counted and grown */
    return 0;
}

int latent_seq_reserve(latent_seq *s, int n_total, int max_tokens, latent_err *err) {
    if (n_total > max_tokens)
        return latent_err_set(err, LATENT_E_CONTEXT, "sequence of %d tokens exceeds the context of %d tokens", n_total,
                              max_tokens);
    int P = s->pool->page_tokens, need;
    int take = pages_to_take(s, n_total, &need);
    int cow = take - (need > s->n_pages ? need - s->n_pages : 0);
    int more = take - cow;
    if (more + cow == 0) return 0;
    if (more + cow > s->pool->n_free)
        return latent_err_set(err, LATENT_E_KV_FULL, "kv pool exhausted: %d more pages needed, %d free of %d",
                              more + cow, s->pool->n_free, s->pool->n_pages);
    if (seq_grow(s, need) != 0) return latent_err_set(err, LATENT_E_NOMEM, "sequence: out of memory");
    if (cow) {
        latent_kv_pool *p = s->pool;
        int old = s->pages[s->n_pos / P], page = pool_take(p);
        memcpy(latent_kv_at(p, p->k, page, 0, 0), latent_kv_at(p, p->k, old, 0, 0), half_page_bytes(p));
        memcpy(latent_kv_at(p, p->v, page, 0, 0), latent_kv_at(p, p->v, old, 0, 0), half_page_bytes(p));
        pool_release(p, old);
        s->pages[s->n_pos / P] = page;
    }
    while (s->n_pages < need) s->pages[s->n_pages++] = pool_take(s->pool);
    return 0;
}

/* The length a recurrent sequence can be cut to: n itself when the state
 * there is known (n == n_pos, or n == 0), else the page boundary below it. */
static int keepable_length(const latent_seq *s, int n) {
    if (n >= s->n_pos) return s->n_pos;
    if (!s->d_state || n == 0) return n;
    return n / s->pool->page_tokens * s->pool->page_tokens;
}

/* State after the first n tokens, for an n that keepable_length returned. */
static void state_at(const latent_seq *s, int n, float *dst) {
    if (n == s->n_pos) {
        if (dst != s->state) memcpy(dst, s->state, s->d_state * sizeof(float));
    } else if (n == 0) {
        memset(dst, 0, s->d_state * sizeof(float));
    } else {
        int page = n / s->pool->page_tokens - 1;
        memcpy(dst, s->snapshots + (size_t)page * s->d_state, s->d_state * sizeof(float));
    }
}

int latent_seq_truncate(latent_seq *s, int n) {
    if (n < 0) n = 0;
    n = keepable_length(s, n);
    if (s->d_state) state_at(s, n, s->state);
    int P = s->pool->page_tokens;
    int keep_pages = latent_kv_pages_for(P, n);
    while (s->n_pages > keep_pages) pool_release(s->pool, s->pages[--s->n_pages]);
    s->n_pos = n;
    return n;
}

int latent_seq_fork(latent_seq *dst, const latent_seq *src, int n, latent_err *err) {
    latent_kv_pool *p = src->pool;
    int P = p->page_tokens;
    n = keepable_length(src, n < 0 ? 0 : n);
    int full = n / P, partial = n % P ? 1 : 0;
    if (partial && p->n_free < 1) return latent_err_set(err, LATENT_E_KV_FULL, "kv pool exhausted: cannot copy a page to fork");
    if (seq_grow(dst, full + partial) != 0) return latent_err_set(err, LATENT_E_NOMEM, "sequence: out of memory");
    for (int i = 0; i < full; i++) {
        dst->pages[i] = src->pages[i];
        p->refcount[src->pages[i]]++;
    }
    if (partial) {
        /* The last page will be written by both sequences: copy it. */
        int page = pool_take(p);
        memcpy(latent_kv_at(p, p->k, page, 0, 0), latent_kv_at(p, p->k, src->pages[full], 0, 0), half_page_bytes(p));
        memcpy(latent_kv_at(p, p->v, page, 0, 0), latent_kv_at(p, p->v, src->pages[full], 0, 0), half_page_bytes(p));
        dst->pages[full] = page;
    }
    dst->n_pages = full + partial;
    memcpy(dst->tokens, src->tokens, n * sizeof(int32_t));
    memcpy(dst->flows, src->flows, n);
    if (dst->d_state) {
        memcpy(dst->snapshots, src->snapshots, (size_t)full * dst->d_state * sizeof(float));
        state_at(src, n, dst->state);
    }
    dst->n_pos = n;
    return n;
}

int latent_seq_common_prefix(const latent_seq *s, const int32_t *ids, const uint8_t *flows, int n) {
    int i = 0;
    while (i < n && i < s->n_pos && s->tokens[i] == ids[i] && s->flows[i] == flows[i]) i++;
    return i;
}
