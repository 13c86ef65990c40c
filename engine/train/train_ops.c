/* The trainer's ops (train_ops.h): forward and backward of every step of the
 * forward, over row-major activations, spread over the engine threads.
 *
 * Determinism: every output element is computed by one task whose extent
 * depends only on the sizes and the thread count, and scalar reductions sum
 * per-row partials in row order, so a run repeats bit for bit. */
#include "train/train_ops.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/simd_exp.h"
#include "latent/threads.h"
#include "train/train_ops_private.h"

/* ---- embedding ---------------------------------------------------------- */

void latent_tr_embedding_forward(float *out, const int32_t *tokens, const float *embed, int n, int d) {
    for (int r = 0; r < n; r++) memcpy(out + (size_t)r * d, embed + (size_t)tokens[r] * d, d * sizeof(float));
}

typedef struct {
    float *dembed;
    const float *dout;
    const int32_t *tokens;
    int n, d, chunk;
} emb_job;

/* Columns [c0, c1) of every row: no two tasks touch the same float. */
static void emb_bwd_task(void *ctx, int task) {
    const emb_job *j = ctx;
    int c0 = task * j->chunk, c1 = c0 + j->chunk > j->d ? j->d : c0 + j->chunk;
    for (int r = 0; r < j->n; r++) {
        float *de = j->dembed + (size_t)j->tokens[r] * j->d;
        const float *g = j->dout + (size_t)r * j->d;
        for (int c = c0; c < c1; c++) de[c] += g[c];
    }
}

void latent_tr_embedding_backward(float *dembed, const float *dout, const int32_t *tokens, int n, int d) {
    /* dembed[tokens[r]] += dout[r]: rows may repeat a token, so split columns. */
    int tasks = d >= 64 ? latent_get_threads() : 1;
    emb_job j = {dembed, dout, tokens, n, d, ((d + tasks - 1) / tasks + 15) / 16 * 16};
    latent_parallel_for(emb_bwd_task, &j, tasks);
}

/* ---- linear -------------------------------------------------------------
 * Under bf16 (latent_tr_gemm_bf16) every weight's panels come from the
 * step's slots and an input is rounded, or packed as the weight gradients'
 * operand, once before the tasks; a task's own rows of dY go through its
 * scratch, reserved before the section. Without a context, F32. */

typedef struct {
    tr_gemm *g;
    float *out;
    const float *x, *w, *bias;
    int n, in_dim, out_dim, chunk;
    const uint16_t *xb, *wp; /* bf16: x rounded and W packed, before the tasks (or NULL) */
} lin_fwd_job;

/* out[r0:r1] = x[r0:r1] W^T, in bf16 from the pre-rounded rows when there are some */
static void rows_times_wt(tr_gemm *g, int task, float *out, const float *x, const uint16_t *xb, const float *w,
                          const uint16_t *wp, int r0, int r1, int in_dim, int out_dim) {
    if (xb && wp)
        latent_tr_gemm_rounded(xb + (size_t)r0 * ((in_dim + 1) / 2 * 2), r1 - r0, out_dim, in_dim, wp,
                               out + (size_t)r0 * out_dim, out_dim);
    else
        latent_tr_gemm(g, task, 0, 1, r1 - r0, out_dim, in_dim, x + (size_t)r0 * in_dim, in_dim, w, in_dim, 0,
                       out + (size_t)r0 * out_dim, out_dim);
}

/* dx[r0:r1] += dout[r0:r1] W, in bf16 through W^T's panels when packed */
static void rows_times_w(tr_gemm *g, int task, float *dx, const float *dout, const float *w, const uint16_t *wtp, int r0,
                         int r1, int in_dim, int out_dim) {
    const float *gr = dout + (size_t)r0 * out_dim;
    float *o = dx + (size_t)r0 * in_dim;
    if (wtp) latent_tr_gemm_b(g, task, 0, r1 - r0, in_dim, out_dim, gr, out_dim, wtp, 1, o, in_dim);
    else latent_tr_gemm(g, task, 0, 0, r1 - r0, in_dim, out_dim, gr, out_dim, w, in_dim, 1, o, in_dim);
}

