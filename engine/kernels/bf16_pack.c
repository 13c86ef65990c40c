/* F32 to bf16 for the bf16 products: spans, pairs of rows, rows of a
 * product's input and a weight's panels, on a level given by the caller
 * (the kernel table holds the active level's, picked once by _pick; the AMX
 * start-up self-check, which runs while the level is being decided, names
 * its own). The one panel
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

/* 16 x 16 32-bit words transposed in registers: lane j of r[i] goes to lane
 * i of r[j]. Pairs of rows interleaved by words, then by word pairs, then the
 * 128-bit lanes gathered across four registers. */
__attribute__((target("avx512f"), always_inline)) static inline void transpose16x16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) /* rows i, i+1: words 0,1 | 2,3 of each 128-bit lane, interleaved */
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    for (int g = 0; g < 16; g += 4) /* u[g + e], lane L: rows g..g+3 of word 4L + e */
        for (int h = 0; h < 2; h++) {
            u[g + 2 * h] = _mm512_unpacklo_epi64(t[g + h], t[g + 2 + h]);
            u[g + 2 * h + 1] = _mm512_unpackhi_epi64(t[g + h], t[g + 2 + h]);
        }
    for (int e = 0; e < 4; e++) { /* word 4L + e: lane L of u[e], u[4 + e], u[8 + e], u[12 + e] */
        __m512i x0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x88), x1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xDD);
        __m512i y0 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x88), y1 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xDD);
        r[e] = _mm512_shuffle_i32x4(x0, y0, 0x88), r[8 + e] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
        r[4 + e] = _mm512_shuffle_i32x4(x1, y1, 0x88), r[12 + e] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
    }
}

/* 16 k pairs of one feature from k values [c, c + n), n <= 32, as 16 words
 * (pair q: value 2q low, 2q + 1 high; missing values 0): F32 rounded, BF16
 * with NaNs quietened. Masked loads: nothing past the row's k is read. */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline __m512i pairs16(const float *wf, const uint16_t *wb,
                                                                                       size_t at, int n) {
    if (wf) {
        __mmask16 m0 = latent_lane_mask16(n), m1 = latent_lane_mask16(n - 16);
        __m256i lo = _mm512_cvtepi32_epi16(round16(_mm512_maskz_loadu_ps(m0, wf + at)));
        __m256i hi = _mm512_cvtepi32_epi16(round16(_mm512_maskz_loadu_ps(m1, wf + at + 16)));
        return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    __mmask32 m = n >= 32 ? 0xFFFFFFFFu : (1u << n) - 1;
    __m512i v = _mm512_maskz_loadu_epi16(m, wb + at);
    __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, _mm512_set1_epi16(0x7fff)), _mm512_set1_epi16(0x7f80));
    return _mm512_mask_mov_epi16(v, nan, _mm512_or_si512(v, _mm512_set1_epi16(0x40)));
}

/* One panel from a row-major source (W[r][c] at r rs + c): a panel is the
 * 32-bit transpose of its 32 features' rows of pairs, 16 x 16 words at a time;
 * features past cols are zero. Every word of the panel is written. */
__attribute__((target("avx512f,avx512bw"))) static void panel_rows_avx512(uint16_t *panel, const float *wf, const uint16_t *wb,
                                                                      size_t rs, int row0, int cols, int k) {
    int kp = (k + 1) / 2;
    for (int q0 = 0; q0 < kp; q0 += 16) {
        int nq = kp - q0 < 16 ? kp - q0 : 16, nv = k - 2 * q0 < 32 ? k - 2 * q0 : 32;
        for (int h = 0; h < GEMM_PANEL; h += 16) {
            __m512i r[16];
            for (int i = 0; i < 16; i++)
                r[i] = h + i < cols ? pairs16(wf, wb, (size_t)(row0 + h + i) * rs + 2 * (size_t)q0, nv) : _mm512_setzero_si512();
            transpose16x16(r);
            for (int q = 0; q < nq; q++) _mm512_storeu_si512((void *)(panel + ((size_t)(q0 + q) * GEMM_PANEL + h) * 2), r[q]);
        }
    }
}

/* ---- AVX2: the same transpose, 8 x 8 words ---- */

/* 8 floats to bf16 in the low half of each 32-bit lane, as round16. */
__attribute__((target("avx2"), always_inline)) static inline __m256i round8(__m256 f) {
    __m256i u = _mm256_castps_si256(f), hi = _mm256_srli_epi32(u, 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), _mm256_and_si256(hi, _mm256_set1_epi32(1)));
    return _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
}

