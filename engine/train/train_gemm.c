/* The trainer's linear-layer products: F32 through OpenBLAS, or under
 * --precision bf16 both operands rounded to bf16 and multiplied with F32
 * sums by the engine's bf16 panel kernel (engine/kernels/gemm_bf16.c, on
 * this CPU's best path: vdpbf16ps where the CPU has AVX512-BF16). The
 * operands change every step (weights) or every call (activations,
 * gradients), so each call packs them: one pass over each operand, against
 * M N K multiply-adds. */
#include "train/train_ops.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static int tr_bf16;

void latent_tr_set_bf16(int on) { tr_bf16 = on; }
int latent_tr_bf16(void) { return tr_bf16; }

/* Round to nearest even, NaN kept quiet: latent_f32_to_bf16 without
 * branches, so the loops below vectorize (and give the same bits). */
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1)) >> 16, q = (u >> 16) | 0x40;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
}

/* dst[2j] = a[j], dst[2j+1] = b[j] as bf16, j < n: one k pair of a panel
 * whose rows are contiguous in the source (b NULL: zeros). */
#define PAIR_BODY                                                                                             \
    for (int j = 0; j < n; j++) dst[2 * j] = to_bf16(a[j]), dst[2 * j + 1] = b ? to_bf16(b[j]) : 0;
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512bw"))) static void pair_avx512(uint16_t *dst, const float *a, const float *b, int n) {
    PAIR_BODY
}
#endif
static void pair_plain(uint16_t *dst, const float *a, const float *b, int n) { PAIR_BODY }

/* W (N, K) with W[n][k] = src[n * rs + k * cs], as bf16 panels
 * [N/32][K/2][32][2] (gemm_bf16.c's layout), zero padded. */
static void pack_panels(uint16_t *d, const float *src, size_t rs, size_t cs, int N, int K) {
    int np = (N + GEMM_PANEL - 1) / GEMM_PANEL, kp = (K + 1) / 2;
    void (*pair)(uint16_t *, const float *, const float *, int) = pair_plain;
#if defined(__x86_64__) && defined(__GNUC__)
    if (latent_isa_active() >= LATENT_ISA_AVX512) pair = pair_avx512;
#endif
    for (int pn = 0; pn < np; pn++)
        for (int q = 0; q < kp; q++) {
            uint16_t *dst = d + ((size_t)pn * kp + q) * GEMM_PANEL * 2;
            int row0 = pn * GEMM_PANEL, cols = N - row0 < GEMM_PANEL ? N - row0 : GEMM_PANEL;
            if (rs == 1) { /* the panel's 32 features are contiguous for each k */
                pair(dst, src + (size_t)row0 + (size_t)(2 * q) * cs,
                     2 * q + 1 < K ? src + (size_t)row0 + (size_t)(2 * q + 1) * cs : NULL, cols);
            } else {
                for (int j = 0; j < cols; j++)
                    for (int h = 0; h < 2; h++) {
                        int kk = 2 * q + h;
                        dst[2 * j + h] = kk < K ? to_bf16(src[(size_t)(row0 + j) * rs + (size_t)kk * cs]) : 0;
                    }
            }
            for (int j = cols; j < GEMM_PANEL; j++) dst[2 * j] = dst[2 * j + 1] = 0;
        }
}

/* op(A) (M, K) as bf16 rows of even length. A transposed operand (cs > 1:
 * the weight gradient's dY^T) is read in tiles of 32 of its rows, which
 * stay in cache while every output row takes its 32 values from them. */