static void lin_fwd_task(void *ctx, int task) {
    const lin_fwd_job *j = ctx;
    int r0 = task * j->chunk, r1 = r0 + j->chunk > j->n ? j->n : r0 + j->chunk;
    if (r0 >= r1) return;
    float *o = j->out + (size_t)r0 * j->out_dim;
    rows_times_wt(j->g, task, j->out, j->x, j->xb, j->w, j->wp, r0, r1, j->in_dim, j->out_dim);
    if (j->bias)
        for (int r = r0; r < r1; r++, o += j->out_dim)
            for (int c = 0; c < j->out_dim; c++) o[c] += j->bias[c];
}

/* Row tasks of a product over n rows: each task reads all of W (it stays in
 * cache); two row chunks per thread, so the caller takes over what a
 * descheduled worker has not claimed (the machine is shared). */
static int row_tasks_for(int n) {
    int threads = latent_get_threads();
    return n >= 256 * threads ? 2 * threads : n >= 32 * threads ? threads : 1;
}

void latent_tr_linear_forward(tr_gemm *g, float *out, const float *x, const float *w, const float *bias, int n,
                              int in_dim, int out_dim) {
    int tasks = row_tasks_for(n);
    lin_fwd_job j = {g, out, x, w, bias, n, in_dim, out_dim, (n + tasks - 1) / tasks, NULL, NULL};
    if (latent_tr_gemm_bf16(g)) {
        j.wp = latent_tr_weight_panels(g, 1, w, in_dim, out_dim, in_dim);
        j.xb = j.wp ? latent_tr_round_input(g, x, n, in_dim) : NULL;
    }
    latent_parallel_for(lin_fwd_task, &j, tasks);
}

typedef struct {
    tr_gemm *g;
    float *dx, *dw, *dbias;
    const float *dout, *x, *w;
    int n, in_dim, out_dim;
    int dx_tasks, dx_chunk, dw_chunk;
    const uint16_t *xp;       /* bf16: x packed once for every weight-gradient task, or NULL */
    const uint16_t *wtp;      /* bf16: W^T's panels for the input gradient, or NULL */
} lin_bwd_job;

/* dw[o0:o1] += dout[:, o0:o1]^T x, with x pre-packed under bf16 */
static void dw_product(tr_gemm *g, int task, const float *dout, int od, const float *x, const uint16_t *xp, int o0,
                       int o1, int n, int in_dim, float *dw) {
    if (xp) latent_tr_gemm_b(g, task, 1, o1 - o0, in_dim, n, dout + o0, od, xp, 1, dw + (size_t)o0 * in_dim, in_dim);
    else latent_tr_gemm(g, task, 1, 0, o1 - o0, in_dim, n, dout + o0, od, x, in_dim, 1, dw + (size_t)o0 * in_dim, in_dim);
}

static void lin_bwd_task(void *ctx, int task) {
    const lin_bwd_job *j = ctx;
    if (task < j->dx_tasks) {
        /* dx[r0:r1] += dout[r0:r1] W */
        int r0 = task * j->dx_chunk, r1 = r0 + j->dx_chunk > j->n ? j->n : r0 + j->dx_chunk;
        if (r0 >= r1) return;
        rows_times_w(j->g, task, j->dx, j->dout, j->w, j->wtp, r0, r1, j->in_dim, j->out_dim);
        return;
    }
    /* dw[o0:o1] += dout[:, o0:o1]^T x; dbias[o0:o1] += column sums */
    int part = task - j->dx_tasks;
    int o0 = part * j->dw_chunk, o1 = o0 + j->dw_chunk > j->out_dim ? j->out_dim : o0 + j->dw_chunk;
    if (o0 >= o1) return;
    if (j->dw) dw_product(j->g, task, j->dout, j->out_dim, j->x, j->xp, o0, o1, j->n, j->in_dim, j->dw);
    if (j->dbias)
        for (int r = 0; r < j->n; r++) {
            const float *gr = j->dout + (size_t)r * j->out_dim;
            for (int o = o0; o < o1; o++) j->dbias[o] += gr[o];
        }
}

/* Scratch of a task that rounds dY's rows (M of out_dim) or dY^T's (M of n). */
static size_t dy_scratch(int dx_chunk, int out_dim, int dw_chunk, int n) {
    size_t a = latent_tr_gemm_b_scratch(dx_chunk, out_dim), b = latent_tr_gemm_b_scratch(dw_chunk, n);
    return a > b ? a : b;
}

