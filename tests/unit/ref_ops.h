/* Naive references of the forward kernels (engine/kernels/ops.c), for the
 * unit tests only: plain loops in float, each written as the math reads. */
#ifndef LATENT_TEST_REF_OPS_H
#define LATENT_TEST_REF_OPS_H

#include <stddef.h>

void matmul_forward_ref(float *out, const float *x, const float *w, int n, int in_dim, int out_dim);
void rmsnorm_forward_ref(float *out, const float *x, const float *weight, int n, int dim, float eps);
void rope_forward_ref(float *x, int n_heads, int head_dim, int pos, float theta);
void swiglu_forward_ref(float *out, const float *g, const float *u, size_t n);
void softmax_forward_ref(float *x, int n);

#endif
