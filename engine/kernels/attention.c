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
#define MIN_SPLIT_KEYS 32 /* fewest keys in one range of a split row */

struct attn_item_buf {
    int start, len;   /* rows [start, start+len) of one sequence, consecutive positions */
    int kvh;          /* the kv head this item serves (with all its q heads) */
    int t0, t1;       /* keys [t0, t1) of a single-row item; t1 = 0: all up to the row */
    int part;         /* slot for a partial result (a key range of a split row), or -1 */
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
    /* then 2 * ctx row pointers (8 bytes each: 4 floats per key) */
    size_t per = rowp_offset + (size_t)4 * ctx;
    per = (per + 15) / 16 * 16; /* each thread's slot 64-byte aligned */
    float *buf = latent_step_realloc(NULL, per * threads * sizeof(float));
    if (!buf) return -1;
    free(s->buf);
    s->buf = buf, s->per_thread = per, s->threads = threads, s->ctx = ctx, s->rowp_offset = rowp_offset;
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

/* One row over keys [t0, t1), reading k, v straight from the pages: each key
 * and value row is loaded once for every q head of its group. Writes the
 * normalized output, or for a split row (part >= 0) the unnormalized output
 * with its running max and sum, merged by merge_parts. `rowp` has room for
 * 2 * (t1 - t0) pointers. */
static void item_row(const attn_job *j, const attn_item *it, float *scores, const float **rowp, float *kbuf,
                     float *vbuf) {
    const latent_config *c = j->c;
    int hd = c->head_dim, qd = latent_config_q_dim(c), group = c->n_heads / c->n_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    int r = it->start;
    const latent_seq *s = j->rows[r].seq;
    const latent_kv_pool *pool = s->pool;
    int P = pool->page_tokens, t0 = it->t0, t1 = it->t1 ? it->t1 : j->rows[r].pos + 1, len = t1 - t0;
    const float *q0 = j->q + (size_t)r * qd + (size_t)it->kvh * group * hd;
    const void **krows = (const void **)rowp, **vrows = (const void **)rowp + len;
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
            krows[t - t0] = (const char *)kr + (size_t)it->kvh * hd * pool->elem_bytes;
            vrows[t - t0] = (const char *)vr + (size_t)it->kvh * hd * pool->elem_bytes;
            continue;
        }
        /* generic path, bf16 pages: the row widened once into the thread's gather buffers */
        float *kd = kbuf + (size_t)(t - t0) * hd, *vd = vbuf + (size_t)(t - t0) * hd;
        latent_kv_load(pool, kr, it->kvh * hd, kd, hd);
        latent_kv_load(pool, vr, it->kvh * hd, vd, hd);
        krows[t - t0] = kd, vrows[t - t0] = vd;
    }
    float *out0 = it->part >= 0 ? j->parts + (size_t)it->part * group * (hd + 2)
                                : j->att + (size_t)r * qd + (size_t)it->kvh * group * hd;
    /* scores (group, len), then their exponentials, then the weighted values */
    if (fast) {
#ifdef LATENT_HAVE_AVX512_CODE
        row_scores(scores, len, q0, group, hd, krows, vrows, scale, bf16);
#endif
    } else {
        for (int t = 0; t < len; t++)
            for (int g = 0; g < group; g++) scores[(size_t)g * len + t] = dot(q0 + (size_t)g * hd, (const float *)krows[t], hd) * scale;
    }
    float mx[group], sum[group];
    for (int g = 0; g < group; g++) {
        float *sg = scores + (size_t)g * len, m = -INFINITY;
        for (int t = 0; t < len; t++) m = sg[t] > m ? sg[t] : m;
        mx[g] = m, sum[g] = exp_shift_sum(sg, len, m);
    }
    if (fast) {
#ifdef LATENT_HAVE_AVX512_CODE
        row_values(out0, scores, len, group, hd, vrows, bf16);
#endif
    } else {
        memset(out0, 0, (size_t)group * hd * sizeof(float));
        for (int t = 0; t < len; t++)
            for (int g = 0; g < group; g++) axpy(out0 + (size_t)g * hd, scores[(size_t)g * len + t], (const float *)vrows[t], hd);
    }
    if (it->part >= 0) {
        for (int g = 0; g < group; g++) out0[(size_t)group * hd + 2 * g] = mx[g], out0[(size_t)group * hd + 2 * g + 1] = sum[g];
        return;
    }
    for (int g = 0; g < group; g++) {
        float inv = 1.0f / sum[g];
        for (int i = 0; i < hd; i++) out0[(size_t)g * hd + i] *= inv;
    }
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
    if (it->len >= GEMM_MIN_ROWS) {
        item_gemm(j, it, base, base + kv, base + 2 * kv);
        return;
    }
    for (int r = it->start; r < it->start + it->len; r++) {
        attn_item one = *it;
        one.start = r, one.len = 1;
        /* row pointers after the scores; bf16 rows widened into the gather buffers */
        item_row(j, &one, base + 2 * kv, (const float **)(base + j->s->rowp_offset), base, base + kv);
    }
}