void latent_tr_linear_backward(tr_gemm *g, float *dx, float *dw, float *dbias, const float *dout, const float *x,
                               const float *w, int n, int in_dim, int out_dim) {
    int threads = latent_get_threads();
    lin_bwd_job j = {g, dx, dw, dbias, dout, x, w, n, in_dim, out_dim, 0, 1, 1, NULL, NULL};
    /* bf16: x is the packed operand of every weight-gradient task: pack it once */
    if (dw && latent_tr_gemm_bf16(g)) j.xp = latent_tr_pack_b(g, 0, x, in_dim, in_dim, n);
    if (dx && latent_tr_gemm_bf16(g)) j.wtp = latent_tr_weight_panels(g, 0, w, in_dim, in_dim, out_dim);
    int dw_tasks = 0;
    if (dx) {
        j.dx_tasks = row_tasks_for(n);
        j.dx_chunk = (n + j.dx_tasks - 1) / j.dx_tasks;
    }
    if (dw || dbias) {
        dw_tasks = out_dim >= 32 * threads ? threads : 1;
        j.dw_chunk = ((out_dim + dw_tasks - 1) / dw_tasks + 15) / 16 * 16;
    }
    latent_tr_gemm_reserve(g, j.dx_tasks + dw_tasks, dy_scratch(dx ? j.dx_chunk : 0, out_dim, dw ? j.dw_chunk : 0, n));
    latent_parallel_for(lin_bwd_task, &j, j.dx_tasks + dw_tasks);
}

#define MULTI_MAX 4

typedef struct {
    tr_gemm *g;
    float *const *outs;
    float *dx;
    float *const *dws;
    const float *const *douts;
    const float *x;
    const float *const *ws;
    const int *out_dims;
    int k, n, in_dim, row_tasks, row_chunk, dw_tasks;
    int per[MULTI_MAX]; /* dW tasks of each matrix, as tr_linear_backward splits it */
    const uint16_t *xp; /* bf16: x packed once for every weight-gradient task, or NULL */
    const uint16_t *xb; /* bf16: x rounded once for every forward product, or NULL */
    const uint16_t *wp[MULTI_MAX]; /* bf16: the weights' panels (forward: W, backward: W^T), or NULL */
} multi_job;

static void multi_fwd_task(void *ctx, int task) {
    const multi_job *j = ctx;
    int r0 = task * j->row_chunk, r1 = r0 + j->row_chunk > j->n ? j->n : r0 + j->row_chunk;
    if (r0 >= r1) return;
    for (int i = 0; i < j->k; i++)
        rows_times_wt(j->g, task, j->outs[i], j->x, j->xb, j->ws[i], j->wp[i], r0, r1, j->in_dim, j->out_dims[i]);
}

void latent_tr_linear_forward_multi(tr_gemm *g, float *const *outs, const float *x, const float *const *ws,
                                    const int *out_dims, int k, int n, int in_dim) {
    if (k > MULTI_MAX) abort();
    int tasks = row_tasks_for(n);
    multi_job j = {.g = g, .outs = outs, .x = x, .ws = ws, .out_dims = out_dims, .k = k, .n = n, .in_dim = in_dim,
                   .row_chunk = (n + tasks - 1) / tasks};
    if (latent_tr_gemm_bf16(g)) {
        int packed = 1;
        for (int i = 0; i < k; i++)
            packed &= (j.wp[i] = latent_tr_weight_panels(g, 1, ws[i], in_dim, out_dims[i], in_dim)) != NULL;
        j.xb = packed ? latent_tr_round_input(g, x, n, in_dim) : NULL;
    }
    latent_parallel_for(multi_fwd_task, &j, tasks);
}

/* dW_i's rows [o0, o1) of weight-gradient task `part` of matrix i (the same
 * chunks as tr_linear_backward's) */
static int multi_dw_chunk(const multi_job *j, int i) {
    int od = j->out_dims[i], per = j->per[i];
    return ((od + per - 1) / per + 15) / 16 * 16;
}

