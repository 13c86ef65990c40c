/* F32 products over packed weight panels, on every ISA path.
 *
 * Layout: W (n, k) cut into panels of 32 output features, each stored
 * [k][32] (k-major, the 32 features side by side), 64-byte aligned.
 *
 * Reduction order, for batch invariance (docs/api.md, "Determinism"): each
 * output element sums k in blocks of KB; within a block one running sum
 * from zero, a fused multiply-add per k in k order; the blocks' sums are
 * added to the output in k order. Nothing depends on the number of rows,
 * a row's place among them, or which thread runs which panels (threads
 * split panels, never k), so a row alone and a row among 512 get the same
 * bits. The AVX-512, AVX2 and generic paths do the same operations in the
 * same order (generic through fmaf), so they agree bit for bit as well.
 *
 * The AVX-512 micro-tile is MR rows of X by one panel: 2*MR accumulators in
 * registers; each k-step loads the panel's two vectors and broadcasts one X
 * value per row. A KB block of an X tile and of a panel stays in L1; a group
 * of panels stays in L2 while every row tile of X passes over it.
 *
 * Why not OpenBLAS: its sgemm repacks the weights on every call (a whole
 * extra pass over them at small M, i.e. batched decoding), runs its AVX2
 * kernels under OPENBLAS_CORETYPE=Haswell, which this machine type sets,
 * and its sgemv and sgemm reduce in different orders, so a row's bits would
 * depend on how many rows share its call. */
#include "kernels/kernels.h"
#include "hugemem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MR_MAX 12
#define KB 256          /* k per block: an X tile 12 x 256 and a panel slice fit L1 */
#define SMALL_M_X_BYTES (512 * 1024) /* X this small: each panel read once, whole */
#define PANEL_GROUP 16  /* panels per L2 block: 16 x 256 x 32 floats = 512 KiB */

int latent_gemm_pack(gemm_packed *p, const float *w, int n, int k) {
    memset(p, 0, sizeof *p);
    int np = (n + GEMM_PANEL - 1) / GEMM_PANEL;
    p->data = latent_huge_alloc_raw(latent_gemm_packed_bytes(np, k)); /* every float is written below */
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

static inline int panel_cols(const gemm_packed *p, int pn) {
    int cols = p->n - pn * GEMM_PANEL;
    return cols > GEMM_PANEL ? GEMM_PANEL : cols;
}

/* ---- generic and AVX2: one row by one panel, a KB block at a time ---------------------------- */

/* acc[j] = sum over k in [k0, k1) of x[k] w[k][j], from zero, in k order. */
static void generic_block(float acc[GEMM_PANEL], const float *x, const float *panel, int k0, int k1) {
    for (int j = 0; j < GEMM_PANEL; j++) acc[j] = 0.0f;
    for (int kk = k0; kk < k1; kk++) {
        const float *w = panel + (size_t)kk * GEMM_PANEL;
        for (int j = 0; j < GEMM_PANEL; j++) acc[j] = fmaf(x[kk], w[j], acc[j]);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static void avx2_block(float acc[GEMM_PANEL], const float *x, const float *panel,
                                                           int k0, int k1) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const float *w = panel + (size_t)k0 * GEMM_PANEL;
    for (int kk = k0; kk < k1; kk++, w += GEMM_PANEL) {
        __m256 xv = _mm256_broadcast_ss(x + kk);
        a0 = _mm256_fmadd_ps(xv, _mm256_load_ps(w), a0);
        a1 = _mm256_fmadd_ps(xv, _mm256_load_ps(w + 8), a1);
        a2 = _mm256_fmadd_ps(xv, _mm256_load_ps(w + 16), a2);
        a3 = _mm256_fmadd_ps(xv, _mm256_load_ps(w + 24), a3);
    }
    _mm256_storeu_ps(acc, a0), _mm256_storeu_ps(acc + 8, a1);
    _mm256_storeu_ps(acc + 16, a2), _mm256_storeu_ps(acc + 24, a3);
}
#endif

typedef void (*f32_block)(float *, const float *, const float *, int, int);

static void run_rows(f32_block block, float *out, int ldo, const float *x, const gemm_packed *p, int m, int p0, int p1) {
    int k = p->k;
    for (int pn = p0; pn < p1; pn++) {
        const float *panel = p->data + (size_t)pn * k * GEMM_PANEL;
        int cols = panel_cols(p, pn);
        for (int r = 0; r < m; r++) {
            float *o = out + (size_t)r * ldo + (size_t)pn * GEMM_PANEL;
            for (int k0 = 0; k0 < k; k0 += KB) {
                float acc[GEMM_PANEL];
                block(acc, x + (size_t)r * k, panel, k0, k0 + KB < k ? k0 + KB : k);
                for (int j = 0; j < cols; j++) o[j] = k0 == 0 ? acc[j] : o[j] + acc[j];
            }
        }
    }
}

static void run_generic(float *out, int ldo, const float *x, const gemm_packed *p, int m, int p0, int p1) {
    run_rows(generic_block, out, ldo, x, p, m, p0, p1);
}

#if defined(__x86_64__) && defined(__GNUC__)
static void run_avx2(float *out, int ldo, const float *x, const gemm_packed *p, int m, int p0, int p1) {
    run_rows(avx2_block, out, ldo, x, p, m, p0, p1);
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)


/* out (MR rows, `cols` valid) = [out +] X (MR rows, k in [k0,k1)) panel^T */
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
    __mmask16 m0 = latent_lane_mask16(cols), m1 = latent_lane_mask16(cols - 16);
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        float *o = out + (size_t)r * ldo;
        if (accumulate) {
            acc0[r] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, o), acc0[r]);
            acc1[r] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, o + 16), acc1[r]);
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

