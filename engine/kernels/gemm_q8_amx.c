/* Int8 products on AMX tiles (TDPBSSD) through the tile layer (amx_tile.h),
 * over the q8 panels of q8_pack.c: the same source runs on the hardware and
 * through the software model.
 *
 * One 32 x 32 k-block is one tile accumulation with p = 8 byte quads, with
 * the 2x2 blocking of amx_tile.h (32 rows x 32 features):
 *   A[i]  16 rows of X's quantized block: the q of the rows' records, read
 *         at the row stride of q8_rows;
 *   B[j]  8 quads x 16 features: the block's weights, [8][32][4], read at
 *         stride 128 from byte 0 or 64. TDPBSSD multiplies signed by signed,
 *         and the panels hold w_q + 128 for vpdpbusd, so each block is first
 *         copied with its top bit flipped (v ^ 0x80 = w_q as a signed byte),
 *         once per panel block for every row group.
 * The tiles give each block's integer sum exactly (no +128 correction
 * needed); it is scaled into out with the expression of the other paths,
 *     out = fma((float) isum, w_scale * x_scale, b == 0 ? 0 : out),
 * blocks in k order, so this path's bits are the VNNI and generic paths'. */
#include "kernels/amx_tile.h"
#include "kernels/kernels.h"
#include "kernels/q8.h"

#include <math.h>
#include <string.h>

/* The block's integer sums scaled into out: row r's features [0, cols) from
 * the stored C tiles. The scalar loop is the reference; the AVX-512 one
 * computes the same expression per lane (cvtdq2ps rounds as the cast does,
 * vmulps as ws * xs, vfmadd231ps as fmaf), so the bits are the same. It is
 * what makes the path pay: on the Xeon the scalar loop (with fmaf a library
 * call in this file's baseline build) took 70% of a q8 prefill and made the
 * tile path 8x slower than VNNI. The kernel table's level picks it (every AMX
 * CPU has AVX-512, and amx-model runs at avx512bf16 where the CPU has it),
 * so test_q8 runs the vector epilogue without AMX; the scalar one serves the
 * model on CPUs without AVX-512 only. */
static void scale_row_scalar(float *dst, const int32_t *c0, const int32_t *c1, const float *ws, float xs, int cols,
                             int first) {
    for (int f = 0; f < cols; f++) {
        int32_t isum = f < 16 ? c0[f] : c1[f - 16];
        dst[f] = fmaf((float)isum, ws[f] * xs, first ? 0.0f : dst[f]);
    }
}

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx512f"))) static void scale_row_avx512(float *dst, const int32_t *c0, const int32_t *c1,
                                                                 const float *ws, float xs, int cols, int first) {
    __m512 x = _mm512_set1_ps(xs);
    for (int h = 0; h < 2 && 16 * h < cols; h++) {
        int left = cols - 16 * h;
        __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m512 v = _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(m, h ? c1 : c0));
        __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, ws + 16 * h), x);
        __m512 acc = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, dst + 16 * h);
        _mm512_mask_storeu_ps(dst + 16 * h, m, _mm512_fmadd_ps(v, s, acc));
    }
}
#endif

typedef void (*scale_row_fn)(float *, const int32_t *, const int32_t *, const float *, float, int, int);

/* The block's C tiles scaled into out rows [r0, r0 + rows), features c0.. */
static void put_block(const latent_amx_ops *o, float *out, int ldo, const q8_rows *x, int r0, int rows, int c0,
                      int cols, int b, const float *ws, scale_row_fn scale_row) {
    static _Thread_local int32_t c[2][2][AMX_MAX_ROWS][16];
    for (int i = 0; i < 2 && 16 * i < rows; i++)
        for (int j = 0; j < 2; j++) o->store(2 * i + j, c[i][j], 16 * sizeof(int32_t));
    for (int r = 0; r < rows; r++)
        scale_row(out + (size_t)(r0 + r) * ldo + c0, c[r / 16][0][r % 16], c[r / 16][1][r % 16], ws,
                  latent_q8_xblock(x, r0 + r, b)->scale, cols, b == 0);
}

/* Rows [r0, r0 + rows) (1..32) by one block of one panel, w the block's
 * weights as signed bytes. */
static void run_block(const latent_amx_ops *o, float *out, int ldo, const q8_rows *x, int r0, int rows, int c0, int cols,
                      int b, const int8_t *w, const float *ws, scale_row_fn scale_row) {
    int two = rows > 16;
    size_t lda = x->ld; /* A: each row's 32 q of block b, ld bytes apart */
    const int8_t *a = latent_q8_xblock(x, r0, b)->q;
    for (int t = 0; t < (two ? 4 : 2); t++) o->zero(t);
    o->load(4, a, lda);
    if (two) o->load(5, a + 16 * lda, lda);
    o->load(6, w, 4 * Q8_PANEL);       /* features 0..15 of 8 quads */
    o->load(7, w + 64, 4 * Q8_PANEL);  /* features 16..31 */
    o->dpbssd(0, 0), o->dpbssd(0, 1);
    if (two) o->dpbssd(1, 0), o->dpbssd(1, 1);
    put_block(o, out, ldo, x, r0, rows, c0, cols, b, ws, scale_row);
}

/* Rows [r0, r1) in groups of `group` (1..32, one tile shape) by one panel,
 * block by block in k order. */
static void run_rows(const latent_amx_ops *o, float *out, int ldo, const q8_rows *x, int r0, int r1, int group,
                     const uint8_t *panel, int c0, int cols, scale_row_fn scale_row) {
    latent_amx_shape(o, group < 16 ? group : 16, group > 16 ? group - 16 : 0, 8);
    for (int b = 0; b < x->nb; b++) {
        const uint8_t *blk = panel + (size_t)b * Q8_BLOCK_BYTES;
        _Alignas(64) int8_t w[Q8_BLOCK * Q8_PANEL];
        float ws[Q8_PANEL];
        for (int i = 0; i < Q8_BLOCK * Q8_PANEL; i++) w[i] = (int8_t)(blk[i] ^ 0x80);
        memcpy(ws, blk + Q8_BLOCK * Q8_PANEL, sizeof ws);
        for (int r = r0; r < r1; r += group) run_block(o, out, ldo, x, r, group, c0, cols, b, w, ws, scale_row);
    }
}

void latent_gemm_q8_amx(const latent_amx_ops *o, float *out, int ldo, const q8_rows *x, int n, const uint8_t *panels,
                        int p0, int p1) {
    int m = x->m, full = m / 32 * 32;
    scale_row_fn scale_row = scale_row_scalar;
#if defined(__x86_64__)
    if (latent_kernels_active()->avx512) scale_row = scale_row_avx512;
#endif
    latent_amx_begin();
    for (int pn = p0; pn < p1; pn++) {
        const uint8_t *panel = panels + (size_t)pn * x->nb * Q8_BLOCK_BYTES;
        int c0 = pn * Q8_PANEL, cols = n - c0 < Q8_PANEL ? n - c0 : Q8_PANEL;
        if (full) run_rows(o, out, ldo, x, 0, full, 32, panel, c0, cols, scale_row);
        if (full < m) run_rows(o, out, ldo, x, full, m, m - full, panel, c0, cols, scale_row);
    }
}