static void multi_bwd_task(void *ctx, int task) {
    const multi_job *j = ctx;
    if (task < j->row_tasks) {
        /* dx[r0:r1] += douts[i][r0:r1] W_i, i in order */
        int r0 = task * j->row_chunk, r1 = r0 + j->row_chunk > j->n ? j->n : r0 + j->row_chunk;
        if (r0 >= r1) return;
        for (int i = 0; i < j->k; i++)
            rows_times_w(j->g, task, j->dx, j->douts[i], j->ws[i], j->wp[i], r0, r1, j->in_dim, j->out_dims[i]);
        return;
    }
    /* dW_i[o0:o1] += douts[i][:, o0:o1]^T x */
    int part = task - j->row_tasks, i = 0;
    while (part >= j->per[i]) part -= j->per[i++];
    int od = j->out_dims[i], chunk = multi_dw_chunk(j, i);
    int o0 = part * chunk, o1 = o0 + chunk > od ? od : o0 + chunk;
    if (o0 >= o1) return;
    dw_product(j->g, task, j->douts[i], od, j->x, j->xp, o0, o1, j->n, j->in_dim, j->dws[i]);
}

void latent_tr_linear_backward_multi(tr_gemm *g, float *dx, float *const *dws, const float *const *douts,
                                     const float *x, const float *const *ws, const int *out_dims, int k, int n,
                                     int in_dim) {
    if (k > MULTI_MAX) abort();
    int threads = latent_get_threads(), tasks = row_tasks_for(n);
    multi_job j = {.g = g, .dx = dx, .dws = dws, .douts = douts, .x = x, .ws = ws, .out_dims = out_dims, .k = k,
                   .n = n, .in_dim = in_dim, .row_tasks = tasks, .row_chunk = (n + tasks - 1) / tasks};
    for (int i = 0; i < k; i++) j.dw_tasks += j.per[i] = out_dims[i] >= 32 * threads ? threads : 1;
    if (latent_tr_gemm_bf16(g)) j.xp = latent_tr_pack_b(g, 0, x, in_dim, in_dim, n);
    if (dx && latent_tr_gemm_bf16(g))
        for (int i = 0; i < k; i++) j.wp[i] = latent_tr_weight_panels(g, 0, ws[i], in_dim, in_dim, out_dims[i]);
    size_t scratch = 0;
    for (int i = 0; i < k; i++) {
        size_t s = dy_scratch(j.row_chunk, out_dims[i], multi_dw_chunk(&j, i), n);
        scratch = s > scratch ? s : scratch;
    }
    latent_tr_gemm_reserve(g, j.row_tasks + j.dw_tasks, scratch);
    latent_parallel_for(multi_bwd_task, &j, j.row_tasks + j.dw_tasks);
}

/* ---- RMSNorm ------------------------------------------------------------ */

typedef struct {
    float *out, *rstd, *dx, *dw;
    const float *x, *w, *dout;
    int n, d;
    float eps;
    int chunk;
} norm_job;

static void norm_fwd_rows(void *ctx, int r0, int r1) {
    const norm_job *j = ctx;
    int d = j->d;
    for (int r = r0; r < r1; r++) {
        const float *xr = j->x + (size_t)r * d;
        float *o = j->out + (size_t)r * d;
        double ss = 0;
        for (int i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / d + j->eps));
        j->rstd[r] = inv;
        for (int i = 0; i < d; i++) o[i] = xr[i] * inv * j->w[i];
    }
}

void latent_tr_rmsnorm_forward(float *out, float *rstd, const float *x, const float *w, int n, int d, float eps) {
    norm_job j = {.out = out, .rstd = rstd, .x = x, .w = w, .d = d, .eps = eps};
    latent_tr_par_rows(norm_fwd_rows, &j, n);
}

static void norm_bwd_rows(void *ctx, int r0, int r1) {
    const norm_job *j = ctx;
    int d = j->d;
    for (int r = r0; r < r1; r++) {
        const float *xr = j->x + (size_t)r * d, *g = j->dout + (size_t)r * d;
        float *dx = j->dx + (size_t)r * d;
        float rs = j->rstd[r];
        /* out = x * rstd * w: d/dx of rstd = -rstd^3 x / d */
        float dot = 0;
        for (int i = 0; i < d; i++) dot += g[i] * j->w[i] * xr[i];
        float c = dot * rs * rs * rs / d;
        for (int i = 0; i < d; i++) dx[i] += rs * g[i] * j->w[i] - c * xr[i];
    }
}