/* 8 k pairs of one feature from 16 values at `at` (all inside its row) as 8 words. */
__attribute__((target("avx2"), always_inline)) static inline __m256i pairs8(const float *wf, const uint16_t *wb, size_t at) {
    if (wf) { /* packus interleaves 128-bit lanes; the permute puts them back in order */
        __m256i v = _mm256_packus_epi32(round8(_mm256_loadu_ps(wf + at)), round8(_mm256_loadu_ps(wf + at + 8)));
        return _mm256_permute4x64_epi64(v, 0xD8);
    }
    __m256i v = _mm256_loadu_si256((const __m256i *)(wb + at));
    __m256i nan = _mm256_cmpgt_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7f80));
    return _mm256_or_si256(v, _mm256_and_si256(nan, _mm256_set1_epi16(0x40)));
}

/* 8 x 8 32-bit words transposed: lane j of r[i] goes to lane i of r[j]. */
__attribute__((target("avx2"), always_inline)) static inline void transpose8x8(__m256i r[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2)
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    for (int g = 0; g < 8; g += 4) /* u[g + e], 128-bit lane L: rows g..g+3 of word 4L + e */
        for (int h = 0; h < 2; h++) {
            u[g + 2 * h] = _mm256_unpacklo_epi64(t[g + h], t[g + 2 + h]);
            u[g + 2 * h + 1] = _mm256_unpackhi_epi64(t[g + h], t[g + 2 + h]);
        }
    for (int e = 0; e < 4; e++)
        r[e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x20), r[4 + e] = _mm256_permute2x128_si256(u[e], u[4 + e], 0x31);
}

/* One word of a panel, scalar: pair q of a feature whose row starts at f. */
static inline uint32_t pair_word(const float *wf, const uint16_t *wb, size_t f, int q, int k) {
    uint32_t w = 0;
    for (int h = 0; h < 2 && 2 * q + h < k; h++) {
        size_t i = f + 2 * (size_t)q + h;
        uint16_t v = wf ? latent_f32_to_bf16(wf[i]) : (wb[i] & 0x7fff) > 0x7f80 ? wb[i] | 0x40 : wb[i];
        w |= (uint32_t)v << 16 * h;
    }
    return w;
}

/* panel_rows_avx512's panel on AVX2: 8 x 8 words at a time where 8 pairs lie
 * inside every row (no masked 16-bit loads on AVX2), the last pairs scalar. */
__attribute__((target("avx2"))) static void panel_rows_avx2(uint16_t *panel, const float *wf, const uint16_t *wb, size_t rs,
                                                            int row0, int cols, int k) {
    int kp = (k + 1) / 2, q0 = 0;
    for (; 2 * q0 + 16 <= k; q0 += 8)
        for (int h = 0; h < GEMM_PANEL; h += 8) {
            __m256i r[8];
            for (int i = 0; i < 8; i++)
                r[i] = h + i < cols ? pairs8(wf, wb, (size_t)(row0 + h + i) * rs + 2 * (size_t)q0) : _mm256_setzero_si256();
            transpose8x8(r);
            for (int q = 0; q < 8; q++) _mm256_storeu_si256((__m256i *)(panel + ((size_t)(q0 + q) * GEMM_PANEL + h) * 2), r[q]);
        }
    for (int q = q0; q < kp; q++)
        for (int j = 0; j < GEMM_PANEL; j++) {
            uint32_t w = j < cols ? pair_word(wf, wb, (size_t)(row0 + j) * rs, q, k) : 0;
            memcpy(panel + ((size_t)q * GEMM_PANEL + j) * 2, &w, sizeof w);
        }
}
#endif

/* ---- each level's converters, and the pick of a level's ---- */

static void span_generic(uint16_t *dst, const float *src, int n) {
    for (int i = 0; i < n; i++) dst[i] = latent_f32_to_bf16(src[i]);
}

static void pairs_generic(uint16_t *dst, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++) dst[2 * i] = latent_f32_to_bf16(a[i]), dst[2 * i + 1] = b ? latent_f32_to_bf16(b[i]) : 0;
}

/* A BF16 value as the panels hold it: as is, NaN quietened (latent_f32_to_bf16's rule). */
static inline uint16_t quiet_bf16(uint16_t h) { return (h & 0x7fff) > 0x7f80 ? h | 0x40 : h; }

