/* Causal GQA attention over paged KV caches. */
#include "kernels/kernels.h"
#include "fault.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "latent/threads.h"
#include "kernels/simd_exp.h"

#define BLOCK_ROWS 64     /* query rows per sgemm work item */
#define GEMM_MIN_ROWS 4   /* shorter runs read the pages row by row */
#define ATT_CHUNK 64      /* keys per chunk: the fixed unit of the reduction over keys */

struct attn_item_buf {
    int start, len;   /* rows [start, start+len) of one sequence, consecutive positions */
    int kvh;          /* the kv head this item serves (with all its q heads) */
    int c0, c1;       /* chunks [c0, c1) of a single-row item; c1 = 0: all up to the row */
    int part;         /* parts slot of chunk c0 of a split row, or -1 */
};
typedef attn_item_buf attn_item;

int latent_attn_scratch_reserve(attn_scratch *s, const latent_config *c, int ctx, int rows) {
    int threads = latent_get_threads();
    /* work items: (rows + 1) runs at most, times the kv heads, times the key
     * ranges a single row may be split into (at most 4 per thread) */
    size_t items = (size_t)(rows + 1) * c->n_kv_heads * 4 * threads;
    if (items > s->items_cap) {
        attn_item_buf *it = latent_step_realloc(s->items, items * sizeof(attn_item_buf));
        if (!it) return -1;
        s->items = it, s->items_cap = items;
    }
    if (ctx <= s->ctx && threads <= s->threads) return 0;
    if (ctx < s->ctx) ctx = s->ctx;
    /* gathered K and V of one kv head, plus a block of scores (BLOCK_ROWS
     * rows for a run, or one row for every q head of a group) */
    int group = c->n_heads / c->n_kv_heads;
    size_t rowp_offset = (size_t)2 * ctx * c->head_dim + (size_t)(BLOCK_ROWS > group ? BLOCK_ROWS : group) * ctx;
    rowp_offset = (rowp_offset + 15) / 16 * 16;
    /* then 2 * ctx row pointers (8 bytes each: 4 floats per key), then a
     * row's running state and one chunk's partial (item_row) */
    size_t state_offset = rowp_offset + (size_t)4 * ctx;
    size_t per = state_offset + (size_t)2 * group * (c->head_dim + 2);
    per = (per + 15) / 16 * 16; /* each thread's slot 64-byte aligned */
    float *buf = latent_step_realloc(NULL, per * threads * sizeof(float));
    if (!buf) return -1;
    free(s->buf);
    s->buf = buf, s->per_thread = per, s->threads = threads, s->ctx = ctx, s->rowp_offset = rowp_offset;
    s->state_offset = state_offset;
    return 0;
}

void latent_attn_scratch_free(attn_scratch *s) {
    free(s->buf);
    free(s->items);
    free(s->parts);
    memset(s, 0, sizeof *s);
}


typedef struct {
    float *att;
    const float *q;
    const row_meta *rows;
    const latent_config *c;
    attn_scratch *s;
    attn_item *items;
    float *parts;             /* (n_parts, group, head_dim + 2): o, then max and sum */
    int layer;
    unsigned long seq;        /* distinguishes jobs for the threads' slot claims */
    atomic_int thread_slot;
} attn_job;

static inline float dot(const float *a, const float *b, int n) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline void axpy(float *y, float a, const float *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

#ifdef LATENT_HAVE_AVX512_CODE

/* 16 values of a cached row from element e: F32 as stored, or bf16 widened
 * to F32 on the fly (exact, so the same bits as reading a widened copy). */
AVX512_FN static inline __m512 load_row16(const void *row, int e, int bf16) {
    if (bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + e))), 16));
    return _mm512_loadu_ps((const float *)row + e);
}

/* scores[g * len + i] = scale * q_g . k_i for the group's q heads; hd % 16 == 0. */
AVX512_FN __attribute__((always_inline)) static inline void
row_scores_t(float *scores, int len, const float *q0, int group, int hd, const void *const *krows,
             const void *const *vrows, float scale, int bf16) {
    size_t es = bf16 ? 2 : 4;
    for (int i = 0; i < len; i++) {
        const void *k = krows[i];
        /* The rows are scattered over pages and strided inside them, beyond
         * what the hardware prefetcher follows: fetch keys a few rows ahead,
         * and each value row one pass before row_values reads it. */
        if (i + 8 < len)
            for (int e = 0; e < hd; e += 16) _mm_prefetch((const char *)krows[i + 8] + e * es, _MM_HINT_T0);
        for (int e = 0; e < hd; e += 16) _mm_prefetch((const char *)vrows[i] + e * es, _MM_HINT_T1);
        for (int g = 0; g < group; g++) {
            const float *qg = q0 + (size_t)g * hd;
            __m512 a = _mm512_mul_ps(_mm512_loadu_ps(qg), load_row16(k, 0, bf16));
            for (int e = 16; e < hd; e += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(qg + e), load_row16(k, e, bf16), a);
            scores[(size_t)g * len + i] = _mm512_reduce_add_ps(a) * scale;
        }
    }
}