static void norm_dw_task(void *ctx, int task) {
    const norm_job *j = ctx;
    int c0 = task * j->chunk, c1 = c0 + j->chunk > j->d ? j->d : c0 + j->chunk;
    /* dw += sum_rows dout * x * rstd, columns [c0, c1) in row order */
    for (int r = 0; r < j->n; r++) {
        const float *xr = j->x + (size_t)r * j->d, *g = j->dout + (size_t)r * j->d;
        float rs = j->rstd[r];
        for (int c = c0; c < c1; c++) j->dw[c] += g[c] * xr[c] * rs;
    }
}

void latent_tr_rmsnorm_backward(float *dx, float *dw, const float *dout, const float *x, const float *rstd,
                      const float *w, int n, int d) {
    norm_job j = {.rstd = (float *)rstd, .dx = dx, .dw = dw, .x = x, .w = w, .dout = dout, .n = n, .d = d};
    if (dx) latent_tr_par_rows(norm_bwd_rows, &j, n);
    if (dw) {
        int tasks = d >= 64 ? latent_get_threads() : 1;
        j.chunk = ((d + tasks - 1) / tasks + 15) / 16 * 16;
        latent_parallel_for(norm_dw_task, &j, tasks);
    }
}

/* ---- RoPE --------------------------------------------------------------- */

void latent_tr_rope_tables(float *cos_t, float *sin_t, int n_pos, int head_dim, float theta) {
    int half = head_dim / 2;
    for (int p = 0; p < n_pos; p++) latent_rope_tables(cos_t + (size_t)p * half, sin_t + (size_t)p * half, head_dim, p, theta);
}

typedef struct {
    float *x;
    const int *pos;
    const float *c, *s;
    int n_heads, hd;
} rope_job;

static void rope_fwd_rows(void *ctx, int r0, int r1) {
    const rope_job *j = ctx;
    int half = j->hd / 2;
    for (int r = r0; r < r1; r++)
        latent_rope_forward(j->x + (size_t)r * j->n_heads * j->hd, j->n_heads, j->hd, j->c + (size_t)j->pos[r] * half,
                     j->s + (size_t)j->pos[r] * half);
}

void latent_tr_rope_forward(float *x, const int *pos, const float *cos_t, const float *sin_t, int n, int n_heads,
                        int head_dim) {
    rope_job j = {x, pos, cos_t, sin_t, n_heads, head_dim};
    latent_tr_par_rows(rope_fwd_rows, &j, n);
}

static void rope_bwd_rows(void *ctx, int r0, int r1) {
    const rope_job *j = ctx;
    int half = j->hd / 2;
    for (int r = r0; r < r1; r++) {
        const float *c = j->c + (size_t)j->pos[r] * half, *s = j->s + (size_t)j->pos[r] * half;
        for (int h = 0; h < j->n_heads; h++) {
            float *v = j->x + ((size_t)r * j->n_heads + h) * j->hd;
            /* forward: a' = a c - b s, b' = b c + a s; backward is the transpose */
            for (int i = 0; i < half; i++) {
                float ga = v[i], gb = v[i + half];
                v[i] = ga * c[i] + gb * s[i];
                v[i + half] = gb * c[i] - ga * s[i];
            }
        }
    }
}

void latent_tr_rope_backward(float *dx, const int *pos, const float *cos_t, const float *sin_t, int n, int n_heads,
                   int head_dim) {
    rope_job j = {dx, pos, cos_t, sin_t, n_heads, head_dim};
    latent_tr_par_rows(rope_bwd_rows, &j, n);
}

/* ---- attention ---------------------------------------------------------- */

#define ATT_QB 64 /* query rows per block: keys up to the block's last position */

typedef struct {
    float *out, *prob, *dq, *dk, *dv;
    const float *q, *k, *v, *dout;
    const int *qpos;
    int B, nq, T, H, KV, hd;
} att_job;

