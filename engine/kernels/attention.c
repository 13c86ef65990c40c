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
    if (ctx < ATT_CHUNK) ctx = ATT_CHUNK; /* the chunk tiles live in the gather buffers */
    if (ctx <= s->ctx && threads <= s->threads) return 0;
    if (ctx < s->ctx) ctx = s->ctx;
    /* gathered K and V of one kv head, plus a block of scores (BLOCK_ROWS
     * rows for a run, or one row for every q head of a group) */
    int group = c->n_heads / c->n_kv_heads;
    size_t rowp_offset = (size_t)2 * ctx * c->head_dim + (size_t)(BLOCK_ROWS > group ? BLOCK_ROWS : group) * ctx;
    rowp_offset = (rowp_offset + 15) / 16 * 16;
    /* then a chunk's row pointers (2 x ATT_CHUNK, 8 bytes each), then the
     * running states of a block of rows and one chunk's partial (item_rows) */
    size_t state_offset = rowp_offset + (size_t)4 * ATT_CHUNK;
    size_t per = state_offset + (size_t)(BLOCK_ROWS + 1) * group * (c->head_dim + 2);
    per = (per + 15) / 16 * 16; /* each thread's slot 64-byte aligned */
    float *buf = latent_step_realloc(NULL, per * threads * sizeof(float));
    if (!buf) return -1;
    memset(buf, 0, per * threads * sizeof(float)); /* tile rows past a chunk's end are read, never used */
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

/* Sixteen dot products at once: a[k] holds key k's 16 lane sums; returns
 * the 16 totals, key k in lane k. Each total is summed by the same tree
 * (lanes i and i+8, then i+4, i+2, i+1), whatever the other keys are, so a
 * key's score does not depend on its neighbours or on how many are valid. */
AVX512_FN __attribute__((always_inline)) static inline __m512 reduce16(const __m512 a[16]) {
    __m512 b[8], c[4], d[2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) /* b[k]: keys k, k+8 (256-bit halves added) */
        b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[k], a[k + 8], 0x44), _mm512_shuffle_f32x4(a[k], a[k + 8], 0xEE));
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) /* c[k]: 128-bit lanes hold keys k, k+8, k+4, k+12 */
        c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(b[k], b[k + 4], 0x88), _mm512_shuffle_f32x4(b[k], b[k + 4], 0xDD));
#pragma GCC unroll 2
    for (int k = 0; k < 2; k++) /* d[k]: two keys per 128-bit lane, k and k+2 in the first */
        d[k] = _mm512_add_ps(_mm512_shuffle_ps(c[k], c[k + 2], 0x44), _mm512_shuffle_ps(c[k], c[k + 2], 0xEE));
    __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
    /* e holds keys 0 2 1 3 8 10 9 11 4 6 5 7 12 14 13 15: put them in order */
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), e);
}

/* Where a chunk's key or value rows are: a contiguous F32 tile (rows of
 * hd floats, room for 16-row rounding), or, for a single row, pointers
 * into the pages (bf16 widened as loaded: copying one row's keys into a
 * tile would cost more than it saves). The kernels below do the same
 * arithmetic on the same values either way, so the bits are the same;
 * test_determinism compares prefill rows (tiles) with decode rows (pages). */
typedef struct {
    const float *tile;
    const void *const *rows;
    int in_place, bf16;
} chunk_src;

AVX512_FN __attribute__((always_inline)) static inline __m512 src16(const chunk_src *s, int i, int e, int hd) {
    if (!s->in_place) return _mm512_loadu_ps(s->tile + (size_t)i * hd + e);
    if (s->bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)s->rows[i] + e))), 16));
    return _mm512_loadu_ps((const float *)s->rows[i] + e);
}

/* scores[g * len + i] = scale * q_g . k_i for the group's q heads, sixteen
 * keys at a time; hd % 16 == 0. Keys past len up to the next multiple of
 * 16 are read (a valid row) and their lanes never stored. Inlined with hd
 * and the source kind constant, so the tile's sixteen rows are fixed
 * offsets from one register. */
AVX512_FN __attribute__((always_inline)) static inline void
scores_t(float *scores, int len, const float *q0, int group, int hd, chunk_src src, float scale) {
    const __m512 sc = _mm512_set1_ps(scale);
    for (int i0 = 0; i0 < len; i0 += 16) {
        int nk = len - i0 < 16 ? len - i0 : 16;
        chunk_src s = src; /* the 16 keys from i0 (past len: key i0 again, in place) */
        const void *k[16];
        if (s.in_place) {
            for (int t = 0; t < 16; t++) k[t] = src.rows[i0 + (t < nk ? t : 0)];
            s.rows = k;
        } else {
            s.tile = src.tile + (size_t)i0 * hd;
        }
        for (int g = 0; g < group; g++) {
            const float *qg = q0 + (size_t)g * hd;
            __m512 a[16];
#pragma GCC unroll 16
            for (int t = 0; t < 16; t++) a[t] = _mm512_setzero_ps();
            for (int e = 0; e < hd; e += 16) {
                __m512 qv = _mm512_loadu_ps(qg + e);
#pragma GCC unroll 16
                for (int t = 0; t < 16; t++) a[t] = _mm512_fmadd_ps(qv, src16(&s, t, e, hd), a[t]);
            }
            _mm512_mask_storeu_ps(scores + (size_t)g * len + i0, (__mmask16)((1u << nk) - 1),
                                  _mm512_mul_ps(reduce16(a), sc));
        }
    }
}

