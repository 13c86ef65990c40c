/* BF16 matrix products with F32 accumulation over packed weight panels.
 *
 * Layout: a weight W (N, K) is cut into panels of 32 output features; a
 * panel holds K/2 pairs (k even, k odd), and for each pair the 32 features'
 * two values side by side: [K/2][32][2] bf16 (K padded to even with 0). One
 * 64-byte load is then 16 features x one k pair, the operand of AVX512-BF16's
 * vdpbf16ps, which does, per 32-bit lane,
 *     acc += x[k+1] * w[k+1];  acc += x[k] * w[k]      (products exact)
 * The AVX-512F and generic paths do the same two fused multiply-adds in the
 * same order on the same bf16 values, so every path rounds alike (denormal
 * inputs aside: vdpbf16ps flushes them to zero).
 *
 * Reduction order, for batch invariance: each output element sums K in
 * blocks of KB_PAIRS pairs; within a block one running F32 sum from zero in
 * k order; the blocks' sums are added to the output in k order. Nothing
 * depends on the number of rows, a row's place among them, or which thread
 * runs which panels (threads split panels, never K).
 *
 * The vector kernels here serve the level their caller names
 * (latent_gemm_bf16_vec_pick; the kernel table holds the active level's, the
 * entry points are in gemm_path.c); packing goes through the shared packer
 * of bf16_pack.c. */
#include "kernels/kernels.h"
#include "hugemem.h"
#include "latent/threads.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#define KB_PAIRS 128      /* k pairs per block: a 12-row bf16 X slice (6 KiB) and a panel slice (16 KiB) in L1 */
#define MR_BF16 12        /* rows per micro-tile of the vdpbf16ps path */
#define MR_F32EMU 8       /* ...of the AVX-512F path (four weight registers per pair) */
#define PACK_SPLIT_BYTES (256 << 10) /* panels this big are packed over the threads */

size_t latent_gemm_bf16_bytes(int n_panels, int k) { return (size_t)n_panels * ((k + 1) / 2) * GEMM_PANEL * 2 * sizeof(uint16_t); }

/* Packing at load: the panels of [p0, p1) per task, over the engine threads,
 * so the packing and the first touches of its pages (each a page fault that
 * the kernel zeroes) are split over the cores. */
typedef struct {
    uint16_t *d;
    const float *wf;
    const uint16_t *wb;
    latent_isa isa;
    int n, k, n_panels, per_task;
} pack_job;

static void pack_task(void *ctx, int t) {
    const pack_job *j = ctx;
    int p0 = t * j->per_task, p1 = p0 + j->per_task < j->n_panels ? p0 + j->per_task : j->n_panels;
    latent_bf16_pack_panels_on(j->isa, j->d, j->wf, j->wb, (size_t)j->k, 1, j->n, j->k, p0, p1);
}

int latent_gemm_bf16_pack_on(latent_isa isa, int spread, uint16_t **out, int *n_panels, const float *wf,
                             const uint16_t *wb, int n, int k) {
    int np = (n + GEMM_PANEL - 1) / GEMM_PANEL;
    /* not zeroed: the packer writes every byte, padding included */
    uint16_t *d = latent_huge_alloc_raw(latent_gemm_bf16_bytes(np, k));
    if (!d) return -1;
    /* about 8 tasks a thread, of at least one panel; small matrices inline */
    pack_job j = {d, wf, wb, isa, n, k, np, np};
    int threads = spread && latent_gemm_bf16_bytes(np, k) >= PACK_SPLIT_BYTES ? latent_get_threads() : 1;
    if (threads > 1) j.per_task = (np + 8 * threads - 1) / (8 * threads);
    int tasks = (np + j.per_task - 1) / j.per_task;
    if (tasks > 1) latent_parallel_for(pack_task, &j, tasks);
    else if (np > 0) pack_task(&j, 0);
    *out = d, *n_panels = np;
    return 0;
}

void latent_gemm_bf16_free(uint16_t *panels, int n_panels, int k) {
    if (panels) latent_huge_free(panels, latent_gemm_bf16_bytes(n_panels, k));
}

float latent_gemm_bf16_weight(const uint16_t *panels, int k, int row, int col) {
    int kp = (k + 1) / 2, pn = row / GEMM_PANEL, j = row % GEMM_PANEL;
    return latent_bf16_to_f32(panels[((size_t)pn * kp + col / 2) * GEMM_PANEL * 2 + 2 * j + col % 2]);
}

/* ---- generic: plain C over the same layout -------------------------------------------------- */

static inline float bf(uint16_t h) { return latent_bf16_to_f32(h); }

