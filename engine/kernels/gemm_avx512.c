/* AVX-512 kernel over packed weight panels (see gemm.h).
 *
 * The micro-tile is MR rows of X by one 32-feature panel: 2*MR accumulators
 * in registers; each k-step loads the panel's two vectors and broadcasts one
 * X value per row (folded into the FMA as a memory operand). K is cut into
 * blocks so an X tile and a panel slice stay in L1; a group of panels stays
 * in L2 while every row tile of X passes over it.
 *
 * Why not OpenBLAS: its sgemm repacks the weights on every call (a whole
 * extra pass over them at small M, i.e. batched decoding) and runs its AVX2
 * kernels under OPENBLAS_CORETYPE=Haswell, which this machine type sets. */
#include "kernels/kernels.h"
#include "hugemem.h"

#include <stdlib.h>
#include <string.h>

#define MR_MAX 12
#define KB 256          /* k per block: X tile 12 x 256 and a panel slice fit L1 */
#define SMALL_M_X_BYTES (512 * 1024) /* X this small skips K blocking */
#define PANEL_GROUP 16  /* panels per L2 block: 16 x 256 x 32 floats = 512 KiB */

int latent_gemm_pack(gemm_packed *p, const float *w, int n, int k) {
    memset(p, 0, sizeof *p);
    int np = (n + GEMM_PANEL - 1) / GEMM_PANEL;
    p->data = latent_huge_alloc(latent_gemm_packed_bytes(np, k));
    if (!p->data) return -1;
    for (int pn = 0; pn < np; pn++) {
        float *dst = p->data + (size_t)pn * k * GEMM_PANEL;
        for (int kk = 0; kk < k; kk++)
            for (int j = 0; j < GEMM_PANEL; j++) {
                int row = pn * GEMM_PANEL + j;
                dst[(size_t)kk * GEMM_PANEL + j] = row < n ? w[(size_t)row * k + kk] : 0.0f;
            }
    }
    p->n = n, p->k = k, p->n_panels = np;
    return 0;
}

size_t latent_gemm_packed_bytes(int n_panels, int k) { return (size_t)n_panels * k * GEMM_PANEL * sizeof(float); }

void latent_gemm_packed_free(gemm_packed *p) {
    if (!p) return;
    latent_huge_free(p->data, latent_gemm_packed_bytes(p->n_panels, p->k));
    memset(p, 0, sizeof *p);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

int latent_gemm_available(void) { return latent_isa_active() >= LATENT_ISA_AVX512; }

/* out (MR, 32 valid cols `cols`) (+)= X (MR rows, k in [k0,k1)) panel^T */
__attribute__((target("avx512f"), always_inline)) static inline void
micro(int MR, float *out, int ldo, const float *x, int ldx, const float *panel, int k0, int k1, int accumulate,
      int cols) {
    __m512 acc0[MR_MAX], acc1[MR_MAX];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) acc0[r] = _mm512_setzero_ps(), acc1[r] = _mm512_setzero_ps();
    const float *pw = panel + (size_t)k0 * GEMM_PANEL;
    for (int kk = k0; kk < k1; kk++, pw += GEMM_PANEL) {
        __m512 w0 = _mm512_load_ps(pw), w1 = _mm512_load_ps(pw + 16);
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            __m512 xb = _mm512_set1_ps(x[(size_t)r * ldx + kk]);
            acc0[r] = _mm512_fmadd_ps(xb, w0, acc0[r]);
            acc1[r] = _mm512_fmadd_ps(xb, w1, acc1[r]);
        }
    }
    __mmask16 m0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1);
    __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        float *o = out + (size_t)r * ldo;
        if (accumulate) {
            acc0[r] = _mm512_add_ps(acc0[r], _mm512_maskz_loadu_ps(m0, o));
            acc1[r] = _mm512_add_ps(acc1[r], _mm512_maskz_loadu_ps(m1, o + 16));
        }
        _mm512_mask_storeu_ps(o, m0, acc0[r]);
        _mm512_mask_storeu_ps(o + 16, m1, acc1[r]);
    }
}

#define MICRO_FN(R)                                                                                          \
    __attribute__((target("avx512f"))) static void micro_##R(float *out, int ldo, const float *x, int ldx,  \
                                                             const float *panel, int k0, int k1, int acc,   \
                                                             int cols) {                                    \
        micro(R, out, ldo, x, ldx, panel, k0, k1, acc, cols);                                               \
    }
MICRO_FN(1) MICRO_FN(2) MICRO_FN(3) MICRO_FN(4) MICRO_FN(5) MICRO_FN(6)
MICRO_FN(7) MICRO_FN(8) MICRO_FN(9) MICRO_FN(10) MICRO_FN(11) MICRO_FN(12)