/* out_g = sum_i p[g * len + i] v_i, 16 features of up to four heads at a
 * time, the sums kept in registers; hd % 16 == 0. */
AVX512_FN __attribute__((always_inline)) static inline void
row_values_t(float *out0, const float *p, int len, int group, int hd, const void *const *vrows, int bf16) {
    for (int g0 = 0; g0 < group; g0 += 4) {
        int gn = group - g0 < 4 ? group - g0 : 4;
        const float *p0 = p + (size_t)g0 * len, *p1 = p0 + len, *p2 = p1 + len, *p3 = p2 + len;
        for (int e = 0; e < hd; e += 16) {
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int i = 0; i < len; i++) {
                __m512 v = load_row16(vrows[i], e, bf16);
                a0 = _mm512_fmadd_ps(_mm512_set1_ps(p0[i]), v, a0);
                if (gn > 1) a1 = _mm512_fmadd_ps(_mm512_set1_ps(p1[i]), v, a1);
                if (gn > 2) a2 = _mm512_fmadd_ps(_mm512_set1_ps(p2[i]), v, a2);
                if (gn > 3) a3 = _mm512_fmadd_ps(_mm512_set1_ps(p3[i]), v, a3);
            }
            float *o = out0 + (size_t)g0 * hd + e;
            _mm512_storeu_ps(o, a0);
            if (gn > 1) _mm512_storeu_ps(o + hd, a1);
            if (gn > 2) _mm512_storeu_ps(o + 2 * hd, a2);
            if (gn > 3) _mm512_storeu_ps(o + 3 * hd, a3);
        }
    }
}

AVX512_FN static void row_scores(float *scores, int len, const float *q0, int group, int hd, const void *const *krows,
                                 const void *const *vrows, float scale, int bf16) {
    if (bf16) row_scores_t(scores, len, q0, group, hd, krows, vrows, scale, 1);
    else row_scores_t(scores, len, q0, group, hd, krows, vrows, scale, 0);
}

AVX512_FN static void row_values(float *out0, const float *p, int len, int group, int hd, const void *const *vrows,
                                 int bf16) {
    if (bf16) row_values_t(out0, p, len, group, hd, vrows, 1);
    else row_values_t(out0, p, len, group, hd, vrows, 0);
}
#endif

/* Keys are reduced in fixed chunks of ATT_CHUNK positions (chunk c holds
 * positions [c*ATT_CHUNK, (c+1)*ATT_CHUNK)), each chunk's softmax partial
 * (its max, its sum of exponentials, its unnormalized weighted values)
 * computed from that row and chunk alone, and the partials merged by
 * merge_chunk in chunk order. A row's bits then depend only on its query and
 * its keys: not on the other rows of the step, the threads, or whether its
 * chunks were split over threads (docs/api.md, "Determinism"). */

/* Merges one chunk's partial (oc: group x hd, mlc: max and sum per q head)
 * into a running state (o, ml) of the same layout. One copy of this code
 * serves every caller (noinline: an inlined copy could be contracted into
 * fused multiply-adds differently). An empty state is o = 0, max -inf,
 * sum 0. */
__attribute__((noinline)) static void merge_chunk(float *o, float *ml, const float *oc, const float *mlc, int group,
                                                  int hd) {
    for (int g = 0; g < group; g++) {
        float m = ml[2 * g], mc = mlc[2 * g], mn = m > mc ? m : mc;
        float a = expf(m - mn), b = expf(mc - mn);
        ml[2 * g] = mn;
        ml[2 * g + 1] = ml[2 * g + 1] * a + mlc[2 * g + 1] * b;
        float *og = o + (size_t)g * hd;
        const float *ocg = oc + (size_t)g * hd;
        for (int i = 0; i < hd; i++) og[i] = og[i] * a + ocg[i] * b;
    }
}

