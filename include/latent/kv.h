/* Per-session state: a KV cache in fixed-size pages taken from one shared pool
 * of configured size (so memory is bounded and known), plus the recurrent
 * state (R for T2MLR, the memory m for LRT) and a snapshot of it at every page
 * boundary so a sequence can be forked or truncated to a page-aligned prefix. */
#ifndef LATENT_KV_H
#define LATENT_KV_H

#include <stddef.h>
#include <stdint.h>
#include "latent/config.h"
#include "latent/error.h"

/* What a cached k or v element is stored as: F32, or bf16 (half the bytes
 * per page for the same tokens; rounded to nearest even when stored). */
typedef enum { LATENT_KV_F32 = 0, LATENT_KV_BF16 } latent_kv_dtype;

typedef struct latent_kv_pool {
    int n_layers, kv_dim;
    int page_tokens;          /* tokens per page */
    int n_pages;
    latent_kv_dtype dtype;
    int elem_bytes;           /* 4 (F32) or 2 (bf16) */
    void *k;                  /* (n_pages, n_layers, page_tokens, kv_dim) of dtype */
    void *v;                  /* same layout */
    int *refcount;            /* (n_pages) sequences holding each page */
    int *free_stack; int n_free;
} latent_kv_pool;

const char *latent_kv_dtype_name(latent_kv_dtype t);   /* "f32", "bf16" */
/* Bytes one page takes (K and V, every layer). */
size_t latent_kv_page_bytes(const latent_config *cfg, int page_tokens, latent_kv_dtype dtype);
/* Sizes the pool to floor(bytes / page_bytes) pages (at least one). */
int latent_kv_pool_init(latent_kv_pool *p, const latent_config *cfg, int page_tokens,
                        size_t bytes, latent_kv_dtype dtype, latent_err *err);
void latent_kv_pool_free(latent_kv_pool *p);

/* Where token `slot`'s k (or v) row of `layer` starts in a page (base is
 * p->k or p->v): a float * under F32, a bf16 (uint16_t) * under bf16. */
static inline void *latent_kv_at(const latent_kv_pool *p, void *base, int page, int layer, int slot) {
    return (char *)base + (((size_t)page * p->n_layers + layer) * p->page_tokens + slot) * p->kv_dim * p->elem_bytes;
}
/* Pages that hold n tokens (a partial last page counts), and the pages that
 * n tokens fill completely (what a fork can share). */
static inline int latent_kv_pages_for(int page_tokens, int n) { return (n + page_tokens - 1) / page_tokens; }
static inline int latent_kv_full_pages(int page_tokens, int n) { return n / page_tokens; }
/* Stores n F32 values at element `off` of a row (rounding under bf16). */
void latent_kv_store(const latent_kv_pool *p, void *row, int off, const float *src, int n);
/* Loads n values from element `off` of a row as F32. */
void latent_kv_load(const latent_kv_pool *p, const void *row, int off, float *dst, int n);

typedef struct latent_seq {
    latent_kv_pool *pool;     /* not owned */
    int n_pos;                /* tokens whose k, v are cached */
    int *pages; int n_pages, cap_pages;
    int d_state;              /* d for a recurrent model, 0 for plain Llama */
    float *state;             /* (d_state) state after the last cached token: R_{t-1} / m_{t-1} */
    float *snapshots;         /* (cap_pages, d_state): state after the last token of page i */
    int32_t *tokens;          /* (cap_pages * page_tokens) the cached token ids */
    uint8_t *flows;           /* same, control flow (1 or 2) of each cached token */
} latent_seq;

/* A fresh empty sequence (state zero); owns no pages yet. */
/* What a caller outside the engine (the daemon's scheduler and prefix cache)
 * reads of a pool and a sequence. The structs stay in this header because
 * callers hold them by value (one per session, no allocation); their fields
 * are the engine's, read through these. */
static inline int latent_kv_pool_pages(const latent_kv_pool *p) { return p->n_pages; }
static inline int latent_kv_pool_free_pages(const latent_kv_pool *p) { return p->n_free; }
static inline latent_kv_dtype latent_kv_pool_dtype(const latent_kv_pool *p) { return p->dtype; }
/* 1 once latent_seq_init has given s a pool (until latent_seq_free). */
static inline int latent_seq_live(const latent_seq *s) { return s->pool != NULL; }
static inline const latent_kv_pool *latent_seq_pool(const latent_seq *s) { return s->pool; }
/* Tokens whose K and V are cached. */
static inline int latent_seq_pos(const latent_seq *s) { return s->n_pos; }
/* Pages held, and the i-th of them (a page index of the pool). */
static inline int latent_seq_pages(const latent_seq *s) { return s->n_pages; }
static inline int latent_seq_page(const latent_seq *s, int i) { return s->pages[i]; }
/* The cached token ids and their control flows (latent_seq_pos of each). */
static inline const int32_t *latent_seq_tokens(const latent_seq *s) { return s->tokens; }
static inline const uint8_t *latent_seq_flows(const latent_seq *s) { return s->flows; }

int latent_seq_init(latent_seq *s, latent_kv_pool *pool, const latent_config *cfg, latent_err *err);
/* Returns every page to the pool; accepts a zeroed sequence. */
void latent_seq_free(latent_seq *s);
/* Makes room for n_total tokens; fails, changing nothing, when the pool has
 * too few free pages or n_total exceeds `max_tokens`. */
int latent_seq_reserve(latent_seq *s, int n_total, int max_tokens, latent_err *err);
/* The same for several sequences at once, all or nothing: either every one
 * gets its pages, or none changes (EKVFULL when their pools lack the pages,
 * ECONTEXT, ENOMEM). */
int latent_seq_reserve_many(latent_seq *const *seqs, const int *n_totals, int n, int max_tokens, latent_err *err);
/* Keeps the first n tokens (n <= n_pos). A recurrent model's state is known
 * only at page boundaries and at n_pos, so the kept length is rounded down to
 * a page boundary unless n == n_pos; returns the length kept. */
int latent_seq_truncate(latent_seq *s, int n);
/* dst (fresh, from latent_seq_init) becomes a copy of src's first n tokens
 * (rounded as truncate does): full pages are shared, the partial last page is
 * copied. Returns the length forked, or -1 when the pool is out of pages. */
int latent_seq_fork(latent_seq *dst, const latent_seq *src, int n, latent_err *err);
/* Length of the common prefix of the cached tokens and ids[0..n) counting
 * only tokens cached with the same control flow (flows[i]: 1 or 2): a token
 * run through the recurrence and the same token run without it leave
 * different states, so only the first is a reusable prefix of the other. */
int latent_seq_common_prefix(const latent_seq *s, const int32_t *ids, const uint8_t *flows, int n);

#endif
