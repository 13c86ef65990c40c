/* Forward ops over row-major activations, each with a naive reference. */
#include "latent/ops.h"
#include "latent/threads.h"

#include <cblas.h>
#include <math.h>
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

void matmul_forward(float *out, const float *x, const float *w, int n, int in_dim, int out_dim) {
    /* Split the output features over the threads, in slices of whole cache
     * lines; each slice is an independent single-threaded BLAS call. */
    int threads = latent_get_threads();
    int tasks = out_dim >= 64 * threads ? threads : 1;
    int chunk = ((out_dim + tasks - 1) / tasks + 15) / 16 * 16;
    matmul_job j = {out, x, w, n, in_dim, out_dim, chunk};
    latent_parallel_for(matmul_slice, &j, tasks);
}

void matmul_forward_ref(float *out, const float *x, const float *w, int n, int in_dim, int out_dim) {
    for (int r = 0; r < n; r++)
        for (int o = 0; o < out_dim; o++) {
            double s = 0;
            for (int i = 0; i < in_dim; i++) s += (double)x[(size_t)r * in_dim + i] * w[(size_t)o * in_dim + i];
            out[(size_t)r * out_dim + o] = (float)s;
        }
}

void rmsnorm_forward(float *out, const float *x, const float *weight, int n, int dim, float eps) {
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        float *o = out + (size_t)r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / dim + eps));
        for (int i = 0; i < dim; i++) o[i] = xr[i] * inv * weight[i];
    }
}

void rmsnorm_forward_ref(float *out, const float *x, const float *weight, int n, int dim, float eps) {
    for (int r = 0; r < n; r++) {
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)x[(size_t)r * dim + i] * x[(size_t)r * dim + i];
        double inv = 1.0 / sqrt(ss / dim + eps);
        for (int i = 0; i < dim; i++)
            out[(size_t)r * dim + i] = (float)(x[(size_t)r * dim + i] * inv * weight[i]);
    }
}

void rope_tables(float *cos_out, float *sin_out, int head_dim, int pos, float theta) {
    for (int j = 0; j < head_dim / 2; j++) {
        double ang = pos * pow(theta, -2.0 * j / head_dim);
        cos_out[j] = (float)cos(ang);
        sin_out[j] = (float)sin(ang);
    }
}

void rope_forward(float *x, int n_heads, int head_dim, const float *c, const float *s) {
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

void rope_forward_ref(float *x, int n_heads, int head_dim, int pos, float theta) {
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++)
        for (int j = 0; j < half; j++) {
            double ang = pos * pow(theta, -2.0 * j / head_dim);
            double a = x[h * head_dim + j], b = x[h * head_dim + j + half];
            x[h * head_dim + j] = (float)(a * cos(ang) - b * sin(ang));
            x[h * head_dim + j + half] = (float)(b * cos(ang) + a * sin(ang));
        }
}

void swiglu_forward(float *out, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void swiglu_forward_ref(float *out, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = (float)((double)g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
}

void softmax_forward(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (x[i] > mx) mx = x[i];
    double sum = 0;
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - mx); sum += x[i]; }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void softmax_forward_ref(float *x, int n) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) if (x[i] > mx) mx = x[i];
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    for (int i = 0; i < n; i++) x[i] = (float)(exp((double)x[i] - mx) / sum);
}