static void att_fwd_task(void *ctx, int task) {
    const att_job *j = ctx;
    int b = task / j->H, h = task % j->H, g = h / (j->H / j->KV);
    int qd = j->H * j->hd, kvd = j->KV * j->hd;
    float scale = 1.0f / sqrtf((float)j->hd);
    const float *kb = j->k + (size_t)b * j->T * kvd + (size_t)g * j->hd;
    const float *vb = j->v + (size_t)b * j->T * kvd + (size_t)g * j->hd;
    float *P = j->prob + ((size_t)b * j->H + h) * j->nq * j->T;
    for (int j0 = 0; j0 < j->nq; j0 += ATT_QB) {
        int j1 = j0 + ATT_QB > j->nq ? j->nq : j0 + ATT_QB;
        int kmax = j->qpos[j1 - 1] + 1;
        const float *qb = j->q + ((size_t)b * j->nq + j0) * qd + (size_t)h * j->hd;
        float *Pb = P + (size_t)j0 * j->T;
        /* scores = q k^T / sqrt(hd) over keys [0, kmax) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j1 - j0, kmax, j->hd, scale, qb, qd, kb, kvd, 0.0f,
                    Pb, j->T);
        for (int jj = j0; jj < j1; jj++) {
            float *p = P + (size_t)jj * j->T;
            int np = j->qpos[jj] + 1;
            float mx = -INFINITY;
            for (int i = 0; i < np; i++) mx = p[i] > mx ? p[i] : mx;
            float sum = 0;
#pragma omp simd reduction(+ : sum)
            for (int i = 0; i < np; i++) {
                p[i] = fexp(p[i] - mx);
                sum += p[i];
            }
            float inv = 1.0f / sum;
            for (int i = 0; i < np; i++) p[i] *= inv;
            for (int i = np; i < kmax; i++) p[i] = 0.0f; /* causal mask */
        }
        /* out = P v */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, j1 - j0, j->hd, kmax, 1.0f, Pb, j->T, vb, kvd, 0.0f,
                    j->out + ((size_t)b * j->nq + j0) * qd + (size_t)h * j->hd, qd);
    }
}

void latent_tr_attention_forward(float *out, float *prob, const float *q, const float *k, const float *v,
                             const int *qpos, int B, int nq, int T, int n_heads, int n_kv_heads, int hd) {
    att_job j = {.out = out, .prob = prob, .q = q, .k = k, .v = v, .qpos = qpos, .B = B, .nq = nq, .T = T,
                 .H = n_heads, .KV = n_kv_heads, .hd = hd};
    latent_parallel_for(att_fwd_task, &j, B * n_heads);
}

