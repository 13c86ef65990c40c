/* Causal GQA attention over paged KV caches. */
#include "attention.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "latent/ops.h"
#include "latent/threads.h"

#define BLOCK_ROWS 64     /* query rows per sgemm work item */
#define GEMM_MIN_ROWS 4   /* shorter runs read the pages row by row */

int attn_scratch_reserve(attn_scratch *s, const latent_config *c, int ctx) {
    int threads = latent_get_threads();
    if (ctx <= s->ctx && threads <= s->threads) return 0;
    if (ctx < s->ctx) ctx = s->ctx;
    /* gathered K and V of one kv head, plus a block of scores (BLOCK_ROWS
     * rows for a run, or one row for every q head of a group) */
    int group = c->n_heads / c->n_kv_heads;
    size_t per = (size_t)2 * ctx * c->head_dim + (size_t)(BLOCK_ROWS > group ? BLOCK_ROWS : group) * ctx;
    float *buf = malloc(per * threads * sizeof(float));
    if (!buf) return -1;
    free(s->buf);
    s->buf = buf, s->per_thread = per, s->threads = threads, s->ctx = ctx;
    return 0;
}

void attn_scratch_free(attn_scratch *s) {
    free(s->buf);
    memset(s, 0, sizeof *s);
}

typedef struct {
    int start, len;   /* rows [start, start+len) of one sequence, consecutive positions */
    int kvh;          /* the kv head this item serves (with all its q heads) */
} attn_item;

typedef struct {
    float *att;
    const float *q;
    const row_meta *rows;
    const latent_config *c;
    attn_scratch *s;
    attn_item *items;
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

/* Rows one at a time, reading k, v straight from the pages: each key and
 * value row is loaded once for every q head of its group. */
static void item_rows(const attn_job *j, const attn_item *it, float *scores) {
    const latent_config *c = j->c;
    int hd = c->head_dim, qd = latent_config_q_dim(c), group = c->n_heads / c->n_kv_heads;
    float scale = 1.0f / sqrtf((float)hd);
    for (int r = it->start; r < it->start + it->len; r++) {
        const latent_seq *s = j->rows[r].seq;
        const latent_kv_pool *pool = s->pool;
        int P = pool->page_tokens, len = j->rows[r].pos + 1;
        const float *q0 = j->q + (size_t)r * qd + (size_t)it->kvh * group * hd;
        /* scores (group, len) */
        for (int t = 0; t < len; t++) {
            const float *kt = latent_kv_row(pool, pool->k, s->pages[t / P], j->layer, t % P) + it->kvh * hd;
            for (int g = 0; g < group; g++) scores[(size_t)g * len + t] = dot(q0 + (size_t)g * hd, kt, hd) * scale;
        }
        for (int g = 0; g < group; g++) softmax_forward(scores + (size_t)g * len, len);
        float *out0 = j->att + (size_t)r * qd + (size_t)it->kvh * group * hd;
        memset(out0, 0, (size_t)group * hd * sizeof(float));
        for (int t = 0; t < len; t++) {
            const float *vt = latent_kv_row(pool, pool->v, s->pages[t / P], j->layer, t % P) + it->kvh * hd;
            for (int g = 0; g < group; g++) axpy(out0 + (size_t)g * hd, scores[(size_t)g * len + t], vt, hd);
        }
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
        memcpy(kbuf + (size_t)t * hd, latent_kv_row(pool, pool->k, s->pages[t / P], j->layer, t % P) + it->kvh * hd, hd * sizeof(float));
        memcpy(vbuf + (size_t)t * hd, latent_kv_row(pool, pool->v, s->pages[t / P], j->layer, t % P) + it->kvh * hd, hd * sizeof(float));
    }
    float scale = 1.0f / sqrtf((float)hd);
    for (int h = it->kvh * group; h < (it->kvh + 1) * group; h++) {
        const float *qh = j->q + (size_t)it->start * qd + (size_t)h * hd;
        /* scores (len_rows, len) = scale * Q_h K^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, it->len, len, hd, scale, qh, qd, kbuf, hd, 0.0f, scores, len);
        for (int i = 0; i < it->len; i++) {
            int valid = first->pos + i + 1; /* causal: keys 0..pos */
            float *row = scores + (size_t)i * len;
            softmax_forward(row, valid);
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
    if (it->len >= GEMM_MIN_ROWS) item_gemm(j, it, base, base + kv, base + 2 * kv);
    else item_rows(j, it, base + 2 * kv);
}

void attention_forward(float *att, const float *q, const row_meta *rows, int n, int layer,
                       const latent_config *c, attn_scratch *s) {
    /* Work items: runs of consecutive rows of one sequence, cut into blocks,
     * times the kv heads. Single rows stay items of their own. */
    int max_items = (n + 1) * c->n_kv_heads;
    attn_item stack_items[512], *items = max_items <= 512 ? stack_items : malloc(max_items * sizeof *items);
    int n_items = 0;
    for (int r = 0; r < n;) {
        int len = 1;
        while (r + len < n && len < BLOCK_ROWS && rows[r + len].seq == rows[r].seq &&
               rows[r + len].pos == rows[r].pos + len)
            len++;
        for (int h = 0; h < c->n_kv_heads; h++) items[n_items++] = (attn_item){r, len, h};
        r += len;
    }
    attn_job j = {att, q, rows, c, s, items, layer, atomic_fetch_add(&job_counter, 1) + 1, 0};
    latent_parallel_for(attn_task, &j, n_items);
    if (items != stack_items) free(items);
}
