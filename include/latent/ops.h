/* The forward's building blocks over row-major (n, dim) activations. Each op
 * has an optimized version and a naive reference (`_ref`) kept for tests;
 * backward passes live beside them in engine/ops_backward.c (trainer). */
#ifndef LATENT_OPS_H
#define LATENT_OPS_H

#include <stddef.h>

/* out (n, out_dim) = x (n, in_dim) W^T, W (out_dim, in_dim). sgemv when n == 1;
 * output features split over the engine threads (threads.h). */
void matmul_forward(float *out, const float *x, const float *w, int n, int in_dim, int out_dim);
void matmul_forward_ref(float *out, const float *x, const float *w, int n, int in_dim, int out_dim);

/* A weight matrix prepared for inference: on CPUs with AVX-512 it is
 * repacked once into the engine's own kernel layout (a second copy of the
 * weights; the original stays for training and lookups), else products go
 * through BLAS on the original. */
typedef struct latent_linear {
    const float *w;       /* (out_dim, in_dim), not owned */
    int out_dim, in_dim;
    float *packed;        /* owned; NULL when BLAS is used */
    int n_panels;
} latent_linear;

int latent_linear_init(latent_linear *l, const float *w, int out_dim, int in_dim);
void latent_linear_free(latent_linear *l);
/* out (n, out_dim) = x (n, in_dim) W^T */
void linear_forward(float *out, const float *x, const latent_linear *l, int n);
/* Several products of the same x in one parallel section (q, k, v; gate, up):
 * outs[i] (n, ls[i]->out_dim) = x ls[i]^T. */
void linear_forward_multi(float *const *outs, const latent_linear *const *ls, int n_ls, const float *x, int n);

/* out = x / sqrt(mean(x^2) + eps) * weight, per row; sums in double. */
void rmsnorm_forward(float *out, const float *x, const float *weight, int n, int dim, float eps);
void rmsnorm_forward_ref(float *out, const float *x, const float *weight, int n, int dim, float eps);

/* RoPE in HF's rotate_half layout: pairs (j, j + head_dim/2) rotated by the
 * angle pos * theta^(-2j/head_dim). rope_tables fills cos/sin (head_dim/2
 * each) for one position, once per row and step; rope_forward rotates, in
 * place, n_heads heads of one row with them. */
void rope_tables(float *cos_out, float *sin_out, int head_dim, int pos, float theta);
void rope_forward(float *x, int n_heads, int head_dim, const float *cos_t, const float *sin_t);
void rope_forward_ref(float *x, int n_heads, int head_dim, int pos, float theta);

/* out (n, ffn) = silu(g) * u. */
void swiglu_forward(float *out, const float *g, const float *u, size_t n);
void swiglu_forward_ref(float *out, const float *g, const float *u, size_t n);

/* In-place softmax of x[0..n); max-subtracted, sum in double. */
void softmax_forward(float *x, int n);
void softmax_forward_ref(float *x, int n);

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

#endif