/* One row of X by one panel over pairs [q0, q1): 32 sums from zero. The
 * row's pairs are `ldq` apart: 2 in the row layout, 2m pair-major. */
static void generic_block(float acc[GEMM_PANEL], const uint16_t *xr, int ldq, const uint16_t *panel, int q0, int q1) {
    for (int j = 0; j < GEMM_PANEL; j++) acc[j] = 0.0f;
    for (int q = q0; q < q1; q++) {
        const uint16_t *w = panel + (size_t)q * GEMM_PANEL * 2;
        float xe = bf(xr[(size_t)q * ldq]), xo = bf(xr[(size_t)q * ldq + 1]);
        for (int j = 0; j < GEMM_PANEL; j++) {
            acc[j] = fmaf(xo, bf(w[2 * j + 1]), acc[j]);
            acc[j] = fmaf(xe, bf(w[2 * j]), acc[j]);
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* generic_block with AVX2 + FMA: 8 features a register, the same two fused
 * multiply-adds per pair in the same order, so the same bits. */
__attribute__((target("avx2,fma"))) static void avx2_block(float acc[GEMM_PANEL], const uint16_t *xr, int ldq,
                                                           const uint16_t *panel, int q0, int q1) {
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    for (int q = q0; q < q1; q++) {
        const uint16_t *w = panel + (size_t)q * GEMM_PANEL * 2;
        __m256 xe = _mm256_set1_ps(bf(xr[(size_t)q * ldq])), xo = _mm256_set1_ps(bf(xr[(size_t)q * ldq + 1]));
        for (int g = 0; g < 4; g++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(w + 16 * g)); /* 8 features, (even, odd) each */
            __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
            a[g] = _mm256_fmadd_ps(xe, we, _mm256_fmadd_ps(xo, wo, a[g]));
        }
    }
    for (int g = 0; g < 4; g++) _mm256_storeu_ps(acc + 8 * g, a[g]);
}
#endif

/* X in rows ([m][k/2][2]) or pair-major ([k/2][m][2]). */
typedef void (*bf16_block)(float *, const uint16_t *, int, const uint16_t *, int, int);

static void run_generic(bf16_block block, int pair_major, float *out, int ldo, const uint16_t *xb, int m, int n, int k,
                        const uint16_t *panels, int p0, int p1, int accumulate) {
    int kp = (k + 1) / 2, ldq = pair_major ? 2 * m : 2;
    size_t row_step = pair_major ? 2 : (size_t)kp * 2;
    for (int pn = p0; pn < p1; pn++) {
        const uint16_t *panel = panels + (size_t)pn * kp * GEMM_PANEL * 2;
        int cols = n - pn * GEMM_PANEL < GEMM_PANEL ? n - pn * GEMM_PANEL : GEMM_PANEL;
        for (int r = 0; r < m; r++) {
            float *o = out + (size_t)r * ldo + (size_t)pn * GEMM_PANEL;
            for (int q0 = 0; q0 < kp; q0 += KB_PAIRS) {
                float acc[GEMM_PANEL];
                block(acc, xb + r * row_step, ldq, panel, q0, q0 + KB_PAIRS < kp ? q0 + KB_PAIRS : kp);
                for (int j = 0; j < cols; j++) o[j] = q0 == 0 && !accumulate ? acc[j] : o[j] + acc[j];
            }
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* Stores (first block) or adds a block's sums: the blocks' fixed order. */
__attribute__((target("avx512f"), always_inline)) static inline void put(float *o, __m512 a0, __m512 a1, int cols,
                                                                         int first) {
    __mmask16 m0 = latent_lane_mask16(cols), m1 = latent_lane_mask16(cols - 16);
    if (!first) {
        a0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, o), a0);
        a1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, o + 16), a1);
    }
    _mm512_mask_storeu_ps(o, m0, a0);
    _mm512_mask_storeu_ps(o + 16, m1, a1);
}

/* ---- AVX512-BF16: vdpbf16ps ---- */

__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) static inline void
dp_micro(int MR, int pair_major, float *out, int ldo, const uint16_t *xb, int ldx2, const uint16_t *panel, int q0,
         int q1, int cols, int acc) {
    __m512 acc0[MR_BF16], acc1[MR_BF16];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) acc0[r] = _mm512_setzero_ps(), acc1[r] = _mm512_setzero_ps();
    const uint16_t *pw = panel + (size_t)q0 * GEMM_PANEL * 2;
    for (int q = q0; q < q1; q++, pw += GEMM_PANEL * 2) {
        __m512bh w0 = (__m512bh)_mm512_load_si512((const void *)pw), w1 = (__m512bh)_mm512_load_si512((const void *)(pw + 32));
#pragma GCC unroll 12
        for (int r = 0; r < MR; r++) {
            uint32_t pair;
            /* rows: X[r][2q..2q+1] at r ldx2 + 2q; pair-major: at q ldx2 + 2r */
            memcpy(&pair, pair_major ? xb + (size_t)q * ldx2 + 2 * r : xb + (size_t)r * ldx2 + 2 * q, sizeof pair);
            __m512bh xv = (__m512bh)_mm512_set1_epi32((int)pair);
            acc0[r] = _mm512_dpbf16_ps(acc0[r], xv, w0);
            acc1[r] = _mm512_dpbf16_ps(acc1[r], xv, w1);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) put(out + (size_t)r * ldo, acc0[r], acc1[r], cols, q0 == 0 && !acc);
}