static void round_rows(uint16_t *xb, const float *A, size_t rs, size_t cs, int M, int K) {
    int kp2 = (K + 1) / 2 * 2;
    if (cs == 1) {
        for (int i = 0; i < M; i++) {
            uint16_t *o = xb + (size_t)i * kp2;
            for (int k = 0; k < K; k++) o[k] = to_bf16(A[(size_t)i * rs + k]);
        }
    } else {
        for (int k0 = 0; k0 < K; k0 += 32) {
            int k1 = k0 + 32 < K ? k0 + 32 : K;
            for (int i = 0; i < M; i++) {
                uint16_t *o = xb + (size_t)i * kp2;
                for (int k = k0; k < k1; k++) o[k] = to_bf16(A[(size_t)k * cs + i]);
            }
        }
    }
    if (kp2 > K)
        for (int i = 0; i < M; i++) xb[(size_t)i * kp2 + K] = 0;
}

/* Grow-only buffers per thread: a step makes hundreds of these calls, and
 * fresh large allocations would each be new pages for the kernel to zero. */
static _Thread_local uint16_t *tl_xb;
static _Thread_local size_t tl_xb_cap;

static void *grow(void **p, size_t *cap, size_t need) {
    if (need <= *cap) return *p;
    void *q = realloc(*p, need);
    if (!q) return NULL;
    *p = q, *cap = need;
    return q;
}

/* 64-byte aligned (the kernels load panels with aligned loads), grow-only. */
static uint16_t *grow_panels(uint16_t **p, size_t *cap, size_t need) {
    if (need <= *cap) return *p;
    uint16_t *q = aligned_alloc(64, (need + 63) / 64 * 64);
    if (!q) return NULL;
    free(*p);
    *p = q, *cap = need;
    return q;
}

static _Thread_local uint16_t *tl_panels;
static _Thread_local size_t tl_panels_cap;

/* W = op(B)^T (W[n][k] = op(B)[k][n]) into panels of at least the needed size. */
static void pack_b(uint16_t *panels, int tb, const float *B, int ldb, int N, int K) {
    pack_panels(panels, B, tb ? (size_t)ldb : 1, tb ? 1 : (size_t)ldb, N, K);
}

static uint16_t *shared_panels;
static size_t shared_panels_cap;

const uint16_t *latent_tr_pack_b(int tb, const float *B, int ldb, int N, int K) {
    int np = (N + GEMM_PANEL - 1) / GEMM_PANEL;
    uint16_t *panels = grow_panels(&shared_panels, &shared_panels_cap, latent_gemm_bf16_bytes(np, K));
    if (panels) pack_b(panels, tb, B, ldb, N, K);
    return panels;
}

int latent_tr_gemm_b(int ta, int M, int N, int K, const float *A, int lda, const uint16_t *panels, int accumulate,
                     float *C, int ldc) {
    int np = (N + GEMM_PANEL - 1) / GEMM_PANEL, kp2 = (K + 1) / 2 * 2;
    uint16_t *xb = grow((void **)&tl_xb, &tl_xb_cap, (size_t)M * kp2 * sizeof(uint16_t));
    if (!xb) return -1;
    round_rows(xb, A, ta ? 1 : (size_t)lda, ta ? (size_t)lda : 1, M, K);
    if (accumulate) latent_gemm_bf16_run_acc(C, ldc, xb, M, N, K, panels, 0, np);
    else latent_gemm_bf16_run(C, ldc, xb, M, N, K, panels, 0, np);
    return 0;
}

/* C (M, N) = op(A) op(B) (+ C when accumulate), bf16 operands, F32 sums. */
static int gemm_bf16(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                     int accumulate, float *C, int ldc) {
    int np = (N + GEMM_PANEL - 1) / GEMM_PANEL;
    uint16_t *panels = grow_panels(&tl_panels, &tl_panels_cap, latent_gemm_bf16_bytes(np, K));
    if (!panels) return -1;
    pack_b(panels, tb, B, ldb, N, K);
    return latent_tr_gemm_b(ta, M, N, K, A, lda, panels, accumulate, C, ldc);
}

void latent_tr_gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                    int accumulate, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    /* out of memory for the packed operands: the F32 product instead */
    if (tr_bf16 && gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc) == 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda,
                B, ldb, accumulate ? 1.0f : 0.0f, C, ldc);
}