static void att_bwd_task(void *ctx, int task) {
    const att_job *j = ctx;
    /* One task per (sequence, kv head): it alone writes that head's dk, dv. */
    int b = task / j->KV, g = task % j->KV, grp = j->H / j->KV;
    int qd = j->H * j->hd, kvd = j->KV * j->hd;
    float scale = 1.0f / sqrtf((float)j->hd);
    const float *kb = j->k + (size_t)b * j->T * kvd + (size_t)g * j->hd;
    const float *vb = j->v + (size_t)b * j->T * kvd + (size_t)g * j->hd;
    float *dkb = j->dk + (size_t)b * j->T * kvd + (size_t)g * j->hd;
    float *dvb = j->dv + (size_t)b * j->T * kvd + (size_t)g * j->hd;
    float *dP = malloc((size_t)ATT_QB * j->T * sizeof(float));
    if (!dP) abort();
    for (int h = g * grp; h < (g + 1) * grp; h++) {
        const float *P = j->prob + ((size_t)b * j->H + h) * j->nq * j->T;
        for (int j0 = 0; j0 < j->nq; j0 += ATT_QB) {
            int j1 = j0 + ATT_QB > j->nq ? j->nq : j0 + ATT_QB, m = j1 - j0;
            int kmax = j->qpos[j1 - 1] + 1;
            size_t qoff = ((size_t)b * j->nq + j0) * qd + (size_t)h * j->hd;
            const float *Pb = P + (size_t)j0 * j->T;
            /* out = P v: dP = dout v^T, dv += P^T dout */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, kmax, j->hd, 1.0f, j->dout + qoff, qd, vb, kvd,
                        0.0f, dP, kmax);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kmax, j->hd, m, 1.0f, Pb, j->T, j->dout + qoff, qd,
                        1.0f, dvb, kvd);
            /* P = softmax(S): dS = P * (dP - sum(P dP)), times the score scale */
            for (int jj = 0; jj < m; jj++) {
                const float *p = Pb + (size_t)jj * j->T;
                float *ds = dP + (size_t)jj * kmax;
                int np = j->qpos[j0 + jj] + 1;
                float dot = 0;
                for (int i = 0; i < np; i++) dot += p[i] * ds[i];
                for (int i = 0; i < np; i++) ds[i] = p[i] * (ds[i] - dot) * scale;
                for (int i = np; i < kmax; i++) ds[i] = 0.0f;
            }
            /* S = q k^T * scale: dq += dS k, dk += dS^T q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, j->hd, kmax, 1.0f, dP, kmax, kb, kvd, 1.0f,
                        j->dq + qoff, qd);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kmax, j->hd, m, 1.0f, dP, kmax, j->q + qoff, qd,
                        1.0f, dkb, kvd);
        }
    }
    free(dP);
}

void latent_tr_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *prob, const float *q,
                        const float *k, const float *v, const int *qpos, int B, int nq, int T, int n_heads,
                        int n_kv_heads, int hd) {
    att_job j = {.prob = (float *)prob, .dq = dq, .dk = dk, .dv = dv, .q = q, .k = k, .v = v, .dout = dout,
                 .qpos = qpos, .B = B, .nq = nq, .T = T, .H = n_heads, .KV = n_kv_heads, .hd = hd};
    latent_parallel_for(att_bwd_task, &j, B * n_kv_heads);
}

/* ---- SwiGLU, residuals -------------------------------------------------- */

typedef struct {
    float *out, *dg, *du;
    const float *g, *u, *dout, *src;
} ew_job;

/* The inference engine's SwiGLU (vectorised where the CPU allows): the
 * trainer's forward is the engine's. */
static void swiglu_fwd_rows(void *ctx, int r0, int r1) {
    const ew_job *j = ctx;
    latent_swiglu_forward(j->out + r0, j->g + r0, j->u + r0, (size_t)(r1 - r0));
}

void latent_tr_swiglu_forward(float *out, const float *g, const float *u, size_t n) {
    ew_job j = {.out = out, .g = g, .u = u};
    par_elems(swiglu_fwd_rows, &j, n);
}

#ifdef LATENT_HAVE_AVX512_CODE
/* swiglu_bwd_rows' arithmetic 16 at a time, s(g) from the engine's e^x;
 * returns how many elements it did. */
AVX512_FN static int swiglu_bwd_avx512(float *dg, float *du, const float *dout, const float *g, const float *u, int n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 gv = _mm512_loadu_ps(g + i), dv = _mm512_loadu_ps(dout + i), uv = _mm512_loadu_ps(u + i);
        __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, exp512_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
        __m512 dgs = _mm512_mul_ps(_mm512_mul_ps(dv, uv), s); /* dout u s */
        __m512 slope = _mm512_fmadd_ps(gv, _mm512_sub_ps(one, s), one); /* 1 + g (1 - s) */
        _mm512_storeu_ps(dg + i, _mm512_fmadd_ps(dgs, slope, _mm512_loadu_ps(dg + i)));
        _mm512_storeu_ps(du + i, _mm512_fmadd_ps(_mm512_mul_ps(dv, gv), s, _mm512_loadu_ps(du + i)));
    }
    return i;
}
#endif

static void swiglu_bwd_rows(void *ctx, int r0, int r1) {
    const ew_job *j = ctx;
    int i = r0;
#ifdef LATENT_HAVE_AVX512_CODE
    if (latent_kernels_active()->avx512)
        i += swiglu_bwd_avx512(j->dg + r0, j->du + r0, j->dout + r0, j->g + r0, j->u + r0, r1 - r0);
#endif
#pragma omp simd
    for (int k = i; k < r1; k++) {
        float g = j->g[k], s = 1.0f / (1.0f + fexp(-g)), dout = j->dout[k];
        /* out = g s(g) u: d/dg = u s (1 + g (1 - s)), d/du = g s */
        j->dg[k] += dout * j->u[k] * s * (1.0f + g * (1.0f - s));
        j->du[k] += dout * g * s;
    }
}