static void state_empty(float *o, float *ml, int group, int hd) {
    memset(o, 0, (size_t)group * hd * sizeof(float));
    for (int g = 0; g < group; g++) ml[2 * g] = -INFINITY, ml[2 * g + 1] = 0.0f;
}

/* out = o / sum, per q head */
static void state_finish(float *out, const float *o, const float *ml, int group, int hd) {
    for (int g = 0; g < group; g++) {
        float inv = 1.0f / ml[2 * g + 1];
        for (int i = 0; i < hd; i++) out[(size_t)g * hd + i] = o[(size_t)g * hd + i] * inv;
    }
}

/* Thread-private buffers of one row's chunks. */
typedef struct {
    float *scores;       /* group x ATT_CHUNK */
    const void **rowp;   /* 2 x ATT_CHUNK row pointers (keys, then values) */
    float *kbuf, *vbuf;  /* generic path, bf16 pages: rows widened here */
} chunk_bufs;

/* The partial of row r (its kv head kvh) over chunk c: oc (group x hd) and
 * mlc (max, sum per q head). */
static void chunk_partial(const attn_job *j, int r, int kvh, int c, const chunk_bufs *b, float *oc, float *mlc) {
    const latent_config *c_ = j->c;
    int hd = c_->head_dim, qd = latent_config_q_dim(c_), group = c_->n_heads / c_->n_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    const latent_seq *s = j->rows[r].seq;
    const latent_kv_pool *pool = s->pool;
    int P = pool->page_tokens, t0 = c * ATT_CHUNK, t1 = t0 + ATT_CHUNK;
    if (t1 > j->rows[r].pos + 1) t1 = j->rows[r].pos + 1;
    int len = t1 - t0;
    const float *q0 = j->q + (size_t)r * qd + (size_t)kvh * group * hd;
    const void **krows = b->rowp, **vrows = b->rowp + len;
#ifdef LATENT_HAVE_AVX512_CODE
    int fast = hd % 16 == 0 && latent_isa_active() >= LATENT_ISA_AVX512;
#else
    int fast = 0;
#endif
    int bf16 = pool->dtype == LATENT_KV_BF16;
    for (int t = t0; t < t1; t++) {
        const void *kr = latent_kv_at(pool, pool->k, s->pages[t / P], j->layer, t % P);
        const void *vr = latent_kv_at(pool, pool->v, s->pages[t / P], j->layer, t % P);
        if (fast || !bf16) { /* read in place (the AVX-512 kernels widen bf16 as they load) */
            krows[t - t0] = (const char *)kr + (size_t)kvh * hd * pool->elem_bytes;
            vrows[t - t0] = (const char *)vr + (size_t)kvh * hd * pool->elem_bytes;
            continue;
        }
        float *kd = b->kbuf + (size_t)(t - t0) * hd, *vd = b->vbuf + (size_t)(t - t0) * hd;
        latent_kv_load(pool, kr, kvh * hd, kd, hd);
        latent_kv_load(pool, vr, kvh * hd, vd, hd);
        krows[t - t0] = kd, vrows[t - t0] = vd;
    }
    float *scores = b->scores;
    /* scores (group, len), then their exponentials, then the weighted values */
    if (fast) {
#ifdef LATENT_HAVE_AVX512_CODE
        row_scores(scores, len, q0, group, hd, krows, vrows, scale, bf16);
#endif
    } else {
        for (int t = 0; t < len; t++)
            for (int g = 0; g < group; g++)
                scores[(size_t)g * len + t] = dot(q0 + (size_t)g * hd, (const float *)krows[t], hd) * scale;
    }
    for (int g = 0; g < group; g++) {
        float *sg = scores + (size_t)g * len, m = -INFINITY;
        for (int t = 0; t < len; t++) m = sg[t] > m ? sg[t] : m;
        mlc[2 * g] = m, mlc[2 * g + 1] = exp_shift_sum(sg, len, m);
    }
    if (fast) {
#ifdef LATENT_HAVE_AVX512_CODE
        row_values(oc, scores, len, group, hd, vrows, bf16);
#endif
    } else {
        memset(oc, 0, (size_t)group * hd * sizeof(float));
        for (int t = 0; t < len; t++)
            for (int g = 0; g < group; g++) axpy(oc + (size_t)g * hd, scores[(size_t)g * len + t], (const float *)vrows[t], hd);
    }
}

/* Row r, kv head kvh, chunks [c0, c1): with part < 0 all of the row's
 * chunks, merged and written normalized to att; else each chunk's partial
 * to parts slot part + (c - c0), for merge_split_rows. `state` holds
 * 2 x group x (hd + 2) floats. */
