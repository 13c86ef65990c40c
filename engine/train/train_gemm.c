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

/* W (N, K) with W[n][k] = src[n * rs + k * cs], as bf16 panels
 * [N/32][K/2][32][2] (gemm_bf16.c's layout), zero padded. */
static void pack_panels(uint16_t *d, const float *src, size_t rs, size_t cs, int N, int K) {
    int np = (N + GEMM_PANEL - 1) / GEMM_PANEL, kp = (K + 1) / 2;
    for (int pn = 0; pn < np; pn++)
        for (int q = 0; q < kp; q++) {
            uint16_t *dst = d + ((size_t)pn * kp + q) * GEMM_PANEL * 2;
            for (int j = 0; j < GEMM_PANEL; j++) {
                int row = pn * GEMM_PANEL + j;
                for (int h = 0; h < 2; h++) {
                    int kk = 2 * q + h;
                    dst[2 * j + h] = row < N && kk < K ? latent_f32_to_bf16(src[(size_t)row * rs + (size_t)kk * cs]) : 0;
                }
            }
        }
}

/* op(A) (M, K) as bf16 rows of even length. */
static void round_rows(uint16_t *xb, const float *A, size_t rs, size_t cs, int M, int K) {
    int kp2 = (K + 1) / 2 * 2;
    for (int i = 0; i < M; i++) {
        uint16_t *o = xb + (size_t)i * kp2;
        for (int k = 0; k < K; k++) o[k] = latent_f32_to_bf16(A[(size_t)i * rs + (size_t)k * cs]);
        if (kp2 > K) o[K] = 0;
    }
}

/* C (M, N) = op(A) op(B) (+ C when accumulate), bf16 operands, F32 sums. */
static int gemm_bf16(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                     int accumulate, float *C, int ldc) {
    int np = (N + GEMM_PANEL - 1) / GEMM_PANEL, kp2 = (K + 1) / 2 * 2;
    uint16_t *xb = malloc((size_t)M * kp2 * sizeof(uint16_t));
    /* the kernels load panels with aligned 64-byte loads */
    uint16_t *panels = aligned_alloc(64, (latent_gemm_bf16_bytes(np, K) + 63) / 64 * 64);
    float *tmp = accumulate ? malloc((size_t)M * N * sizeof(float)) : NULL;
    if (!xb || !panels || (accumulate && !tmp)) {
        free(xb), free(panels), free(tmp);
        return -1;
    }
    round_rows(xb, A, ta ? 1 : (size_t)lda, ta ? (size_t)lda : 1, M, K);
    /* W = op(B)^T: W[n][k] = op(B)[k][n] */
    pack_panels(panels, B, tb ? (size_t)ldb : 1, tb ? 1 : (size_t)ldb, N, K);
    if (!accumulate) {
        latent_gemm_bf16_run(C, ldc, xb, M, N, K, panels, 0, np);
    } else {
        latent_gemm_bf16_run(tmp, N, xb, M, N, K, panels, 0, np);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] += tmp[(size_t)i * N + j];
    }
    free(xb), free(panels), free(tmp);
    return 0;
}

void latent_tr_gemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                    int accumulate, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    /* out of memory for the packed operands: the F32 product instead */
    if (tr_bf16 && gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, accumulate, C, ldc) == 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda,
                B, ldb, accumulate ? 1.0f : 0.0f, C, ldc);
}
