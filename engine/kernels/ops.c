/* Forward ops over row-major activations, each with a naive reference. */
#include "kernels/kernels.h"
#include "kernels/q8.h"
#include "latent/threads.h"
#include "hugemem.h"
#include "kernels/simd_exp.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float *out;
    const float *x, *w;
    int n, in_dim, out_dim, chunk;
} matmul_job;

/* One slice of output features: out[:, c0:c1] = x W[c0:c1]^T. */
static void matmul_slice(void *ctx, int task) {
    const matmul_job *j = ctx;
    int c0 = task * j->chunk, c1 = c0 + j->chunk > j->out_dim ? j->out_dim : c0 + j->chunk;
    if (c0 >= c1) return;
    const float *w = j->w + (size_t)c0 * j->in_dim;
    if (j->n == 1) {
        /* One row: sgemv reads W once at full bandwidth; OpenBLAS' sgemm with
         * M=1 is several times slower on this machine. */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, c1 - c0, j->in_dim, 1.0f, w, j->in_dim, j->x, 1, 0.0f,
                    j->out + c0, 1);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, c1 - c0, j->in_dim, 1.0f, j->x, j->in_dim, w,
                    j->in_dim, 0.0f, j->out + c0, j->out_dim);
    }
}

void latent_matmul_forward(float *out, const float *x, const float *w, int n, int in_dim, int out_dim) {
    /* Split the output features over the threads, in slices of whole cache
     * lines; each slice is an independent single-threaded BLAS call. */
    int threads = latent_get_threads();
    int tasks = out_dim >= 64 * threads ? threads : 1;
    int chunk = ((out_dim + tasks - 1) / tasks + 15) / 16 * 16;
    matmul_job j = {out, x, w, n, in_dim, out_dim, chunk};
    latent_parallel_for(matmul_slice, &j, tasks);
}

int latent_linear_init_blas(latent_linear *l, const float *w, int out_dim, int in_dim) {
    memset(l, 0, sizeof *l);
    l->w = w, l->out_dim = out_dim, l->in_dim = in_dim;
    return 0;
}

int latent_linear_init(latent_linear *l, const float *w, int out_dim, int in_dim) {
    latent_linear_init_blas(l, w, out_dim, in_dim);
    gemm_packed p;
    if (latent_gemm_pack(&p, w, out_dim, in_dim) != 0) return -1;
    l->packed = p.data, l->n_panels = p.n_panels;
    return 0;
}

int latent_linear_init_bf16(latent_linear *l, const float *w, int out_dim, int in_dim) {
    memset(l, 0, sizeof *l);
    l->w = w, l->out_dim = out_dim, l->in_dim = in_dim, l->bf16 = 1;
    uint16_t *p;
    if (latent_gemm_bf16_pack(&p, &l->n_panels, w, out_dim, in_dim) != 0) return -1;
    l->packed = p;
    return 0;
}

int latent_linear_init_from_bf16(latent_linear *l, const uint16_t *w, int out_dim, int in_dim) {
    memset(l, 0, sizeof *l);
    l->out_dim = out_dim, l->in_dim = in_dim, l->bf16 = 1;
    uint16_t *p;
    if (latent_gemm_bf16_pack_bf16(&p, &l->n_panels, w, out_dim, in_dim) != 0) return -1;
    l->packed = p;
    return 0;
}

void latent_linear_free(latent_linear *l) {
    if (!l) return;
    if (l->packed && l->bf16) latent_gemm_bf16_free(l->packed, l->n_panels, l->in_dim);
    else if (l->packed && l->q8) latent_q8_free(l->packed, l->n_panels, l->in_dim);
    else if (l->packed) latent_huge_free(l->packed, latent_gemm_packed_bytes(l->n_panels, l->in_dim));
    memset(l, 0, sizeof *l);
}

void latent_linear_row(const latent_linear *l, int row, float *out) {
    if (l->bf16) {
        for (int i = 0; i < l->in_dim; i++) out[i] = latent_gemm_bf16_weight(l->packed, l->in_dim, row, i);
        return;
    }
    if (l->q8) {
        for (int i = 0; i < l->in_dim; i++) out[i] = latent_q8_weight(l->packed, l->in_dim, row, i);
        return;
    }
    if (l->w) {
        memcpy(out, l->w + (size_t)row * l->in_dim, (size_t)l->in_dim * sizeof(float));
        return;
    }
    const float *panel = (const float *)l->packed + (size_t)(row / GEMM_PANEL) * l->in_dim * GEMM_PANEL;
    for (int i = 0; i < l->in_dim; i++) out[i] = panel[(size_t)i * GEMM_PANEL + row % GEMM_PANEL];
}

