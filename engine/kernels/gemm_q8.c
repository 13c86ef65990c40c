/* Int8 products over q8 panels (layout and quantizer in q8.h, q8_pack.c).
 *
 * Each output element is, for blocks b = 0, 1, ... in k order,
 *     acc = fma((float) isum_b, w_scale[j][b] * x_scale[r][b], acc)   (acc from 0)
 * where isum_b is the block's integer dot product sum_k x_q w_q: at most
 * 32 * 127 * 127 in magnitude, so it is exact in int32 and in F32 however
 * it was summed. Only the scaling is rounded, in one fixed order, so the
 * VNNI and generic paths give the same bits, for any number of rows, any
 * row's place among them, and any split of panels over threads; the AMX
 * tile path (gemm_q8_amx.c) too.
 *
 * vpdpbusd multiplies unsigned by signed bytes. The weights are the
 * unsigned operand, stored as w_q + 128; each row's block carries
 * corr = -128 * sum(x_q), which starts the accumulator:
 *     corr + sum (w_q + 128) x_q = sum w_q x_q.
 * Its four byte products per lane fit 16 bits (255 * 127), so nothing
 * saturates (vpdpbusd, not vpdpbusds). */
#include "kernels/q8.h"
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

#define MR_Q8 6 /* rows per VNNI micro-tile: 4 accumulators a row (2 int32, 2 F32) */

static inline int panel_cols(int n, int pn) { return n - pn * Q8_PANEL < Q8_PANEL ? n - pn * Q8_PANEL : Q8_PANEL; }

/* ---- generic C ---- */

static void run_generic(float *out, int ldo, const q8_rows *x, int n, const uint8_t *panels, int p0, int p1) {
    int nb = x->nb;
    for (int pn = p0; pn < p1; pn++) {
        const uint8_t *panel = panels + (size_t)pn * nb * Q8_BLOCK_BYTES;
        int cols = panel_cols(n, pn);
        for (int r = 0; r < x->m; r++) {
            float acc[Q8_PANEL] = {0};
            for (int b = 0; b < nb; b++) {
                const uint8_t *blk = panel + (size_t)b * Q8_BLOCK_BYTES;
                const q8_xblock *xb = latent_q8_xblock(x, r, b);
                const int8_t *xq = xb->q;
                float ws[Q8_PANEL], xs = xb->scale;
                memcpy(ws, blk + Q8_BLOCK * Q8_PANEL, sizeof ws);
                for (int j = 0; j < Q8_PANEL; j++) {
                    int32_t s = 0;
                    for (int kk = 0; kk < Q8_BLOCK; kk++) s += xq[kk] * ((int)blk[(kk / 4) * 4 * Q8_PANEL + 4 * j + kk % 4] - 128);
                    acc[j] = fmaf((float)s, ws[j] * xs, acc[j]);
                }
            }
            memcpy(out + (size_t)r * ldo + (size_t)pn * Q8_PANEL, acc, (size_t)cols * sizeof(float));
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni")))

/* MR rows by one panel over every block, xr the first row's records (the
 * others ld bytes apart). Per block: each row's two int32 accumulators
 * (features 0-15, 16-31) start at corr; eight quads of k, each one 64-byte
 * weight load per 16 features and the row's 4 x bytes broadcast; then the
 * block's sums are scaled into the F32 accumulators. */
VNNI_TARGET __attribute__((always_inline)) static inline void vnni_micro(int MR, float *out, int ldo,
                                                                       const unsigned char *xr, size_t ld,
                                                                       const uint8_t *panel, int nb, int cols) {
    __m512 f0[MR_Q8], f1[MR_Q8];
    const unsigned char *row[MR_Q8];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) f0[r] = _mm512_setzero_ps(), f1[r] = _mm512_setzero_ps(), row[r] = xr + r * ld;
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = panel + (size_t)b * Q8_BLOCK_BYTES;
        __m512i i0[MR_Q8], i1[MR_Q8];
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) i0[r] = i1[r] = _mm512_set1_epi32(((const q8_xblock *)row[r])->corr);
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            __m512i w0 = _mm512_load_si512((const void *)(blk + q * 128)), w1 = _mm512_load_si512((const void *)(blk + q * 128 + 64));
#pragma GCC unroll 6
            for (int r = 0; r < MR; r++) {
                int32_t quad;
                memcpy(&quad, row[r] + 4 * q, sizeof quad);
                __m512i xv = _mm512_set1_epi32(quad);
                i0[r] = _mm512_dpbusd_epi32(i0[r], w0, xv);
                i1[r] = _mm512_dpbusd_epi32(i1[r], w1, xv);
            }
        }
        __m512 s0 = _mm512_load_ps((const void *)(blk + Q8_BLOCK * Q8_PANEL)), s1 = _mm512_load_ps((const void *)(blk + Q8_BLOCK * Q8_PANEL + 64));
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m512 xs = _mm512_set1_ps(((const q8_xblock *)row[r])->scale);
            f0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0[r]), _mm512_mul_ps(s0, xs), f0[r]);
            f1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1[r]), _mm512_mul_ps(s1, xs), f1[r]);
            row[r] += Q8_XBLOCK;
        }
    }
    __mmask16 m0 = latent_lane_mask16(cols), m1 = latent_lane_mask16(cols - 16);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        _mm512_mask_storeu_ps(out + (size_t)r * ldo, m0, f0[r]);
        _mm512_mask_storeu_ps(out + (size_t)r * ldo + 16, m1, f1[r]);
    }
}

#define VNNI_FN(R)                                                                                                 \
    VNNI_TARGET static void vnni_##R(float *out, int ldo, const unsigned char *xr, size_t ld, const uint8_t *panel,  \
                                     int nb, int cols) {                                                            \
        vnni_micro(R, out, ldo, xr, ld, panel, nb, cols);                                                           \
    }
VNNI_FN(1) VNNI_FN(2) VNNI_FN(3) VNNI_FN(4) VNNI_FN(5) VNNI_FN(6)

typedef void (*q8_micro)(float *, int, const unsigned char *, size_t, const uint8_t *, int, int);
static const q8_micro vnni_micros[MR_Q8] = {vnni_1, vnni_2, vnni_3, vnni_4, vnni_5, vnni_6};

/* Each panel against every row tile: a panel (K 1536: 54 KiB) stays in L2
 * while the rows pass over it; a tile's rows (9 KiB) in L1. */
static void run_vnni(float *out, int ldo, const q8_rows *x, int n, const uint8_t *panels, int p0, int p1) {
    int nb = x->nb;
    for (int pn = p0; pn < p1; pn++) {
        const uint8_t *panel = panels + (size_t)pn * nb * Q8_BLOCK_BYTES;
        for (int i = 0; i < x->m; i += MR_Q8) {
            int mr = x->m - i < MR_Q8 ? x->m - i : MR_Q8;
            vnni_micros[mr - 1](out + (size_t)i * ldo + (size_t)pn * Q8_PANEL, ldo, x->data + (size_t)i * x->ld, x->ld,
                                panel, nb, panel_cols(n, pn));
        }
    }
}

#endif

latent_gemm_q8_fn latent_gemm_q8_pick(latent_isa isa, const char **name) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= LATENT_ISA_AVX512 && __builtin_cpu_supports("avx512vnni")) {
        *name = "avx512vnni";
        return run_vnni;
    }
#endif
    *name = "generic";
    return run_generic;
}
