/* The batched forward step: plain Llama, T2MLR and LRT (models.md §1-3).
 *
 * Rows of a step are laid out entry after entry in one (N, d) residual
 * stream. Blocks outside the recurrent window run once over all N rows.
 * Inside the window [w_lo, w_hi] a row needs the state its predecessor left,
 * so recurrent rows run in waves: wave i holds the i-th new token of every
 * recurrent entry (batched across sequences); a non-recurrent entry (a T2MLR
 * prompt under recur_on_prompt = false) runs whole in wave 0. */
#include "latent/engine.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fault.h"
#include "latent/clock.h"
#include "latent/threads.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"

/* The matrices of one block, prepared for inference (see latent_linear). */
typedef struct engine_layer {
    latent_linear wq, wk, wv, wo, wg, wu, wd;
    latent_linear lrt_gate, lrt_k, lrt_v;   /* LRT KV injection, when present */
} engine_layer;

struct latent_engine {
    const latent_model *m;
    const latent_config *cfg;
    engine_layer *lin;            /* (n_layers) */
    latent_linear head;           /* (vocab, d) */
    latent_linear w_rec, f_rec, f_cur; /* T2MLR */
    latent_linear lrt_k, lrt_v;   /* LRT shared memory projection (shared_kv_projection) */
    latent_linear embed_bf16;     /* (vocab, d) under bf16 when the head is not tied */
    const latent_linear *embed_src; /* bf16 token rows (the head or embed_bf16); NULL: w->embed */
    int kept_released;            /* the model's kept BF16 matrices were released (once) */
    latent_precision precision;   /* resolved: F32 or BF16 */
    int q8;                       /* matrices held as int8 (--weights q8) */
    int recurrence;               /* 0: run the plain backbone (benchmark control) */
    latent_engine_stats stats;

    int cap_rows, cap_entries, cap_ctx;
    /* Scratch for up to cap_rows rows; one slab, carved in engine_reserve. */
    float *slab;
    float *x;                     /* (N, d) residual stream of the whole step */
    float *wx;                    /* (N, d) a wave's rows gathered */
    float *xb;                    /* (N, d) normed input of the current op */
    float *q;                     /* (N, q_dim) */
    float *k, *v;                 /* (N, kv_dim) */
    float *att;                   /* (N, q_dim) attention output before Wo */
    float *hg, *hu;               /* (N, ffn) gate and up projections */
    float *tmp;                   /* (N, max(d, 2d for T2MLR z)) */
    float *tmp2, *tmp3;           /* (N, d) */
    float *mem;                   /* (N, d) recurrent state per row: R_{t-1} or m_{t-1} */
    float *state_new;             /* (N, d) state each row leaves */
    float *gate;                  /* (N, 2*n_kv) LRT gates */
    float *mk, *mv;               /* (N, kv_dim) LRT memory k, v */
    float *rope_cos, *rope_sin;   /* (N, head_dim/2) */
    attn_scratch attn;            /* per-thread attention buffers for contexts up to cap_ctx */
    row_meta *rows, *wrows;       /* (N) */
    float *entry_state;           /* (n_entries, d) running state per entry */
    float *logits; int cap_logits;/* (cap_logits, vocab) the head's output for a batch */
};

int latent_engine_flow(const latent_config *cfg, int prompt) {
    if (cfg->rec == LATENT_REC_T2MLR && prompt && !cfg->t2mlr.recur_on_prompt) return 1;
    return 2;
}

static void engine_free_linears(latent_engine *e) {
    if (e->lin)
        for (int l = 0; l < e->cfg->n_layers; l++) {
            latent_linear *ls = &e->lin[l].wq;
            for (size_t i = 0; i < sizeof(engine_layer) / sizeof(latent_linear); i++) latent_linear_free(&ls[i]);
        }
    free(e->lin);
    latent_linear_free(&e->head);
    latent_linear_free(&e->w_rec);
    latent_linear_free(&e->f_rec);
    latent_linear_free(&e->f_cur);
    latent_linear_free(&e->lrt_k);
    latent_linear_free(&e->lrt_v);
    latent_linear_free(&e->embed_bf16);
}

/* The BF16 values the loader kept for matrix w (latent_load_opts.keep_bf16), or NULL. */
static const uint16_t *kept_bf16(const latent_weights *w, const float *m) {
    for (int i = 0; i < w->n_params; i++)
        if (*w->params[i].slot == m) return w->params[i].bf16;
    return NULL;
}

static int init_linear(const latent_engine *e, latent_linear *l, const float *w, int out_dim, int in_dim) {
    if (e->q8) return latent_linear_init_q8(l, w, out_dim, in_dim);
    if (e->precision == LATENT_PRECISION_BF16) {
        const uint16_t *kept = e->m->bf16_kept ? kept_bf16(&e->m->w, w) : NULL;
        return kept ? latent_linear_init_from_bf16(l, kept, out_dim, in_dim) : latent_linear_init_bf16(l, w, out_dim, in_dim);
    }
    /* Without AVX-512 OpenBLAS outruns the portable panel kernels, but its
     * rounding depends on the row count: only when determinism is off. */
    if (e->attn.batch_variant && latent_kernels_active()->f32_blas_faster)
        return latent_linear_init_blas(l, w, out_dim, in_dim);
    return latent_linear_init(l, w, out_dim, in_dim);
}

/* One block's matrices, a task of its own: the blocks are packed over the
 * engine threads (a packer inside a task runs on that task's thread), so
 * packing and its first touches of fresh pages are split over the cores in
 * one parallel section; results do not depend on who packs what. */
typedef struct {
    latent_engine *e;
    atomic_int failed;
} layers_job;