static void item_row(const attn_job *j, int r, int kvh, int c0, int c1, int part, const chunk_bufs *b, float *state) {
    const latent_config *c = j->c;
    int hd = c->head_dim, qd = latent_config_q_dim(c), group = c->n_heads / c->n_kv_heads;
    size_t stride = (size_t)group * (hd + 2);
    if (part >= 0) {
        for (int ch = c0; ch < c1; ch++) {
            float *slot = j->parts + (size_t)(part + ch - c0) * stride;
            chunk_partial(j, r, kvh, ch, b, slot, slot + (size_t)group * hd);
        }
        return;
    }
    float *o = state, *ml = o + (size_t)group * hd, *oc = state + stride, *mlc = oc + (size_t)group * hd;
    state_empty(o, ml, group, hd);
    for (int ch = c0; ch < c1; ch++) {
        chunk_partial(j, r, kvh, ch, b, oc, mlc);
        merge_chunk(o, ml, oc, mlc, group, hd);
    }
    state_finish(j->att + (size_t)r * qd + (size_t)kvh * group * hd, o, ml, group, hd);
}

/* A run of rows of one sequence: gather its keys and values once, then two
 * sgemms per q head (scores, then the weighted sum). */
static void item_gemm(const attn_job *j, const attn_item *it, float *kbuf, float *vbuf, float *scores) {
    const latent_config *c = j->c;
    int hd = c->head_dim, qd = latent_config_q_dim(c), group = c->n_heads / c->n_kv_heads;
    const row_meta *first = &j->rows[it->start];
    const latent_seq *s = first->seq;
    const latent_kv_pool *pool = s->pool;
    int P = pool->page_tokens, len = first->pos + it->len; /* keys up to the run's last row */
    for (int t = 0; t < len; t++) {
        latent_kv_load(pool, latent_kv_at(pool, pool->k, s->pages[t / P], j->layer, t % P), it->kvh * hd, kbuf + (size_t)t * hd, hd);
        latent_kv_load(pool, latent_kv_at(pool, pool->v, s->pages[t / P], j->layer, t % P), it->kvh * hd, vbuf + (size_t)t * hd, hd);
    }
    float scale = 1.0f / sqrtf((float)hd);
    for (int h = it->kvh * group; h < (it->kvh + 1) * group; h++) {
        const float *qh = j->q + (size_t)it->start * qd + (size_t)h * hd;
        /* scores (len_rows, len) = scale * Q_h K^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, it->len, len, hd, scale, qh, qd, kbuf, hd, 0.0f, scores, len);
        for (int i = 0; i < it->len; i++) {
            int valid = first->pos + i + 1; /* causal: keys 0..pos */
            float *row = scores + (size_t)i * len;
            latent_softmax_forward(row, valid);
            memset(row + valid, 0, (size_t)(len - valid) * sizeof(float));
        }
        float *out = j->att + (size_t)it->start * qd + (size_t)h * hd;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, it->len, hd, len, 1.0f, scores, len, vbuf, hd, 0.0f, out, qd);
    }
}

static atomic_ulong job_counter;
static __thread int tls_slot = -1;
static __thread unsigned long tls_job;

static inline int row_chunks(const row_meta *rm) { return rm->pos / ATT_CHUNK + 1; }

static void attn_task(void *ctx, int task) {
    attn_job *j = ctx;
    /* Each thread claims one scratch slot per job. */
    if (tls_job != j->seq) {
        tls_slot = atomic_fetch_add(&j->thread_slot, 1);
        tls_job = j->seq;
    }
    float *base = j->s->buf + (size_t)tls_slot * j->s->per_thread;
    size_t kv = (size_t)j->s->ctx * j->c->head_dim;
    const attn_item *it = &j->items[task];
    if (it->len >= GEMM_MIN_ROWS && j->s->batch_variant) {
        item_gemm(j, it, base, base + kv, base + 2 * kv);
        return;
    }
    chunk_bufs b = {base + 2 * kv, (const void **)(base + j->s->rowp_offset), base, base + kv};
    float *state = base + j->s->state_offset;
    for (int r = it->start; r < it->start + it->len; r++) {
        int c1 = it->c1 ? it->c1 : row_chunks(&j->rows[r]);
        item_row(j, r, it->kvh, it->c0, c1, it->part, &b, state);
    }
}