#define DP_FN(R)                                                                                                  \
    __attribute__((target("avx512f,avx512bw,avx512bf16"))) static void dp_##R(                                   \
        float *out, int ldo, const uint16_t *xb, int ldx2, const uint16_t *panel, int q0, int q1, int cols,      \
        int acc) {                                                                                                \
        dp_micro(R, 0, out, ldo, xb, ldx2, panel, q0, q1, cols, acc);                                            \
    }                                                                                                             \
    __attribute__((target("avx512f,avx512bw,avx512bf16"))) static void dpq_##R(                                  \
        float *out, int ldo, const uint16_t *xb, int ldx2, const uint16_t *panel, int q0, int q1, int cols,      \
        int acc) {                                                                                                \
        dp_micro(R, 1, out, ldo, xb, ldx2, panel, q0, q1, cols, acc);                                            \
    }
DP_FN(1) DP_FN(2) DP_FN(3) DP_FN(4) DP_FN(5) DP_FN(6) DP_FN(7) DP_FN(8) DP_FN(9) DP_FN(10) DP_FN(11) DP_FN(12)

/* ---- AVX-512F: the pairs widened to F32 (low half: k even, high half: k odd) ---- */

__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void
emu_micro(int MR, float *out, int ldo, const uint16_t *xb, int ldx2, const uint16_t *panel, int q0, int q1, int cols,
          int acc) {
    __m512 acc0[MR_F32EMU], acc1[MR_F32EMU];
    const __m512i hi_mask = _mm512_set1_epi32((int)0xFFFF0000u);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) acc0[r] = _mm512_setzero_ps(), acc1[r] = _mm512_setzero_ps();
    const uint16_t *pw = panel + (size_t)q0 * GEMM_PANEL * 2;
    for (int q = q0; q < q1; q++, pw += GEMM_PANEL * 2) {
        __m512i w0 = _mm512_load_si512((const void *)pw), w1 = _mm512_load_si512((const void *)(pw + 32));
        __m512 w0e = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)), w0o = _mm512_castsi512_ps(_mm512_and_si512(w0, hi_mask));
        __m512 w1e = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)), w1o = _mm512_castsi512_ps(_mm512_and_si512(w1, hi_mask));
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            const uint16_t *xp = xb + (size_t)r * ldx2 + 2 * q;
            __m512 xe = _mm512_castsi512_ps(_mm512_set1_epi32((int)((uint32_t)xp[0] << 16)));
            __m512 xo = _mm512_castsi512_ps(_mm512_set1_epi32((int)((uint32_t)xp[1] << 16)));
            acc0[r] = _mm512_fmadd_ps(xe, w0e, _mm512_fmadd_ps(xo, w0o, acc0[r]));
            acc1[r] = _mm512_fmadd_ps(xe, w1e, _mm512_fmadd_ps(xo, w1o, acc1[r]));
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) put(out + (size_t)r * ldo, acc0[r], acc1[r], cols, q0 == 0 && !acc);
}

#define EMU_FN(R)                                                                                                 \
    __attribute__((target("avx512f,avx512bw"))) static void emu_##R(float *out, int ldo, const uint16_t *xb,     \
                                                                     int ldx2, const uint16_t *panel, int q0,    \
                                                                     int q1, int cols, int acc) {                \
        emu_micro(R, out, ldo, xb, ldx2, panel, q0, q1, cols, acc);                                              \
    }
EMU_FN(1) EMU_FN(2) EMU_FN(3) EMU_FN(4) EMU_FN(5) EMU_FN(6) EMU_FN(7) EMU_FN(8)

typedef void (*bf16_micro)(float *, int, const uint16_t *, int, const uint16_t *, int, int, int, int);
static const bf16_micro dp_micros[MR_BF16] = {dp_1, dp_2, dp_3, dp_4, dp_5, dp_6, dp_7, dp_8, dp_9, dp_10, dp_11, dp_12};
static const bf16_micro dpq_micros[MR_BF16] = {dpq_1, dpq_2, dpq_3, dpq_4, dpq_5, dpq_6,
                                               dpq_7, dpq_8, dpq_9, dpq_10, dpq_11, dpq_12};