/* Combines the key ranges of split rows: items first..first+n_split-1 of
 * each split row, with their kv head, are consecutive. */
static void merge_parts(const attn_job *j, int n_items) {
    const latent_config *c = j->c;
    int hd = c->head_dim, qd = latent_config_q_dim(c), group = c->n_heads / c->n_kv_heads;
    size_t stride = (size_t)group * (hd + 2);
    for (int i = 0; i < n_items;) {
        const attn_item *it = &j->items[i];
        if (it->part < 0) { i++; continue; }
        int k = i;
        while (k < n_items && j->items[k].part >= 0 && j->items[k].start == it->start && j->items[k].kvh == it->kvh) k++;
        float *out0 = j->att + (size_t)it->start * qd + (size_t)it->kvh * group * hd;
        for (int g = 0; g < group; g++) {
            float m = -INFINITY, l = 0;
            for (int p = i; p < k; p++) {
                const float *pp = j->parts + (size_t)j->items[p].part * stride + (size_t)group * hd + 2 * g;
                m = pp[0] > m ? pp[0] : m;
            }
            float *o = out0 + (size_t)g * hd;
            memset(o, 0, hd * sizeof(float));
            for (int p = i; p < k; p++) {
                const float *part = j->parts + (size_t)j->items[p].part * stride;
                float w = expf(part[(size_t)group * hd + 2 * g] - m);
                l += w * part[(size_t)group * hd + 2 * g + 1];
                axpy(o, w, part + (size_t)g * hd, hd);
            }
            float inv = 1.0f / l;
            for (int e = 0; e < hd; e++) o[e] *= inv;
        }
        i = k;
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

void latent_attention_forward(float *att, const float *q, const row_meta *rows, int n, int layer,
                       const latent_config *c, attn_scratch *s) {
    /* Work items: runs of consecutive rows of one sequence, cut into blocks,
     * times the kv heads. Single rows stay items of their own; when they are
     * too few to keep every thread busy (decoding one or two sequences, or a
     * recurrent prompt token by token), their keys are split into ranges. */
    int singles = 0;
    for (int r = 0, len; r < n; r += len)
        if ((len = run_length(rows, r, n)) < GEMM_MIN_ROWS) singles += len;
    int units = singles * c->n_kv_heads, want = 4 * latent_get_threads();
    int split = units > 0 && units < want ? (want + units - 1) / units : 1;
    int max_items = (n + 1) * c->n_kv_heads * split, group = c->n_heads / c->n_kv_heads;
    /* sized by latent_attn_scratch_reserve for these rows and threads */
    attn_item stack_items[512], *items = max_items <= 512 ? stack_items : (attn_item *)s->items;
    float *parts = NULL;
    if (split > 1) {
        size_t need = (size_t)units * split * group * (c->head_dim + 2);
        if (need > s->parts_cap) {
            float *p = realloc(s->parts, need * sizeof(float));
            if (p) s->parts = p, s->parts_cap = need;
        }
        if (need <= s->parts_cap) parts = s->parts;
        else split = 1; /* out of memory for the partial results: do not split */
    }
    int n_items = 0, n_parts = 0;
    for (int r = 0; r < n;) {
        int len = run_length(rows, r, n);
        if (len >= GEMM_MIN_ROWS) {
            for (int h = 0; h < c->n_kv_heads; h++) items[n_items++] = (attn_item){r, len, h, 0, 0, -1};
            r += len;
            continue;
        }
        for (int i = r; i < r + len; i++) {
            int keys = rows[i].pos + 1;
            /* ranges of at least MIN_SPLIT_KEYS keys: shorter ones cost more to merge than they save */
            int ranges = split < keys / MIN_SPLIT_KEYS ? split : keys / MIN_SPLIT_KEYS;
            for (int h = 0; h < c->n_kv_heads; h++) {
                if (ranges <= 1) {
                    items[n_items++] = (attn_item){i, 1, h, 0, 0, -1};
                    continue;
                }
                for (int k = 0; k < ranges; k++)
                    items[n_items++] = (attn_item){i, 1, h, (int)((long)keys * k / ranges),
                                                   (int)((long)keys * (k + 1) / ranges), n_parts++};
            }
        }
        r += len;
    }
    attn_job j = {att, q, rows, c, s, items, parts, layer, atomic_fetch_add(&job_counter, 1) + 1, 0};
    latent_parallel_for(attn_task, &j, n_items);
    if (n_parts > 0) merge_parts(&j, n_items);
}
