/* Forward ops over row-major activations, each with a naive reference. */
#include "latent/ops.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

void matmul_forward(float *out, const float *x, const float *w, int n, int in_dim, int out_dim) {
    if (n == 1) {
        /* One row: sgemv reads W once at full bandwidth; OpenBLAS' sgemm with
         * M=1 is several times slower on this machine. */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, out_dim, in_dim, 1.0f, w, in_dim, x, 1, 0.0f, out, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out_dim, in_dim, 1.0f, x, in_dim, w,
                in_dim, 0.0f, out, out_dim);
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
