/* A vectorised e^x for the engine's forward ops (private).
 *
 * libm's expf is scalar: in a 512-token prefill the softmaxes and SwiGLUs
 * call it tens of millions of times, more time than the q/k/v products.
 * x = n ln2 + r with |r| <= ln2/2; e^r by its Taylor polynomial to degree 7
 * (relative error about 5e-9, below float rounding); times 2^n by scalef,
 * which saturates to 0 and +inf cleanly. Inputs are clamped to [-104, 89],
 * outside which the float result is 0 or +inf anyway. */
#ifndef LATENT_SIMD_EXP_H
#define LATENT_SIMD_EXP_H

#include <math.h>

#include "kernels/kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define LATENT_HAVE_AVX512_CODE 1
#include <immintrin.h>

/* Functions built for AVX-512 inside a baseline build; callers check the
 * kernel table (latent_kernels_active()->avx512) before calling them. */
#define AVX512_FN __attribute__((target("avx512f,avx512bw")))

AVX512_FN static inline __m512 exp512_ps(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT);
    /* ln2 in two parts, so n * ln2 is subtracted without rounding error */
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

static inline __mmask16 tail_mask16(int n) { return (__mmask16)((1u << n) - 1); }

AVX512_FN static inline float exp_shift_sum_avx512(float *x, int n, float m) {
    __m512 acc = _mm512_setzero_ps(), mv = _mm512_set1_ps(m);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp512_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));
        _mm512_storeu_ps(x + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (i < n) {
        __mmask16 k = tail_mask16(n - i);
        __m512 e = exp512_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv));
        _mm512_mask_storeu_ps(x + i, k, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(k, e));
    }
    return _mm512_reduce_add_ps(acc);
}
#endif

/* x[i] = e^(x[i] - m) for i < n; returns their sum. The softmaxes' core:
 * m is the row's maximum, so every exponent is <= 0. */
static inline float exp_shift_sum(float *x, int n, float m) {
#ifdef LATENT_HAVE_AVX512_CODE
    if (latent_kernels_active()->avx512) return exp_shift_sum_avx512(x, n, m);
#endif
    double sum = 0;
    for (int i = 0; i < n; i++) sum += x[i] = expf(x[i] - m);
    return (float)sum;
}

#endif