#define MAX_MULTI 4

typedef struct {
    float *const *outs;
    const latent_linear *const *ls;
    int n_ls, n, total_panels, per_task;
    const float *x;
    const uint16_t *xb;   /* x rounded to bf16 (bf16 matrices) */
    const q8_rows *xq;    /* x quantized (q8 matrices) */
} linear_job;

/* Task t computes panels [t*per_task, (t+1)*per_task) of the concatenation
 * of every matrix's panels. */
static void linear_task(void *ctx, int task) {
    const linear_job *j = ctx;
    int g0 = task * j->per_task, g1 = g0 + j->per_task < j->total_panels ? g0 + j->per_task : j->total_panels;
    for (int i = 0, base = 0; i < j->n_ls && g0 < g1; base += j->ls[i]->n_panels, i++) {
        const latent_linear *l = j->ls[i];
        int p0 = g0 - base, p1 = g1 - base;
        if (p1 <= 0 || p0 >= l->n_panels) continue;
        if (p0 < 0) p0 = 0;
        if (p1 > l->n_panels) p1 = l->n_panels;
        if (l->q8) {
            latent_gemm_q8_run(j->outs[i], l->out_dim, j->xq, l->out_dim, l->packed, p0, p1);
            continue;
        }
        if (l->bf16) {
            latent_gemm_bf16_run(j->outs[i], l->out_dim, j->xb, j->n, l->out_dim, l->in_dim, l->packed, p0, p1);
            continue;
        }
        gemm_packed gp = {(float *)l->packed, l->out_dim, l->in_dim, l->n_panels};
        latent_gemm_run(j->outs[i], l->out_dim, j->x, &gp, j->n, p0, p1);
    }
}

typedef struct {
    float *const *outs;
    const latent_linear *const *ls;
    int n_ls, slices;           /* each matrix cut into `slices` row ranges */
    const float *x;
} gemv_job;

static void gemv_task(void *ctx, int task) {
    const gemv_job *j = ctx;
    const latent_linear *l = j->ls[task / j->slices];
    int part = task % j->slices;
    int chunk = ((l->out_dim + j->slices - 1) / j->slices + 15) / 16 * 16;
    int r0 = part * chunk, r1 = r0 + chunk < l->out_dim ? r0 + chunk : l->out_dim;
    if (r0 >= r1) return;
    cblas_sgemv(CblasRowMajor, CblasNoTrans, r1 - r0, l->in_dim, 1.0f, l->w + (size_t)r0 * l->in_dim, l->in_dim,
                j->x, 1, 0.0f, j->outs[task / j->slices] + r0, 1);
}

/* Single-row products of several matrices in one parallel section. */
static void gemv_multi(float *const *outs, const latent_linear *const *ls, int n_ls, const float *x) {
    int threads = latent_get_threads();
    gemv_job j = {outs, ls, n_ls, threads, x};
    latent_parallel_for(gemv_task, &j, n_ls * threads);
}

