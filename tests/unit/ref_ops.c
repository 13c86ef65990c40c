/* Naive references of the forward kernels; see ref_ops.h. */
#include "ref_ops.h"

#include <math.h>

void matmul_forward_ref(float *out, const float *x, const float *w, int n, int in_dim, int out_dim) {
    for (int r = 0; r < n; r++)
        for (int o = 0; o < out_dim; o++) {
            double s = 0;
            for (int i = 0; i < in_dim; i++) s += (double)x[(size_t)r * in_dim + i] * w[(size_t)o * in_dim + i];
            out[(size_t)r * out_dim + o] = (float)s;
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

void swiglu_forward_ref(float *out, const float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = (float)((double)g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
}

void softmax_forward_ref(float *x, int n) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) if (x[i] > mx) mx = x[i];
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    for (int i = 0; i < n; i++) x[i] = (float)(exp((double)x[i] - mx) / sum);
}