void latent_tr_swiglu_backward(float *dg, float *du, const float *dout, const float *g, const float *u, size_t n) {
    ew_job j = {.dg = dg, .du = du, .g = g, .u = u, .dout = dout};
    par_elems(swiglu_bwd_rows, &j, n);
}

static void residual_rows(void *ctx, int r0, int r1) {
    const ew_job *j = ctx;
#pragma omp simd
    for (int i = r0; i < r1; i++) j->out[i] = j->g[i] + j->u[i];
}

void latent_tr_residual_forward(float *out, const float *a, const float *b, size_t n) {
    ew_job j = {.out = out, .g = a, .u = b};
    par_elems(residual_rows, &j, n);
}

static void add_rows(void *ctx, int r0, int r1) {
    const ew_job *j = ctx;
#pragma omp simd
    for (int i = r0; i < r1; i++) j->out[i] += j->src[i];
}

void latent_tr_add(float *dst, const float *src, size_t n) {
    ew_job j = {.out = dst, .src = src};
    par_elems(add_rows, &j, n);
}

/* ---- cross-entropy ------------------------------------------------------ */

typedef struct {
    float *loss, *logits;
    const int32_t *targets;
    const uint8_t *mask;
    float scale;
    int V;
} ce_job;

static float row_max(const float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}

#ifdef LATENT_HAVE_AVX512_CODE
AVX512_FN static float row_max_avx512(const float *x, int n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + i));
    float mx = _mm512_reduce_max_ps(m);
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    return mx;
}
#endif

/* The largest logit of a row and x[i] = e^(x[i] - max); returns the sum. */
static float exp_row(float *x, int n, float *max_out) {
    float mx;
#ifdef LATENT_HAVE_AVX512_CODE
    if (latent_kernels_active()->avx512) {
        mx = row_max_avx512(x, n);
        *max_out = mx;
        return exp_shift_sum_avx512(x, n, mx);
    }
#endif
    mx = row_max(x, n);
    *max_out = mx;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) {
        x[i] = fexp(x[i] - mx);
        sum += x[i];
    }
    return sum;
}

static void ce_fwd_rows(void *ctx, int r0, int r1) {
    const ce_job *j = ctx;
    for (int r = r0; r < r1; r++) {
        if (j->mask && !j->mask[r]) {
            j->loss[r] = 0.0f;
            continue;
        }
        const float *x = j->logits + (size_t)r * j->V;
        float mx = row_max(x, j->V), sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < j->V; i++) sum += fexp(x[i] - mx);
        j->loss[r] = (float)(log((double)sum) + mx - x[j->targets[r]]);
    }
}

void latent_tr_crossentropy_forward(float *loss, const float *logits, const int32_t *targets, const uint8_t *mask, int n,
                          int V) {
    ce_job j = {.loss = loss, .logits = (float *)logits, .targets = targets, .mask = mask, .V = V};
    latent_tr_par_rows(ce_fwd_rows, &j, n);
}

static void ce_bwd_rows(void *ctx, int r0, int r1) {
    const ce_job *j = ctx;
    for (int r = r0; r < r1; r++) {
        float *x = j->logits + (size_t)r * j->V;
        if (j->mask && !j->mask[r]) {
            memset(x, 0, (size_t)j->V * sizeof(float));
            if (j->loss) j->loss[r] = 0.0f;
            continue;
        }
        float xt = x[j->targets[r]], mx, sum = exp_row(x, j->V, &mx);
        /* loss = logsumexp(x) - x[target]: d/dx = softmax(x) - onehot(target) */
        if (j->loss) j->loss[r] = (float)(log((double)sum) + mx - xt);
        float c = j->scale / sum;
#pragma omp simd
        for (int i = 0; i < j->V; i++) x[i] *= c;
        x[j->targets[r]] -= j->scale;
    }
}

void latent_tr_crossentropy_softmax_backward(float *logits, float *loss, const int32_t *targets, const uint8_t *mask,
                                      float scale, int n, int V) {
    ce_job j = {.logits = logits, .loss = loss, .targets = targets, .mask = mask, .scale = scale, .V = V};
    latent_tr_par_rows(ce_bwd_rows, &j, n);
}