void latent_linear_forward_multi(float *const *outs, const latent_linear *const *ls, int n_ls, const float *x, int n) {
    /* One row without packed panels: BLAS' sgemv on the original layout.
     * With panels, the packed kernel's own single-row path streams each
     * panel linearly, about 1.3-1.5x sgemv's bandwidth here (bench --kernels). */
    if (n == 1 && !ls[0]->packed) {
        gemv_multi(outs, ls, n_ls, x);
        return;
    }
    if (!ls[0]->packed) {
        for (int i = 0; i < n_ls; i++) latent_matmul_forward(outs[i], x, ls[i]->w, n, ls[i]->in_dim, ls[i]->out_dim);
        return;
    }
    int total = 0;
    for (int i = 0; i < n_ls; i++) total += ls[i]->n_panels;
    /* A few tasks per thread balance uneven panels; each task is still big
     * enough to stream its panels at full speed. */
    int threads = latent_get_threads(), tasks = threads == 1 ? 1 : threads * 2;
    if (tasks > total) tasks = total;
    linear_job j = {outs, ls, n_ls, n, total, (total + tasks - 1) / tasks, x, NULL, NULL};
    /* q8 matrices share one quantization of x, like bf16's rounding below */
    enum { STACK_Q8 = 16 * 1024 };
    unsigned char stack_q8[ls[0]->q8 ? STACK_Q8 + 63 : 1];
    void *heap_q8 = NULL;
    q8_rows xq;
    if (ls[0]->q8) {
        size_t need = latent_q8_rows_bytes(n, ls[0]->in_dim);
        void *buf = need <= STACK_Q8 ? (void *)(((uintptr_t)stack_q8 + 63) & ~(uintptr_t)63)
                                     : (heap_q8 = aligned_alloc(64, (need + 63) / 64 * 64));
        if (!buf) {
            for (int r = 0; r < n; r++) {
                float *row_outs[MAX_MULTI];
                for (int i = 0; i < n_ls; i++) row_outs[i] = outs[i] + (size_t)r * ls[i]->out_dim;
                latent_linear_forward_multi(row_outs, ls, n_ls, x + (size_t)r * ls[0]->in_dim, 1);
            }
            return;
        }
        latent_q8_rows_quantize(&xq, buf, x, n, ls[0]->in_dim);
        j.xq = &xq;
    }
    /* bf16 matrices share one rounding of x (every matrix of a call has the same in_dim) */
    enum { STACK_XB = 32 * 1024 };
    uint16_t stack_xb[ls[0]->bf16 ? STACK_XB : 1], *heap_xb = NULL;
    if (ls[0]->bf16) {
        size_t need = (size_t)n * ((ls[0]->in_dim + 1) / 2 * 2);
        uint16_t *xb = need <= STACK_XB ? stack_xb : (heap_xb = malloc(need * sizeof *heap_xb));
        if (!xb) { /* out of memory for a large step: round row by row instead */
            for (int r = 0; r < n; r++) {
                float *row_outs[MAX_MULTI];
                for (int i = 0; i < n_ls; i++) row_outs[i] = outs[i] + (size_t)r * ls[i]->out_dim;
                latent_linear_forward_multi(row_outs, ls, n_ls, x + (size_t)r * ls[0]->in_dim, 1);
            }
            return;
        }
        latent_bf16_round_rows(xb, x, n, ls[0]->in_dim);
        j.xb = xb;
    }
    latent_parallel_for(linear_task, &j, (total + j.per_task - 1) / j.per_task);
    free(heap_xb);
    free(heap_q8);
}

void latent_linear_forward(float *out, const float *x, const latent_linear *l, int n) {
    latent_linear_forward_multi(&out, &l, 1, x, n);
}

void latent_rmsnorm_forward(float *out, const float *x, const float *weight, int n, int dim, float eps) {
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        float *o = out + (size_t)r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / dim + eps));
        for (int i = 0; i < dim; i++) o[i] = xr[i] * inv * weight[i];
    }
}

void latent_rope_tables(float *cos_out, float *sin_out, int head_dim, int pos, float theta) {
    for (int j = 0; j < head_dim / 2; j++) {
        double ang = pos * pow(theta, -2.0 * j / head_dim);
        cos_out[j] = (float)cos(ang);
        sin_out[j] = (float)sin(ang);
    }
}

void latent_rope_forward(float *x, int n_heads, int head_dim, const float *c, const float *s) {
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int j = 0; j < half; j++) {
            float a = v[j], b = v[j + half];
            v[j] = a * c[j] - b * s[j];
            v[j + half] = b * c[j] + a * s[j];
        }
    }
}

#ifdef LATENT_HAVE_AVX512_CODE
AVX512_FN static size_t swiglu_avx512(float *out, const float *g, const float *u, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 gv = _mm512_loadu_ps(g + i);
        __m512 den = _mm512_add_ps(one, exp512_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv)));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(gv, den), _mm512_loadu_ps(u + i)));
    }
    return i;
}
#endif

void latent_swiglu_forward(float *out, const float *g, const float *u, size_t n) {
    size_t i = 0;
#ifdef LATENT_HAVE_AVX512_CODE
    if (latent_kernels_active()->avx512) i = swiglu_avx512(out, g, u, n);
#endif
    for (; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void latent_softmax_forward(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (x[i] > mx) mx = x[i];
    float inv = 1.0f / exp_shift_sum(x, n, mx);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