/* One panel, any source layout; features past cols zero. */
static void panel_scalar(latent_bf16_pairs_fn pairs, uint16_t *panel, const float *wf, const uint16_t *wb, size_t rs,
                         size_t cs, int row0, int cols, int k) {
    int kp = (k + 1) / 2;
    if (wf && rs == 1) {
        /* a k pair is two contiguous source rows: interleaved 16 at a time */
        for (int q = 0; q < kp; q++)
            pairs(panel + (size_t)q * GEMM_PANEL * 2, wf + (size_t)row0 + (size_t)(2 * q) * cs,
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

#define PANELS_ARGS uint16_t *d, const float *wf, const uint16_t *wb, size_t rs, size_t cs, int n, int k, int p0, int p1
#define PANEL_AT(pn) (d + (size_t)(pn) * ((k + 1) / 2) * GEMM_PANEL * 2)
#define PANEL_COLS(pn) (n - (pn) * GEMM_PANEL < GEMM_PANEL ? n - (pn) * GEMM_PANEL : GEMM_PANEL)

static void panels_generic(PANELS_ARGS) {
    for (int pn = p0; pn < p1; pn++) panel_scalar(pairs_generic, PANEL_AT(pn), wf, wb, rs, cs, pn * GEMM_PANEL, PANEL_COLS(pn), k);
}

#if defined(__x86_64__) && defined(__GNUC__)
static void span_avx512(uint16_t *dst, const float *src, int n) {
    int i = round_row_avx512(dst, src, n);
    span_generic(dst + i, src + i, n - i);
}

static void pairs_avx512(uint16_t *dst, const float *a, const float *b, int n) {
    int i = pack_pairs_avx512(dst, a, b, n);
    pairs_generic(dst + 2 * i, a + i, b ? b + i : NULL, n - i);
}

/* row-major sources by the 32-bit transpose, others as the scalar packer */
static void panels_avx2(PANELS_ARGS) {
    for (int pn = p0; pn < p1; pn++) {
        if (cs == 1) panel_rows_avx2(PANEL_AT(pn), wf, wb, rs, pn * GEMM_PANEL, PANEL_COLS(pn), k);
        else panel_scalar(pairs_generic, PANEL_AT(pn), wf, wb, rs, cs, pn * GEMM_PANEL, PANEL_COLS(pn), k);
    }
}

static void panels_avx512(PANELS_ARGS) {
    for (int pn = p0; pn < p1; pn++) {
        if (cs == 1) panel_rows_avx512(PANEL_AT(pn), wf, wb, rs, pn * GEMM_PANEL, PANEL_COLS(pn), k);
        else panel_scalar(pairs_avx512, PANEL_AT(pn), wf, wb, rs, cs, pn * GEMM_PANEL, PANEL_COLS(pn), k);
    }
}
#endif
#undef PANELS_ARGS
#undef PANEL_AT
#undef PANEL_COLS

latent_bf16_span_fn latent_bf16_span_pick(latent_isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= LATENT_ISA_AVX512) return span_avx512;
#endif
    return span_generic;
}

latent_bf16_pairs_fn latent_bf16_pairs_pick(latent_isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= LATENT_ISA_AVX512) return pairs_avx512;
#endif
    return pairs_generic;
}

latent_bf16_panels_fn latent_bf16_panels_pick(latent_isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= LATENT_ISA_AVX512) return panels_avx512;
    if (isa >= LATENT_ISA_AVX2) return panels_avx2;
#endif
    return panels_generic;
}

/* ---- on a level named by the caller ---- */

void latent_bf16_round_span_on(latent_isa isa, uint16_t *dst, const float *src, int n) {
    latent_bf16_span_pick(isa)(dst, src, n);
}

void latent_bf16_pack_pairs_on(latent_isa isa, uint16_t *dst, const float *a, const float *b, int n) {
    latent_bf16_pairs_pick(isa)(dst, a, b, n);
}

void latent_bf16_pack_panels_on(latent_isa isa, uint16_t *d, const float *wf, const uint16_t *wb, size_t rs, size_t cs,
                                int n, int k, int p0, int p1) {
    latent_bf16_panels_pick(isa)(d, wf, wb, rs, cs, n, k, p0, p1);
}

void latent_bf16_round_rows_on(latent_isa isa, uint16_t *dst, const float *a, size_t rs, size_t cs, int m, int k) {
    int kp2 = (k + 1) / 2 * 2;
    if (cs == 1) {
        latent_bf16_span_fn span = latent_bf16_span_pick(isa);
        for (int i = 0; i < m; i++) span(dst + (size_t)i * kp2, a + (size_t)i * rs, k);
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