/* One row of X: bound by reading the panels. Two panels at a time, so four
 * independent FMA chains overlap, each streamed start to end (a linear
 * stream the prefetcher follows); the order per output is micro's. */
__attribute__((target("avx512f"))) static void gemv_panels(float *out, const float *x, const gemm_packed *p, int p0,
                                                           int p1) {
    int k = p->k, pn = p0;
    for (; pn + 2 <= p1; pn += 2) {
        const float *wa = p->data + (size_t)pn * k * GEMM_PANEL, *wb = wa + (size_t)k * GEMM_PANEL;
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (int k0 = 0; k0 < k; k0 += KB) {
            int k1 = k0 + KB < k ? k0 + KB : k;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int kk = k0; kk < k1; kk++) {
                __m512 xv = _mm512_set1_ps(x[kk]);
                const float *pa = wa + (size_t)kk * GEMM_PANEL, *pb = wb + (size_t)kk * GEMM_PANEL;
                a0 = _mm512_fmadd_ps(xv, _mm512_load_ps(pa), a0);
                a1 = _mm512_fmadd_ps(xv, _mm512_load_ps(pa + 16), a1);
                a2 = _mm512_fmadd_ps(xv, _mm512_load_ps(pb), a2);
                a3 = _mm512_fmadd_ps(xv, _mm512_load_ps(pb + 16), a3);
            }
            if (k0 == 0) s0 = a0, s1 = a1, s2 = a2, s3 = a3;
            else s0 = _mm512_add_ps(s0, a0), s1 = _mm512_add_ps(s1, a1), s2 = _mm512_add_ps(s2, a2), s3 = _mm512_add_ps(s3, a3);
        }
        float *o = out + (size_t)pn * GEMM_PANEL;
        int cb = panel_cols(p, pn + 1);
        _mm512_storeu_ps(o, s0), _mm512_storeu_ps(o + 16, s1);
        _mm512_mask_storeu_ps(o + 32, latent_lane_mask16(cb), s2);
        _mm512_mask_storeu_ps(o + 48, latent_lane_mask16(cb - 16), s3);
    }
    if (pn < p1) micros[0](out + (size_t)pn * GEMM_PANEL, 0, x, 0, p->data + (size_t)pn * k * GEMM_PANEL, 0,
                           k < KB ? k : KB, 0, panel_cols(p, pn));
    for (int k0 = KB; pn < p1 && k0 < k; k0 += KB)
        micros[0](out + (size_t)pn * GEMM_PANEL, 0, x, 0, p->data + (size_t)pn * k * GEMM_PANEL, k0,
                  k0 + KB < k ? k0 + KB : k, 1, panel_cols(p, pn));
}

static void run_avx512(float *out, int ldo, const float *x, const gemm_packed *p, int m, int p0, int p1) {
    int k = p->k;
    if (m == 1) {
        gemv_panels(out, x, p, p0, p1);
        return;
    }
    if ((size_t)m * k * sizeof(float) <= SMALL_M_X_BYTES) {
        /* Few rows (batched decoding): reading the weights dominates. Each
         * panel's KB slice is read from memory for the first row tile and
         * from L1/L2 for the others; X stays in L2 throughout. */
        for (int pn = p0; pn < p1; pn++) {
            const float *panel = p->data + (size_t)pn * k * GEMM_PANEL;
            for (int k0 = 0; k0 < k; k0 += KB)
                for (int i = 0; i < m; i += MR_MAX) {
                    int mr = m - i < MR_MAX ? m - i : MR_MAX;
                    micros[mr - 1](out + (size_t)i * ldo + (size_t)pn * GEMM_PANEL, ldo, x + (size_t)i * k, k, panel,
                                   k0, k0 + KB < k ? k0 + KB : k, k0 > 0, panel_cols(p, pn));
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
                for (int pn = g0; pn < g1; pn++)
                    micros[mr - 1](out + (size_t)i * ldo + (size_t)pn * GEMM_PANEL, ldo, x + (size_t)i * k, k,
                                   p->data + (size_t)pn * k * GEMM_PANEL, k0, k1, k0 > 0, panel_cols(p, pn));
            }
        }
    }
}
#endif

latent_gemm_f32_fn latent_gemm_f32_pick(latent_isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= LATENT_ISA_AVX512) return run_avx512;
    if (isa >= LATENT_ISA_AVX2) return run_avx2;
#endif
    return run_generic;
}
