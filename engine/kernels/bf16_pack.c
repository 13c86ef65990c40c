/* F32 to bf16 for the bf16 products: spans, pairs of rows, rows of a
 * product's input and a weight's panels, on a level given by the caller
 * (gemm_bf16_path.c passes the active one; the AMX start-up self-check, which
 * runs while the level is being decided, passes its own). The one panel
 * packer and the one row rounder of the engine and the trainer. Every path
 * rounds as latent_f32_to_bf16 does (nearest even, NaN quietened), so the
 * level changes the speed, never the bits. */
#include "kernels/kernels.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* 16 floats to bf16 in the low half of each 32-bit lane, exactly
 * latent_f32_to_bf16 (nearest even, NaN quietened). */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline __m512i round16(__m512 f) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
    __m512i u = _mm512_castps_si512(f);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, bias), _mm512_and_si512(_mm512_srli_epi32(u, 16), one)), 16);
    return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), quiet));
}

__attribute__((target("avx512f,avx512bw"))) static int round_row_avx512(uint16_t *d, const float *s, int k) {
    int i = 0;
    for (; i + 16 <= k; i += 16) _mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtepi32_epi16(round16(_mm512_loadu_ps(s + i))));
    return i;
}

/* Two rows rounded and interleaved: the 32-bit lane j holds a[j] (low half)
 * and b[j] (high half), which is a pair in memory order. */
__attribute__((target("avx512f,avx512bw"))) static int pack_pairs_avx512(uint16_t *d, const float *a, const float *b, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i lo = round16(_mm512_loadu_ps(a + i));
        __m512i hi = b ? _mm512_slli_epi32(round16(_mm512_loadu_ps(b + i)), 16) : _mm512_setzero_si512();
        _mm512_storeu_si512((void *)(d + 2 * i), _mm512_or_si512(lo, hi));
    }
    return i;
}
#endif

void latent_bf16_round_span_on(latent_isa isa, uint16_t *dst, const float *src, int n) {
    int i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= LATENT_ISA_AVX512) i = round_row_avx512(dst, src, n);
#endif
    for (; i < n; i++) dst[i] = latent_f32_to_bf16(src[i]);
}

void latent_bf16_pack_pairs_on(latent_isa isa, uint16_t *dst, const float *a, const float *b, int n) {
    int i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= LATENT_ISA_AVX512) i = pack_pairs_avx512(dst, a, b, n);
#endif
    for (; i < n; i++) dst[2 * i] = latent_f32_to_bf16(a[i]), dst[2 * i + 1] = b ? latent_f32_to_bf16(b[i]) : 0;
}

void latent_bf16_round_rows_on(latent_isa isa, uint16_t *dst, const float *a, size_t rs, size_t cs, int m, int k) {
    int kp2 = (k + 1) / 2 * 2;
    if (cs == 1) {
        for (int i = 0; i < m; i++) latent_bf16_round_span_on(isa, dst + (size_t)i * kp2, a + (size_t)i * rs, k);
    } else {
        /* a transposed operand: tiles of 32 of its rows stay in cache while
         * every output row takes its 32 values from them */
        for (int k0 = 0; k0 < k; k0 += 32) {
            int k1 = k0 + 32 < k ? k0 + 32 : k;
            for (int i = 0; i < m; i++) {
                uint16_t *o = dst + (size_t)i * kp2;
                for (int c = k0; c < k1; c++) o[c] = latent_f32_to_bf16(a[(size_t)c * cs + (size_t)i * rs]);
            }
        }
    }
    if (kp2 > k)
        for (int i = 0; i < m; i++) dst[(size_t)i * kp2 + k] = 0;
}

/* A BF16 value as the panels hold it: as is, NaN quietened (latent_f32_to_bf16's rule). */
static inline uint16_t quiet_bf16(uint16_t h) { return (h & 0x7fff) > 0x7f80 ? h | 0x40 : h; }

void latent_bf16_pack_panels_on(latent_isa isa, uint16_t *d, const float *wf, const uint16_t *wb, size_t rs, size_t cs,
                                int n, int k, int p0, int p1) {
    int kp = (k + 1) / 2;
    for (int pn = p0; pn < p1; pn++) {
        uint16_t *panel = d + (size_t)pn * kp * GEMM_PANEL * 2;
        int row0 = pn * GEMM_PANEL, cols = n - row0 < GEMM_PANEL ? n - row0 : GEMM_PANEL;
        if (wf && rs == 1) {
            /* a k pair is two contiguous source rows: interleaved 16 at a time */
            for (int q = 0; q < kp; q++)
                latent_bf16_pack_pairs_on(isa, panel + (size_t)q * GEMM_PANEL * 2, wf + (size_t)row0 + (size_t)(2 * q) * cs,
                                          2 * q + 1 < k ? wf + (size_t)row0 + (size_t)(2 * q + 1) * cs : NULL, cols);
        } else {
            /* one feature at a time, reading its k run in order (contiguous for
             * a row-major weight, cs == 1) */
            for (int j = 0; j < cols; j++) {
                size_t f = (size_t)(row0 + j) * rs;
                for (int c = 0; c < 2 * kp; c++) {
                    uint16_t v = 0;
                    if (c < k) v = wf ? latent_f32_to_bf16(wf[f + (size_t)c * cs]) : quiet_bf16(wb[f + (size_t)c * cs]);
                    panel[((size_t)(c / 2) * GEMM_PANEL + j) * 2 + c % 2] = v;
                }
            }
        }
        if (cols < GEMM_PANEL) /* features past n: zero */
            for (int q = 0; q < kp; q++)
                memset(panel + ((size_t)q * GEMM_PANEL + cols) * 2, 0, (size_t)(GEMM_PANEL - cols) * 2 * sizeof *panel);
    }
}