/* Rows whose chunks were split over items: every chunk's partial, merged
 * in chunk order exactly as item_row merges them. Items of one split row
 * and kv head are consecutive, the first holding chunk 0's slot. */
static void merge_split_rows(const attn_job *j, int n_items) {
    const latent_config *c = j->c;
    int hd = c->head_dim, qd = latent_config_q_dim(c), group = c->n_heads / c->n_kv_heads;
    size_t stride = (size_t)group * (hd + 2);
    float o[group * hd], ml[2 * group];
    for (int i = 0; i < n_items; i++) {
        const attn_item *it = &j->items[i];
        if (it->part < 0 || it->c0 != 0) continue;
        state_empty(o, ml, group, hd);
        for (int ch = 0; ch < row_chunks(&j->rows[it->start]); ch++) {
            const float *slot = j->parts + (size_t)(it->part + ch) * stride;
            merge_chunk(o, ml, slot, slot + (size_t)group * hd, group, hd);
        }
        state_finish(j->att + (size_t)it->start * qd + (size_t)it->kvh * group * hd, o, ml, group, hd);
    }
}

/* Rows r, r+1, ... that are consecutive positions of one sequence, at most
 * BLOCK_ROWS of them: one work item's run. */
static int run_length(const row_meta *rows, int r, int n) {
    int len = 1;
    while (r + len < n && len < BLOCK_ROWS && rows[r + len].seq == rows[r].seq && rows[r + len].pos == rows[r].pos + len)
        len++;
    return len;
}

/* Room for the partials of split rows (`chunks` of them); 0 when out of memory. */
static float *parts_reserve(attn_scratch *s, const latent_config *c, size_t chunks) {
    size_t need = chunks * (size_t)(c->n_heads / c->n_kv_heads) * (c->head_dim + 2);
    if (need > s->parts_cap) {
        float *p = realloc(s->parts, need * sizeof(float));
        if (!p) return NULL;
        s->parts = p, s->parts_cap = need;
    }
    return s->parts;
}

void latent_attention_forward(float *att, const float *q, const row_meta *rows, int n, int layer,
                       const latent_config *c, attn_scratch *s) {
    /* Work items: runs of consecutive rows of one sequence, cut into blocks,
     * times the kv heads. Single rows stay items of their own; when they are
     * too few to keep every thread busy (decoding one or two sequences, or a
     * recurrent prompt token by token), their chunks are split into ranges. */
    int singles = 0;
    size_t single_chunks = 0;
    for (int r = 0, len; r < n; r += len)
        if ((len = run_length(rows, r, n)) < GEMM_MIN_ROWS)
            for (int i = r; i < r + len; i++) singles++, single_chunks += row_chunks(&rows[i]);
    int units = singles * c->n_kv_heads, want = 4 * latent_get_threads();
    int split = units > 0 && units < want ? (want + units - 1) / units : 1;
    float *parts = NULL;
    if (split > 1 && !(parts = parts_reserve(s, c, single_chunks * c->n_kv_heads)))
        split = 1; /* out of memory for the partials: do not split (the same bits) */
    int max_items = (n + 1) * c->n_kv_heads * split;
    /* sized by latent_attn_scratch_reserve for these rows and threads */
    attn_item stack_items[512], *items = max_items <= 512 ? stack_items : (attn_item *)s->items;
    int n_items = 0, n_parts = 0;
    for (int r = 0; r < n;) {
        int len = run_length(rows, r, n);
        if (len >= GEMM_MIN_ROWS) {
            for (int h = 0; h < c->n_kv_heads; h++) items[n_items++] = (attn_item){r, len, h, 0, 0, -1};
            r += len;
            continue;
        }
        for (int i = r; i < r + len; i++) {
            int chunks = row_chunks(&rows[i]), ranges = split < chunks ? split : chunks;
            for (int h = 0; h < c->n_kv_heads; h++) {
                if (ranges <= 1) {
                    items[n_items++] = (attn_item){i, 1, h, 0, 0, -1};
                    continue;
                }
                for (int k = 0; k < ranges; k++)
                    items[n_items++] = (attn_item){i, 1, h, chunks * k / ranges, chunks * (k + 1) / ranges,
                                                   n_parts + chunks * k / ranges};
                n_parts += chunks;
            }
        }
        r += len;
    }
    attn_job j = {att, q, rows, c, s, items, parts, layer, atomic_fetch_add(&job_counter, 1) + 1, 0};
    latent_parallel_for(attn_task, &j, n_items);
    if (n_parts > 0) merge_split_rows(&j, n_items);
}
