/* Helpers private to the trainer's ops (train_ops.c, train_ops_recur.c). */
#ifndef LATENT_TRAIN_OPS_PRIVATE_H
#define LATENT_TRAIN_OPS_PRIVATE_H

#include <stdint.h>
#include <stdlib.h>

#include "train/train_ops.h"

/* exp(x) to ~2 ulp, written so `omp simd` loops vectorize it (Cephes' expf
 * polynomial after x = n ln2 + r; 2^n built in the exponent bits). */
static inline float fexp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float t = x * 1.44269504088896341f + 12582912.0f; /* round to nearest via the magic constant */
    float n = t - 12582912.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    union { float f; int32_t i; } s = {.i = ((int32_t)n + 127) << 23};
    return y * s.f;
}

static inline float fsigmoid(float x) { return 1.0f / (1.0f + fexp(-x)); }

/* Elementwise ops: tr_par_rows over the flat range of floats. */
static inline void par_elems(tr_rows_fn fn, void *ctx, size_t n) {
    if (n > (size_t)1 << 30) abort(); /* activations are far smaller; int ranges suffice */
    latent_tr_par_rows(fn, ctx, (int)n);
}

#endif