static void init_layer_task(void *ctx, int l) {
    layers_job *j = ctx;
    latent_engine *e = j->e;
    const latent_config *c = e->cfg;
    const latent_layer *L = &e->m->w.layers[l];
    engine_layer *E = &e->lin[l];
    int d = c->d, qd = latent_config_q_dim(c), kvd = latent_config_kv_dim(c), rc = 0;
    rc |= init_linear(e, &E->wq, L->wq, qd, d);
    rc |= init_linear(e, &E->wk, L->wk, kvd, d);
    rc |= init_linear(e, &E->wv, L->wv, kvd, d);
    rc |= init_linear(e, &E->wo, L->wo, d, qd);
    rc |= init_linear(e, &E->wg, L->wg, c->ffn, d);
    rc |= init_linear(e, &E->wu, L->wu, c->ffn, d);
    rc |= init_linear(e, &E->wd, L->wd, d, c->ffn);
    if (L->lrt_gate) rc |= init_linear(e, &E->lrt_gate, L->lrt_gate, 2 * c->n_kv_heads, d);
    if (L->lrt_k && !c->lrt.shared_kv_projection) rc |= init_linear(e, &E->lrt_k, L->lrt_k, kvd, d);
    if (L->lrt_v && !c->lrt.shared_kv_projection) rc |= init_linear(e, &E->lrt_v, L->lrt_v, kvd, d);
    if (rc) atomic_store(&j->failed, 1);
}

/* Prepares every matrix the forward multiplies by; under bf16 the token
 * embedding too (read from the tied head's panels, or its own). The blocks
 * over the threads, then the rest (the LM head's packer splits it itself). */
static int engine_init_linears(latent_engine *e) {
    const latent_config *c = e->cfg;
    const latent_weights *w = &e->m->w;
    int d = c->d, kvd = latent_config_kv_dim(c), rc = 0;
    e->lin = calloc(c->n_layers, sizeof *e->lin);
    if (!e->lin) return -1;
    layers_job j = {.e = e};
    latent_parallel_for(init_layer_task, &j, c->n_layers);
    rc |= atomic_load(&j.failed);
    if (w->lrt_shared_k) rc |= init_linear(e, &e->lrt_k, w->lrt_shared_k, kvd, d);
    if (w->lrt_shared_v) rc |= init_linear(e, &e->lrt_v, w->lrt_shared_v, kvd, d);
    rc |= init_linear(e, &e->head, w->lm_head, c->vocab, d);
    if (e->precision == LATENT_PRECISION_BF16 || e->q8) {
        if (w->lm_head == w->embed) e->embed_src = &e->head;
        else if ((rc |= init_linear(e, &e->embed_bf16, w->embed, c->vocab, d)) == 0) e->embed_src = &e->embed_bf16;
    }
    if (c->rec == LATENT_REC_T2MLR) {
        rc |= init_linear(e, &e->w_rec, w->t2mlr.w_rec, d, d);
        rc |= init_linear(e, &e->f_rec, w->t2mlr.f_rec_w, d, 2 * d);
        rc |= init_linear(e, &e->f_cur, w->t2mlr.f_cur_w, d, 2 * d);
    }
    return rc;
}

const char *latent_precision_name(latent_precision p) {
    return p == LATENT_PRECISION_F32 ? "f32" : p == LATENT_PRECISION_BF16 ? "bf16" : "auto";
}