typedef void (*micro_fn)(float *, int, const float *, int, const float *, int, int, int, int);
static const micro_fn micros[MR_MAX] = {micro_1, micro_2, micro_3, micro_4,  micro_5,  micro_6,
                                        micro_7, micro_8, micro_9, micro_10, micro_11, micro_12};

/* One row of X: a matrix-vector product bound by reading the panels. Each
 * panel is streamed whole, start to end (one linear stream the hardware
 * prefetcher follows), with even and odd k in separate accumulators so the
 * FMA chains overlap. No K blocking: the single X row stays in L1. */
__attribute__((target("avx512f"))) static void gemv_panels(float *out, const float *x, const gemm_packed *p,
                                                           int p0, int p1) {
    int k = p->k;
    for (int pn = p0; pn < p1; pn++) {
        const float *pw = p->data + (size_t)pn * k * GEMM_PANEL;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int kk = 0;
        for (; kk + 2 <= k; kk += 2, pw += 2 * GEMM_PANEL) {
            __m512 x0 = _mm512_set1_ps(x[kk]), x1 = _mm512_set1_ps(x[kk + 1]);
            a0 = _mm512_fmadd_ps(x0, _mm512_load_ps(pw), a0);
            a1 = _mm512_fmadd_ps(x0, _mm512_load_ps(pw + 16), a1);
            a2 = _mm512_fmadd_ps(x1, _mm512_load_ps(pw + 32), a2);
            a3 = _mm512_fmadd_ps(x1, _mm512_load_ps(pw + 48), a3);
        }
        if (kk < k) {
            __m512 x0 = _mm512_set1_ps(x[kk]);
            a0 = _mm512_fmadd_ps(x0, _mm512_load_ps(pw), a0);
            a1 = _mm512_fmadd_ps(x0, _mm512_load_ps(pw + 16), a1);
        }
        int cols = p->n - pn * GEMM_PANEL;
        __mmask16 m0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1);
        __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
        _mm512_mask_storeu_ps(out + (size_t)pn * GEMM_PANEL, m0, _mm512_add_ps(a0, a2));
        _mm512_mask_storeu_ps(out + (size_t)pn * GEMM_PANEL + 16, m1, _mm512_add_ps(a1, a3));
    }
}

void latent_gemm_run(float *out, int ldo, const float *x, const gemm_packed *p, int m, int p0, int p1) {
    int k = p->k;
    if (m == 1) {
        gemv_panels(out, x, p, p0, p1);
        return;
    }
    if ((size_t)m * k * sizeof(float) <= SMALL_M_X_BYTES) {
        /* Few rows (batched decoding): reading the weights dominates. Each
         * panel is read start to end once, from memory, for the first row
         * tile, and again from L2 for the others; X stays in L2 throughout. */
        for (int pn = p0; pn < p1; pn++) {
            int cols = p->n - pn * GEMM_PANEL;
            if (cols > GEMM_PANEL) cols = GEMM_PANEL;
            const float *panel = p->data + (size_t)pn * k * GEMM_PANEL;
            for (int i = 0; i < m; i += MR_MAX) {
                int mr = m - i < MR_MAX ? m - i : MR_MAX;
                micros[mr - 1](out + (size_t)i * ldo + (size_t)pn * GEMM_PANEL, ldo, x + (size_t)i * k, k, panel, 0,
                               k, 0, cols);
            }
        }
        return;
    }
    for (int k0 = 0; k0 < k; k0 += KB) {
        int k1 = k0 + KB < k ? k0 + KB : k;
        for (int g0 = p0; g0 < p1; g0 += PANEL_GROUP) {
            int g1 = g0 + PANEL_GROUP < p1 ? g0 + PANEL_GROUP : p1;
            for (int i = 0; i < m; i += MR_MAX) {
                int mr = m - i < MR_MAX ? m - i : MR_MAX;
                for (int pn = g0; pn < g1; pn++) {
                    int cols = p->n - pn * GEMM_PANEL;
                    if (cols > GEMM_PANEL) cols = GEMM_PANEL;
                    micros[mr - 1](out + (size_t)i * ldo + (size_t)pn * GEMM_PANEL, ldo, x + (size_t)i * k, k,
                                   p->data + (size_t)pn * k * GEMM_PANEL, k0, k1, k0 > 0, cols);
                }
            }
        }
    }
}

#else

int latent_gemm_available(void) { return 0; }
void latent_gemm_run(float *out, int ldo, const float *x, const gemm_packed *p, int m, int p0, int p1) {
    (void)out, (void)ldo, (void)x, (void)p, (void)m, (void)p0, (void)p1;
}

#endif