static const bf16_micro emu_micros[MR_F32EMU] = {emu_1, emu_2, emu_3, emu_4, emu_5, emu_6, emu_7, emu_8};

/* Panels [p0, p1) of every row: for each panel, each K block, each row tile.
 * A panel's K blocks run in order, so every output element sees the same
 * sequence of block sums whatever m is. */
static void run_tiles(const bf16_micro *micros, int mr_max, int pair_major, float *out, int ldo, const uint16_t *xb,
                      int m, int n, int k, const uint16_t *panels, int p0, int p1, int acc) {
    int kp = (k + 1) / 2;
    for (int pn = p0; pn < p1; pn++) {
        const uint16_t *panel = panels + (size_t)pn * kp * GEMM_PANEL * 2;
        int cols = n - pn * GEMM_PANEL < GEMM_PANEL ? n - pn * GEMM_PANEL : GEMM_PANEL;
        for (int q0 = 0; q0 < kp; q0 += KB_PAIRS) {
            int q1 = q0 + KB_PAIRS < kp ? q0 + KB_PAIRS : kp;
            for (int i = 0; i < m; i += mr_max) {
                int mr = m - i < mr_max ? m - i : mr_max;
                float *o = out + (size_t)i * ldo + (size_t)pn * GEMM_PANEL;
                if (pair_major) micros[mr - 1](o, ldo, xb + (size_t)i * 2, m * 2, panel, q0, q1, cols, acc);
                else micros[mr - 1](o, ldo, xb + (size_t)i * kp * 2, kp * 2, panel, q0, q1, cols, acc);
            }
        }
    }
}
#endif

/* Each level's kernels: X in rows, and pair-major. */
#define BF16_ARGS float *out, int ldo, const uint16_t *xb, int m, int n, int k, const uint16_t *panels, int p0, int p1, int acc
static void rows_generic(BF16_ARGS) { run_generic(generic_block, 0, out, ldo, xb, m, n, k, panels, p0, p1, acc); }
static void pm_generic(BF16_ARGS) { run_generic(generic_block, 1, out, ldo, xb, m, n, k, panels, p0, p1, acc); }
#if defined(__x86_64__) && defined(__GNUC__)
static void rows_avx2(BF16_ARGS) { run_generic(avx2_block, 0, out, ldo, xb, m, n, k, panels, p0, p1, acc); }
static void pm_avx2(BF16_ARGS) { run_generic(avx2_block, 1, out, ldo, xb, m, n, k, panels, p0, p1, acc); }
static void rows_avx512(BF16_ARGS) { run_tiles(emu_micros, MR_F32EMU, 0, out, ldo, xb, m, n, k, panels, p0, p1, acc); }
static void rows_bf16(BF16_ARGS) { run_tiles(dp_micros, MR_BF16, 0, out, ldo, xb, m, n, k, panels, p0, p1, acc); }
static void pm_bf16(BF16_ARGS) { run_tiles(dpq_micros, MR_BF16, 1, out, ldo, xb, m, n, k, panels, p0, p1, acc); }
#endif
#undef BF16_ARGS

latent_gemm_bf16_fn latent_gemm_bf16_vec_pick(latent_isa isa, int pair_major) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa >= LATENT_ISA_AVX512BF16) return pair_major ? pm_bf16 : rows_bf16;
    /* pair-major X on AVX-512F: the AVX2 code (the trainer packs it only for vdpbf16ps) */
    if (isa >= LATENT_ISA_AVX512 && !pair_major) return rows_avx512;
    if (isa >= LATENT_ISA_AVX2) return pair_major ? pm_avx2 : rows_avx2;
#endif
    return pair_major ? pm_generic : rows_generic;
}

void latent_gemm_bf16_vec_run(latent_isa isa, float *out, int ldo, const uint16_t *xb, int m, int n, int k,
                              const uint16_t *panels, int p0, int p1, int acc) {
    latent_gemm_bf16_vec_pick(isa, 0)(out, ldo, xb, m, n, k, panels, p0, p1, acc);
}

void latent_gemm_bf16_vec_run_pm(latent_isa isa, float *out, int ldo, const uint16_t *xq, int m, int n, int k,
                                 const uint16_t *panels, int p0, int p1, int acc) {
    latent_gemm_bf16_vec_pick(isa, 1)(out, ldo, xq, m, n, k, panels, p0, p1, acc);
}