/* out_g = sum_i p[g * len + i] v_i, 16 features of up to four heads at a
 * time, the sums kept in registers; hd % 16 == 0. */
AVX512_FN __attribute__((always_inline)) static inline void
values_t(float *out0, const float *p, int len, int group, int hd, chunk_src src) {
    for (int g0 = 0; g0 < group; g0 += 4) {
        int gn = group - g0 < 4 ? group - g0 : 4;
        const float *p0 = p + (size_t)g0 * len, *p1 = p0 + len, *p2 = p1 + len, *p3 = p2 + len;
        for (int e = 0; e < hd; e += 16) {
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int i = 0; i < len; i++) {
                __m512 v = src16(&src, i, e, hd);
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

/* The specialisations actually run: tiles (with 64- and 128-wide heads
 * constant), and in place for F32 or bf16 pages. */
AVX512_FN static void chunk_scores(float *scores, int len, const float *q0, int group, int hd, chunk_src s, float scale) {
    if (s.in_place && s.bf16) scores_t(scores, len, q0, group, hd, (chunk_src){NULL, s.rows, 1, 1}, scale);
    else if (s.in_place) scores_t(scores, len, q0, group, hd, (chunk_src){NULL, s.rows, 1, 0}, scale);
    else if (hd == 64) scores_t(scores, len, q0, group, 64, (chunk_src){s.tile, NULL, 0, 0}, scale);
    else if (hd == 128) scores_t(scores, len, q0, group, 128, (chunk_src){s.tile, NULL, 0, 0}, scale);
    else scores_t(scores, len, q0, group, hd, (chunk_src){s.tile, NULL, 0, 0}, scale);
}

AVX512_FN static void chunk_values(float *out0, const float *p, int len, int group, int hd, chunk_src s) {
    if (s.in_place && s.bf16) values_t(out0, p, len, group, hd, (chunk_src){NULL, s.rows, 1, 1});
    else if (s.in_place) values_t(out0, p, len, group, hd, (chunk_src){NULL, s.rows, 1, 0});
    else values_t(out0, p, len, group, hd, (chunk_src){s.tile, NULL, 0, 0});
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

/* Thread-private buffers of an item's chunks. */
typedef struct {
    float *scores;       /* group x ATT_CHUNK */
    float *ktile, *vtile;/* a chunk's keys and values as F32 rows of hd (room for ATT_CHUNK) */
    const void **krows, **vrows; /* or, in_place, pointers to them in the pages (ATT_CHUNK each) */
    int fast;            /* the AVX-512 kernels */
    int in_place;        /* fast, and a single row: read the pages in place */
    int bf16;            /* the pages hold bf16 */
} chunk_bufs;

/* Copies keys and values [t0, t1) of sequence s, kv head kvh, into b's
 * tiles (bf16 pages widened, exactly): contiguous rows read faster than
 * rows scattered over pages, and every row of a run reuses them. In place:
 * points b's row pointers at them instead. */
static void chunk_rows(const attn_job *j, const latent_seq *s, int kvh, int t0, int t1, chunk_bufs *b) {
    const latent_kv_pool *pool = s->pool;
    int P = pool->page_tokens, hd = j->c->head_dim;
    for (int t = t0; t < t1 && b->in_place; t++) {
        int page = s->pages[t / P];
        b->krows[t - t0] = (const char *)latent_kv_at(pool, pool->k, page, j->layer, t % P) + (size_t)kvh * hd * pool->elem_bytes;
        b->vrows[t - t0] = (const char *)latent_kv_at(pool, pool->v, page, j->layer, t % P) + (size_t)kvh * hd * pool->elem_bytes;
    }
    for (int t = t0; t < t1 && !b->in_place; t++) {
        int page = s->pages[t / P];
        latent_kv_load(pool, latent_kv_at(pool, pool->k, page, j->layer, t % P), kvh * hd, b->ktile + (size_t)(t - t0) * hd, hd);
        latent_kv_load(pool, latent_kv_at(pool, pool->v, page, j->layer, t % P), kvh * hd, b->vtile + (size_t)(t - t0) * hd, hd);
    }
}

/* The partial of row r (kv head kvh) over the first `len` keys of the chunk
 * in b: oc (group x hd) and mlc (max, sum per q head). */
static void chunk_partial(const attn_job *j, int r, int kvh, int len, const chunk_bufs *b, float *oc, float *mlc) {
    const latent_config *c = j->c;
    int hd = c->head_dim, qd = latent_config_q_dim(c), group = c->n_heads / c->n_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    const float *q0 = j->q + (size_t)r * qd + (size_t)kvh * group * hd;
    float *scores = b->scores;
    /* scores (group, len), then their exponentials, then the weighted values */
    if (b->fast) {
#ifdef LATENT_HAVE_AVX512_CODE
        chunk_scores(scores, len, q0, group, hd, (chunk_src){b->ktile, b->krows, b->in_place, b->bf16}, scale);
#endif
    } else {
        for (int t = 0; t < len; t++)
            for (int g = 0; g < group; g++)
                scores[(size_t)g * len + t] = dot(q0 + (size_t)g * hd, b->ktile + (size_t)t * hd, hd) * scale;
    }
    for (int g = 0; g < group; g++) {
        float *sg = scores + (size_t)g * len, m = -INFINITY;
        for (int t = 0; t < len; t++) m = sg[t] > m ? sg[t] : m;
        mlc[2 * g] = m, mlc[2 * g + 1] = exp_shift_sum(sg, len, m);
    }
    if (b->fast) {
#ifdef LATENT_HAVE_AVX512_CODE
        chunk_values(oc, scores, len, group, hd, (chunk_src){b->vtile, b->vrows, b->in_place, b->bf16});
#endif
    } else {
        memset(oc, 0, (size_t)group * hd * sizeof(float));
        for (int t = 0; t < len; t++)
            for (int g = 0; g < group; g++) axpy(oc + (size_t)g * hd, scores[(size_t)g * len + t], b->vtile + (size_t)t * hd, hd);
    }
}

/* Rows [r0, r0 + n) (consecutive positions of one sequence), kv head kvh,
 * chunks [c0, c1) (c1 = 0: every chunk up to each row). Chunk by chunk, its
 * key and value rows found once for all the rows, each row's partial is
 * merged into that row's state, so every row sees its chunks in order as
 * if alone. With part < 0 (never split) the rows are finished into att;
 * else (one row) each chunk's partial goes to parts slot part + (c - c0),
 * for merge_split_rows. `states` holds (n + 1) x group x (hd + 2) floats. */
static void item_rows(const attn_job *j, int r0, int n, int kvh, int c0, int c1, int part, chunk_bufs *b,
                      float *states) {
    const latent_config *c = j->c;
    int hd = c->head_dim, qd = latent_config_q_dim(c), group = c->n_heads / c->n_kv_heads;
    size_t stride = (size_t)group * (hd + 2);
    const row_meta *rows = j->rows + r0;
    const latent_seq *s = rows[0].seq;
    int last_pos = rows[n - 1].pos;
    if (!c1) c1 = last_pos / ATT_CHUNK + 1;
    float *tmp = states + (size_t)n * stride;
    if (part < 0)
        for (int i = 0; i < n; i++) state_empty(states + i * stride, states + i * stride + (size_t)group * hd, group, hd);
    for (int ch = c0; ch < c1; ch++) {
        int t0 = ch * ATT_CHUNK, t1 = t0 + ATT_CHUNK < last_pos + 1 ? t0 + ATT_CHUNK : last_pos + 1;
        chunk_rows(j, s, kvh, t0, t1, b);
        for (int i = 0; i < n; i++) {
            int len = (rows[i].pos + 1 < t1 ? rows[i].pos + 1 : t1) - t0; /* causal: keys up to the row */
            if (len <= 0) continue;
            float *oc = part >= 0 ? j->parts + (size_t)(part + ch - c0) * stride : tmp;
            chunk_partial(j, r0 + i, kvh, len, b, oc, oc + (size_t)group * hd);
            if (part < 0) merge_chunk(states + i * stride, states + i * stride + (size_t)group * hd, oc,
                                      oc + (size_t)group * hd, group, hd);
        }
    }
    if (part < 0)
        for (int i = 0; i < n; i++)
            state_finish(j->att + (size_t)(r0 + i) * qd + (size_t)kvh * group * hd, states + i * stride,
                         states + i * stride + (size_t)group * hd, group, hd);
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
#ifdef LATENT_HAVE_AVX512_CODE
    int fast = j->c->head_dim % 16 == 0 && latent_kernels_active()->avx512;
#else
    int fast = 0;
#endif
    const void **rowp = (const void **)(base + j->s->rowp_offset);
    chunk_bufs b = {base + 2 * kv, base, base + kv, rowp, rowp + ATT_CHUNK, fast, fast && it->len == 1,
                    j->rows[it->start].seq->pool->dtype == LATENT_KV_BF16};
    item_rows(j, it->start, it->len, it->kvh, it->c0, it->c1, it->part, &b, base + j->s->state_offset);
}

/* Rows whose chunks were split over items: every chunk's partial, merged
 * in chunk order exactly as item_rows merges them. Items of one split row
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