int latent_precision_parse(const char *s, latent_precision *out) {
    static const latent_precision all[] = {LATENT_PRECISION_AUTO, LATENT_PRECISION_F32, LATENT_PRECISION_BF16};
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, latent_precision_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

const char *latent_kernel_path(void) { return latent_isa_path(); }

latent_precision latent_precision_resolve(const latent_model *m, latent_precision p) {
    if (p != LATENT_PRECISION_AUTO) return p;
    return m->checkpoint_bf16 ? LATENT_PRECISION_BF16 : LATENT_PRECISION_F32;
}

int latent_kv_dtype_choose(const char *setting, latent_precision resolved, latent_kv_dtype *out) {
    if (!strcmp(setting, "auto")) *out = resolved == LATENT_PRECISION_BF16 ? LATENT_KV_BF16 : LATENT_KV_F32;
    else if (!strcmp(setting, "f32")) *out = LATENT_KV_F32;
    else if (!strcmp(setting, "bf16")) *out = LATENT_KV_BF16;
    else return -1;
    return 0;
}
latent_precision latent_engine_precision(const latent_engine *e) { return e->precision; }

int latent_weights_parse(const char *s, latent_weights_fmt *w, latent_precision *p) {
    if (!strcmp(s, "auto") || !strcmp(s, "q8")) *w = s[0] == 'q' ? LATENT_WEIGHTS_Q8 : LATENT_WEIGHTS_AUTO;
    else if (!strcmp(s, "f32") || !strcmp(s, "bf16")) latent_precision_parse(s, p), *w = LATENT_WEIGHTS_AUTO;
    else return -1;
    return 0;
}

latent_precision latent_engine_opts_precision(const latent_model *m, const latent_engine_opts *o) {
    latent_precision p = o ? o->precision : LATENT_PRECISION_AUTO;
    if (p == LATENT_PRECISION_AUTO && o && o->weights == LATENT_WEIGHTS_Q8) return LATENT_PRECISION_BF16;
    return latent_precision_resolve(m, p);
}

const char *latent_engine_weights_name(const latent_engine *e) {
    return e->q8 ? "q8" : latent_precision_name(e->precision);
}

static size_t linear_bytes(const latent_linear *l) {
    if (!l->out_dim) return 0;
    if (l->bf16) return latent_gemm_bf16_bytes(l->n_panels, l->in_dim);
    if (l->q8) return latent_q8_bytes(l->n_panels, l->in_dim);
    if (l->packed) return latent_gemm_packed_bytes(l->n_panels, l->in_dim);
    return (size_t)l->out_dim * l->in_dim * sizeof(float);
}

size_t latent_engine_weight_bytes(const latent_engine *e) {
    size_t b = 0;
    for (int l = 0; l < e->cfg->n_layers; l++) {
        const latent_linear *ls = &e->lin[l].wq;
        for (size_t i = 0; i < sizeof(engine_layer) / sizeof(latent_linear); i++) b += linear_bytes(&ls[i]);
    }
    const latent_linear *rest[] = {&e->w_rec, &e->f_rec, &e->f_cur, &e->lrt_k, &e->lrt_v, &e->embed_bf16};
    for (size_t i = 0; i < sizeof rest / sizeof *rest; i++) b += linear_bytes(rest[i]);
    /* the head, and the embedding unless it is read from the head's panels */
    b += linear_bytes(&e->head);
    if (!e->embed_src) b += (size_t)e->cfg->vocab * e->cfg->d * sizeof(float) * (e->m->w.lm_head == e->m->w.embed && !e->head.packed ? 0 : 1);
    return b;
}

latent_engine *latent_engine_new(const latent_model *m, latent_err *err) { return latent_engine_new_opts(m, NULL, err); }

latent_engine *latent_engine_new_opts(const latent_model *m, const latent_engine_opts *o, latent_err *err) {
    latent_engine *e = calloc(1, sizeof *e);
    if (!e) {
        latent_err_set(err, LATENT_E_NOMEM, "engine: out of memory");
        return NULL;
    }
    e->m = m;
    e->cfg = &m->cfg;
    e->recurrence = 1;
    e->precision = latent_engine_opts_precision(m, o);
    e->q8 = o && o->weights == LATENT_WEIGHTS_Q8;
    e->attn.batch_variant = o && o->nondeterministic;
    if (m->bf16_kept && (e->precision != LATENT_PRECISION_BF16 || e->q8)) {
        latent_err_set(err, LATENT_E_INVALID, "engine: %s was loaded for bf16 (%d matrices kept in BF16, no F32 copy): "
                       "an engine in %s needs it loaded with latent_model_load", m->dir ? m->dir : "the model",
                       m->bf16_kept, latent_precision_name(e->precision));
        latent_engine_free(e);
        return NULL;
    }
    if (engine_init_linears(e) != 0) {
        latent_err_set(err, LATENT_E_NOMEM, "engine: out of memory preparing the weights for inference");
        latent_engine_free(e);
        return NULL;
    }
    return e;
}

/* madvise(DONTNEED) on the whole pages inside one matrix: anonymous pages
 * are freed, pages of a private file mapping dropped (re-read from the file
 * if ever touched). Edge pages may hold neighbouring tensors and stay. */
static size_t release_span(const void *p, size_t bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p, b = a + bytes;
    uintptr_t lo = (a + page - 1) / page * page, hi = b / page * page;
    if (hi <= lo || madvise((void *)lo, hi - lo, MADV_DONTNEED) != 0) return 0;
    return hi - lo;
}

static size_t release_matrix(latent_linear *l, const float *keep) {
    if (!l->packed || !l->w || l->w == keep) return 0;
    const float *w = l->w;
    l->w = NULL; /* never read again: fail loudly rather than read zeros */
    return release_span(w, (size_t)l->out_dim * l->in_dim * sizeof(float));
}

size_t latent_engine_release_unpacked(latent_engine *e) {
    /* Under bf16 the token rows come from bf16 panels: the F32 embedding goes too. */
    const float *embed = e->embed_src ? NULL : e->m->w.embed;
    size_t bytes = 0;
    for (int l = 0; l < e->cfg->n_layers; l++) {
        latent_linear *ls = &e->lin[l].wq;
        for (size_t i = 0; i < sizeof(engine_layer) / sizeof(latent_linear); i++) bytes += release_matrix(&ls[i], embed);
    }
    latent_linear *rest[] = {&e->head, &e->w_rec, &e->f_rec, &e->f_cur, &e->lrt_k, &e->lrt_v, &e->embed_bf16};
    for (size_t i = 0; i < sizeof rest / sizeof *rest; i++) bytes += release_matrix(rest[i], embed);
    /* BF16 matrices the loader kept: their file pages, read once to pack (the
     * engine made the model's only reader of them under bf16) */
    const latent_weights *w = &e->m->w;
    for (int i = 0; i < w->n_params && e->m->bf16_kept && !e->kept_released; i++)
        if (w->params[i].bf16) bytes += release_span(w->params[i].bf16, (size_t)w->params[i].numel * sizeof(uint16_t));
    e->kept_released = 1;
    return bytes;
}

void latent_engine_free(latent_engine *e) {
    if (!e) return;
    engine_free_linears(e);
    free(e->slab);
    latent_attn_scratch_free(&e->attn);
    free(e->rows);
    free(e->wrows);
    free(e->entry_state);
    free(e->logits);
    free(e);
}

void latent_engine_set_recurrence(latent_engine *e, int enabled) { e->recurrence = enabled; }
const latent_engine_stats *latent_engine_get_stats(const latent_engine *e) { return &e->stats; }

/* Grows the scratch to hold n rows, n_entries entries, a context of ctx and
 * n_logits rows of batched logits. Every allocation a step needs happens
 * here, before it changes anything: a failure leaves only bigger buffers. */
static int engine_reserve(latent_engine *e, int n, int n_entries, int ctx, int n_logits, latent_err *err) {
    const latent_config *c = e->cfg;
    if (n > e->cap_rows) {
        int cap = e->cap_rows ? e->cap_rows : 16;
        while (cap < n) cap *= 2;
        size_t d = c->d, qd = latent_config_q_dim(c), kvd = latent_config_kv_dim(c), f = c->ffn;
        size_t half = c->head_dim / 2;
        size_t per_row = 2 * d /* x, wx */ + d /* xb */ + qd + 2 * kvd + qd + 2 * f + 2 * d /* tmp */ +
                         2 * d /* tmp2, tmp3 */ + 2 * d /* mem, state_new */ + 2 * c->n_kv_heads +
                         2 * kvd + 2 * half;
        float *slab = latent_step_realloc(NULL, per_row * cap * sizeof(float));
        row_meta *rows = latent_step_realloc(NULL, cap * sizeof(row_meta)), *wrows = latent_step_realloc(NULL, cap * sizeof(row_meta));
        if (!slab || !rows || !wrows) {
            free(slab), free(rows), free(wrows);
            return latent_err_set(err, LATENT_E_NOMEM, "engine: cannot allocate scratch for %d rows", n);
        }
        free(e->slab), free(e->rows), free(e->wrows);
        e->slab = slab, e->rows = rows, e->wrows = wrows;
        float *p = slab;
#define CARVE(field, count) (e->field = p, p += (size_t)cap * (count))
        CARVE(x, d); CARVE(wx, d); CARVE(xb, d); CARVE(q, qd); CARVE(k, kvd); CARVE(v, kvd);
        CARVE(att, qd); CARVE(hg, f); CARVE(hu, f); CARVE(tmp, 2 * d); CARVE(tmp2, d); CARVE(tmp3, d);
        CARVE(mem, d); CARVE(state_new, d); CARVE(gate, 2 * c->n_kv_heads); CARVE(mk, kvd);
        CARVE(mv, kvd); CARVE(rope_cos, half); CARVE(rope_sin, half);
#undef CARVE
        e->cap_rows = cap;
    }
    if (n_entries > e->cap_entries) {
        float *es = latent_step_realloc(e->entry_state, (size_t)n_entries * c->d * sizeof(float));
        if (!es) return latent_err_set(err, LATENT_E_NOMEM, "engine: out of memory");
        e->entry_state = es;
        e->cap_entries = n_entries;
    }
    int cap_ctx = e->cap_ctx;
    if (ctx > cap_ctx) {
        cap_ctx = cap_ctx ? cap_ctx : 256;
        while (cap_ctx < ctx) cap_ctx *= 2;
        if (cap_ctx > c->max_pos) cap_ctx = c->max_pos;
    }
    /* every step: the thread count may have grown since the last one */
    if (latent_attn_scratch_reserve(&e->attn, c, cap_ctx, n) != 0)
        return latent_err_set(err, LATENT_E_NOMEM, "engine: out of memory for attention");
    e->cap_ctx = cap_ctx;
    if (n_logits > e->cap_logits) {
        float *lg = latent_step_realloc(e->logits, (size_t)n_logits * c->vocab * sizeof(float));
        if (!lg) return latent_err_set(err, LATENT_E_NOMEM, "engine: out of memory for %d rows of logits", n_logits);
        e->logits = lg, e->cap_logits = n_logits;
    }
    return 0;
}

/* The memory's k, v for n rows (mk, mv) through the shared projection: the
 * same for every injected block, so computed once per wave, not per block. */
static void lrt_shared_memory_kv(latent_engine *e, const float *mem, int n) {
    const latent_config *c = e->cfg;
    if (c->rec != LATENT_REC_LRT || !c->lrt.kv_injection || !c->lrt.shared_kv_projection) return;
    double t0 = latent_now_seconds();
    latent_linear_forward_multi((float *[]){e->mk, e->mv}, (const latent_linear *[]){&e->lrt_k, &e->lrt_v}, 2, mem, n);
    e->stats.recur_seconds += latent_now_seconds() - t0;
}

/* LRT KV injection (models.md §3) on n rows: k, v of each kv head j become
 * g_loc_j * k_j + g_fb_j * (m K^T)_j, gates g = 2 sigmoid(a G^T) (computed
 * with q, k, v). With a shared projection mk, mv are already there. */
static void lrt_kv_inject(latent_engine *e, const engine_layer *E, const float *mem, int n) {
    const latent_config *c = e->cfg;
    int kvd = latent_config_kv_dim(c), nkv = c->n_kv_heads, hd = c->head_dim;
    if (!c->lrt.shared_kv_projection)
        latent_linear_forward_multi((float *[]){e->mk, e->mv}, (const latent_linear *[]){&E->lrt_k, &E->lrt_v}, 2, mem, n);
    for (int r = 0; r < n; r++) {
        const float *g = e->gate + (size_t)r * 2 * nkv;
        for (int j = 0; j < nkv; j++) {
            float gl = 2.0f * sigmoidf_(g[j]), gf = 2.0f * sigmoidf_(g[nkv + j]);
            size_t o = (size_t)r * kvd + (size_t)j * hd;
            for (int i = 0; i < hd; i++) {
                e->k[o + i] = gl * e->k[o + i] + gf * e->mk[o + i];
                e->v[o + i] = gl * e->v[o + i] + gf * e->mv[o + i];
            }
        }
    }
}

/* The block's per-row steps between its products, spread over the threads
 * for a prefill's many rows (latent_parallel_rows): each row's arithmetic
 * is the same on any thread, so the bits are those of one thread. */
enum { ROWS_PARALLEL_MIN = 64 }; /* a decode batch's rows stay on the step thread */

typedef struct {
    float *x, *out;
    const float *add;         /* added into x first (a residual), or NULL */
    const float *weight;
    int d;
    float eps;
} norm_rows_job;

static void norm_rows(void *ctx, int r0, int r1) {
    const norm_rows_job *j = ctx;
    size_t d = (size_t)j->d;
    if (j->add)
        for (size_t i = r0 * d; i < r1 * d; i++) j->x[i] += j->add[i];
    latent_rmsnorm_forward(j->out + r0 * d, j->x + r0 * d, j->weight, r1 - r0, j->d, j->eps);
}

/* x += add, then out = rmsnorm(x) (add NULL: the norm alone), row by row */
static void add_norm(float *x, const float *add, float *out, const float *weight, int n, int d, float eps) {
    norm_rows_job j = {x, out, add, weight, d, eps};
    latent_parallel_rows(norm_rows, &j, n, ROWS_PARALLEL_MIN);
}

typedef struct {
    latent_engine *e;
    const row_meta *rows;
    int layer;
} rope_rows_job;

/* RoPE on q and k, then k and v into each row's KV pages (distinct slots) */
static void rope_store_rows(void *ctx, int r0, int r1) {
    const rope_rows_job *j = ctx;
    latent_engine *e = j->e;
    const latent_config *c = e->cfg;
    int qd = latent_config_q_dim(c), kvd = latent_config_kv_dim(c), hd = c->head_dim, half = hd / 2;
    for (int r = r0; r < r1; r++) {
        size_t tr = (size_t)j->rows[r].row * half;
        const float *cs = e->rope_cos + tr, *sn = e->rope_sin + tr;
        latent_rope_forward(e->q + (size_t)r * qd, c->n_heads, hd, cs, sn);
        latent_rope_forward(e->k + (size_t)r * kvd, c->n_kv_heads, hd, cs, sn);
        latent_kv_pool *pool = j->rows[r].seq->pool;
        int P = pool->page_tokens, pos = j->rows[r].pos, page = j->rows[r].seq->pages[pos / P];
        latent_kv_store(pool, latent_kv_at(pool, pool->k, page, j->layer, pos % P), 0, e->k + (size_t)r * kvd, kvd);
        latent_kv_store(pool, latent_kv_at(pool, pool->v, page, j->layer, pos % P), 0, e->v + (size_t)r * kvd, kvd);
    }
}

typedef struct {
    float *x;
    const float *add;
    float *hg;
    const float *hu;
    int d, ffn;
} mlp_rows_job;

/* row by row: the vector and scalar tails of one row fall the same way in any batch */
static void swiglu_rows(void *ctx, int r0, int r1) {
    const mlp_rows_job *j = ctx;
    for (int r = r0; r < r1; r++) {
        float *g = j->hg + (size_t)r * j->ffn;
        latent_swiglu_forward(g, g, j->hu + (size_t)r * j->ffn, j->ffn);
    }
}

static void residual_rows(void *ctx, int r0, int r1) {
    const mlp_rows_job *j = ctx;
    for (size_t i = (size_t)r0 * j->d; i < (size_t)r1 * j->d; i++) j->x[i] += j->add[i];
}

/* Block `layer` on n rows of x (in place). mem (n, d) is the LRT memory of
 * each row, or NULL to run the plain block. */
static void block_forward(latent_engine *e, int layer, float *x, const row_meta *rows, int n,
                          const float *mem) {
    const latent_config *c = e->cfg;
    const latent_layer *L = &e->m->w.layers[layer];
    const engine_layer *E = &e->lin[layer];
    int d = c->d;
    int inject = mem && c->rec == LATENT_REC_LRT && layer >= c->lrt.inject_start && layer <= c->lrt.inject_end;

    if (inject && c->lrt.residual_injection) {
        double t0 = latent_now_seconds();
        float alpha = L->lrt_alpha[0], gamma = L->lrt_gamma[0];
        for (size_t i = 0; i < (size_t)n * d; i++) x[i] = alpha * x[i] + gamma * mem[i];
        e->stats.recur_seconds += latent_now_seconds() - t0;
    }
    add_norm(x, NULL, e->xb, L->attn_norm, n, d, c->rms_eps);
    if (inject && c->lrt.kv_injection)
        /* the gates read the same normed input as q, k, v: one parallel section */
        latent_linear_forward_multi((float *[]){e->q, e->k, e->v, e->gate},
                             (const latent_linear *[]){&E->wq, &E->wk, &E->wv, &E->lrt_gate}, 4, e->xb, n);
    else
        latent_linear_forward_multi((float *[]){e->q, e->k, e->v}, (const latent_linear *[]){&E->wq, &E->wk, &E->wv}, 3, e->xb, n);
    if (inject && c->lrt.kv_injection) {
        double t0 = latent_now_seconds();
        lrt_kv_inject(e, E, mem, n);
        e->stats.recur_seconds += latent_now_seconds() - t0;
    }
    rope_rows_job rj = {e, rows, layer};
    latent_parallel_rows(rope_store_rows, &rj, n, ROWS_PARALLEL_MIN);
    latent_attention_forward(e->att, e->q, rows, n, layer, c, &e->attn);
    latent_linear_forward(e->tmp, e->att, &E->wo, n);
    add_norm(x, e->tmp, e->xb, L->mlp_norm, n, d, c->rms_eps);
    latent_linear_forward_multi((float *[]){e->hg, e->hu}, (const latent_linear *[]){&E->wg, &E->wu}, 2, e->xb, n);
    mlp_rows_job mj = {x, e->tmp, e->hg, e->hu, d, c->ffn};
    latent_parallel_rows(swiglu_rows, &mj, n, ROWS_PARALLEL_MIN);
    latent_linear_forward(e->tmp, e->hg, &E->wd, n);
    latent_parallel_rows(residual_rows, &mj, n, ROWS_PARALLEL_MIN);
}

/* T2MLR fusion Phi(h, R) on the rows of x with flow 2 (models.md §2):
 * h + tanh(g_rec) sigmoid(z F_rec^T + b_rec) * u + tanh(g_cur) sigmoid(z F_cur^T + b_cur) * h,
 * u = R W_rec^T, z = [h ; u]. mem holds each row's R_{t-1}. */
static void t2mlr_fuse(latent_engine *e, float *x, const row_meta *rows, int n, const float *mem) {
    const latent_t2mlr_weights *W = &e->m->w.t2mlr;
    int d = e->cfg->d;
    float tr = tanhf(W->gamma_rec[0]), tc = tanhf(W->gamma_cur[0]);
    float *u = e->tmp2, *z = e->tmp, *gr = e->tmp3, *gc = e->xb;
    latent_linear_forward(u, mem, &e->w_rec, n);
    for (int r = 0; r < n; r++) {
        memcpy(z + (size_t)r * 2 * d, x + (size_t)r * d, d * sizeof(float));
        memcpy(z + (size_t)r * 2 * d + d, u + (size_t)r * d, d * sizeof(float));
    }
    latent_linear_forward_multi((float *[]){gr, gc}, (const latent_linear *[]){&e->f_rec, &e->f_cur}, 2, z, n);
    for (int r = 0; r < n; r++) {
        if (rows[r].flow != 2) continue;
        float *h = x + (size_t)r * d;
        const float *ur = u + (size_t)r * d, *grr = gr + (size_t)r * d, *gcr = gc + (size_t)r * d;
        for (int i = 0; i < d; i++) {
            float hi = h[i];
            h[i] = hi + tr * sigmoidf_(grr[i] + W->f_rec_b[i]) * ur[i] + tc * sigmoidf_(gcr[i] + W->f_cur_b[i]) * hi;
        }
    }
}

/* T2MLR cache update: the state row r leaves, from y = h^(l_end). */
static void t2mlr_update(const latent_config *c, float *out, const float *y, const float *prev, uint8_t flow) {
    int d = c->d;
    if (flow != 2 || !c->t2mlr.cache_residual) {
        memcpy(out, y, d * sizeof(float));
        return;
    }
    double ss = 0;
    for (int i = 0; i < d; i++) {
        out[i] = y[i] + prev[i];
        ss += (double)out[i] * out[i];
    }
    double f = 1.0 / sqrt(ss / d + c->t2mlr.cache_norm_eps), cl = c->t2mlr.cache_norm_clamp;
    if (f > cl) f = cl;
    if (f < 1.0 / cl) f = 1.0 / cl;
    for (int i = 0; i < d; i++) out[i] = (float)(out[i] * f);
}

/* Records the state row r leaves: snapshot at page ends, entry's running state. */
static void commit_state(latent_engine *e, const row_meta *row, const float *state) {
    latent_seq *s = row->seq;
    int d = e->cfg->d, P = s->pool->page_tokens;
    if ((row->pos + 1) % P == 0)
        memcpy(s->snapshots + (size_t)((row->pos + 1) / P - 1) * d, state, d * sizeof(float));
    memcpy(e->entry_state + (size_t)row->entry * d, state, d * sizeof(float));
}

/* The recurrent window [lo, hi] of layers, or lo > hi when none. */
static void recurrent_window(const latent_engine *e, int *lo, int *hi) {
    const latent_config *c = e->cfg;
    *lo = 1, *hi = 0;
    if (!e->recurrence) return;
    if (c->rec == LATENT_REC_T2MLR) {
        *lo = c->t2mlr.l_start, *hi = c->t2mlr.l_end;
    } else if (c->rec == LATENT_REC_LRT) {
        int src = c->lrt.source_layer < 0 ? c->n_layers - 1 : c->lrt.source_layer;
        *lo = c->lrt.inject_start;
        *hi = src > c->lrt.inject_end ? src : c->lrt.inject_end;
        /* The memory comes from below every injected block: no wave needed. */
        if (c->lrt.source_layer >= 0 && src < c->lrt.inject_start) *lo = 1, *hi = 0;
    }
}

/* Runs the window's blocks on one wave of n rows (gathered in wx). */
static void run_wave(latent_engine *e, float *wx, const row_meta *rows, int n, int lo, int hi) {
    const latent_config *c = e->cfg;
    int d = c->d;
    for (int r = 0; r < n; r++)
        memcpy(e->mem + (size_t)r * d, e->entry_state + (size_t)rows[r].entry * d, d * sizeof(float));
    if (c->rec == LATENT_REC_T2MLR) {
        double t0 = latent_now_seconds();
        t2mlr_fuse(e, wx, rows, n, e->mem);
        e->stats.recur_seconds += latent_now_seconds() - t0;
        for (int l = lo; l <= hi; l++) block_forward(e, l, wx, rows, n, NULL);
        t0 = latent_now_seconds();
        for (int r = 0; r < n; r++) {
            t2mlr_update(c, e->state_new + (size_t)r * d, wx + (size_t)r * d, e->mem + (size_t)r * d, rows[r].flow);
            commit_state(e, &rows[r], e->state_new + (size_t)r * d);
        }
        e->stats.recur_seconds += latent_now_seconds() - t0;
        return;
    }
    /* LRT: every row of the wave injects its entry's m_{t-1}; the new memory
     * is captured after the source block (or the final norm) and committed
     * only after the wave, since later blocks still inject m_{t-1}. */
    int src = c->lrt.source_layer;
    lrt_shared_memory_kv(e, e->mem, n);
    for (int l = lo; l <= hi; l++) {
        block_forward(e, l, wx, rows, n, e->mem);
        if (l == src) memcpy(e->state_new, wx, (size_t)n * d * sizeof(float));
    }
    if (src < 0) latent_rmsnorm_forward(e->state_new, wx, e->m->w.final_norm, n, d, c->rms_eps);
    for (int r = 0; r < n; r++) commit_state(e, &rows[r], e->state_new + (size_t)r * d);
}

/* LRT whose source block lies below every injected block: the memory of row
 * t is h^(src) of row t-1, known after a batched pass up to src. */
static void lrt_memory_from_below(latent_engine *e, latent_batch_entry *entries, int n_entries,
                                  const int *start) {
    int d = e->cfg->d;
    for (int en = 0; en < n_entries; en++) {
        for (int i = 0; i < entries[en].n_tokens; i++) {
            int r = start[en] + i;
            const float *prev = i == 0 ? entries[en].seq->state : e->x + (size_t)(r - 1) * d;
            memcpy(e->mem + (size_t)r * d, prev, d * sizeof(float));
        }
        for (int i = 0; i < entries[en].n_tokens; i++) {
            int r = start[en] + i;
            commit_state(e, &e->rows[r], e->x + (size_t)r * d);
        }
    }
}

/* Checks every entry before anything changes; totals for the step. */
static int check_entries(const latent_engine *e, const latent_batch_entry *entries, int n_entries, int *N, int *max_ctx,
                         int *n_logits, latent_err *err) {
    const latent_config *c = e->cfg;
    *N = 0, *max_ctx = 0, *n_logits = 0;
    for (int en = 0; en < n_entries; en++) {
        const latent_batch_entry *b = &entries[en];
        if (b->n_tokens < 1) return latent_err_set(err, LATENT_E_INVALID, "batch entry %d has no tokens", en);
        for (int j = 0; j < en; j++)
            if (entries[j].seq == b->seq) return latent_err_set(err, LATENT_E_INVALID, "batch entries %d and %d share a sequence", j, en);
        for (int i = 0; i < b->n_tokens; i++)
            if (b->tokens[i] < 0 || b->tokens[i] >= c->vocab)
                return latent_err_set(err, LATENT_E_INVALID, "token id %d is outside the vocabulary (0..%d)", b->tokens[i], c->vocab - 1);
        if (b->seq->n_pos + b->n_tokens > *max_ctx) *max_ctx = b->seq->n_pos + b->n_tokens;
        *N += b->n_tokens;
        *n_logits += b->logits == LATENT_LOGITS_ALL ? b->n_tokens : b->logits == LATENT_LOGITS_LAST ? 1 : 0;
    }
    if (*max_ctx > c->max_pos)
        return latent_err_set(err, LATENT_E_CONTEXT, "sequence of %d tokens exceeds the context of %d tokens", *max_ctx, c->max_pos);
    return 0;
}

/* Every entry's pages at once, all or nothing. */
static int reserve_pages(const latent_engine *e, latent_batch_entry *entries, int n_entries, latent_err *err) {
    latent_seq *seqs[n_entries];
    int totals[n_entries];
    for (int en = 0; en < n_entries; en++) seqs[en] = entries[en].seq, totals[en] = entries[en].seq->n_pos + entries[en].n_tokens;
    return latent_seq_reserve_many(seqs, totals, n_entries, e->cfg->max_pos, err);
}

/* Lays out the rows, embeds them, builds each row's RoPE tables and loads
 * each entry's running state; start[en] gets its first row. Returns the
 * number of waves the recurrent window needs. */
static int lay_out_rows(latent_engine *e, const latent_batch_entry *entries, int n_entries, int *start) {
    const latent_config *c = e->cfg;
    int d = c->d, n_waves = 1, half = c->head_dim / 2;
    for (int en = 0, r = 0; en < n_entries; en++) {
        const latent_batch_entry *b = &entries[en];
        start[en] = r;
        uint8_t flow = (uint8_t)latent_engine_flow(c, b->prompt);
        if (flow == 2 && b->n_tokens > n_waves) n_waves = b->n_tokens;
        if (b->seq->d_state) memcpy(e->entry_state + (size_t)en * d, b->seq->state, d * sizeof(float));
        for (int i = 0; i < b->n_tokens; i++, r++) {
            e->rows[r] = (row_meta){.seq = b->seq, .pos = b->seq->n_pos + i, .entry = en, .row = r, .flow = flow};
            if (e->embed_src) latent_linear_row(e->embed_src, b->tokens[i], e->x + (size_t)r * d);
            else memcpy(e->x + (size_t)r * d, e->m->w.embed + (size_t)b->tokens[i] * d, d * sizeof(float));
            latent_rope_tables(e->rope_cos + (size_t)r * half, e->rope_sin + (size_t)r * half, c->head_dim,
                               e->rows[r].pos, c->rope_theta);
        }
    }
    return n_waves;
}

/* The recurrent window in waves: wave i gathers the i-th token of every
 * recurrent entry (a non-recurrent entry runs whole in wave 0). */
static void run_window(latent_engine *e, const latent_batch_entry *entries, int n_entries, const int *start, int N,
                       int n_waves, int lo, int hi) {
    int d = e->cfg->d;
    if (n_waves == 1) { /* every entry fits one wave (decode steps): in place */
        run_wave(e, e->x, e->rows, N, lo, hi);
        return;
    }
    for (int wv = 0; wv < n_waves; wv++) {
        int n = 0;
        for (int en = 0; en < n_entries; en++) {
            int k0 = start[en], cnt = entries[en].n_tokens;
            int recurrent = e->rows[k0].flow == 2;
            int from = recurrent ? wv : 0, to = recurrent ? wv + 1 : (wv == 0 ? cnt : 0);
            for (int i = from; i < to && i < cnt; i++, n++) {
                e->wrows[n] = e->rows[k0 + i];
                memcpy(e->wx + (size_t)n * d, e->x + (size_t)(k0 + i) * d, d * sizeof(float));
            }
        }
        run_wave(e, e->wx, e->wrows, n, lo, hi);
        for (int r = 0; r < n; r++) memcpy(e->x + (size_t)e->wrows[r].row * d, e->wx + (size_t)r * d, d * sizeof(float));
    }
}

/* Every block over the step's rows: below the window at once, the window in
 * waves, the rest at once (or LRT's memory from below, then the rest). */
static void run_blocks(latent_engine *e, const latent_batch_entry *entries, int n_entries, const int *start, int N,
                       int n_waves) {
    const latent_config *c = e->cfg;
    int lo, hi;
    recurrent_window(e, &lo, &hi);
    int lrt_below = e->recurrence && c->rec == LATENT_REC_LRT && lo > hi;
    int first_after = lo <= hi ? hi + 1 : 0;
    if (lo <= hi) {
        for (int l = 0; l < lo; l++) block_forward(e, l, e->x, e->rows, N, NULL);
        run_window(e, entries, n_entries, start, N, n_waves, lo, hi);
    } else if (lrt_below) {
        int src = c->lrt.source_layer;
        for (int l = 0; l <= src; l++) block_forward(e, l, e->x, e->rows, N, NULL);
        double t0 = latent_now_seconds();
        lrt_memory_from_below(e, (latent_batch_entry *)entries, n_entries, start);
        e->stats.recur_seconds += latent_now_seconds() - t0;
        lrt_shared_memory_kv(e, e->mem, N);
        first_after = src + 1;
    }
    for (int l = first_after; l < c->n_layers; l++) block_forward(e, l, e->x, e->rows, N, lrt_below ? e->mem : NULL);
}

/* Commits each sequence: tokens, flows, position, state. */
static void commit_entries(latent_engine *e, const latent_batch_entry *entries, int n_entries, const int *start) {
    int d = e->cfg->d;
    for (int en = 0; en < n_entries; en++) {
        const latent_batch_entry *b = &entries[en];
        latent_seq *s = b->seq;
        for (int i = 0; i < b->n_tokens; i++) {
            s->tokens[s->n_pos + i] = b->tokens[i];
            s->flows[s->n_pos + i] = e->rows[start[en]].flow;
        }
        s->n_pos += b->n_tokens;
        if (s->d_state && e->recurrence) memcpy(s->state, e->entry_state + (size_t)en * d, d * sizeof(float));
    }
}

/* Logits for the rows asked for: final norm, then the LM head over them at
 * once (the head is the largest matrix: one pass for every sequence). */
static void compute_logits(latent_engine *e, latent_batch_entry *entries, int n_entries, const int *start) {
    const latent_config *c = e->cfg;
    int d = c->d, nl = 0;
    for (int en = 0; en < n_entries; en++) {
        const latent_batch_entry *b = &entries[en];
        if (b->logits == LATENT_LOGITS_NONE) continue;
        int from = b->logits == LATENT_LOGITS_ALL ? 0 : b->n_tokens - 1;
        for (int i = from; i < b->n_tokens; i++, nl++)
            memcpy(e->wx + (size_t)nl * d, e->x + (size_t)(start[en] + i) * d, d * sizeof(float));
    }
    if (nl == 0) return;
    latent_rmsnorm_forward(e->xb, e->wx, e->m->w.final_norm, nl, d, c->rms_eps);
    if (n_entries == 1) {
        latent_linear_forward(entries[0].out, e->xb, &e->head, nl);
        return;
    }
    latent_linear_forward(e->logits, e->xb, &e->head, nl); /* engine_reserve sized e->logits for nl rows */
    for (int en = 0, r = 0; en < n_entries; en++) {
        latent_batch_entry *b = &entries[en];
        if (b->logits == LATENT_LOGITS_NONE) continue;
        int rows = b->logits == LATENT_LOGITS_ALL ? b->n_tokens : 1;
        memcpy(b->out, e->logits + (size_t)r * c->vocab, (size_t)rows * c->vocab * sizeof(float));
        r += rows;
    }
}

int latent_engine_step(latent_engine *e, latent_batch_entry *entries, int n_entries, latent_err *err) {
    double t_start = latent_now_seconds();
    int N, max_ctx, n_logits;
    if (check_entries(e, entries, n_entries, &N, &max_ctx, &n_logits, err) != 0) return -1;
    /* Every buffer first, then the pages of every entry at once: a step that
     * fails has changed nothing (the tests inject a failure at each point). */
    if (engine_reserve(e, N, n_entries, max_ctx, n_entries > 1 ? n_logits : 0, err) != 0) return -1;
    if (reserve_pages(e, entries, n_entries, err) != 0) return -1;
    int start[n_entries > 0 ? n_entries : 1];
    int n_waves = lay_out_rows(e, entries, n_entries, start);
    run_blocks(e, entries, n_entries, start, N, n_waves);
    commit_entries(e, entries, n_entries, start);
    compute_logits(e, entries, n_entries, start);
    e->stats.rows += N;
    e->stats.steps++;
    e->stats.step_seconds += latent_now_seconds() - t_start;
    return 0;
}
